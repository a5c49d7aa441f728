//! Building generated packets: Ethernet + IPv4 (or IPv6) + UDP + the
//! [`super::payload`] header + zeros, with valid IPv4 header and UDP
//! checksums (RFC 791, RFC 768; RFC 8200 §8.1 for UDP over IPv6).
//!
//! One template frame per packet size is built at start-up; a packet is the
//! template copied into a reused [`PktBuf`] with the source port, payload
//! header and UDP checksum patched in. The UDP checksum is the template's
//! partial sum (pseudo-header + header + zero payload, source port 0) plus
//! the patched words (RFC 1071 §2 (B)), so nothing per packet sums more than
//! 30 bytes.

use super::payload::{self, Payload};
use super::PktgenError;
use crate::io::PktBuf;
use crate::wire::{checksum, ethernet, ipv4, ipv6, udp};
use std::net::IpAddr;

/// Smallest and largest `--size` (plaintext IP packet bytes).
pub const SIZE_RANGE: std::ops::RangeInclusive<usize> = 64..=1500;
/// IMIX: 7:4:1 of 64, 576 and 1500-byte packets, in this fixed order (so a
/// run is reproducible and every 12 consecutive packets hold the mix).
pub const IMIX: [usize; 12] = [64, 576, 64, 64, 576, 64, 1500, 64, 576, 64, 64, 576];
/// TTL / hop limit of generated packets.
pub const TTL: u8 = 64;

/// Packet sizes of a run: one size, or the [`IMIX`] pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Every packet this many bytes of IP packet.
    Fixed(usize),
    /// The [`IMIX`] pattern.
    Imix,
}

impl std::str::FromStr for Size {
    type Err = String;
    /// `imix` or a number of bytes in [`SIZE_RANGE`].
    fn from_str(s: &str) -> Result<Size, String> {
        if s.eq_ignore_ascii_case("imix") {
            return Ok(Size::Imix);
        }
        let n: usize = s.parse().map_err(|_| format!("size {s:?}: a number of bytes or `imix`"))?;
        if !SIZE_RANGE.contains(&n) {
            return Err(format!("size {n}: must be {}..={} bytes (IP packet)", SIZE_RANGE.start(), SIZE_RANGE.end()));
        }
        Ok(Size::Fixed(n))
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Size::Fixed(n) => write!(f, "{n}"),
            Size::Imix => f.write_str("imix"),
        }
    }
}

/// Addresses and ports of the generated flows: flow *i* (0-based) is
/// `src:sport+i → dst:dport`, all other fields equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpec {
    /// Ethernet source address.
    pub src_mac: [u8; 6],
    /// Ethernet destination address (the next hop's).
    pub dst_mac: [u8; 6],
    /// IP source address (IPv4 or IPv6, the family of `dst`).
    pub src: IpAddr,
    /// IP destination address.
    pub dst: IpAddr,
    /// UDP source port of flow 0.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// Number of flows, >= 1; `sport + flows - 1` must fit in 16 bits.
    pub flows: u32,
}

/// One template frame (one packet size).
#[derive(Debug, Clone)]
struct Template {
    frame: Vec<u8>,
    /// Offset of the UDP header in the frame.
    udp: usize,
    /// One's-complement sum of pseudo-header + UDP header (source port and
    /// checksum 0) + payload (header fields 0 but the magic), not inverted.
    base_sum: u16,
}

/// Builds the packets of a [`FlowSpec`] and a [`Size`] (templates made at
/// start-up; [`PacketBuilder::build`] does not allocate).
#[derive(Debug, Clone)]
pub struct PacketBuilder {
    spec: FlowSpec,
    templates: Vec<Template>,
    /// Template index of packet k is `pattern[k % pattern.len()]`.
    pattern: Vec<usize>,
}

