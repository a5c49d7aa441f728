#!/usr/bin/env bash
# testbed/bench.sh — the testbed throughput table (issue 7): secgw-pktgen
# generator → device under test → secgw-pktgen sink, in dedicated network
# namespaces with direct veth pairs (no bridge), one row per topology × size ×
# workers × backend, each row's packet rate next to the plain AF_XDP
# forwarder's (d) from the same run.
#
#   bash testbed/bench.sh [--quick] [--json FILE] [options]     (as root)
#
# Topologies (namespaces $SECGW_NS_PREFIX"bench-"NAME, interfaces inside them):
#   a   gen ─ gw0 (secgw, encrypt) ─ sink        sink decrypts with configs/bench/gw1.toml
#   b   gen (ESP, SA 1001 of configs/bench/gw0.toml) ─ gw1 (secgw, decrypt) ─ sink
#   c   gen ─ gw0 ─ gw1 ─ sink
#   d   gen ─ fwd (`secgw-pktgen forward`, no parsing, no crypto) ─ sink: the I/O ceiling
#   bypass  gen ─ gw0 (secgw, configs/bench/bypass.toml: bypass policies only) ─ sink:
#           the gateway loop's own ceiling (parse, SPD, route, no crypto)
# Every link is a veth pair with MTU 1600 (1500-byte inner packets plus the
# ESP tunnel overhead pass unfragmented) and 2 queues; the gen is 192.0.2.10
# (02:00:00:00:0a:01, or gw0-out's MAC in (b) where it stands for gw0), the sink
# 198.51.100.10 (02:00:00:00:0b:01, or gw1-out's MAC in (a) where it stands for gw1).
#
# Method (RFC 2544 §26.1 style throughput search, per row):
#   1. one trial at the generator's full speed (`--rate 0`): the sink's rate
#      there is the first probe and the generator's rate the upper bound;
#   2. binary search over `gen --rate` between the best rate with zero loss
#      (pass) and the lowest with loss (fail), --steps trials, stopping early when
#      the bracket is within 3 %; each trial is --warmup s of warm-up then
#      --trial-secs s measured, a fresh sink each time; loss = the generator's
#      measured tx minus the sink's count (secgw-pktgen report). A trial
#      passes with no loss (--loss-tol) and only if the generator sent at
#      least 99 % of the packets its rate made due (one that fell behind did
#      not offer the rate, whatever the sink got). The saturation
#      rate is the highest rate that passed; Mpps, Gbit/s (Ethernet bytes at
#      the sink ×8 / measured s) and loss are that trial's (when no rate
#      passed: the lowest probe's, its loss showing it, and the table says
#      `none ≤ RATE`).
#   3. one more trial at 50 % of the saturation rate for latency p50/p99/max
#      (µs, timestamps in the payload; gen and sink share a clock).
#   ratio_d = row Mpps / (d) Mpps for the same size and worker count, same run.
# Gateways run with the configs under configs/bench/, rewritten per row on the
# lines marked `# bench:` (workers, cores, backend, burst, idle_sleep_us,
# xdp_mode). Cores: see the table header (`cores:` line) for what ran where.
#
# Cross-check (--crosscheck, on by default, off with --no-crosscheck): one
# row of (a) with trafgen (Debian netsniff-ng) as the generator at a fixed rate
# (half the row's saturation, or --xcheck-rate) next to secgw-pktgen gen at
# the same rate: trafgen's sent count vs gw0's rx/tx counters vs the sink's
# count, and the same for our generator.
#
# Options:
#   --quick              64 and 1420 B, 1 worker, software, topologies a,d, 4 steps.
#                        Options are read in order and the later one wins: --quick
#                        --sizes 512 runs 512 B; --sizes 512 --quick runs 64 and 1420 B
#                        (and says on stderr which earlier options --quick replaced)
#   --topologies LIST    comma list of a,b,c,d,bypass (default all)
#   --sizes LIST         comma list of 64..1500 and imix (default 64,512,1420,imix)
#   --workers LIST       comma list of 1,2 (default 1,2)
#   --backends LIST      software,descriptor (default both; rows a, b, c only)
#   --trial-secs S       measured seconds per trial (default 2)
#   --warmup S           generator warm-up per trial (default 1)
#   --steps N            binary-search trials after the full-speed one (default 6)
#   --loss-tolerance P   loss in % a trial may have and still pass (default 0)
#   --flows N            flows per trial, 1..=25536 (default 2: SA 1001 for flow 0, 1003 for the rest;
#                        (b) always 1: the ESP generator encapsulates with SA 1001 only)
#   --burst N, --idle-sleep US, --xdp-mode MODE
#                        gateway settings for every row (default 32, 0, native;
#                        --idle-sleep also for the forwarder of (d), --xdp-mode
#                        for all of secgw-pktgen's sockets). With --idle-sleep > 0
#                        the table's "DUT CPU µs/pkt" (the device under test's
#                        CPU time from /proc over the packets sent, at the latency
#                        rate) is the work a packet costs; busy-polling, it is not
#   --sink-idle-sleep US the sink's sleep after an empty poll (default 20; 0 = busy-poll).
#                        The sink shares core 0 with the generator: a busy-polling
#                        sink takes half of it (measured: 20 µs raised (d)'s
#                        saturation rate ~1.6x and cut p50 latency 12 → 2.4 ms)
#   --lat-rate PPS       the latency (and DUT CPU) trial at PPS instead of 50 % of the
#                        row's saturation: the same rate for every row and run
#   --no-crosscheck, --xcheck-rate PPS, --xcheck-size BYTES
#   --json FILE          write every row (and its trials) as JSON
#   --keep               leave the namespaces up at the end
# Environment: SECGW_BIN (default $CARGO_TARGET_DIR or target/ release/secgw),
# SECGW_PKTGEN_BIN (default secgw-pktgen beside SECGW_BIN), SECGW_NS_PREFIX,
# SECGW_BENCH_DIR (work files, default /tmp/secgw-bench-$PREFIX).
set -euo pipefail

