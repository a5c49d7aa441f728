//! IPv6 through the whole pipeline over in-memory ports, with
//! configs/ep0-v6.toml (gw0) and configs/ep1-v6.toml (gw1): tunnel mode in
//! the four inner/outer combinations (RFC 4303 §3.1.2), the outer header
//! rules (RFC 4301 §5.1.2.1, RFC 6040, RFC 8200), hop limits, ICMPv6 Packet
//! Too Big (RFC 4443 §3.2), inner IPv4 fragmentation before an IPv6 outer
//! header (RFC 4459 §3), Neighbor Discovery (RFC 4861 §7.2.4), ESP after
//! extension headers and ESP in UDP over IPv6 (RFC 3948, RFC 8200 §8.1).
//!
//! Packets, checksums and GCM ESP are built and opened here by hand (and
//! with the `aes-gcm` crate), never with the gateway's own builders.

mod common;
use common::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const A4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const B4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x10);
const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 0x10);
const GW0_IN6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1);
const OUT0_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
const OUT1_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 2);
const OUT0_4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const OUT1_4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);
const A_MAC: &str = "02:00:00:00:0a:01";
const B_MAC: &str = "02:00:00:00:0b:01";
const GW0_IN_MAC: &str = "02:00:00:00:00:01";
const GW0_OUT_MAC: &str = "02:00:00:00:00:02";
const GW1_OUT_MAC: &str = "02:00:00:00:01:02";
/// SA 1101's key in ep0-v6/ep1-v6 (v6 outer, hostA → hostB).
const KEY_1101: &str = "6b1f4e0c2d9a8b7c6d5e4f30211203f4a5b6c7d8";
/// SA 1001's key (v4 outer, hostA → hostB).
const KEY_1001: &str = "24d84805d9cc35adcdc5696f6ed3dab836df80aa";

// ---- hand-built packets ------------------------------------------------------

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1).
fn pseudo(src: &Ipv6Addr, dst: &Ipv6Addr, len: usize, nh: u8) -> u32 {
    let mut ph = Vec::new();
    ph.extend_from_slice(&src.octets());
    ph.extend_from_slice(&dst.octets());
    ph.extend_from_slice(&(len as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, nh]);
    sum(&ph, 0)
}

/// True if the upper-layer message `msg` verifies over the pseudo-header.
fn l4_checksum_ok(src: &Ipv6Addr, dst: &Ipv6Addr, nh: u8, msg: &[u8]) -> bool {
    sum(msg, pseudo(src, dst, msg.len(), nh)) == 0xffff
}

fn ipv6_header(tc: u8, plen: usize, nh: u8, hlim: u8, src: &Ipv6Addr, dst: &Ipv6Addr) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60 | (tc >> 4);
    h[1] = tc << 4;
    h[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
    h[6] = nh;
    h[7] = hlim;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h
}

/// IPv6/UDP packet with a valid checksum.
fn udp6(src: Ipv6Addr, dst: Ipv6Addr, tc: u8, hlim: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let ck = !(sum(&u, pseudo(&src, &dst, u.len(), 17)) as u16);
    u[6..8].copy_from_slice(&(if ck == 0 { 0xffff } else { ck }).to_be_bytes());
    let mut p = ipv6_header(tc, u.len(), 17, hlim, &src, &dst);
    p.extend_from_slice(&u);
    p
}

fn payload(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7) ^ salt).collect()
}

