#!/usr/bin/env bash
# Soak test: MINUTES (default 30) of mixed load through a release build of oi,
# recording descriptors, RSS and broken streams once a minute. Not run in CI.
#
#   MINUTES=30 benches/soak.sh
#
# Load, all on loopback, all at once:
# - bulk: iperf3 through oi if installed (20 s runs back to back), and
#   integrity streams (python: 4 MiB random each way through an echo backend,
#   sha256 compared) on two connections at a time;
# - short connections: loadgen connrate in 20 s rounds;
# - UDP: a python sender with 50 sources through a /udp rule to an echo;
# - resets: a python client that sets SO_LINGER 0 and closes mid-transfer;
# - backend flaps: a second echo backend killed and restarted every 15 s
#   (with a client of its own, whose failures while it is down are expected);
# - reloads: the configuration rewritten (a rule added or removed) and SIGHUP
#   every 5 s;
# - an EMFILE episode every 5 minutes (the first after 100 s): oi runs with `ulimit -n 1024`, a
#   client opens 900 connections (oi needs two descriptors each), holds them
#   10 s, then lets go.
# A broken stream is a sha256 mismatch, or an integrity connection failing
# outside an EMFILE episode (the echo backend never goes down). Failures
# during an episode are counted apart: oi cannot accept or connect then.
set -euo pipefail

MINUTES=${MINUTES:-30}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/oi-soak.XXXXXX)
OI="$ROOT/target/release/oi"
LOADGEN="$ROOT/target/release/examples/loadgen"
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -f "$W/flap.pid" ] && kill "$(cat "$W/flap.pid")" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT

(cd "$ROOT" && cargo build --release --bin oi --examples -q)

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

ECHO=$(free_port); FLAP=$(free_port); UECHO=$(free_port)
P_BULK=$(free_port); P_CONN=$(free_port); P_UDP=$(free_port); P_FLAP=$(free_port)
P_EXTRA=$(free_port); P_IPERF=$(free_port); IPERF_SRV=$(free_port)

"$LOADGEN" echo-server "127.0.0.1:$ECHO" >/dev/null 2>&1 & PIDS+=($!)
start_flap() { "$LOADGEN" echo-server "127.0.0.1:$FLAP" >/dev/null 2>&1 & echo $! >"$W/flap.pid"; }
start_flap

cat >"$W/clients.py" <<'EOF'
import hashlib, os, socket, struct, sys, threading, time
W = sys.argv[1]; kind = sys.argv[2]; port = int(sys.argv[3])
deadline = time.time() + float(sys.argv[4])
def count(name):
    with open(os.path.join(W, name), "a") as f:
        f.write("%d\n" % time.time())
def episode():
    return os.path.exists(os.path.join(W, "episode"))
def integrity():
    while time.time() < deadline:
        data = os.urandom(4 << 20)
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            got = bytearray()
            def reader():
                while True:
                    b = s.recv(1 << 16)
                    if not b: break
                    got.extend(b)
            t = threading.Thread(target=reader); t.start()
            s.sendall(data); s.shutdown(socket.SHUT_WR); t.join(60); s.close()
            if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
                count("broken" if len(got) == len(data) or not episode() else "episode_fail")
            else:
                count("ok")
        except OSError:
            count("episode_fail" if episode() else "broken")
            time.sleep(0.2)
def resets():
    while time.time() < deadline:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(os.urandom(256 << 10))
            s.recv(1000)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            count("resets")
        except OSError:
            time.sleep(0.1)
def udp():
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(50)]
    for s in socks: s.settimeout(0.5)
    while time.time() < deadline:
        for s in socks:
            try:
                s.sendto(os.urandom(512), ("127.0.0.1", port)); s.recv(2048)
                count("udp_ok")
            except OSError:
                count("udp_lost")
def flap():
    while time.time() < deadline:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"x" * 1000); s.recv(1000); s.close()
        except OSError:
            pass
        time.sleep(0.05)
def udp_echo():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", port))
    while True:
        b, a = s.recvfrom(65536); s.sendto(b, a)
{"integrity": integrity, "resets": resets, "udp": udp, "flap": flap, "udp_echo": udp_echo}[kind]()
EOF

SECS=$((MINUTES * 60))
python3 "$W/clients.py" "$W" udp_echo "$UECHO" 0 & PIDS+=($!)

