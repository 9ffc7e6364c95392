#!/usr/bin/env bash
# benches/conn_footprint.sh: the code one connection, and one 64 B round
# trip, runs through, per forwarder, from valgrind's callgrind: instructions,
# simulated first-level instruction-cache misses, the 64-byte lines of code
# the path needs (hot code), and atomic read-modify-writes. Figures that repeat run to
# run, for the part of CPU per connection the kernel does not spend: on this
# machine oi's user time per connection was 16-18 µs against rinetd's 10 with
# fewer instructions, and these say why (docs/performance.md, "Instructions
# per connection and per round trip").
#
#   benches/conn_footprint.sh
#   OI=/path/to/oi benches/conn_footprint.sh          # another oi build
#   OI_BASELINE=/path/to/old/oi benches/conn_footprint.sh   # + a row for it (2 threads)
#   OI=target/profiling/oi TOP=30 benches/conn_footprint.sh   # + oi's largest functions, and its atomics by function
#
# Each forwarder runs twice under callgrind (--cache-sim=yes --dump-instr=yes)
# while loadgen connrate (connect, 64 B request/response, close; 2 workers)
# runs through it for 1 and SECS seconds; the differences over the difference
# in connections are per connection, free of start-up and shutdown
# (benches/footprint.py). Round trips the same way: 1,000 and 3,000 of
# loadgen pingpong (64 B) on one connection. Needs valgrind, python3 and objdump; rinetd and
# haproxy when installed.
set -euo pipefail
SECS=${SECS:-4}
TOP=${TOP:-0}
cd "$(dirname "$0")/.."
for tool in valgrind python3 objdump; do
    command -v "$tool" >/dev/null || { echo "conn_footprint.sh: $tool is required" >&2; exit 1; }
done
cargo build --release --quiet --bins --examples
OI=${OI:-$PWD/target/release/oi}
LOADGEN=$PWD/target/release/examples/loadgen
BENCH=conn_footprint.sh
PORT_BASE=13000
# shellcheck source=benches/lib.sh
. benches/lib.sh
# `run` is called in a command substitution: ports from lib.sh's kernel_port.
BACKEND=$(kernel_port)
"$LOADGEN" echo-server "127.0.0.1:$BACKEND" >/dev/null 2>&1 &
PIDS+=($!)
wait_listening "$BACKEND"

# Runs forwarder $1 (command: the rest, @CONF@/@HAPROXY@ replaced) under
# callgrind for load $2: "connN", N seconds of connections, or "rttN", N
# round trips of 64 B on one connection; the profile goes to
# $WORK/$1.$2.out, the connections or round trips made to stdout.
run() {
    local name=$1 load=$2; shift 2
    local p
    p=$(kernel_port)
    forwarder "$name" "$p" "$BACKEND" "$@"
    rm -f "$WORK"/cg.*
    valgrind --tool=callgrind --cache-sim=yes --dump-instr=yes \
        --callgrind-out-file="$WORK/cg.%p" "${COMMAND[@]}" >"$WORK/$name.log" 2>&1 &
    local pid=$!
    wait_listening "$p" 30
    if [[ $load == rtt* ]]; then
        "$LOADGEN" pingpong "127.0.0.1:$p" --count "${load#rtt}" --warmup 0 --size 64 >/dev/null
        echo "${load#rtt}"
    else
        "$LOADGEN" connrate "127.0.0.1:$p" --secs "${load#conn}" --conns 2 | sed -n 's/.* ok=\([0-9]*\).*/\1/p'
    fi
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    # One process: forwarders that fork (none of these) would need merging.
    mv "$(ls "$WORK"/cg.* | head -1)" "$WORK/$name.$load.out"
}

printf '| forwarder | per | instructions | I1 misses | hot code, 64 B lines (KiB) | atomic read-modify-writes |\n|---|---|---|---|---|---|\n'
# One row per unit ($2: the short and the long load, as `run` takes them).
unit_row() {
    local name=$1 per=$2 short=$3 long=$4; shift 4
    local a b ir i1 lines rmw
    a=$(run "$name" "$short" "$@")
    b=$(run "$name" "$long" "$@")
    read -r ir i1 lines rmw < <(python3 benches/footprint.py "$WORK/$name.$short.out" "$WORK/$name.$long.out" \
        "$(( ${b:-0} - ${a:-0} ))" "$TOP" 2>"$WORK/$name.$per.top")
    printf '| %s | %s | %s | %s | %s (%s) | %s |\n' "$name" "$per" "$ir" "$i1" "$lines" \
        "$(python3 -c "print(f'{$lines * 64 / 1024:.1f}')")" "$rmw"
}
row() {
    local name=$1; shift
    unit_row "$name" connection conn1 "conn$SECS" "$@"
    unit_row "$name" "round trip" rtt1000 rtt3000 "$@"
}
row oi-t1 "$OI" --threads 1 -c @CONF@
row oi-t2 "$OI" --threads 2 -c @CONF@
[[ -n ${OI_BASELINE:-} ]] && row baseline-t2 "$OI_BASELINE" --threads 2 -c @CONF@
command -v rinetd >/dev/null && row rinetd rinetd -f -c @CONF@
command -v haproxy >/dev/null && row haproxy haproxy -db -f @HAPROXY@
echo
echo "callgrind (all threads, one simulated 32 KiB I1); per connection: (${SECS} s - 1 s) of loadgen connrate"
echo "with 2 workers; per round trip: (3000 - 1000) round trips of 64 B on one connection (loadgen pingpong);"
echo "hot code: lines holding an instruction run at least once every two connections (round trips)"
if (( TOP > 0 )); then
    echo; echo "oi-t2's functions with the most hot lines, then the most atomic operations, per connection:"; cat "$WORK/oi-t2.connection.top"
fi
