//! Unit tests of the SA manager with the software device and the
//! descriptor device at small session limits (2 and 1). Time is passed in;
//! the workers' `quiesced` counters are set by hand.

use super::*;
use crate::crypto::descriptor::{DescriptorConfig, DescriptorDevice};
use crate::crypto::soft::SoftDevice;
use std::path::PathBuf;

const OUT_KEY: &str = "24d84805d9cc35adcdc5696f6ed3dab836df80aa";
const IN_KEY: &str = "3f5658ee8547685d56203c691b223e23f77e7b80";

/// AES-128-GCM key material (key ‖ salt, 20 bytes) of its own for each
/// `n`: a new SA may not take another SA's ([`super::super::keys`]).
fn key(n: u8) -> String {
    format!("{n:02x}").repeat(20)
}
/// The inbound SAs' tunnel_dst (our outside address).
const OURS: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 1));
const MACS: [[u8; 6]; 2] = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];

fn sa(spi: u32, dir: &str, key: &str) -> String {
    let (s, d) = if dir == "outbound" { ("203.0.113.1", "203.0.113.2") } else { ("203.0.113.2", "203.0.113.1") };
    format!("[[sa]]\nspi = {spi}\ndirection = \"{dir}\"\nalgorithm = \"aes-128-gcm\"\nkey = \"{key}\"\ntunnel_src = \"{s}\"\ntunnel_dst = \"{d}\"\n")
}

fn policy(dir: &str, src: &str, dst: &str, spi: u32) -> String {
    format!("[[policy]]\ndirection = \"{dir}\"\nsrc = \"{src}\"\ndst = \"{dst}\"\npriority = 10\naction = \"protect {spi}\"\n")
}

/// A one-worker gateway with SA 1001 out and 1002 in and their policies;
/// `crypto` is the `[crypto]` table's body; `extra` more tables.
fn config_text(crypto: &str, extra: &str) -> String {
    format!(
        "[gateway]\nname = \"t\"\nworkers = 1\n[crypto]\n{crypto}\n\
         [[port]]\nname = \"inside\"\ninterface = \"in0\"\nrole = \"protected\"\naddresses = [\"192.0.2.1/24\"]\n\
         [[port]]\nname = \"outside\"\ninterface = \"out0\"\nrole = \"unprotected\"\naddresses = [\"203.0.113.1/24\"]\n\
         {}{}{}{}{extra}",
        sa(1001, "outbound", OUT_KEY),
        sa(1002, "inbound", IN_KEY),
        policy("outbound", "192.0.2.0/24", "198.51.100.0/24", 1001),
        policy("inbound", "198.51.100.0/24", "192.0.2.0/24", 1002),
    )
}

fn write_config(tag: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("secgw-mgr-test-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("gw.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// The base config (software backend) in a file of its own, for reloads:
/// its text, path and loaded form.
fn soft_config_file(tag: &str) -> (String, PathBuf, Config) {
    let base = config_text("backend = \"software\"", "");
    let path = write_config(tag, &base);
    let cfg = crate::config::load(&path).unwrap();
    (base, path, cfg)
}

fn load(tag: &str, text: &str) -> Config {
    crate::config::load(&write_config(tag, text)).unwrap()
}

fn soft() -> SoftDevice {
    SoftDevice::new(1)
}

fn desc(limit: u32) -> DescriptorDevice {
    DescriptorDevice::new(DescriptorConfig { nb_queue_pairs: 1, ring_depth: 64, max_sessions_per_qp: limit, nb_engines: 1 }).unwrap()
}

fn desc_cfg(limit: u32) -> String {
    format!("backend = \"descriptor\"\nmax_sessions_per_qp = {limit}")
}

/// A manager publishing to its own tables, with a worker whose `quiesced`
/// the test sets.
struct Fixture<'d, D: CryptoDevice> {
    m: Manager<'d, D>,
    tables: Arc<ArcSwap<Tables>>,
    worker: Arc<WorkerCounters>,
}

fn fixture<'d, D: CryptoDevice>(cfg: &Config, dev: &'d D) -> Fixture<'d, D> {
    let mut m = Manager::new(cfg, dev, &MACS).unwrap();
    let tables = Arc::new(ArcSwap::from_pointee(m.tables_now()));
    let worker = Arc::new(WorkerCounters::new(2));
    m.start_publishing(tables.clone(), vec![worker.clone()]);
    Fixture { m, tables, worker }
}

impl<D: CryptoDevice> Fixture<'_, D> {
    fn snap(&self) -> Arc<Tables> {
        self.tables.load_full()
    }
    /// The worker adopted everything published so far.
    fn quiesce(&self) {
        self.worker.quiesced.set(self.snap().version);
    }
    fn out_slot(&self, spi: u32) -> Option<usize> {
        self.snap().sad.outbound_sas().find(|(_, s)| s.spi == spi).map(|(i, _)| i)
    }
    fn in_resolves(&self, spi: u32) -> bool {
        let t = self.snap();
        t.sad.inbound_lookup(spi, OURS).and_then(|s| t.sad.inbound_at(s)).is_some_and(|e| e.sa.spi == spi)
    }
}

fn protect_slots(spd: &Spd) -> Vec<usize> {
    let k = crate::policy::spd::FlowKey { src: "192.0.2.10".parse().unwrap(), dst: "198.51.100.10".parse().unwrap(), protocol: 17, ports: Some((1, 2)) };
    spd.lookup(&k).and_then(|a| if let SpdAction::Protect(s) = a { Some(s) } else { None }).into_iter().collect()
}

fn check_add<D: CryptoDevice>(fx: &mut Fixture<'_, D>, name: &str) {
    let v0 = fx.snap().version;
    let frag = format!("{}{}", sa(2002, "inbound", &key(0x22)), policy("inbound", "10.9.0.0/16", "192.0.2.0/24", 2002));
    fx.m.add(&frag, Instant::now()).unwrap();
    fx.m.publish();
    let t = fx.snap();
    assert!(t.version > v0, "{name}: published");
    let slot = t.sad.inbound_lookup(2002, OURS).expect("SPI 2002 resolves");
    let e = t.sad.inbound_at(slot).unwrap();
    assert_eq!(e.selectors.len(), 1, "{name}");
    assert_eq!(e.selectors[0].src, crate::policy::spd::Prefix::new("10.9.0.0".parse().unwrap(), 16), "{name}");
    // Duplicate: Exists, nothing changed.
    let e = fx.m.add(&sa(2002, "inbound", &key(0x23)), Instant::now()).unwrap_err();
    fx.m.publish();
    assert_eq!(e.kind, MgrErrorKind::Exists, "{name}: {e}");
    assert_eq!(fx.snap().version, t.version, "{name}: nothing published");
    assert_eq!(fx.m.len(), 3, "{name}");
}

#[test]
fn add_publishes_the_sa_in_a_slot_with_its_selectors_and_a_duplicate_is_refused() {
    let cfg = load("add-soft", &config_text("backend = \"software\"", ""));
    let s = soft();
    check_add(&mut fixture(&cfg, &s), "soft");
    let cfg = load("add-desc", &config_text(&desc_cfg(4), ""));
    let d = desc(4);
    check_add(&mut fixture(&cfg, &d), "descriptor");
    assert_eq!(d.qp_sessions(0).unwrap(), 3, "attached before publish");
}

/// An `sa add` fragment with no table (empty, comments only) is refused,
/// not answered `added: []` (helper-90).
#[test]
fn add_of_an_empty_fragment_is_refused() {
    let cfg = load("add-empty", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    for text in ["", "# only a comment\n\n"] {
        let e = fx.m.add(text, Instant::now()).unwrap_err();
        assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("no [[sa]] or [[policy]] table: nothing to add"), "{text:?}: {e}");
    }
}

