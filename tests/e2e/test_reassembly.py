"""Reassembly of outer IPv4 fragments at gw1 (RFC 4303 §3.4.1, RFC 791 §3.2)
in the netns testbed, against fragments we did not make:

- scapy encrypts for gw1's inbound SA 1001 (its SecurityAssociation, key from
  configs/ep1.toml), cuts the outer packet with scapy's own `fragment()`
  (several sizes; in order, reversed, shuffled, and the fragments of several
  datagrams interleaved) and injects them towards gw1 from the wan: hostB
  receives exactly the inner packets, once each, byte for byte (TTL − 1),
  and gw1's counters show the reassemblies and no drop;
- the same with ESP in UDP (RFC 3948) for a NAT-T variant of the configs
  (`udp_encap = true` on SA 1001 at both ends): a non-first fragment has no
  UDP header, and still reaches the reassembler;
- the real path: gw0 with `mtu = 576` on gw0-out (a derived config) gets
  datagrams from hostA's own stack with DF clear, sends their ESP as
  fragments (seen on the wan), gw1 reassembles them and hostB receives the
  datagrams intact;
- timeout: gw1 with `timeout_ms = 1000` gets only the first fragments of two
  datagrams; `frags_pending` shows them held, and after the timeout
  `reasm_timeout` counts them and nothing is held; nothing reaches hostB.
- forwarded fragments under port selectors (RFC 4301 §7, `reassembly.forwarded`):
  gw0's outbound SPD protects UDP to ports 45000-45999 with SA 1001 and
  discards the rest; scapy cuts hostA's datagrams to such ports with its own
  `fragment()` and sends the fragments (in order, reversed, shuffled) to gw0.
  Without the option only the first fragments (which carry the ports) leave,
  the others are discarded and hostB gets no datagram whole (its stack
  answers each after its reassembly time, shortened to FRAG_TIME_S here,
  with an ICMP Time Exceeded that reaches hostA); with it gw0
  reassembles each datagram, only ESP crosses the wan, hostB receives every
  datagram once, byte for byte, and gw0 counts the reassemblies and no drop;
- IPv6 outer fragments (RFC 8200 §4.5), gateways on the dual-stack configs
  ep0-v6/ep1-v6: scapy encrypts for gw1's inbound SA 1101 (IPv6 outer,
  key from configs/ep1-v6.toml), cuts the ESP with scapy's `fragment6()`
  (with no extension header, a Destination Options or a Hop-by-Hop header
  before the Fragment header; IPv6 and IPv4 inner packets), shuffles and
  interleaves the fragments and injects them from the wan: hostB receives
  exactly the inner packets, once each, byte for byte (hop limit / TTL − 1),
  gw1 counts the reassemblies and no drop.
"""
from __future__ import annotations

import random
import struct
import time

import pytest

import e2elib as L

SPI = 1001
NATT = 4500


def ip_bytes(frame_bytes: bytes) -> bytes:
    ip = frame_bytes[14:]
    return ip[:struct.unpack("!H", ip[2:4])[0]]


def derived_config(gw: str, dst_dir, tag: str, edit) -> "L.Path":
    """The gateway's sample config with `edit(text)` applied, written to the artifacts."""
    src = (L.CONFIG_DIR / L.GW_CONFIG[gw]).read_text()
    path = dst_dir / f"{gw}-{tag}.toml"
    text = edit(src)
    assert text != src, f"{tag}: the edit changed nothing in {L.GW_CONFIG[gw]}"
    path.write_text(text)
    return path


def natt(text: str) -> str:
    assert "spi = 1001\n" in text
    return text.replace("spi = 1001\n", "spi = 1001\nudp_encap = true\n", 1)


def inner_packet(n: int, size: int) -> bytes:
    """IPv4/UDP hostA → hostB, destination port 43000 + n, `size` bytes of UDP payload."""
    from scapy.compat import raw
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw
    return raw(IP(src=L.A_IP, dst=L.B_IP, ttl=64, id=0x3000 + n) / UDP(sport=40000, dport=43000 + n) /
               Raw(bytes((n * 7 + j) & 0xFF for j in range(size))))


