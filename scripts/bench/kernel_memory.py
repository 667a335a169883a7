#!/usr/bin/env python3
"""Kernel memory held for clients that never read (issue 41, item 6).

For each TCP tracker (HTTP, WebTorrent), twice in one run: with the kernel's
autotuned connection buffers (`socket_send_buffer_size = 0`,
`socket_recv_buffer_size = 0`: what shoal did before) and with shoal's defaults
(64 KiB each). Each time, --clients connections from as many loopback addresses
never read:

* HTTP: each sends pipelined scrapes, as many as the kernel takes, for --seconds.
* WebTorrent: each announces in one torrent as a leecher and never reads, while a
  sender floods the torrent with offers (ten of 4 KB per announce) for --seconds.

Then it reads what the kernel holds for the tracker's connections (the send and
receive queues of every socket on the tracker's port, /proc/net/tcp), the host's TCP
memory (/proc/net/sockstat, pages), and the tracker's RSS, and prints a markdown
table. The clients' own receive buffers are 4 KiB so that what is counted is the
tracker's side. Loopback only; every process it starts is stopped by pid.

  scripts/bench/kernel_memory.py --bin-dir target/release --clients 1000
"""

import argparse
import base64
import json
import os
import resource
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def address(n):
    """The n-th client's loopback address (none of 127.0.0.0/16)."""
    return f"127.{1 + n // 65024}.{n // 254 % 256}.{n % 254 + 1}"


def kernel_queues(port):
    """Bytes in the send and receive queues of every established socket on `port`."""
    total, sockets = 0, 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) != port or fields[3] != "01":
                continue
            tx, rx = fields[4].split(":")
            total += int(tx, 16) + int(rx, 16)
            sockets += 1
    return total, sockets


def tcp_memory_pages():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                words = line.split()
                return int(words[words.index("mem") + 1])
    return 0


def rss(pid):
    return status_kib(pid, "VmRSS") * 1024


def client_socket(n, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Small client buffers: on loopback the clients' buffers are the host's too, and
    # what is measured is the tracker's side.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    s.bind((address(n), 0))
    s.connect(("127.0.0.1", port))
    return s


def percent(data):
    return "".join(f"%{b:02X}" for b in data)


def ws_frame(obj):
    payload = json.dumps(obj).encode()
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        header = bytes([0x81, 0x80 | n])
    elif n < 65536:
        header = bytes([0x81, 0x80 | 126]) + struct.pack(">H", n)
    else:
        header = bytes([0x81, 0x80 | 127]) + struct.pack(">Q", n)
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_open(n, port):
    s = client_socket(n, port)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /announce HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("closed during the upgrade")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"upgrade refused: {head[:80]!r}")
    return s


TORRENT = "q" * 20


def http_load(clients, port, seconds):
    request = f"GET /scrape?info_hash={percent(b'k' * 20)} HTTP/1.1\r\n\r\n".encode()
    stream = request * 1000
    held = [client_socket(n, port) for n in range(clients)]
    # Where each client is in its endless stream of whole requests.
    at = [0] * clients
    for s in held:
        s.setblocking(False)
    deadline = time.time() + seconds
    while time.time() < deadline:
        for n, s in enumerate(held):
            try:
                at[n] = (at[n] + s.send(stream[at[n]:])) % len(request)
            except (BlockingIOError, ConnectionError):
                pass
        time.sleep(0.05)
    return held


def ws_load(clients, port, seconds):
    held = []
    for n in range(clients):
        s = ws_open(n, port)
        s.sendall(ws_frame({"action": "announce", "info_hash": TORRENT, "peer_id": f"{n:020d}", "left": 1,
                            "numwant": 0, "offers": []}))
        held.append(s)
    sender = ws_open(clients + 1, port)
    offers = [{"offer_id": f"{i:020d}", "offer": {"type": "offer", "sdp": "v=0 " + "x" * 4000}}
              for i in range(10)]
    frame = ws_frame({"action": "announce", "info_hash": TORRENT, "peer_id": "s" * 20,
                      "left": 1, "numwant": 10, "offers": offers})
    deadline = time.time() + seconds
    while time.time() < deadline:
        sender.sendall(frame)
        # Its own replies, read as they come so that it keeps up.
        try:
            while sender.recv(65536, socket.MSG_DONTWAIT):
                pass
        except BlockingIOError:
            pass
    held.append(sender)
    return held


def measure(kind, bin_dir, clients, seconds, buffers, tmp):
    port = free_port()
    config = os.path.join(tmp, f"{kind}-{buffers}.toml")
    send, receive = (0, 0) if buffers == "kernel" else (64 * 1024, 64 * 1024)
    extra = "\n[limits]\nmax_requests_per_second = 0\nmax_offer_bytes_per_second = 0\n" if kind == "ws" else ""
    with open(config, "w") as f:
        f.write(f'[logging]\nlevel = "warn"\n[network]\naddress_ipv4 = "127.0.0.1:{port}"\nuse_ipv6 = false\n'
                f"socket_send_buffer_size = {send}\nsocket_recv_buffer_size = {receive}\n"
                f"[per_ip]\nrequests_per_second = 0\nmax_connections = 0\nmax_connections_per_network = 0\n"
                f"[statistics]\ninterval = 0\n{extra}")
    tracker = subprocess.Popen([os.path.join(bin_dir, f"shoal_{kind}"), "-c", config],
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        pages_before = tcp_memory_pages()
        held = (http_load if kind == "http" else ws_load)(clients, port, seconds)
        time.sleep(1)
        queued, sockets = kernel_queues(port)
        pages = tcp_memory_pages() - pages_before
        memory = rss(tracker.pid)
        for s in held:
            s.close()
        return {"kind": kind, "buffers": buffers, "sockets": sockets, "queued": queued,
                "tcp_mem": pages * 4096, "rss": memory}
    finally:
        tracker.send_signal(signal.SIGTERM)
        try:
            tracker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            tracker.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--trackers", default="http,ws")
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * a.clients + 1024)), hard))
    tmp = tempfile.mkdtemp(prefix="shoal-kernel-memory-")
    rows = []
    for kind in a.trackers.split(","):
        for buffers in ("kernel", "shoal"):
            print(f"==> {kind}, {buffers} buffers, {a.clients} clients", file=sys.stderr)
            rows.append(measure(kind, a.bin_dir, a.clients, a.seconds, buffers, tmp))
    print(f"{a.clients} clients that never read, {a.seconds:.0f} s of traffic each.\n")
    print("| tracker | connection buffers | sockets | kernel queues MiB | host TCP memory MiB | tracker RSS MiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        label = "kernel autotuning (before)" if r["buffers"] == "kernel" else "64 KiB each (default)"
        print(f"| {r['kind']} | {label} | {r['sockets']} | {r['queued'] / MiB:.1f} | {r['tcp_mem'] / MiB:.1f} | "
              f"{r['rss'] / MiB:.0f} |")


if __name__ == "__main__":
    main()
