//! The data plane: the worker loop (burst in → classify → ESP prepare →
//! crypto enqueue/dequeue → ESP finish → route → burst out) and its counters.
//!
//! A worker is generic over its port type and its queue pair type, so the
//! inner loop has no dynamic dispatch. It owns the mutable state of its SAs
//! (sequence numbers, replay windows) and never blocks, allocates or locks
//! in the burst path.

pub mod counters;
pub mod reassembly;
pub mod worker;

pub use counters::{DropReason, WorkerCounters};
pub use worker::Worker;
