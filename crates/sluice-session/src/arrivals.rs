//! What has arrived of a receive's range, across all its channels: the arrival record the
//! real data path keeps (under a lock its channels share) and the simulator keeps (one per
//! data phase), so that both say "complete" by the same rule. A chunk handed from a dying
//! channel to another may arrive twice; each byte counts once.

use std::ops::Range;

use sluice_proto::intervals::IntervalSet;

/// The record of one receive: the range, what was there before it began (a resume's), and what
/// arrived since.
#[derive(Debug, Clone)]
pub struct Arrivals {
    range: Range<u64>,
    /// The parts of `range` that move (not present before), increasing.
    parts: Vec<Range<u64>>,
    /// Byte ranges of `range` present or arrived, as inclusive intervals.
    held: IntervalSet,
    /// Bytes of `held` that arrived (not present before).
    arrived: u64,
    /// Bytes of the range present before the receive.
    present: u64,
}

impl Arrivals {
    /// A receive of `range`, of which the parts in `present` are there already (clipped to
    /// the range).
    pub fn new(range: Range<u64>, present: &[Range<u64>]) -> Arrivals {
        let mut held = IntervalSet::new();
        let mut had = 0;
        for part in present {
            let (lo, hi) = (part.start.max(range.start), part.end.min(range.end));
            if lo < hi {
                had += held.insert(lo, hi - 1);
            }
        }
        let parts = match range.end.checked_sub(1).filter(|&last| last >= range.start) {
            Some(last) => held.gaps(range.start, last).map(|(lo, hi)| lo..hi + 1).collect(),
            None => Vec::new(),
        };
        Arrivals { range, parts, held, arrived: 0, present: had }
    }

    /// The range received.
    pub fn range(&self) -> &Range<u64> {
        &self.range
    }

    /// The parts that move (the range less what was present), increasing: where compressed
    /// frames' pieces lie.
    pub fn parts(&self) -> &[Range<u64>] {
        &self.parts
    }

    /// What is held now, present or arrived (inclusive intervals).
    pub fn held(&self) -> &IntervalSet {
        &self.held
    }

    /// Bytes that must arrive.
    pub fn missing(&self) -> u64 {
        self.range.end - self.range.start - self.present
    }

    /// Bytes arrived so far, each once.
    pub fn bytes(&self) -> u64 {
        self.arrived
    }

    /// Whether every byte of the range arrived or was present.
    pub fn complete(&self) -> bool {
        self.arrived == self.missing()
    }

    /// Whether `len` bytes at `offset` lie inside `range` and are not empty: a payload outside
    /// is a peer's bug, to be dropped. (Checked per datagram, so it needs no record.)
    pub fn within(range: &Range<u64>, offset: u64, len: u64) -> bool {
        len > 0
            && offset >= range.start
            && offset.checked_add(len).is_some_and(|end| end <= range.end)
    }

    /// Records `len` bytes at `offset` as arrived (inside the range: [`Arrivals::within`]);
    /// returns how many of them are new.
    pub fn record(&mut self, offset: u64, len: u64) -> u64 {
        if !Arrivals::within(&self.range, offset, len) {
            return 0;
        }
        let new = self.held.insert(offset, offset + len - 1);
        self.arrived += new;
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_byte_counts_once_and_present_parts_are_not_missing() {
        let mut a = Arrivals::new(10..110, &[0..20, 50..60]);
        assert_eq!(a.parts(), &[20..50, 60..110]);
        assert_eq!(a.missing(), 80);
        assert_eq!(a.record(20, 30), 30);
        assert_eq!(a.record(20, 30), 0, "a chunk handed on arrives twice");
        assert_eq!(a.record(55, 10), 5, "only the part not present counts");
        assert!(!a.complete());
        assert_eq!(a.record(65, 45), 45);
        assert!(a.complete());
        assert_eq!(a.bytes(), 80);
    }

    #[test]
    fn nothing_outside_the_range_is_recorded() {
        let mut a = Arrivals::new(100..200, &[]);
        assert_eq!(a.record(90, 20), 0);
        assert_eq!(a.record(190, 20), 0);
        assert_eq!(a.record(150, 0), 0);
        assert_eq!(a.record(u64::MAX - 1, 5), 0);
        assert!(Arrivals::within(&(100..200), 100, 100));
        assert!(!Arrivals::within(&(100..200), 100, 101));
        let empty = Arrivals::new(5..5, &[]);
        assert!(empty.complete() && empty.parts().is_empty());
    }
}
