//! Crypto device conformance: the same test functions, parameterised by
//! device, run against the software device and the descriptor device, each
//! with every provider setting (modules `soft_auto`, `soft_rustcrypto`,
//! `soft_ring`, `descriptor_auto`, …), then the descriptor device's
//! session-limit rules, each in its own test. Every algorithm runs on both
//! devices with every provider that runs it (ESP round trips with and
//! without ESN, tampering, the RFC 4106 / draft-mcgrew-gcm-test-01 and
//! RFC 7634 packets; with RustCrypto also the primitive vectors of RFC 3602,
//! RFC 3686, RFC 2202 and RFC 4868 and the RFC 3602 / RFC 4543 packets) and
//! gives byte-identical ESP on both devices and both providers.
//!
//! Jobs are made to stay in flight deterministically with
//! `DescriptorDevice::engines_hold` (the engines acknowledge before it
//! returns); nothing here sleeps and hopes. Waiting for completions polls
//! with 20 µs sleeps under a 10 s deadline, so no test spins a core.

use secgw::crypto::descriptor::{DescriptorConfig, DescriptorDevice};
use secgw::crypto::soft::SoftDevice;
use secgw::crypto::{
    AeadAlgorithm, Algorithm, Cipher, CipherDirection, CryptoDevice, CryptoError, CryptoOp, OpStatus, Provider, ProviderChoice, QpConf, QueuePair,
    Session, SymXform,
};
use secgw::esp::{self, InboundSa, InboundState, IvGen};
use secgw::io::PktBuf;

mod common;
use common::vectors::{gcm_vectors, h, hv, json, packet_cases};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A device under test: a crypto device plus a way to keep its jobs in
/// flight (a no-op for the synchronous soft device).
trait Dut: CryptoDevice {
    fn hold(&self) {}
    fn resume(&self) {}
}

impl Dut for SoftDevice {}

impl Dut for DescriptorDevice {
    fn hold(&self) {
        self.engines_hold();
    }
    fn resume(&self) {
        self.engines_resume();
    }
}

fn soft() -> SoftDevice {
    SoftDevice::new(2)
}

fn descriptor() -> DescriptorDevice {
    descriptor_on(ProviderChoice::Auto)
}

fn soft_on(p: ProviderChoice) -> SoftDevice {
    SoftDevice::with_provider(2, p)
}

fn descriptor_on(p: ProviderChoice) -> DescriptorDevice {
    DescriptorDevice::with_provider(DescriptorConfig { nb_queue_pairs: 2, ring_depth: 64, max_sessions_per_qp: 64, nb_engines: 1 }, p).unwrap()
}

const AUTO: ProviderChoice = ProviderChoice::Auto;
const RUSTCRYPTO: ProviderChoice = ProviderChoice::Only(Provider::RustCrypto);
const RING: ProviderChoice = ProviderChoice::Only(Provider::Ring);

/// Whether `dev` offers `alg` (its provider runs it).
fn offers<D: Dut>(dev: &D, alg: Algorithm) -> bool {
    dev.info().capabilities.iter().any(|c| c.algorithm == alg)
}

fn descriptor_with(max_sessions_per_qp: u32) -> DescriptorDevice {
    DescriptorDevice::new(DescriptorConfig { nb_queue_pairs: 2, ring_depth: 64, max_sessions_per_qp, nb_engines: 1 }).unwrap()
}

const QP: u16 = 0;

fn xform(dir: CipherDirection, key: &[u8], salt: [u8; 4]) -> SymXform {
    let algorithm = match key.len() {
        16 => AeadAlgorithm::Aes128Gcm,
        24 => AeadAlgorithm::Aes192Gcm,
        32 => AeadAlgorithm::Aes256Gcm,
        n => panic!("no AES-GCM with a {n}-byte key here"),
    };
    SymXform { algorithm, direction: dir, key: key.to_vec(), salt, icv_len: 16, auth_key: Vec::new() }
}

/// Creates a session and, on a device that needs it, attaches it to `qp`
/// (what the control thread does before publishing an SA).
fn session<D: Dut>(dev: &D, qp: u16, dir: CipherDirection, key: &[u8], salt: [u8; 4]) -> Arc<Session> {
    let s = dev.session_create(&xform(dir, key, salt)).unwrap();
    if dev.info().flags.attach_sessions {
        dev.queue_pair_attach_session(qp, &s).unwrap();
    }
    s
}

/// An op on `payload ‖ 16-byte ICV room`: data `[0, len)`, ICV after it,
/// 8 bytes of AAD, IV and `user[0]` = `tag`.
fn op(s: &Arc<Session>, payload: &[u8], tag: u64) -> CryptoOp<Vec<u8>> {
    let mut buf = payload.to_vec();
    buf.extend_from_slice(&[0; 16]);
    let mut op = CryptoOp::new(s.clone(), buf);
    op.data_len = payload.len() as u32;
    op.icv_offset = payload.len() as u32;
    op.aad = [0xa5; 16];
    op.aad_len = 8;
    op.iv[..8].copy_from_slice(&tag.to_be_bytes());
    op.user = [tag, 0];
    op
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Polls until `n` completions arrived (10 s deadline); none may be extra.
fn drain<B, Q: QueuePair<B>>(qp: &mut Q, n: usize) -> Vec<CryptoOp<B>> {
    let mut out = Vec::with_capacity(n + 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let want = n - out.len();
        if qp.dequeue_burst(&mut out, want) == 0 {
            assert!(Instant::now() < deadline, "only {} of {n} ops completed", out.len());
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    assert_eq!(qp.inflight(), 0);
    out
}

/// Enqueues all of `ops` (they must fit) and waits for them.
fn run<B, Q: QueuePair<B>>(qp: &mut Q, mut ops: Vec<CryptoOp<B>>) -> Vec<CryptoOp<B>> {
    let n = ops.len();
    assert_eq!(qp.enqueue_burst(&mut ops), n);
    drain(qp, n)
}

fn tags<B>(ops: &[CryptoOp<B>]) -> Vec<u64> {
    ops.iter().map(|o| o.user[0]).collect()
}

// ---------------------------------------------------------------------------
// The shared suite.

fn seal_open_round_trip<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: 32 }).unwrap();
    for key in [&[7u8; 16][..], &[9u8; 32][..]] {
        let enc = session(dev, QP, CipherDirection::Encrypt, key, [1, 2, 3, 4]);
        let dec = session(dev, QP, CipherDirection::Decrypt, key, [1, 2, 3, 4]);
        let plains: Vec<Vec<u8>> = [4, 16, 64, 1420].iter().enumerate().map(|(i, &l)| payload(l, i as u8)).collect();
        let sealed = run(&mut qp, plains.iter().enumerate().map(|(i, p)| op(&enc, p, i as u64)).collect());
        assert_eq!(tags(&sealed), [0, 1, 2, 3], "completions in enqueue order");
        for (s, p) in sealed.iter().zip(&plains) {
            assert_eq!(s.status, OpStatus::Success);
            assert_ne!(&s.buf[..p.len()], &p[..], "data range encrypted");
        }
        let mut opens: Vec<_> = sealed.into_iter().map(|mut o| {
            o.session = dec.clone();
            o.status = OpStatus::NotProcessed;
            o
        }).collect();
        opens = run(&mut qp, opens);
        for (o, p) in opens.iter().zip(&plains) {
            assert_eq!(o.status, OpStatus::Success);
            assert_eq!(&o.buf[..p.len()], &p[..], "decrypted back to the plaintext");
        }
    }
}

