#!/usr/bin/env bash
# End-to-end: a file moves between two real WebTorrent peers (the webtorrent npm
# package on Node, WebRTC from @roamhq/wrtc) that find each other only through
# shoal_ws over wss:// on 127.0.0.1, with a self-signed certificate made for this run
# by scripts/gen-tls.sh. After each step the test scrapes the tracker over wss and
# checks seeders, leechers and downloads: see lib/webtorrent.bash for the steps.
#
# Certificate checks stay ON: Node verifies TLS certificates by default, and every
# node process here runs with NODE_EXTRA_CA_CERTS pointing at this run's certificate,
# so it is trusted in addition to the system CAs (NODE_TLS_REJECT_UNAUTHORIZED=0, which
# would turn checking off, is not used). The test first shows that a client without
# NODE_EXTRA_CA_CERTS is refused.
#
# Everything runs in a private network namespace with only lo, so WebRTC cannot pick
# the machine's other addresses (see rerun_in_private_netns in lib/webtorrent.bash).
#
# Needs: node and npm (Debian's nodejs/npm installed when missing and running as
# root), openssl; the npm packages are installed by `npm ci` into scripts/e2e/webtorrent/.
# Exits 0 when the transfer passes, 1 otherwise (printing tracker and client logs).
source "$(dirname "$0")/lib/common.bash"
source "$E2E_DIR/lib/webtorrent.bash"
e2e_init wss

if [ -z "${SHOAL_E2E_IN_NETNS:-}" ]; then
    # Outside: install and build (the namespace has no network), then run again inside.
    webtorrent_deps
    need_apt openssl
    tracker_bin shoal_ws >/dev/null
    rerun_in_private_netns "$E2E_DIR/$(basename "$0")"
fi
netns_loopback_up

"$REPO_ROOT/scripts/gen-tls.sh" "$WORK/tls" localhost >/dev/null

# Loopback only, port picked by the kernel; no statistics lines. Log level info: at
# debug the TLS library logs every handshake.
cat >"$WORK/wss.toml" <<TOML
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
TOML
start_tracker ws "$WORK/wss.toml"
url="wss://127.0.0.1:$TRACKER_PORT4"

# Without the certificate trusted, node must refuse the tracker: proof that the
# transfer below passes because of NODE_EXTRA_CA_CERTS, not because nothing is checked.
if out=$(env -u NODE_EXTRA_CA_CERTS "${WT_TOOLS[@]}" scrape "$url" "$(printf '%040d' 0)" 0,0,0 1 2>&1); then
    fail "node accepted the self-signed certificate without NODE_EXTRA_CA_CERTS: $out"
fi
case "$out" in
*certificate*) say "without NODE_EXTRA_CA_CERTS node refuses the tracker: $out" ;;
*) fail "without NODE_EXTRA_CA_CERTS the scrape failed, but not on the certificate: $out" ;;
esac

export NODE_EXTRA_CA_CERTS="$WORK/tls/cert.pem"
wt_transfer wss "$url"

stop_bg tracker
say "passed in $((SECONDS - E2E_START))s"
