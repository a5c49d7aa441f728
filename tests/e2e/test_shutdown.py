"""SIGINT stops a gateway cleanly: exit status 0, final counters on stdout, the
stats file written, and no XDP program left on its interfaces."""
import json

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