/// A frame from hostA to gw0's inside port.
fn from_a(ip: &[u8]) -> Vec<u8> {
    let et = if ip[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    eth(mac(GW0_IN_MAC), mac(A_MAC), et, ip)
}

/// IPv4/UDP A → B with DF as given (common::udp_packet sets DF).
fn udp4(tos: u8, ttl: u8, dport: u16, payload: &[u8], df: bool) -> Vec<u8> {
    let mut p = udp_packet(A4, B4, tos, ttl, 40000, dport, payload);
    if !df {
        p[6] = 0;
        p[10..12].copy_from_slice(&[0, 0]);
        let ck = ip_checksum(&p[..20]);
        p[10..12].copy_from_slice(&ck.to_be_bytes());
    }
    p
}

/// Opens GCM ESP by hand (`aes-gcm`, common::open_gcm128) and checks the
/// padding; returns (inner packet, next header).
fn open_gcm(key_hex: &str, esp: &[u8]) -> (Vec<u8>, u8) {
    let mut plain = open_gcm128(&hex::decode(key_hex).unwrap(), esp);
    let nh = plain[plain.len() - 1];
    let pad = plain[plain.len() - 2] as usize;
    assert_eq!(&plain[plain.len() - 2 - pad..plain.len() - 2], &(1..=pad as u8).collect::<Vec<u8>>()[..], "padding 1, 2, …");
    plain.truncate(plain.len() - 2 - pad);
    (plain, nh)
}

/// SA 1101's ESP (sealed by hand) of `inner` with next header `nh`, in an
/// IPv6 outer header gw0 → gw1, as it arrives at gw1.
fn esp6_to_gw1(seq: u32, inner: &[u8], nh: u8) -> Vec<u8> {
    let esp = seal_gcm128(&hex::decode(KEY_1101).unwrap(), 1101, seq as u64, false, inner, nh);
    let mut ip = ipv6_header(0, esp.len(), 50, 64, &OUT0_6, &OUT1_6);
    ip.extend_from_slice(&esp);
    frame_to_gw1(&ip)
}

/// The frame of `ip` (an IPv4 or IPv6 ESP packet gw0 → gw1) as it arrives
/// at gw1.
fn frame_to_gw1(ip: &[u8]) -> Vec<u8> {
    let et = if ip[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    eth(mac(GW1_OUT_MAC), mac(GW0_OUT_MAC), et, ip)
}

/// `inner` with its TTL / hop limit decremented `hops` times (IPv4
/// checksum recomputed): what a router forwards.
fn after_hops(inner: &[u8], hops: u8) -> Vec<u8> {
    let mut p = inner.to_vec();
    if p[0] >> 4 == 6 {
        p[7] -= hops;
    } else {
        p[8] -= hops;
        p[10..12].copy_from_slice(&[0, 0]);
        let ck = ip_checksum(&p[..20]);
        p[10..12].copy_from_slice(&ck.to_be_bytes());
    }
    p
}

// ---- configs ----------------------------------------------------------------

/// ep0-v6 / ep1-v6 with SAs 1001 and 1101 switched to `alg` (keys derived
/// here), and `extra` edits (from, to; first occurrence) applied to both.
fn configs_with(alg: &str, extra: &[(&str, &str)]) -> (String, String) {
    let hexkey = |n: usize, seed: u8| (0..n).map(|i| format!("{:02x}", (i as u8).wrapping_mul(29) ^ seed)).collect::<String>();
    let a = secgw::config::Algorithm::ALL.into_iter().find(|a| a.name() == alg).unwrap();
    let klen = secgw::config::model::key_material_len(a);
    let mut out = Vec::new();
    for file in ["ep0-v6.toml", "ep1-v6.toml"] {
        let mut text = std::fs::read_to_string(format!("configs/{file}")).unwrap();
        for (spi_key, seed) in [(KEY_1001, 0x31u8), (KEY_1101, 0x52)] {
            let old = format!("algorithm = \"aes-128-gcm\"\nkey = \"{spi_key}\"");
            assert_eq!(text.matches(&old).count(), 1, "{file}");
            let mut lines = format!("algorithm = \"{alg}\"");
            if klen > 0 {
                lines += &format!("\nkey = \"{}\"", hexkey(klen, seed));
            }
            if let Some((_, n)) = secgw::config::model::auth(a) {
                lines += &format!("\nauth_key = \"{}\"", hexkey(n, seed ^ 0xff));
            }
            text = text.replacen(&old, &lines, 1);
        }
        for (from, to) in extra {
            assert!(text.contains(from), "{file}: {from}");
            text = text.replacen(from, to, 1);
        }
        out.push(temp_config("ipv6", file, &text));
    }
    (out.remove(0), out.remove(0))
}

fn pair(alg: &str, extra: &[(&str, &str)]) -> (Gw, Gw) {
    let (c0, c1) = configs_with(alg, extra);
    let g = (Gw::from_config(&c0), Gw::from_config(&c1));
    let _ = std::fs::remove_file(c0);
    let _ = std::fs::remove_file(c1);
    g
}

/// (IV, ICV, alignment) of an algorithm (RFC 4106/4543/7634/3602/3686/2410).
fn geometry(alg: &str) -> (usize, usize, usize) {
    match alg {
        n if n.starts_with("null") => (0, if n.ends_with("sha1") { 12 } else { 16 }, 4),
        n if n.contains("-cbc-") => (16, if n.ends_with("sha1") { 12 } else { 16 }, 16),
        n if n.ends_with("sha1") => (8, 12, 4),
        _ => (8, 16, 4),
    }
}

// ---- the four combinations ----------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Combo {
    V4in4,
    V6in4,
    V4in6,
    V6in6,
}

impl Combo {
    const ALL: [Combo; 4] = [Combo::V4in4, Combo::V6in4, Combo::V4in6, Combo::V6in6];
    fn inner_v6(self) -> bool {
        matches!(self, Combo::V6in4 | Combo::V6in6)
    }
    fn outer_v6(self) -> bool {
        matches!(self, Combo::V4in6 | Combo::V6in6)
    }
    /// UDP destination port ep0-v6's policies send this way.
    fn dport(self) -> u16 {
        match self {
            Combo::V4in4 | Combo::V6in6 => 5001,
            Combo::V6in4 => 4001,
            Combo::V4in6 => 6001,
        }
    }
    fn spi(self) -> u32 {
        if self.outer_v6() {
            1101
        } else {
            1001
        }
    }
    /// hostA's packet of this combination.
    fn inner(self, tc: u8, hops: u8, payload: &[u8]) -> Vec<u8> {
        if self.inner_v6() {
            udp6(A6, B6, tc, hops, 40000, self.dport(), payload)
        } else {
            udp4(tc, hops, self.dport(), payload, true)
        }
    }
}

/// Checks gw0's ESP frame `f` for `combo` against `inner` (as hostA sent
/// it): outer header fields, ESP geometry; returns the outer IP packet.
fn check_outer(combo: Combo, alg: &str, f: &[u8], inner: &[u8]) -> Vec<u8> {
    assert_eq!(&f[..6], &mac(GW1_OUT_MAC), "{combo:?}: to gw1's MAC");
    let ip = f[14..].to_vec();
    let inner_tc = if inner[0] >> 4 == 6 { (inner[0] << 4) | (inner[1] >> 4) } else { inner[1] };
    let (esp_at, proto) = if combo.outer_v6() {
        assert_eq!(&f[12..14], &[0x86, 0xdd], "{combo:?}: EtherType IPv6");
        assert_eq!(ip[0] >> 4, 6);
        assert_eq!((ip[0] << 4) | (ip[1] >> 4), inner_tc, "{combo:?}: traffic class = inner DS + ECN (RFC 4301 §5.1.2.1, RFC 6040)");
        assert_eq!(u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]]) & 0xfffff, 0, "flow label 0");
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]) as usize, ip.len() - 40, "payload length");
        assert_eq!(ip[7], 64, "hop limit = outer_ttl");
        assert_eq!(&ip[8..24], &OUT0_6.octets());
        assert_eq!(&ip[24..40], &OUT1_6.octets());
        (40, ip[6])
    } else {
        assert_eq!(&f[12..14], &[0x08, 0x00], "{combo:?}: EtherType IPv4");
        assert_eq!(ip[0], 0x45);
        assert_eq!(ip_checksum(&ip[..20]), 0, "outer checksum");
        assert_eq!(ip[1], inner_tc, "{combo:?}: TOS = inner DS + ECN");
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, ip.len());
        assert_eq!(ip[8], 64);
        assert_eq!(ip[6] & 0x40, 0x40, "{combo:?}: DF copied (an IPv6 inner packet counts as DF)");
        assert_eq!(&ip[12..16], &OUT0_4.octets());
        assert_eq!(&ip[16..20], &OUT1_4.octets());
        (20, ip[9])
    };
    assert_eq!(proto, 50, "{combo:?}: ESP");
    assert_eq!(u32::from_be_bytes(ip[esp_at..esp_at + 4].try_into().unwrap()), combo.spi(), "{combo:?}: SPI");
    let (iv, icv, align) = geometry(alg);
    let enc = ip.len() - esp_at - 8 - iv - icv;
    assert_eq!(enc % align, 0, "{combo:?} {alg}");
    assert!(enc >= inner.len() + 2 && enc < inner.len() + 2 + align, "{combo:?} {alg}: padding");
    ip
}

