//! Opening the AF_XDP ports of a generator, sink or forwarder: queues
//! 0..N of one interface, each bind retried while the queue is busy, and
//! the checks that come before (the link MTU, one interface for both sides
//! of a forwarder).
//!
//! Why retry: the kernel releases an AF_XDP socket asynchronously after
//! its process exits, so a tool started right after the previous one (a
//! sink per bench trial) can find the queue still bound and get `EBUSY`
//! from `bind(2)`. [`BIND_BACKOFF`] waits about 2 s in all before the error
//! is returned, naming the interface and queue. An interface whose lock a
//! live process holds (secgw or secgw-pktgen: its pid is in the lock) is
//! refused at once, naming that process by its command name: it is
//! running, not exiting. `--queues` past the interface's queue count is
//! refused before any bind ([`check_queues`]).

use super::{sleep_unless_stopped, PktgenError, MAX_QUEUES};
use crate::io::af_xdp::{AfXdpConfig, AfXdpPort};
use crate::io::IoError;
use std::cell::Cell;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Waits between bind attempts while the queue is busy: 10 ms doubling to
/// 320 ms, then 400 ms, about 2 s in all (11 attempts).
pub const BIND_BACKOFF: [Duration; 10] = [
    Duration::from_millis(10),
    Duration::from_millis(20),
    Duration::from_millis(40),
    Duration::from_millis(80),
    Duration::from_millis(160),
    Duration::from_millis(320),
    Duration::from_millis(400),
    Duration::from_millis(400),
    Duration::from_millis(400),
    Duration::from_millis(200),
];

/// True when `e` says the queue or interface is held by another socket or
/// process, which may let go of it shortly: the socket's bind failed with
/// `EBUSY` (os error 16, carried as text in `IoError::Setup`), or another
/// process holds the interface's lock ([`IoError::Busy`]).
pub fn is_busy(e: &IoError) -> bool {
    match e {
        IoError::Setup { what, .. } => what.contains("(os error 16)"),
        IoError::Busy { .. } => true,
        IoError::Os(o) => o.raw_os_error() == Some(libc::EBUSY),
        IoError::NoInterface(_) => false,
    }
}

