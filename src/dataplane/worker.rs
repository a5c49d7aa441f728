//! One data-plane worker.

mod flow;
mod resolve;

pub use resolve::PendingConf;

use super::counters::{DropReason, WorkerCounters};
use super::reassembly::{ReassemblyConf, Reassembler};
use crate::crypto::{CryptoOp, QueuePair};
use crate::esp::{inbound, outbound, pmtu, transport, InboundState, OutboundSa, OutboundState, SessionCache};
use crate::io::{PktBuf, Port};
use crate::policy::neighbour::Neighbours;
use crate::policy::spd::{FlowKey, SpdAction};
use crate::policy::{self, Tables};
use crate::wire::{arp, esp as esp_hdr, ethernet, icmp, icmpv6, ipv4, ipv6, udp};
use arc_swap::ArcSwap;
use crossbeam_queue::ArrayQueue;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// ICMP errors one worker may send per second: a token bucket refilled at
/// this rate holding at most this many (RFC 1812 §4.3.2.8 asks routers to
/// limit the rate of ICMP errors).
pub const ICMP_RATE: u32 = 100;

/// A token bucket of [`ICMP_RATE`] tokens refilled at [`ICMP_RATE`] per
/// second (whole milliseconds' worth at a time).
#[derive(Debug, Clone, Copy)]
struct IcmpBucket {
    tokens: u32,
    refill: Instant,
}

impl IcmpBucket {
    fn new() -> IcmpBucket {
        IcmpBucket { tokens: ICMP_RATE, refill: Instant::now() }
    }

