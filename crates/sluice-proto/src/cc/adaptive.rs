//! Sluice's default controller: UDT's rate-based structure that does not mistake random loss for
//! congestion. The algorithm and its reasoning are in `adaptive.md` beside this file.

use super::filters::{RecentMax, RecentMin, RecentQuantile};
use super::{AckSignal, CongestionControl, LossSignal, WindowBasis, udt_increase_pkts};
use crate::SYN_US;
use crate::estimate::{DELIVERY_WINDOW_US, UNRESOLVED_PPS};

const SYN: f64 = SYN_US as f64;
/// Floor of the sending rate.
const MIN_RATE_PPS: f64 = 100.0;
/// On a short path the queuing-delay target is at least this (see
/// [`Adaptive::target_queue_delay_us`])...
const SHORT_PATH_TARGET_US: f64 = 4_000.0;
/// ...or this share of the base RTT where that is less (from 5 to 10 ms: 2-4 ms).
const SHORT_PATH_TARGET_SHARE: f64 = 0.4;
/// Multiplicative decrease on congestion (UDT's 1/1.125 expressed as a rate factor).
const DECREASE: f64 = 1.0 / 1.125;
/// The least cut for a loss at a queue between half the target and the target: what drains it
/// to half the target in a round trip, at least this.
const LOSS_AT_QUEUE_DECREASE: f64 = 1.0 - 1.0 / 32.0;
/// The deepest single cut (to half), for a queue far above its target.
const MAX_DECREASE: f64 = 0.5;
/// On leaving startup, the rate is set this far below the measured delivery rate so the queue
/// built while probing drains.
const DRAIN: f64 = 0.85;
/// One RTT after leaving startup on congestion (the queue has drained), the rate is brought back
/// up to this share of the highest delivery rate measured in startup, when the queue is gone:
/// UDT's increase alone took 4 s to climb back from the drain on a 1 Gbit/s, 100 ms path.
const RESTORE: f64 = 0.95;
/// How long after leaving startup on congestion the restore waits for the queue to drain, in
/// round trips (RTT + SYN). Doubling per round trip overshoots by up to one round trip of
/// sending at twice the link: on a 300 ms path a queue of 150-190 ms, which the drain rate empties
/// in about a second. The further cuts that queue triggers meanwhile answer the same overshoot,
/// so they do not cancel the restore.
const STARTUP_DRAIN_RTTS: f64 = 5.0;
/// Startup that ends at the capacity with the rate above this multiple of it overshot (see
/// [`Adaptive::leave_startup`]); one step of growth (an ACK interval) is at most 7 % at 100 ms.
const OVERSHOT: f64 = 1.1;
/// Once the packet pairs have measured the link, startup resumes from at least this share of it.
const STARTUP_FLOOR_OF_CAPACITY: f64 = 0.25;
/// A queue that stands above the target this many round trips (RTT + SYN), at least
/// [`COMPETE_MIN_US`], through this flow's own cuts is another flow's: a loss-based one (TCP
/// cubic) that fills the queue whatever we do. The flow then competes (see
/// [`Adaptive::competing`]) until the queue drains below half the target.
const COMPETE_AFTER_RTTS: f64 = 8.0;
/// See [`COMPETE_AFTER_RTTS`]: longer than startup's drain (5 round trips) at any RTT.
const COMPETE_MIN_US: f64 = 1_000_000.0;
/// While competing, a cut for loss at a full queue is cubic's (TCP's beta of 0.7).
const COMPETE_DECREASE: f64 = 0.7;
/// A start from path memory ([`Adaptive::start_from`]) is at this share of the remembered
/// delivered rate, and ends at it (of a trusted capacity, where that is lower), not at
/// [`RESTORE`]'s: that margin under the link is for the queue startup's doubling built to
/// drain, and a held start builds none; the remembered rate is a windowed maximum, 1-2 % over
/// what the link carries. Measured in `adaptive.md` ("Path memory").
const MEMORY_START: f64 = 0.98;
/// A start from path memory ([`Adaptive::start_from`]) counts as confirmed once the delivery
/// rate reaches this share of the rate.
const MEMORY_CONFIRMED: f64 = 0.8;
/// A start from path memory not confirmed within this many round trips (RTT + SYN), plus a
/// delivery window, from the first report was wrong about the path.
const MEMORY_CHECK_RTTS: f64 = 2.0;
/// A capacity estimate at or above this is the receiver's clock resolution, not a measured link
/// ([`UNRESOLVED_PPS`]): startup does not jump to a share of it.
const UNRESOLVED_CAPACITY_PPS: f64 = UNRESOLVED_PPS as f64;
/// In steady state a queue counts only once it stood this long (the minimum of the reports over
/// this window): a host or emulator stalling for a few milliseconds reports one high queue, and
/// with 1 % random loss a NAK always comes with it. On our emulated 100 ms path such stalls
/// (5-6 ms) cut the rate every second or two at 75 % of the link.
const STANDING_US: u64 = 30_000;
/// The link capacity is the least the packet pairs reported over this window while they are
/// distrusted. Bunched delivery (a host or emulator stall, interrupt coalescing) only ever makes
/// pairs read faster: through our emulated 1 Gbit/s path the reports flip between 1 and 3-4
/// Gbit/s. Taken as they come, the junk readings made UDT's increase ten times too steep (a
/// decade above the link), and at 300 ms RTT each climb overshot into a 20-40 ms queue before
/// the feedback came back.
const CAPACITY_WINDOW_US: u64 = 1_000_000;
/// While the pairs are trusted (they agree within [`CONTRADICTED_SPREAD`]), the link is this
/// quantile of the window's reports (its last 64: about 0.64 s at one per SYN), not the least: on a busy host the pairs scatter both ways,
/// and the least of a second's reports is the low tail. Through the relay topology's 100 Mbit/s
/// links (4 ms, a sender and three relays on 2 cores) the median read the link, the least of a
/// second 0.85-0.90 of it, and after the first cut each deposit held there, at 83-87 Mbit/s.
const LINK_QUANTILE: f64 = 0.25;
/// While the delivered rate caps the rate (the pairs distrusted), UDT's increase is sized by this
/// quantile of the same reports. The cap, not the step, bounds where the rate goes then; the step
/// only says how fast the rate comes back to the cap after a cut, and for AIMD's convergence every
/// flow on the path must take the same one. The least report of a second is each flow's own luck:
/// with packets released every 50 µs a pair across two wakes reads 20,000 packets a second, one
/// within a wake the clock's 1,000,000, and UDT's step goes by the decade of the spare capacity.
/// In the simulator two flows cut together (both startups ended at the whole link) climbed back
/// at 12 and 120 Mbit/s a second, the one whose last second held such a straddle the slower, and
/// then shared the full link at 262 and 646 Mbit/s for 20 s with a queue under the target
/// (Jain 0.844; the bench's two flows read 0.843 on a real host). An upper quartile is the same
/// for every flow through one receive path.
const CAPPED_LINK_QUANTILE: f64 = 0.75;
/// The delivered rate is the greatest delivery rate reported over this many round trips (RTT +
/// SYN), at least [`DELIVERED_MIN_WINDOW_US`]: several probe cycles, so a probe that found more
/// is kept, and a report dipped by a stall or a cut does not lower it.
const DELIVERED_WINDOW_RTTS: f64 = 10.0;
/// The least window of the delivered rate.
const DELIVERED_MIN_WINDOW_US: f64 = 1_000_000.0;
/// In steady state the sending rate never exceeds the delivered rate by more than this, and
/// only while probing; the controller's own rate is held at most this far above it.
const PROBE_GAIN: f64 = 1.25;
/// The least gain of the cruise (see [`Adaptive::cruise_gain`]). After a probe the rate is
/// held as far below the delivered rate as the probe went above it, for as long, which drains
/// what the probe queued: at most this far below.
const DRAIN_GAIN: f64 = 0.75;
/// A probe lasts this many queuing-delay targets: at [`PROBE_GAIN`] it queues at most half the
/// target, so a probe alone never reads as congestion. The pacer's gain changes only when the
/// controller hears from the path (an ACK every SYN, or a NAK), so a probe shorter than a SYN
/// lasts one, at a gain that queues the same (see [`Adaptive::pace`]).
const PROBE_TARGETS: f64 = 2.0;
/// A probe cycle (probe, drain, cruise at about the delivered rate) lasts at least this many
/// round trips (RTT + SYN): a probe's result comes back one round trip later.
const CYCLE_RTTS: f64 = 2.0;
/// A probe cycle probes only while the standing queue is under this share of the target: a
/// queue that stands says the link is full (see [`Adaptive::cruise_gain`]).
const PROBE_QUEUE_SHARE: f64 = 0.25;
/// The loss ratio counted back into the delivered rate is at most this (the delivered rate
/// counts what arrived; the path carried the lost packets too, up to the random loss).
const MAX_LOSS_COMPENSATION: f64 = 0.2;
/// The packet pairs are taken as contradicted (the receive path bunches or spreads packets) when
/// the greatest report of the last second exceeds the least by this factor, or the least is
/// below this share of the delivered rate ([`CONTRADICTED_SHARE`]).
const CONTRADICTED_SPREAD: f64 = 1.5;
/// See [`CONTRADICTED_SPREAD`].
const CONTRADICTED_SHARE: f64 = 0.8;
/// Once contradicted, the pairs stay distrusted (and the delivered rate caps the rate) this long.
const DISTRUST_US: u64 = 10_000_000;
/// Loss-rate epochs needed before the loss-trend signal is trusted.
const LOSS_EPOCHS_BEFORE_TREND: u32 = 4;
/// UDT's increase is a step per SYN whatever the round trip, sized for paths of about this one
/// (RTT + SYN). At shorter ones the step is taken more often, in proportion, up to
/// [`MAX_INCREASE_SCALE`] times: the rate then climbs back from a cut in as many round trips as
/// at this one. Per SYN alone, a cut at 10 ms took 2 s (200 round trips) to climb back through
/// `linkem`, and the rate sat 10-25 % below the link.
const INCREASE_REF_US: f64 = 100_000.0 + SYN;
/// See [`INCREASE_REF_US`].
const MAX_INCREASE_SCALE: f64 = 8.0;
/// The `low` policy's queuing-delay target, as a share of the fair one.
const SCAVENGER_TARGET_SHARE: f64 = 0.25;
/// The `low` policy's increase right after a cut, as a share of UDT's; it grows back to all of
/// it over [`SCAVENGER_PATIENCE_US`] without another cut.
const SCAVENGER_INCREASE_SHARE: f64 = 0.125;
/// How long after its last cut the `low` policy climbs at full speed again: beside a fair flow
/// the next cut comes first; alone it is back to UDT's pace. (Probing with startup's doubling
/// instead overshot beside a fair flow: in the simulator it took the fair one from 837 to 520
/// Mbit/s.)
const SCAVENGER_PATIENCE_US: f64 = 3_000_000.0;
/// The `low` policy's target is never below this: the receiver's one-way delay estimate and the
/// host's scheduling are not finer.
const SCAVENGER_MIN_TARGET_US: f64 = 1_000.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Rate doubles every RTT until the queue grows or the link capacity is reached.
    Startup,
    /// UDT's increase while the queue is short; multiplicative decrease on congestion signals.
    Steady,
}

