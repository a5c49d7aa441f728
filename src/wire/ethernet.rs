//! Ethernet II frames (IEEE 802.3 with an EtherType).

use super::{be16, need, WireError};

/// Destination MAC offset.
pub const DST: usize = 0;
/// Source MAC offset.
pub const SRC: usize = 6;
/// EtherType offset.
pub const ETHERTYPE: usize = 12;
/// Header length in bytes.
pub const HEADER_LEN: usize = 14;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// True if `mac` can be a station's own address: unicast (I/G bit clear,
/// IEEE 802 §8.2) and not all zeros. What the gateway answers to or learns.
#[inline]
pub fn is_station(mac: &[u8; 6]) -> bool {
    mac[0] & 1 == 0 && *mac != [0; 6]
}

/// Checked view of an Ethernet II header at the start of a frame.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<'a> {
    buf: &'a [u8],
}

impl<'a> EthernetFrame<'a> {
    /// Checks that `buf` holds at least the 14-byte header.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        need("ethernet", buf, HEADER_LEN)?;
        Ok(EthernetFrame { buf })
    }

    /// Destination MAC.
    pub fn dst(&self) -> [u8; 6] {
        self.buf[DST..DST + 6].try_into().unwrap_or([0; 6])
    }

    /// Source MAC.
    pub fn src(&self) -> [u8; 6] {
        self.buf[SRC..SRC + 6].try_into().unwrap_or([0; 6])
    }

    /// EtherType.
    pub fn ethertype(&self) -> u16 {
        be16(self.buf, ETHERTYPE)
    }

    /// Bytes after the header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..]
    }
}

/// Writes an Ethernet II header into `buf[..14]`. `buf` must be at least 14
/// bytes (callers reserve it); shorter buffers are left untouched.
pub fn write_header(buf: &mut [u8], dst: &[u8; 6], src: &[u8; 6], ethertype: u16) {
    if buf.len() < HEADER_LEN {
        return;
    }
    buf[DST..DST + 6].copy_from_slice(dst);
    buf[SRC..SRC + 6].copy_from_slice(src);
    buf[ETHERTYPE..ETHERTYPE + 2].copy_from_slice(&ethertype.to_be_bytes());
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(mac: &[u8; 6]) -> String {
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5])
}
