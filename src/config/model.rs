//! The validated configuration: plain values, every cross-reference checked.
//!
//! `config::load` produces a [`Config`] from TOML; the control thread builds its
//! tables from it. Nothing here is read at run time by the data plane.

use std::net::IpAddr;
use std::path::PathBuf;
use zeroize::Zeroizing;

/// Re-exported so the loader and the checks name "any ports" as the SPD does.
pub use crate::policy::spd::ANY_PORTS;

/// A 6-byte Ethernet MAC address.
pub type Mac = [u8; 6];

/// Whole validated configuration of one gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// File the config was read from (for messages).
    pub source: PathBuf,
    /// `[gateway]` table.
    pub gateway: Gateway,
    /// `[crypto]` table.
    pub crypto: Crypto,
    /// `[reassembly]` table.
    pub reassembly: Reassembly,
    /// `[neighbour_table]` table.
    pub neighbour_table: NeighbourTable,
    /// `[control]` table.
    pub control: Control,
    /// `[[port]]` entries, in file order; a port's index is its port id.
    pub ports: Vec<Port>,
    /// `[[sa]]` entries, in file order.
    pub sas: Vec<Sa>,
    /// `[[policy]]` entries, in file order.
    pub policies: Vec<Policy>,
    /// `[[route]]` entries.
    pub routes: Vec<Route>,
    /// `[[neighbour]]` entries (static ARP and IPv6 neighbours).
    pub neighbours: Vec<Neighbour>,
    /// `Some` when the config was imported from a DPDK ipsec-secgw `.cfg`:
    /// the port options it was imported with, so a reload imports the file
    /// again the same way; `None` for TOML.
    pub dpdk_import: Option<super::dpdk::ImportOptions>,
}

impl Config {
    /// `file:line:column: field`, the prefix of a message about `field`
    /// (a path such as `gateway.cores[0]` or `sa[1].worker`; a key left to
    /// its default is placed at its table), or `file: field` when its
    /// position is unknown. Reads `source` again ([`super::Positions::read`]):
    /// for the rare message made after validation, not for loops (read the
    /// positions once for those).
    pub fn at(&self, field: &str) -> String {
        super::Positions::read(self).locate(&self.source, field).to_string()
    }
}

/// `[gateway]`: settings of the whole process.
#[derive(Debug, Clone, PartialEq)]
pub struct Gateway {
    /// Free-form name used in logs and stats (default "secgw").
    pub name: String,
    /// Number of data-plane workers (default 1, at least 1).
    pub workers: usize,
    /// Cores to pin workers to, one per worker; empty = cores 0.. in order.
    pub cores: Vec<usize>,
    /// Seconds between periodic stats prints; 0 = only on exit.
    pub stats_interval: u64,
    /// Default outer TTL for tunnel SAs (RFC 4301 §5.1.2.1), default 64.
    pub outer_ttl: u8,
    /// Packets per rx burst (1..=256, default 32).
    pub burst: usize,
    /// Microseconds a worker sleeps between polls once it is idle
    /// (0..=10000, default 50; 0 = busy-poll always).
    pub idle_sleep_us: u64,
    /// Microseconds without a received frame after which a worker is idle
    /// and sleeps `idle_sleep_us` between polls, or yields its core while
    /// crypto ops are in flight (0..=1000000, default 100; unused with
    /// `idle_sleep_us` 0). See `WorkerConf::idle_spin_us`.
    pub idle_spin_us: u64,
    /// Seconds a tunnel SA's path MTU learned from an ICMP "fragmentation
    /// needed" / ICMPv6 Packet Too Big about its ESP packets holds before
    /// it is forgotten (RFC 4301 §8.2.1–8.2.2, RFC 1191 §6.3; 0..=86400,
    /// default 600); 0 = such reports are ignored (RFC 4301 §6.1.1).
    pub pmtu_timeout_s: u64,
    /// Packet buffers per worker (`io::BUF_SIZE`, 2176 bytes each), made
    /// at start (1024..=262144, default 4096; at least 4 ×
    /// `neighbour_table.pending_packets` and, with 2 workers or more, 2 ×
    /// `handoff_depth`: a full handoff ring leaves half the pool; `workers`
    /// × `pool_size` at most 1048576, 2.1 GiB). Every frame a worker holds
    /// (received, handed to another worker, in its crypto queue pair,
    /// waiting for a next hop's MAC, in a reassembly) takes one; with none
    /// free, rx leaves frames in the AF_XDP rx ring.
    pub pool_size: usize,
    /// Packets each handoff ring between two workers holds (power of two
    /// in 64..=65536, default 2048): how long an SA's owner may be off its
    /// core while another worker hands it that SA's packets before they
    /// are dropped as `handoff_full` (2048 ≈ 100 ms of 20,000 packets/s).
    pub handoff_depth: usize,
    /// Whether the workers answer ICMP Echo Requests (RFC 792) and ICMPv6
    /// Echo Requests (RFC 4443 §4.1) to the gateway's own addresses with an
    /// Echo Reply (default true: a router MUST, RFC 1812 §4.3.3.6, and MAY
    /// be configured not to). Within the ICMP rate limit the errors share.
    pub icmp_echo: bool,
}