BENCH_TESTBED="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_REPO="$(cd "$BENCH_TESTBED/.." && pwd)"
SECGW_BIN="${SECGW_BIN:-${CARGO_TARGET_DIR:-$BENCH_REPO/target}/release/secgw}"
SECGW_PKTGEN_BIN="${SECGW_PKTGEN_BIN:-$(dirname "$SECGW_BIN")/secgw-pktgen}"
# Our namespaces never clash with testbed/lib.sh's topology of the same prefix.
SECGW_NS_PREFIX="${SECGW_NS_PREFIX:-}bench-"
export SECGW_BIN SECGW_PKTGEN_BIN SECGW_NS_PREFIX
BENCH_DIR="${SECGW_BENCH_DIR:-/tmp/secgw-bench-${SECGW_NS_PREFIX}}"
SECGW_RUN_DIR="$BENCH_DIR/gw"
SECGW_QUEUES=2
# shellcheck source=testbed/lib.sh
source "$BENCH_TESTBED/lib.sh"
TESTBED_NAMESPACES=(gen gw0 gw1 fwd sink)
TABLE_PY="$BENCH_TESTBED/bench_table.py"

TOPOS="a,b,c,d,bypass"; SIZES="64,512,1420,imix"; WORKERS="1,2"; BACKENDS="software,descriptor"
TRIAL_SECS=2; WARMUP=1; STEPS=6; LOSS_TOL=0; FLOWS=2
BURST=32; IDLE_SLEEP=0; XDP_MODE=native; SINK_IDLE_SLEEP=20
XCHECK=1; XCHECK_RATE=0; XCHECK_SIZE=""; LAT_RATE=0
JSON_OUT=""; KEEP=0; QUICK=0

die() { printf 'bench.sh: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
# Options --quick sets, as given explicitly so far (the later option wins, said aloud).
QUICK_OVERRIDES=""
given() { case " $QUICK_OVERRIDES " in *" $1 "*) ;; *) QUICK_OVERRIDES="$QUICK_OVERRIDES $1" ;; esac; }
while [ $# -gt 0 ]; do
    case "$1" in
        --topologies|--sizes|--workers|--backends|--trial-secs|--warmup|--steps|--loss-tolerance|--flows|--burst|--idle-sleep|--xdp-mode|--sink-idle-sleep|--lat-rate|--xcheck-rate|--xcheck-size|--json)
            [ $# -ge 2 ] || die "$1 needs a value (--help)" ;;
    esac
    case "$1" in
        --quick) QUICK=1; TOPOS="a,d"; SIZES="64,1420"; WORKERS="1"; BACKENDS="software"; STEPS=4
            [ -z "$QUICK_OVERRIDES" ] || printf 'bench.sh: --quick comes after%s: its settings replace them (the later option wins)\n' "$QUICK_OVERRIDES" >&2
            QUICK_OVERRIDES="" ;;
        --topologies) TOPOS="$2"; given "$1"; shift ;;
        --sizes) SIZES="$2"; given "$1"; shift ;;
        --workers) WORKERS="$2"; given "$1"; shift ;;
        --backends) BACKENDS="$2"; given "$1"; shift ;;
        --trial-secs) TRIAL_SECS="$2"; shift ;;
        --warmup) WARMUP="$2"; shift ;;
        --steps) STEPS="$2"; given "$1"; shift ;;
        --loss-tolerance) LOSS_TOL="$2"; shift ;;
        --flows) FLOWS="$2"; shift ;;
        --burst) BURST="$2"; shift ;;
        --idle-sleep) IDLE_SLEEP="$2"; shift ;;
        --xdp-mode) XDP_MODE="$2"; shift ;;
        --sink-idle-sleep) SINK_IDLE_SLEEP="$2"; shift ;;
        --lat-rate) LAT_RATE="$2"; shift ;;
        --crosscheck) XCHECK=1 ;;
        --no-crosscheck) XCHECK=0 ;;
        --xcheck-rate) XCHECK_RATE="$2"; shift ;;
        --xcheck-size) XCHECK_SIZE="$2"; shift ;;
        --json) JSON_OUT="$2"; shift ;;
        --keep) KEEP=1 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option $1 (--help)" ;;
    esac
    shift
