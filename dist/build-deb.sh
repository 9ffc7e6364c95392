#!/bin/sh
# Builds target/debian/oxidinetd_*.deb: generates oi(8), oi.conf(5) and the shell
# completions from the command-line definition and the option table
# (examples/gen-docs.rs), gzips the man pages as Debian expects, builds the
# binary it ships with profile-guided optimisation (dist/pgo-build.sh, into
# target/dist; OI_PGO=off for a plain release build) and runs cargo deb on it.
# Needs cargo-deb:  cargo install cargo-deb --locked
# --no-build first: package target/dist/release/oi as dist/pgo-build.sh left it.
# Other arguments go to cargo deb.
set -eu
cd "$(dirname "$0")/.."

if [ "${1:-}" = --no-build ]; then
    shift
    [ -x target/dist/release/oi ] || { echo "build-deb.sh: no target/dist/release/oi: run dist/pgo-build.sh" >&2; exit 1; }
else
    dist/pgo-build.sh
fi
out=target/gen-docs
rm -rf "$out"
cargo run --quiet --locked --example gen-docs -- "$out"
gzip -9n "$out/oi.8" "$out/oi.conf.5"
mkdir -p target/debian
CARGO_TARGET_DIR=target/dist cargo deb --locked --no-build --output target/debian "$@"