/// Every combination × six algorithms × sizes: gw0's ESP has the right
/// outer header and geometry; with GCM it opens by hand to exactly the
/// inner packet (hop −1) with next header 4 or 41; gw1 decrypts it and
/// hostB gets the inner packet (hop −2).
#[test]
fn four_combinations_end_to_end() {
    for alg in ["aes-128-gcm", "aes-256-cbc-hmac-sha256", "chacha20-poly1305", "null-hmac-sha1", "aes-128-gmac", "aes-128-ctr-hmac-sha1"] {
        let (mut gw0, mut gw1) = pair(alg, &[]);
        for combo in Combo::ALL {
            for size in [0usize, 1, 63, 64, 1000] {
                let inner = combo.inner(0x28, 64, &payload(size, size as u8));
                let out = gw0.push("inside", &[from_a(&inner)]);
                assert_eq!(out.len(), 1, "{alg} {combo:?} {size}: {out:?}");
                assert_eq!(out[0].0, "outside");
                check_outer(combo, alg, &out[0].1, &inner);
                let back = gw1.push("outside", &[out[0].1.clone()]);
                assert_eq!(back.len(), 1, "{alg} {combo:?} {size}: gw1 forwards one frame");
                let (port, f) = &back[0];
                assert_eq!(port, "inside");
                assert_eq!(&f[..6], &mac(B_MAC));
                assert_eq!(&f[12..14], if combo.inner_v6() { &[0x86u8, 0xdd][..] } else { &[8u8, 0][..] });
                assert_eq!(&f[14..], &after_hops(&inner, 2)[..], "{alg} {combo:?} {size}: hostB gets the inner packet");
            }
        }
        let (s0, s1) = (gw0.stats(), gw1.stats());
        assert_eq!(s0.drops.values().sum::<u64>() + s1.drops.values().sum::<u64>(), 0, "{alg}: no drops {:?} {:?}", s0.drops, s1.drops);
    }
}

/// GCM ESP from gw0 opened by hand (not with the gateway's code): the
/// trailer's next header is 4 for IPv4 and 41 for IPv6 inner packets, and
/// the inner packet is what hostA sent, hop −1.
#[test]
fn gcm_opened_by_hand_next_header_4_or_41() {
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    for combo in Combo::ALL {
        let inner = combo.inner(0, 64, b"opened by hand");
        let out = gw0.push("inside", &[from_a(&inner)]);
        let ip = check_outer(combo, "aes-128-gcm", &out[0].1, &inner);
        let esp = &ip[if combo.outer_v6() { 40 } else { 20 }..];
        let (got, nh) = open_gcm(if combo.outer_v6() { KEY_1101 } else { KEY_1001 }, esp);
        assert_eq!(nh, if combo.inner_v6() { 41 } else { 4 }, "{combo:?}");
        assert_eq!(got, after_hops(&inner, 1), "{combo:?}");
    }
}

/// ESP sealed by hand (aes-gcm crate) in an IPv6 outer header decrypts at
/// gw1, with IPv6 or IPv4 inside; an IPv4 packet under next header 41 (or
/// IPv6 under 4) is `bad_inner`, next header 6 is `bad_next_header`.
#[test]
fn handmade_esp_in_ipv6_decrypts_and_wrong_families_are_refused() {
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    let mk = esp6_to_gw1;
    let v6 = udp6(A6, B6, 0, 63, 40000, 5001, b"by hand");
    let v4 = udp4(0, 63, 6001, b"by hand", true);
    let out = gw1.push("outside", &[mk(1, &v6, 41), mk(2, &v4, 4)]);
    assert_eq!(out.len(), 2, "{:?}", gw1.stats().drops);
    assert_eq!(out[0].1[14..], after_hops(&v6, 1)[..]);
    assert_eq!(out[1].1[14..], after_hops(&v4, 1)[..]);
    assert!(gw1.push("outside", &[mk(3, &v4, 41), mk(4, &v6, 4)]).is_empty());
    assert_eq!(gw1.drop_count("bad_inner"), 2);
    assert!(gw1.push("outside", &[mk(5, &v6, 6)]).is_empty());
    assert_eq!(gw1.drop_count("bad_next_header"), 1);
    // Outer endpoints must be the SA's: from another IPv6 source → no_sa.
    let esp = seal_gcm128(&hex::decode(KEY_1101).unwrap(), 1101, 6, false, &v6, 41);
    let mut ip = ipv6_header(0, esp.len(), 50, 64, &Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 9), &OUT1_6);
    ip.extend_from_slice(&esp);
    assert!(gw1.push("outside", &[frame_to_gw1(&ip)]).is_empty());
    assert_eq!(gw1.drop_count("no_sa"), 1);
}

/// ESP found after Hop-by-Hop, Destination Options and Routing headers
/// (RFC 4303 §3.1.1, RFC 8200 §4) decrypts; an atomic fragment (Fragment
/// header, offset 0, M clear, RFC 6946) is processed whole; a real outer
/// fragment goes to the reassembler (held, not dropped); a broken chain is
/// `malformed`.
#[test]
fn inbound_esp_after_extension_headers() {
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    let inner = Combo::V6in6.inner(0, 64, b"after extension headers");
    let mut frames = Vec::new();
    for _ in 0..5 {
        frames.push(gw0.push("inside", &[from_a(&inner)]).remove(0).1);
    }
    // Insert `ext` (a chain ending with next header 50) after the fixed header.
    let with = |f: &[u8], first: u8, ext: &[u8]| {
        let mut ip = f[14..54].to_vec();
        ip[6] = first;
        let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize + ext.len();
        ip[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
        ip.extend_from_slice(ext);
        ip.extend_from_slice(&f[54..]);
        frame_to_gw1(&ip)
    };
    // HBH (PadN 6) → DstOpt (PadN 6) → Routing type 0, segments left 0 (one address) → ESP
    let mut chain = vec![60, 0, 1, 4, 0, 0, 0, 0, 43, 0, 1, 4, 0, 0, 0, 0, 50, 2, 0, 0, 0, 0, 0, 0];
    chain.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 9).octets());
    let out = gw1.push("outside", &[with(&frames[0], 0, &chain)]);
    assert_eq!(out.len(), 1, "{:?}", gw1.stats().drops);
    assert_eq!(out[0].1[14..], after_hops(&inner, 2)[..]);
    let out = gw1.push("outside", &[with(&frames[1], 60, &[50, 0, 1, 4, 0, 0, 0, 0])]);
    assert_eq!(out.len(), 1);
    // Atomic fragment (offset 0, M clear): not a fragment, decrypted as it is.
    let out = gw1.push("outside", &[with(&frames[2], 44, &[50, 0, 0, 0, 0, 0, 0, 7])]);
    assert_eq!(out.len(), 1, "{:?}", gw1.stats().drops);
    assert_eq!(out[0].1[14..], after_hops(&inner, 2)[..]);
    // Fragment header, offset 0, M set, data cut to a multiple of 8 bytes:
    // a first fragment of ESP to us, held by the reassembler.
    let mut first = with(&frames[4], 44, &[50, 0, 0, 1, 0, 0, 0, 7]);
    let data = (first.len() - 14 - 48) / 8 * 8;
    first.truncate(14 + 48 + data);
    first[14 + 4..14 + 6].copy_from_slice(&(8 + data as u16).to_be_bytes());
    assert!(gw1.push("outside", &[first]).is_empty());
    assert_eq!((gw1.stats().frags_received, gw1.stats().frags_pending), (1, 1));
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0);
    // Destination options header claiming more bytes than there are.
    let mut bad = with(&frames[3], 60, &[50, 0, 1, 4, 0, 0, 0, 0]);
    bad[14 + 41] = 200;
    assert!(gw1.push("outside", &[bad]).is_empty());
    assert_eq!(gw1.drop_count("malformed"), 1);
    // Hop-by-hop after another header.
    let hbh_late = with(&frames[3], 60, &[0, 0, 1, 4, 0, 0, 0, 0, 50, 0, 1, 4, 0, 0, 0, 0]);
    assert!(gw1.push("outside", &[hbh_late]).is_empty());
    assert_eq!(gw1.drop_count("malformed"), 2);
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 2);
}

