//! The `ring` provider: AES-128/256-GCM with a 16-byte ICV (RFC 4106) and
//! ChaCha20-Poly1305 (RFC 7634) through `ring::aead::LessSafeKey`, in place
//! on the op's cipher range with the tag apart
//! (`seal_in_place_separate_tag`, `open_in_place_separate_tag`): ESP's ICV
//! follows the ciphertext, and nothing is copied but the 16-byte tag.
//!
//! Shape it takes: the associated data is the op's AAD alone (SPI ‖
//! sequence number, `esp::esp_op`); an op with an auth range is
//! `InvalidOp` here (ring takes one contiguous AAD; RustCrypto's GCM takes
//! `aad ‖ auth range`). ChaCha20-Poly1305 ops never have one.
//!
//! Two differences from the RustCrypto transforms, both inherent to ring:
//! * a failed open leaves the cipher range zeroed (ring decrypts while it
//!   authenticates and wipes the unverified plaintext when the tag does not
//!   match), not as it was; either way no unverified plaintext is
//!   released (RFC 4303 §3.4.4: the packet is dropped);
//! * ring keeps its expanded key in a type without `zeroize`, so the key
//!   schedule is not wiped when the session drops.

use super::transform::OpArgs;
use crate::crypto::{Algorithm, Cipher, OpRanges, OpStatus};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};

/// ring's tag length: the only ICV length this provider runs.
const TAG_LEN: usize = 16;

/// An expanded ring AEAD key.
pub(crate) struct RingAead {
    key: LessSafeKey,
}

impl RingAead {
    /// Expands `key` for `alg` (AES-GCM or ChaCha20-Poly1305, length
    /// checked by `check_xform`); `None` for any other algorithm or length.
    pub(crate) fn new(alg: Algorithm, key: &[u8]) -> Option<RingAead> {
        let ring_alg = match (alg.cipher(), key.len()) {
            (Cipher::AesGcm, 16) => &AES_128_GCM,
            (Cipher::AesGcm, 32) => &AES_256_GCM,
            (Cipher::ChaCha20Poly1305, 32) => &CHACHA20_POLY1305,
            _ => return None,
        };
        let key = UnboundKey::new(ring_alg, key).ok()?;
        Some(RingAead { key: LessSafeKey::new(key) })
    }

    /// The op shape ring takes: full tag, no auth range.
    fn fits(a: &OpArgs<'_>, r: &OpRanges) -> bool {
        a.icv_len == TAG_LEN && r.auth.is_empty() && r.icv.len() == TAG_LEN
    }

    /// Encrypts the cipher range in place and writes the tag to the ICV.
    #[inline]
    pub(crate) fn seal(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        if !Self::fits(a, r) {
            return OpStatus::InvalidOp;
        }
        let nonce = Nonce::assume_unique_for_key(*a.nonce);
        match self.key.seal_in_place_separate_tag(nonce, Aad::from(a.aad), &mut buf[r.data.clone()]) {
            Ok(tag) => {
                buf[r.icv.clone()].copy_from_slice(tag.as_ref());
                OpStatus::Success
            }
            Err(_) => OpStatus::DeviceError,
        }
    }

