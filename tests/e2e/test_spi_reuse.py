"""SPI reuse by two peers (issue 6; RFC 4301 §4.1, §4.4.2): gw1 runs a copy
of ep1.toml with two more outside addresses (203.0.113.3, .4) and a second
inbound SA with SPI 1001 — peer B 203.0.113.9 → 203.0.113.3, a fresh random
AES-128-GCM key. scapy's SecurityAssociation seals ESP for both peers
(peer A with ep1's SA 1001 key towards 203.0.113.2), injected on the wan:

- both peers' packets reach hostB, exactly the inner packets built, each SA
  counting its own (stats carry `dst` for the two SAs sharing the SPI);
- SPI 1001 towards the third address, 203.0.113.4, is dropped as `no_sa`;
  nothing else is dropped;
- `secgw ctl sa del 1001` without `--dst` is refused (exit 1, naming both
  destinations); with `--direction in --dst 203.0.113.3` B's SA goes: B's
  packets are then `no_sa` while A's still reach hostB.
"""
from __future__ import annotations

import json
import secrets
import subprocess

import e2elib as L

PEER_B = "203.0.113.9"
GW1_B, GW1_C = "203.0.113.3", "203.0.113.4"
COUNT = 4


def frames_for(sa, first_seq: int, dport: int, tag: str):
    """COUNT ESP frames wan → gw1 sealed by scapy with `sa`, and their inner
    IP packets (hostA → hostB, UDP to `dport`)."""
    return L.scapy_esp_frames(sa, first_seq, COUNT, tag, 40400, lambda i: dport, 0x3000, 7)


def deliver(gw1, artifacts, frames, inners, dport: int, tag: str):
    cap = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst port {dport}", artifacts / f"b0-{tag}")
    L.send_frames("wan", "wan1", frames, artifacts / f"esp-{tag}", gap_ms=5)
    got = L.captured_ips(cap.stop(settle=0.7), normalize=True)
    assert got == [L.normalize_ttl_csum(p) for p in inners], \
        f"{tag}: hostB got {len(got)} packets, want the {len(inners)} built"


def test_two_peers_share_an_spi(start_gws, artifacts):
    src = L.CONFIG_DIR / L.GW_CONFIG["gw1"]
    text = src.read_text()
    assert text.count('addresses = ["203.0.113.2/24"]') == 1
    key_b = secrets.token_bytes(20)          # AES-128 key ‖ 4-byte salt
    text = text.replace('addresses = ["203.0.113.2/24"]',
                        f'addresses = ["203.0.113.2/24", "{GW1_B}/24", "{GW1_C}/24"]')
    text += (f'\n[[sa]]\nspi = 1001\ndirection = "inbound"\nmode = "tunnel"\nalgorithm = "aes-128-gcm"\n'
             f'key = "{key_b.hex()}"\ntunnel_src = "{PEER_B}"\ntunnel_dst = "{GW1_B}"\nreplay_window = 64\n')
    cfg = artifacts / "gw1-spi-reuse.toml"
    cfg.write_text(text)
    gws = start_gws({"gw0": L.CONFIG_DIR / L.GW_CONFIG["gw0"], "gw1": cfg})
    gw1 = gws["gw1"]

    info_a = L.load_sa("gw1", 1001)
    assert (info_a.direction, info_a.src, info_a.dst) == ("inbound", L.GW0_OUT_IP, L.GW1_OUT_IP)
    assert info_a.key != key_b
    sa_a = L.scapy_sa(info_a)
    sa_b = L.scapy_sa(L.SaInfo(1001, "inbound", "aes-128-gcm", key_b, PEER_B, GW1_B))
    sa_c = L.scapy_sa(L.SaInfo(1001, "inbound", "aes-128-gcm", info_a.key, L.GW0_OUT_IP, GW1_C))

    listed = [s for s in json.loads(gw1.ctl("sa", "list", "--json"))["sas"] if s["spi"] == 1001]
    assert sorted(s["tunnel_dst"] for s in listed) == [L.GW1_OUT_IP, GW1_B], listed

    # Sequence numbers far above what gw0 could have sent on SA 1001.
    fa, ia = frames_for(sa_a, 10_000, 7201, "peer-a")
    fb, ib = frames_for(sa_b, 10_000, 7202, "peer-b")
    deliver(gw1, artifacts, fa, ia, 7201, "peer-a")
    deliver(gw1, artifacts, fb, ib, 7202, "peer-b")
    st = L.wait_for(lambda: (s := gw1.ctl_stats()) and sorted(x["packets"] for x in s["sas"] if x["spi"] == 1001
                                                      and x["direction"] == "inbound") == [COUNT, COUNT] and s,
                  "each SA 1001 counts its own packets")
    per_dst = {x.get("dst"): x["packets"] for x in st["sas"] if x["spi"] == 1001 and x["direction"] == "inbound"}
    assert per_dst == {L.GW1_OUT_IP: COUNT, GW1_B: COUNT}, st["sas"]

    # The same SPI towards a third address of gw1: no SA there.
    fc, _ = frames_for(sa_c, 10_000, 7203, "third")
    cap = L.Capture("hostB", "b0", "udp and dst port 7203", artifacts / "b0-third")
    L.send_frames("wan", "wan1", fc, artifacts / "esp-third", gap_ms=5)
    st = L.wait_for(lambda: (s := gw1.ctl_stats())["drops"]["no_sa"] >= COUNT and s, "no_sa for the third address")
    assert not cap.stop(settle=0.5), "hostB got packets sent to an address without an SA"
    assert st["drops"]["no_sa"] == COUNT, st["drops"]
    others = {k: v for k, v in st["drops"].items() if v and k != "no_sa"}
    assert not others, f"gw1 dropped for other reasons too: {others}"

    # Deleting needs the destination; with it, only B's SA goes.
    r = subprocess.run([str(gw1.binary), "ctl", "--socket", gw1.socket, "sa", "del", "1001", "--direction", "in"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert f"tunnel_dst {L.GW1_OUT_IP}, {GW1_B}" in r.stderr + r.stdout and "--dst" in r.stderr + r.stdout, r.stderr
    out = gw1.ctl("sa", "del", "1001", "--direction", "in", "--dst", GW1_B)
    assert GW1_B in out, out
    L.wait_for(lambda: [s["tunnel_dst"] for s in json.loads(gw1.ctl("sa", "list", "--json"))["sas"]
                      if s["spi"] == 1001 and s["direction"] == "inbound"] == [L.GW1_OUT_IP],
             "B's SA gone from `sa list`")
    fb2, _ = frames_for(sa_b, 20_000, 7202, "peer-b-deleted")
    cap = L.Capture("hostB", "b0", "udp and dst port 7202", artifacts / "b0-b-deleted")
    L.send_frames("wan", "wan1", fb2, artifacts / "esp-b-deleted", gap_ms=5)
    L.wait_for(lambda: gw1.ctl_stats()["drops"]["no_sa"] >= 2 * COUNT, "B's packets are no_sa after its SA went")
    assert not cap.stop(settle=0.5), "hostB got packets of a deleted SA"
    fa2, ia2 = frames_for(sa_a, 20_000, 7201, "peer-a-after")
    deliver(gw1, artifacts, fa2, ia2, 7201, "peer-a-after")
