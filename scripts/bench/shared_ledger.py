#!/usr/bin/env python3
"""What private mode's accounting costs in a cluster (documents/private.md, "In a
cluster"): reports per second one accounting thread applies to a real redis-server as
compare-and-replace transactions of 4,096 reports, Redis CPU and bytes per report, and
the same with 2 nodes racing through the same reports (every pair contended), with a
check that the bytes credited over all nodes are those reported, once.

  scripts/bench/shared_ledger.py [--reports 400000] [--pairs 100000] [--redis-cpu 0]
      [--client-cpu 1] [--force]

Builds crates/worker/examples/shared_ledger_rate.rs in release mode first.
"""

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from redislib import Redis  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=400_000)
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--redis-cpu", default="0")
    parser.add_argument("--client-cpu", default="1")
    parser.add_argument("--force", action="store_true", help="run on a busy machine")
    args = parser.parse_args()
    benchlib.require_idle(0.5, args.force)
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "shoal_worker",
                    "--example", "shared_ledger_rate"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    example = os.path.join(target, "release", "examples", "shared_ledger_rate")
    for nodes in (1, 2):
        redis = Redis(args.redis_cpu)
        try:
            before = redis.info()
            run = subprocess.run(
                ["taskset", "-c", args.client_cpu, example, redis.address,
                 str(args.reports), str(args.pairs), str(nodes)],
                capture_output=True, text=True, check=False)
            after = redis.info()
        finally:
            redis.stop()
        print(run.stdout, end="")
        if run.returncode != 0:
            sys.exit(f"shared_ledger_rate failed: {run.stderr}")
        applied = args.reports * nodes
        cpu_us = (after["cpu"] - before["cpu"]) * 1e6 / applied
        bytes_in = (after["bytes_in"] - before["bytes_in"]) / applied
        bytes_out = (after["bytes_out"] - before["bytes_out"]) / applied
        memory = (after["memory"] - before["memory"]) / args.pairs
        rate = re.search(r"all nodes: (\d+) reports/s", run.stdout).group(1)
        print(f"nodes {nodes}: {rate} reports/s applied; redis CPU {cpu_us:.2f} us, "
              f"in {bytes_in:.0f} B, out {bytes_out:.0f} B per report; "
              f"{memory:.0f} B of redis memory per pair")


if __name__ == "__main__":
    main()
