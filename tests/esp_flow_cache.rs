//! The inbound flow cache (src/dataplane/worker/flow.rs): ESP packets of a
//! flow (receive port, outer source and destination, SPI) after its first
//! skip the slow path's parsing, SAD lookup and tunnel checks (counted in
//! `esp_flow_hits`), and what leaves the gateway, and every drop counter,
//! is what the slow path makes of the same packet; a new tables snapshot
//! and every per-packet check (header checksum, options, fragments, the
//! ICV, the source address) still decide each packet.

mod common;

use common::{eth, mac, seal_gcm128, to_gw1, udp_packet, Gw, MemGateway};
use secgw::policy::Tables;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

/// How the outer packet of [`esp_frame`] departs from a plain one.
#[derive(Debug, Clone, Copy, Default)]
struct Outer {
    /// IPv4 options (IHL 6).
    options: bool,
    /// MF set: a first fragment.
    more_fragments: bool,
    /// Bytes of Ethernet padding after the IP packet.
    eth_pad: usize,
    /// The header checksum made wrong.
    bad_checksum: bool,
    /// Outer TTL (0: 64).
    ttl: u8,
    /// Outer DS + ECN byte.
    tos: u8,
    /// Outer source other than gw0's 203.0.113.1.
    src: Option<Ipv4Addr>,
    /// Only this many bytes of ESP kept (the IP total length cut to match).
    cut_esp: Option<usize>,
    /// The last ICV byte flipped.
    bad_icv: bool,
    /// Another SPI than 1001 on the wire (sealed with it too).
    spi: Option<u32>,
}

/// The UDP packet hostA → hostB that [`esp_frame`] carries, DS + ECN
/// `tos`, `len` bytes of payload.
fn inner(len: usize, tos: u8) -> Vec<u8> {
    udp_packet(HOST_A, HOST_B, tos, 64, 40001, 7000, &vec![0x5a; len])
}

/// ESP (SPI 1001 of configs/ep1.toml, sequence number `seq`) from gw0 to
/// gw1's outside port carrying [`inner`]`(len, inner_tos)`, changed as `o`
/// says (checksum redone unless `bad_checksum`).
fn esp_frame(key: &[u8], seq: u64, len: usize, inner_tos: u8, o: Outer) -> Vec<u8> {
    let mut esp = seal_gcm128(key, o.spi.unwrap_or(1001), seq, false, &inner(len, inner_tos), 4);
    if o.bad_icv {
        *esp.last_mut().unwrap() ^= 1;
    }
    if let Some(n) = o.cut_esp {
        esp.truncate(n);
    }
    let mut hdr = [0u8; 20];
    hdr[0] = 0x45;
    hdr[1] = o.tos;
    hdr[6] = 0x40;
    hdr[8] = if o.ttl == 0 { 64 } else { o.ttl };
    hdr[12..16].copy_from_slice(&o.src.unwrap_or(Ipv4Addr::new(203, 0, 113, 1)).octets());
    hdr[16..20].copy_from_slice(&[203, 0, 113, 2]);
    let f = to_gw1(&hdr, 50, &esp);
    let mut ip = f[14..].to_vec();
    if o.more_fragments {
        ip[6] = 0x20;
    }
    if o.options {
        common::add_ipv4_options(&mut ip);
    }
    common::set_ipv4_checksum(&mut ip);
    if o.bad_checksum {
        ip[10] ^= 1;
    }
    ip.extend(std::iter::repeat_n(0u8, o.eth_pad));
    eth(f[..6].try_into().unwrap(), f[6..12].try_into().unwrap(), 0x0800, &ip)
}

fn esp_hits(s: &secgw::control::stats::Snapshot) -> u64 {
    s.workers.iter().map(|w| w.esp_flow_hits).sum()
}

/// The drop counters that are not zero.
fn drops(s: &secgw::control::stats::Snapshot) -> BTreeMap<String, u64> {
    s.drops.iter().filter(|(_, &n)| n > 0).map(|(k, &n)| (k.to_string(), n)).collect()
}

