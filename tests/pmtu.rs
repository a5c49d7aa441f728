//! Path MTU of tunnel SAs learned from ICMP (RFC 4301 §8.2.1, RFC 1191,
//! RFC 4443 §3.2) over in-memory ports: a router's "fragmentation needed" /
//! Packet Too Big about one of gw0's ESP packets lowers that SA's path MTU,
//! and inner packets that no longer fit get an ICMP error with the MTU
//! that does; reports that fail a check change nothing. The e2e test
//! `tests/e2e/test_pmtu.py` does the same with scapy's packets and Linux's
//! PMTU cache.

mod common;
use common::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const GW0_OUT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
/// Outer header + ESP header + IV + ICV of AES-128-GCM in IPv4.
const OVERHEAD4: usize = 20 + 8 + 8 + 16;

/// A UDP packet hostA → hostB of `total` bytes, DF set, to `dport`.
fn from_host_a(total: usize, dport: u16) -> Vec<u8> {
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(HOST_A, HOST_B, 0, 64, 40000, dport, &vec![0x5au8; total - 28]))
}

/// The largest inner packet whose ESP fits `mtu` with `overhead` bytes
/// of headers and ICV: inner + Pad Length + Next Header padded to 4.
fn fits(mtu: usize, overhead: usize) -> usize {
    (mtu - overhead) / 4 * 4 - 2
}

/// The ICMP error gw0 sent hostA about `sent` (a frame from hostA): its
/// advertised next-hop MTU, after checking it is a "fragmentation needed"
/// from gw0's inside address quoting `sent`'s header.
fn advertised(out: &[(String, Vec<u8>)], sent: &[u8]) -> u16 {
    assert_eq!(out.len(), 1, "one frame: {:?}", out.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>());
    let (port, f) = &out[0];
    assert_eq!(port, "inside", "the error goes back to hostA");
    let ip = &f[14..];
    assert_eq!((ip[9], &ip[12..16], &ip[16..20]), (1, &[192u8, 0, 2, 1][..], &HOST_A.octets()[..]));
    let m = &ip[20..];
    assert_eq!((m[0], m[1]), (3, 4), "fragmentation needed");
    assert_eq!(ip_checksum(m), 0, "ICMP checksum");
    assert_eq!(&m[8..36], &sent[14..42], "quotes hostA's header and 8 bytes");
    u16::from_be_bytes([m[6], m[7]])
}

/// gw0 (ep0.toml, or `cfg`) after one 1400-byte DF packet went out: the
/// gateway and the ESP packet it sent (IPv4, no Ethernet header).
fn after_one_packet(cfg: &str) -> (Gw, Vec<u8>) {
    let mut gw0 = Gw::from_config(cfg);
    let out = gw0.push("inside", &[from_host_a(1400, 5001)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "outside");
    assert_eq!(out[0].1.len() - 14, 1400 + 2 + 2 + OVERHEAD4, "fits the port's 1500");
    let esp = out[0].1[14..].to_vec();
    assert_eq!((esp[9], &esp[20..24]), (50, &1001u32.to_be_bytes()[..]), "ESP of SA 1001");
    (gw0, esp)
}

fn path_mtu(gw: &Gw, spi: u32) -> Option<u32> {
    gw.stats().sas.iter().find(|s| s.spi == spi && s.direction == "outbound").expect("SA").path_mtu
}

#[test]
fn a_report_lowers_the_tunnel_mtu_and_hosts_are_told() {
    let (mut gw0, esp) = after_one_packet("configs/ep0.toml");
    assert_eq!(path_mtu(&gw0, 1001), None);
    // As RFC 1812 routers quote: as much as fits 576 bytes.
    let out = gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &esp, 548)]);
    assert!(out.is_empty(), "the report is not forwarded: {out:?}");
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (1, 0));
    assert_eq!(path_mtu(&gw0, 1001), Some(1300));

    let want = fits(1300, OVERHEAD4);
    assert_eq!(want, 1246);
    let big = from_host_a(1400, 5001);
    let out = gw0.push("inside", std::slice::from_ref(&big));
    assert_eq!(advertised(&out, &big) as usize, want);
    // Exactly `want` bytes leave, as an ESP packet of exactly 1300 bytes.
    let out = gw0.push("inside", &[from_host_a(want, 5001)]);
    assert_eq!((out.len(), out[0].0.as_str(), out[0].1.len() - 14), (1, "outside", 1300));
    let plus = from_host_a(want + 1, 5001);
    let out = gw0.push("inside", std::slice::from_ref(&plus));
    assert_eq!(advertised(&out, &plus) as usize, want);
    let s = gw0.stats();
    assert_eq!((s.drops["mtu_exceeded"], s.icmp_sent), (2, 2));
    // A second, lower report lowers it again; a higher one is ignored.
    gw0.push("outside", &[frag_needed(GW0_OUT, 1200, &esp, 28)]);
    gw0.push("outside", &[frag_needed(GW0_OUT, 1250, &esp, 28)]);
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (2, 1));
    assert_eq!(path_mtu(&gw0, 1001), Some(1200));
    // Every frame accounted for: 7 in; out 2 ESP and 2 ICMP errors (the
    // packets they replace counted as mtu_exceeded); 3 reports consumed.
    let s = gw0.stats();
    let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
    let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
    assert_eq!((rx, tx, s.drops.values().sum::<u64>()), (7, 4, 5));
}

