#!/usr/bin/env bash
# benches/idle_memory.sh: a forwarder's memory per idle TCP connection — the
# growth of its VmRSS (/proc/PID/status) while COUNT connections are opened
# through it, each proven with one 64-byte round trip and then held, divided
# by the connections held. Bytes, not time: steady on a busy machine.
#
#   benches/idle_memory.sh                         # this tree's oi, 3 rounds
#   OI_BASELINE=/path/to/old/oi benches/idle_memory.sh   # before/after in one run
#   ROUNDS=5 COUNT=5000 benches/idle_memory.sh
#   REALM=/tmp/realm/bin/realm benches/idle_memory.sh     # adds realm's rows
#
# Rows alternate within each round (oi, baseline, rinetd, haproxy, realm when
# present), so a drift over the run touches every row alike. Each line prints
# the per-round figures and their median. COUNT is lowered to what the fd hard
# limit holds (a forwarder needs 2 descriptors per connection).
# Environment: ROUNDS (3), COUNT (9900), OPEN_SECS (time allowed to open
# them, 60), OI (an oi binary to measure instead of building this tree's),
# OI_BASELINE, REALM, NO_OTHERS (set: oi rows only), KEEP.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
COUNT=${COUNT:-9900}
OPEN_SECS=${OPEN_SECS:-60}

cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "idle_memory.sh: python3 is required" >&2; exit 1; }
# OI=/path/to/oi measures that build instead of this tree's (no build then,
# if the load generator is already built).
if [[ -z ${OI:-} || ! -x target/release/examples/loadgen ]]; then
    cargo build --release --examples --bins >&2
fi
OI=${OI:-$PWD/target/release/oi}
LOADGEN=$PWD/target/release/examples/loadgen

BENCH=idle_memory.sh
PORT_BASE=16000
. benches/lib.sh

fit_descriptors "$COUNT" 100
COUNT=$FIT

free_port; ECHO_PORT=$PORT
"$LOADGEN" echo-server "127.0.0.1:$ECHO_PORT" 2>"$WORK/echo.err" &
PIDS+=($!)
wait_listening "$ECHO_PORT"

# Rows: "name|command with @CONF@ (rinetd.conf syntax), @HAPROXY@ or @REALM@ (their files)".
ROWS=("oi|$OI -c @CONF@")
[[ -n ${OI_BASELINE:-} ]] && ROWS+=("baseline|$OI_BASELINE -c @CONF@")
if [[ -z ${NO_OTHERS:-} ]]; then
    command -v rinetd >/dev/null && ROWS+=("rinetd|rinetd -f -c @CONF@")
    command -v haproxy >/dev/null && ROWS+=("haproxy|haproxy -db -f @HAPROXY@")
    if [[ -n ${REALM:-} && -x ${REALM:-} ]]; then
        ROWS+=("realm|$REALM -c @REALM@")
    elif [[ -n ${REALM:-} ]]; then
        echo "idle_memory.sh: REALM=$REALM is not an executable; realm skipped" >&2
    fi
fi

RESULTS=$WORK/results
: >"$RESULTS"
# One measurement: $1 row name, $2 command template, $3 round.
measure() {
    local name=$1 template=$2 round=$3 port conf fifo out pid rss0 rss1 i
    free_port; port=$PORT
    conf=$WORK/$name.$round
    printf '127.0.0.1 %s 127.0.0.1 %s\n' "$port" "$ECHO_PORT" >"$conf.conf"
    cat >"$conf.haproxy" <<HAPROXY
global
    maxconn $(( (HARD - 200) / 2 ))
defaults
    mode tcp
    timeout connect 10s
    timeout client 300s
    timeout server 300s
listen echo
    bind 127.0.0.1:$port
    server echo 127.0.0.1:$ECHO_PORT
HAPROXY
    printf '[[endpoints]]\nlisten = "127.0.0.1:%s"\nremote = "127.0.0.1:%s"\n' \
        "$port" "$ECHO_PORT" >"$conf.realm.toml"
    local cmd=${template//@CONF@/$conf.conf}
    cmd=${cmd//@HAPROXY@/$conf.haproxy}
    cmd=${cmd//@REALM@/$conf.realm.toml}
    # shellcheck disable=SC2086 # the command is split on spaces on purpose
    $cmd >"$conf.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_listening "$port"
    # One round trip first, so lazily made per-process state is not counted.
    "$LOADGEN" idle "127.0.0.1:$port" --count 1 --open-secs 10 </dev/null >/dev/null
    rss0=$(rss_kib "$pid")
    fifo=$conf.fifo out=$conf.idle
    mkfifo "$fifo"
    "$LOADGEN" idle "127.0.0.1:$port" --count "$COUNT" --open-secs "$OPEN_SECS" <"$fifo" >"$out" &
    local idler=$!
    exec 3>"$fifo"
    for i in $(seq $(( (OPEN_SECS + 15) * 10 ))); do
        grep -q '^result:' "$out" 2>/dev/null && break
        kill -0 "$idler" 2>/dev/null || break
        sleep 0.1
    done
    rss1=$(rss_kib "$pid")
    echo "$name $round $rss0 $rss1 $(result "$out" held || echo 0)" >>"$RESULTS"
    exec 3>&-
    wait "$idler" || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
    for row in "${ROWS[@]}"; do
        echo "== round $round: ${row%%|*}" >&2
        measure "${row%%|*}" "${row#*|}" "$round"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RESULTS" "$COUNT" "$LOAD_BEFORE" "$LOAD_AFTER" <<'EOF'
import sys
path, count, before, after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {}
for line in open(path):
    name, rnd, rss0, rss1, held = line.split()
    held = int(held or 0)
    per = (int(rss1) - int(rss0)) / held if held else float("nan")
    rows.setdefault(name, []).append((per, held))
print("| forwarder | KiB per idle connection, each round | median | held |")
print("|---|---|---|---|")
for name, vals in rows.items():
    pers = sorted(p for p, _ in vals)
    med = pers[len(pers) // 2]
    print(f"| {name} | {' / '.join(f'{p:.2f}' for p, _ in vals)} | {med:.2f} "
          f"| {min(h for _, h in vals)}–{max(h for _, h in vals)} of {count} |")
print()
print(f"VmRSS growth while the connections were opened (each with one 64 B round trip) "
      f"and held, divided by those held. Load average before {before}, after {after}.")
EOF
