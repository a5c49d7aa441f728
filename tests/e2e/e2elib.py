"""Helpers for the netns end-to-end tests (imported by conftest.py and the tests).

How traffic is captured and injected, and why:
- Every capture is a `tcpdump -w FILE.pcap` started with `ip netns exec NS` in
  the namespace that owns the interface, waited for until it says
  "listening on", stopped with SIGINT (so it flushes) and read back with
  scapy's rdpcap. A subprocess per namespace is the robust choice: no setns
  juggling in the pytest process (setns changes only the calling thread, and
  scapy opens sockets lazily), the kernel's own capture path, a kernel drop
  count we can check, and a pcap left in the artifacts folder for a post-mortem.
- Frames are injected by `ip netns exec NS python3 testbed/pcap_send.py IFACE
  FILE.pcap` (raw AF_PACKET), after scapy built them here and wrote them with
  wrpcap; datagrams from a host's own stack by small `python3 -c` programs run
  in that host's namespace.
- Captures of the gw0–gw1 link are taken in `wan`: a capture inside gw0/gw1
  does not see the frames that the XDP program redirects to AF_XDP.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTBED = REPO / "testbed"
NS_PREFIX = os.environ.get("SECGW_NS_PREFIX", "")
CONFIG_DIR = Path(os.environ.get("SECGW_CONFIG_DIR", REPO / "configs"))
# cargo's target directory: CARGO_TARGET_DIR (relative to the repository,
# where the tests run cargo), else target/.
TARGET = REPO / os.environ.get("CARGO_TARGET_DIR", "target")
ARTIFACTS = Path(os.environ.get("SECGW_E2E_ARTIFACTS", TARGET / "e2e"))

# Topology constants (testbed/lib.sh).
A_IP, B_IP = "192.0.2.10", "198.51.100.10"
GW0_OUT_IP, GW1_OUT_IP = "203.0.113.1", "203.0.113.2"
# IPv6 (hosts' addresses in the kernel; the gateways' only in configs/ep*-v6.toml).
A_IP6, B_IP6 = "2001:db8:a::10", "2001:db8:b::10"
GW0_IN_IP6, GW1_IN_IP6 = "2001:db8:a::1", "2001:db8:b::1"
GW0_OUT_IP6, GW1_OUT_IP6 = "2001:db8:ff::1", "2001:db8:ff::2"
A_MAC, B_MAC = "02:00:00:00:0a:01", "02:00:00:00:0b:01"
GW0_IN_MAC, GW0_OUT_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
GW1_IN_MAC, GW1_OUT_MAC = "02:00:00:00:01:01", "02:00:00:00:01:02"
GW_IFACES = {"gw0": ("gw0-in", "gw0-out"), "gw1": ("gw1-out", "gw1-in")}
GW_CONFIG = {"gw0": "ep0.toml", "gw1": "ep1.toml"}


def ns(name: str) -> str:
    return NS_PREFIX + name


def ns_cmd(name: str, *cmd) -> list[str]:
    return ["ip", "netns", "exec", ns(name), *map(str, cmd)]


def run(cmd, check=True, timeout=60, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n"
                             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def run_ns(name: str, *cmd, **kw) -> subprocess.CompletedProcess:
    return run(ns_cmd(name, *cmd), **kw)


def lib_sh(func: str, timeout=60, env=None) -> subprocess.CompletedProcess:
    """Run one function of testbed/lib.sh in a fresh bash."""
    e = dict(os.environ, **(env or {}))
    return run(["bash", "-c", f'source "{TESTBED}/lib.sh" && {func}'], timeout=timeout, env=e)


# --------------------------------------------------------------------------
# configuration (keys are never hard-coded: they are read from the configs)

@dataclass
class SaInfo:
    spi: int
    direction: str
    algorithm: str
    key: bytes  # AES key || 4-byte salt (RFC 4106 §8.1)
    src: str
    dst: str


def load_config(gw: str) -> dict:
    with open(CONFIG_DIR / GW_CONFIG[gw], "rb") as f:
        return tomllib.load(f)


def load_sa(gw: str, spi: int) -> SaInfo:
    cfg = load_config(gw)
    for sa in cfg.get("sa", cfg.get("sas", [])):
        if int(sa["spi"]) == spi:
            key = bytes.fromhex(str(sa["key"]).removeprefix("0x").replace(":", "").replace(" ", ""))
            return SaInfo(spi, str(sa.get("direction", "")).lower(), str(sa.get("algorithm", "")).lower(),
                          key, str(sa.get("tunnel_src", "")), str(sa.get("tunnel_dst", "")))
    raise AssertionError(f"no SA with SPI {spi} in {CONFIG_DIR / GW_CONFIG[gw]}")


def scapy_sa(info: SaInfo):
    from scapy.layers.inet import IP
    from scapy.layers.ipsec import ESP, SecurityAssociation
    # scapy's AES-GCM takes the key with the 4-byte salt appended and splits it.
    return SecurityAssociation(ESP, spi=info.spi, crypt_algo="AES-GCM", crypt_key=info.key,
                               auth_algo="NULL", tunnel_header=IP(src=info.src, dst=info.dst))


def frag_queues(host: str) -> dict:
    """Fragment queues a namespace's own stack holds: {"FRAG": n, "FRAG6": n}
    (`inuse` of /proc/net/sockstat and sockstat6, per network namespace).
    A queue left when a test ends expires later (ipfrag_time, 30 s by
    default) with an ICMP Time Exceeded (RFC 792; RFC 8200 §4.5) that
    crosses the tunnel into whatever test runs then."""
    out = {}
    for f, tag in (("/proc/net/sockstat", "FRAG:"), ("/proc/net/sockstat6", "FRAG6:")):
        for line in run_ns(host, "cat", f).stdout.splitlines():
            if line.startswith(tag):
                out[tag[:-1]] = int(line.split()[2])
        if tag[:-1] not in out:
            raise AssertionError(f"{host}: no {tag} line in {f}")
    return out


def wait_for(fn, what: str, timeout: float = 5.0):
    """Polls fn() until it returns something true; returns it, or fails
    with `what` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last: {v!r})")
        time.sleep(0.05)


