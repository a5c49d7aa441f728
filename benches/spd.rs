//! SPD classification (issue 6): ns per lookup and per burst of 32 with 1,
//! 100, 1,000 and 10,000 rules, IPv4 and IPv6, for the classifier
//! ([`Spd::lookup`], [`Spd::lookup_burst`]) and the plain linear scan it
//! replaced ([`Spd::lookup_linear`]). `cargo bench --bench spd`.
//!
//! Rules (seeded RNG, the same every run): source and destination prefixes
//! of random addresses with lengths drawn from a mix like real policy sets
//! (IPv4 /0 /8 /12 /16 /20 /24 /28 /32, IPv6 /0 /16 /32 /48 /56 /64 /96
//! /128, weighted towards /24 /32 and /64 /128; `SPD_BENCH_LENGTHS=uniform`
//! draws every length 0..=32 / 0..=128 equally instead, the hard case for
//! prefix tries); protocol any, TCP or UDP; destination ports any, one port
//! or a random range; source ports mostly any; priorities 0..1000 (ties
//! happen). Keys: 90 % derived from a random rule (addresses inside its
//! prefixes, protocol and ports inside its ranges), so most match
//! something; 5 % OPAQUE (no ports); the rest random. Also "ports10k":
//! 10,000 single-port UDP rules under 0/0 → 0/0.
//!
//! Besides criterion's report, prints a side-by-side table (own timing:
//! the best of 7 passes over 1,024 keys) with the 10,000 : 100 ratio.
//! Every key's classifier answer is checked against the linear scan first;
//! a difference fails the bench.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use secgw::policy::spd::{FlowKey, Prefix, Selector, Spd, SpdAction, SpdEntry};
use std::hint::black_box;
use std::net::IpAddr;
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [1, 100, 1_000, 10_000];
const NKEYS: usize = 1024;

use secgw::testkit::Rng;

fn addr(v6: bool, bits: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(bits.into())
    } else {
        IpAddr::V4((bits as u32).into())
    }
}

fn random_bits(r: &mut Rng, v6: bool) -> u128 {
    if v6 {
        ((r.next_u64() as u128) << 64) | r.next_u64() as u128
    } else {
        r.next_u64() as u32 as u128
    }
}

fn prefix_len(r: &mut Rng, v6: bool, uniform: bool) -> u8 {
    const V4: [u8; 33] = [0, 8, 8, 12, 12, 16, 16, 16, 16, 20, 20, 20, 20, 24, 24, 24, 24, 24, 24, 24, 24, 28, 28, 28, 28, 32, 32, 32, 32, 32, 32, 32, 32];
    const V6: [u8; 33] = [0, 16, 16, 32, 32, 48, 48, 48, 48, 56, 56, 56, 56, 64, 64, 64, 64, 64, 64, 64, 64, 96, 96, 96, 96, 128, 128, 128, 128, 128, 128, 128, 128];
    match (uniform, v6) {
        (true, false) => r.below(33) as u8,
        (true, true) => r.below(129) as u8,
        (false, false) => r.pick(&V4),
        (false, true) => r.pick(&V6),
    }
}

fn port_range(r: &mut Rng, any_percent: u64) -> (u16, u16) {
    let x = r.below(100);
    if x < any_percent {
        (0, u16::MAX)
    } else if x < any_percent + (100 - any_percent) / 2 {
        let p = r.below(65536) as u16;
        (p, p)
    } else {
        let lo = r.below(65536) as u16;
        (lo, lo.saturating_add(r.below(4096) as u16))
    }
}

fn rules(n: usize, v6: bool, uniform: bool, seed: u64) -> Vec<SpdEntry> {
    let mut r = Rng(seed);
    (0..n)
        .map(|i| {
            let src = Prefix::new(addr(v6, random_bits(&mut r, v6)), prefix_len(&mut r, v6, uniform));
            let dst = Prefix::new(addr(v6, random_bits(&mut r, v6)), prefix_len(&mut r, v6, uniform));
            let selector = Selector { src, dst, protocol: r.pick(&[None, Some(6), Some(17)]), src_ports: port_range(&mut r, 90), dst_ports: port_range(&mut r, 40) };
            let action = match r.below(3) {
                0 => SpdAction::Bypass,
                1 => SpdAction::Discard,
                _ => SpdAction::Protect(i),
            };
            SpdEntry { selector, priority: r.below(1000) as u32, action }
        })
        .collect()
}

