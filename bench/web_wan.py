#!/usr/bin/env python3
"""The web app's transfers over the WAN path (issue 29's speed figures): headless chromium in
namespace b, `sluice serve --web` in namespace a, linkem between them; and, in the same cell and
the same run, the CLI's download of the same file (`sluice cp` in b from the server in a), the
yardstick the browser's download is read against.

The browser side is `crates/sluice-cli/web-tests/measure.mjs` (its timing and CPU accounting:
server and browser CPU seconds per transfer). Each transfer is one run: a fresh linkem (empty
queue, the same seed) for the CLI copy and for the browser's session.

    cargo build --release -p sluice-cli -p linkem
    (cd crates/sluice-cli/web-tests && npm ci)
    python3 bench/web_wan.py --rtt-ms 100 --loss 1 --size-mib 1024 --via webtransport \
        --dirs download,upload

`--files N` moves a folder of N files of `--file-kib` KiB (in 10 subfolders) instead: the
browser's download and upload of it, and the CLI's `sluice cp -r` of it both ways as the
yardstick (each browser direction is read against the CLI's same direction).

With MEASURE_PROFILE=1 in the environment, measure.mjs records the page's CPU profile of each
transfer beside its other output and prints where the page's JavaScript spent it (in the log
this script names).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from netns import A_ADDR, WanPath  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINKEM = os.path.join(REPO, "target", "release", "linkem")
MEASURE = os.path.join(REPO, "crates", "sluice-cli", "web-tests", "measure.mjs")
TOKEN = "web-wan-token-0123456789abcdef"
WEB_PORT = 8443
CLI_PORT = 4433


def udp_drops(ns):
    """Datagrams the kernel of namespace `ns` dropped for want of room in a socket's receive
    buffer (`RcvbufErrors` of /proc/net/snmp): a receiver that did not keep up."""
    out = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"], check=True,
                         capture_output=True, text=True).stdout
    head, values = [ln.split() for ln in out.splitlines() if ln.startswith("Udp:")][:2]
    return int(values[head.index("RcvbufErrors")])


def cpu_s(pid):
    """CPU seconds (user + system) process `pid` has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cli_download(path, binary, out, size_mib):
    """`sluice cp` of big.bin from a server in a to b; seconds, and the file compared."""
    root, dst = os.path.join(out, "cli-root"), os.path.join(out, "cli-dst")
    for d in (root, dst):
        os.makedirs(d, exist_ok=True)
    big = os.path.join(root, "big.bin")
    with open(big, "wb") as f:
        for _ in range(size_mib):
            f.write(os.urandom(1 << 20))
    seconds = timed_cp(path, binary, out, root, [f"{A_ADDR}:big.bin", dst + "/"])
    if subprocess.run(["cmp", big, os.path.join(dst, "big.bin")]).returncode != 0:
        raise RuntimeError("the CLI's download differs")
    shutil.rmtree(root)
    shutil.rmtree(dst)
    return {"via": "cli", "dir": "download", "mib": size_mib, "seconds": f"{seconds:.2f}",
            "mib_s": f"{size_mib / seconds:.1f}"}


