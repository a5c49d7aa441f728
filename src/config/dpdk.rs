//! DPDK ipsec-secgw `.cfg` import: the `sp`, `sa`, `rt` and `neigh` lines
//! of DPDK 22.11's `examples/ipsec-secgw` (its `parser.c`, `sp4.c`, `sp6.c`,
//! `sa.c`, `rt.c` define the grammar) turned into secgw's TOML config, which
//! [`super::parse`] then validates, so a `.cfg` goes through exactly the
//! checks a TOML file does and loads to the same [`Config`].
//!
//! # File syntax (as DPDK reads it)
//! * `#` starts a comment anywhere on a line.
//! * A `\` as the last character of a line joins the next line to it with
//!   nothing in between (so a key may be split in the middle, as the sample
//!   `ep0.cfg` does); anything after the `\` is an error, and so is a `\` on
//!   the last line (nothing to continue with).
//! * Lines: `sp ipv4|ipv6 in|out esp protect SPI|bypass|discard [pri N]
//!   [src A/L] [dst A/L] [proto V:M] [sport LO:HI] [dport LO:HI]`;
//!   `sa in|out SPI (cipher_algo A [cipher_key K] auth_algo A [auth_key K] |
//!   aead_algo A aead_key K) mode ipv4-tunnel|ipv6-tunnel|transport [src IP
//!   dst IP] [esn N] [udp-encap] [type T] [port_id P] [flow-direction P Q]
//!   [fallback T] [mss N] [reassembly_en] [telemetry]`; `rt ipv4|ipv6 dst
//!   A/L [port N] [src A/L]` (no port = port 0, `src` ignored, both as
//!   rt.c does, warned); `neigh port N MAC`; `flow …` (refused).
//!
//! # Mapping and its semantic differences
//! * **Priority.** DPDK's `pri` is an rte_acl priority: among matching
//!   rules the *highest* wins (0..=0x1FFFFFFF, absent = 0); secgw's lower
//!   number wins. `priority = 0x1FFFFFFF - pri`, so the order is kept.
//!   rte_acl leaves the winner among equal priorities unspecified; secgw
//!   takes the first in file order.
//! * **Selectors.** An address without `/L` is `/0` in DPDK (any); kept, with
//!   a warning. Host bits below the length are ignored by rte_acl and
//!   rte_lpm; they are cleared here, with a warning. `proto V:M` is a value
//!   and mask: `M` 0 = any protocol, 255 = exactly `V`; other masks are
//!   refused. An absent `sport`/`dport` is DPDK's range 0:0 (its ACL rule
//!   starts zeroed; the samples always give `0:65535`): with `proto 6:255`
//!   or `17:255` it is imported as port 0, with a warning; otherwise the
//!   line is refused and left out (it matches only packets whose port bytes
//!   are 0, whatever their protocol). Port ranges need `proto 6:255` or
//!   `17:255`, as secgw's TOML does.
//! * **SPI and direction.** An SA's SPI is its id; `sp … in … protect SPI`
//!   is the inbound policy check (the packet must have arrived on that
//!   inbound SA). Duplicate `sp` lines are kept (as rte_acl keeps both) with
//!   a warning.
//! * **Keys.** `cipher_key`/`aead_key` are the TOML `key`: for AES-CTR,
//!   AES-GCM and ChaCha20-Poly1305 DPDK's key already ends with the 4-byte
//!   nonce or salt (sa.c: `key_len` 20/28/36 for 128/192/256-bit keys), which is
//!   secgw's layout too; `auth_key` is the HMAC key; the 20 bytes of
//!   `auth_algo aes-gmac` (key ‖ salt) become `key` of `aes-128-gmac`.
//! * **NULL/NULL.** `cipher_algo null auth_algo null` (ESP with neither
//!   confidentiality nor integrity) is refused: RFC 4303 §3.2 says at
//!   least one of the two services MUST be selected, "hence both
//!   algorithms MUST NOT be simultaneously NULL".
//! * **Refused SAs.** What secgw does not do (inline or lookaside-protocol
//!   `type`s, `fallback`, `reassembly_en`, `telemetry`, `port_id` with an
//!   offload type, algorithms it lacks) is reported with file, line and
//!   keyword; the SA is left out, and every policy naming it becomes
//!   `discard` (so its traffic is dropped rather than sent in the clear by
//!   a later bypass rule). The rest of the file still imports.
//! * **Accepted but without effect** (each with a warning): `flow-direction`
//!   and `port_id` on a software SA (NIC queue steering; secgw's workers
//!   share the port queues), `mss` (TSO, inline offload only),
//!   `type no-offload|cpu-crypto` (both are software crypto here).
//!   `udp-encap` is RFC 3948 with ports 4500/4500 (DPDK allows it only with
//!   offload types; secgw does it in software).
//! * **ESN.** `esn N` with N > 0 turns extended sequence numbers on
//!   (rte_security `esn.value` = N); an outbound SA starts at N, an inbound
//!   SA's replay window starts just below N (`first_seq = N` both ways).
//!   DPDK itself applies it on its librte_ipsec path only (`-l`, or
//!   `--reassemble N > 0`), so without those options it is imported with
//!   a warning, as `-e` is.
//! * **Routes.** `rt … port N` is an on-link route out of port N (DPDK has
//!   no next hops: the frame goes to the port's `neigh`/`--eth-dest` MAC,
//!   secgw's `peer_mac`). A route repeated for one prefix replaces the
//!   earlier one (rte_lpm semantics), with a warning. A route out of a port
//!   outside `-p` is left out, with a warning.
//! * **Ports.** A `.cfg` names no interfaces and no own addresses. Ports are
//!   the bits of `-p` (default: every port id the file and the options
//!   name); each needs `--port ID=IFACE` (default interface `dpdkID`, with
//!   a warning). Roles: the bits of `-u` are unprotected, the others
//!   protected (without `-u`: a port that a route to an SA's peer leaves by
//!   is unprotected). The gateway's own addresses are derived: every
//!   outbound tunnel SA's `src` and inbound tunnel SA's `dst` is ours, on
//!   the port the route to that SA's peer uses.
//! * **Other options** ([`ImportOptions`]). `-w N` is every inbound SA's
//!   `replay_window`, `-e` ESN on every SA, `--mtu` every port's `mtu`,
//!   `--reassemble N` the `[reassembly]` table (`contexts = N`, and
//!   `forwarded` and DPDK's 10-s `timeout_ms` for N > 0), `--frag-ttl` that
//!   `timeout_ms` (ignored without reassembly, as DPDK ignores it), `-l`
//!   accepted (secgw always applies `-w` and `-e`; DPDK only on that
//!   path). A value secgw cannot take is one problem named by the option;
//!   the lines they make have line 0 as their origin.
//!
//! Errors name `file:line:column: keyword: message` like TOML errors do;
//! problems the TOML validation finds are mapped back to the `.cfg` line.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::{self, Write as _};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use super::model::{Algorithm, Config, Direction, Mac, MAX_PORT_MTU, MAX_REASSEMBLY_CONTEXTS, MAX_REPLAY_WINDOW, MIN_PORT_MTU, MIN_REASSEMBLY_TIMEOUT_MS};
use super::{ConfigError, Problem};

/// rte_acl's largest priority (`RTE_ACL_MAX_PRIORITY`).
pub const ACL_MAX_PRIORITY: u32 = 0x1FFF_FFFF;

/// DPDK ipsec-secgw's command-line options that a `.cfg` depends on: the
/// ports, and those that set every SA, every port or the reassembly table
/// (`ipsec-secgw.c`'s `parse_args`, DPDK 22.11).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// `--port ID=IFACE`: the Linux interface of each DPDK port id.
    pub interfaces: BTreeMap<u16, String>,
    /// `-p PORTMASK`: ports in use (bit N = port N); `None` = every port id
    /// named by the file or the options.
    pub port_mask: Option<u64>,
    /// `-u PORTMASK`: unprotected ports; `None` = inferred from the routes
    /// to the SAs' peers.
    pub unprotected_mask: Option<u64>,
    /// `--eth-dest ID,MAC`: destination MAC per port (overrides a `neigh`
    /// line for the same port).
    pub eth_dest: BTreeMap<u16, Mac>,
    /// `-w N`: every inbound SA's anti-replay window in packets (RFC 4303
    /// §3.4.3; 0 = no replay check); `None` = secgw's default, 64 (DPDK's
    /// is 0, off).
    pub replay_window: Option<u64>,
    /// `-e`: extended sequence numbers (RFC 4303 §2.2.1) on every SA, not
    /// only those with an `esn N`.
    pub esn: bool,
    /// `-l`: DPDK's librte_ipsec path, the one that applies `-w` and `-e`
    /// (also taken with `--reassemble N`, N > 0). secgw has one path, which
    /// always does: accepted, no effect but a warning less.
    pub librte_ipsec: bool,
    /// `--mtu M`: every port's `mtu` (largest IP packet sent, bytes).
    pub mtu: Option<u64>,
    /// `--reassemble N`: reassembly table entries (per lcore in DPDK, per
    /// worker here: `reassembly.contexts`), 0 = off; N > 0 also reassembles
    /// forwarded fragments (`reassembly.forwarded`), as DPDK reassembles
    /// every fragment it receives. `None` = secgw's defaults.
    pub reassemble: Option<u64>,
    /// `--frag-ttl NS`: the time a datagram has to complete, nanoseconds
    /// (DPDK: at most 10 s, its default); `reassembly.timeout_ms`, rounded
    /// up to whole milliseconds, with `--reassemble N`, N > 0 (without it
    /// DPDK has no fragment table and ignores the option; so does the
    /// import, with a warning).
    pub frag_ttl_ns: Option<u64>,
}

/// DPDK's largest `--frag-ttl` (`MAX_FRAG_TTL_NS`: 10 s).
pub const MAX_FRAG_TTL_NS: u64 = 10_000_000_000;

