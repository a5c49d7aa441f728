"""SA lifetimes in the testbed (RFC 4301 §4.4.2.1, RFC 4303 §3.3.3).

- test_sequence_exhaustion_no_wrap_on_the_wire (software and descriptor
  crypto device): gw0 runs configs/ep0.toml with `first_seq = 4294967290` on
  outbound SA 1001 (no ESN). hostA sends 20 numbered UDP datagrams to hostB.
  On the wan exactly 6 ESP packets of SPI 1001 appear, carrying sequence
  numbers 4294967290 … 4294967295 in that order and none smaller (no wrap);
  scapy's SecurityAssociation decrypts them to hostA's first 6 datagrams;
  hostB receives exactly those 6 (gw1's replay window starts empty, so the
  high numbers are fine); gw0's stats file counts the other 14 as
  `sa_expired` (the SA hard-expired with its last number, 2^32−1) and SA
  1001's `errors` 14.
- test_inbound_hard_packet_limit: gw1 runs configs/ep1.toml with
  `soft_packets = 5` and `hard_packets = 8` on inbound SA 1001. All 20 ESP
  packets cross the wan (gw0 has no limit), hostB receives exactly the first
  8 datagrams, gw1 counts 12 `sa_expired` and SA 1001's `errors` 12 and
  `packets` 8; the reverse direction (SA 1002) still carries hostB → hostA.
"""
from __future__ import annotations

import struct
import pytest

import e2elib as L

FIRST_SEQ = 4294967290          # 2^32 − 6: six numbers left
DATAGRAMS = 20
GAP_S = 0.02


def config_with(gw: str, spi: int, extra: str, dst_dir, backend: str | None = None) -> "L.Path":
    """The gateway's standard config with `extra` lines in SA `spi` (and the
    crypto backend set when given), written to the test's artifacts."""
    src = L.CONFIG_DIR / L.GW_CONFIG[gw]
    text = src.read_text()
    key = f"spi = {spi}\n"
    assert text.count(key) == 1, f"{src}: SA {spi} not found once"
    text = text.replace(key, f"{key}{extra}\n")
    if backend is not None:
        assert "[crypto]" not in text, src
        text += f'\n[crypto]\nbackend = "{backend}"\n'
    path = dst_dir / f"{gw}-lifetime.toml"
    path.write_text(text)
    return path


def payloads() -> list[bytes]:
    return [b"lifetime-%02d" % i + bytes(20) for i in range(DATAGRAMS)]


def send_from_a(ps: list[bytes]):
    L.send_udp("hostA", L.A_IP, L.B_IP, [{"sport": 40000, "dport": 5001, "payload": p, "gap": GAP_S} for p in ps])


def esp_frames(frames, spi: int):
    """(sequence number, outer IP packet as scapy) of each ESP frame of `spi`."""
    from scapy.compat import raw
    from scapy.layers.inet import IP
    out = []
    for frame in frames:
        ip = raw(frame)[14:]
        outer = IP(ip[:struct.unpack("!H", ip[2:4])[0]])
        s, seq = struct.unpack("!II", raw(outer)[20:28])
        if s == spi:
            out.append((seq, outer))
    return out


def drop(st: dict, reason: str) -> int:
    """A drop counter (the stats file written at start has none yet)."""
    return int(st.get("drops", {}).get(reason, 0))


def sa_stats(st: dict, spi: int, direction: str) -> dict:
    found = [s for s in st["sas"] if s["spi"] == spi and s["direction"] == direction]
    assert len(found) == 1, st["sas"]
    return found[0]


