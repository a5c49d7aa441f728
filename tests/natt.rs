//! NAT traversal (RFC 3948, RFC-RULES 22–23) over in-memory ports: gw0 and
//! gw1 from configs/ep0.toml / ep1.toml with `udp_encap = true` on SA 1001
//! at both ends. ESP-in-UDP is also built here by hand with `aes-gcm`, not
//! with the gateway's ESP code.

mod common;
/// Tests run in parallel: every temp config gets its own file name.
static UNIQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit};
use common::*;
use std::net::Ipv4Addr;
use std::path::PathBuf;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const GW0_OUT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const GW1_OUT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);

/// `configs/<name>` with `extra` lines added after `spi = N` of each SA in
/// `spis`, written to a fresh temp file; returns its path.
fn config_with(name: &str, spis: &[u32], extra: &str, tag: &str) -> String {
    let src = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs").join(name)).unwrap();
    let mut out = String::new();
    for line in src.lines() {
        out.push_str(line);
        out.push('\n');
        if let Some(n) = line.strip_prefix("spi = ").and_then(|v| v.trim().parse::<u32>().ok()) {
            if spis.contains(&n) {
                out.push_str(extra);
                out.push('\n');
            }
        }
    }
    assert!(out.len() > src.len(), "{name}: no SA {spis:?}");
    let p = std::env::temp_dir().join(format!("secgw-natt-{}-{}-{tag}-{name}", std::process::id(), UNIQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    std::fs::write(&p, out).unwrap();
    p.to_string_lossy().into_owned()
}

fn natt_pair(tag: &str) -> (Gw, Gw) {
    let gw0 = Gw::from_config(&config_with("ep0.toml", &[1001], "udp_encap = true", tag));
    let gw1 = Gw::from_config(&config_with("ep1.toml", &[1001], "udp_encap = true", tag));
    (gw0, gw1)
}

fn from_host_a(payload: &[u8]) -> Vec<u8> {
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, payload))
}

/// A UDP datagram gw0 → gw1 (Ethernet to gw1's MAC) with `payload`.
fn to_gw1_udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x0800, &udp_packet(GW0_OUT, GW1_OUT, 0, 64, sport, dport, payload))
}

/// ESP (header ‖ IV ‖ ciphertext ‖ ICV) of `inner`, AES-128-GCM with `key`
/// (key ‖ salt), sealed by hand.
fn handmade_esp(key: &[u8], spi: u32, seq: u32, inner: &[u8]) -> Vec<u8> {
    let mut plain = inner.to_vec();
    let pad = (4 - (plain.len() + 2) % 4) % 4;
    plain.extend((1..=pad as u8).collect::<Vec<_>>());
    plain.push(pad as u8);
    plain.push(4);
    let iv = [0x17u8, 2, 3, 4, 5, 6, 7, seq as u8];
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&key[16..20]);
    nonce[4..].copy_from_slice(&iv);
    let mut aad = spi.to_be_bytes().to_vec();
    aad.extend_from_slice(&seq.to_be_bytes());
    let c = Aes128Gcm::new_from_slice(&key[..16]).unwrap();
    let tag = c.encrypt_in_place_detached((&nonce).into(), &aad, &mut plain).unwrap();
    let mut esp = aad;
    esp.extend_from_slice(&iv);
    esp.extend_from_slice(&plain);
    esp.extend_from_slice(&tag);
    esp
}

fn inner_packet() -> Vec<u8> {
    udp_packet(HOST_A, HOST_B, 0, 64, 1, 2, b"behind a NAT")
}

/// The UDP checksum field of a frame built by `to_gw1_udp`.
fn set_udp_checksum(frame: &mut [u8], ck: u16) {
    frame[14 + 26..14 + 28].copy_from_slice(&ck.to_be_bytes());
}

