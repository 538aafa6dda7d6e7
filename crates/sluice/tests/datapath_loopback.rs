//! Data channels over real UDP sockets on loopback: exact bytes at several sizes over one and
//! several channels, repair through a seeded lossy relay, a channel whose path dies mid-way,
//! peer silence within the idle timeout (and a peer never heard at all), and cancellation.
//!
//! Every test prints its seed; `SLUICE_TEST_SEED=<n>` replays one. The tests run one at a time
//! (a lock), because each spins a pacing thread and the machine may have two cores. No test
//! asserts a speed: time bounds are liveness checks with generous slack.

#![allow(clippy::print_stdout)] // tests print their seeds and results

#[path = "common/data.rs"]
mod data;

use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice::datapath::{
    ChannelParams, ChannelReport, DataError, Progress, REAL_TIME_BURST_PKTS, receive_file, send,
};
use sluice_proto::cc::CcKind;
use sluice_proto::config::ChannelConfig;
use sluice_proto::pmtu::BASE_PACKET_SIZE;
use sluice_proto::rng::Rng;
use sluice_proto::wire::{Header, Kind};

use data::{CancelAt, content, file_with, keys, mixed_content, seed, serial};

fn config(seed: u64) -> ChannelConfig {
    ChannelConfig {
        cc: CcKind::Adaptive,
        max_burst_pkts: REAL_TIME_BURST_PKTS,
        idle_timeout_us: 10_000_000,
        seed,
        ..ChannelConfig::default()
    }
}

fn bind() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

fn addr(socket: &UdpSocket) -> SocketAddr {
    socket.local_addr().unwrap()
}

/// What one end did: its result, its progress reports and when it returned.
struct End {
    result: Result<ChannelReport, DataError>,
    /// The receiver's BLAKE3 of the range as written (`None` for the sender or a failure).
    blake3: Option<blake3::Hash>,
    progress: Vec<(Instant, Progress)>,
    /// Just before the datapath started.
    started: Instant,
    ended: Instant,
}

/// Runs both ends on their own threads until both return. `on_progress` sees each end's
/// reports (sender: `true`) and may set that end's cancel flag.
fn run_pair(
    ends: (Vec<ChannelParams>, Vec<ChannelParams>),
    src: &File,
    dst: &File,
    range: Range<u64>,
    cancel_sender: &AtomicBool,
    cancel_receiver: &AtomicBool,
    on_progress: &(dyn Fn(bool, Progress) + Sync),
) -> (End, End) {
    let cancel = (cancel_sender, cancel_receiver);
    run_pair_compressed(ends, src, dst, range, None, cancel, on_progress)
}

/// [`run_pair`] with the sender compressing at zstd level `compress`.
fn run_pair_compressed(
    (sender, receiver): (Vec<ChannelParams>, Vec<ChannelParams>),
    src: &File,
    dst: &File,
    range: Range<u64>,
    compress: Option<i32>,
    (cancel_sender, cancel_receiver): (&AtomicBool, &AtomicBool),
    on_progress: &(dyn Fn(bool, Progress) + Sync),
) -> (End, End) {
    let run = |is_sender: bool, params: Vec<ChannelParams>, file: &File, cancel: &AtomicBool| {
        let started = Instant::now();
        let mut progress = Vec::new();
        let mut note = |p: Progress| {
            progress.push((Instant::now(), p));
            on_progress(is_sender, p);
        };
        let mut blake3 = None;
        let result = if is_sender {
            send(params, file, std::slice::from_ref(&range), compress, &mut note, cancel)
        } else {
            receive_file(params, file, range.clone(), &mut note, cancel).map(|received| {
                blake3 = Some(received.blake3);
                received.report
            })
        };
        End { result, blake3, progress, started, ended: Instant::now() }
    };
    let run = &run;
    std::thread::scope(|s| {
        let r = s.spawn(move || run(false, receiver, dst, cancel_receiver));
        let snd = s.spawn(move || run(true, sender, src, cancel_sender));
        (snd.join().unwrap(), r.join().unwrap())
    })
}

/// Two ends talking directly over one channel.
fn direct(
    sender_config: ChannelConfig,
    receiver_config: ChannelConfig,
    seed: u64,
) -> (Vec<ChannelParams>, Vec<ChannelParams>) {
    direct_channels(1, sender_config, receiver_config, seed)
}

