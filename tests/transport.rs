//! ESP transport mode (RFC 4303 §3.1.1) through the in-memory pipeline:
//! configs/ep0.toml and ep1.toml with SAs 1001/1002 switched to transport
//! mode; gw0 encrypts, gw1 decrypts. The ESP packet is checked byte by byte
//! and opened with `aes-gcm` directly; a transport packet sealed by hand
//! (not with the gateway's ESP code) must decrypt at gw1.

mod common;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit};
use common::*;
use std::net::Ipv4Addr;
use std::path::Path;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

/// `configs/<name>` with SAs 1001 and 1002 in transport mode (no
/// tunnel_src/tunnel_dst), written to a temp file.
fn transport_config(name: &str) -> String {
    transport_config_with(name, None)
}

/// As [`transport_config`], SA 1001 with `alg` = (algorithm line, key
/// lines) instead of its own algorithm and key.
fn transport_config_with(name: &str, alg: Option<&str>) -> String {
    let text = std::fs::read_to_string(format!("configs/{name}")).unwrap();
    let mut out = String::new();
    for (i, block) in text.split("[[sa]]").enumerate() {
        if i > 0 {
            out.push_str("[[sa]]");
        }
        if block.contains("spi = 1001\n") || block.contains("spi = 1002\n") {
            let b = block.replacen("mode = \"tunnel\"", "mode = \"transport\"", 1);
            let swap = alg.is_some() && block.contains("spi = 1001\n");
            for l in b.split_inclusive('\n') {
                if l.starts_with("tunnel_src") || l.starts_with("tunnel_dst") {
                    continue;
                }
                if swap && (l.starts_with("algorithm") || l.starts_with("key")) {
                    continue;
                }
                out.push_str(l);
                if swap && l == "spi = 1001\n" {
                    out.push_str(alg.unwrap());
                }
            }
        } else {
            out.push_str(block);
        }
    }
    assert_eq!(out.matches("mode = \"transport\"").count(), 2, "{name}: SAs 1001 and 1002 switched");
    temp_config("transport", name, &out)
}

fn gateways() -> (Gw, Gw) {
    (Gw::from_config(&transport_config("ep0.toml")), Gw::from_config(&transport_config("ep1.toml")))
}

/// A packet hostA → hostB with protocol `proto` (UDP-shaped payload: the
/// first 4 bytes are the ports for TCP/UDP, the ICMP type/code otherwise),
/// header checksum fixed.
fn packet(proto: u8, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = udp_packet(HOST_A, HOST_B, 0x28, ttl, 40000, 5001, payload);
    p[9] = proto;
    p[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&p[..20]);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    p
}

fn from_host_a(ip: &[u8]) -> Vec<u8> {
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, ip)
}

/// `ip` with its TTL lowered by `n`, checksum fixed.
fn ttl_minus(ip: &[u8], n: u8) -> Vec<u8> {
    let mut e = ip.to_vec();
    e[8] -= n;
    e[10..12].copy_from_slice(&[0, 0]);
    let hl = (e[0] & 0x0f) as usize * 4;
    let ck = ip_checksum(&e[..hl]);
    e[10..12].copy_from_slice(&ck.to_be_bytes());
    e
}

