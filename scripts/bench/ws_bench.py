#!/usr/bin/env python3
"""Runs WebTorrent trackers side by side under the same load and prints a markdown table.

For each load tester, connection count and transport, shoal_ws and aquatic_ws run one
after another (the order alternates by round), pinned to the same CPUs with the same
worker counts; the load tester runs on the other CPUs. Each run records messages from
the tracker per second (announce replies, offers, answers, scrape replies) over the
last `--summarize` seconds, the tracker's CPU per message over that window, the load
tester's CPU, and the tracker's peak RSS. aquatic_ws_load_test speaks wss only, so
its runs use TLS on both trackers; shoal_ws_load_test runs both ws and wss.

shoal_ws's per-connection limits are set far above what the load testers trigger:
`limits.max_requests_per_second = 0` (off), `limits.max_torrents_per_connection`,
`limits.max_outgoing_messages`, `limits.max_outgoing_bytes_per_worker` and
`limits.max_offer_bytes_per_second` (off; neither for a --baseline-dir build older
than those keys, unless --baseline-same-config says it knows them) and
`protocol.max_pending_offers` raised. Their
defaults suit browsers on a public tracker; a load tester's connection announces in
thousands of torrents, receives hundreds of offers a second and answers only the
latest, and the defaults would otherwise be what is measured. aquatic_ws has no such
limits (it checks no answers and drops messages to a full connection queue).
shoal_ws_load_test keeps `--in-flight` requests waiting per connection.

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

from benchlib import (PortPicker, Sampler, cpu_list, latency_cell, latency_of, per_round_table, require_idle,
                      start, status_kib, stop, wait_for_port)


def set_keys(text, values):
    """Replaces `key = value` lines of a printed TOML config; fails on a missing key."""
    for key, value in values:
        text, count = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
        if count == 0:
            sys.exit(f"no key {key} in the printed config")
    return text


# shoal's per-client limits, raised for the load tester (see the bench documents).
PER_IP = """[per_ip]
# The load tester sends from one address, far more than one client may: the limit is
# raised so that it measures the tracker (the code path still runs).
requests_per_second = 1000000000
burst = 1000000000
max_connections = 0
"""


class Bench:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="shoal-ws-bench-")
        self.tracker_cpus = ",".join(map(str, cpu_list(args.tracker_cpus)))
        self.load_cpus = ",".join(map(str, cpu_list(args.load_cpus)))
        self.workers = args.workers or len(cpu_list(args.tracker_cpus))
        self.load_workers = args.load_workers or len(cpu_list(args.load_cpus))
        self.ports = PortPicker(args.port)
        self.unit = "connection" if args.handshakes else "message"
        subprocess.run([os.path.join(os.path.dirname(__file__), "..", "gen-tls.sh"), self.path("tls"), "localhost"],
                       check=True, stdout=subprocess.DEVNULL)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def printed_config(self, binary):
        return subprocess.run([binary, "-p"], capture_output=True, text=True, check=True).stdout

    def tracker_cmd(self, tracker, tls, port):
        a = self.a
        cert, key = self.path("tls/cert.pem"), self.path("tls/key.pem")
        if tracker in ("shoal", "shoal-before"):
            # Keys newer than a --baseline-dir build may be: the outgoing budget, and the
            # offer budget (a load tester's connection sends far more offers than a
            # browser's); --baseline-same-config says the baseline knows them all.
            older = tracker == "shoal-before" and not a.baseline_same_config
            budget = "" if older else (
                "max_outgoing_bytes_per_worker = 17179869184\nmax_offer_bytes_per_second = 0\n")
            outgoing_messages = 8192
            if a.queue_budget == "aquatic":
                # aquatic_ws's queue per connection (LOCAL_CHANNEL_SIZE in its socket
                # worker): 16 messages. It drops what does not fit; shoal_ws closes the
                # connection (its rule for a client that does not keep up).
                outgoing_messages = 16
                budget = "" if older else "max_offer_bytes_per_second = 0\n"
            elif a.queue_budget == "default":
                # shoal_ws's own defaults: 256 messages and 1 MiB a connection, 256 MiB
                # a socket worker.
                outgoing_messages = 256
                budget = "" if older else "max_offer_bytes_per_second = 0\n"
            network_extra = "".join(f"{line}\n" for line in (
                a.baseline_network if tracker == "shoal-before" else a.shoal_network))
            if a.handshakes and tracker == "shoal":
                # One address opens every connection: its handshakes under way must not
                # hit the per-client cap meant for one browser.
                network_extra += "max_tls_handshakes_per_client = 100000\n"
            config = self.write("shoal.toml", f"""
