use std::collections::BTreeSet;

use proptest::prelude::*;

use super::IntervalSet;
use crate::seq::tests::run_seeded;

const MAX: u64 = u64::MAX;

fn set_of(ranges: &[(u64, u64)]) -> IntervalSet {
    let mut set = IntervalSet::new();
    for &(lo, hi) in ranges {
        set.insert(lo, hi);
    }
    set.check_invariants();
    set
}

fn ranges_of(set: &IntervalSet) -> Vec<(u64, u64)> {
    set.ranges().collect()
}

#[test]
fn insert_merges_overlapping_and_adjacent_ranges() {
    let mut set = IntervalSet::new();
    assert_eq!(set.insert(1, 3), 3);
    assert_eq!(set.insert(4, 6), 3);
    assert_eq!(ranges_of(&set), [(1, 6)]);
    assert_eq!(set.insert(8, 9), 2);
    assert_eq!(set.range_count(), 2);
    // One value bridges the gap.
    assert_eq!(set.insert(7, 7), 1);
    assert_eq!(ranges_of(&set), [(1, 9)]);
    assert_eq!(set.insert(0, 0), 1);
    assert_eq!(set.insert(2, 5), 0);
    assert_eq!(set.insert(20, 30), 11);
    assert_eq!(set.insert(40, 50), 11);
    // Swallows two ranges and fills both gaps.
    assert_eq!(set.insert(5, 45), 45 - 5 + 1 - 5 - 11 - 6);
    assert_eq!(ranges_of(&set), [(0, 50)]);
    assert_eq!(set.len(), 51);
    set.check_invariants();
}

#[test]
fn reversed_ranges_are_no_ops() {
    let mut set = set_of(&[(10, 20)]);
    assert_eq!(set.insert(5, 4), 0);
    assert_eq!(set.remove_range(15, 11), 0);
    assert_eq!(ranges_of(&set), [(10, 20)]);
}

#[test]
fn remove_splits_a_range() {
    let mut set = set_of(&[(10, 20)]);
    assert!(set.remove(15));
    assert!(!set.remove(15));
    assert_eq!(ranges_of(&set), [(10, 14), (16, 20)]);
    assert!(set.remove(10));
    assert!(set.remove(20));
    assert_eq!(ranges_of(&set), [(11, 14), (16, 19)]);
    assert_eq!(set.remove_range(12, 17), 5);
    assert_eq!(ranges_of(&set), [(11, 11), (18, 19)]);
    assert_eq!(set.len(), 3);
    set.check_invariants();
}

#[test]
fn remove_range_spanning_many_ranges() {
    let mut set = set_of(&[(0, 2), (5, 7), (10, 12), (15, 17)]);
    assert_eq!(set.remove_range(1, 16), 2 + 3 + 3 + 2);
    assert_eq!(ranges_of(&set), [(0, 0), (17, 17)]);
    set.check_invariants();
}

#[test]
fn remove_below_trims_the_straddling_range() {
    let mut set = set_of(&[(0, 2), (5, 9), (20, 25)]);
    assert_eq!(set.remove_below(0), 0);
    assert_eq!(set.remove_below(7), 3 + 2);
    assert_eq!(ranges_of(&set), [(7, 9), (20, 25)]);
    assert_eq!(set.remove_below(20), 3);
    assert_eq!(ranges_of(&set), [(20, 25)]);
    assert_eq!(set.remove_below(MAX), 6);
    assert!(set.is_empty());
    set.check_invariants();
}

#[test]
fn pop_first_walks_values_in_order() {
    let mut set = set_of(&[(3, 4), (7, 7)]);
    assert_eq!(set.first(), Some(3));
    assert_eq!(set.last(), Some(7));
    assert_eq!(set.pop_first(), Some(3));
    assert_eq!(set.pop_first(), Some(4));
    assert_eq!(set.pop_first(), Some(7));
    assert_eq!(set.pop_first(), None);
    assert_eq!((set.first(), set.last()), (None, None));
    set.check_invariants();
}

