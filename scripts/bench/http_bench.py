#!/usr/bin/env python3
"""Runs HTTP trackers side by side under the same load and prints a markdown table.

Modes: plain and TLS, each with keep-alive on and off. In each mode and round, shoal_http,
aquatic_http and nginx (answering every request with one fixed bencoded body: the
ceiling for any HTTP server on this core) run one after another, pinned to the same
CPUs; the load tester runs on the other CPUs. Each run records responses/s over the
last `--summarize` seconds, the server's CPU per response over that window, and the
load tester's CPU. Three load testers: shoal_http_load_test and aquatic_http_load_test (announces spread
over many torrents and peers), and wrk repeating one fixed announce, which costs the
least per request and so measures the ceiling best.

Only loopback addresses are used; every process is started here and ended by PID.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (PortPicker, Sampler, children, cpu_list, latency_cell, latency_of, per_round_table,
                      require_idle, start, status_kib, stop, wait_for_port)

FIXED_BODY = "d8:completei1e10:incompletei1e8:intervali1800e5:peers0:e"


# shoal's per-client limits, raised for the load tester (see the bench documents).
PER_IP = """[per_ip]
# The load tester sends from one address, far more than one client may: the limit is
# raised so that it measures the tracker (the code path still runs).
requests_per_second = 1000000000
burst = 1000000000
max_connections = 0
max_connections_per_network = 0
"""


class Bench:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="shoal-http-bench-")
        self.tracker_cpus = ",".join(map(str, cpu_list(args.tracker_cpus)))
        self.load_cpus = ",".join(map(str, cpu_list(args.load_cpus)))
        self.workers = args.workers or len(cpu_list(args.tracker_cpus))
        self.load_workers = args.load_workers or len(cpu_list(args.load_cpus))
        self.ports = PortPicker(args.port)
        subprocess.run([os.path.join(os.path.dirname(__file__), "..", "gen-tls.sh"), self.path("tls"), "localhost"],
                       check=True, stdout=subprocess.DEVNULL)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def tracker_cmd(self, tracker, tls, keep_alive):
        a, port = self.a, self.a.port
        cert, key = self.path("tls/cert.pem"), self.path("tls/key.pem")
        if tracker in ("shoal", "shoal-before", "shoal-io_uring"):
            # 0: shoal chooses (one socket worker keeps its torrents; more share swarm workers).
            swarm = a.swarm_workers
            config = self.write("shoal.toml", f"""
socket_workers = {self.workers}
swarm_workers = {swarm}
[network]
address_ipv4 = "127.0.0.1:{port}"
use_ipv6 = false
enable_tls = {str(tls).lower()}
tls_certificate_path = "{cert}"
tls_private_key_path = "{key}"
keep_alive = {str(keep_alive).lower()}
max_connections = 100000
# The load tester is one client opening connections as fast as it can.
max_tls_handshakes_per_client = 100000
{self.backend_line(tracker)}
[statistics]
# Its lines say how many TLS handshakes resumed (what the load tester's clients do).
interval = {5 if tracker == "shoal" else 0}
""" + ("" if tracker == "shoal-before" and not getattr(a, "baseline_same_config", False) else PER_IP))
            binary_dir = a.baseline_dir if tracker == "shoal-before" else a.shoal_dir
            return [os.path.join(binary_dir, "shoal_http"), "-c", config]
        if tracker == "aquatic":
            text = subprocess.run([os.path.join(a.aquatic_dir, "aquatic_http"), "-p"],
                                  capture_output=True, text=True, check=True).stdout
            for key_, value in [("socket_workers", self.workers), ("swarm_workers", a.swarm_workers or max(1, self.workers // 4)),
                                ("address", f'"127.0.0.1:{port}"'), ("enable_tls", str(tls).lower()),
                                ("keep_alive", str(keep_alive).lower()),
                                ("tls_certificate_path", f'"{cert}"'), ("tls_private_key_path", f'"{key}"')]:
                text = re.sub(rf'^{key_} = .*$', f"{key_} = {value}", text, flags=re.M)
            return [os.path.join(a.aquatic_dir, "aquatic_http"), "-c", self.write("aquatic.toml", text)]
        if tracker == "nginx":
            ssl = " ssl" if tls else ""
            config = self.write("nginx.conf", f"""
