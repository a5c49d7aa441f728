//! The sink: receives bursts, recognises generated packets by their
//! payload ([`super::payload`]) and counts them per flow ([`FlowRx`]).
//!
//! A frame counts as *ours* when it is Ethernet + IPv4 (valid header
//! checksum, not a fragment) or IPv6 (UDP right after the fixed header) +
//! UDP + a payload starting with the magic. Everything else is counted in
//! `other_frames` and otherwise ignored. In ESP mode an IPv4/IPv6 ESP frame,
//! or ESP in UDP (RFC 3948 §2.2: to the `udp_encap` destination port of
//! an inbound SA of the config, an SPI where the non-ESP marker would be),
//! whose (SPI, destination) names an inbound SA of the config (a tunnel
//! SA only from its `tunnel_src`, as in the gateway; ESP in UDP only for
//! an SA with that port, plain ESP only for one without: else
//! `encap_mismatch`) is opened with
//! [`crate::esp::inbound`] (anti-replay window included, as a gateway
//! would; a transport-mode SA finished by [`crate::esp::transport`]), its
//! inner packet checked against the SA's selectors as the
//! gateway's inbound policy check does (RFC 4301 §5.2, with the same
//! [`crate::policy::sad::InboundEntry::admits`]) and then read the same
//! way; a frame that fails (or names no SA of the config: `no_sa`; or
//! whose inner packet the SA's policies do not admit:
//! `inner_policy_mismatch`) is counted by the gateway's drop reason name
//! (`esp_failures`), not read.
//! Latency is the receive time (one [`super::now_ns`] per burst) minus the
//! payload's transmit time; a transmit time after the receive time is
//! counted in `future_timestamps` and not timed.

use super::flows::FlowRx;
use super::gen::GenReport;
use super::hist::Histogram;
use super::payload::Payload;
use super::sa::EspRx;
use super::{nanos, now_ns, sleep_unless_stopped, unix_now_s, BURST};
use crate::crypto::QueuePair;
use crate::dataplane::counters::DropReason;
use crate::esp;
use crate::io::{PktBuf, Port};
use crate::policy::spd::FlowKey;
use crate::wire::{ethernet, ipv4, ipv6, udp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long to listen.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Listening time, then `grace` more for stragglers.
    pub duration: Duration,
    /// Extra listening after `duration` (default 200 ms).
    pub grace: Duration,
    /// Flows 0..max_flows are tracked (state allocated at start, about
    /// 10 KB a flow); higher flow numbers are counted in
    /// `flow_out_of_range`. The command line allows 1..=[`super::MAX_FLOWS`].
    pub max_flows: u32,
    /// Sleep after an empty poll of every port (0 = busy poll). The command
    /// line allows up to [`super::IDLE_SLEEP_US_MAX`] µs; a longer one is
    /// still cut short by the stop flag (checked every [`super::STOP_POLL`]).
    pub idle_sleep: Duration,
}

/// What a frame turned out to be.
enum Kind {
    Ours(Payload),
    /// ESP at `esp_offset` bytes into the IP packet of `total` bytes;
    /// `udp_dport`: in UDP to that port (RFC 3948), else plain.
    Esp { esp_offset: usize, total: usize, spi: u32, src: IpAddr, dst: IpAddr, tos: u8, udp_dport: Option<u16> },
    Other,
}

/// Which frames [`classify_ip`] reads as ESP: none, or plain ESP and ESP
/// in UDP to one of `natt_ports` (the config's inbound `udp_encap`
/// destination ports).
#[derive(Clone, Copy)]
enum Want<'a> {
    Plain,
    Esp { natt_ports: &'a [u16] },
}