#[test]
fn reports_that_fail_a_check_change_nothing() {
    let (mut gw0, esp) = after_one_packet("configs/ep0.toml");
    let with = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut q = esp.clone();
        edit(&mut q);
        q
    };
    let mut bad_ck = frag_needed(GW0_OUT, 1300, &esp, 548);
    bad_ck[14 + 20 + 5] ^= 0x40;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("the SPI of our inbound SA", frag_needed(GW0_OUT, 1300, &with(&|q| q[20..24].copy_from_slice(&1002u32.to_be_bytes())), 548)),
        ("an unknown SPI", frag_needed(GW0_OUT, 1300, &with(&|q| q[20..24].copy_from_slice(&7u32.to_be_bytes())), 548)),
        ("a quoted source not the tunnel's", frag_needed(GW0_OUT, 1300, &with(&|q| q[12..16].copy_from_slice(&[203, 0, 113, 9])), 548)),
        ("a quoted destination not the tunnel end", frag_needed(GW0_OUT, 1300, &with(&|q| q[16..20].copy_from_slice(&[203, 0, 113, 3])), 548)),
        ("quoted protocol UDP (SA without udp_encap)", frag_needed(GW0_OUT, 1300, &with(&|q| q[9] = 17), 548)),
        ("sequence number 0", frag_needed(GW0_OUT, 1300, &with(&|q| q[24..28].copy_from_slice(&0u32.to_be_bytes())), 548)),
        ("a sequence number not sent yet", frag_needed(GW0_OUT, 1300, &with(&|q| q[24..28].copy_from_slice(&2u32.to_be_bytes())), 548)),
        ("a bad ICMP checksum", bad_ck),
        ("MTU 1500, the port's own", frag_needed(GW0_OUT, 1500, &esp, 548)),
        ("MTU 9000", frag_needed(GW0_OUT, 9000, &esp, 548)),
        ("MTU 0 (a pre-RFC 1191 router)", frag_needed(GW0_OUT, 0, &esp, 548)),
        ("only the IP header quoted", frag_needed(GW0_OUT, 1300, &esp, 20)),
    ];
    for (i, (what, f)) in cases.iter().enumerate() {
        let out = gw0.push("outside", std::slice::from_ref(f));
        assert!(out.is_empty(), "{what}: {out:?}");
        assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (0, i as u64 + 1), "{what}");
    }
    assert_eq!(path_mtu(&gw0, 1001), None);
    // Other ICMP errors to us stay `to_us` (a port unreachable here; Echo
    // Requests are answered: tests/echo.rs).
    let mut unreach = frag_needed(GW0_OUT, 1300, &esp, 28);
    unreach[14 + 21] = 3;
    let ck = ip_checksum(&{
        let mut m = unreach[34..].to_vec();
        m[2..4].copy_from_slice(&[0, 0]);
        m
    });
    unreach[36..38].copy_from_slice(&ck.to_be_bytes());
    gw0.push("outside", &[unreach]);
    assert_eq!((gw0.drop_count("to_us"), gw0.drop_count("pmtu_ignored")), (1, cases.len() as u64));
    // The full-size packet still leaves encrypted.
    let out = gw0.push("inside", &[from_host_a(1400, 5001)]);
    assert_eq!((out.len(), out[0].0.as_str()), (1, "outside"));
    assert_accounted(&gw0.stats(), "ignored reports");
}