#[test]
fn transport_end_to_end_udp_tcp_icmp_all_sizes() {
    let (mut gw0, mut gw1) = gateways();
    let key = gw1.sa_key(1001, true);
    let mut seq = 0u32;
    let mut bytes = 0u64;
    for proto in [17u8, 6, 1] {
        for size in [0usize, 1, 2, 3, 17, 100, 1400] {
            seq += 1;
            let payload: Vec<u8> = (0..size).map(|b| (b * 7) as u8).collect();
            let ip = packet(proto, 64, &payload);
            bytes += ip.len() as u64;
            let out = gw0.push("inside", &[from_host_a(&ip)]);
            assert_eq!(out.len(), 1, "one ESP frame out of gw0 (proto {proto}, size {size})");
            let (port, f) = &out[0];
            assert_eq!(port, "outside");
            assert_eq!(&f[..6], &mac("02:00:00:00:01:02"), "routed on the packet's own destination (via gw1)");
            assert_eq!(&f[12..14], &[0x08, 0x00]);
            let h = &f[14..34];
            // The IP header is kept: only protocol, total length, TTL (the
            // router decrement) and the checksum change.
            let mut expect = ttl_minus(&ip[..20], 1);
            expect[9] = 50;
            expect[2..4].copy_from_slice(&((f.len() - 14) as u16).to_be_bytes());
            expect[10..12].copy_from_slice(&[0, 0]);
            let ck = ip_checksum(&expect);
            expect[10..12].copy_from_slice(&ck.to_be_bytes());
            assert_eq!(h, &expect[..], "IPv4 header kept, proto 50, lengths and checksum fixed");
            assert_eq!(ip_checksum(h), 0, "header checksum valid");
            assert_eq!(&h[12..16], &HOST_A.octets());
            assert_eq!(&h[16..20], &HOST_B.octets());
            let esp = &f[34..];
            assert_eq!(u32::from_be_bytes(esp[..4].try_into().unwrap()), 1001);
            assert_eq!(u32::from_be_bytes(esp[4..8].try_into().unwrap()), seq);
            let l4 = &ip[20..];
            let enc_len = esp.len() - 8 - 8 - 16;
            assert_eq!(enc_len % 4, 0, "RFC 4303 §2.4 alignment");
            assert!(enc_len >= l4.len() + 2 && enc_len < l4.len() + 6);
            let plain = open_gcm128(&key, esp);
            assert_eq!(*plain.last().unwrap(), proto, "Next Header = the original protocol");
            let pad = plain[plain.len() - 2] as usize;
            assert_eq!(&plain[..plain.len() - 2 - pad], l4, "ESP payload = the transport payload");

            let back = gw1.push("outside", std::slice::from_ref(f));
            assert_eq!(back.len(), 1, "one frame out of gw1 (proto {proto}, size {size})");
            let (port, plain) = &back[0];
            assert_eq!(port, "inside");
            assert_eq!(&plain[..6], &mac("02:00:00:00:0b:01"));
            assert_eq!(&plain[14..], &ttl_minus(&ip, 2)[..], "original packet but for one TTL decrement per gateway");
        }
    }
    let s = gw1.stats();
    assert_eq!(s.drops.values().sum::<u64>(), 0, "{:?}", s.drops);
    let sa = s.sas.iter().find(|s| s.spi == 1001).unwrap();
    assert_eq!(sa.packets, seq as u64);
    assert!(sa.bytes > 0 && bytes > 0);
    assert_eq!(gw0.stats().drops.values().sum::<u64>(), 0);
}

#[test]
fn transport_reverse_direction_gw1_to_gw0() {
    let (mut gw0, mut gw1) = gateways();
    let mut ip = udp_packet(HOST_B, HOST_A, 0, 64, 5001, 40000, b"reply");
    ip[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    let frame = eth(mac("02:00:00:00:01:01"), mac("02:00:00:00:0b:01"), 0x0800, &ip);
    let out = gw1.push("inside", &[frame]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1[14 + 9], 50);
    let back = gw0.push("outside", &[out[0].1.clone()]);
    assert_eq!(back.len(), 1, "{:?}", gw0.stats().drops);
    assert_eq!(&back[0].1[14..], &ttl_minus(&ip, 2)[..]);
}

/// Seals `l4` (the transport payload of protocol `nh`) as transport ESP
/// behind `hdr` (an IPv4 header, options allowed) with AES-128-GCM.
fn handmade_transport(key: &[u8], spi: u32, seq: u32, hdr: &[u8], l4: &[u8], nh: u8) -> Vec<u8> {
    let mut plain = l4.to_vec();
    let pad = (4 - (l4.len() + 2) % 4) % 4;
    plain.extend((1..=pad).map(|i| i as u8));
    plain.push(pad as u8);
    plain.push(nh);
    let iv = [0x99u8, 8, 7, 6, 5, 4, 3, seq as u8];
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&key[16..20]);
    nonce[4..].copy_from_slice(&iv);
    let mut aad = spi.to_be_bytes().to_vec();
    aad.extend_from_slice(&seq.to_be_bytes());
    let tag = Aes128Gcm::new_from_slice(&key[..16]).unwrap().encrypt_in_place_detached((&nonce).into(), &aad, &mut plain).unwrap();
    let mut ip = hdr.to_vec();
    ip.extend_from_slice(&aad);
    ip.extend_from_slice(&iv);
    ip.extend_from_slice(&plain);
    ip.extend_from_slice(&tag);
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[9] = 50;
    ip[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&ip[..hdr.len()]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x0800, &ip)
}

