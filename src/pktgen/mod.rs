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
//! that are not ours are counted, never trusted (`wire` views only).
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

/// Packets per tx/rx burst (and the largest burst the token bucket releases).
pub const BURST: usize = 32;

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
