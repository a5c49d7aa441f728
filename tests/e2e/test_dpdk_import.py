"""DPDK ipsec-secgw's own sample configs carry traffic: secgw runs
/usr/share/dpdk/examples/ipsec-secgw/ep0.cfg and ep1.cfg (Debian's dpdk-doc,
DPDK 22.11) directly (`secgw run --config ep0.cfg -p … -u … --port …
--eth-dest …`) and once converted by `secgw import-dpdk` to TOML.

Topology (its own namespaces, built with testbed/lib.sh's helpers), the
sample's addressing, ep0 and ep1 back to back on their unprotected port 0:

    hostA a0 192.168.115.10 ── [port 2] ep0 [port 0] ── wan bridge ── [port 0] ep1 [port 2] ── b0 192.168.105.10 hostB

Which SPI carries which direction comes from the files: ep0 `sp ipv4 out …
protect 5 … dst 192.168.105.0/24` with `sa out 5 … src 172.16.1.5 dst
172.16.2.5`, ep1 `sp ipv4 out … protect 105 … dst 192.168.115.0/24` with
`sa out 105 … src 172.16.2.5 dst 172.16.1.5`; `rt … port 0` sends both out
of port 0. Ports 1 and 3 are not used (-p 0x5 -u 0x1): their routes are left
out with a warning. Next hops are DPDK's own mechanism, --eth-dest (secgw's
peer_mac): no ARP.

Independent check: the ESP on the wan is decrypted by scapy with the keys
read from the .cfg files by this test's own reading of them.

A third run adds DPDK's SA-wide and fragment options (-e -w 128 --mtu 1400
--reassemble 32 --frag-ttl 2000000000): scapy decrypts the ESP only as
extended-sequence-number SAs, and fails to without ESN.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import e2elib as L
from conftest import _binary

SAMPLES = Path("/usr/share/dpdk/examples/ipsec-secgw")
NSS = {"hA": "dpi-hA", "ep0": "dpi-ep0", "wan": "dpi-wan", "ep1": "dpi-ep1", "hB": "dpi-hB"}
MAC = {"a0": "02:00:00:00:d0:0a", "ep0-p2": "02:00:00:00:d0:02", "ep0-p0": "02:00:00:00:d0:00",
       "w0": "02:00:00:00:d0:f0", "w1": "02:00:00:00:d1:f1", "ep1-p0": "02:00:00:00:d1:00",
       "ep1-p2": "02:00:00:00:d1:02", "b0": "02:00:00:00:d1:0b"}
A_IP, B_IP = "192.168.115.10", "192.168.105.10"


def cfg_sas(path: Path) -> dict[tuple[str, int], dict]:
    """This test's own reading of a .cfg's sa lines: (dir, spi) → fields."""
    text = path.read_text()
    logical, cur = [], ""
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        if line.endswith("\\"):
            cur += line[:-1]
            continue
        logical.append(cur + line)
        cur = ""
    out = {}
    for l in logical:
        w = l.split()
        if not w or w[0] != "sa":
            continue
        kv = {w[i]: w[i + 1] for i in range(3, len(w) - 1)}
        out[(w[1], int(w[2]))] = kv
    return out


def key(s: str) -> bytes:
    return bytes(int(b, 16) for b in s.split(":"))


def gw_args(ep: str) -> list[str]:
    """DPDK's command-line options for ep0 or ep1 in this topology."""
    peer = {"ep0": "ep1", "ep1": "ep0"}[ep]
    host = {"ep0": "a0", "ep1": "b0"}[ep]
    return ["-p", "0x5", "-u", "0x1", "--port", f"0={ep}-p0", "--port", f"2={ep}-p2",
            "--eth-dest", f"0,{MAC[peer + '-p0']}", "--eth-dest", f"2,{MAC[host]}"]


