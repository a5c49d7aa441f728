//! Crypto device throughput: the software device with provider `auto`
//! (ring for AES-128-GCM) next to the software device with RustCrypto
//! (`soft_rustcrypto`: the provider speed-up, ratio printed) and the
//! descriptor device (one queue pair, one engine thread, `auto`),
//! AES-128-GCM seal, for bursts
//! of 1, 8, 32 and 64 ops of 64 and 1420-byte payloads. One group,
//! `Throughput::Elements` = ops, and each descriptor line printed right after
//! the soft line of the same size and burst, so the ratio (the cost of the
//! ring hops and the engine hand-off around the same transform) reads from
//! one run: `cargo bench --bench crypto` (about a minute).
//!
//! One iteration = enqueue one burst, then poll `dequeue_burst` until the
//! whole burst is back (the soft device completes at enqueue; the descriptor
//! device's engine completes on its own thread, so burst 1 measures the
//! round-trip latency and larger bursts the pipelined throughput). The
//! descriptor figures need a free core for the engine: on a loaded machine
//! they measure the scheduler more than the device.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use secgw::crypto::descriptor::{DescriptorConfig, DescriptorDevice};
use secgw::crypto::soft::SoftDevice;
use secgw::crypto::{AeadAlgorithm, CipherDirection, CryptoDevice, CryptoOp, OpStatus, Provider, ProviderChoice, QpConf, QueuePair, Session, SymXform};
use std::sync::Arc;
use std::time::Duration;

mod common;

const SIZES: [usize; 2] = [64, 1420];
const BURSTS: [usize; 4] = [1, 8, 32, 64];
const DEPTH: usize = 64;

fn xform() -> SymXform {
    SymXform { algorithm: AeadAlgorithm::Aes128Gcm, direction: CipherDirection::Encrypt, key: vec![7; 16], salt: [1, 2, 3, 4], icv_len: 16, auth_key: Vec::new() }
}

fn ops(s: &Arc<Session>, size: usize, burst: usize) -> Vec<CryptoOp<Vec<u8>>> {
    (0..burst)
        .map(|i| {
            let mut op = CryptoOp::new(s.clone(), vec![i as u8; size + 16]);
            op.data_len = size as u32;
            op.icv_offset = size as u32;
            op.aad_len = 8;
            op.iv[..8].copy_from_slice(&(i as u64).to_be_bytes());
            op
        })
        .collect()
}

/// One burst through `qp`: enqueue all, poll until all are back, and leave
/// them in `ops` for the next iteration (no allocation in the loop).
fn burst_round<Q: QueuePair<Vec<u8>>>(qp: &mut Q, ops: &mut Vec<CryptoOp<Vec<u8>>>, done: &mut Vec<CryptoOp<Vec<u8>>>) {
    let n = ops.len();
    while !ops.is_empty() {
        qp.enqueue_burst(ops);
    }
    let mut polls = 0u32;
    while done.len() < n {
        if qp.dequeue_burst(done, n) == 0 {
            // Spin briefly, then give the core away: on a machine with fewer
            // free cores than threads the engine may be waiting for this one.
            polls += 1;
            if polls < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
    std::mem::swap(ops, done);
}

fn bench(c: &mut Criterion) {
    let soft = SoftDevice::new(1);
    let soft_s = soft.session_create(&xform()).unwrap();
    let mut soft_qp = soft.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: DEPTH }).unwrap();
    assert_eq!(soft_s.provider(), Provider::Ring);
    let rc = SoftDevice::with_provider(1, ProviderChoice::Only(Provider::RustCrypto));
    let rc_s = rc.session_create(&xform()).unwrap();
    let mut rc_qp = rc.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: DEPTH }).unwrap();
    let mut ratios = common::Ratios::new("soft device AES-128-GCM seal: ring (auto) vs RustCrypto, ops (same run)");

    let desc = DescriptorDevice::new(DescriptorConfig { nb_queue_pairs: 1, ring_depth: DEPTH, max_sessions_per_qp: 1, nb_engines: 1 }).unwrap();
    let desc_s = desc.session_create(&xform()).unwrap();
    desc.queue_pair_attach_session(0, &desc_s).unwrap();
    let mut desc_qp = desc.queue_pair_setup::<Vec<u8>>(0, QpConf { nb_descriptors: DEPTH }).unwrap();

    let mut g = c.benchmark_group("crypto_seal_aes128gcm_ops");
    for size in SIZES {
        for burst in BURSTS {
            g.throughput(Throughput::Elements(burst as u64));
            let param = format!("{size}B/burst{burst}");
            let (mut o, mut d) = (ops(&soft_s, size, burst), Vec::with_capacity(burst));
            g.bench_with_input(BenchmarkId::new("soft", &param), &burst, |b, _| b.iter(|| burst_round(&mut soft_qp, &mut o, &mut d)));
            assert!(o.iter().all(|op| matches!(op.status, OpStatus::Success | OpStatus::NotProcessed)), "filtered out or sealed");
            let (mut o, mut d) = (ops(&rc_s, size, burst), Vec::with_capacity(burst));
            g.bench_with_input(BenchmarkId::new("soft_rustcrypto", &param), &burst, |b, _| b.iter(|| burst_round(&mut rc_qp, &mut o, &mut d)));
            let line = |f: &str| common::Line::new("crypto_seal_aes128gcm_ops", f, &param);
            ratios.row(param.clone(), line("soft"), line("soft_rustcrypto"), burst as f64, "ops");
            let (mut o, mut d) = (ops(&desc_s, size, burst), Vec::with_capacity(burst));
            g.bench_with_input(BenchmarkId::new("descriptor", &param), &burst, |b, _| b.iter(|| burst_round(&mut desc_qp, &mut o, &mut d)));
            assert!(o.iter().all(|op| matches!(op.status, OpStatus::Success | OpStatus::NotProcessed)), "filtered out or sealed");
        }
    }
    g.finish();
    ratios.print();
    let st = desc.qp_stats(0).unwrap();
    println!("descriptor qp 0: {} ops completed, {} not attached, {} refused (ring full)", st.completed, st.not_attached, st.rejected_full);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(20);
    targets = bench
}
criterion_main!(benches);