#[test]
fn udp_encapsulated_tunnel_end_to_end_and_wire_format() {
    let (mut gw0, mut gw1) = natt_pair("e2e");
    for (i, size) in [0usize, 1, 3, 100, 1400].into_iter().enumerate() {
        let payload: Vec<u8> = (0..size).map(|b| b as u8).collect();
        let frame = from_host_a(&payload);
        let out = gw0.push("inside", std::slice::from_ref(&frame));
        assert_eq!(out.len(), 1, "one ESP-in-UDP frame out of gw0");
        let (port, f) = &out[0];
        assert_eq!(port, "outside");
        let ip = &f[14..34];
        let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        assert_eq!(total, f.len() - 14, "outer total length");
        assert_eq!(ip[9], 17, "outer protocol UDP (RFC 3948 §2.1)");
        assert_eq!(ip_checksum(ip), 0);
        assert_eq!((&ip[12..16], &ip[16..20]), (&GW0_OUT.octets()[..], &GW1_OUT.octets()[..]));
        let udp = &f[34..42];
        assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), 4500, "source port");
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4500, "destination port");
        assert_eq!(u16::from_be_bytes([udp[4], udp[5]]) as usize, total - 20, "UDP length");
        assert_eq!(&udp[6..8], &[0, 0], "UDP checksum 0 (RFC 3948 §3.1.2)");
        assert_eq!(u32::from_be_bytes(f[42..46].try_into().unwrap()), 1001, "ESP SPI right after UDP");
        assert_eq!(u32::from_be_bytes(f[46..50].try_into().unwrap()), i as u32 + 1, "sequence number");
        // 8 more bytes than plain ESP: outer 20 + UDP 8 + ESP 8 + IV 8 + enc + ICV 16.
        let enc_len = f.len() - 14 - 20 - 8 - 8 - 8 - 16;
        assert_eq!(enc_len % 4, 0);
        assert!(enc_len >= 28 + size + 2 && enc_len < 28 + size + 6);

        let back = gw1.push("outside", std::slice::from_ref(f));
        assert_eq!(back.len(), 1, "gw1 decrypts (size {size})");
        assert_eq!(back[0].0, "inside");
        let plain = &back[0].1[14..];
        assert_eq!(plain.len(), 28 + size);
        assert_eq!(&plain[28..], &payload[..]);
        assert_eq!(plain[8], 62, "one TTL decrement per gateway");
    }
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0);
    assert_eq!(gw1.stats().sas.iter().find(|s| s.spi == 1001 && s.direction == "inbound").unwrap().packets, 5);
    // The other direction (SA 1002) is still plain ESP.
    let back = gw1.push("inside", &[eth(mac("02:00:00:00:01:01"), mac("02:00:00:00:0b:01"), 0x0800, &udp_packet(HOST_B, HOST_A, 0, 64, 5001, 40000, b"r"))]);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].1[14 + 9], 50, "SA 1002 has no udp_encap");
    assert_eq!(gw0.push("outside", &[back[0].1.clone()]).len(), 1);
}

