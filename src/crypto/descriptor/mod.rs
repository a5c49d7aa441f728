//! The descriptor crypto device: an emulated job-ring accelerator in the
//! style of NXP SEC/CAAM (DESIGN.md §3).
//!
//! * Per queue pair: an input ring of job descriptors and an output ring of
//!   completions, `QpConf::nb_descriptors` (<= `ring_depth`) entries each
//!   (`ring.rs`), and a table of at most `max_sessions_per_qp` session
//!   descriptors (`sessions.rs`).
//! * Engine threads (`engine.rs`), spawned by [`DescriptorDevice::new`] and joined when
//!   the device drops, take jobs, run the transform with the same software
//!   primitive as the soft device (`crypto::process_op`) and post
//!   completions in order, with their status. Queue pair `q` is served by
//!   engine `q % nb_engines`.
//! * An op whose session is not attached to the queue pair when it is
//!   enqueued completes `OpStatus::SessionNotAttached`, in order with the
//!   others, and is counted ([`QpStats::not_attached`]). Nothing attaches
//!   implicitly on the data path.
//! * Backpressure: `enqueue_burst` accepts at most `depth − inflight` ops;
//!   the rest stay with the caller (counted in [`QpStats::rejected_full`]).
//!   Never a loss.
//! * A detach (or setup-with-session) while jobs of the session are in
//!   flight fails with `Busy`: in flight means accepted by `enqueue_burst`
//!   and not yet run by the engine (a completion waiting to be dequeued no
//!   longer needs its session descriptor).
//!
//! Data path cost per op: one compare-and-swap (count in), one ring push,
//! one ring pop and one atomic decrement (count out) besides the transform;
//! per burst one `arc-swap` load, the start/stop gate and one unpark. No
//! lock, allocation or panic.
//!
//! Latency: a completion is visible to `dequeue_burst` as soon as the
//! engine has run the job; an idle engine first has to wake up (see
//! `engine.rs`: typically 5–50 µs after a quiet spell, none under load).

mod engine;
mod ring;
mod sessions;

use super::{
    create_session, soft_capabilities, CryptoDevice, CryptoError, CryptoOp, DeviceFlags, DeviceInfo, QpConf, QpGate, QueuePair,
    ProviderChoice, Session, SymXform,
};
use engine::Engines;
use ring::{bump, QpCounters, QpRings};
use sessions::SessionTable;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;

pub(crate) const DRIVER: &str = "crypto_descriptor";

/// Shape of a descriptor device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorConfig {
    /// Queue pairs (job rings), >= 1; one per worker.
    pub nb_queue_pairs: u16,
    /// Largest ring a queue pair may ask for (`QpConf::nb_descriptors`), in
    /// jobs, >= 1.
    pub ring_depth: usize,
    /// Session descriptors per queue pair, >= 1 (reported as
    /// `DeviceInfo::max_sessions_per_qp`).
    pub max_sessions_per_qp: u32,
    /// Engine threads, >= 1. More than `nb_queue_pairs` leaves some idle.
    pub nb_engines: usize,
}

impl Default for DescriptorConfig {
    /// One queue pair, 512-job rings, 64 sessions per queue pair, one engine.
    fn default() -> Self {
        DescriptorConfig { nb_queue_pairs: 1, ring_depth: 512, max_sessions_per_qp: 64, nb_engines: 1 }
    }
}

/// Counters of one queue pair (monotonic, in ops).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Ops accepted by `enqueue_burst`.
    pub enqueued: u64,
    /// Ops handed back by `dequeue_burst`.
    pub dequeued: u64,
    /// Jobs the engine has completed, whatever their status.
    pub completed: u64,
    /// Jobs completed `SessionNotAttached`.
    pub not_attached: u64,
    /// Ops refused because the ring was full (counted at each refusal: an
    /// op offered three times and refused three times counts 3).
    pub rejected_full: u64,
    /// Ops refused because the queue pair was stopped (same counting).
    pub rejected_stopped: u64,
    /// Jobs completed `DeviceError` (a broken session-table invariant; 0).
    pub device_errors: u64,
}

/// Control-side state of one queue pair, alive from device creation so
/// sessions can be attached and the queue pair stopped before setup.
struct QpCtl {
    gate: Arc<QpGate>,
    table: Arc<SessionTable>,
    counters: Arc<QpCounters>,
}

/// The emulated job-ring accelerator. `Send + Sync`: the control thread
/// shares it; each queue pair goes to one worker.
///
/// Dropping the device stops and joins its engines; jobs still in a queue
/// pair's input ring then never complete, so drain the queue pairs first
/// (`inflight() == 0`).
pub struct DescriptorDevice {
    cfg: DescriptorConfig,
    provider: ProviderChoice,
    next_session: AtomicU64,
    qps: Vec<QpCtl>,
    set_up: Mutex<Vec<bool>>,
    engines: Engines,
}