/// `[reassembly]`: reassembly of outer IPv4 fragments addressed to the
/// gateway (ESP and ESP in UDP), per worker, before decryption (RFC 4303
/// §3.4.1, RFC 791 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reassembly {
    /// Datagrams each worker reassembles at once (0..=1024, default 64;
    /// 0 = off: fragments to the gateway are dropped as `fragment`). Each
    /// holds one 2176-byte packet buffer of the worker's pool while in use.
    pub contexts: usize,
    /// Fragments one datagram may have (2..=256, default 16).
    pub max_fragments: usize,
    /// Milliseconds a datagram has to complete, from its first fragment
    /// (10..=120000, default 5000).
    pub timeout_ms: u64,
    /// Also reassemble IPv4 TCP and UDP fragments forwarded from a
    /// protected port (without IPv4 options), before the outbound SPD
    /// lookup, between addresses a port-selecting IPv4 outbound policy may
    /// match (default false): a datagram's non-first fragments carry no
    /// ports (OPAQUE, RFC 4301 §7.1), so without it they meet the any-port
    /// entries instead of their first fragment's. Needs `contexts` > 0;
    /// such datagrams of more than 2048 data bytes are then dropped
    /// (`reasm_too_big`). README, "Forwarded fragments under port
    /// selectors".
    pub forwarded: bool,
}

impl Default for Reassembly {
    fn default() -> Self {
        Reassembly { contexts: 64, max_fragments: 16, timeout_ms: 5000, forwarded: false }
    }
}

/// `[neighbour_table]`: the dynamic neighbour table (ARP, RFC 826, and
/// Neighbor Discovery, RFC 4861) and the per-worker queue of packets
/// waiting for a next hop's MAC. (Not `[neighbour]`: TOML cannot have a
/// table and the `[[neighbour]]` array of static entries under one name.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourTable {
    /// Learned entries kept at most (1..=1048576, default 4096); when
    /// full, a new one evicts the oldest learned entry.
    pub max_entries: usize,
    /// Milliseconds an entry stays REACHABLE after a confirmation
    /// (1000..=3600000, default 30000; RFC 4861 §10 REACHABLE_TIME).
    pub reachable_ms: u64,
    /// Milliseconds between resolution requests or probes for one address
    /// (100..=60000, default 1000; RFC 4861 §10 RETRANS_TIMER).
    pub retrans_ms: u64,
    /// Packets each worker holds while their next hops are resolved
    /// (0..=1024 and at most `gateway.pool_size` / 4, default 256; 0 =
    /// none held: dropped as `neigh_queue_full`, the request still sent).
    pub pending_packets: usize,
    /// Of those, at most this many per next hop (1..=pending_packets,
    /// default 16).
    pub pending_per_hop: usize,
}

impl Default for NeighbourTable {
    fn default() -> Self {
        NeighbourTable { max_entries: 4096, reachable_ms: 30_000, retrans_ms: 1000, pending_packets: 256, pending_per_hop: 16 }
    }
}

