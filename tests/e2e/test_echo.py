"""ICMP Echo (RFC 1812 §4.3.3.6, RFC 4443 §4.2) against Linux's own `ping`:
the hosts' kernels check the replies (identifier, sequence number, data,
checksums) and count them; secgw counts `echo_replies`.

- hostA pings gw0's inside address: answered on the inside port.
- hostA pings gw1's inside address: the request crosses the tunnel (SA
  1001), gw1 answers back into it (its outbound policy 198.51.100.0/24 →
  192.0.2.0/24 protects the reply), and the wan carries only ESP.
- ping -6 hostA → gw0's inside IPv6 address (configs/ep0-v6.toml).
- Both with 2000 data bytes: the request arrives in fragments, the reply
  leaves in fragments.
"""
from __future__ import annotations

import e2elib as L

GW0_IN_IP, GW1_IN_IP = "192.0.2.1", "198.51.100.1"


def echo_replies(gw) -> int:
    return int(gw.ctl_stats()["echo_replies"])


def test_ping_the_gateways_inside_and_through_the_tunnel(gws, artifacts):
    tx, rx, out = L.ping("hostA", GW0_IN_IP, count=5)
    assert (tx, rx) == (5, 5), out
    assert echo_replies(gws["gw0"]) == 5
    assert gws["gw0"].ctl_stats()["drops"]["to_us"] == 0
    # Bigger than the link: hostA's kernel fragments the request, gw0
    # reassembles it and fragments the reply; ping checks all the data.
    tx, rx, out = L.ping("hostA", GW0_IN_IP, count=3, size=2000)
    assert (tx, rx) == (3, 3), out
    st = gws["gw0"].ctl_stats()
    assert st["echo_replies"] == 8 and st["reassembled"] == 3 and st["drops"]["to_us"] == 0, st

    cap = L.Capture("wan", "br0", "", artifacts / "wan")
    tx, rx, out = L.ping("hostA", GW1_IN_IP, count=5)
    frames = cap.stop()
    assert (tx, rx) == (5, 5), out
    assert echo_replies(gws["gw1"]) == 5
    assert echo_replies(gws["gw0"]) == 8, "gw0 forwarded, did not answer"
    from scapy.layers.inet import ICMP, IP
    assert cap.kernel_drops == 0
    ip = [f[IP] for f in frames if IP in f]
    assert not [p for p in ip if ICMP in p], "an Echo in the clear on the wan"
    esp = [p for p in ip if p.proto == 50]
    assert sum(p.src == L.GW0_OUT_IP for p in esp) >= 5 and sum(p.src == L.GW1_OUT_IP for p in esp) >= 5, \
        [p.summary() for p in ip]
    sa = {s["spi"]: s for s in gws["gw1"].ctl_stats()["sas"]}
    assert sa[1001]["packets"] >= 5 and sa[1002]["packets"] >= 5, sa


def test_icmp_echo_off_is_to_us(testbed, start_gws, artifacts):
    cfg = artifacts / "ep0-noecho.toml"
    text = (L.CONFIG_DIR / "ep0.toml").read_text()
    assert "[gateway]\n" in text
    cfg.write_text(text.replace("[gateway]\n", "[gateway]\nicmp_echo = false\n", 1))
    gws = start_gws({"gw0": cfg, "gw1": L.CONFIG_DIR / "ep1.toml"})
    tx, rx, out = L.ping("hostA", GW0_IN_IP, count=3)
    assert (tx, rx) == (3, 0), out
    st = gws["gw0"].ctl_stats()
    assert st["echo_replies"] == 0 and st["drops"]["to_us"] == 3, st["drops"]


def test_ping6_the_gateways_inside_address(testbed, start_gws):
    gws = start_gws({gw: L.CONFIG_DIR / f for gw, f in (("gw0", "ep0-v6.toml"), ("gw1", "ep1-v6.toml"))})
    tx, rx, out = L.ping("hostA", L.GW0_IN_IP6, count=5)
    assert (tx, rx) == (5, 5), out
    assert echo_replies(gws["gw0"]) == 5
    # ping -6 -s 2000: reassembled, and the reply cut by gw0 itself.
    tx, rx, out = L.ping("hostA", L.GW0_IN_IP6, count=3, size=2000)
    assert (tx, rx) == (3, 3), out
    st = gws["gw0"].ctl_stats()
    assert st["echo_replies"] == 8 and st["reassembled"] == 3, st