fn tampered_icv_fails_auth<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: 8 }).unwrap();
    let enc = session(dev, QP, CipherDirection::Encrypt, &[3; 16], [0; 4]);
    let dec = session(dev, QP, CipherDirection::Decrypt, &[3; 16], [0; 4]);
    let p = payload(48, 5);
    let sealed = run(&mut qp, vec![op(&enc, &p, 0)]).pop().unwrap();
    let mut ops = Vec::new();
    for (tag, flip) in [(1, None), (2, Some(48 + 15)), (3, Some(48)), (4, Some(0))] {
        let mut o = op(&dec, &[], tag);
        o.buf = sealed.buf.clone();
        o.data_len = 48;
        o.icv_offset = 48;
        o.iv = sealed.iv;
        if let Some(i) = flip {
            o.buf[i] ^= 0x01;
        }
        ops.push(o);
    }
    let out = run(&mut qp, ops);
    assert_eq!(tags(&out), [1, 2, 3, 4]);
    assert_eq!(out[0].status, OpStatus::Success);
    assert_eq!(&out[0].buf[..48], &p[..]);
    for o in &out[1..] {
        assert_eq!(o.status, OpStatus::AuthFailed, "op {} (ICV or ciphertext bit flipped)", o.user[0]);
        assert_ne!(&o.buf[..48], &p[..], "no plaintext released on failure");
        if dec.provider() == Provider::Ring {
            assert_eq!(&o.buf[..48], &[0u8; 48][..], "ring zeroes the unverified plaintext");
        }
    }
}

fn bad_ranges_are_invalid_op<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: 8 }).unwrap();
    let enc = session(dev, QP, CipherDirection::Encrypt, &[4; 16], [0; 4]);
    let p = payload(32, 1);
    let good = |t| op(&enc, &p, t);
    let mut data_past_end = good(1);
    data_past_end.data_offset = 16; // [16, 56) in a 48-byte buffer
    data_past_end.data_len = 40;
    let mut icv_past_end = good(2);
    icv_past_end.icv_offset = 40;
    let mut overlap = good(3);
    overlap.icv_offset = 24;
    let mut long_aad = good(4);
    long_aad.aad_len = 17;
    let ops = vec![good(0), data_past_end, icv_past_end, overlap, long_aad, good(5)];
    let before: Vec<Vec<u8>> = ops.iter().map(|o| o.buf.clone()).collect();
    let out = run(&mut qp, ops);
    assert_eq!(tags(&out), [0, 1, 2, 3, 4, 5]);
    let st: Vec<OpStatus> = out.iter().map(|o| o.status).collect();
    use OpStatus::*;
    assert_eq!(st, [Success, InvalidOp, InvalidOp, InvalidOp, InvalidOp, Success]);
    for i in 1..5 {
        assert_eq!(out[i].buf, before[i], "an invalid op leaves its buffer alone");
    }
}

fn ring_full_accepts_fewer_and_loses_nothing<D: Dut>(dev: &D) {
    const DEPTH: usize = 8;
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: DEPTH }).unwrap();
    let enc = session(dev, QP, CipherDirection::Encrypt, &[5; 16], [0; 4]);
    dev.hold();
    let mut ops: Vec<_> = (0..13).map(|t| op(&enc, &payload(64, t as u8), t)).collect();
    assert_eq!(qp.enqueue_burst(&mut ops), DEPTH);
    assert_eq!(tags(&ops), [8, 9, 10, 11, 12], "the refused ops stay with the caller, in order");
    assert_eq!(qp.inflight(), DEPTH);
    assert_eq!(qp.enqueue_burst(&mut ops), 0, "still full");
    dev.resume();
    let mut out = drain(&mut qp, DEPTH);
    assert_eq!(qp.enqueue_burst(&mut ops), 5);
    assert!(ops.is_empty());
    out.extend(drain(&mut qp, 5));
    assert_eq!(tags(&out), (0..13).collect::<Vec<_>>(), "every op completed once, in order");
    assert!(out.iter().all(|o| o.status == OpStatus::Success));
}

fn stop_accepts_nothing_and_inflight_completes<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: 16 }).unwrap();
    let enc = session(dev, QP, CipherDirection::Encrypt, &[6; 16], [0; 4]);
    dev.hold();
    let mut ops: Vec<_> = (0..4).map(|t| op(&enc, &payload(64, 0), t)).collect();
    assert_eq!(qp.enqueue_burst(&mut ops), 4);
    dev.queue_pair_stop(QP).unwrap();
    let mut late: Vec<_> = (4..7).map(|t| op(&enc, &payload(64, 0), t)).collect();
    assert_eq!(qp.enqueue_burst(&mut late), 0, "a stopped queue pair accepts nothing");
    assert_eq!(late.len(), 3, "refused ops stay with the caller");
    dev.resume();
    let out = drain(&mut qp, 4);
    assert_eq!(tags(&out), [0, 1, 2, 3]);
    assert!(out.iter().all(|o| o.status == OpStatus::Success), "ops accepted before the stop complete");
    assert_eq!(qp.enqueue_burst(&mut late), 0, "still stopped");
    dev.queue_pair_stop(QP).unwrap(); // idempotent
    dev.queue_pair_start(QP).unwrap();
    let out = run(&mut qp, late);
    assert_eq!(tags(&out), [4, 5, 6]);
    assert!(out.iter().all(|o| o.status == OpStatus::Success));
    assert!(matches!(dev.queue_pair_stop(9), Err(CryptoError::NoQueuePair { qp_id: 9, .. })));
}

/// `esp::outbound::encap` with each vector's SA, IV and sequence number,
/// sealed by `dev`; returns the packets after checking each against its
/// vector (draft-mcgrew-gcm-test-01 §4).
fn esp_outbound_matches_vectors<D: Dut>(dev: &D) -> Vec<Vec<u8>> {
    let mut qp = dev.queue_pair_setup::<PktBuf>(QP, QpConf { nb_descriptors: 4 }).unwrap();
    let mut packets = Vec::new();
    for v in gcm_vectors().into_iter().filter(|v| v.algorithm().is_some_and(|a| offers(dev, a))) {
        let s = session(dev, QP, CipherDirection::Encrypt, &h(&v.key), h(&v.salt).try_into().unwrap());
        let plain = h(&v.plaintext);
        let mut buf = PktBuf::new();
        assert!(buf.copy_from(&plain[..plain.len() - 2 - v.pad_length as usize]));
        let seq = v.seq64();
        let op = esp::outbound::encap(v.spi32(), &s, seq, v.esn, &h(&v.iv), v.next_header, buf).map_err(|e| e.0).unwrap();
        let op = run(&mut qp, vec![op]).pop().unwrap();
        assert_eq!(op.status, OpStatus::Success, "{}", v.name);
        assert_eq!(hex::encode(op.buf.frame()), v.packet, "{}: packet", v.name);
        packets.push(op.buf.frame().to_vec());
        if dev.info().flags.attach_sessions {
            dev.queue_pair_detach_session(QP, &s).unwrap();
        }
        dev.session_free(s).unwrap();
    }
    assert!(packets.len() >= 15, "only {} vectors", packets.len());
    packets
}

fn esp_outbound_vectors<D: Dut>(dev: &D) {
    esp_outbound_matches_vectors(dev);
}

