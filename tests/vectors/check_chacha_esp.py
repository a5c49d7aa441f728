#!/usr/bin/env python3
"""Independently verify tests/vectors/chacha_esp.json with pyca/cryptography.

For the RFC 7634 Appendix A ESP example:
  ChaCha20Poly1305(key).encrypt(salt || iv, plaintext, aad) == ciphertext || icv
  aad == spi || seq, nonce == salt || iv
  packet == spi || seq || iv || ciphertext || icv
  plaintext == inner IPv4 packet || padding 1, 2, ... || pad_length || next_header

Prints "N passed, M failed" and exits non-zero if anything fails.
Usage: python3 check_chacha_esp.py [path/to/chacha_esp.json]
"""
import sys

from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from vectorlib import h, load, run, trailer_errors



def check(v):
    errs = []
    key, salt, iv, spi, seq = (h(v[k]) for k in ("key", "salt", "iv", "spi", "seq"))
    pt, aad, ct, icv = (h(v[k]) for k in ("plaintext", "aad", "ciphertext", "icv"))
    if len(key) != 32 or len(salt) != 4 or len(iv) != 8 or len(spi) != 4 or len(seq) != 4:
        errs.append("key/salt/iv/spi/seq length")
    if aad != spi + seq:
        errs.append("aad != spi || seq")
    if "nonce" in v and h(v["nonce"]) != salt + iv:
        errs.append("nonce != salt || iv")
    out = ChaCha20Poly1305(key).encrypt(salt + iv, pt, aad)
    if out != ct + icv:
        errs.append(f"ChaCha20-Poly1305 mismatch: {out.hex()}")
    elif ChaCha20Poly1305(key).decrypt(salt + iv, ct + icv, aad) != pt:
        errs.append("decrypt does not round-trip")
    if h(v["packet"]) != spi + seq + iv + ct + icv:
        errs.append("packet != spi || seq || iv || ciphertext || icv")
    errs += trailer_errors(pt, v["next_header"], v["pad_length"])
    n = pt[-2]
    if len(pt) % 4:
        errs.append("plaintext not a multiple of 4 octets")
    inner = pt[:len(pt) - 2 - n]
    if v["next_header"] == 4 and int.from_bytes(inner[2:4], "big") != len(inner):
        errs.append("tunnel payload is not one whole IPv4 packet")
    return errs


def main():
    doc = load("chacha_esp.json")
    cases = [(v.get("name"), lambda v=v: check(v)) for v in doc["vectors"]]
    return run(cases)


if __name__ == "__main__":
    sys.exit(main())
