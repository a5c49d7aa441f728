//! ESP outbound and inbound on one core, per crypto provider × algorithm ×
//! inner packet size (64, 512, 1420 bytes), each next to the raw crypto of
//! the same provider on the bytes ESP encrypts (payload + padding +
//! trailer, 8 bytes of AAD): ring's `LessSafeKey` seal/open with the tag
//! apart, RustCrypto's `aes-gcm` / `chacha20poly1305` AEADs (the RustCrypto
//! provider runs our own `aes`+`ctr`+`ghash` GCM: its line is compared with
//! the `aes-gcm` crate), `cbc`/`ctr` + a pre-keyed `hmac` for the
//! cipher+MAC algorithms, the MAC alone for NULL and `aes-gcm` with the
//! whole range as AAD for GMAC. Three ratio tables from one run: outbound
//! (ESP vs raw seal), inbound (ESP vs raw open) and ring's raw seal vs
//! RustCrypto's for the algorithms both run.
//!
//! One iteration of an ESP line: copy the frame into a packet buffer,
//! `prepare` → enqueue/dequeue on a soft queue pair → `finish`. Outbound
//! takes a 14 + size byte Ethernet/IPv4 frame; inbound takes the ESP frame
//! that outbound made (tunnel mode, outer IPv4) with the SA's replay window
//! off, so the same packet opens every time. A raw seal encrypts the same
//! buffer again and again in place; a raw open first copies the sealed
//! bytes back (the open decrypts in place), as ESP inbound copies its frame.
//!
//! `cargo bench --bench esp` (≈ 12 minutes on the 2-core machine: 148
//! lines of 0.3 s warm-up + 1 s measurement, plus criterion's analysis and
//! plots, ≈ 5 s a line); `cargo bench --bench esp --
//! esp_outbound` for one direction; the group `replay` times the
//! anti-replay window's check + commit (RFC 6479 bitmap) at windows 64 and
//! 4096, in order and in blocks of 32 arriving in reverse order (the two
//! sizes should cost the same).

use aes::cipher::generic_array::GenericArray;
use aes::cipher::inout::InOutBuf;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, InnerIvInit, KeyInit, StreamCipher};
use aes_gcm::aead::AeadInPlace;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hmac::{Hmac, Mac};
use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
use secgw::crypto::{Algorithm, CipherDirection, CryptoDevice, CryptoOp, Provider, ProviderChoice, QpConf, QueuePair, SymXform};
use secgw::esp::{self, InboundSa, InboundState, OutboundSa, OutboundState};
use secgw::io::PktBuf;
use std::time::Duration;

mod common;

const SIZES: [usize; 3] = [64, 512, 1420];

/// What runs: each provider with the algorithms it runs.
const CASES: [(Provider, Algorithm); 12] = [
    (Provider::Ring, Algorithm::Aes128Gcm),
    (Provider::Ring, Algorithm::Aes256Gcm),
    (Provider::Ring, Algorithm::ChaCha20Poly1305),
    (Provider::RustCrypto, Algorithm::Aes128Gcm),
    (Provider::RustCrypto, Algorithm::Aes256Gcm),
    (Provider::RustCrypto, Algorithm::ChaCha20Poly1305),
    (Provider::RustCrypto, Algorithm::Aes128Gmac),
    (Provider::RustCrypto, Algorithm::Aes128Ccm),
    (Provider::RustCrypto, Algorithm::Aes128CbcHmacSha1),
    (Provider::RustCrypto, Algorithm::Aes128CbcHmacSha256),
    (Provider::RustCrypto, Algorithm::Aes128CtrHmacSha256),
    (Provider::RustCrypto, Algorithm::NullHmacSha256),
];

/// An Ethernet + IPv4/UDP frame with a `size`-byte IP packet (valid header
/// checksum: inbound checks the inner header).
fn frame(size: usize) -> Vec<u8> {
    let mut f = vec![0u8; 14 + size];
    f[12] = 8;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(size as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[192, 0, 2, 1]);
    ip[16..20].copy_from_slice(&[198, 51, 100, 1]);
    let sum: u32 = ip.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!((sum & 0xffff) + (sum >> 16)) as u16).to_be_bytes());
    f
}