/// Options of the Hop-by-Hop and Destination Options headers in ESP to
/// the gateway (RFC 8200 §4.2; helper-99 saw every one of these
/// decrypted): an unrecognized option is passed over only with action bits
/// 00; 01 drops the packet as `ipv6_option`, 10 and 11 also send an ICMPv6
/// Parameter Problem (RFC 4443 §3.4: code 2, pointer = the option's type
/// byte) back; an option running past its header is code 0 pointing at its
/// length byte; a Jumbo Payload option (no packet here is a jumbogram, RFC
/// 2675 §3) is code 0 at its type byte. Known options (PadN, Router Alert,
/// Tunnel Encapsulation Limit) pass. Forwarded packets' options are not
/// read (a router passes them over).
#[test]
fn ipv6_options_of_packets_to_the_gateway_are_honoured() {
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    let inner = Combo::V6in6.inner(0, 64, b"behind options");
    let frames: Vec<Vec<u8>> = (0..9).map(|_| gw0.push("inside", &[from_a(&inner)]).remove(0).1).collect();
    // The ESP packet with an 8-byte header `first` (next header 50, length
    // 0, then the 6 option bytes `opts`) after the fixed header.
    let with = |f: &[u8], first: u8, opts: [u8; 6]| {
        let mut ip = f[14..54].to_vec();
        ip[6] = first;
        let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize + 8;
        ip[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
        ip.extend_from_slice(&[50, 0]);
        ip.extend_from_slice(&opts);
        ip.extend_from_slice(&f[54..]);
        frame_to_gw1(&ip)
    };
    // Passed over: unknown with 00, PadN, Router Alert (HBH), Tunnel
    // Encapsulation Limit (Destination Options).
    for (k, (first, opts)) in [(60, [0x1e, 4, 0, 0, 0, 0]), (0, [5, 2, 0, 0, 1, 0]), (60, [4, 1, 4, 1, 0, 0])].into_iter().enumerate() {
        let out = gw1.push("outside", &[with(&frames[k], first, opts)]);
        assert_eq!(out.len(), 1, "case {k}: {:?}", gw1.stats().drops);
        assert_eq!((out[0].0.as_str(), &out[0].1[14..]), ("inside", &after_hops(&inner, 2)[..]));
    }
    // 01: dropped, nothing sent.
    assert!(gw1.push("outside", &[with(&frames[3], 60, [0x5e, 4, 0, 0, 0, 0])]).is_empty());
    assert_eq!((gw1.drop_count("ipv6_option"), gw1.stats().icmp_sent), (1, 0));
    // 10, 11, past its header, Jumbo Payload: a Parameter Problem to gw0.
    let cases = [(0, [0x9e, 4, 0, 0, 0, 0], 2u8, 42u32), (60, [1, 0, 0xde, 2, 0, 0], 2, 44), (60, [1, 0, 0x1e, 9, 0, 0], 0, 45), (0, [0xc2, 4, 0, 0, 5, 0], 0, 42)];
    for (k, (first, opts, code, pointer)) in cases.into_iter().enumerate() {
        let sent = with(&frames[4 + k], first, opts);
        let out = gw1.push("outside", std::slice::from_ref(&sent));
        assert_eq!(out.len(), 1, "case {k}: one error: {:?}", gw1.stats().drops);
        let (port, f) = (&out[0].0, &out[0].1[14..]);
        assert_eq!(port, "outside");
        assert_eq!((f[6], &f[8..24], &f[24..40]), (58, &OUT1_6.octets()[..], &OUT0_6.octets()[..]), "ICMPv6 gw1 → gw0");
        assert_eq!((f[40], f[41], u32::from_be_bytes(f[44..48].try_into().unwrap())), (4, code, pointer), "case {k}: type, code, pointer");
        assert!(l4_checksum_ok(&OUT1_6, &OUT0_6, 58, &f[40..]), "checksum");
        assert_eq!(&f[48..], &sent[14..], "the packet quoted whole");
    }
    let s = gw1.stats();
    assert_eq!((s.drops["ipv6_option"], s.icmp_sent), (5, 4), "{:?}", s.drops);
    // Forwarded: an unknown 01 option in plaintext from hostA to hostB is
    // not gw0's to read; it is protected and sent.
    let mut fwd = inner[..40].to_vec();
    fwd[6] = 60;
    fwd[4..6].copy_from_slice(&((inner.len() - 40 + 8) as u16).to_be_bytes());
    fwd.extend_from_slice(&[inner[6], 0, 0x5e, 4, 0, 0, 0, 0]);
    fwd.extend_from_slice(&inner[40..]);
    let out = gw0.push("inside", &[from_a(&fwd)]);
    assert_eq!((out.len(), out[0].0.as_str()), (1, "outside"), "{:?}", gw0.stats().drops);
}

/// Outer traffic class = inner DS + ECN on encapsulation (both outer
/// families); on decapsulation the outer ECN is folded in (RFC 6040 §4.2)
/// and the outer DSCP is not copied back (RFC 4301 §5.1.2.1); outer CE over
/// a Not-ECT inner packet is dropped.
#[test]
fn dscp_and_ecn_both_families() {
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    for combo in Combo::ALL {
        for (tc, outer_ecn, want_ecn) in [(0xb9u8, 3u8, Some(3u8)), (0xb8, 3, None), (0xba, 1, Some(1)), (0x29, 0, Some(1))] {
            let inner = combo.inner(tc, 64, b"ecn");
            let f = gw0.push("inside", &[from_a(&inner)]).remove(0).1;
            check_outer(combo, "aes-128-gcm", &f, &inner);
            // On the way the outer DSCP is rewritten to 0 and the ECN field set.
            let mut f = f;
            if combo.outer_v6() {
                let tc2 = outer_ecn;
                f[14] = 0x60 | (tc2 >> 4);
                f[15] = (tc2 << 4) | (f[15] & 0x0f);
            } else {
                f[15] = outer_ecn;
                f[24..26].copy_from_slice(&[0, 0]);
                let ck = ip_checksum(&f[14..34]);
                f[24..26].copy_from_slice(&ck.to_be_bytes());
            }
            let back = gw1.push("outside", &[f]);
            match want_ecn {
                None => assert!(back.is_empty(), "{combo:?} tc {tc:#x}: CE over Not-ECT dropped"),
                Some(e) => {
                    let ip = &back[0].1[14..];
                    let got = if combo.inner_v6() { (ip[0] << 4) | (ip[1] >> 4) } else { ip[1] };
                    assert_eq!(got, (tc & !3) | e, "{combo:?} tc {tc:#x} outer ECN {outer_ecn}");
                    if !combo.inner_v6() {
                        assert_eq!(ip_checksum(&ip[..20]), 0);
                    }
                }
            }
        }
    }
    assert_eq!(gw1.drop_count("ecn_ce_on_not_ect"), 4);
}

/// Inner IPv6 forwarding decrements the hop limit once per gateway; hop
/// limit ≤ 1 is `ttl_exceeded` on either gateway, and its source hears so
/// (ICMPv6 Time Exceeded, RFC 4443 §3.3: type 3, code 0, quoting the
/// packet): from gw0's inside address straight back; from gw1's inside
/// address into the tunnel it came through, back to gw0, which decrypts it
/// to hostA (only when the outbound SPD sends it into that tunnel).
#[test]
fn hop_limit() {
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    const GW1_IN6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 1);
    let check = |f: &[u8], from: &Ipv6Addr, quoted: &[u8]| {
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        let ip = &f[14..];
        assert_eq!((ip[6], &ip[8..24], &ip[24..40]), (58, &from.octets()[..], &A6.octets()[..]));
        let msg = &ip[40..];
        assert_eq!((msg[0], msg[1], &msg[4..8]), (3, 0, &[0u8; 4][..]), "type 3 Time Exceeded, code 0");
        assert!(l4_checksum_ok(from, &A6, 58, msg), "ICMPv6 checksum (RFC 4443 §2.3)");
        assert_eq!(&msg[8..], quoted, "quotes the packet as it arrived");
    };
    for combo in [Combo::V6in6, Combo::V6in4] {
        let inner = combo.inner(0, 1, b"x");
        let out = gw0.push("inside", &[from_a(&inner)]);
        assert_eq!(out.len(), 1, "{combo:?}");
        assert_eq!(out[0].0, "inside");
        check(&out[0].1, &GW0_IN6, &inner);
        let inner = combo.inner(0, 2, b"x");
        let f = gw0.push("inside", &[from_a(&inner)]).remove(0).1;
        let back = gw1.push("outside", &[f]);
        if let Combo::V6in4 = combo {
            // UDP 4000-4999 came through SA 1001 (IPv4 peer); ep1-v6.toml
            // protects other IPv6 traffic to hostA with SA 1102 (IPv6
            // peer): an error never leaves by another tunnel.
            assert!(back.is_empty());
            assert_eq!(gw1.drop_count("tunnel_error_dropped"), 1);
            continue;
        }
        assert_eq!(back.len(), 1, "arrives at gw1 with hop limit 1: the error goes back");
        assert_eq!(back[0].0, "outside");
        let out = gw0.push("outside", &[back[0].1.clone()]);
        assert_eq!(out.len(), 1, "gw0 decrypts the error to hostA");
        assert_eq!(out[0].0, "inside");
        check(&out[0].1, &GW1_IN6, &after_hops(&inner, 1));
    }
    assert_eq!(gw0.drop_count("ttl_exceeded"), 2);
    assert_eq!(gw1.drop_count("ttl_exceeded"), 2);
}

