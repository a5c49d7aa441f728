//! `esp::inbound::finish_with_header`: the inner header's fields reported
//! by tunnel-mode decapsulation.
//!
//! The worker now takes the inner packet's selectors (addresses, protocol,
//! ports; RFC 4301 §5.2), TTL / hop limit and length from what
//! `finish_with_header` read out of the header it has just validated,
//! instead of parsing the decrypted header a second time. So those fields
//! must be exactly what the sender put there. Every inner packet here is
//! built by hand, byte by byte (not with the crate's `wire` builders), and
//! each is checked against the values written into it, never against the
//! crate's own parser:
//!
//! * a table of IPv4 (UDP, TCP, ICMP, a later fragment, a first fragment,
//!   IP options, UDP with 3 and with 4 payload bytes) and IPv6 (UDP,
//!   Hop-by-Hop then TCP, Routing + Destination Options then UDP, first
//!   and later fragments, ICMPv6, UDP with 3 payload bytes) packets, each
//!   with its own TTL / hop limit, through an IPv4 and an IPv6 outer SA,
//!   AES-128-GCM and AES-128-CBC + HMAC-SHA-256, with and without TFC
//!   padding (RFC 4303 §2.7: zeros after the packet must neither give
//!   ports nor change the length): `finish_with_header` gives the expected
//!   `InnerHeader`, a frame of Ethernet + the inner packet exactly as
//!   built, byte for byte the frame plain `finish` gives for the same ESP
//!   packet (on a second, fresh inbound state), and it moves the replay
//!   window as `finish` does;
//! * IPv6 inner packets whose extension-header chain does not walk
//!   (a Hop-by-Hop header running past the packet, Hop-by-Hop not first,
//!   too many headers, a truncated Fragment header): plain `finish`
//!   delivers them, `finish_with_header` refuses them with `BadInner`;
//! * a tampered ICV is still `AuthFailed` from `finish_with_header`, and
//!   leaves the window so that the genuine packet is then accepted.

mod common;
use common::{eth, mac, run_one};
use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
use secgw::crypto::{Algorithm, CryptoDevice, CryptoOp, QpConf};
use secgw::esp::inbound::InnerHeader;
use secgw::esp::{self, EspError, InboundSa, InboundState, OutboundSa, OutboundState, SessionCache};
use secgw::io::PktBuf;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const ETH: usize = 14;
const ALGS: [Algorithm; 2] = [Algorithm::Aes128Gcm, Algorithm::Aes128CbcHmacSha256];
/// No TFC padding, and padding every inner packet here to 300 bytes.
const TFC: [usize; 2] = [0, 300];

const V4_SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const V4_DST: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 20);
const V6_SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x10);
const V6_DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 0x20);

// ---- hand-built inner packets -------------------------------------------

/// An IPv4 packet from `V4_SRC` to `V4_DST`: IHL from `options` (a
/// multiple of 4 bytes), identification 0x4242, header checksum computed
/// by the test's own `common::ip_checksum`.
fn ipv4(tos: u8, ttl: u8, protocol: u8, flags_frag: u16, options: &[u8], payload: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let hl = 20 + options.len();
    let total = hl + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x40 | (hl / 4) as u8;
    p[1] = tos;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x4242u16.to_be_bytes());
    p[6..8].copy_from_slice(&flags_frag.to_be_bytes());
    p[8] = ttl;
    p[9] = protocol;
    p[12..16].copy_from_slice(&V4_SRC.octets());
    p[16..20].copy_from_slice(&V4_DST.octets());
    p[20..hl].copy_from_slice(options);
    let ck = common::ip_checksum(&p[..hl]);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    assert_eq!(common::ip_checksum(&p[..hl]), 0, "the test's own header checksum");
    p[hl..].copy_from_slice(payload);
    p
}

/// An IPv6 packet from `V6_SRC` to `V6_DST`, flow label 0x12345, first
/// next header `nh`; `payload` is the extension headers and upper layer.
fn ipv6(tc: u8, hop_limit: u8, nh: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    let word: u32 = 6 << 28 | (tc as u32) << 20 | 0x12345;
    p[0..4].copy_from_slice(&word.to_be_bytes());
    p[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    p[6] = nh;
    p[7] = hop_limit;
    p[8..24].copy_from_slice(&V6_SRC.octets());
    p[24..40].copy_from_slice(&V6_DST.octets());
    p.extend_from_slice(payload);
    p
}

/// A UDP header (length covering `data`, checksum field 0: tunnel mode
/// does not look at it) then `data`.
fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    u
}

