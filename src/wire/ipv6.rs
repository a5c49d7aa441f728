//! IPv6 headers (RFC 8200): a checked view of the fixed header, a bounded
//! walk over the extension headers to the upper-layer header (or ESP), and
//! in-place writers.
//!
//! The extension-header walk (RFC 8200 §4) follows Hop-by-Hop Options (0,
//! only directly after the IPv6 header, §4.1), Routing (43), Fragment (44)
//! and Destination Options (60), at most [`MAX_EXT_HEADERS`] of them; any
//! other next header ends the walk and is the "upper layer" (ESP 50 is one
//! of them here: what follows it is encrypted). A non-first fragment ends
//! the walk at its Fragment header, since what follows is not a header.
//! Each header's length is checked with `etherparse` before it is skipped.

use super::{be16, be32, checksum, need, WireError};
use std::net::Ipv6Addr;

/// Version (4 bits), traffic class (8), flow label (20): first word.
pub const VER_TC_FLOW: usize = 0;
/// Payload length offset (bytes after the fixed header).
pub const PAYLOAD_LEN: usize = 4;
/// Next header offset.
pub const NEXT_HEADER: usize = 6;
/// Hop limit offset.
pub const HOP_LIMIT: usize = 7;
/// Source address offset.
pub const SRC: usize = 8;
/// Destination address offset.
pub const DST: usize = 24;
/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// The minimum link MTU of IPv6 (RFC 8200 §5).
pub const MIN_MTU: usize = 1280;

/// Next header: Hop-by-Hop Options (RFC 8200 §4.3).
pub const NH_HOP_BY_HOP: u8 = 0;
/// Next header: IPv6 in IP (tunnel-mode ESP carrying IPv6, RFC 4303 §3.1.2).
pub const NH_IPV6: u8 = 41;
/// Next header: Routing (RFC 8200 §4.4).
pub const NH_ROUTING: u8 = 43;
/// Next header: Fragment (RFC 8200 §4.5).
pub const NH_FRAGMENT: u8 = 44;
/// Bytes of a Fragment header (RFC 8200 §4.5).
pub const FRAGMENT_HEADER_LEN: usize = 8;
/// Next header: ICMPv6 (RFC 4443).
pub const NH_ICMPV6: u8 = 58;
/// Next header: Destination Options (RFC 8200 §4.6).
pub const NH_DEST_OPTS: u8 = 60;
/// Extension headers the walk follows before it gives up (`Malformed`):
/// RFC 8200 §4.1 recommends each at most once (Destination Options twice),
/// so 8 is generous for any legitimate packet.
pub const MAX_EXT_HEADERS: usize = 8;

/// What a Fragment header says (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentInfo {
    /// Fragment offset in 8-byte units.
    pub offset: u16,
    /// M flag: more fragments follow.
    pub more: bool,
    /// Identification.
    pub ident: u32,
    /// Offset of the Fragment header from the start of the IPv6 header
    /// (40 + the extension headers before it: the unfragmentable part).
    pub at: usize,
    /// Offset of the Next Header field that names the Fragment header: 6
    /// in the fixed header, or byte 0 of the last extension header before
    /// it (what reassembly rewrites when it removes the Fragment header).
    pub nh_at: usize,
}

/// Whether a node that refuses an IPv6 option tells the source (RFC 8200
/// §4.2: the two high-order bits of an unrecognized option's type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionReport {
    /// 01: discard the packet, send nothing.
    Never,
    /// 10 (and any malformed option): discard, send an ICMPv6 Parameter
    /// Problem whatever the destination.
    Always,
    /// 11: discard, send a Parameter Problem unless the destination is
    /// multicast.
    UnlessMulticast,
}

/// An option of a Hop-by-Hop or Destination Options header that a node
/// processing the header may not pass over (RFC 8200 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadOption {
    /// Offset from the start of the IPv6 header of the byte a Parameter
    /// Problem points at (RFC 4443 §3.4): the option's type, or its length
    /// byte when the option runs past its header.
    pub pointer: u32,
    /// ICMPv6 Parameter Problem code: 0 erroneous header field (an option
    /// running past its header; a Jumbo Payload option, RFC 2675 §3, as no
    /// packet here can be a jumbogram), 2 unrecognized option.
    pub code: u8,
    /// Whether the source is told.
    pub report: OptionReport,
}

