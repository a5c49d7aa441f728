//! Static IPv4 routes with longest-prefix match.

use super::spd::Prefix;
use std::net::Ipv4Addr;

/// One route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix.
    pub prefix: Prefix,
    /// Egress port id.
    pub port: usize,
    /// Next hop; `None` = on link (the destination itself).
    pub via: Option<Ipv4Addr>,
}

/// The route table, longest prefix first.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    routes: Vec<Route>,
}

impl Routes {
    /// Builds the table.
    pub fn new(mut routes: Vec<Route>) -> Routes {
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len));
        Routes { routes }
    }

    /// The longest matching route: (egress port, next-hop address).
    #[inline]
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<(usize, Ipv4Addr)> {
        self.routes.iter().find(|r| r.prefix.contains(dst)).map(|r| (r.port, r.via.unwrap_or(dst)))
    }

    /// The routes in lookup order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let r = Routes::new(vec![
            Route { prefix: Prefix::new(Ipv4Addr::UNSPECIFIED, 0), port: 0, via: Some("10.0.0.1".parse().unwrap()) },
            Route { prefix: Prefix::new("198.51.100.0".parse().unwrap(), 24), port: 1, via: None },
            Route { prefix: Prefix::new("198.51.100.128".parse().unwrap(), 25), port: 2, via: None },
        ]);
        assert_eq!(r.lookup("198.51.100.1".parse().unwrap()), Some((1, "198.51.100.1".parse().unwrap())));
        assert_eq!(r.lookup("198.51.100.200".parse().unwrap()).map(|x| x.0), Some(2));
        assert_eq!(r.lookup("8.8.8.8".parse().unwrap()), Some((0, "10.0.0.1".parse().unwrap())));
        assert_eq!(Routes::new(vec![]).lookup("1.1.1.1".parse().unwrap()), None);
    }
}
