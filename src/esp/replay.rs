//! The anti-replay window (RFC 4303 §3.4.3), as a block bitmap (RFC 6479).
//!
//! Check before crypto ([`ReplayWindow::check`]), commit only after the ICV
//! verified ([`ReplayWindow::commit`]): two functions, never one. The bitmap
//! has one 64-bit block more than the window needs, so sliding the right edge
//! clears whole blocks and never shrinks the configured window; the cost of a
//! check or commit does not depend on the window size.

/// Largest window accepted (packets).
pub const MAX_WINDOW: u32 = 65536;

/// Why a sequence number was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// Left of the window: too old to tell.
    TooOld,
    /// Already received.
    Duplicate,
    /// Sequence number 0 is never sent (RFC 4303 §3.3.3: the first packet is 1).
    Zero,
}

/// Receiver state for one inbound SA. Owned by one worker.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// Window size in packets; 0 = anti-replay disabled.
    size: u64,
    /// Highest sequence number committed (the right edge), 0 = none yet.
    top: u64,
    /// Block bitmap; bit `s % 64` of block `(s / 64) % blocks.len()`.
    bits: Box<[u64]>,
}

impl ReplayWindow {
    /// A window of `size` packets (0 disables the check; callers cap it at
    /// [`MAX_WINDOW`]). Allocates: create on the control path.
    pub fn new(size: u32) -> ReplayWindow {
        let size = size.min(MAX_WINDOW) as u64;
        // Blocks to cover `size` bits, plus one, rounded to a power of two for masking.
        let blocks = (size.div_ceil(64) + 1).next_power_of_two() as usize;
        ReplayWindow { size, top: 0, bits: vec![0u64; blocks].into_boxed_slice() }
    }

    /// [`ReplayWindow::new`] for a peer whose first sequence number is
    /// `first_seq` (1 = [`ReplayWindow::new`]): nothing received yet, the
    /// right edge at `first_seq - 1`, so `first_seq` and what follows are
    /// new, anything a window or more below it is too old, and with ESN the
    /// high half is inferred from there (RFC 4303 Appendix A2).
    pub fn starting_at(size: u32, first_seq: u64) -> ReplayWindow {
        let mut w = ReplayWindow::new(size);
        w.top = first_seq.saturating_sub(1);
        w
    }

    /// Window size in packets.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Highest sequence number committed so far.
    pub fn top(&self) -> u64 {
        self.top
    }

    fn slot(&self, seq: u64) -> (usize, u64) {
        (((seq >> 6) as usize) & (self.bits.len() - 1), 1u64 << (seq & 63))
    }

    /// Would `seq` be accepted? Does not change the window.
    pub fn check(&self, seq: u64) -> Result<(), ReplayError> {
        if seq == 0 && self.size != 0 {
            return Err(ReplayError::Zero);
        }
        if self.size == 0 || seq > self.top {
            return Ok(());
        }
        if self.top - seq >= self.size {
            return Err(ReplayError::TooOld);
        }
        let (b, m) = self.slot(seq);
        if self.bits[b] & m != 0 {
            Err(ReplayError::Duplicate)
        } else {
            Ok(())
        }
    }

    /// Marks `seq` received, sliding the window if it is new at the right.
    /// Re-checks first: of two copies that passed `check` in one burst, the
    /// second is refused here.
    pub fn commit(&mut self, seq: u64) -> Result<(), ReplayError> {
        self.check(seq)?;
        if self.size == 0 {
            self.top = self.top.max(seq);
            return Ok(());
        }
        if seq > self.top {
            let old_block = self.top >> 6;
            let new_block = seq >> 6;
            let n = (new_block - old_block).min(self.bits.len() as u64);
            for i in 1..=n {
                let idx = ((old_block + i) as usize) & (self.bits.len() - 1);
                self.bits[idx] = 0;
            }
            self.top = seq;
        }
        let (b, m) = self.slot(seq);
        self.bits[b] |= m;
        Ok(())
    }

