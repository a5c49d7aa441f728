#!/usr/bin/env python3
"""refgw — a slow reference ESP gateway in Python, a test double for secgw.

It exists so the testbed scripts and the end-to-end tests can be checked
without the Rust binary: it speaks the same command line and stats contract
(`run --config C [--stats-file P] [--stats-interval N]`, `ready` on stderr,
final counters on stdout at SIGINT/SIGTERM, exit 0) and reads the same TOML
configs, but uses AF_PACKET sockets instead of AF_XDP and the `cryptography`
package's AES-GCM. It implements only what the testbed needs: ARP replies for
the ports' addresses, tunnel-mode IPv4-in-IPv4 ESP with AES-GCM (RFC 4106),
a 64-packet anti-replay window, TTL decrement, static neighbours. It is not a
reference for anything else (no SPD beyond "the outbound SA", no routing table).

Use it with SECGW_BIN=testbed/refgw.py. Because AF_PACKET does not steal
frames, the kernel of the gateway namespace also sees them; the testbed gives
that kernel no addresses and no forwarding, so it stays silent.
"""
import argparse
import ipaddress
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import tomllib

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
PACKET_OUTGOING = 4


def mac_bytes(s):
    return bytes(int(x, 16) for x in s.split(":"))


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def _prefix(v):
    if isinstance(v, dict):
        v = f"{v.get('address') or v.get('ip')}/{v.get('prefix_len') or v.get('prefix') or 32}"
    return ipaddress.ip_interface(v)


class Sa:
    def __init__(self, d):
        self.spi = int(d["spi"])
        self.direction = str(d.get("direction", "")).lower()
        key = bytes.fromhex(str(d["key"]).replace(":", "").replace(" ", "").removeprefix("0x"))
        self.aead = AESGCM(key[:-4])
        self.salt = key[-4:]
        self.src = ipaddress.IPv4Address(d.get("tunnel_src") or d.get("src"))
        self.dst = ipaddress.IPv4Address(d.get("tunnel_dst") or d.get("dst"))
        self.ttl = int(d.get("outer_ttl", 64))
        self.window = int(d.get("replay_window", 64))
        self.seq = 0
        self.top = 0
        self.bitmap = 0
        self.packets = self.bytes = self.errors = 0


class Port:
    def __init__(self, d):
        self.name = d.get("name", d["interface"])
        self.ifname = d["interface"]
        self.role = str(d.get("role", "")).lower()
        self.mac = mac_bytes(d["mac"]) if d.get("mac") else None
        addrs = d.get("addresses", d.get("address", []))
        if isinstance(addrs, (str, dict)):
            addrs = [addrs]
        self.addrs = [_prefix(a) for a in addrs]
        self.rx_packets = self.tx_packets = self.rx_bytes = self.tx_bytes = self.drops = 0
        self.sock = None


