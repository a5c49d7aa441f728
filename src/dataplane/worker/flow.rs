//! The outbound flow cache: a worker's memory of the PROTECT decisions
//! its SPD lookups made, so the next packets of a flow skip the checks
//! whose answers depend only on the flow and the tables snapshot (VPP's
//! IPsec SPD flow cache does the same for its SPD lookup).
//!
//! [`Worker::outbound`] decides a packet from a protected port in this
//! order: to one of our addresses on its port (`to_us`), martian, SPD
//! lookup, TTL, the SA, the route to the tunnel end and its MTU, the SA's
//! learned path MTU, then the packet's size against that MTU. For an IPv4
//! packet every answer up to the route depends only on (receive port,
//! source, destination, protocol, ports) and the tables snapshot; what
//! follows depends on the SA and the route, also fixed for a snapshot, but
//! for the learned path MTU (which the ICMP path changes at any time) and
//! the packet's TTL and size. So:
//!
//! * a [`FlowCache`] entry holds the SPD's PROTECT answer for one flow of
//!   one port, learned by the slow path ([`Worker::outbound`]), valid for
//!   the tables version it was learned under (a new snapshot, e.g. a
//!   policy removed, misses every entry: [`FlowCache::hit`] compares the
//!   version);
//! * a [`FastSa`] per outbound SA slot, built when a snapshot is adopted,
//!   says whether packets of the SA may take the fast path (owned by this
//!   worker, tunnel mode, no TFC padding) and the largest inner packet
//!   that fits the egress MTU of the route to the tunnel end, encapsulated
//!   ([`crate::esp::outbound::max_inner_len`]: the same bound as the slow
//!   path's `encapsulated_len` check);
//! * per packet, [`Worker::fast_path`] takes a frame only when it is a
//!   plain IPv4 packet the slow path would parse the same way (no options,
//!   not a fragment, header checksum right, TTL above 1), its flow hits,
//!   its SA may take the fast path, no path MTU is known for the SA and it
//!   fits: exactly the packets the slow path would hand to
//!   `prepare_outbound` after decrementing the TTL. Everything else, and
//!   every first packet of a flow, goes the slow path, unchanged.
//!
//! Inbound, [`Worker::inbound`] decides an ESP packet from an unprotected
//! port by its destination (one of our addresses on the port, or a
//! transport SA's SPI), its fragment bits, the SAD lookup by (SPI,
//! destination), the SA's tunnel ends against the packet's addresses and
//! its encapsulation (plain ESP or ESP in UDP), then hands it to the SA's
//! owner. For plain ESP under an IPv4 header every one of those answers
//! depends only on (receive port, source, destination, SPI) and the
//! tables snapshot, so a second [`FlowCache`] holds the inbound SA of such
//! flows, learned by the slow path, and [`Worker::esp_fast_path`] takes a
//! frame only when it is plain ESP the slow path would parse the same way
//! (no IPv4 options, not a fragment, header checksum right, room for the
//! ESP header) and its flow hits: exactly the packets the slow path would
//! hand to the SA's owner, which [`Worker::esp_fast_forward`] does the
//! same way (`prepare_inbound` here, or the handoff to the owning worker,
//! where RSS put an SA's ESP on another worker's queue). The replay
//! check, the lifetime, the ICV and everything after decryption are per
//! packet, by the owner, on both paths.
//!
//! Each cache is direct-mapped ([`FLOW_SLOTS`] entries, one per hash
//! bucket: a colliding flow replaces the entry), allocated when the worker
//! starts; nothing allocates or locks per packet.

use super::{decrement_hops, in_sa, sa_ref, tag, Worker};
use crate::crypto::QueuePair;
use crate::dataplane::counters::DropReason;
use crate::esp::outbound::{self, TunnelPlan};
use crate::esp::OutboundSa;
use crate::io::{PktBuf, Port};
use crate::policy::sad::InboundEntry;
use crate::policy::spd::FlowKey;
use crate::policy::Tables;
use crate::wire::{checksum, esp as esp_hdr, ethernet, ipv4};
use std::net::{IpAddr, Ipv4Addr};