impl DescriptorDevice {
    /// Validates `cfg` and spawns the engines; provider `auto`. Errors:
    /// `InvalidConfig` (a zero count or depth), `DeviceStart` (a thread
    /// failed to spawn).
    pub fn new(cfg: DescriptorConfig) -> Result<DescriptorDevice, CryptoError> {
        DescriptorDevice::with_provider(cfg, ProviderChoice::Auto)
    }

    /// [`DescriptorDevice::new`] whose sessions use `provider` (`[crypto]
    /// provider`): the engines run that provider's transforms.
    pub fn with_provider(cfg: DescriptorConfig, provider: ProviderChoice) -> Result<DescriptorDevice, CryptoError> {
        let bad = |what: String| Err(CryptoError::InvalidConfig { driver: DRIVER, what });
        if cfg.nb_queue_pairs == 0 {
            return bad("nb_queue_pairs is 0".into());
        }
        if cfg.ring_depth == 0 {
            return bad("ring_depth is 0".into());
        }
        if cfg.max_sessions_per_qp == 0 {
            return bad("max_sessions_per_qp is 0 (this device always has a limit)".into());
        }
        if cfg.nb_engines == 0 {
            return bad("nb_engines is 0".into());
        }
        let qps = (0..cfg.nb_queue_pairs)
            .map(|q| QpCtl {
                gate: Arc::new(QpGate::default()),
                table: Arc::new(SessionTable::new(q, cfg.max_sessions_per_qp)),
                counters: Arc::new(QpCounters::default()),
            })
            .collect();
        Ok(DescriptorDevice {
            cfg,
            provider,
            next_session: AtomicU64::new(1),
            qps,
            set_up: Mutex::new(vec![false; cfg.nb_queue_pairs as usize]),
            engines: Engines::spawn(cfg.nb_engines)?,
        })
    }

    /// The configuration the device was built with.
    pub fn config(&self) -> DescriptorConfig {
        self.cfg
    }

    fn qp(&self, qp_id: u16) -> Result<&QpCtl, CryptoError> {
        self.qps.get(qp_id as usize).ok_or(CryptoError::NoQueuePair { driver: DRIVER, qp_id, nb: self.cfg.nb_queue_pairs })
    }

    /// Counters of queue pair `qp_id` (set up or not). Errors: `NoQueuePair`.
    pub fn qp_stats(&self, qp_id: u16) -> Result<QpStats, CryptoError> {
        let c = &self.qp(qp_id)?.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Ok(QpStats {
            enqueued: r(&c.worker.enqueued),
            dequeued: r(&c.worker.dequeued),
            completed: r(&c.engine.completed),
            not_attached: r(&c.engine.not_attached),
            rejected_full: r(&c.worker.rejected_full),
            rejected_stopped: r(&c.worker.rejected_stopped),
            device_errors: r(&c.engine.device_errors),
        })
    }

    /// Sessions attached to queue pair `qp_id`. Errors: `NoQueuePair`.
    pub fn qp_sessions(&self, qp_id: u16) -> Result<usize, CryptoError> {
        Ok(self.qp(qp_id)?.table.len())
    }

    /// Ids ([`Session::id`]) of the sessions attached to queue pair `qp_id`,
    /// in attach order. Control path (allocates).
    pub fn qp_session_ids(&self, qp_id: u16) -> Result<Vec<u64>, CryptoError> {
        Ok(self.qp(qp_id)?.table.ids())
    }

    /// Test and fault-injection hook (an accelerator that stalls): returns
    /// once every engine has stopped taking jobs. Enqueue keeps accepting
    /// until the rings are full; jobs stay in flight until
    /// [`DescriptorDevice::engines_resume`].
    pub fn engines_hold(&self) {
        self.engines.hold();
    }

    /// Lets the engines take jobs again after `engines_hold`.
    pub fn engines_resume(&self) {
        self.engines.resume();
    }
}

/// A descriptor queue pair: the worker's end of the two rings. `Send`; owned
/// by one worker.
pub struct DescriptorQueuePair<B> {
    rings: Arc<QpRings<B>>,
    gate: Arc<QpGate>,
    engine: Thread,
    depth: usize,
    /// Enqueued and not yet dequeued (only this worker changes it).
    inflight: usize,
}

