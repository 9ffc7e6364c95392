#!/usr/bin/env bash
# Bounded fuzzing run of every target, for CI and for people.
#
#   fuzz/run.sh [SECONDS] [TARGET]      # defaults: 60 s shared by every target
#   fuzz/run.sh build                   # only build every target (CI starts it early)
#   OI_FUZZ_SEED=1 fuzz/run.sh 60       # reproducible (CI): fixed seed and inputs
#   fuzz/run.sh fetch-libfuzzer         # download a built libFuzzer (see below)
#
# Without TARGET, every target in fuzz_targets/ gets an equal share of
# SECONDS (at least 5 s each): the config parsers, the PROXY decoder and the
# request parsers of the metrics endpoint and the control socket, and the
# TLS ClientHello reader of `[sni=...]` rules.
# Builds and runs the targets without cargo-fuzz: `cargo build` with the
# compiler flags `cargo fuzz build` passes (cargo-fuzz 0.13's defaults on
# Linux, listed below), then each target's libFuzzer binary as `cargo fuzz
# run` starts it. Installing cargo-fuzz cost CI a build of its own (see
# .ci/run). Differences: only oi's library and the fuzz targets are
# instrumented (rustc-wrapper.sh), not the dependencies (OI_FUZZ_DEPS=instrument
# instruments every crate as cargo-fuzz does), and the build is cargo's dev
# profile with oi's crates raised to opt-level 3 and one codegen unit
# (cargo-fuzz: release), so the dependencies are the ones the tests' build
# compiled (OI_FUZZ_DEPS_FROM below); the binaries are in
# fuzz/target/debug/. The compiler flags are stable ones; with
# OI_FUZZ_SANITIZER, RUSTC_BOOTSTRAP=1 lets a stable toolchain take
# -Zsanitizer. The generated corpus lives in fuzz/corpus/TARGET (not
# committed); the committed seeds in fuzz/seeds/TARGET start it. A crash leaves
# its input in fuzz/artifacts/TARGET and makes this script exit non-zero.
#
# OI_FUZZ_DEPS_FROM=DIR: before the first build into fuzz/target, copy the
# compiled crates of DIR/debug (a target directory the tests were built in:
# CI passes `target`) there, so that cargo finds every dependency fresh and
# compiles only oi's library and the targets. A copy, not the same
# directory: a build there would hold cargo's lock on it while the tests
# wait for it. The fuzzers' cold build was 300 to 390 s of CPU, its own
# dependencies most of it (cargo --timings).
set -euo pipefail

seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
# A relative OI_FUZZ_DEPS_FROM is the caller's, not fuzz/'s.
if [ -n "${OI_FUZZ_DEPS_FROM:-}" ]; then
    OI_FUZZ_DEPS_FROM="$(cd "$OI_FUZZ_DEPS_FROM" && pwd)"
fi
cd "$here"

# SANITIZER: the crate forbids unsafe code, so AddressSanitizer has little to
# find that a panic would not show, and it makes the build the slowest step of
# CI: building every target took 403 s of CPU with it and 276 s without
# (cargo fuzz build into an empty target directory, same loaded machine;
# --codegen-units 16 made it 322 s, so the default of 1 stays). libFuzzer's
# coverage guidance, the crash on panic, -timeout and -rss_limit_mb work
# without it. OI_FUZZ_SANITIZER=address brings it back (and instruments
# every crate: rustc refuses to link crates built with and without it).
#
# DEPENDENCIES UNINSTRUMENTED: cold build 313 s of CPU with every crate
# instrumented, 300 s with only oi's library and the targets (`/usr/bin/time
# fuzz/run.sh build` into empty target directories, one after the other on a
# loaded machine), and each input runs faster. Guidance is not lost where it
# matters: the generic code oi instantiates (yaml-rust2's parser, which is
# generic over its input, and the collections) is compiled, and instrumented,
# inside oi's crate. Side by side for 90 s from the same seed, the corpus
# from the uninstrumented-dependency build covered more of the fully
# instrumented build's edges (replayed there with -runs=0): config_parse
# cov 2112 against 2078, yaml_parse 3164 against 2994.
sanitizer="${OI_FUZZ_SANITIZER:-none}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
# Not the workspace's target directory (the tests'): see OI_FUZZ_DEPS_FROM.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
bin_dir="$CARGO_TARGET_DIR/debug"

