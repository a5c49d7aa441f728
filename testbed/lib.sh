# shellcheck shell=bash
# testbed/lib.sh — network-namespace testbed for secgw (source it, don't run it).
#
#   hostA ── gw0 ══ wan (bridge br0) ══ gw1 ── hostB
#
#   hostA  a0      192.0.2.10/24     02:00:00:00:0a:01  default via 192.0.2.1
#                  2001:db8:a::10/64                    default via 2001:db8:a::1
#   gw0    gw0-in  (192.0.2.1, 2001:db8:a::1)       02:00:00:00:00:01  peer of a0
#          gw0-out (203.0.113.1, 2001:db8:ff::1)    02:00:00:00:00:02  peer of wan0
#   wan    br0 = { wan0, wan1 }      no addresses; capture the gw0–gw1 link here
#   gw1    gw1-out (203.0.113.2, 2001:db8:ff::2)    02:00:00:00:01:02  peer of wan1
#          gw1-in  (198.51.100.1, 2001:db8:b::1)    02:00:00:00:01:01  peer of b0
#   hostB  b0      198.51.100.10/24  02:00:00:00:0b:01  default via 198.51.100.1
#                  2001:db8:b::10/64                    default via 2001:db8:b::1
#
# The gateway addresses in brackets are not given to the kernel: secgw answers
# ARP and IPv6 Neighbor Solicitations for them itself (the IPv6 ones are in
# configs/ep*-v6.toml). IPv6 is on only on a0 and b0 (no link-local address,
# no DAD, no router solicitations, MLD reports dropped on egress), so a
# gateway sees IPv6 from a host only when the host sends traffic (and the
# Neighbor Solicitations that traffic needs); the wan never carries IPv6 but
# what the gateways send. Captures inside gw0/gw1 do not see frames that the XDP
# program redirects to AF_XDP: capture in `wan` (br0/wan0/wan1), hostA or hostB.
#
# Everything traffic-bearing lives in namespaces this file creates; nothing is
# sent to any other address. Namespace names take the prefix $SECGW_NS_PREFIX
# (default empty) so two testbeds can coexist; interface names live inside the
# namespaces and never clash.
#
# Functions:
#   topo_up / topo_down           build / destroy the topology (topo_up first
#                                 removes a stale one left by a killed run)
#   topo_in_use                   list processes in this prefix's namespaces
#                                 (a live testbed; demo.sh refuses to start then)
#   ns NAME                       print the real namespace name of NAME
#   nsx NAME CMD...               run CMD inside namespace NAME
#   gw_start NAME CONFIG [ARGS]   start secgw in namespace NAME (gw0/gw1) in the
#                                 background; waits for `ready` on stderr
#   gw_stop NAME                  SIGINT, wait, show final counters; fails if the
#                                 exit status is not 0 or XDP stayed attached
#   gw_stop_all                   gw_stop every gateway this shell started
#   kernel_gw_up / kernel_gw_down stand-in: give gw0/gw1 kernel addresses and
#                                 plain IP forwarding (no ESP) to test the topology
#   testbed_cleanup               gw_stop_all + topo_down (use in `trap … EXIT`)

