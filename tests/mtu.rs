//! MTU handling over in-memory ports: ICMP "fragmentation needed" (RFC 792
//! type 3 code 4, next-hop MTU per RFC 1191) for DF packets too big for the
//! tunnel; outer IPv4 fragments (RFC 791) for the others.

mod common;
/// Tests run in parallel: every temp config gets its own file name.
static UNIQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
use common::*;
use std::net::Ipv4Addr;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const GW0_IN: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

/// A UDP packet hostA → hostB of `total` bytes (DF set) on gw0's inside.
fn from_host_a(total: usize) -> Vec<u8> {
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(HOST_A, HOST_B, 0x10, 64, 40000, 5001, &vec![0xabu8; total - 28]))
}

/// ep0.toml with SA 1001 switched to `alg` (key lines replaced), written
/// to a temporary file.
fn ep0_with(alg_lines: &str, tag: &str) -> String {
    let text = std::fs::read_to_string("configs/ep0.toml").unwrap();
    let old = "algorithm = \"aes-128-gcm\"\nkey = \"24d84805d9cc35adcdc5696f6ed3dab836df80aa\"";
    assert!(text.contains(old));
    let text = text.replacen(old, alg_lines, 1);
    let path = std::env::temp_dir().join(format!("secgw-mtu-{}-{}-{tag}.toml", std::process::id(), UNIQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Checks `icmp` (an Ethernet frame) is a "fragmentation needed" error
/// about `orig` (the frame hostA sent) and returns the advertised MTU.
fn check_frag_needed(icmp: &[u8], orig: &[u8]) -> u16 {
    assert_eq!(&icmp[..6], &mac("02:00:00:00:0a:01"), "to hostA's MAC");
    assert_eq!(&icmp[6..12], &mac("02:00:00:00:00:01"), "from the inside port's MAC");
    assert_eq!(&icmp[12..14], &[8, 0]);
    let ip = &icmp[14..];
    assert_eq!(ip[0], 0x45);
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, 20 + 8 + 28, "IP + ICMP + quoted header + 8 bytes");
    assert_eq!(ip.len(), 56);
    assert_eq!(ip[9], 1, "protocol ICMP");
    assert!(ip[8] > 1, "TTL");
    assert_eq!(ip_checksum(&ip[..20]), 0, "header checksum verifies");
    assert_eq!(&ip[12..16], &GW0_IN.octets(), "source: the gateway's address on the receiving port");
    assert_eq!(&ip[16..20], &HOST_A.octets(), "to the inner source");
    let icmp_msg = &ip[20..];
    assert_eq!(icmp_msg[0], 3, "type 3 destination unreachable");
    assert_eq!(icmp_msg[1], 4, "code 4 fragmentation needed and DF set");
    assert_eq!(&icmp_msg[4..6], &[0, 0], "unused");
    assert_eq!(ip_checksum(icmp_msg), 0, "ICMP checksum verifies");
    assert_eq!(&icmp_msg[8..], &orig[14..14 + 28], "quotes the header as sent (TTL 64, checksum) + 8 bytes of payload");
    u16::from_be_bytes([icmp_msg[6], icmp_msg[7]])
}

/// The advertised MTU is exactly the largest inner packet that leaves
/// encrypted: that size passes, one more gets the error again.
fn advertised_mtu_is_exact(cfg: &str, want: u16) {
    let mut gw0 = Gw::from_config(cfg);
    let big = from_host_a(1500);
    let out = gw0.push("inside", std::slice::from_ref(&big));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "inside");
    let m = check_frag_needed(&out[0].1, &big);
    assert_eq!(m, want);
    let out = gw0.push("inside", &[from_host_a(m as usize)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "outside", "{m} bytes fit");
    assert!(out[0].1.len() - 14 <= 1500);
    let plus = from_host_a(m as usize + 1);
    let out = gw0.push("inside", std::slice::from_ref(&plus));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "inside", "{} bytes do not fit", m + 1);
    assert_eq!(check_frag_needed(&out[0].1, &plus), m);
    let s = gw0.stats();
    assert_eq!(s.drops["mtu_exceeded"], 2);
    assert_eq!(s.icmp_sent, 2);
    assert_eq!(s.drops.values().sum::<u64>(), 2);
}

#[test]
fn frag_needed_gcm() {
    // 1500 − (20 + 8 + 8 + 16) = 1448 for inner + pad + 2, 4-aligned: 1446.
    advertised_mtu_is_exact("configs/ep0.toml", 1446);
}

#[test]
fn frag_needed_cbc_rounds_down_to_the_block() {
    // 1500 − (20 + 8 + 16 IV + 16 ICV) = 1440 = 90 blocks of 16: inner + 2 ≤ 1440.
    let cfg = ep0_with(
        "algorithm = \"aes-128-cbc-hmac-sha256\"\nkey = \"000102030405060708090a0b0c0d0e0f\"\nauth_key = \"101112131415161718191a1b1c1d1e1f101112131415161718191a1b1c1d1e1f\"",
        "cbc",
    );
    advertised_mtu_is_exact(&cfg, 1438);
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn no_error_without_df_or_about_an_icmp_error() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    // DF clear: no ICMP (the packet leaves as outer fragments).
    let mut f = from_host_a(1500);
    f[14 + 6] = 0;
    let ck = ip_checksum(&{
        let mut h = f[14..34].to_vec();
        h[10] = 0;
        h[11] = 0;
        h
    });
    f[14 + 10..14 + 12].copy_from_slice(&ck.to_be_bytes());
    assert!(gw0.push("inside", &[f]).iter().all(|(p, _)| p != "inside"));
    assert_eq!(gw0.stats().icmp_sent, 0);
    // An ICMP error (type 3) that is too big: dropped, never answered.
    let mut p = udp_packet(HOST_A, HOST_B, 0, 64, 0, 0, &vec![0u8; 1472]);
    p[9] = 1;
    p[20] = 3;
    p[10] = 0;
    p[11] = 0;
    let ck = ip_checksum(&p[..20]);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    assert!(gw0.push("inside", &[eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &p)]).is_empty());
    assert_eq!(gw0.stats().icmp_sent, 0);
    assert_eq!(gw0.drop_count("mtu_exceeded"), 1, "only the ICMP error; the DF-clear packet was fragmented");
}

