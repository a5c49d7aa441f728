//! A worker's share of neighbour resolution: learning (ARP, RFC 826;
//! Neighbor Discovery, RFC 4861) reported to the control thread, the
//! bounded queue of packets waiting for a next hop's MAC, resolution
//! requests (broadcast ARP requests, Neighbor Solicitations to the
//! solicited-node group) and unicast probes of STALE entries.
//!
//! Every structure here is allocated when the worker starts (capacity
//! `pending_packets`); nothing allocates, locks or blocks per packet.

use super::Worker;
use crate::crypto::QueuePair;
use crate::dataplane::counters::DropReason;
use crate::io::{PktBuf, Port};
use crate::policy::neighbour::{Learned, MAX_PROBES};
use crate::policy::Tables;
use crate::wire::{arp, ethernet, icmpv6, ipv6};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// Sizes of a worker's pending queue (config `[neighbour_table]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingConf {
    /// Packets held at most while their next hops are resolved (0 = none:
    /// such packets are dropped as `neigh_queue_full`).
    pub packets: usize,
    /// Packets held at most per next hop.
    pub per_hop: usize,
}

impl PendingConf {
    /// The config defaults (256, 16).
    pub const DEFAULT: PendingConf = PendingConf { packets: 256, per_hop: 16 };
}

/// Slots of the STALE-probe rate limiter (addresses hash into them; a
/// collision costs at most an extra probe).
const PROBE_SLOTS: usize = 64;

/// A packet waiting for the MAC of `hop` on port `out`.
pub(super) struct Waiting {
    hop: IpAddr,
    out: usize,
    rx_port: usize,
    buf: PktBuf,
}

/// A next hop being resolved.
#[derive(Clone, Copy)]
pub(super) struct Hop {
    ip: IpAddr,
    out: usize,
    /// Requests sent.
    tries: u32,
    /// When the last request went out (or was due and no buffer was free).
    last: Instant,
    /// Packets of this hop in the queue.
    queued: usize,
    /// Set when resolved (the MAC) or given up (`None` inside `Some`).
    outcome: Option<Option<[u8; 6]>>,
}

/// Next hops a worker tracks at once at least (`pending_packets` if more).
const HOPS_MIN: usize = 16;

/// The worker's resolution state.
pub(super) struct Resolver {
    conf: PendingConf,
    waiting: Vec<Waiting>,
    scratch: Vec<Waiting>,
    hops: Vec<Hop>,
    probes: [(Option<IpAddr>, Option<Instant>); PROBE_SLOTS],
}

impl Resolver {
    /// Allocates every slot it will use.
    pub(super) fn new(conf: PendingConf) -> Resolver {
        let cap = conf.packets.max(1);
        Resolver {
            conf,
            waiting: Vec::with_capacity(cap),
            scratch: Vec::with_capacity(cap),
            // Hops are tracked even when no packet may wait for them.
            hops: Vec::with_capacity(cap.max(HOPS_MIN)),
            probes: [(None, None); PROBE_SLOTS],
        }
    }

    /// True when next hops are being resolved.
    #[inline]
    pub(super) fn busy(&self) -> bool {
        !self.hops.is_empty()
    }
}

/// The probe slot of `ip`.
fn probe_slot(ip: IpAddr) -> usize {
    let k = match ip {
        IpAddr::V4(a) => u32::from(a),
        IpAddr::V6(a) => a.segments().chunks(2).fold(0u32, |h, c| h ^ ((c[0] as u32) << 16 | c[1] as u32)),
    };
    (k.wrapping_mul(0x9e37_79b1) >> 26) as usize % PROBE_SLOTS
}

/// Leading bits `a` and `b` have in common.
fn common_bits(a: &[u8], b: &[u8]) -> u32 {
    let mut n = 0;
    for (x, y) in a.iter().zip(b) {
        let d = (x ^ y).leading_zeros();
        n += d;
        if d < 8 {
            break;
        }
    }
    n
}

