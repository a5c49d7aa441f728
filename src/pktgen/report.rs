//! One line out of a generator's and a sink's JSON reports (`report`).
//!
//! Rates are the sink's: measured packets received over the sink's
//! measured seconds (first to last measured packet), bytes being Ethernet
//! frame bytes without FCS as received, × 8. Loss is the generator's
//! measured tx count minus the distinct measured packets the sink received
//! (duplicates do not hide a loss), in percent of the former.

use super::gen::GenReport;
use super::sink::{show_pct, show_us, SinkReport};
use serde::{Deserialize, Serialize};

/// The combined figures (`report --json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Combined {
    /// Generator: measured packets sent.
    pub tx_packets: u64,
    /// Generator: achieved rate, packets per second.
    pub tx_pps: f64,
    /// Sink: measured packets received (distinct).
    pub rx_packets: u64,
    /// Sink: received rate, million packets per second.
    pub mpps: f64,
    /// Sink: received Gbit/s.
    pub gbps: f64,
    /// Lost packets (tx − distinct rx, at least 0).
    pub lost: u64,
    /// `lost / tx_packets` in percent; `None` (JSON `null`, text "n/a")
    /// when the generator sent no measured packet.
    pub loss_pct: Option<f64>,
    /// Reordered packets (sink).
    pub reordered: u64,
    /// Duplicates (sink).
    pub duplicates: u64,
    /// Latency p50, µs; `None` without samples, or above the histogram's
    /// cap (the sink's `latency_us`).
    pub p50_us: Option<f64>,
    /// Latency p99, µs (as `p50_us`).
    pub p99_us: Option<f64>,
    /// Latency max, µs; `None` without samples.
    pub max_us: Option<f64>,
    /// Latency samples (0: the figures above are "n/a").
    #[serde(default)]
    pub latency_samples: u64,
}

/// Combines the two reports.
pub fn combine(gen: &GenReport, sink: &SinkReport) -> Combined {
    // Measured packets of flows beyond the sink's --max-flows arrived too
    // (untracked, so without duplicate detection): received, not lost.
    let distinct = sink.packets.saturating_sub(sink.duplicates) + sink.flow_out_of_range_measured;
    let lost = gen.measured_tx_packets.saturating_sub(distinct);
    // A sink that saw a single packet has no interval: fall back on the generator's.
    let secs = if sink.measured_s > 0.0 { sink.measured_s } else { gen.duration_s };
    let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
    Combined {
        tx_packets: gen.measured_tx_packets,
        tx_pps: gen.rate_pps,
        rx_packets: distinct,
        mpps: per_s(sink.packets as f64) / 1e6,
        gbps: per_s(sink.bytes as f64 * 8.0) / 1e9,
        lost,
        loss_pct: (gen.measured_tx_packets > 0).then(|| lost as f64 * 100.0 / gen.measured_tx_packets as f64),
        reordered: sink.reordered,
        duplicates: sink.duplicates,
        p50_us: sink.latency_us.p50,
        p99_us: sink.latency_us.p99,
        max_us: sink.latency_us.max,
        latency_samples: sink.latency_us.samples,
    }
}

/// Header line of [`table_row`].
pub fn table_header() -> String {
    format!("{:>12} {:>12} {:>9} {:>9} {:>10} {:>8} {:>10} {:>10} {:>10}", "tx_pkts", "rx_pkts", "Mpps", "Gbit/s", "lost", "loss%", "p50_us", "p99_us", "max_us")
}

/// One table line of `c` ("n/a" for a missing loss or latency figure,
/// "> CAP" for a percentile above the histogram's cap).
pub fn table_row(c: &Combined) -> String {
    let us = |v| show_us(v, c.latency_samples);
    format!(
        "{:>12} {:>12} {:>9.4} {:>9.4} {:>10} {:>8} {:>10} {:>10} {:>10}",
        c.tx_packets, c.rx_packets, c.mpps, c.gbps, c.lost, show_pct(c.loss_pct), us(c.p50_us), us(c.p99_us), us(c.max_us)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combines_rates_loss_and_latency() {
        let gen = GenReport { measured_tx_packets: 1000, rate_pps: 500.0, duration_s: 2.0, ..Default::default() };
        let mut sink = SinkReport { packets: 995, duplicates: 5, bytes: 995 * 100, measured_s: 1.99, ..Default::default() };
        sink.latency_us.p50 = Some(10.0);
        sink.latency_us.p99 = Some(20.0);
        sink.latency_us.max = Some(30.0);
        sink.latency_us.samples = 990;
        let c = combine(&gen, &sink);
        assert_eq!((c.tx_packets, c.rx_packets, c.lost), (1000, 990, 10));
        assert!((c.loss_pct.unwrap() - 1.0).abs() < 1e-9);
        assert!((c.mpps - 995.0 / 1.99 / 1e6).abs() < 1e-12);
        assert!((c.gbps - 995.0 * 800.0 / 1.99 / 1e9).abs() < 1e-12);
        assert_eq!((c.p50_us, c.p99_us, c.max_us), (Some(10.0), Some(20.0), Some(30.0)));
        assert!(table_row(&c).contains("990") && table_row(&c).contains("20.0"));
        // Measured packets of untracked flows arrived: not lost.
        sink.flow_out_of_range_measured = 7;
        let c = combine(&gen, &sink);
        assert_eq!((c.rx_packets, c.lost), (997, 3));
        let none = combine(&GenReport::default(), &SinkReport::default());
        assert_eq!((none.mpps, none.loss_pct, none.p50_us), (0.0, None, None));
        assert_eq!(table_row(&none).matches("n/a").count(), 4, "loss and latency: {}", table_row(&none));
        // Nothing received of 1000 sent: 100 % lost, latency n/a (not 0).
        let c = combine(&gen, &SinkReport::default());
        assert_eq!((c.lost, c.loss_pct, c.max_us), (1000, Some(100.0), None));
        let row = table_row(&c);
        assert!(row.contains("100.0000") && row.matches("n/a").count() == 3, "{row}");
        // A p99 above the histogram's cap is shown as such, not as a number.
        sink.latency_us.p99 = None;
        assert!(table_row(&combine(&gen, &sink)).contains(&format!(">{:.0}", super::super::sink::CAP_US)));
    }
}
