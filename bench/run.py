#!/usr/bin/env python3
"""Sluice benchmark harness (BENCH.md): peers and Sluice over a LAN veth and an emulated WAN.

    python3 bench/run.py --quick        # a few cells, under five minutes
    python3 bench/run.py --full         # the BENCH.md grid
    python3 bench/run.py --cells wan-rtt100-loss1 --tools scp,rsync --cap 60 --file-size 256MiB
    python3 bench/run.py --fairness-only   # two flows through one bottleneck: Jain, TCP-friendliness

Root only. Traffic stays inside namespaces this process creates (bench-<pid>-<n>-a/-b) on
198.18.0.0/15; they are removed on exit, failure or Ctrl-C.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time

try:
    import matplotlib  # noqa: F401 - only to find an interpreter that has it (Debian's)
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
            and not os.environ.get("SLUICE_BENCH_REEXEC"):
        os.environ["SLUICE_BENCH_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cells as grid  # noqa: E402
import fairness  # noqa: E402
import report  # noqa: E402
from netns import LanPath, WanPath  # noqa: E402
from tools import ALL, BY_NAME  # noqa: E402
from tools.base import Ctx, loadavg  # noqa: E402
from workload import MIB, make_file, make_tree  # noqa: E402

REPO = os.path.dirname(HERE)
LINKEM = os.path.join(REPO, "target", "release", "linkem")


def size_arg(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB)?", s.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size '{s}' (e.g. 256MiB, 1GiB)")
    mult = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}[(m.group(2) or "b").lower()]
    return int(float(m.group(1)) * mult)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ensure_tools(tools, no_install):
    missing = {t.name: t.missing() for t in tools}
    pkgs = sorted({p for t in tools if missing[t.name] and missing[t.name].startswith("not installed")
                   for p in t.packages})
    if pkgs and not no_install:
        log(f"installing from Debian: {' '.join(pkgs)}")
        subprocess.run(["apt-get", "update", "-q"], check=False, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q"] + pkgs, check=False,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), capture_output=True)
    for t in tools:
        if t.name.endswith("-bbr") and t.missing():
            subprocess.run(["modprobe", "tcp_bbr"], capture_output=True)
    return {t.name: t.missing() for t in tools}


def build_linkem():
    log("cargo build --release -p linkem")
    subprocess.run(["cargo", "build", "--release", "-p", "linkem"], cwd=REPO, check=True,
                   capture_output=True)


def selfcheck():
    log("linkem selfcheck")
    # It pings through the link: without ping it ends at once (exit 1, no report).
    if not shutil.which("ping"):
        log("installing from Debian: iputils-ping (the selfcheck's ping)")
        subprocess.run(["apt-get", "install", "-y", "-q", "iputils-ping"], check=False, capture_output=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    r = subprocess.run([LINKEM, "selfcheck"], capture_output=True, text=True, timeout=180)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("{")), None)
    return {"exit": r.returncode, "json": json.loads(line) if line else None,
            "summary": r.stderr.strip()[-2000:], "load": loadavg()}


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        default_cc = f.read().strip()
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(),
            "load_start": loadavg(), "default_tcp_cc": default_cc,
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30), 1)}


def tool_versions():
    out = {}
    for name, argv in {"iperf3": ["iperf3", "--version"], "ssh": ["ssh", "-V"],
                       "rsync": ["rsync", "--version"], "globus-url-copy": ["globus-url-copy", "-version"],
                       "srt-file-transmit": ["srt-file-transmit", "-version"]}.items():
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            out[name] = (r.stdout + r.stderr).strip().splitlines()[0][:100]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            out[name] = None
    try:
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "uftp"], capture_output=True, text=True)
        out["uftp"] = r.stdout.strip() or None
    except OSError:
        out["uftp"] = None
    return out


# BENCH.md's fairness cells live in fairness.py (two flows through one linkem bottleneck: Jain's
# index of two Sluice transfers, TCP-friendliness of Sluice beside iperf3 cubic); they run after
# the grid with --fairness, or alone with --fairness-only.
FAIRNESS_STATUS = "not measured in this run (pass --fairness, or run --fairness-only)"


class Interrupted(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_true", help="LAN + WAN 100 ms / 1 %%, 128 MiB, 20 s cap")
    mode.add_argument("--full", action="store_true", help="the BENCH.md grid")
    mode.add_argument("--cells", help="comma-separated cell ids (lan, wan-rtt100-loss1, ...)")
    mode.add_argument("--fairness-only", action="store_true", help="only the fairness cells, no grid")
    ap.add_argument("--fairness", action="store_true", help="run the fairness cells after the grid")
    ap.add_argument("--fairness-pairs", default=",".join(fairness.PAIRS),
                    help="comma-separated pairs of the fairness cells, of: "
                         + ", ".join(fairness.PAIRS + fairness.EXTRA_PAIRS))
    ap.add_argument("--fairness-cells", default=fairness.DEFAULT_CELLS,
                    help=f"WAN cells of the fairness pairs, wan-rtt<ms>-loss<pct> (default {fairness.DEFAULT_CELLS})")
    ap.add_argument("--fairness-seconds", type=float, default=30.0,
                    help="iperf3 duration of a fairness pair; Sluice files are sized to last as long at "
                    "half the bottleneck (default 30)")
    ap.add_argument("--fairness-size", type=size_arg, help="size of each Sluice file of a fairness pair "
                    "(default: --fairness-seconds at half the bottleneck rate)")
    ap.add_argument("--fairness-stagger", type=float, default=0.0,
                    help="the second flow of each fairness pair starts this many seconds after the "
                         "first (name the pair in both orders, e.g. sluice+cubic,cubic+sluice; default 0)")
    ap.add_argument("--fairness-batch-us", type=int, default=0,
                    help="linkem releases each way's packets only at wakes this many us apart (the "
                         "data: receive batching; the ACKs: compression), as real hosts do; 0: on time")
    ap.add_argument("--tools", help=f"comma-separated subset of: {', '.join(BY_NAME)}")
    ap.add_argument("--cap", type=float, help="per-run time cap in seconds (quick 20, otherwise 120)")
    ap.add_argument("--file-size", type=size_arg, help="single-file size for every path "
                    "(default: quick 128MiB; otherwise 1GiB WAN, 4GiB LAN)")
    ap.add_argument("--content", choices=("random", "text"), default="random",
                    help="single-file content: random bytes, or log-like text that compresses ~4:1")
    ap.add_argument("--tree", choices=("auto", "all", "none"), default="auto",
                    help="tree workload: auto = LAN and 100 ms / 1 %% in full mode only")
    ap.add_argument("--iperf-seconds", type=float, help="iperf3 duration (quick 5, otherwise 15)")
    ap.add_argument("--budget-min", type=float, help="start no new cell after this many minutes")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install missing peers")
    ap.add_argument("--skip-selfcheck", action="store_true")
    ap.add_argument("--seed", type=int, default=4242, help="base seed of linkem's loss draws")
    ap.add_argument("--no-report", action="store_true", help="write JSON only")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (network namespaces)")

    quick = args.quick
    do_fair = args.fairness or args.fairness_only
    fair_cells = fairness.parse_cells(args.fairness_cells) if do_fair else []
    cells = [] if args.fairness_only else grid.quick_grid() if quick else grid.full_grid() if args.full \
        else grid.parse(args.cells.split(","))
    for pair in args.fairness_pairs.split(","):
        if pair not in fairness.PAIRS + fairness.EXTRA_PAIRS:
            raise SystemExit(f"--fairness-pairs: unknown pair {pair!r}")
    tools = [] if args.fairness_only else ALL if not args.tools else [BY_NAME[t] for t in args.tools.split(",")]
    cap = args.cap or (20.0 if quick else 120.0)
    iperf_s = args.iperf_seconds or (5.0 if quick else 15.0)
    cmdline = "python3 bench/run.py " + " ".join(sys.argv[1:])

    def _sig(signum, frame):
        raise Interrupted(f"signal {signum}")
    signal.signal(signal.SIGTERM, _sig)
    signal.signal(signal.SIGINT, _sig)

    t_start = time.monotonic()
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M")
    meta = {"command": cmdline, "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": machine(), "cap_s": cap, "iperf_s": iperf_s, "seed": args.seed,
            "mode": "fairness" if args.fairness_only else "quick" if quick else "full" if args.full else "cells",
            "fairness": FAIRNESS_STATUS}
    fair_tools = [BY_NAME["iperf3-cubic"], BY_NAME["iperf3-bbr"], BY_NAME["sluice"]] if do_fair else []
    availability = ensure_tools(list({t.name: t for t in tools + fair_tools}.values()), args.no_install)
    if do_fair:
        meta["fairness"] = "measured: see the Fairness table"
        meta["fairness_cfg"] = {"cells": args.fairness_cells, "seconds": args.fairness_seconds,
                                "stagger_s": args.fairness_stagger, "batch_us": args.fairness_batch_us,
                                "sluice_file_bytes": args.fairness_size or fairness.default_size(
                                    args.fairness_seconds, grid.RATE_MBIT),
                                "rate_mbit": grid.RATE_MBIT, "tick_s": fairness.TICK_S}
    meta["tool_versions"] = tool_versions()
    meta["tools"] = {t.name: {"note": t.note, "unavailable": availability[t.name]} for t in tools}
    build_linkem()
    meta["selfcheck"] = None if args.skip_selfcheck else selfcheck()
    if meta["selfcheck"]:
        log(f"selfcheck: {json.dumps(meta['selfcheck']['json'])}")

    root = f"/dev/shm/sluice-bench-{os.getpid()}"
    results = {"lan": [], "wan": [], "fairness": []}
    not_run = []
    paths_out = {}
    try:
        os.makedirs(root)
        src = os.path.join(root, "src")
        works = {}

        def work(kind, name):
            size = args.file_size or (128 * MIB if quick else (4 << 30 if kind == "lan" else 1 << 30))
            key = (name, size if name == "file" else 0)
            if key not in works:
                log(f"creating workload {name} ({size // MIB} MiB)" if name == "file" else "creating tree")
                works[key] = make_file(src, size, args.content) if name == "file" else make_tree(src)
            return works[key]

        for n, cell in enumerate(cells):
            kind, rtt, loss, burst, batch_us, ackc_us, gro = cell
            cell_name = grid.cid(cell)
            if args.budget_min and time.monotonic() - t_start > args.budget_min * 60:
                not_run.append(cell_name)
                continue
            want_tree = args.tree == "all" or (args.tree == "auto" and not quick and args.full and (
                kind == "lan" or (rtt == 100 and loss == 1 and not burst and not batch_us and not ackc_us and not gro)))
            workloads = [work(kind, "file")] + ([work(kind, "tree")] if want_tree else [])
            prefix = f"bench-{os.getpid()}-{n}"
            path = LanPath(prefix) if kind == "lan" else WanPath(
                prefix, LINKEM, grid.RATE_MBIT, rtt, loss, burst, log_dir=root, batch_us=batch_us,
                ackc_us=ackc_us, gro_pkts=gro)
            log(f"cell {cell_name}: {path.label}")
            try:
                path.up()
                for wl in workloads:
                    for i, tool in enumerate(tools):
                        base = {"cell": cell_name, "path": kind, "path_label": path.label, "rtt_ms": rtt,
                                "loss_pct": loss, "burst": burst, "batch_us": batch_us,
                                "ack_compression_us": ackc_us, "gro_pkts": gro, "tool": tool.name, "workload": wl.name,
                                "workload_desc": wl.describe(), "file_bytes": wl.bytes,
                                "seed": args.seed + n}
                        if kind == "wan":
                            base["queue_bytes"] = path.queue_bytes
                        why = availability[tool.name] or tool.unsupported(wl)
                        if why:
                            base.update(status="n/a", reason=why)
                            results[kind].append(base)
                            log(f"  {tool.name:12s} {wl.name}: n/a ({why})")
                            continue
                        scratch = os.path.join(root, "scratch")
                        os.makedirs(scratch, exist_ok=True)
                        ctx = Ctx(path, wl, cap, scratch, os.path.join(root, "dst"),
                                  41000 + (n * 50 + i * 2 + (wl.name == "tree")) % 20000,
                                  args.seed + n, root)
                        ctx.iperf_s = iperf_s
                        try:
                            r = tool.run(ctx)
                        except Interrupted:
                            raise
                        except Exception as e:  # noqa: BLE001 - one peer's crash is its cell's failure
                            r = {"status": "fail", "reason": f"harness error: {type(e).__name__}: {e}"}
                        base.update(r)
                        results[kind].append(base)
                        log(f"  {tool.name:12s} {wl.name}: {base['status']:7s} "
                            f"{base.get('goodput_mbit', '-')} Mbit/s  wall {base.get('wall_s', '-')} s  "
                            f"{base.get('reason', '')[:90]}  load {loadavg()[0]}")
                        _save(results, meta, stamp, not_run, paths_out)
            finally:
                path.down()
        if do_fair:
            def on_row(rows):
                results["fairness"] = rows
                _save(results, meta, stamp, not_run, paths_out)
            fairness.run_cells(fair_cells, LINKEM, grid.RATE_MBIT, args.fairness_seconds, args.fairness_size,
                               args.seed, root, log, on_row,
                               {k: availability[k] for k in ("sluice", "iperf3-cubic", "iperf3-bbr")},
                               pairs=args.fairness_pairs.split(","), stagger_s=args.fairness_stagger,
                               batch_us=args.fairness_batch_us)
    except Interrupted as e:
        meta["interrupted"] = str(e)
        log(f"interrupted: {e}")
        done = {r["cell"] for rs in results.values() for r in rs}
        not_run += [grid.cid(c) for c in cells if grid.cid(c) not in done and grid.cid(c) not in not_run]
        fair_done = {r["cell"] for r in results["fairness"]}
        not_run += [f"fairness {fairness.cell_name(*c)}" for c in fair_cells if fairness.cell_name(*c) not in fair_done]
    finally:
        shutil.rmtree(root, ignore_errors=True)
        meta["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        meta["machine"]["load_end"] = loadavg()
        meta["elapsed_min"] = round((time.monotonic() - t_start) / 60, 1)
        _save(results, meta, stamp, not_run, paths_out)
    if not args.no_report:
        charts = report.charts(results["wan"], stamp, os.path.join(HERE, "results"))
        report.prepend(os.path.join(REPO, "BENCHMARKS.md"), meta, results, not_run, paths_out, charts)
        log(f"BENCHMARKS.md updated; charts: {', '.join(charts) or 'none'}")


def _save(results, meta, stamp, not_run, paths_out):
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    for kind, rs in results.items():
        if not rs:
            continue
        p = os.path.join(HERE, "results", f"{stamp}-{kind}.json")
        with open(p, "w") as f:
            json.dump({"meta": meta, "kind": kind, "not_run": not_run, "runs": rs}, f, indent=1)
        paths_out[kind] = os.path.relpath(p, REPO)


if __name__ == "__main__":
    main()
