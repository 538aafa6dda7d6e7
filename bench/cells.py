"""The benchmark grid (BENCH.md): cell ids, their paths, and the order they run in."""

RATE_MBIT = 1000
RTTS = (10, 100, 300)
LOSSES = (0, 0.1, 1, 3)
GE = {"rtt": 100, "loss": 1, "burst": 10}
# Timing noise (BENCH.md, issue 25): the receive side of the data (a -> b) released at wakes every
# BATCH_US (0 is the plain cell), and the acknowledgements (b -> a) compressed to wakes every
# ACK_COMPRESSION_US, on the 100 ms row at these losses.
BATCH_US = (50, 200)
ACK_COMPRESSION_US = 1000
TIMING_RTT = 100
TIMING_LOSSES = (0, 1)
# GRO-like receive batches (linkem --a2b-gro-batch): the data's packets handed to the receiver
# GRO_PKTS at a time, or what came within linkem's window (100 us), on the 10 and 100 ms rows.
GRO_PKTS = 32
GRO_RTTS = (10, 100)


def cell_id(rtt, loss, burst=None, batch_us=0, ackc_us=0, gro=0):
    """wan-rtt100-loss1, wan-rtt100-ge1-b10, wan-rtt100-loss1-batch200, wan-rtt100-loss1-ackc1000,
    wan-rtt100-loss1-gro32."""
    return (f"wan-rtt{rtt}-{'ge' if burst else 'loss'}{loss:g}" + (f"-b{burst}" if burst else "")
            + (f"-batch{batch_us}" if batch_us else "") + (f"-ackc{ackc_us}" if ackc_us else "")
            + (f"-gro{gro}" if gro else ""))


def full_grid():
    """Every cell, most important first: 100 ms / 1 %, then the 10 ms and 300 ms rows, the rest
    of the 100 ms row, the bursty cell, the timing-noise cells, the LAN path.

    A cell is (kind, rtt_ms, loss_pct, burst, batch_us, ackc_us, gro_pkts)."""
    cells = [("wan", 100, 1, None, 0, 0, 0)]
    cells += [("wan", 10, loss, None, 0, 0, 0) for loss in LOSSES]
    cells += [("wan", 300, loss, None, 0, 0, 0) for loss in LOSSES]
    cells += [("wan", 100, loss, None, 0, 0, 0) for loss in LOSSES if loss != 1]
    cells += [("wan", GE["rtt"], GE["loss"], GE["burst"], 0, 0, 0)]
    cells += timing_cells()
    cells += [("lan", 0, 0, None, 0, 0, 0)]
    return cells


def timing_cells():
    """Receive batching of the data at BATCH_US on the 100 ms row, then ACK compression, then
    GRO-like batches on the 10 and 100 ms rows."""
    cells = [("wan", TIMING_RTT, loss, None, batch, 0, 0) for loss in TIMING_LOSSES for batch in BATCH_US]
    cells += [("wan", TIMING_RTT, 1, None, 0, ACK_COMPRESSION_US, 0)]
    cells += [("wan", rtt, loss, None, 0, 0, GRO_PKTS) for rtt in GRO_RTTS for loss in TIMING_LOSSES]
    return cells


def issue25_grid():
    """Issue 25's grid: {10, 100, 300} ms x {0, 1, 3} % loss, each with the receive side released
    on time and at wakes every 50 and 200 us (`--cells issue25`)."""
    return [("wan", rtt, loss, None, batch, 0, 0)
            for rtt in RTTS for loss in (0, 1, 3) for batch in (0,) + BATCH_US]


def quick_grid():
    return [("lan", 0, 0, None, 0, 0, 0), ("wan", 100, 1, None, 0, 0, 0)]


def cid(cell):
    kind, rtt, loss, burst, batch_us, ackc_us, gro = cell
    return "lan" if kind == "lan" else cell_id(rtt, loss, burst, batch_us, ackc_us, gro)


def parse(ids):
    """The cells of `ids`: the full grid's, issue 25's, or `issue25` for all of those."""
    known = {cid(c): c for c in full_grid() + issue25_grid()}
    out = []
    for i in ids:
        if i == "issue25":
            out += [c for c in issue25_grid() if c not in out]
            continue
        if i not in known:
            raise SystemExit(f"unknown cell '{i}'; known: {', '.join(known)}")
        out.append(known[i])
    return out
