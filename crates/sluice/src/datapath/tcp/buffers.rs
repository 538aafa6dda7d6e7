//! Dynamic right-sizing of the streams' socket buffers (FSP 3.2, after Fisk and Feng's DRS).
//!
//! A TCP stream moves at most one window per round trip, and its window is bounded by the
//! receiver's buffer (and the sender's, which holds what is unacknowledged). The receiver
//! measures each stream: the bytes it delivers per interval, the round trip, and the mean time
//! it is away from the socket between reads (handling what it read: decrypting, writing the
//! file). The receive buffer holds what arrives over a round trip and while the receiver is
//! away, for the window is what is free in it; it needs twice that (room for the window to
//! double), and the kernel's figure for a buffer counts about twice the payload it holds (the
//! rest is its bookkeeping): four times. The receiver sizes its receive buffer and tells the
//! sender, which sizes its send buffer the same.
//!
//! Linux tunes both buffers by itself, up to the third field of `net.ipv4.tcp_rmem` (receive)
//! and `net.ipv4.tcp_wmem` (send), and setting `SO_RCVBUF`/`SO_SNDBUF` switches that tuning
//! off for the socket, held at the value set, which the kernel caps at `net.core.rmem_max` /
//! `wmem_max` (doubled, for its bookkeeping) unless the process may force it
//! (`CAP_NET_ADMIN`). So a buffer is set only when the tuning's ceiling is below the need,
//! and never below that ceiling; when the kernel holds a buffer short of the need, the
//! transfer says once what to set ([`ChannelReport::buffer_notice`](super::super::ChannelReport)).
//!
//! The round trip is the kernel's own receive-side estimate (`TCP_INFO`'s `tcpi_rcv_rtt`, from
//! the timestamps of arriving segments: what Linux's tuning of the receive buffer uses) where
//! the kernel has one; else the least echo time seen (the sender echoes the timestamp of each
//! ACK, [`super::record`]), which also holds the data the sender had queued in its socket.
//!
//! What was measured on loopback (1 GiB, `tests/datapath_tcp.rs`'s benchmark) that shaped this:
//! - Echo times as the round trip made the need several times too large (send buffers forced
//!   to 7 to 25 MB where the tuning's 4 MiB sufficed): hence the kernel's figure first.
//! - With the kernel's round trip alone (tens of microseconds on loopback) a stream held to
//!   32 KiB buffers (a namespace whose tuning stopped there) looked unhindered and was left at
//!   2.6 Gbit/s: the receiver's time away is what its window must also cover.
//! - A send buffer sized to the round trip alone, without the time away, stalled: a 1 MB
//!   receive buffer with a 33 kB send buffer moved 1 GiB in 382 s, each buffer's worth waiting
//!   for a delayed ACK. Hence the same size at both ends.
//! - The longest time away (rather than the mean) made 60 to 130 MB buffers on a loaded
//!   machine, where a rare stall is better met by TCP's flow control than by buffers that hold
//!   it.
//! - As it is: in the 32 KiB namespace, 1 stream 4.6 Gbit/s right-sized against 2.8 left alone
//!   (buffers 10-11 MB, in one run of five only 53 kB, at 2.7 Gbit/s); on plain loopback no
//!   difference (A/B wall 1.01), the sender's buffer set to 10 to 17 MB above the tuning's 4
//!   MiB, the receiver's left to the tuning.

use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::net::sockopt;

/// A stream is measured over intervals of at least this long (and 4 round trips).
const MEASURE_MIN: Duration = Duration::from_millis(100);
/// The need is passed on (and acted on) when it grew by at least a quarter.
const GROWTH_NUM: u64 = 5;
const GROWTH_DEN: u64 = 4;
/// A stream's need, in the kernel's figure, per byte it moves over a round trip and its time
/// away: twice (room for the window to double) times two (the kernel's bookkeeping share).
const NEED_PER_RTT: u128 = 4;
/// The kernel keeps buffer sizes in an `int` and doubles what is asked.
const MAX_REQUEST_BYTES: u64 = (i32::MAX / 2) as u64;

/// Which buffer of a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// `SO_RCVBUF`, tuned up to `net.ipv4.tcp_rmem`, capped by `net.core.rmem_max`.
    Receive,
    /// `SO_SNDBUF`, tuned up to `net.ipv4.tcp_wmem`, capped by `net.core.wmem_max`.
    Send,
}

impl Side {
    fn sysctls(self) -> (&'static str, &'static str) {
        match self {
            Side::Receive => ("net.ipv4.tcp_rmem", "net.core.rmem_max"),
            Side::Send => ("net.ipv4.tcp_wmem", "net.core.wmem_max"),
        }
    }
}

