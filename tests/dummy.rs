//! Dummy packets on the sender (RFC 4303 §2.6, RFC-RULES 12): Next Header
//! 59, a real sequence number, the SA's outer header.
//!
//! * `esp::outbound::prepare_dummy` for every algorithm, IPv4 and IPv6
//!   outer headers, with and without UDP encapsulation: the outer header
//!   is the one real packets get, and the receiver's ESP code opens it and
//!   reports `Dummy`; with NULL encryption the zero payload and Next Header
//!   59 are visible in the clear and checked byte by byte.
//! * Through the gateways (in-memory ports, configs/ep0.toml → ep1.toml
//!   with `dummy_interval_ms` on SA 1001): dummies interleave with real
//!   traffic in one gap-free sequence, open with the `aes-gcm` crate
//!   directly to `dummy_len` zero bytes with Next Header 59, and gw1
//!   counts them under `dummy` and delivers only the real packets.
//! * A learned path MTU (RFC 4301 §8.2.1) cuts a dummy's payload to what
//!   fits, in `prepare_dummy` for every layout and through gw0 after a
//!   router's report, until the value ages out.

mod common;
use common::{eth, mac, open_gcm128, run_one, udp_packet, Gw};
use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
use secgw::crypto::{Algorithm, CryptoDevice, QpConf};
use secgw::esp::{self, DummyPlan, EspError, InboundState, OutboundSa, OutboundState, UdpEncap};
use secgw::io::PktBuf;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

const ETH: usize = 14;

/// A tunnel-mode outbound SA of `alg` between `src` and `dst` (test keys).
fn outbound_sa(dev: &SoftDevice, alg: Algorithm, src: IpAddr, dst: IpAddr, udp_encap: Option<UdpEncap>) -> OutboundSa {
    let (mut sa, _) = common::tunnel_sas(dev, alg, src, dst);
    sa.udp_encap = udp_encap;
    sa.dummy = Some(DummyPlan { interval: Duration::from_millis(1), len: 0 });
    sa
}

/// Every outbound layout a dummy can take: each algorithm, IPv4 and IPv6
/// endpoints, with and without UDP encapsulation.
fn layouts() -> impl Iterator<Item = (Algorithm, IpAddr, IpAddr, Option<UdpEncap>)> {
    let ends: [(IpAddr, IpAddr); 2] = [
        ("203.0.113.1".parse().unwrap(), "203.0.113.2".parse().unwrap()),
        ("2001:db8:ff::1".parse().unwrap(), "2001:db8:ff::2".parse().unwrap()),
    ];
    Algorithm::ALL.into_iter().flat_map(move |alg| ends.into_iter().flat_map(move |(src, dst)| [None, Some(UdpEncap { sport: 4500, dport: 4501 })].map(|udp| (alg, src, dst, udp))))
}

