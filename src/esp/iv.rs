//! Explicit IVs of outbound SAs.
//!
//! * Counter modes (AES-GCM, AES-GMAC, AES-CCM, ChaCha20-Poly1305, AES-CTR)
//!   need an IV that never repeats under a key (RFC 4106 §3.1, RFC 4543
//!   §3.1, RFC 4309 §3.1, RFC 7634 §2, RFC 3686 §3.1): the 64-bit sequence number, which the SA
//!   never reuses (RFC 4303 §3.3.3).
//! * AES-CBC needs an IV the attacker cannot predict (RFC 3602 §3; a
//!   predictable CBC IV allows chosen-plaintext attacks). We use
//!   IV = AES-128-ECB(iv_key, 0^64 ‖ seq) with a per-SA 128-bit `iv_key`
//!   drawn from the OS CSPRNG when the SA is installed (NIST SP 800-38A
//!   Appendix C: encrypt a nonce). Why not a CSPRNG per packet: this costs
//!   one AES block (no syscall, no allocation, no generator state to own or
//!   lock: the SA's sequence number is the only input, and it is already
//!   owned by the SA's worker), the IVs are unpredictable without `iv_key`,
//!   and distinct for distinct sequence numbers since AES is a permutation.
//!   `iv_key` is unrelated to the encryption key, so IVs reveal nothing
//!   about it, and it is fresh at every install, so a restarted gateway
//!   (sequence numbers from 1 again) does not repeat IVs either.
//! * NULL has no IV.

use crate::crypto::{Algorithm, Cipher};
use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use std::sync::Arc;
use zeroize::{Zeroize, Zeroizing};

/// How an outbound SA makes its explicit IVs (immutable; part of the SA's
/// cold state). The IV key's AES schedule is zeroized when the last clone
/// drops (`aes`'s `zeroize` feature).
#[derive(Clone, Default)]
pub struct IvGen {
    /// The CBC IV key; `None` for algorithms whose IV is the sequence number.
    key: Option<Arc<Aes128>>,
}

impl std::fmt::Debug for IvGen {
    // The IV key never reaches logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IvGen").field("encrypted_counter", &self.key.is_some()).finish()
    }
}

impl IvGen {
    /// The sequence number as IV (counter modes, NULL).
    pub fn counter() -> IvGen {
        IvGen { key: None }
    }

    /// What `alg` needs: for AES-CBC a fresh IV key from the OS CSPRNG
    /// (control path, once per SA), else [`IvGen::counter`].
    pub fn for_algorithm(alg: Algorithm) -> Result<IvGen, getrandom::Error> {
        if alg.cipher() != Cipher::AesCbc {
            return Ok(IvGen::counter());
        }
        let mut key = Zeroizing::new([0u8; 16]);
        getrandom::getrandom(&mut key[..])?;
        Ok(IvGen::from_key(&key))
    }

    /// Encrypted-counter IVs under `key` (tests; see [`IvGen::for_algorithm`]).
    /// The caller's copy of `key` is the caller's to wipe; this one is
    /// wiped here.
    pub fn with_key(mut key: [u8; 16]) -> IvGen {
        let g = IvGen::from_key(&key);
        key.zeroize();
        g
    }

    fn from_key(key: &[u8; 16]) -> IvGen {
        IvGen { key: Some(Arc::new(Aes128::new(GenericArray::from_slice(key)))) }
    }

    /// Writes the IV of packet `seq` for `alg` to `out[..alg.iv_len()]`.
    /// `false` if `alg` needs an IV key and this generator has none (an SA
    /// built without [`IvGen::for_algorithm`]).
    #[inline]
    pub fn write(&self, alg: Algorithm, seq: u64, out: &mut [u8; 16]) -> bool {
        match alg.cipher() {
            Cipher::Null => true,
            Cipher::AesCbc => {
                let Some(k) = &self.key else { return false };
                let mut block = GenericArray::from([0u8; 16]);
                block[8..].copy_from_slice(&seq.to_be_bytes());
                k.encrypt_block(&mut block);
                out.copy_from_slice(&block);
                true
            }
            _ => {
                out[..8].copy_from_slice(&seq.to_be_bytes());
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_modes_use_the_sequence_number() {
        let g = IvGen::counter();
        let mut iv = [0u8; 16];
        for alg in [Algorithm::Aes128Gcm, Algorithm::ChaCha20Poly1305, Algorithm::Aes256CtrHmacSha1, Algorithm::Aes128Gmac] {
            assert!(g.write(alg, 0x0102_0304_0506_0708, &mut iv));
            assert_eq!(iv[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        }
        assert!(!g.write(Algorithm::Aes128CbcHmacSha1, 1, &mut iv), "CBC refuses a generator without a key");
    }

    #[test]
    fn cbc_ivs_are_aes_of_the_counter_distinct_and_keyed() {
        // The block layout is exactly what the module doc says: 0^64 ‖ seq.
        let key: [u8; 16] = core::array::from_fn(|i| i as u8);
        let g = IvGen::with_key(key);
        let mut iv = [0u8; 16];
        assert!(g.write(Algorithm::Aes128CbcHmacSha256, 1, &mut iv));
        let mut expect = GenericArray::from([0u8; 16]);
        expect[15] = 1;
        Aes128::new(GenericArray::from_slice(&key)).encrypt_block(&mut expect);
        assert_eq!(iv[..], expect[..]);
        let mut seen = std::collections::HashSet::new();
        for seq in 1..2000u64 {
            g.write(Algorithm::Aes256CbcHmacSha1, seq, &mut iv);
            assert!(seen.insert(iv), "IV repeated at seq {seq}");
        }
        let a = IvGen::for_algorithm(Algorithm::Aes128CbcHmacSha1).unwrap();
        let b = IvGen::for_algorithm(Algorithm::Aes128CbcHmacSha1).unwrap();
        let (mut x, mut y) = ([0u8; 16], [0u8; 16]);
        a.write(Algorithm::Aes128CbcHmacSha1, 1, &mut x);
        b.write(Algorithm::Aes128CbcHmacSha1, 1, &mut y);
        assert_ne!(x, y, "each SA draws its own IV key");
        assert!(format!("{a:?}").contains("encrypted_counter: true"));
    }

    /// The IV key is wiped with its AES schedule when the last clone of the
    /// generator drops: a compile-time check that the type it is kept in
    /// zeroizes on drop (fails to build without `aes`'s `zeroize` feature).
    #[test]
    fn iv_key_schedule_zeroizes_on_drop() {
        fn zod<T: zeroize::ZeroizeOnDrop>(_: &Option<Arc<T>>) {}
        let g = IvGen::for_algorithm(Algorithm::Aes128CbcHmacSha1).unwrap();
        zod(&g.key);
        assert!(g.key.is_some());
    }
}
