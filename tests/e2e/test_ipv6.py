"""IPv6 in the testbed: tunnel mode v6-in-v6, v4-in-v6 and v6-in-v4 against scapy's
ESP for every algorithm, ESN off and on; ping6 through the tunnel; Neighbor
Discovery answered by the gateways; ICMPv6 Packet Too Big.

The gateways run configs/ep0-v6.toml / ep1-v6.toml (dual stack) with, for the
matrix, one SA + policy per cell appended (written to the artifacts folder):
cell i (combination, algorithm, esn) has SPI 8000+i and its traffic is UDP to
port 8000+i (priority 3, before the sample configs' policies). IPv4 inner
packets are 192.0.2.10 → 198.51.100.10, IPv6 ones 2001:db8:a::10 →
2001:db8:b::10; the outer header is IPv4 (203.0.113.1 → .2) or IPv6
(2001:db8:ff::1 → ::2) as the combination says. The v4-in-v4 cells are
tests/e2e/test_interop_matrix.py's; this file reuses its algorithm list, key
derivation, scapy SA and by-hand decryptor (RFC 4106/4543/7634/3602/3686/2404/
4868), so the same reference checks every family.

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
from dataclasses import dataclass
from pathlib import Path

import e2elib as L
import test_interop_matrix as M

PORT_BASE = 8000
MTU = 1500
COMBOS = ("v6-in-v6", "v4-in-v6", "v6-in-v4")
V6_CONFIG = {"gw0": "ep0-v6.toml", "gw1": "ep1-v6.toml"}
HOSTS_FILTER = (f"udp and ((src host {L.A_IP} and dst host {L.B_IP}) or "
                f"(src host {L.A_IP6} and dst host {L.B_IP6}))")


@dataclass(frozen=True)
class Cell(M.Cell):
    """A cell of this matrix: the interop matrix's cell (index, algorithm, esn;
    SPI and port 7000 + index) with a combination; indexes start at 1000, so
    SPIs and ports at PORT_BASE."""
    combo: str = "v6-in-v6"

    @property
    def label(self) -> str:
        return f"{self.combo}/{self.alg.name}/esn={'on' if self.esn else 'off'}"

    @property
    def inner_v6(self) -> bool:
        return self.combo.startswith("v6")

    @property
    def outer_v6(self) -> bool:
        return self.combo.endswith("v6")

    @property
    def outer_len(self) -> int:
        return 40 if self.outer_v6 else 20

    @property
    def inner_len(self) -> int:
        return 40 if self.inner_v6 else 20

    @property
    def max_payload(self) -> int:
        a = self.alg
        enc = (MTU - self.outer_len - 8 - a.iv - a.icv) // a.align * a.align
        return enc - 2 - self.inner_len - 8


CELLS = [Cell(PORT_BASE - M.PORT_BASE + i, a, esn, combo) for i, (combo, esn, a) in
         enumerate((c, e, a) for c in COMBOS for e in (False, True) for a in M.ALGS)]


def esp_len(c: Cell, payload: int) -> int:
    inner = c.inner_len + 8 + payload
    enc = -(-(inner + 2) // c.alg.align) * c.alg.align
    return c.outer_len + 8 + c.alg.iv + enc + c.alg.icv


def write_configs(artifacts: Path, cells) -> dict[str, Path]:
    out = {}
    for gw, direction in (("gw0", "outbound"), ("gw1", "inbound")):
        text = (L.CONFIG_DIR / V6_CONFIG[gw]).read_text().rstrip("\n") + "\n\n# ---- IPv6 matrix ----\n"
        for c in cells:
            sa = M._sa_toml(c, direction)
            if c.outer_v6:
                sa = sa.replace(f'tunnel_src = "{L.GW0_OUT_IP}"', f'tunnel_src = "{L.GW0_OUT_IP6}"') \
                       .replace(f'tunnel_dst = "{L.GW1_OUT_IP}"', f'tunnel_dst = "{L.GW1_OUT_IP6}"')
            pol = M._policy_toml(c, direction).replace("priority = 5", "priority = 3")
            if c.inner_v6:
                pol = pol.replace('src = "192.0.2.0/24"', 'src = "2001:db8:a::/64"') \
                         .replace('dst = "198.51.100.0/24"', 'dst = "2001:db8:b::/64"')
            text += f"\n# {c.label}: UDP port {c.port}\n" + sa + "\n" + pol
        path = artifacts / f"{gw}-ipv6-matrix.toml"
        path.write_text(text)
        out[gw] = path
    return out


def v6_configs() -> dict[str, Path]:
    return {gw: L.CONFIG_DIR / f for gw, f in V6_CONFIG.items()}


# --------------------------------------------------------------------------
# packets

def ip_bytes(frame: bytes) -> bytes:
    """The IP packet of an Ethernet frame, IPv4 or IPv6, without link padding."""
    ip = frame[14:]
    if ip[0] >> 4 == 6:
        return ip[:40 + struct.unpack("!H", ip[4:6])[0]]
    return ip[:struct.unpack("!H", ip[2:4])[0]]


def udp_of(ip: bytes) -> tuple[int, bytes]:
    """(destination port, payload) of an IPv4 or IPv6 (no extension headers) UDP packet."""
    hl = 40 if ip[0] >> 4 == 6 else (ip[0] & 15) * 4
    return struct.unpack("!H", ip[hl + 2:hl + 4])[0], ip[hl + 8:]


def ident_of(ip: bytes) -> int:
    """IPv4 identification or IPv6 flow label: what tells scapy's packets apart."""
    if ip[0] >> 4 == 6:
        return struct.unpack("!I", ip[:4])[0] & 0xFFFFF
    return struct.unpack("!H", ip[4:6])[0]