impl PacketBuilder {
    /// Templates for `spec` and `size`. Errors ([`PktgenError::Invalid`]): a
    /// size out of [`SIZE_RANGE`] or too small for the headers and payload
    /// header (IPv6: 76 bytes), addresses of two families, no flows, or
    /// flows whose source ports would pass 65535.
    pub fn new(spec: FlowSpec, size: Size) -> Result<PacketBuilder, PktgenError> {
        let bad = |s: String| Err(PktgenError::Invalid(s));
        if spec.flows == 0 {
            return bad("--flows must be at least 1".into());
        }
        if spec.sport as u64 + spec.flows as u64 - 1 > u16::MAX as u64 {
            return bad(format!("--sport {} + --flows {} passes port 65535", spec.sport, spec.flows));
        }
        let ip_hl = match (spec.src, spec.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => ipv4::MIN_HEADER_LEN,
            (IpAddr::V6(_), IpAddr::V6(_)) => ipv6::HEADER_LEN,
            _ => return bad(format!("--src {} and --dst {} are of two address families", spec.src, spec.dst)),
        };
        let sizes: Vec<usize> = match size {
            Size::Fixed(n) => vec![n],
            Size::Imix => vec![64, 576, 1500],
        };
        let min = ip_hl + udp::HEADER_LEN + payload::LEN;
        let family = if ip_hl == ipv6::HEADER_LEN { "IPv6" } else { "IPv4" };
        let headers = format!("{ip_hl} {family} + {} UDP + {} payload header", udp::HEADER_LEN, payload::LEN);
        let mut templates = Vec::with_capacity(sizes.len());
        for &n in &sizes {
            if size == Size::Imix && n < min {
                return bad(format!(
                    "--size imix: its {n}-byte packets are shorter than the {min} bytes {family} needs ({headers}); with {family} give a fixed --size of {min}..={}",
                    SIZE_RANGE.end()
                ));
            }
            if !SIZE_RANGE.contains(&n) || n < min {
                return bad(format!("--size {n}: with {family} must be {}..={} bytes ({headers})", min.max(*SIZE_RANGE.start()), SIZE_RANGE.end()));
            }
            templates.push(template(&spec, n, ip_hl));
        }
        let pattern = match size {
            Size::Fixed(_) => vec![0],
            Size::Imix => IMIX.iter().map(|s| sizes.iter().position(|x| x == s).unwrap_or(0)).collect(),
        };
        Ok(PacketBuilder { spec, templates, pattern })
    }

    /// The flows' addresses and ports.
    pub fn spec(&self) -> &FlowSpec {
        &self.spec
    }

    /// Length of the size pattern (1, or 12 for IMIX).
    pub fn pattern_len(&self) -> usize {
        self.pattern.len()
    }

    /// Ethernet frame bytes (without FCS) of packet number `k` of the run.
    pub fn frame_len(&self, k: u64) -> usize {
        self.templates[self.pattern[(k % self.pattern.len() as u64) as usize]].frame.len()
    }

