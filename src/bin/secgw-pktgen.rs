//! `secgw-pktgen`: the command line of the testbed's AF_XDP traffic
//! generator, sink and forwarder ([`secgw::pktgen`]). Parses arguments,
//! opens the ports, pins the thread and calls the library.
#![deny(unsafe_code)]

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use secgw::io::af_xdp::{self, AfXdpConfig, AfXdpPort, AttachMode};
use secgw::io::Port;
use secgw::pktgen::build::{FlowSpec, PacketBuilder, Size};
use secgw::pktgen::gen::{self, GenConfig, GenReport};
use secgw::pktgen::sa::{EspRx, EspTx};
use secgw::pktgen::sink::{self, SinkConfig, SinkReport};
use secgw::pktgen::{forward, ports, report, sleep_unless_stopped, DURATION_S, GEN_JSON_WAIT_S, GRACE_MS_MAX, IDLE_SLEEP_US_MAX, MAX_FLOWS, MAX_QUEUES, STOP_POLL, WARMUP_S};
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

#[derive(Parser)]
#[command(name = "secgw-pktgen", version, about = "AF_XDP traffic generator, sink and forwarder for the secgw testbed")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// AF_XDP options shared by every command.
#[derive(clap::Args, Clone)]
struct Xdp {
    /// AF_XDP sockets on queues 0..N of each interface (1..=256, and at
    /// most the interface's queue count).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_QUEUES as i64))]
    queues: u32,
    /// Pin the thread to this CPU core.
    #[arg(long)]
    core: Option<usize>,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value_t = Mode::Skb)]
    xdp_mode: Mode,
    /// Entries of each AF_XDP ring (a power of two, 32..=65536); the UMEM has twice as many frames.
    #[arg(long, default_value_t = 2048, value_parser = parse_ring_size)]
    ring_size: u32,
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Skb,
    Native,
    Auto,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send UDP (or ESP) packets carrying sequence numbers and timestamps.
    Gen {
        /// Interface to send on.
        #[arg(long)]
        iface: String,
        #[command(flatten)]
        xdp: Xdp,
        /// Ethernet source address (unicast).
        #[arg(long, value_parser = parse_unicast_mac)]
        src_mac: [u8; 6],
        /// Ethernet destination address (the next hop).
        #[arg(long, value_parser = parse_mac)]
        dst_mac: [u8; 6],
        /// IP source address (IPv4 or IPv6).
        #[arg(long)]
        src: IpAddr,
        /// IP destination address.
        #[arg(long)]
        dst: IpAddr,
        /// UDP source port of flow 0 (flow i uses sport + i).
        #[arg(long, default_value_t = 40000)]
        sport: u16,
        /// UDP destination port.
        #[arg(long, default_value_t = 5001)]
        dport: u16,
        /// Number of flows (1..=65536; flow i is sent from --sport + i,
        /// which must stay within 65535).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_FLOWS as i64))]
        flows: u32,
        /// Plaintext IP packet bytes (IPv4 64..=1500, IPv6 76..=1500) or `imix`
        /// (7:4:1 of 64/576/1500; IPv4 only: 64 bytes cannot hold IPv6 + UDP + the payload header).
        #[arg(long)]
        size: Size,
        /// Packets per second over all queues (0 = as fast as possible).
        #[arg(long, default_value_t = 0, value_parser = parse_rate)]
        rate: u64,
        /// Seconds of measured traffic (0.001..=604800: 1 ms to 7 days;
        /// with --rate, at least one packet's worth: rate × duration >= 1).
        #[arg(long, value_name = "SECS", value_parser = run_secs)]
        duration: Duration,
        /// Seconds of warm-up before it, packets not measured (0..=3600).
        #[arg(long, value_name = "SECS", default_value = "1", value_parser = warmup_secs)]
        warmup: Duration,
        /// ESP mode: a secgw TOML config holding the outbound SA to encapsulate with.
        #[arg(long, requires = "esp_spi")]
        esp_config: Option<PathBuf>,
        /// ESP mode: SPI of that outbound SA (decimal or 0x hex, as in the config).
        #[arg(long, requires = "esp_config", value_parser = secgw::config::parse_spi)]
        esp_spi: Option<u32>,
        /// ESP mode: sequence number of the first packet.
        #[arg(long, default_value_t = 1)]
        esp_seq_start: u64,
        /// Write the report as JSON to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Receive and count generated packets per flow (loss, reordering, latency).
    Sink {
        /// Interface to receive on.
        #[arg(long)]
        iface: String,
        #[command(flatten)]
        xdp: Xdp,
        /// Seconds to listen, then a grace period for stragglers
        /// (0.001..=604800: 1 ms to 7 days).
        #[arg(long, value_name = "SECS", value_parser = run_secs)]
        duration: Duration,
        /// Milliseconds of grace after the duration (0..=60000).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=GRACE_MS_MAX))]
        grace_ms: u64,
        /// Flows 0..N are tracked, others counted as out of range (1..=65536,
        /// as gen's --flows; about 10 KB of memory per flow).
        #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=MAX_FLOWS as i64))]
        max_flows: u32,
        /// Microseconds to sleep after an empty poll (0 = busy poll; 0..=10000,
        /// as the gateway's gateway.idle_sleep_us).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=IDLE_SLEEP_US_MAX))]
        idle_sleep_us: u64,
        /// ESP mode: decrypt ESP for any inbound SA of this secgw TOML config.
        #[arg(long)]
        esp_config: Option<PathBuf>,
        /// The generator's JSON report: loss against its per-flow counts. Only
        /// a file written after the sink started counts; none by the deadline
        /// (or an unreadable one): a warning, loss from sequence numbers.
        #[arg(long)]
        gen_json: Option<PathBuf>,
        /// Wait for the generator's JSON report (--gen-json) up to this many
        /// seconds after listening ends (it is written when the generator
        /// exits); 0..=3600, cut short by SIGINT/SIGTERM.
        #[arg(long, value_name = "SECS", default_value = "5", value_parser = wait_secs)]
        gen_json_wait: Duration,
        /// Write the report as JSON to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Minimal AF_XDP L2 forwarder (MAC rewrite only): the I/O ceiling.
    Forward {
        /// Interface to receive on.
        #[arg(long = "in")]
        input: String,
        /// Interface to send on.
        #[arg(long = "out")]
        output: String,
        /// Destination MAC of forwarded frames.
        #[arg(long, value_parser = parse_mac)]
        dst_mac: [u8; 6],
        /// Source MAC of forwarded frames (unicast) [default: the out interface's].
        #[arg(long, value_parser = parse_unicast_mac)]
        src_mac: Option<[u8; 6]>,
        #[command(flatten)]
        xdp: Xdp,
        /// Seconds to run (0.001..=604800: 1 ms to 7 days) [default: until SIGINT/SIGTERM].
        #[arg(long, value_name = "SECS", value_parser = run_secs)]
        duration: Option<Duration>,
        /// Microseconds to sleep after an empty poll (0 = busy poll; 0..=10000,
        /// as the gateway's gateway.idle_sleep_us).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=IDLE_SLEEP_US_MAX))]
        idle_sleep_us: u64,
        /// Write the counts as JSON to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Combine a generator's and a sink's JSON reports into one line.
    Report {
        /// The generator's JSON.
        #[arg(long)]
        gen: PathBuf,
        /// The sink's JSON.
        #[arg(long)]
        sink: PathBuf,
        /// Write the combined figures as JSON to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let mut mac = [0u8; 6];
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("{s:?}: a MAC is six hex octets separated by ':'"));
    }
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?}: {p:?} is not a hex octet"))?;
    }
    Ok(mac)
}

