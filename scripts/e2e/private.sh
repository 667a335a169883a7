#!/usr/bin/env bash
# End-to-end: a private tracker with real clients. The combined `shoal` runs the UDP and
# HTTP trackers in private mode from a users file and a torrents file; libtorrent
# (python3-libtorrent) seeds and downloads with the passkey in the announce URL:
#
# 1. UDP, `udp://127.0.0.1:PORT/KEY/announce`: libtorrent sends the URL's path as
#    BEP 41 URL data with every announce; a seeder and a leecher meet and the file
#    arrives whole. (A private UDP tracker refuses scrapes, which cannot carry a key,
#    so this run checks the transfer, not counts.)
# 2. HTTP, `http://127.0.0.1:PORT/announce?passkey=KEY`: the whole lt_transfer run of
#    lib/libtorrent.bash, scrapes (`/scrape?passkey=KEY`, derived by BEP 48) at every
#    step. (libtorrent refuses a loopback tracker whose path is not /announce, an SSRF
#    guard, so the path forms of the key are covered by the integration tests.)
# 2b. aria2 over HTTP, `http://127.0.0.1:PORT/KEY/announce`: aria2c downloads from a
#    libtorrent seeder (whose .torrent has the query form) with the key in the path
#    (aria2 has no loopback guard); DHT, LPD and PEX off, so the tracker is the only
#    way the two meet.
# 3. Accounting: both trackers write batches into one export directory; the bytes
#    credited to the user per torrent are exactly what the clients reported: every
#    announce passes through a recorder (lib/announce_recorder.py, one for UDP and one
#    for HTTP, in front of the trackers) that logs the counters each client sent, and
#    the credits must equal the sum of each client's steps between its announces,
#    byte for byte; every batch id is unique.
# 4. A leecher whose .torrent carries a key no user has, over each: the tracker's
#    refusal reaches the client (over HTTP with its reason, "passkey not recognised";
#    libtorrent does not show a UDP error's text) and it never gets a tracker reply.
#
# Torrents are registered the way a site does it: the line is appended to the
# torrents file and the tracker reloaded with SIGUSR1.
#
# Needs: python3-libtorrent and aria2 (installed when missing, as root).
source "$(dirname "$0")/lib/common.bash"
source "$E2E_DIR/lib/libtorrent.bash"
e2e_init private

libtorrent_deps
need_apt aria2
shoal=$(tracker_bin shoal)