/// Entries of each of a worker's two flow caches (a power of two): 256
/// entries of 32 bytes, 8 KiB each, small enough to stay in L1 next to
/// the packet data.
pub const FLOW_SLOTS: usize = 256;

/// One learned flow: the key (IPv4 addresses, protocol, ports or SPI) and
/// the receive port it came in on, the answer (outbound: the SA slot of
/// PROTECT, or [`BYPASS`]; inbound: the SA reference), and the tables
/// version of that answer (`valid` false: empty).
#[derive(Debug, Clone, Copy, Default)]
struct FlowEntry {
    version: u64,
    src: u32,
    dst: u32,
    /// Source port << 16 | destination port (0 without ports); the SPI
    /// in the inbound cache.
    ports: u32,
    /// The answer: an outbound SA slot or [`BYPASS`]; in the inbound
    /// cache, the SA reference (slot and id bits).
    slot: u32,
    rx_port: u16,
    protocol: u8,
    /// The key has ports (TCP or UDP, not a fragment): [`FlowKey::ports`].
    has_ports: bool,
    valid: bool,
}

/// A direct-mapped cache of outbound SPD decisions, or of the inbound SAs
/// of ESP flows (module docs).
#[derive(Debug)]
pub struct FlowCache {
    entries: Box<[FlowEntry]>,
}

impl Default for FlowCache {
    fn default() -> Self {
        FlowCache { entries: vec![FlowEntry::default(); FLOW_SLOTS].into_boxed_slice() }
    }
}

/// [`FlowEntry::slot`] of a BYPASS answer.
const BYPASS: u32 = u32::MAX;

/// What the fast path does with a frame ([`Worker::fast_path`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Fast {
    /// Encapsulate with the outbound SA in `slot`; the IPv4 packet is
    /// `total` bytes.
    Protect { slot: usize, total: usize },
    /// Forward as the BYPASS policy says, to `dst`.
    Bypass { total: usize, dst: Ipv4Addr },
}

/// An ESP frame the inbound fast path takes ([`Worker::esp_fast_path`]):
/// its SA reference `r` (slot and id bits, as in tags), the SA's entry
/// `e` in the snapshot it was looked up in, and the IPv4 packet's length
/// `total`.
#[derive(Debug, Clone, Copy)]
pub(super) struct EspFast<'t> {
    r: usize,
    e: &'t InboundEntry,
    total: usize,
}

/// The bucket of a flow: a multiplicative hash of its key words.
#[inline(always)]
fn bucket(src: u32, dst: u32, ports: u32, protocol: u8) -> usize {
    let h = (src ^ dst.rotate_left(16) ^ ports ^ protocol as u32).wrapping_mul(0x9e37_79b1);
    (h >> (32 - FLOW_SLOTS.trailing_zeros())) as usize
}

impl FlowCache {
    /// Remembers the SPD's answer for IPv4 flow `key`, received on
    /// `rx_port`, under tables `version`: PROTECT with the SA in `slot`, or
    /// BYPASS (`None`). An IPv6 key is not cached.
    pub fn learn(&mut self, version: u64, rx_port: usize, key: &FlowKey, slot: Option<usize>) {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (key.src, key.dst) else { return };
        let slot = match slot {
            None => BYPASS,
            Some(s) => match u32::try_from(s) {
                Ok(s) if s != BYPASS => s,
                _ => return,
            },
        };
        let Ok(rx_port) = u16::try_from(rx_port) else { return };
        let (src, dst) = (u32::from(s), u32::from(d));
        let ports = key.ports.map_or(0, |(a, b)| (a as u32) << 16 | b as u32);
        let e = FlowEntry { version, src, dst, ports, slot, rx_port, protocol: key.protocol, has_ports: key.ports.is_some(), valid: true };
        self.entries[bucket(src, dst, ports, key.protocol)] = e;
    }