/// Delay-aware, loss-tolerant rate control (see the module docs).
#[derive(Debug, Clone)]
pub struct Adaptive {
    /// Whether this is the `low` policy's scavenger (a quarter of the fair target).
    scavenger: bool,
    mss_bytes: f64,
    max_window_pkts: f64,
    phase: Phase,
    rate_pps: f64,
    /// Rate just before the last decrease (UDT's "last decrease" reference for `L/9`).
    last_dec_rate_pps: f64,
    last_decrease_us: u64,
    /// The queuing delay reported when the last decrease was made.
    last_decrease_queue_us: f64,
    last_update_us: Option<u64>,
    rtt_us: f64,
    min_rtt_us: f64,
    /// The queuing delay of the latest report (startup reacts to it at once).
    queue_delay_us: f64,
    /// The queue that stood over the last [`STANDING_US`] (what steady state reacts to).
    standing: RecentMin,
    /// What gets through: the receiver's delivery rate, or UDT's arrival speed until it has one.
    recv_rate_pps: f64,
    /// The latest packet-pair capacity report (startup's guide: a pair stretched by a late
    /// wake-up reads low, and one low reading must not end the probing).
    capacity_pps: f64,
    /// The least capacity report over [`CAPACITY_WINDOW_US`]: the link, while the pairs are
    /// distrusted (bunching reads them fast), and the yardstick of that distrust.
    link: RecentMin,
    /// The capacity reports of the last [`CAPACITY_WINDOW_US`]: their [`LINK_QUANTILE`] is the
    /// link while the pairs are trusted.
    link_reports: RecentQuantile,
    /// The highest delivery rate reported during startup (what the bottleneck carried once a
    /// queue stood).
    startup_delivery_pps: f64,
    /// Capacity reports in a row in startup that were at or below the rate then: the rate holds
    /// after the first, and startup ends at the capacity on the second.
    startup_capacity_hits: u32,
    /// After a congested startup or a provisional cut: the rate to come back to once the queue
    /// is gone.
    restore: Option<Restore>,
    loss: LossTrend,
    /// What the path was seen to deliver: the greatest delivery rate (corrected for the
    /// long-run loss ratio) over the last [`DELIVERED_WINDOW_RTTS`] round trips.
    delivered: RecentMax,
    /// Start of the current probe cycle (steady state).
    cycle_start_us: u64,
    /// When startup ended: the delivered rate lags it by a round trip and a delivery window.
    steady_since_us: u64,
    /// Whether the delivered rate caps the rate (steady state, once it covers it, while the
    /// packet pairs are distrusted).
    capping: bool,
    /// Whether this probe cycle probes (no queue when it began).
    probing: bool,
    /// The most this cycle's probe paced above the delivered rate, as a gain (1: it did not
    /// probe): its drain goes as far below.
    probed_gain: f64,
    /// The greatest capacity report over [`CAPACITY_WINDOW_US`].
    link_max: RecentMax,
    /// Until when the packet pairs are distrusted (see [`CONTRADICTED_SPREAD`]).
    distrust_until_us: u64,
    /// The rate the pacer uses: the controller's rate, capped by the delivered rate times the
    /// probe cycle's gain (see [`Adaptive::pace`]).
    pace_pps: f64,
    /// A start from path memory that the delivery has not confirmed yet: startup holds its
    /// rate until then (see [`Adaptive::start_from`]).
    memory: Option<MemoryStart>,
    /// The delivered rate once settled in steady state (what path memory keeps).
    path_pps: f64,
    /// Since when the queue has stood above the target (steady state), if it does.
    standing_since_us: Option<u64>,
    /// Whether another flow fills the queue whatever we do: delay is no signal then, loss is.
    compete: bool,
    /// Since when the queue has stood below half the target while competing, if it does.
    drained_since_us: Option<u64>,
}

/// A start from path memory being checked.
#[derive(Debug, Clone, Copy)]
struct MemoryStart {
    /// The first report's time (the check's deadline counts from there), once it came.
    first_report_us: Option<u64>,
}

/// A rate to come back to once the queue has drained (see [`Adaptive::decrease`] and
/// [`Adaptive::leave_startup`]).
#[derive(Debug, Clone, Copy)]
struct Restore {
    /// When the cut was made: the restore is looked at from one RTT + SYN later.
    cut_us: u64,
    to_pps: f64,
    /// The last moment to restore; the first look for a provisional cut.
    until_us: u64,
    /// Whether a later cut cancels it (a provisional cut), or not (startup's drain, whose queue
    /// triggers further cuts while it drains).
    cancelled_by_cuts: bool,
    /// Startup's drain only: the highest delivery rate reported while the queue stood above
    /// target since the cut, what the busy bottleneck carried; once there is one, the restore
    /// is to [`RESTORE`] of it instead of `to_pps`.
    busy_delivery_pps: Option<f64>,
}

/// Loss rate per epoch (one RTT, at least 100 ms) against its long-run average.
#[derive(Debug, Clone, Default)]
struct LossTrend {
    /// Whether the first report has come: epochs begin there.
    started: bool,
    epoch_start_us: u64,
    sent: u64,
    lost: u64,
    /// Packets sent in the epoch before this one (before the first, until the first report).
    prev_sent: u64,
    /// Long-run loss ratio (EWMA over epochs).
    base: f64,
    epochs: u32,
}

impl LossTrend {
    /// Accounts an ACK interval; returns whether the epoch that just ended lost markedly more
    /// than the long run (the loss rate is growing: congestion, not random loss).
    ///
    /// The losses reported in an epoch are of packets sent `lag_us` (a round trip) earlier, so
    /// they are counted against the packets sent then: the previous epoch's for the part of
    /// the epoch that one round trip covers, this one's for the rest. Counted against this
    /// epoch's packets alone, a rate that changed in between skewed the ratio (after startup's
    /// drain, the overshoot's losses over the drain's packets). And epochs begin at the first
    /// report: before it no loss can have been reported, and an epoch that counted a loss rate
    /// of 0 there held the long run low for several epochs, so the first epochs of random loss
    /// read as growing (in the simulator at 300 ms, 3 % random loss, started from a 100 ms RTT
    /// guess: three such epochs, then a cut 1.2-1.5 s into the transfer).
    fn update(&mut self, now_us: u64, sent: u64, lost: u64, epoch_us: u64, lag_us: f64) -> bool {
        self.sent += sent;
        self.lost += lost;
        if !self.started {
            self.started = true;
            self.roll(now_us);
            return false;
        }
        if now_us < self.epoch_start_us + epoch_us || self.sent < 100 {
            return false;
        }
        let span_us = now_us.saturating_sub(self.epoch_start_us).max(1) as f64;
        let lagged = (lag_us / span_us).min(1.0);
        let sent_then = lagged * self.prev_sent as f64 + (1.0 - lagged) * self.sent as f64;
        let lost = self.lost;
        self.roll(now_us);
        if sent_then < 100.0 {
            return false;
        }
        let ratio = lost as f64 / sent_then;
        let growing = self.epochs >= LOSS_EPOCHS_BEFORE_TREND
            && ratio > 0.02
            && ratio > 2.0 * self.base + 0.01;
        self.base = if self.epochs == 0 { ratio } else { 0.875 * self.base + 0.125 * ratio };
        self.epochs = self.epochs.saturating_add(1);
        growing
    }

    /// Begins an epoch at `now_us`.
    fn roll(&mut self, now_us: u64) {
        self.epoch_start_us = now_us;
        self.prev_sent = self.sent;
        self.sent = 0;
        self.lost = 0;
    }
}

impl Adaptive {
    /// A controller for packets of `mss_bytes`, a window of at most `max_window_pkts`, starting
    /// from an assumed RTT of `initial_rtt_us`.
    pub fn new(mss_bytes: usize, max_window_pkts: u32, initial_rtt_us: u64) -> Self {
        let rtt_us = initial_rtt_us.max(1) as f64;
        Self {
            scavenger: false,
            mss_bytes: mss_bytes as f64,
            max_window_pkts: f64::from(max_window_pkts),
            phase: Phase::Startup,
            rate_pps: (16.0 * 1e6 / rtt_us).max(MIN_RATE_PPS),
            last_dec_rate_pps: 0.0,
            last_decrease_us: 0,
            last_decrease_queue_us: 0.0,
            last_update_us: None,
            rtt_us,
            min_rtt_us: rtt_us,
            queue_delay_us: 0.0,
            standing: RecentMin::new(STANDING_US),
            recv_rate_pps: 0.0,
            capacity_pps: 0.0,
            link: RecentMin::bucketed(CAPACITY_WINDOW_US),
            link_reports: RecentQuantile::new(CAPACITY_WINDOW_US),
            startup_delivery_pps: 0.0,
            startup_capacity_hits: 0,
            restore: None,
            loss: LossTrend::default(),
            delivered: RecentMax::new(),
            cycle_start_us: 0,
            steady_since_us: 0,
            capping: false,
            probing: false,
            probed_gain: 1.0,
            link_max: RecentMax::new(),
            distrust_until_us: 0,
            pace_pps: (16.0 * 1e6 / rtt_us).max(MIN_RATE_PPS),
            memory: None,
            path_pps: 0.0,
            standing_since_us: None,
            compete: false,
            drained_since_us: None,
        }
    }

    /// Starts at [`MEMORY_START`] of `delivered_pps`, what the path delivered to an earlier transfer
    /// (path memory), instead of probing up from a few packets. Startup holds that rate until
    /// the delivery rate confirms it ([`MEMORY_CONFIRMED`] of it), and then ends there, as at
    /// the capacity: steady state's probes look for more. A queue above the target first ends
    /// startup as congested (the path carries less now, or others share it); no confirmation
    /// within [`MEMORY_CHECK_RTTS`] round trips ends it the same way, down to what was
    /// delivered.
    pub fn start_from(&mut self, delivered_pps: f64) {
        if delivered_pps.is_finite() && delivered_pps > 0.0 {
            self.rate_pps = (delivered_pps * MEMORY_START).max(MIN_RATE_PPS);
            self.pace_pps = self.rate_pps;
            self.memory = Some(MemoryStart { first_report_us: None });
        }
    }

    /// Whether startup holds a rate from path memory that the delivery has not confirmed yet;
    /// ends the hold, confirmed or timed out, as the report `ack` says.
    fn memory_holds(&mut self, ack: &AckSignal) -> bool {
        let Some(memory) = self.memory.as_mut() else { return false };
        let first_us = *memory.first_report_us.get_or_insert(ack.now_us);
        if f64::from(ack.delivery_rate_pps) >= MEMORY_CONFIRMED * self.rate_pps {
            self.memory = None;
            // Confirmed. Where the capacity reads well above it (the path had less to give
            // last time), startup goes on to the capacity; else it ends here.
            let resolved = self.capacity_pps > 0.0 && self.capacity_pps < UNRESOLVED_CAPACITY_PPS;
            if !(resolved && self.rate_pps < MEMORY_CONFIRMED * self.capacity_pps) {
                // Within reach of a capacity the pairs are trusted for: there, as a first
                // contact's startup ends (`leave_startup`). Each relay deposit starts from the
                // rate the last one settled at, under the link, and held it: 8 MiB at 100
                // Mbit/s, 50 ms, from 90, took 0.900 of the link, 0.938 this way.
                if resolved && !self.distrusted(ack.now_us) {
                    self.rate_pps = self.rate_pps.max(self.capacity_pps * MEMORY_START);
                }
                self.leave_startup(ack.now_us, false, MEMORY_START);
            }
            return false;
        }
        let check_us = MEMORY_CHECK_RTTS * (self.rtt_us + SYN) + DELIVERY_WINDOW_US as f64;
        if ack.now_us as f64 >= first_us as f64 + check_us {
            self.memory = None;
            self.leave_startup(ack.now_us, true, RESTORE);
            return false;
        }
        true
    }

    /// Whether another flow keeps the queue full whatever this one does (a loss-based flow:
    /// TCP cubic fills a drop-tail queue until it overflows). Against such a flow a delay target
    /// only yields: every cut leaves room the other takes, and the queue stays. So while the
    /// queue has stood above the target for [`COMPETE_AFTER_RTTS`] round trips of steady state,
    /// delay stops being a signal; loss at the full queue is, cut as cubic cuts
    /// ([`COMPETE_DECREASE`]), and the probes go on. Once the queue has stood below half the
    /// target for as long, the other flow has gone or yields, and delay counts again (Copa's
    /// competitive mode, in spirit; not for `low`). Not at the first drained report: both flows
    /// cut at one overflow, and the queue the other keeps drains for a few round trips before it
    /// comes back (through linkem at 100 ms beside cubic, every competition ended so, and each
    /// took 1-3 s to start again while the delay target yielded).
    pub fn competing(&self) -> bool {
        self.compete
    }

    fn watch_competition(&mut self, now_us: u64, standing_us: f64) {
        if self.scavenger || self.phase != Phase::Steady {
            return;
        }
        let target = self.target_queue_delay_us();
        let hold_us = (COMPETE_AFTER_RTTS * (self.rtt_us + SYN)).max(COMPETE_MIN_US);
        let held = |since: &mut Option<u64>| {
            now_us as f64 >= *since.get_or_insert(now_us) as f64 + hold_us
        };
        if standing_us < target / 2.0 {
            self.standing_since_us = None;
            if self.compete && held(&mut self.drained_since_us) {
                self.compete = false;
                self.drained_since_us = None;
            }
        } else {
            self.drained_since_us = None;
            if standing_us > target && held(&mut self.standing_since_us) {
                self.compete = true;
            }
        }
    }

    /// Whether startup was started from path memory and is still checking it.
    pub fn checking_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// The `low` policy: the same controller with a queuing-delay target a quarter of the fair
    /// one (at least 1 ms), every cut a half, and after a cut an eighth of UDT's increase that
    /// grows back to all of it over 3 s. Beside a flow that tolerates more queue (a fair Sluice
    /// transfer, TCP) it reads congestion first and often, cuts deep and climbs back slowly, so
    /// it keeps a trickle; alone, startup finds the link and it holds the link rate with no
    /// queue; after the other flow has gone it climbs back at UDT's pace (about 115 Mbit/s per
    /// second on a 1 Gbit/s path).
    pub fn scavenger(mss_bytes: usize, max_window_pkts: u32, initial_rtt_us: u64) -> Self {
        Self { scavenger: true, ..Self::new(mss_bytes, max_window_pkts, initial_rtt_us) }
    }