#[test]
fn prepare_dummy_every_algorithm_family_and_encapsulation() {
    let dev = SoftDevice::new(1);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
    let mut checked = 0;
    for (alg, src, dst, udp) in layouts() {
        let sa = outbound_sa(&dev, alg, src, dst, udp);
        let (_, isa) = common::tunnel_sas(&dev, alg, src, dst);
        let mut st = OutboundState { seq: 41, ..Default::default() };
        let mut ist = InboundState::new(&isa);
        for len in [0usize, 1, 37, esp::outbound::MAX_DUMMY_LEN] {
            let name = format!("{} {src} udp={} len={len}", alg.name(), udp.is_some());
            // A used buffer: its old bytes must not leak into the dummy.
            let mut buf = PktBuf::new();
            assert!(buf.copy_from(&[0xee; 1600]));
            let op = esp::outbound::prepare_dummy(&sa, &mut st, buf, len, esp::outbound::seq_ident).map_err(|e| e.0).unwrap();
            let out = esp::outbound::finish(run_one(&mut qp, op)).map_err(|e| e.0).unwrap();
            let f = out.frame();
            let ip = &f[ETH..];
            let v6 = src.is_ipv6();
            let hl = if v6 { 40 } else { 20 };
            let proto = if v6 { ip[6] } else { ip[9] };
            assert_eq!(proto, if udp.is_some() { 17 } else { 50 }, "{name}: outer protocol");
            let total = if v6 { 40 + u16::from_be_bytes([ip[4], ip[5]]) as usize } else { u16::from_be_bytes([ip[2], ip[3]]) as usize };
            assert_eq!(total, ip.len(), "{name}: outer length");
            assert_eq!(total, esp::outbound::tunnel_len(alg, alg.default_icv_len(), v6, udp.is_some(), 0, len), "{name}: size as tunnel_len says");
            if !v6 {
                assert_eq!(ip[8], 33, "{name}: TTL");
                assert_eq!(ip[6] & 0x40, 0, "{name}: DF copy with no inner header: clear");
                assert_eq!(common::ip_checksum(&ip[..20]), 0, "{name}: header checksum");
            } else {
                assert_eq!(ip[7], 33, "{name}: hop limit");
            }
            let esp_off = hl + if udp.is_some() { 8 } else { 0 };
            let seq = u32::from_be_bytes(ip[esp_off + 4..esp_off + 8].try_into().unwrap());
            assert_eq!(seq as u64, st.seq, "{name}: the SA's sequence number");
            if alg.cipher() == secgw::crypto::Cipher::Null {
                // NULL encryption: the payload is on the wire as is.
                let p = &ip[esp_off + 8..ip.len() - alg.default_icv_len()];
                let pad = p[p.len() - 2] as usize;
                assert_eq!(p[p.len() - 1], 59, "{name}: Next Header 59 in the clear");
                assert_eq!(p.len() - 2 - pad, len, "{name}: payload length");
                assert!(p[..len].iter().all(|&b| b == 0), "{name}: zero payload");
            }
            let op = esp::inbound::prepare(&isa, &ist, out, ETH + esp_off).map_err(|e| e.0).unwrap();
            let r = esp::inbound::finish(&mut ist, run_one(&mut qp, op), 0).map_err(|e| e.0);
            assert_eq!(r.err(), Some(EspError::Dummy), "{name}: the receiver sees a dummy");
            checked += 1;
        }
    }
    assert_eq!(checked, Algorithm::ALL.len() * 2 * 2 * 4);
}

#[test]
fn prepare_dummy_refuses_transport_and_oversize() {
    let dev = SoftDevice::new(1);
    let alg = Algorithm::Aes128Gcm;
    let mut sa = outbound_sa(&dev, alg, "203.0.113.1".parse().unwrap(), "203.0.113.2".parse().unwrap(), None);
    sa.transport = true;
    let mut st = OutboundState::default();
    let e = esp::outbound::prepare_dummy(&sa, &mut st, PktBuf::new(), 10, esp::outbound::seq_ident).map_err(|e| e.0).err();
    assert_eq!(e, Some(EspError::BadInner), "transport SA");
    sa.transport = false;
    let e = esp::outbound::prepare_dummy(&sa, &mut st, PktBuf::new(), esp::outbound::MAX_DUMMY_LEN + 1, esp::outbound::seq_ident).map_err(|e| e.0).err();
    assert_eq!(e, Some(EspError::BadInner), "too long");
    assert_eq!(st.seq, 0, "a refused dummy takes no sequence number");
    // Sequence exhaustion applies to dummies as to any packet (RFC 4303 §3.3.3).
    st.seq = u32::MAX as u64;
    let e = esp::outbound::prepare_dummy(&sa, &mut st, PktBuf::new(), 0, esp::outbound::seq_ident).map_err(|e| e.0).err();
    assert_eq!(e, Some(EspError::SeqExhausted));
}

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

fn from_host_a(n: u8) -> Vec<u8> {
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, &[n; 20]))
}

/// `configs/<base>` with `extra` after `spi = <spi>`.
fn with_dummies(base: &str, spi: u32, extra: &str) -> String {
    common::edited_config(base, "dummy", |t| t.replacen(&format!("spi = {spi}\n"), &format!("spi = {spi}\n{extra}\n"), 1))
}

