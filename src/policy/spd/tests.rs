//! The SPD classifier against hand-made cases and, by proptest, against
//! the linear reference scan.

use super::*;

fn sel(src: &str, dst: &str, proto: Option<u8>, dp: (u16, u16)) -> Selector {
    let p = |s: &str| {
        let (a, l) = s.split_once('/').unwrap();
        Prefix::new(a.parse().unwrap(), l.parse().unwrap())
    };
    Selector { src: p(src), dst: p(dst), protocol: proto, src_ports: (0, 65535), dst_ports: dp }
}

fn key(dst: &str, proto: u8, dport: Option<u16>) -> FlowKey {
    FlowKey { src: "192.0.2.10".parse().unwrap(), dst: dst.parse().unwrap(), protocol: proto, ports: dport.map(|d| (1000, d)) }
}

#[test]
fn priority_then_order() {
    let spd = Spd::new(vec![
        SpdEntry { selector: sel("0.0.0.0/0", "198.51.100.0/24", None, (0, 65535)), priority: 50, action: SpdAction::Protect(0) },
        SpdEntry { selector: sel("0.0.0.0/0", "198.51.100.0/24", Some(17), (53, 53)), priority: 10, action: SpdAction::Bypass },
        SpdEntry { selector: sel("0.0.0.0/0", "198.51.100.0/24", Some(17), (53, 53)), priority: 10, action: SpdAction::Discard },
    ]);
    assert_eq!(both(&spd, &key("198.51.100.10", 17, Some(53))), Some(SpdAction::Bypass));
    assert_eq!(both(&spd, &key("198.51.100.10", 17, Some(54))), Some(SpdAction::Protect(0)));
    assert_eq!(both(&spd, &key("198.51.101.10", 17, Some(53))), None);
}

#[test]
fn opaque_ports_match_only_wildcards() {
    let spd = Spd::new(vec![SpdEntry { selector: sel("0.0.0.0/0", "0.0.0.0/0", Some(17), (0, 100)), priority: 1, action: SpdAction::Bypass }]);
    assert_eq!(both(&spd, &key("1.2.3.4", 17, None)), None);
    assert_eq!(both(&spd, &key("1.2.3.4", 17, Some(0))), Some(SpdAction::Bypass));
    assert_eq!(both(&spd, &key("1.2.3.4", 17, Some(100))), Some(SpdAction::Bypass));
    assert_eq!(both(&spd, &key("1.2.3.4", 17, Some(101))), None);
}

#[test]
fn families_never_mix() {
    let v6 = sel("2001:db8:a::/48", "::/0", None, (0, 65535));
    let v4 = sel("0.0.0.0/0", "0.0.0.0/0", None, (0, 65535));
    let spd = Spd::new(vec![
        SpdEntry { selector: v4, priority: 1, action: SpdAction::Discard },
        SpdEntry { selector: v6, priority: 2, action: SpdAction::Bypass },
    ]);
    let k6 = FlowKey { src: "2001:db8:a::10".parse().unwrap(), dst: "2001:db8:b::10".parse().unwrap(), protocol: 17, ports: Some((1, 2)) };
    assert_eq!(both(&spd, &k6), Some(SpdAction::Bypass), "the v4 catch-all does not match IPv6");
    assert_eq!(both(&spd, &key("198.51.100.10", 17, None)), Some(SpdAction::Discard));
    let other = FlowKey { src: "2001:db9::1".parse().unwrap(), ..k6 };
    assert_eq!(both(&spd, &other), None);
    // An IPv4-mapped IPv6 address is IPv6, not the IPv4 address.
    let mapped = FlowKey { src: "::ffff:192.0.2.10".parse().unwrap(), dst: "::ffff:198.51.100.10".parse().unwrap(), ..k6 };
    assert_eq!(both(&spd, &mapped), None);
    let mixed = FlowKey { src: "192.0.2.10".parse().unwrap(), ..k6 };
    assert_eq!(both(&spd, &mixed), None);
    assert!(!Prefix::new("::".parse().unwrap(), 0).contains("1.2.3.4".parse().unwrap()));
    assert!(Prefix::new("2001:db8::".parse().unwrap(), 127).contains("2001:db8::1".parse().unwrap()));
    assert!(!Prefix::new("2001:db8::".parse().unwrap(), 128).contains("2001:db8::1".parse().unwrap()));
    assert_eq!(Prefix::new("2001:db8::ff".parse().unwrap(), 120).to_string(), "2001:db8::/120");
    assert_eq!(Prefix::new("10.1.2.3".parse().unwrap(), 8).to_string(), "10.0.0.0/8");
}