/// `[control]`: the control socket and run-time SA changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// Path of the control socket (default `/run/secgw/<gateway.name>.sock`;
    /// at most 107 bytes, the limit of a Unix socket address).
    pub socket: PathBuf,
    /// Milliseconds an inbound SA stays valid after a rekey replaced it, for
    /// packets the peer sent before it switched (0..=3600000, default 5000).
    pub rekey_grace_ms: u64,
}

/// Default of [`Control::rekey_grace_ms`].
pub const DEFAULT_REKEY_GRACE_MS: u64 = 5000;

/// Longest control socket path in bytes (`sun_path` holds 108 with its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// The default control socket of a gateway named `name`.
pub fn default_socket(name: &str) -> PathBuf {
    PathBuf::from(format!("/run/secgw/{name}.sock"))
}

/// Which crypto device backs the workers' queue pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CryptoBackend {
    /// `crypto/soft`: synchronous, in the worker, unlimited sessions.
    Software,
    /// `crypto/descriptor`: emulated job-ring hardware with engine threads
    /// and a per-queue-pair session limit.
    Descriptor,
}

/// `[crypto]`: the crypto device. One queue pair per worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Crypto {
    /// Backend (default software).
    pub backend: CryptoBackend,
    /// Crypto library of the backend's transforms (default auto: the
    /// fastest that runs each SA's algorithm; a single provider must run
    /// every SA's algorithm and ICV length, checked at load).
    pub provider: ProviderChoice,
    /// Ops each queue pair holds in flight (16..=65536, power of two, default 1024).
    pub ring_depth: usize,
    /// Descriptor backend: sessions one queue pair can hold (1..=65536,
    /// default 64). Always 0 (unlimited) for the software backend.
    pub max_sessions_per_qp: u32,
    /// Descriptor backend: engine threads (1..=64, default 1).
    pub engines: usize,
}

impl Default for Crypto {
    fn default() -> Self {
        Crypto { backend: CryptoBackend::Software, provider: ProviderChoice::Auto, ring_depth: 1024, max_sessions_per_qp: 0, engines: 1 }
    }
}

/// Role of a port, with the RFC 4301 / ipsec-secgw meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRole {
    /// Faces the inside network: plaintext.
    Protected,
    /// Faces the outside network: ESP travels here.
    Unprotected,
}

/// How the XDP program is attached to the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Generic (SKB) mode: works on every interface.
    Skb,
    /// Driver (native) mode.
    Native,
    /// Let the kernel choose.
    Auto,
}

/// `[[port]]`: one interface the gateway sends and receives on.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    /// Name used by routes (`route.port`) and in stats.
    pub name: String,
    /// Linux interface name.
    pub interface: String,
    /// Protected (inside) or unprotected (outside).
    pub role: PortRole,
    /// MAC address; `None` = read it from the interface at start.
    pub mac: Option<Mac>,
    /// The gateway's own IPv4 and IPv6 addresses on this port with their
    /// prefix length; the gateway answers ARP (IPv4) and Neighbor
    /// Solicitations (IPv6, RFC 4861 §7.2.4) for them.
    pub addresses: Vec<(IpAddr, u8)>,
    /// Interface queue the AF_XDP socket binds to (default 0).
    pub queue: u32,
    /// Largest IP packet (bytes, without Ethernet) sent on this port
    /// (default 1500, at most [`MAX_PORT_MTU`]); larger ones are dropped as
    /// `mtu_exceeded` (DF packets for a tunnel get ICMP "fragmentation
    /// needed" first).
    pub mtu: u16,
    /// XDP attach mode (default skb).
    pub xdp_mode: XdpMode,
    /// Destination MAC for packets sent on this port whose next hop has no
    /// neighbour entry (DPDK ipsec-secgw's `neigh PORT MAC` line and
    /// `--eth-dest PORT,MAC` option: one peer per port); `None` = none.
    pub peer_mac: Option<Mac>,
    /// Entries of each of the AF_XDP socket's four rings (rx, fill, tx,
    /// completion; power of two in 64..=16384, at least 4 ×
    /// `gateway.burst`: a poll may send several bursts on a port, and what
    /// the tx ring has no room for drops as `tx_full`; default 2048), per
    /// worker; the UMEM has 2 × `ring_size` frames of 4096 bytes (16 MiB
    /// at 2048).
    /// The rx ring is how many frames the kernel keeps for a worker that is
    /// off its core: more are dropped (`rx_dropped_backend`); 2048 ≈ 100 ms
    /// of 20,000 packets/s.
    pub ring_size: u32,
}