/// Two ends talking directly over `n` channels (keys differ per channel).
fn direct_channels(
    n: u64,
    sender_config: ChannelConfig,
    receiver_config: ChannelConfig,
    seed: u64,
) -> (Vec<ChannelParams>, Vec<ChannelParams>) {
    (0..n)
        .map(|i| {
            let (s_keys, r_keys) = keys(seed.wrapping_add(i * 7919));
            let (s_sock, r_sock) = (bind(), bind());
            let (s_addr, r_addr) = (addr(&s_sock), addr(&r_sock));
            let config =
                |c: &ChannelConfig| ChannelConfig { initial_dsn: (i * 1000) as u32, ..c.clone() };
            (
                ChannelParams {
                    config: config(&sender_config),
                    keys: s_keys,
                    socket: s_sock,
                    peer: r_addr,
                },
                ChannelParams {
                    config: config(&receiver_config),
                    keys: r_keys,
                    socket: r_sock,
                    peer: s_addr,
                },
            )
        })
        .unzip()
}

fn never(_: bool, _: Progress) {}

/// Moves `range` of a `len`-byte seeded file through a direct channel into a partial file and
/// checks the bytes: inside the range they match, outside they are untouched.
fn exact_transfer(test: &str, len: usize, range: Range<u64>, default_seed: u64) {
    exact_transfer_over(1, test, len, range, default_seed)
}

/// [`exact_transfer`] over `channels` channels.
fn exact_transfer_over(
    channels: u64,
    test: &str,
    len: usize,
    range: Range<u64>,
    default_seed: u64,
) {
    let _serial = serial();
    let seed = seed(test, default_seed);
    let dir = tempfile::tempdir().unwrap();
    let data = content(len, seed);
    let src = file_with(&dir, "src", &data);
    let filler = vec![0xEEu8; len];
    let dst = file_with(&dir, "dst", &filler);

    let no = AtomicBool::new(false);
    let ends = direct_channels(channels, config(seed), config(seed), seed);
    let (s, r) = run_pair(ends, &src, &dst, range.clone(), &no, &no, &never);
    let sent = s.result.as_ref().unwrap();
    let received = r.result.as_ref().unwrap();
    let total = range.end - range.start;
    println!("{test}: sender {sent:?}");
    println!("{test}: receiver {received:?}");
    assert_eq!(sent.bytes, total);
    assert_eq!(received.bytes, total);
    assert_eq!(received.rejected_pkts, 0);
    data::check_progress(&s.progress, s.started, total);
    data::check_progress(&r.progress, r.started, total);
    assert_eq!(s.progress.last().unwrap().1.bytes, total);
    assert_eq!(r.progress.last().unwrap().1.bytes, total);

    let mut expected = filler;
    let (lo, hi) = (range.start as usize, range.end as usize);
    expected[lo..hi].copy_from_slice(&data[lo..hi]);
    // The receiver hashed the range as it wrote it.
    assert_eq!(r.blake3, Some(blake3::hash(&data[lo..hi])));
    let got = std::fs::read(dir.path().join("dst")).unwrap();
    assert!(got == expected, "the received file differs");
}

#[test]
fn an_empty_range_returns_at_once_without_packets() {
    let _serial = serial();
    let seed = seed("empty", 11);
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", b"");
    let dst = file_with(&dir, "dst", b"");
    let (sender, receiver) = direct(config(seed), config(seed), seed);
    let s_probe = sender[0].socket.try_clone().unwrap();
    let r_probe = receiver[0].socket.try_clone().unwrap();
    let no = AtomicBool::new(false);
    let started = Instant::now();
    let (s, r) = run_pair((sender, receiver), &src, &dst, 0..0, &no, &no, &never);
    assert!(started.elapsed() < Duration::from_secs(1), "empty ranges must not wait");
    assert_eq!(s.result.unwrap().bytes, 0);
    assert_eq!(r.result.unwrap().bytes, 0);
    assert_eq!(r.blake3, Some(blake3::hash(b"")));
    assert_eq!(s.progress.len(), 1);
    assert_eq!(r.progress.len(), 1);
    for probe in [s_probe, r_probe] {
        probe.set_nonblocking(true).unwrap();
        let err = probe.recv_from(&mut [0u8; 2048]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "a packet was sent");
    }
}

#[test]
fn one_byte_arrives() {
    exact_transfer("one_byte", 1, 0..1, 12);
}

