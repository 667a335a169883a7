#!/usr/bin/env python3
"""What keeping swarms across restarts costs and gains (shoal_udp, `[state]`).

1. Snapshot cost: two trackers, one with snapshots every --interval seconds and one
   without, each filled by shoal_udp_load_test with --peers peers over --torrents
   torrents (announces only) and then kept under the same announce load for
   --duration seconds. Prints both reply rates and their ratio, and every "state:
   wrote" line (file size, write time, the workers' time spent taking it, the longest
   slice).
2. Shutdown: SIGTERM to the filled tracker with snapshots; time to exit (the shutdown
   snapshot) and the file's size.
3. Restart gap, with and without [state]: the load tester runs for --gap-duration
   seconds; a third of the way in, the tracker gets SIGTERM and a new process is
   started on the same port at once. Prints the time from SIGTERM to the new
   process's first answer, what the new process restored, and the load tester's
   share of requests left unanswered over the whole run.
4. The same for shoal_http under shoal_http_load_test (64 keep-alive connections,
   --http-torrents torrents, --http-peers peers, after a fill of --fill seconds): the
   time to the first answer, and the load tester's responses, connection errors and
   peers per announce over the run (a tracker that lost its swarms answers with
   fewer peers).

Tracker on --tracker-cpus, load on --load-cpus; loopback only; every process is
started here and ended by PID.
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import last_json, require_idle, start, status_kib, stop  # noqa: E402
from udp_bench import PER_IP, announce_load_toml, port_free, tracker_toml, wait_for_port  # noqa: E402


class Restart:
    def __init__(self, a):
        self.a = a
        self.tmp = tempfile.mkdtemp(prefix="shoal-restart-bench-")
        self.state = os.path.join(self.tmp, "state")
        os.makedirs(self.state)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def tracker(self, name, state):
        a = self.a
        config = self.path(f"{name}.toml")
        with open(config, "w") as f:
            f.write(tracker_toml(a.port, f"""
[state]
directory = "{self.state if state else ''}"
interval = {a.interval}
"""))
        log = open(self.path(f"{name}.log"), "w")
        proc = start([os.path.join(a.shoal_dir, "shoal_udp"), "-c", config], a.tracker_cpus, log)
        return proc, log

    def load(self, name, duration, summarize):
        a = self.a
        config = self.path(f"{name}-load.toml")
        with open(config, "w") as f:
            f.write(announce_load_toml(a.port, duration, summarize, a.torrents, a.peers))
        out = open(self.path(f"{name}-load.out"), "w")
        proc = start([os.path.join(a.shoal_dir, "shoal_udp_load_test"), "-c", config, "--json"], a.load_cpus, out)
        return proc, out

    def result(self, name):
        return last_json(self.path(f"{name}-load.out"))

    def run_load(self, name, duration, summarize):
        proc, out = self.load(name, duration, summarize)
        proc.wait()
        out.close()
        return self.result(name)

    def snapshot_cost(self):
        a = self.a
        rates = {}
        for name, state in [("with-state", True), ("without-state", False)]:
            if not port_free(a.port):
                sys.exit(f"port {a.port} is in use")
            proc, log = self.tracker(name, state)
            try:
                wait_for_port(a.port)
                self.run_load(f"{name}-fill", a.fill, 0)
                rss = status_kib(proc.pid, "VmRSS") / 1024
                measured = self.run_load(name, a.duration, a.duration - 2)
                rates[name] = measured["replies_per_second"]
                print(f"{name}: {measured['replies_per_second']:,.0f} replies/s over the last "
                      f"{a.duration - 2} s of {a.duration} s, RSS {rss:.0f} MiB", flush=True)
                if state:
                    time.sleep(0.5)
                    for line in open(self.path(f"{name}.log")):
                        if "state: wrote" in line:
                            print("   ", line.strip().split("] ", 1)[-1])
                    # Shutdown snapshot of the filled tracker.
                    began = time.time()
                    proc.terminate()
                    proc.wait(timeout=120)
                    took = time.time() - began
                    size = os.path.getsize(os.path.join(self.state, "udp.snapshot"))
                    print(f"shutdown with a snapshot: exited {took * 1000:.0f} ms after SIGTERM; "
                          f"udp.snapshot {size / 1e6:.1f} MB")
                    last = [l for l in open(self.path(f"{name}.log")) if "state: wrote" in l][-1]
                    print("   ", last.strip().split("] ", 1)[-1])
            finally:
                stop(proc)
                log.close()
        print(f"reply rate with snapshots every {a.interval} s / without: "
              f"{rates['with-state'] / rates['without-state']:.3f}×")

    def udp_answers(self):
        """Whether the tracker answers a BEP 15 connect on 127.0.0.1:port within 5 ms."""
        connect = (0x41727101980).to_bytes(8, "big") + (0).to_bytes(4, "big") + (9).to_bytes(4, "big")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.settimeout(0.005)
            try:
                probe.sendto(connect, ("127.0.0.1", self.a.port))
                probe.recvfrom(64)
                return True
            except OSError:
                return False

    def restart_during_load(self, name, old, old_log, load, out, start_new, answers):
        """A third of the way into `load`, SIGTERM to `old` and `start_new()` at once;
        returns (seconds to the old one's exit, seconds to the new one's first answer,
        the load's summary, the new process's "state: restored" line or "")."""
        time.sleep(self.a.gap_duration / 3)
        began = time.time()
        old.terminate()
        old.wait(timeout=120)
        exited = time.time() - began
        new, new_log = start_new()
        first_answer = float("nan")
        while time.time() - began < 30:
            if answers():
                first_answer = time.time() - began
                break
        load.wait()
        out.close()
        stop(new)
        old_log.close()
        new_log.close()
        restored = [l.strip().split("] ", 1)[-1] for l in open(self.path(f"{name}-new.log"))
                    if "state: restored" in l]
        return exited, first_answer, self.result(name), (f"; {restored[0]}" if restored else "")

    def restart_gap(self, state):
        a = self.a
        name = "gap-state" if state else "gap-plain"
        if not state:
            shutil.rmtree(self.state)
            os.makedirs(self.state)
        # With [state], the new process starts from the filled tracker's snapshot.
        old, old_log = self.tracker(f"{name}-old", state)
        wait_for_port(a.port)
        load, out = self.load(name, a.gap_duration, a.gap_duration)
        exited, first_answer, result, restored = self.restart_during_load(
            name, old, old_log, load, out, lambda: self.tracker(f"{name}-new", state), self.udp_answers)
        label = "with [state]" if state else "without [state]"
        print(f"restart {label}: old process exited {exited * 1000:.0f} ms after SIGTERM; first answer "
              f"from the new one {first_answer * 1000:.0f} ms after SIGTERM; load tester: "
              f"{result['unanswered'] * 100:.2f}% of requests unanswered over {a.gap_duration} s, "
              f"{result['replies_per_second']:,.0f} replies/s on average" + restored, flush=True)

    # --- HTTP --------------------------------------------------------------------

    def http_tracker(self, name, state):
        a = self.a
        config = self.path(f"{name}.toml")
        with open(config, "w") as f:
            f.write(f"""
