#!/usr/bin/env python3
"""The load an instrumented oi runs for profile-guided optimisation.

    dist/pgo-train.py OI

Run by dist/pgo-build.sh, between the instrumented build and the final one.
OI is the instrumented binary; it writes its profile when it exits after
SIGTERM. The clients and echo backends are this script's own threads, so the
package's build compiles nothing more for them (loadgen's release build was
a third build of every dependency in CI).

The profile decides which code the compiler lays out together and optimises
for speed: code this run never reaches is treated as cold (placed apart,
optimised for size). So it runs what a forwarder spends its time on, in about
the proportions of a busy server: TCP connections with a small request and
answer, 64 B round trips on one connection, a bulk transfer both ways (the
splice path), UDP round trips one datagram at a time and in bursts (recvmmsg
batches, GSO sends), with a log file and an allow rule as most rinetd.conf
files have. Everything binds to 127.0.0.1, backends on port 0. Every wait is
bounded: a broken oi fails the run with a message, never hangs it.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CONNECT_SECS = 3
CONNECT_WORKERS = 4
ROUND_TRIPS = 20_000
BULK_BYTES = 512 * 1024 * 1024
CHUNK = 256 * 1024
UDP_ROUND_TRIPS = 20_000
UDP_BURSTS = 2_000
BURST = 16


def free_port():
    """A port the kernel picked for a moment: for oi's listeners, which its
    configuration must name."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_echo(listener):
    """Accepts connections until the listener is closed; echoes each in a
    thread of its own until its client closes."""
    def echo(conn):
        with conn:
            try:
                while True:
                    data = conn.recv(CHUNK)
                    if not data:
                        return
                    conn.sendall(data)
            except OSError:
                return  # the client's side reports what went wrong

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def request(port, size=64):
    """One connection: `size` bytes out, the same back, closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"c" * size)
        got = 0
        while got < size:
            data = s.recv(size - got)
            if not data:
                raise OSError("closed early")
            got += len(data)


def connections(port):
    """CONNECT_WORKERS threads making connections for CONNECT_SECS."""
    made, failed = [0] * CONNECT_WORKERS, [0] * CONNECT_WORKERS
    end = time.monotonic() + CONNECT_SECS

    def work(i):
        while time.monotonic() < end:
            try:
                request(port)
                made[i] += 1
            except OSError:
                failed[i] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(CONNECT_WORKERS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if sum(failed) > sum(made) // 10:
        sys.exit(f"pgo-train: {sum(failed)} of {sum(made) + sum(failed)} connections failed")
    return sum(made)


def round_trips(port):
    """ROUND_TRIPS of 64 B on one connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(ROUND_TRIPS):
            s.sendall(b"r" * 64)
            got = 0
            while got < 64:
                data = s.recv(64 - got)
                if not data:
                    sys.exit("pgo-train: round trips: closed early")
                got += len(data)


def udp_echo(sock):
    """Echoes datagrams until the socket is closed."""
    while True:
        try:
            data, peer = sock.recvfrom(65536)
            sock.sendto(data, peer)
        except OSError:
            return


def started(port, proc):
    """Waits (10 s at most) until oi, `proc`, accepts TCP connections on
    `port`; false if it exited first."""
    for _ in range(500):
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.02)
    proc.kill()
    proc.wait()
    sys.exit(f"pgo-train: oi does not listen on port {port} after 10 s")


def bulk(port):
    """Sends BULK_BYTES through oi to the echo backend and reads them back."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    received = 0

    def read():
        nonlocal received
        while True:
            try:
                data = s.recv(CHUNK)
            except OSError:
                return  # counted short below
            if not data:
                return
            received += len(data)

    reader = threading.Thread(target=read)
    reader.start()
    block = b"x" * CHUNK
    for _ in range(BULK_BYTES // CHUNK):
        s.sendall(block)
    s.shutdown(socket.SHUT_WR)
    reader.join(60)
    s.close()
    reader.join(60)
    if received != BULK_BYTES:
        sys.exit(f"pgo-train: bulk echoed {received} of {BULK_BYTES} bytes")


def udp_load(port):
    """Round trips one datagram at a time, then in bursts."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    target = ("127.0.0.1", port)
    lost = 0

    def answer():
        nonlocal lost
        try:
            s.recvfrom(2048)
            return True
        except socket.timeout:
            lost += 1
            if lost > 10:
                sys.exit(f"pgo-train: {lost} UDP answers lost (2 s each)")
            return False

    for _ in range(UDP_ROUND_TRIPS):
        s.sendto(b"p" * 64, target)
        answer()
    for _ in range(UDP_BURSTS):
        for _ in range(BURST):
            s.sendto(b"b" * 1200, target)
        for _ in range(BURST):
            if not answer():
                break
    s.close()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: pgo-train.py OI")
    oi = sys.argv[1]
    work = tempfile.mkdtemp(prefix="oi-pgo.")
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(128)
    tcp_backend = tcp.getsockname()[1]
    threading.Thread(target=tcp_echo, args=(tcp,), daemon=True).start()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    threading.Thread(target=udp_echo, args=(udp,), daemon=True).start()

    conf = os.path.join(work, "oi.conf")
    # oi's ports are named in its configuration: picked free, but something
    # else may take one before oi binds it (CI runs this beside the tests),
    # so a start that fails is tried again with new ports.
    for attempt in range(5):
        tcp_port, udp_port = free_port(), free_port()
        with open(conf, "w") as f:
            f.write(f'logfile "{work}/oi.log"\n')
            f.write("allow 127.*\n")
            f.write(f"127.0.0.1 {tcp_port} 127.0.0.1 {tcp_backend}\n")
            f.write(f"127.0.0.1 {udp_port}/udp 127.0.0.1 {udp.getsockname()[1]}/udp\n")
        proc = subprocess.Popen([oi, "-c", conf])
        if started(tcp_port, proc) or attempt == 4:
            break
    try:
        if proc.poll() is not None:
            sys.exit(f"pgo-train: oi did not start ({proc.returncode}), five times")
        made = connections(tcp_port)
        round_trips(tcp_port)
        bulk(tcp_port)
        udp_load(udp_port)
        print(f"pgo-train: {made} connections, {ROUND_TRIPS} round trips of 64 B, "
              f"{BULK_BYTES >> 20} MiB both ways, {UDP_ROUND_TRIPS} lone datagrams "
              f"and {UDP_BURSTS} bursts of {BURST}", file=sys.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = "a kill after 30 s"
        tcp.close()
        udp.close()
        shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        sys.exit(f"pgo-train: oi exited with {code}: its profile may be missing")


if __name__ == "__main__":
    main()
