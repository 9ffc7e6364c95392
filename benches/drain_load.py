#!/usr/bin/env python3
"""benches/drain_load.py: `oi backend drain` under load.

Starts two backends (each answers a connection with its letter, A or B,
then echoes), an oi with one round-robin rule over them and a control
socket, and 4 client threads that connect through oi in a loop for 15 s.
Backend A is drained at t=5 s and enabled again at t=10 s; a long stream
opened on A before the drain echoes 64 MiB through it, spread over the
run, and is checked byte for byte. Prints new connections per backend per
second, and the stream's outcome.

    benches/drain_load.py [path/to/oi]        (default target/debug/oi)
"""
import hashlib, os, socket, subprocess, sys, tempfile, threading, time

OI = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "target", "debug", "oi")
SECONDS, DRAIN_AT, ENABLE_AT, CLIENTS = 15, 5, 10, 4


def backend(tag):
    """A listening backend that sends `tag`, then echoes; returns its port."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(512)

    def serve(c):
        with c:
            try:
                c.sendall(tag)
                while d := c.recv(65536):
                    c.sendall(d)
            except OSError:
                pass

    def accept():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return ls.getsockname()[1]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


a_port, b_port, port = backend(b"A"), backend(b"B"), free_port()
work = tempfile.mkdtemp()
conf, sock = os.path.join(work, "oi.yaml"), os.path.join(work, "oi.sock")
with open(conf, "w") as f:
    f.write(f"rules:\n  - name: web\n    bind: 127.0.0.1:{port}/tcp\n    connect:\n"
            f"      - {{dest: '127.0.0.1:{a_port}/tcp'}}\n      - {{dest: '127.0.0.1:{b_port}/tcp'}}\n")
oi = subprocess.Popen([OI, "-c", conf, "--socket", sock], stderr=subprocess.DEVNULL)
RULE, A = f"127.0.0.1:{port}/tcp", f"127.0.0.1:{a_port}"
deadline = time.time() + 20
while time.time() < deadline and not os.path.exists(sock):
    time.sleep(0.05)


def conn():
    s = socket.create_connection(("127.0.0.1", port))
    return s, s.recv(1)


seen, lock, stop = [], threading.Lock(), threading.Event()
try:
    for _ in range(10):
        s, tag = conn()
        if tag == b"A":
            break
        s.close()
    data = os.urandom(64 << 20)
    back = bytearray()
    t0 = time.time()

    def loop():
        while not stop.is_set():
            c, tag = conn()
            c.close()
            with lock:
                seen.append((time.time() - t0, tag))

    def writer():
        step = 1 << 20
        for i in range(0, len(data), step):
            s.sendall(data[i:i + step])
            time.sleep((SECONDS - 2) / (len(data) / step))
        s.shutdown(socket.SHUT_WR)

    def reader():
        while d := s.recv(1 << 20):
            back.extend(d)

    threads = [threading.Thread(target=loop) for _ in range(CLIENTS)]
    threads += [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()

    def at(sec, *args):
        time.sleep(max(0, t0 + sec - time.time()))
        out = subprocess.run([OI, "backend", *args, "--socket", sock], capture_output=True, text=True)
        print(f"t={time.time() - t0:.2f}s oi backend {' '.join(args)}: {(out.stdout + out.stderr).strip()}")

    at(DRAIN_AT, "drain", RULE, A)
    at(ENABLE_AT, "enable", RULE, A)
    time.sleep(max(0, t0 + SECONDS - time.time()))
    stop.set()
    for t in threads:
        t.join()
    print("second  A new/s  B new/s")
    for sec in range(SECONDS):
        counts = [sum(1 for t, g in seen if sec <= t < sec + 1 and g == tag) for tag in (b"A", b"B")]
        print(f"{sec:>6}  {counts[0]:>7}  {counts[1]:>7}")
    exact = hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
    print(f"long stream on A: {len(back)} of {len(data)} bytes back, {'byte-exact' if exact else 'MISMATCH'}")
    sys.exit(0 if exact else 1)
finally:
    oi.terminate()
    oi.wait()
