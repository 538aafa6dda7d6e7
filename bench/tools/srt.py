"""SRT file mode: srt-file-transmit (srt-tools), listener receiving in namespace b, caller sending
from namespace a, AES-128 encryption on (passphrase). The file name travels as the stream id.
One file per connection: the tree workload is not run (the tool has no directory mode)."""

from netns import B_ADDR
from tools.base import Tool

PASS = "passphrase=sluice-bench-passphrase&pbkeylen=16"


class Srt(Tool):
    name = "srt"
    packages = ["srt-tools"]
    binaries = ["srt-file-transmit"]
    workloads = ("file",)
    server_proto = "udp"
    wait_for_server_exit = True   # the receiver writes the file; it exits when it is complete
    note = "srt-file-transmit 1.5 file mode (transtype=file), AES-128, default buffers"

    def server_argv(self, ctx):
        return ["srt-file-transmit", f"srt://{B_ADDR}:{ctx.port}?mode=listener&{PASS}",
                f"file://{ctx.dst_dir}/"]

    def client_argv(self, ctx):
        return ["srt-file-transmit", f"file://{ctx.work.src}", f"srt://{B_ADDR}:{ctx.port}?{PASS}"]
