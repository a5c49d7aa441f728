//! Neighbour resolution over in-memory ports: gw0 (configs/ep0-v6.toml
//! without its `[[neighbour]]` entries) resolves next hops with ARP (RFC
//! 826) and Neighbor Discovery (RFC 4861), holds packets meanwhile, learns
//! only what the rules allow, ages entries — with time passed in. Requests
//! are checked byte by byte against layouts written here from the RFCs,
//! and ICMPv6 checksums with a sum written here (not the gateway's).

mod common;
use common::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

const GW0_IN_MAC: &str = "02:00:00:00:00:01";
const GW0_OUT_MAC: &str = "02:00:00:00:00:02";
const GW1_OUT_MAC: &str = "02:00:00:00:01:02";
const A_MAC: &str = "02:00:00:00:0a:01";
const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const GW0_OUT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const GW1_OUT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// ep0-v6.toml without static neighbours, with `table` as its
/// `[neighbour_table]` and `extra` appended to the outside port.
fn config(tag: &str, table: &str, outside_extra: &str) -> String {
    edited_config("ep0-v6.toml", tag, |t| {
        let cut = t.find("[[neighbour]]").expect("ep0-v6 has neighbours");
        let mut t = t[..cut].to_string();
        if !outside_extra.is_empty() {
            t = t.replace("addresses = [\"203.0.113.1/24\", \"2001:db8:ff::1/64\"]", &format!("addresses = [\"203.0.113.1/24\", \"2001:db8:ff::1/64\"]\n{outside_extra}"));
        }
        format!("{t}\n[neighbour_table]\n{table}\n")
    })
}

const TABLE: &str = "reachable_ms = 2000\nretrans_ms = 100\npending_packets = 8\npending_per_hop = 4";

fn gw(tag: &str, table: &str) -> MemGateway {
    MemGateway::from_config(&config(tag, table, ""))
}

/// hostA → hostB UDP (protected by SA 1001, tunnel to 203.0.113.2), payload byte `n`.
fn from_a(n: u8) -> Vec<u8> {
    eth(mac(GW0_IN_MAC), mac(A_MAC), 0x0800, &udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, &[n; 16]))
}

/// hostA → hostB over IPv6 UDP to port 5001 (SA 1101, tunnel to 2001:db8:ff::2).
fn from_a6(n: u8) -> Vec<u8> {
    let (src, dst) = (v6("2001:db8:a::10"), v6("2001:db8:b::10"));
    let mut u = vec![0u8; 8];
    u[..2].copy_from_slice(&40000u16.to_be_bytes());
    u[2..4].copy_from_slice(&5001u16.to_be_bytes());
    u[4..6].copy_from_slice(&24u16.to_be_bytes());
    u.extend_from_slice(&[n; 16]);
    let mut ph = Vec::new();
    ph.extend_from_slice(&src.octets());
    ph.extend_from_slice(&dst.octets());
    ph.extend_from_slice(&(u.len() as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 17]);
    let ck = !(sum(&u, sum(&ph, 0)) as u16);
    u[6..8].copy_from_slice(&ck.to_be_bytes());
    let mut p = ipv6_hdr(u.len(), 17, 64, &src, &dst);
    p.extend_from_slice(&u);
    eth(mac(GW0_IN_MAC), mac(A_MAC), 0x86dd, &p)
}

fn ipv6_hdr(plen: usize, nh: u8, hlim: u8, src: &Ipv6Addr, dst: &Ipv6Addr) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
    h[6] = nh;
    h[7] = hlim;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h
}

/// An Ethernet/IPv4 ARP packet (RFC 826) in a frame from `eth_src` to `eth_dst`.
fn arp(eth_dst: [u8; 6], op: u16, sha: [u8; 6], spa: Ipv4Addr, tha: [u8; 6], tpa: Ipv4Addr) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sha);
    a.extend_from_slice(&spa.octets());
    a.extend_from_slice(&tha);
    a.extend_from_slice(&tpa.octets());
    eth(eth_dst, sha, 0x0806, &a)
}

/// gw1's ARP reply to gw0: 203.0.113.2 is at `sha`.
fn gw1_reply(sha: [u8; 6]) -> Vec<u8> {
    arp(mac(GW0_OUT_MAC), 2, sha, GW1_OUT, mac(GW0_OUT_MAC), GW0_OUT)
}

/// A Neighbor Advertisement (RFC 4861 §4.4) `src` → `dst`, hop limit 255,
/// for `target` with `flags` and a Target Link-Layer Address option `tlla`.
fn na(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, flags: u8, tlla: Option<[u8; 6]>, eth_src: [u8; 6]) -> Vec<u8> {
    let mut m = vec![136, 0, 0, 0, flags, 0, 0, 0];
    m.extend_from_slice(&target.octets());
    if let Some(l) = tlla {
        m.extend_from_slice(&[2, 1]);
        m.extend_from_slice(&l);
    }
    nd_frame(src, dst, m, eth_src)
}

