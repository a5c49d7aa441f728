//! The generator loop: build → (ESP seal) → burst out, paced by a token
//! bucket, on one thread driving one port per tx queue.
//!
//! Flow *i* goes out on queue `i % queues` (with fewer flows than queues
//! the extra queues stay idle); each burst goes to one queue, the one whose
//! flows have each been sent the fewest packets so far (so a queue with
//! fewer flows gets fewer turns, and every flow the same share of the rate
//! however the flows divide among the queues; a queue with a full ring
//! gives its turn to the next), and within a queue the flows take turns
//! packet by packet.
//! Sequence numbers count per flow from 0 across warm-up and measurement;
//! a packet is *measured* (payload flag bit 0) when it is due after the
//! warm-up: with `--rate`, by its slot in the pacing schedule
//! ([`super::pace`]: packet *k* due at `start + k / rate`), so a run that
//! keeps up sends exactly rate × duration measured packets (when that is
//! whole; else one of the two nearest); at full speed (`--rate 0`), when it is built
//! after the warm-up. The transmit timestamp is read per packet just before it is
//! built (and, in ESP mode, sealed: the timestamp is inside the
//! ciphertext).
//!
//! A full tx ring is never a silent drop: the burst is cut to the free
//! room first (tokens given back, `tx_ring_full` counted), and frames the
//! port still refuses are retried after a poll (`tx_ring_full` again) until
//! the run is over; only then are they counted in `tx_failed`.

use super::build::PacketBuilder;
use super::pace::{TokenBucket, SLEEP_MIN_NS};
use super::payload::{Payload, FLAG_MEASURED};
use super::sa::EspTx;
use super::{nanos, now_ns, unix_now_s, PktgenError, TxRoom, BURST, STOP_POLL};
use crate::crypto::QueuePair;
use crate::esp;
use crate::io::PktBuf;
use crate::wire::ethernet;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long after the end of the run frames due before it are still sent
/// or retried on a full tx ring.
const OVERRUN_NS: u64 = 1_000_000_000;

/// What to send.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Packets (addresses, flows, sizes).
    pub builder: PacketBuilder,
    /// Packets per second over all queues; 0 = as fast as possible.
    pub rate_pps: u64,
    /// Measured part of the run.
    pub duration: Duration,
    /// Warm-up before it (packets not measured).
    pub warmup: Duration,
    /// Longest wait for the last frames to leave after the run.
    pub drain: Duration,
}

impl GenConfig {
    /// Refuses a paced run (`rate_pps` > 0) with no packet due in its
    /// measured part: `rate_pps` × `duration` below 1 (from 1 up, at least
    /// one packet of the schedule falls after the warm-up, whatever its
    /// length). Errors: [`PktgenError::Invalid`] naming `--rate` and
    /// `--duration`.
    pub fn check(&self) -> Result<(), PktgenError> {
        if self.rate_pps > 0 && u128::from(self.rate_pps) * self.duration.as_nanos() < 1_000_000_000 {
            return Err(PktgenError::Invalid(format!(
                "--rate {} --duration {}: no packet is due in the measured part (rate × duration = {} packets, less than 1): give a longer --duration or a higher --rate",
                self.rate_pps,
                self.duration.as_secs_f64(),
                self.rate_pps as f64 * self.duration.as_secs_f64()
            )));
        }
        Ok(())
    }
}

/// Packets of one flow.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowTx {
    /// Flow number.
    pub flow: u32,
    /// Packets sent (warm-up included).
    pub tx_packets: u64,
    /// Packets sent after the warm-up.
    pub measured_tx_packets: u64,
}

