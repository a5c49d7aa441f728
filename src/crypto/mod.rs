//! The crypto device layer, modelled on DPDK cryptodev (DESIGN.md §3).
//!
//! * A device reports its [`DeviceInfo`] (queue pairs, algorithms,
//!   `max_sessions_per_qp`, 0 = unlimited).
//! * A [`Session`] holds immutable key material in the backend's format. The
//!   control thread creates and frees sessions; the data path only puts an
//!   `Arc` of one into each op (a worker recycles those of finished ops,
//!   `esp::SessionCache`, so a burst takes no reference count).
//! * A [`QueuePair`] is `Send` but not `Sync`: it belongs to one worker.
//!   [`QueuePair::enqueue_burst`] and [`QueuePair::dequeue_burst`] are separate
//!   calls so synchronous (software) and asynchronous (descriptor hardware)
//!   devices look the same to the worker.
//! * A [`CryptoOp`] names byte ranges of its buffer: the cipher range, the
//!   auth range, where the ICV goes; and carries the AAD (combined modes),
//!   the auth trailer (ESN high bits for a separate MAC) and the IV. ESP
//!   framing is not known here: `esp/` fills those fields
//!   (`esp::esp_op`).
//! * Every [`Algorithm`] (AES-GCM, AES-GMAC, AES-CCM, ChaCha20-Poly1305, AES-CBC /
//!   AES-CTR / NULL with HMAC-SHA1-96 or HMAC-SHA-256-128) is one software
//!   transform (`soft::Transform`) that every backend runs through
//!   `process_op`; [`DeviceInfo::capabilities`] lists each with its sizes
//!   and `session_create` refuses anything not listed.
//! * Two providers run the transforms ([`Provider`]: RustCrypto for every
//!   algorithm, `ring` for AES-128/256-GCM with a 16-byte ICV and
//!   ChaCha20-Poly1305). A device is built with a [`ProviderChoice`]
//!   (`[crypto] provider`) and resolves it per session in
//!   `session_create` ([`Session::provider`]); a device limited to one
//!   provider lists only what that provider runs.
//!
//! * Queue pair life cycle (control thread): [`CryptoDevice::queue_pair_setup`]
//!   hands the queue pair to its worker, started. [`CryptoDevice::queue_pair_stop`]
//!   makes `enqueue_burst` accept 0 ops (they stay with the caller) and
//!   `process_sync` decline, while ops already accepted still complete and
//!   can be dequeued;
//!   [`CryptoDevice::queue_pair_start`] accepts again.
//! * Devices with `max_sessions_per_qp > 0` only process ops whose session is
//!   attached to the queue pair ([`CryptoDevice::queue_pair_attach_session`]);
//!   any other op completes with [`OpStatus::SessionNotAttached`], in order.
//!   Nothing attaches implicitly on the data path. With a limit of 1 the
//!   rekey path is stop → [`CryptoDevice::queue_pair_setup_session`] → start.
//!
//! Backends: [`soft`] (synchronous, in the worker, unlimited sessions) and
//! [`descriptor`] (an emulated job-ring accelerator with engine threads and a
//! per-queue-pair session limit). Both run the same software transform.

pub mod descriptor;
mod gate;
mod provider;
pub mod soft;

pub(crate) use gate::QpGate;
pub use provider::{Provider, ProviderChoice};

use std::sync::Arc;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

/// The ESP transforms a device may offer: each is what one SA selects
/// (`algorithm = "…"` in the config; [`Algorithm::name`]).
///
/// Combined-mode (AEAD) transforms take their associated data from
/// [`CryptoOp::aad`] (then the op's auth range) and use a 4-byte salt from
/// the key material with an 8-byte explicit IV as nonce. The others are a
/// cipher (AES-CBC, AES-CTR or NULL) with a separate HMAC over the op's
/// auth range followed by its auth trailer, encrypt-then-MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// AES-GCM with a 128-bit key (NIST SP 800-38D; ESP use per RFC 4106).
    Aes128Gcm,
    /// AES-GCM with a 256-bit key.
    Aes256Gcm,
    /// AES-GMAC with a 128-bit key: authentication only (RFC 4543).
    Aes128Gmac,
    /// AES-GMAC with a 256-bit key.
    Aes256Gmac,
    /// ChaCha20-Poly1305 (RFC 7634, RFC 8439), 256-bit key.
    ChaCha20Poly1305,
    /// AES-128-CBC (RFC 3602) with HMAC-SHA1-96 (RFC 2404).
    Aes128CbcHmacSha1,
    /// AES-256-CBC with HMAC-SHA1-96.
    Aes256CbcHmacSha1,
    /// AES-128-CBC with HMAC-SHA-256-128 (RFC 4868).
    Aes128CbcHmacSha256,
    /// AES-256-CBC with HMAC-SHA-256-128.
    Aes256CbcHmacSha256,
    /// AES-128-CTR (RFC 3686) with HMAC-SHA1-96.
    Aes128CtrHmacSha1,
    /// AES-256-CTR with HMAC-SHA1-96.
    Aes256CtrHmacSha1,
    /// AES-128-CTR with HMAC-SHA-256-128.
    Aes128CtrHmacSha256,
    /// AES-256-CTR with HMAC-SHA-256-128.
    Aes256CtrHmacSha256,
    /// NULL encryption (RFC 2410) with HMAC-SHA1-96.
    NullHmacSha1,
    /// NULL encryption with HMAC-SHA-256-128.
    NullHmacSha256,
    /// AES-GCM with a 192-bit key (RFC 4106 §8.1 lists 128, 192 and 256).
    Aes192Gcm,
    /// AES-GMAC with a 192-bit key (RFC 4543).
    Aes192Gmac,
    /// AES-192-CBC (RFC 3602 §2.2) with HMAC-SHA1-96.
    Aes192CbcHmacSha1,
    /// AES-192-CBC with HMAC-SHA-256-128.
    Aes192CbcHmacSha256,
    /// AES-192-CTR (RFC 3686 §5.1) with HMAC-SHA1-96.
    Aes192CtrHmacSha1,
    /// AES-192-CTR with HMAC-SHA-256-128.
    Aes192CtrHmacSha256,
    /// AES-128-CBC with HMAC-SHA-384-192 (RFC 4868 §2.1).
    Aes128CbcHmacSha384,
    /// AES-192-CBC with HMAC-SHA-384-192.
    Aes192CbcHmacSha384,
    /// AES-256-CBC with HMAC-SHA-384-192.
    Aes256CbcHmacSha384,
    /// AES-128-CBC with HMAC-SHA-512-256 (RFC 4868 §2.1).
    Aes128CbcHmacSha512,
    /// AES-192-CBC with HMAC-SHA-512-256.
    Aes192CbcHmacSha512,
    /// AES-256-CBC with HMAC-SHA-512-256.
    Aes256CbcHmacSha512,
    /// AES-128-CTR with HMAC-SHA-384-192.
    Aes128CtrHmacSha384,
    /// AES-192-CTR with HMAC-SHA-384-192.
    Aes192CtrHmacSha384,
    /// AES-256-CTR with HMAC-SHA-384-192.
    Aes256CtrHmacSha384,
    /// AES-128-CTR with HMAC-SHA-512-256.
    Aes128CtrHmacSha512,
    /// AES-192-CTR with HMAC-SHA-512-256.
    Aes192CtrHmacSha512,
    /// AES-256-CTR with HMAC-SHA-512-256.
    Aes256CtrHmacSha512,
    /// NULL encryption with HMAC-SHA-384-192.
    NullHmacSha384,
    /// NULL encryption with HMAC-SHA-512-256.
    NullHmacSha512,
    /// AES-CCM with a 128-bit key (NIST SP 800-38C; ESP use per RFC 4309):
    /// 3-byte salt, 8-byte explicit IV, ICV of 8, 12 or 16 bytes.
    Aes128Ccm,
    /// AES-CCM with a 192-bit key (RFC 4309 §7.1).
    Aes192Ccm,
    /// AES-CCM with a 256-bit key.
    Aes256Ccm,
}