/// ND message `m` (its checksum field zero) `src` → `dst`: checksum set,
/// in an IPv6 header with hop limit 255, in a frame from `eth_src` to
/// gw0's outside MAC.
fn nd_frame(src: Ipv6Addr, dst: Ipv6Addr, mut m: Vec<u8>, eth_src: [u8; 6]) -> Vec<u8> {
    let ck = icmpv6_checksum(&src, &dst, &m);
    m[2..4].copy_from_slice(&ck.to_be_bytes());
    let mut p = ipv6_hdr(m.len(), 58, 255, &src, &dst);
    p.extend_from_slice(&m);
    eth(mac(GW0_OUT_MAC), eth_src, 0x86dd, &p)
}

/// A Neighbor Solicitation (RFC 4861 §4.3) `src` → `target` (unicast),
/// hop limit 255, with a Source Link-Layer Address option `sll`, in a
/// frame from `sll` to gw0's outside MAC.
fn ns_with_source(src: Ipv6Addr, target: Ipv6Addr, sll: [u8; 6]) -> Vec<u8> {
    ns_to(src, target, target, sll, sll)
}

/// A Neighbor Solicitation `src` → `dst` for `target`, hop limit 255, with
/// a Source Link-Layer Address option `sll`, in a frame from `eth_src` to
/// gw0's outside MAC.
fn ns_to(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, sll: [u8; 6], eth_src: [u8; 6]) -> Vec<u8> {
    let mut m = vec![135, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&target.octets());
    m.extend_from_slice(&[1, 1]);
    m.extend_from_slice(&sll);
    nd_frame(src, dst, m, eth_src)
}

fn only(out: &[(usize, String, Vec<u8>)], port: &str) -> Vec<Vec<u8>> {
    out.iter().filter(|(_, p, _)| p == port).map(|(_, _, f)| f.clone()).collect()
}

fn is_arp(f: &[u8]) -> bool {
    f[12..14] == [0x08, 0x06]
}

/// Checks `f` is a broadcast ARP request from gw0's outside port for
/// 203.0.113.2 (RFC 826 layout, byte by byte).
fn assert_arp_request(f: &[u8], eth_dst: [u8; 6], tha: [u8; 6]) {
    let mut want = Vec::new();
    want.extend_from_slice(&eth_dst);
    want.extend_from_slice(&mac(GW0_OUT_MAC));
    want.extend_from_slice(&[0x08, 0x06]);
    want.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]); // Ethernet, IPv4, 6, 4, request
    want.extend_from_slice(&mac(GW0_OUT_MAC));
    want.extend_from_slice(&GW0_OUT.octets());
    want.extend_from_slice(&tha);
    want.extend_from_slice(&GW1_OUT.octets());
    assert_eq!(f, &want[..]);
}

/// ESP sequence number of an IPv4 ESP frame.
fn esp_seq(f: &[u8]) -> u32 {
    assert_eq!(f[12..14], [0x08, 0x00]);
    assert_eq!(f[14 + 9], 50, "ESP");
    u32::from_be_bytes(f[14 + 24..14 + 28].try_into().unwrap())
}

#[test]
fn unknown_next_hop_one_arp_request_then_the_held_packets_go_in_order() {
    let mut g = gw("arp1", TABLE);
    let t0 = Instant::now();
    for n in 0..3 {
        g.inject(0, "inside", &from_a(n));
    }
    let out = g.run_at(t0);
    let sent = only(&out, "outside");
    assert_eq!(sent.len(), 1, "exactly one request for three packets: {sent:?}");
    assert_arp_request(&sent[0], [0xff; 6], [0; 6]);
    assert_eq!(g.workers[0].pending_packets(), 3);
    let s = g.stats();
    assert_eq!((s.neighbours.arp_requests, s.neighbours.pending), (1, 3));

    // The reply: learned, the three packets leave in order to gw1's MAC.
    g.inject(0, "outside", &gw1_reply(mac(GW1_OUT_MAC)));
    let out = g.run_at(t0 + Duration::from_millis(1));
    let sent = only(&out, "outside");
    assert_eq!(sent.len(), 3, "{out:?}");
    for (i, f) in sent.iter().enumerate() {
        assert_eq!(f[..6], mac(GW1_OUT_MAC));
        assert_eq!(f[6..12], mac(GW0_OUT_MAC));
        assert_eq!(esp_seq(f), i as u32 + 1);
    }
    // A later packet goes straight out; no further request.
    g.inject(0, "inside", &from_a(9));
    let out = g.run_at(t0 + Duration::from_millis(2));
    assert_eq!(only(&out, "outside").len(), 1);
    assert!(!is_arp(&only(&out, "outside")[0]));
    let s = g.stats();
    assert_eq!(s.neighbours.arp_requests, 1);
    assert_eq!((s.neighbours.learned, s.neighbours.added, s.neighbours.pending), (1, 1, 0));
    assert_eq!(s.drops["neigh_reply"], 1);
    assert_eq!(s.drops.values().sum::<u64>(), 1);
    assert_accounted(&s, "resolved");
    let n = g.tables.neighbours.load_full();
    assert_eq!(n.get(GW1_OUT.into()).map(|e| e.mac), Some(mac(GW1_OUT_MAC)));
}

