#!/usr/bin/env python3
"""Private mode against public mode: one shoal_udp build, the same load, side by side.

Runs shoal_udp public ("public") and in private mode ("private": `[private]` with a
users file of --users users and a torrents file listing every torrent of the load)
in alternating order, round after round, under shoal's own load tester pinned as
udp_bench.py pins it. Both get the same datagrams: every announce carries a user's
passkey in BEP 41 URL data (`passkeys` in the load tester; a public tracker ignores
the URL data), so the difference is the tracker's work: finding the key, hashing it,
two lookups, and (with --accounting) handing a report to the accounting thread. The
load only announces (connection ids are reused), the path private mode changes.

Prints each round's replies per second and CPU per reply with the ratio, the accounting
reports the private tracker dropped for a full queue (work it skipped), the medians,
and the resident memory of each tracker after loading (the users and torrents it holds).

  cargo build --release --locked -p shoal_udp -p shoal_udp_load_test
  scripts/bench/private.py --shoal-dir target/release --users 1000000 --torrents 1000000
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import udp_bench  # noqa: E402
from benchlib import require_idle  # noqa: E402


class Private(udp_bench.Bench):
    def tracker_cmd(self, tracker, **options):
        command = super().tracker_cmd("shoal", **options)
        if tracker == "private":
            with open(command[-1], "a") as config:
                config.write(self.private_section)
        return command

    def load_cmd(self, load, duration, summarize, memory=False):
        command = super().load_cmd(load, duration, summarize, memory)
        with open(command[2]) as config:
            text = config.read()
        # Announces only (the load tester connects once per socket and reuses the
        # ids), with the passkeys; the config ends with its [requests] section.
        for key, value in [("weight_connect", 0), ("weight_announce", 1), ("weight_scrape", 0)]:
            text = "\n".join(f"{key} = {value}" if line.startswith(f"{key} =") else line
                             for line in text.splitlines()) + "\n"
        with open(command[2], "w") as config:
            config.write(text + f"passkeys = {self.a.users}\n")
        return command

    def prepare(self):
        """Writes the users file (user i's key: i as 32 hex digits, as the load
        tester sends it) and the torrents file (every torrent of the load)."""
        import subprocess
        users = self.path("users.txt")
        with open(users, "w") as f:
            for i in range(self.a.users):
                f.write(f"{i} {i:032x}\n")
        load_config = self.load_cmd("shoal", 1, 0)[2]
        hashes = subprocess.run([os.path.join(self.a.shoal_dir, "shoal_udp_load_test"), "-c", load_config,
                                 "--print-info-hashes"], capture_output=True, text=True, check=True).stdout.split()
        torrents = self.path("torrents.txt")
        with open(torrents, "w") as f:
            for i, info_hash in enumerate(hashes):
                f.write(f"{info_hash} {i}\n")
        section = f'[private]\nenabled = true\nusers_path = "{users}"\ntorrents_path = "{torrents}"\n'
        if self.a.accounting:
            export = self.path("export")
            os.makedirs(export, exist_ok=True)
            section += f'export_directory = "{export}"\nexport_interval = 5\n'
        self.private_section = section
        return len(hashes)

    def measure(self, tracker):
        r = self.run_once(tracker, "shoal")
        return r["replies"], r["cpu_per_reply_us"], r.get("rss_mib"), self.reports_dropped(tracker)

    def reports_dropped(self, tracker):
        """Accounting reports the run dropped for a full queue, as its log says
        ("N accounting reports dropped"): work the accounting thread skipped."""
        import re
        with open(self.path(f"{tracker}.log")) as log:
            return sum(int(m.group(1)) for m in re.finditer(r"(\d+) accounting reports dropped", log.read()))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", required=True)
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--torrents", type=int, default=1_000_000)
    p.add_argument("--accounting", action="store_true", help="private mode also exports accounting batches")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration", type=int, default=15)
    p.add_argument("--summarize", type=int, default=8)
    p.add_argument("--port", type=int, default=3999)
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    a.workers, a.load_workers, a.swarm_workers = 0, 0, None
    a.aquatic_dir, a.opentracker, a.baseline_dir = None, None, None
    # Announces only, every peer at random over the whole population.
    require_idle(a.max_load, a.force)
    bench = Private(a)
    count = bench.prepare()
    print(f"{a.users:,} users, {count:,} torrents registered; "
          f"{'with' if a.accounting else 'without'} accounting")
    runs = {"public": [], "private": []}
    print("| round | public replies/s | private | ratio | CPU/reply µs (public, private) | reports dropped |")
    print("|---|---|---|---|---|---|")
    for round_ in range(a.rounds):
        order = ["public", "private"] if round_ % 2 == 0 else ["private", "public"]
        for tracker in order:
            runs[tracker].append(bench.measure(tracker))
        (pub, pub_cpu, _, _), (priv, priv_cpu, _, dropped) = runs["public"][-1], runs["private"][-1]
        print(f"| {round_ + 1} | {pub:,.0f} | {priv:,.0f} | {priv / pub:.3f}× | "
              f"{pub_cpu:.2f}, {priv_cpu:.2f} | {dropped:,} |", flush=True)
    median = {t: statistics.median(r[0] for r in rs) for t, rs in runs.items()}
    cpu = {t: statistics.median(r[1] for r in rs) for t, rs in runs.items()}
    print(f"| median | {median['public']:,.0f} | {median['private']:,.0f} | "
          f"{median['private'] / median['public']:.3f}× | {cpu['public']:.2f}, {cpu['private']:.2f} | |")
    rss = {t: statistics.median(r[2] for r in rs if r[2] is not None) for t, rs in runs.items()}
    print(f"peak resident memory (median of rounds): public {rss['public']:.0f} MiB, "
          f"private {rss['private']:.0f} MiB: {(rss['private'] - rss['public']) * 1024 * 1024 / a.users:.0f} "
          f"bytes per registered user and torrent pair beyond public mode")


if __name__ == "__main__":
    main()
