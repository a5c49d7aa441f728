//! Policy: the SPD (RFC 4301 §4.4.1), the SAD (§4.4.2), routes and
//! neighbours, published together as one immutable [`Tables`] snapshot.

pub mod neighbour;
pub mod route;
pub mod sad;
pub mod spd;

use crate::wire::ipv6;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// What the data plane knows of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Name (stats).
    pub name: String,
    /// Faces the protected (inside) network.
    pub protected: bool,
    /// Our MAC on this port.
    pub mac: [u8; 6],
    /// Our IPv4 addresses on this port (ARP answers; the first is the
    /// source of ICMP errors sent from this port).
    pub addresses: Vec<Ipv4Addr>,
    /// Our IPv6 addresses on this port (Neighbor Solicitations answered;
    /// the first is the source of ICMPv6 errors sent from this port).
    pub addresses6: Vec<Ipv6Addr>,
    /// The directed broadcast addresses of this port's IPv4 subnets (of
    /// prefixes up to /30; RFC 919, RFC 1812 §4.2.3.1): no host has one,
    /// so nothing is answered to one.
    pub broadcast4: Vec<Ipv4Addr>,
    /// Largest IP packet sent on this port, in bytes.
    pub mtu: u16,
    /// Destination MAC for next hops without a neighbour entry (config
    /// `peer_mac`, DPDK's `neigh` / `--eth-dest`).
    pub peer_mac: Option<[u8; 6]>,
}

/// The read-mostly tables a worker loads once per burst. Parts that did not
/// change between two snapshots are shared (`Arc`).
#[derive(Debug)]
pub struct Tables {
    /// Snapshot version: the control thread publishes versions 1, 2, …
    /// (0 = built outside a running gateway, e.g. in tests). Workers notice
    /// a new snapshot by it.
    pub version: u64,
    /// Ports, indexed by port id.
    pub ports: Arc<Vec<PortInfo>>,
    /// Outbound SPD.
    pub spd_out: Arc<spd::Spd>,
    /// Inbound SPD.
    pub spd_in: Arc<spd::Spd>,
    /// SAs.
    pub sad: sad::Sad,
    /// Routes.
    pub routes: Arc<route::Routes>,
    /// The neighbour cell: the same in every snapshot; its own snapshot of
    /// static and learned neighbours changes without a new `Tables`
    /// (see [`neighbour`]).
    pub neighbours: Arc<neighbour::NeighbourCell>,
    /// UDP destination ports on which our addresses take ESP-in-UDP, NAT
    /// keepalives and (dropped) IKE (RFC 3948): 4500 and every inbound SA's
    /// `udp_dport`.
    pub natt_ports: Vec<u16>,
    /// Every port's IPv4 addresses in one list (derived from `ports` when
    /// the snapshot is built): the per-packet "is this source ours" check
    /// of [`Tables::martian`] scans one flat array instead of each port's.
    pub ours4: Vec<Ipv4Addr>,
    /// Every port's IPv6 addresses in one list, as `ours4`.
    pub ours6: Vec<Ipv6Addr>,
    /// Every port's [`PortInfo::broadcast4`] in one list, as `ours4`: the
    /// directed broadcast addresses of the gateway's IPv4 subnets.
    pub bcast4: Vec<Ipv4Addr>,
}

impl Tables {
    /// True if `ip` is one of our addresses (of its family) on port `port`.
    #[inline]
    pub fn is_local(&self, port: usize, ip: IpAddr) -> bool {
        self.ports.get(port).is_some_and(|p| match ip {
            IpAddr::V4(a) => p.addresses.contains(&a),
            IpAddr::V6(a) => p.addresses6.contains(&a),
        })
    }

