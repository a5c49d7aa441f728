//! ESP transport mode for IPv4 and IPv6 (RFC 4303 §3.1.1), applied to
//! forwarded packets as DPDK ipsec-secgw does: the packet's own IP header
//! stays in front (IPv4 options included; for IPv6 the Hop-by-Hop, Routing
//! and Destination Options headers [`ipv6::esp_placement`] keeps in front),
//! the ESP header and IV are inserted after it, and the trailer's Next
//! Header carries the protocol that followed.
//!
//! Outbound grows the frame into its headroom (the IP header moves forward
//! by the ESP header + IV), inbound shrinks it the same way; neither
//! allocates. The crypto op is described by [`super::esp_op`], so every
//! algorithm works as in tunnel mode.
//!
//! With UDP encapsulation (RFC 3948 §3.2–3.3) a UDP header (the SA's ports,
//! checksum 0) sits between the kept IPv4 header (protocol 17) and ESP; it
//! is removed on decapsulation together with the ESP header and IV. A NAT
//! between the peers may have rewritten the packet's addresses, so the
//! inner TCP/UDP checksum, computed over the sender's pseudo-header, may no
//! longer match: of the three fixes RFC 3948 §3.1.2 allows, secgw recomputes
//! the whole TCP/UDP checksum over the addresses the packet now carries
//! (allowed because ESP authenticated the payload; we have no IKE, so no
//! NAT-OA for the incremental update, and zeroing works for UDP only). UDP
//! sent without a checksum (0) keeps none; ICMP has no pseudo-header.

use super::outbound::encap_sa;
use super::{front_len, EspError, InboundState, OutboundSa, OutboundState, SessionCache};
use crate::crypto::CryptoOp;
use crate::io::PktBuf;
use crate::wire::{checksum, ethernet, ipv4, ipv6, udp};

/// Longest IPv4 header (IHL 15).
const MAX_IP_HEADER: usize = 60;

/// Rewrites protocol and total length of the IPv4 header at the start of
/// `hdr` (`hl` bytes) and recomputes its checksum.
fn fix_header(hdr: &mut [u8], hl: usize, protocol: u8, total: u16) {
    hdr[ipv4::PROTOCOL] = protocol;
    hdr[ipv4::TOTAL_LEN..ipv4::TOTAL_LEN + 2].copy_from_slice(&total.to_be_bytes());
    hdr[ipv4::CHECKSUM..ipv4::CHECKSUM + 2].copy_from_slice(&[0, 0]);
    let ck = checksum::checksum(&hdr[..hl]);
    hdr[ipv4::CHECKSUM..ipv4::CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
}

/// Encapsulates the Ethernet + IPv4 frame in `buf` with transport-mode SA
/// `sa` (RFC 4303 §3.1.1). The caller has checked the IPv4 header and
/// applied the forwarding TTL decrement. Result: Ethernet (filled in by
/// routing) + the same IPv4 header with protocol 50, new total length and
/// checksum + ESP header + IV + the original IP payload + trailer (Next
/// Header = the original protocol) + ICV room, and the op that seals it.
/// With `sa.udp_encap` (RFC 3948 §3.2) the protocol is 17 and a UDP header
/// (the SA's ports, length, checksum 0) precedes the ESP header.
/// Errors as [`super::outbound::prepare`]; fragments are refused
/// (`BadInner`: transport mode carries whole datagrams, RFC 4303 §3.1.1).
///
/// An IPv6 packet (version 6 after the Ethernet header) goes to
/// [`outbound_prepare_v6`]. The op's session reference comes from `cache`
/// (the worker's [`SessionCache`]; `SessionCache::default()` clones).
pub fn outbound_prepare(sa: &OutboundSa, st: &mut OutboundState, mut buf: PktBuf, cache: &mut SessionCache) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    if ip_version(&buf) == Some(6) {
        return outbound_prepare_v6(sa, st, buf, cache);
    }
    let (hl, total, protocol) = match ipv4::Ipv4Packet::new_checked(buf.frame().get(ethernet::HEADER_LEN..).unwrap_or(&[])) {
        Ok(p) if !p.is_fragment() => (p.header_len(), p.total_len(), p.protocol()),
        _ => return Err((EspError::BadInner, buf)),
    };
    let front = ethernet::HEADER_LEN + hl;
    if total + ethernet::HEADER_LEN > buf.len() || hl > MAX_IP_HEADER {
        return Err((EspError::BadInner, buf));
    }
    let Some(seq) = st.next_seq(sa.esn) else {
        return Err((EspError::SeqExhausted, buf));
    };
    let alg = sa.session.algorithm();
    let mut iv = [0u8; 16];
    if !sa.iv_gen.write(alg, seq, &mut iv) {
        return Err((EspError::CryptoError, buf));
    }
    // Keep Ethernet + IP header aside (stack copy), ESP-frame the payload.
    let mut saved = [0u8; ethernet::HEADER_LEN + MAX_IP_HEADER];
    saved[..front].copy_from_slice(&buf.frame()[..front]);
    buf.trim_to(ethernet::HEADER_LEN + total);
    buf.adj(front);
    let mut op = match encap_sa(sa, seq, &iv[..alg.iv_len()], protocol, buf, cache) {
        Ok(op) => op,
        Err((e, mut b)) => {
            b.prepend(front);
            return Err((e, b));
        }
    };
    let udp_len = if sa.udp_encap.is_some() { udp::HEADER_LEN } else { 0 };
    if !op.buf.prepend(front + udp_len) {
        return Err((EspError::NoRoom, op.buf));
    }
    let new_total = (op.buf.len() - ethernet::HEADER_LEN) as u16;
    let f = op.buf.frame_mut();
    f[..front].copy_from_slice(&saved[..front]);
    let protocol = match sa.udp_encap {
        Some(u) => {
            udp::write_header(&mut f[front..front + udp_len], u.sport, u.dport, new_total - hl as u16);
            ipv4::PROTO_UDP
        }
        None => ipv4::PROTO_ESP,
    };
    fix_header(&mut f[ethernet::HEADER_LEN..front], hl, protocol, new_total);
    let shift = (front + udp_len) as u32;
    op.data_offset += shift;
    op.auth_offset += shift;
    op.icv_offset += shift;
    Ok(op)
}

