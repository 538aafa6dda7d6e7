//! The timer table: every timer of a channel end in one small array indexed by [`Timer`].

/// The timers of a channel end. Each end uses the ones that concern it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Receiver: send an ACK (every SYN).
    Ack = 0,
    /// Receiver: resend the loss list (interval grows while nothing is repaired).
    Nak = 1,
    /// Sender: no feedback for a while; assume everything unacknowledged is lost (with backoff).
    Exp = 2,
    /// Sender: nothing sent for a while; send a keep-alive.
    KeepAlive = 3,
    /// Either end: nothing heard from the peer for the idle timeout; the channel is broken.
    Idle = 4,
}

const COUNT: usize = 5;
const ALL: [Timer; COUNT] = [Timer::Ack, Timer::Nak, Timer::Exp, Timer::KeepAlive, Timer::Idle];

/// Deadlines in microseconds, one slot per [`Timer`].
#[derive(Debug, Clone, Default)]
pub struct TimerTable {
    deadline_us: [Option<u64>; COUNT],
}

impl TimerTable {
    /// Arms `timer` to fire at `at_us` (replacing any earlier deadline).
    pub fn set(&mut self, timer: Timer, at_us: u64) {
        self.deadline_us[timer as usize] = Some(at_us);
    }
    /// Disarms `timer`.
    pub fn stop(&mut self, timer: Timer) {
        self.deadline_us[timer as usize] = None;
    }
    /// The deadline of `timer`, if armed.
    pub fn get(&self, timer: Timer) -> Option<u64> {
        self.deadline_us[timer as usize]
    }
    /// Whether `timer` is armed and due at `now_us`.
    pub fn is_due(&self, timer: Timer, now_us: u64) -> bool {
        self.get(timer).is_some_and(|t| t <= now_us)
    }
    /// The earliest armed deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadline_us.iter().flatten().copied().min()
    }
    /// The timers due at `now_us`, in table order.
    pub fn due(&self, now_us: u64) -> impl Iterator<Item = Timer> + '_ {
        ALL.into_iter().filter(move |t| self.is_due(*t, now_us))
    }
}

/// The earlier of two optional deadlines.
#[cfg(feature = "channel")]
pub(crate) fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_deadline_and_due_set() {
        let mut t = TimerTable::default();
        assert_eq!(t.next_deadline(), None);
        t.set(Timer::Nak, 50);
        t.set(Timer::Ack, 20);
        t.set(Timer::Idle, 90);
        assert_eq!(t.next_deadline(), Some(20));
        assert_eq!(t.due(60).collect::<Vec<_>>(), vec![Timer::Ack, Timer::Nak]);
        t.stop(Timer::Ack);
        assert_eq!(t.next_deadline(), Some(50));
        assert!(!t.is_due(Timer::Idle, 89));
        assert!(t.is_due(Timer::Idle, 90));
    }
}
