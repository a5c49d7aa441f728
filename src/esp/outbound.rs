//! Outbound ESP: encapsulation in tunnel mode (RFC 4303 §3.1.2; algorithms
//! per [`crate::crypto::Algorithm`]; header rules of RFC 4301 §5.1.2.1):
//! IPv4 or IPv6 inner packets in an IPv4 or IPv6 outer header, the outer
//! family being the SA's endpoints'.

use super::{esp_op, front_len, pad_len, write_trailer, EspError, OutboundSa, OutboundState, SessionCache, ESP_HEADER_LEN, GCM_IV_LEN, TRAILER_LEN};
use crate::crypto::{Algorithm, CryptoOp, OpStatus, Session};
use crate::io::PktBuf;
use crate::wire::{esp as esp_hdr, ethernet, ipv4, ipv6, udp};
use std::net::IpAddr;
use std::sync::Arc;

/// Bytes tunnel mode adds in front of the inner packet with AES-GCM: outer
/// IPv4 (20) + ESP header (8) + IV (8). Other algorithms: outer IPv4 +
/// [`super::front_len`].
pub const TUNNEL_OVERHEAD_FRONT: usize = ipv4::MIN_HEADER_LEN + ESP_HEADER_LEN + GCM_IV_LEN;

/// Frames `buf` (whose frame is the payload) as ESP for `session`'s
/// algorithm: appends padding 1, 2, 3, … to the algorithm's block size
/// (16 for AES-CBC, else 4; RFC 4303 §2.4), Pad Length, `next_header` and
/// room for the ICV; prepends SPI, sequence number (low 32 bits) and `iv`
/// (`algorithm.iv_len()` bytes: 8, 16 for CBC, none for NULL); returns the
/// op that seals it ([`super::esp_op`]). Offsets in the op are relative
/// to the new frame start (the ESP header). On error (`NoRoom`, or
/// `CryptoError` for an IV of the wrong length) the buffer comes back
/// unchanged. [`encap_sa`] does the same with an SA's own padding
/// alignment.
#[inline]
pub fn encap(
    spi: u32,
    session: &Arc<Session>,
    seq: u64,
    esn: bool,
    iv: &[u8],
    next_header: u8,
    buf: PktBuf,
) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    frame_esp(spi, session, seq, esn, iv, next_header, session.algorithm().block_size(), buf, &mut SessionCache::default())
}

/// [`encap`] for outbound SA `sa`: its SPI, session and ESN, and padding
/// to `sa.pad_align` bytes ([`OutboundSa::pad_align`], at least the
/// algorithm's block size); the op's session reference comes from `cache`.
#[inline]
pub fn encap_sa(sa: &OutboundSa, seq: u64, iv: &[u8], next_header: u8, buf: PktBuf, cache: &mut SessionCache) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    frame_esp(sa.spi, &sa.session, seq, sa.esn, iv, next_header, sa.pad_align, buf, cache)
}

/// [`encap`] with padding to `align` bytes (raised to the block size), the
/// op's session reference from `cache` (taken only once the frame is
/// written: an error takes none).
#[allow(clippy::too_many_arguments)]
#[inline]
fn frame_esp(
    spi: u32,
    session: &Arc<Session>,
    seq: u64,
    esn: bool,
    iv: &[u8],
    next_header: u8,
    align: usize,
    mut buf: PktBuf,
    cache: &mut SessionCache,
) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    let mut op_iv = [0u8; 16];
    match write_esp(spi, session, seq, iv, next_header, align, &mut buf) {
        Ok(enc_len) => {
            op_iv[..iv.len()].copy_from_slice(iv);
            Ok(esp_op(cache.take(session), buf, 0, enc_len, spi, seq, esn, op_iv, [seq, 0]))
        }
        Err(e) => Err((e, buf)),
    }
}

/// The buffer work of [`encap`]: trailer after the payload (padding to
/// `align` bytes, raised to the block size), ESP header and `iv` in front;
/// returns the length of the encrypted part. Errors (`NoRoom`, or
/// `CryptoError` for an IV of the wrong length) leave `buf` unchanged.
#[inline(always)]
fn write_esp(spi: u32, session: &Session, seq: u64, iv: &[u8], next_header: u8, align: usize, buf: &mut PktBuf) -> Result<usize, EspError> {
    let alg = session.algorithm();
    if iv.len() != alg.iv_len() {
        return Err(EspError::CryptoError);
    }
    let payload_len = buf.len();
    let pad = pad_len(payload_len, align.max(alg.block_size()));
    let icv_len = session.icv_len();
    let front = front_len(alg);
    if buf.tailroom() < pad + TRAILER_LEN + icv_len || buf.headroom() < front {
        return Err(EspError::NoRoom);
    }
    buf.append(pad + TRAILER_LEN + icv_len);
    write_trailer(&mut buf.frame_mut()[payload_len..payload_len + pad + TRAILER_LEN], next_header);
    buf.prepend(front);
    let f = buf.frame_mut();
    esp_hdr::write_header(f, spi, seq as u32);
    f[ESP_HEADER_LEN..front].copy_from_slice(iv);
    Ok(payload_len + pad + TRAILER_LEN)
}