/// A source MAC: [`parse_mac`], unicast (the I/G bit, bit 0 of the first
/// octet, clear: a multicast or broadcast source is invalid, IEEE 802
/// §8.2) and not all zeros (no station's address).
fn parse_unicast_mac(s: &str) -> Result<[u8; 6], String> {
    let mac = parse_mac(s)?;
    if mac[0] & 1 != 0 {
        return Err(format!("{s}: a {} address cannot be a source MAC", if mac == [0xff; 6] { "broadcast" } else { "multicast" }));
    }
    if mac == [0; 6] {
        return Err(format!("{s}: the all-zero address cannot be a source MAC"));
    }
    Ok(mac)
}

/// `--ring-size`: a power of two in 32..=65536 (the ring of an AF_XDP
/// socket is a power of two; the UMEM gets twice as many 4-KiB frames).
fn parse_ring_size(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|_| format!("{s:?} is not a number of ring entries"))?;
    if !(32..=65536).contains(&n) || !n.is_power_of_two() {
        return Err(format!("{n}: must be a power of two in 32..=65536"));
    }
    Ok(n)
}

/// Refuses an output file that is an existing directory, or whose
/// directory does not exist, before anything runs (rather than after a
/// whole measurement, whose results would be lost).
fn check_out(opt: &str, path: Option<&Path>) -> anyhow::Result<()> {
    let Some(p) = path else { return Ok(()) };
    if p.is_dir() {
        bail!("{opt} {}: is a directory (name a file to write)", p.display());
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!("{opt} {}: directory {} does not exist", p.display(), dir.display());
    }
    // A regular file (or a new one) is written through a temporary file
    // beside it (`write_json`): make sure that can be created now, not
    // after the run.
    if !std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_file()) {
        let tmp = p.with_extension("json.tmp");
        std::fs::File::create(&tmp).with_context(|| format!("{opt} {}: cannot write {}", p.display(), tmp.display()))?;
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(())
}