# LIBFUZZER BUILT ONCE, ELSEWHERE: libfuzzer-sys compiles libFuzzer's C++
# sources in its build script unless CUSTOM_LIBFUZZER_PATH names a built
# archive; that compile was the costliest unit of the fuzzers' cold build (82 s
# in `cargo build --timings`, beside oi's library at 96 s). Debian and the
# LLVM project's apt repository ship the archive in libfuzzer-N-dev; the one
# of rustc's own LLVM major version (`rustc -vV`) matches the coverage
# instrumentation rustc emits. `fetch-libfuzzer` downloads that package and
# unpacks only the archive (the package depends on clang-N, which a linked
# static library does not need), into the target directory. build() uses an
# archive found there or installed (/usr/lib/llvm-N/lib), and otherwise lets
# libfuzzer-sys compile its own as before.
llvm_major="$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')"
libfuzzer_dir="$CARGO_TARGET_DIR/libfuzzer-llvm$llvm_major"
find_libfuzzer() {
    local a
    for a in "$libfuzzer_dir/usr/lib/llvm-$llvm_major/lib/libFuzzer.a" "/usr/lib/llvm-$llvm_major/lib/libFuzzer.a"; do
        if [ -n "$llvm_major" ] && [ -f "$a" ]; then
            echo "$a"
            return 0
        fi
    done
    return 1
}
fetch_libfuzzer() {
    find_libfuzzer >/dev/null && return 0
    [ -n "$llvm_major" ] || return 1
    local tmp
    tmp="$(mktemp -d)"
    # APT::Sandbox::User=root: apt's download user cannot write to mktemp's directory.
    if (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "libfuzzer-$llvm_major-dev") &&
        mkdir -p "$libfuzzer_dir" && dpkg-deb -x "$tmp"/libfuzzer-*.deb "$libfuzzer_dir"; then
        rm -rf "$tmp"
        find_libfuzzer >/dev/null
        return
    fi
    rm -rf "$tmp"
    return 1
}
# What `cargo fuzz build` runs (cargo-fuzz 0.13.2, src/project.rs):
# SanitizerCoverage with inline 8-bit counters, a PC table, compare tracing
# and stack depth; `--cfg fuzzing`; no branch folding; debug assertions
# (the dev profile's); optimised (opt-level 3 here) with one codegen unit
# (the sancov pass keeps ThinLTO from inlining across units otherwise); line
# tables (the dev profile's, for oi's crates). With a sanitizer it also
# passes --target, so that RUSTFLAGS skip build scripts and proc macros.
build() {
    local libfuzzer
    if [ -z "${CUSTOM_LIBFUZZER_PATH:-}" ] && libfuzzer="$(find_libfuzzer)"; then
        echo "fuzz/run.sh: libFuzzer from $libfuzzer" >&2
        export CUSTOM_LIBFUZZER_PATH="$libfuzzer"
    fi
    local flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
    flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
    flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
    flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
    flags+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0"
    flags+=" -Cllvm-args=-sanitizer-coverage-stack-depth -Cdebug-assertions"
    # oi's crates (the instrumented ones): optimised, one codegen unit.
    # Profile settings, not compiler flags, so that cargo sees them: the
    # library is then a unit of its own, never mistaken for the tests'
    # uninstrumented one.
    local optimised=()
    for package in oi-wire oi-config oxidinetd-fuzz; do
        optimised+=(--config "profile.dev.package.$package.opt-level=3")
        optimised+=(--config "profile.dev.package.$package.codegen-units=1")
    done
    if [ "$sanitizer" != none ]; then
        export RUSTC_BOOTSTRAP=1 ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0"
        flags+=" -Zsanitizer=$sanitizer"
    fi
    if [ "$sanitizer" != none ] || [ "${OI_FUZZ_DEPS:-}" = instrument ]; then
        # Every crate instrumented, as cargo-fuzz does (a sanitizer must be
        # in every crate: rustc refuses to link a mix).
        bin_dir="$CARGO_TARGET_DIR/$triple/debug"
        RUSTFLAGS="$flags ${RUSTFLAGS:-}" cargo build --manifest-path "$here/Cargo.toml" \
            --target "$triple" "${optimised[@]}" --config 'profile.dev.package."*".opt-level=3' --bins
        return
    fi
    if [ -n "${OI_FUZZ_DEPS_FROM:-}" ] && [ -d "$OI_FUZZ_DEPS_FROM/debug/deps" ] &&
        [ ! -e "$CARGO_TARGET_DIR/debug" ]; then
        mkdir -p "$CARGO_TARGET_DIR/debug"
        cp -a "$OI_FUZZ_DEPS_FROM/debug/deps" "$OI_FUZZ_DEPS_FROM/debug/build" \
            "$OI_FUZZ_DEPS_FROM/debug/.fingerprint" "$CARGO_TARGET_DIR/debug/"
    fi
    local crates="oi_wire oi_config" t
    for t in "$here"/fuzz_targets/*.rs; do
        crates+=" $(basename "$t" .rs)"
    done
    OI_FUZZ_CRATES="$crates" OI_FUZZ_RUSTFLAGS="$flags" RUSTC_WRAPPER="$here/rustc-wrapper.sh" \
        cargo build --manifest-path "$here/Cargo.toml" "${optimised[@]}" --bins
}
if [ "$seconds" = build ]; then
    build
    exit 0
fi
if [ "$seconds" = fetch-libfuzzer ]; then
    fetch_libfuzzer || { echo "fuzz/run.sh: no libfuzzer-$llvm_major-dev to download; the build compiles libFuzzer itself" >&2; exit 1; }
    find_libfuzzer
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
mkdir -p "artifacts/$target"
# Reproducible mode (CI): OI_FUZZ_SEED fixes libFuzzer's random seed, the
# number of inputs tried is fixed (OI_FUZZ_RUNS, or the target's entry in
# REPRO_RUNS), the run starts from the committed seeds only (a fresh corpus
# directory, removed after), the corpus is not re-read during the run
# (-reload=0: when it is re-read depends on the clock) and address space
# randomisation is off (setarch -R, where allowed: the stack-depth feature and
# compared pointers depend on addresses). Then the same commit and toolchain
# try the same inputs on any machine, and a finding fails every CI run of that
# commit, not only the run that was unlucky. Checked with three runs of 300000 inputs
# each: client_hello, proxy_parse (and the request parsers, which allocate no
# hash maps) end with the same coverage, features and corpus every time;
# config_parse and yaml_parse still drift a little, as oi's hash maps take
# random keys per process and their layout changes which code runs. SECONDS
# (twice the share here) is only a cap for a slow machine. Without
# OI_FUZZ_SEED (by hand), the seed is random and fuzz/corpus/TARGET keeps what
# each run learned.
#
# REPRO_RUNS: about 6 s of CPU each on a loaded 2-core machine (`/usr/bin/time`
# of each target with -runs=N: 3.4 us an input for client_hello, 0.7 ms for
# config_parse, 0.17 ms for yaml_parse, 1.6 to 2.7 us for the rest), so CI's
# `fuzz/run.sh 60` ends in about 40 s of one core.
declare -A REPRO_RUNS=(
    [client_hello]=1800000 [config_parse]=9000 [control_request]=3500000
    [metrics_request]=2200000 [proxy_parse]=3000000 [yaml_parse]=35000
)
launch=()
if [ -n "${OI_FUZZ_SEED:-}" ]; then
    corpus="$(mktemp -d)"
    trap 'rm -rf "$corpus"' EXIT
    repro=(-seed="$OI_FUZZ_SEED" -runs="${OI_FUZZ_RUNS:-${REPRO_RUNS[$target]:-100000}}" -reload=0)
    seconds=$((seconds * 2))
    if setarch -R true 2>/dev/null; then
        launch=(setarch -R)
    fi
else
    corpus="corpus/$target"
    mkdir -p "$corpus"
    repro=()
fi
# -max_len: the parser's interesting structure is in lines, not megabytes;
#   64 KiB still allows many lines and long ones.
# -timeout: one input taking more than 10 s is a finding (a quadratic path).
# -rss_limit_mb: one input using more than 1 GiB is a finding (loading a
#   file must stay bounded, whatever it holds).
"${launch[@]}" "$bin_dir/$target" -artifact_prefix="$here/artifacts/$target/" "$corpus" "seeds/$target" \
    -max_total_time="$seconds" \
    "${repro[@]}" \
    -max_len=65536 \
    -timeout=10 \
    -rss_limit_mb=1024 \
    -print_final_stats=1
