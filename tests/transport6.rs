//! IPv6 transport mode (RFC 4303 §3.1.1) against scapy: the packets of
//! tests/vectors/transport6.json were protected by scapy's
//! SecurityAssociation (tests/vectors/gen_transport6.py), with Hop-by-Hop,
//! Destination Options and Routing headers in the chain, for eight
//! algorithms.
//!
//! * Outbound: for counter-mode and NULL algorithms secgw's IV is the
//!   64-bit sequence number, which the generator gave scapy as well, so
//!   `esp::outbound::prepare` on the inner packet must produce scapy's packet
//!   byte for byte: same headers kept in front (a Destination Options header
//!   after a Routing header protected), Next Header 50 in the right place,
//!   payload length, padding, trailer, ICV. CBC IVs are unpredictable
//!   (RFC 3602 §3), so CBC cases are checked by opening our own packet
//!   instead, and the headers in front compared with scapy's.
//! * Inbound: every scapy packet opens (`esp::inbound::prepare` at the ESP
//!   offset, then `esp::transport::inbound_finish`) to exactly the inner
//!   packet scapy protected; with a flipped ICV bit it fails `AuthFailed`.
//! * Through the gateways (in-memory ports): configs/ep0-v6.toml and
//!   ep1-v6.toml with the IPv6-endpoint SAs 1101/1102 switched to transport
//!   mode; an IPv6 datagram with a Hop-by-Hop and a Destination Options
//!   header goes hostA → gw0 → gw1 → hostB: ESP after both (a Destination
//!   Options header without a Routing header stays in front) on the wan, opened with `aes-gcm` directly, and hostB gets the packet
//!   exactly, hop limit − 2; too big with its headers kept in front → Packet
//!   Too Big with the MTU that fits.

use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
use secgw::crypto::{Algorithm, CipherDirection, CryptoDevice, CryptoOp, QpConf, QueuePair, SymXform};
use secgw::esp::{self, EspError, InboundSa, InboundState, OutboundSa, OutboundState};
use secgw::io::PktBuf;

mod common;
use common::vectors::{h, json};
use common::{eth, mac, open_gcm128, temp_config, Gw};

const ETH: usize = 14;

struct Case {
    name: String,
    alg: Algorithm,
    key: Vec<u8>,
    auth_key: Vec<u8>,
    spi: u32,
    seq: u64,
    counter_iv: bool,
    inner: Vec<u8>,
    esp: Vec<u8>,
    esp_offset: usize,
}

fn cases() -> Vec<Case> {
    let doc = json("transport6.json");
    let cases: Vec<Case> = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_else(|| panic!("{k}")).to_owned();
            let name = s("algorithm");
            Case {
                name: s("name"),
                alg: *Algorithm::ALL.iter().find(|a| a.name() == name).unwrap_or_else(|| panic!("algorithm {name}")),
                key: h(&s("key")),
                auth_key: h(&s("auth_key")),
                spi: c["spi"].as_u64().unwrap() as u32,
                seq: c["seq"].as_u64().unwrap(),
                counter_iv: c["counter_iv"].as_bool().unwrap(),
                inner: h(&s("inner")),
                esp: h(&s("esp")),
                esp_offset: c["esp_offset"].as_u64().unwrap() as usize,
            }
        })
        .collect();
    assert!(cases.len() >= 64, "only {} cases", cases.len());
    cases
}

fn xform(c: &Case, direction: CipherDirection) -> SymXform {
    let klen = c.alg.key_len();
    let mut salt = [0u8; 4];
    salt[..c.key.len() - klen].copy_from_slice(&c.key[klen..]);
    SymXform { algorithm: c.alg, direction, key: c.key[..klen].to_vec(), salt, icv_len: c.alg.default_icv_len(), auth_key: c.auth_key.clone() }
}

fn frame(ip: &[u8]) -> PktBuf {
    let mut b = PktBuf::new();
    let mut f = vec![0u8; ETH];
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(ip);
    assert!(b.copy_from(&f));
    b
}

fn run(qp: &mut SoftQueuePair<PktBuf>, op: CryptoOp<PktBuf>) -> CryptoOp<PktBuf> {
    let mut ops = vec![op];
    assert_eq!(qp.enqueue_burst(&mut ops), 1);
    let mut out = Vec::new();
    assert_eq!(qp.dequeue_burst(&mut out, 1), 1);
    out.pop().unwrap()
}

