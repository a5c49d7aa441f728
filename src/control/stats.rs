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
    /// The SA's tunnel_dst, only for inbound SAs sharing their SPI with
    /// another (RFC 4301 §4.1: found by SPI and destination), so each has
    /// its own series; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// Outbound tunnel SAs: the path MTU to the tunnel end learned from
    /// ICMP (RFC 4301 §8.2.1), bytes of the outer packet; absent when
    /// none is known (or it aged out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_mtu: Option<u32>,
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
    /// Packets from protected ports decided by its outbound flow cache.
    pub flow_hits: u64,
    /// ESP packets from unprotected ports whose SA came from its inbound
    /// flow cache.
    pub esp_flow_hits: u64,
    /// Crypto ops its queue pair accepted.
    pub crypto_enqueued: u64,
    /// Crypto ops its queue pair handed back, whatever their status
    /// (`crypto_enqueued − crypto_dequeued` are in the device now).
    pub crypto_dequeued: u64,
    /// Crypto ops offered to its queue pair and left with the worker
    /// (queue pair full or stopped), counted at each offer.
    pub crypto_refused: u64,
}

/// Neighbour resolution (ARP, RFC 826; Neighbor Discovery, RFC 4861):
/// the workers' requests, reports and held packets, and the control
/// thread's table.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct NeighbourStats {
    /// ARP requests sent to resolve or probe next hops.
    pub arp_requests: u64,
    /// Neighbor Solicitations sent to resolve or probe next hops.
    pub ns_sent: u64,
    /// Of those two, unicast probes of STALE entries.
    pub probes: u64,
    /// Neighbours the workers reported (ARP requests and replies, Neighbor
    /// Solicitations and Advertisements that passed the learning rules).
    pub learned: u64,
    /// Reports lost to a full queue to the control thread.
    pub reports_lost: u64,
    /// Packets held now waiting for a next hop's MAC (a gauge).
    pub pending: u64,
    /// Entries in the table now, static and learned (a gauge).
    pub entries: u64,
    /// Learned entries added (new address, or a new MAC or port).
    pub added: u64,
    /// Learned entries removed unconfirmed (reachable + 3 × retrans).
    pub aged_out: u64,
    /// Learned entries evicted (the oldest) because the table was full.
    pub evicted: u64,
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
    /// Fragments sent: IPv4 ones, and the IPv6 outer fragments the
    /// gateway cuts itself (a packet of at most 1280 bytes over a tunnel
    /// MTU below 1280, RFC 4213 §3.2).
    pub frags_sent: u64,
    /// Dummy packets (RFC 4303 §2.6) sent, all SAs.
    pub dummies_sent: u64,
    /// ICMP "fragmentation needed", ICMPv6 Packet Too Big and Time Exceeded
    /// errors sent.
    pub icmp_sent: u64,
    /// ICMP errors and Echo Replies suppressed by the per-worker rate limit.
    pub icmp_rate_limited: u64,
    /// ICMP and ICMPv6 Echo Replies sent (RFC 792, RFC 4443 §4.2).
    pub echo_replies: u64,
    /// IPv4 fragments addressed to the gateway taken for reassembly.
    pub frags_received: u64,
    /// Datagrams reassembled from them.
    pub reassembled: u64,
    /// Fragments that went into reassembled datagrams.
    pub frags_reassembled: u64,
    /// Fragments waiting for the rest of their datagram now.
    pub frags_pending: u64,
    /// Neighbour resolution.
    pub neighbours: NeighbourStats,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
}

