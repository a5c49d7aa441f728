//! Static IPv4 and IPv6 routes with longest-prefix match, one table per
//! family: up to [`LINEAR_MAX`] routes a scan of the routes sorted longest
//! prefix first, above that a tree-bitmap trie ([`prefix_trie::PrefixMap`]),
//! whose lookup walks one node per few bits of the address. Neither
//! allocates. (`cargo bench --bench tables`: the trie takes ≈ 60 ns (IPv4)
//! / 150 ns (IPv6) at 10 routes where the scan takes 17 / 26 ns, and 90 /
//! 180 ns at 100,000 routes where the scan would take ≈ 1 µs per 1,000.)
//!
//! Rules (tested below): the longest matching prefix wins; `/0` is the
//! default route of its family; IPv4 and IPv6 never mix (an IPv4 address
//! never matches an IPv6 route, an IPv4-mapped IPv6 address `::ffff:a.b.c.d`
//! is an IPv6 address and never matches an IPv4 route); of two routes with
//! the same prefix the first (config order) is used — config validation
//! refuses such duplicates, so this only concerns tables built in code.

use super::spd::{addr_bits, Prefix};
use prefix_trie::PrefixMap;
use std::net::IpAddr;

/// One route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix.
    pub prefix: Prefix,
    /// Egress port id.
    pub port: usize,
    /// Next hop, of the prefix's family; `None` = on link (the destination
    /// itself).
    pub via: Option<IpAddr>,
}

/// A family with at most this many routes is scanned (longest prefix
/// first) rather than looked up in a trie: below it the scan is faster.
pub const LINEAR_MAX: usize = 32;

/// The route tables: the routes of each family in the order given, and per
/// family either those routes longest prefix first (small tables) or a
/// longest-prefix-match trie from prefix (network bits, length) to the
/// route's index.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    v4: Vec<Route>,
    v6: Vec<Route>,
    scan4: Vec<Route>,
    scan6: Vec<Route>,
    lpm4: Option<PrefixMap<(u32, u8), u32>>,
    lpm6: Option<PrefixMap<(u128, u8), u32>>,
}

/// `routes` longest prefix first, config order among equal lengths (so the
/// first of two equal prefixes is found first).
fn by_length(routes: &[Route]) -> Vec<Route> {
    let mut v = routes.to_vec();
    v.sort_by_key(|r| std::cmp::Reverse(r.prefix.len));
    v
}

impl Routes {
    /// Builds the tables from routes of both families in config order; of
    /// two routes with the same prefix the first is kept for lookups (both
    /// stay listed by [`Routes::routes`]).
    pub fn new(routes: Vec<Route>) -> Routes {
        Routes::build(routes, LINEAR_MAX)
    }

    /// [`Routes::new`] with a family of more than `linear_max` routes in a
    /// trie (tests force either structure).
    fn build(routes: Vec<Route>, linear_max: usize) -> Routes {
        let (v6, v4): (Vec<Route>, Vec<Route>) = routes.into_iter().partition(|r| r.prefix.is_ipv6());
        let (mut scan4, mut scan6, mut lpm4, mut lpm6) = (Vec::new(), Vec::new(), None, None);
        if v4.len() <= linear_max {
            scan4 = by_length(&v4);
        } else {
            let mut t = PrefixMap::new();
            for (i, r) in v4.iter().enumerate() {
                let key = (addr_bits(r.prefix.addr()).1 as u32, r.prefix.len);
                if t.get(&key).is_none() {
                    t.insert(key, i as u32);
                }
            }
            lpm4 = Some(t);
        }
        if v6.len() <= linear_max {
            scan6 = by_length(&v6);
        } else {
            let mut t = PrefixMap::new();
            for (i, r) in v6.iter().enumerate() {
                let key = (addr_bits(r.prefix.addr()).1, r.prefix.len);
                if t.get(&key).is_none() {
                    t.insert(key, i as u32);
                }
            }
            lpm6 = Some(t);
        }
        Routes { v4, v6, scan4, scan6, lpm4, lpm6 }
    }