    /// Takes a token at `now`; false when none is left.
    fn take(&mut self, now: Instant) -> bool {
        let per_token_ms = 1000 / ICMP_RATE as u128;
        let elapsed = now.saturating_duration_since(self.refill).as_millis();
        if elapsed >= per_token_ms {
            self.tokens = (self.tokens as u128 + elapsed / per_token_ms).min(ICMP_RATE as u128) as u32;
            self.refill = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

const TAG_INBOUND: u64 = 1 << 63;
/// Set (with an outbound tag) on the op of a dummy packet the worker made
/// itself (RFC 4303 §2.6): counted as a dummy, not as SA traffic.
const TAG_DUMMY: u64 = 1 << 62;
/// The "receive port" of a packet the worker made itself (a dummy): no
/// port's counters, so a drop of it is counted by reason only.
const NO_PORT: usize = 0xffff;

/// Packs what the owner and `finish` need into a handoff tag / an op's
/// `user[1]`: direction (bit 63), dummy (bit 62, [`TAG_DUMMY`], set
/// separately), SA index (bits 32..62), a 16-bit auxiliary
/// value (bits 16..32: inner length for outbound ops, ESP offset for handed
/// inbound packets, outer DS + ECN byte for inbound ops), receive port
/// (bits 0..16).
#[inline]
fn tag(inbound: bool, sa: usize, aux: usize, port: u16) -> u64 {
    (if inbound { TAG_INBOUND } else { 0 }) | ((sa as u64 & 0x3fff_ffff) << 32) | ((aux as u64 & 0xffff) << 16) | port as u64
}

/// (inbound, SA reference, aux, receive port).
#[inline]
fn untag(t: u64) -> (bool, usize, u64, usize) {
    (t & TAG_INBOUND != 0, ((t >> 32) & 0x3fff_ffff) as usize, (t >> 16) & 0xffff, (t & 0xffff) as usize)
}

/// Bits of an SA reference that hold the SA's slot in the SAD.
const SLOT_BITS: u32 = 20;
/// SAD slots a worker can address in a tag (per direction).
pub const MAX_SA_SLOTS: usize = 1 << SLOT_BITS;
const SLOT_MASK: usize = MAX_SA_SLOTS - 1;
/// Bits of the SA's id kept beside the slot (30 bits in all).
const ID_MASK: usize = (1 << (30 - SLOT_BITS)) - 1;

/// The reference to an SA that travels in a tag: its slot and the low bits
/// of its id, so a packet handed over or an op prepared before the SA was
/// replaced is not processed with the SA that took its slot later.
#[inline]
fn sa_ref(slot: usize, id: u32) -> usize {
    (slot & SLOT_MASK) | ((id as usize & ID_MASK) << SLOT_BITS)
}

/// RFC 4303 §3.3.3: once an outbound SA has sent its last sequence number
/// (2^32−1 without ESN) it is spent: its hard flag goes up now, with the
/// last packet, so the control thread's `hard_expired` event does not wait
/// for the next packet (which is dropped as `sa_expired`).
#[inline]
fn spent_if_last(sa: &OutboundSa, st: &OutboundState) {
    let last = if sa.esn { u64::MAX } else { u32::MAX as u64 };
    if st.seq >= last {
        sa.life.raise_hard(crate::esp::lifetime::Expiry::Sequence);
    }
}

/// The first outer IPv4 identification of worker `id` of `n` (`n` 0
/// counts as 1; `id` below `n`): the `r`-th (modulo their number) of the
/// values ≡ `id` (mod `n`) that fit in 16 bits.
fn first_outer_ident(id: usize, n: usize, r: u16) -> u16 {
    let (id, n) = (id as u32, n.max(1) as u32);
    let count = (0xffff - id.min(0xffff)) / n + 1;
    (id + n * (r as u32 % count)) as u16
}

/// The outer IPv4 identification worker `id` of `n` writes after `cur`:
/// `cur + n`, or back to `id` past 65535, so a worker's values stay ≡ `id`
/// (mod `n`) whether or not `n` divides 65536.
#[inline]
fn next_outer_ident(cur: u16, id: usize, n: usize) -> u16 {
    let next = cur as u32 + n.max(1) as u32;
    if next > 0xffff {
        id as u16
    } else {
        next as u16
    }
}

/// A worker's counter of outer IPv4 identifications for headers with DF
/// clear (RFC 6864 §4.2): worker `id` of `n` takes the values ≡ `id`
/// (mod `n`) in turn ([`next_outer_ident`]), from a random one of them
/// ([`first_outer_ident`]).
#[derive(Debug)]
struct OuterIdent {
    cur: u16,
    id: usize,
    n: usize,
}

impl OuterIdent {
    /// The counter of worker `id` of `n`, starting at the `r`-th of its
    /// values.
    fn new(id: usize, n: usize, r: u16) -> OuterIdent {
        OuterIdent { cur: first_outer_ident(id, n, r), id, n }
    }

    /// The identification to write now; the counter moves on.
    #[inline]
    fn take(&mut self) -> u16 {
        let v = self.cur;
        self.cur = next_outer_ident(v, self.id, self.n);
        v
    }
}

/// A worker's source of identifications for the Fragment headers it
/// writes (RFC 8200 §4.5: outer ESP packets and its own Echo Replies),
/// each one random (RFC 7739 §5.2), as Linux gives them: a counter, even
/// from a random start, tells anyone who receives one fragmented reply
/// the identifications of the tunnel's next datagrams, and a fragment
/// sent ahead with each of them, spoofed from this gateway, makes the
/// peer drop those datagrams as overlapping (RFC 5722). Random values
/// come from the kernel ([`getrandom`]) 32 at a time, one system call a
/// 32 fragmented datagrams; should it fail, a counter goes on from the
/// last value (unique, only guessable). Two datagrams to one peer get the
/// same value with a chance of 2⁻³² each, and that matters only while
/// both are being reassembled there.
#[derive(Debug)]
struct Frag6Idents {
    /// 32 identifications, 4 bytes each, used from `next` on.
    pool: [u8; 128],
    next: usize,
    last: u32,
}

impl Frag6Idents {
    fn new() -> Frag6Idents {
        Frag6Idents { pool: [0; 128], next: 128, last: 0 }
    }

    /// The identification of the next fragmented datagram.
    fn take(&mut self) -> u32 {
        if self.next + 4 > self.pool.len() {
            if getrandom::getrandom(&mut self.pool).is_err() {
                self.last = self.last.wrapping_add(1);
                return self.last;
            }
            self.next = 0;
        }
        let p = &self.pool[self.next..self.next + 4];
        self.next += 4;
        self.last = u32::from_ne_bytes([p[0], p[1], p[2], p[3]]);
        self.last
    }
}

/// True if tag `tag` names an SA that `t` does not hold (any more, or yet).
#[inline]
fn stale(t: &Tables, tag: u64) -> bool {
    let (is_in, r, _, _) = untag(tag);
    if is_in {
        in_sa(t, r).is_none()
    } else {
        out_sa(t, r).is_none()
    }
}

/// The outbound SA `r` refers to, with its slot, if it is still there.
#[inline]
fn out_sa(t: &Tables, r: usize) -> Option<(usize, &OutboundSa)> {
    let slot = r & SLOT_MASK;
    t.sad.outbound_at(slot).filter(|sa| sa.id as usize & ID_MASK == r >> SLOT_BITS).map(|sa| (slot, sa))
}

/// The inbound SA entry `r` refers to, with its slot, if it is still there.
#[inline]
fn in_sa(t: &Tables, r: usize) -> Option<(usize, &crate::policy::sad::InboundEntry)> {
    let slot = r & SLOT_MASK;
    t.sad.inbound_at(slot).filter(|e| e.sa.id as usize & ID_MASK == r >> SLOT_BITS).map(|e| (slot, e))
}

/// Whether the ESP packet `at` bytes after the start of the IPv4 header
/// (its length, plus the UDP header for ESP in UDP) has the SPI of an
/// inbound transport-mode SA.
fn transport_spi(t: &Tables, buf: &PktBuf, at: usize) -> bool {
    let Some(Ok(esp)) = buf.frame().get(ethernet::HEADER_LEN + at..).map(esp_hdr::EspPacket::new_checked) else {
        return false;
    };
    t.sad.inbound_transport(esp.spi()).is_some()
}

/// True if the IP header after the Ethernet header of `f` is IPv6.
#[inline]
fn is_ipv6(f: &[u8]) -> bool {
    f.get(ethernet::HEADER_LEN).is_some_and(|b| b >> 4 == 6)
}

/// The DS + ECN byte of the IP header after the Ethernet header (IPv4 TOS
/// or IPv6 traffic class), 0 if there is none.
#[inline]
fn ip_tos(f: &[u8]) -> u8 {
    let ip = f.get(ethernet::HEADER_LEN..).unwrap_or(&[]);
    if is_ipv6(f) {
        ipv6::traffic_class(ip)
    } else {
        ip.get(ipv4::TOS).copied().unwrap_or(0)
    }
}

/// The forwarding decrement of the IP header after the Ethernet header:
/// IPv4 TTL (checksum updated) or IPv6 hop limit.
#[inline(always)]
fn decrement_hops(buf: &mut PktBuf) {
    let v6 = is_ipv6(buf.frame());
    let ip = buf.frame_mut().get_mut(ethernet::HEADER_LEN..).unwrap_or(&mut []);
    if v6 {
        ipv6::decrement_hop_limit(ip)
    } else {
        ipv4::decrement_ttl(ip)
    }
}

/// Whether the IPv4 header after the Ethernet header has DF set.
#[inline]
fn ipv4_df(buf: &PktBuf) -> bool {
    buf.frame().get(ethernet::HEADER_LEN + ipv4::FLAGS_FRAG).is_some_and(|&b| u16::from(b) << 8 & ipv4::FLAG_DF != 0)
}

/// Where [`Worker::route`] sends a packet.
#[derive(Clone, Copy)]
enum NextHop {
    /// Out of port `out` to `mac`.
    Known { out: usize, mac: [u8; 6] },
    /// Out of port `out` to next hop `nh`, whose MAC is being resolved.
    Unresolved { out: usize, nh: IpAddr },
}

/// Where a fragment goes: straight to a port (Ethernet addresses given), or
/// into an outbound SA (inner fragmentation before encapsulation, RFC 4459
/// §3).
#[derive(Clone, Copy)]
enum FragSink {
    /// Stage on port `out` with these (destination, source) MACs.
    Tx { out: usize, macs: ([u8; 6], [u8; 6]) },
    /// Encapsulate with outbound SA `sa`, owned by worker `owner`.
    Sa { sa: usize, owner: usize },
}

/// Destination address of the IPv4 or IPv6 header after the Ethernet
/// header (unspecified if too short).
fn ip_dst(buf: &PktBuf) -> IpAddr {
    let f = buf.frame().get(ethernet::HEADER_LEN..).unwrap_or(&[]);
    match f.first().map(|b| b >> 4) {
        Some(6) => f.get(ipv6::DST..ipv6::DST + 16).and_then(|a| <[u8; 16]>::try_from(a).ok()).map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |a| IpAddr::V6(a.into())),
        _ => IpAddr::V4(f.get(ipv4::DST..ipv4::DST + 4).map_or(Ipv4Addr::UNSPECIFIED, |a| Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
    }
}

/// True if the packet after the Ethernet header is IPv4 with a source
/// route option (LSRR/SSRR, [`ipv4::scan_options`]); only a header with
/// options is looked at.
#[inline(always)]
fn inner_source_routed(buf: &PktBuf) -> bool {
    match buf.frame().get(ethernet::HEADER_LEN) {
        Some(&b) if b >> 4 == 4 && (b & 0x0f) > 5 => options_source_routed(buf, (b & 0x0f) as usize * 4),
        _ => false,
    }
}

/// [`inner_source_routed`] for an IPv4 header of `hl` bytes, options and
/// all (rare: kept out of the per-packet path).
#[cold]
#[inline(never)]
fn options_source_routed(buf: &PktBuf, hl: usize) -> bool {
    let f = buf.frame();
    f.get(ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN..ethernet::HEADER_LEN + hl).is_some_and(|o| ipv4::scan_options(o) == Ok(true))
}

/// The [`inbound::InnerHeader`] of the IPv4 or IPv6 packet after the
/// Ethernet header of `buf` (a transport-mode packet just rebuilt), or
/// `None` when it does not check.
/// Whether the IP packet in `buf` (key `key`) is a TCP or UDP fragment
/// (first or later) whose addresses an outbound entry with port selectors
/// may match ([`crate::policy::spd::Spd::ports_may_select_v4`]; IPv6: any such entry of the
/// family): its fragments could be classified apart (RFC 4301 §7.1).
fn port_split_fragment(t: &Tables, key: &FlowKey, buf: &PktBuf) -> bool {
    if key.protocol != ipv4::PROTO_TCP && key.protocol != ipv4::PROTO_UDP {
        return false;
    }
    let ip = buf.frame().get(ethernet::HEADER_LEN..).unwrap_or(&[]);
    let fragment = if key.dst.is_ipv6() {
        ipv6::Ipv6Packet::new_checked(ip).and_then(|p| p.upper_layer()).is_ok_and(|u| u.is_fragment())
    } else {
        ipv4::Ipv4Packet::new_checked(ip).is_ok_and(|p| p.is_fragment())
    };
    fragment
        && if key.dst.is_ipv6() {
            t.spd_out.entries(true).iter().any(|e| e.selector.selects_ports())
        } else {
            t.spd_out.ports_may_select_v4(key)
        }
}

fn inner_header(buf: &PktBuf) -> Option<inbound::InnerHeader> {
    let inner = buf.frame().get(ethernet::HEADER_LEN..)?;
    if is_ipv6(buf.frame()) {
        inbound::InnerHeader::of_ipv6(&ipv6::Ipv6Packet::new_checked(inner).ok()?)
    } else {
        Some(inbound::InnerHeader::of_ipv4(&ipv4::Ipv4Packet::new_checked(inner).ok()?))
    }
}

/// Bytes of the packet in `buf` that transport mode keeps in front of ESP
/// (RFC 4303 §3.1.1): the IPv4 header, or the IPv6 header and the
/// extension headers [`ipv6::esp_placement`] leaves in front (40 if the
/// chain is broken: the packet fails later, counted).
fn transport_kept_len(buf: &PktBuf) -> usize {
    let ip = buf.frame().get(ethernet::HEADER_LEN..).unwrap_or(&[]);
    match ip.first().map(|b| b >> 4) {
        Some(6) => ipv6::Ipv6Packet::new_checked(ip)
            .and_then(|p| ipv6::esp_placement(p.next_header(), p.payload(), false))
            .map_or(ipv6::HEADER_LEN, |pl| pl.at),
        Some(_) => (ip[0] & 0x0f) as usize * 4,
        None => ipv4::MIN_HEADER_LEN,
    }
}

/// Settings of a worker.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConf {
    /// Worker id (SA owner ids refer to it).
    pub id: usize,
    /// Packets per rx burst.
    pub burst: usize,
    /// Packet buffers this worker owns (beyond its rx slots).
    pub pool_size: usize,
    /// Number of workers (buffers of every worker may pass through this one).
    pub nb_workers: usize,
    /// Microseconds to sleep between polls once the worker is idle (0 =
    /// busy-poll always). Frees the core when there is no traffic at the
    /// cost of up to this much latency (plus the kernel's timer slack) for
    /// the first packet after a pause; the AF_XDP rings hold arrivals
    /// meanwhile.
    pub idle_sleep_us: u64,
    /// Microseconds without a received frame (rx or handoff) after which
    /// the worker counts as idle: it then sleeps `idle_sleep_us` between
    /// polls, or, while it still has crypto ops in flight on an
    /// asynchronous device or waiting to enter its queue pair, yields its
    /// core between polls (`sched_yield`: the device's engine may need that
    /// core to complete them). The clock is first read at the
    /// [`IDLE_CLOCK_EVERY`]th empty poll in a row and then every
    /// `IDLE_CLOCK_EVERY`, never on a poll that received: the spin lasts
    /// `IDLE_CLOCK_EVERY` polls plus `idle_spin_us`, rounded up to the next
    /// check, so at least 2 × `IDLE_CLOCK_EVERY` polls even at 0. Unused
    /// when `idle_sleep_us` is 0 (busy-poll always, never yield).
    pub idle_spin_us: u64,
    /// Reassembly of outer fragments addressed to the gateway.
    pub reasm: ReassemblyConf,
    /// The queue of packets waiting for a next hop's MAC.
    pub neigh: PendingConf,
    /// Milliseconds a tunnel SA's path MTU learned from an ICMP report
    /// holds (`gateway.pmtu_timeout_s`; RFC 1191 §6.3, RFC 4301 §8.2.2);
    /// 0 = reports are ignored (RFC 4301 §6.1.1).
    pub pmtu_timeout_ms: u64,
    /// Answer Echo Requests to the gateway's addresses
    /// (`gateway.icmp_echo`; see [`Worker::echo`]).
    pub icmp_echo: bool,
}

/// Empty polls between two reads of the clock by an idle worker (see
/// [`WorkerConf::idle_spin_us`]).
pub const IDLE_CLOCK_EVERY: u32 = 32;

/// Largest ICMPv6 error sent back through a tunnel, in bytes: RFC 4443
/// §2.4 (c)'s 1280 less room for any SA's encapsulation (outer header,
/// UDP, ESP header, IV, padding, ICV), so the sealed error still fits a
/// path of the IPv6 minimum MTU.
const TUNNEL_ERROR_MAX_V6: usize = 1280 - 160;

/// Where an ICMP error about a packet received on a port goes.
#[derive(Debug, Clone, Copy)]
enum ErrorPath {
    /// Routed to the packet's source, from the first address (of the
    /// error's family) of the port the packet came in on: the source is on
    /// that side.
    Back,
    /// From the first address of port `from` (the egress port the
    /// decapsulated packet did not fit), through the outbound SPD: the
    /// source is behind the tunnel the packet came through, whose far end
    /// is `peer` (the inbound SA's `tunnel_src`; in transport mode the
    /// packet's own source). The error quotes decrypted bytes, so it goes
    /// only into ESP back to `peer`.
    Tunnel {
        /// The port whose address is the error's source.
        from: usize,
        /// The far end of the tunnel the packet came through.
        peer: IpAddr,
    },
}

/// Where a packet that [`Worker::outbound`] takes through the outbound SPD
/// comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Received in the clear on a protected port.
    Protected,
    /// Decrypted by an inbound SA whose far end is `peer` (tunnel mode: its
    /// `tunnel_src`; transport mode: the packet's source) and routed out of
    /// an unprotected port, or not routed: it crosses the IPsec boundary
    /// again, so the outbound SPD decides (RFC 4301 §5.1): PROTECT seals it
    /// again (a hub between two tunnels), BYPASS sends it in the clear, no
    /// entry or DISCARD drops it. Not remembered in the flow cache; an ICMP
    /// error about it goes back into the tunnel to `peer`.
    Decapsulated { peer: IpAddr },
    /// An ICMP error or Echo Reply the gateway built about a packet that
    /// came out of a tunnel from `peer`, from its own address: it quotes
    /// decrypted bytes, so only a PROTECT entry whose SA goes back to
    /// `peer` takes it (else `tunnel_error_dropped`); it leaves with the
    /// TTL it was given.
    Built { peer: IpAddr },
}

/// What an ICMP error the gateway sends about a packet it drops reports.
#[derive(Debug, Clone, Copy)]
enum IcmpReport {
    /// Too big for the path: "fragmentation needed" / Packet Too Big with
    /// this MTU in bytes; the drop is `mtu_exceeded`.
    TooBig(usize),
    /// TTL / hop limit exceeded in transit; the drop is `ttl_exceeded`.
    TimeExceeded,
    /// An IPv6 option the gateway may not pass over (RFC 8200 §4.2):
    /// Parameter Problem with this code and pointer; the drop is
    /// `ipv6_option`. IPv6 only.
    ParamProblem { code: u8, pointer: u32 },
}

impl IcmpReport {
    /// The drop reason of the packet reported.
    fn reason(self) -> DropReason {
        match self {
            IcmpReport::TooBig(_) => DropReason::MtuExceeded,
            IcmpReport::TimeExceeded => DropReason::TtlExceeded,
            IcmpReport::ParamProblem { .. } => DropReason::Ipv6Option,
        }
    }
}

impl ErrorPath {
    /// The port whose address is the error's source, for a packet received
    /// on `rx_port`.
    fn from(self, rx_port: usize) -> usize {
        match self {
            ErrorPath::Back => rx_port,
            ErrorPath::Tunnel { from, .. } => from,
        }
    }
}

/// A packet handed to the worker that owns its SA: the buffer and the same
/// tag a crypto op carries (direction, SA index, ESP offset, receive port).
#[derive(Debug)]
pub struct Handed {
    /// The frame.
    pub buf: PktBuf,
    /// `tag(…)` of the packet.
    pub tag: u64,
}

/// A worker's ends of the handoff mesh (VPP handoff model): one bounded
/// ring per ordered pair of workers, each with one producer and one
/// consumer, plus a return queue per worker for buffers going home.
pub struct Handoff {
    /// `to[w]`: ring from this worker to worker `w` (`None` for itself).
    pub to: Vec<Option<Arc<ArrayQueue<Handed>>>>,
    /// Rings from every other worker to this one.
    pub from: Vec<Arc<ArrayQueue<Handed>>>,
    /// `returns[w]`: buffers whose home is worker `w`.
    pub returns: Vec<Arc<ArrayQueue<PktBuf>>>,
}

impl Handoff {
    /// The handoff ends of `n` workers, rings of `depth` packets. Allocates:
    /// control path only.
    pub fn mesh(n: usize, depth: usize, pool_per_worker: usize) -> Vec<Handoff> {
        // A worker's ring to itself is never used: one slot (an
        // `ArrayQueue` writes every slot when made).
        let rings: Vec<Vec<Arc<ArrayQueue<Handed>>>> =
            (0..n).map(|a| (0..n).map(|b| Arc::new(ArrayQueue::new(if a == b { 1 } else { depth.max(1) }))).collect()).collect();
        let returns: Vec<Arc<ArrayQueue<PktBuf>>> = (0..n).map(|_| Arc::new(ArrayQueue::new(pool_per_worker.max(1) * 2))).collect();
        (0..n)
            .map(|me| Handoff {
                to: (0..n).map(|w| if w == me { None } else { Some(rings[me][w].clone()) }).collect(),
                from: (0..n).filter(|&w| w != me).map(|w| rings[w][me].clone()).collect(),
                returns: returns.clone(),
            })
            .collect()
    }

    /// After every worker of the mesh has stopped (joined): counts each
    /// packet left in `from`, the rings to one worker, as that worker's
    /// `shutdown` drop under the port it was received on, and frees it.
    /// Returns how many there were. Control path (shutdown) only.
    pub fn drop_stranded(from: &[Arc<ArrayQueue<Handed>>], counters: &WorkerCounters) -> u64 {
        let mut n = 0;
        for ring in from {
            while let Some(h) = ring.pop() {
                counters.count_drop(h.buf.port as usize, DropReason::Shutdown);
                n += 1;
            }
        }
        n
    }

    /// A single worker's (empty) mesh.
    pub fn single() -> Handoff {
        Handoff::mesh(1, 1, 1).pop().unwrap_or(Handoff { to: vec![None], from: vec![], returns: vec![] })
    }
}

/// A worker: its ports, its queue pair, the state of the SAs it owns.
pub struct Worker<P: Port, Q: QueuePair<PktBuf>> {
    conf: WorkerConf,
    ports: Vec<P>,
    qp: Q,
    tables: Arc<ArcSwap<Tables>>,
    out_state: Vec<OutboundState>,
    in_state: Vec<InboundState>,
    counters: Arc<WorkerCounters>,
    handoff: Handoff,
    polls: u64,
    rx: Vec<PktBuf>,
    pool: Vec<PktBuf>,
    ops: Vec<CryptoOp<PktBuf>>,
    done: Vec<CryptoOp<PktBuf>>,
    tx: Vec<Vec<PktBuf>>,
    /// The clock of the current poll, read at most once per poll.
    now: Option<Instant>,
    /// `now` in [`pmtu::epoch_ms`] milliseconds, worked out at most once
    /// per poll (learned path MTUs are checked per packet).
    now_ms: Option<u64>,
    /// (outbound SA reference, when its next dummy packet is due) of every
    /// SA this worker owns that sends dummies (RFC 4303 §2.6); empty when
    /// none does, and then the poll loop spends nothing on dummies.
    dummies: Vec<(usize, Instant)>,
    /// The earliest `due` in `dummies` (or earlier): until then a poll
    /// does not look at them.
    dummy_next: Instant,
    /// Version of the tables the SA state was last matched to.
    version: u64,
    /// Crypto ops prepared (pushed for enqueue) and finished, since start.
    prepared: u64,
    finished: u64,
    /// `prepared` when `version` was adopted: once `finished` reaches it,
    /// no op from an older snapshot is in flight (ops complete in order).
    boundary: u64,
    /// ICMP errors' bucket (RFC 1812 §4.3.2.8).
    icmp_bucket: IcmpBucket,
    /// Echo Replies' own bucket: a flood of pings does not use up the
    /// errors' tokens (a Path MTU black hole for the hosts behind us).
    echo_bucket: IcmpBucket,
    icmp_ident: u16,
    /// Identifications of the IPv6 packets the worker fragments
    /// ([`Self::fragment_outer`]), random each.
    frag6_ident: Frag6Idents,
    /// Identification of the next outer IPv4 header with DF clear the
    /// worker writes ([`OuterIdent::take`]): worker `id` of `n` takes the
    /// values ≡ `id` (mod `n`) in turn ([`next_outer_ident`]), from a
    /// random one of them, so no two workers ever give the same value and
    /// no two SAs of one worker do until about 65536 / `n` of its packets
    /// with DF clear have gone (RFC 6864 §4: unique per source,
    /// destination and protocol while fragments may meet; one counter
    /// shared by the workers would give 65536 but cost a cross-core atomic
    /// per packet).
    outer4_ident: OuterIdent,
    reasm: Reassembler,
    /// The neighbour snapshot of this poll (checked once per poll, cloned
    /// only when the control thread published a new one).
    neigh: Arc<Neighbours>,
    /// The tables snapshot of the last poll, kept so a poll whose snapshot
    /// did not change takes no reference count (`None` during a poll).
    snap: Option<Arc<Tables>>,
    /// The last destination [`Self::forward`] resolved in this poll:
    /// (destination, egress port, destination MAC). Valid for one poll
    /// (one tables and one neighbour snapshot, one clock reading);
    /// cleared at the start of each poll, by [`Self::adopt`] and by
    /// [`Self::drain`]. A burst of one tunnel's packets routes and looks
    /// up its next hop once.
    last_hop: Option<(IpAddr, usize, [u8; 6])>,
    /// (tables version, destination, egress port) of the last MTU check's
    /// route lookup in [`Self::outbound`].
    via_memo: Option<(u64, IpAddr, Option<usize>)>,
    resolver: resolve::Resolver,
    /// Session references of finished ops, handed to the next ops of the
    /// same session (no reference count per op); cleared on adopt.
    sessions: SessionCache,
    /// Outbound PROTECT decisions of recent flows ([`flow`]); cleared on
    /// adopt.
    flows: flow::FlowCache,
    /// Inbound SAs of recent ESP flows ([`flow`]); cleared on adopt.
    esp_flows: flow::FlowCache,
    /// Per outbound SA slot: may its packets take the fast path, and the
    /// largest inner packet that fits ([`flow::fast_sas`]); rebuilt on
    /// adopt.
    fast_sa: Vec<flow::FastSa>,
    /// The routes and ports `fast_sa` was made under: while a snapshot
    /// keeps them, its records of unchanged SAs are kept.
    fast_basis: Option<(Arc<crate::policy::route::Routes>, Arc<Vec<crate::policy::PortInfo>>)>,
}

impl<P: Port, Q: QueuePair<PktBuf>> Worker<P, Q> {
    /// Builds a worker; allocates every buffer it will ever use. `ports[i]`
    /// must be port id `i` of the tables; `handoff` is this worker's end of
    /// [`Handoff::mesh`] (or [`Handoff::single`]).
    pub fn new(
        conf: WorkerConf,
        ports: Vec<P>,
        qp: Q,
        tables: Arc<ArcSwap<Tables>>,
        counters: Arc<WorkerCounters>,
        handoff: Handoff,
    ) -> Self {
        let t = tables.load_full();
        // Every buffer of every worker may end up here at once.
        let total = (conf.pool_size + conf.burst) * conf.nb_workers.max(1);
        let nports = ports.len();
        let mk = || {
            let mut b = PktBuf::new();
            b.home = conf.id as u16;
            b
        };
        let mut w = Worker {
            handoff,
            polls: 0,
            rx: (0..conf.burst).map(|_| mk()).collect(),
            pool: {
                let mut v = Vec::with_capacity(total);
                v.extend((0..conf.pool_size).map(|_| mk()));
                v
            },
            ops: Vec::with_capacity(total),
            done: Vec::with_capacity(total),
            tx: (0..nports).map(|_| Vec::with_capacity(total)).collect(),
            conf,
            ports,
            qp,
            tables,
            out_state: Vec::new(),
            in_state: Vec::new(),
            counters,
            now: None,
            now_ms: None,
            dummies: Vec::new(),
            dummy_next: Instant::now(),
            version: u64::MAX,
            prepared: 0,
            finished: 0,
            boundary: 0,
            icmp_bucket: IcmpBucket::new(),
            echo_bucket: IcmpBucket::new(),
            icmp_ident: 0,
            frag6_ident: Frag6Idents::new(),
            outer4_ident: {
                let mut b = [0u8; 2];
                // Without randomness a fixed start works; it is only guessable.
                let _ = getrandom::getrandom(&mut b);
                OuterIdent::new(conf.id, conf.nb_workers, u16::from_ne_bytes(b))
            },
            reasm: Reassembler::new(conf.reasm),
            neigh: t.neighbours.load_full(),
            snap: None,
            last_hop: None,
            via_memo: None,
            resolver: resolve::Resolver::new(conf.neigh),
            sessions: SessionCache::new(total),
            flows: flow::FlowCache::default(),
            esp_flows: flow::FlowCache::default(),
            fast_sa: Vec::new(),
            fast_basis: None,
        };
        w.adopt(&t);
        w
    }

    /// Matches the per-SA state to a new tables snapshot (control path:
    /// runs once per snapshot, may allocate): state vectors grow to the
    /// slot counts, the state of a slot whose SA changed starts afresh
    /// (sequence number `first_seq`, empty replay window), the dummy
    /// schedule is rebuilt (a surviving SA keeps its due time), and the
    /// quiescence boundary moves to the ops prepared so far.
    fn adopt(&mut self, t: &Tables) {
        let me = self.conf.id;
        if self.out_state.len() < t.sad.outbound.len() {
            self.out_state.resize_with(t.sad.outbound.len(), OutboundState::default);
        }
        for (slot, sa) in t.sad.outbound_sas() {
            if sa.owner == me && (self.out_state[slot].id != sa.id || self.version == u64::MAX) {
                self.out_state[slot] = OutboundState::new(sa);
            }
        }
        if self.in_state.len() < t.sad.inbound.len() {
            self.in_state.resize_with(t.sad.inbound.len(), InboundState::empty);
        }
        for (slot, e) in t.sad.inbound_sas() {
            if e.sa.owner == me && (self.in_state[slot].id != e.sa.id || self.version == u64::MAX) {
                self.in_state[slot] = InboundState::new(&e.sa);
            }
        }
        let start = Instant::now();
        // Sorted by SA reference, so each SA finds its old due time in
        // O(log D) (a linear search made a snapshot O(D²) with many dummy
        // SAs, helper-103).
        let mut old = std::mem::take(&mut self.dummies);
        old.sort_unstable_by_key(|&(r, _)| r);
        self.dummy_next = start;
        for (slot, sa) in t.sad.outbound_sas() {
            let (Some(d), true) = (sa.dummy, sa.owner == me) else { continue };
            let r = sa_ref(slot, sa.id);
            let due = old.binary_search_by_key(&r, |&(o, _)| o).map_or(start + d.interval, |k| old[k].1);
            self.dummy_next = if self.dummies.is_empty() { due } else { self.dummy_next.min(due) };
            self.dummies.push((r, due));
        }
        self.version = t.version;
        self.last_hop = None;
        // A removed SA's session (its key material) must not outlive its
        // last op in the cache.
        self.sessions.clear();
        self.flows.clear();
        self.esp_flows.clear();
        let keep = self.fast_basis.as_ref().is_some_and(|(r, p)| Arc::ptr_eq(r, &t.routes) && Arc::ptr_eq(p, &t.ports)) && self.version != u64::MAX;
        flow::fast_sas(t, me, &mut self.fast_sa, keep);
        self.fast_basis = Some((t.routes.clone(), t.ports.clone()));
        self.counters.adopted.set(t.version);
        self.boundary = self.prepared;
        self.note_quiesced();
    }

    /// Publishes `version` as quiesced once every op prepared under an
    /// older snapshot has finished.
    #[inline]
    fn note_quiesced(&mut self) {
        if self.finished >= self.boundary && self.counters.quiesced.get() != self.version {
            self.counters.quiesced.set(self.version);
        }
    }

    /// Queues a prepared op for the queue pair.
    #[inline]
    fn push_op(&mut self, op: CryptoOp<PktBuf>) {
        self.prepared += 1;
        self.ops.push(op);
    }

    /// Mutable state of the outbound SA in slot `i` (tests).
    pub fn outbound_state(&mut self, i: usize) -> Option<&mut OutboundState> {
        self.out_state.get_mut(i)
    }

    /// Buffers in this worker's pool right now (tests: after traffic has
    /// drained and reassembly has let go, every buffer is back).
    pub fn free_buffers(&self) -> usize {
        self.pool.len()
    }

    /// Crypto ops this worker has in its queue pair or waiting to enter it.
    pub fn inflight(&self) -> usize {
        self.qp.inflight() + self.ops.len()
    }

    /// Runs until `stop` is set, then drains in-flight crypto ops and
    /// transmits what they produced.
    pub fn run(&mut self, stop: &AtomicBool) {
        let nap = std::time::Duration::from_micros(self.conf.idle_sleep_us);
        let spin = std::time::Duration::from_micros(self.conf.idle_spin_us);
        // Polls in a row that received nothing; the time when IDLE_CLOCK_EVERY
        // of them had passed; whether the spin is over (sleep, or yield while
        // ops are in flight or waiting for the queue pair, between polls). A
        // poll may complete ops without receiving: the spin paces the polls,
        // every poll still does the work.
        let mut idle = 0u32;
        let mut idle_since = std::time::Instant::now();
        let mut napping = false;
        while !stop.load(Ordering::Relaxed) {
            if self.poll_once() > 0 {
                idle = 0;
                napping = false;
                continue;
            }
            if napping {
                if self.inflight() > 0 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(nap);
                }
                continue;
            }
            idle = idle.saturating_add(1);
            if !nap.is_zero() && idle.is_multiple_of(IDLE_CLOCK_EVERY) {
                if idle == IDLE_CLOCK_EVERY {
                    idle_since = std::time::Instant::now();
                } else if idle_since.elapsed() >= spin {
                    napping = true;
                    continue;
                }
            }
            std::hint::spin_loop();
        }
        self.drain();
        self.count_stranded();
        self.drop_pending();
    }

    /// After [`Self::drain`] at shutdown: the ops it could not complete
    /// within its second (a device that stopped answering, or a queue pair
    /// stopped) are counted as `shutdown` drops, those still waiting for
    /// the device under their receive port, those inside it (their
    /// buffers go with the queue pair) under none.
    pub fn count_stranded(&mut self) {
        let mut waiting = std::mem::take(&mut self.ops);
        for op in waiting.drain(..) {
            self.drop_buf(op.buf.port as usize, DropReason::Shutdown, op.buf);
        }
        self.ops = waiting;
        let inside = self.qp.inflight() as u64;
        if inside > 0 {
            self.counters.count_drops(NO_PORT, DropReason::Shutdown, inside);
        }
    }

    /// Completes every op still in the queue pair (waiting up to a second
    /// for an asynchronous device) and flushes tx, under the latest tables
    /// snapshot, adopted first (as a poll does: what `finish` queues, e.g.
    /// an ICMP error into a tunnel, then uses the per-SA state of the SAs
    /// in that snapshot).
    pub fn drain(&mut self) {
        let t = self.snapshot();
        if t.version != self.version {
            self.adopt(&t);
        }
        self.last_hop = None;
        self.read_backend_stats();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while (self.qp.inflight() > 0 || !self.ops.is_empty()) && std::time::Instant::now() < deadline {
            self.crypto(&t);
            self.flush();
            std::hint::spin_loop();
        }
        self.flush();
        self.note_quiesced();
    }

    /// One loop iteration: an rx burst from every port, crypto, tx. Returns
    /// the number of frames received.
    pub fn poll_once(&mut self) -> usize {
        self.poll(None)
    }

    /// [`Worker::poll_once`] with the clock fixed at `now` for the poll
    /// (tests: neighbour timers, reassembly timeouts without sleeping).
    pub fn poll_at(&mut self, now: Instant) -> usize {
        self.poll(Some(now))
    }

    fn poll(&mut self, now: Option<Instant>) -> usize {
        let mut t = self.snapshot();
        if t.version != self.version {
            self.adopt(&t);
        }
        let mut received = 0;
        self.now = now;
        self.now_ms = None;
        self.last_hop = None;
        {
            let n = t.neighbours.load();
            if !Arc::ptr_eq(&n, &self.neigh) {
                self.neigh = arc_swap::Guard::into_inner(n);
            }
        }
        if let Some(r) = self.handoff.returns.get(self.conf.id) {
            while self.pool.len() < self.pool.capacity() {
                let Some(b) = r.pop() else { break };
                self.pool.push(b);
            }
        }
        if self.resolver.busy() {
            self.service_pending(&t);
        }
        if self.reasm.pending() {
            let now = self.now();
            self.reasm.expire(now, &self.counters);
            self.reasm_spent();
        }
        // Ops the crypto device refused at the last poll (an asynchronous
        // device's full queue pair, a stopped one) wait in `ops`; a
        // synchronous device leaves none. Once a burst's worth waits,
        // nothing new is taken in until the device catches up: packets
        // then wait in the ports' rx rings (what they cannot hold the
        // kernel drops and counts, `rx_dropped_backend`) and in the other
        // workers' handoff rings (`handoff_full`), a bounded time, not in
        // a list that grew to the whole pool (helper-98: seconds of
        // delay, and each enqueue moved what stayed behind it).
        let intake = self.ops.len() < self.conf.burst;
        for k in 0..if intake { self.handoff.from.len() } else { 0 } {
            for _ in 0..self.conf.burst {
                if self.ops.len() >= self.ops.capacity() {
                    break;
                }
                let Some(h) = self.handoff.from[k].pop() else { break };
                self.counters.handoff_in.add(1);
                received += 1;
                // The sender may have classified it under a snapshot newer
                // than ours (an SA just added): catch up first.
                if stale(&t, h.tag) {
                    let fresh = self.tables.load_full();
                    if fresh.version != self.version {
                        self.adopt(&fresh);
                        t = fresh;
                    }
                }
                self.owned(&t, h.buf, h.tag);
            }
        }
        for p in 0..self.ports.len() {
            let room = if intake { self.ops.capacity() - self.ops.len() } else { 0 };
            let limit = self.conf.burst.min(self.pool.len()).min(room);
            let n = self.ports[p].rx_burst(&mut self.rx[..limit]);
            received += n;
            // A port's frames try its direction's flow cache first
            // ([`flow`]): outbound on a protected port, ESP on the others.
            let port_mac = t.ports.get(p).map(|i| (i.mac, i.protected));
            let (mut hits, mut esp_hits) = (0, 0);
            for i in 0..n {
                let Some(fresh) = self.pool.pop() else { break };
                let buf = std::mem::replace(&mut self.rx[i], fresh);
                match &port_mac {
                    Some((mac, true)) if buf.port as usize == p => {
                        if let Some(f) = self.fast_path(&t, p, mac, buf.frame()) {
                            hits += 1;
                            self.fast_forward(&t, f, buf);
                            continue;
                        }
                    }
                    Some((mac, false)) if buf.port as usize == p => {
                        if let Some(f) = self.esp_fast_path(&t, p, mac, buf.frame()) {
                            esp_hits += 1;
                            self.esp_fast_forward(&t, f, buf);
                            continue;
                        }
                    }
                    _ => {}
                }
                self.classify(&t, buf);
            }
            if hits > 0 {
                self.counters.flow_hits.add(hits);
            }
            if esp_hits > 0 {
                self.counters.esp_flow_hits.add(esp_hits);
            }
        }
        if !self.dummies.is_empty() {
            self.send_dummies(&t);
        }
        self.crypto(&t);
        self.flush();
        self.note_quiesced();
        // Backend drop counters cost a syscall: read them now and then.
        self.polls = self.polls.wrapping_add(1);
        if self.polls.is_multiple_of(8192) {
            self.read_backend_stats();
        }
        self.snap = Some(t);
        received
    }

    /// The current tables snapshot: the one of the last poll if the
    /// control thread has not published another since (no reference
    /// count taken), else the new one.
    #[inline]
    fn snapshot(&mut self) -> Arc<Tables> {
        match self.snap.take() {
            Some(t) if Arc::ptr_eq(&self.tables.load(), &t) => t,
            _ => self.tables.load_full(),
        }
    }

    /// The time of this poll: the clock is read once, when first needed
    /// (no clock read per packet, none at all on polls that need no time).
    #[inline]
    fn now(&mut self) -> Instant {
        *self.now.get_or_insert_with(Instant::now)
    }

    /// [`Self::now`] in [`pmtu::epoch_ms`] milliseconds.
    #[inline]
    fn now_ms(&mut self) -> u64 {
        match self.now_ms {
            Some(ms) => ms,
            None => {
                let ms = pmtu::epoch_ms(self.now());
                self.now_ms = Some(ms);
                ms
            }
        }
    }

    /// Sends the dummy packets that are due (RFC 4303 §2.6): one per SA
    /// whose time has come, built in a buffer of the pool by
    /// [`outbound::prepare_dummy`] and sealed and routed like the SA's own
    /// packets. The next one is due an interval later (an interval after
    /// now if the worker fell behind: late dummies are not caught up in a
    /// burst). No free buffer or crypto slot: tried again next poll. Runs
    /// once per poll, and only when this worker owns an SA with dummies,
    /// scanning them only once the earliest is due (`dummy_next`);
    /// an idle worker polls at least every `idle_sleep_us` (at most 10 ms),
    /// so a dummy goes out within that of its time.
    fn send_dummies(&mut self, t: &Tables) {
        let now = self.now();
        if now < self.dummy_next {
            return;
        }
        // Out of buffers or crypto slots: the rest are looked at next poll.
        self.dummy_next = now;
        let mut next_due: Option<Instant> = None;
        for k in 0..self.dummies.len() {
            let (r, due) = self.dummies[k];
            let Some((i, sa)) = out_sa(t, r) else { continue };
            let Some(plan) = sa.dummy else { continue };
            if now < due {
                next_due = Some(next_due.map_or(due, |n| n.min(due)));
                continue;
            }
            if self.ops.len() >= self.ops.capacity() {
                return;
            }
            let Some(buf) = self.pool.pop() else { return };
            let next = due + plan.interval;
            let next = if next > now { next } else { now + plan.interval };
            self.dummies[k].1 = next;
            next_due = Some(next_due.map_or(next, |n| n.min(next)));
            if sa.life.expired() {
                self.drop_buf(NO_PORT, DropReason::SaExpired, buf);
                continue;
            }
            // Clears a path MTU that has aged out (RFC 4301 §8.2.2), so the
            // cap `prepare_dummy` takes from it does not outlive it.
            let _ = sa.path_mtu.get(|| self.now_ms());
            let ident = &mut self.outer4_ident;
            match outbound::prepare_dummy(sa, &mut self.out_state[i], buf, plan.len, |_| ident.take()) {
                Ok(mut op) => {
                    spent_if_last(sa, &self.out_state[i]);
                    op.user[1] = tag(false, r, 0, NO_PORT as u16) | TAG_DUMMY;
                    self.push_op(op);
                }
                Err((e, b)) => self.outbound_refused(sa, NO_PORT, e, b),
            }
        }
        if let Some(n) = next_due {
            self.dummy_next = n;
        }
    }

    /// Takes a token from the ICMP bucket; false when the rate is exhausted.
    fn icmp_allowed(&mut self) -> bool {
        let now = self.now();
        self.icmp_bucket.take(now)
    }

    /// Takes a token from the ICMP bucket (counting `icmp_rate_limited`
    /// when it is empty) and grows `buf` to at least `len` bytes for the
    /// error built in place; false when either fails.
    fn icmp_budget(&mut self, buf: &mut PktBuf, len: usize) -> bool {
        if !self.icmp_allowed() {
            self.counters.icmp_rate_limited.add(1);
            return false;
        }
        buf.len() >= len || buf.append(len - buf.len())
    }

    /// An ICMP or ICMPv6 Echo Request (RFC 792, RFC 4443 §4.1) to one of
    /// the gateway's addresses, received on `port` (or decrypted from a
    /// tunnel): turned into its Echo Reply in place
    /// ([`icmp::echo_reply_in_place`], [`icmpv6::echo_reply_in_place`]),
    /// counted under `echo_replies` and sent as `path` says: routed back to
    /// its source ([`ErrorPath::Back`]), or into ESP back to the peer it
    /// came from ([`ErrorPath::Tunnel`]: the outbound SPD must PROTECT it
    /// with an SA to that peer, else `tunnel_error_dropped`). A router
    /// MUST answer (RFC 1812 §4.3.3.6, RFC 4443 §4.2) and MAY be told not
    /// to: `gateway.icmp_echo`. The buffer comes back, untouched, for the
    /// caller to drop as `to_us` when that is off, when it is not such a
    /// request (a fragment, IPv4 options or IPv6 extension headers, a bad
    /// checksum: see the builders), from a source no router forwards to or
    /// one of ours or a directed broadcast of one of our subnets
    /// ([`Tables::martian`]), or past the Echo
    /// Replies' own rate limit ([`ICMP_RATE`] per second, apart from the
    /// errors' so a ping flood cannot starve Path MTU Discovery; counted
    /// as `icmp_rate_limited`). Cold: off the
    /// forwarding path.
    #[cold]
    #[inline(never)]
    fn echo(&mut self, t: &Tables, port: usize, mut buf: PktBuf, path: ErrorPath) -> Option<PktBuf> {
        const IP: usize = ethernet::HEADER_LEN;
        if !self.conf.icmp_echo {
            return Some(buf);
        }
        let (src, dst, request) = {
            let ip = &buf.frame()[IP..];
            match ip.first().map(|b| b >> 4) {
                Some(4) if ip.len() >= ipv4::MIN_HEADER_LEN + icmp::HEADER_LEN => {
                    let a = |o: usize| IpAddr::V4(Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]));
                    (a(ipv4::SRC), a(ipv4::DST), ip[ipv4::PROTOCOL] == ipv4::PROTO_ICMP && ip[ipv4::MIN_HEADER_LEN] == icmp::TYPE_ECHO_REQUEST)
                }
                Some(6) if ip.len() >= ipv6::HEADER_LEN + icmpv6::HEADER_LEN => {
                    let a = |o: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&ip[o..o + 16]).unwrap_or([0; 16])));
                    (a(ipv6::SRC), a(ipv6::DST), ip[ipv6::NEXT_HEADER] == ipv6::NH_ICMPV6 && ip[ipv6::HEADER_LEN] == icmpv6::TYPE_ECHO_REQUEST)
                }
                _ => return Some(buf),
            }
        };
        if !request || !t.is_ours(dst) || t.martian(src, dst) {
            return Some(buf);
        }
        // Answered in the clear only back out of the port it came in on:
        // a reply routed out of another port would cross from one side to
        // the other with no SPD lookup (a spoofed source on the inside got
        // cleartext of its choosing onto the wan).
        if matches!(path, ErrorPath::Back) && !t.routes_back(port, src) {
            self.drop_buf(port, DropReason::ReversePath, buf);
            return None;
        }
        let now = self.now();
        if !self.echo_bucket.take(now) {
            self.counters.icmp_rate_limited.add(1);
            return Some(buf);
        }
        let ident = self.icmp_ident.wrapping_add(1);
        let replied = match dst {
            IpAddr::V4(_) => icmp::echo_reply_in_place(&mut buf.frame_mut()[IP..], ident).is_some(),
            IpAddr::V6(_) => icmpv6::echo_reply_in_place(&mut buf.frame_mut()[IP..]).is_some(),
        };
        if !replied {
            return Some(buf);
        }
        if dst.is_ipv4() {
            self.icmp_ident = ident;
        }
        self.counters.echo_replies.add(1);
        // The reply to a reassembled request may be too big for the port
        // it leaves by: an IPv4 reply (DF clear) is fragmented on transmit;
        // an IPv6 one the gateway, its source, cuts itself (RFC 8200 §4.5).
        if let (IpAddr::V6(_), ErrorPath::Back) = (src, path) {
            let mtu = t.routes.lookup(src).and_then(|(out, _)| t.ports.get(out)).map_or(u16::MAX, |p| p.mtu);
            if buf.len() - IP > mtu as usize {
                buf.outer_frag_mtu = mtu;
                self.fragment_outer(t, port, buf, src);
                return None;
            }
        }
        let protocol = if dst.is_ipv4() { ipv4::PROTO_ICMP } else { ipv6::NH_ICMPV6 };
        self.send_error(t, port, buf, dst, src, protocol, path);
        None
    }

    /// Whether a fragment to one of our addresses (`key`, whose protocol
    /// is the fragmented datagram's) is to be reassembled because it may
    /// be part of an Echo Request ([`Self::echo`]): ICMP over IPv4 or
    /// ICMPv6 over IPv6, with Echo Replies on and reassembly contexts
    /// configured. A request bigger than the link's MTU (`ping -s 2000`)
    /// then gets its reply, all of its data (RFC 1812 §4.3.3.6).
    fn echo_fragment(&self, t: &Tables, key: &FlowKey) -> bool {
        let icmp = match key.dst {
            IpAddr::V4(_) => key.protocol == ipv4::PROTO_ICMP,
            IpAddr::V6(_) => key.protocol == ipv6::NH_ICMPV6,
        };
        icmp && self.conf.icmp_echo && self.reasm.enabled() && t.is_ours(key.dst)
    }

    /// Whether an IPv4 fragment from a protected port (`key`: its
    /// addresses and protocol; ports only in a first fragment; `hl` its
    /// header length) is reassembled before the outbound SPD lookup
    /// (`reassembly.forwarded`; README, Forwarded fragments under port
    /// selectors): TCP or UDP through the gateway, between addresses some
    /// port-selecting IPv4 outbound entry may match
    /// ([`crate::policy::spd::Spd::ports_may_select_v4`]). The datagram's
    /// non-first fragments carry no ports (OPAQUE, RFC 4301 §7.1) and would
    /// meet the any-port entries, not the entry its first fragment matches;
    /// whole, the datagram is classified by its ports and every byte of it
    /// takes that entry's action (RFC 4301 §7: fragments of one datagram
    /// kept on one SA). Not with IPv4 options (`hl` > 20): the reassembled
    /// header would take headroom the outer headers need. Off the fast path: only
    /// fragments come here.
    fn port_selected_fragment(&self, t: &Tables, key: &FlowKey, hl: usize) -> bool {
        hl == ipv4::MIN_HEADER_LEN
            && (key.protocol == ipv4::PROTO_TCP || key.protocol == ipv4::PROTO_UDP)
            && self.reasm.forwarded()
            && !t.is_ours(key.dst)
            && t.spd_out.ports_may_select_v4(key)
    }

    /// The IPv4 packet in `buf` (received on `port`) cannot be forwarded
    /// as `report` says: counts it under `report`'s drop reason and turns
    /// the buffer into the ICMP error to its source, quoting its header and
    /// 8 bytes of payload, sent as `path` says ([`ErrorPath`]): for
    /// [`IcmpReport::TooBig`] (DF set; too big for its tunnel, or, bypassed
    /// or decapsulated, for its egress port) "fragmentation needed" (RFC
    /// 792 type 3 code 4, next-hop MTU per RFC 1191); for
    /// [`IcmpReport::TimeExceeded`] Time Exceeded (type 11 code 0, RFC 1812
    /// §5.3.1). No error about an ICMP error, a non-first fragment or a
    /// non-unicast source (RFC 1812 §4.3.2.7; the directed broadcast of
    /// one of our subnets included), none in the clear to a source not
    /// routed back through the port the packet came in on
    /// ([`Tables::routes_back`]), none without an address on
    /// the port it is sent from, none past the rate limit (counted under
    /// `icmp_rate_limited`).
    #[cold]
    #[inline(never)]
    fn icmp4_error(&mut self, t: &Tables, port: usize, mut buf: PktBuf, report: IcmpReport, path: ErrorPath) {
        self.counters.count_drop(port, report.reason());
        let (src, quoted) = {
            let Ok(ip) = ipv4::Ipv4Packet::new_checked(&buf.frame()[ethernet::HEADER_LEN..]) else {
                return self.recycle(buf);
            };
            let src = ip.src();
            let later_fragment = ip.flags_frag() & 0x1fff != 0;
            let icmp_error = ip.protocol() == ipv4::PROTO_ICMP && ip.payload().first().is_some_and(|&ty| icmp::is_error_type(ty));
            if later_fragment || icmp_error || src.is_multicast() || src.is_broadcast() || src.is_unspecified() || src.is_loopback() || t.is_our_broadcast(IpAddr::V4(src)) {
                return self.recycle(buf);
            }
            // In the clear only back out of the port the packet came in on
            // (as Echo Replies, [`Self::echo`]).
            if matches!(path, ErrorPath::Back) && !t.routes_back(port, IpAddr::V4(src)) {
                return self.recycle(buf);
            }
            (src, icmp::quoted_len(ip.header_len(), ip.total_len()))
        };
        let Some(&me) = t.ports.get(path.from(port)).and_then(|p| p.addresses.first()) else {
            return self.recycle(buf);
        };
        if !self.icmp_budget(&mut buf, ethernet::HEADER_LEN + icmp::ERROR_FRONT + quoted) {
            return self.recycle(buf);
        }
        self.icmp_ident = self.icmp_ident.wrapping_add(1);
        let pkt = &mut buf.frame_mut()[ethernet::HEADER_LEN..];
        let built = match report {
            IcmpReport::TooBig(mtu) => icmp::frag_needed_in_place(pkt, quoted, me, src, mtu.min(u16::MAX as usize) as u16, self.icmp_ident),
            IcmpReport::TimeExceeded => icmp::time_exceeded_in_place(pkt, quoted, me, src, self.icmp_ident),
            IcmpReport::ParamProblem { .. } => None,
        };
        let Some(n) = built else {
            return self.recycle(buf);
        };
        buf.trim_to(ethernet::HEADER_LEN + n);
        self.counters.icmp_sent.add(1);
        self.send_error(t, port, buf, IpAddr::V4(me), IpAddr::V4(src), ipv4::PROTO_ICMP, path)
    }

    /// The IPv6 packet in `buf` (received on `port`) cannot be forwarded as
    /// `report` says: counts it under `report`'s drop reason and turns the
    /// buffer into the ICMPv6 error to its source, quoting as much of the
    /// packet as fits in 1280 bytes, sent as `path` says ([`ErrorPath`]):
    /// for [`IcmpReport::TooBig`] (too big for its tunnel, or, bypassed or
    /// decapsulated, for its egress port) Packet Too Big (RFC 4443 §3.2:
    /// type 2, code 0, the MTU); for [`IcmpReport::TimeExceeded`] Time
    /// Exceeded (§3.3: type 3, code 0). None for a multicast, unspecified
    /// or loopback source, none about an ICMPv6 error (§2.4 (e)), none in
    /// the clear to a source not routed back through the port the packet
    /// came in on ([`Tables::routes_back`]), none
    /// without an IPv6 address on the port it is sent from, none past the
    /// rate limit shared with ICMPv4 (`icmp_rate_limited`).
    #[cold]
    #[inline(never)]
    fn icmp6_error(&mut self, t: &Tables, port: usize, mut buf: PktBuf, report: IcmpReport, path: ErrorPath) {
        self.counters.count_drop(port, report.reason());
        let (src, quoted) = {
            let Ok(ip) = ipv6::Ipv6Packet::new_checked(&buf.frame()[ethernet::HEADER_LEN..]) else {
                return self.recycle(buf);
            };
            let src = ip.src();
            let icmp_error = match ip.upper_layer() {
                Ok(u) => u.protocol == ipv6::NH_ICMPV6 && !u.is_later_fragment() && ip.bytes().get(u.offset).is_none_or(|&ty| icmpv6::is_error_type(ty)),
                Err(_) => true,
            };
            if icmp_error || ipv6::is_multicast(&src) || src.is_unspecified() || src.is_loopback() {
                return self.recycle(buf);
            }
            if matches!(path, ErrorPath::Back) && !t.routes_back(port, IpAddr::V6(src)) {
                return self.recycle(buf);
            }
            let quoted = icmpv6::quoted_len(ip.total_len());
            // Through a tunnel, small enough to fit a minimum-MTU path sealed.
            let quoted = if matches!(path, ErrorPath::Tunnel { .. }) { quoted.min(TUNNEL_ERROR_MAX_V6 - icmpv6::ERROR_FRONT) } else { quoted };
            (src, quoted)
        };
        let Some(&me) = t.ports.get(path.from(port)).and_then(|p| p.addresses6.first()) else {
            return self.recycle(buf);
        };
        if !self.icmp_budget(&mut buf, ethernet::HEADER_LEN + icmpv6::ERROR_FRONT + quoted) {
            return self.recycle(buf);
        }
        let pkt = &mut buf.frame_mut()[ethernet::HEADER_LEN..];
        let built = match report {
            IcmpReport::TooBig(mtu) => icmpv6::packet_too_big_in_place(pkt, quoted, &me, &src, mtu.min(u32::MAX as usize) as u32, icmp::ERROR_TTL),
            IcmpReport::TimeExceeded => icmpv6::time_exceeded_in_place(pkt, quoted, &me, &src, icmp::ERROR_TTL),
            IcmpReport::ParamProblem { code, pointer } => icmpv6::parameter_problem_in_place(pkt, quoted, &me, &src, code, pointer, icmp::ERROR_TTL),
        };
        let Some(n) = built else {
            return self.recycle(buf);
        };
        buf.trim_to(ethernet::HEADER_LEN + n);
        self.counters.icmp_sent.add(1);
        self.send_error(t, port, buf, IpAddr::V6(me), IpAddr::V6(src), ipv6::NH_ICMPV6, path)
    }

    /// An IPv6 packet for the gateway with an option it may not pass over
    /// (RFC 8200 §4.2, [`ipv6::check_options`]): dropped as `ipv6_option`,
    /// with an ICMPv6 Parameter Problem to its source when the option's
    /// action bits ask for one (`multicast`: the packet was sent to a
    /// group).
    #[cold]
    #[inline(never)]
    fn bad_ipv6_option(&mut self, t: &Tables, port: usize, buf: PktBuf, b: ipv6::BadOption, multicast: bool) {
        let report = match b.report {
            ipv6::OptionReport::Never => false,
            ipv6::OptionReport::Always => true,
            ipv6::OptionReport::UnlessMulticast => !multicast,
        };
        if report {
            self.icmp6_error(t, port, buf, IcmpReport::ParamProblem { code: b.code, pointer: b.pointer }, ErrorPath::Back)
        } else {
            self.drop_buf(port, DropReason::Ipv6Option, buf)
        }
    }

    /// Drops the packet in `buf` (received on `port`) for its TTL / hop
    /// limit of 1 or 0, which a router cannot forward, and sends its source
    /// an ICMP / ICMPv6 Time Exceeded as `path` says (RFC 1812 §5.3.1, RFC
    /// 4443 §3.3: what traceroute shows the gateway by).
    #[cold]
    #[inline(never)]
    fn time_exceeded(&mut self, t: &Tables, port: usize, buf: PktBuf, path: ErrorPath) {
        if is_ipv6(buf.frame()) {
            self.icmp6_error(t, port, buf, IcmpReport::TimeExceeded, path)
        } else {
            self.icmp4_error(t, port, buf, IcmpReport::TimeExceeded, path)
        }
    }

    /// Sends the ICMP error `buf` (`me` → `to`, protocol `protocol`) built
    /// about a packet received on `port`: routed to `to` ([`ErrorPath::Back`]),
    /// or through the outbound SPD like a packet from the protected side
    /// ([`ErrorPath::Tunnel`]): only a PROTECT policy whose SA goes to the
    /// peer the packet came from takes it, else it is dropped as
    /// `tunnel_error_dropped` (see [`Self::outbound`]).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn send_error(&mut self, t: &Tables, port: usize, buf: PktBuf, me: IpAddr, to: IpAddr, protocol: u8, path: ErrorPath) {
        match path {
            ErrorPath::Back => self.forward(t, port, buf, to),
            ErrorPath::Tunnel { peer, .. } => {
                let key = FlowKey { src: me, dst: to, protocol, ports: None };
                self.outbound(t, port, buf, key, icmp::ERROR_TTL, Origin::Built { peer })
            }
        }
    }

    /// Neighbor Discovery (ICMPv6 133..=137) received on `port`, the ICMPv6
    /// message at `icmp_off` of the IPv6 packet: a valid Neighbor
    /// Solicitation (RFC 4861 §7.1.1: hop limit 255, checksum, code 0,
    /// length ≥ 24, options well formed; from an unspecified source only to
    /// a solicited-node address and without a source link-layer option)
    /// for one of our IPv6 addresses on `port`, from a unicast MAC and not
    /// from one of our addresses, is answered in place with a Neighbor
    /// Advertisement (§7.2.4): to the solicitation's source with R, S and O
    /// set, or, for a duplicate address detection probe (unspecified
    /// source), to all-nodes (ff02::1) with R and O set; R because the
    /// gateway is a router (§4.4: a Linux host drops a cached route, and
    /// with it the path MTU, via a gateway it does not know as a router);
    /// hop limit 255, a target
    /// link-layer address option with the port's MAC; Ethernet destination
    /// = the source link-layer option, else the frame's source. Counted
    /// under `nd_replies`. Everything else is dropped as `nd_ignored`.
    ///
    /// Learning (RFC 4861 §7.2.3, §7.2.5; README, Neighbours): a valid
    /// solicitation from a unicast source with a Source Link-Layer Address
    /// option reports (source, option); a valid advertisement to us with S
    /// or O set reports (target, its Target Link-Layer Address option, else
    /// the frame's source for a solicited one) and is consumed as
    /// `neigh_reply`; both only when [`resolve::learnable`], and an
    /// advertisement without O only when no different address of the
    /// target is cached (§7.2.5).
    #[cold]
    #[inline(never)]
    fn nd(&mut self, t: &Tables, port: usize, mut buf: PktBuf, icmp_off: usize) {
        let mac = t.ports[port].mac;
        let mut learn = None;
        let answer = {
            let f = buf.frame();
            let eth_src: [u8; 6] = f[ethernet::SRC..ethernet::SRC + 6].try_into().unwrap_or([0; 6]);
            let Ok(ip) = ipv6::Ipv6Packet::new_checked(&f[ethernet::HEADER_LEN..]) else {
                return self.drop_buf(port, DropReason::Malformed, buf);
            };
            let msg = ip.bytes().get(icmp_off..).unwrap_or(&[]);
            let (src, dst) = (ip.src(), ip.dst());
            if msg.first() == Some(&icmpv6::TYPE_NEIGHBOR_ADVERTISEMENT) {
                let taken = icmpv6::NeighborAdvertisement::new_checked(msg).ok().and_then(|na| {
                    let flags = na.flags();
                    let target = IpAddr::V6(na.target());
                    let valid = ip.hop_limit() == icmpv6::ND_HOP_LIMIT
                        && ipv6::upper_layer_checksum_ok(&src, &dst, ipv6::NH_ICMPV6, msg)
                        // §7.1.2: S set only in answers to a unicast address.
                        && !(ipv6::is_multicast(&dst) && flags & icmpv6::NA_FLAG_SOLICITED != 0)
                        && (ipv6::is_multicast(&dst) || t.is_local(port, IpAddr::V6(dst)))
                        && flags & (icmpv6::NA_FLAG_SOLICITED | icmpv6::NA_FLAG_OVERRIDE) != 0;
                    let lladdr = na.target_lladdr().or((flags & icmpv6::NA_FLAG_SOLICITED != 0).then_some(eth_src))?;
                    // §7.2.5: without O an advertisement does not replace
                    // a different cached address (of this port or static).
                    let cached = self.neigh.get(target).filter(|e| e.learned.is_none_or(|(p, _)| p == port)).map(|e| e.mac);
                    let may_override = flags & icmpv6::NA_FLAG_OVERRIDE != 0 || cached.is_none_or(|m| m == lladdr);
                    (valid && may_override && resolve::learnable(t, port, target, lladdr, self.resolving(target, port))).then_some((target, lladdr))
                });
                let Some((target, lladdr)) = taken else {
                    return self.drop_buf(port, DropReason::NdIgnored, buf);
                };
                self.report_neighbour(t, target, lladdr, port);
                return self.drop_buf(port, DropReason::NeighReply, buf);
            }
            match icmpv6::NeighborSolicitation::new_checked(msg) {
                Ok(ns)
                    if ip.hop_limit() == icmpv6::ND_HOP_LIMIT
                        && ipv6::upper_layer_checksum_ok(&src, &dst, ipv6::NH_ICMPV6, msg)
                        && t.is_local(port, IpAddr::V6(ns.target()))
                        && !t.is_local(port, IpAddr::V6(src))
                        // A multicast source is never valid (RFC 4291 §2.7).
                        && !ipv6::is_multicast(&src)
                        && ethernet::is_station(&eth_src)
                        && eth_src != mac =>
                {
                    let target = ns.target();
                    if src.is_unspecified() {
                        // Duplicate address detection (RFC 4861 §7.1.1, §7.2.4).
                        if dst != icmpv6::solicited_node(&target) || ns.source_lladdr().is_some() {
                            None
                        } else {
                            let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
                            Some((target, all_nodes, icmpv6::multicast_mac(&all_nodes), icmpv6::NA_FLAG_ROUTER | icmpv6::NA_FLAG_OVERRIDE))
                        }
                    } else if (dst != target && dst != icmpv6::solicited_node(&target))
                        || ns.source_lladdr().is_some_and(|m| !ethernet::is_station(&m) || m == mac)
                    {
                        // To the target's solicited-node group or the
                        // target itself only (the groups a host joins for
                        // it, §7.2.1); and never answered to a group, the
                        // zero or our own MAC named as the sender's link-
                        // layer address (a reflection; such a sender is not
                        // learned either).
                        None
                    } else {
                        // §7.2.3: the source link-layer option teaches us the sender.
                        learn = ns.source_lladdr().filter(|&m| resolve::learnable(t, port, IpAddr::V6(src), m, false)).map(|m| (IpAddr::V6(src), m));
                        let to_mac = ns.source_lladdr().unwrap_or(eth_src);
                        Some((target, src, to_mac, icmpv6::NA_FLAG_ROUTER | icmpv6::NA_FLAG_SOLICITED | icmpv6::NA_FLAG_OVERRIDE))
                    }
                }
                _ => None,
            }
        };
        let Some((target, to, to_mac, flags)) = answer else {
            return self.drop_buf(port, DropReason::NdIgnored, buf);
        };
        if let Some((ip, m)) = learn {
            self.report_neighbour(t, ip, m, port);
        }
        const IP: usize = ethernet::HEADER_LEN;
        const MSG: usize = IP + ipv6::HEADER_LEN;
        let len = MSG + icmpv6::NA_LEN;
        if buf.len() < len && !buf.append(len - buf.len()) {
            return self.drop_buf(port, DropReason::NoRoom, buf);
        }
        buf.trim_to(len);
        let f = buf.frame_mut();
        if icmpv6::write_neighbor_advertisement(&mut f[MSG..], &target, &to, flags, &target, &mac).is_none() {
            return self.drop_buf(port, DropReason::NoRoom, buf);
        }
        ipv6::write_header(&mut f[IP..MSG], 0, 0, icmpv6::NA_LEN as u16, ipv6::NH_ICMPV6, icmpv6::ND_HOP_LIMIT, &target, &to);
        ethernet::write_header(f, &to_mac, &mac, ethernet::ETHERTYPE_IPV6);
        self.counters.nd_replies.add(1);
        self.tx[port].push(buf);
    }

    fn read_backend_stats(&mut self) {
        for (p, pc) in self.ports.iter().zip(&self.counters.ports) {
            pc.rx_dropped_backend.set(p.stats().rx_dropped);
        }
    }

    fn crypto(&mut self, t: &Tables) {
        // A synchronous device runs the burst where it lies (no moves into
        // the queue pair's ring and back). `done` is empty between polls
        // and has the capacity of `ops`: the swap leaves `ops` ready for
        // what `finish` queues (an inner packet sealed again, an error into
        // a tunnel), run by the next poll as before.
        if !self.ops.is_empty() && self.qp.process_sync(&mut self.ops) {
            let n = self.ops.len() as u64;
            self.counters.crypto_enqueued.add(n);
            self.counters.crypto_dequeued.add(n);
            debug_assert!(self.done.is_empty(), "completions left from the last poll");
            std::mem::swap(&mut self.ops, &mut self.done);
        } else {
            if !self.ops.is_empty() {
                let offered = self.ops.len();
                let taken = self.qp.enqueue_burst(&mut self.ops).min(offered);
                self.counters.crypto_enqueued.add(taken as u64);
                if taken < offered {
                    self.counters.crypto_refused.add((offered - taken) as u64);
                }
            }
            let cap = self.done.capacity();
            let got = self.qp.dequeue_burst(&mut self.done, cap);
            if got > 0 {
                self.counters.crypto_dequeued.add(got as u64);
            }
        }
        if !self.done.is_empty() {
            let mut done = std::mem::take(&mut self.done);
            for op in done.drain(..) {
                self.finished += 1;
                self.finish(t, op);
            }
            self.done = done;
        }
    }

    fn flush(&mut self) {
        for p in 0..self.ports.len() {
            let mut q = std::mem::take(&mut self.tx[p]);
            if !q.is_empty() {
                let sent = self.ports[p].tx_burst(&q).min(q.len());
                // Counted once per burst, not per packet.
                let pc = &self.counters.ports[p];
                pc.tx_packets.add(sent as u64);
                pc.tx_bytes.add(q[..sent].iter().map(|b| b.len() as u64).sum());
                // Each frame the tx ring had no room for is a drop of the
                // port it was received on (as every other reason).
                for b in &q[sent..] {
                    self.counters.count_drop(b.port as usize, DropReason::TxFull);
                }
                for b in q.drain(..) {
                    self.recycle(b);
                }
            }
            self.tx[p] = q;
            self.ports[p].poll();
        }
    }

    /// Returns a buffer to its home worker's pool.
    #[inline]
    fn recycle(&mut self, buf: PktBuf) {
        let home = buf.home as usize;
        if home != self.conf.id {
            if let Some(r) = self.handoff.returns.get(home) {
                match r.push(buf) {
                    Ok(()) => return,
                    // Home's return queue full: keep it (capacity covers every buffer).
                    Err(b) => return self.pool.push(b),
                }
            }
        }
        self.pool.push(buf);
    }

    /// Returns the buffers the reassembler gave up to their pools.
    fn reasm_spent(&mut self) {
        while let Some(b) = self.reasm.take_spent() {
            self.recycle(b);
        }
    }

    /// An outer IPv4 or IPv6 fragment addressed to the gateway (ESP, ESP
    /// in UDP, or ICMP that may be an Echo Request), or a forwarded IPv4
    /// TCP/UDP fragment from a protected port under port selectors
    /// ([`Self::port_selected_fragment`]): into the reassembler;
    /// a completed datagram goes on through [`Self::inbound`], or
    /// [`Self::outbound`] on a protected port, as if received whole (it is
    /// counted once under rx by its fragments).
    fn reassemble(&mut self, t: &Tables, port: usize, buf: PktBuf) {
        let now = self.now();
        let done = self.reasm.push(buf, now, &self.counters);
        self.reasm_spent();
        let Some(buf) = done else { return };
        let inner = &buf.frame()[ethernet::HEADER_LEN..];
        let parsed = if is_ipv6(buf.frame()) {
            ipv6::Ipv6Packet::new_checked(inner).and_then(|ip| {
                let up = ip.upper_layer()?;
                let key = FlowKey { src: IpAddr::V6(ip.src()), dst: IpAddr::V6(ip.dst()), protocol: up.protocol, ports: ip.ports(&up) };
                Ok((key, ip.hop_limit(), up.offset, up.is_fragment()))
            })
        } else {
            ipv4::Ipv4Packet::new_checked(inner).map(|ip| {
                let key = FlowKey { src: IpAddr::V4(ip.src()), dst: IpAddr::V4(ip.dst()), protocol: ip.protocol(), ports: ip.ports() };
                (key, ip.ttl(), ip.header_len(), false)
            })
        };
        let Ok((key, ttl, hl, frag)) = parsed else {
            return self.drop_buf(port, DropReason::Malformed, buf);
        };
        // From a protected port, Echo Requests to us
        // ([`Self::echo_fragment`]) and, with `reassembly.forwarded`,
        // TCP/UDP datagrams through us ([`Self::port_selected_fragment`]):
        // both go where that port's whole packets go.
        if t.ports.get(port).is_some_and(|p| p.protected) {
            return self.outbound(t, port, buf, key, ttl, Origin::Protected);
        }
        // `frag`: a second Fragment header inside the reassembled IPv6
        // datagram (nested fragmentation) goes round once more, bounded by
        // the extension-header limit of the walk.
        self.inbound(t, port, buf, key, ttl, hl, frag)
    }

    /// An outbound packet (or dummy) ESP refused to prepare: counted as the
    /// SA's error and dropped by reason; a spent sequence counter also
    /// hard-expires the SA (RFC 4303 §3.3.3: never cycle).
    fn outbound_refused(&mut self, sa: &OutboundSa, port: usize, e: crate::esp::EspError, buf: PktBuf) {
        sa.life.counters.errors.add(1);
        if e == crate::esp::EspError::SeqExhausted {
            sa.life.raise_hard(crate::esp::lifetime::Expiry::Sequence);
        }
        self.drop_buf(port, e.into(), buf)
    }

    #[inline]
    fn drop_buf(&mut self, port: usize, reason: DropReason, buf: PktBuf) {
        self.counters.count_drop(port, reason);
        self.recycle(buf);
    }

    /// ESP from `src` with SPI `spi` for which there is no SA: dropped as
    /// `no_sa`, the SPI and source noted in [`WorkerCounters::last_no_sa`]
    /// for the control thread's warning.
    #[cold]
    #[inline(never)]
    fn no_sa(&mut self, port: usize, spi: u32, src: IpAddr, buf: PktBuf) {
        let v4 = match src {
            IpAddr::V4(a) => u32::from(a),
            IpAddr::V6(_) => 0,
        };
        self.counters.last_no_sa.set(((spi as u64) << 32) | v4 as u64);
        self.counters.esp_no_sa.add(1);
        self.drop_buf(port, DropReason::NoSa, buf)
    }

    /// Sends a packet for SA work to the SA's owner, or processes it here.
    #[inline]
    fn hand_to_owner(&mut self, t: &Tables, owner: usize, port: usize, buf: PktBuf, tag: u64) {
        if owner == self.conf.id {
            return self.owned(t, buf, tag);
        }
        let Some(Some(ring)) = self.handoff.to.get(owner) else {
            return self.drop_buf(port, DropReason::NotOwner, buf);
        };
        match ring.push(Handed { buf, tag }) {
            Ok(()) => self.counters.handoff_out.add(1),
            Err(h) => self.drop_buf(port, DropReason::HandoffFull, h.buf),
        }
    }

    /// ESP prepare for a packet whose SA this worker owns.
    fn owned(&mut self, t: &Tables, buf: PktBuf, tag_: u64) {
        let (is_in, r, aux, port) = untag(tag_);
        if !is_in {
            let Some((slot, sa)) = out_sa(t, r) else {
                return self.drop_buf(port, DropReason::NoSa, buf);
            };
            return self.prepare_outbound(sa, slot, r, port, buf);
        }
        self.prepare_inbound(t, r, aux as usize, port, buf)
    }

    /// ESP prepare for a packet of the inbound SA `r` (slot and id bits,
    /// [`sa_ref`]) that this worker owns, received on `port`, its ESP
    /// header `esp_off` bytes into the frame.
    #[inline]
    fn prepare_inbound(&mut self, t: &Tables, r: usize, esp_off: usize, port: usize, buf: PktBuf) {
        let Some((_, e)) = in_sa(t, r) else {
            return self.drop_buf(port, DropReason::NoSa, buf);
        };
        self.prepare_inbound_sa(e, r, esp_off, port, buf)
    }

    /// [`Self::prepare_inbound`] once `in_sa(t, r)` has found the SA's
    /// entry `e` (the inbound fast path looks it up itself); its slot is
    /// `r`'s slot bits.
    #[inline]
    fn prepare_inbound_sa(&mut self, e: &crate::policy::sad::InboundEntry, r: usize, esp_off: usize, port: usize, buf: PktBuf) {
        let i = r & SLOT_MASK;
        if e.sa.life.expired() {
            e.sa.life.counters.errors.add(1);
            return self.drop_buf(port, DropReason::SaExpired, buf);
        }
        let Some(st) = self.in_state.get(i) else {
            return self.drop_buf(port, DropReason::NotOwner, buf);
        };
        // The frame still starts with Ethernet + the outer IPv4 or IPv6 header.
        let outer_tos = ip_tos(buf.frame());
        match inbound::prepare_cached(&e.sa, st, buf, esp_off, &mut self.sessions) {
            Ok(mut op) => {
                op.user[1] = tag(true, r, outer_tos as usize, port as u16);
                self.push_op(op);
            }
            Err((err, b)) => {
                e.sa.life.counters.errors.add(1);
                if err == crate::esp::EspError::Replay {
                    self.note_replay(e.sa.spi, &b, esp_off);
                }
                self.drop_buf(port, err.into(), b)
            }
        }
    }

    /// Notes SPI and sequence number (low 32 bits) of an ESP packet of
    /// `buf` at `esp_off` refused as a replay before decryption, in
    /// [`WorkerCounters::last_replay`], for the control thread's warning.
    #[cold]
    #[inline(never)]
    fn note_replay(&self, spi: u32, buf: &PktBuf, esp_off: usize) {
        let seq = buf.frame().get(esp_off + 4..esp_off + 8).map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        self.counters.last_replay.set(((spi as u64) << 32) | seq as u64);
    }

    /// ESP prepare for a packet of outbound SA `sa` (in SAD slot `slot`,
    /// referred to as `r` in tags) that this worker owns. A packet whose
    /// outer packet is to be fragmented ([`PktBuf::outer_frag_mtu`]) gets
    /// an outer IPv4 header with DF clear whatever `sa.df` says
    /// ([`outbound::prepare_with_ident`]); an outer IPv4 header with DF
    /// clear takes the worker's next identification
    /// ([`OuterIdent::take`]).
    #[inline]
    fn prepare_outbound(&mut self, sa: &OutboundSa, slot: usize, r: usize, port: usize, buf: PktBuf) {
        let Some(st) = self.out_state.get_mut(slot) else {
            return self.drop_buf(port, DropReason::NotOwner, buf);
        };
        let inner_len = buf.len() - ethernet::HEADER_LEN;
        // Lifetime (RFC 4301 §4.4.2.1): counted before the packet takes
        // a sequence number, so a hard limit of N sends exactly N.
        if !st.usage.admit(&sa.life, inner_len as u64) {
            sa.life.counters.errors.add(1);
            return self.drop_buf(port, DropReason::SaExpired, buf);
        }
        let ident = &mut self.outer4_ident;
        let prepared = match self.fast_sa.get(slot).and_then(|f| f.plan_of(sa)) {
            Some(plan) => outbound::prepare_planned(sa, plan, st, buf, &mut self.sessions, |_| ident.take()),
            None => outbound::prepare_with_ident(sa, st, buf, &mut self.sessions, |_| ident.take()),
        };
        match prepared {
            Ok(mut op) => {
                spent_if_last(sa, st);
                op.user[1] = tag(false, r, inner_len, port as u16);
                self.push_op(op);
            }
            Err((e, b)) => self.outbound_refused(sa, port, e, b),
        }
    }

    fn classify(&mut self, t: &Tables, mut buf: PktBuf) {
        let port = buf.port as usize;
        let Some(pc) = self.counters.ports.get(port) else {
            return self.drop_buf(0, DropReason::Malformed, buf);
        };
        pc.rx_packets.add(1);
        pc.rx_bytes.add(buf.len() as u64);
        let Some(pinfo) = t.ports.get(port) else {
            return self.drop_buf(port, DropReason::Malformed, buf);
        };
        let Ok(eth) = ethernet::EthernetFrame::new_checked(buf.frame()) else {
            return self.drop_buf(port, DropReason::Malformed, buf);
        };
        // A group address is never a source (IEEE 802 §8.2).
        if eth.src()[0] & 1 != 0 {
            return self.drop_buf(port, DropReason::Malformed, buf);
        }
        match eth.ethertype() {
            ethernet::ETHERTYPE_ARP => self.arp(t, port, eth.dst(), buf),
            ethernet::ETHERTYPE_IPV4 => {
                if eth.dst() != pinfo.mac {
                    return self.drop_buf(port, DropReason::NotForUs, buf);
                }
                let Ok(ip) = ipv4::Ipv4Packet::new_checked(eth.payload()) else {
                    return self.drop_buf(port, DropReason::Malformed, buf);
                };
                // Source routed: dropped, to us or through us (RFC 7126 §4.3.3).
                if ip.header_len() > ipv4::MIN_HEADER_LEN && ip.source_routed() {
                    return self.drop_buf(port, DropReason::SourceRoute, buf);
                }
                let key = FlowKey { src: IpAddr::V4(ip.src()), dst: IpAddr::V4(ip.dst()), protocol: ip.protocol(), ports: ip.ports() };
                let (ttl, hl, frag, total) = (ip.ttl(), ip.header_len(), ip.is_fragment(), ip.total_len());
                // Ethernet padding after the IP packet is not part of it.
                buf.trim_to(ethernet::HEADER_LEN + total);
                if pinfo.protected {
                    if frag && (self.echo_fragment(t, &key) || self.port_selected_fragment(t, &key, hl)) {
                        return self.reassemble(t, port, buf);
                    }
                    self.outbound(t, port, buf, key, ttl, Origin::Protected)
                } else {
                    self.inbound(t, port, buf, key, ttl, hl, frag)
                }
            }
            ethernet::ETHERTYPE_IPV6 => {
                // IPv6 multicast frames (33:33:…) are taken for Neighbor
                // Discovery only (solicitations go to solicited-node groups).
                let dst_mac = eth.dst();
                let mcast_mac = dst_mac[..2] == [0x33, 0x33];
                if dst_mac != pinfo.mac && !mcast_mac {
                    return self.drop_buf(port, DropReason::NotForUs, buf);
                }
                let Ok(ip) = ipv6::Ipv6Packet::new_checked(eth.payload()) else {
                    return self.drop_buf(port, DropReason::Malformed, buf);
                };
                let Ok(up) = ip.upper_layer() else {
                    return self.drop_buf(port, DropReason::Malformed, buf);
                };
                let dst = ip.dst();
                // To us with segments left in a Routing header: we would be a
                // hop of its route, and process no routing type (RFC 8200
                // §4.4, RFC 5095). Others' Routing headers are not ours to read.
                if up.routing_left && t.is_ours(IpAddr::V6(dst)) {
                    return self.drop_buf(port, DropReason::SourceRoute, buf);
                }
                let key = FlowKey { src: IpAddr::V6(ip.src()), dst: IpAddr::V6(dst), protocol: up.protocol, ports: ip.ports(&up) };
                let (hops, total) = (ip.hop_limit(), ip.total_len());
                let multicast = ipv6::is_multicast(&dst) || mcast_mac;
                // Options are read by the packet's destination only (a
                // router passes others' over, RFC 8200 §4): ours, or a
                // group (the ND the gateway takes).
                let bad_option = up.bad_option.filter(|_| multicast || t.is_ours(IpAddr::V6(dst)));
                let nd = up.protocol == ipv6::NH_ICMPV6
                    && !up.is_later_fragment()
                    && ip.bytes().get(up.offset).is_some_and(|&ty| icmpv6::is_nd_type(ty))
                    && (multicast || t.is_local(port, key.dst));
                let nd_fragment = up.fragment.is_some();
                buf.trim_to(ethernet::HEADER_LEN + total);
                if let Some(b) = bad_option {
                    return self.bad_ipv6_option(t, port, buf, b, multicast);
                }
                if nd {
                    // Neighbor Discovery in a packet with a Fragment
                    // header, even an atomic one, is ignored (RFC 6980 §5):
                    // an attacker's way round ND's checks.
                    if nd_fragment {
                        return self.drop_buf(port, DropReason::NdIgnored, buf);
                    }
                    return self.nd(t, port, buf, up.offset);
                }
                if multicast {
                    // The gateway forwards unicast only.
                    return self.drop_buf(port, DropReason::NotForUs, buf);
                }
                if pinfo.protected {
                    if up.is_fragment() && self.echo_fragment(t, &key) {
                        return self.reassemble(t, port, buf);
                    }
                    self.outbound(t, port, buf, key, hops, Origin::Protected)
                } else {
                    self.inbound(t, port, buf, key, hops, up.offset, up.is_fragment())
                }
            }
            _ => self.drop_buf(port, DropReason::UnsupportedEthertype, buf),
        }
    }

    /// ARP received on `port` (RFC 826). A request for one of our
    /// addresses on `port` from a unicast sender that does not claim one of
    /// our addresses is answered in place (`arp_replies`). Learning (RFC
    /// 826's merge, restricted; README, Neighbours): the sender of such a
    /// request, and of a reply to one of our addresses on `port`, is
    /// reported when [`resolve::learnable`]; a reply is then consumed as
    /// `neigh_reply`. Everything else: `arp_ignored`. `eth_dst` is the
    /// frame's Ethernet destination. Kept out of line (as `nd`): ARP is
    /// rare next to IP, and inlined into the poll loop it slowed the IP
    /// path (pipeline bench `outbound_ring/512`: 14.6 µs a burst inlined,
    /// 12.3 µs out of line, medians of 4 interleaved runs).
    #[cold]
    #[inline(never)]
    fn arp(&mut self, t: &Tables, port: usize, eth_dst: [u8; 6], mut buf: PktBuf) {
        let mac = t.ports[port].mac;
        let Ok(a) = arp::ArpPacket::new_checked(&buf.frame()[ethernet::HEADER_LEN..]) else {
            return self.drop_buf(port, DropReason::Malformed, buf);
        };
        let (op, sha, spa, tpa) = (a.operation(), a.sender_mac(), a.sender_ip(), a.target_ip());
        // Broadcast or to our MAC: a frame for another station is not ours
        // to learn from or answer.
        if eth_dst != mac && eth_dst != [0xff; 6] {
            return self.drop_buf(port, DropReason::NotForUs, buf);
        }
        let to_us = t.is_local(port, IpAddr::V4(tpa));
        let resolving = op == arp::OP_REPLY && self.resolving(IpAddr::V4(spa), port);
        // Our requests from a port without an IPv4 address say 0.0.0.0.
        let asked_from_none = resolving && tpa.is_unspecified() && t.ports[port].addresses.is_empty();
        let learn = (to_us || asked_from_none) && (op == arp::OP_REQUEST || op == arp::OP_REPLY) && resolve::learnable(t, port, IpAddr::V4(spa), sha, resolving);
        if learn {
            self.report_neighbour(t, IpAddr::V4(spa), sha, port);
        }
        // A request for one of our addresses from a unicast sender that
        // does not claim one of our addresses itself.
        let answer = op == arp::OP_REQUEST && to_us && ethernet::is_station(&sha) && !t.is_local(port, IpAddr::V4(spa));
        if !answer {
            let reason = if learn && op == arp::OP_REPLY { DropReason::NeighReply } else { DropReason::ArpIgnored };
            return self.drop_buf(port, reason, buf);
        }
        let (asker, ip) = (sha, tpa);
        buf.trim_to(ethernet::HEADER_LEN + arp::LEN);
        let f = buf.frame_mut();
        arp::make_reply_in_place(&mut f[ethernet::HEADER_LEN..], &mac, ip);
        ethernet::write_header(f, &asker, &mac, ethernet::ETHERTYPE_ARP);
        self.counters.arp_replies.add(1);
        self.tx[port].push(buf);
    }

    /// Plaintext (IPv4 or IPv6) from a protected port, or from where
    /// `origin` says: SPD → PROTECT / BYPASS / DISCARD.
    fn outbound(&mut self, t: &Tables, port: usize, mut buf: PktBuf, key: FlowKey, ttl: u8, origin: Origin) {
        // To any of our addresses, this port's or another's: never forwarded
        // (a router answers for all of its addresses, RFC 1812 §4.3.3.6).
        if t.is_ours(key.dst) {
            let Some(buf) = self.echo(t, port, buf, ErrorPath::Back) else { return };
            return self.drop_buf(port, DropReason::ToUs, buf);
        }
        // A packet the gateway built is from its own address (so not
        // `martian` for being ours).
        let built = matches!(origin, Origin::Built { .. });
        let martian = match built {
            false => t.martian(key.src, key.dst),
            true => policy::unforwardable(key.src) || policy::unforwardable(key.dst),
        };
        if martian {
            return self.drop_buf(port, DropReason::Martian, buf);
        }
        let found = t.spd_out.lookup(&key);
        if built && !matches!(found, Some(SpdAction::Protect(_))) {
            return self.drop_buf(port, DropReason::TunnelErrorDropped, buf);
        }
        let action = match found {
            None => return self.drop_buf(port, DropReason::NoPolicy, buf),
            Some(SpdAction::Discard) => return self.drop_buf(port, DropReason::PolicyDiscard, buf),
            Some(a) => a,
        };
        // The flow's next packets skip what was decided up to here
        // (`flow`); a packet the gateway built, or decrypted, is no flow
        // of the protected port's.
        if origin == Origin::Protected {
            let slot = match action {
                SpdAction::Protect(slot) => Some(slot),
                _ => None,
            };
            self.flows.learn(t.version, port, &key, slot);
        }
        // Where an ICMP error about it goes: back to its source, or for a
        // decrypted packet into the tunnel it came out of.
        let (path, decapsulated) = match origin {
            Origin::Decapsulated { peer } => (ErrorPath::Tunnel { from: port, peer }, Some(peer)),
            _ => (ErrorPath::Back, None),
        };
        // Forwarding as a router: TTL / hop limit ≤ 1 cannot be forwarded
        // (its source hears so); else decrement once.
        if ttl <= 1 {
            return self.time_exceeded(t, port, buf, path);
        }
        let SpdAction::Protect(slot) = action else {
            return self.forward_checked(t, port, buf, key.dst, decapsulated);
        };
        let Some(sa) = t.sad.outbound_at(slot) else {
            return self.drop_buf(port, DropReason::NoSa, buf);
        };
        let i = sa_ref(slot, sa.id);
        // Too big for the egress MTU of the route to the tunnel end (transport
        // mode: to the packet's own destination) once encapsulated (checked
        // before the decrement, so an error quotes the header as the host
        // sent it):
        // * IPv6 inner: ICMPv6 Packet Too Big (RFC 4443 §3.2; IPv6 is never
        //   fragmented on the way, RFC 8200 §5), never advertising less
        //   than 1280 (RFC 8201 §4). A tunnel MTU below 1280 counts as
        //   1280 (RFC 4213 §3.2, RFC 2473 §6.7): a packet of at most 1280
        //   bytes that does not fit is encapsulated and its outer packet
        //   fragmented: an IPv4 outer header goes with DF clear (whatever
        //   `df` says but `set`), fragmented here if it exceeds the port's
        //   MTU, else by a router of the path; an IPv6 outer header is
        //   fragmented here to this MTU (RFC 2473 §7.1, `fragment_outer`).
        //   With `df = "set"` over IPv4, or in transport mode, it is
        //   dropped as `mtu_exceeded`;
        // * IPv4 inner with DF: ICMP "fragmentation needed" (RFC 1191);
        // * IPv4 inner without DF into an IPv6 outer header: the inner
        //   packet is fragmented before encapsulation (RFC 4459 §3), each
        //   fragment its own ESP packet (the IPv6 outer header is never
        //   fragmented);
        //   The same into an IPv4 outer header with `df = "set"` (its DF
        //   forbids fragmenting the ESP packet);
        // * IPv4 inner without DF into an IPv4 outer header (or transport
        //   mode): the ESP packet is fragmented after encryption (`forward`).
        // The MTU in the errors is the largest inner packet that fits.
        let inner_v6 = key.dst.is_ipv6();
        let via = if sa.transport { key.dst } else { sa.tunnel_dst };
        if matches!(origin, Origin::Built { peer } if peer != via) {
            return self.drop_buf(port, DropReason::TunnelErrorDropped, buf);
        }
        // The egress port of the tunnel end, remembered for the tables
        // snapshot it was looked up in (a run of one tunnel routes once).
        let egress = match self.via_memo {
            Some((v, d, out)) if v == t.version && d == via => out,
            _ => {
                let out = t.routes.lookup(via).map(|(out, _)| out);
                self.via_memo = Some((t.version, via, out));
                out
            }
        };
        let mut egress_mtu = egress.and_then(|out| t.ports.get(out)).map(|p| p.mtu as usize);
        // The headers kept in front count in transport mode only.
        let hl = if sa.transport { transport_kept_len(&buf) } else { 0 };
        // A path MTU learned from ICMP (RFC 4301 §8.2.1), when lower: one
        // relaxed load while none is known.
        if let Some(p) = sa.path_mtu.get(|| self.now_ms()) {
            let p = p as usize;
            egress_mtu = Some(egress_mtu.map_or(p, |m| m.min(p)));
        }
        // The length check outside a closure: inside `Option::filter`'s it
        // was a call of its own per packet (pipeline bench, callgrind).
        let too_big = match egress_mtu {
            Some(m) => outbound::encapsulated_len(sa, hl, buf.len() - ethernet::HEADER_LEN) > m,
            None => false,
        };
        if let Some(mtu) = egress_mtu.filter(|_| too_big) {
            let fits = outbound::max_inner_len(sa, hl, mtu);
            if inner_v6 {
                if fits >= ipv6::MIN_MTU || buf.len() - ethernet::HEADER_LEN > ipv6::MIN_MTU {
                    return self.icmp6_error(t, port, buf, IcmpReport::TooBig(fits.max(ipv6::MIN_MTU)), path);
                }
                if sa.transport || (sa.tunnel_dst.is_ipv4() && sa.df == crate::esp::DfMode::Set) {
                    return self.drop_buf(port, DropReason::MtuExceeded, buf);
                }
                // Travels with the buffer (handoff, crypto) to
                // `prepare_outbound` and `fragment_outer`.
                buf.outer_frag_mtu = mtu.min(u16::MAX as usize) as u16;
            } else {
                if ipv4_df(&buf) {
                    return self.icmp4_error(t, port, buf, IcmpReport::TooBig(fits), path);
                }
                // An outer header that may not be fragmented (IPv6, or IPv4
                // with `df = "set"`): the inner packet is, before encryption.
                // So is one whose ESP packet would not fit a packet buffer
                // (an interface MTU above the port's `mtu` lets such frames
                // in): it could not be encrypted whole (`no_room`).
                let no_room = outbound::encapsulated_len(sa, hl, buf.len() - ethernet::HEADER_LEN) + ethernet::HEADER_LEN > crate::io::BUF_SIZE - crate::io::HEADROOM;
                if !sa.transport && (sa.tunnel_dst.is_ipv6() || sa.df == crate::esp::DfMode::Set || no_room) {
                    if !built {
                        decrement_hops(&mut buf);
                    }
                    let owner = sa.owner;
                    return self.fragment(t, port, FragSink::Sa { sa: i, owner }, buf, fits);
                }
            }
        }
        // A packet the gateway built (an ICMP error, an Echo Reply) leaves
        // with the TTL it was given: it is not forwarded.
        if !built {
            decrement_hops(&mut buf);
        }
        let owner = sa.owner;
        if owner == self.conf.id {
            // An error built while crypto completions are drained: the ops
            // burst may be full (ops the queue pair refused), and it never
            // grows past its capacity.
            if built && self.ops.len() >= self.ops.capacity() {
                return self.drop_buf(port, DropReason::TunnelErrorDropped, buf);
            }
            // Ours: prepared here, without the tag's round trip to the SAD.
            return self.prepare_outbound(sa, slot, i, port, buf);
        }
        self.hand_to_owner(t, owner, port, buf, tag(false, i, 0, port as u16))
    }

    /// A frame from an unprotected port: ESP to us, or UDP to us on a NAT-T
    /// port (RFC 3948) → SAD → decrypt; anything else → inbound SPD (BYPASS
    /// or drop). IPv4 or IPv6: `hl` is the offset of the upper-layer header
    /// in the IP packet (the IPv4 header length, or past the IPv6 extension
    /// headers, RFC 4303 §3.1.1 / RFC 8200 §4), `frag` whether the outer
    /// packet is a fragment (IPv4 MF/offset or an IPv6 Fragment header).
    #[allow(clippy::too_many_arguments)]
    fn inbound(&mut self, t: &Tables, port: usize, buf: PktBuf, key: FlowKey, ttl: u8, hl: usize, frag: bool) {
        let local = t.is_local(port, key.dst);
        let natt = key.protocol == ipv4::PROTO_UDP && key.ports.is_some_and(|(_, d)| t.is_natt_port(d));
        let esp_proto = key.protocol == ipv4::PROTO_ESP;
        // A non-first fragment has no UDP header: every UDP fragment to us
        // may be ESP in UDP (RFC 3948). An IPv6 non-first fragment's
        // protocol is its Fragment header's Next Header, which may also be
        // a Destination Options header before ESP (RFC 8200 §4.1).
        // An ICMP fragment to any of our addresses may be part of an Echo
        // Request.
        if frag
            && ((local
                && (esp_proto || key.protocol == ipv4::PROTO_UDP || (key.protocol == ipv6::NH_DEST_OPTS && key.dst.is_ipv6()))
                && self.reasm.enabled())
                || self.echo_fragment(t, &key))
        {
            return self.reassemble(t, port, buf);
        }
        // Transport SAs (RFC 4303 §3.1.1, as ipsec-secgw): ESP (IPv4, or
        // IPv6 after its extension headers), or ESP in UDP on a NAT-T port
        // (RFC 3948 §3.3, IPv4 only), matched by SPI whatever its
        // destination, then routed on its own destination.
        let transport = (esp_proto || (natt && !key.dst.is_ipv6())) && !local && transport_spi(t, &buf, hl + if natt { udp::HEADER_LEN } else { 0 });
        if (local && (esp_proto || natt)) || transport {
            if frag {
                return self.drop_buf(port, DropReason::Fragment, buf);
            }
            let ip_end = ethernet::HEADER_LEN + hl;
            // `Some(destination port)` for ESP in UDP.
            let (esp_off, udp_dport) = if natt {
                let Ok(u) = udp::UdpPacket::new_checked(&buf.frame()[ip_end..]) else {
                    return self.drop_buf(port, DropReason::BadLength, buf);
                };
                // The UDP length must be the IP payload's (RFC 768): one
                // below the header, past the packet, or short of it is a
                // broken header, not ESP.
                if u.length() as usize != buf.len() - ip_end {
                    return self.drop_buf(port, DropReason::Malformed, buf);
                }
                // RFC 3948 §2.2–2.3: a keepalive is one 0xFF byte; four zero
                // bytes (the non-ESP marker, where an SPI would be) is IKE;
                // anything else is ESP. The UDP checksum is never checked
                // (§3.1.2), and the payload runs to the IP total length.
                let p = u.payload();
                if p == [0xff] {
                    return self.drop_buf(port, DropReason::NattKeepalive, buf);
                }
                if p.len() >= 4 && p[..4] == [0; 4] {
                    return self.drop_buf(port, DropReason::NattIke, buf);
                }
                (ip_end + udp::HEADER_LEN, Some(u.dst_port()))
            } else {
                (ip_end, None)
            };
            let Ok(esp) = esp_hdr::EspPacket::new_checked(&buf.frame()[esp_off..]) else {
                return self.drop_buf(port, DropReason::BadLength, buf);
            };
            // RFC 4301 §4.4.2: tunnel SAs by (SPI, outer destination),
            // transport SAs by SPI.
            let spi = esp.spi();
            let Some(i) = t.sad.inbound_lookup(spi, key.dst) else {
                return self.no_sa(port, spi, key.src, buf);
            };
            let Some(e) = t.sad.inbound_at(i) else {
                return self.no_sa(port, spi, key.src, buf);
            };
            let i = sa_ref(i, e.sa.id);
            if !e.sa.transport && (e.sa.tunnel_dst != key.dst || e.sa.tunnel_src != key.src) {
                return self.no_sa(port, spi, key.src, buf);
            }
            // ESP in UDP only for an SA with udp_encap, on its port; plain
            // ESP only for an SA without.
            if e.udp_dport != udp_dport {
                return self.drop_buf(port, DropReason::EncapMismatch, buf);
            }
            let owner = e.sa.owner;
            // The flow's next packets skip what was decided up to here
            // (`flow`): plain ESP under an IPv4 header without options, to
            // this worker's SA or handed to its owner.
            if let (IpAddr::V4(s), IpAddr::V4(d), None, ipv4::MIN_HEADER_LEN) = (key.src, key.dst, udp_dport, hl) {
                self.esp_flows.learn_esp(t.version, port, s, d, spi, i);
            }
            return self.hand_to_owner(t, owner, port, buf, tag(true, i, esp_off, port as u16));
        }
        if local {
            // ICMP "fragmentation needed" / ICMPv6 Packet Too Big to us.
            let at = ethernet::HEADER_LEN + hl;
            let too_big = !frag
                && match key.dst {
                    IpAddr::V4(_) => key.protocol == ipv4::PROTO_ICMP && buf.frame().get(at..at + 2) == Some(&[icmp::TYPE_DEST_UNREACHABLE, icmp::CODE_FRAG_NEEDED]),
                    IpAddr::V6(_) => key.protocol == ipv6::NH_ICMPV6 && buf.frame().get(at) == Some(&icmpv6::TYPE_PACKET_TOO_BIG),
                };
            if too_big {
                return self.pmtu_report(t, port, buf, key.dst, hl);
            }
        }
        // To this port's address, or another of our ports' (answered the
        // same way, never forwarded; ESP and ICMP errors are taken on the
        // address of the port they arrive on only).
        if local || t.is_ours(key.dst) {
            // Cleartext that the inbound SPD says must arrive protected is
            // discarded whoever it is for (RFC 4301 §5.2): from a source
            // spoofed into a protected range, a request to our inside
            // address would get its reply in the clear on this port.
            if let Some(SpdAction::Protect(_)) = t.spd_in.lookup(&key) {
                return self.drop_buf(port, DropReason::CleartextProtected, buf);
            }
            let Some(buf) = self.echo(t, port, buf, ErrorPath::Back) else { return };
            return self.drop_buf(port, DropReason::ToUs, buf);
        }
        if t.martian(key.src, key.dst) {
            return self.drop_buf(port, DropReason::Martian, buf);
        }
        match t.spd_in.lookup(&key) {
            None => self.drop_buf(port, DropReason::NoPolicy, buf),
            Some(SpdAction::Discard) => self.drop_buf(port, DropReason::PolicyDiscard, buf),
            Some(SpdAction::Protect(_)) => self.drop_buf(port, DropReason::CleartextProtected, buf),
            Some(SpdAction::Bypass) => {
                if ttl <= 1 {
                    return self.time_exceeded(t, port, buf, ErrorPath::Back);
                }
                self.forward_checked(t, port, buf, key.dst, None)
            }
        }
    }

    /// An ICMP "fragmentation needed" (type 3 code 4) or ICMPv6 Packet Too
    /// Big (type 2) to our address `to` on unprotected `port`, the message
    /// at `hl` of the IP packet: a valid report about an ESP packet of one
    /// of our outbound tunnel SAs lowers (or refreshes) that SA's path MTU
    /// (RFC 4301 §8.2.1) and is counted as `pmtu_update`; anything else
    /// changes nothing and is counted as `pmtu_ignored`. Other ICMP to us
    /// stays `to_us`. Kept out of line: rare next to ESP.
    #[cold]
    #[inline(never)]
    fn pmtu_report(&mut self, t: &Tables, port: usize, buf: PktBuf, to: IpAddr, hl: usize) {
        let reason = if self.learn_pmtu(t, &buf, to, hl) { DropReason::PmtuUpdate } else { DropReason::PmtuIgnored };
        self.drop_buf(port, reason, buf)
    }

    /// The checks of [`Self::pmtu_report`]; true if the SA's path MTU was
    /// set. The SA: the outbound SA with the quoted SPI, in tunnel mode,
    /// whose endpoints are the quoted source (= `to`) and destination,
    /// with the quoted encapsulation (ESP, or ESP in UDP with its ports),
    /// whose outer header can carry DF (not IPv4 with `df = "clear"`: a
    /// router reports only DF packets), and which has sent the quoted
    /// sequence number recently: ≥ 1, at least `first_seq`, and fewer than
    /// [`pmtu::SEQ_WINDOW`] behind the newest (modulo 2^32; the newest is
    /// bounded from above by `first_seq - 1` + packets + dummies + errors,
    /// counted without a per-packet store). The MTU, raised to the
    /// family's floor ([`pmtu::clamp`]), must be below the current path MTU
    /// (the tunnel's egress port MTU when none is learned) or equal to a
    /// learned one ([`pmtu::PathMtu::lower`]).
    fn learn_pmtu(&mut self, t: &Tables, buf: &PktBuf, to: IpAddr, hl: usize) -> bool {
        if self.conf.pmtu_timeout_ms == 0 {
            return false;
        }
        let ip = &buf.frame()[ethernet::HEADER_LEN..];
        let Some(msg) = ip.get(hl..) else { return false };
        let report = match to {
            IpAddr::V4(_) => pmtu::parse_v4(msg),
            IpAddr::V6(me) => {
                let Ok(p) = ipv6::Ipv6Packet::new_checked(ip) else { return false };
                pmtu::parse_v6(&p.src(), &me, msg)
            }
        };
        let Some(r) = report else { return false };
        let Some(sa) = t.sad.outbound_by_spi(r.spi).and_then(|slot| t.sad.outbound_at(slot)) else {
            return false;
        };
        if sa.transport || sa.tunnel_src != to || r.src != to || r.dst != sa.tunnel_dst || r.udp != sa.udp_encap.map(|u| (u.sport, u.dport)) {
            return false;
        }
        if sa.df == crate::esp::DfMode::Clear && !sa.tunnel_dst.is_ipv6() {
            return false;
        }
        // The quoted sequence number: one of the last `SEQ_WINDOW` the SA
        // has sent (modulo 2^32: the low half of an ESN). `sent` bounds the
        // newest from above (packets, dummies and errors all counted).
        let c = &sa.life.counters;
        let count = c.packets.get().saturating_add(c.dummies.get()).saturating_add(c.errors.get());
        let newest = sa.first_seq.saturating_sub(1).saturating_add(count);
        let behind = (newest as u32).wrapping_sub(r.seq) as u64;
        if r.seq == 0 || behind >= count.min(pmtu::SEQ_WINDOW) {
            return false;
        }
        let Ok(mtu) = u16::try_from(pmtu::clamp(r.mtu, sa.tunnel_dst.is_ipv6())) else {
            return false;
        };
        let Some(port_mtu) = t.routes.lookup(sa.tunnel_dst).and_then(|(out, _)| t.ports.get(out)).map(|p| p.mtu as u32) else {
            return false;
        };
        let now_ms = self.now_ms();
        sa.path_mtu.lower(mtu, now_ms, now_ms.saturating_add(self.conf.pmtu_timeout_ms), port_mtu)
    }

    /// An outbound op whose SA left the tables while the op was in the
    /// device (a rekey or delete freed its slot) still finishes. Sealed,
    /// the packet is complete and goes to its outer header's destination
    /// (the peer keeps its inbound SA through the grace; a dummy counts in
    /// `dummies_sent`); failed, it drops with the op's own reason
    /// (`session_not_attached` after a limit-1 queue pair restarted with
    /// the new session), not as `no_sa`. The gone SA's counters are not
    /// touched.
    #[cold]
    #[inline(never)]
    fn finish_orphan(&mut self, t: &Tables, port: usize, op: CryptoOp<PktBuf>) {
        let dummy = op.user[1] & TAG_DUMMY != 0;
        let dst = ip_dst(&op.buf);
        match outbound::finish_cached(op, &mut self.sessions) {
            Ok(buf) => {
                if dummy {
                    self.counters.dummies_sent.add(1);
                }
                self.send_sealed(t, port, buf, dst)
            }
            Err((e, b)) => self.drop_buf(port, e.into(), b),
        }
    }

    /// A sealed outbound packet to `dst`: cut into outer fragments when
    /// its buffer says so ([`PktBuf::outer_frag_mtu`]), else forwarded.
    #[inline(always)]
    fn send_sealed(&mut self, t: &Tables, port: usize, buf: PktBuf, dst: IpAddr) {
        if buf.outer_frag_mtu != 0 {
            return self.fragment_outer(t, port, buf, dst);
        }
        self.forward(t, port, buf, dst)
    }

    fn finish(&mut self, t: &Tables, op: CryptoOp<PktBuf>) {
        let (is_in, r, inner_len, port) = untag(op.user[1]);
        if !is_in {
            let Some((_, sa)) = out_sa(t, r) else {
                return self.finish_orphan(t, port, op);
            };
            let dst = if sa.transport { ip_dst(&op.buf) } else { sa.tunnel_dst };
            let dummy = op.user[1] & TAG_DUMMY != 0;
            match outbound::finish_cached(op, &mut self.sessions) {
                Ok(buf) => {
                    let c = &sa.life.counters;
                    if dummy {
                        c.dummies.add(1);
                        self.counters.dummies_sent.add(1);
                    } else {
                        c.packets.add(1);
                        c.bytes.add(inner_len);
                    }
                    self.send_sealed(t, port, buf, dst)
                }
                Err((e, b)) => {
                    sa.life.counters.errors.add(1);
                    self.drop_buf(port, e.into(), b)
                }
            }
            return;
        }
        let Some((i, e)) = in_sa(t, r) else {
            // Gone while the op was in the device: a decrypted packet can
            // no longer be checked against the SA's selectors (`no_sa`); a
            // failed op drops with its own reason, as `open` names it.
            let reason = crate::esp::status_error(op.status).map_or(DropReason::NoSa, DropReason::from);
            return self.drop_buf(port, reason, op.buf);
        };
        let Some(st) = self.in_state.get_mut(i) else {
            return self.drop_buf(port, DropReason::NoSa, op.buf);
        };
        // For inbound ops the tag's aux field is the outer DS + ECN byte.
        let outer_tos = inner_len as u8;
        // Tunnel mode: `finish` checked the inner header (IPv4 or IPv6) and
        // hands back its fields; transport mode rebuilt the packet and it is
        // parsed here. Its selectors are those of its family (RFC 4301 §5.2).
        let done = if e.sa.transport {
            transport::inbound_finish_cached(st, op, &mut self.sessions).and_then(|b| match inner_header(&b) {
                Some(h) => Ok((b, h)),
                None => Err((crate::esp::EspError::BadInner, b)),
            })
        } else {
            inbound::finish_with_header(st, op, outer_tos, &mut self.sessions)
        };
        let (buf, h) = match done {
            Ok(d) => d,
            Err((err, b)) => {
                // A dummy packet (RFC 4303 §2.6) is discarded, not an error.
                if err != crate::esp::EspError::Dummy {
                    e.sa.life.counters.errors.add(1);
                }
                return self.drop_buf(port, err.into(), b);
            }
        };
        let key = FlowKey { src: h.src, dst: h.dst, protocol: h.protocol, ports: h.ports };
        let (ttl, len) = (h.ttl, h.len);
        if !e.admits(&key) {
            e.sa.life.counters.errors.add(1);
            return self.drop_buf(port, DropReason::InnerPolicyMismatch, buf);
        }
        // The SPD is ordered (RFC 4301 §4.4.1): an earlier DISCARD or
        // BYPASS entry takes what a later PROTECT entry of this SA also
        // selects, so the SA's selectors alone do not decide (DPDK's
        // ipsec-secgw classifies decrypted packets too). Only looked up
        // when the SPD has such an entry.
        if t.spd_in.protect_shadowed() {
            match t.spd_in.lookup(&key) {
                Some(SpdAction::Protect(_)) => {}
                found => {
                    e.sa.life.counters.errors.add(1);
                    let reason = if found == Some(SpdAction::Discard) { DropReason::PolicyDiscard } else { DropReason::InnerPolicyMismatch };
                    return self.drop_buf(port, reason, buf);
                }
            }
        }
        // Lifetime (RFC 4301 §4.4.2.1), counted on packets that decrypted
        // and passed the SA's selectors.
        if !self.in_state.get_mut(i).is_some_and(|st| st.usage.admit(&e.sa.life, len as u64)) {
            e.sa.life.counters.errors.add(1);
            return self.drop_buf(port, DropReason::SaExpired, buf);
        }
        // The gateway is not a host: traffic to its own addresses, also
        // from inside a tunnel, is not taken (README: `to_us`), but for an
        // Echo Request, answered back into the tunnel (and counted as one
        // of the SA's packets: it was delivered, to the gateway).
        if t.is_ours(key.dst) {
            let peer = if e.sa.transport { key.src } else { e.sa.tunnel_src };
            let Some(buf) = self.echo(t, port, buf, ErrorPath::Tunnel { from: port, peer }) else {
                e.sa.life.counters.packets.add(1);
                e.sa.life.counters.bytes.add(len as u64);
                return;
            };
            e.sa.life.counters.errors.add(1);
            return self.drop_buf(port, DropReason::ToUs, buf);
        }
        // Authenticated is not forwardable: the SA's selectors may be 0/0.
        // These drops after decryption are the SA's errors too, so its
        // packets and errors account for every packet it decrypted.
        let refused = if t.martian(key.src, key.dst) {
            Some(DropReason::Martian)
        } else if inner_source_routed(&buf) {
            Some(DropReason::SourceRoute)
        } else if ttl <= 1 {
            Some(DropReason::TtlExceeded)
        } else {
            None
        };
        // The far end of its tunnel, where an ICMP error about it goes.
        let peer = if e.sa.transport { key.src } else { e.sa.tunnel_src };
        if let Some(reason) = refused {
            e.sa.life.counters.errors.add(1);
            if reason == DropReason::TtlExceeded {
                // From our address on the port it would have left by, back
                // into the tunnel (as for a packet too big).
                let from = t.routes.lookup(key.dst).map_or(port, |(out, _)| out);
                return self.time_exceeded(t, port, buf, ErrorPath::Tunnel { from, peer });
            }
            return self.drop_buf(port, reason, buf);
        }
        let c = &e.sa.life.counters;
        // Out of an unprotected port, or not routed: the outbound SPD
        // decides (RFC 4301 §5.1, [`Origin::Decapsulated`]).
        let hop = self.route(t, key.dst);
        let egress = hop.map(|(NextHop::Known { out, .. } | NextHop::Unresolved { out, .. })| out);
        if !egress.and_then(|out| t.ports.get(out)).is_some_and(|p| p.protected) {
            return self.decrypted_outside(t, port, buf, key, (ttl, len), peer, c, egress.is_some());
        }
        c.packets.add(1);
        c.bytes.add(len as u64);
        self.forward_via(t, port, buf, hop, Some(peer))
    }

    /// A packet the inbound SA with counters `c` decrypted (TTL / hop limit
    /// and length `ttl_len`, from the tunnel whose far end is `peer`) whose
    /// destination is routed out of an unprotected port (`routed`) or not
    /// routed: it would cross the IPsec boundary again, so it goes through
    /// the outbound SPD ([`Origin::Decapsulated`]; helper-100: it used to
    /// leave in the clear with no SPD lookup). PROTECT or BYPASS: the SA
    /// delivered it, on to [`Self::outbound`], unless it is a TCP/UDP
    /// fragment port selectors may split ([`port_split_fragment`]:
    /// `hairpin_fragment`); DISCARD: `policy_discard`; no entry:
    /// `no_policy` (`no_route` when not routed, as before); the drops are
    /// the SA's errors.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn decrypted_outside(&mut self, t: &Tables, port: usize, buf: PktBuf, key: FlowKey, (ttl, len): (u8, usize), peer: IpAddr, c: &crate::esp::lifetime::SaCounters, routed: bool) {
        let reason = match t.spd_out.lookup(&key) {
            // A fragment of a datagram that port selectors may split: no
            // reassembly here, so none of it goes (helper-102: the later
            // fragments left in the clear by an any-port BYPASS while the
            // first was sealed).
            Some(SpdAction::Protect(_) | SpdAction::Bypass) if port_split_fragment(t, &key, &buf) => DropReason::HairpinFragment,
            Some(SpdAction::Protect(_) | SpdAction::Bypass) => {
                c.packets.add(1);
                c.bytes.add(len as u64);
                return self.outbound(t, port, buf, key, ttl, Origin::Decapsulated { peer });
            }
            Some(SpdAction::Discard) => DropReason::PolicyDiscard,
            None if routed => DropReason::NoPolicy,
            None => DropReason::NoRoute,
        };
        c.errors.add(1);
        self.drop_buf(port, reason, buf)
    }

    /// Routes on `dst`, writes the Ethernet header (EtherType of the IP
    /// version in the frame) and stages for tx. An IPv4 packet larger than
    /// the egress MTU is fragmented (DF clear) or dropped; an IPv6 one is
    /// dropped (`mtu_exceeded`: routers do not fragment IPv6, RFC 8200 §5;
    /// tunnel, bypassed and decapsulated traffic got its ICMP error before,
    /// in [`Self::outbound`] / [`Self::forward_checked`]).
    ///
    /// The destination MAC: a static neighbour entry, else one learned on
    /// the egress port, else the port's `peer_mac`, else the packet waits
    /// while the next hop is resolved (ARP / Neighbor Solicitation,
    /// `resolve.rs`).
    fn forward(&mut self, t: &Tables, rx_port: usize, buf: PktBuf, dst: IpAddr) {
        match self.route(t, dst) {
            Some(hop) => self.send_via(t, rx_port, buf, hop),
            None => self.drop_buf(rx_port, DropReason::NoRoute, buf),
        }
    }

    /// The egress of a packet to `dst`: port and next-hop MAC, or the next
    /// hop still to be resolved; `None` without a route. The last known
    /// hop is remembered for the rest of the poll (a run of one flow
    /// routes once).
    #[inline(always)]
    fn route(&mut self, t: &Tables, dst: IpAddr) -> Option<NextHop> {
        if let Some((d, out, mac)) = self.last_hop {
            if d == dst {
                return Some(NextHop::Known { out, mac });
            }
        }
        let (out, nh) = t.routes.lookup(dst)?;
        if out >= t.ports.len() {
            return None;
        }
        Some(match self.next_hop_mac(t, out, nh) {
            Some(mac) => {
                self.last_hop = Some((dst, out, mac));
                NextHop::Known { out, mac }
            }
            None => NextHop::Unresolved { out, nh },
        })
    }

    /// Sends `buf` to the egress [`Self::route`] found.
    #[inline]
    fn send_via(&mut self, t: &Tables, rx_port: usize, buf: PktBuf, hop: NextHop) {
        match hop {
            NextHop::Known { out, mac } => self.transmit(t, rx_port, buf, out, mac),
            NextHop::Unresolved { out, nh } => self.hold(t, rx_port, out, nh, buf),
        }
    }

    /// A packet a BYPASS policy lets through, either direction, or a
    /// decapsulated one (`decapsulated`: the far end of its tunnel; TTL /
    /// hop limit already checked to be above 1): routed on `dst`, checked against the egress port's
    /// MTU as a router checks it (RFC 1812 §4.2.2.5 / RFC 1191 §3, RFC 8200
    /// §5), then decremented and sent. Too big with DF set, or IPv6 (never
    /// fragmented on the way): dropped as `mtu_exceeded`, and an ICMP
    /// "fragmentation needed" / ICMPv6 Packet Too Big advertising the
    /// egress MTU goes to its source, quoting the header as received
    /// (before the decrement), under the rules and rate limit of the
    /// tunnel's errors ([`Self::frag_needed`], [`Self::packet_too_big`]):
    /// bypassed, back from the port it came in on; decapsulated, its source
    /// is behind the tunnel, so from the egress port's address into ESP
    /// back to that peer ([`ErrorPath::Tunnel`]). Too big with DF clear:
    /// fragmented by [`Self::transmit`].
    fn forward_checked(&mut self, t: &Tables, rx_port: usize, buf: PktBuf, dst: IpAddr, decapsulated: Option<IpAddr>) {
        let hop = self.route(t, dst);
        self.forward_via(t, rx_port, buf, hop, decapsulated)
    }

    /// [`Self::forward_checked`] once routed: `hop` is [`Self::route`]'s
    /// answer (`None`: `no_route`).
    #[inline]
    fn forward_via(&mut self, t: &Tables, rx_port: usize, mut buf: PktBuf, hop: Option<NextHop>, decapsulated: Option<IpAddr>) {
        let Some(hop) = hop else {
            return self.drop_buf(rx_port, DropReason::NoRoute, buf);
        };
        let (NextHop::Known { out, .. } | NextHop::Unresolved { out, .. }) = hop;
        let mtu = t.ports.get(out).map_or(usize::MAX, |p| p.mtu as usize);
        if buf.len().saturating_sub(ethernet::HEADER_LEN) > mtu {
            let path = match decapsulated {
                Some(peer) => ErrorPath::Tunnel { from: out, peer },
                None => ErrorPath::Back,
            };
            if is_ipv6(buf.frame()) {
                return self.icmp6_error(t, rx_port, buf, IcmpReport::TooBig(mtu), path);
            }
            if ipv4_df(&buf) {
                return self.icmp4_error(t, rx_port, buf, IcmpReport::TooBig(mtu), path);
            }
        }
        decrement_hops(&mut buf);
        self.send_via(t, rx_port, buf, hop)
    }

    /// The second half of [`Self::forward`]: Ethernet header to `mac` and
    /// stage on port `out` (fragmenting an IPv4 packet too big for its MTU).
    fn transmit(&mut self, t: &Tables, rx_port: usize, mut buf: PktBuf, out: usize, mac: [u8; 6]) {
        let Some(egress) = t.ports.get(out) else {
            return self.drop_buf(rx_port, DropReason::NoRoute, buf);
        };
        let src = egress.mac;
        let v6 = is_ipv6(buf.frame());
        if buf.len() - ethernet::HEADER_LEN > egress.mtu as usize {
            if v6 {
                return self.drop_buf(rx_port, DropReason::MtuExceeded, buf);
            }
            return self.fragment(t, rx_port, FragSink::Tx { out, macs: (mac, src) }, buf, egress.mtu as usize);
        }
        let ethertype = if v6 { ethernet::ETHERTYPE_IPV6 } else { ethernet::ETHERTYPE_IPV4 };
        ethernet::write_header(buf.frame_mut(), &mac, &src, ethertype);
        self.tx[out].push(buf);
    }

    /// Splits the IPv4 packet in `buf`, too big for `mtu`, into fragments
    /// (RFC 791 §3.2: payload offsets in 8-byte units, MF on all but the
    /// last, the same identification, a header checksum per fragment; the
    /// first fragment keeps every option, the others only those whose
    /// copied flag is set, [`ipv4::later_fragment_header`]; RFC 1812
    /// §4.2.2.7) and sends them to `sink` in order: staged on a port, or
    /// each encapsulated with an outbound SA (inner fragmentation, RFC
    /// 4459 §3). The last fragment reuses `buf`, the others take buffers
    /// from the worker's pool. DF set → `mtu_exceeded`; too few pool
    /// buffers → `frag_no_buffer`.
    fn fragment(&mut self, t: &Tables, rx_port: usize, sink: FragSink, mut buf: PktBuf, mtu: usize) {
        const ETH: usize = ethernet::HEADER_LEN;
        // The later fragments' header, built once.
        let mut later = [0u8; ipv4::MAX_HEADER_LEN];
        let parsed = {
            let ip = &buf.frame()[ETH..];
            let hl = ip.first().map_or(0, |&b| (b & 0x0f) as usize * 4);
            match ip.get(..hl).filter(|_| ip.first().is_some_and(|&b| b >> 4 == 4)) {
                Some(h) => ipv4::later_fragment_header(h, &mut later)
                    .map(|hl2| (u16::from_be_bytes([ip[ipv4::FLAGS_FRAG], ip[ipv4::FLAGS_FRAG + 1]]), hl, hl2)),
                None => None,
            }
        };
        let Some((ff, hl, hl2)) = parsed else {
            return self.drop_buf(rx_port, DropReason::MtuExceeded, buf);
        };
        let total = buf.len() - ETH;
        // Data bytes of the first fragment and of each later one.
        let (first, chunk) = (mtu.saturating_sub(hl) / 8 * 8, mtu.saturating_sub(hl2) / 8 * 8);
        if ff & ipv4::FLAG_DF != 0 || first == 0 || chunk == 0 || total <= hl {
            return self.drop_buf(rx_port, DropReason::MtuExceeded, buf);
        }
        let payload = total - hl;
        if payload <= first {
            // It fits after all (the callers cut only packets too big):
            // sent as it is.
            let flags_frag = ff & (ipv4::FLAG_MF | 0x1fff);
            return self.emit_fragment(t, rx_port, sink, buf, total as u16, flags_frag);
        }
        let pieces = 1 + (payload - first).div_ceil(chunk);
        if self.pool.len() < pieces - 1 {
            return self.drop_buf(rx_port, DropReason::FragNoBuffer, buf);
        }
        // An already fragmented packet keeps its offset and its MF on the last piece.
        let base = (ff & 0x1fff) as usize;
        let last_mf = ff & ipv4::FLAG_MF;
        let at = |k: usize| if k == 0 { 0 } else { first + (k - 1) * chunk };
        for k in 0..pieces - 1 {
            let (off, n, h) = (at(k), if k == 0 { first } else { chunk }, if k == 0 { hl } else { hl2 });
            let Some(mut f) = self.pool.pop() else { break };
            let area = f.reset();
            area[..ETH].copy_from_slice(&buf.frame()[..ETH]);
            if k == 0 {
                area[ETH..ETH + h].copy_from_slice(&buf.frame()[ETH..ETH + h]);
            } else {
                area[ETH..ETH + h].copy_from_slice(&later[..h]);
            }
            area[ETH + h..ETH + h + n].copy_from_slice(&buf.frame()[ETH + hl + off..ETH + hl + off + n]);
            f.set_len(ETH + h + n);
            f.port = buf.port;
            self.emit_fragment(t, rx_port, sink, f, (h + n) as u16, ipv4::FLAG_MF | (base + off / 8) as u16);
        }
        // The last piece (a later one: the packet did not fit) moves up
        // behind the later fragments' header in place.
        let off = at(pieces - 1);
        let n = payload - off;
        let frame = buf.frame_mut();
        frame.copy_within(ETH + hl + off..ETH + hl + off + n, ETH + hl2);
        frame[ETH..ETH + hl2].copy_from_slice(&later[..hl2]);
        buf.trim_to(ETH + hl2 + n);
        self.emit_fragment(t, rx_port, sink, buf, (hl2 + n) as u16, last_mf | (base + off / 8) as u16);
    }

    /// Sets a fragment's length, flags and offset (and checksum) and sends
    /// it to `sink`, counting it under `frags_sent`.
    fn emit_fragment(&mut self, t: &Tables, rx_port: usize, sink: FragSink, mut f: PktBuf, total: u16, flags_frag: u16) {
        fix_fragment_header(f.frame_mut(), total, flags_frag);
        self.counters.frags_sent.add(1);
        match sink {
            FragSink::Tx { out, macs: (dst, src) } => {
                ethernet::write_header(f.frame_mut(), &dst, &src, ethernet::ETHERTYPE_IPV4);
                self.tx[out].push(f);
            }
            FragSink::Sa { sa, owner } => self.hand_to_owner(t, owner, rx_port, f, tag(false, sa, 0, rx_port as u16)),
        }
    }

    /// Sends `buf`, an ESP packet the gateway sealed whose outer packet is
    /// to be fragmented ([`PktBuf::outer_frag_mtu`], set by
    /// [`Self::outbound`]), to `dst`. An IPv4 outer header (written with DF
    /// clear by [`outbound::prepare_with_ident`]) is forwarded as it is: fragmented by
    /// [`Self::transmit`] beyond the port's MTU, else by the routers of the
    /// path. An IPv6 outer header (Ethernet + the 40-byte header the
    /// gateway wrote, no extension headers) is cut by the gateway, its
    /// source, into packets of at most `outer_frag_mtu` bytes (RFC 8200
    /// §4.5: a Fragment header after the IPv6 header with the original Next
    /// Header, offsets in 8-byte units, M on all but the last, one
    /// identification; RFC 2473 §7.1), each forwarded to `dst` and counted
    /// under `frags_sent`. The last piece reuses `buf`, the others take
    /// buffers from the pool; too few → `frag_no_buffer`.
    #[cold]
    #[inline(never)]
    fn fragment_outer(&mut self, t: &Tables, rx_port: usize, mut buf: PktBuf, dst: IpAddr) {
        const ETH: usize = ethernet::HEADER_LEN;
        const HL: usize = ipv6::HEADER_LEN;
        const FH: usize = ipv6::FRAGMENT_HEADER_LEN;
        let mtu = std::mem::take(&mut buf.outer_frag_mtu) as usize;
        let total = buf.len() - ETH;
        if total <= mtu || !is_ipv6(buf.frame()) {
            return self.forward(t, rx_port, buf, dst);
        }
        let chunk = mtu.saturating_sub(HL + FH) / 8 * 8;
        if total <= HL || chunk == 0 {
            return self.drop_buf(rx_port, DropReason::MtuExceeded, buf);
        }
        let nh = buf.frame()[ETH + ipv6::NEXT_HEADER];
        let payload = total - HL;
        let pieces = payload.div_ceil(chunk);
        if self.pool.len() < pieces - 1 {
            return self.drop_buf(rx_port, DropReason::FragNoBuffer, buf);
        }
        let ident = self.frag6_ident.take();
        let piece_header = |f: &mut [u8], off: usize, n: usize, more: bool| {
            f[ETH + ipv6::PAYLOAD_LEN..ETH + ipv6::PAYLOAD_LEN + 2].copy_from_slice(&((FH + n) as u16).to_be_bytes());
            f[ETH + ipv6::NEXT_HEADER] = ipv6::NH_FRAGMENT;
            let fh = &mut f[ETH + HL..ETH + HL + FH];
            fh[0] = nh;
            fh[1] = 0;
            fh[2..4].copy_from_slice(&((off as u16) | more as u16).to_be_bytes());
            fh[4..8].copy_from_slice(&ident.to_be_bytes());
        };
        for k in 0..pieces - 1 {
            let off = k * chunk;
            let Some(mut f) = self.pool.pop() else { break };
            let area = f.reset();
            area[..ETH + HL].copy_from_slice(&buf.frame()[..ETH + HL]);
            area[ETH + HL + FH..ETH + HL + FH + chunk].copy_from_slice(&buf.frame()[ETH + HL + off..ETH + HL + off + chunk]);
            f.set_len(ETH + HL + FH + chunk);
            f.port = buf.port;
            piece_header(f.frame_mut(), off, chunk, true);
            self.counters.frags_sent.add(1);
            self.forward(t, rx_port, f, dst);
        }
        // The last piece moves up behind the two headers in place.
        let off = (pieces - 1) * chunk;
        let n = payload - off;
        buf.frame_mut().copy_within(ETH + HL + off..ETH + HL + off + n, ETH + HL + FH);
        buf.trim_to(ETH + HL + FH + n);
        piece_header(buf.frame_mut(), off, n, false);
        self.counters.frags_sent.add(1);
        self.forward(t, rx_port, buf, dst)
    }
}