#[test]
fn pending_queue_limits_are_counted() {
    // 3 packets in all, 2 per next hop.
    let mut g = gw("limits", "retrans_ms = 100\npending_packets = 3\npending_per_hop = 2");
    let t0 = Instant::now();
    for n in 0..3 {
        g.inject(0, "inside", &from_a(n));
    }
    // Inbound traffic to hostA (on link, inside) needs hostA's MAC: ESP from gw1.
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let to_a: Vec<Vec<u8>> = (0..2).map(|n| eth(mac("02:00:00:00:01:01"), mac("02:00:00:00:0b:01"), 0x0800, &udp_packet(HOST_B, HOST_A, 0, 64, 5001, 40000, &[n; 8]))).collect();
    let esp: Vec<Vec<u8>> = gw1.push("inside", &to_a).into_iter().filter(|(p, _)| p == "outside").map(|(_, f)| f).collect();
    assert_eq!(esp.len(), 2);
    for f in &esp {
        let mut f = f.clone();
        f[..6].copy_from_slice(&mac(GW0_OUT_MAC));
        g.inject(0, "outside", &f);
    }
    let out = g.run_at(t0);
    let arps: Vec<_> = out.iter().filter(|(_, _, f)| is_arp(f)).collect();
    assert_eq!(arps.len(), 2, "one request per next hop");
    let inside_req = &only(&out, "inside")[0];
    assert_eq!(inside_req[28..32], [192, 0, 2, 1], "asked from our inside address");
    assert_eq!(inside_req[38..42], HOST_A.octets());
    assert_eq!(g.workers[0].pending_packets(), 3);
    let s = g.stats();
    assert_eq!(s.drops["neigh_queue_full"], 2, "one over the per-hop limit, one over the queue");
    assert_eq!(s.neighbours.pending, 3);
    assert_accounted(&s, "limits");
}

#[test]
fn unanswered_next_hop_three_requests_then_neigh_unresolved() {
    let mut g = gw("unres", TABLE);
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    g.inject(0, "inside", &from_a(0));
    g.inject(0, "inside", &from_a(1));
    assert_eq!(only(&g.run_at(t0), "outside").len(), 1);
    assert_eq!(only(&g.run_at(t0 + ms(99)), "outside").len(), 0, "not before retrans_ms");
    let r2 = only(&g.run_at(t0 + ms(100)), "outside");
    assert_eq!(r2.len(), 1);
    assert_arp_request(&r2[0], [0xff; 6], [0; 6]);
    assert_eq!(only(&g.run_at(t0 + ms(200)), "outside").len(), 1);
    assert_eq!(g.stats().drops["neigh_unresolved"], 0);
    assert!(g.run_at(t0 + ms(300)).is_empty(), "no fourth request");
    let s = g.stats();
    assert_eq!(s.drops["neigh_unresolved"], 2);
    assert_eq!((s.neighbours.arp_requests, s.neighbours.pending), (3, 0));
    assert_eq!(g.workers[0].pending_packets(), 0);
    assert_eq!(g.workers[0].free_buffers(), 512, "every held buffer is back");
    assert_accounted(&s, "unresolved");
    // The next packet starts over.
    g.inject(0, "inside", &from_a(2));
    assert_eq!(only(&g.run_at(t0 + ms(301)), "outside").len(), 1);
    assert_eq!(g.stats().neighbours.arp_requests, 4);
}

#[test]
fn learned_entry_ages_reachable_stale_probe_removed() {
    let mut g = gw("aging", TABLE);
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    g.inject(0, "outside", &gw1_reply(mac(GW1_OUT_MAC)));
    g.run_at(t0);
    assert_eq!(g.stats().neighbours.entries, 1);
    // Reachable: straight out, no probe.
    g.inject(0, "inside", &from_a(0));
    let out = only(&g.run_at(t0 + ms(1999)), "outside");
    assert_eq!(out.len(), 1);
    assert!(!is_arp(&out[0]));
    // Stale (reachable_ms = 2000): used, and one unicast probe to the known MAC.
    g.inject(0, "inside", &from_a(1));
    g.inject(0, "inside", &from_a(2));
    let out = only(&g.run_at(t0 + ms(2000)), "outside");
    assert_eq!(out.iter().filter(|f| !is_arp(f)).count(), 2);
    let probes: Vec<_> = out.iter().filter(|f| is_arp(f)).collect();
    assert_eq!(probes.len(), 1, "one probe for two packets");
    assert_arp_request(probes[0], mac(GW1_OUT_MAC), mac(GW1_OUT_MAC));
    // Within retrans_ms: no second probe.
    g.inject(0, "inside", &from_a(3));
    let out = only(&g.run_at(t0 + ms(2099)), "outside");
    assert_eq!(out.iter().filter(|f| is_arp(f)).count(), 0);
    g.inject(0, "inside", &from_a(4));
    let out = only(&g.run_at(t0 + ms(2100)), "outside");
    assert_eq!(out.iter().filter(|f| is_arp(f)).count(), 1, "next probe after retrans_ms");
    assert_eq!(g.stats().neighbours.probes, 2);
    // Unconfirmed at reachable + 3 × retrans: removed; traffic resolves again.
    g.run_at(t0 + ms(2300));
    let s = g.stats();
    assert_eq!((s.neighbours.entries, s.neighbours.aged_out), (0, 1));
    g.inject(0, "inside", &from_a(5));
    let out = only(&g.run_at(t0 + ms(2301)), "outside");
    assert_eq!(out.len(), 1);
    assert_arp_request(&out[0], [0xff; 6], [0; 6]);
    // A reply confirms it again and releases the packet.
    g.inject(0, "outside", &gw1_reply(mac(GW1_OUT_MAC)));
    let out = only(&g.run_at(t0 + ms(2302)), "outside");
    assert_eq!(out.len(), 1);
    assert_eq!(esp_seq(&out[0]), 6);
}