def esp_fragments(sa, inner: bytes, seq: int, ident: int, fragsize: int):
    """scapy: ESP of `inner` (sequence number `seq`), outer identification
    `ident`, cut by scapy's fragment() into fragments of `fragsize` data bytes."""
    from scapy.compat import raw
    from scapy.layers.inet import IP, fragment
    outer = sa.encrypt(IP(inner), seq_num=seq)
    outer.id = ident
    outer.flags = 0
    del outer.chksum
    outer = IP(raw(outer))
    frags = fragment(outer, fragsize=fragsize)
    assert len(frags) >= 2, f"{len(raw(outer))}-byte datagram, fragsize {fragsize}: not fragmented"
    for f in frags:
        assert f.flags.MF or f.frag > 0
    return frags


def to_gw1(ip):
    from scapy.layers.l2 import Ether
    return Ether(dst=L.GW1_OUT_MAC, src=L.GW0_OUT_MAC) / ip


def received_by_dport(frames) -> dict[int, list[bytes]]:
    from scapy.compat import raw
    out: dict[int, list[bytes]] = {}
    for f in frames:
        ip = ip_bytes(raw(f))
        if len(ip) >= 28 and ip[9] == 17:
            out.setdefault(struct.unpack("!H", ip[22:24])[0], []).append(ip)
    return out


def check_delivered(got, inners: dict[int, bytes], ttl_drop: int, st: dict, what: str):
    by_port = received_by_dport(got)
    problems = []
    for dport, inner in inners.items():
        arrived = by_port.get(dport, [])
        if len(arrived) != 1:
            problems.append(f"{what}: datagram to port {dport} ({len(inner)} bytes) arrived {len(arrived)} times")
            continue
        out = arrived[0]
        if out[8] != inner[8] - ttl_drop:
            problems.append(f"{what}: port {dport}: TTL {out[8]}, sent {inner[8]}")
        if not L.ip_checksum_ok(out[:20]):
            problems.append(f"{what}: port {dport}: bad header checksum")
        if L.normalize_ttl_csum(out) != L.normalize_ttl_csum(inner):
            problems.append(f"{what}: port {dport}: differs\nsent {inner.hex()}\ngot  {out.hex()}")
    extra = set(by_port) - set(inners)
    if extra:
        problems.append(f"{what}: unexpected datagrams to ports {sorted(extra)}")
    assert not problems, "\n".join(problems) + f"\ngw1 drops: { {k: v for k, v in st.get('drops', {}).items() if v} }"


def inject_and_check(gw1, sa, artifacts, tag: str):
    """scapy-made fragments of 12 datagrams into gw1: every inner packet
    arrives once at hostB, counters exact."""
    rng = random.Random(4303)
    # (inner UDP payload, fragment data size, order); at most 16 fragments a
    # datagram (gw1's default max_fragments): 1400 bytes need 96 or more.
    cases = [(200, 64, "reversed"), (200, 128, "shuffled"), (700, 128, "in order"), (700, 256, "shuffled"),
             (700, 512, "reversed"), (1400, 96, "shuffled"), (1400, 256, "reversed"), (1400, 512, "in order"),
             (1400, 1000, "shuffled"), (1400, 1200, "reversed"), (1000, 480, "shuffled"), (1000, 1008, "in order")]
    inners, per_datagram = {}, []
    for n, (size, fragsize, order) in enumerate(cases):
        inner = inner_packet(n, size)
        inners[43000 + n] = inner
        frags = esp_fragments(sa, inner, seq=n + 1, ident=0x5000 + n, fragsize=fragsize)
        assert len(frags) <= 16, f"case {n}: {len(frags)} fragments"
        if order == "reversed":
            frags = frags[::-1]
        elif order == "shuffled":
            rng.shuffle(frags)
        per_datagram.append([to_gw1(f) for f in frags])
    # The first half datagram by datagram, the second half interleaved.
    half = len(per_datagram) // 2
    frames = [f for d in per_datagram[:half] for f in d]
    rest = [list(d) for d in per_datagram[half:]]
    while any(rest):
        for d in rest:
            if d:
                frames.append(d.pop(0))
    nfrags = sum(len(d) for d in per_datagram)

    before = gw1.stats()
    cap = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / f"b0-{tag}")
    L.send_frames("wan", "wan1", frames, artifacts / f"injected-{tag}", gap_ms=1)
    want = before.get("reassembled", 0) + len(per_datagram)
    st = gw1.wait_stats(lambda s: s.get("reassembled", 0) >= want and s.get("frags_pending", 1) == 0, timeout=10)
    got = cap.stop(settle=1.0)
    check_delivered(got, inners, 1, st, tag)
    assert st["reassembled"] - before.get("reassembled", 0) == len(per_datagram), st
    assert st["frags_received"] - before.get("frags_received", 0) == nfrags, st
    assert st["frags_reassembled"] - before.get("frags_reassembled", 0) == nfrags, st
    assert st["frags_pending"] == 0, st
    moved = {k: v - before["drops"].get(k, 0) for k, v in st["drops"].items() if v != before["drops"].get(k, 0)}
    assert not moved, f"{tag}: drop counters moved: {moved}"
    sa_in = next(s for s in st["sas"] if s["spi"] == SPI and s["direction"] == "inbound")
    assert sa_in["packets"] >= len(per_datagram), sa_in
    print(f"\n{tag}: {nfrags} scapy fragments of {len(per_datagram)} datagrams → {len(got)} packets at hostB")