def scapy_esp_frames(sa, first_seq: int, n: int, tag: str, sport: int, dports, ip_id: int, pad: int):
    """n ESP frames wan → gw1 sealed by scapy's `sa` (sequence numbers
    first_seq…), each carrying an inner UDP packet hostA → hostB from `sport`
    to `dports(i)` with the payload `tag-i` followed by `i * pad` zero bytes
    and IP id `ip_id + i`; returns (frames, inner IP packets as bytes)."""
    from scapy.compat import raw
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    inners = [raw(IP(src=A_IP, dst=B_IP, ttl=64, id=ip_id + i) / UDP(sport=sport, dport=dports(i)) /
                  Raw(f"{tag}-{i}".encode() + bytes(i * pad))) for i in range(n)]
    frames = [Ether(dst=GW1_OUT_MAC, src=GW0_OUT_MAC) / sa.encrypt(IP(p), seq_num=first_seq + i)
              for i, p in enumerate(inners)]
    return frames, inners


def captured_ips(frames, normalize: bool = False) -> list[bytes]:
    """The IP packets of captured Ethernet frames, cut to the IP total length
    (veth pads short frames); with `normalize`, TTL and checksum zeroed
    (`normalize_ttl_csum`) so packets that crossed a gateway compare."""
    from scapy.compat import raw
    out = []
    for f in frames:
        ip = raw(f)[14:]
        ip = ip[:int.from_bytes(ip[2:4], "big")]
        out.append(normalize_ttl_csum(ip) if normalize else ip)
    return out


# --------------------------------------------------------------------------
# gateways