/// Former name of [`Algorithm`], from when only AES-GCM existed.
pub type AeadAlgorithm = Algorithm;

/// The confidentiality part of an [`Algorithm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-GCM (combined mode).
    AesGcm,
    /// AES-GMAC (combined mode, nothing encrypted).
    AesGmac,
    /// AES-CCM (combined mode; RFC 4309): nonce = 3-byte salt ‖ 8-byte IV.
    AesCcm,
    /// ChaCha20-Poly1305 (combined mode).
    ChaCha20Poly1305,
    /// AES-CBC, 16-byte explicit IV, whole blocks only.
    AesCbc,
    /// AES-CTR: 4-byte nonce from the key material ‖ 8-byte IV ‖ 32-bit
    /// block counter starting at 1 (RFC 3686 §4).
    AesCtr,
    /// No encryption (RFC 2410): the data range is left as it is.
    Null,
}

/// The separate integrity algorithm of an [`Algorithm`], if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mac {
    /// HMAC-SHA-1 truncated to 96 bits (RFC 2404), 160-bit key.
    HmacSha1_96,
    /// HMAC-SHA-256 truncated to 128 bits (RFC 4868), 256-bit key.
    HmacSha256_128,
    /// HMAC-SHA-384 truncated to 192 bits (RFC 4868), 384-bit key.
    HmacSha384_192,
    /// HMAC-SHA-512 truncated to 256 bits (RFC 4868), 512-bit key.
    HmacSha512_256,
}

impl Mac {
    /// Key length in bytes (RFC 2404 §3; RFC 4868 §2.1.1: the hash's
    /// output length, 32, 48 or 64).
    pub fn key_len(self) -> usize {
        match self {
            Mac::HmacSha1_96 => 20,
            Mac::HmacSha256_128 => 32,
            Mac::HmacSha384_192 => 48,
            Mac::HmacSha512_256 => 64,
        }
    }
    /// Truncated output (ICV) length in bytes (RFC 2404 §2; RFC 4868
    /// §2.3: half the hash's output).
    pub fn icv_len(self) -> usize {
        match self {
            Mac::HmacSha1_96 => 12,
            Mac::HmacSha256_128 => 16,
            Mac::HmacSha384_192 => 24,
            Mac::HmacSha512_256 => 32,
        }
    }
}

impl Algorithm {
    /// Every algorithm, in the order the devices list them.
    pub const ALL: [Algorithm; 38] = [
        Algorithm::Aes128Gcm,
        Algorithm::Aes256Gcm,
        Algorithm::Aes128Gmac,
        Algorithm::Aes256Gmac,
        Algorithm::ChaCha20Poly1305,
        Algorithm::Aes128CbcHmacSha1,
        Algorithm::Aes256CbcHmacSha1,
        Algorithm::Aes128CbcHmacSha256,
        Algorithm::Aes256CbcHmacSha256,
        Algorithm::Aes128CtrHmacSha1,
        Algorithm::Aes256CtrHmacSha1,
        Algorithm::Aes128CtrHmacSha256,
        Algorithm::Aes256CtrHmacSha256,
        Algorithm::NullHmacSha1,
        Algorithm::NullHmacSha256,
        Algorithm::Aes192Gcm,
        Algorithm::Aes192Gmac,
        Algorithm::Aes192CbcHmacSha1,
        Algorithm::Aes192CbcHmacSha256,
        Algorithm::Aes192CtrHmacSha1,
        Algorithm::Aes192CtrHmacSha256,
        Algorithm::Aes128CbcHmacSha384,
        Algorithm::Aes192CbcHmacSha384,
        Algorithm::Aes256CbcHmacSha384,
        Algorithm::Aes128CbcHmacSha512,
        Algorithm::Aes192CbcHmacSha512,
        Algorithm::Aes256CbcHmacSha512,
        Algorithm::Aes128CtrHmacSha384,
        Algorithm::Aes192CtrHmacSha384,
        Algorithm::Aes256CtrHmacSha384,
        Algorithm::Aes128CtrHmacSha512,
        Algorithm::Aes192CtrHmacSha512,
        Algorithm::Aes256CtrHmacSha512,
        Algorithm::NullHmacSha384,
        Algorithm::NullHmacSha512,
        Algorithm::Aes128Ccm,
        Algorithm::Aes192Ccm,
        Algorithm::Aes256Ccm,
    ];

