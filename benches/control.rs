//! Control-plane rate (issue 5): SAs installed and rekeyed per second
//! through the control socket of a real gateway, and resident memory per SA.
//!
//! `cargo bench --bench control` (root: it builds the testbed's network
//! namespaces with `testbed/lib.sh topo_up`, prefix `$SECGW_NS_PREFIX`,
//! default `ctlbench-`) starts `secgw run` on `configs/ep0-2w.toml` (two
//! workers on the testbed's veths, so each worker adopts every snapshot as
//! in production), then on one connection pipelines
//! - `CTLBENCH_SAS` (default 100,000) `sa.add` requests, one AES-128-GCM SA
//!   each, outbound and inbound alternately (with `CTLBENCH_POLICIES=1` each
//!   with a policy of its own, a /32 selector);
//! - `CTLBENCH_REKEYS` (default 10,000) `sa.rekey` requests of the first SAs;
//!
//! and prints the rates (requests answered `ok` per second of wall time from
//! the first byte written to the last response read) and VmRSS of the
//! gateway before and after the adds (`/proc/PID/status`). "Per SA beyond
//! key schedules" subtracts [`secgw::crypto::Session::key_schedule_bytes`]
//! of an AES-128-GCM session (the boxed expanded key schedule).
//!
//! Every response must be `ok`; any error fails the bench (exit status 1).

use secgw::config::model::Algorithm;
use secgw::crypto::soft::SoftDevice;
use secgw::crypto::{CipherDirection, CryptoDevice, SymXform};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SPI_BASE: u32 = 100_000;
const NEW_SPI_BASE: u32 = 1_000_000;

