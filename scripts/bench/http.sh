#!/usr/bin/env bash
# Side-by-side HTTP benchmark: shoal_http vs aquatic_http 0.9.0, with nginx returning a
# fixed body as the ceiling, plain and TLS, keep-alive on and off, with three load
# testers (ours, aquatic's, and wrk). Prints a markdown table; see scripts/bench/http_bench.py.
#
#   scripts/bench/http.sh                         # 2 cores: server on CPU 0, load on CPU 1
#   scripts/bench/http.sh --tracker-cpus 0-7 --load-cpus 8-15
#   scripts/bench/http.sh --help
set -euo pipefail
cd "$(dirname "$0")/../.."

AQUATIC_ROOT="${AQUATIC_ROOT:-$PWD/.bench/aquatic}"
AQUATIC_VERSION=0.9.0

if [ -z "${SKIP_BUILD:-}" ]; then
    echo "==> building shoal (release)" >&2
    cargo build --release --locked -p shoal_http -p shoal_http_load_test >&2
fi
for tool in aquatic_http aquatic_http_load_test; do
    if [ ! -x "$AQUATIC_ROOT/bin/$tool" ]; then
        echo "==> installing $tool $AQUATIC_VERSION into $AQUATIC_ROOT" >&2
        cargo install --root "$AQUATIC_ROOT" "$tool" --version "$AQUATIC_VERSION" >&2
    fi
done
if ! command -v nginx >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "==> installing nginx (Debian package)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y nginx-light >&2 || DEBIAN_FRONTEND=noninteractive apt-get install -y nginx >&2
        # The package may start a server on port 80; we only want the binary.
        if command -v systemctl >/dev/null; then systemctl disable --now nginx >/dev/null 2>&1 || true; fi
    else
        echo "nginx is required (apt-get install nginx-light)" >&2
        exit 1
    fi
fi
if ! command -v wrk >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "==> installing wrk (Debian package)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y wrk >&2
fi
for tool in taskset openssl wrk; do
    command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 1; }
done
# glommio (shoal_http, aquatic_http) locks io_uring buffers in memory.
ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null || true

exec python3 scripts/bench/http_bench.py \
    --shoal-dir target/release --aquatic-dir "$AQUATIC_ROOT/bin" "$@"
