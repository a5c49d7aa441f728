//! Per-flow receive accounting of the sink: packets, bytes, duplicates,
//! reordering and loss from the per-flow sequence numbers of
//! [`super::payload`], and one-way latency.
//!
//! Definitions (measured packets only, i.e. sent after the warm-up):
//! - `packets`: measured packets received (duplicates included);
//!   `bytes`: their Ethernet frame bytes without FCS, as received.
//! - `duplicates`: packets whose sequence number was already received (seen
//!   within the last [`WINDOW`] sequence numbers below the highest one).
//! - `reordered`: packets that arrived after one with a higher sequence
//!   number (and are not duplicates). `late`: of those, how many were more
//!   than [`WINDOW`] behind, where a duplicate cannot be told apart any
//!   more (they count as new).
//! - `lost`: expected − (packets − duplicates), never negative. Expected is
//!   the generator's measured count for the flow when it is known
//!   ([`FlowRx::finish`]), else highest − first + 1 over the measured
//!   sequence numbers, where the first is one after the highest warm-up
//!   number seen (or the lowest measured one if no warm-up packet came).
//!   Without the generator's count, losses after the last packet received
//!   cannot be seen.
//! - `future_timestamps`: measured packets (not duplicates) whose transmit
//!   timestamp is later than their receive time (clocks of two hosts, a
//!   corrupted payload): counted, kept out of the latency histogram.

use super::hist::Histogram;

/// Sequence numbers below the highest one within which duplicates are found.
pub const WINDOW: u64 = 1024;
const WORDS: usize = (WINDOW / 64) as usize;

/// Receive state of one flow. Allocated at start-up.
#[derive(Debug, Clone)]
pub struct FlowRx {
    /// Measured packets received (duplicates included).
    pub packets: u64,
    /// Ethernet frame bytes of `packets`.
    pub bytes: u64,
    /// Duplicates among `packets`.
    pub duplicates: u64,
    /// Arrived after a higher sequence number.
    pub reordered: u64,
    /// Of `reordered`, more than [`WINDOW`] behind.
    pub late: u64,
    /// Warm-up packets received (not counted above).
    pub warmup: u64,
    /// Measured packets whose transmit time was after their receive time
    /// (not in `latency`).
    pub future_timestamps: u64,
    /// One-way latency of measured packets, ns.
    pub latency: Histogram,
    highest: Option<u64>,
    lowest: u64,
    highest_warmup: Option<u64>,
    seen: [u64; WORDS],
}

impl Default for FlowRx {
    fn default() -> Self {
        Self::new()
    }
}

impl FlowRx {
    /// Fresh state (allocates the histogram).
    pub fn new() -> FlowRx {
        FlowRx {
            packets: 0,
            bytes: 0,
            duplicates: 0,
            reordered: 0,
            late: 0,
            warmup: 0,
            future_timestamps: 0,
            latency: Histogram::new(),
            highest: None,
            lowest: u64::MAX,
            highest_warmup: None,
            seen: [0; WORDS],
        }
    }

    /// Counts one received packet of this flow: its sequence number, whether
    /// it was measured, frame bytes, and one-way latency (ns; receive time −
    /// transmit time; `None` when the transmit time is after the receive
    /// time: counted in `future_timestamps`, not timed).
    #[inline]
    pub fn record(&mut self, seq: u64, measured: bool, frame_bytes: usize, latency_ns: Option<u64>) {
        if !measured {
            self.warmup += 1;
            self.highest_warmup = Some(self.highest_warmup.map_or(seq, |h| h.max(seq)));
            return;
        }
        self.packets += 1;
        self.bytes += frame_bytes as u64;
        self.lowest = self.lowest.min(seq);
        match self.highest {
            None => {
                self.highest = Some(seq);
                self.set(seq);
            }
            Some(h) if seq > h => {
                let d = seq - h;
                if d >= WINDOW {
                    self.seen = [0; WORDS];
                } else {
                    for s in h + 1..seq {
                        self.clear(s);
                    }
                }
                self.highest = Some(seq);
                self.set(seq);
            }
            Some(h) if h - seq < WINDOW => {
                if self.is_set(seq) {
                    self.duplicates += 1;
                    return;
                }
                self.set(seq);
                self.reordered += 1;
            }
            Some(_) => {
                self.reordered += 1;
                self.late += 1;
            }
        }
        match latency_ns {
            Some(l) => self.latency.record(l),
            None => self.future_timestamps += 1,
        }
    }

