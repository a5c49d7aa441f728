//! Running the gateway: ports, crypto device, worker thread, stats, signals.

use super::{stats, tables, ControlError};
use crate::config::model::{Config, XdpMode};
use crate::crypto::soft::SoftDevice;
use crate::crypto::{CryptoDevice, QpConf};
use crate::dataplane::worker::WorkerConf;
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
}

/// Crypto ops a queue pair holds in flight.
const QP_DEPTH: usize = 1024;
/// Packet buffers per worker.
const POOL_SIZE: usize = 4096;

fn write_stats_file(path: &PathBuf, snap: &stats::Snapshot) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, snap.to_json()).and_then(|_| std::fs::rename(&tmp, path)).is_err() {
        tracing::warn!(path = %path.display(), "could not write stats file");
    }
}

/// Runs the gateway until SIGINT or SIGTERM, then drains in-flight crypto,
/// stops the worker (its ports are closed and their XDP programs removed)
/// and returns the final counters.
pub fn run(cfg: &Config, opts: &RunOptions) -> Result<stats::Snapshot, ControlError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| ControlError::Io(e.into()))?;
    }

    let mut macs = Vec::with_capacity(cfg.ports.len());
    for p in &cfg.ports {
        macs.push(match p.mac {
            Some(m) => m,
            None => af_xdp::interface_mac(&p.interface)?,
        });
    }
    let dev = SoftDevice::new(cfg.gateway.workers as u16);
    let info = dev.info();
    tracing::info!(driver = info.driver, queue_pairs = info.nb_queue_pairs, max_sessions_per_qp = info.max_sessions_per_qp, "crypto device");
    let tables = Arc::new(ArcSwap::from_pointee(tables::build(cfg, &dev, &macs)?));
    let t = tables.load_full();
    let counters = Arc::new(WorkerCounters::new(t.ports.len(), t.sad.outbound.len(), t.sad.inbound.len()));

    let worker_id = 0usize;
    let qp = dev.queue_pair_setup::<PktBuf>(worker_id as u16, QpConf { nb_descriptors: QP_DEPTH })?;
    let port_cfgs: Vec<AfXdpConfig> = cfg
        .ports
        .iter()
        .map(|p| {
            let mut c = AfXdpConfig::new(p.interface.clone(), p.queue);
            c.mode = match p.xdp_mode {
                XdpMode::Skb => AttachMode::Skb,
                XdpMode::Native => AttachMode::Native,
                XdpMode::Auto => AttachMode::Auto,
            };
            c
        })
        .collect();
    // Worker i runs on cores[i]; without a list, on core i.
    let core = Some(cfg.gateway.cores.first().copied().unwrap_or(worker_id));
    if let Some(c) = core {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        if !ids.iter().any(|id| id.id == c) {
            return Err(ControlError::Unsupported(format!(
                "{}: gateway.cores: core {c} does not exist here (cores: {:?})",
                cfg.source.display(),
                ids.iter().map(|i| i.id).collect::<Vec<_>>()
            )));
        }
    }
    let wconf = WorkerConf { id: worker_id, burst: cfg.gateway.burst, pool_size: POOL_SIZE };
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let (wstop, wtables, wcounters) = (stop.clone(), tables.clone(), counters.clone());
    let handle = std::thread::Builder::new()
        .name(format!("secgw-worker{worker_id}"))
        .spawn(move || {
            if let Some(c) = core {
                if !core_affinity::set_for_current(core_affinity::CoreId { id: c }) {
                    tracing::warn!(core = c, "could not pin worker");
                }
            }
            // Ports are opened on the thread that polls them.
            let mut ports = Vec::with_capacity(port_cfgs.len());
            for (i, pc) in port_cfgs.iter().enumerate() {
                match AfXdpPort::open(i as u16, pc) {
                    Ok(p) => ports.push(p),
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                }
            }
            let mut w = Worker::new(wconf, ports, qp, wtables, wcounters);
            let _ = ready_tx.send(Ok(()));
            w.run(&wstop);
            // Dropping the worker closes its sockets and removes the XDP programs.
        })
        .map_err(|e| ControlError::Worker { worker: worker_id, what: e.to_string() })?;

    match ready_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(())) => {}
        Ok(Err(what)) => {
            let _ = handle.join();
            return Err(ControlError::Worker { worker: worker_id, what });
        }
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            let _ = handle.join();
            return Err(ControlError::Worker { worker: worker_id, what: "did not start within 60 s".into() });
        }
    }
    tracing::info!(gateway = %cfg.gateway.name, ports = cfg.ports.len(), sas = cfg.sas.len(), "ready");

    let interval = opts.stats_interval.unwrap_or(cfg.gateway.stats_interval);
    let all = [counters.clone()];
    let mut last_print = Instant::now();
    let mut last_file = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        if handle.is_finished() {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        if interval > 0 && last_print.elapsed() >= Duration::from_secs(interval) {
            last_print = Instant::now();
            println!("{}", stats::snapshot(&t, &all).to_text());
        }
        if let Some(path) = &opts.stats_file {
            if last_file.elapsed() >= Duration::from_secs(1) {
                last_file = Instant::now();
                write_stats_file(path, &stats::snapshot(&t, &all));
            }
        }
    }
    tracing::info!("stopping: draining in-flight crypto ops");
    handle.join().map_err(|_| ControlError::Worker { worker: worker_id, what: "panicked".into() })?;
    let snap = stats::snapshot(&t, &all);
    if let Some(path) = &opts.stats_file {
        write_stats_file(path, &snap);
    }
    Ok(snap)
}
