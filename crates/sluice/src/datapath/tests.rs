//! Unit tests of the block reader and writer, of the receiver's shared file and its hasher, and
//! of the test fault (the socket loops are tested over loopback in `tests/datapath_*.rs`).

use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicBool;

use sluice_proto::intervals::IntervalSet;

use super::blocks::{READ_BLOCK_BYTES, ReadAhead, WRITE_BLOCK_BYTES, WriteBehind};
use super::written::SharedFile;
use crate::files::HASH_BLOCK_BYTES;

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

/// A test fault's byte is wrong in every read of its pass, a retransmission's too: a fault spent
/// on the first read went away when the packet that carried it was lost, and the repair tests
/// that count on it then saw no repair (seen once here, under load on loopback).
#[test]
fn a_fault_strikes_every_read_of_its_pass_and_none_after() {
    let data = pattern(2 * READ_BLOCK_BYTES);
    let fault = super::Fault { offset: 5_000, times: 1 };
    let offset = fault.in_pass(0).expect("the first pass is struck");
    assert_eq!(fault.in_pass(1), None, "spent after `times` passes");
    let faulty = super::Faulty::reading(temp_file(&data), offset);
    let mut expected = data[4_200..5_600].to_vec();
    expected[800] = !expected[800];
    // The block with the byte, read to send it new.
    let mut block = vec![0u8; READ_BLOCK_BYTES];
    super::read_exact_at(&faulty, &mut block, 0).unwrap();
    assert_eq!(block[4_200..5_600], expected, "the packet with the byte, new");
    // Its packet is lost and read again to send it again: still wrong.
    let mut packet = vec![0u8; 1400];
    super::read_exact_at(&faulty, &mut packet, 4_200).unwrap();
    assert_eq!(packet, expected, "the retransmission");
    // A write fault: every write of the byte, a duplicate's too.
    let faulty = super::Faulty::writing(temp_file(&vec![0u8; data.len()]), offset);
    for what in ["a write", "a duplicate"] {
        super::write_all_at(&faulty, &data[4_200..5_600], 4_200).unwrap();
        let mut back = vec![0u8; 1400];
        super::read_exact_at(&faulty, &mut back, 4_200).unwrap();
        assert_eq!(back, expected, "{what}");
    }
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
    let shared = SharedFile::new(&file, 0..data.len() as u64, &IntervalSet::new());
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

#[test]
fn the_shared_file_writes_each_byte_once() {
    let file = temp_file(&[0u8; 100]);
    let shared = SharedFile::new(&file, 0..100, &IntervalSet::new());
    shared.write_all_at(&[1; 30], 10).unwrap();
    // A second copy that differs (the sender's file changed): only the new bytes land.
    shared.write_all_at(&[2; 50], 0).unwrap();
    shared.write_all_at(&[3; 5], 60).unwrap();
    shared.write_all_at(&[4; 10], 58).unwrap();
    shared.write_all_at(&[], 99).unwrap();
    let mut expected = [0u8; 100];
    expected[..10].fill(2);
    expected[10..40].fill(1);
    expected[40..50].fill(2);
    expected[58..60].fill(4);
    expected[60..65].fill(3);
    expected[65..68].fill(4);
    let mut back = [0u8; 100];
    file.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, expected);
    let err = shared.write_all_at(&[5; 2], u64::MAX).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn the_hasher_follows_the_written_prefix_to_the_end_of_the_range_one_hash_per_extent() {
    let data = pattern(3 * HASH_BLOCK_BYTES + 777);
    let range = 1000..data.len() as u64 - 3;
    let file = temp_file(&vec![0u8; data.len()]);
    let shared = SharedFile::new(&file, range.clone(), &IntervalSet::new());
    let no = AtomicBool::new(false);
    let piece = 64 << 10;
    // Extents: a small one, an empty one, one across a hash block's end, the rest.
    let block = HASH_BLOCK_BYTES as u64;
    let ends = vec![range.start + 5000, range.start + 5000, range.start + block + 3, range.end];
    let hashed = std::thread::scope(|s| {
        let hasher = s.spawn(|| shared.hash_written(ends.clone(), &no));
        // Pieces in pairs, the second of each pair first; then the first piece again.
        let starts: Vec<u64> = (range.start..range.end).step_by(piece).collect();
        for pair in starts.chunks(2) {
            for &at in pair.iter().rev() {
                let end = (at + piece as u64).min(range.end);
                shared.write_all_at(&data[at as usize..end as usize], at).unwrap();
            }
        }
        shared.write_all_at(&data[1000..2000], 1000).unwrap();
        // No `finish`: the hasher ends on its own once the whole range is written.
        hasher.join().unwrap()
    });
    let mut from = range.start as usize;
    let expected: Vec<blake3::Hash> = ends
        .iter()
        .map(|&end| {
            let hash = blake3::hash(&data[from..end as usize]);
            from = end as usize;
            hash
        })
        .collect();
    assert_eq!(hashed.unwrap(), Some(expected));
}

#[test]
fn the_hasher_stops_when_the_transfer_ends_incomplete_or_is_cancelled() {
    let data = pattern(2 * HASH_BLOCK_BYTES);
    let file = temp_file(&vec![0u8; data.len()]);
    let no = AtomicBool::new(false);
    let shared = SharedFile::new(&file, 0..data.len() as u64, &IntervalSet::new());
    shared.write_all_at(&data[..HASH_BLOCK_BYTES + 5], 0).unwrap();
    let hashed = std::thread::scope(|s| {
        let hasher = s.spawn(|| shared.hash_written(vec![data.len() as u64], &no));
        shared.finish(false);
        // Only the first end counts.
        shared.finish(true);
        hasher.join().unwrap()
    });
    assert_eq!(hashed.unwrap(), None);

    let cancelled = AtomicBool::new(true);
    let shared = SharedFile::new(&file, 0..data.len() as u64, &IntervalSet::new());
    shared.write_all_at(&data, 0).unwrap();
    assert_eq!(shared.hash_written(vec![data.len() as u64], &cancelled).unwrap(), None);
}

#[test]
fn bytes_present_before_the_transfer_are_hashed_and_not_awaited() {
    let data = pattern(HASH_BLOCK_BYTES + 5000);
    // The first 5000 bytes are on disk already (a resumed file); the rest is zeros until written.
    let mut on_disk = vec![0u8; data.len()];
    on_disk[..5000].copy_from_slice(&data[..5000]);
    let file = temp_file(&on_disk);
    let mut present = IntervalSet::new();
    present.insert(0, 4999);
    let shared = SharedFile::new(&file, 0..data.len() as u64, &present);
    assert_eq!(shared.prefix(), 5000);
    // A second copy of present bytes is not written over them.
    shared.write_all_at(&[9u8; 100], 0).unwrap();
    shared.write_all_at(&data[5000..], 5000).unwrap();
    let no = AtomicBool::new(false);
    let hashed = shared.hash_written(vec![data.len() as u64], &no).unwrap();
    assert_eq!(hashed, Some(vec![blake3::hash(&data)]));
}

#[test]
fn a_complete_end_with_an_unwritten_byte_is_an_error() {
    let file = temp_file(&[0u8; 100]);
    let shared = SharedFile::new(&file, 0..100, &IntervalSet::new());
    shared.write_all_at(&[1; 40], 0).unwrap();
    shared.write_all_at(&[1; 59], 41).unwrap();
    shared.finish(true);
    let no = AtomicBool::new(false);
    let err = shared.hash_written(vec![100], &no).unwrap_err();
    assert!(err.to_string().contains("byte 40 was never written"), "{err}");
}

#[test]
fn a_datagram_of_another_size_starts_a_new_send() {
    use super::send::starts_new_send;
    // A pair's first packet (1232 bytes while the path MTU is probed) behind a 1472-byte
    // probe: it starts a send of its own, which its second packet joins.
    assert!(starts_new_send(1, 1472, 1232));
    assert!(!starts_new_send(1, 1232, 1232));
    // Larger than the batch's segments, as before; and nothing gathered yet.
    assert!(starts_new_send(3, 1232, 1472));
    assert!(!starts_new_send(0, 0, 1472));
}

/// A receiving channel's answer: with `ack_now` it sends the acknowledgement at once, through
/// the receiver's timers (a stop once the data is complete relies on it; without the timers'
/// run the receiver had nothing to send). A sender's first two packets: one answered at
/// 20 us, the other arriving at 40; asked at 50 us.
#[test]
fn an_answer_asked_for_at_once_is_sent_at_once() {
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    use sluice_proto::config::ChannelConfig;
    use sluice_proto::crypto::{Algorithm, PacketKey};
    use sluice_proto::receiver::Receiver;
    use sluice_proto::sender::Sender;

    use super::port::Port;
    use super::recv::answer;

    let sent_at_50us = |ack_now: bool| {
        let key = |b: u8| PacketKey::new(Algorithm::Aes256Gcm, &[b; 32], [b; 12]);
        let config = ChannelConfig::default();
        let mut sender = Sender::new(config.clone(), key(1), key(2), 0).unwrap();
        let mut receiver = Receiver::new(config, key(2), key(1), 0).unwrap();
        sender.push(0, 3000);
        sender.finish();
        let mut packets = [vec![0u8; 2048], vec![0u8; 2048]];
        let lens: Vec<usize> = packets
            .iter_mut()
            .map(|p| sender.poll_transmit(0, p, &mut |_, out| out.fill(7)).unwrap())
            .collect();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let local = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = Port::new(local, peer.local_addr().unwrap(), false, Instant::now()).unwrap();
        let stop = AtomicBool::new(false);
        let mut out = vec![0u8; 2048];
        // What `answer` sent: the datagrams that reach the peer before a marker sent after it
        // (loopback keeps one socket pair's order; no sleep, so its delivery time does not
        // matter).
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answered = |receiver: &mut Receiver, now: u64| {
            answer(receiver, &port, &mut out, now, &stop).unwrap();
            let marker = [0xA5u8; 3];
            port.send(&marker, marker.len(), &stop).unwrap();
            let mut got = [0u8; 2048];
            let mut count = 0;
            loop {
                let n = peer.recv(&mut got).expect("the marker reaches the peer");
                if got[..n] == marker {
                    return count;
                }
                count += 1;
            }
        };
        receiver.handle_datagram(10, &mut packets[0][..lens[0]]).unwrap();
        assert!(answered(&mut receiver, 20) > 0, "the first packet's answer at 20 us");
        receiver.handle_datagram(40, &mut packets[1][..lens[1]]).unwrap();
        if ack_now {
            receiver.ack_now(50);
        }
        answered(&mut receiver, 50)
    };
    assert_eq!(sent_at_50us(false), 0, "without ack_now: the next ACK tick, 10 ms on");
    assert_eq!(sent_at_50us(true), 1, "with ack_now: the acknowledgement at once");
}
