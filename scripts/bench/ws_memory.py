#!/usr/bin/env python3
"""Memory of shoal_ws under the WebTorrent bench's load, for one or two builds.

Runs shoal_ws with ws_bench.py's tracker config (plain ws, one socket worker, limits
raised for the load tester) on --tracker-cpus, and shoal_ws_load_test with ws_bench's
load (--connections connections, --offers offers per announce) on --load-cpus, for
--duration seconds. Prints, per run: the tracker's RSS at the end of the load and its
peak (VmHWM), the bytes waiting to be written at the peak (the statistics line's
"outgoing bytes", a build that has it), and the load tester's messages per second.
With --baseline-dir, the two builds alternate, --rounds times each (both with this
build's config):

  scripts/bench/ws_memory.py --shoal-dir target/release --baseline-dir /tmp/before

With --after SECONDS, the tracker runs on that long after the load tester has closed
its connections, and the RSS then is printed too, with what the tracker logged about
giving freed memory back (`[memory] return_freed`). --return-freed both runs each
round with it on and with it off:

  scripts/bench/ws_memory.py --shoal-dir target/release --after 60 --return-freed both
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws_bench  # noqa: E402
from benchlib import require_idle, status_kib, wait_for_port  # noqa: E402


RETURNED = re.compile(r"gave freed memory back to the system: resident (\d+) MiB -> (\d+) MiB in (\d+) ms")


def run_once(bench, tracker, return_freed=None):
    a = bench.a
    port = bench.ports.next_free()
    # Both builds get the current build's config, so the baseline must take its keys.
    cmd = bench.tracker_cmd("shoal", False, port)
    if tracker == "shoal-before":
        cmd[0] = os.path.join(a.baseline_dir, "shoal_ws")
    with open(cmd[-1]) as f:
        config = f.read().replace("[statistics]\ninterval = 0", "[statistics]\ninterval = 1")
    if return_freed is not None:
        config += f"\n[memory]\nreturn_freed = {str(return_freed).lower()}\n"
    with open(cmd[-1], "w") as f:
        f.write(config)
    tracker_proc = subprocess.Popen(["taskset", "-c", bench.tracker_cpus] + cmd,
                                    stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port("127.0.0.1", port)
        load = subprocess.run(["taskset", "-c", bench.load_cpus] + bench.load_cmd("shoal", False, port, a.connections[0]),
                              capture_output=True, text=True, timeout=a.duration + 60)
        rss = status_kib(tracker_proc.pid, "VmRSS") / 1024
        peak = status_kib(tracker_proc.pid, "VmHWM") / 1024
        time.sleep(a.after)
        rss_after = status_kib(tracker_proc.pid, "VmRSS") / 1024
    finally:
        tracker_proc.terminate()
        log = tracker_proc.communicate(timeout=30)[1]
    waiting = [int(m) for m in re.findall(r"outgoing bytes (\d+)", log)]
    data = json.loads([line for line in load.stdout.splitlines() if line.startswith("{")][-1])
    returns = [f"{int(b)}→{int(c)} MiB, {int(ms)} ms" for b, c, ms in RETURNED.findall(log)]
    return {"rss": rss, "peak": peak, "waiting": max(waiting) / 2**20 if waiting else None,
            "responses": data["responses_per_second"], "rss_after": rss_after,
            "returns": "; ".join(returns) or "none"}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", required=True)
    p.add_argument("--baseline-dir", help="an earlier build, run as \"shoal-before\"")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--connections", type=int, default=10000)
    p.add_argument("--offers", type=int, default=5)
    p.add_argument("--in-flight", type=int, default=4)
    p.add_argument("--duration", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--port", type=int, default=24700)
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--force", action="store_true")
    p.add_argument("--after", type=int, default=0,
                   help="seconds the tracker runs on after the load, before its RSS is read again")
    p.add_argument("--return-freed", choices=["config", "on", "off", "both"], default="config",
                   help="[memory] return_freed for the runs (config: as the build prints it)")
    a = p.parse_args()
    # What ws_bench.Bench reads; only shoal_ws and its load tester run here.
    a.aquatic_dir, a.workers, a.swarm_workers, a.load_workers = None, 1, 0, 1
    a.connections, a.summarize, a.load_testers = [a.connections], min(10, a.duration), ["shoal"]
    require_idle(a.max_load, a.force)
    bench = ws_bench.Bench(a)
    os.makedirs(bench.path("tls"), exist_ok=True)
    settings = {"config": [None], "on": [True], "off": [False], "both": [True, False]}[a.return_freed]
    runs = [(t, r) for t in ["shoal"] + (["shoal-before"] if a.baseline_dir else []) for r in settings]
    print(f"{a.connections[0]} connections, {a.offers} offers per announce, {a.duration} s, plain ws\n")
    after = f" RSS {a.after} s later MiB | given back |" if a.after else ""
    print(f"| round | build | RSS at the end MiB | peak RSS MiB | most bytes waiting MiB | messages/s |{after}")
    print("|---|---|---|---|---|---|" + ("---|---|" if a.after else ""))
    for round_ in range(a.rounds):
        for tracker, return_freed in runs if round_ % 2 == 0 else runs[::-1]:
            r = run_once(bench, tracker, return_freed)
            waiting = "—" if r["waiting"] is None else f"{r['waiting']:.0f}"
            name = tracker if return_freed is None else f"{tracker}, return_freed = {str(return_freed).lower()}"
            later = f" {r['rss_after']:.0f} | {r['returns']} |" if a.after else ""
            print(f"| {round_ + 1} | {name} | {r['rss']:.0f} | {r['peak']:.0f} | {waiting} | "
                  f"{r['responses']:,.0f} |{later}", flush=True)
            time.sleep(1)


if __name__ == "__main__":
    main()