#[test]
fn spoofed_or_off_port_arp_is_not_learned() {
    let mut g = gw("spoof", TABLE);
    let t0 = Instant::now();
    let frames = [
        // A sender whose address routes out of the other port (192.0.2.0/24 is inside).
        arp(mac(GW0_OUT_MAC), 2, mac("02:00:00:00:99:01"), Ipv4Addr::new(192, 0, 2, 50), mac(GW0_OUT_MAC), GW0_OUT),
        // A multicast sender MAC (in a frame from a unicast source).
        {
            let mut f = arp(mac(GW0_OUT_MAC), 2, [0x01, 0, 0x5e, 0, 0, 1], GW1_OUT, mac(GW0_OUT_MAC), GW0_OUT);
            f[6..12].copy_from_slice(&mac("02:00:00:00:99:05"));
            f
        },
        // A zero sender MAC.
        arp(mac(GW0_OUT_MAC), 2, [0; 6], GW1_OUT, mac(GW0_OUT_MAC), GW0_OUT),
        // A sender claiming our own address.
        arp(mac(GW0_OUT_MAC), 2, mac("02:00:00:00:99:02"), GW0_OUT, mac(GW0_OUT_MAC), GW0_OUT),
        // A reply to someone else's address.
        arp(mac(GW0_OUT_MAC), 2, mac(GW1_OUT_MAC), GW1_OUT, mac(GW0_OUT_MAC), Ipv4Addr::new(203, 0, 113, 77)),
        // Broadcast sender address.
        arp(mac(GW0_OUT_MAC), 2, mac("02:00:00:00:99:03"), Ipv4Addr::BROADCAST, mac(GW0_OUT_MAC), GW0_OUT),
    ];
    for f in &frames {
        g.inject(0, "outside", f);
    }
    // An NA whose target routes inside, arriving outside; and one with S set to a multicast destination.
    g.inject(0, "outside", &na(v6("2001:db8:a::99"), v6("2001:db8:ff::1"), v6("2001:db8:a::99"), 0x60, Some(mac("02:00:00:00:99:04")), mac("02:00:00:00:99:04")));
    g.inject(0, "outside", &na(v6("2001:db8:ff::2"), v6("ff02::1"), v6("2001:db8:ff::2"), 0x60, Some(mac(GW1_OUT_MAC)), mac(GW1_OUT_MAC)));
    // An NA with neither S nor O.
    g.inject(0, "outside", &na(v6("2001:db8:ff::2"), v6("2001:db8:ff::1"), v6("2001:db8:ff::2"), 0, Some(mac(GW1_OUT_MAC)), mac(GW1_OUT_MAC)));
    let out = g.run_at(t0);
    assert!(out.is_empty(), "{out:?}");
    let s = g.stats();
    assert_eq!((s.neighbours.learned, s.neighbours.entries), (0, 0));
    assert_eq!(s.drops["arp_ignored"], 6);
    assert_eq!(s.drops["nd_ignored"], 3);
    // Traffic still has to resolve.
    g.inject(0, "inside", &from_a(0));
    let out = only(&g.run_at(t0 + Duration::from_millis(1)), "outside");
    assert!(is_arp(&out[0]));
}

#[test]
fn an_arp_request_for_us_is_answered_and_its_sender_learned() {
    let mut g = gw("asker", TABLE);
    let t0 = Instant::now();
    g.inject(0, "outside", &arp([0xff; 6], 1, mac(GW1_OUT_MAC), GW1_OUT, [0; 6], GW0_OUT));
    let out = only(&g.run_at(t0), "outside");
    assert_eq!(out.len(), 1, "the reply");
    assert_eq!(out[0][20..22], [0, 2]);
    assert_eq!(g.stats().neighbours.entries, 1);
    g.inject(0, "inside", &from_a(0));
    let out = only(&g.run_at(t0 + Duration::from_millis(1)), "outside");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0][..6], mac(GW1_OUT_MAC), "no request needed");
}

#[test]
fn static_entries_are_never_overridden() {
    // ep0.toml has a static entry for 203.0.113.2.
    let mut g = MemGateway::from_config("configs/ep0.toml");
    let t0 = Instant::now();
    g.inject(0, "outside", &gw1_reply(mac("02:00:00:00:66:66")));
    g.run_at(t0);
    g.inject(0, "inside", &from_a(0));
    let out = only(&g.run_at(t0 + Duration::from_secs(3600)), "outside");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0][..6], mac(GW1_OUT_MAC), "the static MAC, not the learned one, an hour later");
    let n = g.tables.neighbours.load_full();
    assert_eq!(n.get(GW1_OUT.into()).map(|e| (e.mac, e.learned)), Some((mac(GW1_OUT_MAC), None)));
    assert_eq!(g.stats().neighbours.arp_requests, 0);
}

