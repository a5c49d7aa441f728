//! Crypto device conformance: the same test functions, parameterised by
//! device, run against the software device and the descriptor device
//! (modules `soft_device` and `descriptor_device`), then the descriptor
//! device's session-limit rules, each in its own test.
//!
//! Jobs are made to stay in flight deterministically with
//! `DescriptorDevice::engines_hold` (the engines acknowledge before it
//! returns); nothing here sleeps and hopes. Waiting for completions polls
//! with 20 µs sleeps under a 10 s deadline, so no test spins a core.

use secgw::crypto::descriptor::{DescriptorConfig, DescriptorDevice};
use secgw::crypto::soft::SoftDevice;
use secgw::crypto::{AeadAlgorithm, CipherDirection, CryptoDevice, CryptoError, CryptoOp, OpStatus, QpConf, QueuePair, Session, SymXform};
use secgw::esp;
use secgw::io::PktBuf;
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
    DescriptorDevice::new(DescriptorConfig { nb_queue_pairs: 2, ring_depth: 64, max_sessions_per_qp: 64, nb_engines: 1 }).unwrap()
}

fn descriptor_with(max_sessions_per_qp: u32) -> DescriptorDevice {
    DescriptorDevice::new(DescriptorConfig { nb_queue_pairs: 2, ring_depth: 64, max_sessions_per_qp, nb_engines: 1 }).unwrap()
}

const QP: u16 = 0;

fn xform(dir: CipherDirection, key: &[u8], salt: [u8; 4]) -> SymXform {
    let algorithm = match key.len() {
        16 => AeadAlgorithm::Aes128Gcm,
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
        assert_ne!(&o.buf[..48], &p[..], "data left encrypted on failure");
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

#[derive(serde::Deserialize)]
struct VectorFile {
    vectors: Vec<Vector>,
}

#[derive(serde::Deserialize)]
struct Vector {
    name: String,
    key: String,
    salt: String,
    spi: String,
    seq: String,
    esn: bool,
    iv: String,
    plaintext: String,
    next_header: u8,
    pad_length: u8,
    packet: String,
}

fn h(s: &str) -> Vec<u8> {
    hex::decode(s).expect("hex")
}

fn vectors() -> Vec<Vector> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/gcm_esp.json");
    let f: VectorFile = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // AES-192 is not offered by the devices.
    f.vectors.into_iter().filter(|v| v.key.len() != 48).collect()
}

/// `esp::outbound::encap` with each vector's SA, IV and sequence number,
/// sealed by `dev`; returns the packets after checking each against its
/// vector (draft-mcgrew-gcm-test-01 §4).
fn esp_outbound_matches_vectors<D: Dut>(dev: &D) -> Vec<Vec<u8>> {
    let mut qp = dev.queue_pair_setup::<PktBuf>(QP, QpConf { nb_descriptors: 4 }).unwrap();
    let mut packets = Vec::new();
    for v in vectors() {
        let s = session(dev, QP, CipherDirection::Encrypt, &h(&v.key), h(&v.salt).try_into().unwrap());
        let plain = h(&v.plaintext);
        let mut buf = PktBuf::new();
        assert!(buf.copy_from(&plain[..plain.len() - 2 - v.pad_length as usize]));
        let seq = h(&v.seq).iter().fold(0u64, |a, b| a << 8 | *b as u64);
        let spi = u32::from_be_bytes(h(&v.spi).try_into().unwrap());
        let op = esp::outbound::encap(spi, &s, seq, v.esn, &h(&v.iv), v.next_header, buf).map_err(|e| e.0).unwrap();
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

macro_rules! for_both_devices {
    ($($t:ident),* $(,)?) => {
        mod soft_device {
            $( #[test] fn $t() { super::$t(&super::soft()) } )*
        }
        mod descriptor_device {
            $( #[test] fn $t() { super::$t(&super::descriptor()) } )*
        }
    };
}

for_both_devices!(
    seal_open_round_trip,
    tampered_icv_fails_auth,
    bad_ranges_are_invalid_op,
    ring_full_accepts_fewer_and_loses_nothing,
    stop_accepts_nothing_and_inflight_completes,
    esp_outbound_vectors,
);

#[test]
fn esp_outbound_is_byte_identical_between_backends() {
    let soft = esp_outbound_matches_vectors(&soft());
    let desc = esp_outbound_matches_vectors(&descriptor());
    assert_eq!(soft, desc);
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
