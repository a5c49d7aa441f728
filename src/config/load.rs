//! TOML → [`Config`]: decoding with spans, then validation that collects
//! every problem of the file.
//!
//! # Schema
//!
//! ```toml
//! [gateway]                 # optional table
//! name = "gw0"              # default "secgw"
//! workers = 1               # >= 1, default 1
//! cores = [1]               # optional: one core per worker, so length >= workers
//!                           # (whether each core exists is checked at start, not here)
//! stats_interval = 0        # seconds between stats prints, 0 = only on exit; default 0
//! outer_ttl = 64            # default outer TTL of tunnel SAs, 1..=255, default 64
//! burst = 32                # packets per rx burst, 1..=256, default 32
//! idle_sleep_us = 50        # sleep between polls once idle, 0..=10000; 0 = always
//!                           # busy-poll, default 50
//! idle_spin_us = 100        # idle = this long without a received frame, 0..=1000000;
//!                           # default 100; unused with idle_sleep_us = 0
//! pmtu_timeout_s = 600      # how long a tunnel SA's path MTU learned from ICMP holds
//!                           # (RFC 4301 §8.2), 0..=86400 s; 0 = such ICMP is ignored; default 600
//! pool_size = 4096          # packet buffers per worker (2176 bytes each), 1024..=262144, at least
//!                           # 4 × neighbour_table.pending_packets and, with 2 workers or more,
//!                           # 2 × handoff_depth; workers × pool_size <= 1048576; default 4096
//! handoff_depth = 2048      # packets per handoff ring between two workers, power of two in
//!                           # 64..=65536; how long an SA's owner may be off its core before
//!                           # handed packets drop as handoff_full (2048 ≈ 100 ms at 20 kpps)
//! icmp_echo = true          # answer ICMP/ICMPv6 Echo Requests to the gateway's addresses
//!                           # (RFC 1812 §4.3.3.6, RFC 4443 §4.2), default true
//!
//! [crypto]                  # optional table: the crypto device (one queue pair per worker)
//! backend = "software"      # "software" (default) | "descriptor" (emulated job-ring hardware)
//! ring_depth = 1024         # ops in flight per queue pair, power of two in 16..=65536 (software:
//!                           # the workers' bursts run in place, so it bounds only enqueue_burst)
//! max_sessions_per_qp = 64  # descriptor only: 1..=65536, default 64
//! engines = 1               # descriptor only: engine threads, 1..=64, default 1
//! provider = "auto"         # crypto library of the backend's transforms: "auto" (default: ring
//!                           # for aes-128/256-gcm with icv_len 16 and chacha20-poly1305, the
//!                           # fastest here; RustCrypto for the rest) | "rustcrypto" (every
//!                           # algorithm) | "ring" (only those three: any other SA is an error)
//!
//! [reassembly]              # optional table: outer IPv4/IPv6 fragments to the gateway (ESP, ESP in
//!                           # UDP) are reassembled per worker before decryption (RFC 4303 §3.4.1)
//! contexts = 64             # datagrams being reassembled at once per worker, 0..=1024; 0 = off
//!                           # (fragments to the gateway dropped as `fragment`); default 64
//! max_fragments = 16        # fragments one datagram may have, 2..=256, default 16
//! timeout_ms = 5000         # time a datagram has to complete from its first fragment,
//!                           # 10..=120000 ms, default 5000
//! forwarded = false         # also IPv4 TCP/UDP fragments forwarded from a protected port, before
//!                           # the outbound SPD lookup, between addresses a port-selecting IPv4
//!                           # outbound policy may match (RFC 4301 §7: non-first fragments carry
//!                           # no ports); default false
//!
//! [neighbour_table]         # optional table: ARP (RFC 826) / Neighbor Discovery (RFC 4861)
//!                           # resolution of next hops without a [[neighbour]] entry or peer_mac
//! max_entries = 4096        # learned entries kept, 1..=1048576; full: the oldest learned goes
//! reachable_ms = 30000      # an entry is REACHABLE this long after a confirmation, then STALE
//!                           # (used and probed), removed after 3 more retrans_ms; 1000..=3600000
//! retrans_ms = 1000         # between requests / probes for one address, 100..=60000; an
//!                           # unresolved next hop is given up after 3 requests
//! pending_packets = 256     # packets per worker waiting for a MAC, 0..=1024 and at most
//!                           # gateway.pool_size / 4 (0: none wait)
//! pending_per_hop = 16      # of those, per next hop, 1..=pending_packets (when > 0)
//!
//! [control]                 # optional table: the control socket (`secgw ctl`)
//! socket = "/run/secgw/gw0.sock"  # path, at most 107 bytes; default "/run/secgw/<gateway.name>.sock"
//!                           # (`secgw run --socket PATH` overrides it)
//! rekey_grace_ms = 5000     # how long an inbound SA stays valid after a rekey replaced it,
//!                           # 0..=3600000 ms, default 5000
//!
//! [[port]]                  # at least one protected and one unprotected
//! name = "inside"           # required, unique; routes name ports by it
//! interface = "gw0-in"      # required, unique, 1..=15 bytes (IFNAMSIZ-1), no '/', ':' or spaces
//! role = "protected"        # required: "protected" (inside, plaintext) | "unprotected" (outside, ESP)
//! mac = "02:00:00:00:00:01" # optional unicast MAC; default: read from the interface
//! addresses = ["192.0.2.1/24", "2001:db8:a::1/64"]  # optional, the gateway's own IPv4
//!                           # "a.b.c.d/len" (answers ARP) and IPv6 "x::y/len" addresses
//!                           # (answers Neighbor Solicitations, RFC 4861 §7.2.4)
//! queue = 0                 # interface queue for the AF_XDP socket, default 0
//! mtu = 1500                # largest IP packet sent on this port, 576..=1985, default 1500
//! xdp_mode = "skb"          # "skb" | "native" | "auto", default "skb"
//! peer_mac = "02:00:00:00:00:09"  # optional: destination MAC for packets out of this port
//!                           # whose next hop has no neighbour entry (DPDK's `neigh` / `--eth-dest`)
//! ring_size = 2048          # entries of each AF_XDP ring (rx, fill, tx, completion) per worker,
//!                           # power of two in 64..=16384, at least 4 × gateway.burst, default
//!                           # 2048; UMEM 2 × ring_size frames of 4 KiB. The rx ring is how many
//!                           # frames wait for a worker off its core; more drop as
//!                           # rx_dropped_backend (2048 ≈ 100 ms at 20 kpps)
//!
//! [[sa]]                    # (spi, direction) must be unique
//! spi = 1001                # required: integer or string ("1001", "0x3e9"); 0 is an error
//!                           # (RFC 4303 §2.1), 1..=255 is accepted with a warning
//! direction = "outbound"    # required: "outbound" (we encrypt) | "inbound" (we decrypt)
//! mode = "tunnel"           # optional: "tunnel" (default) | "transport" (RFC 4303 §3.1.1: ESP
//!                           #   inserted after the forwarded packet's own IPv4 header; then
//!                           #   tunnel_src, tunnel_dst, outer_ttl and df are errors; udp_encap
//!                           #   is allowed: UDP between that header and ESP, RFC 3948 §3.2)
//! algorithm = "aes-128-gcm" # required: "aes-{128,192,256}-gcm" (RFC 4106),
//!                           # "aes-{128,192,256}-gmac" (RFC 4543, authentication only),
//!                           # "aes-{128,192,256}-ccm" (RFC 4309),
//!                           # "chacha20-poly1305" (RFC 7634),
//!                           # "aes-{128,192,256}-cbc-hmac-{sha1,sha256}" (RFC 3602 with RFC 2404 / RFC 4868),
//!                           # "aes-{128,192,256}-ctr-hmac-{sha1,sha256}" (RFC 3686 with RFC 2404 / RFC 4868),
//!                           # "null-hmac-sha1" | "null-hmac-sha256" (RFC 2410)
//! key = "00112233…"         # cipher key material in hex (':' separators allowed):
//!                           #   GCM, GMAC: AES key ‖ 4-byte salt (RFC 4106 §8.1, RFC 4543 §3.2):
//!                           #     40 hex digits for 128-bit, 56 for 192-bit, 72 for 256-bit keys
//!                           #   CCM: AES key ‖ 3-byte salt (RFC 4309 §7.1): 38 / 54 / 70
//!                           #   chacha20-poly1305: 256-bit key ‖ 4-byte salt (RFC 7634 §2): 72
//!                           #   CTR: AES key ‖ 4-byte nonce (RFC 3686 §5.1): 40 / 56 / 72
//!                           #   CBC: the AES key alone: 32 / 48 / 64
//!                           #   null-*: none (an error if given)
//!                           # GCM, GMAC, CCM, CTR, chacha20-poly1305: two SAs with the same key
//!                           #   material are an error (nonce = salt ‖ sequence number)
//! auth_key = "…"            # *-hmac-sha1: 40 hex digits (RFC 2404), *-hmac-sha256: 64 (RFC 4868);
//!                           # required for those, an error for the combined modes above
//! esn = false               # extended sequence numbers (RFC 4303 §2.2.1): 64-bit counter,
//!                           # high half in the ICV/AAD only; both ends must agree
//! icv_len = 16              # optional ICV bytes: 8 | 12 | 16 for GCM (RFC 4106 §6) and CCM (RFC 4309 §3.1), default 16;
//!                           # others accept only their fixed size (HMAC-SHA1-96: 12, else 16)
//! tunnel_src = "203.0.113.1"  # required in tunnel mode, outer source (unicast IPv4 or IPv6)
//! tunnel_dst = "203.0.113.2"  # required in tunnel mode, outer destination (unicast, the family
//!                           # of tunnel_src, != tunnel_src); IPv6 endpoints = an IPv6 outer header
//! replay_window = 64        # inbound only (an error on outbound); 0 = off, max 65536, default 64
//! outer_ttl = 64            # optional 1..=255; default gateway.outer_ttl
//! df = "copy"               # "copy" | "set" | "clear", default "copy" (RFC 4301 §8.1);
//!                           # IPv4 endpoints only (an IPv6 outer header has no DF bit)
//! udp_encap = false         # ESP in UDP for NAT traversal (RFC 3948), default false
//! udp_port = 4500           # with udp_encap: UDP source and destination port, 1..=65535, default 4500
//! udp_sport = 4500          # with udp_encap: overrides udp_port for the source port
//! udp_dport = 4500          # with udp_encap: overrides udp_port for the destination port
//!                           #   (outbound: the peer's port as its NAT maps it; inbound: the
//!                           #   port we receive on; an inbound SA does not check the source port)
//! dummy_interval_ms = 0     # outbound tunnel SAs only: one dummy packet (RFC 4303 §2.6, Next
//!                           #   Header 59) per this many ms, 0..=3600000, default 0 = none
//! dummy_len = 0             # with dummy_interval_ms: bytes of (zero) payload per dummy,
//!                           #   0..=1400, default 0; the dummy must fit the MTU of the port
//!                           #   routed to tunnel_dst; at run time cut to what fits a learned
//!                           #   path MTU
//! tfc_pad_to = 0            # outbound tunnel SAs only: TFC padding (RFC 4303 §2.7), inner packets
//!                           #   shorter than this are padded with zeros to it, 0..=1400, default
//!                           #   0 = off; padded, they must fit the mtu of the port routed to
//!                           #   tunnel_dst; at run time capped to what fits a learned path MTU
//! flow_label = "zero"       # outbound tunnel SAs with IPv6 endpoints: the outer flow label,
//!                           #   "zero" (default: tells nothing of the inner flows) or "inner"
//!                           #   (keyed hash of the inner addresses, protocol and ports, RFC 6438)
//! pad_align = 0             # outbound SAs only: ESP padding alignment in bytes (RFC 4303 §2.4),
//!                           #   payload + padding + 2 end on a multiple of it; 0 (default) = the
//!                           #   algorithm's block size (4, 16 for AES-CBC); else 4, 8, 16, 32, 64,
//!                           #   128 or 256, at least that. 16 with AES-GCM costs up to 12 bytes a
//!                           #   packet and spares the cipher its partial-block path (README, Figures)
//! soft_packets = 1000000    # lifetime limits (RFC 4301 §4.4.2.1), each optional, absent = none:
//! hard_packets = 1200000    #   integers >= 1 (up to 2^63-1); *_bytes count inner packet bytes;
//! soft_bytes = 1000000000   #   *_seconds from the SA's installation, 1..=315576000 (10 years);
//! hard_bytes = 1200000000   #   a soft limit must be below its hard limit when both are given.
//! soft_seconds = 3000       #   Soft: an event asks for a rekey; hard: the SA's packets are
//! hard_seconds = 3600       #   dropped as `sa_expired` from then on. Both directions.
//! first_seq = 1             # sequence number of the first packet, default 1; 1..=4294967295
//!                           #   without esn, 1..=2^64-1 with (above 2^63-1 as a string, decimal
//!                           #   or "0x…"). Outbound: without esn the SA hard-expires after
//!                           #   2^32-1 instead of cycling (RFC 4303 §3.3.3). Inbound: the peer's
//!                           #   first_seq; the replay window starts just below it (with esn,
//!                           #   the high 32 bits are inferred from there, RFC 4303 App. A2)
//! worker = 0                # optional worker index < gateway.workers; default: balanced
//!
//! [[policy]]                # SPD entry; lower priority wins, ties by file order
//! direction = "outbound"    # required: "outbound" | "inbound"
//! src = "192.0.2.0/24"      # IPv4 or IPv6 prefix; host bits set is an error; src and dst of
//! dst = "198.51.100.0/24"   #   one family; a missing one is "any" of the other's family
//!                           #   ("0.0.0.0/0" or "::/0"), both missing = "0.0.0.0/0" (IPv4);
//!                           #   a policy matches packets of its family only
//! protocol = "udp"          # "any" (default) | "icmp" | "tcp" | "udp" | integer 0..=255
//! src_ports = "1000-2000"   # "any" (default) | "N" | "N-M" with N <= M (or an integer);
//! dst_ports = "any"         #   a range other than "any" needs protocol tcp/udp (6/17)
//! priority = 10             # default 100
//! action = "protect 1001"   # required: "protect <spi>" (decimal or 0x hex; names an SA of
//!                           # the same direction) | "bypass" | "discard"
//!
//! [[route]]                 # static route; prefixes unique
//! prefix = "198.51.100.0/24"  # required, IPv4 or IPv6; host bits set is an error
//! port = "outside"          # required: a [[port]] name
//! via = "203.0.113.2"       # optional next hop of the prefix's family; default: on the link
//!
//! [[neighbour]]             # static ARP / IPv6 neighbour entry; ips unique
//! ip = "203.0.113.2"        # required, unicast IPv4 or IPv6
//! mac = "02:00:00:00:01:02" # required, unicast MAC
//! ```
//!
//! Problems are reported as `file:line:column: field: expected …, found …`,
//! the field path with 0-based indices in file order (`sa[1].key`). A missing
//! key is reported at its table's header.
//!
//! How: every table is decoded into a raw struct (`#[serde(deny_unknown_fields)]`,
//! so a typo in a key is a decoding error at the key) whose fields are
//! `Option<Spanned<Raw>>`, i.e. any TOML value with its byte span. Types,
//! ranges, formats and cross-references are then checked here, so all
//! problems are found in one pass and each message names its field.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::ops::Range;
use std::path::Path;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;
use zeroize::{Zeroize, Zeroizing};

