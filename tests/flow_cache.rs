//! The outbound flow cache (src/dataplane/worker/flow.rs): the packets of
//! a flow after its first take the fast path (counted in `flow_hits`), and
//! what leaves the gateway is what the slow path makes of them, byte for
//! byte; a new tables snapshot, a learned path MTU and every per-packet
//! check (TTL, size, header checksum) still decide each packet.

mod common;

use common::{eth, mac, udp_packet, Gw};
use secgw::policy::spd::{Prefix, Selector, Spd, SpdAction, SpdEntry};
use secgw::policy::Tables;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

/// A UDP frame from hostA to hostB into gw0's inside port (configs/ep0.toml:
/// SA 1001 protects 192.0.2.0/24 → 198.51.100.0/24), `len` bytes of
/// payload, TTL `ttl`, DF set (`udp_packet`) unless `df` is false.
fn frame(sport: u16, len: usize, ttl: u8, df: bool) -> Vec<u8> {
    let mut ip = udp_packet(HOST_A, HOST_B, 0, ttl, sport, 7000, &vec![0xab; len]);
    if !df {
        ip[6] = 0;
        ip[10..12].copy_from_slice(&[0, 0]);
        let ck = common::ip_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&ck.to_be_bytes());
    }
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &ip)
}

fn hits(gw: &Gw) -> u64 {
    gw.stats().workers.iter().map(|w| w.flow_hits).sum()
}

/// The frames gw0 sends on `port` for `frames` pushed one burst at a time
/// (each `push` runs the gateway until idle).
fn push_each(gw: &mut Gw, frames: &[Vec<u8>]) -> Vec<(String, Vec<u8>)> {
    frames.iter().flat_map(|f| gw.push("inside", std::slice::from_ref(f))).collect()
}

#[test]
fn a_flow_after_its_first_packet_takes_the_fast_path_and_leaves_the_same_bytes() {
    // Gateway A: packet 1 of flow 40001 (slow path, learns), packet 2 of
    // it (fast). Gateway B: packet 1 of flow 40002, then the same packet 2
    // of flow 40001, now a first packet (slow). Both second packets carry
    // sequence number 2 and (DF set) identification 2: the ESP frames must
    // be equal, byte for byte.
    for (size, df) in [(0usize, true), (100, true), (1300, true), (37, false)] {
        let mut a = Gw::from_config("configs/ep0.toml");
        let out_a = push_each(&mut a, &[frame(40001, size, 64, df), frame(40001, size, 64, df)]);
        assert_eq!(hits(&a), 1, "size {size}: the second packet of the flow hit");
        let mut b = Gw::from_config("configs/ep0.toml");
        let out_b = push_each(&mut b, &[frame(40002, size, 64, df), frame(40001, size, 64, df)]);
        assert_eq!(hits(&b), 0, "size {size}: no packet of B repeated a flow");
        assert_eq!(out_a.len(), 2);
        assert_eq!(out_b.len(), 2);
        assert!(out_a.iter().chain(&out_b).all(|(p, _)| p == "outside"));
        let (fa, fb) = (&out_a[1].1, &out_b[1].1);
        if df {
            assert_eq!(fa, fb, "size {size}: fast path and slow path frames differ");
        } else {
            // DF clear: the identification comes from the worker's own
            // counter (random start per gateway): equal but for it and the
            // checksum, which must be right in both.
            let mask = |f: &[u8]| {
                let mut f = f.to_vec();
                f[18..20].fill(0);
                f[24..26].fill(0);
                f
            };
            assert_eq!(mask(fa), mask(fb), "size {size}");
            for f in [fa, fb] {
                assert_eq!(common::ip_checksum(&f[14..34]), 0, "outer IPv4 header checksum");
            }
        }
        // And it is ESP gw1 opens: SPI 1001, seq 2, the inner packet intact.
        let key = a.sa_key(1001, false);
        let inner = common::open_gcm128(&key, &fa[34..]);
        let sent = frame(40001, size, 64, df);
        assert_eq!(inner[..8], sent[14..22], "inner header up to TTL");
        assert_eq!(inner[8], 63, "TTL decremented once");
        assert_eq!(inner[20..sent.len() - 14], sent[34..], "inner payload");
        assert_eq!(inner[inner.len() - 1], 4, "next header: IPv4");
    }
}