    /// The queuing delay above which the path counts as congested: an eighth of the base RTT,
    /// on a short path up to [`SHORT_PATH_TARGET_US`] if that is within
    /// [`SHORT_PATH_TARGET_SHARE`] of the base RTT, kept between 2 and 10 ms (a quarter of that,
    /// at least 1 ms, for the scavenger). A host's own timing noise (a late emulator, receiver
    /// or NIC) reads as a few milliseconds of queue whatever the RTT: at 10 ms an eighth of it
    /// made that noise a cut every 0.3 s or so (see `adaptive.md`).
    pub fn target_queue_delay_us(&self) -> f64 {
        let short = (self.min_rtt_us * SHORT_PATH_TARGET_SHARE).min(SHORT_PATH_TARGET_US);
        let fair = (self.min_rtt_us / 8.0).max(short).clamp(2_000.0, 10_000.0);
        match self.scavenger {
            true => (fair * SCAVENGER_TARGET_SHARE).max(SCAVENGER_MIN_TARGET_US),
            false => fair,
        }
    }

    /// Whether the last report's queue stood above the target: the bottleneck is busy, and so
    /// the delivery rate is what it carries.
    fn queue_above_target(&self) -> bool {
        self.queue_delay_us > self.target_queue_delay_us()
    }

    /// The sending rate a delivery rate stands for: what arrived, plus what random loss took
    /// on the way (the long-run loss ratio, at most [`MAX_LOSS_COMPENSATION`]). A sender at
    /// `S` through random loss `p` delivers `S (1 - p)` whether the loss falls before the
    /// bottleneck or after it, so `S` is what the path carries; read as the rate itself, every
    /// cap and cut from a delivery rate sat `p` under the link.
    fn carried(&self, delivered_pps: f64) -> f64 {
        delivered_pps / (1.0 - self.loss.base.clamp(0.0, MAX_LOSS_COMPENSATION))
    }

    /// Current sending rate in packets per second.
    pub fn rate_pps(&self) -> f64 {
        self.rate_pps
    }

    /// Whether the controller is still probing for the link rate.
    pub fn in_startup(&self) -> bool {
        self.phase == Phase::Startup
    }

    /// Multiplicative decrease, so each cut is seen before the next: at most once per RTT +
    /// SYN, and within two RTTs + SYN of the last cut only while the queue is still more than
    /// twice its target and has not fallen since that cut (the first cut was too small: a
    /// newcomer, a rate far above the link).
    /// The queue reported one RTT after a cut still holds what was sent before the cut reached
    /// the bottleneck; cutting again for a queue just above target answered the same overshoot
    /// twice (on our 100 ms emulated path it did, every time: 1/1.125 twice, 980 Mbit/s to 780).
    /// The cut is UDT's 1/9, or more when the queue is long: enough that the excess queue
    /// drains in about one round trip. For a loss at a queue under the target
    /// (`loss_queue_us`, between half the target and the target), it is what drains that queue
    /// to half the target in a round trip, at least [`LOSS_AT_QUEUE_DECREASE`]. It applies to
    /// the sending rate, or to what the path carries by the delivery rate
    /// ([`Adaptive::carried`]) when that is lower and the queue is above target. A cut for a
    /// queue above target that did not stand is taken back if the queue is gone one round trip
    /// later (a stall's backlog, not a newcomer; see `adaptive.md`). Every flow
    /// through the bottleneck sees the same queue and so cuts by the same factor: the decrease
    /// stays multiplicative, hence fair.
    fn decrease(&mut self, now_us: u64, loss_queue_us: Option<f64>) {
        let since_us = now_us.saturating_sub(self.last_decrease_us) as f64;
        // A second cut within two RTTs + SYN answers a queue far above target that has not
        // begun to fall: the last cut was too small. A queue that falls is the last cut at
        // work (at 10 ms through linkem a stall's backlog, 4-6 ms read 25 ms apart, was cut
        // twice, by 45 % in all, and took half a second to climb back). Never while
        // competing: the queue is always far above, and a cut a round trip apart would answer
        // one overflow twice, where cubic cuts once.
        let far_above = self.queue_delay_us > 2.0 * self.target_queue_delay_us()
            && self.queue_delay_us >= self.last_decrease_queue_us
            && !self.compete;
        if since_us < self.rtt_us + SYN || (since_us < 2.0 * self.rtt_us + SYN && !far_above) {
            return;
        }
        self.last_decrease_us = now_us;
        self.last_decrease_queue_us = self.queue_delay_us;
        // The rate may sit up to a probe above what was delivered (see `pace`); a cut from
        // there would not reach the pacer.
        let delivered_pps = self.delivered.get(now_us);
        if self.capping && delivered_pps > 0.0 {
            self.rate_pps = self.rate_pps.min(delivered_pps);
        }
        self.last_dec_rate_pps = self.rate_pps;
        let standing_us = self.standing.get(now_us);
        let excess_us = (self.queue_delay_us - self.target_queue_delay_us()).max(0.0);
        let drain = 1.0 - excess_us / (self.min_rtt_us + self.queue_delay_us);
        let factor = if self.scavenger {
            MAX_DECREASE
        } else if self.compete {
            COMPETE_DECREASE
        } else if let Some(queue_us) = loss_queue_us.filter(|_| !self.queue_above_target()) {
            let excess_us = queue_us - self.target_queue_delay_us() / 2.0;
            (1.0 - excess_us / (self.min_rtt_us + queue_us))
                .clamp(MAX_DECREASE, LOSS_AT_QUEUE_DECREASE)
        } else {
            drain.clamp(MAX_DECREASE, DECREASE)
        };
        // The delivery rate tells what the path carries only while the bottleneck is busy (a
        // queue above target); a cut for loss with a shorter queue (a stall) would take a
        // report that dipped with the stall as the rate and cut far deeper than 1/9.
        let bottleneck_busy = self.queue_above_target();
        let base = if self.recv_rate_pps > 0.0 && bottleneck_busy {
            // Competing, the losses are the shared queue's overflow, not random: what arrived
            // is what the path gave this flow.
            let through_pps = match self.compete {
                true => self.recv_rate_pps,
                false => self.carried(self.recv_rate_pps),
            };
            self.rate_pps.min(through_pps)
        } else {
            self.rate_pps
        };
        // Whatever the delivery rate said, one cut at most halves the rate (TCP's bound): a
        // report whose delivery rate had dipped to a tenth of the link while the rate sat at the
        // link (through linkem at 300 ms, 3 %: the emulator was never late by more than 3 ms)
        // cut 982 Mbit/s to 48, and UDT's increase took over 4 s to climb back.
        let floor_pps = self.last_dec_rate_pps * MAX_DECREASE;
        self.rate_pps = (base * factor).max(floor_pps).max(MIN_RATE_PPS);
        // A queue that did not stand (a stall's backlog, read in one report) cuts as a real one
        // does, since a newcomer's first report looks the same; if the queue is gone one round
        // trip later, it was no queue this flow built, and the rate comes back to what it was.
        // (Only a cut for a queue: the loss trend's has no queue to judge it by.)
        // Not over startup's own restore, which this cut does not cancel: the queue it answers
        // is the overshoot's that the restore waits out (at 100 ms through `linkem` such a cut
        // 0.1 s after startup took the restore's place, found the queue still there at its
        // one look and lapsed, and a 128 MiB copy went on at two thirds of the link: 2.0 s
        // where its neighbours took 1.65).
        let startup_draining = self.restore.is_some_and(|r| !r.cancelled_by_cuts);
        if !self.scavenger
            && bottleneck_busy
            && standing_us < self.target_queue_delay_us() / 2.0
            && !startup_draining
        {
            let first_look_us = now_us + (self.rtt_us + SYN) as u64;
            self.restore = Some(Restore {
                cut_us: now_us,
                to_pps: self.last_dec_rate_pps,
                until_us: first_look_us,
                cancelled_by_cuts: true,
                busy_delivery_pps: None,
            });
        }
    }

    /// Ends startup. After congestion (a queue was built) the rate drops below the delivery rate
    /// so the queue drains, and comes back to near the delivery rate once it has drained (see
    /// [`RESTORE`]); on reaching the link capacity with no queue, it holds the capacity. Having
    /// passed the capacity by more than one step of growth is congestion too, of which no report
    /// has come back yet: the capacity reports read too fast until then (bunched pairs), and
    /// what was sent above the link in the last round trip is queued (through linkem at 300 ms,
    /// startup reached twice the link and built a 70 ms queue). Without congestion the rate is
    /// held at `margin` of the capacity at most: [`RESTORE`] after startup's doubling,
    /// [`MEMORY_START`] after a held start from path memory, which built no queue.
    fn leave_startup(&mut self, now_us: u64, congested: bool, margin: f64) {
        self.phase = Phase::Steady;
        self.steady_since_us = now_us;
        let overshot = self.capacity_pps > 0.0 && self.rate_pps > self.capacity_pps * OVERSHOT;
        if !(congested || overshot) || self.recv_rate_pps <= 0.0 {
            // A little below the capacity, as the restore after a drain: a packet train reads
            // the link to within a packet, and at the link exactly the queue startup left never
            // drained; it crept up to the target, and a lossy path's next NAK cut for it
            // (through linkem at 300 ms, 1 %: 978 Mbit/s down to 682 a second later).
            if self.capacity_pps > 0.0 {
                self.rate_pps = self.rate_pps.min(self.capacity_pps * margin);
            }
            return;
        }
        // What the bottleneck delivered. In startup the delivery rate lags a round trip behind
        // the sending rate (through linkem at 300 ms it read 15-45 % of the link when startup
        // overshot), so after an overshoot (no queue reported yet) the capacity report that
        // ended startup counts, but no less than what was delivered: a pair stretched by a late
        // wake-up reads slow (once 100 Mbit/s on a 1 Gbit/s link). The least report of the last
        // second is no better here: it still holds startup's early, stretched pairs.
        let mut delivered_pps = self.startup_delivery_pps.max(self.recv_rate_pps);
        if overshot && !congested {
            delivered_pps = delivered_pps.max(self.capacity_pps);
        }
        self.last_dec_rate_pps = self.rate_pps;
        self.rate_pps = self.rate_pps.min(delivered_pps * DRAIN).max(MIN_RATE_PPS);
        self.last_decrease_us = now_us;
        self.last_decrease_queue_us = self.queue_delay_us;
        let wait_us = STARTUP_DRAIN_RTTS * (self.rtt_us + SYN);
        self.restore = Some(Restore {
            cut_us: now_us,
            to_pps: delivered_pps * RESTORE,
            until_us: now_us + wait_us as u64,
            cancelled_by_cuts: false,
            busy_delivery_pps: Some(0.0),
        });
    }

    /// UDT's increase, equations (1) and (2), with the available bandwidth estimated from the
    /// link capacity (the packet pairs' recent reports: their [`LINK_QUANTILE`] while trusted,
    /// their least of the last second while not), at least `L/9` while below the link, and at
    /// most `L/9` while below the rate of the last decrease. (UDT's equation sizes the step by
    /// the decade of `L - C`: within 10 % of a 1 Gbit/s link it adds 12 Mbit/s per second, and
    /// every cut by 1/9 took 8 s to climb back, so the rate hovered at 85-90 % of the link. The
    /// queuing-delay target, not the step size, is what stops the climb here.)
    fn increase(&mut self, now_us: u64) {
        // While the packet pairs are distrusted (they disagree with each other or with the
        // delivery; see `distrusted`), the increase aims at least a probe above what was
        // delivered, so a pair read slow (release at wakes every 20 us
        // read a 1 Gbit/s link as 563 Mbit/s) does not stop it; a pair read fast only makes it
        // steeper, and the cap on the rate (see `pace`) bounds where it goes. Once that cap
        // holds, the step goes by an upper quantile of the reports, the same for every flow
        // through this receive path ([`CAPPED_LINK_QUANTILE`]); until then by the least, which
        // keeps an uncapped climb from running away on the clock's resolution (released every
        // 1000 us, the queue's 99th percentile went from 5 to 84 ms with the upper quantile).
        let (link_pps, delivered_pps) = match self.distrusted(now_us) {
            false => (self.link_reports.get(now_us, LINK_QUANTILE), 0.0),
            true if self.scavenger => (self.link.get(now_us), 0.0),
            true if self.capping => {
                (self.link_reports.get(now_us, CAPPED_LINK_QUANTILE), self.delivered.get(now_us))
            }
            true => (self.link.get(now_us), self.delivered.get(now_us)),
        };
        let link_pps = link_pps.max(delivered_pps * PROBE_GAIN);
        let mut avail_pps = link_pps - self.rate_pps;
        if avail_pps > 0.0 {
            avail_pps = avail_pps.max(link_pps / 9.0);
        }
        if self.rate_pps < self.last_dec_rate_pps {
            avail_pps = avail_pps.min(link_pps / 9.0);
        }
        self.rate_pps += self.increase_share(now_us)
            * self.increase_scale()
            * udt_increase_pkts(avail_pps, self.mss_bytes)
            * 1e6
            / SYN;
    }