/// Every counter a packet moves but the flow cache's own: per port (rx,
/// tx, drops), per SA (packets, bytes, errors) and per drop reason.
fn counts(s: &secgw::control::stats::Snapshot) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for p in &s.ports {
        for (k, v) in [("rx_packets", p.rx_packets), ("rx_bytes", p.rx_bytes), ("tx_packets", p.tx_packets), ("tx_bytes", p.tx_bytes), ("drops", p.drops)] {
            m.insert(format!("port {} {k}", p.name), v);
        }
    }
    for sa in &s.sas {
        for (k, v) in [("packets", sa.packets), ("bytes", sa.bytes), ("errors", sa.errors)] {
            m.insert(format!("sa {} {} {k}", sa.spi, sa.direction), v);
        }
    }
    for (k, &v) in &s.drops {
        m.insert(format!("drop {k}"), v);
    }
    m
}

/// `after` − `before`, counter by counter.
fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after.iter().map(|(k, &v)| (k.clone(), v - before.get(k).copied().unwrap_or(0))).collect()
}

/// Gateway A (config `cfg`) gets `first(key)` on port `port` (the flow's
/// first packet: the slow path, which learns the flow), then `second(key)`
/// on port `second_port`; gateway B gets only `second(key)` there (`key`:
/// inbound SA `spi`'s). What each sends for `second` and every counter it
/// moves for it must be the same. Returns A's inbound flow cache hits.
fn same_as_slow_path_on(cfg: &str, spi: u32, port: &str, first: impl Fn(&[u8]) -> Vec<u8>, second_port: &str, second: impl Fn(&[u8]) -> Vec<u8>, what: &str) -> u64 {
    let mut a = Gw::from_config(cfg);
    let key = a.sa_key(spi, true);
    let out = a.push(port, &[first(&key)]);
    assert_eq!(out.len(), 1, "{what}: the flow's first packet went through");
    let before = counts(&a.stats());
    let out_a = a.push(second_port, &[second(&key)]);
    let sa = a.stats();
    let mut b = Gw::from_config(cfg);
    let out_b = b.push(second_port, &[second(&key)]);
    let sb = b.stats();
    assert_eq!(esp_hits(&sb), 0, "{what}: B has no flow to hit");
    assert_eq!(out_a, out_b, "{what}: the fast path sent what the slow path sends");
    assert_eq!(delta(&before, &counts(&sa)), counts(&sb), "{what}: the same counters moved");
    common::assert_accounted(&sa, what);
    esp_hits(&sa)
}

/// [`same_as_slow_path_on`] configs/ep1.toml, SA 1001, a plain first
/// packet (sequence number 1), `second` on the outside port too.
fn same_as_slow_path(second: impl Fn(&[u8]) -> Vec<u8>, what: &str) -> u64 {
    let first = |k: &[u8]| esp_frame(k, 1, 100, 0, Outer::default());
    same_as_slow_path_on("configs/ep1.toml", 1001, "outside", first, "outside", second, what)
}

#[test]
fn an_esp_flow_after_its_first_packet_takes_the_fast_path_and_leaves_the_same_bytes() {
    for len in [0usize, 18, 100, 1400] {
        let mut gw = Gw::from_config("configs/ep1.toml");
        let key = gw.sa_key(1001, true);
        let out = gw.push("outside", &[esp_frame(&key, 1, len, 0, Outer::default()), esp_frame(&key, 2, len, 0, Outer::default())]);
        assert_eq!(esp_hits(&gw.stats()), 1, "len {len}: the second packet hit");
        assert_eq!(out.len(), 2);
        // Decapsulated, TTL decremented once, to hostB's MAC on the
        // inside port: the packet hostA sent, but for TTL and checksum.
        let sent = inner(len, 0);
        for (port, f) in &out {
            assert_eq!(port, "inside");
            assert_eq!(f[12..14], [8, 0]);
            assert_eq!(f[14..22], sent[..8], "len {len}: header up to TTL");
            assert_eq!(f[22], 63, "len {len}: TTL decremented");
            assert_eq!(f[23], sent[9]);
            assert_eq!(f[26..], sent[12..], "len {len}: addresses and payload");
            assert_eq!(common::ip_checksum(&f[14..34]), 0);
        }
        assert_eq!(out[0], out[1], "len {len}: slow and fast path packets are the same");
        let s = gw.stats();
        assert!(drops(&s).is_empty(), "len {len}: {:?}", drops(&s));
        common::assert_accounted(&s, "plain");
    }
    // The same with gateway B never having seen the flow.
    assert_eq!(same_as_slow_path(|k| esp_frame(k, 2, 100, 0, Outer::default()), "plain"), 1);
}

