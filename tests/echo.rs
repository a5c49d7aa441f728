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
    // gw1 sent its reply with TTL 64 (it did not forward it: no decrement
    // of its own), gw0 forwarded it decrypted: 63.
    assert_eq!(reply[8], 63, "TTL 64 from gw1, less gw0's hop");
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
/// no reply may go to, is `to_us` as before; nothing is sent. (Fragments
/// wait for reassembly: `fragmented_pings_are_reassembled_and_answered`.)
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

/// helper-93: an Echo Request in the clear from a source that the gateway
/// routes out of another port than the request came in on (spoofed) is
/// not answered (`reverse_path`): the reply would have crossed the gateway
/// with no SPD lookup, e.g. from hostA's side onto the wan in the clear
/// with data of the sender's choosing, where the SPD protects
/// 192.0.2.0/24 → 198.51.100.0/24. The same for the ICMP errors the
/// gateway builds about cleartext packets: a Time Exceeded for a spoofed
/// source is not sent (the packet is still `ttl_exceeded`). From a source
/// routed back through the port, both are sent (the controls).
#[test]
fn nothing_is_answered_across_the_gateway_to_a_spoofed_source() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let host_b = Ipv4Addr::new(198, 51, 100, 10);
    let secret = b"SECRET-PLAINTEXT";
    for to in [GW0_IN, GW0_OUT] {
        assert!(gw0.push("inside", &[from_host_a(&echo4(host_b, to, 64, 1, secret))]).is_empty(), "from the inside to {to}");
    }
    // From the wan with an inside source, to the outside address.
    let wan = |ip: &[u8]| eth(mac(GW0_OUT_MAC), mac(GW1_OUT_MAC), 0x0800, ip);
    assert!(gw0.push("outside", &[wan(&echo4(HOST_A, GW0_OUT, 64, 2, secret))]).is_empty());
    let s = gw0.stats();
    assert_eq!((s.echo_replies, s.drops["reverse_path"], s.drops["to_us"]), (0, 3, 0), "{:?}", s.drops);
    // TTL 1 from the inside with a source behind the tunnel, to the wan,
    // bypassed by a policy with any source: dropped, no error.
    let cfg = edited_config("ep0.toml", "bypass-any", |t| {
        t + "\n[[policy]]\ndirection = \"outbound\"\nsrc = \"0.0.0.0/0\"\ndst = \"203.0.113.0/24\"\npriority = 20\naction = \"bypass\"\n"
    });
    let mut gw0 = Gw::from_config(&cfg);
    let mut ttl1 = udp_packet(host_b, Ipv4Addr::new(203, 0, 113, 50), 0, 1, 4000, 9, secret);
    assert!(gw0.push("inside", &[from_host_a(&ttl1)]).is_empty());
    let s = gw0.stats();
    assert_eq!((s.drops["ttl_exceeded"], s.icmp_sent), (1, 0), "{:?}", s.drops);
    assert_accounted(&s, "gw0 spoofed");
    // The controls: hostA's own ping and TTL 1 are answered on the inside.
    let out = gw0.push("inside", &[from_host_a(&echo4(HOST_A, GW0_OUT, 64, 3, secret))]);
    assert_eq!(out.iter().map(|o| o.0.as_str()).collect::<Vec<_>>(), ["inside"]);
    ttl1[12..16].copy_from_slice(&HOST_A.octets());
    set_ipv4_checksum(&mut ttl1);
    let out = gw0.push("inside", &[from_host_a(&ttl1)]);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0.as_str(), out[0].1[14 + 20]), ("inside", 11), "Time Exceeded back to hostA");
    let s = gw0.stats();
    assert_eq!((s.echo_replies, s.icmp_sent, s.drops["reverse_path"]), (1, 1, 0));
    // IPv6: from the inside, a source behind the tunnel.
    let mut gw6 = Gw::from_config("configs/ep0-v6.toml");
    let b6 = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 0x10);
    let gw0_in6 = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1);
    assert!(gw6.push("inside", &[eth(mac(GW0_IN_MAC), mac(A_MAC), 0x86dd, &echo6(b6, gw0_in6, secret))]).is_empty());
    let s = gw6.stats();
    assert_eq!((s.echo_replies, s.drops["reverse_path"]), (0, 1), "{:?}", s.drops);
}

