"""IPv6 in the testbed: tunnel mode v6-in-v6, v4-in-v6 and v6-in-v4 against scapy's
ESP for every algorithm, ESN off and on; ping6 through the tunnel; Neighbor
Discovery answered by the gateways; ICMPv6 Packet Too Big.

The gateways run configs/ep0-v6.toml / ep1-v6.toml (dual stack) with, for the
matrix, one SA + policy per cell appended (written to the artifacts folder):
cell i (family, algorithm, esn) has SPI 8000+i and its traffic is UDP to port
8000+i (priority 3, before the sample configs' policies). IPv4 inner packets
are 192.0.2.10 → 198.51.100.10, IPv6 ones 2001:db8:a::10 → 2001:db8:b::10; the
outer header is IPv4 (203.0.113.1 → .2) or IPv6 (2001:db8:ff::1 → ::2) as the
family says. The cells are tests/e2e/test_interop_matrix.py's (its Family,
Mode, Cell, scapy SA, by-hand decryptor for RFC 4106/4543/7634/3602/3686/2404/
4868 with next header 4 or 41, Matrix) with three IPv6 family rows; the v4-in-v4
cells stay in that file. (Folding these rows into its MODES needs its flow made
family-aware: captures, senders and the base configs; kept apart for now.)

For each cell and UDP payload size in {0, 1, 63, 64, 1000, max} (max: the largest
payload whose ESP packet, outer header included, is <= 1500 bytes):
- gw0→scapy: hostA sends from its own stack, gw0 encrypts; the ESP captured on
  the wan is decrypted by scapy's SecurityAssociation and by the by-hand
  reference (trailer next header 41 for IPv6 inner, 4 for IPv4); both must give
  exactly hostA's packet, TTL / hop limit −1 aside; outer header fields, length
  and sequence numbers 1..n are checked. max+1 (DF / never fragmented, path
  MTU ignored) must be dropped by gw0 with an ICMP / ICMPv6 error.
- gw0→gw1: hostB receives exactly hostA's packet (hop −2).
- scapy→gw1: scapy encrypts (its own IVs) in the cell's outer family, the frames
  are injected on the wan towards gw1, hostB receives exactly the inner packet
  scapy built (hop −1); with ESN twice, in epoch 0 near 2^32 and in epoch 1.
The pass/fail matrix is printed (pytest -s) and written to ipv6-matrix.txt.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import e2elib as L
import test_interop_matrix as M

PORT_BASE = 8000
MTU = M.MTU
V6_CONFIG = {"gw0": "ep0-v6.toml", "gw1": "ep1-v6.toml"}
V6_IN_V6 = M.Family("v6-in-v6", 6, 6, L.A_IP6, L.B_IP6, L.GW0_OUT_IP6, L.GW1_OUT_IP6)
V4_IN_V6 = M.Family("v4-in-v6", 4, 6, L.A_IP, L.B_IP, L.GW0_OUT_IP6, L.GW1_OUT_IP6)
V6_IN_V4 = M.Family("v6-in-v4", 6, 4, L.A_IP6, L.B_IP6, L.GW0_OUT_IP, L.GW1_OUT_IP)
TUNNEL = M.Mode("tunnel", (V6_IN_V6, V4_IN_V6, V6_IN_V4))
# Indexes from PORT_BASE − M.PORT_BASE: SPIs and ports 8000.., apart from the interop matrix's.
CELLS = [M.Cell(PORT_BASE - M.PORT_BASE + i, TUNNEL, f, False, esn, a) for i, (f, esn, a) in
         enumerate((f, e, a) for f in TUNNEL.families for e in M.ESN for a in M.ALGS)]
HOSTS_FILTER = (f"udp and ((src host {L.A_IP} and dst host {L.B_IP}) or "
                f"(src host {L.A_IP6} and dst host {L.B_IP6}))")


def write_configs(artifacts: Path, cells) -> dict[str, Path]:
    """ep0-v6/ep1-v6 with one SA + policy per cell (IPv6 selectors for IPv6 inner packets)."""
    out = {}
    for gw, direction in (("gw0", "outbound"), ("gw1", "inbound")):
        text = (L.CONFIG_DIR / V6_CONFIG[gw]).read_text().rstrip("\n") + "\n\n# ---- IPv6 matrix ----\n"
        for c in cells:
            pol = M._policy_toml(c, direction).replace("priority = 5", "priority = 3")
            if c.family.inner_version == 6:
                pol = pol.replace('src = "192.0.2.0/24"', 'src = "2001:db8:a::/64"') \
                         .replace('dst = "198.51.100.0/24"', 'dst = "2001:db8:b::/64"')
            text += f"\n# {c.label}: UDP port {c.port}\n" + M._sa_toml(c, direction) + "\n" + pol
        path = artifacts / f"{gw}-ipv6-matrix.toml"
        path.write_text(text)
        out[gw] = path
    return out


def v6_configs() -> dict[str, Path]:
    return {gw: L.CONFIG_DIR / f for gw, f in V6_CONFIG.items()}


def ident_of(ip: bytes) -> int:
    """IPv4 identification or IPv6 flow label: what tells scapy's packets apart."""
    if ip[0] >> 4 == 6:
        return struct.unpack("!I", ip[:4])[0] & 0xFFFFF
    return struct.unpack("!H", ip[4:6])[0]


