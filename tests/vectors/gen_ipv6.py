#!/usr/bin/env python3
"""Generates tests/vectors/ipv6.json: IPv6 packets built by scapy (not by
secgw) for the unit tests of src/wire/ipv6.rs and src/wire/icmpv6.rs.

Run from the repository root: python3 tests/vectors/gen_ipv6.py
The output is deterministic (fixed addresses, payloads, IDs); rerunning it
must leave the file unchanged (`git diff --exit-code tests/vectors/ipv6.json`).

Each entry: name, hex (the IPv6 packet, no Ethernet) and what scapy says about
it: the upper-layer protocol and its offset from the start of the IPv6 header
after walking the extension headers (RFC 8200 §4), fragment facts, the ICMPv6
checksum scapy computed (RFC 4443 §2.3 over the RFC 8200 §8.1 pseudo-header),
or `error` for chains a parser must refuse.
"""
import json
from pathlib import Path

from scapy.compat import raw
from scapy.layers.inet import UDP
from scapy.layers.inet6 import (
    ICMPv6EchoRequest, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr, ICMPv6NDOptSrcLLAddr,
    ICMPv6PacketTooBig, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting, PadN,
)
from scapy.layers.ipsec import ESP
from scapy.packet import Raw

A = "2001:db8:a::10"
GW = "2001:db8:a::1"
B = "2001:db8:b::10"
OUT0, OUT1 = "2001:db8:ff::1", "2001:db8:ff::2"
ESP_BODY = bytes(range(48))


def esp(spi=0x1001, seq=7):
    return ESP(spi=spi, seq=seq, data=ESP_BODY)


def entry(name, pkt, **facts):
    b = raw(pkt)
    return dict(name=name, hex=b.hex(), **facts)


def offset_of(pkt, layer):
    """Offset of `layer` in the raw bytes of `pkt` (as scapy lays it out)."""
    total = len(raw(pkt))
    return total - len(raw(pkt[layer]))


out = []

p = IPv6(src=OUT0, dst=OUT1, hlim=64) / esp()
out.append(entry("esp_direct", p, upper=50, offset=offset_of(p, ESP), fragment=None))

p = (IPv6(src=OUT0, dst=OUT1) / IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\0\0\0\0")]) /
     IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\0" * 12)]) /
     IPv6ExtHdrRouting(type=0, segleft=0, addresses=["2001:db8:ff::9"]) / esp())
out.append(entry("esp_after_hbh_dst_rt", p, upper=50, offset=offset_of(p, ESP), fragment=None))

p = IPv6(src=OUT0, dst=OUT1) / IPv6ExtHdrFragment(offset=0, m=1, id=0x12345678) / esp()
out.append(entry("esp_first_fragment", p, upper=50, offset=offset_of(p, ESP),
                 fragment=dict(offset=0, more=True, ident=0x12345678)))

p = IPv6(src=OUT0, dst=OUT1) / IPv6ExtHdrFragment(offset=10, m=0, id=7, nh=50) / Raw(ESP_BODY)
out.append(entry("later_fragment", p, upper=50, offset=48, fragment=dict(offset=10, more=False, ident=7)))

p = IPv6(src=A, dst=B) / IPv6ExtHdrDestOpt() / UDP(sport=40000, dport=5001) / Raw(b"hello")
out.append(entry("udp_after_dstopt", p, upper=17, offset=offset_of(p, UDP), fragment=None,
                 udp_checksum=p[UDP].chksum if p[UDP].chksum is not None else raw(p[UDP])[6] << 8 | raw(p[UDP])[7]))

p = IPv6(src=A, dst=B) / UDP(sport=4500, dport=4500) / esp()
u = raw(p)[40:]
out.append(entry("udp_esp", p, upper=17, offset=40, fragment=None, udp_checksum=u[6] << 8 | u[7]))