#[test]
fn peer_mac_is_used_when_there_is_no_entry() {
    let peer = "02:00:00:00:77:77";
    let mut g = MemGateway::from_config(&config("peer", TABLE, &format!("peer_mac = \"{peer}\"")));
    g.inject(0, "inside", &from_a(0));
    let out = only(&g.run_at(Instant::now()), "outside");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0][..6], mac(peer));
    assert_eq!(g.stats().neighbours.arp_requests, 0, "no resolution with a peer_mac");
    // A learned entry wins over peer_mac (static → learned → peer_mac → resolve).
    g.inject(0, "outside", &gw1_reply(mac(GW1_OUT_MAC)));
    g.inject(0, "inside", &from_a(1));
    let t = Instant::now();
    g.run_at(t);
    g.inject(0, "inside", &from_a(2));
    let out = only(&g.run_at(t), "outside");
    assert_eq!(out[0][..6], mac(GW1_OUT_MAC));
}

#[test]
fn ipv6_next_hop_is_resolved_with_a_neighbor_solicitation() {
    let mut g = gw("nd", TABLE);
    let t0 = Instant::now();
    g.inject(0, "inside", &from_a6(0));
    g.inject(0, "inside", &from_a6(1));
    let out = only(&g.run_at(t0), "outside");
    assert_eq!(out.len(), 1, "{out:?}");
    let f = &out[0];
    let (me, peer) = (v6("2001:db8:ff::1"), v6("2001:db8:ff::2"));
    let sn = v6("ff02::1:ff00:2"); // RFC 4291 §2.7.1
    assert_eq!(f[..6], [0x33, 0x33, 0xff, 0x00, 0x00, 0x02], "RFC 2464 §7 multicast MAC");
    assert_eq!(f[6..12], mac(GW0_OUT_MAC));
    assert_eq!(f[12..14], [0x86, 0xdd]);
    let ip = &f[14..];
    assert_eq!(ip[0] >> 4, 6);
    assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 32);
    assert_eq!((ip[6], ip[7]), (58, 255), "ICMPv6, hop limit 255 (RFC 4861 §7.1.1)");
    assert_eq!(ip[8..24], me.octets());
    assert_eq!(ip[24..40], sn.octets());
    let m = &ip[40..];
    assert_eq!(m.len(), 32);
    assert_eq!((m[0], m[1]), (135, 0));
    assert_eq!(m[4..8], [0; 4]);
    assert_eq!(m[8..24], peer.octets());
    assert_eq!(m[24..26], [1, 1], "source link-layer address option");
    assert_eq!(m[26..32], mac(GW0_OUT_MAC));
    assert_eq!(icmpv6_checksum(&me, &sn, m), 0, "checksum verifies");
    assert_eq!(g.stats().neighbours.ns_sent, 1);
    // gw1's solicited advertisement: learned, the packets leave.
    g.inject(0, "outside", &na(peer, me, peer, 0x60, Some(mac(GW1_OUT_MAC)), mac(GW1_OUT_MAC)));
    let out = only(&g.run_at(t0 + Duration::from_millis(1)), "outside");
    assert_eq!(out.len(), 2);
    for f in &out {
        assert_eq!(f[..6], mac(GW1_OUT_MAC));
        assert_eq!(f[12..14], [0x86, 0xdd]);
    }
    let s = g.stats();
    assert_eq!((s.neighbours.learned, s.neighbours.entries, s.drops["neigh_reply"]), (1, 1, 1));
    assert_accounted(&s, "nd");
}

#[test]
fn ipv6_unsolicited_override_na_and_ns_with_source_option_are_learned() {
    let mut g = gw("nd2", TABLE);
    let t0 = Instant::now();
    let (me, peer) = (v6("2001:db8:ff::1"), v6("2001:db8:ff::2"));
    // Unsolicited, O set, to all-nodes (RFC 4861 §7.2.6).
    g.inject(0, "outside", &na(peer, v6("ff02::1"), peer, 0x20, Some(mac(GW1_OUT_MAC)), mac(GW1_OUT_MAC)));
    g.run_at(t0);
    assert_eq!(g.stats().neighbours.entries, 1);
    // An NS for our address from 2001:db8:ff::3 with a source link-layer option.
    let other = v6("2001:db8:ff::3");
    g.inject(0, "outside", &ns_with_source(other, me, mac("02:00:00:00:03:03")));
    let out = only(&g.run_at(t0), "outside");
    assert_eq!(out.len(), 1, "the NS is answered");
    let s = g.stats();
    assert_eq!((s.neighbours.learned, s.neighbours.entries, s.drops["neigh_reply"]), (2, 2, 1));
    let n = g.tables.neighbours.load_full();
    assert_eq!(n.get(other.into()).map(|e| e.mac), Some(mac("02:00:00:00:03:03")));
}

