//! The UDP header (RFC 768), as ESP-in-UDP encapsulation uses it (RFC 3948).

use super::{be16, need, WireError};

/// Source port offset.
pub const SRC_PORT: usize = 0;
/// Destination port offset.
pub const DST_PORT: usize = 2;
/// Length offset (header + payload).
pub const LENGTH: usize = 4;
/// Checksum offset.
pub const CHECKSUM: usize = 6;
/// UDP header length.
pub const HEADER_LEN: usize = 8;
/// The IANA port of IKE and ESP-in-UDP behind NAT (RFC 3948 §2).
pub const NATT_PORT: u16 = 4500;

/// Checked view of a UDP datagram (header and payload).
#[derive(Debug, Clone, Copy)]
pub struct UdpPacket<'a> {
    buf: &'a [u8],
}

impl<'a> UdpPacket<'a> {
    /// Checks that the 8-byte header is present. The length and checksum
    /// fields are not checked (RFC 3948 §3.1.2: the receiver must not rely
    /// on the checksum of ESP-in-UDP); [`UdpPacket::payload`] is everything
    /// after the header up to the end of `buf` (the IP payload).
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        need("udp", buf, HEADER_LEN)?;
        Ok(UdpPacket { buf })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buf, SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buf, DST_PORT)
    }
    /// Length field as sent.
    pub fn length(&self) -> u16 {
        be16(self.buf, LENGTH)
    }
    /// Checksum field as sent.
    pub fn checksum(&self) -> u16 {
        be16(self.buf, CHECKSUM)
    }
    /// Bytes after the header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..]
    }
}

/// Writes a UDP header into `buf[..8]` (no-op if shorter): ports, `length`
/// (header + payload) and checksum 0 ("no checksum", which RFC 3948 §3.1.2
/// says the sender SHOULD use for ESP-in-UDP over IPv4).
pub fn write_header(buf: &mut [u8], src_port: u16, dst_port: u16, length: u16) {
    if buf.len() < HEADER_LEN {
        return;
    }
    buf[SRC_PORT..SRC_PORT + 2].copy_from_slice(&src_port.to_be_bytes());
    buf[DST_PORT..DST_PORT + 2].copy_from_slice(&dst_port.to_be_bytes());
    buf[LENGTH..LENGTH + 2].copy_from_slice(&length.to_be_bytes());
    buf[CHECKSUM..CHECKSUM + 2].copy_from_slice(&[0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read() {
        let mut b = [0xaau8; 12];
        write_header(&mut b, 4500, 4501, 12);
        assert_eq!(&b[..8], &[0x11, 0x94, 0x11, 0x95, 0, 12, 0, 0]);
        let u = UdpPacket::new_checked(&b).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.length(), u.checksum()), (4500, 4501, 12, 0));
        assert_eq!(u.payload(), &[0xaa; 4]);
        assert!(UdpPacket::new_checked(&b[..7]).is_err());
    }
}
