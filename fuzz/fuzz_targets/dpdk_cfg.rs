//! Any text as a DPDK ipsec-secgw `.cfg`: the import must never panic, and
//! an accepted file's TOML must load to the same config (the round trip
//! `secgw import-dpdk` promises). The first byte picks the port options,
//! the second the SA, port and reassembly options (values in and out of
//! range).
#![no_main]
use libfuzzer_sys::fuzz_target;
use secgw::config::dpdk::{self, ImportOptions};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let Some((&more, rest)) = rest.split_first() else { return };
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
    let v = u64::from(more >> 6);
    opts.esn = more & 1 != 0;
    opts.librte_ipsec = more & 2 != 0;
    if more & 4 != 0 {
        opts.replay_window = Some([0, 64, 65536, 65537][v as usize]);
    }
    if more & 8 != 0 {
        opts.mtu = Some([575, 576, 1400, 1986][v as usize]);
    }
    if more & 16 != 0 {
        opts.reassemble = Some([0, 1, 1024, 1025][v as usize]);
    }
    if more & 32 != 0 {
        opts.frag_ttl_ns = Some([1, 2_500_000_001, dpdk::MAX_FRAG_TTL_NS, u64::MAX][v as usize]);
    }
    let source = Path::new("fuzz.cfg");
    if let Ok((imp, cfg)) = dpdk::import(text, source, &opts) {
        let again = secgw::config::parse(&imp.toml, source).expect("the import's TOML validates");
        assert_eq!(again, cfg);
        let _ = secgw::config::summary(&cfg);
        let _ = dpdk::describe_notices(&imp.notices);
    }
});
