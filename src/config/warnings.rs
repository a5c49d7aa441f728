//! What a valid config allows but is probably a mistake.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;

use super::model::*;
use crate::policy::spd::Prefix;

/// IPv6's minimum link MTU (RFC 8200 §5), bytes, as a port `mtu`.
const IPV6_MIN_MTU: u16 = crate::wire::ipv6::MIN_MTU as u16;

/// True if prefix `(p, len)` contains `a` (the SPD's prefix match, as
/// `load.rs` finds the route of a `tunnel_dst`).
fn covers((p, len): (IpAddr, u8), a: IpAddr) -> bool {
    Prefix::new(p, len).contains(a)
}

/// True if prefix `a` holds every address of prefix `b` (it is no longer
/// and covers `b`'s network address).
fn holds(a: (IpAddr, u8), b: (IpAddr, u8)) -> bool {
    a.1 <= b.1 && covers(a, b.0)
}

/// True if prefixes `a` and `b` share an address (one holds the other).
fn overlap(a: (IpAddr, u8), b: (IpAddr, u8)) -> bool {
    holds(a, b) || holds(b, a)
}

/// The first and last address of prefix `(p, len)` as integers, and its
/// family (`true`: IPv6).
fn span((p, len): (IpAddr, u8)) -> (bool, u128, u128) {
    let (v6, a, bits) = match p {
        IpAddr::V4(a) => (false, u128::from(u32::from(a)), 32u32),
        IpAddr::V6(a) => (true, u128::from(a), 128u32),
    };
    let host = bits.saturating_sub(u32::from(len).min(bits));
    let mask = if host >= 128 { u128::MAX } else { (1u128 << host) - 1 };
    (v6, a & !mask, a | mask)
}

/// Address `n` of family `v6` (an IPv4 one from its low 32 bits).
fn address(v6: bool, n: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(n.into())
    } else {
        IpAddr::V4((n as u32).into())
    }
}

/// A config's routes indexed for the warnings' lookups (a pass over every
/// route for each SA and policy made `check` quadratic: helper-103's
/// imported `.cfg` had 30,000 routes).
struct RouteIndex<'a> {
    routes: &'a [Route],
    /// (IPv6, length, first address) of a prefix → the last route with it.
    exact: HashMap<(bool, u8, u128), usize>,
    /// (IPv6, length) in use, longest first.
    lengths: Vec<(bool, u8)>,
    /// (IPv6, first address, last address) of every route, in order.
    sorted: Vec<(bool, u128, u128)>,
}

impl<'a> RouteIndex<'a> {
    fn new(routes: &'a [Route]) -> Self {
        let mut exact = HashMap::new();
        let mut lengths = Vec::new();
        let mut sorted = Vec::new();
        for (i, r) in routes.iter().enumerate() {
            let (v6, lo, hi) = span(r.prefix);
            exact.insert((v6, r.prefix.1, lo), i);
            lengths.push((v6, r.prefix.1));
            sorted.push((v6, lo, hi));
        }
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        lengths.dedup();
        sorted.sort_unstable();
        RouteIndex { routes, exact, lengths, sorted }
    }

    /// The longest-matching route of `a` (of equal prefixes, the last).
    fn lookup(&self, a: IpAddr) -> Option<&'a Route> {
        let v6 = a.is_ipv6();
        self.lengths.iter().filter(|l| l.0 == v6).find_map(|&(_, len)| self.exact.get(&(v6, len, span((a, len)).1))).map(|&i| &self.routes[i])
    }

    /// The addresses of prefix `q` at which the longest-matching route can
    /// change: its first address, and the first address of and the one
    /// after every route inside it (routes are prefixes: one that overlaps
    /// `q` without being inside holds all of it), where inside `q`. Every
    /// address of `q` takes the route of the greatest of these at or below
    /// it.
    fn boundaries(&self, q: (IpAddr, u8)) -> Vec<IpAddr> {
        let (v6, lo, hi) = span(q);
        let mut at = vec![lo];
        let from = self.sorted.partition_point(|&(f, a, _)| (f, a) < (v6, lo));
        for &(_, a, b) in self.sorted[from..].iter().take_while(|&&(f, a, _)| f == v6 && a <= hi) {
            at.extend([Some(a), b.checked_add(1)].into_iter().flatten().filter(|&x| x <= hi));
        }
        at.sort_unstable();
        at.dedup();
        at.into_iter().map(|n| address(v6, n)).collect()
    }
}

/// An outbound SA whose `first_seq` leaves fewer sequence numbers than
/// this is warned about (65,536: a second of traffic at a modest rate).
const FEW_SEQUENCE_NUMBERS: u64 = 1 << 16;