fn p(s: &str) -> Prefix {
    let (a, l) = s.split_once('/').unwrap();
    Prefix::new(a.parse().unwrap(), l.parse().unwrap())
}

fn entry(src: &str, dst: &str, protocol: Option<u8>, sp: (u16, u16), dp: (u16, u16), priority: u32, action: SpdAction) -> SpdEntry {
    SpdEntry { selector: Selector { src: p(src), dst: p(dst), protocol, src_ports: sp, dst_ports: dp }, priority, action }
}

fn flow(src: &str, dst: &str, protocol: u8, ports: Option<(u16, u16)>) -> FlowKey {
    FlowKey { src: src.parse().unwrap(), dst: dst.parse().unwrap(), protocol, ports }
}

const ANY: (u16, u16) = (0, 65535);

/// `lookup`'s answer, asserted to be the classifier's too.
fn both(spd: &Spd, k: &FlowKey) -> Option<SpdAction> {
    let a = spd.lookup(k);
    assert_eq!(classified(spd, k), a, "classifier {k:?}");
    a
}

/// The classifier's answer even where `lookup` would scan (small SPDs).
fn classified(spd: &Spd, k: &FlowKey) -> Option<SpdAction> {
    k.bits().and_then(|(v6, s, d)| spd.classify(v6, s, d, k))
}

/// Checks each (key, expected) against lookup, the burst lookup and the
/// linear reference.
fn expect(spd: &Spd, cases: &[(FlowKey, Option<SpdAction>)]) {
    let keys: Vec<FlowKey> = cases.iter().map(|c| c.0).collect();
    let mut out = vec![Some(SpdAction::Bypass); keys.len()];
    assert_eq!(spd.lookup_burst(&keys, &mut out), keys.len());
    for (i, (k, want)) in cases.iter().enumerate() {
        assert_eq!(spd.lookup(k), *want, "lookup {k:?}");
        assert_eq!(out[i], *want, "lookup_burst {k:?}");
        assert_eq!(spd.lookup_linear(k), *want, "lookup_linear {k:?}");
        assert_eq!(classified(spd, k), *want, "classifier {k:?}");
    }
}

#[test]
fn more_specific_with_worse_priority_loses() {
    let spd = Spd::new(vec![
        entry("10.0.0.0/8", "0.0.0.0/0", None, ANY, ANY, 5, SpdAction::Protect(1)),
        entry("10.1.2.3/32", "198.51.100.7/32", Some(6), ANY, (443, 443), 6, SpdAction::Bypass),
        entry("10.1.0.0/16", "198.51.100.0/24", None, ANY, ANY, 4, SpdAction::Discard),
    ]);
    expect(
        &spd,
        &[
            // /16 → /24 with priority 4 beats /8 → /0 with 5 beats the /32s with 6.
            (flow("10.1.2.3", "198.51.100.7", 6, Some((1, 443))), Some(SpdAction::Discard)),
            (flow("10.2.2.3", "198.51.100.7", 6, Some((1, 443))), Some(SpdAction::Protect(1))),
            (flow("11.1.2.3", "198.51.100.7", 6, Some((1, 443))), None),
        ],
    );
}

#[test]
fn equal_priority_goes_by_insertion_order() {
    let spd = Spd::new(vec![
        entry("0.0.0.0/0", "0.0.0.0/0", None, ANY, ANY, 7, SpdAction::Protect(3)),
        entry("192.0.2.0/24", "198.51.100.0/24", Some(17), ANY, (53, 53), 7, SpdAction::Bypass),
        entry("192.0.2.10/32", "198.51.100.10/32", Some(17), (1000, 1000), (53, 53), 7, SpdAction::Discard),
    ]);
    expect(&spd, &[(flow("192.0.2.10", "198.51.100.10", 17, Some((1000, 53))), Some(SpdAction::Protect(3)))]);
    // The same rules in the other order: now the /32 comes first.
    let mut e = spd.entries(false).to_vec();
    e.reverse();
    let spd = Spd::new(e);
    expect(
        &spd,
        &[
            (flow("192.0.2.10", "198.51.100.10", 17, Some((1000, 53))), Some(SpdAction::Discard)),
            (flow("192.0.2.10", "198.51.100.10", 17, Some((1001, 53))), Some(SpdAction::Bypass)),
            (flow("192.0.2.11", "198.51.100.10", 6, Some((1000, 53))), Some(SpdAction::Protect(3))),
        ],
    );
}