/// `QueuePair::process_sync` (the path the worker takes on a synchronous
/// device): each draft-mcgrew-gcm-test-01 §4 vector sealed where it lies
/// is the vector's packet, byte for byte, all in one call. An
/// asynchronous device declines and leaves the ops as they were.
fn sync_path_vectors<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<PktBuf>(QP, QpConf { nb_descriptors: 4 }).unwrap();
    let mut ops = Vec::new();
    let mut want = Vec::new();
    let mut sessions = Vec::new();
    for v in gcm_vectors().into_iter().filter(|v| v.algorithm().is_some_and(|a| offers(dev, a))) {
        let s = session(dev, QP, CipherDirection::Encrypt, &h(&v.key), h(&v.salt).try_into().unwrap());
        let plain = h(&v.plaintext);
        let mut buf = PktBuf::new();
        assert!(buf.copy_from(&plain[..plain.len() - 2 - v.pad_length as usize]));
        ops.push(esp::outbound::encap(v.spi32(), &s, v.seq64(), v.esn, &h(&v.iv), v.next_header, buf).map_err(|e| e.0).unwrap());
        want.push(v.packet.clone());
        sessions.push(s);
    }
    // More ops than the ring's 4 descriptors: nothing stays in the queue pair.
    assert!(ops.len() > 4, "only {} vectors", ops.len());
    let before: Vec<Vec<u8>> = ops.iter().map(|o| o.buf.frame().to_vec()).collect();
    if dev.info().flags.sync {
        assert!(qp.process_sync(&mut ops));
        assert_eq!(qp.inflight(), 0);
        for (op, want) in ops.iter().zip(&want) {
            assert_eq!(op.status, OpStatus::Success);
            assert_eq!(&hex::encode(op.buf.frame()), want);
        }
    } else {
        assert!(!qp.process_sync(&mut ops));
        for (op, before) in ops.iter().zip(&before) {
            assert_eq!(op.status, OpStatus::NotProcessed);
            assert_eq!(op.buf.frame(), &before[..]);
        }
    }
    drop(ops);
    for s in sessions {
        release(dev, s);
    }
}

// ---------------------------------------------------------------------------
// Every algorithm.

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29) ^ seed).collect()
}

fn algo_xform(alg: Algorithm, dir: CipherDirection, icv_len: usize) -> SymXform {
    SymXform {
        algorithm: alg,
        direction: dir,
        key: pattern(alg.key_len(), 0x3c),
        salt: [9, 8, 7, 6],
        icv_len,
        auth_key: pattern(alg.auth_key_len(), 0xa5),
    }
}

fn attached<D: Dut>(dev: &D, x: &SymXform) -> Arc<Session> {
    let s = dev.session_create(x).unwrap_or_else(|e| panic!("{}: {e}", x.algorithm.name()));
    if dev.info().flags.attach_sessions {
        dev.queue_pair_attach_session(QP, &s).unwrap();
    }
    s
}

fn release<D: Dut>(dev: &D, s: Arc<Session>) {
    if dev.info().flags.attach_sessions {
        dev.queue_pair_detach_session(QP, &s).unwrap();
    }
    dev.session_free(s).unwrap();
}

/// Every (algorithm, ICV length) the device lists.
fn transforms<D: Dut>(dev: &D) -> Vec<(Algorithm, usize)> {
    dev.info().capabilities.iter().flat_map(|c| c.icv_lens.iter().map(move |&l| (c.algorithm, l))).collect()
}

/// Every algorithm with `auto` and `rustcrypto`; with `ring` exactly
/// AES-128/256-GCM with a 16-byte ICV and ChaCha20-Poly1305.
fn device_lists_every_algorithm<D: Dut>(dev: &D) {
    let info = dev.info();
    let caps = info.capabilities;
    if info.provider == RING {
        let listed: Vec<_> = caps.iter().map(|c| (c.algorithm, c.icv_lens)).collect();
        assert_eq!(listed, [(Algorithm::Aes128Gcm, &[16][..]), (Algorithm::Aes256Gcm, &[16][..]), (Algorithm::ChaCha20Poly1305, &[16][..])]);
        return;
    }
    assert_eq!(caps.iter().map(|c| c.algorithm).collect::<Vec<_>>(), Algorithm::ALL.to_vec());
    for c in &caps {
        let a = c.algorithm;
        assert_eq!((c.key_len, c.salt_len, c.auth_key_len, c.iv_len), (a.key_len(), a.salt_len(), a.auth_key_len(), a.iv_len()), "{}", a.name());
        assert_eq!(c.icv_lens, a.icv_lens());
    }
    let find = |a: Algorithm| caps.iter().find(|c| c.algorithm == a).unwrap().clone();
    assert_eq!((find(Algorithm::Aes128CbcHmacSha1).iv_len, find(Algorithm::Aes128CbcHmacSha1).data_align), (16, 16));
    assert_eq!(find(Algorithm::Aes256Gcm).icv_lens, &[8, 12, 16]);
    assert_eq!((find(Algorithm::NullHmacSha256).key_len, find(Algorithm::NullHmacSha256).iv_len), (0, 0));
    assert_eq!(find(Algorithm::Aes128CtrHmacSha256).salt_len, 4);
}

/// Bad key, integrity key or ICV lengths are refused for every algorithm;
/// with one provider, so is every transform it does not run, naming it.
/// Each session gets the provider its device's setting resolves to.
fn session_create_refuses_what_is_not_listed<D: Dut>(dev: &D) {
    let choice = dev.info().provider;
    for alg in Algorithm::ALL {
        for &icv in alg.icv_lens() {
            let x = algo_xform(alg, CipherDirection::Encrypt, icv);
            match (dev.session_create(&x), choice.resolve(alg, icv)) {
                (Ok(s), Some(p)) => {
                    assert_eq!(s.provider(), p, "{} icv {icv}", alg.name());
                    dev.session_free(s).unwrap();
                }
                (Err(CryptoError::Unsupported { what, .. }), None) => {
                    assert!(what.contains(alg.name()) && what.contains(&format!("provider {}", choice.name())), "{what}");
                }
                (r, p) => panic!("{} icv {icv} with {}: {:?}, expected provider {p:?}", alg.name(), choice.name(), r.map(|s| s.id())),
            }
        }
        if !offers(dev, alg) {
            continue;
        }
        let mut bad_key = algo_xform(alg, CipherDirection::Encrypt, alg.default_icv_len());
        bad_key.key.push(0);
        let mut bad_auth = algo_xform(alg, CipherDirection::Encrypt, alg.default_icv_len());
        bad_auth.auth_key.push(0);
        let bad_icv = algo_xform(alg, CipherDirection::Encrypt, 10);
        for (x, what) in [(bad_key, "key"), (bad_auth, "integrity key"), (bad_icv, "ICV")] {
            match dev.session_create(&x) {
                Err(CryptoError::Unsupported { what: w, .. }) => assert!(w.contains(alg.name()) && w.contains(what), "{w}"),
                other => panic!("{} with a bad {what}: {:?}", alg.name(), other.map(|s| s.id())),
            }
        }
    }
}

