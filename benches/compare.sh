#!/usr/bin/env bash
# benches/compare.sh: oi against a direct loopback connection and rinetd, side
# by side in one run, printed as one markdown table (ratios to direct).
#
#   benches/compare.sh            # needs cargo, iperf3, python3; rinetd if installed
#   OI=target/dist/release/oi benches/compare.sh   # the shipped, profile-guided build (dist/pgo-build.sh)
#
# Rows: direct, oi --splice=off, oi --splice=on, rinetd and haproxy (when
# installed), an older oi (OI_BASELINE) and the original oxidinetd
# (ORIGINAL_OXIDINETD) when their binaries are given.
# Columns: iperf3 -P1 and -P8 throughput, the forwarder's CPU
# seconds per GiB during -P1 and during -P8, 64-byte ping-pong p50/p99, connection rate
# (connect, 64 B request/response, close), and forwarder RSS per idle
# connection at 10,000 idle connections (fewer if the fd hard limit cannot
# hold 2 x 10,000 descriptors; the table says how many).
# Other helpers' compiles make the load swing within a run, so direct is
# measured again right before each forwarder ("paired"): a forwarder's % is
# against the direct run next to it, and the direct row shows the median of
# all direct runs.
# Below the table: per-thread CPU of oi during -P8 (are connections spread
# over the executor threads?) and the connection rate while an iperf3 -P1
# flows through the same forwarder (does a busy connection block accept?),
# once as it comes and once with the flow's two iperf3 endpoints under
# SCHED_IDLE (chrt; skipped where it is refused), so that their CPU on this
# machine's cores is told from the forwarder's.
#
# Environment knobs: SECS (iperf3 seconds, default 5), CONNRATE_SECS (3),
# REALM (path of a realm binary: adds its row), RESULTS_OUT (file for the
# raw figures, read by benches/goals.sh),
# PINGS (20000), IDLE (10000), IDLE_SECS (time allowed to open them, 30),
# WORKERS (connrate workers, 8), KEEP (set: keep the raw outputs in /tmp),
# OI_BASELINE (path of another oi binary, e.g. one built from an older commit:
# its rows are measured in the same run, for a before/after comparison),
# ORIGINAL_OXIDINETD (path of the original oxidinetd binary), ONLY (row names
# to measure, e.g. ONLY="oi-splice-on baseline-splice-on").
set -euo pipefail

SECS=${SECS:-5}
CONNRATE_SECS=${CONNRATE_SECS:-3}
PINGS=${PINGS:-20000}
IDLE=${IDLE:-10000}
WORKERS=${WORKERS:-8}
IDLE_SECS=${IDLE_SECS:-30}

cd "$(dirname "$0")/.."
for tool in iperf3 python3; do
    command -v "$tool" >/dev/null || { echo "compare.sh: $tool is required" >&2; exit 1; }
done
cargo build --release --examples --bins >&2
OI=${OI:-$PWD/target/release/oi}
LOADGEN=$PWD/target/release/examples/loadgen

BENCH=compare.sh
PORT_BASE=20000
. benches/lib.sh

# --- descriptors -------------------------------------------------------------
# A forwarder holding N idle connections needs 2N descriptors plus a few.
fit_descriptors "$IDLE" 100
IDLE=$FIT

free_port; ECHO_PORT=$PORT
free_port; IPERF_PORT=$PORT
"$LOADGEN" echo-server "127.0.0.1:$ECHO_PORT" 2>"$WORK/echo.err" &
PIDS+=($!)
iperf3 -s -p "$IPERF_PORT" >"$WORK/iperf-server.log" 2>&1 &
IPERF_SERVER=$!
PIDS+=($!)
wait_listening "$ECHO_PORT"
wait_listening "$IPERF_PORT"

