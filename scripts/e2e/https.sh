#!/usr/bin/env bash
# End-to-end: a file moves between two real BitTorrent clients (libtorrent, from
# Debian's python3-libtorrent) that find each other only through shoal_http serving
# HTTPS on 127.0.0.1, with a self-signed certificate made for this run by
# scripts/gen-tls.sh. After each step the test scrapes the tracker over HTTPS and
# checks seeders, leechers and downloads: see lib/libtorrent.bash for the steps.
#
# Certificate checks stay ON everywhere: libtorrent verifies HTTPS trackers by default
# (validate_https_trackers) against OpenSSL's default CA store, and the clients run
# with SSL_CERT_FILE pointing at this run's certificate (OpenSSL's default CA file),
# so they trust it; the scraper is given the same file as its CA. libtorrent also
# checks the name: a certificate without 127.0.0.1 in it is refused even when trusted
# (tried by hand). The test first shows that a client without SSL_CERT_FILE is refused.
#
# Needs: python3-libtorrent and openssl (installed here when missing and running as root).
# Exits 0 when the transfer passes, 1 otherwise (printing tracker and client logs).
source "$(dirname "$0")/lib/common.bash"
source "$E2E_DIR/lib/libtorrent.bash"
e2e_init https

libtorrent_deps
need_apt openssl

"$REPO_ROOT/scripts/gen-tls.sh" "$WORK/tls" localhost >/dev/null

# Loopback only, port picked by the kernel; no statistics lines; no cleaning pass
# during the test. Log level info: at debug the TLS library logs every handshake,
# which would bury the rest of a failed run's log.
cat >"$WORK/https.toml" <<TOML
[logging]
level = "info"
[network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
enable_tls = true
tls_certificate_path = "$WORK/tls/cert.pem"
tls_private_key_path = "$WORK/tls/key.pem"
[statistics]
interval = 0
[cleaning]
interval = 3600
TOML
start_tracker http "$WORK/https.toml"

url="https://127.0.0.1:$TRACKER_PORT4/announce"
# The scraper (Python's ssl) verifies against this run's certificate.
SCRAPE_CAFILE="$WORK/tls/cert.pem"

# Without the certificate trusted, libtorrent must refuse the tracker: proof that the
# transfer below passes because the certificate is trusted, not because nothing is
# checked. The tracker must not have counted that client either.
mkdir -p "$WORK/untrusting"
random_file "$WORK/untrusting/data.bin" 1
untrusted_hash=$("${LT_CLIENT[@]}" make-torrent "$WORK/untrusting/data.bin" "$url" "$WORK/untrusting/test.torrent")
start_bg https-untrusting env -u SSL_CERT_FILE "${LT_CLIENT[@]}" seed "$WORK/untrusting/test.torrent" \
    "$WORK/untrusting" --ip 127.0.0.1 --status "$WORK/untrusting/status"
deadline=$((SECONDS + 15))
until grep -q 'tracker_error_alert.*certificate verify failed' "$WORK/https-untrusting.log"; do
    running https-untrusting || fail "the untrusting client exited"
    grep -qxF announced "$WORK/untrusting/status" 2>/dev/null &&
        fail "libtorrent accepted the self-signed certificate without SSL_CERT_FILE"
    [ "$SECONDS" -lt "$deadline" ] || fail "the untrusting client reported no certificate error within 15 s"
    sleep 0.1
done
kill_bg https-untrusting
say "without SSL_CERT_FILE libtorrent refuses the tracker: $(grep -o 'certificate verify failed.*' "$WORK/https-untrusting.log" | head -n1)"
scrape_expect "$url" "$untrusted_hash" 0,0,0 "of the refused client's torrent"

# OpenSSL (inside libtorrent) reads its default CA file from SSL_CERT_FILE.
export SSL_CERT_FILE="$WORK/tls/cert.pem"
lt_transfer https4 "$url" 127.0.0.1

stop_bg tracker
say "passed in $((SECONDS - E2E_START))s"
