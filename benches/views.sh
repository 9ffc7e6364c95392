#!/usr/bin/env bash
# What watching oi costs the daemon: oi's own CPU time (utime+stime from
# /proc/PID/stat) over the same stretch with nothing attached, with `oi top`
# attached at its default 1 s (in a tmux pane, a real terminal), and with
# the status page's poll (GET /status.json every 2 s, as the page does) with
# a Prometheus scrape of /metrics every 15 s. oi serves RULES rules and
# holds CONNS idle connections, so the answers have the size of a busy
# server's. Run on a quiet machine; needs tmux and python3.
# Usage: benches/views.sh [path/to/oi]   (default target/release/oi)
#        RULES=100 CONNS=1000 SECONDS_EACH=60 benches/views.sh
set -euo pipefail
oi=$(readlink -f "${1:-target/release/oi}")
rules=${RULES:-100}
conns=${CONNS:-1000}
each=${SECONDS_EACH:-60}
work=$(mktemp -d)
pids=()
cleanup() { tmux -L oi-views kill-server 2>/dev/null || true; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# A backend that accepts and holds connections; it prints its port once listening.
exec 3< <(exec python3 -c '
import socket, select
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4096)
print(s.getsockname()[1], flush=True)
held = []
while True:
    c, _ = s.accept(); held.append(c)
')
pids+=($!)
read -r backend <&3
base=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
: > "$work/oi.conf"
for i in $(seq 0 $((rules - 1))); do
    echo "127.0.0.1 $((20000 + i)) 127.0.0.1 $backend" >> "$work/oi.conf"
done
metrics_port=$base
"$oi" -c "$work/oi.conf" --socket "$work/oi.sock" --metrics "127.0.0.1:$metrics_port" 2>"$work/oi.err" &
oi_pid=$!
pids+=($oi_pid)
for _ in $(seq 200); do [ -S "$work/oi.sock" ] && break; sleep 0.05; done
# CONNS idle connections spread over the rules, held by one python process.
exec 4< <(exec python3 -c '
import socket, sys, time
n, rules = int(sys.argv[1]), int(sys.argv[2])
held = [socket.create_connection(("127.0.0.1", 20000 + i % rules)) for i in range(n)]
print("held", flush=True)
time.sleep(100000)
' "$conns" "$rules")
pids+=($!)
read -r _ <&4

cpu() { awk '{print $14 + $15}' "/proc/$oi_pid/stat"; }
tick=$(getconf CLK_TCK)
measure() {
    local a b
    a=$(cpu); sleep "$each"; b=$(cpu)
    echo "scale=2; ($b - $a) * 1000 / $tick / $each" | bc
}
echo "oi $("$oi" --version 2>/dev/null | head -1): $rules rules, $conns idle connections, ${each} s each"
printf '%-38s %s\n' "view" "oi CPU ms per s"
printf '%-38s %s\n' "nothing attached" "$(measure)"
tmux -L oi-views new-session -d -x 160 -y 50 "$oi top --socket $work/oi.sock"
printf '%-38s %s\n' "oi top, 1 s interval" "$(measure)"
tmux -L oi-views kill-server
python3 -c '
import sys, time, urllib.request
port, end = sys.argv[1], time.time() + float(sys.argv[2]) + 5
n = 0
while time.time() < end:
    if n % 2 == 0:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json").read()
    if n % 15 == 0:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read()
    n += 1
    time.sleep(1)
' "$metrics_port" "$each" &
pids+=($!)
sleep 1
printf '%-38s %s\n' "status page (2 s) + /metrics (15 s)" "$(measure)"