/// Reads an IP packet at `ip` (IPv4 or IPv6 by its version nibble).
#[inline]
fn classify_ip(ip: &[u8], want: Want) -> Kind {
    let (proto, l4, total, src, dst, tos, hl) = match ip.first().map(|v| v >> 4) {
        Some(4) => {
            let Ok(p) = ipv4::Ipv4Packet::new_checked(ip) else { return Kind::Other };
            if p.is_fragment() {
                return Kind::Other;
            }
            (p.protocol(), p.payload(), p.total_len(), IpAddr::V4(p.src()), IpAddr::V4(p.dst()), p.tos(), p.header_len())
        }
        Some(6) => {
            let Ok(p) = ipv6::Ipv6Packet::new_checked(ip) else { return Kind::Other };
            (p.next_header(), p.payload(), p.total_len(), IpAddr::V6(p.src()), IpAddr::V6(p.dst()), p.traffic_class(), ipv6::HEADER_LEN)
        }
        _ => return Kind::Other,
    };
    match proto {
        ipv4::PROTO_UDP => {
            let Ok(u) = udp::UdpPacket::new_checked(l4) else { return Kind::Other };
            if let Some(p) = Payload::read(u.payload()) {
                return Kind::Ours(p);
            }
            // RFC 3948 §2.2: ESP in UDP has an SPI (never 0) where IKE has
            // its four-byte non-ESP marker; a keepalive is one byte.
            let e = u.payload();
            match want {
                Want::Esp { natt_ports } if natt_ports.contains(&u.dst_port()) && e.len() >= 8 && e[..4] != [0; 4] => {
                    let spi = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
                    Kind::Esp { esp_offset: hl + udp::HEADER_LEN, total, spi, src, dst, tos, udp_dport: Some(u.dst_port()) }
                }
                _ => Kind::Other,
            }
        }
        ipv4::PROTO_ESP if matches!(want, Want::Esp { .. }) && l4.len() >= 8 => {
            let spi = u32::from_be_bytes([l4[0], l4[1], l4[2], l4[3]]);
            Kind::Esp { esp_offset: hl, total, spi, src, dst, tos, udp_dport: None }
        }
        _ => Kind::Other,
    }
}

/// Reads an Ethernet frame.
#[inline]
fn classify(frame: &[u8], want: Want) -> Kind {
    let Ok(e) = ethernet::EthernetFrame::new_checked(frame) else { return Kind::Other };
    match e.ethertype() {
        ethernet::ETHERTYPE_IPV4 | ethernet::ETHERTYPE_IPV6 => classify_ip(e.payload(), want),
        _ => Kind::Other,
    }
}

/// The sink's counters and per-flow state.
pub struct Sink {
    flows: Vec<FlowRx>,
    /// Frames received (all).
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames that were not ours (nor ESP for one of our SAs).
    pub other_frames: u64,
    /// Ours but with a flow number at or above `max_flows`.
    pub flow_out_of_range: u64,
    /// Of those, the measured ones (sent after the warm-up).
    pub flow_out_of_range_measured: u64,
    /// Their Ethernet frame bytes as received (without FCS).
    pub flow_out_of_range_measured_bytes: u64,
    /// ESP frames opened whose inner packet the SA's policies admit (then read).
    pub esp_decrypted: u64,
    /// ESP frames that failed, by drop reason.
    esp_failed: [u64; DropReason::ALL.len()],
    first_measured_ns: u64,
    last_measured_ns: u64,
    started_ns: u64,
    stopped_ns: u64,
    started_unix_s: f64,
    stopped_unix_s: f64,
    /// ESP frames were opened (an `EspRx` was given to [`run`]).
    esp: bool,
}

impl Sink {
    /// A sink tracking flows `0..max_flows` (allocates their state, about
    /// 10 KB a flow: keep `max_flows` within [`super::MAX_FLOWS`]).
    pub fn new(max_flows: u32) -> Sink {
        Sink {
            flows: (0..max_flows).map(|_| FlowRx::new()).collect(),
            rx_frames: 0,
            rx_bytes: 0,
            other_frames: 0,
            flow_out_of_range: 0,
            flow_out_of_range_measured: 0,
            flow_out_of_range_measured_bytes: 0,
            esp_decrypted: 0,
            esp_failed: [0; DropReason::ALL.len()],
            first_measured_ns: 0,
            last_measured_ns: 0,
            started_ns: now_ns(),
            stopped_ns: 0,
            started_unix_s: unix_now_s(),
            stopped_unix_s: 0.0,
            esp: false,
        }
    }

