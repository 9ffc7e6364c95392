#!/usr/bin/env python3
"""Checks that oi's system calls all pass the unit's SystemCallFilter=.

Runs oi under `strace -f -c` through every feature the unit must allow (TCP with
splice and with copying, UDP to UDP, UDP to TCP, TCP to UDP, a port below 1024,
service names, host names and a DNS lookup, the connection log, a pid file,
sd_notify, SIGHUP reloads, good and bad, and SIGTERM with --drain), also
`oi --check` (what ExecStartPre= runs, and ExecReload='s `oi reload` when
no control socket answers; its control socket path runs under the real
filter in tests/systemd, case 2), then expands the
filter of the unit file with `systemd-analyze syscall-filter` and lists every
system call oi made that the filter would refuse.

    dist/syscall-audit.py target/release/oi dist/oi.service

Needs root (for unshare and the port below 1024), strace, systemd-analyze and
python3. Everything runs in a fresh network namespace with only loopback, so
the DNS lookup of a name that does not exist sends nothing off the machine.
Exits 1 if a system call would be refused.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def filter_groups():
    """Every @group of `systemd-analyze syscall-filter`, as group -> items."""
    out = subprocess.run(
        ["systemd-analyze", "syscall-filter"], check=True, capture_output=True, text=True
    ).stdout
    groups, cur = {}, None
    for line in out.splitlines():
        if line.startswith("@"):
            cur = groups.setdefault(line.split()[0], [])
        elif cur is not None and line.strip() and not line.strip().startswith("#"):
            cur.append(line.split()[0])
    return groups


def expand(items, groups):
    names, todo = set(), list(items)
    while todo:
        item = todo.pop()
        if item.startswith("@"):
            todo.extend(groups.get(item, []))
        else:
            names.add(item)
    return names


def allowed_syscalls(unit):
    """The set the unit's SystemCallFilter= lines allow (allow-list mode only)."""
    groups = filter_groups()
    allowed, mode = set(), None
    for line in open(unit):
        m = re.match(r"\s*SystemCallFilter=(.*)", line)
        if not m:
            continue
        spec = m.group(1).strip()
        deny = spec.startswith("~")
        items = spec.lstrip("~").split()
        if mode is None:
            mode = "deny" if deny else "allow"
            if deny:
                sys.exit(f"{unit}: first SystemCallFilter= is a deny list; not handled")
        if deny:
            allowed -= expand(items, groups)
        else:
            allowed |= expand(items, groups)
    if mode is None:
        sys.exit(f"{unit}: no SystemCallFilter=")
    return allowed


CALL = re.compile(r"^\d+\s+(?:<\.\.\. )?(\w+)(\(| resumed>)")
PATH_CALLS = {"open", "openat", "openat2", "stat", "lstat", "newfstatat", "statx",
              "access", "faccessat", "faccessat2", "readlink", "readlinkat", "execve",
              "mkdir", "mkdirat", "unlink", "unlinkat", "rename", "renameat", "renameat2"}


def read_trace(path, counts, paths):
    """Adds a `strace -f` log's calls to counts (name -> [calls, errors]) and
    the paths it named to paths (path -> set of open flags)."""
    for line in open(path, errors="replace"):
        m = CALL.match(line)
        if not m:
            continue
        name = m.group(1)
        c = counts.setdefault(name, [0, 0])
        if m.group(2) == "(":
            c[0] += 1
        elif "unfinished" in line:
            continue
        if re.search(r"\) += -1 E", line) or re.search(r"resumed>.* = -1 E", line):
            c[1] += 1
        if name in PATH_CALLS and m.group(2) == "(":
            q = re.search(r'"([^"]*)"', line)
            if q:
                flags = re.findall(r"O_[A-Z]+", line)
                paths.setdefault(q.group(1), set()).update(flags)


def free_port(kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tcp_echo(port):
    srv = socket.create_server(("127.0.0.1", port))

    def serve(c):
        with c:
            while data := c.recv(65536):
                c.sendall(data)

    def loop():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def udp_echo(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", port))

    def loop():
        while True:
            data, peer = s.recvfrom(65536)
            s.sendto(data, peer)

    threading.Thread(target=loop, daemon=True).start()


def tcp_roundtrip(host, port, size, family=socket.AF_INET):
    with socket.socket(family, socket.SOCK_STREAM) as c:
        c.settimeout(10)
        c.connect((host, port))
        payload = os.urandom(size)
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)
        got = b""
        while len(got) < size and (data := c.recv(65536)):
            got += data
        assert got == payload, f"tcp {host}:{port}: {len(got)} of {size} bytes echoed"


def tcp_to_udp(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"ping over tcp")
        assert c.recv(100) == b"ping over tcp"


def udp_roundtrip(port, n):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.settimeout(10)
        for i in range(n):
            msg = b"datagram %d" % i
            u.sendto(msg, ("127.0.0.1", port))
            assert u.recvfrom(65536)[0] == msg


def wait_listening(port, family=socket.AF_INET, host="127.0.0.1"):
    for _ in range(200):
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"oi never listened on {host} port {port}")