impl ImportOptions {
    /// Parses a DPDK port mask: hex with or without `0x` (as ipsec-secgw's
    /// `-p`/`-u`). Errors: the message.
    pub fn parse_mask(s: &str) -> Result<u64, String> {
        let h = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
        u64::from_str_radix(h, 16).map_err(|_| format!("expected a hex port mask like 0x3, found {s:?}"))
    }
    /// Parses `ID=IFACE` (`--port`).
    pub fn parse_port(s: &str) -> Result<(u16, String), String> {
        let (id, ifname) = s.split_once('=').ok_or_else(|| format!("expected ID=IFACE like 0=gw0-p0, found {s:?}"))?;
        let id = id.parse::<u16>().map_err(|_| format!("expected a port id 0..=65535 in {s:?}"))?;
        Ok((id, super::load::parse_ifname(ifname)?))
    }
    /// Parses a number of decimal digits (`-w`, `--mtu`, `--reassemble`,
    /// `--frag-ttl`; leading zeros allowed). ipsec-secgw's `parse_decimal`
    /// (`strtoull`) also takes a sign or leading blanks; refused here.
    /// Errors: the message.
    pub fn parse_decimal(s: &str) -> Result<u64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("expected a decimal number, found {s:?}"));
        }
        s.parse::<u64>().map_err(|_| format!("{s} is too large"))
    }
    /// The options given, as a DPDK command line gives them (`-p 0x3 -u 0x1
    /// --port 0=wan -w 64 …`), for the converted file's header.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if let Some(m) = self.port_mask {
            let _ = write!(out, " -p {m:#x}");
        }
        if let Some(m) = self.unprotected_mask {
            let _ = write!(out, " -u {m:#x}");
        }
        for (i, n) in &self.interfaces {
            let _ = write!(out, " --port {i}={n}");
        }
        for (i, m) in &self.eth_dest {
            let _ = write!(out, " --eth-dest {i},{}", mac_str(m));
        }
        if let Some(w) = self.replay_window {
            let _ = write!(out, " -w {w}");
        }
        if self.esn {
            out.push_str(" -e");
        }
        if self.librte_ipsec {
            out.push_str(" -l");
        }
        if let Some(m) = self.mtu {
            let _ = write!(out, " --mtu {m}");
        }
        if let Some(n) = self.reassemble {
            let _ = write!(out, " --reassemble {n}");
        }
        if let Some(t) = self.frag_ttl_ns {
            let _ = write!(out, " --frag-ttl {t}");
        }
        out.trim_start().to_owned()
    }
    /// The names of the options given (`["-w", "--mtu"]`), for the message
    /// that refuses them with a TOML config.
    pub fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut on = |yes: bool, name| {
            if yes {
                v.push(name);
            }
        };
        on(self.port_mask.is_some(), "-p");
        on(self.unprotected_mask.is_some(), "-u");
        on(!self.interfaces.is_empty(), "--port");
        on(!self.eth_dest.is_empty(), "--eth-dest");
        on(self.replay_window.is_some(), "-w");
        on(self.esn, "-e");
        on(self.librte_ipsec, "-l");
        on(self.mtu.is_some(), "--mtu");
        on(self.reassemble.is_some(), "--reassemble");
        on(self.frag_ttl_ns.is_some(), "--frag-ttl");
        v
    }
    /// Parses `ID,MAC` (`--eth-dest`, DPDK's syntax).
    pub fn parse_eth_dest(s: &str) -> Result<(u16, Mac), String> {
        let (id, mac) = s.split_once(',').ok_or_else(|| format!("expected ID,MAC like 0,02:00:00:00:00:01, found {s:?}"))?;
        let id = id.parse::<u16>().map_err(|_| format!("expected a port id 0..=65535 in {s:?}"))?;
        Ok((id, super::load::parse_mac(mac)?))
    }
}

/// Whether a notice is a refusal or a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// Something valid for DPDK that secgw does not do: left out.
    Refused,
    /// Imported, with a difference worth knowing.
    Warning,
}

/// One refusal or warning of an import, at a `.cfg` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The `.cfg` file.
    pub file: PathBuf,
    /// 1-based line (0 = about the options, not a line).
    pub line: usize,
    /// The keyword concerned (`type`, `cipher_algo`, `sp`, …).
    pub keyword: String,
    /// Refused or warning.
    pub kind: NoticeKind,
    /// What and why.
    pub message: String,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            NoticeKind::Refused => "refused",
            NoticeKind::Warning => "warning",
        };
        // About the command-line options, not a line: no line number.
        match self.line {
            0 => write!(f, "{}: {kind}: {}: {}", self.file.display(), self.keyword, self.message),
            n => write!(f, "{}:{n}: {kind}: {}: {}", self.file.display(), self.keyword, self.message),
        }
    }
}

/// The result of converting a `.cfg`: the TOML text and the notices.
pub struct Imported {
    /// A complete, commented TOML config (holds the keys).
    pub toml: Zeroizing<String>,
    /// Refusals and warnings, in file order.
    pub notices: Vec<Notice>,
    /// Per TOML line (0-based): the `.cfg` line and keyword it came from.
    origin: Vec<Option<(usize, String)>>,
}

/// The import's notices for `secgw check`: how the own addresses were
/// found, then the refusals and the warnings, one per line.
pub fn describe_notices(notices: &[Notice]) -> String {
    let refused: Vec<&Notice> = notices.iter().filter(|n| n.kind == NoticeKind::Refused).collect();
    let warned: Vec<&Notice> = notices.iter().filter(|n| n.kind == NoticeKind::Warning).collect();
    let mut out = String::new();
    let _ = writeln!(out, "DPDK ipsec-secgw import: the ports' own addresses are derived (every outbound tunnel SA's src and inbound tunnel SA's dst, on the port the route to the SA's peer leaves by)");
    let _ = writeln!(out, "refused by the import ({}):", refused.len());
    for n in refused {
        let _ = writeln!(out, "  {n}");
    }
    let _ = writeln!(out, "import warnings ({}):", warned.len());
    for n in warned {
        let _ = writeln!(out, "  {n}");
    }
    out
}

/// Whether `path` names a DPDK `.cfg` file (by its extension).
pub fn is_dpdk_cfg(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("cfg"))
}

/// Reads `path` and imports it ([`import`]); the config keeps `opts` in
/// [`Config::dpdk_import`] so a reload imports the file the same way.
pub fn load(path: &Path, opts: &ImportOptions) -> Result<(Config, Vec<Notice>), ConfigError> {
    let text = read(path)?;
    let (cfg, notices) = parse(&text, path, opts)?;
    Ok((Config { dpdk_import: Some(opts.clone()), ..cfg }, notices))
}

/// Reads `path` as the TOML loader does ([`super::load::read_text`]).
pub fn read(path: &Path) -> Result<Zeroizing<String>, ConfigError> {
    super::load::read_text(path)
}

/// Imports `.cfg` text: the validated [`Config`] and the notices.
pub fn parse(text: &str, source: &Path, opts: &ImportOptions) -> Result<(Config, Vec<Notice>), ConfigError> {
    import(text, source, opts).map(|(imp, cfg)| (cfg, imp.notices))
}

/// Imports `.cfg` text: [`convert`], then validates the TOML with
/// [`super::parse`] (the same checks as a TOML file; `Config::source` is
/// `source`), problems mapped back to the `.cfg` line and keyword.
/// Returns the TOML with its notices and the config it loads to.
pub fn import(text: &str, source: &Path, opts: &ImportOptions) -> Result<(Imported, Config), ConfigError> {
    let imp = match convert(text, source, opts) {
        Ok(imp) => imp,
        Err(e) => return Err(secgw_toml_given(text, source).unwrap_or(e)),
    };
    match super::parse(&imp.toml, source) {
        Ok(cfg) => Ok((imp, cfg)),
        Err(ConfigError::Syntax(p)) => Err(ConfigError::Syntax(imp.map_problem(p, source))),
        Err(ConfigError::Invalid(ps)) => Err(ConfigError::Invalid(ps.into_iter().map(|p| imp.map_problem(p, source)).collect())),
        Err(e) => Err(e),
    }
}

/// A file that is not a `.cfg` but secgw's own TOML (it decodes as TOML
/// with a `[gateway]`, `[[port]]` or `[[sa]]` table): one problem saying
/// so, instead of one "unknown line type" per line.
fn secgw_toml_given(text: &str, source: &Path) -> Option<ConfigError> {
    let t = toml::from_str::<toml::Table>(text).ok()?;
    if !["gateway", "port", "sa"].iter().any(|k| t.contains_key(*k)) {
        return None;
    }
    Some(ConfigError::Syntax(Problem {
        file: source.to_path_buf(),
        line: 0,
        column: 0,
        field: String::new(),
        message: if is_dpdk_cfg(source) {
            "this is secgw's own TOML config, not a DPDK ipsec-secgw .cfg (sp/sa/rt/neigh lines), but named .cfg, which secgw reads as DPDK's: rename it to .toml".to_owned()
        } else {
            format!(
                "this is secgw's own TOML config, not a DPDK ipsec-secgw .cfg (sp/sa/rt/neigh lines); `secgw check {}` validates it, `secgw run --config` runs it",
                source.display()
            )
        },
    }))
}

impl Imported {
    /// Where the fields of the converted TOML came from: the `.cfg` line
    /// (column 1); fields the import made itself (ports from the options)
    /// have no place.
    pub(super) fn positions(&self) -> super::Positions {
        super::Positions::of(&self.toml).map_lines(|l| self.origin.get(l.wrapping_sub(1)).and_then(Option::as_ref).map(|(line, _)| *line).filter(|&line| line > 0))
    }

    fn map_problem(&self, p: Problem, source: &Path) -> Problem {
        let message = self.map_lines(&p.message);
        match self.origin.get(p.line.wrapping_sub(1)).cloned().flatten() {
            // Line 0: a field the options gave (`--mtu`, `-w`, …).
            Some((line, kw)) => Problem { file: source.to_path_buf(), line, column: usize::from(line > 0), field: kw, message: format!("{message} ({})", p.field) },
            None => Problem { file: source.to_path_buf(), line: 0, column: 0, field: p.field, message },
        }
    }

    /// `message` with each "line N" (a line of the converted TOML, as the
    /// checks quote the other party of a duplicate or a clash) turned into
    /// the `.cfg` line it came from; a line the import made itself (ports
    /// from the options) has none and is said so.
    fn map_lines(&self, message: &str) -> String {
        let mut out = String::with_capacity(message.len());
        let mut rest = message;
        while let Some(at) = rest.find("line ") {
            let after = &rest[at + 5..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            out.push_str(&rest[..at]);
            match after[..digits].parse::<usize>().ok() {
                Some(n) => match self.origin.get(n.wrapping_sub(1)).cloned().flatten() {
                    Some((line, _)) if line > 0 => out.push_str(&format!("line {line}")),
                    _ => out.push_str("a line the import made (secgw import-dpdk shows it)"),
                },
                None => out.push_str("line "),
            }
            rest = &after[digits..];
        }
        out.push_str(rest);
        out
    }
}

// ---------------------------------------------------------------------------
// Lines and tokens

/// A token with its 1-based line and column.
#[derive(Debug, Clone, Copy)]
struct Tok<'a> {
    s: &'a str,
    line: usize,
    col: usize,
}

/// One logical line: physical lines joined at their `\`, comments
/// stripped, with the file position of every byte.
struct Logical {
    text: Zeroizing<String>,
    pos: Vec<(usize, usize)>,
}

impl Logical {
    /// Its whitespace-separated tokens.
    fn tokens(&self) -> Vec<Tok<'_>> {
        let s = self.text.as_str();
        let mut out = Vec::new();
        let mut rest = 0;
        while let Some(off) = s[rest..].find(|c: char| !c.is_ascii_whitespace()) {
            let start = rest + off;
            let len = s[start..].find(|c: char| c.is_ascii_whitespace()).unwrap_or(s.len() - start);
            let (line, col) = self.pos[start];
            out.push(Tok { s: &s[start..start + len], line, col });
            rest = start + len;
        }
        out
    }
}

