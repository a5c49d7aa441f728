//! Security associations: the immutable part shared by every thread (cold)
//! and the mutable part owned by the SA's worker (hot).

use super::iv::IvGen;
use super::replay::ReplayWindow;
use crate::crypto::Session;
use std::net::IpAddr;
use std::sync::Arc;

/// Outer DF bit handling for tunnel mode (RFC 4301 §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DfMode {
    /// Copy the inner header's DF bit.
    Copy,
    /// Always set.
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
    pub tfc_pad_to: usize,
}

/// When and how big the dummy packets of a tunnel-mode outbound SA are
/// (RFC 4303 §2.6: Next Header 59, discarded silently by the receiver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DummyPlan {
    /// One dummy per this interval (never zero; the owner's loop sends it
    /// within about one poll, or one idle sleep, of the due time).
    pub interval: std::time::Duration,
    /// Bytes of dummy payload, 0..=[`super::outbound::MAX_DUMMY_LEN`].
    pub len: usize,
}

/// The sender's mutable state of an outbound SA. Owned by one worker.
#[derive(Debug, Clone, Default)]
pub struct OutboundState {
    /// Last sequence number sent (0 = none yet, so the first packet carries
    /// 1, RFC 4303 §3.3.3).
    pub seq: u64,
}

impl OutboundState {
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
    /// Worker that owns the SA's replay window.
    pub owner: usize,
}

/// The receiver's mutable state of an inbound SA. Owned by one worker.
#[derive(Debug, Clone)]
pub struct InboundState {
    /// Anti-replay window.
    pub window: ReplayWindow,
}

impl InboundState {
    /// Fresh state for `sa`. Allocates the bitmap: control path only.
    pub fn new(sa: &InboundSa) -> InboundState {
        InboundState { window: ReplayWindow::new(sa.replay_window) }
    }
}
