#!/usr/bin/env python3
"""CPU use over a window: the machine's busy share (100 % per core, from
/proc/stat) and each thread's share of one core (utime + stime from
/proc/<pid>/task/<tid>/stat), both over the measured elapsed time.

    python3 testbed/cpu_sample.py [SECONDS]     # default 4

Used for the "Rekey without loss" figures in README: started 30 s into
`SECGW_E2E_REKEY_DESC_PPS=20000 SECGW_E2E_BUILD=0 python3 -m pytest -q
tests/e2e/test_rekey.py -k software -s` (or `-k descriptor`).
Standard library only.
"""
import glob
import os
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def tasks():
    """{task dir: (utime + stime in ticks, thread name)} of every thread."""
    out = {}
    for t in glob.glob("/proc/[0-9]*/task/[0-9]*"):
        try:
            s = open(t + "/stat").read()
        except OSError:
            continue
        f = s[s.rindex(")") + 2:].split()
        out[t] = (int(f[11]) + int(f[12]), s[s.index("(") + 1:s.rindex(")")])
    return out


def machine():
    """The first 8 fields of /proc/stat's cpu line (user .. steal), ticks."""
    return list(map(int, open("/proc/stat").readline().split()[1:9]))


def main():
    window = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
    c1, a, t1 = machine(), tasks(), time.monotonic()
    time.sleep(window)
    c2, b, t2 = machine(), tasks(), time.monotonic()
    d = [y - x for x, y in zip(c1, c2)]
    total, cap = sum(d), 100 * os.cpu_count()
    busy = d[0] + d[1] + d[2] + d[5] + d[6]  # user nice system irq softirq
    print(f"machine: busy {cap * busy / total:.0f}% of {cap}%, idle {cap * (d[3] + d[4]) / total:.0f}%, "
          f"steal {cap * d[7] / total:.0f}%")
    rows = sorted(((100 * (v - a[t][0]) / HZ / (t2 - t1), name) for t, (v, name) in b.items() if t in a), reverse=True)
    rows = [r for r in rows if r[0] >= 2]
    print("; ".join(f"{p:.0f}% {n}" for p, n in rows[:14]))
    print(f"threads listed: {sum(p for p, _ in rows):.0f}%")


if __name__ == "__main__":
    main()
