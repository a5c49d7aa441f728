//! Reassembly of outer IPv4 fragments at the receiving gateway (RFC 4303
//! §3.4.1, RFC 791 §3.2) over in-memory ports: gw0 with a small wan MTU
//! fragments its ESP (DF clear), gw1 reassembles before the SAD lookup,
//! decrypts and forwards the inner packets byte for byte. Fragments are
//! also cut here by hand (not with the gateway's fragmenter) and shuffled,
//! duplicated, overlapped, left incomplete.
//!
//! Outer IPv6 fragments (RFC 8200 §4.5): ESP for gw1's SA 1101
//! (configs/ep1-v6.toml) encrypted by scapy and cut by scapy's
//! `fragment6()` (tests/vectors/frag6.json, made by gen_frag6.py), with and
//! without extension headers before the Fragment header, in any order.

mod common;
use common::vectors::{h, json};
use common::*;
use std::net::Ipv4Addr;
use std::time::Duration;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

use secgw::testkit::Rng;

/// UDP hostA → hostB on `dport`, `total` bytes of IP, DF clear, as gw0's
/// inside receives it.
fn from_host_a(total: usize, dport: u16) -> Vec<u8> {
    let payload: Vec<u8> = (0..total - 28).map(|i| (i as u8).wrapping_mul(31).wrapping_add(dport as u8)).collect();
    let mut ip = udp_packet(HOST_A, HOST_B, 0, 64, 40000, dport, &payload);
    ip[6] = 0; // DF clear
    ip[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &ip)
}

/// `base` with `mtu = N` on the port of interface `iface`.
fn with_mtu(base: &str, iface: &str, mtu: usize, tag: &str) -> String {
    edited_config(base, tag, |t| {
        let at = format!("interface = \"{iface}\"");
        assert!(t.contains(&at));
        t.replacen(&at, &format!("{at}\nmtu = {mtu}"), 1)
    })
}

/// `base` with a `[reassembly]` table.
fn with_reassembly(base: &str, table: &str, tag: &str) -> String {
    edited_config(base, tag, |t| format!("{t}\n[reassembly]\n{table}\n"))
}

/// The inner packet as gw1 forwards it, compared with what hostA sent:
/// the same but for the TTL (− 1 at each gateway) and the header checksum
/// (which must verify).
fn assert_same_inner(out: &[u8], sent: &[u8]) {
    let (o, s) = (&out[14..], &sent[14..]);
    assert_eq!(o.len(), s.len(), "inner length");
    assert_eq!(ip_checksum(&o[..20]), 0, "inner header checksum");
    assert_eq!(o[8], s[8] - 2, "TTL − 1 at gw0 and at gw1");
    assert_eq!((&o[..8], &o[9..10], &o[12..]), (&s[..8], &s[9..10], &s[12..]), "inner packet byte for byte");
}

/// Two fragments of about half the data each.
fn halves(frame: &[u8]) -> Vec<Vec<u8>> {
    let f = cut(frame, (frame.len() - 34).div_ceil(16) * 8);
    assert_eq!(f.len(), 2);
    f
}

fn is_fragment(f: &[u8]) -> bool {
    u16::from_be_bytes([f[20], f[21]]) & 0x3fff != 0
}

/// Cuts the IPv4 packet of `frame` (20-byte header) into fragments of
/// `chunk` data bytes (a multiple of 8), by hand.
fn cut(frame: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let ip = &frame[14..];
    let data = &ip[20..];
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let n = chunk.min(data.len() - off);
        let mut h = ip[..20].to_vec();
        h[2..4].copy_from_slice(&((20 + n) as u16).to_be_bytes());
        let mf = if off + n < data.len() { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&((off / 8) as u16 | mf).to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let ck = ip_checksum(&h);
        h[10..12].copy_from_slice(&ck.to_be_bytes());
        let mut f = frame[..14].to_vec();
        f.extend_from_slice(&h);
        f.extend_from_slice(&data[off..off + n]);
        out.push(f);
        off += n;
    }
    out
}