/// A variant of the test frame: IPv4 options (IHL 6), MF set (a first
/// fragment), ICMP instead of UDP, and Ethernet padding after the packet.
#[derive(Debug, Clone, Copy, Default)]
struct Variant {
    options: bool,
    more_fragments: bool,
    icmp: bool,
    eth_pad: usize,
}

/// `frame(40000 + s, 40, 64, true)` from 192.0.2.(10 + s) (a flow of its
/// own also without ports), changed as `v` says (checksum redone).
fn variant(s: u16, v: Variant) -> Vec<u8> {
    let sport = 40000 + s;
    let f = frame(sport, 40, 64, true);
    let mut ip = f[14..].to_vec();
    ip[15] = 10 + s as u8;
    if v.icmp {
        ip[9] = 1;
        ip[20..24].copy_from_slice(&[8, 0, 0, 0]);
        ip[24..26].copy_from_slice(&sport.to_be_bytes());
    }
    if v.more_fragments {
        // MF, DF kept (so the outer identification is the sequence
        // number on both gateways, not their workers' random counters).
        ip[6] = 0x60;
    }
    if v.options {
        common::add_ipv4_options(&mut ip);
    }
    common::set_ipv4_checksum(&mut ip);
    ip.extend(std::iter::repeat_n(0u8, v.eth_pad));
    eth(f[..6].try_into().unwrap(), f[6..12].try_into().unwrap(), 0x0800, &ip)
}

/// Gateway A gets `make(1)` twice on `(worker, "inside")`, gateway B
/// `make(2)` then `make(1)`: the second frame out of each must be equal
/// (same packet, sequence number 2 on SAs with DF set from the inner
/// header; no packet of B repeats a flow). Returns A's flow cache hits.
fn second_frames_equal(cfg: &str, worker: usize, make: impl Fn(u16) -> Vec<u8>, what: &str) -> u64 {
    let run = |frames: [Vec<u8>; 2]| {
        let mut gw = common::MemGateway::from_config(cfg);
        let mut out = Vec::new();
        for f in frames {
            gw.inject(worker, "inside", &f);
            out.extend(gw.run().into_iter().filter(|(_, p, _)| p == "outside").map(|(_, _, f)| f));
        }
        let hits: u64 = gw.stats().workers.iter().map(|w| w.flow_hits).sum();
        (out, hits)
    };
    let (a, hits_a) = run([make(1), make(1)]);
    let (b, hits_b) = run([make(2), make(1)]);
    assert_eq!((a.len(), b.len()), (2, 2), "{what}: two frames out of each");
    assert_eq!(hits_b, 0, "{what}: B repeats no flow");
    assert_eq!(a[1], b[1], "{what}: fast and slow path frames differ");
    hits_a
}

#[test]
fn the_fast_path_takes_only_what_the_slow_path_would_do_the_same_with() {
    let cases: [(&str, Variant, u64); 6] = [
        ("plain", Variant::default(), 1),
        ("Ethernet padding (cut before ESP)", Variant { eth_pad: 20, ..Default::default() }, 1),
        ("ICMP: no ports", Variant { icmp: true, ..Default::default() }, 1),
        ("IPv4 options", Variant { options: true, ..Default::default() }, 0),
        ("a first fragment", Variant { more_fragments: true, ..Default::default() }, 0),
        ("options, fragment, padding", Variant { options: true, more_fragments: true, eth_pad: 6, icmp: false }, 0),
    ];
    for (what, v, hits) in cases {
        let got = second_frames_equal("configs/ep0.toml", 0, |s| variant(s, v), what);
        assert_eq!(got, hits, "{what}: flow cache hits");
        // BYPASS (configs/bench/bypass.toml): forwarded in the clear, the
        // Ethernet padding cut the same way on both paths.
        let got = second_frames_equal("configs/bench/bypass.toml", 0, |s| variant(s, v), what);
        assert_eq!(got, hits, "{what}, bypass: flow cache hits");
    }
    // Two workers (configs/ep0-2w.toml: dport 6001 → SA 2001, owned by
    // worker 0): received by worker 1, every packet goes to the owner by
    // handoff, none by the cache (worker 1 owns no such SA); received by
    // the owner, the second one hits.
    let to_2001 = |s: u16| {
        let mut f = frame(40000 + s, 40, 64, true);
        f[14 + 22..14 + 24].copy_from_slice(&6001u16.to_be_bytes());
        f
    };
    assert_eq!(second_frames_equal("configs/ep0-2w.toml", 1, to_2001, "handed to the owner"), 0);
    assert_eq!(second_frames_equal("configs/ep0-2w.toml", 0, to_2001, "received by the owner"), 1);
    // TFC padding (RFC 4303 §2.7) on the SA: the slow path pads, so no
    // packet of such an SA takes the cache.
    let tfc = common::edited_config("ep0.toml", "flow-tfc", |t| t.replacen("spi = 1001\n", "spi = 1001\ntfc_pad_to = 200\n", 1));
    assert_eq!(second_frames_equal(&tfc, 0, |s| frame(40000 + s, 40, 64, true), "TFC"), 0);
}