/// Checks an ICMPv6 Packet Too Big frame about `orig` (hostA's frame) and
/// returns the MTU it advertises.
fn check_ptb(f: &[u8], orig: &[u8]) -> u32 {
    assert_eq!(&f[..6], &mac(A_MAC));
    assert_eq!(&f[6..12], &mac(GW0_IN_MAC));
    assert_eq!(&f[12..14], &[0x86, 0xdd]);
    let ip = &f[14..];
    let quoted = (orig.len() - 14).min(1280 - 48);
    assert_eq!(ip.len(), 48 + quoted, "as much of the packet as fits in 1280 bytes");
    assert_eq!(u16::from_be_bytes([ip[4], ip[5]]) as usize, ip.len() - 40);
    assert_eq!(ip[6], 58);
    assert!(ip[7] > 1);
    assert_eq!(&ip[8..24], &GW0_IN6.octets(), "from the inside port's first IPv6 address");
    assert_eq!(&ip[24..40], &A6.octets(), "to the inner source");
    let msg = &ip[40..];
    assert_eq!((msg[0], msg[1]), (2, 0), "type 2 Packet Too Big, code 0");
    assert!(l4_checksum_ok(&GW0_IN6, &A6, 58, msg), "ICMPv6 checksum (RFC 4443 §2.3)");
    assert_eq!(&msg[8..], &orig[14..14 + quoted], "quotes the packet as sent (hop limit 64)");
    u32::from_be_bytes([msg[4], msg[5], msg[6], msg[7]])
}

/// An inner IPv6 packet too big for the tunnel gets Packet Too Big with the
/// largest inner size that fits: exact (that size passes, one more does
/// not) for both outer families and a block cipher.
#[test]
fn packet_too_big_exact_mtu() {
    for (alg, combo, want) in [
        ("aes-128-gcm", Combo::V6in6, 1426u32),            // 1500 − (40 + 8 + 8 + 16) − 2
        ("aes-128-gcm", Combo::V6in4, 1446),               // 1500 − (20 + 8 + 8 + 16) − 2
        ("aes-128-cbc-hmac-sha256", Combo::V6in6, 1406),   // (1500 − 40 − 8 − 16 − 16) / 16 × 16 − 2
    ] {
        let (mut gw0, _) = pair(alg, &[]);
        let big = from_a(&combo.inner(0, 64, &payload(1452, 1)));
        let out = gw0.push("inside", std::slice::from_ref(&big));
        assert_eq!(out.len(), 1, "{alg} {combo:?}");
        assert_eq!(out[0].0, "inside");
        assert_eq!(check_ptb(&out[0].1, &big), want, "{alg} {combo:?}");
        let fits = from_a(&combo.inner(0, 64, &payload(want as usize - 48, 2)));
        let out = gw0.push("inside", &[fits]);
        assert_eq!((out.len(), out[0].0.as_str()), (1, "outside"), "{alg} {combo:?}: {want} bytes fit");
        assert!(out[0].1.len() - 14 <= 1500);
        let over = from_a(&combo.inner(0, 64, &payload(want as usize - 47, 3)));
        let out = gw0.push("inside", std::slice::from_ref(&over));
        assert_eq!(check_ptb(&out[0].1, &over), want);
        let s = gw0.stats();
        assert_eq!((s.drops["mtu_exceeded"], s.icmp_sent), (2, 2), "{alg} {combo:?}");
    }
}