    /// Counts a payload of ours received at `now` in a frame of `wire_len`
    /// bytes. A measured packet of any flow, tracked or not, moves the
    /// first/last measured arrival (the interval of the rates).
    #[inline]
    fn ours(&mut self, p: &Payload, wire_len: usize, now: u64) {
        let measured = p.measured();
        if let Some(f) = self.flows.get_mut(p.flow as usize) {
            f.record(p.seq, measured, wire_len, now.checked_sub(p.tx_ns));
        } else {
            self.flow_out_of_range += 1;
            if measured {
                self.flow_out_of_range_measured += 1;
                self.flow_out_of_range_measured_bytes += wire_len as u64;
            }
        }
        if measured {
            if self.first_measured_ns == 0 {
                self.first_measured_ns = now;
            }
            self.last_measured_ns = now;
        }
    }

    /// Counts one plaintext frame received at `now` (ESP frames are
    /// "other" here; [`Sink::burst`] opens them).
    #[inline]
    pub fn frame(&mut self, frame: &[u8], now: u64) {
        self.rx_frames += 1;
        self.rx_bytes += frame.len() as u64;
        match classify(frame, Want::Plain) {
            Kind::Ours(p) => self.ours(&p, frame.len(), now),
            _ => self.other_frames += 1,
        }
    }

    /// Counts the first `n` frames of `bufs`, received at `now`; with `esp`,
    /// ESP frames for its SAs are opened. Buffers of ESP frames are swapped
    /// with ones from `spare` (which must hold at least `n`) and come back to
    /// it, so nothing allocates.
    pub fn burst(&mut self, bufs: &mut [PktBuf], n: usize, now: u64, esp: Option<&mut EspRx>, spare: &mut Vec<PktBuf>, work: &mut Work) {
        let Some(rx) = esp else {
            for b in &bufs[..n] {
                self.frame(b.frame(), now);
            }
            return;
        };
        for b in bufs[..n].iter_mut() {
            let len = b.len();
            self.rx_frames += 1;
            self.rx_bytes += len as u64;
            match classify(b.frame(), Want::Esp { natt_ports: &rx.natt_ports }) {
                Kind::Ours(p) => self.ours(&p, len, now),
                Kind::Other => self.other_frames += 1,
                Kind::Esp { esp_offset, total, spi, src, dst, tos, udp_dport } => {
                    // As the gateway: a tunnel SA takes only packets from
                    // its tunnel_src (else `no_sa`), and only as its
                    // `udp_encap` says (else `encap_mismatch`).
                    let Some(i) = rx.find(spi, dst).filter(|&i| rx.sas[i].0.sa.transport || rx.sas[i].0.sa.tunnel_src == src) else {
                        self.esp_failed[DropReason::NoSa as usize] += 1;
                        continue;
                    };
                    if rx.sas[i].0.udp_dport != udp_dport {
                        self.esp_failed[DropReason::EncapMismatch as usize] += 1;
                        continue;
                    }
                    let Some(fresh) = spare.pop() else {
                        self.other_frames += 1;
                        continue;
                    };
                    let mut buf = std::mem::replace(b, fresh);
                    buf.trim_to(ethernet::HEADER_LEN + total);
                    let (e, st) = &rx.sas[i];
                    match esp::inbound::prepare(&e.sa, st, buf, ethernet::HEADER_LEN + esp_offset) {
                        Ok(op) => {
                            work.sa[work.ops.len()] = i;
                            work.tos[work.ops.len()] = tos;
                            work.len[work.ops.len()] = len;
                            work.ops.push(op);
                        }
                        Err((e, buf)) => {
                            self.esp_failed[DropReason::from(e) as usize] += 1;
                            spare.push(buf);
                        }
                    }
                }
            }
        }
        if work.ops.is_empty() {
            return;
        }
        rx.qp.enqueue_burst(&mut work.ops);
        for op in work.ops.drain(..) {
            // Not accepted (cannot happen: the queue pair holds two bursts).
            self.esp_failed[DropReason::CryptoError as usize] += 1;
            spare.push(op.buf);
        }
        rx.qp.dequeue_burst(&mut work.done, BURST);
        for (j, op) in work.done.drain(..).enumerate() {
            let (entry, st) = &mut rx.sas[work.sa[j]];
            let done = if entry.sa.transport { esp::transport::inbound_finish(st, op) } else { esp::inbound::finish(st, op, work.tos[j]) };
            match done {
                Ok(buf) => {
                    // The gateway's inbound policy check (RFC 4301 §5.2):
                    // the inner packet must match one of the SA's selectors.
                    let inner = buf.frame().get(ethernet::HEADER_LEN..).unwrap_or(&[]);
                    match FlowKey::of_ip(inner) {
                        Err(_) => self.esp_failed[DropReason::BadInner as usize] += 1,
                        Ok(k) if !entry.admits(&k) => self.esp_failed[DropReason::InnerPolicyMismatch as usize] += 1,
                        Ok(_) => {
                            self.esp_decrypted += 1;
                            match classify_ip(inner, Want::Plain) {
                                Kind::Ours(p) => self.ours(&p, work.len[j], now),
                                _ => self.other_frames += 1,
                            }
                        }
                    }
                    spare.push(buf);
                }
                Err((e, buf)) => {
                    self.esp_failed[DropReason::from(e) as usize] += 1;
                    spare.push(buf);
                }
            }
        }
    }

