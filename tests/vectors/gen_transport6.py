#!/usr/bin/env python3
"""Generates tests/vectors/transport6.json: IPv6 transport-mode ESP packets
built by scapy's SecurityAssociation (not by secgw), for tests/transport6.rs.

Run from the repository root: python3 tests/vectors/gen_transport6.py
The output is deterministic (fixed keys, addresses, payloads, and the IV
given to scapy); rerunning it must leave the file unchanged.

RFC 4303 §3.1.1 puts ESP after Hop-by-Hop, Routing and Fragment headers and
lets Destination Options go on either side; scapy (following Linux's
ip6_find_1stfragopt) keeps Hop-by-Hop, Routing and any Destination Options
before a Routing header in front of ESP and encrypts a Destination Options
header that follows a Routing header (or comes without one? no: without a
Routing header it stays in front). The cases cover each placement.

Each case: name, algorithm (secgw's name), key (cipher key ‖ salt/nonce, as
secgw's config takes it), auth_key, spi, seq, iv, inner (the IPv6 packet
before protection), esp (the packet scapy protected: the same header chain
with ESP inserted), esp_offset (where the ESP header starts, from the start
of the IPv6 header), counter_iv (true when the IV is the 8-byte sequence
number, which is what secgw sends for counter modes and NULL: then secgw's
outbound packet must equal `esp` byte for byte; CBC IVs are unpredictable,
RFC 3602 §3, so for CBC only inbound is compared).
"""
import hashlib
import json
from pathlib import Path

from scapy.compat import raw
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6EchoRequest, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, PadN,
)
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.packet import Raw

A, B = "2001:db8:a::10", "2001:db8:b::10"

# secgw name, scapy cipher, key bytes, salt bytes, scapy MAC, MAC key bytes, IV bytes
ALGS = [
    ("aes-128-gcm", "AES-GCM", 16, 4, "NULL", 0, 8),
    ("aes-256-gcm", "AES-GCM", 32, 4, "NULL", 0, 8),
    ("aes-128-gmac", "AES-NULL-GMAC", 16, 4, "NULL", 0, 8),
    ("chacha20-poly1305", "CHACHA20-POLY1305", 32, 4, "NULL", 0, 8),
    ("aes-128-cbc-hmac-sha1", "AES-CBC", 16, 0, "HMAC-SHA1-96", 20, 16),
    ("aes-256-cbc-hmac-sha256", "AES-CBC", 32, 0, "SHA2-256-128", 32, 16),
    ("aes-128-ctr-hmac-sha256", "AES-CTR", 16, 4, "SHA2-256-128", 32, 8),
    ("null-hmac-sha1", "NULL", 0, 0, "HMAC-SHA1-96", 20, 0),
]


def derive(label, n):
    out = b""
    while len(out) < n:
        out += hashlib.sha256(f"secgw-transport6:{label}:{len(out)}".encode()).digest()
    return out[:n]


def inners():
    body = bytes(range(37))
    rt = IPv6ExtHdrRouting(type=0, segleft=0, addresses=["2001:db8:c::1"])
    return [
        ("udp", IPv6(src=A, dst=B, hlim=63, tc=0x28, fl=0x12345) / UDP(sport=4000, dport=5000) / Raw(body)),
        ("udp-empty", IPv6(src=A, dst=B) / UDP(sport=4000, dport=5000)),
        ("tcp", IPv6(src=A, dst=B) / TCP(sport=4001, dport=80, flags="S", seq=1000)),
        ("icmpv6-echo", IPv6(src=A, dst=B) / ICMPv6EchoRequest(id=7, seq=1, data=body)),
        ("hbh-udp", IPv6(src=A, dst=B) / IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\0" * 4)]) / UDP(sport=1, dport=2) / Raw(body)),
        ("dst-udp", IPv6(src=A, dst=B) / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\0" * 4)]) / UDP(sport=1, dport=2) / Raw(body)),
        ("hbh-dst-rt-dst-udp", IPv6(src=A, dst=B) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / rt / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\1" * 12)]) / UDP(sport=1, dport=2) / Raw(body)),
        ("rt-udp", IPv6(src=A, dst=B) / rt / UDP(sport=1, dport=2) / Raw(body * 20)),
    ]


def esp_offset(pkt):
    off, layer = 40, pkt.payload
    while not isinstance(layer, ESP):
        if not layer:
            raise ValueError("no ESP header")
        off += len(raw(layer)) - len(raw(layer.payload))
        layer = layer.payload
    return off


def main():
    cases = []
    for i, (name, crypt, klen, slen, auth, alen, ivlen) in enumerate(ALGS):
        key = derive(f"{name}:key", klen + slen)
        auth_key = derive(f"{name}:auth", alen)
        spi = 0x6000 + i
        sa = SecurityAssociation(ESP, spi=spi, crypt_algo=crypt, crypt_key=key or None,
                                 auth_algo=auth, auth_key=auth_key or None)
        for j, (iname, inner) in enumerate(inners()):
            seq = 1 + j
            counter_iv = crypt != "AES-CBC"
            iv = seq.to_bytes(8, "big") if counter_iv else derive(f"{name}:{iname}:iv", ivlen)
            inner = IPv6(raw(inner))
            prot = sa.encrypt(inner, seq_num=seq, iv=iv if ivlen else None)
            prot = IPv6(raw(prot))
            # scapy must open its own packet back to the inner one (decrypt
            # works on a copy: it changes the packet it is given).
            assert raw(sa.decrypt(IPv6(raw(prot)))) == raw(inner), (name, iname)
            cases.append({
                "name": f"{name} {iname}",
                "algorithm": name,
                "key": key.hex(),
                "auth_key": auth_key.hex(),
                "spi": spi,
                "seq": seq,
                "iv": iv.hex(),
                "counter_iv": counter_iv,
                "inner": raw(inner).hex(),
                "esp": raw(prot).hex(),
                "esp_offset": esp_offset(prot),
            })
    out = Path(__file__).with_name("transport6.json")
    out.write_text(json.dumps({"source": "scapy SecurityAssociation, transport mode, IPv6 (tests/vectors/gen_transport6.py)",
                               "cases": cases}, indent=1) + "\n")
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
