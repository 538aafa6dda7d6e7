//! The wanted files laid end to end in one offset space, and the arithmetic both roles do on
//! it: resume verdicts, repair blocks, and the spans a repair round moves.

use std::ops::Range;

/// Blocks a resume offers and checks, and a repair compares (a mismatch costs at most one
/// block more).
pub const BLOCK_BYTES: u64 = 4 << 20;

/// The wanted files' sizes, in the order the data moves; file `k` starts where `k - 1` ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Where each file starts, and one more entry: the end of the last.
    starts: Vec<u64>,
}

impl Layout {
    /// The layout of files of these sizes.
    pub fn new(sizes: impl IntoIterator<Item = u64>) -> Layout {
        let mut starts = vec![0];
        let mut at = 0u64;
        for size in sizes {
            at = at.saturating_add(size);
            starts.push(at);
        }
        Layout { starts }
    }

    /// Files in it.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Whether it holds no file.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of all the files.
    pub fn total(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    /// File `k`'s size and where it starts.
    pub fn file(&self, k: usize) -> Option<(u64, u64)> {
        let (start, end) = (*self.starts.get(k)?, *self.starts.get(k + 1)?);
        Some((end - start, start))
    }

    /// Where each file ends.
    pub fn ends(&self) -> Vec<u64> {
        self.starts[1..].to_vec()
    }

    /// Blocks of [`BLOCK_BYTES`] in file `k` (0 for an empty or unknown file).
    pub fn blocks(&self, k: usize) -> u64 {
        self.file(k).map_or(0, |(size, _)| size.div_ceil(BLOCK_BYTES))
    }

    /// The offset ranges still to send when each file keeps its leading `kept[k]` bytes.
    pub fn remaining(&self, kept: &[u64]) -> Vec<Range<u64>> {
        (0..self.len())
            .filter_map(|k| {
                let (size, base) = self.file(k)?;
                let keep = kept.get(k).copied().unwrap_or(0).min(size);
                Some(base + keep..base + size)
            })
            .filter(|r| r.start < r.end)
            .collect()
    }

    /// The ranges already at the receiver from the sender's verdict (`[file, bytes]`), each
    /// checked against what was offered (`offered`: file and number of blocks). A verdict
    /// that keeps more than was offered, or names a file that was not, is refused.
    pub fn present(
        &self,
        offered: &[(u32, usize)],
        kept: &[[u64; 2]],
    ) -> Result<Vec<Range<u64>>, String> {
        let mut ranges = Vec::new();
        for &[k, bytes] in kept {
            let blocks = offered.iter().find(|(o, _)| u64::from(*o) == k).map(|(_, n)| *n);
            let blocks = blocks.ok_or(format!("Resumed keeps file {k}, which was not offered"))?;
            let (size, base) = usize::try_from(k)
                .ok()
                .and_then(|k| self.file(k))
                .ok_or(format!("Resumed keeps file {k}, which is not wanted"))?;
            let most = (blocks as u64).saturating_mul(BLOCK_BYTES).min(size);
            if bytes > most {
                return Err(format!("{bytes} bytes kept of file {k}, more than offered"));
            }
            if bytes > 0 {
                ranges.push(base..base + bytes);
            }
        }
        ranges.sort_by_key(|r| r.start);
        Ok(ranges)
    }

    /// The offset ranges of `blocks` (`[file, block]`, increasing, each a block of a file of
    /// the layout, of a file in `only` when given), adjacent blocks joined.
    pub fn block_ranges(
        &self,
        blocks: &[[u64; 2]],
        only: Option<&[usize]>,
    ) -> Result<Vec<Range<u64>>, String> {
        let mut ranges: Vec<Range<u64>> = Vec::new();
        let mut last = None;
        for &[file, block] in blocks {
            let k = usize::try_from(file).map_err(|_| format!("file {file} in Repairing"))?;
            let (size, base) = self.file(k).ok_or(format!("file {file} in Repairing"))?;
            let start = block.checked_mul(BLOCK_BYTES).filter(|&s| s < size);
            let Some(start) = start else {
                return Err(format!("block {block} of file {file} ({size} bytes) in Repairing"));
            };
            if only.is_some_and(|only| !only.contains(&k))
                || last.is_some_and(|l| l >= (file, block))
            {
                return Err(format!("block {block} of file {file} in Repairing was not asked for"));
            }
            last = Some((file, block));
            let range = base + start..base + (start + BLOCK_BYTES).min(size);
            match ranges.last_mut() {
                Some(prev) if prev.end == range.start => prev.end = range.end,
                _ => ranges.push(range),
            }
        }
        Ok(ranges)
    }

    /// The offset span of files `which` and the end of each of them.
    pub fn span(&self, which: Range<usize>) -> (Range<u64>, Vec<u64>) {
        let ends: Vec<u64> =
            which.clone().filter_map(|k| self.file(k)).map(|(size, base)| base + size).collect();
        let start = self.file(which.start).map_or(0, |(_, base)| base);
        let end = ends.last().copied().unwrap_or(start);
        (start..end, ends)
    }
}

/// The parts of `span` outside `ranges` (increasing, inside `span`).
pub fn complement(ranges: &[Range<u64>], span: Range<u64>) -> Vec<Range<u64>> {
    let mut rest = Vec::new();
    let mut at = span.start;
    for r in ranges {
        if r.start > at {
            rest.push(at..r.start);
        }
        at = at.max(r.end);
    }
    if at < span.end {
        rest.push(at..span.end);
    }
    rest
}

/// Bytes in `ranges`.
pub fn bytes_in(ranges: &[Range<u64>]) -> u64 {
    ranges.iter().map(|r| r.end - r.start).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = BLOCK_BYTES;

    #[test]
    fn complement_leaves_the_gaps() {
        assert_eq!(complement(&[2..4, 6..8], 0..10), vec![0..2, 4..6, 8..10]);
        let whole = [Range { start: 0, end: 10 }];
        assert_eq!(complement(&whole, 0..10), Vec::<Range<u64>>::new());
        assert_eq!(complement(&[], 3..5), vec![3..5]);
    }

    #[test]
    fn block_ranges_join_neighbours_and_refuse_nonsense() {
        let files = Layout::new([3 * B, B + 5]);
        let ranges = files.block_ranges(&[[0, 1], [0, 2], [1, 1]], None).unwrap();
        assert_eq!(ranges, vec![B..3 * B, 4 * B..4 * B + 5]);
        assert!(files.block_ranges(&[[0, 3]], None).is_err(), "past the file's end");
        assert!(files.block_ranges(&[[2, 0]], None).is_err(), "no such file");
        assert!(files.block_ranges(&[[0, 1], [0, 1]], None).is_err(), "twice");
        assert!(files.block_ranges(&[[0, 2], [0, 1]], None).is_err(), "out of order");
        assert!(files.block_ranges(&[[1, 0]], Some(&[0])).is_err(), "not asked for");
    }

    #[test]
    fn a_verdict_keeps_no_more_than_was_offered() {
        let files = Layout::new([10 * B, 3, 2 * B]);
        let offered = [(0, 4), (2, 2)];
        let present = files.present(&offered, &[[0, 3 * B], [2, 2 * B]]).unwrap();
        assert_eq!(present, vec![0..3 * B, 10 * B + 3..12 * B + 3]);
        assert!(files.present(&offered, &[[0, 5 * B]]).is_err(), "more blocks than offered");
        assert!(files.present(&offered, &[[1, 1]]).is_err(), "a file not offered");
        assert!(files.present(&[(7, 1)], &[[7, 1]]).is_err(), "a file not wanted");
        assert_eq!(files.remaining(&[3 * B, 0, 2 * B]), vec![3 * B..10 * B, 10 * B..10 * B + 3]);
    }

    #[test]
    fn spans_and_ranges_of_files() {
        let files = Layout::new([5, 0, 7]);
        assert_eq!(files.total(), 12);
        assert_eq!(files.span(1..3), (5..12, vec![5, 12]));
        assert_eq!(files.blocks(2), 1);
        assert_eq!(files.blocks(1), 0);
    }
}
