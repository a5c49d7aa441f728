#!/usr/bin/env python3
"""Checks `secgw ctl` output with parsers we did not write (tests/ctl.rs runs it).

    ctl_output_check.py prometheus < TEXT
        Parses TEXT with prometheus_client's text-format parser
        (prometheus_client.parser.text_string_to_metric_families) and checks
        the naming rules of README "Prometheus": every family named secgw_*,
        with a HELP text and a TYPE of counter or gauge, counter samples named
        <family>_total, no family declared twice. Prints the samples as JSON
        lines {"name", "labels", "value", "type"} for the caller to compare.

    ctl_output_check.py schema SCHEMA.json < JSON
        Validates JSON against the JSON schema (jsonschema, Draft 2020-12,
        after checking the schema itself).

Exit status 0 if the input passes, 1 (with the reason on stderr) if not.
"""
import json
import re
import sys


def fail(msg: str) -> None:
    print(f"ctl_output_check: {msg}", file=sys.stderr)
    sys.exit(1)


def prometheus(text: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    # The parser takes a repeated TYPE line without complaint; the format
    # allows one per family.
    declared = re.findall(r"^# TYPE (\S+) ", text, flags=re.M)
    dups = {n for n in declared if declared.count(n) > 1}
    if dups:
        fail(f"families declared more than once: {sorted(dups)}")
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and others
        fail(f"prometheus_client cannot parse the text: {type(e).__name__}: {e}")
    if not families:
        fail("no metric families")
    for f in families:
        if not f.name.startswith("secgw_"):
            fail(f"family {f.name} lacks the secgw_ prefix")
        if f.type not in ("counter", "gauge"):
            fail(f"family {f.name} has type {f.type} (no TYPE line?)")
        if not f.documentation:
            fail(f"family {f.name} has no HELP text")
        for s in f.samples:
            want = f.name + "_total" if f.type == "counter" else f.name
            if s.name != want:
                fail(f"sample {s.name} in family {f.name} ({f.type}): expected the name {want}")
            print(json.dumps({"name": s.name, "labels": s.labels, "value": s.value, "type": f.type}))


def schema(path: str, text: str) -> None:
    import jsonschema

    with open(path, encoding="utf-8") as fh:
        sch = json.load(fh)
    jsonschema.Draft202012Validator.check_schema(sch)
    try:
        instance = json.loads(text)
    except ValueError as e:
        fail(f"not JSON: {e}")
    errors = sorted(jsonschema.Draft202012Validator(sch).iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        fail("; ".join(f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors[:5]))


def main() -> None:
    args = sys.argv[1:]
    text = sys.stdin.read()
    if args == ["prometheus"]:
        prometheus(text)
    elif len(args) == 2 and args[0] == "schema":
        schema(args[1], text)
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
