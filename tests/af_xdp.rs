//! AF_XDP port on a veth pair inside a private network namespace.
//!
//! Needs root (netns, veth, XDP, AF_PACKET) and fails — does not skip — if
//! any of that cannot be set up. Each test makes its own namespace, named
//! after the process id and the test, so tests may run in parallel; the
//! namespace (and the veth pair in it) is deleted by a guard on every path.
//! Only the test's own thread enters the namespace (`setns`), and it goes
//! back to the original namespace when the guard drops.

use secgw::io::af_xdp::{interface_mac, AfXdpConfig, AfXdpPort, AttachMode};
use secgw::io::{PktBuf, Port};
use std::ffi::{c_char, c_int, c_void, CString};
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// EtherType used by the test frames (IEEE 802 local experimental).
const ETHERTYPE: u16 = 0x88b5;
/// How long to wait for frames before failing.
const DEADLINE: Duration = Duration::from_secs(10);

/// Runs `cmd args…`, panicking with its stderr if it fails.
fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace holding a veth pair `a` (the port's end) <-> `b`
/// (the peer's end), both up, IPv6 off. Deleted on drop; the test thread
/// is moved back to its original namespace first.
struct Netns {
    name: String,
    a: String,
    b: String,
    /// The thread's namespace before `enter`.
    orig: Option<OwnedFd>,
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let pid = std::process::id();
        let name = format!("secgw-afxdp-{pid}-{tag}");
        let a = format!("v{pid}{tag}a");
        let b = format!("v{pid}{tag}b");
        assert!(a.len() < 16, "veth name {a} too long");
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run("ip", &["netns", "add", &name]);
        // From here on the guard cleans up, whatever fails next.
        let ns = Netns {
            name,
            a,
            b,
            orig: None,
        };
        let n = ns.name.as_str();
        run(
            "ip",
            &[
                "-n", n, "link", "add", &ns.a, "type", "veth", "peer", "name", &ns.b,
            ],
        );
        for dev in [&ns.a, &ns.b] {
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    n,
                    "sysctl",
                    "-q",
                    "-w",
                    &format!("net.ipv6.conf.{dev}.disable_ipv6=1"),
                ],
            );
            // Frames up to 2200 bytes, so an oversize one (> PktBuf) can be sent.
            run("ip", &["-n", n, "link", "set", "dev", dev, "mtu", "2200"]);
        }
        for dev in [&ns.a, &ns.b] {
            run("ip", &["-n", n, "link", "set", "dev", dev, "up"]);
        }
        ns
    }

    /// Moves the calling thread into the namespace.
    fn enter(&mut self) {
        let orig = std::fs::File::open("/proc/thread-self/ns/net").expect("open own netns");
        let target =
            std::fs::File::open(format!("/var/run/netns/{}", self.name)).expect("open netns");
        // SAFETY: both are valid namespace fds for the duration of the call;
        // setns only changes this thread's network namespace.
        let rc = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        self.orig = Some(orig.into());
    }

    /// `ip link show dev` of the port's end, as seen from inside.
    fn link_a(&self) -> String {
        run("ip", &["-n", &self.name, "link", "show", "dev", &self.a])
    }

    /// The lock file a port on `a` holds while open (named after the
    /// namespace's inode and `a`'s ifindex).
    fn lock_file(&self) -> String {
        let ino = std::fs::metadata(format!("/var/run/netns/{}", self.name))
            .expect("stat netns")
            .ino();
        let line = run(
            "ip",
            &["-n", &self.name, "-o", "link", "show", "dev", &self.a],
        );
        let ifindex: u32 = line
            .split(':')
            .next()
            .and_then(|i| i.trim().parse().ok())
            .unwrap_or_else(|| panic!("no ifindex in {line:?}"));
        format!("/run/secgw/xdp-{ino}-{ifindex}.lock")
    }

    /// Id of the XDP program on the port's end, if any.
    fn xdp_prog_id(&self) -> Option<u32> {
        let text = self.link_a();
        let pos = text.find("prog/xdp id ")?;
        text[pos + 12..].split_whitespace().next()?.parse().ok()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(orig) = self.orig.take() {
            // SAFETY: `orig` is the namespace fd this thread came from.
            unsafe { libc::setns(orig.as_raw_fd(), libc::CLONE_NEWNET) };
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A raw AF_PACKET socket bound to one interface of the current namespace.
struct Peer {
    fd: OwnedFd,
    ifindex: i32,
}

impl Peer {
    fn bind(dev: &str) -> Peer {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2); the fd is owned right below.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                proto as i32,
            )
        };
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fresh fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = CString::new(dev).unwrap();
        // SAFETY: NUL-terminated name valid for the call.
        let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) } as i32;
        assert!(ifindex > 0, "no interface {dev}");
        // SAFETY: all-zero sockaddr_ll is valid; fields set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(rc, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
        Peer { fd, ifindex }
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is valid for `len` bytes; the socket is bound.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(
            n,
            frame.len() as isize,
            "AF_PACKET send: {}",
            std::io::Error::last_os_error()
        );
    }

    /// One frame received (not sent) on the interface, if any is queued.
    fn try_recv(&self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 4096];
        loop {
            // SAFETY: all-zero sockaddr_ll is valid.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut alen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: `buf` and `sll` are valid for the sizes passed.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                    &mut alen,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "recvfrom: {e}");
                return None;
            }
            assert_eq!(sll.sll_ifindex, self.ifindex);
            if sll.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            return Some(buf[..n as usize].to_vec());
        }
    }
}

