#!/usr/bin/env bash
# benches/syscalls.sh: system calls per forwarded connection and per 64-byte
# round trip, counted with `strace -f -c` — a figure that does not move with
# machine noise the way timings do, so a regression shows on a busy machine.
#
#   benches/syscalls.sh                      # oi at 2 threads, rinetd, haproxy (if installed)
#   THREADS="1 2 16 64" benches/syscalls.sh  # oi at each thread count
#   OI_BASELINE=/path/to/old/oi benches/syscalls.sh   # adds an older build, for before/after
#   REALM=/tmp/realm/bin/realm benches/syscalls.sh     # adds realm
#   RESULTS_OUT=FILE: also writes "row key=value" lines (benches/goals.sh reads them)
#   OI=target/dist/release/oi benches/syscalls.sh     # the shipped, profile-guided build (dist/pgo-build.sh)
#
# For each forwarder: one strace session with ROUNDS round trips of 64 bytes on
# one connection (loadgen pingpong), one with CONN_SECS seconds of connect +
# 64 B request/response + close from WORKERS clients (loadgen connrate), and
# one with no load at all (start, listen, stop), whose calls are taken off
# the other two: what start-up and shutdown cost is not a cost per round
# trip or per connection (oi's start-up is about 500 calls, 0.1 per round
# trip over 5,000; rinetd's about 60), and from the round trips one
# connection's calls (that session's connection: accept, connect, close...). The
# table shows every system call divided by round trips or by connections,
# the calls that failed, and failed accept4 calls per connection (each wake-up
# of a thread that finds the accept queue already empty costs one).
# Needs strace and python3; rinetd and haproxy are used when installed.
set -euo pipefail

ROUNDS=${ROUNDS:-5000}
CONN_SECS=${CONN_SECS:-3}
WORKERS=${WORKERS:-4}
THREADS=${THREADS:-2}

cd "$(dirname "$0")/.."
for tool in strace python3; do
    command -v "$tool" >/dev/null || { echo "syscalls.sh: $tool is required" >&2; exit 1; }
done
cargo build --release --examples --bins >&2
OI=${OI:-$PWD/target/release/oi}
LOADGEN=$PWD/target/release/examples/loadgen

BENCH=syscalls.sh PORT_BASE=28000
# shellcheck source=benches/lib.sh
. benches/lib.sh

free_port; BACKEND=$PORT
"$LOADGEN" echo-server "127.0.0.1:$BACKEND" >"$WORK/echo.log" 2>&1 &
PIDS+=($!)
wait_listening "$BACKEND"

# Starts forwarder "$name" (remaining args: the command; @CONF@ is replaced by
# its configuration file) under strace, runs load "$load", stops it, and
# leaves strace's summary in $WORK/$name.$load.strace.
measure() {
    local name=$1 load=$2; shift 2
    free_port; local port=$PORT
    forwarder "$name" "$port" "$BACKEND" "$@"
    strace -f -c -o "$WORK/$name.$load.strace" "${COMMAND[@]}" >"$WORK/$name.$load.out" 2>&1 &
    local pid=$!
    wait_listening "$port"
    case $load in
        idle) ;;
        rtt) "$LOADGEN" pingpong "127.0.0.1:$port" --count "$ROUNDS" --warmup 0 --size 64 \
                 >"$WORK/$name.$load.load" ;;
        conn) "$LOADGEN" connrate "127.0.0.1:$port" --secs "$CONN_SECS" --conns "$WORKERS" \
                 >"$WORK/$name.$load.load" ;;
    esac
    # Stop the traced forwarder (strace's child); strace writes its summary once it exits.
    pkill -TERM -P "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    ROWS+=("$name")
}

ROWS=()
for t in $THREADS; do
    for load in idle rtt conn; do measure "oi-t$t" "$load" "$OI" --threads "$t" -c @CONF@; done
