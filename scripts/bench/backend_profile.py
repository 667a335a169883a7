#!/usr/bin/env python3
"""Where each TCP backend spends its CPU: shoal_http on epoll and on io_uring under the
same wrk load, with `perf stat` (system calls, context switches, user and kernel time)
and `perf record` (the functions that take the samples), per response.

For each mode (plain keep-alive, plain with a new connection per request, TLS
keep-alive) and each backend, in alternating order for --rounds rounds: the tracker
pinned to --tracker-cpus with one socket worker, wrk pinned to --load-cpus with 64
connections repeating one announce; after --warmup seconds, perf counts the tracker
for --seconds. Prints one table of counts per response (medians of rounds) and, for
the last round, each backend's top symbols by self time, kernel and user apart.

Needs root (or perf_event_paranoid <= 1 and tracepoint access) for the syscall
tracepoint and kernel symbols.

  cargo build --release --locked -p shoal_http
  scripts/bench/backend_profile.py --shoal-dir target/release
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_bench import PER_IP  # noqa: E402
from benchlib import PortPicker, bench_arguments, cpu_list, require_idle, start, stop, wait_for_port  # noqa: E402

BACKENDS = ("epoll", "io_uring")
MODES = {"plain-ka": (False, True), "plain-close": (False, False), "tls-ka": (True, True)}
EVENTS = "task-clock,context-switches,raw_syscalls:sys_enter"
# Where a sample's symbol goes, first match wins: the executors' own costs apart from
# the TCP and TLS work both backends share.
CATEGORIES = [
    ("kernel: io_uring", r"\[k\] (__)?io_"),
    ("kernel: interrupt and task-work exit", r"\[k\] (irqentry|exit_to_user|task_work)"),
    ("kernel: scheduler", r"\[k\] (finish_task_switch|__?schedule|pick_next|dequeue|enqueue)"),
    ("kernel: epoll", r"\[k\] (ep_|do_epoll|__x64_sys_epoll)"),
    ("kernel: the rest (TCP, loopback, system call entry)", r"\[k\]"),
    ("glommio (io_uring executor)", r"glommio"),
    ("shoal's epoll executor", r"shoal_tcp::poll"),
    ("rustls and ring (TLS)", r"rustls|ring_core|ring::"),
    ("libc (copies, allocation)", r"libc\.so|memmove|memcpy|malloc|free"),
    ("shoal and other user code", r"."),
]


class Profile:
    def __init__(self, a):
        self.a = a
        self.tmp = tempfile.mkdtemp(prefix="shoal-backend-profile-")
        self.ports = PortPicker(a.port)
        self.tracker_cpus = ",".join(map(str, cpu_list(a.tracker_cpus)))
        self.load_cpus = ",".join(map(str, cpu_list(a.load_cpus)))
        subprocess.run([os.path.join(os.path.dirname(__file__), "..", "gen-tls.sh"), self.path("tls"), "localhost"],
                       check=True, stdout=subprocess.DEVNULL)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def tracker_cmd(self, backend, tls, keep_alive, port):
        config = self.path(f"{backend}.toml")
        with open(config, "w") as f:
            f.write(f"""