#[test]
fn one_mib_and_one_byte_arrive_exactly() {
    let len = (1 << 20) + 1;
    exact_transfer("one_mib_plus_one", len, 0..len as u64, 13);
}

#[test]
fn a_middle_range_moves_only_that_range() {
    exact_transfer("middle_range", 3 << 20, 4097..(2 << 20) + 5, 14);
}

#[test]
fn sixty_four_mib_arrive_exactly() {
    let len = 64 << 20;
    exact_transfer("sixty_four_mib", len, 0..len as u64, 15);
}

/// What the relay did, per direction (0: sender to receiver, 1: back).
#[derive(Debug, Default)]
struct RelayStats {
    forwarded: [u64; 2],
    dropped: [u64; 2],
    reordered: [u64; 2],
}

/// A seeded lossy link between two loopback sockets: drops `loss` of the datagrams each way and
/// holds back `reorder` of them until one to three later ones have passed. The first NAK is
/// always dropped. ACKs are dropped like everything else (a lost final ACK is recovered: the
/// receiver answers the sender's probe, see `datapath_proto_tail_ack.rs`).
struct Relay {
    /// Faces the sender (its peer address) and the receiver.
    near: UdpSocket,
    far: UdpSocket,
    sender: SocketAddr,
    receiver: SocketAddr,
    seed: u64,
    loss: f64,
    reorder: f64,
    /// After forwarding this many datagrams toward the receiver, the relay closes its sockets:
    /// the channel's path is dead from then on (datagrams to it draw ICMP port unreachable).
    die_after_pkts: Option<u64>,
}

impl Relay {
    fn run(self, stop: &AtomicBool) -> RelayStats {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let mut rng = Rng::new(self.seed);
        let mut stats = RelayStats::default();
        let mut held: [Option<(Vec<u8>, u32)>; 2] = [None, None];
        let mut nak_seen = false;
        let mut buf = vec![0u8; 65_536];
        self.near.set_nonblocking(true).unwrap();
        self.far.set_nonblocking(true).unwrap();
        let sockets = [&self.near, &self.far];
        let targets = [self.receiver, self.sender];
        let out = [&self.far, &self.near];
        while !stop.load(Ordering::Relaxed) {
            if self.die_after_pkts.is_some_and(|n| stats.forwarded[0] >= n) {
                break;
            }
            let mut idle = true;
            for dir in 0..2 {
                for _ in 0..64 {
                    let Ok((len, _)) = sockets[dir].recv_from(&mut buf) else { break };
                    idle = false;
                    let datagram = &buf[..len];
                    let kind = Header::parse(datagram).map(|h| h.kind).ok();
                    // The first NAK always goes: the periodic loss report must repair it.
                    let first_nak = dir == 1 && kind == Some(Kind::Nak) && !nak_seen;
                    nak_seen |= first_nak;
                    if first_nak || rng.chance(self.loss) {
                        stats.dropped[dir] += 1;
                        continue;
                    }
                    if held[dir].is_none() && rng.chance(self.reorder) {
                        held[dir] = Some((datagram.to_vec(), 1 + rng.below(3) as u32));
                        stats.reordered[dir] += 1;
                        continue;
                    }
                    let _ = out[dir].send_to(datagram, targets[dir]);
                    stats.forwarded[dir] += 1;
                    if let Some((bytes, left)) = &mut held[dir] {
                        *left -= 1;
                        if *left == 0 {
                            let _ = out[dir].send_to(bytes, targets[dir]);
                            stats.forwarded[dir] += 1;
                            held[dir] = None;
                        }
                    }
                }
            }
            if idle {
                // A quiet link releases what it holds (reordered, not lost), then waits.
                for dir in 0..2 {
                    if let Some((bytes, _)) = held[dir].take() {
                        let _ = out[dir].send_to(&bytes, targets[dir]);
                        stats.forwarded[dir] += 1;
                    }
                }
                let mut fds =
                    [PollFd::new(&self.near, PollFlags::IN), PollFd::new(&self.far, PollFlags::IN)];
                let timeout = Timespec { tv_sec: 0, tv_nsec: 2_000_000 };
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
            }
        }
        stats
    }
}

#[test]
fn a_lossy_reordering_relay_is_repaired_over_real_sockets() {
    lossy_relay("lossy_relay", None);
}

