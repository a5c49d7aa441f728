#!/usr/bin/env python3
"""Independently verify tests/vectors/ctr.json with pyca/cryptography.

For every RFC 3686 test vector:
  AES-CTR(key, nonce || iv || 00000001).encrypt(plaintext) == ciphertext
  (counter block = 4-byte nonce, 8-byte IV, 32-bit block counter from 1)

Prints "N passed, M failed" and exits non-zero if anything fails.
Usage: python3 check_ctr.py [path/to/ctr.json]
"""
import json
import os
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def h(s):
    return bytes.fromhex(s)


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
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "ctr.json")
    with open(path) as fh:
        doc = json.load(fh)
    passed = failed = 0
    for v in doc["vectors"]:
        try:
            errs = check(v)
        except Exception as e:  # malformed entry
            errs = [f"exception: {e!r}"]
        if errs:
            failed += 1
            print(f"FAIL {v.get('name')}: " + "; ".join(errs))
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
