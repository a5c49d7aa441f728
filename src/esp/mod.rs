//! ESP (RFC 4303): SA state, outbound encapsulation, inbound decapsulation,
//! padding and the anti-replay window.
//!
//! Processing is split prepare → crypto → finish (DPDK lib/ipsec):
//! [`outbound::prepare`] / [`inbound::prepare`] frame the packet and describe
//! a [`crate::crypto::CryptoOp`]; the worker's queue pair runs it;
//! [`outbound::finish`] / [`inbound::finish`] complete the packet. This module
//! does not know which crypto backend runs the op, nor where packets come
//! from.

pub mod ecn;
pub mod inbound;
pub mod iv;
pub mod lifetime;
pub mod outbound;
pub mod pmtu;
pub mod replay;
pub mod sa;
pub mod transport;

pub use iv::IvGen;
pub use lifetime::{Lifetime, Limits, SaLife};
pub use sa::{DfMode, DummyPlan, InboundSa, InboundState, OutboundSa, OutboundState, SessionCache, UdpEncap};

use crate::crypto::{Algorithm, Cipher, CryptoOp, OpStatus, Session};
use std::sync::Arc;

/// ESP header length: SPI + sequence number (RFC 4303 §2).
pub const ESP_HEADER_LEN: usize = 8;
/// Explicit IV length for AES-GCM (RFC 4106 §3.1); other algorithms:
/// [`Algorithm::iv_len`].
pub const GCM_IV_LEN: usize = 8;
/// Pad Length + Next Header.
pub const TRAILER_LEN: usize = 2;
/// Alignment of the encrypted part (RFC 4303 §2.4); GCM is a stream mode, so
/// 4 bytes is the only constraint. Other algorithms: [`Algorithm::block_size`]
/// (16 for AES-CBC).
pub const GCM_ALIGN: usize = 4;

/// Bytes between the start of the ESP header and the encrypted part: SPI,
/// sequence number and the algorithm's explicit IV.
#[inline]
pub fn front_len(alg: Algorithm) -> usize {
    ESP_HEADER_LEN + alg.iv_len()
}

/// Why ESP processing refused a packet. Each maps to a counted drop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EspError {
    /// Shorter than header + IV + minimal trailer + ICV, or not 4-byte aligned.
    BadLength,
    /// No room in the buffer to grow for ESP.
    NoRoom,
    /// Sequence number left of the window or already seen (RFC 4303 §3.4.3).
    Replay,
    /// Sequence number 0 received.
    SeqZero,
    /// The sender's counter would cycle (RFC 4303 §3.3.3): the SA must be replaced.
    SeqExhausted,
    /// ICV did not verify (RFC 4303 §3.4.4).
    AuthFailed,
    /// Pad length beyond the payload, or padding not 1, 2, 3, … (RFC 4303 §2.4, §2.5).
    BadPadding,
    /// Next header not the one the SA's mode carries.
    BadNextHeader,
    /// Next header 59: a dummy packet, discarded silently (RFC 4303 §2.6).
    Dummy,
    /// The decrypted inner packet is not a valid packet of the family its
    /// next header names (IPv4 for 4, IPv6 for 41).
    BadInner,
    /// Outer CE over an inner Not-ECT packet (RFC 6040 §4.2: MUST drop).
    EcnDrop,
    /// The crypto device could not run the op (invalid op, device error).
    CryptoError,
    /// The op's session was not attached to the queue pair (limited devices).
    SessionNotAttached,
}

/// Padding length for `payload_len` bytes so that payload + padding + 2
/// ends on `align` bytes (RFC 4303 §2.4).
#[inline]
pub fn pad_len(payload_len: usize, align: usize) -> usize {
    // Every alignment ESP uses is a power of two (4, 16, an SA's
    // `pad_align`): a mask, not two divisions, on the per-packet path.
    if align.is_power_of_two() {
        let m = align - 1;
        return (align - ((payload_len + TRAILER_LEN) & m)) & m;
    }
    (align - (payload_len + TRAILER_LEN) % align) % align
}

/// Writes the trailer into `tail`: padding 1, 2, 3, …, Pad Length, Next
/// Header. `tail.len()` must be `pad + 2`.
#[inline]
pub fn write_trailer(tail: &mut [u8], next_header: u8) {
    let pad = tail.len().saturating_sub(TRAILER_LEN);
    for (i, b) in tail[..pad].iter_mut().enumerate() {
        *b = (i + 1) as u8;
    }
    if tail.len() >= TRAILER_LEN {
        tail[pad] = pad as u8;
        tail[pad + 1] = next_header;
    }
}

