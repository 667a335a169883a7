# A minimal Debian bookworm root file system for the tests that boot or build in a
# container (scripts/e2e/systemd.sh, scripts/e2e/container.sh); sourced after
# common.bash.
#
#   debian_rootfs DIR    DIR becomes a bookworm minbase with systemd, dbus, adduser and
#                        binutils (the container test's stand-in toolchain image strips
#                        the binary as the Dockerfile's build stage does)
#                        (debootstrap, about a minute the first time; later runs unpack
#                        a tarball cached under ${XDG_CACHE_HOME:-~/.cache}/shoal/e2e/)
#
# The mirror is debootstrap's default (deb.debian.org) unless SHOAL_DEBIAN_MIRROR says
# otherwise.

# Bump when the package list changes, so that an old cached tarball is not used.
ROOTFS_VERSION=2
ROOTFS_PACKAGES=systemd,systemd-sysv,dbus,adduser,binutils

debian_rootfs() {
    local dir=$1
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/shoal/e2e"
    local tarball="$cache/bookworm-minbase-v$ROOTFS_VERSION.tar"
    need_apt debootstrap
    if [ ! -s "$tarball" ]; then
        say "debootstrap bookworm (minbase, $ROOTFS_PACKAGES) into a cache tarball"
        mkdir -p "$cache"
        local build="$WORK/debootstrap"
        debootstrap --variant=minbase --include="$ROOTFS_PACKAGES" bookworm "$build" \
            ${SHOAL_DEBIAN_MIRROR:+"$SHOAL_DEBIAN_MIRROR"} >"$WORK/debootstrap.log" 2>&1 ||
            fail "debootstrap failed (see debootstrap.log)"
        # Written under another name first: an interrupted run leaves no half tarball.
        tar -C "$build" -cf "$tarball.partial" . && mv "$tarball.partial" "$tarball"
        rm -rf "$build"
    fi
    mkdir -p "$dir"
    tar -C "$dir" -xf "$tarball" || fail "cannot unpack $tarball"
}