/// Warnings about a validated config, one line each, recomputed from the
/// model (the two about keys without effect also from which keys the file
/// sets) and placed with [`Config::at`]: `file:line:column: sa[0].spi: …`.
///
/// Checked: SPIs 1..=255 (reserved by IANA, RFC 4303 §2.1); inbound SAs
/// with anti-replay off (RFC 4303 §3.4.3); SAs no policy uses; tunnel
/// endpoints that are not an address of an unprotected port (when such
/// ports have addresses); two workers pinned to one core; packet limits of
/// outbound SAs without ESN beyond the sequence numbers they have left
/// (RFC 4303 §3.3.3); outbound tunnel SAs whose `tunnel_dst` no route
/// covers (their packets would be `no_route`); routes via one of the
/// gateway's own addresses or via an address outside the egress port's
/// subnets (IPv6 link-local next hops excepted); neighbour entries for
/// one of the gateway's own addresses; `gateway.cores` entries beyond
/// `gateway.workers`; `outer_ttl` or a `df` other than `copy` on an inbound
/// SA (its outer header is the peer's); with the descriptor device, a
/// port's `ring_size` below `crypto.ring_depth` (completions of one poll
/// may not fit its tx ring); `gateway.handoff_depth` set with one worker
/// (there are no handoff rings) and `gateway.idle_spin_us` set with
/// `idle_sleep_us = 0` (a worker that never sleeps has no spin before
/// sleeping): keys the file sets that change nothing. Also: an outbound
/// tunnel SA whose `tunnel_dst` is the gateway's own address, or is routed
/// out of a protected port; a port address no router forwards to or from
/// (loopback, IPv4 link-local: its packets are `martian`) or that is its
/// IPv4 subnet's network or broadcast address; an IPv4-mapped IPv6 neighbour; a relative control socket path;
/// an outbound policy, or an inbound BYPASS / DISCARD one, that never
/// matches because an earlier one (lower priority number, or the same one
/// earlier in the file) covers all its selectors (RFC 4301 §4.4.1: the
/// first match decides); an inbound PROTECT one behind such an inbound
/// BYPASS (its traffic is also taken in the clear, and what its SA
/// decrypts is dropped) or DISCARD (what its SA decrypts is dropped); an
/// outbound SA whose `first_seq` leaves fewer than
/// [`FEW_SEQUENCE_NUMBERS`] sequence numbers (RFC 4303 §3.3.3: it
/// hard-expires after that many packets); a PROTECT entry with port
/// selectors whose datagrams fragmented before the gateway lose their
/// non-first fragments (no ports, OPAQUE: RFC 4301 §7.1) to another
/// outbound entry or to none, or, inbound, to an SA with no any-port entry
/// for them.
pub fn warnings(cfg: &Config) -> Vec<String> {
    collect(cfg, Scope::File { socket_given: false })
}

/// [`warnings`] for the config `secgw run` runs (at start and on
/// `reload`): when `--socket` gave the control socket
/// (`socket_on_command_line`), the file's `control.socket` is not used, so
/// nothing is said about it being relative.
pub fn run_warnings(cfg: &Config, socket_on_command_line: bool) -> Vec<String> {
    collect(cfg, Scope::File { socket_given: socket_on_command_line })
}

/// The warnings [`warnings`] gives about the entries an `sa add` fragment
/// adds, and only those: `merged` is the running config with the
/// fragment's SAs appended from index `sas` on and its policies from index
/// `policies` on (the SPD order they take). Each is placed in the
/// fragment's `text` under its own index (`<sa add>:3:1: sa[0].spi: …`); an
/// installed policy that covers a new one is named by its `policy list`
/// index. Warnings about the rest of the config (ports, routes, installed
/// entries) are left to `check` and `reload`.
pub fn fragment_warnings(merged: &Config, sas: usize, policies: usize, text: &str, source: &Path) -> Vec<String> {
    collect(merged, Scope::Fragment { text, source, sas, policies })
}

/// Which entries [`collect`] warns about and where it places them.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// Every entry, placed in the config's file; `socket_given`: the
    /// command line gave the control socket (the file's is unused).
    File { socket_given: bool },
    /// The SAs from index `sas` on and the policies from `policies` on,
    /// placed in the fragment `text` named `source`.
    Fragment { text: &'a str, source: &'a Path, sas: usize, policies: usize },
}

impl Scope<'_> {
    /// The first SA and policy index warned about.
    fn first(self) -> (usize, usize) {
        match self {
            Scope::File { .. } => (0, 0),
            Scope::Fragment { sas, policies, .. } => (sas, policies),
        }
    }

    /// `field` (`sa[7].spi`) as the fragment names it (`sa[2].spi`), or
    /// `None` for a field outside the fragment.
    fn fragment_field(self, field: &str) -> Option<String> {
        let (sas, policies) = self.first();
        let (table, first) = [("sa[", sas), ("policy[", policies)].into_iter().find(|(t, _)| field.starts_with(t))?;
        let rest = &field[table.len()..];
        let close = rest.find(']')?;
        let i: usize = rest[..close].parse().ok()?;
        Some(format!("{table}{}{}", i.checked_sub(first)?, &rest[close..]))
    }
}