#[test]
fn handmade_transport_esp_decrypts_at_gw1() {
    let (_, mut gw1) = gateways();
    let key = gw1.sa_key(1001, true);
    for (seq, proto) in [(1u32, 17u8), (2, 6), (3, 1)] {
        let ip = packet(proto, 30, b"independent check");
        let frame = handmade_transport(&key, 1001, seq, &ip[..20], &ip[20..], proto);
        let back = gw1.push("outside", &[frame]);
        assert_eq!(back.len(), 1, "{:?}", gw1.stats().drops);
        assert_eq!(back[0].0, "inside");
        assert_eq!(&back[0].1[14..], &ttl_minus(&ip, 1)[..], "the original packet, TTL − 1");
    }
    // With IPv4 options (IHL 6: one NOP×3 + EOL word): kept and restored.
    let base = packet(17, 30, b"options");
    let mut hdr = base[..20].to_vec();
    hdr[0] = 0x46;
    hdr.extend_from_slice(&[1, 1, 1, 0]);
    let mut ip = hdr.clone();
    ip.extend_from_slice(&base[20..]);
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&ip[..24]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    let frame = handmade_transport(&key, 1001, 4, &ip[..24], &ip[24..], 17);
    let back = gw1.push("outside", &[frame]);
    assert_eq!(back.len(), 1, "{:?}", gw1.stats().drops);
    assert_eq!(&back[0].1[14..], &ttl_minus(&ip, 1)[..], "options kept");
    // Replay of seq 1 is dropped.
    let frame = handmade_transport(&key, 1001, 1, &ip[..24], &ip[24..], 17);
    assert!(gw1.push("outside", &[frame]).is_empty());
    assert_eq!(gw1.drop_count("replay"), 1);
}

#[test]
fn transport_inner_selectors_are_checked() {
    let (_, mut gw1) = gateways();
    let key = gw1.sa_key(1001, true);
    // Source outside SA 1001's selectors (192.0.2.0/24 → 198.51.100.0/24).
    let mut ip = udp_packet(Ipv4Addr::new(10, 9, 9, 9), HOST_B, 0, 30, 1, 2, b"spoof");
    ip[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    let frame = handmade_transport(&key, 1001, 1, &ip[..20], &ip[20..], 17);
    assert!(gw1.push("outside", &[frame]).is_empty());
    assert_eq!(gw1.drop_count("inner_policy_mismatch"), 1, "{:?}", gw1.stats().drops);
}

#[test]
fn transport_config_rejects_tunnel_addresses() {
    let text = std::fs::read_to_string("configs/ep0.toml").unwrap().replacen("mode = \"tunnel\"", "mode = \"transport\"", 1);
    let err = match secgw::config::parse(&text, Path::new("ep0.toml")) {
        Ok(_) => panic!("accepted tunnel_src in a transport SA"),
        Err(e) => e,
    };
    let fields: Vec<&str> = err.problems().iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["sa[0].tunnel_src", "sa[0].tunnel_dst"], "{err}");
    assert!(err.to_string().contains("not allowed with mode = \"transport\""), "{err}");
}