/// Test frame `i` of `len` bytes from `src` to `dst`; distinct per `(tag, i)`.
fn frame(dst: [u8; 6], src: [u8; 6], tag: u8, i: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    f.push(tag);
    f.extend_from_slice(&i.to_be_bytes());
    while f.len() < len {
        f.push((f.len() as u32 ^ i.wrapping_mul(31)) as u8);
    }
    f
}

/// Receives on `port` (polling it) until `n` frames arrived or the deadline.
fn recv_frames(port: &mut AfXdpPort, n: usize) -> Vec<Vec<u8>> {
    let mut bufs: Vec<PktBuf> = (0..32).map(|_| PktBuf::new()).collect();
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < n && start.elapsed() < DEADLINE {
        port.poll();
        let k = port.rx_burst(&mut bufs);
        for b in &bufs[..k] {
            assert_eq!(b.port, port.id());
            got.push(b.frame().to_vec());
        }
        if k == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Anything more that arrives shortly after is a failure too.
    std::thread::sleep(Duration::from_millis(50));
    port.poll();
    let k = port.rx_burst(&mut bufs);
    for b in &bufs[..k] {
        got.push(b.frame().to_vec());
    }
    got
}

fn open(ns: &Netns, id: u16, mode: AttachMode) -> AfXdpPort {
    let mut cfg = AfXdpConfig::new(ns.a.clone(), 0);
    cfg.mode = mode;
    AfXdpPort::open(id, &cfg).unwrap_or_else(|e| panic!("open {}: {e}", ns.a))
}

/// (1) 100 frames from the peer arrive intact and in order, an oversize one
/// is dropped and counted; (2) 100 frames sent by the port reach the peer
/// byte for byte; (3) after drop no XDP program is left.
fn rx_tx_detach(tag: &str, mode: AttachMode) {
    let mut ns = Netns::new(tag);
    ns.enter();
    let mac_a = interface_mac(&ns.a).expect("mac a");
    let mac_b = interface_mac(&ns.b).expect("mac b");
    let sysfs_a = run(
        "ip",
        &[
            "netns",
            "exec",
            &ns.name,
            "cat",
            &format!("/sys/class/net/{}/address", ns.a),
        ],
    );
    let want_a: Vec<String> = mac_a.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        sysfs_a.trim(),
        want_a.join(":"),
        "interface_mac must read the thread's namespace"
    );

    let mut port = open(&ns, 7, mode);
    let link = ns.link_a();
    assert!(
        link.contains("prog/xdp"),
        "no XDP program while open:\n{link}"
    );
    match mode {
        AttachMode::Skb => assert!(link.contains(" xdpgeneric "), "not generic XDP:\n{link}"),
        AttachMode::Native => assert!(
            link.contains(" xdp ") && !link.contains("xdpgeneric"),
            "not driver XDP:\n{link}"
        ),
        AttachMode::Auto => {}
    }
    let peer = Peer::bind(&ns.b);
    let tx_frames_free = port.tx_free_frames();

    // (1) receive
    let sent: Vec<Vec<u8>> = (0..100)
        .map(|i| frame(mac_a, mac_b, 1, i, 60 + 13 * i as usize))
        .collect();
    for f in &sent {
        peer.send(f);
    }
    let got = recv_frames(&mut port, sent.len());
    assert_eq!(
        got.len(),
        sent.len(),
        "received {} of {} frames",
        got.len(),
        sent.len()
    );
    assert!(got == sent, "received frames differ from those sent");
    let s = port.stats();
    assert_eq!((s.rx_packets, s.rx_dropped), (100, 0));
    assert_eq!(s.rx_bytes, sent.iter().map(|f| f.len() as u64).sum::<u64>());

    // A frame longer than a PktBuf holds (2048 bytes) is dropped and counted,
    // and the next one still arrives.
    peer.send(&frame(mac_a, mac_b, 2, 0, 2100));
    let after = frame(mac_a, mac_b, 2, 1, 64);
    peer.send(&after);
    let got = recv_frames(&mut port, 1);
    assert_eq!(got, vec![after]);
    assert_eq!(port.stats().rx_dropped, 1);

    // (2) transmit
    let out: Vec<Vec<u8>> = (0..100)
        .map(|i| frame(mac_b, mac_a, 3, i, 1400 - 11 * i as usize))
        .collect();
    let bufs: Vec<PktBuf> = out
        .iter()
        .map(|f| {
            let mut b = PktBuf::new();
            assert!(b.copy_from(f));
            b
        })
        .collect();
    let mut next = 0;
    let mut seen = Vec::new();
    let start = Instant::now();
    while (next < bufs.len() || seen.len() < out.len()) && start.elapsed() < DEADLINE {
        if next < bufs.len() {
            let end = (next + 32).min(bufs.len());
            next += port.tx_burst(&bufs[next..end]);
        }
        port.poll();
        while let Some(f) = peer.try_recv() {
            seen.push(f);
        }
    }
    assert_eq!(next, bufs.len(), "tx_burst took only {next} frames");
    assert_eq!(
        seen.len(),
        out.len(),
        "peer received {} of {} frames",
        seen.len(),
        out.len()
    );
    for (i, (a, b)) in seen.iter().zip(&out).enumerate() {
        assert!(
            a == b,
            "frame {i} differs: got {} bytes, sent {}",
            a.len(),
            b.len()
        );
    }
    let start = Instant::now();
    while port.tx_free_frames() < tx_frames_free && start.elapsed() < DEADLINE {
        port.poll();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        port.tx_free_frames(),
        tx_frames_free,
        "tx frames not all completed"
    );
    let s = port.stats();
    assert_eq!((s.tx_packets, s.tx_dropped), (100, 0));
    assert_eq!(s.tx_bytes, out.iter().map(|f| f.len() as u64).sum::<u64>());
    // An empty frame is taken but dropped and counted.
    assert_eq!(port.tx_burst(&[PktBuf::new()]), 1);
    assert_eq!(port.stats().tx_dropped, 1);

    // (3) drop detaches
    drop(port);
    let link = ns.link_a();
    assert!(
        !link.contains("xdp"),
        "XDP program left after drop:\n{link}"
    );
}

