"""SIGINT stops a gateway cleanly: exit status 0, final counters on stdout, the
stats file written, and no XDP program left on its interfaces."""
import json
import os
import subprocess as sp
import time

import pytest

import e2elib as L


def test_sigint_exits_0_and_detaches_xdp(gws, testbed):
    real_secgw = not str(testbed["binary"]).endswith(".py")  # refgw.py uses no XDP
    if real_secgw:
        for g in gws.values():
            assert len(g.xdp_attached()) == 2, f"{g.name}: XDP not attached while running"
    L.run_ns("hostA", "ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", L.B_IP, check=False)
    for g in gws.values():
        rc = g.stop()
        assert rc == 0, f"{g.name} exited with {rc} after SIGINT\n{g.logs()}"
        assert g.stdout.strip(), f"{g.name} printed no final counters on stdout\n{g.logs()}"
        assert not g.xdp_attached(), f"{g.name}: XDP still attached after exit: {g.xdp_attached()}"
        st = json.loads(g.stats_file.read_text())
        assert {"ports", "sas", "drops"} <= st.keys(), f"{g.name} stats file: {st}"


def test_stats_file_is_complete_from_its_first_write(testbed, artifacts):
    """Every version of the --stats-file a reader can see, from the moment
    the gateway starts, validates against docs/ctl-stats.schema.json: every
    port, SA, drop reason and worker (a placeholder with empty lists was
    written at start before, for up to a second). A file left by an earlier
    run is gone at start, not shown as this run's counters."""
    import threading

    import jsonschema

    schema = json.loads((L.REPO / "docs" / "ctl-stats.schema.json").read_text())
    g = L.Gateway("gw0", testbed["binary"], artifacts)
    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            try:
                text = g.stats_file.read_text()
            except FileNotFoundError:
                text = None
            if text is not None and (not seen or seen[-1] != text):
                seen.append(text)
            time.sleep(0.002)

    t = threading.Thread(target=watch)
    # A file beside it with the stats file's stem is someone else's: the
    # gateway's temporary file must not take it over.
    beside = g.stats_file.with_suffix(".tmp")
    beside.write_text("precious")
    try:
        # start() removes stats.json first; a stale one written after that
        # and before the process runs must not survive into this run.
        orig_popen = L.subprocess.Popen

        def popen(*a, **kw):
            g.stats_file.write_text('{"stale": true}')
            return orig_popen(*a, **kw)

        L.subprocess.Popen = popen
        try:
            g.start()
        finally:
            L.subprocess.Popen = orig_popen
        t.start()
        time.sleep(2.5)
    finally:
        stop.set()
        if t.is_alive():
            t.join()
        rc = g.stop()
    assert rc == 0, g.logs()
    assert beside.read_text() == "precious", f"{beside} was overwritten or removed"
    assert seen, f"no stats file while the gateway ran\n{g.logs()}"
    for text in seen:
        doc = json.loads(text)
        assert "stale" not in doc, "the earlier run's file was still there after 'ready'"
        jsonschema.validate(doc, schema)
        assert len(doc["ports"]) == 2 and doc["workers"], doc


@pytest.mark.parametrize("backend", ["software", "descriptor"])
def test_sigint_under_overload_accounts_for_every_frame(testbed, start_gws, artifacts, backend):
    """SIGINT while hostA floods gw0 (2 workers, `ep0-2w.toml`; every flow to
    SA 2002 of worker 1, so worker 0 hands its packets over): in gw0's final
    stats file every frame received is either sent or dropped under a reason.
    helper-98 found thousands missing: packets left in a handoff ring when the
    workers stopped, and (descriptor device, job ring 16 deep) ops still
    waiting for the device after the drain's second. The few frames gw0 sends
    of its own (ARP requests) are allowed for."""
    text = (L.CONFIG_DIR / "ep0-2w.toml").read_text()
    if backend == "descriptor":
        text = text.replace('[crypto]\nbackend = "software"\n',
                            '[crypto]\nbackend = "descriptor"\nmax_sessions_per_qp = 2\nring_depth = 16\n', 1)
        assert 'ring_depth = 16' in text
    cfg0 = artifacts / "gw0.toml"
    cfg0.write_text(text)
    gw = start_gws({"gw0": cfg0, "gw1": L.CONFIG_DIR / "ep1-2w.toml"})
    gen = sp.Popen(L.ns_cmd("hostA", L.pktgen_binary(testbed), "gen", "--iface", "a0", "--queues", "2",
                            "--src-mac", L.A_MAC, "--dst-mac", L.GW0_IN_MAC, "--src", L.A_IP, "--dst", L.B_IP,
                            "--flows", "4", "--size", "128", "--rate", "0", "--duration", "6", "--warmup", "0"),
                   stdout=sp.DEVNULL, stderr=sp.PIPE)
    try:
        time.sleep(3.0)
        g = gw["gw0"]
        rc = g.stop(timeout=15)
    finally:
        gen.wait(timeout=30)
    assert rc == 0, g.logs()
    st = json.loads(g.stats_file.read_text())
    rx = sum(p["rx_packets"] for p in st["ports"])
    tx = sum(p["tx_packets"] for p in st["ports"])
    drops = sum(st["drops"].values())
    handed = sum(w["handoff_out"] for w in st["workers"])
    assert rx > 10_000 and handed > 1000, f"too little load to judge: rx {rx}, handed over {handed}"
    missing = rx - tx - drops
    assert -20 <= missing <= 0, (f"{missing} frames received and neither sent nor counted as dropped "
                                 f"(rx {rx}, tx {tx}, drops {drops}: {L.nonzero_drops(st)})\n{g.logs()}")


def test_a_second_gateway_on_a_live_socket_is_not_taken_for_ready(gws, testbed, artifacts):
    """A second gw0 on the running one's control socket exits ("a secgw is
    already listening there"); the harness must report that, not take the
    word "already" for the "ready" line (helper-98: tests then talked to the
    old gateway), in e2elib and in testbed/lib.sh's gw_start alike."""
    second = L.Gateway("gw0", testbed["binary"], artifacts / "second")
    with pytest.raises(AssertionError, match="before 'ready'"):
        second.start(timeout=10)
    assert "already" in second.stderr(), second.logs()
    env = dict(os.environ, SECGW_BIN=str(testbed["binary"]), SECGW_RUN_DIR=str(artifacts / "lib"))
    r = L.run(["bash", "-c", f'source "{L.TESTBED}/lib.sh" && gw_start gw0 {L.CONFIG_DIR / L.GW_CONFIG["gw0"]} '
               f'--socket {gws["gw0"].socket}'], check=False, env=env)
    assert r.returncode != 0, f"gw_start reported a gateway that exited as started:\n{r.stdout}\n{r.stderr}"
    assert gws["gw0"].alive()