/// IP version of the packet after the Ethernet header.
#[inline]
fn ip_version(buf: &PktBuf) -> Option<u8> {
    buf.frame().get(ethernet::HEADER_LEN).map(|b| b >> 4)
}

/// Encapsulates the Ethernet + IPv6 frame in `buf` with transport-mode SA
/// `sa` (RFC 4303 §3.1.1). The caller has checked the IPv6 header and
/// applied the forwarding hop-limit decrement. The headers
/// [`ipv6::esp_placement`] keeps in front (Hop-by-Hop, Routing, Destination
/// Options before a Routing header) stay as they are, except that the Next
/// Header field naming what follows them becomes 50 and the payload length
/// grows by the ESP overhead; ESP header + IV follow them, then the rest of
/// the packet (upper-layer header, or a Destination Options header after a
/// Routing header) encrypted, the trailer (Next Header = the protocol that
/// followed) and room for the ICV. The kept headers move forward into the
/// headroom by the ESP header + IV (a copy within the buffer; no
/// allocation). Errors as [`super::outbound::prepare`]: `BadInner` for a
/// malformed chain or a fragment (transport mode carries whole datagrams),
/// `NoRoom`; `BadInner` too for an SA with UDP encapsulation, which is
/// IPv4 only (the config refuses IPv6 policies protecting with such an SA).
pub fn outbound_prepare_v6(sa: &OutboundSa, st: &mut OutboundState, mut buf: PktBuf, cache: &mut SessionCache) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    const ETH: usize = ethernet::HEADER_LEN;
    if sa.udp_encap.is_some() {
        return Err((EspError::BadInner, buf));
    }
    let placed = ipv6::Ipv6Packet::new_checked(buf.frame().get(ETH..).unwrap_or(&[]))
        .and_then(|p| Ok((ipv6::esp_placement(p.next_header(), p.payload(), false)?, p.total_len())));
    let Ok((place, total)) = placed else {
        return Err((EspError::BadInner, buf));
    };
    let alg = sa.session.algorithm();
    let front = front_len(alg);
    let kept = ETH + place.at;
    if buf.headroom() < front {
        return Err((EspError::NoRoom, buf));
    }
    let Some(seq) = st.next_seq(sa.esn) else {
        return Err((EspError::SeqExhausted, buf));
    };
    let mut iv = [0u8; 16];
    if !sa.iv_gen.write(alg, seq, &mut iv) {
        return Err((EspError::CryptoError, buf));
    }
    // Move Ethernet + kept headers `front` bytes forward and frame the rest
    // as ESP: `encap` writes the ESP header and IV into the gap left behind.
    buf.trim_to(ETH + total);
    buf.prepend(front);
    buf.frame_mut().copy_within(front..front + kept, 0);
    buf.adj(kept + front);
    let mut op = match encap_sa(sa, seq, &iv[..alg.iv_len()], place.next_header, buf, cache) {
        Ok(op) => op,
        Err((e, mut b)) => {
            // Give the frame back as it came.
            b.prepend(kept + front);
            b.frame_mut().copy_within(..kept, front);
            b.adj(front);
            return Err((e, b));
        }
    };
    if !op.buf.prepend(kept) {
        return Err((EspError::NoRoom, op.buf));
    }
    let payload_len = op.buf.len() - ETH - ipv6::HEADER_LEN;
    let Ok(payload_len) = u16::try_from(payload_len) else {
        return Err((EspError::BadInner, op.buf));
    };
    let ip = &mut op.buf.frame_mut()[ETH..];
    ip[place.nh_at] = ipv4::PROTO_ESP;
    ip[ipv6::PAYLOAD_LEN..ipv6::PAYLOAD_LEN + 2].copy_from_slice(&payload_len.to_be_bytes());
    op.data_offset += kept as u32;
    op.auth_offset += kept as u32;
    op.icv_offset += kept as u32;
    Ok(op)
}