/// A Neighbor Solicitation from 2001:db8:ff::3 for gw0's outside address
/// is answered only when it goes to that address's solicited-node group or
/// to the address itself (RFC 4861 §7.2.1: the groups a host joins for it),
/// and never to a group, the zero or gw0's own MAC named in its source
/// link-layer option (helper-99: the Advertisement went to 33:33:00:00:00:01,
/// a reflection to every node of the link); each is `nd_ignored`.
#[test]
fn a_solicitation_to_another_group_or_naming_a_bogus_mac_is_not_answered() {
    let mut g = gw("nd-bogus", TABLE);
    let t0 = Instant::now();
    let (me, other) = (v6("2001:db8:ff::1"), v6("2001:db8:ff::3"));
    let ns = |dst: Ipv6Addr, sll: [u8; 6], eth_src: [u8; 6]| ns_to(other, dst, me, sll, eth_src);
    let good = mac("02:00:00:00:03:03");
    let bad = [
        ns(me, mac("33:33:00:00:00:01"), good),
        ns(me, [0; 6], good),
        ns(me, mac(GW0_OUT_MAC), good),
        ns(me, good, mac(GW0_OUT_MAC)),
        ns(v6("ff02::1:ff00:99"), good, good),
        ns(v6("ff02::1"), good, good),
    ];
    for (k, f) in bad.iter().enumerate() {
        g.inject(0, "outside", f);
        assert!(only(&g.run_at(t0), "outside").is_empty(), "solicitation {k} answered");
        assert_eq!(g.stats().drops["nd_ignored"], k as u64 + 1);
    }
    assert_eq!(g.stats().neighbours.learned, 0);
    // The controls: to the solicited-node group and to the address.
    for dst in [v6("ff02::1:ff00:1"), me] {
        g.inject(0, "outside", &ns(dst, good, good));
        let out = only(&g.run_at(t0), "outside");
        assert_eq!(out.len(), 1, "the NS to {dst} is answered");
        assert_eq!(&out[0][..6], &good, "to the sender's link-layer address");
    }
}

/// RFC 4861 §7.2.5: a solicited advertisement without the Override flag
/// confirms the cached address but does not replace a different one
/// (`nd_ignored`); with O it does.
#[test]
fn ipv6_na_without_override_keeps_the_cached_address() {
    let mut g = gw("nd-o", TABLE);
    let t0 = Instant::now();
    let (me, peer) = (v6("2001:db8:ff::1"), v6("2001:db8:ff::2"));
    let (first, other) = (mac(GW1_OUT_MAC), mac("02:00:00:00:05:05"));
    let cached = |g: &MemGateway| g.tables.neighbours.load_full().get(peer.into()).map(|e| e.mac);
    g.inject(0, "outside", &na(peer, v6("ff02::1"), peer, 0x20, Some(first), first));
    g.run_at(t0);
    assert_eq!(cached(&g), Some(first));
    // S without O, another address: not taken.
    g.inject(0, "outside", &na(peer, me, peer, 0x40, Some(other), other));
    g.run_at(t0);
    assert_eq!(cached(&g), Some(first));
    assert_eq!(g.stats().drops["nd_ignored"], 1);
    // S without O, the cached address: a confirmation.
    g.inject(0, "outside", &na(peer, me, peer, 0x40, Some(first), first));
    g.run_at(t0);
    assert_eq!((cached(&g), g.stats().drops["neigh_reply"]), (Some(first), 2));
    // S and O: replaced.
    g.inject(0, "outside", &na(peer, me, peer, 0x60, Some(other), other));
    g.run_at(t0);
    assert_eq!(cached(&g), Some(other));
    let s = g.stats();
    assert_eq!((s.drops["nd_ignored"], s.drops["neigh_reply"]), (1, 3));
    assert_accounted(&s, "na override");
}

/// Trial-user findings: the gateway's own MAC is never learned as a
/// neighbour's; an ARP frame unicast to another station is `not_for_us`
/// (neither answered nor learned from); a frame whose Ethernet source is
/// a group address is `malformed` (IEEE 802: never a source).
#[test]
fn own_mac_other_stations_arp_and_group_sources_are_refused() {
    let mut g = gw("ownmac", TABLE);
    let t0 = Instant::now();
    // gw1's address claimed at our own outside (and inside) MAC.
    let mut own = gw1_reply(mac(GW0_OUT_MAC));
    own[6..12].copy_from_slice(&mac("02:00:00:00:99:06"));
    g.inject(0, "outside", &own);
    let mut own_in = gw1_reply(mac(GW0_IN_MAC));
    own_in[6..12].copy_from_slice(&mac("02:00:00:00:99:06"));
    g.inject(0, "outside", &own_in);
    // A genuine-looking reply, but to another station's MAC.
    g.inject(0, "outside", &arp(mac("02:00:00:00:99:99"), 2, mac(GW1_OUT_MAC), GW1_OUT, mac(GW0_OUT_MAC), GW0_OUT));
    // Data from a multicast Ethernet source.
    let mut f = from_a(0);
    f[6..12].copy_from_slice(&[0x01, 0, 0x5e, 0, 0, 1]);
    g.inject(0, "inside", &f);
    let out = g.run_at(t0);
    assert!(out.is_empty(), "{out:?}");
    let s = g.stats();
    assert_eq!((s.neighbours.learned, s.neighbours.entries), (0, 0));
    assert_eq!((s.drops["arp_ignored"], s.drops["not_for_us"], s.drops["malformed"]), (2, 1, 1));
    assert_eq!(s.drops.values().sum::<u64>(), 4);
}

