"""The two benchmark paths: LAN (a veth pair) and WAN (linkem), each between two namespaces the
harness creates under a unique name and always removes.

Addresses are fixed: side a is 198.18.0.1, side b is 198.18.1.1 (RFC 2544 benchmark range).
"""

import json
import os
import shutil
import signal
import subprocess
import time

from proc import run

A_ADDR = "198.18.0.1"
B_ADDR = "198.18.1.1"

# Socket-buffer limits of the TCP stacks inside both namespaces (per-namespace sysctls; the host's
# own settings are not touched). The host default (wmem max 4 MiB) would cap any TCP sender at
# about 330 Mbit/s at 100 ms RTT; every TCP peer gets the same tuned stack.
TCP_SYSCTLS = {
    "net.ipv4.tcp_rmem": "4096 131072 134217728",
    "net.ipv4.tcp_wmem": "4096 16384 134217728",
}


def _hosts_file(ns):
    """`ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts: gives the GridFTP server
    names for the benchmark addresses (it resolves them and there is no DNS in the namespace)."""
    d = f"/etc/netns/{ns}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/hosts", "w") as f:
        f.write(f"127.0.0.1 localhost\n127.0.1.1 {os.uname().nodename}\n"
                f"{A_ADDR} bench-a\n{B_ADDR} bench-b\n")


def _remove_hosts(ns):
    shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
    try:
        os.rmdir("/etc/netns")   # only if now empty
    except OSError:
        pass


def _tune(ns):
    for k, v in TCP_SYSCTLS.items():
        run(["sysctl", "-q", "-w", f"{k}={v}"], ns=ns)


class LanPath:
    """veth pair, segmentation offloads off on both ends, GRO on (BENCH.md)."""

    kind = "lan"

    def __init__(self, prefix):
        self.prefix = prefix
        self.ns_a, self.ns_b = f"{prefix}-a", f"{prefix}-b"
        self.label = "LAN veth (offloads off)"
        self.created = []

    def up(self):
        for ns in (self.ns_a, self.ns_b):
            run(["ip", "netns", "add", ns])
            self.created.append(ns)
            _hosts_file(ns)
        tmp_a, tmp_b = f"vb{os.getpid()}a", f"vb{os.getpid()}b"
        run(["ip", "link", "add", tmp_a, "netns", self.ns_a, "type", "veth", "peer", "name", tmp_b,
             "netns", self.ns_b])
        for ns, tmp, addr in ((self.ns_a, tmp_a, A_ADDR), (self.ns_b, tmp_b, B_ADDR)):
            run(["ip", "-n", ns, "link", "set", tmp, "name", "eth0"])
            run(["ip", "-n", ns, "addr", "add", f"{addr}/15", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ethtool", "-K", "eth0", "tso", "off", "gso", "off", "tx-udp-segmentation", "off",
                 "gro", "on"], ns=ns)
            run(["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"], ns=ns)
            _tune(ns)
        self.offloads = run(["ethtool", "-k", "eth0"], ns=self.ns_a)
        return self

    def _tx_bytes(self, ns):
        j = json.loads(run(["ip", "-s", "-j", "link", "show", "eth0"], ns=ns))
        return j[0]["stats64"]["tx"]["bytes"]

    def begin_run(self, seed):
        self._before = (self._tx_bytes(self.ns_a), self._tx_bytes(self.ns_b))

    def end_run(self):
        a, b = self._tx_bytes(self.ns_a), self._tx_bytes(self.ns_b)
        return {"wire_bytes": (a - self._before[0]) + (b - self._before[1]),
                "wire_a2b_bytes": a - self._before[0], "wire_b2a_bytes": b - self._before[1],
                "wire_source": "veth tx byte counters (ip -s link), both directions, L3+L2 headers"}

    def down(self):
        for ns in self.created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            _remove_hosts(ns)
        self.created = []


