//! One rate budget for the several channels of a transfer (a coupled controller).
//!
//! A transfer may run N data channels, each with its own sender, receiver and socket pair, each
//! on its own thread. Uncoupled, N controllers would each claim a fair share of a bottleneck, and
//! the transfer would take N times what one flow takes from other traffic. A [`CouplingGroup`]
//! makes the N channels one flow as far as congestion control is concerned:
//!
//! - One controller of the configured kind (`config.cc`) lives in the group, behind a mutex. It
//!   sets the *transfer's* period and window.
//! - One channel, the **pilot**, feeds it: its ACKs, NAKs and EXP timeouts become the group
//!   controller's signals. The pilot is the lowest-index channel that is active (has data to
//!   send) and not stalled (its EXP timer fired and no ACK came since). The other members' NAKs
//!   and timeouts do not move the group rate: their sequence numbers are another space, and
//!   their feedback would make the controller step N times per SYN instead of once.
//! - What the pilot's ACK carries is turned into transfer-wide values: path-wide fields (RTT,
//!   queue delay, packet-pair capacity) pass as they are; the arrival speed is the sum of the
//!   latest arrival speeds of the sharing channels; packets sent, lost and acknowledged are the
//!   sums over all members since the previous pilot ACK; the real sending period is the pilot's
//!   divided by the number of sharing channels. Sequence numbers are mapped into one space so
//!   that when the pilot role moves, the new pilot's numbers continue where the old pilot's left.
//! - Every member paces at the group period times the number of *sharing* channels (active and
//!   not stalled; all active ones if every one is stalled), and its flow window is the group
//!   window split likewise, with a floor of [`MIN_MEMBER_WINDOW_PKTS`]. When a channel ends or
//!   stalls, its share goes to the others at once; the transfer's rate does not change.
//! - UDT's freeze after a decrease (`frozen_until_us`) applies to every member.
//! - The configured rate cap (`config.rate_bps`) is applied to the group period, so it caps the
//!   transfer; a sender's own per-channel cap with the same config is then looser and inert.
//!
//! Members are used from different threads. The per-packet reads ([`period_us`],
//! [`window_pkts`], [`frozen_until_us`]) are a few relaxed atomic loads; the mutex is taken only
//! by the pilot's feedback (about every 10 ms, and per NAK) and by the rare role changes.
//!
//! A dying channel does not collapse the group: its EXP timeouts mark it stalled; if it was the
//! pilot and another sharing channel still gets feedback, the pilot role moves and the group rate
//! is not cut. Only when every active channel has stalled (a blackout of the whole path) does the
//! pilot's timeout reach the group controller. The driver must still call
//! [`CouplingGroup::set_active`]`(ch, false)` when a channel ends or dies.
//!
//! A group of one channel behaves exactly like the plain controller: the scaled signals equal
//! the originals and the pilot never moves (if no channel is active, the pilot keeps its role).
//!
//! See `coupled.md` beside this file for the reasoning and the measurements.
//!
//! [`period_us`]: CongestionControl::period_us
//! [`window_pkts`]: CongestionControl::window_pkts
//! [`frozen_until_us`]: CongestionControl::frozen_until_us

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{AckSignal, CongestionControl, LossSignal, WindowBasis};
use crate::config::ChannelConfig;

/// The smallest flow window a member gets from the split (or the group window, if smaller).
pub const MIN_MEMBER_WINDOW_PKTS: f64 = 16.0;

/// How long the other channels hold while the pilot sends a packet train: the train's 4 ms
/// (`crate::sender`) and a millisecond more.
const TRAIN_HOLD_US: u64 = 5_000;

/// `pilot` when no channel was ever elected (a group always has one; kept for robustness).
const NO_PILOT: usize = usize::MAX;

