//! The sender's rate cap: one schedule shared by all streams of a transfer, on which each
//! record reserves its time before it is queued.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Time a stream that fell behind (a wait, a blocked socket) may catch up at once: more would
/// let an idle stretch be spent as a burst above the cap.
const CATCH_UP: Duration = Duration::from_millis(10);

/// A cap on the payload bytes all streams of a transfer put on the wire.
#[derive(Debug)]
pub(super) struct Pacer {
    /// Bits per second; 0: no cap.
    rate_bps: u64,
    /// When the next record may go.
    next: Mutex<Option<Instant>>,
}

impl Pacer {
    pub(super) fn new(rate_bps: u64) -> Self {
        Self { rate_bps, next: Mutex::new(None) }
    }

    /// Whether a record may go at `now`, else when to ask again.
    pub(super) fn ready(&self, now: Instant) -> Result<(), Instant> {
        match *self.lock() {
            Some(next) if self.rate_bps > 0 && next > now => Err(next),
            _ => Ok(()),
        }
    }

    /// Counts `bytes` sent at `now`: the next record waits their time at the rate. Streams
    /// that found the schedule ready together each charge it, so the schedule runs ahead and
    /// the next records wait the longer: the cap holds on average.
    pub(super) fn charge(&self, bytes: u64, now: Instant) {
        if self.rate_bps == 0 {
            return;
        }
        let mut next = self.lock();
        let earliest = now.checked_sub(CATCH_UP).unwrap_or(now);
        let at = next.map_or(now, |n| n.max(earliest));
        let nanos = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(self.rate_bps);
        *next = Some(at + Duration::from_nanos(nanos.min(u128::from(u64::MAX)) as u64));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.next.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `bytes` at `now` if the pacer lets it.
    fn take(pacer: &Pacer, bytes: u64, now: Instant) -> Result<(), Instant> {
        pacer.ready(now)?;
        pacer.charge(bytes, now);
        Ok(())
    }

    #[test]
    fn records_are_spaced_by_their_time_at_the_rate() {
        let pacer = Pacer::new(8_000_000); // 1 MB/s
        let t0 = Instant::now();
        assert_eq!(take(&pacer, 500_000, t0), Ok(()));
        let half = t0 + Duration::from_millis(500);
        assert_eq!(take(&pacer, 1, t0 + Duration::from_millis(100)), Err(half));
        assert_eq!(take(&pacer, 1_000_000, half), Ok(()));
        assert_eq!(take(&pacer, 1, half), Err(half + Duration::from_secs(1)));
    }

    #[test]
    fn streams_ready_together_push_the_schedule_on() {
        let pacer = Pacer::new(8_000_000);
        let t0 = Instant::now();
        // Two streams find it ready at once and both send 1 MB: the next waits 2 s.
        assert!(pacer.ready(t0).is_ok() && pacer.ready(t0).is_ok());
        pacer.charge(1_000_000, t0);
        pacer.charge(1_000_000, t0);
        assert_eq!(pacer.ready(t0 + Duration::from_secs(1)), Err(t0 + Duration::from_secs(2)));
    }

    #[test]
    fn an_idle_stretch_is_not_spent_as_a_burst() {
        let pacer = Pacer::new(8_000_000);
        let t0 = Instant::now();
        assert_eq!(take(&pacer, 1_000, t0), Ok(()));
        // Ten seconds idle: the schedule restarts CATCH_UP before now, not ten seconds back.
        let later = t0 + Duration::from_secs(10);
        let mut sent = 0;
        while take(&pacer, 1_000, later).is_ok() {
            sent += 1_000;
        }
        assert_eq!(sent, 11_000, "10 ms of catch-up at 1 MB/s, and the record that starts now");
    }

    #[test]
    fn no_cap_never_waits() {
        let pacer = Pacer::new(0);
        let t0 = Instant::now();
        assert!((0..1000).all(|_| take(&pacer, 1 << 20, t0).is_ok()));
    }
}
