//! `secgw`: the command line. Parses arguments and calls the library.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::io::IsTerminal;
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
        /// Config file (TOML).
        #[arg(short, long)]
        config: PathBuf,
        /// Print counters every N seconds (overrides gateway.stats_interval).
        #[arg(long, value_name = "N")]
        stats_interval: Option<u64>,
        /// Write counters as JSON to PATH every second and on exit.
        #[arg(long, value_name = "PATH")]
        stats_file: Option<PathBuf>,
    },
    /// Validate a config file and print a summary.
    Check {
        /// Config file (TOML).
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("secgw: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load(path: &std::path::Path) -> anyhow::Result<secgw::config::Config> {
    secgw::config::load(path).map_err(|e| anyhow::anyhow!("{e}"))
}

fn real_main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Check { config } => {
            let cfg = load(&config)?;
            print!("{}", secgw::config::summary(&cfg));
            let (limit, driver) = match cfg.crypto.backend {
                secgw::config::model::CryptoBackend::Software => (0, "crypto_soft"),
                secgw::config::model::CryptoBackend::Descriptor => (cfg.crypto.max_sessions_per_qp, "crypto_descriptor"),
            };
            let b = secgw::control::binding::bind(&cfg, limit).map_err(|e| anyhow::anyhow!("{e}"))?;
            secgw::control::run::worker_cores(&cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("binding (SA → worker → queue pair), max_sessions_per_qp = {limit}{}:", if limit == 0 { " (unlimited)" } else { "" });
            print!("{}", secgw::control::binding::describe(&cfg, &b, driver));
            for w in secgw::config::warnings(&cfg) {
                println!("warning: {w}");
            }
            println!("{}: OK", config.display());
            Ok(())
        }
        Cmd::Run { config, stats_interval, stats_file } => {
            let cfg = load(&config)?;
            for w in secgw::config::warnings(&cfg) {
                tracing::warn!("{w}");
            }
            let opts = secgw::control::RunOptions { stats_interval, stats_file };
            let snap = secgw::control::run(&cfg, &opts).with_context(|| format!("running {}", config.display()))?;
            println!("final counters:\n{}", snap.to_text());
            Ok(())
        }
    }
}