/// `sa add` answers with what `secgw check` would warn about in the
/// fragment's entries, placed in the fragment; the running config's own
/// warnings (here: none) and a clean fragment give no `warnings` key.
#[test]
fn add_warns_about_the_fragment_as_check_would() {
    let cfg = load("add-warn", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let clean = format!("{}{}", sa(2002, "inbound", &key(0x22)), policy("inbound", "10.9.0.0/16", "192.0.2.0/24", 2002));
    let v = fx.m.add(&clean, Instant::now()).unwrap();
    assert!(v.get("warnings").is_none(), "{v}");
    // SPI 200 is reserved and no policy uses it; the fragment's outbound
    // BYPASS entry is covered by the installed outbound PROTECT 1001 one
    // (same selectors and priority, earlier). Its inbound PROTECT entry
    // behind another PROTECT is not warned about (RFC 4301 §5.2: it still
    // gives SA 2002 its selectors).
    let frag = format!(
        "{}{}{}",
        sa(200, "inbound", &key(0x24)),
        policy("inbound", "10.8.0.0/16", "192.0.2.0/24", 2002),
        "[[policy]]\ndirection = \"outbound\"\nsrc = \"192.0.2.0/24\"\ndst = \"198.51.100.0/24\"\npriority = 10\naction = \"bypass\"\n"
    );
    let v = fx.m.add(&frag, Instant::now()).unwrap();
    let w: Vec<&str> = v["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    assert_eq!(
        w,
        [
            "<sa add>:2:7: sa[0].spi: SPI 200 is in 1..=255, reserved by IANA (RFC 4303 §2.1); peers may reject it",
            "<sa add>:1:1: sa[0]: no inbound policy protects with SPI 200",
            "<sa add>:14:1: policy[1]: never matches: installed policy 0 (`policy list`; priority 10) comes first and covers all its selectors",
        ],
        "{v}"
    );
    // The CLI shows them under the result.
    assert!(crate::control::client::render_compact(&v).contains("\nwarning: <sa add>:2:7: sa[0].spi: SPI 200"));
}

#[test]
fn bad_key_in_a_fragment_is_invalid_with_its_place_and_nothing_is_installed() {
    let cfg = load("badkey", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let v = fx.snap().version;
    let frag = format!("{}{}", sa(3001, "outbound", &key(0x31)), sa(3002, "inbound", "abcd"));
    let e = fx.m.add(&frag, Instant::now()).unwrap_err();
    fx.m.publish();
    assert_eq!(e.kind, MgrErrorKind::Invalid);
    assert!(e.message.contains("<sa add>:") && e.message.contains("key"), "file:line:field in {:?}", e.message);
    assert!(e.message.contains("<sa add>:1") || e.message.chars().any(|c| c.is_ascii_digit()), "{:?}", e.message);
    assert_eq!(fx.m.len(), 2);
    assert_eq!(fx.snap().version, v, "nothing published");
    assert!(fx.out_slot(3001).is_none());
}

#[test]
fn a_fragment_past_the_limit_is_busy_and_rolls_back_its_first_sa() {
    // Limit 2: the base config's two SAs fill the queue pair.
    let cfg = load("busy", &config_text(&desc_cfg(3), ""));
    let d = desc(3);
    let mut fx = fixture(&cfg, &d);
    let v = fx.snap().version;
    let frag = format!("{}{}", sa(3001, "outbound", &key(0x31)), sa(3002, "inbound", &key(0x32)));
    let e = fx.m.add(&frag, Instant::now()).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Busy, "{e}");
    assert!(e.message.contains("max_sessions_per_qp = 3"), "{}", e.message);
    // The 3 held include 3001's, installed by this request and rolled back.
    assert!(e.message.contains("queue pair 0 holds 3 session(s)") && e.message.contains("(1 of those sessions were this request's earlier SAs, rolled back with it: the request as a whole needs room for 2 on worker 0)"), "{}", e.message);
    fx.m.publish();
    assert!(fx.out_slot(3001).is_none(), "the rolled-back SA is in no snapshot (version {v} -> {})", fx.snap().version);
    assert_eq!(fx.m.len(), 2);
    // Its session goes once the worker quiesced.
    fx.quiesce();
    fx.m.tick(Instant::now());
    fx.m.publish();
    fx.quiesce();
    fx.m.tick(Instant::now());
    assert_eq!(d.qp_sessions(0).unwrap(), 2);
    assert_eq!(fx.m.retiring(), 0);
    // It never carried a packet: its key may be offered again.
    fx.m.add(&sa(3001, "outbound", &key(0x31)), Instant::now()).unwrap();
}

#[test]
fn busy_with_every_queue_pair_full_names_each_one() {
    // Two workers, limit 1: the base config's two SAs take both queue pairs.
    let cfg = load("busy-all", &config_text(&desc_cfg(1), "").replacen("workers = 1", "workers = 2", 1));
    let d = DescriptorDevice::new(DescriptorConfig { nb_queue_pairs: 2, ring_depth: 64, max_sessions_per_qp: 1, nb_engines: 1 }).unwrap();
    let mut fx = fixture(&cfg, &d);
    let e = fx.m.add(&sa(3001, "outbound", &key(0x31)), Instant::now()).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Busy, "{e}");
    assert!(e.message.contains("every queue pair holds its limit of sessions (max_sessions_per_qp = 1; held per queue pair 0: 1, 1: 1)"), "{}", e.message);
}

#[test]
fn del_removes_policies_empties_the_slot_and_frees_the_session_only_after_quiescence() {
    let cfg = load("del", &config_text(&desc_cfg(2), ""));
    let d = desc(2);
    let mut fx = fixture(&cfg, &d);
    fx.quiesce();
    let slot = fx.out_slot(1001).unwrap();
    assert_eq!(protect_slots(&fx.snap().spd_out), vec![slot]);
    let now = Instant::now();
    let r = fx.m.del(1001, None, None, now).unwrap();
    assert_eq!(r["policies_removed"], 1);
    fx.m.publish();
    let t = fx.snap();
    assert!(t.sad.outbound_at(slot).is_none(), "slot emptied in the next snapshot");
    assert!(protect_slots(&t.spd_out).is_empty(), "policy gone");
    assert!(fx.m.list_policies()["policies"].as_array().unwrap().iter().all(|p| p["action"] != "protect 1001"));
    // The worker has not quiesced past that snapshot: still attached.
    for _ in 0..3 {
        fx.m.tick(now + Duration::from_secs(1));
        fx.m.publish();
        assert_eq!(d.qp_sessions(0).unwrap(), 2, "attached while quiesced < version");
        assert_eq!(fx.m.retiring(), 1);
    }
    fx.quiesce();
    fx.m.tick(now + Duration::from_secs(2));
    assert_eq!(d.qp_sessions(0).unwrap(), 1, "detached and freed after quiescence");
    assert_eq!(fx.m.retiring(), 0);
    let ev = fx.m.take_events();
    assert!(ev.iter().any(|e| e.kind == "deleted" && e.spi == 1001));
    assert_eq!(fx.m.del(1001, None, None, now).unwrap_err().kind, MgrErrorKind::NotFound);
}

/// SAs removed together (one reload) are reported in SPI order, not in
/// hash order or the order they leave the retiring list (helper-89 saw
/// 200000, 200002, 200001).
#[test]
fn sas_removed_together_are_reported_in_spi_order() {
    let (_, path, cfg) = soft_config_file("gone-order");
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let spis: Vec<u32> = (0..24).map(|i| 200_000 + i).collect();
    let frag: String = spis.iter().map(|&spi| sa(spi, "inbound", &key((spi % 200) as u8 + 0x30))).collect();
    fx.m.add(&frag, Instant::now()).unwrap();
    fx.m.publish();
    fx.quiesce();
    fx.m.take_events();
    let now = Instant::now();
    fx.m.reload(now).unwrap();
    assert!(path.exists());
    fx.m.publish();
    for step in 1..=4 {
        fx.quiesce();
        fx.m.tick(now + Duration::from_secs(step));
        fx.m.publish();
    }
    assert_eq!(fx.m.retiring(), 0);
    let gone: Vec<u32> = fx.m.take_events().into_iter().filter(|e| e.kind == "deleted").map(|e| e.spi).collect();
    assert_eq!(gone, spis);
}

#[test]
fn rekey_outbound_moves_the_policies_at_once_and_the_old_slot_goes_after_the_grace() {
    for limit in [0u32, 4] {
        let crypto = if limit == 0 { "backend = \"software\"".to_string() } else { desc_cfg(limit) };
        let cfg = load(&format!("rko{limit}"), &config_text(&crypto, ""));
        let (s, d) = (soft(), desc(limit.max(1)));
        if limit == 0 {
            rekey_outbound(&mut fixture(&cfg, &s));
        } else {
            rekey_outbound(&mut fixture(&cfg, &d));
            assert_eq!(d.qp_sessions(0).unwrap(), 2);
        }
    }
}

fn rekey_outbound<D: CryptoDevice>(fx: &mut Fixture<'_, D>) {
    let now = Instant::now();
    let old = fx.out_slot(1001).unwrap();
    // A path MTU learned by the old SA (RFC 4301 §8.2.1) goes to the new one.
    let now_ms = crate::esp::pmtu::epoch_ms(now);
    let far = now_ms + 600_000;
    assert!(fx.snap().sad.outbound_at(old).unwrap().path_mtu.lower(1300, now_ms, far, 1500));
    fx.m.rekey(1001, None, None, 1101, hex::decode(key(0x11)).unwrap(), None, now).unwrap();
    fx.m.publish();
    let new = fx.out_slot(1101).expect("new SA published");
    assert_ne!(new, old);
    assert_eq!(fx.snap().sad.outbound_at(new).unwrap().path_mtu.get(|| far - 1), Some(1300), "path MTU inherited");
    assert_eq!(fx.snap().sad.outbound_at(new).unwrap().path_mtu.get(|| far), None, "with its expiry");
    assert_eq!(protect_slots(&fx.snap().spd_out), vec![new], "policies name the new slot at once");
    assert!(fx.snap().sad.outbound_at(old).is_some(), "old slot kept during the grace");
    fx.m.tick(now + OUTBOUND_GRACE / 2);
    fx.m.publish();
    assert!(fx.snap().sad.outbound_at(old).is_some());
    fx.m.tick(now + OUTBOUND_GRACE);
    fx.m.publish();
    assert!(fx.snap().sad.outbound_at(old).is_none(), "old slot gone after the grace");
    fx.quiesce();
    fx.m.tick(now + OUTBOUND_GRACE * 2);
    assert_eq!(fx.m.retiring(), 0);
}