#[test]
fn the_inbound_fast_path_takes_only_what_the_slow_path_would_do_the_same_with() {
    let o = Outer::default;
    let cases: Vec<(&str, Outer, u8, u64)> = vec![
        ("Ethernet padding (cut before decryption)", Outer { eth_pad: 20, ..o() }, 0, 1),
        ("outer TTL 1 (to us: not forwarded)", Outer { ttl: 1, ..o() }, 0, 1),
        ("outer ECN CE onto inner ECT(0) (RFC 6040)", Outer { tos: 0xb8 | 3, ..o() }, 2, 1),
        ("outer ECN CE onto not-ECT: dropped (RFC 6040 §4.2)", Outer { tos: 3, ..o() }, 0, 1),
        ("ICV wrong: authentication fails", Outer { bad_icv: true, ..o() }, 0, 1),
        ("ESP cut to its header: the ICV check fails", Outer { cut_esp: Some(12), ..o() }, 0, 1),
        ("ESP cut below its header", Outer { cut_esp: Some(6), ..o() }, 0, 0),
        ("outer IPv4 options", Outer { options: true, ..o() }, 0, 0),
        ("a first fragment (held for reassembly)", Outer { more_fragments: true, ..o() }, 0, 0),
        ("header checksum wrong", Outer { bad_checksum: true, ..o() }, 0, 0),
        ("another source: not the SA's tunnel", Outer { src: Some(Ipv4Addr::new(203, 0, 113, 9)), ..o() }, 0, 0),
        ("an SPI without SA", Outer { spi: Some(4242), ..o() }, 0, 0),
    ];
    for (what, outer, inner_tos, hits) in cases {
        let got = same_as_slow_path(|k| esp_frame(k, 2, 100, inner_tos, outer), what);
        assert_eq!(got, hits, "{what}: inbound flow cache hits");
    }
    // Not for our MAC, and not IPv4: neither path takes it.
    let other_mac = |k: &[u8]| {
        let mut f = esp_frame(k, 2, 100, 0, Outer::default());
        f[..6].copy_from_slice(&mac("02:00:00:00:01:99"));
        f
    };
    assert_eq!(same_as_slow_path(other_mac, "another MAC"), 0);
}

#[test]
fn a_flow_is_cached_for_its_receive_port_only() {
    // A second unprotected port: the same ESP (outer addresses, SPI) to
    // its MAC is not for one of its addresses, so the slow path does not
    // take it as ESP: it is to another port's address of ours, `to_us`
    // (never forwarded). The flow cached for the outside port must not
    // decide it.
    let cfg = common::edited_config("ep1.toml", "esp-flow-2nd-port", |t| {
        t + "\n[[port]]\nname = \"outside2\"\ninterface = \"gw1-out2\"\nrole = \"unprotected\"\nmac = \"02:00:00:00:01:03\"\naddresses = [\"100.64.0.2/24\"]\n"
    });
    let first = |k: &[u8]| esp_frame(k, 1, 100, 0, Outer::default());
    let other_port = |k: &[u8]| {
        let mut f = esp_frame(k, 2, 100, 0, Outer::default());
        f[..6].copy_from_slice(&mac("02:00:00:00:01:03"));
        f
    };
    assert_eq!(same_as_slow_path_on(&cfg, 1001, "outside", first, "outside2", other_port, "another port"), 0);
    let mut gw = Gw::from_config(&cfg);
    assert!(gw.push("outside2", &[other_port(&gw.sa_key(1001, true))]).is_empty());
    assert_eq!((gw.drop_count("to_us"), gw.drop_count("no_policy")), (1, 0));
}

