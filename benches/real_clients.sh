#!/usr/bin/env bash
# benches/real_clients.sh: real request/response clients and servers from
# Debian through each forwarder, side by side in one run: requests per
# second, latency percentiles and the forwarder's CPU per request.
#
#   benches/real_clients.sh                          # 5 rounds: direct, oi, rinetd, haproxy
#   ROUNDS=7 SECS=8 benches/real_clients.sh
#   OI=target/dist/release/oi OI_BASELINE=/tmp/old/oi benches/real_clients.sh
#   WORKLOADS="http-keepalive http-close" ROUNDS=3 benches/real_clients.sh
#   OI_ARGS="--threads 1" benches/real_clients.sh    # extra words for oi (and the baseline)
#   ONLY="oi haproxy" benches/real_clients.sh        # direct and these only
#
# Servers (started here on free loopback ports, stopped by pid at exit):
# redis-server (`--save ''`, no persistence) and nginx-light (one worker,
# its own -c config and -p prefix in the work directory, a 612-byte page,
# no access log). Workloads, each against every target in turn within a
# round (the order rotated round by round, so no target always runs first):
#
#   redis            redis-benchmark -t get, 50 clients, REDIS_N requests
#   redis-p16        the same pipelined 16 deep (-P 16), REDIS_PN requests
#   http-keepalive   wrk -t2 -c50, SECS seconds, keep-alive
#   http-close       the same with `Connection: close`: a new connection
#                    (client and backend side) per request
#
# Per cell: requests/s (the client's), p50/p99/p999 in µs (wrk through its
# Lua `done()` hook, 99.9 included; redis-benchmark's CSV has none), and the forwarder's CPU µs per request
# (utime+stime from /proc/PID/stat over the cell, in clock ticks: 10 ms, so
# keep a cell at a second of forwarder CPU or more). Medians over rounds,
# then the issue's goal rows with a verdict:
#   requests/s >= haproxy's in each workload; p99 with 50 keep-alive HTTP
#   clients the lowest of oi, rinetd, haproxy; CPU µs per request with a new
#   connection per request <= rinetd's.
# The fourth goal (user-space instructions per lone UDP datagram <= rinetd's)
# is counted, not timed: callgrind over iperf3 -u through oi and rinetd, as
# benches/rtt_instructions.sh counts it, printed as the last goal row
# (UDP_INSTR=0 skips it; about a minute; needs valgrind and iperf3).
#
# Timed figures on a 2-core VM, where client, server and forwarder share
# the cores: rounds move by ±25%; judge by the medians of at least five
# rounds, nothing else running. Needs redis-server, redis-benchmark, wrk,
# nginx, python3; rinetd and haproxy when installed.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
SECS=${SECS:-5}
REDIS_N=${REDIS_N:-100000}
REDIS_PN=${REDIS_PN:-1000000}
CLIENTS=${CLIENTS:-50}
WORKLOADS=${WORKLOADS:-redis redis-p16 http-keepalive http-close}

cd "$(dirname "$0")/.."
for tool in redis-server redis-benchmark wrk nginx python3; do
    command -v "$tool" >/dev/null || { echo "real_clients.sh: $tool is required" >&2; exit 1; }
done
if [[ -z ${OI:-} ]]; then
    nice -n 10 cargo build --release --quiet --bin oi >&2
    OI=$PWD/target/release/oi
fi
read -r -a OI_EXTRA <<<"${OI_ARGS:-}"

BENCH=real_clients.sh PORT_BASE=34000
# shellcheck source=benches/lib.sh
. benches/lib.sh
# The ports lib.sh hands out sit below the ephemeral range; these must
# not collide with other benches running beside this one.
next_port=$(( 21000 + RANDOM % 4000 ))

# The servers.
free_port; REDIS=$PORT
redis-server --port "$REDIS" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no --protected-mode no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
free_port; HTTP=$PORT
mkdir -p "$WORK/nginx/html" "$WORK/nginx/logs" "$WORK/nginx/tmp"
head -c 612 /dev/zero | tr '\0' 'x' >"$WORK/nginx/html/index.html"
cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
master_process off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $WORK/nginx/tmp;
    proxy_temp_path $WORK/nginx/tmp;
    fastcgi_temp_path $WORK/nginx/tmp;
    uwsgi_temp_path $WORK/nginx/tmp;
    scgi_temp_path $WORK/nginx/tmp;
    server {
        listen 127.0.0.1:$HTTP;
        root $WORK/nginx/html;
    }
}
EOF
nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" >"$WORK/nginx.out" 2>&1 &
PIDS+=($!)
wait_listening "$REDIS"
wait_listening "$HTTP"

