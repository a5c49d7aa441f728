//! ECN at tunnel endpoints (RFC 6040, normal mode).
//!
//! Encapsulation copies the inner ECN field to the outer header (§4.1; the
//! outbound code copies the whole DS + ECN byte). Decapsulation combines the
//! outer ECN into the inner one (§4.2, Figure 4), here.

/// Not-ECT codepoint.
pub const NOT_ECT: u8 = 0b00;
/// ECT(1) codepoint.
pub const ECT1: u8 = 0b01;
/// ECT(0) codepoint.
pub const ECT0: u8 = 0b10;
/// CE codepoint.
pub const CE: u8 = 0b11;

/// The inner ECN field after decapsulation (RFC 6040 §4.2, Figure 4), or
/// `None` when the packet MUST be dropped (outer CE over inner Not-ECT: the
/// congestion signal could not be passed on).
#[inline]
pub fn decap(outer: u8, inner: u8) -> Option<u8> {
    match (outer & 3, inner & 3) {
        (CE, NOT_ECT) => None,
        (CE, _) => Some(CE),
        (ECT1, ECT0) => Some(ECT1),
        (_, i) => Some(i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6040_figure_4() {
        // rows: inner; columns: outer Not-ECT, ECT(0), ECT(1), CE
        let table = [
            (NOT_ECT, [Some(NOT_ECT), Some(NOT_ECT), Some(NOT_ECT), None]),
            (ECT0, [Some(ECT0), Some(ECT0), Some(ECT1), Some(CE)]),
            (ECT1, [Some(ECT1), Some(ECT1), Some(ECT1), Some(CE)]),
            (CE, [Some(CE), Some(CE), Some(CE), Some(CE)]),
        ];
        for (inner, row) in table {
            for (outer, want) in [NOT_ECT, ECT0, ECT1, CE].into_iter().zip(row) {
                assert_eq!(decap(outer, inner), want, "outer {outer:02b} inner {inner:02b}");
            }
        }
    }
}
