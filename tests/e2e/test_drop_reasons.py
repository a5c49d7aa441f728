"""Every inbound drop reason of README "Counters", one crafted frame each, at gw1;
and (test_cbc_block_rule_and_tfc_padding, with an AES-CBC SA added to gw1) the
16-byte block rule of CBC and TFC padding tolerated in GCM and CBC SAs.

With the standard gateways running (configs/ep0.toml, configs/ep1.toml), one
frame per case is injected from namespace `wan` on `wan1` towards gw1's
outside port. After each frame gw1's stats file must show exactly that
case's drop reason up by exactly 1, no other drop counter moved, and the
outside port's rx_packets up by exactly 1. Nothing may reach hostB (b0 is
sniffed for the whole test); a valid hand-made ESP packet sent last must
arrive there exactly once, so the sniffer is known to work and the ESP
builder is known to be right.

ESP is built by hand (like tests/pipeline.rs `malformed_esp_each_has_its_reason`)
with pyca/cryptography's AESGCM and the key of inbound SA 1001 read from
configs/ep1.toml (RFC 4106: nonce = salt ‖ 8-byte IV, AAD = SPI ‖ seq), not
with scapy's ESP, so padding, pad length and next header can be anything.
Frames are written to a pcap byte for byte (no scapy re-serialisation) and
sent with testbed/pcap_send.py.
"""
from __future__ import annotations

import json
import os
import struct
import sys
import time

import e2elib as L

SPI = 1001
UNKNOWN_SPI = 4242
OTHER_MAC = "02:00:00:00:99:99"    # nobody's MAC in the testbed
STRANGER_IP = "10.9.9.9"           # outside SA 1001's selectors (192.0.2.0/24 → 198.51.100.0/24)
CONTROL_DPORT = 47999              # the one packet that must reach hostB
WAIT_S = 4.0                       # per case: how long to wait for the counter to move


# --------------------------------------------------------------------------
# byte builders

def mac(s: str) -> bytes:
    return bytes.fromhex(s.replace(":", ""))


def ip4(s: str) -> bytes:
    return bytes(int(x) for x in s.split("."))


def csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src: str, dst: str, proto: int, payload: bytes, *, tos=0, ttl=64, ident=0x4242, flags_frag=0,
         total_len=None, bad_csum=False) -> bytes:
    total = 20 + len(payload) if total_len is None else total_len
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, total, ident, flags_frag, ttl, proto, 0,
                              ip4(src), ip4(dst)))
    ck = csum(bytes(h))
    if bad_csum:
        ck ^= 0x5A5A
    h[10:12] = struct.pack("!H", ck)
    return bytes(h) + payload


