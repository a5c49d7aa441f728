//! A decrypted packet whose destination is routed out of an unprotected
//! port (or not routed at all) crosses the IPsec boundary again, so the
//! outbound SPD decides what becomes of it (RFC 4301 §5.1): PROTECT seals
//! it again with that entry's SA (a hub between two tunnels), BYPASS
//! sends it in the clear, DISCARD drops it as `policy_discard`, and
//! without an entry it is dropped as `no_policy` (helper-100: it used to
//! leave on the wan in the clear with no SPD lookup).
//!
//! gw1 (configs/ep1.toml) takes ESP on SPI 1001 from gw0 (203.0.113.1) for
//! a second inner network, 10.77.0.0/16, a spoke behind another peer
//! (203.0.113.9). ESP in is sealed with the `aes-gcm` crate through
//! tests/common (`seal_gcm128`), ESP out is opened the same way
//! (`open_gcm128`), not with the gateway's own ESP code.

mod common;
use common::*;
use std::net::Ipv4Addr;

const GW0: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const GW1: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);
const SPOKE_PEER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const SPOKE_HOST: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 5);
const SPOKE_KEY: &str = "0102030405060708090a0b0c0d0e0f1011121314";

/// ep1.toml with an inbound PROTECT entry of SA 1001 for 192.0.2.0/24 →
/// 10.77.0.0/16, an outbound SA 1004 to the spoke's peer, a neighbour
/// entry for that peer, and `extra` (routes, outbound entries) appended.
fn config(tag: &str, extra: &str) -> String {
    edited_config("ep1.toml", tag, |t| {
        format!(
            "{t}\n[[policy]]\ndirection = \"inbound\"\nsrc = \"192.0.2.0/24\"\ndst = \"10.77.0.0/16\"\npriority = 30\naction = \"protect 1001\"\n\
             [[sa]]\nspi = 1004\ndirection = \"outbound\"\nalgorithm = \"aes-128-gcm\"\nkey = \"{SPOKE_KEY}\"\n\
             tunnel_src = \"{GW1}\"\ntunnel_dst = \"{SPOKE_PEER}\"\n\
             [[neighbour]]\nip = \"{SPOKE_PEER}\"\nmac = \"02:00:00:00:09:09\"\n{extra}"
        )
    })
}

const ROUTE_OUTSIDE: &str = "[[route]]\nprefix = \"10.77.0.0/16\"\nport = \"outside\"\nvia = \"203.0.113.9\"\n";

fn outbound_entry(action: &str) -> String {
    format!("[[policy]]\ndirection = \"outbound\"\nsrc = \"192.0.2.0/24\"\ndst = \"10.77.0.0/16\"\npriority = 30\naction = \"{action}\"\n")
}

/// ESP SPI 1001 from gw0 to gw1 carrying `inner`, sequence number `seq`.
fn esp_in(gw1: &Gw, seq: u64, inner: &[u8]) -> Vec<u8> {
    let key = gw1.sa_key(1001, true);
    let body = seal_gcm128(&key, 1001, seq, false, inner, 4);
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 50, 0, 0];
    ip.extend_from_slice(&GW0.octets());
    ip.extend_from_slice(&GW1.octets());
    to_gw1(&ip, 50, &body)
}

fn sa(s: &secgw::control::stats::Snapshot, spi: u32) -> (u64, u64) {
    let x = s.sas.iter().find(|x| x.spi == spi).expect("SA in stats");
    (x.packets, x.errors)
}

/// The plain datagram hostA sends the spoke, TTL 64.
fn to_spoke(payload: &[u8]) -> Vec<u8> {
    udp_packet(HOST_A, SPOKE_HOST, 0, 64, 4000, 5000, payload)
}

