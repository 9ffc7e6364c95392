#!/usr/bin/env bash
# UDP forwarding throughput and cost per datagram: iperf3 -u through one or
# more oi builds, directly, and through rinetd, in one run, interleaved and
# repeated. Prints sent and received datagrams per second, received bandwidth,
# and each forwarder's CPU time (utime+stime from /proc/PID/stat) and system
# calls (perf's raw_syscalls:sys_enter, counted for that PID) per received
# datagram.
#
#   benches/udp.sh                                # target/release/oi; 3 rounds, 5 s, 1400 B
#   ROUNDS=5 SECS=10 LEN=64 RATE=20M benches/udp.sh
#   benches/udp.sh /tmp/oi-main target/release/oi # two builds side by side
#   THREADS1=1 benches/udp.sh                     # each build also with --threads 1
#
# Two phases per round: "max" sends as fast as iperf3 can (-b 0) and reports what
# arrives; "rate" sends at a fixed RATE the forwarders keep up with (little loss),
# so the cost per datagram is not skewed by datagrams dropped downstream.
#
# Needs iperf3, rinetd (0.73), jq, and perf for the system-call column (a "-"
# without it, or without the right to trace). iperf3 -u needs its TCP control
# port forwarded too, so each forwarder gets a TCP rule beside the /udp rule
# (a few system calls a second: noise against thousands of datagrams).
set -euo pipefail
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
LEN=${LEN:-1400}
BACKEND=${BACKEND:-5202}
PORT0=${PORT0:-5211}
RATE=${RATE:-200M}
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { cargo build --release --quiet; set -- target/release/oi; }
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

rules() { # port
  printf '127.0.0.1 %s 127.0.0.1 %s\n127.0.0.1 %s/udp 127.0.0.1 %s/udp\n' "$1" "$BACKEND" "$1" "$BACKEND"
}
iperf3 -s -p "$BACKEND" >/dev/null 2>&1 & pids+=($!)
names=() ports=() fpids=()
port=$PORT0
start() { # name port command...
  local name=$1 p=$2; shift 2
  "$@" & pids+=($!) fpids+=($!) names+=("$name") ports+=("$p")
}
for oi in "$@"; do
  rules "$port" > "$dir/oi$port.conf"
  RUST_LOG=warn start "oi:$oi" "$port" "$oi" -c "$dir/oi$port.conf" 2>"$dir/oi$port.err"
  port=$((port + 1))
  if [ -n "${THREADS1:-}" ]; then
    # oi on one executor thread: shows what handing wake-ups between threads costs.
    rules "$port" > "$dir/oi$port.conf"
    RUST_LOG=warn start "oi-threads1:$oi" "$port" "$oi" -c "$dir/oi$port.conf" --threads 1 2>"$dir/oi$port.err"
    port=$((port + 1))
  fi
done
rules "$port" > "$dir/rinetd.conf"
start rinetd "$port" rinetd -f -c "$dir/rinetd.conf"
sleep 1 # let the servers bind (benchmark only; tests never sleep)

tck=$(getconf CLK_TCK)
cpu_ticks() { # pid -> utime+stime in clock ticks (fields 14 and 15)
  [ -n "$1" ] || { echo 0; return; }
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

run() { # name port pid bitrate
  local name=$1 port=$2 pid=$3 rate=$4 before after json perf_pid="" calls=0
  if [ -n "$pid" ] && command -v perf >/dev/null; then
    perf stat -x, -e raw_syscalls:sys_enter -p "$pid" -o "$dir/perf.txt" 2>/dev/null & perf_pid=$!
  fi
  before=$(cpu_ticks "$pid")
  json=$(iperf3 -u -b "$rate" -l "$LEN" -c 127.0.0.1 -p "$port" -t "$SECS" -J)
  after=$(cpu_ticks "$pid")
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
    calls=$(awk -F, '/raw_syscalls/ { print $1 + 0 }' "$dir/perf.txt" 2>/dev/null || echo 0)
  fi
  # sum_sent is what the client sent; sum_received what reached the iperf3 server.
  # (iperf3's loss figure is meaningless through rinetd, whose empty first
  # datagram upsets its sequence numbers, so loss is shown as sent vs received.)
  jq -r --arg name "$name" --arg rate "$rate" --argjson cpu "$(( after - before ))" \
     --argjson tck "$tck" --argjson len "$LEN" --argjson calls "${calls:-0}" '
    .end.sum_sent as $t | .end.sum_received as $s
    | ($s.bytes / $len) as $got
    | [$name, $rate,
       ($t.bytes / $len / $t.seconds | floor),
       ($got / $s.seconds | floor),
       ($s.bits_per_second / 1e6 | floor),
       (if $cpu > 0 and $got > 0 then ($cpu / $tck) / $got * 1e6 * 100 | round / 100 else "-" end),
       (if $calls > 0 and $got > 0 then $calls / $got * 100 | round / 100 else "-" end)]
    | @tsv' <<<"$json"
}

printf 'datagram %s bytes, %s s per run, %s rounds; %s\n' "$LEN" "$SECS" "$ROUNDS" "$(uptime)"
printf 'path\tbitrate\tsent_pps\trecv_pps\trecv_Mbit/s\tcpu_us_per_recv\tsyscalls_per_recv\n'
for r in $(seq "$ROUNDS"); do
  for rate in 0 "$RATE"; do
    run direct "$BACKEND" "" "$rate"
    for k in "${!names[@]}"; do
      run "${names[$k]}" "${ports[$k]}" "${fpids[$k]}" "$rate"
    done
  done
done
uptime
