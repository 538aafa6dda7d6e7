"""Unit tests of the grid's cell ids and of the linkem arguments of the timing-noise cells (no
network, no root): python3 -m unittest discover -s bench"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cells  # noqa: E402
from netns import WanPath  # noqa: E402


class CellIds(unittest.TestCase):
    def test_ids_round_trip_and_are_unique(self):
        grid = cells.full_grid()
        ids = [cells.cid(c) for c in grid]
        self.assertEqual(len(ids), len(set(ids)))
        self.assertEqual(cells.parse(ids), grid)

    def test_issue25_grid(self):
        cells_ = cells.parse(["issue25"])
        self.assertEqual(len(cells_), 27)
        self.assertEqual(len(set(cells_)), 27)
        self.assertIn(("wan", 300, 3, None, 200, 0, 0), cells_)
        self.assertEqual(cells.parse(["wan-rtt10-loss3-batch50"]), [("wan", 10, 3, None, 50, 0, 0)])
        self.assertEqual(cells.parse(["wan-rtt100-loss1", "issue25"])[0], ("wan", 100, 1, None, 0, 0, 0))

    def test_timing_cells(self):
        ids = [cells.cid(c) for c in cells.timing_cells()]
        self.assertEqual(ids, ["wan-rtt100-loss0-batch50", "wan-rtt100-loss0-batch200",
                               "wan-rtt100-loss1-batch50", "wan-rtt100-loss1-batch200",
                               "wan-rtt100-loss1-ackc1000", "wan-rtt10-loss0-gro32", "wan-rtt10-loss1-gro32",
                               "wan-rtt100-loss0-gro32", "wan-rtt100-loss1-gro32"])
        self.assertEqual(cells.parse(["wan-rtt100-loss1-batch200"]), [("wan", 100, 1, None, 200, 0, 0)])
        self.assertEqual(cells.parse(["wan-rtt10-loss1-gro32"]), [("wan", 10, 1, None, 0, 0, 32)])
        # The plain cells keep their ids.
        self.assertEqual(cells.cid(("wan", 100, 1, None, 0, 0, 0)), "wan-rtt100-loss1")
        self.assertEqual(cells.cid(("wan", 100, 1, 10, 0, 0, 0)), "wan-rtt100-ge1-b10")

    def test_linkem_arguments(self):
        plain = WanPath("p", "linkem", 1000, 100, 1).linkem_args(7)
        self.assertFalse(any("granularity" in a for a in plain))
        batch = WanPath("p", "linkem", 1000, 100, 1, batch_us=200)
        args = batch.linkem_args(7)
        i = args.index("--a2b-release-granularity")
        self.assertEqual(args[i + 1], "200us")
        self.assertNotIn("--b2a-release-granularity", args)
        self.assertIn("receive batched every 200 us", batch.label)
        ackc = WanPath("p", "linkem", 1000, 100, 1, ackc_us=1000).linkem_args(7)
        self.assertEqual(ackc[ackc.index("--b2a-release-granularity") + 1], "1000us")
        self.assertNotIn("--a2b-release-granularity", ackc)
        gro = WanPath("p", "linkem", 1000, 10, 1, gro_pkts=32)
        args = gro.linkem_args(7)
        self.assertEqual(args[args.index("--a2b-gro-batch") + 1], "32")
        self.assertNotIn("--b2a-gro-batch", args)
        self.assertIn("GRO-like batches of 32 packets", gro.label)
        self.assertNotIn("--a2b-gro-batch", plain)


if __name__ == "__main__":
    unittest.main()
