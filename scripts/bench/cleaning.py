#!/usr/bin/env python3
"""Does cleaning a big map pause replies? shoal_udp (or with --protocol http,
shoal_http) at --torrents torrents and --peers peers, measured with cleaning passes
back to back and with no cleaning at all.

For each case: a fresh tracker is filled by its load tester (announces only; UDP:
every peer once in sequence with a wide window; HTTP: random peers over 256
keep-alive connections, so about 1 − 1/e of --peers are distinct after --fill
seconds of as many announces), then loaded for --duration seconds with a narrow
window (UDP: --in-flight requests per socket × 8 sockets; HTTP: --in-flight × 8
connections, one request each), so that a reply's latency is the tracker's service
time and any stall, not queueing behind a saturated window. The load tester reports p50, p99, p99.9 and max of every reply in
the window. Cases:

- "cleaning": `[cleaning] interval = 1`: a pass starts every second (the passes walk
  every torrent and peer, a 100 µs slice at a time, but remove nothing: peer_timeout is
  two hours);
- "no cleaning": `[cleaning] interval = 86400`: no pass during the run.

Issue 15's target: p99.9 with cleaning within 2× of p99.9 without. Tracker on
--tracker-cpus, load on --load-cpus; loopback only; every process started here and
ended by PID.
"""
import argparse
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import require_idle, start, status_kib, stop  # noqa: E402
import benchlib  # noqa: E402
import udp_bench  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", choices=["udp", "http"], default="udp")
    p.add_argument("--shoal-dir", default="target/release")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--port", type=int, default=3995)
    p.add_argument("--torrents", type=int, default=1_000_000)
    p.add_argument("--peers", type=int, default=10_000_000)
    p.add_argument("--fill", type=int, default=45, help="seconds of announces that fill the tracker")
    p.add_argument("--duration", type=int, default=20)
    p.add_argument("--in-flight", type=int, default=2, help="requests in flight per socket while measuring")
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    require_idle(a.max_load, a.force)
    tmp = tempfile.mkdtemp(prefix="shoal-cleaning-bench-")

    def write(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def load(name, duration, summarize, in_flight, sockets):
        if a.protocol == "udp":
            config = write(f"{name}.toml", udp_bench.announce_load_toml(
                a.port, duration, summarize, a.torrents, a.peers, sockets, in_flight))
        else:
            config = write(f"{name}.toml", f"""
server_address = "127.0.0.1:{a.port}"
workers = 1
connections = {in_flight * sockets}
duration = {duration}
summarize_last = {summarize}
report_interval = 5
log_level = "warn"
[requests]
torrents = {a.torrents}
peers = {a.peers}
popularity_shape = 0.0
peers_wanted = 30
weight_announce = 1
weight_scrape = 0
""")
        with open(os.path.join(tmp, f"{name}.out"), "w") as out:
            proc = start([os.path.join(a.shoal_dir, f"shoal_{a.protocol}_load_test"), "-c", config, "--json"],
                         a.load_cpus, out)
            proc.wait()
        return benchlib.last_json(os.path.join(tmp, f"{name}.out"))

    port_free = udp_bench.port_free if a.protocol == "udp" else benchlib.port_free

    def wait_for_port():
        if a.protocol == "udp":
            udp_bench.wait_for_port(a.port)
        else:
            benchlib.wait_for_port("127.0.0.1", a.port)

    print(f"shoal_{a.protocol}, {a.torrents:,} torrents, {a.peers:,} peers; measured with {a.in_flight} "
          f"requests in flight on each of 8 {'sockets' if a.protocol == 'udp' else 'connections'} "
          f"for {a.duration} s\n")
    print("| case | peers stored | RSS MiB | replies/s | latency µs p50 / p99 / p99.9 / max |")
    print("|---|---|---|---|---|")
    results = {}
    for case, interval in [("cleaning", 1), ("no cleaning", 86400)]:
        if not port_free(a.port):
            sys.exit(f"port {a.port} is in use")
        # The HTTP tracker takes the same keys for these sections.
        config = write("tracker.toml", udp_bench.tracker_toml(a.port, f"""
[cleaning]
interval = {interval}
peer_timeout = 7200
[capacity]
max_torrents = {a.torrents * 2}
max_peers = {a.peers * 2}
"""))
        log = open(os.path.join(tmp, "tracker.log"), "w")
        proc = start([os.path.join(a.shoal_dir, f"shoal_{a.protocol}"), "-c", config], a.tracker_cpus, log)
        try:
            wait_for_port()
            fill = load("fill", a.fill, 0, 256 if a.protocol == "udp" else 32, 4 if a.protocol == "udp" else 8)
            rss = status_kib(proc.pid, "VmRSS") / 1024
            time.sleep(1)
            measured = load("measure", a.duration, a.duration - 2, a.in_flight, 8)
        finally:
            stop(proc)
            log.close()
        latency = measured["latency_us"]
        results[case] = latency
        announced = fill["announce_per_second"] * fill["seconds"]
        # UDP announces every peer once in sequence; HTTP picks peers at random.
        distinct = announced if a.protocol == "udp" else a.peers * (1 - math.exp(-announced / a.peers))
        stored = min(a.peers, round(distinct))
        print(f"| {case} | ~{stored:,} | {rss:.0f} | {measured.get('replies_per_second', measured.get('responses_per_second', 0)):,.0f} | "
              f"{latency['p50']} / {latency['p99']} / {latency['p999']} / {latency['max']} |", flush=True)
    ratio = results["cleaning"]["p999"] / max(1, results["no cleaning"]["p999"])
    print(f"\np99.9 with cleaning / without: **{ratio:.2f}×** (target: within 2×)")


if __name__ == "__main__":
    main()
