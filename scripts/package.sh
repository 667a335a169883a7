#!/usr/bin/env bash
# Builds the Debian package: every tracker binary (release profile), the systemd units,
# the default configs under /etc/shoal (conffiles), a system user `shoal` (postinst).
# What goes in is listed once, in crates/shoal/Cargo.toml ([package.metadata.deb]).
#
#   scripts/package.sh                     target/debian/shoal_VERSION-1_ARCH.deb
#   scripts/package.sh --profile dev --no-build --fast -o FILE
#                                          (what scripts/e2e/package.sh checks)
#
# Installs cargo-deb into .tools/ when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
tools="$PWD/.tools/cargo-deb"
if ! "$tools/bin/cargo-deb" --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    echo "==> installing cargo-deb $CARGO_DEB_VERSION into .tools/" >&2
    cargo install --quiet --locked --root "$tools" cargo-deb --version "$CARGO_DEB_VERSION" >&2
fi

build=1
for arg in "$@"; do [ "$arg" = "--no-build" ] && build=""; done
if [ -n "$build" ]; then
    profile=release
    prev=""
    for arg in "$@"; do
        [ "$prev" = "--profile" ] && profile=$arg
        prev=$arg
    done
    echo "==> building the trackers ($profile profile)" >&2
    cargo build --locked --profile "$profile" -p shoal -p shoal_udp -p shoal_http -p shoal_ws >&2
fi
if [ -n "$build" ]; then set -- --no-build "$@"; fi
PATH="$tools/bin:$PATH" exec cargo deb -p shoal "$@"
