//! The neighbour table: IPv4 / IPv6 address → MAC, for the Ethernet header
//! of forwarded packets.
//!
//! Three parts (DESIGN.md §4: the control thread publishes read-mostly
//! snapshots; workers never lock or allocate per packet):
//! - [`Neighbours`]: an immutable snapshot workers read (static entries from
//!   config `[[neighbour]]` and entries learned from ARP / Neighbor
//!   Discovery, each learned one with the port it was learned on and when
//!   it was last confirmed);
//! - [`NeighbourCell`]: what workers and the control thread share, in every
//!   [`super::Tables`] snapshot (the same cell in all of them): the current
//!   `Neighbours` behind an `ArcSwap` (a learned MAC is published without a
//!   new `Tables`), and a bounded lock-free queue of [`Learned`] reports
//!   from the workers (full: the report is lost and the worker counts it);
//! - [`NeighbourTable`]: the control thread's owner of the learned entries:
//!   it drains the reports, ages entries (RFC 4861 §7.3.2's REACHABLE →
//!   STALE → gone, with time passed in), evicts the oldest learned entry
//!   when full, and publishes a new snapshot when something changed.
//!
//! States, for an entry confirmed at T (`reachable` = `[neighbour_table]
//! reachable_ms`, `retrans` = `retrans_ms`): REACHABLE until T + reachable;
//! then STALE: still used, and a worker that uses it sends a unicast probe
//! (ARP request / Neighbor Solicitation to the known MAC) at most once per
//! retrans; removed at T + reachable + 3 × retrans unless a reply (or any
//! other learnable packet) confirmed it again. Static entries never age and
//! are never replaced by learned ones.

use crate::esp::lifetime::Counter;
use arc_swap::ArcSwap;
use crossbeam_queue::ArrayQueue;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Probes (or resolution requests) sent before a STALE entry is removed or
/// a next hop is given up (RFC 4861 §10 MAX_UNICAST_SOLICIT /
/// MAX_MULTICAST_SOLICIT = 3).
pub const MAX_PROBES: u32 = 3;

/// Timers and sizes of the dynamic table (config `[neighbour_table]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourConf {
    /// Learned entries kept at most; a new one beyond evicts the oldest
    /// learned entry (static entries do not count).
    pub max_entries: usize,
    /// How long an entry stays REACHABLE after a confirmation
    /// (RFC 4861 §10 REACHABLE_TIME, 30 s).
    pub reachable: Duration,
    /// Interval between resolution requests / probes for one address
    /// (RFC 4861 §10 RETRANS_TIMER, 1 s).
    pub retrans: Duration,
}

impl Default for NeighbourConf {
    fn default() -> Self {
        NeighbourConf { max_entries: 4096, reachable: Duration::from_millis(30_000), retrans: Duration::from_millis(1000) }
    }
}

/// One entry of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The neighbour's MAC.
    pub mac: [u8; 6],
    /// `None`: static (config), valid on every port, never ages.
    /// `Some((port, confirmed))`: learned on port id `port`, last confirmed
    /// at `confirmed`; used only for packets out of that port.
    pub learned: Option<(usize, Instant)>,
}

/// State of an entry at a moment (RFC 4861 §7.3.2, without INCOMPLETE,
/// DELAY and PROBE: a worker's pending queue is the INCOMPLETE state, and
/// a STALE entry is probed as it is used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// From config.
    Static,
    /// Confirmed less than `reachable` ago.
    Reachable,
    /// Not confirmed for `reachable` or more: used, and probed.
    Stale,
}

impl State {
    /// Lower-case name (`secgw ctl neigh`).
    pub fn name(self) -> &'static str {
        match self {
            State::Static => "static",
            State::Reachable => "reachable",
            State::Stale => "stale",
        }
    }
}

/// What a lookup found: the MAC and whether the entry is STALE (the caller
/// then probes it, rate limited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// Destination MAC.
    pub mac: [u8; 6],
    /// The entry is learned and STALE at the time of the lookup.
    pub stale: bool,
}

/// An immutable snapshot of the neighbour table.
#[derive(Debug, Clone, Default)]
pub struct Neighbours {
    map: HashMap<IpAddr, Entry>,
    conf: NeighbourConf,
}

impl Neighbours {
    /// A table of static entries only, default timers.
    pub fn new(entries: impl IntoIterator<Item = (IpAddr, [u8; 6])>) -> Neighbours {
        Neighbours { map: entries.into_iter().map(|(ip, mac)| (ip, Entry { mac, learned: None })).collect(), conf: NeighbourConf::default() }
    }