    /// Decrypts the cipher range in place if the ICV verifies (ring compares
    /// in constant time); on a mismatch the range is left zeroed.
    #[inline]
    pub(crate) fn open(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        if !Self::fits(a, r) {
            return OpStatus::InvalidOp;
        }
        let Ok(tag) = Tag::try_from(&buf[r.icv.clone()]) else {
            return OpStatus::InvalidOp;
        };
        let nonce = Nonce::assume_unique_for_key(*a.nonce);
        match self.key.open_in_place_separate_tag(nonce, Aad::from(a.aad), tag, &mut buf[r.data.clone()], 0..) {
            Ok(_) => OpStatus::Success,
            Err(_) => OpStatus::AuthFailed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes_gcm::aead::{generic_array::GenericArray, AeadInPlace, KeyInit};

    /// Same bytes as RustCrypto's `aes-gcm` and `chacha20poly1305` for data
    /// lengths around the block sizes and AAD of 8 and 12 bytes (ESP
    /// without and with ESN), with the ICV after the data and apart from
    /// it; a flipped bit fails and leaves the data range zeroed.
    #[test]
    fn matches_rustcrypto_aeads() {
        let nonce = [7u8; 12];
        let iv = [0u8; 16];
        for (alg, key) in [(Algorithm::Aes128Gcm, vec![0x42u8; 16]), (Algorithm::Aes256Gcm, vec![0x43; 32]), (Algorithm::ChaCha20Poly1305, vec![0x44; 32])] {
            let ours = RingAead::new(alg, &key).unwrap();
            for len in [0usize, 1, 15, 16, 17, 63, 64, 65, 255, 1420] {
                for aad_len in [8usize, 12] {
                    let aad: Vec<u8> = (0..aad_len as u8).collect();
                    let plain: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(13)).collect();
                    let mut expect = plain.clone();
                    let tag = match alg {
                        Algorithm::Aes128Gcm => aes_gcm::Aes128Gcm::new(GenericArray::from_slice(&key)).encrypt_in_place_detached(GenericArray::from_slice(&nonce), &aad, &mut expect).unwrap(),
                        Algorithm::Aes256Gcm => aes_gcm::Aes256Gcm::new(GenericArray::from_slice(&key)).encrypt_in_place_detached(GenericArray::from_slice(&nonce), &aad, &mut expect).unwrap(),
                        _ => chacha20poly1305::ChaCha20Poly1305::new(GenericArray::from_slice(&key)).encrypt_in_place_detached(GenericArray::from_slice(&nonce), &aad, &mut expect).unwrap(),
                    };
                    // ICV right after the data (ESP), then 4 bytes apart.
                    for gap in [0usize, 4] {
                        let mut buf = [&plain[..], &vec![0u8; gap + 16]].concat();
                        let r = OpRanges { data: 0..len, auth: 0..0, icv: len + gap..len + gap + 16 };
                        let a = OpArgs { nonce: &nonce, iv: &iv, aad: &aad, trailer: &[], icv_len: 16 };
                        assert_eq!(ours.seal(&a, &mut buf, &r), OpStatus::Success);
                        assert_eq!(&buf[r.data.clone()], &expect[..], "{} len {len}", alg.name());
                        assert_eq!(&buf[r.icv.clone()], &tag[..], "{} len {len}", alg.name());
                        let sealed = buf.clone();
                        assert_eq!(ours.open(&a, &mut buf, &r), OpStatus::Success);
                        assert_eq!(&buf[r.data.clone()], &plain[..]);
                        let mut bad = sealed.clone();
                        bad[r.icv.start] ^= 1;
                        assert_eq!(ours.open(&a, &mut bad, &r), OpStatus::AuthFailed);
                        assert!(bad[r.data.clone()].iter().all(|&b| b == 0), "cipher range zeroed on failure");
                        assert_eq!(&bad[r.icv.clone()], &[&[sealed[r.icv.start] ^ 1][..], &sealed[r.icv.start + 1..r.icv.end]].concat()[..]);
                    }
                }
            }
        }
    }

    /// Shapes ring cannot take are `InvalidOp` and touch nothing: a
    /// truncated ICV, an auth range; algorithms it does not run get no key.
    #[test]
    fn refuses_other_shapes() {
        let ours = RingAead::new(Algorithm::Aes128Gcm, &[1; 16]).unwrap();
        let nonce = [0u8; 12];
        let a16 = OpArgs { nonce: &nonce, iv: &[0; 16], aad: &[0; 8], trailer: &[], icv_len: 16 };
        let a12 = OpArgs { icv_len: 12, ..OpArgs { nonce: &nonce, iv: &[0; 16], aad: &[0; 8], trailer: &[], icv_len: 16 } };
        let mut buf = vec![9u8; 64];
        let with_auth = OpRanges { data: 16..32, auth: 0..16, icv: 32..48 };
        let short = OpRanges { data: 16..32, auth: 0..0, icv: 32..44 };
        for (a, r) in [(&a16, &with_auth), (&a12, &short)] {
            assert_eq!(ours.seal(a, &mut buf, r), OpStatus::InvalidOp);
            assert_eq!(ours.open(a, &mut buf, r), OpStatus::InvalidOp);
        }
        assert_eq!(buf, vec![9u8; 64]);
        assert!(RingAead::new(Algorithm::Aes128Gmac, &[1; 16]).is_none());
        assert!(RingAead::new(Algorithm::Aes128CbcHmacSha1, &[1; 16]).is_none());
        assert!(RingAead::new(Algorithm::Aes128Gcm, &[1; 24]).is_none());
    }
}
