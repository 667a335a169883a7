#!/usr/bin/env python3
"""Soak: each tracker at saturation for a while, attacked all along, watched.

For each tracker (UDP, HTTP, WebTorrent) in turn:

* the tracker runs as its release binary with a config whose capacity limits make a
  small memory budget (so that a flood must hit them), and a per-client rate high
  enough for the load tester, which sends from a few loopback addresses of a /24 of
  its own;
* the tracker's own load tester keeps it saturated;
* mischief runs alongside, from many source addresses (all of 127.0.0.0/8, as a
  botnet would): garbage (random datagrams or requests), a flood of fresh info hashes,
  connection churn (TCP connections opened and dropped, half-sent requests), slow
  readers (WebTorrent clients that announce and never read), and issue 41's attacks:
  UDP connects and guessed connection ids forged from the well-behaved client's own
  address, HTTP clients that pipeline requests and never read, WebTorrent
  connections that announce once and stay quiet to hold slots;
* issue 52's attacks: fresh info hashes each announced from two ports of one address
  (UDP, HTTP: swarms of one client that must give way in a full tracker), spells of
  junk datagrams at full speed (UDP: 5 s a minute, which must not move the interval),
  and connections churned from many addresses against the monitoring endpoint (which
  must keep answering `/health`);
* a well-behaved client announces and scrapes once a second and checks every answer
  (its own peer listed in the counts, the peer it announced with sent back); every
  few seconds two honest clients start a new torrent together (UDP, HTTP), which
  must be stored and served, and a client that takes 250 ms between connecting and
  asking checks `/health`;
* RSS is sampled every few seconds and must stay under the budget; the tracker's pid
  must stay the same (no restart) and the process alive.

Prints a markdown report; exits non-zero if any check failed. Loopback only, bounded
in time; every process it starts is stopped by pid.
"""

import argparse
import base64
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

