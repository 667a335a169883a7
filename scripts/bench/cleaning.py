#!/usr/bin/env python3
"""Does cleaning a big map pause replies? shoal_udp (or with --protocol http,
shoal_http; with --protocol ws, shoal_ws) at --torrents torrents and --peers peers,
measured with cleaning passes back to back and with no cleaning at all.

For each case: a fresh tracker is filled by its load tester (announces only; UDP:
every peer once in sequence with a wide window; HTTP: random peers over 256
keep-alive connections, so about 1 − 1/e of --peers are distinct after --fill
seconds of as many announces), then loaded for --duration seconds with a narrow
window (UDP: --in-flight requests per socket × 8 sockets; HTTP: --in-flight × 8
connections, one request each), so that a reply's latency is the tracker's service
time and any stall, not queueing behind a saturated window. The load tester reports p50, p99, p99.9 and max of every reply in
the window.

WebTorrent peers leave their swarms with their connection, so shoal_ws is filled by
--ws-connections connections that stay open: each announces in each of its
--peers / --ws-connections torrents once, in turn, and then only holds its
connection (the load tester's `torrent_order = "sequential"` and
`requests_per_connection`). Once the tracker's statistics line counts the peers
(within --fill seconds), a second load tester measures over 8 connections with
--in-flight announces each, without offers.

Cases:

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
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import require_idle, start, status_kib, stop  # noqa: E402
import benchlib  # noqa: E402
import udp_bench  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", choices=["udp", "http", "ws"], default="udp")
    p.add_argument("--shoal-dir", default="target/release")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--port", type=int, default=3995)
    p.add_argument("--torrents", type=int, default=1_000_000)
    p.add_argument("--peers", type=int, default=10_000_000)
    p.add_argument("--fill", type=int, default=45,
                   help="seconds of announces that fill the tracker (ws: at most this long)")
    p.add_argument("--ws-connections", type=int, default=10_000,
                   help="connections that hold the peers of shoal_ws (each in peers / this many torrents)")
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

    def load_header(connections, duration, summarize):
        """The start of an HTTP or WebTorrent load tester's config that only announces,
        to torrents chosen uniformly; `connections` is its connection-count line."""
        return f"""
server_address = "127.0.0.1:{a.port}"
workers = 1
{connections}
duration = {duration}
summarize_last = {summarize}
report_interval = 5
log_level = "warn"
[requests]
torrents = {a.torrents}
popularity_shape = 0.0
weight_announce = 1
weight_scrape = 0
"""

    def load(name, duration, summarize, in_flight, sockets):
        if a.protocol == "udp":
            config = write(f"{name}.toml", udp_bench.announce_load_toml(
                a.port, duration, summarize, a.torrents, a.peers, sockets, in_flight))
        elif a.protocol == "ws":
            config = write(f"{name}.toml", ws_load_toml(duration, summarize, sockets, 10, in_flight, False))
        else:
            config = write(f"{name}.toml", load_header(f"connections = {in_flight * sockets}", duration, summarize)
                           + f"peers = {a.peers}\npeers_wanted = 30\n")
        with open(os.path.join(tmp, f"{name}.out"), "w") as out:
            proc = start([os.path.join(a.shoal_dir, f"shoal_{a.protocol}_load_test"), "-c", config, "--json"],
                         a.load_cpus, out)
            proc.wait()
        return benchlib.last_json(os.path.join(tmp, f"{name}.out"))

    def ws_load_toml(duration, summarize, connections, torrents_each, in_flight, fill):
        """A shoal_ws_load_test config that announces without offers; with `fill`,
        each connection announces in each of its torrents once and then stays open."""
        once = (f'torrent_order = "sequential"\nrequests_per_connection = {torrents_each}\n'
                if fill else "")
        return load_header(f"connections_per_worker = {connections}", duration, summarize) + f"""\