#[test]
fn skb_mode_rx_tx_and_detach_on_veth() {
    rx_tx_detach("s", AttachMode::Skb);
}

#[test]
fn native_mode_rx_tx_and_detach_on_veth() {
    rx_tx_detach("n", AttachMode::Native);
}

#[test]
fn two_ports_on_one_interface_keep_the_program_until_the_last_drop() {
    let mut ns = Netns::new("q");
    // A second queue on each end.
    run("ip", &["-n", &ns.name, "link", "del", &ns.a]);
    run(
        "ip",
        &[
            "-n",
            &ns.name,
            "link",
            "add",
            &ns.a,
            "numrxqueues",
            "2",
            "numtxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            &ns.b,
            "numrxqueues",
            "2",
            "numtxqueues",
            "2",
        ],
    );
    for dev in [&ns.a, &ns.b] {
        run(
            "ip",
            &[
                "netns",
                "exec",
                &ns.name,
                "sysctl",
                "-q",
                "-w",
                &format!("net.ipv6.conf.{dev}.disable_ipv6=1"),
            ],
        );
        run("ip", &["-n", &ns.name, "link", "set", "dev", dev, "up"]);
    }
    ns.enter();
    let p0 = open(&ns, 0, AttachMode::Skb);
    let mut cfg = AfXdpConfig::new(ns.a.clone(), 1);
    cfg.frame_count = 256;
    cfg.ring_size = 128;
    let p1 = AfXdpPort::open(1, &cfg).unwrap_or_else(|e| panic!("open queue 1: {e}"));
    let id = ns.xdp_prog_id().expect("program attached");
    drop(p0);
    assert_eq!(
        ns.xdp_prog_id(),
        Some(id),
        "program must stay while queue 1 is open"
    );
    drop(p1);
    assert_eq!(
        ns.xdp_prog_id(),
        None,
        "program left after the last drop:\n{}",
        ns.link_a()
    );
}

