#!/usr/bin/env bash
# Soak: each tracker for a while at saturation under its load tester, with garbage,
# connection churn, slow readers and a flood of fresh info hashes mixed in; checks
# that a well-behaved client is served correctly throughout, that RSS stays within the
# budget the capacity limits set, and that the process never restarts. Prints a
# markdown report (record runs in documents/benchmarks/soak-DATE.md).
#
#   scripts/soak.sh                    10 minutes per tracker
#   scripts/soak.sh --minutes 2 --trackers udp
#
# Not part of scripts/test.sh (it takes half an hour); loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${SKIP_BUILD:-}" ]; then
    echo "==> building the trackers and load testers (release)" >&2
    cargo build --release --locked -p shoal_udp -p shoal_udp_load_test -p shoal_http \
        -p shoal_http_load_test -p shoal_ws -p shoal_ws_load_test >&2
fi
# glommio locks its io_uring buffers; raise the limit where we may.
ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null || true
ulimit -n 65536 2>/dev/null || true

exec python3 scripts/soak/soak.py --bin-dir "${CARGO_TARGET_DIR:-target}/release" "$@"
