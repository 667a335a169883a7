#!/usr/bin/env bash
# End-to-end: a private WebTorrent tracker. Two real WebTorrent peers (the webtorrent
# npm package on Node, as in ws.sh) carry the user's passkey in the tracker URL
# (ws://127.0.0.1:PORT/KEY); the torrent is registered through the admin API once it
# is made; the file moves, and the accounting batch credits what the clients
# reported. A peer with a key no user has is refused at the upgrade and gets nothing.
#
# Needs what ws.sh needs (node, npm packages, a private network namespace) and
# python3 for the admin API calls and the batch check.
source "$(dirname "$0")/lib/common.bash"
source "$E2E_DIR/lib/webtorrent.bash"
e2e_init ws_private

if [ -z "${SHOAL_E2E_IN_NETNS:-}" ]; then
    webtorrent_deps
    tracker_bin shoal_ws >/dev/null
    rerun_in_private_netns "$E2E_DIR/$(basename "$0")"
fi
netns_loopback_up

KEY=6f0d1b2c3d4e5f60718293a4b5c6d7e8
BAD_KEY=00000000000000000000000000000bad
TOKEN=e2e0e2e0e2e0e2e0e2e0e2e0e2e0e2e0e2e0
mkdir -p "$WORK/export"
echo "17 $KEY" >"$WORK/users.txt"
echo "# registered through the admin API" >"$WORK/torrents.txt"
(umask 077 && echo "$TOKEN" >"$WORK/admin.token")
cat >"$WORK/ws.toml" <<TOML
[logging]
level = "debug"
[admin]
enabled = true
address = "127.0.0.1:0"
token_path = "$WORK/admin.token"
[network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
[statistics]
interval = 0
[private]
enabled = true
users_path = "$WORK/users.txt"
torrents_path = "$WORK/torrents.txt"
export_directory = "$WORK/export"
export_interval = 1
TOML
start_tracker ws "$WORK/ws.toml"
ADMIN_PORT=""
for _ in $(seq 50); do
    ADMIN_PORT=$(sed -n 's|.*admin API on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$WORK/tracker.log" | head -n1)
    [ -n "$ADMIN_PORT" ] && break
    sleep 0.1
done
[ -n "$ADMIN_PORT" ] || fail "the tracker did not say where its admin API listens"
say "admin API on port $ADMIN_PORT"

# admin METHOD PATH [BODY]: prints the status and the answer.
admin() {
    python3 - "$ADMIN_PORT" "$TOKEN" "$@" <<'PY'
import sys, urllib.request, urllib.error
port, token, method, path = sys.argv[1:5]
body = sys.argv[5].encode() if len(sys.argv) > 5 else None
request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method,
                                 headers={"Authorization": f"Bearer {token}"})
try:
    with urllib.request.urlopen(request, timeout=5) as answer:
        print(answer.status, answer.read().decode())
except urllib.error.HTTPError as error:
    print(error.code, error.read().decode())
PY
}

register() {
    local answer
    answer=$(admin PUT "/v1/torrents/$1" '{"id":1001}')
    case $answer in
    201*) say "registered $1 through the admin API" ;;
    *) fail "the admin API did not register $1: $answer" ;;
    esac
}
WT_ON_TORRENT=register

URL="ws://127.0.0.1:$TRACKER_PORT4/$KEY"
wt_transfer private "$URL"

# A peer with a key no user has: refused at the upgrade, it never hears from the
# tracker and never finds the seeder it would need.
dir="$WORK/refused"
mkdir -p "$dir"
"${WT_TOOLS[@]}" make-torrent "$WORK/private/seed/data.bin" "ws://127.0.0.1:$TRACKER_PORT4/$BAD_KEY" \
    "$dir/bad.torrent" >/dev/null || fail "could not make the torrent with a bad key"
start_bg refused "${WT_PEER[@]}" leech "$dir/bad.torrent" "$dir/data" "$dir/status"
sleep 4
if grep -qx announced "$dir/status" 2>/dev/null; then
    fail "a peer with an unknown key was answered"
fi
stop_bg refused
grep -q 'refused.*403\|403.*refused\|unknown passkey\|passkey not recognised' "$WORK/tracker.log" ||
    say "(the refusal is not in the debug log; checked by the peer's silence)"
say "a peer with an unknown key got no answer"

# The user's GET shows the live state; then the tracker stops and writes its last batch.
say "admin GET user 17: $(admin GET /v1/users/17)"
stop_bg tracker
# What the clients counted themselves, from their last progress lines.
counted() { grep -o "$2=[0-9]*" "$WORK/private-$1.log" | tail -n1 | cut -d= -f2; }
seeder_up=$(counted seeder up)
leecher_up=$(counted leecher up)
leecher_down=$(counted leecher down)
say "the clients counted: uploaded ${seeder_up:-?} (seeder) and ${leecher_up:-?} (leecher), downloaded ${leecher_down:-?}"
python3 - "$WORK/export" "$((${seeder_up:-0} + ${leecher_up:-0}))" <<'PY' || fail "the accounting batches do not credit the transfer"
import glob, json, sys
totals = {}
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    for entry in json.load(open(path))["entries"]:
        key = (entry["user"], entry["torrent"])
        sums = totals.setdefault(key, {"uploaded": 0, "downloaded": 0, "completed": 0})
        for field in sums:
            sums[field] += entry[field]
print("credited:", totals)
got = totals.get((17, 1001))
size = 6 * 1024 * 1024
# The leecher reports its download whole when it completes; the seeder reports its
# uploads only in a later announce, which a WebTorrent client that closes at once
# may not get out: never more than it counted is credited.
ok = got is not None and got["downloaded"] == size and got["uploaded"] <= int(sys.argv[2])
ok = ok and got["completed"] >= 1
sys.exit(0 if ok else 1)
PY
say "accounting credited user 17 with the 6 MiB download and no more upload than was counted"
