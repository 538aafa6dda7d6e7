//! Timing noise: a receive side that hands packets over in bunches (at periodic wakes, or in
//! GRO-like batches), ACK compression on the reverse link, jitter with and without reordering,
//! and senders whose timer wake-ups fire late. Each is off by default, seeded, and deterministic.

use sluice_netsim::{FlowConfig, LinkConfig, Sim, SimConfig};

use crate::endpoints::{Arrival, TestNode};
use crate::{assert_within, run_one, run_to_end, seed};

/// Arrival times at the sink of `count` packets sent one every `interval_us` over `link`.
fn arrivals(seed: u64, link: LinkConfig, interval_us: u64, count: u64) -> Vec<Arrival> {
    let sim = run_one(seed, link, TestNode::source(64, interval_us, count), TestNode::sink());
    let sink = &sim.flow(0).b;
    assert_eq!(sink.received, count);
    sink.arrivals.clone()
}

#[test]
fn release_granularity_hands_packets_over_at_wakes_only() {
    let seed = seed(71);
    let delay_us = 10_000;
    // One packet every 12 us, as 1500-byte packets at 1 Gbit/s.
    for g in [20, 50, 200, 1_000] {
        let link = LinkConfig::default().with_delay(delay_us).with_release_granularity(g, 0);
        let got = arrivals(seed, link, 12, 20_000);
        for a in &got {
            // The first wake at or after the packet's own arrival.
            let own_us = a.sent_us + delay_us;
            assert_eq!(a.at_us % g, 0, "granularity {g}: {a:?}");
            assert!(a.at_us >= own_us && a.at_us < own_us + g, "granularity {g}: {a:?}");
        }
        assert!(got.windows(2).all(|w| w[0].seq < w[1].seq), "FIFO order");
        let wakes = got.windows(2).filter(|w| w[0].at_us != w[1].at_us).count() + 1;
        let per_wake = got.len() as f64 / wakes as f64;
        assert_within("packets per wake", per_wake, g as f64 / 12.0, 0.5);
    }
}

#[test]
fn release_wake_jitter_is_bounded_seeded_and_keeps_order() {
    let seed = seed(72);
    let (delay_us, g, j) = (10_000, 200, 120);
    let link = LinkConfig::default().with_delay(delay_us).with_release_granularity(g, j);
    let got = arrivals(seed, link.clone(), 12, 20_000);
    assert_eq!(got, arrivals(seed, link.clone(), 12, 20_000), "same seed, same wakes");
    assert_ne!(got, arrivals(seed + 1, link, 12, 20_000), "another seed, other wakes");
    assert!(got.windows(2).all(|w| w[0].seq < w[1].seq && w[0].at_us <= w[1].at_us));
    let offsets: Vec<u64> = got.iter().map(|a| a.at_us % g).collect();
    for a in &got {
        let own_us = a.sent_us + delay_us;
        assert!(a.at_us % g <= j, "a wake falls at most {j} us after a multiple: {a:?}");
        assert!(a.at_us >= own_us && a.at_us < own_us + g + j, "{a:?}");
    }
    let (lo, hi) = (offsets.iter().min().unwrap(), offsets.iter().max().unwrap());
    println!("wake offsets {lo}..={hi} us");
    assert!(*lo <= j / 10 && *hi >= j * 9 / 10, "the jitter spans its range");
    // A jitter above the granularity would let wakes pass each other: refused.
    assert!(LinkConfig::default().with_release_granularity(50, 51).check().is_err());
}

#[test]
fn gro_batch_hands_over_full_batches_together_or_at_the_window() {
    let seed = seed(73);
    let delay_us = 5_000;
    // Batches of 8 with a long window: the 8th packet's arrival hands over all 8.
    let link = LinkConfig::default().with_delay(delay_us).with_gro_batch(8, 1_000);
    let got = arrivals(seed, link, 12, 1_004);
    for (i, a) in got.iter().enumerate().take(1_000) {
        let last = i / 8 * 8 + 7;
        assert_eq!(a.seq, i as u64, "order kept");
        assert_eq!(a.at_us, last as u64 * 12 + delay_us, "packet {i}");
    }
    // The last 4 never fill a batch: handed over one window after the first of them.
    assert!(got[1_000..].iter().all(|a| a.at_us == 1_000 * 12 + delay_us + 1_000));

    // A short window binds first: 50 us holds the packets of 0, 12, .., 48 us after the first.
    let link = LinkConfig::default().with_delay(delay_us).with_gro_batch(64, 50);
    let got = arrivals(seed, link, 12, 1_000);
    for (i, a) in got.iter().enumerate() {
        assert_eq!(a.at_us, (i as u64 / 5 * 5) * 12 + delay_us + 50, "packet {i}");
    }

    // The flow's own extra delay comes after the batch; a batch needs a window.
    let link = LinkConfig::default().with_delay(delay_us).with_gro_batch(4, 1_000);
    let mut sim = Sim::new(SimConfig { seed, forward: link, ..Default::default() });
    let flow = FlowConfig::default().with_extra_delay(700, 0);
    sim.add_flow(TestNode::source(64, 12, 40), TestNode::sink(), flow);
    run_to_end(&mut sim);
    let sink = &sim.flow(0).b;
    for (i, a) in sink.arrivals.iter().enumerate() {
        assert_eq!(a.at_us, (i as u64 / 4 * 4 + 3) * 12 + delay_us + 700, "packet {i}");
    }
    assert!(LinkConfig::default().with_gro_batch(8, 0).check().is_err());
}