    /// The longest matching route of `dst`'s family: (egress port, next-hop
    /// address — the route's `via`, else `dst` itself). `None` when no
    /// route of that family covers `dst`. Does not allocate.
    #[inline]
    pub fn lookup(&self, dst: IpAddr) -> Option<(usize, IpAddr)> {
        let r = match dst {
            IpAddr::V4(a) => match &self.lpm4 {
                Some(t) => t.get_lpm(&(u32::from(a), 32)).and_then(|(_, &i)| self.v4.get(i as usize)),
                None => self.scan4.iter().find(|r| r.prefix.contains_bits(u32::from(a) as u128)),
            },
            IpAddr::V6(a) => match &self.lpm6 {
                Some(t) => t.get_lpm(&(u128::from(a), 128)).and_then(|(_, &i)| self.v6.get(i as usize)),
                None => self.scan6.iter().find(|r| r.prefix.contains_bits(u128::from(a))),
            },
        };
        r.map(|r| (r.port, r.via.unwrap_or(dst)))
    }

    /// The routes of one family (`ipv6`) in the order they were given
    /// (config order), duplicates included.
    pub fn routes(&self, ipv6: bool) -> &[Route] {
        if ipv6 {
            &self.v6
        } else {
            &self.v4
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The same routes scanned and in a trie: every lookup asks both and
    /// checks they agree.
    struct Both([Routes; 2]);

    impl Both {
        fn lookup(&self, dst: IpAddr) -> Option<(usize, IpAddr)> {
            let (scan, trie) = (self.0[0].lookup(dst), self.0[1].lookup(dst));
            assert_eq!(scan, trie, "scan and trie disagree on {dst}");
            scan
        }
        fn routes(&self, v6: bool) -> &[Route] {
            self.0[1].routes(v6)
        }
    }

    fn tables(routes: Vec<Route>) -> Both {
        let both = Both([Routes::build(routes.clone(), usize::MAX), Routes::build(routes, 0)]);
        assert!(both.0[0].lpm4.is_none() && both.0[0].lpm6.is_none() && both.0[1].scan4.is_empty() && both.0[1].scan6.is_empty());
        both
    }

    fn route(prefix: &str, port: usize) -> Route {
        let (a, l) = prefix.split_once('/').unwrap();
        Route { prefix: Prefix::new(ip(a), l.parse().unwrap()), port, via: None }
    }

    fn port(r: &Both, dst: &str) -> Option<usize> {
        r.lookup(ip(dst)).map(|x| x.0)
    }

    #[test]
    fn small_tables_are_scanned_larger_ones_go_in_a_trie() {
        let n = |k: usize, v6: bool| -> Vec<Route> {
            (0..k).map(|i| route(&if v6 { format!("2001:db8:{i:x}::/48") } else { format!("10.{i}.0.0/16") }, i)).collect()
        };
        let r = Routes::new([n(LINEAR_MAX, false), n(LINEAR_MAX + 1, true)].concat());
        assert!(r.lpm4.is_none() && r.scan4.len() == LINEAR_MAX);
        assert!(r.lpm6.is_some() && r.scan6.is_empty());
        assert_eq!(r.lookup(ip("10.5.1.1")).map(|x| x.0), Some(5));
        assert_eq!(r.lookup(ip("2001:db8:20::1")).map(|x| x.0), Some(32));
    }

    #[test]
    fn longest_prefix_wins() {
        let r = tables(vec![
            Route { prefix: Prefix::new(ip("0.0.0.0"), 0), port: 0, via: Some(ip("10.0.0.1")) },
            Route { prefix: Prefix::new(ip("198.51.100.0"), 24), port: 1, via: None },
            Route { prefix: Prefix::new(ip("198.51.100.128"), 25), port: 2, via: None },
        ]);
        assert_eq!(r.lookup(ip("198.51.100.1")), Some((1, ip("198.51.100.1"))));
        assert_eq!(r.lookup(ip("198.51.100.200")).map(|x| x.0), Some(2));
        assert_eq!(r.lookup(ip("8.8.8.8")), Some((0, ip("10.0.0.1"))));
        assert_eq!(tables(vec![]).lookup(ip("1.1.1.1")), None);
        assert_eq!(r.lookup(ip("2001:db8::1")), None, "the IPv4 default route is not an IPv6 route");
    }

    #[test]
    fn ipv6_longest_prefix_wins_and_families_stay_apart() {
        let r = tables(vec![
            Route { prefix: Prefix::new(ip("::"), 0), port: 0, via: Some(ip("2001:db8:ff::2")) },
            Route { prefix: Prefix::new(ip("2001:db8:b::"), 48), port: 1, via: None },
            Route { prefix: Prefix::new(ip("2001:db8:b:1::"), 64), port: 2, via: Some(ip("fe80::1")) },
            Route { prefix: Prefix::new(ip("0.0.0.0"), 0), port: 3, via: None },
        ]);
        assert_eq!(r.lookup(ip("2001:db8:b::10")), Some((1, ip("2001:db8:b::10"))));
        assert_eq!(r.lookup(ip("2001:db8:b:1::10")), Some((2, ip("fe80::1"))));
        assert_eq!(r.lookup(ip("2001:db9::1")), Some((0, ip("2001:db8:ff::2"))));
        assert_eq!(r.lookup(ip("192.0.2.1")), Some((3, ip("192.0.2.1"))));
        assert_eq!(r.routes(true).len(), 3);
    }

    #[test]
    fn default_routes_match_everything_of_their_family_only() {
        let r = tables(vec![route("0.0.0.0/0", 4)]);
        for a in ["0.0.0.0", "255.255.255.255", "10.1.2.3", "224.0.0.1"] {
            assert_eq!(port(&r, a), Some(4), "{a}");
        }
        assert_eq!(port(&r, "::"), None);
        let r = tables(vec![route("::/0", 6)]);
        for a in ["::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::1"] {
            assert_eq!(port(&r, a), Some(6), "{a}");
        }
        assert_eq!(port(&r, "10.1.2.3"), None);
    }

    #[test]
    fn host_routes_match_their_address_alone() {
        let r = tables(vec![route("10.0.0.0/8", 1), route("10.9.9.9/32", 2), route("2001:db8::/32", 3), route("2001:db8::9/128", 4)]);
        assert_eq!(port(&r, "10.9.9.9"), Some(2));
        assert_eq!(port(&r, "10.9.9.8"), Some(1));
        assert_eq!(port(&r, "10.9.9.10"), Some(1));
        assert_eq!(port(&r, "2001:db8::9"), Some(4));
        assert_eq!(port(&r, "2001:db8::8"), Some(3));
        assert_eq!(port(&r, "2001:db8::a"), Some(3));
        // A host route alone: its neighbours have no route.
        let r = tables(vec![route("255.255.255.255/32", 1), route("::/128", 2)]);
        assert_eq!(port(&r, "255.255.255.255"), Some(1));
        assert_eq!(port(&r, "255.255.255.254"), None);
        assert_eq!(port(&r, "::"), Some(2));
        assert_eq!(port(&r, "::1"), None);
    }

    #[test]
    fn nested_prefixes_pick_the_longest_at_every_level() {
        // 10/8 ⊃ 10.1/16 ⊃ 10.1.2/24 ⊃ 10.1.2.128/25 ⊃ 10.1.2.129/32.
        let nested = ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.128/25", "10.1.2.129/32"];
        let cases = [("10.200.0.1", 0), ("10.1.200.1", 1), ("10.1.2.1", 2), ("10.1.2.130", 3), ("10.1.2.129", 4), ("11.0.0.0", usize::MAX)];
        // The order routes are given in does not matter: more specific
        // first, less specific first, and shuffled.
        let orders: [[usize; 5]; 3] = [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 4, 0, 3, 1]];
        for order in orders {
            let r = tables(order.iter().map(|&i| route(nested[i], i)).collect());
            for (dst, want) in cases {
                assert_eq!(port(&r, dst), (want != usize::MAX).then_some(want), "{dst} with order {order:?}");
            }
        }
    }

    #[test]
    fn adjacent_prefixes_split_at_their_boundary() {
        let r = tables(vec![route("192.0.2.0/25", 1), route("192.0.2.128/25", 2), route("2001:db8::/64", 3), route("2001:db8:0:1::/64", 4)]);
        assert_eq!(port(&r, "192.0.2.127"), Some(1));
        assert_eq!(port(&r, "192.0.2.128"), Some(2));
        assert_eq!(port(&r, "192.0.2.255"), Some(2));
        assert_eq!(port(&r, "192.0.3.0"), None);
        assert_eq!(port(&r, "192.0.1.255"), None);
        assert_eq!(port(&r, "2001:db8::ffff:ffff:ffff:ffff"), Some(3));
        assert_eq!(port(&r, "2001:db8:0:1::"), Some(4));
        assert_eq!(port(&r, "2001:db8:0:2::"), None);
    }

    #[test]
    fn the_same_prefix_twice_uses_the_first() {
        let r = tables(vec![route("198.51.100.0/24", 1), route("198.51.100.0/24", 2), route("2001:db8::/48", 3), route("2001:db8::/48", 4)]);
        assert_eq!(port(&r, "198.51.100.7"), Some(1));
        assert_eq!(port(&r, "2001:db8::7"), Some(3));
        assert_eq!(r.routes(false).len(), 2, "both stay listed");
    }

    #[test]
    fn ipv4_mapped_ipv6_addresses_do_not_match_ipv4_routes() {
        let r = tables(vec![route("0.0.0.0/0", 1), route("192.0.2.0/24", 2)]);
        assert_eq!(port(&r, "::ffff:192.0.2.1"), None);
        assert_eq!(port(&r, "::192.0.2.1"), None, "IPv4-compatible either");
        // An IPv6 route covering the mapped range matches it, and never
        // the IPv4 address itself.
        let r = tables(vec![route("::ffff:0:0/96", 3)]);
        assert_eq!(port(&r, "::ffff:192.0.2.1"), Some(3));
        assert_eq!(port(&r, "192.0.2.1"), None);
        // An IPv4 prefix with the same bits as an IPv6 one stays apart:
        // 192.0.2.0/24 (v4) and ::c000:200/120 (v6) share the low bits.
        let r = tables(vec![route("192.0.2.0/24", 4), route("::c000:200/120", 5)]);
        assert_eq!(port(&r, "192.0.2.9"), Some(4));
        assert_eq!(port(&r, "::c000:209"), Some(5));
    }

    /// The trie agrees with a linear longest-match scan over random tables
    /// and addresses (both families), an oracle written independently of it.
    #[test]
    fn agrees_with_a_linear_scan() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20 {
            let v6 = round % 2 == 1;
            let mut routes = Vec::new();
            for i in 0..200 {
                // Prefixes under a few /8 (or /16) roots so they overlap.
                let len = (rnd() % if v6 { 129 } else { 33 }) as u8;
                let addr = if v6 {
                    IpAddr::V6((((0x2001_0db8u128 + (rnd() % 3) as u128) << 96) | (rnd() as u128) << 32 | rnd() as u128 & 0xffff_ffff).into())
                } else {
                    IpAddr::V4((((10 + rnd() % 3) as u32) << 24 | (rnd() as u32 & 0x00ff_ffff)).into())
                };
                routes.push(Route { prefix: Prefix::new(addr, len), port: i, via: None });
            }
            let r = tables(routes.clone());
            for _ in 0..2000 {
                let dst = match routes[(rnd() % 200) as usize].prefix.addr() {
                    IpAddr::V4(a) => IpAddr::V4((u32::from(a) ^ (rnd() as u32 & ((1 << (rnd() % 33)) as u64 - 1) as u32)).into()),
                    IpAddr::V6(a) => IpAddr::V6((u128::from(a) ^ (rnd() as u128 >> (rnd() % 64))).into()),
                };
                // Longest prefix, first in list order among equal prefixes.
                let mut best: Option<&Route> = None;
                for rt in &routes {
                    if rt.prefix.contains(dst) && best.is_none_or(|b| rt.prefix.len > b.prefix.len) {
                        best = Some(rt);
                    }
                }
                assert_eq!(r.lookup(dst).map(|x| x.0), best.map(|b| b.port), "{dst}");
            }
        }
    }
}
