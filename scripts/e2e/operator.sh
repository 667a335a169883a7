#!/usr/bin/env bash
# End-to-end: what an operator runs, checked with the operator's own tools.
#
# 1. The systemd units in packaging/systemd/ pass `systemd-analyze verify` (Debian's
#    systemd) without a single warning, with ExecStart= pointed at the built binary.
# 2. `shoal check-host` reports every check on this machine, exit status to match.
# 3. `shoal -p` prints a file that `shoal -c` accepts; `shoal -c` runs the UDP, HTTP
#    and WebTorrent trackers from it with the monitoring endpoint on; after traffic,
#    /metrics passes `promtool check metrics` (Debian's prometheus package) and its
#    counters moved; /stats.json and /health answer. The UDP tracker shares its swarms
#    through a real redis-server (`[udp.cluster]`), so the cluster series are checked
#    too.
#
# Needs: systemd (for systemd-analyze), prometheus (for promtool) and redis-server,
# installed here when missing and running as root.
source "$(dirname "$0")/lib/common.bash"
e2e_init operator

need_apt systemd prometheus redis-server
command -v systemd-analyze >/dev/null || fail "systemd-analyze is missing after installing systemd"
command -v promtool >/dev/null || fail "promtool is missing after installing prometheus"

shoal=$(tracker_bin shoal)