/// The first option of the Hop-by-Hop or Destination Options header `h`
/// (the whole header, starting `at` bytes from the IPv6 header) that may
/// not be passed over, if any. Known: Pad1 (0), PadN (1), Tunnel
/// Encapsulation Limit (4, RFC 2473 §5.1), Router Alert (5, RFC 2711).
pub fn check_options(h: &[u8], at: usize) -> Option<BadOption> {
    let bad = |i: usize, code: u8, report: OptionReport| Some(BadOption { pointer: (at + i) as u32, code, report });
    let mut i = 2;
    while i < h.len() {
        let ty = h[i];
        if ty == 0 {
            i += 1;
            continue;
        }
        let Some(&len) = h.get(i + 1) else {
            return bad(i, 0, OptionReport::Always);
        };
        let end = i + 2 + len as usize;
        if end > h.len() {
            return bad(i + 1, 0, OptionReport::Always);
        }
        match (ty, ty >> 6) {
            (1 | 4 | 5, _) | (_, 0) => {}
            (0xc2, _) => return bad(i, 0, OptionReport::Always),
            (_, 1) => return bad(i, 2, OptionReport::Never),
            (_, 2) => return bad(i, 2, OptionReport::Always),
            _ => return bad(i, 2, OptionReport::UnlessMulticast),
        }
        i = end;
    }
    None
}

/// The end of the extension-header chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// Protocol of the header found (6 TCP, 17 UDP, 50 ESP, 58 ICMPv6, …);
    /// for a non-first fragment the Fragment header's next header.
    pub protocol: u8,
    /// Offset of that header from the start of the IPv6 header.
    pub offset: usize,
    /// The Fragment header, if the chain had one (RFC 8200 §4.5). The
    /// packet is a fragment unless offset is 0 and M is clear.
    pub fragment: Option<FragmentInfo>,
    /// A Routing header with Segments Left above 0 came before it (RFC
    /// 8200 §4.4): the packet's destination is one hop of a source route.
    pub routing_left: bool,
    /// The first option of a Hop-by-Hop or Destination Options header on
    /// the way that the packet's destination may not pass over
    /// ([`check_options`]); only the gateway's own packets are refused for
    /// it (a router does not read others' options, RFC 8200 §4).
    pub bad_option: Option<BadOption>,
}

impl UpperLayer {
    /// True if a Fragment header makes this packet a fragment (an "atomic
    /// fragment", offset 0 and M clear, is not one: RFC 8200 §4.5).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.fragment.is_some_and(|f| f.offset != 0 || f.more)
    }
    /// True if the header at `offset` is not the upper-layer header but the
    /// middle of a fragmented payload (offset ≠ 0).
    #[inline]
    pub fn is_later_fragment(&self) -> bool {
        self.fragment.is_some_and(|f| f.offset != 0)
    }
}

