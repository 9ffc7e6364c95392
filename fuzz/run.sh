#!/usr/bin/env bash
# Bounded fuzzing run of every target, for CI and for people.
#
#   fuzz/run.sh [SECONDS] [TARGET]      # defaults: 60 s shared by every target
#   fuzz/run.sh build                   # only build every target (CI starts it early)
#
# Without TARGET, every target in fuzz_targets/ gets an equal share of
# SECONDS (at least 5 s each): the config parsers, the PROXY decoder and the
# request parsers of the metrics endpoint and the control socket, and the
# TLS ClientHello reader of `[sni=...]` rules.
# Installs cargo-fuzz if missing. cargo-fuzz needs nightly-only compiler flags;
# with only a stable toolchain, RUSTC_BOOTSTRAP=1 lets stable accept them. The
# generated corpus lives in fuzz/corpus/TARGET (not
# committed); the committed seeds in fuzz/seeds/TARGET start it. A crash leaves
# its input in fuzz/artifacts/TARGET and makes this script exit non-zero.
set -euo pipefail

seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "run.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
# SANITIZER: the crate forbids unsafe code, so AddressSanitizer has little to
# find that a panic would not show, and it makes the build the slowest step of
# CI: building every target took 403 s of CPU with it and 276 s without
# (cargo fuzz build into an empty target directory, same loaded machine;
# --codegen-units 16 made it 322 s, so the default of 1 stays). libFuzzer's coverage guidance, the crash on panic,
# -timeout and -rss_limit_mb work without it. OI_FUZZ_SANITIZER=address
# brings it back.
sanitizer="${OI_FUZZ_SANITIZER:-none}"
if [ "$seconds" = build ]; then
    exec cargo fuzz build --sanitizer "$sanitizer"
fi
if [ -z "${2:-}" ]; then
    targets=(fuzz_targets/*.rs)
    share=$(( seconds / ${#targets[@]} ))
    (( share >= 5 )) || share=5
    for t in "${targets[@]}"; do
        name=$(basename "$t" .rs)
        echo "== fuzz/run.sh: $name for $share s"
        "$here/run.sh" "$share" "$name"
    done
    exit 0
fi
target="$2"
mkdir -p "corpus/$target"
# -max_len: the parser's interesting structure is in lines, not megabytes;
#   64 KiB still allows many lines and long ones.
# -timeout: one input taking more than 10 s is a finding (a quadratic path).
# -rss_limit_mb: one input using more than 1 GiB is a finding (issue 10).
cargo fuzz run --sanitizer "$sanitizer" "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" \
    -max_len=65536 \
    -timeout=10 \
    -rss_limit_mb=1024 \
    -print_final_stats=1
