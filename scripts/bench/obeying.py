#!/usr/bin/env python3
"""A UDP (or HTTP, --protocol http) tracker offered 2x and 5x its capacity by clients
that obey it, with the adaptive interval off and on (documents/overload.md).

shoal_udp (shoal_http) runs in a cgroup capped at --tracker-quota of one CPU (so that one core of
load is enough to overload it), pinned to --tracker-cpus. First its capacity C is
measured: announces answered per second with a window of requests in flight. Then,
per overload factor f and per arm (adaptive interval off, on), shoal_udp_load_test
runs f x C x B obeying clients ([clients]: each announces, comes back after the
interval it was given, backs off as libtorrent does when unanswered), their first
announces spread over one base interval B, so they offer f x C announces a second at
the base interval. Time is scaled: B is --base-interval seconds (30: a 30-minute
interval at --time-scale 60), the tracker's longest interval 6 B (3 hours), the
clients' timeout and backoff divided by the scale alike.

Per run: the share of announces answered in time (before the client gave up on them:
a late answer is no answer) and the intervals given, per base interval;
announces unanswered (timed out); reply latency p50/p99/p99.9 after convergence (the
last --summarize base intervals); when the answered share first stayed at its target
(99% at 2x, 95% at 5x) to the end; and the interval's reversals (oscillation).

  sudo scripts/bench/obeying.py                       # 2x and 5x, off and on
  sudo scripts/bench/obeying.py --factors 2 --arms on --base-interval 20
  sudo scripts/bench/obeying.py --protocol http       # shoal_http, shoal_http_load_test

Needs root for the cgroup. Loopback only; every process started here is ended by PID.
"""

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HTTP_PROGRESS = re.compile(
    r"(\d+) s: requests ([\d.]+)/s, responses ([\d.]+)/s \(announce ([\d.]+), scrape [\d.]+, "
    r"failure ([\d.]+), HTTP error [\d.]+\).*?"
    r"(?:, ([\d.]+)/s timed out, ([\d.]+)/s in time, interval (\d+) s)?$")
PROGRESS = re.compile(
    r"(\d+) s: requests ([\d.]+)/s, replies ([\d.]+)/s \(connect [\d.]+, announce ([\d.]+), "
    r"scrape [\d.]+, error ([\d.]+)\).*?"
    r"(?:, ([\d.]+)/s timed out, ([\d.]+)/s in time, interval (\d+) s)?$")


def free_port(protocol="udp"):
    """A port below the ephemeral range (the HTTP load tester's hundreds of thousands
    of connections churn through that range) that nothing is bound to now."""
    kind = socket.SOCK_STREAM if protocol == "http" else socket.SOCK_DGRAM
    while True:
        port = random.randrange(20_000, 30_000)
        probe = socket.socket(socket.AF_INET, kind)
        try:
            probe.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            probe.close()


def tracker_toml(protocol, port, base, adaptive):
    http = f"min_announce_interval = {base // 2}\n" if protocol == "http" else ""
    per_ip = "max_connections_per_network = 0\n" if protocol == "http" else ""
    return f"""
socket_workers = 1
swarm_workers = 1
[network]
address_ipv4 = "127.0.0.1:{port}"
use_ipv6 = false
[protocol]
announce_interval = {base}
{http}max_peers = 30
default_peers = 30
[cleaning]
peer_timeout = {2 * base}
[capacity]
new_torrents_per_second = 0
[interval]
adaptive = {"true" if adaptive else "false"}
max = {6 * base}
[statistics]
interval = 0
[per_ip]
requests_per_second = 0
max_connections = 0
{per_ip}"""


def load_toml(protocol, port, duration, summarize, peers, torrents, clients="", network="", connections=256,
              keep_alive=False):
    if protocol == "http":
        return f"""
server_address = "127.0.0.1:{port}"
workers = 1
connections = {connections if clients else 64}
duration = {duration}
summarize_last = {summarize}
report_interval = 5
log_level = "info"
[network]
response_timeout_ms = 5000
keep_alive = {"true" if keep_alive else "false"}
[requests]
torrents = {torrents}
peers = {peers}
weight_scrape = 0
peers_wanted = 30
[clients]
{clients}
"""
    return f"""
server_address = "127.0.0.1:{port}"
workers = 1
duration = {duration}
summarize_last = {summarize}
report_interval = 5
log_level = "info"
[network]
sockets_per_worker = 8
recv_buffer_size = 16777216
{network}
[requests]
torrents = {torrents}
peers = {peers}
weight_connect = 0
weight_announce = 1
weight_scrape = 0
peers_wanted = 30
[clients]
{clients}
"""


