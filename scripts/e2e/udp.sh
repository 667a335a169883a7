#!/usr/bin/env bash
# End-to-end: a file moves between two real BitTorrent clients (libtorrent, from
# Debian's python3-libtorrent) that find each other only through shoal_udp (BEP 15),
# once over IPv4 (127.0.0.1) and once over IPv6 (::1). libtorrent's UDP announces
# carry BEP 41 URL data (the "/announce" path), so those are exercised too. After
# each step the test scrapes the tracker (BEP 15 scrape) and checks seeders, leechers
# and downloads: see lib/libtorrent.bash for the steps.
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
e2e_init udp

libtorrent_deps
rtorrent_deps

# Loopback only, ports picked by the kernel; no statistics lines; no cleaning pass
# during the test (a pass would forget the emptied torrent and its downloads count
# before the last scrape).
cat >"$WORK/udp.toml" <<'TOML'
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
start_tracker udp "$WORK/udp.toml"

lt_transfer udp4 "udp://127.0.0.1:$TRACKER_PORT4/announce" 127.0.0.1
lt_transfer udp6 "udp://[::1]:$TRACKER_PORT6/announce" ::1
rt_transfer udp4-rtorrent "udp://127.0.0.1:$TRACKER_PORT4/announce"

stop_bg tracker
say "passed in $((SECONDS - E2E_START))s"
