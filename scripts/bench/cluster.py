#!/usr/bin/env python3
"""What sharing swarms costs a node: shoal_udp nodes with [cluster] on (through a real
redis-server) against the same nodes with it off, in one run, alternating.

For 2 and then 4 nodes, each round starts redis-server and the nodes, and drives
every node with its own shoal_udp_load_test (announces only; every load tester uses the
same peers and torrents, so each node also applies the others' changes to peers it
knows, as behind DNS round robin). Measured over the last --summarize seconds:

  - replies per second per node, and the nodes' CPU per reply (the nodes share the
    tracker CPUs, so CPU per reply is the fair comparison; the ratio on/off is the
    cost of clustering per node);
  - Redis CPU and bytes (in + out) per announce (INFO, server side);
  - replication delay at load: a probe announces a fresh peer to node 0 and polls
    node 1 until it is sent that peer (--probes times, p50 and max).

  scripts/bench/cluster.py [--nodes 2,4] [--rounds 2] [--duration 20] [--summarize 10]
"""

import argparse
import os
import random
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from benchlib import Sampler, start, stop  # noqa: E402
from redislib import Redis  # noqa: E402
from udp_bench import announce_load_toml, port_free, tracker_toml, wait_for_port  # noqa: E402

PROTOCOL_ID = 0x41727101980