/// Direction of an SA or a policy. On the control socket it is the string
/// `"outbound"` or `"inbound"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Protected → unprotected (encrypt).
    Outbound,
    /// Unprotected → protected (decrypt).
    Inbound,
}

/// ESP mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaMode {
    /// RFC 4303 §3.1.2 tunnel mode: IPv4 or IPv6 inner packets in an IPv4
    /// or IPv6 outer header (the family of `tunnel_src`/`tunnel_dst`).
    Tunnel,
    /// RFC 4303 §3.1.1 transport mode, applied to forwarded IPv4 packets
    /// (ESP inserted after their own header); `tunnel_src`/`tunnel_dst`
    /// are 0.0.0.0.
    Transport,
}

/// ESP transform of an SA (`algorithm = "…"`; [`Algorithm::name`]): the
/// crypto layer's list, so a config that validates names exactly what the
/// devices offer.
pub use crate::crypto::Algorithm;
/// The `[crypto] provider` setting: the crypto layer's type, so the config
/// names exactly what a device takes.
pub use crate::crypto::ProviderChoice;

/// Bytes of an SA's `key`: cipher key plus salt or nonce (RFC 4106 §8.1,
/// RFC 4543 §3.2, RFC 4309 §7.1, RFC 7634 §2, RFC 3686 §5.1); 0 for NULL.
pub fn key_material_len(a: Algorithm) -> usize {
    a.key_len() + a.salt_len()
}

/// What `key` holds, for messages: e.g. "AES-128-GCM key ‖ 4-byte salt";
/// `None` for NULL encryption, which takes no `key`.
pub fn key_description(a: Algorithm) -> Option<&'static str> {
    use Algorithm::*;
    Some(match a {
        Aes128Gcm => "AES-128-GCM key ‖ 4-byte salt",
        Aes192Gcm => "AES-192-GCM key ‖ 4-byte salt",
        Aes256Gcm => "AES-256-GCM key ‖ 4-byte salt",
        Aes128Gmac => "AES-128-GMAC key ‖ 4-byte salt",
        Aes192Gmac => "AES-192-GMAC key ‖ 4-byte salt",
        Aes256Gmac => "AES-256-GMAC key ‖ 4-byte salt",
        ChaCha20Poly1305 => "ChaCha20 key ‖ 4-byte salt",
        Aes128Ccm => "AES-128-CCM key ‖ 3-byte salt",
        Aes192Ccm => "AES-192-CCM key ‖ 3-byte salt",
        Aes256Ccm => "AES-256-CCM key ‖ 3-byte salt",
        Aes128CbcHmacSha1 | Aes128CbcHmacSha256 | Aes128CbcHmacSha384 | Aes128CbcHmacSha512 => "AES-128-CBC key",
        Aes192CbcHmacSha1 | Aes192CbcHmacSha256 | Aes192CbcHmacSha384 | Aes192CbcHmacSha512 => "AES-192-CBC key",
        Aes256CbcHmacSha1 | Aes256CbcHmacSha256 | Aes256CbcHmacSha384 | Aes256CbcHmacSha512 => "AES-256-CBC key",
        Aes128CtrHmacSha1 | Aes128CtrHmacSha256 | Aes128CtrHmacSha384 | Aes128CtrHmacSha512 => "AES-128-CTR key ‖ 4-byte nonce",
        Aes192CtrHmacSha1 | Aes192CtrHmacSha256 | Aes192CtrHmacSha384 | Aes192CtrHmacSha512 => "AES-192-CTR key ‖ 4-byte nonce",
        Aes256CtrHmacSha1 | Aes256CtrHmacSha256 | Aes256CtrHmacSha384 | Aes256CtrHmacSha512 => "AES-256-CTR key ‖ 4-byte nonce",
        NullHmacSha1 | NullHmacSha256 | NullHmacSha384 | NullHmacSha512 => return None,
    })
}

