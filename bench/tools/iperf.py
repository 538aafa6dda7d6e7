"""iperf3 TCP, memory to memory, fixed duration: the ceiling of one tuned TCP flow."""

import json

from netns import A_ADDR, B_ADDR
from tools.base import Tool


class Iperf3(Tool):
    packages = ["iperf3"]
    binaries = ["iperf3"]
    workloads = ("file",)   # stands in the single-file rows; moves no file

    def __init__(self, cc):
        self.cc = cc
        self.name = f"iperf3-{cc}"
        self.note = f"TCP {cc}, memory to memory, no file, no crypto; goodput = receiver bytes / duration"

    def missing(self):
        why = super().missing()
        if why:
            return why
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            avail = f.read().split()
        if self.cc not in avail:
            return f"congestion control '{self.cc}' not available (have: {' '.join(avail)}; try modprobe tcp_{self.cc})"
        return None

    def server_argv(self, ctx):
        return ["iperf3", "-s", "-1", "-B", B_ADDR, "-p", str(ctx.port)]

    def client_argv(self, ctx):
        secs = max(2, int(min(ctx.iperf_s, ctx.cap_s - 5)))
        return ["iperf3", "-c", B_ADDR, "-B", A_ADDR, "-p", str(ctx.port), "-t", str(secs),
                "-C", self.cc, "-J"]

    def judge(self, ctx, res, client, server):
        res["verified"] = None
        if res.get("status") == "timeout":
            return
        try:
            with open(client.log_path) as f:
                j = json.load(f)
            end = j["end"]
            rcv = end["sum_received"]
            res["file_bytes"] = rcv["bytes"]
            res["files"] = 0
            res["goodput_mbit"] = round(rcv["bits_per_second"] / 1e6, 2)
            res["wall_s"] = round(rcv["seconds"], 3)
            res["retransmits"] = end.get("sum_sent", {}).get("retransmits")
            if res.get("wire_bytes") is not None and rcv["bytes"]:
                res["wire_per_file_byte"] = round(res["wire_bytes"] / rcv["bytes"], 4)
            res.update(status="ok", reason=f"TCP {self.cc}, {rcv['seconds']:.1f} s, "
                       f"{res['retransmits']} retransmissions (no file: nothing to verify)")
        except (OSError, ValueError, KeyError) as e:
            res.update(status="fail", reason=f"iperf3 gave no result ({e}): {client.output(300)}")
