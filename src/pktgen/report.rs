//! One line out of a generator's and a sink's JSON reports (`report`).
//!
//! Rates are the sink's, over every measured packet it received (tracked
//! flows and those beyond its `--max-flows`, which `rx_packets` counts
//! too): the packets after the first over the sink's measured seconds
//! (first to last measured packet), and Gbit/s that rate times the mean
//! Ethernet frame size without FCS as received
//! ([`super::sink::arrival_rates`]); none (`n/a`) from fewer than two
//! packets. Loss is the generator's
//! measured tx count minus the distinct measured packets the sink received
//! (duplicates do not hide a loss), in percent of the former.
//!
//! The two reports are checked against each other ([`warnings`]): figures
//! combined from two runs, or from a sink that missed part of the run, are
//! printed with warnings (stderr, and `warnings` in the JSON), not silently.

use super::gen::GenReport;
use super::sink::{arrival_rates, show_pct, show_rate, show_us, SinkReport};
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
    /// Sink: received rate, million packets per second, over every
    /// measured packet received (duplicates and flows beyond the sink's
    /// `--max-flows` included); `None` (JSON `null`, text "n/a") when the
    /// sink received fewer than two, or all at once
    /// ([`super::sink::arrival_rates`]).
    pub mpps: Option<f64>,
    /// Sink: received Gbit/s of those packets (Ethernet frames without
    /// FCS); `None` with `mpps`.
    pub gbps: Option<f64>,
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
    /// Why the two reports may not belong together, or the sink may have
    /// missed part of the run ([`warnings`]); empty when they agree.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// The kinds of JSON report secgw-pktgen writes, told apart by fields
/// only that kind has (so a file handed to the wrong option is named for
/// what it is rather than by a missing field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportKind {
    /// `gen --json` ([`GenReport`]: `measured_tx_packets`, `target_rate_pps`).
    Gen,
    /// `sink --json` ([`SinkReport`]: `rx_frames`, `esp_failures`).
    Sink,
    /// `report --json` ([`Combined`]: `mpps`, `rx_packets`).
    Combined,
    /// `forward --json` (`runts`).
    Forward,
}

impl ReportKind {
    /// The kind of the JSON value `v`; `None` when it is none of them.
    pub fn of(v: &serde_json::Value) -> Option<ReportKind> {
        let has = |k: &str| v.get(k).is_some();
        if has("measured_tx_packets") && has("target_rate_pps") {
            Some(ReportKind::Gen)
        } else if has("rx_frames") && has("esp_failures") {
            Some(ReportKind::Sink)
        } else if has("mpps") && has("rx_packets") {
            Some(ReportKind::Combined)
        } else if has("runts") {
            Some(ReportKind::Forward)
        } else {
            None
        }
    }

    /// What it is, in words ("a sink's report (sink --json)").
    pub fn describe(self) -> &'static str {
        match self {
            ReportKind::Gen => "a generator's report (gen --json)",
            ReportKind::Sink => "a sink's report (sink --json)",
            ReportKind::Combined => "a combined report (report --json)",
            ReportKind::Forward => "a forwarder's report (forward --json)",
        }
    }
}

/// Reads a report of kind `want` (a [`GenReport`] or [`SinkReport`]) from
/// `text`, the contents of the file `path` given to option `opt`. Errors
/// (naming the option and the file): not JSON; another kind of report
/// ([`ReportKind`]: says which, e.g. `--gen` and `--sink` swapped); a
/// missing or malformed field (serde's message).
pub fn parse<T: serde::de::DeserializeOwned>(opt: &str, path: &std::path::Path, text: &str, want: ReportKind) -> Result<T, String> {
    let at = format!("{opt} {}", path.display());
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("{at}: not JSON: {e}"))?;
    match ReportKind::of(&v) {
        Some(k) if k != want => {
            let hint = match (want, k) {
                (ReportKind::Gen, ReportKind::Sink) | (ReportKind::Sink, ReportKind::Gen) => ": --gen and --sink swapped?",
                _ => "",
            };
            Err(format!("{at} is {}, not {}{hint}", k.describe(), want.describe()))
        }
        _ => serde_json::from_value(v).map_err(|e| format!("{at}: not {}: {e}", want.describe())),
    }
}