def outer6_problem(c: M.Cell, outer: bytes) -> str | None:
    """The IPv6 outer header rules (M.wire_problem checks the IPv4 ones): next header 50, hop
    limit = outer_ttl 64, flow label 0, payload length, the tunnel's addresses."""
    import ipaddress
    if c.family.outer_version != 6:
        return None
    if outer[0] >> 4 != 6 or outer[6] != 50 or outer[7] != 64:
        return f"outer IPv6 version/next header/hop limit {outer[0] >> 4}/{outer[6]}/{outer[7]}"
    if struct.unpack("!I", outer[:4])[0] & 0xFFFFF:
        return "flow label not 0"
    if struct.unpack("!H", outer[4:6])[0] != len(outer) - 40:
        return "payload length"
    src, dst = str(ipaddress.IPv6Address(outer[8:24])), str(ipaddress.IPv6Address(outer[24:40]))
    if (src, dst) != (c.family.outer_src, c.family.outer_dst):
        return f"addresses {src} → {dst}"
    return None


# --------------------------------------------------------------------------
# the matrix

def test_ipv6_matrix(testbed, start_gws, artifacts):
    from scapy.compat import raw
    from scapy.layers.inet import UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    assert len(CELLS) == 3 * len(M.ESN) * len(M.ALGS) == 90
    assert len({c.label for c in CELLS}) == len(CELLS)
    for c in CELLS:
        assert c.esp_len(c.max_payload) <= MTU < c.esp_len(c.max_payload + 1), c.label
    configs = write_configs(artifacts, CELLS)
    M.check_configs(testbed["binary"], configs)
    gws = start_gws(configs)
    matrix = M.Matrix()

    # ---- gw0 encrypts hostA's datagrams → scapy, the reference and gw1 decrypt
    plan = [(c, s) for c in CELLS for s in c.sizes]
    cap_a = L.Capture("hostA", "a0", HOSTS_FILTER, artifacts / "a0")
    cap_w = L.Capture("wan", "br0", f"(ip proto 50 and src host {L.GW0_OUT_IP}) or "
                      f"(ip6 proto 50 and src host {L.GW0_OUT_IP6})", artifacts / "wan-gw0")
    cap_b = L.Capture("hostB", "b0", HOSTS_FILTER, artifacts / "b0-gw0")
    for v in (4, 6):
        mine = [c for c in CELLS if c.family.inner_version == v]
        dgrams = [{"sport": M.SPORT, "dport": c.port, "payload": M.payload(c, s, 0), "gap": 0.004}
                  for c in mine for s in c.sizes]
        # one byte over the maximum, never fragmented and path MTU ignored: gw0 drops it
        # (mtu_exceeded) and answers ICMP "fragmentation needed" / ICMPv6 Packet Too Big;
        # 12 ms apart so gw0's ICMP rate limit (100/s) is never reached.
        dgrams += [{"sport": M.SPORT, "dport": c.port, "payload": M.payload(c, c.max_payload + 1, 0),
                    "gap": 0.012, "df_probe": True} for c in mine]
        src, dst = (L.A_IP6, L.B_IP6) if v == 6 else (L.A_IP, L.B_IP)
        for i in range(0, len(dgrams), 30):
            L.send_udp("hostA", src, dst, dgrams[i:i + 30])
    sent = {M.udp_key(M.ip_bytes(raw(f))): M.ip_bytes(raw(f)) for f in cap_a.stop(settle=0.5)}
    wan = [M.ip_bytes(raw(f)) for f in cap_w.stop(settle=0.2)]
    at_b = {}
    for f in cap_b.stop(settle=0.2):
        ip = M.ip_bytes(raw(f))
        at_b.setdefault(M.udp_key(ip), []).append(ip)
    assert len(sent) == len(plan) + len(CELLS), f"captured {len(sent)} distinct datagrams on a0, sent {len(plan) + len(CELLS)}"
    over_b = [k for k in at_b if any(k == (c.port, c.max_payload + 1) for c in CELLS)]
    assert not over_b, f"datagrams one byte over the ESP MTU limit reached hostB: {over_b}"

    by_spi: dict[int, list[bytes]] = {}
    for outer in wan:
        at = 40 if outer[0] >> 4 == 6 else 20
        by_spi.setdefault(struct.unpack("!I", outer[at:at + 4])[0], []).append(outer)
    for c in CELLS:
        sa = M.scapy_sa(c, 0)
        frames = by_spi.pop(c.spi, [])
        o = c.esp_offset
        seqs = [struct.unpack("!I", f[o + 4:o + 8])[0] for f in frames]
        if seqs != list(range(1, len(c.sizes) + 1)):
            for s in c.sizes:
                matrix.record(c, "gw0→scapy", s, f"ESP sequence numbers on the wan {seqs}, want 1..{len(c.sizes)}")
                matrix.record(c, "gw0→gw1", s, "not checked: gw0's ESP is wrong")
            continue
        for s, outer in zip(c.sizes, frames):
            key = (c.port, s)
            try:
                problem = M.wire_problem(c, outer, s) or outer6_problem(c, outer)
                if problem is None:
                    problem = M.same_inner(raw(sa.decrypt(c.family.parse(outer))), sent[key], 1)
                    if problem:
                        problem = "scapy: " + problem
                if problem is None:
                    problem = M.same_inner(M.ref_open(c, outer[o:], 0), sent[key], 1)
                    if problem:
                        problem = "by-hand reference: " + problem
            except Exception as e:  # noqa: BLE001 — any exception is a failed cell
                problem = f"{type(e).__name__}: {e}"
            matrix.record(c, "gw0→scapy", s, problem)
            arrived = at_b.get(key, [])
            matrix.record(c, "gw0→gw1", s, f"arrived {len(arrived)} times on b0, want 1" if len(arrived) != 1
                          else M.same_inner(arrived[0], sent[key], 2))
    assert not by_spi, f"ESP from gw0 with unexpected SPIs: { {k: len(v) for k, v in by_spi.items()} }"

    # ---- scapy encrypts (in the cell's outer family) → gw1 decrypts
    frames, expect = [], {}  # ident (IPv4 id / IPv6 flow label) → (cell, size label, inner)
    ident = 0x2000
    for c in CELLS:
        f = c.family
        for hi, base in ([(0, M.ESN_HI0_BASE), (1, 1)] if c.esn else [(0, M.NONESN_BASE)]):
            sa = M.scapy_sa(c, hi)
            for k, s in enumerate(c.sizes):
                ident += 1
                tag = {"fl": ident} if f.inner_version == 6 else {"id": ident}
                inner = raw(f.ip(f.inner_version, f.inner_src, f.inner_dst, ttl=64, **tag) /
                            UDP(sport=M.SPORT, dport=c.port) / Raw(M.payload(c, s, 1 + hi)))
                esp = sa.encrypt(f.parse(inner), seq_num=base + k, esn_en=c.esn, esn=hi)
                assert len(raw(esp)) == c.esp_len(s), (c.label, s, len(raw(esp)))
                frames.append(Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / esp)
                expect[ident] = (c, s if not c.esn else f"{s}@hi{hi}", inner)
    cap_b = L.Capture("hostB", "b0", HOSTS_FILTER, artifacts / "b0-scapy")
    L.send_frames("wan", "wan1", frames, artifacts / "injected", gap_ms=2)
    got_b = {}
    for fr in cap_b.stop(settle=1.0):
        ip = M.ip_bytes(raw(fr))
        got_b.setdefault(ident_of(ip), []).append(ip)
    for key, (c, label, inner) in expect.items():
        arrived = got_b.pop(key, [])
        matrix.record(c, "scapy→gw1", label, f"arrived {len(arrived)} times on b0, want 1" if len(arrived) != 1
                      else M.same_inner(arrived[0], inner, 1))

    st0, st1 = gws["gw0"].stats(), gws["gw1"].stats()
    table = matrix.render(CELLS)
    drops = {"gw0": {k: v for k, v in st0.get("drops", {}).items() if v},
             "gw1": {k: v for k, v in st1.get("drops", {}).items() if v}}
    report = (f"{table}\ncells: {len(CELLS)} (3 families × ESN {len(M.ESN)} × {len(M.ALGS)} algorithms), "
              f"scapy {__import__('scapy').__version__}\ngateway drops: {drops}\n"
              f"gw0 icmp_sent {st0.get('icmp_sent')}, nd_replies {st0.get('nd_replies')}; "
              f"gw1 nd_replies {st1.get('nd_replies')}\n")
    (artifacts / "ipv6-matrix.txt").write_text(report)
    print("\n" + report)
    L.run_ns("hostA", "ip", "route", "flush", "cache")
    L.run_ns("hostA", "ip", "-6", "route", "flush", "cache")
    fails = matrix.failures(CELLS)
    assert not fails, f"{len(fails)} failed:\n" + "\n".join(fails[:60]) + f"\n\n{table}\ngateway drops: {drops}"
    assert not got_b, f"unexpected datagrams on b0 (idents): {sorted(got_b)}"
    assert drops == {"gw0": {"mtu_exceeded": len(CELLS)}, "gw1": {}}, \
        f"gateway drops: {drops}; want only gw0 mtu_exceeded = {len(CELLS)} (the max+1 datagrams)"
    assert st0.get("icmp_sent") == len(CELLS), f"gw0 sent {st0.get('icmp_sent')} ICMP/ICMPv6 errors, want {len(CELLS)}"