    /// The report; `gen` (the generator's report) gives the expected
    /// per-flow counts for loss.
    pub fn report(&self, gen: Option<&GenReport>) -> SinkReport {
        let mut r = SinkReport {
            duration_s: self.stopped_ns.max(self.started_ns).saturating_sub(self.started_ns) as f64 / 1e9,
            measured_s: self.last_measured_ns.saturating_sub(self.first_measured_ns) as f64 / 1e9,
            rx_frames: self.rx_frames,
            rx_bytes: self.rx_bytes,
            other_frames: self.other_frames,
            flow_out_of_range: self.flow_out_of_range,
            flow_out_of_range_measured: self.flow_out_of_range_measured,
            flow_out_of_range_measured_bytes: self.flow_out_of_range_measured_bytes,
            esp_decrypted: self.esp_decrypted,
            esp_failed: self.esp_failed.iter().sum(),
            esp_failures: DropReason::ALL.iter().filter(|r| self.esp_failed[**r as usize] > 0).map(|r| (r.name().to_string(), self.esp_failed[*r as usize])).collect(),
            esp: self.esp,
            started_unix_s: self.started_unix_s,
            ended_unix_s: self.stopped_unix_s,
            loss_from: if gen.is_some() { "generator".into() } else { "sequence numbers".into() },
            ..Default::default()
        };
        // The generator's measured count per tracked flow, looked up once
        // (not a search of its flows for each of ours: 65536 × 65536).
        let gen_counts: Option<Vec<u64>> = gen.map(|g| {
            let mut c = vec![0u64; self.flows.len()];
            for x in &g.flows {
                if let Some(n) = c.get_mut(x.flow as usize) {
                    *n = x.measured_tx_packets;
                }
            }
            c
        });
        let mut all = Histogram::new();
        for (i, f) in self.flows.iter().enumerate() {
            let gen_measured = gen_counts.as_ref().map(|c| c[i]);
            let (expected, lost) = f.finish(gen_measured);
            if f.packets == 0 && f.warmup == 0 && expected == 0 {
                continue;
            }
            all.merge(&f.latency);
            r.packets += f.packets;
            r.bytes += f.bytes;
            r.warmup_packets += f.warmup;
            r.duplicates += f.duplicates;
            r.reordered += f.reordered;
            r.late += f.late;
            r.future_timestamps += f.future_timestamps;
            r.expected += expected;
            r.lost += lost;
            r.flows.push(FlowReport {
                flow: i as u32,
                packets: f.packets,
                bytes: f.bytes,
                expected,
                lost,
                reordered: f.reordered,
                duplicates: f.duplicates,
                late: f.late,
                future_timestamps: f.future_timestamps,
                warmup_packets: f.warmup,
                latency_us: Latency::of(&f.latency),
            });
        }
        r.latency_us = Latency::of(&all);
        // Nothing expected (no generator count and nothing received, or a
        // generator that sent nothing measured): no loss figure.
        r.loss_pct = (r.expected > 0).then(|| r.lost as f64 * 100.0 / r.expected as f64);
        let rates = arrival_rates(r.packets + r.flow_out_of_range_measured, r.bytes + r.flow_out_of_range_measured_bytes, r.measured_s);
        (r.rate_pps, r.gbps) = (rates.map(|x| x.0), rates.map(|x| x.1));
        r
    }
}

