//! A worker's burst path never allocates (the per-packet rule, DESIGN §4):
//! a counting global allocator counts this thread's allocations while
//! workers poll bursts of 32 over `ReplayPort`s (which allocate nothing
//! themselves): plaintext through gw0 (configs/ep0.toml, AES-128-GCM
//! tunnel, 64 and 1420-byte packets), the ESP it made through gw1
//! (configs/ep1.toml, replay window off so the ESP can be replayed), and
//! packets handed from the worker that received them to the SA's owner
//! (configs/ep0-2w.toml). Each case must see every packet sent and none
//! dropped, so the path counted is the one that forwards; and the same
//! counter must see the allocations of building the workers, or it would
//! not prove anything.

use etherparse::PacketBuilder;
use secgw::crypto::soft::SoftDevice;
use secgw::io::mem::ReplayPort;
use secgw::testkit::{load_config, MemGateway, Workers};

#[path = "common/alloc.rs"]
mod alloc;
use alloc::allocations;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// 64 UDP frames to gw0's inside MAC, `size`-byte IPv4 packets to `dport`.
fn inner_frames(dport: u16, size: usize) -> Vec<Vec<u8>> {
    (0..64u16)
        .map(|k| {
            let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0x0a, 1], [2, 0, 0, 0, 0, 1])
                .ipv4([192, 0, 2, 10], [198, 51, 100, 10], 64)
                .udp(40000 + k, dport);
            let mut f = Vec::new();
            b.write(&mut f, &vec![k as u8; size - 28]).expect("frame");
            f
        })
        .collect()
}

/// Workers of config `path` whose port `rx` replays `frames(worker)`;
/// asserts that building them allocated (the counter works).
fn build(path: &str, rx: &str, frames: impl Fn(usize) -> Vec<Vec<u8>>) -> Workers<ReplayPort> {
    let cfg = load_config(path);
    let i = cfg.ports.iter().position(|p| p.name == rx).expect("port");
    let mut w = None;
    let n = allocations(|| {
        w = Some(Workers::build(cfg, SoftDevice::new(2), |k, p| ReplayPort::new(p as u16, if p == i { frames(k) } else { Vec::new() })).expect("workers"));
    });
    assert!(n > 0, "the counter saw no allocation while building the workers");
    w.expect("workers")
}

/// Polls the workers `order` names in turn, 8 rounds to warm up, then 200
/// counted: no allocation, and every packet received went out on port
/// `tx` with no drop.
fn check(mut w: Workers<ReplayPort>, order: &[usize], tx: &str, what: &str) {
    let o = w.cfg.ports.iter().position(|p| p.name == tx).expect("port");
    for _ in 0..8 {
        for &k in order {
            w.workers[k].poll_once();
        }
    }
    let n = allocations(|| {
        for _ in 0..200 {
            for &k in order {
                w.workers[k].poll_once();
            }
        }
    });
    assert_eq!(n, 0, "{what}: 200 polls allocated {n} times");
    let s = w.stats();
    let dropped: u64 = s.drops.values().sum();
    let rx: u64 = w.counters.iter().map(|c| c.ports.iter().map(|p| p.rx_packets.get()).sum::<u64>()).sum();
    let sent: u64 = w.counters.iter().map(|c| c.ports[o].tx_packets.get()).sum();
    assert_eq!(dropped, 0, "{what}: drops {:?}", s.drops);
    assert!(rx >= 208 * 32, "{what}: only {rx} packets received");
    // Handed or in flight at the end of the last poll: at most a burst per worker.
    assert!(sent + 32 * order.len() as u64 >= rx, "{what}: received {rx}, sent {sent}");
}

#[test]
fn outbound_burst_path_does_not_allocate() {
    for size in [64, 1420] {
        let w = build("configs/ep0.toml", "inside", |_| inner_frames(5001, size));
        check(w, &[0], "outside", &format!("outbound {size} B"));
    }
}

#[test]
fn inbound_burst_path_does_not_allocate() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/configs/ep1.toml")).expect("ep1.toml");
    let noreplay = text.replace("replay_window = 64", "replay_window = 0");
    assert_ne!(noreplay, text, "ep1.toml no longer sets replay_window = 64");
    let path = std::env::temp_dir().join(format!("secgw-worker-alloc-{}-ep1.toml", std::process::id()));
    std::fs::write(&path, noreplay).expect("temp config");
    for size in [64, 1420] {
        let mut gw0 = MemGateway::from_config("configs/ep0.toml");
        for f in inner_frames(5001, size) {
            gw0.inject(0, "inside", &f);
        }
        let esp: Vec<Vec<u8>> = gw0.run().into_iter().map(|x| x.2).collect();
        assert_eq!(esp.len(), 64);
        let w = build(path.to_str().expect("path"), "outside", |_| esp.clone());
        check(w, &[0], "inside", &format!("inbound {size} B"));
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn handoff_burst_path_does_not_allocate() {
    // dport 6001 → SA 2001, owned by worker 0; worker 1 receives them.
    let w = build("configs/ep0-2w.toml", "inside", |k| if k == 1 { inner_frames(6001, 64) } else { Vec::new() });
    let counters = w.counters.clone();
    check(w, &[1, 0], "outside", "handoff");
    assert!(counters[1].handoff_out.get() > 0, "nothing was handed over");
}
