//! ICMP and ICMPv6 Echo (RFC 792; RFC 1122 §3.2.2.6, RFC 1812 §4.3.3.6;
//! RFC 4443 §4.1–4.2): the gateway answers an Echo Request to one of its
//! addresses, in the clear on the port it came in on, and through the
//! tunnel it came out of; `gateway.icmp_echo = false` turns that off; what
//! is not a well-formed request stays `to_us`; replies share the ICMP rate
//! limit. Replies are checked field by field against the request, with
//! checksums summed here (tests/common), not by the gateway's code.

mod common;
use common::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const GW0_IN: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const GW0_OUT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const GW1_OUT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);
const GW1_IN: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const A_MAC: &str = "02:00:00:00:0a:01";
const GW0_IN_MAC: &str = "02:00:00:00:00:01";
const GW0_OUT_MAC: &str = "02:00:00:00:00:02";
const GW1_OUT_MAC: &str = "02:00:00:00:01:02";

/// An IPv4 ICMP Echo Request `src` → `dst` (identifier 0x4242, sequence
/// number `seq`, `data`), DF set, TTL `ttl`, checksums right.
fn echo4(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, ttl, 1, 0, 0];
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[8, 0, 0, 0, 0x42, 0x42]);
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(data);
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    set_ipv4_checksum(&mut p);
    let ck = !(sum(&p[20..], 0) as u16);
    p[22..24].copy_from_slice(&ck.to_be_bytes());
    p
}

/// Checks that `reply` (an IPv4 packet) is the Echo Reply to `request`:
/// addresses swapped, ICMP type 0, identifier, sequence number and data
/// as sent, both checksums verifying.
fn assert_reply4(reply: &[u8], request: &[u8]) {
    assert_eq!(reply.len(), request.len(), "reply as long as the request");
    assert_eq!(reply[0], 0x45);
    assert_eq!(reply[9], 1, "ICMP");
    assert_eq!(&reply[12..16], &request[16..20], "from the address pinged");
    assert_eq!(&reply[16..20], &request[12..16], "to the pinger");
    assert_eq!(ip_checksum(&reply[..20]), 0, "IPv4 header checksum verifies");
    assert_eq!((reply[20], reply[21]), (0, 0), "Echo Reply, code 0");
    assert_eq!(&reply[24..], &request[24..], "identifier, sequence number, data as sent");
    assert_eq!(sum(&reply[20..], 0) as u16, 0xffff, "ICMP checksum verifies");
    assert!(reply[8] >= 63, "a fresh TTL, not the request's less one: {}", reply[8]);
}

fn from_host_a(ip: &[u8]) -> Vec<u8> {
    eth(mac(GW0_IN_MAC), mac(A_MAC), 0x0800, ip)
}

#[test]
fn ping_to_the_inside_address_is_answered_back_to_the_host() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let req = echo4(HOST_A, GW0_IN, 64, 1, b"abcdefghijklmnopqrstuvwxyz012345");
    let out = gw0.push("inside", &[from_host_a(&req)]);
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, f) = &out[0];
    assert_eq!(port, "inside");
    assert_eq!(&f[..14], &eth(mac(A_MAC), mac(GW0_IN_MAC), 0x0800, &[])[..], "to hostA's MAC from gw0's inside MAC");
    assert_reply4(&f[14..], &req);
    let s = gw0.stats();
    assert_eq!(s.echo_replies, 1);
    assert!(s.drops.values().all(|&v| v == 0), "{:?}", s.drops);
    assert_accounted(&s, "gw0");
}

#[test]
fn ping_to_the_outside_address_is_answered_in_the_clear() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let req = echo4(GW1_OUT, GW0_OUT, 3, 9, &[0xa5; 1000]);
    let out = gw0.push("outside", &[eth(mac(GW0_OUT_MAC), mac(GW1_OUT_MAC), 0x0800, &req)]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "outside");
    assert_eq!(&out[0].1[..6], &mac(GW1_OUT_MAC));
    assert_reply4(&out[0].1[14..], &req);
    assert_eq!(gw0.stats().echo_replies, 1);
}

