#!/usr/bin/env python3
"""Independently verify tests/vectors/ctr.json with pyca/cryptography.

For every RFC 3686 test vector:
  AES-CTR(key, nonce || iv || 00000001).encrypt(plaintext) == ciphertext
  (counter block = 4-byte nonce, 8-byte IV, 32-bit block counter from 1)

Prints "N passed, M failed" and exits non-zero if anything fails.
Usage: python3 check_ctr.py [path/to/ctr.json]
"""
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from vectorlib import h, load, run



def check(v):
    errs = []
    key, nonce, iv, pt, ct = (h(v[k]) for k in ("key", "nonce", "iv", "plaintext", "ciphertext"))
    if len(key) not in (16, 24, 32) or len(nonce) != 4 or len(iv) != 8:
        errs.append("key/nonce/iv length")
    block = nonce + iv + (1).to_bytes(4, "big")
    e = Cipher(algorithms.AES(key), modes.CTR(block)).encryptor()
    if e.update(pt) + e.finalize() != ct:
        errs.append("AES-CTR mismatch")
    return errs


def main():
    doc = load("ctr.json")
    cases = [(v.get("name"), lambda v=v: check(v)) for v in doc["vectors"]]
    return run(cases)


if __name__ == "__main__":
    sys.exit(main())
