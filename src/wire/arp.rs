//! ARP for IPv4 over Ethernet (RFC 826).

use super::{be16, need, WireError};
use std::net::Ipv4Addr;

/// Hardware type offset.
pub const HTYPE: usize = 0;
/// Protocol type offset.
pub const PTYPE: usize = 2;
/// Hardware address length offset.
pub const HLEN: usize = 4;
/// Protocol address length offset.
pub const PLEN: usize = 5;
/// Operation offset.
pub const OPER: usize = 6;
/// Sender hardware address offset.
pub const SHA: usize = 8;
/// Sender protocol address offset.
pub const SPA: usize = 14;
/// Target hardware address offset.
pub const THA: usize = 18;
/// Target protocol address offset.
pub const TPA: usize = 24;
/// Length of an Ethernet/IPv4 ARP packet.
pub const LEN: usize = 28;
/// Operation: request.
pub const OP_REQUEST: u16 = 1;
/// Operation: reply.
pub const OP_REPLY: u16 = 2;

/// Checked view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy)]
pub struct ArpPacket<'a> {
    buf: &'a [u8],
}

impl<'a> ArpPacket<'a> {
    /// Checks length 28, hardware type 1 (Ethernet), protocol 0x0800,
    /// address lengths 6 and 4.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        need("arp", buf, LEN)?;
        if be16(buf, HTYPE) != 1 || be16(buf, PTYPE) != 0x0800 || buf[HLEN] != 6 || buf[PLEN] != 4 {
            return Err(WireError::BadField { layer: "arp", field: "htype/ptype/hlen/plen", value: be16(buf, HTYPE) as u32 });
        }
        Ok(ArpPacket { buf })
    }
    /// Operation (1 request, 2 reply).
    pub fn operation(&self) -> u16 {
        be16(self.buf, OPER)
    }
    /// Sender MAC.
    pub fn sender_mac(&self) -> [u8; 6] {
        self.buf[SHA..SHA + 6].try_into().unwrap_or([0; 6])
    }
    /// Sender IPv4 address.
    pub fn sender_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.buf[SPA], self.buf[SPA + 1], self.buf[SPA + 2], self.buf[SPA + 3])
    }
    /// Target MAC.
    pub fn target_mac(&self) -> [u8; 6] {
        self.buf[THA..THA + 6].try_into().unwrap_or([0; 6])
    }
    /// Target IPv4 address.
    pub fn target_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.buf[TPA], self.buf[TPA + 1], self.buf[TPA + 2], self.buf[TPA + 3])
    }
}

/// Writes an Ethernet/IPv4 ARP request (RFC 826) into `arp[..28]`: "who
/// has `target_ip`, tell `our_ip` at `our_mac`", target hardware address
/// `target_mac` (zero for a broadcast request, the known MAC for a unicast
/// probe). Returns [`LEN`], or `None` if `arp` is shorter.
pub fn write_request(arp: &mut [u8], our_mac: &[u8; 6], our_ip: Ipv4Addr, target_mac: &[u8; 6], target_ip: Ipv4Addr) -> Option<usize> {
    let a = arp.get_mut(..LEN)?;
    a[HTYPE..HTYPE + 2].copy_from_slice(&1u16.to_be_bytes());
    a[PTYPE..PTYPE + 2].copy_from_slice(&0x0800u16.to_be_bytes());
    a[HLEN] = 6;
    a[PLEN] = 4;
    a[OPER..OPER + 2].copy_from_slice(&OP_REQUEST.to_be_bytes());
    a[SHA..SHA + 6].copy_from_slice(our_mac);
    a[SPA..SPA + 4].copy_from_slice(&our_ip.octets());
    a[THA..THA + 6].copy_from_slice(target_mac);
    a[TPA..TPA + 4].copy_from_slice(&target_ip.octets());
    Some(LEN)
}

/// Turns the checked ARP request in `arp[..28]` into the reply saying that
/// `our_ip` is at `our_mac`, in place: operation 2, sender ↔ target swapped.
pub fn make_reply_in_place(arp: &mut [u8], our_mac: &[u8; 6], our_ip: Ipv4Addr) {
    if arp.len() < LEN {
        return;
    }
    arp[OPER..OPER + 2].copy_from_slice(&OP_REPLY.to_be_bytes());
    arp.copy_within(SHA..SHA + 10, THA); // old sender MAC+IP become target
    arp[SHA..SHA + 6].copy_from_slice(our_mac);
    arp[SPA..SPA + 4].copy_from_slice(&our_ip.octets());
}