    /// The name an SA selects it by in the config (`algorithm = "…"`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Aes128Gcm => "aes-128-gcm",
            Algorithm::Aes256Gcm => "aes-256-gcm",
            Algorithm::Aes128Gmac => "aes-128-gmac",
            Algorithm::Aes256Gmac => "aes-256-gmac",
            Algorithm::ChaCha20Poly1305 => "chacha20-poly1305",
            Algorithm::Aes128CbcHmacSha1 => "aes-128-cbc-hmac-sha1",
            Algorithm::Aes256CbcHmacSha1 => "aes-256-cbc-hmac-sha1",
            Algorithm::Aes128CbcHmacSha256 => "aes-128-cbc-hmac-sha256",
            Algorithm::Aes256CbcHmacSha256 => "aes-256-cbc-hmac-sha256",
            Algorithm::Aes128CtrHmacSha1 => "aes-128-ctr-hmac-sha1",
            Algorithm::Aes256CtrHmacSha1 => "aes-256-ctr-hmac-sha1",
            Algorithm::Aes128CtrHmacSha256 => "aes-128-ctr-hmac-sha256",
            Algorithm::Aes256CtrHmacSha256 => "aes-256-ctr-hmac-sha256",
            Algorithm::NullHmacSha1 => "null-hmac-sha1",
            Algorithm::NullHmacSha256 => "null-hmac-sha256",
            Algorithm::Aes192Gcm => "aes-192-gcm",
            Algorithm::Aes192Gmac => "aes-192-gmac",
            Algorithm::Aes192CbcHmacSha1 => "aes-192-cbc-hmac-sha1",
            Algorithm::Aes192CbcHmacSha256 => "aes-192-cbc-hmac-sha256",
            Algorithm::Aes192CtrHmacSha1 => "aes-192-ctr-hmac-sha1",
            Algorithm::Aes192CtrHmacSha256 => "aes-192-ctr-hmac-sha256",
            Algorithm::Aes128CbcHmacSha384 => "aes-128-cbc-hmac-sha384",
            Algorithm::Aes192CbcHmacSha384 => "aes-192-cbc-hmac-sha384",
            Algorithm::Aes256CbcHmacSha384 => "aes-256-cbc-hmac-sha384",
            Algorithm::Aes128CbcHmacSha512 => "aes-128-cbc-hmac-sha512",
            Algorithm::Aes192CbcHmacSha512 => "aes-192-cbc-hmac-sha512",
            Algorithm::Aes256CbcHmacSha512 => "aes-256-cbc-hmac-sha512",
            Algorithm::Aes128CtrHmacSha384 => "aes-128-ctr-hmac-sha384",
            Algorithm::Aes192CtrHmacSha384 => "aes-192-ctr-hmac-sha384",
            Algorithm::Aes256CtrHmacSha384 => "aes-256-ctr-hmac-sha384",
            Algorithm::Aes128CtrHmacSha512 => "aes-128-ctr-hmac-sha512",
            Algorithm::Aes192CtrHmacSha512 => "aes-192-ctr-hmac-sha512",
            Algorithm::Aes256CtrHmacSha512 => "aes-256-ctr-hmac-sha512",
            Algorithm::NullHmacSha384 => "null-hmac-sha384",
            Algorithm::NullHmacSha512 => "null-hmac-sha512",
            Algorithm::Aes128Ccm => "aes-128-ccm",
            Algorithm::Aes192Ccm => "aes-192-ccm",
            Algorithm::Aes256Ccm => "aes-256-ccm",
        }
    }

    /// The confidentiality part.
    pub fn cipher(self) -> Cipher {
        use Algorithm::*;
        match self {
            Aes128Gcm | Aes192Gcm | Aes256Gcm => Cipher::AesGcm,
            Aes128Gmac | Aes192Gmac | Aes256Gmac => Cipher::AesGmac,
            Aes128Ccm | Aes192Ccm | Aes256Ccm => Cipher::AesCcm,
            ChaCha20Poly1305 => Cipher::ChaCha20Poly1305,
            Aes128CbcHmacSha1 | Aes192CbcHmacSha1 | Aes256CbcHmacSha1 | Aes128CbcHmacSha256 | Aes192CbcHmacSha256 | Aes256CbcHmacSha256 | Aes128CbcHmacSha384
            | Aes192CbcHmacSha384 | Aes256CbcHmacSha384 | Aes128CbcHmacSha512 | Aes192CbcHmacSha512 | Aes256CbcHmacSha512 => Cipher::AesCbc,
            Aes128CtrHmacSha1 | Aes192CtrHmacSha1 | Aes256CtrHmacSha1 | Aes128CtrHmacSha256 | Aes192CtrHmacSha256 | Aes256CtrHmacSha256 | Aes128CtrHmacSha384
            | Aes192CtrHmacSha384 | Aes256CtrHmacSha384 | Aes128CtrHmacSha512 | Aes192CtrHmacSha512 | Aes256CtrHmacSha512 => Cipher::AesCtr,
            NullHmacSha1 | NullHmacSha256 | NullHmacSha384 | NullHmacSha512 => Cipher::Null,
        }
    }

    /// The separate integrity algorithm; `None` for combined modes.
    pub fn mac(self) -> Option<Mac> {
        use Algorithm::*;
        match self {
            Aes128Gcm | Aes192Gcm | Aes256Gcm | Aes128Gmac | Aes192Gmac | Aes256Gmac | ChaCha20Poly1305 | Aes128Ccm | Aes192Ccm | Aes256Ccm => None,
            Aes128CbcHmacSha1 | Aes192CbcHmacSha1 | Aes256CbcHmacSha1 | Aes128CtrHmacSha1 | Aes192CtrHmacSha1 | Aes256CtrHmacSha1 | NullHmacSha1 => Some(Mac::HmacSha1_96),
            Aes128CbcHmacSha256 | Aes192CbcHmacSha256 | Aes256CbcHmacSha256 | Aes128CtrHmacSha256 | Aes192CtrHmacSha256 | Aes256CtrHmacSha256 | NullHmacSha256 => {
                Some(Mac::HmacSha256_128)
            }
            Aes128CbcHmacSha384 | Aes192CbcHmacSha384 | Aes256CbcHmacSha384 | Aes128CtrHmacSha384 | Aes192CtrHmacSha384 | Aes256CtrHmacSha384 | NullHmacSha384 => {
                Some(Mac::HmacSha384_192)
            }
            Aes128CbcHmacSha512 | Aes192CbcHmacSha512 | Aes256CbcHmacSha512 | Aes128CtrHmacSha512 | Aes192CtrHmacSha512 | Aes256CtrHmacSha512 | NullHmacSha512 => {
                Some(Mac::HmacSha512_256)
            }
        }
    }

    /// Combined mode (AEAD or GMAC): integrity from the cipher itself.
    pub fn is_combined(self) -> bool {
        self.mac().is_none()
    }

    /// Cipher key length in bytes, without salt or nonce (0 for NULL).
    pub fn key_len(self) -> usize {
        use Algorithm::*;
        match self {
            Aes128Gcm | Aes128Gmac | Aes128CbcHmacSha1 | Aes128CbcHmacSha256 | Aes128CtrHmacSha1 | Aes128CtrHmacSha256 | Aes128CbcHmacSha384 | Aes128CbcHmacSha512
            | Aes128CtrHmacSha384 | Aes128CtrHmacSha512 | Aes128Ccm => 16,
            Aes192Gcm | Aes192Gmac | Aes192CbcHmacSha1 | Aes192CbcHmacSha256 | Aes192CtrHmacSha1 | Aes192CtrHmacSha256 | Aes192CbcHmacSha384 | Aes192CbcHmacSha512
            | Aes192CtrHmacSha384 | Aes192CtrHmacSha512 | Aes192Ccm => 24,
            Aes256Gcm | Aes256Gmac | Aes256CbcHmacSha1 | Aes256CbcHmacSha256 | Aes256CtrHmacSha1 | Aes256CtrHmacSha256 | Aes256CbcHmacSha384 | Aes256CbcHmacSha512
            | Aes256CtrHmacSha384 | Aes256CtrHmacSha512 | Aes256Ccm => 32,
            ChaCha20Poly1305 => 32,
            NullHmacSha1 | NullHmacSha256 | NullHmacSha384 | NullHmacSha512 => 0,
        }
    }

    /// Bytes of salt (GCM, GMAC, CCM, ChaCha20-Poly1305) or nonce (CTR)
    /// taken from the end of the key material: 4, 3 for CCM (RFC 4309
    /// §7.1), 0 for CBC and NULL.
    pub fn salt_len(self) -> usize {
        match self.cipher() {
            Cipher::AesCbc | Cipher::Null => 0,
            Cipher::AesCcm => 3,
            _ => 4,
        }
    }

    /// Integrity key length in bytes (0 for combined modes).
    pub fn auth_key_len(self) -> usize {
        self.mac().map_or(0, Mac::key_len)
    }

    /// Explicit IV length in the packet: 16 for CBC, 0 for NULL, else 8.
    pub fn iv_len(self) -> usize {
        match self.cipher() {
            Cipher::AesCbc => 16,
            Cipher::Null => 0,
            _ => 8,
        }
    }

    /// What the encrypted part of an ESP packet must be a multiple of
    /// (RFC 4303 §2.4): the cipher block size of 16 for CBC (RFC 3602
    /// §2.4), else the 4-byte ESP alignment.
    pub fn block_size(self) -> usize {
        match self.cipher() {
            Cipher::AesCbc => 16,
            _ => 4,
        }
    }

    /// ICV lengths an SA may choose: 8, 12 or 16 for AES-GCM (RFC 4106
    /// §6) and AES-CCM (RFC 4309 §3.1), 16 for GMAC and ChaCha20-Poly1305,
    /// the MAC's truncation else (12, 16, 24 or 32: RFC 2404 §2, RFC 4868
    /// §2.3).
    pub fn icv_lens(self) -> &'static [usize] {
        match (self.cipher(), self.mac()) {
            (Cipher::AesGcm | Cipher::AesCcm, _) => &[8, 12, 16],
            (_, Some(Mac::HmacSha1_96)) => &[12],
            (_, Some(Mac::HmacSha384_192)) => &[24],
            (_, Some(Mac::HmacSha512_256)) => &[32],
            _ => &[16],
        }
    }

    /// The ICV length used when the SA does not choose one.
    pub fn default_icv_len(self) -> usize {
        match self.mac() {
            Some(m) => m.icv_len(),
            None => 16,
        }
    }
}