/// What the generator did (`--json`). Bytes are Ethernet frame bytes
/// without FCS, as handed to the port (ESP frames in ESP mode).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GenReport {
    /// Frames sent, warm-up included.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Measured frames sent (due after the warm-up: see the module docs).
    pub measured_tx_packets: u64,
    /// Their bytes.
    pub measured_tx_bytes: u64,
    /// Seconds from the end of the warm-up to the end of the run, or to
    /// the last measured frame sent if that was later (the generator fell
    /// behind), or to the last one before a stop (SIGINT/SIGTERM).
    pub duration_s: f64,
    /// Achieved rate over `duration_s`, packets per second.
    pub rate_pps: f64,
    /// `--rate` (0 = as fast as possible).
    pub target_rate_pps: u64,
    /// Warm-up seconds.
    pub warmup_s: f64,
    /// Times a burst was cut or refused for want of tx ring room (retried, not dropped).
    pub tx_ring_full: u64,
    /// Frames built but never taken by the port before the run ended.
    pub tx_failed: u64,
    /// Packets the ESP seal refused (sequence numbers exhausted, ...; not sent).
    pub esp_errors: u64,
    /// The SA's sequence numbers ran out (RFC 4303 §3.3.3: a sender never
    /// cycles them): the run stopped at the first packet refused for it.
    #[serde(default)]
    pub esp_seq_exhausted: bool,
    /// True in ESP mode.
    pub esp: bool,
    /// Tx queues used.
    pub queues: usize,
    /// Wall clock (Unix seconds) when sending began (the warm-up's start);
    /// 0 in reports of older versions.
    #[serde(default)]
    pub started_unix_s: f64,
    /// Wall clock (Unix seconds) when sending ended (before the drain).
    #[serde(default)]
    pub ended_unix_s: f64,
    /// Per flow.
    pub flows: Vec<FlowTx>,
}

/// Per-packet bookkeeping of one burst (which flow, measured or not).
#[derive(Clone, Copy, Default)]
struct Meta {
    flow: u32,
    measured: bool,
}

