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

use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
use secgw::crypto::{Algorithm, CipherDirection, CryptoDevice, CryptoOp, QpConf, QueuePair, SymXform};
use secgw::esp::{self, DfMode, EspError, InboundSa, InboundState, IvGen, OutboundSa, OutboundState};
use secgw::io::PktBuf;

mod common;
use common::vectors::{h, json};

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

fn inbound_sa(dev: &SoftDevice, c: &Case) -> InboundSa {
    InboundSa {
        spi: c.spi,
        session: dev.session_create(&xform(c, CipherDirection::Decrypt)).unwrap(),
        transport: true,
        tunnel_src: "::".parse().unwrap(),
        tunnel_dst: "::".parse().unwrap(),
        esn: false,
        replay_window: 64,
        owner: 0,
    }
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
        let sa = OutboundSa {
            spi: c.spi,
            session: dev.session_create(&xform(&c, CipherDirection::Encrypt)).unwrap(),
            transport: true,
            tunnel_src: "::".parse().unwrap(),
            tunnel_dst: "::".parse().unwrap(),
            outer_ttl: 64,
            df: DfMode::Copy,
            esn: false,
            iv_gen: IvGen::for_algorithm(c.alg).unwrap(),
            udp_encap: None,
            owner: 0,
        };
        let mut st = OutboundState { seq: c.seq - 1 };
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
    let sa = OutboundSa {
        spi: c.spi,
        session: dev.session_create(&xform(c, CipherDirection::Encrypt)).unwrap(),
        transport: true,
        tunnel_src: "::".parse().unwrap(),
        tunnel_dst: "::".parse().unwrap(),
        outer_ttl: 64,
        df: DfMode::Copy,
        esn: false,
        iv_gen: IvGen::counter(),
        udp_encap: None,
        owner: 0,
    };
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