/// A transport-mode outbound SA for case `c` (IVs as secgw makes them for
/// its algorithm).
fn outbound_sa(dev: &SoftDevice, c: &Case) -> OutboundSa {
    OutboundSa::transport(c.spi, dev.session_create(&xform(c, CipherDirection::Encrypt)).unwrap()).unwrap()
}

fn inbound_sa(dev: &SoftDevice, c: &Case) -> InboundSa {
    InboundSa::transport(c.spi, dev.session_create(&xform(c, CipherDirection::Decrypt)).unwrap())
}

/// Opens the ESP packet `ip` (ESP at `esp_offset`) with `sa`: the IPv6
/// packet inside, or the error.
fn open(qp: &mut SoftQueuePair<PktBuf>, sa: &InboundSa, ip: &[u8], esp_offset: usize) -> Result<Vec<u8>, EspError> {
    let mut st = InboundState::new(sa);
    let op = esp::inbound::prepare(sa, &st, frame(ip), ETH + esp_offset).map_err(|e| e.0)?;
    let op = run(qp, op);
    let buf = esp::transport::inbound_finish(&mut st, op).map_err(|e| e.0)?;
    Ok(buf.frame()[ETH..].to_vec())
}

#[test]
fn outbound_matches_scapy() {
    let dev = SoftDevice::new(1);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
    let (mut exact, mut opened) = (0, 0);
    for c in cases() {
        let sa = outbound_sa(&dev, &c);
        let mut st = OutboundState { seq: c.seq - 1, ..Default::default() };
        let op = esp::outbound::prepare(&sa, &mut st, frame(&c.inner)).map_err(|e| e.0).unwrap_or_else(|e| panic!("{}: {e:?}", c.name));
        let op = run(&mut qp, op);
        let out = esp::outbound::finish(op).map_err(|e| e.0).unwrap();
        let ours = &out.frame()[ETH..];
        if c.counter_iv {
            assert_eq!(hex::encode(ours), hex::encode(&c.esp), "{}: packet differs from scapy's", c.name);
            exact += 1;
        } else {
            assert_eq!(ours.len(), c.esp.len(), "{}: length", c.name);
            assert_eq!(ours[..c.esp_offset + 8], c.esp[..c.esp_offset + 8], "{}: headers in front, SPI, sequence number", c.name);
            let isa = inbound_sa(&dev, &c);
            assert_eq!(open(&mut qp, &isa, ours, c.esp_offset).unwrap(), c.inner, "{}: our CBC packet opens to the inner packet", c.name);
            opened += 1;
        }
    }
    assert!(exact >= 48 && opened >= 16, "exact {exact}, opened {opened}");
}

#[test]
fn inbound_opens_scapy_packets_and_rejects_tampering() {
    let dev = SoftDevice::new(1);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
    for c in cases() {
        let sa = inbound_sa(&dev, &c);
        let inner = open(&mut qp, &sa, &c.esp, c.esp_offset).unwrap_or_else(|e| panic!("{}: {e:?}", c.name));
        assert_eq!(hex::encode(inner), hex::encode(&c.inner), "{}: inner packet", c.name);
        let mut bad = c.esp.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(open(&mut qp, &sa, &bad, c.esp_offset), Err(EspError::AuthFailed), "{}", c.name);
    }
}

#[test]
fn fragments_and_broken_chains_are_refused() {
    let dev = SoftDevice::new(1);
    let c = &cases()[0];
    let sa = outbound_sa(&dev, c);
    // IPv6 + Fragment header (offset 0, M set) + UDP: a fragment.
    let mut frag = c.inner[..40].to_vec();
    frag[6] = 44;
    frag[4..6].copy_from_slice(&16u16.to_be_bytes());
    frag.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]);
    frag.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
    // Hop-by-Hop header whose length runs past the packet.
    let mut trunc = c.inner[..40].to_vec();
    trunc[6] = 0;
    trunc[4..6].copy_from_slice(&8u16.to_be_bytes());
    trunc.extend_from_slice(&[17, 4, 0, 0, 0, 0, 0, 0]);
    for (what, ip) in [("fragment", frag), ("truncated hop-by-hop", trunc)] {
        let mut st = OutboundState::default();
        let before = frame(&ip).frame().to_vec();
        let (e, back) = esp::outbound::prepare(&sa, &mut st, frame(&ip)).map(|_| ()).unwrap_err();
        assert_eq!(e, EspError::BadInner, "{what}");
        assert_eq!(back.frame(), &before[..], "{what}: frame given back unchanged");
        assert_eq!(st.seq, 0, "{what}: no sequence number used");
    }
}

