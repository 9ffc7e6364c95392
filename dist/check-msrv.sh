#!/bin/sh
# Fails when a locked dependency (for this host's platform, dev-dependencies
# included) declares a rust-version newer than Cargo.toml's `rust-version`,
# so that `rust-version` stays true when Cargo.lock moves.
set -eu
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
cargo metadata --format-version 1 --locked --filter-platform "$host" | python3 -c '
import json, sys

def ver(v):
    return tuple(int(x) for x in (v.split(".") + ["0", "0"])[:3])

meta = json.load(sys.stdin)
pkgs = {p["id"]: p for p in meta["packages"]}
root = pkgs[meta["resolve"]["root"]]
declared = root["rust_version"]
ours = ver(declared)
used = [pkgs[n["id"]] for n in meta["resolve"]["nodes"]]
needed = [(ver(p["rust_version"]), p["name"], p["version"]) for p in used if p.get("rust_version")]
need = max(needed)
too_new = sorted((v, n, pv) for v, n, pv in needed if v > ours)
for v, n, pv in too_new:
    print(f"{n} {pv} needs Rust {v[0]}.{v[1]}.{v[2]}")
if too_new:
    sys.exit(f"rust-version = {declared} in Cargo.toml is too old")
print(f"rust-version {declared} OK (most demanding: {need[1]} {need[2]}, Rust {need[0][0]}.{need[0][1]})")
'
