//! End-to-end tests of the emulator: real TUN devices in namespaces made by the test, UDP from
//! namespace a to namespace b. They need root; without it they print a skip message and pass,
//! except in CI, where they fail (see `skip_or_fail`).
//! Rates are modest and bounds generous, so a loaded 2-core machine does not make them flaky.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use linkem::model::{Direction, LossConfig, loss_pattern};
use linkem::netns::{self, in_netns};
use linkem::{A_ADDR, B_ADDR, DirectionConfig, Emulator, LinkConfig, NetnsPair, QueueLimit};

#[allow(unreachable_pub)]
#[path = "../../testing/skip.rs"]
mod skip;
use skip::skip_or_fail;

/// One emulator test at a time: they measure time, and the machine is small.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[track_caller]
fn root_or_skip(test: &str) -> bool {
    if netns::is_root() {
        return true;
    }
    skip_or_fail(&format!("{test} needs root (network namespaces and TUN devices)"));
    false
}

/// A pair of namespaces and an emulator between them; removed on drop (emulator first).
struct Link {
    emu: Option<Emulator>,
    pair: NetnsPair,
}

impl Link {
    fn new(tag: &str, config: &LinkConfig) -> Link {
        let pair = NetnsPair::create(&NetnsPair::unique_prefix(tag)).unwrap();
        let emu = Emulator::start(pair.a(), pair.b(), config).unwrap();
        Link { emu: Some(emu), pair }
    }

    fn emu(&self) -> &Emulator {
        self.emu.as_ref().unwrap()
    }

    fn socket(&self, in_b: bool, port: u16) -> UdpSocket {
        let (ns, ip) = if in_b { (self.pair.b(), B_ADDR) } else { (self.pair.a(), A_ADDR) };
        let addr = SocketAddr::from((ip, port));
        in_netns(ns, move || UdpSocket::bind(addr)).unwrap().unwrap()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        drop(self.emu.take());
    }
}

/// Header of a test datagram: sequence number and send time (ns since `epoch`).
fn datagram(seq: u64, sent_ns: u64, len: usize) -> Vec<u8> {
    let mut d = Vec::with_capacity(len);
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(&sent_ns.to_be_bytes());
    d.extend((16..len).map(|i| (seq as usize * 31 + i * 7) as u8));
    d
}

fn check_payload(d: &[u8]) -> bool {
    let seq = u64::from_be_bytes(d[..8].try_into().unwrap());
    d[16..].iter().enumerate().all(|(k, &b)| b == (seq as usize * 31 + (k + 16) * 7) as u8)
}

struct Received {
    seq: u64,
    one_way_ns: u64,
    /// When it was read, in ns since the sender's epoch.
    at_ns: u64,
    intact: bool,
}

/// Sends `n` datagrams from a to b, `burst` at a time every `gap`, and collects what arrives
/// until `idle` passes with nothing.
fn send_and_collect(
    link: &Link,
    n: u64,
    size: impl Fn(u64) -> usize + Send + 'static,
    burst: u64,
    gap: Duration,
    idle: Duration,
) -> Vec<Received> {
    let rx = link.socket(true, 9000);
    let tx = link.socket(false, 9001);
    let dst = SocketAddr::from((B_ADDR, 9000));
    let epoch = Instant::now();
    rx.set_read_timeout(Some(idle)).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 2048];
        while let Ok(len) = rx.recv(&mut buf) {
            let now = epoch.elapsed().as_nanos() as u64;
            let d = &buf[..len];
            let seq = u64::from_be_bytes(d[..8].try_into().unwrap());
            let sent = u64::from_be_bytes(d[8..16].try_into().unwrap());
            got.push(Received {
                seq,
                one_way_ns: now - sent,
                at_ns: now,
                intact: check_payload(d),
            });
        }
        got
    });
    for seq in 0..n {
        let d = datagram(seq, epoch.elapsed().as_nanos() as u64, size(seq));
        tx.send_to(&d, dst).unwrap();
        if (seq + 1) % burst == 0 {
            std::thread::sleep(gap);
        }
    }
    receiver.join().unwrap()
}

