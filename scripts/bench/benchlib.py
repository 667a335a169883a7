"""Helpers shared by the benchmark scripts: pinning, CPU and memory from /proc, and
sampling a process's CPU time over exactly the window a load tester measures."""

import json
import os
import statistics
import sys
import socket
import subprocess
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_list(text):
    """'0-3,8' -> [0, 1, 2, 3, 8]"""
    cpus = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.extend(range(int(a), int(b) + 1))
        else:
            cpus.append(int(part))
    return cpus


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    """Samples CPU seconds of some processes every 100 ms until stopped."""

    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids = pids
        self.samples = []  # (time, {pid: cpu})
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                self.samples.append((time.time(), {p: cpu_seconds(p) for p in self.pids}))
            except (FileNotFoundError, ProcessLookupError):
                pass
            time.sleep(0.1)

    def cpu_between(self, pid, t0, t1):
        """CPU seconds of pid between t0 and t1, interpolated from samples."""

        def at(t):
            before = [(ts, v[pid]) for ts, v in self.samples if ts <= t and pid in v]
            after = [(ts, v[pid]) for ts, v in self.samples if ts >= t and pid in v]
            if not before:
                return after[0][1]
            if not after:
                return before[-1][1]
            (ta, va), (tb, vb) = before[-1], after[0]
            return va if tb == ta else va + (vb - va) * (t - ta) / (tb - ta)

        return at(t1) - at(t0)


def start(cmd, cpus, log):
    return subprocess.Popen(["taskset", "-c", cpus] + cmd, stdout=log, stderr=subprocess.STDOUT)


class CpuQuota:
    """A cgroup that caps the processes put in it at `share` of one CPU (enforced
    every 10 ms), so that a tracker is the limit of a run even on a machine with no
    core to spare for more load: cgroup v2's cpu.max, or v1's cpu controller.
    Needs root; removed at exit."""

    PERIOD_US = 10_000

    def __init__(self, share, name="shoal-bench"):
        if not 0 < share <= 1:
            sys.exit(f"--tracker-quota {share}: must be above 0 and at most 1 (a share of one CPU)")
        quota = int(self.PERIOD_US * share)
        v2 = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(v2) and "cpu" in open(v2).read().split():
            self.path = f"/sys/fs/cgroup/{name}"
            files = {"cpu.max": f"{quota} {self.PERIOD_US}"}
        elif os.path.isdir("/sys/fs/cgroup/cpu"):
            self.path = f"/sys/fs/cgroup/cpu/{name}"
            files = {"cpu.cfs_period_us": str(self.PERIOD_US), "cpu.cfs_quota_us": str(quota)}
        else:
            sys.exit("--tracker-quota needs a cgroup cpu controller (/sys/fs/cgroup)")
        try:
            os.makedirs(self.path, exist_ok=True)
            for name_, value in files.items():
                with open(os.path.join(self.path, name_), "w") as f:
                    f.write(value)
        except OSError as err:
            sys.exit(f"--tracker-quota: cannot set up {self.path}: {err} (root is needed)")
        import atexit
        atexit.register(self.remove)

    def add(self, pid):
        """Moves process `pid`, all its threads, into the cgroup."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def children(pid):
    """Processes whose parent is `pid` (nginx's workers, forked by its master)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found


def port_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_for_port(host, port, timeout=10.0):
    """Returns once something accepts TCP connections on host:port."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port}")


class PortPicker:
    """A fresh TCP port per run: the previous server's closing connections (FIN_WAIT
    after many short connections) can hold its port for a while. Ports are taken from
    200 starting at `base`, which should lie below the kernel's ephemeral range
    (32768 and up by default), where the load tester's own connections and their
    TIME_WAIT live; a port still busy is skipped."""

    def __init__(self, base):
        self.base = base
        self.runs = 0

    def next_free(self):
        for _ in range(200):
            port = self.base + self.runs % 200
            self.runs += 1
            if port_free(port):
                return port
        raise RuntimeError(f"no free port in {self.base}..{self.base + 199}")


def latency_of(summary):
    """(p50, p99, p99.9, max) in µs from a shoal load tester's JSON summary, if it has them."""
    latency = summary.get("latency_us")
    if not latency or not latency.get("count"):
        return None
    return tuple(latency[k] for k in ("p50", "p99", "p999", "max"))


def latency_cell(latencies):
    """Medians over rounds of each percentile, or a dash when the load tester has none."""
    known = [l for l in latencies if l]
    if not known:
        return "—"
    return " / ".join(f"{statistics.median(l[i] for l in known):.0f}" for i in range(4))


def last_json(path):
    """The last JSON line a load tester (`--json`) printed into `path`."""
    with open(path) as f:
        return json.loads([line for line in f.read().splitlines() if line.startswith("{")][-1])


AQUATIC_VERSION = "0.9.0"


def require_binaries(directory, names, hint):
    """Exits with `hint` unless every one of `names` is an executable in `directory`:
    a bench that finds one missing half-way loses the rounds it already ran."""
    missing = [n for n in names if not os.access(os.path.join(directory, n), os.X_OK)]
    if missing:
        sys.exit(f"missing in {directory}: {', '.join(missing)}; {hint}")