/// A request in the clear on the wan from a source in a range the inbound
/// SPD protects (192.0.2.0/24 → 198.51.100.0/24 with SA 1001 on gw1) to
/// gw1's inside address is `cleartext_protected` (RFC 4301 §5.2), not
/// answered: the reply went onto the wan in the clear, from the protected
/// range. To gw1's outside address, which no PROTECT policy covers, the
/// same source is answered (the control); IPv6 alike.
#[test]
fn cleartext_the_spd_protects_is_not_answered() {
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let wan = |t: u16, ip: &[u8]| eth(mac(GW1_OUT_MAC), mac(GW0_OUT_MAC), t, ip);
    assert!(gw1.push("outside", &[wan(0x0800, &echo4(HOST_A, GW1_IN, 64, 1, b"spoofed"))]).is_empty());
    let s = gw1.stats();
    assert_eq!((s.echo_replies, s.drops["cleartext_protected"], s.drops["to_us"]), (0, 1, 0), "{:?}", s.drops);
    let out = gw1.push("outside", &[wan(0x0800, &echo4(HOST_A, GW1_OUT, 64, 2, b"spoofed"))]);
    assert_eq!(out.iter().map(|o| o.0.as_str()).collect::<Vec<_>>(), ["outside"]);
    assert_accounted(&gw1.stats(), "gw1");
    let mut gw6 = Gw::from_config("configs/ep1-v6.toml");
    let a6 = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x10);
    let gw1_in6 = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 1);
    assert!(gw6.push("outside", &[wan(0x86dd, &echo6(a6, gw1_in6, b"spoofed"))]).is_empty());
    let s = gw6.stats();
    assert_eq!((s.echo_replies, s.drops["cleartext_protected"]), (0, 1), "{:?}", s.drops);
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

/// `ip` (IPv4, 20-byte header) cut into fragments of at most `chunk` data
/// bytes (a multiple of 8), as a host's IP layer would (RFC 791 §3.2).
fn fragments4(ip: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let data = &ip[20..];
    (0..data.len().div_ceil(chunk))
        .map(|k| {
            let part = &data[k * chunk..data.len().min((k + 1) * chunk)];
            let mut f = ip[..20].to_vec();
            f.extend_from_slice(part);
            let more = (k + 1) * chunk < data.len();
            let len = f.len() as u16;
            f[2..4].copy_from_slice(&len.to_be_bytes());
            f[6..8].copy_from_slice(&(((k * chunk / 8) as u16) | if more { 0x2000 } else { 0 }).to_be_bytes());
            set_ipv4_checksum(&mut f);
            f
        })
        .collect()
}

/// The IPv4 datagram the fragments `frags` (in any order) make, each
/// header checked on the way: checksum, one identification, offsets that
/// tile the data, MF on all but the last.
fn reassemble4(frags: &[&[u8]]) -> Vec<u8> {
    let mut parts: Vec<(usize, bool, &[u8])> = frags
        .iter()
        .map(|f| {
            assert_eq!(ip_checksum(&f[..20]), 0, "each fragment's header checksum verifies");
            assert_eq!(&f[4..6], &frags[0][4..6], "one identification");
            let ff = u16::from_be_bytes([f[6], f[7]]);
            ((ff & 0x1fff) as usize * 8, ff & 0x2000 != 0, &f[20..])
        })
        .collect();
    parts.sort_by_key(|p| p.0);
    let mut ip = parts[0].2.to_vec();
    for (i, (off, more, data)) in parts.iter().enumerate() {
        if i > 0 {
            assert_eq!(*off, ip.len(), "fragments tile the datagram");
            ip.extend_from_slice(data);
        }
        assert_eq!(*more, i + 1 < parts.len(), "MF on all but the last");
    }
    let first = frags.iter().find(|f| f[6] & 0x1f == 0 && f[7] == 0).expect("a first fragment");
    let mut whole = first[..20].to_vec();
    whole.extend_from_slice(&ip);
    let len = whole.len() as u16;
    whole[2..4].copy_from_slice(&len.to_be_bytes());
    whole[6..8].copy_from_slice(&[0, 0]);
    set_ipv4_checksum(&mut whole);
    whole
}

/// A ping bigger than the link (Linux `ping -s 2000`: the request leaves
/// its host in fragments, DF clear) to the gateway's inside address, and
/// one from the wan to its outside address: the fragments are reassembled,
/// the reply carries all of the data (RFC 1812 §4.3.3.6) and, too big for
/// the port, leaves in fragments. A fragment whose datagram never completes
/// is held, not answered, not `to_us`.
#[test]
fn fragmented_pings_are_reassembled_and_answered() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let data: Vec<u8> = (0..2000u32).map(|i| (i * 7) as u8).collect();
    for (port, src, dst, macs) in [
        ("inside", HOST_A, GW0_IN, (GW0_IN_MAC, A_MAC)),
        ("outside", GW1_OUT, GW0_OUT, (GW0_OUT_MAC, GW1_OUT_MAC)),
    ] {
        let mut req = echo4(src, dst, 64, 11, &data);
        req[6] = 0; // DF clear, as the host's IP layer fragments it
        set_ipv4_checksum(&mut req);
        let frags: Vec<Vec<u8>> = fragments4(&req, 1480).into_iter().map(|f| eth(mac(macs.0), mac(macs.1), 0x0800, &f)).collect();
        assert_eq!(frags.len(), 2);
        let before = gw0.stats().echo_replies;
        let out = gw0.push(port, &frags);
        assert_eq!(out.len(), 2, "{port}: the reply in two fragments: {:?}", gw0.stats().drops);
        assert!(out.iter().all(|(p, f)| p == port && f.len() <= 14 + 1500 && f[..6] == mac(macs.1)), "{port}: back out of the port it came in by, within its MTU");
        let pieces: Vec<&[u8]> = out.iter().map(|(_, f)| &f[14..]).collect();
        assert_reply4(&reassemble4(&pieces), &req);
        assert_eq!(gw0.stats().echo_replies, before + 1);
    }
    let s = gw0.stats();
    assert_eq!((s.reassembled, s.frags_reassembled, s.frags_pending), (2, 4, 0));
    assert_eq!(s.drops.values().sum::<u64>(), 0, "{:?}", s.drops);
    assert_eq!(s.frags_sent, 4, "two replies of two fragments");
    // The first fragment alone: held for its datagram, nothing sent.
    let mut req = echo4(HOST_A, GW0_IN, 64, 12, &data);
    req[6] = 0;
    set_ipv4_checksum(&mut req);
    let first = fragments4(&req, 1480).remove(0);
    assert!(gw0.push("inside", &[from_host_a(&first)]).is_empty());
    let s = gw0.stats();
    assert_eq!((s.echo_replies, s.frags_pending, s.drops["to_us"]), (2, 1, 0));
    // With Echo off, fragments to us are not reassembled: `to_us` at once.
    let cfg = edited_config("ep0.toml", "echo_off_frag", |t| t.replacen("[gateway]\n", "[gateway]\nicmp_echo = false\n", 1));
    let mut quiet = Gw::from_config(&cfg);
    assert!(quiet.push("inside", &[from_host_a(&first)]).is_empty());
    let s = quiet.stats();
    assert_eq!((s.frags_pending, s.drops["to_us"]), (0, 1));
}