/// A full UMEM free list is backpressure: tx_burst takes only what fits,
/// counts the rest in tx_dropped, and the frames come back after poll.
#[test]
fn tx_backpressure_takes_what_fits() {
    let mut ns = Netns::new("b");
    ns.enter();
    let mut cfg = AfXdpConfig::new(ns.a.clone(), 0);
    cfg.frame_count = 64;
    cfg.ring_size = 32;
    let mut port = AfXdpPort::open(2, &cfg).unwrap_or_else(|e| panic!("open: {e}"));
    assert_eq!(port.tx_free_frames(), 32);
    let mac_a = interface_mac(&ns.a).unwrap();
    let bufs: Vec<PktBuf> = (0..100)
        .map(|i| {
            let mut b = PktBuf::new();
            assert!(b.copy_from(&frame([2, 0, 0, 0, 0, 1], mac_a, 5, i, 80)));
            b
        })
        .collect();
    assert_eq!(port.tx_burst(&bufs), 32);
    assert_eq!(port.stats().tx_dropped, 68);
    let start = Instant::now();
    while port.tx_free_frames() < 32 && start.elapsed() < DEADLINE {
        port.poll();
    }
    assert_eq!(port.tx_free_frames(), 32, "completions did not come back");
    assert_eq!(port.tx_burst(&bufs[..10]), 10);
    assert_eq!(port.stats().tx_packets, 42);
}

/// (7) Frames the kernel drops before the port sees them are counted: with
/// 32 rx frames, 40 frames arriving while nobody drains the rx ring leave 8
/// dropped in the kernel (no fill-ring frame, or rx ring full, whichever
/// the kernel checks first), reported by `kernel_stats` and folded into
/// `stats().rx_dropped`; the first 32 are then received.
#[test]
fn kernel_receive_drops_are_counted() {
    let mut ns = Netns::new("d");
    ns.enter();
    let mut cfg = AfXdpConfig::new(ns.a.clone(), 0);
    cfg.frame_count = 64;
    cfg.ring_size = 32;
    let mut port = AfXdpPort::open(11, &cfg).unwrap_or_else(|e| panic!("open: {e}"));
    assert_eq!(
        port.kernel_stats().expect("kernel_stats"),
        Default::default()
    );
    let mac_a = interface_mac(&ns.a).unwrap();
    let mac_b = interface_mac(&ns.b).unwrap();
    let peer = Peer::bind(&ns.b);
    let sent: Vec<Vec<u8>> = (0..40).map(|i| frame(mac_a, mac_b, 7, i, 100)).collect();
    for f in &sent {
        peer.send(f);
    }
    let start = Instant::now();
    let mut k = port.kernel_stats().expect("kernel_stats");
    while k.rx_dropped + k.rx_ring_full < 8 && start.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(1));
        k = port.kernel_stats().expect("kernel_stats");
    }
    assert_eq!(k.rx_dropped + k.rx_ring_full, 8, "{k:?}");
    assert_eq!((k.rx_invalid_descs, k.tx_invalid_descs), (0, 0), "{k:?}");
    assert_eq!(port.stats().rx_dropped, 8);
    assert!(
        recv_frames(&mut port, 32) == sent[..32],
        "the frames that fit did not arrive intact"
    );
    assert_eq!(port.stats().rx_packets, 32);
}

