//! Source routing and broken IP options (RFC 791 §3.1, RFC 7126 §4.3–4.4,
//! RFC 8200 §4.1/§4.4, RFC 5095): an IPv4 packet with a Loose or Strict
//! Source and Record Route option is dropped as `source_route`, whether
//! it is ESP to the gateway, plaintext through it, or the inner packet of
//! an SA; so is an IPv6 packet to us whose Routing header has segments
//! left. Options that do not walk (a length of 0 or 1, or past the
//! header) are `malformed`, as is an IPv6 header chain with two Fragment
//! headers. Harmless options and a Routing header with no segments left
//! still pass. Packets are made by gw0 (ESP) or by hand, headers edited
//! here with checksums summed here (tests/common).

mod common;
use common::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

/// `frame` (Ethernet + IPv4 with a 20-byte header) with `opts` (a
/// multiple of 4 bytes) inserted as the header's options, lengths and
/// header checksum set.
fn with_options(frame: &[u8], opts: &[u8]) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let mut ip = frame[14..34].to_vec();
    ip[0] = 0x45 + (opts.len() / 4) as u8;
    ip.extend_from_slice(opts);
    ip.extend_from_slice(&frame[34..]);
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    set_ipv4_checksum(&mut ip);
    let mut f = frame[..14].to_vec();
    f.extend_from_slice(&ip);
    f
}

/// An LSRR option (type 0x83, length 7, pointer 4: one address still to
/// visit, `next`) and an End of Options List: 8 bytes.
fn lsrr(next: Ipv4Addr) -> Vec<u8> {
    let mut o = vec![0x83, 7, 4];
    o.extend_from_slice(&next.octets());
    o.push(0);
    o
}

fn from_host_a(ip: &[u8]) -> Vec<u8> {
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, ip)
}

/// One ESP frame gw0 sends to gw1 for a fresh UDP packet hostA → hostB.
fn esp_from_gw0(gw0: &mut Gw, n: u8) -> Vec<u8> {
    let out = gw0.push("inside", &[from_host_a(&udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, &[n; 64]))]);
    assert_eq!(out.len(), 1, "gw0 encrypts");
    out[0].1.clone()
}

#[test]
fn source_routed_ipv4_is_dropped_to_through_and_inside_the_tunnel() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    // ESP to gw1 with an unfinished loose source route on to hostB.
    let esp = esp_from_gw0(&mut gw0, 1);
    assert!(gw1.push("outside", &[with_options(&esp, &lsrr(HOST_B))]).is_empty());
    assert_eq!((gw1.drop_count("source_route"), gw1.stats().sas.iter().map(|s| s.packets).sum::<u64>()), (1, 0), "not decrypted");
    // A strict one too (type 0x89).
    let mut ssrr = lsrr(HOST_B);
    ssrr[0] = 0x89;
    assert!(gw1.push("outside", &[with_options(&esp_from_gw0(&mut gw0, 2), &ssrr)]).is_empty());
    assert_eq!(gw1.drop_count("source_route"), 2);
    // Harmless options (NOPs): decrypted and forwarded.
    let out = gw1.push("outside", &[with_options(&esp_from_gw0(&mut gw0, 3), &[1, 1, 1, 0])]);
    assert_eq!(out.len(), 1, "{:?}", gw1.stats().drops);
    assert_eq!(out[0].0, "inside");
    // Plaintext from hostA through gw0: dropped before the SPD.
    let mut ip = udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, b"routed");
    let frame = with_options(&from_host_a(&ip), &lsrr(HOST_B));
    assert!(gw0.push("inside", &[frame]).is_empty());
    assert_eq!(gw0.drop_count("source_route"), 1);
    // Inside an SA: the inner packet, sealed with SA 1001's key, carries the route.
    add_ipv4_options(&mut ip);
    ip.splice(20..24, lsrr(HOST_B));
    ip[0] = 0x47;
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    set_ipv4_checksum(&mut ip);
    let key = gw1.sa_key(1001, true);
    let outer = &with_options(&esp, &[])[14..34];
    let sealed = seal_gcm128(&key, 1001, 1000, false, &ip, 4);
    assert!(gw1.push("outside", &[to_gw1(outer, 50, &sealed)]).is_empty());
    let s = gw1.stats();
    assert_eq!((s.drops["source_route"], s.drops["auth_failed"]), (3, 0), "{:?}", s.drops);
    // The same inner packet without the option goes through.
    let plain = udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, b"routed");
    assert_eq!(gw1.push("outside", &[to_gw1(outer, 50, &seal_gcm128(&key, 1001, 1001, false, &plain, 4))]).len(), 1);
    assert_accounted(&gw1.stats(), "gw1");
}

