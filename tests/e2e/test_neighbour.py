"""Neighbour resolution in the testbed: the gateways run the dual-stack configs
(configs/ep0-v6.toml / ep1-v6.toml) with every static `[[neighbour]]` entry
removed, so gw0 must resolve gw1 (ARP for 203.0.113.2, a Neighbor Solicitation
for 2001:db8:ff::2) and gw1 must resolve hostB (ARP for 198.51.100.10, NS for
2001:db8:b::10) before traffic hostA → hostB gets through.

Checked against implementations we did not write: hostB's Linux kernel answers
the gateway's requests and, from them, puts the gateway in its neighbour table
(`ip neigh`, `ip -6 neigh`); tcpdump on the wan and on hostB's link sees the
requests and the replies (decoded by scapy); the gateways' counters show what
they sent and learned. A next hop that never answers: its packets are dropped
as `neigh_unresolved`, counted, and the gateway keeps running.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import e2elib as L

TABLE = "\n[neighbour_table]\nretrans_ms = 200\nreachable_ms = 30000\n"


def configs_without_neighbours(artifacts: Path, edit=None) -> dict[str, Path]:
    """ep0-v6.toml / ep1-v6.toml with no [[neighbour]] tables (and `edit`
    applied to gw1's text), written to the test's artifacts folder."""
    out = {}
    for gw, name in (("gw0", "ep0-v6.toml"), ("gw1", "ep1-v6.toml")):
        text = (L.CONFIG_DIR / name).read_text()
        text = text[: text.index("[[neighbour]]")] + TABLE
        assert "[[neighbour]]" not in text
        if edit is not None and gw == "gw1":
            text = edit(text)
        p = artifacts / f"{gw}-noneigh.toml"
        p.write_text(text)
        out[gw] = p
    return out


def flush_hosts():
    for host, ifc in (("hostA", "a0"), ("hostB", "b0")):
        L.run_ns(host, "ip", "neigh", "flush", "dev", ifc)
        L.run_ns(host, "ip", "-6", "neigh", "flush", "dev", ifc)


def test_arp_and_nd_resolve_next_hops_and_hosts_learn_the_gateway(testbed, start_gws, artifacts):
    """hostA → hostB over IPv4 (SA 1001, IPv4 outer) and IPv6 (SA 1101, IPv6
    outer) with no static neighbours anywhere: everything arrives; hostB's
    kernel learned gw1-in from gw1's ARP request and NS (hostB only receives,
    so it never asked); the wan shows gw0's ARP request for 203.0.113.2 and
    gw1's reply, and gw0's NS for 2001:db8:ff::2 and gw1's NA; the counters
    and `secgw ctl neigh list` show the learned entries."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr
    from scapy.layers.l2 import ARP, Ether

    flush_hosts()
    gws = start_gws(configs_without_neighbours(artifacts))
    cap_w = L.Capture("wan", "br0", "arp or icmp6", artifacts / "wan-nd")
    cap_b = L.Capture("hostB", "b0", "", artifacts / "b0")
    n = 5
    L.send_udp("hostA", L.A_IP, L.B_IP, [{"sport": 41000, "dport": 5001, "payload": bytes([i]) * 32, "gap": 0.05} for i in range(n)])
    L.send_udp("hostA", L.A_IP6, L.B_IP6, [{"sport": 41001, "dport": 5001, "payload": bytes([i]) * 32, "gap": 0.05} for i in range(n)])
    st0 = gws["gw0"].wait_stats(lambda s: s["neighbours"]["learned"] >= 3 and s["neighbours"]["pending"] == 0, timeout=8)
    st1 = gws["gw1"].wait_stats(lambda s: s["neighbours"]["learned"] >= 4 and s["neighbours"]["pending"] == 0, timeout=8)
    wan = cap_w.stop()
    b0 = cap_b.stop()

    # Everything arrived at hostB.
    got4 = [f for f in b0 if UDP in f and f[UDP].dport == 5001 and f[UDP].sport == 41000]
    got6 = [f for f in b0 if IPv6 in f and UDP in f and f[UDP].dport == 5001 and f[UDP].sport == 41001]
    assert (len(got4), len(got6)) == (n, n), f"hostB got {len(got4)} IPv4 and {len(got6)} IPv6 datagrams, want {n} each"

    # On hostB's link: gw1's broadcast request and NS, and hostB's answers.
    reqs = [f for f in b0 if ARP in f and f[ARP].op == 1 and f[ARP].pdst == L.B_IP]
    assert reqs, "no ARP request for hostB on b0"
    r = reqs[0]
    assert (r[Ether].dst, r[Ether].src, r[ARP].hwsrc, r[ARP].psrc) == ("ff:ff:ff:ff:ff:ff", L.GW1_IN_MAC, L.GW1_IN_MAC, "198.51.100.1"), r.summary()
    assert any(ARP in f and f[ARP].op == 2 and f[ARP].psrc == L.B_IP and f[ARP].hwsrc == L.B_MAC for f in b0), "hostB's ARP reply"
    ns_b = [f for f in b0 if ICMPv6ND_NS in f and f[ICMPv6ND_NS].tgt == L.B_IP6]
    assert ns_b, "no NS for hostB on b0"
    f = ns_b[0]
    assert f[IPv6].src == L.GW1_IN_IP6 and f[IPv6].dst == "ff02::1:ff00:10" and f[IPv6].hlim == 255, f.summary()
    assert f[Ether].dst == "33:33:ff:00:00:10" and f[ICMPv6NDOptSrcLLAddr].lladdr == L.GW1_IN_MAC, f.summary()
    assert any(ICMPv6ND_NA in f and f[ICMPv6ND_NA].tgt == L.B_IP6 for f in b0), "hostB's NA"

    # hostB's kernel learned gw1 from those requests (it never asked).
    neigh4 = L.run_ns("hostB", "ip", "neigh", "show", "198.51.100.1", "dev", "b0").stdout
    neigh6 = L.run_ns("hostB", "ip", "-6", "neigh", "show", L.GW1_IN_IP6, "dev", "b0").stdout
    assert f"lladdr {L.GW1_IN_MAC}" in neigh4, f"hostB: {neigh4!r}"
    assert f"lladdr {L.GW1_IN_MAC}" in neigh6, f"hostB: {neigh6!r}"
    # ... and from nothing else: hostB never broadcast a request for gw1.
    assert not any(ARP in f and f[ARP].op == 1 and f[ARP].psrc == L.B_IP and f[Ether].dst == "ff:ff:ff:ff:ff:ff" for f in b0), \
        [f.summary() for f in b0 if ARP in f]

    # The wan: gw0 asked for gw1 (ARP and NS), gw1 answered.
    arp_req = [f for f in wan if ARP in f and f[ARP].op == 1 and f[ARP].pdst == L.GW1_OUT_IP and f[ARP].psrc == L.GW0_OUT_IP]
    arp_rep = [f for f in wan if ARP in f and f[ARP].op == 2 and f[ARP].psrc == L.GW1_OUT_IP and f[ARP].hwsrc == L.GW1_OUT_MAC]
    assert arp_req and arp_req[0][Ether].dst == "ff:ff:ff:ff:ff:ff" and arp_req[0][ARP].hwsrc == L.GW0_OUT_MAC, [x.summary() for x in wan]
    assert arp_rep and arp_rep[0][ARP].pdst == L.GW0_OUT_IP, [x.summary() for x in wan]
    ns_w = [f for f in wan if ICMPv6ND_NS in f and f[ICMPv6ND_NS].tgt == L.GW1_OUT_IP6 and f[IPv6].src == L.GW0_OUT_IP6]
    na_w = [f for f in wan if ICMPv6ND_NA in f and f[ICMPv6ND_NA].tgt == L.GW1_OUT_IP6 and f[ICMPv6ND_NA].S == 1]
    assert ns_w and ns_w[0][IPv6].dst == "ff02::1:ff00:2", [x.summary() for x in wan]
    assert na_w, [x.summary() for x in wan]

    # Counters.
    n0, n1 = st0["neighbours"], st1["neighbours"]
    assert n0["arp_requests"] >= 1 and n0["ns_sent"] >= 1, n0
    assert n1["arp_requests"] >= 1 and n1["ns_sent"] >= 1, n1
    assert n0["entries"] >= 2 and n1["entries"] >= 2, (n0, n1)
    for st in (st0, st1):
        assert st["drops"]["neigh_unresolved"] == 0 and st["drops"]["neigh_queue_full"] == 0, st["drops"]
        assert st["drops"]["no_neighbour"] == 0, st["drops"]
    # `secgw ctl neigh list`: gw1 knows hostB (inside) and gw0 (outside).
    listing = json.loads(gws["gw1"].ctl("neigh", "list", "--json"))
    rows = {e["ip"]: e for e in listing["neighbours"]}
    assert rows[L.B_IP]["mac"] == L.B_MAC and rows[L.B_IP]["port"] == "inside" and rows[L.B_IP]["state"] == "reachable", rows
    assert rows[L.B_IP6]["mac"] == L.B_MAC, rows
    assert rows[L.GW0_OUT_IP]["mac"] == L.GW0_OUT_MAC and rows[L.GW0_OUT_IP]["port"] == "outside", rows
    table = gws["gw1"].ctl("neigh", "list")
    assert re.search(rf"{re.escape(L.B_IP)}\s+{L.B_MAC}\s+inside\s+reachable", table), table


