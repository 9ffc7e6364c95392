#!/usr/bin/env bash
# benches/tls.sh: TLS ended by oi, stunnel4 and haproxy, side by side in one
# run, with the same certificate (ECDSA P-256, made here by openssl), the
# same client (examples/loadgen, rustls: TLS 1.3, X25519, AES-128-GCM) and
# the same plain backends (loadgen's echo server for handshakes, its sink
# for bulk). Printed as one markdown table with oi/haproxy and oi/stunnel.
#
#   benches/tls.sh                           # builds oi and loadgen (release)
#   OI=target/dist/release/oi benches/tls.sh # another oi; loadgen is still built
#
# Per forwarder, each round (the forwarders in turn within a round, so a
# change in the machine's load falls on all of them):
#   - full handshakes: CONNS clients at once, each connect, handshake, one
#     byte to the echo backend and back, close_notify, close, for SECS s;
#     handshakes per second, and per CPU second of the forwarder process
#     (utime + stime from /proc/PID/stat, all its threads, before and after);
#   - resumed handshakes: the same, each client offering the tickets it was
#     given (its own store); per second, per CPU second, and the fraction
#     that actually resumed (a forwarder that gives no tickets shows 0);
#   - bulk: 1 stream of BYTES, then 8 streams of BYTES/8 each, uploaded
#     through the forwarder to the sink, which confirms it has every byte
#     (the forwarder decrypts); then the same downloaded from the sink (the
#     forwarder encrypts); Gbit/s of plaintext and the forwarder's CPU
#     seconds per GiB.
# ROUNDS rounds (default 3), each cell the median (the rounds in brackets).
# Nothing is pinned: forwarders, clients and backends share the machine's
# cores as the scheduler places them, the same for every forwarder.
#
# Knobs: ROUNDS (3), SECS (5), CONNS (8), BYTES (1 GiB), KEEP (set: keep the
# work directory), ONLY (forwarders to run, e.g. ONLY="oi haproxy"),
# OI_BASELINE (path of another oi: its column too, for before/after).
# Needs openssl, python3; stunnel4 and haproxy when installed.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
CONNS=${CONNS:-8}
BYTES=${BYTES:-$((1 << 30))}

cd "$(dirname "$0")/.."
for tool in openssl python3; do
    command -v "$tool" >/dev/null || { echo "tls.sh: $tool is required" >&2; exit 1; }
done
if [[ -z ${OI:-} ]]; then
    cargo build --release --bin oi >&2
    OI=$PWD/target/release/oi
fi
cargo build --release --example loadgen >&2
LOADGEN=$PWD/target/release/examples/loadgen

