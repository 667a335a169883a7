#!/usr/bin/env python3
"""A flood of fresh info hashes from many addresses against shoal_udp with its
defaults (issue 41, item 4), and whether an honest torrent still gets in.

shoal_udp runs with its built-in defaults (only the address changed: no per-client
limit raised), so each flooding address is held to the default request rate and new-
torrent allowance. shoal_udp_load_test floods it from --addresses loopback addresses
(one socket each) for --seconds, announce-only, with --torrents equally popular
torrents and as many peers: nearly every announce names a torrent nobody else has.
Each address sends --rate-per-address requests a second, just under the default
per-client rate (100 a second): faster addresses would only get themselves banned,
so this is the most a flood of that many addresses gets through.
RSS is sampled each second. Afterwards two honest clients (two other addresses)
announce a torrent nobody knows: the second must be counted with the first and get
it as a peer. Prints a markdown report. Loopback only; every process it starts is
stopped by pid.

  scripts/bench/fresh_flood.py --bin-dir target/release
"""

import argparse
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import status_kib  # noqa: E402

MiB = 1024 * 1024
MAGIC = 0x41727101980


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss(pid):
    return status_kib(pid, "VmRSS") * 1024


class Client:
    def __init__(self, source, port):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((source, 0))
        self.sock.settimeout(2)
        self.server = ("127.0.0.1", port)

    def call(self, packet, tid):
        for _ in range(5):
            self.sock.sendto(packet, self.server)
            try:
                while True:
                    data, _ = self.sock.recvfrom(4096)
                    if struct.unpack(">I", data[4:8])[0] == tid:
                        return data
            except socket.timeout:
                continue
        raise RuntimeError("no reply")

    def announce(self, info_hash, port):
        tid = random.getrandbits(32)
        conn = struct.unpack(">Q", self.call(struct.pack(">QII", MAGIC, 0, tid), tid)[8:16])[0]
        tid = random.getrandbits(32)
        packet = struct.pack(">QII", conn, 1, tid) + info_hash + b"-HONEST-" + os.urandom(12)
        packet += struct.pack(">QQQIIIiH", 0, 100, 0, 2, 0, 0, 50, port)
        data = self.call(packet, tid)
        action = struct.unpack(">I", data[:4])[0]
        if action != 1:
            return f"refused: {data[8:].decode(errors='replace')}"
        _, _, _, leechers, seeders = struct.unpack(">IIIII", data[:20])
        peers = [(socket.inet_ntoa(data[i:i + 4]), struct.unpack(">H", data[i + 4:i + 6])[0])
                 for i in range(20, len(data), 6)]
        return leechers + seeders, peers


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--addresses", type=int, default=2000)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--torrents", type=int, default=20_000_000)
    p.add_argument("--rate-per-address", type=int, default=90)
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="shoal-fresh-flood-")
    port = free_port()
    tracker_config = os.path.join(tmp, "tracker.toml")
    with open(tracker_config, "w") as f:
        f.write(f'[network]\naddress_ipv4 = "127.0.0.1:{port}"\nuse_ipv6 = false\n[statistics]\ninterval = 10\n')
    sources = ", ".join(f'"127.{10 + n // 250}.{n % 250}.1"' for n in range(a.addresses))
    load_config = os.path.join(tmp, "load.toml")
    with open(load_config, "w") as f:
        # One socket per address, at most 1,000 per load worker.
        workers = -(-a.addresses // 1000)
        f.write(f'server_address = "127.0.0.1:{port}"\nworkers = {workers}\nduration = {a.seconds}\n'
                f"summarize_last = {a.seconds}\nreport_interval = 10\n"
                f"[network]\nsockets_per_worker = {-(-a.addresses // workers)}\nsource_ips = [{sources}]\n"
                f"requests_per_second = {a.addresses * a.rate_per_address}\n"
                f"[requests]\ntorrents = {a.torrents}\npeers = {a.torrents}\npopularity_shape = 0.0\n"
                f"weight_connect = 1\nweight_announce = 100\nweight_scrape = 0\n")
    log = open(os.path.join(tmp, "tracker.log"), "w")
    tracker = subprocess.Popen(["taskset", "-c", a.tracker_cpus, os.path.join(a.bin_dir, "shoal_udp"),
                                "-c", tracker_config], stdout=log, stderr=subprocess.STDOUT)
    samples = []
    try:
        time.sleep(1)
        started = rss(tracker.pid)
        # To a file, not a pipe: a pipe nobody reads until the end would stop it.
        load_log = open(os.path.join(tmp, "load.log"), "w")
        load = subprocess.Popen(["taskset", "-c", a.load_cpus, os.path.join(a.bin_dir, "shoal_udp_load_test"),
                                 "-c", load_config], stdout=load_log, stderr=subprocess.STDOUT)
        begun = time.time()
        while load.poll() is None:
            samples.append((time.time() - begun, rss(tracker.pid)))
            time.sleep(1)
        load_log.close()
        load_out = open(os.path.join(tmp, "load.log"), errors="replace").read()
        if load.returncode != 0:
            sys.exit(f"the load tester failed:\n{load_out}")
        first = Client("127.0.0.201", port).announce(b"honest-new-torrent!!", 7001)
        second = Client("127.0.0.202", port).announce(b"honest-new-torrent!!", 7002)
        time.sleep(11)  # one more statistics line
    finally:
        tracker.send_signal(signal.SIGTERM)
        try:
            tracker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            tracker.kill()
        log.close()
    stats = [line.strip() for line in open(os.path.join(tmp, "tracker.log"), errors="replace")
             if "requests/s" in line]
    peak = max(v for _, v in samples)
    print(f"{a.addresses} addresses at {a.rate_per_address} requests/s each, {a.seconds} s, "
          f"{a.torrents:,} equally popular torrents, shoal_udp defaults.\n")
    print(f"- RSS: {started / MiB:.0f} MiB at start, {samples[-1][1] / MiB:.0f} MiB at the end, "
          f"peak {peak / MiB:.0f} MiB")
    print("- RSS each 10 s (MiB): " + ", ".join(f"{t:.0f}s {v / MiB:.0f}" for t, v in samples[::10]))
    print(f"- first honest peer: {first}")
    print(f"- second honest peer: {second}")
    ok = isinstance(second, tuple) and second[0] == 2 and ("127.0.0.201", 7001) in second[1]
    print(f"- honest torrent stored and served: {'yes' if ok else 'NO'}")
    if stats:
        print(f"- last statistics line: `{stats[-1][-600:]}`")
    print("- load tester summary:\n```\n" + "\n".join(load_out.strip().splitlines()[-12:]) + "\n```")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