/// `t` with its outbound SPD replaced by one entry for 192.0.2.0/24 →
/// 198.51.100.0/24 doing `action`, as version `t.version + 1`.
fn with_policy(t: &Tables, action: SpdAction) -> Tables {
    let p = |a: [u8; 4]| Prefix::new(IpAddr::from(a), 24);
    let selector = Selector { src: p([192, 0, 2, 0]), dst: p([198, 51, 100, 0]), protocol: None, src_ports: (0, 65535), dst_ports: (0, 65535) };
    Tables {
        version: t.version + 1,
        ports: t.ports.clone(),
        spd_out: Arc::new(Spd::new(vec![SpdEntry { selector, priority: 1, action }])),
        spd_in: t.spd_in.clone(),
        sad: t.sad.clone(),
        routes: t.routes.clone(),
        neighbours: t.neighbours.clone(),
        natt_ports: t.natt_ports.clone(),
        ours4: t.ours4.clone(),
        ours6: t.ours6.clone(),
        bcast4: t.bcast4.clone(),
    }
}

#[test]
fn a_cached_flow_follows_the_next_tables_snapshot() {
    let mut gw = Gw::from_config("configs/ep0.toml");
    let f = frame(40001, 64, 64, true);
    let out = gw.push("inside", &[f.clone(), f.clone(), f.clone()]);
    assert_eq!(out.len(), 3);
    assert_eq!(hits(&gw), 2, "packets 2 and 3 hit");
    let protect = gw.inner.published.load().sad.outbound_sas().next().map(|(slot, _)| slot).expect("SA 1001");
    // The policy becomes DISCARD: the next packet of the cached flow is
    // dropped as the new SPD says.
    let t = gw.inner.published.load_full();
    gw.inner.published.store(Arc::new(with_policy(&t, SpdAction::Discard)));
    assert!(gw.push("inside", std::slice::from_ref(&f)).is_empty(), "discarded");
    assert_eq!(gw.drop_count("policy_discard"), 1);
    // BYPASS: forwarded in the clear (TTL decremented), learned, and the
    // next packets of the flow hit the BYPASS entry.
    let t = gw.inner.published.load_full();
    gw.inner.published.store(Arc::new(with_policy(&t, SpdAction::Bypass)));
    let before = hits(&gw);
    let out = gw.push("inside", &[f.clone(), f.clone()]);
    assert_eq!(out.len(), 2);
    for (port, o) in &out {
        assert_eq!(port, "outside");
        assert_eq!(o[12..14], [8, 0]);
        assert_eq!(o[14 + 9], 17, "plain UDP, not ESP");
        assert_eq!(o[14 + 8], 63, "TTL decremented");
        assert_eq!(o[14 + 12..], f[14 + 12..], "addresses and payload as sent");
        assert_eq!(common::ip_checksum(&o[14..34]), 0);
    }
    assert_eq!(hits(&gw) - before, 1, "the second bypassed packet hit");
    // PROTECT again: ESP with SA 1001.
    let t = gw.inner.published.load_full();
    gw.inner.published.store(Arc::new(with_policy(&t, SpdAction::Protect(protect))));
    let out = gw.push("inside", &[f.clone(), f.clone()]);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|(p, o)| p == "outside" && o[14 + 9] == 50), "ESP again");
    common::assert_accounted(&gw.stats(), "policy changes");
}

