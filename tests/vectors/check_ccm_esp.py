#!/usr/bin/env python3
"""Independently verify tests/vectors/ccm_esp.json with pyca/cryptography.

For each AES-CCM ESP packet (RFC 4309):
  AESCCM(key, icv_len).decrypt(salt || iv, ciphertext || icv, aad) == plaintext
  nonce == salt || iv (3 + 8 octets), aad == spi || seq or spi || seq_hi || seq_lo
  packet == spi || seq_lo || iv || ciphertext || icv
  plaintext == inner IPv4 packet || padding 1, 2, ... || pad_length || next_header,
  a multiple of 4 octets (RFC 4309 section 3.2)
and a flipped ICV bit fails to decrypt.

Prints "N passed, M failed" and exits non-zero if anything fails.
Usage: python3 check_ccm_esp.py [path/to/ccm_esp.json]
"""
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESCCM

from vectorlib import h, load, run, trailer_errors


def check(v):
    errs = []
    key, salt, iv, spi, seq = (h(v[k]) for k in ("key", "salt", "iv", "spi", "seq"))
    pt, aad, ct, icv = (h(v[k]) for k in ("plaintext", "aad", "ciphertext", "icv"))
    n = v["icv_len"]
    if len(key) not in (16, 24, 32) or len(salt) != 3 or len(iv) != 8 or len(spi) != 4 or n not in (8, 12, 16):
        errs.append("key/salt/iv/spi/icv length")
    want_aad = spi + seq if len(seq) in (4, 8) else b""
    if aad != want_aad or (len(seq) == 8) != v["esn"]:
        errs.append("aad != spi || seq (|| with ESN: seq_hi || seq_lo)")
    if h(v["nonce"]) != salt + iv:
        errs.append("nonce != salt || iv")
    c = AESCCM(key, tag_length=n)
    try:
        if c.decrypt(salt + iv, ct + icv, aad) != pt:
            errs.append("decrypt != plaintext")
    except InvalidTag:
        errs.append("ICV does not verify")
    bad = bytearray(icv)
    bad[-1] ^= 1
    try:
        c.decrypt(salt + iv, ct + bytes(bad), aad)
        errs.append("a flipped ICV bit verified")
    except InvalidTag:
        pass
    if h(v["packet"]) != spi + seq[-4:] + iv + ct + icv:
        errs.append("packet != spi || seq_lo || iv || ciphertext || icv")
    errs += trailer_errors(pt, v["next_header"], v["pad_length"])
    if len(pt) % 4:
        errs.append("plaintext not a multiple of 4 octets")
    inner = pt[:len(pt) - 2 - pt[-2]]
    if v["next_header"] == 4 and int.from_bytes(inner[2:4], "big") != len(inner):
        errs.append("tunnel payload is not one whole IPv4 packet")
    return errs


def main():
    doc = load("ccm_esp.json")
    return run([(v.get("name"), lambda v=v: check(v)) for v in doc["vectors"]])


if __name__ == "__main__":
    sys.exit(main())
