//! TCP data streams on loopback: exact bytes at several sizes over one and four streams,
//! several ranges with present parts (a resume), compression, a stream cut mid-way, every
//! stream cut, a flipped byte on the wire, cancellation at either end, and a peer gone silent.
//! Faults come from a small relay thread between the two ends of a stream.
//!
//! Every test prints its seed; `SLUICE_TEST_SEED=<n>` replays one. The tests run one at a time
//! (a lock): the machine may have two cores. No test asserts a speed: time bounds are liveness
//! checks with generous slack. The ignored `loopback_throughput` is the benchmark (see its doc).

#![allow(clippy::print_stdout)] // tests print their seeds and results

#[path = "common/data.rs"]
mod data;

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice::datapath::tcp::{Growth, StreamConfig, StreamParams, receive_streams, send_streams};
use sluice::datapath::{ChannelReport, DataError, Progress};

use data::{CancelAt, content, file_with, keys, mixed_content, seed, serial};

/// Two connected ends of a loopback TCP connection.
fn connected() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    (a, b)
}

fn config(idle_secs: u64) -> StreamConfig {
    StreamConfig { idle_timeout_us: idle_secs * 1_000_000, ..StreamConfig::default() }
}

/// `n` streams (keys differ per stream): the sender's ends and the receiver's.
fn streams(n: u64, seed: u64, config: StreamConfig) -> (Vec<StreamParams>, Vec<StreamParams>) {
    (0..n)
        .map(|i| {
            let (s_keys, r_keys) = keys(seed.wrapping_add(i * 7919));
            let (s, r) = connected();
            (
                StreamParams { stream: s, keys: s_keys, config },
                StreamParams { stream: r, keys: r_keys, config },
            )
        })
        .unzip()
}

/// What one end did.
struct End {
    result: Result<ChannelReport, DataError>,
    /// The receiver's hashes of its extents (`None` for the sender or a failure).
    hashes: Option<Vec<blake3::Hash>>,
    progress: Vec<(Instant, Progress)>,
    /// Just before the datapath started.
    started: Instant,
    ended: Instant,
}

/// One transfer: what the sender sends and what the receiver expects.
struct Job<'a> {
    src: &'a File,
    dst: &'a File,
    ranges: Vec<Range<u64>>,
    range: Range<u64>,
    present: Vec<Range<u64>>,
    ends: Vec<u64>,
    compress: Option<i32>,
}

impl<'a> Job<'a> {
    /// The whole of `range`, nothing present, one extent.
    fn whole(src: &'a File, dst: &'a File, range: Range<u64>) -> Self {
        let ends = vec![range.end];
        Self { src, dst, ranges: vec![range.clone()], range, present: vec![], ends, compress: None }
    }
}

/// Runs both ends on their own threads until both return. `on_progress` sees each end's
/// reports (sender: `true`).
fn run_pair(
    (sender, receiver): (Vec<StreamParams>, Vec<StreamParams>),
    job: &Job<'_>,
    (cancel_sender, cancel_receiver): (&AtomicBool, &AtomicBool),
    on_progress: &(dyn Fn(bool, Progress) + Sync),
) -> (End, End) {
    let run = |is_sender: bool, params: Vec<StreamParams>, cancel: &AtomicBool| {
        let started = Instant::now();
        let mut progress = Vec::new();
        let mut note = |p: Progress| {
            progress.push((Instant::now(), p));
            on_progress(is_sender, p);
        };
        let mut hashes = None;
        let result = if is_sender {
            send_streams(params, job.src, &job.ranges, job.compress, &mut note, cancel)
        } else {
            let (range, ends) = (job.range.clone(), job.ends.clone());
            receive_streams(params, job.dst, range, &job.present, ends, &mut note, &|_| {}, cancel)
                .map(|received| {
                    hashes = Some(received.hashes);
                    received.report
                })
        };
        End { result, hashes, progress, started, ended: Instant::now() }
    };
    let run = &run;
    std::thread::scope(|s| {
        let r = s.spawn(move || run(false, receiver, cancel_receiver));
        let snd = s.spawn(move || run(true, sender, cancel_sender));
        (snd.join().unwrap(), r.join().unwrap())
    })
}

fn never(_: bool, _: Progress) {}

