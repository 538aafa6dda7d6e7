//! Helpers shared by the loopback tests: socket pairs, batch patterns, send-all and receive-n.

#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_udp::{RecvBatch, Socket};

#[path = "../../../../tools/testing/skip.rs"]
mod skip;
#[allow(unused_imports)] // not every test file skips
pub use skip::skip_or_fail;

/// Buffers the tests ask for: enough for a few 64-datagram batches in flight.
pub const BUFFER_BYTES: usize = 4 << 20;

/// A sender and a receiver on `ip` (loopback only), each toward the other.
pub fn pair_on(ip: IpAddr) -> (Socket, Socket) {
    let a = UdpSocket::bind((ip, 0)).expect("bind sender");
    let b = UdpSocket::bind((ip, 0)).expect("bind receiver");
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let (tx, _) = Socket::new(a, b_addr, BUFFER_BYTES).expect("sender socket");
    let (rx, _) = Socket::new(b, a_addr, BUFFER_BYTES).expect("receiver socket");
    (tx, rx)
}

/// A pair on 127.0.0.1.
pub fn pair() -> (Socket, Socket) {
    pair_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Whether this host has an IPv6 loopback; where it has none, what needs one is skipped (see
/// [`skip_or_fail`]).
#[track_caller]
pub fn ipv6_loopback_or_skip() -> bool {
    let there = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).is_ok();
    if !there {
        skip_or_fail("no IPv6 loopback here");
    }
    there
}

/// The byte at `pos` of datagram `index` in a batch made with `seed`: every byte depends on all
/// three, so a swapped, shifted or truncated datagram shows.
pub fn pattern(seed: u64, index: usize, pos: usize) -> u8 {
    let x = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((index as u64) << 20)
        .wrapping_add(pos as u64);
    let x = (x ^ (x >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x ^ (x >> 32)) as u8
}

/// `count` datagrams of `segment` bytes, the last `last` bytes long (`last <= segment`).
pub fn batch(seed: u64, count: usize, segment: usize, last: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let len = if i + 1 == count { last } else { segment };
            (0..len).map(|pos| pattern(seed, i, pos)).collect()
        })
        .collect()
}

/// Sends all of `datagrams` (all `segment` bytes but the last) with as few `send_batch` calls as
/// the socket allows, waiting for room when the kernel takes fewer. Returns the calls made.
pub fn send_all(tx: &Socket, datagrams: &[Vec<u8>], segment: usize) -> usize {
    let data: Vec<u8> = datagrams.concat();
    let mut sent = 0;
    let mut calls = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sent < datagrams.len() {
        assert!(Instant::now() < deadline, "send stalled at {sent}");
        let taken = tx.send_batch(&data[sent * segment..], segment).expect("send_batch");
        calls += 1;
        assert!(taken <= datagrams.len() - sent);
        if taken == 0 {
            tx.wait(true, 10_000).unwrap();
        }
        sent += taken;
    }
    calls
}

/// Receives until `n` datagrams have arrived (or a generous deadline passes, which fails).
pub fn recv_n(rx: &Socket, n: usize) -> Vec<Vec<u8>> {
    recv_n_from(rx, n).into_iter().map(|(_, d)| d).collect()
}

/// Like [`recv_n`], with each datagram's source.
pub fn recv_n_from(rx: &Socket, n: usize) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut batch = RecvBatch::new();
    let mut got = Vec::with_capacity(n);
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} datagrams arrived", got.len());
        let count = rx.recv_batch(&mut batch).expect("recv_batch");
        let before = got.len();
        batch.datagrams_from(|from, d| got.push((from, d.to_vec())));
        assert_eq!(got.len() - before, count, "count matches datagrams yielded");
        if count == 0 {
            rx.wait(false, 100_000).unwrap();
        }
    }
    got
}

/// Asserts `got` is exactly `want`, datagram by datagram and byte by byte.
pub fn assert_same(got: &[Vec<u8>], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len(), "datagram count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "length of datagram {i}");
        if let Some(pos) = g.iter().zip(w).position(|(a, b)| a != b) {
            panic!("datagram {i} differs at byte {pos}");
        }
    }
}

/// Runs `check` on a thread of its own inside a new network namespace, after running `setup`
/// (commands such as `ip link set lo up`) there. Needs root: elsewhere it skips (or fails, see
/// [`skip_or_fail`]) and returns false. Only that namespace's loopback is touched; it ends with
/// the thread.
#[track_caller]
pub fn in_private_netns(setup: &[&[&str]], check: fn()) -> bool {
    let setup: Vec<Vec<String>> =
        setup.iter().map(|cmd| cmd.iter().map(|s| s.to_string()).collect()).collect();
    let outcome = std::thread::spawn(move || {
        // SAFETY: only the network namespace is unshared, and only for this thread, which ends
        // with the check; the file descriptor table is not unshared, so the hazard
        // `unshare_unsafe` warns about (`FILES`) does not arise.
        #[allow(unsafe_code)]
        let unshared =
            unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) };
        if let Err(e) = unshared {
            return Err(format!("cannot make a network namespace ({e})"));
        }
        for cmd in &setup {
            // A child process inherits this thread's (new) namespace.
            match Command::new(&cmd[0]).args(&cmd[1..]).status() {
                Ok(status) if status.success() => {}
                other => return Err(format!("{cmd:?} failed: {other:?}")),
            }
        }
        check();
        Ok(())
    })
    .join()
    .expect("check panicked");
    match outcome {
        Ok(()) => true,
        Err(why) => {
            skip_or_fail(&why);
            false
        }
    }
}