use super::model::*;
use crate::esp::{Lifetime, Limits};
use super::{ConfigError, Problem};

/// Reads and validates the config file at `path`.
///
/// Errors: [`ConfigError::Read`] if it cannot be read, [`ConfigError::Syntax`]
/// for TOML syntax or shape errors, [`ConfigError::Invalid`] with every
/// semantic problem otherwise.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = read_text(path)?;
    parse(&text, path)
}

/// Reads a config file of either kind as text, wiped when dropped (it
/// holds the keys in hex).
///
/// Errors: [`ConfigError::Read`] when it cannot be read, is not a regular
/// file or is larger than [`MAX_CONFIG_BYTES`]; [`ConfigError::Syntax`]
/// at the line and column of the first byte that is not UTF-8.
pub fn read_text(path: &Path) -> Result<Zeroizing<String>, ConfigError> {
    let read_err = |source| ConfigError::Read { path: path.to_path_buf(), source };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if !meta.is_file() {
        return Err(read_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} bytes, more than the {MAX_CONFIG_BYTES}-byte limit for a config file", meta.len()),
        )));
    }
    let bytes = Zeroizing::new(std::fs::read(path).map_err(read_err)?);
    match std::str::from_utf8(&bytes) {
        Ok(s) => Ok(Zeroizing::new(s.to_owned())),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            // Valid UTF-8 up to the bad byte: its column counts characters.
            let column = std::str::from_utf8(&good[line_start..]).map_or(1, |l| l.chars().count() + 1);
            Err(ConfigError::Syntax(Problem {
                file: path.to_path_buf(),
                line: good.iter().filter(|&&b| b == b'\n').count() + 1,
                column,
                field: String::new(),
                message: format!("byte 0x{:02x} is not UTF-8: a config file is UTF-8 text", bytes[e.valid_up_to()]),
            }))
        }
    }
}

/// Largest config file `load` reads: 64 MiB. 100,000 AES-GCM tunnel SAs
/// with a policy each take ≈ 34 MB of TOML as `import-dpdk` writes it
/// (helper-103: at the old 16 MiB a 60,000-SA import's output could not
/// be loaded); the limit keeps a wrong path (a disk image) from being
/// read whole.
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// Packet buffers of all workers together at most (`gateway.workers` ×
/// `gateway.pool_size`, 2.1 GiB of 2176-byte buffers): every worker sizes
/// its queues at start for all of them (any may be handed to it).
const MAX_BUFFERS: i64 = 1 << 20;

/// Validates config `text`; `source` names the file in messages and in
/// [`Config::source`].
pub fn parse(text: &str, source: &Path) -> Result<Config, ConfigError> {
    let raw: RawFile = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => return Err(ConfigError::Syntax(decode_problem(text, source, &e))),
    };
    let mut ck = Checker::new(text, source);
    let cfg = ck.config(raw);
    match cfg {
        Some(cfg) if ck.problems.is_empty() => Ok(cfg),
        _ => {
            debug_assert!(!ck.problems.is_empty(), "a check failed without a problem");
            ck.problems.sort_by_key(|p| (p.line, p.column));
            Err(ConfigError::Invalid(ck.problems))
        }
    }
}

/// The SAs and policies of a config fragment (`secgw ctl sa add`).
#[derive(Debug, Clone)]
pub struct Fragment {
    /// SAs, in file order.
    pub sas: Vec<Sa>,
    /// Policies, in file order.
    pub policies: Vec<Policy>,
}

/// Validates `text`, a fragment holding only `[[sa]]` and `[[policy]]`
/// tables, against a running gateway's config `base` (its ports, routes and
/// workers) with the same rules and messages as [`parse`]; `source` names it
/// in messages. `installed(spi, direction)` lists the installed SAs with
/// that SPI and direction, each as ([`Sa::sad_dst`], v4_only) — v4_only for
/// a transport SA with UDP encapsulation, which IPv4 policies only may
/// name: a fragment SA that clashes with one ([`spi_clash`]) is refused,
/// and the fragment's policies may name installed SAs.
pub fn parse_fragment(
    text: &str,
    source: &Path,
    base: &Config,
    installed: &dyn Fn(u32, Direction) -> Vec<(Option<IpAddr>, bool)>,
) -> Result<Fragment, ConfigError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawFragment {
        sa: Option<Vec<Spanned<RawSa>>>,
        policy: Option<Vec<Spanned<RawPolicy>>>,
    }
    let raw: RawFragment = toml::from_str(text).map_err(|e| ConfigError::Syntax(decode_problem(text, source, &e)))?;
    let mut ck = Checker::new(text, source);
    let raws = raw.sa.as_deref().unwrap_or_default();
    let sas = ck.sas(raws, Some(base.gateway.workers as i64));
    let mut ids = sas.ids.clone();
    let mut v4_only = HashSet::new();
    if let Some(list) = &sas.list {
        for (i, (r, sa)) in raws.iter().zip(list).enumerate() {
            let clash = installed(sa.spi, sa.direction).into_iter().find_map(|(dst, _)| spi_clash(sa.direction, sa.spi, sa.sad_dst(), dst));
            if let (Some((what, hint)), Some(v)) = (clash, &r.get_ref().spi) {
                let m = format!("an {what} is installed already (delete or rekey it){hint}");
                ck.problem(&v.span(), &format!("sa[{i}].spi"), m);
            }
            if sa.mode == SaMode::Transport && sa.udp_encap {
                v4_only.insert((sa.spi, sa.direction as u8));
            }
        }
        ck.sender_sizes_fit_mtu(raws, list, &base.ports, &base.routes);
        ck.provider_runs_every_sa(raws, list, base.crypto.provider);
    }
    // Policies may name installed SAs: look them up lazily.
    let policy_raws = raw.policy.as_deref().unwrap_or_default();
    for p in policy_raws {
        if let Some(Raw::Str(a)) = p.get_ref().action.as_ref().map(|a| a.get_ref()) {
            if let Some(spi) = a.strip_prefix("protect").map(str::trim).and_then(|n| parse_spi(n).ok()) {
                for d in [Direction::Outbound, Direction::Inbound] {
                    for (_, v4) in installed(spi, d) {
                        ids.entry((spi, d as u8)).or_insert(0);
                        if v4 {
                            v4_only.insert((spi, d as u8));
                        }
                    }
                }
            }
        }
    }
    let policies = ck.all(policy_raws, "policy", |ck, r, tab| ck.policy(r, tab, &ids, &v4_only));
    match (sas.list, policies) {
        (Some(sas), Some(policies)) if ck.problems.is_empty() => Ok(Fragment { sas, policies }),
        _ => {
            ck.problems.sort_by_key(|p| (p.line, p.column));
            Err(ConfigError::Invalid(ck.problems))
        }
    }
}

/// A control character (C0, DEL, C1) or one that reorders or breaks text
/// where it is shown: line and paragraph separators (U+2028, U+2029),
/// zero-width and bidirectional formatting characters (U+200B–U+200F,
/// U+202A–U+202E, U+2060–U+2069, U+FEFF).
fn unprintable(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// A gateway or port name: non-empty and without control characters (it
/// appears in logs, counters tables, Prometheus labels and the default
/// socket path, where a newline or escape would break lines).
fn name_value(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("expected a non-empty name, found \"\"".into())
    } else if let Some(c) = s.chars().find(|&c| unprintable(c)) {
        Err(format!("{s:?} holds the control or formatting character {c:?}: a name must be printable"))
    } else {
        Ok(s.to_owned())
    }
}

// ---------------------------------------------------------------------------
// Raw, spanned decoding.

/// Any TOML value, arrays keeping the span of each element.
#[derive(Debug)]
enum Raw {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Array(Vec<Spanned<Raw>>),
    Table,
    Datetime,
}

type Field = Option<Spanned<Raw>>;

/// Key bytes decoded from hex, zeroized when dropped.
type Key = Zeroizing<Vec<u8>>;