fn missing(got: &[Received], n: u64) -> Vec<u64> {
    let mut seen = vec![false; n as usize];
    for r in got {
        seen[r.seq as usize] = true;
    }
    (0..n).filter(|&i| !seen[i as usize]).collect()
}

#[test]
fn delivers_intact_and_in_order() {
    if !root_or_skip("delivers_intact_and_in_order") {
        return;
    }
    let _g = serial();
    intact_and_in_order(false);
}

#[test]
fn delivers_intact_and_in_order_with_offload() {
    if !root_or_skip("delivers_intact_and_in_order_with_offload") {
        return;
    }
    let _g = serial();
    intact_and_in_order(true);
}

fn intact_and_in_order(offload: bool) {
    // Jitter larger than the packet spacing: order must still hold.
    let dir = DirectionConfig {
        rate_bps: 50_000_000,
        delay_ns: 2_000_000,
        jitter_ns: 1_000_000,
        ..Default::default()
    };
    let link = Link::new("order", &LinkConfig { seed: 5, offload, ..LinkConfig::symmetric(dir) });
    let n = 2000;
    let got = send_and_collect(
        &link,
        n,
        |seq| 16 + (seq as usize * 37) % 1400,
        10,
        Duration::from_millis(2),
        Duration::from_millis(500),
    );
    let report = link.emu().report();
    eprintln!("{}", report.to_json());
    assert_eq!(missing(&got, n), Vec::<u64>::new(), "every datagram arrives");
    assert_eq!(got.len() as u64, n, "no duplicates");
    assert!(got.iter().all(|r| r.intact), "payloads intact");
    assert!(got.windows(2).all(|w| w[0].seq < w[1].seq), "in order");
    assert_eq!(report.a2b.delivered, report.a2b.received);
    assert!(report.a2b.received >= n);
}

#[test]
fn reorders_and_duplicates_only_when_asked() {
    if !root_or_skip("reorders_and_duplicates_only_when_asked") {
        return;
    }
    let _g = serial();
    let dir = DirectionConfig {
        delay_ns: 1_000_000,
        reorder: 0.2,
        reorder_gap_ns: 5_000_000,
        duplicate: 0.1,
        ..Default::default()
    };
    let link = Link::new("reorder", &LinkConfig { seed: 9, ..LinkConfig::symmetric(dir) });
    let n = 1000;
    let got = send_and_collect(
        &link,
        n,
        |_| 100,
        5,
        Duration::from_millis(1),
        Duration::from_millis(500),
    );
    let report = link.emu().report();
    println!("{}", report.to_json());
    assert_eq!(missing(&got, n), Vec::<u64>::new(), "nothing lost");
    let out_of_order = got.windows(2).filter(|w| w[1].seq < w[0].seq).count();
    let dups = got.len() as u64 - n;
    println!("{out_of_order} out-of-order arrivals, {dups} duplicates");
    assert!(out_of_order > 20, "reordering happened: {out_of_order}");
    assert_eq!(dups, report.a2b.duplicated, "every duplicate counted arrives");
    assert!(dups > 40 && dups < 200, "about 10 % duplicated: {dups}");
    assert!(got.iter().all(|r| r.intact));
}

/// Runs one lossy transfer and returns the missing sequence numbers.
fn lossy_run(loss: LossConfig, seed: u64, n: u64) -> Vec<u64> {
    let dir = DirectionConfig { loss, delay_ns: 1_000_000, ..Default::default() };
    let link = Link::new("loss", &LinkConfig { seed, ..LinkConfig::symmetric(dir) });
    let got = send_and_collect(
        &link,
        n,
        |_| 64,
        10,
        Duration::from_millis(2),
        Duration::from_millis(500),
    );
    let report = link.emu().report();
    eprintln!("{}", report.to_json());
    assert_eq!(report.a2b.dropped_queue, 0);
    assert_eq!(report.a2b.received, n, "only the test's datagrams crossed a to b");
    assert_eq!(report.a2b.dropped_loss, n - got.len() as u64);
    missing(&got, n)
}