def pktgen_binary(testbed) -> str:
    """The secgw-pktgen to use: SECGW_PKTGEN, else beside the gateway under
    test, else the repository's build (when the gateway is testbed/refgw.py,
    the Python double). Fails the test when none is there."""
    import pytest

    env = os.environ.get("SECGW_PKTGEN")
    tries = [env] if env else [str(Path(testbed["binary"]).parent / "secgw-pktgen"),
                               str(TARGET / "release" / "secgw-pktgen")]
    for p in tries:
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    pytest.fail(f"secgw-pktgen binary missing (tried {tries}; cargo build --release, or set SECGW_PKTGEN)")


class Gateway:
    """One secgw process (`secgw run`) in namespace gw0 or gw1.

    `config` is the config file to run (default: CONFIG_DIR / GW_CONFIG[name]);
    `args` are further `secgw run` arguments (e.g. a DPDK .cfg's -p/-u/--port)."""

    def __init__(self, name: str, binary: Path, workdir: Path, config: Path | None = None, args=()):
        self.name = name
        self.args = [str(a) for a in args]
        self.binary = binary
        self.config = Path(config) if config is not None else CONFIG_DIR / GW_CONFIG[name]
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stats_file = self.dir / "stats.json"
        # The control socket: per namespace prefix, so testbeds side by side
        # do not meet on the config's default /run/secgw/<name>.sock.
        self.socket = f"/run/secgw/e2e-{NS_PREFIX}{name}.sock"
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self.stdout = ""

    def start(self, timeout=20.0):
        for f in ("stats.json", "stdout.log", "stderr.log"):
            (self.dir / f).unlink(missing_ok=True)
        self.out = open(self.dir / "stdout.log", "w")
        self.err = open(self.dir / "stderr.log", "w")
        cmd = ns_cmd(self.name, self.binary, "run", "--config", self.config, *self.args,
                     "--stats-file", self.stats_file, "--socket", self.socket)
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL)
        self.returncode = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # The "ready" log line, not "a secgw is already listening there".
            if re.search(r": ready( |$)", self.stderr(), re.M):
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode} before 'ready'\n"
                                     f"cmd: {' '.join(map(str, cmd))}\n{self.logs()}")
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        raise AssertionError(f"{self.name} not ready after {timeout}s\n{self.logs()}")

    def ctl(self, *args, input: bytes | None = None, check: bool = True) -> str:
        """`secgw ctl --socket <this gateway's socket> ARGS…`; its stdout.
        `check`: a non-zero exit fails the test with the command's output."""
        r = subprocess.run([str(self.binary), "ctl", "--socket", self.socket, *map(str, args)],
                           input=input, capture_output=True, timeout=30)
        if check and r.returncode != 0:
            raise AssertionError(f"secgw ctl {' '.join(map(str, args))}: exit {r.returncode}\n"
                                 f"{r.stdout.decode(errors='replace')}{r.stderr.decode(errors='replace')}")
        return r.stdout.decode(errors="replace")

    def events(self) -> "EventLog":
        """Subscribes to this gateway's SA events (`secgw ctl events --json`)."""
        return EventLog(self)

    def stderr(self) -> str:
        try:
            return (self.dir / "stderr.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def logs(self, tail=60) -> str:
        err = self.stderr().splitlines()[-tail:]
        out = (self.dir / "stdout.log").read_text(errors="replace") if (self.dir / "stdout.log").exists() else ""
        return f"---- {self.name} stderr (last {tail} lines) ----\n" + "\n".join(err) + \
               f"\n---- {self.name} stdout ----\n{out}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10.0) -> int:
        """SIGINT, wait; returns the exit status (SIGKILL after timeout → -9)."""
        if self.proc is None:
            return self.returncode if self.returncode is not None else 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.returncode = self.proc.returncode
        self.proc = None
        self.out.close()
        self.err.close()
        self.stdout = (self.dir / "stdout.log").read_text(errors="replace")
        return self.returncode

    def stats(self) -> dict:
        for _ in range(50):
            try:
                return json.loads(self.stats_file.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                time.sleep(0.1)
        raise AssertionError(f"{self.name}: no readable stats file at {self.stats_file}\n{self.logs()}")

    def ctl_stats(self) -> dict:
        """The counters now, asked over the control socket (`ctl stats
        --json`); `stats()` reads the file the gateway writes every
        `stats_interval`."""
        return json.loads(self.ctl("stats", "--json"))

    def drop(self, reason: str) -> int:
        return int(self.stats().get("drops", {}).get(reason, 0))

    def wait_stats(self, pred, timeout=5.0) -> dict:
        """Poll the stats file until pred(stats) holds; returns the last stats."""
        deadline = time.monotonic() + timeout
        st = self.stats()
        while not pred(st) and time.monotonic() < deadline:
            time.sleep(0.2)
            st = self.stats()
        return st

    def xdp_attached(self) -> list[str]:
        """Interfaces of this gateway that still carry an XDP program."""
        bad = []
        for ifc in GW_IFACES[self.name]:
            out = run(["ip", "-n", ns(self.name), "link", "show", ifc]).stdout
            if "xdp" in out.replace(ifc, ""):
                bad.append(f"{ifc}: {out.strip()}")
        return bad


# --------------------------------------------------------------------------
# captures

class Capture:
    """tcpdump in a namespace, writing a pcap; stop() returns scapy packets
    (stop(parse=False) returns nothing: read `path` with pcap_frames, which is
    much faster than rdpcap for large captures). `buffer_kib` is tcpdump's -B."""

    def __init__(self, nsname: str, iface: str, bpf: str, path: Path, buffer_kib: int = 16384):
        self.path = Path(path).with_suffix(".pcap")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        self.errpath = self.path.with_suffix(".tcpdump.log")
        self.err = open(self.errpath, "w")
        cmd = ns_cmd(nsname, "tcpdump", "-i", iface, "-n", "--immediate-mode", "-s", "0", "-B", str(buffer_kib),
                     "-Z", "root", "-w", self.path, *bpf.split())
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while "listening on" not in self.errpath.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"tcpdump did not start: {' '.join(map(str, cmd))}\n"
                                     f"{self.errpath.read_text()}")
            time.sleep(0.05)
        self.kernel_drops = None

    def stop(self, settle=0.3, parse=True):
        from scapy.utils import rdpcap
        time.sleep(settle)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        log = self.errpath.read_text()
        for line in log.splitlines():
            if "dropped by kernel" in line:
                self.kernel_drops = int(line.split()[0])
        if not parse:
            return None
        if not self.path.exists() or self.path.stat().st_size < 24:
            return []
        return list(rdpcap(str(self.path)))


def pcap_frames(path: Path):
    """Yield (timestamp_s, frame bytes) of each record of a classic pcap file,
    parsed with struct (rdpcap takes minutes for 100k+ frames). Fails on
    anything but an Ethernet (linktype 1) pcap; a record cut short at the end
    of the file (tcpdump killed mid-write) fails too."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        raise AssertionError(f"{path}: {len(data)} bytes, no pcap header")
    magic = data[:4]
    orders = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
              b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}
    if magic not in orders:
        raise AssertionError(f"{path}: not a classic pcap file (magic {magic.hex()})")
    order, frac = orders[magic]
    linktype = struct.unpack_from(order + "I", data, 20)[0]
    if linktype != 1:
        raise AssertionError(f"{path}: link type {linktype}, expected 1 (Ethernet)")
    rec = struct.Struct(order + "IIII")
    off, n = 24, len(data)
    while off < n:
        if off + 16 > n:
            raise AssertionError(f"{path}: truncated record header at byte {off}")
        sec, sub, incl, _orig = rec.unpack_from(data, off)
        off += 16
        if off + incl > n:
            raise AssertionError(f"{path}: truncated record at byte {off} ({incl} bytes announced)")
        yield sec + sub * frac, data[off:off + incl]
        off += incl


def ping(src_ns: str, dst: str, count=5, interval=0.2, size=None):
    """ping from a namespace (`size`: data bytes, ping -s); returns
    (transmitted, received, output)."""
    import re
    extra = ["-s", size] if size is not None else []
    p = run_ns(src_ns, "ping", "-n", "-c", count, "-i", interval, "-W", "2", *extra, dst, check=False,
               timeout=count * interval + 30)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", p.stdout)
    assert m, f"unexpected ping output:\n{p.stdout}\n{p.stderr}"
    return int(m.group(1)), int(m.group(2)), p.stdout


# --------------------------------------------------------------------------
# traffic

def send_frames(nsname: str, iface: str, frames, path: Path, gap_ms=2.0):
    """Write scapy frames to a pcap and send them from `iface` in `nsname`."""
    from scapy.utils import wrpcap
    path = Path(path).with_suffix(".pcap")
    path.parent.mkdir(parents=True, exist_ok=True)
    wrpcap(str(path), frames)
    out = run_ns(nsname, sys.executable, TESTBED / "pcap_send.py", iface, path, "--gap-ms", gap_ms).stdout
    assert json.loads(out)["sent"] == len(frames)


_UDP_SENDER = textwrap.dedent("""
    import json, socket, sys, time
    src, dst, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    v6 = ":" in dst
    for d in spec:
        s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
        if v6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, d.get("tos", 0))
        else:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, d.get("tos", 0))
        if d.get("df_probe"):
            # IP_PMTUDISC_PROBE / IPV6_PMTUDISC_PROBE (3): DF set (IPv6: never
            # fragmented by the host), path MTU ignored: the datagram leaves
            # whole even after an ICMP "fragmentation needed" / Packet Too Big.
            if v6:
                s.setsockopt(socket.IPPROTO_IPV6, 23, 3)
            else:
                s.setsockopt(socket.IPPROTO_IP, 10, 3)
        if d.get("no_df"):
            # IP_PMTUDISC_DONT (0): DF clear (the host itself never
            # fragments what fits its own link).
            s.setsockopt(socket.IPPROTO_IP, 10, 0)
        s.bind((src, d["sport"]))
        s.sendto(bytes.fromhex(d["payload"]), (dst, d["dport"]))
        s.close()
        time.sleep(d.get("gap", 0.02))
