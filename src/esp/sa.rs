//! Security associations: the immutable part shared by every thread (cold)
//! and the mutable part owned by the SA's worker (hot).

use super::iv::IvGen;
use super::lifetime::{SaLife, Usage};
use super::replay::ReplayWindow;
use crate::crypto::Session;
use std::net::IpAddr;
use std::sync::Arc;

/// Outer DF bit handling for tunnel mode (RFC 4301 §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DfMode {
    /// Copy the inner header's DF bit (an IPv6 inner packet counts as DF,
    /// except one of at most 1280 bytes over a tunnel MTU below 1280,
    /// which leaves with DF clear: RFC 4213 §3.2, done by the worker).
    Copy,
    /// Always set (such an IPv6 packet too: it is dropped instead).
    Set,
    /// Always clear.
    Clear,
}

/// UDP encapsulation of ESP (RFC 3948) for an SA behind a NAT: the ports of
/// the UDP header in front of the ESP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpEncap {
    /// UDP source port (ours; 4500 by default).
    pub sport: u16,
    /// UDP destination port (the peer's, as the NAT maps it; 4500 by default).
    pub dport: u16,
}

/// An outbound SA, tunnel or transport mode (immutable once installed).
#[derive(Debug, Clone)]
pub struct OutboundSa {
    /// SPI, never 0.
    pub spi: u32,
    /// Unique id the control thread gave this SA (never reused while the
    /// gateway runs; 0 in tests that build SAs by hand). A worker's state
    /// for an SA slot belongs to the SA with this id.
    pub id: u32,
    /// Counters, limits and expiry flags, shared with the control thread.
    pub life: Arc<SaLife>,
    /// Sequence number of the first packet (1 for a new SA, RFC 4303
    /// §3.3.3; more when an SA continues elsewhere, and in tests of
    /// sequence number exhaustion).
    pub first_seq: u64,
    /// Encrypt session.
    pub session: Arc<Session>,
    /// Transport mode (RFC 4303 §3.1.1): the packet's own IPv4 header is
    /// kept and `tunnel_src`/`tunnel_dst`/`outer_ttl`/`df` are unused.
    pub transport: bool,
    /// Outer source address (tunnel mode). Of the same family as
    /// `tunnel_dst`, which decides the outer header: IPv4 (20 bytes) or
    /// IPv6 (40 bytes).
    pub tunnel_src: IpAddr,
    /// Outer destination address (tunnel mode).
    pub tunnel_dst: IpAddr,
    /// Outer TTL / hop limit (RFC 4301 §5.1.2.1: a default, not copied).
    pub outer_ttl: u8,
    /// Outer DF handling (IPv4 outer header only).
    pub df: DfMode,
    /// Extended sequence numbers (RFC 4303 §2.2.1).
    pub esn: bool,
    /// Where the explicit IVs come from ([`IvGen::for_algorithm`] of the
    /// session's algorithm: an IV key for AES-CBC).
    pub iv_gen: IvGen,
    /// ESP in UDP (RFC 3948) with these ports, or plain ESP (`None`).
    pub udp_encap: Option<UdpEncap>,
    /// Worker that owns the SA's sequence counter.
    pub owner: usize,
    /// Dummy packets (RFC 4303 §2.6) the owner sends on this SA, or `None`
    /// (tunnel mode only: [`super::outbound::prepare_dummy`]).
    pub dummy: Option<DummyPlan>,
    /// TFC padding (RFC 4303 §2.7, tunnel mode only): inner packets
    /// shorter than this many bytes are padded with zeros to it before
    /// encryption; 0 = off. At most [`super::outbound::MAX_DUMMY_LEN`].
    /// Capped to what fits a learned path MTU
    /// ([`super::outbound::tfc_target`]).
    pub tfc_pad_to: usize,
    /// ESP padding alignment in bytes (RFC 4303 §2.4: payload + padding +
    /// Pad Length + Next Header end on a multiple of it): a power of two
    /// from 4 to 256 (padding stays below 256 bytes), at least the
    /// algorithm's block size ([`crate::crypto::Algorithm::block_size`]: 4,
    /// 16 for AES-CBC); a smaller value (0 in SAs built by hand) means the
    /// block size. More than the block size costs wire bytes (up to
    /// `pad_align` minus the block size per packet) and buys a whole number of cipher
    /// blocks: 16 spares AES-GCM providers their partial-block path
    /// (README, Figures), and hides lengths a little (§2.4, §2.7).
    pub pad_align: usize,
    /// Tunnel mode with IPv6 endpoints: the key under which the outer
    /// flow label is derived from the inner flow (RFC 6438 §3,
    /// [`super::outbound::flow_label`]); `None` = label 0. Random per SA,
    /// so the label of a flow cannot be computed by an observer (RFC 6437
    /// §3, RFC 6438 §5).
    pub flow_label_key: Option<std::collections::hash_map::RandomState>,
    /// Tunnel mode: the path MTU to `tunnel_dst` learned from ICMP (RFC
    /// 4301 §8.2.1), none at first ([`super::pmtu`]).
    pub path_mtu: super::pmtu::PathMtu,
}

