//! Loopback blast: how many 1452-byte datagrams per second one sender thread pushes and one
//! receiver thread takes, with GSO on and off, in batches of 1, 16 and 64.
//!
//! `cargo run --release -p sluice-udp --example blast [-- <milliseconds per run, default 1000>]`
//!
//! Loopback only (127.0.0.1). UDP does not push back, so the sender may outrun the receiver:
//! the received rate is the one that counts, and the loss column says by how much it fell
//! behind. Loopback carries a GSO super-datagram whole (no segmentation on a wire), so the GSO
//! figures are an upper bound for a real path.

#![allow(clippy::print_stdout)]

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use sluice_udp::{RecvBatch, Socket};

const DATAGRAM_BYTES: usize = 1452;
const BUFFER_BYTES: usize = 8 << 20;

struct Run {
    sent: u64,
    received: u64,
    send_calls: u64,
    seconds: f64,
}

fn blast(gso: bool, batch: usize, duration: Duration) -> std::io::Result<Run> {
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    let (tx, _) = Socket::new(a, b_addr, BUFFER_BYTES)?;
    let (rx, _) = Socket::new(b, a_addr, BUFFER_BYTES)?;
    if !gso {
        tx.disable_gso();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || -> std::io::Result<u64> {
            let mut recv = RecvBatch::new();
            let mut received = 0u64;
            loop {
                let n = rx.recv_batch(&mut recv)?;
                recv.datagrams(|d| {
                    std::hint::black_box(d);
                });
                received += n as u64;
                if n == 0 {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(received);
                    }
                    rx.wait(false, 1_000)?;
                }
            }
        })
    };
    let data = vec![0xa5u8; batch * DATAGRAM_BYTES];
    let start = Instant::now();
    let (mut sent, mut send_calls) = (0u64, 0u64);
    while start.elapsed() < duration {
        let taken = tx.send_batch(&data, DATAGRAM_BYTES)?;
        send_calls += 1;
        sent += taken as u64;
        if taken == 0 {
            tx.wait(true, 1_000)?;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    // Let the receiver drain what is queued, then stop it at its next empty read.
    thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let received = receiver.join().expect("receiver thread")?;
    Ok(Run { sent, received, send_calls, seconds })
}

fn main() -> std::io::Result<()> {
    let millis: u64 = std::env::args().nth(1).and_then(|arg| arg.parse().ok()).unwrap_or(1_000);
    let duration = Duration::from_millis(millis);
    println!(
        "loopback blast, {DATAGRAM_BYTES}-byte datagrams, {millis} ms per run, one sender and one receiver thread"
    );
    println!(
        "{:<5} {:>5} {:>11} {:>13} {:>13} {:>10} {:>7}",
        "gso", "batch", "calls/s", "sent pkt/s", "recv pkt/s", "recv Gb/s", "loss %"
    );
    for gso in [true, false] {
        for batch in [1, 16, 64] {
            let run = blast(gso, batch, duration)?;
            let per_s = |n: u64| n as f64 / run.seconds;
            let gbit = per_s(run.received) * (DATAGRAM_BYTES * 8) as f64 / 1e9;
            let loss = if run.sent == 0 {
                0.0
            } else {
                100.0 * (run.sent.saturating_sub(run.received)) as f64 / run.sent as f64
            };
            println!(
                "{:<5} {:>5} {:>11.0} {:>13.0} {:>13.0} {:>10.2} {:>7.1}",
                if gso { "on" } else { "off" },
                batch,
                per_s(run.send_calls),
                per_s(run.sent),
                per_s(run.received),
                gbit,
                loss
            );
        }
    }
    Ok(())
}
