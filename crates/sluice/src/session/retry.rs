//! How a client waits and tries again when a server turns its connection away because it is
//! busy ([`BusyRetry`]).

use std::time::Duration;

use sluice_proto::rng::Rng;

/// How [`Client::start`](super::Client::start) tries again when the server turns the connection
/// away because it is busy (at its limit of sessions, or of connections being set up from this
/// address; quinn reports "the server refused to accept a new connection").
///
/// The waits double from `first_wait` up to `max_wait`, each drawn at random from the upper half
/// of its span (so that a crowd of clients turned away together comes back spread out), and no
/// attempt starts once `budget` has passed since the first: with the defaults (0.25 s doubling to
/// 4 s, 30 s in all) 11 to 19 attempts, the last at most 30 s after the first. Past that the
/// error is [`SessionError::Busy`](super::SessionError::Busy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyRetry {
    /// The first wait (before the second attempt).
    pub first_wait: Duration,
    /// The longest wait.
    pub max_wait: Duration,
    /// No attempt starts later than this after the first; zero tries once. (Each wait is at
    /// least a millisecond.)
    pub budget: Duration,
    /// The seed of the waits' randomness; `None` draws one. Tests give one, so their waits are
    /// the same every run.
    pub seed: Option<u64>,
}

impl Default for BusyRetry {
    fn default() -> Self {
        BusyRetry {
            first_wait: Duration::from_millis(250),
            max_wait: Duration::from_secs(4),
            budget: Duration::from_secs(30),
            seed: None,
        }
    }
}

impl BusyRetry {
    /// Never tries again: the first refusal is the error.
    pub const ONCE: BusyRetry = BusyRetry {
        first_wait: Duration::ZERO,
        max_wait: Duration::ZERO,
        budget: Duration::ZERO,
        seed: Some(0),
    };
}

/// The waits of one connection's attempts under a [`BusyRetry`].
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: BusyRetry,
    rng: Rng,
    /// The span of the next wait (before jitter).
    span: Duration,
    /// Waits handed out so far.
    waits: u32,
}

impl Backoff {
    pub(crate) fn new(policy: BusyRetry) -> Backoff {
        let seed = policy.seed.unwrap_or_else(ambient_seed);
        Backoff { policy, rng: Rng::new(seed), span: policy.first_wait, waits: 0 }
    }

    /// The wait before the next attempt, `elapsed` after the first began; `None` when that
    /// attempt would begin past the budget.
    pub(crate) fn next_wait(&mut self, elapsed: Duration) -> Option<Duration> {
        if self.policy.budget.is_zero() {
            return None;
        }
        // Each wait at least a millisecond: a policy of zero waits must not spin.
        let span = self.span.min(self.policy.max_wait).max(Duration::from_millis(2));
        let half = span / 2;
        let nanos = u64::try_from((span - half).as_nanos()).unwrap_or(u64::MAX);
        let wait = half + Duration::from_nanos(self.rng.below(nanos.saturating_add(1)));
        if elapsed.saturating_add(wait) > self.policy.budget {
            return None;
        }
        self.span = span.saturating_mul(2);
        self.waits += 1;
        Some(wait)
    }

    /// Waits handed out so far (the attempts made are one more).
    pub(crate) fn waits(&self) -> u32 {
        self.waits
    }
}

/// A seed that differs between processes started together: the clock's nanoseconds and the
/// process id, mixed.
fn ambient_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos().into());
    let pid = u64::from(std::process::id());
    Rng::new(nanos ^ (pid << 32) ^ pid).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(policy: BusyRetry) -> Vec<Duration> {
        let mut backoff = Backoff::new(policy);
        let mut elapsed = Duration::ZERO;
        let mut waits = Vec::new();
        while let Some(wait) = backoff.next_wait(elapsed) {
            elapsed += wait;
            waits.push(wait);
        }
        assert_eq!(backoff.waits() as usize, waits.len());
        waits
    }

    #[test]
    fn waits_double_to_the_cap_jittered_in_the_upper_half_within_the_budget() {
        for seed in 0..50 {
            let policy = BusyRetry { seed: Some(seed), ..BusyRetry::default() };
            let waits = waits(policy);
            let mut span = policy.first_wait;
            for wait in &waits {
                assert!(*wait >= span / 2 && *wait <= span, "seed {seed}: {wait:?} of {span:?}");
                span = (span * 2).min(policy.max_wait);
            }
            let total: Duration = waits.iter().sum();
            assert!(total <= policy.budget, "seed {seed}: waited {total:?}");
            // The budget is used, not given up early: one more wait would not fit.
            assert!(total + policy.max_wait > policy.budget, "seed {seed}: waited {total:?}");
            assert!((10..=18).contains(&waits.len()), "seed {seed}: {} waits", waits.len());
        }
    }

    #[test]
    fn a_seed_repeats_its_waits_and_two_seeds_differ() {
        let policy = |seed| BusyRetry { seed: Some(seed), ..BusyRetry::default() };
        assert_eq!(waits(policy(7)), waits(policy(7)));
        assert_ne!(waits(policy(7)), waits(policy(8)));
    }

    #[test]
    fn once_never_waits_and_a_late_attempt_is_not_started() {
        assert!(waits(BusyRetry::ONCE).is_empty());
        // Zero waits within a budget do not spin: each is at least a millisecond.
        let zero = BusyRetry { budget: Duration::from_millis(10), ..BusyRetry::ONCE };
        assert!((5..=10).contains(&waits(zero).len()));
        let mut backoff = Backoff::new(BusyRetry { seed: Some(1), ..BusyRetry::default() });
        assert_eq!(backoff.next_wait(Duration::from_secs(30)), None);
    }
}
