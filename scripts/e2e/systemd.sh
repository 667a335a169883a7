#!/usr/bin/env bash
# End-to-end: the Debian package under a real systemd. A minimal Debian bookworm
# (debootstrap minbase + systemd, cached) boots in a container with systemd as PID 1
# (systemd-nspawn --boot, its own network namespace); the package built by
# scripts/package.sh is installed with dpkg and driven with systemctl as an operator
# would: start, announces over UDP and HTTP into the container's network, reload (the
# access list changes, the status line says so, a broken list is an error in the
# journal at error priority), a watchdog restart of a stopped tracker, stop (the
# snapshot is written, and read at the next start), an upgrade (the running service
# restarts, the operator's files keep their modes), removal (the service stops) and
# purge (enable links, stat overrides and /var/lib/shoal go).
#
# Commands go into the container with `nsenter -t <its PID 1> -a` (the host has no
# systemd); the announces run here, in the container's network namespace only.
# Needs: root, debootstrap, systemd-container, dpkg-dev and help2man (the package script
# makes the man pages with it), installed when missing.
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/rootfs.bash"
e2e_init systemd

[ "$(id -u)" -eq 0 ] || skip_loudly root "booting a container needs root"
need_apt systemd-container dpkg-dev help2man
for bin in shoal shoal_udp shoal_http shoal_ws; do tracker_bin "$bin" >/dev/null; done

root="$WORK/root"
debian_rootfs "$root"
"$REPO_ROOT/scripts/package.sh" --profile dev --no-build --fast -o "$root/root/shoal.deb" \
    >"$WORK/cargo-deb.log" 2>&1 || fail "scripts/package.sh failed: $(tail -n 20 "$WORK/cargo-deb.log")"
say "package built: $(du -h "$root/root/shoal.deb" | cut -f1)"

start_bg container systemd-nspawn --quiet -D "$root" --boot --register=no --keep-unit \
    --private-network -M shoal-e2e
# Its PID 1: a child of systemd-nspawn that is PID 1 in its own PID namespace (the
# last NSpid field); nspawn has short-lived children of its own while it sets up.
container_init() {
    local status
    for status in $(grep -lx "PPid:[[:space:]]*${BG_PIDS[container]}" /proc/[0-9]*/status 2>/dev/null); do
        if grep -qE '^NSpid:.*[[:space:]]1$' "$status" 2>/dev/null &&
            [ "$(cat "${status%/status}/comm" 2>/dev/null)" = systemd ]; then
            echo "${status%/status}" | cut -d/ -f3
            return
        fi
    done
}
pid1=""
for _ in $(seq 100); do
    pid1=$(container_init)
    [ -n "$pid1" ] && break
    running container || fail "systemd-nspawn exited at start"
    sleep 0.1
done
[ -n "$pid1" ] || fail "the container's PID 1 did not appear"

# A command in the container (its files, processes and network), with a clean
# environment; and one of ours in its network only.
inside() { nsenter -t "$pid1" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
in_net() { nsenter -t "$pid1" -n "$@"; }
announce() { in_net /usr/bin/python3 "$E2E_DIR/lib/announce.py" "$@"; }
show() { inside systemctl show -p "$1" --value shoal.service; }
journal() { inside journalctl --no-pager -o cat -u shoal.service "$@"; }

# Asked too early, before systemd listens on its bus, systemctl fails at once
# ("Failed to connect to bus") instead of waiting: ask again until it answers.
state=""
for _ in $(seq 120); do
    state=$(inside timeout 60 systemctl is-system-running --wait 2>/dev/null) || true
    [ -n "$state" ] && break
    sleep 0.5
done
case $state in
running | degraded) say "container booted: systemd $(inside systemctl --version | head -n1 | cut -d' ' -f2), system $state" ;;
*) fail "the container's systemd did not finish booting: '$state'" ;;
esac

# --- install ------------------------------------------------------------------------
inside dpkg -i /root/shoal.deb >"$WORK/dpkg-install.log" 2>&1 || fail "dpkg -i failed (see dpkg-install.log)"
! grep -qi 'warning' "$WORK/dpkg-install.log" || fail "dpkg -i warned: $(grep -i warning "$WORK/dpkg-install.log")"
[ -f "$root/usr/lib/systemd/system/shoal.service" ] || fail "no unit in /usr/lib/systemd/system"
[ "$(inside stat -c '%U:%G %a' /etc/shoal/shoal.toml)" = "root:shoal 640" ] ||
    fail "/etc/shoal/shoal.toml is $(inside stat -c '%U:%G %a' /etc/shoal/shoal.toml), not root:shoal 640"
[ "$(inside getent passwd shoal | cut -d: -f6)" = /var/lib/shoal ] || fail "the shoal user's home is not /var/lib/shoal"
say "installed with dpkg -i, no warning; configs root:shoal 640"