/// Walks the extension headers of the IPv6 payload `payload`, whose first
/// header is `next_header` (the fixed header's Next Header), to the first
/// header that is not Hop-by-Hop, Routing, Fragment or Destination Options.
/// Offsets in the result count from the start of the IPv6 header (the
/// fixed 40 bytes are assumed in front of `payload`).
///
/// Errors (`BadField` / `Truncated`): a header longer than the payload,
/// Hop-by-Hop anywhere but first or a second Fragment header (RFC 8200
/// §4.1), more than [`MAX_EXT_HEADERS`] headers.
pub fn walk_ext(next_header: u8, payload: &[u8]) -> Result<UpperLayer, WireError> {
    let mut nh = next_header;
    let mut at = 0usize;
    let mut fragment = None;
    let mut routing_left = false;
    let mut bad_option = None;
    // Offset (from the IPv6 header) of the Next Header field naming `nh`.
    let mut nh_at = NEXT_HEADER;
    for n in 0..=MAX_EXT_HEADERS {
        let rest = &payload[at..];
        match nh {
            NH_HOP_BY_HOP | NH_ROUTING | NH_DEST_OPTS => {
                if nh == NH_HOP_BY_HOP && n != 0 {
                    return Err(WireError::BadField { layer: "ipv6", field: "hop-by-hop header not first", value: (HEADER_LEN + at) as u32 });
                }
                let h = etherparse::Ipv6RawExtHeaderSlice::from_slice(rest).map_err(|e| WireError::Truncated {
                    layer: "ipv6 extension header",
                    offset: HEADER_LEN + at,
                    need: e.required_len,
                    have: rest.len(),
                })?;
                // Segments Left: byte 3 of a Routing header.
                routing_left |= nh == NH_ROUTING && h.slice().get(3).is_some_and(|&left| left != 0);
                if nh != NH_ROUTING && bad_option.is_none() {
                    bad_option = check_options(h.slice(), HEADER_LEN + at);
                }
                nh = h.next_header().0;
                nh_at = HEADER_LEN + at;
                at += h.slice().len();
            }
            NH_FRAGMENT => {
                // At most one (RFC 8200 §4.1): only a source fragments.
                if fragment.is_some() {
                    return Err(WireError::BadField { layer: "ipv6", field: "second fragment header", value: (HEADER_LEN + at) as u32 });
                }
                let h = etherparse::Ipv6FragmentHeaderSlice::from_slice(rest).map_err(|e| WireError::Truncated {
                    layer: "ipv6 fragment header",
                    offset: HEADER_LEN + at,
                    need: e.required_len,
                    have: rest.len(),
                })?;
                // Fields decoded here: etherparse 0.16's fragment_offset() and
                // more_fragments() read the wrong bits (offset = bytes 2..4 >> 3,
                // M = bit 0 of byte 3, RFC 8200 §4.5).
                let b = h.slice();
                let word = be16(b, 2);
                let f = FragmentInfo { offset: word >> 3, more: word & 1 != 0, ident: be32(b, 4), at: HEADER_LEN + at, nh_at };
                fragment = Some(f);
                nh = h.next_header().0;
                nh_at = HEADER_LEN + at;
                at += h.slice().len();
                if f.offset != 0 {
                    // What follows is the middle of the original payload.
                    return Ok(UpperLayer { protocol: nh, offset: HEADER_LEN + at, fragment, routing_left, bad_option });
                }
            }
            _ => return Ok(UpperLayer { protocol: nh, offset: HEADER_LEN + at, fragment, routing_left, bad_option }),
        }
    }
    Err(WireError::BadField { layer: "ipv6", field: "extension headers (more than 8)", value: MAX_EXT_HEADERS as u32 + 1 })
}

/// Where transport-mode ESP sits in an IPv6 packet (RFC 4303 §3.1.1):
/// the headers in front of it, the Next Header field that names it and the
/// protocol it protects. Offsets count from the start of the IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspPlacement {
    /// Offset of the Next Header field that names what follows the kept
    /// headers: 6 in the fixed header, or byte 0 of the last kept
    /// extension header. It names ESP (50) once ESP is in place.
    pub nh_at: usize,
    /// Offset where the ESP header starts (= 40 + the kept extension
    /// headers' length).
    pub at: usize,
    /// The protocol at `at`: what the trailer's Next Header carries on
    /// output, 50 (ESP) on input.
    pub next_header: u8,
}

