//! TFC padding on the sender (RFC 4303 §2.7): an outbound tunnel SA with
//! `tfc_pad_to` pads inner packets shorter than that with zeros before
//! encryption. gw0 (configs/ep0.toml with `tfc_pad_to` on SA 1001) → gw1
//! (ep1.toml unchanged): the ESP payload, opened with the `aes-gcm` crate
//! directly, is the inner packet followed by zeros up to `tfc_pad_to`
//! bytes (longer packets untouched), and gw1, which finds the end from the
//! inner IPv4 total length, delivers exactly the packet hostA sent.

mod common;
use common::{eth, mac, open_gcm128, udp_packet, Gw};
use std::net::Ipv4Addr;

const ETH: usize = 14;
const PAD_TO: usize = 300;

fn from_host_a(size: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..size).map(|i| i as u8 | 1).collect();
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &udp_packet(Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 10), 0, 64, 40000, 5001, &payload))
}

#[test]
fn tfc_padding_hides_the_length_and_is_stripped_by_the_peer() {
    let cfg = common::edited_config("ep0.toml", "tfc", |t| t.replacen("spi = 1001\n", &format!("spi = 1001\ntfc_pad_to = {PAD_TO}\n"), 1));
    let mut gw0 = Gw::from_config(&cfg);
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let key = gw0.sa_key(1001, false);
    let mut wire_sizes = Vec::new();
    for size in [0usize, 1, 100, PAD_TO - 28 - 1, PAD_TO - 28, PAD_TO - 28 + 1, 1000] {
        let mut frame = from_host_a(size);
        // Ethernet padding after the IP packet must not leak into the pad.
        frame.extend_from_slice(&[0xee; 6]);
        let out = gw0.push("inside", std::slice::from_ref(&frame));
        assert_eq!(out.len(), 1, "size {size}");
        let esp = &out[0].1[ETH + 20..];
        let plain = open_gcm128(&key, esp);
        let pad = plain[plain.len() - 2] as usize;
        assert_eq!(plain[plain.len() - 1], 4, "next header IPv4");
        let payload = &plain[..plain.len() - 2 - pad];
        let inner_len = 28 + size;
        assert_eq!(payload.len(), inner_len.max(PAD_TO), "size {size}: ESP payload padded to {PAD_TO}");
        let sent = &frame[ETH..ETH + inner_len];
        assert_eq!((&payload[..8], payload[8], &payload[12..inner_len]), (&sent[..8], sent[8] - 1, &sent[12..]), "size {size}: the inner packet (TTL − 1)");
        assert!(payload[inner_len..].iter().all(|&b| b == 0), "size {size}: TFC padding is zeros");
        wire_sizes.push(out[0].1.len());

        let back = gw1.push("outside", std::slice::from_ref(&out[0].1));
        assert_eq!(back.len(), 1, "size {size}: gw1 delivers");
        assert_eq!(back[0].1.len(), ETH + inner_len, "size {size}: gw1 strips the TFC padding");
        assert_eq!(&back[0].1[ETH + 28..], &frame[ETH + 28..ETH + inner_len], "size {size}: payload");
    }
    assert!(wire_sizes[..4].iter().all(|&s| s == wire_sizes[0]), "short packets all the same size on the wire: {wire_sizes:?}");
    assert!(wire_sizes[6] > wire_sizes[0], "a packet over tfc_pad_to keeps its own size: {wire_sizes:?}");
    assert_eq!(gw1.stats().drops.values().sum::<u64>(), 0);
    let sa = gw0.stats().sas.into_iter().find(|s| s.spi == 1001 && s.direction == "outbound").unwrap();
    assert_eq!(sa.bytes, [0usize, 1, 100, 271, 272, 273, 1000].iter().map(|s| 28 + *s as u64).sum::<u64>(), "SA bytes count inner packets, not padding");
}