def test_unanswered_next_hop_is_dropped_as_neigh_unresolved(testbed, start_gws, artifacts):
    """gw1 routes hostB's prefix via 198.51.100.99, which nobody has: gw1 sends
    3 ARP requests for it (retrans_ms = 200 apart, seen on hostB's link), drops
    the held datagrams as `neigh_unresolved`, and keeps running (the fixture
    checks it exits 0 on SIGINT); traffic that resolves still flows after."""
    from scapy.layers.l2 import ARP

    flush_hosts()
    dead = "198.51.100.99"

    def via_dead(text: str) -> str:
        return text.replace('prefix = "198.51.100.0/24"\nport = "inside"', f'prefix = "198.51.100.0/24"\nport = "inside"\nvia = "{dead}"')

    cfgs = configs_without_neighbours(artifacts, via_dead)
    assert f'via = "{dead}"' in cfgs["gw1"].read_text()
    gws = start_gws(cfgs)
    cap_b = L.Capture("hostB", "b0", "arp", artifacts / "b0-arp")
    n = 4
    L.send_udp("hostA", L.A_IP, L.B_IP, [{"sport": 41002, "dport": 5001, "payload": bytes([i]) * 16, "gap": 0.02} for i in range(n)])
    st1 = gws["gw1"].wait_stats(lambda s: s["drops"].get("neigh_unresolved", 0) >= n, timeout=8)
    frames = cap_b.stop()
    assert st1["drops"]["neigh_unresolved"] == n, st1["drops"]
    asks = [f for f in frames if ARP in f and f[ARP].op == 1 and f[ARP].pdst == dead]
    assert len(asks) == 3, [f.summary() for f in frames]
    gaps = [b.time - a.time for a, b in zip(asks, asks[1:])]
    assert all(0.15 <= g <= 1.0 for g in gaps), gaps
    assert st1["neighbours"]["pending"] == 0 and st1["neighbours"]["arp_requests"] == 3, st1["neighbours"]
    assert gws["gw1"].alive()
    # gw0's own resolution of gw1 was fine: the datagrams crossed the tunnel.
    sas = {(s["spi"], s["direction"]): s["packets"] for s in st1["sas"]}
    assert sas[(1001, "inbound")] == n, sas