def workload(oi, tmp):
    echo_tcp, echo_udp = free_port(), free_port(socket.SOCK_DGRAM)
    tcp_echo(echo_tcp)
    udp_echo(echo_udp)
    p = [free_port() for _ in range(7)]
    conf = os.path.join(tmp, "audit.conf")
    rules = f"""
allow 127.0.0.0/8
allow ::1
logfile {tmp}/oi.log
pidlogfile {tmp}/oi.pid
127.0.0.1 {p[0]} 127.0.0.1 {echo_tcp} [splice=on]
127.0.0.1 {p[1]} 127.0.0.1 {echo_tcp} [splice=off]
127.0.0.1 {p[2]}/udp 127.0.0.1 {echo_udp}/udp [timeout=1]
127.0.0.1 {p[3]}/udp 127.0.0.1 {echo_tcp}/tcp [timeout=1]
127.0.0.1 {p[4]} 127.0.0.1 {echo_udp}/udp
localhost {p[5]} localhost {echo_tcp} [src=127.0.0.1]
::1 {p[6]} 127.0.0.1 {echo_tcp}
127.0.0.1 finger 127.0.0.1 {echo_tcp}
"""
    open(conf, "w").write(rules)
    notify = os.path.join(tmp, "notify.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(notify)
    env = dict(os.environ, NOTIFY_SOCKET=notify, RUST_LOG="debug")
    trace = os.path.join(tmp, "strace.txt")
    cmd = ["strace", "-f", "-qq", "-o", trace, oi, "-c", conf, "--drain", "1"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    pid = None
    try:
        ns.settimeout(20)
        assert b"READY=1" in ns.recv(4096), "no READY=1"
        # Signals go to oi itself, not to strace: its pid is in the pid file.
        pid = int(open(os.path.join(tmp, "oi.pid")).read())
        drive(pid, conf, p)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
    counts, paths = {}, {}
    read_trace(trace, counts, paths)
    # What ExecStartPre= runs (and ExecReload='s fallback), on the file with the bad name.
    check_trace = os.path.join(tmp, "strace-check.txt")
    subprocess.run(
        ["strace", "-f", "-qq", "-o", check_trace, oi, "--check", "-c", conf],
        capture_output=True,
    )
    read_trace(check_trace, counts, paths)
    return counts, {p.replace(tmp, "$TMP"): f for p, f in paths.items()}


def drive(pid, conf, p):
    """Traffic through every rule, two reloads, then SIGTERM."""
    wait_listening(p[0])
    for _ in range(3):
        tcp_roundtrip("127.0.0.1", p[0], 4 << 20)
        tcp_roundtrip("127.0.0.1", p[1], 4 << 20)
        tcp_roundtrip("127.0.0.1", p[5], 64 << 10)
        tcp_roundtrip("::1", p[6], 64 << 10, socket.AF_INET6)
        tcp_roundtrip("127.0.0.1", 79, 1000)
    threads = [
        threading.Thread(target=tcp_roundtrip, args=("127.0.0.1", p[i % 2], 1 << 20))
        for i in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    udp_roundtrip(p[2], 50)
    udp_roundtrip(p[3], 5)
    tcp_to_udp(p[4])
    time.sleep(2.5)  # UDP associations idle out
    # A good reload, then one that fails on a name DNS cannot resolve.
    os.kill(pid, signal.SIGHUP)
    time.sleep(1)
    tcp_roundtrip("127.0.0.1", p[0], 1000)
    with open(conf, "a") as f:
        f.write("127.0.0.1 9 oi-syscall-audit.invalid 80\n")
    os.kill(pid, signal.SIGHUP)
    time.sleep(2)
    tcp_roundtrip("127.0.0.1", p[0], 1000)
    os.kill(pid, signal.SIGTERM)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    oi, unit = os.path.abspath(sys.argv[1]), sys.argv[2]
    if os.environ.get("OI_AUDIT_NETNS") != "1":
        # Re-run inside a new network namespace with only loopback up.
        script = "ip link set lo up && exec python3 " + " ".join(
            map(repr, [os.path.abspath(__file__), oi, unit])
        )
        env = dict(os.environ, OI_AUDIT_NETNS="1")
        sys.exit(subprocess.run(["unshare", "-n", "sh", "-c", script], env=env).returncode)
    allowed = allowed_syscalls(unit)
    with tempfile.TemporaryDirectory() as tmp:
        counts, paths = workload(oi, tmp)
    print("paths used (the unit must leave these readable; writable where O_WRONLY/O_RDWR/O_CREAT):")
    for p in sorted(paths):
        print(f"  {p} {' '.join(sorted(paths[p]))}")
    refused = sorted(n for n in counts if n not in allowed)
    print(f"{len(counts)} distinct system calls made; filter allows {len(allowed)}")
    print("made: " + " ".join(f"{n}({counts[n][0]})" for n in sorted(counts)))
    if refused:
        for n in refused:
            print(f"REFUSED by the filter: {n} ({counts[n][0]} calls, {counts[n][1]} errors)")
        sys.exit(1)
    print("every system call is allowed by " + unit)


if __name__ == "__main__":
    main()