# The targets: direct (the servers' own ports), then each forwarder with
# two rules (redis, nginx), started once for the whole run.
NAMES=(direct) FPIDS=(0) RPORTS=("$REDIS") HPORTS=("$HTTP")
start() {
    local name=$1; shift
    free_port; local rp=$PORT
    free_port; local hp=$PORT
    printf '127.0.0.1 %s 127.0.0.1 %s\n127.0.0.1 %s 127.0.0.1 %s\n' \
        "$rp" "$REDIS" "$hp" "$HTTP" >"$WORK/$name.conf"
    {
        printf 'global\n    maxconn 8000\ndefaults\n    mode tcp\n    timeout connect 10s\n    timeout client 60s\n    timeout server 60s\n'
        printf 'listen redis\n    bind 127.0.0.1:%s\n    server s 127.0.0.1:%s\n' "$rp" "$REDIS"
        printf 'listen http\n    bind 127.0.0.1:%s\n    server s 127.0.0.1:%s\n' "$hp" "$HTTP"
    } >"$WORK/$name.haproxy.cfg"
    local a command=()
    for a in "$@"; do
        a=${a//@CONF@/$WORK/$name.conf}
        a=${a//@HAPROXY@/$WORK/$name.haproxy.cfg}
        command+=("$a")
    done
    "${command[@]}" >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    NAMES+=("$name") FPIDS+=($!) RPORTS+=("$rp") HPORTS+=("$hp")
    wait_listening "$rp"
    wait_listening "$hp"
}
# ONLY="oi haproxy" leaves the others out (direct stays: the ratios need it).
wanted() { [[ -z ${ONLY:-} || " $ONLY " == *" $1 "* ]]; }
if wanted oi; then start oi "$OI" -c @CONF@ "${OI_EXTRA[@]}"; fi
if [[ -n ${OI_BASELINE:-} ]] && wanted baseline; then
    start baseline "$OI_BASELINE" -c @CONF@ "${OI_EXTRA[@]}"
fi
if command -v rinetd >/dev/null && wanted rinetd; then start rinetd rinetd -f -c @CONF@; fi
if command -v haproxy >/dev/null && wanted haproxy; then start haproxy haproxy -db -f @HAPROXY@; fi

cat >"$WORK/pct.lua" <<'EOF'
done = function(summary, latency, requests)
    local e = summary.errors
    io.write(string.format("result: requests=%d usecs=%d errors=%d p50=%d p99=%d p999=%d\n",
        summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
        latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
EOF

# Runs workload $1 against target index $2 and prints
# "requests rps p50 p99 p999" (latencies in µs).
run_cell() {
    local workload=$1 k=$2 out=$WORK/cell.out
    case $workload in
    redis | redis-p16)
        local n=$REDIS_N pipe=1
        [[ $workload == redis-p16 ]] && n=$REDIS_PN pipe=16
        redis-benchmark -h 127.0.0.1 -p "${RPORTS[k]}" -c "$CLIENTS" -n "$n" -P "$pipe" \
            -t get -r 10000 --csv >"$out" 2>"$WORK/cell.err"
        # "GET","rps","avg","min","p50","p95","p99","max" (ms); no p999.
        awk -F'"' -v n="$n" '$2 == "GET" {
            printf "%d %s %.0f %.0f -\n", n, $4, $10 * 1000, $14 * 1000 }' "$out"
        ;;
    http-keepalive | http-close)
        local header=()
        [[ $workload == http-close ]] && header=(-H "Connection: close")
        wrk -t2 -c"$CLIENTS" -d"${SECS}s" "${header[@]}" -s "$WORK/pct.lua" \
            "http://127.0.0.1:${HPORTS[k]}/" >"$out" 2>"$WORK/cell.err"
        local requests usecs errors
        requests=$(result "$out" requests) usecs=$(result "$out" usecs) errors=$(result "$out" errors)
        (( errors == 0 )) || echo "real_clients.sh: $workload through ${NAMES[k]}: $errors errors" >&2
        awk -v r="$requests" -v u="$usecs" -v a="$(result "$out" p50)" \
            -v b="$(result "$out" p99)" -v c="$(result "$out" p999)" \
            'BEGIN { printf "%d %.0f %d %d %d\n", r, r / (u / 1e6), a, b, c }'
        ;;
    *) echo "real_clients.sh: unknown workload $workload" >&2; exit 1 ;;
    esac
}

