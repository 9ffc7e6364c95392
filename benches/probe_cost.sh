#!/usr/bin/env bash
# What active health checks cost: oi's CPU time and descriptors while it
# probes COUNT backends (default 1,000) every INTERVAL seconds (default 1),
# side by side with the same pool unprobed, in one run.
#
#   benches/probe_cost.sh                      # 1,000 backends, 1 s, 30 s per mode
#   COUNT=200 SECONDS_PER_MODE=10 benches/probe_cost.sh
#
# One Python process holds COUNT loopback listeners (asyncio), each
# answering a probe's `PING\r\n` with `+PONG\r\n`, and counts the
# connections it accepted. oi (release build) gets one YAML rule over all
# of them, in three modes:
#   off      no health_check: passive health only (the baseline);
#   connect  health_check {interval} : the connect is the probe;
#   expect   health_check {interval, send: PING\r\n, expect: +PONG}.
# For each mode, after WARMUP seconds, the script reads oi's utime and
# stime from /proc/PID/stat, samples the number of its open descriptors
# (/proc/PID/fd) every 50 ms for SECONDS_PER_MODE seconds, and reads the
# CPU time again. It prints per mode: CPU seconds used (user, system), CPU % of one core,
# the descriptors (min / median / max over the samples), and the probes the
# backends saw per second, and oi's CPU µs per probe (user + system; the
# system part includes the kernel's loopback handshake). Nothing connects through oi: the only activity
# is the probes.
set -euo pipefail
COUNT=${COUNT:-1000}
INTERVAL=${INTERVAL:-1}
SECONDS_PER_MODE=${SECONDS_PER_MODE:-30}
WARMUP=${WARMUP:-3}
cd "$(dirname "$0")/.."
# OI=/path/to/oi runs that binary instead of building the release one.
if [[ -z ${OI:-} ]]; then
  cargo build --release --quiet
  OI=$PWD/target/release/oi
fi
ulimit -n 8192
TMP=$(mktemp -d)
HELPER_PID=""
OI_PID=""
cleanup() {
  [[ -n $OI_PID ]] && kill "$OI_PID" 2>/dev/null || true
  [[ -n $HELPER_PID ]] && kill "$HELPER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

cat > "$TMP/backends.py" <<'PY'
import asyncio, sys
count, ports_file, seen_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
accepted = 0
async def serve(reader, writer):
    global accepted
    accepted += 1
    try:
        data = await asyncio.wait_for(reader.read(64), 5)
        if data.startswith(b"PING"):
            writer.write(b"+PONG\r\n")
            await writer.drain()
    except Exception:
        pass
    writer.close()
async def report():
    while True:
        with open(seen_file + ".tmp", "w") as f:
            f.write(str(accepted))
        import os
        os.replace(seen_file + ".tmp", seen_file)
        await asyncio.sleep(0.2)
async def main():
    servers = [await asyncio.start_server(serve, "127.0.0.1", 0, backlog=64) for _ in range(count)]
    with open(ports_file, "w") as f:
        for s in servers:
            f.write("%d\n" % s.sockets[0].getsockname()[1])
    await report()
asyncio.run(main())
PY
python3 "$TMP/backends.py" "$COUNT" "$TMP/ports" "$TMP/seen" &
HELPER_PID=$!
for _ in $(seq 200); do [[ -s $TMP/ports && -s $TMP/seen ]] && break; sleep 0.1; done
[[ $(wc -l < "$TMP/ports") -eq $COUNT ]] || { echo "the backends did not start" >&2; exit 1; }

LISTEN_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }

printf '%-8s %8s %8s %8s %8s %22s %10s %12s\n' mode cpu_s user_s sys_s cpu_% "fds min/median/max" probes/s us/probe
for mode in off connect expect; do
  {
    echo "rules:"
    echo "  - name: pool"
    echo "    bind: 127.0.0.1:$LISTEN_PORT/tcp"
    echo "    connect:"
    sed 's/^/      - 127.0.0.1:/; s/$/\/tcp/' "$TMP/ports"
    case $mode in
      connect) printf '    health_check:\n      interval: %s\n' "$INTERVAL" ;;
      expect) printf "    health_check:\n      interval: %s\n      send: 'PING\\\\r\\\\n'\n      expect: '+PONG'\n" "$INTERVAL" ;;
    esac
  } > "$TMP/oi.yaml"
  "$OI" -c "$TMP/oi.yaml" 2> "$TMP/oi-$mode.log" &
  OI_PID=$!
  sleep "$WARMUP"
  kill -0 "$OI_PID" || { echo "oi exited:"; cat "$TMP/oi-$mode.log"; exit 1; }
  seen0=$(cat "$TMP/seen"); read -r u0 s0 < <(cpu_ticks "$OI_PID")
  end=$((SECONDS + SECONDS_PER_MODE))
  : > "$TMP/fds"
  while (( SECONDS < end )); do
    ls "/proc/$OI_PID/fd" | wc -l >> "$TMP/fds"
    sleep 0.05
  done
  read -r u1 s1 < <(cpu_ticks "$OI_PID"); seen1=$(cat "$TMP/seen")
  kill "$OI_PID"; wait "$OI_PID" 2>/dev/null || true; OI_PID=""
  sort -n "$TMP/fds" > "$TMP/fds.sorted"
  n=$(wc -l < "$TMP/fds.sorted")
  fmin=$(head -1 "$TMP/fds.sorted"); fmax=$(tail -1 "$TMP/fds.sorted")
  fmed=$(sed -n "$(( (n + 1) / 2 ))p" "$TMP/fds.sorted")
  awk -v u=$((u1 - u0)) -v k=$((s1 - s0)) -v hz="$TICKS" -v s="$SECONDS_PER_MODE" -v m="$mode" \
      -v f="$fmin/$fmed/$fmax" -v p=$((seen1 - seen0)) \
      'BEGIN { t = u + k; printf "%-8s %8.2f %8.2f %8.2f %8.2f %22s %10.0f %12s\n", m, t / hz, u / hz, k / hz,
               100 * t / hz / s, f, p / s, p ? sprintf("%.0f", 1e6 * t / hz / p) : "-" }'
done