/// Every algorithm (and GCM ICV length), ESN off and on, four payload
/// sizes: `esp::outbound::encap` + seal, then `esp::inbound::prepare` +
/// open + finish, all on `dev`; the inner packet comes back exactly.
/// Returns every ESP packet for the cross-backend comparison.
fn every_algorithm_esp_round_trip<D: Dut>(dev: &D) -> Vec<(Algorithm, usize, Vec<u8>)> {
    let mut qp = dev.queue_pair_setup::<PktBuf>(QP, QpConf { nb_descriptors: 8 }).unwrap();
    let ivs = IvGen::with_key([0x11; 16]);
    let mut packets = Vec::new();
    for (alg, icv_len) in transforms(dev) {
        let enc = attached(dev, &algo_xform(alg, CipherDirection::Encrypt, icv_len));
        let dec = attached(dev, &algo_xform(alg, CipherDirection::Decrypt, icv_len));
        for esn in [false, true] {
            let sa = InboundSa {
                esn,
                ..InboundSa::tunnel(0x1000 + icv_len as u32, dec.clone(), "0.0.0.0".parse().unwrap(), "0.0.0.0".parse().unwrap())
            };
            let mut st = InboundState::new(&sa);
            for (i, size) in [1usize, 13, 64, 1400].into_iter().enumerate() {
                let seq = if esn { (5u64 << 32) + 3 + i as u64 } else { 3 + i as u64 };
                let inner = common::udp_packet("192.0.2.1".parse().unwrap(), "198.51.100.1".parse().unwrap(), 0, 64, 1, 2, &pattern(size, i as u8));
                let mut iv = [0u8; 16];
                assert!(ivs.write(alg, seq, &mut iv));
                let mut buf = PktBuf::new();
                assert!(buf.copy_from(&inner));
                let op = esp::outbound::encap(sa.spi, &enc, seq, esn, &iv[..alg.iv_len()], 4, buf).map_err(|e| e.0).unwrap();
                let op = run(&mut qp, vec![op]).pop().unwrap();
                assert_eq!(op.status, OpStatus::Success, "{} seal", alg.name());
                let pkt = op.buf.frame().to_vec();
                let enc_len = pkt.len() - 8 - alg.iv_len() - icv_len;
                assert_eq!(enc_len % alg.block_size(), 0, "{}: padded to the block size", alg.name());
                assert!(enc_len < inner.len() + 2 + alg.block_size(), "{}: minimal padding", alg.name());
                assert_eq!(&pkt[..4], &sa.spi.to_be_bytes());
                assert_eq!(&pkt[4..8], &(seq as u32).to_be_bytes(), "only the low 32 bits are sent");
                assert_eq!(&pkt[8..8 + alg.iv_len()], &iv[..alg.iv_len()]);
                let body = &pkt[8 + alg.iv_len()..pkt.len() - icv_len];
                let clear = matches!(alg.cipher(), Cipher::Null | Cipher::AesGmac);
                assert_eq!(body.starts_with(&inner), clear, "{}: payload encrypted unless NULL/GMAC", alg.name());
                if i == 0 && !esn {
                    st.window.commit(seq - 1).unwrap();
                } else if i == 0 {
                    st.window.commit((5u64 << 32) + 1).unwrap();
                }
                let mut buf = PktBuf::new();
                assert!(buf.copy_from(&pkt));
                let op = esp::inbound::prepare(&sa, &st, buf, 0).map_err(|e| e.0).unwrap();
                assert_eq!(op.user[0], seq, "{}: inferred sequence number", alg.name());
                let op = run(&mut qp, vec![op]).pop().unwrap();
                assert_eq!(op.status, OpStatus::Success, "{} open (esn {esn}, {size} bytes)", alg.name());
                let out = esp::inbound::finish(&mut st, op, 0).map_err(|e| e.0).unwrap();
                assert_eq!(&out.frame()[14..], &inner[..], "{}: inner packet back", alg.name());
                packets.push((alg, icv_len, pkt));
            }
        }
        release(dev, enc);
        release(dev, dec);
    }
    packets
}

/// Every (algorithm, ICV length) pair secgw offers: 50 (38 algorithms,
/// AES-GCM's and AES-CCM's three each with two truncated ICVs).
fn every_transform() -> usize {
    let n = Algorithm::ALL.iter().map(|a| a.icv_lens().len()).sum();
    assert_eq!(n, 50, "an algorithm or ICV length came or went: update this count");
    n
}

fn every_algorithm_esp<D: Dut>(dev: &D) {
    let n = every_algorithm_esp_round_trip(dev).len();
    let transforms = if dev.info().provider == RING { 3 } else { every_transform() };
    assert_eq!(n, transforms * 2 * 4);
}

/// A flipped bit anywhere the ICV covers — header, IV, encrypted part,
/// ICV — fails every algorithm, and no unverified plaintext comes back
/// (RFC 4303 §3.4.4): RustCrypto leaves the buffer as it was (nothing
/// decrypted before the ICV verified), ring and CCM zero the encrypted
/// part.
fn every_algorithm_rejects_tampering<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<PktBuf>(QP, QpConf { nb_descriptors: 8 }).unwrap();
    for (alg, icv_len) in transforms(dev) {
        let enc = attached(dev, &algo_xform(alg, CipherDirection::Encrypt, icv_len));
        let dec = attached(dev, &algo_xform(alg, CipherDirection::Decrypt, icv_len));
        let mut iv = [0u8; 16];
        IvGen::with_key([0x22; 16]).write(alg, 9, &mut iv);
        let mut buf = PktBuf::new();
        assert!(buf.copy_from(&pattern(40, 1)));
        let op = esp::outbound::encap(77, &enc, 9, false, &iv[..alg.iv_len()], 4, buf).map_err(|e| e.0).unwrap();
        let pkt = run(&mut qp, vec![op]).pop().unwrap().buf.frame().to_vec();
        let sa = InboundSa::tunnel(77, dec.clone(), "0.0.0.0".parse().unwrap(), "0.0.0.0".parse().unwrap());
        let st = InboundState::new(&sa);
        let n = pkt.len();
        let mut flips = vec![6, n - 1, n - icv_len - 1, 8 + alg.iv_len()];
        if alg.iv_len() > 0 {
            flips.push(8);
        }
        let mut ops = Vec::new();
        for &i in &flips {
            let mut bad = pkt.clone();
            bad[i] ^= 0x20;
            let mut buf = PktBuf::new();
            assert!(buf.copy_from(&bad));
            ops.push(esp::inbound::prepare(&sa, &st, buf, 0).map_err(|e| e.0).unwrap());
        }
        for (op, &i) in run(&mut qp, ops).iter().zip(&flips) {
            assert_eq!(op.status, OpStatus::AuthFailed, "{} (icv {icv_len}): bit flipped at {i}", alg.name());
            let mut bad = pkt.clone();
            bad[i] ^= 0x20;
            // ring and CCM (which decrypts to verify) zero the encrypted part.
            if dec.provider() == Provider::Ring || alg.cipher() == Cipher::AesCcm {
                bad[8 + alg.iv_len()..n - icv_len].fill(0);
            }
            assert_eq!(op.buf.frame(), &bad[..], "{} ({:?}): buffer as it was, or zeroed by ring / CCM", alg.name(), dec.provider());
        }
        release(dev, enc);
        release(dev, dec);
    }
}

/// RFC 3602 §4 Cases #1-#4 (AES-128-CBC), NIST SP 800-38A F.2.3
/// (AES-192-CBC) and RFC 3686 §6 (AES-CTR, 128-, 192- and 256-bit keys)
/// as ops on the device: the cipher
/// range becomes the published ciphertext, and opens back.
fn cipher_vectors<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: 4 }).unwrap();
    let mut cases = Vec::new();
    for v in json("cbc_esp.json")["cipher_vectors"].as_array().unwrap() {
        let alg = match hv(v, "key").len() {
            16 => Algorithm::Aes128CbcHmacSha1,
            24 => Algorithm::Aes192CbcHmacSha256,
            n => panic!("no AES-CBC vector with a {n}-byte key here"),
        };
        cases.push((alg, hv(v, "key"), [0u8; 4], hv(v, "iv"), hv(v, "plaintext"), hv(v, "ciphertext")));
    }
    for v in json("ctr.json")["vectors"].as_array().unwrap() {
        let alg = match hv(v, "key").len() {
            16 => Algorithm::Aes128CtrHmacSha256,
            24 => Algorithm::Aes192CtrHmacSha1,
            32 => Algorithm::Aes256CtrHmacSha1,
            n => panic!("RFC 3686 has no {n}-byte AES key"),
        };
        cases.push((alg, hv(v, "key"), hv(v, "nonce").try_into().unwrap(), hv(v, "iv"), hv(v, "plaintext"), hv(v, "ciphertext")));
    }
    assert_eq!(cases.len(), 5 + 9);
    for (alg, key, salt, iv, pt, ct) in cases {
        let mut x = algo_xform(alg, CipherDirection::Encrypt, alg.default_icv_len());
        (x.key, x.salt) = (key, salt);
        let enc = attached(dev, &x);
        x.direction = CipherDirection::Decrypt;
        let dec = attached(dev, &x);
        let icv = alg.default_icv_len();
        let mut op = CryptoOp::new(enc.clone(), [&pt[..], &vec![0; icv]].concat());
        (op.data_len, op.auth_len, op.icv_offset) = (pt.len() as u32, pt.len() as u32, pt.len() as u32);
        op.iv[..iv.len()].copy_from_slice(&iv);
        let mut op = run(&mut qp, vec![op]).pop().unwrap();
        assert_eq!(op.status, OpStatus::Success);
        assert_eq!(hex::encode(&op.buf[..pt.len()]), hex::encode(&ct), "{}", alg.name());
        (op.session, op.status) = (dec.clone(), OpStatus::NotProcessed);
        let op = run(&mut qp, vec![op]).pop().unwrap();
        assert_eq!((op.status, &op.buf[..pt.len()]), (OpStatus::Success, &pt[..]));
        release(dev, enc);
        release(dev, dec);
    }
}

