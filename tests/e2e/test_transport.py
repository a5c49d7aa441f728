"""ESP transport mode (RFC 4303 §3.1.1) in the testbed: both gateways run a
transport variant of configs/ep0.toml / ep1.toml (SA 1001 and SA 1002 with
`mode = "transport"` and no tunnel_src/tunnel_dst), written to the test's
artifact dir. secgw applies transport mode to forwarded packets as DPDK
ipsec-secgw does: the host's IPv4 header stays, ESP is inserted after it.

- gw0 encrypts → scapy decrypts: ESP on the wan keeps hostA → hostB as
  addresses, protocol 50, valid header checksum, SPI 1001 right after the
  IP header, sequence 1, 2, 3, …; scapy's transport-mode
  SecurityAssociation (no tunnel_header) decrypts it to what hostA sent
  (TTL − 1 aside);
- scapy encrypts → gw1 decrypts: transport ESP hostA → hostB injected on the
  wan towards gw1's MAC comes out on hostB's b0 as the original datagram;
- ping goes through both ways, and no tunnel-mode ESP (gw addresses) is on
  the wan."""
import struct

import pytest

import e2elib as L

DATAGRAMS = [0, 1, 3, 100, 1400]


def transport_config(gw: str, dst_dir) -> "L.Path":
    """The gateway's sample config with SAs 1001 and 1002 in transport mode."""
    import tomllib
    src = (L.CONFIG_DIR / L.GW_CONFIG[gw]).read_text()
    out, in_target = [], False
    for line in src.splitlines():
        s = line.strip().replace(" ", "")
        if s == "[[sa]]" or s.startswith("[["):
            in_target = False
        if s in ("spi=1001", "spi=1002"):
            in_target = True
        if in_target and s.startswith("mode="):
            line = 'mode = "transport"'
        if in_target and (s.startswith("tunnel_src=") or s.startswith("tunnel_dst=")):
            continue
        out.append(line)
    path = dst_dir / f"{gw}-transport.toml"
    path.write_text("\n".join(out) + "\n")
    sas = {int(s["spi"]): s for s in tomllib.loads(path.read_text())["sa"]}
    for spi in (1001, 1002):
        assert sas[spi].get("mode") == "transport" and "tunnel_src" not in sas[spi], \
            f"{path}: SA {spi} not switched to transport mode"
    return path


@pytest.fixture
def transport_gws(start_gws, artifacts):
    return start_gws({gw: transport_config(gw, artifacts) for gw in ("gw0", "gw1")})


def scapy_transport_sa(info):
    from scapy.layers.ipsec import ESP, SecurityAssociation
    # No tunnel_header: scapy's transport mode.
    return SecurityAssociation(ESP, spi=info.spi, crypt_algo="AES-GCM", crypt_key=info.key, auth_algo="NULL")


def ip_bytes(frame_bytes: bytes) -> bytes:
    ip = frame_bytes[14:]
    return ip[:struct.unpack("!H", ip[2:4])[0]]