#[test]
fn icmp_errors_are_rate_limited() {
    let mut gw0 = Gw::from_config("configs/ep0.toml");
    let frames: Vec<Vec<u8>> = (0..150).map(|_| from_host_a(1500)).collect();
    let out = gw0.push("inside", &frames);
    let s = gw0.stats();
    assert_eq!(s.drops["mtu_exceeded"], 150);
    assert_eq!(s.icmp_sent + s.icmp_rate_limited, 150);
    assert_eq!(out.len() as u64, s.icmp_sent);
    // A burst of 100, plus at most a few tokens refilled while the test ran.
    assert!((100..=120).contains(&s.icmp_sent), "{}", s.icmp_sent);
}

fn clear_df(f: &mut [u8]) {
    f[14 + 6] = 0;
    f[14 + 10] = 0;
    f[14 + 11] = 0;
    let ck = ip_checksum(&f[14..34]);
    f[14 + 10..14 + 12].copy_from_slice(&ck.to_be_bytes());
}

/// Frames a gateway sent: (port name, frame).
type Sent = Vec<(String, Vec<u8>)>;

/// gw0 (ep0.toml, wan MTU 1000, `sa_lines` added to SA 1001) and gw1
/// (ep1.toml); a 1400-byte DF-clear packet from hostA pushed through gw0.
/// Returns (gw0's temp config, gw0, gw1, the frame sent, what gw0 sent).
fn df_clear_1400_at_mtu_1000(tag: &str, sa_lines: &str) -> (std::path::PathBuf, Gw, Gw, Vec<u8>, Sent) {
    let text = std::fs::read_to_string("configs/ep0.toml").unwrap();
    let text = text.replacen("interface = \"gw0-out\"", "interface = \"gw0-out\"\nmtu = 1000", 1).replacen("spi = 1001\n", &format!("spi = 1001\n{sa_lines}"), 1);
    assert!(text.contains(sa_lines));
    let path = std::env::temp_dir().join(format!("secgw-mtu-{}-{tag}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let mut gw0 = Gw::from_config(path.to_str().unwrap());
    let gw1 = Gw::from_config("configs/ep1.toml");
    let mut f = from_host_a(1400);
    clear_df(&mut f);
    let out = gw0.push("inside", std::slice::from_ref(&f));
    (path, gw0, gw1, f, out)
}

#[test]
fn df_clear_leaves_as_fragments_that_reassemble_and_decrypt() {
    let (path, gw0, mut gw1, f, out) = df_clear_1400_at_mtu_1000("frag", "");
    assert_eq!(out.len(), 2, "two fragments");
    assert!(out.iter().all(|(p, _)| p == "outside"));
    let (a, b) = (&out[0].1[14..], &out[1].1[14..]);
    // 1400 inner + 20 + 8 + 8 + 2 + pad 2 + 16 = 1456: 1436 bytes of
    // payload, 976 (the largest multiple of 8 ≤ 1000 − 20) + 460.
    assert_eq!(u16::from_be_bytes([a[2], a[3]]), 996);
    assert_eq!(u16::from_be_bytes([b[2], b[3]]), 20 + 460);
    assert_eq!(u16::from_be_bytes([a[6], a[7]]), 0x2000, "MF, offset 0");
    assert_eq!(u16::from_be_bytes([b[6], b[7]]), 976 / 8, "last: no MF, offset 976/8");
    assert_eq!(a[4..6], b[4..6], "same identification");
    assert_eq!((a[9], b[9]), (50, 50));
    assert_eq!(ip_checksum(&a[..20]), 0);
    assert_eq!(ip_checksum(&b[..20]), 0);
    assert_eq!(&out[0].1[..6], &mac("02:00:00:00:01:02"));
    assert_eq!(&out[1].1[..12], &out[0].1[..12]);
    assert_eq!(gw0.stats().frags_sent, 2);
    assert_eq!(gw0.stats().drops.values().sum::<u64>(), 0);
    // Reassembled by hand (independently of gw1's reassembler), gw1 decrypts it.
    let mut whole = a.to_vec();
    whole.extend_from_slice(&b[20..]);
    let wl = whole.len() as u16;
    whole[2..4].copy_from_slice(&wl.to_be_bytes());
    whole[6] = 0;
    whole[7] = 0;
    whole[10] = 0;
    whole[11] = 0;
    let ck = ip_checksum(&whole[..20]);
    whole[10..12].copy_from_slice(&ck.to_be_bytes());
    let frame = eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x0800, &whole);
    let back = gw1.push("outside", &[frame]);
    assert_eq!(back.len(), 1, "{:?}", gw1.stats().drops);
    assert_eq!(back[0].0, "inside");
    assert_eq!(back[0].1.len(), 14 + 1400);
    assert_eq!(&back[0].1[14 + 28..], &f[14 + 28..], "payload intact");
    // The fragments as they are, last first, at a fresh gw1 (the first one
    // has seen this sequence number): it reassembles them and decrypts.
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let back2 = gw1.push("outside", &[out[1].1.clone(), out[0].1.clone()]);
    assert_eq!(back2.len(), 1, "{:?}", gw1.stats().drops);
    assert_eq!(back2[0].1, back[0].1, "the same inner packet as from the hand-made datagram");
    let s = gw1.stats();
    assert_eq!((s.frags_received, s.reassembled, s.frags_reassembled), (2, 1, 2));
    let _ = std::fs::remove_file(path);
}

/// Random sizes and DF bits through gw0 with the smallest MTU the config
/// allows (576): nothing panics, every frame out fits, fragments carry
/// valid headers, and every packet is accounted for.
#[test]
fn random_sizes_at_mtu_576_are_all_accounted_for() {
    let text = std::fs::read_to_string("configs/ep0.toml").unwrap();
    let text = text.replacen("interface = \"gw0-out\"", "interface = \"gw0-out\"\nmtu = 576", 1);
    let path = std::env::temp_dir().join(format!("secgw-mtu-{}-576.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let mut gw0 = Gw::from_config(path.to_str().unwrap());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let (mut df_big, mut whole, mut fragmented) = (0u64, 0u64, 0u64);
    for _ in 0..300 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let total = 28 + (x >> 33) as usize % (1500 - 28 + 1);
        let df = (x >> 20) & 1 == 1;
        let mut f = from_host_a(total);
        if !df {
            clear_df(&mut f);
        }
        let big = total + 52 + 4 > 576; // GCM overhead 52 + up to 3 pad bytes + 2
        let out = gw0.push("inside", &[f]);
        for (port, fr) in &out {
            let ip = &fr[14..];
            assert!(ip.len() <= 576, "{port}: {} bytes", ip.len());
            assert_eq!(ip_checksum(&ip[..20]), 0);
            assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, ip.len());
        }
        match out.as_slice() {
            [(p, _)] if p == "inside" => df_big += 1,
            [(p, _)] if p == "outside" => whole += 1,
            [] => df_big += 1,
            many => {
                assert!(!df && big, "{total} df={df}");
                assert!(many.iter().all(|(p, _)| p == "outside"));
                let offs: Vec<u16> = many.iter().map(|(_, fr)| u16::from_be_bytes([fr[20], fr[21]])).collect();
                assert_eq!(offs[0], 0x2000);
                assert_eq!(*offs.last().unwrap() & 0x2000, 0, "last fragment has no MF");
                fragmented += 1;
            }
        }
    }
    let s = gw0.stats();
    assert_eq!(df_big + whole + fragmented, 300);
    assert_eq!(s.drops["mtu_exceeded"], df_big);
    assert_eq!(s.icmp_sent + s.icmp_rate_limited, df_big);
    assert_eq!(s.drops.values().sum::<u64>(), df_big);
    assert!(fragmented > 0 && whole > 0 && df_big > 0);
    let _ = std::fs::remove_file(path);
}

/// `df = "set"` on the SA: the outer IPv4 header may not be fragmented,
/// so a DF-clear inner packet too big for the tunnel is fragmented before
/// encryption (RFC 4459 §3), as for an IPv6 outer header: each fragment
/// its own ESP packet with DF set, each decrypting at gw1 (was: encrypted,
/// then dropped as mtu_exceeded after taking a sequence number and being
/// counted as sent).
#[test]
fn df_set_fragments_the_inner_packet_before_encryption() {
    let (path, gw0, mut gw1, f, out) = df_clear_1400_at_mtu_1000("dfset", "df = \"set\"\n");
    assert_eq!(out.len(), 2, "two ESP packets, one per inner fragment: {:?}", gw0.stats().drops);
    for (p, e) in &out {
        let ip = &e[14..];
        assert_eq!(p, "outside");
        assert!(ip.len() <= 1000);
        assert_eq!(u16::from_be_bytes([ip[6], ip[7]]), 0x4000, "outer DF set, not a fragment");
        assert_eq!(ip[9], 50);
    }
    assert_eq!(gw0.stats().drops.values().sum::<u64>(), 0);
    let back = gw1.push("outside", &out.iter().map(|x| x.1.clone()).collect::<Vec<_>>());
    assert_eq!(back.len(), 2, "both decrypt: {:?}", gw1.stats().drops);
    // The inner fragments carry the packet: offsets 0 and the first's length.
    let (a, b) = (&back[0].1[14..], &back[1].1[14..]);
    assert_eq!(u16::from_be_bytes([a[6], a[7]]) & 0x2000, 0x2000, "first inner fragment: MF");
    let first_len = u16::from_be_bytes([a[2], a[3]]) as usize - 20;
    assert_eq!((u16::from_be_bytes([b[6], b[7]]) & 0x1fff) as usize * 8, first_len);
    let mut payload = a[20..].to_vec();
    payload.extend_from_slice(&b[20..]);
    assert_eq!(&payload[8..], &f[14 + 28..], "payload intact across the fragments");
    let _ = std::fs::remove_file(path);
}

/// Bypassed traffic is routed like a router routes it (RFC 1812
/// §4.2.2.5, RFC 1191 §3): configs/bench/bypass.toml with both ports at
/// MTU 1000 and an inbound bypass policy. Too big with DF set, either
/// direction: "fragmentation needed" advertising the egress port's MTU,
/// from the receiving port's address, quoting the header as received
/// (TTL 64, before the decrement); exactly the MTU passes; DF clear
/// leaves as fragments, no error.
#[test]
fn bypassed_packets_too_big_get_frag_needed_with_the_port_mtu() {
    let cfg = edited_config("bench/bypass.toml", "bypass-mtu", |t| {
        assert_eq!(t.matches("mtu = 1600").count(), 2);
        t.replace("mtu = 1600", "mtu = 1000")
            + "\n[[policy]]\ndirection = \"inbound\"\nsrc = \"198.51.100.0/24\"\ndst = \"192.0.2.0/24\"\npriority = 10\naction = \"bypass\"\n"
    });
    let mut gw = Gw::from_config(&cfg);
    let _ = std::fs::remove_file(&cfg);
    // Outbound (inside → outside).
    let big = from_host_a(1001);
    let out = gw.push("inside", std::slice::from_ref(&big));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "inside");
    assert_eq!(check_frag_needed(&out[0].1, &big), 1000, "the egress port's MTU");
    let fits = from_host_a(1000);
    let out = gw.push("inside", std::slice::from_ref(&fits));
    assert_eq!((out.len(), out[0].0.as_str()), (1, "outside"));
    assert_eq!(out[0].1[14 + 8], 63, "TTL decremented once");
    let mut clear = from_host_a(1400);
    clear_df(&mut clear);
    let out = gw.push("inside", &[clear]);
    assert_eq!(out.len(), 2, "DF clear: two fragments");
    assert!(out.iter().all(|(p, f)| p == "outside" && f.len() - 14 <= 1000));
    // Inbound (outside → inside): the error leaves by the outside port,
    // from its address, to the sender.
    let sink_mac = mac("02:00:00:00:0b:01");
    let back = eth(mac("02:00:00:00:00:02"), sink_mac, 0x0800, &udp_packet(HOST_B, HOST_A, 0, 64, 5001, 40000, &[0x5a; 1001 - 28]));
    let out = gw.push("outside", std::slice::from_ref(&back));
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, icmp) = (&out[0].0, &out[0].1);
    assert_eq!(port, "outside");
    assert_eq!((&icmp[..6], &icmp[6..12]), (&sink_mac[..], &mac("02:00:00:00:00:02")[..]));
    let ip = &icmp[14..];
    assert_eq!((ip[9], ip[20], ip[21]), (1, 3, 4), "ICMP type 3 code 4");
    assert_eq!(&ip[12..16], &[203, 0, 113, 1], "from the outside port's address");
    assert_eq!(&ip[16..20], &HOST_B.octets());
    assert_eq!(ip_checksum(&ip[20..]), 0, "ICMP checksum verifies");
    assert_eq!(u16::from_be_bytes([ip[26], ip[27]]), 1000);
    assert_eq!(&ip[28..], &back[14..14 + 28], "quotes the header as received + 8 bytes");
    let s = gw.stats();
    assert_eq!((s.drops["mtu_exceeded"], s.icmp_sent), (2, 2));
    assert_eq!(s.drops.values().sum::<u64>(), 2);
}
