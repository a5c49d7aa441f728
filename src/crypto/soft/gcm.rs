//! AES-GCM (NIST SP 800-38D) for ESP, and AES-GMAC as the same transform
//! with an empty cipher range (RFC 4543). Built from RustCrypto's `aes`,
//! `ctr` and `ghash` exactly as the `aes-gcm` crate composes them, for two
//! things its API cannot express: ICVs truncated to 8 or 12 bytes (RFC 4106
//! §6; `aes-gcm` offers 12..=16) and associated data in two pieces, the op's
//! AAD followed by a range of the packet (GMAC's SPI ‖ ESN ‖ IV ‖ payload,
//! RFC 4543 §3.3), without copying. The unit tests check it against
//! `aes-gcm` byte for byte.

use super::transform::OpArgs;
use crate::crypto::{OpRanges, OpStatus};
use aes::cipher::consts::U16;
use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockCipher, BlockEncrypt, BlockSizeUser, InnerIvInit, KeyInit, StreamCipherCore};
use ghash::universal_hash::UniversalHash;
use ghash::GHash;
use subtle::ConstantTimeEq;
use zeroize::{Zeroizing, ZeroizeOnDrop};

type Block = ghash::Block;
type Ctr32<'a, C> = ctr::CtrCore<&'a C, ctr::flavors::Ctr32BE>;

/// An expanded AES key and its GHASH key H = E_K(0^128), both wiped on
/// drop: the AES key schedule by `aes`'s `zeroize` feature, H by
/// [`Zeroizing`]. H is kept as bytes and a `GHash` made from it per op
/// because `ghash`/`polyval` 0.6 on x86-64 (the autodetecting backend)
/// never wipes the key it holds, whatever its `zeroize` feature says.
pub(crate) struct Gcm<C> {
    cipher: C,
    h: Zeroizing<[u8; 16]>,
}

// Both fields wipe themselves; the bound makes the claim checked.
impl<C: ZeroizeOnDrop> ZeroizeOnDrop for Gcm<C> {}

impl<C: BlockCipher + BlockEncrypt + BlockSizeUser<BlockSize = U16> + KeyInit> Gcm<C> {
    /// Expands `key` (its length is the cipher's).
    pub(crate) fn new(key: &[u8]) -> Gcm<C> {
        let cipher = C::new(GenericArray::from_slice(key));
        let mut h = Zeroizing::new([0u8; 16]);
        cipher.encrypt_block(GenericArray::from_mut_slice(&mut h[..]));
        Gcm { h, cipher }
    }

    /// The counter at J0 + 1 and the tag mask E_K(J0), J0 = nonce ‖ 1.
    fn init(&self, nonce: &[u8; 12]) -> (Ctr32<'_, C>, Block) {
        let mut j0 = Block::default();
        j0[..12].copy_from_slice(nonce);
        j0[15] = 1;
        let mut ctr = Ctr32::inner_iv_init(&self.cipher, &j0);
        let mut mask = Block::default();
        ctr.write_keystream_block(&mut mask);
        (ctr, mask)
    }

    /// GHASH over A = `aad ‖ auth` and C = `ct`, masked: the full tag.
    fn tag(&self, mask: &Block, aad: &[u8], auth: &[u8], ct: &[u8]) -> Block {
        let mut g = GHash::new(GenericArray::from_slice(&self.h[..]));
        // A is one string: its first block joins the op's AAD (<= 16 bytes)
        // and the start of the auth range; zero padding only at A's end.
        let take = (16 - aad.len()).min(auth.len());
        if aad.len() + take > 0 {
            let mut first = Block::default();
            first[..aad.len()].copy_from_slice(aad);
            first[aad.len()..aad.len() + take].copy_from_slice(&auth[..take]);
            g.update(&[first]);
        }
        g.update_padded(&auth[take..]);
        g.update_padded(ct);
        let mut lens = Block::default();
        lens[..8].copy_from_slice(&(((aad.len() + auth.len()) as u64) * 8).to_be_bytes());
        lens[8..].copy_from_slice(&((ct.len() as u64) * 8).to_be_bytes());
        g.update(&[lens]);
        let mut t = g.finalize();
        for (a, b) in t.iter_mut().zip(mask) {
            *a ^= *b;
        }
        t
    }

