#!/usr/bin/env bash
# End-to-end: one WebTorrent swarm over two shoal_ws nodes that share it through a real
# redis-server ([cluster], documents/scale-out.md "WebTorrent across nodes"). The
# seeder (webtorrent on Node, WebRTC from @roamhq/wrtc) knows only node A, the
# leecher only node B (two .torrent files of the same file, each naming one node):
# the leecher's offer reaches the seeder through node B, Redis and node A, the
# seeder's answer comes back the other way, and the file moves over WebRTC. Every
# step is scraped on both nodes (lib/webtorrent.bash, wt_transfer). Node B's /metrics
# must then show the messages relayed and received, and pass `promtool check metrics`.
#
# Everything runs in a private network namespace with only lo (see ws.sh).
#
# Needs: node and npm, redis-server and prometheus (for promtool), installed when
# missing and running as root.
source "$(dirname "$0")/lib/common.bash"
source "$E2E_DIR/lib/webtorrent.bash"
e2e_init ws_cluster

if [ -z "${SHOAL_E2E_IN_NETNS:-}" ]; then
    # Outside: install and build (the namespace has no network), then run again inside.
    webtorrent_deps
    need_apt redis-server prometheus
    tracker_bin shoal_ws >/dev/null
    rerun_in_private_netns "$E2E_DIR/$(basename "$0")"
fi
netns_loopback_up

start_redis
redis_port=$REDIS_PORT

ws_bin=$(tracker_bin shoal_ws)
declare -A PORT METRICS_PORT
for node in a b; do
    PORT[$node]=$(free_port)
    METRICS_PORT[$node]=$(free_port)
    # Node A keeps its torrents in its socket worker, node B in a swarm worker: both
    # ways of holding a shard relay.
    swarm_workers=$([ "$node" = a ] && echo 0 || echo 1)
    cat >"$WORK/node-$node.toml" <<TOML
swarm_workers = $swarm_workers
[logging]
level = "info"
[network]
address_ipv4 = "127.0.0.1:${PORT[$node]}"
use_ipv6 = false
[statistics]
interval = 0
[metrics]
enabled = true
address = "127.0.0.1:${METRICS_PORT[$node]}"
[cluster]
store = "127.0.0.1:$redis_port"
node = "$node"
publish_interval_ms = 50
TOML
    "$ws_bin" -c "$WORK/node-$node.toml" -P >"$WORK/node-$node-config.txt" 2>&1 ||
        { cat "$WORK/node-$node-config.txt" >&2; fail "shoal_ws rejected node-$node.toml"; }
    start_bg "node-$node" "$ws_bin" -c "$WORK/node-$node.toml"
done
for node in a b; do
    deadline=$((SECONDS + 15))
    until grep -q "sharing swarms as node \"$node\"" "$WORK/node-$node.log" &&
        grep -q 'listening on' "$WORK/node-$node.log"; do
        running "node-$node" || fail "node $node exited at start"
        [ "$SECONDS" -lt "$deadline" ] || fail "node $node did not start within 15 s"
        sleep 0.1
    done
done
say "nodes a (ws://127.0.0.1:${PORT[a]}) and b (ws://127.0.0.1:${PORT[b]}) share swarms"

WT_TRACKER_PROCS="node-a node-b" wt_transfer cluster \
    "ws://127.0.0.1:${PORT[a]}/announce" "ws://127.0.0.1:${PORT[b]}/announce"

say "--- node b's metrics"
"$SYS_PYTHON" - "${METRICS_PORT[b]}" "$WORK/metrics.txt" <<'PY' || fail "node b's metrics show no relay"
import http.client, re, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
conn.request("GET", "/metrics")
metrics = conn.getresponse().read().decode()
open(sys.argv[2], "w").write(metrics)
def value(name, labels=""):
    match = re.search(rf'^{name}{{protocol="ws"{labels}}} (\S+)$', metrics, re.M)
    return float(match.group(1)) if match else None
sent = value("shoal_cluster_relayed_messages_total", ',direction="sent"')
received = value("shoal_cluster_relayed_messages_total", ',direction="received"')
applied = value("shoal_cluster_applied_peers_total")
up = value("shoal_cluster_store_up")
print(f"relayed {sent:.0f} offers and answers to node a, received {received:.0f}, "
      f"{applied:.0f} peer changes applied, store up {up:.0f}")
assert sent >= 1 and received >= 1 and applied >= 1 and up == 1
PY
promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.log" 2>&1 ||
    fail "promtool check metrics: $(cat "$WORK/promtool.log")"
say "promtool check metrics: clean"

stop_bg node-a
stop_bg node-b
stop_bg redis
say "passed in $((SECONDS - E2E_START))s"