/// Combines the two reports.
pub fn combine(gen: &GenReport, sink: &SinkReport) -> Combined {
    // Measured packets of flows beyond the sink's --max-flows arrived too
    // (untracked, so without duplicate detection): received, not lost.
    let distinct = sink.packets.saturating_sub(sink.duplicates) + sink.flow_out_of_range_measured;
    let lost = gen.measured_tx_packets.saturating_sub(distinct);
    // Over the same packets and bytes the sink's interval spans: its
    // tracked flows' and the untracked ones'.
    let rates = arrival_rates(sink.packets + sink.flow_out_of_range_measured, sink.bytes + sink.flow_out_of_range_measured_bytes, sink.measured_s);
    Combined {
        tx_packets: gen.measured_tx_packets,
        tx_pps: gen.rate_pps,
        rx_packets: distinct,
        mpps: rates.map(|r| r.0 / 1e6),
        gbps: rates.map(|r| r.1),
        lost,
        loss_pct: (gen.measured_tx_packets > 0).then(|| lost as f64 * 100.0 / gen.measured_tx_packets as f64),
        reordered: sink.reordered,
        duplicates: sink.duplicates,
        p50_us: sink.latency_us.p50,
        p99_us: sink.latency_us.p99,
        max_us: sink.latency_us.max,
        latency_samples: sink.latency_us.samples,
        warnings: warnings(gen, sink),
    }
}

/// What makes a generator's and a sink's reports look unrelated, or the
/// sink's view of the run partial: more measured packets received than
/// sent; flows received that the generator did not send; ESP on one side
/// that the other could not have read; decrypted packets the sink's SA
/// policies do not admit; runs that do not overlap in time,
/// or a sink that started after the measured part began or stopped before
/// the generator ended (wall clocks; skipped for reports without them); a
/// paced generator that sent under 99 % of the measured packets its
/// `--rate` made due (it fell behind: the load offered was less than
/// asked, and the missed slots are not sent late beyond the pacer's 1-ms
/// depth, [`super::pace`]).
/// One sentence each; empty when nothing looks wrong.
pub fn warnings(gen: &GenReport, sink: &SinkReport) -> Vec<String> {
    let mut w = Vec::new();
    let due = gen.target_rate_pps as f64 * gen.duration_s;
    if gen.target_rate_pps > 0 && (gen.measured_tx_packets as f64) < 0.99 * due {
        w.push(format!(
            "the generator fell behind its --rate {}: it sent {} of the {due:.0} measured packets due ({:.1} % short): the load offered was lower than asked",
            gen.target_rate_pps,
            gen.measured_tx_packets,
            100.0 * (1.0 - gen.measured_tx_packets as f64 / due)
        ));
    }
    let distinct = sink.packets.saturating_sub(sink.duplicates) + sink.flow_out_of_range_measured;
    if distinct > gen.measured_tx_packets {
        w.push(format!(
            "the sink counted {distinct} distinct measured packets, more than the {} the generator sent: the reports are of different runs, or another generator was sending",
            gen.measured_tx_packets
        ));
    }
    // A set of the generator's flows, not a search of them for each of
    // the sink's (65536 × 65536 at the --flows and --max-flows limits).
    let sent: std::collections::HashSet<u32> = gen.flows.iter().map(|g| g.flow).collect();
    let strange: Vec<u32> = sink.flows.iter().filter(|f| f.packets > 0 && !sent.contains(&f.flow)).map(|f| f.flow).collect();
    if !strange.is_empty() {
        w.push(format!("the sink received flows {strange:?}, which the generator ({} flows) did not send: the reports are of different runs", gen.flows.len()));
    }
    if gen.esp && !sink.esp && sink.packets == 0 && sink.other_frames > 0 {
        w.push("the generator sent ESP and the sink (no --esp-config) read none of what it received: was the decrypting gateway left out?".into());
    }
    if !gen.esp && sink.esp && sink.esp_decrypted == 0 && sink.packets > 0 {
        w.push("the sink was to decrypt (--esp-config) but received only plaintext: did the traffic bypass the encrypting gateway?".into());
    }
    if sink.esp && sink.esp_decrypted == 0 && sink.esp_failures.get("no_sa").is_some_and(|&n| n > 0) {
        w.push("none of the ESP the sink received is for an inbound SA of its --esp-config (no_sa): the config of another peer?".into());
    }
    if let Some(&n) = sink.esp_failures.get("inner_policy_mismatch").filter(|&&n| n > 0) {
        w.push(format!(
            "the sink decrypted {n} packets whose inner flow the SA's inbound policies in its --esp-config do not admit (inner_policy_mismatch, RFC 4301 §5.2): counted as lost, as the peer gateway would drop them; the generator's addresses or ports are outside that policy"
        ));
    }
    // Any other reason the sink could not open ESP (a wrong key, a mode
    // or algorithm that differs from the sender's, replays), named.
    let other: Vec<String> = sink.esp_failures.iter().filter(|(r, &n)| n > 0 && *r != "no_sa" && *r != "inner_policy_mismatch").map(|(r, n)| format!("{r} {n}")).collect();
    if !other.is_empty() {
        w.push(format!("the sink failed to open ESP packets ({}): counted as lost; does its --esp-config hold the sender's keys, algorithm and mode?", other.join(", ")));
    }
    if gen.started_unix_s > 0.0 && sink.started_unix_s > 0.0 {
        let measured_from = gen.started_unix_s + gen.warmup_s;
        if sink.started_unix_s > gen.ended_unix_s {
            w.push(format!("the sink started {:.1} s after the generator ended: the reports are of different runs", sink.started_unix_s - gen.ended_unix_s));
        } else if sink.ended_unix_s < gen.started_unix_s {
            w.push(format!("the sink stopped {:.1} s before the generator started: the reports are of different runs", gen.started_unix_s - sink.ended_unix_s));
        } else {
            if sink.started_unix_s > measured_from {
                w.push(format!("the sink started {:.3} s after the generator's measured part began: packets sent before it listened count as lost", sink.started_unix_s - measured_from));
            }
            if sink.ended_unix_s < gen.ended_unix_s {
                w.push(format!("the sink stopped {:.3} s before the generator ended: packets sent after count as lost", gen.ended_unix_s - sink.ended_unix_s));
            }
        }
    }
    w
}

