"""One adapter per peer tool. `ALL` lists them in table order; `EXTRA` runs only by name."""

from tools.gridftp import GridFtp
from tools.iperf import Iperf3
from tools.sluice import Sluice
from tools.srt import Srt
from tools.ssh import Rsync, Scp
from tools.uftp import Uftp

ALL = [Iperf3("cubic"), Iperf3("bbr"), Scp(), Rsync(), GridFtp(1), GridFtp(4), Srt(), Uftp(), Uftp(900), Sluice(), Sluice(1)]
# Compressing variants: only when named in --tools (they matter for --content text).
EXTRA = [Rsync(compress=True), Sluice(compress=1)]
BY_NAME = {t.name: t for t in ALL + EXTRA}
