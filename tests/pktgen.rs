//! secgw-pktgen's generator and sink loops joined by in-memory ports, with
//! the wire between them dropping, duplicating and reordering frames on
//! purpose: the sink's counts must say exactly what was done. In ESP mode
//! the generator seals with configs/ep0.toml's SA 1001 and the sink opens
//! with configs/ep1.toml's inbound SAs (the interop of the ESP itself with
//! scapy is in tests/e2e/test_pktgen.py). No timing is asserted: rates are
//! checked with receive times handed to the sink.

use secgw::io::{mem, PktBuf};
use secgw::pktgen::build::{FlowSpec, PacketBuilder, Size};
use secgw::pktgen::gen::{self, GenConfig, GenReport};
use secgw::pktgen::payload::{Payload, FLAG_MEASURED};
use secgw::pktgen::sa::{EspRx, EspTx};
use secgw::pktgen::sink::{self, SinkConfig, SinkReport};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const FLOWS: u32 = 3;

fn generate(size: Size, queues: u16, esp: Option<&mut EspTx>) -> (GenReport, Vec<Vec<u8>>) {
    generate_flows(generate_spec(), size, queues, esp)
}

fn generate_flows(spec: &FlowSpec, size: Size, queues: u16, esp: Option<&mut EspTx>) -> (GenReport, Vec<Vec<u8>>) {
    let cfg = GenConfig {
        builder: PacketBuilder::new(*spec, size).unwrap(),
        rate_pps: 40_000,
        duration: Duration::from_millis(100),
        warmup: Duration::from_millis(25),
        drain: Duration::from_millis(10),
    };
    let (mut ports, wires): (Vec<_>, Vec<_>) = (0..queues).map(mem::pair).unzip();
    let stop = AtomicBool::new(false);
    let r = gen::run(&mut ports, &cfg, esp, &stop);
    // Queue by queue (so frames of one flow stay in order).
    (r, wires.iter().flat_map(|w| w.take_sent()).collect())
}

fn receive(frames: &[Vec<u8>], max_flows: u32, esp: Option<&mut EspRx>, gen: &GenReport) -> SinkReport {
    let (port, wire) = mem::pair(0);
    for f in frames {
        wire.inject(f);
    }
    let cfg = SinkConfig { duration: Duration::ZERO, grace: Duration::from_millis(300), max_flows, idle_sleep: Duration::ZERO };
    let stop = AtomicBool::new(false);
    let s = sink::run(&mut [port], &cfg, esp, &stop);
    assert_eq!(wire.pending(), 0, "the sink read every frame");
    s.report(Some(gen))
}

#[test]
fn plain_counts_match_the_generator_and_impairments_are_seen() {
    let (g, frames) = generate(Size::Imix, 2, None);
    assert!(g.measured_tx_packets > 100 && g.tx_packets > g.measured_tx_packets, "{g:?}");
    assert_eq!(frames.len() as u64, g.tx_packets);
    assert_eq!(g.queues, 2);
    assert_eq!(g.flows.iter().map(|f| f.tx_packets).sum::<u64>(), g.tx_packets);

    // Clean wire: nothing lost, every flow's count the generator's.
    let s = receive(&frames, 3, None, &g);
    let measured = |f: u32| g.flows[f as usize].measured_tx_packets;
    assert_eq!((s.lost, s.duplicates, s.reordered, s.flow_out_of_range), (0, 0, 0, 0));
    assert_eq!(s.flows.iter().map(|f| (f.flow, f.packets)).collect::<Vec<_>>(), vec![(0, measured(0)), (1, measured(1)), (2, measured(2))]);
    assert_eq!((s.rx_frames, s.other_frames), (g.tx_packets, 0));
    assert!(s.latency_us.samples > 0 && s.latency_us.p50 <= s.latency_us.p99 && s.latency_us.p99 <= s.latency_us.max);
    // Flow 2 beyond --max-flows 2: counted out of range, not tracked.
    let s = receive(&frames, 2, None, &g);
    assert_eq!(s.flow_out_of_range, g.flows[2].tx_packets);
    assert_eq!(s.flows.len(), 2);

    // Impaired wire: of the last 600 frames, every 50th is dropped, every
    // 70th sent twice, and pairs at every 90th swapped; the sink's counts
    // for flows 0 and 1 must match what was done to them.
    let ours = |f: &Vec<u8>| -> Option<(u32, bool)> {
        let pl = &f[14 + 20 + 8..];
        let flow = u32::from_be_bytes(pl[4..8].try_into().unwrap());
        let measured = pl[27] & 1 == 1;
        (flow < 2 && measured).then_some((flow, measured))
    };
    let start = frames.len() - 600;
    let mut out: Vec<Vec<u8>> = frames[..start].to_vec();
    let (mut dropped, mut duped) = (0u64, 0u64);
    let mut i = start;
    let mut swaps = 0u64;
    while i < frames.len() {
        let k = i - start;
        if k % 50 == 0 {
            dropped += ours(&frames[i]).is_some() as u64;
            i += 1;
            continue;
        }
        if k % 90 == 1 && i + 1 < frames.len() && (i + 1 - start) % 50 != 0 {
            // Swap i and i+1 (same flow only counts as a reorder).
            out.push(frames[i + 1].clone());
            out.push(frames[i].clone());
            let (a, b) = (ours(&frames[i]), ours(&frames[i + 1]));
            if a.is_some() && a == b {
                swaps += 1;
            }
            i += 2;
            continue;
        }
        out.push(frames[i].clone());
        if k % 70 == 0 {
            out.push(frames[i].clone());
            duped += ours(&frames[i]).is_some() as u64;
        }
        i += 1;
    }
    let s = receive(&out, 2, None, &g);
    let f01: Vec<_> = s.flows.iter().filter(|f| f.flow < 2).collect();
    assert_eq!(f01.iter().map(|f| f.lost).sum::<u64>(), dropped);
    assert_eq!(f01.iter().map(|f| f.duplicates).sum::<u64>(), duped);
    assert_eq!(f01.iter().map(|f| f.reordered).sum::<u64>(), swaps);
    assert!(dropped > 0 && duped > 0, "the impairments hit flows 0 and 1: {dropped} {duped}");
}

