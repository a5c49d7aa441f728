//! IPv4 headers (RFC 791).

use super::{be16, checksum, need, WireError};
use std::net::Ipv4Addr;

/// Version/IHL byte offset.
pub const VER_IHL: usize = 0;
/// DS field + ECN byte offset (RFC 2474, RFC 3168).
pub const TOS: usize = 1;
/// Total length offset.
pub const TOTAL_LEN: usize = 2;
/// Identification offset.
pub const IDENT: usize = 4;
/// Flags + fragment offset.
pub const FLAGS_FRAG: usize = 6;
/// TTL offset.
pub const TTL: usize = 8;
/// Protocol offset.
pub const PROTOCOL: usize = 9;
/// Header checksum offset.
pub const CHECKSUM: usize = 10;
/// Source address offset.
pub const SRC: usize = 12;
/// Destination address offset.
pub const DST: usize = 16;
/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// DF flag in the flags/fragment word.
pub const FLAG_DF: u16 = 0x4000;
/// MF flag in the flags/fragment word.
pub const FLAG_MF: u16 = 0x2000;

/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of IPv4-in-IP (tunnel mode next header, RFC 4303 §3.1.2).
pub const PROTO_IPIP: u8 = 4;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol number of ESP (RFC 4303).
pub const PROTO_ESP: u8 = 50;
/// "No next header": an ESP dummy packet (RFC 4303 §2.6).
pub const PROTO_NONE: u8 = 59;

/// Checked view of an IPv4 packet: the header is complete, its checksum is
/// right, and `total_len` bytes are present (bytes after it, e.g. Ethernet
/// padding, are outside the view).
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<'a> {
    buf: &'a [u8],
    header_len: usize,
}

/// Option types (RFC 791 §3.1): End of Option List, No Operation, Loose
/// and Strict Source and Record Route.
pub const OPT_EOL: u8 = 0;
/// No Operation (one byte).
pub const OPT_NOP: u8 = 1;
/// Loose Source and Record Route.
pub const OPT_LSRR: u8 = 0x83;
/// Strict Source and Record Route.
pub const OPT_SSRR: u8 = 0x89;

/// Walks the IPv4 options `opts` (the header past its first 20 bytes, RFC
/// 791 §3.1): End of Option List ends them, No Operation is one byte, any
/// other option has a length byte of at least 2 that stays within the
/// header. `Ok(true)` when a source route (LSRR/SSRR) is among them,
/// `Err(offset in opts)` at the first option that breaks those rules.
/// Out of line: most headers have no options, and the header parse it is
/// called from stays small enough to inline.
#[inline(never)]
pub fn scan_options(opts: &[u8]) -> Result<bool, usize> {
    let mut at = 0;
    let mut routed = false;
    while let Some(&ty) = opts.get(at) {
        match ty {
            OPT_EOL => break,
            OPT_NOP => at += 1,
            _ => {
                let len = *opts.get(at + 1).ok_or(at)? as usize;
                if len < 2 || at + len > opts.len() {
                    return Err(at);
                }
                routed |= ty == OPT_LSRR || ty == OPT_SSRR;
                at += len;
            }
        }
    }
    Ok(routed)
}

/// Largest IPv4 header (IHL 15): 60 bytes.
pub const MAX_HEADER_LEN: usize = 60;

/// The option type's copied flag (RFC 791 §3.1): the option goes into every
/// fragment, not only the first.
pub const OPT_COPIED: u8 = 0x80;