# ICMPv6 (RFC 4443 §2.3 checksum as scapy computes it)
p = IPv6(src=A, dst=B) / ICMPv6EchoRequest(id=0x1234, seq=1, data=b"abcdefgh")
c = raw(p)[40:]
out.append(entry("echo_request", p, upper=58, offset=40, fragment=None, icmp_checksum=c[2] << 8 | c[3]))

# Neighbor Solicitation from hostA for gw0's address, to its solicited-node
# multicast address, hop limit 255 (RFC 4861 §7.1.1), with a source
# link-layer address option; and the Advertisement a gateway answers with
# (RFC 4861 §7.2.4: S and O flags, target link-layer address option).
sn = "ff02::1:ff00:1"
p = IPv6(src=A, dst=sn, hlim=255) / ICMPv6ND_NS(tgt=GW) / ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:0a:01")
c = raw(p)[40:]
out.append(entry("nd_ns", p, upper=58, offset=40, fragment=None, icmp_checksum=c[2] << 8 | c[3],
                 target=GW, source_lladdr="02:00:00:00:0a:01"))
p = (IPv6(src=GW, dst=A, hlim=255) / ICMPv6ND_NA(R=0, S=1, O=1, tgt=GW) /
     ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:00:01"))
c = raw(p)[40:]
out.append(entry("nd_na", p, upper=58, offset=40, fragment=None, icmp_checksum=c[2] << 8 | c[3]))
# Duplicate address detection probe: unspecified source (RFC 4861 §7.2.4:
# the answer goes to all-nodes with S clear).
p = IPv6(src="::", dst=sn, hlim=255) / ICMPv6ND_NS(tgt=GW)
c = raw(p)[40:]
out.append(entry("nd_ns_dad", p, upper=58, offset=40, fragment=None, icmp_checksum=c[2] << 8 | c[3], target=GW))
p = IPv6(src=GW, dst="ff02::1", hlim=255) / ICMPv6ND_NA(R=0, S=0, O=1, tgt=GW) / ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:00:01")
c = raw(p)[40:]
out.append(entry("nd_na_dad", p, upper=58, offset=40, fragment=None, icmp_checksum=c[2] << 8 | c[3]))

# Packet Too Big (RFC 4443 §3.2) about a 1400-byte datagram hostA sent,
# quoting as much as fits in 1280 bytes.
orig = IPv6(src=A, dst=B, hlim=64) / UDP(sport=40000, dport=5001) / Raw(bytes((i * 7) & 0xFF for i in range(1352)))
ob = raw(orig)
p = IPv6(src=GW, dst=A, hlim=64) / ICMPv6PacketTooBig(mtu=1422) / Raw(ob[:1280 - 48])
c = raw(p)[40:]
out.append(entry("packet_too_big", p, upper=58, offset=40, fragment=None, icmp_checksum=c[2] << 8 | c[3],
                 invoking=ob.hex(), mtu=1422))

# Malformed chains a parser must refuse.
p = raw(IPv6(src=OUT0, dst=OUT1) / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\0" * 12)]) / esp())
bad = bytearray(p)
bad[41] = 40  # Hdr Ext Len: (40 + 1) * 8 bytes, past the end of the packet
out.append(dict(name="ext_len_past_end", hex=bytes(bad).hex(), error=True))
p = IPv6(src=OUT0, dst=OUT1) / IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop() / esp()
out.append(entry("hbh_not_first", p, error=True))
p = IPv6(src=OUT0, dst=OUT1)
for _ in range(9):
    p = p / IPv6ExtHdrDestOpt()
p = p / esp()
out.append(entry("nine_ext_headers", p, error=True))
p = raw(IPv6(src=OUT0, dst=OUT1) / IPv6ExtHdrFragment(offset=0, m=1, id=1) / esp())
out.append(dict(name="truncated_in_fragment_header", hex=p[:44].hex(), error=True))

path = Path(__file__).with_name("ipv6.json")
path.write_text(json.dumps({"generator": "tests/vectors/gen_ipv6.py (scapy)", "packets": out}, indent=1) + "\n")
print(f"wrote {len(out)} packets to {path}")