# Private mode's files, checked by `-P` run as root for the user the units run as.
cat >"$root/etc/shoal/private-check.toml" <<'TOML'
[udp]
enabled = false
[ws]
enabled = false
[http.private]
enabled = true
users_path = "/etc/shoal/users.txt"
torrents_path = "/etc/shoal/torrents.txt"
export_directory = "/var/lib/shoal/export"
export_url = "http://127.0.0.1:9/credit"
TOML
echo "1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" >"$root/etc/shoal/users.txt"
: >"$root/etc/shoal/torrents.txt"
inside chmod 0600 /etc/shoal/users.txt
inside chmod 0640 /etc/shoal/torrents.txt
inside chgrp shoal /etc/shoal/torrents.txt
if inside /usr/bin/shoal -c /etc/shoal/private-check.toml -P >/dev/null 2>"$WORK/private-check.log"; then
    fail "-P as root passed a users file the shoal user cannot read"
fi
grep -q 'users_path: user shoal (the packaged units. User=) cannot read /etc/shoal/users.txt' "$WORK/private-check.log" ||
    fail "-P did not name the users file and the user: $(cat "$WORK/private-check.log")"
! grep -q 'export_directory' "$WORK/private-check.log" ||
    fail "the package's export directory is not the shoal user's: $(cat "$WORK/private-check.log")"
inside chgrp shoal /etc/shoal/users.txt
inside chmod 0640 /etc/shoal/users.txt
inside /usr/bin/shoal -c /etc/shoal/private-check.toml -P >/dev/null 2>"$WORK/private-check.log" ||
    fail "-P refused files the shoal group can read: $(cat "$WORK/private-check.log")"
rm "$root/etc/shoal/private-check.toml" "$root/etc/shoal/users.txt" "$root/etc/shoal/torrents.txt"
say "-P as root checks private mode's files for the shoal user: a 0600 root file named, root:shoal 0640 passes; /var/lib/shoal/export is the user's"

# The operator's edits, as drop-ins and files: UDP serves an allow list and keeps its
# swarms across restarts; a short watchdog so that a stuck tracker is seen quickly.
allowed=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
later=bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
echo "$allowed" >"$root/etc/shoal/allowed.txt"
mkdir -p "$root/etc/systemd/system/shoal.service.d"
cat >"$root/etc/systemd/system/shoal.service.d/e2e.conf" <<'CONF'
[Service]
Environment=SHOAL__UDP__ACCESS_LIST__MODE=allow
Environment=SHOAL__UDP__ACCESS_LIST__PATH=/etc/shoal/allowed.txt
Environment=SHOAL__UDP__STATE__DIRECTORY=/var/lib/shoal
WatchdogSec=4s
TimeoutAbortSec=3s
CONF
inside systemctl daemon-reload
inside systemctl enable --now shoal.service >"$WORK/enable.log" 2>&1 ||
    { journal >"$WORK/journal.log"; fail "systemctl enable --now shoal failed (see journal.log)"; }
[ "$(inside systemctl is-active shoal.service)" = active ] || fail "shoal is not active after start"
say "systemctl enable --now shoal: active; status: $(show StatusText)"
# The package's default: epoll (io_uring only where a config asks for it).
journal | grep -q 'http: socket workers run on epoll' ||
    fail "the packaged config does not run the HTTP tracker on epoll, its default: $(journal | grep 'http: ' | head -n 3)"
say "http: socket workers run on epoll, the default"
# The package's defaults start without a warning on this host, whose receive-buffer
# ceiling the container cannot raise (the tracker says so at info level).
warnings=$(journal -p warning)
[ -z "$warnings" ] || fail "the package's default config warns at start: $warnings"
say "no warning at start; $(journal | grep -o 'UDP: the socket receive buffer is [0-9]* bytes' | head -n1 || echo 'the receive buffer as configured')"

# --- announces into the container's network -----------------------------------------------
announce udp://127.0.0.1:6969/announce "$allowed" --seeder --expect-peers 0 >/dev/null ||
    fail "UDP announce of an allowed torrent failed"
