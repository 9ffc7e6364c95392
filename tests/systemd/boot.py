"""Boots a real systemd as PID 1 in namespaces of its own, over a root of its own.

The root is an overlayfs: the host's / as the read-only lower layer, upper
and work directories on a tmpfs mounted inside the private mount namespace
(so nothing written inside, dpkg's database included, ever reaches the host's
disk), with fresh tmpfs on /run, /tmp and /var/tmp, a /dev of its own (a
tmpfs with the harmless device nodes bound in), a fresh /proc, sysfs read-only
and a cgroup2 hierarchy rooted at a cgroup the harness creates (cgroup
namespace). The network namespace has only `lo`.

systemd must never start over the host's root: its boot-time tmpfiles once
emptied the host's shared /tmp. Here the root is pivoted before systemd runs,
the host's tree is detached, and every unit a stock boot would start is
masked besides journald; the default target is oi-test.target, which wants
journald alone.

It ends with SIGKILL to the namespace's PID 1 (an init ignores SIGTERM), whose
host pid the harness recorded; the kernel then kills everything in the PID
namespace, the mount namespace goes with its last process, and the cgroups
are removed.
"""

import os
import shutil
import signal
import subprocess
import time

# What runs as the namespace's PID 1 until it execs systemd: the new root, then
# pivot_root into it. $1 is the tmpfs mount point, $2 the directory of units
# (oi-test.target and the masks) to copy to the new /run/systemd/system.
SETUP = r"""
set -eu
base=$1
units=$2
mount --make-rprivate /
mount -t tmpfs -o mode=0755,size=1g oi-systemd-test "$base"
mkdir "$base/upper" "$base/work" "$base/root"
R=$base/root
mount -t overlay oi-systemd-test -o "lowerdir=/,upperdir=$base/upper,workdir=$base/work" "$R"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=0755,nosuid,size=4m oi-dev "$R/dev"
for node in null zero full random urandom tty; do
    touch "$R/dev/$node"
    mount --bind "/dev/$node" "$R/dev/$node"
done
mkdir "$R/dev/pts" "$R/dev/shm" "$R/dev/mqueue"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev oi-shm "$R/dev/shm"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
mount -t tmpfs -o mode=0755,nosuid,nodev,size=256m oi-run "$R/run"
mkdir -p "$R/run/systemd/system"
cp -a "$units/." "$R/run/systemd/system/"
mount -t tmpfs -o mode=1777,nosuid,nodev,size=256m oi-tmp "$R/tmp"
mount -t tmpfs -o mode=1777,nosuid,nodev,size=64m oi-var-tmp "$R/var/tmp"
hostname oi-systemd-test
if command -v ip >/dev/null; then ip link set lo up; fi
mkdir -p "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
cd /
umount -l /.oldroot
rmdir /.oldroot
exec env -i container=oi-systemd-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    /lib/systemd/systemd --system --unit=oi-test.target --log-target=journal \
    --show-status=no
"""

# The default target: journald and nothing else.
TEST_TARGET = """\
[Unit]
Description=oi systemd test: journald and nothing else
Wants=systemd-journald.service systemd-journald.socket systemd-journald-dev-log.socket
After=systemd-journald.service
AllowIsolate=yes
"""

# Kept when every other unit a stock boot pulls in is masked.
KEEP = {
    "systemd-journald.service",
    "systemd-journald.socket",
    "systemd-journald-dev-log.socket",
}

# Pulled in by sysinit.target and basic.target (which oi.service's default
# dependencies pull in) or by a unit on this host; masked outright because
# they mount, touch devices, clean directories or reach the network.
MASK = [
    "local-fs.target",
    "remote-fs.target",
    "swap.target",
    "cryptsetup.target",
    "veritysetup.target",
    "integritysetup.target",
    "getty.target",
    "timers.target",
    "paths.target",
    "systemd-tmpfiles-setup.service",
    "systemd-tmpfiles-setup-dev.service",
    "systemd-tmpfiles-clean.service",
    "systemd-tmpfiles-clean.timer",
    "systemd-journal-flush.service",
    "systemd-journald-audit.socket",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-networkd.service",
    "systemd-networkd-wait-online.service",
    "NetworkManager-wait-online.service",
    "ifupdown-wait-online.service",
    "ifupdown-pre.service",
    "networking.service",
    "systemd-resolved.service",
    "systemd-timesyncd.service",
    "systemd-logind.service",
    "dbus.service",
    "dbus.socket",
]

