//! The SA manager: the control thread's live SAD and SPD.
//!
//! It holds every installed SA with its session, owner worker, slot and
//! life, and the policies; it adds, deletes and rekeys SAs make-before-break
//! and publishes each change as a new [`Tables`] snapshot (the workers only
//! ever see snapshots). An SA that goes is first made unreachable (a rekeyed
//! outbound SA: the policies name the new one; a rekeyed inbound SA: after
//! the grace period its SPI stops matching), then, once every worker has
//! quiesced past that snapshot (no op prepared with it is in flight), its
//! session is detached from its owner's queue pair and freed. Lifetimes
//! (RFC 4301 §4.4.2.1): the workers count packets and bytes and raise the
//! flags; [`Manager::tick`] watches seconds and turns flags into events.
//!
//! Time is passed in (`now`), so the manager is testable without sleeping.

use super::binding::{self, Binding};
use super::keys::{KeyRegister, KeyUser};
use super::protocol::{Command, CtlError, ErrorCode, Event, EventKind, StatsFormat};
use super::socket::CtlHandler;
use super::tables;
use super::ControlError;
use crate::config::model::{self, Action, Config, Direction};
use crate::crypto::{CryptoDevice, CryptoError, Session};
use crate::dataplane::worker::MAX_SA_SLOTS;
use crate::dataplane::{DropReason, WorkerCounters};
use crate::esp::lifetime::Expiry;
use crate::esp::SaLife;
use crate::policy::neighbour::{NeighbourConf, NeighbourTable};
use crate::policy::route::Routes;
use crate::policy::sad::Sad;
use crate::policy::spd::{Selector, Spd, SpdAction, SpdEntry};
use crate::policy::{PortInfo, Tables};
use arc_swap::ArcSwap;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How long a rekeyed outbound SA stays in its slot after the policies
/// moved to its successor: packets classified under the older snapshot and
/// still in a handoff ring find it.
const OUTBOUND_GRACE: Duration = Duration::from_millis(100);
/// How often [`Manager::tick`] checks time limits and flags.
const LIFETIME_SCAN: Duration = Duration::from_millis(100);

/// Why a manager request failed (mapped to the control protocol's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MgrErrorKind {
    /// No such SA.
    NotFound,
    /// The SA exists already.
    Exists,
    /// Invalid input (config fragment, key length, …).
    Invalid,
    /// The crypto device refused.
    Device,
    /// No room now (queue pair full, slots exhausted).
    Busy,
}

/// A failed manager request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct MgrError {
    /// What kind of failure.
    pub kind: MgrErrorKind,
    /// What happened, for the operator.
    pub message: String,
}

fn err(kind: MgrErrorKind, message: impl Into<String>) -> MgrError {
    MgrError { kind, message: message.into() }
}

impl From<ControlError> for MgrError {
    fn from(e: ControlError) -> Self {
        let kind = match e {
            ControlError::Crypto(_) => MgrErrorKind::Device,
            _ => MgrErrorKind::Invalid,
        };
        err(kind, e.to_string())
    }
}

impl From<CryptoError> for MgrError {
    fn from(e: CryptoError) -> Self {
        err(MgrErrorKind::Device, format!("crypto device: {e}"))
    }
}

/// Something that happened to an SA, for the event stream and the log.
#[derive(Debug, Clone, PartialEq)]
pub struct MgrEvent {
    /// "added", "deleted", "rekeyed", "soft_expired", "hard_expired", "error".
    pub kind: &'static str,
    /// The SA's SPI (for "rekeyed": the old one).
    pub spi: u32,
    /// "outbound" / "inbound".
    pub direction: &'static str,
    /// The SA's tunnel_dst when it is found by SPI and destination (inbound
    /// tunnel SAs), so SAs sharing an SPI are told apart.
    pub dst: Option<IpAddr>,
    /// Which limit ("packets", "bytes", "seconds", "sequence"), for expiries.
    pub reason: Option<&'static str>,
    /// Human text.
    pub message: String,
    /// Unix time in seconds.
    pub time: f64,
    /// The new SPI ("rekeyed").
    pub new_spi: Option<u32>,
    /// The SA's packets so far (final for "deleted").
    pub packets: Option<u64>,
    /// The SA's bytes so far.
    pub bytes: Option<u64>,
}

/// "outbound" / "inbound".
pub fn dir_name(d: Direction) -> &'static str {
    match d {
        Direction::Outbound => "outbound",
        Direction::Inbound => "inbound",
    }
}

/// What differs between the running config's ports and a reloaded file's,
/// for the refusal message: `port outside: mtu 1500 → 1400`, ports added or
/// removed by name. Empty when the ports are the same.
fn port_changes(old: &[model::Port], new: &[model::Port]) -> Vec<String> {
    let mut out = Vec::new();
    for o in old {
        let Some(n) = new.iter().find(|n| n.name == o.name) else {
            out.push(format!("port {} removed", o.name));
            continue;
        };
        let fields: [(&str, String, String); 9] = [
            ("interface", o.interface.clone(), n.interface.clone()),
            ("role", format!("{:?}", o.role), format!("{:?}", n.role)),
            ("mac", mac_text(o.mac), mac_text(n.mac)),
            ("addresses", addresses_text(&o.addresses), addresses_text(&n.addresses)),
            ("queue", o.queue.to_string(), n.queue.to_string()),
            ("mtu", o.mtu.to_string(), n.mtu.to_string()),
            ("xdp_mode", format!("{:?}", o.xdp_mode), format!("{:?}", n.xdp_mode)),
            ("peer_mac", mac_text(o.peer_mac), mac_text(n.peer_mac)),
            ("ring_size", o.ring_size.to_string(), n.ring_size.to_string()),
        ];
        for (f, a, b) in fields {
            if a != b {
                out.push(format!("port {}: {f} {a} → {b}", o.name));
            }
        }
    }
    out.extend(new.iter().filter(|n| !old.iter().any(|o| o.name == n.name)).map(|n| format!("port {} added", n.name)));
    if out.is_empty() && !old.iter().map(|p| &p.name).eq(new.iter().map(|p| &p.name)) {
        // Same ports and fields, another order (port ids follow it).
        out.push("port order".into());
    }
    out
}

/// "02:00:00:00:00:01", or "none".
fn mac_text(m: Option<model::Mac>) -> String {
    m.map_or_else(|| "none".into(), |m| crate::wire::ethernet::fmt_mac(&m))
}

/// A port's addresses as the gateway uses them: the IPv4 ones in order,
/// then the IPv6 ones in order ("192.0.2.1/24, 2001:db8::1/64"; "none").
/// Only the order within a family matters (the first of a family is the
/// source of the port's ICMP errors, `v4_source`/`v6_source` take the
/// first that fits), so a file that interleaves the families differently
/// (a DPDK `.cfg` lists them in SA order) changes nothing.
fn addresses_text(a: &[(IpAddr, u8)]) -> String {
    let text: Vec<String> = a.iter().filter(|x| x.0.is_ipv4()).chain(a.iter().filter(|x| x.0.is_ipv6())).map(|(ip, len)| format!("{ip}/{len}")).collect();
    if text.is_empty() { "none".into() } else { text.join(", ") }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// An installed SA's identity: SPI, direction and [`model::Sa::sad_dst`]
/// (`Some(tunnel_dst)` for inbound tunnel-mode SAs, which may share an SPI
/// when their `tunnel_dst` differ; RFC 4301 §4.1).
type SaKey = (u32, Direction, Option<IpAddr>);

fn key_of(sa: &model::Sa) -> SaKey {
    (sa.spi, sa.direction, sa.sad_dst())
}

/// The config fields of an SA that differ between `a` and `b` (names as
/// in the file), for messages.
fn sa_changes(a: &model::Sa, b: &model::Sa) -> Vec<&'static str> {
    let mut c = Vec::new();
    let mut note = |differs: bool, name: &'static str| {
        if differs {
            c.push(name);
        }
    };
    note(a.mode != b.mode, "mode");
    note(a.algorithm != b.algorithm, "algorithm");
    note(a.icv_len != b.icv_len, "icv_len");
    note(a.tunnel_src != b.tunnel_src, "tunnel_src");
    note(a.tunnel_dst != b.tunnel_dst, "tunnel_dst");
    note(a.replay_window != b.replay_window, "replay_window");
    note(a.outer_ttl != b.outer_ttl, "outer_ttl");
    note(a.df != b.df, "df");
    note(a.worker != b.worker, "worker");
    note(a.esn != b.esn, "esn");
    note(a.udp_encap != b.udp_encap, "udp_encap");
    note(a.udp_sport != b.udp_sport, "udp_sport");
    note(a.udp_dport != b.udp_dport, "udp_dport");
    note(a.dummy_interval_ms != b.dummy_interval_ms, "dummy_interval_ms");
    note(a.dummy_len != b.dummy_len, "dummy_len");
    note(a.tfc_pad_to != b.tfc_pad_to, "tfc_pad_to");
    note(a.pad_align != b.pad_align, "pad_align");
    note(a.lifetime != b.lifetime, "lifetime");
    note(a.first_seq != b.first_seq, "first_seq");
    if c.is_empty() {
        c.push("settings");
    }
    c
}

/// " (tunnel_dst A)" for an SA found by SPI and destination, for messages.
fn dst_note(dst: Option<IpAddr>) -> String {
    dst.map_or(String::new(), |d| format!(" (tunnel_dst {d})"))
}

/// `table.field old → new` for each field of `$ty` (every field listed:
/// the destructuring fails to compile when one is added) that differs
/// between `$old` and `$new`, e.g. `gateway.name "gw0" → "gwX"`, for a
/// reload's refusal; `[table]` alone if none does.
macro_rules! changes {
    ($table:literal, $ty:path, $old:expr, $new:expr, $($f:ident),*) => {{
        let (old, new) = ($old, $new);
        let mut out: Vec<String> = Vec::new();
        $(
            if old.$f != new.$f {
                out.push(format!("{}.{} {:?} → {:?}", $table, stringify!($f), old.$f, new.$f));
            }
        )*
        let $ty { $($f: _),* } = old;
        if out.is_empty() {
            out.push(format!("[{}]", $table));
        }
        out.join(", ")
    }};
}

/// What changed in `[gateway]` from `old` to `new`, each field with its
/// values (`gateway.name "gw0" → "gwX"`), for a reload's refusal.
fn gateway_changes(old: &model::Gateway, new: &model::Gateway) -> String {
    changes!("gateway", model::Gateway, old, new, name, workers, cores, stats_interval, outer_ttl, burst, idle_sleep_us, idle_spin_us, pmtu_timeout_s, pool_size, handoff_depth, icmp_echo)
}