/// A 20-byte TCP SYN header then `data`.
fn tcp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&0x0102_0304u32.to_be_bytes()); // sequence number
    t.extend_from_slice(&0u32.to_be_bytes()); // acknowledgment number
    t.extend_from_slice(&[0x50, 0x02]); // data offset 5, SYN
    t.extend_from_slice(&0xfaf0u16.to_be_bytes()); // window
    t.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    t.extend_from_slice(data);
    t
}

/// An 8-byte Hop-by-Hop / Destination Options header (RFC 8200 §4.3,
/// §4.6): next header `nh`, Hdr Ext Len `ext_len` (as written; 0 for these
/// 8 bytes), one PadN option of 4 bytes.
fn opts_header(nh: u8, ext_len: u8) -> Vec<u8> {
    vec![nh, ext_len, 1, 4, 0, 0, 0, 0]
}

/// An 8-byte Routing header (RFC 8200 §4.4): type 4 (segment routing),
/// segments left 0, no addresses.
fn routing_header(nh: u8) -> Vec<u8> {
    vec![nh, 0, 4, 0, 0, 0, 0, 0]
}

/// A Fragment header (RFC 8200 §4.5): offset in 8-byte units, M flag.
fn fragment_header(nh: u8, offset: u16, more: bool) -> Vec<u8> {
    let word = offset << 3 | more as u16;
    let mut f = vec![nh, 0];
    f.extend_from_slice(&word.to_be_bytes());
    f.extend_from_slice(&0xdead_beefu32.to_be_bytes());
    f
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

struct Case {
    name: &'static str,
    pkt: Vec<u8>,
    want: InnerHeader,
}

fn v4_case(name: &'static str, pkt: Vec<u8>, protocol: u8, ports: Option<(u16, u16)>, ttl: u8) -> Case {
    let want = InnerHeader { src: IpAddr::V4(V4_SRC), dst: IpAddr::V4(V4_DST), protocol, ports, ttl, len: pkt.len() };
    Case { name, pkt, want }
}

fn v6_case(name: &'static str, pkt: Vec<u8>, protocol: u8, ports: Option<(u16, u16)>, ttl: u8) -> Case {
    let want = InnerHeader { src: IpAddr::V6(V6_SRC), dst: IpAddr::V6(V6_DST), protocol, ports, ttl, len: pkt.len() };
    Case { name, pkt, want }
}

const DF: u16 = 0x4000;
const MF: u16 = 0x2000;

/// The inner packets and what their headers say, by construction. TTLs /
/// hop limits are all different (checked in the test).
fn cases() -> Vec<Case> {
    vec![
        // IPv4. TOS 0x2a = AF11 + ECT(0): the outer header copies it, so
        // decapsulation leaves it as it is.
        v4_case("ipv4 udp", ipv4(0x2a, 61, 17, DF, &[], &udp(40000, 53, &[0x11; 12])), 17, Some((40000, 53)), 61),
        v4_case("ipv4 tcp", ipv4(0, 62, 6, DF, &[], &tcp(12345, 443, b"hello")), 6, Some((12345, 443)), 62),
        v4_case("ipv4 icmp echo", ipv4(0, 63, 1, 0, &[], &[&[8u8, 0, 0x12, 0x34, 0, 7, 0, 1][..], &[0x61; 16]].concat()), 1, None, 63),
        // A later fragment of a UDP datagram (offset 185 × 8 = 1480, MF):
        // its first bytes look like ports but are the middle of the data.
        v4_case("ipv4 udp later fragment", ipv4(0, 64, 17, MF | 185, &[], &[&[0x9c, 0x40, 0x00, 0x35][..], &[0x22; 20]].concat()), 17, None, 64),
        // The first fragment (offset 0, MF) carries the UDP header.
        v4_case("ipv4 udp first fragment", ipv4(0, 71, 17, MF, &[], &udp(7000, 7001, &[0x33; 16])), 17, Some((7000, 7001)), 71),
        // IHL 6: a Router Alert option (RFC 2113) before the UDP header.
        v4_case("ipv4 options udp", ipv4(0, 65, 17, 0, &[0x94, 0x04, 0x00, 0x00], &udp(5000, 5001, &[0x44; 4])), 17, Some((5000, 5001)), 65),
        v4_case("ipv4 udp 3 payload bytes", ipv4(0, 66, 17, 0, &[], &[0x13, 0x88, 0x13]), 17, None, 66),
        v4_case("ipv4 udp 4 payload bytes", ipv4(0, 72, 17, 0, &[], &[0x13, 0x88, 0x13, 0x89]), 17, Some((5000, 5001)), 72),
        // IPv6.
        v6_case("ipv6 udp", ipv6(0x2a, 67, 17, &udp(50000, 4500, &[0x55; 10])), 17, Some((50000, 4500)), 67),
        v6_case("ipv6 hop-by-hop tcp", ipv6(0, 68, 0, &cat(&[&opts_header(6, 0), &tcp(33333, 22, &[])])), 6, Some((33333, 22)), 68),
        v6_case(
            "ipv6 routing + destination options udp",
            ipv6(0, 74, 43, &cat(&[&routing_header(60), &opts_header(17, 0), &udp(1234, 5678, &[0x66; 8])])),
            17,
            Some((1234, 5678)),
            74,
        ),
        v6_case("ipv6 udp first fragment", ipv6(0, 69, 44, &cat(&[&fragment_header(17, 0, true), &udp(6000, 6001, &[0x77; 16])])), 17, Some((6000, 6001)), 69),
        // Offset 4 × 8 = 32: the next header names UDP, but what follows
        // is the middle of its data.
        v6_case(
            "ipv6 udp later fragment",
            ipv6(0, 73, 44, &cat(&[&fragment_header(17, 4, false), &[0x17, 0x70, 0x17, 0x71], &[0x88; 12]])),
            17,
            None,
            73,
        ),
        v6_case("ipv6 icmpv6 echo", ipv6(0xb8, 70, 58, &[&[128u8, 0, 0x56, 0x78, 0, 9, 0, 1][..], &[0x62; 24]].concat()), 58, None, 70),
        v6_case("ipv6 udp 3 payload bytes", ipv6(0, 75, 17, &[0x13, 0x88, 0x13]), 17, None, 75),
    ]
}

// ---- a tunnel: outbound SA → ESP packet → inbound SA --------------------

struct Tunnel {
    name: String,
    qp: SoftQueuePair<PktBuf>,
    osa: OutboundSa,
    ost: OutboundState,
    isa: InboundSa,
    cache: SessionCache,
    _dev: SoftDevice,
}

impl Tunnel {
    fn new(alg: Algorithm, v6_outer: bool, tfc_pad_to: usize) -> Tunnel {
        let dev = SoftDevice::new(1);
        let qp = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
        let (src, dst): (IpAddr, IpAddr) = if v6_outer {
            ("2001:db8:ff::1".parse().unwrap(), "2001:db8:ff::2".parse().unwrap())
        } else {
            ("203.0.113.1".parse().unwrap(), "203.0.113.2".parse().unwrap())
        };
        let (mut osa, isa) = common::tunnel_sas(&dev, alg, src, dst);
        osa.tfc_pad_to = tfc_pad_to;
        let name = format!("{} outer {} tfc {tfc_pad_to}", alg.name(), if v6_outer { "ipv6" } else { "ipv4" });
        Tunnel { name, qp, osa, ost: OutboundState::default(), isa, cache: SessionCache::default(), _dev: dev }
    }

    fn v6_outer(&self) -> bool {
        self.osa.tunnel_src.is_ipv6()
    }

    /// Ethernet + `inner` sealed with the outbound SA (next sequence
    /// number): the ESP packet's frame as it goes on the wire.
    fn seal(&mut self, inner: &[u8]) -> Vec<u8> {
        let ethertype = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
        let frame = eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), ethertype, inner);
        let mut buf = PktBuf::new();
        assert!(buf.copy_from(&frame));
        let op = esp::outbound::prepare(&self.osa, &mut self.ost, buf).map_err(|e| e.0).unwrap();
        let out = esp::outbound::finish(run_one(&mut self.qp, op)).map_err(|e| e.0).unwrap();
        out.frame().to_vec()
    }

    /// The outer header's DS + ECN byte as received (IPv4 TOS or IPv6
    /// traffic class), read at its fixed offset.
    fn outer_tos(&self, wire: &[u8]) -> u8 {
        if self.v6_outer() {
            wire[ETH] << 4 | wire[ETH + 1] >> 4
        } else {
            wire[ETH + 1]
        }
    }

    /// Inbound prepare of the ESP packet `wire` on `ist`, and the crypto.
    fn open_op(&mut self, ist: &InboundState, wire: &[u8]) -> Result<CryptoOp<PktBuf>, EspError> {
        let mut buf = PktBuf::new();
        assert!(buf.copy_from(wire));
        let esp_offset = ETH + if self.v6_outer() { 40 } else { 20 };
        let op = esp::inbound::prepare(&self.isa, ist, buf, esp_offset).map_err(|e| e.0)?;
        Ok(run_one(&mut self.qp, op))
    }

    fn open_with_header(&mut self, ist: &mut InboundState, wire: &[u8]) -> Result<(Vec<u8>, InnerHeader), EspError> {
        let tos = self.outer_tos(wire);
        let op = self.open_op(ist, wire)?;
        let (buf, h) = esp::inbound::finish_with_header(ist, op, tos, &mut self.cache).map_err(|e| e.0)?;
        Ok((buf.frame().to_vec(), h))
    }

    fn open_plain(&mut self, ist: &mut InboundState, wire: &[u8]) -> Result<Vec<u8>, EspError> {
        let tos = self.outer_tos(wire);
        let op = self.open_op(ist, wire)?;
        let buf = esp::inbound::finish(ist, op, tos).map_err(|e| e.0)?;
        Ok(buf.frame().to_vec())
    }
}