#[test]
fn seeded_loss_is_reproducible_and_matches_rate() {
    if !root_or_skip("seeded_loss_is_reproducible_and_matches_rate") {
        return;
    }
    let _g = serial();
    let (n, p, seed) = (3000u64, 0.1, 1234u64);
    let loss = LossConfig::Bernoulli { p };
    let first = lossy_run(loss, seed, n);
    let second = lossy_run(loss, seed, n);
    assert_eq!(first, second, "same seed, same lost set");
    // The arrival index of each datagram is its sequence number, so the model predicts the set.
    let predicted: Vec<u64> = loss_pattern(loss, seed, Direction::AToB, n)
        .iter()
        .enumerate()
        .filter(|(_, l)| **l)
        .map(|(i, _)| i as u64)
        .collect();
    assert_eq!(first, predicted, "lost set is the model's");
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    let expected = n as f64 * p;
    println!("lost {} of {n}, expected {expected} ± {}", first.len(), 5.0 * sd);
    assert!((first.len() as f64 - expected).abs() <= 5.0 * sd);
    let other = lossy_run(loss, seed + 1, n);
    assert_ne!(first, other, "another seed, another set");
}

#[test]
fn bursty_loss_follows_the_model() {
    if !root_or_skip("bursty_loss_follows_the_model") {
        return;
    }
    let _g = serial();
    let (n, seed) = (3000u64, 77u64);
    let loss = LossConfig::GilbertElliott { mean_loss: 0.05, mean_burst: 8.0 };
    let lost = lossy_run(loss, seed, n);
    let predicted: Vec<u64> = loss_pattern(loss, seed, Direction::AToB, n)
        .iter()
        .enumerate()
        .filter(|(_, l)| **l)
        .map(|(i, _)| i as u64)
        .collect();
    assert_eq!(lost, predicted);
    let bursts = 1 + lost.windows(2).filter(|w| w[1] != w[0] + 1).count();
    println!("{} lost in {bursts} bursts", lost.len());
    assert!(lost.len() as f64 / bursts as f64 > 2.0, "losses come in bursts");
}

#[test]
fn queue_overflow_drops_instead_of_delaying() {
    if !root_or_skip("queue_overflow_drops_instead_of_delaying") {
        return;
    }
    let _g = serial();
    // 2 Mbit/s with a 30 kB queue: at most 120 ms of queueing. Offer about 8 Mbit/s for 1 s.
    let (rate, queue, delay) = (2_000_000u64, 30_000u64, 5_000_000u64);
    let dir = DirectionConfig {
        rate_bps: rate,
        queue: Some(QueueLimit::Bytes(queue)),
        delay_ns: delay,
        ..Default::default()
    };
    let link = Link::new("queue", &LinkConfig::symmetric(dir));
    let n = 1000;
    let got =
        send_and_collect(&link, n, |_| 1000, 10, Duration::from_millis(10), Duration::from_secs(1));
    let report = link.emu().report();
    println!("{}", report.to_json());
    let max_delay = got.iter().map(|r| r.one_way_ns).max().unwrap();
    // 1028-byte IP packets: queue/rate + one packet's serialization + delay + slack.
    let bound = (queue + 1028) * 8 * 1_000_000_000 / rate + delay + 100_000_000;
    println!("max one-way delay {} ms, bound {} ms", max_delay / 1_000_000, bound / 1_000_000);
    assert!(report.a2b.dropped_queue > 0, "overdriven queue drops");
    assert!(max_delay <= bound, "delay bounded by the queue: {max_delay} > {bound}");
    assert!(got.len() > 100, "the link still delivers: {}", got.len());
    assert_eq!(report.a2b.dropped_queue + got.len() as u64, n);
}