    /// With ESN, the full 64-bit sequence number for a received low word
    /// (RFC 4303 Appendix A2.2), inferred from the window position.
    pub fn infer_esn(&self, seq_lo: u32) -> u64 {
        let w = self.size.max(1);
        let th = self.top >> 32;
        let tl = self.top as u32 as u64;
        let lo = seq_lo as u64;
        // Bottom of the window, in the low 32-bit space.
        if tl >= w - 1 {
            // Window within one 2^32 span.
            let bottom = tl + 1 - w;
            if lo >= bottom {
                (th << 32) | lo
            } else {
                ((th + 1) << 32) | lo
            }
        } else {
            // Window straddles 2^32 boundary.
            let bottom = (tl.wrapping_sub(w - 1)) & 0xffff_ffff;
            if lo >= bottom && th > 0 {
                ((th - 1) << 32) | lo
            } else {
                (th << 32) | lo
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_of_a_64_window() {
        let mut w = ReplayWindow::new(64);
        assert_eq!(w.check(0), Err(ReplayError::Zero));
        w.commit(100).unwrap();
        // top - seq = 63 is inside, 64 is outside.
        assert_eq!(w.check(37), Ok(()));
        assert_eq!(w.check(36), Err(ReplayError::TooOld));
        w.commit(37).unwrap();
        assert_eq!(w.check(37), Err(ReplayError::Duplicate));
        assert_eq!(w.check(100), Err(ReplayError::Duplicate));
        assert_eq!(w.check(101), Ok(()));
        // A jump clears what it passes.
        w.commit(100 + 64 * 5).unwrap();
        assert_eq!(w.check(100 + 64 * 5 - 1), Ok(()));
        assert_eq!(w.check(100), Err(ReplayError::TooOld));
    }

    #[test]
    fn commit_refuses_second_copy() {
        let mut w = ReplayWindow::new(64);
        assert!(w.check(5).is_ok() && w.check(5).is_ok());
        w.commit(5).unwrap();
        assert_eq!(w.commit(5), Err(ReplayError::Duplicate));
    }

    #[test]
    fn large_window_is_not_reduced() {
        for size in [32u32, 64, 100, 1000, 4096, 65536] {
            let mut w = ReplayWindow::new(size);
            let top = 1_000_000u64;
            w.commit(top).unwrap();
            let oldest = top - size as u64 + 1;
            assert_eq!(w.check(oldest), Ok(()), "size {size}");
            assert_eq!(w.check(oldest - 1), Err(ReplayError::TooOld), "size {size}");
            w.commit(oldest).unwrap();
            // Sliding by less than a block keeps old bits; by more clears.
            w.commit(top + 1).unwrap();
            assert_eq!(w.check(oldest), Err(ReplayError::TooOld));
            assert_eq!(w.check(top), Err(ReplayError::Duplicate));
        }
    }

    #[test]
    fn every_seq_in_window_tracked_after_jumps() {
        let mut w = ReplayWindow::new(128);
        let mut seen = std::collections::BTreeSet::new();
        let mut x = 12345u64;
        for _ in 0..5000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let seq = 1 + (x >> 33) % 3000;
            let expect = if seq + 128 <= w.top() {
                Err(ReplayError::TooOld)
            } else if seen.contains(&seq) {
                Err(ReplayError::Duplicate)
            } else {
                Ok(())
            };
            assert_eq!(w.commit(seq), expect, "seq {seq} top {}", w.top());
            if expect.is_ok() {
                seen.insert(seq);
            }
        }
    }

    #[test]
    fn disabled_window_accepts_everything() {
        let mut w = ReplayWindow::new(0);
        w.commit(10).unwrap();
        w.commit(10).unwrap();
        w.commit(1).unwrap();
    }

    #[test]
    fn esn_inference_both_sides_of_the_boundary() {
        let mut w = ReplayWindow::new(64);
        // Window not straddling: top = 2^32 - 1 (seq_hi 0).
        w.commit(0xffff_ffff).unwrap();
        assert_eq!(w.infer_esn(0xffff_fff0), 0xffff_fff0);
        assert_eq!(w.infer_esn(5), (1 << 32) | 5);
        // Window straddling: top = 2^32 + 10.
        w.commit((1 << 32) | 10).unwrap();
        assert_eq!(w.infer_esn(0xffff_fff0), 0xffff_fff0, "above bottom → seq_hi − 1");
        assert_eq!(w.infer_esn(3), (1 << 32) | 3);
        assert_eq!(w.infer_esn(20), (1 << 32) | 20);
    }
}
