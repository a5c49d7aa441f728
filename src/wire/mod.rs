//! Checked zero-copy views of the headers the gateway reads and writes.
//!
//! Contract: untrusted bytes enter only through a view's `new_checked`, which
//! validates every length the accessors rely on, so accessors never panic.
//! Field offsets are named constants. Builders write into `&mut [u8]` in place.

pub mod arp;
pub mod checksum;
pub mod esp;
pub mod ethernet;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod udp;

/// A header failed its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the header (or its declared length) needs.
    #[error("{layer}: truncated at offset {offset}: need {need} bytes, have {have}")]
    Truncated {
        /// Which header.
        layer: &'static str,
        /// Offset of the header in the buffer handed to `new_checked`.
        offset: usize,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A field holds a value the header does not allow.
    #[error("{layer}: bad {field}: {value}")]
    BadField {
        /// Which header.
        layer: &'static str,
        /// Which field.
        field: &'static str,
        /// The value seen.
        value: u32,
    },
}

pub(crate) fn need(layer: &'static str, buf: &[u8], need: usize) -> Result<(), WireError> {
    if buf.len() < need {
        Err(WireError::Truncated { layer, offset: 0, need, have: buf.len() })
    } else {
        Ok(())
    }
}

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