/// A rekey to the old key material would start the new SA's sequence
/// numbers at 1 under the old key (GCM nonces repeated): refused.
#[test]
fn rekey_to_the_same_keys_is_refused() {
    let cfg = load("rk-same", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let e = fx.m.rekey(1001, None, None, 1101, hex::decode(OUT_KEY).unwrap(), None, Instant::now()).unwrap_err();
    assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("old SA's"), "{e}");
    fx.m.publish();
    assert!(fx.out_slot(1001).is_some() && fx.out_slot(1101).is_none(), "nothing changed");
    // An auth_key for a combined-mode algorithm is named as such
    // (helper-89 got "integrity key is 1 bytes, expected 0").
    let e = fx.m.rekey(1001, None, None, 1101, hex::decode(key(0x51)).unwrap(), Some(vec![0]), Instant::now()).unwrap_err();
    assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("aes-128-gcm takes no auth_key"), "{e}");
    // Empty too, as in a config file (helper-90).
    let e = fx.m.rekey(1001, None, None, 1101, hex::decode(key(0x51)).unwrap(), Some(Vec::new()), Instant::now()).unwrap_err();
    assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("aes-128-gcm takes no auth_key (its ICV comes from its key), got 0 bytes"), "{e}");
    fx.m.publish();
    assert!(fx.out_slot(1001).is_some() && fx.out_slot(1101).is_none(), "nothing changed");
}

#[test]
fn rekey_inbound_keeps_both_spis_during_the_grace_then_only_the_new() {
    let cfg = load("rki", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    fx.m.set_grace(Duration::from_secs(5));
    let now = Instant::now();
    fx.m.rekey(1002, None, None, 1202, hex::decode(key(0x12)).unwrap(), None, now).unwrap();
    fx.m.publish();
    assert!(fx.in_resolves(1002) && fx.in_resolves(1202), "both SPIs during the grace");
    let t = fx.snap();
    let e = t.sad.inbound_at(t.sad.inbound_lookup(1202, OURS).unwrap()).unwrap();
    assert_eq!(e.selectors.len(), 1, "the new SA has the policy's selectors");
    // While the old SPI is still accepted, no new SA may take it (it
    // would shadow the retiring one: the peer's packets on the old key
    // would fail their ICV): neither an add nor a rekey back to it.
    let later = now + Duration::from_millis(4000);
    let e = fx.m.add(&sa(1002, "inbound", &key(0x13)), later).unwrap_err();
    assert!(e.kind == MgrErrorKind::Exists && e.message.contains("retiring inbound SA with SPI 1002") && e.message.contains("1000 ms"), "{e}");
    let e = fx.m.rekey(1202, None, None, 1002, hex::decode(key(0x14)).unwrap(), None, later).unwrap_err();
    assert!(e.kind == MgrErrorKind::Exists && e.message.contains("retiring"), "{e}");
    fx.m.tick(now + Duration::from_millis(4900));
    fx.m.publish();
    assert!(fx.in_resolves(1002));
    fx.m.tick(now + Duration::from_secs(5));
    fx.m.publish();
    assert!(!fx.in_resolves(1002) && fx.in_resolves(1202), "only the new after");
    let ev = fx.m.take_events();
    assert!(ev.iter().any(|e| e.kind == "rekeyed" && e.spi == 1002 && e.new_spi == Some(1202)));
    // Past the grace the SPI is free again.
    fx.m.rekey(1202, None, None, 1002, hex::decode(key(0x14)).unwrap(), None, now + Duration::from_secs(6)).unwrap();
}

#[test]
fn a_rekey_of_an_sa_with_an_integrity_key_needs_a_new_one() {
    let cfg = load("rk-auth", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let cbc = "[[sa]]\nspi = 3001\ndirection = \"outbound\"\nalgorithm = \"aes-128-cbc-hmac-sha256\"\n\
               key = \"000102030405060708090a0b0c0d0e0f\"\nauth_key = \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\"\n\
               tunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"\n";
    fx.m.add(cbc, Instant::now()).unwrap();
    let cbc_key = vec![9u8; 16];
    let e = fx.m.rekey(3001, None, None, 3002, cbc_key.clone(), None, Instant::now()).unwrap_err();
    assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("separate integrity key") && e.message.contains("auth_key"), "{e}");
    fx.m.rekey(3001, None, None, 3002, cbc_key, Some(vec![8u8; 32]), Instant::now()).unwrap();
    // An AEAD SA has none to give.
    fx.m.rekey(1001, None, None, 1201, hex::decode(key(0x15)).unwrap(), None, Instant::now()).unwrap();
}

#[test]
fn a_rekeyed_sa_starts_its_sequence_numbers_at_one() {
    // An SA configured to start late (or run out: that is when a rekey
    // replaces it): the new SA is new, its counter starts again.
    let cfg = load("rk-seq", &config_text("backend = \"software\"", "").replacen("spi = 1001\n", "spi = 1001\nfirst_seq = 4294967293\n", 1));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let first = |fx: &Fixture<'_, SoftDevice>, spi: u32| fx.snap().sad.outbound_sas().find(|(_, s)| s.spi == spi).map(|(_, s)| s.first_seq);
    assert_eq!(first(&fx, 1001), Some(4294967293));
    fx.m.rekey(1001, None, None, 1201, hex::decode(key(0x16)).unwrap(), None, Instant::now()).unwrap();
    fx.m.publish();
    assert_eq!(first(&fx, 1201), Some(1));
}

#[test]
fn limit_one_rekey_stops_sets_up_and_restarts_the_queue_pair_after_publish() {
    // One session per queue pair: only the outbound SA (inbound on another gateway).
    let text = config_text(&desc_cfg(1), "").replace(&sa(1002, "inbound", IN_KEY), "").replace(&policy("inbound", "198.51.100.0/24", "192.0.2.0/24", 1002), "");
    let cfg = load("lim1", &text);
    let d = desc(1);
    let mut fx = fixture(&cfg, &d);
    let before = d.qp_session_ids(0).unwrap();
    fx.m.rekey(1001, None, None, 1101, hex::decode(IN_KEY).unwrap(), None, Instant::now()).unwrap();
    assert_eq!(fx.m.restart, vec![0], "queue pair 0 waits for its restart");
    let after = d.qp_session_ids(0).unwrap();
    assert_eq!(after.len(), 1);
    assert_ne!(after, before, "the new session is set up");
    fx.m.publish();
    assert!(fx.m.restart.is_empty(), "restarted after the publish");
    assert!(fx.out_slot(1101).is_some());
    // A second SA does not fit: Busy.
    let e = fx.m.add(&sa(3001, "outbound", &key(0x31)), Instant::now()).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Busy, "{e}");
}

#[test]
fn limit_one_inbound_rekey_gives_no_grace_and_says_so() {
    // The old session is detached when the new one is set up: the old SPI
    // could only fail as session_not_attached, so it leaves at once
    // (no_sa) and the answer's old_valid_ms is 0, not the configured grace.
    let text = config_text(&desc_cfg(1), "").replace(&sa(1001, "outbound", OUT_KEY), "").replace(&policy("outbound", "192.0.2.0/24", "198.51.100.0/24", 1001), "");
    let cfg = load("lim1-in", &text);
    let d = desc(1);
    let mut fx = fixture(&cfg, &d);
    fx.m.set_grace(Duration::from_secs(5));
    let now = Instant::now();
    let r = fx.m.rekey(1002, None, None, 1102, hex::decode(OUT_KEY).unwrap(), None, now).unwrap();
    assert_eq!(r["old_valid_ms"], 0, "{r}");
    fx.m.publish();
    fx.m.tick(now);
    fx.m.publish();
    assert!(fx.in_resolves(1102) && !fx.in_resolves(1002), "the old SPI is not matched");
}

#[test]
fn time_lifetimes_fire_once_each_with_their_reason() {
    let text = config_text("backend = \"software\"", "").replace(
        "tunnel_dst = \"203.0.113.2\"\n",
        "tunnel_dst = \"203.0.113.2\"\nsoft_seconds = 10\nhard_seconds = 20\n",
    );
    let cfg = load("secs", &text);
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let t0 = Instant::now();
    let mut seen = Vec::new();
    for ms in (0..=30_000).step_by(50) {
        fx.m.tick(t0 + Duration::from_millis(ms));
        for e in fx.m.take_events() {
            seen.push((ms, e.kind, e.spi, e.reason));
        }
    }
    let soft_ev: Vec<_> = seen.iter().filter(|e| e.1 == "soft_expired").collect();
    let hard_ev: Vec<_> = seen.iter().filter(|e| e.1 == "hard_expired").collect();
    assert_eq!(soft_ev.len(), 1, "{seen:?}");
    assert_eq!(hard_ev.len(), 1, "{seen:?}");
    assert_eq!((soft_ev[0].2, soft_ev[0].3), (1001, Some("seconds")));
    assert_eq!((hard_ev[0].2, hard_ev[0].3), (1001, Some("seconds")));
    assert!((10_000..10_200).contains(&soft_ev[0].0) && (20_000..20_200).contains(&hard_ev[0].0), "{seen:?}");
}