#[test]
fn port_range_edges() {
    let spd = Spd::new(vec![
        entry("0.0.0.0/0", "0.0.0.0/0", Some(17), ANY, (0, 0), 1, SpdAction::Protect(0)),
        entry("0.0.0.0/0", "0.0.0.0/0", Some(17), ANY, (65535, 65535), 1, SpdAction::Protect(65535)),
        entry("0.0.0.0/0", "0.0.0.0/0", Some(17), ANY, (1, 65534), 2, SpdAction::Bypass),
        entry("0.0.0.0/0", "0.0.0.0/0", Some(6), (0, 0), (80, 80), 1, SpdAction::Discard),
        entry("0.0.0.0/0", "0.0.0.0/0", Some(6), (65535, 65535), ANY, 1, SpdAction::Protect(7)),
        entry("0.0.0.0/0", "0.0.0.0/0", Some(6), (10, 20), (30, 40), 1, SpdAction::Protect(8)),
    ]);
    let k = |proto, sp, dp| flow("192.0.2.1", "198.51.100.1", proto, Some((sp, dp)));
    expect(
        &spd,
        &[
            (k(17, 5, 0), Some(SpdAction::Protect(0))),
            (k(17, 5, 65535), Some(SpdAction::Protect(65535))),
            (k(17, 5, 1), Some(SpdAction::Bypass)),
            (k(17, 5, 65534), Some(SpdAction::Bypass)),
            (k(6, 0, 80), Some(SpdAction::Discard)),
            (k(6, 1, 80), None),
            (k(6, 0, 81), None),
            (k(6, 65535, 0), Some(SpdAction::Protect(7))),
            (k(6, 65534, 0), None),
            (k(6, 10, 30), Some(SpdAction::Protect(8))),
            (k(6, 20, 40), Some(SpdAction::Protect(8))),
            (k(6, 9, 30), None),
            (k(6, 21, 30), None),
            (k(6, 10, 29), None),
            (k(6, 10, 41), None),
            (flow("192.0.2.1", "198.51.100.1", 17, None), None),
        ],
    );
}

#[test]
fn ipv6_and_ipv4_prefix_lengths() {
    let spd = Spd::new(vec![
        entry("2001:db8:1::1/128", "2001:db8:2::2/128", None, ANY, ANY, 1, SpdAction::Protect(128)),
        entry("2001:db8:1::/64", "2001:db8:2::/64", None, ANY, ANY, 2, SpdAction::Protect(64)),
        entry("::/0", "::/0", None, ANY, ANY, 3, SpdAction::Discard),
        entry("192.0.2.1/32", "198.51.100.1/32", None, ANY, ANY, 1, SpdAction::Protect(32)),
        entry("0.0.0.0/0", "0.0.0.0/0", None, ANY, ANY, 3, SpdAction::Bypass),
    ]);
    expect(
        &spd,
        &[
            (flow("2001:db8:1::1", "2001:db8:2::2", 6, Some((1, 2))), Some(SpdAction::Protect(128))),
            (flow("2001:db8:1::2", "2001:db8:2::2", 6, Some((1, 2))), Some(SpdAction::Protect(64))),
            (flow("2001:db8:1::1", "2001:db8:2::3", 6, None), Some(SpdAction::Protect(64))),
            (flow("2001:db8:1:0:ffff:ffff:ffff:ffff", "2001:db8:2::", 6, None), Some(SpdAction::Protect(64))),
            (flow("2001:db8:1:1::1", "2001:db8:2::2", 6, None), Some(SpdAction::Discard)),
            (flow("ffff::1", "::", 58, None), Some(SpdAction::Discard)),
            (flow("192.0.2.1", "198.51.100.1", 1, None), Some(SpdAction::Protect(32))),
            (flow("192.0.2.1", "198.51.100.2", 1, None), Some(SpdAction::Bypass)),
            (flow("255.255.255.255", "0.0.0.0", 1, None), Some(SpdAction::Bypass)),
        ],
    );
}