/// No Packet Too Big about an ICMPv6 error; the ICMP rate limit is shared
/// with ICMPv4.
#[test]
fn packet_too_big_exceptions_and_rate_limit() {
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    // A 1500-byte ICMPv6 Destination Unreachable (type 1): dropped, not answered.
    let mut msg = vec![1u8, 0, 0, 0, 0, 0, 0, 0];
    msg.extend(payload(1452, 9));
    let ck = !(sum(&msg, pseudo(&A6, &B6, msg.len(), 58)) as u16);
    msg[2..4].copy_from_slice(&ck.to_be_bytes());
    let mut ip = ipv6_header(0, msg.len(), 58, 64, &A6, &B6);
    ip.extend_from_slice(&msg);
    assert!(gw0.push("inside", &[from_a(&ip)]).is_empty());
    assert_eq!((gw0.drop_count("mtu_exceeded"), gw0.stats().icmp_sent), (1, 0));
    // 80 IPv4 frag-needed + 80 IPv6 Packet Too Big: one bucket of 100.
    let mut frames = Vec::new();
    for _ in 0..80 {
        frames.push(from_a(&udp4(0, 64, 5001, &payload(1472, 0), true)));
        frames.push(from_a(&Combo::V6in6.inner(0, 64, &payload(1452, 0))));
    }
    let out = gw0.push("inside", &frames);
    let s = gw0.stats();
    assert_eq!(s.drops["mtu_exceeded"], 161);
    assert_eq!(s.icmp_sent + s.icmp_rate_limited, 160);
    assert!((100..=110).contains(&s.icmp_sent), "{}", s.icmp_sent);
    assert_eq!(out.len() as u64, s.icmp_sent);
}

/// IPv4 into an IPv6 outer header: with DF set and too big, ICMP
/// "fragmentation needed" with the v6 tunnel's MTU; with DF clear, the inner
/// packet is fragmented before encapsulation (RFC 4459 §3), each fragment
/// its own ESP packet that fits, and gw1 forwards fragments that reassemble
/// to the original. The SA's selectors must admit non-first fragments,
/// which carry no ports (RFC 4301 §7.1): port "any" here, where the sample
/// configs select v4-in-v6 by UDP port.
#[test]
fn ipv4_into_ipv6_outer_too_big() {
    let any_port = ("dst_ports = \"6000-6999\"\npriority = 5\naction = \"protect 1101\"", "priority = 5\naction = \"protect 1101\"");
    let (mut gw0, mut gw1) = pair("aes-128-gcm", &[any_port]);
    let body = payload(1472, 5);
    let df = from_a(&udp4(0, 64, 6001, &body, true));
    let out = gw0.push("inside", &[df]);
    assert_eq!(out[0].0, "inside");
    let icmp = &out[0].1[14..];
    assert_eq!((icmp[20], icmp[21]), (3, 4));
    assert_eq!(u16::from_be_bytes([icmp[26], icmp[27]]), 1426, "1500 − (40 + 8 + 8 + 16) − 2");
    let orig = udp4(0, 64, 6001, &body, false);
    let out = gw0.push("inside", &[from_a(&orig)]);
    assert_eq!(out.len(), 2, "two inner fragments, each in its own ESP packet");
    assert_eq!(gw0.stats().frags_sent, 2);
    for (_, f) in &out {
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        assert!(f.len() - 14 <= 1500);
    }
    let mut got = Vec::new();
    for (_, f) in &out {
        let back = gw1.push("outside", std::slice::from_ref(f));
        assert_eq!(back.len(), 1, "{:?}", gw1.stats().drops);
        got.push(back[0].1[14..].to_vec());
    }
    // Reassemble by hand (RFC 791): offsets, MF, one identification.
    let mut whole = vec![0u8; 0];
    let mut mf_last = true;
    for (k, frag) in got.iter().enumerate() {
        assert_eq!(ip_checksum(&frag[..20]), 0);
        assert_eq!(frag[8], 62, "TTL −2");
        assert_eq!(&frag[4..6], &orig[4..6], "same identification");
        let ff = u16::from_be_bytes([frag[6], frag[7]]);
        let off = (ff & 0x1fff) as usize * 8;
        assert_eq!(off, whole.len(), "fragment {k} in order");
        whole.extend_from_slice(&frag[20..u16::from_be_bytes([frag[2], frag[3]]) as usize]);
        mf_last = ff & 0x2000 != 0;
        assert_eq!(mf_last, k == 0);
    }
    assert!(!mf_last);
    assert_eq!(whole, orig[20..], "the fragments carry the original payload");
}

// ---- Neighbor Discovery ---------------------------------------------------------

/// A Neighbor Solicitation from `src` (MAC `smac`) for `target`, to `dst`
/// (IPv6) / `dmac`, hop limit `hlim`, with a source link-layer option unless
/// `src` is unspecified.
fn ns(src: Ipv6Addr, dst: Ipv6Addr, dmac: [u8; 6], smac: [u8; 6], target: Ipv6Addr, hlim: u8) -> Vec<u8> {
    let mut msg = vec![135u8, 0, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&target.octets());
    if !src.is_unspecified() {
        msg.extend_from_slice(&[1, 1]);
        msg.extend_from_slice(&smac);
    }
    let ck = !(sum(&msg, pseudo(&src, &dst, msg.len(), 58)) as u16);
    msg[2..4].copy_from_slice(&ck.to_be_bytes());
    let mut ip = ipv6_header(0, msg.len(), 58, hlim, &src, &dst);
    ip.extend_from_slice(&msg);
    eth(dmac, smac, 0x86dd, &ip)
}

fn solicited(a: &Ipv6Addr) -> (Ipv6Addr, [u8; 6]) {
    let o = a.octets();
    let sn = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | o[13] as u16, u16::from_be_bytes([o[14], o[15]]));
    (sn, [0x33, 0x33, 0xff, o[13], o[14], o[15]])
}