#[test]
fn options_that_do_not_walk_are_malformed() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let cases: [(&str, [u8; 4]); 3] = [
        ("length 0", [7, 0, 0, 0]),
        ("length 1", [0x44, 1, 0, 0]),
        ("length past the header", [7, 40, 4, 0]),
    ];
    for (i, (what, opts)) in cases.iter().enumerate() {
        let f = with_options(&esp_from_gw0(&mut gw0, i as u8), opts);
        assert!(gw1.push("outside", &[f]).is_empty(), "{what}");
        assert_eq!(gw1.drop_count("malformed"), i as u64 + 1, "{what}: {:?}", gw1.stats().drops);
    }
    assert_eq!(gw1.stats().sas.iter().map(|s| s.packets).sum::<u64>(), 0, "none decrypted");
    // A NOP run to the end of the header, and an option filling it exactly, walk.
    for opts in [[1u8, 1, 1, 1], [0x44, 4, 5, 0]] {
        assert_eq!(gw1.push("outside", &[with_options(&esp_from_gw0(&mut gw0, 9), &opts)]).len(), 1, "{opts:?}");
    }
    assert_accounted(&gw1.stats(), "gw1");
}

/// An IPv6 packet to gw1's outside address with extension headers `ext`
/// (each given as (its type, its bytes with the Next Header byte left 0))
/// and then 24 bytes of ESP for SPI 0x4242 (no SA): what the gateway makes
/// of the chain shows in the drop reason.
fn v6_to_gw1(ext: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let src: Ipv6Addr = "2001:db8:ff::1".parse().unwrap();
    let dst: Ipv6Addr = "2001:db8:ff::2".parse().unwrap();
    let mut payload = Vec::new();
    for (i, (_, h)) in ext.iter().enumerate() {
        let mut h = h.clone();
        h[0] = ext.get(i + 1).map_or(50, |e| e.0);
        payload.extend_from_slice(&h);
    }
    payload.extend_from_slice(&0x4242u32.to_be_bytes());
    payload.extend_from_slice(&[0; 20]);
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[ext.first().map_or(50, |e| e.0), 64]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(&payload);
    eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x86dd, &ip)
}

#[test]
fn ipv6_routing_headers_to_us_and_double_fragment_headers() {
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    // Routing header type 0, one address, segments left 1: we would be a hop.
    let mut rh0 = vec![0, 2, 0, 1, 0, 0, 0, 0];
    rh0.extend_from_slice(&"2001:db8:b::10".parse::<Ipv6Addr>().unwrap().octets());
    assert!(gw1.push("outside", &[v6_to_gw1(&[(43, rh0.clone())])]).is_empty());
    assert_eq!((gw1.drop_count("source_route"), gw1.drop_count("no_sa")), (1, 0));
    // Segments left 0: the header is passed over, the ESP looked up (no such SA).
    rh0[3] = 0;
    assert!(gw1.push("outside", &[v6_to_gw1(&[(43, rh0)])]).is_empty());
    assert_eq!((gw1.drop_count("source_route"), gw1.drop_count("no_sa")), (1, 1));
    // Two Fragment headers (the first M = 1, offset 0): malformed, not reassembled.
    let fh = |more: u8| vec![0, 0, 0, more, 0, 0, 0x12, 0x34];
    assert!(gw1.push("outside", &[v6_to_gw1(&[(44, fh(1)), (44, fh(0)), (44, fh(0))])]).is_empty());
    let s = gw1.stats();
    assert_eq!((s.drops["malformed"], s.frags_received), (1, 0), "{:?}", s.drops);
    assert_accounted(&s, "gw1");
}