class WanPath:
    """linkem between two namespaces: rate, drop-tail queue of one BDP, delay, loss.

    A fresh `linkem run` per transfer: its counters are that transfer's, and every transfer starts
    with an empty queue."""

    kind = "wan"

    def __init__(self, prefix, linkem, rate_mbit, rtt_ms, loss_pct, burst=None, log_dir="/tmp",
                 batch_us=0, ackc_us=0, gro_pkts=0):
        """batch_us: release the data (a -> b) to b only at wakes every batch_us (receive
        batching, 0 = on time); ackc_us: the same for b -> a (ACK compression); gro_pkts: hand
        the data to b in GRO-like batches of this many packets (or what came within linkem's
        window, 100 us), 0 = off."""
        self.prefix, self.linkem = prefix, linkem
        self.ns_a, self.ns_b = f"{prefix}-a", f"{prefix}-b"
        self.rate_mbit, self.rtt_ms, self.loss_pct, self.burst = rate_mbit, rtt_ms, loss_pct, burst
        self.batch_us, self.ackc_us, self.gro_pkts = batch_us, ackc_us, gro_pkts
        self.queue_bytes = max(int(rate_mbit * 1e6 / 8 * rtt_ms / 1000), 96000)
        ge = f", Gilbert-Elliott burst {burst}" if burst else ""
        ge += f", receive batched every {batch_us} us" if batch_us else ""
        ge += f", ACKs compressed every {ackc_us} us" if ackc_us else ""
        ge += f", received in GRO-like batches of {gro_pkts} packets" if gro_pkts else ""
        self.label = f"WAN {rate_mbit} Mbit/s, RTT {rtt_ms} ms, loss {loss_pct} %{ge}"
        self.log_dir = log_dir
        self.is_up = False
        self.emu = None

    def up(self):
        run([self.linkem, "netns", "up", "--prefix", self.prefix])
        self.is_up = True
        for ns in (self.ns_a, self.ns_b):
            _hosts_file(ns)
            _tune(ns)
        return self

    def linkem_args(self, seed):
        args = [self.linkem, "run", "--prefix", self.prefix, "--rate", f"{self.rate_mbit}mbit",
                "--queue", str(self.queue_bytes), "--delay", f"{self.rtt_ms / 2:g}ms",
                "--loss", f"{self.loss_pct:g}%", "--seed", str(seed)]
        if self.burst:
            args += ["--loss-burst", str(self.burst)]
        if self.batch_us:
            args += ["--a2b-release-granularity", f"{self.batch_us}us"]
        if self.ackc_us:
            args += ["--b2a-release-granularity", f"{self.ackc_us}us"]
        if self.gro_pkts:
            args += ["--a2b-gro-batch", str(self.gro_pkts)]
        return args

    def begin_run(self, seed):
        self.emu_out = open(os.path.join(self.log_dir, "linkem.out"), "w+")
        self.emu_err = open(os.path.join(self.log_dir, "linkem.err"), "w+")
        self.emu_args = self.linkem_args(seed)
        self.emu = subprocess.Popen(self.emu_args, stdout=self.emu_out, stderr=self.emu_err,
                                    start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out = run(["ip", "-o", "-4", "addr", "show", "dev", "linkem0"], check=False, ns=self.ns_b)
            out_a = run(["ip", "-o", "-4", "addr", "show", "dev", "linkem0"], check=False, ns=self.ns_a)
            if B_ADDR in out and A_ADDR in out_a:
                return
            if self.emu.poll() is not None:
                break
            time.sleep(0.05)
        self.emu_err.seek(0)
        raise RuntimeError("linkem did not come up: " + self.emu_err.read()[-500:])

    def end_run(self):
        counters = None
        if self.emu is not None:
            os.kill(self.emu.pid, signal.SIGINT)
            try:
                self.emu.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.emu.pid, signal.SIGKILL)
                self.emu.wait()
            self.emu_out.seek(0)
            lines = [ln for ln in self.emu_out.read().splitlines() if ln.startswith("{")]
            self.emu_out.close()
            self.emu_err.close()
            self.emu = None
            if lines:
                counters = json.loads(lines[-1])
        linkem_cmd = " ".join(getattr(self, "emu_args", []))
        if not counters:
            return {"wire_bytes": None, "linkem": None, "linkem_cmd": linkem_cmd}
        a2b, b2a = counters["a2b"], counters["b2a"]
        return {"wire_bytes": a2b["received_bytes"] + b2a["received_bytes"], "linkem_cmd": linkem_cmd,
                "wire_a2b_bytes": a2b["received_bytes"], "wire_b2a_bytes": b2a["received_bytes"],
                "wire_source": "linkem received_bytes (IP packets offered to the link), both directions",
                # queue_p50_us / queue_p99_us: how long delivered packets waited in the bottleneck's
                # queue (linkem's own histogram, 100 us buckets; absent from an older linkem).
                "linkem": {d: {k: counters[d].get(k) for k in ("received", "dropped_loss", "dropped_queue",
                                                              "dropped_pool", "delivered", "late_over_1ms",
                                                              "max_late_us", "rt_failed", "queue_p50_us",
                                                              "queue_p99_us")}
                           for d in ("a2b", "b2a")}}

    def down(self):
        if self.emu is not None:
            try:
                self.end_run()
            except Exception:  # noqa: BLE001 - cleanup must go on
                pass
        if self.is_up:
            subprocess.run([self.linkem, "netns", "down", "--prefix", self.prefix], capture_output=True)
            self.is_up = False
        for ns in (self.ns_a, self.ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            _remove_hosts(ns)