done
IFS=, read -r -a TOPO_LIST <<<"$TOPOS"
IFS=, read -r -a SIZE_LIST <<<"$SIZES"
IFS=, read -r -a WORKER_LIST <<<"$WORKERS"
IFS=, read -r -a BACKEND_LIST <<<"$BACKENDS"
for t in "${TOPO_LIST[@]}"; do case "$t" in a|b|c|d|bypass) ;; *) die "unknown topology $t" ;; esac; done
for s in "${SIZE_LIST[@]}"; do
    case "$s" in imix) ;; *[!0-9]*|'') die "bad size $s" ;; *) [ "$s" -ge 64 ] && [ "$s" -le 1500 ] || die "size $s not in 64..=1500" ;; esac
done
for w in "${WORKER_LIST[@]}"; do case "$w" in 1|2) ;; *) die "workers must be 1 or 2 (2 cores)" ;; esac; done
for b in "${BACKEND_LIST[@]}"; do case "$b" in software|descriptor) ;; *) die "unknown backend $b" ;; esac; done
case "$XDP_MODE" in skb|native|auto) ;; *) die "bad --xdp-mode $XDP_MODE" ;; esac
for l in TOPO_LIST SIZE_LIST WORKER_LIST BACKEND_LIST; do
    declare -n _l="$l"; [ "${#_l[@]}" -gt 0 ] || die "an empty list for --$(echo "${l%_LIST}" | tr 'A-Z_' 'a-z-' | sed 's/topo/topologies/; s/size/sizes/; s/worker/workers/; s/backend/backends/')"; unset -n _l
done
# Numbers checked before anything is built (a bad one would fail a row halfway).
int_in() { # option value min max
    case "$2" in ''|*[!0-9]*) die "$1 must be an integer in $3..=$4, got '$2'" ;; esac
    [ "$2" -ge "$3" ] && [ "$2" -le "$4" ] || die "$1 must be an integer in $3..=$4, got $2"
}
num_pos() { # option value [0ok: zero allowed]
    local zero_ok="${3:-}"
    [[ "$2" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "$1 must be a number, got '$2'"
    [ -n "$zero_ok" ] || awk -v v="$2" 'BEGIN { exit !(v > 0) }' || die "$1 must be more than 0, got $2"
}
num_pos --trial-secs "$TRIAL_SECS"
num_pos --warmup "$WARMUP" 0ok
# (secgw-pktgen's --warmup and --duration limits)
awk -v v="$WARMUP" 'BEGIN { exit !(v <= 3600) }' || die "--warmup must be at most 3600 s, got $WARMUP"
awk -v v="$TRIAL_SECS" 'BEGIN { exit !(v >= 0.001 && v <= 604800) }' || die "--trial-secs must be in 0.001..=604800 s, got $TRIAL_SECS"
num_pos --loss-tolerance "$LOSS_TOL" 0ok
int_in --steps "$STEPS" 0 30
# The generator sends flow i from UDP port 40000 + i (its --sport default).
int_in --flows "$FLOWS" 1 25536
int_in --burst "$BURST" 1 256
# (the ranges of gateway.idle_sleep_us and secgw-pktgen's --idle-sleep-us)
int_in --idle-sleep "$IDLE_SLEEP" 0 10000
int_in --sink-idle-sleep "$SINK_IDLE_SLEEP" 0 10000
int_in --xcheck-rate "$XCHECK_RATE" 0 100000000
int_in --lat-rate "$LAT_RATE" 0 100000000
[ -z "$XCHECK_SIZE" ] || int_in --xcheck-size "$XCHECK_SIZE" 64 1500

# Loud failures, never skips: everything the run needs must be there.
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, AF_XDP)"
[ -x "$SECGW_BIN" ] || die "secgw binary not found at $SECGW_BIN (cargo build --release)"
[ -x "$SECGW_PKTGEN_BIN" ] || die "secgw-pktgen binary not found at $SECGW_PKTGEN_BIN (cargo build --release)"
for tool in ip ethtool python3 awk; do command -v "$tool" >/dev/null || die "$tool not found"; done
if [ "$XCHECK" = 1 ]; then
    command -v trafgen >/dev/null || die "trafgen not found (apt-get install netsniff-ng, or testbed/test.sh)"
fi

mkdir -p "$BENCH_DIR"
ROWS_FILE="$BENCH_DIR/rows.jsonl"; : >"$ROWS_FILE"
XCHECK_FILE="$BENCH_DIR/crosscheck.json"; rm -f "$XCHECK_FILE"

blog() { printf '[bench] %s\n' "$*" >&2; }
# Float helpers (awk): fmul A B, fmin A B, flt A B (exit 0 when A < B).
fmul() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", a * b }'; }
fle() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

GEN_MAC_PLAIN=02:00:00:00:0a:01
SINK_MAC_PLAIN=02:00:00:00:0b:01
GW0_IN_MAC=02:00:00:00:00:01; GW0_OUT_MAC=02:00:00:00:00:02
GW1_OUT_MAC=02:00:00:00:01:02; GW1_IN_MAC=02:00:00:00:01:01
FWD_IN_MAC=02:00:00:00:0d:01; FWD_OUT_MAC=02:00:00:00:0d:02
GEN_IP=192.0.2.10; SINK_IP=198.51.100.10

# ---- topology ----------------------------------------------------------------

_bench_if() { # _bench_if NS IF: lib.sh's settings (no IPv6, no offloads), MTU 1600, up
    _if_prep "$1" "$2"
    nsx "$1" ip link set dev "$2" mtu 1600
    nsx "$1" ip link set dev "$2" up
}

# bench_topo_up TOPO: namespaces and veth pairs for one topology; sets GEN_MAC,
# GEN_DST_MAC (the device's ingress MAC) and SINK_MAC.
bench_topo_up() {
    local topo="$1" b
    topo_down
    for b in gen sink; do :; done
    local nss=(gen sink)
    case "$topo" in a|bypass) nss+=(gw0) ;; b) nss+=(gw1) ;; c) nss+=(gw0 gw1) ;; d) nss+=(fwd) ;; esac
    for b in "${nss[@]}"; do
        ip netns add "$(ns "$b")" || { err "cannot create namespace $(ns "$b")"; return 1; }
        _sysctl_ns "$b" net.ipv6.conf.all.disable_ipv6 1
        _sysctl_ns "$b" net.ipv6.conf.default.disable_ipv6 1
        _sysctl_ns "$b" net.ipv4.ip_forward 0
        nsx "$b" ip link set lo up
    done
    GEN_MAC=$GEN_MAC_PLAIN; SINK_MAC=$SINK_MAC_PLAIN
    case "$topo" in
        a|bypass)
            [ "$topo" = a ] && SINK_MAC=$GW1_OUT_MAC
            GEN_DST_MAC=$GW0_IN_MAC
            _veth gen gen0 "$GEN_MAC" gw0 gw0-in "$GW0_IN_MAC"
            _veth gw0 gw0-out "$GW0_OUT_MAC" sink sink0 "$SINK_MAC" ;;
        b)
            GEN_MAC=$GW0_OUT_MAC; GEN_DST_MAC=$GW1_OUT_MAC
            _veth gen gen0 "$GEN_MAC" gw1 gw1-out "$GW1_OUT_MAC"
            _veth gw1 gw1-in "$GW1_IN_MAC" sink sink0 "$SINK_MAC" ;;
        c)
            GEN_DST_MAC=$GW0_IN_MAC
            _veth gen gen0 "$GEN_MAC" gw0 gw0-in "$GW0_IN_MAC"
            _veth gw0 gw0-out "$GW0_OUT_MAC" gw1 gw1-out "$GW1_OUT_MAC"
            _veth gw1 gw1-in "$GW1_IN_MAC" sink sink0 "$SINK_MAC" ;;
        d)
            GEN_DST_MAC=$FWD_IN_MAC
            _veth gen gen0 "$GEN_MAC" fwd fwd-in "$FWD_IN_MAC"
            _veth fwd fwd-out "$FWD_OUT_MAC" sink sink0 "$SINK_MAC" ;;
    esac
    _bench_if gen gen0; _bench_if sink sink0
    case "$topo" in
        a|bypass) _bench_if gw0 gw0-in; _bench_if gw0 gw0-out ;;
        b) _bench_if gw1 gw1-out; _bench_if gw1 gw1-in ;;
        c) _bench_if gw0 gw0-in; _bench_if gw0 gw0-out; _bench_if gw1 gw1-out; _bench_if gw1 gw1-in ;;
        d) _bench_if fwd fwd-in; _bench_if fwd fwd-out ;;
    esac
    local i
    for i in $(seq 1 50); do
        if nsx gen ip -br link show gen0 | grep -q ' UP ' && nsx sink ip -br link show sink0 | grep -q ' UP '; then
            return 0
        fi
        sleep 0.1
    done
    err "bench links did not come up"; return 1
}

