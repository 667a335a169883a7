#!/usr/bin/env python3
"""What relaying WebTorrent offers and answers between nodes costs ([cluster] on
shoal_ws, through a real redis-server): latency added, and CPU per relayed message.

For each node count (1 is the baseline: every pair on one node, nothing relayed),
redis-server and the nodes start, and --pairs pairs of clients run rounds for
--duration seconds: in a torrent of its own, the offerer announces with one offer;
the answerer, on the next node (pair k: offerer on node k mod n, answerer on node
k+1 mod n), answers it as soon as it arrives. Measured over the rounds:

  - offer latency: the offerer's send to the answerer's receipt of the offer;
  - answer latency: the answerer's send to the offerer's receipt of the answer;
    (p50 and p99; the 1-node run is the floor, the difference is what relaying adds)
  - node CPU per round (all nodes together; the same work as one node plus the
    relay's) and Redis CPU and bytes per relayed message (INFO, server side).

The clients are Python threads, one per pair, and pace the rounds: the rates are the
clients', the costs per message are the trackers' and Redis's.

  scripts/bench/ws_relay.py [--nodes 1,2,4] [--pairs 16] [--duration 15]
                            [--swarm-workers 0] [--tracker-cpus 0] [--redis-cpus 0]
                            [--client-cpus 1]
"""

import argparse
import base64
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from redislib import Redis  # noqa: E402


