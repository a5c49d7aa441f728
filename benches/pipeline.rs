//! A burst of 32 packets through a whole gateway over in-memory ports
//! (configs/ep0-2w.toml, two workers polled in turn on one core): once
//! received by the worker that owns the SA, once by the other worker, which
//! hands every packet to the owner. The difference per packet is the cost of
//! a handoff. And 32 ESP datagrams into gw1 (configs/ep1.toml, replay
//! window off so the same ESP can be sent again), whole or as the outer
//! fragments gw0 makes at a wan MTU of 576: the difference is the cost of
//! reassembly. `cargo bench --bench pipeline`.
//!
//! The group `pipeline_worker_aes128gcm` times one worker alone, over
//! [`ReplayPort`]s that neither allocate nor lock (the cost measured is the
//! gateway's, plus the one frame copy into the worker's buffer that AF_XDP
//! rx makes too): one `poll_once` = an rx burst of 32 frames → parse,
//! classify, SPD, ESP prepare → queue pair → finish → route, neighbour →
//! tx burst. Outbound: 32 plaintext UDP packets of 64, 512 and 1420 bytes
//! (the inner IP packet) through gw0 (configs/ep0.toml, AES-128-GCM
//! tunnel); inbound: the ESP gw0 made of them through gw1 (configs/
//! ep1.toml with the replay window off, so the same ESP can be sent
//! again). Next to them, 32 raw AES-128-GCM seals of the same size (8
//! bytes AAD) with RustCrypto's `aes-gcm` and with `ring`, the worker once per
//! provider of the software device (`SoftDevice::with_provider`), and once
//! more on ring with the SA's `pad_align = 16` (`outbound_ring_pad16`); the ratio table
//! (throughput of inner bytes, ours / raw) is printed at the end, with a
//! bound per size: ring's raw seal of the bytes ESP encrypts (the packet
//! padded, plus Pad Length and Next Header) plus the `bypass` line, the
//! cost of an ESP pipeline whose own work cost nothing. After
//! each line the worker's counters must show every packet sent and no
//! drop, so a line cannot measure a path that drops.
//!
//! Last, `workers_1_vs_2` (a plain timed loop, printed as a table): gw0
//! with two workers (configs/ep0-2w.toml), each on its own pinned thread
//! with its own ports, queue pair and SA (worker 0 sends flows of SA 2001,
//! worker 1 of SA 2002; no handoff), for the same wall time alone and
//! together; aggregate packets per second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use secgw::crypto::soft::SoftDevice;
use secgw::crypto::{Provider, ProviderChoice};
use secgw::crypto::soft::SoftQueuePair;
use secgw::dataplane::{Worker, WorkerCounters};
use secgw::io::PktBuf;
use secgw::io::mem::ReplayPort;
use secgw::testkit::{load_config, MemGateway, Workers};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

fn frame(dport: u16, size: usize) -> Vec<u8> {
    let total = 28 + size;
    let mut f = vec![0u8; 14 + total];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0x0a, 1]);
    f[12] = 8;
    let ip = &mut f[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[192, 0, 2, 10]);
    ip[16..20].copy_from_slice(&[198, 51, 100, 10]);
    let mut s: u32 = 0;
    for c in ip[..20].chunks(2) {
        s += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    ip[10..12].copy_from_slice(&(!(s as u16)).to_be_bytes());
    ip[20..22].copy_from_slice(&40000u16.to_be_bytes());
    ip[22..24].copy_from_slice(&dport.to_be_bytes());
    ip[24..26].copy_from_slice(&((8 + size) as u16).to_be_bytes());
    f
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline_burst32_aes128gcm");
    for size in [64usize, 1400] {
        g.throughput(Throughput::Elements(32));
        // dport 6001 → SA 2001, owned by worker 0.
        let f = frame(6001, size);
        for (name, rx_worker) in [("owner_receives", 0usize), ("handoff_to_owner", 1)] {
            let mut gw = MemGateway::from_config("configs/ep0-2w.toml");
            g.bench_with_input(BenchmarkId::new(name, size), &size, |b, _| {
                b.iter(|| {
                    for _ in 0..32 {
                        gw.inject(rx_worker, "inside", &f);
                    }
                    let out = gw.run();
                    assert_eq!(out.len(), 32);
                })
            });
        }
    }
    g.finish();
}

