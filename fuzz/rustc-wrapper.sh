#!/usr/bin/env bash
# RUSTC_WRAPPER for fuzz/run.sh's build: adds the fuzzing flags
# ($OI_FUZZ_RUSTFLAGS) only to the crates named in $OI_FUZZ_CRATES (oi's
# library and the fuzz targets), so the dependencies build as the profile
# says, uninstrumented: the same crates the tests' build compiled (run.sh,
# OI_FUZZ_DEPS_FROM).
# libFuzzer still sees every edge and comparison of oi's code, and of the
# dependencies' generic code oi instantiates; what it loses is guidance inside
# the dependencies' own compiled code. See run.sh for the figures.
#
# Cargo runs it as `rustc-wrapper.sh RUSTC ARGS...`.
set -euo pipefail

crate=""
prev=""
for arg in "$@"; do
    if [ "$prev" = --crate-name ]; then
        crate="$arg"
        break
    fi
    prev="$arg"
done
for wanted in ${OI_FUZZ_CRATES:-}; do
    if [ "$crate" = "$wanted" ]; then
        # Word splitting of the flags is wanted: they are separate arguments.
        # shellcheck disable=SC2086
        exec "$@" ${OI_FUZZ_RUSTFLAGS:-}
    fi
done
exec "$@"
