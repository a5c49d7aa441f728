//! Transport mode over UDP encapsulation (RFC 3948 §3.2–3.3, §3.1.2) through
//! the in-memory pipeline: configs/ep0.toml and ep1.toml with SAs 1001/1002
//! in transport mode with `udp_encap = true`. ESP in UDP is opened and
//! sealed here by hand with `aes-gcm`, and inner TCP/UDP checksums are
//! built and checked with `etherparse`, not with the gateway's code.

mod common;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit};
use common::*;
use std::net::Ipv4Addr;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// The address hostA had behind a NAT, before the NAT rewrote it to HOST_A.
const PRIVATE_A: Ipv4Addr = Ipv4Addr::new(10, 1, 2, 3);

/// `configs/<name>` with SAs 1001 and 1002 in transport mode and
/// `udp_encap = true` plus `extra` lines, written to a fresh temp file.
fn config(name: &str, extra: &str) -> String {
    let text = std::fs::read_to_string(format!("{}/configs/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut out = String::new();
    for (i, block) in text.split("[[sa]]").enumerate() {
        if i > 0 {
            out.push_str("[[sa]]");
        }
        if !(block.contains("spi = 1001\n") || block.contains("spi = 1002\n")) {
            out.push_str(block);
            continue;
        }
        for l in block.split_inclusive('\n') {
            if l.starts_with("tunnel_src") || l.starts_with("tunnel_dst") {
                continue;
            }
            if l.starts_with("mode = ") {
                out.push_str("mode = \"transport\"\nudp_encap = true\n");
                out.push_str(extra);
                continue;
            }
            out.push_str(l);
        }
    }
    assert_eq!(out.matches("udp_encap = true").count(), 2, "{name}: SAs 1001 and 1002 switched");
    temp_config("natt-transport", name, &out)
}

fn gateways() -> (Gw, Gw) {
    (Gw::from_config(&config("ep0.toml", "")), Gw::from_config(&config("ep1.toml", "")))
}

/// IPv4 header (20 bytes, checksum set) + `l4` of protocol `proto`.
fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, ttl: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = etherparse::Ipv4Header::new(l4.len() as u16, ttl, etherparse::IpNumber(proto), src.octets(), dst.octets()).unwrap();
    h.identification = 0x4321;
    h.header_checksum = h.calc_header_checksum();
    let mut p = h.to_bytes().to_vec();
    p.extend_from_slice(l4);
    p
}

/// A UDP datagram whose checksum is computed (etherparse) over `ck_src` → `dst`.
fn udp_seg(ck_src: Ipv4Addr, dst: Ipv4Addr, dport: u16, data: &[u8]) -> Vec<u8> {
    let h = etherparse::UdpHeader::with_ipv4_checksum(40000, dport, &etherparse::Ipv4Header::new(0, 64, etherparse::IpNumber::UDP, ck_src.octets(), dst.octets()).unwrap(), data).unwrap();
    let mut s = h.to_bytes().to_vec();
    s.extend_from_slice(data);
    s
}

/// A TCP SYN segment with `data`, checksum computed over `ck_src` → `dst`.
fn tcp_seg(ck_src: Ipv4Addr, dst: Ipv4Addr, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut h = etherparse::TcpHeader::new(40001, dport, 0x0102_0304, 512);
    h.syn = true;
    h.checksum = h.calc_checksum_ipv4_raw(ck_src.octets(), dst.octets(), data).unwrap();
    let mut s = h.to_bytes().to_vec();
    s.extend_from_slice(data);
    s
}

/// Whether the TCP/UDP checksum of IPv4 packet `ip` verifies (etherparse).
fn l4_checksum_ok(ip: &[u8]) -> bool {
    let p = etherparse::SlicedPacket::from_ip(ip).unwrap();
    let h = etherparse::Ipv4HeaderSlice::from_slice(ip).unwrap();
    match p.transport {
        Some(etherparse::TransportSlice::Udp(u)) => {
            u.checksum() == u.to_header().calc_checksum_ipv4_raw(h.source(), h.destination(), u.payload()).unwrap()
        }
        Some(etherparse::TransportSlice::Tcp(t)) => {
            t.checksum() == t.to_header().calc_checksum_ipv4_raw(h.source(), h.destination(), t.payload()).unwrap()
        }
        other => panic!("not TCP/UDP: {other:?}"),
    }
}

fn from_host_a(ip: &[u8]) -> Vec<u8> {
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, ip)
}

