#!/usr/bin/env bash
# End-to-end: swarms survive a tracker restart ([state], issue 13). Two real
# BitTorrent clients (libtorrent, Debian's python3-libtorrent) and shoal_udp with a
# state directory, on a fixed loopback port (the .torrent names it):
#
#   1. a seeder announces; a first leecher downloads the file and leaves;
#                                                          scrape: 1, 0, 1
#   2. the tracker is stopped with SIGTERM (it writes its snapshot) and started again;
#      it logs what it restored                           scrape: 1, 0, 1
#      (the seeder has not announced again: its interval is the default 30 minutes)
#   3. a second leecher announces to the new process, is sent the seeder it only
#      knows from the snapshot, downloads the file;       scrape: 2, 0, 2
#
# Needs: python3-libtorrent (installed here when missing and running as root).
source "$(dirname "$0")/lib/common.bash"
source "$E2E_DIR/lib/libtorrent.bash"
e2e_init restart

libtorrent_deps

mkdir -p "$WORK/state" "$WORK/seed" "$WORK/leech1" "$WORK/leech2"
port=$("$SYS_PYTHON" -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$WORK/udp.toml" <<TOML
[logging]
level = "debug"
[network]
address_ipv4 = "127.0.0.1:$port"
use_ipv6 = false
[statistics]
interval = 0
[cleaning]
interval = 3600
[state]
directory = "$WORK/state"
TOML
start_tracker udp "$WORK/udp.toml"
url="udp://127.0.0.1:$port/announce"

random_file "$WORK/seed/data.bin" 4
info_hash=$("${LT_CLIENT[@]}" make-torrent "$WORK/seed/data.bin" "$url" "$WORK/test.torrent") ||
    fail "could not make the torrent"
say "torrent $info_hash on $url"

start_bg seeder "${LT_CLIENT[@]}" seed "$WORK/test.torrent" "$WORK/seed" \
    --ip 127.0.0.1 --status "$WORK/seeder.status"
wait_for_line "$WORK/seeder.status" seeding 20 seeder tracker
wait_for_line "$WORK/seeder.status" announced 20 seeder tracker
start_bg leecher1 "${LT_CLIENT[@]}" leech "$WORK/test.torrent" "$WORK/leech1" \
    --ip 127.0.0.1 --status "$WORK/leecher1.status"
wait_for_line "$WORK/leecher1.status" finished 40 leecher1 seeder tracker
same_sha256 "$WORK/seed/data.bin" "$WORK/leech1/data.bin"
stop_bg leecher1
scrape_expect "$url" "$info_hash" 1,0,1 "before the restart"

say "restarting the tracker"
stop_bg tracker
[ -s "$WORK/state/udp.snapshot" ] || fail "no snapshot in $WORK/state after SIGTERM"
mv "$WORK/tracker.log" "$WORK/tracker-before-restart.log"
start_tracker udp "$WORK/udp.toml"
deadline=$((SECONDS + 10))
until grep -q "state: restored" "$WORK/tracker.log"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the restarted tracker logged no 'state: restored' line"
    sleep 0.1
done
say "$(grep -o 'state: restored.*' "$WORK/tracker.log")"
scrape_expect "$url" "$info_hash" 1,0,1 "right after the restart"

start_bg leecher2 "${LT_CLIENT[@]}" leech "$WORK/test.torrent" "$WORK/leech2" \
    --ip 127.0.0.1 --status "$WORK/leecher2.status"
wait_for_line "$WORK/leecher2.status" finished 40 leecher2 seeder tracker
same_sha256 "$WORK/seed/data.bin" "$WORK/leech2/data.bin"
scrape_expect "$url" "$info_hash" 2,0,2 "after the second download"
stop_bg leecher2
stop_bg seeder
say "passed: the restarted tracker served the swarm it had before"