/// Sends `n` datagrams of random sizes through gw0 (wan MTU 576, DF clear),
/// shuffles the fragments within windows of 8 datagrams, and checks gw1
/// delivers every inner packet byte for byte.
fn fragmented_tunnel(gw0_cfg: &str, gw1_cfg: &str, n: usize, seed: u64) {
    let mut gw0 = Gw::from_config(gw0_cfg);
    let mut gw1 = Gw::from_config(gw1_cfg);
    let mut rng = Rng(seed);
    let mut sent = Vec::new();
    let mut esp = Vec::new();
    for i in 0..n {
        let f = from_host_a(28 + rng.below(1500 - 28 + 1) as usize, 10000 + i as u16);
        let out = gw0.push("inside", std::slice::from_ref(&f));
        assert!(!out.is_empty() && out.iter().all(|(p, _)| p == "outside"), "{i}: {:?}", gw0.stats().drops);
        esp.push(out.into_iter().map(|(_, f)| f).collect::<Vec<_>>());
        sent.push(f);
    }
    let fragmented = esp.iter().filter(|e| e.len() > 1).count();
    let nfrags: usize = esp.iter().filter(|e| e.len() > 1).map(|e| e.len()).sum();
    assert!(fragmented > n / 2, "most datagrams are fragmented at MTU 576 ({fragmented} of {n})");
    assert!(esp.iter().flatten().all(|f| f.len() - 14 <= 576));
    let mut wire = Vec::new();
    for window in esp.chunks(8) {
        let mut w: Vec<Vec<u8>> = window.iter().flatten().cloned().collect();
        rng.shuffle(&mut w);
        wire.extend(w);
    }
    let out = gw1.push("outside", &wire);
    let s = gw1.stats();
    assert_eq!(out.len(), n, "every datagram delivered once; drops {:?}", s.drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
    for (p, f) in &out {
        assert_eq!(p, "inside");
        let dport = u16::from_be_bytes([f[14 + 22], f[14 + 23]]);
        assert_same_inner(f, &sent[(dport - 10000) as usize]);
    }
    assert_eq!(s.reassembled, fragmented as u64);
    assert_eq!(s.frags_received, nfrags as u64);
    assert_eq!(s.frags_reassembled, nfrags as u64);
    assert_eq!(s.frags_pending, 0);
    assert_eq!(s.drops.values().sum::<u64>(), 0);
    assert_accounted(&s, "gw1");
    assert_eq!(gw1.worker().free_buffers(), 512, "every buffer back in gw1's pool");
}

#[test]
fn gw0_fragments_gw1_reassembles_shuffled() {
    let gw0 = with_mtu("ep0.toml", "gw0-out", 576, "reasm-esp");
    fragmented_tunnel(&gw0, "configs/ep1.toml", 200, 0x1234_5678_9abc_def1);
}

#[test]
fn esp_in_udp_fragments_reassemble() {
    let natt = |t: String| t.replacen("spi = 1001\n", "spi = 1001\nudp_encap = true\n", 1);
    let gw0 = edited_config("ep0.toml", "reasm-natt", |t| natt(t).replacen("interface = \"gw0-out\"", "interface = \"gw0-out\"\nmtu = 576", 1));
    let gw1 = edited_config("ep1.toml", "reasm-natt", natt);
    // A non-first fragment has no UDP header: it must still reach the reassembler.
    let mut g0 = Gw::from_config(&gw0);
    let out = g0.push("inside", &[from_host_a(1200, 7)]);
    assert!(out.len() >= 3);
    assert_eq!(out[0].1[14 + 9], 17, "ESP in UDP");
    fragmented_tunnel(&gw0, &gw1, 100, 0x0bad_cafe_f00d_0001);
}

/// Fragments cut by hand (not by the gateway), 8 bytes of data (≈ 180
/// fragments, with `max_fragments = 256`) and up, in order, reversed and
/// shuffled: the datagram comes out once.
#[test]
fn hand_cut_fragments_in_any_order() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config(&with_reassembly("ep1.toml", "max_fragments = 256", "reasm-hand"));
    let mut rng = Rng(77);
    for (i, chunk) in [8usize, 16, 64, 256, 512, 1024].into_iter().enumerate() {
        let f = from_host_a(1400, 20000 + i as u16);
        let esp = gw0.push("inside", std::slice::from_ref(&f)).remove(0).1;
        assert!(!is_fragment(&esp));
        let mut frags = cut(&esp, chunk);
        match i % 3 {
            0 => {}
            1 => frags.reverse(),
            _ => rng.shuffle(&mut frags),
        }
        let out = gw1.push("outside", &frags);
        assert_eq!(out.len(), 1, "chunk {chunk}: {:?}", gw1.stats().drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
        assert_same_inner(&out[0].1, &f);
    }
    let s = gw1.stats();
    assert_eq!(s.reassembled, 6);
    assert_accounted(&s, "gw1");
}

/// Two workers: the fragments arrive at worker 1, SA 2001 belongs to
/// worker 0. Worker 1 reassembles (a non-first fragment has no SPI) and
/// hands the datagram over.
#[test]
fn reassembled_by_the_receiving_worker_then_handed_to_the_owner() {
    let gw0_cfg = with_mtu("ep0-2w.toml", "gw0-out", 576, "reasm-2w");
    let mut gw0 = MemGateway::from_config(&gw0_cfg);
    let mut gw1 = MemGateway::from_config("configs/ep1-2w.toml");
    let mut sent = Vec::new();
    for i in 0..20u16 {
        let f = from_host_a(1000 + i as usize * 20, 443 + i);
        gw0.inject(0, "inside", &f);
        sent.push(f);
    }
    let mut frags: Vec<Vec<u8>> = gw0.run().into_iter().map(|x| x.2).collect();
    assert!(frags.len() >= 40, "{}", frags.len());
    assert!(frags.iter().all(|f| is_fragment(f)));
    let spi = u32::from_be_bytes(frags[0][34..38].try_into().unwrap());
    let owner = gw1.tables.sad.inbound_sas().map(|(_, e)| e).find(|e| e.sa.spi == spi).unwrap().sa.owner;
    let other = 1 - owner;
    frags.reverse();
    for f in &frags {
        gw1.inject(other, "outside", f);
    }
    let out = gw1.run();
    assert_eq!(out.len(), 20, "{:?}", gw1.stats().drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
    for (w, p, f) in &out {
        assert_eq!((*w, p.as_str()), (owner, "inside"), "sent by the SA's owner");
        let dport = u16::from_be_bytes([f[14 + 22], f[14 + 23]]);
        assert_same_inner(f, &sent[(dport - 443) as usize]);
    }
    let s = gw1.stats();
    assert_eq!(s.workers[other].handoff_out, 20, "20 reassembled datagrams handed over, not fragments");
    assert_eq!(s.workers[owner].handoff_in, 20);
    assert_eq!(gw1.counters[other].reassembled.get(), 20);
    assert_eq!(gw1.counters[owner].frags_received.get(), 0);
    assert_accounted(&s, "gw1");
    for w in &gw1.workers {
        assert_eq!(w.free_buffers(), 512);
    }
}

#[test]
fn duplicate_overlap_and_missing_fragments() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let esp: Vec<Vec<u8>> = (0..3).map(|i| gw0.push("inside", &[from_host_a(1000, 30000 + i)]).remove(0).1).collect();
    // Duplicate fragment: dropped alone, the datagram delivered once.
    let f = cut(&esp[0], 400);
    let out = gw1.push("outside", &[f[0].clone(), f[1].clone(), f[0].clone(), f[2].clone()]);
    assert_eq!(out.len(), 1);
    assert_eq!(gw1.drop_count("reasm_duplicate"), 1);
    // Overlap: the datagram is dropped with every fragment, even those after.
    let f = cut(&esp[1], 400);
    let overlapping = cut(&esp[1], 200)[1].clone(); // bytes 200..400 of the first 400
    let out = gw1.push("outside", &[f[0].clone(), overlapping, f[1].clone(), f[2].clone()]);
    assert!(out.is_empty());
    assert_eq!(gw1.drop_count("reasm_overlap"), 4);
    // Missing last fragment: held, nothing out, nothing dropped yet.
    let f = cut(&esp[2], 400);
    assert!(gw1.push("outside", &f[..2]).is_empty());
    let s = gw1.stats();
    assert_eq!(s.frags_pending, 2);
    assert_accounted(&s, "gw1");
    assert_eq!(gw1.worker().free_buffers(), 511, "one assembly buffer held");
    // It completes later.
    assert_eq!(gw1.push("outside", &[f[2].clone()]).len(), 1);
    assert_eq!(gw1.worker().free_buffers(), 512);
    assert_accounted(&gw1.stats(), "gw1");
}

#[test]
fn incomplete_datagram_times_out_and_buffers_come_back() {
    let cfg = with_reassembly("ep1.toml", "timeout_ms = 50", "reasm-timeout");
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config(&cfg);
    let esp = gw0.push("inside", &[from_host_a(1400, 1)]).remove(0).1;
    let f = cut(&esp, 512);
    assert!(gw1.push("outside", &f[..2]).is_empty());
    assert_eq!(gw1.stats().frags_pending, 2);
    assert_eq!(gw1.worker().free_buffers(), 511);
    std::thread::sleep(Duration::from_millis(80));
    // An idle poll expires it (no new fragment needed).
    assert!(gw1.push("outside", &[]).is_empty());
    let s = gw1.stats();
    assert_eq!(s.drops["reasm_timeout"], 2, "one per fragment held");
    assert_eq!(s.frags_pending, 0);
    assert_accounted(&s, "gw1");
    assert_eq!(gw1.worker().free_buffers(), 512);
    // The late last fragment starts a new datagram that never completes.
    assert!(gw1.push("outside", &f[2..]).is_empty());
    assert_eq!(gw1.stats().frags_pending, 1);
}

#[test]
fn table_full_evicts_the_oldest() {
    let cfg = with_reassembly("ep1.toml", "contexts = 2", "reasm-full");
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config(&cfg);
    let esp: Vec<Vec<Vec<u8>>> = (0..3).map(|i| halves(&gw0.push("inside", &[from_host_a(1000, 100 + i)]).remove(0).1)).collect();
    // First halves of three datagrams: the first is evicted by the third.
    assert!(gw1.push("outside", &[esp[0][0].clone(), esp[1][0].clone(), esp[2][0].clone()]).is_empty());
    assert_eq!(gw1.drop_count("reasm_table_full"), 1);
    let out = gw1.push("outside", &[esp[1][1].clone(), esp[2][1].clone()]);
    assert_eq!(out.len(), 2);
    assert_accounted(&gw1.stats(), "gw1");
    assert_eq!(gw1.worker().free_buffers(), 512);
}

#[test]
fn too_big_and_bad_fragments() {
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    // 2100 bytes of "ESP" from gw0 to gw1: more than one buffer holds.
    let mut ip = udp_packet(Ipv4Addr::new(203, 0, 113, 1), Ipv4Addr::new(203, 0, 113, 2), 0, 64, 1, 2, &vec![0x5a; 2100 - 28]);
    ip[9] = 50;
    ip[6] = 0;
    ip[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    let big = eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x0800, &ip);
    let f = cut(&big, 1024); // 1024 + 1024 + 32: the last reaches past 2048
    assert!(gw1.push("outside", &f).is_empty());
    assert_eq!(gw1.drop_count("reasm_too_big"), 3);
    // A non-last fragment of 12 bytes.
    let bad = cut(&big, 16)[0].clone();
    let mut bad12 = bad[..14 + 20 + 12].to_vec();
    bad12[14 + 2..14 + 4].copy_from_slice(&32u16.to_be_bytes());
    bad12[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&bad12[14..34]);
    bad12[14 + 10..14 + 12].copy_from_slice(&ck.to_be_bytes());
    assert!(gw1.push("outside", &[bad12]).is_empty());
    assert_eq!(gw1.drop_count("reasm_bad_fragment"), 1);
    let s = gw1.stats();
    assert_eq!(s.frags_received, 4);
    assert_accounted(&s, "gw1");
}

#[test]
fn reassembly_off_drops_fragments_as_before() {
    let cfg = with_reassembly("ep1.toml", "contexts = 0", "reasm-off");
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config(&cfg);
    let esp = gw0.push("inside", &[from_host_a(1000, 1)]).remove(0).1;
    assert!(gw1.push("outside", &cut(&esp, 512)).is_empty());
    assert_eq!(gw1.drop_count("fragment"), 3, "every fragment of ESP to the gateway");
    assert_eq!(gw1.drop_count("to_us"), 0);
    assert_eq!(gw1.stats().frags_received, 0);
}

/// Fragments the gateway forwards (inbound bypass) are not its to
/// reassemble: they leave as they came, TTL − 1.
#[test]
fn fragments_not_for_the_gateway_are_forwarded() {
    let cfg = edited_config("ep1.toml", "reasm-bypass", |t| {
        format!("{t}\n[[policy]]\ndirection = \"inbound\"\nsrc = \"10.0.0.0/8\"\ndst = \"198.51.100.0/24\"\npriority = 5\naction = \"bypass\"\n")
    });
    let mut gw1 = Gw::from_config(&cfg);
    let mut ip = udp_packet(Ipv4Addr::new(10, 1, 1, 1), HOST_B, 0, 64, 5, 6, &[0x33; 972]);
    ip[6] = 0;
    ip[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    let frame = eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x0800, &ip);
    let frags = cut(&frame, 496);
    let out = gw1.push("outside", &frags);
    assert_eq!(out.len(), 2);
    for ((p, o), f) in out.iter().zip(&frags) {
        assert_eq!(p, "inside");
        assert_eq!(o[14 + 8], 63);
        assert_eq!(&o[14 + 20..], &f[14 + 20..]);
        assert_eq!(&o[14 + 4..14 + 8], &f[14 + 4..14 + 8], "id, flags and offset as they came");
    }
    assert_eq!(gw1.stats().frags_received, 0);
}

// ---- IPv6 outer fragments (RFC 8200 §4.5) -----------------------------------

/// The scapy cases of tests/vectors/frag6.json: (name, inner packet, fragments).
fn frag6_cases() -> Vec<(String, Vec<u8>, Vec<Vec<u8>>)> {
    let v = json("frag6.json");
    assert_eq!(v["sa"], 1101);
    let cases: Vec<_> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let frames = c["frames"].as_array().unwrap().iter().map(|f| h(f.as_str().unwrap())).collect();
            (c["name"].as_str().unwrap().to_string(), h(c["inner"].as_str().unwrap()), frames)
        })
        .collect();
    assert!(cases.len() >= 6);
    cases
}