/// Every algorithm × outer family × TFC padding combination.
fn tunnels() -> Vec<Tunnel> {
    let mut t = Vec::new();
    for alg in ALGS {
        for v6_outer in [false, true] {
            for tfc in TFC {
                t.push(Tunnel::new(alg, v6_outer, tfc));
            }
        }
    }
    t
}

// ---- tests ----------------------------------------------------------------

#[test]
fn finish_with_header_reports_the_fields_as_built() {
    let cases = cases();
    let mut ttls: Vec<u8> = cases.iter().map(|c| c.want.ttl).collect();
    ttls.sort_unstable();
    ttls.dedup();
    assert_eq!(ttls.len(), cases.len(), "every case has its own TTL / hop limit");
    let mut checked = 0;
    for mut t in tunnels() {
        // `a` opens with finish_with_header, `b` (a fresh state for the
        // same SA) opens the very same ESP packets with plain finish.
        let mut ist_a = InboundState::new(&t.isa);
        let mut ist_b = InboundState::new(&t.isa);
        for c in &cases {
            let name = format!("{}: {}", t.name, c.name);
            let wire = t.seal(&c.pkt);
            let (frame, h) = t.open_with_header(&mut ist_a, &wire).unwrap_or_else(|e| panic!("{name}: finish_with_header: {e:?}"));
            assert_eq!(h, c.want, "{name}: inner header");
            assert_eq!(h.ttl, c.pkt[if c.pkt[0] >> 4 == 4 { 8 } else { 7 }], "{name}: TTL as sent, not decremented");
            assert_eq!(frame.len(), ETH + c.pkt.len(), "{name}: frame length (TFC padding dropped)");
            assert_eq!(&frame[ETH..], &c.pkt[..], "{name}: Ethernet + the inner packet exactly as built");
            let plain = t.open_plain(&mut ist_b, &wire).unwrap_or_else(|e| panic!("{name}: finish: {e:?}"));
            assert_eq!(frame, plain, "{name}: the same frame as plain finish");
            // The window moved as with finish: the packet is now a replay.
            assert_eq!(t.open_op(&ist_a, &wire).err(), Some(EspError::Replay), "{name}: replayed after finish_with_header");
            assert_eq!(t.open_op(&ist_b, &wire).err(), Some(EspError::Replay), "{name}: replayed after finish");
            checked += 1;
        }
    }
    assert_eq!(checked, ALGS.len() * 2 * TFC.len() * cases.len());
}

