//! The Security Policy Database (RFC 4301 §4.4.1): ordered selectors with
//! PROTECT / BYPASS / DISCARD actions. The first entry in (priority, insertion
//! order) whose selector matches decides, exactly as a scan in that order
//! would ([`Spd::lookup_linear`], kept as the reference), but found by a
//! classifier whose cost stays nearly flat as rules grow:
//!
//! - each rule gets a *rank*, its position in (priority, insertion) order;
//!   the lowest matching rank wins;
//! - per family, a path-compressed binary trie of the rules' source
//!   prefixes; each source node owns a trie of the destination prefixes of
//!   its rules; each destination node holds the rules of that (source,
//!   destination) pair indexed by protocol and by port intervals
//!   (`ports.rs`): a binary search, not a scan, even for thousands of port
//!   rules under one pair;
//! - a lookup walks the source prefixes covering the key and, for each, the
//!   destination prefixes covering it; every node knows the best rank below
//!   it, so the walk stops wherever nothing left can beat the best match
//!   found so far.
//!
//! Cost: at most (distinct source prefix lengths on the key's path) ×
//! (destination ones) node visits, each O(1) plus a binary search over the
//! pair's port intervals; independent of how many rules do not cover the
//! key. Built once per snapshot (control thread); lookups never allocate.

mod ports;
mod trie;
#[cfg(test)]
mod tests;

use crate::wire::{ipv4, ipv6, WireError};
use std::net::IpAddr;
use trie::{Forest, Key, NONE};

/// The fields of a packet a selector looks at (the inner packet's, for
/// tunnel mode). Source and destination are of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol (IPv6: the upper-layer protocol after the extension
    /// headers, RFC 4301 §4.4.1.1 "Next Layer Protocol").
    pub protocol: u8,
    /// (source port, destination port) for TCP/UDP first fragments, else
    /// `None` (OPAQUE: only port-wildcard selectors match).
    pub ports: Option<(u16, u16)>,
}

/// An address as (is IPv6, the address as a 128-bit number: IPv4 in the
/// low 32 bits), the form prefixes compare.
#[inline]
pub fn addr_bits(ip: IpAddr) -> (bool, u128) {
    match ip {
        IpAddr::V4(a) => (false, u32::from(a) as u128),
        IpAddr::V6(a) => (true, u128::from(a)),
    }
}

impl FlowKey {
    /// The selector fields of the IP packet `ip` (IPv4, or IPv6 when the
    /// version nibble is 6), read through the checked `wire` views: the
    /// addresses, the protocol (IPv6: the upper-layer protocol after the
    /// extension headers) and the TCP/UDP ports of a first fragment, else
    /// OPAQUE (RFC 4301 §4.4.1.1). This is the key an inner packet is
    /// checked with against its SA's selectors after decapsulation (RFC
    /// 4301 §5.2). Errors: the header (or an IPv6 extension header) does
    /// not parse, as the `wire` view says.
    pub fn of_ip(ip: &[u8]) -> Result<FlowKey, WireError> {
        if ip.first().is_some_and(|v| v >> 4 == 6) {
            let p = ipv6::Ipv6Packet::new_checked(ip)?;
            let up = p.upper_layer()?;
            Ok(FlowKey { src: IpAddr::V6(p.src()), dst: IpAddr::V6(p.dst()), protocol: up.protocol, ports: p.ports(&up) })
        } else {
            let p = ipv4::Ipv4Packet::new_checked(ip)?;
            Ok(FlowKey { src: IpAddr::V4(p.src()), dst: IpAddr::V4(p.dst()), protocol: p.protocol(), ports: p.ports() })
        }
    }

    /// (is IPv6, source bits, destination bits), or `None` when the two
    /// addresses are of different families (never matches anything).
    #[inline]
    pub fn bits(&self) -> Option<(bool, u128, u128)> {
        match (addr_bits(self.src), addr_bits(self.dst)) {
            ((v6, s), (w6, d)) if v6 == w6 => Some((v6, s, d)),
            _ => None,
        }
    }
}

/// An IPv4 or IPv6 prefix: address and length, kept as 128-bit numbers
/// (IPv4 in the low 32 bits) with the family, so matching is a mask and a
/// compare. A prefix never contains an address of the other family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    bits: u128,
    mask: u128,
    /// Prefix length: 0..=32 for IPv4, 0..=128 for IPv6.
    pub len: u8,
    v6: bool,
}

