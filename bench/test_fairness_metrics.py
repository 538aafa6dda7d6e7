"""Unit tests of the fairness numbers (no network): python3 -m unittest discover -s bench"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fairness_metrics import (NoOverlap, bytes_at, common_interval, completion_time,  # noqa: E402
                              jain, overlap_goodputs, tcp_friendliness)

MB = 1_000_000


def ramp(rate_mbit, start, stop, step=0.5, until=None, total=None):
    """Samples of a flow delivering rate_mbit from `start` to `stop`, sampled every step up to
    `until` (default stop); bytes capped at total."""
    until = stop if until is None else until
    out, t = [], 0.0
    while t <= until + 1e-9:
        b = max(0.0, min(t, stop) - start) * rate_mbit * 1e6 / 8
        out.append([round(t, 6), int(min(b, total) if total else b)])
        t += step
    return out


class JainTest(unittest.TestCase):
    def test_equal_is_one(self):
        self.assertAlmostEqual(jain([400, 400]), 1.0)

    def test_one_takes_all_is_half(self):
        self.assertAlmostEqual(jain([800, 0]), 0.5)

    def test_formula(self):
        x1, x2 = 600.0, 200.0
        self.assertAlmostEqual(jain([x1, x2]), (x1 + x2) ** 2 / (2 * (x1 ** 2 + x2 ** 2)))
        self.assertAlmostEqual(jain([600, 200]), 0.8)

    def test_scale_free(self):
        self.assertAlmostEqual(jain([3, 1]), jain([300, 100]))

    def test_nothing(self):
        self.assertIsNone(jain([0, 0]))
        self.assertIsNone(jain([]))


class FriendlinessTest(unittest.TestCase):
    def test_fair(self):
        self.assertAlmostEqual(tcp_friendliness(450, [440, 460]), 1.0)

    def test_starved_tcp(self):
        self.assertAlmostEqual(tcp_friendliness(100, [450, 450]), 100 / 450)

    def test_baseline_is_mean_of_the_pair(self):
        self.assertAlmostEqual(tcp_friendliness(300, [200, 400]), 1.0)

    def test_no_baseline(self):
        self.assertIsNone(tcp_friendliness(300, [0, 0]))
        self.assertIsNone(tcp_friendliness(300, []))


class OverlapTest(unittest.TestCase):
    def test_interpolation(self):
        s = [[0, 0], [1, 100], [2, 300]]
        self.assertEqual(bytes_at(s, 1.5), 200)
        self.assertEqual(bytes_at(s, -1), 0)
        self.assertEqual(bytes_at(s, 9), 300)
        self.assertEqual(bytes_at([], 1), 0)

    def test_equal_flows(self):
        a = {"samples": ramp(400, 0.5, 20), "end": None}
        b = {"samples": ramp(400, 0.5, 20), "end": None}
        t0, t1, (ga, gb) = overlap_goodputs([a, b])
        self.assertAlmostEqual(ga, 400, delta=1)
        self.assertAlmostEqual(gb, 400, delta=1)

    def test_early_finisher_ends_the_interval(self):
        # flow a gets 600 Mbit/s and completes its 750 MB at 10.5 s; flow b gets 300 until then,
        # then runs alone at 900: counting b's solo part would make it look fair.
        total_a = 750 * MB
        a = ramp(600, 0.5, 10.5, until=20, total=total_a)
        b = [[t, int(bytes_at(ramp(300, 0.5, 10.5, until=20), t) + max(0, t - 10.5) * 900e6 / 8)]
             for t, _ in a]
        end_a = completion_time(a, total_a)
        self.assertAlmostEqual(end_a, 10.5)
        t0, t1, (ga, gb) = overlap_goodputs([{"samples": a, "end": end_a}, {"samples": b, "end": None}])
        self.assertEqual((t0, t1), (1.0, 10.5))   # first sample with bytes: 1.0 s
        self.assertAlmostEqual(ga, 600, delta=1)
        self.assertAlmostEqual(gb, 300, delta=1)
        self.assertAlmostEqual(jain([ga, gb]), 0.9, places=2)

    def test_late_starter_sets_the_start(self):
        # TCP starts at 0.1 s, the other flow's handshake delays its first byte to 1.0 s
        a = {"samples": ramp(500, 0.1, 20), "end": None}
        b = {"samples": ramp(400, 1.0, 20), "end": None}
        t0, t1 = common_interval([a, b])
        self.assertAlmostEqual(t0, 1.5)    # first sample showing b's bytes (0.5 s steps)
        self.assertAlmostEqual(t1, 20)

    def test_end_hint_before_last_sample(self):
        a = {"samples": ramp(500, 0, 30), "end": 12.0}
        b = {"samples": ramp(500, 0, 30), "end": None}
        self.assertAlmostEqual(common_interval([a, b])[1], 12.0)

    def test_starved_flow_scores_zero(self):
        a = {"samples": ramp(900, 0.5, 20), "end": None}
        b = {"samples": [[t, 0] for t, _ in a["samples"]], "end": None}
        t0, t1, (ga, gb) = overlap_goodputs([a, b])
        self.assertEqual(gb, 0)
        self.assertAlmostEqual(jain([ga, gb]), 0.5)

    def test_no_overlap(self):
        a = {"samples": ramp(900, 0.5, 5, until=20, total=500 * MB), "end": 1.0}
        b = {"samples": ramp(900, 0.5, 20), "end": None}
        with self.assertRaises(NoOverlap):
            overlap_goodputs([a, b])
        with self.assertRaises(NoOverlap):
            overlap_goodputs([{"samples": [[0, 0], [1, 0]], "end": None}] * 2)


if __name__ == "__main__":
    unittest.main()
