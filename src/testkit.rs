//! A whole gateway over in-memory ports, for tests and benches: built from a
//! config file like `secgw run` builds one (binding, sessions, attach), on
//! any crypto device, with every worker polled in turn from the caller's
//! thread (deterministic; the descriptor device's engines are its own
//! threads). Allocates per injected frame: not for traffic.

use crate::config::Config;
use crate::control::{stats, tables};
use crate::crypto::descriptor::{DescriptorConfig, DescriptorDevice};
use crate::crypto::soft::SoftDevice;
use crate::crypto::{CryptoDevice, CryptoError, QpConf};
use crate::config::model::CryptoBackend;
use crate::dataplane::worker::{Handoff, WorkerConf};
use crate::dataplane::{Worker, WorkerCounters};
use crate::io::mem::{self, MemPort, MemWire};
use crate::io::{PktBuf, Port};
use crate::policy::neighbour::NeighbourTable;
use crate::policy::Tables;
use std::path::Path;
use std::sync::Arc;

/// A gateway of `cfg.gateway.workers` workers over in-memory ports (one port
/// per worker and config port, as AF_XDP gives one socket per worker and
/// port queue).
pub struct MemGateway<D: CryptoDevice = SoftDevice> {
    /// The workers, polled by [`MemGateway::run`].
    pub workers: Vec<Worker<MemPort, D::Qp<PktBuf>>>,
    /// `wires[w]`: (port name, wire) of worker `w`, in config port order.
    pub wires: Vec<Vec<(String, MemWire)>>,
    /// The tables the workers use.
    pub tables: Arc<Tables>,
    /// Per-worker counters.
    pub counters: Vec<Arc<WorkerCounters>>,
    /// The config it was built from.
    pub cfg: Config,
    /// The crypto device.
    pub dev: D,
    /// The neighbour table the workers report to ([`MemGateway::run`]
    /// ticks it as the control thread would).
    pub neighbours: NeighbourTable,
    /// Where the workers load their tables from: a test publishes a new
    /// snapshot (version + 1) here as the control thread would.
    pub published: Arc<arc_swap::ArcSwap<Tables>>,
}

/// The workers of a config over ports the caller makes: what
/// [`MemGateway`] is built on, for benches and tests that drive workers
/// themselves (each on its own thread, over [`crate::io::mem::ReplayPort`]s).
pub struct Workers<P: Port, D: CryptoDevice = SoftDevice> {
    /// `cfg.gateway.workers` workers, in worker id order.
    pub workers: Vec<Worker<P, D::Qp<PktBuf>>>,
    /// The tables the workers use.
    pub tables: Arc<Tables>,
    /// Per-worker counters.
    pub counters: Vec<Arc<WorkerCounters>>,
    /// The config they were built from.
    pub cfg: Config,
    /// The crypto device.
    pub dev: D,
    /// The neighbour table the workers report to.
    pub neighbours: NeighbourTable,
    /// Where the workers load their tables from (as [`MemGateway::published`]).
    pub published: Arc<arc_swap::ArcSwap<Tables>>,
}