/// Kills the child (if still running) when the test unwinds.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the ignored helper test `helper` of this binary in a child process
/// (a second secgw, as far as the port is concerned) with
/// `SECGW_AFXDP_CHILD=netns,ifname` naming `ns` and its port's end; returns
/// the child (killed if the test unwinds) and its stdout.
fn spawn_child(helper: &str, ns: &Netns) -> (KillOnDrop, std::io::Lines<BufReader<ChildStdout>>) {
    let exe = std::env::current_exe().expect("current_exe");
    let child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            helper,
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SECGW_AFXDP_CHILD", format!("{},{}", ns.name, ns.a))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().expect("child stdout");
    (child, BufReader::new(stdout).lines())
}

/// (4) A program left behind by a killed run is replaced: a child process
/// (this test binary, running the ignored helper below) opens a port and is
/// SIGKILLed, leaving libxdp's program attached with its refcount never
/// decremented, and its lock file unlocked but in place; a new port must
/// then open, receive, and leave nothing behind on drop.
#[test]
fn stale_program_from_a_killed_run_is_replaced() {
    let mut ns = Netns::new("k");
    let (mut child, lines) = spawn_child("child_opens_port_and_waits_to_be_killed", &ns);
    let mut ready = false;
    for line in lines {
        let line = line.expect("child stdout");
        if line.contains("SECGW-CHILD-READY") {
            ready = true;
            break;
        }
    }
    assert!(
        ready,
        "child never opened its port (status {:?})",
        child.0.try_wait()
    );
    let lock = ns.lock_file();
    let holder = std::fs::read_to_string(&lock).unwrap_or_else(|e| panic!("{lock}: {e}"));
    assert_eq!(holder.trim(), child.0.id().to_string(), "pid in {lock}");
    child.0.kill().expect("kill child");
    child.0.wait().expect("wait child");

    let stale = ns.xdp_prog_id();
    assert!(
        stale.is_some(),
        "killed child left no XDP program; nothing to test:\n{}",
        ns.link_a()
    );

    ns.enter();
    let mut port = open(&ns, 3, AttachMode::Skb);
    let now = ns.xdp_prog_id();
    assert!(
        now.is_some() && now != stale,
        "stale program {stale:?} not replaced (now {now:?})"
    );
    let mac_a = interface_mac(&ns.a).unwrap();
    let mac_b = interface_mac(&ns.b).unwrap();
    let peer = Peer::bind(&ns.b);
    let sent: Vec<Vec<u8>> = (0..10).map(|i| frame(mac_a, mac_b, 4, i, 100)).collect();
    for f in &sent {
        peer.send(f);
    }
    assert!(
        recv_frames(&mut port, sent.len()) == sent,
        "frames lost after replacing the stale program"
    );
    drop(port);
    let link = ns.link_a();
    assert!(
        !link.contains("xdp"),
        "XDP program left after drop:\n{link}"
    );
    assert!(
        !std::path::Path::new(&lock).exists(),
        "{lock} left after drop"
    );
}

/// (5) A second secgw on an interface in use is refused and touches
/// nothing: while this process holds a port on the interface, a child
/// process (the ignored helper below) opening one fails with the in-use
/// error naming this process's pid; the XDP program is the same one
/// afterwards and the first port still receives.
#[test]
fn second_process_on_a_held_interface_is_refused_untouched() {
    let mut ns = Netns::new("u");
    ns.enter();
    let mut port = open(&ns, 5, AttachMode::Skb);
    let id = ns.xdp_prog_id().expect("program attached");
    let lock = ns.lock_file();
    let holder = std::fs::read_to_string(&lock).unwrap_or_else(|e| panic!("{lock}: {e}"));
    assert_eq!(
        holder.trim(),
        std::process::id().to_string(),
        "pid in {lock}"
    );

    let (mut child, lines) = spawn_child("child_tries_to_open_port", &ns);
    // Read to the end: the child still prints its test summary.
    let mut result = None;
    for line in lines {
        let line = line.expect("child stdout");
        if let Some(r) = line.strip_prefix("SECGW-CHILD-RESULT: ") {
            result = Some(r.to_string());
        }
    }
    let status = child.0.wait().expect("wait child");
    let result = result.unwrap_or_else(|| panic!("child reported nothing ({status})"));
    // The holder named by its command name (this test binary), not as
    // "another secgw process" (secgw-pktgen takes the same lock).
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    let want = format!(
        "interface {} is in use by {} (pid {})",
        ns.a,
        comm.trim_end(),
        std::process::id()
    );
    assert!(result.contains(&want), "child: {result}\nwanted: {want}");
    assert!(status.success(), "child exited with {status}");

    assert_eq!(
        ns.xdp_prog_id(),
        Some(id),
        "the refused open changed the XDP program:\n{}",
        ns.link_a()
    );
    let mac_a = interface_mac(&ns.a).unwrap();
    let mac_b = interface_mac(&ns.b).unwrap();
    let peer = Peer::bind(&ns.b);
    let sent: Vec<Vec<u8>> = (0..10).map(|i| frame(mac_a, mac_b, 6, i, 100)).collect();
    for f in &sent {
        peer.send(f);
    }
    assert!(
        recv_frames(&mut port, sent.len()) == sent,
        "the first port lost frames after the refused open"
    );
    drop(port);
    assert_eq!(ns.xdp_prog_id(), None, "XDP program left after drop");
    assert!(
        !std::path::Path::new(&lock).exists(),
        "{lock} left after drop"
    );
}

