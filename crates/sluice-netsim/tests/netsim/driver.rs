//! How the simulator drives endpoints: wake-ups, stale and busy ones, sampling, stopping.

use sluice_netsim::sim::MAX_DATAGRAMS_PER_POLL;
use sluice_netsim::{Endpoint, FlowConfig, LinkConfig, Sim, SimConfig, StopReason};

use crate::endpoints::TestNode;
use crate::seed;

/// An endpoint that does what the test sets up and records when it was called.
#[derive(Debug, Default)]
struct Scripted {
    /// Datagrams (of 10 bytes) still to send.
    pending: u64,
    timer: Option<u64>,
    /// The timer to set when a datagram arrives.
    timer_on_datagram: Option<u64>,
    /// Keep the timer after it fired (a misbehaving endpoint).
    stubborn: bool,
    timeouts: Vec<u64>,
    datagrams: Vec<u64>,
}

impl Endpoint for Scripted {
    fn handle_datagram(&mut self, now_us: u64, _datagram: &mut [u8]) {
        self.datagrams.push(now_us);
        if let Some(at_us) = self.timer_on_datagram.take() {
            self.timer = Some(at_us);
        }
    }

    fn handle_timeout(&mut self, now_us: u64) {
        self.timeouts.push(now_us);
        if !self.stubborn && self.timer.is_some_and(|at_us| at_us <= now_us) {
            self.timer = None;
        }
    }

    fn poll_transmit(&mut self, _now_us: u64, buf: &mut [u8]) -> Option<usize> {
        if self.pending == 0 {
            return None;
        }
        self.pending -= 1;
        buf[..10].fill(7);
        Some(10)
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.timer
    }

    fn is_done(&self) -> bool {
        false
    }
}

fn sim_with(seed: u64, delay_us: u64, a: Scripted, b: Scripted) -> Sim<Scripted> {
    let mut sim = Sim::new(SimConfig::symmetric(seed, LinkConfig::default().with_delay(delay_us)));
    sim.add_flow(a, b, FlowConfig::default());
    sim
}

#[test]
fn timers_fire_on_time_and_superseded_wakeups_are_skipped() {
    let seed = seed(30);
    let a = Scripted { pending: 1, timer: Some(1_000), ..Default::default() };
    // b's timer moves from 10 ms to 500 us when the datagram arrives (at 100 us).
    let b = Scripted { timer: Some(10_000), timer_on_datagram: Some(500), ..Default::default() };
    let mut sim = sim_with(seed, 100, a, b);
    let summary = sim.run_until(20_000, 0, |_, _| {});
    println!("{summary:?}");
    assert_eq!(summary.stop, StopReason::Idle);
    assert_eq!(sim.flow(0).a.timeouts, [0, 1_000]);
    assert_eq!(sim.flow(0).b.timeouts, [0, 500]);
    assert_eq!(sim.flow(0).b.datagrams, [100]);
    assert_eq!(summary.stale_wakeups, 1);
    assert_eq!(summary.busy_wakeups, 0);
    assert_eq!(summary.end_us, 10_000, "the stale wake-up was the last event");

    // A timer already in the past when a datagram sets it is served at once, and is not busy.
    let a = Scripted { pending: 1, ..Default::default() };
    let b = Scripted { timer_on_datagram: Some(50), ..Default::default() };
    let mut sim = sim_with(seed, 100, a, b);
    let summary = sim.run_until(20_000, 0, |_, _| {});
    assert_eq!(sim.flow(0).b.timeouts, [0, 100]);
    assert_eq!(summary.busy_wakeups, 0);
}