/// hostA pings gw1's inside address: gw0 protects the request (it matches
/// the 192.0.2.0/24 → 198.51.100.0/24 policy), gw1 decrypts it, answers,
/// and protects the reply back to gw0 (SPI 1002), which decrypts it for
/// hostA. The reply on the wan is ESP, never cleartext.
#[test]
fn ping_through_the_tunnel_is_answered_through_the_tunnel() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let req = echo4(HOST_A, GW1_IN, 64, 7, b"through the tunnel");
    let out = gw0.push("inside", &[from_host_a(&req)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1[14 + 9], 50, "the request crosses the wan as ESP");
    let back = gw1.push("outside", std::slice::from_ref(&out[0].1));
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0].0, "outside");
    let esp = &back[0].1[14..];
    assert_eq!(esp[9], 50, "the reply crosses the wan as ESP");
    assert_eq!(u32::from_be_bytes(esp[20..24].try_into().unwrap()), 1002, "with gw1's outbound SA to gw0");
    let s1 = gw1.stats();
    assert_eq!((s1.echo_replies, s1.drops["to_us"]), (1, 0));
    let sa = |spi: u32| s1.sas.iter().find(|s| s.spi == spi).map(|s| (s.packets, s.bytes));
    assert_eq!(sa(1001), Some((1, req.len() as u64)), "the request is one of gw1's inbound SA's packets");
    assert_eq!(sa(1002), Some((1, req.len() as u64)), "the reply one of its outbound SA's");
    let home = gw0.push("outside", std::slice::from_ref(&back[0].1));
    assert_eq!(home.len(), 1, "{home:?}");
    assert_eq!(home[0].0, "inside");
    let reply = &home[0].1[14..];
    // gw0 forwarded the decrypted reply: its TTL is one less than gw1 set.
    let mut undecremented = reply.to_vec();
    undecremented[8] += 1;
    set_ipv4_checksum(&mut undecremented);
    assert_reply4(&undecremented, &req);
}

#[test]
fn icmp_echo_false_leaves_pings_to_us() {
    let cfg = edited_config("ep0.toml", "echo_off", |t| t.replacen("[gateway]\n", "[gateway]\nicmp_echo = false\n", 1));
    let mut gw0 = Gw::from_config(&cfg);
    assert!(!gw0.cfg.gateway.icmp_echo);
    let out = gw0.push("inside", &[from_host_a(&echo4(HOST_A, GW0_IN, 64, 1, b"x"))]);
    assert!(out.is_empty(), "{out:?}");
    let s = gw0.stats();
    assert_eq!((s.echo_replies, s.drops["to_us"]), (0, 1));
}

/// What is not a well-formed Echo Request to us, or comes from a source
/// no reply may go to, is `to_us` as before; nothing is sent.
#[test]
fn what_is_not_a_request_stays_to_us() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let good = echo4(HOST_A, GW0_IN, 64, 1, b"0123456789abcdef");
    let edit = |f: &dyn Fn(&mut Vec<u8>), fix_ip: bool| {
        let mut p = good.clone();
        f(&mut p);
        if fix_ip {
            set_ipv4_checksum(&mut p);
        }
        from_host_a(&p)
    };
    let cases = [
        ("an Echo Reply", edit(&|p| p[20] = 0, false)),
        ("a bad ICMP checksum", edit(&|p| p[30] ^= 1, false)),
        ("a first fragment", edit(&|p| p[6] = 0x20, true)),
        ("a later fragment", edit(&|p| p[7] = 0x10, true)),
        ("code 1", edit(&|p| p[21] = 1, false)),
        ("a broadcast source", edit(&|p| p[12..16].copy_from_slice(&[255; 4]), true)),
        ("a loopback source", edit(&|p| p[12..16].copy_from_slice(&[127, 0, 0, 1]), true)),
        ("our own address as source", edit(&|p| p[12..16].copy_from_slice(&GW0_OUT.octets()), true)),
        ("IPv4 options", {
            let mut p = good.clone();
            add_ipv4_options(&mut p);
            set_ipv4_checksum(&mut p);
            from_host_a(&p)
        }),
    ];
    for (i, (what, f)) in cases.iter().enumerate() {
        let out = gw0.push("inside", std::slice::from_ref(f));
        assert!(out.is_empty(), "{what}: {out:?}");
        let s = gw0.stats();
        assert_eq!((s.echo_replies, s.drops["to_us"] + s.drops["martian"] + s.drops["malformed"]), (0, i as u64 + 1), "{what}: {:?}", s.drops);
    }
    // The gateway still answers a good one.
    assert_eq!(gw0.push("inside", &[from_host_a(&good)]).len(), 1);
}

/// A flood gets at most the Echo rate limit (100 a second per worker) of
/// replies; the rest are `to_us` and counted under `icmp_rate_limited`.
/// The ICMP errors have a bucket of their own: after the flood a packet
/// too big for the tunnel still gets its "fragmentation needed" (a ping
/// flood cannot black-hole Path MTU Discovery for the hosts behind us).
#[test]
fn a_ping_flood_is_answered_within_the_rate_limit() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let reqs: Vec<Vec<u8>> = (0..300u16).map(|i| from_host_a(&echo4(HOST_A, GW0_IN, 64, i, b"flood"))).collect();
    let out = gw0.push("inside", &reqs);
    let s = gw0.stats();
    assert_eq!(out.len() as u64, s.echo_replies);
    assert!((100..=120).contains(&s.echo_replies), "{}", s.echo_replies);
    assert_eq!(s.echo_replies + s.drops["to_us"], 300);
    assert_eq!(s.icmp_rate_limited, s.drops["to_us"]);
    assert_accounted(&s, "gw0");
    let big = from_host_a(&udp_packet(HOST_A, Ipv4Addr::new(198, 51, 100, 10), 0, 64, 4000, 9, &[0x5a; 1472]));
    let err = gw0.push("inside", &[big]);
    assert_eq!((err.len(), gw0.stats().icmp_sent), (1, 1), "the error is not rate limited by the flood");
    assert_eq!((err[0].1[14 + 20], err[0].1[14 + 21]), (3, 4), "fragmentation needed");
}

