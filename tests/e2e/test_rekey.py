"""Rekey without loss (issue 5): both gateways rekeyed 20 times through
`secgw ctl` under a steady numbered UDP stream, for each crypto backend.

Configs: configs/ep0-2w.toml / ep1-2w.toml (2 workers, 4 SAs each), copied
to the test's artifacts with a `[control]` table (a socket in the artifacts
folder, so parallel testbeds never share one; `rekey_grace_ms = GRACE_MS`)
and, for "descriptor", `backend = "descriptor"`, `max_sessions_per_qp =
LIMIT`. LIMIT is 4: a worker owns 2 SAs, and in a round the worker owning
gw0's outbound 2002-line and inbound 2102-line holds both old and both new
sessions at once; rounds are PERIOD_S apart, longer than the grace plus the
drain, so an old session must be freed before the next round needs its
place (a leak makes the next rekey fail with `busy`).

1. Rate: a numbered stream hostA -> hostB (UDP 41003 -> 5003, gw0's SA 2002)
   for PROBE_S at each rate of RATES until one arrives with nothing lost or
   duplicated; that rate is used (printed; SECGW_E2E_REKEY_PPS sets the
   list's first entry). The issue asks >= 20,000 packets/s or the highest
   lossless rate, whichever is lower.
2. Streams: forward hostA -> hostB (41001 -> 5001: gw0 outbound 2002, gw1
   inbound 2002) at that rate, and a reverse stream hostB -> hostA
   (41002 -> 5002: gw1 outbound 2102, gw0 inbound 2102) at REV_PPS (a
   second sender at the full rate would add its work to the 2 cores the
   first shares with the 4 workers). `secgw ctl
   events --json` runs against both gateways from before the first rekey.
3. ROUNDS rounds, PERIOD_S apart, during the stream; each round, with a
   fresh SPI and a random AES-128-GCM key per direction, in the lossless
   order: gw1 rekeys its inbound SA of the forward line (old and new SPI now
   both accepted for GRACE_MS), then gw0 its outbound one to the same SPI
   and key; then gw0 its inbound SA of the reverse line, then gw1 its
   outbound one. Keys go through stdin (`--key-file -`). The time between
   the receiver's and the sender's rekey is measured and must stay below the
   grace (else the test, not secgw, is wrong).
4. Checks: every datagram of both streams (and of the probes) arrives
   exactly once; the senders ran for the whole rekey phase; after the grace
   each gateway has `deleted` events for all 2 x ROUNDS retired SAs and
   `sa list` shows only the four active SAs (2001/2101 untouched, the last
   SPI of each line); per line and per SPI, gw0's packets == gw1's packets
   (outbound at one end == inbound at the other), the live SAs' counts from
   `ctl stats --json` plus the retired ones' final counts from their
   `deleted` events; the forward line's sum == datagrams sent == received
   (probes included), the reverse line's sum == reverse datagrams; every
   SPI of the lines carried packets; every drop counter of both gateways
   (replay, auth_failed, no_sa included) and every port's drops are 0.

Runtime: about 60 s per backend (the stream runs 2 x ROUNDS x PERIOD_S, slack for a loaded machine).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

import e2elib as L
from e2elib import exact, result, start_sender, start_sink

BACKENDS = ["software", "descriptor"]
MW_CONFIG = {"gw0": "ep0-2w.toml", "gw1": "ep1-2w.toml"}
ROUNDS = 20
GRACE_MS = 1000
PERIOD_S = 1.3
LIMIT = 4
RATES = [int(os.environ.get("SECGW_E2E_REKEY_PPS", "20000")), 15000, 10000, 7500, 5000]
# The descriptor backend's first probe rate (SECGW_E2E_REKEY_DESC_PPS).
# It was 10,000 while runs at 20,000 lost packets to workers off their core
# for longer than their rings held (README, "Rekey without loss"); since
# the 2-worker configs hold 400 ms at 20,000 pps (ring_size, pool_size,
# handoff_depth), 20,000 passed in 3 runs on a quiet machine and 2 with 2
# extra busy loops, as did the software backend's 2 runs with them.
DESC_FIRST_RATE = int(os.environ.get("SECGW_E2E_REKEY_DESC_PPS", "20000"))
PROBE_S = 1.5
REV_PPS = 1000
LEAD_S = 1.0          # stream before the first round
TAIL_S = 2.0          # stream after the last round
FWD_LINE, REV_LINE = 2002, 2102   # first SPIs of the rekeyed lines
UNTOUCHED = {("gw0", 2001, "outbound"), ("gw0", 2101, "inbound"), ("gw1", 2101, "outbound"), ("gw1", 2001, "inbound")}
FWD = {"sport": 41001, "dport": 5001, "stream": 1}
REV = {"sport": 41002, "dport": 5002, "stream": 2}
PROBE = {"sport": 41003, "dport": 5003}


def _load(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def rekey_configs(backend, artifacts) -> dict[str, Path]:
    out = {}
    for gw, name in MW_CONFIG.items():
        src = L.CONFIG_DIR / name
        if not src.is_file():
            pytest.fail(f"config {src} not found")
        text = src.read_text()
        if backend == "descriptor":
            m = re.search(r"(?ms)^\[crypto\][^\n]*\n(.*?)(?=^\[)", text)
            assert m, f"{src}: no [crypto] table"
            text = text[:m.start(1)] + f'backend = "descriptor"\nmax_sessions_per_qp = {LIMIT}\n\n' + text[m.end(1):]
        assert "[control]" not in text, src
        sock = artifacts / f"{gw}.sock"
        text += f'\n[control]\nsocket = "{sock}"\nrekey_grace_ms = {GRACE_MS}\n'
        dst = artifacts / f"{gw}-rekey.toml"
        dst.write_text(text)
        cfg = _load(dst)
        assert cfg["control"] == {"socket": str(sock), "rekey_grace_ms": GRACE_MS}, cfg["control"]
        assert int(cfg["gateway"]["workers"]) == 2, f"{dst}: not 2 workers"
        want = {"backend": "descriptor", "max_sessions_per_qp": LIMIT} if backend == "descriptor" else {"backend": "software"}
        assert cfg["crypto"] == want, f"{dst}: [crypto] = {cfg['crypto']}"
        out[gw] = dst
    return out


# --------------------------------------------------------------------------
# secgw ctl

class Ctl:
    """`secgw ctl --socket S …` for one gateway (run from the root namespace:
    the socket is a path in the file system)."""

    def __init__(self, binary: str, sock: Path):
        self.binary, self.sock = binary, sock

    def __call__(self, *args, stdin: str | None = None, timeout=30) -> str:
        cmd = [self.binary, "ctl", "--socket", str(self.sock), *map(str, args)]
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, f"`{' '.join(cmd)}` failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
        return p.stdout

    def json(self, *args):
        return json.loads(self(*args, "--json"))

    def rekey(self, old: int, new: int, key: bytes, direction: str) -> float:
        """Rekeys; returns when the answer came (time.monotonic())."""
        out = self("sa", "rekey", old, "--spi", new, "--key-file", "-", "--direction", direction,
                   stdin=key.hex() + "\n")
        if direction == "inbound":
            assert f"old_valid_ms={GRACE_MS}" in out, f"rekey {old} -> {new} inbound: {out!r}, expected old_valid_ms={GRACE_MS}"
        return time.monotonic()


class Events:
    """`secgw ctl events --json` in the background, lines to a file."""

    def __init__(self, ctl: Ctl, path: Path):
        self.path = path
        self.f = open(path, "w")
        self.proc = subprocess.Popen([ctl.binary, "ctl", "--socket", str(ctl.sock), "events", "--json"],
                                     stdout=self.f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def read(self) -> list[dict]:
        out = []
        for line in self.path.read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.f.close()


# --------------------------------------------------------------------------
# where the streams' packets are (streams: e2elib, testbed/udp_stream.py)

def path_counts(ctl: dict) -> dict:
    """Where the forward stream's packets are on their way: gw0 inside rx,
    gw0 outside tx, gw1 outside rx, gw1 inside tx, and the backends' rx
    drops (for telling where a probe lost packets)."""
    st = {gw: c.json("stats") for gw, c in ctl.items()}
    port = {(gw, p["name"]): p for gw in st for p in st[gw]["ports"]}
    return {"gw0_in_rx": port[("gw0", "inside")]["rx_packets"], "gw0_out_tx": port[("gw0", "outside")]["tx_packets"],
            "gw1_out_rx": port[("gw1", "outside")]["rx_packets"], "gw1_in_tx": port[("gw1", "inside")]["tx_packets"],
            "rx_dropped_backend": sum(p["rx_dropped_backend"] for p in port.values()),
            "drops": sum(sum(s["drops"].values()) for s in st.values())}


def kernel_drops() -> dict:
    """The kernel's own drop counters on the path between the hosts: every
    interface's (rx, tx) dropped in the testbed's namespaces (veth rings, the
    wan bridge) and the softnet backlog's drops (all CPUs)."""
    out = {}
    for name in ("hostA", "gw0", "wan", "gw1", "hostB"):
        links = json.loads(L.run_ns(name, "ip", "-s", "-j", "link", "show").stdout)
        for link in links:
            st = link.get("stats64", {})
            out[f"{name}/{link['ifname']}"] = (st.get("rx", {}).get("dropped", 0), st.get("tx", {}).get("dropped", 0))
    with open("/proc/net/softnet_stat") as f:
        out["softnet"] = sum(int(line.split()[1], 16) for line in f)
    return out


