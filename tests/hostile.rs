//! Hostile input: hundreds of thousands of random and mutated frames into
//! both gateways of the testbed configs (in-memory ports), and mutated,
//! duplicated, reordered and lost outer fragments into the reassembler. The
//! gateway must never panic and must account for every frame: each one
//! received is transmitted, counted under exactly one drop reason, or went
//! into (or waits for) a reassembled datagram.

mod common;
use common::*;
use std::net::Ipv4Addr;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut f = base.to_vec();
    match rng.below(6) {
        0 => {
            // flip a few bits anywhere
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(f.len());
                f[i] ^= 1 << rng.below(8);
            }
        }
        1 => f.truncate(rng.below(f.len() + 1)),
        2 => {
            // overwrite a header byte (Ethernet, IP or ESP region) with anything
            let i = rng.below(f.len().min(60));
            f[i] = rng.next() as u8;
        }
        3 => {
            // IPv4 total length / IHL games, checksum left as is or fixed
            if f.len() > 34 {
                if rng.below(2) == 0 {
                    f[14] = 0x40 | (rng.below(16) as u8);
                }
                let hl = (f[14] & 0x0f) as usize * 4;
                let real = f.len() - 14;
                let choices = [0, 1, 19, 20, 21, hl.saturating_sub(1), hl, hl + 1, real - 1, real, real + 1, rng.below(65536)];
                let total = choices[rng.below(choices.len())] as u16;
                f[16..18].copy_from_slice(&total.to_be_bytes());
                if rng.below(4) != 0 && f.len() >= 14 + hl.max(20) {
                    let hl = hl.max(20);
                    f[24..26].copy_from_slice(&[0, 0]);
                    let ck = ip_checksum(&f[14..14 + hl]);
                    f[24..26].copy_from_slice(&ck.to_be_bytes());
                }
            }
        }
        4 => {
            let extra = rng.below(64);
            for _ in 0..extra {
                f.push(rng.next() as u8);
            }
        }
        _ => {
            let n = rng.below(1600);
            f = (0..n).map(|_| rng.next() as u8).collect();
            if n > 14 && rng.below(2) == 0 {
                f[12..14].copy_from_slice(&[8, 0]);
            }
        }
    }
    f
}

/// Every received frame is sent, counted once as a drop, or went into a
/// reassembled datagram or is held for one (see `assert_accounted`).
fn check_accounting(gw: &MemGateway, what: &str) {
    assert_accounted(&gw.stats(), what);
}

#[test]
fn random_and_mutated_frames_never_panic_and_are_all_counted() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut gw0 = MemGateway::from_config("configs/ep0.toml");
    let mut gw1 = MemGateway::from_config("configs/ep1.toml");
    // Valid seeds: plaintext into gw0, its ESP into gw1, an ARP request.
    let a = Ipv4Addr::new(192, 0, 2, 10);
    let b = Ipv4Addr::new(198, 51, 100, 10);
    let plain = eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(a, b, 0, 64, 1, 2, &[7u8; 100]));
    let mut esp_seeds = Vec::new();
    for _ in 0..64 {
        gw0.inject(0, "inside", &plain);
    }
    for (_, _, f) in gw0.run() {
        esp_seeds.push(f);
    }
    assert_eq!(esp_seeds.len(), 64);
    let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1];
    arp.extend_from_slice(&mac("02:00:00:00:0a:01"));
    arp.extend_from_slice(&a.octets());
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&[192, 0, 2, 1]);
    let arp = eth([0xff; 6], mac("02:00:00:00:0a:01"), 0x0806, &arp);

    for round in 0..1000 {
        for _ in 0..100 {
            let base = match rng.below(3) {
                0 => &plain,
                1 => &arp,
                _ => &esp_seeds[rng.below(esp_seeds.len())],
            };
            let f = mutate(&mut rng, base);
            let port = ["inside", "outside"][rng.below(2)];
            if rng.below(2) == 0 {
                gw0.inject(0, port, &f);
            } else {
                gw1.inject(0, port, &f);
            }
        }
        gw0.run();
        gw1.run();
        if round % 100 == 0 {
            check_accounting(&gw0, "gw0");
            check_accounting(&gw1, "gw1");
        }
    }
    check_accounting(&gw0, "gw0");
    check_accounting(&gw1, "gw1");
    // Still forwarding valid traffic afterwards.
    gw0.inject(0, "inside", &plain);
    assert_eq!(gw0.run().len(), 1);
}