impl<P: Port, D: CryptoDevice> Workers<P, D> {
    /// Builds the tables of `cfg` on `dev` (binding, sessions and, for
    /// limited devices, attach, as `secgw run` does them) and one worker
    /// per `cfg.gateway.workers` (`cfg.gateway.burst`, its idle settings
    /// (used only by [`Worker::run`]), pool 512, handoff mesh, one queue
    /// pair each) whose port `i` (config port order) is
    /// `port(worker, i)`. Errors as [`tables::install`].
    pub fn build(cfg: Config, dev: D, mut port: impl FnMut(usize, usize) -> P) -> Result<Workers<P, D>, crate::control::ControlError> {
        let n = cfg.gateway.workers.max(1);
        let macs: Vec<[u8; 6]> = cfg.ports.iter().map(|p| p.mac.unwrap_or([2, 0, 0, 0, 0, 0])).collect();
        let (built, _binding, neighbours) = tables::install_with_neighbours(&cfg, &dev, &macs)?;
        let tables = Arc::new(arc_swap::ArcSwap::from_pointee(built));
        let t = tables.load_full();
        let mut workers = Vec::new();
        let mut counters = Vec::new();
        for (w, handoff) in Handoff::mesh(n, 256, 512).into_iter().enumerate() {
            let ports = (0..cfg.ports.len()).map(|i| port(w, i)).collect();
            let c = Arc::new(WorkerCounters::new(t.ports.len()));
            let qp = dev.queue_pair_setup(w as u16, QpConf { nb_descriptors: 256.min(cfg.crypto.ring_depth) })?;
            let conf = WorkerConf { id: w, burst: cfg.gateway.burst, pool_size: 512, nb_workers: n, idle_sleep_us: cfg.gateway.idle_sleep_us, idle_spin_us: cfg.gateway.idle_spin_us, reasm: crate::control::run::reassembly_conf(&cfg.reassembly), neigh: crate::control::run::pending_conf(&cfg.neighbour_table), pmtu_timeout_ms: cfg.gateway.pmtu_timeout_s.saturating_mul(1000), icmp_echo: cfg.gateway.icmp_echo };
            workers.push(Worker::new(conf, ports, qp, tables.clone(), c.clone(), handoff));
            counters.push(c);
        }
        Ok(Workers { workers, tables: t, counters, cfg, dev, neighbours, published: tables })
    }

    /// Counters summed over workers.
    pub fn stats(&self) -> stats::Snapshot {
        stats::snapshot(&self.tables, &self.counters)
    }
}

/// Loads a config, relative paths from the crate root. Panics on a bad
/// config: test use only.
pub fn load_config(path: &str) -> Config {
    let p = Path::new(path);
    let p = if p.is_absolute() { p.to_path_buf() } else { Path::new(env!("CARGO_MANIFEST_DIR")).join(p) };
    crate::config::load(&p).expect("config loads")
}

/// The descriptor device a config describes (one queue pair per worker).
pub fn descriptor_device(cfg: &Config) -> Result<DescriptorDevice, CryptoError> {
    let limit = if cfg.crypto.backend == CryptoBackend::Descriptor { cfg.crypto.max_sessions_per_qp } else { 64 };
    DescriptorDevice::with_provider(
        DescriptorConfig { nb_queue_pairs: cfg.gateway.workers.max(1) as u16, ring_depth: cfg.crypto.ring_depth, max_sessions_per_qp: limit, nb_engines: cfg.crypto.engines },
        cfg.crypto.provider,
    )
}

impl MemGateway<SoftDevice> {
    /// The gateway of config `path` on the software device.
    pub fn from_config(path: &str) -> MemGateway<SoftDevice> {
        let cfg = load_config(path);
        let dev = SoftDevice::with_provider(cfg.gateway.workers.max(1) as u16, cfg.crypto.provider);
        MemGateway::with_device(cfg, dev).expect("gateway builds")
    }
}

impl<D: CryptoDevice> MemGateway<D> {
    /// The gateway of `cfg` on `dev`: binding, sessions and (limited
    /// devices) attach as `secgw run` does them. Errors as
    /// [`tables::install`].
    pub fn with_device(cfg: Config, dev: D) -> Result<MemGateway<D>, crate::control::ControlError> {
        let mut wires: Vec<Vec<(String, MemWire)>> = Vec::new();
        let names: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
        let built = Workers::build(cfg, dev, |w, i| {
            let (port, wire) = mem::pair(i as u16);
            if wires.len() <= w {
                wires.push(Vec::new());
            }
            wires[w].push((names[i].clone(), wire));
            port
        })?;
        let Workers { workers, tables, counters, cfg, dev, neighbours, published } = built;
        Ok(MemGateway { workers, wires, tables, counters, cfg, dev, neighbours, published })
    }

    /// The wire of worker `worker`'s port `port` (by config name).
    pub fn wire(&self, worker: usize, port: &str) -> &MemWire {
        &self.wires[worker].iter().find(|(n, _)| n == port).expect("port name").1
    }

