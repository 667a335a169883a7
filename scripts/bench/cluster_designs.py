#!/usr/bin/env python3
"""What each candidate design for shared swarms costs a real redis-server per announce
(documents/scale-out.md): round trips, bytes, Redis CPU, Redis memory.

  A  shared store, read on every announce: per announce one pipelined round trip of
     ZADD (the peer, scored by expiry), PEXPIRE, ZREMRANGEBYSCORE (drop the expired),
     ZRANDMEMBER 50 (the peers to send) and ZCARD (the count): the cheapest form of
     what chihaya's Redis store does in five to six round trips.
  B  changes through a stream, reads from memory (what shoal builds): a node appends
     its announces as one XADD per publish interval (N changes of 43 bytes), each other
     node reads it with one XREAD; measured for several N and 1 or 3 readers.
  C  info-hash ranges owned per node, announces forwarded: Redis only keeps the member
     list (a heartbeat per node per second); the cost is the forwarding, which is not
     Redis's (see the document).

Redis CPU is the server's own used_cpu_user + used_cpu_sys (INFO) over the run;
bytes are the server's total_net_input/output_bytes. The client is Python: it limits
the rate, not what Redis spends per command.

  scripts/bench/cluster_designs.py [--announces 40000] [--redis-cpu 0] [--client-cpu 1]
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from redislib import Client, Redis  # noqa: E402

CHANGE = 43  # bytes of one IPv4 UDP change record
TIMEOUT_MS = 3_600_000


def measure(redis, work):
    before = redis.info()
    started = time.time()
    count, round_trips = work()
    elapsed = time.time() - started
    after = redis.info()
    return {
        "announces": count,
        "round_trips_per_announce": round_trips / count,
        "redis_cpu_us_per_announce": (after["cpu"] - before["cpu"]) * 1e6 / count,
        # INFO's own reply is counted too: a few KB over tens of thousands of announces.
        "bytes_in_per_announce": (after["bytes_in"] - before["bytes_in"]) / count,
        "bytes_out_per_announce": (after["bytes_out"] - before["bytes_out"]) / count,
        "seconds": elapsed,
    }


def design_a(redis, torrents, peers_per_torrent, announces, in_flight):
    """`in_flight` connections each have one announce outstanding, as that many nodes
    (or requests) at once would: Redis serves what is ready in one event-loop pass."""
    client = Client(redis.port)
    clients = [Client(redis.port) for _ in range(in_flight)]
    hashes = [random.randbytes(20) for _ in range(torrents)]
    before = redis.info()["memory"]
    now_ms = int(time.time() * 1000)
    batch = []
    for info_hash in hashes:
        key = b"A:" + info_hash
        members = []
        for _ in range(peers_per_torrent):
            members += [now_ms + TIMEOUT_MS, random.randbytes(6)]
        batch.append(["ZADD", key, *members])
        if len(batch) == 1000:
            client.pipeline(batch)
            batch = []
    if batch:
        client.pipeline(batch)
    memory = (redis.info()["memory"] - before) / (torrents * peers_per_torrent)

    def work():
        for _ in range(announces // in_flight):
            for each in clients:
                key = b"A:" + random.choice(hashes)
                now = int(time.time() * 1000)
                commands = [
                    ["ZADD", key, now + TIMEOUT_MS, random.randbytes(6)],
                    ["PEXPIRE", key, TIMEOUT_MS],
                    ["ZREMRANGEBYSCORE", key, "-inf", now],
                    ["ZRANDMEMBER", key, 50],
                    ["ZCARD", key],
                ]
                data = b"".join(Client.encode(*command) for command in commands)
                each.sock.sendall(data)
            for each in clients:
                for _ in range(5):
                    each.reply()
        done = announces // in_flight * in_flight
        return done, done

    result = measure(redis, work)
    result["redis_memory_bytes_per_peer"] = memory
    result["client_waits_for_redis"] = True
    return result


def design_b(redis, per_entry, readers, announces):
    writer = Client(redis.port)
    followers = [Client(redis.port) for _ in range(readers)]
    key = f"B:{per_entry}:{readers}"
    last = ["0-0"] * readers
    entries = max(1, announces // per_entry)

    def work():
        for _ in range(entries):
            blob = random.randbytes(CHANGE * per_entry)
            oldest = int(time.time() * 1000) - TIMEOUT_MS
            writer.pipeline([
                ["XADD", key, "MINID", "~", oldest, "*", "o", "0123456789abcdef",
                 "n", "node-a", "t", int(time.time() * 1000), "c", blob],
                ["PEXPIRE", key, TIMEOUT_MS],
            ])
            for index, follower in enumerate(followers):
                reply = follower.call("XREAD", "COUNT", 32, "STREAMS", key, last[index])
                last[index] = reply[0][1][-1][0].decode()
        return entries * per_entry, entries * (1 + readers)

    result = measure(redis, work)
    result["client_waits_for_redis"] = False
    return result


def stream_memory(redis, per_entry, changes):
    client = Client(redis.port)
    key = "B:memory"
    before = redis.info()["memory"]
    batch = []
    for _ in range(changes // per_entry):
        batch.append(["XADD", key, "*", "o", "0123456789abcdef", "n", "node-a",
                      "t", int(time.time() * 1000), "c", random.randbytes(CHANGE * per_entry)])
        if len(batch) == 50:
            client.pipeline(batch)
            batch = []
    if batch:
        client.pipeline(batch)
    return (redis.info()["memory"] - before) / changes


def design_c(redis, nodes, seconds_of_heartbeats):
    client = Client(redis.port)

    def work():
        beats = 0
        for _ in range(seconds_of_heartbeats):
            for node in range(nodes):
                client.pipeline([
                    ["HSET", "C:members", f"node-{node}", f"10.0.0.{node}:6969 {int(time.time())}"],
                    ["HGETALL", "C:members"],
                ])
                beats += 1
        return beats, beats

    result = measure(redis, work)
    per_heartbeat = result["redis_cpu_us_per_announce"]
    return {
        "heartbeats": result["announces"],
        "redis_cpu_us_per_heartbeat": per_heartbeat,
        "bytes_per_heartbeat": result["bytes_in_per_announce"] + result["bytes_out_per_announce"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--announces", type=int, default=40_000)
    parser.add_argument("--torrents", type=int, default=100_000)
    parser.add_argument("--peers-per-torrent", type=int, default=10)
    parser.add_argument("--redis-cpu", default="0")
    parser.add_argument("--client-cpu", default="1")
    parser.add_argument("--max-load", type=float, default=0.5)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    benchlib.require_idle(args.max_load, args.force)
    os.sched_setaffinity(0, benchlib.cpu_list(args.client_cpu))
    random.seed(1)

    redis = Redis(args.redis_cpu)
    results = {}
    try:
        results["A"] = design_a(redis, args.torrents, args.peers_per_torrent, args.announces, 1)
        results["A, 16 in flight"] = design_a(redis, args.torrents // 10, args.peers_per_torrent,
                                              args.announces, 16)
        results["B"] = {}
        for per_entry in (1, 16, 256, 1500):
            for readers in (1, 3):
                run = design_b(redis, per_entry, readers, max(args.announces, per_entry * 200))
                results["B"][f"{per_entry} per entry, {readers + 1} nodes"] = run
        results["B memory bytes per change"] = stream_memory(redis, 1500, 1_500_000)
        results["C"] = design_c(redis, 4, 2000)
        version = redis.client.call("INFO", "server").decode()
        results["redis_version"] = next(
            line.split(":", 1)[1] for line in version.splitlines() if line.startswith("redis_version")
        )
    finally:
        redis.stop()

    print(f"redis {results['redis_version']}")
    for name in ("A", "A, 16 in flight"):
        a = results[name]
        print(f"{name} shared store: {a['round_trips_per_announce']:.2f} round trips (waited on), "
              f"{a['bytes_in_per_announce'] + a['bytes_out_per_announce']:.0f} B, "
              f"{a['redis_cpu_us_per_announce']:.2f} µs Redis CPU per announce; "
              f"{a['redis_memory_bytes_per_peer']:.0f} B Redis memory per peer")
    for name, run in results["B"].items():
        print(f"B stream, {name}: {run['round_trips_per_announce']:.4f} round trips (none waited on), "
              f"{run['bytes_in_per_announce'] + run['bytes_out_per_announce']:.0f} B, "
              f"{run['redis_cpu_us_per_announce']:.3f} µs Redis CPU per announce")
    print(f"B stream memory: {results['B memory bytes per change']:.1f} B per change")
    c = results["C"]
    print(f"C membership: {c['redis_cpu_us_per_heartbeat']:.2f} µs Redis CPU and "
          f"{c['bytes_per_heartbeat']:.0f} B per heartbeat (one per node per second)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