def test_scapy_esp_fragments_reassembled_at_gw1(gws, artifacts):
    info = L.load_sa("gw1", SPI)
    assert info.direction == "inbound", info
    inject_and_check(gws["gw1"], L.scapy_sa(info), artifacts, "esp")


def test_scapy_esp_in_udp_fragments_reassembled_at_gw1(start_gws, artifacts):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.ipsec import ESP, SecurityAssociation
    gw = start_gws({g: derived_config(g, artifacts, "natt", natt) for g in ("gw0", "gw1")})
    info = L.load_sa("gw1", SPI)
    sa = SecurityAssociation(ESP, spi=info.spi, crypt_algo="AES-GCM", crypt_key=info.key, auth_algo="NULL",
                             tunnel_header=IP(src=info.src, dst=info.dst), nat_t_header=UDP(sport=NATT, dport=NATT))
    probe = esp_fragments(sa, inner_packet(0, 700), seq=99, ident=1, fragsize=256)
    assert probe[0].proto == 17 and probe[1].proto == 17, "scapy built ESP in UDP"
    inject_and_check(gw["gw1"], sa, artifacts, "natt")


def test_gw0_fragments_gw1_reassembles(start_gws, artifacts):
    gw0_cfg = derived_config("gw0", artifacts, "mtu576", lambda t: t.replace(
        'interface = "gw0-out"', 'interface = "gw0-out"\nmtu = 576', 1))
    gw = start_gws({"gw0": gw0_cfg, "gw1": L.CONFIG_DIR / L.GW_CONFIG["gw1"]})
    sizes = [100, 600, 1000, 1400, 1472]
    cap_a = L.Capture("hostA", "a0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "a0")
    cap_b = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "b0")
    cap_w = L.Capture("wan", "br0", f"ip and src host {L.GW0_OUT_IP} and dst host {L.GW1_OUT_IP}", artifacts / "wan")
    L.send_udp("hostA", L.A_IP, L.B_IP, [
        {"sport": 40000, "dport": 44000 + i, "payload": bytes((i + j) & 0xFF for j in range(size)), "no_df": True}
        for i, size in enumerate(sizes)])
    st1 = gw["gw1"].wait_stats(lambda s: sum(x["packets"] for x in s["sas"] if x["direction"] == "inbound") >= len(sizes),
                               timeout=10)
    sent = cap_a.stop(settle=0.5)
    got = cap_b.stop(settle=0.5)
    wan = cap_w.stop()
    from scapy.compat import raw
    sent_ips = {struct.unpack("!H", ip_bytes(raw(f))[22:24])[0]: ip_bytes(raw(f)) for f in sent}
    assert len(sent_ips) == len(sizes), f"hostA sent {len(sent_ips)} datagrams, want {len(sizes)}"
    for dport, ip in sent_ips.items():
        assert struct.unpack("!H", ip[6:8])[0] & 0x4000 == 0, f"port {dport}: hostA set DF"
    outer = [ip_bytes(raw(f)) for f in wan]
    frags = [ip for ip in outer if struct.unpack("!H", ip[6:8])[0] & 0x3FFF]
    assert all(len(ip) <= 576 for ip in outer), [len(ip) for ip in outer]
    assert len(frags) > len(sizes), f"gw0 sent {len(frags)} fragments for {len(sizes)} datagrams"
    assert all(ip[9] == 50 for ip in outer), "only ESP on the wan"
    check_delivered(got, sent_ips, 2, st1, "gw0 → gw1")
    st0 = gw["gw0"].stats()
    assert st0["frags_sent"] == len(frags), (st0["frags_sent"], len(frags))
    st1 = gw["gw1"].wait_stats(lambda s: s.get("frags_reassembled", 0) >= len(frags), timeout=5)
    assert st1["frags_received"] == len(frags) and st1["frags_reassembled"] == len(frags), st1
    whole = len(outer) - len(frags)
    assert st1["reassembled"] == len(sizes) - whole, (st1["reassembled"], len(sizes), whole)
    assert not {k: v for k, v in st1["drops"].items() if v}, st1["drops"]
    print(f"\n{len(sizes)} datagrams from hostA: {len(frags)} fragments on the wan "
          f"({whole} unfragmented), {st1['reassembled']} reassembled at gw1, {len(got)} at hostB")