/// `inner` as gw1 forwards it: hop limit / TTL − 1 (IPv4 checksum new).
fn forwarded(inner: &[u8]) -> Vec<u8> {
    let mut p = inner.to_vec();
    if p[0] >> 4 == 6 {
        p[7] -= 1;
    } else {
        p[8] -= 1;
        p[10..12].copy_from_slice(&[0, 0]);
        let ck = ip_checksum(&p[..20]);
        p[10..12].copy_from_slice(&ck.to_be_bytes());
    }
    p
}

/// scapy's IPv6 fragments of scapy's ESP, each case in scapy's order,
/// reversed and shuffled (each order a new gateway: the sequence numbers
/// are scapy's), reach hostB byte for byte; nothing dropped, every buffer
/// back.
#[test]
fn scapy_ipv6_fragments_reassemble_in_any_order() {
    let mut rng = Rng(0x6666_0000_1101);
    for order in 0..3 {
        let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
        let mut nfrags = 0;
        for (name, inner, frames) in frag6_cases() {
            let mut frames = frames.clone();
            match order {
                0 => {}
                1 => frames.reverse(),
                _ => rng.shuffle(&mut frames),
            }
            assert!(frames.iter().all(|f| f[14 + 6] != 50), "{name}: ESP is behind a Fragment header");
            nfrags += frames.len();
            let out = gw1.push("outside", &frames);
            assert_eq!(out.len(), 1, "{name} order {order}: {:?}", gw1.stats().drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
            assert_eq!(out[0].0, "inside");
            assert_eq!(&out[0].1[14..], &forwarded(&inner)[..], "{name} order {order}: inner packet byte for byte");
        }
        let s = gw1.stats();
        assert_eq!(s.reassembled, frag6_cases().len() as u64);
        assert_eq!((s.frags_received, s.frags_reassembled, s.frags_pending), (nfrags as u64, nfrags as u64, 0));
        assert_eq!(s.drops.values().sum::<u64>(), 0);
        assert_accounted(&s, "gw1");
        assert_eq!(gw1.worker().free_buffers(), 512, "every buffer back in gw1's pool");
    }
}

/// All cases' fragments interleaved and shuffled together, with a
/// duplicate and an incomplete datagram: the complete ones come out, the
/// duplicate is `reasm_duplicate`, the incomplete one times out later.
#[test]
fn scapy_ipv6_fragments_interleaved_duplicated_and_lost() {
    let cfg = with_reassembly("ep1-v6.toml", "timeout_ms = 50", "reasm6-mix");
    let mut gw1 = Gw::from_config(&cfg);
    let cases = frag6_cases();
    let mut wire: Vec<Vec<u8>> = cases[1..].iter().flat_map(|(_, _, f)| f.clone()).collect();
    // Case 0 without its last fragment.
    wire.extend(cases[0].2[..cases[0].2.len() - 1].iter().cloned());
    Rng(0x1102).shuffle(&mut wire);
    // A copy of case 2's first arriving fragment right after it (before
    // its datagram can be complete).
    let at = wire.iter().position(|f| cases[2].2.contains(f)).unwrap();
    wire.insert(at + 1, wire[at].clone());
    let out = gw1.push("outside", &wire);
    assert_eq!(out.len(), cases.len() - 1, "{:?}", gw1.stats().drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
    for (_, inner, _) in &cases[1..] {
        assert!(out.iter().any(|(_, f)| f[14..] == forwarded(inner)[..]));
    }
    assert_eq!(gw1.drop_count("reasm_duplicate"), 1);
    let held = cases[0].2.len() as u64 - 1;
    assert_eq!(gw1.stats().frags_pending, held);
    assert_accounted(&gw1.stats(), "gw1");
    std::thread::sleep(Duration::from_millis(80));
    assert!(gw1.push("outside", &[]).is_empty());
    assert_eq!(gw1.drop_count("reasm_timeout"), held);
    assert_eq!(gw1.stats().frags_pending, 0);
    assert_accounted(&gw1.stats(), "gw1");
    assert_eq!(gw1.worker().free_buffers(), 512);
}

/// With reassembly off, IPv6 fragments of ESP to the gateway are dropped as
/// `fragment`, each of them.
#[test]
fn ipv6_fragments_with_reassembly_off_are_dropped_as_fragment() {
    let mut gw1 = Gw::from_config(&with_reassembly("ep1-v6.toml", "contexts = 0", "reasm6-off"));
    let (_, _, frames) = &frag6_cases()[2];
    assert!(gw1.push("outside", frames).is_empty());
    assert_eq!(gw1.drop_count("fragment"), frames.len() as u64);
    assert_eq!(gw1.stats().frags_received, 0);
}

// ---- Forwarded fragments under port selectors (RFC 4301 §7) ----------------

/// configs/ep0-2w.toml / ep1-2w.toml on one worker: UDP to or from ports
/// 6000-6999 on SA 2001, everything else between the sites on SA 2002; the
/// peer's inbound entries of SA 2001 select the same ports. `extra` is
/// appended (e.g. a `[reassembly]` table).
fn port_split(base: &str, tag: &str, extra: &str) -> String {
    port_split_with(base, tag, |t| format!("{t}\n{extra}\n"))
}

/// [`port_split`] with `edit` applied to the one-worker text.
fn port_split_with(base: &str, tag: &str, edit: impl FnOnce(String) -> String) -> String {
    edited_config(base, tag, |t| {
        let t = t.replacen("workers = 2\ncores = [0,1]", "workers = 1\ncores = [0]", 1).replacen("workers = 2\ncores = [1,0]", "workers = 1\ncores = [0]", 1);
        assert!(t.contains("workers = 1"), "{base}: worker line");
        edit(t)
    })
}

/// The SPI of the ESP packet (or first outer fragment) in `f`.
fn spi_of(f: &[u8]) -> u32 {
    u32::from_be_bytes([f[34], f[35], f[36], f[37]])
}

/// A UDP datagram to port 6000 that hostA's stack cut into fragments:
/// without `reassembly.forwarded` its first fragment matches the port entry
/// (SA 2001) and the others, with no ports, the any-port entry (SA 2002):
/// the datagram is split between two SAs (and, were that entry BYPASS,
/// its non-first fragments would leave in the clear). With it gw0
/// reassembles the datagram, in any
/// fragment order, and it travels whole on SA 2001: gw1 delivers it byte for
/// byte. A datagram whose ESP exceeds the wan MTU is encrypted whole and the
/// ESP fragmented (DF clear), and gw1's inside (MTU 1500) fragments it again.
#[test]
fn forwarded_fragments_under_port_selectors_stay_on_the_first_fragments_sa() {
    let gw1_cfg = port_split("ep1-2w.toml", "ports-gw1", "");
    let on = port_split("ep0-2w.toml", "ports-gw0-on", "[reassembly]\nforwarded = true");
    let off = port_split("ep0-2w.toml", "ports-gw0-off", "");

    // Before: the datagram is split between the two SAs.
    let sent = from_host_a(1400, 6000);
    let frags = cut(&sent, 496);
    assert_eq!(frags.len(), 3);
    let mut gw0 = Gw::from_config(&off);
    let esp = gw0.push("inside", &frags);
    let spis: Vec<u32> = esp.iter().map(|(_, f)| spi_of(f)).collect();
    assert_eq!(spis, [2001, 2002, 2002], "reassembly.forwarded off: the ports decide the first fragment only");
    // With an any-port BYPASS entry in place of SA 2002's, they leave in the
    // clear.
    let leaky = |tag: &str, extra: &str| {
        port_split_with("ep0-2w.toml", tag, |t| {
            let at = "priority = 20\naction = \"protect 2002\"";
            assert!(t.contains(at), "ep0-2w.toml: SA 2002's entry");
            format!("{}\n{extra}\n", t.replacen(at, "priority = 20\naction = \"bypass\"", 1))
        })
    };
    let mut gw0 = Gw::from_config(&leaky("ports-gw0-off-bypass", ""));
    let out = gw0.push("inside", &frags);
    let mut protos: Vec<u8> = out.iter().map(|(_, f)| f[14 + 9]).collect();
    protos.sort();
    assert_eq!(protos, [17, 17, 50], "reassembly.forwarded off: one ESP packet, two fragments in the clear");
    let mut gw0 = Gw::from_config(&leaky("ports-gw0-on-bypass", "[reassembly]\nforwarded = true"));
    let out = gw0.push("inside", &frags);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].1[14 + 9], spi_of(&out[0].1)), (50, 2001), "reassembly.forwarded on: all of it in ESP");

    // With it, for fragments in any order.
    for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
        let mut gw0 = Gw::from_config(&on);
        let shuffled: Vec<Vec<u8>> = order.iter().map(|&k| frags[k].clone()).collect();
        let free = gw0.worker().free_buffers();
        let esp = gw0.push("inside", &shuffled);
        let s = gw0.stats();
        assert_eq!(esp.len(), 1, "{order:?}: one ESP packet; drops {:?}", s.drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
        assert_eq!((esp[0].0.as_str(), spi_of(&esp[0].1)), ("outside", 2001));
        assert_eq!((s.frags_received, s.frags_reassembled, s.reassembled), (3, 3, 1));
        assert_accounted(&s, "gw0");
        assert_eq!(gw0.worker().free_buffers(), free, "every buffer back in gw0's pool");
        let mut gw1 = Gw::from_config(&gw1_cfg);
        let out = gw1.push("outside", &[esp[0].1.clone()]);
        assert_eq!(out.len(), 1, "{order:?}: drops {:?}", gw1.stats().drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
        assert_eq!(out[0].0, "inside");
        assert_same_inner(&out[0].1, &sent);
    }

    // 1800 bytes: ESP above the wan MTU (1500), fragmented after encryption;
    // gw1 reassembles it, decrypts, and cuts the inner datagram to its
    // inside MTU on the way out.
    let big = from_host_a(1800, 6001);
    let mut gw0 = Gw::from_config(&on);
    let esp = gw0.push("inside", &cut(&big, 1000));
    assert_eq!(esp.len(), 2, "the ESP packet in two outer fragments");
    assert!(esp.iter().all(|(p, f)| p == "outside" && is_fragment(f) && f.len() - 14 <= 1500));
    assert_eq!(spi_of(&esp[0].1), 2001);
    let mut gw1 = Gw::from_config(&gw1_cfg);
    let out = gw1.push("outside", &esp.into_iter().map(|(_, f)| f).collect::<Vec<_>>());
    assert!(out.len() >= 2 && out.iter().all(|(p, f)| p == "inside" && is_fragment(f)), "{} frames", out.len());
    let mut data = Vec::new();
    for (_, f) in &out {
        let off = (u16::from_be_bytes([f[20], f[21]]) & 0x1fff) as usize * 8;
        assert_eq!(off, data.len(), "fragments in order");
        data.extend_from_slice(&f[14 + 20..]);
    }
    assert_eq!(data, big[14 + 20..], "the datagram's data byte for byte");
}