/// The order SAs are reported in when several change at once (events,
/// log lines): by SPI, then direction, then destination.
fn key_order((spi, d, dst): SaKey) -> (u32, u8, Option<std::net::IpAddr>) {
    (spi, d as u8, dst)
}

/// `{"spi", "direction", "tunnel_dst"?}` of an SA in answers (tunnel_dst
/// for SAs found by SPI and destination).
fn sa_id_json((spi, d, dst): SaKey) -> Value {
    let mut v = json!({"spi": spi, "direction": dir_name(d)});
    if let Some(a) = dst {
        v["tunnel_dst"] = json!(a.to_string());
    }
    v
}

/// An installed SA.
struct Live {
    sa: model::Sa,
    slot: usize,
    id: u32,
    owner: usize,
    session: Arc<Session>,
    life: Arc<SaLife>,
    since: Instant,
    reported_soft: bool,
    reported_hard: bool,
}

#[derive(Clone, Copy)]
enum Stage {
    /// Still in its slot (and, inbound, matched by SPI) until then.
    Grace(Instant),
    /// Out of the tables from this snapshot version on; waiting for the
    /// workers to quiesce past it.
    Draining(u64),
}

/// An SA on its way out.
struct Retiring {
    live: Live,
    direction: Direction,
    stage: Stage,
    /// Its session was detached already (limit-1 rekey).
    detached: bool,
    why: &'static str,
    /// Its packet count when it began to retire, and the last count seen
    /// with when it last grew: an inbound SA still receiving at the end
    /// of its grace has a peer that has not switched away from it.
    packets_then: u64,
    packets_seen: (u64, Option<Instant>),
}

/// An inbound SA that received within this much of its grace's end is
/// reported as still in use by its peer when it goes.
const STILL_RECEIVING: Duration = Duration::from_secs(1);
/// At most one `no_sa` (or `replay`) warning per this long.
const NO_SA_WARN_EVERY: Duration = Duration::from_secs(10);
/// Replays within a second that make a warning.
const REPLAY_BURST: u64 = 64;

/// State of [`Manager::watch_drops`]: when it last looked, and per
/// watched reason the count summed over the workers it compares with and
/// when it last warned.
#[derive(Default)]
struct DropWatch {
    looked: Option<Instant>,
    /// ESP `no_sa` drops at the last warning (a warning covers all since).
    no_sa: u64,
    no_sa_warned: Option<Instant>,
    /// The other `no_sa` drops (an SA gone under its packets), likewise.
    no_sa_gone: u64,
    no_sa_gone_warned: Option<Instant>,
    /// `replay` drops at the last look (a warning covers one second).
    replay: u64,
    replay_warned: Option<Instant>,
}

/// Where snapshots go, and the counters of the workers that take them.
type Publisher = (Arc<ArcSwap<Tables>>, Vec<Arc<WorkerCounters>>);

/// The control thread's SAD/SPD and the publisher of table snapshots.
pub struct Manager<'d, D: CryptoDevice> {
    dev: &'d D,
    cfg: Config,
    binding: Binding,
    /// Sessions per queue pair are limited (and attached) when > 0.
    limit: usize,
    /// Sessions held per queue pair (retiring ones until freed), on any
    /// device: checked against `limit`, and the choice of a new SA's worker.
    per_qp: Vec<usize>,
    nworkers: usize,
    grace: Duration,
    ports: Arc<Vec<PortInfo>>,
    routes: Arc<Routes>,
    neighbours: NeighbourTable,
    spd: Option<(Arc<Spd>, Arc<Spd>)>,
    sad: Sad,
    free_out: Vec<usize>,
    free_in: Vec<usize>,
    live: HashMap<SaKey, Live>,
    /// (SPI, direction) → the `sad_dst` of each installed SA with them (one
    /// entry, except inbound tunnel SAs sharing an SPI).
    by_spi: HashMap<(u32, Direction), Vec<Option<IpAddr>>>,
    /// Selectors of the inbound policies naming each inbound SPI (an SPI
    /// shared by several inbound SAs gives them all its policies).
    in_selectors: HashMap<u32, Vec<Selector>>,
    policies: Vec<model::Policy>,
    retiring: Vec<Retiring>,
    /// What [`Manager::watch_drops`] saw and said last.
    drop_watch: DropWatch,
    /// Counter-mode key material installed SAs hold and gone SAs held:
    /// a new SA may not take it ([`Self::key_reuse_refused`]).
    keys: KeyRegister,
    events: Vec<MgrEvent>,
    next_id: u32,
    version: u64,
    dirty: bool,
    /// Queue pairs stopped for a limit-1 session swap, started after the
    /// next publish.
    restart: Vec<u16>,
    publisher: Option<Publisher>,
    last_scan: Option<Instant>,
    /// How long [`Manager::publish`] waits for every worker to adopt a new
    /// snapshot (zero: it does not wait).
    adopt_wait: Duration,
    /// The control socket's path came from the command line (`--socket`):
    /// the file's `control.socket` is not in use, so a reload may change it.
    socket_from_command_line: bool,
    /// Set when the gateway is stopping: its workers are leaving and will
    /// adopt nothing more, so [`Manager::publish`] stops waiting for them.
    stopping: Option<Arc<AtomicBool>>,
}

/// The neighbour table settings of `cfg` (`[neighbour_table]`).
pub fn neighbour_conf(cfg: &Config) -> NeighbourConf {
    let n = &cfg.neighbour_table;
    NeighbourConf {
        max_entries: n.max_entries,
        reachable: Duration::from_millis(n.reachable_ms),
        retrans: Duration::from_millis(n.retrans_ms),
    }
}

impl<'d, D: CryptoDevice> Manager<'d, D> {
    /// Installs every SA and policy of `cfg` on `dev`: binds the SAs to
    /// workers ([`binding::bind`]), creates their sessions and, on a device
    /// with a per-queue-pair session limit, attaches each to its owner's
    /// queue pair. `macs[i]` is port `i`'s MAC. Nothing is published until
    /// [`Manager::start_publishing`]; [`Manager::tables_now`] builds the
    /// first snapshot. Errors: SAs that do not fit the limit, an
    /// unsupported transform, a refused attach.
    pub fn new(cfg: &Config, dev: &'d D, macs: &[[u8; 6]]) -> Result<Self, ControlError> {
        let info = dev.info();
        let limit = if info.max_sessions_per_qp > 0 && info.flags.attach_sessions { info.max_sessions_per_qp as usize } else { 0 };
        let binding = binding::bind(cfg, info.max_sessions_per_qp)?;
        let nworkers = cfg.gateway.workers.max(1);
        let mut m = Manager {
            dev,
            cfg: cfg.clone(),
            binding: binding.clone(),
            limit,
            per_qp: vec![0; nworkers],
            nworkers,
            grace: Duration::from_millis(5000),
            ports: Arc::new(tables::ports(cfg, macs)),
            routes: Arc::new(tables::routes(cfg)),
            neighbours: NeighbourTable::new(neighbour_conf(cfg), cfg.neighbours.iter().map(|n| (n.ip, n.mac))),
            spd: None,
            sad: Sad::default(),
            free_out: Vec::new(),
            free_in: Vec::new(),
            live: HashMap::with_capacity(cfg.sas.len()),
            by_spi: HashMap::with_capacity(cfg.sas.len()),
            in_selectors: HashMap::new(),
            policies: Vec::new(),
            retiring: Vec::new(),
            drop_watch: DropWatch::default(),
            keys: KeyRegister::default(),
            events: Vec::new(),
            next_id: 1,
            version: 0,
            dirty: true,
            restart: Vec::new(),
            publisher: None,
            last_scan: None,
            adopt_wait: Duration::ZERO,
            socket_from_command_line: false,
            stopping: None,
        };
        m.set_policies(cfg.policies.clone());
        for (i, sa) in cfg.sas.iter().enumerate() {
            m.install(sa.clone(), binding.owner[i], Instant::now()).map_err(|e| ControlError::Unsupported(e.message))?;
        }
        Ok(m)
    }

    /// The initial SA → worker binding.
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// How long a rekeyed inbound SA keeps being accepted (default 5 s).
    pub fn set_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    /// How long [`Manager::publish`] waits, at most, until every worker
    /// classifies with the snapshot it stored (default zero: no wait, for
    /// callers that poll the workers themselves). `secgw run` sets 1 s.
    pub fn set_adopt_wait(&mut self, wait: Duration) {
        self.adopt_wait = wait;
    }

    /// The control socket's path was given on the command line (`secgw run
    /// --socket`): [`Manager::reload`] then takes a file whose
    /// `control.socket` (or the `gateway.name` it defaults from) changed,
    /// as that setting is not the one in use.
    pub fn set_socket_from_command_line(&mut self, yes: bool) {
        self.socket_from_command_line = yes;
    }

    /// The gateway's stop flag (`secgw run`'s SIGINT/SIGTERM flag, which
    /// its workers obey): once it is set, [`Manager::publish`] no longer
    /// waits for workers that are leaving (a request answered during
    /// shutdown would otherwise hold the shutdown up to the adopt wait).
    pub fn set_stop_flag(&mut self, stop: Arc<AtomicBool>) {
        self.stopping = Some(stop);
    }

    /// A snapshot of the tables as they are now (version: the last
    /// published, 0 before any).
    pub fn tables_now(&mut self) -> Tables {
        let (spd_out, spd_in) = self.spd();
        let mut natt_ports = vec![crate::wire::udp::NATT_PORT];
        for (_, e) in self.sad.inbound_sas() {
            if let Some(p) = e.udp_dport {
                if !natt_ports.contains(&p) {
                    natt_ports.push(p);
                }
            }
        }
        Tables {
            version: self.version,
            ports: self.ports.clone(),
            spd_out,
            spd_in,
            sad: self.sad.clone(),
            routes: self.routes.clone(),
            neighbours: self.neighbours.cell().clone(),
            natt_ports,
            ours4: self.ports.iter().flat_map(|p| p.addresses.iter().copied()).collect(),
            ours6: self.ports.iter().flat_map(|p| p.addresses6.iter().copied()).collect(),
            bcast4: self.ports.iter().flat_map(|p| p.broadcast4.iter().copied()).collect(),
        }
    }

    /// From now on changes are published to `tables`, and SAs are freed
    /// only once every worker of `workers` has quiesced past them.
    pub fn start_publishing(&mut self, tables: Arc<ArcSwap<Tables>>, workers: Vec<Arc<WorkerCounters>>) {
        self.publisher = Some((tables, workers));
        self.dirty = true;
        self.publish();
    }