/// Seconds given to an option: a finite decimal number (`2`, `0.5`,
/// `1e-3`) within `range`, as a [`Duration`]; `what` says what the bounds
/// are. Errors (clap puts the option and the value before them): not a
/// number, or not finite, or out of `range`, saying the range.
fn secs(s: &str, range: RangeInclusive<f64>, what: &str) -> Result<Duration, String> {
    let v: f64 = s.trim().parse().map_err(|_| "not a number of seconds (a decimal number such as 2 or 0.5)".to_string())?;
    if !v.is_finite() || !range.contains(&v) {
        return Err(format!("must be {}..={} seconds ({what})", range.start(), range.end()));
    }
    // -0 is in a range from 0: it is 0.
    Duration::try_from_secs_f64(v.abs()).map_err(|_| "not a number of seconds".to_string())
}

/// `gen --rate`: whole packets per second, 0 (as fast as it goes) up to
/// 2^64 − 1; the error names the form and the range.
fn parse_rate(s: &str) -> Result<u64, String> {
    s.trim().parse::<u64>().map_err(|_| format!("{s:?}: packets per second, a whole number 0..={} (0 = as fast as possible)", u64::MAX))
}

/// `--duration` of every command: [`secs`] in [`DURATION_S`].
fn run_secs(s: &str) -> Result<Duration, String> {
    secs(s, DURATION_S, "1 ms to 7 days: a shorter run sends or hears nothing")
}

/// `gen --warmup`: [`secs`] in [`WARMUP_S`].
fn warmup_secs(s: &str) -> Result<Duration, String> {
    secs(s, WARMUP_S, "0 to 1 hour")
}

/// `sink --gen-json-wait`: [`secs`] in [`GEN_JSON_WAIT_S`].
fn wait_secs(s: &str) -> Result<Duration, String> {
    secs(s, GEN_JSON_WAIT_S, "0 to 1 hour")
}

/// Waits up to `wait` for `path` to be modified at or after `since`,
/// looking every [`STOP_POLL`] and giving up as soon as `stop` is set
/// (SIGINT/SIGTERM: the file is then looked at once, not waited for).
/// True when such a file is there.
fn wait_fresh(path: &Path, since: SystemTime, wait: Duration, stop: &AtomicBool) -> bool {
    let fresh = || std::fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|t| t >= since);
    let start = Instant::now();
    while !fresh() {
        let left = wait.saturating_sub(start.elapsed());
        if left.is_zero() || !sleep_unless_stopped(left.min(STOP_POLL), stop) {
            return fresh();
        }
    }
    true
}

/// Opens AF_XDP ports on queues 0..xdp.queues of `iface` (busy binds
/// retried until `stop`).
fn open(iface: &str, xdp: &Xdp, first_id: u16, stop: &AtomicBool) -> anyhow::Result<Vec<AfXdpPort>> {
    let mut c = AfXdpConfig::new(iface, 0);
    c.mode = match xdp.xdp_mode {
        Mode::Skb => AttachMode::Skb,
        Mode::Native => AttachMode::Native,
        Mode::Auto => AttachMode::Auto,
    };
    c.ring_size = xdp.ring_size;
    c.frame_count = xdp.ring_size.saturating_mul(2);
    Ok(ports::open(iface, xdp.queues, &c, first_id, stop)?)
}

