//! The software crypto device: synchronous, in the worker, on RustCrypto's
//! `aes-gcm`. Unlimited sessions per queue pair; no attach needed
//! (`DeviceInfo::max_sessions_per_qp` 0, `flags.attach_sessions` false: the
//! attach calls return `AttachNotSupported`). Queue pairs can be stopped and
//! started like the descriptor device's; ops complete at enqueue, so a stop
//! never leaves work in flight beyond the completions not yet dequeued.

use super::{
    check_xform, gcm_capabilities, new_session, process_op, AeadAlgorithm, CryptoDevice, CryptoError, CryptoOp, DeviceFlags,
    DeviceInfo, OpStatus, QpConf, QpGate, QueuePair, Session, SymXform,
};
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, Aes256Gcm, KeyInit};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const DRIVER: &str = "crypto_soft";

/// Expanded AES-GCM key schedule.
pub(crate) enum AeadCtx {
    Aes128(Box<Aes128Gcm>),
    Aes256(Box<Aes256Gcm>),
}

impl AeadCtx {
    /// Expands `key` (length already checked against the algorithm).
    pub(crate) fn new(alg: AeadAlgorithm, key: &[u8]) -> AeadCtx {
        match alg {
            AeadAlgorithm::Aes128Gcm => AeadCtx::Aes128(Box::new(Aes128Gcm::new(aes_gcm::Key::<Aes128Gcm>::from_slice(key)))),
            AeadAlgorithm::Aes256Gcm => AeadCtx::Aes256(Box::new(Aes256Gcm::new(aes_gcm::Key::<Aes256Gcm>::from_slice(key)))),
        }
    }

    /// Encrypts `data` in place and writes the 16-byte tag to `icv`.
    pub(crate) fn seal(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8], icv: &mut [u8]) -> OpStatus {
        let n = aes_gcm::Nonce::from_slice(nonce);
        let tag = match self {
            AeadCtx::Aes128(c) => c.encrypt_in_place_detached(n, aad, data),
            AeadCtx::Aes256(c) => c.encrypt_in_place_detached(n, aad, data),
        };
        match tag {
            Ok(t) if icv.len() == t.len() => {
                icv.copy_from_slice(&t);
                OpStatus::Success
            }
            Ok(_) => OpStatus::InvalidOp,
            Err(_) => OpStatus::DeviceError,
        }
    }

    /// Verifies the tag in `icv` (constant time, inside `aes-gcm`) and
    /// decrypts `data` in place; on failure `data` is unchanged.
    pub(crate) fn open(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8], icv: &[u8]) -> OpStatus {
        if icv.len() != 16 {
            return OpStatus::InvalidOp;
        }
        let n = aes_gcm::Nonce::from_slice(nonce);
        let tag = aes_gcm::Tag::from_slice(icv);
        let r = match self {
            AeadCtx::Aes128(c) => c.decrypt_in_place_detached(n, aad, data, tag),
            AeadCtx::Aes256(c) => c.decrypt_in_place_detached(n, aad, data, tag),
        };
        if r.is_ok() {
            OpStatus::Success
        } else {
            OpStatus::AuthFailed
        }
    }
}

/// The software device.
pub struct SoftDevice {
    nb_queue_pairs: u16,
    next_session: AtomicU64,
    set_up: Mutex<Vec<bool>>,
    /// Start/stop state per queue pair, shared with the queue pair.
    gates: Vec<Arc<QpGate>>,
}

impl SoftDevice {
    /// A device with `nb_queue_pairs` queue pairs (one per worker).
    pub fn new(nb_queue_pairs: u16) -> SoftDevice {
        SoftDevice {
            nb_queue_pairs,
            next_session: AtomicU64::new(1),
            set_up: Mutex::new(vec![false; nb_queue_pairs as usize]),
            gates: (0..nb_queue_pairs).map(|_| Arc::new(QpGate::default())).collect(),
        }
    }

    fn gate(&self, qp_id: u16) -> Result<&QpGate, CryptoError> {
        self.gates.get(qp_id as usize).map(|g| &**g).ok_or(CryptoError::NoQueuePair { driver: DRIVER, qp_id, nb: self.nb_queue_pairs })
    }
}

/// A software queue pair: ops run at enqueue and wait in a bounded ring of
/// `QpConf::nb_descriptors` completions until dequeued.
pub struct SoftQueuePair<B> {
    done: VecDeque<CryptoOp<B>>,
    depth: usize,
    gate: Arc<QpGate>,
}

impl<B: AsMut<[u8]> + Send> QueuePair<B> for SoftQueuePair<B> {
    fn enqueue_burst(&mut self, ops: &mut Vec<CryptoOp<B>>) -> usize {
        let Some(_burst) = self.gate.enter() else {
            return 0; // stopped: the ops stay with the caller
        };
        let n = ops.len().min(self.depth - self.done.len());
        for mut op in ops.drain(..n) {
            process_op(&mut op);
            self.done.push_back(op);
        }
        n
    }

    fn dequeue_burst(&mut self, out: &mut Vec<CryptoOp<B>>, max: usize) -> usize {
        let n = max.min(self.done.len());
        out.extend(self.done.drain(..n));
        n
    }

    fn inflight(&self) -> usize {
        self.done.len()
    }
}