#[test]
fn the_floor_and_aging() {
    let cfg = edited_config("ep0.toml", "pmtu-age", |t| t.replacen("stats_interval = 0\n", "stats_interval = 0\npmtu_timeout_s = 5\n", 1));
    let (mut gw0, esp) = after_one_packet(&cfg);
    // RFC 1191 lets a router report 68; the gateway goes no lower than 552.
    gw0.push("outside", &[frag_needed(GW0_OUT, 68, &esp, 548)]);
    assert_eq!(path_mtu(&gw0, 1001), Some(552));
    let big = from_host_a(1400, 5001);
    let out = gw0.push("inside", std::slice::from_ref(&big));
    assert_eq!(advertised(&out, &big) as usize, fits(552, OVERHEAD4));
    // Six seconds later (pmtu_timeout_s = 5) it is forgotten: the port's
    // MTU again.
    let later = Instant::now() + Duration::from_secs(6);
    gw0.inner.inject(0, "inside", &big);
    let out = gw0.inner.run_at(later);
    assert_eq!((out.len(), out[0].1.as_str()), (1, "outside"), "aged out");
    assert_eq!(path_mtu(&gw0, 1001), None);
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn pmtu_timeout_0_ignores_reports() {
    let cfg = edited_config("ep0.toml", "pmtu-off", |t| t.replacen("stats_interval = 0\n", "stats_interval = 0\npmtu_timeout_s = 0\n", 1));
    let (mut gw0, esp) = after_one_packet(&cfg);
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &esp, 548)]);
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (0, 1));
    assert_eq!(path_mtu(&gw0, 1001), None);
    let out = gw0.push("inside", &[from_host_a(1400, 5001)]);
    assert_eq!(out[0].0, "outside");
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn packet_too_big_for_an_ipv6_tunnel() {
    // configs/ep0-v6.toml: UDP to ports 6000-6999 goes in SA 1101, IPv6
    // outer 2001:db8:ff::1 → 2001:db8:ff::2.
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let out = gw0.push("inside", &[from_host_a(1400, 6001)]);
    assert_eq!((out.len(), out[0].0.as_str()), (1, "outside"));
    let esp = out[0].1[14..].to_vec();
    assert_eq!((esp[0] >> 4, esp[6], &esp[40..44]), (6, 50, &1101u32.to_be_bytes()[..]));
    let (router, me): (Ipv6Addr, Ipv6Addr) = ("2001:db8:ff::99".parse().unwrap(), "2001:db8:ff::1".parse().unwrap());
    let ptb = |mtu: u32, from: Ipv6Addr| {
        let mut m = vec![2, 0, 0, 0];
        m.extend_from_slice(&mtu.to_be_bytes());
        m.extend_from_slice(&esp[..1232]);
        let ck = icmpv6_checksum(&from, &me, &m);
        m[2..4].copy_from_slice(&ck.to_be_bytes());
        let mut ip = vec![0x60, 0, 0, 0];
        ip.extend_from_slice(&(m.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[58, 64]);
        ip.extend_from_slice(&router.octets());
        ip.extend_from_slice(&me.octets());
        ip.extend_from_slice(&m);
        eth(mac("02:00:00:00:00:02"), mac("02:00:00:00:aa:01"), 0x86dd, &ip)
    };
    // Checksummed as if from another sender: fails the pseudo-header.
    gw0.push("outside", &[ptb(1300, me)]);
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (0, 1));
    // 1000 is below IPv6's minimum link MTU: taken as 1280 (RFC 8201 §4).
    gw0.push("outside", &[ptb(1000, router)]);
    assert_eq!(gw0.drop_count("pmtu_update"), 1);
    assert_eq!(path_mtu(&gw0, 1101), Some(1280));
    assert_eq!(path_mtu(&gw0, 1001), None, "only the SA quoted");
    let big = from_host_a(1400, 6001);
    let out = gw0.push("inside", std::slice::from_ref(&big));
    // IPv6 outer: 40 + 8 + 8 + 16.
    assert_eq!(advertised(&out, &big) as usize, fits(1280, 72));
    let out = gw0.push("inside", &[from_host_a(fits(1280, 72), 6001)]);
    assert_eq!((out[0].0.as_str(), out[0].1.len() - 14), ("outside", 1280));
    // SA 1001 (IPv4 outer) still carries 1400 bytes.
    let out = gw0.push("inside", &[from_host_a(1400, 5001)]);
    assert_eq!(out[0].0, "outside");
    // IPv6 inner packets in SA 1101 have 1206 bytes left at a path MTU of
    // 1280: hosts are told 1280, and 1280 bytes go out as two fragments of
    // at most 1280 (not the port's 1500: IPv6 routers do not fragment),
    // which gw1 reassembles.
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    let big = v6_from_host_a(1281, 5001);
    assert_eq!(ptb_mtu(&gw0.push("inside", std::slice::from_ref(&big)), &big), 1280);
    let p = v6_from_host_a(1280, 5001);
    let out = gw0.push("inside", std::slice::from_ref(&p));
    assert_outer_v6_fragments(&out, 1280, 1101);
    assert_delivered_v6(&gw1.push("outside", &[out[0].1.clone(), out[1].1.clone()]), &p);
    let out = gw0.push("inside", &[v6_from_host_a(fits(1280, 72), 5001)]);
    assert_eq!((out.len(), out[0].1.len() - 14, out[0].1[14 + 6]), (1, 1280, 50), "what fits goes whole");
}

/// ep0.toml with `lines` added to SA 1001 (after its `spi = 1001` line).
fn ep0_sa1001(tag: &str, lines: &str) -> String {
    edited_config("ep0.toml", tag, |t| t.replacen("spi = 1001\n", &format!("spi = 1001\n{lines}\n"), 1))
}