/// Finds where transport-mode ESP goes in the IPv6 payload `payload`
/// (whose first header is `next_header`, the fixed header's Next Header;
/// the fixed 40 bytes are assumed in front of it).
///
/// RFC 4303 §3.1.1 puts ESP after Hop-by-Hop, Routing and Fragment headers
/// and lets Destination Options go either side. The placement here is the
/// one Linux (`ip6_find_1stfragopt`) and scapy use, so the packets
/// interoperate: Hop-by-Hop, Routing and Destination Options headers that
/// come before any Routing header stay in front; a Destination Options
/// header after a Routing header (meant for the final destination only) and
/// everything after it are protected. With `to_esp` the walk instead runs
/// over Hop-by-Hop / Routing / Destination Options headers until it meets
/// ESP (input: what a peer put in front of ESP), and anything else there is
/// an error.
///
/// Errors: a Fragment header on the way (`BadField`: transport mode
/// protects whole datagrams, a fragment must be reassembled first), the
/// errors of [`walk_ext`] (truncated header, Hop-by-Hop not first, more
/// than [`MAX_EXT_HEADERS`]), and with `to_esp` a chain that ends without
/// ESP.
pub fn esp_placement(next_header: u8, payload: &[u8], to_esp: bool) -> Result<EspPlacement, WireError> {
    let mut p = EspPlacement { nh_at: NEXT_HEADER, at: HEADER_LEN, next_header };
    let mut routing_seen = false;
    for n in 0..=MAX_EXT_HEADERS {
        let nh = p.next_header;
        match nh {
            super::ipv4::PROTO_ESP if to_esp => return Ok(p),
            NH_HOP_BY_HOP | NH_ROUTING | NH_DEST_OPTS => {
                if !to_esp && nh == NH_DEST_OPTS && routing_seen {
                    return Ok(p);
                }
                if nh == NH_HOP_BY_HOP && n != 0 {
                    return Err(WireError::BadField { layer: "ipv6", field: "hop-by-hop header not first", value: p.at as u32 });
                }
                let rest = &payload[p.at - HEADER_LEN..];
                let h = etherparse::Ipv6RawExtHeaderSlice::from_slice(rest).map_err(|e| WireError::Truncated {
                    layer: "ipv6 extension header",
                    offset: p.at,
                    need: e.required_len,
                    have: rest.len(),
                })?;
                routing_seen |= nh == NH_ROUTING;
                p = EspPlacement { nh_at: p.at, at: p.at + h.slice().len(), next_header: h.next_header().0 };
            }
            NH_FRAGMENT => return Err(WireError::BadField { layer: "ipv6", field: "fragment header before transport-mode ESP", value: p.at as u32 }),
            _ if to_esp => return Err(WireError::BadField { layer: "ipv6", field: "no ESP header after the extension headers", value: nh as u32 }),
            _ => return Ok(p),
        }
    }
    Err(WireError::BadField { layer: "ipv6", field: "extension headers (more than 8)", value: MAX_EXT_HEADERS as u32 + 1 })
}

/// Checked view of an IPv6 packet: version 6, the fixed header present and
/// `40 + payload length` bytes present (bytes after them, e.g. Ethernet
/// padding, are outside the view). Jumbograms (payload length 0 with a
/// Jumbo Payload option, RFC 2675) are not supported: a payload length of 0
/// is an empty payload.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<'a> {
    buf: &'a [u8],
}

