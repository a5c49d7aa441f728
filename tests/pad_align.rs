//! ESP padding alignment on the sender (RFC 4303 §2.4): an outbound SA with
//! `pad_align = N` pads payload + padding + Pad Length + Next Header to a
//! multiple of N bytes. gw0 (configs/ep0.toml with `pad_align` on SA 1001,
//! AES-128-GCM tunnel) → gw1 (ep1.toml unchanged, which knows nothing of
//! it): the ESP payload, opened with the `aes-gcm` crate directly, is the
//! inner packet, then padding 1, 2, 3, … of the least length that reaches
//! the alignment, then Pad Length and Next Header 4; the wire size is what
//! `esp::outbound::tunnel_len` (the MTU check's arithmetic) says; gw1
//! delivers exactly the packet hostA sent.

mod common;
use common::{eth, mac, open_gcm128, udp_packet, Gw};
use secgw::crypto::Algorithm;
use std::net::Ipv4Addr;

const ETH: usize = 14;

fn from_host_a(size: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..size).map(|i| i as u8 | 1).collect();
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 10), 0, 64, 40000, 5001, &payload))
}

/// Sends UDP payloads of every length in `sizes` through gw0 with SA 1001
/// at `align` (`None`: the key absent) and checks the padding, the wire
/// size and gw1's delivery. Returns the ESP payload lengths seen.
fn run(align: Option<usize>, sizes: impl Iterator<Item = usize>) -> Vec<usize> {
    let tag = format!("pad{}", align.unwrap_or(0));
    let cfg = common::edited_config("ep0.toml", &tag, |t| match align {
        Some(n) => t.replacen("spi = 1001\n", &format!("spi = 1001\npad_align = {n}\n"), 1),
        None => t,
    });
    let want = align.unwrap_or(4);
    let mut gw0 = Gw::from_config(&cfg);
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let key = gw0.sa_key(1001, false);
    let mut lens = Vec::new();
    for size in sizes {
        let frame = from_host_a(size);
        let inner_len = 28 + size;
        let out = gw0.push("inside", std::slice::from_ref(&frame));
        assert_eq!(out.len(), 1, "align {want}, size {size}");
        let wire = &out[0].1;
        let esp = &wire[ETH + 20..];
        let plain = open_gcm128(&key, esp);
        let n = plain.len();
        assert_eq!(n % want, 0, "align {want}, size {size}: ESP payload of {n} bytes ends on the alignment");
        let pad = plain[n - 2] as usize;
        assert_eq!(plain[n - 1], 4, "next header IPv4");
        assert_eq!(n, inner_len + pad + 2, "align {want}, size {size}: payload + pad + 2");
        assert!(pad < want, "align {want}, size {size}: the least padding that aligns ({pad})");
        assert!(plain[inner_len..n - 2].iter().enumerate().all(|(i, &b)| b as usize == i + 1), "padding 1, 2, 3, … (RFC 4303 §2.4)");
        let expect = secgw::esp::outbound::tunnel_len(Algorithm::Aes128Gcm, 16, false, false, align.unwrap_or(0), inner_len);
        assert_eq!(wire.len() - ETH, expect, "align {want}, size {size}: wire size as the MTU arithmetic says");
        lens.push(n);

        let back = gw1.push("outside", std::slice::from_ref(wire));
        assert_eq!(back.len(), 1, "align {want}, size {size}: gw1 delivers");
        assert_eq!(&back[0].1[ETH + 28..], &frame[ETH + 28..], "align {want}, size {size}: payload");
    }
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0);
    lens
}

#[test]
fn default_pads_to_four_bytes() {
    let lens = run(None, 0..20);
    assert!(lens.iter().any(|l| l % 16 != 0), "the default is the algorithm's 4 bytes, not 16: {lens:?}");
}

#[test]
fn sixteen_gives_whole_blocks_for_every_length() {
    run(Some(16), 0..40);
}

#[test]
fn largest_alignment_keeps_padding_below_256() {
    // Inner 28 bytes + 2: 226 bytes of padding to reach 256; 254 + 2 → 0.
    let lens = run(Some(256), [0usize, 1, 225, 226, 227, 1000].into_iter());
    assert!(lens.iter().all(|l| l % 256 == 0), "{lens:?}");
}