/// Sums `workers`' counters, naming ports and SAs from `t`.
pub fn snapshot(t: &Tables, workers: &[Arc<WorkerCounters>]) -> Snapshot {
    let mut s = Snapshot {
        ports: t.ports.iter().map(|p| PortStats { name: p.name.clone(), ..Default::default() }).collect(),
        ..Default::default()
    };
    let sa = |spi, direction, c: &SaCounters, dst: Option<String>| SaStats {
        spi,
        direction,
        packets: c.packets.get(),
        bytes: c.bytes.get(),
        errors: c.errors.get(),
        dummies: c.dummies.get(),
        dst,
        path_mtu: None,
    };
    let now_ms = crate::esp::pmtu::epoch_ms(std::time::Instant::now());
    s.sas.extend(t.sad.outbound_sas().map(|(_, o)| SaStats { path_mtu: o.path_mtu.get(|| now_ms).map(u32::from), ..sa(o.spi, "outbound", &o.life.counters, None) }));
    let mut inbound_spis: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (_, e) in t.sad.inbound_sas() {
        *inbound_spis.entry(e.sa.spi).or_default() += 1;
    }
    s.sas.extend(t.sad.inbound_sas().map(|(_, e)| {
        let shared = inbound_spis.get(&e.sa.spi).is_some_and(|&n| n > 1);
        sa(e.sa.spi, "inbound", &e.sa.life.counters, shared.then(|| e.sa.tunnel_dst.to_string()))
    }));
    for r in DropReason::ALL {
        s.drops.insert(r.name(), 0);
    }
    let nc = &t.neighbours.counters;
    s.neighbours.entries = nc.entries.get();
    s.neighbours.added = nc.added.get();
    s.neighbours.aged_out = nc.aged_out.get();
    s.neighbours.evicted = nc.evicted.get();
    for (wi, w) in workers.iter().enumerate() {
        s.workers.push(WorkerStats {
            worker: wi,
            handoff_out: w.handoff_out.get(),
            handoff_in: w.handoff_in.get(),
            flow_hits: w.flow_hits.get(),
            esp_flow_hits: w.esp_flow_hits.get(),
            crypto_enqueued: w.crypto_enqueued.get(),
            crypto_dequeued: w.crypto_dequeued.get(),
            crypto_refused: w.crypto_refused.get(),
        });
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
        s.echo_replies += w.echo_replies.get();
        s.frags_received += w.frags_received.get();
        s.reassembled += w.reassembled.get();
        s.frags_reassembled += w.frags_reassembled.get();
        s.frags_pending += w.frags_pending.get();
        let n = &mut s.neighbours;
        n.arp_requests += w.arp_requests.get();
        n.ns_sent += w.ns_sent.get();
        n.probes += w.neigh_probes.get();
        n.learned += w.neigh_learned.get();
        n.reports_lost += w.neigh_reports_lost.get();
        n.pending += w.neigh_pending.get();
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
            let dst = s.dst.as_deref().map_or(String::new(), |d| format!(" dst {d}"));
            let pmtu = s.path_mtu.map_or(String::new(), |m| format!(" path mtu {m}"));
            let _ = writeln!(o, "{:<12} {:<9} {:>12} {:>14} {:>10} {:>10}{dst}{pmtu}", s.spi, s.direction, s.packets, s.bytes, s.errors, s.dummies);
        }
        let nz: Vec<String> = self.drops.iter().filter(|(_, &v)| v > 0).map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(o, "drops: {}", if nz.is_empty() { "none".to_string() } else { nz.join(" ") });
        let _ = writeln!(o, "arp replies: {}", self.arp_replies);
        let _ = writeln!(o, "nd replies: {}", self.nd_replies);
        let _ = writeln!(o, "fragments sent: {}", self.frags_sent);
        let _ = writeln!(o, "dummy packets sent: {}", self.dummies_sent);
        let _ = writeln!(o, "icmp sent: {} (rate limited: {})", self.icmp_sent, self.icmp_rate_limited);
        let _ = writeln!(o, "echo replies: {}", self.echo_replies);
        let _ = writeln!(
            o,
            "fragments received: {} (reassembled into {} datagrams: {}; pending: {})",
            self.frags_received, self.reassembled, self.frags_reassembled, self.frags_pending
        );
        let n = &self.neighbours;
        let _ = writeln!(
            o,
            "neighbours: {} entries (added {}, aged out {}, evicted {}); sent {} arp requests, {} ns ({} probes); learned {} (lost {}); pending {}",
            n.entries, n.added, n.aged_out, n.evicted, n.arp_requests, n.ns_sent, n.probes, n.learned, n.reports_lost, n.pending
        );
        for w in &self.workers {
            let _ = writeln!(
                o,
                "worker {}: handoff out {} in {}; flow cache hits {} (esp {}); crypto ops enqueued {} dequeued {} in flight {} refused {}",
                w.worker,
                w.handoff_out,
                w.handoff_in,
                w.flow_hits,
                w.esp_flow_hits,
                w.crypto_enqueued,
                w.crypto_dequeued,
                w.crypto_enqueued.saturating_sub(w.crypto_dequeued),
                w.crypto_refused
            );
        }
        o
    }

    /// JSON object (see README, "Stats").
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

