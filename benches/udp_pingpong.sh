#!/usr/bin/env bash
# UDP cost per small message: a 64-byte ping-pong through one or more oi
# binaries, alternating round by round, each
# forwarder's CPU time (utime+stime from /proc/PID/stat) per round trip and
# the wall time per round trip. Compares builds side by side in one run:
#
#   benches/udp_pingpong.sh                                  # target/release/oi
#   ROUNDS=3 N=20000 benches/udp_pingpong.sh old/oi new/oi   # two builds
#   STRACE=1 ROUNDS=1 N=5000 benches/udp_pingpong.sh old/oi new/oi
#
# With STRACE=1 each oi runs under `strace -f -c` and the system calls it
# made per round trip (all rounds, warm-up included) are printed at the end,
# by name; the CPU figures are then strace's, not oi's.
#
# With perf, each line also gives the forwarder's system calls per round trip.
#
# Used to find that a reactor which leaves UDP on async-io's own thread
# doubles UDP's CPU per round trip: 97/94/83 us with every socket on
# async-io against 195/230/150 us with UDP alone left there, same run.
# rinetd is not in it: Debian's rinetd 0.73 answered no datagram through a
# /udp rule in this set-up (tried by hand on 2026-11-25); benches/udp.sh
# has the iperf3 comparison.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
N=${N:-20000}
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { cargo build --release --quiet; set -- target/release/oi; }
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
cat >"$dir/echo.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)
PY
cat >"$dir/pingpong.py" <<'PY'
import os, socket, sys, time
port, n, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
msg = b"x" * 64
for _ in range(100):
    s.sendto(msg, ("127.0.0.1", port)); s.recvfrom(2048)
c0, t0, lost = cpu(), time.perf_counter(), 0
for _ in range(n):
    s.sendto(msg, ("127.0.0.1", port))
    try:
        s.recvfrom(2048)
    except socket.timeout:
        lost += 1
t1, c1 = time.perf_counter(), cpu()
print(f"{(c1 - c0) / n * 1e6:7.1f} us CPU/rt {(t1 - t0) / n * 1e6:7.1f} us wall/rt  lost {lost}")
PY
coproc ECHO { exec python3 "$dir/echo.py"; }
pids+=("$ECHO_PID")
read -r backend <&"${ECHO[0]}"
names=() ports=() fpids=()
port_of() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
i=0
for oi in "$@"; do
    p=$(port_of)
    printf '127.0.0.1 %s/udp 127.0.0.1 %s/udp\n' "$p" "$backend" >"$dir/oi$i.conf"
    if [ -n "${STRACE:-}" ]; then
        RUST_LOG=warn strace -f -c -o "$dir/oi$i.strace" "$oi" -c "$dir/oi$i.conf" 2>"$dir/oi$i.err" &
    else
        RUST_LOG=warn "$oi" -c "$dir/oi$i.conf" 2>"$dir/oi$i.err" &
    fi
    pids+=($!) fpids+=($!) names+=("oi:$oi") ports+=("$p")
    i=$((i + 1))
done
uptime
for round in $(seq "$ROUNDS"); do
    for k in "${!names[@]}"; do
        printf 'round %s  %-40s ' "$round" "${names[$k]}"
        # System calls the forwarder makes per round trip (perf's
        # raw_syscalls:sys_enter for its PID; the warm-up's 100 included).
        perf_pid=""
        if command -v perf >/dev/null; then
            perf stat -x, -e raw_syscalls:sys_enter -p "${fpids[$k]}" -o "$dir/perf.txt" 2>/dev/null &
            perf_pid=$!
        fi
        out=$(python3 "$dir/pingpong.py" "${ports[$k]}" "$N" "${fpids[$k]}" || echo "(no answer)")
        calls=-
        if [ -n "$perf_pid" ]; then
            kill -INT "$perf_pid" 2>/dev/null || true
            wait "$perf_pid" 2>/dev/null || true
            calls=$(awk -F, -v n="$N" '/raw_syscalls/ { printf "%.2f", $1 / (n + 100) }' "$dir/perf.txt")
        fi
        printf '%s  %s syscalls/rt\n' "$out" "$calls"
    done
done
uptime
if [ -n "${STRACE:-}" ]; then
    # strace writes its table when oi exits: stop each oi (strace's child;
    # a background strace ignores SIGINT), then divide.
    for p in "${fpids[@]}"; do pkill -TERM -P "$p" 2>/dev/null || true; done
    for p in "${fpids[@]}"; do wait "$p" 2>/dev/null || true; done
    trips=$(( ROUNDS * (N + 100) ))
    for k in "${!names[@]}"; do
        printf '%s: system calls per round trip (%s round trips)\n' "${names[$k]}" "$trips"
        awk -v n="$trips" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
                calls[$NF] = $4; errs[$NF] = ($5 ~ /^[0-9]+$/ ? $5 : 0) }
            $NF == "total" { total = $4 }
            END { for (c in calls) if (calls[c] / n >= 0.01) printf "  %-16s %6.2f (%.2f failed)\n", c, calls[c] / n, errs[c] / n
                  printf "  %-16s %6.2f\n", "total", total / n }' "$dir/oi$k.strace"
    done
fi