#[test]
fn busy_endpoints_are_put_off_and_counted() {
    let seed = seed(31);
    // Wants to run at 0 forever: woken once per microsecond.
    let spinner = || Scripted { timer: Some(0), stubborn: true, ..Default::default() };
    let mut sim = sim_with(seed, 0, spinner(), spinner());
    let summary = sim.run_until(1_000, 0, |_, _| {});
    println!("{summary:?}");
    assert_eq!(summary.stop, StopReason::Deadline);
    assert_eq!(summary.end_us, 1_000);
    assert_eq!(summary.busy_wakeups, 2 * 1_001);
    assert_eq!(sim.flow(0).stats().busy_wakeups_a, 1_001);
    assert_eq!(sim.flow(0).b.timeouts, (0..=1_000).collect::<Vec<_>>());

    // Never stops sending: cut off after MAX_DATAGRAMS_PER_POLL per instant.
    let firehose = Scripted { pending: u64::MAX, ..Default::default() };
    let mut sim = sim_with(seed, 0, firehose, Scripted::default());
    let summary = sim.run_until(2, 0, |_, _| {});
    println!("{summary:?}");
    let per_poll = MAX_DATAGRAMS_PER_POLL as u64;
    assert_eq!(sim.forward_stats().offered.packets, 3 * per_poll);
    assert_eq!(sim.flow(0).b.datagrams.len() as u64, 3 * per_poll);
    assert_eq!(sim.flow(0).stats().busy_wakeups_a, 3);
}

#[test]
fn samples_on_a_fixed_grid_and_runs_resume() {
    let seed = seed(32);
    let link = LinkConfig::default().with_rate(1_000_000, 20_000).with_delay(3_000);
    let mut sim = Sim::new(SimConfig { seed, forward: link, reverse: LinkConfig::default() });
    sim.add_flow(TestNode::source(500, 2_000, 100), TestNode::sink(), FlowConfig::default());
    let mut samples = Vec::new();
    let mut sample = |now_us: u64, view: &Sim<TestNode>| {
        assert_eq!(view.now_us(), now_us);
        // The view shows everything at or before the sample time, nothing after.
        let sink = &view.flow(0).b;
        assert!(sink.arrivals.last().is_none_or(|a| a.at_us <= now_us));
        assert!(view.flow(0).a.sent() == (now_us / 2_000 + 1).min(100));
        samples.push((now_us, view.forward_queue_bytes(), sink.received));
    };
    let summary = sim.run_until(25_000, 10_000, &mut sample);
    assert_eq!(summary.stop, StopReason::Deadline);
    assert_eq!(sim.now_us(), 25_000);
    let summary = sim.run_until(u64::MAX / 2, 10_000, &mut sample);
    assert_eq!(summary.stop, StopReason::Idle);
    println!("{samples:?}");
    let times: Vec<u64> = samples.iter().map(|s| s.0).collect();
    let last = summary.end_us / 10_000 * 10_000;
    assert_eq!(times, (0..=last).step_by(10_000).collect::<Vec<_>>());
    // 528 wire bytes every 2 ms offered at 2.1 Mbit/s to a 1 Mbit/s link: the queue builds up.
    assert!(samples.windows(2).all(|w| w[0].2 <= w[1].2));
    assert!(samples.iter().any(|s| s.1 > 10_000));
    assert!(samples.iter().all(|s| s.1 <= 20_000));
    assert_eq!(samples[0], (0, 528, 0));
}

#[test]
fn stops_when_every_endpoint_is_done() {
    let seed = seed(33);
    let link = LinkConfig::default().with_delay(5_000);
    let mut sim = Sim::new(SimConfig::symmetric(seed, link));
    let flow = FlowConfig::starting_at(1_000);
    sim.add_flow(TestNode::source(64, 100, 100), TestNode::sink().expecting(100), flow);
    let summary = sim.run_until(1_000_000, 0, |_, _| {});
    assert_eq!(summary.stop, StopReason::AllDone);
    assert_eq!(summary.end_us, 1_000 + 99 * 100 + 5_000);
    assert!(sim.all_done());
}

#[test]
fn endpoints_changed_between_runs_are_polled_again() {
    let seed = seed(34);
    let mut sim = sim_with(seed, 100, Scripted::default(), Scripted::default());
    let summary = sim.run_until(1_000, 0, |_, _| {});
    assert_eq!(summary.stop, StopReason::Idle);
    assert_eq!(sim.now_us(), 0);
    sim.run_until(1_000, 0, |_, _| {});
    sim.flow_mut(0).a.pending = 3;
    let summary = sim.run_until(1_000, 0, |_, _| {});
    assert_eq!(summary.stop, StopReason::Idle);
    assert_eq!(sim.flow(0).b.datagrams, [100, 100, 100]);
    assert_eq!(sim.flow(0).stats().forward.sent.packets, 3);
}
