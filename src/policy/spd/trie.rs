//! Path-compressed binary prefix tries (a forest of them in one arena),
//! built once when an SPD snapshot is made and then only walked.
//!
//! Addresses and prefixes are left-aligned 128-bit numbers (an IPv4
//! address in the top 32 bits), so one trie code serves both families.
//! Each node is a prefix; a node with a value also carries the best (lowest)
//! rank of the rules under that value, and every node the best rank of its
//! whole subtree, so a walk stops as soon as nothing below can beat the best
//! match already found.

/// "No node", "no value", "no rank".
pub(super) const NONE: u32 = u32::MAX;

/// The mask of a left-aligned prefix of `len` bits (0..=128).
#[inline]
pub(super) fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128) as u32)
    }
}

/// Bit `i` (0 = most significant) of a left-aligned address.
#[inline]
fn bit(bits: u128, i: u8) -> usize {
    ((bits >> (127 - i.min(127) as u32)) & 1) as usize
}

#[derive(Debug, Clone)]
struct Node {
    bits: u128,
    mask: u128,
    child: [u32; 2],
    /// The caller's value, `NONE` for a branching node without one.
    value: u32,
    /// Best rank of the value's rules, `NONE` without a value.
    min: u32,
    /// Best rank in the subtree (this node included).
    sub_min: u32,
    len: u8,
}

/// Tries in one arena; a trie is named by its root (a /0 node).
#[derive(Debug, Clone, Default)]
pub(super) struct Forest {
    nodes: Vec<Node>,
}

impl Forest {
    fn push(&mut self, bits: u128, len: u8) -> u32 {
        let m = mask(len);
        self.nodes.push(Node { bits: bits & m, mask: m, child: [NONE; 2], value: NONE, min: NONE, sub_min: NONE, len });
        (self.nodes.len() - 1) as u32
    }

    /// A new empty trie; returns its root.
    pub(super) fn new_root(&mut self) -> u32 {
        self.push(0, 0)
    }

    /// The node of prefix (`bits`, `len`) in the trie `root`, created (with
    /// no value) if absent.
    pub(super) fn insert(&mut self, root: u32, bits: u128, len: u8) -> u32 {
        let len = len.min(128);
        let bits = bits & mask(len);
        let mut cur = root as usize;
        loop {
            // Invariant: node `cur` covers the prefix.
            let cl = self.nodes[cur].len;
            if cl == len {
                return cur as u32;
            }
            let b = bit(bits, cl);
            let c = self.nodes[cur].child[b];
            if c == NONE {
                let leaf = self.push(bits, len);
                self.nodes[cur].child[b] = leaf;
                return leaf;
            }
            let (nb, nl) = (self.nodes[c as usize].bits, self.nodes[c as usize].len);
            let common = ((bits ^ nb).leading_zeros() as u8).min(len).min(nl);
            if common == nl {
                cur = c as usize;
                continue;
            }
            let new = if common == len {
                // The prefix sits between `cur` and its child.
                let n = self.push(bits, len);
                self.nodes[n as usize].child[bit(nb, len)] = c;
                n
            } else {
                // They part at bit `common`: a branching node above both.
                let g = self.push(bits, common);
                let leaf = self.push(bits, len);
                self.nodes[g as usize].child[bit(nb, common)] = c;
                self.nodes[g as usize].child[bit(bits, common)] = leaf;
                self.nodes[cur].child[b] = g;
                return leaf;
            };
            self.nodes[cur].child[b] = new;
            return new;
        }
    }

    /// The value of node `n` (`NONE` if it has none).
    pub(super) fn value(&self, n: u32) -> u32 {
        self.nodes[n as usize].value
    }

    /// Sets node `n`'s value.
    pub(super) fn set_value(&mut self, n: u32, value: u32) {
        self.nodes[n as usize].value = value;
    }

    /// Lowers node `n`'s best rank to `rank` if better.
    pub(super) fn offer_rank(&mut self, n: u32, rank: u32) {
        let node = &mut self.nodes[n as usize];
        node.min = node.min.min(rank);
    }

    /// Computes every subtree's best rank; call once after the inserts.
    pub(super) fn finish(&mut self, root: u32) -> u32 {
        let n = &self.nodes[root as usize];
        let (own, [a, b]) = (n.min, n.child);
        let mut m = own;
        for c in [a, b] {
            if c != NONE {
                m = m.min(self.finish(c));
            }
        }
        self.nodes[root as usize].sub_min = m;
        m
    }

    /// Calls `visit(value, best)` for every node of trie `root` that covers
    /// the left-aligned address `key`, shortest first, skipping values whose
    /// best rank is not below `*best` and stopping where no deeper node can
    /// be. At most 129 steps; no allocation.
    #[inline]
    pub(super) fn walk(&self, root: u32, key: u128, best: &mut u32, mut visit: impl FnMut(u32, &mut u32)) {
        let mut i = root;
        while let Some(n) = self.nodes.get(i as usize) {
            if n.sub_min >= *best || (key & n.mask) != n.bits {
                return;
            }
            if n.min < *best {
                visit(n.value, best);
            }
            if n.len >= 128 {
                return;
            }
            i = n.child[bit(key, n.len)];
        }
    }
}
