"""What every peer adapter shares: one measured transfer from namespace a to namespace b."""

import os
import shutil
import time

from proc import Proc, wait_listening
from workload import received_bytes


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Ctx:
    """Everything one run needs: the path, the workload, the time cap, a scratch directory."""

    def __init__(self, path, work, cap_s, scratch, dst_dir, port, seed, log_dir):
        self.path, self.work, self.cap_s = path, work, cap_s
        self.scratch, self.dst_dir, self.port, self.seed, self.log_dir = scratch, dst_dir, port, seed, log_dir


class Tool:
    name = "?"
    packages = []          # Debian packages that provide it
    binaries = []          # what must be on PATH
    workloads = ("file", "tree")
    server_proto = "tcp"
    wait_for_server_exit = False   # the receiver, not the sender, knows the file is complete
    note = ""

    def missing(self):
        """None if runnable, else the reason."""
        gone = [b for b in self.binaries if shutil.which(b) is None]
        return f"not installed: {', '.join(gone)}" if gone else None

    def unsupported(self, work):
        if work.name not in self.workloads:
            return f"{self.name} does not transfer a {work.name} (not a file-tree tool)"
        return None

    def prepare(self, ctx):
        """Once per run, before the server starts (keys, config files)."""

    def server_argv(self, ctx):
        return None

    def finish(self, ctx):
        """Once per run, after both ends stopped (undo what `prepare` changed on the path)."""

    def client_argv(self, ctx):
        raise NotImplementedError

    def judge(self, ctx, res, client, server):
        """Sets status/reason: a run is ok only if every received file matches its source."""
        if res.get("status") == "timeout":
            res["verified"] = False
            return
        ok, why = ctx.work.verify(ctx.dst_dir)
        res["verified"] = ok
        if not ok:
            # a failed run has no goodput: file bytes over its wall time would be a false number
            res["goodput_mbit"] = None
        if client.returncode != 0 and not ok:
            res.update(status="fail", reason=f"client exit {client.returncode}; {why}")
        elif not ok:
            res.update(status="fail", reason=why)
        else:
            res.update(status="ok", reason=why if client.returncode == 0 else
                       f"{why}; client exit {client.returncode}")

    def run(self, ctx):
        res = {"tool": self.name, "workload": ctx.work.name, "file_bytes": ctx.work.bytes,
               "files": ctx.work.files, "cap_s": ctx.cap_s, "load_before": loadavg()}
        shutil.rmtree(ctx.dst_dir, ignore_errors=True)
        os.makedirs(ctx.dst_dir)
        self.prepare(ctx)
        server = client = None
        ctx.path.begin_run(ctx.seed)
        try:
            sargv = self.server_argv(ctx)
            if sargv:
                server = Proc(ctx.path.ns_b, sargv, os.path.join(ctx.log_dir, "server.log"), cwd=ctx.scratch)
                res["server_cmd"] = " ".join(server.argv)
                if not wait_listening(ctx.path.ns_b, ctx.port, self.server_proto, proc=server):
                    server.stop()
                    res.update(status="fail", reason="server did not start: " + server.output(600))
                    return res
            cargv = self.client_argv(ctx)
            client = Proc(ctx.path.ns_a, cargv, os.path.join(ctx.log_dir, "client.log"), cwd=ctx.scratch)
            res["client_cmd"] = " ".join(client.argv)
            t0 = client.t0
            deadline = t0 + ctx.cap_s
            timed_out = not client.wait(max(0.0, deadline - time.monotonic()))
            if not timed_out and self.wait_for_server_exit and server is not None:
                timed_out = not server.wait(max(0.0, deadline - time.monotonic()))
            t1 = time.monotonic()
            if timed_out:
                got = received_bytes(ctx.dst_dir)
                res.update(status="timeout", wall_s=round(t1 - t0, 3), received_bytes=got,
                           goodput_mbit=round(got * 8 / ctx.cap_s / 1e6, 2), goodput_partial=True,
                           reason=f"hit the {ctx.cap_s:g} s cap with {got / ctx.work.bytes:.1%} of the bytes received")
            else:
                end = max(client.t_end, server.t_end if (self.wait_for_server_exit and server) else 0)
                wall = end - t0
                res.update(wall_s=round(wall, 3), goodput_mbit=round(ctx.work.bytes * 8 / wall / 1e6, 2))
        finally:
            if client is not None:
                client.stop()
            if server is not None:
                time.sleep(0.3)   # let a forking server reap its connection child first
                server.stop()
            self.finish(ctx)
            link = ctx.path.end_run()
        res.update({k: v for k, v in link.items()})
        res["client_rc"] = client.returncode
        res["client_output"] = client.output(1500)
        res["cpu_a_s"], res["rss_a_mib"] = client.cpu_s(), client.max_rss_mib()
        if server is not None:
            res["cpu_b_s"], res["rss_b_mib"] = server.cpu_s(), server.max_rss_mib()
            res["server_output"] = server.output(1500)
        if link.get("wire_bytes") is not None:
            # a run cut off by the cap: per byte that did arrive, not per byte of the whole file
            denom = res["received_bytes"] if res.get("status") == "timeout" else ctx.work.bytes
            res["wire_per_file_byte"] = round(link["wire_bytes"] / denom, 4) if denom else None
        self.judge(ctx, res, client, server)
        res["load_after"] = loadavg()
        shutil.rmtree(ctx.dst_dir, ignore_errors=True)
        return res