/// Parses the trailer at the end of a decrypted ESP payload: checks Pad
/// Length fits (RFC 4303 §2.5) and the padding is 1, 2, 3, … (§2.4). Returns
/// (payload length, next header).
pub fn parse_trailer(plain: &[u8]) -> Result<(usize, u8), EspError> {
    let n = plain.len();
    if n < TRAILER_LEN {
        return Err(EspError::BadLength);
    }
    let next_header = plain[n - 1];
    let pad = plain[n - 2] as usize;
    if pad + TRAILER_LEN > n {
        return Err(EspError::BadPadding);
    }
    let payload_len = n - TRAILER_LEN - pad;
    for (i, &b) in plain[payload_len..payload_len + pad].iter().enumerate() {
        if b != (i + 1) as u8 {
            return Err(EspError::BadPadding);
        }
    }
    Ok((payload_len, next_header))
}

/// AAD of the combined modes: SPI ‖ seq (8 bytes), or with ESN
/// SPI ‖ seq_hi ‖ seq_lo (12 bytes) — AES-GCM (RFC 4106 §5), AES-CCM
/// (RFC 4309 §5), the part of AES-GMAC's AAD before the IV (RFC 4543 §3.3)
/// and ChaCha20-Poly1305 (RFC 7634 §2.1). Returns the AAD buffer and its length.
#[inline]
pub fn gcm_aad(spi: u32, seq: u64, esn: bool) -> ([u8; 16], u8) {
    let mut aad = [0u8; 16];
    aad[..4].copy_from_slice(&spi.to_be_bytes());
    if esn {
        aad[4..8].copy_from_slice(&((seq >> 32) as u32).to_be_bytes());
        aad[8..12].copy_from_slice(&(seq as u32).to_be_bytes());
        (aad, 12)
    } else {
        aad[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        (aad, 8)
    }
}

/// The op that seals or opens one ESP packet in `buf` with `session`:
/// the ESP header starts at `esp`, the encrypted part (payload, padding,
/// Pad Length, Next Header) of `enc_len` bytes follows the IV, and the ICV
/// follows it; `iv` is the explicit IV (its first
/// `algorithm.iv_len()` bytes), `user` the op's opaque words. This is the
/// one place that maps ESP framing to op ranges:
///
/// * AES-GCM, AES-CCM, ChaCha20-Poly1305: cipher range = encrypted part;
///   AAD = SPI ‖ (seq_hi) ‖ seq_lo (RFC 4106 §5, RFC 4309 §5, RFC 7634
///   §2.1).
/// * AES-GMAC: nothing encrypted; AAD = SPI ‖ (seq_hi) ‖ seq_lo, then the
///   auth range IV ‖ payload ‖ trailer (RFC 4543 §3.3).
/// * Cipher + HMAC (CBC, CTR, NULL): cipher range = encrypted part (left as
///   it is by NULL); auth range = ESP header to the end of the ciphertext;
///   with ESN the auth trailer is seq_hi, appended to the ICV input without
///   being sent (RFC 4303 §2.2.1, §3.3.2.1).
///
/// Built in one piece (no op is made and then filled in): on the data
/// path the op is written once, where it goes.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn esp_op<B>(session: Arc<Session>, buf: B, esp: usize, enc_len: usize, spi: u32, seq: u64, esn: bool, iv: [u8; 16], user: [u64; 2]) -> CryptoOp<B> {
    let alg = session.algorithm();
    let p0 = (esp + front_len(alg)) as u32;
    let enc = enc_len as u32;
    let (mut data_len, mut auth_offset, mut auth_len) = (enc, p0, 0);
    let (mut aad, mut aad_len) = ([0u8; 16], 0);
    let (mut auth_trailer, mut auth_trailer_len) = ([0u8; 4], 0);
    if alg.is_combined() {
        (aad, aad_len) = gcm_aad(spi, seq, esn);
        if alg.cipher() == Cipher::AesGmac {
            data_len = 0;
            auth_offset = (esp + ESP_HEADER_LEN) as u32;
            auth_len = p0 + enc - auth_offset;
        }
    } else {
        auth_offset = esp as u32;
        auth_len = p0 + enc - esp as u32;
        if esn {
            auth_trailer = ((seq >> 32) as u32).to_be_bytes();
            auth_trailer_len = 4;
        }
    }
    CryptoOp {
        session,
        buf,
        data_offset: p0,
        data_len,
        auth_offset,
        auth_len,
        icv_offset: p0 + enc,
        aad,
        aad_len,
        auth_trailer,
        auth_trailer_len,
        iv,
        status: OpStatus::NotProcessed,
        user,
    }
}

