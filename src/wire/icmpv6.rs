//! ICMPv6 (RFC 4443) as the gateway uses it: the checksum over the IPv6
//! pseudo-header (§2.3), "Packet Too Big" built in place (§3.2), and the
//! minimum of Neighbor Discovery (RFC 4861): checked views of Neighbor
//! Solicitations and Advertisements, the advertisement that answers a
//! solicitation (§7.2.4) and the solicitation that resolves a next hop
//! (§7.2.2).

use super::{ipv6, need, WireError};
use std::net::Ipv6Addr;

/// ICMPv6 header length (type, code, checksum, 4 bytes of message body).
pub const HEADER_LEN: usize = 8;
/// Offset of the type field.
pub const TYPE: usize = 0;
/// Offset of the code field.
pub const CODE: usize = 1;
/// Offset of the checksum.
pub const CHECKSUM: usize = 2;
/// Offset of the MTU field of a Packet Too Big message (RFC 4443 §3.2).
pub const MTU: usize = 4;
/// Type 2: Packet Too Big.
pub const TYPE_PACKET_TOO_BIG: u8 = 2;
/// Type 3: Time Exceeded (RFC 4443 §3.3); code 0, hop limit exceeded in
/// transit.
pub const TYPE_TIME_EXCEEDED: u8 = 3;
/// ICMPv6 Parameter Problem (RFC 4443 §3.4).
pub const TYPE_PARAMETER_PROBLEM: u8 = 4;
/// Type 135: Neighbor Solicitation (RFC 4861 §4.3).
pub const TYPE_NEIGHBOR_SOLICITATION: u8 = 135;
/// Type 136: Neighbor Advertisement (RFC 4861 §4.4).
pub const TYPE_NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// Hop limit every Neighbor Discovery message carries and must be received
/// with (RFC 4861 §7.1.1: proves it was not forwarded).
pub const ND_HOP_LIMIT: u8 = 255;
/// Length of a Neighbor Solicitation / Advertisement without options:
/// ICMPv6 header (8) + target address (16).
pub const ND_LEN: usize = 24;
/// Option type: Source Link-Layer Address (RFC 4861 §4.6.1).
pub const OPT_SOURCE_LLADDR: u8 = 1;
/// Option type: Target Link-Layer Address (RFC 4861 §4.6.1).
pub const OPT_TARGET_LLADDR: u8 = 2;
/// Length of the Neighbor Advertisement the gateway sends: [`ND_LEN`] + a
/// Target Link-Layer Address option for Ethernet (8).
pub const NA_LEN: usize = ND_LEN + 8;
/// NA flag: Router (RFC 4861 §4.4).
pub const NA_FLAG_ROUTER: u8 = 0x80;
/// NA flag: Solicited.
pub const NA_FLAG_SOLICITED: u8 = 0x40;
/// NA flag: Override.
pub const NA_FLAG_OVERRIDE: u8 = 0x20;
/// Largest ICMPv6 error packet, IPv6 header included (RFC 4443 §2.4 (c):
/// as much of the invoking packet as fits without exceeding the minimum
/// IPv6 MTU).
pub const MAX_ERROR_LEN: usize = ipv6::MIN_MTU;
/// Bytes in front of the quoted packet: IPv6 header (40) + ICMPv6 header (8).
pub const ERROR_FRONT: usize = ipv6::HEADER_LEN + HEADER_LEN;

/// True for ICMPv6 error types (RFC 4443 §2.1: types 0..=127; never answer
/// an error with an error, §2.4 (e.1)).
#[inline]
pub fn is_error_type(t: u8) -> bool {
    t < 128
}

/// True for the ICMPv6 types of Neighbor Discovery (RFC 4861 §4: router
/// solicitation / advertisement, neighbor solicitation / advertisement,
/// redirect).
#[inline]
pub fn is_nd_type(t: u8) -> bool {
    (133..=137).contains(&t)
}

/// Bytes of an invoking packet of `total_len` bytes an error quotes: as
/// much as fits in [`MAX_ERROR_LEN`].
#[inline]
pub fn quoted_len(total_len: usize) -> usize {
    total_len.min(MAX_ERROR_LEN - ERROR_FRONT)
}