@pytest.mark.parametrize("direction", ["gw0->gw1", "gw1->gw0"])
def test_gateway_transport_esp_decrypts_with_scapy(transport_gws, artifacts, direction):
    from scapy.compat import raw
    from scapy.layers.inet import IP
    if direction == "gw0->gw1":
        gw, spi, host, iface, src, dst = "gw0", 1001, "hostA", "a0", L.A_IP, L.B_IP
    else:
        gw, spi, host, iface, src, dst = "gw1", 1002, "hostB", "b0", L.B_IP, L.A_IP
    info = L.load_sa(gw, spi)
    assert info.direction == "outbound", info
    sa = scapy_transport_sa(info)
    cap_h = L.Capture(host, iface, f"udp and src host {src} and dst host {dst}", artifacts / iface)
    cap_w = L.Capture("wan", "br0", f"ip proto 50 and src host {src} and dst host {dst}", artifacts / "wan")
    L.send_udp(host, src, dst, [
        {"sport": 40000, "dport": 41000 + i, "payload": bytes((i + j) & 0xFF for j in range(size))}
        for i, size in enumerate(DATAGRAMS)])
    sent = [ip_bytes(raw(f)) for f in cap_h.stop(settle=0.5)]
    frames = cap_w.stop()
    assert len(sent) == len(DATAGRAMS), f"captured {len(sent)} datagrams on {iface}, sent {len(DATAGRAMS)}"
    st = transport_gws[gw].stats()
    assert len(frames) == len(sent), f"{direction}: {len(frames)} transport ESP frames on the wan; drops {st.get('drops')}"
    for n, (frame, inner_sent) in enumerate(zip(frames, sent), start=1):
        esp = ip_bytes(raw(frame))
        hl = (esp[0] & 0x0F) * 4
        assert esp[9] == 50, f"{direction} #{n}: protocol {esp[9]}, want 50"
        assert L.ip_checksum_ok(esp[:hl]), f"{direction} #{n}: bad header checksum"
        assert esp[12:20] == inner_sent[12:20], f"{direction} #{n}: addresses changed (transport mode keeps them)"
        assert esp[8] == inner_sent[8] - 1, f"{direction} #{n}: TTL {esp[8]}, sent {inner_sent[8]}"
        assert esp[1] == inner_sent[1] and esp[4:6] == inner_sent[4:6], f"{direction} #{n}: TOS/ID changed"
        got_spi, seq = struct.unpack("!II", esp[hl:hl + 8])
        assert (got_spi, seq) == (spi, n), f"{direction} #{n}: SPI {got_spi} seq {seq}"
        got = raw(sa.decrypt(IP(esp)))
        assert got[9] == inner_sent[9], f"{direction} #{n}: next header {got[9]}, want {inner_sent[9]}"
        assert L.normalize_ttl_csum(got) == L.normalize_ttl_csum(inner_sent), \
            f"{direction} #{n}: packet differs\nsent {inner_sent.hex()}\ngot  {got.hex()}"


def test_scapy_transport_esp_decrypts_at_gw1(transport_gws, artifacts):
    from scapy.compat import raw
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    info = L.load_sa("gw1", 1001)
    assert info.direction == "inbound", info.direction
    sa = scapy_transport_sa(info)
    inners, frames = {}, []
    for i, size in enumerate(DATAGRAMS):
        dport = 42000 + i
        inner = raw(IP(src=L.A_IP, dst=L.B_IP, ttl=64, id=0x3000 + i) / UDP(sport=40000, dport=dport) /
                    Raw(bytes((i * 3 + j) & 0xFF for j in range(size))))
        inners[dport] = inner
        esp = sa.encrypt(IP(inner), seq_num=i + 1)
        b = raw(esp)
        assert b[9] == 50 and b[12:20] == inner[12:20], "scapy did not build transport-mode ESP"
        frames.append(Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / IP(b))

    cap = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "b0")
    L.send_frames("wan", "wan1", frames, artifacts / "injected", gap_ms=5)
    got = cap.stop(settle=1.0)
    by_port = {}
    for f in got:
        ip = ip_bytes(raw(f))
        by_port.setdefault(struct.unpack("!H", ip[22:24])[0], []).append(ip)
    st = transport_gws["gw1"].stats()
    for (dport, inner), size in zip(inners.items(), DATAGRAMS):
        arrived = by_port.get(dport, [])
        assert len(arrived) == 1, f"UDP payload {size} B arrived {len(arrived)} times on b0; gw1 drops: {st.get('drops')}"
        out = arrived[0]
        assert out[8] == inner[8] - 1, f"TTL {out[8]}, sent {inner[8]}"
        assert L.ip_checksum_ok(out[:20])
        assert L.normalize_ttl_csum(out) == L.normalize_ttl_csum(inner), \
            f"payload {size} B differs\nbuilt {inner.hex()}\ngot   {out.hex()}"


def test_ping_through_transport_mode(transport_gws, artifacts):
    cap_w = L.Capture("wan", "br0", f"ip proto 50 and src host {L.GW0_OUT_IP}", artifacts / "wan-tunnel")
    for src, dst in (("hostA", L.B_IP), ("hostB", L.A_IP)):
        sent, received, out = L.ping(src, dst, count=3)
        assert (sent, received) == (3, 3), f"ping {src} -> {dst} in transport mode:\n{out}"
    tunnel = cap_w.stop()
    assert not tunnel, f"{len(tunnel)} ESP frames with gw0's address as source: tunnel mode still in use"
