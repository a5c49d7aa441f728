#!/usr/bin/env python3
"""Independently verify tests/vectors/hmac.json with pyca/cryptography.

  hmac_sha1 (RFC 2202):        HMAC-SHA1(key, data) == digest, digest_96 == digest[:12]
  hmac_sha256 (RFC 4231):      HMAC-SHA256(key, data) starts with digest (Test Case 5
                               is published truncated), digest_128 == its first 16 octets
  hmac_sha256_128 (RFC 4868):  HMAC-SHA256(key, data)[:16] == digest_128, 32-octet keys
  hmac_sha384_192 (RFC 4868):  HMAC-SHA384(key, data)[:24] == digest_192, 48-octet keys
  hmac_sha512_256 (RFC 4868):  HMAC-SHA512(key, data)[:32] == digest_256, 64-octet keys

Prints "N passed, M failed" and exits non-zero if anything fails.
Usage: python3 check_hmac.py [path/to/hmac.json]
"""
import sys

from cryptography.hazmat.primitives import hashes, hmac

from vectorlib import h, load, run



def mac(alg, key, data):
    m = hmac.HMAC(key, alg)
    m.update(data)
    return m.finalize()


def check(v, kind):
    errs = []
    key, data = h(v["key"]), h(v["data"])
    if kind == "hmac_sha1":
        out = mac(hashes.SHA1(), key, data)
        if out != h(v["digest"]):
            errs.append(f"HMAC-SHA1 mismatch: {out.hex()}")
        if h(v["digest_96"]) != out[:12]:
            errs.append("digest_96")
    elif kind == "hmac_sha256":
        out = mac(hashes.SHA256(), key, data)
        d = h(v["digest"])
        if len(d) not in (16, 32) or out[:len(d)] != d:
            errs.append(f"HMAC-SHA256 mismatch: {out.hex()}")
        if h(v["digest_128"]) != out[:16]:
            errs.append("digest_128")
    elif kind in ("hmac_sha384_192", "hmac_sha512_256"):
        alg, n, field = (hashes.SHA384(), 24, "digest_192") if kind == "hmac_sha384_192" else (hashes.SHA512(), 32, "digest_256")
        out = mac(alg, key, data)
        if len(key) != 2 * n:
            errs.append(f"RFC 4868 keys are {2 * n} octets")
        if h(v[field]) != out[:n]:
            errs.append(f"{kind} mismatch: {out[:n].hex()}")
    else:
        out = mac(hashes.SHA256(), key, data)
        if len(key) != 32:
            errs.append("RFC 4868 keys are 32 octets")
        if h(v["digest_128"]) != out[:16]:
            errs.append(f"HMAC-SHA-256-128 mismatch: {out[:16].hex()}")
    return errs


def main():
    doc = load("hmac.json")
    cases = [(f"{kind} {v.get('name')}", lambda v=v, kind=kind: check(v, kind))
             for kind in ("hmac_sha1", "hmac_sha256", "hmac_sha256_128", "hmac_sha384_192", "hmac_sha512_256") for v in doc[kind]]
    return run(cases)


if __name__ == "__main__":
    sys.exit(main())
