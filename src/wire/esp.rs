//! The ESP header (RFC 4303 §2): SPI and sequence number. The IV, payload,
//! trailer and ICV are interpreted by `esp/` with the SA's transform.

use super::{be32, need, WireError};

/// SPI offset.
pub const SPI: usize = 0;
/// Sequence number offset.
pub const SEQ: usize = 4;
/// ESP header length (SPI + sequence number).
pub const HEADER_LEN: usize = 8;

/// Checked view of an ESP packet (header and everything after it).
#[derive(Debug, Clone, Copy)]
pub struct EspPacket<'a> {
    buf: &'a [u8],
}

impl<'a> EspPacket<'a> {
    /// Checks that the 8-byte header is present.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        need("esp", buf, HEADER_LEN)?;
        Ok(EspPacket { buf })
    }
    /// Security Parameters Index.
    pub fn spi(&self) -> u32 {
        be32(self.buf, SPI)
    }
    /// Low 32 bits of the sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.buf, SEQ)
    }
    /// Everything after the header (IV, ciphertext, ICV).
    pub fn body(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..]
    }
}

/// Writes SPI and sequence number into `buf[..8]` (no-op if shorter).
pub fn write_header(buf: &mut [u8], spi: u32, seq: u32) {
    if buf.len() < HEADER_LEN {
        return;
    }
    buf[SPI..SPI + 4].copy_from_slice(&spi.to_be_bytes());
    buf[SEQ..SEQ + 4].copy_from_slice(&seq.to_be_bytes());
}
