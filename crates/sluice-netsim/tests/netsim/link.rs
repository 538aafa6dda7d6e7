//! One link direction: rate and queue, delay, jitter, reordering, duplication, corruption,
//! blackouts.

use std::collections::HashMap;

use sluice_netsim::{FlowConfig, LinkConfig, Sim, SimConfig, WIRE_OVERHEAD_BYTES};

use crate::endpoints::TestNode;
use crate::{assert_binomial, assert_within, run_one, run_to_end, seed};

#[test]
fn rate_limit_caps_throughput_and_bounds_queue_delay() {
    let seed = seed(1);
    let rate_bps = 10_000_000;
    let queue_limit_bytes = 30_000;
    let len = 1000;
    let wire = len as u64 + WIRE_OVERHEAD_BYTES;
    let delay_us = 5_000;
    // Offered at twice the rate: 1028 wire bytes every 411 us is 20.01 Mbit/s.
    let (interval_us, count) = (411, 10_000);
    let link = LinkConfig::default().with_rate(rate_bps, queue_limit_bytes).with_delay(delay_us);
    let sim = run_one(seed, link, TestNode::source(len, interval_us, count), TestNode::sink());
    let stats = sim.forward_stats();
    let sink = &sim.flow(0).b;
    println!("{stats:#?}");

    // The link never idles once the queue has filled: arrivals come exactly at the rate.
    let first = sink.arrivals.first().unwrap().at_us;
    let last = sink.arrivals.last().unwrap().at_us;
    let bits = (sink.received - 1) * wire * 8;
    let rate = bits as f64 * 1e6 / (last - first) as f64;
    assert_within("delivered rate (bit/s)", rate, rate_bps as f64, rate_bps as f64 * 0.001);

    // What was sent while the link was busy, plus what was queued at the end, got through.
    let serialize_us = wire as f64 * 8e6 / rate_bps as f64;
    let busy_us = (count - 1) as f64 * interval_us as f64;
    let min_delivered = (busy_us / serialize_us).floor() as u64;
    let max_delivered = min_delivered + queue_limit_bytes / wire + 1;
    println!("delivered {} in [{min_delivered}, {max_delivered}]", sink.received);
    assert!((min_delivered..=max_delivered).contains(&sink.received));
    assert_eq!(stats.delivered.packets, sink.received);
    assert_eq!(stats.dropped_queue.packets, count - sink.received);
    assert_eq!(stats.dropped().packets, stats.dropped_queue.packets);

    // Queueing delay: never above queue_limit / rate, and near it once the queue is full.
    let bound_ns = queue_limit_bytes * 8 * 1_000_000_000 / rate_bps;
    let delay = &stats.queue_delay;
    println!("queue delay {delay:?}, bound {bound_ns} ns");
    assert_eq!(delay.count(), sink.received);
    assert!(delay.max_ns() <= bound_ns);
    assert!(delay.p50_ns() as f64 > 0.9 * bound_ns as f64);
    assert!(stats.queue_bytes_max <= queue_limit_bytes);
    assert!(stats.queue_bytes_max > queue_limit_bytes - wire);
    let worst_us = delay_us + bound_ns / 1000 + serialize_us.ceil() as u64 + 1;
    assert!(sink.arrivals.iter().all(|a| a.delay_us() <= worst_us));
    assert!(sink.arrivals.windows(2).all(|w| w[0].seq < w[1].seq), "FIFO order");
}

#[test]
fn propagation_delay_is_exact_without_jitter() {
    let seed = seed(2);
    // Unlimited rate: one-way delay is the link's plus the flow's own, to the microsecond.
    let config =
        SimConfig { seed, forward: LinkConfig::default().with_delay(25_000), ..Default::default() };
    let mut sim = Sim::new(config);
    let flow = FlowConfig::starting_at(7_000).with_extra_delay(1_000, 0);
    sim.add_flow(TestNode::source(100, 1_000, 500), TestNode::sink(), flow);
    run_to_end(&mut sim);
    let sink = &sim.flow(0).b;
    assert_eq!(sink.received, 500);
    assert_eq!(sink.arrivals[0].sent_us, 7_000);
    assert!(sink.arrivals.iter().all(|a| a.delay_us() == 26_000));

    // A rate adds exactly the serialization time: 972 + 28 bytes at 1 Mbit/s take 8 ms.
    let link = LinkConfig::default().with_rate(1_000_000, 10_000).with_delay(25_000);
    let sim = run_one(seed, link, TestNode::source(972, 10_000, 100), TestNode::sink());
    let sink = &sim.flow(0).b;
    assert_eq!(sink.received, 100);
    assert!(sink.arrivals.iter().all(|a| a.delay_us() == 33_000));
    assert_eq!(sim.forward_stats().queue_delay.max_ns(), 0);
}