impl<'a> Ipv6Packet<'a> {
    /// Validates version 6 and that the payload length fits in `buf`.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        let h = etherparse::Ipv6HeaderSlice::from_slice(buf).map_err(|_| {
            if buf.len() < HEADER_LEN {
                WireError::Truncated { layer: "ipv6", offset: 0, need: HEADER_LEN, have: buf.len() }
            } else {
                WireError::BadField { layer: "ipv6", field: "version", value: (buf[0] >> 4) as u32 }
            }
        })?;
        let total = HEADER_LEN + h.payload_length() as usize;
        need("ipv6", buf, total)?;
        Ok(Ipv6Packet { buf: &buf[..total] })
    }
    /// Traffic class (DS field ‖ ECN, RFC 8200 §7).
    pub fn traffic_class(&self) -> u8 {
        traffic_class(self.buf)
    }
    /// Flow label (20 bits, RFC 6437).
    pub fn flow_label(&self) -> u32 {
        be32(self.buf, VER_TC_FLOW) & 0x000f_ffff
    }
    /// Payload length: bytes after the fixed header.
    pub fn payload_len(&self) -> usize {
        be16(self.buf, PAYLOAD_LEN) as usize
    }
    /// 40 + payload length.
    pub fn total_len(&self) -> usize {
        self.buf.len()
    }
    /// Next header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.buf[NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buf[HOP_LIMIT]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        addr_at(self.buf, SRC)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        addr_at(self.buf, DST)
    }
    /// Bytes after the fixed header, up to the payload length.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..]
    }
    /// The whole packet (fixed header and payload).
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }
    /// The upper-layer header after the extension headers ([`walk_ext`]).
    pub fn upper_layer(&self) -> Result<UpperLayer, WireError> {
        walk_ext(self.next_header(), self.payload())
    }
    /// Source and destination ports when `upper` is a TCP or UDP header
    /// with at least 4 bytes, in a packet that is not a later fragment;
    /// else `None` (RFC 4301 §4.4.1.1 OPAQUE).
    pub fn ports(&self, upper: &UpperLayer) -> Option<(u16, u16)> {
        let p = upper.protocol;
        if (p == super::ipv4::PROTO_TCP || p == super::ipv4::PROTO_UDP) && !upper.is_later_fragment() {
            let l4 = self.buf.get(upper.offset..upper.offset + 4)?;
            Some((be16(l4, 0), be16(l4, 2)))
        } else {
            None
        }
    }
}

#[inline]
fn addr_at(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}

/// Traffic class of the IPv6 header at the start of `hdr` (0 if shorter
/// than 2 bytes).
#[inline]
pub fn traffic_class(hdr: &[u8]) -> u8 {
    match hdr {
        [a, b, ..] => (a << 4) | (b >> 4),
        _ => 0,
    }
}

/// Sets the traffic class of the IPv6 header at the start of `hdr` (no
/// checksum to update: IPv6 has none).
#[inline]
pub fn set_traffic_class(hdr: &mut [u8], tc: u8) {
    if hdr.len() < 2 {
        return;
    }
    hdr[0] = 0x60 | (tc >> 4);
    hdr[1] = (tc << 4) | (hdr[1] & 0x0f);
}

/// Decrements the hop limit of the IPv6 header at the start of `hdr`.
#[inline]
pub fn decrement_hop_limit(hdr: &mut [u8]) {
    if let Some(h) = hdr.get_mut(HOP_LIMIT) {
        *h = h.wrapping_sub(1);
    }
}

/// Writes the 40-byte fixed IPv6 header into `hdr[..40]` (no-op if shorter):
/// version 6, `traffic_class`, `flow_label` (low 20 bits), `payload_len`,
/// `next_header`, `hop_limit`, addresses.
#[allow(clippy::too_many_arguments)]
pub fn write_header(
    hdr: &mut [u8],
    traffic_class: u8,
    flow_label: u32,
    payload_len: u16,
    next_header: u8,
    hop_limit: u8,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
) {
    if hdr.len() < HEADER_LEN {
        return;
    }
    let w0 = (6u32 << 28) | ((traffic_class as u32) << 20) | (flow_label & 0x000f_ffff);
    hdr[VER_TC_FLOW..VER_TC_FLOW + 4].copy_from_slice(&w0.to_be_bytes());
    hdr[PAYLOAD_LEN..PAYLOAD_LEN + 2].copy_from_slice(&payload_len.to_be_bytes());
    hdr[NEXT_HEADER] = next_header;
    hdr[HOP_LIMIT] = hop_limit;
    hdr[SRC..SRC + 16].copy_from_slice(&src.octets());
    hdr[DST..DST + 16].copy_from_slice(&dst.octets());
}

/// Checksum of an upper-layer message (UDP, ICMPv6, …) over the IPv6
/// pseudo-header (RFC 8200 §8.1: source, destination, upper-layer length as
/// 32 bits, three zero bytes, next header) and `data` (the message with its
/// checksum field zero), as placed in the header field. A UDP checksum that
/// computes to 0 must be sent as 0xffff (RFC 8200 §8.1, RFC 768); see
/// [`udp_checksum`].
pub fn upper_layer_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, data: &[u8]) -> u16 {
    let mut ph = [0u8; 40];
    ph[..16].copy_from_slice(&src.octets());
    ph[16..32].copy_from_slice(&dst.octets());
    ph[32..36].copy_from_slice(&(data.len() as u32).to_be_bytes());
    ph[39] = next_header;
    !checksum::add(checksum::sum(&ph), checksum::sum(data))
}