#[test]
fn reload_applies_changed_removed_added_sas_and_refuses_a_port_change() {
    let (base, path, cfg) = soft_config_file("reload");
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let now = Instant::now();
    // Changed 1001 (key), removed 1002 (and its policy), added 3001.
    let next = base
        .replace(OUT_KEY, "0000000000000000000000000000000000000001")
        .replace(&sa(1002, "inbound", IN_KEY), &sa(3001, "outbound", &key(0x31)))
        .replace(&policy("inbound", "198.51.100.0/24", "192.0.2.0/24", 1002), "");
    std::fs::write(&path, &next).unwrap();
    let r = fx.m.reload(now).unwrap();
    assert_eq!((r["added"].as_u64(), r["removed"].as_u64(), r["replaced"].as_u64()), (Some(1), Some(1), Some(1)), "{r}");
    fx.m.publish();
    assert!(fx.out_slot(3001).is_some());
    fx.m.tick(now + Duration::from_secs(1));
    fx.m.publish();
    assert!(!fx.in_resolves(1002));
    // A port change: refused, nothing applied.
    let v = fx.snap().version;
    std::fs::write(&path, next.replace("\"out0\"", "\"out9\"").replace(&sa(3001, "outbound", &key(0x31)), "")).unwrap();
    let e = fx.m.reload(now).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Invalid);
    assert!(e.message.contains("[[port]]") && e.message.contains("nothing applied"), "{}", e.message);
    assert!(e.message.contains("port outside: interface out0 → out9"), "the message names the change: {}", e.message);
    fx.m.publish();
    assert_eq!(fx.snap().version, v);
    assert!(fx.out_slot(3001).is_some(), "SA 3001 still there");
}

/// A reload that changes an SA's settings but not its SPI and keys would
/// restart its sequence numbers under the same key (GCM nonce reuse) or
/// empty its replay window: refused, naming the SAs and fields, nothing
/// applied (trial-user finding: the replacement went out with seq 1 and
/// the same IVs as before). With a new key the same change is applied.
#[test]
fn a_reload_that_changes_an_sa_but_not_its_keys_is_refused() {
    let (base, path, cfg) = soft_config_file("reload-samekey");
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let now = Instant::now();
    fx.m.publish();
    let v = fx.snap().version;
    let out_old = sa(1001, "outbound", OUT_KEY);
    let in_old = sa(1002, "inbound", IN_KEY);
    let next = base.replace(&out_old, &format!("{out_old}outer_ttl = 33\n")).replace(&in_old, &format!("{in_old}replay_window = 256\n"));
    std::fs::write(&path, &next).unwrap();
    let e = fx.m.reload(now).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Invalid);
    assert!(e.message.contains("changed with the same SPI and keys: SA 1001 outbound: outer_ttl; SA 1002 inbound (tunnel_dst 203.0.113.1): replay_window;"), "{}", e.message);
    assert!(e.message.contains("replay_window") && e.message.contains("nothing applied"), "{}", e.message);
    fx.m.publish();
    assert_eq!(fx.snap().version, v, "nothing applied");
    // Only a policy changed: nothing replaced, accepted.
    std::fs::write(&path, base.replace("priority = 10", "priority = 11")).unwrap();
    let r = fx.m.reload(now).unwrap();
    assert_eq!(r["replaced"].as_u64(), Some(0), "{r}");
    // The same TTL change with a new key: replaced.
    let rekeyed = sa(1001, "outbound", "0000000000000000000000000000000000000001");
    std::fs::write(&path, base.replace(&out_old, &format!("{rekeyed}outer_ttl = 33\n"))).unwrap();
    let r = fx.m.reload(now).unwrap();
    assert_eq!(r["replaced"].as_u64(), Some(1), "{r}");
}

#[test]
fn a_reload_that_does_not_fit_the_queue_pairs_changes_nothing() {
    // Limit 1, the outbound SA only; rekeyed away from the file's SPI:
    // the reload would remove 2001 and add 1001 on the same queue pair,
    // whose one session 2001 keeps until its ops drain. Refused before
    // anything changes (was: `busy`, with 2001 already removed and its
    // policy naming nothing).
    let text = config_text(&desc_cfg(1), "").replace(&sa(1002, "inbound", IN_KEY), "").replace(&policy("inbound", "198.51.100.0/24", "192.0.2.0/24", 1002), "");
    let path = write_config("reload-lim1", &text);
    let cfg = crate::config::load(&path).unwrap();
    let d = desc(1);
    let mut fx = fixture(&cfg, &d);
    let now = Instant::now();
    fx.m.rekey(1001, None, None, 2001, hex::decode(IN_KEY).unwrap(), None, now).unwrap();
    // OUT_KEY is spent: the file brings 1001 back under a fresh key.
    std::fs::write(&path, text.replace(OUT_KEY, &key(0x41))).unwrap();
    fx.m.publish();
    fx.m.tick(now);
    fx.m.publish();
    let v = fx.snap().version;
    let e = fx.m.reload(now).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Busy, "{e}");
    assert!(e.message.contains("queue pair 0") && e.message.contains("nothing applied"), "{e}");
    fx.m.publish();
    assert_eq!(fx.snap().version, v, "nothing published");
    assert!(fx.out_slot(2001).is_some(), "SA 2001 still there");
    assert_eq!(protect_slots(&fx.snap().spd_out), vec![fx.out_slot(2001).unwrap()], "the policy still protects with 2001");
}

/// Two reloads within an outbound SA's grace that both change it: the
/// second's replacement would take the SPI the first's retiring SA still
/// sends under. Refused before anything changes (helper-104: `exists`
/// answered after the SA this reload removes, 1002, was already gone,
/// its policy naming nothing).
#[test]
fn a_reload_refused_for_a_retiring_spi_changes_nothing() {
    let (base, path, cfg) = soft_config_file("reload-retiring");
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let now = Instant::now();
    std::fs::write(&path, base.replace(OUT_KEY, &key(0x51)).replace(IN_KEY, &key(0x52))).unwrap();
    let r = fx.m.reload(now).unwrap();
    assert_eq!(r["replaced"].as_u64(), Some(2), "{r}");
    fx.m.publish();
    let v = fx.snap().version;
    // Within 1001's grace: 1001 under a third key, 1002 and its policy gone.
    let next = base
        .replace(OUT_KEY, &key(0x53))
        .replace(&sa(1002, "inbound", IN_KEY), "")
        .replace(&policy("inbound", "198.51.100.0/24", "192.0.2.0/24", 1002), "");
    std::fs::write(&path, &next).unwrap();
    let e = fx.m.reload(now + Duration::from_millis(10)).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Exists, "{e}");
    assert!(e.message.contains("retiring"), "{e}");
    fx.m.publish();
    assert_eq!(fx.snap().version, v, "nothing published");
    assert!(fx.in_resolves(1002), "SA 1002 still there");
    // After the grace the same file is taken.
    let r = fx.m.reload(now + Duration::from_secs(1)).unwrap();
    assert_eq!((r["removed"].as_u64(), r["replaced"].as_u64()), (Some(1), Some(1)), "{r}");
}

#[test]
fn port_changes_name_the_port_and_the_field() {
    let cfg = crate::config::load(&write_config("ports", &config_text("backend = \"software\"", ""))).unwrap();
    let old = cfg.ports.clone();
    assert!(port_changes(&old, &old).is_empty());
    let mut new = old.clone();
    new[1].mtu = 1400;
    assert_eq!(port_changes(&old, &new), [format!("port {}: mtu 1500 → 1400", old[1].name)]);
    new[0].name = "renamed".into();
    assert_eq!(
        port_changes(&old, &new),
        [format!("port {} removed", old[0].name), format!("port {}: mtu 1500 → 1400", old[1].name), "port renamed added".into()]
    );
    let swapped = vec![old[1].clone(), old[0].clone()];
    assert_eq!(port_changes(&old, &swapped), ["port order"]);
    // Addresses: the families interleaved differently is no change (a
    // .cfg lists them in SA order); another order within a family is
    // (the first is the ICMP source), shown as address/length.
    let v4 = |s: &str| (s.parse::<IpAddr>().unwrap(), 24u8);
    let mut a = old.clone();
    a[1].addresses = vec![v4("203.0.113.1"), ("2001:db8::1".parse().unwrap(), 64), v4("198.51.100.1")];
    let mut b = a.clone();
    b[1].addresses = vec![("2001:db8::1".parse().unwrap(), 64), v4("203.0.113.1"), v4("198.51.100.1")];
    assert!(port_changes(&a, &b).is_empty(), "{:?}", port_changes(&a, &b));
    b[1].addresses.swap(1, 2);
    assert_eq!(
        port_changes(&a, &b),
        [format!("port {}: addresses 203.0.113.1/24, 198.51.100.1/24, 2001:db8::1/64 → 198.51.100.1/24, 203.0.113.1/24, 2001:db8::1/64", old[1].name)]
    );
    // A field outside the list above is named, not called "port order".
    let mut c = old.clone();
    c[0].peer_mac = Some([2, 0, 0, 0, 0, 9]);
    assert_eq!(port_changes(&old, &c), [format!("port {}: peer_mac none → 02:00:00:00:00:09", old[0].name)]);
}