/// A counter-mode SA holding a key (for the shared-key check): the key,
/// its SPI, direction, line and algorithm.
type KeyHolder = (Key, u32, Direction, usize, crate::crypto::Algorithm);

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Raw, E> {
        i64::try_from(v)
            .map(Raw::Int)
            .map_err(|_| E::custom("integer out of range"))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Raw, E> {
        Ok(Raw::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Raw>>()? {
            items.push(item);
        }
        Ok(Raw::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        // toml hands a datetime over as a one-entry map with a private key.
        let mut datetime = false;
        while let Some(key) = map.next_key::<String>()? {
            datetime |= key == "$__toml_private_datetime";
            map.next_value::<IgnoredAny>()?;
        }
        Ok(if datetime { Raw::Datetime } else { Raw::Table })
    }
}

impl Raw {
    /// "found …" text; `secret` values show only their kind.
    fn describe(&self, secret: bool) -> String {
        match self {
            _ if secret => self.kind().to_string(),
            Raw::Str(s) => format!("{s:?}"),
            Raw::Int(i) => format!("integer {i}"),
            Raw::Float(x) => format!("float {x}"),
            Raw::Bool(b) => format!("boolean {b}"),
            _ => self.kind().to_string(),
        }
    }
    fn kind(&self) -> &'static str {
        match self {
            Raw::Str(_) => "a string",
            Raw::Int(_) => "an integer",
            Raw::Float(_) => "a float",
            Raw::Bool(_) => "a boolean",
            Raw::Array(_) => "an array",
            Raw::Table => "a table",
            Raw::Datetime => "a datetime",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    gateway: Option<Spanned<RawGateway>>,
    crypto: Option<Spanned<RawCrypto>>,
    reassembly: Option<Spanned<RawReassembly>>,
    neighbour_table: Option<Spanned<RawNeighbourTable>>,
    control: Option<Spanned<RawControl>>,
    port: Option<Vec<Spanned<RawPort>>>,
    sa: Option<Vec<Spanned<RawSa>>>,
    policy: Option<Vec<Spanned<RawPolicy>>>,
    route: Option<Vec<Spanned<RawRoute>>>,
    neighbour: Option<Vec<Spanned<RawNeighbour>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    name: Field,
    workers: Field,
    cores: Field,
    stats_interval: Field,
    outer_ttl: Field,
    burst: Field,
    idle_sleep_us: Field,
    idle_spin_us: Field,
    pmtu_timeout_s: Field,
    pool_size: Field,
    handoff_depth: Field,
    icmp_echo: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCrypto {
    backend: Field,
    provider: Field,
    ring_depth: Field,
    max_sessions_per_qp: Field,
    engines: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReassembly {
    contexts: Field,
    max_fragments: Field,
    timeout_ms: Field,
    forwarded: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeighbourTable {
    max_entries: Field,
    reachable_ms: Field,
    retrans_ms: Field,
    pending_packets: Field,
    pending_per_hop: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControl {
    socket: Field,
    rekey_grace_ms: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    name: Field,
    interface: Field,
    role: Field,
    mac: Field,
    addresses: Field,
    queue: Field,
    mtu: Field,
    xdp_mode: Field,
    peer_mac: Field,
    ring_size: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSa {
    spi: Field,
    direction: Field,
    mode: Field,
    algorithm: Field,
    key: Field,
    auth_key: Field,
    icv_len: Field,
    tunnel_src: Field,
    tunnel_dst: Field,
    replay_window: Field,
    outer_ttl: Field,
    df: Field,
    worker: Field,
    esn: Field,
    udp_encap: Field,
    udp_port: Field,
    udp_sport: Field,
    udp_dport: Field,
    dummy_interval_ms: Field,
    dummy_len: Field,
    tfc_pad_to: Field,
    pad_align: Field,
    flow_label: Field,
    soft_packets: Field,
    hard_packets: Field,
    soft_bytes: Field,
    hard_bytes: Field,
    soft_seconds: Field,
    hard_seconds: Field,
    first_seq: Field,
}

impl RawSa {
    /// Wipes the hex strings of the keys as the TOML parser handed them over.
    fn wipe_keys(&mut self) {
        for f in [&mut self.key, &mut self.auth_key].into_iter().flatten() {
            if let Raw::Str(s) = f.get_mut() {
                s.zeroize();
            }
        }
    }
}

impl Drop for RawSa {
    fn drop(&mut self) {
        self.wipe_keys();
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    direction: Field,
    src: Field,
    dst: Field,
    protocol: Field,
    src_ports: Field,
    dst_ports: Field,
    priority: Field,
    action: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    prefix: Field,
    port: Field,
    via: Field,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeighbour {
    ip: Field,
    mac: Field,
}

/// Where each table is, decoded leniently: used only to name the table of
/// an unknown key.
#[derive(Deserialize)]
struct Outline {
    gateway: Option<Spanned<IgnoredAny>>,
    crypto: Option<Spanned<IgnoredAny>>,
    reassembly: Option<Spanned<IgnoredAny>>,
    neighbour_table: Option<Spanned<IgnoredAny>>,
    control: Option<Spanned<IgnoredAny>>,
    port: Option<Vec<Spanned<IgnoredAny>>>,
    sa: Option<Vec<Spanned<IgnoredAny>>>,
    policy: Option<Vec<Spanned<IgnoredAny>>>,
    route: Option<Vec<Spanned<IgnoredAny>>>,
    neighbour: Option<Vec<Spanned<IgnoredAny>>>,
}

impl Outline {
    /// Path of the innermost table containing byte `offset` ("" = root).
    fn table_at(&self, offset: usize) -> String {
        let inside = |s: &Spanned<IgnoredAny>| s.span().contains(&offset);
        let tables =
            [
            ("gateway", &self.gateway),
            ("crypto", &self.crypto),
            ("reassembly", &self.reassembly),
            ("neighbour_table", &self.neighbour_table),
            ("control", &self.control),
        ];
        if let Some((name, _)) = tables.iter().find(|(_, t)| t.as_ref().is_some_and(inside)) {
            return (*name).into();
        }
        let arrays = [
            ("port", &self.port),
            ("sa", &self.sa),
            ("policy", &self.policy),
            ("route", &self.route),
            ("neighbour", &self.neighbour),
        ];
        for (name, tables) in arrays {
            if let Some(i) = tables.iter().flatten().position(inside) {
                return format!("{name}[{i}]");
            }
        }
        String::new()
    }
}

/// Turns a toml decoding error into a positioned problem; an unknown key is
/// named with its table path and a suggestion.
fn decode_problem(text: &str, source: &Path, e: &toml::de::Error) -> Problem {
    let span = e.span().unwrap_or(0..0);
    let mut message = e.message().trim().replace('\n', ": ");
    let mut field = String::new();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let key = rest.split('`').next().unwrap_or_default().to_owned();
        let table = toml::from_str::<Outline>(text)
            .map(|o| o.table_at(span.start))
            .unwrap_or_default();
        // An unknown table is the key itself, not a key inside it.
        let own_table = table.split(['[', '.']).next() == Some(key.as_str());
        field = if table.is_empty() || own_table {
            key.clone()
        } else {
            format!("{table}.{key}")
        };
        // "unknown field `x`, expected one of `a`, `b`" → names in odd pieces.
        let expected: Vec<&str> = message.split('`').skip(3).step_by(2).collect();
        let mut m = format!("unknown key `{key}`");
        if let Some(after) = message.split_once(", expected").map(|(_, a)| a) {
            m.push_str(&format!("; expected{after}"));
        }
        if let Some(best) = closest(&key, &expected) {
            m.push_str(&format!(" (did you mean `{best}`?)"));
        }
        message = m;
    } else if message.contains("expected a sequence") {
        // `[port]` where `[[port]]` belongs.
        let at = text.get(span.clone()).unwrap_or_default().trim_start();
        if let Some(name) = at.strip_prefix('[').filter(|r| !r.starts_with('[')) {
            let name = name.split(']').next().unwrap_or_default().trim();
            field = name.to_owned();
            message = format!(
                "expected an array of tables, found a table; write [[{name}]] for each entry"
            );
        } else if let Some(found) = found_of(&message) {
            // `sa = 1`, `sa.spi = 1`, `[port.inside]`: the array is the first key.
            let f = field_at(text, span.start).unwrap_or_else(|| text.get(span.start..).unwrap_or_default().chars().take(64).collect());
            field = f.trim_start_matches(['[', ' ']).split(['.', ']', ' ', '=']).next().unwrap_or_default().to_owned();
            message = format!("expected an array of tables ([[{field}]] entries), found {found}");
        }
    } else if let Some(name) = message.split("duplicate key `").nth(1).filter(|_| message.contains("in document root")).and_then(|r| r.split('`').next()) {
        // `[port]` beside `[[port]]` entries (or `[neighbour]` beside `[[neighbour]]`).
        let header = |h: String| text.lines().any(|l| l.trim_start().starts_with(&h));
        if header(format!("[{name}]")) && header(format!("[[{name}]]")) {
            let entry = ["port", "sa", "policy", "route", "neighbour"].contains(&name);
            field = name.to_owned();
            message = if entry {
                let settings = if name == "neighbour" { " (the neighbour-table settings are [neighbour_table])" } else { "" };
                format!("[{name}] beside [[{name}]]: `{name}` is an array of tables, write [[{name}]] for each entry{settings}")
            } else {
                format!("[[{name}]] beside [{name}]: `{name}` is one table, write [{name}] once")
            };
        }
    } else if message.contains("number too large to fit in target type") {
        // The TOML integer itself is past i64 (TOML v1.0.0 §Integer).
        message = format!("integer too large for TOML (at most {})", i64::MAX);
    } else if message.contains("expected a borrowed string") {
        // toml's words for a table given where a value belongs: `action.protect
        // = 1001` (a dotted key) or a `[gateway.name]` header makes one.
        let f = field_at(text, span.start).unwrap_or_default();
        field = f.rsplit_once('.').map(|(t, _)| t.to_owned()).unwrap_or(f);
        message = "expected a value, found a table (a dotted key `a.b = …` or a [table.key] header makes one)".to_owned();
    } else if let Some(raw) = message.split("expected struct Raw").nth(1) {
        // serde's words for our structs: the table the struct decodes.
        let name = table_name(raw.split_whitespace().next().unwrap_or_default());
        let entry = ["port", "sa", "policy", "route", "neighbour"].contains(&name.as_str());
        // serde says "invalid length" for any array given for a struct.
        let found = if message.starts_with("invalid length") {
            let at = text.get(span.clone()).unwrap_or_default().trim_start();
            Some(if at.starts_with("[[") { "an array of tables" } else { "an array" }.to_owned())
        } else {
            found_of(&message)
        };
        let found = found.unwrap_or_else(|| "something else".into());
        field = name.clone();
        message = if entry {
            format!("expected a table ([[{name}]] entry), found {found}")
        } else if found == "an array of tables" {
            // `[[gateway]]` where `[gateway]` belongs.
            format!("expected a table, found an array of tables; write [{name}] once")
        } else {
            format!("expected a table ([{name}]), found {found}")
        };
    }
    if field.is_empty() {
        field = field_at(text, span.start).unwrap_or_default();
    }
    let (line, column) = line_col(text, span.start);
    Problem {
        file: source.to_path_buf(),
        line,
        column,
        field,
        message,
    }
}

/// The "found" part of serde's "invalid type: integer `3`, expected …"
/// (`integer `3``), its "map" and "sequence" said in TOML's words.
fn found_of(message: &str) -> Option<String> {
    let found = message.strip_prefix("invalid type: ")?.split(", expected").next()?;
    Some(match found {
        "map" => "a table".to_owned(),
        "sequence" => "an array".to_owned(),
        f => f.to_owned(),
    })
}

/// `NeighbourTable` (a struct name after `Raw`) → `neighbour_table`.
fn table_name(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The field of the `key = value` line holding byte `offset`, as
/// `table.key` (`sa[1].spi`), for errors the toml parser reports with a
/// position only (an integer too large for 64 bits, a malformed value).
/// The table comes from the headers above the line (`[name]`, and
/// `[[name]]` counted from 0), since such a text does not parse for
/// [`Outline`]. `None` when the line is not a `key = value` line.
fn field_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let (key, _) = text[line_start..].lines().next()?.split_once('=')?;
    let key = key.trim().trim_matches('"');
    if key.is_empty() || key.contains(|c: char| c.is_whitespace() || "[]#".contains(c)) {
        return None;
    }
    let mut table = String::new();
    let mut arrays: HashMap<&str, usize> = HashMap::new();
    for l in text[..line_start].lines().map(str::trim) {
        if let Some(name) = l.strip_prefix("[[").and_then(|r| r.split_once("]]")).map(|(n, _)| n.trim()) {
            let n = arrays.entry(name).or_insert(0);
            table = format!("{name}[{n}]");
            *n += 1;
        } else if let Some(name) = l.strip_prefix('[').and_then(|r| r.split_once(']')).map(|(n, _)| n.trim()) {
            table = name.to_owned();
        }
    }
    Some(if table.is_empty() { key.to_owned() } else { format!("{table}.{key}") })
}

/// The expected name nearest to `key` by edit distance, if near enough.
fn closest<'a>(key: &str, names: &[&'a str]) -> Option<&'a str> {
    let dist = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                let sub = prev[j] + usize::from(ca != *cb);
                cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    };
    names
        .iter()
        .map(|n| (dist(key, n), *n))
        .filter(|(d, n)| *d <= 2.max(n.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

// ---------------------------------------------------------------------------
// Validation.

struct Checker<'a> {
    text: &'a str,
    source: &'a Path,
    problems: Vec<Problem>,
    /// Byte offset of the start of each line of `text` (built once: a
    /// line number is a binary search, not a scan from the start, so
    /// checking 100,000 SAs stays linear).
    line_starts: Vec<usize>,
    /// SAs whose `spi` is there but invalid, as ("sa[i].spi at line N",
    /// their direction if valid): a policy naming "no SA" may mean one of
    /// them (said in its message).
    bad_spis: Vec<(String, Option<Direction>)>,
}

/// A table being checked: its path and its span (missing keys point here).
struct Tab {
    path: String,
    span: Range<usize>,
}

/// Byte offsets at which the lines of `text` start (0 first).
pub(super) fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect()
}

/// [`line_col`] by the line index `starts` of `text` ([`line_starts`]):
/// linear in the line's length, not in the offset (a file of thousands of
/// faulty tables was quadratic).
pub(super) fn indexed_line_col(text: &str, starts: &[usize], offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let line = starts.partition_point(|&s| s <= offset);
    let start = starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
    (line, text[start..offset].chars().count() + 1)
}

impl<'a> Checker<'a> {
    fn new(text: &'a str, source: &'a Path) -> Checker<'a> {
        Checker { text, source, problems: Vec::new(), line_starts: line_starts(text), bad_spis: Vec::new() }
    }
}

impl Tab {
    fn field(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }
}

const DIRECTIONS: &[(&str, Direction)] = &[
    ("outbound", Direction::Outbound),
    ("inbound", Direction::Inbound),
];

impl Checker<'_> {
    fn problem(&mut self, span: &Range<usize>, field: &str, message: impl Into<String>) {
        let (line, column) = self.line_col(span.start);
        self.problems.push(Problem {
            file: self.source.to_path_buf(),
            line,
            column,
            field: field.to_owned(),
            message: message.into(),
        });
    }

    fn line_of(&self, span: &Range<usize>) -> usize {
        self.line_starts.partition_point(|&s| s <= span.start)
    }

    fn line_col(&self, offset: usize) -> (usize, usize) {
        indexed_line_col(self.text, &self.line_starts, offset)
    }

    fn required<'f>(&mut self, f: &'f Field, tab: &Tab, key: &str) -> Option<&'f Spanned<Raw>> {
        if f.is_none() {
            self.problem(
                &tab.span,
                &tab.field(key),
                format!("missing required key `{key}`"),
            );
        }
        f.as_ref()
    }

    fn wrong_type(&mut self, v: &Spanned<Raw>, field: &str, expected: &str) {
        let found = v.get_ref().describe(false);
        self.problem(
            &v.span(),
            field,
            format!("expected {expected}, found {found}"),
        );
    }

    fn string<'f>(&mut self, v: &'f Spanned<Raw>, field: &str) -> Option<&'f str> {
        match v.get_ref() {
            Raw::Str(s) => Some(s),
            _ => {
                self.wrong_type(v, field, "a string");
                None
            }
        }
    }

    /// An integer in `lo..=hi`.
    fn integer(&mut self, v: &Spanned<Raw>, field: &str, lo: i64, hi: i64) -> Option<i64> {
        match v.get_ref() {
            Raw::Int(i) if (lo..=hi).contains(i) => Some(*i),
            Raw::Int(i) => {
                self.problem(
                    &v.span(),
                    field,
                    format!("expected an integer in {lo}..={hi}, found {i}"),
                );
                None
            }
            _ => {
                self.wrong_type(v, field, &format!("an integer in {lo}..={hi}"));
                None
            }
        }
    }

    /// An optional integer in `lo..=hi`, `default` when absent.
    fn opt_integer(
        &mut self,
        f: &Field,
        field: &str,
        lo: i64,
        hi: i64,
        default: i64,
    ) -> Option<i64> {
        match f {
            Some(v) => self.integer(v, field, lo, hi),
            None => Some(default),
        }
    }

    /// An optional boolean, `default` when absent.
    fn opt_bool(&mut self, f: &Field, field: &str, default: bool) -> Option<bool> {
        let Some(v) = f else { return Some(default) };
        match v.get_ref() {
            Raw::Bool(b) => Some(*b),
            _ => {
                self.wrong_type(v, field, "a boolean");
                None
            }
        }
    }

    /// An optional power of two in `lo..=hi`, `default` when absent; out
    /// of range or not a power of two, the message says both.
    fn opt_pow2(&mut self, f: &Field, field: &str, lo: i64, hi: i64, default: i64) -> Option<i64> {
        let Some(v) = f else { return Some(default) };
        let want = format!("a power of two in {lo}..={hi}");
        match v.get_ref() {
            Raw::Int(i) if (lo..=hi).contains(i) && (*i as u64).is_power_of_two() => Some(*i),
            Raw::Int(i) => {
                self.problem(&v.span(), field, format!("expected {want}, found {i}"));
                None
            }
            _ => {
                self.wrong_type(v, field, &want);
                None
            }
        }
    }

    /// A string parsed by `parse`, whose error is the message.
    fn parsed<T>(
        &mut self,
        v: &Spanned<Raw>,
        field: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let s = self.string(v, field)?;
        match parse(s) {
            Ok(t) => Some(t),
            Err(m) => {
                self.problem(&v.span(), field, m);
                None
            }
        }
    }

    /// One of a fixed set of strings.
    fn keyword<T: Copy>(
        &mut self,
        v: &Spanned<Raw>,
        field: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("{n:?}")).collect();
        let expected = format!("one of {}", names.join(", "));
        match v.get_ref() {
            Raw::Str(s) => match choices.iter().find(|(n, _)| n == s) {
                Some((_, t)) => Some(*t),
                None => {
                    self.problem(
                        &v.span(),
                        field,
                        format!("expected {expected}, found {s:?}"),
                    );
                    None
                }
            },
            _ => {
                self.wrong_type(v, field, &expected);
                None
            }
        }
    }

    fn opt_keyword<T: Copy>(
        &mut self,
        f: &Field,
        field: &str,
        choices: &[(&str, T)],
        default: T,
    ) -> Option<T> {
        match f {
            Some(v) => self.keyword(v, field, choices),
            None => Some(default),
        }
    }

    fn array<'f>(
        &mut self,
        v: &'f Spanned<Raw>,
        field: &str,
        of: &str,
    ) -> Option<&'f [Spanned<Raw>]> {
        match v.get_ref() {
            Raw::Array(items) => Some(items),
            _ => {
                self.wrong_type(v, field, &format!("an array of {of}"));
                None
            }
        }
    }

    // -- the file ------------------------------------------------------------

    fn config(&mut self, raw: RawFile) -> Option<Config> {
        let (gateway, workers) = self.gateway(raw.gateway.as_ref());
        let crypto = self.crypto(raw.crypto.as_ref());
        let reassembly = self.reassembly(raw.reassembly.as_ref());
        let neighbour_table = self.neighbour_table(raw.neighbour_table.as_ref());
        let control = self.control(raw.control.as_ref(), raw.gateway.as_ref(), gateway.as_ref());
        if let (Some(g), Some(n)) = (&gateway, &neighbour_table) {
            self.pool_holds_pending(g.pool_size, n.pending_packets, raw.gateway.as_ref());
        }

        let ports = self.ports(raw.port.as_deref().unwrap_or_default());
        let sas = self.sas(raw.sa.as_deref().unwrap_or_default(), workers);
        let sa_ids: HashMap<(u32, u8), usize> = sas.ids.clone();
        // Transport SAs with UDP encapsulation are IPv4 only (RFC 3948).
        let v4_only: HashSet<(u32, u8)> = sas
            .list
            .iter()
            .flatten()
            .filter(|s| s.mode == SaMode::Transport && s.udp_encap)
            .map(|s| (s.spi, s.direction as u8))
            .collect();
        let policies = self.all(
            raw.policy.as_deref().unwrap_or_default(),
            "policy",
            |ck, r, tab| ck.policy(r, tab, &sa_ids, &v4_only),
        );
        if let (Some(g), Some(p)) = (&gateway, &ports.list) {
            self.rings_hold_bursts(p, raw.port.as_deref().unwrap_or_default(), g.burst);
        }
        let routes = self.routes(raw.route.as_deref().unwrap_or_default(), &ports.names);
        let neighbours = self.neighbours(raw.neighbour.as_deref().unwrap_or_default());
        if let (Some(s), Some(p), Some(r)) = (&sas.list, &ports.list, &routes) {
            self.sender_sizes_fit_mtu(raw.sa.as_deref().unwrap_or_default(), s, p, r);
        }
        if let (Some(s), Some(c)) = (&sas.list, &crypto) {
            self.provider_runs_every_sa(raw.sa.as_deref().unwrap_or_default(), s, c.provider);
        }

        Some(Config {
            source: self.source.to_path_buf(),
            gateway: gateway?,
            crypto: crypto?,
            reassembly: reassembly?,
            neighbour_table: neighbour_table?,
            control: control?,
            ports: ports.list?,
            sas: sas.list?,
            policies: policies?,
            routes: routes?,
            neighbours: neighbours?,
            dpdk_import: None,
        })
    }

    /// Every SA with dummy packets (RFC 4303 §2.6) or TFC padding (§2.7):
    /// a dummy of `dummy_len` bytes, and an inner packet padded to
    /// `tfc_pad_to` bytes, must fit the MTU of the port `tunnel_dst` is
    /// routed to once encapsulated (longest prefix; no route: nothing to
    /// check, the SA's packets are dropped as `no_route`). `raws` are the
    /// `[[sa]]` tables `sas` came from, in the same order.
    /// With `[crypto] provider` naming one provider, every SA's algorithm
    /// and ICV length must be one it runs (`crypto::Provider::icv_lens`);
    /// the problem is the SA's `algorithm` (or `icv_len`, when only the
    /// length is the trouble).
    fn provider_runs_every_sa(&mut self, raws: &[Spanned<RawSa>], sas: &[Sa], choice: ProviderChoice) {
        let ProviderChoice::Only(p) = choice else { return };
        for (i, (r, sa)) in raws.iter().zip(sas).enumerate() {
            if p.supports(sa.algorithm, sa.icv_len) {
                continue;
            }
            let raw = r.get_ref();
            let lens = p.icv_lens(sa.algorithm);
            // A valid SA has its algorithm; the table's span is a fallback.
            let (key, span, what) = match (lens.is_empty(), &raw.icv_len) {
                (false, Some(v)) => ("icv_len", v.span(), format!("icv_len {} with {}", sa.icv_len, sa.algorithm.name())),
                _ => ("algorithm", raw.algorithm.as_ref().map_or(r.span(), |v| v.span()), sa.algorithm.name().to_owned()),
            };
            let offers: Vec<String> = Algorithm::ALL.iter().filter(|a| !p.icv_lens(**a).is_empty()).map(|a| format!("{} (icv_len {:?})", a.name(), p.icv_lens(*a))).collect();
            let m = format!(
                "SA {} ({}): {what} is not run by [crypto] provider = \"{}\", which offers {}; use provider = \"auto\" or \"rustcrypto\" for this SA's algorithm",
                sa.spi,
                if sa.direction == Direction::Outbound { "outbound" } else { "inbound" },
                p.name(),
                offers.join(", ")
            );
            self.problem(&span, &format!("sa[{i}].{key}"), m);
        }
    }

    fn sender_sizes_fit_mtu(&mut self, raws: &[Spanned<RawSa>], sas: &[Sa], ports: &[Port], routes: &[Route]) {
        // The largest frame a port takes in, padded to an SA's `pad_align`
        // with its ICV, must still fit a packet buffer (see MAX_PORT_MTU).
        let widest = ports.iter().max_by_key(|p| p.mtu);
        for (i, (r, sa)) in raws.iter().zip(sas).enumerate() {
            let raw = r.get_ref();
            if let (Some(port), Some(v)) = (widest, raw.pad_align.as_ref().filter(|_| sa.pad_align > 16)) {
                let room = crate::io::BUF_SIZE - crate::io::HEADROOM - 14;
                let tail = sa.pad_align - 1 + 2 + sa.icv_len;
                let grown = port.mtu as usize + tail;
                if grown > room {
                    let most = room - tail;
                    let m = format!(
                        "pad_align {} can grow a packet of port {:?}'s mtu {} to {grown} bytes, more than a packet buffer's {room}; \
                         use a smaller pad_align or ports' mtu at most {most}",
                        sa.pad_align, port.name, port.mtu
                    );
                    self.problem(&v.span(), &format!("sa[{i}].pad_align"), m);
                }
            }
            // (size, field to blame, what it is)
            let mut sizes = Vec::new();
            if sa.dummy_interval_ms > 0 {
                let f = if raw.dummy_len.is_some() { ("dummy_len", &raw.dummy_len) } else { ("dummy_interval_ms", &raw.dummy_interval_ms) };
                sizes.push((sa.dummy_len, f, "a dummy packet of"));
            }
            if sa.tfc_pad_to > 0 {
                sizes.push((sa.tfc_pad_to, ("tfc_pad_to", &raw.tfc_pad_to), "an inner packet padded to"));
            }
            if sizes.is_empty() {
                continue;
            }
            let route = routes
                .iter()
                .filter(|rt| crate::policy::spd::Prefix::new(rt.prefix.0, rt.prefix.1).contains(sa.tunnel_dst))
                .max_by_key(|rt| rt.prefix.1);
            let Some(port) = route.and_then(|rt| ports.get(rt.port)) else { continue };
            for (size, (key, f), what) in sizes {
                let len = crate::esp::outbound::tunnel_len(sa.algorithm, sa.icv_len, sa.tunnel_dst.is_ipv6(), sa.udp_encap, sa.pad_align, size);
                let Some(v) = f.as_ref().filter(|_| len > port.mtu as usize) else { continue };
                let own = crate::esp::outbound::tunnel_len(sa.algorithm, sa.icv_len, sa.tunnel_dst.is_ipv6(), sa.udp_encap, 0, size);
                let fix = if own <= port.mtu as usize {
                    format!("make {key} or pad_align ({}) smaller: at the algorithm's own alignment it is {own} bytes", sa.pad_align)
                } else {
                    format!("make {key} smaller")
                };
                let m = format!(
                    "{what} {size} bytes is {len} bytes once encapsulated, more than the MTU {} of port {:?} that tunnel_dst {} is routed to; {fix}",
                    port.mtu, port.name, sa.tunnel_dst
                );
                self.problem(&v.span(), &format!("sa[{i}].{key}"), m);
            }
        }
    }

    /// Checks every entry of an array of tables; `None` if any failed.
    fn all<R, T>(
        &mut self,
        raws: &[Spanned<R>],
        name: &str,
        mut check: impl FnMut(&mut Self, &R, &Tab) -> Option<T>,
    ) -> Option<Vec<T>> {
        let mut out = Some(Vec::with_capacity(raws.len()));
        for (i, r) in raws.iter().enumerate() {
            let tab = Tab {
                path: format!("{name}[{i}]"),
                span: r.span(),
            };
            let item = check(self, r.get_ref(), &tab);
            match (&mut out, item) {
                (Some(v), Some(t)) => v.push(t),
                _ => out = None,
            }
        }
        out
    }

    // -- [gateway] -----------------------------------------------------------

    /// The gateway table, and `workers` on its own (SAs check `worker`
    /// against it even when another gateway key is wrong).
    fn gateway(&mut self, raw: Option<&Spanned<RawGateway>>) -> (Option<Gateway>, Option<i64>) {
        let Some(raw) = raw else {
            let defaults = Some(Gateway {
                name: "secgw".into(),
                workers: 1,
                cores: Vec::new(),
                stats_interval: 0,
                outer_ttl: 64,
                burst: 32,
                idle_sleep_us: 50,
                idle_spin_us: 100,
                pmtu_timeout_s: 600,
                pool_size: 4096,
                handoff_depth: 2048,
                icmp_echo: true,
            });
            return (defaults, Some(1));
        };
        let tab = Tab {
            path: "gateway".into(),
            span: raw.span(),
        };
        let g = raw.get_ref();
        let name = match &g.name {
            Some(v) => self.parsed(v, &tab.field("name"), name_value),
            None => Some("secgw".to_owned()),
        };
        let workers = self.opt_integer(&g.workers, &tab.field("workers"), 1, 1024, 1);
        let cores = match &g.cores {
            None => Some(Vec::new()),
            Some(v) => self.cores(v, &tab.field("cores"), workers),
        };
        let stats_interval = self.opt_integer(
            &g.stats_interval,
            &tab.field("stats_interval"),
            0,
            i64::MAX,
            0,
        );
        let outer_ttl = self.opt_integer(&g.outer_ttl, &tab.field("outer_ttl"), 1, 255, 64);
        let burst = self.opt_integer(&g.burst, &tab.field("burst"), 1, 256, 32);
        let idle_sleep_us = self.opt_integer(&g.idle_sleep_us, &tab.field("idle_sleep_us"), 0, 10_000, 50);
        let idle_spin_us = self.opt_integer(&g.idle_spin_us, &tab.field("idle_spin_us"), 0, 1_000_000, 100);
        let pmtu_timeout_s = self.opt_integer(&g.pmtu_timeout_s, &tab.field("pmtu_timeout_s"), 0, 86_400, 600);
        let pool_size = self.opt_integer(&g.pool_size, &tab.field("pool_size"), 1024, 1 << 18, 4096);
        let handoff_depth = self.opt_pow2(&g.handoff_depth, &tab.field("handoff_depth"), 64, 65536, 2048);
        let icmp_echo = self.opt_bool(&g.icmp_echo, &tab.field("icmp_echo"), true);
        // Every worker's buffers may end up in one worker's queues, which are
        // sized for them at start: the whole gateway's buffers are bounded.
        if let (Some(pool), Some(n)) = (pool_size, workers) {
            let total = pool * n;
            if total > MAX_BUFFERS {
                let gib = (total as u64 * crate::io::BUF_SIZE as u64) as f64 / (1u64 << 30) as f64;
                let why = format!("workers × pool_size = {total} buffers ({gib:.1} GiB) exceeds {MAX_BUFFERS}");
                match (&g.pool_size, &g.workers) {
                    (Some(v), _) => self.problem(&v.span(), &tab.field("pool_size"), format!("expected at most {} with {n} workers ({why}), found {pool}", MAX_BUFFERS / n)),
                    (None, Some(v)) => self.problem(&v.span(), &tab.field("workers"), format!("expected at most {} with pool_size's default {pool} ({why}), found {n}", MAX_BUFFERS / pool)),
                    (None, None) => {}
                }
            }
        }
        // Handoff rings exist with 2 workers or more.
        if let (Some(pool), Some(depth), Some(2..)) = (pool_size, handoff_depth, workers) {
            let why = "a worker's buffers must outlast a full handoff ring";
            if pool < 2 * depth {
                if let Some(v) = &g.pool_size {
                    let of = if g.handoff_depth.is_some() { "" } else { ", its default" };
                    let m = format!("expected at least 2 × handoff_depth = {}{of} ({why}), found {pool}", 2 * depth);
                    self.problem(&v.span(), &tab.field("pool_size"), m);
                } else if let Some(v) = &g.handoff_depth {
                    let m = format!("expected at most pool_size / 2 = {}, pool_size's default {pool} halved ({why}), found {depth}", pool / 2);
                    self.problem(&v.span(), &tab.field("handoff_depth"), m);
                }
            }
        }
        let gateway = (|| {
            Some(Gateway {
                name: name?,
                workers: workers? as usize,
                cores: cores?,
                stats_interval: stats_interval? as u64,
                outer_ttl: outer_ttl? as u8,
                burst: burst? as usize,
                idle_sleep_us: idle_sleep_us? as u64,
                idle_spin_us: idle_spin_us? as u64,
                pmtu_timeout_s: pmtu_timeout_s? as u64,
                pool_size: pool_size? as usize,
                handoff_depth: handoff_depth? as usize,
                icmp_echo: icmp_echo?,
            })
        })();
        (gateway, workers)
    }

    // -- [crypto] ------------------------------------------------------------

    fn crypto(&mut self, raw: Option<&Spanned<RawCrypto>>) -> Option<Crypto> {
        let Some(raw) = raw else {
            return Some(Crypto::default());
        };
        let tab = Tab {
            path: "crypto".into(),
            span: raw.span(),
        };
        let c = raw.get_ref();
        let backends = &[("software", CryptoBackend::Software), ("descriptor", CryptoBackend::Descriptor)];
        let backend = self.opt_keyword(&c.backend, &tab.field("backend"), backends, CryptoBackend::Software);
        let ring_depth = self.opt_pow2(&c.ring_depth, &tab.field("ring_depth"), 16, 65536, 1024);
        let descriptor = backend == Some(CryptoBackend::Descriptor);
        let only_descriptor = |ck: &mut Self, f: &Field, key: &str| {
            if let (Some(v), Some(CryptoBackend::Software)) = (f, backend) {
                ck.problem(&v.span(), &tab.field(key), "only for backend = \"descriptor\" (the software device has no limit and no engines)");
            }
        };
        only_descriptor(self, &c.max_sessions_per_qp, "max_sessions_per_qp");
        only_descriptor(self, &c.engines, "engines");
        let max_sessions = self.opt_integer(&c.max_sessions_per_qp, &tab.field("max_sessions_per_qp"), 1, 65536, 64);
        let engines = self.opt_integer(&c.engines, &tab.field("engines"), 1, 64, 1);
        let providers: Vec<(&str, ProviderChoice)> = ProviderChoice::ALL.iter().map(|p| (p.name(), *p)).collect();
        let provider = self.opt_keyword(&c.provider, &tab.field("provider"), &providers, ProviderChoice::Auto);
        Some(Crypto {
            backend: backend?,
            provider: provider?,
            ring_depth: ring_depth? as usize,
            max_sessions_per_qp: if descriptor { max_sessions? as u32 } else { 0 },
            engines: engines? as usize,
        })
    }

    // -- [reassembly] --------------------------------------------------------

    fn reassembly(&mut self, raw: Option<&Spanned<RawReassembly>>) -> Option<Reassembly> {
        let d = Reassembly::default();
        let Some(raw) = raw else {
            return Some(d);
        };
        let tab = Tab {
            path: "reassembly".into(),
            span: raw.span(),
        };
        let r = raw.get_ref();
        let contexts = self.opt_integer(&r.contexts, &tab.field("contexts"), 0, MAX_REASSEMBLY_CONTEXTS as i64, d.contexts as i64);
        let max_fragments = self.opt_integer(&r.max_fragments, &tab.field("max_fragments"), 2, 256, d.max_fragments as i64);
        let timeout_ms = self.opt_integer(&r.timeout_ms, &tab.field("timeout_ms"), MIN_REASSEMBLY_TIMEOUT_MS as i64, 120_000, d.timeout_ms as i64);
        let forwarded = self.opt_bool(&r.forwarded, &tab.field("forwarded"), d.forwarded);
        Some(Reassembly {
            contexts: contexts? as usize,
            max_fragments: max_fragments? as usize,
            timeout_ms: timeout_ms? as u64,
            forwarded: forwarded?,
        })
    }

    // -- [neighbour_table] ---------------------------------------------------

    fn neighbour_table(&mut self, raw: Option<&Spanned<RawNeighbourTable>>) -> Option<NeighbourTable> {
        let d = NeighbourTable::default();
        let Some(raw) = raw else {
            return Some(d);
        };
        let tab = Tab {
            path: "neighbour_table".into(),
            span: raw.span(),
        };
        let r = raw.get_ref();
        let max_entries = self.opt_integer(&r.max_entries, &tab.field("max_entries"), 1, 1 << 20, d.max_entries as i64);
        let reachable_ms = self.opt_integer(&r.reachable_ms, &tab.field("reachable_ms"), 1000, 3_600_000, d.reachable_ms as i64);
        let retrans_ms = self.opt_integer(&r.retrans_ms, &tab.field("retrans_ms"), 100, 60_000, d.retrans_ms as i64);
        let pending_packets = self.opt_integer(&r.pending_packets, &tab.field("pending_packets"), 0, 1024, d.pending_packets as i64)?;
        let per_hop_default = (d.pending_per_hop as i64).min(pending_packets.max(1));
        let pending_per_hop = self.opt_integer(&r.pending_per_hop, &tab.field("pending_per_hop"), 1, pending_packets.max(1), per_hop_default);
        Some(NeighbourTable {
            max_entries: max_entries? as usize,
            reachable_ms: reachable_ms? as u64,
            retrans_ms: retrans_ms? as u64,
            pending_packets: pending_packets as usize,
            pending_per_hop: pending_per_hop? as usize,
        })
    }

    /// `gateway.pool_size` ≥ 4 × `neighbour_table.pending_packets`: packets
    /// waiting for next hops' MACs take at most a quarter of a worker's
    /// buffers, so rx keeps some. Only a `pool_size` the file sets can be
    /// short (the default, 4096, holds the largest `pending_packets`, 1024),
    /// so the problem is put on it.
    fn pool_holds_pending(&mut self, pool: usize, pending: usize, raw_g: Option<&Spanned<RawGateway>>) {
        if pool >= 4 * pending {
            return;
        }
        if let Some(v) = raw_g.and_then(|g| g.get_ref().pool_size.as_ref()) {
            let m = format!("expected at least 4 × neighbour_table.pending_packets = {} (packets waiting for a MAC may take a quarter of the buffers), found {pool}", 4 * pending);
            self.problem(&v.span(), "gateway.pool_size", m);
        }
    }

    /// Each `[[port]] ring_size` the file sets ≥ 4 × `gateway.burst`: a
    /// poll sends up to a burst per port, per handoff ring and per crypto
    /// burst on one port, and what its tx ring has no room for drops as
    /// `tx_full`. (The default, 2048, holds 4 of the largest burst, 256.)
    fn rings_hold_bursts(&mut self, ports: &[Port], raw: &[Spanned<RawPort>], burst: usize) {
        for (i, (p, r)) in ports.iter().zip(raw).enumerate() {
            if let Some(v) = &r.get_ref().ring_size {
                if (p.ring_size as usize) < 4 * burst {
                    let m = format!("expected at least 4 × gateway.burst = {} (a poll may send several bursts on a port), found {}", 4 * burst, p.ring_size);
                    self.problem(&v.span(), &format!("port[{i}].ring_size"), m);
                }
            }
        }
    }

    // -- [control] -----------------------------------------------------------

    /// The control table; without `socket`, the default path comes from
    /// `gateway.name`, which must then make a usable path.
    fn control(
        &mut self,
        raw: Option<&Spanned<RawControl>>,
        raw_gateway: Option<&Spanned<RawGateway>>,
        gateway: Option<&Gateway>,
    ) -> Option<Control> {
        let c = raw.map(|r| r.get_ref());
        let socket = match c.and_then(|c| c.socket.as_ref()) {
            Some(v) => self.parsed(v, "control.socket", |s| socket_path(s).map(Into::into)),
            None => {
                let name = gateway?.name.as_str();
                let path = default_socket(name);
                match socket_path(&path.to_string_lossy()) {
                    Ok(_) if !name.contains('/') => Some(path),
                    result => {
                        let why = result.err().unwrap_or_else(|| "contains '/'".into());
                        let m = format!("the default control socket {} is not usable ({why}); set control.socket", path.display());
                        let span = raw_gateway.and_then(|g| g.get_ref().name.as_ref()).map(|v| v.span()).unwrap_or(0..0);
                        self.problem(&span, "gateway.name", m);
                        None
                    }
                }
            }
        };
        let grace = match c.and_then(|c| c.rekey_grace_ms.as_ref()) {
            Some(v) => self.integer(v, "control.rekey_grace_ms", 0, 3_600_000).map(|g| g as u64),
            None => Some(DEFAULT_REKEY_GRACE_MS),
        };
        Some(Control { socket: socket?, rekey_grace_ms: grace? })
    }

    fn cores(&mut self, v: &Spanned<Raw>, field: &str, workers: Option<i64>) -> Option<Vec<usize>> {
        let items = self.array(v, field, "core numbers")?;
        let mut cores = Some(Vec::new());
        for (i, item) in items.iter().enumerate() {
            match (
                self.integer(item, &format!("{field}[{i}]"), 0, i64::from(u32::MAX)),
                &mut cores,
            ) {
                (Some(c), Some(cs)) => cs.push(c as usize),
                _ => cores = None,
            }
        }
        if let Some(w) = workers {
            if (items.len() as i64) < w {
                let m = format!(
                    "expected at least {w} cores (one per worker, gateway.workers = {w}), found {}",
                    items.len()
                );
                self.problem(&v.span(), field, m);
                return None;
            }
        }
        cores
    }

    // -- [[port]] ------------------------------------------------------------

    fn ports(&mut self, raws: &[Spanned<RawPort>]) -> Ports {
        let mut names: HashMap<String, (usize, usize)> = HashMap::new(); // name → (index, line)
        let mut ifaces: HashMap<String, usize> = HashMap::new();
        let mut addrs: HashMap<IpAddr, usize> = HashMap::new();
        let mut index = 0;
        let list = self.all(raws, "port", |ck, p, tab| {
            let i = index;
            index += 1;
            let name = ck.required(&p.name, tab, "name").and_then(|v| {
                let field = tab.field("name");
                let name = ck.parsed(v, &field, name_value)?;
                let line = ck.line_of(&v.span());
                if let Some((_, first)) = names.get(&name) {
                    let m = format!("duplicate port name {name:?} (first at line {first})");
                    ck.problem(&v.span(), &field, m);
                    return None;
                }
                names.insert(name.clone(), (i, line));
                Some(name)
            });
            let interface = ck.required(&p.interface, tab, "interface").and_then(|v| {
                let field = tab.field("interface");
                let iface = ck.parsed(v, &field, parse_ifname)?;
                let line = ck.line_of(&v.span());
                if let Some(first) = ifaces.get(&iface) {
                    let m = format!("duplicate interface {iface:?} (first at line {first})");
                    ck.problem(&v.span(), &field, m);
                    return None;
                }
                ifaces.insert(iface.clone(), line);
                Some(iface)
            });
            let roles = &[
                ("protected", PortRole::Protected),
                ("unprotected", PortRole::Unprotected),
            ];
            let role = ck
                .required(&p.role, tab, "role")
                .and_then(|v| ck.keyword(v, &tab.field("role"), roles));
            let mac = match &p.mac {
                None => Some(None),
                Some(v) => ck.parsed(v, &tab.field("mac"), parse_mac).map(Some),
            };
            let addresses = match &p.addresses {
                None => Some(Vec::new()),
                Some(v) => ck.addresses(v, &tab.field("addresses"), &mut addrs),
            };
            let queue = ck.opt_integer(&p.queue, &tab.field("queue"), 0, i64::from(u32::MAX), 0);
            let mtu = match p.mtu.as_ref().map(|v| (v, v.get_ref())) {
                Some((v, Raw::Int(m))) if *m > i64::from(MAX_PORT_MTU) => {
                    let why = format!(
                        "expected at most {MAX_PORT_MTU}, found {m}: packet buffers hold 2048-byte frames, which must take \
                         the Ethernet header and the ESP trailer's growth (padding, ICV); jumbo frames are not supported"
                    );
                    ck.problem(&v.span(), &tab.field("mtu"), why);
                    None
                }
                _ => ck.opt_integer(&p.mtu, &tab.field("mtu"), i64::from(MIN_PORT_MTU), i64::from(MAX_PORT_MTU), 1500),
            };
            let modes = &[
                ("skb", XdpMode::Skb),
                ("native", XdpMode::Native),
                ("auto", XdpMode::Auto),
            ];
            let xdp_mode = ck.opt_keyword(&p.xdp_mode, &tab.field("xdp_mode"), modes, XdpMode::Skb);
            let peer_mac = match &p.peer_mac {
                None => Some(None),
                Some(v) => ck.parsed(v, &tab.field("peer_mac"), parse_mac).map(Some),
            };
            let ring_size = ck.opt_pow2(&p.ring_size, &tab.field("ring_size"), 64, 16384, 2048);
            Some(Port {
                name: name?,
                interface: interface?,
                role: role?,
                mac: mac?,
                addresses: addresses?,
                queue: queue? as u32,
                mtu: mtu? as u16,
                xdp_mode: xdp_mode?,
                peer_mac: peer_mac?,
                ring_size: ring_size? as u32,
            })
        });
        if let Some(ports) = &list {
            let has = |r| ports.iter().any(|p| p.role == r);
            if !has(PortRole::Protected) || !has(PortRole::Unprotected) {
                let found = format!(
                    "{} protected and {} unprotected",
                    ports
                        .iter()
                        .filter(|p| p.role == PortRole::Protected)
                        .count(),
                    ports
                        .iter()
                        .filter(|p| p.role == PortRole::Unprotected)
                        .count()
                );
                let span = raws.first().map_or(0..0, |r| r.span());
                let m = format!(
                    "expected at least one protected and one unprotected [[port]], found {found}"
                );
                self.problem(&span, "port", m);
            }
        }
        Ports {
            list,
            names: names.into_iter().map(|(n, (i, _))| (n, i)).collect(),
        }
    }

    fn addresses(
        &mut self,
        v: &Spanned<Raw>,
        field: &str,
        seen: &mut HashMap<IpAddr, usize>,
    ) -> Option<Vec<(IpAddr, u8)>> {
        let items = self.array(v, field, "IPv4 \"a.b.c.d/len\" or IPv6 \"x::y/len\" strings")?;
        let mut out = Some(Vec::new());
        for (i, item) in items.iter().enumerate() {
            let f = format!("{field}[{i}]");
            let a = self.parsed(item, &f, |s| {
                let (ip, len) = parse_prefix(s, false)?;
                unicast(ip)?;
                Ok((ip, len))
            });
            let a = a.and_then(|(ip, len)| {
                let line = self.line_of(&item.span());
                if let Some(first) = seen.insert(ip, line) {
                    self.problem(
                        &item.span(),
                        &f,
                        format!("duplicate address {ip} (first at line {first})"),
                    );
                    return None;
                }
                Some((ip, len))
            });
            match (a, &mut out) {
                (Some(a), Some(o)) => o.push(a),
                _ => out = None,
            }
        }
        out
    }

    // -- [[sa]] --------------------------------------------------------------

    fn sas(&mut self, raws: &[Spanned<RawSa>], workers: Option<i64>) -> Sas {
        // (spi, direction) → line of the first SA with them, for every SA
        // whose SPI and direction are valid, so a bad key does not also
        // break the policies naming it.
        let mut ids: HashMap<(u32, u8), usize> = HashMap::new();
        // (spi, direction) → (Sa::sad_dst, line) of each SA with them.
        type SadDstLines = Vec<(Option<IpAddr>, usize)>;
        let mut seen: HashMap<(u32, u8), SadDstLines> = HashMap::new();
        // Key material of the SAs whose nonce is their sequence number,
        // with the (SPI, direction, line, algorithm) of the first SA with
        // it, by a hash of the key (the copies are wiped when dropped).
        let hasher = std::collections::hash_map::RandomState::new();
        let mut nonce_keys: HashMap<u64, Vec<KeyHolder>> = HashMap::new();
        let list = self.all(raws, "sa", |ck, s, tab| {
            let spi_v = ck.required(&s.spi, tab, "spi");
            let spi = spi_v.and_then(|v| ck.spi(v, &tab.field("spi")));
            let direction = ck
                .required(&s.direction, tab, "direction")
                .and_then(|v| ck.keyword(v, &tab.field("direction"), DIRECTIONS));
            if let (Some(v), None) = (spi_v, spi) {
                let at = format!("{} at line {}", tab.field("spi"), ck.line_of(&v.span()));
                ck.bad_spis.push((at, direction));
            }
            let modes = &[("tunnel", SaMode::Tunnel), ("transport", SaMode::Transport)];
            let mode = ck.opt_keyword(&s.mode, &tab.field("mode"), modes, SaMode::Tunnel);
            let transport = mode == Some(SaMode::Transport);
            if transport {
                // RFC 4303 §3.1.1: the packet's own addresses are the SA's
                // endpoints; outer-header settings have nothing to apply to.
                for (f, key) in [
                    (&s.tunnel_src, "tunnel_src"),
                    (&s.tunnel_dst, "tunnel_dst"),
                    (&s.outer_ttl, "outer_ttl"),
                    (&s.df, "df"),
                ] {
                    if let Some(v) = f {
                        let m = format!("{key} is not allowed with mode = \"transport\" (the packet's own IPv4 header is kept); remove it");
                        ck.problem(&v.span(), &tab.field(key), m);
                    }
                }
            }
            let algs: Vec<(&str, Algorithm)> = Algorithm::ALL.iter().map(|a| (a.name(), *a)).collect();
            let algorithm = ck
                .required(&s.algorithm, tab, "algorithm")
                .and_then(|v| ck.keyword(v, &tab.field("algorithm"), &algs));
            let (key, auth_key, icv_len) = ck.sa_keys(s, tab, algorithm);
            let ip = |ck: &mut Self, f: &Field, key: &str| {
                ck.required(f, tab, key)
                    .and_then(|v| ck.parsed(v, &tab.field(key), |s| unicast(parse_ip(s)?)))
            };
            let unspecified = Some(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
            // An unknown `mode` is its own error: not followed by "missing
            // tunnel_src" for a transport SA whose mode was misspelt.
            let no_tunnel = mode != Some(SaMode::Tunnel);
            let tunnel_src = if no_tunnel { unspecified } else { ip(ck, &s.tunnel_src, "tunnel_src") };
            let tunnel_dst = if no_tunnel { unspecified } else { ip(ck, &s.tunnel_dst, "tunnel_dst") };
            if let (false, Some(a), Some(b), Some(v)) = (no_tunnel, tunnel_src, tunnel_dst, &s.tunnel_dst) {
                if a.is_ipv6() != b.is_ipv6() && !transport {
                    // RFC 4303 §3.1.2: one outer header, so one family.
                    let m = format!("expected an {} address like tunnel_src ({a}), found {b}", family(a));
                    ck.problem(&v.span(), &tab.field("tunnel_dst"), m);
                } else if a == b && !transport {
                    let m = format!("expected an address other than tunnel_src, found {b}");
                    ck.problem(&v.span(), &tab.field("tunnel_dst"), m);
                }
            }
            // The SA's identity (RFC 4301 §4.1): (SPI, direction), and for
            // inbound tunnel SAs also tunnel_dst; checked once the mode and
            // tunnel_dst are known (an unknown one skips the check).
            if let (Some(spi), Some(dir), Some(v)) = (spi, direction, spi_v) {
                let line = ck.line_of(&v.span());
                if let (Some(mode), Some(dst)) = (mode, tunnel_dst) {
                    let me = sad_dst(dir, mode, dst);
                    let same = seen.entry((spi, dir as u8)).or_default();
                    if let Some((first, (what, hint))) = same.iter().find_map(|&(other, l)| spi_clash(dir, spi, me, other).map(|c| (l, c))) {
                        ck.problem(&v.span(), &tab.field("spi"), format!("duplicate {what} (first at line {first}){hint}"));
                        return None;
                    }
                    same.push((me, line));
                }
                ids.entry((spi, dir as u8)).or_insert(line);
            }
            if let (Some(IpAddr::V6(_)), Some(v)) = (tunnel_dst, &s.df) {
                if !transport {
                    let m = "df applies to an IPv4 outer header only (tunnel_src/tunnel_dst are IPv6, whose header has no DF bit); remove it";
                    ck.problem(&v.span(), &tab.field("df"), m);
                }
            }
            let replay_window = match (&s.replay_window, direction) {
                (Some(v), Some(Direction::Outbound)) => {
                    let m = "replay_window applies to inbound SAs only (RFC 4303 §3.4.3); remove it from this outbound SA";
                    ck.problem(&v.span(), &tab.field("replay_window"), m);
                    None
                }
                (Some(v), _) => ck.integer(v, &tab.field("replay_window"), 0, i64::from(MAX_REPLAY_WINDOW)),
                (None, Some(Direction::Outbound)) => Some(0),
                (None, _) => Some(64),
            };
            let outer_ttl = match &s.outer_ttl {
                None => Some(None),
                Some(v) => ck.integer(v, &tab.field("outer_ttl"), 1, 255).map(|t| Some(t as u8)),
            };
            let esn = ck.opt_bool(&s.esn, &tab.field("esn"), false);
            let udp_encap = ck.opt_bool(&s.udp_encap, &tab.field("udp_encap"), false);
            let udp_port = |ck: &mut Self, f: &Field, key: &str, default: Option<u16>| match f {
                None => Some(default),
                Some(v) => {
                    if udp_encap == Some(false) {
                        let m = format!("{key} applies only with udp_encap = true (RFC 3948); add it or remove {key}");
                        ck.problem(&v.span(), &tab.field(key), m);
                        return None;
                    }
                    ck.integer(v, &tab.field(key), 1, 65535).map(|p| Some(p as u16))
                }
            };
            let both = udp_port(ck, &s.udp_port, "udp_port", Some(crate::wire::udp::NATT_PORT)).flatten();
            let udp_sport = udp_port(ck, &s.udp_sport, "udp_sport", both).flatten();
            let udp_dport = udp_port(ck, &s.udp_dport, "udp_dport", both).flatten();
            let dfs = &[("copy", DfMode::Copy), ("set", DfMode::Set), ("clear", DfMode::Clear)];
            let df = ck.opt_keyword(&s.df, &tab.field("df"), dfs, DfMode::Copy);
            // Sender settings of tunnel mode: dummy packets (RFC 4303 §2.6)
            // need an outer header of the SA's own; TFC padding (§2.7) the
            // inner IP header's length to be stripped by. (key, why
            // outbound, why tunnel mode).
            const DUMMY_WHY: (&str, &str) = (
                "the sender generates dummy packets, RFC 4303 §2.6",
                "a transport-mode SA has no endpoints of its own to send dummy packets to",
            );
            const TFC_WHY: (&str, &str) = (
                "the sender pads, RFC 4303 §2.7; a receiver strips TFC padding whatever its config",
                "only the inner IP header of tunnel mode tells the receiver where TFC padding starts",
            );
            let sender_tunnel_only = |ck: &mut Self, f: &Field, key: &str, (out_why, tunnel_why): (&str, &str)| match (f, direction, transport) {
                (Some(v), Some(Direction::Inbound), _) => {
                    let m = format!("{key} applies to outbound SAs only ({out_why}); remove it");
                    ck.problem(&v.span(), &tab.field(key), m);
                    false
                }
                (Some(v), _, true) => {
                    let m = format!("{key} needs mode = \"tunnel\": {tunnel_why}; remove it");
                    ck.problem(&v.span(), &tab.field(key), m);
                    false
                }
                _ => true,
            };
            let dummy_interval_ms = if sender_tunnel_only(ck, &s.dummy_interval_ms, "dummy_interval_ms", DUMMY_WHY) {
                ck.opt_integer(&s.dummy_interval_ms, &tab.field("dummy_interval_ms"), 0, 3_600_000, 0)
            } else {
                None
            };
            let max_len = crate::esp::outbound::MAX_DUMMY_LEN as i64;
            let dummy_len = if sender_tunnel_only(ck, &s.dummy_len, "dummy_len", DUMMY_WHY) {
                ck.opt_integer(&s.dummy_len, &tab.field("dummy_len"), 0, max_len, 0)
            } else {
                None
            };
            let tfc_pad_to = if sender_tunnel_only(ck, &s.tfc_pad_to, "tfc_pad_to", TFC_WHY) {
                ck.opt_integer(&s.tfc_pad_to, &tab.field("tfc_pad_to"), 0, max_len, 0)
            } else {
                None
            };
            let pad_align = ck.pad_align(&s.pad_align, tab, direction, algorithm);
            const FLOW_WHY: (&str, &str) =
                ("the sender writes the outer header", "transport mode keeps the packet's own header and its flow label");
            let flow_label_inner = if sender_tunnel_only(ck, &s.flow_label, "flow_label", FLOW_WHY) {
                let v = ck.opt_keyword(&s.flow_label, &tab.field("flow_label"), &[("zero", false), ("inner", true)], false);
                match (&s.flow_label, v, tunnel_dst) {
                    (Some(f), Some(true), Some(IpAddr::V4(_))) => {
                        let m = "flow_label = \"inner\" needs IPv6 tunnel endpoints: an IPv4 outer header has no flow label; remove it";
                        ck.problem(&f.span(), &tab.field("flow_label"), m);
                        None
                    }
                    _ => v,
                }
            } else {
                None
            };
            if let (Some(v), Some(0)) = (&s.dummy_len, dummy_interval_ms) {
                let m = "dummy_len applies only with dummy_interval_ms > 0 (no dummy packets are sent); add it or remove dummy_len";
                ck.problem(&v.span(), &tab.field("dummy_len"), m);
            }
            let lifetime = ck.lifetime(s, tab);
            let first_seq = ck.first_seq(&s.first_seq, tab, direction, esn);
            let worker = match (&s.worker, workers) {
                (None, _) => Some(None),
                (Some(v), Some(w)) => {
                    let field = tab.field("worker");
                    match v.get_ref() {
                        Raw::Int(i) if *i >= w => {
                            let m = format!("expected a worker index below gateway.workers = {w}, found {i}");
                            ck.problem(&v.span(), &field, m);
                            None
                        }
                        _ => ck.integer(v, &field, 0, w - 1).map(|i| Some(i as usize)),
                    }
                }
                // gateway.workers is itself wrong: only check the type.
                (Some(v), None) => ck.integer(v, &tab.field("worker"), 0, i64::MAX).map(|i| Some(i as usize)),
            };
            // Checked last: a duplicate SPI has been reported (and returned) by now.
            if let (Some(a), Some(k), Some(spi), Some(dir), Some(v)) = (algorithm, &key, spi, direction, &s.key) {
                if nonce_from_seq(a) && !k.is_empty() {
                    let line = ck.line_of(&v.span());
                    let same = nonce_keys.entry(std::hash::BuildHasher::hash_one(&hasher, k.as_slice())).or_default();
                    match same.iter().find(|e| e.0 == *k) {
                        Some(&(_, first, d, l, fa)) => {
                            let m = if two_ciphers(fa, a) {
                                format!(
                                    "the same key material as {} SA {first} (line {l}), which uses it with {}: one key must serve one SA and one algorithm; give each SA its own key",
                                    dir_name(d),
                                    fa.name()
                                )
                            } else {
                                format!(
                                    "the same key material as {} SA {first} (line {l}): {} takes its nonce from the sequence number (salt ‖ IV = sequence number), \
                                     and each SA counts from 1, so two SAs under one key repeat nonces (RFC 4106 §3.1, RFC 4543 §3.1, RFC 3686 §3.1, RFC 7634 §2); give each SA its own key",
                                    dir_name(d),
                                    a.name()
                                )
                            };
                            ck.problem(&v.span(), &tab.field("key"), m);
                        }
                        None => same.push((k.clone(), spi, dir, line, a)),
                    }
                }
            }
            Some(Sa {
                spi: spi?,
                direction: direction?,
                mode: mode?,
                algorithm: algorithm?,
                key: key?,
                auth_key: auth_key?,
                icv_len: icv_len?,
                tunnel_src: tunnel_src?,
                tunnel_dst: tunnel_dst?,
                replay_window: replay_window? as u32,
                outer_ttl: outer_ttl?,
                df: df?,
                worker: worker?,
                esn: esn?,
                udp_encap: udp_encap?,
                udp_sport: udp_sport?,
                udp_dport: udp_dport?,
                dummy_interval_ms: dummy_interval_ms? as u64,
                dummy_len: dummy_len? as usize,
                tfc_pad_to: tfc_pad_to? as usize,
                pad_align: pad_align?,
                flow_label_inner: flow_label_inner?,
                lifetime: lifetime?,
                first_seq: first_seq?,
            })
        });
        Sas { list, ids }
    }

    /// The six lifetime keys of an SA (RFC 4301 §4.4.2.1): each an integer
    /// ≥ 1 (seconds at most [`MAX_LIFETIME_SECONDS`]), absent = no limit
    /// (`u64::MAX`); a soft limit must be below its hard limit when both
    /// are given (the soft one asks for a rekey while the SA still works).
    fn lifetime(&mut self, s: &RawSa, tab: &Tab) -> Option<Lifetime> {
        let pairs = [
            ((&s.soft_packets, "soft_packets"), (&s.hard_packets, "hard_packets"), i64::MAX),
            ((&s.soft_bytes, "soft_bytes"), (&s.hard_bytes, "hard_bytes"), i64::MAX),
            ((&s.soft_seconds, "soft_seconds"), (&s.hard_seconds, "hard_seconds"), MAX_LIFETIME_SECONDS as i64),
        ];
        let mut soft = [u64::MAX; 3];
        let mut hard = [u64::MAX; 3];
        let mut ok = true;
        for (k, ((sf, sk), (hf, hk), max)) in pairs.into_iter().enumerate() {
            let sv = self.opt_integer(sf, &tab.field(sk), 1, max, i64::MAX);
            let hv = self.opt_integer(hf, &tab.field(hk), 1, max, i64::MAX);
            match (sv, hv, sf) {
                (Some(a), Some(b), Some(v)) if hf.is_some() && a >= b => {
                    let m = format!("expected {sk} below {hk} ({b}), found {a}: the soft limit asks for a rekey while the SA still works, the hard one ends it");
                    self.problem(&v.span(), &tab.field(sk), m);
                    ok = false;
                }
                (Some(a), Some(b), _) => {
                    if sf.is_some() {
                        soft[k] = a as u64;
                    }
                    if hf.is_some() {
                        hard[k] = b as u64;
                    }
                }
                _ => ok = false,
            }
        }
        let limits = |l: [u64; 3]| Limits { packets: l[0], bytes: l[1], seconds: l[2] };
        ok.then(|| Lifetime { soft: limits(soft), hard: limits(hard) })
    }

    /// `pad_align` of an SA (RFC 4303 §2.4): outbound only (the sender
    /// pads; a receiver takes any padding), 0 (the default: the
    /// algorithm's own alignment) or a power of two from 4 to 256 (Pad
    /// Length is one byte) and at least the algorithm's block size (16
    /// for AES-CBC). Absent: 0.
    fn pad_align(&mut self, f: &Field, tab: &Tab, direction: Option<Direction>, algorithm: Option<Algorithm>) -> Option<usize> {
        let Some(v) = f else { return Some(0) };
        let field = tab.field("pad_align");
        if direction == Some(Direction::Inbound) {
            let m = "pad_align applies to outbound SAs only (the sender pads, RFC 4303 §2.4; a receiver takes any padding); remove it";
            self.problem(&v.span(), &field, m);
            return None;
        }
        let n = match v.get_ref() {
            // 0 spells the default (the algorithm's own alignment).
            Raw::Int(0) => return Some(0),
            _ => self.integer(v, &field, 4, 256)? as usize,
        };
        if !n.is_power_of_two() {
            self.problem(&v.span(), &field, format!("expected a power of two (4, 8, 16, 32, 64, 128 or 256), found {n}"));
            return None;
        }
        if let Some(a) = algorithm.filter(|a| n < a.block_size()) {
            let m = format!("{} encrypts whole {}-byte blocks (RFC 4303 §2.4): pad_align must be at least {}, found {n}", a.name(), a.block_size(), a.block_size());
            self.problem(&v.span(), &field, m);
            return None;
        }
        Some(n)
    }

    /// `first_seq`: the sequence number of the SA's first packet,
    /// 1..=2^32−1 without ESN, 1..=2^64−1 with (RFC 4303 §2.2, §2.2.1); an
    /// integer, or a decimal or "0x" hex string for values beyond TOML's
    /// 2^63−1. Default 1. Outbound: where the counter starts; inbound: the
    /// peer's, where the anti-replay window starts (so the ESN high half
    /// of a peer starting past 2^32 is inferred right, RFC 4303 App. A2).
    fn first_seq(&mut self, f: &Field, tab: &Tab, _direction: Option<Direction>, esn: Option<bool>) -> Option<u64> {
        let Some(v) = f else { return Some(1) };
        let field = tab.field("first_seq");
        let (max, why) = match esn {
            Some(true) => (u64::MAX, "with esn = true the counter has 64 bits, RFC 4303 §2.2.1"),
            Some(false) => (u32::MAX as u64, "without esn the counter has 32 bits and never cycles, RFC 4303 §3.3.3"),
            None => (u64::MAX, ""),
        };
        let expected = format!("an integer in 1..={max}");
        let n = match v.get_ref() {
            Raw::Int(i) => u64::try_from(*i).ok(),
            Raw::Str(s) => {
                let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => s.parse::<u64>(),
                };
                match n {
                    Ok(n) if !s.contains(['+', '-']) => Some(n),
                    _ => {
                        self.problem(&v.span(), &field, format!("expected {expected} (decimal or 0x hex in a string), found {s:?}"));
                        return None;
                    }
                }
            }
            _ => {
                self.wrong_type(v, &field, &expected);
                return None;
            }
        };
        match n {
            Some(n) if (1..=max).contains(&n) => Some(n),
            _ => {
                let found = v.get_ref().describe(false);
                let why = if why.is_empty() { String::new() } else { format!(" ({why})") };
                self.problem(&v.span(), &field, format!("expected {expected}{why}, found {found}"));
                None
            }
        }
    }

    fn spi(&mut self, v: &Spanned<Raw>, field: &str) -> Option<u32> {
        let r = match v.get_ref() {
            Raw::Int(i) => spi_in_range(*i),
            Raw::Str(s) => parse_spi(s),
            _ => {
                self.wrong_type(v, field, "an SPI (integer, or string \"0x…\")");
                return None;
            }
        };
        r.map_err(|m| self.problem(&v.span(), field, m)).ok()
    }

    /// `key`, `auth_key` and `icv_len` of an SA, checked against its
    /// algorithm (not checked for length when the algorithm itself is
    /// wrong). Returns them as (key, auth_key, icv_len).
    fn sa_keys(&mut self, s: &RawSa, tab: &Tab, alg: Option<Algorithm>) -> (Option<Key>, Option<Key>, Option<usize>) {
        let key = match (alg.map(|a| (a, key_description(a))), &s.key) {
            (Some((a, None)), Some(v)) => {
                let m = format!("{} uses NULL encryption (RFC 2410) and takes no key; remove it", a.name());
                self.problem(&v.span(), &tab.field("key"), m);
                None
            }
            (Some((_, None)), None) => Some(Key::default()),
            (Some((a, Some(desc))), _) => {
                let want = Some((2 * key_material_len(a), desc));
                self.required(&s.key, tab, "key").and_then(|v| self.key(v, &tab.field("key"), want))
            }
            (None, Some(v)) => self.key(v, &tab.field("key"), None),
            (None, None) => None,
        };
        let auth_key = match (alg.map(|a| (a, auth(a))), &s.auth_key) {
            (Some((a, None)), Some(v)) => {
                let m = format!(
                    "{} authenticates with its own ICV and takes no auth_key; auth_key is for the *-hmac-* algorithms",
                    a.name()
                );
                self.problem(&v.span(), &tab.field("auth_key"), m);
                None
            }
            (Some((_, None)), None) => Some(Key::default()),
            (Some((_, Some((name, len)))), _) => {
                let desc = format!("{name} key");
                self.required(&s.auth_key, tab, "auth_key").and_then(|v| self.key(v, &tab.field("auth_key"), Some((2 * len, &desc))))
            }
            (None, Some(v)) => self.key(v, &tab.field("auth_key"), None),
            (None, None) => None,
        };
        let icv_len = match (alg, &s.icv_len) {
            (Some(a), None) => Some(a.default_icv_len()),
            (Some(a), Some(v)) => {
                let allowed = a.icv_lens();
                match v.get_ref() {
                    Raw::Int(i) if allowed.iter().any(|&l| l as i64 == *i) => Some(*i as usize),
                    Raw::Int(i) => {
                        let list: Vec<String> = allowed.iter().map(|l| l.to_string()).collect();
                        let why = match a.cipher() {
                            crate::crypto::Cipher::AesGcm => " (RFC 4106 §6)",
                            crate::crypto::Cipher::AesCcm => " (RFC 4309 §3.1)",
                            _ => "",
                        };
                        let m = format!("expected {} for {}{why}, found {i}", list.join(" or "), a.name());
                        self.problem(&v.span(), &tab.field("icv_len"), m);
                        None
                    }
                    _ => {
                        self.wrong_type(v, &tab.field("icv_len"), "an ICV length in bytes");
                        None
                    }
                }
            }
            (None, Some(v)) => self.integer(v, &tab.field("icv_len"), 0, 64).map(|i| i as usize),
            (None, None) => None,
        };
        (key, auth_key, icv_len)
    }

    /// Key material in hex, `want` = (hex digits, what they hold) when the
    /// algorithm is known; its value never appears in a message, and the
    /// copies made here (the digits, the bytes) are zeroized when dropped.
    fn key(&mut self, v: &Spanned<Raw>, field: &str, want: Option<(usize, &str)>) -> Option<Key> {
        let Raw::Str(s) = v.get_ref() else {
            let found = v.get_ref().describe(true);
            self.problem(
                &v.span(),
                field,
                format!("expected a hex string, found {found}"),
            );
            return None;
        };
        // Room for every digit up front, so growing never leaves a copy behind.
        let mut digits = Zeroizing::new(String::with_capacity(s.len()));
        digits.extend(s.chars().filter(|c| *c != ':'));
        if let Some((pos, _)) = s
            .char_indices()
            .find(|(_, c)| *c != ':' && !c.is_ascii_hexdigit())
        {
            let m = format!(
                "expected hex digits with optional ':' separators, found a non-hex character at position {}",
                s[..pos].chars().count() + 1
            );
            self.problem(&v.span(), field, m);
            return None;
        }
        if let Some((want, desc)) = want {
            if digits.len() != want {
                let m = format!("expected {want} hex digits ({desc}), found {}", digits.len());
                self.problem(&v.span(), field, m);
                return None;
            }
        } else if !digits.len().is_multiple_of(2) {
            return None;
        }
        let mut bytes = Zeroizing::new(vec![0u8; digits.len() / 2]);
        hex::decode_to_slice(digits.as_bytes(), &mut bytes[..]).ok()?;
        Some(bytes)
    }

    // -- [[policy]] ----------------------------------------------------------

    fn policy(
        &mut self,
        p: &RawPolicy,
        tab: &Tab,
        sas: &HashMap<(u32, u8), usize>,
        v4_only: &HashSet<(u32, u8)>,
    ) -> Option<Policy> {
        let direction = self
            .required(&p.direction, tab, "direction")
            .and_then(|v| self.keyword(v, &tab.field("direction"), DIRECTIONS));
        let src = p.src.as_ref().map(|v| self.parsed(v, &tab.field("src"), |s| parse_prefix(s, true)));
        let dst = p.dst.as_ref().map(|v| self.parsed(v, &tab.field("dst"), |s| parse_prefix(s, true)));
        // A missing side is "any" of the other side's family; both missing:
        // IPv4 any (a policy matches packets of its own family only).
        let any = |other: Option<Option<(IpAddr, u8)>>| match other {
            Some(Some((IpAddr::V6(_), _))) => Some((IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), 0)),
            _ => Some((IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0)),
        };
        let (src, dst) = (src.unwrap_or_else(|| any(dst)), dst.unwrap_or_else(|| any(src)));
        if let (Some((s, _)), Some((d, _)), Some(v)) = (src, dst, &p.dst) {
            if s.is_ipv6() != d.is_ipv6() {
                let m = format!("expected an {} prefix like src ({s}), found {d}", family(s));
                self.problem(&v.span(), &tab.field("dst"), m);
            }
        }
        let protocol = match &p.protocol {
            None => Some(Protocol::Any),
            Some(v) => {
                let field = tab.field("protocol");
                let expected = "\"any\", \"icmp\", \"tcp\", \"udp\" or an integer 0..=255";
                match v.get_ref() {
                    Raw::Int(_) => self
                        .integer(v, &field, 0, 255)
                        .map(|n| Protocol::Number(n as u8)),
                    Raw::Str(s) => match s.as_str() {
                        "any" => Some(Protocol::Any),
                        "icmp" => Some(Protocol::Number(1)),
                        "tcp" => Some(Protocol::Number(6)),
                        "udp" => Some(Protocol::Number(17)),
                        _ => {
                            self.problem(
                                &v.span(),
                                &field,
                                format!("expected {expected}, found {s:?}"),
                            );
                            None
                        }
                    },
                    _ => {
                        self.wrong_type(v, &field, expected);
                        None
                    }
                }
            }
        };
        let src_ports = self.port_range(&p.src_ports, &tab.field("src_ports"), protocol);
        let dst_ports = self.port_range(&p.dst_ports, &tab.field("dst_ports"), protocol);
        let priority = self.opt_integer(
            &p.priority,
            &tab.field("priority"),
            0,
            i64::from(u32::MAX),
            100,
        );
        let action = self
            .required(&p.action, tab, "action")
            .and_then(|v| self.action(v, &tab.field("action"), direction, sas));
        if let (Some(Action::Protect(spi)), Some(dir), Some(Some((addr, _))), Some(v)) = (action, direction, src.map(Some), &p.action) {
            if addr.is_ipv6() && v4_only.contains(&(spi, dir as u8)) {
                let m = format!("SA {spi} is a transport-mode SA with udp_encap, which carries IPv4 only (RFC 3948); an IPv6 policy cannot protect with it");
                self.problem(&v.span(), &tab.field("action"), m);
                return None;
            }
        }
        Some(Policy {
            direction: direction?,
            src: src?,
            dst: dst?,
            protocol: protocol?,
            src_ports: src_ports?,
            dst_ports: dst_ports?,
            priority: priority? as u32,
            action: action?,
        })
    }

    fn port_range(
        &mut self,
        f: &Field,
        field: &str,
        protocol: Option<Protocol>,
    ) -> Option<(u16, u16)> {
        let Some(v) = f else {
            return Some(ANY_PORTS);
        };
        let range = match v.get_ref() {
            Raw::Int(_) => self
                .integer(v, field, 0, 65535)
                .map(|n| (n as u16, n as u16)),
            Raw::Str(_) => self.parsed(v, field, parse_port_range),
            _ => {
                self.wrong_type(v, field, "\"any\", \"N\" or \"N-M\"");
                None
            }
        }?;
        if range != ANY_PORTS {
            match protocol {
                Some(Protocol::Number(6 | 17)) | None => {}
                Some(p) => {
                    let found = match p {
                        Protocol::Any => "protocol \"any\"".to_owned(),
                        Protocol::Number(n) => format!("protocol {n}"),
                    };
                    let m =
                        format!("a port range needs protocol \"tcp\" or \"udp\", found {found}");
                    self.problem(&v.span(), field, m);
                    return None;
                }
            }
        }
        Some(range)
    }

    fn action(
        &mut self,
        v: &Spanned<Raw>,
        field: &str,
        direction: Option<Direction>,
        sas: &HashMap<(u32, u8), usize>,
    ) -> Option<Action> {
        let action = self.parsed(v, field, |s| {
            let words: Vec<&str> = s.split_whitespace().collect();
            match words.as_slice() {
                ["bypass"] => Ok(Action::Bypass),
                ["discard"] => Ok(Action::Discard),
                ["protect", spi] => parse_spi(spi).map(Action::Protect),
                _ => Err(format!(
                    "expected \"protect <spi>\", \"bypass\" or \"discard\", found {s:?}"
                )),
            }
        })?;
        if let (Action::Protect(spi), Some(dir)) = (action, direction) {
            if !sas.contains_key(&(spi, dir as u8)) {
                let other = match dir {
                    Direction::Outbound => Direction::Inbound,
                    Direction::Inbound => Direction::Outbound,
                };
                let m = if let Some(line) = sas.get(&(spi, other as u8)) {
                    // Line 0: an SA installed already, not one of this text's.
                    let at = if *line == 0 { " (installed)".to_owned() } else { format!(" (line {line})") };
                    format!(
                        "expected an {} SA for an {} policy, found SPI {spi} is {}{at}",
                        dir_name(dir),
                        dir_name(dir),
                        dir_name(other)
                    )
                } else {
                    // Most likely an SA of this direction whose SPI was refused
                    // above (at most 3 named: the message stays short).
                    let maybe: Vec<&str> = self.bad_spis.iter().filter(|b| b.1.is_none_or(|d| d == dir)).map(|b| b.0.as_str()).collect();
                    let hint = match maybe.as_slice() {
                        [] => String::new(),
                        [one] => format!("; {one} is invalid, perhaps the one meant"),
                        [a, b] => format!("; {a} and {b} are invalid, perhaps one of them the one meant"),
                        [a, b, c, rest @ ..] if !rest.is_empty() => format!("; {a}, {b}, {c} and {} more are invalid, perhaps one of them the one meant", rest.len()),
                        [a, b, c, ..] => format!("; {a}, {b} and {c} are invalid, perhaps one of them the one meant"),
                    };
                    format!("expected the SPI of an [[sa]], found {spi} (no SA has it{hint})")
                };
                self.problem(&v.span(), field, m);
                return None;
            }
        }
        Some(action)
    }

    // -- [[route]], [[neighbour]] -------------------------------------------

    fn routes(
        &mut self,
        raws: &[Spanned<RawRoute>],
        ports: &HashMap<String, usize>,
    ) -> Option<Vec<Route>> {
        let mut seen: HashMap<(IpAddr, u8), usize> = HashMap::new();
        self.all(raws, "route", |ck, r, tab| {
            let field = tab.field("prefix");
            let prefix = ck.required(&r.prefix, tab, "prefix").and_then(|v| {
                let p = ck.parsed(v, &field, |s| parse_prefix(s, true))?;
                let line = ck.line_of(&v.span());
                if let Some(first) = seen.insert(p, line) {
                    let m = format!("duplicate route to {}/{} (first at line {first})", p.0, p.1);
                    ck.problem(&v.span(), &field, m);
                    return None;
                }
                Some(p)
            });
            let port = ck.required(&r.port, tab, "port").and_then(|v| {
                let mut names: Vec<&String> = ports.keys().collect();
                names.sort_by_key(|n| ports[*n]);
                let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                ck.parsed(v, &tab.field("port"), |s| {
                    ports.get(s).copied().ok_or_else(|| {
                        format!(
                            "expected the name of a [[port]] ({}), found {s:?}",
                            names.join(", ")
                        )
                    })
                })
            });
            let via = match &r.via {
                None => Some(None),
                Some(v) => ck
                    .parsed(v, &tab.field("via"), |s| {
                        let via = unicast(parse_ip(s)?)?;
                        match prefix {
                            Some((p, _)) if p.is_ipv6() != via.is_ipv6() => {
                                Err(format!("expected an {} next hop for prefix {p}, found {via}", family(p)))
                            }
                            _ => Ok(via),
                        }
                    })
                    .map(Some),
            };
            Some(Route {
                prefix: prefix?,
                port: port?,
                via: via?,
            })
        })
    }

    fn neighbours(&mut self, raws: &[Spanned<RawNeighbour>]) -> Option<Vec<Neighbour>> {
        let mut seen: HashMap<IpAddr, usize> = HashMap::new();
        self.all(raws, "neighbour", |ck, n, tab| {
            let ip = ck.required(&n.ip, tab, "ip").and_then(|v| {
                let field = tab.field("ip");
                let ip = ck.parsed(v, &field, |s| unicast(parse_ip(s)?))?;
                let line = ck.line_of(&v.span());
                if let Some(first) = seen.insert(ip, line) {
                    ck.problem(
                        &v.span(),
                        &field,
                        format!("duplicate neighbour {ip} (first at line {first})"),
                    );
                    return None;
                }
                Some(ip)
            });
            let mac = ck
                .required(&n.mac, tab, "mac")
                .and_then(|v| ck.parsed(v, &tab.field("mac"), parse_mac));
            Some(Neighbour { ip: ip?, mac: mac? })
        })
    }
}

