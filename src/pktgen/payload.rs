//! The pktgen payload: what follows the inner UDP header of every generated
//! packet. All fields big-endian (network order), at fixed offsets:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `"SGPG"` (0x53 0x47 0x50 0x47) |
//! | 4 | 4 | flow number (0-based; flow *i* is sent from source port `sport + i`) |
//! | 8 | 8 | sequence number within the flow, from 0 |
//! | 16 | 8 | transmit timestamp, `CLOCK_MONOTONIC` nanoseconds ([`super::now_ns`]) |
//! | 24 | 4 | flags: bit 0 [`FLAG_MEASURED`] (sent after the warm-up) |
//!
//! The rest of the UDP payload, up to the packet size, is zero.

/// The 4 magic bytes at the start of the payload.
pub const MAGIC: [u8; 4] = *b"SGPG";
/// Bytes of the payload header (the rest of the payload is zero).
pub const LEN: usize = 28;
/// Offset of the flow number.
pub const FLOW: usize = 4;
/// Offset of the sequence number.
pub const SEQ: usize = 8;
/// Offset of the transmit timestamp.
pub const TX_NS: usize = 16;
/// Offset of the flags.
pub const FLAGS: usize = 24;
/// Flag bit: sent after the warm-up; only such packets count for loss and latency.
pub const FLAG_MEASURED: u32 = 1;

/// A decoded payload header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Payload {
    /// Flow number.
    pub flow: u32,
    /// Sequence number within the flow (from 0).
    pub seq: u64,
    /// Transmit time, `CLOCK_MONOTONIC` ns.
    pub tx_ns: u64,
    /// Flags ([`FLAG_MEASURED`]).
    pub flags: u32,
}

impl Payload {
    /// True when sent after the warm-up.
    #[inline]
    pub fn measured(&self) -> bool {
        self.flags & FLAG_MEASURED != 0
    }

    /// Writes the [`LEN`]-byte header into `out[..LEN]`, magic included.
    /// Returns false (writing nothing) if `out` is shorter.
    #[inline]
    pub fn write(&self, out: &mut [u8]) -> bool {
        let Some(b) = out.get_mut(..LEN) else {
            return false;
        };
        b[..FLOW].copy_from_slice(&MAGIC);
        b[FLOW..SEQ].copy_from_slice(&self.flow.to_be_bytes());
        b[SEQ..TX_NS].copy_from_slice(&self.seq.to_be_bytes());
        b[TX_NS..FLAGS].copy_from_slice(&self.tx_ns.to_be_bytes());
        b[FLAGS..LEN].copy_from_slice(&self.flags.to_be_bytes());
        true
    }

    /// Reads a payload header from the start of a UDP payload: `None` if it
    /// is shorter than [`LEN`] or does not start with [`MAGIC`].
    #[inline]
    pub fn read(b: &[u8]) -> Option<Payload> {
        let b = b.get(..LEN)?;
        if b[..FLOW] != MAGIC {
            return None;
        }
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| ((u32_at(o) as u64) << 32) | u32_at(o + 4) as u64;
        Some(Payload { flow: u32_at(FLOW), seq: u64_at(SEQ), tx_ns: u64_at(TX_NS), flags: u32_at(FLAGS) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_the_documented_one() {
        let p = Payload { flow: 0x0102_0304, seq: 0x1112_1314_1516_1718, tx_ns: 0x2122_2324_2526_2728, flags: 1 };
        let mut b = [0xeeu8; 30];
        assert!(p.write(&mut b));
        let want: Vec<u8> = [
            b"SGPG".to_vec(),
            vec![1, 2, 3, 4],
            vec![0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18],
            vec![0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28],
            vec![0, 0, 0, 1],
        ]
        .concat();
        assert_eq!(&b[..LEN], &want[..]);
        assert_eq!(&b[LEN..], &[0xee, 0xee], "nothing written past the header");
        assert_eq!(Payload::read(&b), Some(p));
        assert!(p.measured());
    }

    #[test]
    fn short_or_foreign_payloads_are_not_ours() {
        let p = Payload { flow: 7, seq: 9, tx_ns: 5, flags: 0 };
        let mut b = [0u8; LEN];
        assert!(p.write(&mut b));
        assert_eq!(Payload::read(&b[..LEN - 1]), None);
        assert!(!p.write(&mut [0u8; LEN - 1]));
        b[0] = b'X';
        assert_eq!(Payload::read(&b), None);
        assert_eq!(Payload::read(&[]), None);
        assert!(!Payload::read(&{
            let mut c = [0u8; LEN];
            p.write(&mut c);
            c
        })
        .unwrap()
        .measured());
    }
}