    /// Remembers that plain ESP from `src` to `dst` with SPI `spi`,
    /// received on `rx_port`, is for the inbound SA `r` (slot and id bits)
    /// under tables `version`.
    pub fn learn_esp(&mut self, version: u64, rx_port: usize, src: Ipv4Addr, dst: Ipv4Addr, spi: u32, r: usize) {
        let (Ok(rx_port), Ok(slot)) = (u16::try_from(rx_port), u32::try_from(r)) else { return };
        let (src, dst) = (u32::from(src), u32::from(dst));
        let e = FlowEntry { version, src, dst, ports: spi, slot, rx_port, protocol: ipv4::PROTO_ESP, has_ports: true, valid: true };
        self.entries[bucket(src, dst, spi, ipv4::PROTO_ESP)] = e;
    }

    /// The answer learned for this flow under tables `version`, if any:
    /// an SA slot or [`BYPASS`] (outbound), an SA reference (inbound).
    #[inline(always)]
    fn hit(&self, version: u64, rx_port: usize, src: u32, dst: u32, protocol: u8, ports: Option<u32>) -> Option<u32> {
        let p = ports.unwrap_or(0);
        let e = self.entries.get(bucket(src, dst, p, protocol))?;
        let same = e.valid
            && e.version == version
            && e.src == src
            && e.dst == dst
            && e.protocol == protocol
            && e.ports == p
            && e.has_ports == ports.is_some()
            && e.rx_port as usize == rx_port;
        same.then_some(e.slot)
    }

    /// Forgets every flow (a new tables snapshot).
    pub fn clear(&mut self) {
        self.entries.fill(FlowEntry::default());
    }
}

/// What the worker knows about one outbound SA slot under the adopted
/// tables snapshot: `ok` when the SA's packets may take the fast path
/// (module docs), `max_inner` the largest inner packet (IP header on,
/// bytes) that fits the egress MTU once encapsulated (`usize::MAX`
/// without a route: the slow path does not check the MTU then either),
/// and for a tunnel-mode SA this worker owns its [`TunnelPlan`] (used by
/// both paths, `prepare_outbound`), all for the SA whose id is `id`
/// (a packet of another SA in the slot, e.g. one prepared under a snapshot
/// the worker has not adopted yet, uses neither).
#[derive(Debug, Clone, Copy, Default)]
pub struct FastSa {
    ok: bool,
    max_inner: usize,
    id: u32,
    plan: Option<TunnelPlan>,
}

impl FastSa {
    /// The plan of `sa`, if this record is `sa`'s and it has one.
    #[inline(always)]
    pub(super) fn plan_of(&self, sa: &OutboundSa) -> Option<&TunnelPlan> {
        self.plan.as_ref().filter(|_| self.id == sa.id)
    }
}

/// The [`FastSa`]s of snapshot `t` for worker `me`, indexed by outbound
/// slot, written into `out` (allocates only when the SAD grew: control
/// path). With `keep` (the routes and ports are those `out` was made
/// under) a record of the same SA is kept, so a snapshot that adds or
/// removes one SA costs a pass over the slots, not a plan and a route
/// lookup for every SA (helper-103: at 100,000 SAs each `sa add` stalled
/// the workers for milliseconds); else all are made again. Records of
/// SAs no longer in their slot stay until it is taken: they match no
/// other SA (ids are not reused).
pub fn fast_sas(t: &Tables, me: usize, out: &mut Vec<FastSa>, keep: bool) {
    if !keep {
        out.clear();
    }
    out.resize(t.sad.outbound.len(), FastSa::default());
    for (slot, sa) in t.sad.outbound_sas() {
        if sa.owner != me {
            out[slot] = FastSa::default();
            continue;
        }
        if out[slot].id == sa.id {
            continue;
        }
        let plan = TunnelPlan::new(sa);
        let mtu = t.routes.lookup(sa.tunnel_dst).and_then(|(port, _)| t.ports.get(port)).map(|p| p.mtu as usize);
        let max_inner = mtu.map_or(usize::MAX, |m| outbound::max_inner_len(sa, 0, m));
        out[slot] = FastSa { ok: plan.is_some() && sa.tfc_pad_to == 0, max_inner, id: sa.id, plan };
    }
}

