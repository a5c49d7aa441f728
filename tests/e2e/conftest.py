"""Fixtures of the netns end-to-end tests (run as root: `python3 -m pytest -v tests/e2e`).

- `testbed` (session): checks that everything needed is there — root, ip,
  tcpdump, ethtool, scapy, cryptography, the configs, the secgw binary (built
  with `cargo build --release` unless SECGW_BIN names one) and that
  `secgw check` accepts both configs — then brings the topology of
  testbed/lib.sh up and tears it down at the end, also after failures. A missing
  piece FAILS the run (an error on every test); nothing here ever skips.
- `gws` (function): fresh gw0 and gw1 for each test (`secgw run --config …
  --stats-file …` in their namespaces), so sequence numbers start at 1, replay
  windows are empty and counters are zero. Teardown stops both with SIGINT and
  fails the test if a gateway died during it or did not exit 0.
- `start_gws` (function): a function start_gws({"gw0": path, "gw1": path})
  that starts gw0 and gw1 with the given config files (same checks and
  teardown as `gws`); for tests that run other configs than ep0/ep1.toml.
- `no_host_fragments_left` (autouse): fails a test that leaves fragment
  queues in hostA's or hostB's stack (they would expire into a later test).

Environment: SECGW_BIN (binary to test, e.g. testbed/refgw.py, the Python
reference double), SECGW_CONFIG_DIR (default configs/), SECGW_NS_PREFIX
(namespace name prefix), SECGW_E2E_ARTIFACTS (default target/e2e, under CARGO_TARGET_DIR when set: logs, pcaps,
stats of each test), SECGW_E2E_PPS (stream rate, default 5000).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import e2elib as L


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _binary() -> str:
    env = os.environ.get("SECGW_BIN")
    if env:
        return env
    binary = L.TARGET / "release" / "secgw"
    if os.environ.get("SECGW_E2E_BUILD", "1") != "0":
        cargo = shutil.which("cargo")
        if cargo is None:
            pytest.fail(f"cargo not found: cannot build {binary} (or set SECGW_BIN)")
        p = subprocess.run([cargo, "build", "--release"], cwd=L.REPO, capture_output=True, text=True)
        if p.returncode != 0:
            pytest.fail(f"cargo build --release failed:\n{p.stderr[-4000:]}")
    return str(binary)


@pytest.fixture(scope="session")
def testbed():
    if os.geteuid() != 0:
        pytest.fail("the e2e tests must run as root (network namespaces, AF_XDP)")
    missing = [t for t in ("ip", "tcpdump", "ethtool") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"missing tools: {missing} (run testbed/test.sh to install them)")
    try:
        import cryptography  # noqa: F401
        import scapy.layers.ipsec  # noqa: F401
    except ImportError as e:
        pytest.fail(f"python package missing: {e} (python3 -m pip install scapy cryptography)")
    for gw in ("gw0", "gw1"):
        cfg = L.CONFIG_DIR / L.GW_CONFIG[gw]
        if not cfg.is_file():
            pytest.fail(f"config {cfg} not found")
    binary = _binary()
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        pytest.fail(f"secgw binary {binary} missing or not executable")
    for gw in ("gw0", "gw1"):
        cfg = L.CONFIG_DIR / L.GW_CONFIG[gw]
        p = subprocess.run([binary, "check", str(cfg)], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            pytest.fail(f"`secgw check {cfg}` failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    L.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        L.lib_sh("topo_up", timeout=120)
    except AssertionError as e:
        L.lib_sh("topo_down", timeout=60)
        pytest.fail(f"topology did not come up:\n{e}")
    try:
        yield {"binary": binary}
    finally:
        L.lib_sh("topo_down", timeout=60)


@pytest.fixture(autouse=True)
def no_host_fragments_left(request):
    """After every testbed test (autouse, so torn down after the gateways
    are stopped): fails the test if hostA's or hostB's stack still holds
    fragment queues, and waits for them to expire first. Left there, each
    would answer with an ICMP Time Exceeded some 30 s later, through the
    tunnel of whatever test runs then (session 34's red CI: test_rekey
    counted three such from the test before it)."""
    yield
    if "testbed" not in request.fixturenames:
        return
    left = {h: q for h in ("hostA", "hostB") if any((q := L.frag_queues(h)).values())}
    if not left:
        return
    timeout = 5 + max(int(L.run_ns(h, "sysctl", "-n", k).stdout.strip())
                      for h in left for k in ("net.ipv4.ipfrag_time", "net.ipv6.ip6frag_time"))
    try:
        L.wait_for(lambda: not any(any(L.frag_queues(h).values()) for h in left), "fragment queues expired", timeout=timeout)
    finally:
        pytest.fail(f"the test left fragment queues in the hosts' stacks: {left}; they would expire with ICMP "
                    "Time Exceeded into a later test (let them expire within the test, as "
                    "test_reassembly.py's forwarded-off case does)")


@pytest.fixture
def artifacts(request):
    d = L.ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def _start_pair(binary, artifacts, configs=None) -> dict:
    # gw1 first: once gw0 (the usual sender) is ready, its peer is too (a
    # dummy or a first packet of gw0 never precedes gw1's readiness).
    gw = {n: L.Gateway(n, binary, artifacts, (configs or {}).get(n)) for n in ("gw1", "gw0")}
    try:
        for g in gw.values():
            g.start()
    except BaseException:
        for g in gw.values():
            g.stop()
        raise
    return gw


def _stop_pair(gw: dict, artifacts, request):
    problems = []
    for g in gw.values():
        died = g.proc is not None and not g.alive()
        rc = g.stop()
        if died:
            problems.append(f"{g.name} died during the test (status {rc})\n{g.logs()}")
        elif rc != 0:
            problems.append(f"{g.name} exited with status {rc} after SIGINT\n{g.logs()}")
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for g in gw.values():
            print(g.logs(tail=30))
        print(f"artifacts: {artifacts}")
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture
def gws(testbed, artifacts, request):
    gw = _start_pair(testbed["binary"], artifacts)
    yield gw
    _stop_pair(gw, artifacts, request)


@pytest.fixture
def start_gws(testbed, artifacts, request):
    started = []

    def start(configs: dict) -> dict:
        missing = {"gw0", "gw1"} - configs.keys()
        if missing:
            pytest.fail(f"start_gws needs a config for {sorted(missing)}")
        if started:
            pytest.fail("start_gws: gateways already started in this test")
        gw = _start_pair(testbed["binary"], artifacts, configs)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        _stop_pair(gw, artifacts, request)
