#!/usr/bin/env bash
# benches/sni.sh: what reading the TLS server name costs a connection.
# One oi, two listeners to the same backend: a plain rule, and a listener
# shared by server name ([sni=bench.example.com] plus a default rule). Each
# connection sends one ClientHello naming bench.example.com (the bytes of
# oxidinetd::client_hello::example, 116 bytes), reads the backend's one-byte
# answer and closes. Per connection, for each listener in the same run:
#   - oi's system calls, counted with `strace -c -f -p` (deterministic: the
#     figure to compare on a busy machine), and
#   - oi's CPU time (utime + stime from /proc/PID/stat, without strace),
#     ROUNDS rounds alternating plain and sni, the median of each.
#
#   benches/sni.sh                 # CONNS=2000 ROUNDS=5
#   OI=/path/to/oi benches/sni.sh  # skip the build
# Needs strace and python3.
set -euo pipefail

CONNS=${CONNS:-2000}
ROUNDS=${ROUNDS:-5}
cd "$(dirname "$0")/.."
for tool in strace python3; do
    command -v "$tool" >/dev/null || { echo "sni.sh: $tool is required" >&2; exit 1; }
done
if [[ -z ${OI:-} ]]; then
    cargo build --release --bin oi >&2
    OI=$PWD/target/release/oi
fi

WORK=$(mktemp -d /tmp/oi-sni.XXXXXX)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The backend: reads what the client sent (one ClientHello), answers one
# byte, closes. Prints its port once listening.
exec 3< <(exec python3 -c '
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(1024)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    c.recv(4096); c.sendall(b"k"); c.close()
')
PIDS+=($!)
read -r backend <&3

plain=$(free_port)
sni=$(free_port)
cat > "$WORK/oi.conf" <<EOF
127.0.0.1 $plain 127.0.0.1 $backend
127.0.0.1 $sni 127.0.0.1 $backend [sni=bench.example.com]
127.0.0.1 $sni 127.0.0.1 $backend
EOF
"$OI" -c "$WORK/oi.conf" 2>"$WORK/oi.err" &
OI_PID=$!
PIDS+=($OI_PID)

# The client: CONNS connections one after another to the port it is given.
cat > "$WORK/client.py" <<'EOF'
import socket, struct, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
def hello(name):
    n = name.encode()
    ext = bytes([0, 0x2b, 0, 5, 4, 3, 4, 3, 3])
    ext += struct.pack(">HHHBH", 0, len(n) + 5, len(n) + 3, 0, len(n)) + n
    body = b"\x03\x03" + b"\x5a" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    body += struct.pack(">H", len(ext)) + ext
    msg = b"\x01\x00" + struct.pack(">H", len(body)) + body
    return b"\x16\x03\x01" + struct.pack(">H", len(msg)) + msg
h = hello("bench.example.com")
for _ in range(n):
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(h)
    assert c.recv(1) == b"k", "no answer through oi"
    c.close()
EOF
for _ in $(seq 200); do
    python3 "$WORK/client.py" "$sni" 1 2>/dev/null && break
    sleep 0.05
done
python3 "$WORK/client.py" "$plain" 200   # warm-up of both listeners
python3 "$WORK/client.py" "$sni" 200

tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$OI_PID/stat"; }
# oi's CPU µs per connection over CONNS connections to port $1.
cpu_per_conn() {
    local a b
    a=$(cpu); python3 "$WORK/client.py" "$1" "$CONNS"; b=$(cpu)
    echo "($b - $a) * 1000000 / $tick / $CONNS" | bc -l
}
median() { sort -g | awk '{a[NR]=$1} END {m=(NR+1)/2; printf "%.1f", (a[int(m)]+a[int(m+0.5)])/2}'; }
: > "$WORK/plain.cpu"; : > "$WORK/sni.cpu"
for _ in $(seq "$ROUNDS"); do
    cpu_per_conn "$plain" >> "$WORK/plain.cpu"
    cpu_per_conn "$sni" >> "$WORK/sni.cpu"
done
load=$(cut -d' ' -f1-3 /proc/loadavg)

# System calls per connection, strace attached to every thread of oi.
calls() {
    local out=$WORK/strace.$1
    strace -f -c -p "$OI_PID" -o "$out" 2>/dev/null &
    local st=$!
    # strace is attached once oi's threads show as traced.
    for _ in $(seq 200); do
        grep -q "TracerPid:[[:space:]]*$st" "/proc/$OI_PID/status" && break
        sleep 0.02
    done
    python3 "$WORK/client.py" "$1" "$CONNS"
    kill -INT "$st"; wait "$st" 2>/dev/null || true
    awk -v n="$CONNS" '$NF == "total" {printf "%.2f", $4 / n}' "$out"
}
calls_plain=$(calls "$plain")
calls_sni=$(calls "$sni")
peeks() {
    awk -v n="$CONNS" '$NF == "recvfrom" {printf "%.2f", $4 / n; f=1} END {if (!f) printf "0"}' "$WORK/strace.$1"
}

echo "oi: $("$OI" --version | head -1); $CONNS connections per measure, $ROUNDS rounds; load average $load"
printf '%-28s %14s %14s %10s\n' "" "plain rule" "sni listener" "ratio"
cpu_plain=$(median < "$WORK/plain.cpu"); cpu_sni=$(median < "$WORK/sni.cpu")
printf '%-28s %14s %14s %10s\n' "CPU µs per connection" "$cpu_plain" "$cpu_sni" \
    "$(echo "scale=2; $cpu_sni / $cpu_plain" | bc -l)"
printf '%-28s %14s %14s %10s\n' "system calls per connection" "$calls_plain" "$calls_sni" \
    "$(echo "scale=2; $calls_sni / $calls_plain" | bc -l)"
printf '%-28s %14s %14s\n' "  of which recvfrom (peek)" "$(peeks "$plain")" "$(peeks "$sni")"
echo "CPU rounds (µs per connection): plain $(tr '\n' ' ' < "$WORK/plain.cpu" | xargs printf '%.1f '), sni $(tr '\n' ' ' < "$WORK/sni.cpu" | xargs printf '%.1f ')"
echo "system calls per connection, by call (plain, sni, difference):"
join -a1 -a2 -e0 -o 0,1.2,2.2 \
    <(awk -v n="$CONNS" 'NR > 2 && $NF != "total" && $NF !~ /^-/ && NF >= 5 {printf "%s %.2f\n", $NF, $4 / n}' "$WORK/strace.$plain" | sort) \
    <(awk -v n="$CONNS" 'NR > 2 && $NF != "total" && $NF !~ /^-/ && NF >= 5 {printf "%s %.2f\n", $NF, $4 / n}' "$WORK/strace.$sni" | sort) |
    awk '{printf "  %-16s %8.2f %8.2f %+8.2f\n", $1, $2, $3, $3 - $2}' | sort -k4 -gr