/// Bytes UDP encapsulation (RFC 3948) adds on top of [`TUNNEL_OVERHEAD_FRONT`]:
/// the 8-byte UDP header between the outer IPv4 header and ESP.
pub const UDP_ENCAP_OVERHEAD: usize = udp::HEADER_LEN;

/// Bytes `sa` adds to an inner packet of `inner_len` bytes, and the size of
/// the outer packet it becomes (RFC 4303 §2). Tunnel mode: outer IPv4 (20)
/// or IPv6 (40, when the SA's endpoints are IPv6), UDP (8, with
/// `udp_encap`), ESP header (8), IV, the inner packet, padding to the
/// SA's alignment ([`OutboundSa::pad_align`], at least
/// [`crate::crypto::Algorithm::block_size`], §2.4),
/// Pad Length and Next Header (2), ICV. Transport mode (§3.1.1): the
/// packet's own headers of `hl` bytes stay in front (the IPv4 header, or
/// the IPv6 header and the extension headers
/// [`crate::wire::ipv6::esp_placement`] keeps in front) and only what
/// follows them is padded and encrypted. A tunnel SA's TFC padding target
/// ([`tfc_target`]) counts as the least inner length (RFC 4303 §2.7). `hl` is unused in tunnel mode. The
/// one place that knows an SA's overhead: the MTU check and
/// [`max_inner_len`] both use it.
#[inline(always)]
pub fn encapsulated_len(sa: &OutboundSa, hl: usize, inner_len: usize) -> usize {
    let (kept, fixed, align) = layout(sa, hl);
    // TFC padding (tunnel mode): a shorter packet goes out as long as this.
    let inner_len = if sa.transport { inner_len } else { inner_len.max(tfc_target(sa)) };
    fixed + encrypted_len(inner_len.saturating_sub(kept), align)
}

/// The length tunnel-mode SA `sa` pads shorter inner packets to (TFC
/// padding, RFC 4303 §2.7): `sa.tfc_pad_to` (0: none), but never more than
/// the largest inner packet that fits the SA's learned path MTU
/// ([`super::pmtu::PathMtu::peek`], RFC 4301 §8.2.1), so padding never
/// makes a packet that fits unpadded too big for the path (which would
/// refuse every short packet with an ICMP error advertising more than its
/// own size). Config checks that `tfc_pad_to` fits the egress port's MTU.
#[inline]
pub fn tfc_target(sa: &OutboundSa) -> usize {
    if sa.tfc_pad_to == 0 {
        return 0;
    }
    match sa.path_mtu.peek() {
        Some(mtu) => sa.tfc_pad_to.min(max_inner_len(sa, 0, mtu as usize)),
        None => sa.tfc_pad_to,
    }
}

/// Bytes of the encrypted part for `payload_len` bytes of payload padded
/// to `align` (RFC 4303 §2.4): payload, padding, Pad Length, Next Header.
#[inline]
fn encrypted_len(payload_len: usize, align: usize) -> usize {
    payload_len + pad_len(payload_len, align) + TRAILER_LEN
}

/// The largest inner packet (IPv4 header of `hl` bytes, used in transport
/// mode only) whose [`encapsulated_len`] is at most `mtu` (0 if none
/// fits): the next-hop MTU an ICMP "fragmentation needed" error advertises
/// (RFC 1191). Rounds down to the algorithm's alignment, so a
/// 16-byte-block CBC SA advertises less than the plain overhead suggests.
pub fn max_inner_len(sa: &OutboundSa, hl: usize, mtu: usize) -> usize {
    let (kept, fixed, align) = layout(sa, hl);
    let room = mtu.saturating_sub(fixed) / align * align;
    match room.checked_sub(TRAILER_LEN) {
        Some(r) => r + kept,
        None => 0,
    }
}

/// (bytes of the inner packet kept in front of ESP unencrypted: the IPv4
/// header `hl` in transport mode, 0 in tunnel mode; bytes that do not
/// depend on the inner length; alignment of the encrypted part) for `sa`.
fn layout(sa: &OutboundSa, hl: usize) -> (usize, usize, usize) {
    let alg = sa.session.algorithm();
    let (kept, outer) = if sa.transport { (hl, hl) } else { (0, outer_ip_len(sa)) };
    (kept, fixed_len(alg, sa.session.icv_len(), outer, sa.udp_encap.is_some()), sa.pad_align.max(alg.block_size()))
}