/// The header of a non-first fragment of the IPv4 packet whose header is
/// `header` (20 bytes and its options, RFC 791 §3.2): the fixed 20 bytes
/// and only the options whose copied flag is set, in order, padded with
/// End of Option List to a multiple of 4 bytes, the IHL set to match;
/// length, flags, offset and checksum are left for the caller. Written
/// into `out`; returns its length (20 when no option is copied). `None`
/// for options that break [`scan_options`]' rules or a `header` shorter
/// than 20 or longer than [`MAX_HEADER_LEN`].
pub fn later_fragment_header(header: &[u8], out: &mut [u8; MAX_HEADER_LEN]) -> Option<usize> {
    if header.len() < MIN_HEADER_LEN || header.len() > MAX_HEADER_LEN {
        return None;
    }
    out[..MIN_HEADER_LEN].copy_from_slice(&header[..MIN_HEADER_LEN]);
    let opts = &header[MIN_HEADER_LEN..];
    let (mut at, mut n) = (0, MIN_HEADER_LEN);
    while let Some(&ty) = opts.get(at) {
        match ty {
            OPT_EOL => break,
            OPT_NOP => at += 1,
            _ => {
                let len = *opts.get(at + 1)? as usize;
                let opt = opts.get(at..at + len).filter(|_| len >= 2)?;
                if ty & OPT_COPIED != 0 {
                    out[n..n + len].copy_from_slice(opt);
                    n += len;
                }
                at += len;
            }
        }
    }
    let padded = n.div_ceil(4) * 4;
    out[n..padded].fill(OPT_EOL);
    out[VER_IHL] = 0x40 | (padded / 4) as u8;
    Some(padded)
}

impl<'a> Ipv4Packet<'a> {
    /// Validates version 4, IHL ≥ 5, header checksum, and that the total
    /// length covers the header and fits in `buf`.
    #[inline(always)]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        // etherparse checks version, IHL and that the header fits in `buf`;
        // the total length is checked against the header length below.
        let h = etherparse::Ipv4HeaderSlice::from_slice(buf).map_err(|_| {
            if buf.len() < MIN_HEADER_LEN {
                WireError::Truncated { layer: "ipv4", offset: 0, need: MIN_HEADER_LEN, have: buf.len() }
            } else {
                WireError::BadField { layer: "ipv4", field: "version/ihl/total_len", value: be16(buf, 0) as u32 }
            }
        })?;
        let header_len = h.slice().len();
        let total = h.total_len() as usize;
        if total < header_len {
            return Err(WireError::BadField { layer: "ipv4", field: "total length below header length", value: total as u32 });
        }
        need("ipv4", buf, total)?;
        if header_len > MIN_HEADER_LEN {
            if let Err(at) = scan_options(&buf[MIN_HEADER_LEN..header_len]) {
                return Err(WireError::BadField { layer: "ipv4", field: "options", value: (MIN_HEADER_LEN + at) as u32 });
            }
        }
        if checksum::sum(&buf[..header_len]) != 0xffff {
            return Err(WireError::BadField { layer: "ipv4", field: "header checksum", value: be16(buf, CHECKSUM) as u32 });
        }
        Ok(Ipv4Packet { buf: &buf[..total], header_len })
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        self.header_len
    }
    /// True if the options hold a Loose or Strict Source and Record Route
    /// (RFC 791 §3.1).
    pub fn source_routed(&self) -> bool {
        scan_options(&self.buf[MIN_HEADER_LEN..self.header_len]) == Ok(true)
    }
    /// Total length in bytes.
    pub fn total_len(&self) -> usize {
        self.buf.len()
    }
    /// DS field and ECN byte.
    pub fn tos(&self) -> u8 {
        self.buf[TOS]
    }
    /// Flags and fragment offset word.
    pub fn flags_frag(&self) -> u16 {
        be16(self.buf, FLAGS_FRAG)
    }
    /// True if DF is set.
    pub fn df(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }
    /// True if this is a fragment (MF set or non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | 0x1fff) != 0
    }
    /// TTL.
    pub fn ttl(&self) -> u8 {
        self.buf[TTL]
    }
    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.buf[PROTOCOL]
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.buf[SRC], self.buf[SRC + 1], self.buf[SRC + 2], self.buf[SRC + 3])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.buf[DST], self.buf[DST + 1], self.buf[DST + 2], self.buf[DST + 3])
    }
    /// Bytes after the header, up to the total length.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.header_len..]
    }
    /// Source and destination ports for TCP/UDP first fragments with at least
    /// 4 payload bytes, else `None` (RFC 4301 §4.4.1.1 OPAQUE).
    pub fn ports(&self) -> Option<(u16, u16)> {
        let p = self.protocol();
        if (p == PROTO_TCP || p == PROTO_UDP) && self.flags_frag() & 0x1fff == 0 && self.payload().len() >= 4 {
            let l4 = self.payload();
            Some((be16(l4, 0), be16(l4, 2)))
        } else {
            None
        }
    }
}

