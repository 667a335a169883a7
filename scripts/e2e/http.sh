#!/usr/bin/env bash
# End-to-end: a file moves between two real BitTorrent clients (libtorrent, from
# Debian's python3-libtorrent) that find each other only through shoal_http, once
# over IPv4 (127.0.0.1) and once over IPv6 (::1). After each step the test scrapes the
# tracker (GET /scrape?info_hash=...) and checks seeders, leechers and downloads: see
# lib/libtorrent.bash for the steps.
#
# The announce path stays exactly /announce: libtorrent's SSRF mitigation refuses
# tracker URLs with other paths on loopback addresses.
#
# A third run has an rtorrent leecher (Debian's rtorrent, a second, independent
# BitTorrent implementation) fetch from a libtorrent seeder over IPv4: see
# lib/rtorrent.bash.
#
# Needs: python3-libtorrent and rtorrent (installed here when missing and running as
# root).
# Exits 0 when all three transfers pass, 1 otherwise (printing tracker and client logs).
source "$(dirname "$0")/lib/common.bash"
source "$E2E_DIR/lib/libtorrent.bash"
source "$E2E_DIR/lib/rtorrent.bash"
e2e_init http

libtorrent_deps
rtorrent_deps

# Loopback only, ports picked by the kernel; no statistics lines; no cleaning pass
# during the test (a pass would forget the emptied torrent and its downloads count
# before the last scrape).
cat >"$WORK/http.toml" <<'TOML'
[logging]
level = "debug"
[network]
address_ipv4 = "127.0.0.1:0"
address_ipv6 = "[::1]:0"
[statistics]
interval = 0
[cleaning]
interval = 3600
TOML
start_tracker http "$WORK/http.toml"

lt_transfer http4 "http://127.0.0.1:$TRACKER_PORT4/announce" 127.0.0.1
lt_transfer http6 "http://[::1]:$TRACKER_PORT6/announce" ::1
rt_transfer http4-rtorrent "http://127.0.0.1:$TRACKER_PORT4/announce"

stop_bg tracker
say "passed in $((SECONDS - E2E_START))s"