/// helper-93: an IPv4 packet with options and DF clear, too big for its
/// egress port, is fragmented like one without (was dropped as
/// `mtu_exceeded`, no ICMP): RFC 791 §3.2, RFC 1812 §4.2.2.7. The first
/// fragment keeps every option; the later ones only those whose copied
/// flag is set (here Router Alert, RFC 2113; Record Route, not copied,
/// stays in the first), padded to 4 bytes. gw0 encrypts the 1200-byte
/// packet whole; gw1, its inside port at mtu 1000, decrypts it and cuts
/// it in two; the fragments are checked field by field and put back
/// together here. And into an SA with an IPv6 outer header (ep0-v6.toml's
/// v4-in-v6 SA 1101), the inner packet is cut before encryption.
#[test]
fn a_packet_with_options_is_fragmented_with_the_copied_options() {
    let rr = [7u8, 7, 4, 0, 0, 0, 0, 1]; // Record Route, one slot, then a NOP
    let ra = [0x94u8, 4, 0, 0]; // Router Alert: copied
    let opts: Vec<u8> = rr.iter().chain(ra.iter()).copied().collect();
    let mut inner = udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, &(0..1160u32).map(|i| (i * 7) as u8).collect::<Vec<_>>());
    inner[6] = 0; // DF clear
    set_ipv4_checksum(&mut inner);
    let frame = with_options(&from_host_a(&inner), &opts);
    let ip = &frame[14..];
    assert_eq!((ip.len(), ip[0]), (1200, 0x48));
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let esp = gw0.push("inside", std::slice::from_ref(&frame));
    assert_eq!(esp.len(), 1, "encrypted whole: {:?}", gw0.stats().drops);
    let cfg = edited_config("ep1.toml", "inside-1000", |t| t.replacen("addresses = [\"198.51.100.1/24\"]\n", "addresses = [\"198.51.100.1/24\"]\nmtu = 1000\n", 1));
    let mut gw1 = Gw::from_config(&cfg);
    let out = gw1.push("outside", &[esp[0].1.clone()]);
    let s = gw1.stats();
    assert_eq!(out.len(), 2, "two fragments: {:?}", s.drops);
    assert!(out.iter().all(|(p, _)| p == "inside"));
    let (f1, f2) = (&out[0].1[14..], &out[1].1[14..]);
    // First: every option, MF, offset 0, 968 data bytes (1000 − 32, to 8).
    assert_eq!(f1[0], 0x48);
    assert_eq!(&f1[20..32], &opts[..]);
    assert_eq!(u16::from_be_bytes([f1[2], f1[3]]) as usize, f1.len());
    assert_eq!((u16::from_be_bytes([f1[6], f1[7]]), f1.len()), (0x2000, 32 + 968));
    // Second: Router Alert only (24-byte header), no MF, offset 968 / 8.
    assert_eq!(f2[0], 0x46);
    assert_eq!(&f2[20..24], &ra);
    assert_eq!(u16::from_be_bytes([f2[2], f2[3]]) as usize, f2.len());
    assert_eq!(u16::from_be_bytes([f2[6], f2[7]]), 968 / 8);
    for f in [f1, f2] {
        let hl = (f[0] & 0xf) as usize * 4;
        assert_eq!(ip_checksum(&f[..hl]), 0, "header checksum verifies");
        assert_eq!(&f[4..6], &ip[4..6], "one identification");
        assert_eq!(&f[12..20], &ip[12..20]);
        assert_eq!(f[8], ip[8] - 2, "TTL decremented once by each gateway");
    }
    let mut data = f1[32..].to_vec();
    data.extend_from_slice(&f2[24..]);
    assert_eq!(data, ip[32..], "the data, put back together");
    assert_eq!((s.frags_sent, s.drops.values().sum::<u64>()), (2, 0), "{:?}", s.drops);
    // v4-in-v6: UDP to port 6001 takes SA 1101 (IPv6 outer): cut before
    // encryption, each fragment an ESP packet of its own.
    let mut to6001 = udp_packet(HOST_A, HOST_B, 0, 64, 40000, 6001, &[0x33; 1400]);
    to6001[6] = 0;
    set_ipv4_checksum(&mut to6001);
    let mut gw0v6 = Gw::from_config("configs/ep0-v6.toml");
    let out = gw0v6.push("inside", &[with_options(&from_host_a(&to6001), &opts)]);
    let s = gw0v6.stats();
    assert_eq!((out.len(), s.frags_sent, s.drops["mtu_exceeded"]), (2, 2, 0), "{:?}", s.drops);
    assert!(out.iter().all(|(p, f)| p == "outside" && f[14] >> 4 == 6 && f[14 + 6] == 50), "ESP over IPv6");
}
