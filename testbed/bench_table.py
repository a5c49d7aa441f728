#!/usr/bin/env python3
"""testbed/bench_table.py — the arithmetic and the table of testbed/bench.sh.

bench.sh runs the namespaces, gateways and secgw-pktgen; this file reads the
JSON they write and never runs anything itself. Subcommands:

  trial  --rate R --gen G --sink S --report P   one trial, normalized to
         {rate, offered_pps, tx_packets, rx_packets, lost, loss_pct, rx_pps,
          gbps, p50_us, p99_us, max_us, warnings, dut_cpu_s,
          dut_cpu_us_per_pkt} (pps = packets per second of the
          measured window; gbps = Ethernet frame bytes without FCS ×8 / s at
          the sink, as `secgw-pktgen report` computes it)
  pass   --tol PCT TRIAL.json                    prints 1 when loss ≤ PCT % and
         the sink received something, else 0
  row    …                                       one table row as a JSON line
  sat    --rows R --topology T --size S --workers W --backend B
                                                 a row's saturation rate (pps)
  crosscheck …                                   trafgen vs secgw-pktgen, JSON
  table  --rows R [--crosscheck X] [--json OUT] [--meta k=v …]
                                                 the markdown table (stdout)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def pick(d, *names, default=None):
    """First of `names` present in `d` or in its "total"/"totals" sub-object."""
    for scope in (d, d.get("total") if isinstance(d.get("total"), dict) else None,
                  d.get("totals") if isinstance(d.get("totals"), dict) else None):
        if not scope:
            continue
        for n in names:
            if n in scope and scope[n] is not None:
                return scope[n]
    return default


def cmd_trial(a):
    gen, sink, rep = load(a.gen), load(a.sink), load(a.report)
    secs = float(pick(gen, "duration_s") or 0) or 1.0
    tx = int(pick(gen, "measured_tx_packets", "tx_packets", default=0))
    rx = int(pick(rep, "rx_packets", "packets", default=pick(sink, "rx_packets", "packets", default=0)))
    lost = pick(rep, "lost", "lost_packets", default=None)
    if lost is None:
        lost = max(tx - rx, 0)
    lost = int(lost)
    loss_pct = pick(rep, "loss_pct", "loss_percent", default=None)
    if loss_pct is None:
        loss_pct = 100.0 * lost / tx if tx else 100.0
    mpps = pick(rep, "mpps", "rx_mpps", default=None)
    rx_pps = float(mpps) * 1e6 if mpps is not None else rx / secs
    gbps = pick(rep, "gbps", "gbit_s", "rx_gbps", default=None)
    # The device under test's CPU over the generator's whole run (warm-up
    # included), per packet the generator sent in it.
    dut_cpu_s = a.dut_cpu_ticks / a.clk_tck if a.clk_tck else None
    sent_all = int(pick(gen, "tx_packets", default=0))
    # A paced trial offers its rate only if the generator kept to its
    # schedule: packets due in the measured part = rate × duration. One
    # that fell behind (a stall, core 0 busy) offered less than the rate
    # the row would claim, so it cannot pass (GEN_SHORT_TOL below).
    target = float(pick(gen, "target_rate_pps", default=0) or 0) or float(a.rate)
    due = round(target * secs) if int(a.rate) > 0 and target > 0 else None
    short_pct = 100.0 * (1 - tx / due) if due else 0.0
    warnings = list(rep.get("warnings") or [])
    if due and short_pct > GEN_SHORT_TOL:
        warnings.append(f"generator fell behind: {tx} of {due} measured packets sent ({short_pct:.1f} % short of --rate {int(a.rate)}): "
                        "not a pass at this rate")
    out = {
        "rate": int(a.rate),
        "offered_pps": round(tx / secs),
        "tx_packets": tx,
        "rx_packets": rx,
        "lost": lost,
        "loss_pct": float(loss_pct),
        "rx_pps": round(rx_pps),
        "gbps": float(gbps) if gbps is not None else None,
        "p50_us": pick(rep, "p50_us", "latency_p50_us"),
        "p99_us": pick(rep, "p99_us", "latency_p99_us"),
        "max_us": pick(rep, "max_us", "latency_max_us"),
        "sink_other": pick(sink, "other_frames", "other", "ignored", default=None),
        "sink_esp_failed": pick(sink, "esp_failed", "decrypt_failed", "esp_errors", default=None),
        "due_packets": due,
        "gen_short_pct": round(short_pct, 3),
        # `secgw-pktgen report`'s doubts about the two reports (other run,
        # sink late, ...), and the generator's shortfall.
        "warnings": warnings,
        "dut_cpu_s": dut_cpu_s,
        "dut_cpu_us_per_pkt": dut_cpu_s * 1e6 / sent_all if dut_cpu_s is not None and sent_all else None,
    }
    json.dump(out, sys.stdout)
    print()


# Percent of a paced trial's due packets the generator may miss and the
# trial still count: beyond it the rate was not offered (RFC 2544 §26.1
# measures at the offered rate).
GEN_SHORT_TOL = 1.0


def trial_pass(t, tol):
    return t["rx_packets"] > 0 and t["loss_pct"] <= tol and (t.get("gen_short_pct") or 0.0) <= GEN_SHORT_TOL


def cmd_pass(a):
    print(1 if trial_pass(load(a.trial), a.tol) else 0)


def cmd_row(a):
    trials = []
    for name in sorted(os.listdir(a.trials), key=lambda n: (n == "lat", int(n[1:]) if n[1:].isdigit() else 0)):
        p = os.path.join(a.trials, name, "trial.json")
        if os.path.isfile(p):
            t = load(p)
            t["name"] = name
            trials.append(t)
    sat = load(os.path.join(a.sat_trial, "trial.json")) if a.sat_trial else None
    lat = load(os.path.join(a.lat_trial, "trial.json"))
    gws = {}
    for g in a.gw_stats or []:
        name, path = g.split("=", 1)
        s = load(path)
        gws[name] = {
            "ports": {p["name"]: {k: p.get(k) for k in ("rx_packets", "tx_packets", "drops", "rx_dropped_backend")}
                      for p in s.get("ports", [])},
            "drops": {k: v for k, v in (s.get("drops") or {}).items() if v} if isinstance(s.get("drops"), dict) else s.get("drops"),
        }
    row = {
        "topology": a.topology, "size": a.size, "workers": int(a.workers),
        "backend": None if a.backend == "-" else a.backend,
        "saturation_pps": int(a.saturation), "upper_pps": int(float(a.upper)),
        "mpps": round(sat["rx_pps"] / 1e6, 4) if sat else 0.0,
        "gbps": sat["gbps"] if sat else None,
        "loss_pct": sat["loss_pct"] if sat else None,
        "lost": sat["lost"] if sat else None,
        "latency_rate_pps": int(a.lat_rate),
        "latency_loss_pct": lat["loss_pct"],
        "p50_us": lat["p50_us"], "p99_us": lat["p99_us"], "max_us": lat["max_us"],
        "dut_cpu_us_per_pkt": lat.get("dut_cpu_us_per_pkt"),
        "gateways": gws,
        "trials": trials,
    }
    json.dump(row, sys.stdout)
    print()


def read_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def cmd_sat(a):
    for r in read_rows(a.rows):
        if (r["topology"], str(r["size"]), str(r["workers"]), r["backend"] or "-") == (a.topology, a.size, a.workers, a.backend):
            print(r["saturation_pps"])
            return
    print(0)


def trafgen_sent(path):
    """trafgen's exit summary: `  N packets outgoing` (summed over its CPUs)."""
    with open(path, errors="replace") as f:
        text = f.read()
    m = re.findall(r"(\d+)\s+packets outgoing", text)
    if not m:
        sys.exit(f"bench_table: no 'packets outgoing' line in {path}:\n{text[-2000:]}")
    return int(m[-1])