#[test]
fn mtu_counts_the_udp_header() {
    let (mut gw0, _) = natt_pair("mtu");
    // ep0's outside MTU is 1500 (default). Plain ESP adds 20+8+8+pad+2+16;
    // UDP adds 8 more: an inner packet of 1446 bytes (pad 0) gives 1500
    // without UDP and 1508 with it.
    let inner_payload = vec![0u8; 1446 - 28];
    let icmp = gw0.push("inside", &[from_host_a(&inner_payload)]);
    assert_eq!(gw0.drop_count("mtu_exceeded"), 1);
    // DF is set: "fragmentation needed" advertises 1438, the UDP header counted.
    assert_eq!(icmp.len(), 1);
    assert_eq!(icmp[0].0, "inside");
    assert_eq!((icmp[0].1[14 + 20], icmp[0].1[14 + 21]), (3, 4));
    assert_eq!(u16::from_be_bytes([icmp[0].1[14 + 26], icmp[0].1[14 + 27]]), 1438);
    let small = vec![0u8; 1438 - 28];
    let out = gw0.push("inside", &[from_host_a(&small)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.len() - 14, 1500);
}

#[test]
fn keepalive_and_ike_are_counted_and_dropped() {
    let (_, mut gw1) = natt_pair("ka");
    assert!(gw1.push("outside", &[to_gw1_udp(4500, 4500, &[0xff])]).is_empty());
    assert!(gw1.push("outside", &[to_gw1_udp(31337, 4500, &[0xff]), to_gw1_udp(4500, 4500, &[0xff])]).is_empty());
    assert_eq!(gw1.drop_count("natt_keepalive"), 3);
    // Non-ESP marker (RFC 3948 §2.2): IKE, which the gateway does not run.
    let mut ike = vec![0u8; 4];
    ike.extend_from_slice(&[0x11; 28]);
    assert!(gw1.push("outside", &[to_gw1_udp(4500, 4500, &ike), to_gw1_udp(4500, 4500, &[0, 0, 0, 0])]).is_empty());
    assert_eq!(gw1.drop_count("natt_ike"), 2);
    // Shorter than an ESP header, and not a keepalive.
    assert!(gw1.push("outside", &[to_gw1_udp(4500, 4500, &[0xfe]), to_gw1_udp(4500, 4500, &[1, 2, 3, 4, 5]), to_gw1_udp(4500, 4500, &[])]).is_empty());
    assert_eq!(gw1.drop_count("bad_length"), 3);
    // Unknown SPI in UDP.
    assert!(gw1.push("outside", &[to_gw1_udp(4500, 4500, &[0, 0, 0x30, 0x39, 0, 0, 0, 1, 9, 9, 9, 9])]).is_empty());
    assert_eq!(gw1.drop_count("no_sa"), 1);
    // UDP to us on another port is still `to_us`.
    assert!(gw1.push("outside", &[to_gw1_udp(4500, 500, &[0xff])]).is_empty());
    assert_eq!(gw1.drop_count("to_us"), 1);
    assert_eq!(gw1.drop_count("natt_keepalive"), 3);
}

#[test]
fn handmade_esp_in_udp_decrypts_with_any_checksum() {
    let (_, mut gw1) = natt_pair("hand");
    let key = gw1.sa_key(1001, true);
    let inner = inner_packet();
    for (seq, ck) in [(1u32, 0u16), (2, 0xbeef), (3, 0xffff)] {
        let esp = handmade_esp(&key, 1001, seq, &inner);
        let mut f = to_gw1_udp(4500, 4500, &esp);
        set_udp_checksum(&mut f, ck);
        let back = gw1.push("outside", &[f]);
        assert_eq!(back.len(), 1, "accepted with UDP checksum {ck:#06x} (RFC 3948 §3.1.2)");
        let mut expect = inner.clone();
        expect[8] -= 1;
        expect[10..12].copy_from_slice(&[0, 0]);
        let c = ip_checksum(&expect[..20]);
        expect[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(&back[0].1[14..], &expect[..]);
    }
    // A NAT changed the peer's source port: still accepted.
    let f = to_gw1_udp(61000, 4500, &handmade_esp(&key, 1001, 4, &inner));
    assert_eq!(gw1.push("outside", &[f]).len(), 1);
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0);
}

#[test]
fn encapsulation_must_match_the_sa() {
    let (_, mut gw1) = natt_pair("mismatch");
    let key = gw1.sa_key(1001, true);
    // Plain ESP (protocol 50) for SA 1001, which has udp_encap.
    let mut plain_gw0 = Gw::from_config("configs/ep0.toml");
    let plain = plain_gw0.push("inside", &[from_host_a(b"p")]).remove(0).1;
    assert_eq!(plain[14 + 9], 50);
    assert!(gw1.push("outside", &[plain]).is_empty());
    assert_eq!(gw1.drop_count("encap_mismatch"), 1);
    // ESP in UDP for SA 1003, which has not.
    let f = to_gw1_udp(4500, 4500, &handmade_esp(&key, 1003, 1, &inner_packet()));
    assert!(gw1.push("outside", &[f]).is_empty());
    assert_eq!(gw1.drop_count("encap_mismatch"), 2);
    // ESP in UDP from an address that is not the SA's peer.
    let mut f = eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x0800, &udp_packet(Ipv4Addr::new(203, 0, 113, 9), GW1_OUT, 0, 64, 4500, 4500, &handmade_esp(&key, 1001, 1, &inner_packet())));
    set_udp_checksum(&mut f, 0);
    assert!(gw1.push("outside", &[f]).is_empty());
    assert_eq!(gw1.drop_count("no_sa"), 1);
    // A first fragment of ESP in UDP: held for reassembly (tests/reassembly.rs
    // completes such datagrams), not decrypted, not dropped.
    let mut f = to_gw1_udp(4500, 4500, &handmade_esp(&key, 1001, 1, &inner_packet()));
    f[14 + 6] = 0x20; // MF
    f.truncate(14 + 20 + 80); // the data of a non-last fragment is a multiple of 8 bytes
    f[14 + 2..14 + 4].copy_from_slice(&100u16.to_be_bytes());
    f[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let c = ip_checksum(&f[14..34]);
    f[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
    let before = gw1.stats().drops.values().sum::<u64>();
    assert!(gw1.push("outside", &[f]).is_empty());
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), before);
    assert_eq!(gw1.stats().frags_pending, 1);
    assert_eq!(gw1.stats().sas.iter().find(|s| s.spi == 1001 && s.direction == "inbound").unwrap().packets, 0);
}

