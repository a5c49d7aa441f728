//! Binding SAs to workers (and so to the workers' crypto queue pairs).
//!
//! Every SA is owned by exactly one worker: that worker holds its mutable
//! state (sequence counter, replay window) and its session is used on that
//! worker's queue pair. SAs pinned in the config (`worker = N`) go where they
//! are told; the rest go, in file order, to the worker holding the fewest
//! SAs of the same direction (ties: the fewest SAs, then the lowest id), so
//! traffic in one direction only still keeps every worker's crypto busy
//! (helper-101: a file of outbound / inbound pairs put every outbound SA
//! on worker 0, and a one-way load left worker 1 with no crypto). With a
//! device limit (`max_sessions_per_qp > 0`) no queue pair gets more
//! sessions than the limit (a full worker is passed over); a config that
//! cannot fit is refused with a message naming the SA, the limit and the
//! totals.

use crate::config::model::{Config, Direction, Sa};

/// Where each SA goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Owner worker of `cfg.sas[i]`.
    pub owner: Vec<usize>,
    /// Indices into `cfg.sas` bound to each worker's queue pair.
    pub per_worker: Vec<Vec<usize>>,
}

/// A config whose SAs cannot be bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at} (SPI {spi} {direction}): {what}")]
pub struct BindError {
    /// Config file, line and column, and field: `file:line:column:
    /// sa[2].worker` for a pinned SA, `file:line:column: sa[2]` else
    /// ([`Config::at`]).
    pub at: String,
    /// Index of the SA in the file.
    pub index: usize,
    /// Its SPI.
    pub spi: u32,
    /// "outbound" / "inbound".
    pub direction: &'static str,
    /// What does not fit.
    pub what: String,
}

fn dir(d: Direction) -> &'static str {
    match d {
        Direction::Outbound => "outbound",
        Direction::Inbound => "inbound",
    }
}

/// Binds every SA of `cfg` to one of `cfg.gateway.workers` workers, each
/// with one queue pair of at most `max_sessions_per_qp` sessions (0 =
/// unlimited).
pub fn bind(cfg: &Config, max_sessions_per_qp: u32) -> Result<Binding, BindError> {
    let workers = cfg.gateway.workers.max(1);
    let limit = max_sessions_per_qp as usize;
    let mut per_worker: Vec<Vec<usize>> = vec![Vec::new(); workers];
    // SAs of each direction (outbound, inbound) per worker, kept beside
    // `per_worker` so the choice below stays O(workers) per SA.
    let mut per_dir = vec![[0usize; 2]; workers];
    let d = |sa: &Sa| usize::from(sa.direction == Direction::Inbound);
    let mut owner = vec![usize::MAX; cfg.sas.len()];
    let err = |i: usize, what: String| BindError {
        at: cfg.at(&if cfg.sas[i].worker.is_some() { format!("sa[{i}].worker") } else { format!("sa[{i}]") }),
        index: i,
        spi: cfg.sas[i].spi,
        direction: dir(cfg.sas[i].direction),
        what,
    };
    // Pinned SAs first, so balancing works around them.
    for (i, sa) in cfg.sas.iter().enumerate() {
        let Some(w) = sa.worker else { continue };
        if w >= workers {
            return Err(err(i, format!("pinned to worker {w}, but gateway.workers = {workers}")));
        }
        if limit > 0 && per_worker[w].len() >= limit {
            return Err(err(
                i,
                format!("pinned to worker {w}, whose queue pair already holds {} sessions (max_sessions_per_qp = {limit})", per_worker[w].len()),
            ));
        }
        per_worker[w].push(i);
        per_dir[w][d(sa)] += 1;
        owner[i] = w;
    }
    for (i, sa) in cfg.sas.iter().enumerate() {
        if sa.worker.is_some() {
            continue;
        }
        let room = |w: &usize| limit == 0 || per_worker[*w].len() < limit;
        let Some(w) = (0..workers).filter(room).min_by_key(|&w| (per_dir[w][d(sa)], per_worker[w].len())) else {
            return Err(err(
                i,
                format!(
                    "no queue pair has room: max_sessions_per_qp = {limit} × {workers} worker(s) = {} sessions, and the config has {} SAs; raise [crypto] max_sessions_per_qp (the descriptor device's default is 64) or gateway.workers",
                    limit * workers,
                    cfg.sas.len()
                ),
            ));
        };
        per_worker[w].push(i);
        per_dir[w][d(sa)] += 1;
        owner[i] = w;
    }
    Ok(Binding { owner, per_worker })
}

