//! `Spd::lookup` and `Spd::lookup_burst` never allocate (the per-packet
//! rule): a counting global allocator counts this thread's allocations
//! while 10,000-rule IPv4 and IPv6 SPDs classify keys that match, miss and
//! carry no ports. The same counter must see the allocations of building
//! the SPD, or it would not prove anything.

use secgw::policy::spd::{FlowKey, Prefix, Selector, Spd, SpdAction, SpdEntry};
use std::net::IpAddr;

#[path = "common/alloc.rs"]
mod alloc;
use alloc::allocations;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

fn ip(v6: bool, bits: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(bits.into())
    } else {
        IpAddr::V4((bits as u32).into())
    }
}

fn entries(v6: bool) -> Vec<SpdEntry> {
    let mut x: u128 = 0x0123_4567_89ab_cdef_0f1e_2d3c_4b5a_6978;
    let w = if v6 { 128 } else { 32 };
    (0..10_000u32)
        .map(|i| {
            x = x.wrapping_mul(0x2545_f491_4f6c_dd1d_9e37_79b9_7f4a_7c15).wrapping_add(1442695040888963407);
            let (sl, dl) = ((x >> 7) as u8 % (w + 1), (x >> 17) as u8 % (w + 1));
            let dp = (x >> 40) as u16;
            SpdEntry {
                selector: Selector {
                    src: Prefix::new(ip(v6, x >> 3), sl),
                    dst: Prefix::new(ip(v6, x.rotate_left(64)), dl),
                    protocol: [None, Some(6), Some(17)][i as usize % 3],
                    src_ports: (0, u16::MAX),
                    dst_ports: if i % 2 == 0 { (0, u16::MAX) } else { (dp, dp.saturating_add(100)) },
                },
                priority: i % 97,
                action: SpdAction::Protect(i as usize),
            }
        })
        .collect()
}

#[test]
fn lookup_does_not_allocate() {
    for v6 in [false, true] {
        let mut spd = None;
        let built = allocations(|| spd = Some(Spd::new(entries(v6))));
        assert!(built > 0, "the counter saw no allocation while building the SPD");
        let spd = spd.unwrap();
        let keys: Vec<FlowKey> = spd
            .entries(v6)
            .iter()
            .step_by(37)
            .flat_map(|e| {
                let s = e.selector;
                [
                    FlowKey { src: s.src.addr(), dst: s.dst.addr(), protocol: 17, ports: Some((1, s.dst_ports.0)) },
                    FlowKey { src: s.src.addr(), dst: s.dst.addr(), protocol: 6, ports: None },
                    FlowKey { src: ip(v6, u128::MAX), dst: ip(v6, 0), protocol: 50, ports: None },
                ]
            })
            .collect();
        let mut out = vec![None; 32];
        let mut matched = 0;
        let n = allocations(|| {
            for k in &keys {
                matched += spd.lookup(k).is_some() as usize;
            }
            for chunk in keys.chunks(32) {
                spd.lookup_burst(chunk, &mut out);
            }
        });
        assert_eq!(n, 0, "lookups allocated {n} times (v6 = {v6})");
        assert!(matched > keys.len() / 3, "only {matched} of {} keys matched: the test would not walk the tries", keys.len());
    }
}