class WebSocket:
    """A minimal blocking WebSocket client: text frames out (masked), text frames in."""

    def __init__(self, port, wrap=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if wrap:
            self.sock = wrap(self.sock)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (f"GET /announce HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
             f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
             "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise SystemExit(f"upgrade refused: {head[:80]!r}")

    def _more(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise OSError("the tracker closed the connection")
        self.buf += chunk

    def send(self, message):
        data = json.dumps(message).encode()
        mask = os.urandom(4)
        head = bytes([0x81])
        if len(data) < 126:
            head += bytes([0x80 | len(data)])
        else:
            head += bytes([0x80 | 126]) + struct.pack(">H", len(data))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(head + mask + masked)

    def receive(self):
        while True:
            while len(self.buf) < 2:
                self._more()
            length = self.buf[1] & 0x7F
            start = 2
            if length == 126:
                while len(self.buf) < 4:
                    self._more()
                length = struct.unpack(">H", self.buf[2:4])[0]
                start = 4
            elif length == 127:
                while len(self.buf) < 10:
                    self._more()
                length = struct.unpack(">Q", self.buf[2:10])[0]
                start = 10
            while len(self.buf) < start + length:
                self._more()
            opcode = self.buf[0] & 0x0F
            payload, self.buf = self.buf[start:start + length], self.buf[start + length:]
            if opcode == 1:
                return json.loads(payload)


def chars(label):
    return label.ljust(20, ".")[:20]


class Pair(threading.Thread):
    """One offerer and one answerer, round after round until `until`."""

    def __init__(self, index, offer_port, answer_port, until):
        super().__init__(daemon=True)
        self.index, self.until = index, until
        self.info_hash = chars(f"t{index}")
        self.offerer, self.answerer = WebSocket(offer_port), WebSocket(answer_port)
        self.offers, self.answers = [], []
        self.error = None

    def announce(self, ws, peer, extra):
        message = {"action": "announce", "info_hash": self.info_hash, "peer_id": chars(peer),
                   "uploaded": 0, "downloaded": 0, "left": 1, "numwant": 1}
        message.update(extra)
        ws.send(message)

    def run(self):
        try:
            self.announce(self.answerer, f"a{self.index}", {})
            self.answerer.receive()
            # The answerer must be known to the offerer's node before the first offer.
            time.sleep(1.0)
            round_ = 0
            while time.time() < self.until:
                round_ += 1
                offer_id = chars(f"o{self.index}-{round_}")
                sent = time.perf_counter()
                self.announce(self.offerer, f"o{self.index}",
                              {"offers": [{"offer_id": offer_id,
                                           "offer": {"type": "offer", "sdp": "v=0"}}]})
                while True:
                    message = self.answerer.receive()
                    if "offer" in message:
                        break
                got_offer = time.perf_counter()
                self.announce(self.answerer, f"a{self.index}",
                              {"answer": {"type": "answer", "sdp": "v=0"},
                               "to_peer_id": chars(f"o{self.index}"), "offer_id": offer_id})
                while True:
                    message = self.offerer.receive()
                    if "answer" in message:
                        break
                got_answer = time.perf_counter()
                self.offers.append(got_offer - sent)
                self.answers.append(got_answer - got_offer)
        except Exception as error:  # noqa: BLE001 - reported by the main thread
            self.error = error


def quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(nodes, args, binary):
    redis = Redis(args.redis_cpus)
    procs, ports = [], []
    workdir = tempfile.mkdtemp(prefix="shoal-ws-relay-")
    try:
        for index in range(nodes):
            port = benchlib.PortPicker(20000 + 100 * index).next_free()
            config = os.path.join(workdir, f"node{index}.toml")
            with open(config, "w") as f:
                f.write(f"""swarm_workers = {args.swarm_workers}
[network]
address_ipv4 = "127.0.0.1:{port}"
use_ipv6 = false
[statistics]
interval = 0
[limits]
max_requests_per_second = 0
[per_ip]
requests_per_second = 0
max_connections = 0
max_connections_per_network = 0
""")
                if nodes > 1:
                    f.write(f'[cluster]\nstore = "{redis.address}"\nnode = "n{index}"\n')
            log = open(os.path.join(workdir, f"node{index}.log"), "w")
            procs.append(benchlib.start([binary, "-c", config], args.tracker_cpus, log))
            benchlib.wait_for_port("127.0.0.1", port)
            ports.append(port)
        os.sched_setaffinity(0, benchlib.cpu_list(args.client_cpus))
        until = time.time() + 1.0 + args.duration
        pairs = [Pair(k, ports[k % nodes], ports[(k + 1) % nodes], until)
                 for k in range(args.pairs)]
        time.sleep(0.3)
        before_redis = redis.info()
        before_cpu = sum(benchlib.cpu_seconds(p.pid) for p in procs)
        for pair in pairs:
            pair.start()
        for pair in pairs:
            pair.join()
        after_cpu = sum(benchlib.cpu_seconds(p.pid) for p in procs)
        after_redis = redis.info()
        errors = [pair.error for pair in pairs if pair.error]
        if errors:
            raise SystemExit(f"{nodes} nodes: a client failed: {errors[0]}")
        offers = [v for pair in pairs for v in pair.offers]
        answers = [v for pair in pairs for v in pair.answers]
        rounds = len(offers)
        relayed = 2 * rounds if nodes > 1 else 0
        redis_cpu = after_redis["cpu"] - before_redis["cpu"]
        redis_bytes = (after_redis["bytes_in"] + after_redis["bytes_out"]
                       - before_redis["bytes_in"] - before_redis["bytes_out"])
        return {
            "nodes": nodes,
            "rounds": rounds,
            "rounds_per_second": rounds / args.duration,
            "offer_p50_ms": 1e3 * quantile(offers, 0.5),
            "offer_p99_ms": 1e3 * quantile(offers, 0.99),
            "answer_p50_ms": 1e3 * quantile(answers, 0.5),
            "answer_p99_ms": 1e3 * quantile(answers, 0.99),
            "node_cpu_us_per_round": 1e6 * (after_cpu - before_cpu) / max(rounds, 1),
            "redis_cpu_us_per_message": 1e6 * redis_cpu / relayed if relayed else 0.0,
            "redis_bytes_per_message": redis_bytes / relayed if relayed else 0.0,
        }
    finally:
        for proc in procs:
            benchlib.stop(proc)
        redis.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1,2,4")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--duration", type=float, default=15)
    parser.add_argument("--swarm-workers", type=int, default=0,
                        help="0: the socket worker keeps the torrents")
    parser.add_argument("--tracker-cpus", default="0")
    parser.add_argument("--redis-cpus", default="0")
    parser.add_argument("--client-cpus", default="1")
    parser.add_argument("--shoal-dir", default="target/release")
    parser.add_argument("--force", action="store_true", help="run on a busy machine")
    args = parser.parse_args()
    benchlib.require_idle(0.7, args.force)
    binary = os.path.join(args.shoal_dir, "shoal_ws")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"{binary} is missing: cargo build --release -p shoal_ws")
    results = [run(int(n), args, binary) for n in args.nodes.split(",")]
    print("| nodes | rounds/s | offer p50 / p99 ms | answer p50 / p99 ms "
          "| node CPU µs per round | Redis CPU µs per message | Redis bytes per message |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['nodes']} | {r['rounds_per_second']:.0f} "
              f"| {r['offer_p50_ms']:.2f} / {r['offer_p99_ms']:.2f} "
              f"| {r['answer_p50_ms']:.2f} / {r['answer_p99_ms']:.2f} "
              f"| {r['node_cpu_us_per_round']:.1f} | {r['redis_cpu_us_per_message']:.1f} "
              f"| {r['redis_bytes_per_message']:.0f} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
