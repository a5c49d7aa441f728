"""Interop, secgw encrypts → scapy decrypts: the ESP that gw0 puts on the wan
for SPI 1001 decrypts with scapy's SecurityAssociation (key and salt from
configs/ep0.toml) to exactly the packet hostA sent, TTL−1 and checksum aside;
the outer header follows RFC 4301/4303 (TTL 64, protocol 50, DS copied,
sequence numbers 1, 2, 3, … on a fresh gateway, unique IVs, RFC 4303 padding).
Once with the sample configs (padding to 4 bytes) and once with SA 1001's
`pad_align = 16` (the ESP payload ends on 16 bytes, with the least padding
that does it; scapy needs nothing for it, RFC 4303 §2.4)."""
import struct

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import e2elib as L

# (UDP payload size, TOS): sizes that exercise every pad length, and one DSCP EF packet.
DATAGRAMS = [(0, 0), (1, 0), (2, 0), (3, 0), (100, 0), (1400, 0), (50, 0xB8)]


def ip_bytes(frame_bytes: bytes) -> bytes:
    ip = frame_bytes[14:]
    return ip[:struct.unpack("!H", ip[2:4])[0]]


def test_gw0_esp_decrypts_with_scapy(gws, artifacts):
    check_gw0_esp(artifacts, align=4)


def test_gw0_esp_with_pad_align_16_decrypts_with_scapy(start_gws, artifacts):
    text = (L.CONFIG_DIR / L.GW_CONFIG["gw0"]).read_text()
    assert text.count("spi = 1001\n") == 1
    cfg = artifacts / "gw0-pad16.toml"
    cfg.write_text(text.replace("spi = 1001\n", "spi = 1001\npad_align = 16\n"))
    start_gws({"gw0": cfg, "gw1": L.CONFIG_DIR / L.GW_CONFIG["gw1"]})
    check_gw0_esp(artifacts, align=16)


def check_gw0_esp(artifacts, align: int):
    """Sends DATAGRAMS from hostA and checks gw0's ESP for them (module doc),
    the ESP payload + trailer padded to `align` bytes with the least padding."""
    from scapy.layers.inet import IP
    from scapy.compat import raw

    info = L.load_sa("gw0", 1001)
    assert info.direction == "outbound", info.direction
    assert (info.src, info.dst) == (L.GW0_OUT_IP, L.GW1_OUT_IP)
    sa = L.scapy_sa(info)
    cfg_sa = next(s for s in L.load_config("gw0")["sa"] if int(s["spi"]) == 1001)

    cap_a = L.Capture("hostA", "a0", f"udp and src host {L.A_IP} and dst host {L.B_IP}", artifacts / "a0")
    cap_w = L.Capture("wan", "br0", f"ip proto 50 and src host {L.GW0_OUT_IP}", artifacts / "wan")
    L.send_udp("hostA", L.A_IP, L.B_IP, [
        {"sport": 40000, "dport": 41000 + i, "payload": bytes((i + j) & 0xFF for j in range(size)), "tos": tos}
        for i, (size, tos) in enumerate(DATAGRAMS)])
    sent = [ip_bytes(raw(f)) for f in cap_a.stop(settle=0.5)]
    esp_frames = cap_w.stop()

    assert len(sent) == len(DATAGRAMS), f"captured {len(sent)} datagrams on a0, sent {len(DATAGRAMS)}"
    assert len(esp_frames) == len(DATAGRAMS), \
        f"{len(esp_frames)} ESP frames from gw0 on the wan for {len(DATAGRAMS)} datagrams"

    key, salt = info.key[:-4], info.key[-4:]
    ivs = set()
    for n, (frame, inner_sent) in enumerate(zip(esp_frames, sent), start=1):
        fb = raw(frame)
        assert fb[0:6] == bytes.fromhex(L.GW1_OUT_MAC.replace(":", "")), f"#{n}: dst MAC {fb[0:6].hex(':')}"
        assert fb[6:12] == bytes.fromhex(L.GW0_OUT_MAC.replace(":", "")), f"#{n}: src MAC {fb[6:12].hex(':')}"
        outer = ip_bytes(fb)
        assert outer[0] == 0x45, f"#{n}: outer version/IHL {outer[0]:#x}"
        assert outer[8] == 64, f"#{n}: outer TTL {outer[8]}"
        assert outer[9] == 50, f"#{n}: outer protocol {outer[9]}"
        assert outer[1] == inner_sent[1], f"#{n}: outer DS/ECN {outer[1]:#x}, inner {inner_sent[1]:#x}"
        assert L.ip_checksum_ok(outer[:20]), f"#{n}: bad outer header checksum"
        assert outer[12:16] == bytes(map(int, L.GW0_OUT_IP.split("."))) and \
            outer[16:20] == bytes(map(int, L.GW1_OUT_IP.split("."))), f"#{n}: outer addresses"
        frag = struct.unpack("!H", outer[6:8])[0]
        assert frag & 0x3FFF == 0, f"#{n}: outer header is a fragment ({frag:#x})"
        if str(cfg_sa.get("df", "copy")).lower() == "copy":
            inner_df = struct.unpack("!H", inner_sent[6:8])[0] & 0x4000
            assert frag & 0x4000 == inner_df, f"#{n}: DF not copied (outer {frag:#x}, inner DF {inner_df:#x})"
        spi, seq = struct.unpack("!II", outer[20:28])
        assert spi == 1001, f"#{n}: SPI {spi}"
        assert seq == n, f"ESP sequence numbers must be 1, 2, 3, … on a fresh SA: frame #{n} has {seq}"
        iv = outer[28:36]
        assert iv not in ivs, f"#{n}: explicit IV {iv.hex()} repeated"
        ivs.add(iv)

        # scapy (the interop peer) decrypts and decapsulates
        inner = sa.decrypt(IP(outer))
        got = raw(inner)
        assert L.ip_checksum_ok(got[:(got[0] & 15) * 4]), f"#{n}: bad inner header checksum after TTL decrement"
        assert got[8] == inner_sent[8] - 1, f"#{n}: inner TTL {got[8]}, sent {inner_sent[8]}"
        assert L.normalize_ttl_csum(got) == L.normalize_ttl_csum(inner_sent), \
            f"#{n}: inner packet differs from what hostA sent\nsent {inner_sent.hex()}\ngot  {got.hex()}"

        # RFC 4303 §2.4–2.6 trailer, checked by hand with the raw AEAD (RFC 4106)
        pt = AESGCM(key).decrypt(salt + iv, outer[36:], outer[20:28])
        padlen, nh = pt[-2], pt[-1]
        assert nh == 4, f"#{n}: next header {nh}, want 4 (IPv4)"
        assert len(pt) % align == 0, f"#{n}: ESP payload+trailer {len(pt)} bytes, not {align}-byte aligned"
        assert padlen < align, f"#{n}: {padlen} bytes of padding, more than {align}-byte alignment needs"
        assert pt[-2 - padlen:-2] == bytes(range(1, padlen + 1)), f"#{n}: padding {pt[-2 - padlen:-2].hex()} not 1,2,3,…"
        assert pt[:-2 - padlen] == got, f"#{n}: scapy and raw AEAD disagree"

    tos_frames = [raw(f) for f in esp_frames if ip_bytes(raw(f))[1] == 0xB8]
    assert len(tos_frames) == 1, "the TOS 0xb8 datagram must leave gw0 with outer TOS 0xb8"
