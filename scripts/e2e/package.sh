#!/usr/bin/env bash
# End-to-end: the Debian package (scripts/package.sh, cargo-deb) holds what an operator
# needs and nothing is missing: the four binaries, which run; the four systemd units,
# identical to packaging/systemd/; the default configs as conffiles, which the binaries
# accept; the system user created by postinst; adduser among the dependencies; stripped
# binaries with their debug symbols in the -dbgsym package beside; a DEP-5 copyright
# with its licence paragraph; maintainer scripts that are valid sh. scripts/e2e/
# systemd.sh installs the same package under a real systemd.
#
# Built from the test profile's binaries (scripts/test.sh has built them) so CI does
# not pay for a second, release build; the release package is the same list of files.
# Needs: dpkg-deb and dpkg-shlibdeps (dpkg-dev), cargo-deb (scripts/package.sh installs it).
source "$(dirname "$0")/lib/common.bash"
e2e_init package
need_apt dpkg-dev binutils help2man man-db

for bin in shoal shoal_udp shoal_http shoal_ws; do tracker_bin "$bin" >/dev/null; done
deb="$WORK/shoal.deb"
"$REPO_ROOT/scripts/package.sh" --profile dev --no-build --fast -o "$deb" >"$WORK/cargo-deb.log" 2>&1 ||
    fail "scripts/package.sh failed: $(tail -n 20 "$WORK/cargo-deb.log")"
say "built $(du -h "$deb" | cut -f1) package"

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' | sort >"$WORK/contents.txt"
for path in /usr/bin/shoal /usr/bin/shoal_udp /usr/bin/shoal_http /usr/bin/shoal_ws \
    /usr/lib/systemd/system/shoal.service /usr/lib/systemd/system/shoal-udp.service \
    /usr/lib/systemd/system/shoal-http.service /usr/lib/systemd/system/shoal-ws.service \
    /etc/shoal/shoal.toml /etc/shoal/udp.toml /etc/shoal/http.toml /etc/shoal/ws.toml \
    /usr/share/shoal/grafana/shoal.json /usr/share/shoal/prometheus/shoal-alerts.yml \
    /usr/share/doc/shoal/deployment.md /usr/lib/sysctl.d/60-shoal.conf \
    /usr/share/doc/shoal/private.md /usr/share/doc/shoal/admin-api.md \
    /usr/share/man/man1/shoal.1.gz /usr/share/man/man1/shoal_udp.1.gz \
    /usr/share/man/man1/shoal_http.1.gz /usr/share/man/man1/shoal_ws.1.gz \
    /usr/share/doc/shoal/reference/shoal.toml /usr/share/doc/shoal/reference/udp.toml \
    /usr/share/doc/shoal/reference/http.toml /usr/share/doc/shoal/reference/ws.toml \
    /usr/share/doc/shoal/metrics.md /usr/share/doc/shoal/copyright; do
    grep -qxF "$path" "$WORK/contents.txt" || fail "the package lacks $path"
done
say "contents: every binary, unit, config, document and man page present"