def same_inner(got: bytes, sent: bytes, hops: int) -> str | None:
    if sent[0] >> 4 == 4:
        return M.same_inner(got, sent, hops)
    if got[7] != sent[7] - hops:
        return f"hop limit {got[7]}, sent {sent[7]} (want −{hops})"
    if got[:7] + got[8:] != sent[:7] + sent[8:]:
        return f"differs\n   sent {sent.hex()}\n   got  {got.hex()}"
    return None


def check_outer(c: Cell, outer: bytes, size: int) -> str | None:
    if len(outer) != esp_len(c, size):
        return f"outer length {len(outer)}, want {esp_len(c, size)}"
    if c.outer_v6:
        if outer[0] >> 4 != 6 or outer[6] != 50 or outer[7] != 64:
            return f"outer IPv6 version/next header/hop limit {outer[0] >> 4}/{outer[6]}/{outer[7]}"
        if struct.unpack("!I", outer[:4])[0] & 0xFFFFF:
            return "flow label not 0"
        import ipaddress
        if (str(ipaddress.IPv6Address(outer[8:24])), str(ipaddress.IPv6Address(outer[24:40]))) != (L.GW0_OUT_IP6, L.GW1_OUT_IP6):
            return "outer addresses"
    elif outer[0] != 0x45 or outer[8] != 64 or outer[9] != 50:
        return f"outer IPv4 {outer[:10].hex()}"
    return None


class Matrix:
    def __init__(self):
        self.rows: dict[tuple[str, str, str, str], dict] = {}

    def record(self, c: Cell, direction: str, size, problem: str | None):
        r = self.rows.setdefault((c.combo, c.alg.name, "on" if c.esn else "off", direction), {"ok": [], "bad": []})
        (r["ok"].append(size) if problem is None else r["bad"].append((size, problem)))

    def failures(self) -> list[str]:
        return [f"{combo} {alg} esn={esn} {d}: size {s}: {p}"
                for (combo, alg, esn, d), r in self.rows.items() for s, p in r["bad"]]

    def render(self) -> str:
        lines = [f"{'combination':<12}{'algorithm':<26}{'esn':<5}{'direction':<12}{'result':<7}sizes (✗ = failed)"]
        algs = {a.name: i for i, a in enumerate(M.ALGS)}
        dirs = {"scapy→gw1": 0, "gw0→scapy": 1, "gw0→gw1": 2}
        for (combo, alg, esn, d), r in sorted(self.rows.items(), key=lambda kv: (
                COMBOS.index(kv[0][0]), algs[kv[0][1]], kv[0][2] == "on", dirs[kv[0][3]])):
            ok = "PASS" if not r["bad"] and r["ok"] else "FAIL"
            sizes = [str(s) for s in r["ok"]] + [f"✗{s}" for s, _ in r["bad"]]
            lines.append(f"{combo:<12}{alg:<26}{esn:<5}{d:<12}{ok:<7}{' '.join(sizes)}")
        return "\n".join(lines)