/// The IPv4 header of frame `f` and the packet's total length, when `f`
/// is addressed to `mac` from a unicast source and carries a plain IPv4
/// packet that [`Worker::classify`] would parse alike: no options, not a
/// fragment (MF clear, offset 0), its total length within the frame and
/// its header checksum right; else `None`.
#[inline(always)]
fn plain_ipv4<'a>(f: &'a [u8], mac: &[u8; 6]) -> Option<(&'a [u8], usize)> {
    const IP: usize = ethernet::HEADER_LEN;
    let h = f.get(IP..IP + ipv4::MIN_HEADER_LEN)?;
    if f[..6] != mac[..] || f[6] & 1 != 0 || f[12..14] != ethernet::ETHERTYPE_IPV4.to_be_bytes() || h[0] != 0x45 {
        return None;
    }
    let total = u16::from_be_bytes([h[ipv4::TOTAL_LEN], h[ipv4::TOTAL_LEN + 1]]) as usize;
    let flags_frag = u16::from_be_bytes([h[ipv4::FLAGS_FRAG], h[ipv4::FLAGS_FRAG + 1]]);
    if flags_frag & 0x3fff != 0 || total < ipv4::MIN_HEADER_LEN || IP + total > f.len() || checksum::sum(h) != 0xffff {
        return None;
    }
    Some((h, total))
}

impl<P: Port, Q: QueuePair<PktBuf>> Worker<P, Q> {
    /// Counts a frame a fast path took as received on its port, as
    /// [`Self::classify`] does; false for a port without counters.
    #[inline(always)]
    fn count_fast_rx(&self, buf: &PktBuf) -> bool {
        let Some(pc) = self.counters.ports.get(buf.port as usize) else {
            return false;
        };
        pc.rx_packets.add(1);
        pc.rx_bytes.add(buf.len() as u64);
        true
    }

    /// What becomes of frame `f`, received on protected port `rx_port`
    /// whose MAC is `mac`, when it may take the fast path (module docs),
    /// else `None` (the slow path, [`Self::classify`], decides it).
    #[inline(always)]
    pub(super) fn fast_path(&self, t: &Tables, rx_port: usize, mac: &[u8; 6], f: &[u8]) -> Option<Fast> {
        const IP: usize = ethernet::HEADER_LEN;
        let (h, total) = plain_ipv4(f, mac)?;
        if h[ipv4::TTL] <= 1 {
            return None;
        }
        let protocol = h[ipv4::PROTOCOL];
        let src = u32::from_be_bytes([h[ipv4::SRC], h[ipv4::SRC + 1], h[ipv4::SRC + 2], h[ipv4::SRC + 3]]);
        let dst = u32::from_be_bytes([h[ipv4::DST], h[ipv4::DST + 1], h[ipv4::DST + 2], h[ipv4::DST + 3]]);
        // FlowKey::ports as `Ipv4Packet::ports` gives them: TCP or UDP
        // with 4 bytes of upper-layer header.
        let ports = ((protocol == ipv4::PROTO_TCP || protocol == ipv4::PROTO_UDP) && total >= ipv4::MIN_HEADER_LEN + 4)
            .then(|| u32::from_be_bytes([f[IP + 20], f[IP + 21], f[IP + 22], f[IP + 23]]));
        let slot = self.flows.hit(t.version, rx_port, src, dst, protocol, ports)?;
        if slot == BYPASS {
            return Some(Fast::Bypass { total, dst: dst.into() });
        }
        let slot = slot as usize;
        let fast = self.fast_sa.get(slot)?;
        let sa = t.sad.outbound_at(slot)?;
        (fast.ok && fast.id == sa.id && total <= fast.max_inner && sa.path_mtu.peek().is_none()).then_some(Fast::Protect { slot, total })
    }