    /// Queues `frame` for worker `worker`'s port `port` to receive.
    pub fn inject(&self, worker: usize, port: &str, frame: &[u8]) {
        self.wire(worker, port).inject(frame);
    }

    /// Polls every worker in turn until nothing moves and no crypto op is in
    /// flight, drains crypto, and returns what each worker sent as (worker,
    /// port name, frame), in send order per worker and port.
    pub fn run(&mut self) -> Vec<(usize, String, Vec<u8>)> {
        self.run_clock(None)
    }

    /// [`MemGateway::run`] with every poll and the neighbour table's tick
    /// at time `now` (neighbour timers without sleeping).
    pub fn run_at(&mut self, now: std::time::Instant) -> Vec<(usize, String, Vec<u8>)> {
        self.run_clock(Some(now))
    }

    fn run_clock(&mut self, now: Option<std::time::Instant>) -> Vec<(usize, String, Vec<u8>)> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let mut moved = 0;
            for w in &mut self.workers {
                moved += match now {
                    Some(t) => w.poll_at(t),
                    None => w.poll_once(),
                };
            }
            // The control thread's turn: learned neighbours published.
            if self.neighbours.tick(now.unwrap_or_else(std::time::Instant::now)) {
                moved += 1;
            }
            if moved == 0 && self.workers.iter().all(|w| w.inflight() == 0) && self.wires.iter().flatten().all(|(_, w)| w.pending() == 0) {
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

/// A small seeded random number generator for test and bench data
/// (splitmix64): the same seed gives the same sequence on every machine.
/// Not for keys or anything an attacker may predict.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// One element of a non-empty slice.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    /// Fisher–Yates shuffle in place.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// `plain` sealed as the ESP packet of an AES-GCM SA (RFC 4303 §2, RFC
/// 4106 §3–5) by the `aes-gcm` crate, not by the gateway's transforms:
/// SPI ‖ low 32 bits of `seq` ‖ 8-byte IV (`seq`, big-endian) ‖ ciphertext ‖
/// 16-byte ICV, with nonce = salt ‖ IV and AAD = SPI ‖ seq_lo, or SPI ‖
/// seq_hi ‖ seq_lo with `esn`. `key` is a config's `key`: an AES-128 or
/// AES-256 key ‖ 4-byte salt (20 or 36 bytes); `None` for another length.
/// `plain` is sealed as given: the caller writes the padding, Pad Length
/// and Next Header (§2.4–2.6), so tests and fuzzing can send trailers a
/// correct peer never would, past the ICV check.
pub fn seal_esp_gcm(key: &[u8], spi: u32, seq: u64, esn: bool, plain: &[u8]) -> Option<Vec<u8>> {
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::{Aes128Gcm, Aes256Gcm, KeyInit};
    let (aes, salt) = key.split_at(key.len().checked_sub(4)?);
    let iv = seq.to_be_bytes();
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(salt);
    nonce[4..].copy_from_slice(&iv);
    let mut aad = spi.to_be_bytes().to_vec();
    if esn {
        aad.extend_from_slice(&((seq >> 32) as u32).to_be_bytes());
    }
    aad.extend_from_slice(&(seq as u32).to_be_bytes());
    let mut esp = spi.to_be_bytes().to_vec();
    esp.extend_from_slice(&(seq as u32).to_be_bytes());
    esp.extend_from_slice(&iv);
    let mut body = plain.to_vec();
    let tag = match aes.len() {
        16 => Aes128Gcm::new_from_slice(aes).ok()?.encrypt_in_place_detached((&nonce).into(), &aad, &mut body).ok()?,
        32 => Aes256Gcm::new_from_slice(aes).ok()?.encrypt_in_place_detached((&nonce).into(), &aad, &mut body).ok()?,
        _ => return None,
    };
    esp.extend_from_slice(&body);
    esp.extend_from_slice(&tag);
    Some(esp)
}