# ---- gateways and forwarder ----------------------------------------------------

# Cores: the generator and the sink share core 0; the device under test gets
# core 1 (both gateways of (c) share it); with 2 workers a gateway's workers
# take cores 0 and 1, so they share core 0 with the generator and the sink.
GEN_CORE=0; SINK_CORE=0; DUT_CORE=1
dut_cores() { if [ "$1" = 2 ]; then echo "[0, 1]"; else echo "[$DUT_CORE]"; fi; }

# bench_config BASE WORKERS BACKEND OUT: configs/bench/BASE.toml with the
# `# bench:` lines rewritten.
bench_config() {
    local base="$BENCH_REPO/configs/bench/$1.toml" w="$2" backend="$3" out="$4"
    [ -f "$base" ] || { err "config $base not found"; return 1; }
    sed -E \
        -e "s/^workers = [0-9]+( *# bench:)/workers = $w\\1/" \
        -e "s/^cores = \\[[0-9, ]*\\]( *# bench:)/cores = $(dut_cores "$w")\\1/" \
        -e "s/^burst = [0-9]+( *# bench:)/burst = $BURST\\1/" \
        -e "s/^idle_sleep_us = [0-9]+( *# bench:)/idle_sleep_us = $IDLE_SLEEP\\1/" \
        -e "s/^backend = \"[a-z]+\"( *# bench:)/backend = \"$backend\"\\1/" \
        -e "s/^xdp_mode = \"[a-z]+\"( *# bench:)/xdp_mode = \"$XDP_MODE\"\\1/" \
        "$base" >"$out"
    # The rewrite must have hit every marked line (a config edit that breaks
    # the pattern would otherwise measure the wrong thing silently).
    grep -q "^workers = $w " "$out" && grep -q "^idle_sleep_us = $IDLE_SLEEP " "$out" && grep -q "^idle_spin_us = 0 " "$out" &&
        grep -q "^backend = \"$backend\"" "$out" && grep -q "^xdp_mode = \"$XDP_MODE\"" "$out" ||
        { err "bench_config: $base has no \`# bench:\` line for a setting"; return 1; }
    "$SECGW_BIN" check "$out" >/dev/null || { err "secgw check $out failed"; return 1; }
}