/// Whether a session seals (encrypt + tag) or opens (verify + decrypt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherDirection {
    /// Encrypt the data range and write the ICV.
    Encrypt,
    /// Verify the ICV and decrypt the data range.
    Decrypt,
}

/// What a session does: the transform and its key material.
///
/// Combined modes and AES-CTR build their nonce as `salt ‖ op.iv[..8]`
/// (RFC 4106 §4, RFC 4543 §3.1, RFC 7634 §2, RFC 3686 §4: the 4-byte salt
/// or nonce is the end of the key material; AES-CCM's 11-byte nonce takes
/// the first 3 bytes of `salt`, RFC 4309 §4); CBC takes its IV from
/// `op.iv[..16]`; NULL has none.
///
/// `key`, `salt` and `auth_key` are zeroized when the transform drops
/// ([`zeroize::ZeroizeOnDrop`]), so build it where it is used and let it go.
pub struct SymXform {
    /// Algorithm.
    pub algorithm: Algorithm,
    /// Encrypt or decrypt.
    pub direction: CipherDirection,
    /// Cipher key, `algorithm.key_len()` bytes (empty for NULL).
    pub key: Vec<u8>,
    /// 4-byte salt (GCM, GMAC, ChaCha20-Poly1305) or nonce (CTR); CCM's
    /// 3-byte salt in its first 3 bytes (the fourth unused); ignored by CBC
    /// and NULL.
    pub salt: [u8; 4],
    /// ICV length in bytes, one of `algorithm.icv_lens()`.
    pub icv_len: usize,
    /// Integrity key, `algorithm.auth_key_len()` bytes (empty for combined
    /// modes).
    pub auth_key: Vec<u8>,
}