/// The encrypted part of the ESP packet an op describes (after open: the
/// plaintext payload, padding, Pad Length and Next Header), as a range of
/// its buffer.
pub fn encrypted_part<B>(op: &CryptoOp<B>) -> std::ops::Range<usize> {
    let alg = op.session.algorithm();
    let start = if alg.cipher() == Cipher::AesGmac { op.auth_offset as usize + alg.iv_len() } else { op.data_offset as usize };
    start..op.icv_offset as usize
}

/// The first steps of every inbound finish (tunnel and transport mode):
/// the op's status (ICV failed → `AuthFailed`; `SessionNotAttached`;
/// other → `CryptoError`) → the replay window updated, only now that the
/// ICV verified (RFC 4303 §3.4.3) → the trailer checked ([`parse_trailer`])
/// → Next Header 59 is a dummy (§2.6). Returns the buffer, the frame
/// offset of the decrypted payload, its length without padding and
/// trailer, and the Next Header.
pub fn open(st: &mut InboundState, op: CryptoOp<crate::io::PktBuf>) -> Result<(crate::io::PktBuf, usize, usize, u8), (EspError, crate::io::PktBuf)> {
    open_cached(st, op, &mut SessionCache::default())
}

/// The ESP error of a completed decrypt op's `status`: `None` for
/// `Success`, `AuthFailed` for an ICV that did not verify,
/// `SessionNotAttached`, else `CryptoError`.
#[inline(always)]
pub fn status_error(status: OpStatus) -> Option<EspError> {
    match status {
        OpStatus::Success => None,
        OpStatus::AuthFailed => Some(EspError::AuthFailed),
        OpStatus::SessionNotAttached => Some(EspError::SessionNotAttached),
        _ => Some(EspError::CryptoError),
    }
}

/// [`open`], the op's session reference going back to `cache`.
#[inline]
pub fn open_cached(st: &mut InboundState, op: CryptoOp<crate::io::PktBuf>, cache: &mut SessionCache) -> Result<(crate::io::PktBuf, usize, usize, u8), (EspError, crate::io::PktBuf)> {
    let enc = encrypted_part(&op);
    let CryptoOp { session, buf, status, user, .. } = op;
    cache.give_back(session);
    if let Some(e) = status_error(status) {
        return Err((e, buf));
    }
    let seq = user[0];
    if st.window.commit(seq).is_err() {
        return Err((EspError::Replay, buf));
    }
    let d0 = enc.start;
    let Some(plain) = buf.frame().get(enc) else {
        return Err((EspError::BadLength, buf));
    };
    let (payload_len, next_header) = match parse_trailer(plain) {
        Ok(t) => t,
        Err(e) => return Err((e, buf)),
    };
    if next_header == crate::wire::ipv4::PROTO_NONE {
        return Err((EspError::Dummy, buf));
    }
    Ok((buf, d0, payload_len, next_header))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_aligns_and_roundtrips() {
        for len in 0..40usize {
            let p = pad_len(len, 4);
            assert_eq!((len + p + 2) % 4, 0);
            assert!(p < 4);
            let mut v = vec![0xaa; len + p + 2];
            write_trailer(&mut v[len..], 4);
            assert_eq!(parse_trailer(&v), Ok((len, 4)));
        }
        // The mask (powers of two) and the division (anything else) agree
        // with the definition: the least padding that aligns.
        for align in [4usize, 12, 16, 256] {
            for len in 0..600usize {
                let p = pad_len(len, align);
                assert_eq!((len + p + 2) % align, 0, "align {align}, len {len}");
                assert!(p < align, "align {align}, len {len}: pad {p}");
            }
        }
    }

    #[test]
    fn trailer_checks() {
        assert_eq!(parse_trailer(&[1, 2, 3, 3, 4]), Ok((0, 4)));
        assert_eq!(parse_trailer(&[9, 1, 2, 2, 4]), Ok((1, 4)));
        assert_eq!(parse_trailer(&[9, 1, 3, 2, 4]), Err(EspError::BadPadding), "pad bytes not 1,2");
        assert_eq!(parse_trailer(&[1, 2, 5, 4]), Err(EspError::BadPadding), "pad length past the payload");
        assert_eq!(parse_trailer(&[4]), Err(EspError::BadLength));
    }
}
