//! One-screen human summary of a validated config (`secgw check`).
//!
//! Contract: key material never appears in the output.

use std::fmt::Write;
use std::net::IpAddr;

use super::model::*;

/// How many of `cfg`'s SAs each crypto provider runs with `[crypto]
/// provider` (what `session_create` resolves it to), e.g. "ring 2,
/// rustcrypto 1"; "none" without SAs.
pub fn provider_counts(cfg: &Config) -> String {
    let counts: Vec<String> = crate::crypto::Provider::ALL
        .iter()
        .map(|&p| (p, cfg.sas.iter().filter(|sa| cfg.crypto.provider.resolve(sa.algorithm, sa.icv_len) == Some(p)).count()))
        .filter(|&(_, n)| n > 0)
        .map(|(p, n)| format!("{} {n}", p.name()))
        .collect();
    if counts.is_empty() {
        "none".into()
    } else {
        counts.join(", ")
    }
}

/// Renders `cfg` for a human: gateway settings, then ports, SAs (SPI in
/// decimal and hex, never the key), policies in evaluation order (direction,
/// then priority, then file order), routes and neighbours.
pub fn summary(cfg: &Config) -> String {
    let mut out = String::new();
    let g = &cfg.gateway;
    let cores = if g.cores.is_empty() {
        "0.. in order".to_owned()
    } else {
        g.cores
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let stats = match g.stats_interval {
        0 => "on exit only".to_owned(),
        s => format!("every {s} s"),
    };
    // One ring per ordered pair of workers, a slot holding a buffer's
    // handle and a tag (`dataplane::Handed`) plus the queue's stamp.
    let slot = (std::mem::size_of::<crate::dataplane::worker::Handed>() + 8) as u64;
    let rings = (g.workers * g.workers.saturating_sub(1)) as u64;
    let handoff_bytes = rings * g.handoff_depth as u64 * slot;
    let handoff = match rings {
        0 => String::new(),
        _ => format!(", {rings} handoff rings of {} ({} in all)", g.handoff_depth, size(handoff_bytes)),
    };
    let pool_bytes = g.pool_size as u64 * crate::io::BUF_SIZE as u64;
    let pools = pool_bytes * g.workers as u64;
    let umem = |p: &Port| 2 * p.ring_size as u64 * crate::io::af_xdp::FRAME_SIZE as u64;
    let _ = writeln!(out, "config {}", cfg.source.display());
    let _ = writeln!(
        out,
        "gateway {:?}: {} worker(s) on cores {cores}, burst {}, outer TTL {}, stats {stats}, {} buffers a worker ({}){handoff}",
        g.name, g.workers, g.burst, g.outer_ttl, g.pool_size, size(pool_bytes)
    );
    let umems: u64 = cfg.ports.iter().map(umem).sum::<u64>() * g.workers as u64;
    let _ = writeln!(
        out,
        "memory: {} in all: buffers {}, handoff rings {}, AF_XDP UMEMs {} (pinned)",
        size(pools + handoff_bytes + umems),
        size(pools),
        size(handoff_bytes),
        size(umems)
    );
    let c = &cfg.crypto;
    let backend = match c.backend {
        CryptoBackend::Software => "software",
        CryptoBackend::Descriptor => "descriptor",
    };
    let _ = writeln!(out, "crypto: backend {backend}, provider {}, queue pairs of {} ops (sessions: {})", c.provider.name(), c.ring_depth, provider_counts(cfg));
    let r = &cfg.reassembly;
    let ports_v4 = cfg.policies.iter().any(|p| p.direction == Direction::Outbound && p.src.0.is_ipv4() && p.selects_ports());
    let forwarded = match (r.forwarded, ports_v4) {
        (false, _) => "",
        (true, true) => "; also forwarded IPv4 TCP/UDP fragments between addresses a port-selecting outbound policy may match",
        (true, false) => "; reassembly.forwarded idle: no IPv4 outbound policy selects ports",
    };
    let _ = match r.contexts {
        0 => writeln!(
            out,
            "reassembly off: outer fragments to the gateway are dropped{}",
            if r.forwarded { " (reassembly.forwarded has no effect)" } else { "" }
        ),
        n => writeln!(out, "reassembly: {n} datagrams per worker, up to {} fragments each, timeout {} ms{forwarded}", r.max_fragments, r.timeout_ms),
    };
    let _ = writeln!(
        out,
        "control socket {} (secgw run --socket overrides it), rekey grace {} ms",
        cfg.control.socket.display(),
        cfg.control.rekey_grace_ms
    );
    let v6 = |ip: &IpAddr| ip.is_ipv6();
    let count = |f: &dyn Fn(bool) -> usize| format!("{} IPv4 / {} IPv6", f(false), f(true));
    let _ = writeln!(
        out,
        "families: addresses {}, policies {}, routes {}, neighbours {}",
        count(&|f| cfg.ports.iter().flat_map(|p| &p.addresses).filter(|a| v6(&a.0) == f).count()),
        count(&|f| cfg.policies.iter().filter(|p| v6(&p.src.0) == f).count()),
        count(&|f| cfg.routes.iter().filter(|r| v6(&r.prefix.0) == f).count()),
        count(&|f| cfg.neighbours.iter().filter(|n| v6(&n.ip) == f).count()),
    );

    section(
        &mut out,
        "ports",
        cfg.ports.iter().enumerate().map(|(i, p)| {
            let role = match p.role {
                PortRole::Protected => "protected",
                PortRole::Unprotected => "unprotected",
            };
            let mac = p.mac.map_or("mac from interface".to_owned(), |m| {
                format!("mac {}", mac(&m))
            });
            let addrs = if p.addresses.is_empty() {
                "no addresses".to_owned()
            } else {
                p.addresses
                    .iter()
                    .map(|&(a, l)| prefix(a, l))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let xdp = match p.xdp_mode {
                XdpMode::Skb => "skb",
                XdpMode::Native => "native",
                XdpMode::Auto => "auto",
            };
            vec![
                format!("{i}"),
                p.name.clone(),
                p.interface.clone(),
                role.into(),
                mac,
                addrs,
                format!("mtu {} queue {} xdp {xdp} rings {} (UMEM {} a worker)", p.mtu, p.queue, p.ring_size, size(umem(p))),
            ]
        }),
    );

    section(
        &mut out,
        "SAs",
        cfg.sas.iter().map(|sa| {
            let alg = if sa.icv_len == sa.algorithm.default_icv_len() {
                sa.algorithm.name().to_owned()
            } else {
                format!("{} icv {}", sa.algorithm.name(), sa.icv_len)
            };
            let mode = match sa.mode {
                SaMode::Tunnel => "tunnel",
                SaMode::Transport => "transport",
            };
            let window = match (sa.direction, sa.replay_window) {
                (Direction::Outbound, _) => "window -".to_owned(),
                (Direction::Inbound, 0) => "window off".to_owned(),
                (Direction::Inbound, w) => format!("window {w}"),
            };
            // DF and TTL are fields of the outer header an outbound
            // tunnel-mode SA builds: an inbound SA builds none, a
            // transport-mode SA keeps the packet's own header, an IPv6
            // outer header has no DF.
            let outer = sa.direction == Direction::Outbound && sa.mode == SaMode::Tunnel;
            let df = match sa.df {
                _ if !outer || sa.tunnel_dst.is_ipv6() => "df -",
                DfMode::Copy => "df copy",
                DfMode::Set => "df set",
                DfMode::Clear => "df clear",
            };
            let ttl = match sa.outer_ttl {
                _ if !outer => "ttl -".to_owned(),
                None => format!("ttl {} (default)", g.outer_ttl),
                Some(t) => format!("ttl {t}"),
            };
            let worker = sa
                .worker
                .map_or("worker auto".to_owned(), |w| format!("worker {w}"));
            let mut row = vec![
                format!("SPI {}", sa.spi),
                format!("{:#010x}", sa.spi),
                dir(sa.direction).into(),
                alg,
                format!("provider {}", cfg.crypto.provider.resolve(sa.algorithm, sa.icv_len).map_or("-", |p| p.name())),
                if sa.mode == SaMode::Transport {
                    mode.to_owned()
                } else {
                    // The outer family: the inner one is each packet's own (v4 or v6).
                    let outer = if sa.tunnel_dst.is_ipv6() { "ipv6" } else { "ipv4" };
                    format!("{mode} {outer} {} -> {}", sa.tunnel_src, sa.tunnel_dst)
                },
                window,
                df.into(),
                ttl,
                worker,
                if sa.esn { "esn".into() } else { "no-esn".into() },
                if sa.udp_encap { format!("udp {}->{}", sa.udp_sport, sa.udp_dport) } else { "esp".into() },
            ];
            if sa.pad_align > 0 {
                row.push(format!("pad align {} B", sa.pad_align));
            }
            if sa.tfc_pad_to > 0 {
                row.push(format!("tfc pad to {} B", sa.tfc_pad_to));
            }
            if sa.dummy_interval_ms > 0 {
                row.push(format!("dummy {} B every {} ms", sa.dummy_len, sa.dummy_interval_ms));
            }
            for (name, l) in [("soft", &sa.lifetime.soft), ("hard", &sa.lifetime.hard)] {
                let set: Vec<String> = [(l.packets, "pkts"), (l.bytes, "B"), (l.seconds, "s")]
                    .iter()
                    .filter(|(v, _)| *v != u64::MAX)
                    .map(|(v, unit)| format!("{v} {unit}"))
                    .collect();
                if !set.is_empty() {
                    row.push(format!("{name} {}", set.join(" ")));
                }
            }
            if sa.first_seq != 1 {
                row.push(format!("first seq {}", sa.first_seq));
            }
            row
        }),
    );

    let mut order: Vec<(usize, &Policy)> = cfg.policies.iter().enumerate().collect();
    order.sort_by_key(|(i, p)| (p.direction == Direction::Inbound, p.priority, *i));
    section(
        &mut out,
        "policies",
        order.into_iter().map(|(i, p)| {
            let proto = match p.protocol {
                Protocol::Any => "any".to_owned(),
                Protocol::Number(1) => "icmp".to_owned(),
                Protocol::Number(6) => "tcp".to_owned(),
                Protocol::Number(17) => "udp".to_owned(),
                Protocol::Number(50) => "esp".to_owned(),
                Protocol::Number(n) => n.to_string(),
            };
            let action = match p.action {
                Action::Protect(spi) => format!("protect {spi}"),
                Action::Bypass => "bypass".into(),
                Action::Discard => "discard".into(),
            };
            vec![
                format!("#{i}"),
                dir(p.direction).into(),
                format!("prio {}", p.priority),
                format!(
                    "{} -> {}",
                    prefix(p.src.0, p.src.1),
                    prefix(p.dst.0, p.dst.1)
                ),
                format!("proto {proto}"),
                format!("sport {}", ports(p.src_ports)),
                format!("dport {}", ports(p.dst_ports)),
                action,
            ]
        }),
    );

    section(
        &mut out,
        "routes",
        cfg.routes.iter().map(|r| {
            let port = cfg
                .ports
                .get(r.port)
                .map_or(format!("port #{}", r.port), |p| {
                    format!("port {} ({})", p.name, p.interface)
                });
            let via = r.via.map_or("on link".to_owned(), |v| format!("via {v}"));
            vec![prefix(r.prefix.0, r.prefix.1), via, port]
        }),
    );

    section(
        &mut out,
        "neighbours",
        cfg.neighbours
            .iter()
            .map(|n| vec![n.ip.to_string(), mac(&n.mac)]),
    );
    out
}

/// Appends `title (n):` and the rows as left-aligned columns.
fn section(out: &mut String, title: &str, rows: impl Iterator<Item = Vec<String>>) {
    let rows: Vec<Vec<String>> = rows.collect();
    let _ = writeln!(out, "{title} ({}):", rows.len());
    if rows.is_empty() {
        out.push_str("  (none)\n");
        return;
    }
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        let mut line = String::from(" ");
        for (c, cell) in row.iter().enumerate() {
            line.push(' ');
            line.push_str(cell);
            if c + 1 < row.len() {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count()));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn dir(d: Direction) -> &'static str {
    match d {
        Direction::Outbound => "outbound",
        Direction::Inbound => "inbound",
    }
}

fn prefix(a: IpAddr, len: u8) -> String {
    format!("{a}/{len}")
}

fn ports((lo, hi): (u16, u16)) -> String {
    match (lo, hi) {
        ANY_PORTS => "any".into(),
        (lo, hi) if lo == hi => lo.to_string(),
        (lo, hi) => format!("{lo}-{hi}"),
    }
}

fn mac(m: &Mac) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Bytes for people: "2.1 MiB", "640 KiB", "1.5 GiB" (KiB whole, the
/// others to one decimal).
fn size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB * KIB {
        format!("{:.0} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else {
        format!("{:.1} GiB", b / (KIB * KIB * KIB))
    }
}