#[test]
fn gateway_interleaves_dummies_with_traffic() {
    const LEN: usize = 100;
    let mut gw0 = Gw::from_config(&with_dummies("ep0.toml", 1001, &format!("dummy_interval_ms = 5\ndummy_len = {LEN}")));
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let key = gw0.sa_key(1001, false);
    let mut wan = Vec::new();
    let start = std::time::Instant::now();
    for round in 0..6u8 {
        // Two real packets, then wait past the interval and poll: a dummy.
        wan.extend(gw0.push("inside", &[from_host_a(2 * round), from_host_a(2 * round + 1)]));
        std::thread::sleep(Duration::from_millis(7));
        wan.extend(gw0.push("inside", &[]));
    }
    assert!(wan.iter().all(|(p, _)| p == "outside"), "everything leaves on the wan");
    let (mut real, mut dummies) = (0u64, 0u64);
    let mut dummy_idents = Vec::new();
    for (k, (_, f)) in wan.iter().enumerate() {
        let esp = &f[ETH + 20..];
        assert_eq!(f[ETH + 9], 50);
        assert_eq!(u32::from_be_bytes(esp[..4].try_into().unwrap()), 1001);
        assert_eq!(u32::from_be_bytes(esp[4..8].try_into().unwrap()), k as u32 + 1, "one sequence, no gaps, in send order");
        let plain = open_gcm128(&key, esp);
        let (nh, pad) = (plain[plain.len() - 1], plain[plain.len() - 2] as usize);
        match nh {
            59 => {
                assert_eq!(plain.len() - 2 - pad, LEN, "dummy payload length");
                assert!(plain[..LEN].iter().all(|&b| b == 0));
                assert_eq!(f[ETH + 6] & 0x40, 0, "a dummy's outer header has DF clear");
                dummy_idents.push(u16::from_be_bytes([f[ETH + 4], f[ETH + 5]]));
                dummies += 1;
            }
            4 => {
                assert_eq!(u16::from_be_bytes([f[ETH + 4], f[ETH + 5]]), k as u16 + 1, "DF set: the sequence number's low bits");
                real += 1
            }
            _ => panic!("next header {nh}"),
        }
    }
    assert_eq!(real, 12);
    // DF clear: the one worker's identification counter, one step per
    // dummy (RFC 6864 §4), not the sequence numbers the real packets
    // interleave with.
    assert!(dummy_idents.windows(2).all(|w| w[1] == w[0].wrapping_add(1)), "{dummy_idents:?}");
    // Each 7 ms wait passes a due time; never more than one per interval.
    let most = start.elapsed().as_millis() as u64 / 5 + 1;
    assert!(dummies >= 6 && dummies <= most, "{dummies} dummies, expected 6..={most}");
    let s0 = gw0.stats();
    assert_eq!(s0.dummies_sent, dummies);
    let sa = s0.sas.iter().find(|s| s.spi == 1001 && s.direction == "outbound").unwrap();
    assert_eq!((sa.packets, sa.dummies), (12, dummies), "dummies are not SA traffic");

    let frames: Vec<Vec<u8>> = wan.into_iter().map(|(_, f)| f).collect();
    let delivered = gw1.push("outside", &frames);
    assert_eq!(delivered.len() as u64, real, "gw1 delivers only the real packets");
    assert!(delivered.iter().all(|(p, f)| p == "inside" && f.len() == ETH + 48));
    assert_eq!(gw1.drop_count("dummy"), dummies, "gw1 counts every dummy");
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), dummies, "and nothing else");
    let sa1 = gw1.stats().sas.into_iter().find(|s| s.spi == 1001 && s.direction == "inbound").unwrap();
    assert_eq!((sa1.packets, sa1.errors), (12, 0), "a received dummy is not an SA error (RFC 4303 §2.6)");
}