socket_workers = 1
[network]
address_ipv4 = "127.0.0.1:{port}"
use_ipv6 = false
enable_tls = {str(tls).lower()}
tls_certificate_path = "{self.path('tls/cert.pem')}"
tls_private_key_path = "{self.path('tls/key.pem')}"
keep_alive = {str(keep_alive).lower()}
max_connections = 100000
io_backend = "{backend}"
[statistics]
interval = 0
{PER_IP}""")
        return [os.path.join(self.a.shoal_dir, "shoal_http"), "-c", config]

    def run_once(self, backend, mode, record):
        a = self.a
        tls, keep_alive = MODES[mode]
        port = self.ports.next_free()
        log = open(self.path(f"{backend}.log"), "w")
        proc = start(self.tracker_cmd(backend, tls, keep_alive, port), self.tracker_cpus, log)
        try:
            wait_for_port("127.0.0.1", port)
            scheme = "https" if tls else "http"
            url = (f"{scheme}://127.0.0.1:{port}/announce?info_hash=%01%02%03%04%05%06%07%08%09%0A%0B%0C%0D%0E%0F"
                   f"%10%11%12%13%14&peer_id=-WR0001-abcdefghijkl&port=6881&uploaded=0&downloaded=0&left=100&compact=1")
            wrk = ["wrk", "-t1", "-c64", f"-d{a.warmup + a.seconds + 2}s", "--latency"]
            if not keep_alive:
                wrk += ["-H", "Connection: close"]
            with open(self.path("wrk.out"), "w") as out:
                load = start(wrk + [url], self.load_cpus, out)
                time.sleep(a.warmup)
                stat = subprocess.run(["perf", "stat", "-x", ",", "-e", EVENTS, "-p", str(proc.pid), "--",
                                       "sleep", str(a.seconds)], capture_output=True, text=True)
                if record:
                    data = self.path(f"{backend}-{mode}.data")
                    subprocess.run(["perf", "record", "-q", "-F", "2999", "-g", "-o", data, "-p", str(proc.pid),
                                    "--", "sleep", "2"], capture_output=True)
                load.wait()
            text = open(self.path("wrk.out")).read()
            rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
            if "Non-2xx" in text:
                sys.exit(f"{backend}: wrk saw non-2xx responses:\n{text}")
            counts = {}
            for line in stat.stderr.splitlines():
                fields = line.split(",")
                if len(fields) > 3 and fields[0] and fields[0][0].isdigit():
                    counts[fields[2]] = float(fields[0])
            if "raw_syscalls:sys_enter" not in counts:
                sys.exit(f"perf stat gave no syscall count (root needed?):\n{stat.stderr}")
            responses = rate * a.seconds
            row = {
                "rate": rate,
                "cpu_us": counts["task-clock"] * 1e3 / responses,  # task-clock is in ms
                "syscalls": counts["raw_syscalls:sys_enter"] / responses,
                "switches": counts["context-switches"] / responses,
            }
            return row
        finally:
            stop(proc)
            log.close()

    def symbols(self, backend, mode, limit):
        """(percent, 'dso [k|.] symbol') of the profile, by self time."""
        data = self.path(f"{backend}-{mode}.data")
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol",
                                 "--stdio", "-g", "none", "--percent-limit", str(limit)],
                                capture_output=True, text=True).stdout
        found = []
        for line in report.splitlines():
            m = re.match(r"\s*([\d.]+)%\s+(.*?)(\s+-\s+-)?\s*$", line)
            if m and not line.startswith("#"):
                found.append((float(m.group(1)), " ".join(m.group(2).split())))
        return found

    def top_symbols(self, backend, mode):
        return [f"{percent:5.2f}%  {symbol}" for percent, symbol in self.symbols(backend, mode, 1.0)]

    def categories(self, backend, mode):
        """Share of the samples in each of CATEGORIES."""
        shares = {}
        for percent, symbol in self.symbols(backend, mode, 0):
            name = next(name for name, pattern in CATEGORIES if re.search(pattern, symbol))
            shares[name] = shares.get(name, 0) + percent
        return shares

    def main(self):
        a = self.a
        require_idle(a.max_load, a.force)
        results = {}
        for mode in a.modes.split(","):
            for round_ in range(a.rounds):
                order = BACKENDS if round_ % 2 == 0 else BACKENDS[::-1]
                for backend in order:
                    r = self.run_once(backend, mode, record=round_ == a.rounds - 1)
                    results.setdefault((mode, backend), []).append(r)
                    print(f"[{mode}, round {round_ + 1}] {backend}: {r['rate']:,.0f} responses/s, "
                          f"{r['cpu_us']:.2f} µs CPU, "
                          f"{r['syscalls']:.3f} syscalls, {r['switches']:.4f} context switches per response",
                          file=sys.stderr, flush=True)
        print("| mode | backend | responses/s | µs CPU / response | "
              "syscalls / response | context switches / response |")
        print("|---|---|---|---|---|---|")
        for (mode, backend), rows in results.items():
            med = lambda k: statistics.median(r[k] for r in rows)
            print(f"| {mode} | {backend} | {med('rate'):,.0f} | {med('cpu_us'):.2f} | "
                  f"{med('syscalls'):.3f} | {med('switches'):.4f} |")
        print("\nEvery round (responses/s, µs CPU / response, syscalls / response):\n")
        for (mode, backend), rows in results.items():
            print(f"- {mode}, {backend}: " + "; ".join(
                f"{r['rate']:,.0f}, {r['cpu_us']:.2f}, {r['syscalls']:.3f}" for r in rows))
        for mode in a.modes.split(","):
            shares = {backend: self.categories(backend, mode) for backend in BACKENDS}
            cpu = {backend: statistics.median(r["cpu_us"] for r in results[(mode, backend)]) for backend in BACKENDS}
            print(f"\nWhere the CPU goes, {mode} (last round's profile, 2 s at 2999 Hz; µs per response = "
                  f"share × the median CPU per response above):\n")
            print("| category | " + " | ".join(f"{b} share | {b} µs" for b in BACKENDS) + " |")
            print("|---|" + "---|---|" * len(BACKENDS))
            for name, _ in CATEGORIES:
                print(f"| {name} | " + " | ".join(
                    f"{shares[b].get(name, 0):.1f}% | {shares[b].get(name, 0) / 100 * cpu[b]:.2f}" for b in BACKENDS) + " |")
            for backend in BACKENDS:
                print(f"\nTop symbols by self time, {mode}, {backend}:\n")
                print("```")
                print("\n".join(self.top_symbols(backend, mode)[:a.symbols]))
                print("```")
        print(f"\n(files under {self.tmp})")


def main():
    p = bench_arguments(__doc__, port=4700)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seconds", type=int, default=6)
    p.add_argument("--symbols", type=int, default=12)
    Profile(p.parse_args()).main()


if __name__ == "__main__":
    main()
