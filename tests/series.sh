#!/usr/bin/env bash
# tests/series.sh: runs the README's test command RUNS times in a row on a
# loaded machine (BUSY busy loops beside it, two by default: one per core of
# the 2-core machines this project is tested on), and
# prints one line per run (exit status, wall seconds, load average) and a
# summary. 20 runs with no failure is the bar: a flaky test shows
# here, not on a newcomer's first run.
#
#   tests/series.sh                 # 20 runs, 2 busy loops
#   RUNS=5 BUSY=0 tests/series.sh   # 5 runs on an otherwise idle machine
#   FILTER=dies_taking RUNS=10 tests/series.sh  # only the tests whose names match
#
# Each failed run's output is kept in $LOGS/run-N.log (LOGS: a new
# directory under /tmp unless given).
set -uo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-20}
BUSY=${BUSY:-2}
filter=()
[ -n "${FILTER:-}" ] && filter=(-- "$FILTER")
LOGS=${LOGS:-$(mktemp -d /tmp/oi-series.XXXXXX)}
mkdir -p "$LOGS"

# Built once first, so every run measures the tests, not the build.
cargo test --all-targets --no-run >"$LOGS/build.log" 2>&1 || {
    cat "$LOGS/build.log"
    echo "series: the build failed" >&2
    exit 1
}

busy=()
stop_busy() {
    local pid
    for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_busy EXIT
for ((i = 0; i < BUSY; i++)); do
    (while :; do :; done) &
    busy+=($!)
done

failed=0
for ((run = 1; run <= RUNS; run++)); do
    start=$SECONDS
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    if cargo test --all-targets "${filter[@]}" >"$LOGS/run-$run.log" 2>&1; then
        status=ok
        detail="$(grep -Eo '[0-9]+ passed' "$LOGS/run-$run.log" | awk '{ s += $1 } END { print s }') passed"
        rm -f "$LOGS/run-$run.log"
    else
        status=FAILED
        failed=$((failed + 1))
        detail="failed: $(grep -E '^test .* FAILED$|^    [a-z_:]+$' "$LOGS/run-$run.log" | head -5 | tr '\n' ' ')"
    fi
    echo "run $run: $status in $((SECONDS - start)) s, load $load_before -> $(cut -d' ' -f1 /proc/loadavg), $detail"
done
echo "series: $((RUNS - failed)) of $RUNS runs passed with $BUSY busy loop(s) beside; failed runs' logs in $LOGS"
((failed == 0))