#[test]
fn unmatched_and_empty() {
    let empty = Spd::new(vec![]);
    expect(&empty, &[(flow("192.0.2.1", "198.51.100.1", 6, Some((1, 2))), None), (flow("2001:db8::1", "2001:db8::2", 6, None), None)]);
    let spd = Spd::new(vec![entry("192.0.2.0/24", "198.51.100.0/24", Some(6), ANY, (22, 22), 1, SpdAction::Bypass)]);
    expect(
        &spd,
        &[
            (flow("192.0.2.1", "198.51.100.1", 6, Some((1, 22))), Some(SpdAction::Bypass)),
            (flow("192.0.3.1", "198.51.100.1", 6, Some((1, 22))), None),
            (flow("192.0.2.1", "198.51.101.1", 6, Some((1, 22))), None),
            (flow("192.0.2.1", "198.51.100.1", 17, Some((1, 22))), None),
            (flow("192.0.2.1", "198.51.100.1", 6, Some((1, 23))), None),
            (flow("192.0.2.1", "198.51.100.1", 6, None), None),
        ],
    );
}

#[test]
fn many_port_rules_under_one_pair() {
    // 10,000 single-port rules under 0/0 → 0/0 and a catch-all after them.
    let mut e: Vec<SpdEntry> = (0..10_000u16).map(|i| entry("0.0.0.0/0", "0.0.0.0/0", Some(17), ANY, (i * 6, i * 6), 10, SpdAction::Protect(i as usize))).collect();
    e.push(entry("0.0.0.0/0", "0.0.0.0/0", None, ANY, ANY, 10, SpdAction::Bypass));
    e.push(entry("0.0.0.0/0", "0.0.0.0/0", Some(17), ANY, (600, 60000), 9, SpdAction::Discard));
    let spd = Spd::new(e);
    let k = |dp| flow("192.0.2.1", "198.51.100.1", 17, Some((5, dp)));
    expect(
        &spd,
        &[
            (k(0), Some(SpdAction::Protect(0))),
            (k(6), Some(SpdAction::Protect(1))),
            (k(7), Some(SpdAction::Bypass)),
            (k(600), Some(SpdAction::Discard)),
            (k(59994), Some(SpdAction::Discard)),
            (k(60006), Some(SpdAction::Bypass)),
            (k(59988), Some(SpdAction::Discard)),
            (k(65535), Some(SpdAction::Bypass)),
            (flow("192.0.2.1", "198.51.100.1", 17, None), Some(SpdAction::Bypass)),
        ],
    );
}

#[test]
fn empty_port_range_matches_nothing() {
    let spd = Spd::new(vec![entry("0.0.0.0/0", "0.0.0.0/0", None, ANY, (10, 9), 1, SpdAction::Discard)]);
    expect(&spd, &[(flow("192.0.2.1", "198.51.100.1", 6, Some((1, 9))), None), (flow("192.0.2.1", "198.51.100.1", 6, Some((1, 10))), None)]);
}

mod against_linear {
    use super::*;
    use proptest::prelude::*;

    /// A few bases so that random prefixes overlap and nest.
    const BASES: [u128; 3] = [0x2001_0db8_0000_0000_0000_0000_0000_0000, 0xc000_0200_0000_0000_0000_0000_0000_0000, 0];

    fn address(v6: bool) -> impl Strategy<Value = u128> {
        (0..BASES.len(), any::<u128>(), 0u32..=128).prop_map(move |(b, noise, shift)| {
            let bits = BASES[b] ^ noise.checked_shr(shift).unwrap_or(0);
            if v6 {
                bits
            } else {
                bits >> 96
            }
        })
    }

    fn ip(v6: bool, bits: u128) -> IpAddr {
        if v6 {
            IpAddr::V6(bits.into())
        } else {
            IpAddr::V4((bits as u32).into())
        }
    }

    fn prefix(v6: bool) -> impl Strategy<Value = Prefix> {
        let w: u8 = if v6 { 128 } else { 32 };
        (address(v6), prop_oneof![Just(0u8), Just(w), 0..=w]).prop_map(move |(a, l)| Prefix::new(ip(v6, a), l))
    }

    fn port_range() -> impl Strategy<Value = (u16, u16)> {
        prop_oneof![
            3 => Just((0u16, u16::MAX)),
            1 => prop_oneof![Just(0u16), Just(u16::MAX), 0u16..20].prop_map(|p| (p, p)),
            2 => (0u16..40, 0u16..40).prop_map(|(a, b)| (a.min(b), a.max(b))),
            1 => (any::<u16>(), any::<u16>()).prop_map(|(a, b)| (a.min(b), a.max(b))),
            1 => (0u16..40, 0u16..40).prop_map(|(a, b)| (a.max(b), a.min(b))),
        ]
    }

