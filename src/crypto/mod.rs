//! The crypto device layer, modelled on DPDK cryptodev (DESIGN.md §3).
//!
//! * A device reports its [`DeviceInfo`] (queue pairs, algorithms,
//!   `max_sessions_per_qp`, 0 = unlimited).
//! * A [`Session`] holds immutable key material in the backend's format. The
//!   control thread creates and frees sessions; the data path only clones the
//!   `Arc` into ops.
//! * A [`QueuePair`] is `Send` but not `Sync`: it belongs to one worker.
//!   [`QueuePair::enqueue_burst`] and [`QueuePair::dequeue_burst`] are separate
//!   calls so synchronous (software) and asynchronous (descriptor hardware)
//!   devices look the same to the worker.
//! * A [`CryptoOp`] names byte ranges of its buffer: the range to
//!   encrypt/decrypt, where the ICV goes, the AAD and the IV. ESP framing is
//!   not known here: `esp/` fills those fields.
//!
//! * Queue pair life cycle (control thread): [`CryptoDevice::queue_pair_setup`]
//!   hands the queue pair to its worker, started. [`CryptoDevice::queue_pair_stop`]
//!   makes `enqueue_burst` accept 0 ops (they stay with the caller) while ops
//!   already accepted still complete and can be dequeued;
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
pub mod soft;

pub(crate) use gate::QpGate;

use std::sync::Arc;

/// AEAD algorithms a device may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AeadAlgorithm {
    /// AES-GCM with a 128-bit key (NIST SP 800-38D; ESP use per RFC 4106).
    Aes128Gcm,
    /// AES-GCM with a 256-bit key.
    Aes256Gcm,
}

impl AeadAlgorithm {
    /// AES key length in bytes (without the salt).
    pub fn key_len(self) -> usize {
        match self {
            AeadAlgorithm::Aes128Gcm => 16,
            AeadAlgorithm::Aes256Gcm => 32,
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
/// The nonce of every op is `salt ‖ op.iv` (RFC 4106 §4: 4-byte salt from the
/// key material, 8-byte explicit IV from the packet).
pub struct SymXform {
    /// Algorithm.
    pub algorithm: AeadAlgorithm,
    /// Encrypt or decrypt.
    pub direction: CipherDirection,
    /// AES key, `algorithm.key_len()` bytes.
    pub key: Vec<u8>,
    /// 4-byte salt.
    pub salt: [u8; 4],
    /// ICV length in bytes (16).
    pub icv_len: usize,
}

/// One algorithm a device supports, with its sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// Algorithm.
    pub algorithm: AeadAlgorithm,
    /// Supported key lengths.
    pub key_len: usize,
    /// Explicit IV length.
    pub iv_len: usize,
    /// Supported ICV lengths.
    pub icv_lens: &'static [usize],
    /// Maximum AAD length.
    pub max_aad_len: usize,
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
    /// Algorithms.
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
/// Ranges are byte offsets into `buf.as_mut()`: `[data_offset, data_offset +
/// data_len)` is encrypted or decrypted in place; the ICV is written to or
/// read from `[icv_offset, icv_offset + icv_len)`; the AAD is
/// `aad[..aad_len]`.
pub struct CryptoOp<B> {
    /// Session to use (its device must be the queue pair's).
    pub session: Arc<Session>,
    /// The buffer, owned by the op while it is in the device.
    pub buf: B,
    /// Start of the data range.
    pub data_offset: u32,
    /// Length of the data range.
    pub data_len: u32,
    /// Start of the ICV.
    pub icv_offset: u32,
    /// AAD bytes (at most 16).
    pub aad: [u8; 16],
    /// AAD length.
    pub aad_len: u8,
    /// Explicit 8-byte IV.
    pub iv: [u8; 8],
    /// Result, set by the device.
    pub status: OpStatus,
    /// Opaque to the device; returned as given.
    pub user: [u64; 2],
}

/// An immutable session: transform and expanded key schedule.
pub struct Session {
    id: u64,
    algorithm: AeadAlgorithm,
    direction: CipherDirection,
    icv_len: usize,
    salt: [u8; 4],
    pub(crate) ctx: soft::AeadCtx,
}

impl Session {
    /// Device-unique id.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Algorithm.
    pub fn algorithm(&self) -> AeadAlgorithm {
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
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).field("algorithm", &self.algorithm).field("direction", &self.direction).finish()
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
    /// `enqueue_burst` is in progress and every later one accepts 0 ops
    /// (they stay with the caller) until `queue_pair_start`. Ops accepted
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

/// The AES-GCM capabilities of the software transform, offered by every
/// backend since they all run it.
pub(crate) fn gcm_capabilities() -> Vec<Capability> {
    [AeadAlgorithm::Aes128Gcm, AeadAlgorithm::Aes256Gcm]
        .into_iter()
        .map(|a| Capability { algorithm: a, key_len: a.key_len(), iv_len: 8, icv_lens: &[16], max_aad_len: 16 })
        .collect()
}

/// Checks a transform against a capability list; shared by every backend.
pub(crate) fn check_xform(driver: &'static str, caps: &[Capability], x: &SymXform) -> Result<(), CryptoError> {
    let ok = caps.iter().any(|c| c.algorithm == x.algorithm && c.key_len == x.key.len() && c.icv_lens.contains(&x.icv_len));
    if ok {
        Ok(())
    } else {
        Err(CryptoError::Unsupported {
            driver,
            what: format!("{:?} with {}-byte key and {}-byte ICV", x.algorithm, x.key.len(), x.icv_len),
        })
    }
}

/// Builds a session from a checked transform; shared by every backend.
pub(crate) fn new_session(id: u64, x: &SymXform) -> Session {
    Session {
        id,
        algorithm: x.algorithm,
        direction: x.direction,
        icv_len: x.icv_len,
        salt: x.salt,
        ctx: soft::AeadCtx::new(x.algorithm, &x.key),
    }
}

/// Runs one op synchronously with the software primitives and sets its
/// status. Shared by every backend (the descriptor device's engines call it
/// too); never panics on bad ranges.
pub(crate) fn process_op<B: AsMut<[u8]>>(op: &mut CryptoOp<B>) {
    let s = &*op.session;
    let buf = op.buf.as_mut();
    let d0 = op.data_offset as usize;
    let d1 = d0 + op.data_len as usize;
    let i0 = op.icv_offset as usize;
    let i1 = i0 + s.icv_len;
    if d1 > buf.len() || i1 > buf.len() || (i0 < d1 && d0 < i1) || op.aad_len as usize > op.aad.len() {
        op.status = OpStatus::InvalidOp;
        return;
    }
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&s.salt);
    nonce[4..].copy_from_slice(&op.iv);
    let aad = &op.aad[..op.aad_len as usize];
    // Split so the data and ICV ranges can be borrowed at once.
    let (data, icv) = if d1 <= i0 {
        let (a, b) = buf.split_at_mut(i0);
        (&mut a[d0..d1], &mut b[..s.icv_len])
    } else {
        let (a, b) = buf.split_at_mut(d0);
        (&mut b[..d1 - d0], &mut a[i0..i1])
    };
    op.status = match s.direction {
        CipherDirection::Encrypt => s.ctx.seal(&nonce, aad, data, icv),
        CipherDirection::Decrypt => s.ctx.open(&nonce, aad, data, icv),
    };
}