/// Outer fragments of gw0's ESP (wan MTU 576) into gw1 (8 contexts, 30 ms
/// timeout): valid, mutated, duplicated, reordered, lost, mixed across
/// datagrams. Nothing panics, accounting is exact at every step, and once
/// the timeout has passed nothing is held and every buffer is home.
#[test]
fn mutated_fragments_never_panic_and_are_all_counted() {
    let gw0_cfg = edited_config("ep0.toml", "hostile-frag", |t| t.replacen("interface = \"gw0-out\"", "interface = \"gw0-out\"\nmtu = 576", 1));
    let gw1_cfg = edited_config("ep1.toml", "hostile-frag", |t| format!("{t}\n[reassembly]\ncontexts = 8\ntimeout_ms = 30\n"));
    let mut gw0 = MemGateway::from_config(&gw0_cfg);
    let a = Ipv4Addr::new(192, 0, 2, 10);
    let b = Ipv4Addr::new(198, 51, 100, 10);
    let datagram = |rng: &mut Rng| {
        let mut ip = udp_packet(a, b, 0, 64, 1, 2, &vec![7u8; 500 + rng.below(945)]);
        ip[6] = 0; // DF clear: gw0 fragments
        ip[10..12].copy_from_slice(&[0, 0]);
        let ck = ip_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&ck.to_be_bytes());
        gw0.inject(0, "inside", &eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &ip));
        gw0.run().into_iter().map(|x| x.2).collect::<Vec<_>>()
    };
    // flags/offset rewritten, checksum fixed
    let rewrite = |g: &mut Vec<u8>, ff: u16| {
        g[20..22].copy_from_slice(&ff.to_be_bytes());
        g[24..26].copy_from_slice(&[0, 0]);
        let ck = ip_checksum(&g[14..34]);
        g[24..26].copy_from_slice(&ck.to_be_bytes());
    };
    fragment_campaign(&gw1_cfg, 0xf4a6_0000_0000_0001, datagram, rewrite);
}

/// The same with IPv6 outer fragments (RFC 8200 §4.5): gw0's ESP for SA
/// 1101 (IPv6 outer; secgw never fragments IPv6 itself) cut here into
/// fragments, half of the datagrams with a Destination Options header
/// before the Fragment header.
#[test]
fn mutated_ipv6_fragments_never_panic_and_are_all_counted() {
    let gw1_cfg = edited_config("ep1-v6.toml", "hostile-frag6", |t| format!("{t}\n[reassembly]\ncontexts = 8\ntimeout_ms = 30\n"));
    let mut gw0 = MemGateway::from_config("configs/ep0-v6.toml");
    let datagram = |rng: &mut Rng| {
        // IPv6 UDP hostA → hostB, port 5001: v6-in-v6 over SA 1101.
        let n = 500 + rng.below(800); // fits the 1500-byte wan MTU once encapsulated
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
        ip[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
        ip.extend_from_slice(&"2001:db8:a::10".parse::<std::net::Ipv6Addr>().unwrap().octets());
        ip.extend_from_slice(&"2001:db8:b::10".parse::<std::net::Ipv6Addr>().unwrap().octets());
        ip.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89]);
        ip.extend_from_slice(&((8 + n) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0]);
        ip.extend(std::iter::repeat_n(7u8, n));
        gw0.inject(0, "inside", &eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x86dd, &ip));
        let esp = gw0.run().remove(0).2;
        assert_eq!(esp[14 + 6], 50, "IPv6 outer, ESP");
        let dest_opts = rng.below(2) == 0;
        cut6(&esp, 8 * (20 + rng.below(45)), rng.next() as u32, dest_opts)
    };
    // Fragment offset / M word rewritten (after the extension headers, if any).
    let rewrite = |g: &mut Vec<u8>, ff: u16| {
        let at = if g[14 + 6] == 60 { 14 + 48 + 2 } else { 14 + 40 + 2 };
        g[at..at + 2].copy_from_slice(&ff.to_be_bytes());
    };
    fragment_campaign(&gw1_cfg, 0xf4a6_0000_0000_0006, datagram, rewrite);
}