    #[inline]
    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }
    #[inline]
    fn set(&mut self, seq: u64) {
        let (w, m) = Self::bit(seq);
        self.seen[w] |= m;
    }
    #[inline]
    fn clear(&mut self, seq: u64) {
        let (w, m) = Self::bit(seq);
        self.seen[w] &= !m;
    }
    #[inline]
    fn is_set(&self, seq: u64) -> bool {
        let (w, m) = Self::bit(seq);
        self.seen[w] & m != 0
    }

    /// Packets expected and lost: with `gen_measured` (the generator's
    /// measured tx count for this flow) it is the expectation; otherwise
    /// the sequence range seen (module docs). Returns (expected, lost).
    pub fn finish(&self, gen_measured: Option<u64>) -> (u64, u64) {
        let unique = self.packets - self.duplicates;
        let expected = match (gen_measured, self.highest) {
            (Some(g), _) => g,
            (None, None) => 0,
            (None, Some(h)) => {
                let first = self.highest_warmup.map_or(self.lowest, |w| (w + 1).min(self.lowest));
                h - first + 1
            }
        };
        (expected, expected.saturating_sub(unique))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(seqs: &[u64]) -> FlowRx {
        let mut f = FlowRx::new();
        for &s in seqs {
            f.record(s, true, 100, Some(1000 + s));
        }
        f
    }

    #[test]
    fn in_order_stream_has_nothing_to_report() {
        let f = feed(&(0..5000).collect::<Vec<_>>());
        assert_eq!((f.packets, f.duplicates, f.reordered, f.late, f.bytes), (5000, 0, 0, 0, 500_000));
        assert_eq!(f.finish(None), (5000, 0));
        assert_eq!(f.finish(Some(5000)), (5000, 0));
        assert_eq!(f.finish(Some(5003)), (5003, 3), "a lost tail is seen only with the generator's count");
        assert_eq!(f.latency.count(), 5000);
        assert_eq!(f.latency.max(), 1000 + 4999);
    }

    #[test]
    fn gaps_reorders_and_duplicates() {
        // 0..10 without 3 and 7; 5 arrives after 6; 2 twice; 8 three times.
        let f = feed(&[0, 1, 2, 2, 4, 6, 5, 8, 8, 9, 8]);
        assert_eq!(f.packets, 11);
        assert_eq!(f.duplicates, 3);
        assert_eq!(f.reordered, 1);
        assert_eq!(f.finish(None), (10, 2));
        assert_eq!(f.latency.count(), 8, "duplicates are not timed");
    }

    #[test]
    fn timestamps_from_the_future_are_counted_not_timed() {
        let mut f = FlowRx::new();
        f.record(0, true, 100, Some(500));
        f.record(1, true, 100, None);
        f.record(1, true, 100, None); // a duplicate: neither timed nor counted again
        f.record(2, false, 100, None); // warm-up: not measured
        assert_eq!((f.packets, f.future_timestamps, f.latency.count(), f.latency.min()), (3, 1, 1, 500));
        assert_eq!(f.finish(None), (2, 0));
    }

    #[test]
    fn a_late_arrival_of_a_missing_packet_is_reorder_not_loss() {
        let f = feed(&[0, 1, 3, 4, 2]);
        assert_eq!((f.reordered, f.duplicates), (1, 0));
        assert_eq!(f.finish(None), (5, 0));
    }

    #[test]
    fn jumps_clear_the_window_and_far_behind_is_late() {
        let mut seqs: Vec<u64> = (0..10).collect();
        seqs.push(5000); // a jump of more than the window
        seqs.push(5); // far behind: late, cannot be checked
        seqs.push(4990); // within the window, never seen
        seqs.push(4990); // now a duplicate
        let f = feed(&seqs);
        assert_eq!((f.late, f.reordered, f.duplicates), (1, 2, 1));
        // unique 13 (0..10, 5000, 5 counted as new, 4990), range 0..=5000
        assert_eq!(f.finish(None), (5001, 5001 - 13));
    }

    #[test]
    fn warmup_packets_set_where_the_measured_range_starts() {
        let mut f = FlowRx::new();
        for s in 0..100 {
            f.record(s, false, 64, Some(0));
        }
        // 100 and 101 (the first measured ones) lost.
        for s in 102..200 {
            f.record(s, true, 64, Some(5));
        }
        assert_eq!(f.warmup, 100);
        assert_eq!(f.finish(None), (100, 2));
        assert_eq!(f.packets, 98);
        let empty = FlowRx::new();
        assert_eq!(empty.finish(None), (0, 0));
        assert_eq!(empty.finish(Some(7)), (7, 7));
    }
}
