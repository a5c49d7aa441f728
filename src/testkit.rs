//! A whole gateway over in-memory ports, for tests and benches: built from a
//! config file like `secgw run` builds one, with the software crypto device
//! and every worker polled in turn from the caller's thread (deterministic,
//! no threads). Allocates per injected frame: not for traffic.

use crate::config::Config;
use crate::control::{binding, stats, tables};
use crate::crypto::soft::{SoftDevice, SoftQueuePair};
use crate::crypto::{CryptoDevice, QpConf};
use crate::dataplane::worker::{Handoff, WorkerConf};
use crate::dataplane::{Worker, WorkerCounters};
use crate::io::mem::{self, MemPort, MemWire};
use crate::io::PktBuf;
use crate::policy::Tables;
use std::path::Path;
use std::sync::Arc;

/// A gateway of `cfg.gateway.workers` workers over in-memory ports (one port
/// per worker and config port, as AF_XDP gives one socket per worker and
/// port queue).
pub struct MemGateway {
    /// The workers, polled by [`MemGateway::run`].
    pub workers: Vec<Worker<MemPort, SoftQueuePair<PktBuf>>>,
    /// `wires[w]`: (port name, wire) of worker `w`, in config port order.
    pub wires: Vec<Vec<(String, MemWire)>>,
    /// The tables the workers use.
    pub tables: Arc<Tables>,
    /// Per-worker counters.
    pub counters: Vec<Arc<WorkerCounters>>,
    /// The config it was built from.
    pub cfg: Config,
}

impl MemGateway {
    /// Builds the gateway of config `path` (relative paths are taken from the
    /// crate root). Panics on a bad config: test use only.
    pub fn from_config(path: &str) -> MemGateway {
        let p = Path::new(path);
        let p = if p.is_absolute() { p.to_path_buf() } else { Path::new(env!("CARGO_MANIFEST_DIR")).join(p) };
        let cfg = crate::config::load(&p).expect("config loads");
        let n = cfg.gateway.workers.max(1);
        let macs: Vec<[u8; 6]> = cfg.ports.iter().map(|p| p.mac.expect("test configs give MACs")).collect();
        let dev = SoftDevice::new(n as u16);
        let bind = binding::bind(&cfg, 0).expect("binding");
        let tables = Arc::new(arc_swap::ArcSwap::from_pointee(tables::build(&cfg, &dev, &macs, &bind).expect("tables")));
        let t = tables.load_full();
        let mut workers = Vec::new();
        let mut wires = Vec::new();
        let mut counters = Vec::new();
        for (w, handoff) in Handoff::mesh(n, 256, 512).into_iter().enumerate() {
            let mut ports = Vec::new();
            let mut ws = Vec::new();
            for (i, p) in cfg.ports.iter().enumerate() {
                let (port, wire) = mem::pair(i as u16);
                ports.push(port);
                ws.push((p.name.clone(), wire));
            }
            let c = Arc::new(WorkerCounters::new(t.ports.len(), t.sad.outbound.len(), t.sad.inbound.len()));
            let qp = dev.queue_pair_setup(w as u16, QpConf { nb_descriptors: 256 }).expect("queue pair");
            let conf = WorkerConf { id: w, burst: 32, pool_size: 512, nb_workers: n, idle_sleep_us: 0 };
            workers.push(Worker::new(conf, ports, qp, tables.clone(), c.clone(), handoff));
            wires.push(ws);
            counters.push(c);
        }
        MemGateway { workers, wires, tables: t, counters, cfg }
    }

    /// The wire of worker `worker`'s port `port` (by config name).
    pub fn wire(&self, worker: usize, port: &str) -> &MemWire {
        &self.wires[worker].iter().find(|(n, _)| n == port).expect("port name").1
    }

    /// Queues `frame` for worker `worker`'s port `port` to receive.
    pub fn inject(&self, worker: usize, port: &str, frame: &[u8]) {
        self.wire(worker, port).inject(frame);
    }

    /// Polls every worker in turn until nothing moves, drains crypto, and
    /// returns what each worker sent as (worker, port name, frame), in send
    /// order per worker and port.
    pub fn run(&mut self) -> Vec<(usize, String, Vec<u8>)> {
        for _ in 0..1000 {
            let mut moved = 0;
            for w in &mut self.workers {
                moved += w.poll_once();
            }
            if moved == 0 && self.wires.iter().flatten().all(|(_, w)| w.pending() == 0) {
                break;
            }
        }
        for w in &mut self.workers {
            w.drain();
        }
        let mut out = Vec::new();
        for (w, ws) in self.wires.iter().enumerate() {
            for (n, wire) in ws {
                for f in wire.take_sent() {
                    out.push((w, n.clone(), f));
                }
            }
        }
        out
    }

    /// Counters summed over workers.
    pub fn stats(&self) -> stats::Snapshot {
        stats::snapshot(&self.tables, &self.counters)
    }
}