/// The arrival rates of `packets` measured packets of `bytes` Ethernet
/// frame bytes in all, the first and the last of which arrived `secs`
/// seconds apart: (packets per second, Gbit/s). The packets after the
/// first arrived within those seconds, so packets/s = (packets − 1) /
/// `secs`, and Gbit/s is that times the mean frame size in bits / 10^9
/// (bytes × 8 × (packets − 1) / packets / `secs` / 10^9). `None` with
/// fewer than two packets, or no interval between the first and the last
/// (all received in one burst, which has one receive time): no rate can
/// be told, and none is made up.
pub fn arrival_rates(packets: u64, bytes: u64, secs: f64) -> Option<(f64, f64)> {
    if packets < 2 || !(secs > 0.0 && secs.is_finite()) {
        return None;
    }
    let pps = (packets - 1) as f64 / secs;
    Some((pps, bytes as f64 / packets as f64 * 8.0 * pps / 1e9))
}

/// A rate of a report as text: `{:.prec$}`, or `"n/a"` when there is none
/// ([`arrival_rates`]).
pub fn show_rate(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "n/a".into(), |x| format!("{x:.prec$}"))
}

/// Scratch of [`Sink::burst`] (allocated once).
pub struct Work {
    ops: Vec<crate::crypto::CryptoOp<PktBuf>>,
    done: Vec<crate::crypto::CryptoOp<PktBuf>>,
    sa: [usize; BURST],
    tos: [u8; BURST],
    len: [usize; BURST],
}

impl Default for Work {
    fn default() -> Self {
        Work { ops: Vec::with_capacity(BURST), done: Vec::with_capacity(BURST), sa: [0; BURST], tos: [0; BURST], len: [0; BURST] }
    }
}

/// Latency figures in microseconds (histogram resolution: [`super::hist`]).
/// Every figure is `None` (JSON `null`) when there are no samples; `p50`
/// and `p99` are also `None` when they fall among the `overflow` samples
/// (at or above [`CAP_US`]: text output "> CAP"), never a value below the
/// true one; `max`, `min` and `mean` stay exact.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
    /// Smallest.
    pub min: Option<f64>,
    /// Mean.
    pub mean: Option<f64>,
    /// Samples.
    pub samples: u64,
    /// Samples at or above [`CAP_US`] (in `samples`, `max` and `mean`, in
    /// no percentile bucket).
    #[serde(default)]
    pub overflow: u64,
}