fn env_num(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn lib_sh(prefix: &str, what: &str) {
    let st = Command::new("bash")
        .arg("-c")
        .arg(format!("source {ROOT}/testbed/lib.sh && {what}"))
        .env("SECGW_NS_PREFIX", prefix)
        .status()
        .expect("bash");
    assert!(st.success(), "testbed/lib.sh {what} failed");
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value")
}

/// Key material for SA `i` (20 bytes: AES-128 key ‖ salt), in hex: its
/// own for each (`i`, `gen`), as the gateway requires of AES-GCM SAs.
fn key_hex(i: u32, gen: u8) -> String {
    let mut k = [0u8; 20];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k[4] = gen;
    for (b, x) in k.iter_mut().enumerate().skip(5) {
        *x = (i.wrapping_mul(31).wrapping_add(b as u32 * 7) as u8) ^ gen;
    }
    hex::encode(k)
}

fn add_request(i: u32, policies: bool) -> Value {
    let outbound = i.is_multiple_of(2);
    let spi = SPI_BASE + i;
    let (dir, src, dst) = if outbound { ("outbound", "203.0.113.1", "203.0.113.2") } else { ("inbound", "203.0.113.2", "203.0.113.1") };
    let mut toml = format!(
        "[[sa]]\nspi = {spi}\ndirection = \"{dir}\"\nalgorithm = \"aes-128-gcm\"\nkey = \"{}\"\ntunnel_src = \"{src}\"\ntunnel_dst = \"{dst}\"\n",
        key_hex(i, 0)
    );
    if policies {
        let host = format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
        let (ps, pd) = if outbound { ("192.0.2.0/24".to_string(), format!("{host}/32")) } else { (format!("{host}/32"), "192.0.2.0/24".to_string()) };
        toml.push_str(&format!("[[policy]]\ndirection = \"{dir}\"\nsrc = \"{ps}\"\ndst = \"{pd}\"\npriority = 100\naction = \"protect {spi}\"\n"));
    }
    json!({"v": 1, "id": i, "cmd": "sa.add", "args": {"toml": toml}})
}

fn rekey_request(i: u32) -> Value {
    let dir = if i.is_multiple_of(2) { "outbound" } else { "inbound" };
    json!({"v": 1, "id": i, "cmd": "sa.rekey", "args": {"spi": SPI_BASE + i, "direction": dir, "new_spi": NEW_SPI_BASE + i, "key": key_hex(i, 0x5a)}})
}

/// Writes every request on one connection from a second thread while this
/// one reads the responses; returns the seconds from the first write to the
/// last response. Panics on a response that is not `ok`.
fn pipeline(sock: &Path, reqs: Vec<Value>) -> f64 {
    let n = reqs.len();
    let mut lines = Vec::with_capacity(n * 300);
    for r in &reqs {
        serde_json::to_writer(&mut lines, r).expect("json");
        lines.push(b'\n');
    }
    let stream = UnixStream::connect(sock).expect("connect to the control socket");
    let mut w = stream.try_clone().expect("clone");
    let t0 = Instant::now();
    let writer = std::thread::spawn(move || w.write_all(&lines).expect("write requests"));
    let mut rd = BufReader::with_capacity(1 << 20, stream);
    let mut line = String::new();
    for k in 0..n {
        line.clear();
        let got = rd.read_line(&mut line).expect("read response");
        assert!(got > 0, "connection closed after {k} of {n} responses");
        if !line.contains("\"ok\":true") {
            panic!("request {k}: {line}");
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    writer.join().expect("writer");
    secs
}

struct Gateway {
    child: Child,
    prefix: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-INT").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
        lib_sh(&self.prefix, "topo_down");
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let nsa = env_num("CTLBENCH_SAS", 100_000);
    let nrekey = env_num("CTLBENCH_REKEYS", 10_000).min(nsa);
    let policies = std::env::var("CTLBENCH_POLICIES").is_ok_and(|v| v == "1");
    let prefix = std::env::var("SECGW_NS_PREFIX").unwrap_or_else(|_| "ctlbench-".into());
    let bin = std::env::var("SECGW_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_secgw").into());
    let dir = PathBuf::from(format!("/tmp/secgw-ctlbench-{prefix}"));
    std::fs::create_dir_all(&dir).expect("work dir");
    let sock = dir.join("gw0.sock");
    let cfg = dir.join("gw0.toml");
    let base = std::fs::read_to_string(format!("{ROOT}/configs/ep0-2w.toml")).expect("configs/ep0-2w.toml");
    std::fs::write(&cfg, format!("{base}\n[control]\nsocket = \"{}\"\n", sock.display())).expect("config");

    let key_schedule = {
        let dev = SoftDevice::new(1);
        let x = SymXform { algorithm: Algorithm::Aes128Gcm, direction: CipherDirection::Encrypt, key: vec![7; 16], salt: [1; 4], icv_len: 16, auth_key: Vec::new() };
        dev.session_create(&x).expect("session").key_schedule_bytes()
    };

    lib_sh(&prefix, "topo_up");
    let log = dir.join("stderr.log");
    let child = Command::new("ip")
        .args(["netns", "exec", &format!("{prefix}gw0"), &bin, "run", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start secgw");
    let gw = Gateway { child, prefix: prefix.clone() };
    let pid = gw.child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("ready") {
        assert!(Instant::now() < deadline, "secgw not ready: {}", std::fs::read_to_string(&log).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let rss0 = rss_kib(pid);

    let t = pipeline(&sock, (0..nsa).map(|i| add_request(i, policies)).collect());
    std::thread::sleep(Duration::from_millis(500));
    let rss1 = rss_kib(pid);
    let per_sa = (rss1.saturating_sub(rss0) * 1024) as f64 / nsa as f64;
    println!("control/sa_add: {nsa} SAs{} in {t:.3} s = {:.0} SAs/s", if policies { " (+1 policy each)" } else { "" }, nsa as f64 / t);
    println!(
        "control/memory: VmRSS {rss0} KiB -> {rss1} KiB = {per_sa:.0} B per SA; key schedule (AES-128-GCM session, boxed) {key_schedule} B; beyond key schedules {:.0} B per SA (goal <= 1024)",
        per_sa - key_schedule as f64
    );
    let t = pipeline(&sock, (0..nrekey).map(rekey_request).collect());
    println!("control/sa_rekey: {nrekey} rekeys in {t:.3} s = {:.0} rekeys/s", nrekey as f64 / t);
    drop(gw);
}