impl<B: AsMut<[u8]> + Send> QueuePair<B> for DescriptorQueuePair<B> {
    /// Accepts up to `depth − inflight()` ops from the front of `ops`, 0 when
    /// the queue pair is stopped. Each op's session is resolved against the
    /// queue pair's attached sessions here; an unattached one is still
    /// accepted and completes `SessionNotAttached` in order.
    fn enqueue_burst(&mut self, ops: &mut Vec<CryptoOp<B>>) -> usize {
        let w = &self.rings.counters.worker;
        let Some(_burst) = self.gate.enter() else {
            bump(&w.rejected_stopped, ops.len());
            return 0;
        };
        let n = ops.len().min(self.depth - self.inflight);
        if n < ops.len() {
            bump(&w.rejected_full, ops.len() - n);
        }
        if n == 0 {
            return 0;
        }
        let table = &self.rings.table;
        let snap = table.snapshot();
        for op in ops.drain(..n) {
            let at = table.count_in(&snap, &op.session);
            // Cannot fail: this worker is the input ring's only producer and
            // the ring holds at most `inflight` < `depth` jobs.
            let pushed = self.rings.input.push(ring::Job { op, at });
            debug_assert!(pushed.is_ok(), "input ring overflow despite the inflight bound");
        }
        self.inflight += n;
        bump(&w.enqueued, n);
        self.engine.unpark();
        n
    }

    /// Moves up to `max` completions, in enqueue order, to the end of `out`
    /// (reserve capacity in `out` to avoid allocating).
    fn dequeue_burst(&mut self, out: &mut Vec<CryptoOp<B>>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(op) = self.rings.output.pop() else { break };
            out.push(op);
            n += 1;
        }
        self.inflight -= n;
        bump(&self.rings.counters.worker.dequeued, n);
        n
    }

    fn inflight(&self) -> usize {
        self.inflight
    }
}

impl CryptoDevice for DescriptorDevice {
    type Qp<B: AsMut<[u8]> + Send + 'static> = DescriptorQueuePair<B>;

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            driver: DRIVER,
            nb_queue_pairs: self.cfg.nb_queue_pairs,
            max_sessions_per_qp: self.cfg.max_sessions_per_qp,
            provider: self.provider,
            capabilities: soft_capabilities(self.provider),
            flags: DeviceFlags { sync: false, hardware: true, attach_sessions: true },
        }
    }

    fn session_create(&self, xform: &SymXform) -> Result<Arc<Session>, CryptoError> {
        create_session(DRIVER, self.provider, self.next_session.fetch_add(1, Ordering::Relaxed), xform)
    }

    fn session_free(&self, session: Arc<Session>) -> Result<(), CryptoError> {
        if let Some(q) = self.qps.iter().position(|q| q.table.contains(&session)) {
            return Err(CryptoError::SessionInUse { driver: DRIVER, session_id: session.id(), qp_id: q as u16 });
        }
        drop(session);
        Ok(())
    }

    /// Errors besides the trait's: `InvalidConfig` when
    /// `conf.nb_descriptors` is 0 or above `ring_depth`.
    fn queue_pair_setup<B: AsMut<[u8]> + Send + 'static>(&self, qp_id: u16, conf: QpConf) -> Result<DescriptorQueuePair<B>, CryptoError> {
        let ctl = self.qp(qp_id)?;
        let depth = conf.nb_descriptors;
        if depth == 0 || depth > self.cfg.ring_depth {
            return Err(CryptoError::InvalidConfig {
                driver: DRIVER,
                what: format!("queue pair {qp_id}: nb_descriptors {depth} not in 1..={}", self.cfg.ring_depth),
            });
        }
        let mut set_up = self.set_up.lock().unwrap_or_else(|p| p.into_inner());
        if set_up[qp_id as usize] {
            return Err(CryptoError::QueuePairInUse { driver: DRIVER, qp_id });
        }
        set_up[qp_id as usize] = true;
        let rings = Arc::new(QpRings::new(depth, ctl.table.clone(), ctl.counters.clone()));
        let e = qp_id as usize % self.engines.len();
        self.engines.register(e, rings.clone());
        Ok(DescriptorQueuePair { rings, gate: ctl.gate.clone(), engine: self.engines.waker(e), depth, inflight: 0 })
    }

    fn queue_pair_stop(&self, qp_id: u16) -> Result<(), CryptoError> {
        self.qp(qp_id)?.gate.stop();
        Ok(())
    }

    fn queue_pair_start(&self, qp_id: u16) -> Result<(), CryptoError> {
        self.qp(qp_id)?.gate.start();
        Ok(())
    }

    fn queue_pair_attach_session(&self, qp_id: u16, session: &Arc<Session>) -> Result<(), CryptoError> {
        self.qp(qp_id)?.table.attach(session)
    }

    fn queue_pair_detach_session(&self, qp_id: u16, session: &Arc<Session>) -> Result<(), CryptoError> {
        self.qp(qp_id)?.table.detach(session)
    }

    fn queue_pair_setup_session(&self, qp_id: u16, session: &Arc<Session>) -> Result<(), CryptoError> {
        let ctl = self.qp(qp_id)?;
        if !ctl.gate.is_stopped() {
            return Err(CryptoError::NotStopped { driver: DRIVER, qp_id });
        }
        ctl.table.replace_all(session)
    }
}
