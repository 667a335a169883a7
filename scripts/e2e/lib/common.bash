# Shared by the end-to-end scripts in scripts/e2e/ (sourced, not run; it lives in lib/
# so that scripts/test.sh, which runs scripts/e2e/*.sh, does not take it for a test).
#
# What it gives a script:
#   e2e_init NAME           a work directory ($WORK) and a trap that, on exit, stops every
#                           process the script started (by PID) and, on failure, prints
#                           every log under $WORK
#   start_bg NAME CMD...    runs CMD in the background, output to $WORK/NAME.log
#   stop_bg NAME            SIGTERM, then waits (SIGKILL after 10 s); fails if it was
#                           already dead, needed the SIGKILL or exited non-zero
#   kill_bg NAME            SIGKILL, for a process whose clean exit does not matter
#   start_tracker udp|http|ws CONFIG
#                           starts target/debug/shoal_* (building it when missing or
#                           older than the sources) and sets TRACKER_PORT4/TRACKER_PORT6
#                           from the "listening on" lines it logs (configs use port 0,
#                           so the kernel picks free ports: no races with other tests)
#   wait_for_line FILE LINE SECONDS NAME...
#                           waits until FILE has the line LINE; fails early if one of
#                           the named background processes exits
#   need_apt PKG...         installs Debian packages that are missing (as root)
#   fail MSG                prints MSG and exits 1 (the trap then prints the logs)
#   on_cleanup FUNCTION     FUNCTION runs on exit, after the background processes stop
#   skip_loudly CONDITION LINE...
#                           a boxed SKIPPED notice naming CONDITION (one of
#                           SKIP_CONDITIONS in crates/common/src/testing.rs: ipv6,
#                           root, namespaces, ...), then exit 0 if the run allows
#                           that condition to be missing (SHOAL_TEST_SKIPS, set by
#                           scripts/test.sh; the skip is noted in SHOAL_TEST_SKIP_LOG)
#                           and 1 if not; exit 0 when SHOAL_TEST_SKIPS is unset (a
#                           script run by hand). Only for reasons that installing
#                           something cannot fix
#
# Every failure goes through `exit 1`, so the EXIT trap always runs.

set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_ROOT="$(cd "$E2E_DIR/../.." && pwd)"
# Debian's interpreter: python3-libtorrent is installed for it, not for a python3 that
# may come first on PATH (pyenv, a virtualenv).
# shellcheck disable=SC2034 # used by lib/libtorrent.bash
SYS_PYTHON=/usr/bin/python3

declare -A BG_PIDS=()
E2E_CLEANUPS=()
WORK=""
E2E_NAME=""
E2E_START=$SECONDS

say() { printf '[%s %s] %s\n' "$E2E_NAME" "$(date +%H:%M:%S)" "$*"; }

fail() {
    printf '[%s %s] FAIL: %s\n' "$E2E_NAME" "$(date +%H:%M:%S)" "$*" >&2
    exit 1
}

# A loud notice for a test that cannot run here for a reason that installing
# something would not fix; a failure unless the run allows the condition (see the
# usage above).
skip_loudly() {
    local condition=$1 rc=0
    shift
    case " ipv6 root memlock default-ports io_uring namespaces " in
    *" $condition "*) ;;
    *) fail "skip_loudly: $condition is not a skip condition (crates/common/src/testing.rs)" ;;
    esac
    if [ -n "${SHOAL_TEST_SKIPS+set}" ]; then
        case ",${SHOAL_TEST_SKIPS// /}," in
        *",$condition,"*)
            [ -z "${SHOAL_TEST_SKIP_LOG:-}" ] ||
                printf 'skipped %s (%s): %s\n' "$E2E_NAME" "$condition" "$*" >>"$SHOAL_TEST_SKIP_LOG"
            ;;
        *) rc=1 ;;
        esac
    fi
    {
        printf '\n%s\n' "################################################################"
        printf '# SKIPPED: %s (%s)\n' "$E2E_NAME" "$condition"
        printf '# %s\n' "$@"
        [ "$rc" -eq 0 ] || printf '# a failure: this run allows no skip for %s (SHOAL_TEST_SKIPS="%s", set in scripts/test.sh)\n' \
            "$condition" "$SHOAL_TEST_SKIPS"
        printf '%s\n\n' "################################################################"
    } >&2
    exit "$rc"
}