/// Bytes of an ESP packet that do not depend on its payload: `outer`
/// bytes of IP header(s), UDP (8, with `udp_encap`), ESP header, IV, ICV.
fn fixed_len(alg: Algorithm, icv_len: usize, outer: usize, udp_encap: bool) -> usize {
    let udp = if udp_encap { UDP_ENCAP_OVERHEAD } else { 0 };
    outer + udp + front_len(alg) + icv_len
}

/// Size in bytes of the tunnel-mode ESP packet (outer IP header on) that
/// carries `payload_len` bytes of payload for an SA of algorithm `alg`
/// with `icv_len`-byte ICVs, an IPv6 (`ipv6`) or IPv4 outer header and
/// optionally UDP encapsulation, padded to `pad_align` bytes (0 or less
/// than the algorithm's block size: the block size; [`OutboundSa::pad_align`]):
/// [`encapsulated_len`] before the SA exists (config validation of dummy
/// packet sizes against an MTU).
pub fn tunnel_len(alg: Algorithm, icv_len: usize, ipv6: bool, udp_encap: bool, pad_align: usize, payload_len: usize) -> usize {
    let outer = if ipv6 { ipv6::HEADER_LEN } else { ipv4::MIN_HEADER_LEN };
    fixed_len(alg, icv_len, outer, udp_encap) + encrypted_len(payload_len, pad_align.max(alg.block_size()))
}

/// Length of `sa`'s outer IP header: 40 for IPv6 endpoints, else 20.
#[inline]
pub fn outer_ip_len(sa: &OutboundSa) -> usize {
    if sa.tunnel_dst.is_ipv6() {
        ipv6::HEADER_LEN
    } else {
        ipv4::MIN_HEADER_LEN
    }
}

/// The inner packet at the start of `ip` (the frame after Ethernet): (DS +
/// ECN byte, DF, total length, tunnel-mode next header 4 or 41), or `None`
/// when it is neither a complete IPv4 nor IPv6 header.
fn inner_facts(ip: &[u8]) -> Option<(u8, bool, usize, u8)> {
    match ip.first()? >> 4 {
        4 => {
            let h = ip.get(..ipv4::MIN_HEADER_LEN)?;
            let total = u16::from_be_bytes([h[ipv4::TOTAL_LEN], h[ipv4::TOTAL_LEN + 1]]) as usize;
            let flags = u16::from_be_bytes([h[ipv4::FLAGS_FRAG], h[ipv4::FLAGS_FRAG + 1]]);
            (total >= ipv4::MIN_HEADER_LEN).then_some((h[ipv4::TOS], flags & ipv4::FLAG_DF != 0, total, ipv4::PROTO_IPIP))
        }
        6 => {
            let h = ip.get(..ipv6::HEADER_LEN)?;
            let total = ipv6::HEADER_LEN + u16::from_be_bytes([h[ipv6::PAYLOAD_LEN], h[ipv6::PAYLOAD_LEN + 1]]) as usize;
            // IPv6 has no DF: it is never fragmented on the way (RFC 8200 §5).
            Some((ipv6::traffic_class(h), true, total, ipv6::NH_IPV6))
        }
        _ => None,
    }
}