#[test]
fn ack_compression_bunches_what_the_source_hears() {
    let seed = seed(74);
    let g = 500;
    let reverse = LinkConfig::default().with_delay(2_000).with_release_granularity(g, 0);
    let forward = LinkConfig::default().with_delay(2_000);
    let mut sim = Sim::new(SimConfig { seed, forward, reverse });
    let sink = TestNode::sink().acking_every(1);
    sim.add_flow(TestNode::source(64, 12, 10_000), sink, FlowConfig::default());
    run_to_end(&mut sim);
    let flow = sim.flow(0);
    assert_eq!(flow.b.received, 10_000);
    let acks = &flow.a.arrivals;
    assert_eq!(acks.len(), 10_000);
    // The sink acknowledged each packet on arrival (12 us apart); the source hears them in
    // bunches at multiples of the granularity, none before its time, in order.
    for ack in acks {
        assert_eq!(ack.at_us % g, 0, "{ack:?}");
        assert!(ack.at_us >= ack.sent_us + 2_000 && ack.at_us < ack.sent_us + 2_000 + g);
    }
    assert!(acks.windows(2).all(|w| w[0].seq < w[1].seq));
    // The data direction is untouched.
    assert!(flow.b.arrivals.iter().all(|a| a.delay_us() == 2_000));
}

#[test]
fn jitter_reorders_only_when_asked() {
    let seed = seed(75);
    let (delay_us, jitter_us, count) = (10_000, 2_000, 20_000);
    let plain = LinkConfig::default().with_delay(delay_us).with_jitter(jitter_us);
    // In order: a packet waits for the one ahead of it.
    let sim = run_one(seed, plain.clone(), TestNode::source(64, 100, count), TestNode::sink());
    assert_eq!(sim.flow(0).b.late, 0);
    assert_eq!(sim.flow(0).b.seqs(), (0..count).collect::<Vec<_>>());
    // Reordering: each packet has its own delay, uniform on [delay, delay + jitter].
    let link = plain.with_jitter_reorders();
    let sim = run_one(seed, link, TestNode::source(64, 100, count), TestNode::sink());
    let sink = &sim.flow(0).b;
    println!("passed by a later packet: {}", sink.late);
    assert!(sink.late > count / 2, "jitter of 20 packet spacings reorders most packets");
    assert!(
        sink.arrivals.iter().all(|a| (delay_us..=delay_us + jitter_us).contains(&a.delay_us()))
    );
    let mean = sink.arrivals.iter().map(|a| a.delay_us()).sum::<u64>() as f64 / count as f64;
    let sigma = jitter_us as f64 / (12.0 * count as f64).sqrt();
    assert_within("mean delay (us)", mean, delay_us as f64 + jitter_us as f64 / 2.0, 5.0 * sigma);
    let mut seqs = sink.seqs();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..count).collect::<Vec<_>>());
}

#[test]
fn sender_wake_ups_overshoot_by_up_to_the_asked_amount() {
    let seed = seed(76);
    let (interval_us, late_us, count) = (1_000, 300, 5_000);
    // Each packet is stamped when it is sent, i.e. when the source was woken for it.
    let send_lateness = |link: LinkConfig, seed: u64| -> Vec<u64> {
        let got = arrivals(seed, link, interval_us, count);
        got.iter().map(|a| a.sent_us - a.seq * interval_us).collect()
    };
    let on_time = send_lateness(LinkConfig::default().with_delay(1_000), seed);
    assert!(on_time.iter().all(|&l| l == 0));
    let link = LinkConfig::default().with_delay(1_000).with_sender_wake_late(late_us);
    let late = send_lateness(link.clone(), seed);
    assert_eq!(late, send_lateness(link.clone(), seed), "seeded");
    assert_ne!(late, send_lateness(link, seed + 1));
    // The first wake-up is the flow's start, not a sleep.
    assert_eq!(late[0], 0);
    assert!(late.iter().all(|&l| l <= late_us));
    let mean = late[1..].iter().sum::<u64>() as f64 / (count - 1) as f64;
    let sigma = late_us as f64 / (12.0 * (count - 1) as f64).sqrt();
    assert_within("mean lateness (us)", mean, late_us as f64 / 2.0, 5.0 * sigma);
    // Deliveries are not late: only the timer wake-ups of the endpoints sending into the link.
    let reverse = LinkConfig::default().with_delay(1_000).with_sender_wake_late(late_us);
    let mut sim = Sim::new(SimConfig { seed, forward: LinkConfig::default(), reverse });
    sim.add_flow(TestNode::source(64, interval_us, count), TestNode::sink(), FlowConfig::default());
    run_to_end(&mut sim);
    let sink = &sim.flow(0).b;
    assert!(sink.arrivals.iter().enumerate().all(|(i, a)| a.sent_us == i as u64 * interval_us));
}