""")


def send_udp(nsname: str, src: str, dst: str, datagrams: list[dict]):
    """Send datagrams from a host's own stack (IPv4, or IPv6 when `dst` has a ':'):
    each {sport, dport, payload: bytes, tos (IPv6: traffic class), gap, df_probe (DF
    set / never fragmented by the host, and the path MTU ignored), no_df (IPv4: DF
    clear)}."""
    spec = [dict(d, payload=d["payload"].hex()) for d in datagrams]
    run_ns(nsname, sys.executable, "-c", _UDP_SENDER, src, dst, json.dumps(spec))


def nonzero_drops(st: dict) -> dict:
    """The drop reasons of stats `st` (`ctl stats --json` or the stats file)
    whose counters moved."""
    return {k: v for k, v in st.get("drops", {}).items() if v}


def ip_checksum_ok(raw_ip_header: bytes) -> bool:
    s = 0
    for i in range(0, len(raw_ip_header), 2):
        s += (raw_ip_header[i] << 8) + raw_ip_header[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def normalize_ttl_csum(raw_ip: bytes) -> bytes:
    """The IPv4 packet with TTL and header checksum zeroed (for comparisons)."""
    b = bytearray(raw_ip)
    b[8] = 0
    b[10:12] = b"\0\0"
    return bytes(b)


def in_net(addr: str, net: str) -> bool:
    return ipaddress.ip_address(addr) in ipaddress.ip_network(net)


class EventLog:
    """`secgw ctl events --json` running against one gateway; `stop()`
    returns the events received (dicts)."""

    def __init__(self, gw: "Gateway"):
        self.proc = subprocess.Popen([str(gw.binary), "ctl", "--socket", gw.socket, "events", "--json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.3)  # subscribed before the caller makes things happen
        if self.proc.poll() is not None:
            raise AssertionError(f"secgw ctl events exited {self.proc.returncode}: {self.proc.stderr.read().decode()}")

    def stop(self, settle: float = 0.5) -> list:
        time.sleep(settle)
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


_UDP_SINK = textwrap.dedent("""
    import json, select, socket, sys, time
    s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[1], int(sys.argv[2])))
    print("ready", flush=True)
    got = []
    deadline = time.monotonic() + float(sys.argv[3])
    while time.monotonic() < deadline:  # until a line on stdin
        r, _, _ = select.select([s, sys.stdin], [], [], 0.1)
        if s in r:
            data, addr = s.recvfrom(65535)
            got.append({"src": addr[0], "sport": addr[1], "len": len(data), "data": data.hex()})
        elif sys.stdin in r:
            break
    print(json.dumps(got), flush=True)