/// Bytes ESP encrypts for a `size`-byte inner packet: payload, minimal
/// padding and the 2-byte trailer (RFC 4303 §2.4).
fn enc_len(alg: Algorithm, size: usize) -> usize {
    (size + 2).div_ceil(alg.block_size()) * alg.block_size()
}

fn xform(alg: Algorithm, dir: CipherDirection) -> SymXform {
    SymXform { algorithm: alg, direction: dir, key: vec![7; alg.key_len()], salt: [1, 2, 3, 4], icv_len: alg.default_icv_len(), auth_key: vec![9; alg.auth_key_len()] }
}

fn outbound_sa(dev: &SoftDevice, alg: Algorithm) -> OutboundSa {
    OutboundSa::tunnel(1001, dev.session_create(&xform(alg, CipherDirection::Encrypt)).unwrap(), "203.0.113.1".parse().unwrap(), "203.0.113.2".parse().unwrap()).unwrap()
}

fn inbound_sa(dev: &SoftDevice, alg: Algorithm) -> InboundSa {
    InboundSa {
        replay_window: 0,
        ..InboundSa::tunnel(1001, dev.session_create(&xform(alg, CipherDirection::Decrypt)).unwrap(), "203.0.113.1".parse().unwrap(), "203.0.113.2".parse().unwrap())
    }
}

/// One ESP outbound packet: copy `f` in, prepare, seal, finish.
fn outbound_once(sa: &OutboundSa, st: &mut OutboundState, qp: &mut SoftQueuePair<PktBuf>, spare: &mut Option<PktBuf>, ops: &mut Vec<CryptoOp<PktBuf>>, done: &mut Vec<CryptoOp<PktBuf>>, f: &[u8]) {
    let mut buf = spare.take().unwrap();
    buf.copy_from(f);
    ops.push(esp::outbound::prepare(sa, st, buf).map_err(|e| e.0).unwrap());
    qp.enqueue_burst(ops);
    qp.dequeue_burst(done, 1);
    *spare = Some(esp::outbound::finish(done.pop().unwrap()).map_err(|e| e.0).unwrap());
}

/// One ESP inbound packet: copy the ESP frame `f` in, prepare, open, finish.
fn inbound_once(sa: &InboundSa, st: &mut InboundState, qp: &mut SoftQueuePair<PktBuf>, spare: &mut Option<PktBuf>, ops: &mut Vec<CryptoOp<PktBuf>>, done: &mut Vec<CryptoOp<PktBuf>>, f: &[u8]) {
    let mut buf = spare.take().unwrap();
    buf.copy_from(f);
    ops.push(esp::inbound::prepare(sa, st, buf, 34).map_err(|e| e.0).unwrap());
    qp.enqueue_burst(ops);
    qp.dequeue_burst(done, 1);
    *spare = Some(esp::inbound::finish(st, done.pop().unwrap(), 0).map_err(|e| e.0).unwrap());
}

type HmacSha1 = Hmac<sha1::Sha1>;
type HmacSha256 = Hmac<sha2::Sha256>;

/// The provider's own API for one algorithm, keyed once.
enum Raw {
    Ring(Box<ring::aead::LessSafeKey>),
    Gcm128(Box<aes_gcm::Aes128Gcm>),
    Gcm256(Box<aes_gcm::Aes256Gcm>),
    ChaCha(Box<chacha20poly1305::ChaCha20Poly1305>),
    /// GMAC: `aes-gcm` with the range as AAD and nothing encrypted.
    Gmac(Box<aes_gcm::Aes128Gcm>),
    /// AES-CCM with a 16-byte tag and an 11-byte nonce (3-byte salt ‖ IV,
    /// RFC 4309 §4): the `ccm` crate the RustCrypto provider also runs.
    Ccm(Box<Ccm128>),
    CbcSha1(Box<aes::Aes128>, HmacSha1),
    CbcSha256(Box<aes::Aes128>, HmacSha256),
    CtrSha256(Box<aes::Aes128>, HmacSha256),
    NullSha256(HmacSha256),
}

type Ccm128 = ccm::Ccm<aes::Aes128, ccm::consts::U16, ccm::consts::U11>;

const NONCE: [u8; 12] = [1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 1];
const CCM_NONCE: [u8; 11] = [1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 1];
const AAD: [u8; 8] = [0, 0, 0x03, 0xe9, 0, 0, 0, 1];