#[test]
fn reload_applies_a_new_rekey_grace_and_refuses_a_new_socket_path() {
    let (base, path, cfg) = soft_config_file("reload-control");
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    fx.m.set_grace(Duration::from_millis(cfg.control.rekey_grace_ms));
    let now = Instant::now();
    // The grace from the file: a rekey after the reload keeps the old SA 250 ms.
    std::fs::write(&path, format!("{base}[control]\nrekey_grace_ms = 250\n")).unwrap();
    fx.m.reload(now).unwrap();
    let r = fx.m.rekey(1002, None, None, 4002, hex::decode(key(0x42)).unwrap(), None, now).unwrap();
    assert_eq!(r["old_valid_ms"].as_u64(), Some(250), "{r}");
    // A new socket path needs a restart: refused, nothing applied.
    std::fs::write(&path, format!("{base}[control]\nrekey_grace_ms = 9000\nsocket = \"/tmp/elsewhere.sock\"\n")).unwrap();
    let e = fx.m.reload(now).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Invalid);
    assert!(e.message.contains("control.socket") && e.message.contains("nothing applied"), "{}", e.message);
    assert!(e.message.contains("→ \"/tmp/elsewhere.sock\""), "the message gives the values: {}", e.message);
    // A [gateway] field: named with its values.
    assert!(base.contains("[gateway]\n") && !base.contains("icmp_echo"), "{base}");
    std::fs::write(&path, base.replacen("[gateway]\n", "[gateway]\nicmp_echo = false\n", 1)).unwrap();
    let e = fx.m.reload(now).unwrap_err();
    assert!(e.message.contains("gateway.icmp_echo true → false changed; these take effect on restart only"), "{}", e.message);
    // [crypto], [reassembly] and the neighbour queues: each field named
    // with its values too (helper-84 got "[crypto] changed").
    assert!(base.contains("backend = \"software\"\n") && !base.contains("[reassembly]") && !base.contains("[neighbour_table]"), "{base}");
    let text = base.replacen("backend = \"software\"\n", "backend = \"software\"\nring_depth = 128\n", 1) + "[reassembly]\ncontexts = 8\n[neighbour_table]\npending_per_hop = 3\n";
    std::fs::write(&path, text).unwrap();
    let e = fx.m.reload(now).unwrap_err();
    let ring = cfg.crypto.ring_depth;
    let ctx = cfg.reassembly.contexts;
    let hop = cfg.neighbour_table.pending_per_hop;
    for want in [format!("crypto.ring_depth {ring} → 128"), format!("reassembly.contexts {ctx} → 8"), format!("neighbour_table.pending_per_hop {hop} → 3")] {
        assert!(e.message.contains(&want), "wanted {want:?} in: {}", e.message);
    }
    let r = fx.m.rekey(1001, None, None, 4001, hex::decode(key(0x43)).unwrap(), None, now).unwrap();
    assert_eq!(r["old_valid_ms"].as_u64(), Some(100), "outbound: {r}");
    let r = fx.m.rekey(4002, None, None, 5002, hex::decode(key(0x44)).unwrap(), None, now).unwrap();
    assert_eq!(r["old_valid_ms"].as_u64(), Some(250), "the refused file's grace is not applied: {r}");
}

/// With the path from `secgw run --socket` the file's `control.socket` is
/// not in use: a reload that changes it is taken with the rest
/// (helper-89 got "control.socket … changed" refused).
#[test]
fn reload_takes_a_new_socket_path_when_the_command_line_gave_it() {
    let (base, path, cfg) = soft_config_file("reload-socket-cli");
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    fx.m.set_socket_from_command_line(true);
    let now = Instant::now();
    // The file's socket is unused, so a relative one is not warned about
    // (helper-90); `secgw check` of the same file still warns.
    std::fs::write(&path, format!("{base}[control]\nsocket = \"relative.sock\"\n")).unwrap();
    let r = fx.m.reload(now).unwrap();
    assert!(!r["warnings"].to_string().contains("control.socket"), "{r}");
    let file = crate::config::load(&path).unwrap();
    assert!(crate::config::warnings(&file).iter().any(|w| w.contains("control.socket: relative.sock is relative")), "check warns");
    std::fs::write(&path, format!("{base}[control]\nrekey_grace_ms = 300\nsocket = \"/tmp/elsewhere.sock\"\n")).unwrap();
    fx.m.reload(now).unwrap();
    let r = fx.m.rekey(1002, None, None, 4002, hex::decode(key(0x42)).unwrap(), None, now).unwrap();
    assert_eq!(r["old_valid_ms"].as_u64(), Some(300), "applied: {r}");
}

#[test]
fn publish_stops_waiting_for_workers_once_the_gateway_is_stopping() {
    let cfg = load("stopping", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let stop = Arc::new(AtomicBool::new(false));
    fx.m.set_adopt_wait(Duration::from_millis(400));
    fx.m.set_stop_flag(stop.clone());
    // The fixture's worker never adopts anything: a running gateway waits
    // the whole adopt wait for it...
    fx.m.add(&sa(2001, "outbound", &key(0x21)), Instant::now()).unwrap();
    let t = Instant::now();
    fx.m.publish();
    assert!(t.elapsed() >= Duration::from_millis(400), "{:?}", t.elapsed());
    // ...a stopping one (SIGTERM: its workers are leaving) does not.
    stop.store(true, Ordering::Relaxed);
    fx.m.add(&sa(2002, "outbound", &key(0x22)), Instant::now()).unwrap();
    let t = Instant::now();
    fx.m.publish();
    assert!(t.elapsed() < Duration::from_millis(200), "{:?}", t.elapsed());
    assert!(fx.out_slot(2002).is_some(), "published all the same");
}

#[test]
fn rekey_over_the_socket_takes_the_key_as_sa_key_does_and_says_what_is_wrong_with_it() {
    let cfg = load("rekey-hex", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let rekey = |m: &mut Manager<'_, SoftDevice>, new_spi: u32, key: &str| {
        m.handle(&Command::SaRekey { spi: 1001, direction: Some(Direction::Outbound), dst: None, new_spi, key: key.into(), auth_key: None })
    };
    // The key file of `secgw ctl sa rekey` holds hex "as sa.key": ':' separators allowed.
    let colons = key(0x45).as_bytes().chunks(2).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(":");
    let r = rekey(&mut fx.m, 4001, &colons).unwrap();
    assert_eq!(r["rekeyed"]["new_spi"].as_u64(), Some(4001), "{r}");
    // 40 digits, one of them not hex: named as such (not "an even number").
    let bad = format!("{}zz", &IN_KEY[..38]);
    let e = rekey(&mut fx.m, 4002, &bad).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadArgs);
    assert!(e.message.contains("non-hex character at position 39") && !e.message.contains(&IN_KEY[..38]), "{}", e.message);
    let e = rekey(&mut fx.m, 4002, &IN_KEY[..39]).unwrap_err();
    assert!(e.message.contains("even number of hex digits, found 39"), "{}", e.message);
}