struct Ports {
    list: Option<Vec<Port>>,
    /// Name → index of every port whose name is valid.
    names: HashMap<String, usize>,
}

struct Sas {
    list: Option<Vec<Sa>>,
    /// (SPI, direction as u8) → line of every SA whose SPI and direction
    /// are valid.
    ids: HashMap<(u32, u8), usize>,
}

/// True for the algorithms whose per-packet nonce is the SA's salt (or
/// nonce) from the key material and the packet's sequence number as IV
/// ([`crate::esp::IvGen::counter`]): AES-GCM and AES-GMAC (RFC 4106 §3.1,
/// RFC 4543 §3.1), AES-CCM (RFC 4309 §3.1), AES-CTR (RFC 3686 §3.1),
/// ChaCha20-Poly1305 (RFC 7634 §2). Two such SAs under one key material repeat nonces; AES-CBC's IVs
/// are unpredictable (RFC 3602 §3) and NULL encryption has none.
pub(crate) fn nonce_from_seq(a: crate::crypto::Algorithm) -> bool {
    use crate::crypto::Cipher;
    matches!(a.cipher(), Cipher::AesGcm | Cipher::AesGmac | Cipher::AesCcm | Cipher::AesCtr | Cipher::ChaCha20Poly1305)
}

/// True when key material shared by SAs of algorithms `a` and `b` serves
/// two ciphers (AES and ChaCha20: AES-256-GCM and ChaCha20-Poly1305 key
/// material are both 36 bytes): no nonce in common, but one key for two
/// algorithms, refused as such rather than as nonces repeated.
pub(crate) fn two_ciphers(a: crate::crypto::Algorithm, b: crate::crypto::Algorithm) -> bool {
    use crate::crypto::Cipher::ChaCha20Poly1305;
    (a.cipher() == ChaCha20Poly1305) != (b.cipher() == ChaCha20Poly1305)
}

