//! ESP for the generator and the sink: SAs taken from a secgw TOML config
//! and built exactly as the gateway builds them
//! ([`crate::control::tables`]), on a software crypto device of one queue
//! pair. The generator seals with [`crate::esp::outbound`] (RFC 4303
//! §3.1.2, tunnel or transport as the SA says), the sink opens with
//! [`crate::esp::inbound`] (§3.4). Lifetimes are not enforced here.

use super::build::FlowSpec;
use super::PktgenError;
use crate::config::{self, model};
use crate::control::tables;
use crate::crypto::soft::{SoftDevice, SoftQueuePair};
use crate::crypto::{CryptoDevice, QpConf};
use crate::esp::{InboundState, OutboundSa, OutboundState, SaLife};
use crate::io::PktBuf;
use crate::policy::sad::InboundEntry;
use crate::policy::spd::{FlowKey, Spd, SpdAction, SpdEntry};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

/// Depth of the queue pair (two bursts).
const QP_DEPTH: usize = 2 * super::BURST;

/// Loads a config (its errors already name the file).
fn load(path: &Path) -> Result<model::Config, PktgenError> {
    config::load(path).map_err(|e| PktgenError::Config(e.to_string()))
}

/// The outbound SA with SPI `spi` of a config, its sequence state and a
/// queue pair to seal with.
pub struct EspTx {
    /// The SA (key, mode, tunnel addresses, algorithm of the config).
    pub sa: OutboundSa,
    /// Its sequence counter.
    pub state: OutboundState,
    /// Queue pair of a one-queue-pair software device.
    pub qp: SoftQueuePair<PktBuf>,
    /// The config's outbound SPD, `Protect` holding the SPI itself.
    spd: Spd,
    _dev: SoftDevice,
}

impl EspTx {
    /// Loads `path` and builds its outbound SA `spi`; the first packet will
    /// carry sequence number `seq_start` (1 for a fresh SA, RFC 4303
    /// §3.3.3). Errors: the config does not load, has no outbound SA
    /// `spi`, `seq_start` is 0 or past the SA's sequence space, or the
    /// session cannot be made.
    pub fn from_config(path: &Path, spi: u32, seq_start: u64) -> Result<EspTx, PktgenError> {
        let cfg = load(path)?;
        let Some(c) = cfg.sas.iter().find(|s| s.spi == spi && s.direction == model::Direction::Outbound) else {
            let outbound: Vec<String> = cfg.sas.iter().filter(|s| s.direction == model::Direction::Outbound).map(|s| s.spi.to_string()).collect();
            let outbound = if outbound.is_empty() { "none".to_string() } else { outbound.join(", ") };
            let inbound = cfg.sas.iter().any(|s| s.spi == spi && s.direction == model::Direction::Inbound);
            let what = if inbound { format!("SPI {spi} is an inbound SA (the ESP this gateway receives), not one to send with") } else { format!("no SA with SPI {spi}") };
            return Err(PktgenError::Config(format!("{}: {what}; its outbound SAs: {outbound}", path.display())));
        };
        let limit = if c.esn { u64::MAX } else { u32::MAX as u64 };
        if seq_start == 0 || seq_start > limit {
            return Err(PktgenError::Invalid(format!("--esp-seq-start {seq_start}: must be 1..={limit}")));
        }
        let dev = SoftDevice::new(1);
        let session = tables::session(&dev, c).map_err(|e| PktgenError::Config(e.to_string()))?;
        let mut sa = tables::outbound_sa(&cfg.gateway, c, session, 0, 0, Arc::new(SaLife::default())).map_err(|e| PktgenError::Config(e.to_string()))?;
        sa.first_seq = seq_start;
        sa.dummy = None;
        let state = OutboundState::new(&sa);
        let qp = dev.queue_pair_setup(0, QpConf { nb_descriptors: QP_DEPTH }).map_err(|e| PktgenError::Config(e.to_string()))?;
        let spd = Spd::new(
            cfg.policies
                .iter()
                .filter(|p| p.direction == model::Direction::Outbound)
                .map(|p| SpdEntry {
                    selector: tables::selector(p),
                    priority: p.priority,
                    action: match p.action {
                        model::Action::Protect(s) => SpdAction::Protect(s as usize),
                        model::Action::Bypass => SpdAction::Bypass,
                        model::Action::Discard => SpdAction::Discard,
                    },
                })
                .collect(),
        );
        Ok(EspTx { sa, state, qp, spd, _dev: dev })
    }

