//! Path MTU of tunnel SAs from ICMP (RFC 4301 §8.2.1, "Propagation of
//! PMTU"): a router on the way to the tunnel end that cannot forward one of
//! our ESP packets (DF set, or IPv6) sends the gateway an ICMP
//! "fragmentation needed" (RFC 792 type 3 code 4 with the next-hop MTU of
//! RFC 1191 §4) or an ICMPv6 Packet Too Big (RFC 4443 §3.2) quoting it. The
//! quoted outer header and ESP header name the SA (its endpoints and SPI);
//! the worker lowers that SA's path MTU, and packets that would not fit
//! once encapsulated get an ICMP error to their source as with the egress
//! port's MTU. This module parses the message; the checks against the SAD
//! are the worker's (`dataplane::worker`).
//!
//! The messages are not authenticated (RFC 4301 §6.1.1 lets a gateway
//! ignore them: `gateway.pmtu_timeout_s = 0`). What a forger needs to be
//! believed: an SA's endpoints, its SPI and a sequence number it has sent;
//! and a reported MTU only ever lowers the path MTU, never below
//! [`MIN_PMTU_V4`] / [`MIN_PMTU_V6`], for `pmtu_timeout_s` (aging, RFC 1191
//! §6.3, RFC 4301 §8.2.2).

use crate::wire::{checksum, icmp, icmpv6, ipv4, ipv6, udp};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// How far behind the newest sequence number an SA has sent a quoted one
/// may be (a router answers within milliseconds; 2^20 packets is a second
/// at a million packets a second on one SA). Older quotes are ignored, so
/// a forger cannot use the SA's first packets forever.
pub const SEQ_WINDOW: u64 = 1 << 20;

/// Milliseconds from the process's first call of this function to `now`
/// (0 for an instant before it): a clock that fits in an atomic, for the
/// path MTU's expiry ([`PathMtu`]).
pub fn epoch_ms(now: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    now.saturating_duration_since(epoch).as_millis() as u64
}

/// An outbound tunnel SA's path MTU learned from ICMP (the SAD's "Path
/// MTU", RFC 4301 §4.4.2.1 / §8.2.1) and when it is forgotten (§8.2.2
/// aging), in one atomic word: the MTU in bytes of the outer packet in
/// the low 16 bits, the expiry in [`epoch_ms`] milliseconds above; 0 =
/// none. Part of the immutable [`super::OutboundSa`], away from the
/// owner's per-packet counters: read per packet by whichever worker routes
/// the SA's packets, written only when a report is taken (by the worker
/// that receives it) or when an aged value is cleared. Every change is a
/// compare-and-swap of the whole word, so two reports, or a report and
/// an expiry, never mix.
#[derive(Debug, Default)]
pub struct PathMtu(AtomicU64);

