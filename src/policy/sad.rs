//! The Security Association Database (RFC 4301 §4.4.2): outbound SAs by
//! index (the outbound SPD points at them) and inbound SAs by SPI, or by
//! SPI and destination (see [`InboundKey`]).

use super::spd::{FlowKey, Selector};
use crate::esp::{InboundSa, OutboundSa};
use std::collections::HashMap;

/// The inbound index's hasher: FxHash (`rustc-hash`), not std's SipHash.
/// SipHash's keyed resistance to collision flooding buys nothing here: the
/// keys in the table come from config and the control socket, a packet only
/// chooses which key is looked up, and a miss costs at most the probe of
/// one group the table's own keys filled. It was ≈ 7 % of an inbound
/// 64-byte packet's time (perf, pipeline bench).
type FxMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;
use std::net::IpAddr;
use std::sync::Arc;

/// An inbound SA with the selectors of the policies that protect with it:
/// a decapsulated packet must match one of them (RFC 4301 §5.2).
#[derive(Debug, Clone)]
pub struct InboundEntry {
    /// The SA.
    pub sa: InboundSa,
    /// Selectors of the inbound policies naming this SA.
    pub selectors: Vec<Selector>,
    /// `Some(port)`: the SA is UDP-encapsulated (RFC 3948) and its packets
    /// arrive on this UDP destination port; `None`: plain ESP (protocol 50).
    pub udp_dport: Option<u16>,
}

impl InboundEntry {
    /// True if the inner packet's flow matches one of the SA's selectors.
    #[inline]
    pub fn admits(&self, k: &FlowKey) -> bool {
        self.selectors.iter().any(|s| s.matches(k))
    }
}

/// How the SAD finds an inbound SA (RFC 4301 §4.1, §4.4.2: each SAD entry
/// says whether its lookup uses the destination address in addition to the
/// SPI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InboundKey {
    /// A transport-mode SA: by SPI alone, whatever the packet's destination
    /// (the packet's own addresses are the SA's endpoints).
    Spi(u32),
    /// A tunnel-mode SA: by SPI and outer destination (its `tunnel_dst`), so
    /// two peers may use the same SPI towards two addresses of ours.
    SpiDst(u32, IpAddr),
}

impl InboundKey {
    /// The key of inbound SA `sa`.
    pub fn of(sa: &InboundSa) -> InboundKey {
        if sa.transport {
            InboundKey::Spi(sa.spi)
        } else {
            InboundKey::SpiDst(sa.spi, sa.tunnel_dst)
        }
    }
}

/// The SAD: SAs in slots. A slot index is what the SPD's PROTECT actions,
/// the workers' per-SA state and the crypto ops' tags name; a removed SA
/// leaves its slot empty (`None`) and the control thread reuses it for a
/// later SA (which has another [`OutboundSa::id`], so stale references are
/// recognised). Each SA is behind an `Arc`, so a new snapshot copies
/// pointers, not SAs.
///
/// Inbound SAs are indexed by [`InboundKey`] in two hash maps: tunnel-mode
/// SAs by (SPI, `tunnel_dst`), transport-mode SAs by SPI. Config validation
/// (and the control socket) keep an SPI either on one transport SA or on
/// tunnel SAs with different `tunnel_dst`, so at most one SA matches a
/// packet; [`Sad::inbound_lookup`] is at most two hash lookups, without
/// allocating.
#[derive(Debug, Default, Clone)]
pub struct Sad {
    /// Outbound SAs by slot.
    pub outbound: Vec<Option<Arc<OutboundSa>>>,
    /// Inbound SAs by slot.
    pub inbound: Vec<Option<Arc<InboundEntry>>>,
    /// Transport-mode inbound SAs: SPI → slot.
    by_spi: FxMap<u32, u32>,
    /// Tunnel-mode inbound SAs: (SPI, tunnel_dst) → slot.
    by_spi_dst: FxMap<(u32, IpAddr), u32>,
    /// Outbound SAs: SPI → slot (ICMP path MTU reports name the SA by the
    /// SPI they quote, RFC 4301 §8.2.1).
    out_by_spi: FxMap<u32, u32>,
}

impl Sad {
    /// A SAD of these SAs in slots 0, 1, … (tests and the initial config).
    /// Inbound keys ([`InboundKey`]) must be unique (checked by config
    /// validation; a duplicate keeps the first).
    pub fn new(outbound: Vec<OutboundSa>, inbound: Vec<InboundEntry>) -> Sad {
        Sad::from_slots(outbound.into_iter().map(|s| Some(Arc::new(s))).collect(), inbound.into_iter().map(|e| Some(Arc::new(e))).collect())
    }