#[test]
fn gateway_dummies_over_ipv6_with_udp_encap_and_none_when_off() {
    let mut gw0 = Gw::from_config(&with_dummies("ep0-v6.toml", 1101, "udp_encap = true\ndummy_interval_ms = 1\ndummy_len = 1400"));
    let mut gw1 = Gw::from_config(&with_dummies("ep1-v6.toml", 1101, "udp_encap = true"));
    std::thread::sleep(Duration::from_millis(3));
    let wan = gw0.push("inside", &[]);
    assert_eq!(wan.len(), 1, "one dummy per due SA per poll, late ones not caught up");
    let f = &wan[0].1;
    assert_eq!(u16::from_be_bytes([f[12], f[13]]), 0x86dd);
    assert_eq!(f[ETH + 6], 17, "ESP in UDP");
    assert!(f.len() - ETH <= 1500, "fits the MTU");
    let back = gw1.push("outside", std::slice::from_ref(f));
    assert!(back.is_empty());
    assert_eq!(gw1.drop_count("dummy"), 1);
    // Without dummy_interval_ms nothing is sent however long the wait.
    let mut quiet = Gw::from_config("configs/ep0.toml");
    std::thread::sleep(Duration::from_millis(3));
    assert!(quiet.push("inside", &[]).is_empty());
    assert_eq!(quiet.stats().dummies_sent, 0);
}

/// `prepare_dummy` cuts the payload to what fits a learned path MTU
/// (RFC 4301 §8.2.1), for every algorithm, both outer families, with and
/// without UDP encapsulation, with the algorithm's own padding and with
/// `pad_align = 64`, at path MTUs from 1400 down to each family's floor
/// (552 for IPv4, 1280 for IPv6): the payload is the largest whose ESP
/// packet (the test's own sum of the layout: outer header, UDP, ESP
/// header, IV, payload + 2 padded to the alignment, ICV) fits the path
/// MTU, or the asked length when that fits already; the outer packet is
/// never above the path MTU, and the receiver still sees a dummy. With
/// no path MTU known the asked length goes out whole.
#[test]
fn prepare_dummy_is_cut_to_a_learned_path_mtu() {
    let dev = SoftDevice::new(1);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
    let mut cut = 0;
    for (alg, src, dst, udp) in layouts() {
        let v6 = src.is_ipv6();
        let (_, isa) = common::tunnel_sas(&dev, alg, src, dst);
        for (pad_align, mtu) in [0usize, 64].into_iter().flat_map(|p| [None, Some(1400u16), Some(1000), Some(700), Some(576), Some(552), Some(1280)].map(|m| (p, m))) {
            if mtu.is_some_and(|m| !v6 && m == 1280 || v6 && m < 1280) {
                continue;
            }
            let align = pad_align.max(alg.block_size());
            let own_len = |payload: usize| (if v6 { 40 } else { 20 }) + if udp.is_some() { 8 } else { 0 } + 8 + alg.iv_len() + (payload + 2).div_ceil(align) * align + alg.default_icv_len();
            let mut sa = outbound_sa(&dev, alg, src, dst, udp);
            sa.pad_align = pad_align;
            if let Some(m) = mtu {
                assert!(sa.path_mtu.lower(m, 0, u64::MAX, 1500), "the report is taken");
            }
            let mtu = mtu.unwrap_or(u16::MAX);
            let mut st = OutboundState::default();
            let mut ist = InboundState::new(&isa);
            for len in [0usize, 500, esp::outbound::MAX_DUMMY_LEN] {
                let name = format!("{} {src} udp={} pad_align {pad_align} path MTU {mtu} len={len}", alg.name(), udp.is_some());
                let want = (0..=len).rev().find(|&l| own_len(l) <= mtu as usize).unwrap();
                let op = esp::outbound::prepare_dummy(&sa, &mut st, PktBuf::new(), len, esp::outbound::seq_ident).map_err(|e| e.0).unwrap();
                let out = esp::outbound::finish(run_one(&mut qp, op)).map_err(|e| e.0).unwrap();
                let ip_len = out.frame().len() - ETH;
                assert_eq!(ip_len, own_len(want), "{name}: the dummy carries {want} bytes");
                assert!(ip_len <= mtu as usize, "{name}: {ip_len} bytes over the path MTU");
                if want < len {
                    cut += 1;
                }
                let esp_off = if v6 { 40 } else { 20 } + if udp.is_some() { 8 } else { 0 };
                if alg.cipher() == secgw::crypto::Cipher::Null {
                    let p = &out.frame()[ETH + esp_off + 8..out.frame().len() - alg.default_icv_len()];
                    assert_eq!(p.len() - 2 - p[p.len() - 2] as usize, want, "{name}: payload length in the clear");
                }
                let op = esp::inbound::prepare(&isa, &ist, out, ETH + esp_off).map_err(|e| e.0).unwrap();
                let r = esp::inbound::finish(&mut ist, run_one(&mut qp, op), 0).map_err(|e| e.0);
                assert_eq!(r.err(), Some(EspError::Dummy), "{name}: the receiver sees a dummy");
            }
        }
    }
    assert!(cut > 100, "only {cut} dummies were cut: the test exercises too little");
}

