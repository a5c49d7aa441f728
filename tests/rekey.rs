//! Rekey as the peer sees it: once the control thread has answered an
//! inbound rekey, the new SPI is accepted by the workers (tests/e2e/
//! test_rekey.py found it was not always so).
//!
//! gw1 (configs/ep1.toml) runs its worker on its own thread, as `secgw run`
//! does, with a receive path that is slow in the middle of a poll (its
//! outside port sleeps before it reads, as a worker that the scheduler
//! took off the CPU between taking the tables and receiving). The control
//! thread rekeys inbound SA 1001 to SPI 0x5001 and publishes; at once an
//! ESP packet sealed with the new SPI and key by the `aes-gcm` crate
//! arrives. It must be delivered, not dropped as `no_sa`, each of ROUNDS
//! times (before the fix, `publish` returned as soon as the snapshot was
//! stored, and nearly every packet met the worker's older snapshot).

mod common;
use common::*;
use secgw::control::manager::Manager;
use secgw::crypto::soft::SoftDevice;
use secgw::crypto::{CryptoDevice, QpConf};
use secgw::dataplane::counters::DropReason;
use secgw::dataplane::worker::{Handoff, Worker, WorkerConf};
use secgw::dataplane::WorkerCounters;
use secgw::io::mem::{self, MemPort, MemWire};
use secgw::io::{PktBuf, Port, PortStats};
use secgw::testkit::load_config;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: u32 = 10;
const SLOW: Duration = Duration::from_millis(30);

/// An in-memory port; `slow`: its receive path sleeps `SLOW` before reading.
struct SlowPort(MemPort, bool);

impl Port for SlowPort {
    fn rx_burst(&mut self, bufs: &mut [PktBuf]) -> usize {
        if self.1 {
            std::thread::sleep(SLOW);
        }
        self.0.rx_burst(bufs)
    }
    fn tx_burst(&mut self, bufs: &[PktBuf]) -> usize {
        self.0.tx_burst(bufs)
    }
    fn poll(&mut self) {
        self.0.poll()
    }
    fn stats(&self) -> PortStats {
        self.0.stats()
    }
}

fn esp_frame(key: &[u8], spi: u32, seq: u64) -> Vec<u8> {
    let inner = udp_packet(Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 10), 0, 64, 40000, 5001, b"rekeyed");
    let esp = seal_gcm128(key, spi, seq, false, &inner, 4);
    let outer = udp_packet(Ipv4Addr::new(203, 0, 113, 1), Ipv4Addr::new(203, 0, 113, 2), 0, 64, 0, 0, &[]);
    to_gw1(&outer, 50, &esp)
}

#[test]
fn a_packet_with_the_new_spi_right_after_an_inbound_rekey_is_accepted() {
    let cfg = load_config("configs/ep1.toml");
    assert_eq!(cfg.gateway.workers, 1, "ep1.toml runs one worker");
    let dev = SoftDevice::new(1);
    let macs: Vec<[u8; 6]> = cfg.ports.iter().map(|p| p.mac.unwrap()).collect();
    let mut mgr = Manager::new(&cfg, &dev, &macs).unwrap();
    mgr.set_grace(Duration::from_secs(60));
    mgr.set_adopt_wait(Duration::from_secs(1));
    let tables = Arc::new(arc_swap::ArcSwap::from_pointee(mgr.tables_now()));
    let names: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
    let outside = names.iter().position(|n| n == "outside").unwrap();
    let inside = names.iter().position(|n| n == "inside").unwrap();
    let (mut ports, mut wires): (Vec<SlowPort>, Vec<MemWire>) = (Vec::new(), Vec::new());
    for i in 0..names.len() {
        let (p, w) = mem::pair(i as u16);
        ports.push(SlowPort(p, i == outside));
        wires.push(w);
    }
    let counters = Arc::new(WorkerCounters::new(names.len()));
    let qp = dev.queue_pair_setup::<PktBuf>(0, QpConf { nb_descriptors: 256 }).unwrap();
    let conf = WorkerConf { id: 0, burst: 32, pool_size: 512, nb_workers: 1, idle_sleep_us: 0, idle_spin_us: 0, reasm: secgw::control::run::reassembly_conf(&cfg.reassembly), neigh: secgw::control::run::pending_conf(&cfg.neighbour_table), pmtu_timeout_ms: cfg.gateway.pmtu_timeout_s.saturating_mul(1000), icmp_echo: cfg.gateway.icmp_echo };
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (tables, counters, stop) = (tables.clone(), counters.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut w = Worker::new(conf, ports, qp, tables, counters, Handoff::single());
            w.run(&stop);
        })
    };
    mgr.start_publishing(tables.clone(), vec![counters.clone()]);

    let mut spi = 1001;
    let mut delivered = 0;
    for round in 1..=ROUNDS {
        let new_spi = 0x5000 + round;
        let key: Vec<u8> = (0..20).map(|i| (i as u8).wrapping_mul(7).wrapping_add(round as u8)).collect();
        mgr.rekey(spi, Some(secgw::config::model::Direction::Inbound), None, new_spi, key.clone(), None, Instant::now()).unwrap();
        mgr.publish();
        // The answer has gone to the peer; its first packet on the new SA arrives.
        wires[outside].inject(&esp_frame(&key, new_spi, 1));
        wait_for("the packet to be delivered or dropped", || {
            let dropped: u64 = counters.drops.iter().map(|c| c.get()).sum();
            delivered += wires[inside].take_sent().len();
            delivered as u64 + dropped >= round as u64
        });
        assert_eq!(counters.drops[DropReason::NoSa as usize].get(), 0, "round {round}: the packet with SPI {new_spi:#x} met tables without it (no_sa)");
        spi = new_spi;
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let drops: Vec<(usize, u64)> = counters.drops.iter().map(|c| c.get()).enumerate().filter(|x| x.1 > 0).collect();
    assert!(drops.is_empty(), "drops (reason index, count): {drops:?}");
    assert_eq!(delivered, ROUNDS as usize);
}

