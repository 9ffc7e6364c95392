#!/usr/bin/env bash
# benches/rate_fairness.sh: how evenly a shared bandwidth limit serves its
# connections. One client address (127.0.0.1) holds 50 downloads, another
# (127.0.0.2) holds 1, all through one rule; the backend sends as fast as
# oi reads. After a warm-up, the bytes each connection receives in the
# window are counted, and for each case the script prints the total rate,
# Jain's fairness index ((sum x)^2 / (n sum x^2): 1 is even, 1/n is one
# connection taking everything), the fewest and most bytes a connection got,
# and how many got none.
#
#   benches/rate_fairness.sh                  # needs cargo and python3
#   OI=/path/to/oi benches/rate_fairness.sh   # another build (before/after)
#
# Cases, each copying and splicing: [rule-rate=$RATE] (Jain over all 51),
# and [rule-rate=$RATE, client-rate=$CLIENT_RATE] (Jain over the 50 of
# 127.0.0.1: fairness within a client's share; the one of 127.0.0.2 is shown
# apart). Knobs: RATE (default 1M), CLIENT_RATE (512K), WARM (seconds before
# the window, default 2), WINDOW (seconds, default 8).
set -euo pipefail

RATE=${RATE:-1M}
CLIENT_RATE=${CLIENT_RATE:-512K}
WARM=${WARM:-2}
WINDOW=${WINDOW:-8}

cd "$(dirname "$0")/.."
BENCH=rate_fairness.sh PORT_BASE=29000
# shellcheck source=benches/lib.sh
. benches/lib.sh
if [[ -z ${OI:-} ]]; then
    nice -n 10 cargo build --release --bins >&2
    OI=$PWD/target/release/oi
fi

# A source backend: writes to every connection until it goes away.
SOURCE=$(kernel_port)
python3 - "$SOURCE" <<'EOF' &
import socket, sys, threading
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(256)
def pour(c):
    buf = b"x" * 65536
    try:
        while True:
            c.sendall(buf)
    except OSError:
        pass
    c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=pour, args=(c,), daemon=True).start()
EOF
PIDS+=($!)
wait_listening "$SOURCE"

CASES=("rule:copy" "rule:splice" "client:copy" "client:splice")
declare -A PORT
CONF=$WORK/oi.conf
: >"$CONF"
for case in "${CASES[@]}"; do
    kind=${case%%:*}; mover=${case#*:}
    p=$(kernel_port); PORT[$case]=$p
    opts="rule-rate=$RATE, splice=$([[ $mover == splice ]] && echo on || echo off)"
    [[ $kind == client ]] && opts="$opts, client-rate=$CLIENT_RATE"
    echo "127.0.0.1 $p 127.0.0.1 $SOURCE [$opts]" >>"$CONF"
done
"$OI" -c "$CONF" 2>"$WORK/oi.err" &
PIDS+=($!)
for case in "${CASES[@]}"; do wait_listening "${PORT[$case]}"; done

# Opens the 50 + 1 connections to port $1, reads them all in one thread,
# and prints the window's bytes per connection (the 50 first, then the 1).
measure() {
    python3 - "$1" "$WARM" "$WINDOW" <<'EOF'
import selectors, socket, sys, time
port, warm, window = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
conns = []
for src in ["127.0.0.1"] * 50 + ["127.0.0.2"]:
    s = socket.socket()
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    conns.append(s)
got = [0] * len(conns)
sel = selectors.DefaultSelector()
for i, s in enumerate(conns):
    sel.register(s, selectors.EVENT_READ, i)
buf = bytearray(1 << 16)
def run(until):
    while (left := until - time.monotonic()) > 0:
        for key, _ in sel.select(left):
            try:
                n = key.fileobj.recv_into(buf)
            except BlockingIOError:
                continue
            got[key.data] += n
run(time.monotonic() + warm)
start = list(got)
run(time.monotonic() + window)
print(" ".join(str(g - s) for g, s in zip(got, start)))
for s in conns:
    s.close()
EOF
}

# Prints one table row: case, mover, then the figures of bytes list $3.
row() {
    python3 - "$1" "$2" "$WINDOW" $3 <<'EOF'
import sys
case, mover, window = sys.argv[1], sys.argv[2], float(sys.argv[3])
xs = [int(x) for x in sys.argv[4:]]
jain = lambda v: sum(v) ** 2 / (len(v) * sum(x * x for x in v)) if any(v) else 0.0
many, one = xs[:50], xs[50]
kib = lambda b: f"{b / 1024:.0f}"
print(f"| {case} | {mover} | {sum(xs) / window / 2**20:.3f} | {jain(xs):.3f} | {jain(many):.3f} "
      f"| {kib(min(many))} / {kib(max(many))} | {sum(1 for x in many if x == 0)} | {kib(one)} |")
EOF
}

echo "| case | mover | total MiB/s | Jain, all 51 | Jain, the 50 | min / max of the 50 (KiB) | the 50 with 0 bytes | the 1 (KiB) |"
echo "|---|---|---|---|---|---|---|---|"
for case in "${CASES[@]}"; do
    kind=${case%%:*}; mover=${case#*:}
    label="rule-rate=$RATE"
    [[ $kind == client ]] && label="$label, client-rate=$CLIENT_RATE"
    row "$label" "$mover" "$(measure "${PORT[$case]}")"
done
echo
echo "(warm-up ${WARM} s, window ${WINDOW} s; $(nproc) CPUs; oi: $OI)"