    /// How many of UDT's steps one SYN takes (see [`INCREASE_REF_US`]): one at round trips of
    /// 100 ms and more, up to [`MAX_INCREASE_SCALE`] at short ones. The scavenger keeps one.
    fn increase_scale(&self) -> f64 {
        match self.scavenger {
            true => 1.0,
            false => (INCREASE_REF_US / (self.min_rtt_us + SYN)).clamp(1.0, MAX_INCREASE_SCALE),
        }
    }

    /// Caps the rate by what the path was seen to deliver, while the packet pairs are
    /// distrusted (see [`Adaptive::distrusted`]), and sets the pacing rate. Nothing
    /// (packet pairs, arrival speeds, a restore, UDT's increase) may take the sending rate past
    /// the delivered rate times the gain of the moment, from a round trip and a delivery window
    /// after startup on (startup itself is bounded by its exits): a cycle of a probe at [`PROBE_GAIN`] for [`PROBE_TARGETS`] queuing-delay targets
    /// (at least a SYN, at a gain that queues as much), a drain as far below the delivered rate
    /// for as long, and the delivered rate less a standing queue
    /// ([`Adaptive::cruise_gain`]) for the rest of at least [`CYCLE_RTTS`] round trips. A probe
    /// that finds room raises the delivered rate, and with it the cap; one that finds none has
    /// queued half a target, which the drain empties.
    fn pace(&mut self, now_us: u64) {
        let delivered_pps = self.delivered.get(now_us);
        // The scavenger is not capped (yet): its half cuts and slow climb beside the probe
        // cycle held it at 0.70 of an idle link. Nor is a competing flow: what it delivered is
        // what the other flow left it, and a probe an eighth above that per cycle climbs too
        // slowly to take a share back (beside cubic: 0.14 of the pair).
        if delivered_pps <= 0.0 || self.scavenger || self.compete || !self.distrusted(now_us) {
            self.capping = false;
            self.pace_pps = self.rate_pps;
            return;
        }
        // The delivered rate reads what was sent a round trip and a delivery window ago: until
        // that covers steady state it reads startup's ramp (a startup that ended at the
        // capacity with no queue read half the link delivered when it ended), and caps nothing.
        self.capping = self.settled(now_us);
        if !self.capping {
            self.pace_pps = self.rate_pps;
            return;
        }
        // The gain set here holds until the next report, a SYN later: a probe (and its drain)
        // shorter than that lasts a SYN, at a gain that queues what the probe was meant to.
        // Set for `2 q*` and ended by the first report after, at 10 ms (`q*` 2 ms) the probe
        // went on for the whole SYN, 2.5 times what it meant to queue, and its drain (from 4 to
        // 8 ms into the cycle) seldom saw a report: a self-made queue of 1-2.5 ms on a 2 ms
        // target. The phase of a report is where the middle of the SYN it paces falls.
        let meant_us = PROBE_TARGETS * self.target_queue_delay_us();
        let probe_us = meant_us.max(SYN);
        let stretch = meant_us / probe_us;
        let cycle_us = (CYCLE_RTTS * (self.min_rtt_us + SYN)).max(4.0 * probe_us);
        let mut into_us = now_us.saturating_sub(self.cycle_start_us) as f64;
        // A probe into a queue finds no room and only deepens it (beside a newcomer's startup
        // it added to the overshoot's queue): a cycle probes only if no queue was reported when
        // it began, and stops probing at the first report of one.
        let half_target_us = self.target_queue_delay_us() / 2.0;
        let standing_us = self.standing.get(now_us);
        let queue_reported = self.queue_delay_us >= half_target_us
            || standing_us >= PROBE_QUEUE_SHARE * self.target_queue_delay_us();
        if into_us >= cycle_us {
            self.cycle_start_us = now_us;
            into_us = 0.0;
            self.probing = true;
            self.probed_gain = 1.0;
        }
        // Competing, the queue is the other flow's: probes find room only as it backs off.
        self.probing &= !queue_reported || self.compete;
        let mid_us = into_us + SYN / 2.0;
        let probe = mid_us < probe_us && self.probing;
        // The drain takes back what the probe sent above the delivered rate, no more: a cycle
        // that did not probe (a queue was reported), or whose probe the controller's own rate
        // held under the gain, drained 25 % for nothing.
        let gain = if probe {
            1.0 + (PROBE_GAIN - 1.0) * stretch
        } else if (probe_us..2.0 * probe_us).contains(&mid_us) {
            (2.0 - self.probed_gain).min(self.cruise_gain(standing_us))
        } else {
            self.cruise_gain(standing_us)
        };
        let ceiling_pps = PROBE_GAIN * delivered_pps;
        self.rate_pps = self.rate_pps.min(ceiling_pps).max(MIN_RATE_PPS);
        self.pace_pps = self.rate_pps.min(gain * delivered_pps).max(MIN_RATE_PPS);
        if probe {
            self.probed_gain = self.probed_gain.max(self.pace_pps / delivered_pps);
        }
    }

    /// The gain of the cruise: 1 less the standing queue as a share of the round trip, at least
    /// [`DRAIN_GAIN`]. The delivered rate is a windowed maximum of noisy reports, a little above
    /// what the link carries (through linkem at 300 ms, 0 %, the queue crept 3 ms a second while
    /// cruising), so cruising at 1 the queue grew to the target every 2-3 s and was cut by UDT's
    /// 1/9, which the increase took over a second to climb back. Less the queue over a round
    /// trip, a queue drains within about a round trip of its report (a proportional drain whose
    /// loop gain over the feedback's round trip is 1: stable, damped); where the bias stays, the
    /// queue settles at the bias times the round trip (4 ms at 300 ms for a bias of 1.3 %), and
    /// no probe goes on top of it ([`PROBE_QUEUE_SHARE`]).
    fn cruise_gain(&self, standing_us: f64) -> f64 {
        (1.0 - standing_us / (self.min_rtt_us + SYN)).max(DRAIN_GAIN)
    }

    /// Whether steady state has lasted a round trip and a delivery window: the delivered rate
    /// reads what was sent after startup, not its ramp.
    fn settled(&self, now_us: u64) -> bool {
        let settling_us = self.rtt_us + SYN + DELIVERY_WINDOW_US as f64;
        self.phase == Phase::Steady && now_us as f64 >= self.steady_since_us as f64 + settling_us
    }

    /// Whether the packet pairs are distrusted: their reports of the last second spread by more
    /// than [`CONTRADICTED_SPREAD`], read the receiver's clock resolution, or the least of them
    /// is below what was delivered, recently. A clean path's pairs agree with each other and
    /// with the delivery; a receive path that bunches packets makes them read fast, one that
    /// releases at wakes makes them read slow.
    fn distrusted(&self, now_us: u64) -> bool {
        now_us < self.distrust_until_us
    }

    /// The share of UDT's increase to take: all of it, or for the scavenger from an eighth
    /// right after a cut up to all of it [`SCAVENGER_PATIENCE_US`] later.
    fn increase_share(&self, now_us: u64) -> f64 {
        if !self.scavenger {
            return 1.0;
        }
        let since_us = now_us.saturating_sub(self.last_decrease_us) as f64;
        (since_us / SCAVENGER_PATIENCE_US).clamp(SCAVENGER_INCREASE_SHARE, 1.0)
    }
}

impl CongestionControl for Adaptive {
    fn on_ack(&mut self, ack: &AckSignal) {
        let dt_us = self.last_update_us.map_or(SYN, |t| ack.now_us.saturating_sub(t) as f64);
        self.last_update_us = Some(ack.now_us);
        self.rtt_us = (ack.rtt_us as f64).max(1.0);
        self.min_rtt_us = (ack.min_rtt_us as f64).max(1.0);
        self.queue_delay_us = f64::from(ack.queue_delay_us);
        // What gets through: the delivery rate, which a bottleneck delivering in bunches does
        // not fool; UDT's arrival speed until the receiver has one.
        let through_pps = match ack.delivery_rate_pps {
            0 => ack.recv_rate_pps,
            pps => pps,
        };
        if through_pps > 0 {
            self.recv_rate_pps = f64::from(through_pps);
        }
        if ack.capacity_pps > 0 {
            self.capacity_pps = f64::from(ack.capacity_pps);
            self.link.update(ack.now_us, self.capacity_pps);
            self.link_reports.update(ack.now_us, self.capacity_pps);
            self.link_max.update(ack.now_us, self.capacity_pps, CAPACITY_WINDOW_US);
            let least = self.link.get(ack.now_us);
            let most = self.link_max.get(ack.now_us);
            let delivered = self.delivered.get(ack.now_us);
            if most > CONTRADICTED_SPREAD * least
                || most >= UNRESOLVED_CAPACITY_PPS
                || least < CONTRADICTED_SHARE * delivered
            {
                self.distrust_until_us = ack.now_us + DISTRUST_US;
            }
        }
        if ack.delivery_rate_pps > 0 {
            let window_us = (DELIVERED_WINDOW_RTTS * (self.min_rtt_us.max(1.0) + SYN))
                .max(DELIVERED_MIN_WINDOW_US);
            let carried_pps = self.carried(f64::from(ack.delivery_rate_pps));
            self.delivered.update(ack.now_us, carried_pps, window_us as u64);
        }
        // The smoothed RTT starts from a guess; the least sample is measured from the first.
        let lag_us = self.rtt_us.max(self.min_rtt_us);
        let epoch_us = (lag_us as u64).max(100_000);
        let loss_growing =
            self.loss.update(ack.now_us, ack.sent_pkts, ack.lost_pkts, epoch_us, lag_us);
        let standing_us = self.standing.update(ack.now_us, self.queue_delay_us);
        self.watch_competition(ack.now_us, standing_us);
        let congested = (self.queue_above_target() && !self.compete) || loss_growing;

        match self.phase {
            Phase::Startup => {
                self.startup_delivery_pps =
                    self.startup_delivery_pps.max(f64::from(ack.delivery_rate_pps));
                // One pair stretched by a late wake-up reads slow: through linkem at 100 ms
                // one report said 152 Mbit/s of a 1000 Mbit/s link, startup held 144, and UDT's
                // increase took 6 s to reach the link. At the first report at or below the rate
                // the rate holds; the next report says whether that was the capacity (at or
                // below again) or a slow reading (above: the climb goes on).
                if ack.capacity_pps > 0 {
                    self.startup_capacity_hits = match self.rate_pps >= self.capacity_pps {
                        true => self.startup_capacity_hits + 1,
                        false => 0,
                    };
                }
                let at_capacity = self.startup_capacity_hits >= 2;
                if congested || at_capacity {
                    self.memory = None;
                    self.leave_startup(ack.now_us, congested, RESTORE);
                } else if self.memory_holds(ack) {
                    // Held at the remembered rate until the delivery says.
                } else if self.in_startup() && self.startup_capacity_hits == 0 {
                    let growth = 2f64.powf(dt_us.min(4.0 * SYN) / self.rtt_us.max(2.0 * SYN));
                    let floor = if self.capacity_pps < UNRESOLVED_CAPACITY_PPS {
                        self.capacity_pps * STARTUP_FLOOR_OF_CAPACITY
                    } else {
                        0.0
                    };
                    self.rate_pps = (self.rate_pps * growth).max(floor);
                }
            }
            Phase::Steady => {
                let due_us = (self.rtt_us + SYN) as u64;
                let busy = self.queue_above_target();
                let busy_seen = self.restore.as_mut().and_then(|r| r.busy_delivery_pps.as_mut());
                // The delivery rate itself: UDT's arrival speed, which stands in for it in a
                // report without one, reads bunched arrivals as a rate above the link.
                if let (true, Some(seen)) = (busy, busy_seen) {
                    *seen = seen.max(f64::from(ack.delivery_rate_pps));
                }
                if let Some(r) = self.restore.filter(|r| ack.now_us >= r.cut_us + due_us) {
                    // Only once the queue is gone (and, after a provisional cut, nothing was cut
                    // since): otherwise others share the bottleneck (or the drain was not
                    // enough), and UDT's increase takes it from here.
                    let drained = standing_us < self.target_queue_delay_us() / 2.0;
                    let cut_since = self.last_decrease_us != r.cut_us;
                    if drained && !congested && !(cut_since && r.cancelled_by_cuts) {
                        // Startup's estimate of what was delivered is a guess made a round trip
                        // too early: a capacity report read fast by bunched delivery (through
                        // linkem at 300 ms, 1682 Mbit/s on a 1000 Mbit/s link; the restore to it
                        // sent 1.6 times the link into a 260 ms queue), or a delivery rate that
                        // lagged the ramp (560 Mbit/s; the climb from there took 3.7 s). While
                        // the queue stood, the delivery rate was what the link carries.
                        let to_pps = match r.busy_delivery_pps {
                            Some(busy_pps) if busy_pps > 0.0 => busy_pps * RESTORE,
                            _ => r.to_pps,
                        };
                        self.rate_pps = self.rate_pps.max(to_pps);
                        self.restore = None;
                    } else if ack.now_us >= r.until_us || (cut_since && r.cancelled_by_cuts) {
                        self.restore = None;
                    }
                }
                if congested {
                    self.decrease(ack.now_us, None);
                } else if dt_us > 0.0 {
                    self.increase(ack.now_us);
                }
            }
        }
        self.pace(ack.now_us);
        if self.settled(ack.now_us) {
            self.path_pps = self.delivered.get(ack.now_us);
        }
    }

