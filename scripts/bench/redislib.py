"""A real redis-server for the cluster benches, and a minimal RESP2 client to drive it
and read its own accounting (INFO: CPU seconds, network bytes, memory)."""

import os
import shutil
import socket
import subprocess
import tempfile
import time

import benchlib


class Redis:
    """redis-server on a free loopback port, pinned to `cpus`; stopped by its PID."""

    def __init__(self, cpus):
        if not shutil.which("redis-server"):
            raise SystemExit("redis-server is missing: apt-get install redis-server")
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.dir = tempfile.mkdtemp(prefix="shoal-bench-redis-")
        cmd = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
               "--save", "", "--appendonly", "no", "--dir", self.dir]
        self.proc = benchlib.start(cmd, cpus, open(os.path.join(self.dir, "log"), "w"))
        deadline = time.time() + 10
        while True:
            try:
                self.client = Client(self.port)
                if self.client.call("PING") == "PONG":
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise SystemExit("redis-server did not answer")
            time.sleep(0.05)

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def info(self):
        """The counters the benches read: CPU seconds (user + sys of the server),
        bytes in and out, memory used."""
        text = self.client.call("INFO", "all").decode()
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return {
            "cpu": float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"]),
            "bytes_in": int(fields["total_net_input_bytes"]),
            "bytes_out": int(fields["total_net_output_bytes"]),
            "memory": int(fields["used_memory"]),
            "commands": int(fields["total_commands_processed"]),
        }

    def stop(self):
        benchlib.stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class Client:
    """Blocking RESP2 over TCP; `pipeline` sends many commands in one write."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sent = 0
        self.received = 0

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            if not isinstance(arg, bytes):
                arg = str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
        return b"".join(out)

    def call(self, *args):
        return self.pipeline([args])[0]

    def pipeline(self, commands):
        data = b"".join(self.encode(*command) for command in commands)
        self.sock.sendall(data)
        self.sent += len(data)
        return [self.reply() for _ in commands]

    def _line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _more(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise OSError("redis closed the connection")
        self.received += len(chunk)
        self.buf += chunk

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._more()
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"not RESP: {line!r}")