/// A route's next hop outside every prefix of its port (`via` reached by
/// the port's own routing, e.g. a /32 route): the answer to our own
/// request is learned (it failed the reverse-path rule: a blackhole that
/// `check` did not flag; trial-user finding).
#[test]
fn a_via_outside_the_port_prefixes_is_resolved() {
    let cfg = config("via-off", TABLE, "");
    let text = std::fs::read_to_string(&cfg).unwrap() + "\n[[route]]\nprefix = \"203.0.113.2/32\"\nport = \"outside\"\nvia = \"198.19.0.1\"\n";
    std::fs::write(&cfg, text).unwrap();
    let mut g = MemGateway::from_config(&cfg);
    let _ = std::fs::remove_file(&cfg);
    let t0 = Instant::now();
    g.inject(0, "inside", &from_a(1));
    let out = only(&g.run_at(t0), "outside");
    assert_eq!(out.len(), 1);
    assert!(is_arp(&out[0]) && out[0][38..42] == [198, 19, 0, 1], "asks for the via: {:?}", out[0]);
    let via = Ipv4Addr::new(198, 19, 0, 1);
    let hop_mac = mac("02:00:00:00:77:01");
    g.inject(0, "outside", &arp(mac(GW0_OUT_MAC), 2, hop_mac, via, mac(GW0_OUT_MAC), GW0_OUT));
    let out = only(&g.run_at(t0 + Duration::from_millis(1)), "outside");
    assert_eq!(out.len(), 1, "the held packet leaves");
    assert_eq!(out[0][..6], hop_mac);
    assert_eq!(esp_seq(&out[0]), 1);
    let s = g.stats();
    assert_eq!((s.neighbours.learned, s.drops["neigh_reply"]), (1, 1));
    // An unasked reply for an address off every prefix is still refused.
    g.inject(0, "outside", &arp(mac(GW0_OUT_MAC), 2, mac("02:00:00:00:77:02"), Ipv4Addr::new(198, 19, 0, 2), mac(GW0_OUT_MAC), GW0_OUT));
    g.run_at(t0 + Duration::from_millis(2));
    assert_eq!(g.stats().neighbours.learned, 1);
}

/// `pending_packets = 0`: no packet waits, but the next hop is still
/// asked for (it was never asked: a permanent blackhole; trial-user
/// finding), so a later packet finds the MAC.
#[test]
fn with_no_pending_queue_the_next_hop_is_still_resolved() {
    let mut g = gw("nopending", "retrans_ms = 100\npending_packets = 0\npending_per_hop = 1");
    let t0 = Instant::now();
    g.inject(0, "inside", &from_a(0));
    g.inject(0, "inside", &from_a(1));
    let out = only(&g.run_at(t0), "outside");
    assert_eq!(out.len(), 1, "one request: {out:?}");
    assert_arp_request(&out[0], [0xff; 6], [0; 6]);
    assert_eq!(g.stats().drops["neigh_queue_full"], 2);
    g.inject(0, "outside", &gw1_reply(mac(GW1_OUT_MAC)));
    g.run_at(t0 + Duration::from_millis(1));
    g.inject(0, "inside", &from_a(2));
    let out = only(&g.run_at(t0 + Duration::from_millis(2)), "outside");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0][..6], mac(GW1_OUT_MAC));
    let s = g.stats();
    assert_eq!(s.neighbours.arp_requests, 1);
    assert_accounted(&s, "no pending queue");
}

/// A port without an IPv4 address asks from 0.0.0.0 (README); the answer,
/// addressed to 0.0.0.0, is learned (it was dropped as not for one of our
/// addresses, so such a port never resolved; trial-user finding).
#[test]
fn a_port_without_an_ipv4_address_learns_the_answer_to_its_request() {
    let cfg = edited_config("ep0-v6.toml", "noipv4", |t| {
        let cut = t.find("[[neighbour]]").expect("ep0-v6 has neighbours");
        let t = t[..cut].replace("addresses = [\"203.0.113.1/24\", \"2001:db8:ff::1/64\"]", "addresses = [\"2001:db8:ff::1/64\"]");
        format!("{t}\n[neighbour_table]\n{TABLE}\n")
    });
    let mut g = MemGateway::from_config(&cfg);
    let _ = std::fs::remove_file(&cfg);
    let t0 = Instant::now();
    g.inject(0, "inside", &from_a(0));
    let out = only(&g.run_at(t0), "outside");
    assert_eq!(out.len(), 1);
    assert!(is_arp(&out[0]) && out[0][28..32] == [0, 0, 0, 0], "asked from 0.0.0.0: {:?}", out[0]);
    // The answer as Linux sends it: to the asking MAC, target IP 0.0.0.0.
    g.inject(0, "outside", &arp(mac(GW0_OUT_MAC), 2, mac(GW1_OUT_MAC), GW1_OUT, mac(GW0_OUT_MAC), Ipv4Addr::UNSPECIFIED));
    let out = only(&g.run_at(t0 + Duration::from_millis(1)), "outside");
    assert_eq!(out.len(), 1, "the held packet leaves");
    assert_eq!(out[0][..6], mac(GW1_OUT_MAC));
    assert_eq!(g.stats().neighbours.learned, 1);
}