/// Every byte of `got` is the data's or the filler's: nothing wrong reached the file.
fn no_wrong_byte(got: &[u8], data: &[u8], filler: u8) {
    assert_eq!(got.len(), data.len());
    let wrong = got.iter().zip(data).position(|(&g, &d)| g != d && g != filler);
    assert_eq!(wrong, None, "a byte that is neither the data nor the filler");
}

/// Moves `range` of a `len`-byte seeded file over `n` direct streams into a file of filler and
/// checks the bytes (inside the range they match, outside they are untouched), the hash, the
/// reports and the progress.
fn exact_transfer(n: u64, test: &str, len: usize, range: Range<u64>, default_seed: u64) {
    let _serial = serial();
    let seed = seed(test, default_seed);
    let dir = tempfile::tempdir().unwrap();
    let data = content(len, seed);
    let src = file_with(&dir, "src", &data);
    let filler = vec![0xEEu8; len];
    let dst = file_with(&dir, "dst", &filler);
    let no = AtomicBool::new(false);
    let job = Job::whole(&src, &dst, range.clone());
    let (s, r) = run_pair(streams(n, seed, config(10)), &job, (&no, &no), &never);
    let sent = s.result.as_ref().unwrap();
    let received = r.result.as_ref().unwrap();
    println!("{test}: sender {sent:?}");
    println!("{test}: receiver {received:?}");
    let total = range.end - range.start;
    assert_eq!((sent.bytes, sent.payload_bytes), (total, total));
    assert_eq!((received.bytes, received.payload_bytes), (total, total));
    assert_eq!((sent.channels, sent.lost_channels), (n as u32, 0));
    assert_eq!((received.channels, received.lost_channels), (n as u32, 0));
    data::check_progress(&s.progress, s.started, total);
    data::check_progress(&r.progress, r.started, total);
    assert_eq!(s.progress.last().unwrap().1.bytes, total);
    assert_eq!(r.progress.last().unwrap().1.bytes, total);
    let mut expected = filler;
    let (lo, hi) = (range.start as usize, range.end as usize);
    expected[lo..hi].copy_from_slice(&data[lo..hi]);
    assert_eq!(r.hashes, Some(vec![blake3::hash(&data[lo..hi])]));
    let got = std::fs::read(dir.path().join("dst")).unwrap();
    assert!(got == expected, "the received file differs");
}

#[test]
fn an_empty_range_returns_at_once_without_a_byte() {
    let _serial = serial();
    let seed = seed("empty", 31);
    for n in [1, 4] {
        let dir = tempfile::tempdir().unwrap();
        let src = file_with(&dir, "src", b"");
        let dst = file_with(&dir, "dst", b"");
        let ends = streams(n, seed, config(10));
        let probes: Vec<_> =
            ends.0.iter().chain(&ends.1).map(|p| p.stream.try_clone().unwrap()).collect();
        let no = AtomicBool::new(false);
        let started = Instant::now();
        let (s, r) = run_pair(ends, &Job::whole(&src, &dst, 0..0), (&no, &no), &never);
        assert!(started.elapsed() < Duration::from_secs(1), "empty ranges must not wait");
        assert_eq!(s.result.unwrap().bytes, 0);
        assert_eq!(r.result.unwrap().bytes, 0);
        assert_eq!(r.hashes, Some(vec![blake3::hash(b"")]));
        assert_eq!((s.progress.len(), r.progress.len()), (1, 1));
        for (i, probe) in probes.iter().enumerate() {
            probe.set_nonblocking(true).unwrap();
            let got = (&*probe).read(&mut [0u8; 64]);
            println!("empty: {n} streams: probe {i}: {got:?}");
            let err = got.unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "a byte was sent");
        }
    }
}

#[test]
fn one_byte_arrives_over_one_stream() {
    exact_transfer(1, "one_byte_1", 1, 0..1, 32);
}

#[test]
fn one_byte_arrives_over_four_streams() {
    exact_transfer(4, "one_byte_4", 1, 0..1, 33);
}

#[test]
fn sixty_four_mib_arrive_exactly_over_one_stream() {
    let len = 64 << 20;
    exact_transfer(1, "sixty_four_mib_1", len, 0..len as u64, 34);
}

#[test]
fn sixty_four_mib_arrive_exactly_over_four_streams() {
    let len = 64 << 20;
    exact_transfer(4, "sixty_four_mib_4", len, 0..len as u64, 35);
}

#[test]
fn a_middle_range_moves_only_that_range() {
    exact_transfer(2, "middle_range", 3 << 20, 4097..(2 << 20) + 5, 36);
}