#[test]
fn a_repeated_report_extends_the_expiry() {
    let cfg = edited_config("ep0.toml", "pmtu-refresh", |t| t.replacen("stats_interval = 0\n", "stats_interval = 0\npmtu_timeout_s = 5\n", 1));
    let (mut gw0, esp) = after_one_packet(&cfg);
    let t0 = Instant::now();
    let report = frag_needed(GW0_OUT, 1300, &esp, 548);
    gw0.inner.inject(0, "outside", &report);
    gw0.inner.run_at(t0);
    // 4 s later the same MTU again: held until 9 s.
    gw0.inner.inject(0, "outside", &report);
    gw0.inner.run_at(t0 + Duration::from_secs(4));
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (2, 0));
    let big = from_host_a(1400, 5001);
    gw0.inner.inject(0, "inside", &big);
    let out: Vec<(String, Vec<u8>)> = gw0.inner.run_at(t0 + Duration::from_secs(7)).into_iter().map(|(_, p, f)| (p, f)).collect();
    assert_eq!(advertised(&out, &big), 1246, "7 s after the first report, 3 s after the second: still 1300");
    gw0.inner.inject(0, "inside", &big);
    let out = gw0.inner.run_at(t0 + Duration::from_secs(10));
    assert_eq!(out[0].1, "outside", "10 s: aged out");
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn esp_in_udp_reports_quote_the_sa_ports() {
    let cfg = ep0_sa1001("pmtu-natt", "udp_encap = true");
    let (mut gw0, esp) = {
        let mut gw0 = Gw::from_config(&cfg);
        let out = gw0.push("inside", &[from_host_a(1400, 5001)]);
        assert_eq!((out.len(), out[0].1[14 + 9]), (1, 17), "ESP in UDP");
        let esp = out[0].1[14..].to_vec();
        (gw0, esp)
    };
    let mut wrong_port = esp.clone();
    wrong_port[22..24].copy_from_slice(&4501u16.to_be_bytes());
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &wrong_port, 548)]);
    // RFC 792's minimum quote: the UDP header and no SPI.
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &esp, 28)]);
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (0, 2));
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &esp, 36)]);
    assert_eq!((gw0.drop_count("pmtu_update"), path_mtu(&gw0, 1001)), (1, Some(1300)));
    let big = from_host_a(1400, 5001);
    let out = gw0.push("inside", std::slice::from_ref(&big));
    // 8 more bytes of UDP header.
    assert_eq!(advertised(&out, &big) as usize, fits(1300, OVERHEAD4 + 8));
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn no_report_is_believed_for_what_cannot_carry_df() {
    // df = "clear": gw0's ESP never has DF, so no router reports it.
    let cfg = ep0_sa1001("pmtu-dfclear", "df = \"clear\"");
    let (mut gw0, esp) = after_one_packet(&cfg);
    let mut with_df = esp.clone();
    with_df[6] |= 0x40;
    with_df[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&with_df[..20]);
    with_df[10..12].copy_from_slice(&ck.to_be_bytes());
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &with_df, 548)]);
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (0, 1));
    let _ = std::fs::remove_file(cfg);
    // A quote of a packet without DF, on an SA with df = "copy".
    let (mut gw0, esp) = after_one_packet("configs/ep0.toml");
    let mut no_df = esp.clone();
    no_df[6] &= !0x40;
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &no_df, 548)]);
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (0, 1));
}

/// An IPv6/UDP packet 2001:db8:a::10 → 2001:db8:b::10 of `total` bytes
/// to `dport` from hostA (checksum zero: the gateway does not check it).
fn v6_from_host_a(total: usize, dport: u16) -> Vec<u8> {
    let (a, b): (Ipv6Addr, Ipv6Addr) = ("2001:db8:a::10".parse().unwrap(), "2001:db8:b::10".parse().unwrap());
    let plen = total - 40;
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(plen as u16).to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&a.octets());
    p.extend_from_slice(&b.octets());
    p.extend_from_slice(&40000u16.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&(plen as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.resize(total, 0x6b);
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x86dd, &p)
}

/// The MTU of the ICMPv6 Packet Too Big gw0 sent hostA about `sent` (an
/// IPv6 frame from hostA), after checking it is one, from gw0's inside
/// address, quoting `sent` from its start.
fn ptb_mtu(out: &[(String, Vec<u8>)], sent: &[u8]) -> u32 {
    assert_eq!(out.len(), 1, "one frame: {:?}", out.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>());
    assert_eq!(out[0].0, "inside", "the error goes back to hostA");
    let ip = &out[0].1[14..];
    let gw0_in: Ipv6Addr = "2001:db8:a::1".parse().unwrap();
    assert_eq!((ip[0] >> 4, ip[6], ip[40], ip[41]), (6, 58, 2, 0), "ICMPv6 Packet Too Big");
    assert_eq!(&ip[8..24], &gw0_in.octets()[..]);
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
    assert_eq!(icmpv6_checksum(&src, &dst, &ip[40..]), 0, "ICMPv6 checksum");
    assert_eq!(&ip[48..88], &sent[14..54], "quotes hostA's header");
    u32::from_be_bytes([ip[44], ip[45], ip[46], ip[47]])
}

/// `p` (an IPv6 frame from hostA) as hostB gets it: hop limit two less
/// (gw0 and gw1 each forward it), addressed to hostB's MAC.
fn assert_delivered_v6(got: &[(String, Vec<u8>)], p: &[u8]) {
    assert_eq!(got.len(), 1, "one frame: {:?}", got.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>());
    assert_eq!(got[0].0, "inside");
    let (ip, sent) = (&got[0].1[14..], &p[14..]);
    assert_eq!(ip.len(), sent.len());
    assert_eq!(ip[7], sent[7] - 2, "hop limit");
    assert_eq!((&ip[..7], &ip[8..]), (&sent[..7], &sent[8..]), "the packet hostA sent");
}

