//! Policy: the SPD (RFC 4301 §4.4.1), the SAD (§4.4.2), routes and
//! neighbours, published together as one immutable [`Tables`] snapshot.

pub mod neighbour;
pub mod route;
pub mod sad;
pub mod spd;

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
        (0..self.ports.len()).any(|p| self.is_local(p, ip))
    }

    /// True if UDP to `port` at one of our addresses is NAT traversal
    /// (RFC 3948) traffic.
    #[inline]
    pub fn is_natt_port(&self, port: u16) -> bool {
        self.natt_ports.contains(&port)
    }
}