    fn on_loss(&mut self, loss: &LossSignal) {
        // Loss while the queue is long is congestion (the queue overflowed); loss with a short
        // queue is random and only repaired. Steady state asks for a standing queue.
        let reported_us = f64::from(loss.queue_delay_us);
        let queue_us = match self.phase {
            Phase::Startup => reported_us,
            Phase::Steady => reported_us.min(self.standing.get(loss.now_us)),
        };
        if queue_us > self.target_queue_delay_us() / 2.0 {
            match self.phase {
                Phase::Startup => {
                    self.memory = None;
                    self.leave_startup(loss.now_us, true, RESTORE);
                }
                Phase::Steady => self.decrease(loss.now_us, Some(queue_us)),
            }
            self.pace(loss.now_us);
        }
    }

    fn on_timeout(&mut self, now_us: u64) {
        // No feedback at all: either a blackout or heavy congestion. Fall back and probe again.
        self.rate_pps = (self.rate_pps / 4.0).max(MIN_RATE_PPS);
        self.phase = Phase::Startup;
        self.last_decrease_us = now_us;
        self.last_decrease_queue_us = 0.0;
        self.startup_delivery_pps = 0.0;
        self.startup_capacity_hits = 0;
        self.restore = None;
        self.memory = None;
        self.pace(now_us);
    }

    fn period_us(&self) -> f64 {
        1e6 / self.pace_pps
    }

    fn window_pkts(&self) -> f64 {
        // Room for several round trips: the cumulative ACK stalls behind repairs on lossy paths,
        // and the window must not become the limit there (rate control is).
        (self.rate_pps * (4.0 * self.rtt_us + SYN) / 1e6 + 64.0).min(self.max_window_pkts)
    }

    fn window_basis(&self) -> WindowBasis {
        WindowBasis::Unreceived
    }

    /// In startup, until the rate is half the capacity the trains measured: a train is a few
    /// milliseconds of the link sent on top of the rate, and near the link it queued that much
    /// (3.7 ms in simulation at 100 ms, over the `low` policy's 2.5 ms target, which then cut
    /// to half). The last reading serves the rest of startup, a round trip or two.
    fn wants_trains(&self) -> bool {
        let resolved = self.capacity_pps > 0.0 && self.capacity_pps < UNRESOLVED_CAPACITY_PPS;
        self.in_startup() && !(resolved && self.rate_pps >= self.capacity_pps / 2.0)
    }

    fn path_rate_pps(&self) -> f64 {
        self.path_pps
    }

    fn competing(&self) -> bool {
        self.compete
    }

    fn name(&self) -> &'static str {
        if self.scavenger { "low" } else { "adaptive" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(now_us: u64, queue_delay_us: u32, capacity_pps: u32) -> AckSignal {
        AckSignal {
            now_us,
            acked_pkts: 10,
            rtt_us: 100_000,
            rtt_var_us: 1_000,
            min_rtt_us: 100_000,
            recv_rate_pps: 50_000,
            capacity_pps,
            delivery_rate_pps: 50_000,
            queue_delay_us,
            real_period_us: None,
            sent_pkts: 1_000,
            lost_pkts: 10,
            snd_next: 1_000,
        }
    }

    /// Startup from its first report until the rate reaches `rate_pps`, every report with no
    /// queue, no capacity report and the delivery rate `delivery_pps`; the time of the last.
    fn ramp(cc: &mut Adaptive, rate_pps: f64, delivery_pps: u32) -> u64 {
        let mut now = 0;
        while cc.rate_pps() < rate_pps {
            now += 10_000;
            cc.on_ack(&AckSignal { delivery_rate_pps: delivery_pps, ..ack(now, 0, 0) });
        }
        now
    }

    /// A report at `now_us` with no queue or capacity reading and `delivery_pps` delivered.
    fn delivered(now_us: u64, delivery_pps: u32, capacity_pps: u32) -> AckSignal {
        AckSignal { delivery_rate_pps: delivery_pps, ..ack(now_us, 0, capacity_pps) }
    }

    #[test]
    fn a_start_from_memory_holds_until_the_delivery_confirms_it_then_ends_startup() {
        let mut cc = Adaptive::new(1452, 1 << 20, 100_000);
        cc.start_from(80_000.0);
        assert_eq!(cc.rate_pps(), 80_000.0 * MEMORY_START);
        // The first round trip's reports read the ramp of the delivery: the rate holds.
        for (i, pps) in [5_000, 30_000, 55_000].into_iter().enumerate() {
            cc.on_ack(&delivered(10_000 * (i as u64 + 1), pps, 0));
            assert!(cc.in_startup() && cc.checking_memory());
            assert_eq!(cc.rate_pps(), 80_000.0 * MEMORY_START);
        }
        // Delivered: startup ends at that rate, for steady state's probes to go further.
        cc.on_ack(&delivered(40_000, 70_000, 0));
        assert!(!cc.in_startup() && !cc.checking_memory());
        assert_eq!(cc.rate_pps(), 80_000.0 * MEMORY_START);
    }

    #[test]
    fn a_start_from_memory_below_the_capacity_goes_on_to_the_capacity() {
        // Last time the path had 40,000 pkt/s to give; a train reads 80,000 now.
        let mut cc = Adaptive::new(1452, 1 << 20, 100_000);
        cc.start_from(40_000.0);
        cc.on_ack(&delivered(10_000, 37_000, 80_000));
        assert!(cc.in_startup() && !cc.checking_memory());
        let mut now = 10_000;
        while cc.in_startup() {
            now += 10_000;
            cc.on_ack(&delivered(now, 37_000, 80_000));
        }
        assert!(now < 400_000, "{now} us to reach the capacity");
        assert_eq!(cc.rate_pps(), 80_000.0 * RESTORE);
    }

    #[test]
    fn a_start_from_memory_just_under_the_capacity_ends_startup_at_the_capacity() {
        // Remembered 72,000 pkt/s (a run that settled under the link), the pairs read 80,000:
        // too close to go on climbing in startup, so it ends there at the capacity's share
        // (a held start's, which built no queue), not at the memory's (which UDT's increase would
        // take seconds to climb from).
        assert_eq!(after_one_report_from_memory(72_000.0, 70_000, 80_000), 80_000.0 * MEMORY_START);
    }

    #[test]
    fn a_start_from_memory_well_above_the_capacity_drains_as_an_overshoot() {
        // Remembered 100,000 pkt/s, the pairs read 80,000 now: the held rate (98,000) confirmed
        // by a delivery of 85,000 was over the capacity by more than a step of growth, and what
        // it sent above the link is queued. Startup ends as after an overshoot: below the
        // delivery rate, for the queue to drain.
        assert_eq!(after_one_report_from_memory(100_000.0, 85_000, 80_000), 85_000.0 * DRAIN);
    }

    /// Started from `remembered` pkt/s, one report of `delivery_pps` with the pairs at
    /// `capacity_pps` ends startup: the rate it ends at.
    fn after_one_report_from_memory(remembered: f64, delivery_pps: u32, capacity_pps: u32) -> f64 {
        let mut cc = Adaptive::new(1452, 1 << 20, 100_000);
        cc.start_from(remembered);
        cc.on_ack(&delivered(10_000, delivery_pps, capacity_pps));
        assert!(!cc.in_startup() && !cc.checking_memory());
        cc.rate_pps()
    }

    #[test]
    fn a_start_from_memory_into_a_queue_ends_startup_as_congestion() {
        // Others share the path now: the queue grows past the target within the round trip.
        let mut cc = Adaptive::new(1452, 1 << 20, 100_000);
        cc.start_from(80_000.0);
        cc.on_ack(&delivered(10_000, 20_000, 0));
        cc.on_ack(&AckSignal { delivery_rate_pps: 40_000, ..ack(20_000, 25_000, 0) });
        assert!(!cc.in_startup() && !cc.checking_memory());
        assert!(cc.rate_pps() <= 40_000.0 * DRAIN + 1.0, "{}", cc.rate_pps());
    }

    #[test]
    fn a_start_from_memory_never_confirmed_falls_back_to_what_was_delivered() {
        // No queue (the receiver, not the path, is slower now) and never the remembered rate.
        let mut cc = Adaptive::new(1452, 1 << 20, 100_000);
        cc.start_from(80_000.0);
        let mut now = 0;
        while cc.in_startup() {
            now += 10_000;
            cc.on_ack(&delivered(now, 30_000, 0));
            assert!(now < 1_000_000, "still checking after {now} us");
        }
        // Two round trips and a delivery window from the first report.
        let check_us = (MEMORY_CHECK_RTTS * (100_000.0 + SYN)) as u64 + DELIVERY_WINDOW_US;
        assert!(now >= 10_000 + check_us && now <= 20_000 + check_us, "{now}");
        assert!(cc.rate_pps() <= 30_000.0 * DRAIN + 1.0, "{}", cc.rate_pps());
    }

    #[test]
    fn a_queue_that_stands_through_the_cuts_for_a_second_is_competed_for_until_it_drains_as_long() {
        for scavenger in [false, true] {
            let mut cc = match scavenger {
                true => Adaptive::scavenger(1452, 1 << 20, 100_000),
                false => Adaptive::new(1452, 1 << 20, 100_000),
            };
            cc.on_ack(&ack(10_000, 12_000, 0)); // leave startup on a queue
            assert!(!cc.in_startup());
            // A 60 ms queue that stays (a cubic flow fills it), reported every 10 ms.
            let mut now = 10_000;
            while now < 1_000_000 {
                now += 10_000;
                cc.on_ack(&ack(now, 60_000, 0));
                assert!(!cc.competing(), "competing after {now} us");
            }
            for _ in 0..30 {
                now += 10_000;
                cc.on_ack(&ack(now, 60_000, 0));
            }
            assert_eq!(cc.competing(), !scavenger, "low never competes");
            // Both flows cut at one overflow, and the queue the other keeps drains for a few
            // round trips: it comes back, and so the competition goes on.
            for queue_us in [0, 60_000] {
                for _ in 0..50 {
                    now += 10_000;
                    cc.on_ack(&ack(now, queue_us, 0));
                    assert_eq!(cc.competing(), !scavenger, "after {now} us");
                }
            }
            if scavenger {
                continue;
            }
            // The queue stays drained (the other flow left): delay counts again after as long
            // as it took to start competing.
            let drained_us = now;
            while cc.competing() {
                now += 10_000;
                cc.on_ack(&ack(now, 0, 0));
                assert!(now < drained_us + 1_100_000, "still competing after {now} us");
            }
            assert!(now >= drained_us + 1_000_000, "{now}");
        }
    }

    #[test]
    fn startup_doubles_per_rtt_and_leaves_on_queue_growth() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let r0 = cc.rate_pps();
        for i in 1..=10 {
            cc.on_ack(&ack(i * 10_000, 0, 0));
        }
        let growth = cc.rate_pps() / r0;
        assert!((1.9..2.2).contains(&growth), "one RTT of startup grew the rate x{growth}");
        cc.on_ack(&ack(110_000, 20_000, 0));
        assert!(!cc.in_startup());
        assert!(cc.rate_pps() <= 50_000.0 * DRAIN + 1e-9, "drains below the arrival speed");
    }

    /// The rate added by one report of steady state at `rtt_us`, with no queue, below a link of
    /// 80,000 pkt/s that the packet pairs read alike.
    fn one_step(mut cc: Adaptive, rtt_us: u64) -> f64 {
        let at = |now_us| AckSignal { rtt_us, min_rtt_us: rtt_us, ..ack(now_us, 0, 80_000) };
        let mut now = 0;
        while cc.in_startup() {
            now += 10_000;
            cc.on_ack(&at(now));
        }
        let before = cc.rate_pps();
        cc.on_ack(&at(now + 10_000));
        cc.rate_pps() - before
    }