/// Logical lines, as DPDK's `parse_cfg_file` forms them: a line starting
/// with `#` is skipped, `#` elsewhere ends the line, a `\` must be the
/// last character and joins the next line directly (no space inserted).
fn logical_lines(text: &str, file: &Path) -> Result<Vec<Logical>, ConfigError> {
    let mut out = Vec::new();
    let mut cur = Logical { text: Zeroizing::new(String::new()), pos: Vec::new() };
    let mut open: Option<usize> = None; // line of the last '\'
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        if raw.starts_with('#') {
            continue;
        }
        let body = raw.split('#').next().unwrap_or("");
        let body = body.strip_suffix('\r').unwrap_or(body);
        let (body, cont) = match body.find('\\') {
            Some(pos) if pos + 1 == body.len() => (&body[..pos], true),
            Some(pos) => {
                return Err(ConfigError::Syntax(Problem {
                    file: file.to_path_buf(),
                    line,
                    column: body[..pos].chars().count() + 1,
                    field: "\\".into(),
                    message: "nothing may follow a line continuation '\\' on its line".into(),
                }))
            }
            None => (body, false),
        };
        let mut col = 1;
        for c in body.chars() {
            cur.text.push(c);
            cur.pos.extend(std::iter::repeat_n((line, col), c.len_utf8()));
            col += 1;
        }
        if cont {
            open = Some(line);
            continue;
        }
        open = None;
        // DPDK appends the newline: a token never spans two logical lines.
        cur.text.push(' ');
        cur.pos.push((line, col));
        out.push(std::mem::replace(&mut cur, Logical { text: Zeroizing::new(String::new()), pos: Vec::new() }));
    }
    if let Some(line) = open {
        return Err(ConfigError::Syntax(Problem {
            file: file.to_path_buf(),
            line,
            column: 1,
            field: "\\".into(),
            message: "line continuation '\\' on the last line: nothing follows to continue with".into(),
        }));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Parsed lines

#[derive(Debug, Clone)]
struct Sp {
    line: usize,
    v6: bool,
    dir: Direction,
    /// `Some(spi)` = protect, `None` with `bypass` true / false = bypass / discard.
    protect: Option<(u32, usize)>,
    bypass: bool,
    pri: u32,
    src: (IpAddr, u8),
    dst: (IpAddr, u8),
    /// (value, mask) of `proto`.
    proto: Option<(u8, u8)>,
    sport: Option<(u16, u16)>,
    dport: Option<(u16, u16)>,
}

#[derive(Clone)]
enum SaMode {
    Tunnel4,
    Tunnel6,
    Transport,
}

#[derive(Clone)]
struct Sa {
    line: usize,
    dir: Direction,
    spi: u32,
    algorithm: Algorithm,
    key: Zeroizing<Vec<u8>>,
    auth_key: Zeroizing<Vec<u8>>,
    mode: SaMode,
    src: Option<(IpAddr, usize)>,
    dst: Option<(IpAddr, usize)>,
    esn: u64,
    udp_encap: bool,
    /// The keyword that gave `key`: `cipher_key`, `aead_key`, or
    /// `auth_key` for AES-GMAC (DPDK's `auth_algo aes-gmac`).
    key_word: &'static str,
    /// The refusal: (line, keyword, why).
    refused: Option<(usize, String, String)>,
}

#[derive(Debug, Clone)]
struct Rt {
    line: usize,
    prefix: (IpAddr, u8),
    port: u16,
}

/// What [`Parser`] collects from the file.
#[derive(Default)]
struct Parsed {
    sps: Vec<Sp>,
    sas: Vec<Sa>,
    rts: Vec<Rt>,
    /// port → (MAC, line).
    neigh: BTreeMap<u16, (Mac, usize)>,
}

struct Parser<'f> {
    file: &'f Path,
    problems: Vec<Problem>,
    notices: Vec<Notice>,
}

type Res<T> = Result<T, ()>;

impl Parser<'_> {
    fn err(&mut self, t: &Tok<'_>, kw: &str, msg: impl Into<String>) {
        self.problems.push(Problem { file: self.file.to_path_buf(), line: t.line, column: t.col, field: kw.into(), message: msg.into() });
    }

    fn note(&mut self, line: usize, kw: &str, kind: NoticeKind, msg: impl Into<String>) {
        self.notices.push(Notice { file: self.file.to_path_buf(), line, keyword: kw.into(), kind, message: msg.into() });
    }

    /// The token after `toks[*i]` (the value of keyword `kw`).
    fn value<'t>(&mut self, toks: &[Tok<'t>], i: &mut usize, kw: &str) -> Res<Tok<'t>> {
        *i += 1;
        match toks.get(*i) {
            Some(t) => Ok(*t),
            None => {
                let t = toks[*i - 1];
                self.err(&t, kw, format!("missing the value after \"{kw}\""));
                Err(())
            }
        }
    }

    fn once(&mut self, seen: &mut BTreeSet<&'static str>, t: &Tok<'_>, kw: &'static str) -> Res<()> {
        if seen.insert(kw) {
            Ok(())
        } else {
            self.err(t, kw, format!("\"{kw}\" given twice"));
            Err(())
        }
    }

    fn line(&mut self, toks: &[Tok<'_>], p: &mut Parsed) {
        let _ = match toks[0].s {
            "sp" => self.sp(toks).map(|sp| p.sps.extend(sp)),
            "sa" => self.sa(toks).map(|sa| p.sas.push(sa)),
            "rt" => self.rt(toks).map(|rt| p.rts.push(rt)),
            "neigh" => self.neigh(toks).map(|(port, mac)| {
                if let Some((_, first)) = p.neigh.insert(port, (mac, toks[0].line)) {
                    self.note(toks[0].line, "neigh", NoticeKind::Warning, format!("port {port} already has a neigh line (line {first}); this one replaces it"));
                }
            }),
            "flow" => {
                self.note(toks[0].line, "flow", NoticeKind::Refused, "rte_flow rules (NIC steering) are not supported: the line is left out");
                Ok(())
            }
            other => {
                self.err(&toks[0], other, format!("unknown line type {other:?}: expected sp, sa, rt, neigh or flow"));
                Err(())
            }
        };
    }

    /// One `sp` line; `None` when it is left out (a [`NoticeKind::Refused`]
    /// notice says why).
    fn sp(&mut self, toks: &[Tok<'_>]) -> Res<Option<Sp>> {
        let t0 = toks[0];
        let fam = toks.get(1).copied();
        let v6 = match fam.map(|t| t.s) {
            Some("ipv4") => false,
            Some("ipv6") => true,
            _ => {
                self.err(&fam.unwrap_or(t0), "sp", "expected \"ipv4\" or \"ipv6\" after \"sp\"");
                return Err(());
            }
        };
        let dir = self.direction(toks.get(2).copied(), t0, "sp")?;
        let any = if v6 { "::".parse().expect("literal") } else { "0.0.0.0".parse().expect("literal") };
        let mut sp = Sp { line: t0.line, v6, dir, protect: None, bypass: false, pri: 0, src: (any, 0), dst: (any, 0), proto: None, sport: None, dport: None };
        let mut seen = BTreeSet::new();
        let mut action = false;
        let mut i = 3;
        while i < toks.len() {
            let t = toks[i];
            match t.s {
                "esp" => self.once(&mut seen, &t, "esp")?,
                "protect" | "bypass" | "discard" => {
                    if action {
                        self.err(&t, t.s, "only one of \"protect\", \"bypass\" and \"discard\" may be given");
                        return Err(());
                    }
                    action = true;
                    match t.s {
                        "protect" => {
                            let v = self.value(toks, &mut i, "protect")?;
                            sp.protect = Some((self.spi(&v, "protect")?, v.line));
                        }
                        "bypass" => sp.bypass = true,
                        _ => {}
                    }
                }
                "pri" => {
                    self.once(&mut seen, &t, "pri")?;
                    let v = self.value(toks, &mut i, "pri")?;
                    sp.pri = match v.s.parse::<u32>() {
                        Ok(n) if n <= ACL_MAX_PRIORITY && is_num(v.s) => n,
                        _ => {
                            self.err(&v, "pri", format!("expected a priority 0..={ACL_MAX_PRIORITY} (rte_acl), found {:?}", v.s));
                            return Err(());
                        }
                    };
                }
                "src" | "dst" => {
                    let kw = if t.s == "src" { "src" } else { "dst" };
                    self.once(&mut seen, &t, kw)?;
                    let v = self.value(toks, &mut i, kw)?;
                    let p = self.prefix(&v, kw, v6, true)?;
                    if kw == "src" {
                        sp.src = p;
                    } else {
                        sp.dst = p;
                    }
                }
                "proto" => {
                    self.once(&mut seen, &t, "proto")?;
                    let v = self.value(toks, &mut i, "proto")?;
                    let (val, mask) = self.range(&v, "proto")?;
                    if val > 255 || mask > 255 {
                        self.err(&v, "proto", format!("expected VALUE:MASK with both 0..=255, found {:?}", v.s));
                        return Err(());
                    }
                    if mask != 0 && mask != 255 {
                        self.err(&v, "proto", format!("a partial protocol mask is not supported: expected mask 0 (any) or 255 (exactly the value), found {:?}", v.s));
                        return Err(());
                    }
                    sp.proto = Some((val as u8, mask as u8));
                }
                "sport" | "dport" => {
                    let kw = if t.s == "sport" { "sport" } else { "dport" };
                    self.once(&mut seen, &t, kw)?;
                    let v = self.value(toks, &mut i, kw)?;
                    let r = self.range(&v, kw)?;
                    if r.0 > r.1 {
                        self.err(&v, kw, format!("expected LOW:HIGH with LOW <= HIGH, found {:?}", v.s));
                        return Err(());
                    }
                    if kw == "sport" {
                        sp.sport = Some(r);
                    } else {
                        sp.dport = Some(r);
                    }
                }
                other => {
                    self.err(&t, other, format!("unknown sp keyword {other:?} (expected esp, protect, bypass, discard, pri, src, dst, proto, sport, dport)"));
                    return Err(());
                }
            }
            i += 1;
        }
        if !seen.contains("esp") {
            self.err(&t0, "esp", "missing \"esp\" (DPDK requires it)");
            return Err(());
        }
        if !action {
            self.err(&t0, "sp", "missing the action: \"protect SPI\", \"bypass\" or \"discard\"");
            return Err(());
        }
        // DPDK's ACL rule starts zeroed (sp4.c and sp6.c calloc the table):
        // an absent sport or dport is the range 0:0, which matches only a
        // packet whose port bytes are 0 (the two bytes at that offset after
        // the IP header, whatever the protocol).
        let absent: Vec<&str> = [("sport", sp.sport), ("dport", sp.dport)].iter().filter(|(_, r)| r.is_none()).map(|(k, _)| *k).collect();
        if !absent.is_empty() {
            let which = absent.join(" and ");
            if matches!(sp.proto, Some((6 | 17, 255))) {
                sp.sport = sp.sport.or(Some((0, 0)));
                sp.dport = sp.dport.or(Some((0, 0)));
                self.note(t0.line, absent[0], NoticeKind::Warning, format!("no {which}: DPDK's range is then 0:0 (its ACL rule starts zeroed), so only port 0 matches, and so it is imported; give 0:65535 for any port, as DPDK's samples do"));
            } else {
                self.note(t0.line, absent[0], NoticeKind::Refused, format!("no {which}: DPDK's range is then 0:0 (its ACL rule starts zeroed), so the rule matches only packets whose port bytes after the IP header are 0, whatever their protocol; secgw selects ports only with proto 6:255 or 17:255, so the line is left out (give sport 0:65535 dport 0:65535 for any port, as DPDK's samples do)"));
                return Ok(None);
            }
        }
        Ok(Some(sp))
    }

    fn direction(&mut self, t: Option<Tok<'_>>, t0: Tok<'_>, kw: &str) -> Res<Direction> {
        match t.map(|t| t.s) {
            Some("in") => Ok(Direction::Inbound),
            Some("out") => Ok(Direction::Outbound),
            _ => {
                self.err(&t.unwrap_or(t0), kw, format!("expected \"in\" or \"out\" after \"{kw}{}\"", if kw == "sp" { " ipv4|ipv6" } else { "" }));
                Err(())
            }
        }
    }

    /// A DPDK port id, 0..=65535.
    fn port_id(&mut self, v: &Tok<'_>, kw: &str) -> Res<u16> {
        match v.s.parse::<u16>() {
            Ok(p) if is_num(v.s) => Ok(p),
            _ => {
                self.err(v, kw, format!("expected a port id 0..=65535, found {:?}", v.s));
                Err(())
            }
        }
    }

    fn spi(&mut self, v: &Tok<'_>, kw: &str) -> Res<u32> {
        match v.s.parse::<u32>() {
            // DPDK's sp refuses its BYPASS value (ipsec.h: UINT32_MAX).
            Ok(u32::MAX) if kw == "protect" && is_num(v.s) => {
                self.err(v, kw, "SPI 4294967295 is DPDK's BYPASS value (ipsec.h), which its sp lines refuse".to_owned());
                Err(())
            }
            Ok(n) if n != 0 && is_num(v.s) => Ok(n),
            _ => {
                self.err(v, kw, format!("expected an SPI 1..=4294967295 (decimal), found {:?}", v.s));
                Err(())
            }
        }
    }

    /// "LOW:HIGH", decimal.
    fn range(&mut self, v: &Tok<'_>, kw: &str) -> Res<(u16, u16)> {
        let r = v.s.split_once(':').and_then(|(a, b)| {
            let a = if is_num(a) { a.parse::<u16>().ok() } else { None };
            let b = if is_num(b) { b.parse::<u16>().ok() } else { None };
            Some((a?, b?))
        });
        match r {
            Some(r) => Ok(r),
            None => {
                self.err(v, kw, format!("expected LOW:HIGH (decimal, 0..=65535), found {:?}", v.s));
                Err(())
            }
        }
    }

    /// "A/L" or "A" (= /0, as DPDK reads it; only with `len_optional`).
    fn prefix(&mut self, v: &Tok<'_>, kw: &str, v6: bool, len_optional: bool) -> Res<(IpAddr, u8)> {
        let fam = if v6 { "IPv6" } else { "IPv4" };
        let (a, l) = match v.s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (v.s, None),
        };
        let ip: IpAddr = match a.parse() {
            Ok(ip @ IpAddr::V4(_)) if !v6 => ip,
            Ok(ip @ IpAddr::V6(_)) if v6 => ip,
            _ => {
                self.err(v, kw, format!("expected an {fam} address, found {:?}", v.s));
                return Err(());
            }
        };
        let width = if v6 { 128 } else { 32 };
        let len = match l {
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= width && is_num(l) => n,
                _ => {
                    self.err(v, kw, format!("expected a prefix length 0..={width}, found {:?}", v.s));
                    return Err(());
                }
            },
            None if len_optional => {
                self.note(v.line, kw, NoticeKind::Warning, format!("{} has no /length: DPDK reads it as /0 (any address), and so does the import", v.s));
                0
            }
            None => {
                self.err(v, kw, format!("expected A/LEN, found {:?}", v.s));
                return Err(());
            }
        };
        let net = crate::policy::spd::Prefix::new(ip, len).addr();
        if net != ip {
            self.note(v.line, kw, NoticeKind::Warning, format!("{} has host bits set; as rte_acl/rte_lpm do, they are ignored: {net}/{len}", v.s));
        }
        Ok((net, len))
    }
}

