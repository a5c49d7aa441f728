//! The software transform of a session: one expanded key schedule per
//! algorithm family and provider (`crypto::Provider`, chosen when the
//! session is created), run on the ranges of an op. Shared by every backend
//! through `crypto::process_op`.
//!
//! Contract of [`Transform::seal`] / [`Transform::open`]: the ranges were
//! checked by the caller (inside the buffer, the ICV overlapping neither
//! the cipher nor the auth range, CBC ranges whole blocks, GMAC's cipher
//! range and the auth range of ChaCha20-Poly1305 and CCM empty). `open`
//! verifies the ICV in constant time and releases no unverified plaintext
//! (RFC 4303 §3.4.4): the other RustCrypto transforms verify before they
//! decrypt, so a failed op leaves the buffer as it was; CCM (`ccm.rs`,
//! which must decrypt to verify) and ring's (`ring_aead.rs`) leave the
//! cipher range zeroed.

use super::ccm::AesCcm;
use super::cipher_mac::CipherMac;
use super::gcm::Gcm;
use super::ring_aead::RingAead;
use crate::crypto::{Algorithm, Cipher, OpRanges, OpStatus, Provider};
use aes::{Aes128, Aes192, Aes256};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, KeyInit};

/// Per-op inputs besides the buffer.
pub(crate) struct OpArgs<'a> {
    /// `salt ‖ iv[..8]`: GCM, GMAC, ChaCha20-Poly1305, and CTR (whose
    /// counter block is this nonce ‖ 32-bit counter).
    pub(crate) nonce: &'a [u8; 12],
    /// The op's IV (CBC uses all 16 bytes).
    pub(crate) iv: &'a [u8; 16],
    /// Combined modes: AAD that precedes the auth range.
    pub(crate) aad: &'a [u8],
    /// Separate MAC: bytes after the auth range (ESN high bits).
    pub(crate) trailer: &'a [u8],
    /// ICV length (the session's).
    pub(crate) icv_len: usize,
}

/// Expanded keys of one session.
pub(crate) enum Transform {
    /// AES-128-GCM and AES-128-GMAC.
    Gcm128(Box<Gcm<Aes128>>),
    /// AES-192-GCM and AES-192-GMAC.
    Gcm192(Box<Gcm<Aes192>>),
    /// AES-256-GCM and AES-256-GMAC.
    Gcm256(Box<Gcm<Aes256>>),
    /// ChaCha20-Poly1305.
    ChaCha(Box<ChaCha20Poly1305>),
    /// AES-CCM, each key length with its ICV length.
    Ccm(Box<AesCcm>),
    /// AES-CBC, AES-CTR or NULL with an HMAC.
    CipherMac(Box<CipherMac>),
    /// ring: AES-128/256-GCM with a 16-byte ICV, ChaCha20-Poly1305.
    Ring(Box<RingAead>),
}

impl Transform {
    /// Expands `key` and `auth_key` (lengths, and `icv_len` bytes of ICV,
    /// already checked against the algorithm by `check_xform`) for
    /// `provider`; `None` if the provider does not run `alg` (ring: only
    /// AES-GCM and ChaCha20-Poly1305).
    pub(crate) fn new(alg: Algorithm, key: &[u8], auth_key: &[u8], icv_len: usize, provider: Provider) -> Option<Transform> {
        match provider {
            Provider::Ring => RingAead::new(alg, key).map(|r| Transform::Ring(Box::new(r))),
            Provider::RustCrypto => Transform::rustcrypto(alg, key, auth_key, icv_len),
        }
    }

