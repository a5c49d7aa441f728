//! SPI reuse by two peers (RFC 4301 §4.1, §4.4.2: inbound tunnel SAs are
//! found by SPI and destination): gw1 (configs/ep1.toml) gets a second
//! inbound SA with SPI 1001 from another peer towards another address of
//! its own, with another key. ESP is sealed here with the `aes-gcm` crate
//! directly (tests/common `seal_gcm128`), not with the gateway's ESP code.

mod common;
use common::*;
use std::net::Ipv4Addr;

const PEER_A: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const PEER_B: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
/// gw1's addresses: A's SA goes to the first, B's to the second, no SA to
/// the third.
const GW1_A: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);
const GW1_B: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 3);
const GW1_C: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 4);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const KEY_B: &str = "0f0e0d0c0b0a09080706050403020100a1b2c3d4";

fn config() -> String {
    edited_config("ep1.toml", "spi-reuse", |t| {
        let t = t.replace("addresses = [\"203.0.113.2/24\"]", "addresses = [\"203.0.113.2/24\", \"203.0.113.3/24\", \"203.0.113.4/24\"]");
        format!(
            "{t}\n[[sa]]\nspi = 1001\ndirection = \"inbound\"\nalgorithm = \"aes-128-gcm\"\nkey = \"{KEY_B}\"\n\
             tunnel_src = \"{PEER_B}\"\ntunnel_dst = \"{GW1_B}\"\n\
             [[policy]]\ndirection = \"inbound\"\nsrc = \"10.9.0.0/16\"\ndst = \"198.51.100.0/24\"\npriority = 10\naction = \"protect 1001\"\n"
        )
    })
}

/// An ESP tunnel packet `src` → `dst` with SPI 1001 and sequence number
/// `seq`, `inner` sealed with `key`, in a frame to gw1's outside MAC.
fn esp(key: &[u8], src: Ipv4Addr, dst: Ipv4Addr, seq: u64, inner: &[u8]) -> Vec<u8> {
    let body = seal_gcm128(key, 1001, seq, false, inner, 4);
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 50, 0, 0];
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(&body);
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let ck = ip_checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x0800, &ip)
}

#[test]
fn two_peers_one_spi_two_addresses_two_keys() {
    let mut gw1 = Gw::from_config(&config());
    let key_a = gw1.sa_key(1001, true);
    let key_b = hex::decode(KEY_B).unwrap();
    assert_ne!(key_a, key_b);
    let from_a = udp_packet(Ipv4Addr::new(192, 0, 2, 10), HOST_B, 0, 64, 1000, 2000, b"from peer A");
    let from_b = udp_packet(Ipv4Addr::new(10, 9, 0, 5), HOST_B, 0, 64, 1000, 2000, b"from peer B");

    // Both decrypt, each with its own key; both start at sequence number 1
    // (separate replay windows).
    for (key, src, dst, inner) in [(&key_a, PEER_A, GW1_A, &from_a), (&key_b, PEER_B, GW1_B, &from_b)] {
        for seq in [1, 2] {
            let out = gw1.push("outside", &[esp(key, src, dst, seq, inner)]);
            assert_eq!(out.len(), 1, "{src} → {dst} seq {seq}: decrypted and forwarded");
            assert_eq!(out[0].0, "inside");
            let got = &out[0].1[14..];
            assert_eq!(&got[20..], &inner[20..], "inner UDP unchanged");
            assert_eq!(&got[12..20], &inner[12..20], "inner addresses unchanged");
        }
    }
    let s = gw1.stats();
    assert_eq!(s.drops.values().sum::<u64>(), 0, "{:?}", s.drops);
    let per_sa: Vec<u64> = s.sas.iter().filter(|x| x.spi == 1001).map(|x| x.packets).collect();
    assert_eq!(per_sa, [2, 2], "two SAs with SPI 1001, two packets each");
    // Each has its own series, told apart by its destination; SAs whose SPI
    // is not shared have none.
    let dsts: Vec<Option<&str>> = s.sas.iter().filter(|x| x.spi == 1001).map(|x| x.dst.as_deref()).collect();
    assert_eq!(dsts, [Some("203.0.113.2"), Some("203.0.113.3")]);
    assert!(s.sas.iter().filter(|x| x.spi != 1001).all(|x| x.dst.is_none()));
    let prom = s.to_prometheus();
    for d in ["203.0.113.2", "203.0.113.3"] {
        let series = format!("secgw_sa_packets_total{{spi=\"1001\",direction=\"inbound\",dst=\"{d}\"}} 2");
        assert!(prom.contains(&series), "{series} in\n{prom}");
    }
    assert!(prom.contains("secgw_sa_packets_total{spi=\"1003\",direction=\"inbound\"} 0"), "{prom}");

    // SPI 1001 to a third address of ours: no SA there.
    assert!(gw1.push("outside", &[esp(&key_a, PEER_A, GW1_C, 3, &from_a)]).is_empty());
    assert!(gw1.push("outside", &[esp(&key_b, PEER_B, GW1_C, 3, &from_b)]).is_empty());
    assert_eq!(gw1.drop_count("no_sa"), 2);
    // Peer B's key towards A's address (from A's address): A's SA is found
    // and B's key does not open it.
    assert!(gw1.push("outside", &[esp(&key_b, PEER_A, GW1_A, 3, &from_a)]).is_empty());
    assert_eq!(gw1.drop_count("auth_failed"), 1);
    // A's packet towards B's address: B's SA expects another peer.
    assert!(gw1.push("outside", &[esp(&key_a, PEER_A, GW1_B, 3, &from_a)]).is_empty());
    assert_eq!(gw1.drop_count("no_sa"), 3);
    // And each SA still takes its own next packet.
    assert_eq!(gw1.push("outside", &[esp(&key_a, PEER_A, GW1_A, 3, &from_a)]).len(), 1);
    assert_eq!(gw1.push("outside", &[esp(&key_b, PEER_B, GW1_B, 3, &from_b)]).len(), 1);
    assert_accounted(&gw1.stats(), "spi reuse");
}
