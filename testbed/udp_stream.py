#!/usr/bin/env python3
"""Numbered UDP datagram stream: a paced sender and a counting sink.

Run each side inside its namespace, e.g.

    ip netns exec hostB python3 testbed/udp_stream.py sink --bind 198.51.100.10 \
        --port 5001 --count 10000 --ready-file /tmp/sink.ready > sink.json
    ip netns exec hostA python3 testbed/udp_stream.py send --src 192.0.2.10 \
        --dst 198.51.100.10 --port 5001 --count 10000 --rate 5000

Each datagram carries MAGIC(4) | stream id(4) | sequence number(4) | padding.
The sender sends no datagram before its time (i / rate after the start)
and each at most about PACE_QUANTUM_S plus a wake-up late: it sleeps at
least that long, then sends what came due back to back, so the rate holds
over the run and the CPU is left to the gateways under test.
The sender prints {"sent", "errors", "elapsed_s", "pps"} as JSON; the sink
prints {"received", "distinct", "duplicates", "missing", "out_of_order",
"foreign", "bad_length", "first", "last", "elapsed_s"} as JSON (missing counts
the numbers in 0..count-1 never seen) and exits 0 whatever it counted: the
caller judges the numbers.

Only the standard library is used, so it runs in any namespace.
"""
import argparse
import json
import os
import socket
import struct
import sys
import time

MAGIC = b"SGW1"
HDR = struct.Struct("!4sII")
# Shortest pacing sleep of the sender, seconds: at 20,000 pps a burst of
# about 10 datagrams every half millisecond.
PACE_QUANTUM_S = 0.0005


def cmd_send(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    if a.tos:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, a.tos)
    s.bind((a.src, a.sport))
    size = max(a.size, HDR.size)
    pad = bytes(size - HDR.size)
    dst = (a.dst, a.port)
    interval = 1.0 / a.rate if a.rate > 0 else 0.0
    sent = errors = 0
    t0 = time.perf_counter()
    for i in range(a.count):
        if interval:
            target = t0 + i * interval
            delay = target - time.perf_counter()
            if delay > 0.0:
                # Sleep at least PACE_QUANTUM_S: what came due meanwhile goes
                # out back to back on waking (the targets are absolute, so
                # the rate holds). Spinning to each datagram's time instead
                # took a whole core at 20,000 pps, from the gateways under
                # test on the 2-core testbed.
                time.sleep(max(delay, PACE_QUANTUM_S))
        msg = HDR.pack(MAGIC, a.stream, a.first + i) + pad
        for attempt in range(50):
            try:
                s.sendto(msg, dst)
                sent += 1
                break
            except (BlockingIOError, OSError) as e:  # ENOBUFS on a full queue
                if attempt == 49:
                    errors += 1
                    print(f"send {i}: {e}", file=sys.stderr)
                time.sleep(0.001)
    elapsed = time.perf_counter() - t0
    print(json.dumps({"sent": sent, "errors": errors, "elapsed_s": round(elapsed, 3),
                      "pps": round(sent / elapsed, 1) if elapsed > 0 else None}))
    return 0 if errors == 0 else 1


def cmd_sink(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    s.bind((a.bind, a.port))
    if a.ready_file:
        with open(a.ready_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(a.ready_file + ".tmp", a.ready_file)
    print("ready", file=sys.stderr, flush=True)
    seen = bytearray(a.count)
    received = distinct = dups = ooo = foreign = bad_len = 0
    extra = set()  # numbers outside 0..count-1
    last = None
    first_seq = None
    t_start = time.monotonic()
    t_first = None
    last_rx = None
    deadline = t_start + a.timeout
    while distinct < a.count:
        now = time.monotonic()
        if t_first is not None:
            # after the first datagram: stop when idle for --idle seconds
            deadline = min(t_start + a.timeout, last_rx + a.idle)
        remaining = deadline - now
        if remaining <= 0:
            break
        s.settimeout(remaining)
        try:
            data, _ = s.recvfrom(65535)
        except socket.timeout:
            break
        last_rx = time.monotonic()
        if t_first is None:
            t_first = last_rx
        if len(data) < HDR.size:
            bad_len += 1
            continue
        magic, stream, seq = HDR.unpack_from(data)
        if magic != MAGIC or stream != a.stream:
            foreign += 1
            continue
        if a.size and len(data) != max(a.size, HDR.size):
            bad_len += 1
        received += 1
        if first_seq is None:
            first_seq = seq
        if last is not None and seq < last:
            ooo += 1
        last = seq
        if 0 <= seq < a.count:
            if seen[seq]:
                dups += 1
            else:
                seen[seq] = 1
                distinct += 1
        else:
            if seq in extra:
                dups += 1
            else:
                extra.add(seq)
    # drain briefly to catch trailing duplicates
    s.settimeout(a.linger)
    while a.linger > 0:
        try:
            data, _ = s.recvfrom(65535)
        except socket.timeout:
            break
        if len(data) >= HDR.size:
            magic, stream, seq = HDR.unpack_from(data)
            if magic == MAGIC and stream == a.stream:
                received += 1
                if 0 <= seq < a.count and seen[seq]:
                    dups += 1
                elif 0 <= seq < a.count:
                    seen[seq] = 1
                    distinct += 1
    missing = a.count - sum(seen)
    elapsed = (last_rx - t_first) if t_first is not None else 0.0
    print(json.dumps({"received": received, "distinct": distinct, "duplicates": dups,
                      "missing": missing, "out_of_order": ooo, "foreign": foreign,
                      "bad_length": bad_len, "out_of_range": len(extra),
                      "first": first_seq, "last": last, "elapsed_s": round(elapsed, 3)}))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    ps = sub.add_parser("send", help="send numbered datagrams")
    ps.add_argument("--src", required=True, help="local (namespace) address to send from")
    ps.add_argument("--sport", type=int, default=0)
    ps.add_argument("--dst", required=True)
    ps.add_argument("--port", type=int, required=True)
    ps.add_argument("--count", type=int, default=1000)
    ps.add_argument("--first", type=int, default=0, help="first sequence number")
    ps.add_argument("--rate", type=float, default=5000, help="datagrams per second (0 = unpaced)")
    ps.add_argument("--size", type=int, default=64, help="UDP payload bytes (>= 12)")
    ps.add_argument("--stream", type=int, default=1, help="stream id written in each datagram")
    ps.add_argument("--tos", type=lambda x: int(x, 0), default=0)
    pk = sub.add_parser("sink", help="count numbered datagrams")
    pk.add_argument("--bind", default="0.0.0.0")
    pk.add_argument("--port", type=int, required=True)
    pk.add_argument("--count", type=int, default=1000, help="expected numbers 0..count-1")
    pk.add_argument("--size", type=int, default=0, help="expected payload size (0 = any)")
    pk.add_argument("--stream", type=int, default=1)
    pk.add_argument("--timeout", type=float, default=60, help="overall limit in seconds")
    pk.add_argument("--idle", type=float, default=3, help="stop after this long without data")
    pk.add_argument("--linger", type=float, default=0.5, help="keep counting duplicates this long after the last expected one")
    pk.add_argument("--ready-file", help="created once the socket is bound")
    a = p.parse_args(argv)
    return cmd_send(a) if a.mode == "send" else cmd_sink(a)


if __name__ == "__main__":
    sys.exit(main())