impl Raw {
    fn new(p: Provider, alg: Algorithm) -> Raw {
        let key = vec![7u8; alg.key_len()];
        let mac_key = vec![9u8; alg.auth_key_len()];
        let aes = || Box::new(aes::Aes128::new(GenericArray::from_slice(&key)));
        match (p, alg) {
            (Provider::Ring, a) => {
                let r = match a {
                    Algorithm::Aes128Gcm => &ring::aead::AES_128_GCM,
                    Algorithm::Aes256Gcm => &ring::aead::AES_256_GCM,
                    _ => &ring::aead::CHACHA20_POLY1305,
                };
                Raw::Ring(Box::new(ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(r, &key).unwrap())))
            }
            (_, Algorithm::Aes128Gcm) => Raw::Gcm128(Box::new(aes_gcm::Aes128Gcm::new_from_slice(&key).unwrap())),
            (_, Algorithm::Aes256Gcm) => Raw::Gcm256(Box::new(aes_gcm::Aes256Gcm::new_from_slice(&key).unwrap())),
            (_, Algorithm::ChaCha20Poly1305) => Raw::ChaCha(Box::new(chacha20poly1305::ChaCha20Poly1305::new_from_slice(&key).unwrap())),
            (_, Algorithm::Aes128Gmac) => Raw::Gmac(Box::new(aes_gcm::Aes128Gcm::new_from_slice(&key).unwrap())),
            (_, Algorithm::Aes128Ccm) => Raw::Ccm(Box::new(Ccm128::new_from_slice(&key).unwrap())),
            (_, Algorithm::Aes128CbcHmacSha1) => Raw::CbcSha1(aes(), <HmacSha1 as Mac>::new_from_slice(&mac_key).unwrap()),
            (_, Algorithm::Aes128CbcHmacSha256) => Raw::CbcSha256(aes(), <HmacSha256 as Mac>::new_from_slice(&mac_key).unwrap()),
            (_, Algorithm::Aes128CtrHmacSha256) => Raw::CtrSha256(aes(), <HmacSha256 as Mac>::new_from_slice(&mac_key).unwrap()),
            (_, Algorithm::NullHmacSha256) => Raw::NullSha256(<HmacSha256 as Mac>::new_from_slice(&mac_key).unwrap()),
            (_, a) => panic!("no raw line for {}", a.name()),
        }
    }

    /// Encrypts `data` in place and writes the tag / truncated MAC to `icv`.
    fn seal(&self, data: &mut [u8], icv: &mut [u8]) {
        let n = GenericArray::from_slice(&NONCE);
        match self {
            Raw::Ring(k) => {
                let tag = k.seal_in_place_separate_tag(ring::aead::Nonce::assume_unique_for_key(NONCE), ring::aead::Aad::from(AAD), data).unwrap();
                icv.copy_from_slice(tag.as_ref());
            }
            Raw::Gcm128(k) => icv.copy_from_slice(&k.encrypt_in_place_detached(n, &AAD, data).unwrap()),
            Raw::Gcm256(k) => icv.copy_from_slice(&k.encrypt_in_place_detached(n, &AAD, data).unwrap()),
            Raw::ChaCha(k) => icv.copy_from_slice(&k.encrypt_in_place_detached(n, &AAD, data).unwrap()),
            Raw::Gmac(k) => icv.copy_from_slice(&k.encrypt_in_place_detached(n, data, &mut []).unwrap()),
            Raw::Ccm(k) => icv.copy_from_slice(&k.encrypt_in_place_detached(GenericArray::from_slice(&CCM_NONCE), &AAD, data).unwrap()),
            Raw::CbcSha1(k, m) => {
                cbc_encrypt(k, data);
                icv.copy_from_slice(&mac(m.clone(), data)[..12]);
            }
            Raw::CbcSha256(k, m) => {
                cbc_encrypt(k, data);
                icv.copy_from_slice(&mac(m.clone(), data)[..16]);
            }
            Raw::CtrSha256(k, m) => {
                ctr(k, data);
                icv.copy_from_slice(&mac(m.clone(), data)[..16]);
            }
            Raw::NullSha256(m) => icv.copy_from_slice(&mac(m.clone(), data)[..16]),
        }
    }

    /// Verifies `icv` over `data` and decrypts it in place; false on a
    /// mismatch.
    fn open(&self, data: &mut [u8], icv: &[u8]) -> bool {
        let n = GenericArray::from_slice(&NONCE);
        let ct_eq = |a: &[u8], b: &[u8]| subtle::ConstantTimeEq::ct_eq(a, b).into();
        match self {
            Raw::Ring(k) => {
                let tag = ring::aead::Tag::try_from(icv).unwrap();
                k.open_in_place_separate_tag(ring::aead::Nonce::assume_unique_for_key(NONCE), ring::aead::Aad::from(AAD), tag, data, 0..).is_ok()
            }
            Raw::Gcm128(k) => k.decrypt_in_place_detached(n, &AAD, data, GenericArray::from_slice(icv)).is_ok(),
            Raw::Gcm256(k) => k.decrypt_in_place_detached(n, &AAD, data, GenericArray::from_slice(icv)).is_ok(),
            Raw::ChaCha(k) => k.decrypt_in_place_detached(n, &AAD, data, GenericArray::from_slice(icv)).is_ok(),
            Raw::Gmac(k) => k.decrypt_in_place_detached(n, data, &mut [], GenericArray::from_slice(icv)).is_ok(),
            Raw::Ccm(k) => k.decrypt_in_place_detached(GenericArray::from_slice(&CCM_NONCE), &AAD, data, GenericArray::from_slice(icv)).is_ok(),
            Raw::CbcSha1(k, m) => ct_eq(&mac(m.clone(), data)[..12], icv) && {
                cbc_decrypt(k, data);
                true
            },
            Raw::CbcSha256(k, m) => ct_eq(&mac(m.clone(), data)[..16], icv) && {
                cbc_decrypt(k, data);
                true
            },
            Raw::CtrSha256(k, m) => ct_eq(&mac(m.clone(), data)[..16], icv) && {
                ctr(k, data);
                true
            },
            Raw::NullSha256(m) => ct_eq(&mac(m.clone(), data)[..16], icv),
        }
    }
}