def test_incomplete_datagrams_time_out(start_gws, artifacts):
    timeout_ms = 3000  # long enough to see the fragments held in the once-a-second stats file
    gw1_cfg = derived_config("gw1", artifacts, "timeout", lambda t: t + f"\n[reassembly]\ntimeout_ms = {timeout_ms}\n")
    gw = start_gws({"gw0": L.CONFIG_DIR / L.GW_CONFIG["gw0"], "gw1": gw1_cfg})
    gw1 = gw["gw1"]
    sa = L.scapy_sa(L.load_sa("gw1", SPI))
    held = []
    for n in range(2):
        frags = esp_fragments(sa, inner_packet(n, 1000), seq=n + 1, ident=0x6000 + n, fragsize=400)
        held += [to_gw1(f) for f in frags[:-1]]  # every fragment but the last
    cap = L.Capture("hostB", "b0", f"src host {L.A_IP}", artifacts / "b0")
    t0 = time.monotonic()
    L.send_frames("wan", "wan1", held, artifacts / "first-fragments", gap_ms=1)
    st = gw1.wait_stats(lambda s: s.get("frags_pending", 0) == len(held), timeout=2.5)
    assert st.get("frags_pending") == len(held), f"fragments not seen held: {st}"
    assert st["drops"]["reasm_timeout"] == 0, st["drops"]
    st = gw1.wait_stats(lambda s: s["drops"]["reasm_timeout"] >= len(held), timeout=timeout_ms / 1000 + 5)
    elapsed = time.monotonic() - t0
    got = cap.stop(settle=0.5)
    assert st["drops"]["reasm_timeout"] == len(held), st["drops"]
    assert st["frags_pending"] == 0, st
    assert st["frags_received"] == len(held) and st["reassembled"] == 0, st
    assert elapsed >= timeout_ms / 1000, f"timed out after {elapsed:.2f} s, before the {timeout_ms} ms timeout"
    others = {k: v for k, v in st["drops"].items() if v and k != "reasm_timeout"}
    assert not others, others
    assert not got, f"{len(got)} frames reached hostB"
    print(f"\n{len(held)} fragments held, counted under reasm_timeout {elapsed:.1f} s after sending")


V6_CONFIG = {"gw0": "ep0-v6.toml", "gw1": "ep1-v6.toml"}
SPI6 = 1101


