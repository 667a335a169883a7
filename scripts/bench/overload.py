#!/usr/bin/env python3
"""shoal_udp under a flood it cannot serve: its receive queue shrunk or left deep.

Our load tester sends at a fixed rate above what one socket worker answers (open
loop, --rate), so the tracker's receive queue overflows for the whole run. shoal_udp
runs with its default 8 MiB buffer once with `network.overload_recv_buffer_size` at
each size given (0: never shrink, the behaviour before it existed), the runs
alternating round by round. Prints per run and as medians: replies per second, CPU
per reply, the replies' latency as the load tester saw it (p50/p99/p99.9/max), and
whether the tracker shrank its queue (its log).

  scripts/bench/overload.py --rounds 3
  scripts/bench/overload.py --rounds 3 --sizes 0,1048576,2097152 --rate 900000

Loopback only, bounded: each run lasts --duration seconds.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import udp_bench  # noqa: E402
from benchlib import require_binaries, require_idle  # noqa: E402

SHRINK_LOG = "the receive queue has overflowed"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", default="target/release")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=20)
    p.add_argument("--summarize", type=int, default=10)
    p.add_argument("--torrents", type=int, default=1_000_000)
    p.add_argument("--rate", type=int, default=800_000,
                   help="requests per second our load tester sends, whatever comes back; "
                        "above what the tracker answers (about 550,000 on one core here)")
    p.add_argument("--sizes", default="0,1048576",
                   help="overload_recv_buffer_size of each arm, in bytes (0: never shrink)")
    p.add_argument("--port", type=int, default=3999)
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    sizes = [int(size) for size in a.sizes.split(",")]
    a.workers, a.load_workers, a.swarm_workers = 0, 0, 0
    a.recv_buffer, a.in_flight = None, None
    a.opentracker, a.baseline_dir, a.aquatic_dir = None, None, None
    require_binaries(a.shoal_dir, ["shoal_udp", "shoal_udp_load_test"],
                     "build them: cargo build --release -p shoal_udp -p shoal_udp_load_test")
    require_idle(a.max_load, a.force)
    bench = udp_bench.Bench(a)
    runs = {size: [] for size in sizes}
    print("| round | overload_recv_buffer_size | replies/s | CPU µs/reply | latency p50 / p99 / p99.9 / max µs | shrunk |")
    print("|---|---|---|---|---|---|")
    for round_ in range(a.rounds):
        for size in sizes if round_ % 2 == 0 else sizes[::-1]:
            a.shoal_network = f"overload_recv_buffer_size = {size}\n"
            run = bench.run_once("shoal", "shoal")
            with open(bench.path("shoal.log")) as log:
                run["shrunk"] = SHRINK_LOG in log.read()
            runs[size].append(run)
            latency = " / ".join(f"{v:,}" for v in run["latency"]) if run["latency"] else "—"
            print(f"| {round_ + 1} | {size:,} | {run['replies']:,.0f} | {run['cpu_per_reply_us']:.2f} "
                  f"| {latency} | {'yes' if run['shrunk'] else 'no'} |", flush=True)
    print()
    base = sizes[0]
    for size in sizes:
        rs = runs[size]
        replies = statistics.median(r["replies"] for r in rs)
        cpu = statistics.median(r["cpu_per_reply_us"] for r in rs)
        line = f"overload_recv_buffer_size {size:,}: median {replies:,.0f} replies/s, {cpu:.2f} µs/reply"
        if all(r["latency"] for r in rs):
            medians = [statistics.median(r["latency"][i] for r in rs) for i in range(4)]
            line += ", latency " + " / ".join(f"{v:,.0f}" for v in medians) + " µs"
        if size != base:
            paired = list(zip(rs, runs[base]))
            line += (f"; against {base:,}: replies {statistics.median(x['replies'] / y['replies'] for x, y in paired):.3f}x"
                     f", CPU per reply {statistics.median(x['cpu_per_reply_us'] / y['cpu_per_reply_us'] for x, y in paired):.3f}x")
        print(line)


if __name__ == "__main__":
    main()