    /// What becomes of frame `f`, received on unprotected port `rx_port`
    /// whose MAC is `mac`, when it may take the inbound fast path (module
    /// docs), else `None` (the slow path, [`Self::classify`], decides it).
    #[inline(always)]
    pub(super) fn esp_fast_path<'t>(&self, t: &'t Tables, rx_port: usize, mac: &[u8; 6], f: &[u8]) -> Option<EspFast<'t>> {
        const ESP: usize = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN;
        let (h, total) = plain_ipv4(f, mac)?;
        // Room for the ESP header (the slow path's `EspPacket::new_checked`).
        if h[ipv4::PROTOCOL] != ipv4::PROTO_ESP || total < ipv4::MIN_HEADER_LEN + esp_hdr::HEADER_LEN {
            return None;
        }
        let src = u32::from_be_bytes([h[ipv4::SRC], h[ipv4::SRC + 1], h[ipv4::SRC + 2], h[ipv4::SRC + 3]]);
        let dst = u32::from_be_bytes([h[ipv4::DST], h[ipv4::DST + 1], h[ipv4::DST + 2], h[ipv4::DST + 3]]);
        let spi = u32::from_be_bytes([f[ESP], f[ESP + 1], f[ESP + 2], f[ESP + 3]]);
        let r = self.esp_flows.hit(t.version, rx_port, src, dst, ipv4::PROTO_ESP, Some(spi))? as usize;
        // Cleared on adopt: the SA (and its owner) is the one learned; the
        // SA found is what the fast path goes on with (one lookup a packet).
        let (_, e) = in_sa(t, r)?;
        Some(EspFast { r, e, total })
    }

    /// The inbound fast path of a frame [`Self::esp_fast_path`] took:
    /// counted as received, cut to its IPv4 total length (Ethernet padding
    /// off) and handed to `prepare_inbound_sa` with the SA it found when
    /// this worker owns it, else to the owner, as the slow path goes on
    /// with such a packet.
    #[inline(always)]
    pub(super) fn esp_fast_forward(&mut self, t: &Tables, fast: EspFast<'_>, mut buf: PktBuf) {
        const ESP: usize = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN;
        let port = buf.port as usize;
        if !self.count_fast_rx(&buf) {
            return self.drop_buf(0, DropReason::Malformed, buf);
        }
        buf.trim_to(ethernet::HEADER_LEN + fast.total);
        let owner = fast.e.sa.owner;
        if owner != self.conf.id {
            return self.hand_to_owner(t, owner, port, buf, tag(true, fast.r, ESP, port as u16));
        }
        self.prepare_inbound_sa(fast.e, fast.r, ESP, port, buf)
    }

    /// The fast path of a frame [`Self::fast_path`] took: counted as
    /// received, cut to its IPv4 total length (Ethernet padding off), then
    /// as the slow path goes on with such a packet: PROTECT, TTL
    /// decremented and handed to `prepare_outbound`; BYPASS, to
    /// `forward_checked` (route, MTU, decrement, send).
    #[inline(always)]
    pub(super) fn fast_forward(&mut self, t: &Tables, fast: Fast, mut buf: PktBuf) {
        let port = buf.port as usize;
        if !self.count_fast_rx(&buf) {
            return self.drop_buf(0, DropReason::Malformed, buf);
        }
        match fast {
            Fast::Protect { slot, total } => {
                let Some(sa) = t.sad.outbound_at(slot) else {
                    return self.drop_buf(port, DropReason::NoSa, buf);
                };
                buf.trim_to(ethernet::HEADER_LEN + total);
                decrement_hops(&mut buf);
                let i = sa_ref(slot, sa.id);
                self.prepare_outbound(sa, slot, i, port, buf)
            }
            Fast::Bypass { total, dst } => {
                buf.trim_to(ethernet::HEADER_LEN + total);
                self.forward_checked(t, port, buf, IpAddr::V4(dst), None)
            }
        }
    }
}