impl Zeroize for SymXform {
    /// Wipes `key`, `salt` and `auth_key` (leaving them empty / zero).
    fn zeroize(&mut self) {
        self.key.zeroize();
        self.salt.zeroize();
        self.auth_key.zeroize();
    }
}

impl Drop for SymXform {
    fn drop(&mut self) {
        self.zeroize();
    }
}

impl ZeroizeOnDrop for SymXform {}

/// One algorithm a device supports, with its sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// Algorithm.
    pub algorithm: Algorithm,
    /// Cipher key length (without salt or nonce; 0 for NULL).
    pub key_len: usize,
    /// Salt or nonce length taken from the key material.
    pub salt_len: usize,
    /// Integrity key length (0 for combined modes).
    pub auth_key_len: usize,
    /// Explicit IV length.
    pub iv_len: usize,
    /// Supported ICV lengths.
    pub icv_lens: &'static [usize],
    /// Maximum AAD length carried in the op (`CryptoOp::aad`).
    pub max_aad_len: usize,
    /// Maximum auth trailer length (`CryptoOp::auth_trailer`; 0 for
    /// combined modes, which carry ESN high bits in the AAD).
    pub max_auth_trailer_len: usize,
    /// The cipher range must be a multiple of this (16 for CBC, else 1).
    pub data_align: usize,
}

/// Device feature flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFlags {
    /// Ops complete during `enqueue_burst` (software); otherwise later.
    pub sync: bool,
    /// The device models hardware.
    pub hardware: bool,
    /// The device implements `queue_pair_attach_session`/`detach`.
    pub attach_sessions: bool,
}

/// What a device reports about itself (DPDK `rte_cryptodev_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Driver name.
    pub driver: &'static str,
    /// Number of queue pairs.
    pub nb_queue_pairs: u16,
    /// Sessions a queue pair can hold; 0 = unlimited.
    pub max_sessions_per_qp: u32,
    /// The provider setting sessions are created with
    /// ([`Session::provider`] says what each one got).
    pub provider: ProviderChoice,
    /// Algorithms (with [`ProviderChoice::Only`], those the provider runs).
    pub capabilities: Vec<Capability>,
    /// Flags.
    pub flags: DeviceFlags,
}

/// Queue pair settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConf {
    /// Ring depth in ops: at most this many ops in flight.
    pub nb_descriptors: usize,
}

/// Errors of the control-path calls (sessions, queue pairs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The device does not offer this algorithm / key size / ICV size.
    #[error("{driver}: unsupported transform: {what}")]
    Unsupported {
        /// Driver name.
        driver: &'static str,
        /// What is not supported.
        what: String,
    },
    /// A queue pair id beyond `nb_queue_pairs`.
    #[error("{driver}: no queue pair {qp_id} (device has {nb})")]
    NoQueuePair {
        /// Driver name.
        driver: &'static str,
        /// Requested id.
        qp_id: u16,
        /// Number of queue pairs.
        nb: u16,
    },
    /// The queue pair was already set up and handed out.
    #[error("{driver}: queue pair {qp_id} is already set up")]
    QueuePairInUse {
        /// Driver name.
        driver: &'static str,
        /// Queue pair id.
        qp_id: u16,
    },
    /// Attach/detach called on a device whose info says it has none.
    #[error("{driver}: queue pair session attach is not supported")]
    AttachNotSupported {
        /// Driver name.
        driver: &'static str,
    },
    /// Attach: the queue pair already holds `limit` sessions
    /// (`DeviceInfo::max_sessions_per_qp`).
    #[error("{driver}: queue pair {qp_id} already holds its limit of {limit} sessions")]
    LimitReached {
        /// Driver name.
        driver: &'static str,
        /// Queue pair id.
        qp_id: u16,
        /// Sessions per queue pair the device allows.
        limit: u32,
    },
    /// Attach: the session is already attached to this queue pair.
    #[error("{driver}: session {session_id} is already attached to queue pair {qp_id}")]
    AlreadyAttached {
        /// Driver name.
        driver: &'static str,
        /// Queue pair id.
        qp_id: u16,
        /// `Session::id`.
        session_id: u64,
    },
    /// Detach: the session is not attached to this queue pair.
    #[error("{driver}: session {session_id} is not attached to queue pair {qp_id}")]
    NotAttached {
        /// Driver name.
        driver: &'static str,
        /// Queue pair id.
        qp_id: u16,
        /// `Session::id`.
        session_id: u64,
    },
    /// Detach / setup-with-session: the session still has ops in flight on
    /// the queue pair (accepted by `enqueue_burst`, not yet processed).
    /// Nothing was changed; retry once they have drained.
    #[error("{driver}: queue pair {qp_id} still has {inflight} ops in flight on the session")]
    Busy {
        /// Driver name.
        driver: &'static str,
        /// Queue pair id.
        qp_id: u16,
        /// Ops in flight on the session(s) concerned when the call looked.
        inflight: u64,
    },
    /// Setup-with-session on a queue pair that is not stopped.
    #[error("{driver}: queue pair {qp_id} must be stopped first")]
    NotStopped {
        /// Driver name.
        driver: &'static str,
        /// Queue pair id.
        qp_id: u16,
    },
    /// `session_free` of a session still attached to a queue pair.
    #[error("{driver}: session {session_id} is still attached to queue pair {qp_id}")]
    SessionInUse {
        /// Driver name.
        driver: &'static str,
        /// `Session::id`.
        session_id: u64,
        /// A queue pair it is attached to.
        qp_id: u16,
    },
    /// A device or queue pair configuration out of range.
    #[error("{driver}: invalid configuration: {what}")]
    InvalidConfig {
        /// Driver name.
        driver: &'static str,
        /// What is wrong, with the value seen.
        what: String,
    },
    /// The device could not start (e.g. an engine thread failed to spawn).
    #[error("{driver}: cannot start: {reason}")]
    DeviceStart {
        /// Driver name.
        driver: &'static str,
        /// The OS error.
        reason: String,
    },
}

