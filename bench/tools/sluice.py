"""Sluice, default settings: `sluice serve` in namespace b, `sluice cp` in namespace a.

The binary does not exist yet (issue 3). Until target/release/sluice is built, every Sluice cell
says "not available yet (issue 3)" and the run goes on.

TODO(issue 3): the command lines below are the expected shape, not a known CLI; check them
against `sluice serve --help` / `sluice cp --help` when the binary lands.
"""

import os

from netns import B_ADDR
from tools.base import Tool

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, "target", "release", "sluice")


class Sluice(Tool):
    name = "sluice"
    packages = []
    binaries = []
    server_proto = "udp"
    note = "sluice cp, default settings"

    def missing(self):
        if not os.access(BIN, os.X_OK):
            return "not available yet (issue 3)"
        return None

    def server_argv(self, ctx):
        return [BIN, "serve", "--listen", f"{B_ADDR}:{ctx.port}", "--root", ctx.dst_dir]

    def client_argv(self, ctx):
        return [BIN, "cp", ctx.work.src.rstrip("/"), f"{B_ADDR}:{ctx.port}:/"]