fn is_num(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// DPDK's cipher, auth and AEAD keywords with their key length in bytes
/// (sa.c's tables; CTR, GCM, CCM, ChaCha20 and GMAC keys include the
/// 4-byte nonce or salt).
const CIPHERS: &[(&str, usize)] = &[
    ("null", 0),
    ("aes-128-cbc", 16),
    ("aes-192-cbc", 24),
    ("aes-256-cbc", 32),
    ("aes-128-ctr", 20),
    ("aes-192-ctr", 28),
    ("aes-256-ctr", 36),
    ("3des-cbc", 24),
    ("des-cbc", 8),
];
const AUTHS: &[(&str, usize)] = &[
    ("null", 0),
    ("sha1-hmac", 20),
    ("sha256-hmac", 32),
    ("sha384-hmac", 48),
    ("sha512-hmac", 64),
    ("aes-gmac", 20),
    ("aes-xcbc-mac-96", 16),
];
const AEADS: &[(&str, usize)] = &[
    ("aes-128-gcm", 20),
    ("aes-192-gcm", 28),
    ("aes-256-gcm", 36),
    ("aes-128-ccm", 20),
    ("aes-192-ccm", 28),
    ("aes-256-ccm", 36),
    ("chacha20-poly1305", 36),
];

/// secgw's algorithm for a DPDK cipher + auth pair; `Err` says why not.
fn cipher_auth(cipher: &str, auth: &str) -> Result<Algorithm, String> {
    use Algorithm::*;
    Ok(match (cipher, auth) {
        ("null", "null") => {
            return Err("ESP with neither confidentiality nor integrity (cipher_algo null with auth_algo null) is forbidden by RFC 4303 §3.2: \"at least one of these services MUST be selected, hence both algorithms MUST NOT be simultaneously NULL\"".into())
        }
        ("null", "sha1-hmac") => NullHmacSha1,
        ("null", "sha256-hmac") => NullHmacSha256,
        ("null", "aes-gmac") => Aes128Gmac,
        ("aes-128-cbc", "sha1-hmac") => Aes128CbcHmacSha1,
        ("aes-192-cbc", "sha1-hmac") => Aes192CbcHmacSha1,
        ("aes-256-cbc", "sha1-hmac") => Aes256CbcHmacSha1,
        ("aes-128-cbc", "sha256-hmac") => Aes128CbcHmacSha256,
        ("aes-192-cbc", "sha256-hmac") => Aes192CbcHmacSha256,
        ("aes-256-cbc", "sha256-hmac") => Aes256CbcHmacSha256,
        ("aes-128-ctr", "sha1-hmac") => Aes128CtrHmacSha1,
        ("aes-192-ctr", "sha1-hmac") => Aes192CtrHmacSha1,
        ("aes-256-ctr", "sha1-hmac") => Aes256CtrHmacSha1,
        ("aes-128-ctr", "sha256-hmac") => Aes128CtrHmacSha256,
        ("aes-192-ctr", "sha256-hmac") => Aes192CtrHmacSha256,
        ("aes-256-ctr", "sha256-hmac") => Aes256CtrHmacSha256,
        ("null", "sha384-hmac") => NullHmacSha384,
        ("null", "sha512-hmac") => NullHmacSha512,
        ("aes-128-cbc", "sha384-hmac") => Aes128CbcHmacSha384,
        ("aes-192-cbc", "sha384-hmac") => Aes192CbcHmacSha384,
        ("aes-256-cbc", "sha384-hmac") => Aes256CbcHmacSha384,
        ("aes-128-cbc", "sha512-hmac") => Aes128CbcHmacSha512,
        ("aes-192-cbc", "sha512-hmac") => Aes192CbcHmacSha512,
        ("aes-256-cbc", "sha512-hmac") => Aes256CbcHmacSha512,
        ("aes-128-ctr", "sha384-hmac") => Aes128CtrHmacSha384,
        ("aes-192-ctr", "sha384-hmac") => Aes192CtrHmacSha384,
        ("aes-256-ctr", "sha384-hmac") => Aes256CtrHmacSha384,
        ("aes-128-ctr", "sha512-hmac") => Aes128CtrHmacSha512,
        ("aes-192-ctr", "sha512-hmac") => Aes192CtrHmacSha512,
        ("aes-256-ctr", "sha512-hmac") => Aes256CtrHmacSha512,
        (c, "null") => return Err(format!("{c} without integrity (auth_algo null) is not offered by secgw")),
        (c, a) => return Err(format!("cipher_algo {c} with auth_algo {a} is not among secgw's algorithms")),
    })
}

fn aead(name: &str) -> Result<Algorithm, String> {
    match name {
        "aes-128-gcm" => Ok(Algorithm::Aes128Gcm),
        "aes-192-gcm" => Ok(Algorithm::Aes192Gcm),
        "aes-256-gcm" => Ok(Algorithm::Aes256Gcm),
        "aes-128-ccm" => Ok(Algorithm::Aes128Ccm),
        "aes-192-ccm" => Ok(Algorithm::Aes192Ccm),
        "aes-256-ccm" => Ok(Algorithm::Aes256Ccm),
        "chacha20-poly1305" => Ok(Algorithm::ChaCha20Poly1305),
        other => Err(format!("aead_algo {other} is not among secgw's algorithms")),
    }
}

/// Security session types that secgw runs (in software).
fn software_type(t: &str) -> bool {
    matches!(t, "no-offload" | "cpu-crypto")
}

impl Parser<'_> {
    /// "a0:b1:…" (1 or 2 hex digits per byte, as DPDK's parse_key_string),
    /// exactly `want` bytes.
    fn key(&mut self, v: &Tok<'_>, kw: &str, algo: &str, want: usize) -> Res<Zeroizing<Vec<u8>>> {
        let mut out = Zeroizing::new(Vec::with_capacity(want));
        for part in v.s.split(':') {
            match u8::from_str_radix(part, 16) {
                Ok(b) if !part.is_empty() && part.len() <= 2 && !part.starts_with('+') => out.push(b),
                _ => {
                    self.err(v, kw, "expected bytes in hex separated by ':' like a0:b1:c2");
                    return Err(());
                }
            }
        }
        if out.len() != want {
            self.err(v, kw, format!("expected {want} bytes for {algo} (DPDK sa.c key length), found {}", out.len()));
            return Err(());
        }
        Ok(out)
    }

    /// `NAME [KEYWORD KEY]` of cipher_algo / auth_algo / aead_algo.
    fn algo<'t>(&mut self, toks: &[Tok<'t>], i: &mut usize, kw: &str, key_kw: &str, table: &[(&str, usize)]) -> Res<(Tok<'t>, Zeroizing<Vec<u8>>)> {
        let v = self.value(toks, i, kw)?;
        let Some(&(_, len)) = table.iter().find(|(n, _)| *n == v.s) else {
            let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
            self.err(&v, kw, format!("unknown {kw} {:?}: DPDK knows {}", v.s, names.join(", ")));
            return Err(());
        };
        if len == 0 {
            return Ok((v, Zeroizing::new(Vec::new())));
        }
        let k = self.value(toks, i, kw)?;
        if k.s != key_kw {
            self.err(&k, kw, format!("expected \"{key_kw}\" after \"{kw} {}\", found {:?}", v.s, k.s));
            return Err(());
        }
        let kv = self.value(toks, i, key_kw)?;
        let key = self.key(&kv, key_kw, v.s, len)?;
        Ok((v, key))
    }

    fn sa(&mut self, toks: &[Tok<'_>]) -> Res<Sa> {
        let t0 = toks[0];
        let dir = self.direction(toks.get(1).copied(), t0, "sa")?;
        let Some(spi_tok) = toks.get(2).copied() else {
            self.err(&t0, "sa", "missing the SPI after \"sa in|out\"");
            return Err(());
        };
        let spi = self.spi(&spi_tok, "sa")?;
        let mut seen = BTreeSet::new();
        let (mut cipher, mut auth, mut aead_algo) = (None, None, None);
        let (mut mode, mut src, mut dst) = (None, None, None);
        let (mut typ, mut port_id): (Option<Tok<'_>>, Option<Tok<'_>>) = (None, None);
        let mut esn = 0u64;
        let mut udp_encap = false;
        let mut refusals: Vec<(usize, String, String)> = Vec::new();
        let mut ignored: Vec<(usize, &str, String)> = Vec::new();
        let mut i = 3;
        while i < toks.len() {
            let t = toks[i];
            match t.s {
                "cipher_algo" => {
                    self.once(&mut seen, &t, "cipher_algo")?;
                    cipher = Some(self.algo(toks, &mut i, "cipher_algo", "cipher_key", CIPHERS)?);
                }
                "auth_algo" => {
                    self.once(&mut seen, &t, "auth_algo")?;
                    auth = Some(self.algo(toks, &mut i, "auth_algo", "auth_key", AUTHS)?);
                }
                "aead_algo" => {
                    self.once(&mut seen, &t, "aead_algo")?;
                    aead_algo = Some(self.algo(toks, &mut i, "aead_algo", "aead_key", AEADS)?);
                }
                "mode" => {
                    self.once(&mut seen, &t, "mode")?;
                    let v = self.value(toks, &mut i, "mode")?;
                    mode = Some(match v.s {
                        "ipv4-tunnel" => SaMode::Tunnel4,
                        "ipv6-tunnel" => SaMode::Tunnel6,
                        "transport" => SaMode::Transport,
                        other => {
                            self.err(&v, "mode", format!("expected ipv4-tunnel, ipv6-tunnel or transport, found {other:?}"));
                            return Err(());
                        }
                    });
                }
                "src" | "dst" => {
                    let kw = if t.s == "src" { "src" } else { "dst" };
                    self.once(&mut seen, &t, kw)?;
                    let v = self.value(toks, &mut i, kw)?;
                    let ip = match v.s.parse::<IpAddr>() {
                        Ok(ip) => ip,
                        Err(_) => {
                            self.err(&v, kw, format!("expected an IPv4 or IPv6 address, found {:?}", v.s));
                            return Err(());
                        }
                    };
                    if mode.is_none() {
                        // sa.c parses the address by the mode read so far:
                        // before `mode`, by none, and drops it.
                        self.note(t.line, kw, NoticeKind::Warning, format!("{kw} before mode: DPDK's sa.c ignores an address given before the mode (its SA's tunnel {kw} stays 0.0.0.0, or :: ); imported as given: put mode first"));
                    }
                    if kw == "src" {
                        src = Some((ip, v.line));
                    } else {
                        dst = Some((ip, v.line));
                    }
                }
                "type" => {
                    self.once(&mut seen, &t, "type")?;
                    let v = self.value(toks, &mut i, "type")?;
                    if !matches!(v.s, "inline-crypto-offload" | "inline-protocol-offload" | "lookaside-protocol-offload" | "no-offload" | "cpu-crypto") {
                        self.err(&v, "type", format!("unknown type {:?}: expected inline-crypto-offload, inline-protocol-offload, lookaside-protocol-offload, no-offload or cpu-crypto", v.s));
                        return Err(());
                    }
                    typ = Some(v);
                }
                "port_id" => {
                    self.once(&mut seen, &t, "port_id")?;
                    let v = self.value(toks, &mut i, "port_id")?;
                    self.port_id(&v, "port_id")?;
                    port_id = Some(v);
                }
                "fallback" => {
                    self.once(&mut seen, &t, "fallback")?;
                    let v = self.value(toks, &mut i, "fallback")?;
                    refusals.push((t.line, "fallback".into(), format!("fallback {} sessions belong to inline-crypto-offload SAs, which secgw does not do", v.s)));
                }
                "flow-direction" => {
                    let p = self.value(toks, &mut i, "flow-direction")?;
                    let q = self.value(toks, &mut i, "flow-direction")?;
                    if !is_num(p.s) || !is_num(q.s) {
                        self.err(&p, "flow-direction", format!("expected PORT QUEUE, found {:?} {:?}", p.s, q.s));
                        return Err(());
                    }
                    ignored.push((t.line, "flow-direction", format!("flow-direction {} {} steers the SA's packets to one NIC queue with rte_flow; secgw's workers share the port queues and hand packets to the SA's owner, so it has no effect", p.s, q.s)));
                }
                "mss" => {
                    let v = self.value(toks, &mut i, "mss")?;
                    if !is_num(v.s) {
                        self.err(&v, "mss", format!("expected a number, found {:?}", v.s));
                        return Err(());
                    }
                    ignored.push((t.line, "mss", format!("mss {} is for TSO with inline protocol offload; ignored", v.s)));
                }
                "reassembly_en" => refusals.push((t.line, "reassembly_en".into(), "inline reassembly offload is not supported (secgw reassembles outer fragments in software, see [reassembly])".into())),
                "telemetry" => ignored.push((t.line, "telemetry", "per-SA counters are always on in secgw (`secgw ctl stats`)".into())),
                "esn" => {
                    let v = self.value(toks, &mut i, "esn")?;
                    esn = match v.s.parse::<u64>() {
                        Ok(n) if is_num(v.s) => n,
                        _ => {
                            self.err(&v, "esn", format!("expected the initial ESN value (a number), found {:?}", v.s));
                            return Err(());
                        }
                    };
                }
                "udp-encap" => {
                    self.once(&mut seen, &t, "udp-encap")?;
                    udp_encap = true;
                }
                // A key keyword on its own: DPDK takes it only right after
                // its algorithm's name.
                k @ ("cipher_key" | "auth_key" | "aead_key") => {
                    let algo = k.replace("_key", "_algo");
                    self.err(&t, k, format!("{k} must follow \"{algo} NAME\" (as in \"{algo} NAME {k} KEY\")"));
                    return Err(());
                }
                other => {
                    self.err(&t, other, format!("unknown sa keyword {other:?}"));
                    return Err(());
                }
            }
            i += 1;
        }
        // What DPDK itself refuses.
        if aead_algo.is_some() && (cipher.is_some() || auth.is_some()) {
            self.err(&t0, "aead_algo", "aead_algo excludes cipher_algo and auth_algo");
            return Err(());
        }
        if aead_algo.is_none() && (cipher.is_none() || auth.is_none()) {
            let kw = if cipher.is_none() { "cipher_algo" } else { "auth_algo" };
            self.err(&t0, kw, format!("missing {kw} (or aead_algo)"));
            return Err(());
        }
        let Some(mode) = mode else {
            self.err(&t0, "mode", "missing \"mode ipv4-tunnel|ipv6-tunnel|transport\"");
            return Err(());
        };
        for (kw, a) in [("src", src), ("dst", dst)] {
            if let Some((ip, line)) = a {
                let ok = match mode {
                    SaMode::Tunnel4 => ip.is_ipv4(),
                    SaMode::Tunnel6 => ip.is_ipv6(),
                    SaMode::Transport => false,
                };
                if !ok {
                    let m = match mode {
                        SaMode::Transport => format!("a transport SA takes no {kw} address"),
                        _ => format!("{ip} is not of the tunnel's family"),
                    };
                    self.problems.push(Problem { file: self.file.to_path_buf(), line, column: 1, field: kw.into(), message: m });
                    return Err(());
                }
            }
        }
        // The keyword that gave `key` is the one its errors are placed on.
        let (algorithm, key, auth_key, key_word) = match (&cipher, &auth, &aead_algo) {
            (_, _, Some((a, k))) => match aead(a.s) {
                // DPDK's CCM key is AES key ‖ 4 bytes of which its nonce
                // takes the first 3 (lib/ipsec `aead_ccm_iv_fill`); secgw's
                // is AES key ‖ 3-byte salt (RFC 4309 §7.1).
                Ok(alg) if alg.cipher() == crate::crypto::Cipher::AesCcm => {
                    (Some(alg), Zeroizing::new(k[..k.len().saturating_sub(1)].to_vec()), Zeroizing::new(Vec::new()), "aead_key")
                }
                Ok(alg) => (Some(alg), k.clone(), Zeroizing::new(Vec::new()), "aead_key"),
                Err(why) => {
                    refusals.push((a.line, "aead_algo".into(), why));
                    (None, Zeroizing::new(Vec::new()), Zeroizing::new(Vec::new()), "aead_key")
                }
            },
            (Some((c, ck)), Some((a, ak)), None) => match cipher_auth(c.s, a.s) {
                // GMAC's key ‖ salt is secgw's `key`.
                Ok(Algorithm::Aes128Gmac) => (Some(Algorithm::Aes128Gmac), ak.clone(), Zeroizing::new(Vec::new()), "auth_key"),
                Ok(alg) => (Some(alg), ck.clone(), ak.clone(), "cipher_key"),
                Err(why) => {
                    refusals.push((c.line, "cipher_algo".into(), why));
                    (None, Zeroizing::new(Vec::new()), Zeroizing::new(Vec::new()), "cipher_key")
                }
            },
            _ => unreachable!("checked above"),
        };
        match (typ, port_id) {
            (Some(t), Some(p)) if !software_type(t.s) => {
                refusals.push((t.line, "type".into(), format!("type {} on port_id {}: security sessions of a NIC (inline or lookaside-protocol offload) are not supported; secgw does ESP in software or on its crypto device", t.s, p.s)));
            }
            (Some(t), None) if !software_type(t.s) => {
                ignored.push((t.line, "type", format!("type {} without port_id: DPDK falls back to no-offload, and so does the import", t.s)));
            }
            (_, Some(p)) => ignored.push((p.line, "port_id", format!("port_id {} binds a security session to a NIC; without an offload type it has no effect", p.s))),
            _ => {}
        }
        if udp_encap {
            ignored.push((t0.line, "udp-encap", "ESP in UDP (RFC 3948) with source and destination port 4500, in software (DPDK allows udp-encap only with offload types)".into()));
        }
        let refused = refusals.first().cloned();
        for (line, kw, why) in refusals {
            self.note(line, &kw, NoticeKind::Refused, format!("sa {} {spi} refused: {why}", dir_word(dir)));
        }
        if refused.is_none() {
            for (line, kw, m) in ignored {
                self.note(line, kw, NoticeKind::Warning, m);
            }
        }
        Ok(Sa {
            line: t0.line,
            dir,
            spi,
            algorithm: algorithm.unwrap_or(Algorithm::Aes128Gcm),
            key,
            auth_key,
            mode,
            src,
            dst,
            esn,
            udp_encap,
            key_word,
            refused,
        })
    }

    fn rt(&mut self, toks: &[Tok<'_>]) -> Res<Rt> {
        let t0 = toks[0];
        let v6 = match toks.get(1).map(|t| t.s) {
            Some("ipv4") => false,
            Some("ipv6") => true,
            _ => {
                self.err(toks.get(1).unwrap_or(&t0), "rt", "expected \"ipv4\" or \"ipv6\" after \"rt\"");
                return Err(());
            }
        };
        let (mut prefix, mut port) = (None, None);
        let mut i = 2;
        while i < toks.len() {
            let t = toks[i];
            match t.s {
                "dst" => {
                    let v = self.value(toks, &mut i, "dst")?;
                    let p = self.prefix(&v, "dst", v6, true)?;
                    if p.1 == 0 {
                        // rte_lpm_add / rte_lpm6_add take depths from 1:
                        // ipsec-secgw exits on such a route.
                        self.err(&v, "dst", format!("route prefix length 0 ({:?}): DPDK's rte_lpm refuses it and ipsec-secgw exits; give a length of 1 or more", v.s));
                        return Err(());
                    }
                    prefix = Some(p);
                }
                "port" => {
                    let v = self.value(toks, &mut i, "port")?;
                    port = Some(self.port_id(&v, "port")?);
                }
                // In the guide's rt syntax, but rt.c reads only dst and port.
                "src" => {
                    let v = self.value(toks, &mut i, "src")?;
                    self.prefix(&v, "src", v6, true)?;
                    self.note(t.line, "src", NoticeKind::Warning, "ignored, as DPDK's rt.c ignores it (routes are by destination only)");
                }
                other => {
                    self.err(&t, other, format!("unknown rt keyword {other:?} (expected dst, port, src)"));
                    return Err(());
                }
            }
            i += 1;
        }
        match (prefix, port) {
            (Some(prefix), Some(port)) => Ok(Rt { line: t0.line, prefix, port }),
            (None, _) => {
                self.err(&t0, "dst", "missing \"dst A/L\"");
                Err(())
            }
            (Some(prefix), None) => {
                // rt.c's route table starts zeroed: no port is port 0.
                self.note(t0.line, "port", NoticeKind::Warning, "no \"port N\": port 0, as DPDK's rt.c takes it");
                Ok(Rt { line: t0.line, prefix, port: 0 })
            }
        }
    }

    fn neigh(&mut self, toks: &[Tok<'_>]) -> Res<(u16, Mac)> {
        let t0 = toks[0];
        match toks {
            [_, p, id, mac] if p.s == "port" => {
                let id = self.port_id(id, "port")?;
                match super::load::parse_mac(mac.s) {
                    Ok(m) => Ok((id, m)),
                    Err(e) => {
                        self.err(mac, "neigh", e);
                        Err(())
                    }
                }
            }
            _ => {
                self.err(&t0, "neigh", "expected \"neigh port N MAC\"");
                Err(())
            }
        }
    }
}

fn dir_word(d: Direction) -> &'static str {
    match d {
        Direction::Inbound => "in",
        Direction::Outbound => "out",
    }
}

// ---------------------------------------------------------------------------
// Conversion

/// TOML text with the `.cfg` origin of each line.
struct Out {
    text: Zeroizing<String>,
    origin: Vec<Option<(usize, String)>>,
}

impl Out {
    fn line(&mut self, s: &str, origin: Option<(usize, &str)>) {
        self.text.push_str(s);
        self.text.push('\n');
        self.origin.push(origin.map(|(l, k)| (l, k.to_owned())));
    }
    fn comment(&mut self, s: &str) {
        for l in s.lines() {
            self.line(format!("# {l}").trim_end(), None);
        }
    }
}

/// `line` with `# comment` at column 27, as the converted file's other comments.
fn commented(line: &str, comment: &str) -> String {
    format!("{line:<25} # {comment}")
}

/// A TOML basic string.
fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn hex(bytes: &[u8]) -> Zeroizing<String> {
    let mut s = Zeroizing::new(String::with_capacity(bytes.len() * 2));
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn mac_str(m: &Mac) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// The values of the options secgw cannot take, one problem each, named
/// by the option (before any TOML is written, so each is said once, not
/// once per SA or port, and all of them at once).
fn check_option_values(p: &mut Parser<'_>, opts: &ImportOptions) -> Result<(), ConfigError> {
    let mut bad = |kw: &str, message: String| p.problems.push(Problem { file: p.file.to_path_buf(), line: 0, column: 0, field: kw.into(), message });
    if let Some(w) = opts.replay_window.filter(|&w| w > u64::from(MAX_REPLAY_WINDOW)) {
        bad("-w", format!("expected an anti-replay window of 0..={MAX_REPLAY_WINDOW} packets, found {w}"));
    }
    match opts.mtu {
        Some(m) if m > u64::from(MAX_PORT_MTU) => bad(
            "--mtu",
            format!("expected {MIN_PORT_MTU}..={MAX_PORT_MTU}, found {m}: packet buffers hold 2048-byte frames; jumbo frames are not supported"),
        ),
        Some(m) if m < u64::from(MIN_PORT_MTU) => bad("--mtu", format!("expected {MIN_PORT_MTU}..={MAX_PORT_MTU}, found {m}")),
        _ => {}
    }
    if let Some(n) = opts.reassemble.filter(|&n| n > MAX_REASSEMBLY_CONTEXTS as u64) {
        bad("--reassemble", format!("expected 0..={MAX_REASSEMBLY_CONTEXTS} (reassembly contexts per worker), found {n}"));
    }
    if let Some(ns) = opts.frag_ttl_ns.filter(|&ns| ns > MAX_FRAG_TTL_NS) {
        bad("--frag-ttl", format!("expected at most {MAX_FRAG_TTL_NS} ns (DPDK's maximum, 10 s), found {ns}"));
    }
    if p.problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid(std::mem::take(&mut p.problems)))
    }
}

