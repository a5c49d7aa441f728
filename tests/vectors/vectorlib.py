"""Shared pieces of the tests/vectors/check_*.py checkers (pyca/cryptography
cross-checks of the RFC vector files): hex decoding, loading the JSON file
named on the command line (or the default beside the checker), the ESP
trailer rule of RFC 4303 §2.4–2.5, and the runner that prints
"N passed, M failed" and gives the exit status.
"""
import json
import os
import sys


def h(s):
    """Hex string → bytes."""
    return bytes.fromhex(s)


def load(default_name):
    """The vector document: argv[1], or `default_name` beside this file."""
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), default_name)
    with open(path) as fh:
        return json.load(fh)


def trailer_errors(plain, next_header, pad_length):
    """Problems with the ESP trailer at the end of a decrypted payload:
    next header and pad length as the vector says, padding 1, 2, 3, …
    (RFC 4303 §2.4, §2.5)."""
    if len(plain) < 2:
        return ["payload too short for an ESP trailer"]
    errs = []
    if plain[-1] != next_header:
        errs.append(f"next_header {next_header} != last octet {plain[-1]}")
    if plain[-2] != pad_length:
        errs.append(f"pad_length {pad_length} != octet {plain[-2]}")
    n = plain[-2]
    if n + 2 > len(plain) or plain[len(plain) - 2 - n:len(plain) - 2] != bytes(range(1, n + 1)):
        errs.append("padding is not 1, 2, ..., pad_length")
    return errs


def run(cases):
    """Runs `cases`, an iterable of (label, check) where check() returns a
    list of problems; prints each failure and the totals. Returns the exit
    status: 1 if anything failed or nothing ran."""
    passed = failed = 0
    for label, check in cases:
        try:
            errs = check()
        except Exception as e:  # malformed entry
            errs = [f"exception: {e!r}"]
        if errs:
            failed += 1
            print(f"FAIL {label}: " + "; ".join(errs))
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0
