#!/usr/bin/python3
"""Scrapes one torrent from a UDP (BEP 15) or HTTP(S) (BEP 48) tracker and checks the
counts, for shoal's end-to-end tests. Standard library only.

    scrape.py URL INFO_HASH_HEX [--expect S,L,D] [--timeout SECONDS] [--cafile PEM]

URL is the announce URL from the .torrent (udp://HOST:PORT/announce or
http(s)://HOST:PORT/announce; the HTTP scrape URL is derived from it as BEP 48 says).
Prints "seeders=S leechers=L downloads=D". With --expect, scrapes every 0.2 s until the
tracker reports exactly those counts, and exits 1 with the last counts seen if it has
not within --timeout (clients announce asynchronously, so the first scrape may come
too early).
"""

import argparse
import os
import random
import socket
import ssl
import struct
import sys
import time
import urllib.parse
import urllib.request

BEP15_MAGIC = 0x41727101980
ACTION_CONNECT, ACTION_SCRAPE, ACTION_ERROR = 0, 2, 3


def scrape_udp(url, info_hash):
    """One BEP 15 connect + scrape exchange; returns (seeders, leechers, downloads)."""
    host, port = url.hostname, url.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(1.0)
        s.connect((host, port))

        def exchange(action, payload):
            tid = random.getrandbits(32)
            s.send(payload(tid))
            while True:
                reply = s.recv(2048)
                if len(reply) < 8:
                    raise RuntimeError(f"short reply: {reply!r}")
                r_action, r_tid = struct.unpack_from(">II", reply)
                if r_tid != tid:
                    continue  # a late reply to an earlier attempt
                if r_action == ACTION_ERROR:
                    raise RuntimeError(f"tracker error: {reply[8:].decode(errors='replace')}")
                if r_action != action:
                    raise RuntimeError(f"reply action {r_action}, expected {action}")
                return reply

        reply = exchange(ACTION_CONNECT, lambda tid: struct.pack(">QII", BEP15_MAGIC, ACTION_CONNECT, tid))
        (connection_id,) = struct.unpack_from(">Q", reply, 8)
        reply = exchange(
            ACTION_SCRAPE,
            lambda tid: struct.pack(">QII", connection_id, ACTION_SCRAPE, tid) + info_hash,
        )
        if len(reply) != 8 + 12:
            raise RuntimeError(f"scrape reply of {len(reply)} bytes, expected 20")
        # BEP 15 orders them seeders, completed (downloads), leechers.
        seeders, downloads, leechers = struct.unpack_from(">III", reply, 8)
        return seeders, leechers, downloads


def bdecode(data):
    """Minimal bencode decoder: enough for a scrape reply."""

    def parse(i):
        c = data[i : i + 1]
        if c == b"i":
            end = data.index(b"e", i)
            return int(data[i + 1 : end]), end + 1
        if c == b"l":
            i, out = i + 1, []
            while data[i : i + 1] != b"e":
                v, i = parse(i)
                out.append(v)
            return out, i + 1
        if c == b"d":
            i, out = i + 1, {}
            while data[i : i + 1] != b"e":
                k, i = parse(i)
                v, i = parse(i)
                out[k] = v
            return out, i + 1
        colon = data.index(b":", i)
        n = int(data[i:colon])
        return data[colon + 1 : colon + 1 + n], colon + 1 + n

    value, end = parse(0)
    if end != len(data):
        raise ValueError("trailing data after bencoded value")
    return value


def scrape_http(url, info_hash, cafile):
    """GET /scrape?info_hash=... (BEP 48: the announce path's last 'announce' becomes
    'scrape'); returns (seeders, leechers, downloads)."""
    path = url.path
    head, _, tail = path.rpartition("/")
    if not tail.startswith("announce"):
        raise RuntimeError(f"cannot derive a scrape URL from {url.geturl()}")
    scrape_path = head + "/" + "scrape" + tail[len("announce") :]
    query = "info_hash=" + urllib.parse.quote_from_bytes(info_hash, safe="")
    if url.query:
        # The announce URL's own parameters (a private tracker's passkey) go along.
        query = url.query + "&" + query
    scrape_url = urllib.parse.urlunsplit((url.scheme, url.netloc, scrape_path, query, ""))
    context = None
    if url.scheme == "https":
        # Verify the tracker's certificate against the test's own self-signed one.
        context = ssl.create_default_context(cafile=cafile)
    with urllib.request.urlopen(scrape_url, timeout=2, context=context) as resp:
        body = resp.read()
    reply = bdecode(body)
    if b"failure reason" in reply:
        raise RuntimeError(f"failure reason: {reply[b'failure reason'].decode(errors='replace')}")
    files = reply.get(b"files", {})
    if info_hash not in files:
        # A tracker that does not know the torrent may leave it out.
        return 0, 0, 0
    f = files[info_hash]
    return f[b"complete"], f[b"incomplete"], f[b"downloaded"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("info_hash")
    p.add_argument("--expect", help="seeders,leechers,downloads")
    p.add_argument("--timeout", type=float, default=15)
    p.add_argument("--cafile", help="CA certificate (PEM) for https")
    args = p.parse_args()

    url = urllib.parse.urlsplit(args.url)
    info_hash = bytes.fromhex(args.info_hash)
    if len(info_hash) != 20:
        sys.exit("info hash must be 40 hex characters")
    expect = tuple(int(x) for x in args.expect.split(",")) if args.expect else None

    def once():
        if url.scheme == "udp":
            return scrape_udp(url, info_hash)
        if url.scheme in ("http", "https"):
            return scrape_http(url, info_hash, args.cafile)
        sys.exit(f"unsupported scheme {url.scheme}")

    deadline = time.monotonic() + args.timeout
    last, error = None, None
    while True:
        try:
            last, error = once(), None
        except (OSError, RuntimeError, ValueError, KeyError) as e:
            error = e
        if last is not None and (expect is None or last == expect):
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)

    if last is None:
        print(f"scrape of {args.url} failed: {error}", file=sys.stderr)
        sys.exit(1)
    s, l, d = last
    print(f"seeders={s} leechers={l} downloads={d}")
    if expect is not None and last != expect:
        print(
            f"expected seeders={expect[0]} leechers={expect[1]} downloads={expect[2]}"
            + (f" (last error: {error})" if error else ""),
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
