"""secgw-pktgen on the testbed (root, netns):

- plain UDP, a few flows at a low rate, hostA → gw0 → gw1 → hostB's sink:
  nothing lost, every flow's count equal to the generator's, latency figures
  present and ordered (p50 ≤ p99 ≤ max), `report` combines the two JSONs;
- ESP mode straight into gw1 (the generator stands where gw0 would, on
  gw0-out, with ep0.toml's outbound SA 1001 towards gw1): gw1 decrypts
  everything, nothing lost at the sink, no drop at gw1;
- ESP mode of the sink (topology (a)): hostA → gw0 → a sink on gw1-out that
  decrypts with ep1.toml's inbound SAs;
- the decrypting sink applies gw1's inbound policy check: inner flows
  outside ep1.toml's policy for SA 1001 are inner_policy_mismatch, not
  received;
- `--queues` past the veth's 2 queues, and a second sink on an interface a
  running sink holds, are refused at once, the holder named;
- frames checked by implementations we did not write: a tcpdump capture of
  generated frames read by scapy (Ethernet/IPv4/UDP with valid checksums,
  our payload), and in ESP mode decrypted by scapy with the config's key.

The pktgen binary is SECGW_PKTGEN, else `secgw-pktgen` beside the secgw
binary under test (SECGW_BIN), else target/release/secgw-pktgen."""
from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

import pytest

import e2elib as L

MAGIC = b"SGPG"
RATE = 20_000
DURATION = 2.0
WARMUP = 0.5


class Sink:
    """`secgw-pktgen sink` in the background; result() waits and returns its JSON."""

    def __init__(self, binary, nsname, iface, workdir: Path, duration, gen_json: Path | None, extra=()):
        self.json = workdir / "sink.json"
        self.json.unlink(missing_ok=True)
        self.errpath = workdir / "sink.stderr"
        self.out = open(workdir / "sink.stdout", "w")
        self.err = open(self.errpath, "w")
        cmd = L.ns_cmd(nsname, binary, "sink", "--iface", iface, "--duration", duration, "--idle-sleep-us", 20,
                       "--json", self.json, *extra)
        if gen_json is not None:
            cmd += ["--gen-json", str(gen_json)]
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while "listening" not in self.errpath.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"sink did not start: {' '.join(map(str, cmd))}\n{self.errpath.read_text()}")
            time.sleep(0.05)

    def result(self, timeout=30) -> dict:
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.out.close()
            self.err.close()
        assert rc == 0, f"sink exited {rc}\n{self.errpath.read_text()}"
        return json.loads(self.json.read_text())


def gen(binary, nsname, iface, workdir: Path, src_mac, dst_mac, flows=4, size="512", rate=RATE,
        duration=DURATION, warmup=WARMUP, extra=(), dst=L.B_IP) -> dict:
    out = workdir / "gen.json"
    out.unlink(missing_ok=True)
    p = L.run(L.ns_cmd(nsname, binary, "gen", "--iface", iface, "--src-mac", src_mac, "--dst-mac", dst_mac,
                       "--src", L.A_IP, "--dst", dst, "--flows", flows, "--size", size, "--rate", rate,
                       "--duration", duration, "--warmup", warmup, "--json", out, *extra),
              timeout=duration + warmup + 30)
    (workdir / "gen.stdout").write_text(p.stdout + p.stderr)
    return json.loads(out.read_text())


def check_no_loss(g: dict, s: dict, flows: int):
    assert g["tx_failed"] == 0 and g["esp_errors"] == 0, g
    assert g["measured_tx_packets"] > 0.5 * RATE * DURATION, f"generator sent too little: {g}"
    assert g["tx_packets"] > g["measured_tx_packets"], "warm-up packets were sent too"
    assert s["loss_from"] == "generator"
    assert s["lost"] == 0, f"sink lost {s['lost']} of {s['expected']}: {json.dumps(s, indent=1)[:3000]}"
    assert (s["duplicates"], s["flow_out_of_range"]) == (0, 0)
    sent = {f["flow"]: f["measured_tx_packets"] for f in g["flows"]}
    got = {f["flow"]: f["packets"] for f in s["flows"]}
    assert len(sent) == flows and got == sent, f"per-flow counts differ: sent {sent}, received {got}"
    assert s["packets"] == g["measured_tx_packets"]
    for lat in [s["latency_us"]] + [f["latency_us"] for f in s["flows"]]:
        assert lat["samples"] > 0
        assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"], lat
        # One-way through veths and gateways on this host: well under 10 s.
        assert lat["max"] < 10e6, lat
    assert s["measured_s"] > 0.5 * DURATION and s["rate_pps"] > 0 and s["gbps"] > 0, s


