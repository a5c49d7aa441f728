//! The Security Policy Database (RFC 4301 §4.4.1): ordered selectors with
//! PROTECT / BYPASS / DISCARD actions. Lookup scans entries in priority order
//! (lower number first, ties by insertion order); a faster classifier is
//! future work (issue 6).

use std::net::Ipv4Addr;

/// The fields of a packet a selector looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// IP protocol.
    pub protocol: u8,
    /// (source port, destination port) for TCP/UDP first fragments, else
    /// `None` (OPAQUE: only port-wildcard selectors match).
    pub ports: Option<(u16, u16)>,
}

/// An IPv4 prefix as address and mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Network address (host bits zero).
    pub addr: u32,
    /// Prefix length 0..=32.
    pub len: u8,
}

impl Prefix {
    /// A prefix from an address and length (host bits are cleared).
    pub fn new(addr: Ipv4Addr, len: u8) -> Prefix {
        let len = len.min(32);
        Prefix { addr: u32::from(addr) & Self::mask_of(len), len }
    }
    fn mask_of(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - len as u32)
        }
    }
    /// Network mask.
    pub fn mask(&self) -> u32 {
        Self::mask_of(self.len)
    }
    /// True if `ip` is inside the prefix.
    #[inline]
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == self.addr
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.addr), self.len)
    }
}

/// A selector (RFC 4301 §4.4.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selector {
    /// Source prefix.
    pub src: Prefix,
    /// Destination prefix.
    pub dst: Prefix,
    /// Protocol, `None` = any.
    pub protocol: Option<u8>,
    /// Inclusive source port range.
    pub src_ports: (u16, u16),
    /// Inclusive destination port range.
    pub dst_ports: (u16, u16),
}

impl Selector {
    /// True if `k` matches every field.
    #[inline]
    pub fn matches(&self, k: &FlowKey) -> bool {
        if !self.src.contains(k.src) || !self.dst.contains(k.dst) {
            return false;
        }
        if let Some(p) = self.protocol {
            if p != k.protocol {
                return false;
            }
        }
        let any_ports = self.src_ports == (0, u16::MAX) && self.dst_ports == (0, u16::MAX);
        match k.ports {
            None => any_ports,
            Some((s, d)) => {
                (self.src_ports.0..=self.src_ports.1).contains(&s) && (self.dst_ports.0..=self.dst_ports.1).contains(&d)
            }
        }
    }
}

/// What to do with a matching packet. `Protect` holds an index into the
/// SAD's outbound (outbound SPD) or inbound (inbound SPD) SA list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpdAction {
    /// Apply SA number `n`.
    Protect(usize),
    /// Forward in the clear.
    Bypass,
    /// Drop.
    Discard,
}

/// One SPD entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpdEntry {
    /// Selector.
    pub selector: Selector,
    /// Lower wins.
    pub priority: u32,
    /// Action.
    pub action: SpdAction,
}

/// An SPD: entries kept sorted by (priority, insertion order).
#[derive(Debug, Clone, Default)]
pub struct Spd {
    entries: Vec<SpdEntry>,
}

impl Spd {
    /// Builds an SPD; the sort is stable so ties keep their order.
    pub fn new(mut entries: Vec<SpdEntry>) -> Spd {
        entries.sort_by_key(|e| e.priority);
        Spd { entries }
    }

    /// The entries in lookup order.
    pub fn entries(&self) -> &[SpdEntry] {
        &self.entries
    }

    /// The action of the first matching entry, `None` when nothing matches
    /// (the caller discards and counts it, RFC 4301 §5.1).
    #[inline]
    pub fn lookup(&self, k: &FlowKey) -> Option<SpdAction> {
        self.entries.iter().find(|e| e.selector.matches(k)).map(|e| e.action)
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(spd.lookup(&key("198.51.100.10", 17, Some(53))), Some(SpdAction::Bypass));
        assert_eq!(spd.lookup(&key("198.51.100.10", 17, Some(54))), Some(SpdAction::Protect(0)));
        assert_eq!(spd.lookup(&key("198.51.101.10", 17, Some(53))), None);
    }

    #[test]
    fn opaque_ports_match_only_wildcards() {
        let spd = Spd::new(vec![SpdEntry { selector: sel("0.0.0.0/0", "0.0.0.0/0", Some(17), (0, 100)), priority: 1, action: SpdAction::Bypass }]);
        assert_eq!(spd.lookup(&key("1.2.3.4", 17, None)), None);
        assert_eq!(spd.lookup(&key("1.2.3.4", 17, Some(0))), Some(SpdAction::Bypass));
        assert_eq!(spd.lookup(&key("1.2.3.4", 17, Some(100))), Some(SpdAction::Bypass));
        assert_eq!(spd.lookup(&key("1.2.3.4", 17, Some(101))), None);
    }
}