/// Encapsulates the Ethernet + IPv4 or IPv6 frame in `buf` with
/// tunnel-mode SA `sa` (RFC 4303 §3.1.2).
///
/// The caller has checked the inner header (`wire::ipv4::Ipv4Packet` /
/// `wire::ipv6::Ipv6Packet`) and already applied the forwarding TTL / hop
/// limit decrement. The trailer's Next Header is 4 for an IPv4 inner
/// packet, 41 for IPv6. Result: a frame of Ethernet (14 bytes, addresses
/// filled in later by routing), the outer header, ESP, IV, inner packet,
/// trailer and ICV room, and the op that seals it. The outer header is of
/// the family of the SA's endpoints (RFC 4301 §5.1.2.1):
/// * IPv4: TTL `sa.outer_ttl`, DS field and ECN copied from the inner
///   header (IPv4 TOS or IPv6 traffic class; RFC 6040 normal mode copies
///   ECN), DF per `sa.df` (`copy` of an IPv6 inner packet sets it: IPv6 is
///   never fragmented on the way) but clear whatever `sa.df` says for a
///   buffer whose outer packet is to be fragmented
///   ([`PktBuf::outer_frag_mtu`] nonzero), identification = low 16 bits of
///   the sequence number ([`seq_ident`]; [`prepare_with_ident`] takes
///   another source for headers with DF clear, RFC 6864 §4), protocol 50;
/// * IPv6: version 6, traffic class copied from the inner header the same
///   way, flow label 0 (RFC 6437 §2: "unlabeled"; not derived from the
///   inner flow), payload length, next header 50, hop limit
///   `sa.outer_ttl`; no DF (`sa.df` does not apply).
///
/// With `sa.udp_encap` (RFC 3948 §2.1) the outer protocol is 17 and a UDP
/// header (the SA's ports, length) sits between the outer header and ESP;
/// it grows into the same headroom. Its checksum is 0 over IPv4 (§3.1.2:
/// a sender SHOULD) and is computed by [`finish`] over IPv6, after the
/// crypto (RFC 8200 §8.1: UDP over IPv6 always carries one). The explicit IV comes from `sa.iv_gen`
/// ([`super::iv`]): the 64-bit sequence number for counter modes (unique
/// for the key, RFC 4106 §3.1, RFC 3686 §3.1), AES of it under the SA's IV
/// key for CBC (unpredictable, RFC 3602 §3). Errors: `SeqExhausted` when the
/// counter would cycle, `BadInner`/`NoRoom` on a frame that does not fit,
/// `CryptoError` for a CBC SA built without an IV key.
///
/// A transport-mode SA (`sa.transport`) is dispatched to
/// [`super::transport::outbound_prepare`].
///
/// With `sa.tfc_pad_to` the inner packet is first padded with zeros to
/// that many bytes (TFC padding, RFC 4303 §2.7), so packets shorter than
/// it all look the same size on the wire; to less when the SA's learned
/// path MTU has no room for that many ([`tfc_target`]).
#[inline]
pub fn prepare(sa: &OutboundSa, st: &mut OutboundState, buf: PktBuf) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    prepare_cached(sa, st, buf, &mut SessionCache::default())
}

/// [`prepare`], the op's session reference taken from `cache` (both
/// modes).
#[inline]
pub fn prepare_cached(sa: &OutboundSa, st: &mut OutboundState, buf: PktBuf, cache: &mut SessionCache) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    prepare_with_ident(sa, st, buf, cache, seq_ident)
}

/// The identification [`prepare`] gives an outer IPv4 header: the low 16
/// bits of the packet's sequence number `seq`. Unique per SA until 65,536
/// packets have gone, but the same across the SAs between two gateways,
/// each counting from 1: enough where DF is set (the datagram is atomic,
/// RFC 6864 §4.1) or one SA sends (a traffic generator), not for a gateway
/// whose DF-clear packets of several SAs may be fragmented and meet at one
/// reassembler (§4.2): it passes its own source to [`prepare_with_ident`].
#[inline]
pub fn seq_ident(seq: u64) -> u16 {
    seq as u16
}

/// [`prepare_cached`] with the identification of an outer IPv4 header
/// whose DF is clear taken from `ident` (called with the packet's
/// sequence number, once, only for such a header; a header with DF set,
/// or an IPv6 one, never calls it), so the header and its checksum are
/// written once (RFC 6864 §4.2: the value must not repeat for the source,
/// destination and protocol while fragments may meet). Transport mode
/// keeps the packet's own header and never calls `ident`.
#[inline]
pub fn prepare_with_ident(
    sa: &OutboundSa,
    st: &mut OutboundState,
    buf: PktBuf,
    cache: &mut SessionCache,
    ident: impl FnOnce(u64) -> u16,
) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    if sa.transport {
        return super::transport::outbound_prepare(sa, st, buf, cache);
    }
    match TunnelPlan::new(sa) {
        Some(plan) => prepare_planned(sa, &plan, st, buf, cache, ident),
        // Config validation keeps both endpoints of one family.
        None => Err((EspError::CryptoError, buf)),
    }
}

/// TFC padding (RFC 4303 §2.7): grows the inner packet of `total` bytes
/// after the Ethernet header of `buf` with zero bytes up to `pad_to` bytes
/// (anything already after the packet, such as Ethernet padding, is
/// zeroed too). The receiver finds the packet's end from its own IPv4
/// total length / IPv6 payload length and drops the rest. Returns the ESP
/// payload length: `pad_to`, or `total` when the packet is at least that
/// long already (or, never with a validated config, the buffer has no
/// room: the packet goes unpadded).
#[inline(always)]
fn tfc_pad(buf: &mut PktBuf, total: usize, pad_to: usize) -> usize {
    if pad_to <= total {
        return total;
    }
    let want = ethernet::HEADER_LEN + pad_to;
    if buf.len() < want && !buf.append(want - buf.len()) {
        return total;
    }
    buf.frame_mut()[ethernet::HEADER_LEN + total..want].fill(0);
    pad_to
}

/// Bytes of dummy payload [`prepare_dummy`] accepts at most: 1400, which
/// every SA fits into a 1500-byte MTU (IPv6 outer header, UDP, 16-byte
/// IV, CBC padding and a 16-byte ICV add at most 96 bytes).
pub const MAX_DUMMY_LEN: usize = 1400;

