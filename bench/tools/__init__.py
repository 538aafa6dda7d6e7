"""One adapter per peer tool. `ALL` lists them in table order."""

from tools.gridftp import GridFtp
from tools.iperf import Iperf3
from tools.sluice import Sluice
from tools.srt import Srt
from tools.ssh import Rsync, Scp
from tools.uftp import Uftp

ALL = [Iperf3("cubic"), Iperf3("bbr"), Scp(), Rsync(), GridFtp(1), GridFtp(4), Srt(), Uftp(), Uftp(900), Sluice(), Sluice(1)]
BY_NAME = {t.name: t for t in ALL}
