//! Random loss models: independent (Bernoulli) and bursty (Gilbert-Elliott).

use serde::{Deserialize, Serialize};
use sluice_proto::rng::Rng;

/// How a link loses packets at random. Applied on the wire, after the bottleneck queue.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub enum LossModel {
    /// No random loss.
    #[default]
    None,
    /// Each packet is lost independently with probability `p`.
    Bernoulli {
        /// Loss probability of every packet, in `[0, 1]`.
        p: f64,
    },
    /// A two-state Markov chain that loses packets in bursts.
    GilbertElliott(GilbertElliott),
}

/// Gilbert-Elliott loss: a hidden Good/Bad state that moves once per packet.
///
/// For each packet the link first decides loss with the current state's probability, then moves
/// to the next state. The chain starts in a state drawn from its stationary distribution, so the
/// loss rate has no warm-up bias.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GilbertElliott {
    /// Probability of moving from Good to Bad after a packet.
    pub p_good_to_bad: f64,
    /// Probability of moving from Bad to Good after a packet.
    pub p_bad_to_good: f64,
    /// Loss probability of a packet sent in the Good state.
    pub loss_good: f64,
    /// Loss probability of a packet sent in the Bad state.
    pub loss_bad: f64,
}

impl GilbertElliott {
    /// The simple Gilbert model (Good never loses, Bad always loses) with the given long-run
    /// loss rate and mean length of a loss burst in packets.
    ///
    /// A burst is the stay in Bad, geometric with mean `1 / p_bad_to_good`; the stationary share
    /// of Bad is `p_good_to_bad / (p_good_to_bad + p_bad_to_good)`, which is the loss rate.
    ///
    /// # Panics
    /// If `mean_loss` is outside `[0, 1)` or `mean_burst_pkts < 1`, or if the pair is impossible
    /// (a high loss rate needs long bursts: `mean_loss <= mean_burst / (mean_burst + 1)`).
    pub fn from_mean_loss_and_burst(mean_loss: f64, mean_burst_pkts: f64) -> Self {
        assert!((0.0..1.0).contains(&mean_loss), "mean loss {mean_loss} outside [0, 1)");
        assert!(mean_burst_pkts >= 1.0, "mean burst {mean_burst_pkts} shorter than one packet");
        let p_bad_to_good = 1.0 / mean_burst_pkts;
        let p_good_to_bad = p_bad_to_good * mean_loss / (1.0 - mean_loss);
        assert!(
            p_good_to_bad <= 1.0,
            "loss {mean_loss} cannot be reached with bursts of {mean_burst_pkts} packets"
        );
        Self { p_good_to_bad, p_bad_to_good, loss_good: 0.0, loss_bad: 1.0 }
    }

    /// Long-run share of the chain's time spent in Bad.
    pub fn bad_share(&self) -> f64 {
        let moves = self.p_good_to_bad + self.p_bad_to_good;
        if moves == 0.0 { 0.0 } else { self.p_good_to_bad / moves }
    }

    /// Long-run loss rate.
    pub fn mean_loss(&self) -> f64 {
        let bad = self.bad_share();
        (1.0 - bad) * self.loss_good + bad * self.loss_bad
    }
}

impl LossModel {
    /// A description of what is wrong with the parameters, if anything.
    pub(crate) fn check(&self) -> Result<(), String> {
        let probs: &[(&str, f64)] = match self {
            LossModel::None => &[],
            LossModel::Bernoulli { p } => &[("p", *p)],
            LossModel::GilbertElliott(ge) => &[
                ("p_good_to_bad", ge.p_good_to_bad),
                ("p_bad_to_good", ge.p_bad_to_good),
                ("loss_good", ge.loss_good),
                ("loss_bad", ge.loss_bad),
            ],
        };
        for (name, p) in probs {
            if !(0.0..=1.0).contains(p) {
                return Err(format!("loss model {name} = {p} is outside [0, 1]"));
            }
        }
        Ok(())
    }
}

/// A loss model with its random stream and (for Gilbert-Elliott) its current state.
#[derive(Debug, Clone)]
pub(crate) struct LossProcess {
    model: LossModel,
    bad: bool,
    rng: Rng,
}

impl LossProcess {
    pub(crate) fn new(model: LossModel, mut rng: Rng) -> Self {
        let bad = match model {
            LossModel::GilbertElliott(ge) => rng.chance(ge.bad_share()),
            _ => false,
        };
        Self { model, bad, rng }
    }

    /// Whether the next packet is lost.
    pub(crate) fn lose(&mut self) -> bool {
        match self.model {
            LossModel::None => false,
            LossModel::Bernoulli { p } => p > 0.0 && self.rng.chance(p),
            LossModel::GilbertElliott(ge) => {
                let (loss, leave) = if self.bad {
                    (ge.loss_bad, ge.p_bad_to_good)
                } else {
                    (ge.loss_good, ge.p_good_to_bad)
                };
                let lost = self.rng.chance(loss);
                if self.rng.chance(leave) {
                    self.bad = !self.bad;
                }
                lost
            }
        }
    }
}