def probe_rate(artifacts: Path, stream_base: int, ctl: dict, first: int | None = None) -> tuple[float, list[dict]]:
    """The first rate of RATES (from `first` on, if given) that hostA ->
    hostB carries without loss or duplicates for PROBE_S (stream ids
    stream_base, stream_base+1, …)."""
    tried = []
    rates = [r for r in RATES if first is None or r <= first]
    for i, rate in enumerate(rates):
        before = path_counts(ctl)
        n = int(rate * PROBE_S)
        sink = start_sink(artifacts, "hostB", L.B_IP, PROBE["dport"], stream_base + i, n, PROBE_S + 30)
        snd = result(start_sender("hostA", L.A_IP, L.B_IP, PROBE["sport"], PROBE["dport"], stream_base + i, n, rate),
                     "probe sender", PROBE_S + 60)
        got = result(sink, "probe sink", PROBE_S + 60)
        ok = snd["errors"] == 0 and exact(got, snd["sent"])
        after = path_counts(ctl)
        path = {k: after[k] - before[k] for k in after}
        tried.append({"rate": rate, "sent": snd["sent"], "sender_pps": snd["pps"], "received": got["received"],
                      "missing": got["missing"], "duplicates": got["duplicates"], "lossless": ok,
                      "path": path})
        print(f"rate probe: {rate} pps asked, sender {snd['pps']} pps, sent {snd['sent']}, "
              f"received {got['received']}, missing {got['missing']}, dup {got['duplicates']}; on the way: {path}")
        if ok:
            return rate, tried
    pytest.fail(f"the testbed carries none of the rates {RATES} without loss before any rekey: {tried}")


