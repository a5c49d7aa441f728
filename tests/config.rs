//! Config layer: the sample configs load, and each class of mistake is
//! reported at its exact file:line:column with its field path.

use std::path::{Path, PathBuf};

use secgw::config::{self, Action, Algorithm, ConfigError, Direction, PortRole, Protocol};

/// A small valid config; the tests below break one thing in it.
const BASE: &str = r#"[gateway]
workers = 1

[[port]]
name = "inside"
interface = "in0"
role = "protected"

[[port]]
name = "outside"
interface = "out0"
role = "unprotected"
addresses = ["203.0.113.1/24"]

[[sa]]
spi = 1001
direction = "outbound"
algorithm = "aes-128-gcm"
key = "00112233445566778899aabbccddeeff01020304"
tunnel_src = "203.0.113.1"
tunnel_dst = "203.0.113.2"

[[sa]]
spi = 1002
direction = "inbound"
algorithm = "aes-128-gcm"
key = "ffeeddccbbaa99887766554433221100a0b0c0d0"
tunnel_src = "203.0.113.2"
tunnel_dst = "203.0.113.1"

[[policy]]
direction = "outbound"
src = "192.0.2.0/24"
dst = "198.51.100.0/24"
action = "protect 1001"

[[policy]]
direction = "inbound"
src = "198.51.100.0/24"
dst = "192.0.2.0/24"
action = "protect 1002"

[[route]]
prefix = "198.51.100.0/24"
port = "outside"
via = "203.0.113.2"

[[route]]
prefix = "203.0.113.0/24"
port = "outside"

[[neighbour]]
ip = "203.0.113.2"
mac = "02:00:00:00:01:02"
"#;

const FILE: &str = "test.toml";

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name)
}

/// BASE with `from` (which must occur once) replaced by `to`.
fn edit(from: &str, to: &str) -> String {
    assert_eq!(
        BASE.matches(from).count(),
        1,
        "{from:?} must occur once in BASE"
    );
    BASE.replacen(from, to, 1)
}

/// 1-based line and column of the first `needle` in `text`.
fn pos(text: &str, needle: &str) -> (usize, usize) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in text"));
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    (
        text[..at].matches('\n').count() + 1,
        text[line_start..at].chars().count() + 1,
    )
}

/// `text` written to a `test.toml` of its own and loaded: messages made
/// after validation (warnings, binding and core errors) read the file again
/// for their line and column.
fn load_text(text: &str) -> config::Config {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("secgw-config-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(FILE);
    std::fs::write(&path, text).expect("write config");
    config::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// `file:line:column: ` of the value `offset` characters into the only
/// `needle` in `text`, the file `cfg` was loaded from ([`load_text`]): the
/// prefix of a message placed by `Config::at`.
fn placed(cfg: &config::Config, text: &str, needle: &str, offset: usize) -> String {
    assert_eq!(text.matches(needle).count(), 1, "{needle:?} is not unique");
    let (line, col) = pos(text, needle);
    format!("{}:{line}:{}: ", cfg.source.display(), col + offset)
}

/// 1-based line and column of the last `needle` in `text`.
fn pos_last(text: &str, needle: &str) -> (usize, usize) {
    let at = text
        .rfind(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in text"));
    let (line, col) = pos(&text[at..], needle);
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + line,
        before[line_start..].chars().count() + col,
    )
}

fn error(text: &str) -> ConfigError {
    match config::parse(text, Path::new(FILE)) {
        Ok(_) => panic!("config was accepted:\n{text}"),
        Err(e) => e,
    }
}

/// Asserts that `text` fails with exactly one problem, at the position of
/// `at` (plus `col_offset` characters), naming `field`, its message
/// containing `message`.
fn assert_one(text: &str, at: &str, col_offset: usize, field: &str, message: &str) {
    let err = error(text);
    let shown = err.to_string();
    assert_eq!(
        err.problems().len(),
        1,
        "expected one problem, got:\n{shown}"
    );
    let (line, col) = pos(text, at);
    let prefix = format!("{FILE}:{line}:{}: {field}: ", col + col_offset);
    assert!(
        shown.starts_with(&prefix),
        "expected {prefix:?}…, got:\n{shown}"
    );
    assert!(shown.contains(message), "expected {message:?} in:\n{shown}");
    assert_eq!(shown.lines().count(), 1, "one line per problem:\n{shown}");
}

#[test]
fn base_is_valid() {
    let cfg = config::parse(BASE, Path::new(FILE)).unwrap();
    assert_eq!(cfg.gateway.name, "secgw");
    assert_eq!(cfg.sas[0].replay_window, 0, "outbound SAs have no window");
    assert_eq!(cfg.sas[1].replay_window, 64, "inbound default");
    assert_eq!(cfg.policies[0].priority, 100);
    assert_eq!(cfg.policies[0].src_ports, (0, 65535));
    assert_eq!(cfg.routes[0].port, 1);
    assert!(
        config::warnings(&cfg).is_empty(),
        "{:?}",
        config::warnings(&cfg)
    );
}

#[test]
fn ep0_loads() {
    let path = sample("ep0.toml");
    let cfg = config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.source, path);
    assert_eq!(cfg.gateway.name, "gw0");
    assert_eq!(cfg.gateway.workers, 1);
    assert_eq!(cfg.gateway.stats_interval, 0);
    let names: Vec<_> = cfg
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.interface.as_str(), p.role))
        .collect();
    assert_eq!(
        names,
        [
            ("inside", "gw0-in", PortRole::Protected),
            ("outside", "gw0-out", PortRole::Unprotected)
        ]
    );
    assert_eq!(cfg.ports[0].mac, Some([2, 0, 0, 0, 0, 1]));
    assert_eq!(
        cfg.ports[1].addresses,
        [("203.0.113.1".parse().unwrap(), 24)]
    );
    let sas: Vec<_> = cfg
        .sas
        .iter()
        .map(|s| (s.spi, s.direction, s.key.len()))
        .collect();
    assert_eq!(
        sas,
        [
            (1001, Direction::Outbound, 20),
            (1002, Direction::Inbound, 20)
        ]
    );
    assert_eq!(cfg.policies.len(), 2);
    assert_eq!(cfg.policies[0].action, Action::Protect(1001));
    assert_eq!(cfg.routes.len(), 3);
    assert_eq!(cfg.routes[1].via, Some("203.0.113.2".parse().unwrap()));
    assert_eq!(cfg.routes[1].port, 1);
    assert_eq!(cfg.neighbours.len(), 2);
    assert!(
        config::warnings(&cfg).is_empty(),
        "{:?}",
        config::warnings(&cfg)
    );
}

#[test]
fn ep1_loads_and_mirrors_ep0() {
    let ep0 = config::load(&sample("ep0.toml")).unwrap();
    let cfg = config::load(&sample("ep1.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.gateway.name, "gw1");
    let sas: Vec<_> = cfg
        .sas
        .iter()
        .map(|s| (s.spi, s.direction, s.algorithm, s.key.len()))
        .collect();
    assert_eq!(
        sas,
        [
            (1002, Direction::Outbound, Algorithm::Aes128Gcm, 20),
            (1001, Direction::Inbound, Algorithm::Aes128Gcm, 20),
            (1003, Direction::Inbound, Algorithm::Aes256Gcm, 36),
        ]
    );
    // The two ends share each SA: same key, same tunnel.
    for sa in &cfg.sas[..2] {
        let peer = ep0.sas.iter().find(|p| p.spi == sa.spi).unwrap();
        assert_ne!(peer.direction, sa.direction);
        assert_eq!(
            (&peer.key, peer.tunnel_src, peer.tunnel_dst),
            (&sa.key, sa.tunnel_src, sa.tunnel_dst)
        );
    }
    let p = &cfg.policies[2];
    assert_eq!(
        (p.direction, p.priority, p.action),
        (Direction::Inbound, 20, Action::Protect(1003))
    );
    assert_eq!((p.src, p.dst), (cfg.policies[1].src, cfg.policies[1].dst));
    assert_eq!(cfg.policies[1].protocol, Protocol::Any);
    assert!(
        config::warnings(&cfg).is_empty(),
        "{:?}",
        config::warnings(&cfg)
    );
}

#[test]
fn missing_required_field() {
    let text = edit("tunnel_dst = \"203.0.113.2\"\n", "");
    // Reported at the header of the table that lacks it.
    assert_one(
        &text,
        "[[sa]]",
        0,
        "sa[0].tunnel_dst",
        "missing required key `tunnel_dst`",
    );
}

#[test]
fn unknown_key() {
    let text = edit("name = \"outside\"", "nmae = \"outside\"");
    let err = error(&text);
    assert!(matches!(err, ConfigError::Syntax(_)), "{err:?}");
    assert_one(&text, "nmae", 0, "port[1].nmae", "unknown key `nmae`");
    assert!(err.to_string().contains("did you mean `name`?"), "{err}");
}

#[test]
fn unknown_table() {
    let text = format!("{BASE}\n[[neighbor]]\nip = \"203.0.113.2\"\n");
    assert_one(
        &text,
        "neighbor",
        0,
        "neighbor",
        "did you mean `neighbour`?",
    );
}

#[test]
fn bad_hex_key_length() {
    let text = edit(
        "key = \"00112233445566778899aabbccddeeff01020304\"",
        "key = \"00112233445566778899aabbccddeeff010203\"",
    );
    assert_one(
        &text,
        "key = \"0011",
        6,
        "sa[0].key",
        "expected 40 hex digits (AES-128-GCM key ‖ 4-byte salt), found 38",
    );
}

#[test]
fn key_errors_never_show_the_key() {
    let text = edit(
        "key = \"00112233445566778899aabbccddeeff01020304\"",
        "key = \"00112233445566778899aabbccddeeff0102030z\"",
    );
    assert_one(
        &text,
        "key = \"0011",
        6,
        "sa[0].key",
        "non-hex character at position 40",
    );
    assert!(!error(&text).to_string().contains("00112233"));
}

#[test]
fn key_with_colons_and_aes256() {
    let key256 = (0..36)
        .map(|i| format!("{i:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let text = edit(
        "algorithm = \"aes-128-gcm\"\nkey = \"00112233445566778899aabbccddeeff01020304\"",
        &format!("algorithm = \"aes-256-gcm\"\nkey = \"{key256}\""),
    );
    let cfg = config::parse(&text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(*cfg.sas[0].key, (0..36).collect::<Vec<u8>>());
}

#[test]
fn spi_zero() {
    let text = edit("spi = 1001", "spi = 0").replace("protect 1001", "bypass");
    assert_one(
        &text,
        "spi = 0",
        6,
        "sa[0].spi",
        "0 is reserved, RFC 4303 §2.1",
    );
    let text = edit("spi = 1001", "spi = \"0x0\"").replace("protect 1001", "bypass");
    assert_one(&text, "spi = \"0x0\"", 6, "sa[0].spi", "found 0");
}

#[test]
fn spi_hex_string_and_low_spi_warning() {
    let text = edit("spi = 1001", "spi = \"0x3e9\"");
    assert_eq!(
        config::parse(&text, Path::new(FILE)).unwrap().sas[0].spi,
        1001
    );
    let text = edit("spi = 1001", "spi = 7").replace("protect 1001", "protect 0x7");
    let cfg = load_text(&text);
    let warnings = config::warnings(&cfg);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!("{}sa[0].spi: SPI 7", placed(&cfg, &text, "spi = 7", 6))),
        "{warnings:?}"
    );
    // Read from elsewhere (no such file), the field is named without a place.
    let w = config::warnings(&config::parse(&text, Path::new("/nonexistent/test.toml")).unwrap());
    assert!(w[0].starts_with("/nonexistent/test.toml: sa[0].spi: SPI 7"), "{w:?}");
}

/// An inbound window below RFC 4303 §3.4.3's 32 is warned about (32 and
/// the default are not).
#[test]
fn a_replay_window_below_32_is_warned_about() {
    let text = BASE.replacen("direction = \"inbound\"", "direction = \"inbound\"\nreplay_window = 16", 1);
    let cfg = load_text(&text);
    let w = config::warnings(&cfg);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with(&format!("{}sa[1].replay_window: replay_window = 16 for inbound SPI", placed(&cfg, &text, "replay_window = 16", 16))), "{w:?}");
    assert!(w[0].contains("below the 32 packets RFC 4303 §3.4.3"), "{w:?}");
    let text = text.replace("replay_window = 16", "replay_window = 32");
    assert!(config::warnings(&load_text(&text)).is_empty());
}

#[test]
fn duplicate_spi_and_direction() {
    let dup = "\n[[sa]]\nspi = 1001\ndirection = \"outbound\"\nalgorithm = \"aes-128-gcm\"\n\
               key = \"00112233445566778899aabbccddeeff01020304\"\ntunnel_src = \"203.0.113.1\"\n\
               tunnel_dst = \"203.0.113.9\"\n";
    let text = format!("{BASE}{dup}");
    let (line, col) = pos_last(&text, "spi = 1001");
    let err = error(&text).to_string();
    let first = pos(&text, "spi = 1001").0;
    let want = format!(
        "{FILE}:{line}:{}: sa[2].spi: duplicate outbound SA with SPI 1001 (first at line {first}); \
         only inbound tunnel-mode SAs with different tunnel_dst may share an SPI",
        col + 6
    );
    assert_eq!(err, want, "outbound SAs never share an SPI, even towards another tunnel_dst");
}

/// An inbound SA in tunnel mode with SPI 1002 (BASE has one towards
/// 203.0.113.1), from `src` to `dst`; `extra` more lines. Its key is
/// derived from both addresses whole (two peers sharing an SPI have keys
/// of their own: one key would repeat GCM nonces).
fn inbound_1002(src: &str, dst: &str, extra: &str) -> String {
    use std::hash::{Hash, Hasher};
    let word = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, src, dst).hash(&mut h);
        h.finish()
    };
    let key: String = [word(0), word(1), word(2)].iter().flat_map(|w| w.to_be_bytes()).take(20).map(|b| format!("{b:02x}")).collect();
    format!(
        "\n[[sa]]\nspi = 1002\ndirection = \"inbound\"\nalgorithm = \"aes-128-gcm\"\n\
         key = \"{key}\"\ntunnel_src = \"{src}\"\n\
         tunnel_dst = \"{dst}\"\n{extra}"
    )
}

#[test]
fn inbound_tunnel_sas_share_an_spi_towards_different_addresses() {
    // RFC 4301 §4.1: SPI + destination. Two peers, one SPI, two of our
    // addresses: accepted, both SAs kept with their own keys.
    let text = format!("{BASE}{}", inbound_1002("203.0.113.7", "203.0.113.5", ""));
    let cfg = config::parse(&text, Path::new(FILE)).unwrap();
    let shared: Vec<_> = cfg.sas.iter().filter(|s| s.spi == 1002).collect();
    assert_eq!(shared.len(), 2);
    assert_eq!(shared[0].sad_dst(), Some("203.0.113.1".parse().unwrap()));
    assert_eq!(shared[1].sad_dst(), Some("203.0.113.5".parse().unwrap()));
    assert_ne!(&shared[0].key[..], &shared[1].key[..]);
    // The one inbound policy naming SPI 1002 stays valid.
    assert!(cfg.policies.iter().any(|p| p.action == Action::Protect(1002)));
    // IPv6 tunnel_dst too.
    let text = format!(
        "{BASE}{}{}",
        inbound_1002("2001:db8::2", "2001:db8::1", ""),
        inbound_1002("2001:db8::3", "2001:db8::4", "")
    );
    assert_eq!(config::parse(&text, Path::new(FILE)).unwrap().sas.len(), 4);
}