CLK_TCK=$(getconf CLK_TCK)
# "tid name ticks" for every thread of a process.
thread_ticks() {
    local t
    for t in /proc/"$1"/task/*; do
        [[ -r $t/stat ]] || continue
        printf '%s %s %s\n' "${t##*/}" "$(tr ' ' '_' <"$t/comm" 2>/dev/null)" \
            "$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$t/stat" 2>/dev/null)" || true
    done
}
# "Gbit/s bytes" received in an iperf3 -J report, or "nan 0" if the run failed.
iperf_json() { python3 -c '
import json, sys
try:
    r = json.load(open(sys.argv[1]))["end"]["sum_received"]
    print(r["bits_per_second"] / 1e9, r["bytes"])
except Exception:
    print("nan 0")' "$1"; }
# iperf3 client with a hard time limit, so a wedged forwarder cannot hang the
# run; under SCHED_IDLE when IDLE_END is set for the call.
iperf() { ${IDLE_END:+chrt -i 0} timeout $((SECS + 30)) iperf3 -c 127.0.0.1 "$@"; }

RESULTS=$WORK/results
: >"$RESULTS"
record() { echo "$1 $2=$3" >>"$RESULTS"; }

# Runs every measurement against one forwarder.
#   $1 row name, $2 echo port, $3 iperf port, $4 forwarder pid (empty for direct)
measure() {
    local name=$1 eport=$2 iport=$3 pid=$4 out=$WORK/$1
    echo "== $name" >&2

    local before=0 after=0 bytes
    [[ -n $pid ]] && before=$(cpu_ticks "$pid")
    iperf -p "$iport" -t "$SECS" -P 1 -J >"$out.p1.json" || true
    read -r gbps bytes < <(iperf_json "$out.p1.json")
    record "$name" p1_gbps "$gbps"
    if [[ -n $pid ]]; then
        after=$(cpu_ticks "$pid")
        record "$name" cpu_s_per_gib_p1 "$(python3 -c "import sys; t,b=float(sys.argv[1]),float(sys.argv[2]); print(t/$CLK_TCK/(b/2**30) if b else float('nan'))" $((after - before)) "$bytes")"
    fi

    if [[ -n $pid ]]; then
        before=$(cpu_ticks "$pid")
        thread_ticks "$pid" >"$out.threads.before"
    fi
    iperf -p "$iport" -t "$SECS" -P 8 -J >"$out.p8.json" || true
    read -r gbps bytes < <(iperf_json "$out.p8.json")
    record "$name" p8_gbps "$gbps"
    if [[ -n $pid ]]; then
        after=$(cpu_ticks "$pid")
        thread_ticks "$pid" >"$out.threads.after"
        record "$name" cpu_s_per_gib "$(python3 -c "import sys; t,b=float(sys.argv[1]),float(sys.argv[2]); print(t/$CLK_TCK/(b/2**30) if b else float('nan'))" $((after - before)) "$bytes")"
        record "$name" threads "$(python3 -c '
import sys
def load(p): return {l.split()[0]: (l.split()[1], int(l.split()[2])) for l in open(p)}
b, a = load(sys.argv[1]), load(sys.argv[2])
print(",".join(f"{n}:{(t - b.get(tid, (n, 0))[1]) / int(sys.argv[3]):.2f}s" for tid, (n, t) in sorted(a.items())))
' "$out.threads.before" "$out.threads.after" "$CLK_TCK")"
    fi

    "$LOADGEN" pingpong "127.0.0.1:$eport" --count "$PINGS" --size 64 >"$out.ping" || true
    record "$name" p50_us "$(result "$out.ping" p50_us)"
    record "$name" p99_us "$(result "$out.ping" p99_us)"

    local rate_before=0
    [[ -n $pid ]] && rate_before=$(cpu_ticks "$pid")
    "$LOADGEN" connrate "127.0.0.1:$eport" --secs "$CONNRATE_SECS" --conns "$WORKERS" >"$out.rate" || true
    record "$name" conns_per_sec "$(result "$out.rate" conns_per_sec)"
    record "$name" conn_errors "$(result "$out.rate" errors)"
    if [[ -n $pid ]]; then
        # The forwarder's CPU (utime + stime) during the connection run, per connection made.
        record "$name" cpu_us_per_conn "$(python3 -c "import sys; t,n=float(sys.argv[1]),float(sys.argv[2] or 0); print(t/$CLK_TCK*1e6/n if n else float('nan'))" $(( $(cpu_ticks "$pid") - rate_before )) "$(result "$out.rate" ok)")"
    fi

    # Accept while busy: the same connection rate with an iperf3 -P1 flowing
    # through the same forwarder.
    iperf -p "$iport" -t $((CONNRATE_SECS + 2)) -P 1 -J >"$out.bg.json" 2>/dev/null &
    local bg=$!
    sleep 1 # let the bulk flow reach full speed
    "$LOADGEN" connrate "127.0.0.1:$eport" --secs "$CONNRATE_SECS" --conns "$WORKERS" >"$out.rate-busy" || true
    wait "$bg" || true
    record "$name" busy_conns_per_sec "$(result "$out.rate-busy" conns_per_sec)"
    read -r gbps _ < <(iperf_json "$out.bg.json")
    record "$name" busy_bg_gbps "$gbps"

    # The same with the flow's two endpoints under SCHED_IDLE (the client
    # started with chrt -i 0, the server switched for the run, every thread):
    # they get only CPU nothing else wants, as if they ran on other machines,
    # which is where a forwarder's bulk endpoints are. What is left of the
    # drop is the forwarder's own (benches/accept_busy.sh's ENDS=idle).
    if chrt -a -i -p 0 "$IPERF_SERVER" >/dev/null 2>&1; then
        IDLE_END=1 iperf -p "$iport" -t $((CONNRATE_SECS + 2)) -P 1 -J >"$out.bg-idle.json" 2>/dev/null &
        bg=$!
        sleep 1 # let the bulk flow reach full speed
        "$LOADGEN" connrate "127.0.0.1:$eport" --secs "$CONNRATE_SECS" --conns "$WORKERS" >"$out.rate-busy-idle" || true
        wait "$bg" || true
        chrt -a -o -p 0 "$IPERF_SERVER" >/dev/null 2>&1 || true
        record "$name" busy_idle_conns_per_sec "$(result "$out.rate-busy-idle" conns_per_sec)"
        read -r gbps _ < <(iperf_json "$out.bg-idle.json")
        record "$name" busy_idle_bg_gbps "$gbps"
    fi

    if [[ -n $pid ]]; then
        local rss0 rss1 fifo=$WORK/$name.fifo i
        rss0=$(rss_kib "$pid" || echo 0)
        mkfifo "$fifo"
        "$LOADGEN" idle "127.0.0.1:$eport" --count "$IDLE" --open-secs "$IDLE_SECS" <"$fifo" >"$out.idle" &
        local idler=$!
        exec 3>"$fifo"
        for i in $(seq $(( (IDLE_SECS + 15) * 10 ))); do
            grep -q '^result:' "$out.idle" 2>/dev/null && break
            kill -0 "$idler" 2>/dev/null || break
            sleep 0.1
        done
        rss1=$(rss_kib "$pid" || echo 0)
        record "$name" idle_held "$(result "$out.idle" held || echo 0)"
        record "$name" idle_open_secs "$(result "$out.idle" open_secs || echo nan)"
        record "$name" idle_rss_kib "$rss0:$rss1"
        exec 3>&-
        wait "$idler" || true
    fi
}

# Starts a forwarder in the background; sets FWD_PID.
start_forwarder() {
    local log=$1; shift
    "$@" >"$log" 2>&1 &
    FWD_PID=$!
    PIDS+=("$FWD_PID")
}
stop_forwarder() {
    kill "$FWD_PID" 2>/dev/null || true
    wait "$FWD_PID" 2>/dev/null || true
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
ROWS=(direct)
run_forwarder() {
    local name=$1; shift
    # ONLY="name name ...": measure just these rows (and their paired direct runs).
    [[ -z ${ONLY:-} || " $ONLY " == *" $name "* ]] || return 0
    measure "direct-before-$name" "$ECHO_PORT" "$IPERF_PORT" ""
    free_port; local echo_fwd=$PORT
    free_port; local iperf_fwd=$PORT
    # The same two rules for every forwarder (rinetd.conf syntax, and the
    # same in haproxy's: plain TCP mode, no health checks, no logging).
    printf '127.0.0.1 %s 127.0.0.1 %s\n127.0.0.1 %s 127.0.0.1 %s\n' \
        "$echo_fwd" "$ECHO_PORT" "$iperf_fwd" "$IPERF_PORT" >"$WORK/$name.conf"
    cat >"$WORK/$name.haproxy.cfg" <<HAPROXY
global
    maxconn $(( (HARD - 200) / 2 ))
defaults
    mode tcp
    timeout connect 10s
    timeout client 300s
    timeout server 300s
listen echo
    bind 127.0.0.1:$echo_fwd
    server echo 127.0.0.1:$ECHO_PORT
listen iperf
    bind 127.0.0.1:$iperf_fwd
    server iperf 127.0.0.1:$IPERF_PORT
HAPROXY
    # And in realm's (TOML, one endpoint per rule).
    printf '[[endpoints]]\nlisten = "127.0.0.1:%s"\nremote = "127.0.0.1:%s"\n\n[[endpoints]]\nlisten = "127.0.0.1:%s"\nremote = "127.0.0.1:%s"\n' \
        "$echo_fwd" "$ECHO_PORT" "$iperf_fwd" "$IPERF_PORT" >"$WORK/$name.realm.toml"
    # @HAPROXY@, @REALM@ and @CONF@ in the command stand for the three files;
    # without any, `-c FILE` is appended (oi's and rinetd's option).
    if [[ " $* " == *" @HAPROXY@ "* || " $* " == *" @CONF@ "* || " $* " == *" @REALM@ "* ]]; then
        local args=() a
        for a in "$@"; do
            a=${a//@HAPROXY@/$WORK/$name.haproxy.cfg}
            a=${a//@REALM@/$WORK/$name.realm.toml}
            args+=("${a//@CONF@/$WORK/$name.conf}")
        done
        start_forwarder "$WORK/$name.log" "${args[@]}"
    else
        start_forwarder "$WORK/$name.log" "$@" -c "$WORK/$name.conf"
    fi
    wait_listening "$echo_fwd"
    wait_listening "$iperf_fwd"
    measure "$name" "$echo_fwd" "$iperf_fwd" "$FWD_PID"
    stop_forwarder
    ROWS+=("$name")
}

SPLICE_FLAG=no
"$OI" --help | grep -q -- '--splice' && SPLICE_FLAG=yes
if [[ $SPLICE_FLAG == yes ]]; then
    run_forwarder "oi-splice-off" "$OI" --splice=off
    run_forwarder "oi-splice-on" "$OI" --splice=on
else
    run_forwarder "oi" "$OI"
fi
# OI_BASELINE=/path/to/an/older/oi adds its rows, for before/after in one run.
if [[ -n ${OI_BASELINE:-} ]]; then
    run_forwarder "baseline-splice-off" "$OI_BASELINE" --splice=off
    run_forwarder "baseline-splice-on" "$OI_BASELINE" --splice=on
fi
if command -v rinetd >/dev/null; then
    run_forwarder "rinetd" rinetd -f
fi
if command -v haproxy >/dev/null; then
    run_forwarder "haproxy" haproxy -db -f @HAPROXY@
fi
# REALM=/path/to/realm: realm (github.com/zhboner/realm; docs/performance.md
# compares with 2.9.4, built outside this tree, e.g. `cargo install --path . --root
# /tmp/realm --no-default-features --features default-ring` in its checkout).
if [[ -n ${REALM:-} && -x ${REALM:-} ]]; then
    run_forwarder "realm" "$REALM" -c @REALM@
elif [[ -n ${REALM:-} ]]; then
    echo "compare.sh: REALM=$REALM is not an executable; realm skipped" >&2
fi
# ORIGINAL_OXIDINETD=/path/to/oxidinetd: the original one-thread oxidinetd
# (build it from its public repository outside this tree; it reads rinetd.conf).
if [[ -n ${ORIGINAL_OXIDINETD:-} ]]; then
    run_forwarder "oxidinetd-original" "$ORIGINAL_OXIDINETD" --config @CONF@
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
# RESULTS_OUT=FILE: the raw figures ("row key=value" lines, plus the load),
# for benches/goals.sh.
if [[ -n ${RESULTS_OUT:-} ]]; then
    { cat "$RESULTS"; echo "load before=$LOAD_BEFORE"; echo "load after=$LOAD_AFTER"; } >"$RESULTS_OUT"
fi

python3 - "$RESULTS" "$IDLE" "$LOAD_BEFORE" "$LOAD_AFTER" "$SECS" "${ROWS[@]}" <<'EOF'
import math, sys
path, idle, load_before, load_after, secs, rows = (
    sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
res = {}
for line in open(path):
    name, kv = line.split(" ", 1)
    k, v = kv.rstrip("\n").split("=", 1)
    res.setdefault(name, {})[k] = v

def num(row, key):
    try:
        return float(res[row][key])
    except (KeyError, ValueError):
        return math.nan

# The direct row: the median of every direct run; each forwarder is compared
# with the direct run taken just before it.
d = "direct"
res[d] = {}
for key in {k for name, kv in res.items() if name.startswith("direct-") for k in kv}:
    vals = sorted(float(res[n][key]) for n in res if n.startswith("direct-") and key in res[n])
    res[d][key] = str(vals[len(vals) // 2]) if vals else "nan"
def ref(row, key):
    return num(d if row == d else f"direct-before-{row}", key)
def pct(row, key):
    v, r = num(row, key), ref(row, key)
    return "" if row == d or not r or math.isnan(v) else f" ({100 * v / r:.0f}%)"

print(f"| forwarder | iperf3 -P1 Gbit/s | -P8 Gbit/s | fwd CPU s/GiB (P1) | (P8) "
      f"| ping-pong p50 µs | p99 µs | conn/s | fwd CPU µs per conn | fwd RSS per idle conn |")
print("|---|---|---|---|---|---|---|---|---|---|")
for row in rows:
    cells = [row]
    for key in ("p1_gbps", "p8_gbps"):
        cells.append(f"{num(row, key):.2f}{pct(row, key)}")
    for key in ("cpu_s_per_gib_p1", "cpu_s_per_gib"):
        cells.append("—" if row == d else f"{num(row, key):.2f}")
    p50, p99 = num(row, "p50_us"), num(row, "p99_us")
    if row == d:
        cells += [f"{p50:.1f}", f"{p99:.1f}"]
    else:
        cells.append(f"{p50:.1f} (+{p50 - ref(row, 'p50_us'):.1f})")
        cells.append(f"{p99:.1f} ({p99 / ref(row, 'p99_us'):.1f}×)")
    rate = num(row, "conns_per_sec")
    errs = num(row, "conn_errors")
    cells.append(f"{rate:.0f}{pct(row, 'conns_per_sec')}" + ("" if errs == 0 else f", {errs:.0f} errors"))
    cells.append("—" if row == d else f"{num(row, 'cpu_us_per_conn'):.0f}")
    if row == d:
        cells.append("—")
    else:
        held = num(row, "idle_held")
        held = 0 if math.isnan(held) else int(held)
        rss0, rss1 = (int(x or 0) for x in res[row].get("idle_rss_kib", "0:0").split(":"))
        per = (rss1 - rss0) / held if held else math.nan
        cells.append(f"{per:.2f} KiB ({held}/{idle} held, opened in {num(row, 'idle_open_secs'):.1f} s)")
    print("| " + " | ".join(cells) + " |")

print()
print(f"iperf3 runs {secs} s each; ping-pong: 64 B request/response on one connection; "
      f"conn/s: connect, 64 B request/response, close. Percentages (and +µs, ×) are against "
      f"the direct run taken just before that forwarder; the direct row is the median of "
      f"{sum(n.startswith('direct-') for n in res)} direct runs. "
      f"Load average before {load_before}, after {load_after}.")
print()
for key, title in (("busy", "Accept while busy (conn/s with an iperf3 -P1 flowing through the same forwarder):"),
                   ("busy_idle", "The same, the flow's two iperf3 endpoints under SCHED_IDLE:")):
    if not any(f"{key}_conns_per_sec" in res.get(row, {}) for row in rows):
        continue
    print(title)
    for row in rows:
        busy, alone = num(row, f"{key}_conns_per_sec"), num(row, "conns_per_sec")
        vs_direct = "" if row == d else (
            f"; {100 * busy / ref(row, f'{key}_conns_per_sec'):.0f}% of direct under the same load")
        print(f"- {row}: {busy:.0f} conn/s ({100 * busy / alone:.0f}% of its rate without the bulk flow"
              f"{vs_direct}), bulk flow {num(row, f'{key}_bg_gbps'):.2f} Gbit/s")
    print()
print("Forwarder CPU per thread during iperf3 -P8:")
for row in rows:
    if row != d and "threads" in res.get(row, {}):
        print(f"- {row}: {res[row]['threads']}")
EOF