@pytest.fixture(scope="module")
def topo():
    if os.geteuid() != 0:
        pytest.fail("the e2e tests must run as root (network namespaces, AF_XDP)")
    for f in ("ep0.cfg", "ep1.cfg"):
        if not (SAMPLES / f).is_file():
            pytest.fail(f"{SAMPLES / f} missing: install Debian's dpdk-doc package (testbed/test.sh does)")
    missing = [t for t in ("ip", "tcpdump", "ethtool", "ping") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"missing tools: {missing}")
    binary = _binary()
    names = " ".join(NSS.values())
    script = f"""
set -e
for b in {names}; do n="$(ns $b)"; ip netns del "$n" 2>/dev/null || true; ip netns add "$n";
  _sysctl_ns $b net.ipv6.conf.all.disable_ipv6 1; _sysctl_ns $b net.ipv6.conf.default.disable_ipv6 1
  nsx $b ip link set lo up; done
for b in dpi-ep0 dpi-ep1; do _sysctl_ns $b net.ipv4.ip_forward 0; done
_veth dpi-hA a0 {MAC['a0']} dpi-ep0 ep0-p2 {MAC['ep0-p2']}
_veth dpi-ep0 ep0-p0 {MAC['ep0-p0']} dpi-wan w0 {MAC['w0']}
_veth dpi-wan w1 {MAC['w1']} dpi-ep1 ep1-p0 {MAC['ep1-p0']}
_veth dpi-ep1 ep1-p2 {MAC['ep1-p2']} dpi-hB b0 {MAC['b0']}
nsx dpi-wan ip link add br0 type bridge stp_state 0 mcast_snooping 0
for x in "dpi-hA a0" "dpi-ep0 ep0-p2" "dpi-ep0 ep0-p0" "dpi-wan w0" "dpi-wan w1" "dpi-ep1 ep1-p0" "dpi-ep1 ep1-p2" "dpi-hB b0"; do
  set -- $x; _if_prep $1 $2; nsx $1 ip link set $2 up; done
nsx dpi-wan ip link set w0 master br0; nsx dpi-wan ip link set w1 master br0; nsx dpi-wan ip link set br0 up
nsx dpi-hA ip addr add {A_IP}/24 dev a0
nsx dpi-hA ip neigh replace 192.168.115.1 lladdr {MAC['ep0-p2']} dev a0 nud permanent
nsx dpi-hA ip route add 192.168.105.0/24 via 192.168.115.1
nsx dpi-hB ip addr add {B_IP}/24 dev b0
nsx dpi-hB ip neigh replace 192.168.105.1 lladdr {MAC['ep1-p2']} dev b0 nud permanent
nsx dpi-hB ip route add 192.168.115.0/24 via 192.168.105.1
"""
    try:
        L.lib_sh(script, timeout=120)
    except AssertionError as e:
        teardown()
        pytest.fail(f"topology did not come up:\n{e}")
    try:
        yield {"binary": binary}
    finally:
        teardown()


def teardown():
    for n in NSS.values():
        subprocess.run(["ip", "netns", "del", L.ns(n)], capture_output=True)


def run_pair(binary, artifacts, configs: dict, args: dict):
    gws = {ep: L.Gateway(NSS[ep], binary, artifacts, configs[ep], args[ep]) for ep in ("ep1", "ep0")}
    started = []
    try:
        for g in gws.values():
            g.start()
            started.append(g)
    except BaseException:
        for g in started:
            g.stop()
        raise
    return gws


def stop_pair(gws):
    problems = []
    for g in gws.values():
        died = g.proc is not None and not g.alive()
        rc = g.stop()
        if died or rc != 0:
            problems.append(f"{g.name}: status {rc}\n{g.logs()}")
    assert not problems, "\n".join(problems)


