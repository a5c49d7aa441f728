"""Decrypted traffic routed back out of the unprotected port (RFC 4301 §5.1;
README "Decrypted traffic leaving by an unprotected port"): gw1 runs a copy
of ep1.toml whose SA 1001 also carries 192.0.2.0/24 → 10.77.0.0/16 (a spoke
behind another peer, 203.0.113.9), routed out of the outside port. scapy's
SecurityAssociation seals ESP on SPI 1001 (ep1's key) into gw1 on the wan:

- without an outbound entry for that traffic, nothing of it appears on the
  wan (neither the plaintext nor ESP to the spoke's peer) and gw1 counts
  `no_policy` for every packet (helper-100: it left in the clear);
- with `protect 1004` (an outbound SA to the spoke's peer, a fresh random
  key), each packet leaves on the wan as ESP SPI 1004 to 203.0.113.9 with
  sequence numbers from 1, which scapy decrypts to the inner packet sent,
  its TTL one less.
"""
from __future__ import annotations

import secrets

import e2elib as L

SPOKE_PEER, SPOKE_HOST = "203.0.113.9", "10.77.1.5"
SPOKE_MAC = "02:00:00:00:09:09"
COUNT = 4


def gw1_config(artifacts, name: str, spoke_key: bytes, outbound_entry: bool):
    text = (L.CONFIG_DIR / L.GW_CONFIG["gw1"]).read_text()
    text += ('\n[[policy]]\ndirection = "inbound"\nsrc = "192.0.2.0/24"\ndst = "10.77.0.0/16"\npriority = 30\n'
             'action = "protect 1001"\n'
             f'[[sa]]\nspi = 1004\ndirection = "outbound"\nalgorithm = "aes-128-gcm"\nkey = "{spoke_key.hex()}"\n'
             f'tunnel_src = "{L.GW1_OUT_IP}"\ntunnel_dst = "{SPOKE_PEER}"\n'
             f'[[route]]\nprefix = "10.77.0.0/16"\nport = "outside"\nvia = "{SPOKE_PEER}"\n'
             f'[[neighbour]]\nip = "{SPOKE_PEER}"\nmac = "{SPOKE_MAC}"\n')
    if outbound_entry:
        text += ('[[policy]]\ndirection = "outbound"\nsrc = "192.0.2.0/24"\ndst = "10.77.0.0/16"\npriority = 30\n'
                 'action = "protect 1004"\n')
    cfg = artifacts / name
    cfg.write_text(text)
    return cfg


def to_spoke(tag: str):
    """COUNT ESP frames gw0 → gw1 on SPI 1001 sealed by scapy (sequence
    numbers far above what gw0 sends), inner UDP hostA → the spoke host;
    with the inner packets as bytes."""
    from scapy.compat import raw
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    sa = L.scapy_sa(L.load_sa("gw1", 1001))
    inners = [raw(IP(src=L.A_IP, dst=SPOKE_HOST, ttl=64, id=0x4100 + i) / UDP(sport=40500, dport=7300) /
                  Raw(f"{tag}-{i}".encode())) for i in range(COUNT)]
    frames = [Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / sa.encrypt(IP(p), seq_num=50_000 + i)
              for i, p in enumerate(inners)]
    return frames, inners


def test_decrypted_traffic_without_an_outbound_entry_never_reaches_the_wan(start_gws, artifacts):
    cfg = gw1_config(artifacts, "gw1-hairpin-none.toml", secrets.token_bytes(20), outbound_entry=False)
    gw1 = start_gws({"gw0": L.CONFIG_DIR / L.GW_CONFIG["gw0"], "gw1": cfg})["gw1"]
    frames, _ = to_spoke("none")
    cap = L.Capture("wan", "br0", f"host {SPOKE_HOST} or host {SPOKE_PEER}", artifacts / "wan-none")
    L.send_frames("wan", "wan1", frames, artifacts / "esp-none", gap_ms=5)
    st = L.wait_for(lambda: (s := gw1.ctl_stats())["drops"]["no_policy"] >= COUNT and s, "no_policy for each packet")
    leaked = cap.stop(settle=0.5)
    assert not leaked, f"gw1 sent {len(leaked)} frames towards the spoke: {[p.summary() for p in leaked]}"
    assert st["drops"]["no_policy"] == COUNT, st["drops"]
    sa = next(x for x in st["sas"] if x["spi"] == 1001 and x["direction"] == "inbound")
    assert (sa["packets"], sa["errors"]) == (0, COUNT), sa


def test_a_hub_seals_decrypted_traffic_again_and_scapy_opens_it(start_gws, artifacts):
    from scapy.layers.inet import IP
    from scapy.layers.ipsec import ESP, SecurityAssociation
    key = secrets.token_bytes(20)
    cfg = gw1_config(artifacts, "gw1-hairpin-hub.toml", key, outbound_entry=True)
    gw1 = start_gws({"gw0": L.CONFIG_DIR / L.GW_CONFIG["gw0"], "gw1": cfg})["gw1"]
    frames, inners = to_spoke("hub")
    cap = L.Capture("wan", "br0", f"host {SPOKE_HOST} or host {SPOKE_PEER}", artifacts / "wan-hub")
    L.send_frames("wan", "wan1", frames, artifacts / "esp-hub", gap_ms=5)
    L.wait_for(lambda: any(x["spi"] == 1004 and x["packets"] >= COUNT for x in gw1.ctl_stats()["sas"]),
               "SA 1004 sealed every packet")
    got = cap.stop(settle=0.5)
    assert len(got) == COUNT, [p.summary() for p in got]
    spoke = SecurityAssociation(ESP, spi=1004, crypt_algo="AES-GCM", crypt_key=key, auth_algo="NULL",
                                tunnel_header=IP(src=L.GW1_OUT_IP, dst=SPOKE_PEER))
    for i, (f, sent) in enumerate(zip(got, inners)):
        ip = f[IP]
        assert (ip.src, ip.dst, ip.proto) == (L.GW1_OUT_IP, SPOKE_PEER, 50), f.summary()
        assert f.dst == SPOKE_MAC
        assert ip[ESP].spi == 1004 and ip[ESP].seq == i + 1, (ip[ESP].spi, ip[ESP].seq)
        inner = bytes(spoke.decrypt(ip))
        assert L.normalize_ttl_csum(inner) == L.normalize_ttl_csum(sent), f"packet {i}"
        assert inner[8] == 63, f"packet {i}: TTL {inner[8]}, want 63 (forwarded once)"
    st = gw1.ctl_stats()
    assert {k: v for k, v in st["drops"].items() if v} == {}, st["drops"]