/// A router answers for all of its addresses (RFC 1812 §4.3.3.6), and a
/// packet to one of them is never forwarded: a ping from hostA to gw0's
/// outside address is answered on the inside port, from that address;
/// other traffic to it is `to_us` (was `no_policy`, and forwarded with a
/// bypass policy). An Echo Request from a directed broadcast address of
/// one of our subnets is not answered.
#[test]
fn the_other_ports_address_is_ours_too() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let req = echo4(HOST_A, GW0_OUT, 64, 3, b"the far side");
    let out = gw0.push("inside", &[from_host_a(&req)]);
    assert_eq!(out.len(), 1, "{:?}", gw0.stats().drops);
    assert_eq!(out[0].0, "inside");
    assert_reply4(&out[0].1[14..], &req);
    let udp = from_host_a(&udp_packet(HOST_A, GW0_OUT, 0, 64, 4000, 9, b"to the outside address"));
    assert!(gw0.push("inside", &[udp]).is_empty());
    let s = gw0.stats();
    assert_eq!((s.echo_replies, s.drops["to_us"], s.drops["no_policy"]), (1, 1, 0));
    // From the wan, to the inside address: the same.
    let req = echo4(GW1_OUT, GW0_IN, 64, 4, b"the near side");
    let out = gw0.push("outside", &[eth(mac(GW0_OUT_MAC), mac(GW1_OUT_MAC), 0x0800, &req)]);
    assert_eq!((out.len(), out.first().map(|o| o.0.as_str())), (1, Some("outside")));
    assert_reply4(&out[0].1[14..], &req);
    // 192.0.2.255: the broadcast address of gw0's inside subnet (/24).
    let bc = echo4(Ipv4Addr::new(192, 0, 2, 255), GW0_IN, 64, 5, b"from a broadcast address");
    assert!(gw0.push("inside", &[from_host_a(&bc)]).is_empty());
    assert_eq!(gw0.stats().echo_replies, 2);
}

/// An ICMPv6 Echo Request (RFC 4443 §4.1) `src` → `dst` with `data`,
/// hop limit 64, checksum right.
fn echo6(src: Ipv6Addr, dst: Ipv6Addr, data: &[u8]) -> Vec<u8> {
    let mut msg = vec![128, 0, 0, 0, 0x77, 0x01, 0x00, 0x05];
    msg.extend_from_slice(data);
    let ck = icmpv6_checksum(&src, &dst, &msg);
    msg[2..4].copy_from_slice(&ck.to_be_bytes());
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    p.extend_from_slice(&[58, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&msg);
    p
}

#[test]
fn ping6_to_the_inside_address_is_answered() {
    let a6 = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x10);
    let gw0_in6 = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1);
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let req = echo6(a6, gw0_in6, b"ping6 to gw0");
    let out = gw0.push("inside", &[eth(mac(GW0_IN_MAC), mac(A_MAC), 0x86dd, &req)]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "inside");
    assert_eq!(&out[0].1[..6], &mac(A_MAC));
    let r = &out[0].1[14..];
    assert_eq!(r.len(), req.len());
    assert_eq!((r[0] >> 4, r[6]), (6, 58));
    assert_eq!(&r[8..24], &gw0_in6.octets(), "from the address pinged");
    assert_eq!(&r[24..40], &a6.octets(), "to the pinger");
    assert_eq!((r[40], r[41]), (129, 0), "Echo Reply, code 0");
    assert_eq!(&r[44..], &req[44..], "identifier, sequence number, data as sent");
    assert_eq!(icmpv6_checksum(&gw0_in6, &a6, &r[40..]), 0, "checksum verifies");
    assert_eq!(gw0.stats().echo_replies, 1);
    // To the gateway's outside address from the wan, and a multicast source: the latter not.
    let out6_0 = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
    let out6_1 = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 2);
    let wan = gw0.push("outside", &[eth(mac(GW0_OUT_MAC), mac(GW1_OUT_MAC), 0x86dd, &echo6(out6_1, out6_0, b"x"))]);
    assert_eq!(wan.len(), 1, "{wan:?}");
    let mcast = "ff02::1".parse().unwrap();
    assert!(gw0.push("outside", &[eth(mac(GW0_OUT_MAC), mac(GW1_OUT_MAC), 0x86dd, &echo6(mcast, out6_0, b"x"))]).is_empty());
    let s = gw0.stats();
    assert_eq!((s.echo_replies, s.drops["to_us"] + s.drops["martian"]), (2, 1), "{:?}", s.drops);
}