/// What `reassembly.forwarded` leaves as it was, on ep0-2w's port split:
/// fragments with IPv4 options (their reassembled header would take the
/// outer headers' headroom) and fragments between addresses no
/// port-selecting entry matches go on as they come, one ESP packet each.
#[test]
fn forwarded_fragments_with_options_or_outside_port_selectors_go_as_they_come() {
    let on = port_split("ep0-2w.toml", "ports-gw0-on-scope", "[reassembly]\nforwarded = true");
    // IPv4 options (IHL 6) in every fragment.
    let frags: Vec<Vec<u8>> = cut(&from_host_a(1400, 6000), 496)
        .into_iter()
        .map(|f| {
            let mut ip = f[14..].to_vec();
            add_ipv4_options(&mut ip);
            set_ipv4_checksum(&mut ip);
            eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &ip)
        })
        .collect();
    let mut gw0 = Gw::from_config(&on);
    let esp = gw0.push("inside", &frags);
    let spis: Vec<u32> = esp.iter().map(|(_, f)| spi_of(f)).collect();
    assert_eq!(spis, [2001, 2002, 2002], "with options: as without the option");
    assert_eq!(gw0.stats().frags_received, 0);
    // A destination outside every port-selecting entry (198.51.100.0/24):
    // an any-port entry of its own, SA 2002.
    let wide = port_split_with("ep0-2w.toml", "ports-gw0-wide", |t| {
        let at = "dst = \"198.51.100.0/24\"\npriority = 20\naction = \"protect 2002\"";
        assert!(t.contains(at));
        let t = t.replacen(at, "dst = \"198.51.0.0/16\"\npriority = 20\naction = \"protect 2002\"", 1);
        format!("{t}\n[[route]]\nprefix = \"198.51.0.0/16\"\nvia = \"203.0.113.2\"\nport = \"outside\"\n\n[reassembly]\nforwarded = true\n")
    });
    let mut ip = udp_packet(HOST_A, Ipv4Addr::new(198, 51, 7, 10), 0, 64, 40000, 6000, &[0x5a; 1372]);
    ip[6] = 0;
    set_ipv4_checksum(&mut ip);
    let frame = eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &ip);
    let mut gw0 = Gw::from_config(&wide);
    let esp = gw0.push("inside", &cut(&frame, 496));
    let s = gw0.stats();
    assert_eq!(esp.len(), 3, "drops {:?}", s.drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
    assert!(esp.iter().all(|(_, f)| spi_of(f) == 2002));
    assert_eq!(s.frags_received, 0, "198.51.7.10 is outside every port-selecting entry");
    // The same port split's own destinations are reassembled.
    let esp = gw0.push("inside", &cut(&from_host_a(1400, 6000), 496));
    assert_eq!((esp.len(), spi_of(&esp[0].1), gw0.stats().reassembled), (1, 2001, 1));
}

/// `reassembly.forwarded` changes nothing where no outbound policy selects
/// ports (configs/ep0.toml): a datagram's fragments all meet the same
/// entries, so they are encrypted as they come, one ESP packet each.
#[test]
fn forwarded_fragments_without_port_selectors_are_not_reassembled() {
    let cfg = with_reassembly("ep0.toml", "forwarded = true", "reasm-fwd-noports");
    let mut gw0 = Gw::from_config(&cfg);
    let frags = cut(&from_host_a(1400, 6000), 496);
    let esp = gw0.push("inside", &frags);
    assert_eq!(esp.len(), 3);
    assert!(esp.iter().all(|(p, f)| p == "outside" && spi_of(f) == 1001));
    assert_eq!(gw0.stats().frags_received, 0);
}