def gw_ports(path):
    s = load(path)
    return {p["name"]: p for p in s.get("ports", [])}


def cmd_crosscheck(a):
    tg_sent = trafgen_sent(a.trafgen_out)
    tg_sink = load(a.trafgen_sink)
    tg_gw = gw_ports(a.trafgen_gw0)
    pk = load(os.path.join(a.pktgen, "trial.json"))
    pk_gen = load(os.path.join(a.pktgen, "gen.json"))
    pk_gw = gw_ports(a.pktgen_gw0)
    # What the sink saw of trafgen's frames: they carry no pktgen payload, so the
    # sink counts them among the frames it does not read; whichever field it uses.
    tg_sink_count = pick(tg_sink, "other_frames", "other", "ignored", "non_pktgen", "frames", "rx_frames", default=None)
    out = {
        "topology": "a", "size": int(a.size), "rate_pps": int(a.rate), "requested_packets": int(a.count),
        "trafgen": {
            "sent": tg_sent,
            "gw0_inside_rx": tg_gw.get("inside", {}).get("rx_packets"),
            "gw0_outside_tx": tg_gw.get("outside", {}).get("tx_packets"),
            "sink_counted": tg_sink_count,
        },
        "pktgen": {
            "sent": int(pick(pk_gen, "tx_packets", default=0)),
            "measured_sent": pk["tx_packets"],
            "gw0_inside_rx": pk_gw.get("inside", {}).get("rx_packets"),
            "gw0_outside_tx": pk_gw.get("outside", {}).get("tx_packets"),
            "sink_received": pk["rx_packets"], "lost": pk["lost"],
        },
    }
    json.dump(out, sys.stdout)
    print()


def fmt(v, nd=2):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


TOPO_NAME = {
    "a": "(a) gen→gw0 encrypt→sink",
    "b": "(b) ESP gen→gw1 decrypt→sink",
    "c": "(c) gen→gw0→gw1→sink",
    "d": "(d) gen→AF_XDP forward→sink",
    "bypass": "(d') gen→secgw bypass→sink",
}