/// Builds a dummy packet (RFC 4303 §2.6) for tunnel-mode SA `sa` in `buf`
/// (its old contents are discarded): an ESP payload of `len` zero bytes
/// (at most [`MAX_DUMMY_LEN`]) with Next Header 59 ("no next header"), in
/// the same outer header, UDP encapsulation, padding and IV as
/// [`prepare`] gives a real packet (DS/ECN 0; DF set only with
/// `df = set`, as there is no inner header to copy it from). Zeros are
/// enough: the payload is encrypted, so on the wire a dummy is as
/// random-looking as real traffic of its length — except with NULL
/// encryption (RFC 2410), where the zeros, and Next Header 59, are
/// visible to anyone. The dummy takes the SA's next sequence number like
/// any packet sent on it (RFC 4303 §3.3.3: the counter counts every
/// packet sent; the receiver's anti-replay check runs before it can know
/// a packet is a dummy), so dummies and real packets interleave without
/// gaps. Result as [`prepare`]: a frame of Ethernet (addresses filled in
/// by routing) + outer header + ESP, and the op that seals it. `ident`
/// gives an outer IPv4 header with DF clear its identification, as in
/// [`prepare_with_ident`] ([`seq_ident`] for [`prepare`]'s).
///
/// The payload is cut to what fits the SA's learned path MTU
/// ([`super::pmtu::PathMtu::peek`], RFC 4301 §8.2.1; [`max_inner_len`]),
/// as TFC padding is ([`tfc_target`]): a dummy is there to look like
/// traffic, and one too big for the path would be refused or fragmented
/// on the way (the worker clears an aged-out value before calling this).
///
/// Errors: `BadInner` for a transport-mode SA (it has no endpoints of its
/// own to address a dummy to; config refuses dummies there) or `len` over
/// [`MAX_DUMMY_LEN`], `SeqExhausted` as [`prepare`].
pub fn prepare_dummy(
    sa: &OutboundSa,
    st: &mut OutboundState,
    mut buf: PktBuf,
    len: usize,
    ident: impl FnOnce(u64) -> u16,
) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    if sa.transport || len > MAX_DUMMY_LEN {
        return Err((EspError::BadInner, buf));
    }
    let len = match sa.path_mtu.peek() {
        Some(mtu) => len.min(max_inner_len(sa, 0, mtu as usize)),
        None => len,
    };
    let Some(plan) = TunnelPlan::new(sa) else {
        return Err((EspError::CryptoError, buf));
    };
    let area = buf.reset();
    area[ethernet::HEADER_LEN..ethernet::HEADER_LEN + len].fill(0);
    buf.set_len(ethernet::HEADER_LEN + len);
    seal_tunnel(sa, &plan, st, buf, len, 0, false, ipv4::PROTO_NONE, &mut SessionCache::default(), ident)
}

/// What every tunnel-mode packet of an outbound SA has in common, worked
/// out once per SA instead of per packet (DESIGN §6: "the outer header is
/// a template built when the SA is installed", DPDK's `sa->hdr`): the
/// outer IPv4 or IPv6 header and the UDP header of `udp_encap` as every
/// packet carries them (the fields that vary per packet zero: DS + ECN,
/// lengths, identification, DF, checksum), the IPv4 header's checksum sum
/// over the fixed fields, and the ESP framing sizes of the SA's algorithm.
/// A worker builds one per SA it owns when it adopts a tables snapshot
/// (the SAs of a published snapshot never change); [`prepare`] builds one
/// per call.
#[derive(Debug, Clone, Copy)]
pub struct TunnelPlan {
    /// Outer IP header (20 or 40 bytes) then UDP (8, with `udp_encap`).
    hdr: [u8; ipv6::HEADER_LEN + udp::HEADER_LEN],
    /// Bytes of `hdr` used.
    outer: usize,
    ipv6: bool,
    udp: bool,
    /// IPv4: ones' complement sum (not folded) of the header's 16-bit
    /// words as in `hdr`.
    sum: u32,
    /// ESP header + explicit IV.
    front: usize,
    iv_len: usize,
    icv_len: usize,
    /// Alignment of the encrypted part: `pad_align`, at least the block size.
    align: usize,
}