    /// The MAC of `ip` for a packet out of port `port` at time `now`: a
    /// static entry, else an entry learned on `port` (STALE or not).
    #[inline]
    pub fn lookup(&self, ip: IpAddr, port: usize, now: Instant) -> Option<Hit> {
        let e = self.map.get(&ip)?;
        match e.learned {
            None => Some(Hit { mac: e.mac, stale: false }),
            Some((p, confirmed)) if p == port => Some(Hit { mac: e.mac, stale: now.saturating_duration_since(confirmed) >= self.conf.reachable }),
            Some(_) => None,
        }
    }

    /// The entry of `ip`, if any.
    pub fn get(&self, ip: IpAddr) -> Option<&Entry> {
        self.map.get(&ip)
    }

    /// The state of `e` at `now`.
    pub fn state(&self, e: &Entry, now: Instant) -> State {
        match e.learned {
            None => State::Static,
            Some((_, c)) if now.saturating_duration_since(c) < self.conf.reachable => State::Reachable,
            Some(_) => State::Stale,
        }
    }

    /// The timers this snapshot was built with.
    pub fn conf(&self) -> NeighbourConf {
        self.conf
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (IpAddr, &Entry)> {
        self.map.iter().map(|(ip, e)| (*ip, e))
    }

    /// Number of entries (static and learned).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// A neighbour a worker saw: `ip` is at `mac` on port `port`, at `at`.
/// The worker checked the learning rules (see the worker's `arp` / `nd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    /// The neighbour's address.
    pub ip: IpAddr,
    /// Its MAC (unicast, non-zero).
    pub mac: [u8; 6],
    /// Port id it was seen on.
    pub port: usize,
    /// When (the worker's poll time).
    pub at: Instant,
}

/// Counters the control thread keeps about the table (single writer: the
/// control thread; read for stats).
#[derive(Debug, Default)]
pub struct NeighbourCounters {
    /// Learned entries added (new addresses, or a changed MAC or port).
    pub added: Counter,
    /// Learned entries removed because nothing confirmed them within
    /// reachable + 3 × retrans.
    pub aged_out: Counter,
    /// Learned entries evicted (the oldest) to make room for a new one.
    pub evicted: Counter,
    /// Reports ignored because the address has a static entry.
    pub static_kept: Counter,
    /// Entries in the table now, static and learned (a gauge).
    pub entries: Counter,
}

/// What workers and the control thread share (see the module doc).
#[derive(Debug)]
pub struct NeighbourCell {
    current: ArcSwap<Neighbours>,
    reports: ArrayQueue<Learned>,
    /// The control thread's counters.
    pub counters: NeighbourCounters,
}

/// Reports the queue between workers and the control thread holds.
pub const REPORT_QUEUE: usize = 1024;

impl NeighbourCell {
    /// A cell publishing `first`, with a report queue of `queue` entries.
    /// Allocates: control path only.
    pub fn new(first: Neighbours, queue: usize) -> NeighbourCell {
        let c = NeighbourCell { current: ArcSwap::from_pointee(first), reports: ArrayQueue::new(queue.max(1)), counters: NeighbourCounters::default() };
        c.counters.entries.set(c.current.load().len() as u64);
        c
    }

    /// The current snapshot (a worker loads it once per poll).
    #[inline]
    pub fn load(&self) -> arc_swap::Guard<Arc<Neighbours>> {
        self.current.load()
    }

    /// The current snapshot, owned.
    pub fn load_full(&self) -> Arc<Neighbours> {
        self.current.load_full()
    }

    /// Queues a worker's report; false when the queue is full (the report
    /// is lost; the caller counts it). Never blocks, never allocates.
    #[inline]
    pub fn report(&self, l: Learned) -> bool {
        self.reports.push(l).is_ok()
    }

    fn publish(&self, n: Neighbours) {
        self.counters.entries.set(n.len() as u64);
        self.current.store(Arc::new(n));
    }
}

/// The control thread's neighbour table (see the module doc).
#[derive(Debug)]
pub struct NeighbourTable {
    conf: NeighbourConf,
    statics: HashMap<IpAddr, [u8; 6]>,
    /// ip → (mac, port, confirmed).
    learned: HashMap<IpAddr, ([u8; 6], usize, Instant)>,
    cell: Arc<NeighbourCell>,
    /// Changed since the last publish.
    dirty: bool,
}

impl NeighbourTable {
    /// A table of `statics` with settings `conf`, and the cell it publishes
    /// to (holding the statics already).
    pub fn new(conf: NeighbourConf, statics: impl IntoIterator<Item = (IpAddr, [u8; 6])>) -> NeighbourTable {
        let statics: HashMap<IpAddr, [u8; 6]> = statics.into_iter().collect();
        let first = Neighbours { map: statics.iter().map(|(ip, mac)| (*ip, Entry { mac: *mac, learned: None })).collect(), conf };
        NeighbourTable { conf, statics, learned: HashMap::new(), cell: Arc::new(NeighbourCell::new(first, REPORT_QUEUE)), dirty: false }
    }

