#!/usr/bin/env python3
"""The load an instrumented oi runs for profile-guided optimisation.

    dist/pgo-train.py OI LOADGEN

Run by dist/pgo-build.sh, between the instrumented build and the final one.
OI is the instrumented binary; it writes its profile when it exits after
SIGTERM. LOADGEN is examples/loadgen (release build).

The profile decides which code the compiler lays out together and optimises
for speed: code this run never reaches is treated as cold (placed apart,
optimised for size). So it runs what a forwarder spends its time on, in about
the proportions of a busy server: TCP connections with a small request and
answer (loadgen connrate), 64 B round trips on one connection (loadgen
pingpong), a bulk transfer both ways (the splice path), UDP round trips one
datagram at a time and in bursts (recvmmsg batches, GSO sends), with a log
file and an allow rule as most rinetd.conf files have. Everything binds to
127.0.0.1, backends on port 0.
"""
import os
import signal
import socket
import subprocess
import sys
import shutil
import tempfile
import threading
import time

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
    s = socket.create_connection(("127.0.0.1", port))
    received = 0

    def read():
        nonlocal received
        while True:
            data = s.recv(CHUNK)
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
    if received != BULK_BYTES:
        sys.exit(f"pgo-train: bulk echoed {received} of {BULK_BYTES} bytes")


def udp_load(port):
    """Round trips one datagram at a time, then in bursts."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    target = ("127.0.0.1", port)
    lost = 0
    for _ in range(UDP_ROUND_TRIPS):
        s.sendto(b"p" * 64, target)
        try:
            s.recvfrom(2048)
        except socket.timeout:
            lost += 1
    for _ in range(UDP_BURSTS):
        for _ in range(BURST):
            s.sendto(b"b" * 1200, target)
        for _ in range(BURST):
            try:
                s.recvfrom(2048)
            except socket.timeout:
                lost += 1
                break
    s.close()
    if lost > UDP_ROUND_TRIPS // 10:
        sys.exit(f"pgo-train: {lost} UDP answers lost")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: pgo-train.py OI LOADGEN")
    oi, loadgen = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="oi-pgo.")
    echo = subprocess.Popen([loadgen, "echo-server", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    line = echo.stderr.readline()
    if "listening on" not in line:
        sys.exit(f"pgo-train: echo-server said {line!r}")
    tcp_backend = int(line.rsplit(":", 1)[1])
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
        addr = f"127.0.0.1:{tcp_port}"
        for args in (
            ["connrate", addr, "--secs", "3", "--conns", "8"],
            ["pingpong", addr, "--count", "20000", "--size", "64"],
        ):
            subprocess.run([loadgen, *args], check=True, stdout=subprocess.DEVNULL)
        bulk(tcp_port)
        udp_load(udp_port)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        echo.kill()
        udp.close()
        shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        sys.exit(f"pgo-train: oi exited with {code}: its profile may be missing")


if __name__ == "__main__":
    main()