# Where unit wants come from on the host (the lower layer).
WANTS_DIRS = ["/lib/systemd/system", "/usr/lib/systemd/system", "/etc/systemd/system"]


def unavailable(base):
    """Why systemd cannot be booted here (over a root under `base`), or None."""
    if os.geteuid() != 0:
        return "needs root (namespaces, mounts, cgroups)"
    for tool in ["unshare", "nsenter", "pivot_root", "mount", "dpkg", "dpkg-deb"]:
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux, mount, dpkg)"
    if not os.access("/lib/systemd/systemd", os.X_OK):
        return "needs systemd (/lib/systemd/systemd; apt-get install systemd)"
    with open("/proc/filesystems") as f:
        if "overlay" not in f.read():
            return "the kernel has no overlayfs"
    if cgroup2_mount() is None:
        return "no cgroup2 hierarchy is mounted (systemd runs on a unified one)"
    probe = subprocess.run(
        ["unshare", "--pid", "--mount", "--net", "--uts", "--ipc", "--cgroup", "--fork", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"cannot unshare namespaces: {probe.stderr.strip()}"
    # The root's overlay, as SETUP mounts it, in a mount namespace that goes with the probe.
    mnt = os.path.join(base, "ns")
    os.makedirs(mnt, exist_ok=True)
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c",
         'mount -t tmpfs oi-probe "$0" && mkdir "$0/u" "$0/w" "$0/r" && '
         'mount -t overlay oi-probe -o "lowerdir=/,upperdir=$0/u,workdir=$0/w" "$0/r"', mnt],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"cannot mount an overlay over /: {probe.stderr.strip()}"
    return None


def cgroup2_mount():
    """Where the host mounts its cgroup2 hierarchy (unified or hybrid), or None."""
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return fields[1]
    return None


class System:
    """A booted systemd: nsenter into it, write into its root, kill it."""

    def __init__(self, base):
        # base: a directory of the harness's own (the build directory); the
        # tmpfs holding the whole root is mounted on base/ns in the private
        # mount namespace only.
        self.base = base
        self.mnt = base and os.path.join(base, "ns")
        self.console = base and os.path.join(base, "console.log")
        self.cgroup = None
        self.unshare = None
        self.pid = None
        self.boot_seconds = None
        self.masked = []

    @classmethod
    def attach(cls, pid):
        """The system booted by another process, whose PID 1 is host pid `pid`."""
        system = cls(None)
        system.pid = pid
        return system

    def boot(self, timeout=60):
        os.makedirs(self.mnt, exist_ok=True)
        units = os.path.join(self.base, "units")
        shutil.rmtree(units, ignore_errors=True)
        self.masked = write_units(units)
        cg_root = cgroup2_mount()
        remove_stale(cg_root)
        self.cgroup = os.path.join(cg_root, f"oi-systemd-test-{os.getpid()}")
        os.mkdir(self.cgroup)
        started = time.monotonic()
        with open(self.console, "wb") as console:
            # The shell joins the cgroup, then unshare makes it the root of
            # the new cgroup namespace (what systemd sees as /).
            self.unshare = subprocess.Popen(
                [
                    "sh",
                    "-c",
                    'echo $$ > "$0/cgroup.procs" && exec unshare --pid --mount --net --uts '
                    '--ipc --cgroup --fork --kill-child sh -c "$1" setup "$2" "$3"',
                    self.cgroup,
                    SETUP,
                    self.mnt,
                    units,
                ],
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.pid = self._child_pid(started + 10)
        self._wait(started + 10, lambda: os.path.exists(f"/proc/{self.pid}/root/run/systemd/private"),
                   "systemd's private socket")
        left = max(1.0, timeout - (time.monotonic() - started))
        state = self.run(["systemctl", "is-system-running", "--wait"], check=False, timeout=left)
        self.boot_seconds = time.monotonic() - started
        if state.stdout.strip() not in ("running", "degraded"):
            raise RuntimeError(f"systemd did not finish booting: {state.stdout.strip()} {state.stderr.strip()}")
        return self.boot_seconds

    def _child_pid(self, deadline):
        """The host pid of unshare's child: the namespace's PID 1."""
        while True:
            try:
                with open(f"/proc/{self.unshare.pid}/task/{self.unshare.pid}/children") as f:
                    children = f.read().split()
            except FileNotFoundError:
                children = []
            if children:
                return int(children[0])
            if self.unshare.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the namespace did not start: {self.console_tail()}")
            time.sleep(0.02)

    def _wait(self, deadline, ready, what):
        while not ready():
            if self.unshare.poll() is not None:
                raise RuntimeError(f"systemd exited before {what}: {self.console_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} after the deadline: {self.console_tail()}")
            time.sleep(0.02)

    def console_tail(self, lines=40):
        try:
            with open(self.console, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return str(e)

    def root(self, path):
        """A path inside the booted root, as the host sees it."""
        return f"/proc/{self.pid}/root/{path.lstrip('/')}"

    def nsenter(self):
        return ["nsenter", "-t", str(self.pid), "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w"]

    def run(self, argv, check=True, timeout=60, input=None):
        """Runs argv inside the namespaces and root; returns the CompletedProcess."""
        env = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER=cat",
               "SYSTEMD_COLORS=0", "LANG=C.UTF-8", "TERM=dumb"]
        p = subprocess.run(self.nsenter() + env + argv, capture_output=True, text=True,
                           timeout=timeout, input=input)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stdout}{p.stderr}")
        return p

    def kill(self):
        """SIGKILL to PID 1 (everything in the PID namespace dies with it), then the cgroups go."""
        # Only while unshare, its parent, runs: the pid cannot have been reused.
        if self.unshare is not None and self.unshare.poll() is None:
            if self.pid is not None:
                os.kill(self.pid, signal.SIGKILL)
            else:
                # Not known yet: unshare's --kill-child kills it as unshare dies.
                self.unshare.kill()
        if self.unshare is not None:
            try:
                self.unshare.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.unshare.kill()
                self.unshare.wait(timeout=20)
        if self.cgroup is not None:
            remove_cgroup(self.cgroup, time.monotonic() + 20)
        try:
            os.rmdir(self.mnt)
        except OSError:
            pass


def remove_stale(cg_root):
    """Removes the empty cgroups a killed harness left (its systemd is gone:
    see die_with_parent); one whose processes still run is left alone."""
    for entry in os.listdir(cg_root):
        path = os.path.join(cg_root, entry)
        if not entry.startswith("oi-systemd-test-") or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, "cgroup.events")) as f:
                if "populated 0" in f.read():
                    remove_cgroup(path, time.monotonic() + 5)
        except OSError:
            pass