/// One line per SA: `SA <spi> <dir> → worker W → queue pair W`.
pub fn describe(cfg: &Config, b: &Binding, driver: &str) -> String {
    let mut o = String::new();
    for (i, sa) in cfg.sas.iter().enumerate() {
        let w = b.owner[i];
        o.push_str(&format!(
            "  SA {:<10} {:<8} → worker {w} (core {}) → {driver} queue pair {w}{}\n",
            sa.spi,
            dir(sa.direction),
            cfg.gateway.cores.get(w).copied().unwrap_or(w),
            if sa.worker.is_some() { " (pinned)" } else { "" }
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(workers: usize, pins: &[Option<usize>]) -> Config {
        let mut t = format!(
            "[gateway]\nworkers = {workers}\ncores = [{}]\n[[port]]\nname = \"in\"\ninterface = \"a\"\nrole = \"protected\"\n[[port]]\nname = \"out\"\ninterface = \"b\"\nrole = \"unprotected\"\n",
            (0..workers).map(|w| w.to_string()).collect::<Vec<_>>().join(",")
        );
        for (i, pin) in pins.iter().enumerate() {
            t.push_str(&format!(
                "[[sa]]\nspi = {}\ndirection = \"outbound\"\nalgorithm = \"aes-128-gcm\"\nkey = \"{:040x}\"\ntunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"\n{}",
                1000 + i,
                i + 1,
                pin.map(|w| format!("worker = {w}\n")).unwrap_or_default()
            ));
            t.push_str(&format!("[[policy]]\ndirection = \"outbound\"\ndst_ports = \"{i}\"\nprotocol = \"udp\"\naction = \"protect {}\"\n", 1000 + i));
        }
        // On disk: binding errors read the file again for line:column.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("secgw-binding-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("t.toml");
        std::fs::write(&path, &t).expect("write config");
        crate::config::load(&path).expect("test config parses")
    }

    #[test]
    fn balanced_and_within_the_limit() {
        let c = cfg(2, &[None; 4]);
        let b = bind(&c, 2).unwrap();
        assert_eq!(b.owner, vec![0, 1, 0, 1]);
        assert_eq!(b.per_worker, vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(bind(&c, 0).unwrap().owner, vec![0, 1, 0, 1]);
    }

    /// Outbound / inbound pairs in file order: each direction spread over
    /// both workers (fewest total alone gave worker 0 every outbound SA).
    #[test]
    fn each_direction_is_spread_over_the_workers() {
        let mut c = cfg(2, &[None; 8]);
        for (i, sa) in c.sas.iter_mut().enumerate() {
            if i % 2 == 1 {
                sa.direction = Direction::Inbound;
            }
        }
        let b = bind(&c, 0).unwrap();
        for d in [Direction::Outbound, Direction::Inbound] {
            let per: Vec<usize> = (0..2).map(|w| b.per_worker[w].iter().filter(|&&i| c.sas[i].direction == d).count()).collect();
            assert_eq!(per, [2, 2], "{d:?}: {:?}", b.owner);
        }
        // A full worker is passed over for one with room.
        let b = bind(&c, 4).unwrap();
        assert!(b.per_worker.iter().all(|w| w.len() == 4), "{:?}", b.per_worker);
    }

    #[test]
    fn fifth_sa_is_refused_with_the_totals() {
        let e = bind(&cfg(2, &[None; 5]), 2).unwrap_err();
        assert_eq!(e.index, 4);
        assert_eq!(e.spi, 1004);
        let msg = e.to_string();
        // Placed where the fifth [[sa]] starts: 11 lines of gateway and
        // ports, then 7 lines of SA and 5 of policy each.
        assert!(msg.contains(&format!("/t.toml:{}:1: sa[4] (SPI 1004 outbound)", 11 + 4 * 12 + 1)), "{msg}");
        assert!(msg.contains("max_sessions_per_qp = 2 × 2 worker(s) = 4 sessions, and the config has 5 SAs"), "{msg}");
    }

    #[test]
    fn pinned_sas_are_placed_first_and_checked() {
        let b = bind(&cfg(2, &[None, Some(0), Some(0), None]), 0).unwrap();
        assert_eq!(b.owner, vec![1, 0, 0, 1]);
        let e = bind(&cfg(2, &[Some(1), Some(1), Some(1)]), 2).unwrap_err();
        assert_eq!(e.index, 2);
        assert!(e.to_string().contains("pinned to worker 1, whose queue pair already holds 2 sessions"), "{e}");
        // Placed at the third SA's `worker = 1` (8 lines of SA, 5 of policy each).
        assert!(e.to_string().contains(&format!("/t.toml:{}:10: sa[2].worker (SPI 1002 outbound)", 11 + 2 * 13 + 8)), "{e}");
    }
}