/// Our IPv4 address on a port to ask from: the one sharing the longest
/// prefix with `target` (the one in its subnet, if any), else 0.0.0.0
/// (an RFC 5227 probe-style request; the neighbour answers but cannot learn
/// us).
fn v4_source(addrs: &[Ipv4Addr], target: Ipv4Addr) -> Ipv4Addr {
    addrs.iter().max_by_key(|a| common_bits(&a.octets(), &target.octets())).copied().unwrap_or(Ipv4Addr::UNSPECIFIED)
}

/// Our IPv6 address on a port to solicit from: the one sharing the longest
/// prefix with `target` (a link-local target picks a link-local address).
fn v6_source(addrs: &[Ipv6Addr], target: Ipv6Addr) -> Option<Ipv6Addr> {
    addrs.iter().max_by_key(|a| common_bits(&a.octets(), &target.octets())).copied()
}

/// The learning rules (README, Neighbours): `ip` is a unicast address that
/// is not ours, and routes out of `port` (strict reverse-path check; an
/// IPv6 link-local address is on every link) or is a next hop this worker
/// is resolving out of `port` (`resolving`: the answer to our own request,
/// e.g. a route's `via` outside the port's prefixes); `mac` is unicast,
/// not zero and not one of the gateway's own.
pub(super) fn learnable(t: &Tables, port: usize, ip: IpAddr, mac: [u8; 6], resolving: bool) -> bool {
    if !ethernet::is_station(&mac) || t.is_ours(ip) || t.ports.iter().any(|p| p.mac == mac) {
        return false;
    }
    let on_link = match ip {
        IpAddr::V4(a) => {
            if a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback() || t.is_our_broadcast(ip) {
                return false;
            }
            false
        }
        IpAddr::V6(a) => {
            if a.is_unspecified() || ipv6::is_multicast(&a) || a.is_loopback() {
                return false;
            }
            ipv6::is_link_local(&a)
        }
    };
    on_link || resolving || t.routes_back(port, ip)
}

impl<P: Port, Q: QueuePair<PktBuf>> Worker<P, Q> {
    /// Reports that `ip` is at `mac` on `port` to the control thread
    /// (counted under `neigh_learned`; a full queue under
    /// `neigh_reports_lost`). The caller checked [`learnable`].
    pub(super) fn report_neighbour(&mut self, t: &Tables, ip: IpAddr, mac: [u8; 6], port: usize) {
        let at = self.now();
        if t.neighbours.report(Learned { ip, mac, port, at }) {
            self.counters.neigh_learned.add(1);
        } else {
            self.counters.neigh_reports_lost.add(1);
        }
    }

    /// Whether `ip` is a next hop this worker is resolving out of `port`
    /// (an answer to our own request).
    pub(super) fn resolving(&self, ip: IpAddr, port: usize) -> bool {
        self.resolver.hops.iter().any(|h| h.ip == ip && h.out == port && h.outcome.is_none())
    }

    /// The MAC for next hop `nh` out of port `out`: a static or learned
    /// entry (a STALE one is probed, rate limited), else the port's
    /// `peer_mac`.
    #[inline]
    pub(super) fn next_hop_mac(&mut self, t: &Tables, out: usize, nh: IpAddr) -> Option<[u8; 6]> {
        let now = self.now();
        match self.neigh.lookup(nh, out, now) {
            Some(hit) => {
                if hit.stale {
                    self.probe(t, out, nh, hit.mac, now);
                }
                Some(hit.mac)
            }
            None => t.ports.get(out).and_then(|p| p.peer_mac),
        }
    }

    /// A unicast probe of a STALE entry (RFC 4861 §7.3.3; RFC 1122
    /// §2.3.2.1 for ARP), at most one per address per `retrans_ms`.
    fn probe(&mut self, t: &Tables, out: usize, nh: IpAddr, mac: [u8; 6], now: Instant) {
        let slot = probe_slot(nh);
        let retrans = self.neigh.conf().retrans;
        if let (Some(ip), Some(last)) = self.resolver.probes[slot] {
            if ip == nh && now.saturating_duration_since(last) < retrans {
                return;
            }
        }
        self.resolver.probes[slot] = (Some(nh), Some(now));
        if self.solicit(t, out, nh, Some(mac)) {
            self.counters.neigh_probes.add(1);
        }
    }

