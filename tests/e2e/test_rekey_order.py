"""A rekey in the wrong order is named, not only counted (fresh-user
trial, helper-82): the operator sees which SPI the peer uses that this
gateway lacks, and that a retiring inbound SA was still in use.

1. gw0 rekeys its outbound SA 1001 to SPI 3001 before gw1 has an inbound
   SA 3001: hostA's pings are lost as `no_sa` on gw1, and gw1 logs a
   warning naming SPI 3001 (0x00000bb9) and gw0's address as the source.
2. gw1 then takes the inbound SA 3001 (the same key): pings pass again.
3. gw1 alone rekeys that inbound SA to 4001 (gw0 keeps sending 3001):
   when the grace (2 s here) ends while gw0's packets still arrive, gw1
   logs that SA 3001 went while its peer still sent with it.
4. (second test) gw0 restarted with the same SAs counts from sequence
   number 1 again: gw1 drops its ESP as `replay` and logs a warning naming
   SA 1001 and a sequence number, and the likely cause.
"""
from __future__ import annotations

import re
import secrets
import time

import e2elib as L


def test_wrong_order_rekey_names_the_spi(testbed, start_gws, artifacts):
    cfg1 = artifacts / "ep1-grace.toml"
    text = (L.CONFIG_DIR / "ep1.toml").read_text()
    assert "[control]" not in text
    cfg1.write_text(text + "\n[control]\nrekey_grace_ms = 2000\n")
    gws = start_gws({"gw0": L.CONFIG_DIR / "ep0.toml", "gw1": cfg1})
    gw0, gw1 = gws["gw0"], gws["gw1"]
    assert L.ping("hostA", L.B_IP, count=2)[1] == 2, "the tunnel works before the rekey"

    key = (secrets.token_hex(20) + "\n").encode()
    gw0.ctl("sa", "rekey", 1001, "--spi", 3001, "--key-file", "-", "--direction", "out", input=key)
    tx, rx, out = L.ping("hostA", L.B_IP, count=3)
    assert rx == 0, out
    deadline = time.monotonic() + 5
    while "dropped as no_sa" not in gw1.stderr() and time.monotonic() < deadline:
        time.sleep(0.2)
    err = gw1.stderr()
    assert "ESP packets dropped as no_sa since start; one had SPI 3001 (0x00000bb9) from 203.0.113.1" in err, gw1.logs()

    gw1.ctl("sa", "rekey", 1001, "--spi", 3001, "--key-file", "-", "--direction", "in", input=key)
    assert L.ping("hostA", L.B_IP, count=3)[1] == 3, "the tunnel works again on SPI 3001"

    gw1.ctl("sa", "rekey", 3001, "--spi", 4001, "--key-file", "-", "--direction", "in", input=(secrets.token_hex(20) + "\n").encode())
    # gw0 still sends 3001: through the grace and past its end.
    L.ping("hostA", L.B_IP, count=16, interval=0.2)
    err = gw1.stderr()
    assert re.search(r"SA 3001 inbound( \(tunnel_dst [0-9.]+\))? rekeyed while its peer still sends with it", err), gw1.logs()
    assert "now dropped as no_sa" in err


def test_a_restarted_peer_is_named_by_the_replay_warning(gws, artifacts):
    gw0, gw1 = gws["gw0"], gws["gw1"]
    tx, rx, out = L.ping("hostA", L.B_IP, count=300, interval=0.005)
    assert rx >= 290, out
    gw0.stop()
    gw0.start()
    # At least 64 a second, for longer than a second: replays at gw1.
    L.ping("hostA", L.B_IP, count=400, interval=0.005)
    deadline = time.monotonic() + 5
    while "dropped as replay" not in gw1.stderr() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert re.search(r"\d+ ESP packets dropped as replay in the last second; one had SPI 1001 \(0x000003e9\) and sequence number \d+: "
                     r"the peer's sequence numbers went back", gw1.stderr()), gw1.logs()
    assert int(gw1.ctl_stats()["drops"]["replay"]) >= 64
