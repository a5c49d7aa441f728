//! The start/stop gate of one queue pair, shared by the worker that owns the
//! queue pair (one `enter` per `enqueue_burst` or `process_sync`) and the control thread
//! (`stop`/`start`). Lock-free on the worker side: one atomic increment on
//! entry, one load, one increment on exit, per burst.
//!
//! Contract: when [`QpGate::stop`] returns, no burst that saw the queue pair
//! started is still running, and every later [`QpGate::enter`] fails until
//! [`QpGate::start`]. So "accepted before stop" is well defined: the control
//! thread can count on the set of accepted ops being closed when it goes on
//! (e.g. to wait for them to drain and replace the session).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Stop flag plus a burst epoch (odd while a burst is inside).
#[derive(Debug, Default)]
pub(crate) struct QpGate {
    stopped: AtomicBool,
    epoch: AtomicU64,
}

/// Held by the worker for the duration of one accepted burst.
pub(crate) struct GateGuard<'a>(&'a QpGate);

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        // Release: the control thread that waits for this epoch to move sees
        // everything the burst did (inflight counts, ring pushes).
        self.0.epoch.fetch_add(1, Ordering::Release);
    }
}

impl QpGate {
    /// Worker: enters a burst; `None` when the queue pair is stopped.
    ///
    /// Dekker pairing with `stop`: both sides write then read with SeqCst, so
    /// either this load sees `stopped` or `stop` sees the odd epoch and waits.
    #[inline]
    pub(crate) fn enter(&self) -> Option<GateGuard<'_>> {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        let guard = GateGuard(self);
        if self.stopped.load(Ordering::SeqCst) {
            return None; // guard drops here: epoch even again
        }
        Some(guard)
    }

    /// Control: stops new bursts and waits for the one in progress, if any.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let e = self.epoch.load(Ordering::SeqCst);
        if e & 1 == 0 {
            return;
        }
        // A burst is inside; it is short and never blocks.
        let mut spins = 0u32;
        while self.epoch.load(Ordering::Acquire) == e {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if spins < 128 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(10));
            }
        }
    }

    /// Control: lets bursts in again.
    pub(crate) fn start(&self) {
        self.stopped.store(false, Ordering::SeqCst);
    }

    /// Whether the queue pair is stopped.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_closes_and_start_reopens() {
        let g = QpGate::default();
        assert!(g.enter().is_some());
        g.stop();
        assert!(g.is_stopped());
        assert!(g.enter().is_none());
        g.start();
        assert!(g.enter().is_some());
    }

    #[test]
    fn stop_waits_for_the_burst_inside() {
        use std::sync::Arc;
        let g = Arc::new(QpGate::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let left = Arc::new(AtomicBool::new(false));
        let worker = {
            let (g, left) = (g.clone(), left.clone());
            std::thread::spawn(move || {
                let guard = g.enter().unwrap();
                tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                left.store(true, Ordering::SeqCst);
                drop(guard);
            })
        };
        rx.recv().unwrap();
        g.stop();
        assert!(left.load(Ordering::SeqCst), "stop returned while a burst was inside");
        worker.join().unwrap();
    }
}