out=$(announce udp://127.0.0.1:6969/announce "$allowed" --port 6882 --expect-peers 1) ||
    fail "a second UDP peer did not get the first: $out"
out=$(announce udp://127.0.0.1:6969/announce "$later" --expect-failure "not allowed") ||
    fail "a torrent off the allow list was served: $out"
announce http://127.0.0.1:6969/announce "$later" --seeder --expect-peers 0 >/dev/null ||
    fail "HTTP announce failed"
out=$(announce http://127.0.0.1:6969/announce "$later" --port 6882 --expect-peers 1) ||
    fail "a second HTTP peer did not get the first: $out"
say "announces over UDP and HTTP answered; the UDP allow list refuses what it lacks"

# --- reload -----------------------------------------------------------------------------
echo "$later" >>"$root/etc/shoal/allowed.txt"
inside systemctl reload shoal.service || fail "systemctl reload failed: $(journal -n 20)"
out=$(announce udp://127.0.0.1:6969/announce "$later" --expect-peers 0) ||
    fail "the reloaded allow list was not used: $out"
show StatusText | grep -q 'reloaded .* UTC: udp access list: 2 info hashes' ||
    fail "the status line does not tell of the reload: $(show StatusText)"
echo "not a hash" >>"$root/etc/shoal/allowed.txt"
inside systemctl reload shoal.service || fail "systemctl reload (broken list) failed"
show StatusText | grep -q 'udp access list kept (2 info hashes): reload failed' ||
    fail "the status line does not tell of the failed reload: $(show StatusText)"
journal -p err | grep -q 'access list not reloaded' ||
    fail "the failed reload is not in the journal at error priority: $(journal -p err)"
! journal -p warning | grep -q 'listening on' || fail "info lines reach the journal as warnings"
journal -p info | grep -q 'listening on' || fail "no 'listening on' at info priority"
sed -i '$d' "$root/etc/shoal/allowed.txt"
say "reload: the allow list grew, then a broken one was refused; status and journal priorities say so"

# --- watchdog -----------------------------------------------------------------------------
old_pid=$(show MainPID)
inside sh -c "kill -STOP $old_pid"
deadline=$((SECONDS + 40))
until [ "$(show NRestarts)" -ge 1 ] && [ "$(inside systemctl is-active shoal.service)" = active ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no watchdog restart within 40 s: $(journal -n 20)"
    sleep 0.5
done
journal | grep -q 'Watchdog timeout' || inside journalctl --no-pager -o cat | grep -q 'shoal.service: Watchdog timeout' ||
    fail "the restart was not the watchdog's"
say "watchdog: the stopped tracker (pid $old_pid) was killed and restarted as pid $(show MainPID)"

# --- stop, snapshot, start ------------------------------------------------------------------
announce udp://127.0.0.1:6969/announce "$allowed" --seeder --expect-peers 0 >/dev/null ||
    fail "UDP announce after the restart failed"
inside systemctl stop shoal.service
[ "$(show Result)" = success ] || fail "stop did not end in success: $(show Result)"
[ -s "$root/var/lib/shoal/udp.snapshot" ] || fail "no snapshot in /var/lib/shoal after stop: $(journal -n 20)"
journal | grep -q 'state: wrote /var/lib/shoal/udp.snapshot' || fail "the journal does not tell of the snapshot"
inside systemctl start shoal.service
journal | grep -q 'state: read /var/lib/shoal/udp.snapshot' || fail "the snapshot was not read at start"
out=$(announce udp://127.0.0.1:6969/announce "$allowed" --port 6883 --expect-peers 1) ||
    fail "the swarm was not restored from the snapshot: $out"
say "stop wrote the snapshot; the next start restored the swarm"

# --- a config error: a failed start, not a restart loop -----------------------------------
restarts=$(show NRestarts)
cat >"$root/etc/systemd/system/shoal.service.d/broken.conf" <<'CONF'
[Service]
Environment=SHOAL__UDP__NETWORK__ADDRESS_IPV4=nonsense
CONF
inside systemctl daemon-reload
if inside systemctl restart shoal.service 2>/dev/null; then
    fail "shoal started with a broken address"
fi
sleep 5  # two of RestartSec=2s: a restart would have come
[ "$(show ExecMainStatus)" = 78 ] || fail "a config error exited $(show ExecMainStatus), not 78"
[ "$(show NRestarts)" = "$restarts" ] || fail "the unit restarted on a config error: $(journal -n 20)"
[ "$(inside systemctl is-active shoal.service)" = failed ] ||
    fail "the unit is $(inside systemctl is-active shoal.service) after a config error, not failed"
journal -p err | grep -q 'address_ipv4' || fail "the journal does not name the broken key: $(journal -n 10)"
rm "$root/etc/systemd/system/shoal.service.d/broken.conf"
inside systemctl daemon-reload
inside systemctl reset-failed shoal.service
inside systemctl start shoal.service || fail "shoal did not start once the config was fixed"
say "a config error: exit 78, failed, not restarted (RestartPreventExitStatus=78), the key in the journal"

# --- upgrade ------------------------------------------------------------------------------
echo '# the operator'"'"'s own file' >"$root/etc/shoal/mine.toml"
chmod 0600 "$root/etc/shoal/mine.toml"
before=$(show MainPID)
inside dpkg -i /root/shoal.deb >"$WORK/dpkg-upgrade.log" 2>&1 || fail "dpkg -i (upgrade) failed (see dpkg-upgrade.log)"
[ "$(inside systemctl is-active shoal.service)" = active ] || fail "shoal is not active after the upgrade"
[ "$(show MainPID)" != "$before" ] || fail "the upgrade did not restart the running service"
[ "$(inside stat -c '%a' /etc/shoal/mine.toml)" = 600 ] || fail "the upgrade changed the operator's mine.toml mode"
[ "$(inside stat -c '%U:%G %a' /etc/shoal/shoal.toml)" = "root:shoal 640" ] || fail "the upgrade changed shoal.toml's mode"
say "upgrade: the service restarted (pid $before -> $(show MainPID)); modes kept"

# --- an upgrade keeps an edited conffile without asking ---------------------------------
# The next version as dpkg sees it: the same package, its version raised, and one
# file changed: the reference (what most releases change), then, as the control that
# shows dpkg would ask, the conffile itself.
version=$(dpkg-deb -f "$root/root/shoal.deb" Version)
repack() {
    local next=$1 changed=$2 dir="$WORK/repack-$1"
    dpkg-deb -R "$root/root/shoal.deb" "$dir"
    sed -i "s/^Version: .*/Version: $next/" "$dir/DEBIAN/control"
    echo "# changed in $next" >>"$dir/$changed"
    dpkg-deb -b "$dir" "$root/root/shoal-$next.deb" >/dev/null || fail "cannot repack $next"
    rm -rf "$dir"
}
repack "$version.1" usr/share/doc/shoal/reference/shoal.toml
repack "$version.2" etc/shoal/shoal.toml
echo '# the operator was here' >>"$root/etc/shoal/shoal.toml"
inside dpkg -i "/root/shoal-$version.1.deb" </dev/null >"$WORK/dpkg-reference.log" 2>&1 ||
    fail "an upgrade that changed only the reference failed (see dpkg-reference.log)"
! grep -q "Configuration file '/etc/shoal/shoal.toml'" "$WORK/dpkg-reference.log" ||
    fail "dpkg asked about the edited conffile though only the reference changed"
grep -q 'the operator was here' "$root/etc/shoal/shoal.toml" || fail "the upgrade lost the operator's edit"
grep -q "changed in $version.1" "$root/usr/share/doc/shoal/reference/shoal.toml" ||
    fail "the upgrade did not install the new reference"
# The control: a changed conffile makes dpkg ask (here without a terminal, so it stops).
if inside dpkg -i "/root/shoal-$version.2.deb" </dev/null >"$WORK/dpkg-conffile.log" 2>&1; then
    grep -q "Configuration file '/etc/shoal/shoal.toml'" "$WORK/dpkg-conffile.log" ||
        fail "the control did not reach dpkg's conffile question: $(cat "$WORK/dpkg-conffile.log")"
else
    grep -q "Configuration file '/etc/shoal/shoal.toml'" "$WORK/dpkg-conffile.log" ||
        fail "the control failed otherwise: $(cat "$WORK/dpkg-conffile.log")"
    inside dpkg --configure -a --force-confold </dev/null >"$WORK/dpkg-confold.log" 2>&1 ||
        fail "dpkg --configure -a --force-confold failed (see dpkg-confold.log)"
fi
[ "$(inside systemctl is-active shoal.service)" = active ] || fail "shoal is not active after the upgrades"
say "upgrade with an edited conffile: no question when only the reference changed ($version.1); the control, a changed conffile ($version.2), asks"

# --- remove, purge ----------------------------------------------------------------------------
inside dpkg -r shoal >"$WORK/dpkg-remove.log" 2>&1 || fail "dpkg -r failed (see dpkg-remove.log)"
[ "$(inside systemctl is-active shoal.service)" != active ] || fail "the service runs on after removal"
[ ! -e "$root/usr/bin/shoal" ] || fail "/usr/bin/shoal survived removal"
[ -L "$root/etc/systemd/system/multi-user.target.wants/shoal.service" ] ||
    fail "removal (not purge) dropped the enable link"
inside dpkg --purge shoal >"$WORK/dpkg-purge.log" 2>&1 || fail "dpkg --purge failed (see dpkg-purge.log)"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/shoal.service" ] &&
    [ ! -L "$root/etc/systemd/system/multi-user.target.wants/shoal.service" ] || fail "the enable link survived purge"
[ ! -e "$root/var/lib/shoal" ] || fail "/var/lib/shoal survived purge"
[ ! -e "$root/etc/shoal/shoal.toml" ] || fail "/etc/shoal/shoal.toml survived purge"
[ -z "$(inside dpkg-statoverride --list '/etc/shoal/*')" ] || fail "stat overrides survived purge"
say "remove stopped the service; purge took links, overrides and /var/lib/shoal"
say "passed in $((SECONDS - E2E_START))s"