impl OutboundSa {
    /// A tunnel-mode outbound SA (RFC 4303 §3.1.2) with SPI `spi` and
    /// encrypt session `session`, from `src` to `dst` (one family: it
    /// decides the outer header), with the defaults of an SA built by hand
    /// (tests, benches, tools): id 0, a life with no limits, first sequence
    /// number 1, outer TTL 64, DF copied from the inner header, no ESN, no
    /// UDP encapsulation, owner worker 0, no dummy packets, no TFC padding,
    /// the algorithm's own padding alignment, no path MTU known. Change
    /// any field after. The control thread builds the gateway's SAs from
    /// config instead (`control::tables::outbound_sa`). Errors: no IV key
    /// from the OS random source (AES-CBC, [`IvGen::for_algorithm`]).
    pub fn tunnel(spi: u32, session: Arc<Session>, src: IpAddr, dst: IpAddr) -> Result<OutboundSa, getrandom::Error> {
        Ok(OutboundSa {
            spi,
            id: 0,
            life: Default::default(),
            first_seq: 1,
            iv_gen: IvGen::for_algorithm(session.algorithm())?,
            session,
            transport: false,
            tunnel_src: src,
            tunnel_dst: dst,
            outer_ttl: 64,
            df: DfMode::Copy,
            esn: false,
            udp_encap: None,
            owner: 0,
            dummy: None,
            tfc_pad_to: 0,
            flow_label_key: None,
            pad_align: 0,
            path_mtu: Default::default(),
        })
    }

    /// A transport-mode outbound SA (RFC 4303 §3.1.1) with SPI `spi` and
    /// encrypt session `session`, defaults as [`OutboundSa::tunnel`] (the
    /// tunnel fields unused, their addresses unspecified). Errors: as
    /// [`OutboundSa::tunnel`].
    pub fn transport(spi: u32, session: Arc<Session>) -> Result<OutboundSa, getrandom::Error> {
        let unspecified = IpAddr::from([0u8; 16]);
        Ok(OutboundSa { transport: true, ..OutboundSa::tunnel(spi, session, unspecified, unspecified)? })
    }
}

/// When and how big the dummy packets of a tunnel-mode outbound SA are
/// (RFC 4303 §2.6: Next Header 59, discarded silently by the receiver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DummyPlan {
    /// One dummy per this interval (never zero; the owner's loop sends it
    /// within about one poll, or one idle sleep, of the due time).
    pub interval: std::time::Duration,
    /// Bytes of dummy payload, 0..=[`super::outbound::MAX_DUMMY_LEN`];
    /// fewer while a learned path MTU has no room for that many
    /// ([`super::outbound::prepare_dummy`]).
    pub len: usize,
}

/// The sender's mutable state of an outbound SA. Owned by one worker.
#[derive(Debug, Clone, Default)]
pub struct OutboundState {
    /// Last sequence number sent (0 = none yet, so the first packet carries
    /// 1, RFC 4303 §3.3.3).
    pub seq: u64,
    /// Id of the SA this state belongs to ([`OutboundSa::id`]).
    pub id: u32,
    /// Packets and bytes used of the SA's lifetime.
    pub usage: Usage,
}

impl OutboundState {
    /// Fresh state for `sa`: the next packet carries `sa.first_seq`.
    pub fn new(sa: &OutboundSa) -> OutboundState {
        OutboundState { seq: sa.first_seq.saturating_sub(1), id: sa.id, usage: Usage::default() }
    }