#[test]
fn ipv6_hosts_are_never_told_less_than_1280() {
    // configs/ep0-v6.toml: IPv6 inner traffic to UDP 4000-4999 goes in SA
    // 1001 (IPv4 outer); ep1-v6.toml is its peer.
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    let out = gw0.push("inside", &[from_host_a(1400, 5001)]);
    let esp = out[0].1[14..].to_vec();
    assert_eq!(&esp[20..24], &1001u32.to_be_bytes());
    // 1300 leaves IPv6 inner packets 1246 bytes: below IPv6's 1280, so the
    // tunnel MTU counts as 1280 (RFC 4213 §3.2).
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &esp, 548)]);
    assert_eq!(path_mtu(&gw0, 1001), Some(1300));
    let big = v6_from_host_a(1281, 4001);
    assert_eq!(ptb_mtu(&gw0.push("inside", std::slice::from_ref(&big)), &big), 1280);
    // 1280 bytes go out with the outer DF clear, for a router of the 1300
    // path to fragment; whole here, as they fit the port's 1500.
    let p = v6_from_host_a(1280, 4001);
    let out = gw0.push("inside", std::slice::from_ref(&p));
    assert_eq!((out.len(), out[0].0.as_str()), (1, "outside"));
    let ip = &out[0].1[14..];
    assert_eq!((ip.len(), ip[9], &ip[20..24]), (1280 + 4 + OVERHEAD4, 50, &1001u32.to_be_bytes()[..]));
    assert_eq!(u16::from_be_bytes([ip[6], ip[7]]), 0, "DF clear, not a fragment");
    assert_eq!(ip_checksum(&ip[..20]), 0, "header checksum after clearing DF");
    assert_delivered_v6(&gw1.push("outside", &[out[0].1.clone()]), &p);
    // What fits the path keeps DF (`df = "copy"` of an IPv6 packet).
    let out = gw0.push("inside", &[v6_from_host_a(fits(1300, OVERHEAD4), 4001)]);
    assert_eq!((out[0].0.as_str(), out[0].1.len() - 14, out[0].1[14 + 6] & 0x40), ("outside", 1300, 0x40));
    // IPv4 inner packets are told 1246.
    let big = from_host_a(1400, 5001);
    assert_eq!(advertised(&gw0.push("inside", std::slice::from_ref(&big)), &big), 1246);
    assert_eq!(gw0.drop_count("mtu_exceeded"), 2);
    // At 1400 the IPv6 packets are told 1346 (Packet Too Big, type 2).
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let out = gw0.push("inside", &[from_host_a(1400, 5001)]);
    let esp = out[0].1[14..].to_vec();
    gw0.push("outside", &[frag_needed(GW0_OUT, 1400, &esp, 548)]);
    let big = v6_from_host_a(1400, 4001);
    assert_eq!(ptb_mtu(&gw0.push("inside", std::slice::from_ref(&big)), &big) as usize, fits(1400, OVERHEAD4));
    assert_eq!(fits(1400, OVERHEAD4), 1346);
}

/// The identifications of the Fragment headers gw0 writes are random
/// (RFC 7739 §5.2), not a counter: with a counter, the identification of
/// one fragmented Echo Reply, which anyone can ask for, told the next
/// tunnel datagrams' identifications, and one 8-byte fragment spoofed
/// from gw0 ahead of each made gw1 drop them as overlapping (RFC 5722).
#[test]
fn fragment_identifications_are_not_a_counter() {
    let cfg = edited_config("ep0-v6.toml", "v6-ident", |t| t.replacen("name = \"outside\"\n", "name = \"outside\"\nmtu = 1300\n", 1));
    let mut gw0 = Gw::from_config(&cfg);
    let ids: Vec<u32> = (0..16u16)
        .map(|k| {
            let out = gw0.push("inside", &[v6_from_host_a(1280, 5001 + k)]);
            assert_outer_v6_fragments(&out, 1300, 1101);
            let fh = &out[0].1[14 + 40..14 + 48];
            u32::from_be_bytes([fh[4], fh[5], fh[6], fh[7]])
        })
        .collect();
    // A guess of the next from the last within 1024 either way fails for
    // every pair but with a chance of about 2⁻²¹ each.
    for w in ids.windows(2) {
        assert!(w[1].wrapping_sub(w[0]).wrapping_add(1024) > 2048, "{:#x} follows {:#x}: {ids:x?}", w[1], w[0]);
    }
    let _ = std::fs::remove_file(cfg);
}