    /// Sends a resolution request for `target` out of `out`: to `unicast`
    /// (a probe) or broadcast / the solicited-node group. Takes a buffer of
    /// the pool; false (nothing sent) when there is none, or for IPv6 when
    /// the port has no IPv6 address to send from.
    fn solicit(&mut self, t: &Tables, out: usize, target: IpAddr, unicast: Option<[u8; 6]>) -> bool {
        let Some(port) = t.ports.get(out) else { return false };
        let mac = port.mac;
        let Some(mut b) = self.pool.pop() else { return false };
        let area = b.reset();
        const E: usize = ethernet::HEADER_LEN;
        let len = match target {
            IpAddr::V4(ip) => {
                let src = v4_source(&port.addresses, ip);
                let dst = unicast.unwrap_or([0xff; 6]);
                ethernet::write_header(area, &dst, &mac, ethernet::ETHERTYPE_ARP);
                arp::write_request(&mut area[E..], &mac, src, &unicast.unwrap_or([0; 6]), ip).map(|n| E + n)
            }
            IpAddr::V6(ip) => v6_source(&port.addresses6, ip).and_then(|src| {
                // RFC 4861 §7.2.2: to the solicited-node address when
                // resolving, to the address itself when probing.
                let (dst, dst_mac) = match unicast {
                    Some(m) => (ip, m),
                    None => {
                        let sn = icmpv6::solicited_node(&ip);
                        (sn, icmpv6::multicast_mac(&sn))
                    }
                };
                const M: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
                let n = icmpv6::write_neighbor_solicitation(&mut area[M..], &src, &dst, &ip, &mac)?;
                ipv6::write_header(&mut area[E..M], 0, 0, n as u16, ipv6::NH_ICMPV6, icmpv6::ND_HOP_LIMIT, &src, &dst);
                ethernet::write_header(area, &dst_mac, &mac, ethernet::ETHERTYPE_IPV6);
                Some(M + n)
            }),
        };
        match len {
            Some(n) if b.set_len(n) => {
                b.port = out as u16;
                if target.is_ipv6() {
                    self.counters.ns_sent.add(1);
                } else {
                    self.counters.arp_requests.add(1);
                }
                self.tx[out].push(b);
                true
            }
            _ => {
                self.pool.push(b);
                false
            }
        }
    }

    /// `buf` (received on `rx_port`) is routed out of `out` to next hop
    /// `nh`, whose MAC is not known: it waits in the pending queue, and the
    /// first packet for a hop sends a request at once. Full queue, or
    /// `pending_per_hop` packets already waiting for `nh`:
    /// `neigh_queue_full`. An IPv6 next hop out of a port without an IPv6
    /// address cannot be solicited: `no_neighbour`.
    pub(super) fn hold(&mut self, t: &Tables, rx_port: usize, out: usize, nh: IpAddr, buf: PktBuf) {
        if nh.is_ipv6() && t.ports.get(out).is_none_or(|p| p.addresses6.is_empty()) {
            return self.drop_buf(rx_port, DropReason::NoNeighbour, buf);
        }
        let r = &mut self.resolver;
        let k = match r.hops.iter().position(|h| h.ip == nh && h.out == out && h.outcome.is_none()) {
            Some(k) => k,
            // No room to track another hop (no allocation here): as a full queue.
            None if r.hops.len() == r.hops.capacity() => return self.drop_buf(rx_port, DropReason::NeighQueueFull, buf),
            None => {
                let now = self.now();
                let sent = self.solicit(t, out, nh, None);
                let r = &mut self.resolver;
                r.hops.push(Hop { ip: nh, out, tries: u32::from(sent), last: now, queued: 0, outcome: None });
                r.hops.len() - 1
            }
        };
        // The request went out above even when the packet cannot wait
        // (`pending_packets = 0`, or the queue full): the next packet
        // finds the MAC.
        let r = &mut self.resolver;
        if r.waiting.len() >= r.conf.packets || r.hops[k].queued >= r.conf.per_hop {
            return self.drop_buf(rx_port, DropReason::NeighQueueFull, buf);
        }
        r.hops[k].queued += 1;
        r.waiting.push(Waiting { hop: nh, out, rx_port, buf });
        self.counters.neigh_pending.set(r.waiting.len() as u64);
    }