/// An outbound op whose SA leaves the tables while the op is in the
/// crypto device (a limit-1 rekey detaches the old SA at once; helper-84
/// counted such packets as `no_sa`): sealed, the packet is complete and
/// goes to the peer, whose inbound SA outlives it by the grace; it is not
/// dropped. gw0 (configs/ep0.toml) on the descriptor device, its engines
/// held while the worker prepares and enqueues 4 packets; then tables
/// without SA 1001 (and its policy) are published and the engines let go.
#[test]
fn ops_in_flight_when_their_outbound_sa_leaves_are_still_sent() {
    use secgw::testkit::{descriptor_device, MemGateway};
    let text = std::fs::read_to_string(format!("{}/configs/ep0.toml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let with = |t: &str| t.replacen("backend = \"software\"", "backend = \"descriptor\"", 1);
    let text = if text.contains("backend = \"software\"") { with(&text) } else { text.replacen("[gateway]", "[crypto]\nbackend = \"descriptor\"\n\n[gateway]", 1) };
    let path = std::env::temp_dir().join(format!("secgw-inflight-{}.toml", std::process::id()));
    std::fs::write(&path, &text).unwrap();
    let cfg = secgw::config::load(&path).unwrap();
    // The same gateway without outbound SA 1001 and the policy that uses it.
    let sa = text.find("[[sa]]\nspi = 1001").expect("SA 1001");
    let sa_end = sa + text[sa..].find("\n\n").unwrap() + 2;
    let pol = "[[policy]]\ndirection = \"outbound\"\nsrc = \"192.0.2.0/24\"\ndst = \"198.51.100.0/24\"\npriority = 10\naction = \"protect 1001\"\n";
    let gone = text[..sa].to_string() + &text[sa_end..];
    assert!(gone.contains(pol), "ep0.toml's outbound policy");
    let gone = gone.replacen(pol, "", 1);
    let gone_path = std::env::temp_dir().join(format!("secgw-inflight-gone-{}.toml", std::process::id()));
    std::fs::write(&gone_path, &gone).unwrap();
    let cfg_gone = secgw::config::load(&gone_path).unwrap();

    let dev = descriptor_device(&cfg).unwrap();
    let mut gw = MemGateway::with_device(cfg.clone(), dev).unwrap();
    gw.dev.engines_hold();
    for n in 0..4u8 {
        let ip = udp_packet(Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 10), 0, 64, 40000, 5001, &[n; 20]);
        gw.inject(0, "inside", &eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &ip));
    }
    gw.workers[0].poll_once();
    assert_eq!(gw.workers[0].inflight(), 4, "the 4 ops wait in the held device");
    let macs: Vec<[u8; 6]> = cfg.ports.iter().map(|p| p.mac.unwrap()).collect();
    let (mut t, _) = secgw::control::tables::install(&cfg_gone, &gw.dev, &macs).unwrap();
    assert!(t.sad.outbound_sas().next().is_none(), "no outbound SA in the new tables");
    t.version = gw.published.load().version + 1;
    gw.published.store(std::sync::Arc::new(t));
    gw.dev.engines_resume();
    let out = gw.run();
    let esp: Vec<_> = out.iter().filter(|(_, p, f)| p == "outside" && f.len() > 42 && f[23] == 50).collect();
    assert_eq!(esp.len(), 4, "the 4 sealed packets are sent; drops {:?}", gw.stats().drops);
    for (_, _, f) in &esp {
        assert_eq!(u32::from_be_bytes(f[34..38].try_into().unwrap()), 1001, "SPI of the SA that sealed them");
    }
    assert_eq!(gw.stats().drops.values().sum::<u64>(), 0, "{:?}", gw.stats().drops);
    let _ = (std::fs::remove_file(&path), std::fs::remove_file(&gone_path));
}