/// `out`: one ESP packet of SA `spi` with an IPv6 outer header from gw0,
/// fragmented by gw0 to `mtu` (RFC 8200 §4.5): two packets of at most
/// `mtu` bytes on the outside port, each the 40-byte header (next header
/// 44) and a Fragment header (next header 50, one identification, offsets
/// in order, M on the first only), the first carrying the ESP header.
fn assert_outer_v6_fragments(out: &[(String, Vec<u8>)], mtu: usize, spi: u32) {
    assert_eq!(out.len(), 2, "{:?}", out.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>());
    let mut off = 0;
    let mut ident = None;
    for (k, (port, f)) in out.iter().enumerate() {
        let ip = &f[14..];
        assert_eq!((port.as_str(), ip[0] >> 4, ip[6]), ("outside", 6, 44), "fragment {k}");
        assert!(ip.len() <= mtu, "fragment {k}: {} bytes", ip.len());
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]) as usize, ip.len() - 40, "payload length");
        let fh = &ip[40..48];
        let word = u16::from_be_bytes([fh[2], fh[3]]);
        assert_eq!((fh[0], fh[1], (word & !7) as usize, word & 1 == 1), (50, 0, off, k == 0), "fragment {k}");
        assert!(k == 1 || (ip.len() - 48) % 8 == 0, "a non-last fragment carries a multiple of 8 bytes");
        let id = u32::from_be_bytes([fh[4], fh[5], fh[6], fh[7]]);
        assert_eq!(*ident.get_or_insert(id), id, "one identification");
        if k == 0 {
            assert_eq!(&ip[48..52], &spi.to_be_bytes(), "the ESP header in the first");
        }
        off += ip.len() - 48;
    }
}

