//! Several workers, SAs owned by one worker each, packets handed to the
//! owner (configs/ep0-2w.toml and ep1-2w.toml, in-memory ports).

mod common;
use common::*;
use std::collections::HashMap;
use std::net::Ipv4Addr;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

fn from_a(dport: u16, n: u32) -> Vec<u8> {
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(HOST_A, HOST_B, 0, 64, 40000, dport, &n.to_be_bytes()))
}

fn spi_seq(f: &[u8]) -> (u32, u32) {
    (u32::from_be_bytes(f[34..38].try_into().unwrap()), u32::from_be_bytes(f[38..42].try_into().unwrap()))
}

#[test]
fn packets_reach_their_sa_owner_and_sequence_numbers_stay_ordered() {
    let mut gw0 = MultiGw::from_config("configs/ep0-2w.toml");
    let mut gw1 = MultiGw::from_config("configs/ep1-2w.toml");
    let t = gw0.tables.clone();
    let owner: HashMap<u32, usize> = t.sad.outbound_sas().map(|(_, s)| (s.spi, s.owner)).collect();
    assert_eq!(owner[&2001], 0);
    assert_eq!(owner[&2002], 1);
    // Both flows arrive at both workers (as RSS would spread them).
    let mut sent = 0u32;
    for round in 0..20u32 {
        for w in 0..2 {
            for dport in [6001u16, 5001] {
                gw0.inject(w, "inside", &from_a(dport, round * 4 + sent % 4));
                sent += 1;
            }
        }
        let out = gw0.run();
        // Every ESP frame leaves from the worker owning its SA, and each SA's
        // sequence numbers are strictly increasing in send order.
        for (w, port, f) in &out {
            assert_eq!(port, "outside");
            let (spi, _) = spi_seq(f);
            assert_eq!(*w, owner[&spi], "SPI {spi} sent by its owner");
        }
        // Decrypt at gw1, injected at the "wrong" worker on purpose.
        for (i, (_, _, f)) in out.iter().enumerate() {
            gw1.inject(i % 2, "outside", f);
        }
        let plain = gw1.run();
        assert_eq!(plain.len(), 4, "round {round}: all four datagrams out of gw1");
    }
    let mut last: HashMap<u32, u32> = HashMap::new();
    let s0 = gw0.stats();
    for sa in s0.sas.iter().filter(|s| s.direction == "outbound") {
        assert_eq!(sa.packets, 40, "SPI {}", sa.spi);
        last.insert(sa.spi, sa.packets as u32);
    }
    assert!(s0.workers.iter().map(|w| w.handoff_out).sum::<u64>() >= 40, "half the packets crossed workers");
    assert_eq!(s0.workers.iter().map(|w| w.handoff_out).sum::<u64>(), s0.workers.iter().map(|w| w.handoff_in).sum::<u64>());
    let s1 = gw1.stats();
    assert_eq!(s1.drops.values().sum::<u64>(), 0, "{:?}", s1.drops);
    assert!(s1.workers.iter().map(|w| w.handoff_in).sum::<u64>() > 0);
    for sa in s1.sas.iter().filter(|s| s.direction == "inbound") {
        assert_eq!(sa.packets, 40, "SPI {}", sa.spi);
    }
}

#[test]
fn sequence_numbers_per_sa_are_strictly_increasing_on_the_wire() {
    let mut gw0 = MultiGw::from_config("configs/ep0-2w.toml");
    for n in 0..300u32 {
        gw0.inject((n % 2) as usize, "inside", &from_a(if n % 3 == 0 { 6500 } else { 80 }, n));
    }
    let out = gw0.run();
    assert_eq!(out.len(), 300);
    let mut seen: HashMap<u32, u32> = HashMap::new();
    for (_, _, f) in &out {
        let (spi, seq) = spi_seq(f);
        let prev = seen.insert(spi, seq).unwrap_or(0);
        assert_eq!(seq, prev + 1, "SPI {spi}: sequence numbers 1, 2, 3, … with no gap or reorder");
    }
    assert_eq!(seen[&2001], 100);
    assert_eq!(seen[&2002], 200);
}