    /// Encrypts the cipher range, then writes the tag truncated to the ICV.
    pub(crate) fn seal(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        if a.aad.len() > 16 || a.icv_len > 16 {
            return OpStatus::InvalidOp;
        }
        let (ctr, mask) = self.init(a.nonce);
        ctr.apply_keystream_partial(buf[r.data.clone()].as_mut().into());
        let t = self.tag(&mask, a.aad, &buf[r.auth.clone()], &buf[r.data.clone()]);
        buf[r.icv.clone()].copy_from_slice(&t[..a.icv_len]);
        OpStatus::Success
    }

    /// Computes the tag over the ciphertext, compares its first `icv_len`
    /// bytes with the ICV in constant time and only then decrypts.
    pub(crate) fn open(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        if a.aad.len() > 16 || a.icv_len > 16 {
            return OpStatus::InvalidOp;
        }
        let (ctr, mask) = self.init(a.nonce);
        let t = self.tag(&mask, a.aad, &buf[r.auth.clone()], &buf[r.data.clone()]);
        if !bool::from(t[..a.icv_len].ct_eq(&buf[r.icv.clone()])) {
            return OpStatus::AuthFailed;
        }
        ctr.apply_keystream_partial(buf[r.data.clone()].as_mut().into());
        OpStatus::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::Aes128;
    use aes_gcm::aead::AeadInPlace;

    fn ranges(data: std::ops::Range<usize>, auth: std::ops::Range<usize>, icv: std::ops::Range<usize>) -> OpRanges {
        OpRanges { data, auth, icv }
    }

    /// H = E_K(0^128) is kept in a `Zeroizing` (compile-time check: it is
    /// wiped on drop), and `zeroize` reaches it.
    #[test]
    fn ghash_key_is_zeroizing() {
        let key = [0x42u8; 16];
        let mut g = Gcm::<Aes128>::new(&key);
        let mut expect = Block::default();
        Aes128::new(GenericArray::from_slice(&key)).encrypt_block(&mut expect);
        let h: &mut Zeroizing<[u8; 16]> = &mut g.h;
        assert_eq!(h[..], expect[..]);
        zeroize::Zeroize::zeroize(h);
        assert_eq!(*g.h, [0u8; 16]);
    }

    /// Same bytes as `aes-gcm` for every data length around the block
    /// size, AAD split at every point between the op and the buffer, and
    /// truncated tags.
    #[test]
    fn matches_aes_gcm_crate() {
        let key = [0x42u8; 16];
        let ours = Gcm::<Aes128>::new(&key);
        let theirs = aes_gcm::Aes128Gcm::new(GenericArray::from_slice(&key));
        let nonce = [7u8; 12];
        let iv = [0u8; 16];
        let full_aad: Vec<u8> = (0..40u8).collect();
        for len in [0usize, 1, 15, 16, 17, 64, 100] {
            for split in [0usize, 3, 8, 12, 16] {
                let plain: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(7)).collect();
                let mut expect = plain.clone();
                let tag = theirs.encrypt_in_place_detached(GenericArray::from_slice(&nonce), &full_aad, &mut expect).unwrap();
                // buf = auth part of the AAD ‖ data ‖ ICV
                let auth = &full_aad[split..];
                let mut buf = [auth, &plain[..], &[0u8; 16]].concat();
                let r = ranges(auth.len()..auth.len() + len, 0..auth.len(), auth.len() + len..auth.len() + len + 16);
                for icv_len in [8usize, 12, 16] {
                    let mut b = buf.clone();
                    let r = ranges(r.data.clone(), r.auth.clone(), r.icv.start..r.icv.start + icv_len);
                    let a = OpArgs { nonce: &nonce, iv: &iv, aad: &full_aad[..split], trailer: &[], icv_len };
                    assert_eq!(ours.seal(&a, &mut b, &r), OpStatus::Success);
                    assert_eq!(&b[r.data.clone()], &expect[..], "len {len} split {split}");
                    assert_eq!(&b[r.icv.clone()], &tag[..icv_len], "len {len} split {split} icv {icv_len}");
                    assert_eq!(ours.open(&a, &mut b, &r), OpStatus::Success);
                    assert_eq!(&b[r.data.clone()], &plain[..]);
                }
                let a = OpArgs { nonce: &nonce, iv: &iv, aad: &full_aad[..split], trailer: &[], icv_len: 16 };
                assert_eq!(ours.seal(&a, &mut buf, &r), OpStatus::Success);
                buf[0] ^= 1; // AAD bit (or the first data byte when auth is empty)
                if !auth.is_empty() || len > 0 {
                    let before = buf.clone();
                    assert_eq!(ours.open(&a, &mut buf, &r), OpStatus::AuthFailed);
                    assert_eq!(buf, before, "nothing decrypted on failure");
                }
            }
        }
    }
}
