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

impl Port for MemPort {
    fn rx_burst(&mut self, bufs: &mut [PktBuf]) -> usize {
        let mut q = self.wire.0.lock().expect("mem port lock");
        let mut n = 0;
        while n < bufs.len() {
            let Some(f) = q.to_port.pop_front() else { break };
            if bufs[n].copy_from(&f) {
                bufs[n].port = self.id;
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += f.len() as u64;
                n += 1;
            } else {
                self.stats.rx_dropped += 1;
            }
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