/// The `[reassembly]` table of `--reassemble` (and `--frag-ttl`), if
/// given. DPDK reassembles every IPv4 and IPv6 fragment it receives
/// (`rx_callback` with `rte_ipv4_frag_reassemble_packet` /
/// `rte_ipv6_frag_reassemble_packet`) in a table of N entries per lcore,
/// whose entries live `--frag-ttl` (default and most 10 s); secgw's
/// nearest is N contexts per worker with `forwarded = true` (fragments to
/// the gateway, and forwarded IPv4 TCP/UDP fragments under port selectors;
/// other forwarded fragments go on as they come, which a warning says)
/// and `timeout_ms` from `--frag-ttl` or DPDK's 10 s. A `--frag-ttl`
/// under secgw's 10 ms is raised to it, with a warning; without
/// `--reassemble N`, N > 0, DPDK creates no fragment table and ignores it,
/// and so does the import, with a warning.
fn reassembly_table(out: &mut Out, p: &mut Parser<'_>, opts: &ImportOptions) {
    let n = match (opts.reassemble, opts.frag_ttl_ns) {
        (None, None) => return,
        (Some(0) | None, Some(ns)) => {
            p.note(0, "--frag-ttl", NoticeKind::Warning, format!(
                "{ns} ns ignored, as DPDK ignores it without --reassemble N > 0 (no fragment table); secgw's reassembly of fragments to the gateway keeps its timeout_ms"
            ));
            if opts.reassemble.is_none() {
                return;
            }
            0
        }
        (Some(n), _) => n,
    };
    out.line("", None);
    out.line("[reassembly]", None);
    out.line(&commented(&format!("contexts = {n}"), "--reassemble: per worker (DPDK: per lcore)"), Some((0, "--reassemble")));
    if n == 0 {
        return;
    }
    out.line(&commented("forwarded = true", "--reassemble: also forwarded IPv4 TCP/UDP fragments under port selectors"), Some((0, "--reassemble")));
    p.note(0, "--reassemble", NoticeKind::Warning, format!(
        "DPDK reassembles every fragment it receives, into chained buffers; secgw reassembles fragments to the gateway (ESP, ESP in UDP, Echo Requests) and, with reassembly.forwarded, forwarded IPv4 TCP/UDP fragments between addresses a port-selecting outbound policy may match, in {n} contexts per worker: other forwarded fragments (IPv6 ones among them) go on as they come, and a reassembled datagram over 2048 data bytes is dropped (reasm_too_big)"
    ));
    let Some(ns) = opts.frag_ttl_ns else {
        out.line(&commented(&format!("timeout_ms = {}", MAX_FRAG_TTL_NS / 1_000_000), "no --frag-ttl: DPDK's default, 10 s"), Some((0, "--reassemble")));
        return;
    };
    let mut ms = ns.div_ceil(1_000_000);
    if ms < MIN_REASSEMBLY_TIMEOUT_MS {
        p.note(0, "--frag-ttl", NoticeKind::Warning, format!("{ns} ns is under secgw's shortest reassembly timeout: {MIN_REASSEMBLY_TIMEOUT_MS} ms is used"));
        ms = MIN_REASSEMBLY_TIMEOUT_MS;
    }
    out.line(&commented(&format!("timeout_ms = {ms}"), &format!("--frag-ttl {ns} ns")), Some((0, "--frag-ttl")));
}