KEY=6f0d1b2c3d4e5f60718293a4b5c6d7e8
BAD_KEY=00000000000000000000000000000bad
echo "17 $KEY" >"$WORK/users.txt"
echo "# registered as the test makes torrents" >"$WORK/torrents.txt"
mkdir -p "$WORK/export"
cat >"$WORK/shoal.toml" <<TOML
[logging]
level = "debug"
[udp.network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
[udp.statistics]
interval = 0
[udp.private]
enabled = true
users_path = "$WORK/users.txt"
torrents_path = "$WORK/torrents.txt"
export_directory = "$WORK/export"
export_interval = 1
[http.network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
[http.statistics]
interval = 0
[http.private]
enabled = true
users_path = "$WORK/users.txt"
torrents_path = "$WORK/torrents.txt"
export_directory = "$WORK/export"
export_interval = 1
[ws]
enabled = false
TOML
"$shoal" -c "$WORK/shoal.toml" -P >/dev/null || fail "shoal rejected the private config"
start_bg tracker "$shoal" -c "$WORK/shoal.toml"
deadline=$((SECONDS + 15))
udp_port="" http_port=""
until [ -n "$udp_port" ] && [ -n "$http_port" ]; do
    running tracker || fail "shoal exited at start"
    [ "$SECONDS" -lt "$deadline" ] || fail "shoal logged no 'listening on' lines within 15 s"
    sleep 0.1
    udp_port=$(sed -n 's|.*listening on udp://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$WORK/tracker.log" | head -n1)
    http_port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$WORK/tracker.log" | head -n1)
done
grep -q 'private mode: 1 users, 0 torrents registered' "$WORK/tracker.log" ||
    fail "the tracker did not say it loaded the registry"
say "shoal in private mode: UDP on $udp_port, HTTP on $http_port"

# The clients reach the trackers through recorders of what they report.
tracker_udp_port=$udp_port tracker_http_port=$http_port
udp_port=$(free_port udp) http_port=$(free_port)
start_bg udp-recorder "$SYS_PYTHON" "$E2E_DIR/lib/announce_recorder.py" udp "$udp_port" "$tracker_udp_port" "$WORK/reported.jsonl"
start_bg http-recorder "$SYS_PYTHON" "$E2E_DIR/lib/announce_recorder.py" http "$http_port" "$tracker_http_port" "$WORK/reported.jsonl"
wait_for_line "$WORK/udp-recorder.log" listening 10 udp-recorder
wait_for_line "$WORK/http-recorder.log" listening 10 http-recorder
say "recorders of the clients' announces: UDP on $udp_port, HTTP on $http_port"

reloads=0
# register INFO_HASH: the torrents file grows a line and the tracker reloads it.
register() {
    reloads=$((reloads + 1))
    echo "$1 $((1000 + reloads))" >>"$WORK/torrents.txt"
    kill -USR1 "${BG_PIDS[tracker]}"
    local deadline=$((SECONDS + 10))
    # The UDP and HTTP trackers name the same files, so they share one registry: the
    # first of them to handle the signal reads the files, the other finds them read.
    until grep -q "private registry reloaded: 1 users, $reloads torrents" "$WORK/tracker.log"; do
        [ "$SECONDS" -lt "$deadline" ] || fail "the registry was not reloaded with torrent $1"
        sleep 0.1
    done
    say "registered torrent $1 (SIGUSR1)"
}

# refused NAME TORRENT DIR TEXT: a leecher with a key no user has gets the tracker's
# failure (its log shows TEXT) and meets no one.
refused() {
    local name=$1 torrent=$2 dir=$3 text=$4
    mkdir -p "$dir"
    start_bg "$name" "${LT_CLIENT[@]}" leech "$torrent" "$dir" --ip 127.0.0.1 --status "$dir/status"
    local deadline=$((SECONDS + 20))
    until grep -q "tracker_error_alert.*$text" "$WORK/$name.log"; do
        running "$name" || fail "$name exited"
        [ "$SECONDS" -lt "$deadline" ] || fail "$name got no tracker failure '$text'"
        sleep 0.2
    done
    ! grep -qxF announced "$dir/status" || fail "$name got a tracker reply with a bad key"
    kill_bg "$name"
    say "$name: refused ('$text'), no tracker reply, no peers"
}

# --- 1. UDP: the key in BEP 41 URL data ------------------------------------------------
dir="$WORK/udp"
mkdir -p "$dir/seed" "$dir/leech"
random_file "$dir/seed/data.bin" 6
url="udp://127.0.0.1:$udp_port/$KEY/announce"
hash=$("${LT_CLIENT[@]}" make-torrent "$dir/seed/data.bin" "$url" "$dir/test.torrent") ||
    fail "could not make the torrent"
register "$hash"
start_bg udp-seeder "${LT_CLIENT[@]}" seed "$dir/test.torrent" "$dir/seed" --ip 127.0.0.1 --status "$dir/seeder.status"
wait_for_line "$dir/seeder.status" announced 20 udp-seeder tracker
start_bg udp-leecher "${LT_CLIENT[@]}" leech "$dir/test.torrent" "$dir/leech" --ip 127.0.0.1 --status "$dir/leecher.status"
wait_for_line "$dir/leecher.status" finished 40 udp-leecher udp-seeder tracker
same_sha256 "$dir/seed/data.bin" "$dir/leech/data.bin"
say "UDP: seeder and leecher met through the passkey in BEP 41 URL data"
"${LT_CLIENT[@]}" make-torrent "$dir/seed/data.bin" "udp://127.0.0.1:$udp_port/$BAD_KEY/announce" \
    "$dir/bad.torrent" >/dev/null || fail "could not make the bad-key torrent"
# libtorrent reports a UDP tracker's error without its text ("tracker sent a failure
# message"); over HTTP it shows the reason.
refused udp-bad-key "$dir/bad.torrent" "$dir/bad" "tracker sent a failure message"
stop_bg udp-leecher
stop_bg udp-seeder

# --- 2. HTTP: the key in the path, scrapes at every step ---------------------------------
LT_AFTER_TORRENT=register lt_transfer http-private "http://127.0.0.1:$http_port/announce?passkey=$KEY" 127.0.0.1
dir="$WORK/http-private"
"${LT_CLIENT[@]}" make-torrent "$dir/seed/data.bin" "http://127.0.0.1:$http_port/announce?passkey=$BAD_KEY" \
    "$dir/bad.torrent" >/dev/null || fail "could not make the bad-key torrent"
refused http-bad-key "$dir/bad.torrent" "$dir/bad" "passkey not recognised"

# --- 2b. aria2 over HTTP: the key in the path ----------------------------------------------
dir="$WORK/aria2"
mkdir -p "$dir/seed" "$dir/leech"
random_file "$dir/seed/data.bin" 6
# The seeder's .torrent has the query form (libtorrent's loopback guard wants the
# path /announce), aria2's the path form; the info hash is the same.
hash=$("${LT_CLIENT[@]}" make-torrent "$dir/seed/data.bin" "http://127.0.0.1:$http_port/announce?passkey=$KEY" \
    "$dir/seed.torrent") || fail "could not make the torrent"
"${LT_CLIENT[@]}" make-torrent "$dir/seed/data.bin" "http://127.0.0.1:$http_port/$KEY/announce" \
    "$dir/test.torrent" >/dev/null || fail "could not make the torrent"
register "$hash"
start_bg aria2-seeder "${LT_CLIENT[@]}" seed "$dir/seed.torrent" "$dir/seed" --ip 127.0.0.1 --status "$dir/seeder.status"
wait_for_line "$dir/seeder.status" announced 20 aria2-seeder tracker
# --seed-time=0: aria2 announces completed and stopped as soon as it has the file,
# then exits; its own port on loopback only.
timeout 60 aria2c --dir="$dir/leech" --seed-time=0 --enable-dht=false --enable-dht6=false \
    --bt-enable-lpd=false --enable-peer-exchange=false --listen-port=51413-51420 \
    --bt-external-ip=127.0.0.1 --bt-stop-timeout=50 --summary-interval=0 --console-log-level=warn \
    --follow-torrent=mem "$dir/test.torrent" >"$WORK/aria2.log" 2>&1 ||
    fail "aria2c did not download through the private tracker (see aria2.log)"
same_sha256 "$dir/seed/data.bin" "$dir/leech/data.bin"
say "aria2 over HTTP: downloaded from the libtorrent seeder with the key in the path"
stop_bg aria2-seeder

! grep -q "$KEY" "$WORK/tracker.log" || fail "the tracker's log holds a passkey"
stop_bg tracker
stop_bg udp-recorder
stop_bg http-recorder

# --- 3. accounting: the batches add up to what the clients reported -------------------
python3 - "$WORK/export" "$WORK/reported.jsonl" "$WORK/torrents.txt" <<'PY' || fail "the exported accounting does not match what the clients reported"
import glob, json, sys
size = 6 * 1024 * 1024
credited, ids = {}, []
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    batch = json.load(open(path))
    ids.append(batch["batch"])
    for entry in batch["entries"]:
        assert entry["user"] == 17, entry
        total = credited.setdefault(entry["torrent"], {"uploaded": 0, "downloaded": 0, "completed": 0})
        for field in total:
            total[field] += entry[field]
assert len(ids) == len(set(ids)), f"batch ids repeat: {ids}"
# What the clients reported: per client (info hash, peer id), every step up between two
# announces the tracker accepted; a client's first announce, and its first after a
# `stopped`, is its baseline.
torrent_of = {}
for line in open(sys.argv[3]):
    words = line.split()
    if len(words) >= 2 and not line.startswith("#"):
        torrent_of[words[0]] = int(words[1])
reported, last, announces = {}, {}, 0
for line in open(sys.argv[2]):
    report = json.loads(line)
    if not report["accepted"]:
        continue
    announces += 1
    torrent = torrent_of[report["info_hash"]]
    client = (report["info_hash"], report["peer_id"])
    total = reported.setdefault(torrent, {"uploaded": 0, "downloaded": 0})
    before = last.get(client)
    if before is not None:
        for field in ("uploaded", "downloaded"):
            total[field] += max(0, report[field] - before[field])
    last[client] = None if report["event"] == "stopped" else report
# Torrent 1001 went over UDP, 1002 over HTTP, 1003 over HTTP to aria2: the credits are
# what the clients reported, to the byte, and the file moved once each way (clients
# count payload; a piece fetched twice adds a little).
for torrent in (1001, 1002, 1003):
    got, want = credited.get(torrent), reported.get(torrent)
    assert got and want, f"torrent {torrent}: credited {credited}, reported {reported}"
    assert (got["uploaded"], got["downloaded"]) == (want["uploaded"], want["downloaded"]), (torrent, got, want)
    assert size <= got["downloaded"] < size * 1.1, (torrent, got)
    assert got["completed"] == 1, (torrent, got)
print(f"{len(ids)} batches, {announces} announces recorded: " + ", ".join(f"torrent {t}: {v}" for t, v in sorted(credited.items())))
PY
say "accounting: the batches credit exactly what the clients reported over UDP and HTTP"
say "passed in $((SECONDS - E2E_START))s"