    /// Publishes a new snapshot if anything changed since the last one,
    /// waits (up to [`Manager::set_adopt_wait`]) until every worker has
    /// taken it, then starts queue pairs stopped for a session swap.
    ///
    /// The wait makes "done" true for the peer: a worker takes the tables
    /// once per poll and classifies that poll's frames with them, so
    /// without it a frame the peer sends right after our answer (an
    /// inbound rekey: the new SPI) can meet the older snapshot and be
    /// dropped as `no_sa`.
    pub fn publish(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        self.version += 1;
        let t = self.tables_now();
        if let Some((tables, workers)) = &self.publisher {
            tables.store(Arc::new(t));
            let deadline = Instant::now() + self.adopt_wait;
            while !self.adopt_wait.is_zero() && workers.iter().any(|c| c.adopted.get() < self.version) {
                if self.stopping.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
                    break;
                }
                if Instant::now() >= deadline {
                    tracing::warn!(version = self.version, wait_ms = self.adopt_wait.as_millis() as u64, "a worker has not taken the new tables yet");
                    break;
                }
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        for qp in std::mem::take(&mut self.restart) {
            if let Err(e) = self.dev.queue_pair_start(qp) {
                tracing::error!(qp, error = %e, "could not restart queue pair");
            }
        }
    }

    /// The current snapshot of the counters.
    pub fn stats(&self) -> super::stats::Snapshot {
        match &self.publisher {
            Some((t, w)) => super::stats::snapshot(&t.load(), w),
            None => super::stats::Snapshot::default(),
        }
    }

    /// Takes the events that happened since the last call.
    pub fn take_events(&mut self) -> Vec<MgrEvent> {
        std::mem::take(&mut self.events)
    }

    fn event(&mut self, kind: &'static str, (spi, d, dst): SaKey, message: String, life: Option<&SaLife>) {
        match kind {
            "error" | "hard_expired" => tracing::warn!(spi, direction = dir_name(d), "{message}"),
            _ => tracing::info!(spi, direction = dir_name(d), "{message}"),
        }
        self.events.push(MgrEvent {
            kind,
            spi,
            direction: dir_name(d),
            dst,
            reason: None,
            message,
            time: unix_now(),
            new_spi: None,
            packets: life.map(|l| l.counters.packets.get()),
            bytes: life.map(|l| l.counters.bytes.get()),
        });
    }

    fn spd(&mut self) -> (Arc<Spd>, Arc<Spd>) {
        if let Some(s) = &self.spd {
            return s.clone();
        }
        let (mut out, mut inb) = (Vec::new(), Vec::new());
        for p in &self.policies {
            let action = match p.action {
                Action::Bypass => SpdAction::Bypass,
                Action::Discard => SpdAction::Discard,
                Action::Protect(spi) => match self.keys(spi, p.direction).next().and_then(|k| self.live.get(&k)) {
                    Some(l) => SpdAction::Protect(l.slot),
                    // Cannot happen (policies go with their SA); never
                    // forward what should have been protected.
                    None => SpdAction::Discard,
                },
            };
            let e = SpdEntry { selector: tables::selector(p), priority: p.priority, action };
            match p.direction {
                Direction::Outbound => out.push(e),
                Direction::Inbound => inb.push(e),
            }
        }
        let s = (Arc::new(Spd::new(out)), Arc::new(Spd::new(inb)));
        self.spd = Some(s.clone());
        s
    }

    /// Replaces the policies; inbound SAs get the selectors of the
    /// policies that name them.
    fn set_policies(&mut self, policies: Vec<model::Policy>) {
        self.in_selectors.clear();
        for p in &policies {
            if let (Direction::Inbound, Action::Protect(spi)) = (p.direction, p.action) {
                self.in_selectors.entry(spi).or_default().push(tables::selector(p));
            }
        }
        self.policies = policies;
        self.spd = None;
        self.dirty = true;
        let keys: Vec<SaKey> = self.live.keys().filter(|k| k.1 == Direction::Inbound).copied().collect();
        for k in keys {
            self.refresh_inbound(k);
        }
    }

    /// Appends policies (`sa add`): only the inbound SAs they name get new
    /// selectors, so the cost is that of the new policies, not of every SA.
    fn add_policies(&mut self, new: Vec<model::Policy>) {
        let mut touched = Vec::new();
        for p in &new {
            if let (Direction::Inbound, Action::Protect(spi)) = (p.direction, p.action) {
                self.in_selectors.entry(spi).or_default().push(tables::selector(p));
                touched.push(spi);
            }
        }
        self.policies.extend(new);
        self.spd = None;
        self.dirty = true;
        for spi in touched {
            for k in self.keys(spi, Direction::Inbound).collect::<Vec<_>>() {
                self.refresh_inbound(k);
            }
        }
    }

    /// The installed SAs with SPI `spi` and direction `d`.
    fn keys(&self, spi: u32, d: Direction) -> impl Iterator<Item = SaKey> + '_ {
        self.by_spi.get(&(spi, d)).into_iter().flatten().map(move |&dst| (spi, d, dst))
    }

    /// Installs `l` under its key (and in the SPI index).
    fn live_insert(&mut self, l: Live) {
        let k = key_of(&l.sa);
        let dsts = self.by_spi.entry((k.0, k.1)).or_default();
        if !dsts.contains(&k.2) {
            dsts.push(k.2);
        }
        self.live.insert(k, l);
    }

    /// Takes the SA with key `k` out of `live` (and the SPI index).
    fn live_remove(&mut self, k: SaKey) -> Option<Live> {
        let l = self.live.remove(&k)?;
        if let Some(dsts) = self.by_spi.get_mut(&(k.0, k.1)) {
            dsts.retain(|d| *d != k.2);
            if dsts.is_empty() {
                self.by_spi.remove(&(k.0, k.1));
            }
        }
        Some(l)
    }

    /// Rebuilds the inbound entry of SA `k` with its SPI's current
    /// selectors (same id and life: the owner keeps its replay window).
    fn refresh_inbound(&mut self, k: SaKey) {
        let Some(l) = self.live.get(&k) else { return };
        let sel = self.in_selectors.get(&k.0).cloned().unwrap_or_default();
        if self.sad.inbound_at(l.slot).is_some_and(|e| e.selectors == sel) {
            return;
        }
        let e = tables::inbound_entry(&l.sa, l.session.clone(), l.owner, l.id, l.life.clone(), sel);
        self.sad.set_inbound(l.slot, Some(Arc::new(e)));
        self.dirty = true;
    }

    fn alloc_slot(&mut self, d: Direction) -> Result<usize, MgrError> {
        let (free, used) = match d {
            Direction::Outbound => (&mut self.free_out, self.sad.outbound.len()),
            Direction::Inbound => (&mut self.free_in, self.sad.inbound.len()),
        };
        if let Some(s) = free.pop() {
            return Ok(s);
        }
        if used >= MAX_SA_SLOTS {
            return Err(err(MgrErrorKind::Busy, format!("no free {} SA slot ({MAX_SA_SLOTS} in use)", dir_name(d))));
        }
        Ok(used)
    }

    /// The worker a new SA goes to: its pin, else the queue pair with the
    /// fewest sessions, counting `pending[w]` more on worker `w` (sessions
    /// a caller is about to attach: [`Self::reload_fits`]; `&[]` for none).
    fn pick_owner(&self, sa: &model::Sa, pending: &[usize]) -> Result<usize, MgrError> {
        if let Some(w) = sa.worker {
            if w >= self.nworkers {
                return Err(err(MgrErrorKind::Invalid, format!("SA {}: pinned to worker {w}, but gateway.workers = {}", sa.spi, self.nworkers)));
            }
            return Ok(w);
        }
        let w = (0..self.nworkers).min_by_key(|&w| self.per_qp[w] + pending.get(w).copied().unwrap_or(0)).unwrap_or(0);
        Ok(w)
    }

    /// The worker of `sa` replacing (in a reload) an SA owned by `owner`:
    /// a replacement is a new SA (new session, sequence numbers from 1),
    /// so a pin in the file moves it ([`Self::pick_owner`]); else it stays.
    fn replacement_owner(&self, sa: &model::Sa, owner: usize, pending: &[usize]) -> Result<usize, MgrError> {
        if sa.worker.is_some() {
            self.pick_owner(sa, pending)
        } else {
            Ok(owner)
        }
    }

    /// Creates the session of `sa`, attaches it to `owner`'s queue pair
    /// (limited devices), puts it in a slot. Not published yet.
    fn install(&mut self, sa: model::Sa, owner: usize, now: Instant) -> Result<(), MgrError> {
        let d = sa.direction;
        if let Some((what, hint)) = self.keys(sa.spi, d).find_map(|k| model::spi_clash(d, sa.spi, sa.sad_dst(), k.2)) {
            return Err(err(MgrErrorKind::Exists, format!("an {what} is installed already{hint}")));
        }
        self.retiring_clash(sa.spi, d, sa.sad_dst(), now)?;
        if self.limit > 0 && self.per_qp[owner] >= self.limit {
            return Err(err(
                MgrErrorKind::Busy,
                format!(
                    "queue pair {owner} holds {} session(s), its limit (max_sessions_per_qp = {}){}; a new SA (and a rekey, whose new session is attached beside the old one) needs room there: delete an SA of worker {owner}, or raise the limit",
                    self.per_qp[owner],
                    self.limit,
                    self.retiring_note(owner, now)
                ),
            ));
        }
        let slot = self.alloc_slot(d)?;
        let session = match tables::session(self.dev, &sa) {
            Ok(s) => s,
            Err(e) => {
                self.release_slot(d, slot);
                return Err(e.into());
            }
        };
        if self.limit > 0 {
            if let Err(e) = self.dev.queue_pair_attach_session(owner as u16, &session) {
                let _ = self.dev.session_free(session);
                self.release_slot(d, slot);
                return Err(e.into());
            }
        }
        // Counted on any device: the count also spreads new SAs over the
        // workers (`pick_owner`), limit or not.
        self.per_qp[owner] += 1;
        self.place(sa, slot, owner, session, now)
    }

    fn release_slot(&mut self, d: Direction, slot: usize) {
        match d {
            Direction::Outbound => self.free_out.push(slot),
            Direction::Inbound => self.free_in.push(slot),
        }
    }

