//! Any text as a DPDK ipsec-secgw `.cfg`: the import must never panic, and
//! an accepted file's TOML must load to the same config (the round trip
//! `secgw import-dpdk` promises). The first byte picks the port options.
#![no_main]
use libfuzzer_sys::fuzz_target;
use secgw::config::dpdk::{self, ImportOptions};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let mut opts = ImportOptions::default();
    if sel & 1 != 0 {
        opts.port_mask = Some(u64::from(sel >> 4));
    }
    if sel & 2 != 0 {
        opts.unprotected_mask = Some(u64::from((sel >> 2) & 3));
    }
    if sel & 4 != 0 {
        opts.interfaces.insert(0, "fz0".into());
        opts.eth_dest.insert(1, [2, 0, 0, 0, 0, 1]);
    }
    let source = Path::new("fuzz.cfg");
    if let Ok((imp, cfg)) = dpdk::import(text, source, &opts) {
        let again = secgw::config::parse(&imp.toml, source).expect("the import's TOML validates");
        assert_eq!(again, cfg);
        let _ = secgw::config::summary(&cfg);
        let _ = dpdk::describe_notices(&imp.notices);
    }
});
