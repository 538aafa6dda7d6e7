//! Batch sends and receives over loopback: every byte, in order, with GSO, without it, and
//! split back by GRO.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::os::fd::AsRawFd;

use common::{
    assert_same, batch, ipv6_loopback_or_skip, pair, pair_on, recv_n, recv_n_from, send_all,
    skip_or_fail,
};
use sluice_udp::{MAX_BATCH_SEGMENTS, RecvBatch, Socket};

fn round_trip(tx: &Socket, rx: &Socket, seed: u64, count: usize, segment: usize, last: usize) {
    let want = batch(seed, count, segment, last);
    send_all(tx, &want, segment);
    let got = recv_n(rx, count);
    assert_same(&got, &want);
}

#[test]
fn batches_of_various_sizes_round_trip_in_order() {
    let (tx, rx) = pair();
    for (seed, &(count, segment)) in [
        (1, 1452),
        (2, 1452),
        (16, 1452),
        (44, 1452),
        (45, 1452),
        (63, 1452),
        (64, 1452),
        (64, 1200),
        (64, 100),
        (130, 1000),
        (7, 9000),
        (3, 20_000),
        (1, 65_507),
    ]
    .iter()
    .enumerate()
    {
        round_trip(&tx, &rx, seed as u64, count, segment, segment);
    }
}

#[test]
fn last_short_segment_arrives_short() {
    let (tx, rx) = pair();
    for (seed, &(count, segment, last)) in
        [(2, 1452, 1), (11, 1452, 100), (64, 1452, 1451), (64, 1000, 7), (5, 9000, 8999)]
            .iter()
            .enumerate()
    {
        round_trip(&tx, &rx, 100 + seed as u64, count, segment, last);
    }
}

#[test]
fn one_call_takes_a_whole_batch_of_small_datagrams() {
    let (tx, rx) = pair();
    let want = batch(7, MAX_BATCH_SEGMENTS, 1000, 1000);
    let data = want.concat();
    let taken = tx.send_batch(&data, 1000).unwrap();
    assert_eq!(taken, MAX_BATCH_SEGMENTS, "loopback takes the batch at once");
    assert_same(&recv_n(&rx, taken), &want);
}

#[test]
fn without_gso_sendmmsg_carries_the_batches() {
    let (tx, rx) = pair();
    tx.disable_gso();
    assert!(!tx.gso());
    assert_eq!(tx.max_segments(), MAX_BATCH_SEGMENTS);
    assert_eq!(tx.segments_per_call(1452), MAX_BATCH_SEGMENTS);
    for (seed, &(count, segment, last)) in
        [(1, 1452, 1452), (64, 1452, 1452), (64, 1452, 3), (200, 500, 499)].iter().enumerate()
    {
        round_trip(&tx, &rx, 200 + seed as u64, count, segment, last);
    }
    assert!(!tx.gso(), "GSO stays off");
}

#[test]
fn gso_reports_its_batch() {
    let (tx, _rx) = pair();
    if !tx.gso() {
        skip_or_fail("no UDP GSO on this kernel");
        return;
    }
    assert!(tx.max_segments() > 1 && tx.max_segments() <= MAX_BATCH_SEGMENTS);
    // 1452-byte segments: 45 would make a super-datagram above 64 KiB.
    assert_eq!(tx.segments_per_call(1452), 45.min(tx.max_segments()));
    assert_eq!(tx.segments_per_call(1000), 64.min(tx.max_segments()));
    assert_eq!(tx.segments_per_call(40_000), 1);
}

#[test]
fn gro_splits_into_exactly_the_sent_datagrams() {
    let (tx, rx) = pair();
    let want = batch(9, 40, 1000, 37);
    let data = want.concat();
    assert_eq!(tx.send_batch(&data, 1000).unwrap(), 40);
    let mut got = Vec::new();
    let mut messages = 0;
    let mut recv = RecvBatch::new();
    while got.len() < want.len() {
        let n = rx.recv_batch(&mut recv).unwrap();
        if n == 0 {
            rx.wait(false, 100_000).unwrap();
            continue;
        }
        messages += recv.messages();
        recv.datagrams(|d| got.push(d.to_vec()));
    }
    assert_same(&got, &want);
    if tx.gso() && rx.gro() {
        // Loopback hands a GSO super-datagram to a GRO socket whole: one message.
        assert_eq!(messages, 1, "one GRO message for one GSO send");
    } else {
        assert_eq!(messages, 40);
    }
}

#[test]
fn recv_batch_with_nothing_waiting_is_zero() {
    let (_tx, rx) = pair();
    let mut recv = RecvBatch::new();
    assert_eq!(rx.recv_batch(&mut recv).unwrap(), 0);
    assert_eq!(recv.messages(), 0);
    recv.datagrams(|_| panic!("no datagram expected"));
}

#[test]
fn datagrams_from_other_sources_are_kept() {
    let (tx, rx) = pair();
    let stranger = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let rx_addr = rx.socket().local_addr().unwrap();
    stranger.send_to(b"not the peer", rx_addr).unwrap();
    tx.send_batch(b"the peer", 8).unwrap();
    let got = recv_n_from(&rx, 2);
    assert_eq!(got[0].0, stranger.local_addr().unwrap());
    assert_eq!(got[0].1, b"not the peer");
    assert_eq!(got[1].0, tx.socket().local_addr().unwrap());
    assert_eq!(got[1].1, b"the peer");
}

#[test]
fn ipv6_loopback_round_trips() {
    if !ipv6_loopback_or_skip() {
        return;
    }
    let (tx, rx) = pair_on(IpAddr::V6(Ipv6Addr::LOCALHOST));
    round_trip(&tx, &rx, 300, 64, 1452, 10);
    tx.disable_gso();
    round_trip(&tx, &rx, 301, 64, 1452, 10);
}

