//! Unit tests of the block reader and writer (the socket loops are tested over loopback in
//! `tests/datapath_*.rs`).

use std::os::unix::fs::FileExt;

use super::blocks::{READ_BLOCK_BYTES, ReadAhead, SharedFile, WRITE_BLOCK_BYTES, WriteBehind};

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + i / 509) as u8).collect()
}

fn temp_file(data: &[u8]) -> std::fs::File {
    let file = tempfile::tempfile().unwrap();
    file.write_all_at(data, 0).unwrap();
    file
}

#[test]
fn read_ahead_serves_sequential_retransmitted_and_tail_reads() {
    let data = pattern(3 * READ_BLOCK_BYTES + 777);
    let file = temp_file(&data);
    let (start, end) = (100u64, data.len() as u64 - 5);
    let mut reader = ReadAhead::new(&file, start, end);
    let mut check = |offset: u64, len: usize| {
        let mut dst = vec![0u8; len];
        reader.fill(offset, &mut dst).unwrap();
        assert_eq!(dst, data[offset as usize..offset as usize + len], "at {offset}+{len}");
    };
    // New data in order, in packet-sized pieces, across block boundaries up to the range end.
    let mut offset = start;
    while offset < end {
        let len = 1400.min((end - offset) as usize);
        check(offset, len);
        offset += len as u64;
        if offset % 7 == 0 {
            check(start + 1400, 1400); // a retransmission far behind
        }
    }
    check(start, 1400);
    check(end - 1, 1);
}

#[test]
fn read_ahead_reports_a_short_file() {
    let data = pattern(10_000);
    let file = temp_file(&data);
    let mut reader = ReadAhead::new(&file, 0, 20_000);
    let mut dst = vec![0u8; 1400];
    reader.fill(0, &mut dst).unwrap();
    assert_eq!(dst, data[..1400]);
    let mut dst = vec![0u8; 1400];
    let err = reader.fill(9_800, &mut dst).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
}

#[test]
fn write_behind_gathers_runs_and_writes_repairs_in_place() {
    let data = pattern(2 * WRITE_BLOCK_BYTES + 5000);
    let file = temp_file(&vec![0u8; data.len()]);
    let shared = SharedFile::new(&file);
    let mut writer = WriteBehind::new(&shared);
    let chunks: Vec<(usize, usize)> =
        (0..data.len()).step_by(1400).map(|o| (o, (o + 1400).min(data.len()))).collect();
    // Every fifth chunk is "lost" and arrives after the rest, in reverse.
    for &(lo, hi) in chunks.iter().enumerate().filter(|(i, _)| i % 5 != 2).map(|(_, c)| c) {
        writer.write(lo as u64, &data[lo..hi]).unwrap();
    }
    for &(lo, hi) in chunks.iter().enumerate().filter(|(i, _)| i % 5 == 2).map(|(_, c)| c).rev() {
        writer.write(lo as u64, &data[lo..hi]).unwrap();
    }
    writer.flush().unwrap();
    let mut back = vec![0u8; data.len()];
    file.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data);
}
