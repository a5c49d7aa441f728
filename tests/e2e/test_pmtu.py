"""Path MTU of a tunnel SA learned from ICMP (RFC 4301 §8.2.1, RFC 1191).

gw0 takes an ICMP "fragmentation needed" (type 3 code 4) sent to its outside
address 203.0.113.1 on its outside port only when its checksum is valid, the
quoted IPv4 header is SA 1001's tunnel (203.0.113.1 → 203.0.113.2, protocol
50), the quoted SPI is an outbound SA's, the quoted sequence number is one
the SA has sent (1 ≤ seq ≤ highest sent) and the reported MTU (raised to 552)
is below the current path MTU (the port's `mtu` when nothing is learned; a
report equal to the learned value refreshes it). Taken: drop reason
`pmtu_update`, and `path_mtu` in the SA's `sas` entry; any other
frag-needed to gw0: `pmtu_ignored`, nothing changes. The ICMP is never
forwarded. With a learned path MTU, a DF inner packet whose ESP packet would
not fit is dropped (`mtu_exceeded`) and hostA gets a frag-needed advertising
the largest inner packet that fits; one of exactly that size crosses as an
ESP packet of exactly the path MTU. `[gateway] pmtu_timeout_s = 0` ignores
every report.

The reports are built by scapy from the ESP packet gw0 really sent (captured
on br0 in `wan`), quoting its first 548 bytes as a router does (RFC 1812
§4.3.2.3: 576-byte ICMP), from a router 203.0.113.254 that is nowhere, and
injected into gw0-out from `wan0` (the repository's way: testbed/pcap_send.py,
as in test_natt.py). hostA's datagrams come from one connected UDP socket
with IP_PMTUDISC_DO (DF set, the host's path MTU honoured): Linux applies a
UDP frag-needed to its route only while the sending socket exists. Every test
flushes hostA's route cache at its start and in a `finally`, so a learned
path MTU never leaks into the next test.

The last test is the other end of the tunnel: a decapsulated DF packet too
big for gw1's inside port (`mtu = 1300` in a derived ep1.toml) gets its
frag-needed from gw1's inside address back through SA 1002, decrypted on the
wan by scapy and taken by hostA's kernel.
"""
from __future__ import annotations

import ipaddress
import json
import re
import struct
import sys
import time

from scapy.utils import checksum as scapy_checksum

import e2elib as L

ROUTER_IP = "203.0.113.254"       # the router that reports (not on the testbed)
ROUTER_MAC = "02:00:00:00:aa:fe"  # unicast, no interface has it
QUOTE = 548                       # 576-byte ICMP: 20 + 8 + 548 quoted (RFC 1812 §4.3.2.3)
ESP_PROTO = 50
SA_OUT, SA_IN = 1001, 1002
EMSGSIZE = 90

# ESP overhead of SA 1001 (AES-128-GCM, IPv4 outer header): checked against
# configs/ep0.toml by check_config_assumptions().
OUTER_IP, ESP_HDR, IV, ICV, ALIGN, TRAILER = 20, 8, 8, 16, 4, 2


