//! Tests of the simulated network, driven by simple CBR endpoints. Every test prints its seed;
//! set `SLUICE_TEST_SEED` to run one with another seed (statistical checks hold for any seed).

// The helpers print seeds and measurements too, not only the `#[test]` functions.
#![allow(clippy::print_stdout)]

mod driver;
mod endpoints;
mod link;
mod loss;
mod sharing;
mod timing;

use sluice_netsim::{FlowConfig, LinkConfig, LinkStats, RunSummary, Sim, SimConfig, StopReason};

use endpoints::TestNode;

/// The seed to use: `SLUICE_TEST_SEED` if set, else `default`. Printed either way.
pub(crate) fn seed(default: u64) -> u64 {
    let seed =
        std::env::var("SLUICE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    println!("seed {seed}");
    seed
}

/// One CBR flow from `source` to `sink` over `forward` (the reverse link is ideal), run until
/// nothing is left to happen. Returns the simulator, for its stats and endpoints.
pub(crate) fn run_one(
    seed: u64,
    forward: LinkConfig,
    source: TestNode,
    sink: TestNode,
) -> Sim<TestNode> {
    let config = SimConfig { seed, forward, reverse: LinkConfig::default() };
    let mut sim = Sim::new(config);
    sim.add_flow(source, sink, FlowConfig::default());
    let summary = run_to_end(&mut sim);
    assert_eq!(summary.stop, StopReason::Idle, "{summary:?}");
    sim
}

/// Runs without sampling until a far deadline.
pub(crate) fn run_to_end(sim: &mut Sim<TestNode>) -> RunSummary {
    let summary = sim.run_until(u64::MAX / 2, 0, |_, _| {});
    println!("{summary:?}");
    assert_conserved(sim.forward_stats());
    assert_conserved(sim.reverse_stats());
    summary
}

/// Every packet is accounted for exactly once.
pub(crate) fn assert_conserved(stats: &LinkStats) {
    let dropped = stats.dropped();
    let in_flight = stats.in_flight();
    assert_eq!(
        stats.offered.packets + stats.duplicated.packets,
        dropped.packets + stats.delivered.packets + in_flight.packets
    );
    assert_eq!(
        stats.offered.bytes + stats.duplicated.bytes,
        dropped.bytes + stats.delivered.bytes + in_flight.bytes
    );
}

/// Checks that a count of `n` Bernoulli(`p`) trials is within 5 standard deviations of `n * p`.
pub(crate) fn assert_binomial(what: &str, observed: u64, n: u64, p: f64) {
    let mean = n as f64 * p;
    let sigma = (n as f64 * p * (1.0 - p)).sqrt();
    assert_within(what, observed as f64, mean, 5.0 * sigma);
}

/// Checks `|observed - expected| <= tolerance`, printing all three.
pub(crate) fn assert_within(what: &str, observed: f64, expected: f64, tolerance: f64) {
    println!("{what}: observed {observed:.4}, expected {expected:.4} +- {tolerance:.4}");
    assert!(
        (observed - expected).abs() <= tolerance,
        "{what}: observed {observed}, expected {expected} +- {tolerance}"
    );
}
