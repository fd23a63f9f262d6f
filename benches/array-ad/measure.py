#!/usr/bin/env python3
"""benches/array-ad/measure.py -- run one command under a time and a memory limit, and measure it.

Usage: measure.py TIMEOUT_S MEM_MB INPUT OUT -- CMD [ARG...]

Runs CMD with the text INPUT on standard input, its standard output written to OUT and its
standard error to OUT.err, and prints one line: "STATUS WALL USER SYS PEAK_MB", STATUS one of
  ok             exit status 0
  failed:N       exit status N
  timeout        still running after TIMEOUT_S seconds (killed)
  killed         its resident memory went over MEM_MB (killed)
  signal:N       killed by signal N from elsewhere (the kernel's OOM killer, a crash)
WALL is the elapsed time; USER and SYS the CPU times of CMD and of the children it waited
for (the C compiler under `vlad compile`), in seconds, to the microsecond; PEAK_MB the peak
resident memory of CMD (of CMD or of one of its children, whichever is largest).

CMD runs under GNU time (/usr/bin/time -f %M), which reports its peak memory: a process forked
from this Python process would inherit Python's own peak (about 10 MB) as a floor.  The
resident memory of CMD's process is read from /proc every 10 ms, and the process is killed
when it goes over MEM_MB: `ulimit -v` would not do, since the native programs reserve
(without touching) gigabytes of address space for their stacks and take smaller stacks when
refused, which changes what they can run.
"""
import os
import signal
import sys
import tempfile
import time


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def resident_pages(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def main():
    timeout, mem_mb, text, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
    if len(sys.argv) < 7 or sys.argv[5] != "--":
        sys.exit("usage: measure.py TIMEOUT_S MEM_MB INPUT OUT -- CMD [ARG...]")
    cmd = sys.argv[6:]
    limit_pages = mem_mb * 1024 * 1024 / os.sysconf("SC_PAGE_SIZE")
    memfd, memfile = tempfile.mkstemp(prefix="measure-")
    os.close(memfd)
    rfd, wfd = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(rfd, 0)
            os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
            os.dup2(os.open(out + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
            os.execv("/usr/bin/time", ["/usr/bin/time", "-f", "%M", "-o", memfile] + cmd)
        finally:
            os._exit(127)
    os.close(rfd)
    try:
        os.write(wfd, text.encode() + b"\n")
    except BrokenPipeError:
        pass
    os.close(wfd)
    status = None
    while True:
        done, wstatus, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        kids = children(pid)
        if status is None:
            if sum(resident_pages(k) for k in kids) > limit_pages:
                status = "killed"
            elif time.perf_counter() - start > timeout:
                status = "timeout"
            if status is not None:
                for k in kids:
                    os.kill(k, signal.SIGKILL)
        time.sleep(0.01)
    wall = time.perf_counter() - start
    with open(memfile) as f:
        lines = f.read().split("\n")
    os.unlink(memfile)
    words = [l for l in lines if l.strip()]
    peak_kb = float(words[-1]) if words and words[-1].strip().isdigit() else float("nan")
    if status is None:
        code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else 128
        killed = [l for l in words if "terminated by signal" in l]
        if killed:
            status = "signal:" + killed[0].split()[-1]
        elif code != 0:
            status = f"failed:{code}"
        else:
            status = "ok"
    print(f"{status} {wall:.4f} {usage.ru_utime:.4f} {usage.ru_stime:.4f} {peak_kb / 1024:.1f}")


main()