/// RFC 2202 (20-byte keys: HMAC-SHA1-96) and RFC 4868 §2.7.2.1-3 (32-,
/// 48- and 64-byte keys: HMAC-SHA-256-128, -384-192, -512-256) through
/// NULL + HMAC sessions: the ICV is the
/// published truncated MAC, verification passes, and fails on a flipped bit.
/// The other key lengths of RFC 2202/4231 are unit tests of the transform.
fn hmac_vectors<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: 4 }).unwrap();
    let f = json("hmac.json");
    let mut cases = Vec::new();
    for v in f["hmac_sha1"].as_array().unwrap().iter().filter(|v| hv(v, "key").len() == 20) {
        cases.push((Algorithm::NullHmacSha1, hv(v, "key"), hv(v, "data"), hv(v, "digest_96")));
    }
    for v in f["hmac_sha256_128"].as_array().unwrap() {
        cases.push((Algorithm::NullHmacSha256, hv(v, "key"), hv(v, "data"), hv(v, "digest_128")));
    }
    for v in f["hmac_sha384_192"].as_array().unwrap() {
        cases.push((Algorithm::NullHmacSha384, hv(v, "key"), hv(v, "data"), hv(v, "digest_192")));
    }
    for v in f["hmac_sha512_256"].as_array().unwrap() {
        cases.push((Algorithm::NullHmacSha512, hv(v, "key"), hv(v, "data"), hv(v, "digest_256")));
    }
    assert_eq!(cases.len(), 3 + 3 + 3 + 3);
    for (alg, key, data, mac) in cases {
        let mut x = algo_xform(alg, CipherDirection::Encrypt, mac.len());
        x.auth_key = key;
        let enc = attached(dev, &x);
        x.direction = CipherDirection::Decrypt;
        let dec = attached(dev, &x);
        let mut op = CryptoOp::new(enc.clone(), [&data[..], &vec![0; mac.len()]].concat());
        (op.auth_len, op.icv_offset) = (data.len() as u32, data.len() as u32);
        let op = run(&mut qp, vec![op]).pop().unwrap();
        assert_eq!((op.status, hex::encode(&op.buf[data.len()..])), (OpStatus::Success, hex::encode(&mac)), "{}", alg.name());
        let mut ok = CryptoOp::new(dec.clone(), op.buf.clone());
        (ok.auth_len, ok.icv_offset) = (data.len() as u32, data.len() as u32);
        let mut bad = CryptoOp::new(dec.clone(), op.buf.clone());
        (bad.auth_len, bad.icv_offset) = (data.len() as u32, data.len() as u32);
        bad.buf[0] ^= 1;
        let out = run(&mut qp, vec![ok, bad]);
        assert_eq!((out[0].status, out[1].status), (OpStatus::Success, OpStatus::AuthFailed));
        release(dev, enc);
        release(dev, dec);
    }
}

/// The RFC 3602 §4 #5-#8, RFC 7634 Appendix A, RFC 4543 and AES-CCM
/// (ccm_esp.json) packets, sealed on `dev` by our outbound framing with each
/// vector's IV.
fn packet_vectors_on_device<D: Dut>(dev: &D) -> Vec<Vec<u8>> {
    let mut qp = dev.queue_pair_setup::<PktBuf>(QP, QpConf { nb_descriptors: 4 }).unwrap();
    let mut out = Vec::new();
    for c in packet_cases().into_iter().filter(|c| offers(dev, c.alg)) {
        let s = attached(dev, &c.xform(CipherDirection::Encrypt));
        let mut buf = PktBuf::new();
        assert!(buf.copy_from(&c.payload));
        let op = esp::outbound::encap(c.spi, &s, c.seq, c.esn, &c.iv, c.next_header, buf).map_err(|e| e.0).unwrap();
        let op = run(&mut qp, vec![op]).pop().unwrap();
        assert_eq!(hex::encode(op.buf.frame()), hex::encode(&c.packet), "{}", c.name);
        out.push(op.buf.frame().to_vec());
        release(dev, s);
    }
    out
}

fn packet_vectors<D: Dut>(dev: &D) {
    let want = if dev.info().provider == RING { packet_cases().iter().filter(|c| c.alg == Algorithm::ChaCha20Poly1305).count() } else { 13 };
    assert!(want > 0);
    assert_eq!(packet_vectors_on_device(dev).len(), want);
}

/// An op whose shape does not fit its session's transform is `InvalidOp`
/// and leaves its buffer alone: CBC range not whole blocks, AAD on a MAC
/// session, a trailer on a combined mode, a cipher range on GMAC, an auth
/// range on ChaCha20-Poly1305, an auth range overlapping the ICV.
fn op_shape_per_algorithm<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: 16 }).unwrap();
    let mk = |alg: Algorithm| attached(dev, &algo_xform(alg, CipherDirection::Encrypt, alg.default_icv_len()));
    let (cbc, gcm, gmac, chacha) = (mk(Algorithm::Aes256CbcHmacSha256), mk(Algorithm::Aes128Gcm), mk(Algorithm::Aes128Gmac), mk(Algorithm::ChaCha20Poly1305));
    let op = |s: &Arc<Session>, data: u32, auth: u32| {
        let mut o = CryptoOp::new(s.clone(), pattern(80, 3));
        (o.data_len, o.auth_len, o.icv_offset) = (data, auth, 64);
        o
    };
    let mut cbc_partial = op(&cbc, 40, 48);
    cbc_partial.data_len = 40;
    let mut cbc_aad = op(&cbc, 32, 48);
    cbc_aad.aad_len = 8;
    let mut gcm_trailer = op(&gcm, 32, 0);
    gcm_trailer.auth_trailer_len = 4;
    let gmac_data = op(&gmac, 16, 32);
    let chacha_auth = op(&chacha, 32, 8);
    let cbc_overlap = op(&cbc, 32, 70);
    let ops = vec![op(&cbc, 48, 64), cbc_partial, cbc_aad, gcm_trailer, gmac_data, chacha_auth, cbc_overlap, op(&gmac, 0, 64)];
    let out = run(&mut qp, ops);
    use OpStatus::*;
    assert_eq!(out.iter().map(|o| o.status).collect::<Vec<_>>(), [Success, InvalidOp, InvalidOp, InvalidOp, InvalidOp, InvalidOp, InvalidOp, Success]);
    for o in &out[1..7] {
        assert_eq!(o.buf, pattern(80, 3));
    }
    for s in [cbc, gcm, gmac, chacha] {
        release(dev, s);
    }
}

