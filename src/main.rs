//! `secgw`: the command line. Parses arguments and calls the library.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "secgw", version, about = "IPsec ESP security gateway over AF_XDP")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the gateway in the foreground until SIGINT/SIGTERM.
    Run {
        /// Config file: TOML, or a DPDK ipsec-secgw `.cfg` (with the port options below).
        #[arg(short, long)]
        config: PathBuf,
        #[command(flatten)]
        dpdk: DpdkArgs,
        /// Print counters every N seconds (overrides gateway.stats_interval).
        #[arg(long, value_name = "N")]
        stats_interval: Option<u64>,
        /// Write counters as JSON to PATH every second and on exit.
        #[arg(long, value_name = "PATH")]
        stats_file: Option<PathBuf>,
        /// Control socket path (overrides control.socket in the config).
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
    /// Validate a config file and print a summary.
    Check {
        /// Config file: TOML, or a DPDK ipsec-secgw `.cfg` (with the port options below).
        config: PathBuf,
        #[command(flatten)]
        dpdk: DpdkArgs,
    },
    /// Convert a DPDK ipsec-secgw `.cfg` file to a TOML config on stdout.
    ///
    /// Refusals and warnings (the import's, then those `check` gives for
    /// the result) go to stderr. Exit status: 0 converted (the
    /// TOML validates), 1 an error (the .cfg is broken or the result does
    /// not validate; nothing is written), 3 converted but something was
    /// refused and --strict was given.
    ImportDpdk {
        /// The `.cfg` file.
        file: PathBuf,
        #[command(flatten)]
        dpdk: DpdkArgs,
        /// Exit with status 3 if any SA, policy or line was refused.
        #[arg(long)]
        strict: bool,
    },
    /// Talk to a running gateway through its control socket.
    ///
    /// Exit status: 0 ok, 1 the gateway answered with an error (or the
    /// request could not be made), 2 cannot connect to the socket.
    Ctl {
        /// Control socket [default: $SECGW_SOCKET, else /run/secgw/secgw.sock].
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        #[command(subcommand)]
        cmd: CtlCmd,
    },
}

/// DPDK ipsec-secgw's command-line options, for a `.cfg` file.
#[derive(clap::Args, Default)]
struct DpdkArgs {
    /// DPDK `-p PORTMASK`: ports in use, hex [default: every port id the file names].
    #[arg(short = 'p', value_name = "PORTMASK", overrides_with = "port_mask")]
    port_mask: Option<String>,
    /// DPDK `-u PORTMASK`: unprotected ports, hex [default: the ports routes to SA peers leave by].
    #[arg(short = 'u', value_name = "PORTMASK", overrides_with = "unprotected_mask")]
    unprotected_mask: Option<String>,
    /// Interface of a DPDK port id, e.g. `--port 0=gw0-p0` (repeat per port).
    #[arg(long = "port", value_name = "ID=IFACE")]
    ports: Vec<String>,
    /// DPDK `--eth-dest PORT,MAC`: destination MAC of a port (repeatable).
    #[arg(long = "eth-dest", value_name = "ID,MAC")]
    eth_dest: Vec<String>,
    /// DPDK `-w N`: anti-replay window of every inbound SA, 0 = none [default: secgw's 64].
    #[arg(short = 'w', value_name = "N", overrides_with = "replay_window")]
    replay_window: Option<String>,
    /// DPDK `-e`: extended sequence numbers on every SA.
    #[arg(short = 'e', overrides_with = "esn")]
    esn: bool,
    /// DPDK `-l` (its librte_ipsec path, the one that applies -w and -e): accepted; secgw always applies them.
    #[arg(short = 'l', overrides_with = "librte_ipsec")]
    librte_ipsec: bool,
    /// DPDK `--mtu MTU`: every port's mtu.
    #[arg(long = "mtu", value_name = "MTU", overrides_with = "mtu")]
    mtu: Option<String>,
    /// DPDK `--reassemble N`: reassembly contexts per worker (0 = off); N > 0 also reassembles forwarded fragments under port selectors.
    #[arg(long = "reassemble", value_name = "N", overrides_with = "reassemble")]
    reassemble: Option<String>,
    /// DPDK `--frag-ttl NS`: time a datagram has to complete, in ns (at most 10 s; only with --reassemble N > 0).
    #[arg(long = "frag-ttl", value_name = "NS", overrides_with = "frag_ttl")]
    frag_ttl: Option<String>,
}

