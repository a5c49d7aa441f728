//! Route lookup (issue 6): longest-prefix match in `policy::route::Routes`
//! (a scan up to `route::LINEAR_MAX` routes per family, a prefix-trie above)
//! with 10, 100, 10,000 and 100,000 random routes, IPv4 and IPv6, ns per
//! lookup of random addresses (three in four inside some route); beside it,
//! for comparison, a plain longest-match scan of all routes (what the
//! tables did before) up to 10,000 routes.
//!
//! `cargo bench --bench tables`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use secgw::policy::route::{Route, Routes};
use secgw::policy::spd::Prefix;
use std::net::IpAddr;

use secgw::testkit::Rng;

fn routes(n: usize, v6: bool, rng: &mut Rng) -> Vec<Route> {
    (0..n)
        .map(|i| {
            let (addr, len) = if v6 {
                (IpAddr::V6(((0x2001_0db8u128 << 96) | (rng.next_u64() as u128) << 32).into()), 32 + (rng.next_u64() % 33) as u8)
            } else {
                (IpAddr::V4((rng.next_u64() as u32).into()), 8 + (rng.next_u64() % 25) as u8)
            };
            Route { prefix: Prefix::new(addr, len), port: i % 4, via: None }
        })
        .collect()
}

/// Destinations: three in four inside a random route, one random.
fn addrs(table: &[Route], v6: bool, rng: &mut Rng) -> Vec<IpAddr> {
    (0..1024)
        .map(|i| {
            let base = table[(rng.next_u64() as usize) % table.len()].prefix.addr();
            match (base, i % 4 == 3) {
                (IpAddr::V4(_), true) => IpAddr::V4((rng.next_u64() as u32).into()),
                (IpAddr::V6(_), true) => IpAddr::V6(((0x2001_0db8u128 << 96) | rng.next_u64() as u128).into()),
                (IpAddr::V4(a), false) => IpAddr::V4((u32::from(a) | (rng.next_u64() as u32 & 0xff)).into()),
                (IpAddr::V6(a), false) => IpAddr::V6((u128::from(a) | (rng.next_u64() as u128 & 0xffff)).into()),
            }
        })
        .chain(std::iter::once(if v6 { "2001:db8::1".parse().unwrap() } else { "10.0.0.1".parse().unwrap() }))
        .collect()
}

fn linear(table: &[Route], dst: IpAddr) -> Option<usize> {
    let mut best: Option<&Route> = None;
    for r in table {
        if r.prefix.contains(dst) && best.is_none_or(|b| r.prefix.len > b.prefix.len) {
            best = Some(r);
        }
    }
    best.map(|r| r.port)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("route_lookup");
    println!("route_lookup: ns per lookup: routes_* (Routes::lookup) vs linear_scan_* (every route scanned)");
    for v6 in [false, true] {
        let fam = if v6 { "v6" } else { "v4" };
        for n in [10usize, 100, 10_000, 100_000] {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n as u64);
            let table = routes(n, v6, &mut rng);
            let r = Routes::new(table.clone());
            let dsts = addrs(&table, v6, &mut rng);
            let mut i = 0;
            g.bench_function(BenchmarkId::new(format!("routes_{fam}"), n), |b| {
                b.iter(|| {
                    i = (i + 1) % dsts.len();
                    black_box(r.lookup(black_box(dsts[i])))
                })
            });
            if n <= 10_000 {
                let mut i = 0;
                g.bench_function(BenchmarkId::new(format!("linear_scan_{fam}"), n), |b| {
                    b.iter(|| {
                        i = (i + 1) % dsts.len();
                        black_box(linear(&table, black_box(dsts[i])))
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
