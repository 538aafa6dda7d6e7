"""Sluice, default settings: `sluice serve` in namespace b, `sluice cp` (an upload) in namespace a.

The server gets a fresh token file (0600) and state directory per run set; the client pins the
server on first contact (`--accept-new-host`) in a known-hosts file of its own. Trees go with
`sluice cp -r`: one request, one manifest, the files end to end on the same data channels.
"""

import os
import subprocess

from netns import B_ADDR
from tools.base import Tool

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, "target", "release", "sluice")
TOKEN = "bench-token-0123456789abcdef"
# Drops every UDP packet coming into the server's namespace, silently, as a firewall between the
# hosts would (issue 30: the default settings must then move the data over TCP).
BLOCK_UDP = """table inet sluice_bench {
  chain input {
    type filter hook input priority 0; policy accept;
    meta l4proto udp drop
  }
}
"""


class Sluice(Tool):
    packages = []
    binaries = []
    workloads = ("file", "tree")
    server_proto = "udp"

    def __init__(self, channels=None, compress=None, policy=None, fixed_mbit=None,
                 block_udp=False, transport=None):
        """`channels`: None for the default (one per core, as negotiated), else `--channels N`;
        `compress`: a zstd level for `--compress=LEVEL`, or None; `policy`: `--policy` (None:
        the default, fair); `fixed_mbit`: blast at this rate with `--policy fixed` (RBUDP: no
        congestion control). At the WAN path's link rate that is the path's and the host's
        ceiling for Sluice's data plane: what a sender that knew the link in advance and never
        probed would get, to read the default's goodput against."""
        if fixed_mbit is not None:
            policy = "fixed"
        self.channels, self.compress, self.policy = channels, compress, policy
        self.fixed_mbit = fixed_mbit
        self.block_udp, self.transport = block_udp, transport
        self.name = "sluice" if channels is None else f"sluice-c{channels}"
        if transport is not None:
            self.name += f"-{transport}"
        if block_udp:
            self.name += "-udp-blocked"
            self.server_proto = "tcp"
            self.packages, self.binaries = ["nftables"], ["nft"]
        if compress is not None:
            self.name += "-z"
        if fixed_mbit is not None:
            self.name += f"-fixed{fixed_mbit}"
        elif policy is not None:
            self.name += f"-{policy}"
        count = "one per core (negotiated)" if channels is None else str(channels)
        zstd = f", zstd level {compress} per 256 KiB piece" if compress is not None else ""
        cc = f"--policy {policy}" if policy is not None else "adaptive"
        if fixed_mbit is not None:
            cc = f"--policy fixed --limit-rate {fixed_mbit}Mbit (no congestion control)"
        self.note = (f"sluice cp (upload), {cc}, encrypted UDP channels: {count}, BLAKE3{zstd}")
        if block_udp:
            self.note = ("sluice cp (upload), default settings, UDP into the server's namespace "
                         "dropped (nftables): auto takes TCP, encrypted TCP streams "
                         f"({count}), BBR, BLAKE3{zstd}")

    def missing(self):
        if not os.access(BIN, os.X_OK):
            return "not built: run `cargo build --release -p sluice-cli`"
        return super().missing()

    def prepare(self, ctx):
        self.dir = os.path.join(ctx.scratch, "sluice")
        os.makedirs(self.dir, exist_ok=True)
        self.tokens = os.path.join(self.dir, "tokens")
        fd = os.open(self.tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(TOKEN + "\n")
        self.known_hosts = os.path.join(self.dir, "known_hosts")
        if os.path.exists(self.known_hosts):
            os.remove(self.known_hosts)
        if self.block_udp:
            subprocess.run(["ip", "netns", "exec", ctx.path.ns_b, "nft", "-f", "-"],
                           input=BLOCK_UDP.encode(), check=True)

    def finish(self, ctx):
        if self.block_udp:
            subprocess.run(["ip", "netns", "exec", ctx.path.ns_b, "nft", "delete", "table",
                            "inet", "sluice_bench"], check=False)

    def server_argv(self, ctx):
        # Every run is a first contact: path memory (kept across runs of a cell, which share
        # the server's identity) would start the later runs from the earlier ones' rate.
        # bench/ttfb.py --warm measures starts from memory.
        return [BIN, "serve", "--root", ctx.dst_dir, "--listen", f"{B_ADDR}:{ctx.port}",
                "--state-dir", os.path.join(self.dir, "state"), "--tokens", self.tokens,
                "--no-path-memory"]

    def client_argv(self, ctx):
        extra = ["--no-path-memory"]  # first contact every run (see server_argv)
        if self.channels is not None:
            extra += ["--channels", str(self.channels)]
        if self.compress is not None:
            extra.append(f"--compress={self.compress}")
        if self.policy is not None:
            extra += ["--policy", self.policy]
        if self.fixed_mbit is not None:
            extra += ["--limit-rate", f"{self.fixed_mbit}Mbit"]
        if self.transport is not None:
            extra += ["--transport", self.transport]
        if ctx.work.is_dir:
            extra.append("-r")
        return [BIN, "cp", "-q", "-P", str(ctx.port), "--token-file", self.tokens,
                "--known-hosts", self.known_hosts, "--accept-new-host", *extra,
                ctx.work.src.rstrip("/"), f"{B_ADDR}:"]
