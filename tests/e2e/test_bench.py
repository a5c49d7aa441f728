"""testbed/bench.sh end to end: one tiny row per topology and the trafgen cross-check.

Runs `testbed/bench.sh` with every topology, 64-byte packets, one worker, the
software backend, one search step and short trials, then checks the JSON it
wrote: every row is there, each carried traffic at its saturation rate
(Mpps > 0, received packets > 0), has its loss figures and latency fields, the
plain AF_XDP forwarder (d) carried traffic and every other row has a ratio to
it (when both searches found a passing rate; none, and a line saying why, when
either did not), and the cross-check has trafgen's sent count equal to what it was asked
for, seen by gw0 and by our sink. No timing thresholds: the figures themselves
depend on the machine and its load.

bench.sh builds its own namespaces ($SECGW_NS_PREFIX + "bench-" + name), so it
does not touch the testbed topology of the other tests; it needs trafgen
(Debian netsniff-ng, installed by testbed/test.sh) and secgw-pktgen beside the
secgw binary, and fails loudly without them.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import e2elib as L

TOPOLOGIES = ["a", "b", "c", "d", "bypass"]


def test_bench_quick_json(testbed, artifacts):
    binary = Path(testbed["binary"])
    pktgen = binary.parent / "secgw-pktgen"
    if not os.access(pktgen, os.X_OK):
        pytest.fail(f"{pktgen} missing (cargo build --release builds it beside secgw)")
    out = artifacts / "bench.json"
    env = dict(os.environ, SECGW_BIN=str(binary), SECGW_PKTGEN_BIN=str(pktgen),
               SECGW_BENCH_DIR=str(artifacts / "work"))
    cmd = ["bash", str(L.TESTBED / "bench.sh"), "--topologies", ",".join(TOPOLOGIES), "--sizes", "64",
           "--workers", "1", "--backends", "software", "--trial-secs", "1", "--warmup", "1",
           "--steps", "1", "--xcheck-rate", "2000", "--json", str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    (artifacts / "bench.stdout").write_text(p.stdout)
    (artifacts / "bench.stderr").write_text(p.stderr)
    assert p.returncode == 0, f"bench.sh failed ({p.returncode}):\n{p.stderr[-6000:]}"
    assert "| topology |" in p.stdout, p.stdout

    data = json.loads(out.read_text())
    rows = {r["topology"]: r for r in data["rows"]}
    assert sorted(rows) == sorted(TOPOLOGIES), f"rows: {sorted(rows)}"
    for topo, r in rows.items():
        assert r["size"] in (64, "64") and r["workers"] == 1, r
        assert r["backend"] == (None if topo in ("d", "bypass") else "software"), r
        # On a loaded machine one search step may find no loss-free rate
        # (saturation_pps 0): the row then carries the lowest probe's figures.
        assert r["mpps"] > 0 and r["saturation_pps"] >= 0, f"{topo}: no traffic: {r}"
        assert r["loss_pct"] is not None and r["lost"] is not None, r
        assert r["latency_loss_pct"] is not None and r["latency_loss_pct"] < 100, f"{topo}: nothing at the latency rate: {r}"
        for k in ("p50_us", "p99_us", "max_us"):
            assert isinstance(r[k], (int, float)) and r[k] >= 0, f"{topo}: {k} = {r[k]!r}"
        assert r["p50_us"] <= r["p99_us"] <= r["max_us"], r
        assert r["gbps"] is not None and r["gbps"] > 0, r
        assert r["trials"] and all("rx_packets" in t for t in r["trials"]), r
        # A ratio to (d) where both searches found a passing rate; none
        # (and a line under the table saying why) where either did not.
        if r["saturation_pps"] and rows["d"]["saturation_pps"]:
            assert r["ratio_d"] is not None and r["ratio_d"] > 0, f"{topo}: no ratio to (d): {r}"
        else:
            assert r["ratio_d"] is None, f"{topo}: a ratio against a search with no passing rate: {r}"
            # Named as topology-size-wWORKERS[-backend].
            assert topo == "d" or f"{topo}-64-w1" in p.stdout.split("No ratio to (d) for", 1)[-1], p.stdout
        # The device under test's CPU at the latency rate, from /proc (it
        # busy-polls here, so it used CPU all along).
        assert isinstance(r["dut_cpu_us_per_pkt"], float) and r["dut_cpu_us_per_pkt"] > 0, f"{topo}: {r}"
        assert all(t["dut_cpu_s"] > 0 for t in r["trials"]), f"{topo}: {r['trials']}"
    # (d) carried traffic in every trial it ran (the forwarder is the reference).
    assert all(t["rx_packets"] > 0 for t in rows["d"]["trials"]), rows["d"]["trials"]
    assert rows["d"]["ratio_d"] == (1.0 if rows["d"]["saturation_pps"] else None), rows["d"]
    # The gateways' own counters agree that the rows went through them.
    assert rows["a"]["gateways"]["gw0"]["ports"]["outside"]["tx_packets"] > 0, rows["a"]["gateways"]
    assert rows["b"]["gateways"]["gw1"]["ports"]["inside"]["tx_packets"] > 0, rows["b"]["gateways"]
    assert rows["c"]["gateways"]["gw1"]["ports"]["inside"]["tx_packets"] > 0, rows["c"]["gateways"]

    x = data["crosscheck"]
    assert x is not None, "no cross-check in the JSON"
    t = x["trafgen"]
    assert t["sent"] == x["requested_packets"] > 0, x
    # gw0 saw trafgen's frames (the ones it lost before seeing them are its
    # rx_dropped_backend, not a cross-check failure) and our sink counted what gw0 sent.
    assert 0 < t["gw0_inside_rx"] <= t["sent"], x
    assert t["gw0_outside_tx"] == t["gw0_inside_rx"], x
    assert t["sink_counted"] is not None and 0 < t["sink_counted"] <= t["gw0_outside_tx"], x
    pk = x["pktgen"]
    assert pk["sent"] > 0 and pk["sink_received"] > 0 and pk["gw0_outside_tx"] > 0, x