/// `configs/<name>` with SAs 1101 and 1102 (IPv6 endpoints) in transport
/// mode: no tunnel_src/tunnel_dst.
fn v6_transport_config(name: &str) -> String {
    let text = std::fs::read_to_string(format!("configs/{name}")).unwrap();
    let mut out = String::new();
    for (i, block) in text.split("[[sa]]").enumerate() {
        if i > 0 {
            out.push_str("[[sa]]");
        }
        if block.contains("spi = 1101\n") || block.contains("spi = 1102\n") {
            let b = block.replacen("mode = \"tunnel\"", "mode = \"transport\"", 1);
            out.extend(b.split_inclusive('\n').filter(|l| !l.starts_with("tunnel_src") && !l.starts_with("tunnel_dst")));
        } else {
            out.push_str(block);
        }
    }
    assert_eq!(out.matches("mode = \"transport\"").count(), 2, "{name}: SAs 1101 and 1102 switched");
    temp_config("transport6", name, &out)
}

/// hostA → hostB IPv6: Hop-by-Hop (PadN), Destination Options (PadN), UDP
/// 40000 → 5001 with `n` payload bytes; hop limit 64.
fn v6_datagram(n: usize) -> Vec<u8> {
    let a: std::net::Ipv6Addr = "2001:db8:a::10".parse().unwrap();
    let b: std::net::Ipv6Addr = "2001:db8:b::10".parse().unwrap();
    let mut ip = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
    ip.extend_from_slice(&a.octets());
    ip.extend_from_slice(&b.octets());
    ip.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]); // Hop-by-Hop → Destination Options
    ip.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]); // Destination Options → UDP
    let udp_len = 8 + n;
    ip.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89]);
    ip.extend_from_slice(&(udp_len as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend((0..n).map(|i| (i * 7) as u8));
    let plen = (ip.len() - 40) as u16;
    ip[4..6].copy_from_slice(&plen.to_be_bytes());
    // UDP checksum over the IPv6 pseudo-header (RFC 8200 §8.1).
    let ck = secgw::wire::ipv6::upper_layer_checksum(&a, &b, 17, &ip[56..]);
    ip[62..64].copy_from_slice(&ck.to_be_bytes());
    ip
}

#[test]
fn through_the_gateways() {
    let mut gw0 = Gw::from_config(&v6_transport_config("ep0-v6.toml"));
    let mut gw1 = Gw::from_config(&v6_transport_config("ep1-v6.toml"));
    let key = h(gw0.cfg.sas.iter().find(|s| s.spi == 1101).map(|s| hex::encode(&s.key)).as_deref().unwrap());
    for (i, n) in [0usize, 1, 63, 200, 1000].into_iter().enumerate() {
        let ip = v6_datagram(n);
        let out = gw0.push("inside", &[eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x86dd, &ip)]);
        assert_eq!(out.len(), 1, "{n}: {out:?}");
        let (port, wan) = &out[0];
        assert_eq!(port, "outside");
        let w = &wan[ETH..];
        // Fixed header (hop limit − 1), Hop-by-Hop and Destination Options
        // kept; the last one's Next Header now 50.
        assert_eq!(w[6], 0, "{n}: fixed header still names Hop-by-Hop");
        assert_eq!(w[7], 63, "{n}: hop limit decremented once");
        assert_eq!(w[8..40], ip[8..40], "{n}: addresses");
        assert_eq!(w[40..48], ip[40..48], "{n}: Hop-by-Hop as sent");
        assert_eq!(w[48], 50, "{n}: Destination Options now names ESP");
        assert_eq!(w[49..56], ip[49..56], "{n}: Destination Options");
        assert_eq!(u16::from_be_bytes([w[4], w[5]]) as usize, w.len() - 40, "{n}: payload length");
        assert_eq!(w[56..60], 1101u32.to_be_bytes(), "{n}: SPI");
        assert_eq!(w[60..64], (i as u32 + 1).to_be_bytes(), "{n}: sequence number");
        // The encrypted part: UDP header + payload, then the trailer.
        let plain = open_gcm128(&key, &w[56..]);
        let (pad, nh) = (plain[plain.len() - 2] as usize, plain[plain.len() - 1]);
        assert_eq!(nh, 17, "{n}: trailer names UDP");
        assert_eq!(&plain[..plain.len() - 2 - pad], &ip[56..], "{n}: protected part");
        let back = gw1.push("outside", &[eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x86dd, w)]);
        assert_eq!(back.len(), 1, "{n}: {back:?} {:?}", gw1.stats().drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
        let (port, f) = &back[0];
        assert_eq!(port, "inside");
        let mut want = ip.clone();
        want[7] = 62;
        assert_eq!(hex::encode(&f[ETH..]), hex::encode(&want), "{n}: hostB gets the packet, hop limit − 2");
    }
    let s = gw1.stats();
    let sa = s.sas.iter().find(|x| x.spi == 1101).unwrap();
    assert_eq!(sa.packets, 5);
}

