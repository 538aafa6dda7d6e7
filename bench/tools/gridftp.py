"""GridFTP: globus-url-copy against a globus-gridftp-server the harness starts in namespace b.

The server runs in anonymous, clear-text mode (-aa, mapped to root with -allow-root): no GSI
certificates, no data-channel protection. That is a benchmark convenience and makes GridFTP's
numbers an upper bound: a real deployment adds authentication and, if asked, encryption."""

import os

from netns import B_ADDR
from tools.base import Tool


class GridFtp(Tool):
    packages = ["globus-gridftp-server-progs", "globus-gass-copy-progs"]
    binaries = ["globus-url-copy", "globus-gridftp-server"]
    server_proto = "tcp"

    def __init__(self, streams):
        self.streams = streams
        self.name = f"gridftp-p{streams}"
        self.note = (f"globus-url-copy -fast -p {streams} (trees: -r -cd -pp), anonymous server, "
                     "no GSI, data not encrypted")

    def server_argv(self, ctx):
        return ["globus-gridftp-server", "-s", "-aa", "-allow-root", "-anonymous-user", "root",
                "-anonymous-group", "root", "-p", str(ctx.port), "-control-interface", B_ADDR,
                "-data-interface", B_ADDR, "-log-level", "ERROR,WARN",
                "-logfile", os.path.join(ctx.log_dir, "gridftp-server.log")]

    def client_argv(self, ctx):
        url = f"ftp://{B_ADDR}:{ctx.port}{ctx.dst_dir}/{ctx.work.basename}"
        argv = ["globus-url-copy", "-fast", "-p", str(self.streams)]
        if ctx.work.is_dir:
            return argv + ["-r", "-cd", "-pp", f"file://{ctx.work.src.rstrip('/')}/", url + "/"]
        return argv + [f"file://{ctx.work.src}", url]
