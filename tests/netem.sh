#!/usr/bin/env bash
# Real network faults through oi: client, oi and backend in three network
# namespaces joined by veth pairs, with tc netem loss, delay, reordering and
# (in a second run) duplication on both links, in both directions.
#
#   sudo tests/netem.sh                       # debug binary, 4 MiB each way
#   sudo OI_BIN=target/release/oi OI_NETEM_MIB=16 tests/netem.sh
#
# Checks, with --splice=on and --splice=off:
#   - upload: the client sends OI_NETEM_MIB MiB, shuts down writing, and still
#     receives the backend's sha256 of what arrived (half-close, client side);
#   - download: the backend sends a sha256 header and OI_NETEM_MIB MiB, shuts
#     down writing; the client checks the data, then sends an acknowledgement
#     the backend must still receive (half-close, backend side).
#
# Exit status: 0 all passed, 1 a check failed, 77 skipped (not root, or the
# kernel has no netem). On kernels without netem, and in CI, the same faults
# and more go through oi over the user-space fault link of tests/faults
# (`cargo test --test integration -- --ignored --nocapture faults::`), which needs only TUN.
#
# Every wait is bounded; everything created is removed on exit.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
oi="${OI_BIN:-$repo/target/debug/oi}"
mib="${OI_NETEM_MIB:-4}"
# Seconds one transfer may take before it counts as hung.
transfer_timeout="${OI_NETEM_TIMEOUT:-300}"
netem_loss="loss 1%"
netem_delay="delay 50ms 10ms distribution normal"
netem_reorder="reorder 1% 50%"
netem_dup="duplicate 1%"