#[test]
fn inbound_spi_with_the_same_tunnel_dst_twice_is_refused() {
    // Same SPI, same destination, another peer: the SAD could not tell
    // them apart.
    let text = format!("{BASE}{}", inbound_1002("203.0.113.7", "203.0.113.1", ""));
    let (line, col) = pos_last(&text, "spi = 1002");
    let first = pos(&text, "spi = 1002").0;
    assert_eq!(
        error(&text).to_string(),
        format!(
            "{FILE}:{line}:{}: sa[2].spi: duplicate inbound SA with SPI 1002 and tunnel_dst 203.0.113.1 (first at line {first})",
            col + 6
        )
    );
}

#[test]
fn inbound_spi_shared_with_a_transport_sa_is_refused() {
    // A transport SA is found by SPI alone: it shares its SPI with nobody,
    // whichever comes first in the file.
    let transport = "\n[[sa]]\nspi = 1002\ndirection = \"inbound\"\nmode = \"transport\"\n\
                     algorithm = \"aes-128-gcm\"\nkey = \"0102030405060708090a0b0c0d0e0f1011121314\"\n";
    let text = format!("{BASE}{transport}");
    let (line, col) = pos_last(&text, "spi = 1002");
    let first = pos(&text, "spi = 1002").0;
    assert_eq!(
        error(&text).to_string(),
        format!(
            "{FILE}:{line}:{}: sa[2].spi: duplicate inbound SA with SPI 1002 (first at line {first}); \
             only inbound tunnel-mode SAs with different tunnel_dst may share an SPI",
            col + 6
        )
    );
    // The transport SA first, the tunnel SA second: refused as well.
    let text = BASE.replacen("spi = 1002", "spi = 1003", 1).replace("protect 1002", "protect 1003");
    let text = format!("{text}{transport}{}", inbound_1002("203.0.113.7", "203.0.113.5", ""));
    let (line, col) = pos_last(&text, "spi = 1002");
    let err = error(&text).to_string();
    assert!(err.starts_with(&format!("{FILE}:{line}:{}: sa[3].spi: duplicate inbound SA with SPI 1002", col + 6)), "{err}");
}

#[test]
fn protect_unknown_spi() {
    let text = edit("action = \"protect 1001\"", "action = \"protect 1005\"");
    assert_one(
        &text,
        "action = \"protect 1005\"",
        9,
        "policy[0].action",
        "found 1005 (no SA has it)",
    );
}

/// An SA whose SPI is refused leaves its policy naming "no SA": that
/// message points back at the refused SPI (walkthrough finding: it read
/// as a second, unrelated mistake).
#[test]
fn protect_of_an_sa_whose_spi_is_refused_points_at_it() {
    let text = edit("spi = 1001", "spi = 0");
    let (spi_line, _) = pos(&text, "spi = 0");
    let shown = error(&text).to_string();
    assert!(shown.contains("sa[0].spi: expected an SPI in 1..=4294967295"), "{shown}");
    assert!(
        shown.contains(&format!("policy[0].action: expected the SPI of an [[sa]], found 1001 (no SA has it; sa[0].spi at line {spi_line} is invalid, perhaps the one meant)")),
        "{shown}"
    );
    // An inbound SA with a refused SPI is not offered for an outbound policy.
    let text = edit("spi = 1002", "spi = 0");
    let shown = error(&text).to_string();
    assert!(shown.contains("policy[1].action: expected the SPI of an [[sa]], found 1002 (no SA has it; sa[1].spi at line"), "{shown}");
    let text = edit("spi = 1002", "spi = 0").replace("protect 1001", "protect 7");
    let shown = error(&text).to_string();
    assert!(shown.contains("found 7 (no SA has it)"), "the outbound policy is not pointed at inbound sa[1]: {shown}");
}

#[test]
fn protect_spi_of_other_direction() {
    let text = edit("action = \"protect 1001\"", "action = \"protect 0x3ea\"");
    assert_one(
        &text,
        "action = \"protect 0x3ea\"",
        9,
        "policy[0].action",
        "expected an outbound SA for an outbound policy, found SPI 1002 is inbound",
    );
}

#[test]
fn duplicate_port_name() {
    let text =
        format!("{BASE}\n[[port]]\nname = \"inside\"\ninterface = \"in1\"\nrole = \"protected\"\n");
    let (line, col) = pos_last(&text, "name = \"inside\"");
    let first = pos(&text, "name = \"inside\"").0;
    let err = error(&text).to_string();
    let want = format!(
        "{FILE}:{line}:{}: port[2].name: duplicate port name \"inside\" (first at line {first})",
        col + 7
    );
    assert_eq!(err, want);
}

#[test]
fn route_to_unknown_port() {
    let text = edit("port = \"outside\"\nvia", "port = \"outsde\"\nvia");
    assert_one(
        &text,
        "port = \"outsde\"",
        7,
        "route[0].port",
        "(\"inside\", \"outside\"), found \"outsde\"",
    );
}

#[test]
fn bad_prefix() {
    let text = edit("dst = \"198.51.100.0/24\"", "dst = \"198.51.100.0/33\"");
    assert_one(
        &text,
        "dst = \"198.51.100.0/33\"",
        6,
        "policy[0].dst",
        "prefix length 0..=32",
    );
    let text = edit("prefix = \"198.51.100.0/24\"", "prefix = \"198.51.100/24\"");
    assert_one(
        &text,
        "prefix = ",
        9,
        "route[0].prefix",
        "expected an IPv4 or IPv6 prefix like \"192.0.2.0/24\" or \"2001:db8::/32\", found \"198.51.100/24\"",
    );
}

#[test]
fn host_bits_set() {
    let text = edit("src = \"192.0.2.0/24\"", "src = \"192.0.2.1/24\"");
    assert_one(
        &text,
        "src = \"192.0.2.1/24\"",
        6,
        "policy[0].src",
        "host bits set in 192.0.2.1/24 (the network is 192.0.2.0/24)",
    );
}

#[test]
fn port_range_reversed() {
    let text = edit(
        "action = \"protect 1001\"",
        "protocol = \"udp\"\nsrc_ports = \"2000-1000\"\naction = \"protect 1001\"",
    );
    assert_one(
        &text,
        "src_ports",
        12,
        "policy[0].src_ports",
        "N <= M, found \"2000-1000\"",
    );
    let cfg = config::parse(&text.replace("2000-1000", "1000-2000"), Path::new(FILE)).unwrap();
    assert_eq!(cfg.policies[0].src_ports, (1000, 2000));
    assert_eq!(cfg.policies[0].protocol, Protocol::Number(17));
}

#[test]
fn port_range_needs_tcp_or_udp() {
    let text = edit(
        "action = \"protect 1001\"",
        "dst_ports = \"53\"\naction = \"protect 1001\"",
    );
    assert_one(
        &text,
        "dst_ports",
        12,
        "policy[0].dst_ports",
        "needs protocol \"tcp\" or \"udp\", found protocol \"any\"",
    );
}

#[test]
fn replay_window_on_outbound() {
    let text = edit(
        "direction = \"outbound\"\nalgorithm",
        "direction = \"outbound\"\nreplay_window = 32\nalgorithm",
    );
    assert_one(
        &text,
        "replay_window",
        16,
        "sa[0].replay_window",
        "inbound SAs only",
    );
}

#[test]
fn worker_not_below_workers() {
    let text = edit(
        "tunnel_dst = \"203.0.113.2\"",
        "tunnel_dst = \"203.0.113.2\"\nworker = 1",
    );
    assert_one(
        &text,
        "worker = 1",
        9,
        "sa[0].worker",
        "below gateway.workers = 1, found 1",
    );
}

#[test]
fn toml_syntax_error() {
    let text = edit("spi = 1002", "spi = 1002 1003");
    let err = error(&text);
    assert!(matches!(err, ConfigError::Syntax(_)), "{err:?}");
    let (line, col) = pos(&text, "1003");
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{FILE}:{line}:{col}: ")),
        "{shown}"
    );
    assert_eq!(shown.lines().count(), 1, "{shown}");
}

#[test]
fn all_problems_are_reported_in_file_order() {
    let text = edit("workers = 1", "workers = 0")
        .replace(
            "interface = \"out0\"",
            "interface = \"a-very-long-interface\"",
        )
        .replace("tunnel_src = \"203.0.113.2\"", "tunnel_src = \"203.0.113\"")
        .replace("via = \"203.0.113.2\"", "via = 7");
    let err = error(&text);
    let fields: Vec<&str> = err.problems().iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "gateway.workers",
            "port[1].interface",
            "sa[1].tunnel_src",
            "route[0].via"
        ],
        "{err}"
    );
    assert_eq!(err.to_string().lines().count(), 4);
    assert!(
        err.to_string()
            .contains("route[0].via: expected a string, found integer 7"),
        "{err}"
    );
}

