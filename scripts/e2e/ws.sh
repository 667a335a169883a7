#!/usr/bin/env bash
# End-to-end: a file moves between two real WebTorrent peers (the webtorrent npm
# package on Node, WebRTC from @roamhq/wrtc) that find each other only through
# shoal_ws over ws:// on 127.0.0.1: the tracker relays the WebRTC offer and answer
# between them. After each step the test scrapes the tracker over WebSocket and checks
# seeders, leechers and downloads: see lib/webtorrent.bash for the steps.
# The tracker runs with Origin rules (one site and clients without an Origin, as
# Node's are, allowed; a cap per Origin): the transfer passes under them, and
# upgrades from other pages, or past the cap, are refused with 403 and 503.
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
cat >"$WORK/origins" <<'RULES'
allow https://site.example
allow none
deny *.abuse.example
RULES
cat >"$WORK/ws.toml" <<TOML
[logging]
level = "debug"
[network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
origins_path = "$WORK/origins"
max_connections_per_origin = 1
[statistics]
interval = 0
TOML
start_tracker ws "$WORK/ws.toml"

wt_transfer ws "ws://127.0.0.1:$TRACKER_PORT4"

url="ws://127.0.0.1:$TRACKER_PORT4/announce"
"${WT_TOOLS[@]}" upgrade "$url" https://site.example 101 || fail "the allowed site was refused"
"${WT_TOOLS[@]}" upgrade "$url" https://other.example 403 || fail "an unlisted origin was not refused"
"${WT_TOOLS[@]}" upgrade "$url" https://x.abuse.example 403 || fail "a denied origin was not refused"
# The cap: a connection from the site held open, and a second one refused.
node -e "
  const WebSocket = require('$WT_DIR/node_modules/ws');
  const held = new WebSocket('$url', { origin: 'https://site.example' });
  held.on('open', () => setTimeout(() => process.exit(0), 3000));
  held.on('error', () => process.exit(1));
" &
held=$!
sleep 1
"${WT_TOOLS[@]}" upgrade "$url" https://site.example 503 || fail "the per-origin cap did not hold"
wait "$held" || fail "the held connection did not open"
say "origin rules: allowed, refused (403) and capped (503) as configured"

stop_bg tracker
say "passed in $((SECONDS - E2E_START))s"
