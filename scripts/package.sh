#!/usr/bin/env bash
# Builds the Debian package: every tracker binary (release profile, stripped), the
# systemd units, the default configs under /etc/shoal (conffiles), the maintainer
# scripts (system user, stop on removal, restart on upgrade, purge), and beside it a
# -dbgsym package with the debug symbols (Debian's convention; debuggers find them
# by build id once it is installed). What goes in is listed once, in
# crates/shoal/Cargo.toml ([package.metadata.deb]).
#
#   scripts/package.sh                     target/debian/shoal_VERSION-1_ARCH.deb
#                                          (and shoal-dbgsym_VERSION-1_ARCH.ddeb)
#   scripts/package.sh --profile dev --no-build --fast -o FILE
#                                          (what scripts/e2e/package.sh checks)
#
# The man pages come from each binary's --help (help2man, with packaging/man/common.h2m
# for the files, exit statuses and guides).
#
# Uses the cargo-deb on PATH when it is 3.x; otherwise installs cargo-deb
# $CARGO_DEB_VERSION into ${XDG_CACHE_HOME:-~/.cache}/shoal/ (never into the checkout).
# The libc floor in Depends comes from dpkg-shlibdeps (package dpkg-dev): the symbol
# versions the binaries use, not the build host's libc version.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0

cargo_deb_ok() { "$@" --version 2>/dev/null | grep -qE '^cargo-deb(-deb)? v?3\.'; }

if cargo_deb_ok cargo-deb; then
    cargo_deb=(cargo-deb)
else
    tools="${XDG_CACHE_HOME:-$HOME/.cache}/shoal/cargo-deb-$CARGO_DEB_VERSION"
    if ! cargo_deb_ok "$tools/bin/cargo-deb"; then
        echo "==> installing cargo-deb $CARGO_DEB_VERSION into $tools" >&2
        cargo install --quiet --locked --root "$tools" cargo-deb --version "$CARGO_DEB_VERSION" >&2
    fi
    cargo_deb=("$tools/bin/cargo-deb")
fi
if ! command -v help2man >/dev/null; then
    echo "scripts/package.sh: help2man is missing (apt-get install help2man): the man pages" \
        "are made from each binary's --help" >&2
    exit 1
fi
if ! command -v dpkg-shlibdeps >/dev/null; then
    echo "scripts/package.sh: dpkg-shlibdeps is missing (apt-get install dpkg-dev):" \
        "without it the libc floor would be the build host's libc" >&2
    exit 1
fi

build=1
profile=release
prev=""
for arg in "$@"; do
    [ "$arg" = "--no-build" ] && build=""
    [ "$prev" = "--profile" ] && profile=$arg
    prev=$arg
done
if [ -n "$build" ]; then
    echo "==> building the trackers ($profile profile)" >&2
    cargo build --locked --profile "$profile" -p shoal -p shoal_udp -p shoal_http -p shoal_ws >&2
fi
if [ -n "$build" ]; then set -- --no-build "$@"; fi

# The man pages, from the same --help text the binaries print (help2man), and the
# config references, into the profile's directory, where the package's assets
# (target/release/man/, target/release/reference/) are found.
case $profile in
dev | test) profile_dir=debug ;;
*) profile_dir=$profile ;;
esac
target_dir=$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin_dir="$target_dir/$profile_dir"
mkdir -p "$bin_dir/man" "$bin_dir/reference"
# The reference of every key (`-p`), beside the short conffiles.
"$bin_dir/shoal" -p >"$bin_dir/reference/shoal.toml"
for kind in udp http ws; do
    "$bin_dir/shoal_$kind" -p >"$bin_dir/reference/$kind.toml"
done
for bin in shoal shoal_udp shoal_http shoal_ws; do
    case $bin in
    shoal) about="BitTorrent trackers: UDP, HTTP/HTTPS and WebTorrent, alone or in one process" ;;
    shoal_udp) about="the UDP BitTorrent tracker (BEP 15, 41)" ;;
    shoal_http) about="the HTTP and HTTPS BitTorrent tracker (BEP 3, 7, 23, 48)" ;;
    shoal_ws) about="the WebTorrent tracker (ws and wss)" ;;
    esac
    help2man --no-info --section 1 --name "$about" --include packaging/man/common.h2m \
        "$bin_dir/$bin" >"$bin_dir/man/$bin.1.partial"
    gzip -9n <"$bin_dir/man/$bin.1.partial" >"$bin_dir/man/$bin.1.gz"
    rm "$bin_dir/man/$bin.1.partial"
done
# `cargo-deb` run directly takes the same arguments as `cargo deb`.
exec "${cargo_deb[@]}" -p shoal --dbgsym --compress-debug-symbols=zlib "$@"