MiB = 1024 * 1024


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_log(path, needle, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and needle in open(path, errors="replace").read():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{needle!r} never appeared in {path}")


# --- well-behaved clients ------------------------------------------------------------

UDP_MAGIC = 0x41727101980


# The well-behaved client's address, which the mischief forges.
VICTIM = "127.0.0.200"
# A second honest client, in a network of its own.
SECOND_CLIENT = "127.0.200.201"


def botnet_address(rng):
    """Any loopback address but the well-behaved client's and the load tester's."""
    return f"127.{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


class UdpClient:
    def __init__(self, port):
        self.server = ("127.0.0.1", port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((VICTIM, 0))
        self.sock.settimeout(2)
        self.conn = None
        self.conn_time = 0

    def call(self, packet, tid):
        for _ in range(3):
            self.sock.sendto(packet, self.server)
            try:
                while True:
                    data, _ = self.sock.recvfrom(4096)
                    if len(data) >= 8 and struct.unpack(">I", data[4:8])[0] == tid:
                        return data
            except socket.timeout:
                continue
        raise RuntimeError("no UDP reply in three tries")

    def check(self, info_hash, port):
        if self.conn is None or time.time() - self.conn_time > 60:
            tid = random.getrandbits(32)
            data = self.call(struct.pack(">QII", UDP_MAGIC, 0, tid), tid)
            self.conn = struct.unpack(">Q", data[8:16])[0]
            self.conn_time = time.time()
        tid = random.getrandbits(32)
        packet = struct.pack(">QII", self.conn, 1, tid) + info_hash + b"-SOAK00-" + b"w" * 12
        packet += struct.pack(">QQQIIIiH", 0, 100, 0, 0, 0, 0, 50, port)
        data = self.call(packet, tid)
        action = struct.unpack(">I", data[:4])[0]
        if action != 1:
            raise RuntimeError(f"announce answered with action {action}: {data[8:]!r}")
        _, _, interval, leechers, seeders = struct.unpack(">IIIII", data[:20])
        if leechers + seeders < 1:
            raise RuntimeError(f"announce counts leave out the announcer: {leechers}, {seeders}")
        tid = random.getrandbits(32)
        data = self.call(struct.pack(">QII", self.conn, 2, tid) + info_hash, tid)
        seeders, completed, leechers = struct.unpack(">III", data[8:20])
        if leechers < 1:
            raise RuntimeError(f"scrape does not count the announcer: {data[8:20]!r}")
        return interval


def udp_announce(source, port, info_hash, peer_port):
    """One announce from `source` with a connection of its own: (leechers, interval)."""
    client = UdpClient(port)
    client.sock.close()
    client.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.sock.bind((source, 0))
    client.sock.settimeout(2)
    try:
        tid = random.getrandbits(32)
        data = client.call(struct.pack(">QII", UDP_MAGIC, 0, tid), tid)
        conn = struct.unpack(">Q", data[8:16])[0]
        tid = random.getrandbits(32)
        packet = struct.pack(">QII", conn, 1, tid) + info_hash + b"-SOAK00-" + b"n" * 12
        packet += struct.pack(">QQQIIIiH", 0, 100, 0, 2, 0, 0, 50, peer_port)
        data = client.call(packet, tid)
        if struct.unpack(">I", data[:4])[0] != 1:
            raise RuntimeError(f"a new honest torrent refused: {data[8:]!r}")
        _, _, interval, leechers, _ = struct.unpack(">IIIII", data[:20])
        return leechers, interval
    finally:
        client.sock.close()


def http_announce(source, port, info_hash, peer_port):
    """One announce from `source`: the number of leechers in the reply."""
    data = http_get(port, f"/announce?info_hash={percent(info_hash)}&peer_id=-SOAK00-nnnnnnnnnnnn"
                          f"&port={peer_port}&uploaded=0&downloaded=0&left=100&compact=1&event=started",
                    source=source)
    if not data.startswith(b"HTTP/1.1 200") or b"failure reason" in data:
        raise RuntimeError(f"a new honest torrent refused: {data[:200]!r}")
    at = data.find(b"10:incompletei")
    if at < 0:
        raise RuntimeError(f"announce without counts: {data[:200]!r}")
    return int(data[at + 14:data.index(b"e", at + 14)])


def new_honest_torrent(kind, port, serial):
    """Two honest clients (two addresses) start a new torrent: it must be stored."""
    info_hash = b"soak-new-" + serial.to_bytes(11, "big")
    announce = udp_announce if kind == "udp" else http_announce
    first = announce(VICTIM, port, info_hash, 7001)
    second = announce(SECOND_CLIENT, port, info_hash, 7002)
    leechers = second[0] if kind == "udp" else second
    if leechers < 2:
        raise RuntimeError(f"a new torrent of two honest clients holds {leechers} peers ({first})")


HEALTH_DELAY = 0.25


def health_check(metrics_port):
    """A client that takes 250 ms between connecting and asking, a slow prober."""
    with socket.create_connection(("127.0.0.1", metrics_port), timeout=3,
                                  source_address=(VICTIM, 0)) as s:
        time.sleep(HEALTH_DELAY)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: soak\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"/health answered {data[:80]!r}")


def http_get(port, target, timeout=3, source="127.0.0.1"):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def percent(data):
    return "".join(f"%{b:02X}" for b in data)


class HttpClient:
    def __init__(self, port):
        self.port = port

    def check(self, info_hash, port):
        data = http_get(self.port, f"/announce?info_hash={percent(info_hash)}&peer_id=-SOAK00-wwwwwwwwwwww"
                                   f"&port={port}&uploaded=0&downloaded=0&left=100&compact=1&numwant=50")
        if not data.startswith(b"HTTP/1.1 200") or b"failure reason" in data:
            raise RuntimeError(f"announce: {data[:200]!r}")
        if b"10:incompletei" not in data:
            raise RuntimeError(f"announce without counts: {data[:200]!r}")
        data = http_get(self.port, f"/scrape?info_hash={percent(info_hash)}")
        if not data.startswith(b"HTTP/1.1 200") or b"10:incompletei0e" in data:
            raise RuntimeError(f"scrape does not count the announcer: {data[:200]!r}")


class WebSocket:
    """A minimal WebSocket client: text frames, masked, no extensions."""

    def __init__(self, port, timeout=3, source="127.0.0.1"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /announce HTTP/1.1\r\nHost: soak\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("closed during the upgrade")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"upgrade refused: {head[:100]!r}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def send(self, obj):
        payload = json.dumps(obj).encode()
        mask = os.urandom(4)
        header = bytes([0x81])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _need(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buffer += chunk

    def receive(self):
        while True:
            self._need(2)
            opcode, n = self.buffer[0] & 0x0F, self.buffer[1] & 0x7F
            at = 2
            if n == 126:
                self._need(4)
                n, at = struct.unpack(">H", self.buffer[2:4])[0], 4
            elif n == 127:
                self._need(10)
                n, at = struct.unpack(">Q", self.buffer[2:10])[0], 10
            self._need(at + n)
            payload, self.buffer = self.buffer[at:at + n], self.buffer[at + n:]
            if opcode == 1:
                return json.loads(payload)
            if opcode == 8:
                raise RuntimeError(f"closed by the tracker: {payload!r}")

    def close(self):
        self.sock.close()


def chars(data):
    return data.decode("latin-1")


class WsClient:
    def __init__(self, port):
        self.port = port
        self.ws = None

    def check(self, info_hash, port):
        if self.ws is None:
            self.ws = WebSocket(self.port)
        self.ws.send({"action": "announce", "info_hash": chars(info_hash), "peer_id": "-SOAK00-wwwwwwwwwwww",
                      "event": "started", "left": 100, "uploaded": 0, "downloaded": 0, "numwant": 5,
                      "offers": []})
        reply = self.ws.receive()
        while reply.get("action") != "announce" or "complete" not in reply:
            if "failure reason" in reply:
                raise RuntimeError(f"announce refused: {reply}")
            reply = self.ws.receive()
        if reply["incomplete"] < 1:
            raise RuntimeError(f"announce counts leave out the announcer: {reply}")


# --- mischief ------------------------------------------------------------------------

class Mischief(threading.Thread):
    """Garbage, fresh info hashes, connection churn and slow readers, until stopped."""

    def __init__(self, kind, port):
        super().__init__(daemon=True)
        self.kind, self.port = kind, port
        self.stop = threading.Event()
        self.sent = {"garbage": 0, "fresh torrents": 0, "churned connections": 0, "slow readers": 0,
                     "offers to slow readers": 0, "forged from the victim": 0,
                     "pipelining non-readers": 0, "quiet slot holders": 0}
        self.errors = 0

    def run(self):
        held = []
        rng = random.Random(7)
        while not self.stop.is_set():
            try:
                getattr(self, "round_" + self.kind)(rng, held)
            except (OSError, RuntimeError):
                self.errors += 1
            # Keep at most a few hundred open sockets of slow readers or churn.
            while len(held) > 200:
                held.pop(0).close()
            self.stop.wait(0.05)
        for s in held:
            s.close()

    def round_udp(self, rng, held):
        # Forged "from" the well-behaved client: connects and guessed connection ids,
        # which must never get it limited or banned.
        forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        forger.bind((VICTIM, 0))
        for _ in range(20):
            forger.sendto(struct.pack(">QII", UDP_MAGIC, 0, rng.getrandbits(32)), ("127.0.0.1", self.port))
            forger.sendto(struct.pack(">QII", rng.getrandbits(64), 2, 1) + rng.randbytes(20),
                          ("127.0.0.1", self.port))
            self.sent["forged from the victim"] += 2
        forger.close()
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((botnet_address(rng), 0))
        for _ in range(50):
            s.sendto(rng.randbytes(rng.randint(0, 200)), ("127.0.0.1", self.port))
            self.sent["garbage"] += 1
        # Fresh info hashes with a valid connection id.
        s.settimeout(1)
        s.sendto(struct.pack(">QII", UDP_MAGIC, 0, 1), ("127.0.0.1", self.port))
        try:
            data, _ = s.recvfrom(64)
            conn = struct.unpack(">Q", data[8:16])[0]
            for _ in range(25):
                # Each from two ports of this address: a swarm of one client.
                info_hash = rng.randbytes(20)
                for port in (6881, 6882):
                    packet = struct.pack(">QII", conn, 1, 2) + info_hash + rng.randbytes(20)
                    packet += struct.pack(">QQQIIIiH", 0, 1, 0, 2, 0, 0, -1, port)
                    s.sendto(packet, ("127.0.0.1", self.port))
                self.sent["fresh torrents"] += 1
        except socket.timeout:
            pass
        s.close()

    def round_http(self, rng, held):
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=1,
                                         source_address=(botnet_address(rng), 0))
            choice = rng.randint(0, 3)
            if choice == 0:
                s.sendall(rng.randbytes(rng.randint(1, 300)))
                self.sent["garbage"] += 1
                s.close()
            elif choice == 1:
                s.sendall(b"GET /announce?info_hash=")  # half a request, then hold it
                held.append(s)
                self.sent["churned connections"] += 1
            elif choice == 2:
                # Pipelined scrapes, never read: the tracker stops reading it.
                s.setblocking(False)
                request = f"GET /scrape?info_hash={percent(rng.randbytes(20))} HTTP/1.1\r\n\r\n".encode()
                try:
                    s.send(request * 2000)
                except BlockingIOError:
                    pass
                held.append(s)
                self.sent["pipelining non-readers"] += 1
            else:
                # A fresh hash from two ports of this address: a swarm of one client.
                info_hash = percent(rng.randbytes(20))
                s.close()
                source = botnet_address(rng)
                for port in (6881, 6882):
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=1,
                                                 source_address=(source, 0))
                    target = (f"/announce?info_hash={info_hash}&peer_id={percent(rng.randbytes(20))}"
                              f"&port={port}&left=1&compact=1")
                    s.sendall(f"GET {target} HTTP/1.1\r\n\r\n".encode())
                    s.close()
                self.sent["fresh torrents"] += 1

    def round_ws(self, rng, held):
        ws = WebSocket(self.port, source=botnet_address(rng))
        choice = rng.randint(0, 4)
        if choice == 0:
            ws.sock.sendall(bytes([0x81, 0x80 | 20]) + rng.randbytes(24))  # masked garbage text
            self.sent["garbage"] += 1
            ws.close()
        elif choice == 1:
            # A slow reader: announces in a popular torrent so offers come its way, never reads.
            ws.send({"action": "announce", "info_hash": chars(b"p" * 20), "peer_id": chars(rng.randbytes(20)),
                     "left": 1, "offers": []})
            held.append(ws.sock)
            self.sent["slow readers"] += 1
        elif choice == 2:
            # Offers into the popular torrent: they pile up at the slow readers.
            offers = [{"offer_id": chars(rng.randbytes(20)),
                       "offer": {"type": "offer", "sdp": "v=0 " + "x" * 4000}} for _ in range(10)]
            ws.send({"action": "announce", "info_hash": chars(b"p" * 20), "peer_id": chars(rng.randbytes(20)),
                     "left": 1, "numwant": 10, "offers": offers})
            self.sent["offers to slow readers"] += 10
            ws.close()
        elif choice == 3:
            # Announces once and stays quiet, holding a slot.
            ws.send({"action": "announce", "info_hash": chars(rng.randbytes(20)), "peer_id": chars(rng.randbytes(20)),
                     "left": 1, "offers": []})
            held.append(ws.sock)
            self.sent["quiet slot holders"] += 1
        else:
            for _ in range(5):
                ws.send({"action": "announce", "info_hash": chars(rng.randbytes(20)),
                         "peer_id": chars(rng.randbytes(20)), "left": 1, "offers": []})
                self.sent["fresh torrents"] += 1
            ws.close()
            self.sent["churned connections"] += 1


class MonitorChurn(threading.Thread):
    """Connections to the monitoring endpoint from 4,096 addresses of 16 /24s, 1,200 a
    second (above 256 slots over the health prober's 250 ms), each held silent until
    300 newer ones are (issue 52: with the oldest giving way, 9,502 a second from 500
    addresses starved `/health`). Faster, the host's connection tracking table fills
    (262,144 entries, each closed connection kept two minutes) and drops packets of
    everything. An attacker with more /24s than the endpoint has slots is beyond what
    it defends against (documents/deployment.md)."""

    RATE = 1200

    def __init__(self, metrics_port):
        super().__init__(daemon=True)
        self.port = metrics_port
        self.stop = threading.Event()
        self.opened = 0

    def run(self):
        rng = random.Random(11)
        held = []
        started = time.time()
        while not self.stop.is_set():
            if self.opened > (time.time() - started) * self.RATE:
                time.sleep(0.001)
                continue
            try:
                source = f"127.{60 + rng.randint(0, 15)}.{rng.randint(0, 15)}.{rng.randint(1, 254)}"
                s = socket.create_connection(("127.0.0.1", self.port), timeout=0.5,
                                             source_address=(source, 0))
                held.append(s)
                self.opened += 1
            except OSError:
                time.sleep(0.01)
            while len(held) > 300:
                held.pop(0).close()
        for s in held:
            s.close()


class JunkSpells(threading.Thread):
    """Junk datagrams at full speed from one address, 5 s in every 60 (issue 52: 5 s
    of junk held every client at the longest interval)."""

    SPELL, EVERY = 5.0, 60.0

    def __init__(self, port, started):
        super().__init__(daemon=True)
        self.port, self.started = port, started
        self.stop = threading.Event()
        self.sent = 0

    def in_spell(self, at):
        """Whether `at` (seconds since the start) is within a spell or the minute after."""
        return (at - 30) % self.EVERY < self.SPELL

    def run(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.199", 0))
        junk = b"\x5a" * 100
        while not self.stop.is_set():
            if self.in_spell(time.time() - self.started):
                for _ in range(256):
                    try:
                        s.sendto(junk, ("127.0.0.1", self.port))
                        self.sent += 1
                    except OSError:
                        pass
            else:
                self.stop.wait(0.1)
        s.close()


# --- one tracker ---------------------------------------------------------------------

# Torrents fill within minutes of the fresh-hash flood (so a full tracker is soaked);
# peers do not (a full peer table refuses every new peer, a limit of its own).
CAPACITY = {"max_torrents": 100_000, "max_peers": 2_000_000, "max_peers_per_torrent": 50_000}
# What the budget allows: peers and torrents at their limits (bytes each, measured
# generously above what the benches show), over what the tracker needs empty.
BUDGET_BYTES = {"udp": (64, 256), "http": (96, 256), "ws": (256, 512)}


def tracker_config(kind, port, metrics_port):
    capacity = "\n".join(f"{k} = {v}" for k, v in CAPACITY.items())
    network = f'address_ipv4 = "127.0.0.1:{port}"\nuse_ipv6 = false'
    extra = ""
    if kind == "ws":
        # The load tester's connections send far more requests and offers than a
        # browser's: its per-connection limits are off, as for the per-client ones.
        extra = "\n[limits]\nmax_requests_per_second = 0\nmax_offer_bytes_per_second = 0\n"
    return (f'[logging]\nlevel = "info"\n[network]\n{network}\n[capacity]\n{capacity}\n'
            f"[per_ip]\nrequests_per_second = 10000000\nburst = 10000000\n"
            f"max_connections = 0\nmax_connections_per_network = 0\n"
            f"[statistics]\ninterval = 30\n"
            f'[metrics]\nenabled = true\naddress = "127.0.0.1:{metrics_port}"\n{extra}')


def load_config(kind, port, seconds):
    common = f'server_address = "127.0.0.1:{port}"\nduration = {seconds}\nsummarize_last = 0\nreport_interval = 30\n'
    if kind == "udp":
        # Its own /24: a network that creates torrents at its rate spends that
        # network's new-torrent allowance in a full tracker (issue 52), which the
        # honest clients in 127.0.0.0/24 must not share.
        return common + ('[network]\nsource_ips = ["127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.4"]\n'
                         "[requests]\ntorrents = 50000\npeers = 200000\n")
    if kind == "http":
        return common + "connections = 32\n[requests]\ntorrents = 50000\npeers = 200000\n"
    return common + "connections_per_worker = 200\n[requests]\ntorrents = 2000\n"


def soak(kind, args, bin_dir, tmp):
    port, metrics_port = free_port(), free_port()
    config = os.path.join(tmp, f"{kind}.toml")
    open(config, "w").write(tracker_config(kind, port, metrics_port))
    log_path = os.path.join(tmp, f"{kind}.log")
    log = open(log_path, "w")
    tracker = subprocess.Popen([os.path.join(bin_dir, f"shoal_{kind}"), "-c", config],
                               stdout=log, stderr=subprocess.STDOUT)
    report = {"kind": kind, "checks": 0, "failures": [], "rss": [], "health_checks": 0,
              "new_torrents": 0, "intervals": []}
    try:
        wait_for_log(log_path, "listening on")
        pid = tracker.pid
        base_kib = status_kib(pid, "VmRSS")
        per_peer, per_torrent = BUDGET_BYTES[kind]
        budget = base_kib * 1024 + CAPACITY["max_peers"] * per_peer + CAPACITY["max_torrents"] * per_torrent \
            + 256 * MiB  # buffers, connections, allocator slack
        load_path = os.path.join(tmp, f"{kind}-load.toml")
        open(load_path, "w").write(load_config(kind, port, int(args.minutes * 60)))
        load_log = open(os.path.join(tmp, f"{kind}-load.log"), "w")
        load = subprocess.Popen([os.path.join(bin_dir, f"shoal_{kind}_load_test"), "-c", load_path],
                                stdout=load_log, stderr=subprocess.STDOUT)
        mischief = Mischief(kind, port)
        mischief.start()
        churn = MonitorChurn(metrics_port)
        churn.start()
        client = {"udp": UdpClient, "http": HttpClient, "ws": WsClient}[kind](port)
        info_hash = b"soak-well-behaved!!!"
        started = time.time()
        spells = JunkSpells(port, started)
        if kind == "udp":
            spells.start()
        next_sample = started
        serial = 0
        while time.time() - started < args.minutes * 60:
            at = time.time() - started
            try:
                interval = client.check(info_hash, 6881)
                report["checks"] += 1
                if interval:
                    report["intervals"].append((at, interval))
            except (OSError, RuntimeError, ValueError, KeyError) as err:
                report["failures"].append(f"{at:.0f} s: {err}")
                if kind == "ws":
                    client.ws = None
            try:
                health_check(metrics_port)
                report["health_checks"] += 1
            except (OSError, RuntimeError) as err:
                report["failures"].append(f"{at:.0f} s: health: {err}")
            if kind in ("udp", "http") and report["checks"] % 5 == 0:
                serial += 1
                try:
                    new_honest_torrent(kind, port, serial)
                    report["new_torrents"] += 1
                except (OSError, RuntimeError, ValueError) as err:
                    report["failures"].append(f"{at:.0f} s: {err}")
            if tracker.poll() is not None:
                report["failures"].append(f"the tracker exited with {tracker.returncode}")
                break
            if time.time() >= next_sample:
                rss = status_kib(pid, "VmRSS") * 1024
                report["rss"].append((time.time() - started, rss))
                if rss > budget:
                    report["failures"].append(f"RSS {rss / MiB:.0f} MiB over the budget {budget / MiB:.0f} MiB")
                next_sample += args.sample
            time.sleep(1)
        mischief.stop.set()
        mischief.join()
        churn.stop.set()
        churn.join()
        spells.stop.set()
        if spells.is_alive():
            spells.join()
        report["monitor_churn"] = churn.opened
        report["junk_sent"] = spells.sent
        if kind == "udp":
            junk_effect(report, spells)
        load.send_signal(signal.SIGINT)
        try:
            load.wait(timeout=20)
        except subprocess.TimeoutExpired:
            load.kill()
        report["budget"] = budget
        report["mischief"] = mischief.sent
        report["alive"] = tracker.poll() is None and tracker.pid == pid
        if not report["alive"]:
            report["failures"].append("the tracker did not stay up")
        stats = [line for line in open(log_path, errors="replace") if "requests/s" in line or "announces/s" in line]
        report["last_statistics"] = stats[-1].strip() if stats else ""
        load_text = open(os.path.join(tmp, f"{kind}-load.log"), errors="replace").read().strip().splitlines()
        report["load_summary"] = "\n".join(load_text[-4:])
    finally:
        if tracker.poll() is None:
            tracker.send_signal(signal.SIGTERM)
            try:
                tracker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                tracker.kill()
        log.close()
    return report


def junk_effect(report, spells):
    """The honest interval in each junk spell (and the minute after it) against the
    minute before it: junk must not move it past 10% (replies are jittered by 10%, so
    the highest of each window is compared)."""
    windows = []
    for start in range(30, 100_000, int(spells.EVERY)):
        before = [i for t, i in report["intervals"] if start - spells.EVERY + spells.SPELL <= t < start]
        during = [i for t, i in report["intervals"] if start <= t < start + spells.EVERY - spells.SPELL]
        if not during:
            break
        if before:
            windows.append((start, max(before), max(during)))
    report["junk_windows"] = windows
    for start, before, during in windows:
        if during > before * 1.1:
            report["failures"].append(f"junk spell at {start} s: the interval went from {before} to {during} s")


def markdown(reports, args):
    out = [f"Soak of {args.minutes} min per tracker; RSS sampled every {args.sample} s.\n"]
    out.append("| tracker | well-behaved checks | /health at 250 ms | new two-client torrents stored "
               "| failures | RSS first → last → peak MiB | budget MiB | stayed up |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in reports:
        rss = [v for _, v in r["rss"]] or [0]
        out.append(f"| {r['kind']} | {r['checks']} | {r['health_checks']} | {r['new_torrents']} "
                   f"| {len(r['failures'])} | "
                   f"{rss[0] / MiB:.0f} → {rss[-1] / MiB:.0f} → {max(rss) / MiB:.0f} | {r.get('budget', 0) / MiB:.0f} | "
                   f"{'yes' if r.get('alive') else 'NO'} |")
    for r in reports:
        out.append(f"\n**{r['kind']}**: mischief sent {r.get('mischief')}; "
                   f"{r.get('monitor_churn', 0)} connections churned against the monitoring endpoint")
        if r.get("junk_windows") is not None:
            windows = ", ".join(f"{s} s: {b} → {d}" for s, b, d in r["junk_windows"])
            out.append(f"- junk spells ({r.get('junk_sent', 0)} datagrams), honest interval before → "
                       f"during and after: {windows or 'none completed'}")
        samples = ", ".join(f"{t:.0f}s {v / MiB:.0f}" for t, v in r["rss"])
        out.append(f"- RSS MiB over time: {samples}")
        if r.get("last_statistics"):
            out.append(f"- last statistics line: `{r['last_statistics'][-400:]}`")
        if r.get("load_summary"):
            out.append("- load tester:\n```\n" + r["load_summary"] + "\n```")
        for failure in r["failures"][:20]:
            out.append(f"- FAILED: {failure}")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--sample", type=float, default=10, help="seconds between RSS samples")
    p.add_argument("--trackers", default="udp,http,ws")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="shoal-soak-")
    reports = []
    for kind in args.trackers.split(","):
        print(f"==> soaking {kind} for {args.minutes} min", file=sys.stderr)
        reports.append(soak(kind, args, args.bin_dir, tmp))
        print(f"    {reports[-1]['checks']} checks, {len(reports[-1]['failures'])} failures", file=sys.stderr)
    print(markdown(reports, args))
    return 1 if any(r["failures"] for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
