//! Pacing: a token bucket on the monotonic clock. Tokens (packets) accrue
//! at `rate` per second up to a depth of `max(BURST, rate × 1 ms)` (capped
//! at 4096), so a late wake-up is caught up in bursts of at most
//! [`super::BURST`] rather than lost; the sender takes what is there, up to
//! one burst, and sleeps only when the next batch is more than
//! [`SLEEP_MIN_NS`] away (never per packet at high rates).

use super::BURST;

/// Waits shorter than this are spun, longer ones slept.
pub const SLEEP_MIN_NS: u64 = 50_000;
const NS: u128 = 1_000_000_000;

/// A token bucket of packets. Time is passed in (ns of [`super::now_ns`]).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Packets per second; 0 = unlimited.
    rate: u64,
    /// Tokens × 1e9 (so integer arithmetic keeps fractions).
    credit: u128,
    /// Largest `credit`.
    depth: u128,
    last_ns: u64,
    /// Tokens worth waiting for before sending (about 100 µs of them, 1..=BURST).
    batch: u64,
}

impl TokenBucket {
    /// A bucket releasing `rate` packets per second from `now_ns` on
    /// (starting empty); `rate` 0 releases a full burst every time.
    pub fn new(rate: u64, now_ns: u64) -> TokenBucket {
        let depth_tokens = (rate / 1000).clamp(BURST as u64, 4096);
        TokenBucket { rate, credit: 0, depth: depth_tokens as u128 * NS, last_ns: now_ns, batch: (rate / 10_000).clamp(1, BURST as u64) }
    }

    fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns) as u128;
        self.last_ns = self.last_ns.max(now_ns);
        self.credit = (self.credit + dt * self.rate as u128).min(self.depth);
    }

    /// Takes up to `max` (at most [`BURST`]) packets' worth of tokens at
    /// `now_ns`; returns how many. Returns 0 while fewer than the batch
    /// size (about 100 µs of tokens) are there, so a slow rate sends small
    /// batches rather than waking per packet.
    pub fn take(&mut self, now_ns: u64, max: usize) -> usize {
        let max = max.min(BURST);
        if self.rate == 0 {
            return max;
        }
        self.refill(now_ns);
        let have = (self.credit / NS) as u64;
        if have < self.batch.min(max as u64) {
            return 0;
        }
        let n = have.min(max as u64);
        self.credit -= n as u128 * NS;
        n as usize
    }

    /// Gives back `n` tokens taken but not used (the tx ring was full).
    pub fn refund(&mut self, n: usize) {
        if self.rate != 0 {
            self.credit = (self.credit + n as u128 * NS).min(self.depth);
        }
    }

    /// Nanoseconds from `now_ns` until [`TokenBucket::take`] would release a
    /// batch (0 if it would now, or for an unlimited rate).
    pub fn wait_ns(&self, now_ns: u64) -> u64 {
        if self.rate == 0 {
            return 0;
        }
        let dt = now_ns.saturating_sub(self.last_ns) as u128;
        let credit = (self.credit + dt * self.rate as u128).min(self.depth);
        let want = self.batch as u128 * NS;
        if credit >= want {
            return 0;
        }
        ((want - credit).div_ceil(self.rate as u128)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_the_rate_over_time_in_bursts_of_at_most_32() {
        // 1 Mpps for 10 ms of simulated time polled every 7 µs: 10,000 packets
        // (within one batch), never more than 32 at once.
        let mut b = TokenBucket::new(1_000_000, 0);
        let (mut t, mut sent) = (0u64, 0u64);
        while t <= 10_000_000 {
            let n = b.take(t, 64);
            assert!(n <= BURST);
            sent += n as u64;
            t += 7_000;
        }
        assert!((9_968..=10_000).contains(&sent), "sent {sent}");
    }

    #[test]
    fn slow_rates_batch_and_report_the_wait() {
        // 20 kpps: batches of 2 (100 µs), wait 100 µs from empty.
        let mut b = TokenBucket::new(20_000, 0);
        assert_eq!(b.take(0, 32), 0);
        assert_eq!(b.wait_ns(0), 100_000);
        assert_eq!(b.take(50_000, 32), 0, "one token is less than a batch");
        assert_eq!(b.wait_ns(50_000), 50_000);
        assert_eq!(b.take(100_000, 32), 2);
        assert_eq!(b.wait_ns(100_000), 100_000);
    }

    #[test]
    fn a_late_wakeup_is_caught_up_up_to_the_depth_and_refunds_return() {
        // 100 kpps: depth 100 tokens (1 ms), batches of 10.
        let mut b = TokenBucket::new(100_000, 0);
        let t = 1_000_000_000; // long after: the bucket is full, not 100,000 tokens
        assert_eq!([b.take(t, 64), b.take(t, 32), b.take(t, 32), b.take(t, 32)], [32, 32, 32, 0], "4 left: less than a batch");
        b.refund(5);
        assert_eq!(b.take(t, 32), 0, "9 tokens are less than a batch");
        b.refund(1);
        assert_eq!(b.take(t, 32), 10);
        let mut u = TokenBucket::new(0, 0);
        assert_eq!(u.take(0, 100), 32);
        assert_eq!(u.wait_ns(0), 0);
    }
}