/// Completes an inbound transport-mode op: ICV verified → window updated →
/// trailer checked → Next Header 59 is a dummy (RFC 4303 §2.6), 4 (IPv4)
/// and 41 (IPv6) are refused (`BadNextHeader`: that is tunnel mode) → the
/// ESP header and IV are removed and the headers in front of them move up
/// to the payload. IPv4: the header (options included) gets protocol =
/// Next Header and a new total length and checksum; the frame is Ethernet +
/// IPv4 + ESP, or with UDP encapsulation (IPv4 protocol 17) Ethernet +
/// IPv4 + UDP + ESP: then the UDP header goes too (RFC 3948 §3.3) and the
/// TCP/UDP checksum is recomputed for the addresses the packet carries now
/// (§3.1.2, see the module doc). IPv6: the Next Header field that named
/// ESP (fixed header or last extension header in front,
/// [`ipv6::esp_placement`]) gets the trailer's Next Header and the payload
/// length shrinks (no UDP encapsulation). On success: 14 bytes of Ethernet
/// header (filled by routing) + the packet as the sender's gateway received
/// it (with a NAT between IPv4 peers: with the addresses as the NAT
/// rewrote them).
pub fn inbound_finish(st: &mut InboundState, op: CryptoOp<PktBuf>) -> Result<PktBuf, (EspError, PktBuf)> {
    inbound_finish_cached(st, op, &mut SessionCache::default())
}

/// [`inbound_finish`], the op's session reference going back to `cache`.
#[inline]
pub fn inbound_finish_cached(st: &mut InboundState, op: CryptoOp<PktBuf>, cache: &mut SessionCache) -> Result<PktBuf, (EspError, PktBuf)> {
    let alg = op.session.algorithm();
    let (mut buf, d0, payload_len, next_header) = super::open_cached(st, op, cache)?;
    if next_header == ipv4::PROTO_IPIP || next_header == ipv6::NH_IPV6 {
        return Err((EspError::BadNextHeader, buf));
    }
    if ip_version(&buf) == Some(6) {
        let Some(esp) = d0.checked_sub(front_len(alg)) else {
            return Err((EspError::BadInner, buf));
        };
        return inbound_finish_v6(buf, esp..d0, payload_len, next_header);
    }
    let (hl, in_udp) = match ipv4::Ipv4Packet::new_checked(buf.frame().get(ethernet::HEADER_LEN..).unwrap_or(&[])) {
        Ok(p) => (p.header_len(), p.protocol() == ipv4::PROTO_UDP),
        Err(_) => return Err((EspError::BadInner, buf)),
    };
    let front = ethernet::HEADER_LEN + hl;
    // The ESP header must follow the IP header directly, or its UDP header.
    let udp_len = if in_udp { udp::HEADER_LEN } else { 0 };
    if d0.checked_sub(front_len(alg)) != Some(front + udp_len) {
        return Err((EspError::BadInner, buf));
    }
    let new_total = hl + payload_len;
    if new_total > u16::MAX as usize {
        return Err((EspError::BadLength, buf));
    }
    let gap = d0 - front;
    buf.frame_mut().copy_within(..front, gap);
    buf.adj(gap);
    buf.trim_to(front + payload_len);
    fix_header(&mut buf.frame_mut()[ethernet::HEADER_LEN..front], hl, next_header, new_total as u16);
    if in_udp {
        ipv4::recompute_l4_checksum(&mut buf.frame_mut()[ethernet::HEADER_LEN..]);
    }
    Ok(buf)
}

/// The IPv6 part of [`inbound_finish`]: `esp` is the frame range of the
/// ESP header and IV, and the decrypted payload (without trailer) is
/// `payload_len` bytes right after it.
fn inbound_finish_v6(mut buf: PktBuf, esp: std::ops::Range<usize>, payload_len: usize, next_header: u8) -> Result<PktBuf, (EspError, PktBuf)> {
    const ETH: usize = ethernet::HEADER_LEN;
    let placed = ipv6::Ipv6Packet::new_checked(buf.frame().get(ETH..).unwrap_or(&[])).and_then(|p| ipv6::esp_placement(p.next_header(), p.payload(), true));
    let Ok(place) = placed else {
        return Err((EspError::BadInner, buf));
    };
    let kept = ETH + place.at;
    // The ESP header the op opened must be the one the chain leads to.
    if esp.start != kept {
        return Err((EspError::BadInner, buf));
    }
    let Ok(new_payload_len) = u16::try_from(place.at - ipv6::HEADER_LEN + payload_len) else {
        return Err((EspError::BadLength, buf));
    };
    let gap = esp.len();
    let f = buf.frame_mut();
    f[ETH + place.nh_at] = next_header;
    f[ETH + ipv6::PAYLOAD_LEN..ETH + ipv6::PAYLOAD_LEN + 2].copy_from_slice(&new_payload_len.to_be_bytes());
    f.copy_within(..kept, gap);
    buf.adj(gap);
    buf.trim_to(kept + payload_len);
    Ok(buf)
}