def esp_len(inner: int) -> int:
    """IPv4 total length of the ESP packet carrying an `inner`-byte packet:
    outer header, SPI + sequence, IV, inner + pad length + next header padded
    to 4 bytes (RFC 4303 §2.4, no extra padding), ICV."""
    return OUTER_IP + ESP_HDR + IV + -(-(inner + TRAILER) // ALIGN) * ALIGN + ICV


def max_inner(path_mtu: int) -> int:
    """The largest inner packet whose ESP packet fits `path_mtu`: what gw0
    advertises as next-hop MTU. ((M − 20 − 8 − 8 − 16) // 4) * 4 − 2: the ESP
    payload (inner + pad + 2) a multiple of 4 no larger than what the outer
    header, ESP header, IV and ICV leave, minus the 2 trailer bytes."""
    return ((path_mtu - OUTER_IP - ESP_HDR - IV - ICV) // ALIGN) * ALIGN - TRAILER


PORT_MTU = 1500
assert max_inner(PORT_MTU) == 1446  # README "MTU": 1446 for AES-GCM with a 1500 MTU
LEARNED = 1300
FITS = max_inner(LEARNED)           # 1246
assert FITS == 1246 and esp_len(FITS) == LEARNED
BIG = 1400                          # fits 1500 (ESP 1456), not 1300
MIN_PMTU = 552                      # IPv4 reports are raised to this


# --------------------------------------------------------------------------
# config, stats

def check_config_assumptions():
    """The numbers above hold for configs/ep0.toml's SA 1001 and outside port."""
    cfg = L.load_config("gw0")
    sa = next(s for s in cfg["sa"] if int(s["spi"]) == SA_OUT)
    problems = []
    if (sa.get("direction"), sa.get("mode"), str(sa.get("algorithm")).lower()) != ("outbound", "tunnel", "aes-128-gcm"):
        problems.append(f"SA {SA_OUT}: {sa.get('direction')} {sa.get('mode')} {sa.get('algorithm')}")
    if (sa.get("tunnel_src"), sa.get("tunnel_dst")) != (L.GW0_OUT_IP, L.GW1_OUT_IP):
        problems.append(f"SA {SA_OUT} tunnel {sa.get('tunnel_src')} → {sa.get('tunnel_dst')}")
    extras = {k: sa.get(k, d) for k, d in (("df", "copy"), ("udp_encap", False), ("pad_align", 0),
                                            ("icv_len", 16), ("tfc_pad_to", 0), ("dummy_interval_ms", 0))}
    want = {"df": "copy", "udp_encap": False, "icv_len": 16, "tfc_pad_to": 0, "dummy_interval_ms": 0}
    if any(extras[k] != v for k, v in want.items()) or extras["pad_align"] not in (0, 4):
        problems.append(f"SA {SA_OUT}: {extras}")
    out = next(p for p in cfg["port"] if p.get("role") == "unprotected")
    if out.get("mtu", 1500) != PORT_MTU:
        problems.append(f"outside port mtu {out.get('mtu')}")
    if cfg.get("gateway", {}).get("pmtu_timeout_s", 600) == 0:
        problems.append("ep0.toml sets pmtu_timeout_s = 0")
    assert not problems, f"configs/ep0.toml is not what this test assumes: {problems}"


def sa_entry(st, spi=SA_OUT, direction="outbound") -> dict:
    got = [s for s in st.get("sas", []) if s.get("spi") == spi and s.get("direction") == direction]
    assert len(got) == 1, f"{len(got)} entries for SA {spi} {direction} in the stats: {st.get('sas')}"
    return got[0]


def pmtu_counts(st) -> tuple[int, int]:
    d = st.get("drops", {})
    return int(d.get("pmtu_update", 0)), int(d.get("pmtu_ignored", 0))


def state(st) -> str:
    """What a failure message shows of gw0."""
    return (f"drops {L.nonzero_drops(st)}, icmp_sent {st.get('icmp_sent')}, "
            f"SA {SA_OUT} out {sa_entry(st)}, SA {SA_IN} in {sa_entry(st, SA_IN, 'inbound')}")


def check_reasons_listed(st):
    drops = st.get("drops", {})
    missing = [r for r in ("pmtu_update", "pmtu_ignored", "mtu_exceeded") if r not in drops]
    assert not missing, f"drop reasons {missing} not in gw0's stats (every reason is listed, 0 included): {sorted(drops)}"


# --------------------------------------------------------------------------
# captures

class Captures(L.Captures):
    """The common captures of this file's tests."""

    # the usual three
    def wan(self, name):  # everything gw0 sends on the wan
        return self.start("wan", "br0", f"ether src {L.GW0_OUT_MAC}", name)

    def a0(self, name):   # ICMP to hostA and hostA's UDP
        return self.start("hostA", "a0", f"icmp or (udp and src host {L.A_IP})", name)

    def b0(self, name):   # hostA's datagrams at hostB
        return self.start("hostB", "b0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", name)


def ip_bytes(frame) -> bytes:
    """The IPv4 packet of a captured Ethernet frame, cut to its total length."""
    from scapy.compat import raw
    b = raw(frame)
    if len(b) < 34 or b[12:14] != b"\x08\x00":
        return b""
    ip = b[14:]
    return ip[:int.from_bytes(ip[2:4], "big")]


def esp_from(frames, src: str) -> list[bytes]:
    """The ESP packets from `src` among captured frames (outer IP bytes)."""
    out = []
    for f in frames:
        ip = ip_bytes(f)
        if ip and ip[9] == ESP_PROTO and ip[12:16] == ipaddress.ip_address(src).packed:
            out.append(ip)
    return out


def esp_from_gw0(frames) -> list[bytes]:
    return esp_from(frames, L.GW0_OUT_IP)


def not_esp(frames) -> list[str]:
    """Frames gw0 sent on the wan that are not its ESP (it sends nothing else here)."""
    return [f.summary() for f in frames if not (ip_bytes(f) and ip_bytes(f)[9] == ESP_PROTO)]


def esp_summary(ip: bytes) -> str:
    ihl = (ip[0] & 0xF) * 4
    spi, seq = struct.unpack("!II", ip[ihl:ihl + 8])
    return (f"ESP {ipaddress.ip_address(ip[12:16])} > {ipaddress.ip_address(ip[16:20])} "
            f"len {int.from_bytes(ip[2:4], 'big')} DF {bool(ip[6] & 0x40)} spi {spi} seq {seq}")


def spi_seq(ip: bytes) -> tuple[int, int]:
    ihl = (ip[0] & 0xF) * 4
    return struct.unpack("!II", ip[ihl:ihl + 8])


def udp_of(frames, sport: int) -> list[bytes]:
    """hostA's datagrams from `sport` among captured frames (IP bytes)."""
    out = []
    for f in frames:
        ip = ip_bytes(f)
        if ip and ip[9] == 17 and ip[12:16] == ipaddress.ip_address(L.A_IP).packed:
            ihl = (ip[0] & 0xF) * 4
            if int.from_bytes(ip[ihl:ihl + 2], "big") == sport:
                out.append(ip)
    return out


def icmp_from(frames, src: str) -> list:
    from scapy.layers.inet import ICMP, IP
    return [f for f in frames if IP in f and ICMP in f and f[IP].src == src]


def icmp_from_gw0(frames) -> list:
    return icmp_from(frames, "192.0.2.1")


def summaries(frames) -> list[str]:
    return [f"{f.summary()} ({len(ip_bytes(f))} B IP)" for f in frames]


# --------------------------------------------------------------------------
# hostA's socket

PMTUDISC_DONT, PMTUDISC_DO, PMTUDISC_PROBE = 0, 2, 3


def hosta(sport: int, dport: int, steps: list[dict], pmtudisc=PMTUDISC_DO) -> list[dict]:
    """Runs `steps` on one connected UDP socket hostA → hostB
    (`L.udp_steps`): {"send": IP total length, "retry": n},
    {"wait_mtu_below": m, "timeout": s}, {"so_error": 1}, {"ip_mtu": 1},
    {"sleep": s}; returns each step with its result (errno / value)."""
    spec = {"src": L.A_IP, "dst": L.B_IP, "sport": sport, "dport": dport, "pmtudisc": pmtudisc, "settle": 0.1, "steps": steps}
    return L.udp_steps("hostA", spec)


def flush_hosta_route_cache():
    L.run_ns("hostA", "ip", "route", "flush", "cache")


def hosta_route() -> str:
    return L.run_ns("hostA", "ip", "route", "get", L.B_IP).stdout.strip()


# --------------------------------------------------------------------------
# the reports

def ip_checksum(h: bytes) -> int:
    """The Internet checksum of `h` (RFC 1071), by scapy's implementation."""
    return scapy_checksum(h)


def quoted(esp_ip: bytes, *, src=None, dst=None, proto=None, spi=None, seq=None, length=QUOTE) -> bytes:
    """The first `length` bytes of gw0's ESP packet, as a router quotes them,
    with fields changed (the quoted IPv4 header checksum kept valid)."""
    q = bytearray(esp_ip[:length])
    ihl = (q[0] & 0xF) * 4
    if src is not None:
        q[12:16] = ipaddress.ip_address(src).packed
    if dst is not None:
        q[16:20] = ipaddress.ip_address(dst).packed
    if proto is not None:
        q[9] = proto
    if spi is not None:
        q[ihl:ihl + 4] = struct.pack("!I", spi)
    if seq is not None:
        q[ihl + 4:ihl + 8] = struct.pack("!I", seq)
    q[10:12] = b"\0\0"
    q[10:12] = struct.pack("!H", ip_checksum(bytes(q[:ihl])))
    return bytes(q)


def frag_needed(quote: bytes, mtu: int, *, bad_checksum=False) -> bytes:
    """Ether/IP/ICMP type 3 code 4 from the router to gw0's outside address, as
    bytes (scapy would rebuild a parsed quote: IPerror/UDPerror fields change)."""
    from scapy.compat import raw
    from scapy.layers.inet import ICMP, IP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    frame = bytearray(raw(Ether(dst=L.GW0_OUT_MAC, src=ROUTER_MAC) /
                          IP(src=ROUTER_IP, dst=L.GW0_OUT_IP, ttl=62, id=0x5151) /
                          ICMP(type=3, code=4, nexthopmtu=mtu) / Raw(quote)))
    icmp = 14 + 20
    assert frame[icmp:icmp + 2] == b"\x03\x04" and frame[icmp + 6:icmp + 8] == struct.pack("!H", mtu)
    assert ip_checksum(bytes(frame[icmp:])) == 0, "scapy built a bad ICMP checksum"
    if bad_checksum:
        frame[icmp + 2] ^= 0x5A  # never the ±0 equivalent of the right one
        frame[icmp + 3] ^= 0x5A
        assert ip_checksum(bytes(frame[icmp:])) != 0
    return bytes(frame)


def send_raw(nsname: str, iface: str, frames: list[bytes], path):
    """L.send_frames for frames given as bytes: wrpcap (linktype Ethernet) and
    testbed/pcap_send.py, sent exactly as built."""
    from scapy.utils import wrpcap
    path = path.with_suffix(".pcap")
    wrpcap(str(path), frames, linktype=1)
    out = L.run_ns(nsname, sys.executable, L.TESTBED / "pcap_send.py", iface, path).stdout
    assert json.loads(out)["sent"] == len(frames), out


def report(gw0, frame, artifacts, tag: str) -> tuple[dict, dict]:
    """Injects one report into gw0-out; waits until gw0 counted it under
    pmtu_update or pmtu_ignored (or 3 s), then a little longer (a second count
    would show); returns (stats before, stats after)."""
    before = gw0.ctl_stats()
    send_raw("wan", "wan0", [frame], artifacts / f"report-{tag}")
    deadline = time.monotonic() + 3
    while sum(pmtu_counts(gw0.ctl_stats())) == sum(pmtu_counts(before)) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    return before, gw0.ctl_stats()


def baseline(gw0, caps: Captures, sport: int, dport: int, tag: str) -> bytes:
    """hostA sends one 1400-byte DF datagram; it must reach hostB, without an
    ICMP from gw0; returns the ESP packet gw0 sent for it (outer IP bytes)."""
    cap_w, cap_a, cap_b = caps.wan(f"wan-{tag}"), caps.a0(f"a0-{tag}"), caps.b0(f"b0-{tag}")
    res = hosta(sport, dport, [{"send": BIG}, {"sleep": 0.2}])
    fb, fa, fw = cap_b.stop(settle=0.3), cap_a.stop(settle=0), cap_w.stop(settle=0)
    st = gw0.ctl_stats()
    assert res[0]["errno"] == 0, f"{tag}: hostA could not send {BIG} bytes: {res}"
    sent, got = udp_of(fa, sport), udp_of(fb, sport)
    assert [len(p) for p in sent] == [BIG], f"{tag}: hostA's datagrams on a0: {summaries(fa)}"
    assert sent[0][6] & 0x40, f"{tag}: hostA's datagram without DF (IP_PMTUDISC_DO): {sent[0][:20].hex()}"
    assert len(got) == 1 and got[0][20:] == sent[0][20:], \
        f"{tag}: the {BIG}-byte DF datagram reached hostB {len(got)} times: {summaries(fb)}; gw0: {state(st)}"
    assert not icmp_from_gw0(fa), f"{tag}: ICMP from gw0 on a0: {summaries(icmp_from_gw0(fa))}"
    esp = esp_from_gw0(fw)
    assert len(esp) == 1 and not not_esp(fw), \
        f"{tag}: gw0 sent on the wan {[esp_summary(e) for e in esp]} + other {not_esp(fw)}, want one ESP packet"
    assert spi_seq(esp[0])[0] == SA_OUT and len(esp[0]) == esp_len(BIG), \
        f"{tag}: {esp_summary(esp[0])}, want SPI {SA_OUT} and {esp_len(BIG)} bytes"
    return esp[0]


def expect_ignored(gw0, frame, artifacts, tag, why, want_path_mtu=None):
    """One report that must raise pmtu_ignored by exactly one and change
    nothing (pmtu_update, path_mtu)."""
    before, after = report(gw0, frame, artifacts, tag)
    (u0, i0), (u1, i1) = pmtu_counts(before), pmtu_counts(after)
    entry = sa_entry(after)
    assert (u1, i1) == (u0, i0 + 1), \
        (f"report {tag} ({why}): pmtu_update {u0}→{u1}, pmtu_ignored {i0}→{i1}, want +0/+1; "
         f"gw0 before: {L.nonzero_drops(before)}; after: {state(after)}")
    assert entry.get("path_mtu") == want_path_mtu and (want_path_mtu is not None or "path_mtu" not in entry), \
        f"report {tag} ({why}) changed the path MTU: SA {SA_OUT} {entry}, want path_mtu {want_path_mtu}"
    return after


def expect_update(gw0, frame, artifacts, tag, path_mtu):
    before, after = report(gw0, frame, artifacts, tag)
    (u0, i0), (u1, i1) = pmtu_counts(before), pmtu_counts(after)
    assert (u1, i1) == (u0 + 1, i0), \
        (f"report {tag}: pmtu_update {u0}→{u1}, pmtu_ignored {i0}→{i1}, want +1/+0; "
         f"gw0 before: {L.nonzero_drops(before)}; after: {state(after)}")
    assert sa_entry(after).get("path_mtu") == path_mtu, \
        f"report {tag}: SA {SA_OUT} {sa_entry(after)}, want path_mtu {path_mtu}; gw0: {state(after)}"
    assert "path_mtu" not in sa_entry(after, SA_IN, "inbound"), f"inbound SA got a path MTU: {state(after)}"
    return after


# --------------------------------------------------------------------------
# tests

def test_pmtu_learned_only_from_valid_reports(gws, artifacts):
    """1. hostA's 1400-byte DF datagram crosses (ESP 1456 bytes, SPI 1001, seq 1,
    captured on the wan). 2. Eleven reports that each fail one check (unknown
    SPI, the inbound SA's SPI, quoted dst / src / protocol not the tunnel's,
    sequence number 0, one past and far past the highest sent, a quote cut
    after the SPI, a bad ICMP checksum, MTU 1500 = the port's) each raise
    pmtu_ignored by one and change nothing; a 1400-byte DF datagram still
    crosses, no ICMP to hostA. 3. The report with MTU 1300 quoting the
    captured packet: pmtu_update 1, path_mtu 1300; the same MTU again
    refreshes (pmtu_update 2), 1400 > 1300 is ignored. 4. hostA's 1400-byte DF
    datagram is dropped (mtu_exceeded) and answered by a frag-needed from
    192.0.2.1 advertising 1246, quoting it; hostA's kernel learns 1246 (route
    cache, IP_MTU, the next 1400-byte send fails with EMSGSIZE); a 1246-byte
    datagram crosses as a 1300-byte ESP packet. No report ever leaves gw0."""
    check_config_assumptions()
    gw0 = gws["gw0"]
    caps = Captures(artifacts)
    flush_hosta_route_cache()
    try:
        st = gw0.ctl_stats()
        check_reasons_listed(st)
        assert pmtu_counts(st) == (0, 0) and "path_mtu" not in sa_entry(st), f"fresh gw0: {state(st)}"
        # Reports must never be forwarded: nothing from the router on a0 or b0, nothing
        # but ESP from gw0 on the wan (checked at the end).
        leak_a = caps.start("hostA", "a0", f"host {ROUTER_IP} or (icmp and src host {L.GW0_OUT_IP})", "a0-leak")
        leak_b = caps.start("hostB", "b0", f"host {ROUTER_IP} or (icmp and not src host {L.B_IP})", "b0-leak")
        leak_w = caps.start("wan", "br0", f"ether src {L.GW0_OUT_MAC} and not ip proto {ESP_PROTO}", "wan-leak")

        # 1. baseline
        esp1 = baseline(gw0, caps, 40701, 5701, "1-baseline")
        spi, highest = spi_seq(esp1)
        assert highest == 1, f"first ESP packet of a fresh gw0: {esp_summary(esp1)}"

        # 2. reports that fail one check each
        q = quoted(esp1)
        assert q == esp1[:QUOTE], "quoting the captured packet unchanged must keep its bytes"
        bad = [
            ("unknown-spi", "SPI 0x0badf00d, no SA", frag_needed(quoted(esp1, spi=0x0BADF00D), LEARNED)),
            ("inbound-spi", f"SPI {SA_IN}, gw0's inbound SA", frag_needed(quoted(esp1, spi=SA_IN), LEARNED)),
            ("dst", "quoted dst 203.0.113.9, not tunnel_dst", frag_needed(quoted(esp1, dst="203.0.113.9"), LEARNED)),
            ("src", "quoted src 203.0.113.7, not tunnel_src", frag_needed(quoted(esp1, src="203.0.113.7"), LEARNED)),
            ("proto", "quoted protocol 17, not ESP", frag_needed(quoted(esp1, proto=17), LEARNED)),
            ("seq0", "quoted sequence number 0", frag_needed(quoted(esp1, seq=0), LEARNED)),
            ("seq-next", f"quoted sequence number {highest + 1}, one past the highest sent ({highest})",
             frag_needed(quoted(esp1, seq=highest + 1), LEARNED)),
            ("seq-far", "quoted sequence number 0x7fffffff, never sent",
             frag_needed(quoted(esp1, seq=0x7FFFFFFF), LEARNED)),
            ("short", "quote cut after the SPI: no sequence number", frag_needed(quoted(esp1, length=24), LEARNED)),
            ("checksum", "ICMP checksum corrupted", frag_needed(q, LEARNED, bad_checksum=True)),
            ("mtu1500", "MTU 1500, not below the port's mtu 1500", frag_needed(q, PORT_MTU)),
        ]
        for tag, why, frame in bad:
            expect_ignored(gw0, frame, artifacts, f"2-{tag}", why)
        st = gw0.ctl_stats()
        assert pmtu_counts(st) == (0, len(bad)), f"after the {len(bad)} bad reports: {state(st)}"
        assert L.nonzero_drops(st).get("to_us", 0) == 0 and L.nonzero_drops(st).get("malformed", 0) == 0, \
            f"reports counted under another reason as well: {state(st)}"
        esp2 = baseline(gw0, caps, 40702, 5702, "2-after-bad-reports")
        assert spi_seq(esp2) == (SA_OUT, 2), esp_summary(esp2)
        st = gw0.ctl_stats()
        assert st["icmp_sent"] == 0 and st["drops"]["mtu_exceeded"] == 0, f"after the bad reports: {state(st)}"

        # 3. the valid report, a refresh, a higher one
        expect_update(gw0, frag_needed(q, LEARNED), artifacts, "3-valid", LEARNED)
        expect_update(gw0, frag_needed(quoted(esp2), LEARNED), artifacts, "3-refresh-same-mtu", LEARNED)
        expect_ignored(gw0, frag_needed(q, BIG), artifacts, "3-higher", f"MTU {BIG} above the learned {LEARNED}",
                       want_path_mtu=LEARNED)
        st = gw0.ctl_stats()
        assert pmtu_counts(st) == (2, len(bad) + 1), f"after the valid reports: {state(st)}"

        # 4. hostA's datagrams against the learned path MTU
        cap_w, cap_a, cap_b = caps.wan("wan-4"), caps.a0("a0-4"), caps.b0("b0-4")
        sport = 40704
        res = hosta(sport, 5704, [{"send": BIG}, {"wait_mtu_below": PORT_MTU, "timeout": 3}, {"so_error": 1},
                                  {"ip_mtu": 1}, {"send": BIG}, {"send": FITS, "retry": 1}, {"sleep": 0.3}])
        route = hosta_route()
        fb, fa, fw = cap_b.stop(settle=0.3), cap_a.stop(settle=0), cap_w.stop(settle=0)
        st = gw0.ctl_stats()
        seen = (f"hostA's socket: {res}\nroute: {route!r}\na0: {summaries(fa)}\nb0: {summaries(fb)}\n"
                f"wan: {[esp_summary(e) for e in esp_from_gw0(fw)]} + other {not_esp(fw)}\ngw0: {state(st)}")
        assert res[0]["errno"] == 0, f"hostA could not send the first {BIG}-byte datagram\n{seen}"
        at_b = udp_of(fb, sport)
        assert [len(p) for p in at_b] == [FITS], \
            f"hostB should get only the {FITS}-byte datagram, got sizes {[len(p) for p in at_b]}\n{seen}"
        assert [len(p) for p in udp_of(fa, sport)] == [BIG, FITS], \
            f"hostA should have sent {BIG} once (the second send refused: EMSGSIZE) then {FITS}\n{seen}"
        icmps = icmp_from_gw0(fa)
        assert len(icmps) == 1, f"{len(icmps)} ICMP from gw0 on a0, want 1\n{seen}"
        check_frag_needed(icmps[0], udp_of(fa, sport)[0], FITS, seen)
        assert (st["icmp_sent"], st["drops"]["mtu_exceeded"]) == (1, 1), f"icmp_sent / mtu_exceeded\n{seen}"
        assert res[3]["value"] == FITS, f"hostA's IP_MTU {res[3]['value']}, want {FITS}\n{seen}"
        assert re.search(rf"\bmtu {FITS}\b", route), f"hostA's route cache, want mtu {FITS}: {route!r}\n{seen}"
        assert res[4]["errno"] == EMSGSIZE, f"the second {BIG}-byte send: errno {res[4]['errno']}, want EMSGSIZE\n{seen}"
        assert res[5]["errno"] == 0, f"the {FITS}-byte send failed: {res[5]}\n{seen}"
        esp = esp_from_gw0(fw)
        assert len(esp) == 1 and not not_esp(fw), f"want one ESP packet from gw0 on the wan\n{seen}"
        assert spi_seq(esp[0]) == (SA_OUT, 3) and len(esp[0]) == LEARNED == int.from_bytes(esp[0][2:4], "big"), \
            f"the {FITS}-byte datagram's ESP: {esp_summary(esp[0])}, want SPI {SA_OUT} seq 3, {LEARNED} bytes\n{seen}"
        assert at_b[0][20:] == udp_of(fa, sport)[1][20:], f"the {FITS}-byte datagram changed on its way\n{seen}"

        # Nothing else happened: the reports were neither forwarded nor answered.
        st = gw0.ctl_stats()
        assert pmtu_counts(st) == (2, len(bad) + 1), state(st)
        assert sa_entry(st).get("path_mtu") == LEARNED, state(st)
        fa_leak, fb_leak, fw_leak = leak_a.stop(settle=0), leak_b.stop(settle=0), leak_w.stop(settle=0)
        assert not fw_leak, f"gw0 sent on the wan something else than ESP: {summaries(fw_leak)}"
        assert not fa_leak, f"on a0, from the router or ICMP from gw0's outside address: {summaries(fa_leak)}"
        assert not fb_leak, f"on b0, from the router or an ICMP error: {summaries(fb_leak)}"
        assert L.nonzero_drops(st).get("to_us", 0) == 0, f"reports counted as to_us too: {state(st)}"

        flush_hosta_route_cache()
        assert f"mtu {FITS}" not in hosta_route(), f"hostA's route cache not flushed: {hosta_route()!r}"
    finally:
        caps.stop_all()
        flush_hosta_route_cache()


def check_frag_needed(icmp, sent: bytes, mtu: int, seen: str, src: str = "192.0.2.1"):
    """The frag-needed from `src` (gw0's inside address unless told) to hostA
    about `sent` (hostA's IP bytes), advertising `mtu`; `icmp` a captured
    frame or a scapy IP packet (decrypted from ESP)."""
    from scapy.compat import raw
    from scapy.layers.inet import ICMP, IP
    from scapy.layers.l2 import Ether
    ip = ip_bytes(icmp) if Ether in icmp else raw(icmp[IP])[:icmp[IP].len]
    ihl = (ip[0] & 0xF) * 4
    assert (icmp[IP].src, icmp[IP].dst, icmp[ICMP].type, icmp[ICMP].code) == (src, L.A_IP, 3, 4), \
        f"not a frag-needed from {src} to hostA: {icmp.summary()}\n{seen}"
    assert icmp[ICMP].nexthopmtu == mtu, f"next-hop MTU {icmp[ICMP].nexthopmtu}, want {mtu}\n{seen}"
    assert ip_checksum(ip[ihl:]) == 0, f"bad ICMP checksum in the frag-needed from {src}: {ip.hex()}\n{seen}"
    quote = ip[ihl + 8:]
    # hostA's header and 8 bytes of its payload (the UDP header); TTL and header
    # checksum aside (README: "as sent"; not what this file tests).
    assert len(quote) >= 28 and L.normalize_ttl_csum(quote[:28]) == L.normalize_ttl_csum(sent[:28]), \
        f"quoted {quote[:28].hex()}, hostA sent {sent[:28].hex()}\n{seen}"


def test_pmtu_report_below_552_is_raised_to_552(gws, artifacts):
    """A valid report of MTU 296 (below the IPv4 minimum) sets path_mtu 552;
    a 1246-byte DF datagram (IP_PMTUDISC_PROBE: hostA ignores its own path
    MTU) then gets a frag-needed advertising ((552 − 52) // 4) * 4 − 2 = 498,
    and a 498-byte one crosses as a 552-byte ESP packet."""
    check_config_assumptions()
    gw0 = gws["gw0"]
    caps = Captures(artifacts)
    flush_hosta_route_cache()
    try:
        esp1 = baseline(gw0, caps, 40711, 5711, "baseline")
        expect_update(gw0, frag_needed(quoted(esp1), 296), artifacts, "mtu296", MIN_PMTU)
        small = max_inner(MIN_PMTU)
        assert small == 498 and esp_len(small) == MIN_PMTU
        cap_w, cap_a, cap_b = caps.wan("wan-552"), caps.a0("a0-552"), caps.b0("b0-552")
        sport = 40712
        res = hosta(sport, 5712, [{"send": FITS}, {"sleep": 0.3}, {"so_error": 1}, {"send": small, "retry": 1},
                                  {"sleep": 0.3}], pmtudisc=PMTUDISC_PROBE)
        fb, fa, fw = cap_b.stop(settle=0.3), cap_a.stop(settle=0), cap_w.stop(settle=0)
        st = gw0.ctl_stats()
        seen = (f"hostA's socket: {res}\na0: {summaries(fa)}\nb0: {summaries(fb)}\n"
                f"wan: {[esp_summary(e) for e in esp_from_gw0(fw)]} + other {not_esp(fw)}\ngw0: {state(st)}")
        icmps = icmp_from_gw0(fa)
        assert len(icmps) == 1, f"{len(icmps)} ICMP from gw0 on a0, want 1\n{seen}"
        sent = udp_of(fa, sport)
        assert [len(p) for p in sent] == [FITS, small], f"hostA's datagrams\n{seen}"
        check_frag_needed(icmps[0], sent[0], small, seen)
        assert [len(p) for p in udp_of(fb, sport)] == [small], f"hostB should get only the {small}-byte one\n{seen}"
        esp = esp_from_gw0(fw)
        assert len(esp) == 1 and len(esp[0]) == MIN_PMTU and spi_seq(esp[0]) == (SA_OUT, 2), \
            f"want one {MIN_PMTU}-byte ESP packet, SPI {SA_OUT} seq 2\n{seen}"
        assert (st["icmp_sent"], st["drops"]["mtu_exceeded"]) == (1, 1), seen
        assert pmtu_counts(st) == (1, 0) and sa_entry(st).get("path_mtu") == MIN_PMTU, seen
    finally:
        caps.stop_all()
        flush_hosta_route_cache()


def test_pmtu_timeout_zero_ignores_reports(testbed, start_gws, artifacts):
    """`[gateway] pmtu_timeout_s = 0` on gw0: the valid MTU 1300 report is
    counted as pmtu_ignored, no path_mtu, and a 1400-byte DF datagram still
    crosses without an ICMP to hostA."""
    check_config_assumptions()
    text = (L.CONFIG_DIR / L.GW_CONFIG["gw0"]).read_text()
    assert text.count("[gateway]\n") == 1 and "pmtu_timeout_s" not in text
    cfg0 = artifacts / "ep0-pmtu0.toml"
    cfg0.write_text(text.replace("[gateway]\n", "[gateway]\npmtu_timeout_s = 0\n", 1))
    p = L.run([testbed["binary"], "check", cfg0], check=False, timeout=30)
    assert p.returncode == 0, f"secgw check {cfg0}: {p.returncode}\n{p.stdout}{p.stderr}"
    gws = start_gws({"gw0": cfg0, "gw1": L.CONFIG_DIR / L.GW_CONFIG["gw1"]})
    gw0 = gws["gw0"]
    caps = Captures(artifacts)
    flush_hosta_route_cache()
    try:
        check_reasons_listed(gw0.ctl_stats())
        esp1 = baseline(gw0, caps, 40721, 5721, "baseline")
        expect_ignored(gw0, frag_needed(quoted(esp1), LEARNED), artifacts, "valid-but-off", "pmtu_timeout_s = 0")
        esp2 = baseline(gw0, caps, 40722, 5722, "after-report")
        assert spi_seq(esp2) == (SA_OUT, 2), esp_summary(esp2)
        st = gw0.ctl_stats()
        assert st["icmp_sent"] == 0 and st["drops"]["mtu_exceeded"] == 0 and pmtu_counts(st) == (0, 1), state(st)
    finally:
        caps.stop_all()
        flush_hosta_route_cache()


# --------------------------------------------------------------------------
# a decapsulated packet too big for gw1's inside port

INSIDE_MTU = 1300                   # gw1's inside port in the derived ep1.toml

def HostBSocket(port: int, limit_s: float = 60) -> L.UdpSink:
    """A UDP socket on hostB (B_IP): what hostB's kernel delivers."""
    return L.UdpSink("hostB", L.B_IP, port, limit_s)


def fragments(frames) -> list[tuple[int, int, bool, bool]]:
    """(IP total length, fragment offset in bytes, MF, DF) of each captured IPv4 packet."""
    out = []
    for f in frames:
        ip = ip_bytes(f)
        if ip:
            flags = int.from_bytes(ip[6:8], "big")
            out.append((len(ip), (flags & 0x1FFF) * 8, bool(flags & 0x2000), bool(flags & 0x4000)))
    return out


def gw_state(st, spis) -> str:
    """What a failure message shows of a gateway: its drops, icmp_sent,
    frags_sent and the SA entries (spi, direction) of `spis`."""
    sas = [s for s in st.get("sas", []) if (s.get("spi"), s.get("direction")) in spis]
    return f"drops {L.nonzero_drops(st)}, icmp_sent {st.get('icmp_sent')}, frags_sent {st.get('frags_sent')}, SAs {sas}"


def test_decapsulated_too_big_error_comes_back_through_the_tunnel(testbed, start_gws, artifacts):
    """gw1's inside port with `mtu = 1300` (a derived ep1.toml), gw0 as is.
    1. hostA's 1400-byte DF datagram crosses the wan (ESP SPI 1001), gw1
    decrypts it and drops it (`mtu_exceeded`, `icmp_sent` 1): the
    frag-needed it builds, from its inside address 198.51.100.1 to hostA
    with MTU 1300, quoting hostA's header as decapsulated (TTL 63) and the
    UDP header, goes back through SA 1002 — the next ESP packet on the wan,
    from 203.0.113.2, decrypted here by scapy with the key of
    configs/ep1.toml — and gw0 delivers it to hostA (SA 1002 inbound counts
    1); hostB gets nothing. 2. hostA's kernel takes it: IP_MTU 1300, `mtu
    1300` in its route cache, the next 1400-byte DF send fails with
    EMSGSIZE. 3. A 1300-byte DF datagram reaches hostB's socket whole.
    4. hostA's route cache flushed (else hostA fragments at 1300 itself), a
    1400-byte datagram with DF clear leaves hostA whole, gw1 fragments it
    (1300 + 120 bytes on b0) and hostB's kernel reassembles it."""
    text = (L.CONFIG_DIR / L.GW_CONFIG["gw1"]).read_text()
    inside = 'interface = "gw1-in"\n'
    assert text.count(inside) == 1 and "mtu" not in text, "configs/ep1.toml is not what this test assumes"
    cfg1 = artifacts / "ep1-inside-mtu1300.toml"
    cfg1.write_text(text.replace(inside, f"{inside}mtu = {INSIDE_MTU}\n", 1))
    p = L.run([testbed["binary"], "check", cfg1], check=False, timeout=30)
    assert p.returncode == 0, f"secgw check {cfg1}: {p.returncode}\n{p.stdout}{p.stderr}"
    gws = start_gws({"gw0": L.CONFIG_DIR / L.GW_CONFIG["gw0"], "gw1": cfg1})
    gw0, gw1 = gws["gw0"], gws["gw1"]
    sa_err = L.load_sa("gw1", SA_IN)
    assert (sa_err.direction, sa_err.src, sa_err.dst) == ("outbound", L.GW1_OUT_IP, L.GW0_OUT_IP), sa_err
    gw1_inside = "198.51.100.1"
    caps = Captures(artifacts)
    dport, sport, sport_nodf = 5731, 40731, 40732
    flush_hosta_route_cache()
    rx_b = HostBSocket(dport)
    try:
        cap_w = caps.start("wan", "br0", f"ip proto {ESP_PROTO}", "wan")
        cap_a, cap_b = caps.a0("a0"), caps.b0("b0")
        res = hosta(sport, dport, [{"send": BIG}, {"wait_mtu_below": PORT_MTU, "timeout": 3}, {"so_error": 1},
                                   {"ip_mtu": 1}, {"send": BIG}, {"send": INSIDE_MTU, "retry": 1}, {"sleep": 0.3}])
        route = hosta_route()
        flush_hosta_route_cache()
        res_nodf = hosta(sport_nodf, dport, [{"send": BIG}, {"sleep": 0.3}], pmtudisc=PMTUDISC_DONT)
        fb, fa, fw = cap_b.stop(settle=0.3), cap_a.stop(settle=0), cap_w.stop(settle=0)
        at_b = rx_b.stop()
        st0, st1 = gw0.ctl_stats(), gw1.ctl_stats()
        seen = (f"hostA's socket (DF): {res}\nhostA's socket (DF clear): {res_nodf}\nroute: {route!r}\n"
                f"a0: {summaries(fa)}\nb0: {summaries(fb)} fragments {fragments(fb)}\n"
                f"hostB's socket: {[(d['src'], d['sport'], d['len']) for d in at_b]}\n"
                f"wan (in capture order): {[esp_summary(ip_bytes(f)) for f in fw if ip_bytes(f)]}\n"
                f"gw0: {gw_state(st0, {(SA_OUT, 'outbound'), (SA_IN, 'inbound')})}\n"
                f"gw1: {gw_state(st1, {(SA_OUT, 'inbound'), (SA_IN, 'outbound')})}")

        # hostA sent: 1400 (DF), 1300 (DF; the second 1400 refused), 1400 (DF clear)
        sent, sent_nodf = udp_of(fa, sport), udp_of(fa, sport_nodf)
        assert res[0]["errno"] == 0, f"hostA could not send the first {BIG}-byte datagram\n{seen}"
        assert [len(p) for p in sent] == [BIG, INSIDE_MTU] and all(p[6] & 0x40 for p in sent), \
            f"hostA should have sent {BIG} then {INSIDE_MTU} bytes, DF set (the second {BIG} refused)\n{seen}"
        assert [(len(p), bool(p[6] & 0x40)) for p in sent_nodf] == [(BIG, False)], \
            f"hostA should have sent one whole {BIG}-byte datagram with DF clear\n{seen}"

        # the wan: SPI 1001 seq 1 (the 1400), SPI 1002 seq 1 (the error), then 1001 seq 2 and 3
        order = [(ipaddress.ip_address(ip[12:16]).exploded, *spi_seq(ip), len(ip))
                 for ip in (ip_bytes(f) for f in fw) if ip]
        # the error: IPv4 20 + ICMP 8 + quote 28, sealed like SA 1001 (both AES-128-GCM, IPv4 tunnels)
        want = [(L.GW0_OUT_IP, SA_OUT, 1, esp_len(BIG)), (L.GW1_OUT_IP, SA_IN, 1, esp_len(20 + 8 + 28)),
                (L.GW0_OUT_IP, SA_OUT, 2, esp_len(INSIDE_MTU)), (L.GW0_OUT_IP, SA_OUT, 3, esp_len(BIG))]
        assert order == want, f"ESP on the wan (src, spi, seq, length): {order}, want {want}\n{seen}"
        err_esp = esp_from(fw, L.GW1_OUT_IP)[0]
        from scapy.compat import raw
        from scapy.layers.inet import IP
        try:
            err = L.scapy_sa(sa_err).decrypt(IP(err_esp))
        except Exception as e:  # noqa: BLE001 - what scapy said goes into the message
            raise AssertionError(f"scapy cannot decrypt gw1's SPI {SA_IN} packet {err_esp.hex()}: {e!r}\n{seen}")
        seen += f"\ndecrypted SPI {SA_IN}: {err.summary()} ttl {err[IP].ttl}: {raw(err).hex()}"
        check_frag_needed(err, sent[0], INSIDE_MTU, seen, src=gw1_inside)
        quote = raw(err)[err[IP].ihl * 4 + 8:]
        assert quote[8] == sent[0][8] - 1 == 63 and L.ip_checksum_ok(quote[:20]), \
            (f"the error quotes TTL {quote[8]} (checksum ok: {L.ip_checksum_ok(quote[:20])}), want hostA's header "
             f"as gw1 decapsulated it: TTL {sent[0][8]} − 1 = 63, valid checksum\n{seen}")

        # delivered to hostA, taken by hostA's kernel
        icmps = icmp_from(fa, gw1_inside)
        assert len(icmps) == 1 and not icmp_from_gw0(fa), \
            f"want one ICMP from {gw1_inside} on a0 (and none from gw0's inside address)\n{seen}"
        check_frag_needed(icmps[0], sent[0], INSIDE_MTU, seen, src=gw1_inside)
        assert ip_bytes(icmps[0])[20:] == raw(err)[20:], \
            f"the ICMP on a0 differs from the one decrypted on the wan: {ip_bytes(icmps[0]).hex()}\n{seen}"
        assert res[3]["value"] == INSIDE_MTU, f"hostA's IP_MTU {res[3]['value']}, want {INSIDE_MTU}\n{seen}"
        assert re.search(rf"\bmtu {INSIDE_MTU}\b", route), f"hostA's route cache, want mtu {INSIDE_MTU}\n{seen}"
        assert res[4]["errno"] == EMSGSIZE, f"the second {BIG}-byte send: errno {res[4]['errno']}, want EMSGSIZE\n{seen}"
        assert res[5]["errno"] == 0, f"the {INSIDE_MTU}-byte send failed: {res[5]}\n{seen}"

        # hostB: nothing of the first 1400; the 1300 whole; the DF-clear 1400 in gw1's 2 fragments, reassembled
        assert [(d["sport"], d["len"]) for d in at_b] == [(sport, INSIDE_MTU - 28), (sport_nodf, BIG - 28)], \
            f"hostB's socket should get the {INSIDE_MTU}-byte then the DF-clear {BIG}-byte datagram only\n{seen}"
        assert bytes.fromhex(at_b[0]["data"]) == sent[1][28:] and bytes.fromhex(at_b[1]["data"]) == sent_nodf[0][28:], \
            f"hostB's socket got other bytes than hostA sent\n{seen}"
        frags = fragments(fb)
        first = (INSIDE_MTU - 20) // 8 * 8  # data in the first fragment: 1280
        want_b = [(INSIDE_MTU, 0, False, True), (20 + first, 0, True, False), (BIG - first, first, False, False)]
        assert frags == want_b, f"b0 (length, offset, MF, DF): {frags}, want {want_b}\n{seen}"

        # the gateways' counts
        d1 = st1.get("drops", {})
        assert (d1.get("mtu_exceeded"), st1.get("icmp_sent"), st1.get("frags_sent")) == (1, 1, 2), \
            f"gw1: mtu_exceeded {d1.get('mtu_exceeded')}, icmp_sent {st1.get('icmp_sent')}, frags_sent " \
            f"{st1.get('frags_sent')}, want 1, 1, 2\n{seen}"
        assert sa_entry(st1, SA_IN, "outbound").get("packets") == 1, f"gw1's SA {SA_IN} should carry the error\n{seen}"
        assert sa_entry(st0, SA_IN, "inbound").get("packets") == 1, f"gw0's SA {SA_IN} should count the error\n{seen}"
        assert (st0.get("icmp_sent"), st0.get("drops", {}).get("mtu_exceeded")) == (0, 0), f"gw0\n{seen}"
    finally:
        rx_b.kill()
        caps.stop_all()
        flush_hosta_route_cache()