def udp(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    length = 8 + len(payload)
    pseudo = ip4(src) + ip4(dst) + struct.pack("!BBH", 0, 17, length)
    ck = csum(pseudo + struct.pack("!HHHH", sport, dport, length, 0) + payload) or 0xFFFF
    return struct.pack("!HHHH", sport, dport, length, ck) + payload


def inner_udp(dport: int, *, src=L.A_IP, ttl=64, tos=0, size=5) -> bytes:
    """An inner IPv4/UDP packet hostA → hostB (33 bytes with the default size)."""
    return ipv4(src, L.B_IP, 17, udp(src, L.B_IP, 40000, dport, bytes(range(size))), tos=tos, ttl=ttl)


def eth(payload: bytes, *, dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC, ethertype=0x0800) -> bytes:
    return mac(dst) + mac(src) + struct.pack("!H", ethertype) + payload


class HandEsp:
    """AES-GCM ESP (RFC 4106) for one SA, every trailer field chosen by the caller."""

    def __init__(self, info: L.SaInfo):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        assert info.algorithm in ("aes-128-gcm", "aes-256-gcm"), \
            f"SA {info.spi} in {L.GW_CONFIG['gw1']} is {info.algorithm!r}; this test builds AES-GCM ESP only"
        assert len(info.key) in (20, 36), f"SA {info.spi}: key of {len(info.key)} bytes, want AES key ‖ 4-byte salt"
        self.aead = AESGCM(info.key[:-4])
        self.salt = info.key[-4:]

    def payload(self, spi: int, seq: int, inner: bytes, *, pad: bytes | None = None, pad_len: int | None = None,
                nh: int = 4) -> bytes:
        """SPI ‖ seq ‖ IV ‖ E(inner ‖ pad ‖ pad length ‖ next header) ‖ ICV. Default padding:
        1, 2, 3, … up to a multiple of 4 (RFC 4303 §2.4)."""
        if pad is None:
            pad = bytes(range(1, 1 + (-(len(inner) + 2)) % 4))
        if pad_len is None:
            pad_len = len(pad)
        iv = struct.pack("!Q", seq)  # like secgw: the IV is the 64-bit sequence number
        aad = struct.pack("!II", spi, seq)
        sealed = self.aead.encrypt(self.salt + iv, inner + pad + bytes([pad_len, nh]), aad)
        return aad + iv + sealed


def esp_frame(esp: bytes, *, src=L.GW0_OUT_IP, dst=L.GW1_OUT_IP, tos=0, **ip_kw) -> bytes:
    return eth(ipv4(src, dst, 50, esp, tos=tos, **ip_kw))


def write_pcap(path, frames: list[bytes]):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for fr in frames:
            f.write(struct.pack("<IIII", 0, 0, len(fr), len(fr)) + fr)


def send_raw(frames: list[bytes], path):
    path = path.with_suffix(".pcap")
    write_pcap(path, frames)
    out = L.run_ns("wan", sys.executable, L.TESTBED / "pcap_send.py", "wan1", path, "--gap-ms", 1).stdout
    assert json.loads(out)["sent"] == len(frames), f"pcap_send: {out}"


# --------------------------------------------------------------------------
# the cases

def build_cases(esp: HandEsp) -> tuple[list[tuple[str, str, bytes]], bytes]:
    """([(label, expected drop reason, frame)] in sending order, the valid control frame)."""
    seqs = iter(range(1, 1000))
    port = iter(range(43100, 43200))
    inner = lambda **kw: inner_udp(next(port), **kw)  # noqa: E731

    def ok_esp(spi=SPI, **kw):
        return esp.payload(spi, next(seqs), inner(), **kw)

    cases = []
    add = lambda label, reason, frame: cases.append((label, reason, frame))  # noqa: E731

    # Link and outer IPv4 layer.
    udp6 = struct.pack("!IHBB16s16s", 0x60000000, 8, 17, 64, bytes.fromhex("20010db8" + "00" * 11 + "01"),
                       bytes.fromhex("20010db8" + "00" * 11 + "02")) + struct.pack("!HHHH", 1, 2, 8, 0)
    add("ethertype 0x88b5 (IEEE local experimental)", "unsupported_ethertype", eth(udp6, ethertype=0x88B5))
    # ep1.toml is IPv4-only: IPv6 is classified, matches no inbound policy.
    add("IPv6 UDP (no IPv6 policy in ep1.toml)", "no_policy", eth(udp6, ethertype=0x86DD))
    from scapy.compat import raw as _raw
    from scapy.layers.inet6 import IPv6, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr
    ns = _raw(IPv6(src="2001:db8:ff::1", dst="ff02::1:ff00:2", hlim=255) / ICMPv6ND_NS(tgt="2001:db8:ff::2") /
              ICMPv6NDOptSrcLLAddr(lladdr=L.GW0_OUT_MAC))
    add("Neighbor Solicitation for an IPv6 address gw1 does not have", "nd_ignored",
        eth(ns, dst="33:33:ff:00:00:02", ethertype=0x86DD))
    add(f"valid ESP unicast to {OTHER_MAC}", "not_for_us", eth(esp_frame(ok_esp())[14:], dst=OTHER_MAC))
    add("outer IPv4 header checksum wrong", "malformed", esp_frame(ok_esp(), bad_csum=True))
    add("outer IPv4 total length 16 < header length 20", "malformed", esp_frame(ok_esp(), total_len=16))
    # Outer fragments to the gateway go to the reassembler; these two are refused at once.
    add("ESP fragment, MF set, 12 bytes of data (not a multiple of 8)", "reasm_bad_fragment",
        esp_frame(ok_esp()[:12], flags_frag=0x2000))
    add("last ESP fragment at offset 2048 (past one buffer)", "reasm_too_big",
        esp_frame(ok_esp()[:16], flags_frag=2048 // 8, ident=0x4343))

    # SAD lookup.
    add(f"SPI {UNKNOWN_SPI} (unknown)", "no_sa", esp_frame(ok_esp(spi=UNKNOWN_SPI)))
    add("SPI 0", "no_sa", esp_frame(ok_esp(spi=0)))
    add("SA 1001 from a source other than its tunnel_src", "no_sa", esp_frame(ok_esp(), src="203.0.113.77"))

    # Length checks before any crypto.
    add("ESP truncated to header + IV + 10 bytes", "bad_length", esp_frame(ok_esp()[:8 + 8 + 10]))
    inner33 = inner()
    assert len(inner33) == 33
    add("encrypted part 37 bytes (not a multiple of 4), valid ICV", "bad_length",
        esp_frame(esp.payload(SPI, next(seqs), inner33, pad=b"\x01\x02")))

    # ICV.
    tampered = bytearray(ok_esp())
    tampered[-1] ^= 0x01
    add("valid ESP with the last ICV bit flipped", "auth_failed", esp_frame(bytes(tampered)))

    # Trailer, after the ICV verified (each of these moves the replay window).
    add("padding 7 instead of 1", "bad_padding", esp_frame(ok_esp(pad=b"\x07")))
    add("pad length 200 beyond the 36-byte payload", "bad_padding", esp_frame(ok_esp(pad=b"\x01", pad_len=200)))
    add("next header 17 (UDP) in tunnel mode", "bad_next_header", esp_frame(ok_esp(nh=17)))
    dummy = esp_frame(ok_esp(nh=59))
    add("next header 59 (dummy packet)", "dummy", dummy)
    add("the dummy packet again (same sequence number)", "replay", dummy)
    six = struct.pack("!IHBB16s16s", 0x60000000, 8, 17, 64, bytes(16), bytes(16)) + struct.pack("!HHHH", 1, 2, 8, 0)
    add("next header 4 but the inner packet is IPv6", "bad_inner", esp_frame(esp.payload(SPI, next(seqs), six)))

    # Inner packet.
    add(f"inner source {STRANGER_IP}, outside the SA's selectors", "inner_policy_mismatch",
        esp_frame(esp.payload(SPI, next(seqs), inner(src=STRANGER_IP))))
    add("outer ECN CE over inner Not-ECT", "ecn_ce_on_not_ect",
        esp_frame(esp.payload(SPI, next(seqs), inner(tos=0)), tos=0x03))
    add("inner TTL 1", "ttl_exceeded", esp_frame(esp.payload(SPI, next(seqs), inner(ttl=1))))

    # Cleartext on the unprotected port.
    add("cleartext hostA → hostB (inbound policy protects it)", "cleartext_protected", eth(inner()))

    control = esp_frame(esp.payload(SPI, next(seqs), inner_udp(CONTROL_DPORT)))
    return cases, control


# --------------------------------------------------------------------------
# stats

def drops_of(st: dict) -> dict[str, int]:
    return {k: int(v) for k, v in st.get("drops", {}).items()}


def port_rx(st: dict, name: str) -> int:
    for p in st.get("ports", []):
        if p.get("name") == name:
            return int(p.get("rx_packets", 0))
    raise AssertionError(f"no port {name!r} in gw1's stats: {st.get('ports')}")


def sa_in_packets(st: dict, spi: int) -> int:
    for s in st.get("sas", []):
        if int(s.get("spi", -1)) == spi and s.get("direction") == "inbound":
            return int(s.get("packets", 0))
    raise AssertionError(f"no inbound SA {spi} in gw1's stats: {st.get('sas')}")


def diff(a: dict, b: dict) -> dict[str, tuple[int, int]]:
    return {k: (a.get(k, 0), b.get(k, 0)) for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)}


def stats_version(path) -> tuple:
    try:
        s = os.stat(path)
        return (s.st_ino, s.st_mtime_ns)
    except FileNotFoundError:
        return ()


def wait_rewrite(gw, timeout=3.0) -> dict:
    """The stats of the next rewrite of gw's stats file (written every second)."""
    v0 = stats_version(gw.stats_file)
    deadline = time.monotonic() + timeout
    while stats_version(gw.stats_file) == v0:
        if time.monotonic() > deadline:
            raise AssertionError(f"{gw.name}: stats file {gw.stats_file} not rewritten in {timeout}s\n{gw.logs()}")
        time.sleep(0.05)
    return gw.stats()


# --------------------------------------------------------------------------

def test_each_inbound_drop_reason_counts_once(gws, artifacts):
    gw1 = gws["gw1"]
    cfg = L.load_config("gw1")
    outside = next((p["name"] for p in cfg["port"] if p["interface"] == L.GW_IFACES["gw1"][0]), None)
    assert outside, f"no port on {L.GW_IFACES['gw1'][0]} in {L.GW_CONFIG['gw1']}"
    info = L.load_sa("gw1", SPI)
    assert info.direction == "inbound" and (info.src, info.dst) == (L.GW0_OUT_IP, L.GW1_OUT_IP), info
    cases, control = build_cases(HandEsp(info))

    st0 = wait_rewrite(gw1)
    known = set(drops_of(st0))
    missing = sorted({r for _, r, _ in cases} - known)
    assert not missing, f"drop reasons {missing} are not in gw1's stats JSON (has {sorted(known)})"
    assert not any(drops_of(st0).values()), f"gw1 dropped something before the test: {diff({}, drops_of(st0))}"

    cap = L.Capture("hostB", "b0", f"not ether src {L.B_MAC}", artifacts / "b0")
    t0 = time.monotonic()
    rows, problems = [], []
    prev = drops_of(st0)
    for n, (label, reason, frame) in enumerate(cases, start=1):
        st = gw1.stats()
        before, rx0 = drops_of(st), port_rx(st, outside)
        if before != prev:
            problems.append(f"#{n - 1} {cases[n - 2][0] if n > 1 else 'start'}: drop counters moved after it "
                            f"was counted: {diff(prev, before)}")
        send_raw([frame], artifacts / f"{n:02d}-{reason}")
        deadline = time.monotonic() + WAIT_S
        while True:
            st = gw1.stats()
            after, rx1 = drops_of(st), port_rx(st, outside)
            if (after != before and rx1 > rx0) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        d = diff(before, after)
        b, a = before.get(reason, 0), after.get(reason, 0)
        rows.append((n, reason, b, a, rx1 - rx0, label, {k: v for k, v in d.items() if k != reason}))
        if a != b + 1:
            problems.append(f"#{n} {label}: drops.{reason} {b} -> {a}, want +1; drop counters that moved: {d or 'none'}; "
                            f"rx_packets on {outside} +{rx1 - rx0}")
        elif set(d) != {reason}:
            problems.append(f"#{n} {label}: drops.{reason} +1 but other drop counters moved too: "
                            f"{ {k: v for k, v in d.items() if k != reason} }")
        if rx1 - rx0 != 1:
            problems.append(f"#{n} {label}: rx_packets on port {outside} went +{rx1 - rx0}, want +1")
        prev = after

    # Positive control: valid hand-made ESP must cross, with no drop.
    st = gw1.stats()
    before, sa0 = drops_of(st), sa_in_packets(st, SPI)
    if before != prev:
        problems.append(f"#{len(cases)} {cases[-1][0]}: drop counters moved after it was counted: {diff(prev, before)}")
    send_raw([control], artifacts / "99-control")
    st = gw1.wait_stats(lambda s: sa_in_packets(s, SPI) > sa0, timeout=WAIT_S)
    st = wait_rewrite(gw1)  # one more rewrite: nothing may move late
    final, sa1 = drops_of(st), sa_in_packets(st, SPI)
    elapsed = time.monotonic() - t0
    got = cap.stop(settle=0.5)

    print(f"\ngw1 drop counters, one crafted frame each from wan1 ({len(cases)} cases in {elapsed:.1f}s):")
    print(f"{'#':>3}  {'reason':<22} {'before':>6} {'after':>5}  {'rx':>3}  frame")
    for n, reason, b, a, rx, label, others in rows:
        flag = "" if (a == b + 1 and not others and rx == 1) else f"   <-- FAIL, others {others}"
        print(f"{n:>3}  {reason:<22} {b:>6} {a:>5}  +{rx:<2}  {label}{flag}")
    print(f"control: valid ESP, SA {SPI} packets {sa0} -> {sa1}, drops moved {diff(before, final) or 'none'}")

    from scapy.compat import raw
    delivered, leaked = 0, []
    for f in got:
        b = raw(f)
        if (len(b) >= 14 + 28 and b[12:14] == b"\x08\x00" and b[14 + 9] == 17
                and struct.unpack("!H", b[14 + 22:14 + 24])[0] == CONTROL_DPORT):
            delivered += 1
        elif b[12:14] == b"\x08\x06":
            pass  # gw1 answering hostB's ARP (hostB replies to the control packet via 198.51.100.1)
        else:
            leaked.append(f.summary())
    if diff(before, final):
        problems.append(f"control (valid ESP): drop counters moved: {diff(before, final)}")
    if sa1 != sa0 + 1:
        problems.append(f"control (valid ESP): SA {SPI} inbound packets {sa0} -> {sa1}, want +1")
    if delivered != 1:
        problems.append(f"control (valid ESP): arrived {delivered} times on b0, want 1 "
                        "(the b0 sniffer or the hand-made ESP is broken)")
    if leaked:
        problems.append(f"{len(leaked)} frames reached hostB besides the control packet: {leaked}")
    assert not problems, "\n".join(problems) + f"\nartifacts: {artifacts}"


# --------------------------------------------------------------------------
# AES-CBC's block rule and TFC padding (RFC 4303 §2.4, §2.7; RFC 3602 §2.4)

CBC_SPI = 1101
CBC_KEY = bytes(range(0x10, 0x20))                 # test keys only
CBC_AUTH_KEY = bytes(range(0x40, 0x60))
CBC_DPORT = 43300                                  # inbound policy port of the CBC SA


class HandCbc:
    """AES-128-CBC + HMAC-SHA-256-128 ESP (RFC 3602, RFC 4868) for SPI CBC_SPI, by hand."""

    def payload(self, seq: int, inner: bytes, *, tfc: bytes = b"", enc_len: int | None = None) -> bytes:
        """SPI ‖ seq ‖ IV ‖ E(inner ‖ tfc ‖ pad 1,2,3… to 16 ‖ pad length ‖ 4) ‖ ICV. With `enc_len`
        the encrypted part is cut to that many bytes before the ICV is computed (a valid ICV
        over a ciphertext of the wrong length)."""
        import hashlib
        import hmac as hm
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        body = inner + tfc
        pad = bytes(range(1, 1 + (-(len(body) + 2)) % 16))
        plain = body + pad + bytes([len(pad), 4])
        iv = hashlib.sha256(struct.pack("!I", seq)).digest()[:16]
        e = Cipher(algorithms.AES(CBC_KEY), modes.CBC(iv)).encryptor()
        ct = e.update(plain) + e.finalize()
        if enc_len is not None:
            ct = (ct * 2)[:enc_len]
        head = struct.pack("!II", CBC_SPI, seq) + iv + ct
        return head + hm.new(CBC_AUTH_KEY, head, hashlib.sha256).digest()[:16]


def cbc_config(artifacts) -> dict:
    """ep0 as it is; ep1 plus inbound SA CBC_SPI (tunnel gw0 → gw1) and its policy."""
    text = (L.CONFIG_DIR / L.GW_CONFIG["gw1"]).read_text().rstrip("\n") + f"""

[[sa]]
spi = {CBC_SPI}
direction = "inbound"
mode = "tunnel"
algorithm = "aes-128-cbc-hmac-sha256"
key = "{CBC_KEY.hex()}"
auth_key = "{CBC_AUTH_KEY.hex()}"
tunnel_src = "{L.GW0_OUT_IP}"
tunnel_dst = "{L.GW1_OUT_IP}"

[[policy]]
direction = "inbound"
src = "192.0.2.0/24"
dst = "198.51.100.0/24"
protocol = "udp"
dst_ports = "{CBC_DPORT}-{CBC_DPORT + 9}"
priority = 5
action = "protect {CBC_SPI}"
"""
    path = artifacts / "gw1-cbc.toml"
    path.write_text(text)
    return {"gw0": L.CONFIG_DIR / L.GW_CONFIG["gw0"], "gw1": path}


def test_cbc_block_rule_and_tfc_padding(start_gws, artifacts):
    """An AES-CBC SA's encrypted part must be a multiple of 16 (a valid ICV over 20 bytes is
    `bad_length`, before any decryption); TFC padding after the inner packet, in a GCM and a
    CBC SA, is tolerated: the inner packet reaches hostB without it and no drop counter moves."""
    gws = start_gws(cbc_config(artifacts))
    gw1 = gws["gw1"]
    gcm, cbc = HandEsp(L.load_sa("gw1", SPI)), HandCbc()
    tfc = bytes((7 * i + 3) & 0xFF for i in range(45))
    inner_gcm, inner_cbc, inner_cbc_ok = inner_udp(43150, size=20), inner_udp(CBC_DPORT, size=11), inner_udp(CBC_DPORT + 1)
    # (label, expected drop reason or None = delivered to hostB, SPI that counts it, frame, inner)
    cases = [
        ("CBC: encrypted part 20 bytes (a multiple of 4, not of 16), valid ICV", "bad_length", CBC_SPI,
         esp_frame(cbc.payload(1, inner_cbc, enc_len=20)), None),
        ("CBC: encrypted part 40 bytes, valid ICV", "bad_length", CBC_SPI,
         esp_frame(cbc.payload(2, inner_cbc, enc_len=40)), None),
        ("CBC: valid packet (control: the SA works)", None, CBC_SPI, esp_frame(cbc.payload(3, inner_cbc_ok)), inner_cbc_ok),
        ("CBC: 45 bytes of TFC padding after the inner packet", None, CBC_SPI,
         esp_frame(cbc.payload(4, inner_cbc, tfc=tfc)), inner_cbc),
        ("GCM: 45 bytes of TFC padding after the inner packet", None, SPI,
         esp_frame(gcm.payload(SPI, 1, inner_gcm + tfc)), inner_gcm),
    ]
    st0 = wait_rewrite(gw1)
    assert not any(drops_of(st0).values()), f"gw1 dropped something before the test: {drops_of(st0)}"
    cap = L.Capture("hostB", "b0", f"udp and src host {L.A_IP}", artifacts / "b0")
    problems = []
    for n, (label, reason, spi, frame, _) in enumerate(cases, start=1):
        st = gw1.stats()
        before, pk0 = drops_of(st), sa_in_packets(st, spi)
        send_raw([frame], artifacts / f"cbc-{n:02d}")
        st = gw1.wait_stats(lambda s: drops_of(s) != before or sa_in_packets(s, spi) > pk0, timeout=WAIT_S)
        st = wait_rewrite(gw1)
        d, pk1 = diff(before, drops_of(st)), sa_in_packets(st, spi)
        if reason is None and (d or pk1 != pk0 + 1):
            problems.append(f"#{n} {label}: want delivered; drops moved {d or 'none'}, SA {spi} packets {pk0} -> {pk1}")
        if reason is not None and (set(d) != {reason} or d[reason][1] != d[reason][0] + 1 or pk1 != pk0):
            problems.append(f"#{n} {label}: want drops.{reason} +1 only; drops moved {d or 'none'}, "
                            f"SA {spi} packets {pk0} -> {pk1}")
    from scapy.compat import raw
    got = {}
    for f in cap.stop(settle=0.5):
        ip = raw(f)[14:]
        total = struct.unpack("!H", ip[2:4])[0]
        if len(ip) != total and 14 + total >= 60:  # bytes after the packet: TFC padding forwarded
            problems.append(f"frame to hostB carries {len(ip) - total} bytes after its IP packet: {ip[total:].hex()}")
        got.setdefault(struct.unpack("!H", ip[22:24])[0], []).append(ip[:total])
    for n, (label, reason, _, _, inner) in enumerate(cases, start=1):
        if inner is None:
            continue
        dport = struct.unpack("!H", inner[22:24])[0]
        arrived = got.pop(dport, [])
        if len(arrived) != 1:
            problems.append(f"#{n} {label}: arrived {len(arrived)} times on b0, want 1")
        elif L.normalize_ttl_csum(arrived[0]) != L.normalize_ttl_csum(inner) or arrived[0][8] != inner[8] - 1:
            problems.append(f"#{n} {label}: hostB got {arrived[0].hex()}, want {inner.hex()} (TTL − 1; no TFC bytes)")
    if got:
        problems.append(f"unexpected datagrams on b0 (ports): {sorted(got)}")
    assert not problems, "\n".join(problems) + f"\nartifacts: {artifacts}"