def install_aquatic(bin_dir, names):
    """Installs aquatic's `names` (crates of the same names, AQUATIC_VERSION) into
    `bin_dir`'s parent with `cargo install`, those not there yet, as the bench shell
    scripts do. Not --locked: aquatic_udp's locked dependencies no longer build."""
    if os.path.basename(os.path.normpath(bin_dir)) != "bin":
        require_binaries(bin_dir, names, f"install them with cargo install --root DIR NAME "
                                         f"--version {AQUATIC_VERSION} and pass DIR/bin")
        return
    root = os.path.dirname(os.path.normpath(bin_dir))
    for name in names:
        if not os.access(os.path.join(bin_dir, name), os.X_OK):
            print(f"==> installing {name} {AQUATIC_VERSION} into {root}", file=sys.stderr, flush=True)
            subprocess.run(["cargo", "install", "--root", root, name, "--version", AQUATIC_VERSION],
                           check=True)


def require_idle(max_load, force):
    """Exits unless the 1-minute load average is at most `max_load` (or `force`): a
    build or another bench in the background halves a tracker's throughput."""
    load1 = os.getloadavg()[0]
    if load1 > max_load and not force:
        sys.exit(f"load average {load1:.2f} > {max_load}: the machine is busy; measure on an idle "
                 f"machine (or pass --force)")


def per_round_table(results, describe):
    """Every round's figures, for the record beside the medians and the medians of
    per-round ratios (which the medians shown cannot recompute): one line per case and
    server, each round's rate and CPU per answer. `results` maps (case..., server) to
    the rounds' dicts ("responses", "cpu_us"); `describe(key)` words the case."""
    rounds = max((len(rs) for rs in results.values()), default=0)
    out = ["\nEvery round (rate/s, µs CPU per answer), in the order run:\n",
           "| case | server | " + " | ".join(f"round {n + 1}" for n in range(rounds)) + " |",
           "|---|---|" + "---|" * rounds]
    for key in sorted(results, key=str):
        cells = [f"{r['responses']:.0f} ({r['cpu_us']:.1f})" for r in results[key]]
        cells += [""] * (rounds - len(cells))
        out.append(f"| {describe(key[:-1])} | {key[-1]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


PRIVATE_TRACKERS = ("public", "private", "accounting")


def private_rounds(run_once, rounds, rate, unit, files):
    """Private mode against public, with and without accounting, in rotating order:
    `run_once(tracker)` (a name of PRIVATE_TRACKERS) returns a dict with `rate` (the
    key named so), `cpu_us` and `rss_mib`. Prints each round as it ends, then every
    round's figures, the ratios to public in the same round and their medians."""
    trackers = PRIVATE_TRACKERS
    rows = []
    for round_ in range(rounds):
        order = trackers[round_ % 3:] + trackers[:round_ % 3]
        results = {tracker: run_once(tracker) for tracker in order}
        rows.append(results)
        public = results["public"][rate]
        print(f"round {round_ + 1} ({', '.join(order)}): " + ", ".join(
            f"{t} {results[t][rate]:,.0f}/s ({results[t][rate] / public:.3f}x, "
            f"{results[t]['cpu_us']:.2f} µs)" for t in trackers), flush=True)
    print()
    print(f"| round | public {unit}/s | private | ratio | accounting | ratio | "
          f"CPU/{unit} µs (public, private, accounting) |")
    print("|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        p, q, s = (r[t][rate] for t in trackers)
        print(f"| {i + 1} | {p:,.0f} | {q:,.0f} | {q / p:.3f}x | {s:,.0f} | {s / p:.3f}x | "
              + ", ".join(f"{r[t]['cpu_us']:.2f}" for t in trackers) + " |")
    medians = {t: statistics.median(r[t][rate] for r in rows) for t in trackers}
    ratios = {t: statistics.median(r[t][rate] / r["public"][rate] for r in rows) for t in trackers}
    cpu = {t: statistics.median(r[t]["cpu_us"] for r in rows) for t in trackers}
    print(f"| median | {medians['public']:,.0f} | {medians['private']:,.0f} | {ratios['private']:.3f}x | "
          f"{medians['accounting']:,.0f} | {ratios['accounting']:.3f}x | "
          + ", ".join(f"{cpu[t]:.2f}" for t in trackers) + " |")
    print()
    print("Peak resident memory, last round: " + ", ".join(
        f"{t} {rows[-1][t]['rss_mib']:.0f} MiB" for t in trackers))
    print(f"(ratios are medians of the per-round ratios; files under {files})")
    return rows


def bench_arguments(description, port, rounds=3):
    """A parser with the options every side-by-side bench takes: the build, the CPUs
    of the tracker and of the load, the first port, rounds, and the idle check."""
    import argparse
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal-dir", required=True)
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--max-load", type=float, default=0.7, help="refuse to start above this 1-minute load average")
    p.add_argument("--force", action="store_true", help="start whatever the load average")
    return p
