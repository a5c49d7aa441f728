//! Pacing: a token bucket on the monotonic clock. Packet *k* (from 0) of
//! a run from `start` to `end` is due at `start + k / rate`, so a run that
//! keeps up sends exactly ⌈rate × (end − start)⌉ packets, the last one
//! before `end` (the first at `start`). Tokens (packets) accrue at `rate`
//! per second up to a depth of `max(BURST, rate × 1 ms)` (capped at 4096),
//! so a late wake-up is caught up in bursts of at most [`super::BURST`]
//! rather than lost, up to that depth: a stall longer than it (1 ms of
//! slots, or 32 packets) loses the slots beyond it, and the run sends
//! fewer packets than its rate made due (`gen` and `report` warn, and
//! testbed/bench.sh fails such a trial); the sender takes what is there, up to one burst, and
//! sleeps only when the next batch is more than [`SLEEP_MIN_NS`] away
//! (never per packet at high rates). The last, partial batch before `end`
//! is released when it is all due; tokens stop accruing at `end`.

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
    start_ns: u64,
    end_ns: u64,
    /// Tokens worth waiting for before sending (about 100 µs of them, 1..=BURST).
    batch: u64,
    /// Packets due in `[start_ns, end_ns)`.
    total: u64,
    /// Tokens taken and not refunded.
    released: u64,
}

impl TokenBucket {
    /// A bucket releasing `rate` packets per second from `start_ns` until
    /// `end_ns`: packet *k* is due at `start_ns + k / rate` for the
    /// ⌈rate × (end − start)⌉ packets due before `end_ns` (the first at
    /// once). `rate` 0 releases a full burst at every call before `end_ns`.
    pub fn new(rate: u64, start_ns: u64, end_ns: u64) -> TokenBucket {
        let depth_tokens = (rate / 1000).clamp(BURST as u64, 4096);
        let end_ns = end_ns.max(start_ns);
        let total = ((end_ns - start_ns) as u128 * rate as u128).div_ceil(NS);
        TokenBucket {
            rate,
            credit: if rate == 0 || total == 0 { 0 } else { NS },
            depth: depth_tokens as u128 * NS,
            last_ns: start_ns,
            start_ns,
            end_ns,
            batch: (rate / 10_000).clamp(1, BURST as u64),
            total: u64::try_from(total).unwrap_or(u64::MAX),
            released: 0,
        }
    }

    /// Packets due before `t_ns` (⌈rate × (t − start)⌉, at most the run's):
    /// the schedule index of the first packet due at or after `t_ns`.
    /// `None` for an unlimited rate (no schedule).
    pub fn due_before(&self, t_ns: u64) -> Option<u64> {
        if self.rate == 0 {
            return None;
        }
        let dt = t_ns.clamp(self.start_ns, self.end_ns) - self.start_ns;
        Some(u64::try_from((dt as u128 * self.rate as u128).div_ceil(NS)).unwrap_or(u64::MAX).min(self.total))
    }

    /// True when every packet of the run was released (paced), or at and
    /// after `end` (unlimited rate).
    pub fn done(&self, now_ns: u64) -> bool {
        if self.rate == 0 {
            now_ns >= self.end_ns
        } else {
            self.released >= self.total
        }
    }

    fn refill(&mut self, now_ns: u64) {
        let now_ns = now_ns.min(self.end_ns);
        let dt = now_ns.saturating_sub(self.last_ns) as u128;
        self.last_ns = self.last_ns.max(now_ns);
        self.credit = (self.credit + dt * self.rate as u128).min(self.depth);
    }

    /// Tokens worth waiting for: a batch, or what is left of the run.
    fn wanted(&self, max: u64) -> u64 {
        self.batch.min(max).min(self.total - self.released).max(1)
    }

