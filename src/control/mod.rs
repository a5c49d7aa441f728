//! The control thread: builds the tables from the config, creates crypto
//! sessions, binds SAs to workers, starts the workers, serves stats and the
//! control socket (`protocol`, `socket`; `client` is `secgw ctl`'s side),
//! and stops everything cleanly. It never touches packets.

pub mod binding;
pub mod client;
pub mod keys;
pub mod protocol;
pub mod manager;
pub mod run;
pub mod socket;
pub mod stats;
pub mod tables;

pub use run::{run, RunOptions};

/// Errors of the control thread.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A crypto device call failed.
    #[error("crypto device: {0}")]
    Crypto(#[from] crate::crypto::CryptoError),
    /// Port setup failed.
    #[error("port: {0}")]
    Io(#[from] crate::io::IoError),
    /// The config asks for something this build does not do yet.
    #[error("{0}")]
    Unsupported(String),
    /// A worker failed to start or died.
    #[error("worker {worker}: {what}")]
    Worker {
        /// Worker id.
        worker: usize,
        /// What happened.
        what: String,
    },
}

impl From<binding::BindError> for ControlError {
    fn from(e: binding::BindError) -> Self {
        ControlError::Unsupported(e.to_string())
    }
}
