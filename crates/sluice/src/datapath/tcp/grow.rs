//! How many of a transfer's streams carry data: start with a few, add streams while the
//! aggregate grows and loss does not, and, for a fair share, use fewer when the path is shared
//! (FSP 3.2's rule of thumb of 4 streams; its future work and Ito et al.'s tuning of parallel
//! streams: more streams while they help).
//!
//! Every stream of the ceiling is open from the start (they are dialled together, in one round
//! trip); the [`Grower`] decides how many of them take chunks from the plan. A stream beyond
//! that count finishes the chunk it holds and then idles with keep-alives: to the path it is
//! no flow at all, and making it carry again costs no handshake.
//!
//! The sender decides, for it sees what decides: the rate the receiver confirms, and each
//! stream's `TCP_INFO` (retransmissions, smoothed and least round trip). Time runs in epochs
//! of [`EPOCH_MIN`] or [`EPOCH_RTTS`] round trips, whichever is longer:
//! - **Ramp**: after the start or a change, epochs until the rate stops growing by
//!   [`GAIN`] (TCP's own start-up), at most [`RAMP_EPOCHS`]: the plateau.
//! - At a plateau the grower tries more streams (half as many again, at least one) when there
//!   is room under the ceiling, no standing queue (a full path: more streams would only take
//!   from others, or from each other), loss below [`LOSS_LOW`], and enough of the transfer
//!   left to gain from it.
//! - **Trying**: the next plateau keeps the new streams when the rate grew by [`GAIN`] and the
//!   loss rate did not grow by more than [`LOSS_SLACK`]; else the grower goes back to the
//!   count before and holds.
//! - **Hold**: it tries again after [`REPROBE_EPOCHS`] quiet epochs (paths change).
//! - **Shared** (the fair policy): a queue that stands for [`SHARED_EPOCHS`] epochs (the least
//!   round trip seen in each is [`QUEUE_RATIO`] times the path's and [`QUEUE_MIN`] more) says
//!   the path is full, but not whose traffic fills it: several BBR streams keep about a round
//!   trip's worth queued on a path they fill alone (measured: 200 ms on a 100 ms path). So the
//!   path counts as shared when the rate fell too, below [`ROBBED`] of the best this count
//!   moved: then the grower tries half the streams (**Fewer**), keeps them when they move
//!   [`HOLDS`] of the rate before or when the queue stays (others fill it), and goes back
//!   when the rate fell and the queue went with it (it was the transfer's own). N streams
//!   take about N shares of a shared bottleneck, so fewer is fairer.
//!
//! What this cannot see: a competitor present from the start (the best rate is already a
//! shared one), and one that keeps no queue. And against a loss-based flow (cubic) the
//! unfairness is BBR's more than the count's: one cubic flow beside 2 streams got 31.9 Mbit/s
//! of 1000, beside 4 fixed 65.9 (100 ms, one run each).

use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How often the sender samples its streams.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Shortest epoch: the receiver confirms in steps of a MiB, and TCP's rate swings within a
/// round trip; shorter epochs measured 1.8 Gbit/s on a 1 Gbit/s path.
pub(super) const EPOCH_MIN: Duration = Duration::from_secs(1);
/// An epoch lasts at least this many round trips.
const EPOCH_RTTS: u32 = 8;
/// A rate grew when it is this much above the one it is compared with.
const GAIN: f64 = 1.10;
/// Ramp epochs at most before the rate counts as a plateau.
const RAMP_EPOCHS: u32 = 8;
/// Loss may grow by this much (absolute) or by half, whichever is more, for new streams to stay.
const LOSS_SLACK: f64 = 0.002;
/// More streams are tried only while the loss rate is below this (TCP's start-up overshoot
/// lost a fifth of its segments on a 100 ms path).
const LOSS_LOW: f64 = 0.02;
/// Fewer streams are kept when they hold this share of the rate before.
const HOLDS: f64 = 0.9;
/// Quiet epochs in hold before trying more streams again.
const REPROBE_EPOCHS: u32 = 16;
/// A queue stands when the least round trip of an epoch is this many times the path's...
const QUEUE_RATIO: f64 = 1.5;
/// ...and at least this much above it.
const QUEUE_MIN: Duration = Duration::from_millis(5);
/// Epochs of standing queue in a row that make a fair grower try half its streams (when its
/// rate fell to [`ROBBED`] of its best too).
const SHARED_EPOCHS: u32 = 3;
/// The share of the best rate of a count below which others took some of the path. At 0.85
/// (one TCP flow beside four streams takes a fifth) BBR's own swings at 0.1 % loss read as a
/// fall in 2 runs of 3, halving 4 streams and costing 10 % (684 against 767 Mbit/s): two
/// flows beside four take a third.
const ROBBED: f64 = 0.7;
/// More streams are tried only when the rest of the transfer lasts this many epochs at the
/// plateau's rate.
const WORTH_EPOCHS: f64 = 4.0;