FWD_PID=""
fwd_start() { # fwd_start WORKERS
    local q="$1" dir="$BENCH_DIR/fwd"
    mkdir -p "$dir"
    ip netns exec "$(ns fwd)" env --default-signal=INT,TERM "$SECGW_PKTGEN_BIN" forward --in fwd-in --out fwd-out \
        --dst-mac "$SINK_MAC" --src-mac "$FWD_OUT_MAC" --queues "$q" --core "$DUT_CORE" --xdp-mode "$XDP_MODE" \
        --idle-sleep-us "$IDLE_SLEEP" \
        >"$dir/stdout.log" 2>"$dir/stderr.log" </dev/null &
    FWD_PID=$!
    wait_xdp fwd fwd-in "$FWD_PID" "$dir/stderr.log" || { FWD_PID=""; return 1; }
}
# Background jobs are started with `ip netns exec` directly (not through nsx,
# a function: `&` would fork a subshell, and $! would be that shell's pid).
fwd_stop() {
    [ -n "$FWD_PID" ] || return 0
    kill -INT "$FWD_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 50); do kill -0 "$FWD_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$FWD_PID" 2>/dev/null; then
        err "secgw-pktgen forward still running 5 s after SIGINT: SIGKILL"
        kill -KILL "$FWD_PID" 2>/dev/null || true
    fi
    local rc=0; wait "$FWD_PID" || rc=$?
    FWD_PID=""
    [ "$rc" -eq 0 ] || [ "$rc" -eq 130 ] || { err "secgw-pktgen forward exited $rc"; tail -5 "$BENCH_DIR/fwd/stderr.log" >&2; return 1; }
}

# wait_xdp NS IF PID LOG: until an XDP program is on IF (the socket is bound).
wait_xdp() {
    local i
    for i in $(seq 1 100); do
        nsx "$1" ip link show "$2" 2>/dev/null | grep -qw 'xdp\|xdpgeneric\|xdpdrv' && return 0
        if ! kill -0 "$3" 2>/dev/null; then
            err "process in $(ns "$1") exited before binding $2:"; tail -20 "$4" >&2; return 1
        fi
        sleep 0.05
    done
    err "no XDP program on $2 in $(ns "$1") after 5 s"; tail -20 "$4" >&2; return 1
}

# dut_up TOPO WORKERS BACKEND / dut_down
dut_up() {
    local topo="$1" w="$2" backend="$3"
    [ "$backend" = - ] && backend=software   # (d) and bypass: no SA, any backend
    case "$topo" in
        a) bench_config gw0 "$w" "$backend" "$BENCH_DIR/gw0.toml" && gw_start gw0 "$BENCH_DIR/gw0.toml" ;;
        bypass) bench_config bypass "$w" "$backend" "$BENCH_DIR/bypass.toml" && gw_start gw0 "$BENCH_DIR/bypass.toml" ;;
        b) bench_config gw1 "$w" "$backend" "$BENCH_DIR/gw1.toml" && gw_start gw1 "$BENCH_DIR/gw1.toml" ;;
        c) bench_config gw0 "$w" "$backend" "$BENCH_DIR/gw0.toml" && bench_config gw1 "$w" "$backend" "$BENCH_DIR/gw1.toml" &&
           gw_start gw0 "$BENCH_DIR/gw0.toml" && gw_start gw1 "$BENCH_DIR/gw1.toml" ;;
        d) fwd_start "$w" ;;
    esac
}
dut_down() { fwd_stop; gw_stop_all 2>"$BENCH_DIR/gw_stop.log" || { cat "$BENCH_DIR/gw_stop.log" >&2; return 1; }; }

# ---- one trial ------------------------------------------------------------------

