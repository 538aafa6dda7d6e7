"""Fairness cells (BENCH.md "Fairness"): two flows started together through ONE linkem bottleneck
between two fresh namespaces, both sending from a to b (so they share the a->b queue).

Per cell, three pairs, each with a fresh `linkem run` (empty queue, the cell's seed):
  cubic+cubic    two `iperf3 -C cubic` flows: the baseline of the TCP-friendliness index
  sluice+cubic   one `sluice cp` upload and one `iperf3 -C cubic` flow
  sluice+sluice  two `sluice cp` uploads, two `sluice serve` in b on two ports, two different files

How the goodputs are measured (fairness_metrics.py has the arithmetic): each receiver writes into a
directory of its own (a `sluice serve --root`, or `iperf3 -s -F <file>`, which writes what it
receives), and every 0.2 s the harness reads the bytes present in each directory (allocated blocks:
Sluice's preallocated sparse partial file counts only what was written). The common interval runs
from the latest first byte of the two flows (handshakes left out) to the earliest end of a flow:
a Sluice file complete on the receiver, an iperf3 flow's first byte + its duration, or a client's
exit. Each flow's goodput is the bytes it delivered within that interval over its length; a flow
that finishes early therefore does not let the other's solo time count.

Sizing: iperf3 runs D seconds (`--fairness-seconds`); each Sluice file is D seconds at half the
bottleneck rate (`--fairness-size` overrides), so at a fair share both flows of a pair end
together; a Sluice transfer always runs to completion (its file is then checked by SHA-256), even
if that takes longer than D, up to a hard cap of 3 D + 30 s (then the pair is a failure).

Logs: with FAIR_KEEP=DIR in the environment each pair's server and client logs are copied to
DIR/<pair>-<unix time>/ before the pair's directory is removed (with RUST_LOG=sluice=debug a
Sluice sender's log traces its channels four times a second).
"""

import os
import re
import shutil
import time

from fairness_metrics import NoOverlap, completion_time, first_byte_time, jain, overlap_goodputs, tcp_friendliness
from netns import WanPath
from proc import Proc, wait_listening
from tools.base import Ctx, loadavg
from tools.iperf import Iperf3
from tools.sluice import Sluice
from workload import MIB, make_file, received_bytes

DEFAULT_CELLS = "wan-rtt100-loss0,wan-rtt100-loss1"
PAIRS = ("cubic+cubic", "sluice+cubic", "sluice+sluice")
# More pairs, run when named (--fairness-pairs): Sluice's `--policy low` beside a fair flow.
# "cubic+sluice" is "sluice+cubic" with the cubic flow first: with --fairness-stagger the first flow
# of a pair starts that long before the second (issue 25 item 4: Sluice first, second, together).
# "sluice+bbr" and "bbr+sluice": the same beside one `iperf3 -C bbr` flow (issue 25 item 4: `fair`
# holds its share against cubic and BBR). "cubic+bbr": what TCP cubic itself keeps beside that BBR flow,
# the yardstick of a fair share there.
EXTRA_PAIRS = ("sluice-low+sluice", "sluice-low+cubic", "sluice-tcp+cubic", "sluice-tcp4+cubic",
               "cubic+sluice", "sluice+bbr", "bbr+sluice", "cubic+bbr")
TICK_S = 0.2


def parse_cells(spec):
    """'wan-rtt100-loss1,wan-rtt10-loss0' -> [(100, 1.0), (10, 0.0)] (any RTT and loss)."""
    out = []
    for c in spec.split(","):
        m = re.fullmatch(r"wan-rtt(\d+(?:\.\d+)?)-loss(\d+(?:\.\d+)?)", c.strip())
        if not m:
            raise SystemExit(f"bad fairness cell '{c}' (e.g. wan-rtt100-loss1)")
        rtt, loss = float(m.group(1)), float(m.group(2))
        out.append(tuple(int(x) if x.is_integer() else x for x in (rtt, loss)))
    return out


def cell_name(rtt, loss):
    return f"wan-rtt{rtt:g}-loss{loss:g}"


def default_size(seconds, rate_mbit):
    """D seconds at half the bottleneck, whole MiB."""
    return max(1, int(seconds * rate_mbit / 2 * 1e6 / 8 / MIB)) * MIB


