//! The control socket end to end with a mock handler: `CtlServer` polled
//! from a thread, driven with `control::client`, with raw socket writes and
//! with the `secgw ctl` binary; its Prometheus text parsed by
//! prometheus_client and its stats JSON validated by jsonschema (Python,
//! tests/ctl_output_check.py), not by our own code.

use secgw::control::client::{self, Client, ClientError};
use secgw::control::protocol::{self, Command, CtlError, ErrorCode, Event, EventKind, StatsFormat, MAX_REQUEST_BYTES};
use secgw::control::socket::{CtlHandler, CtlServer, Limits};
use secgw::control::stats::{NeighbourStats, PortStats, SaStats, Snapshot, WorkerStats};
use secgw::dataplane::DropReason;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the mock saw, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Handle(Command),
    Commit,
    /// A poll that answered this many lines.
    Poll(usize),
}

/// A handler that records every call and answers from a script.
struct Mock {
    log: Arc<Mutex<Vec<Seen>>>,
    /// How long commit takes: a response written before the commit would
    /// reach the client before the commit is logged.
    commit_delay: Duration,
}

/// A snapshot with every kind of counter set and label values that need
/// escaping.
fn snapshot() -> Snapshot {
    let mut drops = std::collections::BTreeMap::new();
    for (i, r) in DropReason::ALL.iter().enumerate() {
        drops.insert(r.name(), i as u64 * 3);
    }
    Snapshot {
        ports: vec![
            PortStats { name: "in\"side\\".into(), rx_packets: 11, rx_bytes: 1100, tx_packets: 12, tx_bytes: 1200, drops: 1, rx_dropped_backend: 2 },
            PortStats { name: "out\nside".into(), rx_packets: 21, rx_bytes: 2100, tx_packets: 22, tx_bytes: 2200, drops: 3, rx_dropped_backend: 4 },
        ],
        sas: vec![
            SaStats { spi: 1000, direction: "outbound", packets: 5, bytes: 500, errors: 1, dummies: 2, dst: None, path_mtu: Some(1300) },
            SaStats { spi: 4294967295, direction: "inbound", packets: 6, bytes: 600, errors: 0, dummies: 0, dst: None, path_mtu: None },
        ],
        drops,
        arp_replies: 1,
        nd_replies: 2,
        frags_sent: 3,
        dummies_sent: 2,
        icmp_sent: 5,
        icmp_rate_limited: 6,
        echo_replies: 61,
        frags_received: 7,
        reassembled: 8,
        frags_reassembled: 9,
        frags_pending: 10,
        neighbours: NeighbourStats { arp_requests: 51, ns_sent: 52, probes: 53, learned: 54, reports_lost: 55, pending: 56, entries: 57, added: 58, aged_out: 59, evicted: 60 },
        workers: vec![
            WorkerStats { worker: 0, handoff_out: 31, handoff_in: 32, flow_hits: 36, esp_flow_hits: 37, crypto_enqueued: 33, crypto_dequeued: 34, crypto_refused: 35 },
            WorkerStats { worker: 1, handoff_out: 41, handoff_in: 42, flow_hits: 46, esp_flow_hits: 47, crypto_enqueued: 43, crypto_dequeued: 44, crypto_refused: 45 },
        ],
    }
}

impl CtlHandler for Mock {
    fn handle(&mut self, cmd: &Command) -> Result<Value, CtlError> {
        self.log.lock().unwrap().push(Seen::Handle(cmd.clone()));
        match cmd {
            Command::Stats { format: StatsFormat::Json } => Ok(serde_json::to_value(snapshot()).unwrap()),
            Command::Stats { format: StatsFormat::Prometheus } => Ok(json!({"text": snapshot().to_prometheus()})),
            Command::SaList => Ok(json!({"sas":[{"spi":1000,"direction":"outbound","mode":"tunnel","algorithm":"aes-128-gcm",
                "tunnel_src":"203.0.113.1","tunnel_dst":"203.0.113.2","worker":0,"esn":false,"udp_encap":false,
                "state":"active","age_s":1.5,"packets":7,"bytes":700,"errors":0}]})),
            Command::PolicyList => Ok(json!({"policies":[{"direction":"outbound","src":"192.0.2.0/24","dst":"198.51.100.0/24",
                "protocol":"any","src_ports":"0-65535","dst_ports":"0-65535","priority":10,"action":"protect 1000"}]})),
            Command::NeighList => Ok(json!({"neighbours":[{"ip":"203.0.113.2","mac":"02:00:00:00:01:02","port":"outside","state":"stale","age_ms":31500},
                {"ip":"2001:db8:ff::2","mac":"02:00:00:00:01:03","port":null,"state":"static","age_ms":null}]})),
            Command::SaDel { spi: 404, .. } => Err(CtlError::not_found("no SA with SPI 404")),
            Command::SaDel { spi, direction, .. } => Ok(json!({"deleted": spi, "direction": direction})),
            Command::SaAdd { toml } => Ok(json!({"added": toml.matches("[[sa]]").count()})),
            Command::SaRekey { spi, new_spi, .. } => Ok(json!({"rekeyed": spi, "new_spi": new_spi})),
            Command::Version => Ok(json!({"version": "test", "protocol": protocol::VERSION})),
            Command::Reload => Ok(json!({"big": "x".repeat(16 * 1024)})),
            Command::Events => Err(CtlError::internal("events reached the handler")),
            Command::PolicyDel { policy, index } => Ok(json!({"deleted": policy, "index": index})),
        }
    }
    fn commit(&mut self) {
        std::thread::sleep(self.commit_delay);
        self.log.lock().unwrap().push(Seen::Commit);
    }
}

