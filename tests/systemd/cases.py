"""The cases, each driven through systemctl in the booted system. Runs in its
network namespace (run.py starts this file under nsenter --net), so the
backends and clients here share its loopback with oi."""

import json
import os
import re
import time

import freeze
from net import PATIENCE, Backend, Client, ConnectLoop, Stream, exchange

CONF = "/etc/rinetd.conf"
DROPINS = "/etc/systemd/system/oi.service.d"
SOCKET_UNIT = "/etc/systemd/system/oi.socket"
# The README's capability line for [transparent] rules.
TRANSPARENT_DROPIN = """[Service]
AmbientCapabilities=CAP_NET_BIND_SERVICE CAP_NET_ADMIN
CapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_NET_ADMIN
"""
# Highest `systemd-analyze security` exposure the unit may have.
MAX_EXPOSURE = 2.0


class Cases:
    """The cases in the order all() gives; each leaves oi in a state the
    next one's fresh() resets."""

    def __init__(self, system, debs):
        self.sys = system
        self.debs = debs
        self.a = Backend("A")
        self.b = Backend("B")
        self.exposure = None

    # Helpers -------------------------------------------------------------

    def sh(self, *argv, check=True, timeout=60):
        return self.sys.run(list(argv), check=check, timeout=timeout)

    def write(self, path, text, mode=0o644):
        host = self.sys.root(path)
        os.makedirs(os.path.dirname(host), exist_ok=True)
        with open(host, "w") as f:
            f.write(text)
        os.chmod(host, mode)

    def remove(self, path):
        try:
            os.unlink(self.sys.root(path))
        except FileNotFoundError:
            pass

    def conf(self, rules, logfile="/var/log/rinetd.log"):
        self.write(CONF, f"logfile {logfile}\n" + "".join(r + "\n" for r in rules))

    def show(self, prop, unit="oi.service"):
        return self.sh("systemctl", "show", "-P", prop, unit).stdout.strip()

    def cursor(self):
        out = self.sh("journalctl", "-n", "0", "--show-cursor", "-q").stdout
        m = re.search(r"^-- cursor: (.*)$", out, re.M)
        return m.group(1) if m else None

    def journal(self, cursor, *match):
        argv = ["journalctl", "--no-pager", "-o", "cat"]
        if cursor:
            argv.append(f"--after-cursor={cursor}")
        return self.sh(*argv, *match, check=False).stdout

    def fresh(self, rules, dropins=None, logfile="/var/log/rinetd.log"):
        """oi stopped, the given configuration and drop-ins, then started."""
        self.sh("systemctl", "stop", "oi.socket", "oi.service", check=False)
        self.sh("systemctl", "reset-failed", "oi.service", check=False)
        for name in os.listdir(self.sys.root(DROPINS)) if os.path.isdir(self.sys.root(DROPINS)) else []:
            self.remove(f"{DROPINS}/{name}")
        for name, text in (dropins or {}).items():
            self.write(f"{DROPINS}/{name}", text)
        self.sh("systemctl", "daemon-reload")
        self.conf(rules, logfile)
        self.sh("systemctl", "start", "oi.service")

    def wait_for(self, ready, what, timeout=PATIENCE):
        """Polls `ready` until it holds; fails naming `what` after `timeout` s."""
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout} s")
            time.sleep(0.05)

    def rule(self, backend, port=79, extra=""):
        return f"127.0.0.1 {port} 127.0.0.1 {backend.port}{extra}"

    def note(self, line):
        print(f"    {line}", flush=True)

    def diagnostics(self):
        return self.sh("journalctl", "--no-pager", "-n", "60", "-u", "oi.service", "-u", "oi.socket",
                       check=False).stdout

    # Cases ---------------------------------------------------------------

    def install(self):
        """dpkg -i the package: the user, the log file (tmpfiles), the unit."""
        # Whatever the host's own / (the lower layer) holds, the package must
        # install afresh and create these: removed in the booted root only.
        self.sh("dpkg", "--purge", "oxidinetd", timeout=120)
        if self.sh("id", "oi", check=False).returncode == 0:
            self.sh("userdel", "oi")
        self.remove("/var/log/rinetd.log")
        os.makedirs(self.sys.root("/var/cache/oi-test"), exist_ok=True)
        with open(self.debs[0], "rb") as src, open(self.sys.root("/var/cache/oi-test/oi.deb"), "wb") as dst:
            dst.write(src.read())
        self.sh("dpkg", "-i", "/var/cache/oi-test/oi.deb", timeout=120)
        user = self.sh("id", "-un", "oi", check=False)
        assert user.returncode == 0, f"postinst made no user oi: {user.stderr}"
        log = self.sh("stat", "-c", "%U:%G %a", "/var/log/rinetd.log", check=False).stdout.strip()
        assert log == "oi:adm 640", f"/var/log/rinetd.log should be oi:adm 640 (tmpfiles), is {log!r}"
        self.note(f"installed {self.sh('dpkg-query', '-W', 'oxidinetd').stdout.strip()}; "
                  "user oi; /var/log/rinetd.log oi:adm 640")

    def verify(self):
        """8: systemd-analyze verify on every unit file shipped."""
        units = self.sh("dpkg-query", "-L", "oxidinetd").stdout.split()
        shipped = [u for u in units if re.search(r"\.(service|socket|timer|target|path|mount)$", u)]
        assert "/lib/systemd/system/oi.service" in shipped, f"no oi.service among {shipped}"
        assert any(u.endswith("/oi.socket") for u in shipped), f"no oi.socket among {shipped}"
        for unit in shipped:
            v = self.sh("systemd-analyze", "verify", unit, check=False)
            assert v.returncode == 0 and not v.stderr.strip(), f"verify {unit}: {v.stdout}{v.stderr}"
        self.note(f"verified, no warning: {' '.join(shipped)}")

    def start(self):
        """1: start: active only after READY=1; port 79 as user oi; sandbox; exposure."""
        self.fresh([])
        self.sh("systemctl", "stop", "oi.service")
        self.conf([self.rule(self.a)])
        cursor = self.cursor()
        self.sh("systemd-analyze", "log-level", "debug")
        try:
            self.sh("systemctl", "start", "oi.service")
        finally:
            self.sh("systemd-analyze", "log-level", "info")
        # No retry: the listener serves the moment `systemctl start` returns.
        assert exchange(79) == "A", "port 79 did not reach backend A"
        lines = self.journal(cursor, "_PID=1").splitlines()
        ready = next((i for i, l in enumerate(lines) if l.startswith("oi.service: Got notification") and "READY=1" in l), None)
        running = next((i for i, l in enumerate(lines) if "oi.service: Changed start -> running" in l), None)
        assert ready is not None and running is not None and ready < running, \
            "systemd did not log READY=1 before start -> running:\n" + "\n".join(lines[-30:])
        pid = self.show("MainPID")
        user = self.sh("ps", "-o", "user=", "-p", pid).stdout.strip()
        assert user == "oi", f"oi runs as {user!r}"
        status = self.sh("cat", f"/proc/{pid}/status").stdout
        cap_eff = re.search(r"^CapEff:\s*(\w+)", status, re.M).group(1)
        assert int(cap_eff, 16) == 1 << 10, f"CapEff {cap_eff}: only CAP_NET_BIND_SERVICE expected"
        assert re.search(r"^NoNewPrivs:\s*1$", status, re.M), "NoNewPrivs is not set"
        mountinfo = self.sh("cat", f"/proc/{pid}/mountinfo").stdout
        root = next(l for l in mountinfo.splitlines() if l.split()[4] == "/")
        assert "ro" in root.split()[5].split(","), f"/ is not read-only for oi: {root}"
        log = self.sh("cat", "/var/log/rinetd.log").stdout
        assert "\t79\t" in log, f"no connection line in /var/log/rinetd.log: {log!r}"
        self.note(f"READY=1 then start -> running; MainPID {pid} user oi CapEff {cap_eff} NoNewPrivs; "
                  "/ read-only in its mountinfo; logged to /var/log/rinetd.log")
        # A log file oi's user may write, outside the unit's writable paths.
        self.sh("install", "-d", "-o", "oi", "-g", "oi", "/var/lib/oi-sandbox")
        cursor = self.cursor()
        self.fresh([self.rule(self.a)], logfile="/var/lib/oi-sandbox/oi.log")
        assert exchange(79) == "A"
        said = self.journal(cursor, "-u", "oi.service")
        assert "cannot open log file /var/lib/oi-sandbox/oi.log: Read-only file system" in said, said
        assert not os.path.exists(self.sys.root("/var/lib/oi-sandbox/oi.log"))
        self.note("logfile /var/lib/oi-sandbox/oi.log (owned by oi): Read-only file system")
        sec = self.sh("systemd-analyze", "security", "--no-pager", "oi.service").stdout
        m = re.search(r"Overall exposure level for oi.service: ([\d.]+) (\S+)", sec)
        assert m, sec
        self.note(f"systemd-analyze security oi.service: {m.group(1)} {m.group(2)}")
        self.exposure = float(m.group(1))
        assert self.exposure <= MAX_EXPOSURE, sec

    def reload(self):
        """2: reload: `systemctl reload` runs `oi reload` and returns once oi has
        answered: a broken file fails with its FILE:LINE errors in the journal and
        `systemctl status`, and A keeps serving; after a good one the very next
        connection reaches B; an open connection lives; MainPID stays. Then oi
        started without --socket (an admin's drop-in): the file is checked and
        SIGHUP sent instead."""
        self.fresh([self.rule(self.a)])
        pid = self.show("MainPID")
        held = Client(79)
        held.echo()
        assert held.tag == "A"
        broken_conf = "logfile /var/log/rinetd.log\n127.0.0.1 79 127.0.0.1 not-a-port\n"
        where = f"{CONF}:2: "

        def entries(cursor):
            return [json.loads(l) for l in self.journal(cursor, "-u", "oi.service", "-o", "json").splitlines()
                    if l.startswith("{")]

        def said_by_reload(cursor, main, text):
            """Messages holding `text` from the unit's processes other than `main`: ExecReload's."""
            return [e["MESSAGE"] for e in entries(cursor)
                    if e.get("_PID") not in (None, main) and text in str(e.get("MESSAGE", ""))]

        self.write(CONF, broken_conf)
        cursor = self.cursor()
        broken = self.sh("systemctl", "reload", "oi.service", check=False)
        assert broken.returncode != 0, "systemctl reload accepted a broken file"
        assert exchange(79) == "A", "the old rule stopped serving after a refused reload"
        assert self.show("ActiveState") == "active" and self.show("MainPID") == pid
        # journald reads ExecReload's stderr stream on its own time: wait for it, not for oi.
        self.wait_for(lambda: said_by_reload(cursor, pid, where), f"ExecReload's '{where}...' line in the journal")
        error = said_by_reload(cursor, pid, where)[0]
        assert "not-a-port" in error, error
        status = self.sh("systemctl", "status", "--no-pager", "-n", "20", "oi.service", check=False).stdout
        assert where in status, f"systemctl status does not show the error:\n{status}"
        self.conf([self.rule(self.b)])
        cursor = self.cursor()
        started = time.monotonic()
        self.sh("systemctl", "reload", "oi.service")
        took = time.monotonic() - started
        # No retry and no wait for the journal: the connection right after
        # `systemctl reload` returned must get the new rule.
        first = exchange(79)
        assert first == "B", f"the first connection after `systemctl reload` returned reached {first}, not B"
        self.wait_for(lambda: said_by_reload(cursor, pid, "reloaded: serving 1 rule(s)"),
                      "ExecReload's 'reloaded: serving 1 rule(s)' in the journal")
        held.echo(b"still here")
        held.close()
        assert self.show("MainPID") == pid
        self.note(f"broken file: systemctl reload exit {broken.returncode}, A still served, journal and "
                  f"systemctl status: {error!r}; good file: systemctl reload took {took:.2f} s and the first "
                  f"connection after it reached B; the connection opened before both reloads still echoes; "
                  f"MainPID {pid} throughout")

        # An admin's drop-in that starts oi without --socket: `oi reload` finds
        # no control socket, checks the file and sends $MAINPID SIGHUP.
        nosocket = "[Service]\nExecStart=\nExecStart=/usr/sbin/oi -c ${OI_CONF}\n"
        self.fresh([self.rule(self.a)], dropins={"nosocket.conf": nosocket})
        pid = self.show("MainPID")
        assert not os.path.exists(self.sys.root("/run/oi/control.sock")), "the drop-in left a control socket"
        cursor = self.cursor()
        self.write(CONF, broken_conf)
        broken = self.sh("systemctl", "reload", "oi.service", check=False)
        assert broken.returncode != 0, "without the control socket, systemctl reload accepted a broken file"
        assert exchange(79) == "A", "the old rule stopped serving after a refused reload"
        self.conf([self.rule(self.b)])
        self.sh("systemctl", "reload", "oi.service")
        # The old way: the reload completes after `systemctl reload` returned.
        self.wait_for(lambda: f"reloaded {CONF}: serving" in self.journal(cursor, "-u", "oi.service"),
                      f"'reloaded {CONF}' in the journal")
        assert exchange(79) == "B", "the reloaded rule does not serve"
        assert self.show("MainPID") == pid and self.show("ActiveState") == "active"
        by_oi = [str(e.get("MESSAGE")) for e in entries(cursor) if e.get("_PID") == pid]
        reloads = [m for m in by_oi if f"reloaded {CONF}" in m or "reload failed" in m]
        assert len(reloads) == 1, f"oi should have reloaded once, the broken file never signalled: {reloads}"
        assert said_by_reload(cursor, pid, where), "the broken file's errors are not in the journal"
        assert said_by_reload(cursor, pid, f"sent pid {pid} SIGHUP"), "no 'sent pid ... SIGHUP' in the journal"
        self.note(f"without --socket (drop-in): broken file refused (exit {broken.returncode}) before any "
                  f"signal, A served; good file: SIGHUP to MainPID {pid}, then B served")

    def restart(self):
        """3: restart under a connect loop: no connection refused (fd store)."""
        self.fresh([self.rule(self.a)])
        stored = int(self.show("NFileDescriptorStore") or 0)
        assert stored >= 1, "oi stored no listener with systemd (FDSTORE)"
        old = self.show("MainPID")
        cursor = self.cursor()
        loop = ConnectLoop(79)
        try:
            loop.wait_ok(20)
            before = loop.ok
            started = time.monotonic()
            self.sh("systemctl", "restart", "oi.service")
            took = time.monotonic() - started
            loop.wait_ok(loop.ok + 20)
        finally:
            loop.finish()
        new = self.show("MainPID")
        assert new != old, "MainPID did not change"
        # One connection at a time: at most the one in flight as the old oi
        # stopped is cut (a restart is not an upgrade); none may be refused.
        assert loop.refused == 0 and len(loop.failed) <= 1, \
            f"{loop.refused} refused, failures: {loop.failed[:5]}"
        said = self.journal(cursor, "-u", "oi.service")
        assert "127.0.0.1:79/tcp: serving the passed descriptor" in said, \
            f"the new oi did not take the stored listener:\n{said}"
        self.note(f"{stored} descriptor(s) stored; restart took {took:.2f} s; {loop.ok} exchanges "
                  f"({loop.ok - before} from the restart on), 0 refused, {len(loop.failed)} cut in flight "
                  f"{loop.failed}, slowest {loop.slowest * 1000:.0f} ms; "
                  f"MainPID {old} -> {new}, which took the stored listener")

    def upgrade(self):
        """4: dpkg -i of a newer build runs oi upgrade: active, new MainPID, the stream survives."""
        self.fresh([self.rule(self.a)])
        # The same package with a higher version, repacked inside the booted root.
        self.sh("rm", "-rf", "/tmp/repack")
        self.sh("dpkg-deb", "-R", "/var/cache/oi-test/oi.deb", "/tmp/repack")
        version = self.sh("dpkg-deb", "-f", "/var/cache/oi-test/oi.deb", "Version").stdout.strip()
        newer = f"{version}+systemdtest1"
        control = self.sys.root("/tmp/repack/DEBIAN/control")
        with open(control) as f:
            text = f.read()
        with open(control, "w") as f:
            f.write(re.sub(r"^Version: .*$", f"Version: {newer}", text, flags=re.M))
        self.sh("dpkg-deb", "-b", "/tmp/repack", "/var/cache/oi-test/oi-newer.deb")
        old = self.show("MainPID")
        stream = Stream(79)
        try:
            stream.wait_bytes(1 << 20)
            before = stream.bytes
            cursor = self.cursor()
            dpkg = self.sh("dpkg", "-i", "/var/cache/oi-test/oi-newer.deb", timeout=120)
            stream.wait_bytes(stream.bytes + (4 << 20))
        finally:
            total, sent, received = stream.finish()
        assert "oi upgrade failed" not in dpkg.stdout + dpkg.stderr, f"postinst: {dpkg.stdout}{dpkg.stderr}"
        installed = self.sh("dpkg-query", "-W", "-f", "${Version}", "oxidinetd").stdout.strip()
        assert installed == newer, f"installed {installed}, expected {newer}"
        new = self.show("MainPID")
        assert self.show("ActiveState") == "active", self.show("ActiveState")
        assert new != old, f"MainPID is still {old}: {dpkg.stdout}{dpkg.stderr}"
        exe = self.sh("readlink", f"/proc/{new}/exe").stdout.strip()
        assert exe == "/usr/sbin/oi", f"MainPID {new} runs {exe}"
        said = self.journal(cursor, "-u", "oi.service")
        assert f"upgraded: oi pid {new} serves now" in said, f"no hand-over to {new} in the journal:\n{said}"
        assert "Stopping oi.service" not in self.journal(cursor, "_PID=1"), "the package restarted oi"
        gone = self.sh("kill", "-0", old, check=False).returncode != 0
        assert gone, f"the old oi {old} still runs"
        assert sent == received, f"stream sha256 differs: sent {sent}, received {received}"
        assert exchange(79) == "A"
        self.note(f"{version} -> {installed}: postinst's oi upgrade handed over (journal: 'upgraded: oi pid "
                  f"{new} serves now'), no restart; MainPID {old} -> {new} ({exe}), old one gone, still active; "
                  f"stream {total} bytes ({total - before} after the upgrade began), sha256 {sent[:16]}... both ways")

    def socket_activation(self):
        """5: oi.socket: the first connection starts oi and is served."""
        self.fresh([self.rule(self.a)])
        self.sh("systemctl", "stop", "oi.service")
        with open(self.sys.root("/usr/share/doc/oxidinetd/examples/oi.socket")) as f:
            example = f.read()
        unit, n = re.subn(r"^ListenStream=0\.0\.0\.0:8080$", "ListenStream=127.0.0.1:79", example, flags=re.M)
        assert n == 1, "the example's ListenStream line changed: update this test"
        self.write(SOCKET_UNIT, unit)
        try:
            self.sh("systemctl", "daemon-reload")
            self.sh("systemctl", "start", "oi.socket")
            assert self.show("ActiveState") == "inactive", "oi.service started before any connection"
            cursor = self.cursor()
            assert exchange(79) == "A", "the activating connection was not served"
            assert self.show("ActiveState") == "active"
            said = self.journal(cursor, "-u", "oi.service")
            assert "serving the passed descriptor" in said, said
            self.note("oi.service inactive until the first connection on oi.socket's 127.0.0.1:79, "
                      "which it served from the passed descriptor")
        finally:
            self.sh("systemctl", "stop", "oi.socket", "oi.service", check=False)
            self.remove(SOCKET_UNIT)
            self.sh("systemctl", "daemon-reload")

    def transparent(self):
        """6: a [transparent] rule under the sandbox with the README's capability line."""
        back = Backend("T", host="127.0.0.2")
        rule = f"127.0.0.1 81 127.0.0.2 {back.port} [transparent]"
        self.fresh([rule])
        try:
            refused = exchange(81, source="127.0.0.3")
        except OSError as e:
            refused = repr(e)
        assert refused != "T", "transparent worked without CAP_NET_ADMIN: the control case is wrong"
        # The line is written as the connection ends, maybe after the client saw the close.
        self.wait_for(lambda: "local-socket-failed" in self.sh("cat", "/var/log/rinetd.log").stdout,
                      "a local-socket-failed line in /var/log/rinetd.log")
        self.fresh([rule], dropins={"transparent.conf": TRANSPARENT_DROPIN})
        assert exchange(81, source="127.0.0.3") == "T"
        assert back.peers[-1] == "127.0.0.3", f"the backend saw {back.peers[-1]}, not the client"
        self.note("as shipped: closed, local-socket-failed; with the README's AmbientCapabilities= and "
                  "CapabilityBoundingSet= lines: served, the backend saw the client's 127.0.0.3")

    def journal_priorities(self):
        """9: the journal: each line at its priority with OI_* fields, through
        journald's native protocol (JOURNAL_STREAM names oi's stderr)."""
        self.fresh([self.rule(self.a)])
        cursor = self.cursor()
        self.write(CONF, "logfile /var/log/rinetd.log\n127.0.0.1 79 127.0.0.1 not-a-port\n")
        # SIGHUP itself, whatever ExecReload checks first: oi's own refusal
        # is the line under test.
        self.sh("systemctl", "kill", "-s", "HUP", "--kill-who=main", "oi.service")
        self.wait_for(lambda: "reload-failed" in self.journal(cursor, "-u", "oi.service", "-o", "verbose"),
                      "an entry with OI_REASON=reload-failed")
        self.conf([self.rule(self.b)])
        self.sh("systemctl", "reload", "oi.service")
        self.wait_for(lambda: f"reloaded {CONF}: serving" in self.journal(cursor, "-u", "oi.service"),
                      f"'reloaded {CONF}' in the journal")
        errors = self.journal(cursor, "-u", "oi.service", "-p", "err").splitlines()
        assert errors and all("not-a-port" in e or "reload" in e for e in errors), \
            f"journalctl -p err should show the refused reload only: {errors}"
        assert not any("reloaded" in e for e in errors), f"a routine line at priority err: {errors}"
        entries = [json.loads(l) for l in self.journal(cursor, "-u", "oi.service", "-o", "json").splitlines()
                   if l.startswith("{")]
        failed = [e for e in entries if e.get("OI_REASON") == "reload-failed"]
        assert failed and all(e.get("PRIORITY") == "3" for e in failed), \
            f"the refused reload's entry: {failed or entries[-5:]}"
        assert all(e.get("SYSLOG_IDENTIFIER") == "oi" for e in failed), failed
        routine = [e for e in entries if "reloaded" in e.get("MESSAGE", "")]
        assert routine and all(e.get("PRIORITY") == "6" for e in routine), routine
        self.note(f"journalctl -p err -u oi: {len(errors)} line(s), the refused reload "
                  f"(PRIORITY=3, OI_REASON=reload-failed, CODE_FILE={failed[0].get('CODE_FILE')}); "
                  f"the reload that served at PRIORITY={routine[0].get('PRIORITY')}")

    def watchdog(self, force=False):
        """7: the watchdog at WatchdogSec=1s (a drop-in, so the case takes
        seconds whatever the unit's period): oi is pinged, not killed, for
        three periods. Then oi stuck twice, each time killed by systemd
        (Result=watchdog) and restarted with the stored listeners while a
        client connecting in a loop is refused by none: the whole process
        stopped (SIGSTOP), then one executor thread alone (ptrace), which
        only the per-thread heartbeats can see."""
        unit = self.sh("systemctl", "cat", "oi.service").stdout
        if not force and not re.search(r"^WatchdogSec=(?!0*\s*$|infinity)", unit, re.M):
            return "the unit sets no WatchdogSec= (the hook for it is cases.py watchdog)"
        # RestartSec=2s (the unit's is systemd's 100 ms): the failed run's
        # Result stays readable until the restart resets it, and clients
        # wait in the stored listener's queue that much longer.
        self.fresh([self.rule(self.a)], dropins={"watchdog.conf": "[Service]\nWatchdogSec=1s\nRestartSec=2s\n"})
        pid, restarts = self.show("MainPID"), int(self.show("NRestarts") or 0)
        first = int(self.show("WatchdogTimestampMonotonic") or 0)
        time.sleep(3)  # the behaviour under test is three watchdog periods passing
        assert self.show("MainPID") == pid and int(self.show("NRestarts") or 0) == restarts \
            and self.show("ActiveState") == "active", \
            f"the watchdog killed oi: {self.journal(None, '-u', 'oi.service', '-n', '10')}"
        last = int(self.show("WatchdogTimestampMonotonic") or 0)
        assert last > first, "no WATCHDOG=1 arrived"
        assert exchange(79) == "A"
        self.note(f"WatchdogSec=1s: MainPID {pid} for 3 s, last WATCHDOG=1 {(last - first) / 1e6:.2f} s after the first")
        stored = int(self.show("NFileDescriptorStore") or 0)
        assert stored >= 1, "oi stored no listener with systemd (FDSTORE)"

        def stop_all(pid):
            self.sh("kill", "-STOP", pid)
            return f"SIGSTOP to {pid}", None

        pid = self.stuck_then_restarted(pid, restarts + 1, stop_all)

        def stop_one_thread(pid):
            host = freeze.host_pid(self.sys.pid, pid)
            threads = len(os.listdir(f"/proc/{host}/task"))
            # Executor thread 1; with one executor thread, the main thread (0).
            try:
                name, tid = "oi-worker-1", freeze.thread_named(host, "oi-worker-1")
                said = "executor thread 1 (oi-worker-1) made no progress"
            except AssertionError:
                name, tid = "oi", freeze.thread_named(host, "oi")
                said = "executor thread 0 (the main thread) made no progress"
            frozen = freeze.Frozen(tid)
            return f"thread {name} of {pid} stopped (ptrace), its {threads - 1} others running", (frozen, said)

        self.stuck_then_restarted(pid, restarts + 2, stop_one_thread)
        return None

    def stuck_then_restarted(self, pid, restarts, stick):
        """Under a connect loop, `stick(pid)` makes oi stuck; checks that
        systemd kills it for the watchdog and that the oi it starts (restart
        number `restarts`) serves the stored listener; returns its MainPID."""
        cursor = self.cursor()
        loop = ConnectLoop(79)
        try:
            loop.wait_ok(20)
            before = loop.ok
            stopped = time.monotonic()
            what, frozen = stick(pid)
            # Polled, not slept: systemd's verdict, then a new main process.
            self.wait_for(lambda: self.show("Result") == "watchdog", f"Result=watchdog after {what}")
            killed = time.monotonic() - stopped
            self.wait_for(lambda: self.show("MainPID") not in ("0", pid) and self.show("ActiveState") == "active",
                          f"a new MainPID after {what}")
            took = time.monotonic() - stopped
            loop.wait_ok(loop.ok + 20)
        finally:
            loop.finish()
        new = self.show("MainPID")
        systemd = self.journal(cursor, "_PID=1")
        result = re.search(r"oi\.service: Failed with result '([^']*)'", systemd)
        assert result and result.group(1) == "watchdog", \
            f"systemd did not fail oi with result 'watchdog':\n{systemd}"
        timeout = next((l.strip() for l in systemd.splitlines() if "oi.service: Watchdog timeout" in l), None)
        assert timeout, systemd
        assert int(self.show("NRestarts") or 0) == restarts, \
            f"NRestarts {self.show('NRestarts')}, expected {restarts}"
        if frozen is not None:
            assert frozen[0].died.wait(PATIENCE), f"the stopped thread of {pid} did not die"
        gone = self.sh("kill", "-0", pid, check=False).returncode != 0
        assert gone, f"the stuck oi {pid} still exists"
        said = self.journal(cursor, "-u", "oi.service")
        assert "127.0.0.1:79/tcp: serving the passed descriptor" in said, \
            f"the restarted oi did not take the stored listener:\n{said}"
        if frozen is not None:
            assert frozen[1] in said, f"oi did not say '{frozen[1]}':\n{said}"
        # One connection at a time: at most the one a stuck thread had
        # accepted is cut; none may be refused.
        assert loop.refused == 0 and len(loop.failed) <= 1, \
            f"{loop.refused} refused, failures: {loop.failed[:5]}"
        self.note(f"{what}: '{timeout}', Result=watchdog {killed:.2f} s after (and {self.show('Result')!r} once "
                  f"restarted), NRestarts {restarts}, MainPID {pid} -> {new} {took:.2f} s after, serving the stored "
                  f"listener; {loop.ok} exchanges ({loop.ok - before} from then on), 0 refused, "
                  f"{len(loop.failed)} cut {loop.failed}, slowest {loop.slowest * 1000:.0f} ms"
                  + (f"; oi said '{frozen[1]}'" if frozen else ""))
        return new

    def all(self):
        return [
            ("install the package", self.install),
            ("8 systemd-analyze verify", self.verify),
            ("1 start", self.start),
            ("2 reload", self.reload),
            ("3 restart", self.restart),
            ("4 package upgrade", self.upgrade),
            ("5 socket activation", self.socket_activation),
            ("6 transparent", self.transparent),
            ("9 journal priorities and fields", self.journal_priorities),
            ("7 watchdog", self.watchdog),
        ]