/// A Neighbor Solicitation for the gateway's address is answered (RFC 4861
/// §7.2.4); invalid ones and other ND messages are `nd_ignored`.
#[test]
fn neighbor_discovery() {
    let mut gw0 = Gw::from_config("configs/ep0-v6.toml");
    let (sn, sn_mac) = solicited(&GW0_IN6);
    let a = mac(A_MAC);
    let out = gw0.push("inside", &[ns(A6, sn, sn_mac, a, GW0_IN6, 255)]);
    assert_eq!(out.len(), 1);
    let (port, f) = &out[0];
    assert_eq!(port, "inside");
    assert_eq!(&f[..6], &a, "to the solicitation's source link-layer address");
    assert_eq!(&f[6..12], &mac(GW0_IN_MAC));
    assert_eq!(&f[12..14], &[0x86, 0xdd]);
    let ip = &f[14..];
    assert_eq!(ip.len(), 40 + 32);
    assert_eq!((ip[6], ip[7]), (58, 255), "ICMPv6, hop limit 255");
    assert_eq!(&ip[8..24], &GW0_IN6.octets());
    assert_eq!(&ip[24..40], &A6.octets());
    let msg = &ip[40..];
    assert_eq!((msg[0], msg[1], msg[4]), (136, 0, 0xe0), "Neighbor Advertisement, R, S and O set (a router: RFC 4861 §4.4)");
    assert_eq!(&msg[8..24], &GW0_IN6.octets(), "target");
    assert_eq!(&msg[24..32], &[2, 1, 2, 0, 0, 0, 0, 1], "target link-layer address option: the port's MAC");
    assert!(l4_checksum_ok(&GW0_IN6, &A6, 58, msg));
    // Unicast solicitation (neighbour unreachability detection) too.
    assert_eq!(gw0.push("inside", &[ns(A6, GW0_IN6, mac(GW0_IN_MAC), a, GW0_IN6, 255)]).len(), 1);
    // Duplicate address detection: answered to all-nodes, S clear.
    let out = gw0.push("inside", &[ns(Ipv6Addr::UNSPECIFIED, sn, sn_mac, a, GW0_IN6, 255)]);
    let f = &out[0].1;
    assert_eq!(&f[..6], &[0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(&f[14 + 24..14 + 40], &"ff02::1".parse::<Ipv6Addr>().unwrap().octets());
    assert_eq!(f[14 + 40 + 4], 0xa0, "R and O, S clear");
    assert!(l4_checksum_ok(&GW0_IN6, &"ff02::1".parse().unwrap(), 58, &f[54..]));
    assert_eq!(gw0.stats().nd_replies, 3);
    // Not answered: hop limit 254 (RFC 4861 §7.1.1), a multicast source,
    // someone else's target,
    // the inside address asked on the outside port, a bad checksum, a
    // router solicitation.
    let mut bad_ck = ns(A6, sn, sn_mac, a, GW0_IN6, 255);
    bad_ck[14 + 40 + 2] ^= 1;
    let mut rs = vec![133u8, 0, 0, 0, 0, 0, 0, 0];
    let ck = !(sum(&rs, pseudo(&A6, &"ff02::2".parse().unwrap(), 8, 58)) as u16);
    rs[2..4].copy_from_slice(&ck.to_be_bytes());
    let mut rs_ip = ipv6_header(0, 8, 58, 255, &A6, &"ff02::2".parse().unwrap());
    rs_ip.extend_from_slice(&rs);
    let ignored = vec![
        ns(A6, sn, sn_mac, a, GW0_IN6, 254),
        // A multicast source is never valid (RFC 4291 §2.7).
        ns("ff02::1".parse().unwrap(), sn, sn_mac, a, GW0_IN6, 255),
        ns(A6, sn, sn_mac, a, Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x99), 255),
        bad_ck,
        eth([0x33, 0x33, 0, 0, 0, 2], a, 0x86dd, &rs_ip),
    ];
    assert!(gw0.push("inside", &ignored).is_empty());
    assert!(gw0.push("outside", &[ns(A6, sn, sn_mac, a, GW0_IN6, 255)]).is_empty());
    assert_eq!(gw0.drop_count("nd_ignored"), 6);
    // Multicast that is not ND (an MLDv2 report to ff02::16): not for us.
    let mut mld = ipv6_header(0, 8, 58, 1, &A6, &"ff02::16".parse().unwrap());
    mld.extend_from_slice(&[143, 0, 0, 0, 0, 0, 0, 0]);
    assert!(gw0.push("inside", &[eth([0x33, 0x33, 0, 0, 0, 0x16], a, 0x86dd, &mld)]).is_empty());
    assert_eq!(gw0.drop_count("not_for_us"), 1);
    assert_eq!(gw0.stats().drops.values().sum::<u64>(), 7);
}

// ---- NAT-T over IPv6, inbound selectors ----------------------------------------------

/// ESP in UDP over IPv6 (RFC 3948): a real UDP checksum on send (RFC 8200
/// §8.1) over the encrypted packet; on receive any checksum is accepted.
#[test]
fn esp_in_udp_over_ipv6() {
    let enc = "tunnel_dst = \"2001:db8:ff::2\"\nudp_encap = true";
    let enc1 = "tunnel_dst = \"2001:db8:ff::1\"\nudp_encap = true";
    let (mut gw0, mut gw1) = pair("aes-128-gcm", &[("tunnel_dst = \"2001:db8:ff::2\"", enc), ("tunnel_dst = \"2001:db8:ff::1\"", enc1)]);
    let inner = Combo::V6in6.inner(0, 64, &payload(333, 4));
    let f = gw0.push("inside", &[from_a(&inner)]).remove(0).1;
    let ip = &f[14..];
    assert_eq!(ip[6], 17, "next header UDP");
    let udp = &ip[40..];
    assert_eq!(&udp[..4], &[0x11, 0x94, 0x11, 0x94], "4500 → 4500");
    assert_eq!(u16::from_be_bytes([udp[4], udp[5]]) as usize, udp.len());
    assert_ne!(&udp[6..8], &[0, 0], "IPv6 UDP carries a checksum");
    assert!(l4_checksum_ok(&OUT0_6, &OUT1_6, 17, udp), "UDP checksum over the pseudo-header and the ESP packet");
    assert_eq!(u32::from_be_bytes(udp[8..12].try_into().unwrap()), 1101);
    let back = gw1.push("outside", std::slice::from_ref(&f));
    assert_eq!(back[0].1[14..], after_hops(&inner, 2)[..]);
    let mut zero = gw0.push("inside", &[from_a(&inner)]).remove(0).1;
    zero[14 + 40 + 6..14 + 40 + 8].copy_from_slice(&[0, 0]);
    assert_eq!(gw1.push("outside", &[zero]).len(), 1, "checksum not verified on receive");
    // v4 inner in the same v6 UDP SA.
    let v4 = Combo::V4in6.inner(0, 64, b"v4 in udp6");
    let f = gw0.push("inside", &[from_a(&v4)]).remove(0).1;
    assert!(l4_checksum_ok(&OUT0_6, &OUT1_6, 17, &f[54..]));
    assert_eq!(gw1.push("outside", &[f]).remove(0).1[14..], after_hops(&v4, 2)[..]);
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0);
}

