"""Stops one thread of a process and leaves the others running: what a
deadlock or a system call that never returns does to one executor thread,
which SIGSTOP (the whole process) cannot show. ptrace(2) from this process
(the host's root, which sees the booted system's processes under their host
pids): PTRACE_SEIZE then PTRACE_INTERRUPT stops that one thread; a thread
of this process reaps it once it dies, as its tracer must (until then the
process would not finish exiting)."""

import ctypes
import os
import threading

PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
# If this process dies first, the frozen process is killed, not left stuck.
PTRACE_O_EXITKILL = 0x100000
WALL = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long


def host_pid(system_pid, pid):
    """The host's pid of `pid` as the booted system (PID 1 there is host pid
    `system_pid`) numbers it."""
    ns = os.readlink(f"/proc/{system_pid}/ns/pid")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                continue
            with open(f"/proc/{entry}/status") as f:
                nspid = next(l for l in f if l.startswith("NSpid:")).split()
        except (OSError, StopIteration):
            continue
        if nspid[-1] == str(pid):
            return int(entry)
    raise AssertionError(f"no process {pid} in the booted system's pid namespace")


def thread_named(pid, name):
    """The host tid of `pid`'s thread called `name` (its comm)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == name:
                    return int(tid)
        except OSError:
            continue
    raise AssertionError(f"process {pid} has no thread {name}")


class Frozen:
    """Thread `tid` stopped (ptrace-stop) from now until its process dies."""

    def __init__(self, tid):
        self.tid = tid
        self.died = threading.Event()
        for request, data in ((PTRACE_SEIZE, PTRACE_O_EXITKILL), (PTRACE_INTERRUPT, 0)):
            if _libc.ptrace(request, tid, None, data) != 0:
                e = ctypes.get_errno()
                raise OSError(e, f"ptrace {request:#x} of thread {tid}: {os.strerror(e)}")
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self):
        # Any thread of the tracer may wait for its tracees (__WALL: a thread).
        while True:
            try:
                _, status = os.waitpid(self.tid, WALL)
            except ChildProcessError:
                break
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                break
        self.died.set()
