#!/bin/sh
# Builds the oi the package and the container image ship,
# target/dist/release/oi: a release build with profile-guided optimisation.
#
#   dist/pgo-build.sh              # needs: rustup component add llvm-tools; python3
#   OI_PGO=off dist/pgo-build.sh   # a plain release build in the same place
#
# Three steps: an instrumented build (target/pgo-gen), a training run of it
# under the load a forwarder spends its time on (dist/pgo-train.py: TCP
# connections, small messages, a bulk transfer, UDP), and the build the
# package ships (target/dist), compiled with the profile that run wrote. The
# compiler then keeps the code a connection runs through together and the
# rest apart: measured on this path, 20% fewer instructions and half the
# instruction-cache misses per connection, and a third less user time per
# connection (docs/performance.md, "Profile-guided build").
#
# The profile needs llvm-profdata of the LLVM that rustc was built with
# (rustup's llvm-tools component; a distribution's llvm-profdata of another
# version cannot read it). The profile depends on timing (how events batch),
# so two builds are not byte for byte the same.
set -eu
cd "$(dirname "$0")/.."
if [ "${OI_PGO:-on}" = off ]; then
    CARGO_TARGET_DIR=target/dist cargo build --release --locked --bin oi
    exit 0
fi
profdata=""
for p in "$(rustc --print sysroot)"/lib/rustlib/*/bin/llvm-profdata; do
    [ -x "$p" ] && profdata=$p
done
if [ -z "$profdata" ]; then
    echo "pgo-build.sh: needs llvm-profdata for rustc's LLVM: rustup component add llvm-tools" >&2
    echo "pgo-build.sh: (or OI_PGO=off for a build without profile-guided optimisation)" >&2
    exit 1
fi
command -v python3 >/dev/null || { echo "pgo-build.sh: python3 is required (the training run)" >&2; exit 1; }

data=$PWD/target/pgo-profile
rm -rf "$data"
# Build scripts are instrumented too and write their profiles while the
# build runs: into build/, which is not used.
RUSTFLAGS="-Cprofile-generate=$data/build" CARGO_TARGET_DIR=target/pgo-gen \
    cargo build --release --locked --bin oi
LLVM_PROFILE_FILE="$data/run/oi-%p.profraw" \
    python3 dist/pgo-train.py target/pgo-gen/release/oi
"$profdata" merge -o "$data/oi.profdata" "$data/run"
RUSTFLAGS="-Cprofile-use=$data/oi.profdata" CARGO_TARGET_DIR=target/dist \
    cargo build --release --locked --bin oi