/// Through gw0, on the gateway's own clock (`run_at`, no sleeping): a
/// router's report of a path MTU of 700 cuts SA 1001's 1000-byte dummies
/// to 646 bytes (700 less 20 outer, 8 ESP, 8 IV, 16 ICV, to 4 bytes, less
/// 2), in ESP packets of exactly 700 bytes that open with the `aes-gcm`
/// crate to zeros and Next Header 59 and that gw1 counts as dummies; once
/// the learned value ages out (`pmtu_timeout_s = 1`), with no real packet
/// in between to clear it, dummies are 1000 bytes again.
#[test]
fn gateway_dummies_are_cut_to_a_learned_path_mtu() {
    const LEN: usize = 1000;
    const FITS: usize = (700 - 20 - 8 - 8 - 16) / 4 * 4 - 2;
    const WHOLE: usize = 20 + 8 + 8 + 1004 + 16;
    let cfg = common::edited_config("ep0.toml", "dummy-pmtu", |t| {
        t.replacen("spi = 1001\n", &format!("spi = 1001\ndummy_interval_ms = 400\ndummy_len = {LEN}\n"), 1).replacen("[gateway]\n", "[gateway]\npmtu_timeout_s = 1\n", 1)
    });
    let mut gw0 = Gw::from_config(&cfg);
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let key = gw0.sa_key(1001, false);
    // The first dummy is due 400 ms after gw0 was built, at or before t0 + 400 ms.
    let t0 = std::time::Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let frames = |out: Vec<(usize, String, Vec<u8>)>| out.into_iter().map(|(_, p, f)| (p, f)).collect::<Vec<_>>();
    // The one frame gw0 sends at `ms`, a dummy, opened: (ESP packet length, payload length).
    let mut dummy_at = |gw0: &mut Gw, ms: u64| {
        let wan = frames(gw0.inner.run_at(at(ms)));
        assert_eq!(wan.len(), 1, "one dummy at {ms} ms");
        let f = &wan[0].1;
        let plain = open_gcm128(&key, &f[ETH + 20..]);
        let (nh, pad) = (plain[plain.len() - 1], plain[plain.len() - 2] as usize);
        assert_eq!(nh, 59, "a dummy");
        let payload = plain.len() - 2 - pad;
        assert!(plain[..payload].iter().all(|&b| b == 0));
        assert!(gw1.push("outside", std::slice::from_ref(f)).is_empty());
        (f.len() - ETH, payload)
    };
    assert_eq!(dummy_at(&mut gw0, 400), (WHOLE, LEN), "no path MTU known: the whole dummy");
    // A real packet, quoted by a router's report of 700.
    gw0.inner.inject(0, "inside", &from_host_a(1));
    let real = frames(gw0.inner.run_at(at(500)));
    assert_eq!(real.len(), 1);
    gw0.inner.inject(0, "outside", &common::frag_needed(Ipv4Addr::new(203, 0, 113, 1), 700, &real[0].1[ETH..], 28));
    assert!(gw0.inner.run_at(at(510)).is_empty());
    assert_eq!(dummy_at(&mut gw0, 800), (700, FITS), "cut to the path MTU");
    assert_eq!(dummy_at(&mut gw0, 1200), (700, FITS), "and the next one");
    // Learned at 510 ms for 1 s: aged out at 1600 ms.
    assert_eq!(dummy_at(&mut gw0, 1600), (WHOLE, LEN), "the aged-out path MTU no longer cuts");
    assert_eq!(gw1.drop_count("dummy"), 4);
}