#[test]
fn compressed_frames_through_a_lossy_reordering_relay_arrive_exactly() {
    lossy_relay("lossy_relay_compressed", Some(3));
}

/// A transfer through a relay that drops 2 % each way and reorders 1 %.
fn lossy_relay(test: &str, compress: Option<i32>) {
    let _serial = serial();
    let seed = seed(test, 16);
    // Long enough for a few hundred ACKs and NAKs, so the reverse direction loses some too.
    let len = 24 << 20;
    let dir = tempfile::tempdir().unwrap();
    let data = if compress.is_some() { mixed_content(len, seed) } else { content(len, seed) };
    let src = file_with(&dir, "src", &data);
    let dst = file_with(&dir, "dst", &vec![0u8; len]);

    let (s_keys, r_keys) = keys(seed);
    let (s_sock, r_sock, near, far) = (bind(), bind(), bind(), bind());
    let cfg = config(seed);
    let relay = Relay {
        sender: addr(&s_sock),
        receiver: addr(&r_sock),
        seed,
        loss: 0.02,
        reorder: 0.01,
        die_after_pkts: None,
        near,
        far,
    };
    let ends = (
        vec![ChannelParams {
            config: cfg.clone(),
            keys: s_keys,
            socket: s_sock,
            peer: addr(&relay.near),
        }],
        vec![ChannelParams { config: cfg, keys: r_keys, socket: r_sock, peer: addr(&relay.far) }],
    );
    let stop = AtomicBool::new(false);
    let no = AtomicBool::new(false);
    let (s, r, stats) = std::thread::scope(|scope| {
        let relay = scope.spawn(|| relay.run(&stop));
        let t0 = Instant::now();
        let show = |is_sender: bool, p: Progress| {
            if is_sender && std::env::var("SLUICE_TEST_TRACE").is_ok() {
                println!("{test}: {:?} sender acked {} bytes", t0.elapsed(), p.bytes);
            }
        };
        let range = 0..len as u64;
        let (s, r) = run_pair_compressed(ends, &src, &dst, range, compress, (&no, &no), &show);
        stop.store(true, Ordering::Relaxed);
        (s, r, relay.join().unwrap())
    });
    println!("{test}: relay {stats:?}");
    println!("{test}: sender {:?}", s.result);
    println!("{test}: receiver {:?}", r.result);
    let sent = s.result.unwrap();
    let received = r.result.unwrap();
    check_wire(compress, &sent, len);
    assert!(stats.dropped[0] > 0 && stats.dropped[1] > 0, "the relay must drop both ways");
    assert!(stats.reordered[0] > 0, "the relay must reorder data");
    assert!(sent.retransmitted_pkts > 0, "dropped data must be retransmitted");
    assert_eq!(sent.bytes, len as u64);
    assert_eq!(received.bytes, len as u64);
    let mut got = vec![0u8; len];
    dst.read_exact_at(&mut got, 0).unwrap();
    assert!(got == data, "the received file differs");
    assert_eq!(r.blake3, Some(blake3::hash(&data)));
}

/// Runs a rate-capped transfer and cancels one end (`cancel_sender`) at its first progress
/// report; the other end has a 2 s idle timeout. Returns (cancelled end, other end, cancel time).
fn cancel_mid_way(test: &str, cancel_sender: bool, default_seed: u64) -> (End, End, Instant) {
    let seed = seed(test, default_seed);
    let len = 32 << 20;
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &content(len, seed));
    let dst = file_with(&dir, "dst", &vec![0u8; len]);
    // 50 Mbit/s: the transfer takes ~5 s, so it is surely mid-way at the first report.
    let capped = ChannelConfig { rate_bps: 50_000_000, idle_timeout_us: 2_000_000, ..config(seed) };
    let (s_flag, r_flag) = (AtomicBool::new(false), AtomicBool::new(false));
    let cancel = CancelAt {
        sender: cancel_sender,
        flag: if cancel_sender { &s_flag } else { &r_flag },
        at_us: AtomicU64::new(0),
        epoch: Instant::now(),
    };
    let observe = |is_sender: bool, p: Progress| cancel.observe(is_sender, p);
    let ends = direct(capped.clone(), capped, seed);
    let (s, r) = run_pair(ends, &src, &dst, 0..len as u64, &s_flag, &r_flag, &observe);
    let at = cancel.at();
    if cancel_sender { (s, r, at) } else { (r, s, at) }
}

