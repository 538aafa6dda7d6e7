//! The time the machines take. Every call that needs it is handed `now` by its driver; the
//! machines only add durations to it and compare.
//!
//! [`Instant`] is `std::time::Instant` wherever the standard library has a clock (the
//! quinn-and-files driver reads it there). `wasm32-unknown-unknown` has none (its
//! `Instant::now` panics), so there it is [`Moment`]: a time the page reads itself
//! (`performance.now()`) and hands over as the time since its own origin.

use std::ops::Add;
use std::time::Duration;

/// What the machines' `now` is: the standard library's instant where it has a clock.
#[cfg(not(target_arch = "wasm32"))]
pub type Instant = std::time::Instant;

/// What the machines' `now` is: a [`Moment`] the page read, in the browser.
#[cfg(target_arch = "wasm32")]
pub type Instant = Moment;

/// A point in time as the time since an origin its reader chose (the page's
/// `performance.timeOrigin`): all a machine needs of an instant, with no clock behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Moment(Duration);

impl Moment {
    /// The moment `since` after the origin.
    pub fn from_origin(since: Duration) -> Moment {
        Moment(since)
    }

    /// The moment `ms` milliseconds after the origin, as `performance.now()` gives it
    /// (fractional; a negative or non-finite reading is the origin).
    pub fn from_millis(ms: f64) -> Moment {
        Moment(Duration::try_from_secs_f64(ms / 1e3).unwrap_or_default())
    }

    /// The time since the origin.
    pub fn since_origin(self) -> Duration {
        self.0
    }
}

impl Add<Duration> for Moment {
    type Output = Moment;

    /// The moment `wait` later (at the far end of time if that overflows: a wait that long never
    /// ends, as `Instant`'s would have panicked).
    fn add(self, wait: Duration) -> Moment {
        Moment(self.0.checked_add(wait).unwrap_or(Duration::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_adds_and_orders_as_an_instant_does() {
        let start = Moment::from_millis(1_500.25);
        assert_eq!(start.since_origin(), Duration::from_micros(1_500_250));
        let later = start + Duration::from_secs(2);
        assert!(later > start);
        assert_eq!(later, Moment::from_origin(Duration::from_micros(3_500_250)));
        assert_eq!(Moment::from_millis(-3.0), Moment::default());
        assert_eq!(Moment::from_millis(f64::NAN), Moment::default());
        assert_eq!(start + Duration::MAX, Moment::from_origin(Duration::MAX));
    }
}
