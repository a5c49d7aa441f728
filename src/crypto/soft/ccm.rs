//! AES-CCM (NIST SP 800-38C) for ESP (RFC 4309), from RustCrypto's `ccm`
//! crate over `aes`.
//!
//! RFC 4309 fixes the CCM parameters: an 11-byte nonce (3-byte salt from
//! the key material ‖ the packet's 8-byte IV, §4), so L = 4 (a 4-byte
//! length field, §4); an ICV of 8, 12 or 16 bytes (M, §3.1); AAD = SPI ‖
//! sequence number, or SPI ‖ ESN high ‖ low half with ESN (§5), which the
//! op carries in `aad`. `ccm`'s types fix key, ICV and nonce size at compile
//! time: one variant per key and ICV length, chosen when the session is
//! created, never per packet.
//!
//! On a failed ICV check `ccm` zeroes the cipher range (CCM decrypts before
//! it can compute the tag): no unverified plaintext is released (RFC 4303
//! §3.4.4), as with ring's transforms.

use super::transform::OpArgs;
use crate::crypto::{OpRanges, OpStatus};
use aes::{Aes128, Aes192, Aes256};
use ccm::aead::generic_array::GenericArray;
use ccm::aead::AeadInPlace;
use ccm::consts::{U11, U12, U16, U8};
use ccm::{Ccm, KeyInit};

/// One expanded AES-CCM key with its ICV length. The AES key schedule
/// inside is wiped on drop (`aes`'s `zeroize` feature).
pub(crate) enum AesCcm {
    A128I8(Ccm<Aes128, U8, U11>),
    A128I12(Ccm<Aes128, U12, U11>),
    A128I16(Ccm<Aes128, U16, U11>),
    A192I8(Ccm<Aes192, U8, U11>),
    A192I12(Ccm<Aes192, U12, U11>),
    A192I16(Ccm<Aes192, U16, U11>),
    A256I8(Ccm<Aes256, U8, U11>),
    A256I12(Ccm<Aes256, U12, U11>),
    A256I16(Ccm<Aes256, U16, U11>),
}

/// Runs `$body` with `$c` bound to the variant's `Ccm`.
macro_rules! with_ccm {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            AesCcm::A128I8($c) => $body,
            AesCcm::A128I12($c) => $body,
            AesCcm::A128I16($c) => $body,
            AesCcm::A192I8($c) => $body,
            AesCcm::A192I12($c) => $body,
            AesCcm::A192I16($c) => $body,
            AesCcm::A256I8($c) => $body,
            AesCcm::A256I12($c) => $body,
            AesCcm::A256I16($c) => $body,
        }
    };
}

/// The 11-byte CCM nonce from the session's `salt ‖ iv` nonce (RFC 4309
/// §4): the salt's first 3 bytes (the key material's last 3) and the IV.
fn nonce(a: &OpArgs<'_>) -> [u8; 11] {
    let mut n = [0u8; 11];
    n[..3].copy_from_slice(&a.nonce[..3]);
    n[3..].copy_from_slice(&a.nonce[4..12]);
    n
}

impl AesCcm {
    /// Expands `key` (16, 24 or 32 bytes) for an ICV of `icv_len` bytes (8,
    /// 12 or 16); `None` for any other length (the caller checked both
    /// against the algorithm's capability).
    pub(crate) fn new(key: &[u8], icv_len: usize) -> Option<AesCcm> {
        Some(match (key.len(), icv_len) {
            (16, 8) => AesCcm::A128I8(Ccm::new_from_slice(key).ok()?),
            (16, 12) => AesCcm::A128I12(Ccm::new_from_slice(key).ok()?),
            (16, 16) => AesCcm::A128I16(Ccm::new_from_slice(key).ok()?),
            (24, 8) => AesCcm::A192I8(Ccm::new_from_slice(key).ok()?),
            (24, 12) => AesCcm::A192I12(Ccm::new_from_slice(key).ok()?),
            (24, 16) => AesCcm::A192I16(Ccm::new_from_slice(key).ok()?),
            (32, 8) => AesCcm::A256I8(Ccm::new_from_slice(key).ok()?),
            (32, 12) => AesCcm::A256I12(Ccm::new_from_slice(key).ok()?),
            (32, 16) => AesCcm::A256I16(Ccm::new_from_slice(key).ok()?),
            _ => return None,
        })
    }

    /// The ICV length this key was expanded for.
    fn icv_len(&self) -> usize {
        match self {
            AesCcm::A128I8(_) | AesCcm::A192I8(_) | AesCcm::A256I8(_) => 8,
            AesCcm::A128I12(_) | AesCcm::A192I12(_) | AesCcm::A256I12(_) => 12,
            _ => 16,
        }
    }