impl TunnelPlan {
    /// The plan of tunnel-mode SA `sa`; `None` for a transport-mode SA or
    /// endpoints of two families (config validation refuses both for a
    /// tunnel).
    pub fn new(sa: &OutboundSa) -> Option<TunnelPlan> {
        if sa.transport {
            return None;
        }
        let alg = sa.session.algorithm();
        let protocol = if sa.udp_encap.is_some() { ipv4::PROTO_UDP } else { ipv4::PROTO_ESP };
        let mut hdr = [0u8; ipv6::HEADER_LEN + udp::HEADER_LEN];
        let (ip_len, sum) = match (sa.tunnel_src, sa.tunnel_dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                // Written with the varying fields zero; its checksum field
                // is then !sum, so the sum is the complement of it.
                ipv4::write_header(&mut hdr, 0, 0, 0, 0, sa.outer_ttl, protocol, src, dst);
                let ck = u16::from_be_bytes([hdr[ipv4::CHECKSUM], hdr[ipv4::CHECKSUM + 1]]);
                hdr[ipv4::CHECKSUM..ipv4::CHECKSUM + 2].fill(0);
                (ipv4::MIN_HEADER_LEN, !ck as u32)
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                ipv6::write_header(&mut hdr, 0, 0, 0, protocol, sa.outer_ttl, &src, &dst);
                (ipv6::HEADER_LEN, 0)
            }
            _ => return None,
        };
        let outer = match sa.udp_encap {
            Some(u) => {
                udp::write_header(&mut hdr[ip_len..ip_len + udp::HEADER_LEN], u.sport, u.dport, 0);
                ip_len + udp::HEADER_LEN
            }
            None => ip_len,
        };
        Some(TunnelPlan {
            hdr,
            outer,
            ipv6: ip_len == ipv6::HEADER_LEN,
            udp: sa.udp_encap.is_some(),
            sum,
            front: front_len(alg),
            iv_len: alg.iv_len(),
            icv_len: sa.session.icv_len(),
            align: sa.pad_align.max(alg.block_size()),
        })
    }
}

/// The outer IPv6 flow label of inner packet `inner` (RFC 6438 §3): a
/// hash under `key` of its source and destination addresses, protocol
/// (IPv4) or first next header (IPv6), its own flow label (IPv6), and its
/// ports when that header is TCP, UDP, SCTP or UDP-Lite and (IPv4) the
/// packet is not a fragment, so every packet of a flow gets one label and
/// flows spread over ECMP paths. 20 bits, never 0 (RFC 6437 §3: 0 means
/// unlabeled); an inner packet too short to read gets the key's label of
/// nothing. `key` is the SA's, random: the label says nothing an observer
/// can compute from a guessed inner flow.
pub fn flow_label(key: &std::collections::hash_map::RandomState, inner: &[u8]) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = key.build_hasher();
    let has_ports = |proto: u8| matches!(proto, 6 | 17 | 132 | 136);
    match inner.first().map(|b| b >> 4) {
        Some(4) if inner.len() >= ipv4::MIN_HEADER_LEN => {
            h.write(&inner[ipv4::SRC..ipv4::SRC + 8]);
            h.write_u8(inner[ipv4::PROTOCOL]);
            let fragment = u16::from_be_bytes([inner[ipv4::FLAGS_FRAG], inner[ipv4::FLAGS_FRAG + 1]]) & 0x3fff != 0;
            let ihl = usize::from(inner[0] & 0x0f) * 4;
            if let Some(ports) = inner.get(ihl..ihl + 4).filter(|_| !fragment && has_ports(inner[ipv4::PROTOCOL])) {
                h.write(ports);
            }
        }
        Some(6) if inner.len() >= ipv6::HEADER_LEN => {
            h.write(&inner[ipv6::SRC..ipv6::SRC + 32]);
            h.write_u8(inner[ipv6::NEXT_HEADER]);
            h.write(&[inner[1] & 0x0f, inner[2], inner[3]]);
            if let Some(ports) = inner.get(ipv6::HEADER_LEN..ipv6::HEADER_LEN + 4).filter(|_| has_ports(inner[ipv6::NEXT_HEADER])) {
                h.write(ports);
            }
        }
        _ => {}
    }
    let v = h.finish();
    match (v ^ (v >> 32)) as u32 & 0x000f_ffff {
        0 => 1,
        l => l,
    }
}

/// The first 16 bytes of ESP padding (RFC 4303 §2.4: 1, 2, 3, …).
const PAD_RUN: [u8; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

/// [`prepare_with_ident`] for a tunnel-mode SA with its [`TunnelPlan`]
/// `plan` (which must be `TunnelPlan::new(sa)`): the worker's path, which
/// keeps the plans of the SAs it owns.
#[inline]
pub fn prepare_planned(
    sa: &OutboundSa,
    plan: &TunnelPlan,
    st: &mut OutboundState,
    mut buf: PktBuf,
    cache: &mut SessionCache,
    ident: impl FnOnce(u64) -> u16,
) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    let Some((tos, inner_df, total, next_header)) = inner_facts(buf.frame().get(ethernet::HEADER_LEN..).unwrap_or(&[])) else {
        return Err((EspError::BadInner, buf));
    };
    if total + ethernet::HEADER_LEN > buf.len() {
        return Err((EspError::BadInner, buf));
    }
    let payload_len = tfc_pad(&mut buf, total, tfc_target(sa));
    seal_tunnel(sa, plan, st, buf, payload_len, tos, inner_df, next_header, cache, ident)
}