done
if [[ -n ${OI_BASELINE:-} ]]; then
    for load in idle rtt conn; do measure "baseline-t2" "$load" "$OI_BASELINE" --threads 2 -c @CONF@; done
fi
if command -v rinetd >/dev/null; then
    for load in idle rtt conn; do measure "rinetd" "$load" rinetd -f -c @CONF@; done
fi
if command -v haproxy >/dev/null; then
    for load in idle rtt conn; do measure "haproxy" "$load" haproxy -db -f @HAPROXY@; done
fi
# REALM=/path/to/realm adds realm (see benches/compare.sh for building 2.9.4).
if [[ -n ${REALM:-} && -x ${REALM:-} ]]; then
    for load in idle rtt conn; do measure "realm" "$load" "$REALM" -c @REALM@; done
elif [[ -n ${REALM:-} ]]; then
    echo "syscalls.sh: REALM=$REALM is not an executable; realm skipped" >&2
fi

python3 - "$WORK" "$ROUNDS" "${RESULTS_OUT:-}" "${ROWS[@]}" <<'EOF'
import re, sys
work, rounds, out, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], list(dict.fromkeys(sys.argv[4:]))
raw = []

def summary(path):
    """{syscall: (calls, errors)} from an `strace -c` table."""
    out = {}
    try:
        text = open(path).read()
    except OSError:
        return out
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and re.match(r"^[\d.]+$", f[0]) and f[-1] != "total":
            calls = int(f[3])
            errors = int(f[4]) if len(f) == 6 else 0
            out[f[-1]] = (calls, errors)
    return out

def result(path, key):
    try:
        for line in open(path):
            if line.startswith("result:"):
                kv = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
                return float(kv.get(key, "nan"))
    except OSError:
        pass
    return float("nan")

print(f"| forwarder | syscalls per round trip | failed | syscalls per connection | failed | failed accept4 per connection | top calls per connection |")
print("|---|---|---|---|---|---|---|")
for name in rows:
    idle = summary(f"{work}/{name}.idle.strace")
    # Each call's count less the same call's in the session with no load.
    less_idle = lambda table: {k: (max(c - idle.get(k, (0, 0))[0], 0), max(e - idle.get(k, (0, 0))[1], 0))
                               for k, (c, e) in table.items()}
    rtt = less_idle(summary(f"{work}/{name}.rtt.strace"))
    conn = less_idle(summary(f"{work}/{name}.conn.strace"))
    conns = result(f"{work}/{name}.conn.load", "ok")
    if conns != conns or conns == 0:
        conns = result(f"{work}/{name}.conn.load", "connections")
    per = lambda table, n: sum(c for c, _ in table.values()) / n if n else float("nan")
    fail = lambda table, n: sum(e for _, e in table.values()) / n if n else float("nan")
    acc = conn.get("accept4", conn.get("accept", (0, 0)))[1] / conns if conns else float("nan")
    top = sorted(conn.items(), key=lambda kv: -kv[1][0])[:5]
    tops = ", ".join(f"{k} {c / conns:.1f}" for k, (c, _) in top) if conns else ""
    # The round-trip session also opened and closed its one connection:
    # take that connection's calls (the connection session's figure) off too.
    per_rtt = (sum(c for c, _ in rtt.values()) - per(conn, conns)) / rounds if rounds else float("nan")
    print(f"| {name} | {per_rtt:.2f} | {fail(rtt, rounds):.1f} | {per(conn, conns):.1f} | {fail(conn, conns):.1f} | {acc:.2f} | {tops} |")
    raw += [f"{name} syscalls_per_rtt={per_rtt}", f"{name} syscalls_per_conn={per(conn, conns)}"]
if out:
    open(out, "w").write("\n".join(raw) + "\n")
print()
print(f"round trips: {rounds} of 64 B on one connection (no warm-up); connections: loadgen connrate, see *.conn.load;")
print("each less the calls of the same forwarder started and stopped with no load; round trips also")
print("less one connection's calls (the round-trip session opens and closes one)")
EOF