    /// Writes packet number `k` of the run (its size from the pattern) into
    /// `buf`, for flow `p.flow` (source port `sport + flow`; must be below
    /// `spec.flows`) with payload header `p`; checksums valid. Returns the
    /// frame length; 0 (buf untouched) for a flow out of range.
    #[inline]
    pub fn build(&self, buf: &mut PktBuf, k: u64, p: &Payload) -> usize {
        if p.flow >= self.spec.flows {
            return 0;
        }
        let t = &self.templates[self.pattern[(k % self.pattern.len() as u64) as usize]];
        if !buf.copy_from(&t.frame) {
            return 0;
        }
        let f = buf.frame_mut();
        let u = t.udp;
        let sport = self.spec.sport.wrapping_add(p.flow as u16);
        f[u + udp::SRC_PORT..u + udp::SRC_PORT + 2].copy_from_slice(&sport.to_be_bytes());
        let pl = u + udp::HEADER_LEN;
        p.write(&mut f[pl..pl + payload::LEN]);
        let s = checksum::add(checksum::add(t.base_sum, sport), checksum::sum(&f[pl + payload::FLOW..pl + payload::LEN]));
        let ck = match !s {
            0 => 0xffff,
            c => c,
        };
        f[u + udp::CHECKSUM..u + udp::CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
        t.frame.len()
    }
}

/// The template frame of one IP packet size `n`: source port 0, payload
/// header zero but the magic, UDP checksum field 0 (filled per packet).
fn template(spec: &FlowSpec, n: usize, ip_hl: usize) -> Template {
    let mut f = vec![0u8; ethernet::HEADER_LEN + n];
    let ip = ethernet::HEADER_LEN;
    let u = ip + ip_hl;
    let udp_len = (n - ip_hl) as u16;
    let ethertype = match spec.dst {
        IpAddr::V4(_) => ethernet::ETHERTYPE_IPV4,
        IpAddr::V6(_) => ethernet::ETHERTYPE_IPV6,
    };
    ethernet::write_header(&mut f, &spec.dst_mac, &spec.src_mac, ethertype);
    udp::write_header(&mut f[u..], 0, spec.dport, udp_len);
    f[u + udp::HEADER_LEN..u + udp::HEADER_LEN + 4].copy_from_slice(&payload::MAGIC);
    let pseudo_sum = match (spec.src, spec.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            ipv4::write_header(&mut f[ip..u], 0, n as u16, 0, ipv4::FLAG_DF, TTL, ipv4::PROTO_UDP, s, d);
            let mut ph = [0u8; 12];
            ph[..4].copy_from_slice(&s.octets());
            ph[4..8].copy_from_slice(&d.octets());
            ph[9] = ipv4::PROTO_UDP;
            ph[10..12].copy_from_slice(&udp_len.to_be_bytes());
            checksum::sum(&ph)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            ipv6::write_header(&mut f[ip..u], 0, 0, udp_len, ipv4::PROTO_UDP, TTL, &s, &d);
            let mut ph = [0u8; 40];
            ph[..16].copy_from_slice(&s.octets());
            ph[16..32].copy_from_slice(&d.octets());
            ph[32..36].copy_from_slice(&(udp_len as u32).to_be_bytes());
            ph[39] = ipv4::PROTO_UDP;
            checksum::sum(&ph)
        }
        // PacketBuilder::new refuses mixed families.
        _ => 0,
    };
    let base_sum = checksum::add(pseudo_sum, checksum::sum(&f[u..]));
    Template { frame: f, udp: u, base_sum }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    fn spec(src: &str, dst: &str, flows: u32) -> FlowSpec {
        FlowSpec {
            src_mac: [2, 0, 0, 0, 0x0a, 1],
            dst_mac: [2, 0, 0, 0, 0, 1],
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            sport: 40000,
            dport: 5001,
            flows,
        }
    }

    /// Checks one frame with etherparse (an implementation we did not
    /// write): lengths, IPv4 header checksum, UDP checksum, ports, payload.
    fn check(frame: &[u8], size: usize, sport: u16, p: &Payload) {
        let s = SlicedPacket::from_ethernet(frame).expect("etherparse parses it");
        let Some(TransportSlice::Udp(u)) = &s.transport else { panic!("not UDP: {:?}", s.transport) };
        assert_eq!((u.source_port(), u.destination_port()), (sport, 5001));
        match &s.net {
            Some(NetSlice::Ipv4(ip)) => {
                let h = ip.header().to_header();
                assert_eq!(ip.header().total_len() as usize, size);
                assert_eq!(h.calc_header_checksum(), ip.header().header_checksum(), "IPv4 header checksum");
                assert!(ip.header().dont_fragment());
                let want = u.to_header().calc_checksum_ipv4(&h, u.payload()).unwrap();
                assert_eq!(u.checksum(), want, "UDP checksum (IPv4)");
            }
            Some(NetSlice::Ipv6(ip)) => {
                assert_eq!(ip.header().payload_length() as usize + 40, size);
                let want = u.to_header().calc_checksum_ipv6(&ip.header().to_header(), u.payload()).unwrap();
                assert_eq!(u.checksum(), want, "UDP checksum (IPv6)");
            }
            other => panic!("not IP: {other:?}"),
        }
        assert_eq!(frame.len(), 14 + size);
        assert_eq!(Payload::read(u.payload()), Some(*p));
        assert!(u.payload()[payload::LEN..].iter().all(|&b| b == 0), "rest of the payload is zero");
    }