    /// Flows of `spec` (UDP `src:sport+i → dst:dport`) that the config's
    /// outbound SPD would not protect with this SA (another SA, bypass,
    /// discard, or no policy), as (flow, what the SPD does instead). The
    /// generator seals them anyway; the peer's inbound policy check (RFC
    /// 4301 §5.2) then drops them after decryption. Empty when all match.
    pub fn flows_outside_policy(&self, spec: &FlowSpec) -> Vec<(u32, String)> {
        (0..spec.flows)
            .filter_map(|i| {
                let k = FlowKey { src: spec.src, dst: spec.dst, protocol: crate::wire::ipv4::PROTO_UDP, ports: Some((spec.sport.wrapping_add(i as u16), spec.dport)) };
                match self.spd.lookup(&k) {
                    Some(SpdAction::Protect(s)) if s == self.sa.spi as usize => None,
                    Some(SpdAction::Protect(s)) => Some((i, format!("protected by SA {s}"))),
                    Some(SpdAction::Bypass) => Some((i, "bypassed".into())),
                    Some(SpdAction::Discard) => Some((i, "discarded".into())),
                    None => Some((i, "matched by no policy".into())),
                }
            })
            .collect()
    }

    /// Outer IP version of the SA's packets (tunnel mode: the endpoints';
    /// transport mode: `None`, the packet's own).
    pub fn tunnel_family_v6(&self) -> Option<bool> {
        (!self.sa.transport).then_some(self.sa.tunnel_dst.is_ipv6())
    }
}

/// The inbound SAs of a config, their replay windows and a queue pair to
/// open with.
pub struct EspRx {
    /// SAs with the selectors of the config's inbound policies that name
    /// them (as the gateway builds them: [`tables::inbound_entry`]; the
    /// decapsulated packet must match one, RFC 4301 §5.2), and their
    /// states, in config order.
    pub sas: Vec<(InboundEntry, InboundState)>,
    /// The UDP destination ports of those with `udp_encap` (RFC 3948),
    /// each once: ESP in UDP to one of them is opened.
    pub natt_ports: Vec<u16>,
    /// Queue pair of a one-queue-pair software device.
    pub qp: SoftQueuePair<PktBuf>,
    _dev: SoftDevice,
}

impl EspRx {
    /// Loads `path` and builds every inbound SA with the selectors of the
    /// inbound policies that protect with it (an SA that no policy names
    /// admits nothing, as in the gateway). Errors: the config does not
    /// load, has no inbound SA, or a session cannot be made.
    pub fn from_config(path: &Path) -> Result<EspRx, PktgenError> {
        let cfg = load(path)?;
        let dev = SoftDevice::new(1);
        let mut sas = Vec::new();
        for c in cfg.sas.iter().filter(|s| s.direction == model::Direction::Inbound) {
            let session = tables::session(&dev, c).map_err(|e| PktgenError::Config(e.to_string()))?;
            let selectors = cfg
                .policies
                .iter()
                .filter(|p| p.direction == model::Direction::Inbound && p.action == model::Action::Protect(c.spi))
                .map(tables::selector)
                .collect();
            let e = tables::inbound_entry(c, session, 0, 0, Arc::new(SaLife::default()), selectors);
            let st = InboundState::new(&e.sa);
            sas.push((e, st));
        }
        if sas.is_empty() {
            return Err(PktgenError::Config(format!("{}: no inbound SA", path.display())));
        }
        let qp = dev.queue_pair_setup(0, QpConf { nb_descriptors: QP_DEPTH }).map_err(|e| PktgenError::Config(e.to_string()))?;
        let mut natt_ports: Vec<u16> = sas.iter().filter_map(|(e, _)| e.udp_dport).collect();
        natt_ports.sort_unstable();
        natt_ports.dedup();
        Ok(EspRx { sas, natt_ports, qp, _dev: dev })
    }

    /// Index of the SA for `spi` arriving for outer destination `dst`: a
    /// tunnel-mode SA must match both (RFC 4301 §4.1), a transport-mode one
    /// the SPI alone. Linear in the SAs (a sink has a few).
    #[inline]
    pub fn find(&self, spi: u32, dst: IpAddr) -> Option<usize> {
        self.sas.iter().position(|(e, _)| e.sa.spi == spi && (e.sa.transport || e.sa.tunnel_dst == dst))
    }
}