# --------------------------------------------------------------------------
# the matrix

def test_ipv6_matrix(testbed, start_gws, artifacts):
    from scapy.compat import raw
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    assert len(CELLS) == len(COMBOS) * 2 * len(M.ALGS) == 90
    for c in CELLS:
        assert all(esp_len(c, s) <= MTU for s in c.sizes), c.label
        assert esp_len(c, c.max_payload + 1) > MTU, (c.label, "max_payload is not the maximum")
    configs = write_configs(artifacts, CELLS)
    M.check_configs(testbed["binary"], configs)
    gws = start_gws(configs)
    matrix = Matrix()

    # ---- gw0 encrypts hostA's datagrams → scapy, the reference and gw1 decrypt
    plan = [(c, s) for c in CELLS for s in c.sizes]
    cap_a = L.Capture("hostA", "a0", HOSTS_FILTER, artifacts / "a0")
    cap_w = L.Capture("wan", "br0", f"(ip proto 50 and src host {L.GW0_OUT_IP}) or "
                      f"(ip6 proto 50 and src host {L.GW0_OUT_IP6})", artifacts / "wan-gw0")
    cap_b = L.Capture("hostB", "b0", HOSTS_FILTER, artifacts / "b0-gw0")
    for v6 in (False, True):
        dgrams = [{"sport": M.SPORT, "dport": c.port, "payload": M.payload(c, s, 0), "gap": 0.004}
                  for c, s in plan if c.inner_v6 == v6]
        # one byte over the maximum, never fragmented and path MTU ignored: gw0 drops it
        # (mtu_exceeded) and answers ICMP "fragmentation needed" / ICMPv6 Packet Too Big.
        dgrams += [{"sport": M.SPORT, "dport": c.port, "payload": M.payload(c, c.max_payload + 1, 0),
                    "gap": 0.004, "df_probe": True} for c in CELLS if c.inner_v6 == v6]
        src, dst = (L.A_IP6, L.B_IP6) if v6 else (L.A_IP, L.B_IP)
        for i in range(0, len(dgrams), 30):
            L.send_udp("hostA", src, dst, dgrams[i:i + 30])
    sent = {}
    for f in cap_a.stop(settle=0.5):
        ip = ip_bytes(raw(f))
        dport, data = udp_of(ip)
        sent[(dport, len(data))] = ip
    wan = [ip_bytes(raw(f)) for f in cap_w.stop(settle=0.2)]
    at_b = {}
    for f in cap_b.stop(settle=0.2):
        ip = ip_bytes(raw(f))
        dport, data = udp_of(ip)
        at_b.setdefault((dport, len(data)), []).append(ip)
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
        seqs = [struct.unpack("!I", o[c.outer_len + 4:c.outer_len + 8])[0] for o in frames]
        if seqs != list(range(1, len(c.sizes) + 1)):
            for s in c.sizes:
                matrix.record(c, "gw0→scapy", s, f"ESP sequence numbers on the wan {seqs}, want 1..{len(c.sizes)}")
            continue
        for s, outer in zip(c.sizes, frames):
            key = (c.port, s)
            try:
                problem = check_outer(c, outer, s)
                if problem is None:
                    got = raw(sa.decrypt(IPv6(outer) if c.outer_v6 else IP(outer)))
                    problem = same_inner(got, sent[key], 1)
                    if problem:
                        problem = "scapy: " + problem
                if problem is None:
                    inner = M.ref_open(c, outer[c.outer_len:], 0, 41 if c.inner_v6 else 4)
                    problem = same_inner(inner, sent[key], 1)
                    if problem:
                        problem = "by-hand reference: " + problem
            except Exception as e:  # noqa: BLE001 — any exception is a failed cell
                problem = f"{type(e).__name__}: {e}"
            matrix.record(c, "gw0→scapy", s, problem)
            arrived = at_b.get(key, [])
            matrix.record(c, "gw0→gw1", s, f"arrived {len(arrived)} times on b0, want 1" if len(arrived) != 1
                          else same_inner(arrived[0], sent[key], 2))
    assert not by_spi, f"ESP from gw0 with unexpected SPIs: { {k: len(v) for k, v in by_spi.items()} }"

    # ---- scapy encrypts → gw1 decrypts
    frames, expect = [], {}  # ident (IPv4 id / IPv6 flow label) → (cell, size label, inner)
    ident = 0x2000
    for c in CELLS:
        tunnel = IPv6(src=L.GW0_OUT_IP6, dst=L.GW1_OUT_IP6) if c.outer_v6 else None
        for hi, base in ([(0, M.ESN_HI0_BASE), (1, 1)] if c.esn else [(0, M.NONESN_BASE)]):
            sa = M.scapy_sa(c, hi, tunnel_header=tunnel)
            for k, s in enumerate(c.sizes):
                ident += 1
                data = M.payload(c, s, 1 + hi)
                l3 = IPv6(src=L.A_IP6, dst=L.B_IP6, hlim=64, fl=ident) if c.inner_v6 else \
                    IP(src=L.A_IP, dst=L.B_IP, ttl=64, id=ident)
                inner = raw(l3 / UDP(sport=M.SPORT, dport=c.port) / Raw(data))
                esp = sa.encrypt(IPv6(inner) if c.inner_v6 else IP(inner), seq_num=base + k, esn_en=c.esn, esn=hi)
                assert len(raw(esp)) == esp_len(c, s), (c.label, s, len(raw(esp)))
                frames.append(Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / esp)
                expect[ident] = (c, s if not c.esn else f"{s}@hi{hi}", inner)
    cap_b = L.Capture("hostB", "b0", HOSTS_FILTER, artifacts / "b0-scapy")
    L.send_frames("wan", "wan1", frames, artifacts / "injected", gap_ms=2)
    got_b = {}
    for f in cap_b.stop(settle=1.0):
        ip = ip_bytes(raw(f))
        got_b.setdefault(ident_of(ip), []).append(ip)
    for key, (c, label, inner) in expect.items():
        arrived = got_b.pop(key, [])
        matrix.record(c, "scapy→gw1", label, f"arrived {len(arrived)} times on b0, want 1" if len(arrived) != 1
                      else same_inner(arrived[0], inner, 1))

    st0, st1 = gws["gw0"].stats(), gws["gw1"].stats()
    table = matrix.render()
    drops = {"gw0": {k: v for k, v in st0.get("drops", {}).items() if v},
             "gw1": {k: v for k, v in st1.get("drops", {}).items() if v}}
    report = (f"{table}\n\ncells: {len(CELLS)} ({len(COMBOS)} combinations × {len(M.ALGS)} algorithms × "
              f"ESN off/on), scapy {__import__('scapy').__version__}\ngateway drops: {drops}\n"
              f"gw0 icmp_sent {st0.get('icmp_sent')}, nd_replies {st0.get('nd_replies')}; "
              f"gw1 nd_replies {st1.get('nd_replies')}\n")
    (artifacts / "ipv6-matrix.txt").write_text(report)
    print("\n" + report)
    L.run_ns("hostA", "ip", "route", "flush", "cache")
    L.run_ns("hostA", "ip", "-6", "route", "flush", "cache")
    fails = matrix.failures()
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
    import sys
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