class Gw:
    def __init__(self, cfg):
        self.ports = [Port(p) for p in cfg.get("port", cfg.get("ports", []))]
        self.sas = [Sa(s) for s in cfg.get("sa", cfg.get("sas", []))]
        self.neigh = {}
        for n in cfg.get("neighbour", cfg.get("neighbor", cfg.get("neighbours", []))):
            self.neigh[ipaddress.IPv4Address(n.get("ip") or n.get("address"))] = mac_bytes(n["mac"])
        self.drops = {}
        self.arp_replies = 0
        self.out_sa = next((s for s in self.sas if s.direction == "outbound"), None)
        self.in_sas = {(s.spi, s.dst): s for s in self.sas if s.direction == "inbound"}

    def drop(self, port, reason):
        self.drops[reason] = self.drops.get(reason, 0) + 1
        port.drops += 1

    def open(self):
        for p in self.ports:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
            s.bind((p.ifname, 0))
            if p.mac is None:
                p.mac = s.getsockname()[4]
            s.setblocking(False)
            p.sock = s
        self.by_fd = {p.sock.fileno(): p for p in self.ports}
        self.protected = next(p for p in self.ports if p.role.startswith("prot"))
        self.unprotected = next(p for p in self.ports if p.role.startswith("unprot"))

    def tx(self, port, frame):
        try:
            port.sock.send(frame)
            port.tx_packets += 1
            port.tx_bytes += len(frame)
        except OSError:
            self.drop(port, "tx_full")

    def owns(self, port, ip):
        return any(a.ip == ip for a in port.addrs)

    def on_arp(self, port, f):
        if len(f) < 42:
            return self.drop(port, "malformed")
        htype, ptype, hl, pl, op = struct.unpack_from("!HHBBH", f, 14)
        sha, spa, tpa = f[22:28], f[28:32], f[38:42]
        if htype != 1 or ptype != ETH_P_IP or hl != 6 or pl != 4:
            return
        self.neigh.setdefault(ipaddress.IPv4Address(spa), sha)
        if op == 1 and self.owns(port, ipaddress.IPv4Address(tpa)):
            rep = sha + port.mac + struct.pack("!H", ETH_P_ARP) + struct.pack(
                "!HHBBH", 1, ETH_P_IP, 6, 4, 2) + port.mac + tpa + sha + spa
            self.tx(port, rep)
            self.arp_replies += 1

    def route_out(self, port, ip_pkt, nexthop):
        mac = self.neigh.get(nexthop)
        if mac is None:
            return self.drop(port, "no_neighbour")
        self.tx(port, mac + port.mac + struct.pack("!H", ETH_P_IP) + ip_pkt)

    def on_protected(self, port, f):
        ip = f[14:]
        if len(ip) < 20 or ip[0] >> 4 != 4:
            return self.drop(port, "malformed")
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack_from("!H", ip, 2)[0]
        if ihl < 20 or tot < ihl or tot > len(ip):
            return self.drop(port, "malformed")
        ip = bytearray(ip[:tot])
        if self.owns(port, ipaddress.IPv4Address(bytes(ip[16:20]))):
            return  # addressed to us: not forwarded
        if ip[8] <= 1:
            return self.drop(port, "ttl_exceeded")
        sa = self.out_sa
        if sa is None:
            return self.drop(port, "no_policy")
        ip[8] -= 1
        ip[10:12] = b"\0\0"
        ip[10:12] = struct.pack("!H", csum(bytes(ip[:ihl])))
        sa.seq += 1
        iv = struct.pack("!Q", sa.seq)
        padlen = (-(len(ip) + 2)) % 4
        pt = bytes(ip) + bytes(range(1, padlen + 1)) + bytes([padlen, 4])
        hdr = struct.pack("!II", sa.spi, sa.seq)
        ct = sa.aead.encrypt(sa.salt + iv, pt, hdr)
        esp = hdr + iv + ct
        outer = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, ip[1], 20 + len(esp), 0,
                                      struct.unpack_from("!H", ip, 6)[0] & 0x4000,
                                      sa.ttl, 50, 0, sa.src.packed, sa.dst.packed))
        outer[10:12] = struct.pack("!H", csum(bytes(outer)))
        sa.packets += 1
        sa.bytes += len(ip)
        self.route_out(self.unprotected, bytes(outer) + esp, sa.dst)

    def on_unprotected(self, port, f):
        ip = f[14:]
        if len(ip) < 20 or ip[0] >> 4 != 4:
            return self.drop(port, "malformed")
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack_from("!H", ip, 2)[0]
        if ihl < 20 or tot < ihl or tot > len(ip):
            return self.drop(port, "malformed")
        ip = ip[:tot]
        if ip[9] != 50:
            return self.drop(port, "no_policy")
        esp = ip[ihl:]
        if len(esp) < 8 + 8 + 16 + 4:
            return self.drop(port, "malformed")
        spi, seq = struct.unpack_from("!II", esp)
        sa = self.in_sas.get((spi, ipaddress.IPv4Address(bytes(ip[16:20]))))
        if sa is None:
            return self.drop(port, "no_sa")
        # replay pre-check
        if seq == 0 or (sa.window and seq + sa.window <= sa.top) or \
                (sa.window and seq <= sa.top and (sa.bitmap >> (sa.top - seq)) & 1):
            return self.drop(port, "replay")
        try:
            pt = sa.aead.decrypt(sa.salt + bytes(esp[8:16]), bytes(esp[16:]), bytes(esp[:8]))
        except Exception:
            sa.errors += 1
            return self.drop(port, "auth_failed")
        if seq > sa.top:
            sa.bitmap = ((sa.bitmap << (seq - sa.top)) | 1) & ((1 << max(sa.window, 1)) - 1)
            sa.top = seq
        else:
            sa.bitmap |= 1 << (sa.top - seq)
        padlen, nh = pt[-2], pt[-1]
        if padlen + 2 > len(pt) or pt[-2 - padlen:-2] != bytes(range(1, padlen + 1)):
            return self.drop(port, "bad_padding")
        if nh == 59:
            return
        if nh != 4:
            return self.drop(port, "bad_next_header")
        inner = bytearray(pt[:-2 - padlen])
        if len(inner) < 20 or inner[0] >> 4 != 4:
            return self.drop(port, "malformed")
        iihl = (inner[0] & 15) * 4
        itot = struct.unpack_from("!H", inner, 2)[0]
        if itot > len(inner) or itot < iihl:
            return self.drop(port, "malformed")
        inner = inner[:itot]
        if inner[8] <= 1:
            return self.drop(port, "ttl_exceeded")
        inner[8] -= 1
        inner[10:12] = b"\0\0"
        inner[10:12] = struct.pack("!H", csum(bytes(inner[:iihl])))
        sa.packets += 1
        sa.bytes += len(inner)
        self.route_out(self.protected, bytes(inner), ipaddress.IPv4Address(bytes(inner[16:20])))

    def stats(self):
        return {
            "ports": [{"name": p.name, "rx_packets": p.rx_packets, "tx_packets": p.tx_packets,
                       "rx_bytes": p.rx_bytes, "tx_bytes": p.tx_bytes, "drops": p.drops}
                      for p in self.ports],
            "sas": [{"spi": s.spi, "direction": s.direction, "packets": s.packets,
                     "bytes": s.bytes, "errors": s.errors} for s in self.sas],
            "drops": dict(self.drops),
            "arp_replies": self.arp_replies,
        }

    def write_stats(self, path):
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.stats(), fh)
        os.replace(tmp, path)

    def run(self, stats_file, stats_interval):
        stop = []
        signal.signal(signal.SIGINT, lambda *_: stop.append(1))
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        self.open()
        print("refgw: ready (ports up)", file=sys.stderr, flush=True)
        next_stats = time.monotonic() + 1
        next_print = time.monotonic() + stats_interval if stats_interval else None
        poll = select.epoll()
        for fd in self.by_fd:
            poll.register(fd, select.EPOLLIN)
        while not stop:
            try:
                events = poll.poll(0.2)
            except InterruptedError:
                continue
            for fd, _ in events:
                port = self.by_fd[fd]
                for _ in range(64):
                    try:
                        f, addr = port.sock.recvfrom(65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    if addr[2] == PACKET_OUTGOING:
                        continue
                    port.rx_packets += 1
                    port.rx_bytes += len(f)
                    if len(f) < 14:
                        self.drop(port, "malformed")
                        continue
                    et = struct.unpack_from("!H", f, 12)[0]
                    if et == ETH_P_ARP:
                        self.on_arp(port, f)
                    elif et != ETH_P_IP:
                        continue
                    elif f[0:6] != port.mac:
                        continue
                    elif port is self.protected:
                        self.on_protected(port, f)
                    else:
                        self.on_unprotected(port, f)
            now = time.monotonic()
            if stats_file and now >= next_stats:
                self.write_stats(stats_file)
                next_stats = now + 1
            if next_print and now >= next_print:
                print(json.dumps(self.stats()), file=sys.stderr, flush=True)
                next_print = now + stats_interval
        if stats_file:
            self.write_stats(stats_file)
        print(json.dumps(self.stats(), indent=1), flush=True)
        return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--config", required=True)
    r.add_argument("--stats-file")
    r.add_argument("--stats-interval", type=int, default=0)
    c = sub.add_parser("check")
    c.add_argument("config")
    a = ap.parse_args()
    path = a.config
    with open(path, "rb") as fh:
        gw = Gw(tomllib.load(fh))
    if a.cmd == "check":
        print(f"{path}: {len(gw.ports)} ports, {len(gw.sas)} SAs")
        return 0
    return gw.run(a.stats_file, a.stats_interval)


if __name__ == "__main__":
    sys.exit(main())