#[test]
fn reload_of_a_dpdk_cfg_imports_it_again_with_its_port_options() {
    use crate::config::dpdk::ImportOptions;
    let dir = std::env::temp_dir().join(format!("secgw-mgr-test-{}-dpdk", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gw.cfg");
    let sa_out = "sa out 5 aead_algo aes-128-gcm aead_key 01:01:01:01:01:01:01:01:01:01:01:01:01:01:01:01:02:02:02:02 \\\nmode ipv4-tunnel src 172.16.1.5 dst 172.16.2.5\n";
    let base = format!(
        "sp ipv4 out esp protect 5 pri 1 dst 192.168.105.0/24 sport 0:65535 dport 0:65535\n{sa_out}\
         rt ipv4 dst 172.16.2.5/32 port 0\nrt ipv4 dst 192.168.115.0/24 port 1\n"
    );
    std::fs::write(&path, &base).unwrap();
    let mut opts = ImportOptions { port_mask: Some(0x3), unprotected_mask: Some(0x1), ..Default::default() };
    opts.interfaces.insert(0, "p0".into());
    opts.interfaces.insert(1, "p1".into());
    let (cfg, _) = crate::config::load_any(&path, &opts).unwrap();
    assert_eq!(cfg.dpdk_import.as_ref(), Some(&opts));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    // A second SA in the file: the reload imports it with the same ports
    // (without the options the .cfg would name no interfaces and fail).
    let sa6 = "sa out 6 aead_algo aes-128-gcm aead_key 03:03:03:03:03:03:03:03:03:03:03:03:03:03:03:03:04:04:04:04 \\\nmode ipv4-tunnel src 172.16.1.5 dst 172.16.2.5\n";
    std::fs::write(&path, format!("{base}{sa6}")).unwrap();
    let r = fx.m.reload(Instant::now()).unwrap();
    assert_eq!((r["added"].as_u64(), r["removed"].as_u64(), r["replaced"].as_u64()), (Some(1), Some(0), Some(0)), "{r}");
    fx.m.publish();
    assert!(fx.out_slot(6).is_some());
}

/// An inbound tunnel SA with SPI `spi` from `src` to our address `dst`.
fn inbound_to(spi: u32, src: &str, dst: &str, key: &str) -> String {
    format!("[[sa]]\nspi = {spi}\ndirection = \"inbound\"\nalgorithm = \"aes-128-gcm\"\nkey = \"{key}\"\ntunnel_src = \"{src}\"\ntunnel_dst = \"{dst}\"\n")
}

#[test]
fn an_spi_shared_by_two_inbound_sas_is_ambiguous_until_the_destination_is_given() {
    let cfg = load("shared", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let now = Instant::now();
    // Config SA 1002 goes to 203.0.113.1; a second peer uses SPI 1002
    // towards our 203.0.113.5, with its own key and policy.
    let second: std::net::IpAddr = "203.0.113.5".parse().unwrap();
    let frag = format!("{}{}", inbound_to(1002, "203.0.113.6", "203.0.113.5", &key(0x51)), policy("inbound", "10.6.0.0/16", "192.0.2.0/24", 1002));
    let r = fx.m.add(&frag, now).unwrap();
    assert_eq!(r["added"][0]["tunnel_dst"], "203.0.113.5", "{r}");
    fx.m.publish();
    let t = fx.snap();
    let (a, b) = (t.sad.inbound_lookup(1002, OURS).unwrap(), t.sad.inbound_lookup(1002, second).unwrap());
    assert_ne!(a, b, "two SAs, two slots");
    assert_eq!(t.sad.inbound_at(b).unwrap().sa.tunnel_src, "203.0.113.6".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(t.sad.inbound_lookup(1002, "203.0.113.9".parse().unwrap()), None, "a third address has no SA");
    let ev = fx.m.take_events();
    assert!(ev.iter().any(|e| e.kind == "added" && e.spi == 1002 && e.dst == Some(second)), "{ev:?}");
    // The same SPI and destination again: exists.
    let e = fx.m.add(&inbound_to(1002, "203.0.113.7", "203.0.113.5", &key(0x52)), now).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Exists, "{e}");
    assert!(e.message.contains("SPI 1002 and tunnel_dst 203.0.113.5 is installed already"), "{}", e.message);
    // Without a destination, del and rekey say the SPI is ambiguous and
    // name the destinations; nothing changes.
    for r in [fx.m.del(1002, None, None, now), fx.m.rekey(1002, Some(Direction::Inbound), None, 3002, hex::decode(IN_KEY).unwrap(), None, now)] {
        let e = r.unwrap_err();
        assert_eq!(e.kind, MgrErrorKind::Invalid, "{e}");
        assert_eq!(e.message, "SPI 1002 is shared by 2 inbound SAs (tunnel_dst 203.0.113.1, 203.0.113.5): give the destination (--dst)");
    }
    assert_eq!(fx.m.len(), 3);
    // A destination no SA has: not found.
    let e = fx.m.del(1002, None, Some("203.0.113.9".parse().unwrap()), now).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::NotFound, "{e}");
    // Over the socket, with the destination: the right one goes, the
    // other keeps its slot and the SPI's policies.
    let r = fx.m.handle(&Command::SaDel { spi: 1002, direction: None, dst: Some(second) }).unwrap();
    assert_eq!(r["deleted"]["tunnel_dst"], "203.0.113.5", "{r}");
    assert_eq!(r["policies_removed"], 0, "SA 1002 to 203.0.113.1 still uses them");
    fx.m.tick(now + Duration::from_secs(1));
    fx.m.publish();
    let t = fx.snap();
    assert_eq!(t.sad.inbound_lookup(1002, second), None);
    assert_eq!(t.sad.inbound_lookup(1002, OURS), Some(a));
    assert_eq!(t.sad.inbound_at(a).unwrap().selectors.len(), 2, "both policies naming 1002");
    // Now unambiguous again: del without a destination works.
    let r = fx.m.del(1002, None, None, now).unwrap();
    assert_eq!(r["policies_removed"], 2, "{r}");
}

#[test]
fn rekeying_one_of_two_inbound_sas_sharing_an_spi_leaves_the_other_its_policies() {
    let cfg = load("shared-rekey", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    fx.m.set_grace(Duration::from_millis(10));
    let now = Instant::now();
    fx.m.add(&inbound_to(1002, "203.0.113.6", "203.0.113.5", &key(0x51)), now).unwrap();
    let second: std::net::IpAddr = "203.0.113.5".parse().unwrap();
    let r = fx.m.rekey(1002, None, Some(second), 3002, hex::decode(key(0x52)).unwrap(), None, now).unwrap();
    assert_eq!(r["rekeyed"]["tunnel_dst"], "203.0.113.5", "{r}");
    fx.m.tick(now + Duration::from_secs(1));
    fx.m.publish();
    let t = fx.snap();
    assert_eq!(t.sad.inbound_lookup(1002, second), None, "rekeyed away after the grace");
    let new = t.sad.inbound_at(t.sad.inbound_lookup(3002, second).unwrap()).unwrap();
    let old = t.sad.inbound_at(t.sad.inbound_lookup(1002, OURS).unwrap()).unwrap();
    assert_eq!((new.selectors.len(), old.selectors.len()), (1, 1), "the policy was copied, not moved");
    let actions: Vec<String> = fx.m.list_policies()["policies"].as_array().unwrap().iter().map(|p| p["action"].as_str().unwrap().to_string()).collect();
    assert!(actions.contains(&"protect 1002".to_string()) && actions.contains(&"protect 3002".to_string()), "{actions:?}");
}

#[test]
fn sa_list_gives_tunnel_endpoints_for_tunnel_sas_and_null_for_transport_sas() {
    let transport = "[[sa]]\nspi = 3001\ndirection = \"outbound\"\nmode = \"transport\"\nalgorithm = \"aes-128-gcm\"\n\
                     key = \"5d84805d9cc35adcdc5696f6ed3dab836df80aa2\"\n";
    let cfg = load("list-transport", &config_text("backend = \"software\"", transport));
    let s = soft();
    let fx = fixture(&cfg, &s);
    let list = fx.m.list_sas(Instant::now());
    let sas = list["sas"].as_array().expect("sas array");
    let by_spi = |spi: u64| sas.iter().find(|s| s["spi"] == spi).unwrap_or_else(|| panic!("SPI {spi} in {list}"));
    assert_eq!((by_spi(1001)["tunnel_src"].as_str(), by_spi(1001)["tunnel_dst"].as_str()), (Some("203.0.113.1"), Some("203.0.113.2")));
    let t = by_spi(3001);
    assert_eq!(t["mode"], "transport");
    // Not "0.0.0.0": a transport-mode SA has no tunnel endpoints.
    assert!(t["tunnel_src"].is_null() && t["tunnel_dst"].is_null(), "{t}");
    let table = crate::control::client::render_sa_table(&list).unwrap();
    let row = table.lines().find(|l| l.contains("3001")).expect("row of SPI 3001");
    assert!(!row.contains("0.0.0.0") && row.contains(" - "), "{row}");
}

/// `sa add` checks the provider as the config file does: an SA the
/// configured provider cannot run is `invalid` with the file's message
/// (field, line, the provider and what it offers), not the device's raw
/// "unsupported transform" (trial-user finding).
#[test]
fn sa_add_names_a_provider_that_cannot_run_the_sa() {
    let cfg = load("add-provider", &config_text("backend = \"software\"\nprovider = \"ring\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let cbc = "[[sa]]\nspi = 3001\ndirection = \"outbound\"\nalgorithm = \"aes-128-cbc-hmac-sha256\"\n\
               key = \"000102030405060708090a0b0c0d0e0f\"\nauth_key = \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\"\n\
               tunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"\n";
    let e = fx.m.add(cbc, Instant::now()).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Invalid);
    assert!(e.message.contains("<sa add>:4:") && e.message.contains("sa[0].algorithm") && e.message.contains("provider = \"ring\""), "{}", e.message);
    fx.m.publish();
    assert!(fx.out_slot(3001).is_none());
}

/// A queue pair full because of a retiring SA (rekeyed, still in its
/// grace): the `busy` answer says so and when it frees, since a retiring
/// SA cannot be deleted (trial-user finding: the message advised deleting
/// an SA, which could not free that slot).
#[test]
fn busy_names_the_sessions_of_retiring_sas() {
    let cfg = load("busy-retiring", &config_text(&desc_cfg(3), ""));
    let d = desc(3);
    let mut fx = fixture(&cfg, &d);
    fx.m.set_grace(Duration::from_secs(5));
    let now = Instant::now();
    fx.m.rekey(1002, None, None, 1202, hex::decode(key(0x12)).unwrap(), None, now).unwrap();
    fx.m.publish();
    let e = fx.m.add(&sa(3001, "outbound", &key(0x31)), now + Duration::from_millis(1000)).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Busy);
    assert!(e.message.contains("holds 3 session(s)") && e.message.contains("1 of them of retiring SAs") && e.message.contains("in 4000 ms"), "{}", e.message);
}

/// Counter-mode key material (AES-GCM here) another SA holds or held is
/// refused on the socket as in the file (RFC 4106 §3.1: a new SA counts
/// from 1, so it would repeat that SA's nonces): `sa add`, naming the SA
/// holding it; nothing installed; a fresh key is taken.
#[test]
fn sa_add_refuses_key_material_an_installed_or_gone_sa_holds() {
    let cfg = load("reuse-add", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    fx.m.publish();
    let v = fx.snap().version;
    let frag = format!("{}{}", sa(2001, "outbound", &key(0x61)), sa(2002, "outbound", IN_KEY));
    let e = fx.m.add(&frag, Instant::now()).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Invalid);
    assert!(
        e.message.contains("SA 2002 outbound: its key is the key material of inbound SA 1002 (tunnel_dst 203.0.113.1), which is installed")
            && e.message.contains("RFC 4106 §3.1")
            && e.message.contains("fresh key"),
        "{}",
        e.message
    );
    fx.m.publish();
    assert_eq!(fx.snap().version, v, "nothing published");
    assert_eq!(fx.m.len(), 2);
    // The first SA of that fragment was never installed: its key is free.
    fx.m.add(&sa(2001, "outbound", &key(0x61)), Instant::now()).unwrap();
    // A deleted SA's key stays taken once it is gone: its packets are out.
    let now = Instant::now();
    fx.m.del(1001, None, None, now).unwrap();
    fx.m.publish();
    fx.m.tick(now + Duration::from_secs(1));
    fx.m.publish();
    fx.quiesce();
    fx.m.tick(now + Duration::from_secs(2));
    assert_eq!(fx.m.retiring(), 0, "SA 1001 gone");
    assert!(fx.m.take_events().iter().any(|e| e.kind == "deleted" && e.spi == 1001));
    let e = fx.m.add(&sa(1001, "outbound", OUT_KEY), now + Duration::from_secs(2)).unwrap_err();
    assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("outbound SA 1001, which is gone (a key once installed is not used again"), "{e}");
    fx.m.add(&sa(1001, "outbound", &key(0x62)), now + Duration::from_secs(2)).unwrap();
    // A new inbound SA: the peer's nonces, and a replay window afresh.
    let e = fx.m.add(&sa(2003, "inbound", &key(0x62)), now).unwrap_err();
    assert!(e.message.contains("SA 2003 inbound (tunnel_dst 203.0.113.1): its key is the key material of outbound SA 1001, which is installed") && e.message.contains("empty replay window"), "{e}");
    // AES-256-GCM and ChaCha20-Poly1305 key material have one length: one
    // key under two ciphers is refused as such, not as nonces repeated.
    let k36 = "5a".repeat(36);
    let alg = |spi: u32, alg: &str| sa(spi, "outbound", &k36).replace("aes-128-gcm", alg);
    fx.m.add(&alg(4001, "aes-256-gcm"), now).unwrap();
    let e = fx.m.add(&alg(4002, "chacha20-poly1305"), now).unwrap_err();
    assert!(e.message.contains("outbound SA 4001, which is installed; it uses it with aes-256-gcm: one key must serve one SA and one algorithm") && !e.message.contains("nonces"), "{e}");
    // AES-CBC's IVs are random (RFC 3602 §3): its keys are not registered.
    let cbc = |spi: u32| {
        format!(
            "[[sa]]\nspi = {spi}\ndirection = \"outbound\"\nalgorithm = \"aes-128-cbc-hmac-sha256\"\nkey = \"{}\"\nauth_key = \"{}\"\ntunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"\n",
            "07".repeat(16),
            "08".repeat(32)
        )
    };
    fx.m.add(&cbc(3001), now).unwrap();
    fx.m.add(&cbc(3002), now).unwrap();
}

/// `sa rekey` to key material another SA holds: refused, naming it. With
/// AES-CTR and HMAC the nonce comes from the cipher key alone, so a new
/// `auth_key` beside the old cipher key is refused too (it passed before:
/// only both keys equal were refused).
#[test]
fn sa_rekey_refuses_key_material_another_sa_holds_and_a_kept_ctr_cipher_key() {
    let cfg = load("reuse-rekey", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let now = Instant::now();
    let e = fx.m.rekey(1001, None, None, 1101, hex::decode(IN_KEY).unwrap(), None, now).unwrap_err();
    assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("SA 1101 outbound: its key is the key material of inbound SA 1002"), "{e}");
    let ctr_key = "09".repeat(20);
    let ctr = format!(
        "[[sa]]\nspi = 3001\ndirection = \"outbound\"\nalgorithm = \"aes-128-ctr-hmac-sha256\"\nkey = \"{ctr_key}\"\nauth_key = \"{}\"\ntunnel_src = \"203.0.113.1\"\ntunnel_dst = \"203.0.113.2\"\n",
        "0a".repeat(32)
    );
    fx.m.add(&ctr, now).unwrap();
    let e = fx.m.rekey(3001, None, None, 3002, hex::decode(&ctr_key).unwrap(), Some(vec![0x0b; 32]), now).unwrap_err();
    assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("outbound SA 3001, which is installed") && e.message.contains("aes-128-ctr-hmac-sha256"), "{e}");
    fx.m.publish();
    assert!(fx.out_slot(3001).is_some() && fx.out_slot(3002).is_none() && fx.out_slot(1101).is_none(), "nothing changed");
    // The old SA, retiring now, keeps its key: a rekey back to it is refused.
    fx.m.rekey(3001, None, None, 3002, vec![0x0c; 20], Some(vec![0x0b; 32]), now).unwrap();
    let e = fx.m.rekey(3002, None, None, 3003, hex::decode(&ctr_key).unwrap(), Some(vec![0x0d; 32]), now).unwrap_err();
    assert!(e.message.contains("outbound SA 3001, which is retiring"), "{e}");
}

/// `reload` giving an SA a new SPI but its old key, or bringing back a
/// file key that a socket rekey replaced: refused, nothing applied.
#[test]
fn reload_refuses_key_material_another_sa_holds_or_held() {
    let (base, path, cfg) = soft_config_file("reuse-reload");
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let now = Instant::now();
    fx.m.publish();
    let v = fx.snap().version;
    let renumbered = base
        .replace(&sa(1001, "outbound", OUT_KEY), &sa(1101, "outbound", OUT_KEY))
        .replace(&policy("outbound", "192.0.2.0/24", "198.51.100.0/24", 1001), &policy("outbound", "192.0.2.0/24", "198.51.100.0/24", 1101));
    std::fs::write(&path, &renumbered).unwrap();
    let e = fx.m.reload(now).unwrap_err();
    assert_eq!(e.kind, MgrErrorKind::Invalid);
    assert!(
        e.message.contains(&format!("{}: SA 1101 outbound: its key is the key material of outbound SA 1001, which is installed", path.display()))
            && e.message.ends_with("nothing applied"),
        "{}",
        e.message
    );
    fx.m.publish();
    assert_eq!(fx.snap().version, v, "nothing applied");
    assert!(fx.out_slot(1001).is_some() && fx.out_slot(1101).is_none());
    // A socket rekey moves 1001 to 1201; the file still names 1001 with
    // its first key, which would count from 1 again.
    std::fs::write(&path, &base).unwrap();
    fx.m.rekey(1001, None, None, 1201, hex::decode(key(0x63)).unwrap(), None, now).unwrap();
    let e = fx.m.reload(now + Duration::from_secs(10)).unwrap_err();
    assert!(e.message.contains("SA 1001 outbound: its key is the key material of outbound SA 1001, which is"), "{e}");
    // With a fresh key in the file, the reload applies.
    std::fs::write(&path, base.replace(OUT_KEY, &key(0x64))).unwrap();
    let r = fx.m.reload(now + Duration::from_secs(10)).unwrap();
    assert_eq!((r["added"].as_u64(), r["removed"].as_u64()), (Some(1), Some(1)), "{r}");
}

/// On the limit-1 path the key check comes before the queue pair is
/// stopped; and a rekeyed SA's key stays taken once that SA is gone.
#[test]
fn limit_one_rekey_refuses_a_gone_sas_key_before_stopping_the_queue_pair() {
    let text = config_text(&desc_cfg(1), "").replace(&sa(1002, "inbound", IN_KEY), "").replace(&policy("inbound", "198.51.100.0/24", "192.0.2.0/24", 1002), "");
    let cfg = load("lim1-reuse", &text);
    let d = desc(1);
    let mut fx = fixture(&cfg, &d);
    let now = Instant::now();
    fx.m.rekey(1001, None, None, 1101, hex::decode(key(0x71)).unwrap(), None, now).unwrap();
    fx.m.publish();
    fx.m.tick(now);
    fx.m.publish();
    fx.quiesce();
    fx.m.tick(now);
    assert_eq!(fx.m.retiring(), 0, "SA 1001 gone");
    let attached = d.qp_session_ids(0).unwrap();
    let e = fx.m.rekey(1101, None, None, 1201, hex::decode(OUT_KEY).unwrap(), None, now).unwrap_err();
    assert!(e.kind == MgrErrorKind::Invalid && e.message.contains("outbound SA 1001, which is gone"), "{e}");
    assert!(fx.m.restart.is_empty(), "the queue pair was not stopped");
    assert_eq!(d.qp_session_ids(0).unwrap(), attached, "SA 1101's session still set up");
    fx.m.publish();
    assert!(fx.out_slot(1101).is_some() && fx.out_slot(1201).is_none());
}

#[test]
fn policy_del_removes_the_listed_entry_and_narrows_its_inbound_sa() {
    let extra = format!(
        "{}[[policy]]\ndirection = \"outbound\"\nsrc = \"192.0.2.0/24\"\ndst = \"198.51.100.0/24\"\nprotocol = 17\npriority = 1\naction = \"bypass\"\n",
        policy("inbound", "198.51.100.0/24", "10.0.0.0/8", 1002)
    );
    let cfg = load("pdel", &config_text("backend = \"software\"", &extra));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let listed = |fx: &Fixture<'_, SoftDevice>| fx.m.list_policies()["policies"].as_array().unwrap().clone();
    let inbound_admits = |fx: &Fixture<'_, SoftDevice>, dst: &str| {
        let t = fx.snap();
        let e = t.sad.inbound_lookup(1002, OURS).and_then(|s| t.sad.inbound_at(s)).unwrap();
        e.admits(&crate::policy::spd::FlowKey { src: "198.51.100.10".parse().unwrap(), dst: dst.parse().unwrap(), protocol: 17, ports: Some((1, 2)) })
    };
    assert_eq!(listed(&fx).len(), 4);
    // The UDP bypass comes first: the protect entry does not get UDP.
    assert!(protect_slots(&fx.snap().spd_out).is_empty());
    let bypass = listed(&fx).into_iter().find(|p| p["action"] == "bypass").unwrap();
    let r = fx.m.del_policy(&bypass, None).unwrap();
    assert_eq!((r["deleted"].clone(), r["index"].clone()), (bypass.clone(), json!(3)));
    fx.m.publish();
    assert_eq!(protect_slots(&fx.snap().spd_out), vec![fx.out_slot(1001).unwrap()], "UDP now protected");
    // Gone: the same listing removes nothing the second time.
    assert_eq!(fx.m.del_policy(&bypass, None).unwrap_err().kind, MgrErrorKind::NotFound);
    // One of SA 1002's two inbound entries: the SA admits only the other's.
    assert!(inbound_admits(&fx, "10.1.2.3") && inbound_admits(&fx, "192.0.2.10"));
    let second = listed(&fx).into_iter().find(|p| p["dst"] == "10.0.0.0/8").unwrap();
    // Given with its index, the entry there must be that one.
    assert_eq!(fx.m.del_policy(&second, Some(0)).unwrap_err().kind, MgrErrorKind::NotFound);
    let at = listed(&fx).iter().position(|p| *p == second);
    fx.m.del_policy(&second, at).unwrap();
    fx.m.publish();
    assert!(!inbound_admits(&fx, "10.1.2.3") && inbound_admits(&fx, "192.0.2.10"));
    // An entry differing in one field is not a match.
    let mut other = listed(&fx)[0].clone();
    other["priority"] = json!(11);
    assert_eq!(fx.m.del_policy(&other, None).unwrap_err().kind, MgrErrorKind::NotFound);
    assert_eq!(listed(&fx).len(), 2);
}