#[test]
fn esp_sealed_by_ep0_is_opened_by_ep1_with_nothing_lost() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut tx = EspTx::from_config(&root.join("ep0.toml"), 1001, 1).unwrap();
    // One queue: two would interleave one SA's sequence numbers across
    // queues, which the receiver's window of 64 does not absorb when the
    // queues are replayed one after the other here.
    let (g, frames) = generate(Size::Fixed(1400), 1, Some(&mut tx));
    assert!(g.esp && g.esp_errors == 0 && g.measured_tx_packets > 100, "{g:?}");
    // Outer IPv4 ESP from gw0 to gw1, sequence numbers from 1 in send order.
    for f in &frames {
        assert_eq!((&f[12..14], f[14 + 9]), (&[8u8, 0][..], 50));
        assert_eq!(&f[14 + 12..14 + 20], &[203, 0, 113, 1, 203, 0, 113, 2]);
        assert_eq!(&f[34..38], &1001u32.to_be_bytes());
    }
    assert_eq!(tx.state.seq, g.tx_packets);
    let mut rx = EspRx::from_config(&root.join("ep1.toml")).unwrap();
    let s = receive(&frames, 3, Some(&mut rx), &g);
    assert_eq!((s.esp_decrypted, s.esp_failed), (g.tx_packets, 0), "{:?}", s.esp_failures);
    assert_eq!((s.lost, s.packets), (0, g.measured_tx_packets));
    // Bytes at the sink are the ESP frames' as received.
    assert_eq!(s.bytes, frames[0].len() as u64 * s.packets);

    // A tampered frame fails the ICV and is counted, not read; a replay too.
    let mut bad = frames[frames.len() - 1].clone();
    let n = bad.len();
    bad[n - 20] ^= 1;
    let mut fresh = EspRx::from_config(&root.join("ep1.toml")).unwrap();
    let s = receive(&[bad, frames[0].clone(), frames[0].clone()], 3, Some(&mut fresh), &g);
    assert_eq!(s.esp_decrypted, 1);
    assert_eq!(s.esp_failures.get("auth_failed"), Some(&1), "{:?}", s.esp_failures);
    assert_eq!(s.esp_failures.get("replay"), Some(&1), "{:?}", s.esp_failures);
    // The wrong peer's config has no SA for SPI 1001 → no_sa.
    let mut wrong = EspRx::from_config(&root.join("ep0.toml")).unwrap();
    let s = receive(&frames[..3], 3, Some(&mut wrong), &g);
    assert_eq!(s.esp_failures.get("no_sa"), Some(&3));
}

/// Hands `frames` to `s` through [`sink::Sink::burst`] in bursts of 32.
fn burst_all(s: &mut sink::Sink, frames: &[Vec<u8>], rx: &mut EspRx) {
    let mut bufs: Vec<PktBuf> = (0..32).map(|_| PktBuf::new()).collect();
    let mut spare: Vec<PktBuf> = (0..32).map(|_| PktBuf::new()).collect();
    let mut work = sink::Work::default();
    for chunk in frames.chunks(32) {
        for (b, f) in bufs.iter_mut().zip(chunk) {
            assert!(b.copy_from(f));
        }
        s.burst(&mut bufs, chunk.len(), secgw::pktgen::now_ns(), Some(&mut *rx), &mut spare, &mut work);
        assert_eq!(spare.len(), 32, "every buffer came back");
    }
}