#[test]
fn several_ranges_move_and_present_parts_are_hashed_not_sent() {
    // A resume: the receiver has two parts already; the sender sends the three others.
    let _serial = serial();
    let seed = seed("several_ranges", 37);
    let mib = 1u64 << 20;
    let len = 10 * mib + 77;
    let data = content(len as usize, seed);
    let ranges = vec![0..mib + 3, 3 * mib..5 * mib + 1, 8 * mib..len];
    let present = vec![mib + 3..3 * mib, 5 * mib + 1..8 * mib];
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &data);
    // The present parts hold the data; the rest of the target is filler.
    let mut start = vec![0xEEu8; len as usize];
    for part in &present {
        let (lo, hi) = (part.start as usize, part.end as usize);
        start[lo..hi].copy_from_slice(&data[lo..hi]);
    }
    let dst = file_with(&dir, "dst", &start);
    let ends = vec![2 * mib, 6 * mib, len];
    let job = Job {
        src: &src,
        dst: &dst,
        ranges: ranges.clone(),
        range: 0..len,
        present,
        ends,
        compress: None,
    };
    let no = AtomicBool::new(false);
    let (s, r) = run_pair(streams(3, seed, config(10)), &job, (&no, &no), &never);
    let sent = s.result.unwrap();
    let received = r.result.unwrap();
    println!("several_ranges: sender {sent:?}");
    println!("several_ranges: receiver {received:?}");
    let moved: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    assert_eq!(moved, 5 * mib + 81);
    assert_eq!((sent.bytes, sent.payload_bytes), (moved, moved), "only the ranges are sent");
    assert_eq!((received.bytes, received.payload_bytes), (moved, moved), "only they arrive");
    let extent = |lo: u64, hi: u64| blake3::hash(&data[lo as usize..hi as usize]);
    let hashes = vec![extent(0, 2 * mib), extent(2 * mib, 6 * mib), extent(6 * mib, len)];
    assert_eq!(r.hashes, Some(hashes), "each extent hashed, the present parts included");
    let got = std::fs::read(dir.path().join("dst")).unwrap();
    assert!(got == data, "the received file differs");
}

#[test]
fn compressed_mixed_content_arrives_exactly_with_fewer_payload_bytes() {
    let _serial = serial();
    let seed = seed("compressed", 38);
    let len = 24usize << 20;
    let data = mixed_content(len, seed);
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &data);
    let dst = file_with(&dir, "dst", &vec![0u8; len]);
    let mut job = Job::whole(&src, &dst, 0..len as u64);
    job.compress = Some(3);
    let no = AtomicBool::new(false);
    let (s, r) = run_pair(streams(4, seed, config(10)), &job, (&no, &no), &never);
    let sent = s.result.unwrap();
    let received = r.result.unwrap();
    println!("compressed: sender {sent:?}");
    println!("compressed: receiver {received:?}");
    assert_eq!((sent.bytes, received.bytes), (len as u64, len as u64));
    assert!(sent.payload_bytes < len as u64 * 3 / 4, "{sent:?}");
    assert_eq!(sent.payload_bytes, received.payload_bytes);
    let mut got = vec![0u8; len];
    dst.read_exact_at(&mut got, 0).unwrap();
    assert!(got == data, "the received file differs");
    assert_eq!(r.hashes, Some(vec![blake3::hash(&data)]));
}

/// What a relay does to the bytes from the sender.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Inverts the byte at this position of the stream.
    Flip(u64),
    /// After this many bytes, shuts both connections down.
    Die(u64),
    /// After this many bytes, forwards nothing more either way, holding both open.
    Freeze(u64),
}