# --------------------------------------------------------------------------
# the test

def sa_packets(stats: dict, spi: int, direction: str) -> int | None:
    found = [s for s in stats["sas"] if s["spi"] == spi and s["direction"] == direction]
    assert len(found) <= 1, found
    return int(found[0]["packets"]) if found else None


def test_rekey_without_loss(backend, rekey_configs, start_gws, artifacts, testbed):
    t_test = time.monotonic()
    gws = start_gws(rekey_configs)
    # e2elib gives each gateway its socket with --socket (over the config's).
    ctl = {gw: Ctl(testbed["binary"], Path(gws[gw].socket)) for gw in rekey_configs}
    for c in ctl.values():
        c("version")  # the socket answers
    events = {gw: Events(c, artifacts / f"{gw}-events.jsonl") for gw, c in ctl.items()}
    procs: list[subprocess.Popen] = []
    try:
        # ---- 1. the rate
        rate, probes = probe_rate(artifacts, 100, ctl, DESC_FIRST_RATE if backend == "descriptor" else None)
        probe_sent = sum(p["sent"] for p in probes)
        probe_received = sum(p["received"] for p in probes)

        # ---- 2. the streams
        kernel_before = kernel_drops()
        # Twice the rounds' nominal time: on a loaded machine a round may wait
        # for the previous one's old SAs to be freed (below) or for slow
        # `secgw ctl` calls; the stream must outlast every round.
        duration = LEAD_S + 2 * ROUNDS * PERIOD_S + TAIL_S
        n_fwd, n_rev = int(rate * duration), int(REV_PPS * duration)
        sink_f = start_sink(artifacts, "hostB", L.B_IP, FWD["dport"], FWD["stream"], n_fwd, duration + 60)
        sink_r = start_sink(artifacts, "hostA", L.A_IP, REV["dport"], REV["stream"], n_rev, duration + 60)
        procs += [sink_f, sink_r]
        t0 = time.monotonic()
        send_f = start_sender("hostA", L.A_IP, L.B_IP, FWD["sport"], FWD["dport"], FWD["stream"], n_fwd, rate)
        send_r = start_sender("hostB", L.B_IP, L.A_IP, REV["sport"], REV["dport"], REV["stream"], n_rev, REV_PPS)
        procs += [send_f, send_r]

        # ---- 3. the rounds
        line = {"fwd": [FWD_LINE], "rev": [REV_LINE]}
        gaps, calls = [], []
        time.sleep(LEAD_S)
        for r in range(1, ROUNDS + 1):
            # The previous round's old SAs must be gone (grace over, workers
            # quiesced, sessions freed) before this round needs their places
            # on a limited queue pair: wait for it, bounded (a leak fails).
            retiring_deadline = time.monotonic() + 10
            while any(x["state"] == "retiring" for c in ctl.values() for x in c.json("sa", "list")["sas"]):
                assert time.monotonic() < retiring_deadline, f"round {r}: old SAs not freed within 10 s"
                time.sleep(0.05)
            t_round = time.monotonic()
            for name, rx, tx, base in (("fwd", "gw1", "gw0", 0x10000), ("rev", "gw0", "gw1", 0x20000)):
                old, new, key = line[name][-1], base + r, secrets.token_bytes(20)
                t_a = time.monotonic()
                t_rx = ctl[rx].rekey(old, new, key, "inbound")
                t_tx = ctl[tx].rekey(old, new, key, "outbound")
                gaps.append(t_tx - t_rx)
                calls += [t_rx - t_a, t_tx - t_rx]
                if os.environ.get("SECGW_E2E_REKEY_VERBOSE"):
                    print(f"round {r} {name}: {old} -> {new}: receiver {(t_rx - t_a) * 1000:.1f} ms, "
                          f"sender {(t_tx - t_rx) * 1000:.1f} ms, at {time.monotonic() - t0:.2f} s")
                line[name].append(new)
            assert send_f.poll() is None, f"the forward sender ended before round {r} was done: lengthen the stream"
            time.sleep(max(0.0, t_round + PERIOD_S - time.monotonic()))
        t_rekeys = time.monotonic() - t0
        assert send_f.poll() is None and send_r.poll() is None, "a sender ended before the last round: lengthen the stream"
        # The scenario holds only if each sender switched within the
        # receiver's grace (the old inbound SA still accepted): past it the
        # old SA's packets would be lost for a reason of this harness's
        # timing (the ctl calls of a loaded machine), not of the gateway.
        # The gateway's own check is the zero loss below. (Was: half the
        # grace, which failed under CI load at ~500 ms.)
        assert max(gaps) < GRACE_MS / 1000, \
            f"receiver -> sender rekey took up to {max(gaps) * 1000:.0f} ms, past the grace of {GRACE_MS} ms: the harness was too slow to test make-before-break"

        snd_f = result(send_f, "forward sender", duration + 60)
        snd_r = result(send_r, "reverse sender", duration + 60)
        got_f = result(sink_f, "forward sink", duration + 60)
        got_r = result(sink_r, "reverse sink", duration + 60)

        # ---- 4a. the retired SAs: `deleted` events after the grace
        retired = {"gw0": {(s, "outbound") for s in line["fwd"][:-1]} | {(s, "inbound") for s in line["rev"][:-1]},
                   "gw1": {(s, "inbound") for s in line["fwd"][:-1]} | {(s, "outbound") for s in line["rev"][:-1]}}
        deadline = time.monotonic() + GRACE_MS / 1000 + 10
        while True:
            ev = {gw: e.read() for gw, e in events.items()}
            deleted = {gw: {(x["spi"], x["direction"]): x for x in evs if x["kind"] == "deleted"} for gw, evs in ev.items()}
            if all(retired[gw] <= set(deleted[gw]) for gw in retired) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        sa_list = {gw: c.json("sa", "list")["sas"] for gw, c in ctl.items()}
        kernel_after = kernel_drops()
        stats = {gw: c.json("stats") for gw, c in ctl.items()}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for e in events.values():
            e.close()
    for gw in ctl:
        (artifacts / f"{gw}-final-stats.json").write_text(json.dumps(stats[gw], indent=1))
        (artifacts / f"{gw}-sa-list.json").write_text(json.dumps(sa_list[gw], indent=1))

    # ---- per-SPI packet counts: live (stats) + retired (deleted events)
    def count(gw: str, spi: int, direction: str) -> int:
        live = sa_packets(stats[gw], spi, direction)
        dead = deleted[gw].get((spi, direction))
        assert (live is None) != (dead is None), \
            f"{gw} SA {spi} {direction}: live in stats ({live}) and deleted ({dead}) — or neither"
        return live if live is not None else int(dead["packets"])

    per_spi = {name: [(spi, count("gw0", spi, d0), count("gw1", spi, d1)) for spi in line[name]]
               for name, d0, d1 in (("fwd", "outbound", "inbound"), ("rev", "inbound", "outbound"))}
    sums = {name: (sum(x[1] for x in v), sum(x[2] for x in v)) for name, v in per_spi.items()}

    # ---- summary
    fwd_sent, fwd_recv = snd_f["sent"] + probe_sent, got_f["received"] + probe_received
    rows = [
        ("backend", backend), ("rounds", f"{ROUNDS} (x2 directions, both gateways: {4 * ROUNDS} rekeys)"),
        ("rate", f"{rate} pps asked, forward sender {snd_f['pps']} pps; reverse {snd_r['pps']} pps"),
        ("rate probes", "; ".join(f"{p['rate']}: {'ok' if p['lossless'] else 'lossy'}" for p in probes)),
        ("forward sent/received", f"{snd_f['sent']} / {got_f['received']} (+ probes {probe_sent} / {probe_received})"),
        ("forward lost/dup/ooo", f"{got_f['missing']} / {got_f['duplicates']} / {got_f['out_of_order']}"),
        ("reverse sent/received", f"{snd_r['sent']} / {got_r['received']}"),
        ("reverse lost/dup/ooo", f"{got_r['missing']} / {got_r['duplicates']} / {got_r['out_of_order']}"),
        ("fwd line: gw0 out / gw1 in", f"{sums['fwd'][0]} / {sums['fwd'][1]} over {len(line['fwd'])} SPIs"),
        ("rev line: gw1 out / gw0 in", f"{sums['rev'][1]} / {sums['rev'][0]} over {len(line['rev'])} SPIs"),
        ("rekey rx->tx gap", f"max {max(gaps) * 1000:.1f} ms, mean {sum(gaps) / len(gaps) * 1000:.1f} ms "
                             f"(grace {GRACE_MS} ms); ctl call max {max(calls) * 1000:.1f} ms"),
        ("fwd SPI packets (min/max)", f"{min(x[1] for x in per_spi['fwd'])} / {max(x[1] for x in per_spi['fwd'])}"),
        ("handoff gw0/gw1", " / ".join(str([w["handoff_out"] for w in stats[g]["workers"]]) for g in ("gw0", "gw1"))),
        ("time", f"stream+rekeys {t_rekeys:.1f} s, test {time.monotonic() - t_test:.1f} s"),
    ]
    # Where packets went, so a loss names its place (a drop reason, a port's
    # drops or the kernel's AF_XDP rx drops) in the exact-delivery
    # assertions' messages below.
    gw_drops = {gw: {k: v for k, v in stats[gw]["drops"].items() if v} for gw in ctl}
    gw_ports = {gw: {p["name"]: (p["drops"], p["rx_dropped_backend"]) for p in stats[gw]["ports"]} for gw in ctl}
    for gw in ctl:
        rows.append((f"{gw} drops", f"{gw_drops[gw] or 'none'}; ports (drops, rx_dropped_backend) {gw_ports[gw]}"))
    kernel = {k: (kernel_before.get(k), v) for k, v in kernel_after.items() if v != kernel_before.get(k)}
    rows.append(("kernel drops (before, after)", kernel or "none"))
    summary = "\n".join(f"  {k:<28} {v}" for k, v in rows)
    print(f"\nrekey summary:\n{summary}")
    (artifacts / "rekey-summary.json").write_text(json.dumps({"rows": dict(rows), "per_spi": per_spi}, indent=1))

    # ---- checks
    assert snd_f["errors"] == 0 and snd_f["sent"] == n_fwd, f"forward sender: {snd_f}"
    assert snd_r["errors"] == 0 and snd_r["sent"] == n_rev, f"reverse sender: {snd_r}"
    assert exact(got_f, n_fwd), f"{backend}: forward stream not received exactly once each: {got_f}\n{summary}"
    assert exact(got_r, n_rev), f"{backend}: reverse stream not received exactly once each: {got_r}\n{summary}"
    for gw in ctl:
        missing = retired[gw] - set(deleted[gw])
        assert not missing, f"{gw}: no `deleted` event for retired SAs {sorted(missing)} {GRACE_MS} ms + 10 s after the last rekey"
        kinds = {(x["spi"], x["direction"]) for x in ev[gw] if x["kind"] == "rekeyed"}
        assert retired[gw] <= kinds, f"{gw}: no `rekeyed` event for {sorted(retired[gw] - kinds)}"
        active = {(s["spi"], s["direction"]) for s in sa_list[gw]}
        want = {(s, d) for g, s, d in UNTOUCHED if g == gw}
        want |= {(line["fwd"][-1], "outbound" if gw == "gw0" else "inbound"),
                 (line["rev"][-1], "inbound" if gw == "gw0" else "outbound")}
        assert active == want and all(s["state"] == "active" for s in sa_list[gw]), \
            f"{gw}: `sa list` after the grace: {sa_list[gw]}\nexpected exactly {sorted(want)}, all active"
    for name, v in per_spi.items():
        bad = [x for x in v if x[1] != x[2]]
        assert not bad, f"{name} line: (SPI, gw0, gw1) packet counts differ: {bad}"
        idle = [x for x in v if x[1] == 0]
        assert not idle, f"{name} line: SAs that carried nothing (rekeyed before any packet used them?): {idle}"
    assert sums["fwd"] == (fwd_sent, fwd_sent) and fwd_recv == fwd_sent, \
        f"forward: per-SA sums gw0/gw1 {sums['fwd']}, sent {fwd_sent}, received {fwd_recv}"
    assert sums["rev"] == (snd_r["sent"], snd_r["sent"]), f"reverse: per-SA sums gw0/gw1 {sums['rev']}, sent {snd_r['sent']}"
    for gw in ctl:
        assert not gw_drops[gw], f"{gw} dropped packets: {gw_drops[gw]}"
        ports = {name: c for name, c in gw_ports[gw].items() if any(c)}
        assert not ports, f"{gw} port drops (drops, rx_dropped_backend): {ports}"
    for gw in ctl:
        for reason in ("replay", "auth_failed", "no_sa"):
            assert reason in stats[gw]["drops"], f"{gw}: no drop counter {reason!r}: {sorted(stats[gw]['drops'])}"
    assert all(g.alive() for g in gws.values()), "a gateway died"
