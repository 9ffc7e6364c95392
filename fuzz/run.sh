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
# Builds and runs the targets without cargo-fuzz: `cargo build` with the
# flags `cargo fuzz build` passes (cargo-fuzz 0.13's defaults on Linux, listed
# below), then each target's libFuzzer binary as `cargo fuzz run` starts it.
# Installing cargo-fuzz cost CI a build of its own (see .ci/run); the
# binaries and their place (target/TRIPLE/release/) are the same, so a
# `cargo fuzz run` still finds them. The compiler flags are stable ones; with
# OI_FUZZ_SANITIZER, RUSTC_BOOTSTRAP=1 lets a stable toolchain take
# -Zsanitizer. The generated corpus lives in fuzz/corpus/TARGET (not
# committed); the committed seeds in fuzz/seeds/TARGET start it. A crash leaves
# its input in fuzz/artifacts/TARGET and makes this script exit non-zero.
set -euo pipefail

seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

# SANITIZER: the crate forbids unsafe code, so AddressSanitizer has little to
# find that a panic would not show, and it makes the build the slowest step of
# CI: building every target took 403 s of CPU with it and 276 s without
# (cargo fuzz build into an empty target directory, same loaded machine;
# --codegen-units 16 made it 322 s, so the default of 1 stays). libFuzzer's coverage guidance, the crash on panic,
# -timeout and -rss_limit_mb work without it. OI_FUZZ_SANITIZER=address
# brings it back.
sanitizer="${OI_FUZZ_SANITIZER:-none}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
bin_dir="${CARGO_TARGET_DIR:-$here/target}/$triple/release"
# What `cargo fuzz build` runs (cargo-fuzz 0.13.2, src/project.rs): --target
# so that RUSTFLAGS skip build scripts and proc macros; release with line
# tables; SanitizerCoverage with inline 8-bit counters, a PC table, compare
# tracing and stack depth; `--cfg fuzzing`; no branch folding; debug
# assertions; one codegen unit (the sancov pass keeps ThinLTO from inlining
# across units otherwise).
build() {
    local flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
    flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
    flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
    flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
    flags+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0"
    flags+=" -Cllvm-args=-sanitizer-coverage-stack-depth -Cdebug-assertions -Ccodegen-units=1"
    if [ "$sanitizer" != none ]; then
        export RUSTC_BOOTSTRAP=1 ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0"
        flags+=" -Zsanitizer=$sanitizer"
    fi
    RUSTFLAGS="$flags ${RUSTFLAGS:-}" cargo build --manifest-path "$here/Cargo.toml" \
        --target "$triple" --release --config 'profile.release.debug="line-tables-only"' --bins
}
if [ "$seconds" = build ]; then
    build
    exit 0
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
build
mkdir -p "corpus/$target" "artifacts/$target"
# -max_len: the parser's interesting structure is in lines, not megabytes;
#   64 KiB still allows many lines and long ones.
# -timeout: one input taking more than 10 s is a finding (a quadratic path).
# -rss_limit_mb: one input using more than 1 GiB is a finding (issue 10).
"$bin_dir/$target" -artifact_prefix="$here/artifacts/$target/" "corpus/$target" "seeds/$target" \
    -max_total_time="$seconds" \
    -max_len=65536 \
    -timeout=10 \
    -rss_limit_mb=1024 \
    -print_final_stats=1