class Run:
    def __init__(self, a, quota):
        self.a, self.quota = a, quota
        self.dir = tempfile.mkdtemp(prefix="shoal-obeying-")

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def go(self, adaptive, load_config, seconds):
        a = self.a
        port = free_port(a.protocol)
        tracker_config = self.write(
            "tracker.toml", tracker_toml(a.protocol, port, a.base_interval, adaptive))
        log = open(os.path.join(self.dir, "tracker.log"), "w")
        tracker = benchlib.start([os.path.join(a.shoal_dir, f"shoal_{a.protocol}"), "-c", tracker_config],
                                 a.tracker_cpus, log)
        try:
            self.quota.add(tracker.pid)
            time.sleep(1.0)
            if tracker.poll() is not None:
                log.flush()
                with open(os.path.join(self.dir, "tracker.log")) as f:
                    sys.exit(f"the tracker did not start:\n{f.read()[-2000:]}")
            load = self.write("load.toml", load_config(port))
            started = time.time()
            run = subprocess.run(
                ["taskset", "-c", a.load_cpus, os.path.join(a.shoal_dir, f"shoal_{a.protocol}_load_test"),
                 "-c", load, "--json"],
                capture_output=True, text=True, timeout=seconds + 120)
            if run.returncode != 0:
                sys.exit(f"load tester failed: {run.stderr[-2000:]}")
            elapsed = time.time() - started
        finally:
            benchlib.stop(tracker)
        summary = json.loads([l for l in run.stdout.splitlines() if l.startswith("{")][-1])
        series = []
        pattern = HTTP_PROGRESS if a.protocol == "http" else PROGRESS
        for line in run.stderr.splitlines():
            m = pattern.search(line)
            if m:
                series.append({
                    "second": int(m.group(1)),
                    "requests": float(m.group(2)),
                    "announces": float(m.group(4)),
                    "errors": float(m.group(5)),
                    "timeouts": float(m.group(6) or 0),
                    "in_time": float(m.group(7) or 0),
                    "interval": int(m.group(8) or 0),
                })
                # Over HTTP a client that waited for a connection until it gave up sent
                # no request: count clients' attempts (answered in time, or given up).
                last = series[-1]
                last["attempts"] = (last["in_time"] + last["timeouts"]) if a.protocol == "http" \
                    else last["requests"]
        if not series:
            sys.exit(f"no progress lines from the load tester: {run.stderr[-2000:]}")
        return summary, series, elapsed


def capacity(run, a):
    """Announces a second shoal_udp answers under the quota, a window in flight."""
    network = "" if a.protocol == "http" else "requests_in_flight = 256"
    summary, _, _ = run.go(False, lambda port: load_toml(
        a.protocol, port, 20, 10, 1_000_000, a.torrents, network=network, keep_alive=a.keep_alive), 20)
    return summary["announce_per_second"]