/// The histogram's cap in µs ([`super::hist::CAP_NS`]).
pub const CAP_US: f64 = super::hist::CAP_NS as f64 / 1000.0;

impl Latency {
    /// Figures of a histogram of nanoseconds.
    pub fn of(h: &Histogram) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        let some = |v: f64| (h.count() > 0).then_some(v);
        Latency {
            p50: h.percentile(50.0).map(us),
            p99: h.percentile(99.0).map(us),
            max: some(us(h.max())),
            min: some(us(h.min())),
            mean: some(h.mean() / 1000.0),
            samples: h.count(),
            overflow: h.overflow(),
        }
    }
}

/// A latency figure of a report as text: `{:.1}` µs; `"> CAP"` for a
/// percentile above the histogram's cap (`samples` > 0); `"n/a"` without
/// samples.
pub fn show_us(v: Option<f64>, samples: u64) -> String {
    match v {
        Some(x) => format!("{x:.1}"),
        None if samples > 0 => format!(">{CAP_US:.0}"),
        None => "n/a".into(),
    }
}

/// A loss percentage as text: `{:.4}`, or `"n/a"` when nothing was expected.
pub fn show_pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |x| format!("{x:.4}"))
}

/// One flow of the sink's report ([`super::flows`] defines the fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    /// Flow number.
    pub flow: u32,
    /// Measured packets received (duplicates included).
    pub packets: u64,
    /// Their Ethernet frame bytes (without FCS).
    pub bytes: u64,
    /// Packets expected.
    pub expected: u64,
    /// Expected but never received.
    pub lost: u64,
    /// Arrived after a higher sequence number.
    pub reordered: u64,
    /// Received more than once.
    pub duplicates: u64,
    /// Reordered by more than the duplicate window.
    pub late: u64,
    /// Measured packets with a transmit time after their receive time (not timed).
    #[serde(default)]
    pub future_timestamps: u64,
    /// Warm-up packets received.
    pub warmup_packets: u64,
    /// One-way latency.
    pub latency_us: Latency,
}

/// What the sink saw (`--json`). Packet, byte, loss and latency figures
/// cover measured packets only; bytes are Ethernet frame bytes without FCS
/// as received (ESP frames in ESP mode).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SinkReport {
    /// Seconds the sink listened.
    pub duration_s: f64,
    /// Wall clock (Unix seconds) when the sink began listening; 0 in
    /// reports of older versions.
    #[serde(default)]
    pub started_unix_s: f64,
    /// Wall clock (Unix seconds) when it stopped.
    #[serde(default)]
    pub ended_unix_s: f64,
    /// ESP mode (`--esp-config`): ESP frames for the config's inbound SAs
    /// were opened.
    #[serde(default)]
    pub esp: bool,
    /// Seconds from the first to the last measured packet received (of
    /// any flow, tracked or beyond `--max-flows`).
    pub measured_s: f64,
    /// Measured packets received per second (`packets` +
    /// `flow_out_of_range_measured` = N): (N − 1) / `measured_s`, the
    /// packets after the first having arrived within it
    /// ([`arrival_rates`]). `None` (JSON `null`, text "n/a") when N < 2 or
    /// `measured_s` is 0.
    pub rate_pps: Option<f64>,
    /// Gbit/s at that rate of frames of the mean size of those N
    /// (`bytes` + `flow_out_of_range_measured_bytes`); `None` with `rate_pps`.
    pub gbps: Option<f64>,
    /// Frames received (all).
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames not ours (ignored).
    pub other_frames: u64,
    /// Ours with a flow number beyond `--max-flows`.
    pub flow_out_of_range: u64,
    /// Of those, measured ones: received, but not tracked per flow (no
    /// duplicate or reorder detection); `report` counts them as received.
    #[serde(default)]
    pub flow_out_of_range_measured: u64,
    /// Their Ethernet frame bytes as received (without FCS); 0 in reports
    /// of older versions.
    #[serde(default)]
    pub flow_out_of_range_measured_bytes: u64,
    /// ESP frames opened whose inner packet the SA's inbound policies
    /// admit (RFC 4301 §5.2): what the peer gateway would deliver.
    pub esp_decrypted: u64,
    /// ESP frames that failed to open, or whose inner packet the SA's
    /// policies do not admit (`inner_policy_mismatch`): what the peer
    /// gateway would drop.
    pub esp_failed: u64,
    /// Failures by drop reason name (as the gateway names them).
    pub esp_failures: BTreeMap<String, u64>,
    /// Measured packets received (duplicates included).
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Warm-up packets received.
    pub warmup_packets: u64,
    /// Expected measured packets.
    pub expected: u64,
    /// Lost measured packets.
    pub lost: u64,
    /// `lost / expected` in percent; `None` (JSON `null`) when nothing was
    /// expected (no generator count and nothing received).
    pub loss_pct: Option<f64>,
    /// `"generator"` (expected from `--gen-json`) or `"sequence numbers"`.
    pub loss_from: String,
    /// Reordered packets.
    pub reordered: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Reordered by more than the duplicate window.
    pub late: u64,
    /// Measured packets with a transmit time after their receive time (not
    /// timed: kept out of `latency_us`).
    #[serde(default)]
    pub future_timestamps: u64,
    /// Latency over all flows.
    pub latency_us: Latency,
    /// Kernel receive drops of the sink's sockets (rx ring full, no fill frame).
    pub port_rx_dropped: u64,
    /// Per flow (flows with any packet or expectation).
    pub flows: Vec<FlowReport>,
}

