"""Plain forwarding through the tunnel: ping both ways, TTL expiry at each
gateway seen by ping, 10,000-datagram UDP
streams both ways with no loss and no duplicates, and the wan carries nothing
but IPv4 ESP."""
import json
import os
import re
import subprocess
import sys
import time

import e2elib as L

STREAM_COUNT = 10_000
PPS = float(os.environ.get("SECGW_E2E_PPS", "5000"))


def ping(src_ns, dst, count=5):
    p = L.run_ns(src_ns, "ping", "-n", "-c", count, "-i", "0.2", "-W", "2", dst, check=False)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", p.stdout)
    assert m, f"unexpected ping output:\n{p.stdout}\n{p.stderr}"
    return int(m.group(1)), int(m.group(2)), p.stdout


def test_ping_hostA_to_hostB(gws):
    sent, received, out = ping("hostA", L.B_IP)
    assert (sent, received) == (5, 5), out


def test_ping_hostB_to_hostA(gws):
    sent, received, out = ping("hostB", L.A_IP)
    assert (sent, received) == (5, 5), out


def test_ttl_exceeded_is_reported(gws):
    """Linux's ping (not our parser) sees the gateways as routers: TTL 1
    from hostA expires at gw0 (Time Exceeded from its inside address,
    192.0.2.1), TTL 2 at gw1 after decryption (from gw1's inside address,
    198.51.100.1, sent back through the tunnel); TTL 3 arrives."""
    for ttl, router in [(1, "192.0.2.1"), (2, "198.51.100.1")]:
        p = L.run_ns("hostA", "ping", "-n", "-c", 1, "-t", ttl, "-W", "2", L.B_IP, check=False)
        assert re.search(rf"From {re.escape(router)} icmp_seq=1 Time to live exceeded", p.stdout), \
            f"ttl {ttl}: {p.stdout}{p.stderr}"
    p = L.run_ns("hostA", "ping", "-n", "-c", 1, "-t", 3, "-W", "2", L.B_IP, check=False)
    assert " 1 received" in p.stdout, p.stdout


def udp_stream(src_ns, src, dst_ns, dst, port, artifacts, stream_id):
    """Run sink in dst_ns and paced sender in src_ns; return (sender, sink) JSON."""
    ready = artifacts / f"sink-{port}.ready"
    ready.unlink(missing_ok=True)
    sink = subprocess.Popen(
        L.ns_cmd(dst_ns, sys.executable, L.TESTBED / "udp_stream.py", "sink", "--bind", dst,
                 "--port", port, "--count", STREAM_COUNT, "--stream", stream_id,
                 "--timeout", STREAM_COUNT / PPS + 30, "--idle", 3, "--ready-file", ready),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert sink.poll() is None, f"sink died: {sink.communicate()}"
            assert time.monotonic() < deadline, "sink not ready after 10 s"
            time.sleep(0.05)
        snd = L.run_ns(src_ns, sys.executable, L.TESTBED / "udp_stream.py", "send", "--src", src,
                       "--dst", dst, "--port", port, "--count", STREAM_COUNT, "--rate", PPS,
                       "--stream", stream_id, timeout=STREAM_COUNT / PPS + 60)
        out, err = sink.communicate(timeout=STREAM_COUNT / PPS + 60)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    (artifacts / f"stream-{port}.json").write_text(snd.stdout + out)
    assert sink.returncode == 0, err
    return json.loads(snd.stdout), json.loads(out)


def test_udp_streams_and_wan_carries_only_esp(gws, artifacts):
    from scapy.layers.inet import IP
    from scapy.layers.ipsec import ESP
    from scapy.layers.l2 import Ether

    # br0 is promiscuous while tcpdump runs, so it sees every frame the bridge
    # forwards between wan0 (gw0) and wan1 (gw1). A capture that tcpdump
    # itself could not keep up with (kernel drops: a loaded 2-core CI
    # machine, seen once in session 40 with every stream packet delivered)
    # proves nothing about the wan: the streams run again, once, under a
    # new capture; every stream is checked each time.
    for attempt in (1, 2):
        cap = L.Capture("wan", "br0", "", artifacts / f"wan-{attempt}")
        a2b = udp_stream("hostA", L.A_IP, "hostB", L.B_IP, 5001, artifacts, 2 * attempt - 1)
        b2a = udp_stream("hostB", L.B_IP, "hostA", L.A_IP, 5002, artifacts, 2 * attempt)
        frames = cap.stop(settle=1.0)

        for name, (snd, sink) in {"hostA->hostB": a2b, "hostB->hostA": b2a}.items():
            assert snd["sent"] == STREAM_COUNT and snd["errors"] == 0, f"{name} sender: {snd}"
            assert sink["missing"] == 0 and sink["duplicates"] == 0 and \
                sink["distinct"] == STREAM_COUNT, f"{name} sink: {sink}\nsender: {snd}"
        if cap.kernel_drops == 0:
            break
        print(f"attempt {attempt}: tcpdump on br0 dropped {cap.kernel_drops} frames; capturing again")

    assert cap.kernel_drops == 0, f"tcpdump on br0 dropped {cap.kernel_drops} frames; the count below is unreliable"
    not_esp = [f for f in frames if not (Ether in f and f[Ether].type == 0x0800 and IP in f and f[IP].proto == 50)]
    assert not not_esp, (f"{len(not_esp)} of {len(frames)} frames on the wan are not IPv4 ESP, e.g.:\n"
                         + "\n".join(f.summary() for f in not_esp[:10]))
    fwd = [f for f in frames if f[IP].src == L.GW0_OUT_IP and f[IP].dst == L.GW1_OUT_IP and f[ESP].spi == 1001]
    rev = [f for f in frames if f[IP].src == L.GW1_OUT_IP and f[IP].dst == L.GW0_OUT_IP and f[ESP].spi == 1002]
    assert len(fwd) >= STREAM_COUNT, f"only {len(fwd)} ESP frames gw0->gw1 SPI 1001 on the wan"
    assert len(rev) >= STREAM_COUNT, f"only {len(rev)} ESP frames gw1->gw0 SPI 1002 on the wan"
    assert len(frames) >= 2 * STREAM_COUNT

    # The gateways' own counters agree with what crossed the wan.
    time.sleep(1.2)
    for gw, spi, direction in (("gw0", 1001, "outbound"), ("gw1", 1001, "inbound"),
                               ("gw1", 1002, "outbound"), ("gw0", 1002, "inbound")):
        st = gws[gw].stats()
        sas = [s for s in st.get("sas", []) if s.get("spi") == spi and s.get("direction") == direction]
        assert sas, f"{gw} stats have no {direction} SA {spi}: {st}"
        assert sas[0]["packets"] >= STREAM_COUNT, f"{gw} SA {spi} {direction}: {sas[0]}"
        assert sas[0].get("errors", 0) == 0, f"{gw} SA {spi} {direction}: {sas[0]}"