/// The integrity algorithm's name and key length in bytes (RFC 2404 §3:
/// 20, RFC 4868 §2.1.1: 32, 48 or 64); `None` for combined modes.
pub fn auth(a: Algorithm) -> Option<(&'static str, usize)> {
    use crate::crypto::Mac;
    a.mac().map(|m| match m {
        Mac::HmacSha1_96 => ("HMAC-SHA1-96", m.key_len()),
        Mac::HmacSha256_128 => ("HMAC-SHA-256-128", m.key_len()),
        Mac::HmacSha384_192 => ("HMAC-SHA-384-192", m.key_len()),
        Mac::HmacSha512_256 => ("HMAC-SHA-512-256", m.key_len()),
    })
}

/// Outer DF bit handling (RFC 4301 §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DfMode {
    /// Copy the inner header's DF bit (default).
    Copy,
    /// Always set DF.
    Set,
    /// Always clear DF.
    Clear,
}

/// `[[sa]]`: one manually keyed security association.
#[derive(Clone, PartialEq)]
pub struct Sa {
    /// SPI, never 0 (RFC 4303 §2.1).
    pub spi: u32,
    /// Outbound (we encrypt) or inbound (we decrypt).
    pub direction: Direction,
    /// Tunnel mode.
    pub mode: SaMode,
    /// The ESP transform.
    pub algorithm: Algorithm,
    /// Cipher key material, [`key_material_len`] bytes: the key followed
    /// by the 4-byte salt (GCM, GMAC, ChaCha20-Poly1305) or nonce (CTR);
    /// the bare key for CBC; empty for NULL. Zeroized when dropped.
    pub key: Zeroizing<Vec<u8>>,
    /// Integrity key for the HMAC algorithms (20 bytes for HMAC-SHA1-96,
    /// 32 for HMAC-SHA-256-128); empty for combined modes. Zeroized when
    /// dropped.
    pub auth_key: Zeroizing<Vec<u8>>,
    /// ICV length in bytes, one of [`Algorithm::icv_lens`].
    pub icv_len: usize,
    /// Outer source address (tunnel mode, IPv4 or IPv6, the family of
    /// `tunnel_dst`; 0.0.0.0 in transport mode).
    pub tunnel_src: IpAddr,
    /// Outer destination address (tunnel mode; 0.0.0.0 in transport mode).
    pub tunnel_dst: IpAddr,
    /// Anti-replay window in packets (inbound; default 64, 0 = disabled,
    /// at most 65536).
    pub replay_window: u32,
    /// Outer TTL; `None` = the gateway default.
    pub outer_ttl: Option<u8>,
    /// Outer DF handling (default copy; IPv4 outer header only).
    pub df: DfMode,
    /// Worker that owns this SA; `None` = let the control thread balance.
    pub worker: Option<usize>,
    /// Extended sequence numbers (RFC 4303 §2.2.1, default false).
    pub esn: bool,
    /// UDP encapsulation of ESP for NAT traversal (RFC 3948, default false).
    pub udp_encap: bool,
    /// UDP source port with `udp_encap` (default 4500). Outbound: the port
    /// we send from. Inbound: the peer's, informational only (a NAT may
    /// change it, so it is not checked).
    pub udp_sport: u16,
    /// UDP destination port with `udp_encap` (default 4500). Outbound: the
    /// peer's port (as its NAT maps it). Inbound: the port we receive on.
    pub udp_dport: u16,
    /// Milliseconds between dummy packets (RFC 4303 §2.6) the SA's worker
    /// sends (outbound tunnel-mode SAs only; 0 = none, the default).
    pub dummy_interval_ms: u64,
    /// Bytes of payload in each dummy packet (0..=1400, default 0; bounded
    /// further by the MTU of the port routed to `tunnel_dst`).
    pub dummy_len: usize,
    /// TFC padding (RFC 4303 §2.7): pad inner packets shorter than this
    /// with zeros to this many bytes before encryption (outbound
    /// tunnel-mode SAs only; 0..=1400, default 0 = off; bounded further by
    /// the MTU of the port routed to `tunnel_dst`).
    pub tfc_pad_to: usize,
    /// ESP padding alignment in bytes (RFC 4303 §2.4; outbound SAs only):
    /// 0 = the algorithm's block size (4, 16 for AES-CBC), the default;
    /// else a power of two from 4 to 256 and at least that block size
    /// ([`crate::esp::OutboundSa::pad_align`]).
    pub pad_align: usize,
    /// IPv6 outer header's flow label (outbound tunnel SAs with IPv6
    /// endpoints; `flow_label = "inner"`): derived from the inner packet's
    /// flow (RFC 6438 §3) under a key of the SA's, for ECMP and link
    /// aggregation on the path; false (`"zero"`, the default) = 0, which
    /// tells an observer nothing about the inner flows (RFC 6438 §5).
    pub flow_label_inner: bool,
    /// Soft and hard lifetime limits (RFC 4301 §4.4.2.1) in packets, bytes
    /// (inner packets) and seconds; `u64::MAX` = none (the default). Each
    /// soft limit given with its hard one is below it; seconds are at most
    /// [`MAX_LIFETIME_SECONDS`].
    pub lifetime: crate::esp::Lifetime,
    /// Sequence number of the first packet sent (outbound SAs; default 1,
    /// RFC 4303 §3.3.3): 1..=2^32−1 without ESN, 1..=2^64−1 with. Always 1
    /// on inbound SAs.
    pub first_seq: u64,
}

