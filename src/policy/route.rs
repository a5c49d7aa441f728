//! Static IPv4 and IPv6 routes with longest-prefix match, one table per
//! family (a linear scan each; issue 6 makes policy lookups fast).

use super::spd::{addr_bits, Prefix};
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

/// The route tables, longest prefix first in each family.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    v4: Vec<Route>,
    v6: Vec<Route>,
}

impl Routes {
    /// Builds the tables.
    pub fn new(routes: Vec<Route>) -> Routes {
        let (mut v6, mut v4): (Vec<Route>, Vec<Route>) = routes.into_iter().partition(|r| r.prefix.is_ipv6());
        v4.sort_by_key(|r| std::cmp::Reverse(r.prefix.len));
        v6.sort_by_key(|r| std::cmp::Reverse(r.prefix.len));
        Routes { v4, v6 }
    }

    /// The longest matching route of `dst`'s family: (egress port, next-hop
    /// address).
    #[inline]
    pub fn lookup(&self, dst: IpAddr) -> Option<(usize, IpAddr)> {
        let (v6, bits) = addr_bits(dst);
        let table = if v6 { &self.v6 } else { &self.v4 };
        table.iter().find(|r| r.prefix.contains_bits(bits)).map(|r| (r.port, r.via.unwrap_or(dst)))
    }

    /// The routes of one family (`ipv6`) in lookup order.
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

    #[test]
    fn longest_prefix_wins() {
        let r = Routes::new(vec![
            Route { prefix: Prefix::new(ip("0.0.0.0"), 0), port: 0, via: Some(ip("10.0.0.1")) },
            Route { prefix: Prefix::new(ip("198.51.100.0"), 24), port: 1, via: None },
            Route { prefix: Prefix::new(ip("198.51.100.128"), 25), port: 2, via: None },
        ]);
        assert_eq!(r.lookup(ip("198.51.100.1")), Some((1, ip("198.51.100.1"))));
        assert_eq!(r.lookup(ip("198.51.100.200")).map(|x| x.0), Some(2));
        assert_eq!(r.lookup(ip("8.8.8.8")), Some((0, ip("10.0.0.1"))));
        assert_eq!(Routes::new(vec![]).lookup(ip("1.1.1.1")), None);
        assert_eq!(r.lookup(ip("2001:db8::1")), None, "the IPv4 default route is not an IPv6 route");
    }

    #[test]
    fn ipv6_longest_prefix_wins_and_families_stay_apart() {
        let r = Routes::new(vec![
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
}