#[test]
fn custom_udp_ports() {
    let gw0p = config_with("ep0.toml", &[1001], "udp_encap = true\nudp_sport = 4501\nudp_dport = 14500", "ports");
    let gw1p = config_with("ep1.toml", &[1001], "udp_encap = true\nudp_port = 14500", "ports");
    let (mut gw0, mut gw1) = (Gw::from_config(&gw0p), Gw::from_config(&gw1p));
    let f = gw0.push("inside", &[from_host_a(b"ports")]).remove(0).1;
    assert_eq!(&f[34..38], &[0x11, 0x95, 0x38, 0xa4], "4501 -> 14500");
    assert_eq!(gw1.push("outside", &[f]).len(), 1);
    // 4500 is still a NAT-T port: keepalives there are counted too.
    assert!(gw1.push("outside", &[to_gw1_udp(4500, 4500, &[0xff]), to_gw1_udp(4500, 14500, &[0xff])]).is_empty());
    assert_eq!(gw1.drop_count("natt_keepalive"), 2);
}

/// Two workers: an ESP-in-UDP packet received by the worker that does not
/// own its SA is handed over with the ESP offset after the UDP header.
#[test]
fn esp_in_udp_handed_between_workers() {
    let all = [2001, 2002, 2101, 2102];
    let mut gw0 = MultiGw::from_config(&config_with("ep0-2w.toml", &all, "udp_encap = true", "2w"));
    let mut gw1 = MultiGw::from_config(&config_with("ep1-2w.toml", &all, "udp_encap = true", "2w"));
    let mut sent = 0;
    for n in 0..8u16 {
        for w in 0..2 {
            let f = eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(HOST_A, HOST_B, 0, 64, 40000, if n % 2 == 0 { 6001 } else { 5001 }, &n.to_be_bytes()));
            gw0.inject(w, "inside", &f);
            sent += 1;
        }
    }
    let out = gw0.run();
    assert_eq!(out.len(), sent);
    for (i, (_, _, f)) in out.iter().enumerate() {
        assert_eq!((f[14 + 9], &f[34..38]), (17, &[0x11, 0x94, 0x11, 0x94][..]), "ESP in UDP 4500 -> 4500");
        gw1.inject(i % 2, "outside", f);
    }
    assert_eq!(gw1.run().len(), sent, "all decrypted, whichever worker received them");
    let s1 = gw1.stats();
    assert_eq!(s1.drops.values().sum::<u64>(), 0, "{:?}", s1.drops);
    assert!(s1.workers.iter().map(|w| w.handoff_in).sum::<u64>() > 0, "some crossed workers");
}

/// The UDP length of ESP in UDP must be the IP payload's (RFC 768):
/// below the 8-byte header, past the packet, or short of the ESP inside,
/// the datagram is `malformed` and nothing is decrypted; as sent it passes.
#[test]
fn esp_in_udp_with_a_wrong_udp_length_is_malformed() {
    let (mut gw0, mut gw1) = natt_pair("udplen");
    for (i, bad) in [3u16, 1000, 20].into_iter().enumerate() {
        let mut f = gw0.push("inside", &[from_host_a(b"udp length")]).remove(0).1;
        assert_eq!(f[14 + 9], 17, "ESP in UDP");
        f[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&bad.to_be_bytes());
        assert!(gw1.push("outside", &[f]).is_empty(), "UDP length {bad}");
        assert_eq!(gw1.drop_count("malformed"), i as u64 + 1, "UDP length {bad}: {:?}", gw1.stats().drops);
    }
    let f = gw0.push("inside", &[from_host_a(b"udp length")]).remove(0).1;
    assert_eq!(gw1.push("outside", &[f]).len(), 1);
    let s = gw1.stats();
    assert_eq!(s.sas.iter().map(|s| s.packets).sum::<u64>(), 1, "only the good one decrypted");
    assert_accounted(&s, "gw1");
}