/// Largest `soft_seconds` / `hard_seconds` of an SA: 10 years of 365.25
/// days (315,576,000 s).
pub const MAX_LIFETIME_SECONDS: u64 = 315_576_000;

impl Sa {
    /// The destination that, with the SPI and direction, identifies this SA
    /// (RFC 4301 §4.1: a SAD entry says whether its lookup uses the
    /// destination address besides the SPI): `Some(tunnel_dst)` for an
    /// inbound tunnel-mode SA, found by (SPI, outer destination), so two
    /// peers may use one SPI towards two addresses of ours; `None` for the
    /// others (inbound transport SAs are found by SPI alone; outbound SAs
    /// are named by SPI in the policies).
    pub fn sad_dst(&self) -> Option<IpAddr> {
        sad_dst(self.direction, self.mode, self.tunnel_dst)
    }
}

/// [`Sa::sad_dst`] from the fields it depends on.
pub fn sad_dst(direction: Direction, mode: SaMode, tunnel_dst: IpAddr) -> Option<IpAddr> {
    (direction == Direction::Inbound && mode == SaMode::Tunnel).then_some(tunnel_dst)
}

/// Whether an SA (direction `d`, SPI `spi`, [`Sa::sad_dst`] `a`) clashes
/// with another of the same direction and SPI whose `sad_dst` is `b`: two
/// such SAs may both exist only when both are inbound tunnel-mode SAs with
/// different `tunnel_dst`. A clash is (what clashes, a hint), for messages
/// like "duplicate {what} (first at line 12){hint}": ("inbound SA with SPI
/// 1001 and tunnel_dst 203.0.113.1", "") or ("outbound SA with SPI 1001",
/// "; only inbound tunnel-mode SAs with different tunnel_dst may share an
/// SPI").
pub fn spi_clash(d: Direction, spi: u32, a: Option<IpAddr>, b: Option<IpAddr>) -> Option<(String, &'static str)> {
    let dir = match d {
        Direction::Outbound => "outbound",
        Direction::Inbound => "inbound",
    };
    match (a, b) {
        (Some(a), Some(b)) if a != b => None,
        (Some(a), Some(_)) => Some((format!("{dir} SA with SPI {spi} and tunnel_dst {a}"), "")),
        _ => Some((format!("{dir} SA with SPI {spi}"), "; only inbound tunnel-mode SAs with different tunnel_dst may share an SPI")),
    }
}