def analyse(series, base, target):
    """Per base interval: (answered share, last interval); when the share first stayed
    at `target` to the end (seconds); the interval's reversals after the first base
    interval."""
    windows = []
    per_window = max(1, base // 5)
    for i in range(0, len(series), per_window):
        chunk = series[i:i + per_window]
        sent = sum(s["attempts"] for s in chunk)
        answered = sum(s["in_time"] for s in chunk)
        windows.append((answered / sent if sent else 1.0, chunk[-1]["interval"]))
    converged = None
    for i in range(len(windows)):
        if all(share >= target for share, _ in windows[i:]):
            converged = i * base
            break
    intervals = [s["interval"] for s in series[per_window:] if s["interval"]]
    reversals, direction = 0, 0
    for x, y in zip(intervals, intervals[1:]):
        step = (y > x * 1.05) - (y < x * 0.95)
        if step and direction and step != direction:
            reversals += 1
        if step:
            direction = step
    return windows, converged, reversals


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", choices=["udp", "http"], default="udp")
    p.add_argument("--shoal-dir", default="target/release")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--tracker-quota", type=float, default=0.1,
                   help="share of one CPU (0.1 at least: the kernel enforces quotas of 1 ms or more per 10 ms)")
    p.add_argument("--base-interval", type=int, default=30)
    p.add_argument("--intervals", type=int, default=10, help="base intervals per run")
    p.add_argument("--summarize", type=int, default=4,
                   help="base intervals at the end whose latency is reported")
    p.add_argument("--factors", default="2,5")
    p.add_argument("--arms", default="off,on")
    p.add_argument("--torrents", type=int, default=100_000)
    p.add_argument("--capacity", type=float, default=0, help="skip measuring it")
    p.add_argument("--client-timeout", type=int, default=0,
                   help="seconds a client waits for an answer, not scaled (0: libtorrent's 15 s scaled,"
                        " at least 2 s; libtorrent waits 10 s for an HTTP tracker)")
    p.add_argument("--keep-alive", action="store_true",
                   help="HTTP: clients due reuse a connection (by default each announce has its own, as"
                        " libtorrent's do; the capacity is measured the same way)")
    p.add_argument("--connections", type=int, default=4096,
                   help="HTTP: the load tester's connections for obeying clients (a client due waits for"
                        " one, its timeout running: enough that the tracker, not the load tester, is the limit)")
    p.add_argument("--max-load", type=float, default=0.5)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    benchlib.require_binaries(a.shoal_dir, [f"shoal_{a.protocol}", f"shoal_{a.protocol}_load_test"],
                              f"cargo build --release -p shoal_{a.protocol} -p shoal_{a.protocol}_load_test")
    benchlib.require_idle(a.max_load, a.force)
    quota = benchlib.CpuQuota(a.tracker_quota, "shoal-obeying")
    run = Run(a, quota)
    base = a.base_interval
    c = a.capacity or capacity(run, a)
    print(f"capacity under a quota of {a.tracker_quota} CPU: {c:,.0f} announces/s", flush=True)
    scale = 1800 / base
    duration = a.intervals * base
    results = []
    for factor in [float(f) for f in a.factors.split(",")]:
        clients = int(factor * c * base)
        target = 0.99 if factor <= 2 else 0.95
        for arm in a.arms.split(","):
            adaptive = arm == "on"
            config = (f"count = {clients}\nspread = {base}\ntime_scale = {scale}\n"
                      f"timeout = {a.client_timeout}\n")
            summary, series, _ = run.go(adaptive, lambda port: load_toml(
                a.protocol, port, duration, a.summarize * base, clients, a.torrents,
                clients=config, connections=a.connections, keep_alive=a.keep_alive), duration)
            windows, converged, reversals = analyse(series, base, target)
            after = series[2 * max(1, base // 5):]
            sent = sum(s["attempts"] for s in after)
            answered = sum(s["in_time"] for s in after) / sent if sent else 0
            timeouts = sum(s["timeouts"] for s in after) / sent if sent else 0
            latency = summary.get("latency_us", {})
            result = {
                "factor": factor, "adaptive": adaptive, "clients": clients,
                "answered_after_2B": answered, "timed_out_after_2B": timeouts,
                "converged_s": converged, "reversals": reversals,
                "latency_us": {k: latency.get(k) for k in ("p50", "p99", "p999")},
                "windows": windows,
            }
            results.append(result)
            print(json.dumps(result), flush=True)
    print()
    print("| offered | adaptive | answered after 2 B | timed out after 2 B | converged (s) | "
          "interval reversals | latency p50 / p99 / p99.9 (last 4 B) | answered share @ interval, per B |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        lat = r["latency_us"]
        lat = " / ".join(f"{lat[k] / 1000:.1f} ms" if lat.get(k) is not None else "—"
                         for k in ("p50", "p99", "p999"))
        windows = " ".join(f"{share:.3f}@{interval}" for share, interval in r["windows"])
        conv = "never" if r["converged_s"] is None else str(r["converged_s"])
        print(f"| {r['factor']:g}x | {'on' if r['adaptive'] else 'off'} | {r['answered_after_2B']:.2%} "
              f"| {r['timed_out_after_2B']:.2%} | {conv} | {r['reversals']} | {lat} | {windows} |")


if __name__ == "__main__":
    main()