    /// The cell shared with the workers.
    pub fn cell(&self) -> &Arc<NeighbourCell> {
        &self.cell
    }

    /// The settings.
    pub fn conf(&self) -> NeighbourConf {
        self.conf
    }

    /// Replaces the static entries (config reload) and the timers; learned
    /// entries for addresses that are now static go. Publishes.
    pub fn set_statics(&mut self, conf: NeighbourConf, statics: impl IntoIterator<Item = (IpAddr, [u8; 6])>) {
        self.conf = conf;
        self.statics = statics.into_iter().collect();
        let statics = &self.statics;
        self.learned.retain(|ip, _| !statics.contains_key(ip));
        self.publish();
    }

    /// Takes `l` into the table (a report, or a test's direct input):
    /// ignored for a static address; a new address when the table is full
    /// evicts the learned entry confirmed longest ago. Returns true if the
    /// snapshot changes (always, except for a static address: the
    /// confirmation time moves); the next [`NeighbourTable::tick`]
    /// publishes it.
    pub fn learn(&mut self, l: Learned) -> bool {
        let changed = self.take(l);
        self.dirty |= changed;
        changed
    }

    fn take(&mut self, l: Learned) -> bool {
        if self.statics.contains_key(&l.ip) {
            self.cell.counters.static_kept.add(1);
            return false;
        }
        match self.learned.get_mut(&l.ip) {
            Some(e) => {
                if e.0 != l.mac || e.1 != l.port {
                    self.cell.counters.added.add(1);
                }
                // Reports from several workers may arrive out of order.
                let confirmed = if e.0 == l.mac && e.1 == l.port { e.2.max(l.at) } else { l.at };
                *e = (l.mac, l.port, confirmed);
            }
            None => {
                if self.learned.len() >= self.conf.max_entries {
                    let oldest = self.learned.iter().min_by_key(|(_, e)| e.2).map(|(ip, _)| *ip);
                    match oldest {
                        Some(ip) => {
                            self.learned.remove(&ip);
                            self.cell.counters.evicted.add(1);
                        }
                        None => return false, // max_entries 0: learn nothing
                    }
                }
                self.learned.insert(l.ip, (l.mac, l.port, l.at));
                self.cell.counters.added.add(1);
            }
        }
        true
    }

    /// One control-loop turn at `now`: drains the workers' reports, removes
    /// learned entries not confirmed within reachable + 3 × retrans, and
    /// publishes a new snapshot if anything changed. Returns whether it
    /// published.
    pub fn tick(&mut self, now: Instant) -> bool {
        let mut changed = std::mem::take(&mut self.dirty);
        while let Some(l) = self.cell.reports.pop() {
            changed |= self.take(l);
        }
        let life = self.conf.reachable + self.conf.retrans * MAX_PROBES;
        let before = self.learned.len();
        self.learned.retain(|_, e| now.saturating_duration_since(e.2) < life);
        let gone = before - self.learned.len();
        if gone > 0 {
            self.cell.counters.aged_out.add(gone as u64);
            changed = true;
        }
        if changed {
            self.publish();
        }
        changed
    }

    fn publish(&self) {
        let mut map: HashMap<IpAddr, Entry> = HashMap::with_capacity(self.statics.len() + self.learned.len());
        map.extend(self.learned.iter().map(|(ip, (mac, port, c))| (*ip, Entry { mac: *mac, learned: Some((*port, *c)) })));
        map.extend(self.statics.iter().map(|(ip, mac)| (*ip, Entry { mac: *mac, learned: None })));
        self.cell.publish(Neighbours { map, conf: self.conf });
    }