/// Transport-mode ESP in UDP (ports 4500/4500, UDP checksum `udp_ck`)
/// sealed by hand: `hdr` (a 20-byte IPv4 header, as the NAT left it) +
/// UDP + ESP(`l4`, next header `nh`), AES-128-GCM with `key`. An Ethernet
/// frame to gw1's outside port.
fn sealed(key: &[u8], seq: u32, hdr: &[u8], l4: &[u8], nh: u8, udp_ck: u16) -> Vec<u8> {
    let mut plain = l4.to_vec();
    let pad = (4 - (l4.len() + 2) % 4) % 4;
    plain.extend((1..=pad).map(|i| i as u8));
    plain.extend_from_slice(&[pad as u8, nh]);
    let iv = [0x42u8, 1, 2, 3, 4, 5, 6, seq as u8];
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&key[16..20]);
    nonce[4..].copy_from_slice(&iv);
    let mut esp = 1001u32.to_be_bytes().to_vec();
    esp.extend_from_slice(&seq.to_be_bytes());
    let tag = Aes128Gcm::new_from_slice(&key[..16]).unwrap().encrypt_in_place_detached((&nonce).into(), &esp, &mut plain).unwrap();
    esp.extend_from_slice(&iv);
    esp.extend_from_slice(&plain);
    esp.extend_from_slice(&tag);
    let mut udp = Vec::new();
    udp.extend_from_slice(&4500u16.to_be_bytes());
    udp.extend_from_slice(&4500u16.to_be_bytes());
    udp.extend_from_slice(&((8 + esp.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&udp_ck.to_be_bytes());
    udp.extend_from_slice(&esp);
    to_gw1(hdr, 17, &udp)
}

#[test]
fn config_accepts_udp_encap_in_transport_mode() {
    let gw = Gw::from_config(&config("ep1.toml", "udp_port = 14500\n"));
    let sa = gw.cfg.sas.iter().find(|s| s.spi == 1001).unwrap();
    assert_eq!(sa.mode, secgw::config::model::SaMode::Transport);
    assert!(sa.udp_encap);
    assert_eq!((sa.udp_sport, sa.udp_dport), (14500, 14500));
}

#[test]
fn wire_format_and_round_trip_udp_tcp_icmp() {
    let (mut gw0, mut gw1) = gateways();
    let key = gw1.sa_key(1001, true);
    let mut seq = 0u32;
    for (proto, l4) in [
        (17u8, udp_seg(HOST_A, HOST_B, 5001, b"")),
        (17, udp_seg(HOST_A, HOST_B, 5001, &[7; 1])),
        (6, tcp_seg(HOST_A, HOST_B, 5002, &[9; 63])),
        (1, vec![8, 0, 0xf7, 0xff, 0, 0, 0, 0]),
        (17, udp_seg(HOST_A, HOST_B, 5001, &[3; 1400])),
    ] {
        seq += 1;
        let ip = ipv4(HOST_A, HOST_B, proto, 64, &l4);
        let out = gw0.push("inside", &[from_host_a(&ip)]);
        assert_eq!(out.len(), 1, "proto {proto}: gw0 drops {:?}", gw0.stats().drops);
        let (port, f) = &out[0];
        assert_eq!(port, "outside");
        assert_eq!(&f[..6], &mac("02:00:00:00:01:02"), "routed on the packet's own destination (via gw1)");
        let h = &f[14..34];
        assert_eq!(h[9], 17, "protocol UDP (RFC 3948 §3.2)");
        assert_eq!(ip_checksum(h), 0);
        assert_eq!(u16::from_be_bytes([h[2], h[3]]) as usize, f.len() - 14, "total length");
        assert_eq!((&h[12..16], &h[16..20]), (&HOST_A.octets()[..], &HOST_B.octets()[..]), "addresses kept");
        assert_eq!((h[8], &h[4..6]), (63, &ip[4..6]), "TTL − 1, identification kept");
        let u = &f[34..42];
        assert_eq!(u16::from_be_bytes([u[0], u[1]]), 4500);
        assert_eq!(u16::from_be_bytes([u[2], u[3]]), 4500);
        assert_eq!(u16::from_be_bytes([u[4], u[5]]) as usize, f.len() - 34, "UDP length");
        assert_eq!(&u[6..8], &[0, 0], "UDP checksum 0");
        let esp = &f[42..];
        assert_eq!(u32::from_be_bytes(esp[..4].try_into().unwrap()), 1001, "SPI right after the UDP header");
        assert_eq!(u32::from_be_bytes(esp[4..8].try_into().unwrap()), seq);
        let plain = open_gcm128(&key, esp);
        assert_eq!(*plain.last().unwrap(), proto, "Next Header = the original protocol");
        let pad = plain[plain.len() - 2] as usize;
        assert_eq!(&plain[..plain.len() - 2 - pad], &l4[..], "ESP payload = the transport payload");

        let back = gw1.push("outside", std::slice::from_ref(f));
        assert_eq!(back.len(), 1, "proto {proto}: gw1 drops {:?}", gw1.stats().drops);
        assert_eq!(back[0].0, "inside");
        let got = &back[0].1[14..];
        assert_eq!(&got[20..], &l4[..], "the transport payload unchanged (no NAT: the checksum was already right)");
        assert_eq!((got[9], got[8], ip_checksum(&got[..20])), (proto, 62, 0));
        assert_eq!(&got[..8], &ip[..8]);
        assert_eq!(&got[12..20], &ip[12..20]);
    }
    assert_eq!(gw0.stats().drops.values().sum::<u64>(), 0);
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0);
}