fn dir_name(d: Direction) -> &'static str {
    match d {
        Direction::Outbound => "outbound",
        Direction::Inbound => "inbound",
    }
}

// ---------------------------------------------------------------------------
// Value parsers: `Err` is the message, "expected …, found …".

/// A control socket path: non-empty, at most [`MAX_SOCKET_PATH`] bytes.
fn socket_path(s: &str) -> Result<&str, String> {
    if s.is_empty() {
        Err("expected a path, found \"\"".into())
    } else if s.len() > MAX_SOCKET_PATH {
        Err(format!("expected a path of at most {MAX_SOCKET_PATH} bytes (a Unix socket address), found {}", s.len()))
    } else if s.contains('\0') {
        Err("expected a path without NUL bytes".into())
    } else {
        Ok(s)
    }
}

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("expected an IPv4 or IPv6 address like \"192.0.2.1\" or \"2001:db8::1\", found {s:?}"))
}

/// "IPv4" or "IPv6", for messages.
fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv6() {
        "IPv6"
    } else {
        "IPv4"
    }
}

fn unicast(ip: IpAddr) -> Result<IpAddr, String> {
    let bad = match ip {
        IpAddr::V4(a) => a.is_unspecified() || a.is_broadcast() || a.is_multicast(),
        IpAddr::V6(a) => a.is_unspecified() || a.is_multicast(),
    };
    if bad {
        Err(format!("expected a unicast {} address, found {ip}", family(ip)))
    } else {
        Ok(ip)
    }
}

