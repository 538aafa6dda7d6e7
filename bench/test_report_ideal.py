"""Unit tests of the ideal time and the ceiling ratio in a WAN table (no network):
python3 -m unittest discover -s bench"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import report  # noqa: E402


def run(tool, goodput, wall, status="ok", rtt=100, loss=1):
    return {"cell": "wan-rtt100-loss1", "tool": tool, "workload": "file", "status": status,
            "rtt_ms": rtt, "loss_pct": loss, "file_bytes": 1 << 30, "goodput_mbit": goodput,
            "wall_s": wall, "load_before": [0.5]}


class IdealTest(unittest.TestCase):
    def test_ideal_is_two_round_trips_and_the_bytes_at_the_carried_rate(self):
        # 1 GiB at 100 ms / 1 %: 0.2 s + 8589934592 / (1e9 x 1472/1500 x 0.99) = 0.2 + 8.8417 s.
        ideal = report.ideal_s(run("x", 0, 0))
        self.assertAlmostEqual(ideal, 0.2 + 8589934592 / (1e9 * 1472 / 1500 * 0.99), places=9)
        self.assertAlmostEqual(ideal, 9.0417, places=3)
        self.assertIsNone(report.ideal_s({"file_bytes": 1, "loss_pct": 0}), "no RTT: not a WAN run")

    def test_table_shows_each_run_against_the_ceiling_and_the_ideal(self):
        runs = [run("sluice", 767.89, 11.186), run("sluice-fixed1000", 869.59, 9.878),
                run("scp", None, 60.0, status="timeout")]
        rows = report.table(runs).splitlines()
        sluice = [c.strip() for c in rows[2].split("|")]
        self.assertEqual(sluice[5], f"{767.89 / 869.59:.3f}")
        self.assertEqual(sluice[7], f"{report.ideal_s(runs[0]) / 11.186:.2f}")
        ceiling = [c.strip() for c in rows[3].split("|")]
        self.assertEqual(ceiling[5], "1.000")
        failed = [c.strip() for c in rows[4].split("|")]
        self.assertEqual((failed[5], failed[7]), ("-", "-"), "a run that hit the cap has neither")

    def test_no_ceiling_in_the_cell_gives_no_ratio(self):
        rows = report.table([run("sluice", 700.0, 12.0)]).splitlines()
        self.assertEqual([c.strip() for c in rows[2].split("|")][5], "-")


if __name__ == "__main__":
    unittest.main()