/// Prometheus text exposition format 0.0.4: label values escape `\`, `"`
/// and newline; HELP text escapes `\` and newline.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A per-item counter: name after the prefix, HELP text, its value.
type Metric<T> = (&'static str, &'static str, fn(&T) -> u64);

/// One metric family: HELP and TYPE lines, then `name{labels} value` lines.
fn prom_family<'a>(o: &mut String, name: &str, kind: &str, help: &str, samples: impl IntoIterator<Item = (String, u64)> + 'a) {
    use std::fmt::Write;
    let _ = writeln!(o, "# HELP {name} {}", help.replace('\\', "\\\\").replace('\n', "\\n"));
    let _ = writeln!(o, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(o, "{name} {v}");
        } else {
            let _ = writeln!(o, "{name}{{{labels}}} {v}");
        }
    }
}

/// Owned mirror of [`Snapshot`] for reading it back from JSON.
#[derive(serde::Deserialize)]
struct SnapshotJson {
    ports: Vec<PortJson>,
    sas: Vec<SaJson>,
    drops: BTreeMap<String, u64>,
    arp_replies: u64,
    nd_replies: u64,
    frags_sent: u64,
    dummies_sent: u64,
    icmp_sent: u64,
    icmp_rate_limited: u64,
    echo_replies: u64,
    frags_received: u64,
    reassembled: u64,
    frags_reassembled: u64,
    frags_pending: u64,
    neighbours: NeighbourStats,
    workers: Vec<WorkerJson>,
}

#[derive(serde::Deserialize)]
struct PortJson {
    name: String,
    rx_packets: u64,
    rx_bytes: u64,
    tx_packets: u64,
    tx_bytes: u64,
    drops: u64,
    rx_dropped_backend: u64,
}

#[derive(serde::Deserialize)]
struct SaJson {
    spi: u32,
    direction: String,
    packets: u64,
    bytes: u64,
    errors: u64,
    dummies: u64,
    #[serde(default)]
    dst: Option<String>,
    #[serde(default)]
    path_mtu: Option<u32>,
}

#[derive(serde::Deserialize)]
struct WorkerJson {
    worker: usize,
    handoff_out: u64,
    handoff_in: u64,
    // Absent from a gateway older than these counters.
    #[serde(default)]
    flow_hits: u64,
    #[serde(default)]
    esp_flow_hits: u64,
    #[serde(default)]
    crypto_enqueued: u64,
    #[serde(default)]
    crypto_dequeued: u64,
    #[serde(default)]
    crypto_refused: u64,
}

