"""Helpers shared by the benchmark scripts: pinning, CPU and memory from /proc, and
sampling a process's CPU time over exactly the window a load tester measures."""

import os
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


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