#[test]
fn buffers_go_home() {
    // Worker 0 receives everything for SA 2002 (owned by worker 1); without
    // buffers going home it would run dry after its pool (256) is used.
    let mut gw0 = MultiGw::from_config("configs/ep0-2w.toml");
    let mut total = 0;
    for round in 0..20u32 {
        for n in 0..64u32 {
            gw0.inject(0, "inside", &from_a(80, round * 64 + n));
        }
        total += gw0.run().len();
    }
    assert_eq!(total, 20 * 64);
    assert_eq!(gw0.stats().drops.values().sum::<u64>(), 0);
}

mod descriptor {
    use super::*;
    use secgw::crypto::CryptoDevice;
    use secgw::testkit::{descriptor_device, load_config, MemGateway};

    fn limited(path: &str, limit: u32) -> secgw::config::Config {
        let mut cfg = load_config(path);
        cfg.crypto.backend = secgw::config::model::CryptoBackend::Descriptor;
        cfg.crypto.max_sessions_per_qp = limit;
        cfg
    }

    /// 2 queue pairs, max_sessions_per_qp = 2, 2 workers, 4 SAs: each queue
    /// pair holds exactly the sessions of the SAs its worker owns.
    #[test]
    fn each_queue_pair_holds_exactly_its_owners_sessions() {
        let cfg = limited("configs/ep0-2w.toml", 2);
        let dev = descriptor_device(&cfg).unwrap();
        assert_eq!(dev.info().max_sessions_per_qp, 2);
        let gw = MemGateway::with_device(cfg, dev).unwrap();
        let t = &gw.tables;
        for q in 0..2u16 {
            let mut want: Vec<u64> = t.sad.outbound_sas().map(|(_, s)| s).filter(|s| s.owner == q as usize).map(|s| s.session.id()).collect();
            want.extend(t.sad.inbound_sas().map(|(_, e)| e).filter(|e| e.sa.owner == q as usize).map(|e| e.sa.session.id()));
            let mut have = gw.dev.qp_session_ids(q).unwrap();
            want.sort();
            have.sort();
            assert_eq!(want.len(), 2);
            assert_eq!(have, want, "queue pair {q}");
        }
    }

    #[test]
    fn a_fifth_sa_is_refused_at_startup() {
        let mut cfg = limited("configs/ep0-2w.toml", 2);
        let mut extra = cfg.sas[0].clone();
        extra.spi = 2999;
        cfg.sas.push(extra);
        let dev = descriptor_device(&cfg).unwrap();
        let e = MemGateway::with_device(cfg, dev).err().expect("refused").to_string();
        assert!(e.contains("sa[4] (SPI 2999 outbound)"), "{e}");
        assert!(e.contains("max_sessions_per_qp = 2 × 2 worker(s) = 4 sessions, and the config has 5 SAs"), "{e}");
    }

    /// The same traffic through the software and the descriptor device
    /// gives byte-identical ESP (same SA, IV and sequence numbers), and the
    /// descriptor gateway's ESP decrypts at a software gateway.
    #[test]
    fn software_and_descriptor_gateways_emit_identical_esp() {
        let mut soft = MemGateway::from_config("configs/ep0-2w.toml");
        let cfg = limited("configs/ep0-2w.toml", 2);
        let dev = descriptor_device(&cfg).unwrap();
        let mut desc = MemGateway::with_device(cfg, dev).unwrap();
        let mut peer = MemGateway::from_config("configs/ep1-2w.toml");
        for n in 0..200u32 {
            let f = from_a(if n % 2 == 0 { 6001 } else { 443 }, n);
            soft.inject((n % 2) as usize, "inside", &f);
            desc.inject((n % 2) as usize, "inside", &f);
        }
        let mut a: Vec<Vec<u8>> = soft.run().into_iter().map(|x| x.2).collect();
        let mut b: Vec<Vec<u8>> = desc.run().into_iter().map(|x| x.2).collect();
        assert_eq!(b.len(), 200);
        for (i, f) in b.iter().enumerate() {
            peer.inject(i % 2, "outside", f);
        }
        assert_eq!(peer.run().len(), 200, "descriptor ESP decrypts at the software peer");
        a.sort();
        b.sort();
        assert_eq!(a, b);
        let s = desc.stats();
        assert_eq!(s.drops.values().sum::<u64>(), 0, "{:?}", s.drops);
    }
}
