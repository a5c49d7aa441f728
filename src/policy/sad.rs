//! The Security Association Database (RFC 4301 §4.4.2): outbound SAs by
//! index (the outbound SPD points at them) and inbound SAs by SPI.

use super::spd::{FlowKey, Selector};
use crate::esp::{InboundSa, OutboundSa};
use std::collections::HashMap;

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

/// The SAD.
#[derive(Debug, Default)]
pub struct Sad {
    /// Outbound SAs.
    pub outbound: Vec<OutboundSa>,
    /// Inbound SAs.
    pub inbound: Vec<InboundEntry>,
    by_spi: HashMap<u32, usize>,
}

impl Sad {
    /// Builds the SAD and its SPI index. SPIs of inbound SAs must be unique
    /// (checked by config validation; a duplicate keeps the first).
    pub fn new(outbound: Vec<OutboundSa>, inbound: Vec<InboundEntry>) -> Sad {
        let mut by_spi = HashMap::with_capacity(inbound.len());
        for (i, e) in inbound.iter().enumerate() {
            by_spi.entry(e.sa.spi).or_insert(i);
        }
        Sad { outbound, inbound, by_spi }
    }

    /// Index of the inbound SA with this SPI. SPI 0 never matches
    /// (RFC 4303 §2.1).
    #[inline]
    pub fn inbound_by_spi(&self, spi: u32) -> Option<usize> {
        if spi == 0 {
            return None;
        }
        self.by_spi.get(&spi).copied()
    }
}
