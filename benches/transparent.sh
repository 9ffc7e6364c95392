#!/usr/bin/env bash
# benches/transparent.sh: what [transparent] costs. oi's CPU seconds per GiB
# forwarding one connection, client to backend, through a plain rule and a
# transparent one, copying and splicing, all in one oi process and one run,
# interleaved round by round. Client, oi and backend each run in a network
# namespace of the script's own (veth pairs, as tests/integration/
# transparent.rs builds them), and oi's namespace has
# dist/transparent-routing.sh applied: the plain rules pay for the nftables
# socket lookup on every incoming packet too, as they would on such a host.
# The CPU figure is oi's own (utime+stime from /proc); the kernel's work for
# the backend's ACKs (mark, policy routing) is mostly done in softirq and
# need not be charged to oi, so the figure bounds oi's share only. The
# sender and sink are python (1 MiB sendall/recv_into).
#
#   sudo benches/transparent.sh      # needs root, cargo, python3, ip, nft
#
# Knobs: GIB (GiB per transfer, default 2), ROUNDS (default 3). Prints one
# markdown table: the medians over the rounds, and each transparent CPU
# figure as a ratio to the plain rule of the same mover.
set -euo pipefail

GIB=${GIB:-2}
ROUNDS=${ROUNDS:-3}

cd "$(dirname "$0")/.."
cargo build --release --bins >&2
OI=$PWD/target/release/oi
T=oib$$
WORK=$(mktemp -d /tmp/oi-transparent.XXXXXX)
OIPID=
cleanup() {
    local ns pid
    for ns in c o b; do
        for pid in $(ip netns pids "$T$ns" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
        ip netns del "$T$ns" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

for ns in c o b; do ip netns add "$T$ns"; ip -n "$T$ns" link set lo up; done
ip link add "${T}c" type veth peer name "${T}x"
ip link set "${T}c" netns "${T}c"; ip link set "${T}x" netns "${T}o"
ip link add "${T}y" type veth peer name "${T}b"
ip link set "${T}y" netns "${T}o"; ip link set "${T}b" netns "${T}b"
ip -n "${T}c" addr add 10.88.1.1/24 dev "${T}c"; ip -n "${T}c" link set "${T}c" up
ip -n "${T}o" addr add 10.88.1.2/24 dev "${T}x"; ip -n "${T}o" link set "${T}x" up
ip -n "${T}o" addr add 10.88.2.1/24 dev "${T}y"; ip -n "${T}o" link set "${T}y" up
ip -n "${T}b" addr add 10.88.2.2/24 dev "${T}b"; ip -n "${T}b" link set "${T}b" up
ip -n "${T}b" route add 10.88.1.0/24 via 10.88.2.1
ip netns exec "${T}o" sh dist/transparent-routing.sh

# A sink backend on 10.88.2.2:9000: reads every connection to EOF.
ip netns exec "${T}b" python3 - <<'EOF' &
import socket, threading
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("10.88.2.2", 9000)); l.listen(64)
def drain(c):
    buf = bytearray(1 << 20)
    while c.recv_into(buf):
        pass
    c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=drain, args=(c,), daemon=True).start()
EOF

ROWS=("copy:plain" "copy:transparent" "splice:plain" "splice:transparent")
declare -A PORT
CONF=$WORK/oi.conf
: >"$CONF"
p=7000
for row in "${ROWS[@]}"; do
    mover=${row%%:*}; kind=${row#*:}
    PORT[$row]=$p
    opts="splice=$([[ $mover == splice ]] && echo on || echo off)"
    [[ $kind == transparent ]] && opts="$opts, transparent"
    echo "10.88.1.2 $p 10.88.2.2 9000 [$opts]" >>"$CONF"
    p=$((p + 1))
done
ip netns exec "${T}o" "$OI" -c "$CONF" 2>"$WORK/oi.err" &
OIPID=$!
for row in "${ROWS[@]}"; do
    for _ in $(seq 100); do
        ip netns exec "${T}c" python3 -c "import socket; socket.create_connection(('10.88.1.2', ${PORT[$row]}), 1).close()" 2>/dev/null && break
        sleep 0.1
    done
done

cpu() { awk '{ print $14 + $15 }' "/proc/$OIPID/stat"; }
TICK=$(getconf CLK_TCK)

# Sends GIB GiB to PORT from the client's namespace; prints the seconds it took.
send() {
    ip netns exec "${T}c" python3 - "$1" "$GIB" <<'EOF'
import socket, sys, time
s = socket.create_connection(("10.88.1.2", int(sys.argv[1])))
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
echo "| mover | rule | GiB/s | oi CPU s/GiB | vs plain |"
echo "|---|---|---|---|---|"
for row in "${ROWS[@]}"; do
    mover=${row%%:*}; kind=${row#*:}
    # shellcheck disable=SC2086
    c=$(median ${CPU[$row]}); s=$(median ${SECS[$row]})
    # shellcheck disable=SC2086
    base=$(median ${CPU[$mover:plain]})
    python3 -c "print(f'| $mover | $kind | {$GIB / $s:.2f} | {$c:.3f} | {$c / max($base, 1e-9):.2f}x |')"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