/// Per-channel state shared by a member and the group.
#[derive(Debug, Default)]
struct Slot {
    /// Has data to send (set by the driver).
    active: AtomicBool,
    /// Its EXP timer fired and no ACK came since.
    stalled: AtomicBool,
    /// Counted in the split (active, and not stalled unless every active channel is).
    sharing: AtomicBool,
    /// The receiver's latest arrival speed, 0 if none yet.
    recv_rate_pps: AtomicU32,
    /// The receiver's latest delivery rate, 0 if none yet.
    delivery_rate_pps: AtomicU32,
}

/// The group controller and the sequence-number mapping, behind the mutex.
#[derive(Debug)]
struct Inner {
    cc: Box<dyn CongestionControl>,
    /// The channel whose sequence numbers the controller saw last.
    fed_by: Option<usize>,
    /// Added to that channel's sequence numbers to map them into the controller's space.
    seq_offset: i128,
    /// The latest `snd_next` the controller saw, in its space.
    last_snd_next: u64,
}

impl Inner {
    /// Maps a sequence number of `channel` into the controller's space; when the feeding channel
    /// changes, the new one's `snd_next` continues from the last one the controller saw.
    fn map(&mut self, channel: usize, snd_next: u64, seq: u64) -> u64 {
        if self.fed_by != Some(channel) {
            if self.fed_by.is_some() {
                self.seq_offset = i128::from(self.last_snd_next) - i128::from(snd_next);
            }
            self.fed_by = Some(channel);
        }
        (i128::from(seq) + self.seq_offset).clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// Shared by the channels of one transfer: they pace from one controller's rate.
///
/// Build it with [`CouplingGroup::new`], hand each channel's sender [`CouplingGroup::member`]
/// (through `Sender::with_controller`), and call [`CouplingGroup::set_active`] as channels run
/// out of data or die. See the module docs for how the coupling works.
#[derive(Debug)]
pub struct CouplingGroup {
    config: ChannelConfig,
    channels: usize,
    basis: WindowBasis,
    name: &'static str,
    /// The configured cap as a minimum period, 0 if none.
    min_period_us: f64,
    /// The group's longest period (the configured floor rate), infinite without one.
    max_period_us: f64,
    inner: Mutex<Inner>,
    slots: Vec<Slot>,
    /// The group controller's period (after the cap) and window, as `f64` bits.
    period_bits: AtomicU64,
    window_bits: AtomicU64,
    frozen_until_us: AtomicU64,
    wants_trains: AtomicBool,
    /// Until when the channels other than the pilot hold their sending: the pilot's packet
    /// train is timing the path, and another channel's packets among the train's would read as
    /// a slower link (two channels' trains at once read 647 Mbit/s of a 1000 Mbit/s link
    /// through linkem, and startup held there).
    train_hold_until_us: AtomicU64,
    /// Number of sharing channels, at least 1.
    sharing: AtomicUsize,
    pilot: AtomicUsize,
    /// Sums over all members since the pilot's last ACK.
    pending_sent: AtomicU64,
    pending_lost: AtomicU64,
    pending_acked: AtomicU64,
}

impl CouplingGroup {
    /// A group for `channels` channels running `config.cc`. Every channel starts active.
    pub fn new(config: &ChannelConfig, channels: usize) -> Arc<Self> {
        let channels = channels.max(1);
        let cc = super::build(config);
        // The same bounds as a lone sender's.
        let (min_period_us, max_period_us) = config.period_bounds_us();
        let group = Self {
            config: config.clone(),
            channels,
            basis: cc.window_basis(),
            name: cc.name(),
            min_period_us,
            max_period_us,
            period_bits: AtomicU64::new(0),
            window_bits: AtomicU64::new(0),
            frozen_until_us: AtomicU64::new(0),
            wants_trains: AtomicBool::new(false),
            train_hold_until_us: AtomicU64::new(0),
            inner: Mutex::new(Inner { cc, fed_by: None, seq_offset: 0, last_snd_next: 0 }),
            slots: (0..channels)
                .map(|_| Slot { active: AtomicBool::new(true), ..Slot::default() })
                .collect(),
            sharing: AtomicUsize::new(channels),
            pilot: AtomicUsize::new(NO_PILOT),
            pending_sent: AtomicU64::new(0),
            pending_lost: AtomicU64::new(0),
            pending_acked: AtomicU64::new(0),
        };
        {
            let inner = group.lock();
            group.publish(&inner);
            let _ = group.elect(&inner);
        }
        Arc::new(group)
    }

    /// The controller channel `channel` (0-based, below the group's size) hands its sender.
    pub fn member(self: &Arc<Self>, channel: usize) -> Box<dyn CongestionControl> {
        assert!(channel < self.channels, "channel {channel} of a group of {}", self.channels);
        Box::new(Member { group: Arc::clone(self), channel })
    }

    /// Says whether channel `channel` has data to send; the rate is split among the active
    /// channels. A channel that ended (finished or died) is set inactive for good by its driver.
    ///
    /// Cheap when nothing changes (a driver may say it every turn of its loop): the lock is
    /// taken only on a change. Only the channel's own driver sets its slot.
    pub fn set_active(&self, channel: usize, active: bool) {
        let Some(slot) = self.slots.get(channel) else { return };
        if slot.active.load(Relaxed) == active {
            return;
        }
        let inner = self.lock();
        if slot.active.swap(active, Relaxed) != active {
            let _ = self.elect(&inner);
        }
    }

    /// Number of channels the group was made for.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// What the path was seen to deliver to the whole group, in packets per second (the
    /// group controller's [`CongestionControl::path_rate_pps`]; 0 before it settled).
    pub fn path_rate_pps(&self) -> f64 {
        self.lock().cc.path_rate_pps()
    }

    /// The channel whose feedback drives the group controller.
    pub fn pilot(&self) -> usize {
        self.pilot.load(Relaxed)
    }

    /// Number of channels the rate is split among (at least 1).
    pub fn sharing_channels(&self) -> usize {
        self.sharing.load(Relaxed)
    }

    /// The transfer's packet sending period in microseconds (a member paces at this times
    /// [`CouplingGroup::sharing_channels`]).
    pub fn group_period_us(&self) -> f64 {
        f64::from_bits(self.period_bits.load(Relaxed))
    }

    /// The transfer's flow window in packets (split among the sharing channels).
    pub fn group_window_pkts(&self) -> f64 {
        f64::from_bits(self.window_bits.load(Relaxed))
    }

    /// The configuration the group controller was built from.
    pub fn config(&self) -> &ChannelConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a controller that is still a valid value.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the controller's outputs to the atomics the members read per packet.
    fn publish(&self, inner: &Inner) {
        let period = inner.cc.period_us().max(self.min_period_us).min(self.max_period_us);
        self.period_bits.store(period.to_bits(), Relaxed);
        self.window_bits.store(inner.cc.window_pkts().to_bits(), Relaxed);
        self.frozen_until_us.store(inner.cc.frozen_until_us(), Relaxed);
        self.wants_trains.store(inner.cc.wants_trains(), Relaxed);
    }

    /// Recomputes who shares the rate and who is the pilot; returns whether some active channel
    /// is not stalled. Called with the lock held, so role changes are serialized.
    fn elect(&self, _inner: &MutexGuard<'_, Inner>) -> bool {
        let active = |s: &Slot| s.active.load(Relaxed);
        let healthy = |s: &Slot| active(s) && !s.stalled.load(Relaxed);
        let any_healthy = self.slots.iter().any(healthy);
        let mut sharing = 0;
        for s in &self.slots {
            let shares = if any_healthy { healthy(s) } else { active(s) };
            s.sharing.store(shares, Relaxed);
            sharing += usize::from(shares);
        }
        self.sharing.store(sharing.max(1), Relaxed);
        // With no active channel the pilot keeps its role: someone must still feed the
        // controller during the tails, and a group of one must never lose its pilot.
        if let Some(pilot) = self.slots.iter().position(|s| s.sharing.load(Relaxed)) {
            self.pilot.store(pilot, Relaxed);
        } else if self.pilot.load(Relaxed) == NO_PILOT {
            self.pilot.store(0, Relaxed);
        }
        any_healthy
    }

    /// Marks `channel` stalled or not; returns whether some active channel is not stalled.
    fn set_stalled(&self, channel: usize, stalled: bool) -> bool {
        let inner = self.lock();
        self.slots[channel].stalled.store(stalled, Relaxed);
        self.elect(&inner)
    }

    /// The transfer's arrival speed or delivery rate (`rate` picks which): the sum of the
    /// sharing channels' latest reports, scaled up for those that have not reported yet; `own`
    /// (times the share count) if none has.
    fn summed_rate_pps(&self, own: u32, rate: fn(&Slot) -> &AtomicU32) -> u32 {
        let (mut sum, mut known, mut counted) = (0u64, 0u64, 0u64);
        for s in &self.slots {
            if s.sharing.load(Relaxed) {
                counted += 1;
                let r = rate(s).load(Relaxed);
                if r > 0 {
                    sum += u64::from(r);
                    known += 1;
                }
            }
        }
        let total = if known == 0 {
            u64::from(own) * self.sharing.load(Relaxed) as u64
        } else if known == counted {
            sum
        } else {
            sum * counted / known
        };
        total.min(u64::from(u32::MAX)) as u32
    }
}

/// What one channel's sender holds: a view of the group.
#[derive(Debug)]
struct Member {
    group: Arc<CouplingGroup>,
    channel: usize,
}

impl Member {
    fn is_pilot(&self) -> bool {
        self.group.pilot.load(Relaxed) == self.channel
    }
}

impl CongestionControl for Member {
    fn on_ack(&mut self, ack: &AckSignal) {
        let g = &*self.group;
        let slot = &g.slots[self.channel];
        if ack.recv_rate_pps > 0 {
            slot.recv_rate_pps.store(ack.recv_rate_pps, Relaxed);
        }
        if ack.delivery_rate_pps > 0 {
            slot.delivery_rate_pps.store(ack.delivery_rate_pps, Relaxed);
        }
        g.pending_sent.fetch_add(ack.sent_pkts, Relaxed);
        g.pending_lost.fetch_add(ack.lost_pkts, Relaxed);
        g.pending_acked.fetch_add(ack.acked_pkts, Relaxed);
        if slot.stalled.load(Relaxed) {
            let _ = g.set_stalled(self.channel, false);
        }
        if !self.is_pilot() {
            return;
        }
        let mut inner = g.lock();
        let n = g.sharing.load(Relaxed) as f64;
        let snd_next = inner.map(self.channel, ack.snd_next, ack.snd_next);
        inner.last_snd_next = snd_next;
        let signal = AckSignal {
            acked_pkts: g.pending_acked.swap(0, Relaxed),
            recv_rate_pps: if ack.recv_rate_pps > 0 {
                g.summed_rate_pps(ack.recv_rate_pps, |s| &s.recv_rate_pps)
            } else {
                0
            },
            delivery_rate_pps: if ack.delivery_rate_pps > 0 {
                g.summed_rate_pps(ack.delivery_rate_pps, |s| &s.delivery_rate_pps)
            } else {
                0
            },
            real_period_us: ack.real_period_us.map(|p| p / n),
            sent_pkts: g.pending_sent.swap(0, Relaxed),
            lost_pkts: g.pending_lost.swap(0, Relaxed),
            snd_next,
            ..*ack
        };
        inner.cc.on_ack(&signal);
        g.publish(&inner);
    }

    fn on_loss(&mut self, loss: &LossSignal) {
        if !self.is_pilot() {
            return;
        }
        let g = &*self.group;
        let mut inner = g.lock();
        let largest_lost = inner.map(self.channel, loss.snd_next, loss.largest_lost);
        let snd_next = inner.map(self.channel, loss.snd_next, loss.snd_next);
        inner.last_snd_next = snd_next;
        inner.cc.on_loss(&LossSignal { largest_lost, snd_next, ..*loss });
        g.publish(&inner);
    }

    fn on_timeout(&mut self, now_us: u64) {
        let g = &*self.group;
        let was_pilot = self.is_pilot();
        let others_alive = g.set_stalled(self.channel, true);
        // A timeout reaches the controller only when no active channel gets feedback any more
        // (the path is down or badly congested), and then once: from the pilot, or from the
        // channel whose stall completed the set (the role has just moved back from it). While
        // another channel still gets feedback, one dead channel is not congestion of the path;
        // the pilot role has moved to a live channel.
        if !others_alive && (was_pilot || self.is_pilot()) {
            let mut inner = g.lock();
            inner.cc.on_timeout(now_us);
            g.publish(&inner);
        }
    }

    fn period_us(&self) -> f64 {
        self.group.group_period_us() * self.group.sharing.load(Relaxed) as f64
    }

    fn window_pkts(&self) -> f64 {
        let w = self.group.group_window_pkts();
        let n = self.group.sharing.load(Relaxed) as f64;
        (w / n).max(w.min(MIN_MEMBER_WINDOW_PKTS))
    }

    fn frozen_until_us(&self) -> u64 {
        let frozen = self.group.frozen_until_us.load(Relaxed);
        match self.is_pilot() {
            true => frozen,
            false => frozen.max(self.group.train_hold_until_us.load(Relaxed)),
        }
    }

    fn window_basis(&self) -> WindowBasis {
        self.group.basis
    }

    /// Only the pilot times the path: its reports are what the group's controller reads.
    fn wants_trains(&self) -> bool {
        self.group.wants_trains.load(Relaxed) && self.is_pilot()
    }

    fn on_train(&mut self, now_us: u64) {
        if self.group.sharing.load(Relaxed) > 1 {
            self.group.train_hold_until_us.store(now_us + TRAIN_HOLD_US, Relaxed);
        }
    }

    fn path_rate_pps(&self) -> f64 {
        self.group.path_rate_pps()
    }

    fn competing(&self) -> bool {
        self.group.lock().cc.competing()
    }

    fn name(&self) -> &'static str {
        self.group.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{CcKind, build};

    fn config(cc: CcKind) -> ChannelConfig {
        ChannelConfig { cc, rate_bps: 400_000_000, ..ChannelConfig::default() }
    }

    /// An ACK of a busy path: `queue_delay_us` of queue, the given arrival speed and `snd_next`.
    fn ack(now_us: u64, queue_delay_us: u32, recv_rate_pps: u32, snd_next: u64) -> AckSignal {
        AckSignal {
            now_us,
            acked_pkts: 400,
            rtt_us: 100_000 + u64::from(queue_delay_us),
            rtt_var_us: 1_000,
            min_rtt_us: 100_000,
            recv_rate_pps,
            capacity_pps: 80_000,
            delivery_rate_pps: recv_rate_pps,
            queue_delay_us,
            real_period_us: Some(20.0),
            sent_pkts: 500,
            lost_pkts: 5,
            snd_next,
        }
    }

    fn loss(now_us: u64, largest_lost: u64, snd_next: u64, queue_delay_us: u32) -> LossSignal {
        LossSignal { now_us, largest_lost, lost_pkts: 3, snd_next, queue_delay_us }
    }

    /// A floor rate holds the whole group however hard the controller cuts; two channels share
    /// it (each at twice the group period), and a cap above it still caps.
    #[test]
    fn the_rate_floor_holds_the_group_through_congestion() {
        let cfg = ChannelConfig {
            cc: CcKind::Adaptive,
            rate_bps: 400_000_000,
            min_rate_bps: 100_000_000,
            ..ChannelConfig::default()
        };
        let (shortest, longest) = cfg.period_bounds_us();
        assert!((longest / shortest - 4.0).abs() < 1e-9);
        let group = CouplingGroup::new(&cfg, 2);
        let (mut a, b) = (group.member(0), group.member(1));
        let mut snd_next = 1_000;
        for step in 0..300u64 {
            let now = 10_000 * (step + 1);
            snd_next += 200;
            // A deep queue and losses every step: the controller cuts again and again.
            a.on_ack(&ack(now, 80_000, 5_000, snd_next));
            a.on_loss(&loss(now + 1, snd_next - 100, snd_next, 80_000));
            for member in [&a, &b] {
                let period = member.period_us();
                assert!(
                    period <= 2.0 * longest + 1e-9,
                    "step {step}: {period} > {}",
                    2.0 * longest
                );
                assert!(period >= 2.0 * shortest - 1e-9, "step {step}: {period}");
            }
            // For its first second the controller cuts below the floor at every step, and the
            // floor binds. (A queue that stands through the cuts longer is taken for a
            // loss-based flow's, and the controller competes: its rate need not stay below.)
            if step < 100 {
                let period = a.period_us();
                assert!(
                    (period - 2.0 * longest).abs() < 1e-6,
                    "step {step}: the floor binds: {period}"
                );
            }
        }
        let bad = ChannelConfig { rate_bps: 1_000_000, min_rate_bps: 2_000_000, ..cfg };
        assert!(bad.validate().is_err());
    }

    /// Startup, growth, congestion, losses, a timeout: the same signals to a plain controller and
    /// to the one member of a group (which is also set inactive for the tail) give bit-identical
    /// outputs at every step, for every kind.
    #[test]
    fn a_group_of_one_is_the_plain_controller() {
        for kind in [CcKind::Adaptive, CcKind::Udt, CcKind::Fixed] {
            let cfg = config(kind);
            let mut plain = build(&cfg);
            let group = CouplingGroup::new(&cfg, 1);
            let mut member = group.member(0);
            let cap = 1e6 / (cfg.rate_bps as f64 / (cfg.packet_size as f64 * 8.0));
            let mut snd_next = 1_000;
            for step in 0..400u64 {
                let now = 10_000 * (step + 1);
                snd_next += 300 + step % 7;
                let queue = match step % 50 {
                    20..=24 => 15_000,
                    30 => 40_000,
                    _ => 0,
                };
                let a = ack(now, queue as u32, 30_000 + 10 * step as u32, snd_next);
                let a = if step % 9 == 0 { AckSignal { recv_rate_pps: 0, ..a } } else { a };
                plain.on_ack(&a);
                member.on_ack(&a);
                if step % 13 == 5 {
                    let l = loss(now + 1, snd_next - 200, snd_next, queue as u32 / 2 + 3_000);
                    plain.on_loss(&l);
                    member.on_loss(&l);
                }
                if step == 200 || step == 201 {
                    plain.on_timeout(now + 2);
                    member.on_timeout(now + 2);
                }
                if step == 300 {
                    group.set_active(0, false);
                }
                let what = format!("{} step {step}", kind.name());
                assert_eq!(member.period_us(), plain.period_us().max(cap), "{what}");
                assert_eq!(member.window_pkts(), plain.window_pkts(), "{what}");
                assert_eq!(member.frozen_until_us(), plain.frozen_until_us(), "{what}");
                assert_eq!(member.window_basis(), plain.window_basis(), "{what}");
                assert_eq!(member.name(), plain.name());
            }
        }
    }

    #[test]
    fn n_sharing_members_each_pace_at_n_times_the_group_period() {
        let group = CouplingGroup::new(&ChannelConfig::default(), 4);
        let mut members: Vec<_> = (0..4).map(|c| group.member(c)).collect();
        for step in 1..=30 {
            members[0].on_ack(&ack(step * 10_000, 0, 20_000, step * 1_000));
        }
        let p = group.group_period_us();
        let w = group.group_window_pkts();
        assert_eq!(group.sharing_channels(), 4);
        for m in &members {
            assert_eq!(m.period_us(), 4.0 * p);
            assert_eq!(m.window_pkts(), (w / 4.0).max(MIN_MEMBER_WINDOW_PKTS));
        }
        // Together they send at the group's rate.
        let total_pps: f64 = members.iter().map(|m| 1e6 / m.period_us()).sum();
        assert!((total_pps - 1e6 / p).abs() < 1e-6 * total_pps);
    }

    /// The pilot's ACK reaches the group controller with transfer-wide counts: what every member
    /// sent since, and the members' arrival speeds summed.
    #[test]
    fn the_pilot_feeds_transfer_wide_signals() {
        let cfg = ChannelConfig { cc: CcKind::Udt, ..ChannelConfig::default() };
        let group = CouplingGroup::new(&cfg, 3);
        let mut members: Vec<_> = (0..3).map(|c| group.member(c)).collect();
        // UDT's slow start grows its window by the acknowledged packets: all members' count.
        let w0 = group.group_window_pkts();
        members[1].on_ack(&AckSignal { acked_pkts: 100, ..ack(10_000, 0, 10_000, 50) });
        members[2].on_ack(&AckSignal { acked_pkts: 100, ..ack(10_000, 0, 11_000, 50) });
        assert_eq!(group.group_window_pkts(), w0, "non-pilot ACKs do not move the controller");
        members[0].on_ack(&AckSignal { acked_pkts: 100, ..ack(10_000, 0, 12_000, 50) });
        assert_eq!(group.group_window_pkts(), w0 + 300.0);
        // The first loss ends slow start at the transfer's arrival speed: 10 + 11 + 12 kpkt/s.
        members[0].on_loss(&loss(20_000, 40, 60, 0));
        assert!((group.group_period_us() - 1e6 / 33_000.0).abs() < 1e-9);
        assert!((members[2].period_us() - 3e6 / 33_000.0).abs() < 1e-9);
    }

    #[test]
    fn set_inactive_gives_the_share_to_the_others_and_moves_the_pilot() {
        let group = CouplingGroup::new(&ChannelConfig::default(), 4);
        let members: Vec<_> = (0..4).map(|c| group.member(c)).collect();
        let p = group.group_period_us();
        assert_eq!(group.pilot(), 0);
        group.set_active(2, false);
        assert_eq!((group.sharing_channels(), group.pilot()), (3, 0));
        assert_eq!(members[1].period_us(), 3.0 * p);
        group.set_active(0, false);
        assert_eq!((group.sharing_channels(), group.pilot()), (2, 1));
        assert_eq!(members[3].period_us(), 2.0 * p);
        assert_eq!(group.group_period_us(), p, "the transfer's rate is unchanged");
        group.set_active(1, false);
        group.set_active(3, false);
        assert_eq!(group.pilot(), 3, "with nobody active the last pilot keeps the role");
        assert_eq!(group.sharing_channels(), 1);
        group.set_active(0, true);
        assert_eq!((group.sharing_channels(), group.pilot()), (1, 0));
    }

    #[test]
    fn non_pilot_signals_do_not_move_the_group_rate() {
        let group = CouplingGroup::new(&ChannelConfig::default(), 3);
        let mut members: Vec<_> = (0..3).map(|c| group.member(c)).collect();
        for step in 1..=20 {
            members[0].on_ack(&ack(step * 10_000, 0, 20_000, step * 1_000));
        }
        let p = group.group_period_us();
        // A congested ACK, a loss with a full queue and a timeout, all from channel 2.
        members[2].on_ack(&ack(300_000, 50_000, 20_000, 5_000));
        members[2].on_loss(&loss(300_001, 4_000, 5_000, 50_000));
        members[2].on_timeout(300_002);
        assert_eq!(group.group_period_us(), p);
        assert_eq!(group.pilot(), 0);
        assert_eq!(group.sharing_channels(), 2, "the stalled channel leaves the split");
        assert_eq!(members[0].period_us(), 2.0 * p);
        // An ACK brings it back.
        members[2].on_ack(&ack(310_000, 0, 20_000, 5_100));
        assert_eq!(group.sharing_channels(), 3);
    }

    /// One dead channel is not congestion: the pilot's own timeouts move the role to a live
    /// channel; only when every channel has stalled does the group controller see a timeout.
    #[test]
    fn timeouts_cut_the_rate_only_when_no_channel_gets_feedback() {
        let group = CouplingGroup::new(&ChannelConfig::default(), 3);
        let mut members: Vec<_> = (0..3).map(|c| group.member(c)).collect();
        for step in 1..=20 {
            members[0].on_ack(&ack(step * 10_000, 0, 20_000, step * 1_000));
        }
        let p = group.group_period_us();
        members[0].on_timeout(300_000);
        assert_eq!(group.group_period_us(), p, "a dead pilot does not cut the rate");
        assert_eq!(group.pilot(), 1, "the role moved to a live channel");
        members[2].on_timeout(300_100);
        assert_eq!(group.group_period_us(), p);
        members[1].on_timeout(300_200);
        let cut = group.group_period_us();
        assert!((cut - 4.0 * p).abs() < 1e-9, "the whole path is down: adaptive cuts to 1/4");
        assert_eq!(group.pilot(), 0);
        members[1].on_timeout(600_000);
        members[2].on_timeout(600_000);
        assert_eq!(group.group_period_us(), cut, "only the pilot's later timeouts count");
        members[0].on_timeout(600_000);
        assert!(group.group_period_us() > cut);
    }

    /// When the pilot role moves, the new pilot's sequence numbers continue the old one's, so
    /// UDT's "loss of a packet sent after the last decrease" still means what it says.
    #[test]
    fn the_pilot_moves_and_sequence_numbers_stay_comparable() {
        let cfg = ChannelConfig { cc: CcKind::Udt, ..ChannelConfig::default() };
        let group = CouplingGroup::new(&cfg, 2);
        let mut members: Vec<_> = (0..2).map(|c| group.member(c)).collect();
        // Channel 0 numbers from 1_000_000, channel 1 from 10.
        members[0].on_ack(&ack(10_000, 0, 20_000, 1_000_100));
        members[0].on_loss(&loss(20_000, 1_000_050, 1_000_200, 0)); // ends slow start
        members[0].on_ack(&ack(40_000, 0, 20_000, 1_000_300));
        let p = group.group_period_us();
        group.set_active(0, false);
        assert_eq!(group.pilot(), 1);
        members[0].on_ack(&ack(50_000, 0, 20_000, 1_000_400));
        assert_eq!(group.group_period_us(), p, "the old pilot no longer moves the rate");
        // Channel 1 takes over at its snd_next 500; its packets 500.. are new to the controller.
        members[1].on_ack(&ack(60_000, 0, 20_000, 500));
        let p = group.group_period_us();
        members[1].on_loss(&loss(70_000, 520, 600, 0));
        assert!((group.group_period_us() - 1.125 * p).abs() < 1e-9, "a new epoch: decrease");
        assert_eq!(group.group_period_us(), members[1].period_us(), "one sharing channel");
        assert_eq!(members[1].frozen_until_us(), 80_000);
        assert_eq!(members[0].frozen_until_us(), 80_000, "the freeze applies to every member");
        let p = group.group_period_us();
        members[1].on_loss(&loss(75_000, 560, 650, 0));
        assert_eq!(group.group_period_us(), p, "same epoch: no second decrease");
    }
}
