#!/usr/bin/env python3
"""Generates tests/vectors/frag6.json: ESP for gw1's inbound SA 1101
(configs/ep1-v6.toml: AES-128-GCM, IPv6 outer 2001:db8:ff::1 -> ::2), made and
encrypted by scapy and cut into IPv6 fragments by scapy's fragment6()
(RFC 8200 §4.5), for tests/reassembly.rs. Nothing here comes from secgw.

Run from the repository root: python3 tests/vectors/gen_frag6.py
The output is deterministic (fixed payloads, IVs, identifications); rerunning
it must leave the file unchanged (`git diff --exit-code tests/vectors/frag6.json`).

Each case: name, inner (the IPv6 or IPv4 packet hostA sent, hex), seq, and
frames (the fragments as Ethernet frames gw0 -> gw1, in scapy's order, hex).
Cases: no extension header before the Fragment header, a Destination
Options header, a Hop-by-Hop header, both; large and small fragments; an
IPv4 inner packet (v4-in-v6).
"""
import json
from pathlib import Path

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import (
    IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, PadN, fragment6,
)
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import Ether
from scapy.packet import Raw

A6, B6 = "2001:db8:a::10", "2001:db8:b::10"
A4, B4 = "192.0.2.10", "198.51.100.10"
OUT0, OUT1 = "2001:db8:ff::1", "2001:db8:ff::2"
GW0_OUT_MAC, GW1_OUT_MAC = "02:00:00:00:00:02", "02:00:00:00:01:02"
# SA 1101 of ep0-v6.toml / ep1-v6.toml: AES-128 key || 4-byte salt (test key only).
KEY_1101 = bytes.fromhex("6b1f4e0c2d9a8b7c6d5e4f30211203f4a5b6c7d8")

sa = SecurityAssociation(ESP, spi=1101, crypt_algo="AES-GCM", crypt_key=KEY_1101,
                         tunnel_header=IPv6(src=OUT0, dst=OUT1, hlim=64))


def payload(n, seed):
    return bytes((i * 31 + seed) & 0xff for i in range(n))


def case(name, inner, seq, unfrag, frag_size, ident):
    esp = sa.encrypt(inner, seq_num=seq, iv=seq.to_bytes(8, "big"))
    assert esp[IPv6].nh == 50
    head = IPv6(src=OUT0, dst=OUT1, hlim=64)
    for h in unfrag:
        head = head / h
    pkt = head / IPv6ExtHdrFragment(nh=50, id=ident) / Raw(raw(esp[ESP]))
    frags = fragment6(pkt, frag_size)
    assert len(frags) >= 2, name
    frames = [raw(Ether(dst=GW1_OUT_MAC, src=GW0_OUT_MAC) / f) for f in frags]
    return dict(name=name, seq=seq, inner=raw(inner).hex(), frames=[f.hex() for f in frames])


def dst_opts():
    return IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\0\0\0\0")])


def hop_by_hop():
    return IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\0\0\0\0")])


def v6(n, dport):
    return IPv6(src=A6, dst=B6, hlim=64) / UDP(sport=40000, dport=dport) / Raw(payload(n, dport & 0xff))


def v4(n, dport):
    return IP(src=A4, dst=B4, ttl=64, id=dport, flags=0) / UDP(sport=40000, dport=dport) / Raw(payload(n, dport & 0xff))


cases = [
    case("plain_1280", v6(1200, 5001), 1, [], 1280 - 8, 0x11110001),
    case("plain_small", v6(1200, 5002), 2, [], 200, 0x11110002),
    case("dest_opts", v6(1000, 5003), 3, [dst_opts()], 400, 0x11110003),
    case("hop_by_hop", v6(900, 5004), 4, [hop_by_hop()], 300, 0x11110004),
    case("hbh_and_dest_opts", v6(1400, 5005), 5, [hop_by_hop(), dst_opts()], 600, 0x11110005),
    case("v4_inner", v4(1300, 6001), 6, [], 500, 0x11110006),
]

out = Path(__file__).with_name("frag6.json")
out.write_text(json.dumps(dict(sa=1101, cases=cases), indent=1) + "\n")
print(f"wrote {out}: {len(cases)} cases, {sum(len(c['frames']) for c in cases)} fragments")