impl SinkReport {
    /// The report as the sink prints it: a summary line (rates, or `rate
    /// n/a` without one; loss as `{:.4}%`, or `n/a` when nothing was
    /// expected; latency), a line of
    /// frame and ESP counts, and a table row per flow; each line ends in a
    /// newline.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let us = |l: &Latency, v: Option<f64>| show_us(v, l.samples);
        let l = &self.latency_us;
        let loss = self.loss_pct.map_or_else(|| "n/a".to_string(), |x| format!("{x:.4}%"));
        let untracked = match self.flow_out_of_range_measured {
            0 => String::new(),
            n => format!(" (+{n} of flows beyond --max-flows)"),
        };
        let rate = match (self.rate_pps, self.gbps) {
            (Some(pps), Some(gbps)) => format!("{pps:.0} pps, {gbps:.4} Gbit/s"),
            _ => "rate n/a".into(),
        };
        let mut t = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(
            t,
            "sink: {} measured packets{untracked} in {:.3} s: {rate}; lost {} ({loss}, from {}), reordered {}, duplicates {}; latency us p50 {} p99 {} max {}",
            self.packets,
            self.measured_s,
            self.lost,
            self.loss_from,
            self.reordered,
            self.duplicates,
            us(l, l.p50),
            us(l, l.p99),
            us(l, l.max)
        );
        let _ = writeln!(
            t,
            "      frames {} (other {}, warm-up {}, flow out of range {}), esp decrypted {} failed {} {:?}, kernel rx drops {}, timestamps from the future {}, latencies over the cap {}",
            self.rx_frames,
            self.other_frames,
            self.warmup_packets,
            self.flow_out_of_range,
            self.esp_decrypted,
            self.esp_failed,
            self.esp_failures,
            self.port_rx_dropped,
            self.future_timestamps,
            l.overflow
        );
        let row = |t: &mut String, c: [&dyn std::fmt::Display; 9]| {
            let _ = writeln!(t, "{:>6} {:>12} {:>14} {:>10} {:>9} {:>9} {:>10} {:>10} {:>10}", c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
        };
        row(&mut t, ["flow", "packets", "bytes", "lost", "reorder", "dup", "p50_us", "p99_us", "max_us"].each_ref().map(|h| h as &dyn std::fmt::Display));
        for f in &self.flows {
            let l = &f.latency_us;
            row(&mut t, [&f.flow, &f.packets, &f.bytes, &f.lost, &f.reordered, &f.duplicates, &us(l, l.p50), &us(l, l.p99), &us(l, l.max)]);
        }
        t
    }
}

