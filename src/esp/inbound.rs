//! Inbound ESP: decapsulation in tunnel mode, IPv4 in IPv4 (RFC 4303
//! §3.4), with the anti-replay check before crypto and the window update
//! after the ICV verified (§3.4.3).

use super::{gcm_aad, parse_trailer, EspError, InboundSa, InboundState, ESP_HEADER_LEN, GCM_ALIGN, GCM_IV_LEN};
use crate::crypto::{CryptoOp, OpStatus};
use crate::esp::replay::ReplayError;
use crate::io::PktBuf;
use crate::wire::{ethernet, ipv4};

/// Checks the ESP packet at `esp_offset` in `buf` (a frame already trimmed
/// to the outer IPv4 total length) and describes the op that opens it.
///
/// Checks, in order: long enough for header + IV + a 4-byte encrypted part +
/// ICV and the encrypted part a multiple of 4 (RFC 4303 §2.4) → `BadLength`;
/// sequence number not 0, not left of the window and not already seen
/// (RFC 4303 §3.4.3, ESN high bits inferred per Appendix A2.2) →
/// `SeqZero`/`Replay`. The window is not changed here.
pub fn prepare(sa: &InboundSa, st: &InboundState, buf: PktBuf, esp_offset: usize) -> Result<CryptoOp<PktBuf>, (EspError, PktBuf)> {
    let icv_len = sa.session.icv_len();
    let front = ESP_HEADER_LEN + GCM_IV_LEN;
    let f = buf.frame();
    let Some(esp) = f.get(esp_offset..) else {
        return Err((EspError::BadLength, buf));
    };
    if esp.len() < front + GCM_ALIGN + icv_len || !(esp.len() - front - icv_len).is_multiple_of(GCM_ALIGN) {
        return Err((EspError::BadLength, buf));
    }
    let ct_len = esp.len() - front - icv_len;
    let seq_lo = u32::from_be_bytes([esp[4], esp[5], esp[6], esp[7]]);
    let seq = if sa.esn { st.window.infer_esn(seq_lo) } else { seq_lo as u64 };
    match st.window.check(seq) {
        Ok(()) => {}
        Err(ReplayError::Zero) => return Err((EspError::SeqZero, buf)),
        Err(_) => return Err((EspError::Replay, buf)),
    }
    let mut iv = [0u8; 8];
    iv.copy_from_slice(&esp[ESP_HEADER_LEN..front]);
    let (aad, aad_len) = gcm_aad(sa.spi, seq, sa.esn);
    let data_offset = (esp_offset + front) as u32;
    Ok(CryptoOp {
        session: sa.session.clone(),
        buf,
        data_offset,
        data_len: ct_len as u32,
        icv_offset: data_offset + ct_len as u32,
        aad,
        aad_len,
        iv,
        status: OpStatus::NotProcessed,
        user: [seq, esp_offset as u64],
    })
}

/// Completes an inbound op: ICV verified → window updated → trailer checked
/// (pad length, padding 1, 2, 3, …) → next header 4 (59 = dummy) → inner
/// IPv4 checked, TFC padding after its total length discarded (RFC 4303
/// §2.7) → outer ECN folded into the inner header (RFC 6040 §4.2; outer CE
/// over inner Not-ECT is `EcnDrop`). The buffer must still hold the outer
/// Ethernet and IPv4 headers at its front (as `prepare` left it). On success the frame is 14 bytes of Ethernet header (to be filled
/// by routing) followed by the inner packet exactly as it was sent.
pub fn finish(st: &mut InboundState, op: CryptoOp<PktBuf>) -> Result<PktBuf, (EspError, PktBuf)> {
    match op.status {
        OpStatus::Success => {}
        OpStatus::AuthFailed => return Err((EspError::AuthFailed, op.buf)),
        OpStatus::SessionNotAttached => return Err((EspError::SessionNotAttached, op.buf)),
        _ => return Err((EspError::CryptoError, op.buf)),
    }
    let seq = op.user[0];
    let mut buf = op.buf;
    if st.window.commit(seq).is_err() {
        return Err((EspError::Replay, buf));
    }
    let d0 = op.data_offset as usize;
    let d1 = d0 + op.data_len as usize;
    let Some(plain) = buf.frame().get(d0..d1) else {
        return Err((EspError::BadLength, buf));
    };
    let (payload_len, next_header) = match parse_trailer(plain) {
        Ok(t) => t,
        Err(e) => return Err((e, buf)),
    };
    if next_header == ipv4::PROTO_NONE {
        return Err((EspError::Dummy, buf));
    }
    if next_header != ipv4::PROTO_IPIP {
        return Err((EspError::BadNextHeader, buf));
    }
    let (inner_total, inner_tos) = match ipv4::Ipv4Packet::new_checked(&plain[..payload_len]) {
        Ok(p) => (p.total_len(), p.tos()),
        Err(_) => return Err((EspError::BadInner, buf)),
    };
    // RFC 6040 §4.2: fold the outer ECN field into the inner one; the DS
    // field is not copied back (RFC 4301 §5.1.2.1).
    let outer_tos = buf.frame().get(ethernet::HEADER_LEN + ipv4::TOS).copied().unwrap_or(0);
    let Some(ecn) = super::ecn::decap(outer_tos, inner_tos) else {
        return Err((EspError::EcnDrop, buf));
    };
    if ecn != inner_tos & 3 {
        ipv4::set_tos(&mut buf.frame_mut()[d0..d0 + ipv4::MIN_HEADER_LEN], (inner_tos & !3) | ecn);
    }
    buf.adj(d0);
    buf.trim_to(inner_total);
    if !buf.prepend(ethernet::HEADER_LEN) {
        return Err((EspError::NoRoom, buf));
    }
    Ok(buf)
}