    /// True if `ip` is one of our addresses on any port.
    #[inline]
    pub fn is_ours(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.ours4.contains(&a),
            IpAddr::V6(a) => self.ours6.contains(&a),
        }
    }

    /// True if `ip` is the directed broadcast address of one of our IPv4
    /// subnets ([`PortInfo::broadcast4`]). Such an address (of a prefix up
    /// to /30) has its two lowest bits set: the list is scanned only then
    /// (this is on the per-packet martian check).
    #[inline(always)]
    pub fn is_our_broadcast(&self, ip: IpAddr) -> bool {
        matches!(ip, IpAddr::V4(a) if u32::from(a) & 3 == 3 && self.bcast4.contains(&a))
    }

    /// True if a packet from `src` to `dst` must not be forwarded (a
    /// "martian", the drop reason `martian`): either address is one no
    /// router forwards ([`unforwardable`]) or the directed broadcast
    /// address of one of our subnets ([`Self::is_our_broadcast`]: as a
    /// source it names no host, RFC 1812 §5.3.7; as a destination a router
    /// forwards it by default to no one, RFC 2644, so it is never resolved
    /// by ARP as if it were a host), or `src` is one of our own addresses
    /// (a spoofed or looped packet; RFC 1812 §5.3.7 lets a router discard
    /// such sources, as Linux does).
    #[inline(always)]
    pub fn martian(&self, src: IpAddr, dst: IpAddr) -> bool {
        unforwardable(src) || unforwardable(dst) || self.is_ours(src) || self.is_our_broadcast(src) || self.is_our_broadcast(dst)
    }

    /// True if the route to `ip` leaves by `port`: a packet from `ip` that
    /// arrived on `port` came from that side. The gateway answers (Echo
    /// Replies, ICMP errors about cleartext packets) only such sources, so
    /// that nothing it builds itself crosses from one side to the other
    /// outside the SPD (the strict reverse-path test of RFC 3704 §2.2,
    /// applied to what the gateway answers).
    #[inline]
    pub fn routes_back(&self, port: usize, ip: IpAddr) -> bool {
        self.routes.lookup(ip).is_some_and(|(out, _)| out == port)
    }

    /// True if UDP to `port` at one of our addresses is NAT traversal
    /// (RFC 3948) traffic.
    #[inline]
    pub fn is_natt_port(&self, port: u16) -> bool {
        self.natt_ports.contains(&port)
    }
}

/// True for an address no router forwards a packet from or to:
/// * IPv4: 0.0.0.0/8 ("this network"), 127.0.0.0/8 (loopback), 224.0.0.0/4
///   (multicast: the gateway forwards unicast only) and 240.0.0.0/4 with
///   255.255.255.255 (RFC 1812 §5.3.7, §4.2.3.1), 169.254.0.0/16
///   (link-local: RFC 3927 §7);
/// * IPv6: :: (RFC 4291 §2.5.2), ::1 (§2.5.3), fe80::/10 (link-local,
///   §2.5.6: never forwarded off its link), ff00::/8 (multicast, §2.7).
#[inline]
pub fn unforwardable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            o[0] == 0 || o[0] == 127 || o[0] >= 224 || (o[0] == 169 && o[1] == 254)
        }
        IpAddr::V6(a) => a.is_unspecified() || a.is_loopback() || ipv6::is_multicast(&a) || ipv6::is_link_local(&a),
    }
}

#[cfg(test)]
mod martian_tests {
    use super::unforwardable;
    use std::net::IpAddr;

    fn u(s: &str) -> bool {
        unforwardable(s.parse::<IpAddr>().expect("address"))
    }

    #[test]
    fn unforwardable_addresses() {
        for a in ["0.0.0.0", "0.1.2.3", "127.0.0.1", "127.255.255.254", "169.254.0.1", "224.0.0.1", "239.1.1.1", "240.0.0.1", "255.255.255.255", "::", "::1", "fe80::1", "febf::1", "ff02::1", "ff0e::1"] {
            assert!(u(a), "{a}");
        }
        for a in ["1.0.0.0", "10.0.0.1", "126.255.255.255", "128.0.0.1", "169.253.0.1", "169.255.0.1", "192.0.2.1", "223.255.255.255", "2001:db8::1", "fec0::1", "fc00::1", "::2", "::ffff:192.0.2.1", "feff::1"] {
            assert!(!u(a), "{a}");
        }
    }
}
