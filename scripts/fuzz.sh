#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time, coverage-guided (libFuzzer), on the
# stable toolchain: `--sanitizer none` needs no nightly flags. Rust's own checks
# (bounds, overflow with debug assertions, our asserts) are what finds bugs; a crash
# fails the run and leaves its input under fuzz/artifacts/TARGET/, which then becomes
# a regression test next to the code it broke.
#
#   scripts/fuzz.sh                      every target, FUZZ_SECONDS (20) each
#   FUZZ_SECONDS=600 scripts/fuzz.sh udp_dispatch
#
# Each target starts from its committed seeds (fuzz/seeds/TARGET) plus what earlier
# local runs found (fuzz/corpus/TARGET, not committed).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-20}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz >&2
fi

cd fuzz
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
echo "==> building ${#targets[@]} fuzz targets" >&2
cargo fuzz build --sanitizer none --release >&2

for target in "${targets[@]}"; do
    corpus="corpus/$target"
    mkdir -p "$corpus"
    echo "==> fuzzing $target for ${seconds} s" >&2
    if ! cargo fuzz run --sanitizer none --release "$target" "$corpus" "seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"/tmp/shoal-fuzz-$target.log" 2>&1; then
        tail -n 40 "/tmp/shoal-fuzz-$target.log" >&2
        echo "fuzz target $target failed; the input is under fuzz/artifacts/$target/" >&2
        exit 1
    fi
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "/tmp/shoal-fuzz-$target.log" \
        | sed "s/^/    $target: /" >&2 || true
done
echo "==> every fuzz target ran ${seconds} s without a failure" >&2