fn inside(r: &mut Rng, p: &Prefix) -> IpAddr {
    let v6 = p.is_ipv6();
    let width = if v6 { 128 } else { 32 };
    let host = if p.len >= width { 0 } else { random_bits(r, v6) & (u128::MAX >> (128 - (width - p.len) as u32)) };
    let net = match p.addr() {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    };
    addr(v6, net | host)
}

fn in_range(r: &mut Rng, (lo, hi): (u16, u16)) -> u16 {
    if lo > hi {
        return lo;
    }
    lo + r.below(hi as u64 - lo as u64 + 1) as u16
}

fn keys(entries: &[SpdEntry], v6: bool, seed: u64) -> Vec<FlowKey> {
    let mut r = Rng(seed ^ 0x5eed);
    (0..NKEYS)
        .map(|_| {
            let x = r.below(100);
            if x < 90 && !entries.is_empty() {
                let s = entries[r.below(entries.len() as u64) as usize].selector;
                let protocol = s.protocol.unwrap_or_else(|| r.pick(&[6, 17]));
                FlowKey { src: inside(&mut r, &s.src), dst: inside(&mut r, &s.dst), protocol, ports: Some((in_range(&mut r, s.src_ports), in_range(&mut r, s.dst_ports))) }
            } else {
                let ports = (x >= 95).then(|| (r.below(65536) as u16, r.below(65536) as u16));
                FlowKey { src: addr(v6, random_bits(&mut r, v6)), dst: addr(v6, random_bits(&mut r, v6)), protocol: r.pick(&[1, 6, 17, 50]), ports }
            }
        })
        .collect()
}

/// 10,000 UDP rules, one destination port each, under 0/0 → 0/0.
fn port_rules() -> Vec<SpdEntry> {
    let any = Prefix::new("0.0.0.0".parse().unwrap(), 0);
    (0..10_000u16)
        .map(|p| SpdEntry {
            selector: Selector { src: any, dst: any, protocol: Some(17), src_ports: (0, u16::MAX), dst_ports: (1000 + p, 1000 + p) },
            priority: 100,
            action: SpdAction::Protect(p as usize),
        })
        .collect()
}

fn port_keys() -> Vec<FlowKey> {
    let mut r = Rng(7);
    (0..NKEYS)
        .map(|_| FlowKey {
            src: addr(false, random_bits(&mut r, false)),
            dst: addr(false, random_bits(&mut r, false)),
            protocol: 17,
            ports: Some((r.below(65536) as u16, 1000 + r.below(11_000) as u16)),
        })
        .collect()
}

struct Case {
    name: String,
    rules: usize,
    v6: bool,
    spd: Spd,
    keys: Vec<FlowKey>,
}

fn uniform() -> bool {
    std::env::var("SPD_BENCH_LENGTHS").is_ok_and(|v| v == "uniform")
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        for n in SIZES {
            let entries = rules(n, v6, uniform(), 1 + n as u64 + v6 as u64 * 1000);
            let keys = keys(&entries, v6, n as u64);
            out.push(Case { name: format!("{}_{n}", if v6 { "v6" } else { "v4" }), rules: n, v6, spd: Spd::new(entries), keys });
        }
    }
    out.push(Case { name: "ports10k".into(), rules: 10_000, v6: false, spd: Spd::new(port_rules()), keys: port_keys() });
    for c in &out {
        let matched = c.keys.iter().filter(|k| c.spd.lookup(k).is_some()).count();
        for k in &c.keys {
            assert_eq!(c.spd.lookup(k), c.spd.lookup_linear(k), "{}: classifier and linear scan differ for {k:?}", c.name);
        }
        println!("{}: {} rules, {matched} of {} keys match a rule", c.name, c.rules, c.keys.len());
    }
    out
}