/// Writes a fragment's total length, flags + offset and header checksum
/// (`frame` = Ethernet + an IPv4 header of IHL × 4 bytes + data).
fn fix_fragment_header(frame: &mut [u8], total: u16, flags_frag: u16) {
    let hl = frame.get(ethernet::HEADER_LEN).map_or(0, |&b| (b & 0x0f) as usize * 4).max(ipv4::MIN_HEADER_LEN);
    let Some(ip) = frame.get_mut(ethernet::HEADER_LEN..ethernet::HEADER_LEN + hl) else { return };
    ip[ipv4::TOTAL_LEN..ipv4::TOTAL_LEN + 2].copy_from_slice(&total.to_be_bytes());
    ip[ipv4::FLAGS_FRAG..ipv4::FLAGS_FRAG + 2].copy_from_slice(&flags_frag.to_be_bytes());
    ip[ipv4::CHECKSUM..ipv4::CHECKSUM + 2].copy_from_slice(&[0, 0]);
    let ck = crate::wire::checksum::checksum(ip);
    ip[ipv4::CHECKSUM..ipv4::CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
}

#[cfg(test)]
mod outer_ident_tests {
    use super::{first_outer_ident, next_outer_ident};
    use std::collections::HashSet;

    /// Every value worker `id` of `n` writes over `steps` packets from the
    /// start `r` gives it.
    fn run(id: usize, n: usize, r: u16, steps: usize) -> Vec<u16> {
        let mut v = first_outer_ident(id, n, r);
        (0..steps)
            .map(|_| {
                let cur = v;
                v = next_outer_ident(v, id, n);
                cur
            })
            .collect()
    }

    #[test]
    fn workers_never_share_a_value_whatever_their_start() {
        // 3 and 7 do not divide 65536: a wrap must not move a worker into
        // another's values. Starts near the top wrap at once.
        for n in [1usize, 2, 3, 7, 8] {
            let starts = [0u16, 1, 2, 0x7fff, 0xfffd, 0xfffe, 0xffff];
            let mut all: Vec<HashSet<u16>> = Vec::new();
            for id in 0..n {
                let mut mine = HashSet::new();
                for &r in &starts {
                    for x in run(id, n, r, 70_000 / n + 10) {
                        assert_eq!(x as usize % n, id, "n {n} id {id} start {r}: {x}");
                        mine.insert(x);
                    }
                }
                all.push(mine);
            }
            for a in 0..n {
                for b in a + 1..n {
                    assert!(all[a].is_disjoint(&all[b]), "n {n}: workers {a} and {b} share a value");
                }
            }
        }
    }

    #[test]
    fn a_worker_goes_through_all_its_values_before_repeating() {
        for (n, id) in [(1usize, 0usize), (2, 1), (3, 0), (3, 2), (7, 6)] {
            let count = (0xffff - id) / n + 1;
            let v = run(id, n, 0xfffe, 2 * count);
            let first: HashSet<u16> = v[..count].iter().copied().collect();
            assert_eq!(first.len(), count, "n {n} id {id}: one period, all distinct");
            assert_eq!(v[..count], v[count..], "n {n} id {id}: then the same order again");
        }
    }
}
