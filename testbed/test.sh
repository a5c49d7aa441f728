#!/usr/bin/env bash
# testbed/test.sh — the one command that installs what the tests need and runs them all.
#
#   bash testbed/test.sh        (as root, from any directory)
#
# 1. installs the Debian packages (once; quick when present) and the Python
#    packages scapy, cryptography, pytest, prometheus_client, jsonschema (the
#    last two check `secgw ctl` output in tests/ctl.rs);
# 2. cargo test --release (every Rust test), then the independent checks of
#    the RFC vector files (tests/vectors/check_*.py, pyca/cryptography), and
#    cargo check of the fuzz targets (fuzz/, so they keep compiling on stable);
# 3. cargo build --release, then python3 -m pytest -v tests/e2e (netns
#    end-to-end tests against target/release/secgw; needs root).
# Exits non-zero if anything fails; the Rust tests' failure does not stop the
# e2e tests from running, so one run reports both.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
CARGO_BIN="${CARGO_HOME:-${HOME:-/root}/.cargo}/bin"
if [ -d "$CARGO_BIN" ]; then case ":$PATH:" in *":$CARGO_BIN:"*) ;; *) PATH="$CARGO_BIN:$PATH" ;; esac; fi

if [ "$(id -u)" -ne 0 ]; then
    echo "test.sh: must run as root (apt-get, network namespaces, AF_XDP)" >&2
    exit 1
fi

echo "== dependencies"
APT_PKGS=(libelf-dev zlib1g-dev libpcap-dev clang llvm pkg-config m4 gcc-multilib
          iproute2 iputils-ping ethtool tcpdump tshark python3-pip
          # DPDK 22.11's ipsec-secgw sample configs (ep0.cfg, ep1.cfg) that
          # tests/dpdk_import.rs and tests/e2e/test_dpdk_import.py import
          dpdk-doc
          # trafgen, the independent generator testbed/bench.sh cross-checks
          # secgw-pktgen with (tests/e2e/test_bench.py)
          netsniff-ng)
missing=()
for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "apt-get install ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
fi
if ! python3 -c 'import scapy, cryptography, pytest, prometheus_client, jsonschema' 2>/dev/null; then
    pip_args=(install --quiet scapy cryptography pytest prometheus_client jsonschema)
    # Debian's own python3 refuses pip installs without this flag (PEP 668).
    if python3 -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
        pip_args+=(--break-system-packages)
    fi
    python3 -m pip "${pip_args[@]}"
fi
command -v cargo >/dev/null || { echo "test.sh: cargo not found (a Rust toolchain is needed)" >&2; exit 1; }

status=0
echo "== cargo test --release"
cargo test --release || status=1

echo "== tests/vectors/check_*.py"
for check in tests/vectors/check_*.py; do
    echo "-- $check"
    python3 "$check" || status=1
done

echo "== cargo check --manifest-path fuzz/Cargo.toml"
cargo check --manifest-path fuzz/Cargo.toml --bins || status=1

echo "== cargo build --release"
if cargo build --release; then
    echo "== python3 -m pytest -v tests/e2e"
    SECGW_E2E_BUILD=0 python3 -m pytest -v -p no:cacheprovider tests/e2e || status=1
else
    status=1
fi

if [ $status -ne 0 ]; then echo "== test.sh: FAILED" >&2; else echo "== test.sh: all passed"; fi
exit $status