#[test]
fn a_port_mtu_below_ipv6s_minimum_fragments_the_outer_packet() {
    // gw0's outside port carries at most 1300 bytes: 1246 of IPv6 inner in
    // SA 1001 (IPv4 outer), 1226 in SA 1101 (IPv6 outer).
    let cfg = edited_config("ep0-v6.toml", "v6-min", |t| t.replacen("name = \"outside\"\n", "name = \"outside\"\nmtu = 1300\n", 1));
    let mut gw0 = Gw::from_config(&cfg);
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    let big = v6_from_host_a(1281, 4001);
    assert_eq!(ptb_mtu(&gw0.push("inside", std::slice::from_ref(&big)), &big), 1280);
    // 1280 bytes: one ESP packet with DF clear, fragmented to the port's
    // MTU after encryption (RFC 4213 §3.2); gw1 reassembles and opens it.
    let p = v6_from_host_a(1280, 4001);
    let out = gw0.push("inside", std::slice::from_ref(&p));
    assert_eq!(out.len(), 2, "{:?}", out.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>());
    let mut payload = 0;
    for (k, (port, f)) in out.iter().enumerate() {
        let ip = &f[14..];
        assert_eq!((port.as_str(), ip[9]), ("outside", 50));
        assert!(ip.len() <= 1300, "fragment {k}: {} bytes", ip.len());
        assert_eq!(ip_checksum(&ip[..20]), 0);
        let ff = u16::from_be_bytes([ip[6], ip[7]]);
        assert_eq!(ff & 0x4000, 0, "DF clear");
        assert_eq!((ff & 0x2000 != 0, (ff & 0x1fff) as usize * 8), (k == 0, payload), "MF and offset of fragment {k}");
        payload += ip.len() - 20;
    }
    assert_eq!(payload, 1280 + 4 + OVERHEAD4 - 20);
    assert_eq!(gw0.stats().frags_sent, 2);
    assert_delivered_v6(&gw1.push("outside", &[out[0].1.clone(), out[1].1.clone()]), &p);
    // SA 1101 (IPv6 outer): gw0, the outer packet's source, fragments it
    // (RFC 2473 §7.1); a bigger packet is told 1280.
    let p = v6_from_host_a(1280, 5001);
    let out = gw0.push("inside", std::slice::from_ref(&p));
    assert_outer_v6_fragments(&out, 1300, 1101);
    assert_delivered_v6(&gw1.push("outside", &[out[0].1.clone(), out[1].1.clone()]), &p);
    let big = v6_from_host_a(1281, 5001);
    assert_eq!(ptb_mtu(&gw0.push("inside", std::slice::from_ref(&big)), &big), 1280);
    let out = gw0.push("inside", &[v6_from_host_a(fits(1300, 72), 5001)]);
    assert_eq!((out.len(), out[0].0.as_str(), out[0].1.len() - 14), (1, "outside", 1300), "what fits goes whole");
    assert_eq!(out[0].1[14 + 6], 50, "no Fragment header");
    assert_eq!(gw0.drop_count("mtu_exceeded"), 2);
    assert_eq!(gw0.stats().frags_sent, 4);
    let _ = std::fs::remove_file(cfg);
    // The same when SA 1001 belongs to another worker than the one that
    // received the packet: the DF decision travels with the handoff.
    let cfg = edited_config("ep0-v6.toml", "v6-min-2w", |t| {
        t.replacen("name = \"outside\"\n", "name = \"outside\"\nmtu = 1300\n", 1)
            .replacen("workers = 1\n", "workers = 2\n", 1)
            .replacen("cores = [0]", "cores = [0, 1]", 1)
            .replacen("spi = 1001\n", "spi = 1001\nworker = 1\n", 1)
    });
    let mut gw0 = Gw::from_config(&cfg);
    let p = v6_from_host_a(1280, 4001);
    let out = gw0.push("inside", std::slice::from_ref(&p));
    assert_eq!(out.len(), 2, "{:?}", out.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>());
    assert!(out.iter().all(|(_, f)| f[14 + 6] & 0x40 == 0 && f.len() - 14 <= 1300));
    let w = gw0.stats().workers;
    assert_eq!((w[0].handoff_out, w[1].handoff_in), (1, 1), "handed to SA 1001's owner");
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml"); // sequence numbers start again
    assert_delivered_v6(&gw1.push("outside", &[out[0].1.clone(), out[1].1.clone()]), &p);
    let _ = std::fs::remove_file(cfg);
    // `df = "set"` on SA 1001 keeps its word: dropped, not fragmented.
    let cfg = edited_config("ep0-v6.toml", "v6-min-dfset", |t| {
        t.replacen("name = \"outside\"\n", "name = \"outside\"\nmtu = 1300\n", 1).replacen("spi = 1001\n", "spi = 1001\ndf = \"set\"\n", 1)
    });
    let mut gw0 = Gw::from_config(&cfg);
    assert!(gw0.push("inside", &[v6_from_host_a(1280, 4001)]).is_empty());
    assert_eq!(gw0.drop_count("mtu_exceeded"), 1);
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn a_decapsulated_packet_too_big_gets_its_error_through_the_tunnel() {
    // gw1's inside port carries at most 1300 bytes; hostA sends 1400 with DF.
    let gw1_cfg = edited_config("ep1.toml", "pmtu-decap", |t| t.replacen("name = \"inside\"\n", "name = \"inside\"\nmtu = 1300\n", 1));
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let mut gw1 = Gw::from_config(&gw1_cfg);
    let big = from_host_a(1400, 5001);
    let esp = gw0.push("inside", std::slice::from_ref(&big));
    assert_eq!(esp[0].0, "outside");
    let back = gw1.push("outside", &[esp[0].1.clone()]);
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0].0, "outside", "the error goes back into the tunnel");
    assert_eq!((back[0].1[14 + 9], &back[0].1[14 + 20..14 + 24]), (50, &1002u32.to_be_bytes()[..]), "in SA 1002's ESP");
    let s1 = gw1.stats();
    assert_eq!((s1.drops["mtu_exceeded"], s1.icmp_sent), (1, 1));
    // gw0 decrypts it and hands hostA a "fragmentation needed" from gw1's
    // inside address, MTU 1300, quoting hostA's header as gw1 got it (TTL
    // 63 after gw0) and 8 bytes.
    let out = gw0.push("outside", &[back[0].1.clone()]);
    assert_eq!((out.len(), out[0].0.as_str()), (1, "inside"), "{out:?}");
    let ip = &out[0].1[14..];
    assert_eq!((ip[9], &ip[12..16], &ip[16..20]), (1, &[198u8, 51, 100, 1][..], &HOST_A.octets()[..]));
    assert_eq!(ip_checksum(&ip[..20]), 0);
    let m = &ip[20..];
    assert_eq!((m[0], m[1], u16::from_be_bytes([m[6], m[7]])), (3, 4, 1300));
    assert_eq!(ip_checksum(m), 0, "ICMP checksum");
    assert_eq!((&m[8 + 12..8 + 20], m[8 + 8]), (&big[14 + 12..14 + 20], 63), "quotes hostA's datagram");
    assert_eq!(&m[8 + 20..8 + 28], &big[14 + 20..14 + 28], "and its UDP header");
    // 1300 bytes pass; DF clear, 1400 are fragmented by gw1 (no error).
    let ok = gw1.push("outside", &[gw0.push("inside", &[from_host_a(1300, 5001)])[0].1.clone()]);
    assert_eq!((ok.len(), ok[0].0.as_str(), ok[0].1.len() - 14), (1, "inside", 1300));
    let mut no_df = from_host_a(1400, 5001);
    no_df[14 + 6] = 0;
    no_df[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&no_df[14..34]);
    no_df[14 + 10..14 + 12].copy_from_slice(&ck.to_be_bytes());
    let frags = gw1.push("outside", &[gw0.push("inside", &[no_df])[0].1.clone()]);
    assert_eq!(frags.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["inside", "inside"]);
    assert_eq!(gw1.stats().icmp_sent, 1);
    let _ = std::fs::remove_file(gw1_cfg);
}