    /// Runs once per poll while next hops are being resolved, before the
    /// poll's rx (so held packets leave before newer ones for the same
    /// hop): a hop whose MAC is in the snapshot now releases its packets in
    /// order; a hop without an answer gets another request every
    /// `retrans_ms`, and after [`MAX_PROBES`] requests its packets are
    /// dropped as `neigh_unresolved`.
    pub(super) fn service_pending(&mut self, t: &Tables) {
        let now = self.now();
        let retrans = self.neigh.conf().retrans;
        let mut settled = false;
        for k in 0..self.resolver.hops.len() {
            let h = self.resolver.hops[k];
            if let Some(hit) = self.neigh.lookup(h.ip, h.out, now) {
                self.resolver.hops[k].outcome = Some(Some(hit.mac));
                settled = true;
            } else if now.saturating_duration_since(h.last) >= retrans {
                if h.tries >= MAX_PROBES {
                    self.resolver.hops[k].outcome = Some(None);
                    settled = true;
                } else {
                    let sent = self.solicit(t, h.out, h.ip, None);
                    let hk = &mut self.resolver.hops[k];
                    hk.last = now;
                    hk.tries += u32::from(sent);
                }
            }
        }
        if !settled {
            return;
        }
        let mut waiting = std::mem::take(&mut self.resolver.waiting);
        let mut keep = std::mem::take(&mut self.resolver.scratch);
        for w in waiting.drain(..) {
            let outcome = self.resolver.hops.iter().find(|h| h.ip == w.hop && h.out == w.out).and_then(|h| h.outcome);
            match outcome {
                None => keep.push(w),
                Some(Some(mac)) => self.transmit(t, w.rx_port, w.buf, w.out, mac),
                Some(None) => self.drop_buf(w.rx_port, DropReason::NeighUnresolved, w.buf),
            }
        }
        self.resolver.waiting = keep;
        self.resolver.scratch = waiting;
        self.resolver.hops.retain(|h| h.outcome.is_none());
        self.counters.neigh_pending.set(self.resolver.waiting.len() as u64);
    }

    /// Drops every held packet (shutdown), counted as `neigh_unresolved`.
    pub(super) fn drop_pending(&mut self) {
        let mut waiting = std::mem::take(&mut self.resolver.waiting);
        for w in waiting.drain(..) {
            self.drop_buf(w.rx_port, DropReason::NeighUnresolved, w.buf);
        }
        self.resolver.waiting = waiting;
        self.resolver.hops.clear();
        self.counters.neigh_pending.set(0);
    }

    /// Packets held now (tests).
    pub fn pending_packets(&self) -> usize {
        self.resolver.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_address_shares_the_longest_prefix() {
        let a: Vec<Ipv4Addr> = vec!["192.0.2.1".parse().unwrap(), "198.51.100.1".parse().unwrap()];
        assert_eq!(v4_source(&a, "198.51.100.77".parse().unwrap()), a[1]);
        assert_eq!(v4_source(&a, "192.0.2.200".parse().unwrap()), a[0]);
        assert_eq!(v4_source(&[], "192.0.2.200".parse().unwrap()), Ipv4Addr::UNSPECIFIED);
        let b: Vec<Ipv6Addr> = vec!["2001:db8:a::1".parse().unwrap(), "fe80::1".parse().unwrap()];
        assert_eq!(v6_source(&b, "fe80::99".parse().unwrap()), Some(b[1]));
        assert_eq!(v6_source(&b, "2001:db8:a::2".parse().unwrap()), Some(b[0]));
        assert_eq!(v6_source(&[], "2001:db8:a::2".parse().unwrap()), None);
    }

    #[test]
    fn probe_slots_stay_in_range() {
        for i in 0..1000u32 {
            assert!(probe_slot(IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(7919)))) < PROBE_SLOTS);
        }
        assert!(probe_slot("2001:db8::1".parse().unwrap()) < PROBE_SLOTS);
    }
}
