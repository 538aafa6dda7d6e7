//! Interval sets over extended sequence numbers: the send and receive loss lists.
//!
//! UDT keeps its loss lists as ranges so that one loss event costs one node however many packets
//! it spans (paper, appendix). [`IntervalSet`] does the same over a `BTreeMap` keyed by range
//! start: an operation costs O(log n) to find its place plus O(log n) for each range it merges,
//! splits or drops, and every range is created once and dropped once, so the cost follows the
//! number of loss events, never the number of lost packets.

use std::collections::BTreeMap;

/// A set of `u64` values stored as disjoint, non-adjacent inclusive ranges. Every operation costs
/// O(log n) in the number of ranges (loss events), never in the number of values.
///
/// Every `u64`, `u64::MAX` included, is a valid member. Counts that do not fit in a `u64` (only
/// the full range `0..=u64::MAX` has 2^64 values) saturate at `u64::MAX`.
#[derive(Clone, Debug, Default)]
pub struct IntervalSet {
    /// start -> end, inclusive; disjoint and non-adjacent: `end + 1 < next start`.
    ranges: BTreeMap<u64, u64>,
    /// Number of values; u128 because the full range holds 2^64 of them.
    len: u128,
}

/// Number of values in `lo..=hi` (`lo <= hi`).
fn width(lo: u64, hi: u64) -> u128 {
    u128::from(hi - lo) + 1
}

/// Reports a count as `u64`, saturating (only 2^64 itself does not fit).
fn saturate(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl IntervalSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds `lo..=hi`; returns how many values were not present before. `lo > hi` adds nothing.
    pub fn insert(&mut self, lo: u64, hi: u64) -> u64 {
        if lo > hi {
            return 0;
        }
        let (mut new_lo, mut new_hi) = (lo, hi);
        let mut absorbed = 0u128;
        // A range starting at or before `lo` merges if it overlaps or ends right before `lo`.
        if let Some((&s, &e)) = self.ranges.range(..=lo).next_back()
            && e.checked_add(1).is_none_or(|after| after >= lo)
        {
            if e >= hi {
                return 0;
            }
            self.ranges.remove(&s);
            absorbed += width(s, e);
            new_lo = s;
        }
        // Ranges starting inside `lo..=hi + 1` merge too (the one at `hi + 1` by adjacency).
        let reach = hi.saturating_add(1);
        while let Some((&s, &e)) = self.ranges.range(lo..=reach).next() {
            self.ranges.remove(&s);
            absorbed += width(s, e);
            new_hi = new_hi.max(e);
        }
        self.ranges.insert(new_lo, new_hi);
        let added = width(new_lo, new_hi) - absorbed;
        self.len += added;
        saturate(added)
    }
    /// Removes one value; returns whether it was present.
    pub fn remove(&mut self, v: u64) -> bool {
        self.remove_range(v, v) == 1
    }
    /// Removes `lo..=hi`; returns how many values were removed.
    pub fn remove_range(&mut self, lo: u64, hi: u64) -> u64 {
        if lo > hi {
            return 0;
        }
        let mut removed = 0u128;
        // A range starting before `lo` may reach into `lo..=hi`: keep its part below `lo`.
        if let Some((&s, &e)) = self.ranges.range(..lo).next_back()
            && e >= lo
        {
            self.ranges.insert(s, lo - 1);
            if e > hi {
                self.ranges.insert(hi + 1, e);
                self.len -= width(lo, hi);
                return saturate(width(lo, hi));
            }
            removed += width(lo, e);
        }
        // Ranges starting inside `lo..=hi`: drop them, keeping any part above `hi`.
        while let Some((&s, &e)) = self.ranges.range(lo..=hi).next() {
            self.ranges.remove(&s);
            if e > hi {
                self.ranges.insert(hi + 1, e);
                removed += width(s, hi);
                break;
            }
            removed += width(s, e);
        }
        self.len -= removed;
        saturate(removed)
    }
    /// Removes every value below `v`; returns how many were removed.
    pub fn remove_below(&mut self, v: u64) -> u64 {
        // `split_off` costs O(log n) plus the smaller side, and the dropped side is walked anyway
        // to count it: O(log n + ranges dropped).
        let kept = self.ranges.split_off(&v);
        let dropped = std::mem::replace(&mut self.ranges, kept);
        let mut removed = 0u128;
        for (&s, &e) in &dropped {
            if e >= v {
                // Only the last dropped range can straddle `v`.
                self.ranges.insert(v, e);
                removed += width(s, v - 1);
            } else {
                removed += width(s, e);
            }
        }
        self.len -= removed;
        saturate(removed)
    }
    /// Whether `v` is in the set.
    pub fn contains(&self, v: u64) -> bool {
        self.ranges.range(..=v).next_back().is_some_and(|(_, &e)| e >= v)
    }
    /// The smallest value.
    pub fn first(&self) -> Option<u64> {
        self.ranges.first_key_value().map(|(&s, _)| s)
    }
    /// The largest value.
    pub fn last(&self) -> Option<u64> {
        self.ranges.last_key_value().map(|(_, &e)| e)
    }
    /// Removes and returns the smallest value.
    pub fn pop_first(&mut self) -> Option<u64> {
        let (s, e) = self.ranges.pop_first()?;
        if s < e {
            self.ranges.insert(s + 1, e);
        }
        self.len -= 1;
        Some(s)
    }
    /// Number of values in the set.
    pub fn len(&self) -> u64 {
        saturate(self.len)
    }
    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Number of disjoint ranges (loss events).
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }
    /// The ranges in ascending order, as inclusive `(lo, hi)` pairs.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&lo, &hi)| (lo, hi))
    }
    /// The values of `lo..=hi` that are not in the set, as inclusive `(lo, hi)` ranges in
    /// ascending order. O(log n) plus one step per range of the set inside `lo..=hi`.
    pub fn gaps(&self, lo: u64, hi: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        // The smallest value of `lo..=hi` not examined yet; `None` once past `hi`.
        let mut next = (lo <= hi).then_some(lo);
        if let Some((_, &e)) = self.ranges.range(..=lo).next_back()
            && e >= lo
        {
            next = e.checked_add(1).filter(|&after| after <= hi);
        }
        let mut inside = self.ranges.range(lo..=hi.max(lo));
        std::iter::from_fn(move || {
            let from = next?;
            // Ranges starting below `from` were covered by the one found before the loop.
            for (&s, &e) in inside.by_ref() {
                if s > from {
                    next = e.checked_add(1).filter(|&after| after <= hi);
                    return Some((from, s - 1));
                }
            }
            next = None;
            Some((from, hi))
        })
    }
    /// Removes every value.
    pub fn clear(&mut self) {
        self.ranges.clear();
        self.len = 0;
    }

    /// Panics unless the ranges are well formed, disjoint, non-adjacent and counted right.
    /// O(n): for tests only.
    #[cfg(test)]
    fn check_invariants(&self) {
        let mut total = 0u128;
        let mut prev_end: Option<u64> = None;
        for (&s, &e) in &self.ranges {
            assert!(s <= e, "range {s}..={e} is reversed");
            if let Some(p) = prev_end {
                assert!(p < s, "range {s}..={e} overlaps the previous one ending at {p}");
                assert!(p + 1 < s, "range {s}..={e} is adjacent to the previous one");
            }
            prev_end = Some(e);
            total += width(s, e);
        }
        assert_eq!(total, self.len, "running count disagrees with the ranges");
    }
}

#[cfg(test)]
mod tests;
