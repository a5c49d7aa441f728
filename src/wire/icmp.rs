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
    let total = ERROR_FRONT + quoted;
    if pkt.len() < total {
        return None;
    }
    pkt.copy_within(..quoted, ERROR_FRONT);
    let icmp = &mut pkt[ipv4::MIN_HEADER_LEN..total];
    icmp[..HEADER_LEN].copy_from_slice(&[TYPE_DEST_UNREACHABLE, CODE_FRAG_NEEDED, 0, 0, 0, 0, 0, 0]);
    icmp[NEXT_HOP_MTU..NEXT_HOP_MTU + 2].copy_from_slice(&mtu.to_be_bytes());
    let ck = checksum::checksum(icmp);
    icmp[CHECKSUM..CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
    ipv4::write_header(&mut pkt[..ipv4::MIN_HEADER_LEN], 0xc0, total as u16, ident, 0, ERROR_TTL, ipv4::PROTO_ICMP, src, dst);
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