/// Calls `attempt` until it succeeds, fails other than busy ([`is_busy`]),
/// or `backoff` is used up, calling `sleep` with each wait in between. An
/// interface lock held by a live process (its pid in the lock, its
/// `/proc/PID/comm` readable) is not waited for: that process is running,
/// not exiting. Errors: the last error ([`PktgenError::Io`]) when not busy;
/// a lock held by a live process at once, [`PktgenError::Invalid`] naming
/// `iface`, `queue` and the holder by its command name and pid; when still
/// busy at the end, [`PktgenError::Invalid`] naming `iface` and `queue`,
/// the time waited and the last error.
pub fn retry_busy<T>(iface: &str, queue: u32, backoff: &[Duration], mut sleep: impl FnMut(Duration), mut attempt: impl FnMut() -> Result<T, IoError>) -> Result<T, PktgenError> {
    let mut waited = Duration::ZERO;
    let mut waits = backoff.iter();
    loop {
        match attempt() {
            Ok(t) => return Ok(t),
            Err(e) if is_busy(&e) => {
                if let IoError::Busy { pid: Some(pid), holder: Some(name), .. } = &e {
                    return Err(PktgenError::Invalid(format!("{iface} queue {queue}: the interface is in use by {name} (pid {pid}), a running process: stop it first, or use another interface")));
                }
                match waits.next() {
                Some(&d) => {
                    tracing::debug!(%iface, queue, "queue busy, retrying in {d:?}: {e}");
                    sleep(d);
                    waited += d;
                }
                None => {
                    return Err(PktgenError::Invalid(format!(
                        "{iface} queue {queue} still busy after {:.1} s of retries: another AF_XDP socket (another secgw or secgw-pktgen, maybe still exiting) may hold it ({e})",
                        waited.as_secs_f64()
                    )))
                }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Queues of interface `name` an AF_XDP socket can bind: the smaller of
/// its receive and transmit queue counts (the `rx-N` and `tx-N` entries of
/// `/sys/class/net/NAME/queues`, the caller's network namespace; the
/// kernel's `xsk_bind` refuses a queue id at or past either with
/// `EINVAL`). Errors: the directory cannot be read (the message names it).
pub fn queue_count(name: &str) -> Result<u32, String> {
    crate::io::af_xdp::interface_queues(name).map(|(rx, tx)| rx.min(tx))
}

/// Refuses `--queues queues` on `iface` when it has fewer queues than that
/// (`have`: [`queue_count`]; when it could not be read, nothing is refused
/// here and the bind says what is wrong). Errors: [`PktgenError::Invalid`]
/// naming the option, the interface and its queue count.
pub fn check_queues(iface: &str, queues: u32, have: Result<u32, String>) -> Result<(), PktgenError> {
    match have {
        Ok(n) if queues > n => Err(PktgenError::Invalid(format!(
            "--queues {queues}: {iface} has {n} queue{} (/sys/class/net/{iface}/queues), so at most --queues {n}",
            if n == 1 { "" } else { "s" }
        ))),
        _ => Ok(()),
    }
}

/// Opens AF_XDP ports on queues `0..queues` of `iface` with the settings of
/// `template` (its queue is replaced), port ids from `first_id`, each bind
/// retried over [`BIND_BACKOFF`] while busy; the waits between retries end
/// within [`super::STOP_POLL`] of `stop` being set (SIGINT/SIGTERM), and
/// then no more binds are tried. Errors: `queues` is not in
/// 1..=[`MAX_QUEUES`] or more than the interface has ([`check_queues`]);
/// stopped while a queue was busy ([`IoError::Setup`] saying so); or as
/// [`retry_busy`].
pub fn open(iface: &str, queues: u32, template: &AfXdpConfig, first_id: u16, stop: &AtomicBool) -> Result<Vec<AfXdpPort>, PktgenError> {
    if !(1..=MAX_QUEUES).contains(&queues) {
        return Err(PktgenError::Invalid(format!("--queues {queues}: must be 1..={MAX_QUEUES}")));
    }
    check_queues(iface, queues, queue_count(iface))?;
    (0..queues)
        .map(|q| {
            let mut c = template.clone();
            c.interface = iface.to_string();
            c.queue = q;
            let id = first_id.saturating_add(q as u16);
            let stopped = Cell::new(false);
            let sleep = |d| stopped.set(!sleep_unless_stopped(d, stop));
            retry_busy(iface, q, &BIND_BACKOFF, sleep, || {
                if stopped.get() {
                    return Err(IoError::Setup { interface: iface.to_string(), queue: q, what: "stopped (SIGINT/SIGTERM) while waiting for the busy queue".into() });
                }
                AfXdpPort::open(id, &c)
            })
        })
        .collect()
}

/// The kernel's index of interface `name` (`/sys/class/net/NAME/ifindex`
/// of the caller's network namespace), `None` if it cannot be read.
fn ifindex(name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex")).ok()?.trim().parse().ok()
}

/// Refuses a forwarder whose in and out interfaces are one (same name, or
/// same interface index): its out sockets would bind the queues the in
/// sockets hold. Errors: [`PktgenError::Invalid`] saying so.
pub fn check_forward_interfaces(input: &str, output: &str) -> Result<(), PktgenError> {
    let same = input == output || matches!((ifindex(input), ifindex(output)), (Some(a), Some(b)) if a == b);
    if same {
        return Err(PktgenError::Invalid(format!(
            "--in {input} and --out {output} are the same interface: a forwarder needs two (its out sockets would bind the queues its in sockets hold)"
        )));
    }
    Ok(())
}

/// IP MTU of interface `name` in bytes (`/sys/class/net/NAME/mtu` of the
/// caller's network namespace). Errors: the file cannot be read or parsed
/// (the message names it).
pub fn link_mtu(name: &str) -> Result<usize, String> {
    let path = format!("/sys/class/net/{name}/mtu");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    text.trim().parse().map_err(|_| format!("{path}: {:?} is not a number", text.trim()))
}

/// The warning for IP packets of up to `ip_len` bytes (`inner`: the
/// plaintext size when they are ESP) sent on `iface` whose MTU is `mtu`
/// ([`link_mtu`]; when it could not be read, 1500 is assumed and said).
/// `None` when they fit.
pub fn mtu_warning(iface: &str, ip_len: usize, inner: Option<usize>, mtu: Result<usize, String>) -> Option<String> {
    let (mtu, assumed) = match mtu {
        Ok(m) => (m, String::new()),
        Err(e) => (1500, format!(" (assumed: {e})")),
    };
    if ip_len <= mtu {
        return None;
    }
    let what = match inner {
        Some(i) => format!("ESP packets of up to {ip_len} bytes ({i}-byte inner packets)"),
        None => format!("packets of up to {ip_len} bytes"),
    };
    Some(format!("{what} exceed the MTU of {iface}, {mtu} bytes{assumed}: the link or its peer drops them (a gateway would fragment or refuse the inner packet)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::process_name;

    fn busy() -> IoError {
        IoError::Setup {
            interface: "sink0".into(),
            queue: 1,
            what: "socket: non-zero error code returned when creating AF_XDP socket: Device or resource busy (os error 16)".into(),
        }
    }

    #[test]
    fn busy_binds_are_retried_then_reported_with_interface_and_queue() {
        // Busy twice, then bound: two sleeps of the schedule, the port returned.
        let (mut calls, mut slept) = (0, Vec::new());
        let r = retry_busy("sink0", 1, &BIND_BACKOFF, |d| slept.push(d), || {
            calls += 1;
            if calls < 3 {
                Err(busy())
            } else {
                Ok(7)
            }
        });
        assert_eq!(r.unwrap(), 7);
        assert_eq!(slept, BIND_BACKOFF[..2]);
        // Busy for good: every wait taken (about 2 s), then a message naming
        // the interface, the queue and the likely cause.
        let mut slept = Duration::ZERO;
        let e = retry_busy::<()>("sink0", 1, &BIND_BACKOFF, |d| slept += d, || Err(busy())).unwrap_err().to_string();
        assert!((Duration::from_millis(1900)..=Duration::from_millis(2500)).contains(&slept), "{slept:?}");
        assert!(e.contains("sink0 queue 1") && e.contains("another AF_XDP socket") && e.contains("os error 16"), "{e}");
        // The lock of a process that has gone (no /proc entry: pids stay
        // below 2^22) is busy too: retried.
        let gone = || IoError::Busy { interface: "x".into(), pid: Some(4_000_000_000), holder: None };
        assert!(is_busy(&gone()));
        let mut slept = Duration::ZERO;
        let e = retry_busy::<()>("x", 0, &BIND_BACKOFF, |d| slept += d, || Err(gone())).unwrap_err().to_string();
        assert!(slept >= Duration::from_millis(1900) && e.contains("still busy"), "{slept:?} {e}");
        // Anything else fails at once.
        let mut calls = 0;
        let e = retry_busy::<()>("x", 0, &BIND_BACKOFF, |_| panic!("no sleep"), || {
            calls += 1;
            Err(IoError::NoInterface("x".into()))
        });
        assert_eq!(calls, 1);
        assert!(e.unwrap_err().to_string().contains("not found"));
        assert!(!is_busy(&IoError::Setup { interface: "x".into(), queue: 0, what: "ring_size 3 is not a power of two".into() }));
    }

    #[test]
    fn a_lock_held_by_a_running_process_fails_at_once_naming_it() {
        // This test process holds the lock: it is running, so no wait, and
        // it is named by its command name, not as "another secgw process".
        let me = std::process::id();
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap().trim_end().to_string();
        let mut calls = 0;
        let e = retry_busy::<()>("sink0", 0, &BIND_BACKOFF, |_| panic!("no wait for a running holder"), || {
            calls += 1;
            Err(IoError::Busy { interface: "sink0".into(), pid: Some(me), holder: process_name(me) })
        })
        .unwrap_err()
        .to_string();
        assert_eq!(calls, 1);
        assert!(e.contains(&format!("sink0 queue 0: the interface is in use by {comm} (pid {me}), a running process")), "{e}");
        assert!(!e.contains("secgw process"), "{e}");
        assert_eq!(process_name(me), Some(comm));
        assert_eq!(process_name(4_000_000_000), None);
    }

    #[test]
    fn more_queues_than_the_interface_has_are_refused_up_front() {
        // "lo" exists in every namespace, with one queue each way.
        assert_eq!(queue_count("lo"), Ok(1));
        assert!(queue_count("no-such-if0").unwrap_err().contains("/sys/class/net/no-such-if0/queues"));
        let e = check_queues("lo", 2, queue_count("lo")).unwrap_err().to_string();
        assert_eq!(e, "--queues 2: lo has 1 queue (/sys/class/net/lo/queues), so at most --queues 1");
        assert!(check_queues("lo", 1, Ok(1)).is_ok());
        assert!(check_queues("gen0", 4, Ok(2)).unwrap_err().to_string().contains("gen0 has 2 queues"));
        // Unreadable: left to the bind.
        assert!(check_queues("x", 64, Err("gone".into())).is_ok());
    }

    #[test]
    fn one_interface_on_both_sides_of_a_forwarder_is_refused() {
        let e = check_forward_interfaces("fwd-in", "fwd-in").unwrap_err().to_string();
        assert!(e.contains("--in fwd-in and --out fwd-in are the same interface"), "{e}");
        assert!(check_forward_interfaces("fwd-in", "fwd-out").is_ok());
        // "lo" exists in every namespace: its MTU is readable.
        assert!(link_mtu("lo").unwrap() >= 1280);
        assert!(link_mtu("no-such-if0").unwrap_err().contains("/sys/class/net/no-such-if0/mtu"));
    }

    #[test]
    fn the_mtu_warning_uses_the_real_link_mtu() {
        // bench.sh's links have MTU 1600: a 1500-byte inner packet's ~1550-byte ESP packet fits.
        assert_eq!(mtu_warning("gen0", 1554, Some(1500), Ok(1600)), None);
        let w = mtu_warning("a0", 1554, Some(1500), Ok(1500)).unwrap();
        assert!(w.contains("1554") && w.contains("1500-byte inner") && w.contains("MTU of a0, 1500 bytes"), "{w}");
        assert!(mtu_warning("a0", 1500, None, Ok(1400)).unwrap().contains("packets of up to 1500 bytes"));
        assert_eq!(mtu_warning("a0", 1500, None, Ok(1500)), None);
        let w = mtu_warning("x", 1600, None, Err("reading /sys/class/net/x/mtu: gone".into())).unwrap();
        assert!(w.contains("1500 bytes (assumed: reading /sys/class/net/x/mtu"), "{w}");
    }
}