/// Inserts an atomic Fragment header (offset 0, M clear; RFC 8200 §4.5,
/// RFC 6946) between the IPv6 header and the ICMPv6 message of the frame
/// `f` (Ethernet + IPv6 without extension headers).
fn in_atomic_fragment(f: &[u8]) -> Vec<u8> {
    let mut g = f[..14 + 40].to_vec();
    let nh = g[14 + 6];
    g[14 + 6] = 44;
    let plen = u16::from_be_bytes([g[14 + 4], g[14 + 5]]) + 8;
    g[14 + 4..14 + 6].copy_from_slice(&plen.to_be_bytes());
    g.extend_from_slice(&[nh, 0, 0, 0, 0x12, 0x34, 0x56, 0x78]);
    g.extend_from_slice(&f[14 + 40..]);
    g
}

/// RFC 6980 §5: ND messages in packets with a Fragment header, even an
/// atomic fragment, are ignored: a solicitation for our address is not
/// answered and its source option not learned, an unsolicited override
/// advertisement not learned; both counted `nd_ignored`. The same
/// messages without the Fragment header are taken (the control).
#[test]
fn nd_in_a_fragment_header_is_ignored() {
    let mut g = gw("nd-frag", TABLE);
    let t0 = Instant::now();
    let (me, peer, other) = (v6("2001:db8:ff::1"), v6("2001:db8:ff::2"), v6("2001:db8:ff::3"));
    let unsolicited = na(peer, v6("ff02::1"), peer, 0x20, Some(mac(GW1_OUT_MAC)), mac(GW1_OUT_MAC));
    let ns = ns_with_source(other, me, mac("02:00:00:00:03:03"));
    g.inject(0, "outside", &in_atomic_fragment(&unsolicited));
    g.inject(0, "outside", &in_atomic_fragment(&ns));
    let out = g.run_at(t0);
    assert!(out.is_empty(), "nothing answered: {out:?}");
    let s = g.stats();
    assert_eq!((s.neighbours.learned, s.neighbours.entries, s.drops["nd_ignored"]), (0, 0, 2));
    assert_accounted(&s, "nd in fragments");
    g.inject(0, "outside", &unsolicited);
    g.inject(0, "outside", &ns);
    assert_eq!(only(&g.run_at(t0), "outside").len(), 1, "the NS without a Fragment header is answered");
    let s = g.stats();
    assert_eq!((s.neighbours.learned, s.drops["nd_ignored"]), (2, 2));
}

/// helper-93: the directed broadcast address of one of the gateway's
/// subnets (192.0.2.255 inside, 203.0.113.255 outside: /24s) names no host.
/// As a destination it is `martian` (RFC 2644: not forwarded by default),
/// never resolved by ARP as if it were a neighbour; as a source too (RFC
/// 1812 §5.3.7), also at TTL 1 (no Time Exceeded to a broadcast address,
/// RFC 1122 §3.2.2); an ARP reply claiming it is not learned.
#[test]
fn our_subnets_broadcast_address_is_no_host() {
    let mut g = gw("bcast", TABLE);
    let t0 = Instant::now();
    let inside_bc = Ipv4Addr::new(192, 0, 2, 255);
    let from_a_ip = |ip: &[u8]| eth(mac(GW0_IN_MAC), mac(A_MAC), 0x0800, ip);
    g.inject(0, "inside", &from_a_ip(&udp_packet(HOST_A, inside_bc, 0, 64, 40000, 9, b"to the broadcast")));
    g.inject(0, "inside", &from_a_ip(&udp_packet(inside_bc, HOST_B, 0, 64, 40000, 5001, b"from the broadcast")));
    g.inject(0, "inside", &from_a_ip(&udp_packet(inside_bc, HOST_B, 0, 1, 40000, 5001, b"from it, TTL 1")));
    let out = g.run_at(t0);
    assert!(out.is_empty(), "nothing sent, no ARP request: {out:?}");
    let s = g.stats();
    assert_eq!((s.drops["martian"], s.neighbours.arp_requests, s.icmp_sent), (3, 0, 0), "{:?}", s.drops);
    // A reply claiming the outside subnet's broadcast address.
    g.inject(0, "outside", &arp(mac(GW0_OUT_MAC), 2, mac("02:00:00:00:0b:66"), Ipv4Addr::new(203, 0, 113, 255), mac(GW0_OUT_MAC), GW0_OUT));
    g.run_at(t0);
    let s = g.stats();
    assert_eq!((s.neighbours.learned, s.neighbours.entries, s.drops["arp_ignored"]), (0, 0, 1));
    assert_accounted(&s, "broadcast");
    // The control: the same reply from 203.0.113.3 is learned.
    g.inject(0, "outside", &arp(mac(GW0_OUT_MAC), 2, mac("02:00:00:00:0b:66"), Ipv4Addr::new(203, 0, 113, 3), mac(GW0_OUT_MAC), GW0_OUT));
    g.run_at(t0);
    assert_eq!(g.stats().neighbours.learned, 1);
}