#[test]
fn tiny_send_buffer_never_errors() {
    // The smallest buffers the kernel allows; nobody reads the receiver, so its queue fills and
    // overflows (silently, as UDP does) while the sender keeps going.
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let b_addr = b.local_addr().unwrap();
    let (tx, report) = Socket::new(a, b_addr, 1).unwrap();
    assert!(report.send_bytes >= 1 && report.send_bytes < 64 * 1024);
    let data = vec![0x5a; 64 * 1452];
    let mut would_block = 0;
    for _ in 0..200 {
        let taken = tx.send_batch(&data, 1452).expect("a full buffer is not an error");
        assert!(taken <= 64);
        if taken < 64 {
            would_block += 1;
        }
    }
    tx.disable_gso();
    for _ in 0..200 {
        let taken = tx.send_batch(&data, 1452).expect("a full buffer is not an error");
        assert!(taken <= 64);
        if taken < 64 {
            would_block += 1;
        }
    }
    // Loopback frees the send buffer as it hands a packet over, so it may never fill.
    eprintln!("{would_block} of 400 calls found the send buffer full");
}

/// In a private network namespace (root only) whose loopback holds packets in a slow queue, a
/// tiny send buffer fills for certain: `send_batch` then takes fewer datagrams, then none, and
/// never errors, with and without GSO.
#[test]
fn full_send_buffer_is_a_short_count_not_an_error() {
    common::in_private_netns(
        &[
            &["ip", "link", "set", "lo", "up"],
            &[
                "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "8kbit", "burst", "1600",
                "limit", "10000000",
            ],
        ],
        check_full_send_buffer,
    );
}

fn check_full_send_buffer() {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (tx, _) = Socket::new(a, b.local_addr().unwrap(), 1).unwrap();
    let data = vec![0x5a; 64 * 1452];
    for gso in [true, false] {
        if !gso {
            tx.disable_gso();
        }
        let mut short = false;
        let mut zero = false;
        for _ in 0..50 {
            let taken = tx.send_batch(&data, 1452).expect("a full buffer is not an error");
            assert!(taken <= 64);
            short |= taken < 64;
            zero |= taken == 0;
        }
        assert!(short && zero, "the send buffer filled (gso {gso})");
    }
}

/// A socket with UDP checksums off (`SO_NO_CHECK`) makes the kernel refuse GSO sends
/// (`EINVAL`), as a device that cannot segment would: the batch goes out through `sendmmsg`
/// instead, whole and in order, and GSO stays off for that socket.
#[test]
fn gso_refused_falls_back_to_sendmmsg_for_good() {
    let (tx, rx) = pair();
    if !tx.gso() {
        skip_or_fail("no UDP GSO on this kernel");
        return;
    }
    let on: libc::c_int = 1;
    // SAFETY: `setsockopt` reads `size_of::<c_int>()` bytes from a live `c_int` and writes
    // nothing; the descriptor is the test's own open socket.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            tx.socket().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_NO_CHECK");
    check_gso_refused(&tx, &rx);
}

fn check_gso_refused(tx: &Socket, rx: &Socket) {
    let want = batch(400, 40, 1452, 99);
    let data = want.concat();
    assert_eq!(tx.send_batch(&data, 1452).unwrap(), 40, "resent via sendmmsg");
    assert!(!tx.gso(), "GSO off after the device refused it");
    assert_eq!(tx.max_segments(), MAX_BATCH_SEGMENTS);
    assert_same(&recv_n(rx, 40), &want);
    // And it stays off: the next batch goes straight through sendmmsg.
    let want = batch(401, 64, 1452, 1452);
    send_all(tx, &want, 1452);
    assert!(!tx.gso());
    assert_same(&recv_n(rx, 64), &want);
}

#[test]
fn empty_and_bad_input() {
    let (tx, _rx) = pair();
    assert_eq!(tx.send_batch(&[], 1452).unwrap(), 0);
    assert_eq!(tx.send_batch(&[], 0).unwrap(), 0);
    let e = tx.send_batch(&[1, 2, 3], 0).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn socket_and_batch_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Socket>();
    send_sync::<RecvBatch>();
}

#[test]
fn every_datagram_carries_its_own_kernel_receive_time() {
    // Three datagrams 20 ms apart, read in one batch: each keeps the time it arrived, so the
    // first is at least 2 x 20 ms older than the last (sleeps never end early).
    let (tx, rx) = pair();
    // The kernel turns receive timestamps on system-wide lazily (a deferred work item) when the
    // first socket asks; a datagram that arrives before then is stamped when it is read. One
    // datagram through first, and a pause, so the timed ones below are stamped on arrival.
    assert_eq!(tx.send_batch(&[9; 100], 100).unwrap(), 1);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut batch = RecvBatch::new();
    assert_eq!(rx.recv_batch(&mut batch).unwrap(), 1);
    for i in 0..3u8 {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(tx.send_batch(&[i; 100], 100).unwrap(), 1);
    }
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(rx.recv_batch(&mut batch).unwrap(), 3);
    let mut ages = Vec::new();
    batch.datagrams_timed(|age_us, d| ages.push((d[0], age_us.expect("a kernel timestamp"))));
    assert_eq!(ages.iter().map(|a| a.0).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(ages[0].1 >= ages[1].1 + 19_000 && ages[1].1 >= ages[2].1 + 19_000, "{ages:?}");
    assert!(ages[2].1 >= 4_000, "the last arrived before the 5 ms pause: {ages:?}");
}
