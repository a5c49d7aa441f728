"""Interop, scapy encrypts → secgw decrypts: ESP built by scapy's
SecurityAssociation for SPI 1001 (AES-128-GCM) and SPI 1003 (AES-256-GCM) with
the keys of configs/ep1.toml, injected on the wan towards gw1, comes out on
hostB's b0 as exactly the inner packet that was built, TTL−1 and checksum aside."""
import itertools
import struct

import pytest

import e2elib as L

SIZES = [0, 1, 100, 1400]
# gw1's replay window only moves forward: each test takes fresh, high numbers.
SEQ = itertools.count(1_000_000, 1000)


def build_inner(i, size, dport):
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw
    from scapy.compat import raw
    return raw(IP(src=L.A_IP, dst=L.B_IP, ttl=64, id=0x1000 + i, tos=0) /
               UDP(sport=40000, dport=dport) / Raw(bytes((i * 7 + j) & 0xFF for j in range(size))))


def esp_frame(sa, inner: bytes, seq: int):
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether
    return Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / sa.encrypt(IP(inner), seq_num=seq)


@pytest.mark.parametrize("spi", [1001, 1003])
def test_scapy_esp_decrypts_at_gw1(gws, artifacts, spi):
    from scapy.compat import raw

    info = L.load_sa("gw1", spi)
    assert info.direction == "inbound", info.direction
    assert len(info.key) == (20 if spi == 1001 else 36), f"SA {spi} key length {len(info.key)}"
    sa = L.scapy_sa(info)
    base = next(SEQ)
    inners = {42000 + i: build_inner(i, size, 42000 + i) for i, size in enumerate(SIZES)}
    frames = [esp_frame(sa, inner, base + i) for i, inner in enumerate(inners.values())]

    cap = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "b0")
    L.send_frames("wan", "wan1", frames, artifacts / "injected", gap_ms=5)
    got = cap.stop(settle=1.0)

    by_port = {}
    for f in got:
        ip = raw(f)[14:]
        ip = ip[:struct.unpack("!H", ip[2:4])[0]]
        by_port.setdefault(struct.unpack("!H", ip[22:24])[0], []).append(ip)
    st = gws["gw1"].stats()
    for dport, inner in inners.items():
        arrived = by_port.get(dport, [])
        assert len(arrived) == 1, (f"SPI {spi}, UDP payload {len(inner) - 28} B: arrived {len(arrived)} times "
                                   f"on b0, want 1; gw1 drops: {st.get('drops')}")
        out = arrived[0]
        assert out[8] == inner[8] - 1, f"TTL {out[8]}, sent {inner[8]}"
        assert L.ip_checksum_ok(out[:20]), "bad IPv4 header checksum after decapsulation"
        assert L.normalize_ttl_csum(out) == L.normalize_ttl_csum(inner), \
            f"payload {len(inner) - 28} B differs\nbuilt {inner.hex()}\ngot   {out.hex()}"