// libbpf entry points for loading and attaching a minimal XDP program
// without an object file. libbpf is linked in through secgw → xsk-rs →
// libxdp-sys (static libbpf.a); signatures copied from libbpf 1.5's
// `bpf/bpf.h` and `bpf/libbpf.h` (NULL opts are allowed).
unsafe extern "C" {
    fn bpf_prog_load(
        prog_type: c_int,
        prog_name: *const c_char,
        license: *const c_char,
        insns: *const BpfInsn,
        insn_cnt: usize,
        opts: *const c_void,
    ) -> c_int;
    fn bpf_xdp_attach(ifindex: c_int, prog_fd: c_int, flags: u32, opts: *const c_void) -> c_int;
}

/// `struct bpf_insn` of `linux/bpf.h` (`regs` is `dst_reg:4, src_reg:4`).
#[repr(C)]
struct BpfInsn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// `BPF_PROG_TYPE_XDP`.
const BPF_PROG_TYPE_XDP: c_int = 6;
/// `XDP_FLAGS_SKB_MODE`.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

/// Loads `r0 = XDP_PASS; exit` as an XDP program named `name` and attaches
/// it to `dev` of the calling thread's namespace in generic mode: another
/// tool's program, as far as the port can tell. Returns its fd (the
/// attachment outlives it).
fn attach_foreign_xdp_pass(name: &str, dev: &str) -> OwnedFd {
    let insns = [
        // BPF_ALU64 | BPF_MOV | BPF_K: r0 = 2 (XDP_PASS)
        BpfInsn {
            code: 0xb7,
            regs: 0,
            off: 0,
            imm: 2,
        },
        // BPF_JMP | BPF_EXIT
        BpfInsn {
            code: 0x95,
            regs: 0,
            off: 0,
            imm: 0,
        },
    ];
    let name_c = CString::new(name).unwrap();
    let license = CString::new("Dual MIT/GPL").unwrap();
    // SAFETY: the strings and the instruction array are valid for the call;
    // NULL opts means defaults.
    let fd = unsafe {
        bpf_prog_load(
            BPF_PROG_TYPE_XDP,
            name_c.as_ptr(),
            license.as_ptr(),
            insns.as_ptr(),
            insns.len(),
            std::ptr::null(),
        )
    };
    assert!(
        fd >= 0,
        "bpf_prog_load: {}",
        std::io::Error::from_raw_os_error(-fd)
    );
    // SAFETY: `fd` is a fresh program fd owned by nobody else.
    let prog = unsafe { OwnedFd::from_raw_fd(fd) };
    let dev_c = CString::new(dev).unwrap();
    // SAFETY: NUL-terminated name valid for the call.
    let ifindex = unsafe { libc::if_nametoindex(dev_c.as_ptr()) } as c_int;
    assert!(ifindex > 0, "no interface {dev}");
    // SAFETY: valid ifindex and program fd; NULL opts means no expected
    // old program.
    let rc = unsafe {
        bpf_xdp_attach(
            ifindex,
            prog.as_raw_fd(),
            XDP_FLAGS_SKB_MODE,
            std::ptr::null(),
        )
    };
    assert_eq!(
        rc,
        0,
        "bpf_xdp_attach: {}",
        std::io::Error::from_raw_os_error(-rc)
    );
    prog
}

