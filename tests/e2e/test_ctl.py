"""`secgw ctl` against running gateways (issue 5): the control socket seen
from outside, on the testbed, with traffic.

- test_sa_list_shows_the_config_and_never_keys: `sa list --json` of gw0 and
  gw1 holds exactly the SAs of their config files (SPI, direction, mode,
  algorithm, tunnel ends, all `active`); no key or auth_key of the config,
  nor any 16-hex-digit piece of one, appears in `sa list` (JSON and text),
  `policy list`, `stats --json` or `stats --prometheus`.
- test_prometheus_parses_and_matches_json: after 7 datagrams hostA → hostB
  and 4 back, `stats --prometheus` parses with prometheus_client's parser
  (not ours), and every per-SA packet/byte/error counter, every drop reason
  and every port counter in it equals `stats --json` (taken right before and
  after; the SA counts are the datagrams sent).
- test_sa_add_then_del[file|stdin]: `sa add FILE` / `sa add -` puts a new
  inbound SA (SPI 5001, a fresh random AES-128-GCM key) and its inbound
  policy (UDP 7000-7099) into gw1; ESP that scapy's SecurityAssociation
  seals with that SA, injected on the wan, reaches hostB as exactly the
  inner packets built; `sa del 5001` removes SA and policy (`sa list`,
  `policy list`), and the same kind of packet is then counted as `no_sa`
  and never delivered; `events --json` saw `added`, then `deleted` (with
  the SA's final packet count).
- test_malformed_requests_keep_the_daemon: over a raw Unix socket, not
  JSON → `bad_json`, v=2 → `bad_version`, an unknown cmd →
  `unknown_command`, missing args → `bad_args`, a 2 MiB line → `too_large`,
  each with the request's id when it had one; the same connection then
  answers `version`; `secgw ctl version` and traffic still work.
- test_sa_add_errors: a duplicate SPI → exit 1, `exists`; a key of the
  wrong length → exit 1, `invalid` naming `<sa add>`, the line and the
  field `sa[0].key`; neither leaves anything in `sa list`/`policy list`.
- test_sighup_reload: gw1 runs a copy of ep1.toml; SA 1003 and its policy
  are deleted from the copy and the gateway gets SIGHUP: the SA leaves
  `sa list`, the policy `policy list`. Then a port's mtu is changed in the
  copy and SIGHUP again: refused with a log line that names the port and
  the field, `sa list` unchanged, traffic flows; `secgw ctl reload` gives
  the same refusal as an error (exit 1, `invalid`).

Each test starts its own pair of gateways; nothing waits a fixed time where
a counter, a list or a log line can be waited for.
"""
from __future__ import annotations

import itertools
import json
import re
import secrets
import socket
import subprocess
import tomllib
from pathlib import Path

import pytest

import e2elib as L

NEW_SPI = 5001
NEW_PORTS = (7000, 7099)     # the new SA's inbound policy: UDP to these ports
ESP_COUNT = 4
# Payload tags are unique per call, so a capture never mistakes one for another.
TAG = itertools.count(1)


# --------------------------------------------------------------------------
# helpers

def ctl_raw(gw: L.Gateway, *args, input: bytes | None = None) -> subprocess.CompletedProcess:
    """`secgw ctl` with its exit status, stdout and stderr (text)."""
    return subprocess.run([str(gw.binary), "ctl", "--socket", gw.socket, *map(str, args)],
                          input=input, capture_output=True, timeout=30)


def ctl_json(gw: L.Gateway, *args):
    return json.loads(gw.ctl(*args, "--json"))


def sa_keys(gw: L.Gateway) -> set:
    return {(s["spi"], s["direction"]) for s in ctl_json(gw, "sa", "list")["sas"]}


def config_keys(cfg: dict) -> set:
    return {(int(s["spi"]), s["direction"]) for s in cfg["sa"]}


def sa_counter(stats: dict, spi: int, direction: str, field: str = "packets") -> int | None:
    found = [s for s in stats["sas"] if s["spi"] == spi and s["direction"] == direction]
    return int(found[0][field]) if found else None


