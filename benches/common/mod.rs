//! Shared by the benches: ratios read from one run.
//!
//! criterion keeps each benchmark's estimates in
//! `<criterion home>/<group>/<function>/<parameter>/new/estimates.json`.
//! [`Ratios`] collects (ours, reference) pairs; after `criterion_main!`'s
//! groups ran (call it from the last group function), [`Ratios::print`]
//! reads the mean time per iteration of both lines and prints
//! ours/reference throughput as a table. A line that this process did not
//! measure (filtered out, or a file older than the process) is shown as
//! "not run", never as a stale figure.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::SystemTime;

/// Where criterion writes: `CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`,
/// else `<target dir of this executable>/criterion` (as criterion 0.5 does).
pub fn criterion_home() -> PathBuf {
    if let Some(h) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(h);
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("criterion");
    }
    // target/<profile>/deps/<bench>-<hash>
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent()?.parent().map(|t| t.join("criterion")))
        .unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// One benchmark line: criterion group, function id, parameter (as the
/// `BenchmarkId` was built; criterion's directory names replace `/` by `_`).
#[derive(Clone, Debug)]
pub struct Line {
    pub group: String,
    pub function: String,
    pub parameter: String,
}

impl Line {
    pub fn new(group: &str, function: &str, parameter: impl ToString) -> Line {
        Line { group: group.into(), function: function.into(), parameter: parameter.to_string() }
    }

    /// Mean nanoseconds per iteration measured by this process, if any.
    fn mean_ns(&self, since: SystemTime) -> Option<f64> {
        let clean = |s: &str| s.replace(['/', '\\', '?', '"', '*', '<', '>', ':', '|'], "_");
        let p = criterion_home()
            .join(clean(&self.group))
            .join(clean(&self.function))
            .join(clean(&self.parameter))
            .join("new/estimates.json");
        let meta = std::fs::metadata(&p).ok()?;
        if meta.modified().ok()? < since {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).ok()?).ok()?;
        v["mean"]["point_estimate"].as_f64()
    }
}

/// (label, ours (the sum of these lines' times), reference, units per
/// iteration, unit name) rows.
pub struct Ratios {
    title: String,
    since: SystemTime,
    rows: Vec<(String, Vec<Line>, Line, f64, &'static str)>,
}

impl Ratios {
    /// Starts a table; lines measured before now do not count.
    pub fn new(title: &str) -> Ratios {
        Ratios { title: title.into(), since: SystemTime::now(), rows: Vec::new() }
    }

    /// Adds a row: `per_iter` units (bytes or packets) per iteration of both lines.
    pub fn row(&mut self, label: impl Into<String>, ours: Line, reference: Line, per_iter: f64, unit: &'static str) {
        self.rows.push((label.into(), vec![ours], reference, per_iter, unit));
    }

    /// Adds a row whose "ours" time is the sum of the times of `parts`
    /// (e.g. a bound: what two measured stages cost together, with nothing
    /// else added).
    pub fn row_sum(&mut self, label: impl Into<String>, parts: Vec<Line>, reference: Line, per_iter: f64, unit: &'static str) {
        self.rows.push((label.into(), parts, reference, per_iter, unit));
    }

    /// Prints `label | ours | reference | ours/reference` (throughput ratio =
    /// reference time / our time).
    pub fn print(&self) {
        println!("\n{}", self.title);
        println!("| case | ours ns/iter | reference ns/iter | ours | reference | ratio |");
        println!("|---|---:|---:|---:|---:|---:|");
        for (label, ours, reference, per_iter, unit) in &self.rows {
            let ours: Option<f64> = ours.iter().map(|l| l.mean_ns(self.since)).sum();
            match (ours, reference.mean_ns(self.since)) {
                (Some(o), Some(r)) => {
                    let rate = |ns: f64| per_iter / ns; // units per ns
                    let fmt = |ns: f64| match *unit {
                        "B" => format!("{:.2} Gbit/s", rate(ns) * 8.0),
                        u => format!("{:.2} M{u}/s", rate(ns) * 1e3),
                    };
                    println!("| {label} | {o:.1} | {r:.1} | {} | {} | {:.1} % |", fmt(o), fmt(r), 100.0 * r / o);
                }
                _ => println!("| {label} | not run | | | | |"),
            }
        }
    }
}