/// The part of [`prepare`] after the inner packet is known: `buf` holds
/// Ethernet + `payload_len` bytes of ESP payload (anything after them is
/// cut). Takes the sequence number and IV, frames ESP with `next_header`
/// (padding to the plan's alignment, trailer, ICV room; ESP header and IV
/// in front, as [`encap`]) and writes the outer header from `plan` (DS +
/// ECN byte `tos`, DF per `sa.df` with `inner_df` for `copy`, clear for a
/// buffer whose outer packet is to be fragmented; identification from
/// `ident` when DF is clear, else [`seq_ident`]) and the UDP length of
/// `udp_encap`. Errors leave the frame as it came (Ethernet header in
/// front).
#[allow(clippy::too_many_arguments)]
#[inline]
fn seal_tunnel(
    sa: &OutboundSa,
    plan: &TunnelPlan,
    st: &mut OutboundState,
    mut buf: PktBuf,
    payload_len: usize,
    tos: u8,
    inner_df: bool,
    next_header: u8,
    cache: &mut SessionCache,
    ident: impl FnOnce(u64) -> u16,
) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    const ETH: usize = ethernet::HEADER_LEN;
    let pad = pad_len(payload_len, plan.align);
    let tail = pad + TRAILER_LEN + plan.icv_len;
    // Room for all of it, checked once: the outer headers and ESP grow
    // into the headroom in front of the Ethernet header's place.
    if buf.len() < ETH + payload_len || buf.headroom() < plan.outer + plan.front || buf.tailroom() + (buf.len() - ETH - payload_len) < tail {
        return Err((EspError::NoRoom, buf));
    }
    let Some(seq) = st.next_seq(sa.esn) else {
        return Err((EspError::SeqExhausted, buf));
    };
    let mut iv = [0u8; 16];
    if !sa.iv_gen.write(sa.session.algorithm(), seq, &mut iv) {
        return Err((EspError::CryptoError, buf));
    }
    // Frame: Ethernet | outer | ESP header | IV | payload | trailer | ICV.
    let enc_len = payload_len + pad + TRAILER_LEN;
    let esp = ETH + plan.outer;
    let head = plan.outer + plan.front;
    buf.prepend(head);
    buf.trim_to(head + ETH + payload_len);
    buf.append(tail);
    let f = buf.frame_mut();
    let t0 = esp + plan.front + payload_len;
    if pad < PAD_RUN.len() && f.len() >= t0 + PAD_RUN.len() {
        // Padding 1, 2, 3, … (RFC 4303 §2.4) as one 16-byte store; what it
        // writes past the padding is the trailer's and the ICV's room,
        // written next and by the crypto op. (`write_trailer` may not
        // write past its slice; copying a run of the padding's length
        // there measured +56 instructions a packet, as its loop.)
        f[t0..t0 + PAD_RUN.len()].copy_from_slice(&PAD_RUN);
        f[t0 + pad] = pad as u8;
        f[t0 + pad + 1] = next_header;
    } else {
        write_trailer(&mut f[t0..esp + plan.front + enc_len], next_header);
    }
    esp_hdr::write_header(&mut f[esp..], sa.spi, seq as u32);
    // The explicit IV: 8 bytes (counter modes), 16 (CBC) or none (NULL).
    match plan.iv_len {
        8 => f[esp + 8..esp + 16].copy_from_slice(&iv[..8]),
        16 => f[esp + 8..esp + 24].copy_from_slice(&iv),
        n => f[esp + 8..esp + 8 + n].copy_from_slice(&iv[..n]),
    }
    let outer_total = (f.len() - ETH) as u16;
    if plan.ipv6 {
        f[ETH..ETH + ipv6::HEADER_LEN].copy_from_slice(&plan.hdr[..ipv6::HEADER_LEN]);
        // Version 6, traffic class `tos`, flow label 0 (RFC 6437 §2) or
        // the inner flow's (RFC 6438 §3; not of a dummy packet's).
        let label = match &sa.flow_label_key {
            Some(k) if next_header != ipv4::PROTO_NONE => flow_label(k, &f[esp + plan.front..esp + plan.front + payload_len]),
            _ => 0,
        };
        f[ETH] = 0x60 | tos >> 4;
        f[ETH + 1] = tos << 4 | (label >> 16) as u8;
        f[ETH + 2] = (label >> 8) as u8;
        f[ETH + 3] = label as u8;
        f[ETH + ipv6::PAYLOAD_LEN..ETH + ipv6::PAYLOAD_LEN + 2].copy_from_slice(&(outer_total - ipv6::HEADER_LEN as u16).to_be_bytes());
    } else {
        // An outer packet to be fragmented (RFC 4213 §3.2) goes with DF
        // clear: the outer header is not covered by the ICV.
        let df = buf.outer_frag_mtu == 0
            && match sa.df {
                super::DfMode::Copy => inner_df,
                super::DfMode::Set => true,
                super::DfMode::Clear => false,
            };
        let (flags, id) = if df { (ipv4::FLAG_DF, seq_ident(seq)) } else { (0, ident(seq)) };
        let f = buf.frame_mut();
        let h = &mut f[ETH..ETH + ipv4::MIN_HEADER_LEN];
        h.copy_from_slice(&plan.hdr[..ipv4::MIN_HEADER_LEN]);
        h[ipv4::TOS] = tos;
        h[ipv4::TOTAL_LEN..ipv4::TOTAL_LEN + 2].copy_from_slice(&outer_total.to_be_bytes());
        h[ipv4::IDENT..ipv4::IDENT + 2].copy_from_slice(&id.to_be_bytes());
        h[ipv4::FLAGS_FRAG..ipv4::FLAGS_FRAG + 2].copy_from_slice(&flags.to_be_bytes());
        let mut acc = plan.sum + tos as u32 + outer_total as u32 + id as u32 + flags as u32;
        acc = (acc & 0xffff) + (acc >> 16);
        acc = (acc & 0xffff) + (acc >> 16);
        h[ipv4::CHECKSUM..ipv4::CHECKSUM + 2].copy_from_slice(&(!(acc as u16)).to_be_bytes());
    }
    if plan.udp {
        let f = buf.frame_mut();
        let ip_len = if plan.ipv6 { ipv6::HEADER_LEN } else { ipv4::MIN_HEADER_LEN };
        let u = ETH + ip_len;
        f[u..u + udp::HEADER_LEN].copy_from_slice(&plan.hdr[ip_len..ip_len + udp::HEADER_LEN]);
        f[u + udp::LENGTH..u + udp::LENGTH + 2].copy_from_slice(&(outer_total - ip_len as u16).to_be_bytes());
    }
    Ok(esp_op(cache.take(&sa.session), buf, esp, enc_len, sa.spi, seq, sa.esn, iv, [seq, 0]))
}