class _Flow:
    def __init__(self, kind, i, root, path, work, port, seed, cap, seconds):
        self.kind, self.i = kind, i
        self.name = f"{kind}-{i}"
        self.dst = os.path.join(root, f"dst-{i}")
        scratch = os.path.join(root, f"scratch-{i}")
        for d in (self.dst, scratch):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        self.sluice = kind.startswith("sluice")
        self.work = work if self.sluice else None
        self.total = work.bytes if self.sluice else None
        self.ctx = Ctx(path, work, cap, scratch, self.dst, port, seed, root)
        self.ctx.iperf_s = seconds
        if self.sluice:
            if kind == "sluice-tcp":
                # Over TCP, the default: the sender grows and halves its streams.
                self.tool = Sluice(transport="tcp")
            elif kind == "sluice-tcp4":
                # Over TCP, four streams fixed (FSP's rule of thumb).
                self.tool = Sluice(4, transport="tcp")
            else:
                self.tool = Sluice(policy="low" if kind == "sluice-low" else None)
        else:
            self.tool = Iperf3(kind)    # "cubic" or "bbr"
        self.tool.prepare(self.ctx)
        self.log_base = os.path.join(root, f"{self.name}")
        self.server = self.client = None
        self.samples = []

    def server_argv(self):
        argv = self.tool.server_argv(self.ctx)
        if not self.sluice:
            argv += ["-F", os.path.join(self.dst, "tcp-received.bin")]   # receiver writes what it gets
        return argv

    def start_server(self, ns_b):
        self.server = Proc(ns_b, self.server_argv(), self.log_base + "-server.log", cwd=self.ctx.scratch)
        proto = "udp" if self.sluice else "tcp"
        if not wait_listening(ns_b, self.ctx.port, proto, proc=self.server):
            raise _PairFailed(f"{self.name}: server did not start: {self.server.output(400)}")

    def start_client(self, ns_a):
        self.client = Proc(ns_a, self.tool.client_argv(self.ctx), self.log_base + "-client.log",
                           cwd=self.ctx.scratch)


class _PairFailed(Exception):
    pass


def run_pair(path, pair, works, seconds, seed, root, port_base, stagger_s=0.0):
    """One pair through a fresh `linkem run`: a row with status ok / fail and, if ok, the goodputs.
    The second flow's client starts `stagger_s` after the first's; the goodputs count from the
    later first byte, so they tell how the pair shares once both run."""
    kinds = pair.split("+")
    cap = 3 * seconds + 30 + stagger_s
    row = {"pair": pair, "duration_s": seconds, "cap_s": cap, "tick_s": TICK_S, "stagger_s": stagger_s,
           "load_before": loadavg()}
    pair_root = os.path.join(root, "fair")
    shutil.rmtree(pair_root, ignore_errors=True)
    os.makedirs(pair_root)
    n_sluice = 0
    flows = []
    for i, kind in enumerate(kinds, 1):
        work = None
        if kind.startswith("sluice"):
            work = works[n_sluice]    # the two Sluice flows of a pair send different files
            n_sluice += 1
        flows.append(_Flow(kind, i, pair_root, path, work, port_base + i, seed, cap, seconds))
    t_launch = None
    link = {}
    try:
        path.begin_run(seed)
        for f in flows:
            f.start_server(path.ns_b)
        t_launch = time.monotonic()
        flows[0].start_client(path.ns_a)
        deadline = t_launch + cap
        while True:
            now = time.monotonic()
            for f in flows[1:]:
                if f.client is None and now - t_launch >= stagger_s:
                    f.start_client(path.ns_a)
            for f in flows:
                f.samples.append([round(now - t_launch, 3), received_bytes(f.dst)])
            # Every one, each tick: poll() stamps the exit time. One not started yet has not exited.
            exited = [f.client is not None and f.client.poll() for f in flows]
            if all(exited) or now >= deadline:
                break
            time.sleep(max(0.0, TICK_S - (time.monotonic() - now)))
        timed_out = [f.name for f in flows if f.client is None or not f.client.poll()]
        if timed_out:
            raise _PairFailed(f"{', '.join(timed_out)} still running at the {cap:g} s cap")
    except _PairFailed as e:
        row.update(status="fail", reason=str(e))
    finally:
        for f in flows:
            if f.client is not None:
                f.client.stop()
        time.sleep(0.3)
        for f in flows:
            if f.server is not None:
                f.server.stop()
        link = path.end_run()
    row["linkem"] = link.get("linkem")
    row["wire_a2b_bytes"] = link.get("wire_a2b_bytes")
    row["load_after"] = loadavg()
    row["flows"] = [_judge(f, t_launch, seconds) for f in flows]
    keep = os.environ.get("FAIR_KEEP")
    if keep:
        dst = os.path.join(keep, f"{pair}-{int(time.time())}")
        os.makedirs(dst, exist_ok=True)
        for f in flows:
            for suffix in ("-server.log", "-client.log"):
                if os.path.exists(f.log_base + suffix):
                    shutil.copy(f.log_base + suffix, dst)
    shutil.rmtree(pair_root, ignore_errors=True)
    if row.get("status") == "fail":
        return row
    bad = [f for f in row["flows"] if not f["ok"]]
    if bad:
        row.update(status="fail", reason="; ".join(f"{f['name']}: {f['why']}" for f in bad))
        return row
    try:
        t0, t1, goodputs = overlap_goodputs([{"samples": f["samples"], "end": f["end_s"]} for f in row["flows"]])
    except NoOverlap as e:
        row.update(status="fail", reason=f"no common interval: {e}")
        return row
    half = path.rate_mbit / 2
    for f, g in zip(row["flows"], goodputs):
        f["goodput_mbit"] = round(g, 1)
        f["share_of_half"] = round(g / half, 3)
    row.update(status="ok", window_s=[t0, t1], window_len_s=round(t1 - t0, 2), jain=round(jain(goodputs) or 0, 4),
               reason=f"common interval {t0:.1f}-{t1:.1f} s after launch")
    return row