/// The solicited-node multicast address of `a` (RFC 4291 §2.7.1:
/// ff02::1:ff00:0/104 with the low 24 bits of `a`).
pub fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | o[13] as u16, u16::from_be_bytes([o[14], o[15]]))
}

/// The Ethernet multicast MAC of IPv6 multicast address `a` (RFC 2464 §7:
/// 33:33 and the low 32 bits).
pub fn multicast_mac(a: &Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// Checked view of a Neighbor Solicitation message (the ICMPv6 message,
/// without the IPv6 header), validated per RFC 4861 §7.1.1 as far as the
/// message itself goes: type 135, code 0, at least 24 bytes, target not
/// multicast, every option with a non-zero length that fits. The caller
/// checks the checksum and the IP hop limit (255) and the rule on an
/// unspecified source.
#[derive(Debug, Clone, Copy)]
pub struct NeighborSolicitation<'a> {
    buf: &'a [u8],
}

impl<'a> NeighborSolicitation<'a> {
    /// Validates the message (see the type's doc).
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        need("icmpv6 neighbor solicitation", buf, ND_LEN)?;
        if buf[TYPE] != TYPE_NEIGHBOR_SOLICITATION || buf[CODE] != 0 {
            return Err(WireError::BadField { layer: "icmpv6", field: "type/code", value: u16::from_be_bytes([buf[0], buf[1]]) as u32 });
        }
        check_nd_body(buf, "icmpv6 neighbor solicitation")?;
        Ok(NeighborSolicitation { buf })
    }
    /// Target address.
    pub fn target(&self) -> Ipv6Addr {
        nd_target(self.buf)
    }
    /// The Source Link-Layer Address option for Ethernet, if present.
    pub fn source_lladdr(&self) -> Option<[u8; 6]> {
        nd_lladdr(self.buf, OPT_SOURCE_LLADDR)
    }
}

/// The target of a checked ND message.
fn nd_target(buf: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&buf[8..24]);
    Ipv6Addr::from(a)
}

/// RFC 4861 §7.1.1 / §7.1.2 checks shared by solicitations and
/// advertisements: target not multicast, every option of non-zero length
/// and inside the message.
fn check_nd_body(buf: &[u8], layer: &'static str) -> Result<(), WireError> {
    if ipv6::is_multicast(&nd_target(buf)) {
        return Err(WireError::BadField { layer, field: "multicast target", value: 0 });
    }
    let mut at = ND_LEN;
    while at < buf.len() {
        let len = buf.get(at + 1).map_or(0, |&l| l as usize * 8);
        if len == 0 || at + len > buf.len() {
            return Err(WireError::BadField { layer, field: "option length", value: at as u32 });
        }
        at += len;
    }
    Ok(())
}

/// The first link-layer address option of type `kind` for Ethernet (length
/// 1, i.e. 8 bytes) of a checked ND message.
fn nd_lladdr(buf: &[u8], kind: u8) -> Option<[u8; 6]> {
    let mut at = ND_LEN;
    while at + 8 <= buf.len() {
        let len = buf[at + 1] as usize * 8;
        if buf[at] == kind && len == 8 {
            return buf[at + 2..at + 8].try_into().ok();
        }
        at += len.max(8);
    }
    None
}

/// Checked view of a Neighbor Advertisement message (RFC 4861 §4.4),
/// validated per §7.1.2 as far as the message goes: type 136, code 0, at
/// least 24 bytes, target not multicast, options well formed. The caller
/// checks the checksum, the hop limit (255) and that a multicast
/// destination comes with S clear.
#[derive(Debug, Clone, Copy)]
pub struct NeighborAdvertisement<'a> {
    buf: &'a [u8],
}

impl<'a> NeighborAdvertisement<'a> {
    /// Validates the message (see the type's doc).
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        need("icmpv6 neighbor advertisement", buf, ND_LEN)?;
        if buf[TYPE] != TYPE_NEIGHBOR_ADVERTISEMENT || buf[CODE] != 0 {
            return Err(WireError::BadField { layer: "icmpv6", field: "type/code", value: u16::from_be_bytes([buf[0], buf[1]]) as u32 });
        }
        check_nd_body(buf, "icmpv6 neighbor advertisement")?;
        Ok(NeighborAdvertisement { buf })
    }
    /// R, S, O flags (the byte at offset 4: [`NA_FLAG_ROUTER`] …).
    pub fn flags(&self) -> u8 {
        self.buf[4] & 0xe0
    }
    /// Target address.
    pub fn target(&self) -> Ipv6Addr {
        nd_target(self.buf)
    }
    /// The Target Link-Layer Address option for Ethernet, if present.
    pub fn target_lladdr(&self) -> Option<[u8; 6]> {
        nd_lladdr(self.buf, OPT_TARGET_LLADDR)
    }
}

