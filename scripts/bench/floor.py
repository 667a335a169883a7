#!/usr/bin/env python3
"""shoal_udp against the floor: how much of the kernel's per-packet cost is left.

The floor (`shoal_udp_floor`) is the cheapest responder we know how to write: one
recvmmsg and one sendmmsg per batch of up to 64, fixed replies of a tracker's sizes,
no state. Each shoal_udp run is compared with the floor on the same socket, in the
same rounds, so that what differs is shoal's code and nothing else:

- "shoal" (shoal_udp as configured by default, an 8 MiB receive buffer, or
  --recv-buffer) against "floor-deep" (the floor with that receive buffer);
- "shoal-kernel-buffer" (shoal_udp with `socket_recv_buffer_size = 0`: the kernel's
  default, 208 KiB here) against "floor" (the floor as it comes, the same buffer).

The buffer matters only when a load sends faster than the responder answers, as
aquatic_udp_load_test does (open loop): a deep queue holds packets long enough for
them to go cold in the cache, and every responder pays for it per packet. Our load
tester keeps a window of requests in flight (4 sockets of 256, --in-flight to
change): with 8 MiB nearly all of them wait in the queue (p50 about 2 ms), with the
kernel's buffer the excess is dropped; the floor's CPU per reply is the same either
way.

Runs them in turn, round after round (each pair back to back, which of the two goes
first alternating), under shoal_udp_load_test
and, with --aquatic-dir, aquatic_udp_load_test, with the UDP bench's settings
(udp_bench.py). Prints per round and as medians: replies per second, CPU per reply,
and for each pair shoal's share of the floor's replies per second and its CPU per
reply over the floor's (1.05 means 5% more).

  scripts/bench/floor.py --rounds 3
  scripts/bench/floor.py --rounds 3 --aquatic-dir .bench/aquatic/bin
  scripts/bench/floor.py --rounds 3 --torrents 1000   # swarms that fit in the cache
  scripts/bench/floor.py --rounds 3 --load-testers shoal --in-flight 64   # a short queue
  scripts/bench/floor.py --rounds 3 --load-testers shoal --rate 300000   # a fixed load
  sudo scripts/bench/floor.py --rounds 3 --aquatic-dir .bench/aquatic/bin --tracker-quota 0.7
      # the tracker capped at 70% of its core, so that it, not the load tester, is the limit
  scripts/bench/floor.py --rounds 5 --floors-only \
      --floor-variant batch256="--batch 256" --floor-variant uring=--io-uring   # lower floors?
  scripts/bench/floor.py --rounds 7 --floors-only --load-testers shoal \
      --floor-variant may-fragment=--may-fragment   # what IP ids cost

Both load testers simulate --torrents torrents (1M by default, aquatic's default) and
twice as many peers. With 1M the swarms are far larger than the caches, so shoal pays
memory misses the stateless floor does not; with a few thousand they stay cached, and
what is left is the cost of shoal's own code. --one-by-one adds the old floor
(`shoal_udp_floor --one-by-one`: one recvfrom and one sendto per request).

shoal_udp runs as an operator would run it on one core: one socket worker keeping
its torrents itself (`swarm_workers = 0`, the default). --swarm-workers 1 adds a
swarm worker thread beside it, as the UDP bench (udp_bench.py) and the floor
documents before 2026-11-24 ran it.

--floor-variant NAME=ARGS (repeatable) adds a run of the floor with more options
(`shoal_udp_floor --help`: --batch N, --busy-poll, --io-uring, --recv-buffer BYTES,
--may-fragment)
to every round, compared with the plain floor as "floor+NAME / floor": what a
different way into the kernel would save any responder. --floors-only leaves shoal
out.

--shoal-variant NAME=DIR (repeatable) adds a run of DIR/shoal_udp to every round, set
up as "shoal-kernel-buffer" is and compared with the plain floor as
"shoal+NAME / floor": an experimental build (an upper bound, a change under test)
measured in the same rounds as the floor and the current build. Environment
variables reach every tracker, so a build may take its settings from them.

  scripts/bench/floor.py --rounds 4 --load-testers shoal --tracker-quota 0.7 \
      --shoal-variant bound=/tmp/bound-target/release
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import udp_bench  # noqa: E402
from benchlib import install_aquatic, require_binaries, require_idle  # noqa: E402

SHOAL_RECV_BUFFER = 8 * 1024 * 1024  # shoal_udp's default socket_recv_buffer_size


# (shoal run, the floor run on the same socket)
PAIRS = [("shoal", "floor-deep"), ("shoal-kernel-buffer", "floor")]


class Floor(udp_bench.Bench):
    def tracker_cmd(self, tracker, **options):
        if tracker.startswith("floor+"):
            return super().tracker_cmd("floor") + self.a.variants[tracker]
        if tracker.startswith("shoal+"):
            command = super().tracker_cmd("shoal", recv_buffer=0, **options)
            command[0] = os.path.join(self.a.shoal_variants[tracker], "shoal_udp")
            return command
        if tracker == "shoal-kernel-buffer":
            return super().tracker_cmd("shoal", recv_buffer=0, **options)
        if tracker == "floor-one-by-one":
            return super().tracker_cmd("floor") + ["--one-by-one"]
        if tracker == "floor-deep":
            size = self.a.recv_buffer or SHOAL_RECV_BUFFER
            return super().tracker_cmd("floor") + ["--recv-buffer", str(size)]
        return super().tracker_cmd(tracker, **options)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", default="target/release")
    p.add_argument("--aquatic-dir", help="directory with aquatic_udp_load_test, to load with it too "
                                         "(a DIR/bin is installed into with cargo install when missing)")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=20)
    p.add_argument("--summarize", type=int, default=10)
    p.add_argument("--torrents", type=int, default=1_000_000,
                   help="torrents both load testers simulate (peers: twice as many)")
    p.add_argument("--recv-buffer", type=int,
                   help="the \"shoal\" run's socket_recv_buffer_size in bytes, and floor-deep's "
                        "(default: shoal_udp's, 8 MiB)")
    p.add_argument("--in-flight", type=int,
                   help="requests each socket of our load tester keeps outstanding "
                        "(its default: 256, 4 sockets)")
    p.add_argument("--rate", type=int,
                   help="our load tester sends this many requests per second, whatever comes "
                        "back (open loop), instead of keeping windows full: compare CPU per "
                        "reply at a load both serve")
    p.add_argument("--one-by-one", action="store_true", help="run the one-by-one floor too")
    p.add_argument("--swarm-workers", type=int, default=0,
                   help="shoal_udp's swarm_workers (0: the socket worker keeps the torrents)")
    p.add_argument("--port", type=int, default=3999)
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--load-testers", default="shoal,aquatic",
                   help="which load testers to run, of shoal,aquatic (aquatic needs --aquatic-dir)")
    p.add_argument("--floor-variant", action="append", default=[], metavar="NAME=ARGS",
                   help="also run the floor with ARGS (e.g. batch256=\"--batch 256\"), "
                        "compared with the plain floor; repeatable")
    p.add_argument("--shoal-variant", action="append", default=[], metavar="NAME=DIR",
                   help="also run DIR/shoal_udp with the kernel's buffer, compared with the "
                        "plain floor; repeatable")
    p.add_argument("--kernel-pair-only", action="store_true",
                   help="leave out the 8 MiB pair (shoal, floor-deep): not like-for-like once "
                        "shoal shrinks an overflowing queue, and 40%% of a round's time")
    p.add_argument("--floors-only", action="store_true",
                   help="run only the floor and its --floor-variant runs, no shoal")
    p.add_argument("--tracker-quota", type=float, metavar="SHARE",
                   help="cap every tracker run (shoal and the floor alike) at this share of one "
                        "CPU through a cgroup (root): on a machine where the load tester has no "
                        "core to spare, it makes the tracker the limit of a run, so replies per "
                        "second decide (e.g. 0.7)")
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    a.variants = {}
    for spec in a.floor_variant:
        name, sep, args = spec.partition("=")
        if not sep or not name or not args.split():
            p.error(f"--floor-variant {spec!r}: expected NAME=ARGS")
        a.variants[f"floor+{name}"] = args.split()
    a.shoal_variants = {}
    for spec in a.shoal_variant:
        name, sep, directory = spec.partition("=")
        if not sep or not name or not directory:
            p.error(f"--shoal-variant {spec!r}: expected NAME=DIR")
        require_binaries(directory, ["shoal_udp"], f"build the variant's shoal_udp into {directory}")
        a.shoal_variants[f"shoal+{name}"] = directory
    if a.floors_only and a.shoal_variants:
        p.error("--floors-only runs no shoal: leave out --shoal-variant")
    if a.floors_only and not a.variants:
        p.error("--floors-only needs at least one --floor-variant")
    a.workers, a.load_workers = 0, 0
    a.opentracker, a.baseline_dir = None, None
    wanted = a.load_testers.split(",")
    unknown = set(wanted) - {"shoal", "aquatic"}
    if unknown:
        p.error(f"--load-testers: unknown {', '.join(sorted(unknown))}")
    if a.rate and "aquatic" in wanted:
        p.error("--rate drives our load tester only: add --load-testers shoal")
    # Every binary before the first round: one found missing after the runs under our
    # load tester would lose them.
    needed = ["shoal_udp_floor", "shoal_udp_load_test"] + ([] if a.floors_only else ["shoal_udp"])
    require_binaries(a.shoal_dir, needed,
                     "build them: cargo build --release -p shoal_udp -p shoal_udp_load_test")
    if "aquatic" in wanted and a.aquatic_dir:
        install_aquatic(a.aquatic_dir, ["aquatic_udp_load_test"])
    require_idle(a.max_load, a.force)
    bench = Floor(a)
    extra = list(a.variants) + list(a.shoal_variants)
    shoal_pairs = PAIRS[1:] if a.kernel_pair_only else PAIRS
    pairs = ([] if a.floors_only else shoal_pairs) + [(variant, "floor") for variant in extra]
    trackers = ["floor"] if a.floors_only else [t for pair in shoal_pairs for t in pair]
    trackers += (["floor-one-by-one"] if a.one_by_one else []) + extra
    loads = [load for load in ("shoal", "aquatic") if load in wanted and (load == "shoal" or a.aquatic_dir)]
    for load in loads:
        runs = {t: [] for t in trackers}
        print(f"\n{load}_udp_load_test:\n")
        pair_heads = "".join(f" | {shoal} / {floor} replies | {shoal} / {floor} CPU per reply"
                             for shoal, floor in pairs)
        print("| round | " + " | ".join(f"{t} replies/s (CPU µs/reply)" for t in trackers) + pair_heads + " |")
        print("|---|" + "---|" * (len(trackers) + 2 * len(pairs)))

        def ratios(pick):
            return [(pick(runs[shoal])["replies"] / pick(runs[floor])["replies"],
                     pick(runs[shoal])["cpu_per_reply_us"] / pick(runs[floor])["cpu_per_reply_us"])
                    for shoal, floor in pairs]

        for round_ in range(a.rounds):
            # The two runs of a pair go back to back, the floor first in every other
            # round: this VM's speed drifts over minutes, and a ratio of neighbours
            # drifts least.
            # (With variants the plain floor serves several pairs; it runs once.)
            order = [t for pair in pairs for t in (pair if round_ % 2 == 0 else pair[::-1])]
            order = list(dict.fromkeys(order + trackers))
            for tracker in order:
                runs[tracker].append(bench.run_once(tracker, load))
            cells = [f"{runs[t][-1]['replies']:,.0f} ({runs[t][-1]['cpu_per_reply_us']:.2f})" for t in trackers]
            pair_cells = "".join(f" | {r:.3f} | {c:.3f}" for r, c in ratios(lambda rs: rs[-1]))
            print(f"| {round_ + 1} | " + " | ".join(cells) + pair_cells + " |", flush=True)
        med = {t: (statistics.median(r["replies"] for r in rs), statistics.median(r["cpu_per_reply_us"] for r in rs))
               for t, rs in runs.items()}
        medians = []
        for shoal, floor in pairs:
            both = list(zip(runs[shoal], runs[floor]))
            medians.append((statistics.median(s["replies"] / f["replies"] for s, f in both),
                            statistics.median(s["cpu_per_reply_us"] / f["cpu_per_reply_us"] for s, f in both)))
        print("| median | " + " | ".join(f"{med[t][0]:,.0f} ({med[t][1]:.2f})" for t in trackers)
              + "".join(f" | **{r:.3f}** | **{c:.3f}**" for r, c in medians) + " |")
        busy = max(statistics.median(r["load_cores"] for r in rs) for rs in runs.values())
        tracker_busy = " ".join(f"{t} {statistics.median(r['tracker_cores'] for r in rs):.2f}"
                                for t, rs in runs.items())
        print(f"\ntracker cores (medians): {tracker_busy}")
        print(f"load tester cores (highest median): {busy:.2f}; reply latency (shoal load tester, "
              f"p50/p99/p99.9/max µs): " + "; ".join(
                  f"{t} {udp_bench.latency_cell(r['latency'] for r in runs[t])}" for t in trackers))


if __name__ == "__main__":
    main()
