"""SIGINT stops a gateway cleanly: exit status 0, final counters on stdout, the
stats file written, and no XDP program left on its interfaces."""
import json
import time

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