""")


_UDP_STEPS = textwrap.dedent("""
    import json, socket, sys, time
    IP_MTU_DISCOVER, IP_MTU, IPV6_MTU = 10, 14, 24
    spec = json.loads(sys.argv[1])
    v6 = ":" in spec["dst"]
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    if "pmtudisc" in spec:
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, spec["pmtudisc"])
    s.bind((spec["src"], spec["sport"]))
    s.connect((spec["dst"], spec["dport"]))
    def mtu():
        return s.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU) if v6 else s.getsockopt(socket.IPPROTO_IP, IP_MTU)
    def payload(st, i):
        if "payload" in st:
            return bytes.fromhex(st["payload"])
        tag = ("pmtu-%d-%d-%d-" % (spec["sport"], i, st["send"])).encode()
        return tag + bytes((i * 7 + j) & 0xFF for j in range(st["send"] - (48 if v6 else 28) - len(tag)))
    out = []
    for i, st in enumerate(spec["steps"]):
        r = dict(st)
        r.pop("payload", None)
        if "send" in st or "payload" in st:
            errs = []
            for _ in range(1 + st.get("retry", 0)):
                try:
                    s.send(payload(st, i))
                    errs.append(0)
                    break
                except OSError as e:
                    errs.append(e.errno)
            r["errno"] = errs[-1]
            r["errnos"] = errs
        elif "wait_mtu_below" in st:
            deadline = time.monotonic() + st["timeout"]
            while mtu() >= st["wait_mtu_below"] and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(spec.get("settle", 0))
            r["value"] = mtu()
        elif "so_error" in st:
            r["value"] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        elif "ip_mtu" in st:
            r["value"] = mtu()
        elif "sleep" in st:
            time.sleep(st["sleep"])
        out.append(r)
    s.close()
    print(json.dumps(out))
