#!/usr/bin/env bash
# benches/rtt_instructions.sh: user-space instructions per 64 B round trip and
# per connection, counted by valgrind's callgrind, for oi, rinetd and haproxy.
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
# difference in instructions over the difference in connections.
# Needs valgrind and python3; rinetd and haproxy when installed.
set -euo pipefail
SHORT=${SHORT:-1000}
LONG=${LONG:-3000}
CONN_SECS=${CONN_SECS:-4}
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "rtt_instructions.sh: valgrind is required" >&2; exit 1; }
cargo build --release --quiet --bins --examples
OI=${OI:-$PWD/target/release/oi}
LOADGEN=$PWD/target/release/examples/loadgen
WORK=$(mktemp -d /tmp/oi-rtt-ir.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listening() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }
wait_listening() {
    local i
    for ((i = 0; i < 1500; i++)); do listening "$1" && return 0; sleep 0.02; done
    echo "rtt_instructions.sh: nothing listens on port $1" >&2; exit 1
}
BACKEND=$(port)
"$LOADGEN" echo-server "127.0.0.1:$BACKEND" >/dev/null 2>&1 &
PIDS+=($!)
wait_listening "$BACKEND"

# Instructions (callgrind's Ir, every thread) of forwarder $1 (command: the
# rest, @PORT@ replaced) over $2 round trips.
instructions() {
    local name=$1 rtts=$2; shift 2
    local p a args=()
    p=$(port)
    printf '127.0.0.1 %s 127.0.0.1 %s\n' "$p" "$BACKEND" >"$WORK/$name.conf"
    printf 'global\n    maxconn 100\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nlisten fwd\n    bind 127.0.0.1:%s\n    server b 127.0.0.1:%s\n' \
        "$p" "$BACKEND" >"$WORK/$name.cfg"
    for a in "$@"; do
        a=${a//@CONF@/$WORK/$name.conf}
        args+=("${a//@CFG@/$WORK/$name.cfg}")
    done
    rm -f "$WORK"/cg.out.*
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out.%p" "${args[@]}" >"$WORK/$name.log" 2>&1 &
    local pid=$!
    wait_listening "$p"
    if [[ $rtts == conn* ]]; then
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

printf '| forwarder | instructions per round trip | instructions per connection |\n|---|---|---|\n'
row() {
    local name=$1; shift
    local a b c d ca cb
    a=$(instructions "$name" "$SHORT" "$@")
    b=$(instructions "$name" "$LONG" "$@")
    c=$(instructions "$name" conn1 "$@"); ca=$(cat "$WORK/conns")
    d=$(instructions "$name" "conn$CONN_SECS" "$@"); cb=$(cat "$WORK/conns")
    printf '| %s | %s | %s |\n' "$name" \
        "$(python3 -c 'import sys; a,b,s,l=map(int,sys.argv[1:]); print(round((b-a)/(l-s)))' "$a" "$b" "$SHORT" "$LONG")" \
        "$(python3 -c 'import sys; a,b,s,l=map(int,sys.argv[1:]); print(round((b-a)/(l-s)) if l > s else "-")' "$c" "$d" "${ca:-0}" "${cb:-0}")"
}
row oi-t1 "$OI" --threads 1 -c @CONF@
row oi-t2 "$OI" --threads 2 -c @CONF@
command -v rinetd >/dev/null && row rinetd rinetd -f -c @CONF@
command -v haproxy >/dev/null && row haproxy haproxy -db -f @CFG@
echo
echo "user-space instructions (valgrind callgrind, all threads): ($LONG - $SHORT) round trips of 64 B through each;"
echo "connections: (${CONN_SECS} s - 1 s) of loadgen connrate with 2 workers, per connection made"