    /// Takes up to `max` (at most [`BURST`]) packets' worth of tokens at
    /// `now_ns`; returns how many. Returns 0 while fewer than the batch
    /// size (about 100 µs of tokens, or the rest of the run if less) are
    /// there, so a slow rate sends small batches rather than waking per
    /// packet; at and after `end` what is still due is released whatever
    /// its size, then 0.
    pub fn take(&mut self, now_ns: u64, max: usize) -> usize {
        let max = max.min(BURST);
        if self.rate == 0 {
            return if now_ns < self.end_ns { max } else { 0 };
        }
        self.refill(now_ns);
        let left = self.total - self.released;
        let have = ((self.credit / NS) as u64).min(left);
        let need = if now_ns >= self.end_ns { 1 } else { self.wanted(max as u64) };
        if have == 0 || have < need {
            return 0;
        }
        let n = have.min(max as u64);
        self.credit -= n as u128 * NS;
        self.released += n;
        n as usize
    }

    /// Gives back `n` tokens taken but not used (the tx ring was full).
    pub fn refund(&mut self, n: usize) {
        if self.rate != 0 {
            let n = (n as u64).min(self.released);
            self.released -= n;
            self.credit = (self.credit + n as u128 * NS).min(self.depth);
        }
    }

    /// Nanoseconds from `now_ns` until [`TokenBucket::take`] would release a
    /// batch (0 if it would now, or for an unlimited rate); at most the time
    /// left to `end` (when the rest is released whatever its size).
    pub fn wait_ns(&self, now_ns: u64) -> u64 {
        if self.rate == 0 || now_ns >= self.end_ns {
            return 0;
        }
        if self.released >= self.total {
            return self.end_ns - now_ns;
        }
        let dt = now_ns.saturating_sub(self.last_ns) as u128;
        let credit = (self.credit + dt * self.rate as u128).min(self.depth);
        let want = self.wanted(BURST as u64) as u128 * NS;
        if credit >= want {
            return 0;
        }
        (((want - credit).div_ceil(self.rate as u128)) as u64).min(self.end_ns - now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `b` every `step` ns from `from` until it is done or `until`,
    /// as the generator does; returns (packets released, largest release).
    fn run(b: &mut TokenBucket, from: u64, step: u64, until: u64) -> (u64, usize) {
        let (mut t, mut sent, mut most) = (from, 0u64, 0usize);
        while t <= until && !b.done(t) {
            let n = b.take(t, 64);
            most = most.max(n);
            sent += n as u64;
            t += step;
        }
        (sent, most)
    }

    #[test]
    fn a_run_that_keeps_up_sends_exactly_rate_times_duration() {
        // 1000 pps for 1 s (batches of 1), polled every 7 µs: 1000, not 999.
        let mut b = TokenBucket::new(1000, 0, 1_000_000_000);
        assert_eq!(run(&mut b, 0, 7_000, 2_000_000_000), (1000, 1));
        // 1 Mpps for 10 ms (batches of 32): the last partial batch too.
        let mut b = TokenBucket::new(1_000_000, 0, 10_000_000);
        let (sent, most) = run(&mut b, 0, 7_000, 20_000_000);
        assert_eq!((sent, most <= BURST), (10_000, true));
        // A rate × duration that is not whole: ⌈⌉ of it (3 pps for 1.5 s:
        // due at 0, 1/3, 2/3, 1, 4/3 s).
        let mut b = TokenBucket::new(3, 0, 1_500_000_000);
        assert_eq!(run(&mut b, 0, 1_000_000, 3_000_000_000).0, 5);
        // Woken late (every 20 ms at 1000 pps: 20 tokens, within the
        // depth of 32), still exact; the first packet at once.
        let mut b = TokenBucket::new(1000, 5, 1_000_000_005);
        assert_eq!(b.take(5, 32), 1);
        assert_eq!(run(&mut b, 5, 20_000_000, 2_000_000_000).0 + 1, 1000);
        // Polls that stop short of the end leave the tail unsent (the loop's
        // own deadline, not the bucket, ends such a run).
        let mut b = TokenBucket::new(1000, 0, 1_000_000_000);
        assert_eq!(run(&mut b, 0, 7_000, 500_000_000).0, 500);
        assert!(!b.done(500_000_000));
    }

    #[test]
    fn the_warm_up_and_the_measured_part_split_the_schedule_exactly() {
        // 1000 pps, 1 s warm-up then 1 s measured: packets 0..1000 are the
        // warm-up's, 1000..2000 the measured ones: 1000, as asked.
        let b = TokenBucket::new(1000, 0, 2_000_000_000);
        assert_eq!((b.due_before(1_000_000_000), b.due_before(2_000_000_000), b.total), (Some(1000), Some(2000), 2000));
        assert_eq!((b.due_before(0), b.due_before(1), b.due_before(u64::MAX)), (Some(0), Some(1), Some(2000)));
        // 3 pps, 0.5 s warm-up, 1 s measured: 2 warm-up (0, 1/3 s), 3 measured.
        let b = TokenBucket::new(3, 0, 1_500_000_000);
        assert_eq!((b.due_before(500_000_000), b.total), (Some(2), 5));
        assert_eq!(TokenBucket::new(0, 0, 1).due_before(1), None);
    }

    #[test]
    fn slow_rates_batch_and_report_the_wait() {
        // 20 kpps: batches of 2 (100 µs); the first packet is due at once,
        // the second 50 µs later.
        let mut b = TokenBucket::new(20_000, 0, 1_000_000_000);
        assert_eq!(b.take(0, 32), 0, "one token is less than a batch");
        assert_eq!(b.wait_ns(0), 50_000);
        assert_eq!(b.take(50_000, 32), 2);
        assert_eq!(b.wait_ns(50_000), 100_000);
        assert_eq!(b.take(100_000, 32), 0);
        // The last, partial batch goes when it is all due (3 packets before
        // 120 µs: at 0, 50 and 100 µs); then the wait is for the end.
        let mut b = TokenBucket::new(20_000, 0, 120_000);
        assert_eq!(b.take(50_000, 32), 2);
        assert_eq!(b.wait_ns(60_000), 40_000);
        assert_eq!((b.take(100_000, 32), b.done(100_000)), (1, true));
        assert_eq!(b.wait_ns(100_000), 20_000);
        // Woken too late (past the depth): at the end what is there goes,
        // whatever its size; tokens lost to the depth never come.
        let mut b = TokenBucket::new(100_000, 0, 2_000_000);
        let t = 1_950_000;
        assert_eq!([b.take(t, 32), b.take(t, 32), b.take(t, 32), b.take(t, 32)], [32, 32, 32, 0], "the depth, 100; 4 left");
        assert_eq!(b.take(1_999_999, 32), 0, "8 tokens: less than a batch");
        assert_eq!(b.wait_ns(1_999_999), 1, "at most the time to the end");
        assert_eq!((b.take(2_000_000, 32), b.done(2_000_000)), (9, false));
        assert_eq!(b.take(3_000_000, 32), 0, "no token accrues after the end");
    }

    #[test]
    fn a_late_wakeup_is_caught_up_up_to_the_depth_and_refunds_return() {
        // 100 kpps: depth 100 tokens (1 ms), batches of 10.
        let mut b = TokenBucket::new(100_000, 0, 10_000_000_000);
        let t = 1_000_000_000; // long after: the bucket is full, not 100,000 tokens
        assert_eq!([b.take(t, 64), b.take(t, 32), b.take(t, 32), b.take(t, 32)], [32, 32, 32, 0], "4 left: less than a batch");
        b.refund(5);
        assert_eq!(b.take(t, 32), 0, "9 tokens are less than a batch");
        b.refund(1);
        assert_eq!(b.take(t, 32), 10);
        // Unlimited: a burst every time until the end, then nothing.
        let mut u = TokenBucket::new(0, 0, 100);
        assert_eq!((u.take(0, 100), u.wait_ns(0), u.done(99)), (32, 0, false));
        assert_eq!((u.take(100, 32), u.done(100)), (0, true));
    }
}