/// Completes an outbound op: the ICV is in place, so a successful op's
/// buffer is the finished frame, but for the UDP checksum of ESP in UDP
/// over IPv6 (RFC 8200 §8.1, RFC 3948), which covers the ciphertext and is
/// computed here (a frame of Ethernet + IPv6 with next header 17, as
/// [`prepare`] builds it for such an SA). A failed op is a `CryptoError`.
#[inline]
pub fn finish(op: CryptoOp<PktBuf>) -> Result<PktBuf, (EspError, PktBuf)> {
    finish_cached(op, &mut SessionCache::default())
}

/// [`finish`], the op's session reference going back to `cache`.
#[inline(always)]
pub fn finish_cached(op: CryptoOp<PktBuf>, cache: &mut SessionCache) -> Result<PktBuf, (EspError, PktBuf)> {
    let CryptoOp { session, mut buf, status, .. } = op;
    cache.give_back(session);
    match status {
        OpStatus::Success => {
            udp6_checksum(buf.frame_mut());
            Ok(buf)
        }
        OpStatus::SessionNotAttached => Err((EspError::SessionNotAttached, buf)),
        _ => Err((EspError::CryptoError, buf)),
    }
}

/// Fills in the UDP checksum of an Ethernet + IPv6 + UDP frame (no
/// extension headers: the outer header [`prepare`] writes); leaves any
/// other frame alone.
fn udp6_checksum(f: &mut [u8]) {
    const IP: usize = ethernet::HEADER_LEN;
    const UDP: usize = IP + ipv6::HEADER_LEN;
    if f.len() < UDP + udp::HEADER_LEN || f[IP] >> 4 != 6 || f[IP + ipv6::NEXT_HEADER] != ipv4::PROTO_UDP {
        return;
    }
    let addr = |at: usize| -> std::net::Ipv6Addr { <[u8; 16]>::try_from(&f[IP + at..IP + at + 16]).unwrap_or_default().into() };
    let (src, dst) = (addr(ipv6::SRC), addr(ipv6::DST));
    f[UDP + udp::CHECKSUM..UDP + udp::CHECKSUM + 2].copy_from_slice(&[0, 0]);
    let ck = ipv6::udp_checksum(&src, &dst, &f[UDP..]);
    f[UDP + udp::CHECKSUM..UDP + udp::CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
}
