//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

/// One's-complement sum of `data` folded to 16 bits, not inverted.
pub fn sum(data: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u32) << 8;
    }
    fold(acc)
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

fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
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
