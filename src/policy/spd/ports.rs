//! The rules of one (source prefix, destination prefix) pair, indexed by
//! protocol and ports so that even thousands of rules under one pair (say
//! one per destination port under 0/0 → 0/0) cost a binary search, not a
//! scan.
//!
//! Per protocol (and one set for "any protocol") the rules are split by
//! which port ranges they restrict:
//! - only the destination port (or neither): elementary intervals of the
//!   destination port space, each holding the best rank covering it
//!   (painted in rank order, so the first paint is the winner);
//! - only the source port: the same over source ports;
//! - both: a short list in rank order, scanned until the first match;
//! - neither: also the best rank an OPAQUE key (no ports) can match.

use super::trie::NONE;
use super::{Selector, ANY_PORTS as ANY};

/// An inclusive port range (first, last).
type Ports = (u16, u16);

/// Elementary intervals of one port dimension: `starts[i]` is the first
/// port of interval `i` (`starts[0] == 0`), `ranks[i]` its best rank.
#[derive(Debug, Clone, Default)]
struct Intervals {
    starts: Vec<u16>,
    ranks: Vec<u32>,
}

impl Intervals {
    /// From (first port, last port, rank) in ascending rank order.
    fn build(rules: &[(u16, u16, u32)]) -> Intervals {
        if rules.is_empty() {
            return Intervals::default();
        }
        let mut pts: Vec<u32> = Vec::with_capacity(2 * rules.len() + 1);
        pts.push(0);
        for &(lo, hi, _) in rules {
            pts.push(lo as u32);
            pts.push(hi as u32 + 1);
        }
        pts.sort_unstable();
        pts.dedup();
        pts.retain(|&p| p <= u16::MAX as u32);
        let m = pts.len();
        let mut best = vec![NONE; m];
        // next[i]: the first unpainted interval at or after i (union-find
        // with path halving), m = none left.
        let mut next: Vec<usize> = (0..=m).collect();
        fn find(next: &mut [usize], mut i: usize) -> usize {
            while next[i] != i {
                next[i] = next[next[i]];
                i = next[i];
            }
            i
        }
        for &(lo, hi, rank) in rules {
            let first = pts.partition_point(|&p| p < lo as u32);
            let last = pts.partition_point(|&p| p <= hi as u32) - 1;
            let mut i = find(&mut next, first);
            while i <= last {
                best[i] = rank;
                next[i] = i + 1;
                i = find(&mut next, i + 1);
            }
        }
        let mut out = Intervals::default();
        for (i, &r) in best.iter().enumerate() {
            if out.ranks.last() != Some(&r) {
                out.starts.push(pts[i] as u16);
                out.ranks.push(r);
            }
        }
        out
    }

    #[inline]
    fn best(&self, port: u16) -> u32 {
        let i = self.starts.partition_point(|&s| s <= port);
        match i.checked_sub(1).and_then(|i| self.ranks.get(i)) {
            Some(&r) => r,
            None => NONE,
        }
    }
}

/// The rules of one protocol (or "any") under one address pair.
#[derive(Debug, Clone)]
struct PortIndex {
    /// Best rank of all its rules.
    min: u32,
    /// Best rank of the port-wildcard rules (what an OPAQUE key matches).
    opaque: u32,
    by_dst: Intervals,
    by_src: Intervals,
    /// Rules restricting both ports: (rank, source range, destination range).
    both: Vec<(u32, Ports, Ports)>,
}

impl PortIndex {
    fn build(rules: &[(u32, &Selector)]) -> PortIndex {
        let (mut by_dst, mut by_src, mut both) = (Vec::new(), Vec::new(), Vec::new());
        let mut opaque = NONE;
        for &(rank, s) in rules {
            let (sp, dp) = (s.src_ports, s.dst_ports);
            if sp.0 > sp.1 || dp.0 > dp.1 {
                continue; // an empty range matches nothing
            }
            match (sp == ANY, dp == ANY) {
                (true, any_dst) => {
                    if any_dst {
                        opaque = opaque.min(rank);
                    }
                    by_dst.push((dp.0, dp.1, rank));
                }
                (false, true) => by_src.push((sp.0, sp.1, rank)),
                (false, false) => both.push((rank, sp, dp)),
            }
        }
        PortIndex {
            min: rules.first().map_or(NONE, |r| r.0),
            opaque,
            by_dst: Intervals::build(&by_dst),
            by_src: Intervals::build(&by_src),
            both,
        }
    }

    /// Lowers `*best` to the best rank here matching `ports`.
    #[inline]
    fn classify(&self, ports: Option<(u16, u16)>, best: &mut u32) {
        if self.min >= *best {
            return;
        }
        let Some((sp, dp)) = ports else {
            *best = (*best).min(self.opaque);
            return;
        };
        *best = (*best).min(self.by_dst.best(dp)).min(self.by_src.best(sp));
        for &(rank, s, d) in &self.both {
            if rank >= *best {
                break;
            }
            if (s.0..=s.1).contains(&sp) && (d.0..=d.1).contains(&dp) {
                *best = rank;
                break;
            }
        }
    }
}

/// All rules of one (source prefix, destination prefix) pair.
#[derive(Debug, Clone)]
pub(super) struct Group {
    any: Option<PortIndex>,
    /// Sorted by protocol.
    protocols: Vec<(u8, PortIndex)>,
}

impl Group {
    /// From the pair's rules in ascending rank order.
    pub(super) fn build(rules: &[(u32, &Selector)]) -> Group {
        let any: Vec<(u32, &Selector)> = rules.iter().filter(|r| r.1.protocol.is_none()).copied().collect();
        let mut protos: Vec<u8> = rules.iter().filter_map(|r| r.1.protocol).collect();
        protos.sort_unstable();
        protos.dedup();
        let protocols = protos
            .into_iter()
            .map(|p| {
                let of_p: Vec<(u32, &Selector)> = rules.iter().filter(|r| r.1.protocol == Some(p)).copied().collect();
                (p, PortIndex::build(&of_p))
            })
            .collect();
        Group { any: (!any.is_empty()).then(|| PortIndex::build(&any)), protocols }
    }

    /// Lowers `*best` to the best rank of this pair matching the key's
    /// protocol and ports.
    #[inline]
    pub(super) fn classify(&self, protocol: u8, ports: Option<(u16, u16)>, best: &mut u32) {
        if let Some(any) = &self.any {
            any.classify(ports, best);
        }
        let found = if self.protocols.len() <= 4 {
            self.protocols.iter().find(|p| p.0 == protocol)
        } else {
            self.protocols.binary_search_by_key(&protocol, |p| p.0).ok().and_then(|i| self.protocols.get(i))
        };
        if let Some((_, ix)) = found {
            ix.classify(ports, best);
        }
    }
}