def test_plain_udp_through_gw0_and_gw1(gws, testbed, artifacts):
    binary = L.pktgen_binary(testbed)
    sink = Sink(binary, "hostB", "b0", artifacts, duration=WARMUP + DURATION + 2.5, gen_json=artifacts / "gen.json")
    g = gen(binary, "hostA", "a0", artifacts, L.A_MAC, L.GW0_IN_MAC)
    s = sink.result()
    check_no_loss(g, s, flows=4)
    # Every measured frame is 14 + 512 bytes at the sink.
    assert s["bytes"] == s["packets"] * 526
    assert gws["gw0"].stats() and gws["gw1"].stats()
    r = L.run([binary, "report", "--gen", artifacts / "gen.json", "--sink", artifacts / "sink.json",
               "--json", artifacts / "report.json"])
    c = json.loads((artifacts / "report.json").read_text())
    assert (c["tx_packets"], c["rx_packets"], c["lost"], c["loss_pct"]) == (g["measured_tx_packets"], s["packets"], 0, 0.0)
    assert c["mpps"] > 0 and c["p50_us"] <= c["p99_us"] <= c["max_us"]
    # One run, a sink listening before and after the generator: nothing to warn about.
    assert c["warnings"] == [], c["warnings"]
    assert "Mpps" in r.stdout and str(s["packets"]) in r.stdout, r.stdout


def _gw1_alone(testbed, artifacts) -> L.Gateway:
    g = L.Gateway("gw1", testbed["binary"], artifacts)
    g.start()
    return g


def test_esp_generator_into_gw1(testbed, artifacts):
    """The generator takes gw0's place on gw0-out with ep0.toml's SA 1001."""
    binary = L.pktgen_binary(testbed)
    gw1 = _gw1_alone(testbed, artifacts)
    try:
        sink = Sink(binary, "hostB", "b0", artifacts, duration=WARMUP + DURATION + 2.5, gen_json=artifacts / "gen.json")
        g = gen(binary, "gw0", "gw0-out", artifacts, L.GW0_OUT_MAC, L.GW1_OUT_MAC, flows=3, size="1400",
                extra=["--esp-config", L.CONFIG_DIR / "ep0.toml", "--esp-spi", 1001])
        s = sink.result()
        assert g["esp"] is True
        check_no_loss(g, s, flows=3)
        st = gw1.stats()
        drops = {k: v for k, v in st.get("drops", {}).items() if v}
        # Nothing of ours dropped (a stray IPv6/ARP frame of the hosts would
        # be not_for_us at most).
        assert not {k: v for k, v in drops.items() if k != "not_for_us"}, f"gw1 dropped: {drops}"
    finally:
        rc = gw1.stop()
    assert rc == 0, gw1.logs()


def test_esp_sink_after_gw0(testbed, artifacts):
    """Topology (a): the sink stands where gw1 would and decrypts with ep1.toml."""
    binary = L.pktgen_binary(testbed)
    gw0 = L.Gateway("gw0", testbed["binary"], artifacts)
    gw0.start()
    try:
        sink = Sink(binary, "gw1", "gw1-out", artifacts, duration=WARMUP + DURATION + 2.5,
                    gen_json=artifacts / "gen.json", extra=["--esp-config", L.CONFIG_DIR / "ep1.toml"])
        g = gen(binary, "hostA", "a0", artifacts, L.A_MAC, L.GW0_IN_MAC, flows=2, size="1400")
        s = sink.result()
        check_no_loss(g, s, flows=2)
        assert s["esp_decrypted"] == s["packets"] + s["warmup_packets"], s
        assert s["esp_failed"] == 0, s["esp_failures"]
    finally:
        rc = gw0.stop()
    assert rc == 0, gw0.logs()