/// The kernel's limits on one side's buffers, in the kernel's own (doubled) bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    /// `tcp_rmem` / `tcp_wmem`: minimum, default, and the ceiling of the kernel's tuning.
    pub(super) tuning: [u64; 3],
    /// `rmem_max` / `wmem_max`: the most `SO_RCVBUF` / `SO_SNDBUF` takes without force.
    pub(super) cap: u64,
}

impl Limits {
    /// Reads the limits from `/proc/sys`; `None` where they cannot be read (not Linux):
    /// buffers are then left to the system.
    pub(super) fn read(side: Side) -> Option<Self> {
        let (tuning, cap) = side.sysctls();
        let path = |name: &str| format!("/proc/sys/{}", name.replace('.', "/"));
        let text = std::fs::read_to_string(path(tuning)).ok()?;
        let fields: Vec<u64> = text.split_whitespace().filter_map(|f| f.parse().ok()).collect();
        let tuning: [u64; 3] = fields.try_into().ok()?;
        let cap = std::fs::read_to_string(path(cap)).ok()?.trim().parse().ok()?;
        Some(Self { tuning, cap })
    }
}

/// What to do about one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decision {
    /// The value to give `SO_RCVBUF` / `SO_SNDBUF` (half the kernel's figure), if any.
    pub(super) set: Option<u64>,
    /// The need is beyond what the kernel allows: the sysctls to raise.
    pub(super) short: bool,
}

/// What to do for a buffer that must hold `need` bytes (the kernel's figure), given the
/// kernel's `limits`, the figure set on it before (`set`: `None` while the kernel tunes it),
/// and whether the process may force past the cap.
pub(super) fn decide(need: u64, limits: Limits, set: Option<u64>, privileged: bool) -> Decision {
    let ceiling = limits.tuning[2];
    match set {
        Some(had) if had >= need => return Decision { set: None, short: false },
        None if need <= ceiling => return Decision { set: None, short: false },
        _ => {}
    }
    let grantable = if privileged { 2 * MAX_REQUEST_BYTES } else { 2 * limits.cap };
    // Setting a buffer ends the kernel's tuning: worth it only above the tuning's ceiling.
    let floor = set.unwrap_or(ceiling);
    if grantable <= floor {
        return Decision { set: None, short: true };
    }
    let granted = need.min(grantable);
    Decision { set: Some(granted.div_ceil(2)), short: granted < need }
}

/// Where a [`Meter`]'s round trip comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The caller's hint (or none: 0).
    Hint,
    /// The least echo time seen.
    Echo,
    /// The kernel's latest estimate.
    Kernel,
}

/// A stream's right-sizing on the receiving end: what it measured.
#[derive(Debug)]
pub(super) struct Meter {
    /// The round trip in microseconds (0: none), and where it comes from.
    rtt_us: u64,
    source: Source,
    since: Instant,
    bytes: u64,
    /// Time away from the socket in this interval, and the stretches it is made of.
    away: Duration,
    stretches: u32,
    /// The largest need found (the kernel's figure), and the last passed on.
    need: u64,
    told: u64,
}

impl Meter {
    pub(super) fn new(rtt_hint_us: u64, now: Instant) -> Self {
        Self {
            rtt_us: rtt_hint_us,
            source: Source::Hint,
            since: now,
            bytes: 0,
            away: Duration::ZERO,
            stretches: 0,
            need: 0,
            told: 0,
        }
    }

    /// A round trip sample (an ACK's echo): the least counts, unless the kernel's is known.
    pub(super) fn rtt(&mut self, sample_us: u64) {
        if self.source == Source::Hint || (self.source == Source::Echo && sample_us < self.rtt_us) {
            self.rtt_us = sample_us.max(1);
            self.source = Source::Echo;
        }
    }

    /// The kernel's receive-side round trip (0: it has none yet).
    pub(super) fn kernel_rtt(&mut self, rtt_us: u64) {
        if rtt_us > 0 {
            self.rtt_us = rtt_us;
            self.source = Source::Kernel;
        }
    }

    fn interval(&self) -> Duration {
        MEASURE_MIN.max(Duration::from_micros(4 * self.rtt_us))
    }

