#!/usr/bin/env python3
"""Measures one change to a tracker: two builds of shoal side by side.

Runs the tracker in --shoal-dir ("shoal") and the one in --baseline-dir
("shoal-before") in alternating order, round after round, under shoal's own load
tester with the settings of the protocol's bench (udp_bench.py or http_bench.py:
tracker on --tracker-cpus, load on --load-cpus, per-client limits raised for the load
tester in both; HTTP plain with keep-alive unless --tls / --no-keep-alive), and
prints each round's replies per second and CPU per reply with the ratio, and the
medians.

For the effect of a change rather than a comparison with other trackers: the full
benches (scripts/bench/udp.sh, http.sh) also run aquatic, the floor responder, nginx.

Build the baseline from the commit before the change, e.g.
  git worktree add /tmp/before HEAD~1 && (cd /tmp/before &&
    CARGO_TARGET_DIR=/tmp/before-target cargo build --release --locked -p shoal_udp)
  scripts/bench/before_after.py --shoal-dir target/release \\
    --baseline-dir /tmp/before-target/release
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_bench  # noqa: E402
import udp_bench  # noqa: E402
from benchlib import require_idle  # noqa: E402


def same_config(command, tracker):
    """Both builds get the same config, per-client limits included."""
    if tracker == "shoal-before":
        with open(command[-1], "a") as config:
            config.write(udp_bench.PER_IP)
    return command


class Udp(udp_bench.Bench):
    def tracker_cmd(self, tracker, **options):
        return same_config(super().tracker_cmd(tracker, **options), tracker)

    def measure(self, tracker):
        r = self.run_once(tracker, "shoal")
        return r["replies"], r["cpu_per_reply_us"]


class Http(http_bench.Bench):
    def tracker_cmd(self, tracker, tls, keep_alive):
        return same_config(super().tracker_cmd(tracker, tls, keep_alive), tracker)

    def measure(self, tracker):
        r = self.run_once(tracker, "shoal", self.a.tls, not self.a.no_keep_alive)
        return r["responses"], r["cpu_us"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", choices=["udp", "http"], default="udp")
    p.add_argument("--tls", action="store_true", help="HTTP over TLS")
    p.add_argument("--no-keep-alive", action="store_true", help="HTTP: a new connection per request")
    p.add_argument("--connections", type=int, default=64, help="HTTP connections")
    p.add_argument("--shoal-dir", required=True)
    p.add_argument("--baseline-dir", required=True)
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration", type=int, default=15)
    p.add_argument("--summarize", type=int, default=8)
    p.add_argument("--port", type=int, default=0, help="default: the protocol bench's")
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    a.workers, a.load_workers = 0, 0
    a.swarm_workers = None if a.protocol == "udp" else 0
    a.aquatic_dir, a.opentracker = None, None
    a.port = a.port or (3999 if a.protocol == "udp" else 23000)
    require_idle(a.max_load, a.force)
    bench = Udp(a) if a.protocol == "udp" else Http(a)
    runs = {"shoal": [], "shoal-before": []}
    print("| round | shoal replies/s | shoal-before | ratio | CPU/reply µs (shoal, before) |")
    print("|---|---|---|---|---|")
    for round_ in range(a.rounds):
        order = ["shoal", "shoal-before"] if round_ % 2 == 0 else ["shoal-before", "shoal"]
        for tracker in order:
            runs[tracker].append(bench.measure(tracker))
        (new, new_cpu), (old, old_cpu) = runs["shoal"][-1], runs["shoal-before"][-1]
        print(f"| {round_ + 1} | {new:,.0f} | {old:,.0f} | {new / old:.3f}× | "
              f"{new_cpu:.2f}, {old_cpu:.2f} |", flush=True)
    median = {t: statistics.median(r[0] for r in rs) for t, rs in runs.items()}
    cpu = {t: statistics.median(r[1] for r in rs) for t, rs in runs.items()}
    print(f"| median | {median['shoal']:,.0f} | {median['shoal-before']:,.0f} | "
          f"{median['shoal'] / median['shoal-before']:.3f}× | {cpu['shoal']:.2f}, {cpu['shoal-before']:.2f} |")


if __name__ == "__main__":
    main()