#[test]
fn a_cached_flow_still_gets_every_per_packet_check() {
    let mut gw = Gw::from_config("configs/ep0.toml");
    let f = frame(40001, 64, 64, true);
    assert_eq!(gw.push("inside", &[f.clone(), f.clone()]).len(), 2);
    assert_eq!(hits(&gw), 1);
    // TTL 1: the cache is not asked, the slow path drops it and tells
    // hostA (ICMP Time Exceeded, RFC 1812 §5.3.1).
    let out = gw.push("inside", &[frame(40001, 64, 1, true)]);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0.as_str(), out[0].1[14 + 9], out[0].1[34], out[0].1[35]), ("inside", 1, 11, 0), "ICMP type 11 code 0");
    assert_eq!(gw.drop_count("ttl_exceeded"), 1);
    // A bad header checksum: malformed.
    let mut bad = f.clone();
    bad[14 + 10] ^= 0xff;
    assert!(gw.push("inside", &[bad]).is_empty());
    assert_eq!(gw.drop_count("malformed"), 1);
    // Too big for the wan MTU once encapsulated, DF set: ICMP
    // "fragmentation needed" back to hostA (RFC 1191), not ESP.
    let out = gw.push("inside", &[frame(40001, 1472, 64, true)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "inside");
    assert_eq!((out[0].1[14 + 9], out[0].1[34], out[0].1[35]), (1, 3, 4), "ICMP type 3 code 4");
    // A path MTU learned for the SA: the slow path's check applies it (a
    // packet that fits the port but not the path gets the error too).
    let t = gw.inner.published.load_full();
    let (_, sa) = t.sad.outbound_sas().next().expect("SA 1001");
    let now = secgw::esp::pmtu::epoch_ms(std::time::Instant::now());
    assert!(sa.path_mtu.lower(1000, now, now + 600_000, 1500));
    let out = gw.push("inside", &[frame(40001, 1000, 64, true)]);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0.as_str(), out[0].1[34], out[0].1[35]), ("inside", 3, 4), "ICMP frag needed for the path MTU");
    // Nothing of that took the fast path, nor does a packet of the flow
    // while the SA has a path MTU (the slow path checks it and its age).
    assert_eq!(hits(&gw), 1);
    let out = gw.push("inside", std::slice::from_ref(&f));
    assert_eq!((out.len(), hits(&gw)), (1, 1));
}

/// A worker keeps its per-SA fast-path records across snapshots that keep
/// the routes and ports (helper-103: remaking them for every SA on each
/// snapshot stalled workers at 100,000 SAs), and remakes them when those
/// change: with the outside port's MTU lowered under a cached flow, a
/// packet that fitted before takes the slow path's MTU check
/// (`mtu_exceeded`, DF set), not the old bound.
#[test]
fn fast_path_records_follow_a_change_of_the_ports() {
    let mut gw = Gw::from_config("configs/ep0.toml");
    let f = frame(40001, 1300, 64, true);
    let out = gw.push("inside", &[f.clone(), f.clone()]);
    assert_eq!(out.len(), 2);
    assert_eq!(hits(&gw), 1, "packet 2 hit");
    // A snapshot with the same routes and ports (a policy change): kept,
    // and the flow is learned again and hits.
    let t = gw.inner.published.load_full();
    let protect = t.sad.outbound_sas().next().map(|(slot, _)| slot).expect("SA 1001");
    gw.inner.published.store(Arc::new(with_policy(&t, SpdAction::Protect(protect))));
    assert_eq!(gw.push("inside", &[f.clone(), f.clone()]).len(), 2);
    assert_eq!(hits(&gw), 2, "the second packet under the new snapshot hit");
    // The outside port's MTU lowered to 1280: 1300 + 28 bytes of IP and
    // UDP no longer fit once encapsulated.
    let t = gw.inner.published.load_full();
    let mut ports = (*t.ports).clone();
    let outside = ports.iter().position(|p| !p.protected).expect("an unprotected port");
    ports[outside].mtu = 1280;
    let mut next = with_policy(&t, SpdAction::Protect(protect));
    next.ports = Arc::new(ports);
    gw.inner.published.store(Arc::new(next));
    // A small packet of the flow (slow path, learned), then the big one:
    // a cached flow, so the fast path decides by its record's bound.
    let small = frame(40001, 64, 64, true);
    let out = gw.push("inside", &[small, f.clone()]);
    let mut sent: Vec<(&str, u8, usize)> = out.iter().map(|(p, o)| (p.as_str(), o[14 + 9], o.len())).collect();
    sent.sort();
    assert_eq!(sent.iter().map(|&(p, proto, _)| (p, proto)).collect::<Vec<_>>(), [("inside", 1), ("outside", 50)], "ICMP back inside, the small packet's ESP out: {sent:?}");
    assert!(sent[1].2 < 200, "the ESP is the small packet's: {sent:?}");
    assert_eq!(gw.drop_count("mtu_exceeded"), 1);
    common::assert_accounted(&gw.stats(), "port change");
}
