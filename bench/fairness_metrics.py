"""The fairness numbers, as pure functions (no network, no processes): Jain's index, goodput over
the common interval of flows sampled together, and the TCP-friendliness index.

Sampling model (what `fairness.py` records): every flow's receiver writes into a directory of its
own, and the harness reads the bytes present there (allocated blocks, so a preallocated sparse file
counts only what was written) for all flows at the same instants. A flow's samples are
`[[t, bytes], ...]`, t in seconds from the launch of the pair, bytes cumulative and never
decreasing. Each flow also has an end time: when it had delivered everything (a Sluice file
complete), or when it stopped sending (iperf3: first byte + its duration), or when its client
exited, whichever is first.
"""


def jain(xs):
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all are equal, 1/n when one flow
    takes everything. None when there is nothing to judge (no flows, or every flow got 0)."""
    xs = [float(x) for x in xs]
    sq = sum(x * x for x in xs)
    if not xs or sq == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sq)


def bytes_at(samples, t):
    """Cumulative bytes at time t, linear between samples, clamped to the first and last."""
    if not samples:
        return 0
    if t <= samples[0][0]:
        return samples[0][1]
    for (t0, b0), (t1, b1) in zip(samples, samples[1:]):
        if t <= t1:
            return b0 if t1 == t0 else b0 + (b1 - b0) * (t - t0) / (t1 - t0)
    return samples[-1][1]


def first_byte_time(samples):
    """Time of the first sample showing any byte delivered, or None if none ever did."""
    return next((t for t, b in samples if b > 0), None)


def completion_time(samples, total):
    """Time of the first sample at which `total` bytes were present, or None."""
    return next((t for t, b in samples if b >= total), None)


class NoOverlap(ValueError):
    """The flows were never running together long enough to compare them."""


def common_interval(flows, min_s=1.0):
    """The interval during which every flow was running: from the latest first byte (so handshakes
    and connection set-up are left out) to the earliest end. A flow that never delivered a byte
    does not delay the start (it is running, starved, and scores 0).

    flows: [{"samples": [[t, bytes], ...], "end": t or None (None: its last sample)}].
    Returns (t_start, t_end); raises NoOverlap if shorter than min_s or if no flow delivered."""
    starts = [first_byte_time(f["samples"]) for f in flows]
    if all(s is None for s in starts):
        raise NoOverlap("no flow delivered a byte")
    t0 = max(s for s in starts if s is not None)
    ends = []
    for f in flows:
        last = f["samples"][-1][0] if f["samples"] else 0.0
        ends.append(min(last, f["end"]) if f.get("end") is not None else last)
    t1 = min(ends)
    if t1 - t0 < min_s:
        raise NoOverlap(f"the flows ran together for {max(t1 - t0, 0):.2f} s (< {min_s:g} s): "
                        f"latest first byte at {t0:.2f} s, earliest end at {t1:.2f} s")
    return t0, t1


def overlap_goodputs(flows, min_s=1.0):
    """Goodput of each flow over the common interval, in Mbit/s: bytes it delivered between the
    interval's ends (interpolated between samples) over the interval's length.
    Returns (t_start, t_end, [mbit, ...])."""
    t0, t1 = common_interval(flows, min_s)
    out = []
    for f in flows:
        delivered = bytes_at(f["samples"], t1) - bytes_at(f["samples"], t0)
        out.append(delivered * 8 / (t1 - t0) / 1e6)
    return t0, t1, out


def tcp_friendliness(tcp_with_other, tcp_with_tcp):
    """TCP-friendliness index: the throughput a TCP cubic flow got beside the flow under test,
    over the throughput a TCP cubic flow gets beside another TCP cubic flow on the same path (the
    mean of the two flows of the cubic+cubic pair). 1: the other flow takes what a TCP flow would;
    below 1: it takes more; above 1: it leaves TCP more. None if the baseline is 0."""
    base = sum(tcp_with_tcp) / len(tcp_with_tcp) if tcp_with_tcp else 0
    if base <= 0:
        return None
    return tcp_with_other / base