/// Cuts the IPv6 packet of `frame` (fixed header only, then ESP) into
/// fragments of `chunk` data bytes (a multiple of 8), identification `id`,
/// with an 8-byte Destination Options header before the Fragment header
/// when `dest_opts`.
fn cut6(frame: &[u8], chunk: usize, id: u32, dest_opts: bool) -> Vec<Vec<u8>> {
    let data = &frame[14 + 40..];
    let unfrag: &[u8] = if dest_opts { &[44, 0, 1, 4, 0, 0, 0, 0] } else { &[] };
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let n = chunk.min(data.len() - off);
        let mut f = frame[..14 + 40].to_vec();
        f[14 + 6] = if dest_opts { 60 } else { 44 };
        f[14 + 4..14 + 6].copy_from_slice(&((unfrag.len() + 8 + n) as u16).to_be_bytes());
        f.extend_from_slice(unfrag);
        let m = u16::from(off + n < data.len());
        f.extend_from_slice(&[frame[14 + 6], 0]);
        f.extend_from_slice(&(((off / 8) as u16 * 8) | m).to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(&data[off..off + n]);
        out.push(f);
        off += n;
    }
    out
}

/// 400 rounds of 1..=4 datagrams from `datagram` (its outer fragments)
/// into gw1 (`gw1_cfg`: 8 contexts, 30 ms timeout): each fragment lost,
/// mutated, duplicated, its offset/flags word rewritten by `rewrite`, or
/// kept, the round shuffled or not. Nothing panics, accounting is exact
/// after every round, and after the timeout nothing is held and every
/// buffer is home.
fn fragment_campaign(gw1_cfg: &str, seed: u64, mut datagram: impl FnMut(&mut Rng) -> Vec<Vec<u8>>, rewrite: impl Fn(&mut Vec<u8>, u16)) {
    let mut rng = Rng(seed);
    let mut gw1 = MemGateway::from_config(gw1_cfg);
    let mut delivered = 0;
    for round in 0..400 {
        let mut frames = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let frags = datagram(&mut rng);
            assert!(frags.len() >= 2);
            for f in frags {
                match rng.below(10) {
                    0 => {}                     // lost
                    1 => frames.push(mutate(&mut rng, &f)),
                    2 => {
                        frames.push(f.clone()); // duplicated
                        frames.push(f);
                    }
                    3 => {
                        let mut g = f.clone();
                        rewrite(&mut g, rng.next() as u16);
                        frames.push(g);
                    }
                    _ => frames.push(f),
                }
            }
        }
        if rng.below(2) == 0 {
            let n = frames.len();
            for i in (1..n).rev() {
                frames.swap(i, rng.below(i + 1));
            }
        }
        for f in &frames {
            gw1.inject(0, "outside", f);
        }
        delivered += gw1.run().len();
        check_accounting(&gw1, "gw1");
        if round % 50 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(40));
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(40));
    gw1.run();
    let s = gw1.stats();
    check_accounting(&gw1, "gw1 after the timeout");
    assert_eq!(s.frags_pending, 0, "nothing held after the timeout");
    assert_eq!(gw1.workers[0].free_buffers(), 512, "every buffer home");
    assert!(delivered > 100 && s.reassembled > 100, "most datagrams still made it ({delivered})");
    for r in ["reasm_duplicate", "reasm_overlap", "reasm_timeout", "reasm_bad_fragment"] {
        assert!(s.drops[r] > 0, "{r} exercised: {:?}", s.drops);
    }
}