    fn rule() -> impl Strategy<Value = SpdEntry> {
        any::<bool>().prop_flat_map(|v6| {
            (prefix(v6), prefix(v6), prop::option::of(prop_oneof![Just(6u8), Just(17), Just(50)]), port_range(), port_range(), 0u32..4, 0usize..3).prop_map(
                |(src, dst, protocol, src_ports, dst_ports, priority, a)| SpdEntry {
                    selector: Selector { src, dst, protocol, src_ports, dst_ports },
                    priority,
                    action: [SpdAction::Bypass, SpdAction::Discard, SpdAction::Protect(priority as usize)][a],
                },
            )
        })
    }

    fn port_in(r: (u16, u16), pick: u16) -> u16 {
        match pick % 4 {
            0 => r.0,
            1 => r.1,
            2 => r.0.saturating_sub(1),
            _ => r.0.wrapping_add(pick / 4),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn classifier_equals_linear_scan(
            rules in prop::collection::vec(rule(), 0..48),
            picks in prop::collection::vec((any::<usize>(), any::<u128>(), any::<u128>(), any::<u16>(), any::<u16>(), 0u8..6, any::<bool>()), 1..48),
        ) {
            let spd = Spd::new(rules.clone());
            for (i, noise_s, noise_d, ps, pd, how, v6) in picks {
                // Most keys start inside a rule's prefixes (host bits random,
                // ports at or near the range edges); some are random.
                let k = if !rules.is_empty() && how < 5 {
                    let s = rules[i % rules.len()].selector;
                    let v6 = s.src.is_ipv6();
                    let inside = |p: &Prefix, noise: u128| {
                        let w = if v6 { 128 } else { 32 };
                        let host = if p.len >= w { 0 } else { noise & (u128::MAX >> (128 - (w - p.len) as u32)) };
                        ip(v6, addr_bits(p.addr()).1 | host)
                    };
                    let protocol = s.protocol.unwrap_or(ps as u8 % 3 * 11);
                    let ports = (how < 4).then(|| (port_in(s.src_ports, ps), port_in(s.dst_ports, pd)));
                    FlowKey { src: inside(&s.src, noise_s), dst: inside(&s.dst, noise_d), protocol, ports }
                } else {
                    FlowKey { src: ip(v6, noise_s), dst: ip(v6 ^ (how == 5 && ps % 7 == 0), noise_d), protocol: [6, 17, 50][pd as usize % 3], ports: (ps % 3 != 0).then_some((ps, pd)) }
                };
                let want = spd.lookup_linear(&k);
                prop_assert_eq!(classified(&spd, &k), want, "classifier, key {:?}", k);
                prop_assert_eq!(spd.lookup(&k), want, "key {:?}", k);
            }
        }
    }
}

#[test]
fn flow_keys_of_packets_built_by_etherparse() {
    use etherparse::{IpNumber, Ipv4Header, PacketBuilder};
    let ip = |b: etherparse::PacketBuilderStep<etherparse::UdpHeader>, payload: &[u8]| {
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    };
    let v4 = ip(PacketBuilder::ipv4([192, 0, 2, 10], [198, 51, 100, 10], 64).udp(40001, 5001), &[1, 2, 3]);
    assert_eq!(FlowKey::of_ip(&v4), Ok(flow("192.0.2.10", "198.51.100.10", 17, Some((40001, 5001)))));
    let v6 = ip(PacketBuilder::ipv6([0x20, 1, 0xd, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10], [0x20, 1, 0xd, 0xb8, 0, 0xb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10], 64).udp(7, 9), &[0; 8]);
    assert_eq!(FlowKey::of_ip(&v6), Ok(flow("2001:db8:a::10", "2001:db8:b::10", 17, Some((7, 9)))));
    // A later IPv4 fragment carries no ports: OPAQUE (RFC 4301 §4.4.1.1).
    let mut h = Ipv4Header::new(8, 64, IpNumber::UDP, [192, 0, 2, 10], [198, 51, 100, 10]).unwrap();
    h.fragment_offset = etherparse::IpFragOffset::try_new(100).unwrap();
    h.header_checksum = h.calc_header_checksum();
    let mut frag = h.to_bytes().to_vec();
    frag.extend_from_slice(&[0x9c, 0x41, 0x13, 0x89, 0, 8, 0, 0]);
    assert_eq!(FlowKey::of_ip(&frag), Ok(flow("192.0.2.10", "198.51.100.10", 17, None)));
    // Not a packet: the wire view's error, never a key.
    let mut bad = v4.clone();
    bad[10] ^= 0xff;
    assert!(matches!(FlowKey::of_ip(&bad), Err(WireError::BadField { field: "header checksum", .. })));
    assert!(FlowKey::of_ip(&v6[..30]).is_err() && FlowKey::of_ip(&[]).is_err());
}

/// `protect_shadowed` is set when a BYPASS or DISCARD entry comes before
/// a PROTECT entry of the same family in (priority, insertion) order, and
/// only then; the families are judged apart.
#[test]
fn protect_shadowed_by_rank() {
    let any = |a| entry("0.0.0.0/0", "0.0.0.0/0", None, (0, 65535), (0, 65535), 0, a);
    let at = |a, priority| SpdEntry { priority, ..any(a) };
    let v6 = |a, priority| entry("::/0", "::/0", None, (0, 65535), (0, 65535), priority, a);
    let p = SpdAction::Protect(0);
    assert!(!Spd::new(vec![]).protect_shadowed());
    assert!(!Spd::new(vec![at(p, 1), at(SpdAction::Discard, 2), at(SpdAction::Bypass, 3)]).protect_shadowed(), "catch-alls after");
    assert!(Spd::new(vec![at(p, 2), at(SpdAction::Discard, 1)]).protect_shadowed(), "priority decides, not insertion");
    assert!(Spd::new(vec![at(SpdAction::Bypass, 1), at(p, 1)]).protect_shadowed(), "equal priority: insertion order");
    assert!(!Spd::new(vec![at(p, 1), at(SpdAction::Bypass, 1)]).protect_shadowed());
    assert!(!Spd::new(vec![v6(SpdAction::Discard, 1), at(p, 2)]).protect_shadowed(), "an IPv6 discard shadows no IPv4 protect");
    assert!(Spd::new(vec![at(p, 2), v6(SpdAction::Discard, 1), v6(p, 3)]).protect_shadowed());
}

/// `ports_may_select_v4`: true only for addresses and protocols of an IPv4
/// entry that selects ports (whatever the key's ports), never for IPv6 or
/// an empty SPD; with more than `PORT_PAIRS_MAX` distinct triples, true for
/// every IPv4 key.
#[test]
fn ports_may_select_v4_by_address_pair_and_protocol() {
    assert!(!Spd::default().ports_may_select_v4(&key("198.51.100.10", 17, None)));
    let spd = Spd::new(vec![
        SpdEntry { selector: sel("192.0.2.0/24", "198.51.100.0/25", Some(17), (6000, 6999)), priority: 10, action: SpdAction::Protect(0) },
        SpdEntry { selector: sel("192.0.2.0/24", "198.51.100.0/25", Some(17), (7000, 7999)), priority: 11, action: SpdAction::Protect(1) },
        SpdEntry { selector: sel("0.0.0.0/0", "0.0.0.0/0", None, (0, 65535)), priority: 20, action: SpdAction::Bypass },
        SpdEntry { selector: sel("2001:db8:a::/48", "::/0", Some(6), (22, 22)), priority: 5, action: SpdAction::Discard },
    ]);
    assert_eq!(spd.port_pairs_v4.len(), 1, "the two port entries share one triple");
    assert!(spd.ports_may_select_v4(&key("198.51.100.10", 17, None)));
    assert!(spd.ports_may_select_v4(&key("198.51.100.10", 17, Some(5))), "ports are not read");
    assert!(!spd.ports_may_select_v4(&key("198.51.100.200", 17, None)), "outside the /25");
    assert!(!spd.ports_may_select_v4(&key("198.51.100.10", 6, None)), "TCP: no TCP entry selects ports");
    let k6 = FlowKey { src: "2001:db8:a::10".parse().unwrap(), dst: "2001:db8:b::10".parse().unwrap(), protocol: 6, ports: None };
    assert!(!spd.ports_may_select_v4(&k6), "IPv6 never");
    // Above PORT_PAIRS_MAX distinct triples: every IPv4 key.
    let many: Vec<SpdEntry> = (0..=PORT_PAIRS_MAX)
        .map(|i| SpdEntry { selector: sel(&format!("10.{i}.0.0/16"), "198.51.100.0/24", Some(17), (53, 53)), priority: 1, action: SpdAction::Bypass })
        .collect();
    let spd = Spd::new(many.clone());
    assert!(spd.ports_may_select_v4(&key("203.0.113.9", 6, None)));
    assert!(!spd.ports_may_select_v4(&k6));
    let spd = Spd::new(many[..PORT_PAIRS_MAX].to_vec());
    assert!(!spd.ports_may_select_v4(&key("203.0.113.9", 6, None)), "{PORT_PAIRS_MAX} triples are still scanned");
}
