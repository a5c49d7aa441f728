//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

/// One's-complement sum of `data` folded to 16 bits, not inverted (RFC
/// 1071). Adds 64-bit little-endian words with their carries counted
/// apart, folds at the end and swaps the two bytes: the sum is the same
/// over any word width that is a multiple of 16 bits (2^16 ≡ 1 modulo
/// 2^16 − 1, RFC 1071 §2 (C)) and in either byte order, swapped at the end
/// (§2 (B)). A tail shorter than a word is added in 4-, 2- and 1-byte
/// pieces, each byte keeping its position's parity (even bytes are the
/// low-order byte of a little-endian 16-bit word). A quarter of the
/// additions of a 16-bit loop and no byte swap per word: the IPv4 header
/// check of the fast paths is two words and a tail.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut carries: u64 = 0;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let (s, c) = acc.overflowing_add(u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]));
        acc = s;
        carries += c as u64;
    }
    let mut rest = words.remainder();
    // Tail pieces, each below 2^32: their sum (at most 3 × 2^32) is added
    // once.
    let mut tail: u64 = 0;
    if let [a, b, c, d, more @ ..] = rest {
        tail += u32::from_le_bytes([*a, *b, *c, *d]) as u64;
        rest = more;
    }
    if let [a, b, more @ ..] = rest {
        tail += u16::from_le_bytes([*a, *b]) as u64;
        rest = more;
    }
    if let [a] = rest {
        tail += *a as u64;
    }
    let (s, c) = acc.overflowing_add(tail);
    carries += c as u64;
    // End-around carry (2^64 ≡ 1): `carries` is far below 2^64, so adding
    // it back overflows at most once, leaving a small value.
    let (s, c) = s.overflowing_add(carries);
    let acc = s + c as u64;
    // 64 → 32 bits twice (the first leaves at most 2^33 − 2, the second at
    // most 2^32 − 1), then 32 → 16 bits, then back to network byte order.
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    fold(acc as u32).swap_bytes()
}

/// Checksum of `data` as placed in a header field (RFC 1071).
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Checksum of `pseudo` followed by `data` as placed in a header field:
/// the TCP/UDP checksum over a pseudo-header (RFC 793 §3.1, RFC 768) and
/// the segment whose own checksum field is zero. `pseudo` must have an even
/// length (the IPv4 pseudo-header has 12 bytes).
pub fn with_pseudo(pseudo: &[u8], data: &[u8]) -> u16 {
    !fold(sum(pseudo) as u32 + sum(data) as u32)
}

/// `acc` folded to 16 bits with end-around carry: twice is enough for any
/// u32 (the first leaves at most 0x1fffe, the second at most 0xffff).
#[inline]
fn fold(acc: u32) -> u16 {
    let acc = (acc & 0xffff) + (acc >> 16);
    ((acc & 0xffff) + (acc >> 16)) as u16
}

/// One's-complement sum of two partial sums (RFC 1071 §2 (B): the sum is
/// associative, so parts, e.g. a pseudo-header and a payload, may be summed
/// apart and combined; each part but the last must have an even length).
#[inline]
pub fn add(a: u16, b: u16) -> u16 {
    fold(a as u32 + b as u32)
}

/// Updates checksum `old_ck` after a 16-bit field changed from `old` to `new`
/// (RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')).
#[inline]
pub fn update16(old_ck: u16, old: u16, new: u16) -> u16 {
    let acc = (!old_ck) as u32 + (!old) as u32 + new as u32;
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example bytes: sum 0xddf2.
        assert_eq!(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
    }

    /// The RFC 1071 sum the straightforward way: 16-bit big-endian words
    /// (an odd last byte padded with zero), end-around carry after each add.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for c in data.chunks(2) {
            acc += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    proptest::proptest! {
        #[test]
        fn sum_matches_the_16_bit_reference(data in proptest::collection::vec(proptest::num::u8::ANY, 0..1600)) {
            proptest::prop_assert_eq!(sum(&data), reference_sum(&data));
        }
    }

    #[test]
    fn sum_edges() {
        // All ones (negative zero stays 0xffff), all zeros, every remainder length.
        for n in 0..12 {
            assert_eq!(sum(&vec![0xff; n]), reference_sum(&vec![0xff; n]), "ff × {n}");
            assert_eq!(sum(&vec![0; n]), 0, "00 × {n}");
        }
        assert_eq!(sum(&[0xff; 1 << 16]), 0xffff);
        assert_eq!(fold(u32::MAX), 0xffff);
        assert_eq!(fold(0x1fffe), 0xffff);
    }

    #[test]
    fn incremental_matches_full() {
        let mut h = [0x45u8, 0, 0, 0x54, 0x12, 0x34, 0x40, 0, 64, 1, 0, 0, 192, 0, 2, 10, 198, 51, 100, 10];
        let ck = checksum(&h);
        h[10..12].copy_from_slice(&ck.to_be_bytes());
        let old = u16::from_be_bytes([h[8], h[9]]);
        h[8] -= 1;
        let new = u16::from_be_bytes([h[8], h[9]]);
        let inc = update16(ck, old, new);
        h[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(inc, checksum(&h));
    }
}