/// `configs/<base>` edited, written to a temp file.
fn derived(base: &str, tag: &str, edit: impl FnOnce(String) -> String) -> String {
    let text = std::fs::read_to_string(format!("{}/configs/{base}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let p = std::env::temp_dir().join(format!("secgw-bench-{}-{tag}-{base}", std::process::id()));
    std::fs::write(&p, edit(text)).unwrap();
    p.to_string_lossy().into_owned()
}

fn bench_reassembly(c: &mut Criterion) {
    let mut g = c.benchmark_group("reassembly_burst32_aes128gcm_1400");
    g.throughput(Throughput::Elements(32));
    let gw1_cfg = derived("ep1.toml", "noreplay", |t| t.replacen("replay_window = 64", "replay_window = 0", 1));
    let mut f = frame(5001, 1400 - 28);
    f[14 + 6] = 0; // DF clear: gw0 may fragment
    f[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let mut s: u32 = f[14..34].chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    f[14 + 10..14 + 12].copy_from_slice(&(!(s as u16)).to_be_bytes());
    for (name, mtu) in [("whole", 1500usize), ("fragments_of_576", 576)] {
        let gw0_cfg = derived("ep0.toml", name, |t| t.replacen("interface = \"gw0-out\"", &format!("interface = \"gw0-out\"\nmtu = {mtu}"), 1));
        let mut gw0 = MemGateway::from_config(&gw0_cfg);
        for _ in 0..32 {
            gw0.inject(0, "inside", &f);
        }
        let esp: Vec<Vec<u8>> = gw0.run().into_iter().map(|x| x.2).collect();
        let mut gw1 = MemGateway::from_config(&gw1_cfg);
        g.bench_function(BenchmarkId::new(name, esp.len()), |b| {
            b.iter(|| {
                for e in &esp {
                    gw1.inject(0, "outside", e);
                }
                let out = gw1.run();
                assert_eq!(out.len(), 32);
            })
        });
    }
    g.finish();
}

/// Inner packet sizes (IP header to end of payload) of the worker lines.
const SIZES: [usize; 3] = [64, 512, 1420];
/// The software device's AES-GCM providers, each measured against its own raw seal.
const PROVIDERS: [(&str, ProviderChoice); 2] = [("rustcrypto", ProviderChoice::Only(Provider::RustCrypto)), ("ring", ProviderChoice::Only(Provider::Ring))];
const BURST: usize = 32;

/// Distinct frames each replay port cycles through.
const FRAMES: usize = 64;

/// `FRAMES` UDP frames of `size` bytes of IP packet to `dport`, source
/// ports varying (one SA: the SPD sends dports 6000-6999 to SA 2001).
fn inner_frames(dport: u16, size: usize) -> Vec<Vec<u8>> {
    (0..FRAMES)
        .map(|k| {
            let mut f = frame(dport, size - 28);
            f[14 + 20..14 + 22].copy_from_slice(&(40000 + k as u16).to_be_bytes());
            f
        })
        .collect()
}

/// The port index of config port `name`.
fn port_index(w: &Workers<ReplayPort>, name: &str) -> usize {
    w.cfg.ports.iter().position(|p| p.name == name).expect("port name")
}

/// Workers of `cfg` (software device, crypto from `provider`) whose port `rx_port` of worker `k` replays `frames(k)`
/// (the other ports receive nothing).
fn replay_workers(cfg: &str, provider: ProviderChoice, rx_port: &str, frames: impl Fn(usize) -> Vec<Vec<u8>>) -> Workers<ReplayPort> {
    let c = load_config(cfg);
    let rx = c.ports.iter().position(|p| p.name == rx_port).expect("port name");
    Workers::build(c, SoftDevice::with_provider(2, provider), |w, i| ReplayPort::new(i as u16, if i == rx { frames(w) } else { Vec::new() })).expect("workers build")
}

/// Panics unless every packet worker `c` received went out on `tx_port`
/// and none was dropped (a bench line must not time a dropping path). A
/// worker that received nothing passes only if `may_idle` (its line was
/// filtered out).
fn assert_clean(c: &WorkerCounters, rx_port: usize, tx_port: usize, what: &str, may_idle: bool) {
    let dropped: u64 = c.drops.iter().map(|d| d.get()).sum();
    let (rx, tx) = (c.ports[rx_port].rx_packets.get(), c.ports[tx_port].tx_packets.get());
    assert!((rx > 0 || may_idle) && dropped == 0 && tx == rx, "{what}: rx {rx}, tx {tx}, dropped {dropped}");
}

/// The ESP frames gw0 (configs/ep0.toml) makes of `inner_frames(5001, size)`.
fn esp_frames(size: usize) -> Vec<Vec<u8>> {
    let mut gw0 = MemGateway::from_config("configs/ep0.toml");
    for f in inner_frames(5001, size) {
        gw0.inject(0, "inside", &f);
    }
    let out: Vec<Vec<u8>> = gw0.run().into_iter().map(|x| x.2).collect();
    assert_eq!(out.len(), FRAMES);
    out
}

fn bench_worker(c: &mut Criterion) {
    const G: &str = "pipeline_worker_aes128gcm";
    let mut g = c.benchmark_group(G);
    g.measurement_time(Duration::from_secs(4));
    let key = [7u8; 16];
    let rustcrypto = {
        use aes_gcm::KeyInit;
        aes_gcm::Aes128Gcm::new_from_slice(&key).expect("key")
    };
    let ring_key = ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(&ring::aead::AES_128_GCM, &key).expect("key"));
    let gw1_cfg = derived("ep1.toml", "noreplay", |t| t.replace("replay_window = 64", "replay_window = 0"));
    let gw0_pad16 = derived("ep0.toml", "pad16", |t| t.replacen("spi = 1001\n", "spi = 1001\npad_align = 16\n", 1));
    let mut ratios = common::Ratios::new("One worker, burst 32, AES-128-GCM tunnel (software device) vs 32 raw seals of the same size (same run)");
    for size in SIZES {
        g.throughput(Throughput::Elements(BURST as u64));
        let line = |f: &str| common::Line::new(G, f, size);
        let bytes = (BURST * size) as f64;
        let esp = esp_frames(size);
        for (name, provider) in PROVIDERS {
            let (out, inb, raw) = (format!("outbound_{name}"), format!("inbound_{name}"), format!("raw_seal_{name}"));
            ratios.row(format!("outbound {size} B, {name}"), line(&out), line(&raw), bytes, "B");
            ratios.row(format!("inbound {size} B, {name}"), line(&inb), line(&raw), bytes, "B");

            let mut gw0 = replay_workers("configs/ep0.toml", provider, "inside", |_| inner_frames(5001, size));
            let (i, o) = (port_index(&gw0, "inside"), port_index(&gw0, "outside"));
            g.bench_function(BenchmarkId::new(&out, size), |b| b.iter(|| gw0.workers[0].poll_once()));
            assert_clean(&gw0.counters[0], i, o, &out, true);

            let mut gw1 = replay_workers(&gw1_cfg, provider, "outside", |_| esp.clone());
            let (i, o) = (port_index(&gw1, "outside"), port_index(&gw1, "inside"));
            g.bench_function(BenchmarkId::new(&inb, size), |b| b.iter(|| gw1.workers[0].poll_once()));
            assert_clean(&gw1.counters[0], i, o, &inb, true);
        }
        // ep0.toml with `pad_align = 16` on SA 1001 (the SA of these
        // flows): the ESP payload in whole AES blocks (README, ESP padding
        // alignment), ring only (its partial-block path is the one avoided).
        let out16 = "outbound_ring_pad16";
        ratios.row(format!("outbound {size} B, ring, pad_align 16"), line(out16), line("raw_seal_ring"), bytes, "B");
        let mut gw0 = replay_workers(&gw0_pad16, ProviderChoice::Only(Provider::Ring), "inside", |_| inner_frames(5001, size));
        let (i, o) = (port_index(&gw0, "inside"), port_index(&gw0, "outside"));
        g.bench_function(BenchmarkId::new(out16, size), |b| b.iter(|| gw0.workers[0].poll_once()));
        assert_clean(&gw0.counters[0], i, o, out16, true);
        // The same frames through configs/bench/bypass.toml (a bypass
        // policy, no SA): the gateway's forwarding alone (rx copy, parse,
        // SPD, route, Ethernet header, tx), what ESP adds to.
        ratios.row(format!("outbound {size} B, ring, vs bypass (no ESP)"), line("outbound_ring"), line("bypass"), bytes, "B");
        let mut gw = replay_workers("configs/bench/bypass.toml", ProviderChoice::Auto, "inside", |_| inner_frames(5001, size));
        let (i, o) = (port_index(&gw, "inside"), port_index(&gw, "outside"));
        g.bench_function(BenchmarkId::new("bypass", size), |b| b.iter(|| gw.workers[0].poll_once()));
        assert_clean(&gw.counters[0], i, o, "bypass", true);
        // The bound: 32 raw seals of the bytes ESP encrypts for this inner
        // size (the packet, padding to 4 (the default) or 16 bytes, Pad
        // Length, Next Header; RFC 4303 §2.4) plus the bypass line (the
        // forwarding around ESP) is what the pipeline would cost if ESP
        // itself (prepare, queue pair, finish) cost nothing. The ratio of
        // that to the raw seal of `size` bytes is the highest an ESP
        // pipeline built on this forwarding path could read.
        for (name, align) in [("raw_seal_ring_esp", 4usize), ("raw_seal_ring_esp16", 16)] {
            let esp_len = (size + 2).div_ceil(align) * align;
            let label = if align == 4 { "default padding" } else { "pad_align 16" };
            ratios.row_sum(
                format!("bound {size} B, ring, {label}: raw seal of {esp_len} B + bypass"),
                vec![line(name), line("bypass")],
                line("raw_seal_ring"),
                bytes,
                "B",
            );
            let mut esp_data = vec![0u8; esp_len];
            g.bench_function(BenchmarkId::new(name, size), |b| {
                use ring::aead::{Aad, Nonce};
                b.iter(|| {
                    for _ in 0..BURST {
                        let tag = ring_key.seal_in_place_separate_tag(Nonce::assume_unique_for_key([0; 12]), Aad::from([0u8; 8]), &mut esp_data).expect("seal");
                        let _ = std::hint::black_box(tag);
                    }
                })
            });
        }
        let mut data = vec![0u8; size];
        g.bench_function(BenchmarkId::new("raw_seal_rustcrypto", size), |b| {
            use aes_gcm::aead::AeadInPlace;
            b.iter(|| {
                for _ in 0..BURST {
                    let tag = rustcrypto.encrypt_in_place_detached((&[0u8; 12]).into(), &[0u8; 8], &mut data).expect("seal");
                    let _ = std::hint::black_box(tag);
                }
            })
        });
        g.bench_function(BenchmarkId::new("raw_seal_ring", size), |b| {
            use ring::aead::{Aad, Nonce};
            b.iter(|| {
                for _ in 0..BURST {
                    let tag = ring_key.seal_in_place_separate_tag(Nonce::assume_unique_for_key([0; 12]), Aad::from([0u8; 8]), &mut data).expect("seal");
                    let _ = std::hint::black_box(tag);
                }
            })
        });
    }
    g.finish();
    ratios.print();
}

type BenchWorker = Worker<ReplayPort, SoftQueuePair<PktBuf>>;

/// Polls `workers[k]` for each `k` in `which`, each moved onto its own
/// thread pinned to `core(k)`, for `secs` seconds of wall time; puts them
/// back and returns the wall time from start to the last thread's end.
fn run_for(workers: &mut [Option<BenchWorker>], which: &[usize], core: impl Fn(usize) -> usize, secs: f64) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let handles: Vec<_> = which
        .iter()
        .map(|&k| {
            let mut w = workers[k].take().expect("worker");
            let (stop, id) = (stop.clone(), core(k));
            let h = std::thread::spawn(move || {
                core_affinity::set_for_current(core_affinity::CoreId { id });
                while !stop.load(Ordering::Relaxed) {
                    w.poll_once();
                }
                w
            });
            (k, h)
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for (k, h) in handles {
        workers[k] = Some(h.join().expect("worker thread"));
    }
    start.elapsed()
}

/// 1 → 2 workers: packets per second of worker 0 alone, then of workers
/// 0 and 1 together, each on its own pinned thread, for the same wall time
/// (`SECGW_SCALING_SECS`, default 3; 0 skips it, e.g. to profile one
/// criterion line alone). Printed, never asserted on (timing); the counters
/// must show no drop and no handoff.
fn workers_1_vs_2(_c: &mut Criterion) {
    let secs: f64 = std::env::var("SECGW_SCALING_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    if secs <= 0.0 {
        println!("\nworkers_1_vs_2: skipped (SECGW_SCALING_SECS={secs})");
        return;
    }
    let cores: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().iter().map(|c| c.id).collect();
    let core = |k: usize| cores.get(k % cores.len().max(1)).copied().unwrap_or(0);
    println!("\nworkers_1_vs_2: gw0 (configs/ep0-2w.toml), AES-128-GCM tunnel (software device, provider auto = ring), burst 32, {secs} s per run, {} cores online", cores.len());
    println!("| inner size | 1 worker Mpps | 2 workers Mpps | 2 workers / 1 worker |");
    println!("|---:|---:|---:|---:|");
    for size in SIZES {
        // dport 6001 → SA 2001 (worker 0), dport 5001 → SA 2002 (worker 1).
        let gw = replay_workers("configs/ep0-2w.toml", ProviderChoice::Auto, "inside", |w| inner_frames(if w == 0 { 6001 } else { 5001 }, size));
        let (i, o) = (port_index(&gw, "inside"), port_index(&gw, "outside"));
        let Workers { workers, counters, .. } = gw;
        let mut workers: Vec<Option<BenchWorker>> = workers.into_iter().map(Some).collect();
        let sent = || counters.iter().map(|c| c.ports[o].tx_packets.get()).sum::<u64>();
        // Warm-up (page faults, caches) of both.
        run_for(&mut workers, &[0, 1], core, 0.2);
        let mut mpps = |which: &[usize]| {
            let before = sent();
            let t = run_for(&mut workers, which, core, secs);
            (sent() - before) as f64 / t.as_secs_f64() / 1e6
        };
        let one = mpps(&[0]);
        let two = mpps(&[0, 1]);
        for c in &counters {
            assert_clean(c, i, o, "workers_1_vs_2", false);
            assert_eq!(c.handoff_out.get(), 0, "workers_1_vs_2: a packet was handed over");
        }
        println!("| {size} B | {one:.3} | {two:.3} | {:.2} |", two / one);
    }
}

criterion_group!(benches, bench, bench_reassembly, bench_worker, workers_1_vs_2);
criterion_main!(benches);
