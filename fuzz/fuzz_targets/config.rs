//! Any text as a config file: must never panic; an accepted config must
//! summarise and bind without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(cfg) = secgw::config::parse(text, Path::new("fuzz.toml")) {
        let _ = secgw::config::summary(&cfg);
        let _ = secgw::config::warnings(&cfg);
        let _ = secgw::control::binding::bind(&cfg, 2);
    }
});