# Warm-up: a short redis run through each target.
for k in "${!NAMES[@]}"; do
    redis-benchmark -h 127.0.0.1 -p "${RPORTS[k]}" -c "$CLIENTS" -n 20000 -t get -q >/dev/null 2>&1
done

TICK=$(getconf CLK_TCK)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
: >"$WORK/results"
n=${#NAMES[@]}
for ((round = 0; round < ROUNDS; round++)); do
    for workload in $WORKLOADS; do
        for ((j = 0; j < n; j++)); do
            k=$(( (j + round) % n ))
            pid=${FPIDS[k]} before=0
            (( pid == 0 )) || before=$(cpu_ticks "$pid")
            read -r requests rps p50 p99 p999 < <(run_cell "$workload" "$k")
            cpu=-
            if (( pid != 0 )); then
                cpu=$(awk -v t=$(( $(cpu_ticks "$pid") - before )) -v r="$requests" -v hz="$TICK" \
                    'BEGIN { printf "%.1f", t / hz * 1e6 / r }')
            fi
            echo "$round $workload ${NAMES[k]} $rps $p50 $p99 $p999 $cpu" >>"$WORK/results"
            printf 'round %d %-15s %-9s %9.0f req/s  p50 %6s  p99 %6s  p999 %6s µs  cpu %6s µs/req\n' \
                "$((round + 1))" "$workload" "${NAMES[k]}" "$rps" "$p50" "$p99" "$p999" "$cpu" >&2
        done
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$WORK/results" "${NAMES[*]}" "$WORKLOADS" <<'PY'
import statistics, sys
path, names, workloads = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
cells = {}
for line in open(path):
    rnd, w, t, rps, p50, p99, p999, cpu = line.split()
    c = cells.setdefault((w, t), {"rps": [], "p50": [], "p99": [], "p999": [], "cpu": []})
    c["rps"].append(float(rps)); c["p50"].append(float(p50)); c["p99"].append(float(p99))
    if p999 != "-":
        c["p999"].append(float(p999))
    if cpu != "-":
        c["cpu"].append(float(cpu))
def med(w, t, k):
    v = cells.get((w, t), {}).get(k, [])
    return statistics.median(v) if v else None
def fmt(v, spec="{:.0f}"):
    return "—" if v is None else spec.format(v)
rounds = max((len(c["rps"]) for c in cells.values()), default=0)
print(f"\nMedians of {rounds} interleaved rounds (latencies in µs)\n")
print("| workload | target | requests/s | % of direct | p50 | p99 | p999 | CPU µs/request |")
print("|---|---|---|---|---|---|---|---|")
for w in workloads:
    direct = med(w, "direct", "rps")
    for t in names:
        rps = med(w, t, "rps")
        pct = None if not (rps and direct) else 100 * rps / direct
        print(f"| {w} | {t} | {fmt(rps)} | {fmt(pct, '{:.0f}%')} | {fmt(med(w, t, 'p50'))} | "
              f"{fmt(med(w, t, 'p99'))} | {fmt(med(w, t, 'p999'))} | {fmt(med(w, t, 'cpu'), '{:.1f}')} |")
print("\nGoal rows\n")
print("| goal | oi | rinetd | haproxy | met |")
print("|---|---|---|---|---|")
def row(label, w, key, better, spec="{:.0f}", against=("haproxy",), ):
    v = {t: med(w, t, key) for t in ("oi", "rinetd", "haproxy")}
    if v["oi"] is None or any(v[a] is None for a in against):
        met = "—"
    else:
        met = "yes" if all(better(v["oi"], v[a]) for a in against) else "no"
    print(f"| {label} | {fmt(v['oi'], spec)} | {fmt(v['rinetd'], spec)} | {fmt(v['haproxy'], spec)} | {met} |")
for w in workloads:
    row(f"{w}: requests/s ≥ haproxy's", w, "rps", lambda a, b: a >= b)
if "http-keepalive" in workloads:
    row(f"http-keepalive: p99 µs lowest of the three", "http-keepalive", "p99",
        lambda a, b: a <= b, against=("rinetd", "haproxy"))
for w in ("http-close",):
    if w in workloads:
        row(f"{w}: CPU µs/request ≤ rinetd's", w, "cpu", lambda a, b: a <= b,
            "{:.1f}", against=("rinetd",))
PY

# The counted goal row: user-space instructions per lone UDP datagram, as
# benches/rtt_instructions.sh counts them (callgrind, every thread; iperf3 -u
# at 20 Mbit/s, 1,400 B datagrams, about one a wake-up under valgrind; 2 s and
# UDP_SECS s, the difference over the difference in datagrams received; a
# loss count iperf3 gets wrong through rinetd, -1 as 2^64-1, counts as none).
# Needs valgrind and iperf3; UDP_INSTR=0 skips it.
if [[ ${UDP_INSTR:-1} != 0 ]] && command -v valgrind >/dev/null && command -v iperf3 >/dev/null; then
    UDP_SECS=${UDP_SECS:-6}
    IPERF=$(kernel_port)
    iperf3 -s -p "$IPERF" >/dev/null 2>&1 &
    PIDS+=($!)
    wait_listening "$IPERF"
    # Prints "instructions datagrams" for $2 seconds through forwarder $1
    # (command: the rest, @CONF@ replaced).
    udp_count() {
        local name=$1 secs=$2 p a args=(); shift 2
        p=$(kernel_port)
        printf '127.0.0.1 %s 127.0.0.1 %s\n127.0.0.1 %s/udp 127.0.0.1 %s/udp\n' \
            "$p" "$IPERF" "$p" "$IPERF" >"$WORK/$name.udp.conf"
        for a in "$@"; do args+=("${a//@CONF@/$WORK/$name.udp.conf}"); done
        rm -f "$WORK"/cg.out.*
        valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out.%p" "${args[@]}" \
            >"$WORK/$name.udp.log" 2>&1 &
        local pid=$!
        wait_listening "$p" 30
        local got
        got=$(iperf3 -u -b 20M -l 1400 -c 127.0.0.1 -p "$p" -t "$secs" -J \
            | python3 -c 'import json,sys; s=json.load(sys.stdin)["end"]["sum"]; p, l = s["packets"], s["lost_packets"]; print(p - l if 0 <= l <= p else p)')
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        echo "$(cat "$WORK"/cg.out.* | awk '/^totals:/ { s += $2 } END { print s + 0 }') $got"
    }
    # Instructions per datagram through forwarder $1 (command: the rest),
    # "-" when the second run received no more than the first.
    udp_instr() {
        local name=$1 a b; shift
        a=$(udp_count "$name" 2 "$@")
        b=$(udp_count "$name" "$UDP_SECS" "$@")
        # shellcheck disable=SC2086 # two words each
        python3 -c 'import sys; i,d,j,e=map(int,sys.argv[1:]); print(round((j-i)/(e-d)) if e > d else "-")' $a $b
    }
    oi_udp=$(udp_instr oi "$OI" -c @CONF@ "${OI_EXTRA[@]}")
    rinetd_udp=-
    if command -v rinetd >/dev/null; then rinetd_udp=$(udp_instr rinetd rinetd -f -c @CONF@); fi
    met=—
    if [[ $oi_udp != - && $rinetd_udp != - ]]; then
        met=no; (( oi_udp <= rinetd_udp )) && met=yes
    fi
    printf '| UDP: user-space instructions per lone datagram ≤ rinetd'"'"'s | %s | %s | — | %s |\n' \
        "$oi_udp" "$rinetd_udp" "$met"
    echo "(callgrind; under valgrind on a loaded machine a wake-up finds more datagrams and the figure drops: judge it on a quiet one)"
fi