/// A relay between the two ends of one stream: a thread per direction.
struct Relay {
    /// Bytes forwarded toward the receiver.
    forwarded: Arc<AtomicU64>,
    /// When the fault struck (a die or a freeze).
    struck: Arc<Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Relay {
    /// Relays between `near` (connected to the sender) and `far` (to the receiver).
    fn start(near: TcpStream, far: TcpStream, fault: Fault) -> Self {
        let forwarded = Arc::new(AtomicU64::new(0));
        let struck = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let frozen = Arc::new(AtomicBool::new(false));
        let stop_sender = stop.clone();
        let (near2, far2) = (near.try_clone().unwrap(), far.try_clone().unwrap());
        let to_receiver = {
            let (forwarded, struck, stop, frozen) =
                (forwarded.clone(), struck.clone(), stop.clone(), frozen.clone());
            std::thread::spawn(move || {
                let (mut from, mut to) = (near, far);
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = match from.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let at = forwarded.load(Ordering::Relaxed);
                    let mut send = n;
                    match fault {
                        Fault::Flip(pos) if (at..at + n as u64).contains(&pos) => {
                            buf[(pos - at) as usize] ^= 0x01;
                        }
                        Fault::Die(limit) | Fault::Freeze(limit) if at + n as u64 >= limit => {
                            send = (limit - at) as usize;
                        }
                        _ => {}
                    }
                    if to.write_all(&buf[..send]).is_err() {
                        break;
                    }
                    forwarded.fetch_add(send as u64, Ordering::Relaxed);
                    if send < n
                        || matches!(fault, Fault::Die(l) | Fault::Freeze(l) if at + n as u64 >= l)
                    {
                        *struck.lock().unwrap() = Some(Instant::now());
                        match fault {
                            Fault::Die(_) => {
                                let _ = from.shutdown(Shutdown::Both);
                                let _ = to.shutdown(Shutdown::Both);
                            }
                            _ => {
                                frozen.store(true, Ordering::Relaxed);
                                while !stop.load(Ordering::Relaxed) {
                                    std::thread::sleep(Duration::from_millis(10));
                                }
                            }
                        }
                        return;
                    }
                }
                let _ = to.shutdown(Shutdown::Write);
            })
        };
        let to_sender = std::thread::spawn(move || {
            let (mut from, mut to) = (far2, near2);
            let stop = stop_sender;
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if frozen.load(Ordering::Relaxed) {
                    continue;
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            // A frozen path carries no close either: the sender must not hear that the
            // receiver gave up (both ends time out at the same moment, and either may be first).
            while frozen.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = to.shutdown(Shutdown::Write);
        });
        Self { forwarded, struck, stop, threads: vec![to_receiver, to_sender] }
    }

    /// Stops the relay and waits for its threads; returns the bytes it forwarded.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        self.forwarded.load(Ordering::Relaxed)
    }
}

/// `n` streams, those in `faulty` through a relay with their fault.
fn streams_with_relays(
    n: u64,
    seed: u64,
    config: StreamConfig,
    faulty: &[(usize, Fault)],
) -> ((Vec<StreamParams>, Vec<StreamParams>), Vec<Relay>) {
    let (mut senders, receivers) = streams(n, seed, config);
    let mut relays = Vec::new();
    for &(i, fault) in faulty {
        // The sender's end now talks to the relay; the receiver's old peer becomes the
        // relay's far side.
        let (s_end, near) = connected();
        let far = std::mem::replace(&mut senders[i].stream, s_end);
        relays.push(Relay::start(near, far, fault));
    }
    ((senders, receivers), relays)
}

#[test]
fn a_stream_shut_down_mid_way_hands_its_pieces_to_the_others() {
    cut_stream("cut_stream", None, Growth::Fixed, 1);
}

#[test]
fn a_stream_shut_down_mid_way_hands_its_compressed_pieces_to_the_others() {
    cut_stream("cut_stream_compressed", Some(3), Growth::Fixed, 1);
}

#[test]
fn the_one_stream_carrying_data_shut_down_mid_way_hands_over_to_an_idle_one() {
    // Stream 0 alone carries data; when it dies, stream 1 takes its pieces and stream 2 stays
    // idle.
    cut_stream("cut_carrying_stream", None, Growth::Single, 0);
}