def _judge(f, t_launch, seconds):
    """A flow's record: its samples, ends, processes, and whether it delivered what it should."""
    out = {"name": f.name, "kind": f.kind, "port": f.ctx.port, "samples": f.samples,
           "server_cmd": " ".join(f.server.argv) if f.server else None,
           "client_cmd": " ".join(f.client.argv) if f.client else None,
           "client_rc": f.client.returncode if f.client else None}
    if f.client is not None:
        out.update(cpu_a_s=f.client.cpu_s(), rss_a_mib=f.client.max_rss_mib(), client_output=f.client.output(800))
    if f.server is not None:
        out.update(cpu_b_s=f.server.cpu_s(), rss_b_mib=f.server.max_rss_mib(), server_output=f.server.output(800))
    exit_s = round(f.client.t_end - t_launch, 3) if f.client is not None and f.client.t_end else None
    first = first_byte_time(f.samples)
    out.update(exit_s=exit_s, first_byte_s=first)
    ok, why = True, ""
    if f.client is None or f.client.returncode is None:
        ok, why = False, "client did not run to its end"
    elif f.sluice:
        done = completion_time(f.samples, f.total)
        out["complete_s"] = done
        ends = [x for x in (done, exit_s) if x is not None]
        out["end_s"] = min(ends) if ends else None
        out["file_bytes"] = f.total
        verified, why = f.work.verify(f.dst)
        out["verified"] = verified
        if f.client.returncode != 0:
            ok, why = False, f"sluice cp exit {f.client.returncode} ({why}): {f.client.output(300).strip()}"
        elif not verified:
            ok = False
        if done and first is not None:
            out["whole_mbit"] = round(f.total * 8 / (done - first) / 1e6, 1)   # first byte to complete
    else:
        out["end_s"] = min(first + seconds, exit_s) if first is not None and exit_s is not None else exit_s
        out["received_file_bytes"] = f.samples[-1][1] if f.samples else None   # iperf3 -s -F, at the end
        j = _iperf_json(f.client.log_path)
        try:
            rcv = j["end"]["sum_received"]
            out["iperf3_mbit"] = round(rcv["bits_per_second"] / 1e6, 1)     # iperf3's own, whole duration
            out["iperf3_bytes"] = rcv["bytes"]
            out["retransmits"] = j["end"].get("sum_sent", {}).get("retransmits")
            out["verified"] = None
            why = f"iperf3: {out['iperf3_mbit']} Mbit/s over {rcv['seconds']:.1f} s, {out['retransmits']} retransmissions"
        except (TypeError, KeyError) as e:
            ok, why = False, f"iperf3 gave no result ({e}): {f.client.output(300).strip()}"
    out.update(ok=ok, why=why)
    return out


