//! `secgw-pktgen`: an AF_XDP traffic generator, sink and plain forwarder
//! for throughput and latency measurements on the testbed (issue 7).
//!
//! - [`gen`]: builds UDP packets carrying a [`payload::Payload`] (flow,
//!   per-flow sequence number, `CLOCK_MONOTONIC` transmit timestamp) into
//!   reusable buffers, optionally encapsulates each with an outbound SA of a
//!   secgw config exactly as a peer gateway would ([`sa`]), paces them with a
//!   token bucket ([`pace`]) and sends them in bursts on one or more ports.
//! - [`sink`]: receives, optionally decrypts ESP with the inbound SAs of a
//!   config, and counts per flow: packets, bytes, loss, reordering,
//!   duplicates ([`flows`]) and one-way latency ([`hist`]).
//! - [`forward`]: a minimal L2 forwarder (MAC rewrite only), the I/O
//!   ceiling the gateway is compared with.
//! - [`report`]: one line out of a generator's and a sink's JSON reports.
//! - [`ports`]: opening the AF_XDP ports (busy binds retried), link checks.
//!
//! Contracts: nothing per packet allocates, locks or panics on input;
//! buffers, per-flow state and histograms are allocated at start-up. Frames
//! that are not ours are counted, never trusted (`wire` views only). Every
//! loop, sleep and wait looks at its stop flag (SIGINT/SIGTERM) at least
//! every [`STOP_POLL`]; the command line's numbers are bounded by the
//! constants below ([`DURATION_S`], [`MAX_FLOWS`], …), so no value makes
//! a run sleep for ages, allocate without bound or do nothing.
//!
//! The clock is [`now_ns`], `CLOCK_MONOTONIC` in nanoseconds: one clock for
//! every network namespace of the host (Linux time namespaces aside), so a
//! generator and a sink in separate processes and namespaces compare
//! timestamps directly.

pub mod build;
pub mod flows;
pub mod forward;
pub mod gen;
pub mod hist;
pub mod pace;
pub mod payload;
pub mod ports;
pub mod report;
pub mod sa;
pub mod sink;

use crate::io::af_xdp::AfXdpPort;
use crate::io::mem::MemPort;
use crate::io::Port;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Packets per tx/rx burst (and the largest burst the token bucket releases).
pub const BURST: usize = 32;

/// `--duration` of `gen`, `sink` and `forward`, in seconds: 1 ms (a
/// shorter run sends or hears nothing) to 7 days (604800 s).
pub const DURATION_S: RangeInclusive<f64> = 0.001..=604_800.0;
/// `gen --warmup`, in seconds: 0 (none) to 1 hour.
pub const WARMUP_S: RangeInclusive<f64> = 0.0..=3600.0;
/// `sink --gen-json-wait`, in seconds: 0 (look once) to 1 hour.
pub const GEN_JSON_WAIT_S: RangeInclusive<f64> = 0.0..=3600.0;
/// Largest `--idle-sleep-us` of `sink` and `forward`, in µs (10 ms, as the
/// gateway's `gateway.idle_sleep_us`).
pub const IDLE_SLEEP_US_MAX: u64 = 10_000;
/// Largest `sink --grace-ms`, in ms (1 minute).
pub const GRACE_MS_MAX: u64 = 60_000;
/// Largest `gen --flows` and `sink --max-flows`: one flow per UDP source
/// port (flow *i* is sent from `--sport` + *i*, at most 65535). The sink
/// allocates about 10 KB of state per tracked flow (a latency histogram
/// of [`hist::BUCKETS`] counters): 1024 flows ≈ 10 MB, 65536 ≈ 640 MB.
pub const MAX_FLOWS: u32 = 65_536;
/// Largest `--queues` (AF_XDP sockets per interface, all driven by one
/// thread; each has its own UMEM of twice `--ring-size` 4-KiB frames).
pub const MAX_QUEUES: u32 = 256;
/// Longest a loop or wait of the generator, sink or forwarder goes without
/// looking at its stop flag (set by SIGINT/SIGTERM): 10 ms.
pub const STOP_POLL: Duration = Duration::from_millis(10);