    /// Steady state at 100 ms (the target is 10 ms), a queue of `queue_us` standing for 50 ms,
    /// then a loss reported at it: the rate after the loss over the rate before.
    fn cut_for_a_loss_at(queue_us: u32) -> f64 {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let mut now = 0;
        while cc.in_startup() {
            now += 10_000;
            cc.on_ack(&ack(now, 0, 80_000));
        }
        for _ in 0..25 {
            now += 10_000;
            cc.on_ack(&ack(now, queue_us, 80_000));
        }
        let before = cc.rate_pps();
        let lost = LossSignal {
            now_us: now,
            largest_lost: 1,
            lost_pkts: 1,
            snd_next: 2,
            queue_delay_us: queue_us,
        };
        cc.on_loss(&lost);
        cc.rate_pps() / before
    }

    #[test]
    fn a_loss_at_a_queue_under_the_target_cuts_what_drains_it_to_half_the_target() {
        // 1 ms over half the target: a thirty-second, the least cut.
        let cut = cut_for_a_loss_at(6_000);
        assert!((cut - LOSS_AT_QUEUE_DECREASE).abs() < 1e-9, "x{cut}");
        // 4.5 ms over it: 4.5 ms of a 109.5 ms round trip.
        let cut = cut_for_a_loss_at(9_500);
        assert!((cut - (1.0 - 4_500.0 / 109_500.0)).abs() < 1e-9, "x{cut}");
        // Under half the target a loss is random: no cut.
        assert_eq!(cut_for_a_loss_at(4_000), 1.0);
    }

    #[test]
    fn at_short_round_trips_the_increase_takes_more_steps_per_syn() {
        let step = |rtt_us| one_step(Adaptive::new(1452, 1 << 18, rtt_us), rtt_us);
        let (at_100ms, at_300ms, at_10ms, at_1ms) =
            (step(100_000), step(300_000), step(10_000), step(1_000));
        assert!(at_100ms > 0.0);
        assert!((at_300ms / at_100ms - 1.0).abs() < 1e-9, "{at_300ms} against {at_100ms}");
        let scale = at_10ms / at_100ms;
        assert!((scale - 5.5).abs() < 1e-6, "(100 ms + SYN) / (10 ms + SYN): x{scale}");
        assert!((at_1ms / at_100ms - MAX_INCREASE_SCALE).abs() < 1e-6, "capped");
        // The scavenger climbs at UDT's pace at any round trip.
        let low = one_step(Adaptive::scavenger(1452, 1 << 18, 10_000), 10_000);
        let low_100ms = one_step(Adaptive::scavenger(1452, 1 << 18, 100_000), 100_000);
        assert!((low / low_100ms - 1.0).abs() < 1e-9, "{low} against {low_100ms}");
    }

