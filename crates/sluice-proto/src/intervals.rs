//! Interval sets over extended sequence numbers: the send and receive loss lists.
//!
//! CONTRACT STUB: helper 1 replaces the bodies; the signatures are fixed.

use std::collections::BTreeMap;

/// A set of `u64` values stored as disjoint, non-adjacent inclusive ranges. Every operation costs
/// O(log n) in the number of ranges (loss events), never in the number of values.
#[derive(Clone, Debug, Default)]
pub struct IntervalSet {
    ranges: BTreeMap<u64, u64>,
    len: u64,
}

impl IntervalSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds `lo..=hi`; returns how many values were not present before. `lo > hi` adds nothing.
    pub fn insert(&mut self, lo: u64, hi: u64) -> u64 {
        let _ = (lo, hi, &self.ranges);
        unimplemented!()
    }
    /// Removes one value; returns whether it was present.
    pub fn remove(&mut self, v: u64) -> bool {
        let _ = v;
        unimplemented!()
    }
    /// Removes `lo..=hi`; returns how many values were removed.
    pub fn remove_range(&mut self, lo: u64, hi: u64) -> u64 {
        let _ = (lo, hi);
        unimplemented!()
    }
    /// Removes every value below `v`; returns how many were removed.
    pub fn remove_below(&mut self, v: u64) -> u64 {
        let _ = v;
        unimplemented!()
    }
    /// Whether `v` is in the set.
    pub fn contains(&self, v: u64) -> bool {
        let _ = v;
        unimplemented!()
    }
    /// The smallest value.
    pub fn first(&self) -> Option<u64> {
        unimplemented!()
    }
    /// The largest value.
    pub fn last(&self) -> Option<u64> {
        unimplemented!()
    }
    /// Removes and returns the smallest value.
    pub fn pop_first(&mut self) -> Option<u64> {
        unimplemented!()
    }
    /// Number of values in the set.
    pub fn len(&self) -> u64 {
        self.len
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
    /// Removes every value.
    pub fn clear(&mut self) {
        self.ranges.clear();
        self.len = 0;
    }
}