impl std::fmt::Debug for Sa {
    // Keys never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sa")
            .field("spi", &self.spi)
            .field("direction", &self.direction)
            .field("mode", &self.mode)
            .field("algorithm", &self.algorithm)
            .field("key", &"<redacted>")
            .field("auth_key", &"<redacted>")
            .field("icv_len", &self.icv_len)
            .field("tunnel_src", &self.tunnel_src)
            .field("tunnel_dst", &self.tunnel_dst)
            .field("replay_window", &self.replay_window)
            .field("outer_ttl", &self.outer_ttl)
            .field("df", &self.df)
            .field("worker", &self.worker)
            .field("esn", &self.esn)
            .field("udp_encap", &self.udp_encap)
            .field("udp_sport", &self.udp_sport)
            .field("udp_dport", &self.udp_dport)
            .field("dummy_interval_ms", &self.dummy_interval_ms)
            .field("dummy_len", &self.dummy_len)
            .field("tfc_pad_to", &self.tfc_pad_to)
            .field("pad_align", &self.pad_align)
            .field("lifetime", &self.lifetime)
            .field("first_seq", &self.first_seq)
            .finish()
    }
}

/// IP protocol selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Any protocol.
    Any,
    /// One protocol number (1 = ICMP, 6 = TCP, 17 = UDP, …).
    Number(u8),
}

/// Action of a policy (RFC 4301 §4.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Apply the SA with this SPI (outbound: encrypt with it; inbound: the
    /// packet must have arrived on it).
    Protect(u32),
    /// Forward in the clear.
    Bypass,
    /// Drop.
    Discard,
}

/// `[[policy]]`: one SPD entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Outbound or inbound SPD.
    pub direction: Direction,
    /// Source prefix (address, length), of the family of `dst`.
    pub src: (IpAddr, u8),
    /// Destination prefix (address, length).
    pub dst: (IpAddr, u8),
    /// Protocol selector.
    pub protocol: Protocol,
    /// Inclusive source port range (0..=65535 = any).
    pub src_ports: (u16, u16),
    /// Inclusive destination port range (0..=65535 = any).
    pub dst_ports: (u16, u16),
    /// Lower wins; ties broken by file order.
    pub priority: u32,
    /// What to do with a match.
    pub action: Action,
}

impl Policy {
    /// True if either port range is narrower than 0..=65535 ([`ANY_PORTS`]):
    /// the entry then takes no OPAQUE packet (RFC 4301 §4.4.1.1), such as a
    /// non-first fragment.
    pub fn selects_ports(&self) -> bool {
        self.src_ports != ANY_PORTS || self.dst_ports != ANY_PORTS
    }
}

/// `[[route]]`: a static route.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Destination prefix (IPv4 or IPv6).
    pub prefix: (IpAddr, u8),
    /// Index into `Config::ports`.
    pub port: usize,
    /// Next hop, of the prefix's family; `None` = the destination is on
    /// the link.
    pub via: Option<IpAddr>,
}

/// `[[neighbour]]`: a static ARP (IPv4) or neighbour cache (IPv6) entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbour {
    /// IPv4 or IPv6 address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: Mac,
}

/// The smallest `mtu` of a port (RFC 791: every IPv4 host takes 576-byte datagrams).
pub const MIN_PORT_MTU: u16 = 576;

/// The largest `replay_window` of an inbound SA, in packets (RFC 4303 §3.4.3).
pub const MAX_REPLAY_WINDOW: u32 = 65536;

/// The largest `reassembly.contexts` per worker.
pub const MAX_REASSEMBLY_CONTEXTS: usize = 1024;

/// The shortest `reassembly.timeout_ms`.
pub const MIN_REASSEMBLY_TIMEOUT_MS: u64 = 10;

/// Largest port `mtu` (bytes): a frame of that many IP bytes and its
/// Ethernet header (14) must fit a packet buffer's frame area
/// (`io::BUF_SIZE - io::HEADROOM` = 2048 bytes) with the ESP trailer's
/// growth at the end when it is encrypted: at most 15 bytes of padding
/// (16-byte alignment), Pad Length and Next Header (2) and a 32-byte ICV
/// (RFC 4303 §2.4–2.8). The outer headers grow into the headroom. Jumbo
/// frames are not supported.
pub const MAX_PORT_MTU: u16 = (crate::io::BUF_SIZE - crate::io::HEADROOM - 14 - 15 - 2 - 32) as u16;