/// Transport-mode ESP (RFC 4303 §3.1.1) of SA 1001 (configs/ep1.toml
/// with the SA in transport mode) from hostA to hostB, sequence number
/// `seq`: the UDP segment of [`inner`] encrypted, the addresses kept.
fn transport_frame(key: &[u8], seq: u64) -> Vec<u8> {
    let ip = inner(100, 0);
    let esp = seal_gcm128(key, 1001, seq, false, &ip[20..], 17);
    to_gw1(&ip[..20], 50, &esp)
}

fn transport_config() -> String {
    common::edited_config("ep1.toml", "esp-flow-transport", |t| {
        let (head, tail) = t.split_once("spi = 1001\n").expect("SA 1001");
        let tail = tail.replacen("mode = \"tunnel\"", "mode = \"transport\"", 1).replacen("tunnel_src = \"203.0.113.1\"\n", "", 1).replacen("tunnel_dst = \"203.0.113.2\"\n", "", 1);
        format!("{head}spi = 1001\n{tail}")
    })
}

#[test]
fn a_transport_mode_flow_takes_the_fast_path_too() {
    let cfg = transport_config();
    let mut gw = Gw::from_config(&cfg);
    let key = gw.sa_key(1001, true);
    let out = gw.push("outside", &[transport_frame(&key, 1), transport_frame(&key, 2)]);
    assert_eq!(out.len(), 2, "{:?}", drops(&gw.stats()));
    assert_eq!(esp_hits(&gw.stats()), 1);
    let sent = inner(100, 0);
    for (port, f) in &out {
        assert_eq!(port, "inside");
        assert_eq!(f[14 + 8], 63, "TTL decremented");
        assert_eq!(f[14 + 9], 17, "UDP again");
        assert_eq!(f[14 + 12..], sent[12..], "addresses and UDP as sent");
    }
    let first = |k: &[u8]| transport_frame(k, 1);
    assert_eq!(same_as_slow_path_on(&cfg, 1001, "outside", first, "outside", |k| transport_frame(k, 2), "transport"), 1);
}

#[test]
fn a_replayed_packet_of_a_cached_flow_is_still_dropped() {
    let mut gw = Gw::from_config("configs/ep1.toml");
    let key = gw.sa_key(1001, true);
    let p = |seq| esp_frame(&key, seq, 64, 0, Outer::default());
    assert_eq!(gw.push("outside", &[p(1), p(2), p(3)]).len(), 3);
    assert_eq!(esp_hits(&gw.stats()), 2);
    assert!(gw.push("outside", &[p(2)]).is_empty(), "replayed");
    assert_eq!(esp_hits(&gw.stats()), 3, "the replay took the fast path to the replay check");
    assert_eq!(drops(&gw.stats()), BTreeMap::from([("replay".to_string(), 1)]));
}

/// `t` as version `t.version + 1` with port `port` holding `addr` instead
/// of its address.
fn with_address(t: &Tables, port: usize, addr: Ipv4Addr) -> Tables {
    let mut ports = (*t.ports).clone();
    ports[port].addresses = vec![addr];
    let ours4 = ports.iter().flat_map(|p| p.addresses.iter().copied()).collect();
    Tables {
        version: t.version + 1,
        ports: Arc::new(ports),
        spd_out: t.spd_out.clone(),
        spd_in: t.spd_in.clone(),
        sad: t.sad.clone(),
        routes: t.routes.clone(),
        neighbours: t.neighbours.clone(),
        natt_ports: t.natt_ports.clone(),
        ours4,
        ours6: t.ours6.clone(),
        bcast4: t.bcast4.clone(),
    }
}

