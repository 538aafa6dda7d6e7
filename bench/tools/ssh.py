"""scp and rsync over ssh, cipher aes128-gcm@openssh.com, against an sshd the harness starts in
namespace b on a high port with a generated host key and a generated client key (no password)."""

import os
import subprocess

from netns import B_ADDR
from tools.base import Tool

CIPHER = "aes128-gcm@openssh.com"


class _SshTool(Tool):
    packages = ["openssh-server", "openssh-client"]
    server_proto = "tcp"

    def prepare(self, ctx):
        d = os.path.join(ctx.scratch, "ssh")
        if not os.path.isdir(d):
            os.makedirs(d)
            for k in ("host_ed25519", "client_ed25519"):
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(d, k)],
                               check=True)
            with open(os.path.join(d, "client_ed25519.pub")) as src, \
                    open(os.path.join(d, "authorized_keys"), "w") as dst:
                dst.write(src.read())
            os.chmod(os.path.join(d, "authorized_keys"), 0o600)
            os.makedirs("/run/sshd", exist_ok=True)   # sshd's privilege-separation directory
        with open(os.path.join(d, "sshd_config"), "w") as f:
            f.write(f"Port {ctx.port}\nListenAddress {B_ADDR}\nHostKey {d}/host_ed25519\n"
                    f"AuthorizedKeysFile {d}/authorized_keys\nPasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
                    "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\n"
                    f"PidFile {d}/sshd.pid\nCiphers {CIPHER}\nSubsystem sftp internal-sftp\n")
        with open(os.path.join(d, "ssh_config"), "w") as f:
            f.write(f"Host *\n  Port {ctx.port}\n  IdentityFile {d}/client_ed25519\n  IdentitiesOnly yes\n"
                    "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n"
                    f"  Ciphers {CIPHER}\n  BatchMode yes\n  LogLevel ERROR\n")
        self.dir = d

    def server_argv(self, ctx):
        return ["/usr/sbin/sshd", "-D", "-e", "-f", os.path.join(self.dir, "sshd_config")]


class Scp(_SshTool):
    name = "scp"
    binaries = ["scp", "/usr/sbin/sshd"]
    note = f"OpenSSH scp, {CIPHER}, -r for trees"

    def client_argv(self, ctx):
        return ["scp", "-q", "-F", os.path.join(self.dir, "ssh_config")] + \
            (["-r"] if ctx.work.is_dir else []) + [ctx.work.src, f"root@{B_ADDR}:{ctx.dst_dir}/"]


class Rsync(_SshTool):
    packages = _SshTool.packages + ["rsync"]
    binaries = ["rsync", "ssh", "/usr/sbin/sshd"]

    def __init__(self, compress=False):
        """`compress`: rsync -z (zlib on the stream)."""
        self.compress = compress
        self.name = "rsync-z" if compress else "rsync"
        self.note = f"rsync -a{'z' if compress else ''} over ssh ({CIPHER}), empty destination"

    def client_argv(self, ctx):
        return ["rsync", "-az" if self.compress else "-a", "-e", f"ssh -F {os.path.join(self.dir, 'ssh_config')}",
                ctx.work.src.rstrip("/"), f"root@{B_ADDR}:{ctx.dst_dir}/"]