class Probe:
    """A BEP 15 client for the delay probes."""

    def __init__(self, port):
        self.addr = ("127.0.0.1", port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        # A saturated tracker drops datagrams when its socket buffer is full: retry
        # soon rather than wait, so a drop costs the probe 20 ms, not its result.
        self.sock.settimeout(0.02)
        self.id = None
        self.round_trips = []

    def request(self, packet, transaction):
        for _ in range(250):
            sent = time.time()
            self.sock.sendto(packet, self.addr)
            try:
                while True:
                    reply, _ = self.sock.recvfrom(2048)
                    if len(reply) >= 8 and struct.unpack(">I", reply[4:8])[0] == transaction:
                        self.round_trips.append(time.time() - sent)
                        return reply
            except socket.timeout:
                continue
        raise RuntimeError("no reply from the tracker")

    def connect(self):
        transaction = random.getrandbits(32)
        reply = self.request(struct.pack(">QII", PROTOCOL_ID, 0, transaction), transaction)
        self.id = struct.unpack(">Q", reply[8:16])[0]

    def announce(self, info_hash, port):
        """The peers' ports in the reply."""
        if self.id is None:
            self.connect()
        transaction = random.getrandbits(32)
        packet = struct.pack(">QII20s20sQQQIIIiH", self.id, 1, transaction, info_hash,
                             b"-PR0001-" + random.randbytes(12), 0, 1000, 0, 2, 0, 0, 50, port)
        reply = self.request(packet, transaction)
        peers = reply[20:]
        return {struct.unpack(">H", peers[i + 4:i + 6])[0] for i in range(0, len(peers) - 5, 6)}


def probe_delays(first_port, second_port, count, stop_at, store):
    """For each probe: seconds from announcing a fresh peer to node 0 until its change
    is in the stream (read here from the store), and until node 1 sends that peer;
    and the probe's own request round trips to node 1 (what the tracker's load adds
    to any request, replication or not)."""
    published, delays = [], []
    to_a, to_b = Probe(first_port), Probe(second_port)
    key = "shoal:udp:changes"
    for n in range(count):
        if time.time() > stop_at:
            break
        newest = store.call("XREVRANGE", key, "+", "-", "COUNT", 1)
        last = newest[0][0] if newest else b"0-0"
        info_hash = random.randbytes(20)
        port = 20000 + n
        to_a.announce(info_hash, port)
        began = time.time()
        in_store = sent = None
        while time.time() - began < 5 and sent is None:
            while in_store is None:
                entries = store.call("XREAD", "COUNT", 20, "STREAMS", key, last)
                if not entries:
                    break
                for entry_id, fields in entries[0][1]:
                    last = entry_id
                    if in_store is None and info_hash in fields[fields.index(b"c") + 1]:
                        in_store = time.time() - began
            if port in to_b.announce(info_hash, 30000 + n):
                sent = time.time() - began
            time.sleep(0.002)
        if sent is not None and in_store is not None:
            published.append(in_store)
            delays.append(sent)
        # Not a multiple of the publish interval, so probes land at every phase of it.
        time.sleep(random.uniform(0.05, 0.15))
    return published, delays, to_b.round_trips


def metric(port, name):
    """The sum of the samples of `name` on node `port`'s monitoring endpoint (same
    port number, TCP); None when it has none."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    values = [float(line.rsplit(" ", 1)[1]) for line in data.decode().splitlines()
              if line.startswith(name + "{") or line.startswith(name + " ")]
    return sum(values) if values else None


class Run:
    def __init__(self, a):
        self.a = a
        self.tmp = tempfile.mkdtemp(prefix="shoal-cluster-bench-")

    def path(self, name):
        return os.path.join(self.tmp, name)

    def node(self, index, port, store):
        a = self.a
        config = self.path(f"node-{index}.toml")
        with open(config, "w") as f:
            f.write(tracker_toml(port, f"""
[metrics]
enabled = true
address = "127.0.0.1:{port}"
[cluster]
store = "{store}"
node = "node-{index}"
publish_interval_ms = {a.publish_interval_ms}
"""))
        log = open(self.path(f"node-{index}.log"), "w")
        return start([os.path.join(a.shoal_dir, "shoal_udp"), "-c", config], a.tracker_cpus, log)

    def load(self, index, port):
        a = self.a
        config = self.path(f"load-{index}.toml")
        with open(config, "w") as f:
            f.write(announce_load_toml(port, a.duration, a.summarize, a.torrents, a.peers,
                                       sequential=False))
        out = open(self.path(f"load-{index}.out"), "w")
        return start([os.path.join(a.shoal_dir, "shoal_udp_load_test"), "-c", config, "--json"],
                     a.load_cpus, out), out

    def result(self, index):
        return benchlib.last_json(self.path(f"load-{index}.out"))

    def once(self, nodes, clustered):
        a = self.a
        redis = Redis(a.redis_cpus)
        ports = [a.port + i for i in range(nodes)]
        procs, loads = [], []
        try:
            for index, port in enumerate(ports):
                if not port_free(port):
                    sys.exit(f"port {port} is in use")
                procs.append(self.node(index, port, redis.address if clustered else ""))
            for port in ports:
                wait_for_port(port)
            sampler = Sampler([proc.pid for proc in procs])
            sampler.start()
            began = time.time()
            loads = [self.load(index, port) for index, port in enumerate(ports)]
            window = (began + a.duration - a.summarize, began + a.duration)
            time.sleep(max(0, window[0] - time.time()))
            before = redis.info()
            published, delays, round_trips = [], [], []
            if clustered:
                published, delays, round_trips = probe_delays(
                    ports[0], ports[1], a.probes, window[1] - 1, redis.client)
            time.sleep(max(0, window[1] - time.time()))
            after = redis.info()
            store_delay = metric(ports[1], "shoal_cluster_delay_seconds") if clustered else None
            if clustered:
                errors = sum(metric(port, "shoal_cluster_store_errors_total") or 0 for port in ports)
                dropped = sum(metric(port, "shoal_cluster_dropped_changes_total") or 0 for port in ports)
                if errors or dropped:
                    print(f"    store errors {errors:.0f}, changes dropped {dropped:.0f}")
            for proc, out in loads:
                proc.wait(timeout=60)
                out.close()
            sampler.done.set()
            results = [self.result(index) for index in range(nodes)]
            replies = [r["replies_per_second"] for r in results]
            cpu = sum(sampler.cpu_between(proc.pid, *window) for proc in procs)
            total = sum(replies) * a.summarize
            return {
                "replies_per_node": statistics.mean(replies),
                "cpu_us_per_reply": cpu * 1e6 / total,
                "redis_cpu_us_per_announce": (after["cpu"] - before["cpu"]) * 1e6 / total,
                "redis_bytes_per_announce": (after["bytes_in"] + after["bytes_out"]
                                             - before["bytes_in"] - before["bytes_out"]) / total,
                "delays_ms": [d * 1000 for d in delays],
                "published_ms": [d * 1000 for d in published],
                "round_trips_ms": [d * 1000 for d in round_trips],
                "store_delay_ms": store_delay * 1000 if store_delay is not None else None,
            }
        finally:
            for proc, out in loads:
                stop(proc)
            for proc in procs:
                stop(proc)
            redis.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shoal-dir", default="target/release")
    p.add_argument("--tracker-cpus", default="0")
    p.add_argument("--load-cpus", default="1")
    p.add_argument("--redis-cpus", default="1")
    p.add_argument("--port", type=int, default=3990)
    p.add_argument("--nodes", default="2,4")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=int, default=20)
    p.add_argument("--summarize", type=int, default=10)
    p.add_argument("--torrents", type=int, default=10_000)
    p.add_argument("--peers", type=int, default=100_000)
    p.add_argument("--publish-interval-ms", type=int, default=100)
    p.add_argument("--probes", type=int, default=30)
    p.add_argument("--max-load", type=float, default=0.5)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    benchlib.require_idle(a.max_load, a.force)
    run = Run(a)
    print(f"work directory {run.tmp}")
    for nodes in [int(n) for n in a.nodes.split(",")]:
        rows = {True: [], False: []}
        for round_ in range(a.rounds):
            order = [False, True] if round_ % 2 == 0 else [True, False]
            for clustered in order:
                r = run.once(nodes, clustered)
                rows[clustered].append(r)
                delays = r["delays_ms"]
                delay = (f", delay p50 {statistics.median(delays):.0f} ms max {max(delays):.0f} ms "
                         f"(in the stream after {statistics.median(r['published_ms']):.0f} ms at p50) "
                         f"({len(delays)} probes; a request to node 1 took "
                         f"{statistics.median(r['round_trips_ms']):.1f} ms at p50; the newest entry "
                         f"node 1 read was {r['store_delay_ms']:.0f} ms old)") if delays else ""
                print(f"{nodes} nodes, cluster {'on ' if clustered else 'off'}, round {round_ + 1}: "
                      f"{r['replies_per_node']:,.0f} replies/s per node, "
                      f"{r['cpu_us_per_reply']:.2f} µs node CPU per reply, "
                      f"Redis {r['redis_cpu_us_per_announce']:.3f} µs and "
                      f"{r['redis_bytes_per_announce']:.0f} B per announce{delay}", flush=True)
        on = {k: statistics.median([r[k] for r in rows[True]]) for k in ("replies_per_node", "cpu_us_per_reply")}
        off = {k: statistics.median([r[k] for r in rows[False]]) for k in ("replies_per_node", "cpu_us_per_reply")}
        delays = [d for r in rows[True] for d in r["delays_ms"]]
        print(f"{nodes} nodes: on/off replies per node {on['replies_per_node'] / off['replies_per_node']:.3f}×, "
              f"node CPU per reply {on['cpu_us_per_reply'] / off['cpu_us_per_reply']:.3f}×; "
              f"Redis {statistics.median([r['redis_cpu_us_per_announce'] for r in rows[True]]):.3f} µs, "
              f"{statistics.median([r['redis_bytes_per_announce'] for r in rows[True]]):.0f} B per announce; "
              f"delay p50 {statistics.median(delays):.0f} ms, p99 "
              f"{sorted(delays)[int(len(delays) * 0.99) - 1] if delays else 0:.0f} ms, max {max(delays):.0f} ms",
              flush=True)


if __name__ == "__main__":
    main()