    /// The RustCrypto transform of `alg` (`None` only for a CCM key or ICV
    /// length `check_xform` would have refused).
    fn rustcrypto(alg: Algorithm, key: &[u8], auth_key: &[u8], icv_len: usize) -> Option<Transform> {
        Some(match alg.cipher() {
            Cipher::AesGcm | Cipher::AesGmac if key.len() == 16 => Transform::Gcm128(Box::new(Gcm::new(key))),
            Cipher::AesGcm | Cipher::AesGmac if key.len() == 24 => Transform::Gcm192(Box::new(Gcm::new(key))),
            Cipher::AesGcm | Cipher::AesGmac => Transform::Gcm256(Box::new(Gcm::new(key))),
            Cipher::ChaCha20Poly1305 => Transform::ChaCha(Box::new(ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(key)))),
            Cipher::AesCcm => Transform::Ccm(Box::new(AesCcm::new(key, icv_len)?)),
            Cipher::AesCbc | Cipher::AesCtr | Cipher::Null => Transform::CipherMac(Box::new(CipherMac::new(alg, key, auth_key))),
        })
    }

    /// Size of the boxed key schedule.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Transform::Gcm128(g) => std::mem::size_of_val(&**g),
            Transform::Gcm192(g) => std::mem::size_of_val(&**g),
            Transform::Gcm256(g) => std::mem::size_of_val(&**g),
            Transform::ChaCha(c) => std::mem::size_of_val(&**c),
            Transform::Ccm(c) => std::mem::size_of_val(&**c),
            Transform::CipherMac(c) => std::mem::size_of_val(&**c),
            Transform::Ring(r) => std::mem::size_of_val(&**r),
        }
    }

    /// Encrypts the cipher range and writes the ICV.
    #[inline]
    pub(crate) fn seal(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        match self {
            Transform::Gcm128(g) => g.seal(a, buf, r),
            Transform::Gcm192(g) => g.seal(a, buf, r),
            Transform::Gcm256(g) => g.seal(a, buf, r),
            Transform::ChaCha(c) => {
                if a.icv_len != 16 {
                    return OpStatus::InvalidOp;
                }
                let n = chacha20poly1305::Nonce::from_slice(a.nonce);
                match c.encrypt_in_place_detached(n, a.aad, &mut buf[r.data.clone()]) {
                    Ok(tag) => {
                        buf[r.icv.clone()].copy_from_slice(&tag);
                        OpStatus::Success
                    }
                    Err(_) => OpStatus::DeviceError,
                }
            }
            Transform::Ccm(c) => c.seal(a, buf, r),
            Transform::CipherMac(c) => c.seal(a, buf, r),
            Transform::Ring(k) => k.seal(a, buf, r),
        }
    }

    /// Verifies the ICV (constant time) and decrypts the cipher range;
    /// releases no unverified plaintext (see the module doc).
    #[inline]
    pub(crate) fn open(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        match self {
            Transform::Gcm128(g) => g.open(a, buf, r),
            Transform::Gcm192(g) => g.open(a, buf, r),
            Transform::Gcm256(g) => g.open(a, buf, r),
            Transform::ChaCha(c) => {
                if a.icv_len != 16 {
                    return OpStatus::InvalidOp;
                }
                let n = chacha20poly1305::Nonce::from_slice(a.nonce);
                let mut tag = chacha20poly1305::Tag::default();
                tag.copy_from_slice(&buf[r.icv.clone()]);
                // The crate checks the tag over the ciphertext (constant
                // time) before it decrypts.
                match c.decrypt_in_place_detached(n, a.aad, &mut buf[r.data.clone()], &tag) {
                    Ok(()) => OpStatus::Success,
                    Err(_) => OpStatus::AuthFailed,
                }
            }
            Transform::Ccm(c) => c.open(a, buf, r),
            Transform::CipherMac(c) => c.open(a, buf, r),
            Transform::Ring(k) => k.open(a, buf, r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_zod<T: zeroize::ZeroizeOnDrop>() {}

    /// Every expanded key a `Transform` holds wipes itself on drop, except
    /// the keyed HMAC states (`hmac` 0.12 cannot; see `crypto::Session`):
    /// compile-time checks that fail if a crate's `zeroize` feature is off.
    #[test]
    fn expanded_keys_zeroize_on_drop() {
        // GCM and GMAC.
        assert_zod::<Gcm<Aes128>>();
        assert_zod::<Gcm<Aes192>>();
        assert_zod::<Gcm<Aes256>>();
        // ChaCha20-Poly1305 (its key; chacha20poly1305 always wipes it).
        assert_zod::<ChaCha20Poly1305>();
        // The cipher half of CBC and CTR with an HMAC.
        assert_zod::<Aes128>();
        assert_zod::<Aes192>();
        assert_zod::<Aes256>();
    }
}
