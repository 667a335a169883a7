#!/usr/bin/python3
"""Announces one peer to a UDP (BEP 15), HTTP (BEP 3) or WebTorrent (ws://) tracker, for shoal's
end-to-end tests where no BitTorrent client is at hand (a container, a namespace).
Standard library only.

    announce.py URL INFO_HASH_HEX [--port N] [--seeder] [--expect-peers N]
                [--expect-failure TEXT] [--timeout SECONDS]

Prints "seeders=S leechers=L peers=P" for an answer, or "failure: REASON" for a
tracker's error (BEP 15 action 3, BEP 3 and WebTorrent `failure reason`). Over ws://
the peer count is the swarm's size less this peer (WebTorrent answers with counts;
peers come as offers, which this peer does not make). Exits 1 when the answer
is not what --expect-peers / --expect-failure asked for, or none came in time.
"""

import argparse
import base64
import json
import os
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


def announce_ws(url, info_hash, peer_id, port, left, timeout):
    """A WebSocket handshake (RFC 6455) and one WebTorrent announce without offers."""
    del port  # WebTorrent peers meet through the tracker, not on a port
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as s:
        key = base64.b64encode(os.urandom(16)).decode()
        path = url.path or "/"
        s.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {url.hostname}:{url.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError(f"closed during the handshake: {head!r}")
            head += chunk
        head, rest = head.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"no upgrade: {head.splitlines()[0]!r}")
        message = json.dumps(
            {
                "action": "announce",
                "info_hash": info_hash.decode("latin-1"),
                "peer_id": peer_id.decode("latin-1"),
                "uploaded": 0,
                "downloaded": 0,
                "left": left,
                "event": "completed" if left == 0 else "started",
                "numwant": 5,
                "offers": [],
            }
        ).encode()
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(message))
        length = len(message)
        header = bytes([0x81]) + (
            bytes([0x80 | length]) if length < 126 else bytes([0x80 | 126]) + struct.pack(">H", length)
        )
        s.sendall(header + mask + masked)
        data = rest

        def need(n):
            nonlocal data
            while len(data) < n:
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError("closed before an answer")
                data += chunk

        while True:
            need(2)
            opcode, length = data[0] & 0x0F, data[1] & 0x7F
            offset = 2
            if length == 126:
                need(4)
                (length,) = struct.unpack(">H", data[2:4])
                offset = 4
            elif length == 127:
                need(10)
                (length,) = struct.unpack(">Q", data[2:10])
                offset = 10
            need(offset + length)
            payload, data = data[offset : offset + length], data[offset + length :]
            if opcode == 0x8:
                raise RuntimeError(f"closed by the tracker: {payload[2:]!r}")
            if opcode != 0x1:
                continue
            answer = json.loads(payload)
            if "failure reason" in answer:
                return answer["failure reason"], None
            if answer.get("action") == "announce" and "complete" in answer:
                seeders, leechers = answer["complete"], answer["incomplete"]
                return None, (seeders, leechers, seeders + leechers - 1)


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
    announce = {"udp": announce_udp, "ws": announce_ws}.get(url.scheme, announce_http)
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
