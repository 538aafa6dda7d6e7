//! Path MTU probing on a data channel (the idea of RFC 8899, DPLPMTUD, on our own packets).
//!
//! The kernel's path MTU, which the driver checks before the first packet, cannot see a link
//! narrower than it believes that drops large packets without sending ICMP back: many tunnels
//! and VPNs. Through such a black hole every full-size data packet vanishes and the channel
//! hears nothing. So a sender whose packet size is above [`BASE_PACKET_SIZE`] sends its data in
//! packets of the base size (which every IPv6 path, and nearly every IPv4 one, carries) until
//! the receiver has answered one of a few probes of the full size, then goes to the full size.
//! Data never waits for the answer: it only starts smaller, for about a round trip. If no probe
//! is answered, the channel keeps the base size and says so ([`Probe::BlackHole`]).
//!
//! A probe is a control packet of its own ([`Control::Probe`](crate::wire::Control::Probe),
//! padded to the size tried) answered by a probe-ack, not a data packet: a lost probe holds up
//! no acknowledgement and carries no byte that would have to be sent again.

/// A UDP datagram size that fits any path that carries IPv6 (a 1280-byte MTU less 40 bytes of
/// IPv6 and 8 of UDP header), and so nearly every IPv4 path too: the size data packets start
/// at, and the one to fall back to.
pub const BASE_PACKET_SIZE: usize = 1232;

/// The largest datagram a channel whose packet size is `packet_size` starts with: that size, or
/// [`BASE_PACKET_SIZE`] when it is larger and must be probed first.
pub fn starting_datagram_bytes(packet_size: usize) -> usize {
    packet_size.min(BASE_PACKET_SIZE)
}

/// Probes of the full size sent at most, [`PROBE_SPACING_US`] apart; three lost in a row at 3 %
/// random loss is a chance of 27 in a million.
pub const PROBES: u32 = 3;

/// Time between two probes.
pub const PROBE_SPACING_US: u64 = 10_000;

/// How long after the last probe an answer is still awaited: this many round trips, and at
/// least [`MIN_WAIT_US`].
pub const WAIT_RTTS: u64 = 3;

/// The least wait for an answer after the last probe.
pub const MIN_WAIT_US: u64 = 200_000;

/// Where the probing of one channel stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The packet size is the base size or less: nothing to find out.
    Off,
    /// Probes of the full size are out (`sent` of them so far); data goes at the base size.
    Probing {
        /// Probes sent so far.
        sent: u32,
        /// When the next probe is due, or after the last one, when the wait for an answer ends.
        next_us: u64,
    },
    /// A probe was answered: the path carries the full size.
    Confirmed,
    /// No probe was answered: data stays at the base size.
    BlackHole,
}

/// The probing state machine of one sending channel: no I/O, no clock.
#[derive(Debug, Clone)]
pub struct PathProbe {
    full_bytes: usize,
    state: Probe,
}

impl PathProbe {
    /// Probing for datagrams of `packet_size` bytes, starting at `now_us`.
    pub fn new(packet_size: usize, now_us: u64) -> Self {
        let state = if packet_size > BASE_PACKET_SIZE {
            Probe::Probing { sent: 0, next_us: now_us }
        } else {
            Probe::Off
        };
        Self { full_bytes: packet_size, state }
    }

    /// Where it stands.
    pub fn state(&self) -> Probe {
        self.state
    }

    /// The largest datagram a data packet may be now.
    pub fn datagram_bytes(&self) -> usize {
        match self.state {
            Probe::Confirmed => self.full_bytes,
            Probe::Off | Probe::Probing { .. } | Probe::BlackHole => {
                starting_datagram_bytes(self.full_bytes)
            }
        }
    }

    /// The size the probes are padded to.
    pub fn full_bytes(&self) -> usize {
        self.full_bytes
    }

    /// When [`PathProbe::poll`] has something to do, while probing.
    pub fn deadline_us(&self) -> Option<u64> {
        match self.state {
            Probe::Probing { next_us, .. } => Some(next_us),
            _ => None,
        }
    }