#[test]
fn too_big_with_headers_kept_gets_packet_too_big() {
    let mut gw0 = Gw::from_config(&v6_transport_config("ep0-v6.toml"));
    // AES-128-GCM transport, MTU 1500: 56 bytes kept in front (fixed
    // header, Hop-by-Hop, Destination Options), then ESP 8 + IV 8 +
    // encrypted part (4-byte aligned) + ICV 16.
    let fits = (1500 - 56 - 8 - 8 - 16) / 4 * 4 - 2 + 56;
    let ok = v6_datagram(fits - 64);
    assert_eq!(ok.len(), fits);
    let out = gw0.push("inside", &[eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x86dd, &ok)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, "outside");
    assert_eq!(out[0].1.len() - ETH, 1500, "fills the MTU exactly");
    let big = v6_datagram(fits - 64 + 1);
    let out = gw0.push("inside", &[eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x86dd, &big)]);
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, f) = &out[0];
    assert_eq!(port, "inside", "the error goes back to hostA");
    let icmp = &f[ETH + 40..];
    assert_eq!((icmp[0], icmp[1]), (2, 0), "ICMPv6 Packet Too Big");
    assert_eq!(u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]) as usize, fits, "MTU = the largest packet that fits");
    assert_eq!(gw0.stats().drops["mtu_exceeded"], 1);
}

/// Transport-mode ops take their session reference from the worker's
/// session cache as tunnel-mode ones do: once a finished op's reference is
/// back, the next op takes it without a new reference count (IPv6 and
/// IPv4 inner packets: both framings go through the same encapsulation).
#[test]
fn transport_ops_reuse_cached_session_references() {
    let dev = SoftDevice::new(1);
    let sa = outbound_sa(&dev, &cases()[0]);
    let mut st = OutboundState::default();
    let mut cache = esp::SessionCache::new(4);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
    let mut v4 = Vec::new();
    etherparse::PacketBuilder::ipv4([192, 0, 2, 10], [198, 51, 100, 10], 64).udp(1000, 2000).write(&mut v4, &[9u8; 40]).unwrap();
    for (name, ip) in [("IPv6", v6_datagram(60)), ("IPv4", v4)] {
        let mut b = frame(&ip);
        if ip[0] >> 4 == 4 {
            b.frame_mut()[12..14].copy_from_slice(&[0x08, 0x00]);
        }
        let op = esp::outbound::prepare_cached(&sa, &mut st, b, &mut cache).unwrap_or_else(|(e, _)| panic!("{name}: {e:?}"));
        assert!(std::sync::Arc::ptr_eq(&op.session, &sa.session));
        let _ = esp::outbound::finish_cached(run(&mut qp, op), &mut cache);
        assert_eq!(std::sync::Arc::strong_count(&sa.session), 2, "{name}: the SA's reference and the cached one");
        let op = esp::outbound::prepare_cached(&sa, &mut st, frame(&ip), &mut cache).map_err(|(e, _)| e).unwrap();
        assert_eq!(std::sync::Arc::strong_count(&sa.session), 2, "{name}: the op took the cached reference, no new count");
        let _ = esp::outbound::finish_cached(op, &mut cache);
    }
}