def die_with_parent():
    """SIGKILL to this process when the harness dies, however it dies: it
    becomes unshare, whose --kill-child then kills the namespace's PID 1, so
    no systemd outlives a killed harness on a shared machine."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def remove_cgroup(path, deadline):
    """Removes a cgroup tree bottom-up once its processes have gone."""
    if not os.path.isdir(path):
        return
    for entry in os.listdir(path):
        sub = os.path.join(path, entry)
        if os.path.isdir(sub):
            remove_cgroup(sub, deadline)
    while True:
        try:
            os.rmdir(path)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def write_units(unit_dir, wants_dirs=WANTS_DIRS):
    """oi-test.target, and /dev/null links masking what a stock boot would
    start: copied to /run/systemd/system, whose masks win over /lib's units."""
    os.makedirs(unit_dir, exist_ok=True)
    with open(os.path.join(unit_dir, "oi-test.target"), "w") as f:
        f.write(TEST_TARGET)
    masked = set(MASK)
    for d in wants_dirs:
        if not os.path.isdir(d):
            continue
        for entry in os.listdir(d):
            if entry.endswith(".wants") or entry.endswith(".requires"):
                sub = os.path.join(d, entry)
                masked.update(os.listdir(sub))
    masked -= KEEP
    for unit in sorted(masked):
        os.symlink("/dev/null", os.path.join(unit_dir, unit))
    return sorted(masked)