BENCH=tls.sh
PORT_BASE=24000
. benches/lib.sh
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# --- the certificate: a CA, and a leaf for "localhost" it signs -------------
(
    cd "$WORK"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=bench-ca -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj /CN=localhost -keyout leaf.key -out leaf.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost\n' >leaf.ext
    openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile leaf.ext -out leaf.pem 2>/dev/null
    cat leaf.pem leaf.key >leaf.combined.pem # haproxy's crt: chain and key in one
    chmod 600 ./*.key leaf.combined.pem
)
CERT=$WORK/leaf.pem KEY=$WORK/leaf.key

# --- backends ---------------------------------------------------------------
free_port; ECHO_PORT=$PORT
free_port; SINK_PORT=$PORT
"$LOADGEN" echo-server "127.0.0.1:$ECHO_PORT" 2>"$WORK/echo.err" &
PIDS+=($!)
"$LOADGEN" sink "127.0.0.1:$SINK_PORT" 2>"$WORK/sink.err" &
PIDS+=($!)
wait_listening "$ECHO_PORT"
wait_listening "$SINK_PORT"

# --- forwarders: two TLS listeners each, handshakes to echo, bulk to sink ----
declare -A HS BULK FWD
start() {
    local name=$1; shift
    [[ -z ${ONLY:-} || " $ONLY " == *" $name "* ]] || return 0
    free_port; local hs=$PORT
    free_port; local bulk=$PORT
    local conf
    case $name in
        oi | baseline)
            conf=$WORK/$name.conf
            printf '127.0.0.1 %s 127.0.0.1 %s [tls-cert=%s,tls-key=%s]\n' "$hs" "$ECHO_PORT" "$CERT" "$KEY" >"$conf"
            printf '127.0.0.1 %s 127.0.0.1 %s [tls-cert=%s,tls-key=%s]\n' "$bulk" "$SINK_PORT" "$CERT" "$KEY" >>"$conf"
            "$@" -c "$conf" >"$WORK/$name.log" 2>&1 &
            ;;
        stunnel)
            conf=$WORK/stunnel.conf
            # debug = 3: errors only, no line per connection (nor has oi or haproxy here).
            cat >"$conf" <<EOF
foreground = yes
pid =
debug = 3
[hs]
accept = 127.0.0.1:$hs
connect = 127.0.0.1:$ECHO_PORT
cert = $CERT
key = $KEY
sslVersionMin = TLSv1.3
curves = X25519
[bulk]
accept = 127.0.0.1:$bulk
connect = 127.0.0.1:$SINK_PORT
cert = $CERT
key = $KEY
sslVersionMin = TLSv1.3
curves = X25519
EOF
            "$@" "$conf" >"$WORK/$name.log" 2>&1 &
            ;;
        haproxy)
            conf=$WORK/haproxy.cfg
            local bind="ssl crt $WORK/leaf.combined.pem ssl-min-ver TLSv1.3 curves X25519"
            cat >"$conf" <<EOF
global
    maxconn 4000
defaults
    mode tcp
    timeout connect 10s
    timeout client 60s
    timeout server 60s
listen hs
    bind 127.0.0.1:$hs $bind
    server echo 127.0.0.1:$ECHO_PORT
listen bulk
    bind 127.0.0.1:$bulk $bind
    server sink 127.0.0.1:$SINK_PORT
EOF
            "$@" -db -f "$conf" >"$WORK/$name.log" 2>&1 &
            ;;
    esac
    FWD[$name]=$!
    PIDS+=($!)
    HS[$name]=$hs BULK[$name]=$bulk
    wait_listening "$hs"
    wait_listening "$bulk"
    # Warm-up: the first handshakes (page faults, lazy set-up) are not measured.
    "$LOADGEN" tls-handshakes "127.0.0.1:$hs" --ca "$WORK/ca.pem" --secs 1 --conns "$CONNS" --resume >/dev/null
    NAMES+=("$name")
}
NAMES=()
start oi "$OI"
[[ -n ${OI_BASELINE:-} ]] && start baseline "$OI_BASELINE"
command -v stunnel4 >/dev/null && start stunnel stunnel4
command -v haproxy >/dev/null && start haproxy haproxy

CLK_TCK=$(getconf CLK_TCK)
RESULTS=$WORK/results
: >"$RESULTS"
record() { echo "$1 $2 $3=$4" >>"$RESULTS"; }

# Runs loadgen ($3..) against forwarder $1 in round $2, recording each
# key=value of its result line prefixed by $PREFIX, and the forwarder's CPU
# seconds as ${PREFIX}cpu_s.
measure() {
    local name=$1 round=$2; shift 2
    local pid=${FWD[$name]} out=$WORK/$name.$round.$PREFIX
    local before after kv
    before=$(cpu_ticks "$pid")
    "$LOADGEN" "$@" >"$out" || true
    after=$(cpu_ticks "$pid")
    kill -0 "$pid" 2>/dev/null || { echo "tls.sh: $name died; its log:" >&2; cat "$WORK/$name.log" >&2; exit 1; }
    for kv in $(grep '^result:' "$out" | cut -d' ' -f2-); do
        record "$name" "$round" "$PREFIX${kv%%=*}" "${kv#*=}"
    done
    record "$name" "$round" "${PREFIX}cpu_s" "$(python3 -c "print(($after - $before) / $CLK_TCK)")"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
    for name in "${NAMES[@]}"; do
        echo "== round $round: $name" >&2
        ca=(--ca "$WORK/ca.pem")
        PREFIX=full_ measure "$name" "$round" tls-handshakes "127.0.0.1:${HS[$name]}" "${ca[@]}" --secs "$SECS" --conns "$CONNS"
        PREFIX=res_ measure "$name" "$round" tls-handshakes "127.0.0.1:${HS[$name]}" "${ca[@]}" --secs "$SECS" --conns "$CONNS" --resume
        PREFIX=p1_ measure "$name" "$round" tls-bulk "127.0.0.1:${BULK[$name]}" "${ca[@]}" --bytes "$BYTES" --streams 1
        PREFIX=p8_ measure "$name" "$round" tls-bulk "127.0.0.1:${BULK[$name]}" "${ca[@]}" --bytes $((BYTES / 8)) --streams 8
        PREFIX=d1_ measure "$name" "$round" tls-bulk "127.0.0.1:${BULK[$name]}" "${ca[@]}" --bytes "$BYTES" --streams 1 --down
        PREFIX=d8_ measure "$name" "$round" tls-bulk "127.0.0.1:${BULK[$name]}" "${ca[@]}" --bytes $((BYTES / 8)) --streams 8 --down
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
[[ -n ${RESULTS_OUT:-} ]] && cp "$RESULTS" "$RESULTS_OUT"

python3 - "$RESULTS" "$ROUNDS" "$SECS" "$CONNS" "$BYTES" "$LOAD_BEFORE" "$LOAD_AFTER" "$(nproc)" "${NAMES[@]}" <<'EOF'
import math, statistics, sys
path, rounds, secs, conns, nbytes, load_before, load_after, cpus = sys.argv[1:9]
names = sys.argv[9:]
raw = {}
for line in open(path):
    name, rnd, kv = line.split(" ", 2)
    k, v = kv.rstrip("\n").split("=", 1)
    raw.setdefault(name, {}).setdefault(k, {})[int(rnd)] = v

def per_round(name, fn):
    """fn(values of one round) for each round, in order."""
    out = []
    for r in range(1, int(rounds) + 1):
        try:
            out.append(fn(lambda k: float(raw[name][k][r])))
        except (KeyError, ValueError, ZeroDivisionError):
            out.append(math.nan)
    return out

GIB = 2 ** 30
rows = [
    ("full handshakes/s", "higher", lambda g: g("full_per_sec")),
    ("full handshakes per forwarder CPU s", "higher", lambda g: g("full_ok") / g("full_cpu_s")),
    ("resumed-run handshakes/s", "higher", lambda g: g("res_per_sec")),
    ("fraction resumed", "", lambda g: g("res_resumed_fraction")),
    ("resumed-run handshakes per forwarder CPU s", "higher", lambda g: g("res_ok") / g("res_cpu_s")),
    ("upload 1 stream, Gbit/s", "higher", lambda g: g("p1_gbps")),
    ("upload 1 stream, forwarder CPU s/GiB", "lower", lambda g: g("p1_cpu_s") / (g("p1_bytes") / GIB)),
    ("upload 8 streams, Gbit/s", "higher", lambda g: g("p8_gbps")),
    ("upload 8 streams, forwarder CPU s/GiB", "lower", lambda g: g("p8_cpu_s") / (g("p8_bytes") / GIB)),
    ("download 1 stream, Gbit/s", "higher", lambda g: g("d1_gbps")),
    ("download 1 stream, forwarder CPU s/GiB", "lower", lambda g: g("d1_cpu_s") / (g("d1_bytes") / GIB)),
    ("download 8 streams, Gbit/s", "higher", lambda g: g("d8_gbps")),
    ("download 8 streams, forwarder CPU s/GiB", "lower", lambda g: g("d8_cpu_s") / (g("d8_bytes") / GIB)),
]

def fmt(v):
    if math.isnan(v):
        return "—"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"

def median(vals):
    vals = [v for v in vals if not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan

others = [n for n in ("haproxy", "stunnel") if n in names]
head = ["", *names, *[f"oi/{o}" for o in others]]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for title, better, fn in rows:
    cells = [title + (f" ({better} is better)" if better else "")]
    meds = {}
    for n in names:
        vals = per_round(n, fn)
        meds[n] = median(vals)
        cells.append(f"{fmt(meds[n])} ({' / '.join(fmt(v) for v in vals)})")
    for o in others:
        a, b = meds.get("oi", math.nan), meds[o]
        cells.append("—" if not b or math.isnan(a) or math.isnan(b) else f"{a / b:.2f}")
    print("| " + " | ".join(cells) + " |")
errors = {n: sum(int(float(v)) for k, by in raw.get(n, {}).items() if k.endswith("errors") for v in by.values()) for n in names}
print()
print(f"{rounds} rounds, each cell the median (each round). Handshakes: {conns} clients at once, "
      f"{secs} s per run, each connection a new TCP connection, TLS 1.3, X25519, AES-128-GCM, "
      f"ECDSA P-256 certificate, one byte echoed, close_notify. Bulk: {int(nbytes) / GIB:g} GiB "
      f"through 1 stream, and {int(nbytes) / GIB / 8:g} GiB through each of 8 streams, client to sink "
      f"(upload: the forwarder decrypts) and sink to client (download: it encrypts). "
      f"Forwarder CPU: utime + stime of its process. Nothing pinned; {cpus} CPUs shared by "
      f"clients, backends and forwarder. Load average before {load_before}, after {load_after}. "
      f"Errors: " + ", ".join(f"{n} {e}" for n, e in errors.items()) + ".")
EOF