# trial TOPO SIZE WORKERS RATE DIR: sink, generator, report; prints the trial's
# normalized JSON (bench_table.py trial) on stdout.
trial() {
    local topo="$1" size="$2" w="$3" rate="$4" dir="$5"
    mkdir -p "$dir"; rm -f "$dir"/*.json
    local q="$w" sink_args=() gen_args=() flows="$FLOWS"
    [ "$topo" = a ] && sink_args+=(--esp-config "$BENCH_REPO/configs/bench/gw1.toml")
    if [ "$topo" = b ]; then
        # One SA (the generator encapsulates with one), so one flow: gw1's
        # inbound policy check wants flows other than 0 in SA 1003. gw1 keeps
        # running between trials, so sequence numbers go on where the last
        # trial stopped (a restart at 1 would be replayed).
        flows=1
        gen_args+=(--esp-config "$BENCH_REPO/configs/bench/gw0.toml" --esp-spi 1001 --esp-seq-start "$ESP_SEQ")
    fi
    local sink_secs
    sink_secs=$(awk -v a="$WARMUP" -v b="$TRIAL_SECS" 'BEGIN { print a + b + 2 }')
    ip netns exec "$(ns sink)" env --default-signal=INT,TERM "$SECGW_PKTGEN_BIN" sink --iface sink0 --queues "$q" --core "$SINK_CORE" --xdp-mode "$XDP_MODE" \
        --idle-sleep-us "$SINK_IDLE_SLEEP" \
        --duration "$sink_secs" --json "$dir/sink.json" --gen-json "$dir/gen.json" "${sink_args[@]}" \
        >"$dir/sink.out" 2>"$dir/sink.err" </dev/null &
    local sink_pid=$!
    wait_xdp sink sink0 "$sink_pid" "$dir/sink.err" || { kill "$sink_pid" 2>/dev/null; wait "$sink_pid" 2>/dev/null; return 1; }
    local rc=0 cpu0 cpu1
    cpu0=$(dut_cpu_ticks)
    nsx gen "$SECGW_PKTGEN_BIN" gen --iface gen0 --queues "$q" --core "$GEN_CORE" --xdp-mode "$XDP_MODE" \
        --src-mac "$GEN_MAC" --dst-mac "$GEN_DST_MAC" --src "$GEN_IP" --dst "$SINK_IP" \
        --flows "$flows" --size "$size" --rate "$rate" --duration "$TRIAL_SECS" --warmup "$WARMUP" \
        --json "$dir/gen.json" "${gen_args[@]}" >"$dir/gen.out" 2>"$dir/gen.err" </dev/null || rc=$?
    if [ "$rc" -ne 0 ]; then
        err "secgw-pktgen gen exited $rc:"; tail -20 "$dir/gen.err" >&2
        kill -INT "$sink_pid" 2>/dev/null; wait "$sink_pid" 2>/dev/null; return 1
    fi
    cpu1=$(dut_cpu_ticks)
    wait "$sink_pid" || rc=$?
    if [ "$rc" -ne 0 ]; then err "secgw-pktgen sink exited $rc:"; tail -20 "$dir/sink.err" >&2; return 1; fi
    ESP_SEQ=$(( ESP_SEQ + $(jget "$dir/gen.json" tx_packets) ))
    "$SECGW_PKTGEN_BIN" report --gen "$dir/gen.json" --sink "$dir/sink.json" --json "$dir/report.json" \
        >"$dir/report.out" 2>"$dir/report.err" || { err "secgw-pktgen report failed:"; cat "$dir/report.err" >&2; return 1; }
    # The report's doubts (sink late, reports of two runs, ...) and the
    # generator's (fell behind its --rate) are shown, and kept in trial.json.
    grep -h ' WARN ' "$dir/report.err" | sed "s|^.* WARN [^ ]* |[bench] $dir: report warns: |" >&2 || true
    grep -h 'warning:' "$dir/gen.err" | sed "s|^|[bench] $dir: |" >&2 || true
    python3 "$TABLE_PY" trial --rate "$rate" --gen "$dir/gen.json" --sink "$dir/sink.json" --report "$dir/report.json" \
        --dut-cpu-ticks "$((cpu1 - cpu0))" --clk-tck "$CLK_TCK" \
        >"$dir/trial.json" || return 1
    cat "$dir/trial.json"
}

# dut_cpu_ticks: CPU time (user + system, clock ticks) the device(s) under
# test have used so far: the forwarder and every running gateway, from
# /proc/PID/stat (fields 14 and 15, counted after the command name).
CLK_TCK=$(getconf CLK_TCK)
dut_cpu_ticks() {
    local p sum=0 t
    for p in $FWD_PID "${GW_PID[@]}"; do
        [ -n "$p" ] && [ -r "/proc/$p/stat" ] || continue
        t=$(sed 's/^.*) //' "/proc/$p/stat" | awk '{ print $12 + $13 }') || continue
        sum=$((sum + t))
    done
    echo "$sum"
}

jget() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(v if v is not None else "")' "$1" "$2"; }

# ---- one row: saturation search + latency trial ---------------------------------

run_row() {
    local topo="$1" size="$2" w="$3" backend="$4"
    local id="${topo}-${size}-w${w}-${backend}"
    local rdir="$BENCH_DIR/rows/$id" n=0
    rm -rf "$rdir"; mkdir -p "$rdir"
    blog "row $id: topology up"
    bench_topo_up "$topo" && dut_up "$topo" "$w" "$backend" || { dut_down || true; return 1; }
    ESP_SEQ=1
    local t="$rdir/t0"
    # 1. full speed
    trial "$topo" "$size" "$w" 0 "$t" >/dev/null || { dut_down || true; return 1; }
    local gen_pps rx_pps pass
    gen_pps=$(jget "$t/trial.json" offered_pps); rx_pps=$(jget "$t/trial.json" rx_pps)
    pass=$(python3 "$TABLE_PY" pass --tol "$LOSS_TOL" "$t/trial.json")
    blog "row $id: full speed: offered $gen_pps pps, received $rx_pps pps, pass=$pass"
    local lo=0 lo_dir="" hi="$gen_pps" r
    if [ "$pass" = 1 ]; then
        lo="$gen_pps"; lo_dir="$t"
    else
        # 2. binary search; the first probe is just under what the sink got at full speed.
        r=$(fmul "$rx_pps" 0.98)
        for n in $(seq 1 "$STEPS"); do
            [ "$r" -ge 1 ] || r=1
            t="$rdir/t$n"
            trial "$topo" "$size" "$w" "$r" "$t" >/dev/null || { dut_down || true; return 1; }
            pass=$(python3 "$TABLE_PY" pass --tol "$LOSS_TOL" "$t/trial.json")
            blog "row $id: step $n: rate $r pps: received $(jget "$t/trial.json" rx_pps) pps, lost $(jget "$t/trial.json" lost), pass=$pass"
            if [ "$pass" = 1 ]; then lo="$r"; lo_dir="$t"; else hi="$r"; fi
            # stop once the bracket is within 3 %
            if [ "$lo" != 0 ] && fle "$hi" "$(fmul "$lo" 1.03)"; then break; fi
            r=$(awk -v a="$lo" -v b="$hi" 'BEGIN { printf "%.0f", (a + b) / 2 }')
        done
    fi
    # No rate passed: the row shows the lowest probe's figures (its loss says so).
    if [ -z "$lo_dir" ]; then lo_dir="$t"; fi
    # 3. latency at half the saturation rate (of the lowest probe when none passed)
    local lat_rate lat_dir="$rdir/lat"
    if [ "$LAT_RATE" != 0 ]; then lat_rate="$LAT_RATE"
    elif [ "$lo" != 0 ]; then lat_rate=$(fmul "$lo" 0.5); else lat_rate=$(fmul "$hi" 0.5); fi
    [ "$lat_rate" -ge 1 ] || lat_rate=1
    trial "$topo" "$size" "$w" "$lat_rate" "$lat_dir" >/dev/null || { dut_down || true; return 1; }
    blog "row $id: latency at $lat_rate pps: p50 $(jget "$lat_dir/trial.json" p50_us) µs, p99 $(jget "$lat_dir/trial.json" p99_us) µs, lost $(jget "$lat_dir/trial.json" lost)"
    local gw_stats=()
    dut_down || return 1
    [ -f "$SECGW_RUN_DIR/gw0/stats.json" ] && [[ "$topo" =~ ^(a|c|bypass)$ ]] && gw_stats+=(--gw-stats "gw0=$SECGW_RUN_DIR/gw0/stats.json")
    [ -f "$SECGW_RUN_DIR/gw1/stats.json" ] && [[ "$topo" =~ ^(b|c)$ ]] && gw_stats+=(--gw-stats "gw1=$SECGW_RUN_DIR/gw1/stats.json")
    python3 "$TABLE_PY" row --topology "$topo" --size "$size" --workers "$w" --backend "$backend" \
        --saturation "$lo" --upper "$hi" --sat-trial "$lo_dir" --lat-trial "$lat_dir" --lat-rate "$lat_rate" \
        --trials "$rdir" "${gw_stats[@]}" >>"$ROWS_FILE"
}

# ---- trafgen cross-check ------------------------------------------------------------

# trafgen_conf SIZE FILE: one UDP packet, IP length SIZE, gen → sink addresses,
# flow 0's ports (so gw0 sends it in SA 1001 like our flow 0).
trafgen_conf() {
    local size="$1" payload=$(( $1 - 28 ))
    cat >"$2" <<EOF
/* secgw bench cross-check: UDP $GEN_IP:40000 -> $SINK_IP:5001, IP length $size */
{
  eth(da=$GEN_DST_MAC, sa=$GEN_MAC),
  ipv4(sa=$GEN_IP, da=$SINK_IP, ttl=64),
  udp(sp=40000, dp=5001),
  fill(0x00, $payload),
}
EOF
}

