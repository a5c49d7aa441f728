//! A minimal L2 forwarder: frames received on the in ports leave by the
//! out ports of the same queue with their Ethernet addresses rewritten.
//! No parsing beyond the MACs, no crypto, no tables: the I/O ceiling a
//! gateway on the same ports is compared with (the same `Port` copy path
//! the gateway uses). A frame the out port does not take after one poll
//! and retry is dropped and counted (`tx_dropped`), as a gateway would.

use super::{nanos, now_ns, sleep_unless_stopped, BURST};
use crate::io::{PktBuf, Port};
use crate::wire::ethernet;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Counts of a forwarder run (`--json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ForwardReport {
    /// Frames received on the in ports.
    pub rx_packets: u64,
    /// Frames handed to the out ports.
    pub tx_packets: u64,
    /// Bytes of `tx_packets`.
    pub tx_bytes: u64,
    /// Frames the out ports did not take (ring full after a retry).
    pub tx_dropped: u64,
    /// Frames the kernel dropped before the forwarder saw them (rx ring
    /// full, no fill-ring frame), as the in ports' sockets count them;
    /// filled in by the caller from [`Port::stats`].
    pub rx_dropped: u64,
    /// Frames shorter than an Ethernet header (dropped).
    pub runts: u64,
    /// Seconds run.
    pub duration_s: f64,
}

/// Forwards from `ins[q]` to `outs[q]` (same queue) with destination
/// `dst_mac` and source `src_mac`, until `duration` passes (`None`: until
/// `stop`) or `stop` is set (seen within [`super::STOP_POLL`] whatever
/// `idle_sleep`); busy-polls, or sleeps `idle_sleep` after an empty round
/// when it is not zero (the command line allows up to
/// [`super::IDLE_SLEEP_US_MAX`] µs).
pub fn run<P: Port>(ins: &mut [P], outs: &mut [P], dst_mac: [u8; 6], src_mac: [u8; 6], duration: Option<Duration>, idle_sleep: Duration, stop: &AtomicBool) -> ForwardReport {
    let mut r = ForwardReport::default();
    let mut bufs: Vec<PktBuf> = (0..BURST).map(|_| PktBuf::new()).collect();
    let t0 = now_ns();
    let end = duration.map(|d| t0.saturating_add(nanos(d)));
    let mut iter = 0u32;
    loop {
        let mut got = 0;
        for (inp, out) in ins.iter_mut().zip(outs.iter_mut()) {
            let n = inp.rx_burst(&mut bufs);
            inp.poll();
            if n == 0 {
                out.poll();
                continue;
            }
            got += n;
            r.rx_packets += n as u64;
            let mut keep = 0;
            for i in 0..n {
                if bufs[i].len() < ethernet::HEADER_LEN {
                    r.runts += 1;
                    continue;
                }
                let f = bufs[i].frame_mut();
                f[ethernet::DST..ethernet::DST + 6].copy_from_slice(&dst_mac);
                f[ethernet::SRC..ethernet::SRC + 6].copy_from_slice(&src_mac);
                bufs.swap(i, keep);
                keep += 1;
            }
            let mut sent = out.tx_burst(&bufs[..keep]);
            if sent < keep {
                out.poll();
                sent += out.tx_burst(&bufs[sent..keep]);
            }
            r.tx_packets += sent as u64;
            r.tx_bytes += bufs[..sent].iter().map(|b| b.len() as u64).sum::<u64>();
            r.tx_dropped += (keep - sent) as u64;
            out.poll();
        }
        iter = iter.wrapping_add(1);
        if got == 0 || iter.is_multiple_of(64) {
            if stop.load(Ordering::Relaxed) || end.is_some_and(|e| now_ns() >= e) {
                break;
            }
            if got == 0 && !idle_sleep.is_zero() {
                sleep_unless_stopped(idle_sleep, stop);
            }
        }
    }
    r.duration_s = now_ns().saturating_sub(t0) as f64 / 1e9;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::mem;

    #[test]
    fn rewrites_macs_and_forwards_in_order() {
        let (pin, win) = mem::pair(0);
        let (pout, wout) = mem::pair(1);
        let mut frames = Vec::new();
        for i in 0..100u8 {
            let mut f = vec![0xffu8; 60 + i as usize];
            f[14] = i;
            win.inject(&f);
            frames.push(f);
        }
        win.inject(&[1, 2, 3]); // a runt
        let stop = AtomicBool::new(false);
        let r = run(&mut [pin], &mut [pout], [2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 8], Some(Duration::from_millis(20)), Duration::ZERO, &stop);
        let sent = wout.take_sent();
        assert_eq!((r.rx_packets, r.tx_packets, r.runts, r.tx_dropped), (101, 100, 1, 0));
        assert_eq!(sent.len(), 100);
        for (i, (s, f)) in sent.iter().zip(&frames).enumerate() {
            assert_eq!(&s[..12], &[2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 8], "frame {i}");
            assert_eq!(&s[12..], &f[12..], "frame {i} unchanged past the MACs");
        }
    }

    #[test]
    fn a_long_idle_sleep_or_duration_does_not_outlast_the_stop() {
        // An idle sleep of an hour and no end: a stop 30 ms in ends the run
        // within a few STOP_POLLs, not an hour later.
        let (pin, _win) = mem::pair(0);
        let (pout, _wout) = mem::pair(1);
        let (r, took) = crate::pktgen::stopped_after(Duration::from_millis(30), |stop| {
            run(&mut [pin], &mut [pout], [2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 8], Some(Duration::MAX), Duration::from_secs(3600), stop)
        });
        assert!(took < Duration::from_secs(1), "{took:?}");
        assert_eq!(r.rx_packets, 0);
    }
}
