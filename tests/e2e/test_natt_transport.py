"""Transport mode over UDP encapsulation (RFC 3948 §3.2-3.3) in the testbed,
and the inner TCP/UDP checksum fix-up of §3.1.2 through a NAT.

Both gateways run configs/ep0.toml / ep1.toml with SAs 1001 and 1002 in
transport mode (no tunnel_src/tunnel_dst) and `udp_encap = true`, written to
the test's artifact dir.

- gw0 encrypts → scapy decrypts: what crosses the wan is hostA → hostB with
  protocol 17, UDP 4500 → 4500 with checksum 0 and the right length, SPI 1001
  right after it; scapy's transport-mode SecurityAssociation with
  nat_t_header=UDP(4500, 4500) decrypts it to what hostA sent (TTL − 1).
- Through a NAT: scapy builds hostA's packet as it was behind a NAT (source
  10.1.2.3, so the inner UDP and TCP checksums cover 10.1.2.3), encrypts it
  as transport ESP in UDP, then rewrites the IP source to 192.0.2.10 as the
  NAT would (header checksum fixed, the ESP untouched) and injects it towards
  gw1. hostB's kernel verifies the checksums: the UDP datagram must reach a
  socket bound on hostB, and the TCP SYN to a listening socket must be
  answered with a SYN-ACK. Control: the same UDP datagram and SYN sent in the
  clear straight onto hostB's link with the stale checksum (from gw1's
  namespace on gw1-in) must NOT reach the socket nor get a SYN-ACK, so the
  check can fail.
"""
from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap

import pytest

import e2elib as L
from test_natt import NATT, ip_bytes, natt_config, scapy_natt_sa
from test_transport import transport_config

PRIVATE_A = "10.1.2.3"     # hostA's address behind the NAT
UDP_PORT = 45100           # hostB's UDP socket
TCP_PORT = 45200           # hostB's listening TCP socket


def natt_transport_config(gw: str, dst_dir) -> "L.Path":
    """The gateway's sample config with SAs 1001 and 1002 in transport mode with udp_encap."""
    return natt_config(gw, dst_dir, transport_config(gw, dst_dir))


@pytest.fixture
def gws(start_gws, artifacts):
    return start_gws({gw: natt_transport_config(gw, artifacts) for gw in ("gw0", "gw1")})


def scapy_sa(info):
    return scapy_natt_sa(info, transport=True)


