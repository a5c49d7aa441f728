"""A gateway off its core: `[[port]] ring_size` decides what waits for it.

gw0 (configs/ep0.toml, one worker) is stopped with SIGSTOP for STALL_S in
the middle of a numbered UDP stream hostA -> hostB at RATE packets/s, then
continued: about RATE x STALL_S = 5,000 frames arrive at gw0-in while no
thread of gw0 runs. They wait in the worker's AF_XDP rx ring, the kernel
dropping what does not fit (counted in the port's `rx_dropped_backend`).

- ring_size = 16384 (deep, the largest): every datagram arrives exactly
  once, gw0's `rx_dropped_backend` stays 0. The default, 2048, could not
  hold the stall: the test checks that the stream put more than 2 x 2048
  frames into it, so it would fail on a ring that silently stayed at the
  default. It also checks that SIGSTOP to SIGCONT took less than half the
  ring at the sender's rate, so a machine that holds the test itself off
  its core for longer fails with that message, not as a loss.
- ring_size = 1024 (shallow): datagrams are lost, and every one is counted:
  the sink's missing == gw0's `rx_dropped_backend` (no other drop counter
  of either gateway moves), and the loss is at least the stall's frames
  minus the ring.

gw1 runs with ring_size = 8192 in both cases: once gw0 continues it sends
the stall's backlog at its full rate. Run as root in the testbed.
"""
from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

import e2elib as L
from e2elib import exact, result, start_sender, start_sink

RATE = 20000
STALL_S = 0.25
LEAD_S = 0.8          # stream before the stall
DURATION_S = 2.0
DEFAULT_RING = 2048
DEEP_RING = 16384
SPORT, DPORT = 41010, 5010


def with_ring(gw: str, ring: int, artifacts: Path) -> Path:
    """configs/ep0.toml or ep1.toml with `ring_size = ring` in every
    [[port]] table."""
    src = L.CONFIG_DIR / L.GW_CONFIG[gw]
    text = src.read_text()
    n = len(re.findall(r"(?m)^\[\[port\]\]\s*$", text))
    assert n >= 2 and "ring_size" not in text, f"{src}: {n} [[port]] tables, or ring_size already set"
    text = re.sub(r"(?m)^\[\[port\]\]\s*$", f"[[port]]\nring_size = {ring}", text)
    dst = artifacts / f"{gw}-ring{ring}.toml"
    dst.write_text(text)
    return dst


def port(st: dict, name: str) -> dict:
    found = [p for p in st["ports"] if p["name"] == name]
    assert len(found) == 1, st["ports"]
    return found[0]


def drops(st: dict) -> dict:
    """Every nonzero drop counter of a gateway: its drop reasons and each
    port's `drops` and `rx_dropped_backend`."""
    out = {f"drop {k}": v for k, v in st["drops"].items() if v}
    for p in st["ports"]:
        for k in ("drops", "rx_dropped_backend"):
            if p.get(k):
                out[f"{p['name']} {k}"] = p[k]
    return out


def state(pid: int) -> str:
    """The process state letter from /proc/PID/stat ('T' = stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def rx_dropped(gw) -> int:
    return port(gw.ctl_stats(), "inside")["rx_dropped_backend"]


@pytest.mark.parametrize("ring", [DEEP_RING, 1024], ids=["deep", "shallow"])
def test_stall(ring, start_gws, artifacts):
    gws = start_gws({"gw0": with_ring("gw0", ring, artifacts), "gw1": with_ring("gw1", 8192, artifacts)})
    gw0 = gws["gw0"]
    before = {n: g.ctl_stats() for n, g in gws.items()}
    count = int(RATE * DURATION_S)
    sink = start_sink(artifacts, "hostB", L.B_IP, DPORT, 7, count, DURATION_S + 30)
    sender = start_sender("hostA", L.A_IP, L.B_IP, SPORT, DPORT, 7, count, RATE)
    pid = gw0.proc.pid
    try:
        time.sleep(LEAD_S)
        t_kill = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        while state(pid) != "T":
            assert time.monotonic() - t_kill < 1, f"gw0 (pid {pid}) not stopped"
            time.sleep(0.001)
        t_stopped = time.monotonic()
        time.sleep(STALL_S)
        t_sleep_end = time.monotonic()
    finally:
        os.kill(pid, signal.SIGCONT)
    t_cont = time.monotonic()
    snd = result(sender, "sender", DURATION_S + 60)
    got = result(sink, "sink", DURATION_S + 60)
    # The port's kernel counters reach the stats every 8192 polls of the
    # worker: wait for them to settle on the sink's count.
    base = port(before["gw0"], "inside")["rx_dropped_backend"]
    deadline = time.monotonic() + 5
    while rx_dropped(gw0) - base != got["missing"] and time.monotonic() < deadline:
        time.sleep(0.1)
    after = {n: g.ctl_stats() for n, g in gws.items()}
    rx_drop = port(after["gw0"], "inside")["rx_dropped_backend"] - base
    # Frames that arrived while gw0 was stopped, at the rate the sender
    # held: at least over the time it was seen stopped, at most over the
    # time from SIGSTOP to SIGCONT (its worker may take longer to run again).
    low, high = int(snd["pps"] * (t_sleep_end - t_stopped)), int(snd["pps"] * (t_cont - t_kill))
    msg = (f"ring_size {ring}: stopped {1000 * (t_sleep_end - t_stopped):.0f}–{1000 * (t_cont - t_kill):.0f} ms "
           f"at {snd['pps']} pps (≈ {low}–{high} frames); sent {snd['sent']}, received {got['received']}, "
           f"missing {got['missing']}, duplicates {got['duplicates']}; gw0 inside rx_dropped_backend +{rx_drop}; "
           f"drops gw0 {drops(after['gw0'])} gw1 {drops(after['gw1'])}")
    print(msg)
    assert snd["errors"] == 0 and snd["sent"] == count, msg
    assert low > 2 * DEFAULT_RING, f"the stall did not outlast the default ring twice over: {msg}"
    if ring == DEEP_RING:
        assert high < ring // 2, f"SIGSTOP to SIGCONT took so long that the deep ring's margin is gone (the machine, not secgw): {msg}"
        assert exact(got, count), msg
        assert rx_drop == 0, msg
        assert drops(after["gw0"]) == drops(before["gw0"]) and drops(after["gw1"]) == drops(before["gw1"]), msg
    else:
        assert got["duplicates"] == 0 and got["received"] == got["distinct"], msg
        assert got["missing"] > 0, f"nothing lost with a ring smaller than the stall's frames: {msg}"
        assert got["missing"] >= low - ring - 512, f"lost fewer than the ring could not hold: {msg}"
        assert got["missing"] == rx_drop, f"a loss not counted as rx_dropped_backend: {msg}"
        other = {k: v for k, v in drops(after["gw0"]).items() if k != "inside rx_dropped_backend"}
        assert other == {k: v for k, v in drops(before["gw0"]).items() if k != "inside rx_dropped_backend"}, msg
        assert drops(after["gw1"]) == drops(before["gw1"]), msg