    /// A SAD of these slots; builds the index of the inbound ones (a
    /// duplicate key keeps the first slot).
    pub fn from_slots(outbound: Vec<Option<Arc<OutboundSa>>>, inbound: Vec<Option<Arc<InboundEntry>>>) -> Sad {
        let mut sad = Sad {
            outbound: Vec::new(),
            inbound: Vec::new(),
            by_spi: FxMap::default(),
            by_spi_dst: FxMap::with_capacity_and_hasher(inbound.len(), Default::default()),
            out_by_spi: FxMap::with_capacity_and_hasher(outbound.len(), Default::default()),
        };
        for (i, o) in outbound.iter().enumerate() {
            if let Some(o) = o {
                sad.out_by_spi.entry(o.spi).or_insert(i as u32);
            }
        }
        sad.outbound = outbound;
        for (i, e) in inbound.iter().enumerate() {
            if let Some(e) = e {
                match InboundKey::of(&e.sa) {
                    InboundKey::Spi(spi) => sad.by_spi.entry(spi).or_insert(i as u32),
                    InboundKey::SpiDst(spi, dst) => sad.by_spi_dst.entry((spi, dst)).or_insert(i as u32),
                };
            }
        }
        sad.inbound = inbound;
        sad
    }

    /// Puts `sa` in outbound slot `slot` (growing the list), replacing what
    /// was there (control thread).
    pub fn set_outbound(&mut self, slot: usize, sa: Option<Arc<OutboundSa>>) {
        if self.outbound.len() <= slot {
            self.outbound.resize(slot + 1, None);
        }
        if let Some(old) = &self.outbound[slot] {
            if self.out_by_spi.get(&old.spi) == Some(&(slot as u32)) {
                self.out_by_spi.remove(&old.spi);
            }
        }
        if let Some(new) = &sa {
            self.out_by_spi.insert(new.spi, slot as u32);
        }
        self.outbound[slot] = sa;
    }

    /// Slot of the outbound SA with SPI `spi` (one hash lookup; SPI 0
    /// never matches). Outbound SPIs are unique (config validation and the
    /// control socket); during a rekey the SA installed last has it.
    #[inline]
    pub fn outbound_by_spi(&self, spi: u32) -> Option<usize> {
        if spi == 0 {
            return None;
        }
        self.out_by_spi.get(&spi).map(|&s| s as usize)
    }

    /// Puts `e` in inbound slot `slot` (growing the list) and indexes its
    /// key; `None` empties the slot and drops its key from the index if it
    /// pointed there (control thread). A new entry with the key of another
    /// slot's takes the key over (a reload replacing an SA in place).
    pub fn set_inbound(&mut self, slot: usize, e: Option<Arc<InboundEntry>>) {
        if self.inbound.len() <= slot {
            self.inbound.resize(slot + 1, None);
        }
        if let Some(old) = &self.inbound[slot] {
            match InboundKey::of(&old.sa) {
                InboundKey::Spi(spi) => {
                    if self.by_spi.get(&spi) == Some(&(slot as u32)) {
                        self.by_spi.remove(&spi);
                    }
                }
                InboundKey::SpiDst(spi, dst) => {
                    if self.by_spi_dst.get(&(spi, dst)) == Some(&(slot as u32)) {
                        self.by_spi_dst.remove(&(spi, dst));
                    }
                }
            }
        }
        if let Some(new) = &e {
            match InboundKey::of(&new.sa) {
                InboundKey::Spi(spi) => self.by_spi.insert(spi, slot as u32),
                InboundKey::SpiDst(spi, dst) => self.by_spi_dst.insert((spi, dst), slot as u32),
            };
        }
        self.inbound[slot] = e;
    }

    /// The outbound SA in `slot`, if any.
    #[inline]
    pub fn outbound_at(&self, slot: usize) -> Option<&OutboundSa> {
        self.outbound.get(slot).and_then(|s| s.as_deref())
    }

    /// The inbound SA in `slot`, if any.
    #[inline]
    pub fn inbound_at(&self, slot: usize) -> Option<&InboundEntry> {
        self.inbound.get(slot).and_then(|s| s.as_deref())
    }

    /// Every outbound SA with its slot.
    pub fn outbound_sas(&self) -> impl Iterator<Item = (usize, &OutboundSa)> {
        self.outbound.iter().enumerate().filter_map(|(i, s)| s.as_deref().map(|s| (i, s)))
    }

    /// Every inbound SA with its slot.
    pub fn inbound_sas(&self) -> impl Iterator<Item = (usize, &InboundEntry)> {
        self.inbound.iter().enumerate().filter_map(|(i, s)| s.as_deref().map(|s| (i, s)))
    }

    /// Slot of the inbound SA for an ESP packet with SPI `spi` and outer
    /// destination `dst` (RFC 4301 §4.4.2): the tunnel-mode SA keyed by
    /// (`spi`, `dst`), else the transport-mode SA with `spi`. SPI 0 never
    /// matches (RFC 4303 §2.1). At most two hash lookups; no allocation.
    #[inline]
    pub fn inbound_lookup(&self, spi: u32, dst: IpAddr) -> Option<usize> {
        if spi == 0 {
            return None;
        }
        self.by_spi_dst.get(&(spi, dst)).or_else(|| self.by_spi.get(&spi)).map(|&s| s as usize)
    }

    /// Slot of the inbound transport-mode SA with SPI `spi` (SPI 0 never
    /// matches).
    #[inline]
    pub fn inbound_transport(&self, spi: u32) -> Option<usize> {
        if spi == 0 {
            return None;
        }
        self.by_spi.get(&spi).map(|&s| s as usize)
    }

    /// Inbound SAs indexed (transport by SPI, tunnel by (SPI, destination)).
    pub fn inbound_indexed(&self) -> usize {
        self.by_spi.len() + self.by_spi_dst.len()
    }
}