def key_pieces(hexkey: str) -> set[str]:
    """The key as hex, and every 16-digit piece of it (a key printed in part,
    or with its salt cut off, still shows)."""
    h = hexkey.lower().removeprefix("0x").replace(":", "").replace(" ", "")
    return {h} | {h[i:i + 16] for i in range(0, max(1, len(h) - 15))}


def assert_no_keys(outputs: dict[str, str], keys: list[str]):
    assert keys, "no keys to look for: the test would pass on anything"
    for what, text in outputs.items():
        low = text.lower().replace(":", "")
        for k in keys:
            for piece in key_pieces(k):
                assert piece not in low, f"key material ({piece}) in `{what}`:\n{text[:2000]}"


def deliver(gws, artifacts: Path, n: int = 3) -> list[bytes]:
    """Sends n datagrams hostA → hostB (over SA 1001) and checks that hostB
    got exactly those; returns the payloads."""
    from scapy.compat import raw
    from scapy.layers.inet import IP
    tag = next(TAG)
    sent = [b"ctl-%03d-%02d" % (tag, i) + bytes(16) for i in range(n)]
    cap = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst port 5100", artifacts / f"b0-{tag}")
    L.send_udp("hostA", L.A_IP, L.B_IP, [{"sport": 40100, "dport": 5100, "payload": p} for p in sent])
    got = [raw(p[IP].payload.payload) for p in cap.stop(settle=0.5)]
    assert got == sent, f"hostA → hostB: hostB received {got}, sent {sent}\n" \
                        f"gw1 drops: {ctl_json(gws['gw1'], 'stats')['drops']}"
    return sent


# --------------------------------------------------------------------------
# sa list, stats: what is shown, and never the keys

def test_sa_list_shows_the_config_and_never_keys(gws):
    for name, gw in gws.items():
        cfg = L.load_config(name)
        sas = ctl_json(gw, "sa", "list")["sas"]
        assert {(s["spi"], s["direction"]) for s in sas} == config_keys(cfg) and len(sas) == len(cfg["sa"]), \
            f"{name}: `sa list --json` {sas}\nconfig SAs {sorted(config_keys(cfg))}"
        by_key = {(s["spi"], s["direction"]): s for s in sas}
        for c in cfg["sa"]:
            s = by_key[(int(c["spi"]), c["direction"])]
            want = {"mode": c.get("mode", "tunnel"), "algorithm": c["algorithm"], "tunnel_src": c["tunnel_src"],
                    "tunnel_dst": c["tunnel_dst"], "state": "active", "packets": 0, "errors": 0}
            assert {k: s.get(k) for k in want} == want, f"{name} SA {c['spi']}: {s}"
        outputs = {"sa list --json": gw.ctl("sa", "list", "--json"), "sa list": gw.ctl("sa", "list"),
                   "policy list --json": gw.ctl("policy", "list", "--json"), "policy list": gw.ctl("policy", "list"),
                   "stats --json": gw.ctl("stats", "--json"), "stats --prometheus": gw.ctl("stats", "--prometheus"),
                   "stats": gw.ctl("stats")}
        # The outputs name every SA (so the key check looks at real output).
        for what in ("sa list", "stats --json", "stats --prometheus"):
            for spi, _ in config_keys(cfg):
                assert str(spi) in outputs[what], f"{name}: `{what}` does not name SA {spi}:\n{outputs[what]}"
        keys = [str(c[f]) for c in cfg["sa"] for f in ("key", "auth_key") if f in c]
        assert_no_keys(outputs, keys)


# --------------------------------------------------------------------------
# Prometheus text == JSON