/// Converts `.cfg` text to a complete, commented TOML config (not yet
/// validated: [`parse`] does that). `source` names the file in messages
/// and gives the gateway its name (the file stem).
///
/// Errors: [`ConfigError::Syntax`] for a broken line continuation,
/// [`ConfigError::Invalid`] with every line DPDK itself would reject
/// (unknown keyword, bad key length, missing argument, …), each as
/// `file:line:column: keyword: message`.
pub fn convert(text: &str, source: &Path, opts: &ImportOptions) -> Result<Imported, ConfigError> {
    let lines = logical_lines(text, source)?;
    let mut p = Parser { file: source, problems: Vec::new(), notices: Vec::new() };
    let mut parsed = Parsed::default();
    for l in &lines {
        let toks = l.tokens();
        if !toks.is_empty() {
            p.line(&toks, &mut parsed);
        }
    }
    drop(lines);
    if !p.problems.is_empty() {
        p.problems.sort_by_key(|x| (x.line, x.column));
        return Err(ConfigError::Invalid(p.problems));
    }
    let Parsed { sps, sas, rts, neigh } = parsed;
    // An SPI given twice in one direction is an error even when one of the
    // two was refused (else the refusal hides the duplicate); inbound
    // tunnel SAs towards different destinations may share an SPI, as in the
    // TOML (RFC 4301 §4.1: SPI + destination).
    let mut by_spi: HashMap<(u32, u8), Vec<&Sa>> = HashMap::new();
    let mut dups = Vec::new();
    for b in &sas {
        let same = by_spi.entry((b.spi, b.dir as u8)).or_default();
        let shares = |a: &Sa| {
            a.dir == Direction::Inbound
                && !matches!(a.mode, SaMode::Transport)
                && !matches!(b.mode, SaMode::Transport)
                && a.dst.map(|d| d.0) != b.dst.map(|d| d.0)
        };
        if let Some(a) = same.iter().find(|a| !shares(a)) {
            let m = format!("duplicate {} SA with SPI {} (first at line {})", dir_word(b.dir), b.spi, a.line);
            dups.push(Problem { file: source.to_path_buf(), line: b.line, column: 1, field: "sa".into(), message: m });
        }
        same.push(b);
    }
    if !dups.is_empty() {
        return Err(ConfigError::Invalid(dups));
    }
    check_option_values(&mut p, opts)?;
    let warn = |p: &mut Parser<'_>, line: usize, kw: &str, m: String| p.note(line, kw, NoticeKind::Warning, m);
    // DPDK applies -w and -e on its librte_ipsec path only (`-l`, or
    // forced by --reassemble N > 0: ipsec-secgw.c's multi_seg_required).
    let ipsec_path = opts.librte_ipsec || opts.reassemble.is_some_and(|n| n > 0);
    let missing = match (opts.replay_window.is_some(), opts.esn) {
        (true, true) => Some(("-w", "-w and -e", "an anti-replay check or ESN")),
        (true, false) => Some(("-w", "-w", "an anti-replay check")),
        (false, true) => Some(("-e", "-e", "ESN")),
        (false, false) => None,
    };
    if let (Some((kw, which, what)), false) = (missing, ipsec_path) {
        warn(&mut p, 0, kw, format!("DPDK applies {which} on its librte_ipsec path only (-l, or --reassemble N > 0): this command line would run DPDK without {what}; secgw applies {which}"));
    }
    // The same for an sa line's `esn N`: sa.c reads it into the
    // librte_ipsec parameters and ipsec.c into inline offload sessions
    // (refused here); DPDK's default path (esp.c) counts 32-bit sequence
    // numbers from 1 whatever it says.
    if !ipsec_path {
        for sa in sas.iter().filter(|s| s.refused.is_none() && s.esn > 0) {
            warn(&mut p, sa.line, "esn", format!("DPDK applies esn on its librte_ipsec path only (-l, or --reassemble N > 0): this command line would run DPDK's sa {} {} without ESN, its sequence numbers from 1; secgw applies esn {} (ESN on, first sequence number {})", dir_word(sa.dir), sa.spi, sa.esn, sa.esn));
        }
    }

    // Ports in use.
    let ids: BTreeSet<u16> = match opts.port_mask {
        Some(m) => (0..64u16).filter(|b| m >> b & 1 == 1).collect(),
        None => rts
            .iter()
            .map(|r| r.port)
            .chain(neigh.keys().copied())
            .chain(opts.interfaces.keys().copied())
            .chain(opts.eth_dest.keys().copied())
            .chain(opts.unprotected_mask.iter().flat_map(|m| (0..64u16).filter(move |b| m >> b & 1 == 1)))
            .collect(),
    };
    for id in opts.interfaces.keys().chain(opts.eth_dest.keys()) {
        if !ids.contains(id) {
            warn(&mut p, 0, "-p", format!("port {id} is named by an option but is not in the port mask; ignored"));
        }
    }
    // Routes: rte_lpm semantics (a repeated prefix replaces), ports in use only.
    // Indexed by prefix (was a scan per line and per SA: quadratic in
    // files of thousands of rt and sa lines).
    let mut routes: Vec<Rt> = Vec::new();
    let mut at: HashMap<(IpAddr, u8), usize> = HashMap::new();
    for r in rts {
        if !ids.contains(&r.port) {
            warn(&mut p, r.line, "rt", format!("route to {}/{} leaves by port {}, which is not in the port mask (-p): left out", r.prefix.0, r.prefix.1, r.port));
            continue;
        }
        if let Some(&i) = at.get(&r.prefix) {
            warn(&mut p, r.line, "rt", format!("route to {}/{} repeats the one at line {}; as in rte_lpm, this one replaces it", r.prefix.0, r.prefix.1, routes[i].line));
            routes[i] = r;
        } else {
            at.insert(r.prefix, routes.len());
            routes.push(r);
        }
    }
    // Longest-prefix match: one probe per prefix length in use, longest first.
    let mut lens: Vec<(bool, u8)> = at.keys().map(|(a, len)| (a.is_ipv6(), *len)).collect();
    lens.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    lens.dedup();
    let route_to = |ip: IpAddr| {
        lens.iter()
            .filter(|(v6, _)| *v6 == ip.is_ipv6())
            .find_map(|&(_, len)| at.get(&(crate::policy::spd::Prefix::new(ip, len).addr(), len)))
            .map(|&i| routes[i].port)
    };

    // Own addresses and inferred roles from the tunnel SAs.
    let mut addrs: BTreeMap<u16, Vec<(IpAddr, usize, u32)>> = BTreeMap::new();
    let mut peer_ports: BTreeSet<u16> = BTreeSet::new();
    for sa in sas.iter().filter(|s| s.refused.is_none() && !matches!(s.mode, SaMode::Transport)) {
        let (own, peer) = match sa.dir {
            Direction::Outbound => (sa.src, sa.dst),
            Direction::Inbound => (sa.dst, sa.src),
        };
        let (Some((own, _)), Some((peer, _))) = (own, peer) else { continue };
        match route_to(peer) {
            Some(port) => {
                peer_ports.insert(port);
                let list = addrs.entry(port).or_default();
                if !list.iter().any(|a| a.0 == own) {
                    list.push((own, sa.line, sa.spi));
                }
            }
            None => warn(&mut p, sa.line, "sa", format!("no rt line routes to the peer {peer} of SA {}: the gateway's own address {own} is not assigned to a port", sa.spi)),
        }
    }
    let unprotected: BTreeSet<u16> = match opts.unprotected_mask {
        Some(m) => ids.iter().copied().filter(|b| m >> b & 1 == 1).collect(),
        None => {
            let inferred: BTreeSet<u16> = ids.intersection(&peer_ports).copied().collect();
            if inferred.is_empty() {
                // Said here, where the cause is known (the checks after
                // would only count protected and unprotected ports).
                let m = "no -u mask, and no unprotected port could be inferred (only the routes to tunnel-mode SAs' peers tell; transport-mode SAs and unrouted peers do not): give -u MASK, the ports that face the ESP side";
                p.problems.push(Problem { file: source.to_path_buf(), line: 0, column: 0, field: "-u".into(), message: m.into() });
                return Err(ConfigError::Invalid(p.problems));
            } else {
                warn(&mut p, 0, "-u", format!("no -u mask: unprotected ports inferred from the routes to the SAs' peers: {:?}", inferred));
            }
            inferred
        }
    };

    let mut out = Out { text: Zeroizing::new(String::new()), origin: Vec::new() };
    let name = source.file_stem().and_then(|s| s.to_str()).unwrap_or("secgw");
    let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    out.comment(&format!(
        "secgw config imported from the DPDK ipsec-secgw file {} (secgw import-dpdk).\n\
         Options: {}{}\n\
         Policy priorities: DPDK's pri N (rte_acl: the higher wins) is priority {ACL_MAX_PRIORITY} - N here (the lower wins).\n\
         The gateway's own addresses are derived: every outbound tunnel SA's src and every inbound\n\
         tunnel SA's dst is ours, on the port the route to that SA's peer leaves by.",
        source.display(),
        opts.describe(),
        match (opts.port_mask, opts.unprotected_mask) {
            (Some(_), Some(_)) => "",
            (None, Some(_)) => " (no -p: every port named)",
            (Some(_), None) => " (no -u: unprotected ports inferred from the routes to the SAs' peers)",
            (None, None) => " (no -p: every port named; no -u: unprotected ports inferred from the routes to the SAs' peers)",
        },
    ));
    out.line("", None);
    out.line("[gateway]", None);
    out.line(&format!("name = {}", q(&name)), None);
    reassembly_table(&mut out, &mut p, opts);

    for &id in &ids {
        out.line("", None);
        let iface = match opts.interfaces.get(&id) {
            Some(n) => n.clone(),
            None => {
                warn(&mut p, 0, "--port", format!("no --port {id}=IFACE: interface dpdk{id} assumed"));
                format!("dpdk{id}")
            }
        };
        let role = if unprotected.contains(&id) { "unprotected" } else { "protected" };
        let why = match opts.unprotected_mask {
            Some(_) => format!("bit {id} of -u is {}", if role == "unprotected" { "set" } else { "clear" }),
            None if role == "unprotected" => "a route to an SA peer leaves by it".into(),
            None => "no route to an SA peer leaves by it".into(),
        };
        out.line(&format!("[[port]]                  # DPDK port {id}: {role} ({why})"), None);
        out.line(&format!("name = {}", q(&format!("port{id}"))), None);
        out.line(&format!("interface = {}", q(&iface)), None);
        out.line(&format!("role = \"{role}\""), None);
        if let Some(m) = opts.mtu {
            out.line(&commented(&format!("mtu = {m}"), "--mtu"), Some((0, "--mtu")));
        }
        if let Some(list) = addrs.get(&id) {
            let a: Vec<String> = list.iter().map(|(ip, _, _)| q(&format!("{ip}/{}", if ip.is_ipv6() { 128 } else { 32 }))).collect();
            let from: Vec<String> = list.iter().map(|(ip, line, spi)| format!("{ip}: SA {spi}, line {line}")).collect();
            out.line(&format!("# own addresses, from the tunnel SAs routed out of this port ({})", from.join("; ")), None);
            out.line(&format!("addresses = [{}]", a.join(", ")), list.first().map(|(_, l, _)| (*l, "sa")));
        }
        match (opts.eth_dest.get(&id), neigh.get(&id)) {
            (Some(m), _) => out.line(&format!("peer_mac = {}       # --eth-dest {id},…", q(&mac_str(m))), None),
            (None, Some((m, line))) => out.line(&format!("peer_mac = {}       # neigh port {id}, line {line}", q(&mac_str(m))), Some((*line, "neigh"))),
            (None, None) => {}
        }
    }
    for (id, (_, line)) in &neigh {
        if !ids.contains(id) {
            warn(&mut p, *line, "neigh", format!("port {id} is not in the port mask (-p): left out"));
        }
    }

    // Policies naming a refused SA become discard, unless an imported SA
    // has that SPI too (an inbound SPI shared by two destinations, one of
    // them refused: the policy still protects with the other).
    let refused: HashMap<(u32, u8), usize> = sas
        .iter()
        .filter(|s| s.refused.is_some() && !by_spi[&(s.spi, s.dir as u8)].iter().any(|o| o.refused.is_none()))
        .map(|s| ((s.spi, s.dir as u8), s.line))
        .collect();
    for sa in sas.iter().filter(|s| s.refused.is_none()) {
        let l = sa.line;
        out.line("", None);
        out.line(&format!("[[sa]]                    # line {l}: sa {} {}", dir_word(sa.dir), sa.spi), Some((l, "sa")));
        out.line(&format!("spi = {}", sa.spi), Some((l, "sa")));
        let dir = match sa.dir {
            Direction::Outbound => "outbound",
            Direction::Inbound => "inbound",
        };
        out.line(&format!("direction = \"{dir}\""), Some((l, "sa")));
        let mode = if matches!(sa.mode, SaMode::Transport) { "transport" } else { "tunnel" };
        out.line(&format!("mode = \"{mode}\""), Some((l, "mode")));
        let algo_word = match sa.key_word {
            "aead_key" => "aead_algo",
            "auth_key" => "auth_algo",
            _ => "cipher_algo",
        };
        out.line(&format!("algorithm = \"{}\"", sa.algorithm.name()), Some((l, algo_word)));
        if !sa.key.is_empty() {
            out.line(&format!("key = \"{}\"", hex(&sa.key).as_str()), Some((l, sa.key_word)));
        }
        if !sa.auth_key.is_empty() {
            out.line(&format!("auth_key = \"{}\"", hex(&sa.auth_key).as_str()), Some((l, "auth_key")));
        }
        if let Some((ip, line)) = sa.src {
            out.line(&format!("tunnel_src = {}", q(&ip.to_string())), Some((line, "src")));
        }
        if let Some((ip, line)) = sa.dst {
            out.line(&format!("tunnel_dst = {}", q(&ip.to_string())), Some((line, "dst")));
        }
        if sa.esn > 0 {
            out.line(&format!("esn = true                # esn {}", sa.esn), Some((l, "esn")));
            // Outbound: the counter's start; inbound: the peer's, where the
            // replay window starts (as rte_ipsec's esn.value does).
            // TOML integers stop at 2^63−1; larger first_seq values are strings.
            let v = if sa.esn > i64::MAX as u64 { q(&sa.esn.to_string()) } else { sa.esn.to_string() };
            out.line(&format!("first_seq = {v}"), Some((l, "esn")));
        }
        if sa.udp_encap {
            out.line("udp_encap = true          # RFC 3948, ports 4500/4500", Some((l, "udp-encap")));
        }
        if opts.esn && sa.esn == 0 {
            out.line(&commented("esn = true", "-e"), Some((0, "-e")));
        }
        if let (Some(w), Direction::Inbound) = (opts.replay_window, sa.dir) {
            out.line(&commented(&format!("replay_window = {w}"), "-w"), Some((0, "-w")));
        }
    }

    // The line of the first sp with each rule (a map: a search of the
    // ones before for each made the import quadratic, helper-103).
    let mut seen: HashMap<_, usize> = HashMap::new();
    for sp in &sps {
        let l = sp.line;
        let rule = (sp.v6, sp.dir == Direction::Inbound, sp.protect.map(|x| x.0), sp.bypass, sp.pri, sp.src, sp.dst, sp.proto, sp.sport, sp.dport);
        if let Some(first) = seen.get(&rule) {
            warn(&mut p, l, "sp", format!("repeats the sp at line {first} (kept, as rte_acl keeps both; the first wins)"));
        } else {
            seen.insert(rule, l);
        }
        let action = match (sp.protect, sp.bypass) {
            (Some((spi, _)), _) if refused.contains_key(&(spi, sp.dir as u8)) => {
                let sa_line = refused[&(spi, sp.dir as u8)];
                warn(&mut p, l, "protect", format!("SA {spi} (line {sa_line}) was refused: this policy becomes discard, so its traffic is dropped rather than matched by a later rule"));
                "discard".to_owned()
            }
            (Some((spi, _)), _) => format!("protect {spi}"),
            (None, true) => "bypass".into(),
            (None, false) => "discard".into(),
        };
        let dir = match sp.dir {
            Direction::Outbound => "outbound",
            Direction::Inbound => "inbound",
        };
        out.line("", None);
        out.line(&format!("[[policy]]                # line {l}: sp {} {} pri {}", if sp.v6 { "ipv6" } else { "ipv4" }, dir_word(sp.dir), sp.pri), Some((l, "sp")));
        out.line(&format!("direction = \"{dir}\""), Some((l, "sp")));
        out.line(&format!("src = {}", q(&format!("{}/{}", sp.src.0, sp.src.1))), Some((l, "src")));
        out.line(&format!("dst = {}", q(&format!("{}/{}", sp.dst.0, sp.dst.1))), Some((l, "dst")));
        match sp.proto {
            Some((v, 255)) => out.line(&format!("protocol = {v}"), Some((l, "proto"))),
            _ => out.line("protocol = \"any\"", Some((l, "proto"))),
        }
        let range = |r: Option<(u16, u16)>| match r {
            None | Some((0, 65535)) => "\"any\"".to_owned(),
            Some((a, b)) => format!("\"{a}-{b}\""),
        };
        out.line(&format!("src_ports = {}", range(sp.sport)), Some((l, "sport")));
        out.line(&format!("dst_ports = {}", range(sp.dport)), Some((l, "dport")));
        out.line(&format!("priority = {}", ACL_MAX_PRIORITY - sp.pri), Some((l, "pri")));
        out.line(&format!("action = \"{action}\""), Some((sp.protect.map_or(l, |x| x.1), "protect")));
    }

    for r in &routes {
        out.line("", None);
        out.line(&format!("[[route]]                 # line {}: rt {} port {}", r.line, if r.prefix.0.is_ipv6() { "ipv6" } else { "ipv4" }, r.port), Some((r.line, "rt")));
        out.line(&format!("prefix = {}", q(&format!("{}/{}", r.prefix.0, r.prefix.1))), Some((r.line, "dst")));
        out.line(&format!("port = {}", q(&format!("port{}", r.port))), Some((r.line, "port")));
    }

    p.notices.sort_by_key(|n| n.line);
    Ok(Imported { toml: out.text, notices: p.notices, origin: out.origin })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_about_the_options_has_no_line_number() {
        let n = |line| Notice { file: "ep0.cfg".into(), line, keyword: "--port".into(), kind: NoticeKind::Warning, message: "m".into() };
        assert_eq!(n(0).to_string(), "ep0.cfg: warning: --port: m");
        assert_eq!(n(7).to_string(), "ep0.cfg:7: warning: --port: m");
    }

    const SAMPLE: &str = "# head\n\
        sa out 6 cipher_algo aes-128-cbc cipher_key a0:a0:a0:a0:a0:a0:a0:a0:a0:a0:a0:\\\n\
        a0:a0:a0:a0:a0 auth_algo sha1-hmac auth_key a0:a0:a0:a0:a0:a0:a0:a0:a0:a0:a0:\\\n\
        # a comment line inside a continuation is skipped, as DPDK does\n\
        a0:a0:a0:a0:a0:a0:a0:a0:a0 mode ipv4-tunnel src 172.16.1.6 \\\n\
        dst 172.16.2.6 # trailing comment\n\
        sa in 9 aead_algo chacha20-poly1305 aead_key 1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14:15:16:17:18:19:1a:1b:1c:1d:1e:1f:20:21:22:23:24 mode ipv6-tunnel src 2001:db8::2 dst 2001:db8::1 esn 7\n\
        sp ipv4 out esp protect 6 pri 1 dst 192.168.106.0/24 sport 0:65535 dport 0:65535\n\
        sp ipv6 in esp protect 9 pri 2 src 2001:db8:9::/48 dst 2001:db8:1::/48 proto 6:255 dport 443:443\n\
        rt ipv4 dst 172.16.2.6/32 port 0\n\
        rt ipv6 dst 2001:db8::/64 port 0\n\
        rt ipv4 dst 192.168.106.0/24 port 1\n\
        neigh port 0 02:00:00:00:00:09\n";

    fn opts() -> ImportOptions {
        ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() }
    }

    /// Continuations join with nothing in between (a key split mid-byte
    /// list stays one token) and keep each token's own line and column.
    #[test]
    fn continuation_joins_tokens() {
        let lines = logical_lines(SAMPLE, Path::new("s.cfg")).unwrap();
        let toks = lines[0].tokens();
        let key = toks.iter().find(|t| t.s.starts_with("a0:")).unwrap();
        assert_eq!(key.s, ["a0"; 16].join(":"));
        assert_eq!((key.line, key.col), (2, 45));
        let dst = toks.iter().position(|t| t.s == "dst").unwrap();
        assert_eq!((toks[dst].line, toks[dst + 1].s), (6, "172.16.2.6"));
        assert!(!toks.iter().any(|t| t.s.contains('#') || t.s == "trailing"));
    }

    #[test]
    fn sample_imports_with_values() {
        let (imp, cfg) = import(SAMPLE, Path::new("s.cfg"), &opts()).unwrap();
        assert!(imp.notices.iter().all(|n| n.kind == NoticeKind::Warning), "{:?}", imp.notices);
        let sa = &cfg.sas[1];
        // Inbound `esn 7`: the peer starts at 7, the window just below it.
        assert_eq!((sa.algorithm, sa.esn, sa.first_seq, sa.key.len()), (Algorithm::ChaCha20Poly1305, true, 7, 36));
        assert_eq!(cfg.sas[0].first_seq, 1);
        let p = &cfg.policies[1];
        assert_eq!((p.protocol, p.dst_ports, p.src.1), (crate::config::Protocol::Number(6), (443, 443), 48));
        assert_eq!(cfg.ports[0].peer_mac, Some([2, 0, 0, 0, 0, 9]));
        assert_eq!(cfg.ports[0].addresses, [("172.16.1.6".parse().unwrap(), 32), ("2001:db8::1".parse().unwrap(), 128)]);
    }

    /// Every prefix of a valid file (cut anywhere: in a token, after a
    /// `\`, in a comment) is an error or a config whose TOML round-trips;
    /// never a panic.
    #[test]
    fn every_truncation_is_handled() {
        let mut ok = 0;
        for cut in (0..=SAMPLE.len()).filter(|&i| SAMPLE.is_char_boundary(i)) {
            if let Ok((imp, cfg)) = import(&SAMPLE[..cut], Path::new("t.cfg"), &opts()) {
                assert_eq!(crate::config::parse(&imp.toml, Path::new("t.cfg")).unwrap(), cfg, "cut at {cut}");
                ok += 1;
            }
        }
        assert!(ok > 0);
    }
}
