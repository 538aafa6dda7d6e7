"""BENCHMARKS.md (newest run on top) and the goodput-against-loss charts."""

import os

import cells as grid

HEADER = "# Sluice benchmarks\n\nWritten by `bench/run.py` (see `bench/README.md` and BENCH.md). Newest run on top.\n"


def _f(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _status(r):
    s = r["status"]
    if s == "ok":
        return "ok"
    if s == "timeout":
        return "**timeout**"
    if s == "fail":
        return "**FAIL**"
    return s


def _goodput(r):
    g = r.get("goodput_mbit")
    if g is None or r["status"] == "fail":
        return "-"
    if r.get("goodput_partial"):
        return f"({g:.1f} partial)"
    return f"{g:.1f}"


# The least share of the wire any protocol over UDP leaves to data on a 1500-byte MTU: IPv4 and
# UDP headers only (1472 of 1500 bytes), for the ideal time below.
PAYLOAD_SHARE = 1472 / 1500
# The tool whose goodput is a cell's ceiling: Sluice blasting at the link rate, no congestion
# control (the path's and this host's limit for Sluice's data plane).
CEILING_TOOL = "sluice-fixed1000"


def ideal_s(r, rate_mbit=1000):
    """The least time any protocol that needs a handshake round trip can take on a WAN run's
    path (issue 25): 2 RTT + size / (link rate x payload share x (1 - loss)); None off the WAN
    or without a size."""
    if r.get("rtt_ms") is None or r.get("loss_pct") is None or not r.get("file_bytes"):
        return None
    carried = rate_mbit * 1e6 * PAYLOAD_SHARE * (1 - r["loss_pct"] / 100)
    return 2 * r["rtt_ms"] / 1000 + r["file_bytes"] * 8 / carried


def _of_ideal(r):
    ideal = ideal_s(r)
    if ideal is None or r["status"] != "ok" or not r.get("wall_s"):
        return "-"
    return f"{ideal / r['wall_s']:.2f}"


def _of_ceiling(r, runs):
    ceiling = [c["goodput_mbit"] for c in runs if c["tool"] == CEILING_TOOL and c["status"] == "ok"
               and c.get("workload") == r.get("workload") and c.get("goodput_mbit")]
    if not ceiling or r["status"] != "ok" or r.get("goodput_mbit") is None:
        return "-"
    return f"{r['goodput_mbit'] / ceiling[0]:.3f}"


def table(runs):
    rows = ["| tool | workload | result | goodput Mbit/s | of ceiling | wall s | of ideal | CPU a / b s | "
            "peak RSS a / b MiB | wire bytes per file byte | files match | load (1 min) before | note |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in runs:
        match = {True: "yes", False: "no", None: "-"}[r.get("verified")]
        if r["status"] == "n/a":
            match = "-"
        cpu = f"{_f(r.get('cpu_a_s'))} / {_f(r.get('cpu_b_s'))}" if r.get("cpu_a_s") is not None else "-"
        rss = f"{_f(r.get('rss_a_mib'), 0)} / {_f(r.get('rss_b_mib'), 0)}" if r.get("rss_a_mib") is not None else "-"
        denom = r.get("received_bytes") if r["status"] == "timeout" else r.get("file_bytes")
        wire = _f(r["wire_bytes"] / denom, 3) if r.get("wire_bytes") and denom else "-"
        load = _f((r.get("load_before") or [None])[0], 2)
        reason = (r.get("reason") or "").replace("|", "/").replace("\n", " ")[:160]
        rows.append(f"| {r['tool']} | {r['workload']} | {_status(r)} | {_goodput(r)} | {_of_ceiling(r, runs)} | "
                    f"{_f(r.get('wall_s'))} | {_of_ideal(r)} | {cpu} | {rss} | {wire} | {match} | {load} | {reason} |")
    return "\n".join(rows)


def section(meta, results, not_run, paths_out, charts):
    m = meta["machine"]
    out = [f"## Run of {meta['started']} ({meta['mode']})", "",
           f"- command: `{meta['command']}` (as root, in the repository root)",
           f"- machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['mem_gib']} GiB, kernel {m['kernel']}; "
           f"load average at start {m['load_start']}, at end {m.get('load_end')} "
           "(other engineers were compiling on the same 2 cores: numbers are noisy)",
           (f"- per-run time cap {meta['cap_s']:g} s; iperf3 runs {meta['iperf_s']:g} s; " if meta["mode"] != "fairness"
            else "- ") + f"linkem seed base {meta['seed']}; took {meta.get('elapsed_min')} min",
           f"- host default TCP congestion control: {m['default_tcp_cc']} (scp, rsync, GridFTP use it); "
           "TCP buffers in both namespaces: tcp_rmem/tcp_wmem max 128 MiB; net.core.rmem_max/wmem_max "
           "4 MiB (host, unchanged: caps UDP tools' socket buffers)",
           f"- raw results: {', '.join('`' + p + '`' for p in paths_out.values()) or 'none'}"]
    if meta.get("interrupted"):
        out.append(f"- **interrupted** ({meta['interrupted']}): the grid is incomplete")
    sc = meta.get("selfcheck")
    if sc:
        j = sc.get("json") or {}
        out.append(f"- `linkem selfcheck` (exit {sc['exit']}, load {sc['load']}): `{_compact(j)}`")
    else:
        out.append("- `linkem selfcheck` skipped")
    vers = meta.get("tool_versions") or {}
    out.append("- peers: " + "; ".join(f"{k} {v}" for k, v in vers.items() if v))
    out.append("")
    if results.get("wan") or results.get("lan"):
        out.append("Goodput = file bytes / wall time from the client's start (handshake included) to the end of "
                   "the transfer; in parentheses: a run that hit the cap, bytes received by then / cap (not a "
                   "success). CPU and peak RSS: the sending side (a) and the receiving server (b), children "
                   "included. Wire bytes: IP bytes offered to the link in both directions per file byte (per byte "
                   "received, for a run that hit the cap). Of ceiling: goodput over that of `sluice-fixed1000` "
                   "(Sluice blasting at the link rate) in the same cell, when it ran. Of ideal: the ideal time "
                   "over the wall time, where the ideal is 2 RTT + size / (link rate x 1472/1500 x (1 - loss)), "
                   "the least any protocol that needs a handshake round trip can take.")
        out.append("")
    for kind in ("wan", "lan"):
        by_cell = {}
        for r in results[kind]:
            by_cell.setdefault(r["cell"], []).append(r)
        for cell, runs in by_cell.items():
            extra = ""
            if kind == "wan":
                extra = f", drop-tail queue {runs[0].get('queue_bytes')} bytes (one BDP), seed {runs[0].get('seed')}"
            out += [f"### {runs[0]['path_label']} (`{cell}`){extra}", "",
                    "Workloads: " + "; ".join(sorted({r['workload_desc'] for r in runs})), "", table(runs), ""]
    if results.get("fairness"):
        out += fairness_section(meta, results["fairness"])
    else:
        out += [f"Fairness (BENCH.md): {meta.get('fairness', 'not measured')}.", ""]
    if not_run:
        out += ["Cells not run: " + ", ".join(f"`{c}`" for c in not_run), ""]
    if charts:
        out += ["Charts: " + ", ".join(f"[{os.path.basename(c)}]({c})" for c in charts), ""]
    notes = "; ".join(f"**{k}**: {v['note']}" for k, v in meta["tools"].items() if v["note"])
    if notes:
        out += ["How each peer ran: " + notes, ""]
    return "\n".join(out)


def _flow_cell(f):
    if f.get("goodput_mbit") is None:
        return "-"
    return f"{f['name']}: {f['goodput_mbit']:.1f} ({f['share_of_half']:.2f})"


def fairness_table(rows):
    out = ["| cell | pair | result | flow 1 Mbit/s (/ half the bottleneck) | flow 2 Mbit/s (/ half) | "
           "sum / bottleneck | a->b drops queue / random | common interval s | Jain | TCP-friendliness | "
           "CPU a / b s, flow 1; flow 2 | load (1 min) before | note |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ok = r["status"] == "ok"
        flows = r.get("flows") or []
        f1 = _flow_cell(flows[0]) if ok and flows else "-"
        f2 = _flow_cell(flows[1]) if ok and len(flows) > 1 else "-"
        win = f"{r['window_s'][0]:.1f}-{r['window_s'][1]:.1f} ({r['window_len_s']:.1f})" if ok else "-"
        use = (f"{sum(f['goodput_mbit'] for f in flows) / r['rate_mbit']:.2f}"
               if ok and r.get("rate_mbit") else "-")
        a2b = (r.get("linkem") or {}).get("a2b")
        drops = f"{a2b['dropped_queue']} / {a2b['dropped_loss']}" if a2b else "-"
        j = _f(r.get("jain"), 3) if ok else "-"
        fr = "-"
        if ok and r["pair"] == "sluice+cubic":
            fr = (f"{r['tcp_friendliness']:.3f} ({r['tcp_baseline_mbit']:.1f})"
                  if r.get("tcp_friendliness") is not None else f"- ({r.get('friendliness_reason', '')[:80]})")
        cpu = "; ".join(f"{_f(f.get('cpu_a_s'))} / {_f(f.get('cpu_b_s'))}" for f in flows) if flows else "-"
        notes = []
        for f in flows:
            if f.get("iperf3_mbit") is not None:
                notes.append(f"{f['name']}: iperf3 says {f['iperf3_mbit']} Mbit/s, {f.get('retransmits')} retr.")
            if f.get("whole_mbit") is not None:
                notes.append(f"{f['name']}: file {f['file_bytes'] >> 20} MiB verified, {f['whole_mbit']} Mbit/s "
                             f"first byte to complete")
        note = r.get("reason", "") if not ok else "; ".join(notes)
        note = note.replace("|", "/").replace("\n", " ")[:300]
        res = {"ok": "ok", "fail": "**FAIL**"}.get(r["status"], r["status"])
        load = _f((r.get("load_before") or [None])[0], 2)
        out.append(f"| `{r['cell']}` | {r['pair']} | {res} | {f1} | {f2} | {use} | {drops} | {win} | {j} | {fr} | {cpu} | {load} | {note} |")
    return "\n".join(out)


def fairness_section(meta, rows):
    cfg = meta.get("fairness_cfg") or {}
    labels = "; ".join(dict.fromkeys(f"`{r['cell']}`: {r['path_label']}, drop-tail queue {r.get('queue_bytes')} "
                                     f"bytes, seed {r.get('seed')}" for r in rows))
    stagger = cfg.get("stagger_s") or 0
    started = ("started together" if not stagger else
               f"the second flow of each pair (as named) started {stagger:g} s after the first")
    return ["### Fairness: two flows through one bottleneck", "",
            f"Paths: {labels}. Each pair through a fresh `linkem run` (empty queue), both flows from a to b, "
            f"{started}. iperf3 runs {cfg.get('seconds', '?'):g} s (`iperf3 -C cubic`, or `-C bbr` in a pair that names bbr); each Sluice flow "
            f"uploads its own random file of {(cfg.get('sluice_file_bytes') or 0) >> 20} MiB (`sluice cp`, default "
            "settings, one `sluice serve` per flow on its own port), checked by SHA-256 afterwards.", "",
            "How it is computed: every receiver writes into a directory of its own (Sluice's server, or "
            "`iperf3 -s -F`), whose bytes the harness reads for all flows at once every "
            f"{cfg.get('tick_s', 0.2):g} s. The common interval runs from the later of the two flows' first "
            "delivered byte to the earlier end (a Sluice file complete at the receiver, an iperf3 flow's first "
            "byte + its duration, or a client's exit); a flow's goodput is the bytes it delivered in that "
            "interval over its length, so a flow that finishes first does not let the other's solo time count. "
            "In parentheses after a goodput: that goodput over half the bottleneck rate. "
            "Jain = (x1 + x2)^2 / (2 (x1^2 + x2^2)) of the two goodputs. TCP-friendliness (sluice+cubic row) = "
            "the cubic flow's goodput beside Sluice / the mean goodput of the two flows of the cubic+cubic pair "
            "of the same cell (in parentheses, that baseline in Mbit/s); 1 means Sluice takes what another cubic "
            "flow would, below 1 it takes more. Sum / bottleneck: the two goodputs' sum over the bottleneck rate; "
            "a->b drops: packets linkem's a->b direction dropped at its full queue / at random (the cell's loss), "
            "over the whole pair. If the sum is well under 1 and the queue dropped nothing, the two flows did not "
            "compete for the link (each was limited by itself: CPU or its own rate), and Jain says little about "
            "the congestion control. Where random loss alone holds cubic to a few Mbit/s (about 1.2 MSS / "
            "(RTT sqrt(p)): 1.4 Mbit/s at 100 ms and 1 %), the TCP-friendliness index is a ratio of two small, "
            "noisy numbers. A pair with a failed transfer or a wrong file shows **FAIL** and "
            "its reason, never a number. CPU: seconds of the client (a) and server (b) of each flow.", "",
            fairness_table(rows), ""]


def _compact(j):
    keep = {}
    for k, v in j.items():
        if isinstance(v, dict):
            keep[k] = {kk: vv for kk, vv in v.items() if not isinstance(vv, (dict, list))}
        else:
            keep[k] = v
    return str(keep).replace("'", "")


def prepend(md_path, meta, results, not_run, paths_out, charts):
    new = section(meta, results, not_run, paths_out, [os.path.relpath(c, os.path.dirname(md_path)) for c in charts])
    old = ""
    if os.path.exists(md_path):
        with open(md_path) as f:
            old = f.read()
        if old.startswith(HEADER):
            old = old[len(HEADER):]
    with open(md_path, "w") as f:
        f.write(HEADER + "\n" + new + "\n" + old.lstrip("\n"))


def charts(wan_runs, stamp, out_dir):
    """One PNG per RTT: goodput against loss, one line per tool (single-file workload, Bernoulli
    loss). Hollow markers: partial goodput of a run that hit the cap. Failures are not drawn."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    for rtt in grid.RTTS:
        runs = [r for r in wan_runs if r["rtt_ms"] == rtt and not r.get("burst") and not r.get("batch_us")
                and not r.get("ack_compression_us") and not r.get("gro_pkts") and r["workload"] == "file"
                and r["status"] in ("ok", "timeout") and r.get("goodput_mbit") is not None]
        if not runs:
            continue
        fig, ax = plt.subplots(figsize=(8, 5))
        xs = {loss: i for i, loss in enumerate(grid.LOSSES)}
        tools = list(dict.fromkeys(r["tool"] for r in runs))
        for tool in tools:
            pts = sorted((xs[r["loss_pct"]], r["goodput_mbit"], r["status"]) for r in runs if r["tool"] == tool)
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", label=tool)
            for x, y, st in pts:
                if st != "ok":
                    ax.plot([x], [y], "o", color=line.get_color(), markerfacecolor="white")
        ax.set_xticks(range(len(grid.LOSSES)), [f"{loss:g} %" for loss in grid.LOSSES])
        ax.set_xlabel("random loss (each direction)")
        ax.set_ylabel("goodput, Mbit/s")
        ax.set_yscale("symlog", linthresh=10)
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"1000 Mbit/s, RTT {rtt} ms, one-BDP queue: goodput vs loss\n"
                     "(hollow marker = hit the time cap, partial goodput)")
        ax.legend(fontsize=8, loc="lower left", framealpha=0.8)
        p = os.path.join(out_dir, f"{stamp}-goodput-rtt{rtt}.png")
        fig.tight_layout()
        fig.savefig(p, dpi=100)
        plt.close(fig)
        made.append(p)
    return made


def rebuild(md_path, json_paths):
    """Rewrite one run's section of BENCHMARKS.md from its raw JSON (same place if it is there)."""
    import json
    results, meta, not_run, paths_out = {"lan": [], "wan": [], "fairness": []}, None, [], {}
    for p in json_paths:
        with open(p) as f:
            d = json.load(f)
        meta, not_run = d["meta"], d["not_run"]
        kind = d.get("kind") or d["runs"][0]["path"]
        results[kind] += d["runs"]
        paths_out[kind] = os.path.relpath(os.path.abspath(p), os.path.dirname(os.path.abspath(md_path)))
    stamp = os.path.basename(json_paths[0]).rsplit("-", 1)[0]
    out_dir = os.path.dirname(os.path.abspath(json_paths[0]))
    made = charts(results["wan"], stamp, out_dir)
    new = section(meta, results, not_run, paths_out,
                  [os.path.relpath(c, os.path.dirname(os.path.abspath(md_path))) for c in made])
    with open(md_path) as f:
        text = f.read()
    head = f"## Run of {meta['started']} "
    if head in text:
        start = text.index(head)
        nxt = text.find("\n## Run of ", start + 1)
        text = text[:start] + new + ("\n" + text[nxt + 1:] if nxt >= 0 else "\n")
    else:
        body = text[len(HEADER):] if text.startswith(HEADER) else text
        text = HEADER + "\n" + new + "\n" + body.lstrip("\n")
    with open(md_path, "w") as f:
        f.write(text)
    return made


def main():
    """Redraw one run's charts and rewrite its BENCHMARKS.md section from its raw JSON:
    python3 bench/report.py bench/results/<stamp>-wan.json [bench/results/<stamp>-lan.json]"""
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print("\n".join(rebuild(os.path.join(repo, "BENCHMARKS.md"), sys.argv[1:])))


if __name__ == "__main__":
    main()
