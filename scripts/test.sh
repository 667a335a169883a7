#!/usr/bin/env bash
# The one test command. Installs what the tests need when it is missing (Rust's
# rustfmt and clippy, Debian's redis-server and pebble; the end-to-end scripts install their own
# clients), then runs,
# in order: formatting, clippy, the docs, unit and integration tests (the attack tests among
# them), every fuzz target for a bounded time, and the end-to-end tests under
# scripts/e2e/. CI (.ci/run) runs exactly this.
#
#   ./scripts/test.sh                  everything
#   SKIP_E2E=1 ./scripts/test.sh       everything but scripts/e2e/
#   SKIP_FUZZ=1 ./scripts/test.sh      everything but the fuzz targets
#   FUZZ_SECONDS=60 ./scripts/test.sh  fuzz longer (default 20 s per target)
#
# A test that cannot run here fails: a skip passes only for a condition this machine
# is expected to lack, named in SHOAL_TEST_SKIPS (comma-separated; the names are
# SKIP_CONDITIONS in crates/common/src/testing.rs: ipv6, root, memlock,
# default-ports, io_uring, namespaces). CI's machines lack none, so none is allowed
# by default; the allowed skips of a run are listed at its end.
#   SHOAL_TEST_SKIPS=ipv6 ./scripts/test.sh   on a machine without IPv6 loopback
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo is not installed: install Rust with rustup (https://rustup.rs)" >&2
        exit 1
    fi
    if ! cargo fmt --version >/dev/null 2>&1; then
        step "installing rustfmt"
        rustup component add rustfmt
    fi
    if ! cargo clippy --version >/dev/null 2>&1; then
        step "installing clippy"
        rustup component add clippy
    fi
}

# Installs Debian package $2 when command $1 is missing (as root; otherwise says how).
ensure_command() {
    local command=$1 package=$2
    command -v "$command" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "$command is missing: sudo apt-get install -y $package (or run this script as root)" >&2
        exit 1
    fi
    step "installing $package"
    export DEBIAN_FRONTEND=noninteractive
    # A fresh machine may have empty package lists; update only when the install fails.
    apt-get install -y --no-install-recommends "$package" >/dev/null ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends "$package" >/dev/null; }
}

ensure_rust
# The cluster tests (crates/*/tests/cluster.rs) run against a real redis-server on
# loopback, started on a free port by each test.
ensure_command redis-server redis-server
# The ACME tests (crates/{http,ws}/tests/acme.rs) get certificates from a real ACME
# CA: Let's Encrypt's pebble, with pebble-challtestsrv as its DNS server.
ensure_command pebble pebble
# Listener backlogs (crates/sockets, crates/http/tests/http.rs) are read from the
# kernel with ss.
ensure_command ss iproute2
# The documents' examples (crates/shoal/tests/documents.rs, about a second) are run as
# written: curl against the admin API, the stateless-key recipe in Python on a secret
# from openssl, every other shell block of README.md and documents/ unless it says
# why not; every TOML block is read by the shoal crate's unit tests.
ensure_command curl curl
# /metrics, the alerting rules and the dashboard's queries are checked with promtool
# (crates/shoal/tests/metrics.rs).
ensure_command promtool prometheus
ensure_command python3 python3
ensure_command openssl openssl
# The full-disk accounting test (crates/http/tests/accounting.rs) mounts a small tmpfs
# in a mount namespace of its own: unshare and nsenter.
ensure_command nsenter util-linux
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-always}"

export SHOAL_TEST_SKIPS="${SHOAL_TEST_SKIPS:-}"
SHOAL_TEST_SKIP_LOG="$(mktemp -t shoal-test-skips.XXXXXX)"
export SHOAL_TEST_SKIP_LOG
trap 'rm -f "$SHOAL_TEST_SKIP_LOG"' EXIT

# The HTTP tracker's tests run glommio executors, whose io_uring buffers are locked
# memory; some systems default to a 64 KiB limit. Raise it where we may (the tracker
# itself explains the limit when it is too low).
ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null || true

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --locked --workspace --all-targets -- -D warnings

step "cargo doc (private items too; warnings are errors: links that lead nowhere fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps --document-private-items

step "unit and integration tests"
cargo test --locked --workspace

# The HTTP and WebTorrent trackers run on epoll above (network.io_backend's default);
# their tests again on io_uring, the backend operators can choose (forced: a host
# where it cannot be set up fails here, as CI's machines can set it up).
step "the HTTP and WebTorrent trackers' tests on the io_uring backend"
SHOAL_TEST_IO_BACKEND=io_uring cargo test --locked -p shoal_http -p shoal_ws

if [ -z "${SKIP_FUZZ:-}" ]; then
    step "fuzzing every target for ${FUZZ_SECONDS:-20} s (coverage-guided, stable toolchain)"
    scripts/fuzz.sh
fi

if [ -z "${SKIP_E2E:-}" ]; then
    shopt -s nullglob
    for script in scripts/e2e/*.sh; do
        step "end-to-end: $script"
        "$script"
    done
    # The real clients through the TCP trackers again, on the io_uring backend.
    for script in scripts/e2e/{http,https,ws,wss}.sh; do
        step "end-to-end on io_uring: $script"
        SHOAL__NETWORK__IO_BACKEND=io_uring "$script"
    done
fi

step "all tests passed"
if [ -n "${SKIP_FUZZ:-}" ] || [ -n "${SKIP_E2E:-}" ]; then
    echo "not run: ${SKIP_FUZZ:+fuzzing (SKIP_FUZZ) }${SKIP_E2E:+end-to-end tests (SKIP_E2E)}"
fi
if [ -s "$SHOAL_TEST_SKIP_LOG" ]; then
    echo "skipped, for conditions SHOAL_TEST_SKIPS=\"$SHOAL_TEST_SKIPS\" allows:"
    sed 's/^/  /' "$SHOAL_TEST_SKIP_LOG"
else
    echo "no test skipped (SHOAL_TEST_SKIPS=\"$SHOAL_TEST_SKIPS\")"
fi
