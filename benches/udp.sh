#!/usr/bin/env bash
# UDP forwarding throughput: iperf3 -u through oi, directly, and through rinetd,
# in one run, interleaved and repeated. Prints received datagrams per second,
# received bandwidth, loss, and the forwarder's CPU time per million datagrams
# (utime+stime from /proc/PID/stat before and after each run).
#
#   benches/udp.sh                 # 3 rounds, 5 s each, 1400-byte datagrams
#   ROUNDS=5 SECS=10 LEN=64 RATE=20M benches/udp.sh
#
# Two phases per round: "max" sends as fast as iperf3 can (-b 0) and reports what
# arrives; "rate" sends at a fixed RATE the forwarders keep up with (little loss),
# so the CPU time per datagram is not skewed by datagrams dropped downstream.
#
# Needs iperf3, rinetd (0.73) and jq. iperf3 -u needs its TCP control port
# forwarded too, so each forwarder gets a TCP rule beside the /udp rule.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
LEN=${LEN:-1400}
BACKEND=${BACKEND:-5202}
OI_PORT=${OI_PORT:-5211}
RINETD_PORT=${RINETD_PORT:-5221}
OI1_PORT=${OI1_PORT:-5231}
RATE=${RATE:-200M}
cd "$(dirname "$0")/.."
cargo build --release --quiet --bins --examples # as the other benches: one feature set, no rebuild between them
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

rules() { # port
  printf '127.0.0.1 %s 127.0.0.1 %s\n127.0.0.1 %s/udp 127.0.0.1 %s/udp\n' "$1" "$BACKEND" "$1" "$BACKEND"
}
rules "$OI_PORT" > "$dir/oi.conf"
rules "$RINETD_PORT" > "$dir/rinetd.conf"
rules "$OI1_PORT" > "$dir/oi1.conf"
iperf3 -s -p "$BACKEND" >/dev/null 2>&1 & pids+=($!)
RUST_LOG=warn target/release/oi -c "$dir/oi.conf" 2>"$dir/oi.err" & oi_pid=$!; pids+=($oi_pid)
rinetd -f -c "$dir/rinetd.conf" >/dev/null 2>&1 & rinetd_pid=$!; pids+=($rinetd_pid)
# oi on one executor thread: shows what handing wake-ups between threads costs.
RUST_LOG=warn target/release/oi -c "$dir/oi1.conf" --threads 1 2>"$dir/oi1.err" & oi1_pid=$!; pids+=($oi1_pid)
sleep 1 # let the three servers bind (benchmark only; tests never sleep)

tck=$(getconf CLK_TCK)
cpu_ticks() { # pid -> utime+stime in clock ticks (fields 14 and 15)
  [ -n "$1" ] || { echo 0; return; }
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

run() { # name port pid bitrate
  local name=$1 port=$2 pid=$3 rate=$4 before after json
  before=$(cpu_ticks "$pid")
  json=$(iperf3 -u -b "$rate" -l "$LEN" -c 127.0.0.1 -p "$port" -t "$SECS" -J)
  printf '%s\n' "$json" > "$dir/$name.json"
  after=$(cpu_ticks "$pid")
  # sum_sent is what the client sent; sum_received what reached the iperf3 server.
  # (iperf3's loss figure is meaningless through rinetd, whose empty first
  # datagram upsets its sequence numbers, so loss is shown as sent vs received.)
  jq -r --arg name "$name" --arg rate "$rate" --argjson cpu "$(( after - before ))" \
     --argjson tck "$tck" --argjson len "$LEN" '
    .end.sum_sent as $t | .end.sum_received as $s
    | ($s.bytes / $len) as $got
    | [$name, $rate,
       ($t.bytes / $len / $t.seconds | floor),
       ($got / $s.seconds | floor),
       ($s.bits_per_second / 1e6 | floor),
       (if $cpu > 0 then ($cpu / $tck) / ($got / 1e6) * 100 | round / 100 else "-" end)]
    | @tsv' <<<"$json"
}

printf 'datagram %s bytes, %s s per run, %s rounds (2 cores, noisy: compare within a round)\n' "$LEN" "$SECS" "$ROUNDS"
printf 'path\tbitrate\tsent_pps\trecv_pps\trecv_Mbit/s\tcpu_s_per_M_recv\n'
for r in $(seq "$ROUNDS"); do
  for rate in 0 "$RATE"; do
    run direct "$BACKEND" "" "$rate"
    run oi "$OI_PORT" "$oi_pid" "$rate"
    run oi-threads1 "$OI1_PORT" "$oi1_pid" "$rate"
    run rinetd "$RINETD_PORT" "$rinetd_pid" "$rate"
  done
done
