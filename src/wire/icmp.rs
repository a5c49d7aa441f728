//! ICMPv4 errors the gateway builds (RFC 792): "destination unreachable,
//! fragmentation needed and DF set" with the next-hop MTU field of RFC 1191.

use super::{checksum, ipv4};
use std::net::Ipv4Addr;

/// ICMP header length (type, code, checksum, 4 bytes of rest-of-header).
pub const HEADER_LEN: usize = 8;
/// Offset of the type field.
pub const TYPE: usize = 0;
/// Offset of the code field.
pub const CODE: usize = 1;
/// Offset of the checksum.
pub const CHECKSUM: usize = 2;
/// Offset of the next-hop MTU field of a "fragmentation needed" error
/// (RFC 1191 §4; the two bytes before it are unused, zero).
pub const NEXT_HOP_MTU: usize = 6;
/// Type 3: destination unreachable.
pub const TYPE_DEST_UNREACHABLE: u8 = 3;
/// Code 4 of type 3: fragmentation needed and DF set.
pub const CODE_FRAG_NEEDED: u8 = 4;
/// Type 11: Time Exceeded (RFC 792); code 0, time to live exceeded in
/// transit.
pub const TYPE_TIME_EXCEEDED: u8 = 11;
/// TTL (IPv4) / hop limit (IPv6) of the ICMP errors the gateway sends.
pub const ERROR_TTL: u8 = 64;
/// Payload bytes after the quoted IP header (RFC 792: the first 64 bits).
pub const QUOTED_PAYLOAD: usize = 8;
/// Bytes in front of the quoted packet: IPv4 header (20) + ICMP header (8).
pub const ERROR_FRONT: usize = ipv4::MIN_HEADER_LEN + HEADER_LEN;

/// True for ICMP types that are errors (RFC 1122 §3.2.2: never answer an
/// error with an error): destination unreachable, source quench, redirect,
/// time exceeded, parameter problem.
#[inline]
pub fn is_error_type(t: u8) -> bool {
    matches!(t, 3 | 4 | 5 | 11 | 12)
}

/// Bytes of an IPv4 packet an error quotes: its header (`header_len`) and
/// the first 8 bytes of its payload, at most the packet (`total_len`).
#[inline]
pub fn quoted_len(header_len: usize, total_len: usize) -> usize {
    (header_len + QUOTED_PAYLOAD).min(total_len)
}

/// Turns `pkt`, which starts with the offending IPv4 packet, into an ICMP
/// "fragmentation needed" error in place: moves the first `quoted` bytes of
/// the packet behind a new IPv4 header (`src` → `dst`, TTL 64, `ident`, DS
/// 0xc0 as routers mark control traffic) and an ICMP header (type 3, code
/// 4, next-hop MTU `mtu`, checksum over ICMP header and data). Returns the
/// length of the error packet, or `None` if `pkt` is shorter than it.
pub fn frag_needed_in_place(pkt: &mut [u8], quoted: usize, src: Ipv4Addr, dst: Ipv4Addr, mtu: u16, ident: u16) -> Option<usize> {
    let mut head = [TYPE_DEST_UNREACHABLE, CODE_FRAG_NEEDED, 0, 0, 0, 0, 0, 0];
    head[NEXT_HOP_MTU..NEXT_HOP_MTU + 2].copy_from_slice(&mtu.to_be_bytes());
    error_in_place(pkt, quoted, src, dst, head, ident)
}

/// [`frag_needed_in_place`] for an ICMP Time Exceeded error (RFC 792 type
/// 11, code 0, the 4 unused bytes zero), which a router MUST send about a
/// packet it discards for TTL (RFC 1812 §5.3.1).
pub fn time_exceeded_in_place(pkt: &mut [u8], quoted: usize, src: Ipv4Addr, dst: Ipv4Addr, ident: u16) -> Option<usize> {
    error_in_place(pkt, quoted, src, dst, [TYPE_TIME_EXCEEDED, 0, 0, 0, 0, 0, 0, 0], ident)
}