impl DpdkArgs {
    fn options(&self) -> anyhow::Result<secgw::config::dpdk::ImportOptions> {
        use secgw::config::dpdk::ImportOptions as O;
        let e = |m: String| anyhow::anyhow!(m);
        // An optional value parsed by `parse`, its error prefixed by the option.
        let num = |v: &Option<String>, flag: &str, parse: fn(&str) -> Result<u64, String>| v.as_deref().map(parse).transpose().map_err(|m| e(format!("{flag}: {m}")));
        let mut o = O {
            port_mask: num(&self.port_mask, "-p", O::parse_mask)?,
            unprotected_mask: num(&self.unprotected_mask, "-u", O::parse_mask)?,
            replay_window: num(&self.replay_window, "-w", O::parse_decimal)?,
            esn: self.esn,
            librte_ipsec: self.librte_ipsec,
            mtu: num(&self.mtu, "--mtu", O::parse_decimal)?,
            reassemble: num(&self.reassemble, "--reassemble", O::parse_decimal)?,
            frag_ttl_ns: num(&self.frag_ttl, "--frag-ttl", O::parse_decimal)?,
            ..O::default()
        };
        for p in &self.ports {
            let (id, name) = O::parse_port(p).map_err(|m| e(format!("--port: {m}")))?;
            if let Some(old) = o.interfaces.insert(id, name) {
                return Err(e(format!("--port: port {id} given twice (first as {old:?})")));
            }
        }
        for d in &self.eth_dest {
            let (id, mac) = O::parse_eth_dest(d).map_err(|m| e(format!("--eth-dest: {m}")))?;
            if o.eth_dest.insert(id, mac).is_some() {
                return Err(e(format!("--eth-dest: port {id} given twice")));
            }
        }
        Ok(o)
    }
}

