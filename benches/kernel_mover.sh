#!/usr/bin/env bash
# The kernel mover of issue 46, probed: what an sk_skb stream verdict
# program that redirects each socket's bytes to its peer's egress
# (bpf_sk_redirect_hash on a sockhash) does on this kernel, and what it
# costs beside a direct connection and user-space relays. The probe is
# benches/kernel_mover/ (README.md there), a package of its own that oi
# neither builds nor links; docs/kernel-mover.md has the results.
#
#   benches/kernel_mover.sh                   # findings, then 3 rounds of figures
#   ROUNDS=1 MIB=256 benches/kernel_mover.sh
#   OI=target/release/oi benches/kernel_mover.sh   # oi itself beside them ([splice=on], [splice=off])
#
# Needs root (it loads a BPF program: CAP_BPF and CAP_NET_ADMIN, or
# CAP_SYS_ADMIN), clang (the program is compiled with -target bpf at build
# time, no object is checked in), a kernel with CONFIG_BPF_STREAM_PARSER,
# and cargo (crates.io, for aya).
set -euo pipefail
ROUNDS=${ROUNDS:-3}
MIB=${MIB:-1024}
RTT=${RTT:-20000}
CLIENTS=${CLIENTS:-50}
SECS=${SECS:-5}
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/kernel-mover-probe}
(cd benches/kernel_mover && nice -n 10 cargo build --release --locked -q)
probe=$CARGO_TARGET_DIR/release/kernel-mover-probe
uname -r
echo "== findings"
"$probe" stranded
"$probe" unbounded 2
"$probe" eof 64
"$probe" rst
"$probe" hold 2
"$probe" peer-seq
echo "== the same with a stream parser (strparser mode)"
PARSER=1 "$probe" stranded
PARSER=1 "$probe" unbounded 2
PARSER=1 "$probe" eof 64
echo "== capabilities (setpriv drops them from the bounding set)"
if command -v setpriv >/dev/null; then
    for drop in -sys_admin -sys_admin,-perfmon -sys_admin,-net_admin -sys_admin,-bpf; do
        echo "without ${drop//-/}:"
        setpriv --inh-caps=-all --bounding-set="$drop" -- "$probe" stranded 2>&1 | tail -1 || true
        setpriv --inh-caps=-all --bounding-set="$drop" -- "$probe" peer-seq 2>&1 | grep '^peer-seq' | cut -c1-120 || true
    done
fi
echo "== figures ($ROUNDS rounds; load average: $(cut -d' ' -f1-3 /proc/loadavg))"
"$probe" rtt "$RTT" "$ROUNDS"
"$probe" rr "$CLIENTS" "$SECS" "$ROUNDS"
"$probe" bulk "$MIB" "$ROUNDS" 1
"$probe" bulk "$MIB" "$ROUNDS" 8
echo "== where a redirected message's time goes: psock backlog work items per round trip"
if command -v perf >/dev/null; then
    tmp=$(mktemp)
    perf record -q -e workqueue:workqueue_execute_start -a -o "$tmp" -- "$probe" rtt 5000 1 >/dev/null 2>&1
    n=$(perf script -i "$tmp" 2>/dev/null | grep -c sk_psock_backlog || true)
    echo "sk_psock_backlog work items: $n for 5000 kernel-path round trips"
    rm -f "$tmp"
else
    echo "(perf not installed)"
fi
