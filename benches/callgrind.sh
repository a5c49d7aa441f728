#!/usr/bin/env bash
# Instructions per packet of pipeline bench lines, counted by valgrind's
# callgrind: deterministic where criterion's times on these VMs move ±15 %
# from run to run, so a change of a few instructions on the per-packet path
# shows. Counts only the timed routine (criterion's Bencher::iter);
# packets = calls of Worker::poll × 32 (worker lines, one 32-frame burst per
# poll) or calls of ring's AES-GCM seal (raw seal lines, one per packet).
# The ratio column is the line's instructions over the same size's
# raw_seal_ring: the instruction-count analogue of the bench's ratio table
# (the per-packet work runs from L1, so instructions track time closely).
#
#   bash benches/callgrind.sh                 # outbound_ring, bypass, raw_seal_ring at 64 and 1420 B
#   bash benches/callgrind.sh inbound_ring/64 # any pipeline_worker_aes128gcm line(s)
#
# Needs valgrind (Debian: apt-get install valgrind). About 5 s per line.
# SECGW_BENCH_BIN=path measures an already built pipeline bench binary
# (e.g. one built with other profile settings) instead of building it.
set -euo pipefail
cd "$(dirname "$0")/.."
lines=("$@")
if [ ${#lines[@]} -eq 0 ]; then
    lines=(outbound_ring/64 bypass/64 raw_seal_ring/64 outbound_ring/1420 bypass/1420 raw_seal_ring/1420)
fi
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
bin=${SECGW_BENCH_BIN:-}; [ -n "$bin" ] || bin=$(cargo bench --bench pipeline --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="pipeline" and m.get("executable"): print(m["executable"])')
[ -x "$bin" ] || { echo "callgrind.sh: pipeline bench did not build" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '| line | instructions / packet | vs raw_seal_ring same size |\n|---|---:|---:|\n' >"$out/table"
for l in "${lines[@]}"; do
    f="$out/$(echo "$l" | tr / _).cg"
    SECGW_SCALING_SECS=0 valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect='criterion::bencher::Bencher*::iter*' --callgrind-out-file="$f" \
        "$bin" --bench "^pipeline_worker_aes128gcm/$l\$" --profile-time 1 >"$f.log" 2>&1 ||
        { echo "callgrind.sh: $l failed, see below" >&2; tail -20 "$f.log" >&2; exit 1; }
    echo "$l $f"
done >"$out/list"
python3 - "$out/list" >>"$out/table" <<'EOF'
import re, sys
def count(path):
    names, lines = {}, open(path).read().split('\n')
    for l in lines:
        m = re.match(r'c?fn=\((\d+)\) (.*)', l)
        if m: names[m.group(1)] = m.group(2)
    total = int(next(l.split()[1] for l in lines if l.startswith('summary:')))
    polls = seals = 0
    for i, l in enumerate(lines):
        m = re.match(r'cfn=\((\d+)\)', l)
        if not m: continue
        n = int(lines[i + 1].split('=')[1].split()[0])
        name = names.get(m.group(1), '')
        if re.fullmatch(r'secgw::dataplane::worker::Worker<P,Q>::poll', name): polls += n
        elif name == 'ring::aead::algorithm::aes_gcm_seal': seals += n
    pkts = polls * 32 if polls else seals
    if not pkts: sys.exit(f'{path}: no packets counted (neither Worker::poll nor a ring seal called)')
    return total / pkts
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
per = {line: count(path) for line, path in rows}
for line, _ in rows:
    size = line.rsplit('/', 1)[1]
    raw = per.get(f'raw_seal_ring/{size}')
    ratio = f'{100 * raw / per[line]:.1f} %' if raw else ''
    print(f'| {line} | {per[line]:.0f} | {ratio} |')
EOF
cat "$out/table"