root="$WORK/root"
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$WORK/control"
for unit in "$REPO_ROOT"/packaging/systemd/*.service; do
    cmp -s "$unit" "$root/usr/lib/systemd/system/$(basename "$unit")" ||
        fail "the packaged $(basename "$unit") differs from packaging/systemd/"
done
for conf in shoal.toml udp.toml http.toml ws.toml; do
    grep -qxF "/etc/shoal/$conf" "$WORK/control/conffiles" || fail "/etc/shoal/$conf is not a conffile"
done
"$root/usr/bin/shoal" --version | grep -q "^shoal " || fail "the packaged shoal does not run"
# The references are what the packaged binaries print.
cmp -s <("$root/usr/bin/shoal" -p) "$root/usr/share/doc/shoal/reference/shoal.toml" ||
    fail "reference/shoal.toml is not the packaged shoal's -p"
for kind in udp http ws; do
    cmp -s <("$root/usr/bin/shoal_$kind" -p) "$root/usr/share/doc/shoal/reference/$kind.toml" ||
        fail "reference/$kind.toml is not the packaged shoal_$kind's -p"
done
# The synopsis is whole (Debian's limit is 80 characters; cargo-deb cut a longer one).
synopsis=$(dpkg-deb -f "$deb" Description | head -n1)
[ "${#synopsis}" -le 80 ] && [[ $synopsis != *"…"* ]] && [[ $synopsis != *"..." ]] ||
    fail "the synopsis is cut or too long: $synopsis"
# The man pages render, and say what the binaries' --help says.
for bin in shoal shoal_udp shoal_http shoal_ws; do
    page=$(MANWIDTH=200 man -l "$root/usr/share/man/man1/$bin.1.gz" 2>"$WORK/man-$bin.log") ||
        fail "man -l $bin.1.gz failed: $(cat "$WORK/man-$bin.log")"
    case $page in
    *"--print-default-config"*"SIGUSR1"*"EXIT STATUS"*"78"*) ;;
    *) fail "the $bin man page lacks the options, the signals or the exit statuses: $page" ;;
    esac
done
say "synopsis: $synopsis; man pages render with the options, signals and exit statuses"
"$root/usr/bin/shoal" -c "$root/etc/shoal/shoal.toml" -P >/dev/null ||
    fail "the packaged shoal rejects the packaged /etc/shoal/shoal.toml"
for kind in udp http ws; do
    "$root/usr/bin/shoal_$kind" -c "$root/etc/shoal/$kind.toml" -P >/dev/null ||
        fail "the packaged shoal_$kind rejects the packaged /etc/shoal/$kind.toml"
done
grep -q '^Depends:.*adduser' "$WORK/control/control" || fail "adduser is not a dependency"
# The libc floor is what the binaries' symbol versions need (dpkg-shlibdeps), at most
# the build host's libc.
floor=$(sed -n 's/^Depends:.*libc6 (>= \([0-9.]*\)).*/\1/p' "$WORK/control/control")
host_libc=$(dpkg-query -W -f='${Version}' libc6 | cut -d- -f1)
[ -n "$floor" ] || fail "no libc6 floor in Depends: $(grep '^Depends' "$WORK/control/control")"
dpkg --compare-versions "$floor" le "$host_libc" || fail "libc6 floor $floor above the host's $host_libc"
for script in postinst prerm postrm; do
    [ -x "$WORK/control/$script" ] || fail "the package has no $script"
    sh -n "$WORK/control/$script" || fail "$script is not valid sh"
done
grep -q '^User=shoal$' "$root/usr/lib/systemd/system/shoal.service" || fail "the unit does not run as shoal"
! grep -q '^Exec.*/bin/kill' "$root"/usr/lib/systemd/system/*.service ||
    fail "a unit needs /bin/kill (procps), which the package does not depend on"
say "control: conffiles, Depends (libc6 >= $floor, host $host_libc), maintainer scripts, units run as shoal"

for bin in shoal shoal_udp shoal_http shoal_ws; do
    ! readelf -S "$root/usr/bin/$bin" | grep -qE '\.debug_(info|line)' || fail "/usr/bin/$bin is not stripped"
done
[ -s "$WORK/shoal.ddeb" ] || fail "no -dbgsym package beside the package"
dpkg-deb -c "$WORK/shoal.ddeb" >"$WORK/dbgsym-contents.txt"
grep -q '/usr/lib/debug/.build-id/.*\.debug$' "$WORK/dbgsym-contents.txt" ||
    fail "the -dbgsym package holds no build-id debug files"
grep -q '^License: Apache-2.0$' "$root/usr/share/doc/shoal/copyright" &&
    grep -q '/usr/share/common-licenses/Apache-2.0' "$root/usr/share/doc/shoal/copyright" ||
    fail "the copyright file has no licence paragraph"
say "binaries stripped ($(du -sh "$root/usr/bin" | cut -f1) installed), symbols in the $(du -h "$WORK/shoal.ddeb" | cut -f1) -dbgsym package; copyright names the licence"
say "passed in $((SECONDS - E2E_START))s"
