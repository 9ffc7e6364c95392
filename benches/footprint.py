#!/usr/bin/env python3
"""benches/footprint.py: what one connection (or one round trip) costs a
forwarder in code, from two callgrind runs (--dump-instr=yes --cache-sim=yes)
that differ only in how many went through. Used by benches/conn_footprint.sh.

    footprint.py SHORT.out LONG.out UNITS [TOP]

UNITS is how many more connections (round trips) the long run made. Per
unit, the difference of the two runs:

- instructions: callgrind's Ir;
- I1 misses: its simulated first-level instruction cache (the host's size,
  32 KiB on this machine);
- hot code: the 64-byte lines of code holding an instruction run at least
  once every two units (what the path needs cached);
- atomic read-modify-writes: instructions with a `lock` prefix or an `xchg`
  with memory (x86), found with objdump in each object that ran them. Each
  is a full barrier, and one on a line another core wrote moves that line.

With TOP, the TOP functions with the most hot lines, then the TOP with the
most atomic read-modify-writes (names need symbols: a profiling build, not
the stripped release binary; code inlined into a function counts as its).
"""

import collections
import re
import subprocess
import sys

NAMED = re.compile(r"(c?(?:ob|fn|fl|fi|fe))=\((\d+)\)(?: (.*))?")


def load(path):
    """Self cost per (object, address), and the function of each address."""
    cost = collections.defaultdict(lambda: [0, 0])  # Ir, I1mr
    func = {}
    names = {}
    ob = fn = None
    addr = 0
    after_call = False
    order = None
    for line in open(path, errors="replace"):
        c = line[:1]
        if c in "0123456789+-*":
            p = line.split()
            a = p[0]
            if a.startswith("0x"):
                addr = int(a, 16)
            elif a[0] == "+":
                addr += int(a[1:], 0)
            elif a[0] == "-":
                addr -= int(a[1:], 0)
            if after_call:
                # The cost line after `calls=` is the callee's, inclusive.
                after_call = False
                continue
            v = [int(x) for x in p[2:]]
            entry = cost[(ob, addr)]
            entry[0] += v[order[0]] if len(v) > order[0] else 0
            entry[1] += v[order[1]] if len(v) > order[1] else 0
            func[(ob, addr)] = fn
        elif line.startswith("calls="):
            after_call = True
        elif line.startswith("events:"):
            ev = line.split()[1:]
            order = (ev.index("Ir"), ev.index("I1mr"))
        else:
            m = NAMED.match(line.strip())
            if not m:
                continue
            kind, num, name = m.groups()
            key = kind.lstrip("c")[:2] + num
            if name:
                names[key] = name
            if kind == "ob":
                ob = names.get(key)
            elif kind == "fn":
                fn = names.get(key)
    return cost, func


def atomics(path):
    """Addresses of the atomic read-modify-write instructions in object `path`."""
    try:
        out = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", path],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    found = set()
    for line in out.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\t(.*)", line)
        if m and (re.search(r"\block\b", m.group(2)) or re.match(r"xchg\s.*\(", m.group(2))):
            found.add(int(m.group(1), 16))
    return found


def main():
    short, long_, conns = sys.argv[1], sys.argv[2], int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if conns <= 0:
        sys.exit("footprint.py: the long run made no more than the short one")
    a, _ = load(short)
    b, func = load(long_)
    per = {k: (v[0] - a.get(k, [0, 0])[0], v[1] - a.get(k, [0, 0])[1]) for k, v in b.items()}
    ir = sum(d[0] for d in per.values()) / conns
    i1 = sum(d[1] for d in per.values()) / conns
    hot = [k for k, d in per.items() if d[0] >= conns / 2]
    lines = {(ob, addr // 64) for ob, addr in hot}
    # callgrind gives addresses as each object's own (its load offset taken
    # off), which are objdump's.
    rmw = 0.0
    rmw_fn = collections.Counter()
    for ob in {ob for ob, _ in per if ob}:
        at = atomics(ob)
        for (o, addr), d in per.items():
            if o == ob and addr in at:
                rmw += d[0] / conns
                rmw_fn[func.get((o, addr))] += d[0] / conns
    # Rounded to whole numbers (a count a hair under zero is noise: 0).
    print(f"{round(ir)} {round(i1)} {len(lines)} {round(rmw)}")
    if top:
        byfn = collections.defaultdict(set)
        for k in hot:
            byfn[func.get(k)].add(k[1] // 64)
        for f, s in sorted(byfn.items(), key=lambda x: -len(x[1]))[:top]:
            print(f"  {len(s):4d} lines  {f}", file=sys.stderr)
        for f, n in rmw_fn.most_common(top):
            if round(n):
                print(f"  {round(n):4d} atomics  {f}", file=sys.stderr)


if __name__ == "__main__":
    main()
