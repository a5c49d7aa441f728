"""Dummy packets (RFC 4303 §2.6, RFC-RULES 12) in the testbed: gw0 runs
configs/ep0.toml with `dummy_interval_ms` and `dummy_len` on SA 1001 (written
to the test's artifact dir), gw1 runs ep1.toml unchanged.

- the wan carries gw0's dummies between its real packets: scapy's
  SecurityAssociation decrypts every ESP frame of SPI 1001; a dummy's next
  header is 59 (scapy writes the ESP trailer's next header into the outer
  header it returns the payload of) and its payload is `dummy_len` zero
  bytes, a real packet's is 4 and the datagram hostA sent; the sequence
  numbers of both run 1, 2, 3, … without a gap;
- the dummies leave one interval apart (±50 ms), with the default idle
  sleep and with the longest (`idle_sleep_us = 10000`);
- gw0's `dummies_sent` and gw1's `dummy` drop counter both equal the number
  of dummies captured (the capture starts before the gateways; the first
  dummy is due after both are up);
- hostB receives exactly the datagrams hostA sent, nothing for the dummies."""
import struct
import time

import pytest

import e2elib as L

INTERVAL_MS = 500
DUMMY_LEN = 64
DATAGRAMS = 12
GAP_S = 0.25


def dummy_config(dst_dir, idle_sleep_us) -> "L.Path":
    """ep0.toml with dummies on SA 1001 and `idle_sleep_us` (None: the default)."""
    src = L.CONFIG_DIR / L.GW_CONFIG["gw0"]
    text = src.read_text()
    key = "spi = 1001\n"
    assert text.count(key) == 1 and text.count("[gateway]\n") == 1, f"{src}: SA 1001 or [gateway] not found once"
    text = text.replace(key, f"{key}dummy_interval_ms = {INTERVAL_MS}\ndummy_len = {DUMMY_LEN}\n")
    if idle_sleep_us is not None:
        assert "idle_sleep_us" not in text, src
        text = text.replace("[gateway]\n", f"[gateway]\nidle_sleep_us = {idle_sleep_us}\n")
    path = dst_dir / "ep0-dummy.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("idle_sleep_us", [None, 10000], ids=["idle-default", "idle-10ms"])
def test_dummies_decrypt_with_scapy_and_are_counted_not_delivered(start_gws, artifacts, idle_sleep_us):
    from scapy.compat import raw
    from scapy.layers.inet import IP

    info = L.load_sa("gw0", 1001)
    assert info.direction == "outbound", info
    cap_w = L.Capture("wan", "br0", f"esp and src host {L.GW0_OUT_IP}", artifacts / "wan")
    cap_b = L.Capture("hostB", "b0", f"udp and src host {L.A_IP}", artifacts / "b0")
    # start_gws starts gw1 before gw0, so gw0's first dummy (an interval
    # after it is ready) finds gw1 ready.
    gws = start_gws({"gw0": dummy_config(artifacts, idle_sleep_us), "gw1": L.CONFIG_DIR / L.GW_CONFIG["gw1"]})
    payloads = [bytes([i]) * (20 + i) for i in range(DATAGRAMS)]
    L.send_udp("hostA", L.A_IP, L.B_IP, [
        {"sport": 40000, "dport": 42000 + i, "payload": p, "gap": GAP_S} for i, p in enumerate(payloads)])
    time.sleep(0.3)
    # Stop gw0 so no dummy is in flight when counting; its stats are final.
    assert gws["gw0"].stop() == 0, gws["gw0"].logs()
    frames = cap_w.stop(settle=0.5)
    delivered = cap_b.stop()

    sa = L.scapy_sa(info)
    dummies, real, seqs, kinds, times = 0, [], [], "", []
    for n, frame in enumerate(frames, start=1):
        ip = raw(frame)[14:]
        outer = IP(ip[:struct.unpack("!H", ip[2:4])[0]])
        spi, seq = struct.unpack("!II", raw(outer)[20:28])
        assert spi == 1001, f"frame {n}: SPI {spi}"
        seqs.append(seq)
        inner = sa.decrypt(outer)
        # scapy (tunnel mode) puts the ESP next header into the outer header
        # it strips and returns the decrypted payload.
        if outer.proto == 59:
            assert raw(inner) == bytes(DUMMY_LEN), f"frame {n} (seq {seq}): dummy payload {raw(inner).hex()}"
            dummies += 1
            kinds += "d"
            times.append(float(frame.time))
        else:
            assert outer.proto == 4 and isinstance(inner, IP), f"frame {n} (seq {seq}): next header {outer.proto}"
            real.append(raw(inner[IP].payload.payload))
            kinds += "r"
    assert seqs == list(range(1, len(frames) + 1)), f"sequence numbers {seqs}: dummies and traffic share one gap-free sequence"
    assert real == payloads, "the real packets decrypt to what hostA sent"
    expect = DATAGRAMS * GAP_S * 1000 / INTERVAL_MS
    assert dummies >= expect - 1, f"{dummies} dummies in {DATAGRAMS * GAP_S:.1f} s at one per {INTERVAL_MS} ms"
    # Dummies and real packets interleave: a dummy between two real packets.
    assert "d" in kinds.strip("d"), f"order {kinds}: no dummy between real packets"

    # On time: one per interval, also when the idle worker sleeps 10 ms
    # between polls (the longest idle_sleep_us allowed).
    gaps = [round((b - a) * 1000, 1) for a, b in zip(times, times[1:])]
    assert all(abs(g - INTERVAL_MS) < 50 for g in gaps), f"ms between dummies: {gaps}"

    sent = gws["gw0"].stats()
    assert sent["dummies_sent"] == dummies, f"gw0 dummies_sent {sent['dummies_sent']}, captured {dummies}"
    sa_out = [s for s in sent["sas"] if s["spi"] == 1001 and s["direction"] == "outbound"][0]
    assert (sa_out["dummies"], sa_out["packets"]) == (dummies, DATAGRAMS), sa_out
    st = gws["gw1"].wait_stats(lambda s: s["drops"].get("dummy", 0) >= dummies, timeout=5)
    assert st["drops"]["dummy"] == dummies, f"gw1 counted {st['drops']['dummy']} dummies, {dummies} captured"
    others = {k: v for k, v in st["drops"].items() if v and k != "dummy"}
    assert not others, f"gw1 dropped more than dummies: {others}"
    got = [raw(p[IP].payload.payload) for p in delivered]
    assert got == payloads, f"hostB received {len(got)} datagrams for {DATAGRAMS} sent (dummies must not reach it)"