/// A CtlServer polled every millisecond by a thread; events sent on `events`
/// are broadcast.
struct Harness {
    path: PathBuf,
    log: Arc<Mutex<Vec<Seen>>>,
    events: mpsc::Sender<Event>,
    connections: Arc<AtomicUsize>,
    subscribers: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _dir: TempDir,
}

impl Harness {
    fn start(name: &str, limits: Limits, commit_delay: Duration) -> Harness {
        let dir = TempDir::new(name);
        let path = dir.0.join("run").join("secgw.sock");
        let mut server = CtlServer::bind_with(&path, limits).expect("bind");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<Event>();
        let (connections, subscribers, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let thread = {
            let (log, connections, subscribers, stop) = (log.clone(), connections.clone(), subscribers.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut mock = Mock { log: log.clone(), commit_delay };
                while !stop.load(Ordering::Relaxed) {
                    let n = server.poll(&mut mock);
                    if n > 0 {
                        log.lock().unwrap().push(Seen::Poll(n));
                    }
                    while let Ok(ev) = rx.try_recv() {
                        server.broadcast(&ev);
                    }
                    connections.store(server.connections(), Ordering::Relaxed);
                    subscribers.store(server.subscribers(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        Harness { path, log, events: tx, connections, subscribers, stop, thread: Some(thread), _dir: dir }
    }

    fn handled(&self) -> Vec<Command> {
        self.log.lock().unwrap().iter().filter_map(|s| if let Seen::Handle(c) = s { Some(c.clone()) } else { None }).collect()
    }

    fn wait_for(&self, what: &str, f: impl Fn(&Harness) -> bool) {
        let t0 = Instant::now();
        while !f(self) {
            assert!(t0.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A fresh directory under the target dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        // Short: socket paths are limited to 107 bytes.
        let p = std::env::temp_dir().join(format!("secgw-ctl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn raw_conn(path: &Path) -> (UnixStream, BufReader<UnixStream>) {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn read_json(r: &mut BufReader<UnixStream>) -> Value {
    let mut line = String::new();
    r.read_line(&mut line).expect("a response line");
    assert!(line.ends_with('\n'), "line not terminated: {line:?}");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

fn error_code(v: &Value) -> &str {
    assert_eq!((v["v"].as_u64(), v["ok"].as_bool()), (Some(1), Some(false)), "{v}");
    v["error"]["code"].as_str().unwrap()
}

#[test]
fn pipelined_requests_are_answered_in_order_with_one_commit_per_batch() {
    let h = Harness::start("pipe", Limits::default(), Duration::from_millis(20));
    let (mut w, mut r) = raw_conn(&h.path);
    let mut batch = String::new();
    let mut expect = Vec::new();
    for i in 0..300 {
        match i % 5 {
            0 => {
                batch.push_str("{\"v\":1,\"cmd\":\"stats\",\"id\":\"oops\"\n");
                expect.push(Err("bad_json"));
            }
            1 => {
                batch.push_str(&protocol::request_line(Some(&json!({"n": i})), &Command::SaDel { spi: 404, direction: None, dst: None }));
                expect.push(Err("not_found"));
            }
            _ => {
                batch.push_str(&protocol::request_line(Some(&json!(i)), &Command::SaDel { spi: i, direction: None, dst: None }));
                expect.push(Ok(i));
            }
        }
    }
    w.write_all(batch.as_bytes()).unwrap();
    for (i, want) in expect.iter().enumerate() {
        let v = read_json(&mut r);
        match want {
            Ok(spi) => {
                assert_eq!(v["id"], json!(i), "response {i} out of order: {v}");
                assert_eq!(v["result"]["deleted"], json!(spi), "{v}");
                assert_eq!(v["ok"], json!(true));
            }
            Err(code) => {
                assert_eq!(error_code(&v), *code, "{v}");
                // A line that is not JSON has no id to echo.
                let id = if *code == "bad_json" { Value::Null } else { json!({"n": i}) };
                assert_eq!(v.get("id").cloned().unwrap_or(Value::Null), id, "{v}");
            }
        }
        if want.is_ok() || *want == Err("not_found") {
            // The handler's effect was committed before this response left.
            let log = h.log.lock().unwrap();
            let nth = expect[..=i].iter().filter(|w| **w != Err("bad_json")).count();
            let at = log.iter().enumerate().filter(|(_, s)| matches!(s, Seen::Handle(_))).nth(nth - 1).unwrap().0;
            assert!(log[at..].contains(&Seen::Commit), "response {i} arrived before its commit");
        }
    }
    // Exactly one commit per poll that handled something, after its handles.
    h.wait_for("the last poll's end", |h| matches!(h.log.lock().unwrap().last(), Some(Seen::Poll(_))));
    let log = h.log.lock().unwrap().clone();
    let (mut handles, mut commits, mut polls) = (0, 0, 0);
    let mut since_poll: Vec<&Seen> = Vec::new();
    for s in &log {
        match s {
            Seen::Poll(_) => {
                let hs = since_poll.iter().filter(|s| matches!(s, Seen::Handle(_))).count();
                let cs = since_poll.iter().filter(|s| matches!(s, Seen::Commit)).count();
                assert_eq!(cs, usize::from(hs > 0), "one commit per batch: {hs} handles, {cs} commits in one poll");
                if hs > 0 {
                    assert_eq!(since_poll.last(), Some(&&Seen::Commit), "commit after the batch's handles");
                }
                handles += hs;
                commits += cs;
                polls += 1;
                since_poll.clear();
            }
            other => since_poll.push(other),
        }
    }
    assert_eq!(handles, 240);
    assert!(commits >= 1 && commits <= polls && commits < 240, "{commits} commits for {handles} handles in {polls} polls");
}

#[test]
fn client_requests_and_server_errors() {
    let h = Harness::start("client", Limits::default(), Duration::ZERO);
    let v = client::request(&h.path, &Command::Version).unwrap();
    assert_eq!(v, json!({"version": "test", "protocol": 1}));
    match client::request(&h.path, &Command::SaDel { spi: 404, direction: None, dst: None }) {
        Err(ClientError::Server { code: ErrorCode::NotFound, message }) => assert!(message.contains("404")),
        other => panic!("{other:?}"),
    }
    // Pipelined on one connection: responses come back in order.
    let mut c = Client::connect(&h.path).unwrap();
    let ids: Vec<u64> = (1..=50).map(|spi| c.send(&Command::SaDel { spi, direction: None, dst: None }).unwrap()).collect();
    for (i, id) in ids.iter().enumerate() {
        let (got, result) = c.recv().unwrap();
        assert_eq!(got, Some(json!(id)));
        assert_eq!(result.unwrap()["deleted"], json!(i + 1));
    }
    assert_eq!(c.call(&Command::SaList).unwrap()["sas"][0]["spi"], json!(1000));
    // Nothing listening: a connect error naming the path.
    let gone = h.path.with_file_name("nobody.sock");
    match client::request(&gone, &Command::Version) {
        Err(e @ ClientError::Connect { .. }) => assert!(e.to_string().contains("nobody.sock"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn garbage_and_oversized_lines_get_errors_and_the_connection_goes_on() {
    let h = Harness::start("garbage", Limits::default(), Duration::ZERO);
    let (mut w, mut r) = raw_conn(&h.path);
    let ok = protocol::request_line(Some(&json!("after")), &Command::Version);
    // Each bad line, then a good request on the same connection.
    let huge_json = format!("{{\"v\":1,\"cmd\":\"sa.add\",\"args\":{{\"toml\":\"{}\"}}}}\n", "a".repeat(MAX_REQUEST_BYTES));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json\n".to_vec(), "bad_json"),
        (b"\xff\xfe\x00binary\n".to_vec(), "bad_json"),
        (b"{\"v\":2,\"cmd\":\"stats\"}\n".to_vec(), "bad_version"),
        (b"{\"v\":1,\"cmd\":\"sa.explode\"}\n".to_vec(), "unknown_command"),
        (b"{\"v\":1,\"cmd\":\"sa.del\",\"args\":{\"spi\":\"x\"}}\n".to_vec(), "bad_args"),
        (b"{\"v\":1,\"cmd\":\"sa.rekey\",\"args\":{\"spi\":1}}\n".to_vec(), "bad_args"),
        (huge_json.into_bytes(), "too_large"),
        // 3 MiB without a newline for a while: answered once, the rest skipped.
        ([vec![b'{'; 3 << 20], b"\n".to_vec()].concat(), "too_large"),
    ];
    for (bad, code) in &cases {
        w.write_all(bad).unwrap();
        w.write_all(ok.as_bytes()).unwrap();
        let v = read_json(&mut r);
        assert_eq!(error_code(&v), *code, "for {:?}…: {v}", String::from_utf8_lossy(&bad[..bad.len().min(40)]));
        let v = read_json(&mut r);
        assert_eq!((v["id"].as_str(), v["ok"].as_bool()), (Some("after"), Some(true)), "{v}");
    }
    // A request the size limit allows still goes through.
    // 8 bytes each once escaped in JSON.
    let toml = "[[sa]]\n".repeat((MAX_REQUEST_BYTES - 100) / 8);
    let line = protocol::request_line(Some(&json!(1)), &Command::SaAdd { toml: toml.clone() });
    assert!(line.len() - 1 <= MAX_REQUEST_BYTES && line.len() > MAX_REQUEST_BYTES - 1000);
    w.write_all(line.as_bytes()).unwrap();
    assert_eq!(read_json(&mut r)["result"]["added"], json!(toml.matches("[[sa]]").count()));
    // Events never reach the handler.
    assert!(!h.handled().contains(&Command::Events));
    // A last line without a newline is answered when the client half-closes.
    w.write_all(b"{\"v\":1,\"cmd\":\"version\",\"id\":9}").unwrap();
    w.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_json(&mut r)["id"], json!(9));
    let mut rest = String::new();
    assert_eq!(r.read_to_string(&mut rest).unwrap(), 0, "then the server closes: {rest:?}");
    // And another connection is served.
    assert!(client::request(&h.path, &Command::Version).is_ok());
    // An oversized last line without its newline, then a half-close: the
    // error, then EOF at once (not after the 60 s idle limit: helper-84).
    let (mut w, mut r) = raw_conn(&h.path);
    w.write_all(&vec![b'x'; MAX_REQUEST_BYTES + 50_000]).unwrap();
    w.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(error_code(&read_json(&mut r)), "too_large");
    r.get_ref().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = String::new();
    assert_eq!(r.read_to_string(&mut rest).expect("EOF within 10 s, not a timeout"), 0, "then the server closes: {rest:?}");
}

#[test]
fn bind_creates_0700_dir_0600_socket_refuses_a_live_one_replaces_a_stale_one() {
    let dir = TempDir::new("bind");
    let path = dir.0.join("sub").join("ctl.sock");
    let server = CtlServer::bind(&path).unwrap();
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.0.join("sub")), 0o700);
    let e = CtlServer::bind(&path).err().expect("a second bind on a live socket must fail");
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
    assert!(path.exists(), "the refused bind removed the live socket");
    drop(server);
    assert!(!path.exists(), "drop removes the socket file");
    // A stale socket file (its listener gone without removing it) is replaced.
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let server = CtlServer::bind(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    drop(server);
    // Something that is not a socket is left alone.
    std::fs::write(&path, "precious").unwrap();
    let e = CtlServer::bind(&path).err().expect("a regular file must not be replaced");
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
    // An existing directory keeps its mode.
    std::fs::remove_file(&path).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let other = dir.0.join("x.sock");
    drop(CtlServer::bind(&other).unwrap());
    assert_eq!(mode(&dir.0), 0o755);
}

fn event(kind: EventKind, spi: u32) -> Event {
    Event {
        kind,
        spi,
        direction: "outbound".into(),
        dst: None,
        reason: (kind == EventKind::SoftExpired).then(|| "packets".into()),
        message: format!("{kind:?} {spi}"),
        time: 1_700_000_000.25,
        new_spi: (kind == EventKind::Rekeyed).then_some(spi + 1),
        packets: Some(spi as u64 * 10),
        bytes: None,
    }
}

#[test]
fn events_reach_every_subscriber_in_order_and_only_them() {
    let h = Harness::start("events", Limits::default(), Duration::ZERO);
    let subs: Vec<_> = (0..2)
        .map(|_| {
            let path = h.path.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                client::events(&path, |ev| {
                    got.push(ev);
                    got.len() < 3
                })
                .map(|()| got)
            })
        })
        .collect();
    // A connection that did not subscribe.
    let (mut w, mut r) = raw_conn(&h.path);
    h.wait_for("two subscribers", |h| h.subscribers.load(Ordering::Relaxed) == 2);
    let sent = [event(EventKind::SoftExpired, 5), event(EventKind::Rekeyed, 6), event(EventKind::HardExpired, 7)];
    for ev in &sent {
        h.events.send(ev.clone()).unwrap();
    }
    for s in subs {
        assert_eq!(s.join().unwrap().unwrap(), sent);
    }
    w.write_all(protocol::request_line(Some(&json!("plain")), &Command::Version).as_bytes()).unwrap();
    let v = read_json(&mut r);
    assert_eq!(v["id"], json!("plain"), "the non-subscriber got an event or nothing: {v}");
    // The subscribers hung up; the server notices.
    h.wait_for("subscribers gone", |h| h.subscribers.load(Ordering::Relaxed) == 0);
}

#[test]
fn clients_that_never_read_do_not_block_the_server_and_are_dropped() {
    let limits = Limits { out_high: 64 * 1024, out_limit: 256 * 1024, stall: Duration::from_millis(300), ..Limits::default() };
    let h = Harness::start("slow", limits, Duration::ZERO);
    // A client pipelining requests with 16 KiB responses, never reading.
    let hog = UnixStream::connect(&h.path).unwrap();
    let writer = {
        let mut hog = hog.try_clone().unwrap();
        std::thread::spawn(move || {
            let line = protocol::request_line(None, &Command::Reload);
            // More than the server buffers (1 MiB + a read chunk) and the kernel hold.
            for _ in 0..200_000 {
                if hog.write_all(line.as_bytes()).is_err() {
                    return true; // the server dropped us
                }
            }
            false
        })
    };
    // An events subscriber that never reads.
    let mut sub = UnixStream::connect(&h.path).unwrap();
    sub.write_all(protocol::request_line(None, &Command::Events).as_bytes()).unwrap();
    h.wait_for("the subscriber", |h| h.subscribers.load(Ordering::Relaxed) == 1);
    let big = Event { message: "m".repeat(8 * 1024), ..event(EventKind::Error, 1) };
    for _ in 0..200 {
        h.events.send(big.clone()).unwrap();
    }
    // Meanwhile others are served promptly.
    for _ in 0..20 {
        let t0 = Instant::now();
        client::request(&h.path, &Command::Version).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(1), "a request took {:?}", t0.elapsed());
    }
    h.wait_for("both non-readers dropped", |h| h.subscribers.load(Ordering::Relaxed) == 0 && h.connections.load(Ordering::Relaxed) == 0);
    assert!(writer.join().unwrap(), "the hog's writes should fail once the server dropped it");
    drop(hog);
    assert!(client::request(&h.path, &Command::Version).is_ok());
}

/// A burst of events larger than the old 4-MiB cap (a reload removing
/// 20,000 SAs queues 20,000 `deleted` lines in one round) reaches a
/// subscriber that reads, slower than the burst comes: with the default
/// limits it gets every event, in order (helper-103: it was dropped as
/// "does not read", its last line cut).
#[test]
fn a_reading_subscriber_gets_a_burst_of_events_bigger_than_4_mib() {
    let h = Harness::start("burst", Limits::default(), Duration::ZERO);
    let path = h.path.clone();
    let sub = std::thread::spawn(move || {
        let mut got = 0u32;
        let r = client::events(&path, |ev| {
            assert_eq!(ev.spi, got, "in order");
            got += 1;
            if got.is_multiple_of(1000) {
                std::thread::sleep(Duration::from_millis(20));
            }
            got < 20_000
        });
        (r, got)
    });
    h.wait_for("the subscriber", |h| h.subscribers.load(Ordering::Relaxed) == 1);
    let msg = "m".repeat(200);
    for spi in 0..20_000 {
        h.events.send(Event { message: msg.clone(), ..event(EventKind::Deleted, spi) }).unwrap();
    }
    let (r, got) = sub.join().unwrap();
    assert!(r.is_ok() && got == 20_000, "{r:?} after {got} events");
}

/// A server that cuts a line (it dropped the client) ends the events
/// stream as `Closed`, not as a bad line.
#[test]
fn a_cut_last_line_is_the_end_of_the_connection() {
    let dir = std::env::temp_dir().join(format!("secgw-ctl-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut req = String::new();
        r.read_line(&mut req).unwrap();
        let ev = protocol::event_line(&event(EventKind::Rekeyed, 7));
        let out = format!("{}{}{}", protocol::ok_line(Some(&json!(1)), json!({"subscribed": true})), ev, &ev[..ev.len() / 2]);
        s.write_all(out.as_bytes()).unwrap();
    });
    let mut seen = Vec::new();
    let r = client::events(&path, |ev| {
        seen.push(ev.spi);
        true
    });
    server.join().unwrap();
    assert!(matches!(r, Err(ClientError::Closed)), "{r:?}");
    assert_eq!(seen, [7]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn too_many_connections_get_a_busy_line() {
    let h = Harness::start("busy", Limits { max_connections: 4, ..Limits::default() }, Duration::ZERO);
    let held: Vec<UnixStream> = (0..4).map(|_| UnixStream::connect(&h.path).unwrap()).collect();
    h.wait_for("4 connections", |h| h.connections.load(Ordering::Relaxed) == 4);
    let (_w, mut r) = raw_conn(&h.path);
    assert_eq!(error_code(&read_json(&mut r)), "busy");
    // secgw's own client reports the refusal as the server's busy error,
    // and so does `secgw ctl`.
    match client::request(&h.path, &Command::Version) {
        Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Busy),
        other => panic!("expected the busy error, got {other:?}"),
    }
    let (code, out, err) = ctl(&h.path, &["version"], "");
    assert!(code != 0 && err.contains("busy") && err.contains("too many connections"), "{code} {out} {err}");
    drop(held);
    h.wait_for("connections closed", |h| h.connections.load(Ordering::Relaxed) == 0);
    assert!(client::request(&h.path, &Command::Version).is_ok());
}

#[test]
fn idle_connections_are_closed_subscribers_are_not() {
    let h = Harness::start("idle", Limits { idle: Duration::from_millis(300), ..Limits::default() }, Duration::ZERO);
    let (_iw, mut idle_r) = raw_conn(&h.path);
    let mut sub = UnixStream::connect(&h.path).unwrap();
    sub.write_all(protocol::request_line(None, &Command::Events).as_bytes()).unwrap();
    h.wait_for("the subscriber", |h| h.subscribers.load(Ordering::Relaxed) == 1);
    // A client that keeps asking is not idle, however long it stays.
    let (mut bw, mut br) = raw_conn(&h.path);
    for i in 0..6 {
        std::thread::sleep(Duration::from_millis(100));
        bw.write_all(protocol::request_line(Some(&json!(i)), &Command::Version).as_bytes()).unwrap();
        assert_eq!(read_json(&mut br)["id"], json!(i));
    }
    // Nor is a client that trickles a line it never finishes busy: bytes
    // without a complete request do not hold the slot (helper-84 held all
    // 64 with a byte every 25 s).
    let (mut tw, mut tr) = raw_conn(&h.path);
    tr.get_ref().set_nonblocking(true).unwrap();
    let started = std::time::Instant::now();
    let closed = loop {
        std::thread::sleep(Duration::from_millis(50));
        let _ = tw.write_all(b"{");
        let mut b = [0u8; 64];
        match tr.get_mut().read(&mut b) {
            Ok(0) => break true,
            Ok(n) => panic!("the trickling client got {:?}", String::from_utf8_lossy(&b[..n])),
            Err(_) if started.elapsed() > Duration::from_secs(3) => break false,
            Err(_) => {}
        }
    };
    assert!(closed, "a client trickling an unfinished line for 3 s (idle limit 0.3 s) was not closed");
    h.wait_for("the idle one closed", |h| h.connections.load(Ordering::Relaxed) <= 2);
    let mut rest = Vec::new();
    assert_eq!(idle_r.read_to_end(&mut rest).unwrap(), 0, "closed with EOF, nothing sent");
    assert_eq!(h.subscribers.load(Ordering::Relaxed), 1, "the subscriber stays");
}

// ---- the secgw ctl binary ---------------------------------------------------

/// Runs `c` with `stdin` written to it; (success, status, stdout, stderr).
fn run(mut c: std::process::Command, stdin: &str) -> (bool, i32, String, String) {
    let mut c = c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    (o.status.success(), o.status.code().unwrap_or(-1), String::from_utf8(o.stdout).unwrap(), String::from_utf8(o.stderr).unwrap())
}

/// Runs `secgw ctl --socket PATH args…` with `stdin`; (status, stdout, stderr).
fn ctl(path: &Path, args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_secgw"));
    c.arg("ctl").arg("--socket").arg(path).args(args);
    let (_, code, out, err) = run(c, stdin);
    (code, out, err)
}

/// Runs tests/ctl_output_check.py (python3 with prometheus_client and
/// jsonschema, which testbed/test.sh installs) with `args` on `input`;
/// (ok, stdout, stderr).
fn check(args: &[&str], input: &str) -> (bool, String, String) {
    let mut c = std::process::Command::new("python3");
    c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ctl_output_check.py")).args(args);
    let (ok, _, out, err) = run(c, input);
    assert!(!err.contains("ModuleNotFoundError"), "a Python module is missing (testbed/test.sh installs them): {err}");
    (ok, out, err)
}

#[test]
fn secgw_ctl_prints_tables_results_and_exit_codes() {
    let h = Harness::start("bin", Limits::default(), Duration::ZERO);
    let (code, out, err) = ctl(&h.path, &["sa", "list"], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("spi") && out.contains("203.0.113.1 → 203.0.113.2") && out.contains("active"), "{out}");
    let (code, out, _) = ctl(&h.path, &["sa", "list", "--json"], "");
    assert_eq!((code, serde_json::from_str::<Value>(&out).unwrap()["sas"][0]["bytes"].clone()), (0, json!(700)));
    let (code, out, _) = ctl(&h.path, &["policy", "list"], "");
    assert_eq!(code, 0);
    assert!(out.lines().nth(1).unwrap().split_whitespace().eq(["0", "outbound", "192.0.2.0/24", "198.51.100.0/24", "any", "0-65535", "0-65535", "10", "protect", "1000"]), "{out}");
    // `policy del N` sends entry N as listed; past the end, nothing is sent.
    let (code, out, err) = ctl(&h.path, &["policy", "del", "0"], "");
    assert_eq!(code, 0, "{err}");
    let sent = out.trim().strip_prefix("deleted=").and_then(|r| r.strip_suffix(" index=0")).unwrap_or_else(|| panic!("{out}"));
    let v: Value = serde_json::from_str(sent).unwrap();
    assert_eq!((v["action"].clone(), v["priority"].clone(), v["src_ports"].clone()), (json!("protect 1000"), json!(10), json!("0-65535")), "{out}");
    let (code, _, err) = ctl(&h.path, &["policy", "del", "1"], "");
    assert_eq!((code, err.trim()), (1, "secgw ctl: not_found: no policy 1: the SPD has 1 (policy list numbers them from 0)"));
    let (code, out, _) = ctl(&h.path, &["neigh", "list"], "");
    assert_eq!(code, 0);
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["ip", "mac", "port", "state", "age"], "{out}");
    assert_eq!(lines[1][..4], ["203.0.113.2", "02:00:00:00:01:02", "outside", "stale"], "{out}");
    assert_eq!(lines[2], ["2001:db8:ff::2", "02:00:00:00:01:03", "any", "static", "-"], "{out}");
    // Text stats: the snapshot as `secgw run` prints it.
    let (code, out, _) = ctl(&h.path, &["stats"], "");
    assert_eq!((code, out), (0, snapshot().to_text()));
    // Server errors: exit 1 and `code: message`.
    let (code, out, err) = ctl(&h.path, &["sa", "del", "404"], "");
    assert_eq!((code, out.as_str(), err.trim()), (1, "", "secgw ctl: not_found: no SA with SPI 404"));
    let (code, out, _) = ctl(&h.path, &["sa", "del", "0x10", "--direction", "in"], "");
    assert_eq!((code, out.trim()), (0, "deleted=16 direction=inbound"));
    // sa add from stdin, sa rekey with keys from stdin and from a TOML file.
    let (code, out, _) = ctl(&h.path, &["sa", "add", "-"], "[[sa]]\nspi = 1\n[[sa]]\nspi = 2\n");
    assert_eq!((code, out.trim()), (0, "added=2"));
    // A fragment over the request limit: said in the user's terms, nothing
    // sent (helper-89 got "request line longer than 1048576 bytes").
    let n = h.handled().len();
    let big = "# padding\n".repeat(120_000);
    let (code, out, err) = ctl(&h.path, &["sa", "add", "-"], &big);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("over the 1048576-byte limit of a control socket request (for `sa add`: split the fragment into several)"), "{err}");
    assert_eq!(h.handled().len(), n, "nothing reached the server");
    let (code, out, err) = ctl(&h.path, &["sa", "rekey", "1000", "--spi", "1002", "--key-file", "-", "--direction", "out"], "00112233445566778899aabbccddeeff01020304\n");
    assert_eq!((code, out.trim()), (0, "new_spi=1002 rekeyed=1000"), "{err}");
    let keyfile = h.path.with_file_name("k.toml");
    std::fs::write(&keyfile, "key = \"aabb\"\nauth_key = \"ccdd\"\n").unwrap();
    let (code, _, _) = ctl(&h.path, &["sa", "rekey", "7", "--spi", "8", "--key-file", keyfile.to_str().unwrap()], "");
    assert_eq!(code, 0);
    let rekeys: Vec<Command> = h.handled().into_iter().filter(|c| matches!(c, Command::SaRekey { .. })).collect();
    assert_eq!(
        rekeys,
        [
            Command::SaRekey {
                spi: 1000,
                direction: Some(secgw::config::Direction::Outbound),
                dst: None,
                new_spi: 1002,
                key: "00112233445566778899aabbccddeeff01020304".into(),
                auth_key: None
            },
            Command::SaRekey { spi: 7, direction: None, dst: None, new_spi: 8, key: "aabb".into(), auth_key: Some("ccdd".into()) },
        ]
    );
    // A bad key file is refused locally without showing it.
    let (code, _, err) = ctl(&h.path, &["sa", "rekey", "7", "--spi", "8", "--key-file", "-"], "secret1\nsecret2\n");
    assert_eq!(code, 1);
    assert!(err.contains("expected one line of hex") && !err.contains("secret"), "{err}");
    // The key is never an argument.
    let (code, _, err) = ctl(&h.path, &["sa", "rekey", "7", "--spi", "8", "--key", "00"], "");
    assert_eq!(code, 2, "clap's usage error");
    assert!(err.contains("--key"), "{err}");
    // Nothing listening: exit 2 with the path and a hint.
    let (code, _, err) = ctl(&h.path.with_file_name("none.sock"), &["stats"], "");
    assert_eq!(code, 2);
    assert!(err.contains("none.sock") && err.contains("secgw run"), "{err}");
    // events: one line per event, JSON with --json.
    let (tx, rx) = mpsc::channel();
    let path = h.path.clone();
    let reader = std::thread::spawn(move || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_secgw"))
            .args(["ctl", "--socket", path.to_str().unwrap(), "events", "--json"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
        let first: Event = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        tx.send(first).unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    });
    h.wait_for("the ctl subscriber", |h| h.subscribers.load(Ordering::Relaxed) == 1);
    h.events.send(event(EventKind::Rekeyed, 41)).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), event(EventKind::Rekeyed, 41));
    reader.join().unwrap();
}

#[test]
fn prometheus_text_parses_with_prometheus_client_and_matches_the_counters() {
    let h = Harness::start("prom", Limits::default(), Duration::ZERO);
    let (code, text, err) = ctl(&h.path, &["stats", "--prometheus"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(text, snapshot().to_prometheus());
    let (ok, out, err) = check(&["prometheus"], &text);
    assert!(ok, "prometheus_client rejected the text: {err}");
    let samples: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let s = snapshot();
    let n = 6 * s.ports.len() + 4 * s.sas.len() + s.drops.len() + 10 + 1 + 8 + 2 + 7 * s.workers.len() + s.sas.iter().filter(|s| s.path_mtu.is_some()).count();
    assert_eq!(samples.len(), n, "{out}");
    let value = |name: &str, labels: Value| -> f64 {
        let hits: Vec<&Value> = samples.iter().filter(|v| v["name"] == name && v["labels"] == labels).collect();
        assert_eq!(hits.len(), 1, "{name} {labels}: {hits:?}");
        hits[0]["value"].as_f64().unwrap()
    };
    // Label values with a quote, a backslash and a newline come back intact.
    assert_eq!(value("secgw_port_rx_packets_total", json!({"port": "in\"side\\"})), 11.0);
    assert_eq!(value("secgw_port_rx_dropped_backend_total", json!({"port": "out\nside"})), 4.0);
    assert_eq!(value("secgw_sa_bytes_total", json!({"spi": "4294967295", "direction": "inbound"})), 600.0);
    assert_eq!(value("secgw_sa_dummies_total", json!({"spi": "1000", "direction": "outbound"})), 2.0);
    assert_eq!(value("secgw_drops_total", json!({"reason": DropReason::ALL[7].name()})), 21.0);
    assert_eq!(value("secgw_icmp_rate_limited_total", json!({})), 6.0);
    assert_eq!(value("secgw_echo_replies_total", json!({})), 61.0);
    assert_eq!(value("secgw_frags_pending", json!({})), 10.0);
    assert_eq!(value("secgw_worker_handoff_in_total", json!({"worker": "1"})), 42.0);
    assert_eq!(value("secgw_worker_flow_hits_total", json!({"worker": "0"})), 36.0);
    assert_eq!(value("secgw_worker_esp_flow_hits_total", json!({"worker": "1"})), 47.0);
    assert_eq!(value("secgw_worker_crypto_dequeued_total", json!({"worker": "1"})), 44.0);
    assert_eq!(value("secgw_worker_crypto_refused_total", json!({"worker": "0"})), 35.0);
    assert_eq!(value("secgw_neigh_arp_requests_total", json!({})), 51.0);
    assert_eq!(value("secgw_neigh_evicted_total", json!({})), 60.0);
    assert_eq!(value("secgw_neigh_pending", json!({})), 56.0);
    assert_eq!(value("secgw_neigh_entries", json!({})), 57.0);
    assert_eq!(value("secgw_sa_path_mtu_bytes", json!({"spi": "1000", "direction": "outbound"})), 1300.0);
    let pending: Vec<&Value> = samples.iter().filter(|v| v["name"] == "secgw_frags_pending").collect();
    assert_eq!(pending[0]["type"], "gauge");
    // The check can fail: a broken label, an unescaped quote, a counter
    // without _total, a repeated family are all rejected.
    let breakages = [
        text.replacen("{port=\"in\\\"side", "{port=\"in\"side", 1),
        text.replacen("port=\"", "port=", 1),
        text.replacen("secgw_arp_replies_total 1", "secgw_arp_replies 1", 1),
        text.replacen("secgw_frags_pending 10", "secgw_frags_pending ten", 1),
        format!("{text}{}", text.lines().take(3).collect::<Vec<_>>().join("\n") + "\n"),
    ];
    for (i, bad) in breakages.iter().enumerate() {
        assert_ne!(bad, &text, "breakage {i} changed nothing");
        let (ok, _, _) = check(&["prometheus"], bad);
        assert!(!ok, "breakage {i} was accepted");
    }
}

#[test]
fn stats_json_validates_against_the_committed_schema() {
    let h = Harness::start("schema", Limits::default(), Duration::ZERO);
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ctl-stats.schema.json");
    let schema = schema.to_str().unwrap();
    let (code, out, err) = ctl(&h.path, &["stats", "--json"], "");
    assert_eq!(code, 0, "{err}");
    let (ok, _, err) = check(&["schema", schema], &out);
    assert!(ok, "secgw ctl stats --json does not match docs/ctl-stats.schema.json: {err}");
    // The file secgw run --stats-file writes is the same JSON.
    let (ok, _, err) = check(&["schema", schema], &snapshot().to_json());
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // Every drop reason is there, named as DropReason names it.
    let names: Vec<&str> = v["drops"].as_object().unwrap().keys().map(String::as_str).collect();
    let mut want: Vec<&str> = DropReason::ALL.iter().map(|r| r.name()).collect();
    want.sort_unstable();
    assert_eq!(names, want);
    // The text renderer reads it back whole.
    assert_eq!(Snapshot::from_json_value(&v).unwrap(), snapshot());
    // The check can fail: a missing field, an extra one, a wrong type.
    let mut missing = v.clone();
    missing.as_object_mut().unwrap().remove("frags_pending");
    let mut extra = v.clone();
    extra["sas"][0]["state"] = json!("active");
    let mut wrong = v.clone();
    wrong["ports"][0]["rx_packets"] = json!(-1);
    let mut dir = v.clone();
    dir["sas"][1]["direction"] = json!("sideways");
    for (i, bad) in [missing, extra, wrong, dir].iter().enumerate() {
        let (ok, _, _) = check(&["schema", schema], &bad.to_string());
        assert!(!ok, "breakage {i} was accepted");
    }
}

/// `secgw run` with ports on interfaces that do not exist names the field
/// by file, line and column (brief: bad config gets a message naming the
/// file, line and field), both where the MAC is read from the interface
/// (no `mac` in the port) and where the worker opens its AF_XDP socket
/// (a `mac` given); it exits 1 without starting.
#[test]
fn run_names_file_line_and_field_of_a_missing_interface() {
    let dir = std::env::temp_dir().join(format!("secgw-run-noif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ep0 = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/ep0.toml")).unwrap();
    let renamed = ep0.replace("interface = \"gw0-in\"", "interface = \"nosuch-in\"").replace("interface = \"gw0-out\"", "interface = \"nosuch-out\"");
    assert_ne!(renamed, ep0, "configs/ep0.toml names gw0-in / gw0-out");
    // The line of the first port's `interface` (1-based).
    let line_of = |text: &str, key: &str| text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
    // Without the ports' `mac`: the MAC read from the interface fails.
    let mut seen_port = false;
    let no_mac: String = renamed
        .lines()
        .filter(|l| {
            seen_port |= l.starts_with("[[port]]");
            if l.starts_with("[[") && !l.starts_with("[[port]]") {
                seen_port = false;
            }
            !(seen_port && l.starts_with("mac = "))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(renamed.matches("\nmac = ").count(), no_mac.matches("\nmac = ").count() + 2, "the two ports' mac lines removed");
    for (name, text) in [("with-mac.toml", renamed.clone()), ("no-mac.toml", no_mac)] {
        let cfg = dir.join(name);
        std::fs::write(&cfg, &text).unwrap();
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_secgw"));
        c.arg("run").arg("--config").arg(&cfg).arg("--socket").arg(dir.join(format!("{name}.sock")));
        let (ok, code, _, err) = run(c, "");
        let line = line_of(&text, "interface = \"nosuch-in\"");
        let want = format!("{}:{line}:13: port[0].interface: interface \"nosuch-in\" not found", cfg.display());
        assert!(!ok && code == 1 && err.contains(&want), "{name}: exit {code}, stderr:\n{err}\nwanted: {want}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
