//! In-memory ports for tests: a [`MemPort`] is driven by a worker like any
//! other port, and a [`MemWire`] handle lets a test inject frames into it and
//! collect what it transmitted. It allocates per frame, so it is for tests and
//! benches of the pipeline, not for traffic.

use super::{PktBuf, Port, PortStats};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Queues {
    to_port: VecDeque<Vec<u8>>,
    from_port: VecDeque<Vec<u8>>,
}

/// The test's end of an in-memory port.
#[derive(Clone, Default)]
pub struct MemWire(Arc<Mutex<Queues>>);

/// The gateway's end of an in-memory port.
pub struct MemPort {
    id: u16,
    wire: MemWire,
    stats: PortStats,
}

/// Creates a port with id `id` and the handle that feeds and drains it.
pub fn pair(id: u16) -> (MemPort, MemWire) {
    let wire = MemWire::default();
    (MemPort { id, wire: wire.clone(), stats: PortStats::default() }, wire)
}

impl MemWire {
    /// Queues a frame for the port to receive.
    pub fn inject(&self, frame: &[u8]) {
        self.0.lock().expect("mem port lock").to_port.push_back(frame.to_vec());
    }

    /// Takes every frame the port has transmitted so far.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        self.0.lock().expect("mem port lock").from_port.drain(..).collect()
    }

    /// Frames injected but not yet received by the port.
    pub fn pending(&self) -> usize {
        self.0.lock().expect("mem port lock").to_port.len()
    }
}

/// Copies frame `f` into `b` as received on port `id`, counting it in
/// `stats`: 1 if it fit, else 0 (counted as an rx drop).
fn receive(b: &mut PktBuf, f: &[u8], id: u16, stats: &mut PortStats) -> usize {
    if !b.copy_from(f) {
        stats.rx_dropped += 1;
        return 0;
    }
    b.port = id;
    stats.rx_packets += 1;
    stats.rx_bytes += f.len() as u64;
    1
}

impl Port for MemPort {
    fn rx_burst(&mut self, bufs: &mut [PktBuf]) -> usize {
        let mut q = self.wire.0.lock().expect("mem port lock");
        let mut n = 0;
        while n < bufs.len() {
            let Some(f) = q.to_port.pop_front() else { break };
            n += receive(&mut bufs[n], &f, self.id, &mut self.stats);
        }
        n
    }

    fn tx_burst(&mut self, bufs: &[PktBuf]) -> usize {
        let mut q = self.wire.0.lock().expect("mem port lock");
        for b in bufs {
            q.from_port.push_back(b.frame().to_vec());
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += b.len() as u64;
        }
        bufs.len()
    }

    fn poll(&mut self) {}

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// A port for benches and allocation tests that neither allocates nor
/// locks per frame: every rx burst is filled to its length from a fixed
/// set of prebuilt frames, taken round-robin and copied into the worker's
/// buffers (as AF_XDP copies out of its UMEM); tx counts the frames (in
/// [`PortStats`]) and hands the buffers straight back. With no frames it
/// receives nothing. The measured cost of a burst through a worker over it
/// is the gateway's, plus one frame copy per packet.
pub struct ReplayPort {
    id: u16,
    frames: Vec<Vec<u8>>,
    next: usize,
    stats: PortStats,
}

impl ReplayPort {
    /// Port id `id` replaying `frames` (Ethernet frames, each at most
    /// `BUF_SIZE - HEADROOM` bytes; longer ones are counted as rx drops).
    /// Allocates nothing after this.
    pub fn new(id: u16, frames: Vec<Vec<u8>>) -> ReplayPort {
        ReplayPort { id, frames, next: 0, stats: PortStats::default() }
    }
}

impl Port for ReplayPort {
    fn rx_burst(&mut self, bufs: &mut [PktBuf]) -> usize {
        let nb = self.frames.len();
        if nb == 0 {
            return 0;
        }
        let mut n = 0;
        for _ in 0..bufs.len() {
            let f = &self.frames[self.next];
            self.next = if self.next + 1 == nb { 0 } else { self.next + 1 };
            let Some(b) = bufs.get_mut(n) else { break };
            n += receive(b, f, self.id, &mut self.stats);
        }
        n
    }

    fn tx_burst(&mut self, bufs: &[PktBuf]) -> usize {
        self.stats.tx_packets += bufs.len() as u64;
        self.stats.tx_bytes += bufs.iter().map(|b| b.len() as u64).sum::<u64>();
        bufs.len()
    }

    fn poll(&mut self) {}

    fn stats(&self) -> PortStats {
        self.stats
    }
}
