//! Shared test helpers: hand-built packets and a one-worker wrapper around
//! `secgw::testkit::MemGateway`.
#![allow(dead_code)]

pub mod vectors;

use secgw::control::stats;
use secgw::crypto::soft::SoftQueuePair;
use secgw::dataplane::Worker;
use secgw::io::mem::MemPort;
use secgw::io::PktBuf;
pub use secgw::testkit::MemGateway;
use std::net::Ipv4Addr;

/// One-worker gateway: a [`MemGateway`] driven on worker 0.
pub struct Gw {
    pub inner: MemGateway,
    pub cfg: secgw::config::Config,
}

impl Gw {
    pub fn from_config(path: &str) -> Gw {
        let inner = MemGateway::from_config(path);
        let cfg = inner.cfg.clone();
        Gw { inner, cfg }
    }

    pub fn worker(&mut self) -> &mut Worker<MemPort, SoftQueuePair<PktBuf>> {
        &mut self.inner.workers[0]
    }

    /// Injects `frames` on port `name`, runs until idle, returns what each
    /// port sent as (port name, frame).
    pub fn push(&mut self, name: &str, frames: &[Vec<u8>]) -> Vec<(String, Vec<u8>)> {
        for f in frames {
            self.inner.inject(0, name, f);
        }
        self.inner.run().into_iter().map(|(_, p, f)| (p, f)).collect()
    }

    pub fn stats(&self) -> stats::Snapshot {
        self.inner.stats()
    }

    pub fn drop_count(&self, reason: &str) -> u64 {
        self.stats().drops[reason]
    }

    pub fn sa_key(&self, spi: u32, inbound: bool) -> Vec<u8> {
        let dir = if inbound { secgw::config::model::Direction::Inbound } else { secgw::config::model::Direction::Outbound };
        self.cfg.sas.iter().find(|s| s.spi == spi && s.direction == dir).expect("SA").key.to_vec()
    }
}

pub fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
    v.try_into().unwrap()
}

/// Runs one op through the synchronous soft queue pair `qp`: enqueued,
/// completed, returned.
pub fn run_one(qp: &mut SoftQueuePair<PktBuf>, op: secgw::crypto::CryptoOp<PktBuf>) -> secgw::crypto::CryptoOp<PktBuf> {
    use secgw::crypto::QueuePair;
    let mut ops = vec![op];
    assert_eq!(qp.enqueue_burst(&mut ops), 1);
    let mut out = Vec::new();
    assert_eq!(qp.dequeue_burst(&mut out, 1), 1);
    out.pop().unwrap()
}