def prom_samples(text: str) -> dict:
    """{(sample name, sorted labels): value} from prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"sample {key} twice"
            out[key] = s.value
    return out


_LISTENER = "import socket, sys, time\n" \
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n" \
            "s.bind((sys.argv[1], int(sys.argv[2])))\n" \
            "print('ready', flush=True)\n" \
            "time.sleep(60)\n"


class Listener:
    """A bound UDP socket in a host, so datagrams to it draw no ICMP port
    unreachable (which would travel the other SA and change its count)."""

    def __init__(self, host: str, ip: str, port: int):
        self.proc = subprocess.Popen(L.ns_cmd(host, "python3", "-c", _LISTENER, ip, port),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"listener {host} {ip}:{port}: {line!r} {self.proc.stderr.read()}"

    def close(self):
        self.proc.kill()
        self.proc.wait()


def test_prometheus_parses_and_matches_json(gws, artifacts):
    n_fwd, n_rev = 7, 4
    listeners = [Listener("hostB", L.B_IP, 5200), Listener("hostA", L.A_IP, 5201)]
    try:
        L.send_udp("hostA", L.A_IP, L.B_IP, [{"sport": 40200, "dport": 5200, "payload": b"fwd-%d" % i} for i in range(n_fwd)])
        L.send_udp("hostB", L.B_IP, L.A_IP, [{"sport": 40201, "dport": 5201, "payload": b"rev-%d" % i} for i in range(n_rev)])
    finally:
        for x in listeners:
            x.close()
    # Where each datagram is counted: (gateway, SPI, direction) → packets.
    want = {("gw0", 1001, "outbound"): n_fwd, ("gw1", 1001, "inbound"): n_fwd,
            ("gw1", 1002, "outbound"): n_rev, ("gw0", 1002, "inbound"): n_rev}
    for (g, spi, d), n in want.items():
        L.wait_for(lambda: sa_counter(ctl_json(gws[g], "stats"), spi, d) == n, f"{g} SA {spi} {d} counts {n}")

    for name, gw in gws.items():
        before = ctl_json(gw, "stats")
        text = gw.ctl("stats", "--prometheus")
        after = ctl_json(gw, "stats")
        (artifacts / f"{name}.prom").write_text(text)
        samples = prom_samples(text)

        def prom(metric: str, **labels) -> float:
            key = (metric, tuple(sorted((k, str(v)) for k, v in labels.items())))
            assert key in samples, f"{name}: no sample {key} in the Prometheus text:\n{text}"
            return samples[key]

        def same(metric: str, b: int, a: int, **labels):
            # Traffic between the three reads (an IPv6 router solicitation…)
            # can only raise a counter: the text lies between the two JSONs.
            v = prom(metric, **labels)
            assert b <= v <= a, f"{name}: {metric}{labels} = {v}, stats --json {b} before / {a} after"

        # per SA: exactly the JSON numbers, and the datagrams sent
        assert before["sas"] == after["sas"], f"{name}: SA counters moved with no traffic"
        prom_sas = {(dict(lb)["spi"], dict(lb)["direction"]) for (m, lb) in samples if m == "secgw_sa_packets_total"}
        assert prom_sas == {(str(s["spi"]), s["direction"]) for s in before["sas"]}, \
            f"{name}: SAs in Prometheus {sorted(prom_sas)}, in JSON {before['sas']}"
        for s in before["sas"]:
            for field in ("packets", "bytes", "errors", "dummies"):
                v = prom(f"secgw_sa_{field}_total", spi=s["spi"], direction=s["direction"])
                assert v == s[field], f"{name} SA {s['spi']} {s['direction']}: {field} {v} in Prometheus, {s[field]} in JSON"
        for (g, spi, d), n in want.items():
            if g == name:
                assert prom("secgw_sa_packets_total", spi=spi, direction=d) == n, f"{name} SA {spi} {d}"
        # every drop reason, every port counter
        assert set(before["drops"]) == {dict(lb)["reason"] for (m, lb) in samples if m == "secgw_drops_total"}
        for reason, b in before["drops"].items():
            same("secgw_drops_total", b, after["drops"][reason], reason=reason)
        for pb, pa in zip(before["ports"], after["ports"]):
            for field in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drops", "rx_dropped_backend"):
                same(f"secgw_port_{field}_total", pb[field], pa[field], port=pb["name"])
        assert before["ports"][0]["rx_packets"] > 0, f"{name}: no traffic counted: {before['ports']}"


# --------------------------------------------------------------------------
# sa add / sa del with traffic

def new_sa_fragment(key: bytes) -> str:
    lo, hi = NEW_PORTS
    return (f'# a new inbound SA for gw1 and its inbound policy\n'
            f'[[sa]]\nspi = {NEW_SPI}\ndirection = "inbound"\nmode = "tunnel"\nalgorithm = "aes-128-gcm"\n'
            f'key = "{key.hex()}"\ntunnel_src = "{L.GW0_OUT_IP}"\ntunnel_dst = "{L.GW1_OUT_IP}"\nreplay_window = 64\n\n'
            f'[[policy]]\ndirection = "inbound"\nsrc = "192.0.2.0/24"\ndst = "198.51.100.0/24"\nprotocol = "udp"\n'
            f'dst_ports = "{lo}-{hi}"\npriority = 5\naction = "protect {NEW_SPI}"\n')


def esp_frames(sa, first_seq: int, n: int, tag: str) -> tuple[list, list[bytes]]:
    """n ESP frames wan → gw1 sealed by scapy with `sa` (sequence numbers
    from first_seq), and the inner IP packets they carry."""
    return L.scapy_esp_frames(sa, first_seq, n, tag, 40300, lambda i: NEW_PORTS[0] + i, 0x2000, 13)


def policies(gw: L.Gateway) -> list[dict]:
    return ctl_json(gw, "policy", "list")["policies"]


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_sa_add_then_del(gws, artifacts, source):
    gw1 = gws["gw1"]
    key = secrets.token_bytes(20)       # AES-128 key ‖ 4-byte salt
    frag = new_sa_fragment(key)
    sa = L.scapy_sa(L.SaInfo(NEW_SPI, "inbound", "aes-128-gcm", key, L.GW0_OUT_IP, L.GW1_OUT_IP))
    before_sas, before_pol = sa_keys(gw1), policies(gw1)
    assert (NEW_SPI, "inbound") not in before_sas
    events = gw1.events()

    # ---- add
    if source == "file":
        path = artifacts / "new-sa.toml"
        path.write_text(frag)
        out = gw1.ctl("sa", "add", path)
    else:
        out = gw1.ctl("sa", "add", "-", input=frag.encode())
    assert str(NEW_SPI) in out, f"`sa add` answered {out!r}"
    # ok means published: the SA and its policy are there at once.
    assert sa_keys(gw1) == before_sas | {(NEW_SPI, "inbound")}
    mine = [p for p in policies(gw1) if p["action"] == f"protect {NEW_SPI}"]
    assert len(mine) == 1 and mine[0]["direction"] == "inbound" and mine[0]["priority"] == 5, policies(gw1)
    assert_no_keys({"sa list --json": gw1.ctl("sa", "list", "--json"), "sa list": gw1.ctl("sa", "list")}, [key.hex()])

    # ---- scapy's ESP with the new SA reaches hostB
    bpf = f"udp and src host {L.A_IP} and dst portrange {NEW_PORTS[0]}-{NEW_PORTS[1]}"
    frames, inners = esp_frames(sa, 1, ESP_COUNT, f"add-{source}")
    cap = L.Capture("hostB", "b0", bpf, artifacts / "b0-added")
    L.send_frames("wan", "wan1", frames, artifacts / "esp-added", gap_ms=5)
    L.wait_for(lambda: sa_counter(ctl_json(gw1, "stats"), NEW_SPI, "inbound") == ESP_COUNT,
             f"gw1 SA {NEW_SPI} counts {ESP_COUNT} packets")
    got = L.captured_ips(cap.stop(settle=0.5))
    assert [L.normalize_ttl_csum(p) for p in got] == [L.normalize_ttl_csum(p) for p in inners], \
        f"hostB got {len(got)} packets from SA {NEW_SPI}, want the {ESP_COUNT} built"
    assert all(p[8] == 63 for p in got), "TTL decremented once"

    # ---- del
    no_sa = ctl_json(gw1, "stats")["drops"]["no_sa"]
    gw1.ctl("sa", "del", NEW_SPI, "--direction", "in")
    # ok means published: gone from the SAD; `sa list` shows it `retiring`
    # until its session is freed (and its `deleted` event sent).
    assert not [p for p in policies(gw1) if p["action"] == f"protect {NEW_SPI}"], policies(gw1)
    assert policies(gw1) == before_pol, "`sa del` removed other policies too"
    L.wait_for(lambda: sa_keys(gw1) == before_sas, f"SA {NEW_SPI} gone from `sa list`")

    frames, _ = esp_frames(sa, 1 + ESP_COUNT, ESP_COUNT, f"del-{source}")
    cap = L.Capture("hostB", "b0", bpf, artifacts / "b0-deleted")
    L.send_frames("wan", "wan1", frames, artifacts / "esp-deleted", gap_ms=5)
    st = L.wait_for(lambda: (s := ctl_json(gw1, "stats"))["drops"]["no_sa"] - no_sa >= ESP_COUNT and s,
                  f"gw1 counts {ESP_COUNT} more no_sa")
    got = cap.stop(settle=0.5)
    assert not got, f"hostB received {len(got)} packets of a deleted SA"
    assert st["drops"]["no_sa"] - no_sa == ESP_COUNT, st["drops"]
    others = {k: v for k, v in st["drops"].items() if v and k != "no_sa"}
    assert not others, f"gw1 dropped for other reasons too: {others}"

    # ---- events: added, then deleted with the final count
    ev = [e for e in events.stop() if e["spi"] == NEW_SPI]
    assert [(e["kind"], e["direction"]) for e in ev] == [("added", "inbound"), ("deleted", "inbound")], ev
    assert ev[1].get("packets") == ESP_COUNT, ev


# --------------------------------------------------------------------------
# malformed requests on a raw socket

class RawConn:
    """A plain Unix stream connection to the control socket."""

    def __init__(self, path: str):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(path)
        self.f = self.s.makefile("rb")

    def ask(self, line: bytes) -> dict:
        self.s.sendall(line)
        resp = self.f.readline()
        assert resp.endswith(b"\n"), f"no response line to {line[:80]!r}… (got {resp!r})"
        return json.loads(resp)

    def close(self):
        self.f.close()
        self.s.close()


def test_malformed_requests_keep_the_daemon(gws, artifacts):
    gw1 = gws["gw1"]
    big = b'{"v":1,"id":5,"cmd":"sa.add","args":{"toml":"' + b"x" * (2 << 20) + b'"}}\n'
    cases = [
        (b"this is not json\n", "bad_json", None),
        (b'["v", 1]\n', "bad_json", None),
        (b'{"v":2,"id":1,"cmd":"version"}\n', "bad_version", 1),
        (b'{"v":1,"id":2,"cmd":"sa.explode"}\n', "unknown_command", 2),
        (b'{"v":1,"id":3,"cmd":"sa.del"}\n', "bad_args", 3),
        (b'{"v":1,"id":4,"cmd":"sa.rekey","args":{"spi":1001}}\n', "bad_args", 4),
        (big, "too_large", None),
    ]
    conn = RawConn(gw1.socket)
    try:
        for line, code, rid in cases:
            r = conn.ask(line)
            what = f"{line[:60]!r}… → {r}"
            assert r.get("v") == 1 and r.get("ok") is False, what
            assert r["error"]["code"] == code and r["error"]["message"], what
            assert r.get("id") == rid, what
        # The connection goes on after all that.
        r = conn.ask(b'{"v":1,"id":"after","cmd":"version"}\n')
        assert r["ok"] is True and r["id"] == "after", r
    finally:
        conn.close()
    assert gw1.alive(), gw1.logs()
    out = gw1.ctl("version")
    assert out.strip(), "`secgw ctl version` printed nothing"
    assert sa_keys(gw1) == config_keys(L.load_config("gw1"))
    deliver(gws, artifacts)


# --------------------------------------------------------------------------
# sa add errors

def test_sa_add_errors(gws, artifacts):
    gw1 = gws["gw1"]
    before_sas, before_pol = sa_keys(gw1), policies(gw1)

    # the SPI and direction of an installed SA (ep1.toml's inbound 1001)
    dup = new_sa_fragment(secrets.token_bytes(20)).replace(str(NEW_SPI), "1001")
    r = ctl_raw(gw1, "sa", "add", "-", input=dup.encode())
    err = r.stderr.decode()
    assert r.returncode == 1 and re.search(r"secgw ctl: exists: .*1001", err), \
        f"duplicate SPI: exit {r.returncode}, stderr {err!r}"

    # a key two hex digits short; the line of `key =` in the fragment
    frag = new_sa_fragment(secrets.token_bytes(20))
    bad_key = secrets.token_bytes(19).hex()
    frag = re.sub(r'key = "[0-9a-f]+"', f'key = "{bad_key}"', frag)
    line = 1 + frag.splitlines().index(f'key = "{bad_key}"')
    path = artifacts / "bad-key.toml"
    path.write_text(frag)
    r = ctl_raw(gw1, "sa", "add", path)
    err = r.stderr.decode()
    assert r.returncode == 1 and "secgw ctl: invalid: " in err, f"bad key: exit {r.returncode}, stderr {err!r}"
    assert re.search(rf"<sa add>:{line}:\d+: sa\[0\]\.key: .*40", err), \
        f"the error should name <sa add>, line {line}, field sa[0].key and the expected length: {err!r}"
    assert bad_key not in err, "the error repeats the key material"

    assert sa_keys(gw1) == before_sas and policies(gw1) == before_pol, "a refused `sa add` left something behind"
    deliver(gws, artifacts)


# --------------------------------------------------------------------------
# SIGHUP / reload

def toml_blocks(text: str) -> list[str]:
    """The file cut before each table header line (`[x]` / `[[x]]`)."""
    return re.split(r"(?m)^(?=\[)", text)


def without_sa(text: str, spi: int) -> str:
    keep = [b for b in toml_blocks(text)
            if not (b.startswith("[[sa]]") and re.search(rf"(?m)^spi = {spi}$", b))
            and not (b.startswith("[[policy]]") and re.search(rf'(?m)^action = "protect {spi}"$', b))]
    return "".join(keep)


def hup(gw: L.Gateway):
    pid = gw.proc.pid   # `ip netns exec` execs secgw: this is the gateway
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    assert comm == "secgw", f"pid {pid} is {comm!r}, not the gateway"
    subprocess.run(["kill", "-HUP", str(pid)], check=True)


def test_sighup_reload(start_gws, artifacts):
    src = L.CONFIG_DIR / L.GW_CONFIG["gw1"]
    copy = artifacts / "gw1-reload.toml"
    copy.write_text(src.read_text())
    gws = start_gws({"gw0": L.CONFIG_DIR / L.GW_CONFIG["gw0"], "gw1": copy})
    gw1 = gws["gw1"]
    full = config_keys(L.load_config("gw1"))
    assert sa_keys(gw1) == full

    # ---- 1. SA 1003 and its policy leave the file: SIGHUP applies it
    text = without_sa(copy.read_text(), 1003)
    copy.write_text(text)
    cfg = tomllib.loads(text)
    assert config_keys(cfg) == full - {(1003, "inbound")}
    assert [p["action"] for p in cfg["policy"]] == ["protect 1002", "protect 1001"], cfg["policy"]
    hup(gw1)
    L.wait_for(lambda: sa_keys(gw1) == full - {(1003, "inbound")}, "SA 1003 gone from `sa list` after SIGHUP")
    assert "SIGHUP: reloading the config" in gw1.stderr() and "config reloaded from" in gw1.stderr(), gw1.logs()
    assert sorted(p["action"] for p in policies(gw1)) == ["protect 1001", "protect 1002"], policies(gw1)
    deliver(gws, artifacts)

    # ---- 2. a port's mtu changes: refused, nothing applied
    sas = ctl_json(gw1, "sa", "list")["sas"]
    pol = policies(gw1)
    text = copy.read_text()
    assert text.count('interface = "gw1-out"\n') == 1
    copy.write_text(text.replace('interface = "gw1-out"\n', 'interface = "gw1-out"\nmtu = 1400\n'))
    assert [p.get("mtu") for p in tomllib.loads(copy.read_text())["port"]] == [1400, None]
    hup(gw1)
    line = L.wait_for(lambda: next((ln for ln in gw1.stderr().splitlines() if "reload refused" in ln), None),
                    "a `reload refused` line in gw1's stderr")
    assert "outside" in line and "mtu" in line and "1400" in line, \
        f"the refusal should name the port, the field and the new value: {line}"
    after = ctl_json(gw1, "sa", "list")["sas"]
    strip = lambda l: sorted((s["spi"], s["direction"], s["state"], s["worker"], s["algorithm"]) for s in l)
    assert strip(after) == strip(sas), f"`sa list` changed by a refused reload: {sas} → {after}"
    assert policies(gw1) == pol
    deliver(gws, artifacts)

    # ---- 3. the same through the socket: an error, exit 1, `invalid`
    r = ctl_raw(gw1, "reload")
    err = r.stderr.decode()
    assert r.returncode == 1 and "secgw ctl: invalid: " in err, f"`secgw ctl reload`: exit {r.returncode}, {err!r}"
    assert "outside" in err and "mtu" in err, err
    # The log line and the error say the same thing.
    msg = err.split("secgw ctl: invalid: ", 1)[1].strip()
    assert msg in line, f"socket error {msg!r} differs from the SIGHUP log line {line!r}"
    assert strip(ctl_json(gw1, "sa", "list")["sas"]) == strip(sas)
    assert gw1.alive()

    # ---- 4. a file `check` warns about is applied, and the warning said:
    # the wan's /24 routed out of the protected port (gw1's ESP to gw0
    # would leave on the inside). Last: it breaks the tunnel.
    text = copy.read_text().replace('mtu = 1400\n', '')
    route = '[[route]]\nprefix = "203.0.113.0/24"\nport = "outside"\n'
    assert text.count(route) == 1
    copy.write_text(text.replace(route, route.replace('"outside"', '"inside"')))
    r = ctl_raw(gw1, "reload")
    out = r.stdout.decode()
    assert r.returncode == 0, (out, r.stderr.decode())
    assert "\nwarning: " in out and "203.0.113.1 is routed out of protected port inside" in out, out
    assert "reload: " in gw1.stderr() and "is routed out of protected port inside" in gw1.stderr(), gw1.logs()


# --------------------------------------------------------------------------
# policy del

def test_policy_added_then_deleted_by_its_listed_number(gws, artifacts):
    """`sa add` with a policy alone (outbound DISCARD of ICMP hostA → hostB,
    priority 1, ahead of the PROTECT entry): Linux's ping gets nothing
    back and gw0 counts policy_discard; `policy del N` (N from `policy
    list`) removes exactly it: the SPD is as before and ping goes through."""
    gw0 = gws["gw0"]
    before = policies(gw0)
    tx, rx, out = L.ping("hostA", L.B_IP, count=2)
    assert (tx, rx) == (2, 2), out
    frag = ('[[policy]]\ndirection = "outbound"\nsrc = "192.0.2.0/24"\ndst = "198.51.100.0/24"\n'
            'protocol = "icmp"\npriority = 1\naction = "discard"\n')
    gw0.ctl("sa", "add", "-", input=frag.encode())
    listed = policies(gw0)
    n = next(i for i, p in enumerate(listed) if p["action"] == "discard")
    assert listed[:n] + listed[n + 1:] == before, listed
    drops = ctl_json(gw0, "stats")["drops"]["policy_discard"]
    tx, rx, out = L.ping("hostA", L.B_IP, count=3)
    assert (tx, rx) == (3, 0), out
    assert ctl_json(gw0, "stats")["drops"]["policy_discard"] - drops == 3
    table = gw0.ctl("policy", "list")
    assert re.search(rf"(?m)^\s*{n}\s+outbound\s+192\.0\.2\.0/24\s+198\.51\.100\.0/24\s+1\s.*discard\s*$", table), table
    out = gw0.ctl("policy", "del", n)
    assert "discard" in out and f"index={n}" in out, out
    assert policies(gw0) == before
    tx, rx, out = L.ping("hostA", L.B_IP, count=2)
    assert (tx, rx) == (2, 2), out
    # A number past the end removes nothing and says so.
    r = subprocess.run([str(gw0.binary), "ctl", "--socket", gw0.socket, "policy", "del", str(len(before))],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and f"no policy {len(before)}" in r.stderr, (r.returncode, r.stderr)
    assert policies(gw0) == before
