"""Unit tests of how fairness rows become numbers or failures (no network):
python3 -m unittest discover -s bench"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fairness  # noqa: E402
import report  # noqa: E402


def ok_row(pair, g1, g2):
    k1, k2 = pair.split("+")
    return {"cell": "wan-rtt100-loss0", "pair": pair, "status": "ok", "rate_mbit": 1000,
            "window_s": [1.0, 21.0], "window_len_s": 20.0, "jain": 1.0, "load_before": [0.5],
            "linkem": {"a2b": {"dropped_queue": 10, "dropped_loss": 0}},
            "flows": [{"name": f"{k1}-1", "kind": k1, "goodput_mbit": g1, "share_of_half": g1 / 500},
                      {"name": f"{k2}-2", "kind": k2, "goodput_mbit": g2, "share_of_half": g2 / 500}]}


class FriendlinessRowTest(unittest.TestCase):
    def test_index_on_the_sluice_cubic_row(self):
        rows = {"cubic+cubic": ok_row("cubic+cubic", 400.0, 500.0),
                "sluice+cubic": ok_row("sluice+cubic", 600.0, 300.0)}
        fairness._friendliness(rows)
        self.assertEqual(rows["sluice+cubic"]["tcp_baseline_mbit"], 450.0)
        self.assertAlmostEqual(rows["sluice+cubic"]["tcp_friendliness"], 300 / 450, places=3)

    def test_failed_baseline_gives_no_index(self):
        rows = {"cubic+cubic": {"pair": "cubic+cubic", "status": "fail", "reason": "iperf3 gave no result"},
                "sluice+cubic": ok_row("sluice+cubic", 600.0, 300.0)}
        fairness._friendliness(rows)
        self.assertIsNone(rows["sluice+cubic"]["tcp_friendliness"])
        self.assertIn("iperf3 gave no result", rows["sluice+cubic"]["friendliness_reason"])


class TableTest(unittest.TestCase):
    def test_failure_shows_reason_not_numbers(self):
        bad = {"cell": "wan-rtt100-loss1", "pair": "sluice+sluice", "status": "fail",
               "reason": "sluice-2: SHA-256 mismatch on 'random-1192MiB.bin'",
               "flows": [{"name": "sluice-1", "goodput_mbit": 400.0, "share_of_half": 0.8}]}
        line = report.fairness_table([bad]).splitlines()[-1]
        self.assertIn("**FAIL**", line)
        self.assertIn("SHA-256 mismatch", line)
        self.assertNotIn("400.0", line)

    def test_ok_row(self):
        line = report.fairness_table([ok_row("sluice+sluice", 450.0, 450.0)]).splitlines()[-1]
        self.assertIn("sluice-1: 450.0 (0.90)", line)
        self.assertIn("| 0.90 |", line)        # sum over the bottleneck
        self.assertIn("| 10 / 0 |", line)      # queue / random drops


class CellsTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(fairness.parse_cells("wan-rtt100-loss0,wan-rtt10-loss0.1"), [(100, 0), (10, 0.1)])
        with self.assertRaises(SystemExit):
            fairness.parse_cells("lan")

    def test_default_size_is_half_the_bottleneck_for_the_duration(self):
        self.assertEqual(fairness.default_size(20, 1000), 1192 << 20)


if __name__ == "__main__":
    unittest.main()
