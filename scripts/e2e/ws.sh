#!/usr/bin/env bash
# End-to-end: a file moves between two real WebTorrent peers (the webtorrent npm
# package on Node, WebRTC from @roamhq/wrtc) that find each other only through
# shoal_ws over ws:// on 127.0.0.1: the tracker relays the WebRTC offer and answer
# between them. After each step the test scrapes the tracker over WebSocket and checks
# seeders, leechers and downloads: see lib/webtorrent.bash for the steps.
#
# Everything runs in a private network namespace with only lo, so WebRTC cannot pick
# the machine's other addresses (see rerun_in_private_netns in lib/webtorrent.bash).
#
# Needs: node and npm (Debian's nodejs/npm installed when missing and running as
# root); the npm packages are installed by `npm ci` into scripts/e2e/webtorrent/.
# Exits 0 when the transfer passes, 1 otherwise (printing tracker and client logs).
source "$(dirname "$0")/lib/common.bash"
source "$E2E_DIR/lib/webtorrent.bash"
e2e_init ws

if [ -z "${SHOAL_E2E_IN_NETNS:-}" ]; then
    # Outside: install and build (the namespace has no network), then run again inside.
    webtorrent_deps
    tracker_bin shoal_ws >/dev/null
    rerun_in_private_netns "$E2E_DIR/$(basename "$0")"
fi
netns_loopback_up

# Loopback only, port picked by the kernel; no statistics lines.
cat >"$WORK/ws.toml" <<'TOML'
[logging]
level = "debug"
[network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
[statistics]
interval = 0
TOML
start_tracker ws "$WORK/ws.toml"

wt_transfer ws "ws://127.0.0.1:$TRACKER_PORT4"

stop_bg tracker
say "passed in $((SECONDS - E2E_START))s"