/// Three streams, `growth` deciding which carry data; stream `cut`'s connection is shut down
/// after 3 MB, or 300 kB with compression (the text pieces shrink to a fifth: a stream that
/// drew mostly text chunks carried 1.1 to 1.6 MB in all and finished before a relay dying at 3
/// MB, 3 runs of 6).
fn cut_stream(test: &str, compress: Option<i32>, growth: Growth, cut: usize) {
    let _serial = serial();
    let seed = seed(test, 39);
    let len = 12 * sluice::datapath::CHUNK_BYTES as usize;
    let data = if compress.is_some() { mixed_content(len, seed) } else { content(len, seed) };
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &data);
    let dst = file_with(&dir, "dst", &vec![0u8; len]);
    let die_after = if compress.is_some() { 300_000 } else { 3_000_000 };
    let config = StreamConfig { growth, ..config(2) };
    let (ends, relays) = streams_with_relays(3, seed, config, &[(cut, Fault::Die(die_after))]);
    let mut job = Job::whole(&src, &dst, 0..len as u64);
    job.compress = compress;
    let no = AtomicBool::new(false);
    let (s, r) = run_pair(ends, &job, (&no, &no), &never);
    let forwarded: u64 = relays.into_iter().map(Relay::finish).sum();
    let sent = s.result.unwrap();
    let received = r.result.unwrap();
    println!("{test}: relay forwarded {forwarded}");
    println!("{test}: sender {sent:?}");
    println!("{test}: receiver {received:?}");
    assert_eq!(forwarded, die_after, "stream {cut} finished before its connection was cut");
    assert_eq!((sent.channels, sent.lost_channels), (3, 1), "the sender lost stream {cut} alone");
    assert_eq!((received.channels, received.lost_channels), (3, 1), "so did the receiver");
    let carrying = if growth == Growth::Single { 2 } else { 3 };
    assert_eq!((sent.carrying, received.carrying), (carrying, carrying));
    assert_eq!((sent.bytes, received.bytes), (len as u64, len as u64));
    let mut got = vec![0u8; len];
    dst.read_exact_at(&mut got, 0).unwrap();
    assert!(got == data, "the received file differs");
    assert_eq!(r.hashes, Some(vec![blake3::hash(&data)]));
}

#[test]
fn every_stream_cut_fails_both_ends_and_leaves_no_wrong_byte() {
    let _serial = serial();
    let seed = seed("all_cut", 40);
    let len = 16usize << 20;
    let data = content(len, seed);
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &data);
    let dst = file_with(&dir, "dst", &vec![0xEEu8; len]);
    let faults = [(0, Fault::Die(1_000_000)), (1, Fault::Die(2_500_001))];
    let (ends, relays) = streams_with_relays(2, seed, config(2), &faults);
    let no = AtomicBool::new(false);
    let started = Instant::now();
    let (s, r) = run_pair(ends, &Job::whole(&src, &dst, 0..len as u64), (&no, &no), &never);
    relays.into_iter().for_each(|relay| {
        relay.finish();
    });
    println!("all_cut: sender {:?}", s.result);
    println!("all_cut: receiver {:?}", r.result);
    assert!(s.result.is_err() && r.result.is_err());
    assert!(r.hashes.is_none());
    // Cut connections are noticed at once, not after the idle timeout.
    assert!(started.elapsed() < Duration::from_millis(1_500), "{:?}", started.elapsed());
    let (_, last) = r.progress.last().unwrap();
    assert!(last.bytes > 0 && last.bytes < len as u64, "{last:?}");
    no_wrong_byte(&std::fs::read(dir.path().join("dst")).unwrap(), &data, 0xEE);
}

