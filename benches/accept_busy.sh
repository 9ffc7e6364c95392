#!/usr/bin/env bash
# Accept while one thread is busy: the connection rate (connect, 64 B
# request/response, close) through oi alone, then while one iperf3 -P1 flow
# runs through the same oi, as % of the unloaded rate. One or more oi builds,
# alternating round by round in one run, so they share the machine's load:
#
#   benches/accept_busy.sh                               # target/release/oi
#   ROUNDS=3 THREADS=2 benches/accept_busy.sh old/oi new/oi
#
# The goal is >= 90% (docs/performance.md, "The goal table"). With one
# SO_REUSEPORT socket per thread, the connections that hash to the thread
# running the bulk flow wait behind it.
# Knobs: ROUNDS (3), SECS (connrate seconds, 3), WORKERS (connrate workers,
# 4), THREADS (oi --threads, 2). Needs iperf3, python3 and cargo (loadgen).
#
# Controls, for telling oi's share of the drop from the machine's:
#   BULK=direct      the bulk flow goes straight to the iperf3 server, not
#                    through oi: what the flow's two endpoints alone take
#                    from the connection run on this machine's cores;
#   BULK_RATE=3.5G   iperf3 -b: the flow at a fixed rate (rinetd's bulk
#                    throughput beside its own connection run is 3-4 Gbit/s).
#   ENDS=idle        the flow's two endpoints (iperf3 client and server) run
#                    under SCHED_IDLE (chrt -i 0): they get only the CPU that
#                    nothing else wants, as if they were on other machines,
#                    which is where a forwarder's bulk endpoints are. What is
#                    left of the drop is oi's own.
# Each line also gives the bulk flow's throughput (iperf3's sender figure).
set -euo pipefail
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-3}
WORKERS=${WORKERS:-4}
THREADS=${THREADS:-2}
ENDS=${ENDS:-normal}
cd "$(dirname "$0")/.."
ends=()
case $ENDS in
    normal) ;;
    idle) ends=(chrt -i 0) ;;
    *) echo "accept_busy.sh: ENDS is normal or idle, not '$ENDS'" >&2; exit 1 ;;
esac
command -v iperf3 >/dev/null || { echo "accept_busy.sh: iperf3 is required" >&2; exit 1; }
cargo build --release --quiet --example loadgen
LOADGEN=$PWD/target/release/examples/loadgen
[ $# -gt 0 ] || { cargo build --release --quiet; set -- target/release/oi; }
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listening() { python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1",int(sys.argv[1])),1)' "$1" 2>/dev/null; }
wait_listening() {
    local i
    for i in $(seq 100); do listening "$1" && return 0; sleep 0.05; done
    echo "accept_busy.sh: nothing listens on port $1" >&2; exit 1
}
rate() { grep '^result:' "$1" | tr ' ' '\n' | awk -F= '$1 == "conns_per_sec" { print $2 }'; }
echo_port=$(port) iperf_port=$(port)
"$LOADGEN" echo-server "127.0.0.1:$echo_port" 2>"$dir/echo.err" &
pids+=($!)
${ends[@]+"${ends[@]}"} iperf3 -s -p "$iperf_port" >"$dir/iperf.log" 2>&1 &
pids+=($!)
wait_listening "$echo_port"
wait_listening "$iperf_port"
names=() eports=() iports=()
i=0
for oi in "$@"; do
    e=$(port) p=$(port)
    printf '127.0.0.1 %s 127.0.0.1 %s\n127.0.0.1 %s 127.0.0.1 %s\n' \
        "$e" "$echo_port" "$p" "$iperf_port" >"$dir/oi$i.conf"
    RUST_LOG=warn "$oi" --threads "$THREADS" -c "$dir/oi$i.conf" 2>"$dir/oi$i.err" &
    pids+=($!)
    wait_listening "$e"
    names+=("$oi") eports+=("$e") iports+=("$p")
    i=$((i + 1))
done
uptime
for round in $(seq "$ROUNDS"); do
    for k in "${!names[@]}"; do
        "$LOADGEN" connrate "127.0.0.1:${eports[$k]}" --secs "$SECS" --conns "$WORKERS" >"$dir/idle" || true
        target=${iports[$k]}
        [[ ${BULK:-oi} == direct ]] && target=$iperf_port
        ${ends[@]+"${ends[@]}"} iperf3 -c 127.0.0.1 -p "$target" -t $((SECS + 2)) -P 1 ${BULK_RATE:+-b "$BULK_RATE"} >"$dir/bg" 2>&1 &
        bg=$!
        sleep 1 # let the bulk flow reach full speed
        "$LOADGEN" connrate "127.0.0.1:${eports[$k]}" --secs "$SECS" --conns "$WORKERS" >"$dir/busy" || true
        wait "$bg" || true
        idle=$(rate "$dir/idle") busy=$(rate "$dir/busy")
        gbits=$(awk '/sender$/ { v = $7; u = $8 } END { if (u == "Mbits/sec") v /= 1000; print v + 0 }' "$dir/bg")
        printf 'round %s  %-32s unloaded %6s conn/s  with iperf3 -P1 (%s, %s Gbit/s) %6s conn/s  %5.1f%%\n' \
            "$round" "${names[$k]}" "$idle" "${BULK:-oi}${BULK_RATE:+ at $BULK_RATE}${ends[*]:+, ends idle}" "$gbits" "$busy" \
            "$(python3 -c 'import sys; a,b=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print(100*b/a if a else float("nan"))' "$idle" "$busy")"
    done
done
uptime
