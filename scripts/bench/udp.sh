#!/usr/bin/env bash
# Side-by-side UDP benchmark: shoal_udp vs aquatic_udp 0.9.0, opentracker (Debian) and a
# floor responder, with both load testers. Prints a markdown table; see
# scripts/bench/udp_bench.py. SKIP_BUILD=1 and SKIP_OPENTRACKER=1 skip those steps.
#
#   scripts/bench/udp.sh                              # 2 cores: tracker on CPU 0, load on CPU 1
#   scripts/bench/udp.sh --tracker-cpus 0-7 --load-cpus 8-15
#   scripts/bench/udp.sh --help                       # every option
#
# Needs an idle machine (it checks the load average) and loopback only.
set -euo pipefail
cd "$(dirname "$0")/../.."

AQUATIC_ROOT="${AQUATIC_ROOT:-$PWD/.bench/aquatic}"
AQUATIC_VERSION=0.9.0

if [ -z "${SKIP_BUILD:-}" ]; then
    echo "==> building shoal (release)" >&2
    cargo build --release --locked -p shoal_udp -p shoal_udp_load_test >&2
fi
for tool in aquatic_udp aquatic_udp_load_test; do
    if [ ! -x "$AQUATIC_ROOT/bin/$tool" ]; then
        echo "==> installing $tool $AQUATIC_VERSION into $AQUATIC_ROOT" >&2
        # Not --locked: aquatic_udp's locked dependencies no longer build with current Rust.
        cargo install --root "$AQUATIC_ROOT" "$tool" --version "$AQUATIC_VERSION" >&2
    fi
done
# opentracker: Debian's build (whitelist-only); compared under our load tester with a
# whitelist of every torrent it sends.
OPENTRACKER_ARGS=()
if [ -z "${SKIP_OPENTRACKER:-}" ]; then
    if ! command -v opentracker >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "==> installing opentracker (Debian package)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y opentracker >&2 || true
        # The package enables a service on 0.0.0.0:6969; we only want the binary.
        if command -v systemctl >/dev/null; then systemctl disable --now opentracker >/dev/null 2>&1 || true; fi
    fi
    if command -v opentracker >/dev/null; then
        OPENTRACKER_ARGS=(--opentracker "$(command -v opentracker)")
    else
        echo "==> opentracker not available; comparing without it" >&2
    fi
fi
if ! command -v taskset >/dev/null; then
    echo "taskset (util-linux) is required" >&2
    exit 1
fi

exec python3 scripts/bench/udp_bench.py \
    --shoal-dir target/release --aquatic-dir "$AQUATIC_ROOT/bin" "${OPENTRACKER_ARGS[@]}" "$@"