conf() {
    cat <<EOF
127.0.0.1 $P_BULK 127.0.0.1 $ECHO
127.0.0.1 $P_CONN 127.0.0.1 $ECHO
127.0.0.1 $P_UDP/udp 127.0.0.1 $UECHO/udp
127.0.0.1 $P_FLAP 127.0.0.1 $FLAP
127.0.0.1 $P_IPERF 127.0.0.1 $IPERF_SRV
logfile $W/oi.log
EOF
    if [ "$1" = extra ]; then echo "127.0.0.1 $P_EXTRA 127.0.0.1 $ECHO"; fi
}
conf plain >"$W/oi.conf"
(ulimit -n 1024; exec "$OI" -c "$W/oi.conf" 2>"$W/oi.err") & OIPID=$!; PIDS+=($OIPID)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$P_BULK") 2>/dev/null && break; sleep 0.1; done

for i in 1 2; do python3 "$W/clients.py" "$W" integrity "$P_BULK" "$SECS" & PIDS+=($!); done
python3 "$W/clients.py" "$W" resets "$P_BULK" "$SECS" & PIDS+=($!)
python3 "$W/clients.py" "$W" udp "$P_UDP" "$SECS" & PIDS+=($!)
python3 "$W/clients.py" "$W" flap "$P_FLAP" "$SECS" & PIDS+=($!)
END=$(( $(date +%s) + SECS ))

( while [ "$(date +%s)" -lt "$END" ]; do
      "$LOADGEN" connrate "127.0.0.1:$P_CONN" --secs 20 --conns 4 >>"$W/connrate.out" 2>&1 || true
  done ) & PIDS+=($!)
if command -v iperf3 >/dev/null; then
    iperf3 -s -p "$IPERF_SRV" >/dev/null 2>&1 & PIDS+=($!)
    ( while [ "$(date +%s)" -lt "$END" ]; do
          iperf3 -c 127.0.0.1 -p "$P_IPERF" -t 20 >>"$W/iperf.out" 2>&1 || echo "iperf failed" >>"$W/iperf.out"
      done ) & PIDS+=($!)
fi
( n=0; while [ "$(date +%s)" -lt "$END" ]; do
      sleep 15; kill "$(cat "$W/flap.pid")" 2>/dev/null || true; sleep 3; start_flap
  done ) & PIDS+=($!)
( n=0; while [ "$(date +%s)" -lt "$END" ]; do
      sleep 5; n=$((n + 1))
      if [ $((n % 2)) = 0 ]; then conf extra; else conf plain; fi >"$W/oi.conf.new"
      mv "$W/oi.conf.new" "$W/oi.conf"; kill -HUP "$OIPID"; echo >>"$W/reloads"
  done ) & PIDS+=($!)
( while [ "$(date +%s)" -lt "$END" ]; do
      sleep 100; touch "$W/episode"
      (sleep 10) | "$LOADGEN" idle "127.0.0.1:$P_CONN" --count 900 >>"$W/emfile.out" 2>&1 || true
      sleep 5; rm -f "$W/episode"; echo >>"$W/episodes"; sleep 180
  done ) & PIDS+=($!)

lines() { [ -f "$W/$1" ] && wc -l <"$W/$1" || echo 0; }
sample() {
    printf "%6s %6s %9s %8s %7s %12s %9s %7s %7s\n" "$1" \
        "$(ls /proc/$OIPID/fd | wc -l)" \
        "$(awk '/VmRSS/ {print $2}' /proc/$OIPID/status)" \
        "$(lines ok)" "$(lines broken)" "$(lines episode_fail)" \
        "$(lines resets)" "$(lines reloads)" "$(lines episodes)" | tee -a "$W/table"
}
printf "%6s %6s %9s %8s %7s %12s %9s %7s %7s\n" minute fds rss_kib streams broken episode_fail resets reloads emfile | tee "$W/table"
sample 0
for m in $(seq 1 "$MINUTES"); do
    sleep 60
    kill -0 "$OIPID" || { echo "oi died"; exit 1; }
    sample "$m"
done
sleep 5
echo
echo "== oi $OI, ${MINUTES} min, work dir $W"
cat "$W/table"
echo "UDP: $(lines udp_ok) replies, $(lines udp_lost) lost (timeouts during reloads/episodes included)"
echo "connrate rounds: $(grep -c '^result' "$W/connrate.out" || true); errors: $(grep '^result' "$W/connrate.out" | sed 's/.*errors=//' | awk '{s+=$1} END {print s+0}')"
[ -f "$W/iperf.out" ] && echo "iperf3 runs: $(grep -c receiver "$W/iperf.out" || true), failed: $(grep -c 'iperf failed' "$W/iperf.out" || true)"
echo "EMFILE episodes: $(grep '^result' "$W/emfile.out" 2>/dev/null | tr '\n' ' ')"
echo "oi warnings: $(grep -c WARN "$W/oi.err" || true), errors: $(grep -c ERROR "$W/oi.err" || true)"
kill -TERM "$OIPID"
