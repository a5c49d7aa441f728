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

/// A learned path MTU with no room for `tfc_pad_to` caps the padding: with
/// `tfc_pad_to = 1200` and a path MTU of 900, a short packet goes out
/// padded to the largest inner packet that fits 900 (846 bytes: 900 less
/// 20 outer, 8 ESP, 8 IV, 16 ICV and 2 trailer bytes, to 4) in an ESP
/// packet of exactly 900 bytes, not refused with an ICMP error; a packet of exactly that
/// size goes unpadded at 900; one byte more gets "fragmentation needed"
/// advertising 846. gw1 delivers each exactly.
#[test]
fn tfc_padding_is_capped_to_a_learned_path_mtu() {
    const PAD: usize = 1200;
    const FITS: usize = (900 - 20 - 8 - 8 - 16) / 4 * 4 - 2;
    let cfg = common::edited_config("ep0.toml", "tfc-pmtu", |t| t.replacen("spi = 1001\n", &format!("spi = 1001\ntfc_pad_to = {PAD}\n"), 1));
    let mut gw0 = Gw::from_config(&cfg);
    let mut gw1 = Gw::from_config("configs/ep1.toml");
    let key = gw0.sa_key(1001, false);
    // Before any report: padded to tfc_pad_to.
    let out = gw0.push("inside", &[from_host_a(100)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.len() - ETH, 20 + 8 + 8 + (PAD + 2).next_multiple_of(4) + 16, "padded to {PAD}");
    let esp = out[0].1[ETH..].to_vec();
    assert!(gw0.push("outside", &[common::frag_needed(Ipv4Addr::new(203, 0, 113, 1), 900, &esp, 28)]).is_empty());
    assert_eq!(gw0.drop_count("pmtu_update"), 1, "the report is taken");

    for (size, wire) in [(0usize, 900usize), (100, 900), (FITS - 28, 900)] {
        let frame = from_host_a(size);
        let out = gw0.push("inside", std::slice::from_ref(&frame));
        assert_eq!(out.len(), 1, "size {size}: one frame");
        assert_eq!((out[0].0.as_str(), out[0].1.len() - ETH), ("outside", wire), "size {size}: ESP of exactly the path MTU");
        let plain = open_gcm128(&key, &out[0].1[ETH + 20..]);
        let pad = plain[plain.len() - 2] as usize;
        let payload = &plain[..plain.len() - 2 - pad];
        assert_eq!(payload.len(), FITS, "size {size}: padded to {FITS}, not {PAD}");
        assert!(payload[28 + size..].iter().all(|&b| b == 0), "size {size}: zeros");
        let back = gw1.push("outside", std::slice::from_ref(&out[0].1));
        assert_eq!(back.len(), 1, "size {size}: gw1 delivers");
        assert_eq!(&back[0].1[ETH + 28..], &frame[ETH + 28..ETH + 28 + size], "size {size}: payload");
        assert_eq!(back[0].1.len(), ETH + 28 + size, "size {size}: padding stripped");
    }
    assert_eq!(gw0.drop_count("mtu_exceeded"), 0, "nothing that fits is refused");
    // One byte more than fits: refused, hostA told FITS.
    let out = gw0.push("inside", &[from_host_a(FITS - 28 + 1)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "inside", "the error goes back to hostA");
    let icmp = &out[0].1[ETH + 20..];
    assert_eq!((icmp[0], icmp[1], u16::from_be_bytes([icmp[6], icmp[7]]) as usize), (3, 4, FITS), "fragmentation needed, next-hop MTU {FITS}");
    assert_eq!(gw0.drop_count("mtu_exceeded"), 1);
    let _ = std::fs::remove_file(cfg);
}

/// The cap for every SA layout, outside the gateway: each algorithm (block
/// sizes 4 and 16, IVs of 0, 8 and 16 bytes, ICVs of 12 and 16), IPv4 and
/// IPv6 outer headers, with and without UDP encapsulation, `pad_align` 0,
/// 16 and 64, with `tfc_pad_to` 1400 and a path MTU stepped from 1500
/// down to each family's floor (`PathMtu::lower`): the padded packet
/// `prepare` builds for a 28-byte inner packet is never longer than the
/// path MTU, and is padded to `tfc_pad_to` or to the largest inner
/// packet that fits, whichever is less (`max_inner_len`, checked against
/// this test's own sum of the layout); and the worker's check
/// (`encapsulated_len`) passes every inner length up to that largest.
#[test]
fn the_cap_holds_for_every_layout() {
    use secgw::crypto::soft::SoftDevice;
    use secgw::crypto::Algorithm;
    use secgw::esp::{self, OutboundState, UdpEncap};
    use secgw::io::PktBuf;
    let dev = SoftDevice::new(1);
    let mut checked = 0;
    for alg in Algorithm::ALL {
        for v6 in [false, true] {
            let (src, dst): (std::net::IpAddr, std::net::IpAddr) =
                if v6 { ("2001:db8:ff::1".parse().unwrap(), "2001:db8:ff::2".parse().unwrap()) } else { ("203.0.113.1".parse().unwrap(), "203.0.113.2".parse().unwrap()) };
            for udp in [false, true] {
                for pad_align in [0usize, 16, 64] {
                    let floor: u16 = if v6 { 1280 } else { 552 };
                    for mtu in (floor..=1500).rev().step_by(61).chain([floor]) {
                        let (mut sa, _) = common::tunnel_sas(&dev, alg, src, dst);
                        sa.tfc_pad_to = 1400;
                        sa.pad_align = pad_align;
                        sa.udp_encap = udp.then_some(UdpEncap { sport: 4500, dport: 4500 });
                        assert!(sa.path_mtu.lower(mtu, 0, u64::MAX, 1501), "report of {mtu} taken");
                        let name = format!("{} v6={v6} udp={udp} pad_align={pad_align} mtu={mtu}", alg.name());
                        // This test's own sum: outer, UDP, ESP header, IV, ICV
                        // fixed; payload + 2 padded to the alignment.
                        let align = pad_align.max(alg.block_size());
                        let fixed = if v6 { 40 } else { 20 } + if udp { 8 } else { 0 } + 8 + alg.iv_len() + alg.default_icv_len();
                        let fits = (mtu as usize - fixed) / align * align - 2;
                        assert_eq!(esp::outbound::max_inner_len(&sa, 0, mtu as usize), fits, "{name}: largest inner packet");
                        assert_eq!(esp::outbound::tfc_target(&sa), fits.min(1400), "{name}: padding target");
                        for inner in [28, fits.min(1400), fits] {
                            assert!(esp::outbound::encapsulated_len(&sa, 0, inner) <= mtu as usize, "{name}: {inner} bytes pass the check");
                        }
                        let mut buf = PktBuf::new();
                        assert!(buf.copy_from(&from_host_a(0)));
                        let op = esp::outbound::prepare(&sa, &mut OutboundState::default(), buf).map_err(|e| e.0).unwrap();
                        let outer_len = op.buf.len() - ETH;
                        assert!(outer_len <= mtu as usize, "{name}: {outer_len} bytes on the wire");
                        let enc = fits.min(1400) + 2;
                        assert_eq!(outer_len, fixed + enc.next_multiple_of(align), "{name}: padded to {}", fits.min(1400));
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 1000, "{checked} layouts");
}