""")


def udp_steps(ns: str, spec: dict, timeout: float = 60) -> list:
    """Runs `spec["steps"]` in namespace `ns` on one UDP socket bound to
    [spec src]:sport and connected to [spec dst]:dport (IPv4 or IPv6, by
    the address; kept open throughout: Linux applies an ICMP "fragmentation
    needed" / Packet Too Big to the route only while the socket it is about
    exists). Optional `pmtudisc` (IPv4 IP_MTU_DISCOVER value) and `settle`
    (seconds to wait after a `wait_mtu_below` step: the error handler sets
    sk_err after the path MTU). Steps: {"send": IP packet length} (a
    generated payload) or {"payload": hex}, either with "retry": n;
    {"wait_mtu_below": m, "timeout": s}; {"so_error": 1}; {"ip_mtu": 1} (the
    socket's path MTU); {"sleep": s}. Returns each step (without its
    payload) with its result: "errno" / "errnos" or "value"."""
    return json.loads(run_ns(ns, sys.executable, "-c", _UDP_STEPS, json.dumps(spec), timeout=timeout).stdout)


class UdpSink:
    """A UDP socket bound in namespace `ns` on addr:port (IPv4 or IPv6) for
    at most `limit_s` seconds: what the kernel delivers (reassembled) is
    recorded, and datagrams to it draw no ICMP port unreachable. stop()
    returns the datagrams received: [{src, sport, len, data (hex)}]."""

    def __init__(self, ns: str, addr: str, port: int, limit_s: float = 60):
        self.proc = subprocess.Popen(ns_cmd(ns, sys.executable, "-c", _UDP_SINK, addr, port, limit_s),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"{ns} socket on port {port}: {line!r} {self.proc.stderr.read()}"

    def stop(self) -> list:
        out, err = self.proc.communicate("stop\n", timeout=10)
        assert self.proc.returncode == 0, f"socket: exit {self.proc.returncode}\n{err}"
        return json.loads(out)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Captures:
    """The captures a test started (each a `Capture` into `artifacts`);
    stop_all() stops any still running (for a `finally`)."""

    def __init__(self, artifacts):
        self.artifacts = artifacts
        self.started: list = []

    def start(self, nsname, iface, bpf, name):
        c = Capture(nsname, iface, bpf, self.artifacts / name)
        self.started.append(c)
        return c

    def stop_all(self):
        for c in self.started:
            if c.proc.poll() is None:
                c.stop(settle=0, parse=False)


# --------------------------------------------------------------------------
# numbered UDP streams (testbed/udp_stream.py)

def start_sink(artifacts: Path, host: str, bind: str, port: int, stream: int, count: int, timeout: float,
               idle: float = 2):
    """A counting sink in namespace `host` for datagrams 0..count-1 of
    `stream` on bind:port, returned once its socket is bound; it prints
    its JSON when done (`result`), or `idle` seconds after its last
    datagram."""
    ready = artifacts / f"sink-{port}-{stream}.ready"
    ready.unlink(missing_ok=True)
    p = subprocess.Popen(
        ns_cmd(host, sys.executable, TESTBED / "udp_stream.py", "sink", "--bind", bind, "--port", port,
           "--count", count, "--stream", stream, "--timeout", timeout, "--idle", idle, "--ready-file", ready),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 15
    try:
        while not ready.exists():
            assert p.poll() is None, f"sink {host}:{port} died: {p.communicate()}"
            assert time.monotonic() < deadline, f"sink {host}:{port} not ready after 15 s"
            time.sleep(0.02)
    except BaseException:
        # Not handed to the caller, so not stopped by its cleanup: a sink
        # left running would hold the port for the next test.
        p.kill()
        p.wait()
        raise
    return p


def start_sender(host: str, src: str, dst: str, sport: int, dport: int, stream: int, count: int, rate: float):
    """A paced sender of `count` numbered datagrams at `rate` per second."""
    return subprocess.Popen(
        ns_cmd(host, sys.executable, TESTBED / "udp_stream.py", "send", "--src", src, "--sport", sport,
           "--dst", dst, "--port", dport, "--count", count, "--rate", rate, "--stream", stream),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p: subprocess.Popen, what: str, timeout: float) -> dict:
    """The JSON a sender or sink printed (fails the test if it failed)."""
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"{what} failed ({p.returncode}): {out}\n{err}"
    return json.loads(out)


def exact(sink: dict, sent: int) -> bool:
    """Every one of `sent` datagrams arrived once, nothing else."""
    return (sink["received"] == sent and sink["distinct"] == sent and sink["missing"] == 0
            and sink["duplicates"] == 0 and sink["foreign"] == 0 and sink["out_of_range"] == 0)