    #[test]
    fn startup_jumps_to_a_quarter_of_capacity_and_holds_capacity_without_a_queue() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        cc.on_ack(&ack(10_000, 0, 80_000));
        assert!(cc.in_startup());
        assert!(cc.rate_pps() >= 20_000.0, "jumped to L/4: {}", cc.rate_pps());
        let mut now = 10_000;
        while cc.in_startup() {
            now += 10_000;
            cc.on_ack(&ack(now, 0, 80_000));
            assert!(now < 400_000, "two doublings from L/4 reach L in about two RTTs");
        }
        assert_eq!(cc.rate_pps(), 80_000.0 * RESTORE, "no queue: holds just below the capacity");
    }

    #[test]
    fn one_slow_capacity_report_does_not_end_startup() {
        // The link is 80,000 pkt/s; one pair stretched by a late wake-up reads 8,000.
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let mut now = ramp(&mut cc, 8_000.0, 50_000);
        now += 10_000;
        cc.on_ack(&ack(now, 0, 8_000));
        assert!(cc.in_startup(), "ended on one slow report at {}", cc.rate_pps());
        let held = cc.rate_pps();
        now += 10_000;
        cc.on_ack(&ack(now, 0, 0));
        assert_eq!(cc.rate_pps(), held, "holds until the next report");
        // The next report reads the link: the climb goes on, and ends at the link.
        while cc.in_startup() {
            now += 10_000;
            cc.on_ack(&ack(now, 0, 80_000));
            assert!(now < 1_000_000, "never reached the link: {}", cc.rate_pps());
        }
        assert_eq!(cc.rate_pps(), 80_000.0 * RESTORE, "holds just below the link");
    }

    #[test]
    fn startup_does_not_jump_to_a_capacity_at_the_clock_resolution() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let r0 = cc.rate_pps();
        // Pairs 1 us apart or less say 1,000,000 pkt/s: no jump to 250,000.
        cc.on_ack(&ack(10_000, 0, 1_000_000));
        assert!(cc.in_startup());
        assert!(cc.rate_pps() < 2.0 * r0, "jumped to {}", cc.rate_pps());
        // A resolved estimate is jumped to as before.
        cc.on_ack(&ack(20_000, 0, 80_000));
        assert!(cc.rate_pps() >= 20_000.0, "{}", cc.rate_pps());
    }

    #[test]
    fn random_loss_is_ignored_congested_loss_is_not() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        // Leave startup on a 12 ms queue (target 10 ms at 100 ms RTT).
        cc.on_ack(&ack(10_000, 12_000, 0));
        assert!(!cc.in_startup());
        let r = cc.rate_pps();
        let loss = LossSignal {
            now_us: 500_000,
            largest_lost: 10,
            lost_pkts: 1,
            snd_next: 100,
            queue_delay_us: 0,
        };
        cc.on_loss(&loss);
        assert_eq!(cc.rate_pps(), r, "loss with an empty queue is random");
        cc.on_loss(&LossSignal { queue_delay_us: 9_000, ..loss });
        // The cut factor comes from the queue last reported by an ACK (12 ms): the excess of
        // 2 ms over 112 ms is small, so UDT's 1/1.125 applies.
        assert!((cc.rate_pps() - r * DECREASE).abs() < 1e-9, "loss with a queue is congestion");
        cc.on_loss(&LossSignal { queue_delay_us: 9_000, now_us: 510_000, ..loss });
        assert!((cc.rate_pps() - r * DECREASE).abs() < 1e-9, "one decrease per two RTTs");
    }

    #[test]
    fn a_cut_from_the_delivery_rate_counts_back_what_random_loss_took() {
        // 3 % random loss for 3 s with no queue: the long-run loss ratio learns it.
        let lossy = |now_us, queue_delay_us, delivery_rate_pps| AckSignal {
            delivery_rate_pps,
            lost_pkts: 30,
            ..ack(now_us, queue_delay_us, 0)
        };
        let mut cc = Adaptive::new(1452, 1 << 20, 100_000);
        cc.on_ack(&ack(10_000, 0, 80_000));
        cc.on_ack(&ack(20_000, 12_000, 80_000));
        assert!(!cc.in_startup());
        let mut now = 20_000;
        while now < 3_000_000 {
            now += 10_000;
            cc.on_ack(&lossy(now, 0, 40_000));
        }
        assert!((0.02..0.04).contains(&cc.loss.base), "{}", cc.loss.base);
        // A queue of 60 ms stands (50 ms over the target) while 60,000 packets a second
        // arrive: the path carried 60,000 / 0.97, and the cut drains the excess from there.
        let r = cc.rate_pps();
        assert!(r > 70_000.0, "{r}");
        let mut competing = cc.clone();
        cc.on_ack(&lossy(now + 10_000, 60_000, 60_000));
        let factor = 1.0 - 50_000.0 / 160_000.0;
        let expected = 60_000.0 / (1.0 - cc.loss.base) * factor;
        assert!(expected > r * MAX_DECREASE && expected < r);
        assert!((cc.rate_pps() - expected).abs() < 1e-6, "{} vs {expected}", cc.rate_pps());
        // Taken as the rate itself, the delivery rate cut deeper by the loss ratio.
        assert!(cc.rate_pps() > 1.02 * 60_000.0 * factor, "{}", cc.rate_pps());
        // Beside a loss-based flow the losses are the shared queue's: what arrived is this
        // flow's share, and the cut (for a loss, at a queue that stands) is from it.
        competing.compete = true;
        for k in 1..=4 {
            competing.on_ack(&lossy(now + k * 10_000, 60_000, 60_000));
        }
        let before = competing.rate_pps();
        assert!(competing.compete && before > 60_000.0, "{before}");
        let overflow = LossSignal {
            now_us: now + 45_000,
            largest_lost: 0,
            lost_pkts: 1,
            snd_next: 1_000,
            queue_delay_us: 60_000,
        };
        competing.on_loss(&overflow);
        let expected = 60_000.0 * COMPETE_DECREASE;
        assert!(expected > before * MAX_DECREASE);
        assert!((competing.rate_pps() - expected).abs() < 1e-6, "{}", competing.rate_pps());
    }

    #[test]
    fn a_long_queue_is_drained_in_about_one_round_trip() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        cc.on_ack(&ack(10_000, 0, 80_000)); // startup jumps to L/4 = 20000 pkt/s
        cc.on_ack(&ack(20_000, 12_000, 80_000)); // a queue: leave startup
        assert!(!cc.in_startup());
        let r = cc.rate_pps();
        assert!(r > 10_000.0);
        // 60 ms of queue, 50 ms above target: cut by 50 / 160, applied to min(rate, delivery).
        cc.on_ack(&ack(200_000, 60_000, 80_000));
        let expected = r.min(50_000.0) * (1.0 - 50.0 / 160.0);
        assert!((cc.rate_pps() - expected).abs() < 1e-6, "{} vs {expected}", cc.rate_pps());
        // Far too long a queue: never more than halved at once.
        cc.on_ack(&ack(400_000, 400_000, 80_000));
        let halved = expected.min(50_000.0) * MAX_DECREASE;
        assert!((cc.rate_pps() - halved).abs() < 1e-6, "{} vs {halved}", cc.rate_pps());
    }

    #[test]
    fn after_draining_the_startup_queue_the_rate_comes_back_to_the_delivery_rate() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let mut now = ramp(&mut cc, 60_000.0, 40_000);
        // The link carries 50,000 packets per second; a queue stands: drain below it.
        now += 10_000;
        cc.on_ack(&AckSignal { delivery_rate_pps: 50_000, ..ack(now, 12_000, 0) });
        assert!(!cc.in_startup());
        assert!((cc.rate_pps() - 50_000.0 * DRAIN).abs() < 1e-6, "{}", cc.rate_pps());
        // Still draining within the RTT: no restore yet.
        cc.on_ack(&ack(now + 60_000, 3_000, 0));
        assert!(cc.rate_pps() < 50_000.0 * 0.9);
        // One RTT + SYN later with the queue gone: back to 95 % of what was delivered.
        cc.on_ack(&ack(now + 110_000, 1_000, 0));
        assert!(cc.rate_pps() >= 50_000.0 * RESTORE, "{}", cc.rate_pps());
    }

    #[test]
    fn no_restore_while_a_queue_remains_after_the_drain() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        cc.on_ack(&AckSignal { delivery_rate_pps: 50_000, ..ack(10_000, 12_000, 0) });
        assert!(!cc.in_startup());
        let drained = cc.rate_pps();
        // Someone else keeps the queue at 8 ms (under the 10 ms target, over half of it).
        cc.on_ack(&ack(130_000, 8_000, 0));
        assert!(cc.rate_pps() < 50_000.0 * 0.9, "restored into a queue: {}", cc.rate_pps());
        assert!(cc.rate_pps() >= drained);
    }

    #[test]
    fn startup_past_the_capacity_drains_and_comes_back_once_the_queue_is_gone() {
        // The capacity reports read too fast (or none came) until startup was well past the
        // link; the delivery rate lags a round trip behind.
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let mut now = overshoot(&mut cc, 60_000.0, 50_000);
        let drain = 50_000.0 * DRAIN;
        assert!((cc.rate_pps() - drain).abs() < 1e-6, "drain below the link: {}", cc.rate_pps());
        // The overshoot's queue comes back for two round trips and is cut for meanwhile; the
        // busy bottleneck delivers the link's rate.
        let left = now;
        while now < left + 200_000 {
            now += 10_000;
            cc.on_ack(&AckSignal { delivery_rate_pps: 50_000, ..ack(now, 30_000, 50_000) });
        }
        assert!(cc.rate_pps() < drain, "{}", cc.rate_pps());
        // Then it is gone: back to 95 % of the link, the cuts for the same queue notwithstanding.
        now += 10_000;
        cc.on_ack(&ack(now, 0, 50_000));
        now += 40_000;
        cc.on_ack(&ack(now, 0, 50_000));
        assert!(cc.rate_pps() >= 50_000.0 * RESTORE, "{}", cc.rate_pps());
    }

    /// Startup with a delivery rate that lags (20,000 pkt/s) until the rate reaches `rate_pps`,
    /// then two capacity reports of `capacity_pps` below it, which end startup; their time.
    fn overshoot(cc: &mut Adaptive, rate_pps: f64, capacity_pps: u32) -> u64 {
        let mut now = ramp(cc, rate_pps, 20_000);
        for _ in 0..2 {
            now += 10_000;
            cc.on_ack(&AckSignal { delivery_rate_pps: 20_000, ..ack(now, 0, capacity_pps) });
        }
        assert!(!cc.in_startup());
        now
    }

    #[test]
    fn a_cut_for_a_queue_that_did_not_stand_leaves_startups_restore_in_place() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let left = overshoot(&mut cc, 60_000.0, 50_000);
        let mut now = left;
        // No queue for a round trip (too soon to restore), then one report of the overshoot's
        // queue, 30 ms: a cut (within two round trips of startup's, as the queue is far above
        // the target), provisional, since nothing stood before it.
        while now < left + 100_000 {
            now += 10_000;
            cc.on_ack(&AckSignal { delivery_rate_pps: 50_000, ..ack(now, 0, 50_000) });
        }
        let before = cc.rate_pps();
        now += 10_000;
        cc.on_ack(&AckSignal { delivery_rate_pps: 50_000, ..ack(now, 30_000, 50_000) });
        assert!(cc.rate_pps() < before, "cut: {} from {before}", cc.rate_pps());
        // The queue is gone at the next report: startup's restore comes, to 95 % of the link.
        now += 10_000;
        cc.on_ack(&AckSignal { delivery_rate_pps: 50_000, ..ack(now, 0, 50_000) });
        assert!(cc.rate_pps() >= 50_000.0 * RESTORE, "{}", cc.rate_pps());
    }

    /// After `now`: a queue of `queue_us` stands for 300 ms while the busy link delivers 50,000
    /// pkt/s, then two reports without it (delivering less); the rate after them.
    fn stand_then_drain(cc: &mut Adaptive, mut now: u64, queue_us: u32, capacity_pps: u32) -> f64 {
        let left = now;
        while now < left + 300_000 {
            now += 10_000;
            let busy = ack(now, queue_us, capacity_pps);
            cc.on_ack(&AckSignal { delivery_rate_pps: 50_000, ..busy });
        }
        for _ in 0..2 {
            now += 20_000;
            cc.on_ack(&AckSignal { delivery_rate_pps: 40_000, ..ack(now, 0, capacity_pps) });
        }
        cc.rate_pps()
    }

    #[test]
    fn a_capacity_report_read_fast_does_not_set_the_restore_above_the_link() {
        // Startup passes a capacity report of 1.7 times the link (bunched delivery) by more than
        // a tenth: it ends on that report, and the drain and the restore aim at it. While the
        // overshoot's queue stands, the delivery rate says what the link carries.
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let now = overshoot(&mut cc, 100_000.0, 85_000);
        // The queue is gone: back to 95 % of what the link delivered, not of the report.
        let restored = stand_then_drain(&mut cc, now, 80_000, 85_000);
        assert!(restored >= 50_000.0 * RESTORE - 1.0, "not restored: {restored}");
        assert!(restored < 50_000.0, "restored above the link: {restored}");
    }

    #[test]
    fn a_delivery_rate_that_lagged_the_ramp_does_not_hold_the_restore_low() {
        // Startup ends on a queue while the delivery rate still reads the ramp of a round trip
        // ago (28,000 of a 50,000 link); the queue then stands, and the busy link delivers all.
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let mut now = ramp(&mut cc, 60_000.0, 28_000);
        now += 10_000;
        cc.on_ack(&AckSignal { delivery_rate_pps: 28_000, ..ack(now, 40_000, 0) });
        assert!(!cc.in_startup());
        let restored = stand_then_drain(&mut cc, now, 60_000, 0);
        assert!(restored >= 50_000.0 * RESTORE - 1.0, "held low: {restored}");
        assert!(restored < 50_000.0, "restored above the link: {restored}");
    }

    #[test]
    fn an_arrival_speed_read_fast_does_not_set_the_restore_above_the_link() {
        // While the overshoot's queue stands, every other report has no delivery rate and an
        // arrival speed of four times the link (bunched arrivals): the restore follows the
        // delivery rate alone.
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let mut now = overshoot(&mut cc, 100_000.0, 85_000);
        let left = now;
        while now < left + 100_000 {
            now += 10_000;
            let busy = ack(now, 80_000, 85_000);
            cc.on_ack(&AckSignal { delivery_rate_pps: 50_000, ..busy });
            now += 10_000;
            let bunched = AckSignal { recv_rate_pps: 200_000, delivery_rate_pps: 0, ..busy };
            cc.on_ack(&AckSignal { now_us: now, ..bunched });
        }
        let restored = stand_then_drain(&mut cc, now, 80_000, 85_000);
        assert!(restored >= 50_000.0 * RESTORE - 1.0, "not restored: {restored}");
        assert!(restored < 50_000.0, "restored above the link: {restored}");
    }

    /// A controller in steady state after 1 s without a queue, and the time of its last report.
    /// The path delivered 100,000 packets per second at the end, so the delivered rate does not
    /// cap the rate for the next second (these tests are of the cuts).
    fn settled() -> (Adaptive, u64) {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        cc.on_ack(&ack(10_000, 12_000, 0)); // leave startup on a queue
        let now = no_queue_until(&mut cc, 10_000, 1_000_000);
        cc.on_ack(&AckSignal { delivery_rate_pps: 100_000, ..ack(now, 0, 0) });
        assert!(!cc.in_startup());
        (cc, now)
    }

    /// Reports with no queue every 10 ms from `now` until `until`; the time of the last.
    fn no_queue_until(cc: &mut Adaptive, mut now: u64, until: u64) -> u64 {
        while now < until {
            now += 10_000;
            cc.on_ack(&ack(now, 0, 0));
        }
        now
    }

    /// One report of a 20 ms queue that did not stand, with the delivery rate dipped to 20,000
    /// packets per second (what a stall's backlog looks like), at `now`.
    fn spike(cc: &mut Adaptive, now: u64) {
        cc.on_ack(&AckSignal { delivery_rate_pps: 20_000, ..ack(now, 20_000, 0) });
    }

    #[test]
    fn a_deep_cut_for_a_queue_that_did_not_stand_is_taken_back_once_it_is_gone() {
        let (mut cc, mut now) = settled();
        let before = cc.rate_pps();
        assert!(before > 40_000.0, "{before}");
        now += 10_000;
        spike(&mut cc, now);
        let cut = cc.rate_pps();
        let expected = (20_000.0 * DECREASE).max(before * MAX_DECREASE);
        assert!((cut - expected).abs() < 1e-6, "cut toward the delivery rate: {cut}");
        assert!(cut < before * DECREASE, "deeper than a plain cut: {cut}");
        // The queue is gone at once; within the round trip nothing changes but the increase.
        now = no_queue_until(&mut cc, now, now + 100_000);
        assert!(cc.rate_pps() < cut * 1.1, "restored within the round trip: {}", cc.rate_pps());
        // One RTT + SYN after the cut: back to the rate before it.
        now += 10_000;
        cc.on_ack(&ack(now, 0, 0));
        assert!(cc.rate_pps() >= before, "{} < {before}", cc.rate_pps());
    }

    #[test]
    fn a_plain_cut_for_a_queue_that_did_not_stand_is_taken_back_too() {
        // A stall's backlog with the delivery rate not dipped: UDT's 1/9, and that too was no
        // queue this flow built (at 10 ms through linkem such reports came every 0.25-0.5 s).
        let (mut cc, mut now) = settled();
        let before = cc.rate_pps();
        now += 10_000;
        cc.on_ack(&AckSignal { delivery_rate_pps: before as u32, ..ack(now, 20_000, 0) });
        let cut = cc.rate_pps();
        assert!((cut - before * DECREASE).abs() < 1.0, "a plain cut: {cut} of {before}");
        // One RTT + SYN after the cut, the queue gone all along.
        no_queue_until(&mut cc, now, now + 120_000);
        assert!(cc.rate_pps() >= before, "{} < {before}", cc.rate_pps());
    }

    #[test]
    fn a_cut_for_a_growing_loss_rate_without_a_queue_is_not_taken_back() {
        // The loss trend's cut (a shallow buffer overflowing before delay shows) had no queue
        // to judge it by: it stands when the losses stop after it.
        let (mut cc, mut now) = settled();
        let before = cc.rate_pps();
        // 1 % lost, then 10 %, then none, with no queue ever reported.
        let mut cut = None;
        for (reports, lost) in [(100, 10), (12, 100), (20, 0)] {
            for _ in 0..reports {
                now += 10_000;
                cc.on_ack(&AckSignal { sent_pkts: 1_000, lost_pkts: lost, ..ack(now, 0, 0) });
                if cut.is_none() && cc.rate_pps() < before * 0.95 {
                    cut = Some(cc.rate_pps());
                }
            }
        }
        let cut = cut.expect("no cut for the growing loss");
        assert!(cc.rate_pps() < cut * 1.05, "taken back: {} after a cut to {cut}", cc.rate_pps());
    }

    #[test]
    fn one_report_never_cuts_below_half_the_rate() {
        // A delivery rate read at a tenth of the rate, with a queue above target: a stall's
        // backlog or a report gone wrong, not a link that shrank tenfold.
        let (mut cc, mut now) = settled();
        let before = cc.rate_pps();
        now += 10_000;
        let bogus = (before / 10.0) as u32;
        cc.on_ack(&AckSignal { delivery_rate_pps: bogus, ..ack(now, 40_000, 0) });
        assert!(
            (cc.rate_pps() - before * MAX_DECREASE).abs() < 1e-6,
            "{} vs {before}",
            cc.rate_pps()
        );
    }

    #[test]
    fn a_deep_cut_stays_when_the_queue_stands_after_it() {
        // The same first report from a newcomer's startup: the queue is still there one round
        // trip later (others hold it), and the cut is kept.
        let (mut cc, mut now) = settled();
        now += 10_000;
        spike(&mut cc, now);
        let cut = cc.rate_pps();
        let spiked = now;
        while now < spiked + 150_000 {
            now += 10_000;
            cc.on_ack(&ack(now, 8_000, 0));
        }
        assert!(cc.rate_pps() < cut * 1.1, "restored into a standing queue: {}", cc.rate_pps());
    }

    #[test]
    fn a_queue_just_above_target_is_not_cut_twice_for_one_overshoot() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        cc.on_ack(&ack(10_000, 12_000, 0)); // leave startup on a queue
        let r0 = cc.rate_pps();
        cc.on_ack(&ack(300_000, 12_000, 0));
        let r1 = cc.rate_pps();
        assert!(r1 < r0, "the first cut in steady state");
        // One RTT + SYN later the report still shows the queue built before the cut took
        // effect: just above the 10 ms target, no second cut.
        cc.on_ack(&ack(415_000, 12_000, 0));
        assert_eq!(cc.rate_pps(), r1, "cut twice for one overshoot");
        // Two RTTs + SYN later a queue still above target is new congestion.
        cc.on_ack(&ack(515_000, 12_000, 0));
        assert!(cc.rate_pps() < r1);
        // Far above target (25 ms > 2 x 10 ms), one RTT + SYN suffices.
        let r2 = cc.rate_pps();
        cc.on_ack(&ack(630_000, 25_000, 0));
        assert!(cc.rate_pps() < r2, "a long queue is cut again after one RTT + SYN");
    }

    #[test]
    fn a_queue_far_above_target_is_cut_again_soon_only_while_it_has_not_begun_to_fall() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        cc.on_ack(&ack(10_000, 12_000, 0)); // leave startup on a queue
        cc.on_ack(&ack(300_000, 25_000, 0));
        let cut = cc.rate_pps();
        // One RTT + SYN later, still far above the 10 ms target either way.
        let mut falling = cc.clone();
        falling.on_ack(&ack(415_000, 22_000, 0));
        assert_eq!(falling.rate_pps(), cut, "cut again while the last cut drains the queue");
        let mut growing = cc.clone();
        growing.on_ack(&ack(415_000, 30_000, 0));
        assert!(growing.rate_pps() < cut, "a queue still growing: the cut was too small");
        // Two RTTs + SYN after the cut, a queue above target is cut whichever way it goes.
        falling.on_ack(&ack(515_000, 22_000, 0));
        assert!(falling.rate_pps() < cut);
    }

    /// `ack` from a receiver that reports no delivery rate: the rate is not capped by it (these
    /// tests are of UDT's increase, which the cap bounds; see `pace`).
    fn blind(now_us: u64, queue_delay_us: u32, capacity_pps: u32) -> AckSignal {
        AckSignal { delivery_rate_pps: 0, ..ack(now_us, queue_delay_us, capacity_pps) }
    }

    #[test]
    fn pairs_read_fast_by_bunched_delivery_do_not_steepen_the_increase() {
        let mut start = Adaptive::new(1452, 1 << 18, 100_000);
        start.on_ack(&blind(10_000, 12_000, 0)); // leave startup on a queue, no pairs yet
        assert!(!start.in_startup());
        start.on_ack(&blind(200_000, 0, 0)); // the restore after the drain
        let climb = |reports: &dyn Fn(u64) -> u32| {
            let mut cc = start.clone();
            let r0 = cc.rate_pps();
            for i in 1..=50 {
                cc.on_ack(&blind(200_000 + i * 10_000, 0, reports(i)));
            }
            cc.rate_pps() - r0
        };
        let clean = climb(&|_| 80_000);
        // Every other report three times the link, as through our emulator.
        let bunched = climb(&|i| if i % 2 == 0 { 240_000 } else { 80_000 });
        let junk = climb(&|_| 240_000);
        assert!(clean > 0.0);
        assert!((bunched - clean).abs() < 1e-6, "bunched {bunched} vs clean {clean}");
        // With nothing but fast readings the increase is a decade steeper (UDT's equation 1):
        // the filter above is what keeps it down.
        assert!(junk > 5.0 * clean, "junk {junk} vs clean {clean}");
    }

    #[test]
    fn near_the_link_the_increase_is_that_of_a_ninth_of_it_below() {
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let mut now = 0;
        while cc.in_startup() {
            now += 10_000;
            cc.on_ack(&blind(now, 0, 80_000));
        }
        // 4,000 packets per second (5 %) below the link: UDT's increase would be a decade
        // smaller than at a ninth of the link below it.
        cc.rate_pps = 76_000.0;
        for _ in 0..20 {
            now += 10_000;
            cc.on_ack(&blind(now, 0, 80_000));
        }
        let step = udt_increase_pkts(80_000.0 / 9.0, 1452.0) * 1e6 / SYN;
        assert!(step >= 10.0 * udt_increase_pkts(4_000.0, 1452.0) * 1e6 / SYN);
        let expected = 76_000.0 + 20.0 * step;
        assert!(expected < 80_000.0);
        assert!((cc.rate_pps() - expected).abs() < 1e-6, "{} vs {expected}", cc.rate_pps());
        // Past the link, UDT's least increase only.
        cc.rate_pps = 81_000.0;
        now += 10_000;
        cc.on_ack(&blind(now, 0, 80_000));
        assert!(cc.rate_pps() - 81_000.0 <= udt_increase_pkts(0.0, 1452.0) * 1e6 / SYN + 1e-6);
    }

    #[test]
    fn no_reading_takes_the_sending_rate_past_what_was_delivered() {
        // Steady state on a path that delivers 50,000 packets per second while the packet pairs
        // read two to eight times that (bunched delivery): the increase is steep, the sending
        // rate is not. It cruises at the delivered rate, probes a quarter above it, and drains.
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let at = |now: u64| {
            let pairs = if now.is_multiple_of(20_000) { 400_000 } else { 100_000 };
            AckSignal { lost_pkts: 0, ..ack(now, 0, pairs) }
        };
        cc.on_ack(&AckSignal { queue_delay_us: 12_000, ..at(10_000) });
        assert!(!cc.in_startup());
        let (mut now, mut least, mut most) = (10_000, f64::MAX, 0.0f64);
        let mut cruise = 0;
        while now < 3_000_000 {
            now += 10_000;
            cc.on_ack(&at(now));
            let sending = 1e6 / cc.period_us();
            if now > 500_000 {
                least = least.min(sending);
                most = most.max(sending);
                cruise += usize::from((sending - 50_000.0).abs() < 1.0);
            }
        }
        assert!(cc.rate_pps() <= 50_000.0 * PROBE_GAIN + 1e-6, "{}", cc.rate_pps());
        assert!((most - 50_000.0 * PROBE_GAIN).abs() < 1.0, "probe {most}");
        assert!((least - 50_000.0 * DRAIN_GAIN).abs() < 1.0, "drain {least}");
        assert!(cruise > 100, "cruise at the delivered rate {cruise} of 250 reports");
    }

    #[test]
    fn a_standing_queue_is_drained_in_proportion_and_not_probed_into() {
        // As above, and then a queue of 4 ms stands (under half the 10 ms target: no cut, and
        // no loss comes with it). Cruising, the pace is the delivered rate less the queue over
        // the round trip; no probe goes on top of it; once it is gone, the probes come back.
        let mut cc = Adaptive::new(1452, 1 << 18, 100_000);
        let at = |now: u64, queue_us: u32| {
            let pairs = if now.is_multiple_of(20_000) { 400_000 } else { 100_000 };
            AckSignal { lost_pkts: 0, ..ack(now, queue_us, pairs) }
        };
        cc.on_ack(&AckSignal { queue_delay_us: 12_000, ..at(10_000, 0) });
        let mut now = 10_000;
        while now < 1_000_000 {
            now += 10_000;
            cc.on_ack(&at(now, 0));
        }
        let cruise = 50_000.0 * (1.0 - 4_000.0 / (100_000.0 + SYN));
        let (mut drained, mut most) = (0, 0.0f64);
        while now < 3_000_000 {
            now += 10_000;
            cc.on_ack(&at(now, 4_000));
            if now <= 1_000_000 + STANDING_US {
                continue; // not standing yet
            }
            let sending = 1e6 / cc.period_us();
            assert!(sending < 50_000.0, "sent {sending} into a standing queue at {now}");
            drained += usize::from((sending - cruise).abs() < 1.0);
            most = most.max(sending);
        }
        assert!(drained > 100, "cruised less the queue in {drained} of 200 reports");
        assert!((most - cruise).abs() < 1.0, "{most} vs {cruise}");
        let mut probed = 0.0f64;
        while now < 4_000_000 {
            now += 10_000;
            cc.on_ack(&at(now, 0));
            probed = probed.max(1e6 / cc.period_us());
        }
        assert!((probed - 50_000.0 * PROBE_GAIN).abs() < 1.0, "probe {probed}");
        assert!(!cc.in_startup() && cc.rate_pps() >= 50_000.0, "cut: {}", cc.rate_pps());
    }

    #[test]
    fn on_a_short_path_a_probe_lasts_a_report_and_its_drain_takes_back_what_it_sent() {
        // 10 ms: the target is 4 ms, so a probe is meant to last 8 ms at a quarter above the
        // delivered rate; the gain holds until the next report, 10 ms later, so it lasts those
        // 10 ms at a fifth above (the same 2 ms of the link queued), and the report after it
        // drains as much. Before, it probed at a quarter for the whole 10 ms and the drain,
        // due 8-16 ms into the cycle by its own clock, fell between reports.
        let mut cc = Adaptive::new(1452, 1 << 18, 10_000);
        let at = |now: u64, queue_us: u32| {
            let pairs = if now.is_multiple_of(20_000) { 400_000 } else { 100_000 };
            AckSignal {
                rtt_us: 10_000,
                min_rtt_us: 10_000,
                lost_pkts: 0,
                ..ack(now, queue_us, pairs)
            }
        };
        assert_eq!(cc.target_queue_delay_us(), 4_000.0);
        cc.on_ack(&AckSignal { queue_delay_us: 6_000, ..at(10_000, 0) });
        assert!(!cc.in_startup());
        let mut now = 10_000;
        let mut sent = Vec::new();
        while now < 3_000_000 {
            now += 10_000;
            cc.on_ack(&at(now, 0));
            if now > 1_000_000 {
                sent.push((1e6 / cc.period_us() / 50_000.0 * 1000.0).round() / 1000.0);
            }
        }
        // Every report paces a probe at 1.2, the drain at 0.8 right after it, or the cruise.
        for (i, &gain) in sent.iter().enumerate() {
            match gain {
                1.2 => {
                    assert!(i + 1 == sent.len() || sent[i + 1] == 0.8, "no drain at {i}: {sent:?}")
                }
                0.8 => {
                    assert!(i > 0 && sent[i - 1] == 1.2, "a drain with no probe at {i}: {sent:?}")
                }
                1.0 => {}
                _ => panic!("paced at {gain} of the delivered rate at {i}: {sent:?}"),
            }
        }
        let probes = sent.iter().filter(|&&g| g == 1.2).count();
        assert!(probes >= 40, "probes in {probes} of {} reports: {sent:?}", sent.len());
        // A standing 1.5 ms (under half the target: no cut) holds the probes, and with no probe
        // there is nothing to drain: the pace is the cruise's, the queue over the round trip
        // less, never the drain's.
        let cruise = 1.0 - 1_500.0 / (10_000.0 + SYN);
        let mut paced = Vec::new();
        while now < 4_000_000 {
            now += 10_000;
            cc.on_ack(&at(now, 1_500));
            if now > 3_100_000 {
                paced.push(1e6 / cc.period_us() / 50_000.0);
            }
        }
        assert!(paced.iter().all(|g| (g - cruise).abs() < 1e-9), "{cruise}: {paced:?}");
    }

    #[test]
    fn the_queuing_target_is_an_eighth_of_the_rtt_and_a_few_ms_on_a_short_path() {
        for (rtt_us, target_us) in [
            (2_000, 2_000.0),
            (4_000, 2_000.0),
            (7_500, 3_000.0),
            (10_000, 4_000.0),
            (20_000, 4_000.0),
            (40_000, 5_000.0),
            (100_000, 10_000.0),
            (300_000, 10_000.0),
        ] {
            let mut cc = Adaptive::new(1452, 1 << 18, rtt_us);
            let short = AckSignal { rtt_us, min_rtt_us: rtt_us, ..ack(10_000, 0, 0) };
            cc.on_ack(&short);
            assert_eq!(cc.target_queue_delay_us(), target_us, "at {rtt_us} us");
        }
    }

    #[test]
    fn pairs_that_agree_leave_the_rate_uncapped() {
        // Pairs that agree with each other and with the delivery: the plain controller.
        let mut capped = Adaptive::new(1452, 1 << 18, 100_000);
        let mut plain = capped.clone();
        let mut now = 0;
        while now < 2_000_000 {
            now += 10_000;
            capped.on_ack(&ack(now, 0, 80_000));
            plain.on_ack(&blind(now, 0, 80_000));
        }
        assert!(!capped.distrusted(now));
        assert_eq!(capped.rate_pps(), plain.rate_pps());
        assert_eq!(capped.period_us(), 1e6 / capped.rate_pps());
    }

    #[test]
    fn growing_loss_rate_counts_as_congestion() {
        let mut t = LossTrend::default();
        let mut now = 0;
        for _ in 0..8 {
            now += 100_000;
            assert!(!t.update(now, 10_000, 100, 100_000, 100_000.0), "steady 1% is random loss");
        }
        now += 100_000;
        assert!(t.update(now, 10_000, 800, 100_000, 100_000.0), "8% after 1% is growing");
    }

    /// Epochs of 300 ms on a 300 ms path: epoch `i` sends `sent[i + 1]` packets and reports as
    /// lost `pct` % of the `sent[i]` sent in the epoch before. Whether any read as growing.
    fn loss_epochs(t: &mut LossTrend, now: &mut u64, pct: u64, sent: &[u64]) -> bool {
        let mut grew = false;
        for pair in sent.windows(2) {
            *now += 300_000;
            grew |= t.update(*now, pair[1], pair[0] * pct / 100, 300_000, 300_000.0);
        }
        grew
    }

    #[test]
    fn random_loss_reported_after_a_rate_cut_is_not_growing() {
        // Steady 3 % random loss, then the rate drops to a third (startup's drain): the losses
        // reported in the next epoch are of the packets sent before the drop.
        let mut t = LossTrend::default();
        let mut now = 0;
        assert!(!loss_epochs(&mut t, &mut now, 3, &[24_000; 10]));
        assert!(!loss_epochs(&mut t, &mut now, 3, &[24_000, 8_000, 8_000, 8_000]));
        // Against the packets of the epoch itself, the same losses read 9 %: growing.
        let mut now_alone = now;
        let mut alone = LossTrend::default();
        for _ in 0..10 {
            now_alone += 300_000;
            alone.update(now_alone, 24_000, 720, 300_000, 0.0);
        }
        assert!(alone.update(now_alone + 300_000, 8_000, 720, 300_000, 0.0));
        // A loss rate that really grows still reads as growing.
        assert!(loss_epochs(&mut t, &mut now, 10, &[8_000, 8_000]));
    }

    #[test]
    fn the_loss_trend_starts_at_the_first_report() {
        // What was sent before the first report (here two round trips in, a late first ACK)
        // is what the first epoch's losses are of; the time before it does not count as an
        // epoch without loss.
        let mut t = LossTrend::default();
        assert!(!t.update(600_000, 3_000, 0, 300_000, 300_000.0));
        let mut now = 600_000;
        assert!(!loss_epochs(&mut t, &mut now, 3, &[3_000, 6_000, 12_000, 24_000]));
        assert!((t.base - 0.03).abs() < 0.002, "long-run loss {} of 3 %", t.base);
        assert!(!loss_epochs(&mut t, &mut now, 3, &[24_000; 10]), "steady 3 % read as growing");
    }
}