    /// At `now_us`, with the channel's round trip `rtt_us`: the id of a probe to send now, if
    /// one is due. After the last probe's wait has passed unanswered it gives up: the state
    /// becomes [`Probe::BlackHole`].
    pub fn poll(&mut self, now_us: u64, rtt_us: u64) -> Option<u32> {
        let Probe::Probing { sent, next_us } = self.state else { return None };
        if now_us < next_us {
            return None;
        }
        if sent == PROBES {
            self.state = Probe::BlackHole;
            return None;
        }
        let sent = sent + 1;
        let next_us = if sent == PROBES {
            now_us + (WAIT_RTTS * rtt_us).max(MIN_WAIT_US)
        } else {
            now_us + PROBE_SPACING_US
        };
        self.state = Probe::Probing { sent, next_us };
        Some(sent)
    }

    /// The receiver answered probe `id`. An answer to a probe never sent is ignored; one that
    /// comes after the channel gave up still counts (the path carries the size after all).
    pub fn on_answer(&mut self, id: u32) {
        let sent = match self.state {
            Probe::Probing { sent, .. } => sent,
            Probe::BlackHole => PROBES,
            Probe::Off | Probe::Confirmed => return,
        };
        if (1..=sent).contains(&id) {
            self.state = Probe::Confirmed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls every millisecond from `from_us` until `until_us`; the times probes went out.
    fn run(p: &mut PathProbe, from_us: u64, until_us: u64, rtt_us: u64) -> Vec<(u64, u32)> {
        (from_us..until_us)
            .step_by(1000)
            .filter_map(|now| p.poll(now, rtt_us).map(|id| (now, id)))
            .collect()
    }

    #[test]
    fn a_size_at_or_below_the_base_is_not_probed() {
        let mut p = PathProbe::new(BASE_PACKET_SIZE, 0);
        assert_eq!(p.state(), Probe::Off);
        assert_eq!(p.datagram_bytes(), BASE_PACKET_SIZE);
        assert_eq!(p.poll(0, 1000), None);
        assert_eq!(p.deadline_us(), None);
        let small = PathProbe::new(600, 0);
        assert_eq!(small.datagram_bytes(), 600);
    }

    #[test]
    fn data_starts_at_the_base_size_and_goes_full_at_the_first_answer() {
        let mut p = PathProbe::new(1472, 5_000);
        assert_eq!(p.datagram_bytes(), BASE_PACKET_SIZE);
        assert_eq!(run(&mut p, 5_000, 30_000, 100_000), [(5_000, 1), (15_000, 2), (25_000, 3)]);
        p.on_answer(2);
        assert_eq!(p.state(), Probe::Confirmed);
        assert_eq!(p.datagram_bytes(), 1472);
        assert_eq!(p.poll(10_000_000, 100_000), None);
    }

    #[test]
    fn no_answer_in_three_round_trips_after_the_last_probe_is_a_black_hole() {
        let mut p = PathProbe::new(1472, 0);
        assert_eq!(run(&mut p, 0, 20_001, 100_000).len(), 3);
        // The last probe went at 20 ms; the wait is 3 round trips of 100 ms.
        assert_eq!(p.deadline_us(), Some(320_000));
        assert_eq!(p.poll(319_999, 100_000), None);
        assert!(matches!(p.state(), Probe::Probing { sent: 3, .. }));
        assert_eq!(p.poll(320_000, 100_000), None);
        assert_eq!(p.state(), Probe::BlackHole);
        assert_eq!(p.datagram_bytes(), BASE_PACKET_SIZE);
        // On a short path the wait is at least MIN_WAIT_US.
        let mut q = PathProbe::new(9000, 0);
        run(&mut q, 0, 20_001, 1_000);
        assert_eq!(q.deadline_us(), Some(20_000 + MIN_WAIT_US));
    }

    #[test]
    fn only_an_answer_to_a_probe_sent_counts_and_a_late_one_still_does() {
        let mut p = PathProbe::new(1472, 0);
        p.on_answer(1);
        assert!(matches!(p.state(), Probe::Probing { sent: 0, .. }), "nothing was sent yet");
        assert_eq!(p.poll(0, 50_000), Some(1));
        p.on_answer(0);
        p.on_answer(2);
        assert!(matches!(p.state(), Probe::Probing { sent: 1, .. }));
        run(&mut p, 1_000, 1_000_000, 50_000);
        assert_eq!(p.state(), Probe::BlackHole);
        p.on_answer(3);
        assert_eq!(p.state(), Probe::Confirmed);
        assert_eq!(p.datagram_bytes(), 1472);
    }
}
