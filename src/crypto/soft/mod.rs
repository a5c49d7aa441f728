//! The software crypto device: synchronous, in the worker, on RustCrypto
//! primitives (`transform.rs`: AES-GCM/GMAC from `aes` + `ctr` + `ghash`,
//! ChaCha20-Poly1305, AES-CBC/CTR/NULL with HMAC-SHA1/SHA-256) or, per the
//! device's [`ProviderChoice`], ring's AES-128/256-GCM and ChaCha20-Poly1305
//! (`ring_aead.rs`). Unlimited
//! sessions per queue pair; no attach needed
//! (`DeviceInfo::max_sessions_per_qp` 0, `flags.attach_sessions` false: the
//! attach calls return `AttachNotSupported`). Queue pairs can be stopped and
//! started like the descriptor device's; ops complete at enqueue, so a stop
//! never leaves work in flight beyond the completions not yet dequeued.
//! A burst can also run where it lies (`QueuePair::process_sync`, the path
//! the worker takes first), without going through the ring at all.

mod ccm;
mod cipher_mac;
mod gcm;
mod ring_aead;
mod transform;

pub(crate) use transform::{OpArgs, Transform};

use super::{
    create_session, process_op, soft_capabilities, CryptoDevice, CryptoError, CryptoOp, DeviceFlags, DeviceInfo, QpConf,
    ProviderChoice, QpGate, QueuePair, Session, SymXform,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const DRIVER: &str = "crypto_soft";

/// The software device.
pub struct SoftDevice {
    nb_queue_pairs: u16,
    provider: ProviderChoice,
    next_session: AtomicU64,
    set_up: Mutex<Vec<bool>>,
    /// Start/stop state per queue pair, shared with the queue pair.
    gates: Vec<Arc<QpGate>>,
}

impl SoftDevice {
    /// A device with `nb_queue_pairs` queue pairs (one per worker) and
    /// provider `auto`.
    pub fn new(nb_queue_pairs: u16) -> SoftDevice {
        SoftDevice::with_provider(nb_queue_pairs, ProviderChoice::Auto)
    }

    /// A device with `nb_queue_pairs` queue pairs whose sessions use
    /// `provider` (`[crypto] provider`).
    pub fn with_provider(nb_queue_pairs: u16, provider: ProviderChoice) -> SoftDevice {
        SoftDevice {
            nb_queue_pairs,
            provider,
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
/// `QpConf::nb_descriptors` completions until dequeued, or run where they
/// lie with `process_sync` (the worker's path; the ring then holds nothing). The ops of a burst
/// run where the caller put them and move to the completions (and on to
/// the caller's dequeue vector) as one block copy each way, not one by
/// one (the usual case: everything enqueued is dequeued in the same poll).
pub struct SoftQueuePair<B> {
    done: Vec<CryptoOp<B>>,
    depth: usize,
    gate: Arc<QpGate>,
}

impl<B: AsMut<[u8]> + Send> QueuePair<B> for SoftQueuePair<B> {
    fn enqueue_burst(&mut self, ops: &mut Vec<CryptoOp<B>>) -> usize {
        let Some(_burst) = self.gate.enter() else {
            return 0; // stopped: the ops stay with the caller
        };
        let n = ops.len().min(self.depth - self.done.len());
        for op in &mut ops[..n] {
            process_op(op);
        }
        if n == ops.len() {
            self.done.append(ops);
        } else {
            self.done.extend(ops.drain(..n));
        }
        n
    }

    fn dequeue_burst(&mut self, out: &mut Vec<CryptoOp<B>>, max: usize) -> usize {
        let n = max.min(self.done.len());
        if n == self.done.len() {
            out.append(&mut self.done);
        } else {
            out.extend(self.done.drain(..n));
        }
        n
    }

    fn inflight(&self) -> usize {
        self.done.len()
    }

    /// Runs `ops` in place when no completion waits to be dequeued and the
    /// queue pair is started (see the trait).
    fn process_sync(&mut self, ops: &mut [CryptoOp<B>]) -> bool {
        if !self.done.is_empty() {
            return false;
        }
        let Some(_burst) = self.gate.enter() else {
            return false;
        };
        for op in ops {
            process_op(op);
        }
        true
    }
}

impl CryptoDevice for SoftDevice {
    type Qp<B: AsMut<[u8]> + Send + 'static> = SoftQueuePair<B>;

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            driver: DRIVER,
            nb_queue_pairs: self.nb_queue_pairs,
            max_sessions_per_qp: 0,
            provider: self.provider,
            capabilities: soft_capabilities(self.provider),
            flags: DeviceFlags { sync: true, hardware: false, attach_sessions: false },
        }
    }

    fn session_create(&self, xform: &SymXform) -> Result<Arc<Session>, CryptoError> {
        create_session(DRIVER, self.provider, self.next_session.fetch_add(1, Ordering::Relaxed), xform)
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
        Ok(SoftQueuePair { done: Vec::with_capacity(depth), depth, gate: self.gates[qp_id as usize].clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Algorithm, CipherDirection, OpStatus};

    fn xform(dir: CipherDirection) -> SymXform {
        SymXform { algorithm: Algorithm::Aes128Gcm, direction: dir, key: vec![7; 16], salt: [1, 2, 3, 4], icv_len: 16, auth_key: Vec::new() }
    }

    fn op(s: &Arc<Session>, buf: Vec<u8>) -> CryptoOp<Vec<u8>> {
        let mut op = CryptoOp::new(s.clone(), buf);
        op.data_offset = 8;
        op.data_len = 32;
        op.icv_offset = 40;
        op.aad = [9; 16];
        op.aad_len = 8;
        op.iv[..8].copy_from_slice(&[5; 8]);
        op
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

    /// The synchronous path gives each op the bytes and status the ring
    /// path gives it, and declines (ops untouched) while completions wait
    /// or the queue pair is stopped.
    #[test]
    fn process_sync_matches_the_ring_and_declines_when_it_must() {
        let dev = SoftDevice::new(1);
        let enc = dev.session_create(&xform(CipherDirection::Encrypt)).unwrap();
        let dec = dev.session_create(&xform(CipherDirection::Decrypt)).unwrap();
        let mut qp: SoftQueuePair<Vec<u8>> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 2 }).unwrap();
        let plain: Vec<u8> = (0..56u8).collect();
        // Three ops on a ring of two: the synchronous path is not bound by it.
        let mut sync: Vec<_> = (0..3).map(|_| op(&enc, plain.clone())).collect();
        sync.push(op(&enc, vec![0; 50])); // ICV past the end
        assert!(qp.process_sync(&mut sync));
        assert_eq!(qp.inflight(), 0);
        let mut ring = vec![op(&enc, plain.clone()), op(&enc, vec![0; 50])];
        assert_eq!(qp.enqueue_burst(&mut ring), 2);
        let mut out = Vec::new();
        qp.dequeue_burst(&mut out, 8);
        for s in &sync[..3] {
            assert_eq!(s.status, OpStatus::Success);
            assert_eq!(s.buf, out[0].buf);
        }
        assert_ne!(&sync[0].buf[8..40], &plain[8..40]);
        assert_eq!(sync[3].status, OpStatus::InvalidOp);
        assert_eq!(out[1].status, OpStatus::InvalidOp);
        // Opens what it sealed, and finds a flipped ICV bit.
        let mut bad = sync[1].buf.clone();
        bad[41] ^= 1;
        let mut open = vec![op(&dec, sync[0].buf.clone()), op(&dec, bad)];
        assert!(qp.process_sync(&mut open));
        assert_eq!(open[0].status, OpStatus::Success);
        assert_eq!(&open[0].buf[8..40], &plain[8..40]);
        assert_eq!(open[1].status, OpStatus::AuthFailed);

        // A completion waiting: declines, so completions keep their order.
        let mut one = vec![op(&enc, plain.clone())];
        assert_eq!(qp.enqueue_burst(&mut one), 1);
        let mut held = vec![op(&enc, plain.clone())];
        assert!(!qp.process_sync(&mut held));
        assert_eq!(held[0].status, OpStatus::NotProcessed);
        assert_eq!(held[0].buf, plain);
        out.clear();
        qp.dequeue_burst(&mut out, 8);
        // Stopped: declines.
        dev.queue_pair_stop(0).unwrap();
        assert!(!qp.process_sync(&mut held));
        assert_eq!(held[0].status, OpStatus::NotProcessed);
        dev.queue_pair_start(0).unwrap();
        assert!(qp.process_sync(&mut held));
        assert_eq!(held[0].status, OpStatus::Success);
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
