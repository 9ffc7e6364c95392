"""Backends and clients on the booted system's loopback (this process runs in
its network namespace): tagged echo servers, one-shot exchanges, a connect
loop and a sha256-checked stream."""

import hashlib
import random
import socket
import threading
import time

# Longest any socket operation waits: a client queued in a stored listener's
# backlog while oi restarts waits for the new oi, well under this.
PATIENCE = 10.0


class Backend:
    """Accepts on host:0; greets each client with `tag` and a newline, then
    echoes; remembers each client's address (the transparent case)."""

    def __init__(self, tag, host="127.0.0.1"):
        self.tag = tag
        self.peers = []
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.peers.append(peer[0])
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            try:
                conn.sendall(self.tag.encode() + b"\n")
                while True:
                    data = conn.recv(65536)
                    if not data:
                        return
                    conn.sendall(data)
            except OSError:
                return


class Client:
    """One connection through oi: the backend's tag, then echoed exchanges."""

    def __init__(self, port, host="127.0.0.1", source=None):
        self.sock = socket.socket()
        self.sock.settimeout(PATIENCE)
        if source is not None:
            self.sock.bind((source, 0))
        self.sock.connect((host, port))
        self.tag = self._line()

    def _line(self):
        line = b""
        while not line.endswith(b"\n"):
            byte = self.sock.recv(1)
            if not byte:
                raise ConnectionError(f"closed before the backend's greeting (got {line!r})")
            line += byte
            if len(line) > 64:
                raise ConnectionError(f"no greeting: {line!r}")
        return line[:-1].decode()

    def echo(self, payload=b"ping"):
        self.sock.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = self.sock.recv(len(payload) - len(got))
            if not chunk:
                raise ConnectionError(f"closed after {len(got)} of {len(payload)} echoed bytes")
            got += chunk
        if got != payload:
            raise ConnectionError("the echo differs from what was sent")

    def close(self):
        self.sock.close()


def exchange(port, host="127.0.0.1", source=None):
    """Connects, reads the tag, checks one echo; returns the tag."""
    c = Client(port, host, source)
    try:
        c.echo()
        return c.tag
    finally:
        c.close()


class ConnectLoop:
    """Connects and exchanges again and again on a thread, counting outcomes,
    until stopped (or max_rounds, so it is bounded)."""

    def __init__(self, port, max_rounds=20000):
        self.port = port
        self.max_rounds = max_rounds
        self.ok = 0
        self.refused = 0
        self.failed = []
        self.slowest = 0.0
        self.stop = threading.Event()
        self.progress = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        for _ in range(self.max_rounds):
            if self.stop.is_set():
                return
            started = time.monotonic()
            try:
                exchange(self.port)
                with self.progress:
                    self.ok += 1
                    self.slowest = max(self.slowest, time.monotonic() - started)
                    self.progress.notify_all()
            except ConnectionRefusedError:
                self.refused += 1
            except OSError as e:
                self.failed.append(repr(e))

    def wait_ok(self, count, timeout=PATIENCE):
        """Waits until `count` exchanges have succeeded in all."""
        with self.progress:
            if not self.progress.wait_for(lambda: self.ok >= count or not self.thread.is_alive(), timeout):
                raise AssertionError(f"the connect loop made {self.ok} of {count} exchanges")

    def finish(self):
        self.stop.set()
        self.thread.join(PATIENCE * 2)


class Stream:
    """One long connection: seeded random chunks out, their echo back, both
    hashed; runs until stopped or `limit` bytes (bounded)."""

    def __init__(self, port, limit=256 * 1024 * 1024):
        self.client = Client(port)
        self.sent = hashlib.sha256()
        self.received = hashlib.sha256()
        self.bytes = 0
        self.error = None
        self.limit = limit
        self.stop = threading.Event()
        self.progress = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        rng = random.Random(7)
        try:
            while not self.stop.is_set() and self.bytes < self.limit:
                chunk = rng.randbytes(rng.randint(1, 64 * 1024))
                self.sent.update(chunk)
                self.client.sock.sendall(chunk)
                got = 0
                while got < len(chunk):
                    part = self.client.sock.recv(len(chunk) - got)
                    if not part:
                        raise ConnectionError(f"closed after {self.bytes + got} bytes")
                    self.received.update(part)
                    got += len(part)
                with self.progress:
                    self.bytes += len(chunk)
                    self.progress.notify_all()
                # Pacing, not synchronisation: a steady stream that leaves
                # the shared machine's CPU to oi and dpkg.
                time.sleep(0.002)
            if self.bytes >= self.limit:
                self.error = f"reached its {self.limit}-byte bound before it was stopped"
        except OSError as e:
            self.error = repr(e)
        finally:
            with self.progress:
                self.progress.notify_all()

    def wait_bytes(self, count, timeout=PATIENCE):
        with self.progress:
            self.progress.wait_for(lambda: self.bytes >= count or self.error or not self.thread.is_alive(), timeout)
        if self.error:
            raise AssertionError(f"the stream broke: {self.error}")
        if self.bytes < count:
            raise AssertionError(f"the stream moved {self.bytes} of {count} bytes in {timeout} s")

    def finish(self):
        """Stops; returns (bytes, sent sha256, received sha256)."""
        self.stop.set()
        self.thread.join(PATIENCE * 2)
        self.client.close()
        if self.error:
            raise AssertionError(f"the stream broke: {self.error}")
        return self.bytes, self.sent.hexdigest(), self.received.hexdigest()