def test_scapy_ipv6_fragments_reassembled_at_gw1(start_gws, artifacts):
    import tomllib
    from scapy.compat import raw
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, PadN, fragment6
    from scapy.layers.ipsec import ESP, SecurityAssociation
    from scapy.packet import Raw

    gw = start_gws({g: L.CONFIG_DIR / f for g, f in V6_CONFIG.items()})
    gw1 = gw["gw1"]
    cfg = tomllib.loads((L.CONFIG_DIR / V6_CONFIG["gw1"]).read_text())
    sa_cfg = next(x for x in cfg["sa"] if int(x["spi"]) == SPI6)
    assert sa_cfg["direction"] == "inbound" and ":" in sa_cfg["tunnel_dst"], sa_cfg
    assert (sa_cfg["tunnel_src"], sa_cfg["tunnel_dst"]) == (L.GW0_OUT_IP6, L.GW1_OUT_IP6)
    sa = SecurityAssociation(ESP, spi=SPI6, crypt_algo="AES-GCM", crypt_key=bytes.fromhex(sa_cfg["key"]),
                             auth_algo="NULL", tunnel_header=IPv6(src=L.GW0_OUT_IP6, dst=L.GW1_OUT_IP6))
    rng = random.Random(8200)

    def unfrag(kind):
        opts = [PadN(optdata=b"\0\0\0\0")]
        return {"none": [], "dst": [IPv6ExtHdrDestOpt(options=opts)], "hbh": [IPv6ExtHdrHopByHop(options=opts)],
                "both": [IPv6ExtHdrHopByHop(options=opts), IPv6ExtHdrDestOpt(options=opts)]}[kind]

    # (inner family, UDP payload size, fragment6 size, extension headers before the Fragment header, order);
    # IPv4 inner to UDP ports 6000-6999 (v4-in-v6), IPv6 inner anything (v6-in-v6).
    cases = [(6, 1200, 1280, "none", "reversed"), (6, 1200, 200, "none", "shuffled"), (6, 700, 300, "dst", "shuffled"),
             (6, 1000, 400, "hbh", "reversed"), (6, 1400, 600, "both", "shuffled"), (6, 100, 96, "none", "in order"),
             (4, 1300, 500, "none", "shuffled"), (4, 800, 256, "dst", "reversed")]
    inners, per_datagram = {}, []
    for n, (fam, size, fragsize, ext, order) in enumerate(cases):
        dport = 6100 + n if fam == 4 else 45000 + n
        data = Raw(bytes((n * 11 + j) & 0xFF for j in range(size)))
        if fam == 6:
            inner = IPv6(src=L.A_IP6, dst=L.B_IP6, hlim=64) / UDP(sport=40000, dport=dport) / data
        else:
            inner = IP(src=L.A_IP, dst=L.B_IP, ttl=64, id=0x3100 + n) / UDP(sport=40000, dport=dport) / data
        inners[dport] = raw(inner)
        esp = sa.encrypt(inner.__class__(raw(inner)), seq_num=n + 1)
        assert esp[IPv6].nh == 50
        head = IPv6(src=L.GW0_OUT_IP6, dst=L.GW1_OUT_IP6, hlim=64)
        for h in unfrag(ext):
            head = head / h
        frags = fragment6(head / IPv6ExtHdrFragment(nh=50, id=0x7000_0000 + n) / Raw(raw(esp[ESP])), fragsize)
        assert 2 <= len(frags) <= 16, f"case {n}: {len(frags)} fragments"
        if order == "reversed":
            frags = frags[::-1]
        elif order == "shuffled":
            rng.shuffle(frags)
        per_datagram.append([to_gw1(f) for f in frags])
    half = len(per_datagram) // 2
    frames = [f for d in per_datagram[:half] for f in d]
    rest = [list(d) for d in per_datagram[half:]]
    while any(rest):
        for d in rest:
            if d:
                frames.append(d.pop(0))
    nfrags = sum(len(d) for d in per_datagram)

    before = gw1.stats()
    cap = L.Capture("hostB", "b0", "udp", artifacts / "b0-ipv6")
    L.send_frames("wan", "wan1", frames, artifacts / "injected-ipv6", gap_ms=1)
    want = before.get("reassembled", 0) + len(per_datagram)
    st = gw1.wait_stats(lambda s: s.get("reassembled", 0) >= want and s.get("frags_pending", 1) == 0, timeout=10)
    got = cap.stop(settle=1.0)

    by_port: dict[int, list[bytes]] = {}
    for f in got:
        b = raw(f)[14:]
        if b[0] >> 4 == 6:
            ip, l4 = b[:40 + struct.unpack("!H", b[4:6])[0]], 40
            ok = b[6] == 17
        else:
            ip, l4 = ip_bytes(raw(f)), 20
            ok = b[9] == 17
        if ok:
            by_port.setdefault(struct.unpack("!H", ip[l4 + 2:l4 + 4])[0], []).append(ip)
    problems = []
    for dport, inner in inners.items():
        arrived = by_port.get(dport, [])
        if len(arrived) != 1:
            problems.append(f"port {dport} ({len(inner)} bytes): arrived {len(arrived)} times")
            continue
        out = arrived[0]
        if inner[0] >> 4 == 6:
            want_ip = inner[:7] + bytes([inner[7] - 1]) + inner[8:]
            if out != want_ip:
                problems.append(f"port {dport}: differs\nsent {inner.hex()}\ngot  {out.hex()}")
        elif out[8] != inner[8] - 1 or not L.ip_checksum_ok(out[:20]) or L.normalize_ttl_csum(out) != L.normalize_ttl_csum(inner):
            problems.append(f"port {dport}: differs\nsent {inner.hex()}\ngot  {out.hex()}")
    extra = set(by_port) - set(inners)
    if extra:
        problems.append(f"unexpected datagrams to ports {sorted(extra)}")
    assert not problems, "\n".join(problems) + f"\ngw1 drops: { {k: v for k, v in st['drops'].items() if v} }"
    assert st["reassembled"] - before.get("reassembled", 0) == len(per_datagram), st
    assert st["frags_received"] - before.get("frags_received", 0) == nfrags, st
    assert st["frags_reassembled"] - before.get("frags_reassembled", 0) == nfrags, st
    assert st["frags_pending"] == 0, st
    moved = {k: v - before["drops"].get(k, 0) for k, v in st["drops"].items() if v != before["drops"].get(k, 0)}
    assert not moved, f"drop counters moved: {moved}"
    sa_in = next(s for s in st["sas"] if s["spi"] == SPI6 and s["direction"] == "inbound")
    assert sa_in["packets"] >= len(per_datagram), sa_in
    print(f"\nipv6: {nfrags} scapy fragment6() fragments of {len(per_datagram)} datagrams → {len(got)} packets at hostB")


