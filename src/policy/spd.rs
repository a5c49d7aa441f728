//! The Security Policy Database (RFC 4301 §4.4.1): ordered selectors with
//! PROTECT / BYPASS / DISCARD actions. Lookup scans entries in priority order
//! (lower number first, ties by insertion order); a faster classifier is
//! future work (issue 6).

use std::net::IpAddr;

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
        let any_ports = self.src_ports == (0, u16::MAX) && self.dst_ports == (0, u16::MAX);
        match k.ports {
            None => any_ports,
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

/// An SPD: entries kept sorted by (priority, insertion order), IPv4 and
/// IPv6 selectors in separate lists so a lookup scans only its family.
#[derive(Debug, Clone, Default)]
pub struct Spd {
    v4: Vec<SpdEntry>,
    v6: Vec<SpdEntry>,
}

impl Spd {
    /// Builds an SPD; the sort is stable so ties keep their order.
    pub fn new(entries: Vec<SpdEntry>) -> Spd {
        let (mut v6, mut v4): (Vec<SpdEntry>, Vec<SpdEntry>) = entries.into_iter().partition(|e| e.selector.src.is_ipv6());
        v4.sort_by_key(|e| e.priority);
        v6.sort_by_key(|e| e.priority);
        Spd { v4, v6 }
    }

    /// The entries of one family (`ipv6`) in lookup order.
    pub fn entries(&self, ipv6: bool) -> &[SpdEntry] {
        if ipv6 {
            &self.v6
        } else {
            &self.v4
        }
    }

    /// The action of the first matching entry of the key's family, `None`
    /// when nothing matches (the caller discards and counts it, RFC 4301
    /// §5.1).
    #[inline]
    pub fn lookup(&self, k: &FlowKey) -> Option<SpdAction> {
        let (v6, s, d) = k.bits()?;
        self.entries(v6).iter().find(|e| e.selector.matches_bits(s, d, k)).map(|e| e.action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(src: &str, dst: &str, proto: Option<u8>, dp: (u16, u16)) -> Selector {
        let p = |s: &str| {
            let (a, l) = s.split_once('/').unwrap();
            Prefix::new(a.parse().unwrap(), l.parse().unwrap())
        };
        Selector { src: p(src), dst: p(dst), protocol: proto, src_ports: (0, 65535), dst_ports: dp }
    }

    fn key(dst: &str, proto: u8, dport: Option<u16>) -> FlowKey {
        FlowKey { src: "192.0.2.10".parse().unwrap(), dst: dst.parse().unwrap(), protocol: proto, ports: dport.map(|d| (1000, d)) }
    }

    #[test]
    fn priority_then_order() {
        let spd = Spd::new(vec![
            SpdEntry { selector: sel("0.0.0.0/0", "198.51.100.0/24", None, (0, 65535)), priority: 50, action: SpdAction::Protect(0) },
            SpdEntry { selector: sel("0.0.0.0/0", "198.51.100.0/24", Some(17), (53, 53)), priority: 10, action: SpdAction::Bypass },
            SpdEntry { selector: sel("0.0.0.0/0", "198.51.100.0/24", Some(17), (53, 53)), priority: 10, action: SpdAction::Discard },
        ]);
        assert_eq!(spd.lookup(&key("198.51.100.10", 17, Some(53))), Some(SpdAction::Bypass));
        assert_eq!(spd.lookup(&key("198.51.100.10", 17, Some(54))), Some(SpdAction::Protect(0)));
        assert_eq!(spd.lookup(&key("198.51.101.10", 17, Some(53))), None);
    }

    #[test]
    fn opaque_ports_match_only_wildcards() {
        let spd = Spd::new(vec![SpdEntry { selector: sel("0.0.0.0/0", "0.0.0.0/0", Some(17), (0, 100)), priority: 1, action: SpdAction::Bypass }]);
        assert_eq!(spd.lookup(&key("1.2.3.4", 17, None)), None);
        assert_eq!(spd.lookup(&key("1.2.3.4", 17, Some(0))), Some(SpdAction::Bypass));
        assert_eq!(spd.lookup(&key("1.2.3.4", 17, Some(100))), Some(SpdAction::Bypass));
        assert_eq!(spd.lookup(&key("1.2.3.4", 17, Some(101))), None);
    }

    #[test]
    fn families_never_mix() {
        let v6 = sel("2001:db8:a::/48", "::/0", None, (0, 65535));
        let v4 = sel("0.0.0.0/0", "0.0.0.0/0", None, (0, 65535));
        let spd = Spd::new(vec![
            SpdEntry { selector: v4, priority: 1, action: SpdAction::Discard },
            SpdEntry { selector: v6, priority: 2, action: SpdAction::Bypass },
        ]);
        let k6 = FlowKey { src: "2001:db8:a::10".parse().unwrap(), dst: "2001:db8:b::10".parse().unwrap(), protocol: 17, ports: Some((1, 2)) };
        assert_eq!(spd.lookup(&k6), Some(SpdAction::Bypass), "the v4 catch-all does not match IPv6");
        assert_eq!(spd.lookup(&key("198.51.100.10", 17, None)), Some(SpdAction::Discard));
        let other = FlowKey { src: "2001:db9::1".parse().unwrap(), ..k6 };
        assert_eq!(spd.lookup(&other), None);
        // An IPv4-mapped IPv6 address is IPv6, not the IPv4 address.
        let mapped = FlowKey { src: "::ffff:192.0.2.10".parse().unwrap(), dst: "::ffff:198.51.100.10".parse().unwrap(), ..k6 };
        assert_eq!(spd.lookup(&mapped), None);
        let mixed = FlowKey { src: "192.0.2.10".parse().unwrap(), ..k6 };
        assert_eq!(spd.lookup(&mixed), None);
        assert!(!Prefix::new("::".parse().unwrap(), 0).contains("1.2.3.4".parse().unwrap()));
        assert!(Prefix::new("2001:db8::".parse().unwrap(), 127).contains("2001:db8::1".parse().unwrap()));
        assert!(!Prefix::new("2001:db8::".parse().unwrap(), 128).contains("2001:db8::1".parse().unwrap()));
        assert_eq!(Prefix::new("2001:db8::ff".parse().unwrap(), 120).to_string(), "2001:db8::/120");
        assert_eq!(Prefix::new("10.1.2.3".parse().unwrap(), 8).to_string(), "10.0.0.0/8");
    }
}