/// "a.b.c.d/len" (len 0..=32) or "x::y/len" (len 0..=128); with `network`,
/// host bits must be zero.
fn parse_prefix(s: &str, network: bool) -> Result<(IpAddr, u8), String> {
    let bad = || format!("expected an IPv4 or IPv6 prefix like \"192.0.2.0/24\" or \"2001:db8::/32\", found {s:?}");
    let (ip, len) = s.split_once('/').ok_or_else(bad)?;
    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let width = if ip.is_ipv6() { 128 } else { 32 };
    let len: u8 = match len.parse() {
        Ok(l) if l <= width => l,
        _ => return Err(format!("expected a prefix length 0..={width}, found {s:?}")),
    };
    let net = crate::policy::spd::Prefix::new(ip, len).addr();
    if network && net != ip {
        return Err(format!(
            "expected a network prefix, found host bits set in {s} (the network is {net}/{len})"
        ));
    }
    Ok((ip, len))
}

/// "02:00:00:00:00:01"; unicast and not all-zero.
pub(super) fn parse_mac(s: &str) -> Result<Mac, String> {
    let bad = || format!("expected a MAC address like \"02:00:00:00:00:01\", found {s:?}");
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in mac.iter_mut() {
        let part = parts.next().ok_or_else(bad)?;
        if part.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    if mac[0] & 1 != 0 || mac == [0; 6] {
        return Err(format!("expected a unicast MAC address, found {s}"));
    }
    Ok(mac)
}

/// Linux interface name rules (`dev_valid_name`): 1..=15 bytes, not "." or
/// "..", no '/', ':' or whitespace.
pub(crate) fn parse_ifname(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 15 {
        return Err(format!(
            "expected an interface name of 1..=15 bytes, found {s:?} ({} bytes)",
            s.len()
        ));
    }
    if s == "." || s == ".." || s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace() || unprintable(c)) {
        return Err(format!(
            "expected an interface name without '/', ':', spaces or control characters, found {s:?}"
        ));
    }
    Ok(s.to_owned())
}