worker_processes {self.workers};
daemon off;
pid {self.path('nginx.pid')};
error_log stderr error;
events {{ worker_connections 65536; }}
http {{
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout {60 if keep_alive else 0};
    client_body_temp_path {self.tmp};
    server {{
        listen 127.0.0.1:{port}{ssl} reuseport;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        # nginx's default since 1.23.4 (Debian's 1.22 leaves TLS 1.3 out, and a
        # TLS 1.2 resumption needs no key exchange while TLS 1.3's does): both
        # servers then speak what the client prefers, TLS 1.3.
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {{
            default_type text/plain;
            return 200 "{FIXED_BODY}";
        }}
    }}
}}
""")
            return ["nginx", "-e", "stderr", "-p", self.tmp, "-c", config]
        raise ValueError(tracker)

    def load_cmd(self, load, tls, keep_alive):
        a, port = self.a, self.a.port
        if load == "shoal":
            config = self.write("load.toml", f"""
server_address = "127.0.0.1:{port}"
workers = {self.load_workers}
connections = {a.connections}
duration = {a.duration}
summarize_last = {a.summarize}
report_interval = 5
log_level = "warn"
[network]
keep_alive = {str(keep_alive).lower()}
tls = {str(tls).lower()}
tls_resumption = {str(not a.no_tls_resumption).lower()}
[requests]
torrents = 10000
peers = 100000
weight_announce = 1
weight_scrape = 0
seeder_probability = 0.25
""")
            return [os.path.join(a.shoal_dir, "shoal_http_load_test"), "-c", config, "--json"]
        if load == "wrk":
            # One fixed announce, as fast as wrk goes: the ceiling instrument.
            scheme = "https" if tls else "http"
            url = (f"{scheme}://127.0.0.1:{port}/announce?info_hash=%01%02%03%04%05%06%07%08%09%0A%0B%0C%0D%0E%0F"
                   f"%10%11%12%13%14&peer_id=-WR0001-abcdefghijkl&port=6881&uploaded=0&downloaded=0&left=100&compact=1")
            command = ["wrk", f"-t{self.load_workers}", f"-c{a.connections}", f"-d{a.duration}s"]
            if not keep_alive:
                command += ["-H", "Connection: close"]
            return command + [url]
        if load == "aquatic":
            text = subprocess.run([os.path.join(a.aquatic_dir, "aquatic_http_load_test"), "-p"],
                                  capture_output=True, text=True, check=True).stdout
            for key_, value in [("server_address", f'"127.0.0.1:{port}"'), ("num_workers", self.load_workers),
                                ("num_connections", a.connections), ("duration", a.duration),
                                ("keep_alive", str(keep_alive).lower()), ("enable_tls", str(tls).lower()),
                                ("connection_creation_interval_ms", 0 if not keep_alive else 10)]:
                text = re.sub(rf'^{key_} = .*$', f"{key_} = {value}", text, flags=re.M)
            return [os.path.join(a.aquatic_dir, "aquatic_http_load_test"), "-c", self.write("aquatic-load.toml", text)]
        raise ValueError(load)

    def parse_load(self, load, text):
        """(responses/s, failures/s, latency percentiles in µs or None)"""
        if load == "wrk":
            rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
            bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
            errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
            count = (int(bad.group(1)) if bad else 0) + (sum(map(int, errors.groups())) if errors else 0)
            return rate, count / self.a.duration, None
        if load == "shoal":
            data = json.loads([l for l in text.splitlines() if l.startswith("{")][-1])
            bad = data["failures_per_second"] + data["http_errors_per_second"] + data["errors_per_second"]
            good = data["responses_per_second"] - data["failures_per_second"] - data["http_errors_per_second"]
            return good, bad, latency_of(data)
        # Progress lines every 5 s; average those inside the measured window.
        responses = [float(x) for x in re.findall(r"Responses in: ([\d.]+)/second", text)]
        failures = [float(x) for x in re.findall(r"Failure responses: +([\d.]+)", text)]
        n = max(1, self.a.summarize // 5)
        window, bad = responses[-n:], failures[-n:]
        good = statistics.mean(window) - (statistics.mean(bad) if bad else 0)
        return good, (statistics.mean(bad) if bad else 0.0), None

    def run_once(self, tracker, load, tls, keep_alive):
        a = self.a
        a.port = self.ports.next_free()
        log = open(self.path(f"{tracker}.log"), "w")
        # Keep-alive is set on both sides, so that no server keeps serving a connection
        # the mode says should close.
        proc = start(self.tracker_cmd(tracker, tls, keep_alive), self.tracker_cpus, log)
        try:
            wait_for_port("127.0.0.1", a.port)
            # nginx serves from worker processes forked by its master: measure them all.
            server_pids = [proc.pid] + children(proc.pid)
            with open(self.path("load.out"), "w") as out:
                load_proc = start(self.load_cmd(load, tls, keep_alive), self.load_cpus, out)
                sampler = Sampler(server_pids + [load_proc.pid])
                sampler.start()
                load_proc.wait()
                end = time.time()
                sampler.done.set()
                sampler.join()
            text = open(self.path("load.out")).read()
            if load_proc.returncode != 0:
                sys.exit(f"the {load} load tester failed:\n{text}")
            if proc.poll() is not None:
                sys.exit(f"{tracker} exited during the run; see {self.path(tracker + '.log')}")
            responses, bad, latency = self.parse_load(load, text)
            # wrk reports its whole run, so measure the CPU over the whole run too.
            window = a.duration - 1 if load == "wrk" else a.summarize
            t0 = end - window
            cpu = sum(sampler.cpu_between(pid, t0, end) for pid in server_pids)
            load_cpu = sampler.cpu_between(load_proc.pid, t0, end)
            return {"responses": responses, "bad": bad, "cpu_us": cpu / max(1, responses * window) * 1e6,
                    "cores": cpu / window, "load_cores": load_cpu / window,
                    "rss_mib": status_kib(proc.pid, "VmHWM") / 1024, "latency": latency}
        finally:
            stop(proc)
            log.close()

    def resumed_share(self, tracker):
        """Of the TLS handshakes of shoal's last statistics interval, the share resumed."""
        text = open(self.path(f"{tracker}.log")).read()
        found = re.findall(r"TLS handshakes (\d+) \((\d+) resumed", text)
        counts = [(int(n), int(r)) for n, r in found if int(n) > 0]
        return counts[-1][1] / counts[-1][0] if counts else None

    def main(self):
        a = self.a
        require_idle(a.max_load, a.force)
        names = {"plain-ka": (False, True), "plain-close": (False, False),
                 "tls-ka": (True, True), "tls-close": (True, False)}
        modes = [names[m] for m in a.modes.split(",")]
        results = {}
        for tls, keep_alive in modes:
            for load in a.load_testers:
                for round_ in range(a.rounds):
                    trackers = self.trackers()
                    k = round_ % len(trackers)
                    for tracker in trackers[k:] + trackers[:k]:
                        r = self.run_once(tracker, load, tls, keep_alive)
                        resumed = self.resumed_share(tracker) if tls and tracker == "shoal" else None
                        results.setdefault((tls, keep_alive, load, tracker), []).append(r)
                        print(f"[{'TLS' if tls else 'plain'}, keep-alive {'on' if keep_alive else 'off'}, {load} load, "
                              f"round {round_ + 1}] {tracker}: {r['responses']:.0f} responses/s, {r['cpu_us']:.1f} µs CPU "
                              f"per response ({r['cores']:.2f} cores), load {r['load_cores']:.2f} cores, "
                              f"bad {r['bad']:.0f}/s"
                              + (f", {resumed:.0%} of TLS handshakes resumed" if resumed is not None else ""),
                              file=sys.stderr)
        print(self.table(results, modes))
        print(per_round_table(
            results, lambda case: f"{'TLS' if case[0] else 'plain'}, keep-alive {'on' if case[1] else 'off'}, "
                                  f"{case[2]} load"))

    def table(self, results, modes):
        a = self.a
        out = [f"Server CPUs `{self.tracker_cpus}` ({self.workers} socket worker(s)), load CPUs `{self.load_cpus}`; "
               f"{a.connections} connections; {a.rounds} rounds of {a.duration} s, last {a.summarize} s measured; "
               f"medians; ratios are medians of per-round ratios.\n",
               "| mode | load tester | shoal resp/s | aquatic resp/s | nginx resp/s | shoal/aquatic | shoal/nginx | "
               "shoal µs/resp | aquatic µs/resp | load cores (shoal run) | bad responses/s (shoal, aquatic) |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        for tls, keep_alive in modes:
            for load in a.load_testers:
                get = lambda t: results.get((tls, keep_alive, load, t), [])
                med = lambda t, k: statistics.median(r[k] for r in get(t)) if get(t) else float("nan")
                vs_aq = statistics.median(s["responses"] / q["responses"] for s, q in zip(get("shoal"), get("aquatic")) if q["responses"] > 0) \
                    if any(q["responses"] > 0 for q in get("aquatic")) else float("nan")
                vs_ng = statistics.median(s["responses"] / n["responses"] for s, n in zip(get("shoal"), get("nginx")))
                mode = f"{'TLS' if tls else 'plain'}, keep-alive {'on' if keep_alive else 'off'}"
                out.append(f"| {mode} | {load} | {med('shoal', 'responses'):.0f} | {med('aquatic', 'responses'):.0f} | "
                           f"{med('nginx', 'responses'):.0f} | **{vs_aq:.2f}×** | {vs_ng:.2f}× | "
                           f"{med('shoal', 'cpu_us'):.1f} | {med('aquatic', 'cpu_us'):.1f} | "
                           f"{med('shoal', 'load_cores'):.2f} | {max(r['bad'] for r in get('shoal')):.0f}, "
                           f"{max((r['bad'] for r in get('aquatic')), default=float('nan')):.0f} |")
        if "shoal" in a.load_testers:
            servers = self.trackers()
            out.append("\nResponse latency under shoal_http_load_test, µs, p50 / p99 / p99.9 / max (medians of "
                       "rounds; from queueing a request to reading its whole response):\n")
            out.append("| mode | " + " | ".join(servers) + " |")
            out.append("|---|" + "---|" * len(servers))
            for tls, keep_alive in modes:
                mode = f"{'TLS' if tls else 'plain'}, keep-alive {'on' if keep_alive else 'off'}"
                cells = [latency_cell(r["latency"] for r in results[(tls, keep_alive, "shoal", t)]) for t in servers]
                out.append(f"| {mode} | " + " | ".join(cells) + " |")
        if a.baseline_dir:
            out.append("\nshoal against the baseline build (`--baseline-dir`), same rounds:\n")
            out.append("| mode | load tester | shoal/shoal-before | shoal-before/aquatic |")
            out.append("|---|---|---|---|")
            for tls, keep_alive in modes:
                for load in a.load_testers:
                    get = lambda t: results.get((tls, keep_alive, load, t), [])
                    before = statistics.median(s["responses"] / b["responses"]
                                               for s, b in zip(get("shoal"), get("shoal-before")) if b["responses"] > 0)
                    before_aq = statistics.median(b["responses"] / q["responses"]
                                                  for b, q in zip(get("shoal-before"), get("aquatic")) if q["responses"] > 0) \
                        if any(q["responses"] > 0 for q in get("aquatic")) else float("nan")
                    mode = f"{'TLS' if tls else 'plain'}, keep-alive {'on' if keep_alive else 'off'}"
                    out.append(f"| {mode} | {load} | **{before:.2f}×** | {before_aq:.2f}× |")
        if a.io_uring:
            out.append("\nshoal on its default backend, epoll, against io_uring (`--io-uring`: the same "
                       "binary, `network.io_backend` unset and `\"io_uring\"`), same rounds; ratios of the "
                       "medians shown:\n")
            out.append("| mode | load tester | epoll resp/s | io_uring resp/s | epoll/io_uring resp/s | "
                       "epoll µs/resp | io_uring µs/resp | epoll/io_uring CPU per response |")
            out.append("|---|---|---|---|---|---|---|---|")
            for tls, keep_alive in modes:
                for load in a.load_testers:
                    get = lambda t: results[(tls, keep_alive, load, t)]
                    med = lambda t, k: statistics.median(r[k] for r in get(t))
                    mode = f"{'TLS' if tls else 'plain'}, keep-alive {'on' if keep_alive else 'off'}"
                    out.append(f"| {mode} | {load} | {med('shoal', 'responses'):.0f} | "
                               f"{med('shoal-io_uring', 'responses'):.0f} | "
                               f"**{med('shoal', 'responses') / med('shoal-io_uring', 'responses'):.3f}×** | "
                               f"{med('shoal', 'cpu_us'):.1f} | {med('shoal-io_uring', 'cpu_us'):.1f} | "
                               f"**{med('shoal', 'cpu_us') / med('shoal-io_uring', 'cpu_us'):.3f}×** |")
        return "\n".join(out)

    def trackers(self):
        """Every server of a round, in the order of round 1."""
        a = self.a
        return (["shoal"] + ([] if getattr(a, "no_aquatic", False) else ["aquatic"]) + ["nginx"]
                + (["shoal-before"] if a.baseline_dir else [])
                + (["shoal-io_uring"] if getattr(a, "io_uring", False) else []))

    def backend_line(self, tracker):
        """`shoal-io_uring` forced to io_uring; every other shoal on the default backend."""
        return 'io_backend = "io_uring"' if tracker == "shoal-io_uring" else ""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", required=True)
    p.add_argument("--aquatic-dir", required=True)
    p.add_argument("--baseline-dir", help="a directory with an earlier shoal_http, run as \"shoal-before\"")
    p.add_argument("--baseline-same-config", action="store_true",
                   help="give the baseline the per-client limits raised too (it knows [per_ip]'s keys)")
    p.add_argument("--io-uring", action="store_true",
                   help="also run shoal_http forced to io_uring (\"shoal-io_uring\"); shoal runs the default, epoll")
    p.add_argument("--no-aquatic", action="store_true",
                   help="leave aquatic_http out of the rounds (its columns read nan)")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--workers", type=int, default=0, help="socket workers (default: one per tracker CPU)")
    p.add_argument("--swarm-workers", type=int, default=0,
                   help="swarm workers for both trackers (default: shoal chooses; aquatic max(1, workers/4))")
    p.add_argument("--load-workers", type=int, default=0)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=15)
    p.add_argument("--summarize", type=int, default=10)
    p.add_argument("--load-testers", nargs="+", default=["shoal", "aquatic", "wrk"],
                   choices=["shoal", "aquatic", "wrk"],
                   help="wrk repeats one fixed announce: the ceiling instrument (nginx's rate)")
    p.add_argument("--modes", default="plain-ka,plain-close,tls-ka,tls-close",
                   help="comma-separated: plain-ka, plain-close, tls-ka, tls-close (ka: keep-alive)")
    p.add_argument("--no-tls-resumption", action="store_true",
                   help="shoal_http_load_test makes every TLS handshake a full one (wrk never resumes)")
    p.add_argument("--port", type=int, default=23000, help="first of the 200 ports runs use in turn")
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--force", action="store_true")
    Bench(p.parse_args()).main()


if __name__ == "__main__":
    main()