#[test]
fn a_decapsulated_packets_error_goes_only_into_esp_back_to_its_peer() {
    // gw1's inside address outside every policy's prefix: the error (from
    // it) has no PROTECT policy. With a catch-all BYPASS it would leave in
    // the clear, quoting decrypted bytes: dropped either way.
    for (tag, extra) in [("nopolicy", ""), ("bypass", "\n[[policy]]\ndirection = \"outbound\"\nsrc = \"0.0.0.0/0\"\ndst = \"0.0.0.0/0\"\npriority = 1000\naction = \"bypass\"\n")] {
        let gw1_cfg = edited_config("ep1.toml", &format!("pmtu-leak-{tag}"), |t| {
            let t = t.replacen("name = \"inside\"\n", "name = \"inside\"\nmtu = 1300\n", 1).replacen("addresses = [\"198.51.100.1/24\"]", "addresses = [\"198.51.99.1/24\"]", 1);
            format!("{t}{extra}")
        });
        let mut gw0 = Gw::from_config("configs/ep0.toml");
        let mut gw1 = Gw::from_config(&gw1_cfg);
        let esp = gw0.push("inside", &[from_host_a(1400, 5001)]);
        let out = gw1.push("outside", &[esp[0].1.clone()]);
        assert!(out.is_empty(), "{tag}: nothing leaves: {:?}", out.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>());
        let s = gw1.stats();
        assert_eq!((s.drops["mtu_exceeded"], s.drops["tunnel_error_dropped"], s.icmp_sent), (1, 1, 1), "{tag}");
        let _ = std::fs::remove_file(gw1_cfg);
    }
}

#[test]
fn a_quoted_sequence_number_below_first_seq_was_never_sent() {
    let cfg = ep0_sa1001("pmtu-firstseq", "first_seq = 100");
    let (mut gw0, esp) = after_one_packet(&cfg);
    assert_eq!(&esp[24..28], &100u32.to_be_bytes(), "the first packet carries 100");
    let mut older = esp.clone();
    older[24..28].copy_from_slice(&99u32.to_be_bytes());
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &older, 548)]);
    assert_eq!((gw0.drop_count("pmtu_update"), gw0.drop_count("pmtu_ignored")), (0, 1));
    gw0.push("outside", &[frag_needed(GW0_OUT, 1300, &esp, 548)]);
    assert_eq!((gw0.drop_count("pmtu_update"), path_mtu(&gw0, 1001)), (1, Some(1300)));
    let _ = std::fs::remove_file(cfg);
}

/// Ports at the largest `mtu` a packet buffer allows (config
/// `MAX_PORT_MTU`, 1985): the largest inner packet that fits the tunnel
/// crosses it whole (encrypted by gw0 to an ESP packet of at most 1985
/// bytes, decrypted by gw1), one byte more gets "fragmentation needed"
/// with that size; nothing is dropped as `no_room`.
#[test]
fn ports_at_the_largest_mtu_carry_full_size_packets() {
    let mtu = secgw::config::MAX_PORT_MTU as usize;
    assert_eq!(mtu, 1985);
    let wide = |t: String| t.replace("role = \"protected\"", "role = \"protected\"\nmtu = 1985").replace("role = \"unprotected\"", "role = \"unprotected\"\nmtu = 1985");
    let mut gw0 = Gw::from_config(&edited_config("ep0.toml", "mtu1985", wide));
    let mut gw1 = Gw::from_config(&edited_config("ep1.toml", "mtu1985", wide));
    let biggest = fits(mtu, OVERHEAD4);
    let sent = from_host_a(biggest, 9);
    let out = gw0.push("inside", std::slice::from_ref(&sent));
    assert_eq!(out.len(), 1, "{:?}", gw0.stats().drops);
    let esp = &out[0].1;
    assert!(esp.len() - 14 <= mtu && esp.len() - 14 > mtu - 4, "ESP packet of {} bytes", esp.len() - 14);
    let inner = gw1.push("outside", std::slice::from_ref(esp));
    assert_eq!(inner.len(), 1, "{:?}", gw1.stats().drops);
    assert_eq!(inner[0].1.len(), sent.len());
    assert_eq!(&inner[0].1[14 + 20..], &sent[14 + 20..], "UDP header and payload as sent");
    let over = from_host_a(biggest + 1, 9);
    assert_eq!(advertised(&gw0.push("inside", std::slice::from_ref(&over)), &over) as usize, biggest);
    // A frame larger than the port's mtu (the interface's MTU is higher),
    // DF clear: its ESP packet would not fit a packet buffer whole, so the
    // inner packet is fragmented before encryption; both fragments cross.
    let mut big = from_host_a(2030, 9);
    big[14 + 6] = 0; // DF clear
    let ck = ip_checksum(&{
        let mut h = big[14..34].to_vec();
        h[10..12].copy_from_slice(&[0, 0]);
        h
    });
    big[24..26].copy_from_slice(&ck.to_be_bytes());
    let out = gw0.push("inside", &[big]);
    assert_eq!(out.len(), 2, "{:?}", gw0.stats().drops);
    assert!(out.iter().all(|(p, f)| p == "outside" && f[14 + 9] == 50 && f.len() - 14 <= mtu));
    let inner: Vec<_> = out.iter().flat_map(|(_, f)| gw1.push("outside", std::slice::from_ref(f))).collect();
    assert_eq!(inner.len(), 2, "two inner fragments delivered: {:?}", gw1.stats().drops);
    for g in [&gw0, &gw1] {
        assert_eq!(g.drop_count("no_room"), 0);
    }
}