/// How the count of streams carrying data may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// Every stream carries data from the start, always (the user fixed the count).
    Fixed,
    /// Start with a few, add while they help; with `fair`, halve on a shared path.
    Adaptive {
        /// Use fewer streams when a queue stands (the default policy's promise).
        fair: bool,
    },
    /// One stream only (the scavenger policy: over TCP the least the transfer can take).
    Single,
}

/// What the sender measured at one moment, summed or taken over its streams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sample {
    pub(super) at: Instant,
    /// Payload bytes the receiver confirmed, in all.
    pub(super) acked: u64,
    /// Bytes of the transfer not yet confirmed.
    pub(super) remaining: u64,
    /// Segments retransmitted and data segments sent, in all, over the streams.
    pub(super) retransmitted: u64,
    pub(super) segments: u64,
    /// The least smoothed round trip among the streams carrying data, now.
    pub(super) srtt: Duration,
    /// The least round trip any stream ever saw: the path's own (zero while unknown).
    pub(super) path_rtt: Duration,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Waiting for the rate to stop growing; `last` is the previous epoch's rate.
    Ramp { last: Option<f64>, epochs: u32 },
    /// Trying `active` streams after `from` held `rate` at `loss`.
    Trying { from: usize, rate: f64, loss: f64, last: Option<f64>, epochs: u32 },
    /// Trying fewer streams (a standing queue, `fair`) after `from` held `rate`.
    Fewer { from: usize, rate: f64, last: Option<f64>, epochs: u32 },
    /// Holding the count for `epochs` so far; `shrink` whether a standing queue may make the
    /// count halve (not right after fewer streams were undone: the queue was the transfer's
    /// own).
    Hold { epochs: u32, shrink: bool },
}

/// One epoch's measures.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    start: Sample,
    least_srtt: Duration,
}

/// The decision of how many streams carry data.
#[derive(Debug)]
pub(super) struct Grower {
    growth: Growth,
    ceiling: usize,
    active: usize,
    peak: usize,
    state: State,
    epoch: Option<Epoch>,
    /// Epochs in a row with a standing queue.
    queued: u32,
    /// The previous epoch's rate, and for each count the best mean of two epochs in a row
    /// with it (the rate it moved when the path was the transfer's alone, or less shared).
    last_rate: f64,
    best: Vec<f64>,
}

impl Grower {
    /// A grower of `ceiling` open streams, `start` of them carrying data at first (0: all).
    pub(super) fn new(growth: Growth, ceiling: usize, start: usize) -> Self {
        let ceiling = ceiling.max(1);
        let active = match growth {
            Growth::Fixed => ceiling,
            Growth::Single => 1,
            Growth::Adaptive { .. } if start == 0 => ceiling,
            Growth::Adaptive { .. } => start.min(ceiling),
        };
        Self {
            growth,
            ceiling,
            active,
            peak: active,
            state: State::Ramp { last: None, epochs: 0 },
            epoch: None,
            queued: 0,
            last_rate: 0.0,
            best: vec![0.0; ceiling + 1],
        }
    }

    /// Whether the count may change at all (else sampling is for nothing).
    pub(super) fn adapts(&self) -> bool {
        matches!(self.growth, Growth::Adaptive { .. })
    }

    /// Streams with an index below this take chunks.
    pub(super) fn active(&self) -> usize {
        self.active
    }

