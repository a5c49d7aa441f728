//! What a valid config allows but is probably a mistake.

use std::net::IpAddr;

use super::model::*;

/// Warnings about a validated config, one line each, recomputed from the
/// model (so they name the field, not its line): `file: sa[0].spi: …`.
///
/// Checked: SPIs 1..=255 (reserved by IANA, RFC 4303 §2.1); inbound SAs
/// with anti-replay off (RFC 4303 §3.4.3); SAs no policy uses; tunnel
/// endpoints that are not an address of an unprotected port (when such
/// ports have addresses); two workers pinned to one core; packet limits of
/// outbound SAs without ESN beyond the sequence numbers they have left
/// (RFC 4303 §3.3.3).
pub fn warnings(cfg: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let file = cfg.source.display();
    let mut warn = |field: String, msg: String| out.push(format!("{file}: {field}: {msg}"));

    let g = &cfg.gateway;
    for (i, c) in g.cores.iter().take(g.workers).enumerate() {
        if let Some(j) = g.cores[..i].iter().position(|d| d == c) {
            warn(
                format!("gateway.cores[{i}]"),
                format!("core {c} is also given to worker {j}"),
            );
        }
    }

    let own: Vec<IpAddr> = cfg
        .ports
        .iter()
        .filter(|p| p.role == PortRole::Unprotected)
        .flat_map(|p| p.addresses.iter().map(|&(a, _)| a))
        .collect();
    for (i, sa) in cfg.sas.iter().enumerate() {
        if sa.spi <= 255 {
            warn(
                format!("sa[{i}].spi"),
                format!(
                    "SPI {} is in 1..=255, reserved by IANA (RFC 4303 §2.1); peers may reject it",
                    sa.spi
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
        let used = cfg
            .policies
            .iter()
            .any(|p| p.direction == sa.direction && p.action == Action::Protect(sa.spi));
        if !used {
            let dir = match sa.direction {
                Direction::Outbound => "outbound",
                Direction::Inbound => "inbound",
            };
            warn(
                format!("sa[{i}]"),
                format!("no {dir} policy protects with SPI {}", sa.spi),
            );
        }
        if sa.direction == Direction::Outbound && !sa.esn {
            // RFC 4303 §3.3.3: without ESN the SA ends at sequence number
            // 2^32−1, so a packet limit past that is never reached.
            let left = u64::from(u32::MAX) + 1 - sa.first_seq;
            for (key, limit) in [("soft_packets", sa.lifetime.soft.packets), ("hard_packets", sa.lifetime.hard.packets)] {
                if limit != u64::MAX && limit > left {
                    warn(
                        format!("sa[{i}].{key}"),
                        format!("{limit} packets is never reached: without esn SPI {} has {left} sequence numbers (first_seq {} to 2^32-1), then expires (RFC 4303 §3.3.3)", sa.spi, sa.first_seq),
                    );
                }
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
    out
}
