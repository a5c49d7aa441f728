#!/usr/bin/env python3
"""Independently verify tests/vectors/cbc_esp.json with pyca/cryptography.

cipher_vectors (RFC 3602 section 4, Cases #1-#4; NIST SP 800-38A F.2.3, AES-192):
  AES-CBC(key, iv).encrypt(plaintext) == ciphertext, and decrypts back
esp_vectors (Cases #5-#8, encryption-only ESP packets):
  packet == spi || seq || iv || ciphertext
  AES-CBC(key, iv).decrypt(ciphertext) == plaintext
  plaintext == payload || 1, 2, ..., pad_length || pad_length || next_header,
  a multiple of 16 octets; next_header 4 (tunnel) carries a whole IPv4
  packet, next_header 1 (transport) an ICMP message
  outer_ip_header (where given): IPv4, protocol 50, total length
  20 + len(packet), valid header checksum
  icv_hmac_sha1_96 == HMAC-SHA1(auth_key_sha1, packet)[:12]          (RFC 2404)
  icv_hmac_sha256_128 == HMAC-SHA256(auth_key_sha256, packet)[:16]   (RFC 4868)

Prints "N passed, M failed" and exits non-zero if anything fails.
Usage: python3 check_cbc_esp.py [path/to/cbc_esp.json]
"""
import sys

from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from vectorlib import h, load, run



def cbc(key, iv):
    return Cipher(algorithms.AES(key), modes.CBC(iv))


def mac(alg, key, data):
    m = hmac.HMAC(key, alg)
    m.update(data)
    return m.finalize()


def ip_checksum_ok(hdr):
    s = sum(int.from_bytes(hdr[i:i + 2], "big") for i in range(0, len(hdr), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def check_cipher(v, doc):
    errs = []
    key, iv, pt, ct = (h(v[k]) for k in ("key", "iv", "plaintext", "ciphertext"))
    e = cbc(key, iv).encryptor()
    if e.update(pt) + e.finalize() != ct:
        errs.append("encrypt mismatch")
    d = cbc(key, iv).decryptor()
    if d.update(ct) + d.finalize() != pt:
        errs.append("decrypt mismatch")
    return errs


def check_esp(v, doc):
    errs = []
    key, iv, spi, seq = (h(v[k]) for k in ("key", "iv", "spi", "seq"))
    pt, ct, pkt, payload = (h(v[k]) for k in ("plaintext", "ciphertext", "packet", "payload"))
    if len(iv) != 16 or len(spi) != 4 or len(seq) != 4:
        errs.append("iv/spi/seq length")
    if pkt != spi + seq + iv + ct:
        errs.append("packet != spi || seq || iv || ciphertext")
    if len(ct) % 16 or len(pt) != len(ct):
        errs.append("ciphertext not whole blocks / plaintext length")
    d = cbc(key, iv).decryptor()
    if d.update(ct) + d.finalize() != pt:
        errs.append("AES-CBC decrypt of the packet != plaintext")
    n = v["pad_length"]
    if pt != payload + bytes(range(1, n + 1)) + bytes([n, v["next_header"]]):
        errs.append("plaintext != payload || 1..pad_length || pad_length || next_header")
    if v["next_header"] == 4 and (payload[0] >> 4 != 4 or int.from_bytes(payload[2:4], "big") != len(payload)):
        errs.append("tunnel payload is not one whole IPv4 packet")
    if v["next_header"] == 4 and not ip_checksum_ok(payload[:20]):
        errs.append("inner IPv4 header checksum")
    if "outer_ip_header" in v:
        o = h(v["outer_ip_header"])
        if o[9] != 50 or int.from_bytes(o[2:4], "big") != 20 + len(pkt) or not ip_checksum_ok(o):
            errs.append("outer IPv4 header: protocol/length/checksum")
    if mac(hashes.SHA1(), h(doc["auth_key_sha1"]), pkt)[:12] != h(v["icv_hmac_sha1_96"]):
        errs.append("icv_hmac_sha1_96")
    if mac(hashes.SHA256(), h(doc["auth_key_sha256"]), pkt)[:16] != h(v["icv_hmac_sha256_128"]):
        errs.append("icv_hmac_sha256_128")
    return errs


def main():
    doc = load("cbc_esp.json")
    cases = [(v.get("name"), lambda v=v: check_cipher(v, doc)) for v in doc["cipher_vectors"]]
    cases += [(v.get("name"), lambda v=v: check_esp(v, doc)) for v in doc["esp_vectors"]]
    return run(cases)


if __name__ == "__main__":
    sys.exit(main())