impl CryptoDevice for SoftDevice {
    type Qp<B: AsMut<[u8]> + Send + 'static> = SoftQueuePair<B>;

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            driver: DRIVER,
            nb_queue_pairs: self.nb_queue_pairs,
            max_sessions_per_qp: 0,
            capabilities: gcm_capabilities(),
            flags: DeviceFlags { sync: true, hardware: false, attach_sessions: false },
        }
    }

    fn session_create(&self, xform: &SymXform) -> Result<Arc<Session>, CryptoError> {
        check_xform(DRIVER, &gcm_capabilities(), xform)?;
        Ok(Arc::new(new_session(self.next_session.fetch_add(1, Ordering::Relaxed), xform)))
    }

    /// Never fails: sessions are not attached to queue pairs here.
    fn session_free(&self, session: Arc<Session>) -> Result<(), CryptoError> {
        drop(session);
        Ok(())
    }

    fn queue_pair_stop(&self, qp_id: u16) -> Result<(), CryptoError> {
        self.gate(qp_id)?.stop();
        Ok(())
    }

    fn queue_pair_start(&self, qp_id: u16) -> Result<(), CryptoError> {
        self.gate(qp_id)?.start();
        Ok(())
    }

    fn queue_pair_setup<B: AsMut<[u8]> + Send + 'static>(&self, qp_id: u16, conf: QpConf) -> Result<SoftQueuePair<B>, CryptoError> {
        let mut set_up = self.set_up.lock().expect("soft device lock");
        let slot = set_up
            .get_mut(qp_id as usize)
            .ok_or(CryptoError::NoQueuePair { driver: DRIVER, qp_id, nb: self.nb_queue_pairs })?;
        if *slot {
            return Err(CryptoError::QueuePairInUse { driver: DRIVER, qp_id });
        }
        *slot = true;
        let depth = conf.nb_descriptors.max(1);
        Ok(SoftQueuePair { done: VecDeque::with_capacity(depth), depth, gate: self.gates[qp_id as usize].clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::CipherDirection;

    fn xform(dir: CipherDirection) -> SymXform {
        SymXform { algorithm: AeadAlgorithm::Aes128Gcm, direction: dir, key: vec![7; 16], salt: [1, 2, 3, 4], icv_len: 16 }
    }

    fn op(s: &Arc<Session>, buf: Vec<u8>) -> CryptoOp<Vec<u8>> {
        CryptoOp {
            session: s.clone(),
            buf,
            data_offset: 8,
            data_len: 32,
            icv_offset: 40,
            aad: [9; 16],
            aad_len: 8,
            iv: [5; 8],
            status: OpStatus::NotProcessed,
            user: [0; 2],
        }
    }

    #[test]
    fn seal_open_roundtrip_and_tamper() {
        let dev = SoftDevice::new(1);
        let enc = dev.session_create(&xform(CipherDirection::Encrypt)).unwrap();
        let dec = dev.session_create(&xform(CipherDirection::Decrypt)).unwrap();
        let mut qp: SoftQueuePair<Vec<u8>> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
        let plain: Vec<u8> = (0..56u8).collect();
        let mut ops = vec![op(&enc, plain.clone())];
        assert_eq!(qp.enqueue_burst(&mut ops), 1);
        let mut out = Vec::with_capacity(4);
        assert_eq!(qp.dequeue_burst(&mut out, 4), 1);
        let sealed = out.pop().unwrap();
        assert_eq!(sealed.status, OpStatus::Success);
        assert_ne!(&sealed.buf[8..40], &plain[8..40]);
        assert_eq!(&sealed.buf[..8], &plain[..8]);

        let mut bad = sealed.buf.clone();
        bad[41] ^= 1;
        let mut ops = vec![op(&dec, sealed.buf.clone()), op(&dec, bad)];
        assert_eq!(qp.enqueue_burst(&mut ops), 2);
        qp.dequeue_burst(&mut out, 4);
        assert_eq!(out[0].status, OpStatus::Success);
        assert_eq!(&out[0].buf[8..40], &plain[8..40]);
        assert_eq!(out[1].status, OpStatus::AuthFailed);
    }

    #[test]
    fn backpressure_and_bad_ranges() {
        let dev = SoftDevice::new(1);
        let enc = dev.session_create(&xform(CipherDirection::Encrypt)).unwrap();
        let mut qp: SoftQueuePair<Vec<u8>> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 2 }).unwrap();
        let mut ops: Vec<_> = (0..3).map(|_| op(&enc, vec![0; 56])).collect();
        assert_eq!(qp.enqueue_burst(&mut ops), 2);
        assert_eq!(ops.len(), 1, "the op not accepted stays with the caller");
        let mut out = Vec::new();
        qp.dequeue_burst(&mut out, 8);
        let mut short = vec![op(&enc, vec![0; 50])];
        qp.enqueue_burst(&mut short);
        out.clear();
        qp.dequeue_burst(&mut out, 8);
        assert_eq!(out[0].status, OpStatus::InvalidOp);
        assert!(dev.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: 2 }).is_err());
        assert!(dev.queue_pair_setup::<Vec<u8>>(1, QpConf { nb_descriptors: 2 }).is_err());
    }
}
