#!/usr/bin/env python3
"""Memory per idle WebTorrent connection: shoal_ws against aquatic_ws, ws and wss, in
one run.

Each tracker (one socket worker, ws_bench.py's config) is started alone; --warmup
connections are opened and announce once, then the resident memory is read; then
--connections more are opened, each announcing once in a torrent of 100 peers (a
browser's connection after its first announce), and the memory is read again once
the tracker is quiet. The difference divided by the connections is what one idle
connection costs in user space, with its peer (the kernel's socket buffers are not in
a process's RSS). The tracker's glommio executor locks memory it maps, and an
allocator keeps freed pages: both are the same before and after, and so cancel.

  scripts/bench/ws_idle_memory.py [--connections 3000] [--trackers shoal,aquatic]
                                  [--modes ws,wss] [--rounds 2]
  scripts/bench/ws_idle_memory.py --trackers shoal,shoal-before,aquatic --baseline-dir /tmp/before
"""

import argparse
import os
import resource
import socket
import ssl
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import ws_bench  # noqa: E402
from ws_relay import WebSocket, chars  # noqa: E402


def rss_kib(pid):
    return benchlib.status_kib(pid, "VmRSS")


def settle(pid, quiet_for=1.0, limit=15.0):
    """Waits until the process's RSS stops moving (and its CPU with it)."""
    deadline = time.time() + limit
    last = (rss_kib(pid), benchlib.cpu_seconds(pid))
    while time.time() < deadline:
        time.sleep(quiet_for)
        now = (rss_kib(pid), benchlib.cpu_seconds(pid))
        if now == last:
            break
        last = now
    return last[0]


def open_connections(port, tls, count, first):
    sockets = []
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    for n in range(first, first + count):
        ws = WebSocket(port, wrap=(lambda sock: context.wrap_socket(sock, server_hostname="localhost"))
                       if tls else None)
        ws.send({"action": "announce", "info_hash": chars(f"torrent{n // 100}"),
                 "peer_id": chars(f"peer{n}"), "uploaded": 0, "downloaded": 0,
                 "left": 1, "numwant": 0, "event": "started"})
        ws.receive()
        sockets.append(ws)
    return sockets


def measure(bench, tracker, tls, args):
    port = bench.ports.next_free()
    log = open(bench.path(f"{tracker}-idle.log"), "w")
    proc = benchlib.start(bench.tracker_cmd(tracker, tls, port), bench.tracker_cpus, log)
    held = []
    try:
        benchlib.wait_for_port("127.0.0.1", port)
        held += open_connections(port, tls, args.warmup, 0)
        before = settle(proc.pid)
        held += open_connections(port, tls, args.connections, args.warmup)
        after = settle(proc.pid)
        alive = proc.poll() is None
        return (after - before) / args.connections if alive else float("nan")
    finally:
        for ws in held:
            ws.sock.close()
        benchlib.stop(proc)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--trackers", default="shoal,aquatic")
    p.add_argument("--modes", default="ws,wss")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--client-cpus", default="1")
    p.add_argument("--shoal-dir", default="target/release")
    p.add_argument("--aquatic-dir", default=".bench/aquatic/bin")
    p.add_argument("--baseline-dir", help="an earlier build, run as the tracker \"shoal-before\"")
    p.add_argument("--port", type=int, default=24900)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    benchlib.require_idle(0.7, a.force)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < a.connections + a.warmup + 100:
        sys.exit(f"the open-file limit ({hard}) is below the connections")
    os.sched_setaffinity(0, benchlib.cpu_list(a.client_cpus))
    bench = ws_bench.Bench(types.SimpleNamespace(
        tracker_cpus=a.tracker_cpus, load_cpus=a.client_cpus, workers=1, load_workers=1,
        port=a.port, handshakes=None, swarm_workers=0, shoal_network=[],
        baseline_same_config=True, shoal_dir=a.shoal_dir, aquatic_dir=a.aquatic_dir,
        baseline_dir=a.baseline_dir, queue_budget="bench"))
    results = {}
    for _ in range(a.rounds):
        for mode in a.modes.split(","):
            for tracker in a.trackers.split(","):
                kib = measure(bench, tracker, mode == "wss", a)
                results.setdefault((tracker, mode), []).append(kib)
                print(f"{tracker} {mode}: {kib:.2f} KiB per idle connection", file=sys.stderr)
    print("| tracker | mode | KiB per idle connection (rounds) | median |")
    print("|---|---|---|---|")
    for (tracker, mode), values in results.items():
        cells = ", ".join(f"{v:.2f}" for v in values)
        print(f"| {tracker} | {mode} | {cells} | {statistics.median(values):.2f} |")
    for mode in a.modes.split(","):
        if ("shoal", mode) in results and ("aquatic", mode) in results:
            ratio = statistics.median(results[("shoal", mode)]) / statistics.median(
                results[("aquatic", mode)])
            print(f"\n{mode}: shoal / aquatic = {ratio:.2f}")


if __name__ == "__main__":
    main()