def check_traffic(gws, artifacts, tag: str, esn: bool = False):
    """Pings both ways; the wan carries ESP with the files' SPIs and tunnel
    addresses, which scapy decrypts with the files' keys (with `esn`, as
    extended-sequence-number SAs: the ICV covers the high 32 bits of the
    sequence number too, RFC 4303 §3.3.2.1, so the other reading fails)."""
    from scapy.layers.inet import IP, ICMP
    from scapy.layers.ipsec import ESP, SecurityAssociation

    cap = L.Capture(NSS["wan"], "w0", "esp", artifacts / f"wan-{tag}")
    try:
        tx, rx, out = L.ping(NSS["hA"], B_IP, count=5)
        assert (tx, rx) == (5, 5), f"hostA → hostB through the tunnel: {out}\n" + "\n".join(g.logs(30) for g in gws.values())
        tx, rx, out = L.ping(NSS["hB"], A_IP, count=5)
        assert (tx, rx) == (5, 5), f"hostB → hostA: {out}"
    finally:
        pkts = cap.stop()

    sas0, sas1 = cfg_sas(SAMPLES / "ep0.cfg"), cfg_sas(SAMPLES / "ep1.cfg")
    # What the files say: ep0 sends 192.168.105.0/24 on SA 5, ep1 sends
    # 192.168.115.0/24 on SA 105; each is the other's inbound SA.
    want = {5: (sas0[("out", 5)], sas1[("in", 5)], A_IP, B_IP),
            105: (sas1[("out", 105)], sas0[("in", 105)], B_IP, A_IP)}
    seen = {5: 0, 105: 0}
    for p in pkts:
        if ESP not in p:
            continue
        spi = p[ESP].spi
        assert spi in want, f"unexpected SPI {spi} on the wan"
        out_sa, in_sa, src, dst = want[spi]
        assert out_sa == in_sa, f"SPI {spi}: ep0.cfg and ep1.cfg disagree"
        assert (p[IP].src, p[IP].dst) == (out_sa["src"], out_sa["dst"]), p.summary()
        assert out_sa["cipher_algo"] == "aes-128-cbc" and out_sa["auth_algo"] == "sha1-hmac"
        def scapy_sa(esn_en):
            return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-CBC", crypt_key=key(out_sa["cipher_key"]),
                                       auth_algo="HMAC-SHA1-96", auth_key=key(out_sa["auth_key"]),
                                       tunnel_header=IP(src=out_sa["src"], dst=out_sa["dst"]), esn_en=esn_en, esn=0)
        inner = scapy_sa(esn).decrypt(p[IP])  # checks the ICV too
        with pytest.raises(Exception):
            scapy_sa(not esn).decrypt(p[IP])
        assert (inner[IP].src, inner[IP].dst) == (src, dst), inner.summary()
        assert ICMP in inner
        seen[spi] += 1
    assert seen[5] >= 10 and seen[105] >= 10, f"ESP per SPI on the wan: {seen}"
    for g in gws.values():
        st = g.stats()
        assert st, g.name


def test_cfg_files_run_directly(topo, artifacts):
    configs = {ep: SAMPLES / f"{ep}.cfg" for ep in ("ep0", "ep1")}
    gws = run_pair(topo["binary"], artifacts, configs, {ep: gw_args(ep) for ep in configs})
    try:
        for g in gws.values():
            err = g.stderr()
            # The import's notices are logged: the NULL/NULL SAs are refused.
            assert "refused: cipher_algo" in err and "RFC 4303 §3.2" in err, err[-3000:]
        check_traffic(gws, artifacts, "cfg")
    finally:
        stop_pair(gws)


def test_imported_toml_runs(topo, artifacts):
    configs = {}
    for ep in ("ep0", "ep1"):
        p = L.run([topo["binary"], "import-dpdk", SAMPLES / f"{ep}.cfg", *gw_args(ep)])
        toml = artifacts / f"{ep}.toml"
        toml.write_text(p.stdout)
        assert re.search(r"^peer_mac = ", p.stdout, re.M), p.stdout
        L.run([topo["binary"], "check", toml])
        configs[ep] = toml
    gws = run_pair(topo["binary"], artifacts, configs, {"ep0": [], "ep1": []})
    try:
        check_traffic(gws, artifacts, "toml")
    finally:
        stop_pair(gws)


def test_cfg_files_with_dpdk_sa_options(topo, artifacts):
    """DPDK's -e (ESN on every SA), -w, --mtu, --reassemble and --frag-ttl
    on both gateways: traffic flows, and scapy decrypts the wan's ESP only
    as ESN SAs (the ICV covers the high sequence bits)."""
    extra = ["-e", "-w", "128", "--mtu", "1400", "--reassemble", "32", "--frag-ttl", "2000000000"]
    configs = {ep: SAMPLES / f"{ep}.cfg" for ep in ("ep0", "ep1")}
    for ep in configs:
        p = L.run([topo["binary"], "import-dpdk", configs[ep], *gw_args(ep), *extra])
        (artifacts / f"{ep}-options.toml").write_text(p.stdout)
        assert "# Options: " in p.stdout and " -e --mtu 1400 --reassemble 32 --frag-ttl 2000000000" in p.stdout, p.stdout[:600]
    gws = run_pair(topo["binary"], artifacts, configs, {ep: gw_args(ep) + extra for ep in configs})
    try:
        check_traffic(gws, artifacts, "options", esn=True)
    finally:
        stop_pair(gws)