#[derive(Subcommand)]
enum CtlCmd {
    /// Counters: global, per port, per SA, per worker, drops by reason.
    Stats {
        /// The JSON result as it is (pretty-printed).
        #[arg(long, conflicts_with = "prometheus")]
        json: bool,
        /// Prometheus text exposition format.
        #[arg(long)]
        prometheus: bool,
    },
    /// Security associations.
    Sa {
        #[command(subcommand)]
        cmd: SaCmd,
    },
    /// Security policies.
    Policy {
        #[command(subcommand)]
        cmd: PolicyCmd,
    },
    /// The neighbour table (ARP / Neighbor Discovery).
    Neigh {
        #[command(subcommand)]
        cmd: NeighCmd,
    },
    /// Re-read the config file and apply the difference (make-before-break).
    Reload,
    /// Print SA events (expiry, rekey, errors), one per line, until ^C.
    Events {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// The gateway's program and protocol versions.
    Version,
}

#[derive(Subcommand)]
enum SaCmd {
    /// Every SA with its state and counters (never its keys).
    List {
        /// The JSON result as it is (pretty-printed).
        #[arg(long)]
        json: bool,
    },
    /// Add the [[sa]] (and [[policy]]) tables of a TOML file ("-" = stdin).
    Add {
        /// TOML fragment in the config file's syntax.
        file: PathBuf,
    },
    /// Delete an SA.
    Del {
        /// SPI (decimal or 0x hex).
        #[arg(value_parser = parse_spi)]
        spi: u32,
        /// Which SA when inbound and outbound share the SPI.
        #[arg(long, value_enum)]
        direction: Option<DirArg>,
        /// The SA's tunnel_dst, when inbound tunnel SAs share the SPI.
        #[arg(long, value_name = "ADDR")]
        dst: Option<std::net::IpAddr>,
    },
    /// Replace an SA by one with a new SPI and new keys (make-before-break).
    Rekey {
        /// SPI of the SA to replace (decimal or 0x hex).
        #[arg(value_parser = parse_spi)]
        old_spi: u32,
        /// SPI of the new SA.
        #[arg(long = "spi", value_parser = parse_spi)]
        new_spi: u32,
        /// File with the new key material ("-" = stdin): one line of hex, or
        /// TOML key = "hex" and optional auth_key = "hex". Never on the
        /// command line, where other users can read it.
        #[arg(long, value_name = "F")]
        key_file: PathBuf,
        /// Which SA when inbound and outbound share the SPI.
        #[arg(long, value_enum)]
        direction: Option<DirArg>,
        /// The SA's tunnel_dst, when inbound tunnel SAs share the SPI.
        #[arg(long, value_name = "ADDR")]
        dst: Option<std::net::IpAddr>,
    },
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// The SPD entries, numbered from 0 in the order they were installed
    /// (lookup goes by priority, then that order).
    List {
        /// The JSON result as it is (pretty-printed).
        #[arg(long)]
        json: bool,
    },
    /// Remove SPD entry INDEX (as `policy list` numbers it): sends that
    /// entry as listed, so a list changed meanwhile removes nothing.
    Del {
        /// The entry's number in `policy list`.
        index: usize,
    },
}

#[derive(Subcommand)]
enum NeighCmd {
    /// Static and learned entries: ip, mac, port, state, age.
    List {
        /// The JSON result as it is (pretty-printed).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum DirArg {
    #[value(name = "in", alias = "inbound")]
    In,
    #[value(name = "out", alias = "outbound")]
    Out,
}

impl From<DirArg> for secgw::config::model::Direction {
    fn from(d: DirArg) -> Self {
        match d {
            DirArg::In => secgw::config::model::Direction::Inbound,
            DirArg::Out => secgw::config::model::Direction::Outbound,
        }
    }
}

fn parse_spi(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("expected an SPI (decimal or 0x hex, at most 32 bits), found {s:?}"))
}

fn main() -> ExitCode {
    let cmd = Cli::parse().cmd;
    if !matches!(cmd, Cmd::Run { .. }) {
        // `secgw check … | head`: a one-shot command whose reader went away
        // ends as other command-line tools do (SIGPIPE), not with a panic
        // from println!. Not for `run`: a gateway never dies of its stdout.
        // SAFETY: called before any thread exists; resets one signal's
        // disposition to the default.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let cmd = match cmd {
        // `ctl` prints only its result and its own errors: no log setup.
        Cmd::Ctl { socket, cmd } => return ctl(socket.unwrap_or_else(secgw::control::client::default_socket), cmd),
        Cmd::ImportDpdk { file, dpdk, strict } => return import_dpdk(&file, &dpdk, strict),
        cmd => cmd,
    };
    secgw::init_logging();
    match real_main(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("secgw: {e:#}");
            if let Some(hint) = privilege_hint(&format!("{e:#}"), euid()) {
                eprintln!("secgw: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The effective user id of this process.
fn euid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// A hint for an error `message` refused by the kernel's permission
/// checks (EACCES / EPERM) when the effective user `euid` is not root:
/// the message alone names a socket or lock file, not that the gateway
/// needs root (helper-100). `None` for root or another error.
fn privilege_hint(message: &str, euid: u32) -> Option<&'static str> {
    let refused = message.contains("Permission denied") || message.contains("Operation not permitted");
    (refused && euid != 0).then_some("not running as root: `secgw run` needs root (XDP programs, AF_XDP sockets, locks and the control socket under /run/secgw; README Quick start)")
}


/// `secgw import-dpdk`: the TOML on stdout, notices on stderr; exit 0,
/// 1 (error, nothing written) or 3 (refusals with --strict).
fn import_dpdk(file: &std::path::Path, dpdk: &DpdkArgs, strict: bool) -> ExitCode {
    use secgw::config::dpdk;
    let r = dpdk.options().map_err(|e| e.to_string()).and_then(|o| {
        let text = dpdk::read(file).map_err(|e| e.to_string())?;
        let (imp, cfg) = dpdk::import(&text, file, &o).map_err(|e| e.to_string())?;
        // As `load_any` keeps them: the warnings below are placed on the
        // .cfg's lines through them.
        Ok((imp, secgw::config::Config { dpdk_import: Some(o), ..cfg }))
    });
    match r {
        Ok((imp, cfg)) => {
            print!("{}", imp.toml.as_str());
            for n in &imp.notices {
                eprintln!("{n}");
            }
            // What `secgw check` would warn about in the result, placed on
            // the .cfg's lines: a converted file can still be dead in part.
            for w in secgw::config::warnings(&cfg) {
                eprintln!("warning: {w}");
            }
            let refused = imp.notices.iter().any(|n| n.kind == dpdk::NoticeKind::Refused);
            if strict && refused {
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("secgw import-dpdk: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Loads TOML or a DPDK `.cfg`, with the import's refusals and warnings.
fn load(path: &std::path::Path, dpdk: &DpdkArgs) -> anyhow::Result<(secgw::config::Config, Vec<secgw::config::dpdk::Notice>)> {
    secgw::config::load_any(path, &dpdk.options()?).map_err(|e| anyhow::anyhow!("{e}"))
}

fn real_main(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Check { config, dpdk } => {
            let (cfg, notices) = load(&config, &dpdk)?;
            // A config that cannot be bound or pinned fails before the
            // summary, as one that does not validate does.
            let (limit, driver) = match cfg.crypto.backend {
                secgw::config::model::CryptoBackend::Software => (0, "crypto_soft"),
                secgw::config::model::CryptoBackend::Descriptor => (cfg.crypto.max_sessions_per_qp, "crypto_descriptor"),
            };
            let b = secgw::control::binding::bind(&cfg, limit).map_err(|e| anyhow::anyhow!("{e}"))?;
            secgw::control::run::worker_cores(&cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
            print!("{}", secgw::config::summary(&cfg));
            if secgw::config::dpdk::is_dpdk_cfg(&config) {
                print!("{}", secgw::config::dpdk::describe_notices(&notices));
            }
            println!("binding (SA → worker → queue pair), max_sessions_per_qp = {limit}{}:", if limit == 0 { " (unlimited)" } else { "" });
            print!("{}", secgw::control::binding::describe(&cfg, &b, driver));
            for w in secgw::config::warnings(&cfg) {
                println!("warning: {w}");
            }
            println!("{}: OK", config.display());
            Ok(())
        }
        Cmd::Run { config, dpdk, stats_interval, stats_file, socket } => {
            let (cfg, notices) = load(&config, &dpdk)?;
            for n in &notices {
                tracing::warn!("{n}");
            }
            for w in secgw::config::run_warnings(&cfg, socket.is_some()) {
                tracing::warn!("{w}");
            }
            let opts = secgw::control::RunOptions { stats_interval, stats_file, socket };
            let snap = secgw::control::run(&cfg, &opts).with_context(|| format!("running {}", config.display()))?;
            println!("final counters:\n{}", snap.to_text());
            Ok(())
        }
        Cmd::ImportDpdk { .. } | Cmd::Ctl { .. } => unreachable!("handled in main"),
    }
}

/// Reads `path`, or stdin for "-".
fn read_input(path: &std::path::Path) -> std::io::Result<String> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
}

/// `secgw ctl`: one request, its result on stdout. Exit status 0 ok, 1 an
/// error (the server's `code: message`, or a local one), 2 no connection.
fn ctl(socket: PathBuf, cmd: CtlCmd) -> ExitCode {
    use secgw::control::client::{self, ClientError};
    use secgw::control::protocol::{Command, StatsFormat};
    let fail = |m: String| {
        eprintln!("secgw ctl: {m}");
        ExitCode::from(1)
    };
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let request = |c: &Command| client::request(&socket, c);
    let result = match cmd {
        CtlCmd::Stats { json, prometheus } => {
            let format = if prometheus { StatsFormat::Prometheus } else { StatsFormat::Json };
            request(&Command::Stats { format }).map(|v| match (json, prometheus) {
                (_, true) => Ok(v.get("text").and_then(|t| t.as_str()).unwrap_or_default().to_string()),
                (true, _) => Ok(pretty(&v) + "\n"),
                _ => client::render_stats_text(&v).map_err(|e| format!("{e}; use --json")),
            })
        }
        CtlCmd::Sa { cmd: SaCmd::List { json } } => {
            request(&Command::SaList).map(|v| if json { Ok(pretty(&v) + "\n") } else { client::render_sa_table(&v) })
        }
        CtlCmd::Policy { cmd: PolicyCmd::List { json } } => {
            request(&Command::PolicyList).map(|v| if json { Ok(pretty(&v) + "\n") } else { client::render_policy_table(&v) })
        }
        CtlCmd::Policy { cmd: PolicyCmd::Del { index } } => request(&Command::PolicyList).and_then(|v| {
            let n = v.get("policies").and_then(|p| p.as_array()).map_or(0, Vec::len);
            match v.get("policies").and_then(|p| p.get(index)) {
                Some(entry) => request(&Command::PolicyDel { policy: entry.clone(), index: Some(index) }).map(|v| Ok(client::render_compact(&v) + "\n")),
                // As the gateway words a missing entry (`<code>: <message>`).
                None => Ok(Err(format!("not_found: no policy {index}: the SPD has {n} (policy list numbers them from 0)"))),
            }
        }),
        CtlCmd::Neigh { cmd: NeighCmd::List { json } } => {
            request(&Command::NeighList).map(|v| if json { Ok(pretty(&v) + "\n") } else { client::render_neigh_table(&v) })
        }
        CtlCmd::Sa { cmd: SaCmd::Add { file } } => match read_input(&file) {
            Ok(toml) => request(&Command::SaAdd { toml }).map(|v| Ok(client::render_compact(&v) + "\n")),
            Err(e) => return fail(format!("{}: {e}", file.display())),
        },
        CtlCmd::Sa { cmd: SaCmd::Del { spi, direction, dst } } => {
            request(&Command::SaDel { spi, direction: direction.map(Into::into), dst }).map(|v| Ok(client::render_compact(&v) + "\n"))
        }
        CtlCmd::Sa { cmd: SaCmd::Rekey { old_spi, new_spi, key_file, direction, dst } } => {
            let keys = read_input(&key_file).map_err(|e| e.to_string()).and_then(|t| client::parse_key_file(&t));
            let (key, auth_key) = match keys {
                Ok(k) => k,
                Err(e) => return fail(format!("{}: {e}", key_file.display())),
            };
            let c = Command::SaRekey { spi: old_spi, direction: direction.map(Into::into), dst, new_spi, key, auth_key };
            request(&c).map(|v| Ok(client::render_compact(&v) + "\n"))
        }
        CtlCmd::Reload => request(&Command::Reload).map(|v| Ok(client::render_compact(&v) + "\n")),
        CtlCmd::Version => request(&Command::Version).map(|v| Ok(client::render_compact(&v) + "\n")),
        CtlCmd::Events { json } => {
            use std::io::Write;
            let mut out = std::io::stdout();
            client::events(&socket, |ev| {
                let line = if json { serde_json::to_string(&ev).unwrap_or_default() } else { client::render_event(&ev) };
                writeln!(out, "{line}").and_then(|_| out.flush()).is_ok()
            })
            .map(|()| Ok(String::new()))
        }
    };
    match result {
        Ok(Ok(text)) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => fail(e),
        Err(e @ ClientError::Connect { .. }) => {
            eprintln!("secgw ctl: {e}\n(is `secgw run` running? the socket is set by control.socket in its config, or --socket / SECGW_SOCKET here)");
            ExitCode::from(2)
        }
        Err(e) => fail(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::privilege_hint;

    #[test]
    fn a_permission_error_without_root_says_root_is_needed() {
        let m = "running x.toml: control socket /run/secgw/gw0.sock: inspecting /run/secgw/gw0.sock: Permission denied (os error 13)";
        assert!(privilege_hint(m, 1000).is_some_and(|h| h.contains("needs root")));
        assert!(privilege_hint("AF_XDP setup: Operation not permitted (os error 1)", 65534).is_some());
        assert_eq!(privilege_hint(m, 0), None, "root: the error is something else");
        assert_eq!(privilege_hint("config x.toml:3:1: unknown key", 1000), None);
    }
}