socket_workers = {self.workers}
swarm_workers = {a.swarm_workers}
[network]
address_ipv4 = "127.0.0.1:{port}"
use_ipv6 = false
enable_tls = {str(tls).lower()}
tls_certificate_path = "{cert}"
tls_private_key_path = "{key}"
max_connections = 1000000
{network_extra}[limits]
max_requests_per_second = 0
max_torrents_per_connection = 1000000
max_outgoing_messages = {outgoing_messages}
{budget}[protocol]
max_pending_offers = 1000
[statistics]
interval = 0
""" + PER_IP + ("" if older else "max_connections_per_network = 0\n"))
            binary_dir = a.baseline_dir if tracker == "shoal-before" else a.shoal_dir
            return [os.path.join(binary_dir, "shoal_ws"), "-c", config]
        if tracker == "aquatic":
            binary = os.path.join(a.aquatic_dir, "aquatic_ws")
            text = set_keys(self.printed_config(binary), [
                ("socket_workers", self.workers),
                ("swarm_workers", a.swarm_workers or max(1, self.workers // 4)),
                ("address", f'"127.0.0.1:{port}"'),
                ("enable_tls", str(tls).lower()),
                ("tls_certificate_path", f'"{cert}"'),
                ("tls_private_key_path", f'"{key}"'),
            ])
            return [binary, "-c", self.write("aquatic.toml", text)]
        raise ValueError(tracker)

    def load_cmd(self, load, tls, port, connections):
        a = self.a
        per_worker = max(1, connections // self.load_workers)
        if load == "shoal":
            binary = os.path.join(a.shoal_dir, "shoal_ws_load_test")
            network_extra, requests_extra = "", ""
            if a.handshakes:
                # Each connection: a handshake, an upgrade, one announce, a close, and
                # the next connection at once.
                network_extra = ("close_when_done = true\nreconnect_delay_ms = 0\n"
                                 f"tls_resumption = {str(a.handshakes == 'resumed').lower()}\n")
                requests_extra = "requests_per_connection = 1\nweight_scrape = 0\n"
            config = self.write("load.toml", SHOAL_LOAD_CONFIG.format(
                port=port, tls=str(tls).lower(), workers=self.load_workers, per_worker=per_worker,
                duration=a.duration, summarize=a.summarize, offers=0 if a.handshakes else a.offers,
                in_flight=a.in_flight, network_extra=network_extra, requests_extra=requests_extra))
            return [binary, "-c", config, "--json"]
        if load == "aquatic":
            binary = os.path.join(a.aquatic_dir, "aquatic_ws_load_test")
            text = set_keys(self.printed_config(binary), [
                ("server_address", f'"127.0.0.1:{port}"'),
                ("num_workers", self.load_workers),
                ("num_connections_per_worker", per_worker),
                ("duration", a.duration),
                # Its default opens one connection per 10 ms and starts its clock only
                # once all are open: 100 s of ramp-up at 10,000 connections, and no end
                # at all when a tracker closes some of them (shoal closes connections
                # that read too slowly). Open fast, and count time from the start.
                ("connection_creation_interval_ms", 1),
                ("measure_after_max_connections_reached", "false"),
                ("offers_per_request", a.offers),
            ])
            return [binary, "-c", self.write("aquatic-load.toml", text)]
        raise ValueError(load)

    def parse_load(self, load, text):
        """(messages/s from the tracker, error messages/s, latency percentiles in µs or None)"""
        if load == "shoal":
            data = json.loads([line for line in text.splitlines() if line.startswith("{")][-1])
            if self.a.handshakes:
                return data["connections_opened_per_second"], data["errors_per_second"], latency_of(data)
            return data["responses_per_second"], data["errors_per_second"], latency_of(data)
        # aquatic_ws_load_test prints progress every few seconds; average those in the window.
        responses = [float(x) for x in re.findall(r"Responses in: ([\d.]+)/second", text)]
        errors = [float(x) for x in re.findall(r"Error responses: +([\d.]+)", text)]
        if not responses:
            sys.exit(f"no progress lines in aquatic_ws_load_test's output:\n{text}")
        n = max(1, self.a.summarize // 5)
        return statistics.mean(responses[-n:]), (statistics.mean(errors[-n:]) if errors else 0.0), None

    def run_once(self, tracker, load, tls, connections):
        a = self.a
        port = self.ports.next_free()
        log = open(self.path(f"{tracker}.log"), "w")
        proc = start(self.tracker_cmd(tracker, tls, port), self.tracker_cpus, log)
        try:
            wait_for_port("127.0.0.1", port)
            with open(self.path("load.out"), "w") as out:
                load_proc = start(self.load_cmd(load, tls, port, connections), self.load_cpus, out)
                sampler = Sampler([proc.pid, load_proc.pid])
                sampler.start()
                try:
                    load_proc.wait(timeout=a.duration + 60)
                except subprocess.TimeoutExpired:
                    stop(load_proc)
                    sys.exit(f"the {load} load tester ran over its duration by a minute; stopped it")
                end = time.time()
                sampler.done.set()
                sampler.join()
            text = open(self.path("load.out")).read()
            if load_proc.returncode != 0:
                sys.exit(f"the {load} load tester failed:\n{text}")
            if proc.poll() is not None:
                sys.exit(f"{tracker} exited during the run; see {self.path(tracker + '.log')}")
            responses, errors, latency = self.parse_load(load, text)
            t0 = end - a.summarize
            cpu = sampler.cpu_between(proc.pid, t0, end)
            load_cpu = sampler.cpu_between(load_proc.pid, t0, end)
            return {"responses": responses, "errors": errors,
                    "cpu_us": cpu / max(1, responses * a.summarize) * 1e6,
                    "cores": cpu / a.summarize, "load_cores": load_cpu / a.summarize,
                    "rss_mib": status_kib(proc.pid, "VmHWM") / 1024, "latency": latency}
        finally:
            stop(proc)
            log.close()

    def cases(self):
        if self.a.handshakes:
            # New wss connections: only shoal's load tester closes and reopens them.
            for connections in self.a.connections:
                yield "shoal", True, connections
            return
        for connections in self.a.connections:
            for load in self.a.load_testers:
                for tls in ((False, True) if load == "shoal" else (True,)):
                    yield load, tls, connections

    def main(self):
        a = self.a
        require_idle(a.max_load, a.force)
        results = {}
        for case in self.cases():
            load, tls, connections = case
            for round_ in range(a.rounds):
                order = ["shoal", "aquatic"] if round_ % 2 == 0 else ["aquatic", "shoal"]
                if a.baseline_dir:
                    order.insert(round_ % 3, "shoal-before")
                if a.no_aquatic:
                    order.remove("aquatic")
                for tracker in order:
                    r = self.run_once(tracker, load, tls, connections)
                    results.setdefault(case + (tracker,), []).append(r)
                    print(f"[{'wss' if tls else 'ws'}, {connections} connections, {load} load, round {round_ + 1}] "
                          f"{tracker}: {r['responses']:.0f} {self.unit}s/s, {r['cpu_us']:.1f} µs CPU per {self.unit} "
                          f"({r['cores']:.2f} cores), load {r['load_cores']:.2f} cores, errors {r['errors']:.0f}/s, "
                          f"RSS {r['rss_mib']:.0f} MiB", file=sys.stderr)
        print(self.before_table(results) if a.no_aquatic else self.table(results))
        print(per_round_table(
            results, lambda case: f"{'wss' if case[1] else 'ws'}, {case[2]} connections, {case[0]} load"))

    def before_table(self, results):
        """shoal against --baseline-dir alone (--no-aquatic): medians and per-round ratios."""
        a = self.a
        out = [f"Tracker CPUs `{self.tracker_cpus}`, load CPUs `{self.load_cpus}`; {a.offers} offers per "
               f"announce; {a.rounds} rounds of {a.duration} s, last {a.summarize} s measured; medians; the "
               f"ratio is the median of per-round ratios.\n",
               "| transport | connections | shoal msg/s | shoal-before msg/s | ratio | shoal µs/msg | "
               "shoal-before µs/msg | peak RSS MiB (shoal, before) |",
               "|---|---|---|---|---|---|---|---|"]
        for case in self.cases():
            load, tls, connections = case
            get = lambda t: results[case + (t,)]
            med = lambda t, k: statistics.median(r[k] for r in get(t))
            ratio = statistics.median(s["responses"] / b["responses"]
                                      for s, b in zip(get("shoal"), get("shoal-before")) if b["responses"] > 0)
            out.append(f"| {'wss' if tls else 'ws'} | {connections} | {med('shoal', 'responses'):.0f} | "
                       f"{med('shoal-before', 'responses'):.0f} | **{ratio:.3f}×** | {med('shoal', 'cpu_us'):.1f} | "
                       f"{med('shoal-before', 'cpu_us'):.1f} | {med('shoal', 'rss_mib'):.0f}, "
                       f"{med('shoal-before', 'rss_mib'):.0f} |")
        return "\n".join(out)

    def table(self, results):
        a = self.a
        unit = "conn" if a.handshakes else "msg"
        out = [f"Tracker CPUs `{self.tracker_cpus}` ({self.workers} socket worker(s)), load CPUs `{self.load_cpus}` "
               f"({self.load_workers} load worker(s)); {0 if a.handshakes else a.offers} offers per announce; shoal_ws_load_test "
               f"with {a.in_flight} requests in flight per connection; {a.rounds} rounds of "
               f"{a.duration} s, last {a.summarize} s measured; medians; the ratio is the median of per-round ratios.\n",
               (f"Handshake mode ({a.handshakes} TLS sessions): each connection is a TLS handshake, "
                "an upgrade, one announce and a close; conn/s counts connections opened.\n" if a.handshakes else ""),
               f"| transport | connections | load tester | shoal {unit}/s | aquatic {unit}/s | shoal/aquatic | "
               f"shoal µs/{unit} | aquatic µs/{unit} | load cores (shoal run) | errors/s (shoal, aquatic) | "
               "peak RSS MiB (shoal, aquatic) |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        for case in self.cases():
            load, tls, connections = case
            get = lambda t: results[case + (t,)]
            med = lambda t, k: statistics.median(r[k] for r in get(t))
            ratio = statistics.median(s["responses"] / q["responses"]
                                      for s, q in zip(get("shoal"), get("aquatic")) if q["responses"] > 0) \
                if any(q["responses"] > 0 for q in get("aquatic")) else float("nan")
            out.append(f"| {'wss' if tls else 'ws'} | {connections} | {load} | {med('shoal', 'responses'):.0f} | "
                       f"{med('aquatic', 'responses'):.0f} | **{ratio:.2f}×** | {med('shoal', 'cpu_us'):.1f} | "
                       f"{med('aquatic', 'cpu_us'):.1f} | {med('shoal', 'load_cores'):.2f} | "
                       f"{max(r['errors'] for r in get('shoal')):.0f}, {max(r['errors'] for r in get('aquatic')):.0f} | "
                       f"{med('shoal', 'rss_mib'):.0f}, {med('aquatic', 'rss_mib'):.0f} |")
        shoal_cases = [case for case in self.cases() if case[0] == "shoal"]
        if shoal_cases:
            trackers = ["shoal", "aquatic"] + (["shoal-before"] if a.baseline_dir else [])
            out.append("\nReply latency under shoal_ws_load_test, µs, p50 / p99 / p99.9 / max (medians of rounds; "
                       "announce and scrape replies, from sending the request to reading its reply):\n")
            out.append("| transport | connections | " + " | ".join(trackers) + " |")
            out.append("|---|---|" + "---|" * len(trackers))
            for case in shoal_cases:
                _, tls, connections = case
                cells = [latency_cell(r["latency"] for r in results[case + (t,)]) for t in trackers]
                out.append(f"| {'wss' if tls else 'ws'} | {connections} | " + " | ".join(cells) + " |")
        if a.baseline_dir:
            out.append("\nshoal against the baseline build (`--baseline-dir`), same rounds:\n")
            out.append("| transport | connections | load tester | shoal/shoal-before | shoal-before/aquatic |")
            out.append("|---|---|---|---|---|")
            for case in self.cases():
                load, tls, connections = case
                get = lambda t: results[case + (t,)]
                before = statistics.median(s["responses"] / b["responses"]
                                           for s, b in zip(get("shoal"), get("shoal-before")) if b["responses"] > 0)
                before_aq = statistics.median(b["responses"] / q["responses"]
                                              for b, q in zip(get("shoal-before"), get("aquatic")) if q["responses"] > 0) \
                    if any(q["responses"] > 0 for q in get("aquatic")) else float("nan")
                out.append(f"| {'wss' if tls else 'ws'} | {connections} | {load} | **{before:.2f}×** | {before_aq:.2f}× |")
        return "\n".join(out)


# shoal_ws_load_test's config for one run (Bench.load_cmd fills it in).
SHOAL_LOAD_CONFIG = """
log_level = "warn"
server_address = "127.0.0.1:{port}"
workers = {workers}
connections_per_worker = {per_worker}
duration = {duration}
summarize_last = {summarize}
[network]
tls = {tls}
{network_extra}[requests]
offers_per_announce = {offers}
numwant = {offers}
in_flight = {in_flight}
{requests_extra}"""


def parser(description=__doc__):
    """The options of this bench; scripts built on it (private_ws.py) add their own."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", required=True)
    p.add_argument("--aquatic-dir", help="where aquatic_ws and aquatic_ws_load_test are (not with --no-aquatic)")
    p.add_argument("--shoal-network", action="append", default=[], metavar="KEY=VALUE",
                   help="a line for shoal's [network] (not the baseline's), e.g. socket_send_buffer_size=0")
    p.add_argument("--baseline-network", action="append", default=[], metavar="KEY=VALUE",
                   help="a [network] line for shoal-before (e.g. io_backend=\"io_uring\" with --baseline-dir "
                        "set to the same build, to compare the backends)")
    p.add_argument("--no-aquatic", action="store_true",
                   help="shoal against --baseline-dir only (the effect of one change); shoal's load tester")
    p.add_argument("--queue-budget", choices=["bench", "default", "aquatic"], default="bench",
                   help="shoal's outgoing queues: far above what the load testers need (bench), "
                        "shoal's defaults (default: 256 messages a connection, 256 MiB a worker), "
                        "or aquatic_ws's 16 messages a connection with shoal's per-worker default "
                        "(aquatic)")
    p.add_argument("--baseline-dir", help="a directory with an earlier shoal_ws, run as \"shoal-before\"")
    p.add_argument("--baseline-same-config", action="store_true",
                   help="give the baseline the current build's config: it knows every key")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--workers", type=int, default=0, help="socket workers (default: one per tracker CPU)")
    p.add_argument("--swarm-workers", type=int, default=0,
                   help="swarm workers for both trackers (default: shoal chooses; aquatic max(1, workers/4))")
    p.add_argument("--load-workers", type=int, default=0)
    p.add_argument("--connections", type=int, nargs="+", default=[1000, 10000],
                   help="connection counts to measure at (all load workers together)")
    p.add_argument("--offers", type=int, default=5, help="offers per announce")
    p.add_argument("--in-flight", type=int, default=4,
                   help="requests shoal_ws_load_test keeps waiting per connection")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=20)
    p.add_argument("--summarize", type=int, default=10)
    p.add_argument("--load-testers", nargs="+", default=["shoal", "aquatic"], choices=["shoal", "aquatic"])
    p.add_argument("--port", type=int, default=24000, help="first of the 200 ports runs use in turn")
    p.add_argument("--handshakes", choices=["resumed", "full"],
                   help="measure new wss connections per second instead of messages: each connection "
                        "closes after one announce and reopens at once, resuming its TLS session or not "
                        "(shoal's load tester only)")
    p.add_argument("--max-load", type=float, default=0.7)
    p.add_argument("--force", action="store_true")
    return p


def main():
    p = parser()
    a = p.parse_args()
    if a.no_aquatic:
        if not a.baseline_dir:
            p.error("--no-aquatic compares with --baseline-dir: give one")
        a.load_testers = ["shoal"]
    elif not a.aquatic_dir:
        p.error("--aquatic-dir is needed unless --no-aquatic")
    Bench(a).main()


if __name__ == "__main__":
    main()