# --- 1. unit files ----------------------------------------------------------------
mkdir -p "$WORK/units"
for unit in "$REPO_ROOT"/packaging/systemd/*.service; do
    sed -e "s|^ExecStart=/usr/bin/\(shoal[a-z_]*\)|ExecStart=$(dirname "$shoal")/\1|" \
        "$unit" >"$WORK/units/$(basename "$unit")"
done
for bin in shoal_udp shoal_http shoal_ws; do tracker_bin "$bin" >/dev/null; done
(cd "$WORK/units" && systemd-analyze verify ./*.service) >"$WORK/verify.log" 2>&1 ||
    fail "systemd-analyze verify failed: $(cat "$WORK/verify.log")"
[ ! -s "$WORK/verify.log" ] || fail "systemd-analyze verify warned: $(cat "$WORK/verify.log")"
say "systemd-analyze verify: $(find "$WORK/units" -name '*.service' | wc -l) units clean"

# `shoal check-host` on this machine, with the packaged config: one line per check,
# the exit status 1 exactly when one says `tune`.
rc=0
"$shoal" check-host -c "$REPO_ROOT/packaging/shoal.toml" >"$WORK/check-host.txt" 2>&1 || rc=$?
for topic in cpus "udp buffer" conntrack "udp early demux" "http backend" "ws backend" "open files"; do
    grep -qE "^(ok  |tune)  $topic " "$WORK/check-host.txt" || fail "check-host has no '$topic' line: $(cat "$WORK/check-host.txt")"
done
if grep -q '^tune' "$WORK/check-host.txt"; then want=1; else want=0; fi
[ "$rc" -eq "$want" ] || fail "check-host exited $rc with $(grep -c '^tune' "$WORK/check-host.txt") 'tune' lines"
say "check-host: $(tail -n1 "$WORK/check-host.txt")"

# --- 2. one config, metrics -----------------------------------------------------------
start_redis
redis_port=$REDIS_PORT
"$shoal" -p >"$WORK/default.toml"
"$shoal" -c "$WORK/default.toml" -P >/dev/null || fail "shoal rejects its own -p output"
mkdir -p "$WORK/state"
# The printed defaults, edited as an operator would: loopback, free ports, metrics on,
# the UDP tracker's snapshots in $WORK/state.
python3 - "$WORK/default.toml" "$WORK/shoal.toml" "$redis_port" "$WORK/state" <<'PY'
import sys
text = open(sys.argv[1]).read()
# The first `store` is [udp.cluster]'s: the UDP tracker shares its swarms.
assert text.index('store = ""') > text.index("[udp.cluster]")
text = text.replace('store = ""', f'store = "127.0.0.1:{sys.argv[3]}"', 1)
state = text.index("[udp.state]")
at = text.index('directory = ""', state)
text = text[:at] + f'directory = "{sys.argv[4]}"' + text[at + len('directory = ""'):]
text = text.replace('address_ipv4 = "0.0.0.0:6969"', 'address_ipv4 = "127.0.0.1:0"')
text = text.replace('address_ipv4 = "0.0.0.0:8000"', 'address_ipv4 = "127.0.0.1:0"')
text = text.replace("use_ipv6 = true", "use_ipv6 = false")
text = text.replace('address = "127.0.0.1:9969"', 'address = "127.0.0.1:0"')
metrics = text.index("[metrics]")
at = text.index("enabled = false", metrics)
text = text[:at] + "enabled = true" + text[at + len("enabled = false"):]
open(sys.argv[2], "w").write(text)
PY
start_bg shoal "$shoal" -c "$WORK/shoal.toml"
for _ in $(seq 150); do
    grep -q "health on" "$WORK/shoal.log" && break
    running shoal || fail "shoal exited at start"
    sleep 0.1
done
grep -q "health on" "$WORK/shoal.log" || fail "no monitoring endpoint in the log within 15 s"
monitor=$(sed -n 's|.*health on http://\([0-9.:]*\)/.*|\1|p' "$WORK/shoal.log" | head -n1)
udp=$(sed -n 's|.*listening on udp://\([0-9.:]*\).*|\1|p' "$WORK/shoal.log" | head -n1)
http=$(sed -n 's|.*listening on http://\([0-9.:]*\)$|\1|p' "$WORK/shoal.log" | head -n1)
say "monitoring on $monitor; UDP on $udp; HTTP on $http"

python3 - "$monitor" "$udp" "$http" "$WORK" <<'PY'
import http.client, json, socket, struct, sys, time
monitor, udp, tracker, work = sys.argv[1:5]
def hostport(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)
def get(path):
    conn = http.client.HTTPConnection(*hostport(monitor), timeout=5)
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, response.read().decode()
# Traffic: UDP connects and an HTTP announce.
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
for tid in range(3):
    s.sendto(struct.pack(">QII", 0x41727101980, 0, tid), hostport(udp))
    s.recvfrom(64)
conn = http.client.HTTPConnection(*hostport(tracker), timeout=5)
conn.request("GET", "/announce?info_hash=" + "%AB" * 20 + "&peer_id=-E2E000-aaaaaaaaaaaa&port=6881&left=0&compact=1")
assert conn.getresponse().status == 200
deadline = time.time() + 5
while True:
    status, metrics = get("/metrics")
    assert status == 200, status
    if 'shoal_requests_total{protocol="udp",action="connect",ip_version="4"} 3' in metrics and \
            'shoal_requests_total{protocol="http",action="announce",ip_version="4"} 1' in metrics and \
            'shoal_request_duration_seconds_count{protocol="udp"} 3' in metrics and \
            'shoal_cluster_store_up{protocol="udp"} 1' in metrics:
        break
    if time.time() > deadline:
        sys.exit("counters did not move:\n" + metrics)
    time.sleep(0.05)
open(f"{work}/metrics.txt", "w").write(metrics)
status, body = get("/health")
assert (status, body) == (200, "ok\n"), (status, body)
status, body = get("/stats.json")
stats = json.loads(body)
assert [t["protocol"] for t in stats["trackers"]] == ["udp", "http", "ws"], stats
assert stats["trackers"][1]["peers"] == 1, stats
print(f"metrics moved: {len(metrics.splitlines())} lines; stats.json and health answer")
PY
promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.log" 2>&1 ||
    fail "promtool check metrics: $(cat "$WORK/promtool.log")"
say "promtool check metrics: clean"

# The Grafana dashboard's queries and the shipped alerting rules (valid PromQL, over
# series shoal exposes, their unit tests) are checked by crates/shoal/tests/metrics.rs
# against a shoal with every feature on (private mode's accounting, TLS, a cluster),
# which this one, the printed defaults, is not.

stop_bg shoal
stop_bg redis
say "passed in $((SECONDS - E2E_START))s"
