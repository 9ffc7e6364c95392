#!/usr/bin/env python3
"""oi's Debian package under a real systemd (252 on Debian 12) booted as PID 1.

    tests/systemd/run.py [PACKAGE.deb]      (default: the newest target/debian/oxidinetd_*.deb)

Boots systemd in namespaces and a root of its own (boot.py: an overlay over the
host's /, which stays untouched), installs the package there with dpkg, and
runs the cases of cases.py through systemctl: start (READY=1, user oi, port 79,
the sandbox, `systemd-analyze security`), reload, restart with no connection
refused, the package's upgrade through `oi upgrade`, socket activation, a
transparent rule, `systemd-analyze verify`; the watchdog (a stopped process, then
one stopped thread, killed and restarted with the stored listeners).

Needs root, util-linux, overlayfs, a cgroup2 hierarchy and systemd installed.
Where the machine lacks one, it says why and exits 0, unless OI_REQUIRE_TOOLS
is set (CI sets it): then it exits 1.
"""

import glob
import os
import subprocess
import sys
import time
import traceback

# No __pycache__ in the source tree (CI's tree, a developer's git status).
sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import boot  # noqa: E402


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--cases":
        return cases(int(sys.argv[2]), sys.argv[3:])
    debs = sys.argv[1:] or sorted(glob.glob(os.path.join(REPO, "target/debian/oxidinetd_*.deb")),
                                  key=os.path.getmtime)[-1:]
    target = os.path.abspath(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")))
    base = os.path.join(target, "systemd-test")
    why = "needs root (namespaces, mounts, cgroups)" if os.geteuid() != 0 else boot.unavailable(base)
    why = why or (None if debs else "no package: run dist/build-deb.sh first")
    if why:
        if os.environ.get("OI_REQUIRE_TOOLS"):
            print(f"systemd test: {why}, and OI_REQUIRE_TOOLS is set", file=sys.stderr)
            return 1
        print(f"skipped: the systemd test {why}")
        return 0
    system = boot.System(base)
    started = time.monotonic()
    try:
        try:
            seconds = system.boot()
        except Exception:
            print(f"systemd did not boot:\n{system.console_tail()}", file=sys.stderr)
            raise
        print(f"booted systemd as PID 1 (host pid {system.pid}) in {seconds:.2f} s; "
              f"{len(system.masked)} units masked", flush=True)
        # The cases' backends and clients live in the booted system's network
        # namespace: run them there (the host's files stay visible).
        rc = subprocess.run(["nsenter", f"--net=/proc/{system.pid}/ns/net", "--",
                             sys.executable, os.path.abspath(__file__), "--cases", str(system.pid)]
                            + [os.path.abspath(d) for d in debs]).returncode
    finally:
        system.kill()
    print(f"systemd test took {time.monotonic() - started:.1f} s (boot {system.boot_seconds or 0:.2f} s)")
    return rc


def cases(pid, debs):
    from cases import Cases

    system = boot.System.attach(pid)
    c = Cases(system, debs)
    failed = []
    for name, case in c.all():
        started = time.monotonic()
        try:
            outcome = case()
        except Exception as e:  # noqa: BLE001: every failure is reported, then the next case runs
            failed.append(name)
            print(f"FAIL {name} ({time.monotonic() - started:.1f} s): {e}", flush=True)
            traceback.print_exc()
            print(c.diagnostics(), flush=True)
            if name.startswith("install"):
                break
            continue
        if outcome:
            print(f"skip {name}: {outcome}", flush=True)
        else:
            print(f"ok {name} ({time.monotonic() - started:.1f} s)", flush=True)
    if failed:
        print(f"systemd test: {len(failed)} case(s) failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
