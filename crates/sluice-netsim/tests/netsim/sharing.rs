//! Several flows on the bottleneck, reproducibility, and a long run.

use std::time::Instant;

use sluice_netsim::{
    FlowConfig, GilbertElliott, LinkConfig, LossModel, Sim, SimConfig, StopReason,
    WIRE_OVERHEAD_BYTES,
};

use crate::endpoints::TestNode;
use crate::{assert_within, run_to_end, seed};

#[test]
fn two_cbr_flows_share_the_bottleneck() {
    let seed = seed(20);
    let rate_bps = 20_000_000;
    let link = LinkConfig::default().with_rate(rate_bps, 50_000).with_delay(10_000);
    let mut sim = Sim::new(SimConfig { seed, forward: link, reverse: LinkConfig::default() });
    // Each offers about 16 Mbit/s (1228 wire bytes every 600 or 613 us: different periods, so
    // that neither flow is locked into the queue's drop phase), 1.6 times the link together.
    let len = 1200;
    let wire = len as u64 + WIRE_OVERHEAD_BYTES;
    let intervals_us = [600, 613];
    let duration_us = 5_000_000;
    for (i, interval_us) in intervals_us.into_iter().enumerate() {
        let flow = FlowConfig::starting_at(i as u64 * 777).with_extra_delay(i as u64 * 20_000, 0);
        let count = duration_us / interval_us;
        sim.add_flow(TestNode::source(len, interval_us, count), TestNode::sink(), flow);
    }
    run_to_end(&mut sim);

    let forward = sim.forward_stats();
    let delivered: Vec<u64> = sim.flows().iter().map(|f| f.b.received).collect();
    let offered: Vec<u64> = sim.flows().iter().map(|f| f.a.sent()).collect();
    println!("offered {offered:?}, delivered {delivered:?}");
    for (flow, &received) in sim.flows().iter().zip(&delivered) {
        assert_eq!(flow.stats().forward.delivered.packets, received);
        assert_eq!(flow.stats().forward.sent.packets, flow.a.sent());
    }
    assert_eq!(delivered.iter().sum::<u64>(), forward.delivered.packets);
    assert_eq!(forward.offered.packets, offered.iter().sum::<u64>());

    // Together they fill the link.
    let capacity_pkts = duration_us as f64 * rate_bps as f64 / 8e6 / wire as f64;
    let total = delivered.iter().sum::<u64>() as f64;
    assert_within("packets through the link", total, capacity_pkts, 0.01 * capacity_pkts);
    // Drop-tail drops in proportion to what each offers: equal loss shares, and Jain's index of
    // the delivered/offered ratios close to 1.
    let ratios: Vec<f64> =
        delivered.iter().zip(&offered).map(|(&d, &o)| d as f64 / o as f64).collect();
    let jain = ratios.iter().sum::<f64>().powi(2)
        / (ratios.len() as f64 * ratios.iter().map(|r| r * r).sum::<f64>());
    println!("delivered/offered {ratios:?}, Jain's index {jain:.5}");
    assert!(jain > 0.99, "unfair drops: {ratios:?}");
}

/// A busy, lossy network with every impairment on; returns a fingerprint of everything observed.
fn impaired_run(seed: u64) -> (String, Vec<Vec<u64>>) {
    let forward = LinkConfig::default()
        .with_rate(50_000_000, 60_000)
        .with_delay(20_000)
        .with_jitter(300)
        .with_loss(LossModel::GilbertElliott(GilbertElliott::from_mean_loss_and_burst(0.01, 3.0)))
        .with_reorder(0.01, 2_000)
        .with_duplicate(0.01)
        .with_corrupt(0.01)
        .with_blackout(300_000, 350_000);
    let reverse = LinkConfig::default().with_delay(20_000).with_bernoulli_loss(0.02);
    let mut sim = Sim::new(SimConfig { seed, forward, reverse });
    for i in 0..3u64 {
        let source = TestNode::source(1000 + 16 * i as usize, 150 + i, 5_000);
        let flow = FlowConfig::starting_at(i * 1000).with_extra_delay(i * 5_000, i * 5_000);
        sim.add_flow(source, TestNode::sink().acking_every(4), flow);
    }
    let mut samples = Vec::new();
    let summary = sim.run_until(10_000_000, 50_000, |now_us, view| {
        samples.push((now_us, view.forward_queue_bytes(), view.flow(0).b.received));
    });
    assert_eq!(summary.stop, StopReason::Idle);
    let arrivals: Vec<Vec<u64>> = sim
        .flows()
        .iter()
        .map(|f| f.b.arrivals.iter().flat_map(|a| [a.seq, a.at_us, u64::from(a.flipped)]).collect())
        .collect();
    let stats: Vec<_> = sim.flows().iter().map(|f| *f.stats()).collect();
    let fingerprint = format!(
        "{summary:?}\n{:?}\n{:?}\n{stats:?}\n{samples:?}",
        sim.forward_stats(),
        sim.reverse_stats()
    );
    (fingerprint, arrivals)
}

#[test]
fn same_seed_same_run_different_seed_different_drops() {
    let seed = seed(21);
    let (fingerprint, arrivals) = impaired_run(seed);
    println!("{fingerprint}");
    let (again, arrivals_again) = impaired_run(seed);
    assert_eq!(fingerprint, again);
    assert_eq!(arrivals, arrivals_again);

    let other = seed.wrapping_add(1);
    println!("other seed {other}");
    let (different, arrivals_different) = impaired_run(other);
    assert_ne!(fingerprint, different);
    let seqs =
        |arrivals: &[Vec<u64>]| -> Vec<u64> { arrivals[0].iter().step_by(3).copied().collect() };
    assert_ne!(seqs(&arrivals), seqs(&arrivals_different), "same packets lost");
}

#[test]
fn a_million_packets_at_a_gigabit() {
    let seed = seed(22);
    // About 1.2 GB at 1 Gbit/s behind a BDP-sized queue, one small ack per 8 data packets.
    let count = 1_000_000;
    let link = LinkConfig::default()
        .with_rate(1_000_000_000, 2_500_000)
        .with_delay(10_000)
        .with_bernoulli_loss(0.001);
    let reverse = LinkConfig::default().with_delay(10_000);
    let mut sim = Sim::new(SimConfig { seed, forward: link, reverse });
    let sink = TestNode::sink().counting_only().acking_every(8);
    sim.add_flow(TestNode::source(1200, 10, count), sink, FlowConfig::default());
    let started = Instant::now();
    let summary = run_to_end(&mut sim);
    let elapsed = started.elapsed();
    let stats = sim.forward_stats();
    println!(
        "{count} packets and {} acks: {} events in {:.3} s of real time ({:.0} ns per event), \
         {} s of virtual time",
        sim.flow(0).b.acks_sent,
        summary.events,
        elapsed.as_secs_f64(),
        elapsed.as_nanos() as f64 / summary.events as f64,
        summary.end_us as f64 / 1e6,
    );
    assert_eq!(summary.stop, StopReason::Idle);
    assert_eq!(stats.offered.packets, count);
    assert_eq!(stats.dropped_queue.packets, 0);
    assert_eq!(sim.flow(0).b.received, count - stats.dropped_loss.packets);
    assert_eq!(sim.flow(0).a.received, sim.flow(0).b.acks_sent);
    assert!(summary.packet_buffers < 10_000, "pool grew to {}", summary.packet_buffers);
}
