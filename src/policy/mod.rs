//! Policy: the SPD (RFC 4301 §4.4.1), the SAD (§4.4.2), routes and
//! neighbours, published together as one immutable [`Tables`] snapshot.

pub mod neighbour;
pub mod route;
pub mod sad;
pub mod spd;

use std::net::Ipv4Addr;

/// What the data plane knows of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Name (stats).
    pub name: String,
    /// Faces the protected (inside) network.
    pub protected: bool,
    /// Our MAC on this port.
    pub mac: [u8; 6],
    /// Our IPv4 addresses on this port (ARP answers).
    pub addresses: Vec<Ipv4Addr>,
    /// Largest IP packet sent on this port, in bytes.
    pub mtu: u16,
}

/// The read-mostly tables a worker loads once per burst.
#[derive(Debug)]
pub struct Tables {
    /// Ports, indexed by port id.
    pub ports: Vec<PortInfo>,
    /// Outbound SPD.
    pub spd_out: spd::Spd,
    /// Inbound SPD.
    pub spd_in: spd::Spd,
    /// SAs.
    pub sad: sad::Sad,
    /// Routes.
    pub routes: route::Routes,
    /// Neighbours.
    pub neighbours: neighbour::Neighbours,
    /// UDP destination ports on which our addresses take ESP-in-UDP, NAT
    /// keepalives and (dropped) IKE (RFC 3948): 4500 and every inbound SA's
    /// `udp_dport`.
    pub natt_ports: Vec<u16>,
}

impl Tables {
    /// True if `ip` is one of our addresses on port `port`.
    pub fn is_local(&self, port: usize, ip: Ipv4Addr) -> bool {
        self.ports.get(port).is_some_and(|p| p.addresses.contains(&ip))
    }

    /// True if UDP to `port` at one of our addresses is NAT traversal
    /// (RFC 3948) traffic.
    #[inline]
    pub fn is_natt_port(&self, port: u16) -> bool {
        self.natt_ports.contains(&port)
    }
}
