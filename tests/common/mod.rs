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
        self.cfg.sas.iter().find(|s| s.spi == spi && s.direction == dir).expect("SA").key.clone()
    }
}

pub fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
    v.try_into().unwrap()
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

/// ESP sealed by hand with AES-128-GCM (RFC 4106), with the `aes-gcm`
/// crate rather than the gateway's code: SPI ‖ seq ‖ `iv` ‖ ciphertext of
/// (`payload` ‖ padding 1, 2, … to 4 bytes ‖ pad length ‖ `nh`) ‖ 16-byte
/// ICV. `key` is the 16-byte AES key followed by the 4-byte salt.
pub fn seal_gcm_esp(key: &[u8], spi: u32, seq: u32, iv: [u8; 8], payload: &[u8], nh: u8) -> Vec<u8> {
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::KeyInit;
    let mut plain = payload.to_vec();
    let pad = (4 - (payload.len() + 2) % 4) % 4;
    plain.extend((1..=pad).map(|i| i as u8));
    plain.push(pad as u8);
    plain.push(nh);
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&key[16..20]);
    nonce[4..].copy_from_slice(&iv);
    let mut esp = spi.to_be_bytes().to_vec();
    esp.extend_from_slice(&seq.to_be_bytes());
    let tag = aes_gcm::Aes128Gcm::new_from_slice(&key[..16]).unwrap().encrypt_in_place_detached((&nonce).into(), &esp, &mut plain).unwrap();
    esp.extend_from_slice(&iv);
    esp.extend_from_slice(&plain);
    esp.extend_from_slice(&tag);
    esp
}