#[test]
fn delay_is_applied_per_direction() {
    if !root_or_skip("delay_is_applied_per_direction") {
        return;
    }
    let _g = serial();
    let a2b = DirectionConfig { delay_ns: 10_000_000, ..Default::default() };
    let b2a = DirectionConfig { delay_ns: 30_000_000, ..Default::default() };
    let link = Link::new("delay", &LinkConfig { a2b, b2a, ..Default::default() });
    let server = link.socket(true, 7000);
    let client = link.socket(false, 7001);
    server.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok((len, from)) = server.recv_from(&mut buf) {
            if server.send_to(&buf[..len], from).is_err() || buf[0] == 0xff {
                break;
            }
        }
    });
    let dst = SocketAddr::from((B_ADDR, 7000));
    let mut rtts = Vec::new();
    for i in 0..20u8 {
        let t = Instant::now();
        client.send_to(&[i], dst).unwrap();
        let mut buf = [0u8; 64];
        if client.recv(&mut buf).is_ok() {
            rtts.push(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = client.send_to(&[0xff], dst);
    echo.join().unwrap();
    rtts.sort();
    println!("RTTs: {rtts:?}");
    assert!(rtts.len() >= 18, "echoes answered: {}", rtts.len());
    let (min, median) = (rtts[0], rtts[rtts.len() / 2]);
    assert!(min >= Duration::from_millis(40), "RTT at least 10 + 30 ms: {min:?}");
    assert!(median <= Duration::from_millis(70), "RTT near 40 ms: {median:?}");
}

/// A TCP stream from a to b through a rate-limited, slightly lossy link arrives byte for byte;
/// with `offload`, the sender's segmentation offload packets are split before the link and
/// packets released together are coalesced into the receiver.
fn tcp_stream_intact(offload: bool) {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let dir = DirectionConfig {
        rate_bps: 100_000_000,
        delay_ns: 2_000_000,
        loss: LossConfig::Bernoulli { p: 0.002 },
        ..Default::default()
    };
    let link = Link::new("tcp", &LinkConfig { seed: 3, offload, ..LinkConfig::symmetric(dir) });
    let addr = SocketAddr::from((B_ADDR, 7100));
    let listener = in_netns(link.pair.b(), move || TcpListener::bind(addr)).unwrap().unwrap();
    let total: usize = 8 << 20;
    let pattern = |i: usize| (i.wrapping_mul(2_654_435_761) >> 13) as u8;
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let (mut at, mut bad) = (0usize, 0usize);
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            bad += buf[..n].iter().enumerate().filter(|(k, b)| **b != pattern(at + k)).count();
            at += n;
        }
        (at, bad)
    });
    let mut s =
        in_netns(link.pair.a(), move || TcpStream::connect_timeout(&addr, Duration::from_secs(5)))
            .unwrap()
            .unwrap();
    let data: Vec<u8> = (0..total).map(pattern).collect();
    s.write_all(&data).unwrap();
    drop(s);
    let (got, bad) = reader.join().unwrap();
    let report = link.emu().report();
    eprintln!("{}", report.to_json());
    assert_eq!((got, bad), (total, 0), "every byte arrives unchanged");
    assert!(report.a2b.dropped_loss > 0, "the stream recovered from losses");
    for d in [&report.a2b, &report.b2a] {
        assert!(d.max_packet_bytes <= 1500, "no packet above the MTU: {}", d.max_packet_bytes);
        assert_eq!((d.read_errors, d.write_errors), (0, 0));
    }
    assert!(report.a2b.max_packet_bytes >= 1400, "full-size segments crossed");
}