/// Runs the generator on `ports` (port *q* = tx queue *q*) until the
/// warm-up and duration are over or `stop` is set (seen within
/// [`super::STOP_POLL`], however slow the rate); `esp` seals each packet
/// with that SA. Nothing in the loop allocates. Returns the counts.
pub fn run<P: TxRoom>(ports: &mut [P], cfg: &GenConfig, mut esp: Option<&mut EspTx>, stop: &AtomicBool) -> GenReport {
    let flows = cfg.builder.spec().flows;
    let nq = ports.len().min(flows as usize).max(1);
    let spec = *cfg.builder.spec();
    // Flows of queue q: q, q + nq, q + 2nq, ...
    let per_queue: Vec<u32> = (0..nq as u32).map(|q| (flows - q).div_ceil(nq as u32)).collect();
    let mut cursor = vec![0u32; nq];
    // Packets built per queue, for the choice of the next queue.
    let mut built = vec![0u64; nq];
    let mut report = GenReport {
        target_rate_pps: cfg.rate_pps,
        warmup_s: cfg.warmup.as_secs_f64(),
        esp: esp.is_some(),
        queues: nq,
        flows: (0..flows).map(|f| FlowTx { flow: f, ..Default::default() }).collect(),
        ..Default::default()
    };
    let mut next_seq = vec![0u64; flows as usize];
    let mut pool: Vec<PktBuf> = (0..BURST).map(|_| PktBuf::new()).collect();
    let mut out: Vec<PktBuf> = Vec::with_capacity(BURST);
    let mut ops = Vec::with_capacity(BURST);
    let mut done = Vec::with_capacity(BURST);
    let mut meta = [Meta::default(); BURST];
    let mut out_meta = [Meta::default(); BURST];
    let room0: Vec<usize> = ports.iter_mut().map(|p| {
        p.poll();
        p.tx_room()
    }).collect();

    let t0 = now_ns();
    report.started_unix_s = unix_now_s();
    let m0 = t0.saturating_add(nanos(cfg.warmup));
    let end = m0.saturating_add(nanos(cfg.duration));
    let overrun_end = end.saturating_add(OVERRUN_NS);
    let mut bucket = TokenBucket::new(cfg.rate_pps, t0, end);
    // Paced: packets are measured by their slot in the schedule, so a run
    // that keeps up sends exactly rate × duration measured packets.
    let first_measured = bucket.due_before(m0);
    let mut k = 0u64;
    let mut q = 0usize;
    let mut last_tx = m0;
    let mut stopped = false;
    loop {
        let now = now_ns();
        if stop.load(Ordering::Relaxed) {
            stopped = true;
            break;
        }
        // Past the end: what the bucket still holds (due before the end)
        // is sent, for up to OVERRUN_NS of retries on a full ring.
        if bucket.done(now) || now >= overrun_end {
            break;
        }
        let want = bucket.take(now, BURST);
        if want == 0 {
            if now >= end {
                break;
            }
            for p in ports.iter_mut() {
                p.poll();
            }
            // At most STOP_POLL at a time (a slow --rate waits up to a
            // second between batches): the stop flag is read at the top.
            let wait = bucket.wait_ns(now).min(end - now);
            if wait > SLEEP_MIN_NS {
                std::thread::sleep(Duration::from_nanos(wait - SLEEP_MIN_NS / 2).min(STOP_POLL));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let port = &mut ports[q];
        port.poll();
        let n = want.min(port.tx_room()).min(pool.len());
        if n < want {
            bucket.refund(want - n);
            report.tx_ring_full += 1;
        }
        if n == 0 {
            q = (q + 1) % nq;
            continue;
        }
        built[q] += n as u64;

        // Build (and seal).
        for _ in 0..n {
            let Some(mut b) = pool.pop() else { break };
            let c = &mut cursor[q];
            let flow = q as u32 + nq as u32 * *c;
            *c = (*c + 1) % per_queue[q];
            let tx_ns = now_ns();
            let measured = first_measured.map_or(tx_ns >= m0, |f| k >= f);
            let p = Payload { flow, seq: next_seq[flow as usize], tx_ns, flags: if measured { FLAG_MEASURED } else { 0 } };
            next_seq[flow as usize] += 1;
            cfg.builder.build(&mut b, k, &p);
            k += 1;
            let m = Meta { flow, measured };
            match esp.as_deref_mut() {
                None => {
                    out_meta[out.len()] = m;
                    out.push(b);
                }
                Some(e) => match esp::outbound::prepare(&e.sa, &mut e.state, b) {
                    Ok(op) => {
                        meta[ops.len()] = m;
                        ops.push(op);
                    }
                    Err((e, b)) => {
                        report.esp_errors += 1;
                        report.esp_seq_exhausted |= e == esp::EspError::SeqExhausted;
                        pool.push(b);
                    }
                },
            }
        }
        if let Some(e) = esp.as_deref_mut() {
            // The software queue pair completes at enqueue, in order.
            e.qp.enqueue_burst(&mut ops);
            // Not accepted (cannot happen: the queue pair holds two bursts
            // and is emptied every time): dropped as ESP errors.
            for op in ops.drain(..) {
                report.esp_errors += 1;
                pool.push(op.buf);
            }
            e.qp.dequeue_burst(&mut done, BURST);
            for (i, op) in done.drain(..).enumerate() {
                match esp::outbound::finish(op) {
                    Ok(mut b) => {
                        let f = b.frame_mut();
                        let ethertype = if f.get(ethernet::HEADER_LEN).is_some_and(|v| v >> 4 == 6) { ethernet::ETHERTYPE_IPV6 } else { ethernet::ETHERTYPE_IPV4 };
                        ethernet::write_header(f, &spec.dst_mac, &spec.src_mac, ethertype);
                        out_meta[out.len()] = meta[i];
                        out.push(b);
                    }
                    Err((_, b)) => {
                        report.esp_errors += 1;
                        pool.push(b);
                    }
                }
            }
        }

        // Send, retrying what the port refuses.
        let mut sent = port.tx_burst(&out);
        while sent < out.len() {
            report.tx_ring_full += 1;
            if stop.load(Ordering::Relaxed) || now_ns() >= overrun_end {
                break;
            }
            port.poll();
            sent += port.tx_burst(&out[sent..]);
        }
        let t = now_ns();
        for (b, m) in out[..sent].iter().zip(&out_meta[..sent]) {
            let len = b.len() as u64;
            report.tx_packets += 1;
            report.tx_bytes += len;
            let ft = &mut report.flows[m.flow as usize];
            ft.tx_packets += 1;
            if m.measured {
                report.measured_tx_packets += 1;
                report.measured_tx_bytes += len;
                ft.measured_tx_packets += 1;
                last_tx = t;
            }
        }
        report.tx_failed += (out.len() - sent) as u64;
        pool.append(&mut out);
        q = furthest_behind(&built, &per_queue);
        if report.esp_seq_exhausted {
            // Every later packet would be refused too: what was sealed is out.
            stopped = true;
            break;
        }
    }

    report.ended_unix_s = unix_now_s();
    // Let the last frames leave (copy mode sends only when kicked).
    let deadline = now_ns().saturating_add(nanos(cfg.drain));
    while now_ns() < deadline {
        let mut pending = false;
        for (p, r0) in ports.iter_mut().zip(&room0) {
            p.poll();
            pending |= p.tx_room() < *r0;
        }
        if !pending {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    // The measured part lasted until its end, or its last frame if later
    // (behind the schedule), or the stop.
    let measured_end = if stopped { last_tx } else { last_tx.max(end) };
    report.duration_s = measured_end.saturating_sub(m0) as f64 / 1e9;
    if report.duration_s > 0.0 {
        report.rate_pps = report.measured_tx_packets as f64 / report.duration_s;
    }
    report
}

/// The queue whose flows have each been sent the fewest packets:
/// `built[q] / flows[q]` smallest (compared crossways, in integers); the
/// lowest such queue on a tie. `built` and `flows` have the same length,
/// at least 1, and no `flows[q]` is 0.
fn furthest_behind(built: &[u64], flows: &[u32]) -> usize {
    let mut best = 0;
    for q in 1..built.len() {
        if (built[q] as u128) * (flows[best] as u128) < (built[best] as u128) * (flows[q] as u128) {
            best = q;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::mem;
    use crate::pktgen::build::{FlowSpec, Size};

    fn config(rate_pps: u64, duration: Duration, warmup: Duration) -> GenConfig {
        let spec = FlowSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "192.0.2.1".parse().unwrap(),
            dst: "198.51.100.1".parse().unwrap(),
            sport: 40000,
            dport: 5001,
            flows: 1,
        };
        GenConfig { builder: PacketBuilder::new(spec, Size::Fixed(64)).unwrap(), rate_pps, duration, warmup, drain: Duration::ZERO }
    }

    #[test]
    fn a_paced_run_with_no_measured_packet_due_is_refused() {
        // 1 pps for 0.5 s: no packet need fall in the measured half second.
        let e = config(1, Duration::from_millis(500), Duration::ZERO).check().unwrap_err().to_string();
        assert!(e.contains("--rate 1 --duration 0.5: no packet is due in the measured part"), "{e}");
        let e = config(999, Duration::from_millis(1), Duration::ZERO).check().unwrap_err().to_string();
        assert!(e.contains("rate × duration = 0.999 packets"), "{e}");
        // One packet's worth, and full speed, are runs.
        assert!(config(1, Duration::from_secs(1), Duration::ZERO).check().is_ok());
        assert!(config(1000, Duration::from_millis(1), Duration::ZERO).check().is_ok());
        assert!(config(0, Duration::from_millis(1), Duration::ZERO).check().is_ok());
        // rate × duration = 1 after a warm-up of 0.9 packets: one measured packet.
        let (port, wire) = mem::pair(0);
        let r = run(&mut [port], &config(10, Duration::from_millis(100), Duration::from_millis(90)), None, &AtomicBool::new(false));
        assert_eq!((r.tx_packets, r.measured_tx_packets), (2, 1), "{r:?}");
        assert_eq!(wire.take_sent().len(), 2);
    }

    #[test]
    fn a_run_whose_sa_runs_out_of_sequence_numbers_stops_there() {
        // SA 1001 (no ESN) starting 5 below the end of its sequence space,
        // at full speed for a minute: the last 5 numbers go out in order,
        // the next packet is refused and the run ends at once.
        let mut e = EspTx::from_config(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/configs/ep0.toml")), 1001, u32::MAX as u64 - 4).unwrap();
        let (port, wire) = mem::pair(0);
        let t = std::time::Instant::now();
        let r = run(&mut [port], &config(0, Duration::from_secs(60), Duration::ZERO), Some(&mut e), &AtomicBool::new(false));
        assert!(t.elapsed() < Duration::from_secs(30), "the run went on after the sequence space ended");
        assert!(r.esp_seq_exhausted && r.esp_errors >= 1 && r.esp_errors as usize <= BURST, "{r:?}");
        let seqs: Vec<u32> = wire.take_sent().iter().map(|f| u32::from_be_bytes([f[38], f[39], f[40], f[41]])).collect();
        assert_eq!(seqs, (u32::MAX - 4..=u32::MAX).collect::<Vec<_>>());
        assert_eq!(r.tx_packets, 5);
    }

    #[test]
    fn flows_get_even_shares_however_they_divide_among_the_queues() {
        // 3 flows on 2 queues: queue 0 carries flows 0 and 2, queue 1 flow 1.
        // Taking turns by burst would give flow 1 half the packets; each
        // flow gets a third, within a burst, and each frame leaves on its
        // flow's queue.
        let mut cfg = config(20_000, Duration::from_millis(150), Duration::ZERO);
        let mut spec = *cfg.builder.spec();
        spec.flows = 3;
        cfg.builder = PacketBuilder::new(spec, Size::Fixed(64)).unwrap();
        let (p0, w0) = mem::pair(0);
        let (p1, w1) = mem::pair(1);
        let r = run(&mut [p0, p1], &cfg, None, &AtomicBool::new(false));
        let per_flow: Vec<u64> = r.flows.iter().map(|f| f.tx_packets).collect();
        let (lo, hi) = (*per_flow.iter().min().unwrap(), *per_flow.iter().max().unwrap());
        assert!(r.tx_packets >= 2000 && hi - lo <= BURST as u64, "{per_flow:?}");
        // UDP source port 40000 + flow.
        let sport = |f: &Vec<u8>| u16::from_be_bytes([f[34], f[35]]);
        let q0 = w0.take_sent();
        let q1 = w1.take_sent();
        assert!(q0.iter().all(|f| [40000, 40002].contains(&sport(f))) && q1.iter().all(|f| sport(f) == 40001));
        assert_eq!((q0.len() as u64, q1.len() as u64), (per_flow[0] + per_flow[2], per_flow[1]));
        // The choice itself: fewest packets per flow, lowest queue on a tie.
        assert_eq!(furthest_behind(&[64, 32], &[2, 1]), 0);
        assert_eq!(furthest_behind(&[64, 33], &[2, 1]), 0);
        assert_eq!(furthest_behind(&[65, 32], &[2, 1]), 1);
        assert_eq!(furthest_behind(&[0], &[1]), 0);
    }

    #[test]
    fn a_slow_rate_or_a_long_run_does_not_outlast_the_stop() {
        // 1 pps (a second between packets) for an hour after an hour of
        // warm-up, stopped 30 ms in: over within a few STOP_POLLs.
        let (port, _wire) = mem::pair(0);
        let cfg = config(1, Duration::from_secs(3600), Duration::from_secs(3600));
        let (r, took) = crate::pktgen::stopped_after(Duration::from_millis(30), |stop| run(&mut [port], &cfg, None, stop));
        assert!(took < Duration::from_millis(500), "{took:?}");
        assert_eq!((r.tx_packets, r.measured_tx_packets), (1, 0), "the first packet, then the stop");
        // Durations past what u64 nanoseconds hold end at once when
        // stopped too (no overflow of the schedule).
        let (port, _wire) = mem::pair(0);
        let stop = AtomicBool::new(true);
        let r = run(&mut [port], &config(1, Duration::MAX, Duration::MAX), None, &stop);
        assert_eq!(r.tx_packets, 0);
    }
}