#[test]
fn values_at_u64_max_do_not_overflow() {
    let mut set = IntervalSet::new();
    assert_eq!(set.insert(MAX, MAX), 1);
    assert_eq!(set.insert(MAX, MAX), 0);
    assert!(set.contains(MAX));
    assert!(!set.contains(MAX - 1));
    // Adjacent below MAX merges.
    assert_eq!(set.insert(MAX - 1, MAX - 1), 1);
    assert_eq!(ranges_of(&set), [(MAX - 1, MAX)]);
    assert_eq!(set.insert(MAX - 10, MAX), 9);
    assert!(set.remove(MAX));
    assert_eq!(set.last(), Some(MAX - 1));
    assert_eq!(set.remove_range(MAX - 5, MAX), 5);
    assert_eq!(ranges_of(&set), [(MAX - 10, MAX - 6)]);
    assert_eq!(set.remove_below(MAX), 5);
    assert_eq!(set.insert(0, 0), 1);
    assert_eq!(set.insert(MAX, MAX), 1);
    assert_eq!(set.remove_below(MAX), 1);
    assert_eq!(ranges_of(&set), [(MAX, MAX)]);
    assert_eq!(set.pop_first(), Some(MAX));
    assert!(set.is_empty());
    set.check_invariants();
}

#[test]
fn full_range_counts_saturate() {
    let mut set = IntervalSet::new();
    // 2^64 values: reported as u64::MAX, tracked exactly inside.
    assert_eq!(set.insert(0, MAX), MAX);
    assert_eq!(set.len(), MAX);
    assert!(set.contains(0) && set.contains(MAX));
    assert!(set.remove(5));
    assert_eq!(set.len(), MAX);
    assert_eq!(set.insert(5, 5), 1);
    assert_eq!(set.len(), MAX);
    set.check_invariants();
    assert_eq!(set.remove_range(0, MAX), MAX);
    assert!(set.is_empty());
    assert_eq!(set.insert(0, MAX), MAX);
    assert_eq!(set.remove_below(MAX), MAX);
    assert_eq!(set.len(), 1);
    set.check_invariants();
}

#[test]
fn cost_follows_ranges_not_values() {
    // Trillions of values in a handful of ranges: each call is a few tree operations.
    let mut set = IntervalSet::new();
    for k in 0..1000u64 {
        set.insert(k << 40, (k << 40) + (1 << 39));
    }
    assert_eq!(set.range_count(), 1000);
    assert_eq!(set.len(), 1000 * ((1 << 39) + 1));
    assert_eq!(set.remove_below(500 << 40), 500 * ((1 << 39) + 1));
    assert_eq!(set.remove_range(0, MAX), 500 * ((1 << 39) + 1));
    assert!(set.is_empty());
    set.check_invariants();
}

/// One call on the set under test and its oracle.
#[derive(Clone, Debug)]
enum Op {
    Insert(u64, u64),
    Remove(u64),
    RemoveRange(u64, u64),
    RemoveBelow(u64),
    PopFirst,
}

#[test]
fn gaps_lists_what_is_missing_in_a_span() {
    let set = set_of(&[(10, 20), (30, 40), (50, 50)]);
    let gaps = |lo, hi| set.gaps(lo, hi).collect::<Vec<_>>();
    assert_eq!(gaps(0, 100), [(0, 9), (21, 29), (41, 49), (51, 100)]);
    assert_eq!(gaps(10, 20), []);
    assert_eq!(gaps(15, 35), [(21, 29)]);
    assert_eq!(gaps(20, 30), [(21, 29)]);
    assert_eq!(gaps(21, 29), [(21, 29)]);
    assert_eq!(gaps(45, 55), [(45, 49), (51, 55)]);
    assert_eq!(gaps(5, 4), []);
    assert_eq!(IntervalSet::new().gaps(3, 7).collect::<Vec<_>>(), [(3, 7)]);
    let edge = set_of(&[(MAX - 5, MAX)]);
    assert_eq!(edge.gaps(MAX - 9, MAX).collect::<Vec<_>>(), [(MAX - 9, MAX - 6)]);
    assert_eq!(edge.gaps(MAX - 3, MAX).collect::<Vec<_>>(), []);
}

/// Values in two small regions, at 0 and at u64::MAX, so that the oracle stays small while the
/// edges of u64 are exercised.
fn value() -> impl Strategy<Value = u64> {
    prop_oneof![0..160u64, (0..160u64).prop_map(|d| MAX - d)]
}

