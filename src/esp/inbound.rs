//! Inbound ESP: decapsulation in tunnel mode (RFC 4303 §3.4), IPv4 or IPv6
//! inner packets whatever the outer family, with the anti-replay check
//! before crypto and the window update after the ICV verified (§3.4.3).

use super::{esp_op, front_len, EspError, InboundSa, InboundState, SessionCache, ESP_HEADER_LEN};
use crate::crypto::CryptoOp;
use crate::esp::replay::ReplayError;
use crate::io::PktBuf;
use crate::wire::{ethernet, ipv4, ipv6};
use std::net::IpAddr;

/// Checks the ESP packet at `esp_offset` in `buf` (a frame already trimmed
/// to the outer IPv4 total length) and describes the op that opens it
/// ([`super::esp_op`]: with a separate MAC the ICV is verified before
/// anything is decrypted, RFC 4303 §3.4.4).
///
/// Checks, in order: long enough for header + the algorithm's IV + ICV,
/// with an encrypted part that is not empty and a multiple of the
/// algorithm's block size (4, or 16 for AES-CBC; RFC 4303 §2.4, RFC 3602
/// §2.4) → `BadLength`; sequence number not 0, not left of the window and
/// not already seen (RFC 4303 §3.4.3, ESN high bits inferred per Appendix
/// A2.2) → `SeqZero`/`Replay`. The window is not changed here.
pub fn prepare(sa: &InboundSa, st: &InboundState, buf: PktBuf, esp_offset: usize) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    prepare_cached(sa, st, buf, esp_offset, &mut SessionCache::default())
}

/// [`prepare`], the op's session reference taken from `cache`.
#[inline]
pub fn prepare_cached(sa: &InboundSa, st: &InboundState, buf: PktBuf, esp_offset: usize, cache: &mut SessionCache) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    let alg = sa.session.algorithm();
    let icv_len = sa.session.icv_len();
    let front = front_len(alg);
    let f = buf.frame();
    let Some(esp) = f.get(esp_offset..) else {
        return Err((EspError::BadLength, buf));
    };
    let Some(enc_len) = esp.len().checked_sub(front + icv_len) else {
        return Err((EspError::BadLength, buf));
    };
    if enc_len == 0 || !enc_len.is_multiple_of(alg.block_size()) {
        return Err((EspError::BadLength, buf));
    }
    let seq_lo = u32::from_be_bytes([esp[4], esp[5], esp[6], esp[7]]);
    let seq = if sa.esn { st.window.infer_esn(seq_lo) } else { seq_lo as u64 };
    match st.window.check(seq) {
        Ok(()) => {}
        Err(ReplayError::Zero) => return Err((EspError::SeqZero, buf)),
        Err(_) => return Err((EspError::Replay, buf)),
    }
    let mut iv = [0u8; 16];
    iv[..front - ESP_HEADER_LEN].copy_from_slice(&esp[ESP_HEADER_LEN..front]);
    Ok(esp_op(cache.take(&sa.session), buf, esp_offset, enc_len, sa.spi, seq, sa.esn, iv, [seq, esp_offset as u64]))
}

/// Completes an inbound op: ICV verified → window updated → trailer checked
/// (pad length, padding 1, 2, 3, …) → next header 4 (IPv4) or 41 (IPv6),
/// 59 = dummy, anything else `BadNextHeader` → the inner packet checked as
/// that family (`BadInner` otherwise), TFC padding after its length
/// discarded (RFC 4303 §2.7) → outer ECN folded into the inner header's
/// (IPv4 TOS with its checksum, or IPv6 traffic class; RFC 6040 §4.2; outer
/// CE over inner Not-ECT is `EcnDrop`). `outer_tos` is the outer header's
/// DS and ECN byte (IPv4 TOS or IPv6 traffic class) as received (0 when
/// there is none). On success the frame is 14 bytes of Ethernet header (to be
/// filled by routing) followed by the inner packet exactly as it was sent.
pub fn finish(st: &mut InboundState, op: CryptoOp<PktBuf>, outer_tos: u8) -> Result<PktBuf, (EspError, PktBuf)> {
    finish_cached(st, op, outer_tos, &mut SessionCache::default())
}

/// [`finish`], the op's session reference going back to `cache`.
#[inline]
pub fn finish_cached(st: &mut InboundState, op: CryptoOp<PktBuf>, outer_tos: u8, cache: &mut SessionCache) -> Result<PktBuf, (EspError, PktBuf)> {
    finish_impl(st, op, outer_tos, cache, false).map(|(buf, _)| buf)
}