impl Snapshot {
    /// The counters in Prometheus text exposition format 0.0.4: `secgw_`
    /// names, counters ending in `_total`; per port (label `port`), per SA
    /// (`spi`, `direction`, and `dst` for inbound SAs sharing their SPI),
    /// drops by reason (`reason`), the global
    /// counters, per worker (`worker`), and the gauge `secgw_frags_pending`.
    pub fn to_prometheus(&self) -> String {
        let mut o = String::new();
        let port = |f: fn(&PortStats) -> u64| {
            self.ports.iter().map(move |p| (format!("port=\"{}\"", escape_label(&p.name)), f(p)))
        };
        let ports: [Metric<PortStats>; 6] = [
            ("rx_packets", "Frames received on the port.", |p| p.rx_packets),
            ("rx_bytes", "Bytes received on the port.", |p| p.rx_bytes),
            ("tx_packets", "Frames transmitted on the port.", |p| p.tx_packets),
            ("tx_bytes", "Bytes transmitted on the port.", |p| p.tx_bytes),
            ("drops", "Frames received on the port and dropped.", |p| p.drops),
            ("rx_dropped_backend", "Frames the kernel dropped before the gateway saw them (AF_XDP rings).", |p| p.rx_dropped_backend),
        ];
        for (name, help, f) in ports {
            prom_family(&mut o, &format!("secgw_port_{name}_total"), "counter", help, port(f));
        }
        let sas: [Metric<SaStats>; 4] = [
            ("packets", "Packets processed with the SA.", |s| s.packets),
            ("bytes", "Bytes of the inner (plaintext) packets of the SA.", |s| s.bytes),
            ("errors", "Packets dropped while processed with the SA.", |s| s.errors),
            ("dummies", "Dummy packets (RFC 4303 section 2.6) sent on the SA.", |s| s.dummies),
        ];
        for (name, help, f) in sas {
            let samples = self.sas.iter().map(|s| {
                let dst = s.dst.as_deref().map_or(String::new(), |d| format!(",dst=\"{}\"", escape_label(d)));
                (format!("spi=\"{}\",direction=\"{}\"{dst}", s.spi, escape_label(s.direction)), f(s))
            });
            prom_family(&mut o, &format!("secgw_sa_{name}_total"), "counter", help, samples);
        }
        let drops = self.drops.iter().map(|(r, v)| (format!("reason=\"{}\"", escape_label(r)), *v));
        prom_family(&mut o, "secgw_drops_total", "counter", "Packets dropped, by reason (README, Counters).", drops);
        let globals = [
            ("arp_replies", "ARP replies sent.", self.arp_replies),
            ("nd_replies", "Neighbor Advertisements sent.", self.nd_replies),
            ("frags_sent", "Fragments sent: IPv4, and IPv6 outer fragments the gateway cuts itself.", self.frags_sent),
            ("dummies_sent", "Dummy packets sent, all SAs.", self.dummies_sent),
            ("icmp_sent", "ICMP fragmentation-needed, ICMPv6 Packet Too Big and ICMP/ICMPv6 Time Exceeded errors sent.", self.icmp_sent),
            ("icmp_rate_limited", "ICMP errors and Echo Replies suppressed by the rate limit.", self.icmp_rate_limited),
            ("echo_replies", "ICMP and ICMPv6 Echo Replies sent.", self.echo_replies),
            ("frags_received", "Fragments addressed to the gateway taken for reassembly.", self.frags_received),
            ("reassembled", "Datagrams reassembled.", self.reassembled),
            ("frags_reassembled", "Fragments that went into reassembled datagrams.", self.frags_reassembled),
            ("neigh_arp_requests", "ARP requests sent to resolve or probe next hops.", self.neighbours.arp_requests),
            ("neigh_ns_sent", "Neighbor Solicitations sent to resolve or probe next hops.", self.neighbours.ns_sent),
            ("neigh_probes", "Unicast probes of STALE neighbour entries.", self.neighbours.probes),
            ("neigh_learned", "Neighbours reported by the workers.", self.neighbours.learned),
            ("neigh_reports_lost", "Neighbour reports lost to a full queue.", self.neighbours.reports_lost),
            ("neigh_added", "Learned neighbour entries added.", self.neighbours.added),
            ("neigh_aged_out", "Learned neighbour entries removed unconfirmed.", self.neighbours.aged_out),
            ("neigh_evicted", "Learned neighbour entries evicted from a full table.", self.neighbours.evicted),
        ];
        for (name, help, v) in globals {
            prom_family(&mut o, &format!("secgw_{name}_total"), "counter", help, [(String::new(), v)]);
        }
        prom_family(&mut o, "secgw_frags_pending", "gauge", "Fragments waiting for the rest of their datagram.", [(String::new(), self.frags_pending)]);
        prom_family(&mut o, "secgw_neigh_pending", "gauge", "Packets waiting for a next hop's MAC.", [(String::new(), self.neighbours.pending)]);
        prom_family(&mut o, "secgw_neigh_entries", "gauge", "Neighbour table entries, static and learned.", [(String::new(), self.neighbours.entries)]);
        let pmtu = self.sas.iter().filter_map(|s| s.path_mtu.map(|m| (format!("spi=\"{}\",direction=\"{}\"", s.spi, escape_label(s.direction)), m as u64)));
        prom_family(&mut o, "secgw_sa_path_mtu_bytes", "gauge", "Path MTU to the tunnel end learned from ICMP (RFC 4301 section 8.2.1), outbound tunnel SAs that have one.", pmtu);
        let workers: [Metric<WorkerStats>; 7] = [
            ("handoff_out", "Packets the worker handed to the owner of their SA.", |w| w.handoff_out),
            ("handoff_in", "Packets the worker received from other workers for SAs it owns.", |w| w.handoff_in),
            ("flow_hits", "Packets from protected ports whose SPD answer came from the worker's outbound flow cache.", |w| w.flow_hits),
            ("esp_flow_hits", "ESP packets from unprotected ports whose SA came from the worker's inbound flow cache.", |w| w.esp_flow_hits),
            ("crypto_enqueued", "Crypto ops the worker's queue pair accepted.", |w| w.crypto_enqueued),
            ("crypto_dequeued", "Crypto ops the worker's queue pair handed back, whatever their status.", |w| w.crypto_dequeued),
            ("crypto_refused", "Crypto ops offered to the worker's queue pair and left with the worker (full or stopped), counted at each offer.", |w| w.crypto_refused),
        ];
        for (name, help, f) in workers {
            let samples = self.workers.iter().map(|w| (format!("worker=\"{}\"", w.worker), f(w)));
            prom_family(&mut o, &format!("secgw_worker_{name}_total"), "counter", help, samples);
        }
        o
    }

