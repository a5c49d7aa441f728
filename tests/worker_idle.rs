//! `Worker::run`'s idle states (`gateway.idle_spin_us`, `idle_sleep_us`):
//! a worker that has gone idle, and sleeps between polls, still forwards
//! what arrives, on the software device and on the descriptor device
//! (whose ops complete on an engine thread: the worker yields its core
//! between polls while they are in flight, it does not sleep), and leaves
//! `run` soon after `stop`. The ESP frames are opened with `aes-gcm`
//! directly, not with the gateway's code.

mod common;
use common::*;
use secgw::config::Config;
use secgw::crypto::CryptoDevice;
use secgw::testkit::{descriptor_device, load_config};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// Idle sleep of these workers: long enough that a frame arriving during
/// it waits for the worker to wake, short enough for the test's pace.
const NAP_US: u64 = 2000;

/// configs/ep0.toml (one worker) with `idle_sleep_us = NAP_US` and
/// `idle_spin_us = 0`: idle after 64 empty polls.
fn idle_config(backend: &str) -> Config {
    let mut cfg = load_config("configs/ep0.toml");
    assert_eq!(cfg.gateway.workers, 1);
    cfg.gateway.idle_sleep_us = NAP_US;
    cfg.gateway.idle_spin_us = 0;
    if backend == "descriptor" {
        cfg.crypto.backend = secgw::config::model::CryptoBackend::Descriptor;
        cfg.crypto.max_sessions_per_qp = 64;
    }
    cfg
}

/// Runs gw0's worker on its own thread; three times lets it go idle
/// (20 ms: thousands of empty polls, then sleeps), injects one datagram
/// from hostA and waits for its ESP frame on the outside port (SA 1001,
/// sequence numbers 1, 2, 3, opened with the SA's key); then sets `stop`
/// and waits for `run` to return (it drains first).
fn forwards_after_idle<D: CryptoDevice + 'static>(cfg: Config, dev: D, what: &str) {
    let mut gw = MemGateway::with_device(cfg.clone(), dev).unwrap_or_else(|e| panic!("{what}: {e}"));
    let key = cfg.sas.iter().find(|s| s.spi == 1001 && s.direction == secgw::config::model::Direction::Outbound).expect("SA 1001").key.to_vec();
    let mut worker = gw.workers.remove(0);
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let stop = stop.clone();
        std::thread::spawn(move || worker.run(&stop))
    };
    for seq in 1..=3u32 {
        std::thread::sleep(Duration::from_millis(20));
        let payload = format!("after idle {seq}");
        let frame = eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, payload.as_bytes()));
        gw.inject(0, "inside", &frame);
        let mut sent = Vec::new();
        wait_for(&format!("{what}: ESP frame {seq} on the outside port"), || {
            sent.extend(gw.wire(0, "outside").take_sent());
            !sent.is_empty()
        });
        assert_eq!(sent.len(), 1, "{what}: one frame for one datagram");
        let esp = &sent[0];
        assert_eq!(esp[14 + 9], 50, "{what}: protocol ESP");
        assert_eq!(u32::from_be_bytes(esp[34..38].try_into().unwrap()), 1001, "{what}: SPI");
        assert_eq!(u32::from_be_bytes(esp[38..42].try_into().unwrap()), seq, "{what}: sequence number");
        let plain = open_gcm128(&key, &esp[34..]);
        let inner_len = u16::from_be_bytes([plain[2], plain[3]]) as usize;
        assert_eq!(&plain[28..inner_len], payload.as_bytes(), "{what}: inner payload");
    }
    stop.store(true, Ordering::Relaxed);
    wait_for(&format!("{what}: run() to return after stop"), || handle.is_finished());
    handle.join().unwrap();
    let s = gw.stats();
    let drops: Vec<_> = s.drops.iter().filter(|(_, n)| **n > 0).collect();
    assert!(drops.is_empty(), "{what}: drops {drops:?}");
    assert!(gw.wire(0, "inside").take_sent().is_empty(), "{what}: nothing back to hostA");
}

#[test]
fn an_idle_worker_forwards_what_arrives_on_the_software_device() {
    let cfg = idle_config("software");
    let dev = secgw::crypto::soft::SoftDevice::with_provider(1, cfg.crypto.provider);
    forwards_after_idle(cfg, dev, "software");
}

#[test]
fn an_idle_worker_forwards_what_arrives_on_the_descriptor_device() {
    let cfg = idle_config("descriptor");
    let dev = descriptor_device(&cfg).unwrap();
    forwards_after_idle(cfg, dev, "descriptor");
}

/// With `idle_sleep_us = 0` the worker busy-polls (never sleeps) and
/// forwards the same way.
#[test]
fn a_busy_polling_worker_forwards_the_same() {
    let mut cfg = idle_config("software");
    cfg.gateway.idle_sleep_us = 0;
    let dev = secgw::crypto::soft::SoftDevice::with_provider(1, cfg.crypto.provider);
    forwards_after_idle(cfg, dev, "busy-poll");
}