    /// Puts an SA with its (attached) session in `slot`.
    fn place(&mut self, sa: model::Sa, slot: usize, owner: usize, session: Arc<Session>, now: Instant) -> Result<(), MgrError> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let life = Arc::new(SaLife::new(sa.lifetime));
        match sa.direction {
            Direction::Outbound => {
                let o = match tables::outbound_sa(&self.cfg.gateway, &sa, session.clone(), owner, id, life.clone()) {
                    Ok(o) => o,
                    Err(e) => {
                        self.release_slot(Direction::Outbound, slot);
                        return Err(e.into());
                    }
                };
                self.sad.set_outbound(slot, Some(Arc::new(o)));
                // A policy naming it is added after it (`sa add`) or moved
                // to it (`rekey`, `reload`), and that resets the SPD: a new
                // SA alone leaves the SPD as it is.
            }
            Direction::Inbound => {
                let sel = self.in_selectors.get(&sa.spi).cloned().unwrap_or_default();
                let e = tables::inbound_entry(&sa, session.clone(), owner, id, life.clone(), sel);
                self.sad.set_inbound(slot, Some(Arc::new(e)));
            }
        }
        if KeyRegister::watched(&sa) {
            self.keys.note(&sa.key, KeyUser { id, sa: key_of(&sa), algorithm: sa.algorithm, gone: false });
        }
        self.live_insert(Live { sa, slot, id, owner, session, life, since: now, reported_soft: false, reported_hard: false });
        self.dirty = true;
        Ok(())
    }

    /// The installed SAs with this SPI and direction, each as (`sad_dst`,
    /// v4_only), v4_only for transport SAs with UDP encapsulation (for
    /// [`crate::config::parse_fragment`]).
    fn installed(&self, spi: u32, d: Direction) -> Vec<(Option<IpAddr>, bool)> {
        self.keys(spi, d).filter_map(|k| self.live.get(&k)).map(|l| (l.sa.sad_dst(), l.sa.mode == model::SaMode::Transport && l.sa.udp_encap)).collect()
    }

    /// `sa add`: validates `text` (a fragment of `[[sa]]` and `[[policy]]`
    /// tables, see [`crate::config::parse_fragment`]) and installs it; all
    /// or nothing. Published with the next [`Manager::publish`]. `Invalid`
    /// also for key material another SA holds or held
    /// ([`Self::key_reuse_refused`]), and for a fragment with no table.
    pub fn add(&mut self, text: &str, now: Instant) -> Result<Value, MgrError> {
        let frag = {
            let installed = |spi, d| self.installed(spi, d);
            crate::config::parse_fragment(text, std::path::Path::new("<sa add>"), &self.cfg, &installed).map_err(|e| {
                // A fragment whose only fault is an SA installed already is
                // `exists`, not `invalid`: the caller may rekey or delete.
                let dup = matches!(&e, crate::config::ConfigError::Invalid(ps)
                    if ps.iter().all(|p| p.field.ends_with(".spi") && p.message.contains("installed already")));
                err(if dup { MgrErrorKind::Exists } else { MgrErrorKind::Invalid }, e.to_string())
            })?
        };
        // An empty fragment (a wrong file, say) would "succeed" at nothing.
        if frag.sas.is_empty() && frag.policies.is_empty() {
            return Err(err(MgrErrorKind::Invalid, "<sa add>: the fragment has no [[sa]] or [[policy]] table: nothing to add"));
        }
        for sa in &frag.sas {
            self.key_reuse_refused(sa)?;
        }
        let warnings = self.fragment_warnings(&frag, text);
        let mut done: Vec<SaKey> = Vec::with_capacity(frag.sas.len());
        for sa in frag.sas {
            let key = key_of(&sa);
            let r = match self.pick_owner(&sa, &[]) {
                Ok(w) => self.every_qp_full(&sa, w, now).and_then(|()| self.install(sa, w, now)).map_err(|e| self.rolled_back_note(e, &done, w)),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                for k in done {
                    self.remove_now(k);
                }
                return Err(e);
            }
            done.push(key);
        }
        let npol = frag.policies.len();
        if npol > 0 {
            self.add_policies(frag.policies);
        }
        for &(spi, d, dst) in &done {
            let owner = self.live.get(&(spi, d, dst)).map_or(0, |l| l.owner);
            self.event("added", (spi, d, dst), format!("SA {spi} {}{} added on worker {owner}", dir_name(d), dst_note(dst)), None);
        }
        let mut result = json!({ "added": done.iter().map(|&k| sa_id_json(k)).collect::<Vec<_>>(), "policies": npol });
        if !warnings.is_empty() {
            result["warnings"] = json!(warnings);
        }
        Ok(result)
    }

    /// What `secgw check` would warn about in the fragment's entries
    /// ([`crate::config::fragment_warnings`]), with the running SAs and
    /// SPD around them: the fragment's policies go after the installed ones,
    /// as [`Self::add_policies`] puts them. (No check of an SA looks at
    /// other SAs, so the installed ones are left out.)
    fn fragment_warnings(&self, frag: &crate::config::Fragment, text: &str) -> Vec<String> {
        let mut policies = self.policies.clone();
        let installed = policies.len();
        policies.extend(frag.policies.iter().cloned());
        let c = &self.cfg;
        // Field by field: `..c.clone()` would copy the file's SAs too.
        let merged = Config {
            source: c.source.clone(),
            gateway: c.gateway.clone(),
            crypto: c.crypto.clone(),
            reassembly: c.reassembly,
            neighbour_table: c.neighbour_table,
            control: c.control.clone(),
            ports: c.ports.clone(),
            sas: frag.sas.clone(),
            policies,
            routes: c.routes.clone(),
            neighbours: c.neighbours.clone(),
            dpdk_import: None,
        };
        crate::config::fragment_warnings(&merged, 0, installed, text, std::path::Path::new("<sa add>"))
    }

    /// `Busy` for a new SA not pinned to a worker when every queue pair
    /// (of two or more) holds its limit of sessions, naming each one's
    /// count; `w` is the owner [`Self::pick_owner`] chose. (With one queue
    /// pair, or a pinned SA, [`Self::install`] names the queue pair.)
    fn every_qp_full(&self, sa: &model::Sa, w: usize, now: Instant) -> Result<(), MgrError> {
        if self.limit == 0 || sa.worker.is_some() || self.per_qp.len() < 2 || self.per_qp.iter().any(|&n| n < self.limit) {
            return Ok(());
        }
        let held: Vec<String> = self.per_qp.iter().enumerate().map(|(q, n)| format!("{q}: {n}")).collect();
        Err(err(
            MgrErrorKind::Busy,
            format!(
                "every queue pair holds its limit of sessions (max_sessions_per_qp = {}; held per queue pair {}){}; a new SA needs room on one: delete an SA, or raise the limit",
                self.limit,
                held.join(", "),
                self.retiring_note(w, now)
            ),
        ))
    }

    /// `e` (an `add` refused on worker `w` after it installed the SAs
    /// `done` of the same request) with a note when it is `Busy` and some
    /// of the sessions its message counts are those SAs', rolled back
    /// with the refusal.
    fn rolled_back_note(&self, mut e: MgrError, done: &[SaKey], w: usize) -> MgrError {
        let ours = done.iter().filter(|k| self.live.get(k).is_some_and(|l| l.owner == w)).count();
        if e.kind == MgrErrorKind::Busy && ours > 0 {
            e.message += &format!(" ({ours} of those sessions were this request's earlier SAs, rolled back with it: the request as a whole needs room for {} on worker {w})", ours + 1);
        }
        e
    }

    /// Removes an SA that was never published (a failed `add`): its slot
    /// is emptied now, so the next snapshot does not carry it; its session
    /// goes as soon as the workers are past the current snapshot.
    fn remove_now(&mut self, key: SaKey) {
        let Some(l) = self.live_remove(key) else { return };
        // It never carried a packet: its key may be offered again.
        self.keys.forget(&l.sa.key, l.id);
        match key.1 {
            Direction::Outbound => self.sad.set_outbound(l.slot, None),
            Direction::Inbound => self.sad.set_inbound(l.slot, None),
        }
        let v = self.version;
        self.retire(l, key.1, Stage::Draining(v), false, "rolled back");
        self.tick_retiring(Instant::now());
    }

    /// The one installed SA with SPI `spi`, of direction `d` if given and
    /// with `tunnel_dst` `dst` if given. Errors: none matches (NotFound);
    /// several do (Invalid, naming what tells them apart: the direction, or
    /// the tunnel_dst of inbound SAs sharing the SPI).
    fn find(&self, spi: u32, d: Option<Direction>, dst: Option<IpAddr>) -> Result<SaKey, MgrError> {
        let keys: Vec<SaKey> = [Direction::Outbound, Direction::Inbound]
            .into_iter()
            .filter(|&x| d.is_none_or(|d| d == x))
            .flat_map(|x| self.keys(spi, x))
            .filter(|k| dst.is_none_or(|a| self.live.get(k).is_some_and(|l| l.sa.tunnel_dst == a)))
            .collect();
        match keys.as_slice() {
            [k] => Ok(*k),
            [] => {
                let dir = d.map_or(String::new(), |d| format!("{} ", dir_name(d)));
                let to = dst.map_or(String::new(), |a| format!(" and tunnel_dst {a}"));
                Err(err(MgrErrorKind::NotFound, format!("no {dir}SA with SPI {spi}{to}")))
            }
            _ if keys.iter().any(|k| k.1 == Direction::Outbound) && keys.iter().any(|k| k.1 == Direction::Inbound) => {
                Err(err(MgrErrorKind::Invalid, format!("SPI {spi} names an outbound and an inbound SA: give the direction")))
            }
            _ => {
                let mut dsts: Vec<String> = keys.iter().filter_map(|k| k.2).map(|a| a.to_string()).collect();
                dsts.sort();
                Err(err(MgrErrorKind::Invalid, format!("SPI {spi} is shared by {} inbound SAs (tunnel_dst {}): give the destination (--dst)", keys.len(), dsts.join(", "))))
            }
        }
    }

    /// `Exists` when a retiring SA still in its grace (inbound: still
    /// matched by SPI and destination; outbound: its SPI still on the wire
    /// to the peer) has the SPI a new SA (`spi`, `d`, `dst` as
    /// [`model::Sa::sad_dst`]) would take: the new one would shadow it
    /// and the peer's packets on the old key would fail their ICV.
    fn retiring_clash(&self, spi: u32, d: Direction, dst: Option<IpAddr>, now: Instant) -> Result<(), MgrError> {
        let clash = self.retiring.iter().find_map(|r| match r.stage {
            Stage::Grace(until) if until > now && r.direction == d && r.live.sa.spi == spi => {
                model::spi_clash(d, spi, dst, r.live.sa.sad_dst()).map(|(what, _)| (what, until - now))
            }
            _ => None,
        });
        match clash {
            Some((what, left)) => Err(err(
                MgrErrorKind::Exists,
                format!("a retiring {what} is still accepted for {} ms (the rekey grace): try again after it", left.as_millis().max(1)),
            )),
            None => Ok(()),
        }
    }

    /// For a `busy` message about `owner`'s queue pair: how many of its
    /// sessions belong to SAs on their way out (rekeyed, deleted,
    /// replaced; they cannot be deleted, only waited for), and when the
    /// last grace among them ends; empty if none.
    fn retiring_note(&self, owner: usize, now: Instant) -> String {
        let on: Vec<&Retiring> = self.retiring.iter().filter(|r| !r.detached && r.live.owner == owner).collect();
        if on.is_empty() {
            return String::new();
        }
        let left = on.iter().filter_map(|r| match r.stage {
            Stage::Grace(until) => Some(until.saturating_duration_since(now)),
            Stage::Draining(_) => None,
        });
        let ms = left.max().unwrap_or_default().as_millis();
        format!(
            ", {} of them of retiring SAs (rekeyed, deleted or replaced), attached until their grace ends (in {ms} ms) and their ops drain: try again after that",
            on.len()
        )
    }

    fn retire(&mut self, live: Live, direction: Direction, stage: Stage, detached: bool, why: &'static str) {
        let packets = live.life.counters.packets.get();
        self.retiring.push(Retiring { live, direction, stage, detached, why, packets_then: packets, packets_seen: (packets, None) });
    }

    /// `sa del`: the SA and the policies naming it go (the SA leaves the
    /// tables with the next snapshot; its session is freed once no op uses
    /// it). `d` and `dst` (the SA's tunnel_dst) pick the SA when its SPI
    /// names several: an SPI shared by inbound SAs without `dst` is
    /// `Invalid` ("SPI 1002 is shared by 2 inbound SAs (tunnel_dst A, B):
    /// give the destination (--dst)"). The policies naming the SPI stay
    /// while another SA has it.
    pub fn del(&mut self, spi: u32, d: Option<Direction>, dst: Option<IpAddr>, now: Instant) -> Result<Value, MgrError> {
        let key = self.find(spi, d, dst)?;
        let d = key.1;
        let Some(l) = self.live_remove(key) else { return Err(err(MgrErrorKind::NotFound, format!("no SA with SPI {spi}"))) };
        // The policies naming the SPI go with its last SA.
        let last = self.keys(spi, d).next().is_none();
        let before = self.policies.len();
        if last {
            self.policies.retain(|p| !(p.direction == d && p.action == Action::Protect(spi)));
        }
        let removed = before - self.policies.len();
        if d == Direction::Inbound && last {
            self.in_selectors.remove(&spi);
        }
        if removed > 0 || !last {
            // (An inbound SPD entry may point at the deleted one of SAs
            // sharing an SPI.)
            self.spd = None;
        }
        self.dirty = true;
        self.retire(l, d, Stage::Grace(now), false, "deleted");
        self.tick_retiring(now);
        Ok(json!({ "deleted": sa_id_json(key), "policies_removed": removed }))
    }

    /// `sa rekey`: installs a copy of SA `spi` with `new_spi` and new key
    /// material, make-before-break: outbound, the policies now name the new
    /// SA (the old one leaves once nothing refers to it); inbound, both
    /// SPIs are accepted until the grace period ends. On a device with one
    /// session per queue pair the owner's queue pair is stopped, set up with
    /// the new session and started after the publish (break-before-make:
    /// ops of the old SA still queued then fail as `session_not_attached`).
    /// `d` and `dst` (the SA's tunnel_dst) pick the SA when its SPI names
    /// several (errors as `sa del`'s). While other inbound SAs share the
    /// old SPI, its policies are copied to the new SPI instead of moved.
    /// `Invalid`: new key material of the wrong length, equal to the old
    /// SA's, or held by another SA ([`Self::key_reuse_refused`]).
    // (spi, d, dst) name the SA as the protocol's sa.rekey does; grouping
    // them would only move the arguments into a struct literal at each call.
    #[allow(clippy::too_many_arguments)]
    pub fn rekey(&mut self, spi: u32, d: Option<Direction>, dst: Option<IpAddr>, new_spi: u32, key: Vec<u8>, auth_key: Option<Vec<u8>>, now: Instant) -> Result<Value, MgrError> {
        let old_key = self.find(spi, d, dst)?;
        let d = old_key.1;
        if new_spi == 0 {
            return Err(err(MgrErrorKind::Invalid, "new SPI 0 is reserved (RFC 4303 §2.1)"));
        }
        if let Some((what, hint)) = self.keys(new_spi, d).find_map(|k| model::spi_clash(d, new_spi, old_key.2, k.2)) {
            return Err(err(MgrErrorKind::Exists, format!("an {what} is installed already{hint}")));
        }
        let old = &self.live[&old_key];
        let mut sa = old.sa.clone();
        let owner = old.owner;
        sa.spi = new_spi;
        // A new SA: its counter starts again (RFC 4303 §3.3.3), whatever
        // `first_seq` the old one was configured with (a rekey is how an
        // SA whose sequence numbers ran out is replaced).
        sa.first_seq = 1;
        let want = sa.algorithm.key_len() + sa.algorithm.salt_len();
        if key.len() != want {
            return Err(err(MgrErrorKind::Invalid, format!("{}: key material is {} bytes, expected {want}", sa.algorithm.name(), key.len())));
        }
        sa.key = zeroize::Zeroizing::new(key);
        match auth_key {
            // Even an empty one, as a config file's `auth_key = ""` is.
            Some(a) if sa.algorithm.auth_key_len() == 0 => {
                return Err(err(MgrErrorKind::Invalid, format!("{} takes no auth_key (its ICV comes from its key), got {} bytes", sa.algorithm.name(), a.len())));
            }
            Some(a) => sa.auth_key = zeroize::Zeroizing::new(a),
            // Keeping the old integrity key under the new SPI would be a
            // rekey of half the key material, silently.
            None if sa.algorithm.auth_key_len() > 0 => {
                return Err(err(
                    MgrErrorKind::Invalid,
                    format!("{} has a separate integrity key: give a new auth_key too (key file: key = \"hex\" and auth_key = \"hex\")", sa.algorithm.name()),
                ))
            }
            None => {}
        }
        // A combined-mode algorithm got no auth_key (refused above), so a
        // wrong length here is a separate integrity key's.
        if sa.auth_key.len() != sa.algorithm.auth_key_len() {
            let m = format!("{}: integrity key is {} bytes, expected {}", sa.algorithm.name(), sa.auth_key.len(), sa.algorithm.auth_key_len());
            return Err(err(MgrErrorKind::Invalid, m));
        }
        // The new SA counts from 1 again: under the old keys its first
        // packets would repeat the old SA's IVs (AES-GCM: nonce = salt ‖
        // sequence number) and MAC inputs.
        let prev = &self.live[&old_key].sa;
        if (!sa.key.is_empty() || !sa.auth_key.is_empty()) && sa.key == prev.key && sa.auth_key == prev.auth_key {
            return Err(err(MgrErrorKind::Invalid, "the new key material is the old SA's: a rekey needs new keys (its sequence numbers start at 1 again)"));
        }
        self.key_reuse_refused(&sa)?;
        let mut detached_old = false;
        if self.limit == 1 {
            // One session per queue pair: stop → setup with the new one → start.
            // (`install`, on the other path, checks this itself.)
            self.retiring_clash(new_spi, d, old_key.2, now)?;
            let slot = self.alloc_slot(d)?;
            let session = tables::session(self.dev, &sa)?;
            self.dev.queue_pair_stop(owner as u16)?;
            let deadline = Instant::now() + Duration::from_secs(1);
            loop {
                match self.dev.queue_pair_setup_session(owner as u16, &session) {
                    Ok(()) => break,
                    Err(CryptoError::Busy { .. }) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(100)),
                    Err(e) => {
                        let _ = self.dev.queue_pair_start(owner as u16);
                        self.release_slot(d, slot);
                        let _ = self.dev.session_free(session);
                        return Err(e.into());
                    }
                }
            }
            self.restart.push(owner as u16);
            detached_old = true;
            self.place(sa, slot, owner, session, now)?;
        } else {
            self.install(sa, owner, now)?;
        }
        let old = self.live_remove(old_key).expect("checked above");
        if d == Direction::Outbound {
            // The path to the tunnel end is the same: the new SA keeps the
            // old one's learned path MTU and its expiry (RFC 4301 §8.2.1).
            let new_slot = self.keys(new_spi, d).next().map(|k| self.live[&k].slot);
            if let (Some(from), Some(to)) = (self.sad.outbound_at(old.slot), new_slot.and_then(|n| self.sad.outbound_at(n))) {
                to.path_mtu.inherit(&from.path_mtu);
            }
        }
        // Policies naming the old SPI name the new one (only they change:
        // no per-SA work for the others); while other inbound SAs still
        // share the old SPI, they are copied to the new SPI instead.
        let shared = self.keys(spi, d).next().is_some();
        let mut named = false;
        let mut copies = Vec::new();
        for x in self.policies.iter_mut().filter(|x| x.direction == d && x.action == Action::Protect(spi)) {
            if shared {
                copies.push(model::Policy { action: Action::Protect(new_spi), ..x.clone() });
            } else {
                x.action = Action::Protect(new_spi);
            }
            named = true;
        }
        self.policies.extend(copies);
        if named {
            self.spd = None;
        }
        if d == Direction::Inbound {
            // The old entry keeps its selectors until it goes.
            let sel = if shared { self.in_selectors.get(&spi).cloned() } else { self.in_selectors.remove(&spi) };
            if let Some(sel) = sel {
                self.in_selectors.entry(new_spi).or_default().extend(sel);
            }
            for k in self.keys(new_spi, d).collect::<Vec<_>>() {
                self.refresh_inbound(k);
            }
        }
        // Limit 1: the old session is no longer attached, so the old SA
        // could only fail (`session_not_attached`): it leaves the tables
        // at once (its SPI is `no_sa` from the next snapshot), and the
        // answer says there is no grace.
        let until = if detached_old {
            now
        } else {
            now + if d == Direction::Inbound { self.grace } else { OUTBOUND_GRACE }
        };
        let msg = format!("SA {spi} {}{} rekeyed to SPI {new_spi}", dir_name(d), dst_note(old_key.2));
        self.event("rekeyed", old_key, msg, Some(&old.life));
        if let Some(e) = self.events.last_mut() {
            e.new_spi = Some(new_spi);
        }
        self.retire(old, d, Stage::Grace(until), detached_old, "rekeyed");
        let mut rekeyed = json!({"spi": spi, "new_spi": new_spi, "direction": dir_name(d), "worker": owner});
        if let Some(a) = old_key.2 {
            rekeyed["tunnel_dst"] = json!(a.to_string());
        }
        Ok(json!({ "rekeyed": rekeyed, "old_valid_ms": (until - now).as_millis() as u64 }))
    }

    /// `reload`: reads the config file again (a DPDK `.cfg` is imported
    /// again with the port options it was first imported with) and applies
    /// the difference:
    /// SAs new in the file are added, SAs gone from it deleted, changed SAs
    /// replaced (make-before-break for outbound); policies, routes and
    /// neighbours are replaced; `control.rekey_grace_ms` applies to the
    /// rekeys that follow. Ports, workers, crypto and reassembly settings
    /// and the control socket's path (unless `--socket` gave it) need a
    /// restart: a file that changes them is refused (`Invalid`), nothing
    /// applied.
    pub fn reload(&mut self, now: Instant) -> Result<Value, MgrError> {
        let opts = self.cfg.dpdk_import.clone().unwrap_or_default();
        let new = crate::config::load_any(&self.cfg.source, &opts).map_err(|e| err(MgrErrorKind::Invalid, e.to_string()))?.0;
        let mut fixed: Vec<String> = Vec::new();
        if new.gateway != self.cfg.gateway {
            fixed.push(gateway_changes(&self.cfg.gateway, &new.gateway));
        }
        if new.crypto != self.cfg.crypto {
            fixed.push(changes!("crypto", model::Crypto, &self.cfg.crypto, &new.crypto, backend, provider, ring_depth, max_sessions_per_qp, engines));
        }
        if new.reassembly != self.cfg.reassembly {
            fixed.push(changes!("reassembly", model::Reassembly, &self.cfg.reassembly, &new.reassembly, contexts, max_fragments, timeout_ms, forwarded));
        }
        // The workers' pending queues are sized at start.
        let nt = (&self.cfg.neighbour_table, &new.neighbour_table);
        for (f, old, new) in [("pending_packets", nt.0.pending_packets, nt.1.pending_packets), ("pending_per_hop", nt.0.pending_per_hop, nt.1.pending_per_hop)] {
            if old != new {
                fixed.push(format!("neighbour_table.{f} {old:?} → {new:?}"));
            }
        }
        let ports = port_changes(&self.cfg.ports, &new.ports);
        if !ports.is_empty() {
            fixed.push("[[port]]".into());
        }
        if new.control.socket != self.cfg.control.socket && !self.socket_from_command_line {
            fixed.push(format!("control.socket {:?} → {:?}", self.cfg.control.socket, new.control.socket));
        }
        if !fixed.is_empty() {
            let detail = if ports.is_empty() {
                String::new()
            } else if self.cfg.dpdk_import.is_some() {
                // The user wrote no [[port]]: say where a .cfg's ports come from.
                format!(" ({}; a .cfg's ports come from -p/-u/--port/--eth-dest and its addresses from the tunnel SAs' own addresses)", ports.join("; "))
            } else {
                format!(" ({})", ports.join("; "))
            };
            return Err(err(MgrErrorKind::Invalid, format!("{}: {} changed{detail}; these take effect on restart only (nothing applied)", new.source.display(), fixed.join(", "))));
        }
        let wanted: HashMap<SaKey, &model::Sa> = new.sas.iter().map(|s| (key_of(s), s)).collect();
        self.same_keys_refused(&new)?;
        for sa in &new.sas {
            if self.live.get(&key_of(sa)).is_none_or(|l| l.sa != *sa) {
                self.key_reuse_refused(sa).map_err(|e| err(e.kind, format!("{}: {}; nothing applied", new.source.display(), e.message)))?;
            }
        }
        self.reload_fits(&new, now)?;
        let (mut added, mut removed, mut replaced) = (0, 0, 0);
        let mut gone: Vec<SaKey> = self.live.keys().filter(|k| !wanted.contains_key(k)).copied().collect();
        gone.sort_by_key(|&k| key_order(k));
        for k in gone {
            if let Some(l) = self.live_remove(k) {
                // Its `deleted` event comes when its session is freed.
                self.retire(l, k.1, Stage::Grace(now), false, "removed by reload");
                removed += 1;
            }
        }
        for sa in &new.sas {
            let k = key_of(sa);
            match self.live.get(&k) {
                Some(l) if l.sa == *sa => continue,
                Some(l) => {
                    let owner = self.replacement_owner(sa, l.owner, &[])?;
                    let old = self.live_remove(k).expect("present");
                    let grace = if k.1 == Direction::Outbound { OUTBOUND_GRACE } else { Duration::ZERO };
                    if let Err(e) = self.install(sa.clone(), owner, now) {
                        self.live_insert(old);
                        return Err(e);
                    }
                    // Inbound, same SPI: the index points at the new entry
                    // now, and the old one's removal leaves it there.
                    self.retire(old, k.1, Stage::Grace(now + grace), false, "replaced by reload");
                    replaced += 1;
                }
                None => {
                    let w = self.pick_owner(sa, &[])?;
                    self.install(sa.clone(), w, now)?;
                    added += 1;
                }
            }
        }
        self.set_policies(new.policies.clone());
        self.routes = Arc::new(tables::routes(&new));
        self.neighbours.set_statics(neighbour_conf(&new), new.neighbours.iter().map(|n| (n.ip, n.mac)));
        self.cfg.routes = new.routes.clone();
        self.cfg.neighbours = new.neighbours.clone();
        self.cfg.neighbour_table = new.neighbour_table;
        self.cfg.policies = new.policies.clone();
        self.cfg.sas = new.sas.clone();
        // Rekeys from now on use the file's grace (those already done keep theirs).
        self.grace = Duration::from_millis(new.control.rekey_grace_ms);
        self.cfg.control = new.control.clone();
        self.dirty = true;
        self.tick_retiring(now);
        // What `secgw check` would warn about in the file now running.
        let warnings = crate::config::run_warnings(&new, self.socket_from_command_line);
        for w in &warnings {
            tracing::warn!("reload: {}: {w}", new.source.display());
        }
        let r = json!({ "added": added, "removed": removed, "replaced": replaced, "sas": self.live.len(), "policies": self.policies.len(), "warnings": warnings });
        tracing::info!(result = %r, "config reloaded from {}", new.source.display());
        Ok(r)
    }

    /// `Invalid` when `sa` (about to be installed: `sa add`, `sa rekey`,
    /// `reload`) takes its nonce from the sequence number (AES-GCM,
    /// AES-GMAC, AES-CTR, ChaCha20-Poly1305) and its `key` is key material
    /// an SA of this gateway holds or held ([`super::keys`]): counting from
    /// 1 again it would repeat that SA's nonces (RFC 4106 §3.1, RFC 4543
    /// §3.1, RFC 3686 §3.1, RFC 7634 §2). The message names that SA.
    fn key_reuse_refused(&self, sa: &model::Sa) -> Result<(), MgrError> {
        if !KeyRegister::watched(sa) {
            return Ok(());
        }
        let Some(u) = self.keys.user(&sa.key) else { return Ok(()) };
        let (spi, d, dst) = u.sa;
        let state = if u.gone {
            "which is gone (a key once installed is not used again: nonces under it may have been sent)"
        } else if self.live.get(&u.sa).is_some_and(|l| l.id == u.id) {
            "which is installed"
        } else {
            "which is retiring"
        };
        let why = if crate::config::two_ciphers(u.algorithm, sa.algorithm) {
            format!("it uses it with {}: one key must serve one SA and one algorithm", u.algorithm.name())
        } else {
            let what = match sa.direction {
                Direction::Outbound => "counting from 1 again, the new SA would repeat that SA's nonces",
                // The peer's nonces; and a new replay window (RFC 4303 §3.4.3).
                Direction::Inbound => "a peer counting from 1 again under it repeats that SA's nonces, and the new SA's empty replay window would accept that SA's packets again",
            };
            format!("{} takes its nonce from that key's salt and the sequence number: {what} (RFC 4106 §3.1, RFC 4543 §3.1, RFC 3686 §3.1, RFC 7634 §2)", sa.algorithm.name())
        };
        Err(err(
            MgrErrorKind::Invalid,
            format!(
                "SA {} {}{}: its key is the key material of {} SA {spi}{}, {state}; {why}: give it a fresh key",
                sa.spi,
                dir_name(sa.direction),
                dst_note(sa.sad_dst()),
                dir_name(d),
                dst_note(dst),
            ),
        ))
    }

    /// Refuses a reload that changes a live SA but keeps its SPI and its
    /// key material (key and integrity key): the replacement would start
    /// afresh under the same keys, an outbound SA's sequence numbers
    /// from `first_seq` again (with AES-GCM, ChaCha20-Poly1305 or GMAC the
    /// IV is the sequence number: nonces reused under one key, RFC 4106
    /// §3.1 / RFC 7634 §2; the peer's replay window also drops them), an
    /// inbound SA's replay window empty (packets already accepted are
    /// accepted again, RFC 4303 §3.4.3). The SA's state stays with the
    /// worker that owns it, so the fix is a new SPI and key (or
    /// `sa rekey`). `Invalid`, naming the SAs and what changed.
    fn same_keys_refused(&self, new: &Config) -> Result<(), MgrError> {
        let mut refused = Vec::new();
        for sa in &new.sas {
            let Some(l) = self.live.get(&key_of(sa)) else { continue };
            if l.sa == *sa || l.sa.key != sa.key || l.sa.auth_key != sa.auth_key {
                continue;
            }
            refused.push(format!("SA {} {}{}: {}", sa.spi, dir_name(sa.direction), dst_note(sa.sad_dst()), sa_changes(&l.sa, sa).join(", ")));
        }
        if refused.is_empty() {
            return Ok(());
        }
        Err(err(
            MgrErrorKind::Invalid,
            format!(
                "{}: changed with the same SPI and keys: {}; the new SA would start its sequence numbers (outbound: nonces under the same key) and replay window (inbound) afresh; give a changed SA a new SPI and new keys in the file (on both gateways), or change it with `sa rekey`; nothing applied",
                new.source.display(),
                refused.join("; ")
            ),
        ))
    }

    /// What [`Self::reload`] checks before it changes anything (all or
    /// nothing): every SA to add or replace has a worker, its SPI is not
    /// held by a retiring SA still in its grace, and on a device with a
    /// per-queue-pair session limit each queue pair has room for the
    /// sessions the reload attaches, counting those of removed and replaced
    /// SAs, which stay attached until their ops drain (make-before-break).
    /// Errors: `Invalid` (a pin past `gateway.workers`), `Exists`, `Busy`
    /// naming the queue pair and what to do.
    fn reload_fits(&self, new: &Config, now: Instant) -> Result<(), MgrError> {
        let mut extra = vec![0usize; self.nworkers];
        for sa in &new.sas {
            let k = key_of(sa);
            let owner = match self.live.get(&k) {
                Some(l) if l.sa == *sa => continue,
                Some(l) => {
                    // The replacement's `install` checks this as well, but
                    // only after the SAs that go have gone.
                    self.retiring_clash(k.0, k.1, k.2, now)?;
                    self.replacement_owner(sa, l.owner, &extra)?
                }
                None => {
                    self.retiring_clash(k.0, k.1, k.2, now)?;
                    // As the apply phase will choose, counting this reload's sessions.
                    self.pick_owner(sa, &extra)?
                }
            };
            if let Some(e) = extra.get_mut(owner) {
                *e += 1;
            }
        }
        if self.limit == 0 {
            return Ok(());
        }
        for (w, &n) in extra.iter().enumerate() {
            let held = self.per_qp[w];
            if held + n > self.limit {
                return Err(err(
                    MgrErrorKind::Busy,
                    format!(
                        "the reload attaches {n} more session(s) to queue pair {w}, which holds {held} of its limit (max_sessions_per_qp = {}){}: nothing applied. Sessions of removed or replaced SAs stay attached until their ops drain; delete (sa del) the SAs that go first, then reload",
                        self.limit,
                        self.retiring_note(w, now)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Time limits, flags → events, and SAs on their way out: call often
    /// (every few tens of milliseconds); then [`Manager::publish`].
    pub fn tick(&mut self, now: Instant) {
        if self.last_scan.is_none_or(|t| now.duration_since(t) >= LIFETIME_SCAN) {
            self.last_scan = Some(now);
            self.scan_lifetimes(now);
        }
        self.tick_retiring(now);
        self.watch_drops(now);
        self.neighbours.tick(now);
    }

    /// Once a second, the workers' `no_sa` and `replay` drops, so that a
    /// peer's mistake is named, not just counted (each warning at most
    /// once per [`NO_SA_WARN_EVERY`]):
    /// - any `no_sa` since the last warning: how many, and the SPI and
    ///   source of one ([`WorkerCounters::last_no_sa`]): a peer that
    ///   switched to an SA this gateway does not have (a rekey in the
    ///   wrong order, an SA missing from the config);
    /// - at least [`REPLAY_BURST`] `replay` within the second: the SPI and
    ///   sequence number of one ([`WorkerCounters::last_replay`]). A stray
    ///   duplicate is the network's doing; a second's worth is a peer whose
    ///   sequence numbers went back, most often one restarted with the same
    ///   SA (its counter from 1 again; RFC 4303 §3.3.3 assumes an SA does
    ///   not outlive its sender's state).
    fn watch_drops(&mut self, now: Instant) {
        let w = &mut self.drop_watch;
        if w.looked.is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1)) {
            return;
        }
        w.looked = Some(now);
        let Some((_, workers)) = &self.publisher else { return };
        let sum = |r: DropReason| workers.iter().map(|c| c.drops[r as usize].get()).sum::<u64>();
        // (SPI, low 32 bits) of the first worker that noted one.
        let noted = |f: fn(&WorkerCounters) -> u64| {
            let v = workers.iter().map(|c| f(c)).find(|&v| v != 0).unwrap_or(0);
            ((v >> 32) as u32, v as u32)
        };
        let quiet = |warned: Option<Instant>| warned.is_some_and(|t| now.saturating_duration_since(t) < NO_SA_WARN_EVERY);

        // ESP that found no SA (the peer's doing), apart from packets
        // whose SA went while they waited (this gateway's own rekeys and
        // deletions; helper-104: those were reported as ESP "with SPI 0").
        let esp_no_sa = workers.iter().map(|c| c.esp_no_sa.get()).sum::<u64>();
        let gone = sum(DropReason::NoSa).saturating_sub(esp_no_sa);
        if gone > w.no_sa_gone && !quiet(w.no_sa_gone_warned) {
            tracing::warn!(
                "{} packets dropped as no_sa since {}: their SA was deleted, rekeyed or replaced while they waited (in a handoff ring or the crypto queue pair) and its grace had ended",
                gone - w.no_sa_gone,
                if w.no_sa_gone_warned.is_some() { "the last warning" } else { "start" }
            );
            w.no_sa_gone = gone;
            w.no_sa_gone_warned = Some(now);
        }
        let no_sa = esp_no_sa;
        if no_sa > w.no_sa && !quiet(w.no_sa_warned) {
            let (spi, src) = noted(|c| c.last_no_sa.get());
            let from = if src == 0 { String::new() } else { format!(" from {}", std::net::Ipv4Addr::from(src)) };
            tracing::warn!(
                "{} ESP packets dropped as no_sa since {}; one had SPI {spi} (0x{spi:08x}){from}: no inbound SA here has that SPI and those tunnel endpoints (a peer that switched to a new SA before this gateway installed it: add the inbound SA first when rekeying; or an SA missing from the config)",
                no_sa - w.no_sa,
                if w.no_sa_warned.is_some() { "the last warning" } else { "start" }
            );
            w.no_sa = no_sa;
            w.no_sa_warned = Some(now);
        }

        let replay = sum(DropReason::Replay);
        let new = replay.saturating_sub(w.replay);
        w.replay = replay;
        if new >= REPLAY_BURST && !quiet(w.replay_warned) {
            let (spi, seq) = noted(|c| c.last_replay.get());
            tracing::warn!(
                "{new} ESP packets dropped as replay in the last second; one had SPI {spi} (0x{spi:08x}) and sequence number {seq}: the peer's sequence numbers went back into this SA's window or below it (a peer restarted with the same SA counts from 1 again: rekey the SA, or restart both ends)"
            );
            w.replay_warned = Some(now);
        }
    }

    /// The neighbour table (learned and static entries; `secgw ctl neigh`).
    pub fn neighbours(&self) -> &NeighbourTable {
        &self.neighbours
    }

    /// `neigh.list`: `{"neighbours": [{"ip", "mac", "port" (name, or null
    /// for a static entry, valid on every port), "state"
    /// ("static"|"reachable"|"stale"), "age_ms" (since the last
    /// confirmation, null for static)}]}`, sorted by address; `settings`
    /// gives the timers and limits.
    pub fn list_neighbours(&self, now: Instant) -> Value {
        let n = self.neighbours.cell().load_full();
        let mut rows: Vec<(std::net::IpAddr, Value)> = n
            .iter()
            .map(|(ip, e)| {
                let port = e.learned.and_then(|(p, _)| self.ports.get(p)).map(|p| p.name.clone());
                let age = e.learned.map(|(_, c)| now.saturating_duration_since(c).as_millis() as u64);
                (ip, json!({ "ip": ip.to_string(), "mac": crate::wire::ethernet::fmt_mac(&e.mac), "port": port, "state": n.state(e, now).name(), "age_ms": age }))
            })
            .collect();
        rows.sort_by_key(|(ip, _)| *ip);
        let c = self.neighbours.conf();
        let nt = &self.cfg.neighbour_table;
        json!({
            "neighbours": rows.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
            "settings": { "max_entries": c.max_entries, "reachable_ms": c.reachable.as_millis() as u64, "retrans_ms": c.retrans.as_millis() as u64,
                          "pending_packets": nt.pending_packets, "pending_per_hop": nt.pending_per_hop },
        })
    }

    /// Gives up the manager for its neighbour table (in-memory gateways
    /// that run the control side of neighbour learning themselves).
    pub fn into_neighbours(self) -> NeighbourTable {
        self.neighbours
    }

    fn scan_lifetimes(&mut self, now: Instant) {
        let mut fired = Vec::new();
        for (k, l) in self.live.iter_mut() {
            let age = now.saturating_duration_since(l.since).as_secs();
            let lim = &l.life.limits;
            if age >= lim.soft.seconds {
                l.life.raise_soft(Expiry::Seconds);
            }
            if age >= lim.hard.seconds {
                l.life.raise_hard(Expiry::Seconds);
            }
            if !l.reported_soft {
                if let Some(why) = l.life.soft_expiry() {
                    l.reported_soft = true;
                    fired.push(("soft_expired", *k, why, l.life.clone()));
                }
            }
            if !l.reported_hard {
                if let Some(why) = l.life.hard_expiry() {
                    l.reported_hard = true;
                    fired.push(("hard_expired", *k, why, l.life.clone()));
                }
            }
        }
        fired.sort_by_key(|f| key_order(f.1));
        for (kind, k, why, life) in fired {
            let (spi, d, dst) = k;
            let what = if kind == "soft_expired" { "soft limit reached: rekey it" } else { "hard limit reached: it processes no more packets" };
            self.event(kind, k, format!("SA {spi} {}{} {what} ({})", dir_name(d), dst_note(dst), why.name()), Some(&life));
            if let Some(e) = self.events.last_mut() {
                e.reason = Some(why.name());
            }
        }
    }

    fn quiesced(&self, version: u64) -> bool {
        match &self.publisher {
            Some((_, w)) => w.iter().all(|c| c.quiesced.get() >= version),
            None => true,
        }
    }

    fn tick_retiring(&mut self, now: Instant) {
        // The SAs that go in this tick, reported in SPI order (the list is
        // reordered as entries leave it).
        let mut gone: Vec<(SaKey, String, Arc<SaLife>)> = Vec::new();
        let mut i = 0;
        while i < self.retiring.len() {
            let stage = self.retiring[i].stage;
            let drained = matches!(stage, Stage::Draining(v) if self.quiesced(v));
            let r = &mut self.retiring[i];
            let packets = r.live.life.counters.packets.get();
            if packets != r.packets_seen.0 {
                r.packets_seen = (packets, Some(now));
            }
            match stage {
                Stage::Grace(until) if now >= until => {
                    // Inbound traffic within the grace's last second: the
                    // peer still sends with it, and from now on those
                    // packets are `no_sa`.
                    if let (Direction::Inbound, Some(last)) = (r.direction, r.packets_seen.1) {
                        if now.saturating_duration_since(last) < STILL_RECEIVING {
                            let k = key_of(&r.live.sa);
                            tracing::warn!(
                                "SA {} inbound{} {} while its peer still sends with it: {} packets in its grace, the last {} ms before its end; the peer's packets for it are now dropped as no_sa (its peer has not switched to the new SA: rekey the peer's outbound SA within the grace)",
                                k.0,
                                dst_note(k.2),
                                r.why,
                                packets.saturating_sub(r.packets_then),
                                now.saturating_duration_since(last).as_millis()
                            );
                        }
                    }
                    let (slot, id) = (r.live.slot, r.live.id);
                    match r.direction {
                        Direction::Outbound => {
                            if self.sad.outbound_at(slot).is_some_and(|s| s.id == id) {
                                self.sad.set_outbound(slot, None);
                            }
                        }
                        Direction::Inbound => {
                            if self.sad.inbound_at(slot).is_some_and(|e| e.sa.id == id) {
                                self.sad.set_inbound(slot, None);
                            }
                        }
                    }
                    r.stage = Stage::Draining(self.version + 1);
                    self.dirty = true;
                    i += 1;
                }
                Stage::Draining(_) if drained => {
                    let r = &self.retiring[i];
                    if self.limit > 0 && !r.detached {
                        match self.dev.queue_pair_detach_session(r.live.owner as u16, &r.live.session) {
                            Ok(()) | Err(CryptoError::NotAttached { .. }) => {}
                            // Ops still in flight there: next tick.
                            Err(CryptoError::Busy { .. }) => {
                                i += 1;
                                continue;
                            }
                            Err(e) => tracing::error!(spi = r.live.sa.spi, error = %e, "detach failed"),
                        }
                    }
                    let r = self.retiring.swap_remove(i);
                    if !r.detached {
                        self.per_qp[r.live.owner] = self.per_qp[r.live.owner].saturating_sub(1);
                    }
                    if let Err(e) = self.dev.session_free(r.live.session.clone()) {
                        tracing::error!(spi = r.live.sa.spi, error = %e, "session free failed");
                    }
                    self.release_slot(r.direction, r.live.slot);
                    self.keys.gone(&r.live.sa.key, r.live.id);
                    let k = key_of(&r.live.sa);
                    let msg = format!("SA {} {}{} gone ({}): {} packets, {} bytes", k.0, dir_name(r.direction), dst_note(k.2), r.why, r.live.life.counters.packets.get(), r.live.life.counters.bytes.get());
                    gone.push((k, msg, r.live.life.clone()));
                }
                _ => i += 1,
            }
        }
        gone.sort_by_key(|g| key_order(g.0));
        for (k, msg, life) in gone {
            self.event("deleted", k, msg, Some(&life));
        }
    }

    /// `sa list`: every SA (installed and on its way out), never keys.
    pub fn list_sas(&self, now: Instant) -> Value {
        let one = |l: &Live, state: &str| {
            let c = &l.life.counters;
            let state = if state == "active" && l.life.expired() { "expired" } else { state };
            let tunnel = l.sa.mode == model::SaMode::Tunnel;
            json!({
                "spi": l.sa.spi,
                "direction": dir_name(l.sa.direction),
                "mode": match l.sa.mode { model::SaMode::Tunnel => "tunnel", model::SaMode::Transport => "transport" },
                "algorithm": l.sa.algorithm.name(),
                // Transport mode has no tunnel endpoints: null, not 0.0.0.0.
                "tunnel_src": tunnel.then(|| l.sa.tunnel_src.to_string()),
                "tunnel_dst": tunnel.then(|| l.sa.tunnel_dst.to_string()),
                "worker": l.owner,
                "esn": l.sa.esn,
                "udp_encap": l.sa.udp_encap,
                "state": state,
                "age_s": now.saturating_duration_since(l.since).as_secs_f64(),
                "packets": c.packets.get(),
                "bytes": c.bytes.get(),
                "errors": c.errors.get(),
                "soft_expired": l.life.soft_expiry().map(|e| e.name()),
                "hard_expired": l.life.hard_expiry().map(|e| e.name()),
            })
        };
        let mut v: Vec<(u32, u8, Value)> = self.live.values().map(|l| (l.sa.spi, l.sa.direction as u8, one(l, "active"))).collect();
        v.extend(self.retiring.iter().map(|r| (r.live.sa.spi, r.direction as u8, one(&r.live, "retiring"))));
        v.sort_by_key(|x| (x.1, x.0));
        json!({ "sas": v.into_iter().map(|x| x.2).collect::<Vec<_>>() })
    }

    /// `policy list`: the SPD in config order.
    pub fn list_policies(&self) -> Value {
        let v: Vec<Value> = self.policies.iter().map(policy_json).collect();
        json!({ "policies": v })
    }

    /// `policy del`: removes the SPD entry whose `policy.list` form is
    /// `entry` (every field equal): entry `index` when given (it must be
    /// equal), else the first equal one. An inbound PROTECT entry also gave
    /// its SA's selectors (RFC 4301 §5.2): that SA admits what its other
    /// entries select, none left = nothing (its packets are
    /// `inner_policy_mismatch`). Errors: `NotFound` when no entry is equal
    /// (a listing taken before another change finds nothing rather than
    /// the wrong entry).
    pub fn del_policy(&mut self, entry: &Value, index: Option<usize>) -> Result<Value, MgrError> {
        let found = match index {
            Some(i) => self.policies.get(i).filter(|p| policy_json(p) == *entry).map(|_| i),
            None => self.policies.iter().position(|p| policy_json(p) == *entry),
        };
        let Some(i) = found else {
            let at = index.map_or(String::new(), |i| format!(" at index {i}"));
            return Err(err(MgrErrorKind::NotFound, format!("no policy equal to {entry}{at} (see policy.list)")));
        };
        let p = self.policies.remove(i);
        if let (Direction::Inbound, Action::Protect(spi)) = (p.direction, p.action) {
            let sel: Vec<Selector> = self
                .policies
                .iter()
                .filter(|q| q.direction == Direction::Inbound && q.action == Action::Protect(spi))
                .map(tables::selector)
                .collect();
            self.in_selectors.insert(spi, sel);
            for k in self.keys(spi, Direction::Inbound).collect::<Vec<_>>() {
                self.refresh_inbound(k);
            }
        }
        self.spd = None;
        self.dirty = true;
        Ok(json!({ "deleted": policy_json(&p), "index": i }))
    }

    /// SAs installed (not counting those on their way out).
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// True when no SA is installed.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// SAs on their way out (rekeyed or deleted, session not freed yet).
    pub fn retiring(&self) -> usize {
        self.retiring.len()
    }
}

/// The manager's error as a control-protocol error.
fn ctl_error(e: MgrError) -> CtlError {
    let code = match e.kind {
        MgrErrorKind::NotFound => ErrorCode::NotFound,
        MgrErrorKind::Exists => ErrorCode::Exists,
        MgrErrorKind::Invalid => ErrorCode::Invalid,
        MgrErrorKind::Device => ErrorCode::Device,
        MgrErrorKind::Busy => ErrorCode::Busy,
    };
    CtlError::new(code, e.message)
}

/// Hex key material from a request, with optional ':' separators as
/// `sa.key` in the config file, kept in zeroized memory. Errors
/// (`bad_args`) name the first character that is not hex, or the odd
/// number of digits; never the key.
fn hex_key(field: &str, s: &str) -> Result<zeroize::Zeroizing<Vec<u8>>, CtlError> {
    let s = s.trim();
    if let Some(pos) = s.chars().position(|c| c != ':' && !c.is_ascii_hexdigit()) {
        return Err(CtlError::new(ErrorCode::BadArgs, format!("{field}: expected hex digits with optional ':' separators, found a non-hex character at position {}", pos + 1)));
    }
    let mut digits = zeroize::Zeroizing::new(String::with_capacity(s.len()));
    digits.extend(s.chars().filter(|c| *c != ':'));
    if !digits.len().is_multiple_of(2) {
        return Err(CtlError::new(ErrorCode::BadArgs, format!("{field}: expected an even number of hex digits, found {}", digits.len())));
    }
    let mut out = zeroize::Zeroizing::new(vec![0u8; digits.len() / 2]);
    hex::decode_to_slice(digits.as_bytes(), &mut out[..]).map_err(|e| CtlError::new(ErrorCode::Internal, format!("{field}: {e}")))?;
    Ok(out)
}

impl MgrEvent {
    /// The event as the control socket sends it.
    pub fn to_protocol(&self) -> Event {
        Event {
            kind: match self.kind {
                "added" => EventKind::Added,
                "deleted" => EventKind::Deleted,
                "rekeyed" => EventKind::Rekeyed,
                "soft_expired" => EventKind::SoftExpired,
                "hard_expired" => EventKind::HardExpired,
                _ => EventKind::Error,
            },
            spi: self.spi,
            direction: self.direction.to_string(),
            dst: self.dst,
            reason: self.reason.map(str::to_string),
            message: self.message.clone(),
            time: self.time,
            new_spi: self.new_spi,
            packets: self.packets,
            bytes: self.bytes,
        }
    }
}

impl<D: CryptoDevice> CtlHandler for Manager<'_, D> {
    fn handle(&mut self, cmd: &Command) -> Result<Value, CtlError> {
        let now = Instant::now();
        match cmd {
            Command::Stats { format } => {
                let s = self.stats();
                Ok(match format {
                    StatsFormat::Json => serde_json::to_value(&s).map_err(|e| CtlError::new(ErrorCode::Internal, e.to_string()))?,
                    StatsFormat::Prometheus => json!({ "text": s.to_prometheus() }),
                })
            }
            Command::SaList => Ok(self.list_sas(now)),
            Command::SaAdd { toml } => self.add(toml, now).map_err(ctl_error),
            Command::SaDel { spi, direction, dst } => self.del(*spi, *direction, *dst, now).map_err(ctl_error),
            Command::SaRekey { spi, direction, dst, new_spi, key, auth_key } => {
                let key = hex_key("key", key)?;
                let auth = auth_key.as_deref().map(|a| hex_key("auth_key", a)).transpose()?;
                self.rekey(*spi, *direction, *dst, *new_spi, key.to_vec(), auth.map(|a| a.to_vec()), now).map_err(ctl_error)
            }
            Command::PolicyList => Ok(self.list_policies()),
            Command::PolicyDel { policy, index } => self.del_policy(policy, *index).map_err(ctl_error),
            Command::NeighList => Ok(self.list_neighbours(now)),
            Command::Reload => self.reload(now).map_err(ctl_error),
            Command::Version => Ok(json!({ "version": env!("CARGO_PKG_VERSION"), "protocol": super::protocol::VERSION })),
            Command::Events => Err(CtlError::new(ErrorCode::Internal, "events is served by the socket")),
        }
    }

    fn commit(&mut self) {
        self.publish();
    }
}


/// An SPD entry as `policy.list` shows it (and `policy.del` takes it).
fn policy_json(p: &model::Policy) -> Value {
    let pfx = |p: (std::net::IpAddr, u8)| format!("{}/{}", p.0, p.1);
    let ports = |r: (u16, u16)| format!("{}-{}", r.0, r.1);
    json!({
        "direction": dir_name(p.direction),
        "src": pfx(p.src),
        "dst": pfx(p.dst),
        "protocol": match p.protocol { model::Protocol::Any => "any".to_string(), model::Protocol::Number(n) => n.to_string() },
        "src_ports": ports(p.src_ports),
        "dst_ports": ports(p.dst_ports),
        "priority": p.priority,
        "action": match p.action { Action::Protect(s) => format!("protect {s}"), Action::Bypass => "bypass".into(), Action::Discard => "discard".into() },
    })
}
#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
