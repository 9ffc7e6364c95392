#!/bin/sh
# Builds target/debian/oxidinetd_*.deb: generates oi(8), oi.conf(5) and the shell
# completions from the command-line definition and the option table
# (examples/gen-docs.rs), gzips the
# man pages as Debian expects, then runs cargo deb (release build, stripped).
# Needs cargo-deb:  cargo install cargo-deb --locked
# Extra arguments go to cargo deb (for example --no-build after a release build).
set -eu
cd "$(dirname "$0")/.."

out=target/gen-docs
rm -rf "$out"
cargo run --quiet --locked --example gen-docs -- "$out"
gzip -9n "$out/oi.8" "$out/oi.conf.5"
cargo deb --locked "$@"
