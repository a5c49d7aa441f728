//! Frames a port's tx ring has no room for are dropped as `tx_full` and
//! charged to the port they were received on, as every drop reason is: a
//! port's `drops` is its received frames not sent (helper-84 saw the
//! global `tx_full` but a port's `drops` leave them out, so a port's rx
//! no longer added up to what was sent plus its drops).

use etherparse::PacketBuilder;
use secgw::crypto::soft::SoftDevice;
use secgw::io::{PktBuf, Port, PortStats};
use secgw::testkit::{load_config, Workers};

/// A port that receives its frames once and whose tx ring takes at most
/// `room` frames a burst.
struct Narrow {
    id: u16,
    rx: Vec<Vec<u8>>,
    room: usize,
    stats: PortStats,
}

impl Port for Narrow {
    fn rx_burst(&mut self, bufs: &mut [PktBuf]) -> usize {
        let n = self.rx.len().min(bufs.len());
        for (b, f) in bufs.iter_mut().zip(self.rx.drain(..n)) {
            assert!(b.copy_from(&f));
            b.port = self.id;
        }
        n
    }

    fn tx_burst(&mut self, bufs: &[PktBuf]) -> usize {
        let n = bufs.len().min(self.room);
        self.stats.tx_packets += n as u64;
        n
    }

    fn poll(&mut self) {}

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[test]
fn tx_full_is_a_drop_of_the_receiving_port() {
    // Bypass only (no SA): inside → outside, 8 frames in one burst, the
    // outside tx ring with room for 3.
    let cfg = load_config("configs/bench/bypass.toml");
    let inside = cfg.ports.iter().position(|p| p.name == "inside").unwrap();
    let outside = cfg.ports.iter().position(|p| p.name == "outside").unwrap();
    let frames: Vec<Vec<u8>> = (0..8u16)
        .map(|k| {
            let mut f = Vec::new();
            PacketBuilder::ethernet2([2, 0, 0, 0, 0x0a, 1], [2, 0, 0, 0, 0, 1])
                .ipv4([192, 0, 2, 10], [198, 51, 100, 10], 64)
                .udp(40000 + k, 5001)
                .write(&mut f, &[k as u8; 100])
                .unwrap();
            f
        })
        .collect();
    let mut w = Workers::build(cfg, SoftDevice::new(1), |_, i| Narrow { id: i as u16, rx: if i == inside { frames.clone() } else { Vec::new() }, room: 3, stats: PortStats::default() }).unwrap();
    for _ in 0..4 {
        w.workers[0].poll_once();
    }
    let s = w.stats();
    assert_eq!(s.drops.get("tx_full").copied(), Some(5), "drops {:?}", s.drops);
    assert_eq!((s.ports[inside].rx_packets, s.ports[outside].tx_packets), (8, 3));
    assert_eq!(s.ports[inside].drops, 5, "the 5 tx_full frames were received on inside");
    assert_eq!(s.ports[outside].drops, 0);
    assert_eq!(s.ports[inside].rx_packets, s.ports[outside].tx_packets + s.ports[inside].drops, "rx = sent + drops");
}