impl Clone for PathMtu {
    /// A copy of the current value.
    fn clone(&self) -> Self {
        PathMtu(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

impl PathMtu {
    fn unpack(w: u64) -> (u16, u64) {
        (w as u16, w >> 16)
    }

    /// The path MTU if one is known and has not expired at `now_ms()`
    /// ([`epoch_ms`]); an expired one is cleared. Inlined into the
    /// per-packet PROTECT path: one relaxed load and a test while none is
    /// known; a known value is checked out of line.
    #[inline(always)]
    pub fn get(&self, now_ms: impl FnOnce() -> u64) -> Option<u16> {
        let w = self.0.load(Ordering::Relaxed);
        if w == 0 {
            return None;
        }
        self.known(w, now_ms())
    }

    /// The path MTU last stored, expired or not, without clearing it: for
    /// code that runs after the worker's [`Self::get`] for the same packet,
    /// such as TFC padding's cap in [`super::outbound::prepare`], or for
    /// the same dummy packet ([`super::outbound::prepare_dummy`]). Usually
    /// `get` has just cleared an expired value; after a handoff to the SA's
    /// owner, or for an inner fragment, some time may have passed, and the
    /// value may have expired or been lowered by a new report since: a
    /// cap from it can only be lower than the one the MTU check used, never
    /// above what fits the path. One relaxed load.
    #[inline]
    pub fn peek(&self) -> Option<u16> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            w => Some(Self::unpack(w).0),
        }
    }

    /// [`Self::get`] for a known word `w`: its MTU unless it has expired
    /// at `now_ms`, when it is cleared. Out of line: most SAs never learn
    /// a path MTU, and their packets pay only `get`'s load and test.
    #[inline(never)]
    fn known(&self, w: u64, now_ms: u64) -> Option<u16> {
        let (mtu, until) = Self::unpack(w);
        if now_ms >= until {
            // Only this value: a report that replaced it meanwhile stays.
            let _ = self.0.compare_exchange(w, 0, Ordering::Relaxed, Ordering::Relaxed);
            return None;
        }
        Some(mtu)
    }

    /// Takes a report of `mtu` bytes at `now_ms`, to hold until `until_ms`:
    /// true if it lowered the known path MTU or repeated it (then its
    /// expiry moves to `until_ms`, if that is a second or more later);
    /// false, changing nothing, if the known
    /// one is lower, or none is known and `mtu` is not below `ceiling` (the
    /// egress port's MTU).
    pub fn lower(&self, mtu: u16, now_ms: u64, until_ms: u64, ceiling: u32) -> bool {
        let new = (until_ms << 16) | mtu as u64;
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let (known, until) = Self::unpack(cur);
            let fresh = cur != 0 && now_ms < until;
            if (fresh && mtu > known) || (!fresh && mtu as u32 >= ceiling) {
                return false;
            }
            // A repeat that moves the expiry by less than a second is taken
            // without a write: a flood of reports does not keep rewriting
            // a word every worker reads per packet.
            if fresh && mtu == known && until_ms < until.saturating_add(1000) {
                return true;
            }
            match self.0.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(w) => cur = w,
            }
        }
    }

    /// Takes `old`'s value (an SA replacing `old` on the same tunnel).
    pub fn inherit(&self, old: &PathMtu) {
        self.0.store(old.0.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Lowest IPv4 path MTU taken from a report (Linux's default
/// `net.ipv4.route.min_pmtu`): a lower report is taken as this.
pub const MIN_PMTU_V4: u32 = 552;
/// Lowest IPv6 path MTU: the minimum link MTU (RFC 8200 §5; RFC 8201 §4: a
/// node never lowers its estimate below it).
pub const MIN_PMTU_V6: u32 = ipv6::MIN_MTU as u32;

/// What a "packet too big" report says about a packet we sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmtuReport {
    /// The MTU the router reported, in bytes (not yet raised to the floor).
    pub mtu: u32,
    /// Quoted outer source (ours if the packet was ours).
    pub src: IpAddr,
    /// Quoted outer destination.
    pub dst: IpAddr,
    /// Quoted UDP ports (source, destination) for ESP in UDP (RFC 3948);
    /// `None` for plain ESP.
    pub udp: Option<(u16, u16)>,
    /// Quoted SPI (never 0).
    pub spi: u32,
    /// Quoted sequence number (low 32 bits, RFC 4303 §2.2).
    pub seq: u32,
}

/// A quoted ESP header: the UDP ports around it (ESP in UDP), its SPI and
/// sequence number.
type QuotedEsp = (Option<(u16, u16)>, u32, u32);

/// The ESP header (SPI, sequence number) quoted after an outer header whose
/// upper-layer protocol is `protocol`, in `rest` (the quoted bytes after
/// the outer header, possibly truncated): ESP directly, or ESP in UDP with
/// the UDP ports. `None` for anything else or too few bytes.
fn quoted_esp(protocol: u8, rest: &[u8]) -> Option<QuotedEsp> {
    let (ports, esp) = match protocol {
        ipv4::PROTO_ESP => (None, rest),
        ipv4::PROTO_UDP => {
            let u = rest.get(..udp::HEADER_LEN)?;
            (Some((u16::from_be_bytes([u[0], u[1]]), u16::from_be_bytes([u[2], u[3]]))), &rest[udp::HEADER_LEN..])
        }
        _ => return None,
    };
    let h = esp.get(..8)?;
    let spi = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    (spi != 0).then_some((ports, spi, seq))
}

/// Parses `msg`, an ICMPv4 message (from its type byte to the end of the
/// IP packet that carries it): `Some` for a "fragmentation needed" (type
/// 3, code 4) with a valid checksum (RFC 792), a non-zero next-hop MTU
/// (RFC 1191 §4; a zero comes from routers older than it) and a quoted
/// IPv4 header (version 4, header length ≥ 20, options skipped, DF set,
/// not a later fragment) followed by an ESP header, or a UDP header and
/// an ESP header (so a quote of only 8 bytes after the header, RFC 792's
/// minimum, names no SA in ESP in UDP). `None` for anything else.
pub fn parse_v4(msg: &[u8]) -> Option<PmtuReport> {
    let h = msg.get(..icmp::HEADER_LEN)?;
    if h[icmp::TYPE] != icmp::TYPE_DEST_UNREACHABLE || h[icmp::CODE] != icmp::CODE_FRAG_NEEDED || checksum::sum(msg) != 0xffff {
        return None;
    }
    let mtu = u16::from_be_bytes([h[icmp::NEXT_HOP_MTU], h[icmp::NEXT_HOP_MTU + 1]]) as u32;
    let q = &msg[icmp::HEADER_LEN..];
    let qh = q.get(..ipv4::MIN_HEADER_LEN)?;
    let ihl = ((qh[0] & 0x0f) as usize) * 4;
    // A router sends code 4 only about a packet with DF set (RFC 1191
    // §3), and only a first fragment quotes the ESP header.
    let flags_frag = u16::from_be_bytes([qh[ipv4::FLAGS_FRAG], qh[ipv4::FLAGS_FRAG + 1]]);
    if mtu == 0 || qh[0] >> 4 != 4 || ihl < ipv4::MIN_HEADER_LEN || flags_frag & ipv4::FLAG_DF == 0 || flags_frag & 0x1fff != 0 {
        return None;
    }
    let (ports, spi, seq) = quoted_esp(qh[ipv4::PROTOCOL], q.get(ihl..)?)?;
    let addr = |at: usize| Ipv4Addr::new(qh[at], qh[at + 1], qh[at + 2], qh[at + 3]);
    let (src, dst) = (addr(ipv4::SRC), addr(ipv4::DST));
    Some(PmtuReport { mtu, src: IpAddr::V4(src), dst: IpAddr::V4(dst), udp: ports, spi, seq })
}

/// Parses `msg`, an ICMPv6 message from `src` to `dst` (from its type byte
/// to the end of the IPv6 payload): `Some` for a Packet Too Big (type 2,
/// any code, RFC 4443 §3.2) with a valid checksum (§2.3) quoting an IPv6
/// header whose next header is ESP or UDP (the gateway's own ESP packets
/// carry no extension headers) followed by an ESP header. `None` for
/// anything else.
pub fn parse_v6(src: &Ipv6Addr, dst: &Ipv6Addr, msg: &[u8]) -> Option<PmtuReport> {
    let h = msg.get(..icmpv6::HEADER_LEN)?;
    // The code is ignored by the receiver (RFC 4443 §3.2).
    if h[icmpv6::TYPE] != icmpv6::TYPE_PACKET_TOO_BIG || !ipv6::upper_layer_checksum_ok(src, dst, ipv6::NH_ICMPV6, msg) {
        return None;
    }
    let mtu = u32::from_be_bytes([h[icmpv6::MTU], h[icmpv6::MTU + 1], h[icmpv6::MTU + 2], h[icmpv6::MTU + 3]]);
    let q = &msg[icmpv6::HEADER_LEN..];
    let qh = q.get(..ipv6::HEADER_LEN)?;
    if qh[0] >> 4 != 6 {
        return None;
    }
    let (ports, spi, seq) = quoted_esp(qh[ipv6::NEXT_HEADER], &q[ipv6::HEADER_LEN..])?;
    let addr = |at: usize| -> Ipv6Addr { <[u8; 16]>::try_from(&qh[at..at + 16]).map(Ipv6Addr::from).unwrap_or(Ipv6Addr::UNSPECIFIED) };
    Some(PmtuReport { mtu, src: IpAddr::V6(addr(ipv6::SRC)), dst: IpAddr::V6(addr(ipv6::DST)), udp: ports, spi, seq })
}

/// The path MTU a report of `mtu` bytes sets for a tunnel whose outer
/// header is IPv6 (`v6`) or IPv4: `mtu` raised to the family's floor.
pub fn clamp(mtu: u32, v6: bool) -> u32 {
    mtu.max(if v6 { MIN_PMTU_V6 } else { MIN_PMTU_V4 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ICMP "fragmentation needed" (MTU `mtu`) quoting an IPv4 header
    /// 203.0.113.1 → 203.0.113.2 with `protocol` and then `rest`.
    fn v4(mtu: u16, protocol: u8, rest: &[u8]) -> Vec<u8> {
        let mut q = vec![0x45, 0, 0x05, 0xdc, 0, 1, 0x40, 0, 64, protocol, 0, 0, 203, 0, 113, 1, 203, 0, 113, 2];
        q.extend_from_slice(rest);
        let mut m = vec![3, 4, 0, 0, 0, 0];
        m.extend_from_slice(&mtu.to_be_bytes());
        m.extend_from_slice(&q);
        let ck = checksum::checksum(&m);
        m[2..4].copy_from_slice(&ck.to_be_bytes());
        m
    }

    const ESP: [u8; 8] = [0, 0, 0x03, 0xe9, 0, 0, 0, 7];

    #[test]
    fn esp_and_esp_in_udp_reports() {
        let r = parse_v4(&v4(1300, 50, &ESP)).expect("report");
        assert_eq!((r.mtu, r.spi, r.seq, r.udp), (1300, 1001, 7, None));
        assert_eq!((r.src, r.dst), ("203.0.113.1".parse().unwrap(), "203.0.113.2".parse().unwrap()));
        let mut u = vec![0x11, 0x94, 0x11, 0x94, 0, 100, 0, 0];
        u.extend_from_slice(&ESP);
        let r = parse_v4(&v4(1300, 17, &u)).expect("report");
        assert_eq!((r.udp, r.spi), (Some((4500, 4500)), 1001));
    }

    #[test]
    fn what_is_not_a_report_of_ours() {
        let good = v4(1300, 50, &ESP);
        let mut bad_ck = good.clone();
        bad_ck[7] ^= 1;
        let mut other_type = good.clone();
        other_type[1] = 1;
        let ck = checksum::checksum(&{
            let mut m = other_type.clone();
            m[2..4].copy_from_slice(&[0, 0]);
            m
        });
        other_type[2..4].copy_from_slice(&ck.to_be_bytes());
        for (what, m) in [
            ("bad checksum", bad_ck),
            ("code 1", other_type),
            ("MTU 0", v4(0, 50, &ESP)),
            ("TCP quoted", v4(1300, 6, &ESP)),
            ("SPI 0", v4(1300, 50, &[0, 0, 0, 0, 0, 0, 0, 1])),
            ("ESP truncated", v4(1300, 50, &ESP[..7])),
            ("UDP without ESP", v4(1300, 17, &[0x11, 0x94, 0x11, 0x94, 0, 100, 0, 0])),
            ("short", good[..20].to_vec()),
            ("quoted DF clear", {
                let mut m = v4(1300, 50, &ESP);
                m[8 + 6] = 0; // the quoted header's flags
                let ck = checksum::checksum(&{
                    let mut c = m.clone();
                    c[2..4].copy_from_slice(&[0, 0]);
                    c
                });
                m[2..4].copy_from_slice(&ck.to_be_bytes());
                m
            }),
        ] {
            assert_eq!(parse_v4(&m), None, "{what}");
        }
    }

    #[test]
    fn packet_too_big() {
        let (a, b): (Ipv6Addr, Ipv6Addr) = ("2001:db8:ff::9".parse().unwrap(), "2001:db8:ff::1".parse().unwrap());
        let mut q = vec![0x60, 0, 0, 0, 0x05, 0xa0, 50, 64];
        q.extend_from_slice(&b.octets());
        q.extend_from_slice(&"2001:db8:ff::2".parse::<Ipv6Addr>().unwrap().octets());
        q.extend_from_slice(&ESP);
        let mut m = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
        m.extend_from_slice(&q);
        let ck = ipv6::upper_layer_checksum(&a, &b, ipv6::NH_ICMPV6, &m);
        m[2..4].copy_from_slice(&ck.to_be_bytes());
        let r = parse_v6(&a, &b, &m).expect("report");
        assert_eq!((r.mtu, r.spi, r.seq, r.src, r.dst), (1280, 1001, 7, IpAddr::V6(b), "2001:db8:ff::2".parse().unwrap()));
        // The checksum covers the pseudo-header: another sender fails it.
        assert_eq!(parse_v6(&b, &b, &m), None);
        assert_eq!((clamp(68, false), clamp(1000, true), clamp(1400, false)), (552, 1280, 1400));
    }

    #[test]
    fn path_mtu_lowers_refreshes_and_ages() {
        let p = PathMtu::default();
        assert_eq!(p.get(|| 0), None);
        assert!(!p.lower(1500, 10, 1000, 1500), "not below the port's MTU");
        assert!(p.lower(1400, 10, 1000, 1500));
        assert!(!p.lower(1450, 20, 1100, 1500), "higher than the known one");
        assert!(p.lower(1400, 30, 2000, 1500), "equal: refreshed");
        assert_eq!(p.get(|| 1500), Some(1400), "past the first expiry, within the refreshed one");
        assert!(p.lower(1300, 40, 2000, 1500));
        assert_eq!(p.get(|| 1999), Some(1300));
        assert_eq!(p.get(|| 2000), None, "expired");
        assert_eq!(p.get(|| 0), None, "and cleared");
        assert!(p.lower(1450, 2100, 3000, 1500), "after expiry the port's MTU is the ceiling again");
        let q = PathMtu::default();
        q.inherit(&p);
        assert_eq!(q.get(|| 2999), Some(1450));
    }
}