#[test]
fn a_silent_sender_is_noticed_within_the_idle_timeout() {
    let _serial = serial();
    let (cancelled, silent, at) = cancel_mid_way("silent_sender", true, 17);
    assert!(matches!(cancelled.result, Err(DataError::Cancelled)), "{:?}", cancelled.result);
    assert!(cancelled.ended - at < Duration::from_millis(500), "cancel took too long");
    let waited = silent.ended - at;
    println!("silent_sender: the receiver gave up {waited:?} after the sender stopped");
    assert!(matches!(silent.result, Err(DataError::PeerSilent(2))), "{:?}", silent.result);
    assert!(waited > Duration::from_millis(1_500), "gave up before the idle timeout");
    assert!(waited < Duration::from_millis(3_500), "did not notice within the idle timeout");
    // Progress stopped short, and the final report says so.
    let (_, last) = silent.progress.last().unwrap();
    assert!(last.bytes > 0 && last.bytes < last.total, "{last:?}");
}

#[test]
fn a_cancelled_receiver_returns_and_the_sender_notices() {
    let _serial = serial();
    let (cancelled, silent, at) = cancel_mid_way("cancelled_receiver", false, 18);
    assert!(matches!(cancelled.result, Err(DataError::Cancelled)), "{:?}", cancelled.result);
    assert!(cancelled.ended - at < Duration::from_millis(500), "cancel took too long");
    let waited = silent.ended - at;
    println!("cancelled_receiver: the sender gave up {waited:?} after the receiver stopped");
    assert!(matches!(silent.result, Err(DataError::PeerSilent(2))), "{:?}", silent.result);
    assert!(waited > Duration::from_millis(1_500), "gave up before the idle timeout");
    assert!(waited < Duration::from_millis(3_500), "did not notice within the idle timeout");
}

#[test]
fn an_end_that_never_hears_its_peer_says_nothing_got_through() {
    // Each end alone, its peer's socket bound but never read or written: what a blocked port or
    // a path MTU black hole looks like from either end. Both give up at the idle timeout with
    // the error that names those causes (and the packet size), not the one for a peer that
    // went quiet mid-way.
    let _serial = serial();
    let seed = seed("nothing_through", 23);
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &content(200_000, seed));
    let dst = file_with(&dir, "dst", b"");
    let quiet = ChannelConfig { idle_timeout_us: 2_000_000, ..config(seed) };
    // What the sender starts with, and the most the receiver can have waited for.
    let packet_bytes = quiet.packet_size.min(BASE_PACKET_SIZE);
    let no = AtomicBool::new(false);
    // The unused end's parameters hold its socket open until the other end is done.
    let (sender, unread) = direct(quiet.clone(), quiet.clone(), seed);
    let sent = send(sender, &src, std::slice::from_ref(&(0..200_000)), None, &mut |_| {}, &no);
    drop(unread);
    let (unwritten, receiver) = direct(quiet.clone(), quiet, seed);
    let received = receive_file(receiver, &dst, 0..200_000, &mut |_| {}, &no);
    drop(unwritten);
    for (end, result) in [("sender", sent.map(|_| ())), ("receiver", received.map(|_| ()))] {
        match result {
            Err(e @ DataError::NothingThrough { secs: 2, packet_bytes: p }) => {
                assert_eq!(p, packet_bytes, "{end}");
                println!("{end}: {e}");
            }
            other => panic!("{end}: expected NothingThrough after 2 s, got {other:?}"),
        }
    }
    assert_eq!(std::fs::metadata(dir.path().join("dst")).unwrap().len(), 0);
}