def _iperf_json(p):
    import json
    try:
        with open(p) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def run_cells(cells, linkem, rate_mbit, seconds, size, seed, root, log, on_row, missing, pairs=PAIRS,
              stagger_s=0.0, batch_us=0):
    """Every pair (of `pairs`) of every cell; on_row(row) after each (to save). missing: {"sluice": reason or
    None, "iperf3-cubic": reason or None}. batch_us: linkem releases the data and the ACKs only at wakes
    that far apart (0: on time). Namespaces are removed even on failure."""
    rows = []
    works = None
    for n, (rtt, loss) in enumerate(cells):
        path = WanPath(f"bench-{os.getpid()}-f{n}", linkem, rate_mbit, rtt, loss, log_dir=root,
                       batch_us=batch_us, ackc_us=batch_us)
        name = cell_name(rtt, loss)
        log(f"fairness cell {name}: {path.label}")
        try:
            path.up()
            cell_rows = {}
            for pair in pairs:
                base = {"cell": name, "path": "fairness", "path_label": path.label, "rate_mbit": rate_mbit,
                        "rtt_ms": rtt, "loss_pct": loss, "queue_bytes": path.queue_bytes, "seed": seed + n}
                why = None
                if "sluice" in pair and missing.get("sluice"):
                    why = missing["sluice"]
                elif "cubic" in pair and missing.get("iperf3-cubic"):
                    why = missing["iperf3-cubic"]
                elif "bbr" in pair and missing.get("iperf3-bbr"):
                    why = missing["iperf3-bbr"]
                if why:
                    base.update(pair=pair, status="n/a", reason=why)
                else:
                    if "sluice" in pair and works is None:
                        sz = size or default_size(seconds, rate_mbit)
                        log(f"  creating two random files of {sz // MIB} MiB for the Sluice flows")
                        works = [make_file(os.path.join(root, f"fair-src-{k}"), sz) for k in (1, 2)]
                    try:
                        base.update(run_pair(path, pair, works, seconds, seed + n, root, 46000 + 10 * n,
                                             stagger_s))
                    except (OSError, RuntimeError, ValueError) as e:
                        base.update(pair=pair, status="fail", reason=f"harness error: {type(e).__name__}: {e}")
                cell_rows[pair] = base
                rows.append(base)
                _friendliness(cell_rows)
                log(f"  {pair:14s} {summary(base)}  load {loadavg()[0]}")
                on_row(rows)
        finally:
            path.down()
    return rows


def _friendliness(cell_rows):
    """On the sluice+cubic row: the cubic flow's goodput over the mean goodput of the two flows of
    the cubic+cubic pair of the same cell."""
    sc, cc = cell_rows.get("sluice+cubic"), cell_rows.get("cubic+cubic")
    if sc is None or sc.get("status") != "ok":
        return
    if cc is None or cc.get("status") != "ok":
        sc["tcp_friendliness"] = None
        sc["friendliness_reason"] = "no baseline: the cubic+cubic pair " + (
            "did not run" if cc is None else f"failed ({cc.get('reason')})")
        return
    tcp = next(f for f in sc["flows"] if f["kind"] == "cubic")["goodput_mbit"]
    base = [f["goodput_mbit"] for f in cc["flows"]]
    sc["tcp_baseline_mbit"] = round(sum(base) / len(base), 1)
    fr = tcp_friendliness(tcp, base)
    sc["tcp_friendliness"] = None if fr is None else round(fr, 3)
    if fr is None:
        sc["friendliness_reason"] = "the cubic+cubic baseline delivered nothing"


def summary(r):
    if r["status"] != "ok":
        return f"{r['status']}: {r.get('reason', '')[:200]}"
    flows = ", ".join(f"{f['name']} {f['goodput_mbit']} Mbit/s" for f in r["flows"])
    extra = f", TCP-friendliness {r['tcp_friendliness']}" if r.get("tcp_friendliness") is not None else ""
    return f"ok: {flows} over {r['window_len_s']} s, Jain {r['jain']}{extra}"