/// True if `data` (an upper-layer message with its checksum field as
/// received) verifies against the pseudo-header.
pub fn upper_layer_checksum_ok(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, data: &[u8]) -> bool {
    upper_layer_checksum(src, dst, next_header, data) == 0
}

/// The UDP checksum of `udp` (header with checksum 0 + payload) over IPv6:
/// [`upper_layer_checksum`] with 0 sent as 0xffff (RFC 8200 §8.1: IPv6
/// UDP always carries a checksum).
pub fn udp_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, udp: &[u8]) -> u16 {
    match upper_layer_checksum(src, dst, super::ipv4::PROTO_UDP, udp) {
        0 => 0xffff,
        c => c,
    }
}

/// True for multicast addresses (ff00::/8, RFC 4291 §2.7).
#[inline]
pub fn is_multicast(a: &Ipv6Addr) -> bool {
    a.octets()[0] == 0xff
}

/// True for link-local unicast addresses (fe80::/10, RFC 4291 §2.5.6):
/// valid on one link only, never forwarded off it.
#[inline]
pub fn is_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Fixtures {
        packets: Vec<Fixture>,
    }
    #[derive(serde::Deserialize)]
    pub(crate) struct Fixture {
        pub name: String,
        pub hex: String,
        #[serde(default)]
        pub upper: Option<u8>,
        #[serde(default)]
        pub offset: Option<usize>,
        #[serde(default)]
        pub fragment: Option<Frag>,
        #[serde(default)]
        pub error: bool,
        #[serde(default)]
        pub udp_checksum: Option<u16>,
    }
    #[derive(serde::Deserialize)]
    pub(crate) struct Frag {
        offset: u16,
        more: bool,
        ident: u32,
    }

    /// The scapy-built packets of tests/vectors/ipv6.json
    /// (tests/vectors/gen_ipv6.py).
    pub(crate) fn fixtures() -> Vec<Fixture> {
        let f: Fixtures = serde_json::from_str(include_str!("../../tests/vectors/ipv6.json")).unwrap();
        assert!(f.packets.len() >= 16);
        f.packets
    }

    pub(crate) fn fixture(name: &str) -> Vec<u8> {
        hex::decode(&fixtures().into_iter().find(|f| f.name == name).unwrap().hex).unwrap()
    }

    #[test]
    fn link_local_is_fe80_slash_10() {
        for (a, want) in [("fe80::1", true), ("febf:ffff::1", true), ("fe81::1", true), ("fec0::1", false), ("fe7f::1", false), ("ff02::1", false), ("2001:db8::1", false), ("::1", false)] {
            assert_eq!(is_link_local(&a.parse().expect("address")), want, "{a}");
        }
    }

    #[test]
    fn walks_scapy_packets_to_the_upper_layer() {
        let mut walked = 0;
        for f in fixtures() {
            let b = hex::decode(&f.hex).unwrap();
            let r = Ipv6Packet::new_checked(&b).and_then(|p| p.upper_layer());
            if f.error {
                assert!(r.is_err(), "{}: accepted a malformed chain: {r:?}", f.name);
                continue;
            }
            let u = r.unwrap_or_else(|e| panic!("{}: {e}", f.name));
            assert_eq!(Some(u.protocol), f.upper, "{}", f.name);
            assert_eq!(Some(u.offset), f.offset, "{}", f.name);
            match (&f.fragment, u.fragment) {
                (None, None) => {}
                (Some(w), Some(g)) => assert_eq!((w.offset, w.more, w.ident), (g.offset, g.more, g.ident), "{}", f.name),
                (w, g) => panic!("{}: fragment {:?} vs {g:?}", f.name, w.as_ref().map(|w| w.offset)),
            }
            walked += 1;
        }
        assert!(walked >= 10);
    }

    #[test]
    fn esp_after_extension_headers_and_fragments() {
        let b = fixture("esp_after_hbh_dst_rt");
        let p = Ipv6Packet::new_checked(&b).unwrap();
        let u = p.upper_layer().unwrap();
        assert_eq!((u.protocol, u.offset, u.is_fragment()), (50, 88, false));
        assert_eq!(&b[u.offset..u.offset + 4], &0x1001u32.to_be_bytes(), "SPI at the offset");
        let b = fixture("esp_first_fragment");
        let u = Ipv6Packet::new_checked(&b).unwrap().upper_layer().unwrap();
        assert!(u.is_fragment() && !u.is_later_fragment());
        let f = u.fragment.unwrap();
        assert_eq!((f.at, f.nh_at, b[f.nh_at]), (40, NEXT_HEADER, NH_FRAGMENT));
        let b = fixture("later_fragment");
        let p = Ipv6Packet::new_checked(&b).unwrap();
        let u = p.upper_layer().unwrap();
        assert!(u.is_fragment() && u.is_later_fragment());
        let f = u.fragment.unwrap();
        assert_eq!((f.at, f.nh_at, b[f.nh_at]), (40, NEXT_HEADER, NH_FRAGMENT));
        assert_eq!(p.ports(&u), None);
    }

    #[test]
    fn ports_after_destination_options() {
        let b = fixture("udp_after_dstopt");
        let p = Ipv6Packet::new_checked(&b).unwrap();
        let u = p.upper_layer().unwrap();
        assert_eq!(p.ports(&u), Some((40000, 5001)));
    }

    #[test]
    fn udp_checksum_matches_scapy() {
        for f in fixtures().into_iter().filter(|f| f.udp_checksum.is_some()) {
            let b = hex::decode(&f.hex).unwrap();
            let p = Ipv6Packet::new_checked(&b).unwrap();
            let off = p.upper_layer().unwrap().offset;
            let mut udp = b[off..].to_vec();
            assert!(upper_layer_checksum_ok(&p.src(), &p.dst(), 17, &udp), "{}: scapy's checksum verifies", f.name);
            udp[6..8].copy_from_slice(&[0, 0]);
            assert_eq!(Some(udp_checksum(&p.src(), &p.dst(), &udp)), f.udp_checksum, "{}", f.name);
        }
    }

    #[test]
    fn rejects_truncated_and_wrong_version() {
        let b = fixture("esp_direct");
        assert!(Ipv6Packet::new_checked(&b[..39]).is_err());
        assert!(Ipv6Packet::new_checked(&b[..b.len() - 1]).is_err(), "payload length past the end");
        let mut v = b.clone();
        v[0] = 0x45;
        assert!(Ipv6Packet::new_checked(&v).is_err());
        // Ethernet padding after the packet is outside the view.
        let mut padded = b.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(Ipv6Packet::new_checked(&padded).unwrap().total_len(), b.len());
    }

    #[test]
    fn writers() {
        let mut h = [0u8; 40];
        let (s, d): (Ipv6Addr, Ipv6Addr) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
        write_header(&mut h, 0xb9, 0xfffff, 100, 50, 64, &s, &d);
        assert_eq!(&h[..4], &[0x6b, 0x9f, 0xff, 0xff]);
        assert_eq!(traffic_class(&h), 0xb9);
        set_traffic_class(&mut h, 0x03);
        assert_eq!(&h[..4], &[0x60, 0x3f, 0xff, 0xff], "flow label kept");
        decrement_hop_limit(&mut h);
        let mut pkt = h.to_vec();
        pkt.extend_from_slice(&[0; 100]);
        let p = Ipv6Packet::new_checked(&pkt).unwrap();
        assert_eq!((p.hop_limit(), p.next_header(), p.src(), p.dst(), p.flow_label()), (63, 50, s, d, 0xfffff));
    }
}