    /// The most streams that carried data at once.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Takes a sample; returns the new count when it changes.
    pub(super) fn sample(&mut self, now: Sample) -> Option<usize> {
        if !self.adapts() {
            return None;
        }
        let Some(epoch) = &mut self.epoch else {
            self.epoch = Some(Epoch { start: now, least_srtt: now.srtt });
            return None;
        };
        if !now.srtt.is_zero() && (epoch.least_srtt.is_zero() || now.srtt < epoch.least_srtt) {
            epoch.least_srtt = now.srtt;
        }
        let length = EPOCH_MIN.max(now.path_rtt * EPOCH_RTTS);
        let secs = now.at.duration_since(epoch.start.at).as_secs_f64();
        if secs < length.as_secs_f64() {
            return None;
        }
        let epoch = *epoch;
        self.epoch = Some(Epoch { start: now, least_srtt: now.srtt });
        let rate = now.acked.saturating_sub(epoch.start.acked) as f64 / secs;
        let segments = now.segments.saturating_sub(epoch.start.segments);
        let loss = if segments == 0 {
            0.0
        } else {
            now.retransmitted.saturating_sub(epoch.start.retransmitted) as f64 / segments as f64
        };
        let standing = standing_queue(epoch.least_srtt, now.path_rtt);
        self.queued = if standing { self.queued + 1 } else { 0 };
        // Two epochs of this count, or none yet.
        let mean = (self.last_rate > 0.0).then(|| (rate + self.last_rate) / 2.0);
        self.last_rate = rate;
        let best = &mut self.best[self.active];
        *best = best.max(mean.unwrap_or(0.0));
        // A standing queue is the transfer's own too (several BBR flows keep about a round
        // trip's worth in the queue of a path they fill): the path is shared when, besides,
        // the rate the count moved before fell.
        let robbed = mean.is_some_and(|mean| mean <= *best * ROBBED);
        let before = self.active;
        self.epoch_end(rate, loss, standing, robbed, now.remaining as f64 / rate.max(1.0) / secs);
        if self.active != before {
            // The first epoch of a new count is not a mean of two of it.
            self.last_rate = 0.0;
        }
        self.peak = self.peak.max(self.active);
        if self.active != before {
            tracing::debug!(
                from = before,
                to = self.active,
                rate_mbit = (rate * 8.0 / 1e6) as u64,
                loss_pct = loss * 100.0,
                least_rtt_ms = epoch.least_srtt.as_secs_f64() * 1e3,
                path_rtt_ms = now.path_rtt.as_secs_f64() * 1e3,
                "streams carrying data"
            );
            return Some(self.active);
        }
        None
    }

    /// The decision at the end of an epoch that moved `rate` bytes/s at `loss`, with the rest
    /// of the transfer `epochs_left` epochs long at that rate.
    fn epoch_end(&mut self, rate: f64, loss: f64, standing: bool, robbed: bool, epochs_left: f64) {
        let fair = matches!(self.growth, Growth::Adaptive { fair: true });
        let shared = fair && self.queued >= SHARED_EPOCHS && robbed && self.active > 1;
        self.state = match self.state {
            State::Ramp { last, epochs } => match plateau(last, rate, epochs) {
                Some(plateau) => self.try_more(plateau, loss, standing, epochs_left),
                None => State::Ramp { last: Some(rate), epochs: epochs + 1 },
            },
            State::Trying { from, rate: was, loss: had, last, epochs } => {
                match plateau(last, rate, epochs) {
                    None => {
                        let last = Some(rate);
                        State::Trying { from, rate: was, loss: had, last, epochs: epochs + 1 }
                    }
                    Some(plateau)
                        if plateau >= was * GAIN && loss <= had + LOSS_SLACK.max(had / 2.0) =>
                    {
                        self.try_more(plateau, loss, standing, epochs_left)
                    }
                    Some(_) => {
                        self.active = from;
                        State::Hold { epochs: 0, shrink: true }
                    }
                }
            }
            State::Fewer { from, rate: was, last, epochs } => match plateau(last, rate, epochs) {
                None => State::Fewer { from, rate: was, last: Some(rate), epochs: epochs + 1 },
                // Fewer streams moved as much, or the queue stayed while the rate fell (others
                // took the share: the path is shared): keep them.
                Some(plateau) if plateau >= was * HOLDS || standing => {
                    State::Hold { epochs: 0, shrink: true }
                }
                // The rate fell and the queue went: it was the transfer's own.
                Some(_) => {
                    self.active = from;
                    State::Hold { epochs: 0, shrink: false }
                }
            },
            State::Hold { shrink: true, .. } if shared => self.try_fewer(rate),
            State::Hold { epochs, .. } if epochs + 1 >= REPROBE_EPOCHS && !standing => {
                self.try_more(rate, loss, standing, epochs_left)
            }
            State::Hold { epochs, shrink } if epochs + 1 >= REPROBE_EPOCHS => {
                // Paths change: a queue that stands again may be others' this time.
                State::Hold { epochs: 0, shrink: shrink || standing }
            }
            State::Hold { epochs, shrink } => State::Hold { epochs: epochs + 1, shrink },
        };
    }