#[test]
fn broken_ipv6_extension_chain_is_bad_inner_only_with_header() {
    let tcp_seg = tcp(1111, 2222, &[]);
    let too_many: Vec<u8> = {
        // One Destination Options header more than the walk follows.
        let n = secgw::wire::ipv6::MAX_EXT_HEADERS + 1;
        let mut p: Vec<u8> = (0..n).flat_map(|i| opts_header(if i + 1 == n { 17 } else { 60 }, 0)).collect();
        p.extend(udp(1, 2, &[0; 8]));
        p
    };
    let broken = [
        // Hdr Ext Len 10: (10 + 1) × 8 = 88 bytes, in a 16-byte payload.
        ("hop-by-hop past the end", ipv6(0, 80, 0, &cat(&[&opts_header(6, 10), &[0x99; 8]]))),
        // Hop-by-Hop must come first (RFC 8200 §4.1).
        ("hop-by-hop not first", ipv6(0, 81, 60, &cat(&[&opts_header(0, 0), &opts_header(6, 0), &tcp_seg]))),
        ("too many extension headers", ipv6(0, 82, 60, &too_many)),
        // A Fragment header is 8 bytes; the payload has 4.
        ("truncated fragment header", ipv6(0, 83, 44, &[17, 0, 0, 1])),
    ];
    for mut t in tunnels() {
        let mut ist_a = InboundState::new(&t.isa);
        let mut ist_b = InboundState::new(&t.isa);
        for (what, pkt) in &broken {
            let name = format!("{}: {what}", t.name);
            let wire = t.seal(pkt);
            let frame = t.open_plain(&mut ist_b, &wire).unwrap_or_else(|e| panic!("{name}: plain finish refused it: {e:?}"));
            assert_eq!(&frame[ETH..], &pkt[..], "{name}: plain finish delivers the packet as built");
            let r = t.open_with_header(&mut ist_a, &wire);
            assert_eq!(r.err(), Some(EspError::BadInner), "{name}: finish_with_header");
        }
    }
}