/// `sa add` text with tables a fragment does not take, or a policy naming
/// an installed SA of the other direction: the messages name the table
/// once and say where the SA is.
#[test]
fn fragment_messages_name_the_table_once_and_an_installed_sa_as_such() {
    let cfg = load("fragmsg", &config_text("backend = \"software\"", ""));
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let msg = |fx: &mut Fixture<'_, SoftDevice>, t: &str| fx.m.add(t, Instant::now()).unwrap_err().message;
    assert_eq!(msg(&mut fx, "[[route]]\nprefix = \"10.0.0.0/8\"\nport = \"inside\"\n"), "<sa add>:1:3: route: unknown key `route`; expected `sa` or `policy`");
    assert_eq!(msg(&mut fx, "[gateway]\nname = \"x\"\n"), "<sa add>:1:2: gateway: unknown key `gateway`; expected `sa` or `policy`");
    let m = msg(&mut fx, &policy("inbound", "198.51.100.0/24", "192.0.2.0/24", 1001));
    assert!(m.ends_with("policy[0].action: expected an inbound SA for an inbound policy, found SPI 1001 is outbound (installed)"), "{m}");
}

/// The worker of each active SA with this SPI, from `sa list`.
fn workers_of(m: &Manager<'_, SoftDevice>, spi: u32) -> Vec<u64> {
    let v = m.list_sas(Instant::now());
    v["sas"].as_array().unwrap().iter().filter(|s| s["spi"] == spi && s["state"] == "active").map(|s| s["worker"].as_u64().unwrap()).collect()
}