    /// At a plateau of `rate`: more streams when they may help, else hold.
    fn try_more(&mut self, rate: f64, loss: f64, standing: bool, epochs_left: f64) -> State {
        let room = self.active < self.ceiling;
        if !room || standing || loss > LOSS_LOW || epochs_left < WORTH_EPOCHS {
            return State::Hold { epochs: 0, shrink: true };
        }
        let from = self.active;
        self.active = (from + (from / 2).max(1)).min(self.ceiling);
        State::Trying { from, rate, loss, last: None, epochs: 0 }
    }

    /// A queue stood for [`SHARED_EPOCHS`] at `rate`: half the streams (not below one).
    fn try_fewer(&mut self, rate: f64) -> State {
        let from = self.active;
        self.active = (from / 2).max(1);
        self.queued = 0;
        State::Fewer { from, rate, last: None, epochs: 0 }
    }
}

/// A sample of the streams' `TCP_INFO` (`probes`, the first `carrying` of them carrying data)
/// with the transfer's `acked` and `remaining` bytes; `path_rtt` keeps the least round trip
/// seen across samples.
pub(super) fn sample(
    probes: &[Option<TcpStream>],
    carrying: usize,
    acked: u64,
    remaining: u64,
    at: Instant,
    path_rtt: &mut Duration,
) -> Sample {
    let mut out = Sample {
        at,
        acked,
        remaining,
        retransmitted: 0,
        segments: 0,
        srtt: Duration::ZERO,
        path_rtt: *path_rtt,
    };
    for (index, probe) in probes.iter().enumerate() {
        let Some(Ok(info)) = probe.as_ref().map(sluice_udp::tcp_rtt) else { continue };
        out.retransmitted += u64::from(info.retransmitted);
        out.segments += u64::from(info.data_segs_out);
        let least = Duration::from_micros(u64::from(info.min_rtt_us));
        if info.min_rtt_us > 0 && (out.path_rtt.is_zero() || least < out.path_rtt) {
            out.path_rtt = least;
        }
        let srtt = Duration::from_micros(u64::from(info.rtt_us));
        if index < carrying && info.rtt_us > 0 && (out.srtt.is_zero() || srtt < out.srtt) {
            out.srtt = srtt;
        }
    }
    *path_rtt = out.path_rtt;
    out
}

/// Whether `rate` after `last` ends a ramp (it grew less than [`GAIN`], or the ramp is long):
/// the plateau's rate.
fn plateau(last: Option<f64>, rate: f64, epochs: u32) -> Option<f64> {
    let last = last?;
    (rate < last * GAIN || epochs + 1 >= RAMP_EPOCHS).then_some(rate.max(last))
}

/// Whether the least round trip of an epoch shows a queue on a path of `path_rtt`.
fn standing_queue(least_srtt: Duration, path_rtt: Duration) -> bool {
    !path_rtt.is_zero()
        && least_srtt.as_secs_f64() >= path_rtt.as_secs_f64() * QUEUE_RATIO
        && least_srtt >= path_rtt + QUEUE_MIN
}

#[cfg(test)]
mod tests;