/// The combined-mode shapes on every provider: a trailer on GCM and an
/// auth range on ChaCha20-Poly1305 are `InvalidOp` whoever runs them; a
/// GCM op with an auth range (AAD = op AAD ‖ auth range) runs on
/// RustCrypto and is `InvalidOp` on ring, which takes one contiguous AAD
/// (ESP never builds it: `esp::esp_op`); a plain GCM op succeeds.
fn op_shape_combined<D: Dut>(dev: &D) {
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(QP, QpConf { nb_descriptors: 16 }).unwrap();
    let mk = |alg: Algorithm| attached(dev, &algo_xform(alg, CipherDirection::Encrypt, 16));
    let (gcm, chacha) = (mk(Algorithm::Aes256Gcm), mk(Algorithm::ChaCha20Poly1305));
    let op = |s: &Arc<Session>, data: u32, auth: u32| {
        let mut o = CryptoOp::new(s.clone(), pattern(80, 3));
        (o.data_offset, o.data_len, o.auth_len, o.icv_offset) = (16, data, auth, 64);
        o.aad_len = 8;
        o
    };
    let mut gcm_trailer = op(&gcm, 32, 0);
    gcm_trailer.auth_trailer_len = 4;
    let ops = vec![op(&gcm, 48, 0), gcm_trailer, op(&chacha, 32, 8), op(&gcm, 48, 16), op(&chacha, 48, 0)];
    let out = run(&mut qp, ops);
    use OpStatus::*;
    let auth_range = if gcm.provider() == Provider::Ring { InvalidOp } else { Success };
    assert_eq!(out.iter().map(|o| o.status).collect::<Vec<_>>(), [Success, InvalidOp, InvalidOp, auth_range, Success]);
    for o in out.iter().filter(|o| o.status == InvalidOp) {
        assert_eq!(o.buf, pattern(80, 3), "an invalid op leaves its buffer alone");
    }
    for s in [gcm, chacha] {
        release(dev, s);
    }
}

/// `$t` on the soft and descriptor devices with provider `$p`, in module
/// `$m`.
macro_rules! on_devices {
    ($soft:ident, $desc:ident, $p:expr; $($t:ident),* $(,)?) => {
        mod $soft {
            $( #[test] fn $t() { super::$t(&super::soft_on($p)) } )*
        }
        mod $desc {
            $( #[test] fn $t() { super::$t(&super::descriptor_on($p)) } )*
        }
    };
}

/// The suite every provider runs (each test covers what the device's
/// provider offers).
macro_rules! for_every_provider {
    ($($t:ident),* $(,)?) => {
        on_devices!(soft_auto, descriptor_auto, super::AUTO; $($t),*);
        on_devices!(soft_rustcrypto, descriptor_rustcrypto, super::RUSTCRYPTO; $($t),*);
        on_devices!(soft_ring, descriptor_ring, super::RING; $($t),*);
    };
}

/// Tests of algorithms only RustCrypto runs (CBC, CTR, NULL, HMAC, GMAC).
mod rustcrypto_only {
    on_devices!(soft_auto, descriptor_auto, crate::AUTO; cipher_vectors, hmac_vectors, op_shape_per_algorithm);
    on_devices!(soft_rustcrypto, descriptor_rustcrypto, crate::RUSTCRYPTO; cipher_vectors, hmac_vectors, op_shape_per_algorithm);
    use super::*;
}

for_every_provider!(
    seal_open_round_trip,
    tampered_icv_fails_auth,
    bad_ranges_are_invalid_op,
    ring_full_accepts_fewer_and_loses_nothing,
    stop_accepts_nothing_and_inflight_completes,
    esp_outbound_vectors,
    sync_path_vectors,
    device_lists_every_algorithm,
    session_create_refuses_what_is_not_listed,
    every_algorithm_esp,
    every_algorithm_rejects_tampering,
    packet_vectors,
    op_shape_combined,
);

#[test]
fn esp_outbound_is_byte_identical_between_backends_and_providers() {
    let reference = esp_outbound_matches_vectors(&soft_on(RUSTCRYPTO));
    // ring has no AES-192: its devices run the other vectors.
    let no_192: Vec<Vec<u8>> = gcm_vectors().iter().zip(&reference).filter(|(v, _)| v.key.len() != 48).map(|(_, p)| p.clone()).collect();
    assert_eq!(reference.len(), gcm_vectors().len());
    for p in ProviderChoice::ALL {
        let want = if p == RING { &no_192 } else { &reference };
        assert_eq!(&esp_outbound_matches_vectors(&soft_on(p)), want, "soft, {}", p.name());
        assert_eq!(&esp_outbound_matches_vectors(&descriptor_on(p)), want, "descriptor, {}", p.name());
    }
}

#[test]
fn every_algorithm_is_byte_identical_between_backends_and_providers() {
    let reference = every_algorithm_esp_round_trip(&soft_on(RUSTCRYPTO));
    assert_eq!(reference.len(), every_transform() * 2 * 4);
    for p in ProviderChoice::ALL {
        for packets in [every_algorithm_esp_round_trip(&soft_on(p)), every_algorithm_esp_round_trip(&descriptor_on(p))] {
            // Ring runs a subset: compare each of its packets with
            // RustCrypto's for the same transform, in order.
            let same: Vec<_> = reference.iter().filter(|(a, l, _)| packets.iter().any(|(b, m, _)| (a, l) == (b, m))).cloned().collect();
            assert!(!packets.is_empty());
            assert_eq!(same.len(), packets.len(), "{}", p.name());
            assert!(same == packets, "ESP differs from RustCrypto's with provider {}", p.name());
        }
    }
    let reference = packet_vectors_on_device(&soft_on(RUSTCRYPTO));
    assert_eq!(packet_vectors_on_device(&soft()), reference);
    assert_eq!(packet_vectors_on_device(&descriptor()), reference);
}

// ---------------------------------------------------------------------------
// Device info and the soft device's refusals.

#[test]
fn device_info_flags() {
    let s = soft().info();
    assert_eq!((s.max_sessions_per_qp, s.flags.attach_sessions, s.flags.sync), (0, false, true));
    let d = descriptor_with(3).info();
    assert_eq!((d.max_sessions_per_qp, d.flags.attach_sessions, d.flags.sync, d.flags.hardware), (3, true, false, true));
    assert_eq!(s.capabilities, d.capabilities, "same transform, same capabilities");
}

#[test]
fn soft_device_has_no_attach() {
    let dev = soft();
    let s = dev.session_create(&xform(CipherDirection::Encrypt, &[1; 16], [0; 4])).unwrap();
    for r in [dev.queue_pair_attach_session(0, &s), dev.queue_pair_detach_session(0, &s), dev.queue_pair_setup_session(0, &s)] {
        assert!(matches!(r, Err(CryptoError::AttachNotSupported { .. })), "{r:?}");
    }
    dev.session_free(s).unwrap();
}

// ---------------------------------------------------------------------------
// Descriptor device: session limit per queue pair.

fn enc_session(dev: &DescriptorDevice, k: u8) -> Arc<Session> {
    dev.session_create(&xform(CipherDirection::Encrypt, &[k; 16], [k; 4])).unwrap()
}

#[test]
fn descriptor_attach_past_limit_is_limit_reached() {
    let dev = descriptor_with(2);
    let (a, b, c) = (enc_session(&dev, 1), enc_session(&dev, 2), enc_session(&dev, 3));
    dev.queue_pair_attach_session(0, &a).unwrap();
    dev.queue_pair_attach_session(0, &b).unwrap();
    assert_eq!(dev.queue_pair_attach_session(0, &c), Err(CryptoError::LimitReached { driver: "crypto_descriptor", qp_id: 0, limit: 2 }));
    // The limit is per queue pair.
    dev.queue_pair_attach_session(1, &c).unwrap();
    dev.queue_pair_detach_session(0, &a).unwrap();
    dev.queue_pair_attach_session(0, &c).unwrap();
    assert_eq!(dev.qp_sessions(0).unwrap(), 2);
}

#[test]
fn descriptor_attach_twice_is_already_attached() {
    let dev = descriptor_with(4);
    let a = enc_session(&dev, 1);
    dev.queue_pair_attach_session(0, &a).unwrap();
    assert!(matches!(dev.queue_pair_attach_session(0, &a), Err(CryptoError::AlreadyAttached { qp_id: 0, .. })));
    assert_eq!(dev.qp_sessions(0).unwrap(), 1);
}

#[test]
fn descriptor_detach_unknown_is_not_attached() {
    let dev = descriptor_with(4);
    let (a, b) = (enc_session(&dev, 1), enc_session(&dev, 2));
    dev.queue_pair_attach_session(1, &a).unwrap();
    assert!(matches!(dev.queue_pair_detach_session(0, &a), Err(CryptoError::NotAttached { qp_id: 0, .. })));
    assert!(matches!(dev.queue_pair_detach_session(1, &b), Err(CryptoError::NotAttached { qp_id: 1, .. })));
    assert!(matches!(dev.queue_pair_detach_session(7, &a), Err(CryptoError::NoQueuePair { qp_id: 7, nb: 2, .. })));
}

#[test]
fn descriptor_detach_with_jobs_in_flight_is_busy() {
    let dev = descriptor_with(2);
    let a = enc_session(&dev, 1);
    dev.queue_pair_attach_session(0, &a).unwrap();
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: 8 }).unwrap();
    dev.engines_hold();
    let mut ops: Vec<_> = (0..3).map(|t| op(&a, &payload(64, 0), t)).collect();
    assert_eq!(qp.enqueue_burst(&mut ops), 3);
    assert!(matches!(dev.queue_pair_detach_session(0, &a), Err(CryptoError::Busy { qp_id: 0, inflight: 3, .. })));
    assert_eq!(dev.qp_sessions(0).unwrap(), 1, "a refused detach changes nothing");
    dev.engines_resume();
    let out = drain(&mut qp, 3);
    assert!(out.iter().all(|o| o.status == OpStatus::Success), "the jobs kept their session");
    dev.queue_pair_detach_session(0, &a).unwrap();
}

