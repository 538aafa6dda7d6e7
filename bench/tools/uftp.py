"""UFTP: uftpd (receiver) in namespace b, uftp (sender) in namespace a, unicast, encrypted
(AES-128-GCM, ECDH-ECDSA P-256 key exchange), TFMCC congestion control (without -C tfmcc UFTP
sends at a fixed, user-chosen rate; its default is 1 Mbit/s). A second variant sends at a fixed
900 Mbit/s with no congestion control: what a user who knows the link rate would set (`-R`)."""

from netns import B_ADDR
from tools.base import Tool

BUF = str(100 * 1024 * 1024)   # asked for; the kernel clamps it to net.core.[rw]mem_max (4 MiB here)


class Uftp(Tool):
    packages = ["uftp"]
    binaries = ["uftp", "uftpd"]
    server_proto = "udp"

    def __init__(self, fixed_mbit=None):
        self.fixed_mbit = fixed_mbit
        if fixed_mbit:
            self.name = f"uftp-R{fixed_mbit}"
            self.rate = ["-R", str(fixed_mbit * 1000)]
            how = f"fixed rate {fixed_mbit} Mbit/s (-R), no congestion control"
        else:
            self.name = "uftp"
            self.rate = ["-C", "tfmcc"]
            how = "-C tfmcc (congestion control, default limits)"
        self.note = f"UFTP 4.10 unicast, {how}, -Y aes128-gcm -e ecdh_ecdsa, -B 100 MB (clamped to 4 MiB)"

    def server_argv(self, ctx):
        return ["uftpd", "-d", "-q", "-p", str(ctx.port), "-D", ctx.dst_dir, "-B", BUF, "-E",
                "-K", "ec:prime256v1"]

    def client_argv(self, ctx):
        return ["uftp", "-M", B_ADDR, "-p", str(ctx.port), "-H", B_ADDR, "-Y", "aes128-gcm",
                "-h", "sha256", "-e", "ecdh_ecdsa", "-K", "prime256v1", "-B", BUF] + self.rate + [
                "-q", ctx.work.src.rstrip("/")]
