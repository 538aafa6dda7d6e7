"""One adapter per peer tool. `ALL` lists them in table order; `EXTRA` runs only by name."""

from cells import RATE_MBIT
from tools.gridftp import GridFtp
from tools.iperf import Iperf3
from tools.sluice import Sluice
from tools.srt import Srt
from tools.ssh import Rsync, Scp
from tools.uftp import Uftp

ALL = [Iperf3("cubic"), Iperf3("bbr"), Scp(), Rsync(), GridFtp(1), GridFtp(4), Srt(), Uftp(), Uftp(900), Sluice(), Sluice(1)]
# Only when named in --tools: the compressing variants (they matter for --content text), and
# Sluice blasting at the WAN link rate with no congestion control (the ceiling of the path and
# this host for Sluice's data plane, to read the default against).
# And Sluice's default on a path that drops UDP (issue 30: it must fall back to TCP), and with
# the transport held to UDP or TCP, to compare auto with them in the same run.
EXTRA = [Rsync(compress=True), Sluice(compress=1), Sluice(fixed_mbit=RATE_MBIT),
         Sluice(block_udp=True), Sluice(transport="udp"), Sluice(transport="tcp"),
         # UDP blocked with the stream count fixed at 4 (FSP's rule of thumb, and the count
         # before the sender grew it): the A/B of the growth.
         Sluice(4, block_udp=True)]
BY_NAME = {t.name: t for t in ALL + EXTRA}
