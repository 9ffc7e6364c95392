#!/usr/bin/env bash
# benches/rate.sh: what a bandwidth limit costs. CPU seconds per GiB of oi
# forwarding one connection through a rule without a limit, with [rate=16G]
# (a limit that never binds here: the bucket's bookkeeping alone) and with
# [rate=2G] (near what one connection moves on a quiet machine, so it may
# bind) and with [rate=256M] (a limit that binds: the waits and the smaller
# steps), copying and splicing, all in one oi process and one run,
# interleaved round by round. The sender and sink are python (1 MiB
# sendall/recv_into), so on a loaded 2-core VM they, not oi, may set the
# pace; the CPU figure is oi's own (utime+stime from /proc).
#
#   benches/rate.sh            # needs cargo and python3
#   OI=/path/to/oi benches/rate.sh   # another build, no cargo (before/after)
#
# Knobs: GIB (GiB per transfer, default 2), ROUNDS (default 3). Prints one
# markdown table: the medians over the rounds, and each CPU figure as a ratio
# to the unlimited rule of the same mover.
set -euo pipefail

GIB=${GIB:-2}
ROUNDS=${ROUNDS:-3}

cd "$(dirname "$0")/.."
if [[ -z ${OI:-} ]]; then
    cargo build --release --bins >&2
    OI=$PWD/target/release/oi
fi
WORK=$(mktemp -d /tmp/oi-rate.XXXXXX)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A sink backend: reads every connection to EOF, one thread each.
SINK=$(port)
python3 - "$SINK" <<'EOF' &
import socket, sys, threading
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(64)
def drain(c):
    buf = bytearray(1 << 20)
    while c.recv_into(buf):
        pass
    c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=drain, args=(c,), daemon=True).start()
EOF
PIDS+=($!)

ROWS=("copy:" "copy:rate=16G" "copy:rate=2G" "copy:rate=256M" "splice:" "splice:rate=16G" "splice:rate=2G" "splice:rate=256M")
declare -A PORT
CONF=$WORK/oi.conf
: >"$CONF"
for row in "${ROWS[@]}"; do
    mover=${row%%:*}; limit=${row#*:}
    p=$(port); PORT[$row]=$p
    opts="splice=$([[ $mover == splice ]] && echo on || echo off)"
    [[ -n $limit ]] && opts="$opts, $limit"
    echo "127.0.0.1 $p 127.0.0.1 $SINK [$opts]" >>"$CONF"
done
"$OI" -c "$CONF" 2>"$WORK/oi.err" &
OIPID=$!
PIDS+=($OIPID)
for row in "${ROWS[@]}"; do
    for _ in $(seq 100); do
        python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', ${PORT[$row]}), 1).close()" 2>/dev/null && break
        sleep 0.1
    done
done

cpu() { awk '{ print $14 + $15 }' "/proc/$OIPID/stat"; }
TICK=$(getconf CLK_TCK)

# Sends GIB GiB to PORT; prints the seconds it took.
send() {
    python3 - "$1" "$GIB" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
buf = memoryview(bytearray(1 << 20))
n = int(sys.argv[2]) * 1024
t = time.monotonic()
for _ in range(n):
    s.sendall(buf)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(time.monotonic() - t)
EOF
}

declare -A CPU SECS
for round in $(seq "$ROUNDS"); do
    for row in "${ROWS[@]}"; do
        before=$(cpu)
        secs=$(send "${PORT[$row]}")
        after=$(cpu)
        CPU[$row]+="$(python3 -c "print(($after - $before) / $TICK / $GIB)") "
        SECS[$row]+="$secs "
        echo "round $round $row: $secs s" >&2
    done
done

median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
echo "| mover | limit | GiB/s | oi CPU s/GiB | vs unlimited |"
echo "|---|---|---|---|---|"
for row in "${ROWS[@]}"; do
    mover=${row%%:*}; limit=${row#*:}
    # shellcheck disable=SC2086
    c=$(median ${CPU[$row]}); s=$(median ${SECS[$row]})
    # shellcheck disable=SC2086
    base=$(median ${CPU[$mover:]})
    python3 -c "print(f'| $mover | ${limit:-none} | {$GIB / $s:.2f} | {$c:.3f} | {$c / $base:.2f}x |')"
done
echo
echo "($ROUNDS rounds of $GIB GiB each, one connection at a time, medians; $(nproc) CPUs)"