#[test]
fn descriptor_unattached_session_completes_not_attached_and_counted() {
    let dev = descriptor_with(2);
    let (a, b) = (enc_session(&dev, 1), enc_session(&dev, 2));
    dev.queue_pair_attach_session(0, &a).unwrap();
    dev.queue_pair_attach_session(1, &b).unwrap(); // attached, but to the other queue pair
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: 8 }).unwrap();
    let p = payload(64, 9);
    let out = run(&mut qp, vec![op(&a, &p, 0), op(&b, &p, 1), op(&a, &p, 2), op(&b, &p, 3)]);
    assert_eq!(tags(&out), [0, 1, 2, 3], "in order with the others");
    use OpStatus::*;
    assert_eq!(out.iter().map(|o| o.status).collect::<Vec<_>>(), [Success, SessionNotAttached, Success, SessionNotAttached]);
    assert_eq!(&out[1].buf[..64], &p[..], "never processed by accident");
    assert_eq!(dev.qp_sessions(0).unwrap(), 1, "nothing attached implicitly");
    let st = dev.qp_stats(0).unwrap();
    assert_eq!((st.enqueued, st.dequeued, st.completed, st.not_attached, st.device_errors), (4, 4, 4, 2, 0));
    // Detached sessions are refused the same way.
    dev.queue_pair_detach_session(0, &a).unwrap();
    let out = run(&mut qp, vec![op(&a, &p, 4)]);
    assert_eq!(out[0].status, SessionNotAttached);
    assert_eq!(dev.qp_stats(0).unwrap().not_attached, 3);
}

#[test]
fn descriptor_session_free_of_attached_session_is_in_use() {
    let dev = descriptor_with(2);
    let a = enc_session(&dev, 1);
    dev.queue_pair_attach_session(1, &a).unwrap();
    let id = a.id();
    assert_eq!(dev.session_free(a.clone()), Err(CryptoError::SessionInUse { driver: "crypto_descriptor", session_id: id, qp_id: 1 }));
    dev.queue_pair_detach_session(1, &a).unwrap();
    dev.session_free(a).unwrap();
}

#[test]
fn descriptor_setup_session_needs_a_stopped_queue_pair_and_a_drained_session() {
    let dev = descriptor_with(1);
    let (old, new) = (enc_session(&dev, 1), enc_session(&dev, 2));
    dev.queue_pair_attach_session(0, &old).unwrap();
    assert_eq!(dev.queue_pair_setup_session(0, &new), Err(CryptoError::NotStopped { driver: "crypto_descriptor", qp_id: 0 }));
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: 8 }).unwrap();
    dev.engines_hold();
    let mut ops = vec![op(&old, &payload(64, 0), 0)];
    assert_eq!(qp.enqueue_burst(&mut ops), 1);
    dev.queue_pair_stop(0).unwrap();
    assert!(matches!(dev.queue_pair_setup_session(0, &new), Err(CryptoError::Busy { inflight: 1, .. })));
    dev.engines_resume();
    assert_eq!(drain(&mut qp, 1)[0].status, OpStatus::Success);
    dev.queue_pair_setup_session(0, &new).unwrap();
    dev.queue_pair_start(0).unwrap();
    let out = run(&mut qp, vec![op(&new, &payload(64, 0), 1), op(&old, &payload(64, 0), 2)]);
    assert_eq!((out[0].status, out[1].status), (OpStatus::Success, OpStatus::SessionNotAttached));
    dev.session_free(old).unwrap();
}

#[test]
fn descriptor_config_and_depth_are_checked() {
    let ok = DescriptorConfig { nb_queue_pairs: 1, ring_depth: 16, max_sessions_per_qp: 1, nb_engines: 1 };
    for bad in [
        DescriptorConfig { nb_queue_pairs: 0, ..ok },
        DescriptorConfig { ring_depth: 0, ..ok },
        DescriptorConfig { max_sessions_per_qp: 0, ..ok },
        DescriptorConfig { nb_engines: 0, ..ok },
    ] {
        assert!(matches!(DescriptorDevice::new(bad), Err(CryptoError::InvalidConfig { .. })), "{bad:?}");
    }
    let dev = DescriptorDevice::new(ok).unwrap();
    assert!(matches!(dev.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: 17 }), Err(CryptoError::InvalidConfig { .. })));
    assert!(dev.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: 16 }).is_ok());
    assert!(matches!(dev.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: 16 }), Err(CryptoError::QueuePairInUse { .. })));
}

