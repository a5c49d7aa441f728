//! The neighbour table: IPv4 → MAC, static entries from config.

use std::collections::HashMap;
use std::net::Ipv4Addr;

/// Static neighbours.
#[derive(Debug, Clone, Default)]
pub struct Neighbours {
    map: HashMap<Ipv4Addr, [u8; 6]>,
}

impl Neighbours {
    /// Builds the table.
    pub fn new(entries: impl IntoIterator<Item = (Ipv4Addr, [u8; 6])>) -> Neighbours {
        Neighbours { map: entries.into_iter().collect() }
    }

    /// MAC of `ip`, if known.
    #[inline]
    pub fn lookup(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
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
