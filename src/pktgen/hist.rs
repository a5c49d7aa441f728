//! Latency histogram without allocation per sample: log-linear buckets of
//! nanoseconds. Values below 64 ns have a bucket each; above, every power
//! of two is split into 32 equal buckets, so a bucket spans at most 1/32
//! (3.1%) of its values. Percentiles are reported as the upper bound of the
//! bucket holding the rank (never above the largest value seen): at most
//! 3.1% above the exact value, never below it. Values from [`CAP_NS`]
//! (2^41 ns, about 37 minutes) up have no bucket: they are counted in
//! [`Histogram::overflow`] (and in the count, mean and maximum, which stay
//! exact), and a percentile whose rank falls among them is not given a
//! value ([`Histogram::percentile`] returns `None`: it is "above the cap").

/// Sub-buckets per power of two (2^SUB_BITS).
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Values below this are exact.
const LINEAR: u64 = 2 * SUB as u64;
/// Highest power of two with buckets of its own.
const TOP_EXP: u32 = 40;
/// Number of buckets.
pub const BUCKETS: usize = LINEAR as usize + (TOP_EXP as usize - SUB_BITS as usize) * SUB;
/// Smallest value without a bucket (one past the last bucket's upper
/// bound): 2^41 ns.
pub const CAP_NS: u64 = 1 << (TOP_EXP + 1);

/// A histogram of u64 values (ns), allocated once.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    /// Values at or above [`CAP_NS`] (in `count` too, not in `counts`).
    overflow: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram").field("count", &self.count).field("overflow", &self.overflow).field("min", &self.min).field("max", &self.max).finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// Bucket of value `v` (below [`CAP_NS`]; larger values get the last one).
#[inline]
fn index(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS + 1
    if e > TOP_EXP {
        return BUCKETS - 1;
    }
    let sub = ((v >> (e - SUB_BITS)) as usize) & (SUB - 1);
    LINEAR as usize + (e - SUB_BITS - 1) as usize * SUB + sub
}

/// Largest value of bucket `i`.
fn upper(i: usize) -> u64 {
    if i < LINEAR as usize {
        return i as u64;
    }
    let j = i - LINEAR as usize;
    let e = (j / SUB) as u32 + SUB_BITS + 1;
    let sub = (j % SUB) as u64;
    let width = 1u64 << (e - SUB_BITS);
    (1u64 << e) + (sub + 1) * width - 1
}

impl Histogram {
    /// An empty histogram ([`BUCKETS`] × 8 bytes). Allocates: start-up only.
    pub fn new() -> Histogram {
        Histogram { counts: vec![0u64; BUCKETS].into_boxed_slice(), count: 0, overflow: 0, sum: 0, min: u64::MAX, max: 0 }
    }

    /// Adds one value (at or above [`CAP_NS`]: counted in
    /// [`Histogram::overflow`], no bucket).
    #[inline]
    pub fn record(&mut self, v: u64) {
        if v >= CAP_NS {
            self.overflow += 1;
        } else {
            self.counts[index(v)] += 1;
        }
        self.count += 1;
        self.sum += v as u128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.overflow += other.overflow;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Values recorded at or above [`CAP_NS`] (no bucket).
    pub fn overflow(&self) -> u64 {
        self.overflow
    }

    /// Largest value (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Smallest value (0 when empty).
    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }

    /// Mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The `p`-th percentile (0 < p <= 100): the upper bound of the bucket
    /// holding the value of rank ceil(p/100 × count), at most the maximum.
    /// `None` when empty, or when that rank is among the values at or above
    /// [`CAP_NS`] (the percentile is then above the cap, never given as a
    /// value below the true one).
    pub fn percentile(&self, p: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().clamp(1.0, self.count as f64) as u64;
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(upper(i).min(self.max));
            }
        }
        // The rank is past every bucket: among the overflow values.
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact percentile of sorted values, same rank rule.
    fn exact(sorted: &[u64], p: f64) -> u64 {
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().clamp(1.0, sorted.len() as f64) as usize;
        sorted[rank - 1]
    }

    #[test]
    fn buckets_are_contiguous_and_cover_their_values() {
        let mut prev = None;
        for i in 0..BUCKETS - 1 {
            let u = upper(i);
            if let Some(p) = prev {
                assert_eq!(u64::checked_add(p, 1).map(index), Some(i), "bucket {i} starts right after {p}");
            }
            assert_eq!(index(u), i);
            prev = Some(u);
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_are_within_the_resolution_of_exact_ones() {
        // A deterministic spread from 1 ns to ~10 ms, skewed like latencies.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut vals: Vec<u64> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mag = x % 24;
                (x >> 20) % (1u64 << mag) + 1
            })
            .collect();
        let mut h = Histogram::new();
        for &v in &vals {
            h.record(v);
        }
        vals.sort_unstable();
        for p in [1.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            let (got, want) = (h.percentile(p).unwrap(), exact(&vals, p));
            assert!(got >= want, "p{p}: {got} < exact {want}");
            assert!(got as f64 <= want as f64 * (1.0 + 1.0 / 32.0) + 1.0, "p{p}: {got} vs exact {want}");
        }
        assert_eq!(h.percentile(100.0), vals.last().copied());
        assert_eq!((h.min(), h.max(), h.count()), (vals[0], *vals.last().unwrap(), 20_000));
    }

    #[test]
    fn small_cases() {
        let mut h = Histogram::new();
        assert_eq!((h.percentile(50.0), h.max(), h.min(), h.mean()), (None, 0, 0, 0.0));
        h.record(10);
        assert_eq!((h.percentile(50.0), h.percentile(99.0)), (Some(10), Some(10)));
        for _ in 0..98 {
            h.record(1000);
        }
        h.record(5_000_000);
        assert_eq!(h.percentile(1.0), Some(10));
        assert!((1000..=1031).contains(&h.percentile(50.0).unwrap()));
        assert!((1000..=1031).contains(&h.percentile(99.0).unwrap()), "99th of 100 is the 99th value");
        assert_eq!(h.percentile(100.0), Some(5_000_000));
        let mut g = Histogram::new();
        g.record(1);
        g.merge(&h);
        assert_eq!((g.count(), g.min(), g.max()), (101, 1, 5_000_000));
    }

    #[test]
    fn values_beyond_the_cap_are_counted_apart_and_never_under_reported() {
        // The old last bucket ended at 2^41 - 1: a value of 2^50 came out as
        // a p99 of 2^41 - 1, far below the truth.
        assert_eq!(CAP_NS, upper(BUCKETS - 1) + 1);
        let mut h = Histogram::new();
        for _ in 0..98 {
            h.record(1000);
        }
        h.record(CAP_NS);
        h.record(1 << 50);
        assert_eq!((h.count(), h.overflow(), h.max()), (100, 2, 1 << 50));
        assert!((1000..=1031).contains(&h.percentile(98.0).unwrap()));
        assert_eq!(h.percentile(99.0), None, "the 99th value is above the cap: no value");
        assert_eq!(h.percentile(100.0), None);
        assert!((h.mean() - (98_000.0 + CAP_NS as f64 + (1u64 << 50) as f64) / 100.0).abs() < 1.0);
        let mut g = Histogram::new();
        g.merge(&h);
        assert_eq!((g.overflow(), g.percentile(99.0)), (2, None));
        // Just below the cap still has a bucket.
        let mut b = Histogram::new();
        b.record(CAP_NS - 1);
        assert_eq!((b.overflow(), b.percentile(50.0)), (0, Some(CAP_NS - 1)));
    }
}