/// `ping -6 -s 2000` to the gateway's inside address: the request's
/// fragments (Fragment header, RFC 8200 §4.5) are reassembled and the
/// reply, too big for the port's MTU, is cut by the gateway, its source,
/// into fragments of its own, which reassemble into the whole reply.
#[test]
fn a_fragmented_ping6_is_answered_in_fragments() {
    let a6 = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x10);
    let gw0_in6 = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1);
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let data: Vec<u8> = (0..2000u32).map(|i| (i * 13) as u8).collect();
    let req = echo6(a6, gw0_in6, &data);
    // Fragments of 1448 payload bytes (a 1500-byte link): header with Next
    // Header 44, then the Fragment header (next header 58, offset, M, id).
    let payload = &req[40..];
    let chunk = 1448;
    let frags: Vec<Vec<u8>> = (0..payload.len().div_ceil(chunk))
        .map(|k| {
            let part = &payload[k * chunk..payload.len().min((k + 1) * chunk)];
            let more = (k + 1) * chunk < payload.len();
            let mut f = req[..40].to_vec();
            f[4..6].copy_from_slice(&((8 + part.len()) as u16).to_be_bytes());
            f[6] = 44;
            f.extend_from_slice(&[58, 0]);
            f.extend_from_slice(&(((k * chunk) as u16) | more as u16).to_be_bytes());
            f.extend_from_slice(&0x5eed_0001u32.to_be_bytes());
            f.extend_from_slice(part);
            eth(mac(GW0_IN_MAC), mac(A_MAC), 0x86dd, &f)
        })
        .collect();
    let out = gw0.push("inside", &frags);
    assert_eq!(out.len(), 2, "the reply in two fragments: {:?}", gw0.stats().drops);
    let mut pieces: Vec<(usize, bool, Vec<u8>)> = out
        .iter()
        .map(|(p, f)| {
            assert_eq!(p, "inside");
            assert!(f.len() <= 14 + 1500, "within the port's MTU: {}", f.len());
            let ip = &f[14..];
            assert_eq!((ip[6], ip[40]), (44, 58), "a Fragment header before ICMPv6");
            assert_eq!(&ip[8..24], &gw0_in6.octets());
            assert_eq!(&ip[24..40], &a6.octets());
            let ofm = u16::from_be_bytes([ip[42], ip[43]]);
            assert_eq!(u16::from_be_bytes([ip[4], ip[5]]) as usize, ip.len() - 40);
            ((ofm & 0xfff8) as usize, ofm & 1 == 1, ip[48..].to_vec())
        })
        .collect();
    pieces.sort_by_key(|p| p.0);
    let mut msg = Vec::new();
    for (i, (off, more, d)) in pieces.iter().enumerate() {
        assert_eq!(*off, msg.len(), "fragments tile the reply");
        assert_eq!(*more, i + 1 < pieces.len());
        msg.extend_from_slice(d);
    }
    assert_eq!(msg.len(), req.len() - 40);
    assert_eq!((msg[0], msg[1]), (129, 0), "Echo Reply");
    assert_eq!(&msg[4..], &req[44..], "identifier, sequence number and all the data");
    assert_eq!(icmpv6_checksum(&gw0_in6, &a6, &msg), 0, "checksum verifies");
    let s = gw0.stats();
    assert_eq!((s.echo_replies, s.reassembled, s.frags_pending, s.frags_sent), (1, 1, 0, 2));
    assert_eq!(s.drops.values().sum::<u64>(), 0, "{:?}", s.drops);
}