fn mac<M: Mac>(mut m: M, data: &[u8]) -> [u8; 32] {
    m.update(data);
    let t = m.finalize().into_bytes();
    let mut out = [0u8; 32];
    out[..t.len()].copy_from_slice(&t);
    out
}

fn cbc_encrypt(k: &aes::Aes128, data: &mut [u8]) {
    let (blocks, _) = InOutBuf::from(data).into_chunks();
    cbc::Encryptor::<&aes::Aes128>::inner_iv_init(k, GenericArray::from_slice(&[5u8; 16])).encrypt_blocks_inout_mut(blocks);
}

fn cbc_decrypt(k: &aes::Aes128, data: &mut [u8]) {
    let (blocks, _) = InOutBuf::from(data).into_chunks();
    cbc::Decryptor::<&aes::Aes128>::inner_iv_init(k, GenericArray::from_slice(&[5u8; 16])).decrypt_blocks_inout_mut(blocks);
}

fn ctr(k: &aes::Aes128, data: &mut [u8]) {
    let mut iv = [0u8; 16];
    iv[..12].copy_from_slice(&NONCE);
    iv[15] = 1;
    let mut c = ctr::Ctr32BE::<&aes::Aes128>::from_core(ctr::CtrCore::inner_iv_init(k, GenericArray::from_slice(&iv)));
    c.apply_keystream(data);
}

fn label(p: Provider, alg: Algorithm) -> String {
    format!("{}/{}", p.name(), alg.name())
}