/// Outcome of one op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpStatus {
    /// Not processed yet.
    NotProcessed,
    /// Done; for decrypt the ICV verified.
    Success,
    /// Decrypt: the ICV did not verify. The data range is left as it was.
    AuthFailed,
    /// The op's session is not attached to this queue pair (limited devices).
    SessionNotAttached,
    /// The op's ranges do not fit its buffer or its session's transform.
    InvalidOp,
    /// The device failed.
    DeviceError,
}

/// One crypto operation on a buffer `B` (the data path uses the gateway's
/// packet buffer; anything that is `AsMut<[u8]>` works).
///
/// Ranges are byte offsets into `buf.as_mut()`:
/// * cipher range `[data_offset, data_offset + data_len)`: encrypted or
///   decrypted in place (left as it is by NULL; must be empty for GMAC; a
///   multiple of 16 for CBC);
/// * auth range `[auth_offset, auth_offset + auth_len)`: for a separate MAC
///   the MAC input is `auth range ‖ auth_trailer[..auth_trailer_len]` (ESP:
///   header to the end of the ciphertext, then the ESN high bits, RFC 4303
///   §2.2.1), computed over the ciphertext (encrypt-then-MAC) and verified
///   before anything is decrypted; for combined modes the associated data is
///   `aad[..aad_len] ‖ auth range` (GMAC: IV and payload, RFC 4543 §3.3;
///   ChaCha20-Poly1305 takes no auth range);
/// * the ICV is written to or read from `[icv_offset, icv_offset +
///   session.icv_len())`, which overlaps neither range.
///
/// Nothing is copied: the trailer and AAD travel in the op, the data stay
/// in the buffer.
pub struct CryptoOp<B> {
    /// Session to use (its device must be the queue pair's).
    pub session: Arc<Session>,
    /// The buffer, owned by the op while it is in the device.
    pub buf: B,
    /// Start of the cipher range.
    pub data_offset: u32,
    /// Length of the cipher range.
    pub data_len: u32,
    /// Start of the auth range.
    pub auth_offset: u32,
    /// Length of the auth range.
    pub auth_len: u32,
    /// Start of the ICV.
    pub icv_offset: u32,
    /// AAD bytes of combined modes (at most 16).
    pub aad: [u8; 16],
    /// AAD length (0 for a separate MAC).
    pub aad_len: u8,
    /// Bytes a separate MAC covers after the auth range (ESN high bits).
    pub auth_trailer: [u8; 4],
    /// Auth trailer length, 0 or 4 (0 for combined modes).
    pub auth_trailer_len: u8,
    /// Explicit IV: the first `session.algorithm().iv_len()` bytes are used.
    pub iv: [u8; 16],
    /// Result, set by the device.
    pub status: OpStatus,
    /// Opaque to the device; returned as given.
    pub user: [u64; 2],
}

impl<B> CryptoOp<B> {
    /// An op on `buf` with every range empty, no AAD, trailer or IV, not
    /// processed: the caller fills in what its transform needs.
    pub fn new(session: Arc<Session>, buf: B) -> CryptoOp<B> {
        CryptoOp {
            session,
            buf,
            data_offset: 0,
            data_len: 0,
            auth_offset: 0,
            auth_len: 0,
            icv_offset: 0,
            aad: [0; 16],
            aad_len: 0,
            auth_trailer: [0; 4],
            auth_trailer_len: 0,
            iv: [0; 16],
            status: OpStatus::NotProcessed,
            user: [0; 2],
        }
    }
}

/// An immutable session: transform and expanded key schedule.
///
/// When the last `Arc` drops, its key material is zeroized: the AES key
/// schedules, the GHASH key, the ChaCha20 key and the salt or nonce. Not
/// the keyed HMAC states (SHA state after the key's inner and outer pads):
/// `hmac` 0.12 keeps them in types that cannot be wiped from outside and
/// has no `zeroize` feature (RustCrypto/MACs#255); and not the key
/// schedule of a [`Provider::Ring`] session (`ring` 0.17 has no `zeroize`
/// either).
pub struct Session {
    id: u64,
    algorithm: Algorithm,
    direction: CipherDirection,
    icv_len: usize,
    provider: Provider,
    salt: Zeroizing<[u8; 4]>,
    pub(crate) ctx: soft::Transform,
}

impl Session {
    /// Device-unique id.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    /// Encrypt or decrypt.
    pub fn direction(&self) -> CipherDirection {
        self.direction
    }
    /// ICV length in bytes.
    pub fn icv_len(&self) -> usize {
        self.icv_len
    }
    /// The provider that runs this session's transform.
    pub fn provider(&self) -> Provider {
        self.provider
    }
    /// Bytes of the expanded key schedule this session keeps on the heap
    /// (the boxed transform: AES round keys, GHASH key, HMAC states), for
    /// memory accounting (the control-plane bench subtracts it from the
    /// resident memory per SA).
    pub fn key_schedule_bytes(&self) -> usize {
        self.ctx.heap_bytes()
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("algorithm", &self.algorithm)
            .field("direction", &self.direction)
            .field("provider", &self.provider)
            .finish()
    }
}

/// A queue pair: owned by one worker (`Send`, not `Sync`).
pub trait QueuePair<B>: Send {
    /// Takes ops from the front of `ops` (at most the free ring space),
    /// removing the accepted ones; returns how many were accepted. Ops not
    /// accepted stay in `ops` (backpressure, never loss). Accepts 0 while the
    /// queue pair is stopped (`CryptoDevice::queue_pair_stop`).
    fn enqueue_burst(&mut self, ops: &mut Vec<CryptoOp<B>>) -> usize;

    /// Moves up to `max` completed ops, in enqueue order, to the end of
    /// `out`; returns how many. `out` should have capacity reserved so this
    /// does not allocate.
    fn dequeue_burst(&mut self, out: &mut Vec<CryptoOp<B>>, max: usize) -> usize;

    /// Ops enqueued and not yet dequeued (at most the ring depth).
    fn inflight(&self) -> usize;

