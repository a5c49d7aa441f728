//! Stats: sums the workers' counters into a snapshot, rendered as text or
//! JSON (the `--stats-file` format).

use crate::dataplane::{DropReason, WorkerCounters};
use crate::esp::lifetime::SaCounters;
use crate::policy::Tables;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Counters of one port.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PortStats {
    /// Port name.
    pub name: String,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames received here and dropped.
    pub drops: u64,
    /// Frames dropped before the gateway saw them (AF_XDP rx ring full,
    /// fill ring empty, too large), read from the kernel now and then.
    pub rx_dropped_backend: u64,
}

/// Counters of one SA.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SaStats {
    /// SPI.
    pub spi: u32,
    /// "outbound" or "inbound".
    pub direction: &'static str,
    /// Packets processed.
    pub packets: u64,
    /// Bytes of the inner (plaintext) IP packets, both directions.
    pub bytes: u64,
    /// Packets dropped while processed with this SA.
    pub errors: u64,
    /// Dummy packets (RFC 4303 §2.6) sent on this outbound SA (0 inbound).
    pub dummies: u64,
}

/// Counters of one worker.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WorkerStats {
    /// Worker id.
    pub worker: usize,
    /// Packets it handed to the owner of their SA.
    pub handoff_out: u64,
    /// Packets it received from other workers for SAs it owns.
    pub handoff_in: u64,
}

/// Every counter of the gateway at one moment.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Snapshot {
    /// Per port.
    pub ports: Vec<PortStats>,
    /// Per SA.
    pub sas: Vec<SaStats>,
    /// Drops by reason (every reason, zeros included).
    pub drops: BTreeMap<&'static str, u64>,
    /// ARP replies sent.
    pub arp_replies: u64,
    /// Neighbor Advertisements sent (RFC 4861 §7.2.4).
    pub nd_replies: u64,
    /// IPv4 fragments sent.
    pub frags_sent: u64,
    /// Dummy packets (RFC 4303 §2.6) sent, all SAs.
    pub dummies_sent: u64,
    /// ICMP "fragmentation needed" and ICMPv6 Packet Too Big errors sent.
    pub icmp_sent: u64,
    /// ICMP errors suppressed by the per-worker rate limit.
    pub icmp_rate_limited: u64,
    /// IPv4 fragments addressed to the gateway taken for reassembly.
    pub frags_received: u64,
    /// Datagrams reassembled from them.
    pub reassembled: u64,
    /// Fragments that went into reassembled datagrams.
    pub frags_reassembled: u64,
    /// Fragments waiting for the rest of their datagram now.
    pub frags_pending: u64,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
}

/// Sums `workers`' counters, naming ports and SAs from `t`.
pub fn snapshot(t: &Tables, workers: &[Arc<WorkerCounters>]) -> Snapshot {
    let mut s = Snapshot {
        ports: t.ports.iter().map(|p| PortStats { name: p.name.clone(), ..Default::default() }).collect(),
        ..Default::default()
    };
    let sa = |spi, direction, c: &SaCounters| SaStats {
        spi,
        direction,
        packets: c.packets.get(),
        bytes: c.bytes.get(),
        errors: c.errors.get(),
        dummies: c.dummies.get(),
    };
    s.sas.extend(t.sad.outbound_sas().map(|(_, o)| sa(o.spi, "outbound", &o.life.counters)));
    s.sas.extend(t.sad.inbound_sas().map(|(_, e)| sa(e.sa.spi, "inbound", &e.sa.life.counters)));
    for r in DropReason::ALL {
        s.drops.insert(r.name(), 0);
    }
    for (wi, w) in workers.iter().enumerate() {
        s.workers.push(WorkerStats { worker: wi, handoff_out: w.handoff_out.get(), handoff_in: w.handoff_in.get() });
        for (ps, pc) in s.ports.iter_mut().zip(&w.ports) {
            ps.rx_packets += pc.rx_packets.get();
            ps.rx_bytes += pc.rx_bytes.get();
            ps.tx_packets += pc.tx_packets.get();
            ps.tx_bytes += pc.tx_bytes.get();
            ps.drops += pc.drops.get();
            ps.rx_dropped_backend += pc.rx_dropped_backend.get();
        }
        for r in DropReason::ALL {
            *s.drops.entry(r.name()).or_default() += w.drops[r as usize].get();
        }
        s.arp_replies += w.arp_replies.get();
        s.nd_replies += w.nd_replies.get();
        s.frags_sent += w.frags_sent.get();
        s.dummies_sent += w.dummies_sent.get();
        s.icmp_sent += w.icmp_sent.get();
        s.icmp_rate_limited += w.icmp_rate_limited.get();
        s.frags_received += w.frags_received.get();
        s.reassembled += w.reassembled.get();
        s.frags_reassembled += w.frags_reassembled.get();
        s.frags_pending += w.frags_pending.get();
    }
    s
}

impl Snapshot {
    /// Human-readable table; drop reasons with a zero count are left out.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(o, "{:<12} {:>12} {:>14} {:>12} {:>14} {:>10} {:>12}", "port", "rx pkts", "rx bytes", "tx pkts", "tx bytes", "drops", "rx lost");
        for p in &self.ports {
            let _ = writeln!(
                o,
                "{:<12} {:>12} {:>14} {:>12} {:>14} {:>10} {:>12}",
                p.name, p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes, p.drops, p.rx_dropped_backend
            );
        }
        let _ = writeln!(o, "{:<12} {:<9} {:>12} {:>14} {:>10} {:>10}", "sa spi", "dir", "packets", "bytes", "errors", "dummies");
        for s in &self.sas {
            let _ = writeln!(o, "{:<12} {:<9} {:>12} {:>14} {:>10} {:>10}", s.spi, s.direction, s.packets, s.bytes, s.errors, s.dummies);
        }
        let nz: Vec<String> = self.drops.iter().filter(|(_, &v)| v > 0).map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(o, "drops: {}", if nz.is_empty() { "none".to_string() } else { nz.join(" ") });
        let _ = writeln!(o, "arp replies: {}", self.arp_replies);
        let _ = writeln!(o, "nd replies: {}", self.nd_replies);
        let _ = writeln!(o, "fragments sent: {}", self.frags_sent);
        let _ = writeln!(o, "dummy packets sent: {}", self.dummies_sent);
        let _ = writeln!(o, "icmp sent: {} (rate limited: {})", self.icmp_sent, self.icmp_rate_limited);
        let _ = writeln!(
            o,
            "fragments received: {} (reassembled into {} datagrams: {}; pending: {})",
            self.frags_received, self.reassembled, self.frags_reassembled, self.frags_pending
        );
        for w in &self.workers {
            let _ = writeln!(o, "worker {}: handoff out {} in {}", w.worker, w.handoff_out, w.handoff_in);
        }
        o
    }

    /// JSON object (see README, "Stats").
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