    /// Reads a snapshot back from its JSON form ([`Snapshot::to_json`], the
    /// `stats` result of the control socket), e.g. to print it as text.
    /// Unknown extra fields are ignored. Errors: a missing field or a value
    /// of the wrong type, a direction other than inbound/outbound, a drop
    /// reason this build does not know (a server of another version).
    // `..Default::default()` keeps this compiling when fields are added.
    #[allow(clippy::needless_update)]
    pub fn from_json_value(v: &serde_json::Value) -> Result<Snapshot, String> {
        let j = <SnapshotJson as serde::Deserialize>::deserialize(v).map_err(|e| format!("not a stats snapshot: {e}"))?;
        let mut drops = BTreeMap::new();
        for (name, n) in j.drops {
            let r = DropReason::ALL.iter().find(|r| r.name() == name).ok_or_else(|| format!("unknown drop reason {name:?}"))?;
            drops.insert(r.name(), n);
        }
        let mut sas = Vec::with_capacity(j.sas.len());
        for s in j.sas {
            let direction = match s.direction.as_str() {
                "outbound" => "outbound",
                "inbound" => "inbound",
                d => return Err(format!("SA {}: unknown direction {d:?}", s.spi)),
            };
            sas.push(SaStats { spi: s.spi, direction, packets: s.packets, bytes: s.bytes, errors: s.errors, dummies: s.dummies, dst: s.dst, path_mtu: s.path_mtu });
        }
        Ok(Snapshot {
            ports: j
                .ports
                .into_iter()
                .map(|p| PortStats {
                    name: p.name,
                    rx_packets: p.rx_packets,
                    rx_bytes: p.rx_bytes,
                    tx_packets: p.tx_packets,
                    tx_bytes: p.tx_bytes,
                    drops: p.drops,
                    rx_dropped_backend: p.rx_dropped_backend,
                    ..Default::default()
                })
                .collect(),
            sas,
            drops,
            arp_replies: j.arp_replies,
            nd_replies: j.nd_replies,
            frags_sent: j.frags_sent,
            dummies_sent: j.dummies_sent,
            icmp_sent: j.icmp_sent,
            icmp_rate_limited: j.icmp_rate_limited,
            echo_replies: j.echo_replies,
            frags_received: j.frags_received,
            reassembled: j.reassembled,
            frags_reassembled: j.frags_reassembled,
            frags_pending: j.frags_pending,
            neighbours: j.neighbours,
            workers: j
                .workers
                .into_iter()
                .map(|w| WorkerStats {
                    worker: w.worker,
                    handoff_out: w.handoff_out,
                    handoff_in: w.handoff_in,
                    flow_hits: w.flow_hits,
                    esp_flow_hits: w.esp_flow_hits,
                    crypto_enqueued: w.crypto_enqueued,
                    crypto_dequeued: w.crypto_dequeued,
                    crypto_refused: w.crypto_refused,
                })
                .collect(),
            ..Default::default()
        })
    }
}
