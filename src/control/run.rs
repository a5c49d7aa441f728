//! Running the gateway: ports, crypto device, worker threads, stats, signals.

use super::manager::Manager;
use super::{stats, ControlError};
use crate::config::model::{Config, CryptoBackend, NeighbourTable, Reassembly, XdpMode};
use crate::crypto::descriptor::{DescriptorConfig, DescriptorDevice};
use crate::crypto::soft::SoftDevice;
use crate::crypto::{CryptoDevice, QpConf};
use crate::dataplane::reassembly::ReassemblyConf;
use crate::dataplane::worker::{Handoff, PendingConf, WorkerConf};
use crate::dataplane::{Worker, WorkerCounters};
use crate::io::af_xdp::{self, AfXdpConfig, AfXdpPort, AttachMode};
use crate::io::PktBuf;
use arc_swap::ArcSwap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Options from the command line.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Print stats every N seconds (overrides `gateway.stats_interval`).
    pub stats_interval: Option<u64>,
    /// Write JSON stats here every second and on exit (atomically).
    pub stats_file: Option<PathBuf>,
    /// Control socket path (overrides `control.socket`; see
    /// `control::socket::socket_path`).
    pub socket: Option<PathBuf>,
}

/// The workers' reassembly settings from the config's `[reassembly]`.
pub fn reassembly_conf(r: &Reassembly) -> ReassemblyConf {
    ReassemblyConf { contexts: r.contexts, max_fragments: r.max_fragments, timeout: Duration::from_millis(r.timeout_ms), forwarded: r.forwarded }
}

/// The workers' pending-queue sizes from the config's `[neighbour_table]`.
pub fn pending_conf(n: &NeighbourTable) -> PendingConf {
    PendingConf { packets: n.pending_packets, per_hop: n.pending_per_hop }
}