impl Prefix {
    /// A prefix from an address and length (host bits are cleared; the
    /// length is capped at the family's width).
    pub fn new(addr: IpAddr, len: u8) -> Prefix {
        let (v6, bits) = addr_bits(addr);
        let width = if v6 { 128 } else { 32 };
        let len = len.min(width);
        let full = if v6 { u128::MAX } else { u32::MAX as u128 };
        let mask = if len == 0 { 0 } else { full & (full << (width - len) as u32) };
        Prefix { bits: bits & mask, mask, len, v6 }
    }
    /// True for an IPv6 prefix.
    #[inline]
    pub fn is_ipv6(&self) -> bool {
        self.v6
    }
    /// Network address.
    pub fn addr(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(self.bits.into())
        } else {
            IpAddr::V4((self.bits as u32).into())
        }
    }
    /// True if `ip` is inside the prefix (false for the other family).
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (v6, bits) = addr_bits(ip);
        v6 == self.v6 && self.contains_bits(bits)
    }
    /// True if the address `bits` ([`addr_bits`]), of this prefix's
    /// family, is inside it.
    #[inline]
    pub fn contains_bits(&self, bits: u128) -> bool {
        bits & self.mask == self.bits
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

/// The port range of a selector that does not select ports: 0..=65535,
/// which also matches OPAQUE keys (RFC 4301 §4.4.1.1: non-first fragments,
/// protocols without ports).
pub const ANY_PORTS: (u16, u16) = (0, u16::MAX);

/// A selector (RFC 4301 §4.4.1.1). Source and destination prefixes are of
/// one family; it matches packets of that family only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selector {
    /// Source prefix.
    pub src: Prefix,
    /// Destination prefix.
    pub dst: Prefix,
    /// Protocol, `None` = any.
    pub protocol: Option<u8>,
    /// Inclusive source port range.
    pub src_ports: (u16, u16),
    /// Inclusive destination port range.
    pub dst_ports: (u16, u16),
}

impl Selector {
    /// True if either port range is narrower than [`ANY_PORTS`]: the
    /// selector then matches no OPAQUE key (RFC 4301 §4.4.1.1).
    #[inline]
    pub fn selects_ports(&self) -> bool {
        self.src_ports != ANY_PORTS || self.dst_ports != ANY_PORTS
    }
    /// True if `k` matches every field (and is of the selector's family).
    #[inline]
    pub fn matches(&self, k: &FlowKey) -> bool {
        match k.bits() {
            Some((v6, s, d)) => v6 == self.src.v6 && self.matches_bits(s, d, k),
            None => false,
        }
    }

    /// [`Selector::matches`] for a key whose family is known to be the
    /// selector's, with its addresses as bits ([`FlowKey::bits`]).
    #[inline]
    fn matches_bits(&self, src: u128, dst: u128, k: &FlowKey) -> bool {
        if !self.src.contains_bits(src) || !self.dst.contains_bits(dst) {
            return false;
        }
        if let Some(p) = self.protocol {
            if p != k.protocol {
                return false;
            }
        }
        match k.ports {
            None => !self.selects_ports(),
            Some((s, d)) => {
                (self.src_ports.0..=self.src_ports.1).contains(&s) && (self.dst_ports.0..=self.dst_ports.1).contains(&d)
            }
        }
    }
}

/// What to do with a matching packet. `Protect` holds an index into the
/// SAD's outbound (outbound SPD) or inbound (inbound SPD) SA list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpdAction {
    /// Apply SA number `n`.
    Protect(usize),
    /// Forward in the clear.
    Bypass,
    /// Drop.
    Discard,
}

/// One SPD entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpdEntry {
    /// Selector.
    pub selector: Selector,
    /// Lower wins.
    pub priority: u32,
    /// Action.
    pub action: SpdAction,
}

/// One family's entries in lookup order and their classifier (`K`: `u32`
/// for IPv4, `u128` for IPv6).
#[derive(Debug, Clone)]
struct Family<K> {
    /// Sorted by (priority, insertion order); the index is the rank.
    entries: Vec<SpdEntry>,
    /// Source tries (root 0 when there are entries); a node's value is the
    /// root of its destination trie in `dst`.
    src: Forest<K>,
    /// Destination tries; a node's value indexes `groups`.
    dst: Forest<K>,
    groups: Vec<ports::Group>,
}

impl<K> Default for Family<K> {
    fn default() -> Self {
        Family { entries: Vec::new(), src: Forest::default(), dst: Forest::default(), groups: Vec::new() }
    }
}

