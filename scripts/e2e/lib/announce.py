#!/usr/bin/python3
"""Announces one peer to a UDP (BEP 15) or HTTP (BEP 3) tracker, for shoal's
end-to-end tests where no BitTorrent client is at hand (a container, a namespace).
Standard library only.

    announce.py URL INFO_HASH_HEX [--port N] [--seeder] [--expect-peers N]
                [--expect-failure TEXT] [--timeout SECONDS]

Prints "seeders=S leechers=L peers=P" for an answer, or "failure: REASON" for a
tracker's error (BEP 15 action 3, BEP 3 `failure reason`). Exits 1 when the answer
is not what --expect-peers / --expect-failure asked for, or none came in time.
"""

import argparse
import random
import socket
import struct
import sys
import urllib.parse
import urllib.request

BEP15_MAGIC = 0x41727101980


def announce_udp(url, info_hash, peer_id, port, left, timeout):
    family = socket.AF_INET6 if ":" in url.hostname else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.connect((url.hostname, url.port))

        def exchange(request, action):
            tid = random.getrandbits(32)
            s.send(request(tid))
            reply = s.recv(2048)
            got, got_tid = struct.unpack(">II", reply[:8])
            if got_tid != tid:
                raise RuntimeError(f"transaction id {got_tid:#x}, sent {tid:#x}")
            if got == 3:
                return None, reply[8:].decode(errors="replace")
            if got != action:
                raise RuntimeError(f"action {got}, expected {action}")
            return reply[8:], None

        body, failure = exchange(lambda tid: struct.pack(">QII", BEP15_MAGIC, 0, tid), 0)
        if failure is not None:
            return failure, None
        (connection_id,) = struct.unpack(">Q", body[:8])
        body, failure = exchange(
            lambda tid: struct.pack(">QII", connection_id, 1, tid)
            + info_hash
            + peer_id
            + struct.pack(">QQQIIIiH", 0, left, 0, 2 if left == 0 else 0, 0, 0, 50, port),
            1,
        )
        if failure is not None:
            return failure, None
        _interval, leechers, seeders = struct.unpack(">III", body[:12])
        width = 18 if family == socket.AF_INET6 else 6
        return None, (seeders, leechers, (len(body) - 12) // width)


def bdecode(data, i=0):
    """A bencoded value at data[i:]; returns (value, next index)."""
    c = data[i : i + 1]
    if c == b"i":
        end = data.index(b"e", i)
        return int(data[i + 1 : end]), end + 1
    if c in (b"l", b"d"):
        items, i = [], i + 1
        while data[i : i + 1] != b"e":
            item, i = bdecode(data, i)
            items.append(item)
        if c == b"l":
            return items, i + 1
        return dict(zip(items[::2], items[1::2])), i + 1
    colon = data.index(b":", i)
    length = int(data[i:colon])
    return data[colon + 1 : colon + 1 + length], colon + 1 + length


def announce_http(url, info_hash, peer_id, port, left, timeout):
    query = urllib.parse.urlencode(
        {
            "info_hash": info_hash,
            "peer_id": peer_id,
            "port": port,
            "uploaded": 0,
            "downloaded": 0,
            "left": left,
            "compact": 1,
            "event": "completed" if left == 0 else "started",
        }
    )
    with urllib.request.urlopen(f"{url.geturl()}?{query}", timeout=timeout) as response:
        answer, _ = bdecode(response.read())
    if b"failure reason" in answer:
        return answer[b"failure reason"].decode(errors="replace"), None
    peers = answer.get(b"peers", b"")
    count = len(peers) // 6 if isinstance(peers, bytes) else len(peers)
    return None, (answer.get(b"complete", 0), answer.get(b"incomplete", 0), count)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("info_hash")
    parser.add_argument("--port", type=int, default=6881)
    parser.add_argument("--seeder", action="store_true")
    parser.add_argument("--expect-peers", type=int)
    parser.add_argument("--expect-failure")
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    url = urllib.parse.urlparse(args.url)
    info_hash = bytes.fromhex(args.info_hash)
    peer_id = b"-E2E000-" + bytes(random.choice(b"0123456789abcdef") for _ in range(12))
    left = 0 if args.seeder else 1000
    announce = announce_udp if url.scheme == "udp" else announce_http
    failure, counts = announce(url, info_hash, peer_id, args.port, left, args.timeout)
    if failure is not None:
        print(f"failure: {failure}")
        ok = args.expect_failure is not None and args.expect_failure in failure
    else:
        seeders, leechers, peers = counts
        print(f"seeders={seeders} leechers={leechers} peers={peers}")
        ok = args.expect_failure is None and args.expect_peers in (None, peers)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