    /// Whether an interval ends at `now` (the time to read the kernel's round trip).
    pub(super) fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) >= self.interval()
    }

    /// A stretch the receiving end spent away from the socket (not reading, not waiting for it).
    pub(super) fn away(&mut self, away: Duration) {
        self.away += away;
        self.stretches += 1;
    }

    /// Payload bytes delivered.
    pub(super) fn delivered(&mut self, bytes: u64) {
        self.bytes += bytes;
    }

    /// At the end of each interval, the stream's need (the kernel's figure: four times the
    /// bytes it moves over a round trip and its mean time away), when it grew by a quarter
    /// since it was last passed on.
    pub(super) fn tick(&mut self, now: Instant) -> Option<u64> {
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed < self.interval() || self.rtt_us == 0 {
            return None;
        }
        let away_us = self.away.as_micros() / u128::from(self.stretches.max(1));
        let over_us = u128::from(self.rtt_us) + away_us;
        let bytes = self.bytes as u128 * over_us / elapsed.as_micros().max(1);
        (self.since, self.bytes, self.away, self.stretches) = (now, 0, Duration::ZERO, 0);
        self.need = self.need.max((NEED_PER_RTT * bytes).min(u128::from(u64::MAX)) as u64);
        if self.need * GROWTH_DEN < self.told.max(1) * GROWTH_NUM {
            return None;
        }
        self.told = self.need;
        tracing::debug!(
            rtt_us = self.rtt_us,
            rtt_from = ?self.source,
            away_us = away_us as u64,
            need_bytes = self.need,
            "stream buffer need"
        );
        Some(self.need)
    }
}

/// The first notice of a transfer's streams (one per transfer, not per stream).
#[derive(Debug, Default)]
pub(super) struct Notice(Mutex<Option<String>>);

impl Notice {
    fn say(&self, text: String) {
        let mut notice = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if notice.is_none() {
            tracing::warn!("{text}");
            *notice = Some(text);
        }
    }

    pub(super) fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// One end's buffer sizing for its streams: the kernel's limits for the side it sizes.
#[derive(Debug)]
pub(super) struct Sizer {
    side: Side,
    limits: Option<Limits>,
    pub(super) notice: Notice,
}

impl Sizer {
    pub(super) fn new(side: Side) -> Self {
        Self { side, limits: Limits::read(side), notice: Notice::default() }
    }

    /// Sizes `socket`'s buffer for `need` (kernel bytes); `set` is what was set on it before,
    /// updated. Reads the size back; a shortfall is noticed once.
    pub(super) fn apply(&self, socket: &TcpStream, need: u64, set: &mut Option<u64>) {
        let Some(limits) = self.limits else { return };
        // Root (or CAP_NET_ADMIN) may force past the cap: tried first, as the sizing of the
        // UDP sockets does; refused, the decision is taken again for the capped option.
        let mut decision = decide(need, limits, *set, true);
        let mut done = false;
        if let Some(value) = decision.set {
            let value = value.min(MAX_REQUEST_BYTES) as usize;
            done = match self.side {
                Side::Receive => sockopt::set_socket_recv_buffer_size_force(socket, value),
                Side::Send => sockopt::set_socket_send_buffer_size_force(socket, value),
            }
            .is_ok();
        }
        if !done {
            decision = decide(need, limits, *set, false);
            if let Some(value) = decision.set {
                let value = value.min(MAX_REQUEST_BYTES) as usize;
                done = match self.side {
                    Side::Receive => sockopt::set_socket_recv_buffer_size(socket, value),
                    Side::Send => sockopt::set_socket_send_buffer_size(socket, value),
                }
                .is_ok();
            }
        }
        if done {
            let read = match self.side {
                Side::Receive => sockopt::socket_recv_buffer_size(socket),
                Side::Send => sockopt::socket_send_buffer_size(socket),
            };
            if let Ok(now) = read {
                *set = Some(now as u64);
            }
        }
        let held = set.unwrap_or(limits.tuning[2]);
        tracing::debug!(side = ?self.side, need, held, "stream buffer");
        if decision.short || held < need {
            self.notice.say(self.advice(need, limits, held));
        }
    }