impl<K: Key + From128> Family<K> {
    fn new(entries: Vec<SpdEntry>) -> Family<K> {
        let mut f = Family { entries, ..Family::default() };
        if f.entries.is_empty() {
            return f;
        }
        let src_root = f.src.new_root();
        let mut members: Vec<Vec<u32>> = Vec::new();
        let mut dst_roots = Vec::new();
        for (rank, e) in f.entries.iter().enumerate() {
            let rank = rank as u32;
            let (s, d) = (&e.selector.src, &e.selector.dst);
            let sn = f.src.insert(src_root, K::from128(s.bits), s.len);
            if f.src.value(sn) == NONE {
                let root = f.dst.new_root();
                dst_roots.push(root);
                f.src.set_value(sn, root);
            }
            f.src.offer_rank(sn, rank);
            let dn = f.dst.insert(f.src.value(sn), K::from128(d.bits), d.len);
            if f.dst.value(dn) == NONE {
                f.dst.set_value(dn, members.len() as u32);
                members.push(Vec::new());
            }
            f.dst.offer_rank(dn, rank);
            members[f.dst.value(dn) as usize].push(rank);
        }
        f.groups = members
            .iter()
            .map(|m| ports::Group::build(&m.iter().map(|&r| (r, &f.entries[r as usize].selector)).collect::<Vec<_>>()))
            .collect();
        f.src.finish(src_root);
        for root in dst_roots {
            f.dst.finish(root);
        }
        f
    }

    /// The best rank matching the key (`NONE` if none).
    #[inline]
    fn classify(&self, s: K, d: K, protocol: u8, ports: Option<(u16, u16)>) -> u32 {
        let mut best = NONE;
        if self.entries.is_empty() {
            return best;
        }
        self.src.walk(0, s, &mut best, |dst_root, best| {
            self.dst.walk(dst_root, d, best, |g, best| {
                if let Some(g) = self.groups.get(g as usize) {
                    g.classify(protocol, ports, best);
                }
            })
        });
        best
    }

    /// The action of the best rank matching `k`, whose addresses are `s`
    /// and `d`.
    #[inline]
    fn lookup(&self, s: K, d: K, k: &FlowKey) -> Option<SpdAction> {
        let rank = self.classify(s, d, k.protocol, k.ports);
        self.entries.get(rank as usize).map(|e| e.action)
    }
}

/// An SPD: per family (IPv4 and IPv6 selectors never mix), the entries in
/// (priority, insertion order) and the classifier over them (module docs).
#[derive(Debug, Clone, Default)]
pub struct Spd {
    v4: Family<u32>,
    v6: Family<u128>,
    /// Whether, in either family, a BYPASS or DISCARD entry comes before a
    /// PROTECT entry in lookup order ([`Spd::protect_shadowed`]).
    protect_shadowed: bool,
    /// The source and destination prefixes and protocol of the IPv4
    /// entries that select ports, each once ([`Spd::ports_may_select_v4`]),
    /// unless there are more than [`PORT_PAIRS_MAX`] of them
    /// (`port_pairs_over`).
    port_pairs_v4: Vec<(Prefix, Prefix, Option<u8>)>,
    /// More than [`PORT_PAIRS_MAX`] triples: every IPv4 key may be selected
    /// by ports.
    port_pairs_over: bool,
}

/// Most distinct (source, destination, protocol) triples of port-selecting
/// IPv4 entries [`Spd::ports_may_select_v4`] scans; above it, it answers
/// true for every key (a fragment's scan stays bounded however many port
/// policies the SPD holds).
pub const PORT_PAIRS_MAX: usize = 64;

/// An address from [`addr_bits`] as a trie key of its family's width.
trait From128 {
    fn from128(bits: u128) -> Self;
}

impl From128 for u32 {
    #[inline]
    fn from128(bits: u128) -> u32 {
        bits as u32
    }
}

impl From128 for u128 {
    #[inline]
    fn from128(bits: u128) -> u128 {
        bits
    }
}

impl Spd {
    /// Builds an SPD (control thread): sorts by priority, stably so ties
    /// keep their order, and builds the classifier, O(n log n) in the
    /// number of entries for typical rule sets.
    pub fn new(entries: Vec<SpdEntry>) -> Spd {
        let (mut v6, mut v4): (Vec<SpdEntry>, Vec<SpdEntry>) = entries.into_iter().partition(|e| e.selector.src.is_ipv6());
        v4.sort_by_key(|e| e.priority);
        v6.sort_by_key(|e| e.priority);
        let shadowed = |v: &[SpdEntry]| {
            let last_protect = v.iter().rposition(|e| matches!(e.action, SpdAction::Protect(_)));
            last_protect.is_some_and(|l| v[..l].iter().any(|e| !matches!(e.action, SpdAction::Protect(_))))
        };
        let protect_shadowed = shadowed(&v4) || shadowed(&v6);
        let mut pairs: Vec<(Prefix, Prefix, Option<u8>)> = Vec::new();
        for s in v4.iter().map(|e| e.selector).filter(Selector::selects_ports) {
            let t = (s.src, s.dst, s.protocol);
            if !pairs.contains(&t) {
                pairs.push(t);
            }
            if pairs.len() > PORT_PAIRS_MAX {
                break;
            }
        }
        let port_pairs_over = pairs.len() > PORT_PAIRS_MAX;
        if port_pairs_over {
            pairs.clear();
        }
        Spd { v4: Family::new(v4), v6: Family::new(v6), protect_shadowed, port_pairs_v4: pairs, port_pairs_over }
    }