# --------------------------------------------------------------------------
# ping6, Neighbor Discovery, Packet Too Big (the sample dual-stack configs)

def test_ping6_and_neighbor_discovery(testbed, start_gws, artifacts):
    """ping6 hostA → hostB through the v6-in-v6 tunnel (SA 1101/1102); the hosts'
    kernels resolve the gateways' IPv6 addresses by ND, answered by secgw: the
    neighbour tables show gw0-in's / gw1-in's MAC; the wan carries only ESP."""
    for host, gw in (("hostA", L.GW0_IN_IP6), ("hostB", L.GW1_IN_IP6)):
        L.run_ns(host, "ip", "-6", "neigh", "flush", "dev", "a0" if host == "hostA" else "b0")
    gws = start_gws(v6_configs())
    cap_w = L.Capture("wan", "br0", "", artifacts / "wan")
    tx, rx, out = L.ping("hostA", L.B_IP6, count=5)
    frames = cap_w.stop()
    assert (tx, rx) == (5, 5), out
    for host, ifc, gw, mac in (("hostA", "a0", L.GW0_IN_IP6, L.GW0_IN_MAC), ("hostB", "b0", L.GW1_IN_IP6, L.GW1_IN_MAC)):
        neigh = L.run_ns(host, "ip", "-6", "neigh", "show", gw, "dev", ifc).stdout
        assert f"lladdr {mac}" in neigh, f"{host}: neighbour entry for {gw}: {neigh!r}"
    from scapy.layers.inet6 import IPv6
    from scapy.layers.ipsec import ESP
    assert len(frames) == 10, f"{len(frames)} frames on the wan, want 10 (5 echo requests + 5 replies)"
    for f in frames:
        assert IPv6 in f and ESP in f and f[IPv6].nh == 50, f"not IPv6 ESP on the wan: {f.summary()}"
    def sa_packets(st):
        return {(s["spi"], s["direction"]): s["packets"] for s in st["sas"]}
    # The stats file is rewritten every second: wait for the last packets.
    st0 = gws["gw0"].wait_stats(lambda st: sa_packets(st)[(1102, "inbound")] == 5)
    st1 = gws["gw1"].wait_stats(lambda st: sa_packets(st)[(1102, "outbound")] == 5)
    assert st0["nd_replies"] >= 1 and st1["nd_replies"] >= 1, (st0["nd_replies"], st1["nd_replies"])
    sas = sa_packets(st0)
    assert sas[(1101, "outbound")] == 5 and sas[(1102, "inbound")] == 5, sas
    for st in (st0, st1):
        assert not any(st["drops"].values()), {k: v for k, v in st["drops"].items() if v}