#[test]
fn decrypted_for_the_wan_without_an_outbound_entry_is_no_policy_not_cleartext() {
    let mut gw1 = Gw::from_config(&config("hairpin-none", ROUTE_OUTSIDE));
    let inner = to_spoke(b"must not leave in the clear");
    let out = gw1.push("outside", &[esp_in(&gw1, 1, &inner)]);
    assert!(out.is_empty(), "nothing sent: {:?}", out.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>());
    assert_eq!(gw1.drop_count("no_policy"), 1);
    assert_eq!(sa(&gw1.stats(), 1001), (0, 1), "SA 1001: no packet delivered, one error");
    // The control: the SA's own traffic still goes inside.
    let home = udp_packet(HOST_A, HOST_B, 0, 64, 4000, 5000, b"home");
    let out = gw1.push("outside", &[esp_in(&gw1, 2, &home)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "inside");
    assert_accounted(&gw1.stats(), "hairpin, no entry");
}

#[test]
fn a_hub_seals_decrypted_traffic_again_with_the_outbound_entry_sa() {
    // Routed out of the outside port, and not routed at all: the outbound
    // PROTECT entry decides in both (the route of a tunnel's inner
    // destination does not matter, as for packets from the inside).
    for (tag, route) in [("hairpin-hub", ROUTE_OUTSIDE), ("hairpin-hub-unrouted", "")] {
        let mut gw1 = Gw::from_config(&config(tag, &format!("{route}{}", outbound_entry("protect 1004"))));
        let spoke_key = hex::decode(SPOKE_KEY).unwrap();
        for seq in 1..=3u64 {
            let inner = to_spoke(format!("via the hub {seq}").as_bytes());
            let out = gw1.push("outside", &[esp_in(&gw1, seq, &inner)]);
            assert_eq!(out.len(), 1, "{tag} seq {seq}: one frame");
            let (port, f) = &out[0];
            assert_eq!(port, "outside");
            assert_eq!(&f[..6], &mac("02:00:00:00:09:09"), "to the spoke peer's MAC");
            let ip = &f[14..];
            assert_eq!(ip[9], 50, "{tag}: ESP, not the plaintext");
            assert_eq!(&ip[12..16], &GW1.octets());
            assert_eq!(&ip[16..20], &SPOKE_PEER.octets());
            let esp = &ip[20..];
            assert_eq!(u32::from_be_bytes(esp[..4].try_into().unwrap()), 1004);
            assert_eq!(u32::from_be_bytes(esp[4..8].try_into().unwrap()), seq as u32, "SA 1004's own sequence numbers");
            let plain = open_gcm128(&spoke_key, esp);
            let n = plain.len();
            assert_eq!(plain[n - 1], 4, "next header IPv4");
            let got = &plain[..inner.len()];
            // Forwarded once: the TTL one less, the checksum updated.
            assert_eq!(got[8], 63, "TTL decremented once by the hub");
            assert_eq!(ip_checksum(&got[..20]), 0);
            assert_eq!(&got[12..20], &inner[12..20]);
            assert_eq!(&got[20..], &inner[20..]);
        }
        let s = gw1.stats();
        assert_eq!(sa(&s, 1001), (3, 0), "{tag}: SA 1001 delivered 3");
        assert_eq!(sa(&s, 1004), (3, 0), "{tag}: SA 1004 sealed 3");
        assert_eq!(s.drops.values().sum::<u64>(), 0, "{:?}", s.drops);
    }
}

#[test]
fn bypass_sends_decrypted_traffic_in_the_clear_and_discard_drops_it() {
    let mut gw1 = Gw::from_config(&config("hairpin-bypass", &format!("{ROUTE_OUTSIDE}{}", outbound_entry("bypass"))));
    let inner = to_spoke(b"the operator said bypass");
    let out = gw1.push("outside", &[esp_in(&gw1, 1, &inner)]);
    assert_eq!(out.len(), 1);
    let (port, f) = &out[0];
    assert_eq!(port, "outside");
    assert_eq!(&f[14 + 20..], &inner[20..], "in the clear, as BYPASS says");
    assert_eq!(f[14 + 8], 63);
    assert_eq!(sa(&gw1.stats(), 1001), (1, 0));

    let mut gw1 = Gw::from_config(&config("hairpin-discard", &format!("{ROUTE_OUTSIDE}{}", outbound_entry("discard"))));
    assert!(gw1.push("outside", &[esp_in(&gw1, 1, &inner)]).is_empty());
    assert_eq!(gw1.drop_count("policy_discard"), 1);
    assert_eq!(sa(&gw1.stats(), 1001), (0, 1));
    assert_accounted(&gw1.stats(), "hairpin, discard");
}

/// `ip` (an IPv4 packet without options) cut after `first` payload bytes
/// (a multiple of 8) into two fragments, checksums set.
fn two_fragments(ip: &[u8], first: usize) -> [Vec<u8>; 2] {
    let (head, payload) = ip.split_at(20);
    let mk = |data: &[u8], flags_off: u16| {
        let mut f = head.to_vec();
        f.extend_from_slice(data);
        let total = f.len() as u16;
        f[2..4].copy_from_slice(&total.to_be_bytes());
        f[6..8].copy_from_slice(&flags_off.to_be_bytes());
        set_ipv4_checksum(&mut f);
        f
    };
    [mk(&payload[..first], 0x2000), mk(&payload[first..], (first / 8) as u16)]
}

/// A datagram that port selectors may split (PROTECT for UDP port 5000,
/// an any-port BYPASS after it) arrives as inner fragments: neither
/// fragment leaves (helper-102: the first was sealed, the later one,
/// without ports, matched the BYPASS and left in the clear); whole
/// datagrams still take their entry, and without port selectors
/// fragments are sealed as usual.
#[test]
fn fragments_that_port_selectors_may_split_do_not_hairpin() {
    let entries = format!(
        "{ROUTE_OUTSIDE}[[policy]]\ndirection = \"outbound\"\nsrc = \"192.0.2.0/24\"\ndst = \"10.77.0.0/16\"\nprotocol = \"udp\"\ndst_ports = \"5000\"\npriority = 30\naction = \"protect 1004\"\n\
         [[policy]]\ndirection = \"outbound\"\nsrc = \"192.0.2.0/24\"\ndst = \"10.77.0.0/16\"\npriority = 40\naction = \"bypass\"\n"
    );
    let mut gw1 = Gw::from_config(&config("hairpin-frag", &entries));
    let secret = udp_packet(HOST_A, SPOKE_HOST, 0, 64, 4000, 5000, &[0x5e; 200]);
    let frags = two_fragments(&secret, 96);
    let out = gw1.push("outside", &[esp_in(&gw1, 1, &frags[0]), esp_in(&gw1, 2, &frags[1])]);
    assert!(out.is_empty(), "nothing of the datagram leaves: {:?}", out.iter().map(|(p, f)| (p, f[14 + 9], f.len())).collect::<Vec<_>>());
    assert_eq!(gw1.drop_count("hairpin_fragment"), 2);
    assert_eq!(sa(&gw1.stats(), 1001), (0, 2));
    // Whole: port 5000 sealed with SA 1004, another port bypassed.
    let out = gw1.push("outside", &[esp_in(&gw1, 3, &secret)]);
    assert_eq!((out.len(), out[0].1[14 + 9]), (1, 50), "sealed");
    let other = udp_packet(HOST_A, SPOKE_HOST, 0, 64, 4000, 6000, b"not port 5000");
    let out = gw1.push("outside", &[esp_in(&gw1, 4, &other)]);
    assert_eq!((out.len(), out[0].1[14 + 9]), (1, 17), "bypassed in the clear");
    assert_accounted(&gw1.stats(), "hairpin, fragments");

    // No port selectors for these addresses: fragments are sealed.
    let mut gw1 = Gw::from_config(&config("hairpin-frag-any", &format!("{ROUTE_OUTSIDE}{}", outbound_entry("protect 1004"))));
    let out = gw1.push("outside", &[esp_in(&gw1, 1, &frags[0]), esp_in(&gw1, 2, &frags[1])]);
    assert_eq!(out.iter().map(|(_, f)| f[14 + 9]).collect::<Vec<_>>(), [50, 50], "both sealed");
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0);
}
