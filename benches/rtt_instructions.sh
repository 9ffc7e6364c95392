#!/usr/bin/env bash
# benches/rtt_instructions.sh: user-space instructions per 64 B round trip, per
# connection and per UDP datagram, counted by valgrind's callgrind, for oi,
# rinetd and haproxy.
# A figure that repeats run to run, where added p50 latency on a VM swings by
# more than the forwarders differ: it is the forwarder's own part of a round
# trip's latency (the kernel's part is its system calls, benches/syscalls.sh).
#
#   benches/rtt_instructions.sh
#   OI=/path/to/oi benches/rtt_instructions.sh     # another oi build
#
# Each forwarder runs twice under callgrind, with SHORT and LONG round trips on
# one connection through it; (instructions of the long run - of the short run)
# / (LONG - SHORT) is the cost of one round trip, free of start-up and
# shutdown. Connections the same way: two runs of loadgen connrate (connect,
# 64 B request/response, close; 2 workers) for 1 and CONN_SECS seconds, the
# difference in instructions over the difference in connections. UDP, when
# iperf3 is installed: two runs of iperf3 -u (1,400 B datagrams at 20 Mbit/s,
# 1,786 a second: one datagram per wake-up under valgrind, so the figure is
# what a lone datagram costs) for 2 and UDP_SECS seconds, the difference in
# instructions over the difference in datagrams the iperf3 server received
# (haproxy forwards no UDP).
# Needs valgrind and python3; rinetd, haproxy and iperf3 when installed.
set -euo pipefail
SHORT=${SHORT:-1000}
LONG=${LONG:-3000}
CONN_SECS=${CONN_SECS:-4}
UDP_SECS=${UDP_SECS:-6}
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "rtt_instructions.sh: valgrind is required" >&2; exit 1; }
cargo build --release --quiet --bins --examples
OI=${OI:-$PWD/target/release/oi}
LOADGEN=$PWD/target/release/examples/loadgen
BENCH=rtt_instructions.sh
PORT_BASE=12000
. benches/lib.sh
# `instructions` runs in a command substitution: ports from lib.sh's
# kernel_port, not free_port.
BACKEND=$(kernel_port)
"$LOADGEN" echo-server "127.0.0.1:$BACKEND" >/dev/null 2>&1 &
PIDS+=($!)
wait_listening "$BACKEND"
IPERF=""
if command -v iperf3 >/dev/null; then
    IPERF=$(kernel_port)
    iperf3 -s -p "$IPERF" >/dev/null 2>&1 &
    PIDS+=($!)
    wait_listening "$IPERF"
fi

# Instructions (callgrind's Ir, every thread) of forwarder $1 (command: the
# rest, @PORT@ replaced) over $2 round trips.
instructions() {
    local name=$1 rtts=$2; shift 2
    local p a args=()
    p=$(kernel_port)
    if [[ $rtts == udp* ]]; then
        # iperf3's control connection (TCP) and its datagrams, one port.
        printf '127.0.0.1 %s 127.0.0.1 %s\n127.0.0.1 %s/udp 127.0.0.1 %s/udp\n' \
            "$p" "$IPERF" "$p" "$IPERF" >"$WORK/$name.conf"
    else
        printf '127.0.0.1 %s 127.0.0.1 %s\n' "$p" "$BACKEND" >"$WORK/$name.conf"
    fi
    printf 'global\n    maxconn 100\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nlisten fwd\n    bind 127.0.0.1:%s\n    server b 127.0.0.1:%s\n' \
        "$p" "$BACKEND" >"$WORK/$name.cfg"
    for a in "$@"; do
        a=${a//@CONF@/$WORK/$name.conf}
        args+=("${a//@CFG@/$WORK/$name.cfg}")
    done
    rm -f "$WORK"/cg.out.*
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out.%p" "${args[@]}" >"$WORK/$name.log" 2>&1 &
    local pid=$!
    wait_listening "$p" 30
    if [[ $rtts == udp* ]]; then
        # "udpN": N seconds of iperf3 -u; datagrams received go to $WORK/datagrams.
        iperf3 -u -b 20M -l 1400 -c 127.0.0.1 -p "$p" -t "${rtts#udp}" -J \
            | python3 -c 'import json,sys; s=json.load(sys.stdin)["end"]["sum"]; print(s["packets"] - s["lost_packets"])' \
            >"$WORK/datagrams"
    elif [[ $rtts == conn* ]]; then
        # "connN": N seconds of connections; their count goes to $WORK/conns.
        "$LOADGEN" connrate "127.0.0.1:$p" --secs "${rtts#conn}" --conns 2 \
            | sed -n 's/.* ok=\([0-9]*\).*/\1/p' >"$WORK/conns"
    else
        "$LOADGEN" pingpong "127.0.0.1:$p" --count "$rtts" --warmup 0 --size 64 >/dev/null
    fi
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    # Each output file has "summary:" and "totals:" (the same count): one
    # of them, summed over the files (several if it forks).
    cat "$WORK"/cg.out.* | awk '/^totals:/ { s += $2 } END { print s + 0 }'
}

printf '| forwarder | instructions per round trip | instructions per connection | instructions per UDP datagram |\n|---|---|---|---|\n'
# (b - a) / (l - s), or "-" when the counts did not grow.
per() { python3 -c 'import sys; a,b,s,l=map(int,sys.argv[1:]); print(round((b-a)/(l-s)) if l > s else "-")' "$@"; }
row() {
    local name=$1 udp=$2; shift 2
    local a b c d ca cb u=0 ua=0 v=0 va=0
    a=$(instructions "$name" "$SHORT" "$@")
    b=$(instructions "$name" "$LONG" "$@")
    c=$(instructions "$name" conn1 "$@"); ca=$(cat "$WORK/conns")
    d=$(instructions "$name" "conn$CONN_SECS" "$@"); cb=$(cat "$WORK/conns")
    if [ -n "$IPERF" ] && [ "$udp" = udp ]; then
        u=$(instructions "$name" udp2 "$@"); ua=$(cat "$WORK/datagrams")
        v=$(instructions "$name" "udp$UDP_SECS" "$@"); va=$(cat "$WORK/datagrams")
    fi
    printf '| %s | %s | %s | %s |\n' "$name" "$(per "$a" "$b" "$SHORT" "$LONG")" \
        "$(per "$c" "$d" "${ca:-0}" "${cb:-0}")" "$(per "$u" "$v" "${ua:-0}" "${va:-0}")"
}
row oi-t1 udp "$OI" --threads 1 -c @CONF@
row oi-t2 udp "$OI" --threads 2 -c @CONF@
command -v rinetd >/dev/null && row rinetd udp rinetd -f -c @CONF@
command -v haproxy >/dev/null && row haproxy tcp haproxy -db -f @CFG@
echo
echo "user-space instructions (valgrind callgrind, all threads): ($LONG - $SHORT) round trips of 64 B through each;"
echo "connections: (${CONN_SECS} s - 1 s) of loadgen connrate with 2 workers, per connection made;"
echo "UDP: (${UDP_SECS} s - 2 s) of iperf3 -u -b 20M -l 1400, per datagram the iperf3 server received"