#[test]
fn checksums_are_fixed_after_a_nat_rewrote_the_source() {
    let (_, mut gw1) = gateways();
    let key = gw1.sa_key(1001, true);
    // The sender computed its checksums with its private address; the NAT
    // rewrote the IP source (and, as NATs do, the outer UDP checksum is
    // whatever it is). After decapsulation the checksum must verify with
    // the address the packet now carries.
    let cases: Vec<(u8, Vec<u8>, u16)> = vec![
        (17, udp_seg(PRIVATE_A, HOST_B, 5001, b"behind a NAT"), 0),
        (17, udp_seg(PRIVATE_A, HOST_B, 5001, &[0xff; 1000]), 0xbeef),
        (17, udp_seg(PRIVATE_A, HOST_B, 5001, b""), 0),
        (6, tcp_seg(PRIVATE_A, HOST_B, 5002, b""), 0),
        (6, tcp_seg(PRIVATE_A, HOST_B, 5002, &[1, 2, 3]), 0),
    ];
    for (seq, (proto, l4, udp_ck)) in cases.into_iter().enumerate() {
        let seq = seq as u32 + 1;
        let stale = ipv4(PRIVATE_A, HOST_B, proto, 30, &l4);
        assert!(l4_checksum_ok(&stale), "built right for the private source");
        let natted = ipv4(HOST_A, HOST_B, proto, 30, &l4);
        assert!(!l4_checksum_ok(&natted), "stale for the public source: the test can fail");
        let back = gw1.push("outside", &[sealed(&key, seq, &natted[..20], &l4, proto, udp_ck)]);
        assert_eq!(back.len(), 1, "proto {proto}: gw1 drops {:?}", gw1.stats().drops);
        let got = &back[0].1[14..];
        assert!(l4_checksum_ok(got), "proto {proto} #{seq}: checksum verifies after decapsulation");
        // Everything but TTL, the IP header checksum and the L4 checksum as sent.
        let ck_at = 20 + if proto == 6 { 16 } else { 6 };
        let mut a = got.to_vec();
        let mut b = natted.clone();
        for p in [&mut a, &mut b] {
            p[8] = 0;
            p[10..12].copy_from_slice(&[0, 0]);
            p[ck_at..ck_at + 2].copy_from_slice(&[0, 0]);
        }
        assert_eq!(a, b, "proto {proto} #{seq}: packet otherwise unchanged");
    }
    // UDP sent without a checksum keeps none.
    let mut l4 = udp_seg(PRIVATE_A, HOST_B, 5001, b"no checksum");
    l4[6..8].copy_from_slice(&[0, 0]);
    let natted = ipv4(HOST_A, HOST_B, 17, 30, &l4);
    let back = gw1.push("outside", &[sealed(&key, 10, &natted[..20], &l4, 17, 0)]);
    assert_eq!(back.len(), 1);
    assert_eq!(&back[0].1[14 + 20..], &l4[..], "checksum 0 stays 0");
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0, "{:?}", gw1.stats().drops);
}

