//! The neighbour table: IPv4 or IPv6 address → MAC, static entries from
//! config (ARP / Neighbor Discovery resolution of next hops is a later
//! issue).

use std::collections::HashMap;
use std::net::IpAddr;

/// Static neighbours of both families.
#[derive(Debug, Clone, Default)]
pub struct Neighbours {
    map: HashMap<IpAddr, [u8; 6]>,
}

impl Neighbours {
    /// Builds the table.
    pub fn new(entries: impl IntoIterator<Item = (IpAddr, [u8; 6])>) -> Neighbours {
        Neighbours { map: entries.into_iter().collect() }
    }

    /// MAC of `ip`, if known.
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Option<[u8; 6]> {
        self.map.get(&ip).copied()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
