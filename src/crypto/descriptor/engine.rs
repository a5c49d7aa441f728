//! The engines: one thread each, spawned with the device and stopped and
//! joined when it drops. Each queue pair is served by exactly one engine
//! (`qp_id % nb_engines`), so its jobs complete in enqueue order.
//!
//! The device is not generic, its queue pairs are (over the buffer type
//! `B`, known only at `queue_pair_setup`). An engine therefore serves a list
//! of type-erased [`EngineQueue`]s registered at setup: one dynamic call per
//! queue pair per service pass, never per op, and no allocation per op.
//!
//! Idling: after a pass that found no job the engine keeps polling with a
//! spin hint for `IDLE_SPIN` (50 µs), then parks. Every
//! `enqueue_burst` that accepted ops unparks its engine (one atomic swap
//! when the engine is awake; a futex wake when it sleeps). Latency this
//! adds: none while jobs keep coming; after an idle spell, the wake-up of a
//! parked thread (measured here: about 30 µs on a loaded 2-core VM; longer
//! if the core is busy with other threads, up to a scheduler slice). On an
//! idle machine a burst of one 64-byte op makes the round trip worker →
//! engine → worker in about 0.5 µs. `PARK_TIMEOUT` only bounds a missed
//! wake-up; an idle device costs one wake-up per engine per millisecond.

use crate::crypto::CryptoError;
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use super::DRIVER;

/// Jobs one queue pair may run in one service pass before the engine moves
/// to its next queue pair (fairness between queue pairs of one engine).
const SERVICE_BURST: usize = 32;
/// How long an engine keeps polling after its last job before it parks.
const IDLE_SPIN: Duration = Duration::from_micros(50);
/// Empty passes between two reads of the clock while spinning.
const CLOCK_EVERY: u32 = 32;
/// Longest park; the wake-up normally comes from `enqueue_burst`.
const PARK_TIMEOUT: Duration = Duration::from_millis(1);

/// A queue pair as an engine sees it: whatever its buffer type.
pub(super) trait EngineQueue: Send + Sync {
    /// Takes up to `max` jobs from the input ring, runs them and posts their
    /// completions in order to the output ring; returns how many.
    fn service(&self, max: usize) -> usize;
}

/// State shared between the device (control thread) and one engine.
struct EngineShared {
    queues: ArcSwap<Vec<Arc<dyn EngineQueue>>>,
    shutdown: AtomicBool,
    /// Control asks the engine to hold (test and fault-injection hook).
    hold: AtomicBool,
    /// The engine says it holds: no service pass runs until `hold` clears.
    held: AtomicBool,
}

/// The device's engines.
pub(super) struct Engines {
    shared: Vec<Arc<EngineShared>>,
    threads: Vec<JoinHandle<()>>,
}

impl Engines {
    /// Spawns `n` engine threads named `secgw-desc-eng{i}`.
    pub(super) fn spawn(n: usize) -> Result<Engines, CryptoError> {
        let mut e = Engines { shared: Vec::with_capacity(n), threads: Vec::with_capacity(n) };
        for i in 0..n {
            let sh = Arc::new(EngineShared {
                queues: ArcSwap::from_pointee(Vec::new()),
                shutdown: AtomicBool::new(false),
                hold: AtomicBool::new(false),
                held: AtomicBool::new(false),
            });
            let run = sh.clone();
            // On error, `e` drops here and joins the engines already spawned.
            let t = std::thread::Builder::new()
                .name(format!("secgw-desc-eng{i}"))
                .spawn(move || engine_loop(&run))
                .map_err(|err| CryptoError::DeviceStart { driver: DRIVER, reason: format!("engine {i}: {err}") })?;
            e.shared.push(sh);
            e.threads.push(t);
        }
        Ok(e)
    }

    /// Number of engines.
    pub(super) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Adds a queue pair to engine `i`'s list (control thread).
    pub(super) fn register(&self, i: usize, q: Arc<dyn EngineQueue>) {
        self.shared[i].queues.rcu(|v| {
            let mut v: Vec<_> = v.iter().cloned().collect();
            v.push(q.clone());
            v
        });
        self.threads[i].thread().unpark();
    }

    /// Engine `i`'s thread, to unpark it when jobs arrive.
    pub(super) fn waker(&self, i: usize) -> Thread {
        self.threads[i].thread().clone()
    }

    /// Makes every engine hold and returns once each one has acknowledged:
    /// from then on no job is taken from any input ring until `resume`.
    pub(super) fn hold(&self) {
        for (sh, t) in self.shared.iter().zip(&self.threads) {
            sh.hold.store(true, Ordering::SeqCst);
            t.thread().unpark();
        }
        for sh in &self.shared {
            while !sh.held.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    /// Lets every engine run again.
    pub(super) fn resume(&self) {
        for (sh, t) in self.shared.iter().zip(&self.threads) {
            sh.hold.store(false, Ordering::SeqCst);
            t.thread().unpark();
        }
    }
}

impl Drop for Engines {
    fn drop(&mut self) {
        for (sh, t) in self.shared.iter().zip(&self.threads) {
            sh.shutdown.store(true, Ordering::Release);
            t.thread().unpark();
        }
        for t in self.threads.drain(..) {
            // An engine that panicked has nothing left to clean up.
            let _ = t.join();
        }
    }
}

fn engine_loop(sh: &EngineShared) {
    let mut idle = 0u32;
    let mut idle_since = Instant::now();
    let mut held = false; // what this thread last wrote to `sh.held`
    while !sh.shutdown.load(Ordering::Acquire) {
        // Hold handshake: `held` is cleared before `hold` is read, so once
        // the control thread has seen `held` set, this loop has finished any
        // pass it was in and takes no job until `hold` clears.
        if held {
            sh.held.store(false, Ordering::SeqCst);
            held = false;
        }
        if sh.hold.load(Ordering::SeqCst) {
            sh.held.store(true, Ordering::SeqCst);
            held = true;
            std::thread::park_timeout(PARK_TIMEOUT);
            continue;
        }
        let mut done = 0;
        for q in sh.queues.load().iter() {
            done += q.service(SERVICE_BURST);
        }
        if done > 0 {
            idle = 0;
            continue;
        }
        if idle == 0 {
            idle_since = Instant::now();
        }
        idle = idle.wrapping_add(1);
        if !idle.is_multiple_of(CLOCK_EVERY) || idle_since.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::park_timeout(PARK_TIMEOUT);
        }
    }
}
