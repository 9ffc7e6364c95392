#!/usr/bin/env bash
# benches/bulk_calls.sh: what a forwarder spends per GiB of bulk transfer, as
# CPU seconds (utime+stime from /proc/PID/stat) and as system calls (perf's
# raw_syscalls:sys_enter, counted for that PID only). The call count depends
# on timing too (how much each wake-up finds ready: oi's -P8 rounds have read
# 11k to 29k calls per GiB on a 2-core VM), but it tells apart forwarders
# whose CPU rounds overlap when their calls differ by more than that (realm
# 36k, haproxy 132k, rinetd 150k at -P8).
#
#   benches/bulk_calls.sh                          # oi, rinetd, haproxy; iperf3 -P8
#   REALM=/tmp/realm/bin/realm benches/bulk_calls.sh
#   STREAMS=1 ROUNDS=5 SECS=4 benches/bulk_calls.sh
#   OI_BASELINE=/path/to/old/oi benches/bulk_calls.sh
#
# Each round runs every forwarder once, in turn, each with an iperf3 client of
# STREAMS streams for SECS seconds through it to one iperf3 server; the table
# shows each forwarder's median and its rounds. Needs iperf3, perf (with the
# right to count tracepoints: root or perf_event_paranoid <= 1) and python3;
# rinetd and haproxy are used when installed.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECS=${SECS:-4}
STREAMS=${STREAMS:-8}

cd "$(dirname "$0")/.."
for tool in iperf3 perf python3; do
    command -v "$tool" >/dev/null || { echo "bulk_calls.sh: $tool is required" >&2; exit 1; }
done
cargo build --release --bins >&2
OI=${OI:-$PWD/target/release/oi}

BENCH=bulk_calls.sh PORT_BASE=24000
# shellcheck source=benches/lib.sh
. benches/lib.sh

free_port; BACKEND=$PORT
iperf3 -s -p "$BACKEND" >"$WORK/iperf3-server.log" 2>&1 &
PIDS+=($!)
wait_listening "$BACKEND"

NAMES=() COMMANDS=()
add() { NAMES+=("$1"); shift; COMMANDS+=("$*"); }
each_forwarder add

# One forwarder, one iperf3 run through it: appends "name cpu_seconds calls bytes".
measure() {
    local name=$1 command=$2
    free_port; local port=$PORT
    # shellcheck disable=SC2086 # the command is words on purpose
    forwarder "$name" "$port" "$BACKEND" $command
    "${COMMAND[@]}" >"$WORK/$name.out" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    wait_listening "$port"
    local before; before=$(cpu_ticks "$pid")
    perf stat -x, -e raw_syscalls:sys_enter -p "$pid" -o "$WORK/$name.perf" &
    local perf=$!
    iperf3 -c 127.0.0.1 -p "$port" -t "$SECS" -P "$STREAMS" -J >"$WORK/$name.json" || true
    kill -INT "$perf"; wait "$perf" 2>/dev/null || true
    local after; after=$(cpu_ticks "$pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    python3 - "$name" "$before" "$after" "$WORK/$name.perf" "$WORK/$name.json" >>"$WORK/results" <<'EOF'
import json, sys
name, before, after, perf, result = sys.argv[1:]
calls = next(int(l.split(",")[0]) for l in open(perf) if "raw_syscalls" in l)
data = json.load(open(result))
received = data["end"]["sum_received"]["bytes"]
ticks = __import__("os").sysconf("SC_CLK_TCK")
print(name, (float(after) - float(before)) / ticks, calls, received)
EOF
}

for ((round = 1; round <= ROUNDS; round++)); do
    for i in "${!NAMES[@]}"; do measure "${NAMES[$i]}" "${COMMANDS[$i]}"; done
done

python3 - "$WORK/results" "$STREAMS" "$SECS" <<'EOF'
import statistics, sys
path, streams, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
rows = {}
for line in open(path):
    name, cpu, calls, received = line.split()
    gib = int(received) / 2**30
    rows.setdefault(name, []).append((gib * 8 * 1.073741824 / secs, float(cpu) / gib, int(calls) / gib))
def cell(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({' / '.join(fmt.format(v) for v in values)})"
print(f"| forwarder | iperf3 -P{streams} Gbit/s | CPU s/GiB | system calls per GiB |")
print("|---|---|---|---|")
for name, runs in rows.items():
    gbit, cpu, calls = zip(*runs)
    print(f"| {name} | {cell(gbit, '{:.1f}')} | {cell(cpu, '{:.3f}')} | {cell(calls, '{:,.0f}')} |")
print(f"\n{len(next(iter(rows.values())))} round(s) of {secs:g} s; each cell: median (each round).")
EOF