fn pin(core: Option<usize>) -> anyhow::Result<()> {
    if let Some(id) = core {
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            let online: Vec<String> = core_affinity::get_core_ids().unwrap_or_default().iter().map(|c| c.id.to_string()).collect();
            bail!("--core {id}: cannot pin to that core (cores this process may run on: {})", if online.is_empty() { "unknown".to_owned() } else { online.join(", ") });
        }
    }
    Ok(())
}

fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("signal handler")?;
    }
    Ok(stop)
}

fn write_json<T: serde::Serialize>(path: &Path, v: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    // A symlink, device or FIFO (`/dev/null`, `/dev/stdout`, a pipe) is
    // written through, never replaced by the rename below.
    if std::fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_file()) {
        return std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()));
    }
    // A regular file is written whole under a temporary name, then renamed:
    // a reader polling for the file never sees half of it.
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n").with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// Reads the report of kind `want` given to option `opt` ([`report::parse`]:
/// a report of another kind is named for what it is).
fn read_report<T: serde::de::DeserializeOwned>(opt: &str, path: &Path, want: report::ReportKind) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{opt}: reading {}", path.display()))?;
    report::parse(opt, path, &text, want).map_err(anyhow::Error::msg)
}

fn port_rx_dropped(ports: &[AfXdpPort]) -> u64 {
    ports.iter().map(|p| p.stats().rx_dropped).sum()
}

