#!/usr/bin/env python3
"""Time to the first data byte, and whole-command time, of `sluice cp` uploads and downloads over
the WAN path (linkem, 1000 Mbit/s, no loss) at several round-trip times: issue 26's measure of the
session's handshake.

The time is counted from the client's first packet (quinn's trace of its first datagram sent,
the QUIC Initial) to the arrival of the first data packet at the receiving host (the receiver's
`first data` event: the kernel's receive time of that datagram, even when it waited in the
socket buffer for the receiver to start). Both processes run on this host, so their wall clocks
are one clock. The client's time from its `connecting` event (just before quinn builds the
Initial) to that first packet is reported too: it is local CPU, mostly AWS-LC seeding its random
generator on first use. Several binaries may be compared in one run (`--bin
NAME=PATH`), taking turns run by run. `--warm NAME,...` gives those binaries' runs a first,
unmeasured copy of the same size to the same server (the client's cache directory and the
server's state directory kept), so the measured copy starts from path memory; every run's
client has a cache directory of its own. The server is stopped once its request has ended (at
most a few seconds after the client), and each row says whether it heard the client's verdict
(`server_verified`): a download's client ends as soon as it has written it.

    python3 bench/ttfb.py --rtts 100,300 --sizes 1MiB,128MiB --runs 3 \
        --bin before=/path/to/old/sluice --bin after=target/release/sluice
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from netns import B_ADDR, WanPath  # noqa: E402
from proc import Proc  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINKEM = os.path.join(REPO, "target", "release", "linkem")
TOKEN = "ttfb-token-0123456789abcdef0123"
PORT = 4433
CONNECTING = re.compile(r"connecting.*unix_us=(\d+)")
# quinn_proto's trace of a datagram sent; its time is the line's RFC 3339 stamp.
SENT = re.compile(r"^(\S+)Z .*quinn_proto::connection: sending \d+ bytes in \d+ datagrams")
# How long after the client's end the server may take to end its request: a sender that
# missed its last acknowledgement stops 2 s after the receiver's answer.
SERVER_END_WAIT_S = 4
# What the server logs when a request ends: a download, an upload, a failure.
REQUEST_ENDS = ("client verified the files", "stored and verified", "request failed",
                "could not take the files")
FIRST_DATA = re.compile(r"first data.*arrived_unix_us=(\d+)")


def size_arg(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, mult in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * mult)
    return int(text)


def data_queue(link):
    """The queue the data met in linkem (`WanPath.end_run`'s counters): the direction that
    delivered more packets carries the data. Median and 99th percentile of the packets' waits, ms."""
    dirs = (link or {}).get("linkem") or {}
    if not dirs:
        return {}
    data = max(dirs.values(), key=lambda d: d.get("delivered") or 0)
    return {f"queue_{q}_ms": (data[f"queue_{q}_us"] / 1000 if data.get(f"queue_{q}_us") is not None else None)
            for q in ("p50", "p99")}


def stamps(path, pattern):
    with open(path, errors="replace") as f:
        return [int(m.group(1)) for line in f if (m := pattern.search(line))]


def sent_stamps(path):
    """Microseconds since the epoch of each datagram quinn traced as sent."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if m := SENT.search(line):
                when = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
                out.append(int(when.timestamp() * 1_000_000))
    return out


def run_once(path, command, direction, size, scratch, run_no, port, warm=False, events=False):
    """One server on `port` and one `cp` of `size` bytes; returns the measures. (A port of its
    own each run: a stopped server may still be winding down its sessions.)"""
    work = os.path.join(scratch, f"{direction}-{run_no}")
    served, local = os.path.join(work, "served"), os.path.join(work, "local")
    os.makedirs(served)
    os.makedirs(local)
    tokens = os.path.join(work, "tokens")
    fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(TOKEN + "\n")
    name = "payload.bin"
    data_at = os.path.join(local if direction == "upload" else served, name)
    binary, extra = command[0], command[1:]
    with open(data_at, "wb") as f:
        f.write(os.urandom(size))
    env = dict(os.environ, RUST_LOG="sluice=debug")
    client_env = dict(os.environ, RUST_LOG="sluice=debug,quinn_proto::connection=trace",
                      XDG_CACHE_HOME=os.path.join(work, "cache"))
    server = Proc(path.ns_b, [binary, "serve", "--root", served, "--listen", f"{B_ADDR}:{port}",
                              "--state-dir", os.path.join(work, "state"), "--tokens", tokens,
                              *(["--event-log", os.path.join(work, "events.jsonl")] if events
                                else [])],
                  os.path.join(work, "server.log"), env=env)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(server.log_path, errors="replace") as f:
                if "serving" in f.read():
                    break
            if server.poll():
                with open(server.log_path, errors="replace") as f:
                    raise RuntimeError("the server ended: " + f.read()[-2000:])
            time.sleep(0.05)
        common = [binary, "cp", "-q", "-P", str(port), "--token-file", tokens, "--known-hosts",
                  os.path.join(work, "known_hosts"), "--accept-new-host", *extra]
        if direction == "upload":
            argv = common + [data_at, f"{B_ADDR}:"]
        else:
            argv = common + [f"{B_ADDR}:{name}", local + "/"]
        if warm:
            # The same copy once before, unmeasured: what the path delivered is kept.
            # (Under another name, so the measured copy lands where nothing is, as a cold one.)
            if direction == "upload":
                warm_argv = common + [data_at, f"{B_ADDR}:warm.bin"]
            else:
                aside = os.path.join(work, "warm")
                os.makedirs(aside)
                warm_argv = common + [f"{B_ADDR}:{name}", aside + "/"]
            warmup = Proc(path.ns_a, warm_argv, os.path.join(work, "warmup.log"), env=client_env)
            if not warmup.wait(600) or warmup.p.returncode != 0:
                raise RuntimeError(f"the warm-up copy failed: see {warmup.log_path}")
            shutil.rmtree(os.path.join(work, "warm"), ignore_errors=True)
        t0 = time.monotonic()
        client = Proc(path.ns_a, argv, os.path.join(work, "client.log"), env=client_env)
        if not client.wait(600):
            raise RuntimeError("the client did not end in 600 s")
        wall = time.monotonic() - t0
        if client.p.returncode != 0:
            raise RuntimeError(f"cp failed ({client.p.returncode}): see {client.log_path}")
        # The server's end of the request, before it is stopped: a client may end before the
        # server has read its last answer (a download ends once its `Verified` is written), and
        # whether the server heard it is part of the result.
        deadline = time.monotonic() + SERVER_END_WAIT_S
        while time.monotonic() < deadline and not server_said(server.log_path, *REQUEST_ENDS):
            time.sleep(0.05)
    finally:
        # The server runs under GNU time in a session of its own: stop the whole group.
        try:
            os.killpg(server.pid, 15)
        except ProcessLookupError:
            pass
        if not server.wait(10):
            os.killpg(server.pid, 9)
            server.wait(10)
    # The files go at once (1 GiB runs would fill /dev/shm); the logs stay until the end.
    shutil.rmtree(served, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    connecting = stamps(client.log_path, CONNECTING)
    start = [t for t in sent_stamps(client.log_path) if connecting and t >= connecting[0]]
    receiver_log = server.log_path if direction == "upload" else client.log_path
    first = [t for t in stamps(receiver_log, FIRST_DATA) if start and t >= start[0]]
    if not start or not first:
        raise RuntimeError(f"no connecting / sent / first data events in {work}")
    heard = "client verified the files" if direction == "download" else "stored and verified"
    return {"ttfb_ms": (min(first) - start[0]) / 1000, "wall_s": wall,
            "before_first_packet_ms": (start[0] - connecting[0]) / 1000,
            "server_verified": server_said(server.log_path, heard)}


def server_said(log_path, *words):
    """Whether the server's log holds any of `words`."""
    with open(log_path, errors="replace") as f:
        text = f.read()
    return any(w in text for w in words)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rtts", default="100,300", help="round-trip times in ms")
    ap.add_argument("--loss", type=float, default=0, help="random loss in percent, both ways")
    ap.add_argument("--sizes", default="1MiB,128MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", action="append", required=True,
                    help="NAME=PATH [CP ARGS...] of a sluice binary, with extra `cp` arguments "
                         "(e.g. the blast ceiling: --policy fixed --limit-rate 1000Mbit)")
    ap.add_argument("--batch-us", type=int, default=0,
                    help="release the data to the receiver only at wakes this many us apart "
                         "(receive batching, as real hosts do); 0: on time")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--directions", default="upload,download")
    ap.add_argument("--keep", action="store_true",
                    help="keep the logs (the scratch directory), with the server's event log")
    ap.add_argument("--warm", default="",
                    help="binaries (by NAME) whose runs copy once, unmeasured, before the "
                         "measured copy: it starts from path memory")
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.bin]
    bins = [(name, shlex.split(rest)) for name, rest in bins]
    rtts = [int(r) for r in args.rtts.split(",")]
    sizes = [size_arg(s) for s in args.sizes.split(",")]
    if args.loss and not 0 < args.loss < 100:
        raise SystemExit("--loss is a percentage between 0 and 100")
    scratch = tempfile.mkdtemp(prefix="sluice-ttfb-", dir="/dev/shm")
    results = []
    tries = 0
    try:
        for rtt in rtts:
            path = WanPath(f"ttfb{os.getpid()}", LINKEM, 1000, rtt, args.loss, log_dir=scratch,
                           batch_us=args.batch_us).up()
            try:
                for size in sizes:
                    for direction in args.directions.split(","):
                        for run_no in range(args.runs):
                            for name, binary in bins:
                                path.begin_run(seed=run_no + 1)
                                try:
                                    # A port of its own per try: a failed run's server may
                                    # still hold its port for a moment.
                                    port = PORT + tries
                                    tries += 1
                                    warm = name in args.warm.split(",")
                                    m = run_once(path, binary, direction, size, scratch,
                                                 f"{name}-{rtt}-{size}-{run_no}", port, warm,
                                                 events=args.keep)
                                except RuntimeError as e:
                                    print(f"run failed, left out: {e}", file=sys.stderr)
                                    continue
                                finally:
                                    link = path.end_run()
                                row = {"bin": name, "rtt_ms": rtt, "size": size,
                                       "direction": direction, "run": run_no, **m,
                                       **data_queue(link)}
                                print(json.dumps(row), flush=True)
                                results.append(row)
            finally:
                path.down()
    finally:
        if args.keep:
            print(f"logs kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{'rtt':>4} {'size':>9} {'direction':>9} {'bin':>8} {'ttfb ms':>9} "
          f"{'ttfb/rtt':>8} {'wall s':>7} {'pre ms':>7} {'q50 ms':>7} {'q99 ms':>7}  (medians of "
          f"{args.runs}; pre: the client's CPU from `connecting` to its first packet, not in ttfb; "
          "q50, q99: how long the data's packets waited in linkem's queue, median and 99th "
          "percentile of the run, to 0.1 ms)")
    for rtt in rtts:
        for size in sizes:
            for direction in args.directions.split(","):
                for name, _ in bins:
                    rows = [r for r in results if (r["bin"], r["rtt_ms"], r["size"],
                                                   r["direction"]) == (name, rtt, size, direction)]
                    if not rows:
                        continue
                    ttfb = statistics.median(r["ttfb_ms"] for r in rows)
                    wall = statistics.median(r["wall_s"] for r in rows)
                    pre = statistics.median(r["before_first_packet_ms"] for r in rows)
                    q = [statistics.median(v) if (v := [r[k] for r in rows if r.get(k) is not None])
                         else float("nan") for k in ("queue_p50_ms", "queue_p99_ms")]
                    print(f"{rtt:>4} {size >> 20:>6}MiB {direction:>9} {name:>8} {ttfb:>9.1f} "
                          f"{ttfb / rtt:>8.2f} {wall:>7.2f} {pre:>7.1f} {q[0]:>7.1f} {q[1]:>7.1f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": results, "argv": sys.argv}, f, indent=1)


if __name__ == "__main__":
    main()
