//! Pacing a web transfer to a rate: its token's limit, or a lower one the page asks for.

use std::time::Duration;

/// How long a transfer that must not pass `rate_bps` waits after each piece it moved: a piece
/// may end no sooner than its bytes take at that rate after the previous piece could end (or
/// did, when it was late: a slow stretch earns no burst later). No clock is read here: the
/// caller says how long since the transfer began.
#[derive(Debug, Clone)]
pub struct Pace {
    rate_bps: u64,
    /// When the last piece could end at the rate, since the transfer began.
    due: Duration,
    /// When the last piece was counted.
    last: Duration,
}

impl Pace {
    /// The pace of the lowest of the limits given; `None` when there is none (or one is 0).
    pub fn lowest(limits: &[Option<u64>]) -> Option<Pace> {
        let rate_bps = limits.iter().flatten().copied().filter(|&r| r > 0).min()?;
        Some(Pace { rate_bps, due: Duration::ZERO, last: Duration::ZERO })
    }

    /// The rate held, in bits per second.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// `bytes` more moved, `elapsed` since the transfer began: how long to wait before the next.
    pub fn wait(&mut self, bytes: u64, elapsed: Duration) -> Duration {
        let takes = Duration::from_secs_f64(bytes as f64 * 8.0 / self.rate_bps as f64);
        self.due = self.due.max(self.last) + takes;
        self.last = elapsed;
        self.due.saturating_sub(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_limit_is_held() {
        assert!(Pace::lowest(&[None, None]).is_none());
        assert!(Pace::lowest(&[Some(0)]).is_none());
        assert_eq!(
            Pace::lowest(&[Some(8_000_000), None, Some(16_000_000)]).unwrap().rate_bps(),
            8e6 as u64
        );
    }

    #[test]
    fn each_piece_waits_until_the_rate_allows_it() {
        // 1 MB/s: 250 kB are due at 0.25 s.
        let mut pace = Pace::lowest(&[Some(8_000_000)]).unwrap();
        assert_eq!(pace.wait(250_000, Duration::ZERO), Duration::from_millis(250));
        // It waited; the next 250 kB may end at 0.5 s.
        assert_eq!(pace.wait(250_000, Duration::from_millis(250)), Duration::from_millis(250));
        // A slow stretch (ending at 2 s) owes nothing, and earns no burst: 2 MB after it take
        // their 2 s.
        assert_eq!(pace.wait(250_000, Duration::from_secs(2)), Duration::ZERO);
        assert_eq!(pace.wait(2_000_000, Duration::from_secs(2)), Duration::from_secs(2));
    }
}
