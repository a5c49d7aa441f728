//! Configuration: the TOML schema, its validation, and a human summary.
//!
//! [`load`] / [`parse`] turn a TOML file into a validated [`Config`] (the
//! schema is documented at the top of `config/load.rs`). Decoding is done on
//! spanned raw structs, so every problem names the file, line, column and
//! field path; validation collects every problem of a file before failing.
//! [`summary`] prints a validated config for `secgw check` (never the keys),
//! [`warnings`] lists what is legal but probably wrong.
//!
//! Contract: nothing in this module is used at run time by the data plane; the
//! control thread builds its tables from the returned [`Config`].

pub mod dpdk;
mod load;
pub mod model;
mod positions;
mod summary;
mod warnings;

use std::fmt;
use std::path::PathBuf;

pub use load::{load, parse, parse_fragment, parse_spi, Fragment, MAX_CONFIG_BYTES};
pub(crate) use load::{nonce_from_seq, two_ciphers};
pub use model::*;
pub use positions::{Located, Positions};
pub use summary::{provider_counts, summary};
pub use warnings::{fragment_warnings, run_warnings, warnings};

/// One problem in a config file, at a position.
///
/// Displays as `file:line:column: field: message`, e.g.
/// `configs/ep0.toml:12:7: sa[1].key: expected 40 hex digits (AES-128-GCM key ‖ 4-byte salt), found 38`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// File as given to [`load`] / [`parse`].
    pub file: PathBuf,
    /// 1-based line; 0 when the problem has no place in the file (shown
    /// as `file: field: message`).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// Field path such as `sa[1].key` (0-based indices in file order);
    /// empty for TOML syntax errors.
    pub field: String,
    /// What was expected and what was found.
    pub message: String,
}

impl fmt::Display for Problem {
    /// `file:line:column: field: message`; `file: field: message` for a
    /// problem with no line (line 0: a port an imported `.cfg` got from the
    /// command-line options).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: ", self.file.display())?;
        } else {
            write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Error of the config layer. Its `Display` is one line per problem.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read config: {source}", path.display())]
    Read {
        /// File that was asked for.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not TOML, or does not have the schema's shape (unknown
    /// key, a table where an array of tables belongs, …). Decoding stops at
    /// the first such problem.
    #[error("{0}")]
    Syntax(Problem),
    /// Every semantic problem of the file (bad values, missing keys, broken
    /// cross-references), sorted by position; never empty.
    #[error("{}", join_lines(.0))]
    Invalid(Vec<Problem>),
}

impl ConfigError {
    /// The positioned problems (none for [`ConfigError::Read`]).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Syntax(p) => std::slice::from_ref(p),
            ConfigError::Invalid(ps) => ps,
        }
    }
}

/// Loads a config file of either kind: a DPDK ipsec-secgw `.cfg`
/// ([`dpdk::is_dpdk_cfg`], imported with `dpdk_opts`, its notices
/// returned) or secgw's TOML ([`load`], no notices; `dpdk_opts` must then
/// be empty, or the error says they belong to a `.cfg`).
pub fn load_any(path: &std::path::Path, dpdk_opts: &dpdk::ImportOptions) -> Result<(Config, Vec<dpdk::Notice>), ConfigError> {
    if dpdk::is_dpdk_cfg(path) {
        return dpdk::load(path, dpdk_opts);
    }
    if *dpdk_opts != dpdk::ImportOptions::default() {
        let message = "DPDK ipsec-secgw options are for a DPDK .cfg file (its name ending in .cfg), not for a TOML config".to_owned();
        return Err(ConfigError::Invalid(vec![Problem { file: path.to_path_buf(), line: 0, column: 0, field: dpdk_opts.given().join(", "), message }]));
    }
    load(path).map(|c| (c, Vec::new()))
}

fn join_lines(problems: &[Problem]) -> String {
    let lines: Vec<String> = problems.iter().map(Problem::to_string).collect();
    lines.join("\n")
}
