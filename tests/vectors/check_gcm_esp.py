#!/usr/bin/env python3
"""Independently verify tests/vectors/gcm_esp.json with pyca/cryptography.

For every AES-GCM-ESP vector (RFC 4106):
  AESGCM(key).encrypt(salt || iv, plaintext, aad) == ciphertext || icv
  aad == spi || seq                (4-octet seq, or 8-octet ESN = seq_hi || seq_lo)
  nonce == salt || iv, packet == spi || seq_lo || iv || ciphertext || icv
  pad_length / next_header match the plaintext's trailer, padding is 1, 2, 3, ...
For the AES-GMAC-ESP vector (RFC 4543):
  AESGCM(key).encrypt(salt || iv, b"", aad) == icv
  aad == spi || seq || iv || authenticated_payload

Prints "N passed, M failed" and exits non-zero if anything fails.
Usage: python3 check_gcm_esp.py [path/to/gcm_esp.json]
"""
import sys

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from vectorlib import h, load, run, trailer_errors



def check_common(v, errs):
    key, salt, iv, spi, seq = (h(v[k]) for k in ("key", "salt", "iv", "spi", "seq"))
    if len(key) not in (16, 24, 32):
        errs.append(f"key length {len(key)}")
    if len(salt) != 4 or len(iv) != 8 or len(spi) != 4:
        errs.append("salt/iv/spi length")
    if len(seq) != (8 if v["esn"] else 4):
        errs.append(f"seq length {len(seq)} does not match esn={v['esn']}")
    if "nonce" in v and h(v["nonce"]) != salt + iv:
        errs.append("nonce != salt || iv")
    if len(h(v["icv"])) != 16:
        errs.append("icv is not 16 octets")
    for k, x in v.items():
        if isinstance(x, str) and k not in ("name", "algorithm", "source") and x != x.lower():
            errs.append(f"{k} is not lowercase hex")
    return key, salt, iv, spi, seq


def check_gcm(v):
    errs = []
    key, salt, iv, spi, seq = check_common(v, errs)
    pt, aad, ct, icv = (h(v[k]) for k in ("plaintext", "aad", "ciphertext", "icv"))
    if aad != spi + seq:
        errs.append("aad != spi || seq")
    if len(ct) != len(pt):
        errs.append("ciphertext length != plaintext length")
    if len(pt) % 4:
        errs.append("plaintext not a multiple of 4 octets")
    out = AESGCM(key).encrypt(salt + iv, pt, aad)
    if out != ct + icv:
        errs.append(f"AES-GCM mismatch: computed {out.hex()}")
    else:
        try:
            if AESGCM(key).decrypt(salt + iv, ct + icv, aad) != pt:
                errs.append("decrypt does not round-trip")
        except Exception as e:  # InvalidTag
            errs.append(f"decrypt failed: {e!r}")
    if "packet" in v and h(v["packet"]) != spi + seq[-4:] + iv + ct + icv:
        errs.append("packet != spi || seq_lo || iv || ciphertext || icv")
    errs += trailer_errors(pt, v["next_header"], v["pad_length"])
    return errs


def check_gmac(v):
    errs = []
    key, salt, iv, spi, seq = check_common(v, errs)
    aad, icv, payload = h(v["aad"]), h(v["icv"]), h(v["authenticated_payload"])
    if v["plaintext"] or v["ciphertext"]:
        errs.append("GMAC vector must have empty plaintext/ciphertext")
    if aad != spi + seq + iv + payload:
        errs.append("aad != spi || seq || iv || authenticated_payload")
    out = AESGCM(key).encrypt(salt + iv, b"", aad)
    if out != icv:
        errs.append(f"AES-GMAC mismatch: computed {out.hex()}")
    if "packet" in v and h(v["packet"]) != spi + seq[-4:] + iv + payload + icv:
        errs.append("packet != spi || seq_lo || iv || payload || icv")
    errs += trailer_errors(payload, v["next_header"], v["pad_length"])
    return errs


def main():
    doc = load("gcm_esp.json")
    cases = [(v.get("name"), lambda v=v: check_gcm(v)) for v in doc["vectors"]]
    cases += [(v.get("name"), lambda v=v: check_gmac(v)) for v in doc.get("gmac_vectors", [])]
    return run(cases)


if __name__ == "__main__":
    sys.exit(main())