fn real_main(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Gen { iface, xdp, src_mac, dst_mac, src, dst, sport, dport, flows, size, rate, duration, warmup, esp_config, esp_spi, esp_seq_start, json } => {
            check_out("--json", json.as_deref())?;
            let spec = FlowSpec { src_mac, dst_mac, src, dst, sport, dport, flows };
            let builder = PacketBuilder::new(spec, size)?;
            let cfg = GenConfig { builder, rate_pps: rate, duration, warmup, drain: Duration::from_millis(500) };
            cfg.check()?;
            let mut esp = match (esp_config, esp_spi) {
                (Some(path), Some(spi)) => {
                    let e = EspTx::from_config(&path, spi, esp_seq_start)?;
                    let outside = e.flows_outside_policy(&spec);
                    if let Some((flow, what)) = outside.first() {
                        tracing::warn!(
                            "{} of {flows} flows ({src} → {dst}, UDP {sport}+i → {dport}) are not what {}'s outbound policies protect with SA {spi} (flow {flow}: {what}): the peer's inbound policy check will drop them after decryption",
                            outside.len(),
                            path.display()
                        );
                    }
                    Some(e)
                }
                _ => None,
            };
            let largest = match size {
                Size::Fixed(n) => n,
                Size::Imix => *secgw::pktgen::build::IMIX.iter().max().unwrap_or(&1500),
            };
            let (ip_len, inner) = match &esp {
                Some(e) => {
                    let hl = if src.is_ipv6() { 40 } else { 20 };
                    (secgw::esp::outbound::encapsulated_len(&e.sa, hl, largest), Some(largest))
                }
                None => (largest, None),
            };
            if let Some(w) = ports::mtu_warning(&iface, ip_len, inner, ports::link_mtu(&iface)) {
                tracing::warn!("{w}");
            }
            let stop = stop_flag()?;
            pin(xdp.core)?;
            let mut ports = open(&iface, &xdp, 0, &stop)?;
            tracing::info!(%iface, queues = xdp.queues, %size, rate, flows, esp = esp.is_some(), "generating");
            let r = gen::run(&mut ports, &cfg, esp.as_mut(), &stop);
            drop(ports);
            println!(
                "gen: sent {} packets ({} measured) in {:.3} s measured: {:.0} pps, {:.4} Gbit/s; tx ring full {}, failed {}, esp errors {}",
                r.tx_packets,
                r.measured_tx_packets,
                r.duration_s,
                r.rate_pps,
                if r.duration_s > 0.0 { r.measured_tx_bytes as f64 * 8.0 / r.duration_s / 1e9 } else { 0.0 },
                r.tx_ring_full,
                r.tx_failed,
                r.esp_errors
            );
            if let Some(p) = json {
                write_json(&p, &r)?;
            }
            if r.esp_seq_exhausted {
                let (spi, last) = esp.as_ref().map_or((0, 0), |e| (e.sa.spi, e.state.seq));
                bail!(
                    "SA {spi}: sequence numbers exhausted after {} packets (last sent: {last}), so the run stopped; a sender never cycles them (RFC 4303 §3.3.3): give a lower --esp-seq-start, or use an ESN SA",
                    r.tx_packets
                );
            }
            if r.esp_errors > 0 {
                // A seal failed: the run is not what was asked.
                bail!("{} packets could not be encapsulated (esp errors): the run is short", r.esp_errors);
            }
            // Paced, the measured packets are those of the schedule's slots in
            // the measured part: a generator slower than --rate spends it on
            // the warm-up's late slots and measures few or none.
            if rate > 0 && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let due = rate as f64 * duration.as_secs_f64();
                if r.measured_tx_packets == 0 {
                    bail!(
                        "no measured packet was sent: the generator fell behind --rate {rate} ({} packets in all, {:.0} pps); give a lower --rate, or 0 for as fast as it goes",
                        r.tx_packets,
                        r.tx_packets as f64 / (duration + warmup).as_secs_f64()
                    );
                }
                if (r.measured_tx_packets as f64) < 0.99 * due {
                    eprintln!(
                        "gen: warning: fell behind --rate {rate}: {} of {due:.0} measured packets sent; the measured rate is what it reached, not the rate asked",
                        r.measured_tx_packets
                    );
                }
            }
        }
        Cmd::Sink { iface, xdp, duration, grace_ms, max_flows, idle_sleep_us, esp_config, gen_json, gen_json_wait, json } => {
            check_out("--json", json.as_deref())?;
            let cfg = SinkConfig { duration, grace: Duration::from_millis(grace_ms), max_flows, idle_sleep: Duration::from_micros(idle_sleep_us) };
            let mut esp = esp_config.map(|p| EspRx::from_config(&p)).transpose()?;
            let stop = stop_flag()?;
            pin(xdp.core)?;
            let mut ports = open(&iface, &xdp, 0, &stop)?;
            tracing::info!(%iface, queues = xdp.queues, esp = esp.is_some(), "listening");
            let started = SystemTime::now();
            let s = sink::run(&mut ports, &cfg, esp.as_mut(), &stop);
            let rx_dropped = port_rx_dropped(&ports);
            drop(ports);
            // Only a generator report written after this sink started counts
            // (an older file is another run's); none, or a bad one, by the
            // deadline: warn and count loss from sequence numbers instead of
            // losing the measurement.
            let gen: Option<GenReport> = match gen_json {
                Some(p) => {
                    if !wait_fresh(&p, started, gen_json_wait, &stop) {
                        tracing::warn!(path = %p.display(), "no generator report written since the sink started: loss counted from sequence numbers");
                        None
                    } else {
                        match read_report::<GenReport>("--gen-json", &p, report::ReportKind::Gen) {
                            Ok(g) => Some(g),
                            Err(e) => {
                                tracing::warn!("{e:#}: loss counted from sequence numbers");
                                None
                            }
                        }
                    }
                }
                None => None,
            };
            let mut r: SinkReport = s.report(gen.as_ref());
            r.port_rx_dropped = rx_dropped;
            print!("{}", r.text());
            if let Some(p) = json {
                write_json(&p, &r)?;
            }
        }
        Cmd::Forward { input, output, dst_mac, src_mac, xdp, duration, idle_sleep_us, json } => {
            ports::check_forward_interfaces(&input, &output)?;
            check_out("--json", json.as_deref())?;
            let src_mac = match src_mac {
                Some(m) => m,
                None => af_xdp::interface_mac(&output).with_context(|| format!("MAC of {output}"))?,
            };
            let stop = stop_flag()?;
            pin(xdp.core)?;
            let mut ins = open(&input, &xdp, 0, &stop)?;
            let mut outs = open(&output, &xdp, xdp.queues as u16, &stop)?;
            tracing::info!(%input, %output, queues = xdp.queues, "forwarding");
            let mut r = forward::run(&mut ins, &mut outs, dst_mac, src_mac, duration, Duration::from_micros(idle_sleep_us), &stop);
            r.rx_dropped = port_rx_dropped(&ins);
            println!("forward: rx {} tx {} tx_dropped {} kernel rx drops {} in {:.3} s", r.rx_packets, r.tx_packets, r.tx_dropped, r.rx_dropped, r.duration_s);
            if let Some(p) = json {
                write_json(&p, &r)?;
            }
        }
        Cmd::Report { gen, sink, json } => {
            check_out("--json", json.as_deref())?;
            let g: GenReport = read_report("--gen", &gen, report::ReportKind::Gen)?;
            let s: SinkReport = read_report("--sink", &sink, report::ReportKind::Sink)?;
            let c = report::combine(&g, &s);
            for w in &c.warnings {
                tracing::warn!("{w}");
            }
            println!("{}", report::table_header());
            println!("{}", report::table_row(&c));
            if let Some(p) = json {
                write_json(&p, &c)?;
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cmd = Cli::parse().cmd;
    secgw::init_logging();
    match real_main(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("secgw-pktgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    const GEN: [&str; 14] = ["secgw-pktgen", "gen", "--iface", "x", "--src-mac", "02:00:00:00:0a:01", "--dst-mac", "02:00:00:00:00:01", "--src", "192.0.2.10", "--dst", "198.51.100.10", "--size", "64"];
    const SINK: [&str; 4] = ["secgw-pktgen", "sink", "--iface", "x"];
    const FORWARD: [&str; 8] = ["secgw-pktgen", "forward", "--in", "a", "--out", "b", "--dst-mac", "02:00:00:00:00:01"];

    /// `base` + `extra` parsed: the command, or clap's error text.
    fn parse(base: &[&str], extra: &[&str]) -> Result<Cmd, String> {
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.cmd).map_err(|e| e.to_string())
    }

    #[test]
    fn numeric_options_out_of_range_are_refused_naming_the_option() {
        // (command, options, the option named, the range said)
        let cases: &[(&[&str], &[&str], &str, &str)] = &[
            // Hangs: a sleep or wait of ages.
            (&SINK, &["--duration", "1", "--idle-sleep-us", "4294967295"], "--idle-sleep-us", "0..=10000"),
            (&SINK, &["--duration", "1", "--idle-sleep-us", "10001"], "--idle-sleep-us", "0..=10000"),
            (&FORWARD, &["--idle-sleep-us", "18446744073709551615"], "--idle-sleep-us", "0..=10000"),
            (&SINK, &["--duration", "1", "--gen-json-wait", "1e300"], "--gen-json-wait", "0..=3600 seconds"),
            (&SINK, &["--duration", "1", "--gen-json-wait", "3600.5"], "--gen-json-wait", "0..=3600 seconds"),
            (&SINK, &["--duration", "1", "--gen-json-wait", "inf"], "--gen-json-wait", "0..=3600 seconds"),
            (&SINK, &["--duration", "1", "--gen-json-wait", "NaN"], "--gen-json-wait", "0..=3600 seconds"),
            (&SINK, &["--duration", "1", "--gen-json-wait=-1"], "--gen-json-wait", "0..=3600 seconds"),
            (&SINK, &["--duration", "1", "--grace-ms", "60001"], "--grace-ms", "0..=60000"),
            (&SINK, &["--duration", "604801"], "--duration", "0.001..=604800 seconds"),
            (&FORWARD, &["--duration", "1e12"], "--duration", "0.001..=604800 seconds"),
            (&GEN, &["--duration", "1", "--warmup", "1e9"], "--warmup", "0..=3600 seconds"),
            (&GEN, &["--duration", "1", "--warmup=-1"], "--warmup", "0..=3600 seconds"),
            // Aborts: per-flow state for billions of flows.
            (&SINK, &["--duration", "1", "--max-flows", "4294967295"], "--max-flows", "1..=65536"),
            (&SINK, &["--duration", "1", "--max-flows", "65537"], "--max-flows", "1..=65536"),
            (&SINK, &["--duration", "1", "--max-flows", "0"], "--max-flows", "1..=65536"),
            (&SINK, &["--duration", "1", "--max-flows", "1e8"], "--max-flows", ""),
            (&GEN, &["--duration", "1", "--flows", "65537"], "--flows", "1..=65536"),
            (&GEN, &["--duration", "1", "--flows", "0"], "--flows", "1..=65536"),
            (&SINK, &["--duration", "1", "--queues", "0"], "--queues", "1..=256"),
            (&FORWARD, &["--queues", "65536"], "--queues", "1..=256"),
            // Silent no-ops: runs too short to send or hear anything.
            (&GEN, &["--duration", "1e-9"], "--duration", "0.001..=604800 seconds (1 ms to 7 days"),
            (&GEN, &["--duration", "0"], "--duration", "0.001..=604800 seconds"),
            (&GEN, &["--duration", "0.0009"], "--duration", "0.001..=604800 seconds"),
            (&SINK, &["--duration", "1e-9"], "--duration", "0.001..=604800 seconds"),
            (&FORWARD, &["--duration", "0"], "--duration", "0.001..=604800 seconds"),
            (&GEN, &["--duration", "one"], "--duration", "not a number of seconds"),
        ];
        for (base, extra, opt, range) in cases {
            let e = parse(base, extra).err().unwrap_or_else(|| panic!("{extra:?} accepted"));
            assert!(e.contains(&format!("for '{opt} <")) && e.contains(range), "{extra:?}: {e}");
        }
    }

    #[test]
    fn numeric_options_at_their_limits_are_accepted() {
        let Ok(Cmd::Gen { duration, warmup, flows, .. }) = parse(&GEN, &["--duration", "0.001", "--warmup", "3600", "--flows", "65536"]) else { panic!() };
        assert_eq!((duration, warmup, flows), (Duration::from_millis(1), Duration::from_secs(3600), 65536));
        let Ok(Cmd::Gen { duration, warmup, .. }) = parse(&GEN, &["--duration", "604800", "--warmup=-0"]) else { panic!() };
        assert_eq!((duration, warmup), (Duration::from_secs(604_800), Duration::ZERO));
        // Defaults: 1 s of warm-up, a 5 s wait for the generator's report.
        let Ok(Cmd::Gen { warmup, .. }) = parse(&GEN, &["--duration", "2.5"]) else { panic!() };
        assert_eq!(warmup, Duration::from_secs(1));
        let Ok(Cmd::Sink { gen_json_wait, max_flows, idle_sleep_us, grace_ms, xdp, .. }) = parse(&SINK, &["--duration", "1"]) else { panic!() };
        assert_eq!((gen_json_wait, max_flows, idle_sleep_us, grace_ms, xdp.queues), (Duration::from_secs(5), 1024, 0, 200, 1));
        let args = ["--duration", "1", "--max-flows", "65536", "--idle-sleep-us", "10000", "--gen-json-wait", "3600", "--grace-ms", "60000", "--queues", "256"];
        let Ok(Cmd::Sink { gen_json_wait, max_flows, idle_sleep_us, grace_ms, xdp, .. }) = parse(&SINK, &args) else { panic!() };
        assert_eq!((gen_json_wait, max_flows, idle_sleep_us, grace_ms, xdp.queues), (Duration::from_secs(3600), 65536, 10_000, 60_000, 256));
        let Ok(Cmd::Forward { duration, idle_sleep_us, .. }) = parse(&FORWARD, &["--idle-sleep-us", "10000"]) else { panic!() };
        assert_eq!((duration, idle_sleep_us), (None, 10_000));
    }

    #[test]
    fn the_wait_for_the_generators_report_ends_at_a_stop() {
        let dir = std::env::temp_dir().join(format!("pktgen-wait-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("gen.json");
        // Nothing written: an hour's wait ends within a few polls of the stop.
        let stop = AtomicBool::new(false);
        let t = Instant::now();
        let fresh = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                stop.store(true, Ordering::Relaxed);
            });
            wait_fresh(&p, SystemTime::now(), Duration::from_secs(3600), &stop)
        });
        assert!(!fresh && t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        // Stopped already: not waited for, but a file already there counts.
        let since = SystemTime::now() - Duration::from_secs(1);
        std::fs::write(&p, "{}").unwrap();
        assert!(wait_fresh(&p, since, Duration::from_secs(3600), &stop));
        // Written during the wait: found.
        let stop = AtomicBool::new(false);
        let since = SystemTime::now() + Duration::from_millis(20);
        let fresh = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                std::fs::write(&p, "{}").unwrap();
            });
            wait_fresh(&p, since, Duration::from_secs(5), &stop)
        });
        assert!(fresh);
        // An old file and no wait: looked at once.
        assert!(!wait_fresh(&p, SystemTime::now() + Duration::from_secs(60), Duration::ZERO, &stop));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