/// Sleeps `d` in slices of at most [`STOP_POLL`], returning early once
/// `stop` is set. Returns false when it was stopped (then it slept less
/// than `d`, maybe not at all), true when it slept all of `d`.
pub fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> bool {
    let Some(end) = Instant::now().checked_add(d) else {
        // Longer than the clock can count: sleep until stopped.
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(STOP_POLL);
        }
        return false;
    };
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(STOP_POLL));
    }
}

/// Tests' stop: runs `f` with a stop flag another thread sets `after` it
/// starts; `f`'s result and how long it took.
#[cfg(test)]
pub(crate) fn stopped_after<R>(after: Duration, f: impl FnOnce(&AtomicBool) -> R) -> (R, Duration) {
    let stop = AtomicBool::new(false);
    let t = Instant::now();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(after);
            stop.store(true, Ordering::Relaxed);
        });
        f(&stop)
    });
    (r, t.elapsed())
}

/// `d` in nanoseconds, [`u64::MAX`] (about 584 years) if longer.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `CLOCK_MONOTONIC` now, in nanoseconds since an unspecified start (boot).
/// Never fails on Linux; 0 if the kernel refused (then latencies read 0).
#[inline]
pub fn now_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64).wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec() as u64),
        Err(_) => 0,
    }
}

/// Wall-clock now in seconds since the Unix epoch (0.0 if the clock is
/// before it). Read at the start and end of a run only, so that `report`
/// can tell whether a generator's and a sink's reports overlap in time.
pub fn unix_now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Errors of setting up a generator, sink or forwarder (never per packet).
#[derive(Debug, thiserror::Error)]
pub enum PktgenError {
    /// A command-line value out of range or inconsistent (the message says which).
    #[error("{0}")]
    Invalid(String),
    /// The ESP config could not be read or has no usable SA.
    #[error("ESP config: {0}")]
    Config(String),
    /// Port setup failed.
    #[error(transparent)]
    Io(#[from] crate::io::IoError),
}

/// A port that tells how many frames it can take for transmit right now, so
/// a sender never hands it more than that (AF_XDP: free UMEM tx frames).
pub trait TxRoom: Port {
    /// Frames `tx_burst` would take now (after a [`Port::poll`]).
    fn tx_room(&self) -> usize;
}

impl TxRoom for AfXdpPort {
    fn tx_room(&self) -> usize {
        self.tx_free_frames()
    }
}

impl TxRoom for MemPort {
    /// Unbounded (an in-memory port never refuses).
    fn tx_room(&self) -> usize {
        usize::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_sleep_ends_within_a_stop_poll_of_the_stop() {
        let stop = AtomicBool::new(false);
        let t = Instant::now();
        assert!(sleep_unless_stopped(Duration::from_millis(25), &stop), "slept it all");
        assert!(t.elapsed() >= Duration::from_millis(25));
        // An hour, or more than the clock can count, stopped after 30 ms:
        // over within a few STOP_POLLs of the stop, not after the hour.
        for d in [Duration::from_secs(3600), Duration::MAX] {
            let (slept, took) = stopped_after(Duration::from_millis(30), |stop| sleep_unless_stopped(d, stop));
            assert!(!slept);
            assert!(took < Duration::from_millis(30) + 20 * STOP_POLL, "{took:?}");
        }
        // Already stopped: no sleep at all.
        stop.store(true, Ordering::Relaxed);
        let t = Instant::now();
        assert!(!sleep_unless_stopped(Duration::from_secs(3600), &stop));
        assert!(t.elapsed() < STOP_POLL);
        assert_eq!((nanos(Duration::from_millis(3)), nanos(Duration::MAX)), (3_000_000, u64::MAX));
    }
}