torrents_per_connection = {torrents_each}
offers_per_announce = 0
numwant = 0
answer_offers = false
in_flight = {in_flight}
{once}"""

    def ws_fill(tracker_log):
        """Starts the connections that hold shoal_ws's peers and waits until the
        tracker counts them; returns the load tester's process (still running)."""
        each = max(1, a.peers // a.ws_connections)
        config = write("fill.toml", ws_load_toml(a.fill + a.duration + 60, 0, a.ws_connections, each, 8, True))
        out = open(os.path.join(tmp, "fill.out"), "w")
        proc = start([os.path.join(a.shoal_dir, "shoal_ws_load_test"), "-c", config], a.load_cpus, out)
        wanted = 0.99 * each * a.ws_connections
        deadline = time.time() + a.fill
        while time.time() < deadline:
            time.sleep(1)
            counts = re.findall(r"peers (\d+)", open(tracker_log).read())
            if counts and int(counts[-1]) >= wanted:
                return proc, int(counts[-1])
            if proc.poll() is not None:
                break
        stop(proc)
        sys.exit(f"shoal_ws did not reach {wanted:,.0f} peers within --fill {a.fill} s; "
                 f"see {tracker_log} and {out.name}")

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
        # The previous case's tracker has exited, but the kernel may need a moment to
        # let its port go.
        for _ in range(50):
            if port_free(a.port):
                break
            time.sleep(0.2)
        else:
            sys.exit(f"port {a.port} is in use")
        sections = f"""
[cleaning]
interval = {interval}
peer_timeout = 7200
[capacity]
max_torrents = {a.torrents * 2}
max_peers = {a.peers * 2}
"""
        if a.protocol == "ws":
            # Connections far above the defaults, no per-connection request limit, an
            # idle timeout longer than the run, and a statistics line each second
            # (the fill waits for its peer count).
            config = write("tracker.toml", f"""
[network]
address_ipv4 = "127.0.0.1:{a.port}"
use_ipv6 = false
max_connections = 1000000
idle_timeout = 3600
[limits]
max_requests_per_second = 0
max_offer_bytes_per_second = 0
max_torrents_per_connection = {max(1000, a.peers // a.ws_connections)}
[statistics]
interval = 1
{sections.strip()}
""" + udp_bench.PER_IP + "max_connections_per_network = 0\n")
        else:
            # The HTTP tracker takes the same keys for these sections.
            config = write("tracker.toml", udp_bench.tracker_toml(a.port, sections))
        log_path = os.path.join(tmp, "tracker.log")
        log = open(log_path, "w")
        proc = start([os.path.join(a.shoal_dir, f"shoal_{a.protocol}"), "-c", config], a.tracker_cpus, log)
        holders = None
        try:
            wait_for_port()
            if a.protocol == "ws":
                holders, stored = ws_fill(log_path)
            else:
                fill = load("fill", a.fill, 0, 256 if a.protocol == "udp" else 32, 4 if a.protocol == "udp" else 8)
                announced = fill["announce_per_second"] * fill["seconds"]
                # UDP announces every peer once in sequence; HTTP picks peers at random.
                distinct = announced if a.protocol == "udp" else a.peers * (1 - math.exp(-announced / a.peers))
                stored = min(a.peers, round(distinct))
            rss = status_kib(proc.pid, "VmRSS") / 1024
            time.sleep(1)
            measured = load("measure", a.duration, a.duration - 2, a.in_flight, 8)
        finally:
            if holders is not None:
                stop(holders)
            stop(proc)
            log.close()
        latency = measured["latency_us"]
        results[case] = latency
        print(f"| {case} | ~{stored:,} | {rss:.0f} | {measured.get('replies_per_second', measured.get('responses_per_second', 0)):,.0f} | "
              f"{latency['p50']} / {latency['p99']} / {latency['p999']} / {latency['max']} |", flush=True)
    ratio = results["cleaning"]["p999"] / max(1, results["no cleaning"]["p999"])
    print(f"\np99.9 with cleaning / without: **{ratio:.2f}×** (target: within 2×)")


if __name__ == "__main__":
    main()