#[test]
fn encapsulation_must_match_the_sa() {
    let (_, mut gw1) = gateways();
    let key = gw1.sa_key(1001, true);
    let l4 = udp_seg(HOST_A, HOST_B, 5001, b"x");
    let ip = ipv4(HOST_A, HOST_B, 17, 30, &l4);
    // Plain transport ESP (protocol 50) for SA 1001, which takes ESP in UDP only.
    let mut f = sealed(&key, 1, &ip[..20], &l4, 17, 0);
    let mut plain = f[..14 + 20].to_vec();
    plain.extend_from_slice(&f[14 + 28..]);
    let total = (plain.len() - 14) as u16;
    plain[14 + 2..14 + 4].copy_from_slice(&total.to_be_bytes());
    plain[14 + 9] = 50;
    plain[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&plain[14..34]);
    plain[14 + 10..14 + 12].copy_from_slice(&ck.to_be_bytes());
    assert!(gw1.push("outside", &[plain]).is_empty());
    assert_eq!(gw1.drop_count("encap_mismatch"), 1, "{:?}", gw1.stats().drops);
    // ESP in UDP on another port than the SA's: not NAT-T traffic at all, so
    // it is forwarded traffic that the inbound policy wants protected.
    f[14 + 22..14 + 24].copy_from_slice(&4501u16.to_be_bytes());
    assert!(gw1.push("outside", &[f]).is_empty());
    assert_eq!(gw1.drop_count("cleartext_protected"), 1, "{:?}", gw1.stats().drops);
}

#[test]
fn mtu_limit_counts_the_kept_header_and_udp() {
    // DF set (udp_packet sets it): the largest packet that fits leaves as
    // one frame of at most 1500 bytes; one byte more gets ICMP
    // "fragmentation needed" advertising exactly that size.
    let (mut gw0, _) = gateways();
    // AES-128-GCM: 20 (kept header) + 8 (UDP) + 8 + 8 + pad(payload + 2, 4) + 16.
    let max_ip = 20 + (1500 - 20 - 8 - 8 - 8 - 16) / 4 * 4 - 2;
    let big = from_host_a(&udp_packet(HOST_A, HOST_B, 0, 64, 1, 2, &vec![5; max_ip - 28]));
    let out = gw0.push("inside", &[big]);
    assert_eq!(out.len(), 1, "{:?}", gw0.stats().drops);
    assert_eq!(out[0].0, "outside");
    assert_eq!(out[0].1.len() - 14, 1500, "exactly the MTU");
    let over = from_host_a(&udp_packet(HOST_A, HOST_B, 0, 64, 1, 2, &vec![5; max_ip - 28 + 1]));
    let out = gw0.push("inside", &[over]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "inside", "ICMP back to hostA");
    let icmp = &out[0].1[14 + 20..];
    assert_eq!((icmp[0], icmp[1]), (3, 4));
    assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]) as usize, max_ip, "next-hop MTU = the largest packet that fits");
    assert_eq!(gw0.drop_count("mtu_exceeded"), 1);
}