/// On a device without a session limit (the software one) new SAs still go
/// to the worker whose queue pair holds the fewest sessions, so `sa add`
/// spreads them (helper-95: every one went to worker 0, the count being
/// kept only under a limit); a reload that replaces an SA follows a new
/// `worker` pin in the file (it stayed on its old worker).
#[test]
fn new_sas_spread_over_the_workers_of_an_unlimited_device_and_a_replacement_follows_its_pin() {
    let base = config_text("backend = \"software\"", "").replace("workers = 1", "workers = 2");
    let path = write_config("spread", &base);
    let cfg = crate::config::load(&path).unwrap();
    let s = SoftDevice::new(2);
    let mut m = Manager::new(&cfg, &s, &MACS).unwrap();
    assert_eq!((workers_of(&m, 1001), workers_of(&m, 1002)), (vec![0], vec![1]), "the file's binding");
    let now = Instant::now();
    for (i, spi) in (3001..=3004).enumerate() {
        m.add(&sa(spi, "outbound", &key(0x40 + i as u8)), now).unwrap();
    }
    let spread: Vec<u64> = (3001..=3004).flat_map(|spi| workers_of(&m, spi)).collect();
    assert_eq!(spread, [0, 1, 0, 1], "each to the queue pair with the fewest sessions");
    // SA 1001 with a new key and pinned to worker 1: replaced there.
    let pinned = sa(1001, "outbound", OUT_KEY).replace(OUT_KEY, &key(0x51)) + "worker = 1\n";
    std::fs::write(&path, base.replace(&sa(1001, "outbound", OUT_KEY), &pinned)).unwrap();
    let r = m.reload(now).unwrap();
    assert_eq!(r["replaced"].as_u64(), Some(1), "{r}");
    assert_eq!(workers_of(&m, 1001), [1], "the pin moved the replacement");
    // The same pin past the workers is refused by the file's check.
    std::fs::write(&path, base.replace(&sa(1001, "outbound", OUT_KEY), &pinned.replace(&key(0x51), &key(0x52)).replace("worker = 1", "worker = 2"))).unwrap();
    assert!(m.reload(now).is_err());
    assert_eq!(workers_of(&m, 1001), [1]);
}

/// The control thread's `no_sa` warnings tell ESP that found no SA (named
/// by SPI and source) from packets whose SA went under them (helper-104:
/// 8,192 plaintext packets of a deleted outbound SA were reported as ESP
/// "with SPI 0" and the advice to add the inbound SA first).
#[test]
fn no_sa_warnings_tell_a_peers_esp_from_an_sa_gone_under_its_packets() {
    #[derive(Clone, Default)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let (_, _, cfg) = soft_config_file("no-sa-warn");
    let s = soft();
    let mut fx = fixture(&cfg, &s);
    let buf = Buf::default();
    let w = buf.clone();
    let sub = tracing_subscriber::fmt().with_writer(move || w.clone()).with_ansi(false).finish();
    let now = Instant::now();
    tracing::subscriber::with_default(sub, || {
        // 8,192 packets of an SA gone while they waited: no ESP warning.
        fx.worker.drops[DropReason::NoSa as usize].add(8192);
        fx.m.tick(now);
        // Then 3 ESP packets with SPI 3001 from 203.0.113.2.
        fx.worker.drops[DropReason::NoSa as usize].add(3);
        fx.worker.esp_no_sa.add(3);
        fx.worker.last_no_sa.set((3001u64 << 32) | u64::from(u32::from(std::net::Ipv4Addr::new(203, 0, 113, 2))));
        fx.m.tick(now + Duration::from_secs(2));
    });
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("8192 packets dropped as no_sa since start: their SA was deleted, rekeyed or replaced while they waited"), "{log}");
    assert!(log.contains("3 ESP packets dropped as no_sa since start; one had SPI 3001 (0x00000bb9) from 203.0.113.2"), "{log}");
    assert!(!log.contains("SPI 0 "), "{log}");
}