#[test]
fn tampered_icv_is_auth_failed_with_header() {
    let pkts = [
        ipv4(0, 90, 17, DF, &[], &udp(40000, 53, &[0x11; 12])),
        ipv6(0, 91, 0, &cat(&[&opts_header(6, 0), &tcp(33333, 22, &[])])),
    ];
    for mut t in tunnels() {
        let mut ist = InboundState::new(&t.isa);
        for pkt in &pkts {
            let name = format!("{}: inner ipv{}", t.name, pkt[0] >> 4);
            let wire = t.seal(pkt);
            let mut bad = wire.clone();
            *bad.last_mut().unwrap() ^= 0x01; // the ICV's last byte
            assert_eq!(t.open_with_header(&mut ist, &bad).err(), Some(EspError::AuthFailed), "{name}: tampered ICV");
            // The failed packet did not move the window: the genuine one
            // with the same sequence number still goes through.
            let (frame, h) = t.open_with_header(&mut ist, &wire).unwrap_or_else(|e| panic!("{name}: genuine after tampered: {e:?}"));
            assert_eq!(&frame[ETH..], &pkt[..], "{name}");
            assert_eq!(h.ttl, if pkt[0] >> 4 == 4 { 90 } else { 91 }, "{name}: TTL");
        }
    }
}

/// Order of the checks after decryption: an outer CE mark over a Not-ECT
/// inner packet (RFC 6040 §4.2: drop) is `EcnDrop` whether or not the inner
/// IPv6 extension-header chain walks; the chain is judged only for a packet
/// ECN lets through (then `BadInner`, as in the test above).
#[test]
fn ecn_drop_comes_before_a_broken_extension_chain() {
    const CE: u8 = 0b11;
    let broken = ipv6(0, 90, 0, &cat(&[&opts_header(6, 10), &[0x99; 8]]));
    let good = ipv6(0, 91, 17, &udp(7, 8, &[1, 2, 3, 4]));
    let mut checked = 0;
    for mut t in tunnels() {
        let mut ist = InboundState::new(&t.isa);
        for (what, pkt, not_ce) in [("broken chain", &broken, Err(EspError::BadInner)), ("good chain", &good, Ok(91u8))] {
            let name = format!("{}: {what}", t.name);
            // Outer CE over a Not-ECT inner packet: dropped for ECN first.
            let wire = t.seal(pkt);
            let op = t.open_op(&ist, &wire).unwrap();
            let r = esp::inbound::finish_with_header(&mut ist, op, CE, &mut t.cache).map(|(_, h)| h.ttl).map_err(|e| e.0);
            assert_eq!(r, Err(EspError::EcnDrop), "{name}, outer CE");
            // Outer Not-ECT: ECN lets it through and the chain decides.
            let wire = t.seal(pkt);
            let op = t.open_op(&ist, &wire).unwrap();
            let r = esp::inbound::finish_with_header(&mut ist, op, 0, &mut t.cache).map(|(_, h)| h.ttl).map_err(|e| e.0);
            assert_eq!(r, not_ce, "{name}, outer Not-ECT");
            checked += 1;
        }
    }
    assert_eq!(checked, tunnels().len() * 2);
}
