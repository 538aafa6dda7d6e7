"""The benchmark grid (BENCH.md): cell ids, their paths, and the order they run in."""

RATE_MBIT = 1000
RTTS = (10, 100, 300)
LOSSES = (0, 0.1, 1, 3)
GE = {"rtt": 100, "loss": 1, "burst": 10}


def cell_id(rtt, loss, burst=None):
    return f"wan-rtt{rtt}-{'ge' if burst else 'loss'}{loss:g}" + (f"-b{burst}" if burst else "")


def full_grid():
    """Every cell, most important first: 100 ms / 1 %, then the 10 ms and 300 ms rows, the rest
    of the 100 ms row, the bursty cell, the LAN path."""
    cells = [("wan", 100, 1, None)]
    cells += [("wan", 10, loss, None) for loss in LOSSES]
    cells += [("wan", 300, loss, None) for loss in LOSSES]
    cells += [("wan", 100, loss, None) for loss in LOSSES if loss != 1]
    cells += [("wan", GE["rtt"], GE["loss"], GE["burst"])]
    cells += [("lan", 0, 0, None)]
    return cells


def quick_grid():
    return [("lan", 0, 0, None), ("wan", 100, 1, None)]


def cid(cell):
    kind, rtt, loss, burst = cell
    return "lan" if kind == "lan" else cell_id(rtt, loss, burst)


def parse(ids):
    known = {cid(c): c for c in full_grid()}
    out = []
    for i in ids:
        if i not in known:
            raise SystemExit(f"unknown cell '{i}'; known: {', '.join(known)}")
        out.append(known[i])
    return out