_e2e_cleanup() {
    local rc=$?
    set +e
    local name pid
    # Ask every process still running to stop, then give them a moment, then kill.
    for name in "${!BG_PIDS[@]}"; do
        pid=${BG_PIDS[$name]}
        kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
    done
    for name in "${!BG_PIDS[@]}"; do
        pid=${BG_PIDS[$name]}
        # 15 s: a client may wait 5 s for the tracker to take its stopped announce,
        # and the run inside a network namespace (ws.sh) stops its own processes.
        for _ in $(seq 150); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "[$E2E_NAME] $name (pid $pid) ignored SIGTERM; killing it" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
        wait "$pid" 2>/dev/null
    done
    local cleanup
    for cleanup in "${E2E_CLEANUPS[@]}"; do
        "$cleanup"
    done
    if [ "$rc" -ne 0 ] && [ -n "$WORK" ] && [ -d "$WORK" ]; then
        local log
        for log in "$WORK"/*.log "$WORK"/*/*.log; do
            [ -f "$log" ] || continue
            printf '\n----- %s (last 150 lines) -----\n' "${log#"$WORK"/}" >&2
            tail -n 150 "$log" >&2
        done
        printf '\n[%s] FAILED after %ss (exit %s)\n' "$E2E_NAME" "$((SECONDS - E2E_START))" "$rc" >&2
    fi
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        if [ -n "${E2E_KEEP:-}" ]; then
            echo "[$E2E_NAME] kept $WORK (E2E_KEEP is set)" >&2
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}

# Runs function $1 on exit, after the background processes stopped and before $WORK
# is removed (resources outside them: an image store, a mount).
on_cleanup() {
    E2E_CLEANUPS+=("$1")
}

e2e_init() {
    E2E_NAME=$1
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/shoal-e2e-$E2E_NAME.XXXXXX")
    trap _e2e_cleanup EXIT
    # Signals end the script through the EXIT trap too.
    trap 'exit 130' INT
    trap 'exit 143' TERM
    # The HTTP and WebTorrent trackers lock their io_uring buffers in memory (glommio);
    # raise the locked-memory limit where we may (scripts/test.sh does the same).
    ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null || true
}

start_bg() {
    local name=$1
    shift
    # Created here, not by the background job's redirection, so that it exists as
    # soon as this returns.
    : >"$WORK/$name.log"
    "$@" >>"$WORK/$name.log" 2>&1 &
    BG_PIDS[$name]=$!
}

running() { kill -0 "${BG_PIDS[$1]}" 2>/dev/null; }

stop_bg() {
    local name=$1 pid=${BG_PIDS[$1]} rc=0
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null || rc=$?
        unset "BG_PIDS[$name]"
        fail "$name (pid $pid) had already exited (status $rc)"
    fi
    kill -TERM "$pid"
    local waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 100 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        wait "$pid" 2>/dev/null || true
        unset "BG_PIDS[$name]"
        fail "$name (pid $pid) did not stop within 10 s of SIGTERM"
    fi
    wait "$pid" 2>/dev/null || rc=$?
    unset "BG_PIDS[$name]"
    # Every program here handles SIGTERM and exits 0 when it shut down cleanly.
    [ "$rc" -eq 0 ] || fail "$name (pid $pid) exited with status $rc after SIGTERM"
}

# For a process whose clean exit does not matter to the test.
kill_bg() {
    local name=$1 pid=${BG_PIDS[$1]}
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    unset "BG_PIDS[$name]"
}

wait_for_line() {
    local file=$1 line=$2 timeout=$3
    shift 3
    local deadline=$((SECONDS + timeout)) name
    while ! grep -qxF -- "$line" "$file" 2>/dev/null; do
        for name in "$@"; do
            running "$name" || fail "$name exited while waiting for '$line' in ${file#"$WORK"/}"
        done
        [ "$SECONDS" -lt "$deadline" ] || fail "no '$line' in ${file#"$WORK"/} within ${timeout}s"
        sleep 0.1
    done
}

need_apt() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        fail "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install -y ${missing[*]})"
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # A fresh machine may have empty package lists; update only when the install fails.
    apt-get install -y --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 ||
        { apt-get update >>"$WORK/apt.log" 2>&1 &&
            apt-get install -y --no-install-recommends "${missing[@]}" >>"$WORK/apt.log" 2>&1; } ||
        fail "apt-get install ${missing[*]} failed (see apt.log)"
}