#[test]
fn transport_every_algorithm_roundtrips() {
    let hex = |n: usize, seed: u8| -> String { (0..n / 2).map(|i| format!("{:02x}", (i as u8).wrapping_mul(29).wrapping_add(seed))).collect() };
    let cases: Vec<(&str, usize, usize)> = vec![
        ("aes-128-gcm", 40, 0),
        ("aes-256-gcm", 72, 0),
        ("aes-128-gmac", 40, 0),
        ("aes-256-gmac", 72, 0),
        ("chacha20-poly1305", 72, 0),
        ("aes-128-cbc-hmac-sha1", 32, 40),
        ("aes-256-cbc-hmac-sha256", 64, 64),
        ("aes-128-ctr-hmac-sha256", 40, 64),
        ("aes-256-ctr-hmac-sha1", 72, 40),
        ("null-hmac-sha1", 0, 40),
        ("null-hmac-sha256", 0, 64),
    ];
    for (name, klen, alen) in cases {
        let mut lines = format!("algorithm = \"{name}\"\n");
        if klen > 0 {
            lines += &format!("key = \"{}\"\n", hex(klen, 3));
        }
        if alen > 0 {
            lines += &format!("auth_key = \"{}\"\n", hex(alen, 7));
        }
        let mut gw0 = Gw::from_config(&transport_config_with("ep0.toml", Some(&lines)));
        let mut gw1 = Gw::from_config(&transport_config_with("ep1.toml", Some(&lines)));
        for (proto, size) in [(17u8, 0usize), (6, 33), (1, 1400)] {
            let payload: Vec<u8> = (0..size).map(|b| b as u8 ^ 0x5a).collect();
            let ip = packet(proto, 64, &payload);
            let out = gw0.push("inside", &[from_host_a(&ip)]);
            assert_eq!(out.len(), 1, "{name}: gw0 drops {:?}", gw0.stats().drops);
            let f = &out[0].1;
            assert_eq!((f[14 + 9], ip_checksum(&f[14..34])), (50, 0), "{name}: proto 50, checksum valid");
            assert_eq!(&f[14 + 12..14 + 20], &ip[12..20], "{name}: addresses kept");
            if name.starts_with("null") {
                assert_eq!(&f[34 + 8..34 + 8 + ip.len() - 20], &ip[20..], "{name}: NULL leaves the payload readable");
            }
            let back = gw1.push("outside", std::slice::from_ref(f));
            assert_eq!(back.len(), 1, "{name}: gw1 drops {:?}", gw1.stats().drops);
            assert_eq!(&back[0].1[14..], &ttl_minus(&ip, 2)[..], "{name} proto {proto} size {size}");
        }
    }
}

/// `pad_align` in transport mode (RFC 4303 §2.4): what follows the kept IP
/// header, plus padding and the 2 trailer bytes, ends on 16 bytes; gw1
/// (no `pad_align`) delivers the packet.
#[test]
fn pad_align_in_transport_mode() {
    let gcm = "algorithm = \"aes-128-gcm\"\nkey = \"24d84805d9cc35adcdc5696f6ed3dab836df80aa\"\npad_align = 16\n";
    let mut gw0 = Gw::from_config(&transport_config_with("ep0.toml", Some(gcm)));
    let mut gw1 = Gw::from_config(&transport_config("ep1.toml"));
    let key = gw0.sa_key(1001, false);
    for size in 0..20usize {
        let ip = packet(17, 64, &vec![0x5a; 8 + size]);
        let out = gw0.push("inside", &[from_host_a(&ip)]);
        assert_eq!(out.len(), 1, "size {size}");
        let plain = open_gcm128(&key, &out[0].1[14 + 20..]);
        assert_eq!(plain.len() % 16, 0, "size {size}: ESP payload of {} bytes", plain.len());
        let back = gw1.push("outside", &[out[0].1.clone()]);
        assert_eq!(back.len(), 1, "size {size}: gw1 delivers");
        assert_eq!(&back[0].1[14 + 20..], &ip[20..], "size {size}: payload");
    }
}
