//! The Security Association Database (RFC 4301 §4.4.2): outbound SAs by
//! index (the outbound SPD points at them) and inbound SAs by SPI.

use super::spd::{FlowKey, Selector};
use crate::esp::{InboundSa, OutboundSa};
use std::collections::HashMap;
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

/// The SAD: SAs in slots. A slot index is what the SPD's PROTECT actions,
/// the workers' per-SA state and the crypto ops' tags name; a removed SA
/// leaves its slot empty (`None`) and the control thread reuses it for a
/// later SA (which has another [`OutboundSa::id`], so stale references are
/// recognised). Each SA is behind an `Arc`, so a new snapshot copies
/// pointers, not SAs.
#[derive(Debug, Default, Clone)]
pub struct Sad {
    /// Outbound SAs by slot.
    pub outbound: Vec<Option<Arc<OutboundSa>>>,
    /// Inbound SAs by slot.
    pub inbound: Vec<Option<Arc<InboundEntry>>>,
    by_spi: HashMap<u32, u32>,
}

impl Sad {
    /// A SAD of these SAs in slots 0, 1, … (tests and the initial config).
    /// SPIs of inbound SAs must be unique (checked by config validation; a
    /// duplicate keeps the first).
    pub fn new(outbound: Vec<OutboundSa>, inbound: Vec<InboundEntry>) -> Sad {
        Sad::from_slots(outbound.into_iter().map(|s| Some(Arc::new(s))).collect(), inbound.into_iter().map(|e| Some(Arc::new(e))).collect())
    }

    /// A SAD of these slots; builds the SPI index of the inbound ones (a
    /// duplicate SPI keeps the first slot).
    pub fn from_slots(outbound: Vec<Option<Arc<OutboundSa>>>, inbound: Vec<Option<Arc<InboundEntry>>>) -> Sad {
        let mut by_spi = HashMap::with_capacity(inbound.len());
        for (i, e) in inbound.iter().enumerate() {
            if let Some(e) = e {
                by_spi.entry(e.sa.spi).or_insert(i as u32);
            }
        }
        Sad { outbound, inbound, by_spi }
    }

    /// Puts `sa` in outbound slot `slot` (growing the list), replacing what
    /// was there (control thread).
    pub fn set_outbound(&mut self, slot: usize, sa: Option<Arc<OutboundSa>>) {
        if self.outbound.len() <= slot {
            self.outbound.resize(slot + 1, None);
        }
        self.outbound[slot] = sa;
    }

    /// Puts `e` in inbound slot `slot` (growing the list) and indexes its
    /// SPI; `None` empties the slot and drops its SPI from the index if it
    /// pointed there (control thread).
    pub fn set_inbound(&mut self, slot: usize, e: Option<Arc<InboundEntry>>) {
        if self.inbound.len() <= slot {
            self.inbound.resize(slot + 1, None);
        }
        if let Some(old) = &self.inbound[slot] {
            if self.by_spi.get(&old.sa.spi) == Some(&(slot as u32)) {
                self.by_spi.remove(&old.sa.spi);
            }
        }
        if let Some(new) = &e {
            self.by_spi.insert(new.sa.spi, slot as u32);
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

    /// Slot of the inbound SA with this SPI. SPI 0 never matches
    /// (RFC 4303 §2.1).
    #[inline]
    pub fn inbound_by_spi(&self, spi: u32) -> Option<usize> {
        if spi == 0 {
            return None;
        }
        self.by_spi.get(&spi).map(|&s| s as usize)
    }
}