/// Decrements the TTL of the IPv4 header at the start of `hdr` by one and
/// updates the header checksum incrementally (RFC 1624). `hdr` must hold at
/// least 20 bytes (the caller has checked it with [`Ipv4Packet::new_checked`]).
#[inline(always)]
pub fn decrement_ttl(hdr: &mut [u8]) {
    if hdr.len() < MIN_HEADER_LEN {
        return;
    }
    let old = be16(hdr, TTL);
    hdr[TTL] = hdr[TTL].wrapping_sub(1);
    let new = be16(hdr, TTL);
    let ck = checksum::update16(be16(hdr, CHECKSUM), old, new);
    hdr[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
}

/// Sets the DS + ECN byte of the IPv4 header at the start of `hdr` and
/// updates the header checksum incrementally (RFC 1624). `hdr` must hold at
/// least 20 bytes of a checked header.
pub fn set_tos(hdr: &mut [u8], tos: u8) {
    if hdr.len() < MIN_HEADER_LEN {
        return;
    }
    let old = be16(hdr, VER_IHL);
    hdr[TOS] = tos;
    let new = be16(hdr, VER_IHL);
    let ck = checksum::update16(be16(hdr, CHECKSUM), old, new);
    hdr[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
}

/// Recomputes the TCP (RFC 793 §3.1) or UDP (RFC 768) checksum of the IPv4
/// packet `pkt` (header + payload, `pkt.len()` = its total length) over the
/// pseudo-header of the addresses it now carries, in place. Leaves alone,
/// and returns false for: other protocols (ICMP has no pseudo-header), a
/// fragment (the checksum covers the whole datagram), a segment too short
/// to hold its checksum field, and UDP sent without a checksum (field 0,
/// RFC 768). A computed UDP checksum of 0 is sent as 0xFFFF (RFC 768).
/// Used after NAT-T transport-mode decapsulation (RFC 3948 §3.1.2).
pub fn recompute_l4_checksum(pkt: &mut [u8]) -> bool {
    if pkt.len() < MIN_HEADER_LEN {
        return false;
    }
    let hl = (pkt[VER_IHL] & 0x0f) as usize * 4;
    let proto = pkt[PROTOCOL];
    let field = match proto {
        PROTO_TCP => 16,
        PROTO_UDP => 6,
        _ => return false,
    };
    if be16(pkt, FLAGS_FRAG) & (FLAG_MF | 0x1fff) != 0 || pkt.len() < hl + field + 2 || pkt.len() - hl > u16::MAX as usize {
        return false;
    }
    let (hdr, l4) = pkt.split_at_mut(hl);
    if proto == PROTO_UDP && l4[field..field + 2] == [0, 0] {
        return false;
    }
    let mut pseudo = [0u8; 12];
    pseudo[..4].copy_from_slice(&hdr[SRC..SRC + 4]);
    pseudo[4..8].copy_from_slice(&hdr[DST..DST + 4]);
    pseudo[9] = proto;
    pseudo[10..12].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    l4[field..field + 2].copy_from_slice(&[0, 0]);
    let mut ck = checksum::with_pseudo(&pseudo, l4);
    if ck == 0 && proto == PROTO_UDP {
        ck = 0xffff;
    }
    l4[field..field + 2].copy_from_slice(&ck.to_be_bytes());
    true
}

/// Writes a complete 20-byte IPv4 header without options into `hdr[..20]`,
/// checksum included (no-op if `hdr` is shorter). The checksum (RFC 1071)
/// is summed from the field values, not read back from the bytes written:
/// this runs once per packet on the outbound path.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn write_header(
    hdr: &mut [u8],
    tos: u8,
    total_len: u16,
    ident: u16,
    flags_frag: u16,
    ttl: u8,
    protocol: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
) {
    let Some(hdr) = hdr.get_mut(..MIN_HEADER_LEN) else { return };
    let (s, d) = (u32::from(src), u32::from(dst));
    let words = [
        0x4500 | tos as u32,
        total_len as u32,
        ident as u32,
        flags_frag as u32,
        (ttl as u32) << 8 | protocol as u32,
        s >> 16,
        s & 0xffff,
        d >> 16,
        d & 0xffff,
    ];
    let mut acc: u32 = words.iter().sum();
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    let ck = !(acc as u16);
    let mut h = [0u8; MIN_HEADER_LEN];
    h[VER_IHL] = 0x45;
    h[TOS] = tos;
    h[TOTAL_LEN..TOTAL_LEN + 2].copy_from_slice(&total_len.to_be_bytes());
    h[IDENT..IDENT + 2].copy_from_slice(&ident.to_be_bytes());
    h[FLAGS_FRAG..FLAGS_FRAG + 2].copy_from_slice(&flags_frag.to_be_bytes());
    h[TTL] = ttl;
    h[PROTOCOL] = protocol;
    h[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
    h[SRC..SRC + 4].copy_from_slice(&src.octets());
    h[DST..DST + 4].copy_from_slice(&dst.octets());
    hdr.copy_from_slice(&h);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut p = vec![0u8; 28];
        write_header(&mut p, 0xb8, 28, 7, FLAG_DF, 64, PROTO_UDP, Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 10));
        p[20..24].copy_from_slice(&[0x30, 0x39, 0x00, 0x35]);
        p
    }

    /// Byte for byte what etherparse (an implementation we did not write)
    /// serializes for the same fields, checksum included, over field values
    /// that exercise the checksum's carries.
    #[test]
    fn header_matches_etherparse() {
        let mut rng = crate::testkit::Rng(7);
        for i in 0..2000 {
            let (tos, total, ident) = (rng.next_u64() as u8, rng.below(65536 - 20) as u16 + 20, rng.next_u64() as u16);
            let flags = [0u16, FLAG_DF, 0x2000 | 185][i % 3];
            let (ttl, proto) = (rng.next_u64() as u8, rng.next_u64() as u8);
            let (src, dst) = (Ipv4Addr::from(rng.next_u64() as u32), Ipv4Addr::from(rng.next_u64() as u32));
            let mut ours = [0u8; MIN_HEADER_LEN];
            write_header(&mut ours, tos, total, ident, flags, ttl, proto, src, dst);
            let mut h = etherparse::Ipv4Header::new(total - 20, ttl, etherparse::IpNumber(proto), src.octets(), dst.octets()).unwrap();
            h.dscp = etherparse::Ipv4Dscp::try_new(tos >> 2).unwrap();
            h.ecn = etherparse::Ipv4Ecn::try_new(tos & 3).unwrap();
            h.identification = ident;
            h.dont_fragment = flags & FLAG_DF != 0;
            h.more_fragments = flags & 0x2000 != 0;
            h.fragment_offset = etherparse::IpFragOffset::try_new(flags & 0x1fff).unwrap();
            h.header_checksum = h.calc_header_checksum();
            assert_eq!(&ours[..], &h.to_bytes()[..], "#{i}");
        }
    }

    #[test]
    fn parses_what_it_writes() {
        let p = sample();
        let v = Ipv4Packet::new_checked(&p).unwrap();
        assert_eq!(v.tos(), 0xb8);
        assert!(v.df());
        assert_eq!(v.ports(), Some((12345, 53)));
        assert_eq!(v.dst(), Ipv4Addr::new(198, 51, 100, 10));
    }

    #[test]
    fn rejects_truncated_bad_checksum_and_bad_length() {
        let p = sample();
        assert!(Ipv4Packet::new_checked(&p[..19]).is_err());
        assert!(Ipv4Packet::new_checked(&p[..27]).is_err());
        let mut q = p.clone();
        q[CHECKSUM] ^= 1;
        assert!(Ipv4Packet::new_checked(&q).is_err());
        let mut r = p.clone();
        r[0] = 0x44;
        assert!(Ipv4Packet::new_checked(&r).is_err());
    }

    #[test]
    fn rejects_total_length_below_header_length() {
        for (ihl, total) in [(5u8, 19u16), (5, 0), (6, 22), (15, 59)] {
            let mut p = vec![0u8; 60];
            write_header(&mut p, 0, total, 0, 0, 64, PROTO_UDP, Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 10));
            p[0] = 0x40 | ihl;
            p[CHECKSUM..CHECKSUM + 2].copy_from_slice(&[0, 0]);
            let ck = checksum::checksum(&p[..ihl as usize * 4]);
            p[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
            assert!(Ipv4Packet::new_checked(&p).is_err(), "ihl {ihl} total {total}");
        }
    }

    /// IPv4 packet `src` → `dst`, protocol `proto`, with `l4` as payload.
    fn with_l4(proto: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; MIN_HEADER_LEN];
        write_header(&mut p, 0, (MIN_HEADER_LEN + l4.len()) as u16, 1, 0, 64, proto, src.into(), dst.into());
        p.extend_from_slice(l4);
        p
    }

    #[test]
    fn l4_checksum_matches_etherparse_after_address_change() {
        // Checksums computed for a private source (as the sender had it),
        // then the source rewritten as a NAT does: the recomputed checksum
        // must be the one etherparse computes for the new addresses.
        let (private, public, dst) = ([10, 1, 2, 3], [192, 0, 2, 10], [198, 51, 100, 10]);
        for size in [0usize, 1, 2, 3, 100, 1401] {
            let data: Vec<u8> = (0..size).map(|i| (i * 13 + 5) as u8).collect();
            let udp = etherparse::UdpHeader::with_ipv4_checksum(40000, 5001, &etherparse::Ipv4Header::new(0, 64, etherparse::IpNumber::UDP, private, dst).unwrap(), &data).unwrap();
            let mut seg = udp.to_bytes().to_vec();
            seg.extend_from_slice(&data);
            let mut p = with_l4(PROTO_UDP, public, dst, &seg);
            assert!(recompute_l4_checksum(&mut p));
            let want = udp.calc_checksum_ipv4_raw(public, dst, &data).unwrap();
            assert_eq!(be16(&p, 20 + 6), want, "udp size {size}");

            let mut tcp = etherparse::TcpHeader::new(40000, 5001, 0x1234_5678, 1024);
            tcp.syn = true;
            tcp.checksum = tcp.calc_checksum_ipv4_raw(private, dst, &data).unwrap();
            let mut seg = tcp.to_bytes().to_vec();
            seg.extend_from_slice(&data);
            let mut p = with_l4(PROTO_TCP, public, dst, &seg);
            assert!(recompute_l4_checksum(&mut p));
            assert_eq!(be16(&p, 20 + 16), tcp.calc_checksum_ipv4_raw(public, dst, &data).unwrap(), "tcp size {size}");
        }
    }

    #[test]
    fn l4_checksum_leaves_alone_what_it_must() {
        let (a, b) = ([192, 0, 2, 10], [198, 51, 100, 10]);
        // UDP without checksum (0) stays without one.
        let mut p = with_l4(PROTO_UDP, a, b, &[0x9c, 0x40, 0x13, 0x89, 0, 9, 0, 0, 7]);
        let before = p.clone();
        assert!(!recompute_l4_checksum(&mut p));
        assert_eq!(p, before);
        // ICMP, a fragment, a TCP segment too short for its checksum field.
        let mut icmp = with_l4(PROTO_ICMP, a, b, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0]);
        assert!(!recompute_l4_checksum(&mut icmp));
        let mut frag = with_l4(PROTO_UDP, a, b, &[0x9c, 0x40, 0x13, 0x89, 0, 9, 0x12, 0x34, 7]);
        frag[FLAGS_FRAG] = 0x20;
        let before = frag.clone();
        assert!(!recompute_l4_checksum(&mut frag));
        assert_eq!(frag, before);
        let mut short = with_l4(PROTO_TCP, a, b, &[0; 17]);
        assert!(!recompute_l4_checksum(&mut short));
        assert!(!recompute_l4_checksum(&mut [0x45; 10]));
    }

    #[test]
    fn ttl_decrement_keeps_checksum_valid() {
        let mut p = sample();
        decrement_ttl(&mut p);
        let v = Ipv4Packet::new_checked(&p).unwrap();
        assert_eq!(v.ttl(), 63);
    }
}
