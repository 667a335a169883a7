#!/usr/bin/env python3
"""Private mode against public mode over HTTP: one shoal_http build, the same load,
side by side, with accounting off and on.

Three trackers, each round in a rotating order, pinned to the same CPUs:

  public       shoal_http with its defaults;
  private      `[private]` with a users file of --users users and a torrents file of
               --torrents torrents (the announced one among them);
  accounting   the same, and `export_directory` (a batch every 10 s, the default:
               each announce a report to the accounting thread, each batch committed
               to the journal and published).

The load is wrk with --connections keep-alive connections repeating one announce that
carries a registered user's passkey in the query (`?passkey=KEY`: a public tracker
ignores the parameter), so every tracker gets the same requests and the difference is
private mode's work: finding the key, hashing it, the user and torrent lookups, the
report. wrk costs the least per request of the load testers, so it measures the
tracker best (documents/benchmarks/backends-2026-11-27.md).

Prints each round's responses per second and the tracker's CPU per response, the
ratios to public in the same round, and the medians.

  cargo build --release --locked -p shoal_http
  scripts/bench/private_http.py --shoal-dir target/release
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (PortPicker, Sampler, bench_arguments, cpu_list, private_rounds, require_idle,  # noqa: E402
                      start, status_kib, stop, wait_for_port)
from http_bench import PER_IP  # noqa: E402

KEY = "6f0d1b2c3d4e5f60718293a4b5c6d7e8"
INFO_HASH = bytes(range(1, 21))


class Bench:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="shoal-private-http-")
        self.ports = PortPicker(args.port)
        self.tracker_cpus = ",".join(map(str, cpu_list(args.tracker_cpus)))
        self.load_cpus = ",".join(map(str, cpu_list(args.load_cpus)))

    def path(self, name):
        return os.path.join(self.tmp, name)

    def prepare(self):
        """The users file (user 0 holds KEY; user i's key is i as 32 hex digits) and
        the torrents file (the announced hash and --torrents - 1 others)."""
        with open(self.path("users.txt"), "w") as f:
            f.write(f"0 {KEY}\n")
            for i in range(1, self.a.users):
                f.write(f"{i} {i:032x}\n")
        with open(self.path("torrents.txt"), "w") as f:
            f.write(f"{INFO_HASH.hex()} 1\n")
            for i in range(1, self.a.torrents):
                f.write(f"{i:040x} {i + 1}\n")
        os.makedirs(self.path("batches"), exist_ok=True)

    def tracker_cmd(self, tracker, port):
        private = ""
        if tracker != "public":
            private = (f'[private]\nenabled = true\nusers_path = "{self.path("users.txt")}"\n'
                       f'torrents_path = "{self.path("torrents.txt")}"\n')
        if tracker == "accounting":
            private += f'export_directory = "{self.path("batches")}"\n'
        config = self.path(f"{tracker}.toml")
        with open(config, "w") as f:
            f.write(f"""
socket_workers = 1
[network]
address_ipv4 = "127.0.0.1:{port}"
use_ipv6 = false
max_connections = 100000
[statistics]
interval = 0
{PER_IP}{private}""")
        return [os.path.join(self.a.shoal_dir, "shoal_http"), "-c", config]

    def run_once(self, tracker):
        a = self.a
        port = self.ports.next_free()
        log = open(self.path(f"{tracker}.log"), "w")
        proc = start(self.tracker_cmd(tracker, port), self.tracker_cpus, log)
        try:
            wait_for_port("127.0.0.1", port, timeout=60)
            hash_ = "".join(f"%{b:02X}" for b in INFO_HASH)
            url = (f"http://127.0.0.1:{port}/announce?info_hash={hash_}&peer_id=-WR0001-abcdefghijkl"
                   f"&port=6881&uploaded=0&downloaded=0&left=0&compact=1&passkey={KEY}")
            with open(self.path("wrk.out"), "w") as out:
                load = start(["wrk", "-t1", f"-c{a.connections}", f"-d{a.duration}s", url], self.load_cpus, out)
                sampler = Sampler([proc.pid])
                sampler.start()
                load.wait()
                end = time.time()
                sampler.done.set()
                sampler.join()
            text = open(self.path("wrk.out")).read()
            if proc.poll() is not None:
                sys.exit(f"{tracker} exited during the run; see {self.path(tracker + '.log')}")
            rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
            if "Non-2xx" in text or "Socket errors" in text:
                sys.exit(f"{tracker}: wrk saw errors:\n{text}")
            body = subprocess.run(["curl", "-s", url], capture_output=True).stdout
            if b"failure reason" in body:
                sys.exit(f"{tracker} refuses the announce: {body!r}")
            window = a.duration - 1
            cpu = sampler.cpu_between(proc.pid, end - window, end)
            return {"rate": rate, "cpu_us": cpu / max(1.0, rate * window) * 1e6,
                    "rss_mib": status_kib(proc.pid, "VmHWM") / 1024}
        finally:
            stop(proc)
            log.close()

    def main(self):
        a = self.a
        require_idle(a.max_load, a.force)
        self.prepare()
        private_rounds(self.run_once, a.rounds, "rate", "response", self.tmp)


def main():
    p = bench_arguments(__doc__, port=4300)
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--torrents", type=int, default=1_000_000)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--duration", type=int, default=10)
    Bench(p.parse_args()).main()


if __name__ == "__main__":
    main()