/// The inner packet's header fields the gateway checks after
/// decapsulation (the selectors of RFC 4301 §5.2, TTL, length), read by
/// [`finish_with_header`] from the header it has just checked, so the
/// caller does not parse it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerHeader {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IPv4 protocol, or IPv6 upper-layer protocol after the extension
    /// headers ([`ipv6::Ipv6Packet::upper_layer`]).
    pub protocol: u8,
    /// (source, destination) port of a TCP or UDP first fragment, else
    /// `None` (RFC 4301 §4.4.1.1 OPAQUE).
    pub ports: Option<(u16, u16)>,
    /// TTL / hop limit as received (not decremented).
    pub ttl: u8,
    /// Total length in bytes (IPv4 total length, IPv6 40 + payload length).
    pub len: usize,
}

impl InnerHeader {
    /// The fields of a checked IPv4 packet.
    #[inline]
    pub fn of_ipv4(p: &ipv4::Ipv4Packet<'_>) -> InnerHeader {
        InnerHeader { src: IpAddr::V4(p.src()), dst: IpAddr::V4(p.dst()), protocol: p.protocol(), ports: p.ports(), ttl: p.ttl(), len: p.total_len() }
    }

    /// The fields of a checked IPv6 packet, or `None` when its extension
    /// headers do not walk ([`ipv6::Ipv6Packet::upper_layer`]).
    #[inline]
    pub fn of_ipv6(p: &ipv6::Ipv6Packet<'_>) -> Option<InnerHeader> {
        let up = p.upper_layer().ok()?;
        Some(InnerHeader { src: IpAddr::V6(p.src()), dst: IpAddr::V6(p.dst()), protocol: up.protocol, ports: p.ports(&up), ttl: p.hop_limit(), len: p.total_len() })
    }
}

/// [`finish_cached`] that also returns the inner packet's [`InnerHeader`].
/// An IPv6 inner packet whose extension headers do not walk
/// ([`ipv6::walk_ext`]) is `BadInner` here.
#[inline]
pub fn finish_with_header(st: &mut InboundState, op: CryptoOp<PktBuf>, outer_tos: u8, cache: &mut SessionCache) -> Result<(PktBuf, InnerHeader), (EspError, PktBuf)> {
    match finish_impl(st, op, outer_tos, cache, true) {
        Ok((buf, Some(h))) => Ok((buf, h)),
        Ok((buf, None)) => Err((EspError::BadInner, buf)),
        Err(e) => Err(e),
    }
}

/// [`finish`]'s work; with `header`, the inner header's fields too (an
/// IPv6 one whose extension headers do not walk gives `None`).
#[inline(always)]
fn finish_impl(st: &mut InboundState, op: CryptoOp<PktBuf>, outer_tos: u8, cache: &mut SessionCache, header: bool) -> Result<(PktBuf, Option<InnerHeader>), (EspError, PktBuf)> {
    let (mut buf, d0, payload_len, next_header) = super::open_cached(st, op, cache)?;
    let inner = &buf.frame()[d0..d0 + payload_len];
    let checked = match next_header {
        ipv4::PROTO_IPIP => ipv4::Ipv4Packet::new_checked(inner).map(|p| (p.total_len(), p.tos(), header.then(|| InnerHeader::of_ipv4(&p)))),
        ipv6::NH_IPV6 => ipv6::Ipv6Packet::new_checked(inner).map(|p| (p.total_len(), p.traffic_class(), if header { InnerHeader::of_ipv6(&p) } else { None })),
        _ => return Err((EspError::BadNextHeader, buf)),
    };
    let Ok((inner_total, inner_tos, inner_header)) = checked else {
        return Err((EspError::BadInner, buf));
    };
    // RFC 6040 §4.2: fold the outer ECN field into the inner one; the DS
    // field is not copied back (RFC 4301 §5.1.2.1).
    let Some(ecn) = super::ecn::decap(outer_tos, inner_tos) else {
        return Err((EspError::EcnDrop, buf));
    };
    if ecn != inner_tos & 3 {
        let hdr = &mut buf.frame_mut()[d0..];
        if next_header == ipv6::NH_IPV6 {
            ipv6::set_traffic_class(hdr, (inner_tos & !3) | ecn);
        } else {
            ipv4::set_tos(hdr, (inner_tos & !3) | ecn);
        }
    }
    buf.adj(d0);
    buf.trim_to(inner_total);
    if !buf.prepend(ethernet::HEADER_LEN) {
        return Err((EspError::NoRoom, buf));
    }
    Ok((buf, inner_header))
}
