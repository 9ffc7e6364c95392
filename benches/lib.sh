# benches/lib.sh: what the bench scripts that start forwarders share, sourced
# (not run) after the script has gone to the repository root:
#
#   BENCH=syscalls.sh PORT_BASE=28000
#   . benches/lib.sh
#
# (Two statements: assignments on the `.` line itself would last only while
# the file is read, and the exit trap needs BENCH later.)
#
# It gives the script a work directory ($WORK, kept with KEEP=1, else removed
# at exit), a list of processes to stop at exit ($PIDS), free ports, the wait
# for a listener, a process's CPU time and resident memory, loadgen's result
# line, the open-file limit, each forwarder's configuration for one port, and
# the list of forwarders to compare (`each_forwarder`).
# BENCH names the script in messages; PORT_BASE is where its ports start
# (scripts that may run side by side use different bases).

WORK=$(mktemp -d "/tmp/oi-${BENCH%.sh}.XXXXXX")
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [[ -n ${KEEP:-} ]]; then echo "$BENCH: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Whether something listens on TCP port $1.
listening() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# Below the ephemeral range (32768+), so client sockets never take them.
next_port=$(( PORT_BASE + RANDOM % 4000 ))
# Sets PORT to a port nothing listens on, never the same one twice.
free_port() {
    local tries=0
    while listening "$next_port"; do
        next_port=$((next_port + 1)); tries=$((tries + 1))
        (( tries < 1000 )) || { echo "$BENCH: no free port" >&2; exit 1; }
    done
    PORT=$next_port
    next_port=$((next_port + 1))
}

# Prints a port the kernel picks (bound to port 0, then let go): for scripts
# that need a port inside a command substitution, where `free_port` could not
# remember the ports it gave. Needs python3.
kernel_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits until something listens on port $1: 10 s at most, or $2 seconds
# (a forwarder under valgrind starts slower).
wait_listening() {
    local i tries=$(( ${2:-10} * 50 ))
    for ((i = 0; i < tries; i++)); do listening "$1" && return 0; sleep 0.02; done
    echo "$BENCH: nothing listens on port $1" >&2; exit 1
}

# utime and stime of process $1, in clock ticks: two numbers.
user_system_ticks() { awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$1/stat"; }

# utime+stime of process $1, in clock ticks.
cpu_ticks() { local user system; read -r user system < <(user_system_ticks "$1"); echo $((user + system)); }

# Resident memory of process $1, in KiB.
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# Value of key $2 on the `result:` line of loadgen output file $1.
result() { grep '^result:' "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { print $2 }'; }

# Raises the open-file limit to its hard limit (65,536 if it may rise that
# far) and sets HARD to it; then sets FIT to how many of the $1 connections
# a forwarder can hold at two descriptors each with $2 to spare (a multiple
# of 100, and $1 itself when it fits), saying so when it does not.
fit_descriptors() {
    local want=$1 headroom=$2
    ulimit -Hn 65536 2>/dev/null || true
    HARD=$(ulimit -Hn)
    [[ $HARD == unlimited ]] && HARD=1048576
    ulimit -n "$HARD"
    FIT=$want
    if (( 2 * want + headroom > HARD )); then
        FIT=$(( (HARD - headroom) / 2 / 100 * 100 ))
        echo "$BENCH: fd hard limit $HARD holds 2 x $FIT, not 2 x $want; using $FIT" >&2
    fi
}

# Writes forwarder $1's configurations for listening on port $2 and forwarding
# to port $3 on loopback ($WORK/$1.conf for oi and rinetd, .haproxy.cfg,
# .realm.toml), and sets COMMAND to the words of $4.. with @CONF@, @HAPROXY@
# and @REALM@ replaced by their paths.
forwarder() {
    local name=$1 port=$2 backend=$3; shift 3
    printf '127.0.0.1 %s 127.0.0.1 %s\n' "$port" "$backend" >"$WORK/$name.conf"
    printf 'global\n    maxconn 4000\ndefaults\n    mode tcp\n    timeout connect 10s\n    timeout client 60s\n    timeout server 60s\nlisten fwd\n    bind 127.0.0.1:%s\n    server backend 127.0.0.1:%s\n' \
        "$port" "$backend" >"$WORK/$name.haproxy.cfg"
    printf '[[endpoints]]\nlisten = "127.0.0.1:%s"\nremote = "127.0.0.1:%s"\n' \
        "$port" "$backend" >"$WORK/$name.realm.toml"
    COMMAND=()
    local a
    for a in "$@"; do
        a=${a//@CONF@/$WORK/$name.conf}
        a=${a//@REALM@/$WORK/$name.realm.toml}
        a=${a//@HAPROXY@/$WORK/$name.haproxy.cfg}
        COMMAND+=("$a")
    done
}

# Calls `$1 NAME WORDS...` for each forwarder a script compares, in this
# order: oi ($OI), an older oi (OI_BASELINE), rinetd and haproxy when
# installed, realm (REALM, an executable); the words hold @CONF@, @HAPROXY@
# or @REALM@ for `forwarder` to fill in.
each_forwarder() {
    local callback=$1
    "$callback" oi "$OI" -c @CONF@
    if [[ -n ${OI_BASELINE:-} ]]; then "$callback" baseline "$OI_BASELINE" -c @CONF@; fi
    if command -v rinetd >/dev/null; then "$callback" rinetd rinetd -f -c @CONF@; fi
    if command -v haproxy >/dev/null; then "$callback" haproxy haproxy -db -f @HAPROXY@; fi
    if [[ -n ${REALM:-} && -x ${REALM:-} ]]; then
        "$callback" realm "$REALM" -c @REALM@
    elif [[ -n ${REALM:-} ]]; then
        echo "$BENCH: REALM=$REALM is not an executable; realm skipped" >&2
    fi
}
