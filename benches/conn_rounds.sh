#!/usr/bin/env bash
# benches/conn_rounds.sh: connections per second and the forwarder's CPU µs
# per connection (connect, 64 B request/response, close: loadgen connrate),
# in many short interleaved rounds, with how many rounds oi won against each
# other forwarder. The goal table's rows for these two figures take three
# rounds, and on a 2-core VM one forwarder's rounds spread wider than the
# forwarders differ (docs/performance.md, "CPU per connection and
# connections per second"); many rounds, each forwarder in turn
# within a round and in a rotated order, tell a difference from that spread.
#
#   benches/conn_rounds.sh                           # oi, rinetd, haproxy; 15 rounds of 2 s
#   ROUNDS=30 SECS=3 benches/conn_rounds.sh
#   OI_BASELINE=/path/to/old/oi REALM=/tmp/realm/bin/realm benches/conn_rounds.sh
#   OI=target/dist/release/oi benches/conn_rounds.sh    # the shipped, profile-guided build (dist/pgo-build.sh)
#
# Every forwarder runs for the whole script (started once, to one echo
# server); a round runs connrate through each for SECS seconds, WORKERS
# workers (8, as compare.sh). CPU is utime+stime from /proc/PID/stat over the
# run, in clock ticks (10 ms: about 1% of a 2 s round's CPU), also shown
# apart: user time is the forwarder's own code, system time mostly the
# loopback TCP work its system calls do for both ends. Needs python3;
# rinetd and haproxy are used when installed.
set -euo pipefail

ROUNDS=${ROUNDS:-15}
SECS=${SECS:-2}
WORKERS=${WORKERS:-8}

cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "conn_rounds.sh: python3 is required" >&2; exit 1; }
cargo build --release --bins --examples >&2
OI=${OI:-$PWD/target/release/oi}
LOADGEN=$PWD/target/release/examples/loadgen

BENCH=conn_rounds.sh PORT_BASE=30000
# shellcheck source=benches/lib.sh
. benches/lib.sh

free_port; BACKEND=$PORT
"$LOADGEN" echo-server "127.0.0.1:$BACKEND" 2>"$WORK/echo.err" &
PIDS+=($!)
wait_listening "$BACKEND"

NAMES=() FPIDS=() FPORTS=()
# Starts forwarder $1 (command: the rest) and keeps it for every round.
start() {
    local name=$1; shift
    free_port; local port=$PORT
    forwarder "$name" "$port" "$BACKEND" "$@"
    "${COMMAND[@]}" >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    NAMES+=("$name") FPIDS+=($!) FPORTS+=("$port")
    wait_listening "$port"
}
each_forwarder start

echo "load before=$(cut -d' ' -f1-3 /proc/loadavg)" >"$WORK/load"
n=${#NAMES[@]}
for ((round = 0; round < ROUNDS; round++)); do
    for ((k = 0; k < n; k++)); do
        i=$(( (round + k) % n )) # rotated, so no forwarder always runs first
        name=${NAMES[$i]} pid=${FPIDS[$i]}
        read -r user0 system0 < <(user_system_ticks "$pid")
        "$LOADGEN" connrate "127.0.0.1:${FPORTS[$i]}" --secs "$SECS" --conns "$WORKERS" \
            >"$WORK/$name.$round.rate" || true
        read -r user1 system1 < <(user_system_ticks "$pid")
        echo "$round $name $(result "$WORK/$name.$round.rate" conns_per_sec) $(result "$WORK/$name.$round.rate" ok) $((user1 - user0)) $((system1 - system0))" >>"$WORK/results"
    done
done
echo "load after=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$WORK/load"

python3 - "$WORK/results" "$(getconf CLK_TCK)" "$SECS" "$WORKERS" "$WORK/load" <<'EOF'
import statistics, sys
path, tck, secs, workers, load = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rate, cpu, user, system = {}, {}, {}, {}
for line in open(path):
    parts = line.split()
    if len(parts) != 6:
        continue
    r, name, per_sec, ok = int(parts[0]), parts[1], float(parts[2] or "nan"), float(parts[3] or 0)
    u, s = int(parts[4]), int(parts[5])
    rate.setdefault(name, {})[r] = per_sec
    for into, ticks in ((cpu, u + s), (user, u), (system, s)):
        into.setdefault(name, {})[r] = ticks / tck * 1e6 / ok if ok else float("nan")
def summary(d):
    v = sorted(x for x in d.values() if x == x)
    if not v:
        return "—"
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return f"{statistics.median(v):.0f} ({q[0]:.0f}–{q[2]:.0f}; {v[0]:.0f}–{v[-1]:.0f})"
def wins(a, b, better):
    rounds = [r for r in a if r in b and a[r] == a[r] and b[r] == b[r]]
    return sum(better(a[r], b[r]) for r in rounds), len(rounds)
print("| forwarder | connections per second | CPU µs per connection | of it user | of it system | oi's rounds ahead on the rate | on CPU |")
print("|---|---|---|---|---|---|---|")
for name in rate:
    if name == "oi":
        ahead = "", ""
    else:
        w1, t1 = wins(rate["oi"], rate[name], lambda x, y: x >= y)
        w2, t2 = wins(cpu["oi"], cpu[name], lambda x, y: x <= y)
        ahead = f"{w1} of {t1}", f"{w2} of {t2}"
    print(f"| {name} | {summary(rate[name])} | {summary(cpu[name])} | {summary(user[name])} "
          f"| {summary(system[name])} | {ahead[0]} | {ahead[1]} |")
loads = dict(l.strip().removeprefix("load ").split("=", 1) for l in open(load))
print(f"\nEach cell: median (middle half of the rounds; all of them). {len(rate['oi'])} rounds of "
      f"{secs} s, {workers} workers, each forwarder in turn within a round (rotated); "
      f"load average {loads.get('before', '?')} → {loads.get('after', '?')}.")
EOF
