#!/usr/bin/env bash
# What `oi upgrade` costs the traffic: the hand-over time (the wall time of
# `oi upgrade`, from the request to "the new pid serves"), the longest pause
# an in-flight stream sees (one connection doing 64-byte echo round trips
# back to back: its longest round trip), and the longest a new connection
# waits (connect plus one echo, in a loop), with CONNS idle connections open
# through oi. The same window is measured first without an upgrade, so each
# figure comes with the baseline of the same run. Open connections are
# handed over to the new oi (hand-over version 4 and later), the in-flight stream
# among them, so its longest round trip includes its pause, and the
# hand-over time includes moving every connection; afterwards every idle
# connection must still echo. Needs python3.
# Usage: benches/upgrade.sh [path/to/oi]   (default target/release/oi)
#        CONNS="10 10000" benches/upgrade.sh
set -euo pipefail
oi=$(readlink -f "${1:-target/release/oi}")
# Each open connection costs oi 2 descriptors (its two sockets; an idle
# one holds no splice pipe), plus about 20 of oi's own; while handing over,
# the old oi also holds the copies of one message's connections (126, 252
# descriptors). The client (this script's python) and the echo backend are
# processes of their own, each holding one descriptor per connection. So
# CONNS can reach (limit - ~300) / 2; 10,000 needs 20,000 in oi alone,
# the hard limit here, before any listener. Asks for the hard limit.
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    pkill -F "$work/new.pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# An echo backend for any number of connections (one thread, selectors);
# prints its port once listening.
exec 3< <(exec python3 -c '
import selectors, socket
sel = selectors.DefaultSelector()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(4096); s.setblocking(False)
sel.register(s, selectors.EVENT_READ)
print(s.getsockname()[1], flush=True)
while True:
    for key, _ in sel.select():
        if key.fileobj is s:
            try:
                c, _ = s.accept()
            except BlockingIOError:
                continue
            c.setblocking(False); sel.register(c, selectors.EVENT_READ)
        else:
            c = key.fileobj
            try:
                d = c.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                d = b""
            if not d:
                sel.unregister(c); c.close(); continue
            c.setblocking(True); c.sendall(d); c.setblocking(False)
')
pids+=($!)
read -r backend <&3
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "127.0.0.1 $port 127.0.0.1 $backend" > "$work/oi.conf"

echo "oi $("$oi" --version 2>/dev/null | head -1); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %-9s %12s %16s %16s %8s %s\n' conns window handover_ms stream_pause_ms new_conn_max_ms failed idle_ok
for conns in ${CONNS:-10 10000}; do
    "$oi" -c "$work/oi.conf" --socket "$work/oi.sock" 2>"$work/oi.err" &
    old=$!
    pids+=($old)
    for _ in $(seq 200); do [ -S "$work/oi.sock" ] && break; sleep 0.05; done
    python3 - "$oi" "$work/oi.sock" "$port" "$conns" "$work/new.pid" <<'EOF'
import socket, subprocess, sys, threading, time
oi, control, port, conns, newpid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
addr = ("127.0.0.1", port)
idle = [socket.create_connection(addr) for _ in range(conns)]
stream = socket.create_connection(addr)
stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
payload = b"x" * 64

def window(upgrade):
    stop = threading.Event()
    res = {"pause": 0.0, "conn": 0.0, "failed": 0}
    def pinger():
        while not stop.is_set():
            t = time.monotonic()
            stream.sendall(payload)
            got = b""
            while len(got) < 64:
                got += stream.recv(64 - len(got))
            res["pause"] = max(res["pause"], time.monotonic() - t)
    def connector():
        while not stop.is_set():
            t = time.monotonic()
            try:
                c = socket.create_connection(addr, timeout=10)
                c.sendall(b"ping")
                if c.recv(4) != b"ping":
                    res["failed"] += 1
                c.close()
            except OSError:
                res["failed"] += 1
            res["conn"] = max(res["conn"], time.monotonic() - t)
    threads = [threading.Thread(target=pinger), threading.Thread(target=connector)]
    for th in threads: th.start()
    time.sleep(1.0)
    handover = None
    if upgrade:
        t = time.monotonic()
        out = subprocess.run([oi, "upgrade", "--socket", control], capture_output=True, text=True)
        handover = time.monotonic() - t
        if out.returncode != 0:
            print("upgrade failed:", out.stderr, file=sys.stderr); sys.exit(1)
        open(newpid, "w").write(out.stdout.split()[3])
    time.sleep(1.0)
    stop.set()
    for th in threads: th.join()
    return handover, res

for upgrade in (False, True):
    handover, res = window(upgrade)
    ok = 0
    for c in idle:
        c.sendall(b"i")
    for c in idle:
        ok += c.recv(1) == b"i"
    print("%-7d %-9s %12s %16.2f %16.2f %8d %d/%d" % (
        conns, "upgrade" if upgrade else "baseline",
        "%.1f" % (handover * 1000) if handover is not None else "-",
        res["pause"] * 1000, res["conn"] * 1000, res["failed"], ok, conns), flush=True)
for c in idle: c.close()
stream.close()
EOF
    # The old oi exits once it has handed its connections over (or once
    # those it kept end); the new one is stopped.
    wait "$old" || true
    # How many moved (the stream and the idle ones), and how many stayed.
    moved=$(grep -o 'handed [0-9]* live' "$work/oi.err" | grep -o '[0-9]*' || echo 0)
    kept=$(grep -o '[0-9]* connection(s) could not be paused' "$work/oi.err" | grep -o '^[0-9]*' || echo 0)
    echo "$conns: $moved open connections moved to the new oi (the idle ones, the stream, any new one in flight); $kept stayed with the old one (no descriptor to copy)"
    : > "$work/oi.err"
    new=$(cat "$work/new.pid")
    kill "$new" 2>/dev/null || true
    # Gone, or a zombie nobody reaps (its parent, the old oi, has exited).
    for _ in $(seq 200); do
        { [ -d "/proc/$new" ] && ! grep -q ') Z' "/proc/$new/stat"; } || break
        sleep 0.05
    done
    rm -f "$work/oi.sock"
done