/// One's-complement sum, folded, not inverted (RFC 1071), written here so
/// the tests do not share the gateway's checksum code.
pub fn sum(data: &[u8], mut acc: u32) -> u32 {
    for c in data.chunks(2) {
        acc += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// An IPv4 header checksum over 20 bytes.
pub fn ip_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in h.chunks(2) {
        s += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Gives IPv4 packet `ip` four bytes of options (three NOPs and an End
/// of Options List: IHL 6) and its new total length; the header checksum
/// is left for [`set_ipv4_checksum`].
pub fn add_ipv4_options(ip: &mut Vec<u8>) {
    ip.splice(20..20, [1u8, 1, 1, 0]);
    ip[0] = 0x46;
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
}

/// Writes the header checksum of IPv4 packet `ip` (header length from its
/// IHL).
pub fn set_ipv4_checksum(ip: &mut [u8]) {
    let hl = (ip[0] & 0xf) as usize * 4;
    ip[10..12].fill(0);
    let ck = ip_checksum(&ip[..hl]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
}

/// The ICMPv6 checksum of `msg` from `src` to `dst`, over the IPv6
/// pseudo-header (RFC 4443 §2.3, RFC 8200 §8.1).
pub fn icmpv6_checksum(src: &std::net::Ipv6Addr, dst: &std::net::Ipv6Addr, msg: &[u8]) -> u16 {
    let mut ph = Vec::new();
    ph.extend_from_slice(&src.octets());
    ph.extend_from_slice(&dst.octets());
    ph.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 58]);
    !(sum(msg, sum(&ph, 0)) as u16)
}

/// IPv4/UDP packet (no Ethernet), built by hand so the test does not share
/// the gateway's builders.
pub fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, tos: u8, ttl: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[1] = tos;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = ttl;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let ck = ip_checksum(&p[..20]);
    p[10..12].copy_from_slice(&ck.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    p
}

pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

pub type MultiGw = MemGateway;

/// Writes `text` to a fresh temp file named after `prefix` and `name`
/// (tests run in parallel: every call gets its own file); returns its path.
pub fn temp_config(prefix: &str, name: &str, text: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // `name` may be a path under configs/ ("bench/gw0.toml"): one file name.
    let name = name.replace('/', "-");
    let path = std::env::temp_dir().join(format!("secgw-{prefix}-{}-{n}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Opens the AES-128-GCM ESP packet `esp` (header ‖ IV ‖ ciphertext ‖
/// 16-byte ICV) with `key` (AES key ‖ 4-byte salt) using the `aes-gcm`
/// crate directly (RFC 4106: nonce = salt ‖ IV, AAD = SPI ‖ seq); returns
/// the payload + padding + trailer. Panics if the ICV does not verify.
pub fn open_gcm128(key: &[u8], esp: &[u8]) -> Vec<u8> {
    open_gcm128_esn(key, esp, None)
}

/// [`open_gcm128`] for an SA with extended sequence numbers when `seq_hi`
/// is given: AAD = SPI ‖ seq_hi ‖ seq_lo (RFC 4106 §5, RFC 4303 §2.2.1).
pub fn open_gcm128_esn(key: &[u8], esp: &[u8], seq_hi: Option<u32>) -> Vec<u8> {
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::{Aes128Gcm, KeyInit};
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&key[16..20]);
    nonce[4..].copy_from_slice(&esp[8..16]);
    let n = esp.len();
    let mut plain = esp[16..n - 16].to_vec();
    let tag = aes_gcm::Tag::clone_from_slice(&esp[n - 16..]);
    let mut aad = esp[..4].to_vec();
    if let Some(hi) = seq_hi {
        aad.extend_from_slice(&hi.to_be_bytes());
    }
    aad.extend_from_slice(&esp[4..8]);
    Aes128Gcm::new_from_slice(&key[..16])
        .unwrap()
        .decrypt_in_place_detached((&nonce).into(), &aad, &mut plain, &tag)
        .expect("ICV verifies with the peer's key");
    plain
}

/// Seals `payload` as an AES-GCM ESP packet (SPI ‖ seq ‖ IV ‖ ciphertext ‖
/// 16-byte ICV) with `key` (AES-128 or AES-256 key ‖ salt) by
/// [`secgw::testkit::seal_esp_gcm`] (the `aes-gcm` crate): padding 1, 2, 3, … to 4 bytes, Next Header
/// `next_header`, IV = the 64-bit sequence number, AAD = SPI ‖ seq_lo or,
/// with `esn`, SPI ‖ seq_hi ‖ seq_lo (RFC 4106 §5). Only the low 32 bits of
/// `seq` go on the wire.
pub fn seal_gcm128(key: &[u8], spi: u32, seq: u64, esn: bool, payload: &[u8], next_header: u8) -> Vec<u8> {
    let mut plain = payload.to_vec();
    let pad = (4 - (plain.len() + 2) % 4) % 4;
    plain.extend((1..=pad).map(|i| i as u8));
    plain.extend_from_slice(&[pad as u8, next_header]);
    secgw::testkit::seal_esp_gcm(key, spi, seq, esn, &plain).expect("an AES-GCM key ‖ salt")
}

/// An Ethernet frame gw0 → gw1's outside port (testbed MACs) carrying the
/// 20-byte IPv4 header `hdr` with protocol `proto`, total length and
/// checksum set for `payload`, then `payload`.
pub fn to_gw1(hdr: &[u8], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut ip = hdr[..20].to_vec();
    ip.extend_from_slice(payload);
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[9] = proto;
    ip[10..12].copy_from_slice(&[0, 0]);
    let ck = ip_checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    eth(mac("02:00:00:00:01:02"), mac("02:00:00:00:00:02"), 0x0800, &ip)
}

/// `configs/<base>` with `edit` applied to its text, written to a fresh
/// temp file ([`temp_config`]); returns its path.
pub fn edited_config(base: &str, tag: &str, edit: impl FnOnce(String) -> String) -> String {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs").join(base)).unwrap();
    temp_config(tag, base, &edit(text))
}

/// Every frame a gateway received is accounted for: sent, counted under
/// one drop reason, merged into a reassembled datagram (each datagram
/// goes on as one frame: `frags_reassembled − reassembled`), or held by
/// the reassembler (`frags_pending`), or waiting for a next hop's MAC
/// (`neighbours.pending`); the ARP requests and Neighbor Solicitations the
/// gateway made itself are not counted as sent frames, nor are the ICMP
/// errors it built in the buffer of a packet it counted as a drop
/// (`icmp_sent`). For a gateway that
/// fragmented nothing itself (one packet leaving as several frames breaks
/// the count).
pub fn assert_accounted(s: &stats::Snapshot, what: &str) {
    assert_eq!(s.frags_sent, 0, "{what}: the gateway fragmented packets; the frame count does not apply");
    let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum::<u64>();
    let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum::<u64>() - s.neighbours.arp_requests - s.neighbours.ns_sent + s.neighbours.pending - s.icmp_sent;
    let drops: u64 = s.drops.values().sum();
    assert_eq!(
        rx + s.reassembled,
        tx + drops + s.frags_reassembled + s.frags_pending,
        "{what}: rx {rx} + reassembled {} = tx {tx} + drops {drops} + frags_reassembled {} + pending {} ({:?})",
        s.reassembled,
        s.frags_reassembled,
        s.frags_pending,
        s.drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>()
    );
}

/// The test keys of an SA of `alg` (key bytes i ^ 0x5a, auth key bytes
/// i ^ 0xa5, salt 1 2 3 4, the algorithm's default ICV length).
pub fn test_xform(alg: secgw::crypto::Algorithm, direction: secgw::crypto::CipherDirection) -> secgw::crypto::SymXform {
    secgw::crypto::SymXform {
        algorithm: alg,
        direction,
        key: (0..alg.key_len()).map(|i| i as u8 ^ 0x5a).collect(),
        salt: [1, 2, 3, 4],
        icv_len: alg.default_icv_len(),
        auth_key: (0..alg.auth_key_len()).map(|i| i as u8 ^ 0xa5).collect(),
    }
}

/// A tunnel-mode SA pair of `alg` on `dev` with the test keys, SPI 0x1234,
/// between `src` and `dst`: the outbound side (outer TTL 33, DF copied, no
/// ESN, no UDP encapsulation, no dummies, no TFC padding, the algorithm's
/// own padding) and the inbound side that opens it (replay window 64).
pub fn tunnel_sas(dev: &secgw::crypto::soft::SoftDevice, alg: secgw::crypto::Algorithm, src: std::net::IpAddr, dst: std::net::IpAddr) -> (secgw::esp::OutboundSa, secgw::esp::InboundSa) {
    use secgw::crypto::{CipherDirection, CryptoDevice};
    let osa = secgw::esp::OutboundSa {
        outer_ttl: 33,
        ..secgw::esp::OutboundSa::tunnel(0x1234, dev.session_create(&test_xform(alg, CipherDirection::Encrypt)).unwrap(), src, dst).unwrap()
    };
    let isa = secgw::esp::InboundSa::tunnel(0x1234, dev.session_create(&test_xform(alg, CipherDirection::Decrypt)).unwrap(), src, dst);
    (osa, isa)
}

/// An ICMP "fragmentation needed" (RFC 792, RFC 1191) from a router on the
/// wan (203.0.113.254) to `to`,
/// advertising `mtu`, quoting the first `quote` bytes of `ip` (an IPv4
/// packet gw0 sent), as an Ethernet frame into gw0's outside port.
pub fn frag_needed(to: std::net::Ipv4Addr, mtu: u16, ip: &[u8], quote: usize) -> Vec<u8> {
    let mut icmp = vec![3, 4, 0, 0, 0, 0];
    icmp.extend_from_slice(&mtu.to_be_bytes());
    icmp.extend_from_slice(&ip[..quote.min(ip.len())]);
    let ck = ip_checksum(&icmp);
    icmp[2..4].copy_from_slice(&ck.to_be_bytes());
    let mut h = vec![0x45, 0xc0, 0, 0, 0, 9, 0, 0, 255, 1, 0, 0];
    h.extend_from_slice(&std::net::Ipv4Addr::new(203, 0, 113, 254).octets());
    h.extend_from_slice(&to.octets());
    let total = (20 + icmp.len()) as u16;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    let ck = ip_checksum(&h);
    h[10..12].copy_from_slice(&ck.to_be_bytes());
    h.extend_from_slice(&icmp);
    eth(mac("02:00:00:00:00:02"), mac("02:00:00:00:aa:01"), 0x0800, &h)
}

/// Polls `f` every millisecond until it holds; panics naming `what` after
/// 5 s (a worker thread that never delivers, or never stops).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