fn spi_in_range(v: i64) -> Result<u32, String> {
    match u32::try_from(v) {
        Ok(0) => {
            Err("expected an SPI in 1..=4294967295 (0 is reserved, RFC 4303 §2.1), found 0".into())
        }
        Ok(spi) => Ok(spi),
        Err(_) => Err(format!("expected an SPI in 1..=4294967295, found {v}")),
    }
}

/// An SPI written as in a config: decimal or `0x` hex, 1..=2^32-1 (0 is
/// reserved, RFC 4303 §2.1). Errors: the text is neither, or out of range
/// (the message says which).
pub fn parse_spi(s: &str) -> Result<u32, String> {
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16),
        None => s.parse::<i64>(),
    };
    match n {
        Ok(v) if !s.contains(['+', '-']) => spi_in_range(v),
        _ => Err(format!("expected an SPI (decimal or 0x hex), found {s:?}")),
    }
}

/// "any" | "N" | "N-M" with N <= M.
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    if s == "any" {
        return Ok(ANY_PORTS);
    }
    let bad = || format!("expected \"any\", \"N\" or \"N-M\" with ports 0..=65535, found {s:?}");
    let port = |p: &str| {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse::<u16>().map_err(|_| bad())
    };
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (port(a.trim())?, port(b.trim())?),
        None => {
            let p = port(s)?;
            (p, p)
        }
    };
    if lo > hi {
        return Err(format!(
            "expected \"N-M\" with N <= M, found {s:?} (range reversed)"
        ));
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loaded config keeps its SA keys in `Zeroizing` (compile-time
    /// check: wiped when the `Config` drops) holding the decoded bytes, and
    /// the raw SA's hex strings are wiped by its `Drop`.
    #[test]
    fn sa_keys_zeroize() {
        fn zod<T: zeroize::ZeroizeOnDrop>(_: &T) {}
        let cfg = load(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/configs/ep0.toml"))).unwrap();
        let sa = &cfg.sas[0];
        zod(&sa.key);
        zod(&sa.auth_key);
        assert_eq!(sa.key.len(), key_material_len(sa.algorithm));
        assert!(sa.key.iter().any(|b| *b != 0));

        let mut raw: RawSa = toml::from_str("key = \"00:11\"\nauth_key = \"2233\"\nspi = 5").unwrap();
        raw.wipe_keys();
        for f in [&raw.key, &raw.auth_key] {
            assert!(matches!(f.as_ref().map(|v| v.get_ref()), Some(Raw::Str(s)) if s.is_empty()));
        }
        assert!(matches!(raw.spi.as_ref().map(|v| v.get_ref()), Some(Raw::Int(5))), "only the keys");
    }

    #[test]
    fn line_col_counts_characters() {
        let text = "a = 1\nkey = \"‖x\"\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, text.find("key").unwrap()), (2, 1));
        assert_eq!(line_col(text, text.find('x').unwrap()), (2, 9));
        assert_eq!(line_col(text, 10_000), (3, 1));
        // The checker's line index agrees with line_col at every offset.
        let ck = Checker::new(text, Path::new("t.toml"));
        for off in (0..=text.len() + 2).filter(|&o| o > text.len() || text.is_char_boundary(o)) {
            assert_eq!(ck.line_of(&(off..off)), line_col(text, off).0, "offset {off}");
            assert_eq!(ck.line_col(off), line_col(text, off), "offset {off}");
        }
    }

    #[test]
    fn prefixes() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(parse_prefix("0.0.0.0/0", true), Ok((ip("0.0.0.0"), 0)));
        assert_eq!(parse_prefix("10.1.2.3/32", true), Ok((ip("10.1.2.3"), 32)));
        assert_eq!(parse_prefix("10.1.2.3/8", false), Ok((ip("10.1.2.3"), 8)));
        assert!(parse_prefix("10.1.2.3/8", true)
            .unwrap_err()
            .contains("10.0.0.0/8"));
        for bad in [
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0/8",
            "10.0.0.0/33",
            "x/8",
            "2001:db8::/129",
            "2001:db8::1/64",
            "2001:db8::/",
        ] {
            assert!(parse_prefix(bad, true).is_err(), "{bad}");
        }
        assert_eq!(parse_prefix("2001:db8::/32", true), Ok((ip("2001:db8::"), 32)));
        assert_eq!(parse_prefix("::/0", true), Ok((ip("::"), 0)));
        assert_eq!(parse_prefix("2001:db8::1/128", true), Ok((ip("2001:db8::1"), 128)));
        assert!(parse_prefix("2001:db8::1/64", true).unwrap_err().contains("2001:db8::/64"));
        assert!(unicast(ip("ff02::1")).is_err());
        assert!(unicast(ip("::")).is_err());
        assert!(unicast(ip("2001:db8::1")).is_ok());
    }

    #[test]
    fn port_ranges_and_spis() {
        assert_eq!(parse_port_range("any"), Ok((0, 65535)));
        assert_eq!(parse_port_range("53"), Ok((53, 53)));
        assert_eq!(parse_port_range("1000-2000"), Ok((1000, 2000)));
        for bad in ["", "-", "1-", "70000", "2-1", "+5", "a-b"] {
            assert!(parse_port_range(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_spi("0x3e9"), Ok(1001));
        assert_eq!(parse_spi("4294967295"), Ok(u32::MAX));
        for bad in ["0", "0x0", "-1", "+1", "0x100000000", "x", ""] {
            assert!(parse_spi(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn macs_and_interface_names() {
        assert_eq!(parse_mac("02:00:00:0A:0b:01"), Ok([2, 0, 0, 10, 11, 1]));
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "2:0:0:0:0:1",
            "ff:ff:ff:ff:ff:ff",
            "00:00:00:00:00:00",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
        assert!(parse_ifname("gw0-in").is_ok());
        for bad in ["", "sixteen-chars-xx", "a/b", "a:b", "a b", "."] {
            assert!(parse_ifname(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(closest("nmae", &["name", "interface"]), Some("name"));
        assert_eq!(closest("neighbor", &["sa", "neighbour"]), Some("neighbour"));
        assert_eq!(closest("zzz", &["name", "interface"]), None);
    }
}