/// Header line of [`table_row`].
pub fn table_header() -> String {
    format!("{:>12} {:>12} {:>9} {:>9} {:>10} {:>8} {:>10} {:>10} {:>10}", "tx_pkts", "rx_pkts", "Mpps", "Gbit/s", "lost", "loss%", "p50_us", "p99_us", "max_us")
}

/// One table line of `c` ("n/a" for a missing rate, loss or latency
/// figure, "> CAP" for a percentile above the histogram's cap).
pub fn table_row(c: &Combined) -> String {
    let us = |v| show_us(v, c.latency_samples);
    format!(
        "{:>12} {:>12} {:>9} {:>9} {:>10} {:>8} {:>10} {:>10} {:>10}",
        c.tx_packets,
        c.rx_packets,
        show_rate(c.mpps, 4),
        show_rate(c.gbps, 4),
        c.lost,
        show_pct(c.loss_pct),
        us(c.p50_us),
        us(c.p99_us),
        us(c.max_us)
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
        // The 994 packets after the first arrived within the 1.99 s.
        assert!((c.mpps.unwrap() - 994.0 / 1.99 / 1e6).abs() < 1e-12);
        assert!((c.gbps.unwrap() - 994.0 * 800.0 / 1.99 / 1e9).abs() < 1e-12);
        assert_eq!((c.p50_us, c.p99_us, c.max_us), (Some(10.0), Some(20.0), Some(30.0)));
        assert!(table_row(&c).contains("990") && table_row(&c).contains("20.0"));
        // Measured packets of untracked flows arrived: not lost, and in the
        // rates (helper-84: rx 4000 at half the rate with --max-flows 2).
        (sink.flow_out_of_range_measured, sink.flow_out_of_range_measured_bytes) = (7, 7 * 100);
        let c = combine(&gen, &sink);
        assert_eq!((c.rx_packets, c.lost), (997, 3));
        assert!((c.mpps.unwrap() - 1001.0 / 1.99 / 1e6).abs() < 1e-12, "{:?}", c.mpps);
        assert!((c.gbps.unwrap() - 1001.0 * 800.0 / 1.99 / 1e9).abs() < 1e-12, "{:?}", c.gbps);
        // One packet received has no rate: n/a, not 0 nor one over the
        // generator's seconds.
        let one = SinkReport { packets: 1, bytes: 100, ..Default::default() };
        let c = combine(&gen, &one);
        assert_eq!((c.rx_packets, c.mpps, c.gbps), (1, None, None));
        assert!(table_row(&c).starts_with(&format!("{:>12} {:>12} {:>9} {:>9}", 1000, 1, "n/a", "n/a")), "{}", table_row(&c));
        let none = combine(&GenReport::default(), &SinkReport::default());
        assert_eq!((none.mpps, none.gbps, none.loss_pct, none.p50_us), (None, None, None, None));
        assert_eq!(table_row(&none).matches("n/a").count(), 6, "rates, loss and latency: {}", table_row(&none));
        // Nothing received of 1000 sent: 100 % lost, rates and latency n/a (not 0).
        let c = combine(&gen, &SinkReport::default());
        assert_eq!((c.lost, c.loss_pct, c.mpps, c.max_us), (1000, Some(100.0), None, None));
        let row = table_row(&c);
        assert!(row.contains("100.0000") && row.matches("n/a").count() == 5, "{row}");
        let json = serde_json::to_value(&c).unwrap();
        assert!(json["mpps"].is_null() && json["gbps"].is_null(), "{json}");
        // A p99 above the histogram's cap is shown as such, not as a number.
        sink.latency_us.p99 = None;
        assert!(table_row(&combine(&gen, &sink)).contains(&format!(">{:.0}", super::super::sink::CAP_US)));
    }

    use crate::pktgen::gen::FlowTx;
    use crate::pktgen::sink::FlowReport;

    /// A generator of 2 flows × 500 measured packets from t = 100 s (1 s
    /// warm-up) to 103 s, and a sink that listened from 99 to 104 s and got them all.
    fn pair() -> (GenReport, SinkReport) {
        let flows = (0..2).map(|f| FlowTx { flow: f, tx_packets: 600, measured_tx_packets: 500 }).collect();
        let gen = GenReport { measured_tx_packets: 1000, warmup_s: 1.0, started_unix_s: 100.0, ended_unix_s: 103.0, flows, ..Default::default() };
        let sink = SinkReport {
            packets: 1000,
            started_unix_s: 99.0,
            ended_unix_s: 104.0,
            flows: (0..2).map(|f| FlowReport { flow: f, packets: 500, ..Default::default() }).collect(),
            ..Default::default()
        };
        (gen, sink)
    }

    fn has(w: &[String], what: &str) -> bool {
        w.iter().any(|x| x.contains(what))
    }

    #[test]
    fn a_report_of_the_other_kind_is_named_for_what_it_is() {
        let (gen, sink) = pair();
        let (g, s) = (serde_json::to_string(&gen).unwrap(), serde_json::to_string(&sink).unwrap());
        let p = std::path::Path::new;
        // Swapped: each is called what it is, not "missing field tx_packets".
        let e = parse::<GenReport>("--gen", p("sink.json"), &s, ReportKind::Gen).unwrap_err();
        assert_eq!(e, "--gen sink.json is a sink's report (sink --json), not a generator's report (gen --json): --gen and --sink swapped?");
        let e = parse::<SinkReport>("--sink", p("gen.json"), &g, ReportKind::Sink).unwrap_err();
        assert_eq!(e, "--sink gen.json is a generator's report (gen --json), not a sink's report (sink --json): --gen and --sink swapped?");
        let c = serde_json::to_string(&combine(&gen, &sink)).unwrap();
        let e = parse::<GenReport>("--gen", p("r.json"), &c, ReportKind::Gen).unwrap_err();
        assert!(e.starts_with("--gen r.json is a combined report (report --json), not a generator's"), "{e}");
        let fwd = serde_json::to_string(&crate::pktgen::forward::ForwardReport::default()).unwrap();
        assert!(parse::<SinkReport>("--sink", p("f.json"), &fwd, ReportKind::Sink).unwrap_err().contains("is a forwarder's report"));
        // The right files read as before; other mistakes keep serde's words.
        assert_eq!(parse::<GenReport>("--gen", p("gen.json"), &g, ReportKind::Gen).unwrap().measured_tx_packets, 1000);
        assert_eq!(parse::<SinkReport>("--sink", p("sink.json"), &s, ReportKind::Sink).unwrap(), sink);
        let e = parse::<GenReport>("--gen", p("x.json"), "{\"tx_packets\": 1}", ReportKind::Gen).unwrap_err();
        assert!(e.starts_with("--gen x.json: not a generator's report (gen --json): missing field"), "{e}");
        assert!(parse::<GenReport>("--gen", p("x.json"), "nope", ReportKind::Gen).unwrap_err().starts_with("--gen x.json: not JSON"));
    }

    #[test]
    fn reports_of_one_run_have_no_warning() {
        let (gen, sink) = pair();
        assert_eq!(combine(&gen, &sink).warnings, Vec::<String>::new());
        // Topology (a): plain generator, decrypting sink; (b): ESP generator, plain sink after the gateway.
        let (g, mut s) = pair();
        s.esp = true;
        s.esp_decrypted = 1200;
        assert!(warnings(&g, &s).is_empty());
        let (mut g, s) = pair();
        g.esp = true;
        assert!(warnings(&g, &s).is_empty());
        // Older reports without wall clocks: no time check.
        let (mut g, mut s) = pair();
        (g.started_unix_s, g.ended_unix_s, s.started_unix_s, s.ended_unix_s) = (0.0, 0.0, 0.0, 0.0);
        assert!(warnings(&g, &s).is_empty());
    }

    #[test]
    fn a_generator_behind_its_rate_is_warned_about() {
        // 1000 pps for 1 s: 1000 due; 990 is within 1 %, 989 is not.
        let (mut gen, mut sink) = pair();
        (gen.target_rate_pps, gen.duration_s) = (1000, 1.0);
        gen.measured_tx_packets = 990;
        sink.packets = 990;
        assert!(warnings(&gen, &sink).is_empty(), "{:?}", warnings(&gen, &sink));
        (gen.measured_tx_packets, sink.packets) = (500, 500);
        assert!(has(&warnings(&gen, &sink), "the generator fell behind its --rate 1000: it sent 500 of the 1000 measured packets due (50.0 % short)"));
        // As fast as it goes (--rate 0): nothing is due.
        gen.target_rate_pps = 0;
        assert!(warnings(&gen, &sink).is_empty());
    }

    #[test]
    fn reports_that_do_not_belong_together_are_warned_about() {
        let (gen, mut sink) = pair();
        sink.packets = 1200;
        sink.flows.push(FlowReport { flow: 5, packets: 200, ..Default::default() });
        let w = combine(&gen, &sink).warnings;
        assert!(has(&w, "1200 distinct measured packets, more than the 1000"), "{w:?}");
        assert!(has(&w, "flows [5]"), "{w:?}");

        // One ESP, one plain, and nothing read.
        let (mut gen, mut sink) = pair();
        gen.esp = true;
        (sink.packets, sink.other_frames, sink.flows) = (0, 1200, vec![]);
        assert!(has(&warnings(&gen, &sink), "the generator sent ESP"));
        let (gen, mut sink) = pair();
        sink.esp = true;
        assert!(has(&warnings(&gen, &sink), "received only plaintext"));
        sink.esp_failures.insert("no_sa".into(), 9);
        sink.packets = 0;
        assert!(has(&warnings(&gen, &sink), "no_sa"));
        // Decrypted, but outside the SA's policy: said why they count as lost.
        assert!(!has(&warnings(&gen, &sink), "inner_policy_mismatch"));
        sink.esp_failures.insert("inner_policy_mismatch".into(), 1000);
        assert!(has(&warnings(&gen, &sink), "the sink decrypted 1000 packets whose inner flow the SA's inbound policies"));
        // Failures of other kinds are named too (not only no_sa).
        assert!(!has(&warnings(&gen, &sink), "failed to open"));
        sink.esp_failures.insert("auth_failed".into(), 7);
        assert!(has(&warnings(&gen, &sink), "the sink failed to open ESP packets (auth_failed 7)"));

        // Time: a sink of another run, before or after; a late start; an early stop.
        let (gen, mut sink) = pair();
        (sink.started_unix_s, sink.ended_unix_s) = (110.0, 115.0);
        assert!(has(&warnings(&gen, &sink), "started 7.0 s after the generator ended"));
        (sink.started_unix_s, sink.ended_unix_s) = (90.0, 95.0);
        assert!(has(&warnings(&gen, &sink), "stopped 5.0 s before the generator started"));
        (sink.started_unix_s, sink.ended_unix_s) = (101.5, 102.0);
        let w = warnings(&gen, &sink);
        assert!(has(&w, "started 0.500 s after the generator's measured part began") && has(&w, "stopped 1.000 s before the generator ended"), "{w:?}");
        // A sink that missed the warm-up only is fine.
        (sink.started_unix_s, sink.ended_unix_s) = (100.5, 104.0);
        assert!(warnings(&gen, &sink).is_empty());
    }
}