fn bench_esp(c: &mut Criterion) {
    let mut out_t = common::Ratios::new("ESP outbound (prepare + seal + finish) vs the provider's raw seal, one core (same run)");
    let mut in_t = common::Ratios::new("ESP inbound (prepare + open + finish) vs the provider's raw open, one core (same run)");
    let mut prov_t = common::Ratios::new("ring's raw seal vs RustCrypto's raw seal (same run)");
    for (dir, group) in [(CipherDirection::Encrypt, "esp_outbound"), (CipherDirection::Decrypt, "esp_inbound")] {
        let mut g = c.benchmark_group(group);
        for (p, alg) in CASES {
            let dev = SoftDevice::with_provider(1, ProviderChoice::Only(p));
            let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 64 }).unwrap();
            let raw = Raw::new(p, alg);
            let (osa, isa) = (outbound_sa(&dev, alg), inbound_sa(&dev, alg));
            assert_eq!((osa.session.provider(), isa.session.provider()), (p, p));
            let (mut ost, mut ist) = (OutboundState::default(), InboundState::new(&isa));
            let (mut ops, mut done, mut spare) = (Vec::with_capacity(1), Vec::with_capacity(1), Some(PktBuf::new()));
            let id = label(p, alg);
            for size in SIZES {
                let line = |f: &str| common::Line::new(group, &format!("{id}/{f}"), size);
                g.throughput(Throughput::Bytes(size as u64));
                let f = frame(size);
                let n = enc_len(alg, size);
                let icv_len = alg.default_icv_len();
                let mut data = vec![0x5au8; n];
                let mut icv = vec![0u8; icv_len];
                if dir == CipherDirection::Encrypt {
                    out_t.row(format!("{id} {size} B"), line("esp"), line("raw"), size as f64, "B");
                    if p == Provider::Ring {
                        let rc = common::Line::new(group, &format!("{}/raw", label(Provider::RustCrypto, alg)), size);
                        prov_t.row(format!("{} {size} B", alg.name()), line("raw"), rc, size as f64, "B");
                    }
                    g.bench_with_input(BenchmarkId::new(format!("{id}/esp"), size), &size, |b, _| {
                        b.iter(|| outbound_once(&osa, &mut ost, &mut qp, &mut spare, &mut ops, &mut done, &f))
                    });
                    g.bench_with_input(BenchmarkId::new(format!("{id}/raw"), size), &size, |b, _| b.iter(|| raw.seal(&mut data, &mut icv)));
                } else {
                    in_t.row(format!("{id} {size} B"), line("esp"), line("raw"), size as f64, "B");
                    // The ESP packet outbound makes, opened again and again.
                    outbound_once(&osa, &mut ost, &mut qp, &mut spare, &mut ops, &mut done, &f);
                    let pkt = spare.as_ref().unwrap().frame().to_vec();
                    inbound_once(&isa, &mut ist, &mut qp, &mut spare, &mut ops, &mut done, &pkt);
                    assert_eq!(spare.as_ref().unwrap().frame()[14..], f[14..], "{id}: inner packet back");
                    g.bench_with_input(BenchmarkId::new(format!("{id}/esp"), size), &size, |b, _| {
                        b.iter(|| inbound_once(&isa, &mut ist, &mut qp, &mut spare, &mut ops, &mut done, &pkt))
                    });
                    raw.seal(&mut data, &mut icv);
                    let sealed = data.clone();
                    let mut work = data.clone();
                    assert!(raw.open(&mut work, &icv), "{id}: raw open");
                    g.bench_with_input(BenchmarkId::new(format!("{id}/raw"), size), &size, |b, _| {
                        b.iter(|| {
                            work.copy_from_slice(&sealed);
                            assert!(raw.open(&mut work, &icv));
                        })
                    });
                }
            }
        }
        g.finish();
    }
    out_t.print();
    in_t.print();
    prov_t.print();
}

fn bench_replay(c: &mut Criterion) {
    use secgw::esp::replay::ReplayWindow;
    let mut g = c.benchmark_group("replay");
    for window in [64u32, 4096] {
        g.bench_with_input(BenchmarkId::new("in_order", window), &window, |b, &w| {
            let mut rw = ReplayWindow::new(w);
            let mut seq = 0u64;
            b.iter(|| {
                seq += 1;
                rw.check(seq).unwrap();
                rw.commit(seq).unwrap();
            })
        });
        g.bench_with_input(BenchmarkId::new("reversed_blocks_of_32", window), &window, |b, &w| {
            let mut rw = ReplayWindow::new(w);
            let mut n = 0u64;
            b.iter(|| {
                // 32, 31, …, 1, 64, 63, …: every number new, most arriving behind the top.
                let s = (n & !31) + 32 - (n & 31);
                n += 1;
                rw.check(s).unwrap();
                rw.commit(s).unwrap();
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1)).sample_size(20);
    targets = bench_esp, bench_replay
}
criterion_main!(benches);