# gw_port_counter NAME PORT FIELD: from the gateway's stats file.
gw_port_counter() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(next(p[sys.argv[3]] for p in d["ports"] if p["name"]==sys.argv[2]))' \
        "$SECGW_RUN_DIR/$1/stats.json" "$2" "$3"
}

crosscheck() {
    local size="${XCHECK_SIZE:-${SIZE_LIST[0]}}" rate="$XCHECK_RATE"
    [ "$size" = imix ] && size=512
    if [ "$rate" = 0 ]; then
        rate=$(python3 "$TABLE_PY" sat --rows "$ROWS_FILE" --topology a --size "$size" --workers 1 --backend software)
        [ -n "$rate" ] && [ "$rate" != 0 ] && rate=$(fmul "$rate" 0.5) || rate=20000
    fi
    local count secs
    secs=$(awk -v a="$WARMUP" -v b="$TRIAL_SECS" 'BEGIN { print a + b }')
    count=$(awk -v r="$rate" -v s="$secs" 'BEGIN { printf "%.0f", r * s }')
    local xdir="$BENCH_DIR/crosscheck"; rm -rf "$xdir"; mkdir -p "$xdir"
    blog "cross-check: topology a, $size B, 1 worker, software, $rate pps, $count packets from trafgen"
    bench_topo_up a && dut_up a 1 software || { dut_down || true; return 1; }
    # trafgen's run: our sink counts what arrives (its frames carry no pktgen payload,
    # so the sink's count of other frames is the figure), gw0 counts rx/tx.
    trafgen_conf "$size" "$xdir/trafgen.cfg"
    local sink_secs
    sink_secs=$(awk -v a="$secs" 'BEGIN { print a + 3 }')
    ip netns exec "$(ns sink)" env --default-signal=INT,TERM "$SECGW_PKTGEN_BIN" sink --iface sink0 --queues 1 --core "$SINK_CORE" --xdp-mode "$XDP_MODE" \
        --idle-sleep-us "$SINK_IDLE_SLEEP" --duration "$sink_secs" --json "$xdir/trafgen-sink.json" --esp-config "$BENCH_REPO/configs/bench/gw1.toml" \
        >"$xdir/sink.out" 2>"$xdir/sink.err" </dev/null &
    local sink_pid=$! rc=0
    wait_xdp sink sink0 "$sink_pid" "$xdir/sink.err" || { dut_down || true; return 1; }
    nsx gen trafgen --dev gen0 --conf "$xdir/trafgen.cfg" --cpus 1 --no-sock-mem --rate "${rate}pps" --num "$count" \
        >"$xdir/trafgen.out" 2>&1 </dev/null || rc=$?
    wait "$sink_pid" || rc=$?
    [ "$rc" -eq 0 ] || { err "trafgen or sink failed ($rc):"; tail -20 "$xdir/trafgen.out" "$xdir/sink.err" >&2; dut_down || true; return 1; }
    dut_down || return 1
    cp "$SECGW_RUN_DIR/gw0/stats.json" "$xdir/trafgen-gw0.json"
    # our generator at the same rate and size, same topology
    dut_up a 1 software || { dut_down || true; return 1; }
    ESP_SEQ=1
    trial a "$size" 1 "$rate" "$xdir/pktgen" >/dev/null || { dut_down || true; return 1; }
    dut_down || return 1
    cp "$SECGW_RUN_DIR/gw0/stats.json" "$xdir/pktgen-gw0.json"
    python3 "$TABLE_PY" crosscheck --size "$size" --rate "$rate" --count "$count" \
        --trafgen-out "$xdir/trafgen.out" --trafgen-sink "$xdir/trafgen-sink.json" --trafgen-gw0 "$xdir/trafgen-gw0.json" \
        --pktgen "$xdir/pktgen" --pktgen-gw0 "$xdir/pktgen-gw0.json" >"$XCHECK_FILE"
}

