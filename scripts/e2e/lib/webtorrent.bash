# One file transfer between two WebTorrent processes (webtorrent 2.8 on Node, WebRTC
# from @roamhq/wrtc) that meet only through a shoal_ws tracker (ws or wss), with
# scrapes of the tracker at every step. Sourced by scripts/e2e/ws.sh and wss.sh after
# lib/common.bash.

WT_DIR="$E2E_DIR/webtorrent"
# The peers (webtorrent) and the light tools (make-torrent, scrape) as plain commands,
# so that start_bg's PID is node's own and SIGTERM reaches it.
WT_PEER=(node "$WT_DIR/peer.mjs")
WT_TOOLS=(node "$WT_DIR/tools.mjs")

# Node, npm and the npm project in scripts/e2e/webtorrent/ (pinned by its
# package-lock.json), installed into its git-ignored node_modules when missing or
# when package.json or the lock file changed since the last install.
webtorrent_deps() {
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        need_apt nodejs npm
    fi
    local major
    major=$(node -p 'process.versions.node.split(".")[0]')
    [ "$major" -ge 18 ] || fail "node $(node --version) is too old: webtorrent 2.x needs 18 or newer"

    local stamp="$WT_DIR/node_modules/.shoal-e2e-stamp" want
    want=$(cat "$WT_DIR/package.json" "$WT_DIR/package-lock.json" | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        say "installing the WebTorrent client (npm ci in scripts/e2e/webtorrent)"
        # --ignore-scripts: no install script needs to run (@roamhq/wrtc ships its
        # native binary inside an npm package; webrtc-polyfill, whose default backend
        # downloads one at install time, is replaced by the local webrtc-shim).
        (cd "$WT_DIR" && npm ci --ignore-scripts --no-audit --no-fund) >"$WORK/npm.log" 2>&1 ||
            fail "npm ci in $WT_DIR failed (see npm.log)"
        echo "$want" >"$stamp"
    fi
    (cd "$WT_DIR" && node --input-type=module -e \
        "import { RTCPeerConnection } from 'webrtc-polyfill'; if (typeof RTCPeerConnection !== 'function') process.exit(1)") \
        >"$WORK/wrtc-check.log" 2>&1 || fail "WebRTC (@roamhq/wrtc through webrtc-shim) does not load (see wrtc-check.log)"
}

# @roamhq/wrtc offers every host address it finds as an ICE candidate, so on a normal
# machine the two peers could connect over the machine's LAN address. To keep every
# packet of the test on loopback, the test runs again inside a private network
# namespace that has nothing but `lo`: the tracker, both peers and the scraper.
# Call this after installing everything (the namespace has no network); it does not
# return: it exits with the status of the run inside the namespace.
rerun_in_private_netns() {
    local script=$1 args=()
    command -v ip >/dev/null || need_apt iproute2
    # Root can usually make a network namespace directly; anyone else (and root in
    # some containers) needs a user namespace too, mapping them to root inside, which
    # allows bringing up lo.
    if [ "$(id -u)" -eq 0 ] && unshare -n true 2>"$WORK/unshare.log"; then
        args=(-n)
    elif unshare -r -n true 2>>"$WORK/unshare.log"; then
        args=(-r -n)
    else
        skip_loudly namespaces "this machine refuses a private network namespace ($(tr '\n' ' ' <"$WORK/unshare.log"))," \
            "and without one WebRTC would also use the machine's non-loopback addresses." \
            "Run as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)."
    fi
    # In the background and waited for, so that a SIGTERM to this script reaches the
    # run inside (its PID: unshare execs the script) through the cleanup trap.
    local rc=0
    SHOAL_E2E_IN_NETNS=1 SHOAL_E2E_BUILT=1 unshare "${args[@]}" -- "$script" &
    BG_PIDS["netns_run"]=$!
    wait "${BG_PIDS["netns_run"]}" || rc=$?
    unset "BG_PIDS[netns_run]"
    exit "$rc"
}

# Inside the namespace: bring up lo and make sure it is the only interface.
netns_loopback_up() {
    ip link set lo up || fail "cannot bring up lo in the network namespace"
    local links
    links=$(ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
    [ "$links" = "lo " ] || fail "the network namespace has interfaces other than lo: $links"
}

# wt_scrape_expect URL INFO_HASH SEEDERS,LEECHERS,DOWNLOADS WHY
wt_scrape_expect() {
    local out
    out=$("${WT_TOOLS[@]}" scrape "$1" "$2" "$3" 15 2>&1) || fail "scrape $4: $out"
    say "scrape $4: $out"
}

# wt_scrape_both INFO_HASH S,L,D WHY: the expected counts at every tracker of the
# transfer (two when the seeder and the leecher use different nodes of a cluster).
wt_scrape_both() {
    local url
    for url in "${WT_URLS[@]}"; do
        wt_scrape_expect "$url" "$1" "$2" "$3 (${url%/announce})"
    done
}

# wt_transfer NAME TRACKER_URL [LEECHER_TRACKER_URL]
#
# With a second URL the leecher's .torrent names only that tracker (another node of a
# cluster): the same file, so the same info hash, and every scrape is checked on both.
# WT_TRACKER_PROCS names the background processes of the trackers ("tracker" unless
# set), which must stay up while the test waits for the peers.
#
# With WT_ON_TORRENT set, that function is called with the info hash once the torrent
# is made, before anything announces (a private tracker's test registers it).
#
# The steps and what each checks (seeders, leechers, downloads):
#   1. a random 6 MiB file and a .torrent whose only tracker is TRACKER_URL
#   2. scrape: the tracker does not know the torrent yet            0, 0, 0
#   3. seeder: checks the file, connects and announces;    scrape:  1, 0, 0
#      (a WebTorrent seeder that starts with the whole file still reports
#      event=completed once; a completion counts only for a peer seen leeching, so
#      it counts nothing)
#   4. leecher: announces with WebRTC offers (left > 0); the tracker relays offer
#      and answer; the seeder uploads at 1 MiB/s, so the download takes a few
#      seconds (WebTorrent's throttle lets bursts through);
#                                                  scrape during it: 1, 1, 0
#   5. leecher finishes (event=completed); sha256 equal;   scrape:  2, 0, 1
#   6. leecher quits (stopped, connection closed);         scrape:  1, 0, 1
#   7. seeder quits;                                       scrape:  0, 0, 1
#      (shoal_ws counts only peers on open connections; an emptied torrent keeps
#      its downloads count until the next cleaning pass)
# The peers can only have met through the tracker: DHT, LSD, ut_pex, UPnP and NAT-PMP
# are off, and a WebRTC connection needs the offer and answer the tracker relays.
wt_transfer() {
    local name=$1 url=$2 leech_url=${3:-$2} started=$SECONDS
    local dir="$WORK/$name"
    # shellcheck disable=SC2206 # process names, split on purpose
    local trackers=(${WT_TRACKER_PROCS:-tracker})
    WT_URLS=("$url")
    [ "$leech_url" = "$url" ] || WT_URLS+=("$leech_url")
    mkdir -p "$dir/seed" "$dir/leech"
    say "--- $name: WebTorrent seeder ($url) and leecher ($leech_url)"

    random_file "$dir/seed/data.bin" 6
    local info_hash leech_hash
    info_hash=$("${WT_TOOLS[@]}" make-torrent "$dir/seed/data.bin" "$url" "$dir/test.torrent") ||
        fail "could not make the torrent"
    leech_hash=$("${WT_TOOLS[@]}" make-torrent "$dir/seed/data.bin" "$leech_url" "$dir/leech.torrent") ||
        fail "could not make the leecher's torrent"
    [ "$leech_hash" = "$info_hash" ] || fail "the two torrents differ: $info_hash, $leech_hash"
    say "torrent $info_hash"
    # A private tracker serves registered torrents only: the caller registers it.
    if [ -n "${WT_ON_TORRENT:-}" ]; then "$WT_ON_TORRENT" "$info_hash"; fi
    wt_scrape_both "$info_hash" 0,0,0 "before any announce"

    start_bg "$name-seeder" "${WT_PEER[@]}" seed "$dir/test.torrent" "$dir/seed" \
        "$dir/seeder.status" $((1024 * 1024))
    wait_for_line "$dir/seeder.status" seeding 20 "$name-seeder" "${trackers[@]}"
    wt_scrape_both "$info_hash" 1,0,0 "with the seeder"

    start_bg "$name-leecher" "${WT_PEER[@]}" leech "$dir/leech.torrent" "$dir/leech" \
        "$dir/leecher.status"
    wait_for_line "$dir/leecher.status" announced 20 "$name-leecher" "$name-seeder" "${trackers[@]}"
    if grep -qxF finished "$dir/leecher.status"; then
        fail "the leecher finished before it could be scraped as a leecher (upload limit ignored?)"
    fi
    wt_scrape_both "$info_hash" 1,1,0 "while the leecher downloads"

    wait_for_line "$dir/leecher.status" finished 40 "$name-leecher" "$name-seeder" "${trackers[@]}"
    same_sha256 "$dir/seed/data.bin" "$dir/leech/data.bin"
    wt_scrape_both "$info_hash" 2,0,1 "after the download"

    stop_bg "$name-leecher"
    grep -qxF stopped "$dir/leecher.status" || fail "the leecher did not stop cleanly"
    wt_scrape_both "$info_hash" 1,0,1 "after the leecher left"

    stop_bg "$name-seeder"
    grep -qxF stopped "$dir/seeder.status" || fail "the seeder did not stop cleanly"
    wt_scrape_both "$info_hash" 0,0,1 "after the seeder left"

    say "--- $name: passed in $((SECONDS - started))s"
}