#[test]
fn jitter_never_reorders() {
    let seed = seed(3);
    let (delay_us, jitter_us) = (10_000, 5_000);
    let link = LinkConfig::default().with_delay(delay_us).with_jitter(jitter_us);

    // Jitter fifty times the packet spacing: without the order guarantee most would reorder.
    // (Packets then bunch up behind the slowest recent one, so delays crowd towards the top.)
    let count = 20_000;
    let sim = run_one(seed, link.clone(), TestNode::source(64, 100, count), TestNode::sink());
    let sink = &sim.flow(0).b;
    assert_eq!(sink.seqs(), (0..count).collect::<Vec<_>>());
    assert_eq!(sink.late, 0);
    assert_eq!(sim.forward_stats().reordered.packets, 0);
    assert!(
        sink.arrivals.iter().all(|a| (delay_us..=delay_us + jitter_us).contains(&a.delay_us()))
    );

    // Spaced wider than the jitter, packets see the plain uniform delay.
    let count = 2_000;
    let sim = run_one(seed, link, TestNode::source(64, 2 * jitter_us, count), TestNode::sink());
    let sink = &sim.flow(0).b;
    assert_eq!(sink.seqs(), (0..count).collect::<Vec<_>>());
    let delays: Vec<u64> = sink.arrivals.iter().map(|a| a.delay_us()).collect();
    let (min, max) = (*delays.iter().min().unwrap(), *delays.iter().max().unwrap());
    println!("delay range [{min}, {max}] us");
    assert!(min >= delay_us && max <= delay_us + jitter_us);
    assert!(min < delay_us + jitter_us / 100 && max > delay_us + jitter_us * 99 / 100);
    let mean = delays.iter().sum::<u64>() as f64 / count as f64;
    // The mean of `count` uniform draws on [0, J] has standard deviation J / sqrt(12 count).
    let sigma = jitter_us as f64 / (12.0 * count as f64).sqrt();
    let expected = delay_us as f64 + jitter_us as f64 / 2.0;
    assert_within("mean delay with jitter (us)", mean, expected, 5.0 * sigma);
}

#[test]
fn reordering_holds_back_about_the_asked_share() {
    let seed = seed(4);
    let (p, extra_us, count) = (0.05, 1_000, 20_000);
    let link = LinkConfig::default().with_delay(2_000).with_jitter(50).with_reorder(p, extra_us);
    let sim = run_one(seed, link, TestNode::source(64, 100, count), TestNode::sink());
    let stats = sim.forward_stats();
    let sink = &sim.flow(0).b;
    assert_eq!(sink.received, count);
    assert_binomial("held back", stats.reordered.packets, count, p);
    // Held back by ten packet spacings, each is passed, except perhaps the very last packet.
    println!("late at the sink {}, held back {}", sink.late, stats.reordered.packets);
    assert!(sink.late <= stats.reordered.packets && stats.reordered.packets <= sink.late + 1);
    let mut seqs = sink.seqs();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..count).collect::<Vec<_>>());
}

#[test]
fn duplication_and_corruption_counts_and_single_bit_flips() {
    let seed = seed(5);
    let (p_dup, p_corrupt, count) = (0.03, 0.02, 50_000);
    let link =
        LinkConfig::default().with_delay(1_000).with_duplicate(p_dup).with_corrupt(p_corrupt);
    let sim = run_one(seed, link, TestNode::source(100, 10, count), TestNode::sink());
    let stats = sim.forward_stats();
    let sink = &sim.flow(0).b;
    assert_binomial("duplicated", stats.duplicated.packets, count, p_dup);
    assert_binomial("corrupted", stats.corrupted.packets, count, p_corrupt);
    assert_eq!(sink.received, count + stats.duplicated.packets);
    assert_eq!(stats.delivered.packets, sink.received);

    // Per sequence number: copies received and bits flipped in each copy.
    let mut seen: HashMap<u64, Vec<u32>> = HashMap::new();
    for arrival in &sink.arrivals {
        assert!(arrival.flipped <= 1, "{arrival:?} differs in more than one bit");
        seen.entry(arrival.seq).or_default().push(arrival.flipped);
    }
    assert_eq!(seen.len() as u64, count);
    let twice = seen.values().filter(|copies| copies.len() == 2).count() as u64;
    assert!(seen.values().all(|copies| copies.len() <= 2));
    assert_eq!(twice, stats.duplicated.packets);
    // A duplicate is a copy of the packet as delivered, corrupted or not.
    assert!(seen.values().all(|copies| copies.iter().all(|&f| f == copies[0])));
    let corrupted = seen.values().filter(|copies| copies[0] == 1).count() as u64;
    assert_eq!(corrupted, stats.corrupted.packets);
}

#[test]
fn blackout_drops_everything_inside_and_nothing_outside() {
    let seed = seed(6);
    let windows = [(100_000, 200_000), (500_000, 550_000)];
    let link = LinkConfig::default()
        .with_delay(10_000)
        .with_blackout(windows[0].0, windows[0].1)
        .with_blackout(windows[1].0, windows[1].1);
    let count = 10_000;
    let sim = run_one(seed, link, TestNode::source(64, 100, count), TestNode::sink());
    let sink = &sim.flow(0).b;
    let inside = |t: u64| windows.iter().any(|&(start, end)| (start..end).contains(&t));
    let expected: Vec<u64> = (0..count).filter(|seq| !inside(seq * 100)).collect();
    assert_eq!(sink.seqs(), expected);
    assert_eq!(sim.forward_stats().dropped_blackout.packets, 1_000 + 500);
    assert_eq!(sim.forward_stats().dropped().packets, 1_500);

    // Behind a queue, what counts is when a packet leaves the queue: a burst queued just before
    // a blackout is lost when its turn comes inside it.
    let link = LinkConfig::default().with_rate(8_000_000, 100_000).with_blackout(1_000, 2_000);
    // 100 datagrams of 972 bytes at once: each takes 1 ms to serialize at 8 Mbit/s.
    let sim = run_one(seed, link, TestNode::source(972, 0, 100), TestNode::sink());
    let sink = &sim.flow(0).b;
    // The first leaves at 1 ms (inside), the second at 2 ms (outside: windows are half-open).
    assert_eq!(sink.seqs(), (1..100).collect::<Vec<_>>());
    assert_eq!(sim.forward_stats().dropped_blackout.packets, 1);
}
