//! secgw: an IPsec ESP (RFC 4303) security gateway over AF_XDP.
//!
//! The crate is layered as `../shared/DESIGN.md` §2 describes; each module
//! knows only the layers below it:
//! [`wire`] (checked header views) → [`esp`] (RFC 4303 rules) and [`crypto`]
//! (the cryptodev-like device API and its backends) → [`policy`] (SPD, SAD,
//! routes, neighbours) → [`io`] (ports) → [`dataplane`] (the worker loop) →
//! [`control`] (the control thread) → [`config`] (TOML). [`pktgen`] is the
//! traffic generator / sink of the testbed (`secgw-pktgen`), built on them.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod control;
pub mod crypto;
pub mod dataplane;
pub mod esp;
pub mod io;
pub mod pktgen;
pub mod policy;
pub mod testkit;
pub mod wire;
