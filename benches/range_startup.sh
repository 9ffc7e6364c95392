#!/usr/bin/env bash
# Start-up of a 10,000-port range: the time from exec to READY=1, and the
# descriptors and resident memory oi holds once ready, at --threads 1 and 2.
#
#   benches/range_startup.sh                   # 5 runs per thread count
#   RUNS=9 FIRST=40000 COUNT=2000 THREADS="1 2 4" benches/range_startup.sh
#
# The configuration is one line, `127.0.0.1 FIRST-LAST 127.0.0.1 9` (every
# port to the discard port; nothing connects, so nothing needs to listen
# there). The range must be free and outside the ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range), which the script checks. The
# descriptor limit is raised to NOFILE (default 20,000, this VM's hard
# limit), which is what oi's listener budget is computed from.
#
# READY=1 is oi's sd_notify message, sent once every listener is bound and
# serving; a small Python listener on NOTIFY_SOCKET takes the time, then
# reads /proc/PID/fd and VmRSS, and stops oi with SIGTERM. oi logs at its
# default level (info) to a file, as a service would to its journal.
#
# Prints one line per run and a summary per thread count (median and range);
# exits nonzero if a run fails (oi exits, no READY=1 within TIMEOUT seconds,
# a port is taken). Cleans up its temporary directory and any oi it started.
set -euo pipefail
RUNS=${RUNS:-5}
FIRST=${FIRST:-20000}
COUNT=${COUNT:-10000}
THREADS=${THREADS:-"1 2"}
NOFILE=${NOFILE:-20000}
TIMEOUT=${TIMEOUT:-60}
LAST=$((FIRST + COUNT - 1))
cd "$(dirname "$0")/.."
cargo build --release --quiet
OI=$PWD/target/release/oi

ulimit -n "$NOFILE" || { echo "cannot raise the descriptor limit to $NOFILE" >&2; exit 1; }
read -r eph_lo eph_hi < /proc/sys/net/ipv4/ip_local_port_range
if (( LAST >= eph_lo && FIRST <= eph_hi )); then
  echo "ports $FIRST-$LAST overlap the ephemeral range $eph_lo-$eph_hi" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "127.0.0.1 $FIRST-$LAST 127.0.0.1 9" > "$dir/range.conf"

python3 - "$OI" "$dir" "$FIRST" "$LAST" "$RUNS" "$TIMEOUT" $THREADS <<'EOF'
import os, signal, socket, statistics, subprocess, sys, time

oi, tmp, first, last, runs, timeout = sys.argv[1:7]
first, last, runs, timeout = int(first), int(last), int(runs), float(timeout)
threads = [int(t) for t in sys.argv[7:]]
conf = os.path.join(tmp, "range.conf")

def ports_free():
    # Binding each port (without listening) is how oi's own probe would fail.
    taken = []
    for port in range(first, last + 1):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            taken.append(port)
        finally:
            s.close()
    return taken

def one_run(n_threads, run):
    path = os.path.join(tmp, "notify.sock")
    if os.path.exists(path):
        os.unlink(path)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(path)
    notify.settimeout(timeout)
    env = dict(os.environ, NOTIFY_SOCKET=path)
    env.pop("RUST_LOG", None)
    log = open(os.path.join(tmp, f"oi-{n_threads}-{run}.log"), "w")
    start = time.monotonic()
    child = subprocess.Popen([oi, "-c", conf, "--threads", str(n_threads)],
                             env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=log)
    try:
        while True:
            try:
                msg = notify.recv(4096).decode(errors="replace")
            except socket.timeout:
                raise SystemExit(f"no READY=1 within {timeout} s")
            if "READY=1" in msg:
                ready = time.monotonic() - start
                break
        if child.poll() is not None:
            raise SystemExit(f"oi exited ({child.returncode}) after READY=1")
        fds = len(os.listdir(f"/proc/{child.pid}/fd"))
        rss_kib = None
        with open(f"/proc/{child.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss_kib = int(line.split()[1])
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=timeout)
        if code != 0:
            raise SystemExit(f"oi exited with {code} on SIGTERM")
        return ready, fds, rss_kib
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        notify.close()
        log.close()

taken = ports_free()
if taken:
    raise SystemExit(f"{len(taken)} port(s) of {first}-{last} are taken, e.g. {taken[:5]}")
print(f"oi: {oi}")
print(f"range: 127.0.0.1 {first}-{last} ({last - first + 1} ports), "
      f"ulimit -n {os.sysconf('SC_OPEN_MAX')}, {runs} runs per thread count")
for n in threads:
    results = []
    for run in range(runs):
        ready, fds, rss = one_run(n, run)
        results.append((ready, fds, rss))
        print(f"  --threads {n} run {run + 1}: READY=1 after {ready * 1000:.0f} ms, "
              f"{fds} descriptors, VmRSS {rss / 1024:.1f} MiB")
    times = [r[0] * 1000 for r in results]
    fds = [r[1] for r in results]
    rss = [r[2] / 1024 for r in results]
    print(f"--threads {n}: READY=1 median {statistics.median(times):.0f} ms "
          f"(range {min(times):.0f}-{max(times):.0f}); descriptors "
          f"{statistics.median(fds):.0f} ({min(fds)}-{max(fds)}); VmRSS median "
          f"{statistics.median(rss):.1f} MiB ({min(rss):.1f}-{max(rss):.1f})")
EOF
