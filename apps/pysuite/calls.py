"""System calls CPython exposes that shoal answers as Linux (memfd_create,
priorities, times, pipe sizes, the identity calls), printed so that a run
under shoal can be compared with a native one
(crates/shoal-cli/tests/pysuite.rs: python_system_calls_match_native).
Run as root: it changes its own nice value and keeps its own ids."""
import os, fcntl, errno
def tryit(name, f):
    try:
        print(name, f())
    except OSError as e:
        print(name, "error", errno.errorcode[e.errno])
fd = os.memfd_create("py", os.MFD_CLOEXEC)
os.write(fd, b"memfd bytes")
print("memfd", os.pread(fd, 5, 6), os.get_inheritable(fd), oct(os.fstat(fd).st_mode))
tryit("memfd sealing", lambda: os.memfd_create("s", os.MFD_ALLOW_SEALING))
os.setpriority(os.PRIO_PROCESS, 0, 7)
print("nice", os.getpriority(os.PRIO_PROCESS, 0), os.nice(0), os.nice(2))
tryit("getpriority bad", lambda: os.getpriority(5, 0))
print("sched", os.sched_get_priority_max(os.SCHED_FIFO), os.sched_get_priority_min(os.SCHED_RR), os.sched_get_priority_max(os.SCHED_OTHER))
t = os.times()
print("times", t.children_user, t.children_system, t.elapsed > 0)
r, w = os.pipe()
print("pipe", fcntl.fcntl(r, fcntl.F_GETPIPE_SZ), fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 10000), fcntl.fcntl(r, fcntl.F_GETPIPE_SZ))
u, g = os.getuid(), os.getgid()
os.setresuid(u, u, -1); os.setresgid(-1, g, g); os.setgroups([])
print("ids", os.getresuid(), os.getresgid(), os.getgroups())