fn bench(c: &mut Criterion) {
    let cases = cases();
    let mut g = c.benchmark_group("spd");
    g.sample_size(10).warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_millis(700));
    for case in &cases {
        let mut i = 0;
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("lookup", &case.name), |b| {
            b.iter(|| {
                i = (i + 1) % NKEYS;
                black_box(case.spd.lookup(black_box(&case.keys[i])))
            })
        });
        let mut j = 0;
        let mut out = [None; 32];
        g.throughput(Throughput::Elements(32));
        g.bench_function(BenchmarkId::new("burst32", &case.name), |b| {
            b.iter(|| {
                j = (j + 32) % NKEYS;
                black_box(case.spd.lookup_burst(black_box(&case.keys[j..j + 32]), &mut out));
            })
        });
        let mut l = 0;
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("linear", &case.name), |b| {
            b.iter(|| {
                l = (l + 1) % NKEYS;
                black_box(case.spd.lookup_linear(black_box(&case.keys[l])))
            })
        });
    }
    g.finish();
    table(&cases);
}

/// Best of 7 passes over all keys, in ns per call of `f` on one key / one
/// burst of 32.
fn time_ns(keys: &[FlowKey], per_burst: bool, f: &mut dyn FnMut(&[FlowKey])) -> f64 {
    let step = if per_burst { 32 } else { 1 };
    let mut best = f64::MAX;
    for _ in 0..7 {
        let t = Instant::now();
        for chunk in keys.chunks(step) {
            f(black_box(chunk));
        }
        best = best.min(t.elapsed().as_nanos() as f64 / (keys.len() / step) as f64);
    }
    best
}

fn table(cases: &[Case]) {
    let mut rows: Vec<(String, [f64; 6])> = Vec::new();
    let mut out = [None; 32];
    let measure = |c: &Case, out: &mut [Option<SpdAction>; 32]| {
        let one = time_ns(&c.keys, false, &mut |k| {
            black_box(c.spd.lookup(&k[0]));
        });
        let burst = time_ns(&c.keys, true, &mut |k| {
            black_box(c.spd.lookup_burst(k, out));
        });
        let lin = time_ns(&c.keys, false, &mut |k| {
            black_box(c.spd.lookup_linear(&k[0]));
        });
        [one, burst, lin]
    };
    for n in SIZES {
        let mut cells = [0.0; 6];
        for c in cases.iter().filter(|c| c.rules == n && c.name != "ports10k") {
            let m = measure(c, &mut out);
            let at = if c.v6 { 3 } else { 0 };
            cells[at..at + 3].copy_from_slice(&m);
        }
        rows.push((format!("{n}"), cells));
    }
    let ratio: Vec<f64> = (0..6).map(|i| rows[3].1[i] / rows[1].1[i]).collect();
    println!();
    println!("SPD lookup, ns ({} prefix lengths; best of 7 passes over {NKEYS} keys)", if uniform() { "uniform" } else { "mixed" });
    println!("| rules | v4 lookup | v4 burst32 | v4 linear lookup | v6 lookup | v6 burst32 | v6 linear lookup |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for (name, c) in &rows {
        println!("| {name} | {:.1} | {:.0} | {:.1} | {:.1} | {:.0} | {:.1} |", c[0], c[1], c[2], c[3], c[4], c[5]);
    }
    println!("| 10,000 : 100 | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× |", ratio[0], ratio[1], ratio[2], ratio[3], ratio[4], ratio[5]);
    if let Some(p) = cases.iter().find(|c| c.name == "ports10k") {
        let m = measure(p, &mut out);
        println!("ports10k (10,000 single-port UDP rules under 0/0 → 0/0, v4): lookup {:.1} ns, burst32 {:.0} ns, linear lookup {:.1} ns", m[0], m[1], m[2]);
    }
}

criterion_group! {
    name = benches;
    // No plots and fewer bootstrap resamples: the whole run stays well
    // under 2 minutes on a loaded 2-core machine.
    config = Criterion::default().without_plots().nresamples(10_000);
    targets = bench
}
criterion_main!(benches);
