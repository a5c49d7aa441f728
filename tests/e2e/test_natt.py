"""NAT traversal (RFC 3948, RFC-RULES 22–23) in the testbed: both gateways run
a NAT-T variant of configs/ep0.toml / ep1.toml (SA 1001 and SA 1002 with
`udp_encap = true`, ports 4500/4500), written to the test's artifact dir.

- gw0 encrypts → scapy decrypts: ESP in UDP on the wan (protocol 17, ports
  4500 → 4500, UDP checksum 0, UDP length right, ESP right after it) that
  scapy's SecurityAssociation(..., nat_t_header=UDP(4500, 4500)) decrypts to
  what hostA sent (TTL − 1 aside); the same for gw1 → gw0 on SPI 1002;
- scapy encrypts → gw1 decrypts: ESP in UDP injected on the wan towards gw1
  comes out on hostB's b0, whatever the UDP checksum (0, right or wrong);
- NAT keepalives (one 0xFF byte) and IKE (non-ESP marker) are counted
  (`natt_keepalive`, `natt_ike`) and dropped; plain ESP for a UDP SA is
  `encap_mismatch`;
- ping goes through both ways."""
import struct

import pytest

import e2elib as L

NATT = 4500
DATAGRAMS = [0, 1, 3, 100, 1400]


def natt_config(gw: str, dst_dir, src=None) -> "L.Path":
    """The gateway's sample config (or the config file `src`) with
    udp_encap = true on SAs 1001 and 1002."""
    src = L.Path(src) if src is not None else L.CONFIG_DIR / L.GW_CONFIG[gw]
    out = []
    for line in src.read_text().splitlines():
        out.append(line)
        if line.strip().replace(" ", "") in ("spi=1001", "spi=1002"):
            out.append("udp_encap = true")
    path = dst_dir / f"{src.stem}-natt.toml"
    path.write_text("\n".join(out) + "\n")
    import tomllib
    sas = {int(s["spi"]): s for s in tomllib.loads(path.read_text())["sa"]}
    for spi in (1001, 1002):
        assert sas[spi].get("udp_encap") is True, f"{path}: SA {spi} lacks udp_encap = true"
    return path


@pytest.fixture
def natt_gws(start_gws, artifacts):
    return start_gws({gw: natt_config(gw, artifacts) for gw in ("gw0", "gw1")})


