//! Path-compressed binary prefix tries (a forest of them in one arena),
//! built once when an SPD snapshot is made and then only walked.
//!
//! Addresses and prefixes are numbers of the family's width ([`Key`]:
//! `u32` for IPv4, `u128` for IPv6), first address bit most significant.
//! Each node is a prefix; a node with a value also carries the best (lowest)
//! rank of the rules under that value, and every node the best rank of its
//! whole subtree, so a walk stops as soon as nothing below can beat the best
//! match already found.

/// "No node", "no value", "no rank".
pub(super) const NONE: u32 = u32::MAX;

/// An address of one family as the tries take it: an unsigned number whose
/// most significant bit is the address's first (`u32` for IPv4, `u128` for
/// IPv6, so IPv4 nodes stay small).
pub(super) trait Key: Copy + Eq + Default + std::fmt::Debug {
    /// Bits in an address (32 or 128).
    const WIDTH: u8;
    /// The mask of a prefix of `len` bits (0..=WIDTH).
    fn mask(len: u8) -> Self;
    /// `self & mask`.
    fn and(self, mask: Self) -> Self;
    /// How many leading bits `self` and `other` share.
    fn common(self, other: Self) -> u8;
    /// Bit `i` (0 = most significant), `i < WIDTH`.
    fn bit(self, i: u8) -> usize;
}

impl Key for u32 {
    const WIDTH: u8 = 32;
    #[inline]
    fn mask(len: u8) -> u32 {
        (u64::MAX << (32 - len.min(32) as u32)) as u32
    }
    #[inline]
    fn and(self, mask: u32) -> u32 {
        self & mask
    }
    #[inline]
    fn common(self, other: u32) -> u8 {
        (self ^ other).leading_zeros() as u8
    }
    #[inline]
    fn bit(self, i: u8) -> usize {
        ((self >> (31 - i.min(31) as u32)) & 1) as usize
    }
}

impl Key for u128 {
    const WIDTH: u8 = 128;
    #[inline]
    fn mask(len: u8) -> u128 {
        if len == 0 {
            0
        } else {
            u128::MAX << (128 - len.min(128) as u32)
        }
    }
    #[inline]
    fn and(self, mask: u128) -> u128 {
        self & mask
    }
    #[inline]
    fn common(self, other: u128) -> u8 {
        (self ^ other).leading_zeros() as u8
    }
    #[inline]
    fn bit(self, i: u8) -> usize {
        ((self >> (127 - i.min(127) as u32)) & 1) as usize
    }
}

#[derive(Debug, Clone)]
struct Node<K> {
    bits: K,
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
#[derive(Debug, Clone)]
pub(super) struct Forest<K> {
    nodes: Vec<Node<K>>,
}

impl<K> Default for Forest<K> {
    fn default() -> Self {
        Forest { nodes: Vec::new() }
    }
}

impl<K: Key> Forest<K> {
    fn push(&mut self, bits: K, len: u8) -> u32 {
        self.nodes.push(Node { bits: bits.and(K::mask(len)), child: [NONE; 2], value: NONE, min: NONE, sub_min: NONE, len });
        (self.nodes.len() - 1) as u32
    }

    /// A new empty trie; returns its root.
    pub(super) fn new_root(&mut self) -> u32 {
        self.push(K::default(), 0)
    }

    /// The node of prefix (`bits`, `len`) in the trie `root`, created (with
    /// no value) if absent.
    pub(super) fn insert(&mut self, root: u32, bits: K, len: u8) -> u32 {
        let len = len.min(K::WIDTH);
        let bits = bits.and(K::mask(len));
        let mut cur = root as usize;
        loop {
            // Invariant: node `cur` covers the prefix.
            let cl = self.nodes[cur].len;
            if cl == len {
                return cur as u32;
            }
            let b = bits.bit(cl);
            let c = self.nodes[cur].child[b];
            if c == NONE {
                let leaf = self.push(bits, len);
                self.nodes[cur].child[b] = leaf;
                return leaf;
            }
            let (nb, nl) = (self.nodes[c as usize].bits, self.nodes[c as usize].len);
            let common = bits.common(nb).min(len).min(nl);
            if common == nl {
                cur = c as usize;
                continue;
            }
            let new = if common == len {
                // The prefix sits between `cur` and its child.
                let n = self.push(bits, len);
                self.nodes[n as usize].child[nb.bit(len)] = c;
                n
            } else {
                // They part at bit `common`: a branching node above both.
                let g = self.push(bits, common);
                let leaf = self.push(bits, len);
                self.nodes[g as usize].child[nb.bit(common)] = c;
                self.nodes[g as usize].child[bits.bit(common)] = leaf;
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
    /// the address `key`, shortest first, skipping values whose
    /// best rank is not below `*best` and stopping where no deeper node can
    /// be. At most 129 steps; no allocation.
    #[inline]
    pub(super) fn walk(&self, root: u32, key: K, best: &mut u32, mut visit: impl FnMut(u32, &mut u32)) {
        let mut i = root;
        while let Some(n) = self.nodes.get(i as usize) {
            if n.sub_min >= *best || key.and(K::mask(n.len)) != n.bits {
                return;
            }
            if n.min < *best {
                visit(n.value, best);
            }
            if n.len >= K::WIDTH {
                return;
            }
            i = n.child[key.bit(n.len)];
        }
    }
}
