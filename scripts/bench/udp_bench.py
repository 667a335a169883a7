#!/usr/bin/env python3
"""Runs UDP trackers side by side under the same load and prints a markdown table.

For each load tester (shoal_udp_load_test, aquatic_udp_load_test) and each round, the
trackers run one after another (shoal, aquatic, floor, and opentracker when given; the
order rotates every round),
each pinned to the same CPUs with the same worker count, the load tester pinned to the
other CPUs with the same request mix. For every run it records:

- replies/s, as reported by the load tester over the last `--summarize` seconds;
- tracker CPU time (utime + stime from /proc) over that same window, per reply;
- load tester CPU time over that window, per request sent;
- the tracker's peak RSS (VmHWM).

With `--rate N --load-testers shoal` our load tester sends a fixed N requests a second
(open loop): every tracker that keeps up serves the same load, and CPU per reply (or
tracker cores) says what each needs for it, the figure an operator sizes by.

The table shows medians over the rounds and the ratio shoal/aquatic. "Own cost" is
CPU per reply minus the floor responder's: what the tracker adds to the kernel's
per-packet work. A memory run then announces 1M distinct peers over 100k torrents
to each tracker and reports the RSS growth per peer.

Only loopback addresses are used; every process is started here and ended by PID.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import CpuQuota, Sampler, cpu_list, latency_cell, latency_of, require_idle, start, status_kib, stop


def port_free(port, wait=3.0):
    """Whether 127.0.0.1:port can be bound, waiting up to `wait` seconds for it: a
    process that used io_uring (the floor's --io-uring) lets its socket go only after
    the kernel has torn its ring down, a moment after the process exits."""
    deadline = time.time() + wait
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            if time.time() >= deadline:
                return False
            time.sleep(0.05)
        finally:
            s.close()


def wait_for_port(port, timeout=10.0):
    """Waits until something answers a BEP 15 connect on 127.0.0.1:port."""
    deadline = time.time() + timeout
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    packet = (0x41727101980).to_bytes(8, "big") + (0).to_bytes(4, "big") + (7).to_bytes(4, "big")
    try:
        while time.time() < deadline:
            s.sendto(packet, ("127.0.0.1", port))
            try:
                data, _ = s.recvfrom(64)
                if len(data) >= 16:
                    return
            except socket.timeout:
                pass
        raise RuntimeError(f"nothing answers on 127.0.0.1:{port}")
    finally:
        s.close()


# shoal's per-client limits, raised for the load tester (see the bench documents).
PER_IP = """[per_ip]
# The load tester sends from one address, far more than one client may: the limit is
# raised so that it measures the tracker (the code path still runs).
requests_per_second = 1000000000
burst = 1000000000
max_connections = 0
"""



def tracker_toml(port, sections=""):
    """A shoal_udp config on 127.0.0.1:port as the UDP benches run it (30 peers per
    reply, no statistics lines, per-client limits raised), plus `sections`."""
    return f"""
[network]
address_ipv4 = "127.0.0.1:{port}"
use_ipv6 = false
[protocol]
max_peers = 30
default_peers = 30
[statistics]
interval = 0
{sections.strip()}
""" + PER_IP


def announce_load_toml(port, duration, summarize, torrents, peers, sockets=4, in_flight=None,
                       sequential=True):
    """A shoal_udp_load_test config that only announces (one worker, 30 peers wanted):
    every peer once in turn with `sequential`, at random otherwise."""
    network = f"sockets_per_worker = {sockets}"
    if in_flight is not None:
        network += f"\nrequests_in_flight = {in_flight}"
    order = 'popularity_shape = 0.0\npeer_order = "sequential"\n' if sequential else ""
    return f"""
server_address = "127.0.0.1:{port}"
workers = 1
duration = {duration}
summarize_last = {summarize}
report_interval = 5
log_level = "warn"
[network]
{network}
[requests]
torrents = {torrents}
peers = {peers}
weight_connect = 0
weight_announce = 1
weight_scrape = 0
peers_wanted = 30
{order}"""

class Bench:
    summarize = 10

    def __init__(self, args):
        self.a = args
        Bench.summarize = args.summarize
        self.tmp = tempfile.mkdtemp(prefix="shoal-bench-")
        self.tracker_cpus = ",".join(map(str, cpu_list(args.tracker_cpus)))
        self.load_cpus = ",".join(map(str, cpu_list(args.load_cpus)))
        self.workers = args.workers or len(cpu_list(args.tracker_cpus))
        self.load_workers = args.load_workers or len(cpu_list(args.load_cpus))
        share = getattr(args, "tracker_quota", None)
        self.quota = CpuQuota(share) if share else None

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    # --- trackers -------------------------------------------------------------

    def tracker_cmd(self, tracker, recv_buffer=None, statistics_interval=0):
        """The command line of `tracker`. For shoal: `recv_buffer` overrides
        --recv-buffer (0: the kernel's default), and `statistics_interval` > 0 prints
        a statistics line that often."""
        a, port = self.a, self.a.port
        if tracker in ("shoal", "shoal-before"):
            swarm = max(1, self.workers // 4) if a.swarm_workers is None else a.swarm_workers
            size = getattr(a, "recv_buffer", None) if recv_buffer is None else recv_buffer
            recv_buffer = "" if size is None else f"socket_recv_buffer_size = {size}\n"
            # More [network] keys, one per line (overload.py sets the overload buffer).
            recv_buffer += getattr(a, "shoal_network", "")
            config = self.write("shoal.toml", f"""
socket_workers = {self.workers}
swarm_workers = {swarm}
[network]
address_ipv4 = "127.0.0.1:{port}"
use_ipv6 = false
{recv_buffer}[protocol]
max_peers = 30
default_peers = 30
[statistics]
interval = {statistics_interval}
""" + ("" if tracker == "shoal-before" else PER_IP))
            binary_dir = a.baseline_dir if tracker == "shoal-before" else a.shoal_dir
            return [os.path.join(binary_dir, "shoal_udp"), "-c", config]
        if tracker == "aquatic":
            text = subprocess.run([os.path.join(a.aquatic_dir, "aquatic_udp"), "-p"],
                                  capture_output=True, text=True, check=True).stdout
            text = re.sub(r'^socket_workers = .*$', f"socket_workers = {self.workers}", text, flags=re.M)
            text = re.sub(r'^address = .*$', f'address = "127.0.0.1:{port}"', text, flags=re.M)
            return [os.path.join(a.aquatic_dir, "aquatic_udp"), "-c", self.write("aquatic.toml", text)]
        if tracker == "floor":
            return [os.path.join(a.shoal_dir, "shoal_udp_floor"), f"127.0.0.1:{port}"]
        if tracker.startswith("opentracker"):
            # Debian's opentracker serves only whitelisted torrents: list every torrent
            # of the load (the load tester prints them), inside the chroot it uses.
            memory = tracker.endswith("mem")
            root = self.path("opentracker-root")
            os.makedirs(root, exist_ok=True)
            os.chmod(root, 0o755)
            load_config = self.load_cmd("shoal", 1, 0, memory=memory)[2]
            with open(os.path.join(root, "whitelist.txt"), "w") as f:
                subprocess.run([os.path.join(a.shoal_dir, "shoal_udp_load_test"), "-c", load_config,
                                "--print-info-hashes"], stdout=f, stderr=subprocess.DEVNULL, check=True)
            os.chmod(os.path.join(root, "whitelist.txt"), 0o644)
            config = self.write("opentracker.conf", f"listen.udp.workers {self.workers}\n"
                                                    f"tracker.rootdir {root}\naccess.whitelist /whitelist.txt\n")
            return [a.opentracker, "-f", config, "-i", "127.0.0.1", "-P", str(port), "-p", str(port),
                    "-u", "nobody"]
        raise ValueError(tracker)

    # --- load testers -----------------------------------------------------------

    def load_cmd(self, load, duration, summarize, memory=False):
        a, port = self.a, self.a.port
        if load == "shoal":
            ips = ", ".join(f'"127.0.0.{i + 1}"' for i in range(max(1, self.load_workers * 4 if self.workers > 1 else 1)))
            if memory:
                requests = f"""
torrents = {a.memory_torrents}
peers = {a.memory_peers}
popularity_shape = 0.0
weight_connect = 0
weight_announce = 1
weight_scrape = 0
peers_wanted = 30
peer_order = "sequential"
"""
            else:
                # aquatic_udp_load_test's defaults, so both load testers send the same mix.
                torrents = getattr(a, "torrents", 1_000_000)
                requests = f"""
torrents = {torrents}
peers = {2 * torrents}
peers_wanted = 30
seeder_probability = 0.75
weight_connect = 50
weight_announce = 50
weight_scrape = 1
scrape_max_torrents = 10
"""
            window, rate = getattr(a, "in_flight", None), getattr(a, "rate", None)
            in_flight = f"\nrequests_in_flight = {window}" if window and not memory else ""
            in_flight += f"\nrequests_per_second = {rate}" if rate and not memory else ""
            config = self.write(f"load-{'mem' if memory else 'run'}.toml", f"""
server_address = "127.0.0.1:{port}"
workers = {self.load_workers}
duration = {duration}
summarize_last = {summarize}
report_interval = 5
log_level = "warn"
[network]
sockets_per_worker = 4
source_ips = [{ips}]{in_flight}
[requests]
{requests}
""")
            return [os.path.join(a.shoal_dir, "shoal_udp_load_test"), "-c", config, "--json"]
        if load == "aquatic":
            text = subprocess.run([os.path.join(a.aquatic_dir, "aquatic_udp_load_test"), "-p"],
                                  capture_output=True, text=True, check=True).stdout
            for key, value in [("server_address", f'"127.0.0.1:{port}"'), ("workers", self.load_workers),
                               ("duration", duration), ("summarize_last", summarize),
                               ("extra_statistics", "false"),
                               ("number_of_torrents", getattr(a, "torrents", 1_000_000)),
                               ("number_of_peers", 2 * getattr(a, "torrents", 1_000_000))]:
                text = re.sub(rf'^{key} = .*$', f"{key} = {value}", text, flags=re.M)
            return [os.path.join(a.aquatic_dir, "aquatic_udp_load_test"), "-c", self.write("aquatic-load.toml", text)]
        raise ValueError(load)

    @staticmethod
    def parse_load_output(load, text):
        """(replies/s, requests/s or None, unanswered share or None, error replies/s,
        latency percentiles in µs or None)"""
        if load == "shoal":
            line = [l for l in text.splitlines() if l.startswith("{")][-1]
            data = json.loads(line)
            return (data["replies_per_second"], data["requests_per_second"], data["unanswered"],
                    data["errors_per_second"], latency_of(data))
        report = text[text.index("# aquatic load test report"):]
        replies = float(re.search(r"Average responses per second: ([\d.]+)", report).group(1))
        errors = float(re.search(r"Error responses: +([\d.]+)", report).group(1))
        # Its summary has no request rate; its 5-second progress lines do. Average the
        # ones inside the summarized window (the last `summarize` seconds).
        progress = [float(x) for x in re.findall(r"Requests out: ([\d.]+)/second", text[:text.index("# aquatic")])]
        window = progress[-max(1, Bench.summarize // 5):] if progress else []
        requests = sum(window) / len(window) if window else None
        unanswered = max(0.0, 1 - replies / requests) if requests else None
        return replies, requests, unanswered, errors, None

    # --- one run ----------------------------------------------------------------

    def run_once(self, tracker, load):
        a = self.a
        if not port_free(a.port):
            sys.exit(f"port {a.port} is in use; stop whatever holds it (a leftover tracker?)")
        tracker_log = open(self.path(f"{tracker}.log"), "w")
        proc = start(self.tracker_cmd(tracker), self.tracker_cpus, tracker_log)
        if self.quota:
            self.quota.add(proc.pid)
        try:
            wait_for_port(a.port)
            load_log = self.path("load.out")
            with open(load_log, "w") as out:
                load_proc = start(self.load_cmd(load, a.duration, a.summarize), self.load_cpus, out)
                sampler = Sampler([proc.pid, load_proc.pid])
                sampler.start()
                load_proc.wait()
                end = time.time()
                sampler.done.set()
                sampler.join()
            if proc.poll() is not None:
                sys.exit(f"{tracker} exited during the run; see {self.path(tracker + '.log')}")
            text = open(load_log).read()
            if load_proc.returncode != 0:
                sys.exit(f"the {load} load tester failed:\n{text}")
            replies, requests, unanswered, errors, latency = self.parse_load_output(load, text)
            t0 = end - a.summarize
            tracker_cpu = sampler.cpu_between(proc.pid, t0, end)
            load_cpu = sampler.cpu_between(load_proc.pid, t0, end)
            rss_mib = status_kib(proc.pid, "VmHWM") / 1024
            return {
                "replies": replies,
                "cpu_per_reply_us": tracker_cpu / (replies * a.summarize) * 1e6,
                "tracker_cores": tracker_cpu / a.summarize,
                "load_cpu_per_request_us": load_cpu / ((requests or replies) * a.summarize) * 1e6,
                "load_cores": load_cpu / a.summarize,
                "rss_mib": rss_mib,
                "unanswered": unanswered,
                "errors": errors,
                "latency": latency,
            }
        finally:
            stop(proc)
            tracker_log.close()

    def memory_run(self, tracker):
        """(RSS before MiB, RSS after MiB, bytes per peer, torrents held or None).

        shoal prints its statistics every second here, so the torrents it holds are
        known: the load tester spreads its peers over the torrents at random, and with
        as many peers as torrents about 63% of them get one.
        """
        a = self.a
        if not port_free(a.port):
            sys.exit(f"port {a.port} is in use")
        log_path = self.path(f"{tracker}-mem.log")
        log = open(log_path, "w")
        command = self.tracker_cmd("opentracker-mem" if tracker == "opentracker" else tracker,
                                   statistics_interval=1 if tracker == "shoal" else 0)
        proc = start(command, self.tracker_cpus, log)
        try:
            wait_for_port(a.port)
            # opentracker loads its whitelist in the background after it starts answering.
            time.sleep(3 if tracker == "opentracker" else 0)
            time.sleep(0.5)
            before = status_kib(proc.pid, "VmRSS")
            with open(self.path("load-mem.out"), "w") as out:
                load = start(self.load_cmd("shoal", a.memory_duration, 0, memory=True), self.load_cpus, out)
                load.wait()
            if load.returncode != 0:
                sys.exit(f"the memory load failed:\n{open(self.path('load-mem.out')).read()}")
            # Long enough for a statistics line after the last announce.
            time.sleep(1.5)
            after = status_kib(proc.pid, "VmRSS")
            torrents = None
            if tracker == "shoal":
                counts = re.findall(r"torrents (\d+), peers (\d+)", open(log_path).read())
                if not counts:
                    sys.exit(f"shoal_udp printed no statistics line in {log_path}")
                torrents = int(counts[-1][0])
            return before / 1024, after / 1024, (after - before) * 1024 / a.memory_peers, torrents
        finally:
            stop(proc)
            log.close()

    # --- everything -------------------------------------------------------------

    def main(self):
        a = self.a
        require_idle(a.max_load, a.force)
        results = {}
        for load in ([] if a.memory_only else a.load_testers):
            trackers = ["shoal", "aquatic", "floor"]
            if a.opentracker and load == "shoal":
                trackers.append("opentracker")
            if a.baseline_dir:
                trackers.append("shoal-before")
            for round_ in range(a.rounds):
                k = round_ % len(trackers)
                order = trackers[k:] + trackers[:k]
                for tracker in order:
                    r = self.run_once(tracker, load)
                    results.setdefault((load, tracker), []).append(r)
                    print(f"[{load} load, round {round_ + 1}] {tracker}: {r['replies']:.0f} replies/s, "
                          f"{r['cpu_per_reply_us']:.2f} µs CPU/reply ({r['tracker_cores']:.2f} cores), "
                          f"load tester {r['load_cpu_per_request_us']:.2f} µs/request "
                          f"({r['load_cores']:.2f} cores), peak RSS {r['rss_mib']:.0f} MiB", file=sys.stderr)
        memory = {}
        if not a.skip_memory:
            for tracker in ["shoal", "aquatic"] + (["opentracker"] if a.opentracker else []):
                memory[tracker] = self.memory_run(tracker)
                b, af, per, torrents = memory[tracker]
                held = "" if torrents is None else f", {torrents} torrents held"
                print(f"[memory] {tracker}: RSS {b:.0f} -> {af:.0f} MiB, {per:.1f} bytes/peer{held}",
                      file=sys.stderr)
        print(self.table(results, memory))


    def table(self, results, memory):
        a = self.a
        out = []
        out.append(f"Tracker CPUs `{self.tracker_cpus}` ({self.workers} socket workers), load CPUs "
                   f"`{self.load_cpus}` ({self.load_workers} load workers); {a.rounds} rounds of {a.duration} s, "
                   f"last {a.summarize} s measured; medians.\n")
        for load in ([] if a.memory_only else a.load_testers):
            names = ["shoal", "shoal-before", "aquatic", "opentracker", "floor"]
            rows = {t: results[(load, t)] for t in names if (load, t) in results}
            med = {t: {k: statistics.median(r[k] for r in rs) for k in ["replies", "cpu_per_reply_us", "rss_mib",
                                                                             "load_cpu_per_request_us", "load_cores",
                                                                             "tracker_cores"]}
                   for t, rs in rows.items()}
            floor = med["floor"]["cpu_per_reply_us"]
            out.append(f"Load tester: **{load}_udp_load_test**\n")
            out.append("| tracker | replies/s | tracker cores | CPU µs/reply | own cost µs/reply (− floor) | "
                       "peak RSS MiB | load tester µs/request (cores) | reply latency µs p50 / p99 / p99.9 / max |")
            out.append("|---|---|---|---|---|---|---|---|")
            for t in rows:
                m = med[t]
                own = "—" if t == "floor" else f"{m['cpu_per_reply_us'] - floor:.2f}"
                out.append(f"| {t} | {m['replies']:.0f} | {m['tracker_cores']:.2f} | {m['cpu_per_reply_us']:.2f} | "
                           f"{own} | {m['rss_mib']:.0f} | {m['load_cpu_per_request_us']:.2f} "
                           f"({m['load_cores']:.2f}) | {latency_cell(r['latency'] for r in rows[t])} |")
            s, q = med["shoal"], med["aquatic"]
            own_s = s["cpu_per_reply_us"] - floor
            own_q = q["cpu_per_reply_us"] - floor
            out.append("")
            out.append(f"- medians: shoal/aquatic replies/s {s['replies'] / q['replies']:.2f}×; "
                       f"CPU per reply: {s['cpu_per_reply_us'] / q['cpu_per_reply_us']:.2f}×; "
                       f"own cost: {own_s:.2f} vs {own_q:.2f} µs "
                       f"({own_s / own_q if own_q > 0 else float('nan'):.2f}×)")
            # Rounds ran back to back, so ratios within a round cancel the machine's drift.
            pairs = list(zip(results[(load, "shoal")], results[(load, "aquatic")], results[(load, "floor")]))
            speed = [sh["replies"] / aq["replies"] for sh, aq, _ in pairs]
            own = [(sh["cpu_per_reply_us"] - fl["cpu_per_reply_us"]) / (aq["cpu_per_reply_us"] - fl["cpu_per_reply_us"])
                   for sh, aq, fl in pairs if aq["cpu_per_reply_us"] > fl["cpu_per_reply_us"]]
            out.append(f"- per round, shoal/aquatic replies/s: {', '.join(f'{r:.2f}' for r in speed)} "
                       f"(median **{statistics.median(speed):.2f}×**)")
            cpu = [sh["cpu_per_reply_us"] / aq["cpu_per_reply_us"] for sh, aq, _ in pairs]
            out.append(f"- per round, shoal/aquatic CPU per reply: {', '.join(f'{r:.2f}' for r in cpu)} "
                       f"(median **{statistics.median(cpu):.2f}×**)")
            if own:
                out.append(f"- per round, shoal/aquatic own cost: {', '.join(f'{r:.2f}' for r in own)} "
                           f"(median **{statistics.median(own):.2f}×**)")
            if "shoal-before" in rows:
                before = [sh["replies"] / sb["replies"]
                          for sh, sb in zip(results[(load, "shoal")], results[(load, "shoal-before")])]
                before_aq = [sb["replies"] / aq["replies"]
                             for sb, aq in zip(results[(load, "shoal-before")], results[(load, "aquatic")])]
                out.append(f"- per round, shoal/shoal-before replies/s: {', '.join(f'{r:.2f}' for r in before)} "
                           f"(median **{statistics.median(before):.2f}×**); shoal-before/aquatic "
                           f"{statistics.median(before_aq):.2f}×")
            if "opentracker" in rows:
                vs_ot = [sh["replies"] / ot["replies"]
                         for sh, ot in zip(results[(load, "shoal")], results[(load, "opentracker")])]
                out.append(f"- per round, shoal/opentracker replies/s: {', '.join(f'{r:.2f}' for r in vs_ot)} "
                           f"(median **{statistics.median(vs_ot):.2f}×**; opentracker checks every announce "
                           f"against its whitelist)")
                cpu_ot = [sh["cpu_per_reply_us"] / ot["cpu_per_reply_us"]
                          for sh, ot in zip(results[(load, "shoal")], results[(load, "opentracker")])]
                out.append(f"- per round, shoal/opentracker CPU per reply: "
                           f"{', '.join(f'{r:.2f}' for r in cpu_ot)} (median **{statistics.median(cpu_ot):.2f}×**)")
            busy = max(m["load_cores"] for m in med.values()) / len(cpu_list(self.a.load_cpus))
            if busy > 0.9:
                out.append(f"- the load tester used up to {busy * 100:.0f}% of its CPUs: it is close to being "
                           f"the limit, so compare CPU per reply more than replies/s")
            errors = {t: max(r["errors"] for r in results[(load, t)]) for t in ["shoal", "aquatic"]}
            out.append(f"- error replies/s, highest of any round: shoal {errors['shoal']:.0f}, "
                       f"aquatic {errors['aquatic']:.0f}")
            for t in ["shoal", "aquatic"]:
                unanswered = [r["unanswered"] for r in results[(load, t)] if r["unanswered"] is not None]
                if unanswered:
                    out.append(f"- requests left unanswered with {t}: up to {max(unanswered) * 100:.2f}%")
            out.append("")
        if memory:
            out.append("Memory: 1M distinct peers announced over 100k torrents (our load tester, sequential peers).\n")
            out.append("| tracker | RSS before MiB | RSS after MiB | bytes per peer | torrents held |")
            out.append("|---|---|---|---|---|")
            for t, (b, af, per, torrents) in memory.items():
                out.append(f"| {t} | {b:.0f} | {af:.0f} | {per:.1f} | {'' if torrents is None else torrents} |")
            out.append(f"\n- shoal/aquatic bytes per peer: **{memory['shoal'][2] / memory['aquatic'][2]:.2f}×**")
            if "opentracker" in memory:
                out.append(f"- shoal/opentracker bytes per peer: "
                           f"**{memory['shoal'][2] / memory['opentracker'][2]:.2f}×**")
        return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", required=True)
    p.add_argument("--aquatic-dir", required=True)
    p.add_argument("--opentracker", help="path of an opentracker binary to compare too (Debian's build)")
    p.add_argument("--baseline-dir",
                   help="a directory with an earlier shoal_udp, run as \"shoal-before\" in the same rounds")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--workers", type=int, default=0, help="socket workers (default: one per tracker CPU)")
    p.add_argument("--swarm-workers", type=int, default=None,
                   help="shoal swarm workers (default: max(1, workers/4); 0: the socket worker keeps the torrents)")
    p.add_argument("--load-workers", type=int, default=0, help="load tester workers (default: one per load CPU)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=20)
    p.add_argument("--summarize", type=int, default=10)
    p.add_argument("--load-testers", nargs="+", default=["shoal", "aquatic"], choices=["shoal", "aquatic"])
    p.add_argument("--rate", type=int,
                   help="our load tester sends this many requests per second whatever comes back "
                        "(open loop), so every tracker serves the same load and CPU per reply compares "
                        "them; needs --load-testers shoal (aquatic's load tester has no fixed rate)")
    p.add_argument("--port", type=int, default=3999)
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--memory-only", action="store_true", help="only the memory-per-peer run")
    p.add_argument("--memory-duration", type=int, default=25)
    p.add_argument("--memory-peers", type=int, default=1_000_000,
                   help="distinct peers the memory run announces (bytes are per peer)")
    p.add_argument("--memory-torrents", type=int, default=100_000,
                   help="torrents they spread over (peers = torrents: about bytes per torrent)")
    p.add_argument("--max-load", type=float, default=0.7, help="refuse to run above this 1-minute load average")
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    if a.rate and "aquatic" in a.load_testers:
        p.error("--rate drives our load tester only: add --load-testers shoal")
    Bench(a).main()


if __name__ == "__main__":
    main()
