//! 100,000 inbound + 100,000 outbound SAs (issue 6): the control thread's
//! tables ([`secgw::control::tables::install`], the path `secgw run` takes)
//! are built from a config holding them, every SA is found again — inbound
//! by (SPI, destination) as a worker looks them up, half of the inbound
//! SPIs shared by two SAs towards two addresses of ours (one IPv4, one
//! IPv6) — and the resident memory per SA and the lookup time are printed.
//!
//! One test in its own binary, so the process's VmRSS is this test's.

use secgw::config::model::{Direction, SaMode};
use secgw::crypto::soft::SoftDevice;
use secgw::crypto::CryptoDevice;
use std::hint::black_box;
use std::net::IpAddr;
use std::time::Instant;

const N: u32 = 100_000;
const IN_BASE: u32 = 0x0100_0000;
const OUT_BASE: u32 = 0x0200_0000;

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value")
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn hundred_thousand_sas_each_way_are_all_found() {
    let base = secgw::testkit::load_config(concat!(env!("CARGO_MANIFEST_DIR"), "/configs/ep1.toml"));
    let tmpl_in = base.sas.iter().find(|s| s.direction == Direction::Inbound && s.mode == SaMode::Tunnel).unwrap().clone();
    let tmpl_out = base.sas.iter().find(|s| s.direction == Direction::Outbound).unwrap().clone();
    let (v4_ours, v4_peer) = (ip("203.0.113.2"), ip("203.0.113.1"));
    let (v6_ours, v6_peer) = (ip("2001:db8:ff::2"), ip("2001:db8:ff::1"));
    let mut cfg = base.clone();
    cfg.sas.clear();
    cfg.policies.clear();
    for i in 0..N {
        // Inbound SA i: SPI IN_BASE + i/2, towards our IPv4 address (even
        // i) or our IPv6 address (odd i): every SPI is shared by two SAs.
        let mut sa = tmpl_in.clone();
        sa.spi = IN_BASE + i / 2;
        (sa.tunnel_src, sa.tunnel_dst) = if i % 2 == 0 { (v4_peer, v4_ours) } else { (v6_peer, v6_ours) };
        sa.key = zeroize::Zeroizing::new((0..20).map(|b| (i as u8).wrapping_mul(7) ^ b).collect());
        cfg.sas.push(sa);
        let mut sa = tmpl_out.clone();
        sa.spi = OUT_BASE + i;
        cfg.sas.push(sa);
    }
    let dev = SoftDevice::new(1);
    let macs = [[2, 0, 0, 0, 1, 2], [2, 0, 0, 0, 1, 1]];
    let rss0 = rss_kib();
    let t0 = Instant::now();
    let (tables, _binding) = secgw::control::tables::install(&cfg, &dev, &macs).expect("tables build");
    let build = t0.elapsed();
    let rss1 = rss_kib();
    let sad = &tables.sad;
    assert_eq!(sad.inbound_sas().count(), N as usize);
    assert_eq!(sad.outbound_sas().count(), N as usize);
    assert_eq!(sad.inbound_indexed(), N as usize, "every inbound SA indexed once");

    // Every inbound SA by (SPI, destination): the right one.
    for i in 0..N {
        let (spi, dst) = (IN_BASE + i / 2, if i % 2 == 0 { v4_ours } else { v6_ours });
        let slot = sad.inbound_lookup(spi, dst).unwrap_or_else(|| panic!("SA {i}: SPI {spi:#x} to {dst}"));
        let e = sad.inbound_at(slot).unwrap();
        assert_eq!((e.sa.spi, e.sa.tunnel_dst), (spi, dst), "SA {i}");
    }
    // The SPIs towards an address of ours no SA has, SPIs no SA has, SPI 0.
    for i in (0..N / 2).step_by(97) {
        assert_eq!(sad.inbound_lookup(IN_BASE + i, ip("203.0.113.3")), None);
    }
    assert_eq!(sad.inbound_lookup(IN_BASE + N, v4_ours), None);
    assert_eq!(sad.inbound_lookup(OUT_BASE, v4_ours), None, "an outbound SPI is no inbound SA");
    assert_eq!(sad.inbound_lookup(0, v4_ours), None);
    // Every outbound SA in its slot, each SPI once.
    let mut spis: Vec<u32> = sad.outbound_sas().map(|(_, s)| s.spi).collect();
    spis.sort_unstable();
    assert!(spis.iter().copied().eq(OUT_BASE..OUT_BASE + N));

    // Lookup time over all inbound SAs, in a shuffled order.
    let mut order: Vec<u32> = (0..N).collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for k in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(k, (x % (k as u64 + 1)) as usize);
    }
    let keys: Vec<(u32, IpAddr)> = order.iter().map(|&i| (IN_BASE + i / 2, if i % 2 == 0 { v4_ours } else { v6_ours })).collect();
    let rounds = 10;
    let t = Instant::now();
    let mut found = 0usize;
    for _ in 0..rounds {
        for &(spi, dst) in &keys {
            found += black_box(sad.inbound_lookup(black_box(spi), black_box(dst))).is_some() as usize;
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
    assert_eq!(found, rounds * keys.len());
    let session = dev
        .session_create(&secgw::crypto::SymXform {
            algorithm: tmpl_in.algorithm,
            direction: secgw::crypto::CipherDirection::Decrypt,
            key: tmpl_in.key[..16].to_vec(),
            salt: [0; 4],
            icv_len: 16,
            auth_key: Vec::new(),
        })
        .unwrap();
    let ks = session.key_schedule_bytes();
    let per_sa = (rss1.saturating_sub(rss0) * 1024) as f64 / (2 * N) as f64;
    println!(
        "sad_scale: {N} inbound (SPIs shared by 2) + {N} outbound SAs: tables built in {:.2} s; \
         VmRSS {} → {} KiB, {:.0} bytes per SA ({:.0} beyond the {ks}-byte AES-128-GCM key schedule); \
         inbound lookup by (SPI, destination) {ns:.1} ns",
        build.as_secs_f64(),
        rss0,
        rss1,
        per_sa,
        per_sa - ks as f64
    );
}