FRAG_TIME_S = 2


def port_split(text: str) -> str:
    """gw0's outbound SPD: UDP to ports 45000-45999 on SA 1001, the rest of
    the site-to-site traffic discarded."""
    old = 'direction = "outbound"\nsrc = "192.0.2.0/24"\ndst = "198.51.100.0/24"\npriority = 10\naction = "protect 1001"\n'
    assert old in text
    new = (old.replace("priority = 10", 'protocol = "udp"\ndst_ports = "45000-45999"\npriority = 10') +
           '\n[[policy]]\ndirection = "outbound"\nsrc = "192.0.2.0/24"\ndst = "198.51.100.0/24"\npriority = 20\naction = "discard"\n')
    return text.replace(old, new, 1)


@pytest.mark.parametrize("forwarded", [False, True], ids=["forwarded-off", "forwarded-on"])
def test_port_selected_fragments_from_the_inside(start_gws, artifacts, forwarded, request):
    from scapy.compat import raw
    from scapy.layers.inet import IP, UDP, fragment
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    extra = "\n[reassembly]\nforwarded = true\n" if forwarded else ""
    gw0_cfg = derived_config("gw0", artifacts, "ports-" + ("on" if forwarded else "off"), lambda t: port_split(t) + extra)
    gw = start_gws({"gw0": gw0_cfg, "gw1": L.CONFIG_DIR / L.GW_CONFIG["gw1"]})
    rng = random.Random(7)
    sizes = [600, 1000, 1400]
    inners, frames = {}, []
    for n, size in enumerate(sizes):
        ip = IP(raw(IP(src=L.A_IP, dst=L.B_IP, ttl=64, id=0x4500 + n, flags=0) / UDP(sport=40000, dport=45000 + n) /
                    Raw(bytes((n * 11 + j) & 0xFF for j in range(size)))))
        inners[45000 + n] = raw(ip)
        frags = [Ether(dst=L.GW0_IN_MAC, src=L.A_MAC) / f for f in fragment(ip, fragsize=480)]
        assert len(frags) >= 2
        if n == 1:
            frags.reverse()
        elif n == 2:
            rng.shuffle(frags)
        frames += frags
    nfrags = len(frames)
    if not forwarded:
        # hostB's stack will hold the first fragments; left there, each
        # expires after ipfrag_time (30 s) with an ICMP Time Exceeded to
        # hostA (RFC 792; RFC 1122 §3.3.2) through the tunnel, into whatever
        # test runs then (test_rekey counted 3 such on its reverse SAs). A
        # short reassembly time (read when the queue is made, so set before
        # the fragments) lets them expire here, and below waits for them.
        frag_time = L.run_ns("hostB", "sysctl", "-n", "net.ipv4.ipfrag_time").stdout.strip()
        L.run_ns("hostB", "sysctl", "-qw", f"net.ipv4.ipfrag_time={FRAG_TIME_S}")
        request.addfinalizer(lambda: L.run_ns("hostB", "sysctl", "-qw", f"net.ipv4.ipfrag_time={frag_time}"))
        cap_a = L.Capture("hostA", "a0", f"icmp and src host {L.B_IP} and dst host {L.A_IP}", artifacts / "a0-icmp")
    cap_b = L.Capture("hostB", "b0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "b0")
    cap_w = L.Capture("wan", "br0", f"ip and src host {L.GW0_OUT_IP} and dst host {L.GW1_OUT_IP}", artifacts / "wan")
    L.send_frames("hostA", "a0", frames, artifacts / "frags")
    if forwarded:
        st1 = gw["gw1"].wait_stats(lambda s: sum(x["packets"] for x in s["sas"] if x["direction"] == "inbound") >= len(sizes),
                                   timeout=10)
    st0 = gw["gw0"].wait_stats(lambda s: s.get("frags_received", 0) + sum(s["drops"].values()) + s.get("frags_pending", 0) >= nfrags - len(sizes),
                               timeout=10)
    got = cap_b.stop(settle=0.5)
    wan = cap_w.stop()
    assert all(ip_bytes(raw(f))[9] == 50 for f in wan), "only ESP on the wan"
    if not forwarded:
        # The first fragments (ports) take SA 1001 and reach hostB as
        # fragments; the others (no ports) meet the DISCARD entry.
        st0 = gw["gw0"].stats()
        assert st0["frags_received"] == 0, st0
        assert L.nonzero_drops(st0) == {"policy_discard": nfrags - len(sizes)}, L.nonzero_drops(st0)
        firsts = [ip_bytes(raw(f)) for f in got]
        assert len(firsts) == len(sizes), f"hostB got {len(firsts)} frames, want the {len(sizes)} first fragments"
        assert all(struct.unpack("!H", ip[6:8])[0] == 0x2000 for ip in firsts), "first fragments only (MF, offset 0)"
        # hostB's incomplete datagrams expire now, each answered by a Time
        # Exceeded (fragment reassembly time exceeded) that reaches hostA.
        L.wait_for(lambda: L.frag_queues("hostB")["FRAG"] == 0, "hostB's fragment queues expired", timeout=FRAG_TIME_S + 5)
        icmp = [ip_bytes(raw(f)) for f in cap_a.stop(settle=1.0)]
        expired = [ip for ip in icmp if ip[20:22] == bytes([11, 1])]
        assert len(expired) == len(sizes) == len(icmp), \
            f"ICMP at hostA: {[ip[20:22].hex() for ip in icmp]}, want {len(sizes)} Time Exceeded (0b01)"
        return
    check_delivered(got, inners, 2, st1, "hostA's fragments → gw0 → gw1")
    st0 = gw["gw0"].wait_stats(lambda s: s.get("reassembled", 0) >= len(sizes), timeout=5)
    assert (st0["frags_received"], st0["frags_reassembled"], st0["reassembled"]) == (nfrags, nfrags, len(sizes)), st0
    assert not L.nonzero_drops(st0), L.nonzero_drops(st0)
    assert len(wan) == len(sizes), f"{len(wan)} ESP packets on the wan for {len(sizes)} datagrams"
    print(f"\n{len(sizes)} datagrams in {nfrags} fragments from hostA: {st0['reassembled']} reassembled at gw0, "
          f"{len(wan)} ESP packets on the wan, {len(got)} datagrams at hostB")