def test_gateway_transport_esp_in_udp_decrypts_with_scapy(gws, artifacts):
    from scapy.compat import raw
    from scapy.layers.inet import IP
    info = L.load_sa("gw0", 1001)
    sa = scapy_sa(info)
    sizes = [0, 1, 63, 64, 1000, 1400]
    cap_a = L.Capture("hostA", "a0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "a0")
    cap_w = L.Capture("wan", "br0", f"udp and src host {L.A_IP} and dst host {L.B_IP} and dst port {NATT}",
                      artifacts / "wan")
    L.send_udp("hostA", L.A_IP, L.B_IP, [
        {"sport": 40000, "dport": 41000 + i, "payload": bytes((i + j) & 0xFF for j in range(n))}
        for i, n in enumerate(sizes)])
    sent = [ip_bytes(raw(f)) for f in cap_a.stop(settle=0.5)]
    frames = [ip_bytes(raw(f)) for f in cap_w.stop()]
    assert len(sent) == len(sizes), f"captured {len(sent)} datagrams on a0"
    assert len(frames) == len(sent), f"{len(frames)} ESP-in-UDP frames on the wan; gw0 drops {gws['gw0'].stats()['drops']}"
    for n, (outer, inner) in enumerate(zip(frames, sent), start=1):
        assert outer[9] == 17 and L.ip_checksum_ok(outer[:20]), f"#{n}: protocol {outer[9]}"
        assert outer[12:20] == inner[12:20], f"#{n}: addresses changed (transport mode keeps them)"
        sport, dport, ulen, uck = struct.unpack("!HHHH", outer[20:28])
        assert (sport, dport, ulen, uck) == (NATT, NATT, len(outer) - 20, 0), f"#{n}: UDP {sport, dport, ulen, uck}"
        assert struct.unpack("!II", outer[28:36]) == (1001, n), f"#{n}: SPI/seq {struct.unpack('!II', outer[28:36])}"
        got = raw(sa.decrypt(IP(outer)))
        assert got[9] == inner[9] and got[8] == inner[8] - 1, f"#{n}: protocol {got[9]} TTL {got[8]}"
        assert L.normalize_ttl_csum(got) == L.normalize_ttl_csum(inner), \
            f"#{n}: differs\nsent {inner.hex()}\ngot  {got.hex()}"


_LISTENER = textwrap.dedent("""
    import json, select, socket, sys, time
    b, up, tp, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((b, up))
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((b, tp))
    t.listen(8)
    print("ready", flush=True)
    got, end = [], time.monotonic() + wait
    # Runs the whole `wait` (the TCP socket must still listen when the SYN comes).
    while time.monotonic() < end:
        if select.select([u], [], [], 0.1)[0]:
            data, src = u.recvfrom(65535)
            got.append({"src": src[0], "sport": src[1], "payload": data.hex()})
    print(json.dumps(got), flush=True)
""")


class Listener:
    """A UDP socket and a listening TCP socket on hostB, in hostB's namespace;
    result() gives the datagrams the UDP socket received."""

    def __init__(self, wait: float):
        self.p = subprocess.Popen(L.ns_cmd("hostB", sys.executable, "-c", _LISTENER, L.B_IP, UDP_PORT, TCP_PORT, wait), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line.strip() == "ready", f"listener on hostB did not start: {line!r} {self.p.stderr.read()}"

    def result(self) -> list[dict]:
        out, err = self.p.communicate(timeout=30)
        assert self.p.returncode == 0, f"listener failed: {err}"
        return json.loads(out.strip().splitlines()[-1])


def natted(pkt_bytes: bytes) -> bytes:
    """`pkt_bytes` (an IPv4 packet from PRIVATE_A) as a NAT forwards it: source
    192.0.2.10, header checksum recomputed, everything after the header as is."""
    b = bytearray(pkt_bytes)
    assert bytes(b[12:16]) == bytes(map(int, PRIVATE_A.split(".")))
    b[12:16] = bytes(map(int, L.A_IP.split(".")))
    b[10:12] = b"\0\0"
    s = sum(struct.unpack("!10H", bytes(b[:20])))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    b[10:12] = struct.pack("!H", ~s & 0xFFFF)
    return bytes(b)


def run_nat_case(artifacts, name: str, frames_from: tuple[str, str], build) -> tuple[list[dict], list]:
    """Starts the hostB listener and a b0 capture of SYN-ACKs, sends build()'s
    frames from (namespace, interface), returns (datagrams received, SYN-ACKs)."""
    from scapy.compat import raw
    lst = Listener(wait=2.0)
    cap = L.Capture("hostB", "b0", f"tcp and src host {L.B_IP} and src port {TCP_PORT} and "
                    "tcp[tcpflags] & (tcp-syn|tcp-ack) == (tcp-syn|tcp-ack)", artifacts / f"b0-{name}")
    ns, ifc = frames_from
    L.send_frames(ns, ifc, build(), artifacts / f"sent-{name}", gap_ms=20)
    got = lst.result()
    synacks = [raw(f) for f in cap.stop(settle=0.5)]
    return got, synacks


def test_inner_checksums_fixed_after_a_nat(gws, artifacts):
    from scapy.compat import raw
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    payload = b"sent from behind a NAT"
    udp_in = raw(IP(src=PRIVATE_A, dst=L.B_IP, ttl=64, id=0x5151) / UDP(sport=40000, dport=UDP_PORT) / Raw(payload))
    tcp_in = raw(IP(src=PRIVATE_A, dst=L.B_IP, ttl=64, id=0x5152) / TCP(sport=40001, dport=TCP_PORT, flags="S", seq=777))
    for p, off in ((udp_in, 26), (tcp_in, 36)):
        assert struct.unpack("!H", p[off:off + 2])[0] != 0, "scapy computed no checksum"
    # The checksums are stale once the source is rewritten: recomputed for 192.0.2.10 they differ.
    for p, layer in ((udp_in, UDP), (tcp_in, TCP)):
        q = IP(natted(p))
        stale = q[layer].chksum
        del q[layer].chksum
        assert IP(raw(q))[layer].chksum != stale, "checksum unchanged by the NAT: the test could not fail"

    # Control: the stale packets in the clear, straight onto hostB's link: hostB must refuse them.
    def clear():
        return [Ether(dst=L.B_MAC, src=L.GW1_IN_MAC) / IP(natted(p)) for p in (udp_in, tcp_in)]
    got, synacks = run_nat_case(artifacts, "control", ("gw1", "gw1-in"), clear)
    assert got == [], f"hostB accepted a UDP datagram with a stale checksum: {got} (kernel does not verify?)"
    assert synacks == [], "hostB answered a SYN with a stale checksum"

    # Through gw1: transport ESP in UDP, built behind the NAT, source rewritten by the NAT.
    sa = scapy_sa(L.load_sa("gw1", 1001))

    def esp():
        frames = []
        for seq, p in enumerate((udp_in, tcp_in), start=1):
            e = raw(sa.encrypt(IP(p), seq_num=seq))
            assert e[9] == 17 and struct.unpack("!HH", e[20:24]) == (NATT, NATT) and e[12:16] == udp_in[12:16], \
                "scapy did not build transport ESP in UDP from the private source"
            frames.append(Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / IP(natted(e)))
        return frames
    got, synacks = run_nat_case(artifacts, "esp", ("wan", "wan1"), esp)
    st = gws["gw1"].stats()
    assert len(got) == 1, f"hostB's UDP socket got {len(got)} datagrams, want 1; gw1 drops {st['drops']}"
    assert got[0] == {"src": L.A_IP, "sport": 40000, "payload": payload.hex()}, got
    # (hostB may retransmit its SYN-ACK: hostA, which never sent the SYN, answers RST.)
    assert synacks, f"no SYN-ACK from hostB (it refused the SYN?); gw1 drops {st['drops']}"
    acks = {struct.unpack("!I", s[14 + 20 + 8:14 + 20 + 12])[0] for s in synacks}
    assert acks == {778}, f"SYN-ACKs acknowledge {acks}, want 778"
    sa_in = next(s for s in st["sas"] if s["spi"] == 1001 and s["direction"] == "inbound")
    assert sa_in["packets"] == 2, f"gw1 SA 1001 inbound packets {sa_in['packets']}, want 2"