TESTBED_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$TESTBED_DIR/.." && pwd)"
SECGW_NS_PREFIX="${SECGW_NS_PREFIX:-}"
# cargo's target directory: CARGO_TARGET_DIR (relative to the repository), else target/.
case "${CARGO_TARGET_DIR:-target}" in /*) CARGO_TARGET="$CARGO_TARGET_DIR" ;; *) CARGO_TARGET="$REPO_ROOT/${CARGO_TARGET_DIR:-target}" ;; esac
SECGW_BIN="${SECGW_BIN:-$CARGO_TARGET/release/secgw}"
SECGW_RUN_DIR="${SECGW_RUN_DIR:-/tmp/secgw-testbed${SECGW_NS_PREFIX:+-$SECGW_NS_PREFIX}}"
SECGW_READY_TIMEOUT="${SECGW_READY_TIMEOUT:-20}"
# Queues per veth: one AF_XDP socket per worker and port queue (multi-worker configs need 2).
SECGW_QUEUES="${SECGW_QUEUES:-2}"

TESTBED_NAMESPACES=(hostA gw0 wan gw1 hostB)

log() { printf '[testbed] %s\n' "$*" >&2; }
err() { printf '[testbed] ERROR: %s\n' "$*" >&2; }

ns() { printf '%s%s' "$SECGW_NS_PREFIX" "$1"; }
nsx() { local n; n="$(ns "$1")"; shift; ip netns exec "$n" "$@"; }

_ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx -- "$1"; }

# Kill every process still running in a namespace (only processes inside our
# own namespaces, found by `ip netns pids`).
_ns_kill_pids() {
    local n="$1" pids
    pids="$(ip netns pids "$n" 2>/dev/null || true)"
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    kill -INT $pids 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids="$(ip netns pids "$n" 2>/dev/null || true)"
        [ -n "$pids" ] || return 0
        sleep 0.2
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
}

# topo_in_use — print "NAMESPACE: PIDS" for each namespace of this prefix's
# testbed that has processes in it (another run of it is live); status 0
# if any has.
topo_in_use() {
    local b n pids any=1
    for b in "${TESTBED_NAMESPACES[@]}"; do
        n="$(ns "$b")"
        _ns_exists "$n" || continue
        pids="$(ip netns pids "$n" 2>/dev/null | tr '\n' ' ')"
        if [ -n "${pids// /}" ]; then echo "$n: $pids"; any=0; fi
    done
    return $any
}

topo_down() {
    local b n
    for b in "${TESTBED_NAMESPACES[@]}"; do
        n="$(ns "$b")"
        if _ns_exists "$n"; then
            _ns_kill_pids "$n"
            ip netns del "$n" 2>/dev/null || true
        fi
    done
    # A veth whose namespace vanished takes its peer with it; nothing else to do.
    return 0
}

_sysctl_ns() { nsx "$1" sysctl -qw "$2=$3" >/dev/null; }

# Settings every interface of the testbed gets: no IPv6, no offloads, MTU 1500.
_if_prep() {
    local b="$1" ifc="$2"
    _sysctl_ns "$b" "net.ipv6.conf.$ifc.disable_ipv6" 1
    nsx "$b" ip link set dev "$ifc" mtu 1500
    # tx checksum offload off: veth would otherwise hand AF_XDP partially
    # checksummed frames (CHECKSUM_PARTIAL) that are copied verbatim.
    nsx "$b" ethtool -K "$ifc" tx off tso off gso off gro off >/dev/null 2>&1 ||
        nsx "$b" ethtool -K "$ifc" tx off >/dev/null
}

# IPv6 on a host's interface (before it is up): no link-local address
# (addr_gen_mode 1), no DAD, no router solicitations or advertisements.
# The only unsolicited IPv6 left is the MLD report of the solicited-node
# group the address joins when the link comes up (Linux reports every
# group but ff02::1); its two copies are sent within 10 ms and topo_up
# waits for them, before any gateway runs (this kernel has no tc
# classifier to drop them). There is no MLD querier, so none follow.
_host_ipv6() {
    local b="$1" ifc="$2"
    _sysctl_ns "$b" "net.ipv6.conf.$ifc.addr_gen_mode" 1
    _sysctl_ns "$b" "net.ipv6.conf.$ifc.accept_dad" 0
    _sysctl_ns "$b" "net.ipv6.conf.$ifc.router_solicitations" 0
    _sysctl_ns "$b" "net.ipv6.conf.$ifc.accept_ra" 0
    _sysctl_ns "$b" "net.ipv6.conf.$ifc.mldv2_unsolicited_report_interval" 10
    _sysctl_ns "$b" "net.ipv6.conf.$ifc.mldv1_unsolicited_report_interval" 10
    _sysctl_ns "$b" "net.ipv6.conf.$ifc.disable_ipv6" 0
}

_veth() { # _veth NS1 IF1 MAC1 NS2 IF2 MAC2
    local q="${SECGW_QUEUES:-2}"
    ip -n "$(ns "$1")" link add "$2" address "$3" numtxqueues "$q" numrxqueues "$q" type veth \
        peer name "$5" netns "$(ns "$4")" address "$6" numtxqueues "$q" numrxqueues "$q"
}

topo_up() {
    local b n
    topo_down
    for b in "${TESTBED_NAMESPACES[@]}"; do
        n="$(ns "$b")"
        ip netns add "$n" || { err "cannot create namespace $n"; return 1; }
        # IPv6 off before any interface exists, so none ever sends RS/MLD/DAD.
        _sysctl_ns "$b" net.ipv6.conf.all.disable_ipv6 1
        _sysctl_ns "$b" net.ipv6.conf.default.disable_ipv6 1
        _sysctl_ns "$b" net.ipv6.conf.lo.disable_ipv6 1
        nsx "$b" ip link set lo up
    done
    # The gateways' kernels must not route (they have no addresses either, so
    # they answer no ARP and emit nothing).
    for b in gw0 gw1; do _sysctl_ns "$b" net.ipv4.ip_forward 0; done

    _veth hostA a0 02:00:00:00:0a:01 gw0 gw0-in 02:00:00:00:00:01 || return 1
    _veth gw0 gw0-out 02:00:00:00:00:02 wan wan0 02:00:00:00:aa:00 || return 1
    _veth wan wan1 02:00:00:00:aa:01 gw1 gw1-out 02:00:00:00:01:02 || return 1
    _veth gw1 gw1-in 02:00:00:00:01:01 hostB b0 02:00:00:00:0b:01 || return 1

    nsx wan ip link add br0 address 02:00:00:00:aa:ff type bridge stp_state 0 mcast_snooping 0 || return 1
    _sysctl_ns wan net.ipv6.conf.br0.disable_ipv6 1

    _if_prep hostA a0
    _if_prep gw0 gw0-in
    _if_prep gw0 gw0-out
    _if_prep wan wan0
    _if_prep wan wan1
    _if_prep gw1 gw1-out
    _if_prep gw1 gw1-in
    _if_prep hostB b0

    nsx wan ip link set wan0 master br0
    nsx wan ip link set wan1 master br0
    nsx wan ip link set br0 up
    nsx wan ip link set wan0 up
    nsx wan ip link set wan1 up

    nsx gw0 ip link set gw0-in up
    nsx gw0 ip link set gw0-out up
    nsx gw1 ip link set gw1-out up
    nsx gw1 ip link set gw1-in up

    _host_ipv6 hostA a0 || return 1
    _host_ipv6 hostB b0 || return 1

    nsx hostA ip addr add 192.0.2.10/24 dev a0
    nsx hostA ip -6 addr add 2001:db8:a::10/64 dev a0 nodad
    nsx hostA ip link set a0 up
    nsx hostA ip route add default via 192.0.2.1
    nsx hostA ip -6 route add default via 2001:db8:a::1 dev a0
    nsx hostB ip addr add 198.51.100.10/24 dev b0
    nsx hostB ip -6 addr add 2001:db8:b::10/64 dev b0 nodad
    nsx hostB ip link set b0 up
    nsx hostB ip route add default via 198.51.100.1
    nsx hostB ip -6 route add default via 2001:db8:b::1 dev b0

    # Wait for carrier on every link (veth is up as soon as both ends are).
    local i
    for i in $(seq 1 50); do
        if nsx hostA ip -br link show a0 | grep -q ' UP ' &&
           nsx hostB ip -br link show b0 | grep -q ' UP ' &&
           nsx wan ip -br link show br0 | grep -q ' UP '; then
            # The hosts' MLD reports (see _host_ipv6) are out by now or soon.
            sleep 0.3
            log "topology up (namespaces: $(for b in "${TESTBED_NAMESPACES[@]}"; do printf '%s ' "$(ns "$b")"; done))"
            return 0
        fi
        sleep 0.1
    done
    err "links did not come up"
    return 1
}

# --- kernel stand-in (topology check only: plain routing, no ESP) -----------

kernel_gw_up() {
    nsx gw0 ip addr add 192.0.2.1/24 dev gw0-in
    nsx gw0 ip addr add 203.0.113.1/24 dev gw0-out
    nsx gw0 ip route add 198.51.100.0/24 via 203.0.113.2
    nsx gw1 ip addr add 198.51.100.1/24 dev gw1-in
    nsx gw1 ip addr add 203.0.113.2/24 dev gw1-out
    nsx gw1 ip route add 192.0.2.0/24 via 203.0.113.1
    for b in gw0 gw1; do _sysctl_ns "$b" net.ipv4.ip_forward 1; done
}

kernel_gw_down() {
    for b in gw0 gw1; do _sysctl_ns "$b" net.ipv4.ip_forward 0; done
    nsx gw0 ip addr flush dev gw0-in
    nsx gw0 ip addr flush dev gw0-out
    nsx gw1 ip addr flush dev gw1-in
    nsx gw1 ip addr flush dev gw1-out
}

# --- gateways ----------------------------------------------------------------

declare -gA GW_PID=()

_gw_ifaces() { case "$1" in gw0) echo "gw0-in gw0-out" ;; gw1) echo "gw1-out gw1-in" ;; esac; }

# gw_start NAME CONFIG [extra secgw run args...]
gw_start() {
    local name="$1" cfg="$2"; shift 2
    local dir="$SECGW_RUN_DIR/$name"
    mkdir -p "$dir"
    [ -x "$SECGW_BIN" ] || { err "secgw binary not found at $SECGW_BIN (cargo build --release)"; return 1; }
    [ -f "$cfg" ] || { err "config $cfg not found"; return 1; }
    : >"$dir/stderr.log"; : >"$dir/stdout.log"; rm -f "$dir/stats.json"
    # Two testbeds must not share a control socket: in a prefixed one
    # (SECGW_NS_PREFIX), unless the config (`socket =`, `control.socket =`,
    # `control = { socket = … }`) or the caller (`--socket`) names a socket,
    # the gateway listens on /run/secgw/<namespace>.sock instead of the
    # default /run/secgw/<gateway.name>.sock.
    local sock=()
    if [ -n "$SECGW_NS_PREFIX" ] \
        && ! grep -vE '^[[:space:]]*#' "$cfg" | grep -qE '(^|[[:space:].{,])socket[[:space:]]*=' \
        && [[ " $* " != *" --socket "* && " $* " != *" --socket="* ]]; then
        sock=(--socket "/run/secgw/$(ns "$name").sock")
    fi
    log "starting $name: $SECGW_BIN run --config $cfg --stats-file $dir/stats.json ${sock[*]} $*"
    # A background job of a non-interactive shell starts with SIGINT ignored;
    # env --default-signal gives the gateway a normal SIGINT back (gw_stop uses it).
    ip netns exec "$(ns "$name")" env --default-signal=INT,TERM "$SECGW_BIN" run --config "$cfg" \
        --stats-file "$dir/stats.json" "${sock[@]}" "$@" \
        >"$dir/stdout.log" 2>"$dir/stderr.log" </dev/null &
    GW_PID[$name]=$!
    echo "${GW_PID[$name]}" >"$dir/pid"
    local deadline=$((SECONDS + SECGW_READY_TIMEOUT))
    while [ $SECONDS -lt $deadline ]; do
        # The "ready" log line (`… INFO secgw::control::run: ready gateway=…`),
        # not any line with the word in it ("already listening" is a failure).
        if grep -qE ': ready( |$)' "$dir/stderr.log" 2>/dev/null; then
            log "$name ready (pid ${GW_PID[$name]})"
            return 0
        fi
        if ! kill -0 "${GW_PID[$name]}" 2>/dev/null; then
            local rc=0
            wait "${GW_PID[$name]}" || rc=$?
            unset "GW_PID[$name]"
            log "---- $name stderr ----"; cat "$dir/stderr.log" >&2
            log "---- $name stdout ----"; cat "$dir/stdout.log" >&2
            err "$name exited with status $rc before it was ready"
            return 1
        fi
        sleep 0.1
    done
    log "---- $name stderr (no 'ready' after ${SECGW_READY_TIMEOUT}s) ----"
    cat "$dir/stderr.log" >&2
    kill -INT "${GW_PID[$name]}" 2>/dev/null || true
    sleep 1
    kill -KILL "${GW_PID[$name]}" 2>/dev/null || true
    wait "${GW_PID[$name]}" 2>/dev/null || true
    unset "GW_PID[$name]"
    err "$name not ready after ${SECGW_READY_TIMEOUT}s"
    return 1
}

# gw_stop NAME — SIGINT, wait (10 s, then SIGKILL), print final counters.
gw_stop() {
    local name="$1" dir="$SECGW_RUN_DIR/$1" pid rc=0 i
    pid="${GW_PID[$name]:-}"
    [ -n "$pid" ] || return 0
    kill -INT "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name did not exit 10 s after SIGINT: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" || rc=$?
    unset "GW_PID[$name]"
    log "---- $name final counters (stdout) ----"
    cat "$dir/stdout.log" >&2
    local bad=0 ifc
    if [ "$rc" -ne 0 ]; then
        log "---- $name stderr (tail) ----"; tail -n 30 "$dir/stderr.log" >&2
        err "$name exited with status $rc"; bad=1
    fi
    for ifc in $(_gw_ifaces "$name"); do
        if nsx "$name" ip link show "$ifc" 2>/dev/null | grep -qw 'xdp\|xdpgeneric\|xdpdrv'; then
            err "XDP program still attached to $ifc in $(ns "$name") after exit"; bad=1
        fi
    done
    return $bad
}

gw_stop_all() {
    local n rc=0
    for n in "${!GW_PID[@]}"; do gw_stop "$n" || rc=1; done
    return $rc
}

# gw_stats NAME — print the gateway's latest JSON stats file.
gw_stats() { cat "$SECGW_RUN_DIR/$1/stats.json"; }

testbed_cleanup() {
    gw_stop_all || true
    topo_down
}
