//! Building the data-plane tables from a validated config.

use super::binding::Binding;
use super::ControlError;
use crate::config::model::{self, Action, Config, Direction};
use crate::crypto::{CipherDirection, CryptoDevice, SymXform};
use crate::esp::{DfMode, DummyPlan, InboundSa, IvGen, OutboundSa, UdpEncap};
use crate::policy::neighbour::Neighbours;
use crate::policy::route::{Route, Routes};
use crate::policy::sad::{InboundEntry, Sad};
use crate::policy::spd::{Prefix, Selector, Spd, SpdAction, SpdEntry};
use crate::policy::{PortInfo, Tables};

fn selector(p: &model::Policy) -> Selector {
    Selector {
        src: Prefix::new(p.src.0, p.src.1),
        dst: Prefix::new(p.dst.0, p.dst.1),
        protocol: match p.protocol {
            model::Protocol::Any => None,
            model::Protocol::Number(n) => Some(n),
        },
        src_ports: p.src_ports,
        dst_ports: p.dst_ports,
    }
}

/// Creates one session per SA on `dev` and builds the [`Tables`].
///
/// `macs[i]` is port `i`'s MAC (from config or read from the interface);
/// `binding` says which worker owns each SA. Sessions are created here but
/// not attached: the caller attaches them to their owners' queue pairs (on
/// limited devices) before publishing the tables. Errors: a transform the
/// device does not support.
pub fn build<D: CryptoDevice>(cfg: &Config, dev: &D, macs: &[[u8; 6]], binding: &Binding) -> Result<Tables, ControlError> {
    let ports = cfg
        .ports
        .iter()
        .zip(macs)
        .map(|(p, mac)| PortInfo {
            name: p.name.clone(),
            protected: p.role == model::PortRole::Protected,
            mac: *mac,
            addresses: p.addresses.iter().filter_map(|a| match a.0 {
                std::net::IpAddr::V4(v4) => Some(v4),
                std::net::IpAddr::V6(_) => None,
            }).collect(),
            addresses6: p.addresses.iter().filter_map(|a| match a.0 {
                std::net::IpAddr::V6(v6) => Some(v6),
                std::net::IpAddr::V4(_) => None,
            }).collect(),
            mtu: p.mtu,
        })
        .collect();

    let mut outbound = Vec::new();
    let mut inbound = Vec::new();
    // SPI → index within its direction's list.
    let mut out_idx = std::collections::HashMap::new();
    let mut in_idx = std::collections::HashMap::new();
    for (sa_index, sa) in cfg.sas.iter().enumerate() {
        let algorithm = sa.algorithm;
        let (klen, slen) = (algorithm.key_len(), algorithm.salt_len());
        if sa.key.len() != klen + slen {
            return Err(ControlError::Unsupported(format!("SA {}: key is {} bytes, expected {}", sa.spi, sa.key.len(), klen + slen)));
        }
        let mut salt = [0u8; 4];
        salt[..slen].copy_from_slice(&sa.key[klen..]);
        let direction = match sa.direction {
            Direction::Outbound => CipherDirection::Encrypt,
            Direction::Inbound => CipherDirection::Decrypt,
        };
        let session = dev.session_create(&SymXform {
            algorithm,
            direction,
            key: sa.key[..klen].to_vec(),
            salt,
            icv_len: sa.icv_len,
            auth_key: sa.auth_key.to_vec(),
        })?;
        let owner = binding.owner.get(sa_index).copied().unwrap_or(0);
        match sa.direction {
            Direction::Outbound => {
                out_idx.insert(sa.spi, outbound.len());
                outbound.push(OutboundSa {
                    spi: sa.spi,
                    session,
                    transport: sa.mode == model::SaMode::Transport,
                    tunnel_src: sa.tunnel_src,
                    tunnel_dst: sa.tunnel_dst,
                    outer_ttl: sa.outer_ttl.unwrap_or(cfg.gateway.outer_ttl),
                    df: match sa.df {
                        model::DfMode::Copy => DfMode::Copy,
                        model::DfMode::Set => DfMode::Set,
                        model::DfMode::Clear => DfMode::Clear,
                    },
                    esn: sa.esn,
                    udp_encap: sa.udp_encap.then_some(UdpEncap { sport: sa.udp_sport, dport: sa.udp_dport }),
                    iv_gen: IvGen::for_algorithm(algorithm)
                        .map_err(|e| ControlError::Unsupported(format!("SA {}: no IV key from the OS random source: {e}", sa.spi)))?,
                    owner,
                    dummy: (sa.dummy_interval_ms > 0).then_some(DummyPlan {
                        interval: std::time::Duration::from_millis(sa.dummy_interval_ms),
                        len: sa.dummy_len,
                    }),
                    tfc_pad_to: sa.tfc_pad_to,
                });
            }
            Direction::Inbound => {
                in_idx.insert(sa.spi, inbound.len());
                inbound.push(InboundEntry {
                    sa: InboundSa {
                        spi: sa.spi,
                        session,
                        transport: sa.mode == model::SaMode::Transport,
                        tunnel_src: sa.tunnel_src,
                        tunnel_dst: sa.tunnel_dst,
                        esn: sa.esn,
                        replay_window: sa.replay_window,
                        owner,
                    },
                    selectors: Vec::new(),
                    udp_dport: sa.udp_encap.then_some(sa.udp_dport),
                });
            }
        }
    }

    let mut spd_out = Vec::new();
    let mut spd_in = Vec::new();
    for p in &cfg.policies {
        let sel = selector(p);
        let (list, idx) = match p.direction {
            Direction::Outbound => (&mut spd_out, &out_idx),
            Direction::Inbound => (&mut spd_in, &in_idx),
        };
        let action = match p.action {
            Action::Bypass => SpdAction::Bypass,
            Action::Discard => SpdAction::Discard,
            Action::Protect(spi) => {
                let Some(&i) = idx.get(&spi) else {
                    return Err(ControlError::Unsupported(format!("policy protects with unknown SPI {spi}")));
                };
                if p.direction == Direction::Inbound {
                    inbound[i].selectors.push(sel);
                }
                SpdAction::Protect(i)
            }
        };
        list.push(SpdEntry { selector: sel, priority: p.priority, action });
    }

    let mut natt_ports = vec![crate::wire::udp::NATT_PORT];
    for e in &inbound {
        if let Some(p) = e.udp_dport {
            if !natt_ports.contains(&p) {
                natt_ports.push(p);
            }
        }
    }
    let routes = cfg.routes.iter().map(|r| Route { prefix: Prefix::new(r.prefix.0, r.prefix.1), port: r.port, via: r.via }).collect();
    Ok(Tables {
        ports,
        spd_out: Spd::new(spd_out),
        spd_in: Spd::new(spd_in),
        sad: Sad::new(outbound, inbound),
        routes: Routes::new(routes),
        neighbours: Neighbours::new(cfg.neighbours.iter().map(|n| (n.ip, n.mac))),
        natt_ports,
    })
}

/// Binds the SAs of `cfg` to workers, creates their sessions on `dev` and
/// builds the tables; on a device with a per-queue-pair session limit it then
/// attaches every SA's session to its owner worker's queue pair, so all of
/// this happens before any worker sees the tables (never on first use).
/// Errors: a config whose SAs do not fit the limit (naming the SA, the limit
/// and the totals), an unsupported transform, a refused attach.
pub fn install<D: CryptoDevice>(cfg: &Config, dev: &D, macs: &[[u8; 6]]) -> Result<(Tables, Binding), ControlError> {
    let info = dev.info();
    let binding = super::binding::bind(cfg, info.max_sessions_per_qp)?;
    let t = build(cfg, dev, macs, &binding)?;
    if info.max_sessions_per_qp > 0 && info.flags.attach_sessions {
        for sa in &t.sad.outbound {
            dev.queue_pair_attach_session(sa.owner as u16, &sa.session)?;
        }
        for e in &t.sad.inbound {
            dev.queue_pair_attach_session(e.sa.owner as u16, &e.sa.session)?;
        }
    }
    Ok((t, binding))
}

