#!/usr/bin/env python3
"""Stands between BitTorrent clients and a tracker and records what the clients
report in every announce, so that a test can compare the tracker's accounting with
the clients' own counters rather than with the file size.

    announce_recorder.py udp  LISTEN_PORT TRACKER_PORT LOG
    announce_recorder.py http LISTEN_PORT TRACKER_PORT LOG

Listens on 127.0.0.1:LISTEN_PORT and passes every request to 127.0.0.1:TRACKER_PORT
unchanged (UDP: each client's datagrams from a socket of its own, so that the
tracker's replies and connection ids find their way back; HTTP: one request per
connection, as libtorrent and aria2 send them to a tracker). Each announce the
tracker answered goes to LOG as one JSON line: info_hash (hex), peer_id (hex),
uploaded, downloaded, left, event, and accepted (whether the tracker's answer was
an announce reply, not a refusal). Prints "listening" once ready; ends on SIGTERM.
"""

import json
import select
import signal
import socket
import struct
import sys
import threading
import urllib.parse

EVENTS = {0: "", 1: "completed", 2: "started", 3: "stopped"}


def record(log, lock, entry):
    with lock:
        log.write(json.dumps(entry) + "\n")
        log.flush()


def udp(listen_port, tracker_port, log, lock):
    tracker = ("127.0.0.1", tracker_port)
    front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    front.bind(("127.0.0.1", listen_port))
    # One upstream socket per client address; pending announces by transaction id.
    upstream, clients, pending = {}, {}, {}
    print("listening", flush=True)
    while True:
        readable, _, _ = select.select([front, *upstream.values()], [], [])
        for sock in readable:
            data, source = sock.recvfrom(65536)
            if sock is front:
                if source not in upstream:
                    up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    up.bind(("127.0.0.1", 0))
                    upstream[source] = up
                    clients[up] = source
                if len(data) >= 98 and struct.unpack(">I", data[8:12])[0] == 1:
                    transaction = data[12:16]
                    info_hash, peer_id = data[16:36], data[36:56]
                    downloaded, left, uploaded, event = struct.unpack(">QQQI", data[56:84])
                    pending[(source, transaction)] = {
                        "info_hash": info_hash.hex(),
                        "peer_id": peer_id.hex(),
                        "uploaded": uploaded,
                        "downloaded": downloaded,
                        "left": left,
                        "event": EVENTS.get(event, str(event)),
                    }
                upstream[source].sendto(data, tracker)
            else:
                client = clients[sock]
                if len(data) >= 8:
                    action = struct.unpack(">I", data[:4])[0]
                    entry = pending.pop((client, data[4:8]), None)
                    if entry is not None:
                        entry["accepted"] = action == 1
                        record(log, lock, entry)
                front.sendto(data, client)


def read_response(sock):
    """One HTTP response, by its Content-Length (the tracker may keep the connection)."""
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(65536)
        if not chunk:
            return response
        response += chunk
    head, body = response.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def http_connection(client, tracker_port, log, lock):
    with client:
        client.settimeout(30)
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = client.recv(65536)
            if not chunk:
                return
            request += chunk
        head = request.split(b"\r\n", 1)[0].decode("latin-1")
        target = head.split(" ")[1]
        with socket.create_connection(("127.0.0.1", tracker_port), timeout=30) as up:
            up.sendall(request)
            response = read_response(up)
        client.sendall(response)
        query = urllib.parse.urlsplit(target).query
        fields = dict(urllib.parse.parse_qsl(query, keep_blank_values=True, encoding="latin-1"))
        if "/announce" not in target or "info_hash" not in fields:
            return
        body = response.split(b"\r\n\r\n", 1)[-1]
        raw = lambda name: fields[name].encode("latin-1")  # noqa: E731
        record(log, lock, {
            "info_hash": raw("info_hash").hex(),
            "peer_id": raw("peer_id").hex(),
            "uploaded": int(fields.get("uploaded", 0)),
            "downloaded": int(fields.get("downloaded", 0)),
            "left": int(fields.get("left", 0)),
            "event": fields.get("event", ""),
            "accepted": response.startswith(b"HTTP/1.1 200") and b"failure reason" not in body,
        })


def http(listen_port, tracker_port, log, lock):
    front = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    front.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    front.bind(("127.0.0.1", listen_port))
    front.listen(64)
    print("listening", flush=True)
    while True:
        client, _ = front.accept()
        threading.Thread(
            target=http_connection, args=(client, tracker_port, log, lock), daemon=True
        ).start()


def main():
    mode, listen_port, tracker_port, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    log, lock = open(path, "a"), threading.Lock()
    {"udp": udp, "http": http}[mode](listen_port, tracker_port, log, lock)


if __name__ == "__main__":
    main()