log() { printf 'netem.sh: %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
    log "skipped: needs root (network namespaces and tc)"
    exit 77
fi
for tool in ip tc python3 timeout; do
    command -v "$tool" >/dev/null || { log "skipped: '$tool' not found (apt-get install -y iproute2)"; exit 77; }
done
if [[ ! -x "$oi" ]]; then
    log "building $oi"
    (cd "$repo" && cargo build --bin oi $([[ "$oi" == */release/oi ]] && echo --release))
fi

# Unique names, so parallel runs and leftovers of a killed run do not collide.
tag="oin$$"
ns_c="${tag}c" ns_o="${tag}o" ns_b="${tag}b"
work="$(mktemp -d "/tmp/${tag}.XXXXXX")"
pids=()

cleanup() {
    local rc=$?
    local ns pid
    # Everything still running inside our namespaces is ours (peers, oi).
    for ns in "$ns_c" "$ns_o" "$ns_b"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill "$pid" 2>/dev/null || true
        done
    done
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    for ns in "$ns_c" "$ns_o" "$ns_b"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# client 10.0.1.1 --c0/o0-- 10.0.1.2 oi 10.0.2.1 --o1/b0-- 10.0.2.2 backend
setup_namespaces() {
    for ns in "$ns_c" "$ns_o" "$ns_b"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
    done
    ip link add c0 netns "$ns_c" type veth peer name o0 netns "$ns_o"
    ip link add o1 netns "$ns_o" type veth peer name b0 netns "$ns_b"
    ip -n "$ns_c" addr add 10.0.1.1/24 dev c0
    ip -n "$ns_o" addr add 10.0.1.2/24 dev o0
    ip -n "$ns_o" addr add 10.0.2.1/24 dev o1
    ip -n "$ns_b" addr add 10.0.2.2/24 dev b0
    for pair in "$ns_c c0" "$ns_o o0" "$ns_o o1" "$ns_b b0"; do
        set -- $pair
        ip -n "$1" link set "$2" up
    done
    # oi only proxies, so the forwarded traffic never needs them; the routes
    # make the topology a plain routed one should someone debug in it.
    ip -n "$ns_c" route add 10.0.2.0/24 via 10.0.1.2
    ip -n "$ns_b" route add 10.0.1.0/24 via 10.0.2.1
    ip netns exec "$ns_o" sysctl -qw net.ipv4.ip_forward=1
}

# Faults on every interface, so each link is impaired in both directions.
apply_faults() {
    local extra="$1" dev ns err
    for pair in "$ns_c c0" "$ns_o o0" "$ns_o o1" "$ns_b b0"; do
        set -- $pair
        ns="$1" dev="$2"
        if ! err="$(ip netns exec "$ns" tc qdisc replace dev "$dev" root netem \
                $netem_delay $netem_loss $netem_reorder $extra 2>&1)"; then
            echo "$err"
            return 1
        fi
    done
}

cat >"$work/peer.py" <<'PY'
import hashlib, os, socket, sys, threading

TIMEOUT = float(os.environ.get("PEER_TIMEOUT", "300"))
CHUNK = 65536

def recv_all(sock):
    h, n = hashlib.sha256(), 0
    while True:
        b = sock.recv(CHUNK)
        if not b:
            return h.hexdigest(), n
        h.update(b)
        n += len(b)

def recv_line(sock):
    line = b""
    while not line.endswith(b"\n"):
        b = sock.recv(1)
        if not b:
            break
        line += b
        if len(line) > 200:
            break
    return line.decode(errors="replace").strip()

def send_random(sock, total):
    h, left = hashlib.sha256(), total
    while left:
        b = os.urandom(min(CHUNK, left))
        h.update(b)
        sock.sendall(b)
        left -= len(b)
    return h.hexdigest()

def serve_one(conn, results):
    conn.settimeout(TIMEOUT)
    try:
        cmd = recv_line(conn).split()
        if cmd[:1] == ["UP"]:
            digest, n = recv_all(conn)            # until the client's FIN
            conn.sendall(f"{digest} {n}\n".encode())  # still writable: half-close
            conn.shutdown(socket.SHUT_WR)
        elif cmd[:1] == ["DOWN"]:
            total = int(cmd[1])
            # Digest first, so it can lead the data: generate, then send.
            data = os.urandom(total)
            conn.sendall(hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
            conn.shutdown(socket.SHUT_WR)             # our FIN; keep reading
            ack = recv_line(conn)
            ok = ack == "ACK " + hashlib.sha256(data).hexdigest()
            with open(results, "a") as f:
                f.write(("down-ack-ok" if ok else f"down-ack-bad {ack!r}") + "\n")
        else:
            with open(results, "a") as f:
                f.write(f"bad-command {cmd!r}\n")
    except Exception as e:
        with open(results, "a") as f:
            f.write(f"server-error {e!r}\n")
    finally:
        conn.close()

def server(host, port, results, ready):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    s.listen(16)
    open(ready, "w").close()
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve_one, args=(conn, results), daemon=True).start()

def client(host, port, mode, total):
    total = int(total)
    s = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    if mode == "up":
        s.sendall(b"UP\n")
        sent = send_random(s, total)
        s.shutdown(socket.SHUT_WR)                # our FIN; the reply must still come
        reply = recv_line(s).split()
        if reply != [sent, str(total)]:
            sys.exit(f"upload: sent {sent} {total}, backend saw {reply}")
        print(f"upload ok: {total} bytes, sha256 {sent[:16]}...")
    else:
        s.sendall(f"DOWN {total}\n".encode())
        header = recv_line(s)
        digest, n = recv_all(s)                   # until the backend's FIN
        if (digest, n) != (header, total):
            sys.exit(f"download: header {header}, got {digest} {n} of {total}")
        s.sendall(f"ACK {digest}\n".encode())      # still writable after its FIN
        s.shutdown(socket.SHUT_WR)
        s.settimeout(TIMEOUT)
        while s.recv(CHUNK):
            pass
        print(f"download ok: {total} bytes, sha256 {digest[:16]}...")
    s.close()

if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](*sys.argv[2:])
PY

# Polls for a file to appear, at most $2 tenths of a second.
wait_for_file() {
    local i
    for ((i = 0; i < $2; i++)); do
        [[ -e "$1" ]] && return 0
        sleep 0.1
    done
    log "timed out waiting for $1"
    return 1
}

# Polls until something listens on $2:$3 in namespace $1, at most 10 s.
wait_for_listener() {
    local i
    for ((i = 0; i < 100; i++)); do
        if ip netns exec "$1" ss -Hltn "src $2:$3" | grep -q .; then
            return 0
        fi
        sleep 0.1
    done
    log "nothing listens on $2:$3"
    return 1
}

# One oi run with --splice=$1: an upload and a download at the same time.
run_case() {
    local splice="$1" label="$2" rc=0
    local results="$work/results-$label-$splice"
    : >"$results"
    # `ip netns exec` execs the command, so $! is oi itself (a shell function
    # in the background would be a subshell, and killing it would orphan oi).
    ip netns exec "$ns_o" "$oi" -c "$work/oi.conf" --splice="$splice" 2>"$work/oi-$label-$splice.log" &
    local oi_pid=$!
    pids+=("$oi_pid")
    wait_for_listener "$ns_o" 10.0.1.2 9000
    local bytes=$((mib * 1024 * 1024))
    PEER_TIMEOUT="$transfer_timeout" timeout "$((transfer_timeout + 10))" \
        ip netns exec "$ns_c" python3 "$work/peer.py" client 10.0.1.2 9000 up "$bytes" &
    local up=$!
    PEER_TIMEOUT="$transfer_timeout" timeout "$((transfer_timeout + 10))" \
        ip netns exec "$ns_c" python3 "$work/peer.py" client 10.0.1.2 9000 down "$bytes" &
    local down=$!
    wait "$up" || { log "FAIL [$label splice=$splice] upload"; rc=1; }
    wait "$down" || { log "FAIL [$label splice=$splice] download"; rc=1; }
    # The backend records the download's acknowledgement after the client exits.
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -s "$results" ]] && break
        sleep 0.1
    done
    if [[ "$(cat "$results")" != "down-ack-ok" ]]; then
        log "FAIL [$label splice=$splice] backend saw: $(cat "$results")"
        rc=1
    fi
    kill "$oi_pid" 2>/dev/null || true
    wait "$oi_pid" 2>/dev/null || true
    if ((rc == 0)); then
        log "ok [$label splice=$splice]"
    else
        log "oi's log:"
        cat "$work/oi-$label-$splice.log" >&2
    fi
    return "$rc"
}

start=$(date +%s)
setup_namespaces

echo "10.0.1.2 9000 10.0.2.2 9001" >"$work/oi.conf"
# The backend writes "down-ack-ok" per download into the results file the
# current case names, via a symlink swapped between cases.
ln -sfn "$work/results-none" "$work/results"
ip netns exec "$ns_b" python3 "$work/peer.py" server 10.0.2.2 9001 "$work/results" "$work/ready" &
pids+=($!)
wait_for_file "$work/ready" 100

if ! err="$(apply_faults "")"; then
    log "skipped: tc netem is not available: $err (tests/faults needs only TUN)"
    exit 77
fi
runs=("netem:" "netem-dup:$netem_dup")

failed=0
for run in "${runs[@]}"; do
    label="${run%%:*}" extra="${run#*:}"
    apply_faults "$extra" >/dev/null
    log "faults: $netem_delay $netem_loss $netem_reorder $extra"
    for splice in on off; do
        ln -sfn "$work/results-$label-$splice" "$work/results"
        run_case "$splice" "$label" || failed=1
    done
done
log "done in $(($(date +%s) - start)) s"
exit "$failed"
