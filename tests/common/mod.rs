//! Shared test harness: a gateway built from a config file, running one
//! worker over in-memory ports with the software crypto device.
#![allow(dead_code)]

use secgw::control::stats;
use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
use secgw::crypto::{CryptoDevice, QpConf};
use secgw::dataplane::worker::{Handoff, WorkerConf};
use secgw::dataplane::{Worker, WorkerCounters};
use secgw::io::mem::{self, MemPort, MemWire};
use secgw::io::PktBuf;
use secgw::policy::Tables;
use std::net::Ipv4Addr;
use std::sync::Arc;

pub struct Gw {
    pub worker: Worker<MemPort, SoftQueuePair<PktBuf>>,
    pub wires: Vec<(String, MemWire)>,
    pub tables: Arc<Tables>,
    pub counters: Arc<WorkerCounters>,
    pub cfg: secgw::config::Config,
}

impl Gw {
    pub fn from_config(path: &str) -> Gw {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let cfg = secgw::config::load(&path).expect("config loads");
        let macs: Vec<[u8; 6]> = cfg.ports.iter().map(|p| p.mac.expect("sample configs give MACs")).collect();
        let dev = SoftDevice::new(1);
        let binding = secgw::control::binding::bind(&cfg, 0).expect("binding");
        let tables = secgw::control::tables::build(&cfg, &dev, &macs, &binding).expect("tables build");
        let tables = Arc::new(arc_swap::ArcSwap::from_pointee(tables));
        let t = tables.load_full();
        let counters = Arc::new(WorkerCounters::new(t.ports.len(), t.sad.outbound.len(), t.sad.inbound.len()));
        let mut ports = Vec::new();
        let mut wires = Vec::new();
        for (i, p) in cfg.ports.iter().enumerate() {
            let (port, wire) = mem::pair(i as u16);
            ports.push(port);
            wires.push((p.name.clone(), wire));
        }
        let qp = dev.queue_pair_setup(0, QpConf { nb_descriptors: 256 }).unwrap();
        let worker = Worker::new(WorkerConf { id: 0, burst: 32, pool_size: 512, nb_workers: 1 }, ports, qp, tables, counters.clone(), Handoff::single());
        Gw { worker, wires, tables: t, counters, cfg }
    }

    pub fn wire(&self, name: &str) -> &MemWire {
        &self.wires.iter().find(|(n, _)| n == name).expect("port name").1
    }

    /// Injects `frames` on port `name`, runs the worker until idle, returns
    /// what each port sent as (port name, frame).
    pub fn push(&mut self, name: &str, frames: &[Vec<u8>]) -> Vec<(String, Vec<u8>)> {
        for f in frames {
            self.wire(name).inject(f);
        }
        for _ in 0..100 {
            self.worker.poll_once();
            if self.wires.iter().all(|(_, w)| w.pending() == 0) {
                self.worker.drain();
                break;
            }
        }
        let mut out = Vec::new();
        for (n, w) in &self.wires {
            for f in w.take_sent() {
                out.push((n.clone(), f));
            }
        }
        out
    }

    pub fn stats(&self) -> stats::Snapshot {
        stats::snapshot(&self.tables, &[self.counters.clone()])
    }

    pub fn drop_count(&self, reason: &str) -> u64 {
        self.stats().drops[reason]
    }

    pub fn sa_key(&self, spi: u32, inbound: bool) -> Vec<u8> {
        let dir = if inbound { secgw::config::model::Direction::Inbound } else { secgw::config::model::Direction::Outbound };
        self.cfg.sas.iter().find(|s| s.spi == spi && s.direction == dir).expect("SA").key.clone()
    }
}

pub fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
    v.try_into().unwrap()
}

/// An IPv4 header checksum over 20 bytes.
pub fn ip_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in h.chunks(2) {
        s += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// IPv4/UDP packet (no Ethernet), built by hand so the test does not share
/// the gateway's builders.
pub fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, tos: u8, ttl: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[1] = tos;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = ttl;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let ck = ip_checksum(&p[..20]);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    p
}

pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A gateway with several workers over in-memory ports (one port pair per
/// worker and port, as AF_XDP gives one socket per worker and port queue),
/// polled in turn from the test thread.
pub struct MultiGw {
    pub workers: Vec<Worker<MemPort, SoftQueuePair<PktBuf>>>,
    /// wires[w] = (port name, wire) of worker w.
    pub wires: Vec<Vec<(String, MemWire)>>,
    pub tables: Arc<Tables>,
    pub counters: Vec<Arc<WorkerCounters>>,
    pub cfg: secgw::config::Config,
}

impl MultiGw {
    pub fn from_config(path: &str) -> MultiGw {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let cfg = secgw::config::load(&path).expect("config loads");
        let n = cfg.gateway.workers;
        let macs: Vec<[u8; 6]> = cfg.ports.iter().map(|p| p.mac.expect("MACs")).collect();
        let dev = SoftDevice::new(n as u16);
        let binding = secgw::control::binding::bind(&cfg, 0).expect("binding");
        let tables = Arc::new(arc_swap::ArcSwap::from_pointee(secgw::control::tables::build(&cfg, &dev, &macs, &binding).unwrap()));
        let t = tables.load_full();
        let mut workers = Vec::new();
        let mut wires = Vec::new();
        let mut counters = Vec::new();
        for (w, handoff) in Handoff::mesh(n, 64, 256).into_iter().enumerate() {
            let mut ports = Vec::new();
            let mut ws = Vec::new();
            for (i, p) in cfg.ports.iter().enumerate() {
                let (port, wire) = mem::pair(i as u16);
                ports.push(port);
                ws.push((p.name.clone(), wire));
            }
            let c = Arc::new(WorkerCounters::new(t.ports.len(), t.sad.outbound.len(), t.sad.inbound.len()));
            let qp = dev.queue_pair_setup(w as u16, QpConf { nb_descriptors: 256 }).unwrap();
            workers.push(Worker::new(WorkerConf { id: w, burst: 32, pool_size: 256, nb_workers: n }, ports, qp, tables.clone(), c.clone(), handoff));
            wires.push(ws);
            counters.push(c);
        }
        MultiGw { workers, wires, tables: t, counters, cfg }
    }

    pub fn inject(&self, worker: usize, port: &str, frame: &[u8]) {
        self.wires[worker].iter().find(|(n, _)| n == port).expect("port").1.inject(frame);
    }

    /// Polls every worker in turn until nothing moves; returns what each
    /// worker sent as (worker, port name, frame), in send order per worker.
    pub fn run(&mut self) -> Vec<(usize, String, Vec<u8>)> {
        for _ in 0..200 {
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

    pub fn stats(&self) -> stats::Snapshot {
        stats::snapshot(&self.tables, &self.counters)
    }
}