#[test]
fn a_short_source_file_fails_with_a_file_error() {
    let _serial = serial();
    let seed = seed("short_source", 19);
    let dir = tempfile::tempdir().unwrap();
    let src = file_with(&dir, "src", &content(100_000, seed));
    let dst = file_with(&dir, "dst", b"");
    let receiver_config = ChannelConfig { idle_timeout_us: 2_000_000, ..config(seed) };
    let ends = direct(config(seed), receiver_config, seed);
    let no = AtomicBool::new(false);
    let (s, r) = run_pair(ends, &src, &dst, 0..1_000_000, &no, &no, &never);
    match s.result {
        Err(DataError::File(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
        other => panic!("expected a file error, got {other:?}"),
    }
    assert!(matches!(r.result, Err(DataError::PeerSilent(2))), "{:?}", r.result);
    // What did arrive is the file's real bytes, never the zeros of a failed read.
    let got = std::fs::read(dir.path().join("dst")).unwrap();
    let data = content(100_000, seed);
    assert!(got.len() <= 100_000 && got[..] == data[..got.len()], "bytes past the read error");
}

#[test]
fn four_channels_move_a_file_exactly() {
    // 10 chunks and a tail over 4 channels: every channel takes several, first come first served.
    let len = 10 * sluice::datapath::CHUNK_BYTES as usize + 12_345;
    exact_transfer_over(4, "four_channels", len, 0..len as u64, 20);
}

#[test]
fn a_channel_whose_socket_dies_mid_way_hands_its_chunks_to_the_others() {
    dead_channel("dead_channel", None);
}

#[test]
fn a_dying_channel_hands_its_compressed_pieces_to_the_others() {
    dead_channel("dead_channel_compressed", Some(3));
}

/// With compression, the text parts must have gone as frames: fewer payload bytes than the
/// file's; without, exactly the file's.
fn check_wire(compress: Option<i32>, sent: &ChannelReport, len: usize) {
    match compress {
        Some(_) => assert!(sent.payload_bytes < len as u64 * 3 / 4, "{sent:?}"),
        None => assert_eq!(sent.payload_bytes, len as u64, "{sent:?}"),
    }
}

/// Three channels, one of which dies mid-way.
fn dead_channel(test: &str, compress: Option<i32>) {
    let _serial = serial();
    let seed = seed(test, 21);
    let len = 12 * sluice::datapath::CHUNK_BYTES as usize;
    let dir = tempfile::tempdir().unwrap();
    let data = if compress.is_some() { mixed_content(len, seed) } else { content(len, seed) };
    let src = file_with(&dir, "src", &data);
    let dst = file_with(&dir, "dst", &vec![0u8; len]);
    // Three channels, each end silent-tolerant for 2 s; channel 1 goes through a relay that
    // closes its sockets inside its first chunk: after 2000 datagrams (about 3 MB) of plain
    // data, or 150 of compressed: a text chunk of 4 MiB goes as a few hundred frames, and a
    // channel that draws only text chunks carried 1172 datagrams in all (seed 21), so at 2000
    // it finished before its relay died.
    let die_after = if compress.is_some() { 150 } else { 2_000 };
    let cfg = ChannelConfig { idle_timeout_us: 2_000_000, ..config(seed) };
    let (mut senders, mut receivers) = direct_channels(3, cfg.clone(), cfg, seed);
    let (near, far) = (bind(), bind());
    let relay = Relay {
        sender: addr(&senders[1].socket),
        receiver: addr(&receivers[1].socket),
        seed,
        loss: 0.0,
        reorder: 0.0,
        die_after_pkts: Some(die_after),
        near,
        far,
    };
    senders[1].peer = addr(&relay.near);
    receivers[1].peer = addr(&relay.far);
    let stop = AtomicBool::new(false);
    let no = AtomicBool::new(false);
    let (s, r, stats) = std::thread::scope(|scope| {
        let relay = scope.spawn(|| relay.run(&stop));
        let ends = (senders, receivers);
        let range = 0..len as u64;
        let (s, r) = run_pair_compressed(ends, &src, &dst, range, compress, (&no, &no), &never);
        stop.store(true, Ordering::Relaxed);
        (s, r, relay.join().unwrap())
    });
    println!("{test}: relay {stats:?}");
    assert!(stats.forwarded[0] >= die_after, "channel 1 finished before its relay died");
    let sent = s.result.unwrap();
    let received = r.result.unwrap();
    println!("{test}: sender {sent:?}");
    println!("{test}: receiver {received:?}");
    assert_eq!((sent.channels, sent.lost_channels), (3, 1), "the sender lost channel 1 alone");
    // The receiver's channel 1 counts as lost only if its idle timeout ran out before the
    // others completed the file: a race, so either is right.
    assert_eq!(received.channels, 3);
    assert!(received.lost_channels <= 1, "{received:?}");
    assert_eq!(sent.bytes, len as u64);
    assert_eq!(received.bytes, len as u64);
    let mut got = vec![0u8; len];
    dst.read_exact_at(&mut got, 0).unwrap();
    assert!(got == data, "the received file differs");
    assert_eq!(r.blake3, Some(blake3::hash(&data)));
}