    /// Encrypts the cipher range and writes the ICV (AAD = `a.aad`; the
    /// auth range is empty for CCM, checked by `process_op`).
    pub(crate) fn seal(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        if a.icv_len != self.icv_len() {
            return OpStatus::InvalidOp;
        }
        let n = nonce(a);
        let n = GenericArray::from_slice(&n);
        with_ccm!(self, c => match c.encrypt_in_place_detached(n, a.aad, &mut buf[r.data.clone()]) {
            Ok(tag) => {
                buf[r.icv.clone()].copy_from_slice(&tag);
                OpStatus::Success
            }
            // Only a payload beyond CCM's length field (2^32 bytes here).
            Err(_) => OpStatus::DeviceError,
        })
    }

    /// Decrypts the cipher range and verifies the ICV (constant time); on
    /// failure the cipher range is zeroed (see the module doc).
    pub(crate) fn open(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        if a.icv_len != self.icv_len() {
            return OpStatus::InvalidOp;
        }
        let n = nonce(a);
        let n = GenericArray::from_slice(&n);
        let (data, icv) = (r.data.clone(), r.icv.clone());
        with_ccm!(self, c => {
            let tag = GenericArray::clone_from_slice(&buf[icv]);
            match c.decrypt_in_place_detached(n, a.aad, &mut buf[data], &tag) {
                Ok(()) => OpStatus::Success,
                Err(_) => OpStatus::AuthFailed,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our parameters through `ccm` (the byte-exact check against another
    /// implementation is tests/esp_vectors.rs with ccm_esp.json): a seal
    /// opens, only the salt's first 3 bytes are nonce, and a flipped bit in
    /// the ciphertext, ICV, AAD or nonce fails and zeroes the range.
    #[test]
    fn seal_opens_and_every_tamper_fails() {
        for (klen, icv) in [(16, 8), (16, 12), (16, 16), (24, 16), (32, 8), (32, 16)] {
            let key: Vec<u8> = (0..klen as u8).collect();
            let c = AesCcm::new(&key, icv).unwrap();
            let pt: Vec<u8> = (0..45u8).collect();
            let mut buf = [pt.clone(), vec![0; icv]].concat();
            let r = OpRanges { data: 0..45, auth: 0..0, icv: 45..45 + icv };
            let args = |n: &'static [u8; 12], aad: &'static [u8]| OpArgs { nonce: n, iv: &[0; 16], aad, trailer: &[], icv_len: icv };
            static N: [u8; 12] = [0xa0, 0xa1, 0xa2, 0xff, 1, 2, 3, 4, 5, 6, 7, 8];
            static A: [u8; 8] = [0, 0, 1, 2, 0, 0, 0, 5];
            assert_eq!(c.seal(&args(&N, &A), &mut buf, &r), OpStatus::Success);
            assert_ne!(&buf[..45], &pt[..]);
            let sealed = buf.clone();
            assert_eq!(c.open(&args(&N, &A), &mut buf, &r), OpStatus::Success);
            assert_eq!(&buf[..45], &pt[..]);
            // The salt's fourth byte is not part of the CCM nonce.
            static N4: [u8; 12] = [0xa0, 0xa1, 0xa2, 0x00, 1, 2, 3, 4, 5, 6, 7, 8];
            let mut b = sealed.clone();
            assert_eq!(c.open(&args(&N4, &A), &mut b, &r), OpStatus::Success, "byte 3 of the salt is unused");
            static NX: [u8; 12] = [0xa0, 0xa1, 0xa3, 0xff, 1, 2, 3, 4, 5, 6, 7, 8];
            static AX: [u8; 8] = [0, 0, 1, 2, 0, 0, 0, 6];
            for (n, a, flip) in [(&N, &A, Some(3)), (&N, &A, Some(45 + icv - 1)), (&NX, &A, None), (&N, &AX, None)] {
                let mut b = sealed.clone();
                if let Some(i) = flip {
                    b[i] ^= 1;
                }
                assert_eq!(c.open(&args(n, a), &mut b, &r), OpStatus::AuthFailed, "{klen} {icv} {flip:?}");
                assert!(b[..45].iter().all(|&x| x == 0), "no unverified plaintext released");
            }
            // An op asking for another ICV length than the session's.
            let wrong = OpArgs { nonce: &N, iv: &[0; 16], aad: &A, trailer: &[], icv_len: if icv == 16 { 8 } else { 16 } };
            assert_eq!(c.seal(&wrong, &mut buf, &r), OpStatus::InvalidOp);
        }
    }

    #[test]
    fn other_lengths_are_refused() {
        assert!(AesCcm::new(&[0; 16], 4).is_none());
        assert!(AesCcm::new(&[0; 20], 16).is_none());
    }
}