#[test]
fn a_cached_esp_flow_follows_the_next_tables_snapshot() {
    let mut gw = Gw::from_config("configs/ep1.toml");
    let key = gw.sa_key(1001, true);
    let p = |seq| esp_frame(&key, seq, 64, 0, Outer::default());
    let outside = gw.cfg.ports.iter().position(|p| p.name == "outside").expect("outside port");
    assert_eq!(gw.push("outside", &[p(1), p(2)]).len(), 2);
    assert_eq!(esp_hits(&gw.stats()), 1);
    // 203.0.113.2 is no longer ours: the ESP to it is not taken (the
    // slow path finds no inbound policy for it), cached flow or not.
    let t = gw.inner.published.load_full();
    assert!(t.is_local(outside, IpAddr::V4(Ipv4Addr::new(203, 0, 113, 2))));
    gw.inner.published.store(Arc::new(with_address(&t, outside, Ipv4Addr::new(203, 0, 113, 3))));
    assert!(gw.push("outside", &[p(3)]).is_empty(), "not ours any more");
    assert_eq!(esp_hits(&gw.stats()), 1, "the new snapshot missed the cache");
    assert_eq!(gw.drop_count("no_policy"), 1);
    // Ours again: learned again, then hit.
    let t = gw.inner.published.load_full();
    gw.inner.published.store(Arc::new(with_address(&t, outside, Ipv4Addr::new(203, 0, 113, 2))));
    assert_eq!(gw.push("outside", &[p(4), p(5)]).len(), 2);
    assert_eq!(esp_hits(&gw.stats()), 2);
    common::assert_accounted(&gw.stats(), "snapshots");
}

#[test]
fn a_flow_received_by_another_worker_is_cached_and_handed_to_the_owner() {
    // configs/ep1-2w.toml: two workers, inbound SAs 2001 and 2002 bound
    // one per worker. ESP of SA 2002 received by the owner: the second
    // packet hits and is decrypted there. Received by the other worker
    // (RSS put it on that worker's queue): the second packet hits too and
    // goes to the owner by the same handoff as the first, which decrypts
    // both.
    let probe = MemGateway::from_config("configs/ep1-2w.toml");
    let owner = {
        let t = probe.published.load();
        let i = t.sad.inbound_lookup(2002, IpAddr::V4(Ipv4Addr::new(203, 0, 113, 2))).expect("SA 2002");
        t.sad.inbound_at(i).expect("SA 2002").sa.owner
    };
    let key = probe.cfg.sas.iter().find(|s| s.spi == 2002).expect("SA 2002").key.to_vec();
    for (worker, hits, handed) in [(owner, 1, 0), (1 - owner, 1, 2)] {
        let mut gw = MemGateway::from_config("configs/ep1-2w.toml");
        let mut out = Vec::new();
        for seq in [1, 2] {
            let f = esp_frame(&key, seq, 64, 0, Outer { spi: Some(2002), ..Outer::default() });
            gw.inject(worker, "outside", &f);
            out.extend(gw.run());
        }
        let s = gw.stats();
        assert_eq!(out.len(), 2, "worker {worker}: both decrypted");
        assert_eq!(esp_hits(&s), hits, "worker {worker}");
        assert_eq!(s.workers.iter().map(|w| w.handoff_out).sum::<u64>(), handed, "worker {worker}");
        assert!(drops(&s).is_empty(), "worker {worker}: {:?}", drops(&s));
        assert_eq!(s.workers[owner].handoff_in, handed, "the owner took what was handed");
        let sa = s.sas.iter().find(|x| x.spi == 2002 && x.direction == "inbound").expect("SA 2002");
        assert_eq!(sa.packets, 2, "both counted by the SA, at its owner");
    }
}
