#!/usr/bin/env bash
# End-to-end: the Debian package (scripts/package.sh, cargo-deb) holds what an operator
# needs and nothing is missing: the four binaries, which run; the four systemd units,
# identical to packaging/systemd/; the default configs as conffiles, which the binaries
# accept; the system user created by postinst; adduser among the dependencies.
#
# Built from the test profile's binaries (scripts/test.sh has built them) so CI does
# not pay for a second, release build; the release package is the same list of files.
# Needs: dpkg-deb (Debian), cargo-deb (installed into .tools/ by scripts/package.sh).
source "$(dirname "$0")/lib/common.bash"
e2e_init package

for bin in shoal shoal_udp shoal_http shoal_ws; do tracker_bin "$bin" >/dev/null; done
deb="$WORK/shoal.deb"
"$REPO_ROOT/scripts/package.sh" --profile dev --no-build --fast -o "$deb" >"$WORK/cargo-deb.log" 2>&1 ||
    fail "scripts/package.sh failed: $(tail -n 20 "$WORK/cargo-deb.log")"
say "built $(du -h "$deb" | cut -f1) package"

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' | sort >"$WORK/contents.txt"
for path in /usr/bin/shoal /usr/bin/shoal_udp /usr/bin/shoal_http /usr/bin/shoal_ws \
    /lib/systemd/system/shoal.service /lib/systemd/system/shoal-udp.service \
    /lib/systemd/system/shoal-http.service /lib/systemd/system/shoal-ws.service \
    /etc/shoal/shoal.toml /etc/shoal/udp.toml /etc/shoal/http.toml /etc/shoal/ws.toml \
    /usr/share/shoal/grafana/shoal.json /usr/share/shoal/prometheus/shoal-alerts.yml \
    /usr/share/doc/shoal/deployment.md \
    /usr/share/doc/shoal/metrics.md /usr/share/doc/shoal/copyright; do
    grep -qxF "$path" "$WORK/contents.txt" || fail "the package lacks $path"
done
say "contents: every binary, unit, config and document present"

root="$WORK/root"
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$WORK/control"
for unit in "$REPO_ROOT"/packaging/systemd/*.service; do
    cmp -s "$unit" "$root/lib/systemd/system/$(basename "$unit")" ||
        fail "the packaged $(basename "$unit") differs from packaging/systemd/"
done
for conf in shoal.toml udp.toml http.toml ws.toml; do
    grep -qxF "/etc/shoal/$conf" "$WORK/control/conffiles" || fail "/etc/shoal/$conf is not a conffile"
done
"$root/usr/bin/shoal" --version | grep -q "^shoal " || fail "the packaged shoal does not run"
"$root/usr/bin/shoal" -c "$root/etc/shoal/shoal.toml" -P >/dev/null ||
    fail "the packaged shoal rejects the packaged /etc/shoal/shoal.toml"
for kind in udp http ws; do
    "$root/usr/bin/shoal_$kind" -c "$root/etc/shoal/$kind.toml" -P >/dev/null ||
        fail "the packaged shoal_$kind rejects the packaged /etc/shoal/$kind.toml"
done
grep -q '^Depends:.*adduser' "$WORK/control/control" || fail "adduser is not a dependency"
sh -n "$WORK/control/postinst" || fail "postinst is not valid sh"
grep -q 'adduser --system --group' "$WORK/control/postinst" || fail "postinst creates no system user"
grep -q 'chmod 0640 "$config"' "$WORK/control/postinst" ||
    fail "postinst leaves the configs (and any cluster password in them) world-readable"
grep -q '^User=shoal$' "$root/lib/systemd/system/shoal.service" || fail "the unit does not run as shoal"
grep -q 'install -d -o shoal -g shoal -m 0750 /var/lib/shoal' "$WORK/control/postinst" ||
    fail "postinst does not create the state directory a config with [state] needs"
say "control: conffiles, Depends, postinst (system user, state directory), units run as shoal"
say "passed in $((SECONDS - E2E_START))s"