/// The decapsulated packet must match the SA's inbound selectors of its own
/// family (RFC 4301 §5.2): SA 1101 admits IPv6 2001:db8:a::/64 → b::/64 and
/// IPv4 UDP to 6000-6999 only.
#[test]
fn inbound_selectors_per_family() {
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    let mk = esp6_to_gw1;
    let other_src = udp6(Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1), B6, 0, 64, 1, 5001, b"x");
    let v4_wrong_port = udp4(0, 64, 5001, b"x", true);
    let v4_right_port = udp4(0, 64, 6500, b"x", true);
    let out = gw1.push("outside", &[mk(1, &other_src, 41), mk(2, &v4_wrong_port, 4), mk(3, &v4_right_port, 4)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1[14..], after_hops(&v4_right_port, 1)[..]);
    assert_eq!(gw1.drop_count("inner_policy_mismatch"), 2);
}

/// Cleartext IPv6 on the protected side that matches no policy, and to the
/// gateway itself, is counted; IPv6 bypass decrements the hop limit.
#[test]
fn ipv6_policy_outcomes() {
    let bypass = "[[policy]]\ndirection = \"outbound\"\nsrc = \"2001:db8:a::/64\"\ndst = \"2001:db8:ff::/64\"\npriority = 1\naction = \"bypass\"\n\n[[policy]]";
    let (mut gw0, _) = pair("aes-128-gcm", &[("[[policy]]", bypass)]);
    let to_gw = udp6(A6, GW0_IN6, 0, 64, 1, 2, b"x");
    let nowhere = udp6(A6, Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1), 0, 64, 1, 2, b"x");
    assert!(gw0.push("inside", &[from_a(&to_gw), from_a(&nowhere)]).is_empty());
    assert_eq!((gw0.drop_count("to_us"), gw0.drop_count("no_policy")), (1, 1));
    let clear = udp6(A6, OUT1_6, 0, 64, 1, 2, b"in the clear");
    let out = gw0.push("inside", &[from_a(&clear)]);
    assert_eq!(out[0].0, "outside");
    assert_eq!(&out[0].1[..6], &mac(GW1_OUT_MAC));
    assert_eq!(out[0].1[14..], after_hops(&clear, 1)[..]);
}

/// A bypassed IPv6 packet too big for its egress port is never fragmented
/// (RFC 8200 §5): Packet Too Big back to the source with the port's MTU
/// (not a tunnel's), quoting the packet as received; one that fits is
/// forwarded with its hop limit decremented.
#[test]
fn bypassed_ipv6_too_big_gets_packet_too_big_with_the_port_mtu() {
    let bypass = "[[policy]]\ndirection = \"outbound\"\nsrc = \"2001:db8:a::/64\"\ndst = \"2001:db8:ff::/64\"\npriority = 1\naction = \"bypass\"\n\n[[policy]]";
    let (mut gw0, _) = pair("aes-128-gcm", &[("[[policy]]", bypass)]);
    let big = from_a(&udp6(A6, OUT1_6, 0, 64, 1, 2, &payload(1500 - 48 + 1, 1)));
    let out = gw0.push("inside", std::slice::from_ref(&big));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "inside");
    assert_eq!(check_ptb(&out[0].1, &big), 1500, "the egress port's MTU");
    let fits = udp6(A6, OUT1_6, 0, 64, 1, 2, &payload(1500 - 48, 2));
    let out = gw0.push("inside", &[from_a(&fits)]);
    assert_eq!((out.len(), out[0].0.as_str()), (1, "outside"));
    assert_eq!(out[0].1[14..], after_hops(&fits, 1)[..]);
    let s = gw0.stats();
    assert_eq!((s.drops["mtu_exceeded"], s.icmp_sent), (1, 1));
    assert_eq!(s.drops.values().sum::<u64>(), 1);
}

/// The outer flow label (RFC 6437, RFC 6438 §3): 0 by default (nothing of
/// the inner flows shows); with `flow_label = "inner"` on SA 1101 one
/// non-zero label per inner flow, the same for every packet of it
/// whatever its payload, different across flows (ports), and gw1
/// decrypts the labelled packets as any other. On an SA with IPv4
/// endpoints the key is refused.
#[test]
fn outer_flow_label_zero_by_default_per_inner_flow_when_asked() {
    let label = |f: &[u8]| (u32::from(f[15] & 0x0f) << 16) | (u32::from(f[16]) << 8) | u32::from(f[17]);
    let mut plain = Gw::from_config("configs/ep0-v6.toml");
    let out = plain.push("inside", &[from_a(&udp6(A6, B6, 0, 64, 1000, 5001, b"x"))]);
    assert_eq!((out[0].1[14] >> 4, label(&out[0].1)), (6, 0), "IPv6 outer, unlabelled");

    let cfg = edited_config("ep0-v6.toml", "flowlabel", |t| t.replacen("spi = 1101\n", "spi = 1101\nflow_label = \"inner\"\n", 1));
    let mut gw0 = Gw::from_config(&cfg);
    let mut gw1 = Gw::from_config("configs/ep1-v6.toml");
    let flow = |sport: u16, salt: u8| from_a(&udp6(A6, B6, 0, 64, sport, 5001, &payload(40 + salt as usize, salt)));
    let first: Vec<u32> = (0..3).map(|s| label(&gw0.push("inside", &[flow(1000, s)]).remove(0).1)).collect();
    assert!(first[0] != 0 && first.iter().all(|&l| l == first[0]), "one label for one flow: {first:x?}");
    let labels: std::collections::HashSet<u32> = (0..16u16).map(|i| label(&gw0.push("inside", &[flow(2000 + i, 0)]).remove(0).1)).collect();
    assert!(labels.len() >= 15 && !labels.contains(&0), "16 flows, labels {labels:x?}");
    let esp = gw0.push("inside", &[flow(1000, 9)]).remove(0).1;
    assert_eq!(gw1.push("outside", &[esp]).len(), 1, "{:?}", gw1.stats().drops);

    let v4 = edited_config("ep0-v6.toml", "flowlabel4", |t| t.replacen("spi = 1001\n", "spi = 1001\nflow_label = \"inner\"\n", 1));
    let e = secgw::config::load(std::path::Path::new(&v4)).unwrap_err().to_string();
    assert!(e.contains("sa[0].flow_label: flow_label = \"inner\" needs IPv6 tunnel endpoints"), "{e}");
}