def test_esp_sink_applies_the_inbound_policy_check(testbed, artifacts):
    """ESP from gw0-out straight to a decrypting sink on gw1-out: inner flows
    that ep1.toml's inbound policy for SA 1001 does not admit (destination
    outside 198.51.100.0/24) decrypt, but are counted as gw1 would drop
    them (inner_policy_mismatch), never as received."""
    binary = L.pktgen_binary(testbed)
    sink = Sink(binary, "gw1", "gw1-out", artifacts, duration=0.3 + 0.5 + 2.0,
                gen_json=artifacts / "gen.json", extra=["--esp-config", L.CONFIG_DIR / "ep1.toml"])
    g = gen(binary, "gw0", "gw0-out", artifacts, L.GW0_OUT_MAC, L.GW1_OUT_MAC, flows=2, size="200", rate=2000,
            duration=0.5, warmup=0.3, dst="203.0.113.9",
            extra=["--esp-config", L.CONFIG_DIR / "ep0.toml", "--esp-spi", 1001])
    s = sink.result()
    assert g["esp_errors"] == 0 and g["tx_packets"] > 100, g
    assert s["esp_failures"] == {"inner_policy_mismatch": g["tx_packets"]}, s["esp_failures"]
    assert (s["esp_decrypted"], s["packets"], s["warmup_packets"]) == (0, 0, 0), s
    assert s["lost"] == g["measured_tx_packets"], s
    # The generator said so before sending; `report` says why all is lost.
    assert "inbound policy check will drop them" in (artifacts / "gen.stdout").read_text()
    r = L.run([binary, "report", "--gen", artifacts / "gen.json", "--sink", artifacts / "sink.json"])
    assert "inner_policy_mismatch" in r.stderr and "100.0000" in r.stdout, (r.stdout, r.stderr)


def test_esp_generator_stops_when_the_sequence_numbers_run_out(testbed, artifacts):
    """ESP generator on SA 1001 (no ESN) from 2 below the end of its
    sequence space, at full speed for 20 s: the last two numbers are sent,
    then the run stops at once (RFC 4303 §3.3.3: a sender never cycles),
    exit 1 with a message that says so."""
    binary = L.pktgen_binary(testbed)
    out = artifacts / "gen.json"
    t = time.monotonic()
    p = L.run(L.ns_cmd("gw0", binary, "gen", "--iface", "gw0-out", "--src-mac", L.GW0_OUT_MAC, "--dst-mac", L.GW1_OUT_MAC,
                       "--src", L.A_IP, "--dst", L.B_IP, "--flows", 1, "--size", "200", "--rate", 0,
                       "--duration", 20, "--warmup", 0, "--json", out,
                       "--esp-config", L.CONFIG_DIR / "ep0.toml", "--esp-spi", 1001, "--esp-seq-start", 4294967294),
              check=False, timeout=60)
    took = time.monotonic() - t
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "SA 1001: sequence numbers exhausted after 2 packets (last sent: 4294967295)" in p.stderr, p.stderr
    g = json.loads(out.read_text())
    assert g["esp_seq_exhausted"] and g["tx_packets"] == 2 and 1 <= g["esp_errors"] <= 64, g
    assert took < 15, f"the generator ran on for {took:.1f} s after its sequence space ended"


def test_queues_past_the_interface_and_a_running_holder_are_refused_at_once(testbed, artifacts):
    binary = L.pktgen_binary(testbed)
    # The testbed's veths have 2 queues.
    t = time.monotonic()
    p = L.run(L.ns_cmd("hostB", binary, "sink", "--iface", "b0", "--duration", 1, "--queues", 3), check=False)
    assert p.returncode != 0 and "--queues 3: b0 has 2 queues" in p.stderr, p.stderr
    assert "os error" not in p.stderr, p.stderr
    # A running sink holds b0: a second one is refused at once, naming it.
    sink = Sink(binary, "hostB", "b0", artifacts, duration=4, gen_json=None)
    try:
        t = time.monotonic()
        p = L.run(L.ns_cmd("hostB", binary, "sink", "--iface", "b0", "--duration", 1, "--json", artifacts / "second.json"),
                  check=False, timeout=30)
        took = time.monotonic() - t
        assert p.returncode != 0, p.stderr
        assert f"in use by secgw-pktgen (pid {sink.proc.pid})" in p.stderr, p.stderr
        assert "secgw process" not in p.stderr, p.stderr
        # No ~2 s of retries for a holder that is running (was: 2 s).
        assert took < 1.5, f"took {took:.2f} s: {p.stderr}"
    finally:
        sink.result()


