//! DPDK ipsec-secgw `.cfg` import (`config::dpdk`): the sample configs
//! shipped with DPDK 22.11 (Debian's `dpdk-doc`, installed by
//! testbed/test.sh) import, every `sp`, `sa` and `rt` line of them is in the
//! result with the values the file gives (counted and read here with a
//! reading of the file of our own, not the importer's), `secgw check` lists
//! them, the TOML that `secgw import-dpdk` writes loads to the same config,
//! and each kind of mistake is reported at its line with its keyword.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use secgw::config::dpdk::{self, ImportOptions, NoticeKind, ACL_MAX_PRIORITY};
use secgw::config::{self, Action, Algorithm, Config, ConfigError, Direction, PortRole, SaMode};

const SAMPLES: &str = "/usr/share/dpdk/examples/ipsec-secgw";

/// A sample file of the installed dpdk-doc package; missing = a failure
/// (testbed/test.sh installs it), never a skip.
fn sample(name: &str) -> PathBuf {
    let p = Path::new(SAMPLES).join(name);
    assert!(
        p.is_file(),
        "{} is missing: install Debian's dpdk-doc package (apt-get install dpdk-doc; testbed/test.sh does)",
        p.display()
    );
    p
}

/// DPDK's four ports: 0 and 1 unprotected (`-p 0xf -u 0x3`, the sample's
/// documented command line).
fn opts() -> ImportOptions {
    let mut o = ImportOptions { port_mask: Some(0xf), unprotected_mask: Some(0x3), ..Default::default() };
    for i in 0..4u16 {
        o.interfaces.insert(i, format!("veth{i}"));
    }
    o
}

/// Our own reading of a `.cfg`: logical lines (comments cut, `\`
/// continuations joined with nothing in between), split in words.
fn logical(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap();
        if let Some(l) = line.strip_suffix('\\') {
            cur.push_str(l);
            continue;
        }
        cur.push_str(line);
        let words: Vec<String> = cur.split_whitespace().map(str::to_owned).collect();
        if !words.is_empty() {
            out.push(words);
        }
        cur.clear();
    }
    out
}

fn value<'a>(words: &'a [String], kw: &str) -> Option<&'a str> {
    words.iter().position(|w| w == kw).map(|i| words[i + 1].as_str())
}

