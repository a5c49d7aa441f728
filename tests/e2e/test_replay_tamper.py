"""Anti-replay and integrity at gw1 (RFC 4303 §3.4.3, §3.4.4): a replayed ESP
packet and one with a flipped ICV bit are dropped and counted under their own
reasons, exactly once each; a failed ICV does not advance the replay window."""
import struct
import time

import e2elib as L
from test_interop_encrypt import SEQ, build_inner, esp_frame


def drops(gw, reason):
    return int(gw.stats().get("drops", {}).get(reason, 0))


def wait_drop(gw, reason, want, timeout=5.0):
    """Wait until drops[reason] reaches want, then a stats period more, and return it."""
    gw.wait_stats(lambda st: int(st.get("drops", {}).get(reason, 0)) >= want, timeout)
    time.sleep(1.5)  # the stats file is rewritten every second: let overshoot show
    return drops(gw, reason)


def test_replay_and_tampered_icv_are_dropped(gws, artifacts):
    from scapy.compat import raw
    from scapy.layers.l2 import Ether

    gw1 = gws["gw1"]
    sa = L.scapy_sa(L.load_sa("gw1", 1001))
    seq = next(SEQ)
    valid = esp_frame(sa, build_inner(1, 40, 43001), seq)
    tampered_b = bytearray(raw(esp_frame(sa, build_inner(2, 40, 43002), seq + 1)))
    tampered_b[-1] ^= 0x01  # last bit of the ICV
    tampered = Ether(bytes(tampered_b))
    after_tamper = esp_frame(sa, build_inner(3, 40, 43003), seq + 1)  # same seq, valid ICV

    cap = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "b0")
    replay0, auth0 = drops(gw1, "replay"), drops(gw1, "auth_failed")

    L.send_frames("wan", "wan1", [valid], artifacts / "1-valid")
    time.sleep(0.3)
    L.send_frames("wan", "wan1", [valid], artifacts / "2-replayed")
    replay1 = wait_drop(gw1, "replay", replay0 + 1)
    L.send_frames("wan", "wan1", [tampered], artifacts / "3-tampered")
    auth1 = wait_drop(gw1, "auth_failed", auth0 + 1)
    replay2 = drops(gw1, "replay")
    L.send_frames("wan", "wan1", [after_tamper], artifacts / "4-same-seq-valid")
    got = cap.stop(settle=1.0)

    ports = [struct.unpack("!H", raw(f)[14 + 22:14 + 24])[0] for f in got]
    st = gw1.stats()
    assert ports.count(43001) == 1, f"valid packet arrived {ports.count(43001)} times (want 1: the replay must be dropped); drops {st.get('drops')}"
    assert replay1 == replay0 + 1, f"drops.replay went {replay0} -> {replay1}, want +1; stats {st}"
    assert ports.count(43002) == 0, f"packet with a flipped ICV bit was forwarded; drops {st.get('drops')}"
    assert auth1 == auth0 + 1, f"drops.auth_failed went {auth0} -> {auth1}, want +1; stats {st}"
    assert replay2 == replay1, "the tampered packet was counted as a replay"
    assert ports.count(43003) == 1, \
        "a valid packet with the sequence number of the tampered one was not delivered: " \
        f"the window must only move after the ICV verified (RFC 4303 §3.4.3); drops {st.get('drops')}"