# The tracker binary, built (debug) when it is missing or older than the sources.
# scripts/test.sh has usually built it already through `cargo test`. A run inside a
# network namespace (ws.sh, wss.sh) sets SHOAL_E2E_BUILT: its outer part has built it.
tracker_bin() {
    # Where cargo puts it: CARGO_TARGET_DIR (relative paths are from the repository
    # root, where cargo runs) or target/.
    local target="${CARGO_TARGET_DIR:-target}"
    case $target in /*) ;; *) target="$REPO_ROOT/$target" ;; esac
    local bin="$target/debug/$1"
    if [ -n "${SHOAL_E2E_BUILT:-}" ]; then
        [ -x "$bin" ] || fail "$bin is missing"
    elif [ ! -x "$bin" ] ||
        [ -n "$(find "$REPO_ROOT/crates" "$REPO_ROOT/Cargo.lock" -newer "$bin" -type f \
            \( -name '*.rs' -o -name 'Cargo.toml' -o -name 'Cargo.lock' \) -print -quit)" ]; then
        say "cargo build -p $1 (sources newer than $bin)" >&2
        (cd "$REPO_ROOT" && cargo build --locked -p "$1" >&2) || fail "cargo build -p $1 failed"
    fi
    echo "$bin"
}

# start_tracker KIND CONFIG: starts shoal_KIND as background process "tracker".
start_tracker() {
    local kind=$1 config=$2 bin log="$WORK/tracker.log"
    bin=$(tracker_bin "shoal_$kind")
    "$bin" -c "$config" -P >"$WORK/tracker-config.txt" 2>&1 ||
        { cat "$WORK/tracker-config.txt" >&2; fail "shoal_$kind rejected $config"; }
    start_bg tracker "$bin" -c "$config"
    local deadline=$((SECONDS + 15))
    TRACKER_PORT4="" TRACKER_PORT6=""
    while :; do
        # e.g. "listening on udp://127.0.0.1:56567", "listening on https://[::1]:44015 (...)"
        TRACKER_PORT4=$(sed -n 's|.*listening on [a-z]*://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log" | head -n1)
        TRACKER_PORT6=$(sed -n 's|.*listening on [a-z]*://\[::1\]:\([0-9]*\).*|\1|p' "$log" | head -n1)
        if grep -q 'listening on' "$log" &&
            { ! grep -q '^use_ipv4 = true' "$WORK/tracker-config.txt" || [ -n "$TRACKER_PORT4" ]; } &&
            { ! grep -q '^use_ipv6 = true' "$WORK/tracker-config.txt" || [ -n "$TRACKER_PORT6" ]; }; then
            break
        fi
        running tracker || fail "shoal_$kind exited at start"
        [ "$SECONDS" -lt "$deadline" ] || fail "shoal_$kind logged no 'listening on' line within 15 s"
        sleep 0.1
    done
    say "shoal_$kind listening: IPv4 port ${TRACKER_PORT4:-none}, IPv6 port ${TRACKER_PORT6:-none}"
    # A run asked for an I/O backend (SHOAL__NETWORK__IO_BACKEND) must get it.
    if [ -n "${SHOAL__NETWORK__IO_BACKEND:-}" ] && [ "$kind" != udp ]; then
        grep -q "socket workers run on $SHOAL__NETWORK__IO_BACKEND" "$log" ||
            fail "shoal_$kind does not say it runs on $SHOAL__NETWORK__IO_BACKEND"
        say "shoal_$kind runs on $SHOAL__NETWORK__IO_BACKEND"
    fi
}

# free_port [tcp|udp]: a loopback port nothing listens on now (tcp unless told).
free_port() {
    "$SYS_PYTHON" -c 'import socket, sys
kind = socket.SOCK_DGRAM if sys.argv[1] == "udp" else socket.SOCK_STREAM
s = socket.socket(socket.AF_INET, kind); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' "${1:-tcp}"
}

# start_redis: a real redis-server (Debian's; the caller installs it) on a free
# loopback port, without persistence, as background process "redis"; sets REDIS_PORT
# once it answers.
start_redis() {
    REDIS_PORT=$(free_port)
    mkdir -p "$WORK/redis"
    start_bg redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" \
        --appendonly no --dir "$WORK/redis"
    local deadline=$((SECONDS + 10))
    until [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; do
        running redis || fail "redis-server exited at start"
        [ "$SECONDS" -lt "$deadline" ] || fail "redis-server did not answer within 10 s"
        sleep 0.1
    done
    say "redis-server on 127.0.0.1:$REDIS_PORT"
}

# A file of N MiB of random bytes.
random_file() {
    head -c "$(($2 * 1024 * 1024))" /dev/urandom >"$1"
}

same_sha256() {
    local a b
    a=$(sha256sum <"$1" | cut -d' ' -f1)
    b=$(sha256sum <"$2" | cut -d' ' -f1)
    [ "$a" = "$b" ] || fail "sha256 differs: ${1#"$WORK"/} $a, ${2#"$WORK"/} $b"
    say "sha256 matches: $a"
}
