#!/usr/bin/env bash
# Side-by-side WebTorrent benchmark: shoal_ws vs aquatic_ws 0.9.0, with both load
# testers (aquatic_ws_load_test speaks wss only, so its runs use TLS on both
# trackers), at several connection counts. Prints a markdown table; see
# scripts/bench/ws_bench.py. SKIP_BUILD=1 skips the release build.
#
#   scripts/bench/ws.sh                          # 2 cores: tracker on CPU 0, load on CPU 1
#   scripts/bench/ws.sh --tracker-cpus 0-7 --load-cpus 8-15
#   scripts/bench/ws.sh --help
#
# Needs an idle machine (it checks the load average) and loopback only.
set -euo pipefail
cd "$(dirname "$0")/../.."

AQUATIC_ROOT="${AQUATIC_ROOT:-$PWD/.bench/aquatic}"
AQUATIC_VERSION=0.9.0

if [ -z "${SKIP_BUILD:-}" ]; then
    echo "==> building shoal (release)" >&2
    cargo build --release --locked -p shoal_ws -p shoal_ws_load_test >&2
fi
for tool in aquatic_ws aquatic_ws_load_test; do
    if [ ! -x "$AQUATIC_ROOT/bin/$tool" ]; then
        echo "==> installing $tool $AQUATIC_VERSION into $AQUATIC_ROOT" >&2
        cargo install --root "$AQUATIC_ROOT" "$tool" --version "$AQUATIC_VERSION" >&2
    fi
done
for tool in taskset openssl; do
    command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 1; }
done
# glommio (both trackers) locks io_uring buffers in memory; 10k+ connections need
# as many file descriptors on each side.
ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null || true
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -H -n)" 2>/dev/null || true

exec python3 scripts/bench/ws_bench.py \
    --shoal-dir target/release --aquatic-dir "$AQUATIC_ROOT/bin" "$@"