#[test]
fn the_decrypting_sink_drops_what_the_peers_inbound_policy_check_drops() {
    // ep1.toml admits on SA 1001 only 192.0.2.0/24 → 198.51.100.0/24 (RFC
    // 4301 §5.2); ep0.toml's SA 1001 seals whatever it is given.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut tx = EspTx::from_config(&root.join("ep0.toml"), 1001, 1).unwrap();
    let (inside, in_frames) = generate(Size::Fixed(200), 1, Some(&mut tx));
    let outside_spec = FlowSpec { dst: "203.0.113.9".parse().unwrap(), ..*generate_spec() };
    assert_eq!(tx.flows_outside_policy(&outside_spec).len(), FLOWS as usize, "ep0's own SPD would not send these in SA 1001 either");
    // Sequence numbers go on from the first stream's: no replay.
    let (outside, out_frames) = generate_flows(&outside_spec, Size::Fixed(200), 1, Some(&mut tx));
    assert!(inside.esp_errors == 0 && outside.esp_errors == 0 && outside.tx_packets > 100);

    let mut rx = EspRx::from_config(&root.join("ep1.toml")).unwrap();
    let mut s = sink::Sink::new(FLOWS);
    burst_all(&mut s, &in_frames, &mut rx);
    let r = s.report(Some(&inside));
    assert_eq!((r.esp_decrypted, r.esp_failed, r.packets, r.lost), (inside.tx_packets, 0, inside.measured_tx_packets, 0), "{:?}", r.esp_failures);

    // The second stream decrypts, but its inner packets are outside the
    // SA's policy: counted as the gateway's drop reason, not delivered.
    burst_all(&mut s, &out_frames, &mut rx);
    let r = s.report(Some(&inside));
    assert_eq!(r.esp_failures.get("inner_policy_mismatch"), Some(&outside.tx_packets), "{:?}", r.esp_failures);
    assert_eq!(r.esp_failures.len(), 1, "{:?}", r.esp_failures);
    assert_eq!((r.esp_decrypted, r.esp_failed), (inside.tx_packets, outside.tx_packets));
    assert_eq!((r.packets, r.warmup_packets, r.other_frames), (inside.measured_tx_packets, inside.tx_packets - inside.measured_tx_packets, 0));
    assert_eq!(r.rx_frames, inside.tx_packets + outside.tx_packets);

    // An inbound SA that no inbound policy names admits nothing (as in the
    // gateway): ep1.toml without its policies.
    let text = std::fs::read_to_string(root.join("ep1.toml")).unwrap();
    let cut = text.find("[[policy]]").unwrap();
    let rest = &text[cut..];
    let routes = &rest[rest.find("[[route]]").unwrap()..];
    let dir = std::env::temp_dir().join(format!("pktgen-nopolicy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bare = dir.join("ep1.toml");
    std::fs::write(&bare, format!("{}{routes}", &text[..cut])).unwrap();
    let mut rx = EspRx::from_config(&bare).unwrap();
    let mut s = sink::Sink::new(FLOWS);
    burst_all(&mut s, &in_frames[..40], &mut rx);
    let r = s.report(None);
    assert_eq!((r.esp_decrypted, r.esp_failures.get("inner_policy_mismatch"), r.packets), (0, Some(&40), 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn esp_config_errors_are_reported() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let e = EspTx::from_config(&root.join("ep0.toml"), 1002, 1).err().unwrap().to_string();
    assert!(e.contains("SPI 1002 is an inbound SA") && e.contains("its outbound SAs: 1001"), "{e}");
    let e = EspTx::from_config(&root.join("ep0.toml"), 7, 1).err().unwrap().to_string();
    assert!(e.contains("no SA with SPI 7; its outbound SAs: 1001"), "{e}");
    // The config's own errors name the file once.
    let e = EspTx::from_config(&root.join("nope.toml"), 1001, 1).err().unwrap().to_string();
    assert_eq!(e.matches("nope.toml").count(), 1, "{e}");
    assert!(EspTx::from_config(&root.join("ep0.toml"), 1001, 0).is_err(), "sequence numbers start at 1");
    assert!(EspTx::from_config(&root.join("nope.toml"), 1001, 1).is_err());
}

#[test]
fn nothing_received_and_clock_oddities_are_reported_honestly() {
    let (g, frames) = generate(Size::Fixed(64), 1, None);
    // Nothing arrived: with the generator's count, 100 % lost; without it,
    // no loss figure; never a latency of 0 µs.
    let s = receive(&[], 3, None, &g);
    assert_eq!((s.lost, s.loss_pct), (g.measured_tx_packets, Some(100.0)));
    assert_eq!((s.latency_us.samples, s.latency_us.p50, s.latency_us.p99, s.latency_us.max), (0, None, None, None));
    let (port, _wire) = mem::pair(0);
    let cfg = SinkConfig { duration: Duration::ZERO, grace: Duration::from_millis(20), max_flows: 3, idle_sleep: Duration::ZERO };
    let empty = sink::run(&mut [port], &cfg, None, &AtomicBool::new(false)).report(None);
    assert_eq!((empty.expected, empty.loss_pct, empty.latency_us.max), (0, None, None));
    let json = serde_json::to_value(&empty).unwrap();
    assert!(json["loss_pct"].is_null() && json["latency_us"]["p50"].is_null(), "{json}");
    // Text: "n/a" for the missing loss figure, never "n/a%"; a known one
    // with its percent sign.
    let text = empty.text();
    assert!(text.contains("lost 0 (n/a, from sequence numbers)") && !text.contains("n/a%"), "{text}");
    assert!(s.text().contains(&format!("lost {} (100.0000%, from generator)", g.measured_tx_packets)), "{}", s.text());

    // A measured packet stamped in the future (another host's clock): counted
    // apart, not timed as 0; one stamped 5 s ago: a real latency.
    let b = PacketBuilder::new(*generate_spec(), Size::Fixed(64)).unwrap();
    let mut buf = secgw::io::PktBuf::new();
    let mut odd = Vec::new();
    let ago = secgw::pktgen::now_ns() - 5_000_000_000;
    for (seq, tx_ns) in [(0, u64::MAX - 1), (1, ago), (2, u64::MAX)] {
        b.build(&mut buf, seq, &Payload { flow: 0, seq, tx_ns, flags: FLAG_MEASURED });
        odd.push(buf.frame().to_vec());
    }
    let s = receive(&odd, 3, None, &GenReport { measured_tx_packets: 3, flows: vec![gen::FlowTx { flow: 0, tx_packets: 3, measured_tx_packets: 3 }], ..Default::default() });
    assert_eq!((s.packets, s.lost, s.future_timestamps, s.flows[0].future_timestamps), (3, 0, 2, 2));
    assert_eq!(s.latency_us.samples, 1);
    assert!(s.latency_us.max.unwrap() >= 5e6 && s.latency_us.p50 == s.latency_us.max, "{:?}", s.latency_us);
    assert!(frames.len() > 10);
}

/// The flows every test sends: 192.0.2.10:40000+i → 198.51.100.10:5001.
fn generate_spec() -> &'static FlowSpec {
    static SPEC: std::sync::OnceLock<FlowSpec> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| FlowSpec {
        src_mac: [2, 0, 0, 0, 0x0a, 1],
        dst_mac: [2, 0, 0, 0, 0, 1],
        src: "192.0.2.10".parse().unwrap(),
        dst: "198.51.100.10".parse().unwrap(),
        sport: 40000,
        dport: 5001,
        flows: FLOWS,
    })
}

#[test]
fn flows_the_esp_configs_policies_would_not_protect_with_the_sa_are_named() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let spec = |dst: &str, flows| FlowSpec { dst: dst.parse().unwrap(), flows, ..*generate_spec() };
    // ep0: 192.0.2.0/24 → 198.51.100.0/24, any protocol and port, in SA 1001.
    let ep0 = EspTx::from_config(&root.join("ep0.toml"), 1001, 1).unwrap();
    assert_eq!(ep0.flows_outside_policy(&spec("198.51.100.10", 3)), vec![]);
    assert_eq!(ep0.flows_outside_policy(&spec("203.0.113.9", 2)), vec![(0, "matched by no policy".into()), (1, "matched by no policy".into())]);
    // bench/gw0: source port 40000 in SA 1001, the rest in SA 1003.
    let gw0 = EspTx::from_config(&root.join("bench/gw0.toml"), 1001, 1).unwrap();
    assert_eq!(gw0.flows_outside_policy(&spec("198.51.100.10", 1)), vec![]);
    assert_eq!(gw0.flows_outside_policy(&spec("198.51.100.10", 2)), vec![(1, "protected by SA 1003".into())]);
}

/// Runs the secgw-pktgen binary; returns (success, stderr).
fn cli(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_secgw-pktgen")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn command_line_mistakes_are_refused_up_front_with_the_option_named() {
    // `gen` with the given options, the rest defaulted.
    let gen = |extra: &[&str]| {
        let mut a = vec!["gen", "--iface", "no-such-if0", "--dst-mac", "02:00:00:00:00:01", "--src", "192.0.2.10", "--dst", "198.51.100.10", "--size", "64", "--duration", "1"];
        if !extra.contains(&"--src-mac") {
            a.extend_from_slice(&["--src-mac", "02:00:00:00:0a:01"]);
        }
        a.extend_from_slice(extra);
        cli(&a)
    };
    let (ok, e) = gen(&["--ring-size", "1000"]);
    assert!(!ok && e.contains("--ring-size") && e.contains("power of two"), "{e}");
    let (ok, e) = gen(&["--src-mac", "ff:ff:ff:ff:ff:ff"]);
    assert!(!ok && e.contains("--src-mac") && e.contains("broadcast address cannot be a source MAC"), "{e}");
    let (ok, e) = gen(&["--src-mac", "01:00:5e:00:00:01"]);
    assert!(!ok && e.contains("multicast address cannot be a source MAC"), "{e}");
    let (ok, e) = gen(&["--src-mac", "00:00:00:00:00:00"]);
    assert!(!ok && e.contains("--src-mac") && e.contains("all-zero address cannot be a source MAC"), "{e}");
    let (ok, e) = cli(&["forward", "--in", "no-such-if0", "--out", "no-such-if1", "--dst-mac", "02:00:00:00:00:01", "--src-mac", "00:00:00:00:00:00"]);
    assert!(!ok && e.contains("--src-mac") && e.contains("all-zero address"), "{e}");
    let (ok, e) = gen(&["--json", "/no-such-dir/gen.json"]);
    assert!(!ok && e.contains("--json /no-such-dir/gen.json: directory /no-such-dir does not exist"), "{e}");
    // Hex SPIs as in the config; an inbound SA is called one.
    let (ok, e) = gen(&["--esp-config", "configs/ep0.toml", "--esp-spi", "0x3ea"]);
    assert!(!ok && e.contains("SPI 1002 is an inbound SA") && e.contains("outbound SAs: 1001"), "{e}");
    // 0x3e9 = 1001 is accepted: the run gets as far as the missing interface.
    let (ok, e) = gen(&["--esp-config", "configs/ep0.toml", "--esp-spi", "0x3e9"]);
    assert!(!ok && e.contains("\"no-such-if0\" not found") && !e.contains("esp-spi"), "{e}");
    let (ok, e) = cli(&["forward", "--in", "no-such-if0", "--out", "no-such-if0", "--dst-mac", "02:00:00:00:00:01"]);
    assert!(!ok && e.contains("are the same interface"), "{e}");
    // The sink tracks flows 0..N: N = 0 would track none.
    let (ok, e) = cli(&["sink", "--iface", "no-such-if0", "--duration", "1", "--max-flows", "0"]);
    assert!(!ok && e.contains("--max-flows") && e.contains("0 is not in 1.."), "{e}");
    // A core that is not there: named with the cores that are, before the
    // interface is looked up.
    let (ok, e) = gen(&["--core", "999"]);
    assert!(!ok && e.contains("--core 999: cannot pin to that core (cores this process may run on: 0") && !e.contains("no-such-if0"), "{e}");
    let (ok, e) = cli(&["report", "--gen", "x.json", "--sink", "y.json", "--json", "/no-such-dir/r.json"]);
    assert!(!ok && e.contains("directory /no-such-dir does not exist"), "{e}");
    // --json naming an existing directory: refused before anything runs
    // (before the interface is even looked up), by every command.
    let is_dir = "--json configs: is a directory";
    let (ok, e) = gen(&["--json", "configs"]);
    assert!(!ok && e.contains(is_dir) && !e.contains("no-such-if0"), "{e}");
    let (ok, e) = cli(&["sink", "--iface", "no-such-if0", "--duration", "1", "--json", "configs"]);
    assert!(!ok && e.contains(is_dir) && !e.contains("no-such-if0"), "{e}");
    let (ok, e) = cli(&["forward", "--in", "no-such-if0", "--out", "no-such-if1", "--dst-mac", "02:00:00:00:00:01", "--src-mac", "02:00:00:00:00:02", "--json", "configs"]);
    assert!(!ok && e.contains(is_dir) && !e.contains("no-such-if0"), "{e}");
    let (ok, e) = cli(&["report", "--gen", "x.json", "--sink", "y.json", "--json", "configs/"]);
    assert!(!ok && e.contains("--json configs/: is a directory") && !e.contains("x.json"), "{e}");

    // report with the generator's and the sink's JSON swapped: said so.
    let dir = std::env::temp_dir().join(format!("pktgen-swapped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (g, s) = (dir.join("gen.json"), dir.join("sink.json"));
    std::fs::write(&g, serde_json::to_string(&GenReport::default()).unwrap()).unwrap();
    std::fs::write(&s, serde_json::to_string(&SinkReport::default()).unwrap()).unwrap();
    let (g, s) = (g.to_str().unwrap(), s.to_str().unwrap());
    let (ok, e) = cli(&["report", "--gen", s, "--sink", g]);
    assert!(!ok && e.contains(&format!("--gen {s} is a sink's report")) && e.contains("--gen and --sink swapped?") && !e.contains("missing field"), "{e}");
    let (ok, e) = cli(&["report", "--gen", g, "--sink", s]);
    assert!(ok, "{e}");
    // A --json that is a symlink is written through (the link stays a
    // link, its target gets the report), never replaced by a file (nor
    // would `/dev/null` be); one that cannot be written is refused at
    // start.
    let (link, target) = (dir.join("link.json"), dir.join("target.json"));
    std::fs::write(&target, "").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (ok, e) = cli(&["report", "--gen", g, "--sink", s, "--json", link.to_str().unwrap()]);
    assert!(ok, "{e}");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
    assert!(std::fs::read_to_string(&target).unwrap().contains("\"loss_pct\""), "the target got the report");
    let (ok, e) = cli(&["report", "--gen", g, "--sink", s, "--json", "/proc/r.json"]);
    assert!(!ok && e.contains("--json /proc/r.json: cannot write /proc/r.json.tmp"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn numbers_that_would_hang_abort_or_send_nothing_are_refused_naming_the_option() {
    // Each of these used to be accepted (and then sleep for ages deaf to
    // SIGTERM, abort allocating flow state, or send nothing and exit 0);
    // now refused before anything runs (the interface does not exist, so a
    // run would fail on it instead: the message must name the option).
    let sink = |extra: &[&str]| {
        let mut a = vec!["sink", "--iface", "no-such-if0", "--duration", "1"];
        a.extend_from_slice(extra);
        cli(&a)
    };
    let gen = |extra: &[&str]| {
        let mut a = vec!["gen", "--iface", "no-such-if0", "--src-mac", "02:00:00:00:0a:01", "--dst-mac", "02:00:00:00:00:01", "--src", "192.0.2.10", "--dst", "198.51.100.10", "--size", "64"];
        a.extend_from_slice(extra);
        cli(&a)
    };
    let refused = |(ok, e): (bool, String), opt: &str, range: &str| {
        assert!(!ok && e.contains(&format!("'{opt} <")) && e.contains(range) && !e.contains("no-such-if0"), "{opt}: {e}");
    };
    refused(sink(&["--idle-sleep-us", "4294967295"]), "--idle-sleep-us", "is not in 0..=10000");
    refused(sink(&["--gen-json-wait", "1e300"]), "--gen-json-wait", "must be 0..=3600 seconds");
    refused(sink(&["--max-flows", "4294967295"]), "--max-flows", "is not in 1..=65536");
    refused(sink(&["--grace-ms", "18446744073709551615"]), "--grace-ms", "is not in 0..=60000");
    refused(cli(&["forward", "--in", "no-such-if0", "--out", "no-such-if1", "--dst-mac", "02:00:00:00:00:01", "--idle-sleep-us", "99999999"]), "--idle-sleep-us", "is not in 0..=10000");
    refused(gen(&["--duration", "1e-9"]), "--duration", "must be 0.001..=604800 seconds (1 ms to 7 days");
    refused(gen(&["--rate", "0.5"]), "--rate", "packets per second, a whole number 0..=18446744073709551615 (0 = as fast as possible)");
    refused(gen(&["--duration", "1", "--warmup", "1e12"]), "--warmup", "must be 0..=3600 seconds");
    refused(gen(&["--duration", "1", "--flows", "100000"]), "--flows", "is not in 1..=65536");
    // A paced run with no packet due after the warm-up.
    let (ok, e) = gen(&["--duration", "0.5", "--rate", "1"]);
    assert!(!ok && e.contains("--rate 1 --duration 0.5: no packet is due in the measured part") && !e.contains("no-such-if0"), "{e}");
    // Within range: the run gets as far as the missing interface.
    let (ok, e) = gen(&["--duration", "0.001", "--warmup", "0", "--rate", "1000"]);
    assert!(!ok && e.contains("\"no-such-if0\" not found"), "{e}");
}

/// `text` (a config) with SA `spi` switched to transport mode (its
/// `tunnel_src`/`tunnel_dst` lines dropped), written to `dir/name`.
fn with_transport_sa(dir: &Path, name: &str, spi: u32) -> std::path::PathBuf {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs").join(name)).unwrap();
    let head = format!("spi = {spi}\n");
    let start = text.find(&head).unwrap();
    let end = text[start..].find("[[").map_or(text.len(), |e| start + e);
    let block: String = text[start..end].replace("mode = \"tunnel\"", "mode = \"transport\"").split_inclusive('\n').filter(|l| !l.starts_with("tunnel_")).collect();
    let p = dir.join(name);
    std::fs::write(&p, format!("{}{block}{}", &text[..start], &text[end..])).unwrap();
    p
}

/// The sink opens what the peer gateway opens, and refuses what it
/// refuses: a transport-mode SA is finished as transport mode (its inner
/// packet read, not refused as `bad_next_header`), and a tunnel SA takes
/// only packets from its `tunnel_src` (from any other source: `no_sa`,
/// as in the gateway, even with the right key).
#[test]
fn the_decrypting_sink_opens_transport_sas_and_checks_the_tunnel_source() {
    let dir = std::env::temp_dir().join(format!("pktgen-modes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut tx = EspTx::from_config(&with_transport_sa(&dir, "ep0.toml", 1001), 1001, 1).unwrap();
    let (g, frames) = generate(Size::Fixed(200), 1, Some(&mut tx));
    // Transport mode: the generator's own addresses outside, ESP after them.
    assert_eq!((&frames[0][14 + 12..14 + 20], frames[0][14 + 9]), (&[192, 0, 2, 10, 198, 51, 100, 10][..], 50));
    let mut rx = EspRx::from_config(&with_transport_sa(&dir, "ep1.toml", 1001)).unwrap();
    let s = receive(&frames, FLOWS, Some(&mut rx), &g);
    assert_eq!((s.esp_decrypted, s.esp_failed, s.lost, s.packets), (g.tx_packets, 0, 0, g.measured_tx_packets), "{:?}", s.esp_failures);
    std::fs::remove_dir_all(&dir).unwrap();

    // Tunnel mode, SA 1001 of ep1.toml (tunnel_src 203.0.113.1): the same
    // ESP from 203.0.113.4 (outer header checksum fixed) is not its.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut tx = EspTx::from_config(&root.join("ep0.toml"), 1001, 1).unwrap();
    let (g, mut frames) = generate(Size::Fixed(200), 1, Some(&mut tx));
    for f in &mut frames {
        let ip = &mut f[14..34];
        ip[12..16].copy_from_slice(&[203, 0, 113, 4]);
        ip[10..12].fill(0);
        let h = etherparse::Ipv4HeaderSlice::from_slice(ip).unwrap().to_header();
        ip[10..12].copy_from_slice(&h.calc_header_checksum().to_be_bytes());
    }
    let mut rx = EspRx::from_config(&root.join("ep1.toml")).unwrap();
    let s = receive(&frames, FLOWS, Some(&mut rx), &g);
    assert_eq!((s.esp_decrypted, s.esp_failures.get("no_sa")), (0, Some(&g.tx_packets)), "{:?}", s.esp_failures);
}

/// `configs/<name>` with SA `spi` given `udp_encap = true` and `extra`
/// lines, written to `dir/name`.
fn with_udp_encap(dir: &Path, name: &str, spi: u32, extra: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs").join(name)).unwrap();
    let head = format!("spi = {spi}\n");
    assert_eq!(text.matches(&head).count(), 1);
    let p = dir.join(name);
    std::fs::write(&p, text.replacen(&head, &format!("{head}udp_encap = true\n{extra}"), 1)).unwrap();
    p
}

/// ESP in UDP (RFC 3948): the sink opens what the generator sends for a
/// `udp_encap` SA, tunnel and transport mode (helper-101: it counted every
/// such frame in `other_frames` and reported 100 % loss); ESP in UDP for
/// an SA without `udp_encap`, or plain ESP for one with, is
/// `encap_mismatch`, as in the gateway; UDP to another port stays other
/// traffic.
#[test]
fn the_decrypting_sink_opens_esp_in_udp() {
    let dir = std::env::temp_dir().join(format!("pktgen-natt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut tx = EspTx::from_config(&with_udp_encap(&dir, "ep0.toml", 1001, ""), 1001, 1).unwrap();
    let (g, frames) = generate(Size::Fixed(300), 1, Some(&mut tx));
    // IPv4 + UDP 4500 → 4500 + SPI 1001.
    assert_eq!(frames[0][14 + 9], 17);
    assert_eq!(&frames[0][34..38], &[0x11, 0x94, 0x11, 0x94]);
    assert_eq!(&frames[0][42..46], &1001u32.to_be_bytes());
    let mut rx = EspRx::from_config(&with_udp_encap(&dir, "ep1.toml", 1001, "")).unwrap();
    let s = receive(&frames, FLOWS, Some(&mut rx), &g);
    assert_eq!((s.esp_decrypted, s.esp_failed, s.lost, s.packets), (g.tx_packets, 0, 0, g.measured_tx_packets), "{:?}", s.esp_failures);

    // The same frames to a sink whose SA 1001 is plain ESP: its config
    // names no NAT-T port, so they are other traffic; with another SA
    // on port 4500 they are ESP in UDP for an SA without it.
    let mut plain = EspRx::from_config(&root.join("ep1.toml")).unwrap();
    let s = receive(&frames, FLOWS, Some(&mut plain), &g);
    assert_eq!((s.esp_decrypted, s.esp_failed, s.packets), (0, 0, 0));
    let mut other = EspRx::from_config(&with_udp_encap(&dir, "ep1.toml", 1003, "")).unwrap();
    let s = receive(&frames, FLOWS, Some(&mut other), &g);
    assert_eq!(s.esp_failures.get("encap_mismatch"), Some(&g.tx_packets), "{:?}", s.esp_failures);
    // Plain ESP for an SA with udp_encap: encap_mismatch.
    let mut tx = EspTx::from_config(&root.join("ep0.toml"), 1001, 1).unwrap();
    let (g2, plain_frames) = generate(Size::Fixed(300), 1, Some(&mut tx));
    let mut rx = EspRx::from_config(&with_udp_encap(&dir, "ep1.toml", 1001, "")).unwrap();
    let s = receive(&plain_frames, FLOWS, Some(&mut rx), &g2);
    assert_eq!(s.esp_failures.get("encap_mismatch"), Some(&g2.tx_packets), "{:?}", s.esp_failures);

    // Transport mode with its own port.
    let t0 = with_transport_sa(&dir, "ep0.toml", 1001);
    let t1 = with_transport_sa(&dir, "ep1.toml", 1001);
    for p in [&t0, &t1] {
        let text = std::fs::read_to_string(p).unwrap();
        std::fs::write(p, text.replacen("spi = 1001\n", "spi = 1001\nudp_encap = true\nudp_sport = 14500\nudp_dport = 14500\n", 1)).unwrap();
    }
    let mut tx = EspTx::from_config(&t0, 1001, 1).unwrap();
    let (g, frames) = generate(Size::Fixed(200), 1, Some(&mut tx));
    assert_eq!(&frames[0][34..38], &[0x38, 0xa4, 0x38, 0xa4], "UDP 14500 → 14500");
    let mut rx = EspRx::from_config(&t1).unwrap();
    let s = receive(&frames, FLOWS, Some(&mut rx), &g);
    assert_eq!((s.esp_decrypted, s.esp_failed, s.lost, s.packets), (g.tx_packets, 0, 0, g.measured_tx_packets), "{:?}", s.esp_failures);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sink tracking `max_flows` flows, handed `n` measured 64-byte packets
/// of flows 0..flows in turn, packet i received at 1 s + i × `gap_ns`
/// (`Sink::frame` with the time given: no clock involved); with the
/// generator's report of the same packets.
fn paced(n: u64, flows: u32, max_flows: u32, gap_ns: u64) -> (sink::Sink, GenReport) {
    let b = PacketBuilder::new(FlowSpec { flows, ..*generate_spec() }, Size::Fixed(64)).unwrap();
    let mut s = sink::Sink::new(max_flows);
    let mut buf = PktBuf::new();
    let mut gen = GenReport { flows: (0..flows).map(|flow| gen::FlowTx { flow, ..Default::default() }).collect(), ..Default::default() };
    for i in 0..n {
        let (flow, seq, now) = ((i % u64::from(flows)) as u32, i / u64::from(flows), 1_000_000_000 + i * gap_ns);
        assert_eq!(b.build(&mut buf, i, &Payload { flow, seq, tx_ns: now - 1000, flags: FLAG_MEASURED }), 78);
        s.frame(buf.frame(), now);
        gen.measured_tx_packets += 1;
        gen.measured_tx_bytes += 78;
        gen.flows[flow as usize].tx_packets += 1;
        gen.flows[flow as usize].measured_tx_packets += 1;
    }
    (s, gen)
}

#[test]
fn packets_of_flows_beyond_max_flows_count_in_the_rates_as_in_rx() {
    // helper-84 found it: gen --flows 4 --rate 4000 --duration 1 into a
    // sink with --max-flows 2; report said rx 4000, lost 0, but Mpps and
    // Gbit/s from the 2000 packets of the tracked flows only (half).
    let (s, g) = paced(4000, 4, 2, 250_000);
    let r = s.report(Some(&g));
    assert_eq!((r.packets, r.flow_out_of_range_measured, r.flow_out_of_range_measured_bytes, r.lost), (2000, 2000, 2000 * 78, 0));
    // 3999 intervals of 250 µs: the first to the last of all 4000.
    assert!((r.measured_s - 0.99975).abs() < 1e-9, "{}", r.measured_s);
    assert!((r.rate_pps.unwrap() - 4000.0).abs() < 1e-6, "{:?}", r.rate_pps);
    assert!((r.gbps.unwrap() - 4000.0 * 78.0 * 8.0 / 1e9).abs() < 1e-12, "{:?}", r.gbps);
    assert!(r.text().starts_with("sink: 2000 measured packets (+2000 of flows beyond --max-flows) in 1.000 s: 4000 pps, 0.0025 Gbit/s;"), "{}", r.text());
    // Through the JSON files `report` reads.
    let r: SinkReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    let c = secgw::pktgen::report::combine(&g, &r);
    assert_eq!((c.tx_packets, c.rx_packets, c.lost), (4000, 4000, 0));
    assert!((c.mpps.unwrap() - 0.004).abs() < 1e-12, "{:?}", c.mpps);
    assert!((c.gbps.unwrap() - 4000.0 * 78.0 * 8.0 / 1e9).abs() < 1e-12, "{:?}", c.gbps);
    // Tracking all four flows gives the same figures.
    let (all, _) = paced(4000, 4, 4, 250_000);
    let a = all.report(Some(&g));
    assert_eq!((a.packets, a.measured_s, a.rate_pps, a.gbps), (4000, r.measured_s, r.rate_pps, r.gbps));
    assert_eq!(secgw::pktgen::report::table_row(&secgw::pktgen::report::combine(&g, &a)), secgw::pktgen::report::table_row(&c));
}

#[test]
fn the_rate_counts_the_intervals_between_arrivals_and_needs_two_packets() {
    // gen --rate 2 --duration 1 --warmup 0: 2 packets 0.5 s apart are
    // 2 pps (one interval of 0.5 s), not 4.
    let (s, g) = paced(2, 1, 1, 500_000_000);
    let r = s.report(Some(&g));
    assert_eq!((r.packets, r.measured_s, r.rate_pps), (2, 0.5, Some(2.0)));
    assert!((r.gbps.unwrap() - 2.0 * 78.0 * 8.0 / 1e9).abs() < 1e-15, "{:?}", r.gbps);
    assert!(r.text().contains("2 measured packets in 0.500 s: 2 pps, 0.0000 Gbit/s;"), "{}", r.text());
    let c = secgw::pktgen::report::combine(&g, &r);
    assert_eq!(c.mpps, Some(2e-6));
    // 1000 packets 1 ms apart: 1000 pps.
    let (s, g) = paced(1000, 1, 1, 1_000_000);
    assert!((s.report(Some(&g)).rate_pps.unwrap() - 1000.0).abs() < 1e-9);
    // One packet, or several in one burst (one receive time): no rate,
    // JSON null and "rate n/a", in the sink and in report.
    for (n, gap) in [(1, 1_000_000), (5, 0)] {
        let (s, g) = paced(n, 1, 1, gap);
        let r = s.report(Some(&g));
        assert_eq!((r.packets, r.lost, r.rate_pps, r.gbps), (n, 0, None, None), "{n} packets {gap} ns apart");
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["rate_pps"].is_null() && json["gbps"].is_null(), "{json}");
        assert!(r.text().contains(&format!("{n} measured packets in 0.000 s: rate n/a; lost 0")), "{}", r.text());
        assert_eq!(serde_json::from_value::<SinkReport>(json).unwrap(), r);
        let c = secgw::pktgen::report::combine(&g, &r);
        assert_eq!((c.rx_packets, c.mpps, c.gbps), (n, None, None));
        assert!(secgw::pktgen::report::table_row(&c).contains("n/a"));
    }
    // A sink report of an older version (a number) still reads.
    let mut old = serde_json::to_value(paced(2, 1, 1, 1_000_000).0.report(None)).unwrap();
    old["rate_pps"] = serde_json::json!(3.999);
    old.as_object_mut().unwrap().remove("flow_out_of_range_measured_bytes");
    assert_eq!(serde_json::from_value::<SinkReport>(old).unwrap().rate_pps, Some(3.999));
}

/// testbed/bench_table.py's `table` on rows written here: a ratio to (d)
/// only where both the row and the (d) row of its size and workers found a
/// passing rate (a failed search leaves the lowest probe's figures, which
/// are no saturation rate), and the table says which rows have none and why.
#[test]
fn bench_table_gives_no_ratio_against_a_search_that_found_no_passing_rate() {
    let dir = std::env::temp_dir().join(format!("secgw-bench-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let row = |topo: &str, size: u32, sat: u64, mpps: f64| {
        format!(
            r#"{{"topology":"{topo}","size":{size},"workers":1,"backend":{b},"saturation_pps":{sat},"upper_pps":900000,"mpps":{mpps},"gbps":0.1,"loss_pct":0.0,"lost":0,"latency_rate_pps":1000,"latency_loss_pct":0.0,"p50_us":10.0,"p99_us":20.0,"max_us":30.0}}"#,
            b = if topo == "d" { "null".to_string() } else { "\"software\"".to_string() }
        )
    };
    // 64 B: (d) found no passing rate (its lowest probe got 0.5 Mpps);
    // 512 B: both passed; 1420 B: (d) passed, (a) did not.
    let rows = [row("d", 64, 0, 0.5), row("a", 64, 100_000, 0.1), row("d", 512, 400_000, 0.4), row("a", 512, 200_000, 0.2),
        row("d", 1420, 300_000, 0.3), row("a", 1420, 0, 0.25)];
    let rows_path = dir.join("rows.jsonl");
    std::fs::write(&rows_path, rows.join("\n") + "\n").unwrap();
    let json_path = dir.join("bench.json");
    let out = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/bench_table.py"))
        .args(["table", "--rows"]).arg(&rows_path).arg("--json").arg(&json_path)
        .output().expect("python3 runs testbed/bench_table.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let data: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let ratios: Vec<Option<f64>> = data["rows"].as_array().unwrap().iter().map(|r| r["ratio_d"].as_f64()).collect();
    assert_eq!(ratios, [None, None, Some(1.0), Some(0.5), Some(1.0), None], "{text}");
    assert!(text.contains("No ratio to (d) for a-64-w1-software: the (d) row of its size and workers found no passing rate; \
                           a-1420-w1-software: its own search found no passing rate."), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}