# ---- main ---------------------------------------------------------------------------

# Sourced (for debugging one function): stop here.
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then set +e; return 0; fi

bench_cleanup() {
    fwd_stop 2>/dev/null || true
    gw_stop_all >/dev/null 2>&1 || true
    [ "$KEEP" = 1 ] || topo_down
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

START_EPOCH=$(date +%s)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
failed=0
for w in "${WORKER_LIST[@]}"; do
    for size in "${SIZE_LIST[@]}"; do
        # (d) and bypass first, so every row's ratio has its ceiling from this run.
        for topo in d bypass a b c; do
            [[ ",$TOPOS," == *",$topo,"* ]] || continue
            case "$topo" in
                d|bypass) run_row "$topo" "$size" "$w" - || { err "row $topo/$size/w$w failed"; failed=1; } ;;
                *) for backend in "${BACKEND_LIST[@]}"; do
                       run_row "$topo" "$size" "$w" "$backend" || { err "row $topo/$size/w$w/$backend failed"; failed=1; }
                   done ;;
            esac
        done
    done
done
if [ "$XCHECK" = 1 ]; then crosscheck || { err "cross-check failed"; failed=1; }; fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

table_args=(table --rows "$ROWS_FILE" --elapsed "$(( $(date +%s) - START_EPOCH ))"
    --meta "secgw=$("$SECGW_BIN" --version 2>/dev/null | head -1 || echo "?")"
    --meta "kernel=$(uname -r)" --meta "cpus=$(nproc)"
    --meta "loadavg_before=$LOAD_BEFORE" --meta "loadavg_after=$LOAD_AFTER"
    --meta "cores=gen+sink on core $GEN_CORE; 1 worker: gateway(s)/forwarder on core $DUT_CORE (both gateways of (c) share it); 2 workers: gateway workers on cores 0,1, sharing core 0 with gen+sink; forwarder on core $DUT_CORE"
    --meta "settings=crypto provider auto (ring for AES-GCM: gateways, ESP generator and sink), burst $BURST, idle_sleep_us $IDLE_SLEEP, xdp_mode $XDP_MODE, sink idle sleep $SINK_IDLE_SLEEP µs, flows $FLOWS, trial ${TRIAL_SECS}s after ${WARMUP}s warm-up, ≤$STEPS search steps, loss tolerance $LOSS_TOL %"
    --meta "method=saturation = highest gen --rate with loss ≤ tolerance (binary search from the full-speed trial); latency at 50 % of it; ratio_d = Mpps / (d) Mpps, same size and workers, same run")
[ -f "$XCHECK_FILE" ] && table_args+=(--crosscheck "$XCHECK_FILE")
[ -n "$JSON_OUT" ] && table_args+=(--json "$JSON_OUT")
python3 "$TABLE_PY" "${table_args[@]}"
exit $failed
