"""Processes the harness starts: inside a namespace, in their own session, measured by wait4.

Every process is started with start_new_session=True, so its process group id is its own pid;
the harness only ever signals pids (and groups) it started itself.
"""

import os
import signal
import subprocess
import time


class Proc:
    """One command run inside a network namespace under GNU time, which reports the command's
    CPU seconds and peak RSS (the process and every descendant it reaped) from wait4.

    Not our own wait4: a child forked from this Python process inherits its peak RSS (about
    36 MiB) as a floor; GNU time's is about 2 MiB."""

    def __init__(self, ns, argv, log_path, cwd=None, env=None):
        self.argv = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
        self.stat_path = log_path + ".time"
        timed = ["/usr/bin/time", "-o", self.stat_path, "-f", "%e %U %S %M"] + self.argv
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(timed, stdin=subprocess.DEVNULL, stdout=self.log,
                                  stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd, env=env)
        self.pid = self.p.pid
        self.status = None
        self.rusage = None
        self.t_end = None

    def poll(self):
        if self.status is not None:
            return True
        pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self._done(status, ru)
        return True

    def _done(self, status, ru):
        self.status = status
        self.rusage = ru
        self.t_end = time.monotonic()
        self.p.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        self.log.close()

    def wait(self, timeout):
        """Wait up to timeout seconds; True if it exited."""
        deadline = time.monotonic() + timeout
        while not self.poll():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def _command_pid(self):
        """The measured command: the only child of our GNU time process."""
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
                kids = f.read().split()
            return int(kids[0]) if kids else None
        except OSError:
            return None

    def stop(self, grace=3.0):
        """SIGTERM to the command (GNU time then reaps it and reports), then SIGKILL to the
        whole process group we created; always reaps."""
        if self.poll():
            return
        cmd = self._command_pid()
        if cmd is not None:
            try:
                os.kill(cmd, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if self.wait(grace):
                return
        cmd = self._command_pid()
        if cmd is not None:   # SIGKILL the command alone first: GNU time still reports its usage
            try:
                os.kill(cmd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self.wait(2.0):
                return
        for sig, wait_s in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass
            if self.wait(wait_s):
                return

    def _stats(self):
        try:
            with open(self.stat_path) as f:
                last = f.read().strip().splitlines()[-1].split()
            return float(last[1]) + float(last[2]), int(last[3])
        except (OSError, IndexError, ValueError):
            return None

    @property
    def returncode(self):
        """The command's exit code as GNU time passes it on (128+N after signal N)."""
        return None if self.status is None else os.waitstatus_to_exitcode(self.status)

    def cpu_s(self):
        st = self._stats()
        return None if st is None else round(st[0], 3)

    def max_rss_mib(self):
        st = self._stats()
        return None if st is None else round(st[1] / 1024.0, 1)

    def output(self, limit=4000):
        """The tail of the process's output (`BENCH_OUTPUT_LIMIT` bytes overrides `limit`, for
        debug logs)."""
        limit = int(os.environ.get("BENCH_OUTPUT_LIMIT", limit))
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", "replace")


def run(argv, check=True, ns=None, timeout=120):
    """A short helper command; returns stdout text."""
    full = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
    r = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return r.stdout


def wait_listening(ns, port, proto="tcp", timeout=10.0, proc=None):
    """Poll `ss` in the namespace until something listens on port (tcp or udp)."""
    flag = "-Hltn" if proto == "tcp" else "-Hlun"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = run(["ss", flag, f"sport = :{port}"], check=False, ns=ns)
        if out.strip():
            return True
        if proc is not None and proc.poll():
            return False
        time.sleep(0.05)
    return False