/// Length of the Neighbor Solicitation the gateway sends: [`ND_LEN`] + a
/// Source Link-Layer Address option for Ethernet (8).
pub const NS_LEN: usize = ND_LEN + 8;

/// Writes a Neighbor Solicitation (RFC 4861 §4.3) into `msg[..32]`: type
/// 135, code 0, `target`, a Source Link-Layer Address option with `mac`
/// (§7.2.2: included when the source is not unspecified), checksum over the
/// pseudo-header of `src` → `dst`. Returns [`NS_LEN`], or `None` if `msg`
/// is shorter.
pub fn write_neighbor_solicitation(msg: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr, target: &Ipv6Addr, mac: &[u8; 6]) -> Option<usize> {
    let m = msg.get_mut(..NS_LEN)?;
    m[..8].copy_from_slice(&[TYPE_NEIGHBOR_SOLICITATION, 0, 0, 0, 0, 0, 0, 0]);
    m[8..24].copy_from_slice(&target.octets());
    m[24] = OPT_SOURCE_LLADDR;
    m[25] = 1;
    m[26..32].copy_from_slice(mac);
    let ck = ipv6::upper_layer_checksum(src, dst, ipv6::NH_ICMPV6, m);
    m[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
    Some(NS_LEN)
}

/// Writes a Neighbor Advertisement (RFC 4861 §4.4) into `msg[..32]`:
/// type 136, code 0, `flags` (R/S/O), `target`, a Target Link-Layer Address
/// option with `mac`, and the checksum over the pseudo-header of `src` →
/// `dst`. Returns [`NA_LEN`], or `None` if `msg` is shorter.
pub fn write_neighbor_advertisement(msg: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr, flags: u8, target: &Ipv6Addr, mac: &[u8; 6]) -> Option<usize> {
    let m = msg.get_mut(..NA_LEN)?;
    m[..8].copy_from_slice(&[TYPE_NEIGHBOR_ADVERTISEMENT, 0, 0, 0, flags, 0, 0, 0]);
    m[8..24].copy_from_slice(&target.octets());
    m[24] = OPT_TARGET_LLADDR;
    m[25] = 1;
    m[26..32].copy_from_slice(mac);
    let ck = ipv6::upper_layer_checksum(src, dst, ipv6::NH_ICMPV6, m);
    m[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
    Some(NA_LEN)
}

/// Turns `pkt`, which starts with the offending IPv6 packet, into an
/// ICMPv6 Packet Too Big error (RFC 4443 §3.2) in place: moves the first
/// `quoted` bytes of the packet behind a new IPv6 header (`src` → `dst`,
/// traffic class 0, hop limit `hop_limit`, next header 58) and an ICMPv6
/// header (type 2, code 0, `mtu`, checksum over the pseudo-header, §2.3).
/// `quoted` should be [`quoted_len`] of the packet. Returns the length of
/// the error packet, or `None` if `pkt` is shorter than it.
pub fn packet_too_big_in_place(pkt: &mut [u8], quoted: usize, src: &Ipv6Addr, dst: &Ipv6Addr, mtu: u32, hop_limit: u8) -> Option<usize> {
    let mut head = [TYPE_PACKET_TOO_BIG, 0, 0, 0, 0, 0, 0, 0];
    head[MTU..MTU + 4].copy_from_slice(&mtu.to_be_bytes());
    error_in_place(pkt, quoted, src, dst, head, hop_limit)
}

/// [`packet_too_big_in_place`] for an ICMPv6 Time Exceeded error (RFC 4443
/// §3.3: type 3, code 0, the 4 unused bytes zero), which a router MUST
/// send about a packet it discards for a hop limit of 1 or 0.
pub fn time_exceeded_in_place(pkt: &mut [u8], quoted: usize, src: &Ipv6Addr, dst: &Ipv6Addr, hop_limit: u8) -> Option<usize> {
    error_in_place(pkt, quoted, src, dst, [TYPE_TIME_EXCEEDED, 0, 0, 0, 0, 0, 0, 0], hop_limit)
}

/// [`packet_too_big_in_place`] for an ICMPv6 Parameter Problem (RFC 4443
/// §3.4: type 4, `code`, `pointer` = the offset of the offending byte from
/// the start of the quoted IPv6 header), sent about an IPv6 option the
/// gateway may not pass over (RFC 8200 §4.2).
pub fn parameter_problem_in_place(pkt: &mut [u8], quoted: usize, src: &Ipv6Addr, dst: &Ipv6Addr, code: u8, pointer: u32, hop_limit: u8) -> Option<usize> {
    let mut head = [TYPE_PARAMETER_PROBLEM, code, 0, 0, 0, 0, 0, 0];
    head[4..8].copy_from_slice(&pointer.to_be_bytes());
    error_in_place(pkt, quoted, src, dst, head, hop_limit)
}

/// The ICMPv6 error with the 8-byte header `head` (checksum bytes zero)
/// quoting the first `quoted` bytes of `pkt`, built in place as
/// [`packet_too_big_in_place`] says.
fn error_in_place(pkt: &mut [u8], quoted: usize, src: &Ipv6Addr, dst: &Ipv6Addr, head: [u8; HEADER_LEN], hop_limit: u8) -> Option<usize> {
    let total = ERROR_FRONT + quoted;
    if pkt.len() < total {
        return None;
    }
    pkt.copy_within(..quoted, ERROR_FRONT);
    let msg = &mut pkt[ipv6::HEADER_LEN..total];
    msg[..HEADER_LEN].copy_from_slice(&head);
    let ck = ipv6::upper_layer_checksum(src, dst, ipv6::NH_ICMPV6, msg);
    msg[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
    ipv6::write_header(&mut pkt[..ipv6::HEADER_LEN], 0, 0, (total - ipv6::HEADER_LEN) as u16, ipv6::NH_ICMPV6, hop_limit, src, dst);
    Some(total)
}

/// Echo Request (RFC 4443 §4.1).
pub const TYPE_ECHO_REQUEST: u8 = 128;
/// Echo Reply (RFC 4443 §4.2).
pub const TYPE_ECHO_REPLY: u8 = 129;
/// Hop limit of the Echo Replies the gateway sends.
pub const ECHO_HOP_LIMIT: u8 = 64;

/// Turns `pkt`, an IPv6 packet cut to its length, into the Echo Reply to
/// the Echo Request it holds, in place (RFC 4443 §4.2, a node MUST answer):
/// the same identifier, sequence number and data, type 129 and the
/// checksum again (§2.3); a new header from the request's destination to
/// its source, traffic class kept, flow label 0, hop limit
/// [`ECHO_HOP_LIMIT`]. Returns the reply's (source, destination), or
/// `None`, `pkt` unchanged, unless it is such a request: ICMPv6 right
/// after the fixed header (no extension headers), the payload length
/// matching, type 128 code 0, at least the 8-byte header, and a checksum
/// that verifies.
pub fn echo_reply_in_place(pkt: &mut [u8]) -> Option<(Ipv6Addr, Ipv6Addr)> {
    let ip = ipv6::Ipv6Packet::new_checked(pkt).ok()?;
    if ip.next_header() != ipv6::NH_ICMPV6 || ip.total_len() != pkt.len() {
        return None;
    }
    let (src, dst, tc) = (ip.src(), ip.dst(), ip.traffic_class());
    let msg = &mut pkt[ipv6::HEADER_LEN..];
    if msg.len() < HEADER_LEN || msg[TYPE] != TYPE_ECHO_REQUEST || msg[CODE] != 0 || !ipv6::upper_layer_checksum_ok(&src, &dst, ipv6::NH_ICMPV6, msg) {
        return None;
    }
    msg[TYPE] = TYPE_ECHO_REPLY;
    msg[CHECKSUM..CHECKSUM + 2].copy_from_slice(&[0, 0]);
    let ck = ipv6::upper_layer_checksum(&dst, &src, ipv6::NH_ICMPV6, msg);
    msg[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
    let payload = (pkt.len() - ipv6::HEADER_LEN) as u16;
    ipv6::write_header(&mut pkt[..ipv6::HEADER_LEN], tc, 0, payload, ipv6::NH_ICMPV6, ECHO_HOP_LIMIT, &dst, &src);
    Some((dst, src))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv6::tests::{fixture, fixtures};
    use crate::wire::ipv6::Ipv6Packet;

    /// scapy's Echo Request (tests/vectors/ipv6.json) answered: addresses
    /// swapped, type 129, the rest of the message as it came, a checksum
    /// that verifies over the swapped pseudo-header.
    #[test]
    fn echo_reply_answers_scapys_echo_request() {
        let req = fixture("echo_request");
        let mut p = req.clone();
        let ip = Ipv6Packet::new_checked(&req).unwrap();
        let (from, to) = echo_reply_in_place(&mut p).unwrap();
        assert_eq!((from, to), (ip.dst(), ip.src()));
        let r = Ipv6Packet::new_checked(&p).unwrap();
        assert_eq!((r.src(), r.dst(), r.next_header(), r.total_len(), p[7]), (ip.dst(), ip.src(), 58, req.len(), ECHO_HOP_LIMIT));
        assert_eq!((p[40], p[41]), (TYPE_ECHO_REPLY, 0));
        assert_eq!(&p[44..], &req[44..], "identifier, sequence number and data kept");
        assert!(ipv6::upper_layer_checksum_ok(&from, &to, ipv6::NH_ICMPV6, &p[40..]));
        // Not answered: a reply, a bad checksum, a cut message, a payload length that lies, another next header.
        for (what, edit) in [
            ("a reply", &(|q: &mut Vec<u8>| q[40] = TYPE_ECHO_REPLY) as &dyn Fn(&mut Vec<u8>)),
            ("a bad checksum", &|q| *q.last_mut().unwrap() ^= 1),
            ("code 1", &|q| q[41] = 1),
            ("cut", &|q| q.truncate(47)),
            ("a payload length that lies", &|q| q[5] += 1),
            ("UDP", &|q| q[6] = 17),
        ] {
            let mut q = req.clone();
            edit(&mut q);
            let before = q.clone();
            assert!(echo_reply_in_place(&mut q).is_none(), "{what}");
            assert_eq!(q, before, "{what}: left as it was");
        }
    }

    #[test]
    fn checksums_of_scapy_icmpv6_messages_verify() {
        let mut n = 0;
        for f in fixtures() {
            if f.upper != Some(58) {
                continue;
            }
            let b = hex::decode(&f.hex).unwrap();
            let p = Ipv6Packet::new_checked(&b).unwrap();
            let msg = p.payload();
            assert!(ipv6::upper_layer_checksum_ok(&p.src(), &p.dst(), 58, msg), "{}", f.name);
            let mut z = msg.to_vec();
            z[2..4].copy_from_slice(&[0, 0]);
            assert_eq!(ipv6::upper_layer_checksum(&p.src(), &p.dst(), 58, &z).to_be_bytes(), [msg[2], msg[3]], "{}", f.name);
            let mut bad = msg.to_vec();
            bad[msg.len() - 1] ^= 1;
            assert!(!ipv6::upper_layer_checksum_ok(&p.src(), &p.dst(), 58, &bad), "{}", f.name);
            n += 1;
        }
        assert!(n >= 6);
    }

    #[test]
    fn neighbor_solicitation_and_our_advertisement_match_scapy() {
        let ns = fixture("nd_ns");
        let p = Ipv6Packet::new_checked(&ns).unwrap();
        assert_eq!(p.hop_limit(), ND_HOP_LIMIT);
        let gw: Ipv6Addr = "2001:db8:a::1".parse().unwrap();
        assert_eq!(p.dst(), solicited_node(&gw));
        assert_eq!(multicast_mac(&p.dst()), [0x33, 0x33, 0xff, 0, 0, 1]);
        let s = NeighborSolicitation::new_checked(p.payload()).unwrap();
        assert_eq!(s.target(), gw);
        assert_eq!(s.source_lladdr(), Some([2, 0, 0, 0, 0x0a, 1]));
        // Our answer, byte for byte what scapy built for it.
        let want = fixture("nd_na");
        let mut na = [0u8; NA_LEN];
        let flags = NA_FLAG_SOLICITED | NA_FLAG_OVERRIDE;
        assert_eq!(write_neighbor_advertisement(&mut na, &gw, &p.src(), flags, &gw, &[2, 0, 0, 0, 0, 1]), Some(NA_LEN));
        assert_eq!(&na[..], &want[40..]);
        let dad = fixture("nd_ns_dad");
        let d = Ipv6Packet::new_checked(&dad).unwrap();
        let s = NeighborSolicitation::new_checked(d.payload()).unwrap();
        assert_eq!(s.source_lladdr(), None);
        let want = fixture("nd_na_dad");
        let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
        write_neighbor_advertisement(&mut na, &gw, &all_nodes, NA_FLAG_OVERRIDE, &gw, &[2, 0, 0, 0, 0, 1]).unwrap();
        assert_eq!(&na[..], &want[40..]);
    }

    #[test]
    fn malformed_solicitations_are_refused() {
        let ns = fixture("nd_ns");
        let msg = &ns[40..];
        assert!(NeighborSolicitation::new_checked(&msg[..23]).is_err());
        let mut zero_opt = msg.to_vec();
        zero_opt[25] = 0;
        assert!(NeighborSolicitation::new_checked(&zero_opt).is_err(), "option length 0");
        let mut long_opt = msg.to_vec();
        long_opt[25] = 2;
        assert!(NeighborSolicitation::new_checked(&long_opt).is_err(), "option past the end");
        let mut mc = msg.to_vec();
        mc[8] = 0xff;
        assert!(NeighborSolicitation::new_checked(&mc).is_err(), "multicast target");
        let mut code = msg.to_vec();
        code[1] = 1;
        assert!(NeighborSolicitation::new_checked(&code).is_err());
    }

    /// Time Exceeded as etherparse (another implementation) reads it: type
    /// 3 code 0 (hop limit exceeded in transit), checksum over the
    /// pseudo-header valid, the quote behind it.
    #[test]
    fn time_exceeded_read_by_etherparse() {
        let (a, gw): (Ipv6Addr, Ipv6Addr) = ("2001:db8:a::10".parse().unwrap(), "2001:db8:a::1".parse().unwrap());
        let mut pkt = vec![0u8; 300];
        ipv6::write_header(&mut pkt[..40], 0, 0, 160, 17, 1, &a, &"2001:db8:b::10".parse().unwrap());
        let orig = pkt[..200].to_vec();
        let n = time_exceeded_in_place(&mut pkt, 200, &gw, &a, 64).unwrap();
        assert_eq!(n, ERROR_FRONT + 200);
        let s = etherparse::Ipv6Slice::from_slice(&pkt[..n]).unwrap();
        let icmp = etherparse::Icmpv6Slice::from_slice(s.payload().payload).unwrap();
        assert_eq!(icmp.icmp_type(), etherparse::Icmpv6Type::TimeExceeded(etherparse::icmpv6::TimeExceededCode::HopLimitExceeded));
        let want = icmp.icmp_type().calc_checksum(gw.octets(), a.octets(), icmp.payload()).unwrap();
        assert_eq!(icmp.checksum(), want);
        assert_eq!(icmp.payload(), &orig[..]);
    }

    #[test]
    fn packet_too_big_matches_scapy() {
        let want = fixture("packet_too_big");
        let doc: serde_json::Value = serde_json::from_str(include_str!("../../tests/vectors/ipv6.json")).unwrap();
        let pk = doc["packets"].as_array().unwrap().iter().find(|p| p["name"] == "packet_too_big").unwrap();
        let mut pkt = hex::decode(pk["invoking"].as_str().unwrap()).unwrap();
        let mtu = pk["mtu"].as_u64().unwrap() as u32;
        let orig = Ipv6Packet::new_checked(&pkt).unwrap();
        let (a, gw): (Ipv6Addr, Ipv6Addr) = (orig.src(), "2001:db8:a::1".parse().unwrap());
        let q = quoted_len(orig.total_len());
        assert_eq!(q, 1232);
        let n = packet_too_big_in_place(&mut pkt, q, &gw, &a, mtu, 64).unwrap();
        assert_eq!(n, MAX_ERROR_LEN);
        assert_eq!(&pkt[..n], &want[..]);
        assert!(packet_too_big_in_place(&mut [0u8; 100], 80, &gw, &a, 1280, 64).is_none());
    }
}