/// Three queue pairs on two engines, each fed from its own thread: every
/// queue pair's completions come back complete and in order.
#[test]
fn descriptor_queue_pairs_complete_in_order_across_engines() {
    let dev = Arc::new(DescriptorDevice::new(DescriptorConfig { nb_queue_pairs: 3, ring_depth: 16, max_sessions_per_qp: 1, nb_engines: 2 }).unwrap());
    let workers: Vec<_> = (0..3u16)
        .map(|q| {
            let s = enc_session(&dev, q as u8 + 1);
            dev.queue_pair_attach_session(q, &s).unwrap();
            let mut qp = dev.queue_pair_setup::<Vec<u8>>(q, QpConf { nb_descriptors: 16 }).unwrap();
            std::thread::spawn(move || {
                const N: u64 = 500;
                let (mut next, mut expect) = (0u64, 0u64);
                let mut ops = Vec::with_capacity(8);
                let mut out = Vec::with_capacity(16);
                let deadline = Instant::now() + Duration::from_secs(20);
                while expect < N {
                    while ops.len() < 8 && next < N {
                        ops.push(op(&s, &payload(64, 0), next));
                        next += 1;
                    }
                    qp.enqueue_burst(&mut ops);
                    out.clear();
                    if qp.dequeue_burst(&mut out, 16) == 0 {
                        assert!(Instant::now() < deadline);
                        std::thread::sleep(Duration::from_micros(20));
                    }
                    for o in &out {
                        assert_eq!((o.user[0], o.status), (expect, OpStatus::Success), "queue pair {q}");
                        expect += 1;
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    for q in 0..3 {
        let st = dev.qp_stats(q).unwrap();
        assert_eq!((st.enqueued, st.dequeued, st.completed, st.not_attached), (500, 500, 500, 0));
    }
}

/// The rekey path with `max_sessions_per_qp = 1`, under load: a producer
/// thread owns the queue pair and keeps offering ops; the control thread
/// (this one) rekeys three times: stop → setup with the new session (retried
/// while the old one is `Busy`) → publish the new session → wait until the
/// producer has seen it → start. The producer re-stamps the ops it was
/// refused with the session it currently sees, as a worker re-prepares
/// packets with the SA of the current snapshot.
///
/// Proves: every op offered is accepted exactly once and completes exactly
/// once, in order, `Success`; ops accepted before stop `r` were sealed with
/// key generation `< r` and ops accepted after it with `>= r` (checked by
/// opening each one on the software device with the generation's key);
/// every stop refused ops; nothing completed `SessionNotAttached`.
#[test]
fn descriptor_rekey_with_limit_1_loses_no_op() {
    const ROUNDS: usize = 3;
    const DEPTH: usize = 32;
    const BURST: usize = 8;
    let dev = Arc::new(DescriptorDevice::new(DescriptorConfig { nb_queue_pairs: 1, ring_depth: DEPTH, max_sessions_per_qp: 1, nb_engines: 1 }).unwrap());
    let keys: Vec<u8> = (0..=ROUNDS as u8).map(|g| 0x40 + g).collect();
    let sessions: Arc<Vec<Arc<Session>>> = Arc::new(keys.iter().map(|&k| enc_session(&dev, k)).collect());
    dev.queue_pair_attach_session(0, &sessions[0]).unwrap();

    let current = Arc::new(AtomicUsize::new(0)); // generation published by control
    let seen = Arc::new(AtomicUsize::new(0)); // generation the producer stamps with
    let refused = Arc::new(AtomicU64::new(0)); // ops a stopped queue pair refused
    let finish = Arc::new(AtomicBool::new(false));
    let mut qp = dev.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: DEPTH }).unwrap();

    let producer = {
        let (sessions, current, seen, refused, finish) = (sessions.clone(), current.clone(), seen.clone(), refused.clone(), finish.clone());
        std::thread::spawn(move || {
            let mut pending: Vec<CryptoOp<Vec<u8>>> = Vec::with_capacity(BURST);
            let mut out = Vec::with_capacity(DEPTH);
            let mut done = Vec::new(); // (seq, generation, sealed buffer)
            let mut accepted_gen: Vec<usize> = Vec::new(); // index = seq = acceptance order
            let mut next_seq = 0u64;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let g = current.load(Ordering::Acquire);
                for o in pending.iter_mut() {
                    if o.user[1] as usize != g {
                        o.session = sessions[g].clone();
                        o.user[1] = g as u64;
                    }
                }
                seen.store(g, Ordering::Release);
                let stopping = finish.load(Ordering::Acquire);
                while !stopping && pending.len() < BURST {
                    let mut o = op(&sessions[g], &payload(64, next_seq as u8), next_seq);
                    o.user[1] = g as u64;
                    pending.push(o);
                    next_seq += 1;
                }
                let mut gens = [0usize; BURST];
                for (slot, o) in gens.iter_mut().zip(&pending) {
                    *slot = o.user[1] as usize;
                }
                let offered = pending.len();
                let n = qp.enqueue_burst(&mut pending);
                accepted_gen.extend_from_slice(&gens[..n]);
                if n == 0 && offered > 0 && qp.inflight() < DEPTH {
                    refused.fetch_add(offered as u64, Ordering::AcqRel);
                }
                out.clear();
                let m = qp.dequeue_burst(&mut out, DEPTH);
                for o in out.drain(..) {
                    let seq = o.user[0];
                    assert_eq!(seq as usize, done.len(), "completions in acceptance order");
                    assert_eq!(o.status, OpStatus::Success, "op {seq}");
                    let g = accepted_gen[seq as usize];
                    assert!(Arc::ptr_eq(&o.session, &sessions[g]), "op {seq} kept the session it was accepted with");
                    done.push((seq, g, o.buf));
                }
                if stopping && pending.is_empty() && qp.inflight() == 0 {
                    return (done, accepted_gen.len(), next_seq);
                }
                if n == 0 && m == 0 {
                    assert!(Instant::now() < deadline, "producer stuck");
                    std::thread::sleep(Duration::from_micros(10));
                }
            }
        })
    };

    let wait = |what: &str, cond: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_micros(50));
        }
    };
    let mut stop_marks = Vec::new(); // ops accepted when stop r returned
    let mut busy = 0;
    for r in 1..=ROUNDS {
        let base = dev.qp_stats(0).unwrap().enqueued;
        wait("traffic", &|| dev.qp_stats(0).unwrap().enqueued >= base + 300);
        dev.queue_pair_stop(0).unwrap();
        stop_marks.push(dev.qp_stats(0).unwrap().enqueued);
        let r0 = refused.load(Ordering::Acquire);
        wait("a refused burst", &|| refused.load(Ordering::Acquire) > r0);
        loop {
            match dev.queue_pair_setup_session(0, &sessions[r]) {
                Ok(()) => break,
                Err(CryptoError::Busy { .. }) => {
                    busy += 1;
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(dev.qp_stats(0).unwrap().enqueued, stop_marks[r - 1], "nothing accepted while stopped");
        current.store(r, Ordering::Release);
        wait("the producer to see the new session", &|| seen.load(Ordering::Acquire) == r);
        dev.queue_pair_start(0).unwrap();
    }
    let base = dev.qp_stats(0).unwrap().enqueued;
    wait("traffic after the last rekey", &|| dev.qp_stats(0).unwrap().enqueued >= base + 100);
    finish.store(true, Ordering::Release);
    let (done, accepted, offered) = producer.join().unwrap();

    assert_eq!(accepted as u64, offered, "every op offered was accepted once");
    assert_eq!(done.len(), accepted, "every accepted op completed once");
    let soft = SoftDevice::new(1);
    let mut check = soft.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: 1 }).unwrap();
    let openers: Vec<_> = keys.iter().map(|&k| soft.session_create(&xform(CipherDirection::Decrypt, &[k; 16], [k; 4])).unwrap()).collect();
    for (seq, g, buf) in done {
        let r = stop_marks.iter().filter(|&&m| seq >= m).count();
        assert_eq!(g, r, "op {seq}: accepted between stop {r} and stop {}", r + 1);
        let mut o = op(&openers[g], &[], seq);
        o.data_len = 64;
        o.icv_offset = 64;
        o.buf = buf;
        let o = run(&mut check, vec![o]).pop().unwrap();
        assert_eq!(o.status, OpStatus::Success, "op {seq} sealed with key generation {g}");
        assert_eq!(&o.buf[..64], &payload(64, seq as u8)[..]);
    }
    let st = dev.qp_stats(0).unwrap();
    assert_eq!((st.enqueued, st.dequeued, st.completed), (offered, offered, offered));
    assert_eq!((st.not_attached, st.device_errors), (0, 0));
    assert!(st.rejected_stopped >= ROUNDS as u64);
    eprintln!("rekey under load: {offered} ops, {} refused while stopped (retried), {busy} Busy retries", st.rejected_stopped);
}