/// `lo..=hi` with `hi` a little above `lo`, sometimes below it (an empty request).
fn span() -> impl Strategy<Value = (u64, u64)> {
    (value(), -3i64..24).prop_map(|(lo, d)| (lo, lo.saturating_add_signed(d)))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => span().prop_map(|(lo, hi)| Op::Insert(lo, hi)),
        2 => value().prop_map(Op::Remove),
        2 => span().prop_map(|(lo, hi)| Op::RemoveRange(lo, hi)),
        1 => value().prop_map(Op::RemoveBelow),
        1 => Just(Op::PopFirst),
    ]
}

/// Applies `op` to the oracle; returns what the set's method should return (a bool as 0 or 1).
fn apply_oracle(oracle: &mut BTreeSet<u64>, op: &Op) -> Option<u64> {
    // `lo..=hi` with `lo > hi` is empty, as the set's methods treat it.
    match *op {
        Op::Insert(lo, hi) => Some((lo..=hi).filter(|&v| oracle.insert(v)).count() as u64),
        Op::Remove(v) => Some(u64::from(oracle.remove(&v))),
        Op::RemoveRange(lo, hi) => Some((lo..=hi).filter(|&v| oracle.remove(&v)).count() as u64),
        Op::RemoveBelow(v) => {
            let kept = oracle.split_off(&v);
            let removed = std::mem::replace(oracle, kept).len() as u64;
            Some(removed)
        }
        Op::PopFirst => oracle.pop_first(),
    }
}

fn apply_set(set: &mut IntervalSet, op: &Op) -> Option<u64> {
    match *op {
        Op::Insert(lo, hi) => Some(set.insert(lo, hi)),
        Op::Remove(v) => Some(u64::from(set.remove(v))),
        Op::RemoveRange(lo, hi) => Some(set.remove_range(lo, hi)),
        Op::RemoveBelow(v) => Some(set.remove_below(v)),
        Op::PopFirst => set.pop_first(),
    }
}

/// The oracle's maximal runs of consecutive values.
fn oracle_ranges(oracle: &BTreeSet<u64>) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &v in oracle {
        match runs.last_mut() {
            Some((_, hi)) if hi.checked_add(1) == Some(v) => *hi = v,
            _ => runs.push((v, v)),
        }
    }
    runs
}

fn probes(op: &Op) -> Vec<u64> {
    let (lo, hi) = match *op {
        Op::Insert(lo, hi) | Op::RemoveRange(lo, hi) => (lo, hi),
        Op::Remove(v) | Op::RemoveBelow(v) => (v, v),
        Op::PopFirst => (0, MAX),
    };
    vec![
        lo.saturating_sub(1),
        lo,
        lo.saturating_add(1),
        hi.saturating_sub(1),
        hi,
        hi.saturating_add(1),
    ]
}

#[test]
fn prop_matches_btreeset_oracle() {
    let strategy = prop::collection::vec(op(), 1..80);
    run_seeded("prop_matches_btreeset_oracle", 3000, strategy, |ops| {
        let mut set = IntervalSet::new();
        let mut oracle = BTreeSet::new();
        for op in &ops {
            let got = apply_set(&mut set, op);
            let want = apply_oracle(&mut oracle, op);
            prop_assert_eq!(got, want, "return value of {:?}", op);
            set.check_invariants();
            let runs = oracle_ranges(&oracle);
            prop_assert_eq!(ranges_of(&set), runs.clone(), "contents after {:?}", op);
            prop_assert_eq!(set.len(), oracle.len() as u64);
            prop_assert_eq!(set.is_empty(), oracle.is_empty());
            prop_assert_eq!(set.range_count(), runs.len());
            prop_assert_eq!(set.first(), oracle.first().copied());
            prop_assert_eq!(set.last(), oracle.last().copied());
            let edges =
                runs.iter().flat_map(|&(lo, hi)| [lo.wrapping_sub(1), lo, hi, hi.wrapping_add(1)]);
            // What is missing around the operation's span (PopFirst's span is everything).
            let (lo, hi) = (probes(op)[0], probes(op)[5]);
            if hi.checked_sub(lo).is_some_and(|w| w < 64) {
                let missing: Vec<u64> = (lo..=hi).filter(|v| !oracle.contains(v)).collect();
                let listed: Vec<u64> = set.gaps(lo, hi).flat_map(|(a, b)| a..=b).collect();
                prop_assert_eq!(listed, missing, "gaps({}, {})", lo, hi);
            }
            for v in probes(op).into_iter().chain(edges) {
                prop_assert_eq!(set.contains(v), oracle.contains(&v), "contains({})", v);
            }
        }
        Ok(())
    });
}