/// [`warnings`] and [`fragment_warnings`]: the checks run over the entries
/// `scope` names, gathered as (field, message) and placed at the end.
fn collect(cfg: &Config, scope: Scope) -> Vec<String> {
    let mut found: Vec<(String, String)> = Vec::new();
    let (first_sa, first_policy) = scope.first();
    // Placed by reading the file again, once: only if there is a warning or
    // a key's presence in the file decides one.
    let mut positions: Option<super::Positions> = None;
    let read = |p: &mut Option<super::Positions>| -> super::Positions {
        p.take().unwrap_or_else(|| match scope {
            Scope::File { .. } => super::Positions::read(cfg),
            Scope::Fragment { text, .. } => super::Positions::of(text),
        })
    };
    let g = &cfg.gateway;
    // Keys that change nothing in this config, warned about only when the
    // file sets them: the model keeps no record of which keys were
    // written, so the file read again tells (a file edited or gone since
    // it was loaded can miss or misplace these two warnings, as it can
    // misplace the others). A `.cfg` import never writes either key.
    let (handoff_idle, spin_idle) = if matches!(scope, Scope::File { .. }) && (g.workers == 1 || g.idle_sleep_us == 0) && cfg.dpdk_import.is_none() {
        let p = positions.insert(read(&mut None));
        (g.workers == 1 && p.has("gateway.handoff_depth"), g.idle_sleep_us == 0 && p.has("gateway.idle_spin_us"))
    } else {
        (false, false)
    };
    let mut warn = |field: String, msg: String| found.push((field, msg));

    for (i, c) in g.cores.iter().take(g.workers).enumerate() {
        if let Some(j) = g.cores[..i].iter().position(|d| d == c) {
            warn(
                format!("gateway.cores[{i}]"),
                format!("core {c} is also given to worker {j}"),
            );
        }
    }
    for (i, c) in g.cores.iter().enumerate().skip(g.workers) {
        warn(
            format!("gateway.cores[{i}]"),
            format!("core {c} is not used: gateway.workers = {} takes the first {} of gateway.cores", g.workers, g.workers),
        );
    }

    if handoff_idle {
        warn("gateway.handoff_depth".into(), format!("handoff_depth = {} has no effect: with gateway.workers = 1 there are no handoff rings", g.handoff_depth));
    }
    if spin_idle {
        warn("gateway.idle_spin_us".into(), format!("idle_spin_us = {} has no effect: with gateway.idle_sleep_us = 0 a worker busy-polls and never sleeps", g.idle_spin_us));
    }

    // The descriptor device completes up to `ring_depth` ops for one poll,
    // which sends them at once: a smaller tx ring drops the rest.
    if cfg.crypto.backend == CryptoBackend::Descriptor {
        let depth = cfg.crypto.ring_depth;
        for (i, p) in cfg.ports.iter().enumerate().filter(|(_, p)| (p.ring_size as usize) < depth) {
            warn(
                format!("port[{i}].ring_size"),
                format!("{} entries, below crypto.ring_depth = {depth}: a poll may send up to {depth} completed ops on port {}, and what its tx ring has no room for drops as tx_full", p.ring_size, p.name),
            );
        }
    }

    // Which port has `ip` as one of its addresses.
    let owner = |ip: IpAddr| cfg.ports.iter().find(|p| p.addresses.iter().any(|a| a.0 == ip)).map(|p| p.name.as_str());
    // The port of the longest route covering `ip`.
    let route_index = RouteIndex::new(&cfg.routes);
    let route_port = |ip: IpAddr| route_index.lookup(ip).and_then(|r| cfg.ports.get(r.port));
    let own: Vec<IpAddr> = cfg
        .ports
        .iter()
        .filter(|p| p.role == PortRole::Unprotected)
        .flat_map(|p| p.addresses.iter().map(|&(a, _)| a))
        .collect();
    // (inbound, SPI) of every PROTECT entry: looked up once per SA, not
    // by a pass over the policies for each (O(SAs × policies)).
    let protected: HashSet<(bool, u32)> = cfg
        .policies
        .iter()
        .filter_map(|p| match p.action {
            Action::Protect(spi) => Some((p.direction == Direction::Inbound, spi)),
            _ => None,
        })
        .collect();
    for (i, sa) in cfg.sas.iter().enumerate().skip(first_sa) {
        if sa.spi <= 255 {
            warn(
                format!("sa[{i}].spi"),
                format!(
                    "SPI {} is in 1..=255, reserved by IANA (RFC 4303 §2.1); peers may reject it",
                    sa.spi
                ),
            );
        }
        // Outer-header settings of an inbound SA: the peer builds that header.
        if sa.direction == Direction::Inbound {
            if let Some(t) = sa.outer_ttl {
                warn(format!("sa[{i}].outer_ttl"), format!("outer_ttl = {t} has no effect on inbound SPI {}: the peer builds its outer header", sa.spi));
            }
            if sa.df != DfMode::Copy {
                warn(format!("sa[{i}].df"), format!("df has no effect on inbound SPI {}: the peer builds its outer header", sa.spi));
            }
        }
        if sa.direction == Direction::Inbound && (1..32).contains(&sa.replay_window) {
            warn(
                format!("sa[{i}].replay_window"),
                format!(
                    "replay_window = {} for inbound SPI {} is below the 32 packets RFC 4303 §3.4.3 requires an implementation to support (default 64): a packet arriving more than {} behind the newest is dropped as a replay",
                    sa.replay_window, sa.spi, sa.replay_window
                ),
            );
        }
        if sa.direction == Direction::Inbound && sa.replay_window == 0 {
            warn(
                format!("sa[{i}].replay_window"),
                format!(
                    "anti-replay is off for inbound SPI {} (RFC 4303 §3.4.3)",
                    sa.spi
                ),
            );
        }
        if !protected.contains(&(sa.direction == Direction::Inbound, sa.spi)) {
            let dir = match sa.direction {
                Direction::Outbound => "outbound",
                Direction::Inbound => "inbound",
            };
            warn(
                format!("sa[{i}]"),
                format!("no {dir} policy protects with SPI {}", sa.spi),
            );
        }
        // Lifetime bytes count IP packets (README: Lifetimes), none shorter
        // than a 20-byte IPv4 header: a smaller limit is reached by the
        // first packet.
        for (key, limit) in [("soft_bytes", sa.lifetime.soft.bytes), ("hard_bytes", sa.lifetime.hard.bytes)] {
            if limit < 20 {
                let what = if key == "hard_bytes" { "carries no packet" } else { "is soft-expired by its first packet" };
                warn(format!("sa[{i}].{key}"), format!("{limit} bytes is less than the smallest IP packet (20 bytes): SPI {} {what}", sa.spi));
            }
        }
        // Whether a packet limit was warned about as past the sequence
        // numbers left (then first_seq's own warning would repeat it).
        let mut limit_warned = false;
        if sa.direction == Direction::Outbound && !sa.esn {
            // RFC 4303 §3.3.3: without ESN the SA ends at sequence number
            // 2^32−1, so a packet limit past that is never reached.
            let left = u64::from(u32::MAX) + 1 - sa.first_seq;
            for (key, limit) in [("soft_packets", sa.lifetime.soft.packets), ("hard_packets", sa.lifetime.hard.packets)] {
                if limit != u64::MAX && limit > left {
                    limit_warned = true;
                    warn(
                        format!("sa[{i}].{key}"),
                        format!("{limit} packets is never reached: without esn SPI {} has {left} sequence numbers (first_seq {} to 2^32-1), then expires (RFC 4303 §3.3.3)", sa.spi, sa.first_seq),
                    );
                }
            }
        }
        if sa.direction == Direction::Outbound && !limit_warned {
            // The counter never cycles (RFC 4303 §3.3.3): a first_seq near
            // its end leaves the SA few packets before it hard-expires.
            let last = if sa.esn { u64::MAX } else { u64::from(u32::MAX) };
            let left = (last - sa.first_seq.min(last)).saturating_add(1);
            if left < FEW_SEQUENCE_NUMBERS {
                warn(
                    format!("sa[{i}].first_seq"),
                    format!("first_seq {} leaves SPI {} only {left} sequence number(s) (up to {last}): it hard-expires after {left} packet(s) (RFC 4303 §3.3.3)", sa.first_seq, sa.spi),
                );
            }
        }
        if sa.direction == Direction::Outbound && sa.mode == SaMode::Tunnel && route_index.lookup(sa.tunnel_dst).is_none() {
            warn(
                format!("sa[{i}].tunnel_dst"),
                format!("no [[route]] covers {}: packets of SPI {} are dropped as no_route (ESP is routed on its outer destination)", sa.tunnel_dst, sa.spi),
            );
        }
        if sa.direction == Direction::Outbound && sa.mode == SaMode::Tunnel {
            if let Some(name) = owner(sa.tunnel_dst) {
                warn(
                    format!("sa[{i}].tunnel_dst"),
                    format!("{} is this gateway's own address (port {name}): SPI {}'s ESP would be sent to itself", sa.tunnel_dst, sa.spi),
                );
            } else if let Some(port) = route_port(sa.tunnel_dst).filter(|p| p.role == PortRole::Protected) {
                warn(
                    format!("sa[{i}].tunnel_dst"),
                    format!("{} is routed out of protected port {}: SPI {}'s ESP would leave on the protected side", sa.tunnel_dst, port.name, sa.spi),
                );
            }
        }
        let (key, ours) = match sa.direction {
            Direction::Outbound => ("tunnel_src", sa.tunnel_src),
            Direction::Inbound => ("tunnel_dst", sa.tunnel_dst),
        };
        if sa.mode == SaMode::Tunnel && !own.is_empty() && !own.contains(&ours) {
            warn(
                format!("sa[{i}].{key}"),
                format!("{ours} is not an address of an unprotected port"),
            );
        }
    }
    for (i, p) in cfg.ports.iter().enumerate() {
        if p.role == PortRole::Unprotected && p.addresses.is_empty() {
            warn(
                format!("port[{i}].addresses"),
                "an unprotected port without addresses answers no ARP or Neighbor Solicitation and terminates no ESP".into(),
            );
        }
    }
    // RFC 8200 §5: a link that carries IPv6 takes packets of 1280 bytes.
    for (i, p) in cfg.ports.iter().enumerate().filter(|(_, p)| p.mtu < IPV6_MIN_MTU) {
        let v6_address = p.addresses.iter().any(|a| a.0.is_ipv6());
        let v6_route = cfg.routes.iter().any(|r| r.prefix.0.is_ipv6() && r.port == i);
        if v6_address || v6_route {
            warn(
                format!("port[{i}].mtu"),
                format!(
                    "{} is below IPv6's minimum link MTU of {IPV6_MIN_MTU} (RFC 8200 §5), and port {} carries IPv6 ({}): IPv6 packets of {}..={IPV6_MIN_MTU} bytes cannot leave by it, and no Packet Too Big may ask for less than {IPV6_MIN_MTU}",
                    p.mtu,
                    p.name,
                    if v6_address { "an IPv6 address" } else { "an IPv6 route" },
                    p.mtu + 1
                ),
            );
        }
    }
    for (i, p) in cfg.ports.iter().enumerate() {
        for (j, &(a, len)) in p.addresses.iter().enumerate() {
            // (Unspecified, multicast and broadcast ones the loader refuses.)
            let what = match a {
                IpAddr::V4(v) if v.is_loopback() => Some("a loopback address (martian: never forwarded to or from)"),
                IpAddr::V4(v) if v.is_link_local() => Some("a link-local address (169.254.0.0/16; martian: never forwarded to or from)"),
                IpAddr::V4(v) if len <= 30 => {
                    let host = u32::MAX >> len;
                    let bits = u32::from(v) & host;
                    (bits == 0).then_some("its subnet's network address").or((bits == host).then_some("its subnet's broadcast address"))
                }
                IpAddr::V6(v) if v.is_loopback() => Some("the loopback address (martian: never forwarded to or from)"),
                _ => None,
            };
            if let Some(what) = what {
                warn(
                    format!("port[{i}].addresses[{j}]"),
                    format!("{a}/{len} is {what}: no host can use it as port {}'s address", p.name),
                );
            }
        }
    }
    for (i, r) in cfg.routes.iter().enumerate() {
        let (Some(port), Some(nh)) = (cfg.ports.get(r.port), r.via) else { continue };
        if let Some(name) = owner(nh) {
            warn(
                format!("route[{i}].via"),
                format!("next hop {nh} is this gateway's own address (port {name}): packets on this route are never delivered"),
            );
            continue;
        }
        let subnets: Vec<(IpAddr, u8)> = port.addresses.iter().copied().filter(|a| a.0.is_ipv6() == nh.is_ipv6()).collect();
        let link_local = matches!(nh, IpAddr::V6(a) if crate::wire::ipv6::is_link_local(&a));
        if !subnets.is_empty() && !link_local && !subnets.iter().any(|&s| covers(s, nh)) {
            let list: Vec<String> = subnets.iter().map(|(a, l)| format!("{a}/{l}")).collect();
            warn(
                format!("route[{i}].via"),
                format!("next hop {nh} is outside port {}'s subnets ({}): is the route's port right?", port.name, list.join(", ")),
            );
        }
    }
    for (i, n) in cfg.neighbours.iter().enumerate() {
        if let IpAddr::V6(v) = n.ip {
            if let Some(v4) = v.to_ipv4_mapped() {
                warn(
                    format!("neighbour[{i}].ip"),
                    format!("{} is an IPv4-mapped IPv6 address: an IPv4 next hop is looked up as {v4}, write that", n.ip),
                );
            }
        }
        if let Some(name) = owner(n.ip) {
            warn(
                format!("neighbour[{i}].ip"),
                format!("{} is this gateway's own address (port {name}): the entry is never used", n.ip),
            );
        }
    }
    // A next hop without a static entry or peer_mac is resolved by ARP / ND
    // from an address of its family on the egress port: an IPv6 one without
    // such an address cannot be (no_neighbour); an IPv4 one is asked for
    // from 0.0.0.0, which the neighbour answers but cannot learn us from.
    for (i, r) in cfg.routes.iter().enumerate() {
        let (Some(port), Some(nh)) = (cfg.ports.get(r.port), r.via) else { continue };
        let resolvable = port.addresses.iter().any(|a| a.0.is_ipv6() == nh.is_ipv6());
        if cfg.neighbours.iter().any(|n| n.ip == nh) || port.peer_mac.is_some() || resolvable {
            continue;
        }
        let what = if nh.is_ipv6() {
            "packets on this route are dropped (no_neighbour)"
        } else {
            "ARP requests for it go out from 0.0.0.0"
        };
        warn(
            format!("route[{i}].via"),
            format!("next hop {nh} has no [[neighbour]] entry, port {} has no peer_mac and no address of its family: {what}", port.name),
        );
    }
    if cfg.control.socket.is_relative() && !matches!(scope, Scope::File { socket_given: true }) {
        warn(
            "control.socket".into(),
            format!("{} is relative: it is taken from the directory secgw run starts in, and secgw ctl must be given the same path from there", cfg.control.socket.display()),
        );
    }
    // RFC 4301 §4.4.1: the first matching entry decides; one whose every
    // selector an earlier entry covers is never reached. An inbound
    // PROTECT entry behind an earlier PROTECT still gives its SA's
    // selectors (RFC 4301 §5.2); behind an inbound BYPASS or DISCARD that
    // covers it, its SA's decrypted packets are dropped too (the worker
    // follows the ordered SPD for them), and a BYPASS also lets in, in the
    // clear, what its SA should carry.
    let order = |i: usize| (cfg.policies[i].priority, i);
    // The covering entry is named with its line too: in an imported
    // `.cfg` an index means little.
    let mut name = |i: usize| {
        // An imported `.cfg`'s reader knows DPDK's `pri` (the higher wins),
        // of which secgw's priority is `ACL_MAX_PRIORITY - pri`; `policy
        // list`, which names installed entries, shows secgw's.
        let priority = match (scope, &cfg.dpdk_import, cfg.policies[i].priority) {
            (Scope::File { .. }, Some(_), p) if p <= super::dpdk::ACL_MAX_PRIORITY => format!("pri {}", super::dpdk::ACL_MAX_PRIORITY - p),
            (_, _, p) => format!("priority {p}"),
        };
        let at = match scope {
            Scope::Fragment { policies, .. } if i < policies => return format!("installed policy {i} (`policy list`; {priority}"),
            Scope::Fragment { policies, .. } => (i - policies, positions.get_or_insert_with(|| read(&mut None)).get(&format!("policy[{}]", i - policies))),
            Scope::File { .. } => (i, positions.get_or_insert_with(|| read(&mut None)).get(&format!("policy[{i}]"))),
        };
        match at {
            (k, Some((line, _))) => format!("policy[{k}] (line {line}, {priority}"),
            (k, None) => format!("policy[{k}] ({priority}"),
        }
    };
    // Whether the worker looks decrypted packets up in the inbound SPD, as
    // `Spd::protect_shadowed` decides it: in either family, some BYPASS or
    // DISCARD entry comes before some PROTECT one. Worked out once.
    let shadowed = [true, false].into_iter().any(|v4| {
        let of = |want_protect: bool| {
            (0..cfg.policies.len())
                .filter(move |&i| {
                    let p = &cfg.policies[i];
                    p.direction == Direction::Inbound && p.src.0.is_ipv4() == v4 && matches!(p.action, Action::Protect(_)) == want_protect
                })
                .map(order)
        };
        matches!((of(false).min(), of(true).max()), (Some(a), Some(b)) if a < b)
    });
    // The entries that may cover an entry's addresses, found without
    // looking at every entry for each (that made `check`, start-up and
    // reload quadratic: 9 s of CPU at 40,000 policies, helper-103): the
    // entries by direction, family and their source and destination
    // prefixes as (length, first address), and the length pairs in use.
    // Those holding `q`'s prefixes are under the keys of `q`'s prefixes
    // cut to such a pair of lengths, no longer than its own.
    type Cut = (bool, bool, u8, u128, u8, u128);
    let cut = |p: &Policy, ls: u8, ld: u8| -> Cut {
        let (v6, s, _) = span((p.src.0, ls));
        (p.direction == Direction::Inbound, v6, ls, s, ld, span((p.dst.0, ld)).1)
    };
    let mut by_cut: HashMap<Cut, Vec<usize>> = HashMap::new();
    let mut lengths: Vec<(bool, bool, u8, u8)> = Vec::new();
    for (i, p) in cfg.policies.iter().enumerate() {
        let k = cut(p, p.src.1, p.dst.1);
        by_cut.entry(k).or_default().push(i);
        lengths.push((k.0, k.1, p.src.1, p.dst.1));
    }
    lengths.sort_unstable();
    lengths.dedup();
    let holding = |q: &Policy| -> Vec<usize> {
        let (inbound, v6) = (q.direction == Direction::Inbound, q.src.0.is_ipv6());
        lengths
            .iter()
            .filter(|&&(d, f, ls, ld)| d == inbound && f == v6 && ls <= q.src.1 && ld <= q.dst.1)
            .filter_map(|&(_, _, ls, ld)| by_cut.get(&cut(q, ls, ld)))
            .flatten()
            .copied()
            .collect()
    };
    for (j, q) in cfg.policies.iter().enumerate().skip(first_policy) {
        let inbound_protect = q.direction == Direction::Inbound && matches!(q.action, Action::Protect(_));
        // The covering entry that comes first (the one that takes the
        // packets), not the first in the file.
        let shadow = holding(q).into_iter().filter(|&i| i != j && order(i) < order(j)).filter(|&i| {
            let p = &cfg.policies[i];
            let ports = |a: (u16, u16), b: (u16, u16)| a.0 <= b.0 && b.1 <= a.1;
            p.direction == q.direction
                && (!inbound_protect || matches!(p.action, Action::Bypass | Action::Discard))
                && holds(p.src, q.src)
                && holds(p.dst, q.dst)
                && (p.protocol == Protocol::Any || p.protocol == q.protocol)
                && ports(p.src_ports, q.src_ports)
                && ports(p.dst_ports, q.dst_ports)
        })
        .min_by_key(|&i| order(i));
        match shadow {
            Some(i) if inbound_protect => {
                let (action, what) = if cfg.policies[i].action == Action::Bypass {
                    ("bypass", "what this entry's SA should carry is also let in in the clear (cleartext_protected never counts it), and what the SA decrypts is dropped (inner_policy_mismatch)")
                } else {
                    ("discard", "what this entry's SA decrypts is dropped (policy_discard)")
                };
                warn(format!("policy[{j}]"), format!("{}, {action}) comes first and covers all its selectors: {what}", name(i)))
            }
            Some(i) => warn(format!("policy[{j}]"), format!("never matches: {}) comes first and covers all its selectors", name(i))),
            None => {}
        }
        // What an inbound SA decrypts towards an unprotected port crosses
        // the boundary again: the outbound SPD decides (RFC 4301 §5.1), and
        // with no entry there it is all dropped (helper-100's config sent
        // it to the wan in the clear before the worker looked).
        // Every address of the destination prefix counts (helper-102: only
        // its first was looked at), but the gateway's own (`to_us`); an
        // outbound entry counts only if it takes all of the entry's
        // protocol and ports (one for UDP port 500 alone silenced it).
        if let (Direction::Inbound, Action::Protect(spi), None) = (q.direction, q.action, shadow) {
            let leaves = route_index.boundaries(q.dst)
                .into_iter()
                .filter(|&a| owner(a).is_none())
                .find_map(|a| route_port(a).filter(|p| p.role == PortRole::Unprotected).map(|p| (a, p)));
            let within = |a: (u16, u16), b: (u16, u16)| a.0 <= b.0 && b.1 <= a.1;
            let selected = || {
                cfg.policies.iter().any(|p| {
                    p.direction == Direction::Outbound
                        && overlap(p.src, q.src)
                        && overlap(p.dst, q.dst)
                        && (p.protocol == Protocol::Any || p.protocol == q.protocol)
                        && within(p.src_ports, q.src_ports)
                        && within(p.dst_ports, q.dst_ports)
                })
            };
            if let Some((a, port)) = leaves.filter(|_| !selected()) {
                let what = if a == q.dst.0 { String::new() } else { format!(" in part (from {a})") };
                warn(
                    format!("policy[{j}].dst"),
                    format!("{}/{} is routed out of unprotected port {}{what}: what SPI {spi} decrypts there crosses the boundary again and no outbound policy selects it (dropped as no_policy; add one that protects it again, or bypass)", q.dst.0, q.dst.1, port.name),
                );
            }
        }
        // RFC 4301 §7.1: a non-first fragment carries no ports (OPAQUE)
        // and matches only entries with any ports. The datagrams this entry
        // takes are outside every any-port entry before it (which would
        // have taken their first fragment), so their other fragments meet
        // the any-port entries after it, in order: outbound, the first that
        // holds their addresses decides; inbound, the worker's ordered
        // lookup does the same when a BYPASS or DISCARD precedes some
        // PROTECT entry of the family, and the SA must also have an
        // any-port entry for them.
        let (Action::Protect(spi), None) = (q.action, shadow) else { continue };
        if !q.selects_ports() {
            continue;
        }
        // With `reassembly.forwarded` the worker reassembles an IPv4
        // datagram's fragments before the outbound lookup, so its ports
        // decide for all of it (datagrams over 2048 data bytes are dropped,
        // as README says), and its SA carries it whole unless its outer
        // header may not be fragmented (`df = "set"`, an IPv6 outer
        // header): a datagram too big for the tunnel is then cut again
        // before encryption, and the peer meets its non-first fragments
        // without ports.
        let outbound_v4 = q.direction == Direction::Outbound && q.src.0.is_ipv4();
        let recut = cfg.sas.iter().find(|s| s.spi == spi && s.direction == Direction::Outbound).filter(|s| s.mode == SaMode::Tunnel && (s.df == DfMode::Set || s.tunnel_dst.is_ipv6()));
        let on = cfg.reassembly.forwarded && cfg.reassembly.contexts > 0;
        if outbound_v4 && on && recut.is_none() {
            continue;
        }
        let recut_why = |s: &Sa| if s.df == DfMode::Set { "df = \"set\"" } else { "IPv6 outer header" };
        let hint = match (outbound_v4, recut) {
            (true, Some(s)) if on => format!(
                " (reassembly.forwarded reassembles them, but SPI {spi}'s {} cuts a datagram too big for the tunnel again before encryption)",
                recut_why(s)
            ),
            // Turning the option on would not keep every datagram whole.
            (true, Some(s)) => format!(
                " ({} would keep them with it only for datagrams that fit the tunnel: SPI {spi}'s {} cuts a bigger one again before encryption)",
                if cfg.dpdk_import.is_some() { "DPDK's --reassemble N, N > 0," } else { "reassembly.forwarded" },
                recut_why(s)
            ),
            (true, _) if cfg.dpdk_import.is_some() => " (DPDK's --reassemble N, N > 0, keeps them with it)".into(),
            (true, _) if cfg.reassembly.forwarded => " (reassembly.forwarded would keep them with it, but reassembly.contexts is 0)".into(),
            (true, _) if cfg.reassembly.contexts == 0 => " (reassembly.forwarded = true with reassembly.contexts > 0 keeps them with it)".into(),
            (true, _) => " (reassembly.forwarded = true keeps them with it)".into(),
            (false, _) if q.direction == Direction::Outbound && cfg.reassembly.forwarded => " (reassembly.forwarded takes IPv4 only)".into(),
            _ => String::new(),
        };
        let opaque = |p: &Policy| {
            p.direction == q.direction
                && !p.selects_ports()
                && (p.protocol == Protocol::Any || p.protocol == q.protocol)
                && overlap(p.src, q.src)
                && overlap(p.dst, q.dst)
        };
        let holds_all = |p: &Policy| holds(p.src, q.src) && holds(p.dst, q.dst);
        // Inbound, an earlier any-port PROTECT entry holding them all
        // passes their fragments in the ordered lookup before any later one.
        let passed = q.direction == Direction::Inbound
            && (0..cfg.policies.len()).any(|i| order(i) < order(j) && matches!(cfg.policies[i].action, Action::Protect(_)) && opaque(&cfg.policies[i]) && holds_all(&cfg.policies[i]));
        let mut later: Vec<usize> = (0..cfg.policies.len()).filter(|&i| !passed && order(i) > order(j) && opaque(&cfg.policies[i])).collect();
        later.sort_by_key(|&i| order(i));
        const WHY: &str = "non-first fragments of the datagrams it selects carry no ports (OPAQUE, RFC 4301 §7.1)";
        // The first later entry that takes some of them elsewhere, and
        // whether an earlier one took only part (then only some go there).
        let mut partial = false;
        let mut elsewhere = None;
        let mut held = false;
        for &i in &later {
            let p = &cfg.policies[i];
            let same = match (q.direction, p.action) {
                (Direction::Outbound, a) => a == q.action,
                // Inbound, any PROTECT entry passes the ordered lookup.
                (Direction::Inbound, Action::Protect(_)) => true,
                // A BYPASS or DISCARD one is met only if the worker looks
                // decrypted packets up at all (`Spd::protect_shadowed`).
                (Direction::Inbound, _) => !shadowed,
            };
            if !same {
                elsewhere = Some(i);
                break;
            }
            if holds_all(p) {
                held = true;
                break;
            }
            partial = true;
        }
        let some = if partial { "some of them" } else { "they" };
        let what = match elsewhere.map(|i| (i, cfg.policies[i].action)) {
            Some((i, Action::Protect(s))) => Some(format!("{some} take {}, protect {s}) instead of SPI {spi}: such a datagram is split between the two SAs, and arrives only if both fit its fragments and the peer takes the rest from SPI {s}", name(i))),
            Some((i, Action::Bypass)) if q.direction == Direction::Outbound => Some(format!("{some} take {}, bypass) and leave in the clear", name(i))),
            Some((i, Action::Bypass)) => Some(format!("{some} meet {}, bypass) first and are dropped (inner_policy_mismatch: decrypted where the SPD says clear)", name(i))),
            Some((i, _)) => Some(format!("{some} take {}, discard) and are dropped (policy_discard)", name(i))),
            None if !held && q.direction == Direction::Outbound => Some(format!("{} match no entry and are dropped (no_policy)", if later.is_empty() { "they" } else { "some of them" })),
            None => None,
        };
        if let Some(what) = what {
            warn(format!("policy[{j}]"), format!("{WHY}: {what}{hint}"));
        } else if q.direction == Direction::Inbound && !cfg.policies.iter().any(|p| p.action == q.action && opaque(p)) {
            warn(
                format!("policy[{j}]"),
                format!("{WHY}, and no inbound entry of SPI {spi} with any ports selects them: decrypted, they are dropped (inner_policy_mismatch)"),
            );
        }
    }
    if found.is_empty() {
        return Vec::new();
    }
    let p = read(&mut positions);
    match scope {
        Scope::File { .. } => found.into_iter().map(|(field, msg)| format!("{}: {msg}", p.locate(&cfg.source, &field))).collect(),
        Scope::Fragment { source, .. } => found
            .into_iter()
            .filter_map(|(field, msg)| scope.fragment_field(&field).map(|f| format!("{}: {msg}", p.locate(source, &f))))
            .collect(),
    }
}


#[cfg(test)]
mod tests {
    use super::covers;

    #[test]
    fn prefix_cover() {
        let ip = |s: &str| s.parse().unwrap();
        assert!(covers((ip("0.0.0.0"), 0), ip("203.0.113.9")));
        assert!(covers((ip("203.0.113.0"), 24), ip("203.0.113.255")));
        assert!(!covers((ip("203.0.113.0"), 24), ip("203.0.114.1")));
        assert!(covers((ip("203.0.113.2"), 32), ip("203.0.113.2")));
        assert!(!covers((ip("203.0.113.2"), 32), ip("203.0.113.3")));
        assert!(covers((ip("::"), 0), ip("2001:db8::1")));
        assert!(covers((ip("2001:db8:ff::"), 64), ip("2001:db8:ff::2")));
        assert!(!covers((ip("2001:db8:ff::"), 64), ip("2001:db8:fe::2")));
        assert!(!covers((ip("0.0.0.0"), 0), ip("::1")), "families differ");
    }
}