    /// Learned entries now.
    pub fn learned_len(&self) -> usize {
        self.learned.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn conf(max: usize) -> NeighbourConf {
        NeighbourConf { max_entries: max, reachable: Duration::from_millis(1000), retrans: Duration::from_millis(100) }
    }

    fn l(a: &str, mac: u8, port: usize, at: Instant) -> Learned {
        Learned { ip: ip(a), mac: [2, 0, 0, 0, 0, mac], port, at }
    }

    #[test]
    fn learned_entry_is_reachable_then_stale_then_gone() {
        let t0 = Instant::now();
        let mut t = NeighbourTable::new(conf(8), []);
        assert!(t.cell().report(l("10.0.0.2", 2, 1, t0)));
        assert!(t.tick(t0));
        let n = t.cell().load_full();
        assert_eq!(n.lookup(ip("10.0.0.2"), 1, t0), Some(Hit { mac: [2, 0, 0, 0, 0, 2], stale: false }));
        assert_eq!(n.lookup(ip("10.0.0.2"), 0, t0), None, "learned on port 1: not for port 0");
        assert_eq!(n.lookup(ip("10.0.0.2"), 1, t0 + Duration::from_millis(999)).map(|h| h.stale), Some(false));
        assert_eq!(n.lookup(ip("10.0.0.2"), 1, t0 + Duration::from_millis(1000)).map(|h| h.stale), Some(true));
        // 1000 + 3 × 100 ms: still there just before, gone at.
        assert!(!t.tick(t0 + Duration::from_millis(1299)));
        assert_eq!(t.learned_len(), 1);
        assert!(t.tick(t0 + Duration::from_millis(1300)));
        assert_eq!(t.learned_len(), 0);
        assert_eq!(t.cell().counters.aged_out.get(), 1);
        assert!(t.cell().load().lookup(ip("10.0.0.2"), 1, t0).is_none());
    }

    #[test]
    fn a_confirmation_restarts_the_clock() {
        let t0 = Instant::now();
        let mut t = NeighbourTable::new(conf(8), []);
        t.learn(l("10.0.0.2", 2, 1, t0));
        t.tick(t0);
        let t1 = t0 + Duration::from_millis(1200);
        t.cell().report(l("10.0.0.2", 2, 1, t1));
        t.tick(t1);
        assert!(!t.tick(t0 + Duration::from_millis(2000)));
        assert_eq!(t.learned_len(), 1);
        assert_eq!(t.cell().counters.added.get(), 1, "a confirmation is not an addition");
        // An older report from another worker does not move it back.
        t.cell().report(l("10.0.0.2", 2, 1, t0));
        t.tick(t1);
        assert_eq!(t.cell().load().lookup(ip("10.0.0.2"), 1, t1).map(|h| h.stale), Some(false));
    }

    #[test]
    fn full_table_evicts_the_oldest_learned_entry() {
        let t0 = Instant::now();
        let mut t = NeighbourTable::new(conf(2), [(ip("10.0.0.9"), [2, 0, 0, 0, 0, 9])]);
        t.learn(l("10.0.0.1", 1, 0, t0 + Duration::from_millis(5)));
        t.learn(l("10.0.0.2", 2, 0, t0));
        t.learn(l("10.0.0.3", 3, 0, t0 + Duration::from_millis(10)));
        t.tick(t0 + Duration::from_millis(10));
        let n = t.cell().load_full();
        assert!(n.get(ip("10.0.0.2")).is_none(), "the oldest went");
        assert!(n.get(ip("10.0.0.1")).is_some() && n.get(ip("10.0.0.3")).is_some());
        assert!(n.get(ip("10.0.0.9")).is_some(), "statics do not count and stay");
        assert_eq!(t.cell().counters.evicted.get(), 1);
        assert_eq!(t.cell().counters.entries.get(), 3);
    }

    #[test]
    fn static_entries_are_never_replaced() {
        let t0 = Instant::now();
        let mut t = NeighbourTable::new(conf(8), [(ip("2001:db8::1"), [2, 0, 0, 0, 0, 9])]);
        assert!(!t.learn(l("2001:db8::1", 1, 0, t0)));
        t.tick(t0 + Duration::from_secs(3600));
        let n = t.cell().load_full();
        assert_eq!(n.lookup(ip("2001:db8::1"), 5, t0 + Duration::from_secs(3600)), Some(Hit { mac: [2, 0, 0, 0, 0, 9], stale: false }));
        assert_eq!(t.cell().counters.static_kept.get(), 1);
        // A reload that makes a learned address static drops the learned entry.
        t.learn(l("10.0.0.5", 5, 0, t0));
        t.set_statics(conf(8), [(ip("10.0.0.5"), [2, 0, 0, 0, 0, 6])]);
        assert_eq!(t.learned_len(), 0);
        assert_eq!(t.cell().load().get(ip("10.0.0.5")).map(|e| e.learned), Some(None));
        assert!(t.cell().load().get(ip("2001:db8::1")).is_none());
    }

    #[test]
    fn a_full_report_queue_refuses_without_blocking() {
        let t = NeighbourTable::new(conf(8), []);
        let t0 = Instant::now();
        for i in 0..REPORT_QUEUE {
            assert!(t.cell().report(l("10.0.0.1", (i % 200) as u8 + 1, 0, t0)));
        }
        assert!(!t.cell().report(l("10.0.0.1", 1, 0, t0)));
    }
}
