//! Turning validated config items into data-plane table entries: ports,
//! sessions, SAs, selectors, routes. The [`super::manager::Manager`] keeps
//! them and publishes [`Tables`] snapshots.

use super::binding::Binding;
use super::manager::Manager;
use super::ControlError;
use crate::config::model::{self, Config, Direction};
use crate::crypto::{CipherDirection, CryptoDevice, Session, SymXform};
use crate::esp::{DfMode, DummyPlan, InboundSa, IvGen, OutboundSa, SaLife, UdpEncap};
use crate::policy::neighbour::NeighbourTable;
use crate::policy::route::{Route, Routes};
use crate::policy::sad::InboundEntry;
use crate::policy::spd::{Prefix, Selector};
use crate::policy::{PortInfo, Tables};
use std::sync::Arc;

/// The SPD selector of a policy.
pub fn selector(p: &model::Policy) -> Selector {
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

/// What the data plane knows of each port; `macs[i]` is port `i`'s MAC
/// (from config or read from the interface).
pub fn ports(cfg: &Config, macs: &[[u8; 6]]) -> Vec<PortInfo> {
    cfg.ports
        .iter()
        .zip(macs)
        .map(|(p, mac)| PortInfo {
            name: p.name.clone(),
            protected: p.role == model::PortRole::Protected,
            mac: *mac,
            addresses: p
                .addresses
                .iter()
                .filter_map(|a| match a.0 {
                    std::net::IpAddr::V4(v4) => Some(v4),
                    std::net::IpAddr::V6(_) => None,
                })
                .collect(),
            addresses6: p
                .addresses
                .iter()
                .filter_map(|a| match a.0 {
                    std::net::IpAddr::V6(v6) => Some(v6),
                    std::net::IpAddr::V4(_) => None,
                })
                .collect(),
            broadcast4: p
                .addresses
                .iter()
                .filter_map(|a| match a.0 {
                    std::net::IpAddr::V4(v4) if a.1 <= 30 => Some(std::net::Ipv4Addr::from(u32::from(v4) | (u32::MAX >> a.1))),
                    _ => None,
                })
                .collect(),
            mtu: p.mtu,
            peer_mac: p.peer_mac,
        })
        .collect()
}

/// The routing table of a config.
pub fn routes(cfg: &Config) -> Routes {
    Routes::new(cfg.routes.iter().map(|r| Route { prefix: Prefix::new(r.prefix.0, r.prefix.1), port: r.port, via: r.via }).collect())
}

/// Creates the crypto session of `sa` on `dev` (control thread). Errors: a
/// key of the wrong length, a transform the device does not support.
pub fn session<D: CryptoDevice>(dev: &D, sa: &model::Sa) -> Result<Arc<Session>, ControlError> {
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
    let s = dev.session_create(&SymXform {
        algorithm,
        direction,
        key: sa.key[..klen].to_vec(),
        salt,
        icv_len: sa.icv_len,
        auth_key: sa.auth_key.to_vec(),
    })?;
    tracing::debug!(spi = sa.spi, direction = ?sa.direction, algorithm = algorithm.name(), provider = s.provider().name(), "crypto session");
    Ok(s)
}

/// The data-plane outbound SA of config SA `sa` (outbound), with its
/// session, owner worker, id and life. Errors: no IV key from the OS
/// random source (AES-CBC).
pub fn outbound_sa(gw: &model::Gateway, sa: &model::Sa, session: Arc<Session>, owner: usize, id: u32, life: Arc<SaLife>) -> Result<OutboundSa, ControlError> {
    Ok(OutboundSa {
        spi: sa.spi,
        id,
        life,
        first_seq: sa.first_seq,
        session,
        transport: sa.mode == model::SaMode::Transport,
        tunnel_src: sa.tunnel_src,
        tunnel_dst: sa.tunnel_dst,
        outer_ttl: sa.outer_ttl.unwrap_or(gw.outer_ttl),
        df: match sa.df {
            model::DfMode::Copy => DfMode::Copy,
            model::DfMode::Set => DfMode::Set,
            model::DfMode::Clear => DfMode::Clear,
        },
        esn: sa.esn,
        udp_encap: sa.udp_encap.then_some(UdpEncap { sport: sa.udp_sport, dport: sa.udp_dport }),
        iv_gen: IvGen::for_algorithm(sa.algorithm)
            .map_err(|e| ControlError::Unsupported(format!("SA {}: no IV key from the OS random source: {e}", sa.spi)))?,
        owner,
        dummy: (sa.dummy_interval_ms > 0).then_some(DummyPlan { interval: std::time::Duration::from_millis(sa.dummy_interval_ms), len: sa.dummy_len }),
        tfc_pad_to: sa.tfc_pad_to,
        pad_align: sa.pad_align.max(sa.algorithm.block_size()),
        flow_label_key: sa.flow_label_inner.then(std::collections::hash_map::RandomState::new),
        path_mtu: Default::default(),
    })
}

/// The data-plane inbound SA of config SA `sa` (inbound) with the
/// selectors of the policies that name it (RFC 4301 §5.2).
pub fn inbound_entry(sa: &model::Sa, session: Arc<Session>, owner: usize, id: u32, life: Arc<SaLife>, selectors: Vec<Selector>) -> InboundEntry {
    InboundEntry {
        sa: InboundSa {
            spi: sa.spi,
            id,
            life,
            session,
            transport: sa.mode == model::SaMode::Transport,
            tunnel_src: sa.tunnel_src,
            tunnel_dst: sa.tunnel_dst,
            esn: sa.esn,
            replay_window: sa.replay_window,
            first_seq: sa.first_seq,
            owner,
        },
        selectors,
        udp_dport: sa.udp_encap.then_some(sa.udp_dport),
    }
}

/// Binds the SAs of `cfg` to workers, creates their sessions on `dev` and
/// builds the tables; on a device with a per-queue-pair session limit every
/// SA's session is attached to its owner worker's queue pair, so all of
/// this happens before any worker sees the tables (never on first use).
/// Errors: a config whose SAs do not fit the limit (naming the SA, the limit
/// and the totals), an unsupported transform, a refused attach.
pub fn install<D: CryptoDevice>(cfg: &Config, dev: &D, macs: &[[u8; 6]]) -> Result<(Tables, Binding), ControlError> {
    let (t, b, _) = install_with_neighbours(cfg, dev, macs)?;
    Ok((t, b))
}

/// [`install`], also returning the neighbour table whose cell the tables
/// hold (whoever runs the gateway then calls its `tick` as the control
/// thread would).
pub fn install_with_neighbours<D: CryptoDevice>(cfg: &Config, dev: &D, macs: &[[u8; 6]]) -> Result<(Tables, Binding, NeighbourTable), ControlError> {
    let mut m = Manager::new(cfg, dev, macs)?;
    let binding = m.binding().clone();
    Ok((m.tables_now(), binding, m.into_neighbours()))
}