    /// Runs every op of `ops` where it lies, synchronously, and sets its
    /// status as a dequeue would: the synchronous ("CPU crypto") path of a
    /// device that completes ops at enqueue (`DeviceFlags::sync`; DPDK's
    /// `rte_cryptodev_sym_cpu_crypto_process`), which saves moving each op
    /// into the queue pair's ring and back out. Returns `false` and leaves
    /// every op untouched when it cannot: the device is asynchronous (the
    /// default), the queue pair is stopped, or completions are waiting to
    /// be dequeued (running these first would reorder them); the caller
    /// then goes through [`QueuePair::enqueue_burst`] /
    /// [`QueuePair::dequeue_burst`]. The ring depth does not bound it:
    /// nothing stays in the queue pair.
    fn process_sync(&mut self, _ops: &mut [CryptoOp<B>]) -> bool {
        false
    }
}

/// A crypto device.
pub trait CryptoDevice: Send + Sync {
    /// The device's queue pair type for buffers `B`.
    type Qp<B: AsMut<[u8]> + Send + 'static>: QueuePair<B>;

    /// Device info.
    fn info(&self) -> DeviceInfo;

    /// Creates a session (control thread). Errors if the transform is not in
    /// the device's capabilities.
    fn session_create(&self, xform: &SymXform) -> Result<Arc<Session>, CryptoError>;

    /// Frees a session (control thread): the device forgets it; the memory
    /// goes when the last `Arc` (e.g. in an op still held by a worker) drops.
    /// Errors: `SessionInUse` while it is attached to any queue pair (detach
    /// it first); the session is then kept.
    fn session_free(&self, session: Arc<Session>) -> Result<(), CryptoError>;

    /// Sets up queue pair `qp_id` and hands it to the caller (the worker that
    /// will own it), started. Each id can be set up once. Errors:
    /// `NoQueuePair`, `QueuePairInUse`, `InvalidConfig` (a depth the device
    /// cannot hold).
    fn queue_pair_setup<B: AsMut<[u8]> + Send + 'static>(&self, qp_id: u16, conf: QpConf) -> Result<Self::Qp<B>, CryptoError>;

    /// Stops queue pair `qp_id` (control thread): when this returns, no
    /// `enqueue_burst` or `process_sync` is in progress, every later
    /// `enqueue_burst` accepts 0 ops (they stay with the caller) and every
    /// later `process_sync` declines, until `queue_pair_start`. Ops accepted
    /// before still complete and can be dequeued. Idempotent; also valid
    /// before the queue pair is set up. Waits at most for one enqueue burst
    /// in progress (microseconds). Errors: `NoQueuePair`.
    fn queue_pair_stop(&self, qp_id: u16) -> Result<(), CryptoError>;

    /// Starts queue pair `qp_id` again after `queue_pair_stop`. Idempotent.
    /// Errors: `NoQueuePair`.
    fn queue_pair_start(&self, qp_id: u16) -> Result<(), CryptoError>;

    /// Attaches `session` to queue pair `qp_id` so its ops are processed
    /// there (devices with `max_sessions_per_qp > 0`; the control thread
    /// does it before publishing the SA). Errors: `LimitReached`,
    /// `AlreadyAttached`, `NoQueuePair`. Default: `AttachNotSupported`.
    fn queue_pair_attach_session(&self, _qp_id: u16, _session: &Arc<Session>) -> Result<(), CryptoError> {
        Err(CryptoError::AttachNotSupported { driver: self.info().driver })
    }

    /// Detaches `session` from queue pair `qp_id`; later ops with it on that
    /// queue pair complete with `OpStatus::SessionNotAttached`. Errors:
    /// `NotAttached`, `Busy` while ops with it are in flight there (nothing
    /// changes), `NoQueuePair`. Default: `AttachNotSupported`.
    fn queue_pair_detach_session(&self, _qp_id: u16, _session: &Arc<Session>) -> Result<(), CryptoError> {
        Err(CryptoError::AttachNotSupported { driver: self.info().driver })
    }

    /// "Setup with session": on a stopped queue pair, detaches every session
    /// attached to it and attaches `session` instead (with a limit of 1, the
    /// rekey path stop → setup with the new session → start). All or
    /// nothing. Errors: `NotStopped`, `Busy` while an attached session still
    /// has ops in flight (retry once they drained: a stopped queue pair only
    /// drains), `NoQueuePair`. Default: `AttachNotSupported`.
    fn queue_pair_setup_session(&self, _qp_id: u16, _session: &Arc<Session>) -> Result<(), CryptoError> {
        Err(CryptoError::AttachNotSupported { driver: self.info().driver })
    }
}

/// The capabilities of the software transforms with provider `choice`
/// (every [`Algorithm`] for `Auto` and RustCrypto, ring's subset for
/// ring), offered by every backend since they all run them.
pub(crate) fn soft_capabilities(choice: ProviderChoice) -> Vec<Capability> {
    Algorithm::ALL
        .into_iter()
        .filter(|&a| !choice.icv_lens(a).is_empty())
        .map(|a| Capability {
            algorithm: a,
            key_len: a.key_len(),
            salt_len: a.salt_len(),
            auth_key_len: a.auth_key_len(),
            iv_len: a.iv_len(),
            icv_lens: choice.icv_lens(a),
            max_aad_len: if a.is_combined() { 16 } else { 0 },
            max_auth_trailer_len: if a.is_combined() { 0 } else { 4 },
            data_align: if a.cipher() == Cipher::AesCbc { 16 } else { 1 },
        })
        .collect()
}

/// Checks a transform against a capability list; shared by every backend.
pub(crate) fn check_xform(driver: &'static str, caps: &[Capability], x: &SymXform) -> Result<(), CryptoError> {
    let Some(c) = caps.iter().find(|c| c.algorithm == x.algorithm) else {
        return Err(CryptoError::Unsupported { driver, what: format!("{} is not offered", x.algorithm.name()) });
    };
    let what = if c.key_len != x.key.len() {
        format!("{} with a {}-byte key (expects {})", x.algorithm.name(), x.key.len(), c.key_len)
    } else if c.auth_key_len != x.auth_key.len() {
        format!("{} with a {}-byte integrity key (expects {})", x.algorithm.name(), x.auth_key.len(), c.auth_key_len)
    } else if !c.icv_lens.contains(&x.icv_len) {
        format!("{} with a {}-byte ICV (offers {:?})", x.algorithm.name(), x.icv_len, c.icv_lens)
    } else {
        return Ok(());
    };
    Err(CryptoError::Unsupported { driver, what })
}