/// The temporary file a stats file is written to before the rename: in
/// the same directory, hidden, named after it and this process
/// (`.gw0.json.4711.tmp`), so no other file is taken over (`path` with
/// its extension changed could be someone's, or `path` itself).
fn stats_tmp(path: &std::path::Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Writes `snap` as JSON to `path` atomically (temporary file + rename;
/// a symlink at `path` is replaced, not followed).
fn write_stats_file(path: &PathBuf, snap: &stats::Snapshot) -> std::io::Result<()> {
    let tmp = stats_tmp(path);
    std::fs::write(&tmp, snap.to_json()).and_then(|_| std::fs::rename(&tmp, path))
}

fn write_stats_file_logged(path: &PathBuf, snap: &stats::Snapshot) {
    if let Err(e) = write_stats_file(path, snap) {
        tracing::warn!(path = %path.display(), error = %e, "could not write stats file");
    }
}

/// Runs the gateway with the crypto backend the config names, until SIGINT
/// or SIGTERM; then drains in-flight crypto, stops the workers (their ports
/// are closed and the XDP programs removed) and returns the final counters.
pub fn run(cfg: &Config, opts: &RunOptions) -> Result<stats::Snapshot, ControlError> {
    match cfg.crypto.backend {
        CryptoBackend::Software => run_with(cfg, opts, SoftDevice::with_provider(cfg.gateway.workers as u16, cfg.crypto.provider)),
        CryptoBackend::Descriptor => {
            let dev = DescriptorDevice::with_provider(
                DescriptorConfig {
                    nb_queue_pairs: cfg.gateway.workers as u16,
                    ring_depth: cfg.crypto.ring_depth,
                    max_sessions_per_qp: cfg.crypto.max_sessions_per_qp,
                    nb_engines: cfg.crypto.engines,
                },
                cfg.crypto.provider,
            )?;
            run_with(cfg, opts, dev)
        }
    }
}

/// The cores the workers run on: `gateway.cores`, else 0, 1, 2, ….
/// Errors if one does not exist on this machine. `secgw check` calls it too,
/// so a config that passes `check` does not fail `run` on its cores.
pub fn worker_cores(cfg: &Config) -> Result<Vec<usize>, ControlError> {
    let ids: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().iter().map(|c| c.id).collect();
    let cores: Vec<usize> = (0..cfg.gateway.workers).map(|w| cfg.gateway.cores.get(w).copied().unwrap_or(w)).collect();
    let online = ids.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ");
    for (w, c) in cores.iter().enumerate() {
        if !ids.contains(c) {
            let (field, what) = if w < cfg.gateway.cores.len() {
                (format!("gateway.cores[{w}]"), format!("worker {w} is pinned to core {c}"))
            } else {
                (
                    "gateway.workers".to_owned(),
                    format!("gateway.workers = {} puts worker {w} on core {c} (gateway.cores names no core for it)", cfg.gateway.workers),
                )
            };
            return Err(ControlError::Unsupported(format!(
                "{}: {what}, which does not exist here (cores: {online}); name existing cores in gateway.cores, or run fewer workers",
                cfg.at(&field)
            )));
        }
    }
    Ok(cores)
}

/// [`run`] on a given device.
pub fn run_with<D: CryptoDevice + 'static>(cfg: &Config, opts: &RunOptions, dev: D) -> Result<stats::Snapshot, ControlError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| ControlError::Io(e.into()))?;
    }
    // SIGHUP: reload the config file (make-before-break).
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone()).map_err(|e| ControlError::Io(e.into()))?;
    let nworkers = cfg.gateway.workers.max(1);
    let cores = worker_cores(cfg)?;
    if let Some(path) = &opts.stats_file {
        // Fail fast on a path that cannot be written, without writing it:
        // the first file holds real counters (every port, SA, reason and
        // worker, as the schema wants), once the workers run. A file left
        // by an earlier run goes now: until then there is none, rather
        // than stale counters.
        let tmp = stats_tmp(path);
        std::fs::write(&tmp, b"")
            .and_then(|()| std::fs::remove_file(&tmp))
            .map_err(|e| ControlError::Unsupported(format!("--stats-file {}: cannot write {} beside it: {e}", path.display(), tmp.display())))?;
        if path.is_dir() {
            return Err(ControlError::Unsupported(format!("--stats-file {}: is a directory", path.display())));
        }
        std::fs::remove_file(path)
            .or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
            .map_err(|e| ControlError::Unsupported(format!("--stats-file {}: {e}", path.display())))?;
    }

    // Where each port's fields are in the file (`file:line:column: field`),
    // for the messages about them made here and on the worker threads: the
    // file is read once.
    let positions = crate::config::Positions::read(cfg);
    let port_at = |i: usize, field: &str| positions.locate(&cfg.source, &format!("port[{i}].{field}")).to_string();
    let mut macs = Vec::with_capacity(cfg.ports.len());
    for (i, p) in cfg.ports.iter().enumerate() {
        macs.push(match p.mac {
            Some(m) => m,
            None => af_xdp::interface_mac(&p.interface).map_err(|e| ControlError::Unsupported(format!("{}: {e}", port_at(i, "interface"))))?,
        });
    }
    for (i, p) in cfg.ports.iter().enumerate() {
        // A virtual interface (no device behind it: veth) in skb mode hands
        // generic XDP every frame on queue 0, whatever its queue count.
        let virtual_if = !std::path::Path::new(&format!("/sys/class/net/{}/device", p.interface)).exists();
        let virtual_skb = p.xdp_mode == XdpMode::Skb && virtual_if;
        if virtual_skb && p.queue != 0 {
            tracing::warn!(
                "{}: port {} ({}): queue = {} on a virtual interface (a veth) in xdp_mode \"skb\": generic XDP gets every frame there on queue 0, which no worker reads; this port will receive nothing (queue = 0, or xdp_mode = \"native\")",
                port_at(i, "queue"),
                p.name,
                p.interface,
                p.queue
            );
        }
        if let Ok((rx, tx)) = af_xdp::interface_queues(&p.interface) {
            if let Some(e) = af_xdp::queues_past_end(&p.name, &p.interface, p.queue, cfg.gateway.workers as u32, rx, tx) {
                return Err(ControlError::Unsupported(format!("{}: {e}", port_at(i, "queue"))));
            }
            if let Some(w) = af_xdp::unread_queues(&p.name, &p.interface, p.queue, cfg.gateway.workers as u32, rx, virtual_if).filter(|_| !virtual_skb) {
                tracing::warn!("{}: {w}", port_at(i, "queue"));
            }
        }
        // The interface takes frames up to its own MTU, whatever the port's
        // `mtu` says: above what a packet buffer holds they are lost in the
        // backend (`rx_dropped_backend`).
        let if_mtu = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", p.interface)).ok().and_then(|m| m.trim().parse::<usize>().ok());
        // A port `mtu` above the interface's: secgw would send frames the
        // interface drops unseen and uncounted (a veth does), and send no
        // "fragmentation needed" / Packet Too Big for what the link cannot take.
        if let Some(m) = if_mtu.filter(|&m| m < p.mtu as usize) {
            tracing::warn!(
                "{}: port {} ({}): mtu {} is above the interface's MTU, {m}: packets longer than {m} bytes that secgw sends out of it are dropped by the interface, and counted nowhere; set the port's mtu = {m}, or the interface's MTU to {} (ip link set {} mtu {})",
                port_at(i, "mtu"),
                p.name,
                p.interface,
                p.mtu,
                p.mtu,
                p.interface,
                p.mtu
            );
        }
        if let Some(m) = if_mtu.filter(|&m| m > crate::config::MAX_PORT_MTU as usize) {
            tracing::warn!(
                "{}: port {} ({}): the interface's MTU is {m}, above the largest port mtu, {} (packet buffers hold 2048-byte frames): frames longer than that are dropped as rx_dropped_backend; set the interface's MTU to the port's mtu ({}), e.g. ip link set {} mtu {}",
                port_at(i, "mtu"),
                p.name,
                p.interface,
                crate::config::MAX_PORT_MTU,
                p.mtu,
                p.interface,
                p.mtu
            );
        }
    }
    let info = dev.info();
    tracing::info!(
        driver = info.driver,
        queue_pairs = info.nb_queue_pairs,
        max_sessions_per_qp = info.max_sessions_per_qp,
        provider = info.provider.name(),
        sessions = %crate::config::provider_counts(cfg),
        "crypto device"
    );
    let mut mgr = Manager::new(cfg, &dev, &macs)?;
    mgr.set_grace(Duration::from_millis(cfg.control.rekey_grace_ms));
    // A change is answered once every worker classifies with it (README, Control socket).
    mgr.set_adopt_wait(Duration::from_secs(1));
    mgr.set_stop_flag(stop.clone());
    mgr.set_socket_from_command_line(opts.socket.is_some());
    let sock_path = super::socket::socket_path(cfg, opts);
    let mut server = super::socket::CtlServer::bind(&sock_path)
        .map_err(|e| ControlError::Unsupported(format!("control socket {}: {e}", sock_path.display())))?;
    tracing::info!(socket = %sock_path.display(), "control socket");
    let t = Arc::new(mgr.tables_now());
    let tables = Arc::new(ArcSwap::new(t.clone()));

    // For a worker's AF_XDP open failure, made on its thread.
    let opened_at: Vec<String> = (0..cfg.ports.len()).map(|i| port_at(i, "interface")).collect();
    let mut meshes = Handoff::mesh(nworkers, cfg.gateway.handoff_depth, cfg.gateway.pool_size);
    let mut counters = Vec::with_capacity(nworkers);
    // Each worker's incoming handoff rings, emptied after the workers stop.
    let mut handed_to: Vec<_> = meshes.iter().map(|h| h.from.clone()).collect();
    let mut handles = Vec::with_capacity(nworkers);
    let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<(), String>)>();
    for (w, handoff) in meshes.drain(..).enumerate() {
        let qp = dev.queue_pair_setup::<PktBuf>(w as u16, QpConf { nb_descriptors: cfg.crypto.ring_depth })?;
        let c = Arc::new(WorkerCounters::new(t.ports.len()));
        counters.push(c.clone());
        let port_cfgs: Vec<AfXdpConfig> = cfg
            .ports
            .iter()
            .map(|p| {
                let mut pc = AfXdpConfig::new(p.interface.clone(), p.queue + w as u32);
                pc.ring_size = p.ring_size;
                pc.frame_count = 2 * p.ring_size;
                pc.mode = match p.xdp_mode {
                    XdpMode::Skb => AttachMode::Skb,
                    XdpMode::Native => AttachMode::Native,
                    XdpMode::Auto => AttachMode::Auto,
                };
                pc
            })
            .collect();
        let opened_at = opened_at.clone();
        let core = cores[w];
        let wconf = WorkerConf { id: w, burst: cfg.gateway.burst, pool_size: cfg.gateway.pool_size, nb_workers: nworkers, idle_sleep_us: cfg.gateway.idle_sleep_us, idle_spin_us: cfg.gateway.idle_spin_us, reasm: reassembly_conf(&cfg.reassembly), neigh: pending_conf(&cfg.neighbour_table), pmtu_timeout_ms: cfg.gateway.pmtu_timeout_s.saturating_mul(1000), icmp_echo: cfg.gateway.icmp_echo };
        let (wstop, wtables, ready) = (stop.clone(), tables.clone(), ready_tx.clone());
        let h = std::thread::Builder::new()
            .name(format!("secgw-worker{w}"))
            .spawn(move || {
                if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
                    tracing::warn!(worker = w, core, "could not pin worker");
                }
                // Ports are opened on the thread that polls them.
                let mut ports = Vec::with_capacity(port_cfgs.len());
                for (i, pc) in port_cfgs.iter().enumerate() {
                    match AfXdpPort::open(i as u16, pc) {
                        Ok(p) => ports.push(p),
                        Err(e) => {
                            let _ = ready.send((w, Err(format!("{}: {e}", opened_at[i]))));
                            return;
                        }
                    }
                }
                let mut worker = Worker::new(wconf, ports, qp, wtables, c, handoff);
                let _ = ready.send((w, Ok(())));
                worker.run(&wstop);
                // Dropping the worker closes its sockets; the last socket on an
                // interface removes the XDP program.
            })
            .map_err(|e| ControlError::Worker { worker: w, what: e.to_string() })?;
        handles.push(h);
    }
    drop(ready_tx);

    let mut failure = None;
    for _ in 0..nworkers {
        match ready_rx.recv_timeout(Duration::from_secs(60)) {
            Ok((_, Ok(()))) => {}
            Ok((w, Err(what))) => {
                failure = Some(ControlError::Worker { worker: w, what });
                break;
            }
            Err(_) => {
                failure = Some(ControlError::Worker { worker: 0, what: "workers did not start within 60 s".into() });
                break;
            }
        }
    }
    if let Some(e) = failure {
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.join();
        }
        return Err(e);
    }
    mgr.start_publishing(tables.clone(), counters.clone());
    if let Some(path) = &opts.stats_file {
        write_stats_file_logged(path, &mgr.stats());
    }
    tracing::info!(gateway = %cfg.gateway.name, workers = nworkers, ports = cfg.ports.len(), sas = cfg.sas.len(), "ready");

    let interval = opts.stats_interval.unwrap_or(cfg.gateway.stats_interval);
    let mut last_print = Instant::now();
    let mut last_file = Instant::now();
    let mut last_request = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // Short naps while a client is talking, longer ones when idle.
        let nap = if last_request.elapsed() < Duration::from_millis(200) { Duration::from_micros(500) } else { Duration::from_millis(5) };
        std::thread::sleep(nap);
        let now = Instant::now();
        if server.poll(&mut mgr) > 0 {
            last_request = Instant::now();
        }
        if hup.swap(false, Ordering::Relaxed) {
            // A reload logs what it applied and its warnings itself.
            tracing::info!("SIGHUP: reloading the config");
            if let Err(e) = mgr.reload(now) {
                tracing::error!(error = %e, "SIGHUP: reload refused");
            }
        }
        mgr.tick(now);
        mgr.publish();
        for ev in mgr.take_events() {
            server.broadcast(&ev.to_protocol());
        }
        if handles.iter().any(|h| h.is_finished()) {
            // A worker leaves on its own only when `stop` is not set yet
            // (SIGINT/SIGTERM sets it before the workers see it).
            if !stop.load(Ordering::Relaxed) {
                tracing::error!("a worker stopped unexpectedly; stopping");
            }
            stop.store(true, Ordering::Relaxed);
            break;
        }
        if interval > 0 && last_print.elapsed() >= Duration::from_secs(interval) {
            last_print = Instant::now();
            println!("{}", mgr.stats().to_text());
        }
        if let Some(path) = &opts.stats_file {
            if last_file.elapsed() >= Duration::from_secs(1) {
                last_file = Instant::now();
                write_stats_file_logged(path, &mgr.stats());
            }
        }
    }
    tracing::info!("stopping: draining in-flight crypto ops");
    let mut panicked = None;
    for (w, h) in handles.into_iter().enumerate() {
        if h.join().is_err() {
            panicked = Some(w);
        }
    }
    // A packet one worker handed to another in its last poll, after that
    // one had stopped taking them, is counted, not lost silently.
    for (from, c) in handed_to.drain(..).zip(&counters) {
        let n = Handoff::drop_stranded(&from, c);
        if n > 0 {
            tracing::info!(packets = n, "left in handoff rings at shutdown: counted as shutdown drops");
        }
    }
    let snap = mgr.stats();
    if let Some(path) = &opts.stats_file {
        write_stats_file_logged(path, &snap);
    }
    if let Some(w) = panicked {
        return Err(ControlError::Worker { worker: w, what: "panicked".into() });
    }
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_are_the_dataplane_defaults() {
        assert_eq!(reassembly_conf(&Reassembly::default()), ReassemblyConf::DEFAULT);
    }

    /// The temporary stats file is this process's own, beside the file:
    /// never the file itself nor `X.tmp` (helper-90 lost a `s5.tmp`).
    #[test]
    fn stats_tmp_is_hidden_and_per_process() {
        let pid = std::process::id();
        assert_eq!(stats_tmp(std::path::Path::new("/run/gw/s5.json")), PathBuf::from(format!("/run/gw/.s5.json.{pid}.tmp")));
        let p = std::path::Path::new("/run/gw/s.tmp");
        assert_ne!(stats_tmp(p), p);
    }
}