    #[test]
    fn packets_have_valid_checksums_for_every_size_flow_and_family() {
        for (src, dst) in [("192.0.2.10", "198.51.100.10"), ("2001:db8:a::10", "2001:db8:b::10")] {
            let v6 = src.contains(':');
            for size in [Size::Fixed(if v6 { 76 } else { 64 }), Size::Fixed(1500), Size::Fixed(999), Size::Imix] {
                if v6 && size == Size::Imix {
                    let e = PacketBuilder::new(spec(src, dst, 5), size).unwrap_err().to_string();
                    assert!(e.contains("64-byte packets are shorter than the 76 bytes IPv6 needs") && e.contains("fixed --size of 76..=1500"), "{e}");
                    continue;
                }
                let b = PacketBuilder::new(spec(src, dst, 5), size).unwrap();
                let mut buf = PktBuf::new();
                for k in 0..40u64 {
                    // Values that exercise carries, and 0xffff sums.
                    let p = Payload { flow: (k % 5) as u32, seq: u64::MAX - k * 0x0101_0101, tx_ns: k.wrapping_mul(0xdead_beef_f00d), flags: (k % 2) as u32 };
                    let n = b.build(&mut buf, k, &p);
                    let want = match size {
                        Size::Fixed(s) => s,
                        Size::Imix => IMIX[(k % 12) as usize],
                    };
                    assert_eq!(n, 14 + want);
                    assert_eq!(b.frame_len(k), n);
                    check(buf.frame(), want, 40000 + (k % 5) as u16, &p);
                }
            }
        }
    }

    #[test]
    fn reused_buffers_carry_nothing_over() {
        // An ESP-sized frame left in the buffer must not leak into the next packet.
        let b = PacketBuilder::new(spec("192.0.2.10", "198.51.100.10", 1), Size::Fixed(64)).unwrap();
        let mut buf = PktBuf::new();
        buf.copy_from(&[0xab; 1600]);
        let p = Payload { flow: 0, seq: 3, tx_ns: 4, flags: 1 };
        b.build(&mut buf, 0, &p);
        check(buf.frame(), 64, 40000, &p);
    }

    #[test]
    fn imix_is_seven_four_one() {
        let count = |s| IMIX.iter().filter(|&&x| x == s).count();
        assert_eq!((count(64), count(576), count(1500)), (7, 4, 1));
        assert_eq!("imix".parse::<Size>(), Ok(Size::Imix));
        assert_eq!("1420".parse::<Size>(), Ok(Size::Fixed(1420)));
        assert!("63".parse::<Size>().is_err() && "1501".parse::<Size>().is_err() && "x".parse::<Size>().is_err());
    }

    #[test]
    fn bad_specs_are_refused() {
        assert!(PacketBuilder::new(spec("192.0.2.10", "2001:db8::1", 1), Size::Fixed(100)).is_err());
        let e = PacketBuilder::new(spec("2001:db8::2", "2001:db8::1", 1), Size::Fixed(64)).unwrap_err().to_string();
        assert!(e.contains("--size 64: with IPv6 must be 76..=1500 bytes (40 IPv6 + 8 UDP + 28 payload header)"), "{e}");
        assert!(PacketBuilder::new(spec("192.0.2.10", "198.51.100.10", 0), Size::Fixed(64)).is_err());
        let mut s = spec("192.0.2.10", "198.51.100.10", 2);
        s.sport = 65535;
        assert!(PacketBuilder::new(s, Size::Fixed(64)).is_err());
        s.flows = 1;
        assert!(PacketBuilder::new(s, Size::Fixed(64)).is_ok());
        let b = PacketBuilder::new(spec("192.0.2.10", "198.51.100.10", 2), Size::Fixed(64)).unwrap();
        assert_eq!(b.build(&mut PktBuf::new(), 0, &Payload { flow: 2, ..Default::default() }), 0, "flow out of range");
    }
}