/// `session_create` of every backend: checks `x` against the
/// capabilities of `choice`, resolves the provider and builds the session
/// with id `id`. Errors: `Unsupported` (naming the provider when the choice
/// is one provider that does not run the transform).
pub(crate) fn create_session(driver: &'static str, choice: ProviderChoice, id: u64, x: &SymXform) -> Result<Arc<Session>, CryptoError> {
    check_xform(driver, &soft_capabilities(ProviderChoice::Auto), x)?;
    let unsupported = || CryptoError::Unsupported {
        driver,
        what: format!("{} with a {}-byte ICV is not run by provider {} (it offers ICV lengths {:?})", x.algorithm.name(), x.icv_len, choice.name(), choice.icv_lens(x.algorithm)),
    };
    let provider = choice.resolve(x.algorithm, x.icv_len).ok_or_else(unsupported)?;
    let ctx = soft::Transform::new(x.algorithm, &x.key, &x.auth_key, x.icv_len, provider).ok_or_else(unsupported)?;
    Ok(Arc::new(Session { id, algorithm: x.algorithm, direction: x.direction, icv_len: x.icv_len, provider, salt: Zeroizing::new(x.salt), ctx }))
}

/// Runs one op synchronously with the software transform and sets its
/// status: `InvalidOp` for ranges outside the buffer, an ICV overlapping a
/// range, AAD or trailer on the wrong kind of transform, a CBC range that is
/// not whole blocks, a GMAC op with a cipher range or a ChaCha20-Poly1305 op
/// with an auth range. Shared by every backend (the descriptor device's engines call it
/// too); never panics on bad ranges. An op that fails leaves its buffer as
/// it was (a failed ICV check decrypts nothing).
pub(crate) fn process_op<B: AsMut<[u8]>>(op: &mut CryptoOp<B>) {
    let s = &*op.session;
    let buf = op.buf.as_mut();
    let Some(r) = OpRanges::check(op.data_offset, op.data_len, op.auth_offset, op.auth_len, op.icv_offset, s.icv_len, buf.len()) else {
        op.status = OpStatus::InvalidOp;
        return;
    };
    let alg = s.algorithm;
    let combined = alg.is_combined();
    let aad_len = op.aad_len as usize;
    let trailer_len = op.auth_trailer_len as usize;
    let shape_ok = aad_len <= op.aad.len()
        && trailer_len <= op.auth_trailer.len()
        && (combined || aad_len == 0)
        && (!combined || trailer_len == 0)
        && match alg.cipher() {
            Cipher::AesCbc => r.data.len() % 16 == 0,
            Cipher::AesGmac => r.data.is_empty(),
            Cipher::ChaCha20Poly1305 | Cipher::AesCcm => r.auth.is_empty(),
            _ => true,
        };
    if !shape_ok {
        op.status = OpStatus::InvalidOp;
        return;
    }
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&s.salt[..]);
    nonce[4..].copy_from_slice(&op.iv[..8]);
    let args = soft::OpArgs {
        nonce: &nonce,
        iv: &op.iv,
        aad: &op.aad[..aad_len],
        trailer: &op.auth_trailer[..trailer_len],
        icv_len: s.icv_len,
    };
    op.status = match s.direction {
        CipherDirection::Encrypt => s.ctx.seal(&args, buf, &r),
        CipherDirection::Decrypt => s.ctx.open(&args, buf, &r),
    };
}

/// The checked ranges of one op.
pub(crate) struct OpRanges {
    /// Cipher range.
    pub(crate) data: std::ops::Range<usize>,
    /// Auth range.
    pub(crate) auth: std::ops::Range<usize>,
    /// ICV.
    pub(crate) icv: std::ops::Range<usize>,
}

impl OpRanges {
    /// All three ranges inside a buffer of `len` bytes, the ICV overlapping
    /// neither other range; `None` otherwise.
    fn check(d0: u32, dl: u32, a0: u32, al: u32, i0: u32, il: usize, len: usize) -> Option<OpRanges> {
        let range = |o: u32, l: usize| {
            let o = o as usize;
            let end = o.checked_add(l)?;
            (end <= len).then_some(o..end)
        };
        let data = range(d0, dl as usize)?;
        let auth = range(a0, al as usize)?;
        let icv = range(i0, il)?;
        let overlaps = |r: &std::ops::Range<usize>| !r.is_empty() && r.start < icv.end && icv.start < r.end;
        if overlaps(&data) || overlaps(&auth) {
            return None;
        }
        Some(OpRanges { data, auth, icv })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_zod<T: ZeroizeOnDrop>() {}

    /// `SymXform`'s `Drop` is its `zeroize`, which must reach every field
    /// holding key material.
    #[test]
    fn sym_xform_zeroizes_its_key_material() {
        assert_zod::<SymXform>();
        let mut x = SymXform {
            algorithm: Algorithm::Aes128CbcHmacSha1,
            direction: CipherDirection::Encrypt,
            key: vec![0xa5; 16],
            salt: [1, 2, 3, 4],
            icv_len: 12,
            auth_key: vec![0x5a; 20],
        };
        x.zeroize();
        assert!(x.key.is_empty(), "key wiped");
        assert!(x.auth_key.is_empty(), "auth_key wiped");
        assert_eq!(x.salt, [0; 4], "salt wiped");
    }

    /// A session keeps its salt in a `Zeroizing` (compile-time check) that
    /// holds the transform's salt.
    #[test]
    fn session_salt_is_zeroizing() {
        let x = SymXform { algorithm: Algorithm::Aes128Gcm, direction: CipherDirection::Encrypt, key: vec![1; 16], salt: [9, 8, 7, 6], icv_len: 16, auth_key: Vec::new() };
        let s = create_session("t", ProviderChoice::Auto, 1, &x).unwrap();
        let salt: &Zeroizing<[u8; 4]> = &s.salt;
        assert_eq!(**salt, [9, 8, 7, 6]);
    }
}