#[test]
fn a_flipped_byte_on_the_wire_fails_the_stream_and_leaves_no_wrong_byte() {
    let _serial = serial();
    let seed = seed("flipped_byte", 41);
    let len = 8usize << 20;
    let data = content(len, seed);
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &data);
    let dst = file_with(&dir, "dst", &vec![0xEEu8; len]);
    // Inside the payload of the first or second data record.
    let flip_at = 100_000 + seed % 300_000;
    let (ends, relays) = streams_with_relays(1, seed, config(2), &[(0, Fault::Flip(flip_at))]);
    let no = AtomicBool::new(false);
    let started = Instant::now();
    let (s, r) = run_pair(ends, &Job::whole(&src, &dst, 0..len as u64), (&no, &no), &never);
    relays.into_iter().for_each(|relay| {
        relay.finish();
    });
    println!("flipped_byte: byte {flip_at}: sender {:?}", s.result);
    println!("flipped_byte: receiver {:?}", r.result);
    match &r.result {
        Err(e @ DataError::Stream(why)) if why.contains("failed authentication") => {
            println!("flipped_byte: the receiver says: {e}");
        }
        other => panic!("expected an authentication failure, got {other:?}"),
    }
    match &s.result {
        Err(e @ DataError::Stream(why)) if why.contains("stopped on an error") => {
            println!("flipped_byte: the sender says: {e}");
        }
        other => panic!("expected the receiver's word, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_millis(1_500), "noticed at once");
    let got = std::fs::read(dir.path().join("dst")).unwrap();
    no_wrong_byte(&got, &data, 0xEE);
    assert_eq!(got[flip_at as usize - 100], 0xEE, "the record with the flipped byte was written");
}

#[test]
fn a_short_source_fails_the_sender_with_a_file_error_and_the_receiver_hears_of_it() {
    let _serial = serial();
    let seed = seed("short_source", 47);
    let dir = tempfile::tempdir().unwrap();
    let data = content(3_000_000, seed);
    let src = file_with(&dir, "src", &data);
    let dst = file_with(&dir, "dst", &vec![0xEEu8; 10_000_000]);
    let no = AtomicBool::new(false);
    let started = Instant::now();
    let job = Job::whole(&src, &dst, 0..10_000_000);
    let (s, r) = run_pair(streams(2, seed, config(5)), &job, (&no, &no), &never);
    println!("short_source: sender {:?}", s.result);
    println!("short_source: receiver {:?}", r.result);
    match s.result {
        Err(DataError::File(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
        other => panic!("expected a file error, got {other:?}"),
    }
    match &r.result {
        Err(DataError::Stream(why)) if why.contains("stopped on an error") => {}
        other => panic!("expected the sender's word, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_millis(1_500), "noticed at once");
    // What did arrive is the file's real bytes, never the zeros of a failed read.
    let got = std::fs::read(dir.path().join("dst")).unwrap();
    let mut padded = data.clone();
    padded.resize(got.len(), 0xEE);
    no_wrong_byte(&got, &padded, 0xEE);
}

/// A rate-capped transfer over two streams with one end cancelled at its first progress
/// report; both ends have a 5 s idle timeout. Returns (cancelled end, other end, cancel time).
fn cancel_mid_way(test: &str, cancel_sender: bool, default_seed: u64) -> (End, End, Instant) {
    let seed = seed(test, default_seed);
    let len = 32usize << 20;
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &content(len, seed));
    let dst = file_with(&dir, "dst", &vec![0u8; len]);
    // 50 Mbit/s: the transfer takes ~5 s, so it is surely mid-way at the first report.
    let capped = StreamConfig { rate_bps: 50_000_000, ..config(5) };
    let (s_flag, r_flag) = (AtomicBool::new(false), AtomicBool::new(false));
    let cancel = CancelAt {
        sender: cancel_sender,
        flag: if cancel_sender { &s_flag } else { &r_flag },
        at_us: AtomicU64::new(0),
        epoch: Instant::now(),
    };
    let observe = |is_sender: bool, p: Progress| cancel.observe(is_sender, p);
    let job = Job::whole(&src, &dst, 0..len as u64);
    let (s, r) = run_pair(streams(2, seed, capped), &job, (&s_flag, &r_flag), &observe);
    let at = cancel.at();
    if cancel_sender { (s, r, at) } else { (r, s, at) }
}

/// The cancelled end returns `Cancelled` at once; the other hears of it at once (not after its
/// idle timeout) and stops short.
fn check_cancelled(test: &str, cancelled: &End, other: &End, at: Instant) {
    assert!(matches!(cancelled.result, Err(DataError::Cancelled)), "{:?}", cancelled.result);
    assert!(cancelled.ended - at < Duration::from_millis(500), "cancel took too long");
    let waited = other.ended - at;
    println!("{test}: the other end returned {waited:?} after the cancel: {:?}", other.result);
    match &other.result {
        Err(DataError::Stream(why)) if why.contains("the peer cancelled") => {}
        other => panic!("expected the peer's cancel, got {other:?}"),
    }
    assert!(waited < Duration::from_millis(1_500), "the other end waited {waited:?}");
    let (_, last) = other.progress.last().unwrap();
    assert!(last.bytes > 0 && last.bytes < last.total, "{last:?}");
}

#[test]
fn a_cancelled_sender_returns_and_the_receiver_hears_of_it() {
    let _serial = serial();
    let (cancelled, other, at) = cancel_mid_way("cancelled_sender", true, 42);
    check_cancelled("cancelled_sender", &cancelled, &other, at);
}

#[test]
fn a_cancelled_receiver_returns_and_the_sender_hears_of_it() {
    let _serial = serial();
    let (cancelled, other, at) = cancel_mid_way("cancelled_receiver", false, 43);
    check_cancelled("cancelled_receiver", &cancelled, &other, at);
}

#[test]
fn a_peer_gone_silent_is_noticed_within_the_idle_timeout() {
    // The path freezes mid-way, connections open: neither end hears anything more.
    let _serial = serial();
    let seed = seed("silent", 44);
    let len = 16usize << 20;
    let data = content(len, seed);
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &data);
    let dst = file_with(&dir, "dst", &vec![0xEEu8; len]);
    let (ends, relays) = streams_with_relays(1, seed, config(2), &[(0, Fault::Freeze(2_000_000))]);
    let struck = relays[0].struck.clone();
    let no = AtomicBool::new(false);
    let (s, r) = run_pair(ends, &Job::whole(&src, &dst, 0..len as u64), (&no, &no), &never);
    relays.into_iter().for_each(|relay| {
        relay.finish();
    });
    let at = struck.lock().unwrap().expect("the relay froze");
    for (end, which) in [(&s, "sender"), (&r, "receiver")] {
        let waited = end.ended - at;
        println!("silent: the {which} gave up {waited:?} after the path froze: {:?}", end.result);
        assert!(matches!(end.result, Err(DataError::PeerSilent(2))), "{which}: {:?}", end.result);
        assert!(waited > Duration::from_millis(1_500), "{which} gave up before the idle timeout");
        assert!(waited < Duration::from_millis(3_500), "{which} did not notice in time");
    }
    no_wrong_byte(&std::fs::read(dir.path().join("dst")).unwrap(), &data, 0xEE);
}

#[test]
fn a_peer_that_never_speaks_is_noticed_within_the_idle_timeout() {
    // Each end alone, its peer's socket connected but never read or written.
    let _serial = serial();
    let seed = seed("never_speaks", 45);
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &content(200_000, seed));
    let dst = file_with(&dir, "dst", b"");
    let no = AtomicBool::new(false);
    let (sender, unread) = streams(1, seed, config(2));
    let started = Instant::now();
    let sent =
        send_streams(sender, &src, std::slice::from_ref(&(0..200_000)), None, &mut |_| {}, &no);
    let sender_waited = started.elapsed();
    drop(unread);
    let (unwritten, receiver) = streams(1, seed, config(2));
    let started = Instant::now();
    let received =
        receive_streams(receiver, &dst, 0..200_000, &[], vec![200_000], &mut |_| {}, &|_| {}, &no);
    let receiver_waited = started.elapsed();
    drop(unwritten);
    println!("never_speaks: sender {sent:?} after {sender_waited:?}");
    println!("never_speaks: receiver {received:?} after {receiver_waited:?}");
    assert!(matches!(sent, Err(DataError::PeerSilent(2))));
    assert!(matches!(received, Err(DataError::PeerSilent(2))));
    for waited in [sender_waited, receiver_waited] {
        assert!(waited > Duration::from_millis(1_900) && waited < Duration::from_millis(3_500));
    }
    assert_eq!(std::fs::metadata(dir.path().join("dst")).unwrap().len(), 0);
}

/// The benchmark: moves `SLUICE_BENCH_BYTES` (default 1 GiB) of seeded bytes from a file in
/// `SLUICE_BENCH_DIR` (default `/dev/shm`) to another there over loopback, with
/// `SLUICE_BENCH_TRANSPORT` `tcp` (default) or `udp` over `SLUICE_BENCH_STREAMS` streams or
/// channels (default 4), and prints the transfer's own time. `SLUICE_BENCH_RIGHT_SIZE=0` leaves
/// the TCP buffers to the kernel's tuning alone. The source is made once and kept
/// (`sluice-bench-<bytes>.src`, with its BLAKE3 beside it); the target is removed after.
///
/// `cargo test --test datapath_tcp -- --ignored --nocapture loopback_throughput`
#[test]
#[ignore = "a benchmark: 1 GiB through tmpfs"]
fn loopback_throughput() {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let bytes: u64 = var("SLUICE_BENCH_BYTES", &(1u64 << 30).to_string()).parse().unwrap();
    let dir = std::path::PathBuf::from(var("SLUICE_BENCH_DIR", "/dev/shm"));
    let transport = var("SLUICE_BENCH_TRANSPORT", "tcp");
    let n: u64 = var("SLUICE_BENCH_STREAMS", "4").parse().unwrap();
    let seed = seed("loopback_throughput", 46);
    let src_path = dir.join(format!("sluice-bench-{bytes}.src"));
    let hash_path = dir.join(format!("sluice-bench-{bytes}.blake3"));
    if !hash_path.exists() {
        let mut file = File::create(&src_path).unwrap();
        let mut hasher = blake3::Hasher::new();
        let block = 64u64 << 20;
        for i in 0..bytes.div_ceil(block) {
            let part = content(block.min(bytes - i * block) as usize, seed + i);
            hasher.update(&part);
            file.write_all(&part).unwrap();
        }
        std::fs::write(&hash_path, hasher.finalize().to_hex().as_bytes()).unwrap();
    }
    let expected = std::fs::read_to_string(&hash_path).unwrap();
    let src = File::open(&src_path).unwrap();
    let dst_path = dir.join(format!("sluice-bench-{}.dst", std::process::id()));
    let dst = File::options().read(true).write(true).create_new(true).open(&dst_path).unwrap();
    let no = AtomicBool::new(false);
    let probes = Mutex::new(None);
    let started = Instant::now();
    let (sent, received) = std::thread::scope(|s| {
        if transport == "udp" {
            let (senders, receivers) = udp_channels(n, seed);
            let r = s.spawn(|| {
                sluice::datapath::receive_file(receivers, &dst, 0..bytes, &mut |_| {}, &no)
                    .map(|r| (r.report, r.blake3))
            });
            let sent = sluice::datapath::send_file(senders, &src, 0..bytes, &mut |_| {}, &no);
            (sent, r.join().unwrap())
        } else {
            let right_size = var("SLUICE_BENCH_RIGHT_SIZE", "1") != "0";
            let (senders, receivers) = streams(n, seed, StreamConfig { right_size, ..config(10) });
            // Stream 0's ends, to read back the buffers in effect at the end.
            let probe = |p: &StreamParams| p.stream.try_clone().unwrap();
            *probes.lock().unwrap() = Some((probe(&senders[0]), probe(&receivers[0])));
            let r = s.spawn(|| {
                receive_streams(
                    receivers,
                    &dst,
                    0..bytes,
                    &[],
                    vec![bytes],
                    &mut |_| {},
                    &|_| {},
                    &no,
                )
                .map(|r| (r.report, r.hashes[0]))
            });
            let sent = send_streams(
                senders,
                &src,
                std::slice::from_ref(&(0..bytes)),
                None,
                &mut |_| {},
                &no,
            );
            (sent, r.join().unwrap())
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    std::fs::remove_file(&dst_path).unwrap();
    let (report, hash) = received.unwrap();
    let sent = sent.unwrap();
    assert_eq!(hash.to_hex().as_str(), expected.trim(), "the received bytes differ");
    // The kernel's figures (twice the usable bytes) of stream 0's buffers at the end.
    let buffers = probes.into_inner().unwrap().map(|(s, r)| {
        use rustix::net::sockopt;
        (
            sockopt::socket_send_buffer_size(&s).unwrap(),
            sockopt::socket_recv_buffer_size(&r).unwrap(),
        )
    });
    println!(
        "bench transport={transport} streams={n} bytes={bytes} seconds={seconds:.3} \
         gbit_per_s={:.2} lost={} notice={:?} stream0_sndbuf_rcvbuf={buffers:?}",
        bytes as f64 * 8.0 / seconds / 1e9,
        sent.lost_channels + report.lost_channels,
        report.buffer_notice.or(sent.buffer_notice),
    );
}

/// `n` UDP data channels with the session's default settings, both ends on loopback.
fn udp_channels(
    n: u64,
    seed: u64,
) -> (Vec<sluice::datapath::ChannelParams>, Vec<sluice::datapath::ChannelParams>) {
    use sluice::datapath::ChannelParams;
    (0..n)
        .map(|i| {
            let (s_keys, r_keys) = keys(seed.wrapping_add(i * 7919));
            let bind = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let (s_sock, r_sock) = (bind(), bind());
            let (s_addr, r_addr) = (s_sock.local_addr().unwrap(), r_sock.local_addr().unwrap());
            let config = sluice_proto::config::ChannelConfig {
                initial_dsn: (i * 1000) as u32,
                seed: seed + i,
                ..sluice::session::default_channel_config()
            };
            (
                ChannelParams {
                    config: config.clone(),
                    keys: s_keys,
                    socket: s_sock,
                    peer: r_addr,
                },
                ChannelParams { config, keys: r_keys, socket: r_sock, peer: s_addr },
            )
        })
        .unzip()
}