[network]
address_ipv4 = "127.0.0.1:{a.port}"
use_ipv6 = false
max_connections = 100000
[statistics]
interval = 0
[state]
directory = "{self.state if state else ''}"
interval = {a.interval}
""" + PER_IP)
        log = open(self.path(f"{name}.log"), "w")
        proc = start([os.path.join(a.shoal_dir, "shoal_http"), "-c", config], a.tracker_cpus, log)
        return proc, log

    def http_load(self, name, duration):
        a = self.a
        config = self.path(f"{name}-load.toml")
        with open(config, "w") as f:
            f.write(f"""
server_address = "127.0.0.1:{a.port}"
workers = 1
connections = 64
duration = {duration}
summarize_last = {duration}
report_interval = 5
log_level = "error"
[network]
response_timeout_ms = 1000
[requests]
torrents = {a.http_torrents}
peers = {a.http_peers}
popularity_shape = 0.0
weight_announce = 1
weight_scrape = 0
seeder_probability = 0.25
""")
        out = open(self.path(f"{name}-load.out"), "w")
        proc = start([os.path.join(a.shoal_dir, "shoal_http_load_test"), "-c", config, "--json"],
                     a.load_cpus, out)
        return proc, out

    def http_answers(self):
        """Whether the tracker answers a scrape on 127.0.0.1:port."""
        try:
            with socket.create_connection(("127.0.0.1", self.a.port), timeout=0.05) as s:
                s.settimeout(0.5)
                s.sendall(b"GET /scrape?info_hash=%01%01%01%01%01%01%01%01%01%01%01%01%01%01%01%01%01%01%01%01 "
                          b"HTTP/1.1\r\nConnection: close\r\n\r\n")
                return s.recv(12).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def http_restart_gap(self, state):
        a = self.a
        name = "http-gap-state" if state else "http-gap-plain"
        shutil.rmtree(self.state)
        os.makedirs(self.state)
        old, old_log = self.http_tracker(f"{name}-old", state)
        deadline = time.time() + 10
        while not self.http_answers():
            if time.time() > deadline:
                sys.exit(f"shoal_http did not answer; see {self.path(name + '-old.log')}")
            time.sleep(0.05)
        fill, out = self.http_load(f"{name}-fill", a.fill)
        fill.wait()
        out.close()
        load, out = self.http_load(name, a.gap_duration)
        exited, first_answer, result, restored = self.restart_during_load(
            name, old, old_log, load, out, lambda: self.http_tracker(f"{name}-new", state), self.http_answers)
        label = "with [state]" if state else "without [state]"
        print(f"HTTP restart {label}: old process exited {exited * 1000:.0f} ms after SIGTERM; first answer "
              f"from the new one {first_answer * 1000:.0f} ms after SIGTERM; load tester over {a.gap_duration} s: "
              f"{result['responses_per_second']:,.0f} responses/s, {result['errors_per_second']:.1f} connection "
              f"errors/s, {result['peers_per_announce']:.1f} peers per announce" + restored, flush=True)

    def main(self):
        a = self.a
        require_idle(a.max_load, a.force)
        try:
            if a.only != "http":
                self.snapshot_cost()
                self.restart_gap(True)
                self.restart_gap(False)
            if a.only != "udp":
                self.http_restart_gap(True)
                self.http_restart_gap(False)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", default="target/release")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--port", type=int, default=3998)
    p.add_argument("--torrents", type=int, default=100_000)
    p.add_argument("--peers", type=int, default=1_000_000)
    p.add_argument("--fill", type=int, default=25, help="seconds of load that fill the tracker")
    p.add_argument("--duration", type=int, default=32, help="seconds of load measured after the fill")
    p.add_argument("--interval", type=int, default=10, help="[state] interval of the tracker with snapshots")
    p.add_argument("--gap-duration", type=int, default=30)
    p.add_argument("--http-torrents", type=int, default=10_000)
    p.add_argument("--http-peers", type=int, default=100_000)
    p.add_argument("--only", choices=["udp", "http"], help="run only one tracker's part")
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--force", action="store_true")
    Restart(p.parse_args()).main()


if __name__ == "__main__":
    main()