def test_packet_too_big(testbed, start_gws, artifacts):
    """A 1500-byte IPv6 datagram from hostA gets ICMPv6 Packet Too Big from gw0's
    2001:db8:a::1 with MTU 1426 (1500 − 40 − 8 − 8 − 16 − 2, AES-GCM, IPv6 outer);
    hostA's route cache shows it; the same datagram sent again leaves hostA in
    fragments that fit, crosses the tunnel and reaches hostB."""
    from scapy.compat import raw
    from scapy.layers.inet6 import ICMPv6PacketTooBig, IPv6, IPv6ExtHdrFragment
    L.run_ns("hostA", "ip", "-6", "route", "flush", "cache")
    gws = start_gws(v6_configs())
    cap_a = L.Capture("hostA", "a0", "icmp6", artifacts / "a0-icmp6")
    cap_b = L.Capture("hostB", "b0", f"ip6 and src host {L.A_IP6}", artifacts / "b0-frags")
    # Linux applies a UDP Packet Too Big to the route only while the sending socket
    # exists (__udp6_lib_err), so one connected socket sends, waits, reads its path
    # MTU (IPV6_MTU, 24) and sends the same datagram again (fragmented by hostA now).
    sender = (
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
        f"s.bind(('{L.A_IP6}', 40200)); s.connect(('{L.B_IP6}', 5001))\n"
        f"data = bytes(range(256)) * 5 + bytes(172)\n"
        "s.send(data); time.sleep(0.5)\n"
        "print(s.getsockopt(socket.IPPROTO_IPV6, 24))\n"
        # The PTB left EMSGSIZE pending on the connected socket: the first
        # send after it reports that error, the next one leaves in fragments.
        "try:\n    s.send(data)\nexcept OSError:\n    s.send(data)\n"
        "time.sleep(0.2)\n")
    pmtu = int(L.run_ns("hostA", sys.executable, "-c", sender).stdout.strip())
    route = L.run_ns("hostA", "ip", "-6", "route", "get", L.B_IP6).stdout
    data = bytes(range(256)) * 5 + bytes(172)  # 1452 bytes: a 1500-byte IPv6 packet
    ptbs = [f for f in cap_a.stop(settle=0.3) if ICMPv6PacketTooBig in f]
    assert len(ptbs) == 1, f"{len(ptbs)} Packet Too Big on a0"
    p = ptbs[0]
    assert (p[IPv6].src, p[IPv6].dst) == (L.GW0_IN_IP6, L.A_IP6)
    assert p[ICMPv6PacketTooBig].mtu == 1426
    assert len(raw(p[IPv6])) == 1280, "as much of the packet as fits in 1280 bytes"
    assert pmtu == 1426, f"hostA's socket path MTU {pmtu}"
    assert "mtu 1426" in route, f"hostA's route cache: {route!r}"
    frags = [f for f in cap_b.stop(settle=0.5) if IPv6ExtHdrFragment in f]
    assert len(frags) == 2, f"{len(frags)} fragments at hostB"
    assert all(len(raw(f[IPv6])) <= 1426 for f in frags)
    assert sum(len(raw(f[IPv6ExtHdrFragment].payload)) for f in frags) == 8 + len(data)
    st0 = gws["gw0"].wait_stats(lambda st: st["icmp_sent"] >= 1)
    assert (st0["icmp_sent"], st0["drops"]["mtu_exceeded"]) == (1, 1)
    L.run_ns("hostA", "ip", "-6", "route", "flush", "cache")
