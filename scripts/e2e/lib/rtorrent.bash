# One file transfer from a libtorrent seeder to an rtorrent leecher (Debian's rtorrent
# 0.9.8, on rakshasa's libtorrent: a second, independent BitTorrent implementation)
# that meet only through a shoal tracker (HTTP or UDP, IPv4). Sourced by
# scripts/e2e/http.sh and udp.sh after lib/common.bash and lib/libtorrent.bash.

rtorrent_deps() {
    need_apt rtorrent
}

# rt_transfer NAME TRACKER_URL
#
# The steps and what each checks (seeders, leechers, downloads):
#   1. a random 6 MiB file and a v1 .torrent whose only tracker is TRACKER_URL
#   2. libtorrent seeder verifies it and announces;        scrape: 1, 0, 0
#   3. rtorrent leecher announces (event=started, left > 0);   scrape: 1, 1, 0
#   4. rtorrent finishes; sha256 equal. rtorrent 0.9.8 logs "Queueing completed
#      event" and keeps it for its next regular announce (30 minutes away; with the
#      tracker's interval set to 3 s, or d.tracker_announce on finishing, it still
#      sent nothing within 15 s), so the tracker rightly still counts it as a
#      leecher:                                            scrape: 1, 1, 0
#   5. rtorrent quits. Over HTTP it announces event=stopped (left=0) and waits for the
#      reply;                                              scrape: 1, 0, 0
#      Over UDP it gives up the stopped announce as it exits (its log says "request
#      disowned" before the BEP 15 connect is answered), so the tracker keeps it, as
#      it must, until the peer times out:                  scrape: 1, 1, 0
#   6. the seeder quits;                  scrape: 0, 0, 0 (HTTP) or 0, 1, 0 (UDP)
# rtorrent runs with DHT and peer exchange off (it has no LSD, UPnP or NAT-PMP) and
# listens on 127.0.0.1 only. rtorrent keeps one peer per IP address, so a tracker
# that listed the requester itself could make it pick itself instead of the seeder,
# which shares 127.0.0.1; shoal leaves the requester out of its reply.
rt_transfer() {
    local name=$1 url=$2 started=$SECONDS
    local dir="$WORK/$name" gone
    # What rtorrent leaves behind in the tracker when it quits (step 5).
    case "$url" in
    udp:*) gone=1 ;;
    *) gone=0 ;;
    esac
    mkdir -p "$dir/seed" "$dir/leech" "$dir/session"
    say "--- $name: libtorrent seeder, rtorrent leecher, on 127.0.0.1, tracker $url"

    random_file "$dir/seed/data.bin" 6
    local info_hash
    info_hash=$("${LT_CLIENT[@]}" make-torrent "$dir/seed/data.bin" "$url" "$dir/test.torrent") ||
        fail "could not make the torrent"
    say "torrent $info_hash"

    # No upload limit here: libtorrent's rate limiter stalls TCP uploads to rtorrent
    # for about 30 s (seen with a 2 MiB/s limit), and rtorrent stays a leecher for
    # the tracker after finishing anyway (step 4).
    start_bg "$name-seeder" "${LT_CLIENT[@]}" seed "$dir/test.torrent" "$dir/seed" \
        --ip 127.0.0.1 --status "$dir/seeder.status"
    wait_for_line "$dir/seeder.status" seeding 20 "$name-seeder" tracker
    wait_for_line "$dir/seeder.status" announced 20 "$name-seeder" tracker
    scrape_expect "$url" "$info_hash" 1,0,0 "with the seeder"

    # rtorrent's configuration: no rtorrent.rc is read (-n), only this file. Daemon
    # mode: no terminal needed. The torrent is loaded and started at once.
    cat >"$dir/rtorrent.rc" <<RC
system.daemon.set = true
session.path.set = "$dir/session"
directory.default.set = "$dir/leech"
network.bind_address.set = 127.0.0.1
network.port_range.set = 49152-65000
network.port_random.set = yes
dht.mode.set = disable
protocol.pex.set = no
trackers.use_udp.set = yes
method.set_key = event.download.finished, shoal_e2e, "execute.nothrow = touch, \"$dir/rtorrent.finished\""
log.open_file = "events", "$dir/rtorrent-events.log"
log.add_output = "info", "events"
log.add_output = "tracker_debug", "events"
load.start_verbose = "$dir/test.torrent"
RC
    start_bg "$name-rtorrent" rtorrent -n -o "import=$dir/rtorrent.rc"
    scrape_expect "$url" "$info_hash" 1,1,0 "with rtorrent"

    local deadline=$((SECONDS + 40))
    until [ -e "$dir/rtorrent.finished" ]; do
        running "$name-rtorrent" || fail "rtorrent exited during the download"
        running "$name-seeder" || fail "the seeder exited during the download"
        [ "$SECONDS" -lt "$deadline" ] || fail "rtorrent did not finish within 40 s"
        sleep 0.1
    done
    same_sha256 "$dir/seed/data.bin" "$dir/leech/data.bin"
    scrape_expect "$url" "$info_hash" 1,1,0 "after rtorrent finished"

    stop_bg "$name-rtorrent"
    scrape_expect "$url" "$info_hash" "1,$gone,0" "after rtorrent left"

    stop_bg "$name-seeder"
    grep -qxF stopped "$dir/seeder.status" || fail "the seeder got no reply to its stopped announce"
    scrape_expect "$url" "$info_hash" "0,$gone,0" "after the seeder left"

    say "--- $name: passed in $((SECONDS - started))s"
}
