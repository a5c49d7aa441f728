#!/usr/bin/env bash
# testbed/demo.sh — build secgw, run it between two hosts, show what crosses the wan.
#
#   sudo bash testbed/demo.sh
#
# Builds target/release/secgw, brings up hostA — gw0 — wan — gw1 — hostB
# (testbed/lib.sh), starts both gateways with configs/ep0.toml and ep1.toml,
# pings hostA→hostB 5 times and gw0 twice, streams 1000 numbered UDP datagrams each way,
# summarises the capture of the gw0–gw1 link (which must hold ESP only), prints
# both gateways' counters and tears everything down, also on failure.
# Exits non-zero on any failure.
#
# Environment: SECGW_BIN (use another binary, e.g. testbed/refgw.py; then
# nothing is built), SECGW_CONFIG_DIR (default configs/), SECGW_NS_PREFIX.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

if [ "$(id -u)" -ne 0 ]; then echo "demo.sh: run as root (network namespaces)" >&2; exit 1; fi

if [ -z "${SECGW_BIN:-}" ]; then
    echo "== cargo build --release"
    cargo build --release
    # cargo's target directory: CARGO_TARGET_DIR (relative to the repository), else target/.
    case "${CARGO_TARGET_DIR:-target}" in /*) TARGET="$CARGO_TARGET_DIR" ;; *) TARGET="$REPO/${CARGO_TARGET_DIR:-target}" ;; esac
    export SECGW_BIN="$TARGET/release/secgw"
fi
CONFIG_DIR="${SECGW_CONFIG_DIR:-$REPO/configs}"

# shellcheck source=testbed/lib.sh
source "$REPO/testbed/lib.sh"
PY="$(command -v python3)"
COUNT=1000
WAN_PCAP="$SECGW_RUN_DIR/wan.pcap"
CAP_PID=""

# Another demo (or test) on the same namespaces would be torn down by
# topo_up, its logs deleted (helper-100): refuse, before the EXIT trap
# below could do it either.
if busy="$(topo_in_use)"; then
    echo "demo.sh: a testbed with SECGW_NS_PREFIX='${SECGW_NS_PREFIX}' is running (processes in its namespaces):" >&2
    echo "$busy" >&2
    echo "demo.sh: wait for it, stop it (source testbed/lib.sh; topo_down), or run with another SECGW_NS_PREFIX" >&2
    exit 1
fi

cleanup() {
    local rc=$?
    trap - EXIT
    set +e  # tear everything down whatever fails on the way (the capture's own exit status included)
    if [ -n "$CAP_PID" ]; then kill -TERM "$CAP_PID" 2>/dev/null; wait "$CAP_PID" 2>/dev/null; fi
    testbed_cleanup
    if [ "$rc" -eq 0 ]; then echo "== demo OK"; else echo "== demo FAILED (status $rc); logs in $SECGW_RUN_DIR" >&2; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for c in "$CONFIG_DIR/ep0.toml" "$CONFIG_DIR/ep1.toml"; do
    echo "== secgw check $c"
    "$SECGW_BIN" check "$c"
done

echo "== topology"
rm -rf "$SECGW_RUN_DIR"; mkdir -p "$SECGW_RUN_DIR"
topo_up
gw_start gw0 "$CONFIG_DIR/ep0.toml"
gw_start gw1 "$CONFIG_DIR/ep1.toml"

echo "== capturing the wan (br0 in $(ns wan))"
nsx wan tcpdump -i br0 -n -U --immediate-mode -s 0 -Z root -w "$WAN_PCAP" 2>"$SECGW_RUN_DIR/tcpdump.log" &
CAP_PID=$!
for _ in $(seq 1 100); do grep -q 'listening on' "$SECGW_RUN_DIR/tcpdump.log" && break; sleep 0.05; done

echo "== ping hostA -> hostB"
nsx hostA ping -n -c 5 -i 0.2 -W 2 198.51.100.10

echo "== ping hostA -> gw0's inside address (answered by secgw: gateway.icmp_echo)"
nsx hostA ping -n -c 2 -i 0.2 -W 2 192.0.2.1

# stream SRC_NS SRC DST_NS DST PORT
stream() {
    local sns="$1" src="$2" dns="$3" dst="$4" port="$5" ready="$SECGW_RUN_DIR/sink-$5.ready" out="$SECGW_RUN_DIR/sink-$5.json"
    rm -f "$ready"
    nsx "$dns" "$PY" testbed/udp_stream.py sink --bind "$dst" --port "$port" --count $COUNT \
        --timeout 30 --ready-file "$ready" >"$out" 2>"$SECGW_RUN_DIR/sink-$5.log" &
    local sink=$!
    for _ in $(seq 1 100); do [ -e "$ready" ] && break; sleep 0.05; done
    [ -e "$ready" ] || { echo "sink did not start" >&2; return 1; }
    echo "-- $src -> $dst:$port, $COUNT datagrams"
    nsx "$sns" "$PY" testbed/udp_stream.py send --src "$src" --dst "$dst" --port "$port" --count $COUNT --rate 2000
    wait "$sink"
    echo "   sink: $(cat "$out")"
    "$PY" - "$out" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
if r["missing"] or r["duplicates"]:
    sys.exit(f"   stream FAILED: {r['missing']} missing, {r['duplicates']} duplicates")
EOF
}
echo "== UDP streams"
stream hostA 192.0.2.10 hostB 198.51.100.10 5001
stream hostB 198.51.100.10 hostA 192.0.2.10 5002

sleep 0.5
kill -TERM "$CAP_PID"; wait "$CAP_PID" || true; CAP_PID=""  # (SIGINT is ignored by background jobs)
echo "== what crossed the wan: $(tcpdump -n -r "$WAN_PCAP" 2>/dev/null | wc -l) frames"
if command -v tshark >/dev/null; then
    tshark -n -r "$WAN_PCAP" -q -z io,phs 2>/dev/null | sed -n '/Protocol Hierarchy/,$p'
    echo "-- frames per (source, destination, SPI):"
    tshark -n -r "$WAN_PCAP" -T fields -e ip.src -e ip.dst -e esp.spi 2>/dev/null | sort | uniq -c
    echo "-- first frames:"
    tshark -n -r "$WAN_PCAP" -c 4 2>/dev/null
    non_esp=$(tshark -n -r "$WAN_PCAP" -Y 'not esp' 2>/dev/null | wc -l)
else
    tcpdump -n -r "$WAN_PCAP" 2>/dev/null | head -n 4
    non_esp=$(tcpdump -n -r "$WAN_PCAP" 'not (ip proto 50)' 2>/dev/null | wc -l)
fi
if [ "$non_esp" -ne 0 ]; then
    echo "FAILED: $non_esp frames on the wan are not ESP:" >&2
    tcpdump -n -e -r "$WAN_PCAP" 'not (ip proto 50)' 2>/dev/null | head -n 10 >&2
    exit 1
fi
echo "   all frames on the wan are ESP"

echo "== counters"
sleep 1.2
for g in gw0 gw1; do
    echo "-- $g (stats file; drop reasons with a non-zero count only):"
    "$PY" - "$SECGW_RUN_DIR/$g/stats.json" <<'EOF'
import json, sys
st = json.load(open(sys.argv[1]))
for p in st.get("ports", []):
    print(f"   port {p['name']:8} rx {p['rx_packets']:7} tx {p['tx_packets']:7} drops {p['drops']}")
for sa in st.get("sas", []):
    print(f"   SA {sa['spi']} {sa['direction']:8} packets {sa['packets']:7} errors {sa.get('errors', 0)}")
print("   drops:", {k: v for k, v in st.get("drops", {}).items() if v} or "none",
      " arp replies:", st.get("arp_replies"))
EOF
done
gw_stop gw0
gw_stop gw1