    /// Takes the next sequence number, refusing to cycle (RFC 4303 §3.3.3):
    /// past 2^32−1 without ESN, 2^64−1 with.
    #[inline]
    pub fn next_seq(&mut self, esn: bool) -> Option<u64> {
        let limit = if esn { u64::MAX } else { u32::MAX as u64 };
        if self.seq >= limit {
            return None;
        }
        self.seq += 1;
        Some(self.seq)
    }
}

/// An inbound SA, tunnel or transport mode (immutable once installed).
#[derive(Debug, Clone)]
pub struct InboundSa {
    /// SPI, never 0.
    pub spi: u32,
    /// Unique id the control thread gave this SA ([`OutboundSa::id`]).
    pub id: u32,
    /// Counters, limits and expiry flags, shared with the control thread.
    pub life: Arc<SaLife>,
    /// Decrypt session.
    pub session: Arc<Session>,
    /// Transport mode (RFC 4303 §3.1.1): matched by SPI alone, whatever the
    /// packet's addresses; `tunnel_src`/`tunnel_dst` are unused.
    pub transport: bool,
    /// Expected outer source address (IPv4 or IPv6, as `tunnel_dst`).
    pub tunnel_src: IpAddr,
    /// Expected outer destination address (one of ours).
    pub tunnel_dst: IpAddr,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Anti-replay window in packets (0 = off).
    pub replay_window: u32,
    /// The peer's first sequence number (config `first_seq` on an inbound
    /// SA, DPDK's `esn N`), default 1: the window starts just below it, so
    /// with ESN the high 32 bits of the first packets are inferred right
    /// (RFC 4303 Appendix A2) however far past 2^32 the peer starts.
    pub first_seq: u64,
    /// Worker that owns the SA's replay window.
    pub owner: usize,
}

impl InboundSa {
    /// A tunnel-mode inbound SA with SPI `spi` and decrypt session
    /// `session`, whose packets come from `src` to `dst` (one of ours),
    /// with the defaults of an SA built by hand (tests, benches, tools): id
    /// 0, a life with no limits, no ESN, an anti-replay window of 64
    /// packets (RFC 4303 §3.4.3), the peer starting at sequence number 1,
    /// owner worker 0. Change any field after.
    pub fn tunnel(spi: u32, session: Arc<Session>, src: IpAddr, dst: IpAddr) -> InboundSa {
        InboundSa {
            spi,
            id: 0,
            life: Default::default(),
            session,
            transport: false,
            tunnel_src: src,
            tunnel_dst: dst,
            esn: false,
            replay_window: 64,
            first_seq: 1,
            owner: 0,
        }
    }

    /// A transport-mode inbound SA with SPI `spi` and decrypt session
    /// `session` (matched by SPI alone), defaults as [`InboundSa::tunnel`].
    pub fn transport(spi: u32, session: Arc<Session>) -> InboundSa {
        let unspecified = IpAddr::from([0u8; 16]);
        InboundSa { transport: true, ..InboundSa::tunnel(spi, session, unspecified, unspecified) }
    }
}

/// The receiver's mutable state of an inbound SA. Owned by one worker.
#[derive(Debug, Clone)]
pub struct InboundState {
    /// Anti-replay window.
    pub window: ReplayWindow,
    /// Id of the SA this state belongs to ([`InboundSa::id`]).
    pub id: u32,
    /// Packets and bytes used of the SA's lifetime.
    pub usage: Usage,
}

impl InboundState {
    /// State of no SA (id 0, no window): what a worker keeps for slots it
    /// does not own.
    pub fn empty() -> InboundState {
        InboundState { window: ReplayWindow::new(0), id: 0, usage: Usage::default() }
    }

    /// Fresh state for `sa`. Allocates the bitmap: control path only.
    pub fn new(sa: &InboundSa) -> InboundState {
        InboundState { window: ReplayWindow::starting_at(sa.replay_window, sa.first_seq), id: sa.id, usage: Usage::default() }
    }
}

