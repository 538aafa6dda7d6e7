//! Random loss: Bernoulli and Gilbert-Elliott, observed at the sink.

use sluice_netsim::{GilbertElliott, LinkConfig, LossModel};

use crate::endpoints::TestNode;
use crate::{assert_binomial, assert_within, run_one, seed};

/// Sends `count` packets over a link with `loss` and returns, per sequence number, whether it
/// was lost.
fn lost_pattern(seed: u64, loss: LossModel, count: u64) -> Vec<bool> {
    let link = LinkConfig::default().with_delay(1_000).with_loss(loss);
    let sim = run_one(seed, link, TestNode::source(48, 10, count), TestNode::sink());
    let mut lost = vec![true; count as usize];
    for seq in sim.flow(0).b.seqs() {
        lost[seq as usize] = false;
    }
    let dropped = lost.iter().filter(|&&l| l).count() as u64;
    assert_eq!(sim.forward_stats().dropped_loss.packets, dropped);
    assert_eq!(sim.forward_stats().dropped().packets, dropped);
    lost
}

/// Lengths of the runs of consecutive losses.
fn bursts(lost: &[bool]) -> Vec<u64> {
    let mut bursts = Vec::new();
    let mut run = 0;
    for &l in lost.iter().chain([&false]) {
        if l {
            run += 1;
        } else if run > 0 {
            bursts.push(run);
            run = 0;
        }
    }
    bursts
}

#[test]
fn bernoulli_loss_share_within_tolerance() {
    let seed = seed(10);
    let (p, count) = (0.02, 100_000);
    let lost = lost_pattern(seed, LossModel::Bernoulli { p }, count);
    let dropped = lost.iter().filter(|&&l| l).count() as u64;
    assert_binomial("Bernoulli losses", dropped, count, p);
    // Independent losses: bursts are geometric with mean 1 / (1 - p).
    let bursts = bursts(&lost);
    let mean_burst = bursts.iter().sum::<u64>() as f64 / bursts.len() as f64;
    let sigma = (p / (1.0 - p).powi(2) / bursts.len() as f64).sqrt();
    assert_within("Bernoulli mean burst", mean_burst, 1.0 / (1.0 - p), 5.0 * sigma);

    assert!(!lost_pattern(seed, LossModel::Bernoulli { p: 0.0 }, 1_000).contains(&true));
    assert!(!lost_pattern(seed, LossModel::Bernoulli { p: 1.0 }, 1_000).contains(&false));
}

/// Checks a Gilbert-Elliott link's loss rate against the model, with a tolerance of five
/// standard deviations of the mean of a correlated (Markov-modulated) loss sequence.
fn check_gilbert_elliott_rate(what: &str, ge: GilbertElliott, lost: &[bool]) {
    let n = lost.len() as f64;
    let observed = lost.iter().filter(|&&l| l).count() as f64 / n;
    let mean = ge.mean_loss();
    let bad = ge.bad_share();
    // Lag-k autocorrelation of the state is lambda^k.
    let lambda = 1.0 - ge.p_good_to_bad - ge.p_bad_to_good;
    let state_var = bad * (1.0 - bad) * (ge.loss_bad - ge.loss_good).powi(2);
    let var = (mean * (1.0 - mean) + 2.0 * state_var * lambda / (1.0 - lambda)) / n;
    assert_within(what, observed, mean, 5.0 * var.sqrt());
}

#[test]
fn gilbert_elliott_mean_loss_and_burst_length() {
    let seed = seed(11);
    let (mean_loss, mean_burst, count) = (0.05, 4.0, 200_000);
    let ge = GilbertElliott::from_mean_loss_and_burst(mean_loss, mean_burst);
    assert!((ge.mean_loss() - mean_loss).abs() < 1e-12);
    let lost = lost_pattern(seed, LossModel::GilbertElliott(ge), count);
    check_gilbert_elliott_rate("Gilbert mean loss", ge, &lost);

    // Bursts are stays in Bad: geometric with mean 1 / r and variance (1 - r) / r^2.
    let bursts = bursts(&lost);
    let observed = bursts.iter().sum::<u64>() as f64 / bursts.len() as f64;
    let r = ge.p_bad_to_good;
    let sigma = ((1.0 - r) / (r * r) / bursts.len() as f64).sqrt();
    assert_within("Gilbert mean burst", observed, mean_burst, 5.0 * sigma);

    // The general model: some loss in Good, partial loss in Bad.
    let ge =
        GilbertElliott { p_good_to_bad: 0.01, p_bad_to_good: 0.2, loss_good: 0.002, loss_bad: 0.5 };
    let lost = lost_pattern(seed, LossModel::GilbertElliott(ge), count);
    check_gilbert_elliott_rate("Gilbert-Elliott mean loss", ge, &lost);
}
