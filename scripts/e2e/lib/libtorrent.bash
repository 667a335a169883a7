# One file transfer between two libtorrent processes that meet only through a shoal
# tracker (UDP, HTTP or HTTPS), with scrapes of the tracker at every step. Sourced by
# scripts/e2e/udp.sh, http.sh and https.sh after lib/common.bash.

# Installs what the libtorrent runs need when it is missing.
libtorrent_deps() {
    need_apt python3-libtorrent
    "$SYS_PYTHON" -c 'import libtorrent' 2>/dev/null ||
        fail "python3-libtorrent is installed but $SYS_PYTHON cannot import libtorrent"
}

# The client as a plain command (not a shell function) so that start_bg's PID is the
# client's own and SIGTERM reaches it.
LT_CLIENT=("$SYS_PYTHON" "$E2E_DIR/lib/lt_client.py")

# scrape_expect URL INFO_HASH SEEDERS,LEECHERS,DOWNLOADS WHY
scrape_expect() {
    local out
    out=$("$SYS_PYTHON" "$E2E_DIR/lib/scrape.py" "$1" "$2" --expect "$3" ${SCRAPE_CAFILE:+--cafile "$SCRAPE_CAFILE"} 2>&1) ||
        fail "scrape $4: $out"
    say "scrape $4: $out"
}

# lt_transfer NAME TRACKER_URL CLIENT_IP
# (with LT_AFTER_TORRENT set, that command is run with the info hash once the torrent
# exists, before the first scrape)
#
# The steps and what each checks:
#   1. a random 6 MiB file and a v1 .torrent whose only tracker is TRACKER_URL
#   2. scrape: the tracker does not know the torrent yet (0 seeders, 0 leechers, 0 downloads)
#   3. seeder: verifies the file and announces;           scrape: 1, 0, 0
#   4. leecher: announces (event=started, left > 0); the seeder uploads at 2 MiB/s
#      so the download takes about 3 s;                   scrape: 1, 1, 0 (during it)
#   5. leecher finishes (event=completed);  sha256 equal; scrape: 2, 0, 1
#   6. leecher quits (event=stopped);                     scrape: 1, 0, 1
#   7. seeder quits (event=stopped);                      scrape: 0, 0, 1
# The leecher can only have found the seeder through the tracker's announce reply:
# DHT, LSD, PEX, UPnP and NAT-PMP are off in both.
lt_transfer() {
    local name=$1 url=$2 ip=$3 started=$SECONDS
    local dir="$WORK/$name"
    mkdir -p "$dir/seed" "$dir/leech"
    say "--- $name: libtorrent seeder and leecher on $ip, tracker $url"

    random_file "$dir/seed/data.bin" 6
    local info_hash
    info_hash=$("${LT_CLIENT[@]}" make-torrent "$dir/seed/data.bin" "$url" "$dir/test.torrent") ||
        fail "could not make the torrent"
    say "torrent $info_hash"
    # A private tracker serves registered torrents only: the caller registers it.
    if [ -n "${LT_AFTER_TORRENT:-}" ]; then "$LT_AFTER_TORRENT" "$info_hash"; fi
    scrape_expect "$url" "$info_hash" 0,0,0 "before any announce"

    start_bg "$name-seeder" "${LT_CLIENT[@]}" seed "$dir/test.torrent" "$dir/seed" \
        --ip "$ip" --status "$dir/seeder.status" --upload-limit $((2 * 1024 * 1024))
    wait_for_line "$dir/seeder.status" seeding 20 "$name-seeder" tracker
    wait_for_line "$dir/seeder.status" announced 20 "$name-seeder" tracker
    scrape_expect "$url" "$info_hash" 1,0,0 "with the seeder"

    start_bg "$name-leecher" "${LT_CLIENT[@]}" leech "$dir/test.torrent" "$dir/leech" \
        --ip "$ip" --status "$dir/leecher.status"
    wait_for_line "$dir/leecher.status" announced 20 "$name-leecher" "$name-seeder" tracker
    if grep -qxF finished "$dir/leecher.status"; then
        fail "the leecher finished before it could be scraped as a leecher (upload limit ignored?)"
    fi
    scrape_expect "$url" "$info_hash" 1,1,0 "while the leecher downloads"

    wait_for_line "$dir/leecher.status" finished 40 "$name-leecher" "$name-seeder" tracker
    same_sha256 "$dir/seed/data.bin" "$dir/leech/data.bin"
    scrape_expect "$url" "$info_hash" 2,0,1 "after the download"

    stop_bg "$name-leecher"
    grep -qxF stopped "$dir/leecher.status" || fail "the leecher got no reply to its stopped announce"
    scrape_expect "$url" "$info_hash" 1,0,1 "after the leecher left"

    stop_bg "$name-seeder"
    grep -qxF stopped "$dir/seeder.status" || fail "the seeder got no reply to its stopped announce"
    scrape_expect "$url" "$info_hash" 0,0,1 "after the seeder left"

    say "--- $name: passed in $((SECONDS - started))s"
}
