#!/usr/bin/env python3
"""Send the frames of a pcap file, in order, out of one interface.

    ip netns exec wan python3 testbed/pcap_send.py wan1 frames.pcap [--gap-ms 2]

Raw AF_PACKET socket, standard library only (works in any namespace without
scapy); reads classic pcap files (what scapy's wrpcap and tcpdump -w write).
Prints {"sent": N} as JSON.
"""
import argparse
import json
import socket
import struct
import sys
import time


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        raise SystemExit(f"{path}: not a classic pcap file")
    linktype = struct.unpack(end + "I", data[20:24])[0]
    if linktype != 1:
        raise SystemExit(f"{path}: link type {linktype}, want Ethernet (1)")
    off = 24
    frames = []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(end + "IIII", data[off:off + 16])
        off += 16
        frames.append(data[off:off + incl])
        off += incl
    return frames


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("iface")
    ap.add_argument("pcap")
    ap.add_argument("--gap-ms", type=float, default=1.0, help="pause between frames")
    a = ap.parse_args()
    frames = read_pcap(a.pcap)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.iface, 0))
    for i, fr in enumerate(frames):
        if i and a.gap_ms:
            time.sleep(a.gap_ms / 1000)
        s.send(fr)
    print(json.dumps({"sent": len(frames)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