def _payload_fields(udp_payload: bytes):
    assert udp_payload[:4] == MAGIC, udp_payload[:32].hex()
    flow, seq, tx_ns, flags = struct.unpack("!IQQI", udp_payload[4:28])
    assert not any(udp_payload[28:]), "payload after the header is zero"
    return flow, seq, tx_ns, flags


@pytest.mark.parametrize("esp", [False, True], ids=["plain", "esp"])
def test_generated_frames_read_by_scapy(testbed, artifacts, esp):
    """No gateway runs: frames from a0 are captured by tcpdump on gw0-in."""
    from scapy.compat import raw
    from scapy.layers.inet import IP, UDP
    from scapy.layers.ipsec import ESP
    from scapy.layers.l2 import Ether

    binary = L.pktgen_binary(testbed)
    extra = ["--esp-config", L.CONFIG_DIR / "ep0.toml", "--esp-spi", 1001] if esp else []
    # hostA's own stack (ARP, IPv6) is left out by the filter.
    cap = L.Capture("gw0", "gw0-in", f"ether src {L.A_MAC} and ip and (udp dst port 5001 or ip proto 50)",
                    artifacts / "gw0-in")
    g = gen(binary, "hostA", "a0", artifacts, L.A_MAC, L.GW0_IN_MAC, flows=2, size="200", rate=1000,
            duration=0.2, warmup=0.1, extra=extra)
    frames = cap.stop(settle=0.5)
    assert len(frames) == g["tx_packets"] > 100, (len(frames), g)
    seqs = {0: [], 1: []}
    esp_seqs = []
    sa = L.scapy_sa(L.load_sa("gw0", 1001)) if esp else None
    for f in frames:
        assert f[Ether].dst == L.GW0_IN_MAC and f[Ether].src == L.A_MAC
        ip = f[IP]
        # scapy recomputes the checksums of a copy with them deleted.
        if esp:
            assert ip.proto == 50 and (ip.src, ip.dst) == (L.GW0_OUT_IP, L.GW1_OUT_IP), ip.summary()
            assert f[ESP].spi == 1001
            esp_seqs.append(f[ESP].seq)
            inner = sa.decrypt(IP(raw(ip)))
            assert inner.proto == 17, inner.summary()
            ip = IP(raw(inner))
        clean = IP(raw(ip))
        del clean.chksum
        del clean[UDP].chksum
        rebuilt = IP(raw(clean))
        assert ip.chksum == rebuilt.chksum, "IPv4 header checksum"
        assert ip[UDP].chksum == rebuilt[UDP].chksum and ip[UDP].chksum != 0, "UDP checksum"
        assert (ip.src, ip.dst, ip.len, ip.ttl) == (L.A_IP, L.B_IP, 200, 64)
        flow, seq, tx_ns, flags = _payload_fields(bytes(ip[UDP].payload))
        assert ip[UDP].sport == 40000 + flow and ip[UDP].dport == 5001
        assert tx_ns > 0 and flags in (0, 1)
        seqs[flow].append((seq, flags))
    for flow, got in seqs.items():
        assert [s for s, _ in got] == list(range(len(got))), f"flow {flow}: sequence numbers {got[:10]}…"
        flags = [fl for _, fl in got]
        assert flags == sorted(flags) and flags[0] == 0 and flags[-1] == 1, "warm-up first, then measured"
    if esp:
        assert esp_seqs == list(range(1, len(frames) + 1)), "ESP sequence numbers from 1, in order"