#[test]
fn tcp_stream_arrives_intact() {
    if !root_or_skip("tcp_stream_arrives_intact") {
        return;
    }
    let _g = serial();
    tcp_stream_intact(false);
}

#[test]
fn tcp_stream_arrives_intact_with_offload() {
    if !root_or_skip("tcp_stream_arrives_intact_with_offload") {
        return;
    }
    let _g = serial();
    tcp_stream_intact(true);
}

/// Receive batching: with a release granularity the receiver reads the datagrams in bunches at
/// the wakes; with a GRO-like batch, in groups of the batch size. The scales (milliseconds) are
/// far above a loaded machine's wake-up latency.
#[test]
fn receive_batching_hands_datagrams_over_in_bunches() {
    if !root_or_skip("receive_batching_hands_datagrams_over_in_bunches") {
        return;
    }
    let _g = serial();
    // One datagram about every 200 us; wakes every 5 ms: about 25 per bunch.
    let granularity_ns = 5_000_000;
    let dir = DirectionConfig {
        delay_ns: 1_000_000,
        release_granularity_ns: granularity_ns,
        ..Default::default()
    };
    let link = Link::new("batch", &LinkConfig { seed: 3, ..LinkConfig::symmetric(dir) });
    let n = 1000;
    let got =
        send_and_collect(&link, n, |_| 200, 1, Duration::from_micros(200), Duration::from_secs(1));
    println!("{}", link.emu().report().to_json());
    drop(link);
    assert_eq!(missing(&got, n), Vec::<u64>::new());
    assert!(got.windows(2).all(|w| w[0].seq < w[1].seq), "in order");
    // A bunch starts after a silence of over 2 ms.
    let bunches = 1 + got.windows(2).filter(|w| w[1].at_ns - w[0].at_ns > 2_000_000).count();
    let span_ns = got.last().unwrap().at_ns - got[0].at_ns;
    let wakes = span_ns / granularity_ns + 1;
    println!("{n} datagrams in {bunches} bunches over {} ms ({wakes} wakes)", span_ns / 1_000_000);
    assert!(bunches as u64 <= wakes + 1, "{bunches} bunches, {wakes} wakes");
    assert!(n / bunches as u64 >= 8, "bunches of {} datagrams", n / bunches as u64);

    // GRO-like batches of 10 with a long window: datagrams sent 2 ms apart come in tens.
    let dir = DirectionConfig {
        delay_ns: 1_000_000,
        gro_batch: 10,
        gro_window_ns: 200_000_000,
        ..Default::default()
    };
    let link = Link::new("gro", &LinkConfig { seed: 3, ..LinkConfig::symmetric(dir) });
    let n = 200;
    let got =
        send_and_collect(&link, n, |_| 200, 1, Duration::from_millis(2), Duration::from_secs(1));
    println!("{}", link.emu().report().to_json());
    assert_eq!(missing(&got, n), Vec::<u64>::new());
    for w in got.windows(2) {
        let gap_ns = w[1].at_ns - w[0].at_ns;
        if w[1].seq % 10 == 0 {
            assert!(gap_ns > 10_000_000, "a batch of 10 takes 20 ms to gather: {gap_ns} ns");
        } else {
            assert!(
                gap_ns < 5_000_000,
                "datagrams {} and {} {gap_ns} ns apart",
                w[0].seq,
                w[1].seq
            );
        }
    }
}

#[test]
fn namespace_guard_removes_on_drop() {
    if !root_or_skip("namespace_guard_removes_on_drop") {
        return;
    }
    let pair = NetnsPair::create(&NetnsPair::unique_prefix("guard")).unwrap();
    let (a, b) = (pair.a().to_string(), pair.b().to_string());
    assert!(netns::exists(&a) && netns::exists(&b));
    assert!(NetnsPair::create(pair.prefix()).is_err(), "an existing pair is not created twice");
    drop(pair);
    assert!(!netns::exists(&a) && !netns::exists(&b));
}
