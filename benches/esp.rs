//! ESP outbound/inbound throughput on one core next to the raw AES-GCM seal
//! of the same provider (RustCrypto `aes-gcm`), for 64, 512 and 1420-byte
//! inner packets. Read the ratio ours/raw from one run:
//! `cargo bench --bench esp`. The group `esp_outbound_algorithms` runs the
//! same outbound path with one SA of each algorithm family (64 and 1420
//! bytes), against the AES-128-GCM line of the first group. The group
//! `replay` times the anti-replay window's check + commit (RFC 6479 bitmap)
//! at windows 64 and 4096: in order, and in blocks of 32 arriving in reverse
//! order; the two sizes should cost the same.

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
use secgw::crypto::{AeadAlgorithm, Algorithm, CipherDirection, CryptoDevice, QpConf, QueuePair, SymXform};
use secgw::esp::{self, DfMode, IvGen, OutboundSa, OutboundState};
use secgw::io::PktBuf;

mod common;

const SIZES: [usize; 3] = [64, 512, 1420];

fn frame(size: usize) -> Vec<u8> {
    let mut f = vec![0u8; 14 + size];
    f[12] = 8;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(size as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    f
}

fn bench(c: &mut Criterion) {
    let key = [7u8; 16];
    let mut g = c.benchmark_group("esp_outbound_aes128gcm");
    let dev = SoftDevice::new(1);
    let session = dev
        .session_create(&SymXform { algorithm: AeadAlgorithm::Aes128Gcm, direction: CipherDirection::Encrypt, key: key.to_vec(), salt: [1, 2, 3, 4], icv_len: 16, auth_key: Vec::new() })
        .unwrap();
    let sa = OutboundSa {
        id: 0,
        life: Default::default(),
        first_seq: 1,
        spi: 1001,
        session,
        transport: false,
        tunnel_src: "203.0.113.1".parse().unwrap(),
        tunnel_dst: "203.0.113.2".parse().unwrap(),
        outer_ttl: 64,
        df: DfMode::Copy,
        esn: false,
        iv_gen: IvGen::counter(),
        udp_encap: None,
        owner: 0,
        dummy: None,
        tfc_pad_to: 0,
    };
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 64 }).unwrap();
    let raw = Aes128Gcm::new_from_slice(&key).unwrap();
    let mut ratios = common::Ratios::new("ESP outbound AES-128-GCM tunnel vs raw seal (same run)");
    for size in SIZES {
        let line = |f: &str| common::Line::new("esp_outbound_aes128gcm", f, size);
        ratios.row(format!("{size} B"), line("secgw_prepare_seal_finish"), line("raw_aes_gcm_seal"), size as f64, "B");
        g.throughput(Throughput::Bytes(size as u64));
        let f = frame(size);
        let mut st = OutboundState::default();
        let mut ops = Vec::with_capacity(1);
        let mut done = Vec::with_capacity(1);
        let mut spare = Some(PktBuf::new());
        g.bench_with_input(BenchmarkId::new("secgw_prepare_seal_finish", size), &size, |b, _| {
            b.iter(|| {
                let mut buf = spare.take().unwrap();
                buf.copy_from(&f);
                let op = esp::outbound::prepare(&sa, &mut st, buf).map_err(|e| e.0).unwrap();
                ops.push(op);
                qp.enqueue_burst(&mut ops);
                qp.dequeue_burst(&mut done, 1);
                let out = esp::outbound::finish(done.pop().unwrap()).map_err(|e| e.0).unwrap();
                spare = Some(out);
            })
        });
        let mut data = vec![0u8; size + 2];
        g.bench_with_input(BenchmarkId::new("raw_aes_gcm_seal", size), &size, |b, _| {
            b.iter(|| raw.encrypt_in_place_detached((&[0u8; 12]).into(), &[0u8; 8], &mut data).unwrap())
        });
    }
    g.finish();
    ratios.print();
}

fn bench_algorithms(c: &mut Criterion) {
    let mut g = c.benchmark_group("esp_outbound_algorithms");
    let dev = SoftDevice::new(1);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 64 }).unwrap();
    let algs = [
        Algorithm::Aes128Gcm,
        Algorithm::Aes128Gmac,
        Algorithm::ChaCha20Poly1305,
        Algorithm::Aes128CbcHmacSha1,
        Algorithm::Aes128CbcHmacSha256,
        Algorithm::Aes128CtrHmacSha256,
        Algorithm::NullHmacSha256,
    ];
    for alg in algs {
        let x = SymXform {
            algorithm: alg,
            direction: CipherDirection::Encrypt,
            key: vec![7; alg.key_len()],
            salt: [1, 2, 3, 4],
            icv_len: alg.default_icv_len(),
            auth_key: vec![9; alg.auth_key_len()],
        };
        let sa = OutboundSa {
            id: 0,
            life: Default::default(),
            first_seq: 1,
            spi: 1001,
            session: dev.session_create(&x).unwrap(),
            transport: false,
            tunnel_src: "203.0.113.1".parse().unwrap(),
            tunnel_dst: "203.0.113.2".parse().unwrap(),
            outer_ttl: 64,
            df: DfMode::Copy,
            esn: false,
            iv_gen: IvGen::for_algorithm(alg).unwrap(),
            udp_encap: None,
            owner: 0,
            dummy: None,
            tfc_pad_to: 0,
        };
        for size in [64usize, 1420] {
            g.throughput(Throughput::Bytes(size as u64));
            let f = frame(size);
            let mut st = OutboundState::default();
            let mut ops = Vec::with_capacity(1);
            let mut done = Vec::with_capacity(1);
            let mut spare = Some(PktBuf::new());
            g.bench_with_input(BenchmarkId::new(alg.name(), size), &size, |b, _| {
                b.iter(|| {
                    let mut buf = spare.take().unwrap();
                    buf.copy_from(&f);
                    let op = esp::outbound::prepare(&sa, &mut st, buf).map_err(|e| e.0).unwrap();
                    ops.push(op);
                    qp.enqueue_burst(&mut ops);
                    qp.dequeue_burst(&mut done, 1);
                    spare = Some(esp::outbound::finish(done.pop().unwrap()).map_err(|e| e.0).unwrap());
                })
            });
        }
    }
    g.finish();
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

criterion_group!(benches, bench, bench_algorithms, bench_replay);
criterion_main!(benches);