def cmd_table(a):
    rows = read_rows(a.rows)
    # A ratio needs a passing rate on both sides: a row whose search found
    # none shows its lowest probe's figures (with their loss), which are not
    # a saturation rate, so neither it nor a row measured against it gets one.
    ceil = {(str(r["size"]), r["workers"]): r["mpps"] if r["saturation_pps"] else None
            for r in rows if r["topology"] == "d"}
    no_ratio = []
    for r in rows:
        key = (str(r["size"]), r["workers"])
        d = ceil.get(key)
        r["ratio_d"] = round(r["mpps"] / d, 3) if d and r["saturation_pps"] else None
        if r["topology"] != "d" and r["ratio_d"] is None and key in ceil:
            why = "its own search found no passing rate" if not r["saturation_pps"] else \
                  "the (d) row of its size and workers found no passing rate"
            name = f"{r['topology']}-{r['size']}-w{r['workers']}" + (f"-{r['backend']}" if r["backend"] else "")
            no_ratio.append(f"{name}: {why}")
    meta = dict(m.split("=", 1) for m in a.meta or [])
    meta["elapsed_s"] = a.elapsed
    lines = ["## secgw testbed throughput (testbed/bench.sh)", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["",
              "| topology | size B | workers | backend | sat. rate pps | Mpps | Gbit/s | loss % | ratio to (d) "
              "| lat. rate pps | p50 µs | p99 µs | max µs | loss % at lat. rate | DUT CPU µs/pkt at lat. rate |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join([
            TOPO_NAME.get(r["topology"], r["topology"]), str(r["size"]), str(r["workers"]), r["backend"] or "—",
            str(r["saturation_pps"]) if r["saturation_pps"] else f"none ≤ {r['upper_pps']}",
            fmt(r["mpps"], 3), fmt(r["gbps"], 3), fmt(r["loss_pct"], 3), fmt(r["ratio_d"], 2),
            str(r["latency_rate_pps"]), fmt(r["p50_us"], 1), fmt(r["p99_us"], 1), fmt(r["max_us"], 1),
            fmt(r["latency_loss_pct"], 3), fmt(r.get("dut_cpu_us_per_pkt"), 2)]) + " |")
    if no_ratio:
        lines += ["", "No ratio to (d) for " + "; ".join(no_ratio) + "."]
    x = load(a.crosscheck) if a.crosscheck else None
    if x:
        t, p = x["trafgen"], x["pktgen"]
        lines += ["", f"### cross-check: trafgen vs secgw-pktgen gen, topology (a), {x['size']} B, "
                      f"{x['rate_pps']} pps, 1 worker, software",
                  "", "| generator | sent | gw0 inside rx | gw0 outside tx | sink |",
                  "|---|---|---|---|---|",
                  f"| trafgen (netsniff-ng), {x['requested_packets']} requested | {t['sent']} | {fmt(t['gw0_inside_rx'])} "
                  f"| {fmt(t['gw0_outside_tx'])} | {fmt(t['sink_counted'])} (frames without pktgen payload) |",
                  f"| secgw-pktgen gen | {p['sent']} (measured {p['measured_sent']}) | {fmt(p['gw0_inside_rx'])} "
                  f"| {fmt(p['gw0_outside_tx'])} | {p['sink_received']} received, {p['lost']} lost |"]
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "crosscheck": x}, f, indent=1)
            f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("trial")
    p.add_argument("--rate", required=True); p.add_argument("--gen", required=True)
    p.add_argument("--dut-cpu-ticks", type=int, default=0); p.add_argument("--clk-tck", type=int, default=0)
    p.add_argument("--sink", required=True); p.add_argument("--report", required=True)
    p = sub.add_parser("pass")
    p.add_argument("--tol", type=float, default=0.0); p.add_argument("trial")
    p = sub.add_parser("row")
    for k in ("topology", "size", "workers", "backend", "saturation", "upper", "sat-trial", "lat-trial", "lat-rate", "trials"):
        p.add_argument("--" + k, required=True)
    p.add_argument("--gw-stats", action="append")
    p = sub.add_parser("sat")
    for k in ("rows", "topology", "size", "workers", "backend"):
        p.add_argument("--" + k, required=True)
    p = sub.add_parser("crosscheck")
    for k in ("size", "rate", "count", "trafgen-out", "trafgen-sink", "trafgen-gw0", "pktgen", "pktgen-gw0"):
        p.add_argument("--" + k, required=True)
    p = sub.add_parser("table")
    p.add_argument("--rows", required=True); p.add_argument("--crosscheck"); p.add_argument("--json")
    p.add_argument("--meta", action="append"); p.add_argument("--elapsed", type=int, default=0)
    a = ap.parse_args()
    {"trial": cmd_trial, "pass": cmd_pass, "row": cmd_row, "sat": cmd_sat,
     "crosscheck": cmd_crosscheck, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