    /// True when some IPv4 entry selecting a port range other than all
    /// ports may match packets from `k.src` to `k.dst` of protocol
    /// `k.protocol` (its ports are not read): a datagram between them may
    /// then have its first fragment (with ports) and its other fragments
    /// (without: OPAQUE, RFC 4301 §7.1) classified apart. Scans at most
    /// [`PORT_PAIRS_MAX`] distinct (source, destination, protocol) triples,
    /// built with the SPD; with more, true for every IPv4 key. The entries'
    /// ranks are not weighed: an entry that an earlier any-port entry
    /// shadows still counts.
    pub fn ports_may_select_v4(&self, k: &FlowKey) -> bool {
        if self.port_pairs_over {
            return k.src.is_ipv4();
        }
        self.port_pairs_v4.iter().any(|(s, d, p)| s.contains(k.src) && d.contains(k.dst) && p.is_none_or(|p| p == k.protocol))
    }

    /// True when some BYPASS or DISCARD entry comes before some PROTECT
    /// entry of its family in lookup order, so it may take traffic a later
    /// PROTECT entry selects (RFC 4301 §4.4.1: the SPD is ordered, the
    /// first match decides). Only then can a packet decrypted with an SA
    /// whose own selectors match it still be one the SPD does not protect
    /// (the worker then looks it up: README, Forwarding and header rules).
    /// Computed by rank alone, so it may be true with no selector overlap;
    /// O(entries) when built.
    #[inline]
    pub fn protect_shadowed(&self) -> bool {
        self.protect_shadowed
    }

    /// The entries of one family (`ipv6`) in lookup order.
    pub fn entries(&self, ipv6: bool) -> &[SpdEntry] {
        if ipv6 {
            &self.v6.entries
        } else {
            &self.v4.entries
        }
    }

    /// The action of the first matching entry of the key's family in
    /// (priority, insertion) order, `None` when nothing matches (the caller
    /// discards and counts it, RFC 4301 §5.1). Families of up to 8 entries
    /// are scanned, larger ones classified (module docs). Never allocates.
    #[inline]
    pub fn lookup(&self, k: &FlowKey) -> Option<SpdAction> {
        let (v6, s, d) = k.bits()?;
        let entries = self.entries(v6);
        if entries.len() <= SCAN_MAX {
            return scan(entries, s, d, k);
        }
        self.classify(v6, s, d, k)
    }

    /// The classifier's answer, also for families small enough that
    /// [`Spd::lookup`] scans them (the tests compare it with the scan).
    #[inline]
    fn classify(&self, v6: bool, s: u128, d: u128, k: &FlowKey) -> Option<SpdAction> {
        if v6 {
            self.v6.lookup(s, d, k)
        } else {
            self.v4.lookup(s as u32, d as u32, k)
        }
    }

    /// [`Spd::lookup`] for a burst: `out[i]` gets the action of `keys[i]`,
    /// for `min(keys.len(), out.len())` keys (returned).
    #[inline]
    pub fn lookup_burst(&self, keys: &[FlowKey], out: &mut [Option<SpdAction>]) -> usize {
        let n = keys.len().min(out.len());
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.lookup(k);
        }
        n
    }

    /// The same answer as [`Spd::lookup`] by the plain linear scan of the
    /// family's entries in order: the reference the classifier is tested
    /// and benchmarked against. O(entries); not for the data path.
    pub fn lookup_linear(&self, k: &FlowKey) -> Option<SpdAction> {
        let (v6, s, d) = k.bits()?;
        scan(self.entries(v6), s, d, k)
    }
}

/// A family with at most this many entries is scanned rather than
/// classified: a scan of 8 selectors costs less than the fixed cost of the
/// trie walks (measured with `cargo bench --bench spd`: 1 rule, 4 ns
/// scanned vs 16 ns classified), and a gateway with a handful of policies
/// should not pay for the many-policy case.
const SCAN_MAX: usize = 8;

/// The action of the first entry of `entries` (one family, in lookup
/// order) matching `k`, whose addresses are `s` and `d`.
#[inline]
fn scan(entries: &[SpdEntry], s: u128, d: u128, k: &FlowKey) -> Option<SpdAction> {
    entries.iter().find(|e| e.selector.matches_bits(s, d, k)).map(|e| e.action)
}