/// Session references a worker cloned earlier and got back from finished
/// ops, to hand to the next ops of the same session: a burst of one SA's
/// packets then takes no atomic reference count per op (an `Arc` clone
/// and drop are two locked read-modify-writes, ≈ 9 ns a packet; DPDK's
/// ops carry a plain session pointer). Holds references of one session at
/// a time, the last one returned; a reference of another session is
/// dropped when it comes back if the cache holds another's (and the
/// cache then switches to it: ops of interleaved SAs cost what they cost
/// without a cache, never more). Never allocates after [`Self::new`].
///
/// The references keep their session alive: the owner clears the cache
/// when its tables change ([`Self::clear`]), so a removed SA's key
/// material is freed as soon as its last op finishes.
#[derive(Debug, Default)]
pub struct SessionCache {
    spare: Vec<Arc<Session>>,
}

impl SessionCache {
    /// A cache of at most `capacity` references (allocates: start-up only).
    /// `SessionCache::default()` holds none and clones every time.
    pub fn new(capacity: usize) -> SessionCache {
        SessionCache { spare: Vec::with_capacity(capacity) }
    }

    /// A reference to `session` for a new op: a spare one, or a clone.
    #[inline]
    pub fn take(&mut self, session: &Arc<Session>) -> Arc<Session> {
        if self.spare.last().is_some_and(|s| Arc::ptr_eq(s, session)) {
            if let Some(s) = self.spare.pop() {
                return s;
            }
        }
        session.clone()
    }

    /// A finished op's session reference: kept when there is room (the
    /// cache switching to its session if it held another's), else dropped.
    #[inline(always)]
    pub fn give_back(&mut self, session: Arc<Session>) {
        if self.spare.capacity() == 0 {
            return;
        }
        if self.spare.first().is_some_and(|s| !Arc::ptr_eq(s, &session)) {
            self.spare.clear();
        }
        if self.spare.len() < self.spare.capacity() {
            self.spare.push(session);
        }
    }

    /// Drops every reference held.
    pub fn clear(&mut self) {
        self.spare.clear();
    }

    /// References held.
    pub fn len(&self) -> usize {
        self.spare.len()
    }

    /// Whether the cache holds no reference.
    pub fn is_empty(&self) -> bool {
        self.spare.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::soft::SoftDevice;
    use crate::crypto::{Algorithm, CipherDirection, CryptoDevice, SymXform};

    fn session(dev: &SoftDevice) -> Arc<Session> {
        let x = SymXform { algorithm: Algorithm::Aes128Gcm, direction: CipherDirection::Encrypt, key: vec![7; 16], salt: [1; 4], icv_len: 16, auth_key: Vec::new() };
        dev.session_create(&x).unwrap()
    }

    /// References come back and go out again without new counts; another
    /// session's reference switches the cache; capacity bounds it; clear
    /// and the default (no capacity) leave only the SA's own reference.
    #[test]
    fn session_cache_recycles_one_session_at_a_time() {
        let dev = SoftDevice::new(1);
        let (a, b) = (session(&dev), session(&dev));
        let mut c = SessionCache::new(2);
        let ops: Vec<_> = (0..3).map(|_| c.take(&a)).collect();
        assert_eq!(Arc::strong_count(&a), 4, "an empty cache clones");
        for s in ops {
            c.give_back(s);
        }
        assert_eq!((c.len(), Arc::strong_count(&a)), (2, 3), "two kept (capacity), the third dropped");
        let s = c.take(&a);
        assert!(Arc::ptr_eq(&s, &a));
        assert_eq!((c.len(), Arc::strong_count(&a)), (1, 3), "taken from the cache, no new count");
        let t = c.take(&b);
        assert_eq!((c.len(), Arc::strong_count(&b)), (1, 2), "another session: cloned, the cache untouched");
        c.give_back(t);
        assert_eq!((c.len(), Arc::strong_count(&a), Arc::strong_count(&b)), (1, 2, 2), "b's reference came back: a's spare dropped, b's kept");
        assert!(Arc::ptr_eq(&c.take(&b), &b));
        c.give_back(s);
        c.clear();
        assert_eq!((c.len(), Arc::strong_count(&a)), (0, 1), "clear drops every reference");
        let mut none = SessionCache::default();
        let s = none.take(&a);
        none.give_back(s);
        assert_eq!((none.len(), Arc::strong_count(&a)), (0, 1), "the default keeps nothing");
    }
}