#[test]
fn missing_file() {
    let err = config::load(Path::new("/nonexistent/secgw.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(
        err.to_string()
            .starts_with("/nonexistent/secgw.toml: cannot read config"),
        "{err}"
    );
}

#[test]
fn summary_never_shows_keys() {
    for name in ["ep0.toml", "ep1.toml"] {
        let cfg = config::load(&sample(name)).unwrap();
        let text = config::summary(&cfg);
        let debug = format!("{cfg:?}");
        for sa in &cfg.sas {
            let key = hex::encode(&sa.key);
            for shown in [&text, &debug] {
                assert!(
                    !shown.contains(&key),
                    "key of SPI {} shown:\n{shown}",
                    sa.spi
                );
                // Not even a fragment: key and salt halves.
                assert!(
                    !shown.contains(&key[..16]) && !shown.contains(&key[key.len() - 8..]),
                    "{shown}"
                );
            }
        }
        assert!(
            text.contains("SPI 1001") && text.contains("0x000003e9"),
            "{text}"
        );
        assert!(text.contains("203.0.113.1 -> 203.0.113.2"), "{text}");
        assert!(text.lines().count() <= 25, "one screen:\n{text}");
    }
}

#[test]
fn table_where_array_of_tables_belongs() {
    let one_route = BASE.replacen("[[route]]\nprefix = \"203.0.113.0/24\"\nport = \"outside\"\n\n", "", 1);
    let text = one_route.replacen("[[route]]", "[route]", 1);
    assert_one(
        &text,
        "[route]",
        0,
        "route",
        "write [[route]] for each entry",
    );
}

#[test]
fn warnings_for_unreachable_next_hop_and_addressless_unprotected_port() {
    // Without a static entry the next hop is resolved (ARP from the port's
    // address): no warning; without the port's address too, one.
    let text = BASE.replace("[[neighbour]]\nip = \"203.0.113.2\"\nmac = \"02:00:00:00:01:02\"\n", "");
    let cfg = config::parse(&text, Path::new(FILE)).unwrap();
    let w = config::warnings(&cfg);
    assert!(!w.iter().any(|w| w.contains("route[0]")), "{w:?}");
    let text = text.replace("addresses = [\"203.0.113.1/24\"]", "addresses = [\"2001:db8:ff::1/64\"]");
    let cfg = config::parse(&text, Path::new(FILE)).unwrap();
    let w = config::warnings(&cfg);
    assert!(w.iter().any(|w| w.contains("route[0].via: next hop 203.0.113.2 has no [[neighbour]] entry") && w.contains("0.0.0.0")), "{w:?}");
}

/// RFC 8200 §5: a port below 1280 bytes that carries IPv6 (an IPv6 address,
/// or an IPv6 route out of it) is warned about; an IPv4-only one is not.
#[test]
fn warnings_for_an_ipv6_port_below_1280() {
    let warns = |text: &str| config::warnings(&config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    let small = BASE.replacen("role = \"unprotected\"\n", "role = \"unprotected\"\nmtu = 1000\n", 1);
    assert_ne!(small, BASE);
    assert!(!warns(&small).iter().any(|w| w.contains(".mtu")), "{:?}", warns(&small));
    let v6 = small.replacen("addresses = [\"203.0.113.1/24\"]", "addresses = [\"203.0.113.1/24\", \"2001:db8:ff::1/64\"]", 1);
    let w = warns(&v6);
    assert!(
        w.iter().any(|w| w.contains("port[1].mtu: 1000 is below IPv6's minimum link MTU of 1280 (RFC 8200 §5), and port outside carries IPv6 (an IPv6 address): IPv6 packets of 1001..=1280 bytes cannot leave by it")),
        "{w:?}"
    );
    let route = format!("{}\n[[route]]\nprefix = \"2001:db8:5::/48\"\nport = \"inside\"\n", BASE.replacen("role = \"protected\"\n", "role = \"protected\"\nmtu = 1200\n", 1));
    let w = warns(&route);
    assert!(w.iter().any(|w| w.contains("port[0].mtu: 1200 is below") && w.contains("(an IPv6 route)")), "{w:?}");
    let at_min = v6.replacen("mtu = 1000", "mtu = 1280", 1);
    assert!(!warns(&at_min).iter().any(|w| w.contains(".mtu")), "{:?}", warns(&at_min));
}

/// Routing mistakes a valid config allows: no route to an outbound
/// tunnel's far end (every packet would be `no_route`), a next hop that
/// is the gateway itself or outside its port's subnets, a neighbour entry
/// for the gateway's own address.
#[test]
fn warnings_for_routing_mistakes() {
    let warns = |text: &str| config::warnings(&config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    let placed_warns = |text: &str, needle: &str, offset: usize| {
        let cfg = load_text(text);
        (placed(&cfg, text, needle, offset), config::warnings(&cfg))
    };
    let text = edit("[[route]]\nprefix = \"203.0.113.0/24\"\nport = \"outside\"\n", "");
    let (at, w) = placed_warns(&text, "tunnel_dst = \"203.0.113.2\"", 13);
    assert_eq!(w, [format!("{at}sa[0].tunnel_dst: no [[route]] covers 203.0.113.2: packets of SPI 1001 are dropped as no_route (ESP is routed on its outer destination)")]);
    // A default route covers it; an inbound SA needs none. (It also sends
    // what SA 1002 decrypts, for 192.0.2.0/24, out of the outside port:
    // warned about on its own, below.)
    let w = warns(&edit("prefix = \"203.0.113.0/24\"", "prefix = \"0.0.0.0/0\""));
    assert!(w.len() == 1 && w[0].contains("policy[1].dst: 192.0.2.0/24 is routed out of unprotected port outside"), "{w:?}");
    let text = edit("via = \"203.0.113.2\"", "via = \"203.0.113.1\"");
    let (at, w) = placed_warns(&text, "via = ", 6);
    assert_eq!(w, [format!("{at}route[0].via: next hop 203.0.113.1 is this gateway's own address (port outside): packets on this route are never delivered")]);
    let text = edit("via = \"203.0.113.2\"", "via = \"198.18.0.1\"");
    let (at, w) = placed_warns(&text, "via = ", 6);
    assert_eq!(w, [format!("{at}route[0].via: next hop 198.18.0.1 is outside port outside's subnets (203.0.113.1/24): is the route's port right?")]);
    let text = format!("{BASE}\n[[neighbour]]\nip = \"203.0.113.1\"\nmac = \"02:00:00:00:00:99\"\n");
    let (at, w) = placed_warns(&text, "ip = \"203.0.113.1\"", 5);
    assert_eq!(w, [format!("{at}neighbour[1].ip: 203.0.113.1 is this gateway's own address (port outside): the entry is never used")]);
    // An IPv6 link-local next hop is on every link.
    let v6 = base_v6().replace("via = \"2001:db8:ff::2\"", "via = \"fe80::2\"");
    let w = warns(&v6);
    assert!(!w.iter().any(|w| w.contains("route[0]")), "{w:?}");
}

/// An inbound PROTECT entry whose destination is routed out of an
/// unprotected port: what its SA decrypts there takes the outbound SPD
/// (RFC 4301 §5.1), and with no entry selecting it is all `no_policy`
/// (helper-100: `check` said nothing, and the worker sent it in the clear).
#[test]
fn decrypted_traffic_routed_out_of_an_unprotected_port_is_warned_about() {
    let route = |port: &str| format!("[[route]]\nprefix = \"192.0.2.0/24\"\nport = \"{port}\"\n");
    let text = format!("{BASE}\n{}", route("outside"));
    let cfg = load_text(&text);
    let at = placed(&cfg, &text, "dst = \"192.0.2.0/24\"", 6);
    assert_eq!(
        config::warnings(&cfg),
        [format!("{at}policy[1].dst: 192.0.2.0/24 is routed out of unprotected port outside: what SPI 1002 decrypts there crosses the boundary again and no outbound policy selects it (dropped as no_policy; add one that protects it again, or bypass)")]
    );
    // Routed inside, or selected by an outbound entry (a hub sealing it
    // again, or a deliberate bypass): no warning.
    let w = |text: &str| config::warnings(&config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    assert!(w(&format!("{BASE}\n{}", route("inside"))).is_empty());
    let hub = "[[policy]]\ndirection = \"outbound\"\nsrc = \"198.51.100.0/25\"\ndst = \"192.0.2.0/24\"\naction = \"bypass\"\n";
    assert!(w(&format!("{BASE}\n{}{hub}", route("outside"))).is_empty());
    // helper-102: an outbound entry for one protocol and port does not
    // take the rest; a wider destination with only its first part routed
    // inside still leaks the rest; the gateway's own address is `to_us`.
    let ike = "[[policy]]\ndirection = \"outbound\"\nsrc = \"198.51.100.0/24\"\ndst = \"192.0.2.0/24\"\nprotocol = \"udp\"\ndst_ports = \"500\"\naction = \"bypass\"\n";
    let got = w(&format!("{BASE}\n{}{ike}", route("outside")));
    assert!(got.len() == 1 && got[0].contains("policy[1].dst: 192.0.2.0/24 is routed out of unprotected port outside:"), "{got:?}");
    let wide = BASE.replace("dst = \"192.0.2.0/24\"", "dst = \"10.0.0.0/8\"");
    let wide = format!("{wide}\n[[route]]\nprefix = \"10.0.0.0/16\"\nport = \"inside\"\n[[route]]\nprefix = \"0.0.0.0/0\"\nport = \"outside\"\nvia = \"203.0.113.2\"\n");
    let got = w(&wide);
    assert!(got.iter().any(|g| g.contains("policy[1].dst: 10.0.0.0/8 is routed out of unprotected port outside in part (from 10.1.0.0):")), "{got:?}");
    let inside_only = wide.replace("prefix = \"10.0.0.0/16\"", "prefix = \"10.0.0.0/8\"");
    assert!(!w(&inside_only).iter().any(|g| g.contains("crosses the boundary")));
    let ours = BASE.replace("dst = \"192.0.2.0/24\"", "dst = \"203.0.113.1/32\"");
    assert!(!w(&ours).iter().any(|g| g.contains("crosses the boundary")), "{:?}", w(&ours));
}

#[test]
fn a_directory_or_a_device_is_not_read() {
    for p in ["/tmp", "/dev/zero"] {
        let e = config::load(Path::new(p)).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{p}: {e}");
    }
}

#[test]
fn mtu_range_is_checked() {
    let text = BASE.replacen("role = \"protected\"", "role = \"protected\"\nmtu = 100", 1);
    let e = config::parse(&text, Path::new(FILE)).unwrap_err().to_string();
    assert!(e.contains(".mtu: expected an integer in 576..=1985, found 100"), "{e}");
    // Jumbo frames: more than a packet buffer holds, said so, with the line.
    let text = BASE.replacen("role = \"protected\"", "role = \"protected\"\nmtu = 9000", 1);
    let e = config::parse(&text, Path::new(FILE)).unwrap_err().to_string();
    assert!(e.contains(".mtu: expected at most 1985, found 9000: packet buffers hold 2048-byte frames"), "{e}");
    assert!(e.contains(&format!("{FILE}:")), "{e}");
    let text = BASE.replacen("role = \"protected\"", "role = \"protected\"\nmtu = 1985", 1);
    assert_eq!(config::parse(&text, Path::new(FILE)).unwrap().ports[0].mtu, 1985);
}

#[test]
fn pad_align_must_leave_room_in_a_packet_buffer() {
    let big = BASE.replacen("role = \"protected\"", "role = \"protected\"\nmtu = 1985", 1);
    let sa = "spi = 1001\n";
    assert!(big.contains(sa));
    let text = big.replacen(sa, "spi = 1001\npad_align = 256\n", 1);
    let e = config::parse(&text, Path::new(FILE)).unwrap_err().to_string();
    assert!(e.contains(".pad_align: pad_align 256 can grow a packet of port") && e.contains("mtu at most 1761"), "{e}");
    // 256 fits the default 1500; 16 (the algorithm's own) fits 1985.
    assert!(config::parse(&BASE.replacen(sa, "spi = 1001\npad_align = 256\n", 1), Path::new(FILE)).is_ok());
    assert!(config::parse(&big.replacen(sa, "spi = 1001\npad_align = 16\n", 1), Path::new(FILE)).is_ok());
}

/// BASE with SA 1001's algorithm and key lines replaced by `lines`.
fn with_sa0(lines: &str) -> String {
    edit("algorithm = \"aes-128-gcm\"\nkey = \"00112233445566778899aabbccddeeff01020304\"", lines)
}

fn hexkey(bytes: usize) -> String {
    (0..bytes).map(|i| format!("{:02x}", i as u8 ^ 0x5a)).collect()
}

#[test]
fn every_algorithm_loads_with_its_key_format() {
    for alg in Algorithm::ALL {
        let mut lines = format!("algorithm = \"{}\"\n", alg.name());
        if secgw::config::model::key_material_len(alg) > 0 {
            lines += &format!("key = \"{}\"\n", hexkey(secgw::config::model::key_material_len(alg)));
        }
        if let Some((_, len)) = secgw::config::model::auth(alg) {
            lines += &format!("auth_key = \"{}\"\n", hexkey(len));
        }
        let text = with_sa0(lines.trim_end());
        let cfg = config::parse(&text, Path::new(FILE)).unwrap_or_else(|e| panic!("{}: {e}", alg.name()));
        let sa = &cfg.sas[0];
        assert_eq!(sa.algorithm, alg);
        assert_eq!(sa.key.len(), secgw::config::model::key_material_len(alg), "{}", alg.name());
        assert_eq!(sa.auth_key.len(), secgw::config::model::auth(alg).map_or(0, |a| a.1), "{}", alg.name());
        assert_eq!(sa.icv_len, alg.default_icv_len(), "{}", alg.name());
        let summary = config::summary(&cfg);
        assert!(summary.contains(alg.name()), "{summary}");
        for shown in [summary, format!("{cfg:?}")] {
            if !sa.auth_key.is_empty() {
                assert!(!shown.contains(&hex::encode(&sa.auth_key)[..16]), "auth key shown: {shown}");
            }
        }
    }
}

#[test]
fn key_length_messages_name_what_the_key_holds() {
    let cases = [
        ("aes-128-cbc-hmac-sha1", 30, "expected 32 hex digits (AES-128-CBC key), found 30"),
        ("aes-256-cbc-hmac-sha256", 70, "expected 64 hex digits (AES-256-CBC key), found 70"),
        ("aes-128-ctr-hmac-sha256", 32, "expected 40 hex digits (AES-128-CTR key ‖ 4-byte nonce), found 32"),
        ("chacha20-poly1305", 64, "expected 72 hex digits (ChaCha20 key ‖ 4-byte salt), found 64"),
        ("aes-256-gmac", 40, "expected 72 hex digits (AES-256-GMAC key ‖ 4-byte salt), found 40"),
    ];
    for (name, digits, message) in cases {
        let alg = Algorithm::ALL.into_iter().find(|a| a.name() == name).unwrap();
        let mut lines = format!("algorithm = \"{name}\"\nkey = \"{}\"", &hexkey(40)[..digits]);
        if let Some((_, len)) = secgw::config::model::auth(alg) {
            lines += &format!("\nauth_key = \"{}\"", hexkey(len));
        }
        let text = with_sa0(&lines);
        assert_one(&text, &format!("key = \"{}", &hexkey(2)), 6, "sa[0].key", message);
    }
}

#[test]
fn auth_key_rules() {
    // Required for the HMAC algorithms, with its length.
    let text = with_sa0(&format!("algorithm = \"aes-128-cbc-hmac-sha1\"\nkey = \"{}\"", hexkey(16)));
    assert_one(&text, "[[sa]]", 0, "sa[0].auth_key", "missing required key `auth_key`");
    let text = with_sa0(&format!("algorithm = \"aes-128-cbc-hmac-sha1\"\nkey = \"{}\"\nauth_key = \"{}\"", hexkey(16), hexkey(32)));
    assert_one(&text, "auth_key = ", 11, "sa[0].auth_key", "expected 40 hex digits (HMAC-SHA1-96 key), found 64");
    let text = with_sa0(&format!("algorithm = \"null-hmac-sha256\"\nauth_key = \"{}\"", hexkey(20)));
    assert_one(&text, "auth_key = ", 11, "sa[0].auth_key", "expected 64 hex digits (HMAC-SHA-256-128 key), found 40");
    let text = with_sa0(&format!("algorithm = \"aes-256-ctr-hmac-sha384\"\nkey = \"{}\"\nauth_key = \"{}\"", hexkey(36), hexkey(32)));
    assert_one(&text, "auth_key = ", 11, "sa[0].auth_key", "expected 96 hex digits (HMAC-SHA-384-192 key), found 64");
    let text = with_sa0(&format!("algorithm = \"null-hmac-sha512\"\nauth_key = \"{}\"", hexkey(48)));
    assert_one(&text, "auth_key = ", 11, "sa[0].auth_key", "expected 128 hex digits (HMAC-SHA-512-256 key), found 96");
    // Refused for the combined modes.
    let text = edit("key = \"00112233445566778899aabbccddeeff01020304\"", &format!("key = \"00112233445566778899aabbccddeeff01020304\"\nauth_key = \"{}\"", hexkey(20)));
    assert_one(&text, "auth_key = ", 11, "sa[0].auth_key", "aes-128-gcm authenticates with its own ICV and takes no auth_key");
    // NULL encryption takes no key.
    let text = with_sa0(&format!("algorithm = \"null-hmac-sha1\"\nkey = \"{}\"\nauth_key = \"{}\"", hexkey(16), hexkey(20)));
    assert_one(&text, "key = ", 6, "sa[0].key", "null-hmac-sha1 uses NULL encryption (RFC 2410) and takes no key");
    assert!(!error(&text).to_string().contains(&hexkey(16)[..8]), "no key in messages");
}

#[test]
fn icv_len_per_sa() {
    for (alg_line, icv, ok) in [
        ("", "8", true),
        ("", "12", true),
        ("", "16", true),
        ("", "10", false),
        ("algorithm = \"chacha20-poly1305\"\n", "8", false),
    ] {
        let base = if alg_line.is_empty() {
            edit("key = \"00112233445566778899aabbccddeeff01020304\"", &format!("key = \"00112233445566778899aabbccddeeff01020304\"\nicv_len = {icv}"))
        } else {
            with_sa0(&format!("{alg_line}key = \"{}\"\nicv_len = {icv}", hexkey(36)))
        };
        match config::parse(&base, Path::new(FILE)) {
            Ok(cfg) => {
                assert!(ok, "icv_len {icv} accepted");
                assert_eq!(cfg.sas[0].icv_len, icv.parse::<usize>().unwrap());
                if icv != "16" {
                    assert!(config::summary(&cfg).contains(&format!("aes-128-gcm icv {icv}")));
                }
            }
            Err(e) => {
                assert!(!ok, "icv_len {icv}: {e}");
                let e = e.to_string();
                let want = if alg_line.is_empty() { "sa[0].icv_len: expected 8 or 12 or 16 for aes-128-gcm (RFC 4106 §6), found 10" } else { "sa[0].icv_len: expected 16 for chacha20-poly1305, found 8" };
                assert!(e.contains(want), "{e}");
            }
        }
    }
}

#[test]
fn unknown_algorithm_lists_every_name() {
    let text = edit("algorithm = \"aes-128-gcm\"\nkey = \"0011", "algorithm = \"aes-128-ocb\"\nkey = \"0011");
    let e = error(&text).to_string();
    for alg in Algorithm::ALL {
        assert!(e.contains(&format!("\"{}\"", alg.name())), "{e}");
    }
}

#[test]
fn udp_encap_and_ports() {
    let cfg = config::parse(BASE, Path::new(FILE)).unwrap();
    assert!(!cfg.sas[0].udp_encap, "udp_encap defaults to false");
    let key = "tunnel_dst = \"203.0.113.2\"";
    let with = |lines: &str| edit(key, &format!("{key}\n{lines}"));
    for (lines, sport, dport) in [
        ("udp_encap = true", 4500, 4500),
        ("udp_encap = true\nudp_port = 14500", 14500, 14500),
        ("udp_encap = true\nudp_dport = 61000", 4500, 61000),
        ("udp_encap = true\nudp_port = 1000\nudp_sport = 2000", 2000, 1000),
    ] {
        let cfg = config::parse(&with(lines), Path::new(FILE)).unwrap_or_else(|e| panic!("{lines}: {e}"));
        let sa = &cfg.sas[0];
        assert!(sa.udp_encap);
        assert_eq!((sa.udp_sport, sa.udp_dport), (sport, dport), "{lines}");
        assert!(config::summary(&cfg).contains(&format!("udp {sport}->{dport}")), "{lines}");
    }
    let text = with("udp_dport = 4501");
    assert_one(&text, "udp_dport", 12, "sa[0].udp_dport", "applies only with udp_encap = true");
    let text = with("udp_encap = true\nudp_sport = 0");
    assert_one(&text, "udp_sport = 0", 12, "sa[0].udp_sport", "expected an integer in 1..=65535, found 0");
    let text = with("udp_encap = \"yes\"");
    let e = error(&text).to_string();
    assert!(e.contains("sa[0].udp_encap") && e.contains("a boolean"), "{e}");
}

#[test]
fn reassembly_table_defaults_values_and_ranges() {
    let d = config::parse(BASE, Path::new(FILE)).unwrap().reassembly;
    assert_eq!((d.contexts, d.max_fragments, d.timeout_ms, d.forwarded), (64, 16, 5000, false));
    let text = format!("{BASE}\n[reassembly]\ncontexts = 0\nmax_fragments = 256\ntimeout_ms = 10\nforwarded = true\n");
    let r = config::parse(&text, Path::new(FILE)).unwrap().reassembly;
    assert_eq!((r.contexts, r.max_fragments, r.timeout_ms, r.forwarded), (0, 256, 10, true));
    for (line, field, msg) in [
        ("contexts = 1025", "contexts", "expected an integer in 0..=1024, found 1025"),
        ("max_fragments = 1", "max_fragments", "expected an integer in 2..=256, found 1"),
        ("timeout_ms = 9", "timeout_ms", "expected an integer in 10..=120000, found 9"),
        ("timeout_ms = \"5s\"", "timeout_ms", "an integer in 10..=120000"),
        ("forwarded = 1", "forwarded", "a boolean"),
    ] {
        let text = format!("{BASE}\n[reassembly]\n{line}\n");
        assert_one(&text, line, field.len() + 3, &format!("reassembly.{field}"), msg);
    }
    let text = format!("{BASE}\n[reassembly]\ncontext = 8\n");
    assert_one(&text, "context =", 0, "reassembly.context", "did you mean `contexts`?");
}

// ---- IPv6 in every address field -------------------------------------------

/// BASE with IPv6 everywhere: port addresses, v6 outer tunnel, v6 selectors,
/// v6 routes and neighbour.
fn base_v6() -> String {
    BASE.replace("addresses = [\"203.0.113.1/24\"]", "addresses = [\"203.0.113.1/24\", \"2001:db8:ff::1/64\"]")
        .replace("tunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"", "tunnel_src = \"2001:db8:ff::1\"\ntunnel_dst = \"2001:db8:ff::2\"")
        .replace("tunnel_src = \"203.0.113.2\"\ntunnel_dst = \"203.0.113.1\"", "tunnel_src = \"2001:db8:ff::2\"\ntunnel_dst = \"2001:db8:ff::1\"")
        .replace("src = \"192.0.2.0/24\"\ndst = \"198.51.100.0/24\"", "src = \"2001:db8:a::/64\"\ndst = \"2001:db8:b::/64\"")
        .replace("src = \"198.51.100.0/24\"\ndst = \"192.0.2.0/24\"", "src = \"2001:db8:b::/64\"\ndst = \"2001:db8:a::/64\"")
        .replace("prefix = \"198.51.100.0/24\"\nport = \"outside\"\nvia = \"203.0.113.2\"", "prefix = \"2001:db8:b::/64\"\nport = \"outside\"\nvia = \"2001:db8:ff::2\"")
        .replace("prefix = \"203.0.113.0/24\"", "prefix = \"2001:db8:ff::/64\"")
        .replace("ip = \"203.0.113.2\"", "ip = \"2001:db8:ff::2\"")
}

#[test]
fn ipv6_everywhere_loads() {
    let text = base_v6();
    assert!(text.contains("2001:db8:ff::2\"\nmac"), "{text}");
    let cfg = config::parse(&text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert_eq!(cfg.ports[1].addresses, [(ip("203.0.113.1"), 24), (ip("2001:db8:ff::1"), 64)]);
    assert_eq!((cfg.sas[0].tunnel_src, cfg.sas[0].tunnel_dst), (ip("2001:db8:ff::1"), ip("2001:db8:ff::2")));
    assert_eq!(cfg.policies[0].src, (ip("2001:db8:a::"), 64));
    assert_eq!(cfg.routes[0].via, Some(ip("2001:db8:ff::2")));
    assert_eq!(cfg.neighbours[0].ip, ip("2001:db8:ff::2"));
    assert!(config::warnings(&cfg).is_empty(), "{:?}", config::warnings(&cfg));
    let s = config::summary(&cfg);
    assert!(s.contains("tunnel ipv6 2001:db8:ff::1 -> 2001:db8:ff::2"), "{s}");
    assert!(s.contains("2001:db8:a::/64 -> 2001:db8:b::/64"), "{s}");
    assert!(s.contains("families: addresses 1 IPv4 / 1 IPv6, policies 0 IPv4 / 2 IPv6, routes 0 IPv4 / 2 IPv6, neighbours 0 IPv4 / 1 IPv6"), "{s}");
    assert!(s.contains("df -"), "no DF on an IPv6 outer header: {s}");
}

#[test]
fn ipv6_mistakes_name_their_field() {
    let v6 = base_v6();
    // Tunnel endpoints of two families.
    let t = v6.replacen("tunnel_dst = \"2001:db8:ff::2\"", "tunnel_dst = \"203.0.113.2\"", 1);
    assert_one(&t, "tunnel_dst = \"203.0.113.2\"", 13, "sa[0].tunnel_dst", "expected an IPv6 address like tunnel_src (2001:db8:ff::1), found 203.0.113.2");
    // DF on an IPv6 outer header.
    let t = v6.replacen("tunnel_dst = \"2001:db8:ff::2\"", "tunnel_dst = \"2001:db8:ff::2\"\ndf = \"set\"", 1);
    assert_one(&t, "df = ", 5, "sa[0].df", "df applies to an IPv4 outer header only");
    // Multicast / unspecified endpoints.
    let t = v6.replacen("tunnel_dst = \"2001:db8:ff::2\"", "tunnel_dst = \"ff02::1\"", 1);
    assert_one(&t, "tunnel_dst = \"ff02", 13, "sa[0].tunnel_dst", "expected a unicast IPv6 address, found ff02::1");
    // Policy src and dst of two families.
    let t = v6.replacen("dst = \"2001:db8:b::/64\"", "dst = \"198.51.100.0/24\"", 1);
    assert_one(&t, "dst = \"198.51", 6, "policy[0].dst", "expected an IPv6 prefix like src (2001:db8:a::), found 198.51.100.0");
    // Host bits, length past 128.
    let t = v6.replacen("src = \"2001:db8:a::/64\"", "src = \"2001:db8:a::1/64\"", 1);
    assert_one(&t, "src = \"2001:db8:a::1", 6, "policy[0].src", "host bits set in 2001:db8:a::1/64 (the network is 2001:db8:a::/64)");
    let t = v6.replacen("src = \"2001:db8:a::/64\"", "src = \"2001:db8:a::/129\"", 1);
    assert_one(&t, "src = \"2001:db8:a::/129", 6, "policy[0].src", "prefix length 0..=128");
    // Route next hop of the other family.
    let t = v6.replacen("via = \"2001:db8:ff::2\"", "via = \"203.0.113.2\"", 1);
    assert_one(&t, "via = ", 6, "route[0].via", "expected an IPv6 next hop for prefix 2001:db8:b::, found 203.0.113.2");
    // Bad address text.
    let t = v6.replacen("ip = \"2001:db8:ff::2\"", "ip = \"2001:db8:ff:::2\"", 1);
    assert_one(&t, "ip = ", 5, "neighbour[0].ip", "expected an IPv4 or IPv6 address like");
    // Duplicate v6 port address.
    let t = v6.replacen("\"2001:db8:ff::1/64\"]", "\"2001:db8:ff::1/64\", \"2001:db8:ff::1/128\"]", 1);
    assert_one(&t, "\"2001:db8:ff::1/128", 0, "port[1].addresses[2]", "duplicate address 2001:db8:ff::1");
}

#[test]
fn policy_defaults_take_the_other_sides_family() {
    let one_sided = BASE.replacen("src = \"192.0.2.0/24\"\ndst = \"198.51.100.0/24\"", "dst = \"2001:db8:b::/64\"", 1);
    let cfg = config::parse(&one_sided, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.policies[0].src, ("::".parse().unwrap(), 0));
    let none = BASE.replacen("src = \"192.0.2.0/24\"\ndst = \"198.51.100.0/24\"\n", "", 1);
    let cfg = config::parse(&none, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((cfg.policies[0].src, cfg.policies[0].dst), (("0.0.0.0".parse().unwrap(), 0), ("0.0.0.0".parse().unwrap(), 0)), "IPv4 any when both are missing");
}

#[test]
fn summary_shows_outer_df_and_ttl_only_for_outbound_tunnel_sas() {
    let s = config::summary(&config::parse(BASE, Path::new(FILE)).unwrap());
    let row = |s: &str, spi: &str| s.lines().find(|l| l.contains(spi)).unwrap_or_else(|| panic!("no {spi} row: {s}")).to_owned();
    let r = row(&s, "SPI 1001");
    assert!(r.contains("df copy") && r.contains("ttl 64 (default)"), "outbound tunnel SA: {r}");
    // An inbound SA builds no outer header.
    let r = row(&s, "SPI 1002");
    assert!(r.contains("df -") && r.contains("ttl -"), "inbound SA: {r}");
    // A transport-mode SA keeps the packet's own IP header: there is no
    // outer header whose DF or TTL the SA would set.
    let t = BASE.replacen("tunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"", "mode = \"transport\"", 1);
    assert!(t.contains("mode = \"transport\""));
    let cfg = config::parse(&t, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    let s = config::summary(&cfg);
    let r = row(&s, "SPI 1001");
    assert!(r.contains("transport") && r.contains("df -") && r.contains("ttl -"), "outbound transport SA: {r}");
}

#[test]
fn nat_t_transport_sa_is_ipv4_only() {
    let nat_t_transport = |text: &str, src: &str, dst: &str| {
        text.replacen(&format!("tunnel_src = \"{src}\"\ntunnel_dst = \"{dst}\""), "mode = \"transport\"\nudp_encap = true", 1)
    };
    // IPv4 policies may protect with it.
    let v4 = nat_t_transport(BASE, "203.0.113.1", "203.0.113.2");
    assert!(v4.contains("udp_encap = true"));
    config::parse(&v4, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    // An IPv6 policy may not: its packets could not be sent.
    let v6 = nat_t_transport(&base_v6(), "2001:db8:ff::1", "2001:db8:ff::2");
    assert!(v6.contains("udp_encap = true"));
    assert_one(
        &v6,
        "action = \"protect 1001\"",
        9,
        "policy[0].action",
        "SA 1001 is a transport-mode SA with udp_encap, which carries IPv4 only (RFC 3948); an IPv6 policy cannot protect with it",
    );
}

#[test]
fn dummy_packets_defaults_ranges_and_where_they_apply() {
    let cfg = config::parse(BASE, Path::new(FILE)).unwrap();
    assert_eq!((cfg.sas[0].dummy_interval_ms, cfg.sas[0].dummy_len), (0, 0), "off by default");
    let out = "tunnel_dst = \"203.0.113.2\"";
    let with = |lines: &str| edit(out, &format!("{out}\n{lines}"));
    let cfg = config::parse(&with("dummy_interval_ms = 250\ndummy_len = 1400"), Path::new(FILE)).unwrap();
    assert_eq!((cfg.sas[0].dummy_interval_ms, cfg.sas[0].dummy_len), (250, 1400));
    assert!(config::summary(&cfg).contains("dummy 1400 B every 250 ms"), "{}", config::summary(&cfg));
    let text = with("dummy_interval_ms = 3600001");
    assert_one(&text, "dummy_interval_ms", 20, "sa[0].dummy_interval_ms", "expected an integer in 0..=3600000, found 3600001");
    let text = with("dummy_interval_ms = -1");
    assert_one(&text, "dummy_interval_ms", 20, "sa[0].dummy_interval_ms", "expected an integer in 0..=3600000, found -1");
    let text = with("dummy_interval_ms = 10\ndummy_len = 1401");
    assert_one(&text, "dummy_len", 12, "sa[0].dummy_len", "expected an integer in 0..=1400, found 1401");
    let text = with("dummy_interval_ms = \"10\"");
    assert_one(&text, "dummy_interval_ms", 20, "sa[0].dummy_interval_ms", "an integer");
    let text = with("dummy_len = 64");
    assert_one(&text, "dummy_len", 12, "sa[0].dummy_len", "applies only with dummy_interval_ms > 0");
    // Inbound SAs receive dummies, they do not send them.
    let inb = "tunnel_dst = \"203.0.113.1\"";
    let text = edit(inb, &format!("{inb}\ndummy_interval_ms = 10"));
    assert_one(&text, "dummy_interval_ms", 20, "sa[1].dummy_interval_ms", "applies to outbound SAs only");
    // Transport SAs have no endpoints of their own to address dummies to.
    let text = edit(
        "tunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"",
        "mode = \"transport\"\ndummy_interval_ms = 10\ndummy_len = 8",
    );
    let e = error(&text);
    let shown = e.to_string();
    assert_eq!(e.problems().len(), 2, "{shown}");
    for key in ["dummy_interval_ms", "dummy_len"] {
        let (line, col) = pos(&text, key);
        assert!(shown.contains(&format!("{FILE}:{line}:{}: sa[0].{key}: {key} needs mode = \"tunnel\"", col + key.len() + 3)), "{shown}");
    }
}

#[test]
fn dummy_packets_must_fit_the_mtu_of_their_route() {
    // A route to the tunnel end on a port with a small MTU: 1400 bytes of
    // dummy payload become 20 + 8 + 8 + 1404 + 16 = 1456 bytes with AES-GCM.
    let base = edit("addresses = [\"203.0.113.1/24\"]", "addresses = [\"203.0.113.1/24\"]\nmtu = 1400");
    // BASE routes 203.0.113.0/24 out of "outside".
    let out = "tunnel_dst = \"203.0.113.2\"";
    let text = base.replacen(out, &format!("{out}\ndummy_interval_ms = 10\ndummy_len = 1400"), 1);
    assert_one(&text, "dummy_len", 12, "sa[0].dummy_len", "1456 bytes once encapsulated, more than the MTU 1400 of port \"outside\"");
    // 1340 bytes: 1344 + 52 = 1396 fits.
    let ok = text.replace("dummy_len = 1400", "dummy_len = 1340");
    config::parse(&ok, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    // The default dummy_len of 0 fits even a 576-byte MTU.
    let tiny = text.replace("dummy_len = 1400\n", "").replace("mtu = 1400", "mtu = 576");
    config::parse(&tiny, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn tfc_pad_to_range_where_it_applies_and_mtu() {
    assert_eq!(config::parse(BASE, Path::new(FILE)).unwrap().sas[0].tfc_pad_to, 0, "off by default");
    let out = "tunnel_dst = \"203.0.113.2\"";
    let with = |lines: &str| edit(out, &format!("{out}\n{lines}"));
    let cfg = config::parse(&with("tfc_pad_to = 1400"), Path::new(FILE)).unwrap();
    assert_eq!(cfg.sas[0].tfc_pad_to, 1400);
    assert!(config::summary(&cfg).contains("tfc pad to 1400 B"), "{}", config::summary(&cfg));
    assert_one(&with("tfc_pad_to = 1401"), "tfc_pad_to", 13, "sa[0].tfc_pad_to", "expected an integer in 0..=1400, found 1401");
    let inb = "tunnel_dst = \"203.0.113.1\"";
    let text = edit(inb, &format!("{inb}\ntfc_pad_to = 100"));
    assert_one(&text, "tfc_pad_to", 13, "sa[1].tfc_pad_to", "applies to outbound SAs only (the sender pads, RFC 4303 §2.7");
    let text = edit("tunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"", "mode = \"transport\"\ntfc_pad_to = 100");
    assert_one(&text, "tfc_pad_to", 13, "sa[0].tfc_pad_to", "needs mode = \"tunnel\"");
    // Routed to a 576-byte MTU port: 600 bytes of inner packet do not fit.
    let base = edit("addresses = [\"203.0.113.1/24\"]", "addresses = [\"203.0.113.1/24\"]\nmtu = 576");
    let text = format!("{}\n[[route]]\nprefix = \"203.0.113.2/32\"\nport = \"outside\"\n", base.replacen(out, &format!("{out}\ntfc_pad_to = 600"), 1));
    assert_one(&text, "tfc_pad_to", 13, "sa[0].tfc_pad_to", "an inner packet padded to 600 bytes is 656 bytes once encapsulated, more than the MTU 576 of port \"outside\" that tunnel_dst 203.0.113.2 is routed to; make tfc_pad_to smaller");
    // 520 bytes fit at the default alignment (524 + 52 = 576) but not
    // padded to 256 (768 + 52): the message names pad_align as the cause.
    let text = format!("{}\n[[route]]\nprefix = \"203.0.113.2/32\"\nport = \"outside\"\n", base.replacen(out, &format!("{out}\ntfc_pad_to = 520\npad_align = 256"), 1));
    assert_one(&text, "tfc_pad_to", 13, "sa[0].tfc_pad_to", "more than the MTU 576 of port \"outside\" that tunnel_dst 203.0.113.2 is routed to; make tfc_pad_to or pad_align (256) smaller: at the algorithm's own alignment it is 576 bytes");
}

/// Errors the toml parser reports with a position only (an integer beyond
/// 64 bits) still name their field, found from the line and the table
/// headers above it.
#[test]
fn integer_too_large_names_its_field() {
    let text = edit("spi = 1002", "spi = 99999999999999999999999");
    let err = error(&text);
    let (line, _) = pos(&text, "99999999999999999999999");
    let shown = err.to_string();
    assert!(shown.starts_with(&format!("{FILE}:{line}:")), "{shown}");
    assert!(shown.contains(": sa[1].spi: "), "{shown}");
    let text = edit("workers = 1", "workers = 99999999999999999999999");
    let shown = error(&text).to_string();
    assert!(shown.contains(": gateway.workers: "), "{shown}");
}

#[test]
fn control_table_defaults_values_and_ranges() {
    let cfg = config::parse(BASE, Path::new(FILE)).unwrap();
    let d = &cfg.control;
    assert_eq!((d.socket.to_str().unwrap(), d.rekey_grace_ms), ("/run/secgw/secgw.sock", 5000));
    let summary = config::summary(&cfg);
    assert!(summary.contains("control socket /run/secgw/secgw.sock") && summary.contains("rekey grace 5000 ms"), "{summary}");
    let named = edit("workers = 1\n", "workers = 1\nname = \"gw7\"\n");
    assert_eq!(config::parse(&named, Path::new(FILE)).unwrap().control.socket, Path::new("/run/secgw/gw7.sock"));
    let text = format!("{named}\n[control]\nsocket = \"/tmp/x/ctl.sock\"\nrekey_grace_ms = 0\n");
    let c = config::parse(&text, Path::new(FILE)).unwrap().control;
    assert_eq!((c.socket.to_str().unwrap(), c.rekey_grace_ms), ("/tmp/x/ctl.sock", 0));
    let long = format!("socket = \"/{}\"", "s".repeat(107));
    for (line, field, msg) in [
        ("rekey_grace_ms = 3600001", "rekey_grace_ms", "expected an integer in 0..=3600000, found 3600001"),
        ("rekey_grace_ms = -1", "rekey_grace_ms", "expected an integer in 0..=3600000, found -1"),
        ("rekey_grace_ms = \"5s\"", "rekey_grace_ms", "an integer in 0..=3600000"),
        ("socket = \"\"", "socket", "expected a path"),
        ("socket = 5", "socket", "expected a string, found integer 5"),
        (long.as_str(), "socket", "at most 107 bytes (a Unix socket address), found 108"),
    ] {
        let text = format!("{BASE}\n[control]\n{line}\n");
        assert_one(&text, line, field.len() + 3, &format!("control.{field}"), msg);
    }
    let text = format!("{BASE}\n[control]\nsockt = \"/x\"\n");
    assert_one(&text, "sockt =", 0, "control.sockt", "did you mean `socket`?");
    // Without control.socket the default comes from gateway.name, which must make a path.
    let bad = edit("workers = 1\n", "workers = 1\nname = \"a/b\"\n");
    assert_one(&bad, "\"a/b\"", 0, "gateway.name", "the default control socket /run/secgw/a/b.sock is not usable");
    let fixed = format!("{bad}\n[control]\nsocket = \"/run/ab.sock\"\n");
    assert!(config::parse(&fixed, Path::new(FILE)).is_ok());
}

/// Lifetime keys (RFC 4301 §4.4.2.1): absent = no limit (`u64::MAX`), each
/// given one lands in its slot, the ranges, soft below hard, shown by the
/// summary.
#[test]
fn lifetime_keys_defaults_ranges_and_soft_below_hard() {
    use secgw::esp::{Lifetime, Limits};
    let cfg = config::parse(BASE, Path::new(FILE)).unwrap();
    for sa in &cfg.sas {
        assert_eq!(sa.lifetime, Lifetime { soft: Limits::NONE, hard: Limits::NONE }, "no limits by default");
        assert_eq!(sa.first_seq, 1);
    }
    let out = "tunnel_dst = \"203.0.113.2\"";
    let inb = "tunnel_dst = \"203.0.113.1\"";
    let with = |lines: &str| edit(out, &format!("{out}\n{lines}"));
    let all = "soft_packets = 10\nhard_packets = 20\nsoft_bytes = 3000\nhard_bytes = 4000\nsoft_seconds = 50\nhard_seconds = 60";
    let cfg = config::parse(&with(all), Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cfg.sas[0].lifetime,
        Lifetime { soft: Limits { packets: 10, bytes: 3000, seconds: 50 }, hard: Limits { packets: 20, bytes: 4000, seconds: 60 } }
    );
    assert_eq!(cfg.sas[1].lifetime, Lifetime::default(), "the other SA keeps none");
    let shown = config::summary(&cfg);
    assert!(shown.contains("soft 10 pkts 3000 B 50 s") && shown.contains("hard 20 pkts 4000 B 60 s"), "{shown}");
    // Each key alone, on an inbound SA too: the others stay unlimited.
    let cfg = config::parse(&edit(inb, &format!("{inb}\nhard_bytes = 1")), Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.sas[1].lifetime.hard, Limits { bytes: 1, ..Limits::NONE });
    assert_eq!(cfg.sas[1].lifetime.soft, Limits::NONE);
    let cfg = config::parse(&with("soft_seconds = 315576000"), Path::new(FILE)).unwrap();
    assert_eq!(cfg.sas[0].lifetime.soft, Limits { seconds: config::MAX_LIFETIME_SECONDS, ..Limits::NONE });
    let cfg = config::parse(&with("hard_packets = 9223372036854775807"), Path::new(FILE)).unwrap();
    assert_eq!(cfg.sas[0].lifetime.hard.packets, i64::MAX as u64);
    let cfg = config::parse(&with("soft_bytes = 5"), Path::new(FILE)).unwrap();
    assert!(config::summary(&cfg).contains("soft 5 B"));
    assert!(!config::summary(&cfg).contains("hard "), "{}", config::summary(&cfg));

    // Ranges.
    for key in ["soft_packets", "hard_packets", "soft_bytes", "hard_bytes"] {
        assert_one(&with(&format!("{key} = 0")), key, key.len() + 3, &format!("sa[0].{key}"), "expected an integer in 1..=9223372036854775807, found 0");
        assert_one(&with(&format!("{key} = -5")), key, key.len() + 3, &format!("sa[0].{key}"), "found -5");
        assert_one(&with(&format!("{key} = \"5\"")), key, key.len() + 3, &format!("sa[0].{key}"), "expected an integer in 1..=9223372036854775807, found \"5\"");
    }
    for key in ["soft_seconds", "hard_seconds"] {
        assert_one(&with(&format!("{key} = 315576001")), key, key.len() + 3, &format!("sa[0].{key}"), "expected an integer in 1..=315576000, found 315576001");
        assert_one(&with(&format!("{key} = 0")), key, key.len() + 3, &format!("sa[0].{key}"), "found 0");
        assert_one(&with(&format!("{key} = 1.5")), key, key.len() + 3, &format!("sa[0].{key}"), "found float 1.5");
    }
    // Soft below hard: equal and above are refused at the soft key, naming both.
    for (soft, hard, a, b) in [("soft_packets", "hard_packets", 20, 20), ("soft_bytes", "hard_bytes", 4001, 4000), ("soft_seconds", "hard_seconds", 61, 60)] {
        let text = with(&format!("{soft} = {a}\n{hard} = {b}"));
        assert_one(&text, soft, soft.len() + 3, &format!("sa[0].{soft}"), &format!("expected {soft} below {hard} ({b}), found {a}"));
        // On an inbound SA the same.
        let text = edit(inb, &format!("{inb}\n{hard} = {b}\n{soft} = {a}"));
        assert_one(&text, soft, soft.len() + 3, &format!("sa[1].{soft}"), &format!("expected {soft} below {hard} ({b}), found {a}"));
    }
    // A soft limit without a hard one (and the reverse) is fine.
    config::parse(&with("soft_packets = 100\nhard_bytes = 5"), Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    // Several problems in one SA are all reported.
    let e = error(&with("soft_packets = 0\nhard_bytes = -1\nsoft_seconds = 9\nhard_seconds = 9"));
    assert_eq!(e.problems().len(), 3, "{e}");
}

/// `first_seq`: outbound only, 1..=2^32−1 without ESN, 1..=2^64−1 with
/// (strings above TOML's 2^63−1).
#[test]
fn first_seq_ranges_esn_and_direction() {
    let out = "tunnel_dst = \"203.0.113.2\"";
    let with = |lines: &str| edit(out, &format!("{out}\n{lines}"));
    let seq = |text: &str| config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")).sas[0].first_seq;
    assert_eq!(seq(&with("first_seq = 4294967290")), 4294967290);
    assert_eq!(seq(&with("first_seq = 4294967295")), u32::MAX as u64);
    assert_eq!(seq(&with("first_seq = \"0xfffffffa\"")), 0xffff_fffa);
    assert_eq!(seq(&with("esn = true\nfirst_seq = 4294967296")), 1 << 32);
    assert_eq!(seq(&with("esn = true\nfirst_seq = \"18446744073709551615\"")), u64::MAX);
    assert_eq!(seq(&with("esn = true\nfirst_seq = \"0xFFFFFFFFFFFFFFF0\"")), u64::MAX - 15);
    let cfg = config::parse(&with("first_seq = 4294967290"), Path::new(FILE)).unwrap();
    assert!(config::summary(&cfg).contains("first seq 4294967290"), "{}", config::summary(&cfg));
    assert!(!config::summary(&config::parse(BASE, Path::new(FILE)).unwrap()).contains("first seq"));

    let f = "sa[0].first_seq";
    assert_one(&with("first_seq = 4294967296"), "first_seq", 12, f, "expected an integer in 1..=4294967295 (without esn the counter has 32 bits and never cycles, RFC 4303 §3.3.3), found integer 4294967296");
    assert_one(&with("first_seq = \"0x100000000\""), "first_seq", 12, f, "expected an integer in 1..=4294967295 (without esn");
    assert_one(&with("first_seq = 0"), "first_seq", 12, f, "expected an integer in 1..=4294967295");
    assert_one(&with("esn = true\nfirst_seq = 0"), "first_seq", 12, f, "expected an integer in 1..=18446744073709551615 (with esn = true the counter has 64 bits, RFC 4303 §2.2.1), found integer 0");
    assert_one(&with("esn = true\nfirst_seq = \"18446744073709551616\""), "first_seq", 12, f, "(decimal or 0x hex in a string), found \"18446744073709551616\"");
    assert_one(&with("first_seq = \"-1\""), "first_seq", 12, f, "found \"-1\"");
    assert_one(&with("first_seq = -1"), "first_seq", 12, f, "found integer -1");
    assert_one(&with("first_seq = true"), "first_seq", 12, f, "expected an integer in 1..=4294967295, found boolean true");
    // Inbound: the peer's first sequence number (where the replay window
    // starts), the same ranges.
    let inb = "tunnel_dst = \"203.0.113.1\"";
    let cfg = config::parse(&edit(inb, &format!("{inb}\nesn = true\nfirst_seq = 5000000000")), Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((cfg.sas[1].direction, cfg.sas[1].first_seq), (config::Direction::Inbound, 5_000_000_000));
    assert_one(&edit(inb, &format!("{inb}\nfirst_seq = 4294967296")), "first_seq", 12, "sa[1].first_seq", "expected an integer in 1..=4294967295");
}

/// Packet limits an outbound SA without ESN never reaches (its sequence
/// numbers run out first, RFC 4303 §3.3.3) are warned about; with ESN, or
/// within the numbers left, not.
#[test]
fn packet_limits_beyond_the_sequence_space_warn() {
    let out = "tunnel_dst = \"203.0.113.2\"";
    let with = |lines: &str| edit(out, &format!("{out}\n{lines}"));
    let warns = |text: &str| config::warnings(&config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    let w = warns(&with("first_seq = 4294967290\nsoft_packets = 6\nhard_packets = 7"));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("sa[0].hard_packets: 7 packets is never reached: without esn SPI 1001 has 6 sequence numbers"), "{w:?}");
    let w = warns(&with("hard_packets = 4294967296"));
    assert!(w.iter().any(|w| w.contains("sa[0].hard_packets: 4294967296 packets is never reached")), "{w:?}");
    assert!(warns(&with("hard_packets = 4294967295")).is_empty());
    assert!(warns(&with("esn = true\nfirst_seq = 4294967290\nhard_packets = 100")).is_empty());
    // An inbound SA has no counter of its own to run out.
    let inb = "tunnel_dst = \"203.0.113.1\"";
    assert!(warns(&edit(inb, &format!("{inb}\nhard_packets = 9999999999"))).is_empty());
}

/// Byte limits below the smallest IP packet (20 bytes) are reached by the
/// first packet: warned about, hard and soft; 20 is not.
#[test]
fn byte_limits_below_one_packet_warn() {
    let out = "tunnel_dst = \"203.0.113.2\"";
    let warns = |lines: &str| config::warnings(&config::parse(&edit(out, &format!("{out}\n{lines}")), Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    let w = warns("soft_bytes = 5\nhard_bytes = 10");
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w.iter().any(|w| w.contains("sa[0].hard_bytes: 10 bytes is less than the smallest IP packet (20 bytes): SPI 1001 carries no packet")), "{w:?}");
    assert!(w.iter().any(|w| w.contains("sa[0].soft_bytes: 5 bytes is less than the smallest IP packet (20 bytes): SPI 1001 is soft-expired by its first packet")), "{w:?}");
    assert!(warns("soft_bytes = 20\nhard_bytes = 21").is_empty());
}

/// BASE with a `[crypto]` table of `lines` after `[gateway]`.
fn with_crypto(lines: &str) -> String {
    edit("[gateway]\nworkers = 1\n", &format!("[gateway]\nworkers = 1\n\n[crypto]\n{lines}\n"))
}

#[test]
fn crypto_provider_default_values_and_bad_value() {
    use secgw::crypto::{Provider, ProviderChoice};
    let cfg = config::parse(BASE, Path::new(FILE)).unwrap();
    assert_eq!(cfg.crypto.provider, ProviderChoice::Auto, "default auto");
    let summary = config::summary(&cfg);
    assert!(summary.contains("crypto: backend software, provider auto, queue pairs of 1024 ops (sessions: ring 2)"), "{summary}");
    assert!(summary.contains("aes-128-gcm provider ring"), "auto gives GCM-16 to ring:\n{summary}");
    for (name, want) in [("auto", ProviderChoice::Auto), ("rustcrypto", ProviderChoice::Only(Provider::RustCrypto)), ("ring", ProviderChoice::Only(Provider::Ring))] {
        let cfg = config::parse(&with_crypto(&format!("provider = \"{name}\"")), Path::new(FILE)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(cfg.crypto.provider, want);
    }
    let cfg = config::parse(&with_crypto("backend = \"descriptor\"\nprovider = \"rustcrypto\""), Path::new(FILE)).unwrap();
    assert!(config::summary(&cfg).contains("crypto: backend descriptor, provider rustcrypto, queue pairs of 1024 ops (sessions: rustcrypto 2)"), "{}", config::summary(&cfg));
    let text = with_crypto("provider = \"openssl\"");
    assert_one(&text, "\"openssl\"", 0, "crypto.provider", "\"auto\"");
    let e = error(&text).to_string();
    assert!(e.contains("\"rustcrypto\"") && e.contains("\"ring\""), "{e}");
    assert_one(&with_crypto("provider = 1"), "provider = 1", 11, "crypto.provider", "");
}

#[test]
fn crypto_provider_ring_refuses_what_ring_does_not_run() {
    // An algorithm ring does not run: the SA's algorithm, naming the SA.
    let text = with_sa0(&format!("algorithm = \"aes-128-cbc-hmac-sha1\"\nkey = \"{}\"\nauth_key = \"{}\"", hexkey(16), hexkey(20)));
    let text = text.replacen("[gateway]\nworkers = 1\n", "[gateway]\nworkers = 1\n[crypto]\nprovider = \"ring\"\n", 1);
    assert_one(&text, "\"aes-128-cbc-hmac-sha1\"", 0, "sa[0].algorithm", "SA 1001 (outbound): aes-128-cbc-hmac-sha1 is not run by [crypto] provider = \"ring\"");
    assert!(error(&text).to_string().contains("offers aes-128-gcm (icv_len [16]), aes-256-gcm (icv_len [16]), chacha20-poly1305 (icv_len [16])"));
    // A truncated GCM ICV: the SA's icv_len.
    let text = with_crypto("provider = \"ring\"").replacen(
        "key = \"ffeeddccbbaa99887766554433221100a0b0c0d0\"",
        "key = \"ffeeddccbbaa99887766554433221100a0b0c0d0\"\nicv_len = 12",
        1,
    );
    assert_one(&text, "icv_len = 12", 10, "sa[1].icv_len", "SA 1002 (inbound): icv_len 12 with aes-128-gcm is not run by [crypto] provider = \"ring\"");
    // The same SAs load with auto (RustCrypto runs them) and rustcrypto.
    for p in ["auto", "rustcrypto"] {
        let cfg = config::parse(&text.replace("provider = \"ring\"", &format!("provider = \"{p}\"")), Path::new(FILE)).unwrap();
        assert!(config::summary(&cfg).contains("aes-128-gcm icv 12 provider rustcrypto"), "{}", config::summary(&cfg));
    }
    // ChaCha20-Poly1305 and AES-256-GCM are ring's.
    let text = with_sa0(&format!("algorithm = \"chacha20-poly1305\"\nkey = \"{}\"", hexkey(36)));
    let text = text.replacen("[gateway]\nworkers = 1\n", "[gateway]\nworkers = 1\n[crypto]\nprovider = \"ring\"\n", 1);
    let cfg = config::parse(&text, Path::new(FILE)).unwrap();
    assert!(config::summary(&cfg).contains("chacha20-poly1305 provider ring"));
}

/// `pad_align` (RFC 4303 §2.4): outbound only, a power of two in 4..=256,
/// at least the algorithm's block size; shown by `check`.
#[test]
fn pad_align_values_direction_and_block_size() {
    let out = "tunnel_dst = \"203.0.113.2\"";
    let with = |lines: &str| edit(out, &format!("{out}\n{lines}"));
    let align = |text: &str| config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")).sas[0].pad_align;
    assert_eq!(align(BASE), 0, "absent: the algorithm's own");
    assert_eq!(align(&with("pad_align = 0")), 0, "0 spells the default, as the config reference shows it");
    for n in [4usize, 8, 16, 32, 64, 128, 256] {
        assert_eq!(align(&with(&format!("pad_align = {n}"))), n);
    }
    let cfg = config::parse(&with("pad_align = 16"), Path::new(FILE)).unwrap();
    assert!(config::summary(&cfg).contains("pad align 16 B"), "{}", config::summary(&cfg));
    assert!(!config::summary(&config::parse(BASE, Path::new(FILE)).unwrap()).contains("pad align"));

    let f = "sa[0].pad_align";
    assert_one(&with("pad_align = 12"), "pad_align", 12, f, "expected a power of two (4, 8, 16, 32, 64, 128 or 256), found 12");
    assert_one(&with("pad_align = 2"), "pad_align", 12, f, "expected an integer in 4..=256, found 2");
    assert_one(&with("pad_align = 512"), "pad_align", 12, f, "expected an integer in 4..=256, found 512");
    assert_one(&with("pad_align = \"16\""), "pad_align", 12, f, "expected an integer in 4..=256");
    let cbc = edit("algorithm = \"aes-128-gcm\"\nkey = \"00112233445566778899aabbccddeeff01020304\"", "algorithm = \"aes-128-cbc-hmac-sha1\"\nkey = \"00112233445566778899aabbccddeeff\"\nauth_key = \"00112233445566778899aabbccddeeff00112233\"");
    let cbc_with = |lines: &str| cbc.replacen(out, &format!("{out}\n{lines}"), 1);
    assert_eq!(config::parse(&cbc_with("pad_align = 32"), Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")).sas[0].pad_align, 32);
    assert_one(&cbc_with("pad_align = 8"), "pad_align", 12, f, "aes-128-cbc-hmac-sha1 encrypts whole 16-byte blocks (RFC 4303 §2.4): pad_align must be at least 16, found 8");
    let inb = "tunnel_dst = \"203.0.113.1\"";
    assert_one(&edit(inb, &format!("{inb}\npad_align = 16")), "pad_align", 12, "sa[1].pad_align", "pad_align applies to outbound SAs only");
}

/// A misspelt `mode` on an SA written for transport mode (no tunnel
/// addresses) is reported as the mode it is, alone: not as the
/// `tunnel_src` a tunnel-mode SA would need (which hid the real mistake).
#[test]
fn misspelt_mode_is_named_not_a_missing_tunnel_address() {
    for bad in ["\"Transport\"", "\"trnsport\"", "5"] {
        let text = edit("tunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"", &format!("mode = {bad}"));
        let err = error(&text).to_string();
        assert!(err.contains("sa[0].mode") && !err.contains("tunnel_src") && !err.contains("tunnel_dst"), "{bad}: {err}");
    }
    // Nor on an SA written for tunnel mode: its addresses are not
    // compared with placeholders ("found 0.0.0.0").
    let text = edit("tunnel_src = \"203.0.113.1\"", "mode = \"tunel\"\ntunnel_src = \"203.0.113.1\"");
    let err = error(&text).to_string();
    assert!(err.contains("sa[0].mode") && !err.contains("tunnel_dst") && !err.contains("0.0.0.0"), "{err}");
}

/// A core that is not on this machine is named with its field and the
/// cores there are (`secgw check` and `run` both ask `worker_cores`).
#[test]
fn a_missing_core_names_the_field_and_the_cores_there_are() {
    let text = BASE.replacen("workers = 1\n", "workers = 1\ncores = [999]\n", 1);
    let cfg = load_text(&text);
    assert_eq!(cfg.gateway.cores, [999]);
    let e = secgw::control::run::worker_cores(&cfg).unwrap_err().to_string();
    let at = placed(&cfg, &text, "999", 0);
    assert!(e.starts_with(&format!("{at}gateway.cores[0]: worker 0 is pinned to core 999, which does not exist here (cores: 0")), "{e}");
}

/// `[[gateway]]` for `[gateway]` (and the like) is said in the file's
/// words, not serde's ("invalid length 1, expected struct RawGateway").
#[test]
fn table_shape_mistakes_are_named_in_toml_terms() {
    for (text, want) in [
        ("[[gateway]]\nname = \"g\"\n", "test.toml:1:1: gateway: expected a table, found an array of tables; write [gateway] once"),
        ("[[neighbour_table]]\n", "test.toml:1:1: neighbour_table: expected a table, found an array of tables; write [neighbour_table] once"),
        ("crypto = 3\n", "test.toml:1:10: crypto: expected a table ([crypto]), found integer `3`"),
        ("sa = 1\n", "test.toml:1:6: sa: expected an array of tables ([[sa]] entries), found integer `1`"),
        ("sa = [1]\n", "test.toml:1:7: sa: expected a table ([[sa]] entry), found integer `1`"),
        ("gateway = [1]\n", "test.toml:1:11: gateway: expected a table ([gateway]), found an array"),
        ("sa = {}\n", "test.toml:1:6: sa: expected an array of tables ([[sa]] entries), found a table"),
        ("sa = [[1]]\n", "test.toml:1:7: sa: expected a table ([[sa]] entry), found an array"),
        ("sa.spi = 1\n", "test.toml:1:1: sa: expected an array of tables ([[sa]] entries), found a table"),
        ("[port.inside]\nname = \"x\"\n", "test.toml:1:2: port: expected an array of tables ([[port]] entries), found a table"),
        ("[[port]]\nname = \"a\"\n[port]\nname = \"b\"\n", "test.toml:3:1: port: [port] beside [[port]]: `port` is an array of tables, write [[port]] for each entry"),
        ("[gateway]\n[[gateway]]\n", "test.toml:2:1: gateway: [[gateway]] beside [gateway]: `gateway` is one table, write [gateway] once"),
        ("[gateway]\nworkers.count = 1\n", "test.toml:2:9: gateway.workers: expected a value, found a table (a dotted key `a.b = …` or a [table.key] header makes one)"),
    ] {
        let shown = error(text).to_string();
        assert_eq!(shown, want, "{text:?}");
        assert!(!shown.contains("Raw") && !shown.contains("struct"), "{shown}");
    }
}

/// Warnings of an imported `.cfg` are placed on its own lines.
#[test]
fn warnings_of_a_dpdk_cfg_name_its_lines() {
    let cfg_text = "sa out 5 aead_algo aes-128-gcm aead_key 01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:10:11:12:13:14 mode ipv4-tunnel src 172.16.1.5 dst 172.16.2.5\n\
                    sp ipv4 out esp protect 5 pri 1 dst 192.168.105.0/24 sport 0:65535 dport 0:65535\n\
                    sa in 6 aead_algo aes-128-gcm aead_key 11:12:13:14:15:16:17:18:19:1a:1b:1c:1d:1e:1f:20:21:22:23:24 mode ipv4-tunnel src 172.16.2.5 dst 172.16.1.5\n\
                    sp ipv4 in esp protect 6 pri 1 dst 192.168.55.0/24 sport 0:65535 dport 0:65535\n\
                    rt ipv4 dst 172.16.2.5/32 port 1\n\
                    rt ipv4 dst 192.168.55.0/24 port 0\n";
    let dir = std::env::temp_dir().join(format!("secgw-config-test-{}-cfg", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("ep.cfg");
    std::fs::write(&path, cfg_text).expect("write .cfg");
    let (cfg, _) = config::dpdk::load(&path, &config::dpdk::ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let w = config::warnings(&cfg);
    let spi = |n: u32| w.iter().find(|w| w.contains(&format!("SPI {n} ")) || w.contains(&format!("SPI {n}:"))).unwrap_or_else(|| panic!("no warning for SPI {n}: {w:?}"));
    let file = path.display();
    assert!(spi(5).starts_with(&format!("{file}:1:1: sa[0].spi: ")), "{w:?}");
    assert!(spi(6).starts_with(&format!("{file}:3:1: sa[1].spi: ")), "{w:?}");
}

/// Settings that a valid config carries but that do nothing: cores beyond
/// the workers, and the outer-header settings of an inbound SA (the peer
/// builds that header).
#[test]
fn warnings_for_unused_cores_and_inbound_outer_header_settings() {
    let text = BASE.replacen("workers = 1\n", "workers = 1\ncores = [0, 1]\n", 1);
    let cfg = load_text(&text);
    let at = placed(&cfg, &text, "1]", 0);
    assert_eq!(config::warnings(&cfg), [format!("{at}gateway.cores[1]: core 1 is not used: gateway.workers = 1 takes the first 1 of gateway.cores")]);
    let text = BASE.replacen("tunnel_dst = \"203.0.113.1\"\n", "tunnel_dst = \"203.0.113.1\"\nouter_ttl = 9\ndf = \"set\"\n", 1);
    let cfg = load_text(&text);
    let w = config::warnings(&cfg);
    assert_eq!(
        w,
        [
            format!("{}sa[1].outer_ttl: outer_ttl = 9 has no effect on inbound SPI 1002: the peer builds its outer header", placed(&cfg, &text, "outer_ttl = 9", 12)),
            format!("{}sa[1].df: df has no effect on inbound SPI 1002: the peer builds its outer header", placed(&cfg, &text, "df = \"set\"", 5)),
        ]
    );
    // On the outbound SA they are what they say: no warning.
    let text = BASE.replacen("tunnel_dst = \"203.0.113.2\"\n", "tunnel_dst = \"203.0.113.2\"\nouter_ttl = 9\ndf = \"set\"\n", 1);
    assert!(config::warnings(&config::parse(&text, Path::new(FILE)).unwrap()).is_empty());
}

/// Two SAs under one key material with an algorithm whose nonce is the
/// sequence number (AES-GCM, AES-GMAC, AES-CTR, ChaCha20-Poly1305) repeat
/// nonces: each counts from 1 (RFC 4106 §3.1). Refused on the second
/// SA's `key`, naming the first, whether the two are an outbound and an
/// inbound SA (the peer encrypts under the inbound one), two outbound SAs,
/// or two algorithms with one AES-128 key and 4-byte salt/nonce (AES-GCM's
/// and AES-CTR's counter blocks coincide). AES-CBC SAs may share keys
/// (their IVs are unpredictable, RFC 3602 §3: the DPDK samples do), and
/// a different salt is a different nonce.
#[test]
fn key_material_shared_by_counter_mode_sas_is_refused() {
    const K1001: &str = "00112233445566778899aabbccddeeff01020304";
    let sa = |spi: u32, dir: &str, alg: &str, key: &str, extra: &str| {
        format!("\n[[sa]]\nspi = {spi}\ndirection = \"{dir}\"\nalgorithm = \"{alg}\"\nkey = \"{key}\"\n{extra}tunnel_src = \"203.0.113.2\"\ntunnel_dst = \"203.0.113.1\"\n")
    };
    let first = pos(BASE, K1001).0;
    for (what, extra) in [
        ("an inbound SA", sa(1003, "inbound", "aes-128-gcm", K1001, "")),
        ("a second outbound SA", sa(1005, "outbound", "aes-128-gcm", K1001, "")),
        ("AES-GMAC", sa(1005, "outbound", "aes-128-gmac", K1001, "")),
        (
            "AES-CTR",
            sa(1005, "outbound", "aes-128-ctr-hmac-sha256", K1001, "auth_key = \"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\"\n"),
        ),
    ] {
        let text = format!("{BASE}{extra}");
        let at = format!("key = \"{K1001}\"\ntunnel_src = \"203.0.113.2\"");
        let at = if extra.contains("auth_key") { format!("key = \"{K1001}\"\nauth_key") } else { at };
        let (line, col) = pos_last(&text, &at);
        let err = error(&text);
        let shown = err.to_string();
        assert_eq!(err.problems().len(), 1, "{what}: {shown}");
        assert!(shown.starts_with(&format!("{FILE}:{line}:{}: sa[2].key: the same key material as outbound SA 1001 (line {first}): ", col + 6)), "{what}: {shown}");
        assert!(shown.contains("repeat nonces"), "{what}: {shown}");
    }
    // Two inbound SAs (two peers, or one peer's two SAs) under one key.
    let k2 = "0f0e0d0c0b0a09080706050403020100a1a2a3a4";
    let text = format!("{BASE}{}{}", sa(1003, "inbound", "aes-128-gcm", k2, ""), sa(1004, "inbound", "aes-128-gcm", k2, ""));
    assert!(error(&text).to_string().contains("sa[3].key: the same key material as inbound SA 1003"), "{}", error(&text));
    // AES-256-GCM and ChaCha20-Poly1305 key material are both 36 bytes: no
    // nonce in common, refused as one key under two ciphers.
    let k36 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff01020304";
    let text = format!("{BASE}{}{}", sa(1003, "inbound", "aes-256-gcm", k36, ""), sa(1005, "outbound", "chacha20-poly1305", k36, ""));
    let shown = error(&text).to_string();
    assert!(
        shown.contains("sa[3].key: the same key material as inbound SA 1003 (line ") && shown.contains("which uses it with aes-256-gcm: one key must serve one SA and one algorithm") && !shown.contains("repeat nonces"),
        "{shown}"
    );
    // Accepted: the same AES key with another salt, and AES-CBC SAs sharing keys.
    let other_salt = format!("{}ffffffff", &K1001[..32]);
    let cbc = |spi: u32, dir: &str| sa(spi, dir, "aes-128-cbc-hmac-sha256", "000102030405060708090a0b0c0d0e0f", "auth_key = \"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\"\n");
    let text = format!("{BASE}{}{}{}", sa(1003, "inbound", "aes-128-gcm", &other_salt, ""), cbc(1005, "outbound"), cbc(1006, "inbound"));
    assert_eq!(config::parse(&text, Path::new(FILE)).unwrap().sas.len(), 5);
}

/// `gateway.idle_sleep_us` and `gateway.idle_spin_us`: defaults 50 and 100,
/// explicit values kept, out-of-range values named by file, line, column
/// and field; the 2-worker sample configs shorten the spin (two gateways
/// of 2 workers each share the testbed's 2 cores).
#[test]
fn gateway_idle_sleep_and_spin() {
    let cfg = config::parse(BASE, Path::new(FILE)).unwrap();
    assert_eq!((cfg.gateway.idle_sleep_us, cfg.gateway.idle_spin_us), (50, 100), "defaults");
    let with = |lines: &str| edit("[gateway]\nworkers = 1\n", &format!("[gateway]\nworkers = 1\n{lines}\n"));
    let cfg = config::parse(&with("idle_sleep_us = 0\nidle_spin_us = 1000000"), Path::new(FILE)).unwrap();
    assert_eq!((cfg.gateway.idle_sleep_us, cfg.gateway.idle_spin_us), (0, 1_000_000));
    assert_one(&with("idle_spin_us = 1000001"), "idle_spin_us", 15, "gateway.idle_spin_us", "expected an integer in 0..=1000000, found 1000001");
    assert_one(&with("idle_spin_us = -1"), "idle_spin_us", 15, "gateway.idle_spin_us", "expected an integer in 0..=1000000, found -1");
    assert_one(&with("idle_sleep_us = 10001"), "idle_sleep_us", 16, "gateway.idle_sleep_us", "expected an integer in 0..=10000, found 10001");
    for name in ["ep0-2w.toml", "ep1-2w.toml"] {
        let cfg = config::load(&sample(name)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((cfg.gateway.workers, cfg.gateway.idle_sleep_us, cfg.gateway.idle_spin_us), (2, 50, 10), "{name}");
    }
}

/// Keys a file sets that change nothing are warned about, on the key:
/// `handoff_depth` with one worker (no handoff rings), `idle_spin_us` with
/// `idle_sleep_us = 0` (a worker that never sleeps). Left to their
/// defaults, or where they act (2 workers, a nonzero sleep), no warning.
#[test]
fn keys_without_effect_are_warned() {
    let with = |lines: &str| edit("[gateway]\nworkers = 1\n", &format!("[gateway]\n{lines}\n"));
    let text = with("workers = 1\nhandoff_depth = 4096\nidle_sleep_us = 0\nidle_spin_us = 5");
    let cfg = load_text(&text);
    let w = config::warnings(&cfg);
    assert_eq!(w.len(), 2, "{w:?}");
    let at = placed(&cfg, &text, "handoff_depth = 4096", 16);
    assert_eq!(w[0], format!("{at}gateway.handoff_depth: handoff_depth = 4096 has no effect: with gateway.workers = 1 there are no handoff rings"));
    let at = placed(&cfg, &text, "idle_spin_us = 5", 15);
    assert_eq!(w[1], format!("{at}gateway.idle_spin_us: idle_spin_us = 5 has no effect: with gateway.idle_sleep_us = 0 a worker busy-polls and never sleeps"));
    for quiet in [
        "workers = 1\nidle_sleep_us = 0",
        "workers = 1\nidle_spin_us = 5",
        "workers = 2\nhandoff_depth = 1024\ncores = [0, 1]",
    ] {
        let w = config::warnings(&load_text(&with(quiet)));
        assert!(w.is_empty(), "{quiet:?}: {w:?}");
    }
}

/// `gateway.pool_size`, `gateway.handoff_depth` and `[[port]] ring_size`:
/// defaults 4096, 2048 and 2048; values kept; out of range, not a power of
/// two, or a pool too small for a full handoff ring or for the packets
/// waiting for a MAC: one problem, named by file, line, column and field
/// (on the key the file set).
#[test]
fn buffer_and_ring_depths() {
    let cfg = config::parse(BASE, Path::new(FILE)).unwrap();
    assert_eq!((cfg.gateway.pool_size, cfg.gateway.handoff_depth), (4096, 2048), "defaults");
    assert!(cfg.ports.iter().all(|p| p.ring_size == 2048), "default ring_size");
    let gw = |lines: &str| edit("[gateway]\nworkers = 1\n", &format!("[gateway]\nworkers = 1\n{lines}\n"));
    let gw2 = |lines: &str| edit("[gateway]\nworkers = 1\n", &format!("[gateway]\nworkers = 2\n{lines}\n"));
    let cfg = config::parse(&gw2("pool_size = 16384\nhandoff_depth = 8192"), Path::new(FILE)).unwrap();
    assert_eq!((cfg.gateway.pool_size, cfg.gateway.handoff_depth), (16384, 8192));
    assert_one(&gw("pool_size = 1023"), "pool_size", 12, "gateway.pool_size", "expected an integer in 1024..=262144, found 1023");
    assert_one(&gw("pool_size = 262145"), "pool_size", 12, "gateway.pool_size", "expected an integer in 1024..=262144, found 262145");
    assert_one(&gw("handoff_depth = 3000"), "handoff_depth", 16, "gateway.handoff_depth", "expected a power of two in 64..=65536, found 3000");
    assert_one(&gw("handoff_depth = 32"), "handoff_depth", 16, "gateway.handoff_depth", "expected a power of two in 64..=65536, found 32");
    // All workers' buffers together are bounded (each worker's queues are sized for them).
    let text = edit("[gateway]\nworkers = 1\n", "[gateway]\nworkers = 8\npool_size = 131073\n");
    assert_one(&text, "pool_size", 12, "gateway.pool_size", "expected at most 131072 with 8 workers (workers × pool_size = 1048584 buffers (2.1 GiB) exceeds 1048576), found 131073");
    let text = edit("[gateway]\nworkers = 1\n", "[gateway]\nworkers = 8\npool_size = 131072\n");
    assert_eq!(config::parse(&text, Path::new(FILE)).unwrap().gateway.pool_size, 131072, "8 × 131072 = the bound");
    let text = edit("[gateway]\nworkers = 1\n", "[gateway]\nworkers = 8\npool_size = 262144\n");
    assert_one(&text, "pool_size", 12, "gateway.pool_size", "expected at most 131072 with 8 workers (workers × pool_size = 2097152 buffers (4.2 GiB) exceeds 1048576), found 262144");
    let text = edit("[gateway]\nworkers = 1\n", "[gateway]\nworkers = 257\n");
    assert_one(&text, "workers", 10, "gateway.workers", "expected at most 256 with pool_size's default 4096");
    let text = edit("[gateway]\nworkers = 1\n", "[gateway]\nworkers = 256\n");
    assert_eq!(config::parse(&text, Path::new(FILE)).unwrap().gateway.workers, 256);
    // Handoff rings exist with 2 workers or more: only then must the pool outlast one.
    let cfg = config::parse(&gw("pool_size = 1024\nhandoff_depth = 4096"), Path::new(FILE)).unwrap();
    assert_eq!((cfg.gateway.pool_size, cfg.gateway.handoff_depth), (1024, 4096), "one worker");
    assert_one(&gw2("handoff_depth = 4096"), "handoff_depth", 16, "gateway.handoff_depth", "expected at most pool_size / 2 = 2048, pool_size's default 4096 halved");
    assert_one(&gw2("pool_size = 2048\nhandoff_depth = 2048"), "pool_size", 12, "gateway.pool_size", "expected at least 2 × handoff_depth = 4096 (a worker's");
    assert_one(&gw2("pool_size = 2048"), "pool_size", 12, "gateway.pool_size", "expected at least 2 × handoff_depth = 4096, its default (");
    let text = format!("{}\n[neighbour_table]\npending_packets = 512\n", gw("pool_size = 1024"));
    assert_one(&text, "pool_size", 12, "gateway.pool_size", "expected at least 4 × neighbour_table.pending_packets = 2048");
    let text = format!("{}\n[neighbour_table]\npending_packets = 1024\n", gw("handoff_depth = 64"));
    assert_eq!(config::parse(&text, Path::new(FILE)).unwrap().neighbour_table.pending_packets, 1024, "the largest fits the default pool");

    let port = |line: &str| edit("interface = \"out0\"\n", &format!("interface = \"out0\"\n{line}\n"));
    let cfg = config::parse(&port("ring_size = 8192"), Path::new(FILE)).unwrap();
    assert_eq!(cfg.ports.iter().map(|p| p.ring_size).collect::<Vec<_>>(), [2048, 8192]);
    assert_one(&port("ring_size = 1000"), "ring_size", 12, "port[1].ring_size", "expected a power of two in 64..=16384, found 1000");
    assert_one(&port("ring_size = 32768"), "ring_size", 12, "port[1].ring_size", "expected a power of two in 64..=16384, found 32768");
    assert_one(&port("ring_size = 64"), "ring_size", 12, "port[1].ring_size", "expected at least 4 × gateway.burst = 128 (");
    let text = edit("[gateway]\nworkers = 1\n", "[gateway]\nworkers = 1\nburst = 16\n").replace("interface = \"out0\"\n", "interface = \"out0\"\nring_size = 64\n");
    assert_eq!(config::parse(&text, Path::new(FILE)).unwrap().ports[1].ring_size, 64, "4 bursts of 16");
    // The descriptor device completes up to crypto.ring_depth ops for one
    // poll: a smaller tx ring is warned about (a valid config).
    let text = format!("{}\n[crypto]\nbackend = \"descriptor\"\nring_depth = 4096\n", port("ring_size = 1024"));
    let cfg = load_text(&text);
    let at = placed(&cfg, &text, "ring_size = 1024", 12);
    let w = config::warnings(&cfg);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[1].starts_with(&format!("{at}port[1].ring_size: 1024 entries, below crypto.ring_depth = 4096: a poll may send up to 4096 completed ops on port outside")), "{w:?}");
    assert!(w[0].contains("port[0].ring_size: 2048 entries, below crypto.ring_depth = 4096"), "{w:?}");
    let text = format!("{}\n[crypto]\nbackend = \"descriptor\"\n", port("ring_size = 1024"));
    assert!(config::warnings(&load_text(&text)).is_empty(), "ring_depth 1024 fits");
    // The 2-worker testbed configs hold 400 ms of 20,000 packets/s.
    for name in ["ep0-2w.toml", "ep1-2w.toml"] {
        let cfg = config::load(&sample(name)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((cfg.gateway.pool_size, cfg.gateway.handoff_depth), (16384, 8192), "{name}");
        assert!(cfg.ports.iter().all(|p| p.ring_size == 8192), "{name}");
        // `secgw check` shows them with the memory they take.
        let shown = config::summary(&cfg);
        assert!(shown.contains("16384 buffers a worker (34.0 MiB), 2 handoff rings of 8192 (640 KiB in all)"), "{shown}");
        assert_eq!(shown.matches("rings 8192 (UMEM 64.0 MiB a worker)").count(), 2, "{shown}");
        // 2 × 34 MiB + 640 KiB + 2 workers × 2 ports × 64 MiB.
        assert!(shown.contains("memory: 324.6 MiB in all: buffers 68.0 MiB, handoff rings 640 KiB, AF_XDP UMEMs 256.0 MiB (pinned)"), "{shown}");
    }
}

#[test]
fn non_utf8_and_oversized_integers_are_placed() {
    let dir = std::env::temp_dir().join(format!("secgw-config-test-{}-utf8", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    let mut bytes = b"[gateway]\nname = \"gw\xc3\xa9\"\n# caf".to_vec();
    bytes.extend_from_slice(&[0xff, b'\n']);
    std::fs::write(&f, &bytes).unwrap();
    let e = config::load(&f).unwrap_err().to_string();
    assert!(e.ends_with("bad.toml:3:6: byte 0xff is not UTF-8: a config file is UTF-8 text"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    let text = BASE.replacen("[gateway]\n", "[gateway]\nstats_interval = 99999999999999999999\n", 1);
    assert_ne!(text, BASE);
    let e = config::parse(&text, Path::new(FILE)).unwrap_err().to_string();
    assert!(e.contains("gateway.stats_interval: integer too large for TOML (at most 9223372036854775807)"), "{e}");
}

#[test]
fn warnings_for_endpoints_addresses_socket_and_shadowed_policies() {
    let warns = |text: &str| config::warnings(&config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    let one = |text: &str, want: &str| {
        let w = warns(text);
        assert!(w.len() == 1 && w[0].contains(want), "want one warning with {want:?}: {w:?}");
    };
    assert!(warns(BASE).is_empty(), "{:?}", warns(BASE));
    // Outbound tunnel_dst: our own address; routed out of the protected port.
    one(
        &BASE.replacen("tunnel_dst = \"203.0.113.2\"", "tunnel_dst = \"203.0.113.9\"", 1).replacen("[\"203.0.113.1/24\"]", "[\"203.0.113.1/24\", \"203.0.113.9/24\"]", 1),
        "sa[0].tunnel_dst: 203.0.113.9 is this gateway's own address (port outside): SPI 1001's ESP would be sent to itself",
    );
    one(
        &edit("prefix = \"203.0.113.0/24\"\nport = \"outside\"", "prefix = \"203.0.113.0/24\"\nport = \"inside\""),
        "sa[0].tunnel_dst: 203.0.113.2 is routed out of protected port inside",
    );
    // Port addresses no host can use.
    for (addr, what) in [
        ("127.0.0.1/8", "a loopback address"),
        ("203.0.113.0/24", "its subnet's network address"),
        ("203.0.113.255/24", "its subnet's broadcast address"),
        ("169.254.1.1/16", "a link-local address"),
        ("::1/128", "the loopback address"),
    ] {
        let text = edit("addresses = [\"203.0.113.1/24\"]", &format!("addresses = [\"203.0.113.1/24\", \"{addr}\"]"));
        one(&text, &format!("port[1].addresses[1]: {addr} is {what}"));
    }
    // A /31 has no network or broadcast address (RFC 3021).
    assert!(warns(&edit("addresses = [\"203.0.113.1/24\"]", "addresses = [\"203.0.113.1/24\", \"198.18.0.0/31\"]")).is_empty());
    one(&edit("ip = \"203.0.113.2\"", "ip = \"::ffff:203.0.113.2\""), "neighbour[0].ip: ::ffff:203.0.113.2 is an IPv4-mapped IPv6 address: an IPv4 next hop is looked up as 203.0.113.2");
    one(&format!("{BASE}\n[control]\nsocket = \"run/gw.sock\"\n"), "control.socket: run/gw.sock is relative");
    // An outbound policy behind one covering it: never matches; the same
    // selectors at a lower priority number come first.
    let bypass = "\n[[policy]]\ndirection = \"outbound\"\nsrc = \"192.0.2.0/25\"\ndst = \"198.51.100.7/32\"\nprotocol = 17\naction = \"bypass\"\n";
    one(&format!("{BASE}{bypass}"), "policy[2]: never matches: policy[0] (priority");
    assert!(warns(&format!("{BASE}{}", bypass.replace("action", "priority = 0\naction"))).is_empty());
    // Not covered (a wider source) and inbound PROTECT entries (their SA's
    // selectors): no warning.
    assert!(warns(&format!("{BASE}{}", bypass.replace("192.0.2.0/25", "192.0.0.0/16"))).is_empty());
    // An inbound BYPASS ahead of an inbound PROTECT covering it: cleartext
    // the SA should carry is let in.
    let in_bypass = "\n[[policy]]\ndirection = \"inbound\"\nsrc = \"198.51.100.0/23\"\ndst = \"192.0.0.0/16\"\npriority = 0\naction = \"bypass\"\n";
    one(&format!("{BASE}{in_bypass}"), "policy[1]: policy[2] (priority 0, bypass) comes first and covers all its selectors: what this entry's SA should carry is also let in in the clear (cleartext_protected never counts it), and what the SA decrypts is dropped (inner_policy_mismatch)");
    // An inbound DISCARD ahead of it: what the SA decrypts is dropped.
    one(&format!("{BASE}{}", in_bypass.replace("\"bypass\"", "\"discard\"")), "policy[1]: policy[2] (priority 0, discard) comes first and covers all its selectors: what this entry's SA decrypts is dropped (policy_discard)");
    // An outbound SA with few sequence numbers left (RFC 4303 §3.3.3).
    let text = edit("spi = 1001\n", "spi = 1001\nfirst_seq = 4294967290\n");
    one(&text, "sa[0].first_seq: first_seq 4294967290 leaves SPI 1001 only 6 sequence number(s) (up to 4294967295): it hard-expires after 6 packet(s) (RFC 4303 §3.3.3)");
    let text = edit("spi = 1001\n", "spi = 1001\nesn = true\nfirst_seq = \"0xffffffffffffffff\"\n");
    one(&text, "sa[0].first_seq: first_seq 18446744073709551615 leaves SPI 1001 only 1 sequence number(s)");
    assert!(warns(&edit("spi = 1001\n", "spi = 1001\nfirst_seq = 4294901760\n")).is_empty(), "65,536 left: no warning");
}

/// AES-CCM (RFC 4309 §7.1): key material is the AES key ‖ a 3-byte salt,
/// so a GCM-sized key (‖ 4 bytes) is refused with the expected form named;
/// ICVs of 8, 12 and 16 bytes (§3.1), another length cites the RFC.
#[test]
fn ccm_key_and_icv_len() {
    let text = with_sa0(&format!("algorithm = \"aes-128-ccm\"\nkey = \"{}\"\nicv_len = 12", hexkey(19)));
    let cfg = config::parse(&text, Path::new(FILE)).unwrap();
    assert_eq!((cfg.sas[0].algorithm, cfg.sas[0].icv_len, cfg.sas[0].key.len()), (Algorithm::Aes128Ccm, 12, 19));
    let text = with_sa0(&format!("algorithm = \"aes-256-ccm\"\nkey = \"{}\"", hexkey(36)));
    assert_one(&text, "key = ", 6, "sa[0].key", "expected 70 hex digits (AES-256-CCM key ‖ 3-byte salt), found 72");
    let text = with_sa0(&format!("algorithm = \"aes-192-ccm\"\nkey = \"{}\"\nicv_len = 10", hexkey(27)));
    assert_one(&text, "icv_len = ", 10, "sa[0].icv_len", "expected 8 or 12 or 16 for aes-192-ccm (RFC 4309 §3.1), found 10");
}

/// RFC 4301 §7.1: non-first fragments carry no ports (OPAQUE). A PROTECT
/// entry with port selectors is warned about when the rest of a fragmented
/// datagram would go elsewhere: outbound to another SA, in the clear, to a
/// DISCARD entry or to no entry; inbound when its SA has no any-port entry
/// for them. (helper-89: the dual-stack configs lost large IPv6 datagrams
/// this way.)
#[test]
fn warnings_for_port_selectors_that_split_fragmented_datagrams() {
    let warns = |text: &str| config::warnings(&config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    let sa3 = "\n[[sa]]\nspi = 1003\ndirection = \"outbound\"\nalgorithm = \"aes-128-gcm\"\nkey = \"0f112233445566778899aabbccddeeff01020304\"\ntunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"\n";
    let port_policy = |dir: &str, spi: u32| {
        let (s, d) = if dir == "outbound" { ("192.0.2.0/24", "198.51.100.0/25") } else { ("198.51.100.0/25", "192.0.2.0/24") };
        format!("\n[[policy]]\ndirection = \"{dir}\"\nsrc = \"{s}\"\ndst = \"{d}\"\nprotocol = \"udp\"\ndst_ports = \"4000-4999\"\npriority = 5\naction = \"protect {spi}\"\n")
    };
    // Outbound: the any-port entry after it protects with another SA.
    let w = warns(&format!("{BASE}{sa3}{}", port_policy("outbound", 1003)));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("test.toml: policy[2]: non-first fragments of the datagrams it selects carry no ports (OPAQUE, RFC 4301 §7.1): they take policy[0] (priority 100, protect 1001) instead of SPI 1003"), "{w:?}");
    assert!(w[0].ends_with(" (reassembly.forwarded = true keeps them with it)"), "{w:?}");
    // With `reassembly.forwarded` an IPv4 datagram is reassembled before
    // the outbound lookup: no warning, unless reassembly is off.
    assert!(warns(&format!("{BASE}{sa3}{}\n[reassembly]\nforwarded = true\n", port_policy("outbound", 1003))).is_empty());
    let w = warns(&format!("{BASE}{sa3}{}\n[reassembly]\nforwarded = true\ncontexts = 0\n", port_policy("outbound", 1003)));
    assert!(w.len() == 1 && w[0].ends_with(" (reassembly.forwarded would keep them with it, but reassembly.contexts is 0)"), "{w:?}");
    let w = warns(&format!("{BASE}{sa3}{}\n[reassembly]\ncontexts = 0\n", port_policy("outbound", 1003)));
    assert!(w.len() == 1 && w[0].ends_with(" (reassembly.forwarded = true with reassembly.contexts > 0 keeps them with it)"), "{w:?}");
    // An SA whose outer header may not be fragmented cuts a datagram too
    // big for it again before encryption: still warned, saying why.
    let w = warns(&format!("{BASE}{sa3}df = \"set\"\n{}\n[reassembly]\nforwarded = true\n", port_policy("outbound", 1003)));
    assert!(
        w.len() == 1 && w[0].ends_with(" (reassembly.forwarded reassembles them, but SPI 1003's df = \"set\" cuts a datagram too big for the tunnel again before encryption)"),
        "{w:?}"
    );
    // Off, the hint for such an SA says what the option would not mend
    // (helper-92: it promised to keep them all).
    let w = warns(&format!("{BASE}{sa3}df = \"set\"\n{}", port_policy("outbound", 1003)));
    assert!(
        w.len() == 1 && w[0].ends_with(" (reassembly.forwarded would keep them with it only for datagrams that fit the tunnel: SPI 1003's df = \"set\" cuts a bigger one again before encryption)"),
        "{w:?}"
    );
    // `secgw check`'s summary says whether the option does anything.
    let summary = |text: &str| config::summary(&config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    let on = format!("{BASE}{sa3}{}\n[reassembly]\nforwarded = true\n", port_policy("outbound", 1003));
    assert!(summary(&on).contains("; also forwarded IPv4 TCP/UDP fragments between addresses a port-selecting outbound policy may match"), "{}", summary(&on));
    let idle = format!("{BASE}\n[reassembly]\nforwarded = true\n");
    assert!(summary(&idle).contains("; reassembly.forwarded idle: no IPv4 outbound policy selects ports"), "{}", summary(&idle));
    let off = format!("{BASE}\n[reassembly]\nforwarded = true\ncontexts = 0\n");
    assert!(summary(&off).contains("reassembly off: outer fragments to the gateway are dropped (reassembly.forwarded has no effect)"), "{}", summary(&off));
    // The same SA: the whole datagram takes it, no warning.
    assert!(warns(&format!("{BASE}{}", port_policy("outbound", 1001))).is_empty());
    // A DISCARD entry for the rest; no entry at all.
    let discard = BASE.replacen("action = \"protect 1001\"", "action = \"discard\"", 1);
    let w = warns(&format!("{discard}{}", port_policy("outbound", 1001)));
    assert!(w.iter().any(|w| w.contains("policy[2]: non-first") && w.ends_with("discard) and are dropped (policy_discard) (reassembly.forwarded = true keeps them with it)")), "{w:?}");
    let narrow = BASE.replacen("dst = \"198.51.100.0/24\"\naction = \"protect 1001\"", "dst = \"198.51.100.128/25\"\naction = \"protect 1001\"", 1);
    assert_ne!(narrow, BASE);
    let w = warns(&format!("{narrow}{}", port_policy("outbound", 1001)));
    assert!(w.iter().any(|w| w.ends_with("they match no entry and are dropped (no_policy) (reassembly.forwarded = true keeps them with it)")), "{w:?}");
    // Inbound: SA 1002's any-port entry covers them; without it, not.
    assert!(warns(&format!("{BASE}{}", port_policy("inbound", 1002))).is_empty());
    let narrow_in = BASE.replacen("src = \"198.51.100.0/24\"\ndst = \"192.0.2.0/24\"", "src = \"198.51.100.128/25\"\ndst = \"192.0.2.0/24\"", 1);
    assert_ne!(narrow_in, BASE);
    let w = warns(&format!("{narrow_in}{}", port_policy("inbound", 1002)));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].ends_with("and no inbound entry of SPI 1002 with any ports selects them: decrypted, they are dropped (inner_policy_mismatch)"), "{w:?}");
}

/// A port or gateway name with a control character is refused at its
/// place: names go into log lines, the counters table and the default
/// socket path (helper-89's `"in\"si\\de\nx"` broke the stats table).
#[test]
fn names_with_control_characters_are_refused() {
    let text = BASE.replacen("name = \"inside\"", "name = \"in\\nside\"", 1);
    assert_ne!(text, BASE);
    assert_one(&text, "\"in\\nside\"", 0, "port[0].name", "\"in\\nside\" holds the control or formatting character '\\n': a name must be printable");
    let text = BASE.replacen("[gateway]\n", "[gateway]\nname = \"gw\\u001b[31m\"\n", 1);
    assert_one(&text, "\"gw\\u001b", 0, "gateway.name", "holds the control or formatting character '\\u{1b}'");
    // Line separator and right-to-left override (helper-90), and an
    // interface name with a BEL.
    let text = BASE.replacen("[gateway]\n", "[gateway]\nname = \"gw\\u2028x\"\n", 1);
    assert_one(&text, "\"gw\\u2028", 0, "gateway.name", "'\\u{2028}'");
    let text = BASE.replacen("name = \"inside\"", "name = \"in\\u202eside\"", 1);
    assert_one(&text, "\"in\\u202e", 0, "port[0].name", "'\\u{202e}'");
    let text = BASE.replacen("interface = \"in0\"", "interface = \"in\\u00070\"", 1);
    assert_one(&text, "\"in\\u0007", 0, "port[0].interface", "without '/', ':', spaces or control characters");
    assert!(config::dpdk::ImportOptions::parse_port("0=gw\u{7}a").unwrap_err().contains("control characters"));
    // Printable names, quotes and backslashes included, stay valid.
    let text = BASE.replacen("name = \"inside\"", "name = \"in \\\"si\\\\de\"", 1);
    config::parse(&text, Path::new(FILE)).unwrap();
}

/// helper-90's cases: the covering entry named is the one that comes first
/// in order, not in the file; an any-port entry that holds only part of a
/// port entry's addresses lets the rest of its fragments meet later ones;
/// an any-port entry before it takes whole datagrams, never its fragments;
/// inbound, a DISCARD after it is met in the ordered lookup.
#[test]
fn fragment_and_shadow_warnings_follow_the_spd_order() {
    let warns = |text: &str| config::warnings(&config::parse(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}")));
    let pol = |dir: &str, src: &str, dst: &str, extra: &str, pri: u32, action: &str| {
        format!("\n[[policy]]\ndirection = \"{dir}\"\nsrc = \"{src}\"\ndst = \"{dst}\"\n{extra}priority = {pri}\naction = \"{action}\"\n")
    };
    let (v4a, v4b) = ("192.0.2.0/24", "198.51.100.0/24");
    let udp53 = "protocol = \"udp\"\ndst_ports = \"53\"\n";
    // Outbound: the /32 any-port entry of the same SA holds only part; the
    // DISCARD behind it takes the rest.
    let base = BASE.replacen("action = \"protect 1001\"", "priority = 50\naction = \"protect 1001\"", 1);
    let text = format!("{base}{}{}{}", pol("outbound", v4a, v4b, udp53, 5, "protect 1001"), pol("outbound", "192.0.2.5/32", v4b, "", 6, "protect 1001"), pol("outbound", v4a, v4b, "", 10, "discard"));
    let w = warns(&text);
    assert!(w.iter().any(|w| w.starts_with("test.toml: policy[2]: non-first") && w.contains("some of them take policy[4] (priority 10, discard)")), "{w:?}");
    // An any-port BYPASS before it takes whole datagrams: no warning.
    let text = format!("{base}{}{}{}", pol("outbound", "192.0.2.128/25", v4b, "", 1, "bypass"), pol("outbound", v4a, v4b, udp53, 5, "protect 1001"), pol("outbound", v4a, v4b, "", 20, "protect 1001"));
    let w = warns(&text);
    assert!(!w.iter().any(|w| w.contains("non-first")), "{w:?}");
    // Inbound: DISCARD (udp, any port) after it, before the any-port
    // PROTECT of its SA: the ordered lookup drops the fragments.
    let base_in = BASE.replacen("action = \"protect 1002\"", "priority = 20\naction = \"protect 1002\"", 1);
    let text = format!("{base_in}{}{}", pol("inbound", v4b, v4a, udp53, 10, "protect 1002"), pol("inbound", v4b, v4a, "protocol = \"udp\"\n", 15, "discard"));
    let w = warns(&text);
    assert!(w.iter().any(|w| w.starts_with("test.toml: policy[2]: non-first") && w.ends_with("they take policy[3] (priority 15, discard) and are dropped (policy_discard)")), "{w:?}");
    // A DISCARD after every IPv4 PROTECT still counts when an IPv6 one
    // comes before an IPv6 PROTECT: the worker's lookup of decrypted
    // packets is one switch for both families (`Spd::protect_shadowed`).
    let v6 = |action: &str, pri: u32| pol("inbound", "2001:db8:b::/64", "2001:db8:a::/64", "", pri, action);
    let narrow_in = BASE.replacen("src = \"198.51.100.0/24\"\ndst = \"192.0.2.0/24\"\naction = \"protect 1002\"", "src = \"198.51.100.128/25\"\ndst = \"192.0.2.0/24\"\npriority = 5\naction = \"protect 1002\"", 1);
    assert_ne!(narrow_in, BASE);
    let text = format!("{narrow_in}{}{}", pol("inbound", v4b, v4a, udp53, 10, "protect 1002"), pol("inbound", v4b, v4a, "protocol = \"udp\"\n", 30, "discard"));
    assert!(!warns(&text).iter().any(|w| w.contains("non-first")), "no lookup: {:?}", warns(&text));
    let text = format!("{text}{}{}", v6("discard", 1), v6("protect 1002", 2));
    let w = warns(&text);
    assert!(w.iter().any(|w| w.starts_with("test.toml: policy[2]: non-first") && w.contains("take policy[3] (priority 30, discard)")), "{w:?}");
    // The covering entry named is the first in order: a BYPASS at priority
    // 5 later in the file beats a DISCARD at 8 earlier in it.
    let text = format!("{base_in}{}{}{}", pol("inbound", v4b, v4a, "", 8, "discard"), pol("inbound", v4b, v4a, "", 5, "bypass"), pol("inbound", v4b, v4a, "", 10, "protect 1002"));
    let w = warns(&text);
    assert!(w.iter().any(|w| w.starts_with("test.toml: policy[4]: policy[3] (priority 5, bypass) comes first")), "{w:?}");
}

/// A config file over the 64-MiB limit is refused by size, naming the
/// limit, before it is read (a sparse file: nothing is written).
#[test]
fn a_config_over_64_mib_is_refused_by_size() {
    let dir = std::env::temp_dir().join(format!("secgw-cfg-size-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("big.toml");
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(config::MAX_CONFIG_BYTES + 1).unwrap();
    let e = config::load(&p).unwrap_err().to_string();
    assert_eq!(config::MAX_CONFIG_BYTES, 64 << 20);
    assert!(e.contains(&format!("{} bytes, more than the {}-byte limit", (64u64 << 20) + 1, 64u64 << 20)), "{e}");
    f.set_len(config::MAX_CONFIG_BYTES).unwrap();
    let e = config::load(&p).unwrap_err().to_string();
    assert!(!e.contains("byte limit"), "at the limit it is read: {e}");
    let _ = std::fs::remove_dir_all(&dir);
}