    fn advice(&self, need: u64, limits: Limits, held: u64) -> String {
        let (tuning, cap) = self.side.sysctls();
        let what = match self.side {
            Side::Receive => "receive",
            Side::Send => "send",
        };
        let [min, default, _] = limits.tuning;
        format!(
            "TCP {what} buffers held at {held} bytes where the path needs {need} per stream \
             (four times the bytes a stream moves per round trip, in the kernel's figure), so \
             each stream is limited by its window: set `sysctl -w {tuning}='{min} {default} \
             {need}'` (the kernel's tuning then reaches it), and `sysctl -w {cap}={}` for a \
             process that sets its buffers",
            need.div_ceil(2).max(limits.cap)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// A typical Linux: tuning up to 6 MiB, the plain option capped at 208 KiB.
    const LINUX: Limits = Limits { tuning: [4096, 131_072, 6 * MIB], cap: 212_992 };

    #[test]
    fn a_need_within_the_kernels_tuning_leaves_the_buffer_alone() {
        for need in [0, 1, MIB, 6 * MIB] {
            assert_eq!(decide(need, LINUX, None, false), Decision { set: None, short: false });
            assert_eq!(decide(need, LINUX, None, true), Decision { set: None, short: false });
        }
    }

    #[test]
    fn a_cap_below_the_tuning_is_never_set_only_noticed() {
        // Setting 2 x 208 KiB would switch the tuning off at a fraction of its 6 MiB.
        let d = decide(64 * MIB, LINUX, None, false);
        assert_eq!(d, Decision { set: None, short: true });
    }

    #[test]
    fn a_privileged_end_sets_beyond_the_tuning() {
        let d = decide(64 * MIB, LINUX, None, true);
        assert_eq!(d, Decision { set: Some(32 * MIB), short: false });
        // And grows it later, never shrinks it.
        assert_eq!(decide(48 * MIB, LINUX, Some(64 * MIB), true).set, None);
        assert_eq!(decide(96 * MIB, LINUX, Some(64 * MIB), true).set, Some(48 * MIB));
    }

    #[test]
    fn a_raised_cap_is_used_up_to_itself_and_the_rest_noticed() {
        let raised = Limits { tuning: [4096, 131_072, 6 * MIB], cap: 16 * MIB };
        assert_eq!(
            decide(20 * MIB, raised, None, false),
            Decision { set: Some(10 * MIB), short: false }
        );
        assert_eq!(
            decide(64 * MIB, raised, None, false),
            Decision { set: Some(16 * MIB), short: true }
        );
    }

    #[test]
    fn the_meter_finds_four_times_the_bytes_per_round_trip() {
        let t0 = Instant::now();
        let mut meter = Meter::new(0, t0);
        assert_eq!(meter.tick(t0 + Duration::from_secs(1)), None, "no round trip known yet");
        // 100 MB/s at 20 ms: 2 MB a round trip, 8 MB needed; the interval is 100 ms (> 4 RTT).
        meter.rtt(25_000);
        meter.rtt(20_000);
        meter.rtt(30_000);
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(meter.tick(t1), None, "nothing delivered");
        meter.delivered(10_000_000);
        assert_eq!(meter.tick(t1 + Duration::from_millis(50)), None, "the interval is not over");
        let need = meter.tick(t1 + Duration::from_millis(100));
        assert_eq!(need, Some(8_000_000));
        // The same rate again is not news; a rate a quarter higher is.
        meter.delivered(10_000_000);
        assert_eq!(meter.tick(t1 + Duration::from_millis(200)), None);
        meter.delivered(12_500_000);
        assert_eq!(meter.tick(t1 + Duration::from_millis(300)), Some(10_000_000));
    }

    #[test]
    fn the_hint_stands_until_an_echo_is_measured() {
        let t0 = Instant::now();
        let mut meter = Meter::new(10_000, t0);
        meter.delivered(10_000_000);
        assert_eq!(meter.tick(t0 + Duration::from_millis(100)), Some(4_000_000));
        meter.rtt(40_000);
        meter.delivered(10_000_000);
        // 100 MB/s over 160 ms (4 round trips of 40 ms): 4 MB a round trip.
        meter.delivered(6_000_000);
        assert_eq!(meter.tick(t0 + Duration::from_millis(260)), Some(16_000_000));
    }

    #[test]
    fn the_kernels_round_trip_outranks_the_echoes() {
        let t0 = Instant::now();
        let mut meter = Meter::new(50_000, t0);
        meter.rtt(30_000);
        meter.kernel_rtt(0);
        meter.kernel_rtt(10_000);
        meter.rtt(1_000); // an echo after the kernel's figure changes nothing
        meter.delivered(10_000_000);
        assert!(meter.due(t0 + Duration::from_millis(100)));
        // 100 MB/s at 10 ms: 1 MB a round trip, 4 MB needed.
        assert_eq!(meter.tick(t0 + Duration::from_millis(100)), Some(4_000_000));
    }

    #[test]
    fn time_away_from_the_socket_counts_like_the_round_trip() {
        let t0 = Instant::now();
        let mut meter = Meter::new(0, t0);
        meter.kernel_rtt(100);
        meter.delivered(100_000_000);
        meter.away(Duration::from_micros(400));
        meter.away(Duration::from_micros(1_500));
        meter.away(Duration::from_micros(800));
        // 1 GB/s: 100 kB a round trip of 100 us, 900 kB while away 900 us on average.
        assert_eq!(meter.tick(t0 + Duration::from_millis(100)), Some(4_000_000));
        // The next interval starts over: away nothing, the same rate: nothing new.
        meter.delivered(100_000_000);
        assert_eq!(meter.tick(t0 + Duration::from_millis(200)), None);
    }

    #[test]
    fn the_advice_names_both_sysctls() {
        let sizer = Sizer { side: Side::Send, limits: Some(LINUX), notice: Notice::default() };
        let text = sizer.advice(64 * MIB, LINUX, 4 * MIB);
        assert!(text.contains("net.ipv4.tcp_wmem='4096 131072 67108864'"), "{text}");
        assert!(text.contains("net.core.wmem_max=33554432"), "{text}");
    }
}