@pytest.mark.parametrize("backend", ["software", "descriptor"])
def test_sequence_exhaustion_no_wrap_on_the_wire(start_gws, artifacts, backend):
    from scapy.compat import raw
    from scapy.layers.inet import IP

    gws = start_gws({"gw0": config_with("gw0", 1001, f"first_seq = {FIRST_SEQ}", artifacts, backend),
                     "gw1": L.CONFIG_DIR / L.GW_CONFIG["gw1"]})
    cap_w = L.Capture("wan", "br0", f"esp and src host {L.GW0_OUT_IP}", artifacts / "wan")
    cap_b = L.Capture("hostB", "b0", f"udp and src host {L.A_IP}", artifacts / "b0")
    events = gws["gw0"].events()
    sent = payloads()
    send_from_a(sent)
    st0 = gws["gw0"].wait_stats(lambda s: drop(s, "seq_exhausted") + drop(s, "sa_expired") >= DATAGRAMS - 6)
    # The control socket reports the hard expiry once, with its reason.
    ev = [e for e in events.stop() if e["spi"] == 1001]
    assert [(e["kind"], e["direction"], e.get("reason")) for e in ev] == [("hard_expired", "outbound", "sequence")], ev
    delivered = cap_b.stop(settle=0.5)
    esp = esp_frames(cap_w.stop(), 1001)

    seqs = [s for s, _ in esp]
    assert seqs == list(range(FIRST_SEQ, 2**32)), f"sequence numbers on the wan: {seqs}"
    sa = L.scapy_sa(L.load_sa("gw0", 1001))
    inner = [raw(sa.decrypt(outer)[IP].payload.payload) for _, outer in esp]
    assert inner == sent[:6], "the ESP packets carry hostA's first six datagrams"
    got = [raw(p[IP].payload.payload) for p in delivered]
    assert got == sent[:6], f"hostB received {len(got)} datagrams; expected the first 6"

    assert (st0["drops"]["seq_exhausted"], st0["drops"]["sa_expired"]) == (0, DATAGRAMS - 6), st0["drops"]
    out = sa_stats(st0, 1001, "outbound")
    assert (out["packets"], out["errors"]) == (6, DATAGRAMS - 6), out
    st1 = gws["gw1"].stats()
    assert sa_stats(st1, 1001, "inbound")["packets"] == 6
    assert sum(st1["drops"].values()) == 0, {k: v for k, v in st1["drops"].items() if v}


def test_inbound_hard_packet_limit(start_gws, artifacts):
    from scapy.compat import raw
    from scapy.layers.inet import IP

    hard = 8
    gws = start_gws({"gw0": L.CONFIG_DIR / L.GW_CONFIG["gw0"],
                     "gw1": config_with("gw1", 1001, f"soft_packets = 5\nhard_packets = {hard}", artifacts)})
    cap_w = L.Capture("wan", "br0", f"esp and src host {L.GW0_OUT_IP}", artifacts / "wan")
    cap_b = L.Capture("hostB", "b0", f"udp and src host {L.A_IP}", artifacts / "b0")
    cap_a = L.Capture("hostA", "a0", f"udp and src host {L.B_IP}", artifacts / "a0")
    events = gws["gw1"].events()
    sent = payloads()
    send_from_a(sent)
    st1 = gws["gw1"].wait_stats(lambda s: drop(s, "sa_expired") >= DATAGRAMS - hard)
    # Soft at the 5th packet, hard at the 8th: one event each, on the socket.
    # (An event carries the SA's count when the control thread saw the flag,
    # every 100 ms: at least the limit; after the hard limit it stays put.)
    ev = [e for e in events.stop() if e["spi"] == 1001]
    assert [(e["kind"], e["direction"], e.get("reason")) for e in ev] == [
        ("soft_expired", "inbound", "packets"), ("hard_expired", "inbound", "packets")], ev
    assert 5 <= ev[0]["packets"] <= hard and ev[1]["packets"] == hard, ev
    delivered = cap_b.stop(settle=0.5)
    esp = esp_frames(cap_w.stop(), 1001)
    # The other SA of gw1 (outbound 1002) still works: hostB → hostA. (After
    # the wan capture: hostA answers it with an ICMP port unreachable, which
    # goes out on SA 1001 and is sa_expired at gw1.)
    back = b"reverse-after-expiry"
    L.send_udp("hostB", L.B_IP, L.A_IP, [{"sport": 40001, "dport": 5002, "payload": back}])
    reverse = cap_a.stop(settle=0.5)

    assert [s for s, _ in esp] == list(range(1, DATAGRAMS + 1)), "gw0 sends all 20 (no limit there)"
    got = [raw(p[IP].payload.payload) for p in delivered]
    assert got == sent[:hard], f"hostB received {len(got)} datagrams; expected the first {hard}"
    assert st1["drops"]["sa_expired"] == DATAGRAMS - hard, st1["drops"]
    others = {k: v for k, v in st1["drops"].items() if v and k != "sa_expired"}
    assert not others, f"gw1 dropped for other reasons too: {others}"
    inb = sa_stats(st1, 1001, "inbound")
    assert (inb["packets"], inb["errors"]) == (hard, DATAGRAMS - hard), inb
    assert [raw(p[IP].payload.payload) for p in reverse] == [back], "SA 1002 still carries hostB → hostA"
