//! Cipher plus separate integrity, encrypt-then-MAC as ESP does it
//! (RFC 4303 §3.3.2, §3.4.4): AES-CBC (RFC 3602), AES-CTR (RFC 3686) or
//! NULL (RFC 2410), with HMAC-SHA1-96 (RFC 2404) or HMAC-SHA-256-128,
//! -384-192 or -512-256 (RFC 4868). The MAC covers the op's auth range and then its auth
//! trailer (ESN high bits), is truncated to the ICV length, and on open is
//! compared in constant time before anything is decrypted.

use super::transform::OpArgs;
use crate::crypto::{Algorithm, Cipher, OpRanges, OpStatus};
use aes::cipher::generic_array::GenericArray;
use aes::cipher::inout::InOutBuf;
use aes::cipher::{BlockCipher, BlockDecrypt, BlockDecryptMut, BlockEncrypt, BlockEncryptMut, InnerIvInit, KeyInit, StreamCipherCore};
use aes::{Aes128, Aes192, Aes256};
use hmac::Hmac;
use sha1::Sha1;
use sha2::{Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;

/// The cipher part with its expanded key.
enum Enc {
    Null,
    Cbc128(Aes128),
    Cbc192(Aes192),
    Cbc256(Aes256),
    Ctr128(Aes128),
    Ctr192(Aes192),
    Ctr256(Aes256),
}

/// The keyed HMAC (inner and outer pads already absorbed); cloned per op.
enum Auth {
    Sha1(Hmac<Sha1>),
    Sha256(Hmac<Sha256>),
    Sha384(Hmac<Sha384>),
    Sha512(Hmac<Sha512>),
}

/// Room for the longest full HMAC (SHA-512's 64 bytes).
const MAC_MAX: usize = 64;

/// Expanded keys of a cipher + HMAC session.
pub(crate) struct CipherMac {
    enc: Enc,
    auth: Auth,
}

impl CipherMac {
    /// Expands both keys (lengths checked by `check_xform`).
    pub(crate) fn new(alg: Algorithm, key: &[u8], auth_key: &[u8]) -> CipherMac {
        let enc = match (alg.cipher(), key.len()) {
            (Cipher::AesCbc, 16) => Enc::Cbc128(Aes128::new(GenericArray::from_slice(key))),
            (Cipher::AesCbc, 24) => Enc::Cbc192(Aes192::new(GenericArray::from_slice(key))),
            (Cipher::AesCbc, _) => Enc::Cbc256(Aes256::new(GenericArray::from_slice(key))),
            (Cipher::AesCtr, 16) => Enc::Ctr128(Aes128::new(GenericArray::from_slice(key))),
            (Cipher::AesCtr, 24) => Enc::Ctr192(Aes192::new(GenericArray::from_slice(key))),
            (Cipher::AesCtr, _) => Enc::Ctr256(Aes256::new(GenericArray::from_slice(key))),
            _ => Enc::Null,
        };
        // HMAC takes a key of any length (RFC 2104); ours are 20, 32, 48 or 64 bytes.
        const ANY: &str = "HMAC accepts any key length";
        use crate::crypto::Mac;
        let auth = match alg.mac() {
            Some(Mac::HmacSha1_96) => Auth::Sha1(<Hmac<Sha1> as hmac::Mac>::new_from_slice(auth_key).expect(ANY)),
            Some(Mac::HmacSha384_192) => Auth::Sha384(<Hmac<Sha384> as hmac::Mac>::new_from_slice(auth_key).expect(ANY)),
            Some(Mac::HmacSha512_256) => Auth::Sha512(<Hmac<Sha512> as hmac::Mac>::new_from_slice(auth_key).expect(ANY)),
            // SHA-256, and what `check_xform` lets through for a combined mode (never used).
            Some(Mac::HmacSha256_128) | None => Auth::Sha256(<Hmac<Sha256> as hmac::Mac>::new_from_slice(auth_key).expect(ANY)),
        };
        CipherMac { enc, auth }
    }

    /// The full HMAC of `auth ‖ trailer` into `out`; returns its length.
    fn mac(&self, auth: &[u8], trailer: &[u8], out: &mut [u8; MAC_MAX]) -> usize {
        fn run<M: hmac::Mac + Clone>(k: &M, auth: &[u8], trailer: &[u8], out: &mut [u8; MAC_MAX]) -> usize {
            let mut m = k.clone();
            m.update(auth);
            m.update(trailer);
            let t = m.finalize().into_bytes();
            out[..t.len()].copy_from_slice(&t);
            t.len()
        }
        match &self.auth {
            Auth::Sha1(k) => run(k, auth, trailer, out),
            Auth::Sha256(k) => run(k, auth, trailer, out),
            Auth::Sha384(k) => run(k, auth, trailer, out),
            Auth::Sha512(k) => run(k, auth, trailer, out),
        }
    }

    /// Encrypts the cipher range, then MACs the auth range (which in ESP
    /// contains the ciphertext) and the trailer into the ICV.
    pub(crate) fn seal(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        let data = &mut buf[r.data.clone()];
        match &self.enc {
            Enc::Null => {}
            Enc::Cbc128(k) => cbc_encrypt(k, a.iv, data),
            Enc::Cbc192(k) => cbc_encrypt(k, a.iv, data),
            Enc::Cbc256(k) => cbc_encrypt(k, a.iv, data),
            Enc::Ctr128(k) => ctr_apply(k, a.nonce, data),
            Enc::Ctr192(k) => ctr_apply(k, a.nonce, data),
            Enc::Ctr256(k) => ctr_apply(k, a.nonce, data),
        }
        let mut t = [0u8; MAC_MAX];
        let n = self.mac(&buf[r.auth.clone()], a.trailer, &mut t);
        if a.icv_len > n {
            return OpStatus::InvalidOp;
        }
        buf[r.icv.clone()].copy_from_slice(&t[..a.icv_len]);
        OpStatus::Success
    }

    /// Verifies the truncated MAC in constant time (RFC 2404 §2, RFC 4868
    /// §2.3: exactly the ICV's bits), then decrypts.
    pub(crate) fn open(&self, a: &OpArgs<'_>, buf: &mut [u8], r: &OpRanges) -> OpStatus {
        let mut t = [0u8; MAC_MAX];
        let n = self.mac(&buf[r.auth.clone()], a.trailer, &mut t);
        if a.icv_len > n {
            return OpStatus::InvalidOp;
        }
        if !bool::from(t[..a.icv_len].ct_eq(&buf[r.icv.clone()])) {
            return OpStatus::AuthFailed;
        }
        let data = &mut buf[r.data.clone()];
        match &self.enc {
            Enc::Null => {}
            Enc::Cbc128(k) => cbc_decrypt(k, a.iv, data),
            Enc::Cbc192(k) => cbc_decrypt(k, a.iv, data),
            Enc::Cbc256(k) => cbc_decrypt(k, a.iv, data),
            Enc::Ctr128(k) => ctr_apply(k, a.nonce, data),
            Enc::Ctr192(k) => ctr_apply(k, a.nonce, data),
            Enc::Ctr256(k) => ctr_apply(k, a.nonce, data),
        }
        OpStatus::Success
    }
}

/// AES-CBC encryption in place; `data` is whole blocks (checked by the caller).
fn cbc_encrypt<C>(k: &C, iv: &[u8; 16], data: &mut [u8])
where
    C: BlockCipher + BlockEncrypt + aes::cipher::BlockSizeUser<BlockSize = aes::cipher::consts::U16>,
{
    let (blocks, _tail) = InOutBuf::from(data).into_chunks();
    cbc::Encryptor::<&C>::inner_iv_init(k, GenericArray::from_slice(iv)).encrypt_blocks_inout_mut(blocks);
}

/// AES-CBC decryption in place (parallel over blocks where the CPU allows).
fn cbc_decrypt<C>(k: &C, iv: &[u8; 16], data: &mut [u8])
where
    C: BlockCipher + BlockDecrypt + aes::cipher::BlockSizeUser<BlockSize = aes::cipher::consts::U16>,
{
    let (blocks, _tail) = InOutBuf::from(data).into_chunks();
    cbc::Decryptor::<&C>::inner_iv_init(k, GenericArray::from_slice(iv)).decrypt_blocks_inout_mut(blocks);
}

/// AES-CTR keystream (RFC 3686 §4): counter block = nonce (4) ‖ IV (8) ‖
/// 32-bit big-endian block counter starting at 1.
fn ctr_apply<C>(k: &C, nonce: &[u8; 12], data: &mut [u8])
where
    C: BlockCipher + BlockEncrypt + aes::cipher::BlockSizeUser<BlockSize = aes::cipher::consts::U16>,
{
    let mut block = GenericArray::default();
    block[..12].copy_from_slice(nonce);
    block[15] = 1;
    ctr::CtrCore::<&C, ctr::flavors::Ctr32BE>::inner_iv_init(k, &block).apply_keystream_partial(data.into());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct File {
        hmac_sha1: Vec<V>,
        hmac_sha256: Vec<V>,
        hmac_sha256_128: Vec<V>,
        hmac_sha384_192: Vec<V>,
        hmac_sha512_256: Vec<V>,
    }

    #[derive(serde::Deserialize)]
    struct V {
        name: String,
        key: String,
        data: String,
        #[serde(default)]
        digest_96: String,
        #[serde(default)]
        digest_128: String,
        #[serde(default)]
        digest_192: String,
        #[serde(default)]
        digest_256: String,
    }

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    fn load() -> File {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/hmac.json");
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    /// Seal and open a NULL + HMAC op over `data` with `key` (any length:
    /// RFC 2202 and RFC 4231 use 4- to 131-byte keys; sessions take only the
    /// RFC 2404/4868 sizes, which `crypto_conformance` covers); the ICV must
    /// be the truncated digest, and a flipped data bit must fail.
    fn run(alg: Algorithm, v: &V, want: &str, icv_len: usize) {
        let m = CipherMac::new(alg, &[], &h(&v.key));
        let data = h(&v.data);
        let mut buf = [&data[..], &[0u8; 32][..icv_len]].concat();
        let r = OpRanges { data: 0..0, auth: 0..data.len(), icv: data.len()..data.len() + icv_len };
        let a = OpArgs { nonce: &[0; 12], iv: &[0; 16], aad: &[], trailer: &[], icv_len };
        assert_eq!(m.seal(&a, &mut buf, &r), OpStatus::Success);
        assert_eq!(hex::encode(&buf[r.icv.clone()]), want, "{}", v.name);
        assert_eq!(m.open(&a, &mut buf, &r), OpStatus::Success, "{}", v.name);
        if !data.is_empty() {
            buf[0] ^= 0x80;
            assert_eq!(m.open(&a, &mut buf, &r), OpStatus::AuthFailed, "{}", v.name);
        }
    }

    #[test]
    fn rfc2202_hmac_sha1_96() {
        let f = load();
        assert_eq!(f.hmac_sha1.len(), 7);
        for v in &f.hmac_sha1 {
            run(Algorithm::NullHmacSha1, v, &v.digest_96, 12);
        }
    }

    #[test]
    fn rfc4231_and_rfc4868_hmac_sha256_128() {
        let f = load();
        assert_eq!(f.hmac_sha256.len(), 7);
        for v in f.hmac_sha256.iter().chain(&f.hmac_sha256_128) {
            run(Algorithm::NullHmacSha256, v, &v.digest_128, 16);
        }
    }

    #[test]
    fn rfc4868_hmac_sha384_192_and_sha512_256() {
        let f = load();
        assert_eq!((f.hmac_sha384_192.len(), f.hmac_sha512_256.len()), (3, 3));
        for v in &f.hmac_sha384_192 {
            run(Algorithm::NullHmacSha384, v, &v.digest_192, 24);
        }
        for v in &f.hmac_sha512_256 {
            run(Algorithm::NullHmacSha512, v, &v.digest_256, 32);
        }
    }

    /// The auth trailer is MACed after the auth range, as if it followed it
    /// in the buffer (RFC 4303 §2.2.1: ESN high bits after Next Header).
    #[test]
    fn trailer_is_appended_to_the_mac_input() {
        let m = CipherMac::new(Algorithm::NullHmacSha256, &[], &[7; 32]);
        let mut joined = b"header and ciphertext\x00\x00\x00\x05".to_vec();
        let n = joined.len() - 4;
        joined.extend_from_slice(&[0; 16]);
        let a = OpArgs { nonce: &[0; 12], iv: &[0; 16], aad: &[], trailer: &[], icv_len: 16 };
        let r = OpRanges { data: 0..0, auth: 0..n + 4, icv: n + 4..n + 20 };
        assert_eq!(m.seal(&a, &mut joined, &r), OpStatus::Success);
        let mut split = b"header and ciphertext".to_vec();
        split.extend_from_slice(&[0; 16]);
        let a = OpArgs { trailer: &[0, 0, 0, 5], ..a };
        let r = OpRanges { data: 0..0, auth: 0..n, icv: n..n + 16 };
        assert_eq!(m.seal(&a, &mut split, &r), OpStatus::Success);
        assert_eq!(split[n..], joined[n + 4..]);
    }
}