def scapy_natt_sa(info, transport=False):
    """scapy's SA for `info` (AES-GCM) in UDP 4500 → 4500; tunnel mode, or
    transport mode (no tunnel_header) with `transport`."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.ipsec import ESP, SecurityAssociation
    tunnel = {} if transport else {"tunnel_header": IP(src=info.src, dst=info.dst)}
    return SecurityAssociation(ESP, spi=info.spi, crypt_algo="AES-GCM", crypt_key=info.key, auth_algo="NULL",
                               nat_t_header=UDP(sport=NATT, dport=NATT), **tunnel)


def ip_bytes(frame_bytes: bytes) -> bytes:
    ip = frame_bytes[14:]
    return ip[:struct.unpack("!H", ip[2:4])[0]]


def check_natt_frames(frames, sent, info, what):
    """Each captured frame is ESP in UDP for `info` and decrypts with scapy
    to the matching packet of `sent`."""
    from scapy.layers.inet import IP
    from scapy.compat import raw
    sa = scapy_natt_sa(info)
    assert len(frames) == len(sent), f"{what}: {len(frames)} ESP-in-UDP frames on the wan for {len(sent)} datagrams"
    for n, (frame, inner_sent) in enumerate(zip(frames, sent), start=1):
        outer = ip_bytes(raw(frame))
        assert outer[0] == 0x45, f"{what} #{n}: version/IHL {outer[0]:#x}"
        assert outer[9] == 17, f"{what} #{n}: outer protocol {outer[9]}, want 17 (UDP, RFC 3948 §2.1)"
        assert L.ip_checksum_ok(outer[:20]), f"{what} #{n}: bad outer header checksum"
        sport, dport, ulen, ucsum = struct.unpack("!HHHH", outer[20:28])
        assert (sport, dport) == (NATT, NATT), f"{what} #{n}: UDP ports {sport} -> {dport}"
        assert ulen == len(outer) - 20, f"{what} #{n}: UDP length {ulen}, IP payload {len(outer) - 20}"
        assert ucsum == 0, f"{what} #{n}: UDP checksum {ucsum:#06x}, want 0 (RFC 3948 §3.1.2)"
        spi, seq = struct.unpack("!II", outer[28:36])
        assert spi == info.spi, f"{what} #{n}: SPI {spi} right after the UDP header"
        assert seq == n, f"{what} #{n}: sequence number {seq}"
        got = raw(sa.decrypt(IP(outer)))
        assert got[8] == inner_sent[8] - 1, f"{what} #{n}: inner TTL {got[8]}, sent {inner_sent[8]}"
        assert L.ip_checksum_ok(got[:20]), f"{what} #{n}: bad inner header checksum"
        assert L.normalize_ttl_csum(got) == L.normalize_ttl_csum(inner_sent), \
            f"{what} #{n}: inner packet differs\nsent {inner_sent.hex()}\ngot  {got.hex()}"


@pytest.mark.parametrize("direction", ["gw0->gw1", "gw1->gw0"])
def test_gateway_esp_in_udp_decrypts_with_scapy(natt_gws, artifacts, direction):
    from scapy.compat import raw
    if direction == "gw0->gw1":
        gw, spi, host, iface, src, dst, tunnel_src = "gw0", 1001, "hostA", "a0", L.A_IP, L.B_IP, L.GW0_OUT_IP
    else:
        gw, spi, host, iface, src, dst, tunnel_src = "gw1", 1002, "hostB", "b0", L.B_IP, L.A_IP, L.GW1_OUT_IP
    info = L.load_sa(gw, spi)
    assert info.direction == "outbound" and info.src == tunnel_src, info
    cap_h = L.Capture(host, iface, f"udp and src host {src} and dst host {dst}", artifacts / iface)
    cap_w = L.Capture("wan", "br0", f"udp and src host {tunnel_src} and dst port {NATT}", artifacts / "wan")
    L.send_udp(host, src, dst, [
        {"sport": 40000, "dport": 41000 + i, "payload": bytes((i + j) & 0xFF for j in range(size))}
        for i, size in enumerate(DATAGRAMS)])
    sent = [ip_bytes(raw(f)) for f in cap_h.stop(settle=0.5)]
    frames = cap_w.stop()
    assert len(sent) == len(DATAGRAMS), f"captured {len(sent)} datagrams on {iface}, sent {len(DATAGRAMS)}"
    st = natt_gws[gw].stats()
    assert frames, f"no ESP in UDP from {gw} on the wan; {gw} drops: {st.get('drops')}"
    check_natt_frames(frames, sent, info, direction)


def test_scapy_esp_in_udp_decrypts_at_gw1_with_any_checksum(natt_gws, artifacts):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    from scapy.compat import raw

    info = L.load_sa("gw1", 1001)
    assert info.direction == "inbound", info.direction
    sa = scapy_natt_sa(info)
    # (UDP payload size, UDP checksum to put on the wire: None = scapy's 0)
    cases = [(0, None), (1, None), (100, 0xBEEF), (1400, None), (50, "right")]
    inners, frames = {}, []
    for i, (size, ck) in enumerate(cases):
        dport = 42000 + i
        inner = raw(IP(src=L.A_IP, dst=L.B_IP, ttl=64, id=0x2000 + i) / UDP(sport=40000, dport=dport) /
                    Raw(bytes((i * 5 + j) & 0xFF for j in range(size))))
        inners[dport] = inner
        outer = sa.encrypt(IP(inner), seq_num=i + 1)
        b = bytearray(raw(outer))
        assert b[9] == 17 and struct.unpack("!HH", b[20:24]) == (NATT, NATT), "scapy did not build ESP in UDP"
        if ck == "right":
            u = IP(bytes(b))
            u[UDP].chksum = None
            b = bytearray(raw(IP(raw(u))))
            assert struct.unpack("!H", b[26:28])[0] != 0, "scapy computed no UDP checksum"
        elif ck is not None:
            b[26:28] = struct.pack("!H", ck)
        frames.append(Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / IP(bytes(b)))

    cap = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "b0")
    L.send_frames("wan", "wan1", frames, artifacts / "injected", gap_ms=5)
    got = cap.stop(settle=1.0)

    by_port = {}
    for f in got:
        ip = ip_bytes(raw(f))
        by_port.setdefault(struct.unpack("!H", ip[22:24])[0], []).append(ip)
    st = natt_gws["gw1"].stats()
    for (dport, inner), (size, ck) in zip(inners.items(), cases):
        arrived = by_port.get(dport, [])
        assert len(arrived) == 1, (f"UDP payload {size} B, UDP checksum {ck}: arrived {len(arrived)} times on b0, "
                                   f"want 1; gw1 drops: {st.get('drops')}")
        out = arrived[0]
        assert out[8] == inner[8] - 1, f"TTL {out[8]}, sent {inner[8]}"
        assert L.normalize_ttl_csum(out) == L.normalize_ttl_csum(inner), \
            f"payload {size} B differs\nbuilt {inner.hex()}\ngot   {out.hex()}"


def test_keepalive_ike_and_plain_esp_are_counted_and_dropped(natt_gws, artifacts):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    def to_gw1(payload, sport=NATT):
        return (Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / IP(src=L.GW0_OUT_IP, dst=L.GW1_OUT_IP) /
                UDP(sport=sport, dport=NATT, chksum=0) / Raw(payload))

    keepalives = [to_gw1(b"\xff"), to_gw1(b"\xff", sport=61000), to_gw1(b"\xff")]
    ike = [to_gw1(b"\x00\x00\x00\x00" + bytes(28))]
    # Plain ESP (protocol 50) for SA 1001, which gw1 now takes only in UDP.
    plain = L.scapy_sa(L.load_sa("gw1", 1001)).encrypt(IP(src=L.A_IP, dst=L.B_IP) / UDP(sport=1, dport=2), seq_num=7)
    assert plain.proto == 50
    frames = keepalives + ike + [Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / plain]
    cap = L.Capture("hostB", "b0", f"src host {L.A_IP} or src host {L.GW0_OUT_IP}", artifacts / "b0")
    L.send_frames("wan", "wan1", frames, artifacts / "injected", gap_ms=5)
    leaked = cap.stop(settle=1.0)
    assert not leaked, f"{len(leaked)} frames reached hostB: {[f.summary() for f in leaked]}"

    gw1 = natt_gws["gw1"]
    want = {"natt_keepalive": 3, "natt_ike": 1, "encap_mismatch": 1}
    st = gw1.wait_stats(lambda s: all(s.get("drops", {}).get(k, 0) >= v for k, v in want.items()), timeout=5)
    drops = st.get("drops", {})
    for k, v in want.items():
        assert drops.get(k, 0) == v, f"gw1 drops[{k}] = {drops.get(k)}, want {v}; all drops: {drops}"

    # gw0 counts keepalives the same way.
    ka0 = (Ether(dst=L.GW0_OUT_MAC, src=L.GW1_OUT_MAC) / IP(src=L.GW1_OUT_IP, dst=L.GW0_OUT_IP) /
           UDP(sport=NATT, dport=NATT, chksum=0) / Raw(b"\xff"))
    L.send_frames("wan", "wan0", [ka0, ka0], artifacts / "injected-gw0", gap_ms=5)
    st0 = natt_gws["gw0"].wait_stats(lambda s: s.get("drops", {}).get("natt_keepalive", 0) >= 2, timeout=5)
    assert st0.get("drops", {}).get("natt_keepalive", 0) == 2, f"gw0 drops: {st0.get('drops')}"


def test_ping_through_esp_in_udp(natt_gws, artifacts):
    cap_w = L.Capture("wan", "br0", "ip proto 50", artifacts / "wan-esp")
    for src, dst in (("hostA", L.B_IP), ("hostB", L.A_IP)):
        sent, received, out = L.ping(src, dst, count=3)
        assert (sent, received) == (3, 3), f"ping {src} -> {dst} over ESP in UDP:\n{out}"
    plain_esp = cap_w.stop()
    assert not plain_esp, f"{len(plain_esp)} plain ESP frames on the wan with udp_encap on both SAs"