/// (6) Another tool's XDP program is refused and left attached: with a
/// minimal XDP_PASS program attached in generic mode, opening a port (in
/// either mode) fails naming the program and the interface, the program
/// stays, and no lock file is left; once the tool has detached its
/// program, a port opens.
#[test]
fn foreign_program_is_refused_and_left_attached() {
    let mut ns = Netns::new("f");
    ns.enter();
    let _prog = attach_foreign_xdp_pass("secgw_foreign", &ns.a);
    let id = ns.xdp_prog_id().expect("foreign program attached");
    for mode in [AttachMode::Skb, AttachMode::Native] {
        let mut cfg = AfXdpConfig::new(ns.a.clone(), 0);
        cfg.mode = mode;
        let msg = match AfXdpPort::open(8, &cfg) {
            Err(e) => e.to_string(),
            Ok(p) => panic!("{mode:?}: opened despite a foreign program: {p:?}"),
        };
        assert!(
            msg.contains("\"secgw_foreign\"")
                && msg.contains(&format!("id {id}"))
                && msg.contains(&format!("attached to {}", ns.a)),
            "{mode:?}: error does not name the program and interface: {msg}"
        );
        assert_eq!(
            ns.xdp_prog_id(),
            Some(id),
            "{mode:?}: the foreign program was touched:\n{}",
            ns.link_a()
        );
    }
    let lock = ns.lock_file();
    assert!(
        !std::path::Path::new(&lock).exists(),
        "{lock} left by a refused open"
    );

    run(
        "ip",
        &[
            "-n",
            &ns.name,
            "link",
            "set",
            "dev",
            &ns.a,
            "xdpgeneric",
            "off",
        ],
    );
    let port = open(&ns, 8, AttachMode::Skb);
    assert!(ns.xdp_prog_id().is_some_and(|p| p != id));
    drop(port);
    assert_eq!(ns.xdp_prog_id(), None, "XDP program left after drop");
}

/// In a child process started by [`spawn_child`]: enters the namespace
/// named by `SECGW_AFXDP_CHILD=netns,ifname` and returns the interface, or
/// `None` when the variable is not set (the helper was run by hand).
fn child_enter_netns() -> Option<String> {
    let spec = std::env::var("SECGW_AFXDP_CHILD").ok()?;
    let (netns, dev) = spec.split_once(',').expect("netns,ifname");
    let target = std::fs::File::open(format!("/var/run/netns/{netns}")).expect("open netns");
    // SAFETY: valid namespace fd; changes only this thread's namespace.
    let rc = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    Some(dev.to_string())
}

/// Helper for `stale_program_from_a_killed_run_is_replaced`, run in a child
/// process; does nothing unless `SECGW_AFXDP_CHILD=netns,ifname` is set.
#[test]
#[ignore = "helper run by stale_program_from_a_killed_run_is_replaced in a child process"]
fn child_opens_port_and_waits_to_be_killed() {
    let Some(dev) = child_enter_netns() else {
        return;
    };
    let port = AfXdpPort::open(9, &AfXdpConfig::new(dev, 0)).expect("child open");
    println!("\nSECGW-CHILD-READY");
    let _keep = port;
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Helper for `second_process_on_a_held_interface_is_refused_untouched`,
/// run in a child process: opens a port and prints the outcome on a
/// `SECGW-CHILD-RESULT:` line; does nothing unless `SECGW_AFXDP_CHILD` is
/// set.
#[test]
#[ignore = "helper run by second_process_on_a_held_interface_is_refused_untouched in a child process"]
fn child_tries_to_open_port() {
    let Some(dev) = child_enter_netns() else {
        return;
    };
    match AfXdpPort::open(10, &AfXdpConfig::new(dev, 0)) {
        Ok(port) => {
            println!("\nSECGW-CHILD-RESULT: opened {port:?}");
            // Leave whatever it attached for the parent to see.
            std::mem::forget(port);
        }
        Err(e) => println!("\nSECGW-CHILD-RESULT: error: {e}"),
    }
}