/// Runs the sink on `ports` for `cfg.duration + cfg.grace` (or until
/// `stop`, seen within [`super::STOP_POLL`] whatever `cfg.idle_sleep`),
/// then returns its state ([`Sink::report`]).
pub fn run<P: Port>(ports: &mut [P], cfg: &SinkConfig, mut esp: Option<&mut EspRx>, stop: &AtomicBool) -> Sink {
    let mut sink = Sink::new(cfg.max_flows);
    sink.esp = esp.is_some();
    let mut bufs: Vec<PktBuf> = (0..BURST).map(|_| PktBuf::new()).collect();
    let mut spare: Vec<PktBuf> = (0..BURST).map(|_| PktBuf::new()).collect();
    let mut work = Work::default();
    let end = sink.started_ns.saturating_add(nanos(cfg.duration.saturating_add(cfg.grace)));
    let mut iter = 0u32;
    loop {
        let mut got = 0;
        for p in ports.iter_mut() {
            let n = p.rx_burst(&mut bufs);
            if n > 0 {
                got += n;
                let now = now_ns();
                sink.burst(&mut bufs, n, now, esp.as_deref_mut(), &mut spare, &mut work);
            }
            p.poll();
        }
        iter = iter.wrapping_add(1);
        if got == 0 || iter.is_multiple_of(64) {
            if now_ns() >= end || stop.load(Ordering::Relaxed) {
                break;
            }
            if got == 0 && !cfg.idle_sleep.is_zero() {
                sleep_unless_stopped(cfg.idle_sleep, stop);
            }
        }
    }
    sink.stopped_ns = now_ns();
    sink.stopped_unix_s = unix_now_s();
    sink
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::mem;

    #[test]
    fn a_long_idle_sleep_or_duration_does_not_outlast_the_stop() {
        // An hour's idle sleep in a day's listening: a stop 30 ms in ends
        // it within a few STOP_POLLs.
        let (port, _wire) = mem::pair(0);
        let cfg = SinkConfig { duration: Duration::from_secs(86_400), grace: Duration::MAX, max_flows: 1, idle_sleep: Duration::from_secs(3600) };
        let (s, took) = crate::pktgen::stopped_after(Duration::from_millis(30), |stop| run(&mut [port], &cfg, None, stop));
        assert!(took < Duration::from_secs(1), "{took:?}");
        assert_eq!(s.rx_frames, 0);
    }

    #[test]
    fn the_generators_counts_are_matched_to_flows_by_number() {
        // Flows in any order, some beyond the sink's: each tracked flow
        // gets its own count (65536 of each side are looked up in one pass).
        let mut s = Sink::new(super::super::MAX_FLOWS);
        let gen = GenReport {
            flows: [(70_000u32, 9u64), (2, 5), (0, 7)].iter().map(|&(flow, n)| super::super::gen::FlowTx { flow, tx_packets: n, measured_tx_packets: n }).collect(),
            ..Default::default()
        };
        let r = s.report(Some(&gen));
        assert_eq!(r.flows.iter().map(|f| (f.flow, f.expected, f.lost)).collect::<Vec<_>>(), vec![(0, 7, 7), (2, 5, 5)]);
        let mut all = gen.clone();
        all.flows = (0..super::super::MAX_FLOWS).map(|flow| super::super::gen::FlowTx { flow, tx_packets: 1, measured_tx_packets: 1 }).collect();
        s.stopped_ns = s.started_ns;
        let t = std::time::Instant::now();
        let r = s.report(Some(&all));
        assert_eq!((r.expected, r.lost, r.flows.len()), (65_536, 65_536, 65_536));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
