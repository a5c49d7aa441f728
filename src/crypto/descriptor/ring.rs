//! The rings of one queue pair: an input ring of job descriptors (worker →
//! engine) and an output ring of completions (engine → worker), both
//! bounded `crossbeam_queue::ArrayQueue`s of the queue pair's depth,
//! allocated once at setup. A job descriptor is the op itself (moved, never
//! copied to the heap) plus the reference to its session descriptor resolved
//! at enqueue.
//!
//! Neither ring can overflow: the worker accepts at most `depth` ops in
//! flight (enqueued and not dequeued), so each ring holds at most `depth`
//! entries, and each ring has a single producer that checks for room first.

use super::engine::EngineQueue;
use super::sessions::{SessionTable, SlotRef};
use crate::crypto::{process_op, CryptoOp, OpStatus};
use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A job descriptor: the op and, when its session was attached at enqueue,
/// the slot it was counted in on.
pub(super) struct Job<B> {
    pub(super) op: CryptoOp<B>,
    pub(super) at: Option<SlotRef>,
}

/// Counters written by the worker (one cache line).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct WorkerCounters {
    pub(super) enqueued: AtomicU64,
    pub(super) dequeued: AtomicU64,
    pub(super) rejected_full: AtomicU64,
    pub(super) rejected_stopped: AtomicU64,
}

/// Counters written by the engine (another cache line).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct EngineCounters {
    pub(super) completed: AtomicU64,
    pub(super) not_attached: AtomicU64,
    pub(super) device_errors: AtomicU64,
}

/// Both sets of counters of one queue pair, alive from device creation.
#[derive(Debug, Default)]
pub(super) struct QpCounters {
    pub(super) worker: WorkerCounters,
    pub(super) engine: EngineCounters,
}

/// Adds `n` to a counter that only one thread writes.
#[inline]
pub(super) fn bump(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

/// The two rings of one queue pair, with its session table and counters.
pub(super) struct QpRings<B> {
    pub(super) input: ArrayQueue<Job<B>>,
    pub(super) output: ArrayQueue<CryptoOp<B>>,
    pub(super) table: Arc<SessionTable>,
    pub(super) counters: Arc<QpCounters>,
}

impl<B> QpRings<B> {
    /// Rings of `depth` (>= 1) entries each.
    pub(super) fn new(depth: usize, table: Arc<SessionTable>, counters: Arc<QpCounters>) -> QpRings<B> {
        QpRings { input: ArrayQueue::new(depth), output: ArrayQueue::new(depth), table, counters }
    }
}

impl<B: AsMut<[u8]> + Send> EngineQueue for QpRings<B> {
    fn service(&self, max: usize) -> usize {
        let (mut n, mut not_attached, mut errors) = (0, 0, 0);
        // Room first: this engine is the output ring's only producer, so
        // room seen here is still there at the push.
        while n < max && !self.output.is_full() {
            let Some(Job { mut op, at }) = self.input.pop() else { break };
            match at {
                Some(at) if self.table.holds(at) => {
                    process_op(&mut op);
                    self.table.count_out(at);
                }
                Some(at) => {
                    op.status = OpStatus::DeviceError;
                    self.table.count_out(at);
                    errors += 1;
                }
                None => {
                    op.status = OpStatus::SessionNotAttached;
                    not_attached += 1;
                }
            }
            let pushed = self.output.push(op);
            debug_assert!(pushed.is_ok(), "output ring overflow despite the room check");
            n += 1;
        }
        let c = &self.counters.engine;
        bump(&c.completed, n);
        if not_attached > 0 {
            bump(&c.not_attached, not_attached);
        }
        if errors > 0 {
            bump(&c.device_errors, errors);
        }
        n
    }
}
