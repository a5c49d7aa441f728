//! A burst of 32 packets through a whole gateway over in-memory ports
//! (configs/ep0-2w.toml, two workers polled in turn on one core): once
//! received by the worker that owns the SA, once by the other worker, which
//! hands every packet to the owner. The difference per packet is the cost of
//! a handoff. And 32 ESP datagrams into gw1 (configs/ep1.toml, replay
//! window off so the same ESP can be sent again), whole or as the outer
//! fragments gw0 makes at a wan MTU of 576: the difference is the cost of
//! reassembly. `cargo bench --bench pipeline`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use secgw::testkit::MemGateway;

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

criterion_group!(benches, bench, bench_reassembly);
criterion_main!(benches);