/// The same campaign with IPv6 seeds into the dual-stack configs
/// (ep0-v6/ep1-v6): IPv6 plaintext, its ESP in IPv4 and IPv6 outer
/// headers, a Neighbor Solicitation, plus mutations of the next-header
/// chain (random extension headers and next-header values). Never panics;
/// every frame is sent or dropped, and nothing is sent that was not
/// received, answered (ND, ICMPv6) or fragmented.
#[test]
fn ipv6_random_and_mutated_frames_never_panic_and_are_all_counted() {
    let mut rng = Rng(0x5eed_1234_abcd_0006);
    let mut gw0 = MemGateway::from_config("configs/ep0-v6.toml");
    let mut gw1 = MemGateway::from_config("configs/ep1-v6.toml");
    let v6 = |dport: u16, n: usize| {
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
        ip[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
        ip.extend_from_slice(&"2001:db8:a::10".parse::<std::net::Ipv6Addr>().unwrap().octets());
        ip.extend_from_slice(&"2001:db8:b::10".parse::<std::net::Ipv6Addr>().unwrap().octets());
        ip.extend_from_slice(&[0x9c, 0x40, (dport >> 8) as u8, dport as u8, 0, (8 + n) as u8, 0, 0]);
        ip.extend((0..n).map(|i| i as u8));
        eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x86dd, &ip)
    };
    let plains = [v6(5001, 100), v6(4001, 30)];
    let mut esp_seeds = Vec::new();
    for p in &plains {
        for _ in 0..32 {
            gw0.inject(0, "inside", p);
        }
    }
    for (_, _, f) in gw0.run() {
        esp_seeds.push(f);
    }
    assert_eq!(esp_seeds.len(), 64);
    let mut ns = vec![0x60, 0, 0, 0, 0, 32, 58, 255];
    ns.extend_from_slice(&"2001:db8:a::10".parse::<std::net::Ipv6Addr>().unwrap().octets());
    ns.extend_from_slice(&"ff02::1:ff00:1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    ns.extend_from_slice(&[135, 0, 0, 0, 0, 0, 0, 0]);
    ns.extend_from_slice(&"2001:db8:a::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    ns.extend_from_slice(&[1, 1, 2, 0, 0, 0, 0x0a, 1]);
    let ns = eth([0x33, 0x33, 0xff, 0, 0, 1], mac("02:00:00:00:0a:01"), 0x86dd, &ns);
    for round in 0..500 {
        for _ in 0..100 {
            let base = match rng.below(4) {
                0 => &plains[rng.below(2)],
                1 => &ns,
                _ => &esp_seeds[rng.below(esp_seeds.len())],
            };
            let mut f = if rng.below(3) == 0 {
                // Splice random extension-header-looking bytes after the fixed header.
                let mut f = base.clone();
                if f.len() >= 54 {
                    let nh = f[20];
                    f[20] = [0u8, 43, 44, 60, 50, 17, 58, rng.next() as u8][rng.below(8)];
                    let len = 8 * (1 + rng.below(3));
                    let mut ext: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    ext[0] = if rng.below(2) == 0 { nh } else { rng.next() as u8 };
                    ext[1] = if rng.below(3) == 0 { rng.next() as u8 } else { (len / 8 - 1) as u8 };
                    f.splice(54..54, ext);
                    let plen = (f.len() - 54) as u16;
                    f[18..20].copy_from_slice(&plen.to_be_bytes());
                }
                f
            } else {
                mutate(&mut rng, base)
            };
            if f.len() > 13 && rng.below(8) != 0 {
                f[12..14].copy_from_slice(&[0x86, 0xdd]);
            }
            let port = ["inside", "outside"][rng.below(2)];
            if rng.below(2) == 0 {
                gw0.inject(0, port, &f);
            } else {
                gw1.inject(0, port, &f);
            }
        }
        gw0.run();
        gw1.run();
        if round % 100 == 0 {
            for (gw, name) in [(&gw0, "gw0"), (&gw1, "gw1")] {
                let s = gw.stats();
                let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
                let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
                // Fragments taken by the reassembler count as in flight
                // (pending) or as part of the datagram they made.
                let drops: u64 = s.drops.values().sum::<u64>() + s.frags_reassembled + s.frags_pending - s.reassembled;
                assert!(rx <= tx + drops, "{name}: a received frame vanished ({:?})", s.drops);
                assert!(tx + drops <= rx + s.icmp_sent + s.frags_sent, "{name}: more out than in ({:?})", s.drops);
            }
        }
    }
    gw0.inject(0, "inside", &plains[0]);
    assert_eq!(gw0.run().len(), 1, "still forwarding");
}

/// An IPv6/UDP packet (no Ethernet) `src` → `dst`, hop limit 64, by hand.
fn udp6_packet(src: [u8; 16], dst: [u8; 16], payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 48];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..24].copy_from_slice(&src);
    p[24..40].copy_from_slice(&dst);
    p[40..42].copy_from_slice(&1u16.to_be_bytes());
    p[42..44].copy_from_slice(&2u16.to_be_bytes());
    p[44..46].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// A keyed peer's ESP payload (RFC 4303 §2.4–2.6: inner packet, padding,
/// Pad Length, Next Header, all under the ICV): `inner` mutated or not,
/// then a trailer that is right, or wrong in one of the ways a broken or
/// hostile peer could make it.
fn keyed_plaintext(rng: &mut Rng, inner: &[u8]) -> Vec<u8> {
    let mut p = inner.to_vec();
    match rng.below(6) {
        0 => {}
        1 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(p.len());
                p[i] ^= 1 << rng.below(8);
            }
        }
        2 => p.truncate(rng.below(p.len() + 1)),
        3 => {
            // an IPv4 total length / IPv6 payload length that lies
            let at = if p.first().is_some_and(|b| b >> 4 == 6) { 4 } else { 2 };
            if p.len() > at + 1 {
                let v = [0u16, 1, 19, 20, 40, p.len() as u16 - 1, p.len() as u16 + 1, rng.next() as u16][rng.below(8)];
                p[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
        }
        4 => {
            let i = rng.below(p.len().min(48));
            if i < p.len() {
                p[i] = rng.next() as u8;
            }
        }
        _ => p = (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
    }
    let next_header = [4u8, 4, 4, 41, 59, 0, 17, 50, rng.next() as u8][rng.below(9)];
    match rng.below(6) {
        // right: padding 1, 2, 3, … to 4 bytes (§2.4)
        0 | 1 => {
            let pad = (4 - (p.len() + 2) % 4) % 4;
            p.extend((1..=pad).map(|i| i as u8));
            p.extend_from_slice(&[pad as u8, next_header]);
        }
        // padding bytes not 1, 2, 3, …
        2 => {
            let pad = 4 + (4 - (p.len() + 2) % 4) % 4;
            p.extend((0..pad).map(|_| rng.next() as u8));
            p.extend_from_slice(&[pad as u8, next_header]);
        }
        // a Pad Length past the payload, or any
        3 => {
            let pad = [255u8, (p.len() + 1).min(255) as u8, rng.next() as u8][rng.below(3)];
            p.extend_from_slice(&[pad, next_header]);
        }
        // no trailer at all, or a length not a multiple of 4
        4 => p.truncate(rng.below(p.len() + 1)),
        _ => {
            p.extend((0..rng.below(4)).map(|_| rng.next() as u8));
            p.extend_from_slice(&[0, next_header]);
        }
    }
    p
}

/// A peer that holds the keys but sends anything under the ICV (only such
/// a peer gets past it, so random frames never reach this): mutated inner
/// packets (IPv4 in and out of the SA's selectors, IPv6, random bytes)
/// with right and wrong trailers, sealed with gw1's inbound SAs 1001
/// (AES-128-GCM) and 1003 (AES-256-GCM) by the `aes-gcm` crate under
/// sequence numbers that mostly advance and now and then repeat or jump
/// past the window. Nothing panics; every frame is accounted for; none
/// fails its ICV (the seal is right, so each reached the checks after it);
/// the trailer and inner-packet checks each refused some and some were
/// delivered; and a right packet still passes afterwards.
#[test]
fn keyed_peer_sending_anything_under_the_icv_never_panics_and_is_all_counted() {
    let mut rng = Rng(0x5eed_e5b0_0000_0007);
    let mut gw1 = MemGateway::from_config("configs/ep1.toml");
    let key = |spi: u32| gw1.cfg.sas.iter().find(|s| s.spi == spi && s.direction == secgw::config::model::Direction::Inbound).unwrap().key.to_vec();
    let sas = [(1001u32, key(1001)), (1003, key(1003))];
    let mut seq = [0u64; 2];
    let a = Ipv4Addr::new(192, 0, 2, 10);
    let b = Ipv4Addr::new(198, 51, 100, 10);
    let inners = [
        udp_packet(a, b, 0, 64, 1, 2, &[7u8; 100]),
        udp_packet(a, b, 0, 64, 1, 2, &[]),
        udp_packet(Ipv4Addr::new(192, 0, 2, 11), Ipv4Addr::new(198, 51, 100, 77), 0, 1, 1, 2, &[1u8; 1200]),
        udp_packet(Ipv4Addr::new(10, 9, 9, 9), b, 0, 64, 1, 2, &[3u8; 30]),
        udp6_packet([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10], [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10], &[5u8; 64]),
    ];
    let mut hdr = [0u8; 20];
    hdr[0] = 0x45;
    hdr[8] = 64;
    hdr[12..16].copy_from_slice(&[203, 0, 113, 1]);
    hdr[16..20].copy_from_slice(&[203, 0, 113, 2]);
    for round in 0..300 {
        for _ in 0..100 {
            let i = rng.below(2);
            let sent = match rng.below(20) {
                // an old one: a replay or below the window
                0 if seq[i] > 0 => seq[i] - rng.below(seq[i] as usize) as u64,
                r => {
                    seq[i] += if r == 1 { 100 + rng.below(1000) as u64 } else { 1 }; // now and then far ahead
                    seq[i]
                }
            };
            let inner = &inners[rng.below(inners.len())];
            let plain = keyed_plaintext(&mut rng, inner);
            let esp = secgw::testkit::seal_esp_gcm(&sas[i].1, sas[i].0, sent, false, &plain).unwrap();
            gw1.inject(0, "outside", &to_gw1(&hdr, 50, &esp));
        }
        gw1.run();
        if round % 50 == 0 {
            check_accounting(&gw1, "gw1");
        }
    }
    check_accounting(&gw1, "gw1");
    let s = gw1.stats();
    let d = |r: &str| s.drops[r];
    assert_eq!(d("auth_failed"), 0, "every packet was sealed with the SA's key");
    for r in ["replay", "bad_padding", "bad_inner", "inner_policy_mismatch"] {
        assert!(d(r) > 0, "no packet reached the {r} check: {:?}", s.drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
    }
    let delivered = s.ports.iter().find(|p| p.name == "inside").unwrap().tx_packets;
    assert!(delivered > 100, "only {delivered} of 30000 delivered: {:?}", s.drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
    // A right packet still passes.
    seq[0] += 1;
    let esp = seal_gcm128(&sas[0].1, 1001, seq[0], false, &inners[0], 4);
    gw1.inject(0, "outside", &to_gw1(&hdr, 50, &esp));
    let out = gw1.run();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1, "inside");
    assert_eq!(&out[0].2[14..34], &{
        let mut ip = inners[0][..20].to_vec();
        ip[8] -= 1; // TTL, then the checksum again
        ip[10..12].copy_from_slice(&[0, 0]);
        let ck = ip_checksum(&ip);
        ip[10..12].copy_from_slice(&ck.to_be_bytes());
        ip
    }[..]);
}