/// The ICMP error with the 8-byte header `head` (checksum bytes zero)
/// quoting the first `quoted` bytes of `pkt`, built in place as
/// [`frag_needed_in_place`] says.
fn error_in_place(pkt: &mut [u8], quoted: usize, src: Ipv4Addr, dst: Ipv4Addr, head: [u8; HEADER_LEN], ident: u16) -> Option<usize> {
    let total = ERROR_FRONT + quoted;
    if pkt.len() < total {
        return None;
    }
    pkt.copy_within(..quoted, ERROR_FRONT);
    let icmp = &mut pkt[ipv4::MIN_HEADER_LEN..total];
    icmp[..HEADER_LEN].copy_from_slice(&head);
    let ck = checksum::checksum(icmp);
    icmp[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
    ipv4::write_header(&mut pkt[..ipv4::MIN_HEADER_LEN], 0xc0, total as u16, ident, 0, ERROR_TTL, ipv4::PROTO_ICMP, src, dst);
    Some(total)
}

/// Echo Reply (RFC 792).
pub const TYPE_ECHO_REPLY: u8 = 0;
/// Echo Request (RFC 792).
pub const TYPE_ECHO_REQUEST: u8 = 8;
/// TTL of the Echo Replies the gateway sends.
pub const ECHO_TTL: u8 = 64;

/// Turns `pkt`, an IPv4 packet cut to its total length, into the Echo
/// Reply to the Echo Request it holds, in place (RFC 792; RFC 1122
/// §3.2.2.6, RFC 1812 §4.3.3.6): the same identifier, sequence number and
/// data, type 0 and the ICMP checksum again; a new header from the
/// request's destination to its source, DS byte kept (RFC 1812 §4.3.2.5),
/// TTL [`ECHO_TTL`], identification `ident`, no flags. Returns the reply's
/// (source, destination), or `None`, `pkt` unchanged, unless it is such a
/// request: a 20-byte header (options are not echoed), not a fragment,
/// protocol 1, type 8 code 0, at least the 8-byte ICMP header, and an ICMP
/// checksum that verifies.
pub fn echo_reply_in_place(pkt: &mut [u8], ident: u16) -> Option<(Ipv4Addr, Ipv4Addr)> {
    let ip = ipv4::Ipv4Packet::new_checked(pkt).ok()?;
    if ip.header_len() != ipv4::MIN_HEADER_LEN || ip.is_fragment() || ip.protocol() != ipv4::PROTO_ICMP || ip.total_len() != pkt.len() {
        return None;
    }
    let (src, dst, tos) = (ip.src(), ip.dst(), ip.tos());
    let msg = &mut pkt[ipv4::MIN_HEADER_LEN..];
    if msg.len() < HEADER_LEN || msg[TYPE] != TYPE_ECHO_REQUEST || msg[CODE] != 0 || checksum::sum(msg) != 0xffff {
        return None;
    }
    msg[TYPE] = TYPE_ECHO_REPLY;
    msg[CHECKSUM..CHECKSUM + 2].copy_from_slice(&[0, 0]);
    let ck = checksum::checksum(msg);
    msg[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
    let total = pkt.len() as u16;
    ipv4::write_header(&mut pkt[..ipv4::MIN_HEADER_LEN], tos, total, ident, 0, ECHO_TTL, ipv4::PROTO_ICMP, dst, src);
    Some((dst, src))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Time Exceeded as etherparse (another implementation) reads it:
    /// type 11 code 0 (TTL exceeded in transit), checksum valid, the quote
    /// behind it.
    #[test]
    fn time_exceeded_read_by_etherparse() {
        let mut p: Vec<u8> = (0..60u8).collect();
        p[0] = 0x45;
        p[2..4].copy_from_slice(&60u16.to_be_bytes());
        let orig = p[..28].to_vec();
        let n = time_exceeded_in_place(&mut p, 28, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 9).unwrap();
        assert_eq!(n, ERROR_FRONT + 28);
        let s = etherparse::Ipv4Slice::from_slice(&p[..n]).unwrap();
        let icmp = etherparse::Icmpv4Slice::from_slice(s.payload().payload).unwrap();
        assert_eq!(icmp.icmp_type(), etherparse::Icmpv4Type::TimeExceeded(etherparse::icmpv4::TimeExceededCode::TtlExceededInTransit));
        assert_eq!(icmp.checksum(), icmp.header().icmp_type.calc_checksum(icmp.payload()));
        assert_eq!(icmp.payload(), &orig[..]);
        assert!(time_exceeded_in_place(&mut [0u8; 40], 28, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1).is_none());
    }

    #[test]
    fn frag_needed_quotes_header_and_8_bytes() {
        let mut p = vec![0u8; 100];
        for (i, b) in p.iter_mut().enumerate() {
            *b = i as u8;
        }
        let orig = p.clone();
        let n = frag_needed_in_place(&mut p, 28, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 1400, 7).unwrap();
        assert_eq!(n, 56);
        assert_eq!(&p[28..56], &orig[..28]);
        assert_eq!(p[20], 3);
        assert_eq!(p[21], 4);
        assert_eq!(&p[24..28], &[0, 0, 0x05, 0x78]);
        assert_eq!(checksum::sum(&p[20..56]), 0xffff);
        assert_eq!(checksum::sum(&p[..20]), 0xffff);
        assert_eq!(p[9], 1);
        assert!(frag_needed_in_place(&mut [0u8; 40], 28, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1, 1).is_none());
    }

    /// An Echo Request shaped as Linux's `ping -s 4 192.0.2.1` sends it
    /// from 192.0.2.10 (DF set, identifier 0x1f2e, sequence number 1, the
    /// checksums filled in here), and its reply.
    #[test]
    fn echo_reply_answers_a_ping_shaped_request() {
        let req: [u8; 32] = [
            0x45, 0x00, 0x00, 0x20, 0xa1, 0xb2, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 192, 0, 2, 10, 192, 0, 2, 1, //
            0x08, 0x00, 0x00, 0x00, 0x1f, 0x2e, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef,
        ];
        let mut p = req;
        let ck = checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&ck.to_be_bytes());
        let ck = checksum::checksum(&p[20..]);
        p[22..24].copy_from_slice(&ck.to_be_bytes());
        let req = p;
        let (from, to) = echo_reply_in_place(&mut p, 7).unwrap();
        assert_eq!((from, to), (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 10)));
        assert_eq!(&p[12..20], &[192, 0, 2, 1, 192, 0, 2, 10]);
        assert_eq!((p[0], p[2..4].to_vec(), p[4..6].to_vec(), p[6..8].to_vec(), p[8], p[9]), (0x45, vec![0, 32], vec![0, 7], vec![0, 0], 64, 1));
        assert_eq!(checksum::sum(&p[..20]), 0xffff);
        assert_eq!((p[20], p[21]), (0, 0));
        assert_eq!(&p[24..], &req[24..], "identifier, sequence number and data kept");
        assert_eq!(checksum::sum(&p[20..]), 0xffff);
        // Type 8 → 0 lowers the first ICMP word by 0x0800: the checksum rises by it.
        assert_eq!(u16::from_be_bytes([p[22], p[23]]), checksum::add(u16::from_be_bytes([req[22], req[23]]), 0x0800));
        // Not answered: a reply, a bad checksum, a fragment, options, a cut message, another protocol.
        let refused = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut q = req.to_vec();
            edit(&mut q);
            let before = q.clone();
            let r = echo_reply_in_place(&mut q, 1);
            assert_eq!(q, before, "left as it was");
            r.is_none()
        };
        assert!(refused(&|q| q[20] = 0));
        assert!(refused(&|q| q[31] ^= 1));
        assert!(refused(&|q| q[6] = 0x20));
        assert!(refused(&|q| q[7] = 1));
        assert!(refused(&|q| q[9] = 17));
        assert!(refused(&|q| q.truncate(27)));
        assert!(refused(&|q| q[0] = 0x46));
    }
}