def timed_cp(path, binary, out, root, cp_args):
    """`sluice serve --root root` in a, then `sluice cp ... cp_args` in b against it (without
    path memory); the copy's seconds. The server is stopped whatever happens."""
    tokens = os.path.join(out, "cli-tokens")
    fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(TOKEN + "\n")
    server = subprocess.Popen(
        ["ip", "netns", "exec", path.ns_a, binary, "serve", "--root", root, "--listen",
         f"{A_ADDR}:{CLI_PORT}", "--state-dir", os.path.join(out, "cli-state"), "--tokens", tokens,
         "--no-path-memory"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        subprocess.run(
            ["ip", "netns", "exec", path.ns_b, binary, "cp", "-q", "-P", str(CLI_PORT),
             "--token-file", tokens, "--known-hosts", os.path.join(out, "cli-known"),
             "--accept-new-host", "--no-path-memory", *cp_args], check=True)
        return time.monotonic() - t0
    finally:
        server.terminate()
        server.wait()


def make_tree(top, files, file_kib):
    """`files` files of random bytes, `file_kib` KiB each, in 10 subfolders of `top`."""
    for i in range(files):
        d = os.path.join(top, f"d{i % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.bin"), "wb") as f:
            f.write(os.urandom(file_kib << 10))


def cli_tree(path, binary, out, files, file_kib, direction):
    """`sluice cp -r` of a folder of `files` files between a server in a and b, one way;
    seconds, and the folders compared."""
    root, local = os.path.join(out, "cli-root"), os.path.join(out, "cli-local")
    for d in (root, local):
        os.makedirs(d, exist_ok=True)
    src = os.path.join(root if direction == "download" else local, "tree")
    make_tree(src, files, file_kib)
    copy = ([f"{A_ADDR}:tree", local + "/"] if direction == "download"
            else [src, f"{A_ADDR}:"])
    seconds = timed_cp(path, binary, out, root, ["-r", *copy])
    if subprocess.run(["diff", "-r", os.path.join(root, "tree"),
                       os.path.join(local, "tree")]).returncode != 0:
        raise RuntimeError(f"the CLI's {direction} of the folder differs")
    shutil.rmtree(root)
    shutil.rmtree(local)
    mib = files * file_kib / 1024
    return {"via": "cli", "dir": direction, "mib": mib, "files": files,
            "seconds": f"{seconds:.2f}", "mib_s": f"{mib / seconds:.1f}"}


def browser(path, binary, out, size_mib, via, dirs, timeout_s, files=0, file_kib=64,
            failed_ok=False):
    """measure.mjs in b against a server in a: its result rows."""
    env = dict(os.environ, SLUICE_BIN=binary, SLUICE_WEB_OUT=os.path.join(out, "web"),
               SIZE_MIB=str(size_mib), MEASURE_TIMEOUT_S=str(timeout_s), MEASURE_VIA=via, MEASURE_DIRS=dirs,
               MEASURE_FILES=str(files), MEASURE_FILE_KIB=str(file_kib),
               MEASURE_FAILED_OK="1" if failed_ok else "0",
               SLUICE_SERVER_NS=path.ns_a, SLUICE_WEB_ADDR=f"{A_ADDR}:{WEB_PORT}")
    # The server's log (RUST_LOG=sluice=debug traces its WebTransport controller) is kept.
    log = f"/tmp/web_wan-{os.getpid()}-{via}.log"
    with open(log, "w") as err:
        done = subprocess.run(["ip", "netns", "exec", path.ns_b, "node", MEASURE], env=env,
                              stdout=subprocess.PIPE, stderr=err, text=True)
    print(f"# the server's and the browser's stderr: {log}", flush=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        raise RuntimeError(f"measure.mjs failed: see {log}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "sluice"))
    ap.add_argument("--rtt-ms", type=float, default=100)
    ap.add_argument("--loss", type=float, default=1.0, help="percent")
    ap.add_argument("--rate-mbit", type=int, default=1000)
    ap.add_argument("--batch-us", type=int, default=0, help="receive batching of the data path")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--via", default="webtransport", help="webtransport,https,auto (auto: the page measures both on the transfer and takes the faster)")
    ap.add_argument("--dirs", default="download,upload")
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI's copy")
    ap.add_argument("--files", type=int, default=0,
                    help="a folder of this many files instead of one file of --size-mib")
    ap.add_argument("--file-kib", type=int, default=64, help="each file's size with --files")
    ap.add_argument("--failed-ok", action="store_true",
                    help="with --files: a browser run ends when each file is done or failed (the "
                         "count is shown; the files are not compared), to time an old build")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--timeout-s", type=int, default=600,
                    help="a browser transfer that takes longer fails the run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (network namespaces)")

    def stop(signum, _frame):
        raise SystemExit(f"signal {signum}: stopping (the namespaces are removed)")
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    out = f"/dev/shm/sluice-web-wan-{os.getpid()}"
    prefix = f"webwan-{os.getpid()}"
    path = WanPath(prefix, LINKEM, args.rate_mbit, args.rtt_ms, args.loss, log_dir="/tmp",
                   batch_us=args.batch_us)
    what = (f"{args.files} files of {args.file_kib} KiB" if args.files
            else f"{args.size_mib} MiB")
    print(f"# {path.label}, {what}, {args.bin}", flush=True)
    rows = []
    try:
        os.makedirs(out)
        path.up()
        cli_dirs = args.dirs.split(",") if args.files else ["download"]
        runs = [] if args.no_cli else [("cli", d) for d in cli_dirs]
        runs += [(via, args.dirs) for via in args.via.split(",")]
        for via, dirs in runs:
            path.begin_run(args.seed)
            drops = (udp_drops(path.ns_a), udp_drops(path.ns_b))
            try:
                if via == "cli" and args.files:
                    got = [cli_tree(path, args.bin, out, args.files, args.file_kib, dirs)]
                elif via == "cli":
                    got = [cli_download(path, args.bin, out, args.size_mib)]
                else:
                    got = browser(path, args.bin, out, args.size_mib, via, dirs, args.timeout_s,
                                  args.files, args.file_kib, args.failed_ok)
            finally:
                emu_cpu = cpu_s(path.emu.pid)
                counters = path.end_run()
            drops = (udp_drops(path.ns_a) - drops[0], udp_drops(path.ns_b) - drops[1])
            for r in got:
                r["linkem"] = counters.get("linkem")
                r["rcvbuf_drops_server"], r["rcvbuf_drops_client"] = drops
                # The link emulator's CPU over the whole run (one transfer each, but for the
                # browser's: its page load and every transfer measure.mjs made).
                r["linkem_cpu_s"] = round(emu_cpu, 1)
                rows.append(r)
                print(json.dumps(r), flush=True)
    finally:
        path.down()
        shutil.rmtree(out, ignore_errors=True)
    cli = {r["dir"]: float(r["seconds"]) for r in rows if r["via"] == "cli"}
    print("\n| via | direction | MiB | files | seconds | MiB/s | x CLI (same direction; one file: its download) | of which the last check s "
          "| server CPU s | browser CPU s | of it, by process | receive-buffer drops (server, "
          "client side) | linkem CPU s (whole run) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in rows:
        yard = cli.get(r["dir"] if args.files else "download")
        ratio = f"{yard / float(r['seconds']):.2f}" if yard else "-"
        failed = f" ({r['failed']} failed)" if r.get("failed") else ""
        print(f"| {r['via']} | {r['dir']} | {r['mib']} | {r.get('files', 1)}{failed} | {r['seconds']} | {r['mib_s']} | {ratio} "
              f"| {r.get('verify_s', '-')} | {r.get('server_cpu_s', '-')} | {r.get('browser_cpu_s', '-')} "
              f"| {r.get('browser_cpu_by_kind', '-')} | {r['rcvbuf_drops_server']}, {r['rcvbuf_drops_client']} | {r['linkem_cpu_s']} |")


if __name__ == "__main__":
    main()