fn key_bytes(s: &str) -> Vec<u8> {
    s.split(':').map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn import(name: &str) -> (Config, Vec<dpdk::Notice>, Vec<Vec<String>>) {
    let path = sample(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let (cfg, notices) = dpdk::parse(&text, &path, &opts()).unwrap_or_else(|e| panic!("{name} does not import:\n{e}"));
    (cfg, notices, logical(&text))
}

fn dir(w: &str) -> Direction {
    match w {
        "in" => Direction::Inbound,
        "out" => Direction::Outbound,
        _ => panic!("{w}"),
    }
}

/// Every sp, sa and rt line of both samples is in the result, field by
/// field, counted from the file independently.
#[test]
fn samples_import_with_every_line() {
    for name in ["ep0.cfg", "ep1.cfg"] {
        let (cfg, notices, lines) = import(name);
        let of = |kind: &str| lines.iter().filter(|w| w[0] == kind).cloned().collect::<Vec<_>>();
        let (sps, sas, rts) = (of("sp"), of("sa"), of("rt"));
        assert!(sps.len() >= 30 && sas.len() >= 16 && rts.len() >= 26, "{name}: {} sp, {} sa, {} rt", sps.len(), sas.len(), rts.len());

        // SAs: imported, or refused (only the NULL/NULL ones) and named.
        let refused: Vec<&dpdk::Notice> = notices.iter().filter(|n| n.kind == NoticeKind::Refused).collect();
        for w in &sas {
            let spi: u32 = w[2].parse().unwrap();
            let d = dir(&w[1]);
            let null_null = value(w, "cipher_algo") == Some("null") && value(w, "auth_algo") == Some("null");
            let got = cfg.sas.iter().find(|s| s.spi == spi && s.direction == d);
            if null_null {
                assert!(got.is_none(), "{name}: NULL/NULL SA {spi} imported");
                assert!(
                    refused.iter().any(|n| n.message.contains(&format!("sa {} {spi} refused", w[1])) && n.message.contains("RFC 4303 §3.2")),
                    "{name}: SA {spi} not named as refused: {refused:?}"
                );
                continue;
            }
            let sa = got.unwrap_or_else(|| panic!("{name}: SA {} {spi} missing", w[1]));
            assert_eq!(value(w, "cipher_algo"), Some("aes-128-cbc"), "the samples' other SAs");
            assert_eq!(sa.algorithm, Algorithm::Aes128CbcHmacSha1, "{name} SA {spi}");
            assert_eq!(*sa.key, key_bytes(value(w, "cipher_key").unwrap()), "{name} SA {spi} key");
            assert_eq!(*sa.auth_key, key_bytes(value(w, "auth_key").unwrap()), "{name} SA {spi} auth_key");
            match value(w, "mode").unwrap() {
                "transport" => assert_eq!(sa.mode, SaMode::Transport),
                m => {
                    assert_eq!(sa.mode, SaMode::Tunnel, "{m}");
                    assert_eq!(sa.tunnel_src, ip(value(w, "src").unwrap()), "{name} SA {spi}");
                    assert_eq!(sa.tunnel_dst, ip(value(w, "dst").unwrap()), "{name} SA {spi}");
                    assert_eq!(sa.tunnel_src.is_ipv6(), m == "ipv6-tunnel");
                }
            }
        }
        let imported = sas.iter().filter(|w| value(w, "cipher_algo") != Some("null")).count();
        assert_eq!(cfg.sas.len(), imported, "{name}: no SA from nowhere");
        assert_eq!(refused.len(), sas.len() - imported, "{name}: refusals");

        // Policies: one per sp line, in file order.
        assert_eq!(cfg.policies.len(), sps.len(), "{name}: sp count");
        for (w, p) in sps.iter().zip(&cfg.policies) {
            assert_eq!(p.direction, dir(&w[2]), "{w:?}");
            let (a, l) = value(w, "dst").unwrap().split_once('/').unwrap();
            assert_eq!(p.dst, (ip(a), l.parse().unwrap()), "{w:?}");
            assert_eq!(p.src.1, 0, "no src in the samples: any");
            assert_eq!(p.dst.0.is_ipv6(), w[1] == "ipv6");
            assert_eq!((p.src_ports, p.dst_ports), ((0, 65535), (0, 65535)));
            let pri: u32 = value(w, "pri").unwrap().parse().unwrap();
            assert_eq!(p.priority, ACL_MAX_PRIORITY - pri);
            match value(w, "protect") {
                Some(spi) => {
                    let spi: u32 = spi.parse().unwrap();
                    let ok = cfg.sas.iter().any(|s| s.spi == spi && s.direction == p.direction);
                    let want = if ok { Action::Protect(spi) } else { Action::Discard };
                    assert_eq!(p.action, want, "{w:?}: a policy of a refused SA is discard");
                }
                None if w.iter().any(|x| x == "bypass") => assert_eq!(p.action, Action::Bypass),
                None => assert_eq!(p.action, Action::Discard),
            }
        }

        // Routes: one per rt line, on-link, host bits cleared as rte_lpm does.
        assert_eq!(cfg.routes.len(), rts.len(), "{name}: rt count");
        for (w, r) in rts.iter().zip(&cfg.routes) {
            let (a, l) = value(w, "dst").unwrap().split_once('/').unwrap();
            let len: u8 = l.parse().unwrap();
            assert_eq!(r.prefix.1, len);
            let net = secgw::policy::spd::Prefix::new(ip(a), len).addr();
            assert_eq!(r.prefix.0, net, "{w:?}");
            assert_eq!(cfg.ports[r.port].name, format!("port{}", value(w, "port").unwrap()));
            assert_eq!(r.via, None);
        }

        // Ports and roles from -p 0xf -u 0x3; own addresses derived from the SAs.
        let roles: Vec<PortRole> = cfg.ports.iter().map(|p| p.role).collect();
        assert_eq!(roles, [PortRole::Unprotected, PortRole::Unprotected, PortRole::Protected, PortRole::Protected]);
        let own0: Vec<IpAddr> = cfg.ports[0].addresses.iter().map(|a| a.0).collect();
        let (v4, v6) = if name == "ep0.cfg" { ("172.16.1.5", "1111:1111:1111:1111:1111:1111:1111:5555") } else { ("172.16.2.5", "2222:2222:2222:2222:2222:2222:2222:5555") };
        assert_eq!(own0, [ip(v4), ip(v6)], "{name} port 0");
    }
}

/// The duplicate sp lines of the samples are kept (rte_acl keeps both) and
/// warned about; DPDK's `pri` (higher wins) keeps its order in secgw's
/// priority (lower wins).
#[test]
fn duplicates_and_priority_order() {
    let (cfg, notices, _) = import("ep0.cfg");
    let dups: Vec<&dpdk::Notice> = notices.iter().filter(|n| n.keyword == "sp" && n.message.contains("repeats")).collect();
    assert_eq!(dups.len(), 2, "{dups:?}");
    let p210 = cfg.policies.iter().filter(|p| p.dst == (ip("192.168.210.0"), 24)).count();
    assert_eq!(p210, 2);

    let text = "sa out 7 aead_algo aes-128-gcm aead_key 01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:10:11:12:13:14 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n\
                sp ipv4 out esp protect 7 pri 10 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\n\
                sp ipv4 out esp discard pri 1 dst 192.168.0.0/16 sport 0:65535 dport 0:65535\n\
                rt ipv4 dst 10.0.0.2/32 port 0\n";
    let o = ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() };
    let (cfg, _) = dpdk::parse(text, Path::new("t.cfg"), &o).unwrap();
    assert!(cfg.policies[0].priority < cfg.policies[1].priority, "pri 10 beats pri 1 in rte_acl, so it must here");
    let sa = &cfg.sas[0];
    assert_eq!(sa.algorithm, Algorithm::Aes128Gcm);
    assert_eq!(sa.key.len(), 20, "DPDK's aead_key is key ‖ salt, as ours");
    assert_eq!(sa.key[19], 0x14);
}

/// What `secgw import-dpdk` writes is a TOML file that `secgw check`
/// accepts and that loads to the same config as the .cfg.
#[test]
fn round_trip_through_toml() {
    for name in ["ep0.cfg", "ep1.cfg"] {
        let path = sample(name);
        let text = std::fs::read_to_string(&path).unwrap();
        let (imp, cfg) = dpdk::import(&text, &path, &opts()).unwrap();
        let again = config::parse(&imp.toml, &path).unwrap();
        assert_eq!(again, cfg, "{name}");
        let (loaded, _) = config::load_any(&path, &opts()).unwrap();
        assert_eq!(loaded.dpdk_import, Some(opts()), "{name}: a loaded .cfg keeps its import options for a reload");
        assert_eq!(Config { dpdk_import: None, ..loaded }, cfg, "{name}");
        // Through the binary and a file, as a user does it.
        let dir = std::env::temp_dir().join(format!("secgw-dpdk-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let toml = dir.join(name.replace(".cfg", ".toml"));
        let mut args = vec!["import-dpdk".to_owned(), path.display().to_string(), "-p".into(), "0xf".into(), "-u".into(), "0x3".into()];
        for i in 0..4 {
            args.extend(["--port".to_owned(), format!("{i}=veth{i}")]);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_secgw")).args(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(&toml, &out.stdout).unwrap();
        let check = Command::new(env!("CARGO_BIN_EXE_secgw")).arg("check").arg(&toml).output().unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
        let from_file = config::load(&toml).unwrap();
        assert_eq!(Config { source: path.clone(), dpdk_import: cfg.dpdk_import.clone(), ..from_file }, cfg, "{name} via the binary");
        // --strict: the NULL/NULL refusals make it exit 3, output still complete.
        let strict = Command::new(env!("CARGO_BIN_EXE_secgw")).args(&args).arg("--strict").output().unwrap();
        assert_eq!(strict.status.code(), Some(3));
        assert_eq!(strict.stdout, out.stdout);
        // One port given twice (as interface or as destination MAC) is an
        // error, not "the last one wins".
        for twice in [["--port", "1=other"], ["--eth-dest", "0,02:00:00:00:00:09"]] {
            let mut a = args.clone();
            if twice[0] == "--eth-dest" {
                a.extend(["--eth-dest".to_owned(), "0,02:00:00:00:00:01".into()]);
            }
            a.extend(twice.map(str::to_owned));
            let o = Command::new(env!("CARGO_BIN_EXE_secgw")).args(&a).output().unwrap();
            assert_eq!(o.status.code(), Some(1), "{twice:?}");
            assert!(o.stdout.is_empty());
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains(twice[0]) && err.contains("given twice"), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `secgw import-dpdk` also prints what `secgw check` warns about in the
/// result, on the .cfg's lines: here a protect entry that a covering
/// discard entry (DPDK's higher `pri` wins) makes dead, the covering one
/// named by its line too.
#[test]
fn import_prints_check_warnings() {
    let dir = std::env::temp_dir().join(format!("secgw-dpdk-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dead.cfg");
    let text = "sa out 700 aead_algo aes-128-gcm aead_key 01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:10:11:12:13:14 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n\
                sp ipv4 out esp protect 700 pri 10 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\n\
                sp ipv4 out esp discard pri 100 dst 192.168.0.0/16 sport 0:65535 dport 0:65535\n\
                rt ipv4 dst 10.0.0.2/32 port 0\n";
    std::fs::write(&path, text).unwrap();
    let args = ["-p", "1", "-p", "3", "-u", "2", "-u", "1", "--port", "0=veth0", "--port", "1=veth1"];
    let out = Command::new(env!("CARGO_BIN_EXE_secgw")).arg("import-dpdk").arg(&path).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The covering entry's priority as the .cfg gives it (helper-90 saw
    // secgw's converted 536870811).
    let want = format!("warning: {}:2:1: policy[0]: never matches: policy[1] (line 3, pri 100)", path.display());
    assert!(err.lines().any(|l| l.starts_with(&want) && l.ends_with("comes first and covers all its selectors")), "wanted {want:?} in:\n{err}");
    // `check` says the same.
    let check = Command::new(env!("CARGO_BIN_EXE_secgw")).arg("check").arg(&path).args(args).output().unwrap();
    assert!(String::from_utf8_lossy(&check.stdout).contains(&want));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `secgw check ep0.cfg -p … -u …` lists every SA (imported or refused),
/// every policy and every route of the file.
#[test]
fn check_lists_everything() {
    let path = sample("ep0.cfg");
    let lines = logical(&std::fs::read_to_string(&path).unwrap());
    let out = Command::new(env!("CARGO_BIN_EXE_secgw")).arg("check").arg(&path).args(["-p", "0xf", "-u", "0x3"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let count = |k: &str| lines.iter().filter(|w| w[0] == k).count();
    let refused = lines.iter().filter(|w| w[0] == "sa" && value(w, "cipher_algo") == Some("null")).count();
    assert!(stdout.contains(&format!("SAs ({}):", count("sa") - refused)), "{stdout}");
    assert!(stdout.contains(&format!("refused by the import ({refused}):")), "{stdout}");
    assert!(stdout.contains(&format!("policies ({}):", count("sp"))), "{stdout}");
    assert!(stdout.contains(&format!("routes ({}):", count("rt"))), "{stdout}");
    for w in lines.iter().filter(|w| w[0] == "sa") {
        let spi = &w[2];
        let listed = stdout.lines().any(|l| l.trim_start().starts_with(&format!("SPI {spi} ")) || l.contains(&format!("sa {} {spi} refused", w[1])));
        assert!(listed, "SA {spi} not in the output");
    }
    assert!(stdout.contains("own addresses are derived"));
    assert!(stdout.contains("172.16.1.5/32"));
}

fn problems(text: &str) -> Vec<config::Problem> {
    let o = ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() };
    match dpdk::parse(text, Path::new("bad.cfg"), &o) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e @ ConfigError::Read { .. }) => panic!("{e}"),
        Err(e) => e.problems().to_vec(),
    }
}

const GOOD_SA: &str = "sa out 5 cipher_algo aes-128-cbc cipher_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 auth_algo sha1-hmac auth_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2";
const TAIL: &str = "sp ipv4 out esp protect 5 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32 port 0\n";

/// Each mistake at its file:line with its keyword.
#[test]
fn errors_name_line_and_keyword() {
    let at = |text: &str, line: usize, kw: &str, msg: &str| {
        let ps = problems(text);
        assert!(
            ps.iter().any(|p| p.line == line && p.field == kw && p.message.contains(msg) && p.file == Path::new("bad.cfg")),
            "wanted line {line} {kw} {msg:?}, got {:#?}",
            ps.iter().map(ToString::to_string).collect::<Vec<_>>()
        );
    };
    // Unknown keyword (in the sa, and an unknown line type).
    at(&format!("# c\n{GOOD_SA} colour blue\n{TAIL}"), 2, "colour", "unknown sa keyword");
    at(&format!("{GOOD_SA}\nroute ipv4 dst 10.0.0.0/8 port 0\n{TAIL}"), 2, "route", "unknown line type");
    // Bad key length: 15 bytes for AES-128-CBC, on the continued line.
    at(
        &format!("sa out 5 cipher_algo aes-128-cbc \\\ncipher_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 auth_algo sha1-hmac auth_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n{TAIL}"),
        2,
        "cipher_key",
        "expected 16 bytes for aes-128-cbc",
    );
    // Two AES-GCM SAs under one key: found by the TOML checker, placed on
    // the second SA's line and named by its keyword (aead_key, not cipher_key).
    let k = "1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14";
    at(
        &format!("sa out 5 aead_algo aes-128-gcm aead_key {k} mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\nsa in 6 aead_algo aes-128-gcm aead_key {k} mode ipv4-tunnel src 10.0.0.2 dst 10.0.0.1\n{TAIL}"),
        2,
        "aead_key",
        "the same key material as outbound SA 5 (line 1)",
    );
    // AES-GMAC is DPDK's auth_algo aes-gmac: its key is the auth_key.
    let gmac = |dir: &str, spi: u32, ends: &str| format!("sa {dir} {spi} cipher_algo null auth_algo aes-gmac auth_key {k} mode ipv4-tunnel {ends}\n");
    at(
        &format!("{}{}{TAIL}", gmac("out", 5, "src 10.0.0.1 dst 10.0.0.2"), gmac("in", 6, "src 10.0.0.2 dst 10.0.0.1")),
        2,
        "auth_key",
        "the same key material as outbound SA 5 (line 1)",
    );
    // Missing continuation target: a '\' on the last line.
    at(&format!("{TAIL}{GOOD_SA} \\\n"), 3, "\\", "nothing follows");
    at(&format!("{TAIL}{GOOD_SA} \\"), 3, "\\", "nothing follows");
    // Something after the '\'.
    at(&format!("{GOOD_SA} \\ x\n{TAIL}"), 1, "\\", "nothing may follow");
    // What DPDK refuses too.
    at(&format!("{GOOD_SA}\nsp ipv4 out protect 5 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32 port 0\n"), 2, "esp", "missing \"esp\"");
    at(&format!("{GOOD_SA} aead_algo aes-128-gcm aead_key 1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14\n{TAIL}"), 1, "aead_algo", "excludes");
    at(&format!("{GOOD_SA} mode transport\n{TAIL}"), 1, "mode", "given twice");
    at(&format!("sa out 5 cipher_algo aes-128-cbc cipher_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n{TAIL}"), 1, "auth_algo", "missing auth_algo");
    at(&format!("{GOOD_SA}\nsp ipv4 out esp protect 5 dst 192.168.1.0/24 proto 6:15 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32 port 0\n"), 2, "proto", "partial protocol mask");
    // A policy naming no SA: the TOML validation's problem, mapped back.
    at(&format!("{GOOD_SA}\nsp ipv4 out esp protect 6 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32 port 0\n"), 2, "protect", "no SA has it");
    at(&format!("{GOOD_SA}\nsp ipv4 out esp protect 4294967295 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32 port 0\n"), 2, "protect", "DPDK's BYPASS value");
    // A route of length 0, written or implied (no /len): DPDK exits on it.
    at(&format!("{GOOD_SA}\nrt ipv4 dst 0.0.0.0/0 port 0\n{TAIL}"), 2, "dst", "prefix length 0");
    at(&format!("{GOOD_SA}\nrt ipv4 dst 1.2.3.4 port 0\n{TAIL}"), 2, "dst", "prefix length 0");
    // A port range without tcp/udp: secgw's rule, at the sp line.
    at(&format!("{GOOD_SA}\nsp ipv4 out esp protect 5 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 80:80\nrt ipv4 dst 10.0.0.2/32 port 0\n"), 2, "dport", "needs protocol");
}

/// Unsupported types refuse the SA (named with line and keyword), its
/// policies become discard, and the rest of the file still imports.
#[test]
fn unsupported_sa_is_refused_not_half_configured() {
    let text = format!(
        "{GOOD_SA}\n\
         sa out 6 aead_algo aes-128-gcm aead_key 1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14 \\\n\
         mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2 type inline-protocol-offload port_id 0\n\
         sa out 7 cipher_algo 3des-cbc cipher_key 1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14:15:16:17:18 auth_algo sha1-hmac auth_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n\
         sa out 8 cipher_algo null auth_algo sha256-hmac auth_key 1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14:15:16:17:18:19:1a:1b:1c:1d:1e:1f:20 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2 reassembly_en\n\
         sp ipv4 out esp protect 6 pri 5 dst 192.168.2.0/24 sport 0:65535 dport 0:65535\n\
         sp ipv4 out esp bypass pri 1 dst 192.168.0.0/16 sport 0:65535 dport 0:65535\n\
         {TAIL}"
    );
    let o = ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() };
    let (cfg, notices) = dpdk::parse(&text, Path::new("x.cfg"), &o).unwrap();
    let spis: Vec<u32> = cfg.sas.iter().map(|s| s.spi).collect();
    assert_eq!(spis, [5], "only the supported SA");
    let refused: Vec<(usize, &str)> = notices.iter().filter(|n| n.kind == NoticeKind::Refused).map(|n| (n.line, n.keyword.as_str())).collect();
    assert_eq!(refused, [(3, "type"), (4, "cipher_algo"), (5, "reassembly_en")], "{notices:#?}");
    assert!(notices.iter().any(|n| n.to_string().starts_with("x.cfg:3: refused: type: sa out 6 refused")));
    assert_eq!(cfg.policies[0].action, Action::Discard, "the refused SA's policy drops, not bypasses");
    assert_eq!(cfg.policies[1].action, Action::Bypass);
    assert_eq!(cfg.policies[2].action, Action::Protect(5));
}

/// An `sp` line without `sport` or `dport` has DPDK's range 0:0 there (its
/// ACL rule starts zeroed: only port bytes 0 match), not any port: with
/// TCP or UDP it is imported as port 0, with a warning; without, it cannot
/// be said in secgw's selectors and is refused, so a bypass that matches
/// nothing in DPDK does not send a protected subnet's traffic in the clear
/// (found by helper-96). An `sa` line's `esn N` is warned about where DPDK
/// would not apply it, as `-e` is.
#[test]
fn absent_ports_are_dpdks_zero_range_and_esn_needs_the_librte_ipsec_path() {
    let text = format!(
        "{GOOD_SA} esn 5\n\
         sp ipv4 out esp bypass pri 5 dst 192.168.1.10/32\n\
         sp ipv4 out esp bypass pri 4 dst 192.168.1.11/32 proto 17:255 dport 500:500\n\
         sp ipv4 out esp bypass pri 3 dst 192.168.1.12/32 proto 6:255\n\
         sp ipv4 out esp bypass pri 2 dst 192.168.1.13/32 proto 1:255 sport 0:65535\n\
         {TAIL}"
    );
    let o = ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() };
    let (cfg, notices) = dpdk::parse(&text, Path::new("x.cfg"), &o).unwrap();
    let kinds: Vec<(usize, &str, NoticeKind)> = notices.iter().filter(|n| n.line > 0).map(|n| (n.line, n.keyword.as_str(), n.kind)).collect();
    assert_eq!(
        kinds,
        [(1, "esn", NoticeKind::Warning), (2, "sport", NoticeKind::Refused), (3, "sport", NoticeKind::Warning), (4, "sport", NoticeKind::Warning), (5, "dport", NoticeKind::Refused)],
        "{notices:#?}"
    );
    let text_of = |line: usize| notices.iter().find(|n| n.line == line).unwrap().to_string();
    assert!(text_of(1).contains("DPDK applies esn on its librte_ipsec path only"), "{}", text_of(1));
    assert!(text_of(2).starts_with("x.cfg:2: refused: sport: no sport and dport: DPDK's range is then 0:0"), "{}", text_of(2));
    assert!(text_of(2).contains("the line is left out"), "{}", text_of(2));
    assert!(text_of(5).contains("no dport:"), "{}", text_of(5));
    // Left out: lines 2 and 5; kept: 3 and 4 with port 0 where absent, and TAIL's protect.
    type Ports = (u16, u16);
    let pol: Vec<(String, Ports, Ports)> = cfg.policies.iter().map(|p| (p.dst.0.to_string(), p.src_ports, p.dst_ports)).collect();
    assert_eq!(
        pol,
        [("192.168.1.11".into(), (0, 0), (500, 500)), ("192.168.1.12".into(), (0, 0), (0, 0)), ("192.168.1.0".into(), (0, 65535), (0, 65535))],
        "{notices:#?}"
    );
    // With -l (or --reassemble), DPDK applies esn: no warning.
    let o = ImportOptions { librte_ipsec: true, ..o };
    let (_, notices) = dpdk::parse(&text, Path::new("x.cfg"), &o).unwrap();
    assert!(!notices.iter().any(|n| n.keyword == "esn"), "{notices:#?}");
}

/// `rt` as DPDK's rt.c reads it: no `port` is port 0, `src A/L` (in the
/// guide's syntax) is ignored; both warned (helper-96: both were errors).
/// And an `sa` line's `src`/`dst` before its `mode`, which sa.c drops, is
/// warned about.
#[test]
fn rt_without_port_is_port_0_and_its_src_is_ignored() {
    let text = format!("{GOOD_SA}\nsp ipv4 out esp protect 5 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32\nrt ipv4 src 10.9.0.0/16 dst 192.168.1.0/24 port 1\n");
    let o = ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() };
    let (cfg, notices) = dpdk::parse(&text, Path::new("x.cfg"), &o).unwrap();
    let warned: Vec<(usize, &str)> = notices.iter().filter(|n| n.kind == NoticeKind::Warning && n.line > 0).map(|n| (n.line, n.keyword.as_str())).collect();
    assert_eq!(warned, [(3, "port"), (4, "src")], "{notices:#?}");
    let routes: Vec<(String, String)> = cfg.routes.iter().map(|r| (format!("{}/{}", r.prefix.0, r.prefix.1), cfg.ports[r.port].name.clone())).collect();
    assert_eq!(routes, [("10.0.0.2/32".to_string(), "port0".to_string()), ("192.168.1.0/24".to_string(), "port1".to_string())]);
    // An sa's src/dst before its mode: DPDK drops them; warned.
    let early = "sa out 5 cipher_algo aes-128-cbc cipher_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 auth_algo sha1-hmac auth_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 src 10.0.0.1 mode ipv4-tunnel dst 10.0.0.2";
    let (cfg, notices) = dpdk::parse(&text.replace(GOOD_SA, early), Path::new("x.cfg"), &o).unwrap();
    assert_eq!(cfg.sas[0].tunnel_src.to_string(), "10.0.0.1");
    let early_notes: Vec<String> = notices.iter().filter(|n| n.line == 1).map(|n| n.to_string()).collect();
    assert_eq!(early_notes.len(), 1, "{early_notes:?}");
    assert!(early_notes[0].starts_with("x.cfg:1: warning: src: src before mode: DPDK's sa.c ignores"), "{early_notes:?}");
    // A bad src is still an error at its line.
    let e = dpdk::parse(&text.replace("10.9.0.0/16", "10.9.0.0/33"), Path::new("x.cfg"), &o).unwrap_err().to_string();
    assert!(e.contains("x.cfg:4") && e.contains("src"), "{e}");
}

/// A refusal neither hides a duplicate SPI nor takes the policy of an
/// imported SA that shares the SPI (found by the trial user).
#[test]
fn refusals_do_not_hide_duplicates_or_disable_a_shared_spi() {
    const K: &str = "1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14";
    // Outbound SPI 5000 twice, the second copy refused: still a duplicate.
    let text = format!(
        "sa out 5000 aead_algo aes-128-gcm aead_key {K} mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n\
         sa out 5000 cipher_algo null auth_algo null mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n\
         sp ipv4 out esp protect 5000 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32 port 0\n"
    );
    let ps = problems(&text);
    assert!(ps.iter().any(|p| p.line == 2 && p.field == "sa" && p.message.contains("duplicate out SA with SPI 5000 (first at line 1)")), "{ps:#?}");
    // Inbound SPI 8 towards two of our addresses, the second refused: the
    // policy still protects with the first.
    let text = format!(
        "sa in 8 aead_algo aes-128-gcm aead_key {K} mode ipv4-tunnel src 10.0.0.2 dst 10.0.0.1\n\
         sa in 8 cipher_algo null auth_algo null mode ipv4-tunnel src 10.0.0.3 dst 10.0.0.5\n\
         sp ipv4 in esp protect 8 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.0/24 port 0\nrt ipv4 dst 192.168.1.0/24 port 1\n"
    );
    let o = ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() };
    let (cfg, notices) = dpdk::parse(&text, Path::new("x.cfg"), &o).unwrap();
    assert_eq!(cfg.sas.len(), 1);
    assert_eq!(cfg.policies[0].action, Action::Protect(8), "{notices:#?}");
    assert!(notices.iter().any(|n| n.kind == NoticeKind::Refused && n.line == 2));
    // esn N above 2^63−1 (TOML's largest integer) still imports.
    let text = format!("sa out 5 aead_algo aes-128-gcm aead_key {K} mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2 esn 18446744073709551000\n{TAIL}");
    let (cfg, _) = dpdk::parse(&text, Path::new("x.cfg"), &o).unwrap();
    assert_eq!((cfg.sas[0].esn, cfg.sas[0].first_seq), (true, 18446744073709551000));
}

/// neigh → the port's peer_mac; --eth-dest overrides it; -u absent infers
/// the unprotected port from the route to the SA's peer; an address
/// without /len is /0 as in DPDK; flow-direction is accepted and warned.
#[test]
fn ports_neigh_and_inference() {
    let text = format!(
        "{GOOD_SA} flow-direction 0 1\nneigh port 0 02:00:00:00:00:aa\nneigh port 1 02:00:00:00:00:bb\n\
         sp ipv4 out esp protect 5 pri 1 src 192.168.9.1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32 port 0\nrt ipv4 dst 192.168.9.0/24 port 1\n"
    );
    let mut o = ImportOptions::default();
    o.eth_dest.insert(1, [2, 0, 0, 0, 0, 0xcc]);
    o.interfaces.insert(0, "wan0".into());
    let (cfg, notices) = dpdk::parse(&text, Path::new("n.cfg"), &o).unwrap();
    assert_eq!(cfg.ports.len(), 2);
    assert_eq!(cfg.ports[0].role, PortRole::Unprotected);
    assert_eq!(cfg.ports[1].role, PortRole::Protected);
    assert_eq!(cfg.ports[0].interface, "wan0");
    assert_eq!(cfg.ports[1].interface, "dpdk1");
    assert_eq!(cfg.ports[0].peer_mac, Some([2, 0, 0, 0, 0, 0xaa]));
    assert_eq!(cfg.ports[1].peer_mac, Some([2, 0, 0, 0, 0, 0xcc]));
    assert_eq!(cfg.ports[0].addresses, [(ip("10.0.0.1"), 32)]);
    assert_eq!(cfg.policies[0].src, (ip("0.0.0.0"), 0), "DPDK: no /len = /0");
    for kw in ["flow-direction", "src", "-u", "--port"] {
        assert!(notices.iter().any(|n| n.keyword == kw && n.kind == NoticeKind::Warning), "{kw}: {notices:#?}");
    }
}

/// TOML and .cfg options are not mixed up.
#[test]
fn options_only_for_cfg() {
    let toml = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/ep0.toml");
    assert!(config::load_any(&toml, &ImportOptions::default()).is_ok());
    let e = config::load_any(&toml, &opts()).unwrap_err().to_string();
    assert!(e.contains("ep0.toml: -p, -u, --port: DPDK ipsec-secgw options are for a DPDK .cfg file"), "{e}");
}

/// The port of each tunnel SA's own address is the one its peer routes
/// by, longest prefix first, with a repeated prefix replacing the first,
/// over many `rt` and `sa` lines (the import indexes routes by prefix).
#[test]
fn own_addresses_follow_the_longest_route_to_each_peer() {
    const N: usize = 2000;
    let mut text = String::from("rt ipv4 dst 10.2.0.0/16 port 1\n");
    for i in 0..N {
        let (hi, lo) = (i / 250, i % 250 + 1);
        text += &GOOD_SA.replace("sa out 5 ", &format!("sa out {} ", 100 + i)).replace("src 10.0.0.1 dst 10.0.0.2", &format!("src 10.1.{hi}.{lo} dst 10.2.{hi}.{lo}"));
        text.push('\n');
        // Every third peer: a /32 by port 1 first, replaced by port 0.
        if i % 3 == 0 {
            text += &format!("rt ipv4 dst 10.2.{hi}.{lo}/32 port 1\nrt ipv4 dst 10.2.{hi}.{lo}/32 port 0\n");
        }
    }
    text += "sp ipv4 out esp protect 100 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\n";
    text += "rt ipv4 dst 192.168.1.0/24 port 2\n";
    // Ports 0 and 1 unprotected (the SAs' peers), 2 protected.
    let o = ImportOptions { port_mask: Some(7), unprotected_mask: Some(3), ..Default::default() };
    let (cfg, notices) = dpdk::parse(&text, Path::new("many.cfg"), &o).unwrap_or_else(|e| panic!("{e}"));
    let on = |port: usize| -> std::collections::BTreeSet<IpAddr> { cfg.ports[port].addresses.iter().map(|a| a.0).collect() };
    let (p0, p1) = (on(0), on(1));
    for i in 0..N {
        let own = ip(&format!("10.1.{}.{}", i / 250, i % 250 + 1));
        let (want, other) = if i % 3 == 0 { (&p0, &p1) } else { (&p1, &p0) };
        assert!(want.contains(&own) && !other.contains(&own), "SA {}: {own} on the wrong port", 100 + i);
    }
    let replaced = notices.iter().filter(|n| n.keyword == "rt" && n.message.contains("repeats the one at line")).count();
    assert_eq!(replaced, N.div_ceil(3), "one notice per repeated prefix");
}

/// A message that quotes another line (the SA a policy names, the first
/// of two duplicates) quotes the `.cfg` line, not a line of the TOML the
/// import made.
#[test]
fn lines_quoted_in_messages_are_cfg_lines() {
    // Line 1: outbound SA 5; line 2: an inbound policy naming it.
    let text = format!("{GOOD_SA}\nsp ipv4 in esp protect 5 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\nrt ipv4 dst 10.0.0.2/32 port 0\n");
    let ps = problems(&text);
    let p = ps.iter().find(|p| p.message.contains("SPI 5 is outbound")).unwrap_or_else(|| panic!("{ps:#?}"));
    assert_eq!(p.line, 2, "{p:?}");
    assert!(p.message.contains("(line 1)"), "the SA's own .cfg line: {}", p.message);
}

/// Without -u, unprotected ports are inferred from the routes to tunnel
/// SAs' peers; a file with none to infer from is told to give -u.
#[test]
fn no_unprotected_port_to_infer_asks_for_the_mask() {
    let text = "sa out 5 aead_algo aes-128-gcm aead_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 mode transport\n\
                sp ipv4 out esp protect 5 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\n\
                rt ipv4 dst 192.168.1.0/24 port 0\n";
    let o = ImportOptions { port_mask: Some(3), ..Default::default() };
    let e = dpdk::parse(text, Path::new("t.cfg"), &o).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("-u") && e.contains("give -u MASK") && !e.contains("found 2 protected"), "{e}");
}

/// DPDK's AES-192 keywords (sa.c: `aes-192-cbc` with a 24-byte key,
/// `aes-192-ctr` and `aes-192-gcm` with 24 bytes ‖ 4-byte nonce or salt)
/// import as secgw's AES-192 algorithms with the key material as given,
/// outbound and inbound; a 16-byte key under `aes-192-cbc` is refused at
/// its keyword; `aes-192-ccm` imports as AES-192-CCM with the first 3 of
/// DPDK's 4 trailing key bytes as salt (lib/ipsec's `aead_ccm_iv_fill`;
/// RFC 4309 §7.1).
/// The SAs `text` imports to (port mask 3, port 0 unprotected), with no
/// refusal: (SPI, direction, algorithm) each, their keys and auth keys.
#[allow(clippy::type_complexity)]
fn imported_sas(text: &str) -> (Vec<(u32, Direction, &'static str)>, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let o = ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() };
    let (cfg, notices) = dpdk::parse(text, Path::new("x.cfg"), &o).unwrap();
    assert!(!notices.iter().any(|n| n.kind == NoticeKind::Refused), "{notices:#?}");
    let got = cfg.sas.iter().map(|s| (s.spi, s.direction, s.algorithm.name())).collect();
    (got, cfg.sas.iter().map(|s| s.key.to_vec()).collect(), cfg.sas.iter().map(|s| s.auth_key.to_vec()).collect())
}

#[test]
fn aes_192_imports() {
    let k = |n: usize, seed: usize| (0..n).map(|i| format!("{:x}", (i * 7 + seed) & 0xff)).collect::<Vec<_>>().join(":");
    let sha1 = format!("auth_algo sha1-hmac auth_key {}", k(20, 1));
    let sha256 = format!("auth_algo sha256-hmac auth_key {}", k(32, 2));
    let ends = "mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2";
    let text = format!(
        "sa out 5 cipher_algo aes-192-cbc cipher_key {} {sha1} {ends}\n\
         sa out 6 cipher_algo aes-192-cbc cipher_key {} {sha256} {ends}\n\
         sa out 7 cipher_algo aes-192-ctr cipher_key {} {sha1} {ends}\n\
         sa out 8 cipher_algo aes-192-ctr cipher_key {} {sha256} {ends}\n\
         sa out 9 aead_algo aes-192-gcm aead_key {} {ends}\n\
         sa in 10 cipher_algo aes-192-ctr cipher_key {} {sha256} mode ipv4-tunnel src 10.0.0.2 dst 10.0.0.1\n\
         {TAIL}",
        k(24, 3),
        k(24, 4),
        k(28, 5),
        k(28, 6),
        k(28, 7),
        k(28, 8)
    );
    let (got, keys, auth) = imported_sas(&text);
    let out = Direction::Outbound;
    assert_eq!(
        got,
        [
            (5, out, "aes-192-cbc-hmac-sha1"),
            (6, out, "aes-192-cbc-hmac-sha256"),
            (7, out, "aes-192-ctr-hmac-sha1"),
            (8, out, "aes-192-ctr-hmac-sha256"),
            (9, out, "aes-192-gcm"),
            (10, Direction::Inbound, "aes-192-ctr-hmac-sha256")
        ]
    );
    assert_eq!(keys, [(24, 3), (24, 4), (28, 5), (28, 6), (28, 7), (28, 8)].map(|(n, seed)| key_bytes(&k(n, seed))));
    let (a1, a2) = (key_bytes(&k(20, 1)), key_bytes(&k(32, 2)));
    assert_eq!(auth, [a1.clone(), a2.clone(), a1, a2.clone(), Vec::new(), a2]);
    let ccm = format!("sa out 5 aead_algo aes-192-ccm aead_key {} {ends}\n{TAIL}", k(28, 7));
    let o = ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() };
    let (cfg, notices) = dpdk::parse(&ccm, Path::new("x.cfg"), &o).unwrap();
    assert!(!notices.iter().any(|n| n.kind == NoticeKind::Refused), "{notices:#?}");
    assert_eq!(cfg.sas.len(), 1);
    assert_eq!(cfg.sas[0].algorithm.name(), "aes-192-ccm");
    assert_eq!(cfg.sas[0].key.to_vec(), key_bytes(&k(28, 7))[..27].to_vec(), "AES-192 key ‖ 3-byte salt");
    assert_eq!(cfg.sas[0].icv_len, 16, "DPDK's CCM digest is 16 bytes");
    let ps = problems(&format!("sa out 5 cipher_algo aes-192-cbc cipher_key {} {sha1} {ends}\n{TAIL}", k(16, 3)));
    assert!(ps.iter().any(|p| p.line == 1 && p.field == "cipher_key" && p.message.contains("expected 24 bytes for aes-192-cbc")), "{ps:#?}");
}

/// DPDK's `sha384-hmac` / `sha512-hmac` (48- / 64-byte auth keys) import as
/// HMAC-SHA-384-192 / HMAC-SHA-512-256 (RFC 4868) with AES-CBC, AES-CTR
/// and NULL; a short auth key names the line and field.
#[test]
fn sha384_sha512_imports() {
    let k = |n: usize, seed: usize| (0..n).map(|i| format!("{:x}", (i * 5 + seed) & 0xff)).collect::<Vec<_>>().join(":");
    let sha384 = format!("auth_algo sha384-hmac auth_key {}", k(48, 1));
    let sha512 = format!("auth_algo sha512-hmac auth_key {}", k(64, 2));
    let ends = "mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2";
    let text = format!(
        "sa out 5 cipher_algo aes-128-cbc cipher_key {} {sha384} {ends}\n\
         sa out 6 cipher_algo aes-256-cbc cipher_key {} {sha512} {ends}\n\
         sa out 7 cipher_algo aes-192-ctr cipher_key {} {sha384} {ends}\n\
         sa out 8 cipher_algo null {sha512} {ends}\n\
         sa in 9 cipher_algo aes-256-ctr cipher_key {} {sha512} mode ipv4-tunnel src 10.0.0.2 dst 10.0.0.1\n\
         {TAIL}",
        k(16, 3),
        k(32, 4),
        k(28, 5),
        k(36, 6)
    );
    let (got, keys, auth) = imported_sas(&text);
    let out = Direction::Outbound;
    assert_eq!(
        got,
        [
            (5, out, "aes-128-cbc-hmac-sha384"),
            (6, out, "aes-256-cbc-hmac-sha512"),
            (7, out, "aes-192-ctr-hmac-sha384"),
            (8, out, "null-hmac-sha512"),
            (9, Direction::Inbound, "aes-256-ctr-hmac-sha512")
        ]
    );
    assert_eq!(keys, [key_bytes(&k(16, 3)), key_bytes(&k(32, 4)), key_bytes(&k(28, 5)), Vec::new(), key_bytes(&k(36, 6))]);
    let (a384, a512) = (key_bytes(&k(48, 1)), key_bytes(&k(64, 2)));
    assert_eq!(auth, [a384.clone(), a512.clone(), a384, a512.clone(), a512]);
    let ps = problems(&format!("sa out 5 cipher_algo aes-128-cbc cipher_key {} auth_algo sha512-hmac auth_key {} {ends}\n{TAIL}", k(16, 3), k(32, 2)));
    assert!(ps.iter().any(|p| p.line == 1 && p.field == "auth_key"), "{ps:#?}");
}

#[test]
fn secgw_toml_given_to_import_is_told_so_once() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/ep0.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let Err(e) = dpdk::import(&text, &path, &opts()) else { panic!("a TOML file imported") };
    assert_eq!(e.problems().len(), 1, "{e}");
    let m = e.to_string();
    assert!(m.contains("this is secgw's own TOML config, not a DPDK ipsec-secgw .cfg") && m.contains("secgw check"), "{m}");
    // The same TOML named .cfg: secgw check would import it too; rename it.
    let Err(e) = dpdk::import(&text, Path::new("base.cfg"), &opts()) else { panic!("a TOML file imported") };
    assert!(e.to_string().contains("named .cfg, which secgw reads as DPDK's: rename it to .toml"), "{e}");
    // A .cfg with a bad line still gets its own error, not the hint.
    let Err(e) = dpdk::import("sp ipv4 out esp protect 5 pri 1 dst 192.168.105.0/24 sport 0:65535 dport 0:65535\nbogus 1 2\n", Path::new("x.cfg"), &opts()) else {
        panic!("a bad line imported")
    };
    assert!(e.to_string().contains("x.cfg:2:1: bogus: unknown line type"), "{e}");
}

/// A key keyword before (or without) its algorithm says where it belongs
/// (DPDK refuses that order too, with "unrecognized input").
#[test]
fn key_before_its_algorithm_names_the_order() {
    let k = (0..20).map(|i| format!("{i:x}")).collect::<Vec<_>>().join(":");
    let ps = problems(&format!("sa out 5 aead_key {k} aead_algo aes-128-gcm mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n{TAIL}"));
    assert!(ps.iter().any(|p| p.line == 1 && p.field == "aead_key" && p.message == "aead_key must follow \"aead_algo NAME\" (as in \"aead_algo NAME aead_key KEY\")"), "{ps:#?}");
    let ps = problems(&format!("sa out 5 cipher_key {k} mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n{TAIL}"));
    assert!(ps.iter().any(|p| p.field == "cipher_key" && p.message.starts_with("cipher_key must follow \"cipher_algo NAME\"")), "{ps:#?}");
}

/// An inbound SA for GOOD_SA's peer and one outbound with `esn 100`, a
/// port-selecting outbound policy, routes: the file the option tests import.
const OPTION_CFG: &str = "sa out 5 cipher_algo aes-128-cbc cipher_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 auth_algo sha1-hmac auth_key 0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2\n\
    sa in 6 aead_algo aes-128-gcm aead_key 1:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14 mode ipv4-tunnel src 10.0.0.2 dst 10.0.0.1\n\
    sa out 7 aead_algo aes-128-gcm aead_key 2:2:3:4:5:6:7:8:9:a:b:c:d:e:f:10:11:12:13:14 mode ipv4-tunnel src 10.0.0.1 dst 10.0.0.2 esn 100\n\
    sp ipv4 out esp protect 7 pri 2 dst 192.168.1.0/24 proto 17:255 sport 0:65535 dport 6000:6999\n\
    sp ipv4 out esp protect 5 pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\n\
    sp ipv4 in esp protect 6 pri 1 src 192.168.1.0/24 sport 0:65535 dport 0:65535\n\
    rt ipv4 dst 10.0.0.2/32 port 0\nrt ipv4 dst 192.168.9.0/24 port 1\n";

fn option_opts() -> ImportOptions {
    ImportOptions { port_mask: Some(3), unprotected_mask: Some(1), ..Default::default() }
}

/// As `secgw check` loads it (`dpdk::load`: the options kept with the config).
fn import_with(o: &ImportOptions) -> Result<(Config, Vec<dpdk::Notice>), ConfigError> {
    dpdk::parse(OPTION_CFG, Path::new("opt.cfg"), o).map(|(c, n)| (Config { dpdk_import: Some(o.clone()), ..c }, n))
}

/// DPDK's `-w`, `-e`, `--mtu`, `--reassemble` and `--frag-ttl` set every
/// inbound SA's anti-replay window, ESN on every SA, every port's MTU and
/// the reassembly table (with forwarded fragments, as DPDK reassembles
/// every fragment it receives); without them secgw's defaults stay.
#[test]
fn dpdk_sa_port_and_reassembly_options() {
    let (plain, _) = import_with(&option_opts()).unwrap();
    let defaults = config::Reassembly::default();
    assert_eq!(plain.reassembly, defaults, "no option: secgw's reassembly defaults");
    assert!(plain.ports.iter().all(|p| p.mtu == 1500));
    let sa = |c: &Config, spi: u32| c.sas.iter().find(|s| s.spi == spi).unwrap().clone();
    assert_eq!((sa(&plain, 6).replay_window, sa(&plain, 5).esn, sa(&plain, 7).esn), (64, false, true));
    // With the .cfg's port selector on SA 7 and no --reassemble, check's
    // OPAQUE warning names the DPDK option that keeps the datagrams whole.
    let hint = " (DPDK's --reassemble N, N > 0, keeps them with it)";
    assert!(config::warnings(&plain).iter().any(|w| w.ends_with(hint)), "{:?}", config::warnings(&plain));

    let o = ImportOptions { replay_window: Some(1024), esn: true, mtu: Some(1400), reassemble: Some(256), frag_ttl_ns: Some(2_500_000_001), ..option_opts() };
    let (cfg, notices) = import_with(&o).unwrap();
    assert_eq!(sa(&cfg, 6).replay_window, 1024, "-w: the inbound SA's window");
    assert_eq!(sa(&cfg, 5).replay_window, plain.sas.iter().find(|s| s.spi == 5).unwrap().replay_window, "-w: outbound SAs have none");
    assert!(cfg.sas.iter().all(|s| s.esn), "-e: ESN on every SA");
    assert_eq!((sa(&cfg, 5).first_seq, sa(&cfg, 7).first_seq), (sa(&plain, 5).first_seq, 100), "-e keeps an esn N line's start");
    assert!(cfg.ports.iter().all(|p| p.mtu == 1400), "--mtu: every port");
    assert_eq!((cfg.reassembly.contexts, cfg.reassembly.forwarded, cfg.reassembly.timeout_ms), (256, true, 2501), "--frag-ttl rounded up to whole ms");
    assert_eq!(cfg.reassembly.max_fragments, defaults.max_fragments);
    assert!(!config::warnings(&cfg).iter().any(|w| w.ends_with(hint)), "{:?}", config::warnings(&cfg));
    let warned = |ns: &[dpdk::Notice], kw: &str, text: &str| ns.iter().any(|n| n.line == 0 && n.keyword == kw && n.kind == NoticeKind::Warning && n.message.contains(text));
    assert!(warned(&notices, "--reassemble", "IPv6 ones among them"), "{notices:#?}");

    // --reassemble alone: DPDK's default fragment lifetime, 10 s.
    let (r, _) = import_with(&ImportOptions { reassemble: Some(64), ..option_opts() }).unwrap();
    assert_eq!((r.reassembly.contexts, r.reassembly.forwarded, r.reassembly.timeout_ms), (64, true, 10_000));
    // A --frag-ttl below secgw's 10 ms is raised, warned.
    let (short, notices) = import_with(&ImportOptions { reassemble: Some(64), frag_ttl_ns: Some(1_000), ..option_opts() }).unwrap();
    assert_eq!(short.reassembly.timeout_ms, 10);
    assert!(warned(&notices, "--frag-ttl", "10 ms is used"), "{notices:#?}");
    // --reassemble 0: off, as in DPDK; a --frag-ttl without reassembly is
    // ignored, as DPDK ignores it (no fragment table), warned.
    let (off, notices) = import_with(&ImportOptions { reassemble: Some(0), frag_ttl_ns: Some(1_000), ..option_opts() }).unwrap();
    assert_eq!((off.reassembly.contexts, off.reassembly.forwarded, off.reassembly.timeout_ms), (0, false, defaults.timeout_ms));
    assert!(warned(&notices, "--frag-ttl", "ignored"), "{notices:#?}");
    assert!(!notices.iter().any(|n| n.keyword == "--reassemble"));
    let (alone, notices) = import_with(&ImportOptions { frag_ttl_ns: Some(3_000_000_000), ..option_opts() }).unwrap();
    assert_eq!(alone.reassembly, defaults, "--frag-ttl alone changes nothing");
    assert!(warned(&notices, "--frag-ttl", "ignored"), "{notices:#?}");

    // -w and -e act in DPDK only on its librte_ipsec path (-l, or
    // --reassemble N > 0): said where neither is given.
    let (_, notices) = import_with(&ImportOptions { replay_window: Some(128), esn: true, ..option_opts() }).unwrap();
    assert!(warned(&notices, "-w", "DPDK applies -w and -e on its librte_ipsec path only"), "{notices:#?}");
    for o in [ImportOptions { replay_window: Some(128), librte_ipsec: true, ..option_opts() }, ImportOptions { esn: true, reassemble: Some(8), ..option_opts() }] {
        let (_, notices) = import_with(&o).unwrap();
        assert!(!notices.iter().any(|n| n.message.contains("librte_ipsec")), "{notices:#?}");
    }

    // Values secgw cannot take: one problem each (not one per SA or port),
    // named by the option, all of them at once.
    for (o, kw, msg) in [
        (ImportOptions { mtu: Some(9000), ..option_opts() }, "--mtu", "packet buffers hold 2048-byte frames"),
        (ImportOptions { mtu: Some(500), ..option_opts() }, "--mtu", "expected 576..=1985, found 500"),
        (ImportOptions { replay_window: Some(70_000), ..option_opts() }, "-w", "0..=65536"),
        (ImportOptions { replay_window: Some(1 << 63), ..option_opts() }, "-w", "0..=65536"),
        (ImportOptions { reassemble: Some(5000), ..option_opts() }, "--reassemble", "0..=1024"),
        (ImportOptions { frag_ttl_ns: Some(dpdk::MAX_FRAG_TTL_NS + 1), ..option_opts() }, "--frag-ttl", "10 s"),
    ] {
        let e = import_with(&o).unwrap_err();
        let ps = e.problems();
        assert!(ps.len() == 1 && ps[0].line == 0 && ps[0].field == kw && ps[0].message.contains(msg), "{kw}: {e}");
        assert!(e.to_string().starts_with(&format!("opt.cfg: {kw}: ")), "{e}");
    }
    let all = ImportOptions { replay_window: Some(70_000), mtu: Some(9000), reassemble: Some(5000), frag_ttl_ns: Some(u64::MAX), ..option_opts() };
    let fields: Vec<String> = import_with(&all).unwrap_err().problems().iter().map(|p| p.field.clone()).collect();
    assert_eq!(fields, ["-w", "--mtu", "--reassemble", "--frag-ttl"]);
}

/// The options through the binary: the header says them, the TOML loads
/// to the same config, bad values are refused by name; they are refused
/// with a TOML config.
#[test]
fn dpdk_options_through_the_binary() {
    let dir = std::env::temp_dir().join(format!("secgw-dpdk-opts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("opt.cfg");
    std::fs::write(&path, OPTION_CFG).unwrap();
    let args = ["-p", "1", "-p", "3", "-u", "2", "-u", "1", "--port", "0=veth0", "--port", "1=veth1", "-w", "7", "-w", "128", "-e", "--mtu", "1400", "--reassemble", "64", "--frag-ttl", "3000000000", "-l"];
    let out = Command::new(env!("CARGO_BIN_EXE_secgw")).arg("import-dpdk").arg(&path).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let toml = String::from_utf8(out.stdout).unwrap();
    // A repeated option: the last one counts, as with DPDK's getopt.
    assert!(toml.contains("# Options: -p 0x3 -u 0x1 --port 0=veth0 --port 1=veth1 -w 128 -e -l --mtu 1400 --reassemble 64 --frag-ttl 3000000000\n"), "{toml}");
    assert!(err.contains(&format!("{}: warning: --reassemble: DPDK reassembles every fragment", path.display())), "{err}");
    let o = ImportOptions { replay_window: Some(128), esn: true, librte_ipsec: true, mtu: Some(1400), reassemble: Some(64), frag_ttl_ns: Some(3_000_000_000), ..option_opts() };
    let mut o = o;
    o.interfaces.insert(0, "veth0".into());
    o.interfaces.insert(1, "veth1".into());
    let (cfg, _) = dpdk::parse(OPTION_CFG, &path, &o).unwrap();
    assert_eq!((cfg.reassembly.contexts, cfg.reassembly.timeout_ms, cfg.ports[0].mtu), (64, 3000, 1400));
    let from_toml = config::parse(&toml, &path).unwrap();
    assert_eq!(from_toml, cfg, "the written TOML loads to the .cfg's config");
    let check = Command::new(env!("CARGO_BIN_EXE_secgw")).arg("check").arg(&path).args(args).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let summary = String::from_utf8_lossy(&check.stdout);
    assert_eq!(summary.matches(" mtu 1400 queue 0 ").count(), 2, "each port's mtu in check's port list:\n{summary}");
    assert!(summary.contains("reassembly: 64 datagrams per worker, up to 16 fragments each, timeout 3000 ms"), "{summary}");
    for (bad, want) in [(["-w", "0x40"], "-w: expected a decimal number"), (["--mtu", "9000"], "opt.cfg: --mtu: expected 576..=1985, found 9000"), (["--frag-ttl", "5s"], "--frag-ttl: expected a decimal number")] {
        let o = Command::new(env!("CARGO_BIN_EXE_secgw")).arg("import-dpdk").arg(&path).args(["-p", "3", "-u", "1"]).args(bad).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{bad:?}");
        assert!(o.stdout.is_empty());
        assert!(String::from_utf8_lossy(&o.stderr).contains(want), "{bad:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let toml_cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/ep0.toml");
    let o = Command::new(env!("CARGO_BIN_EXE_secgw")).arg("check").arg(&toml_cfg).args(["--reassemble", "64"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("ep0.toml: --reassemble: DPDK ipsec-secgw options are for a DPDK .cfg file"), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
