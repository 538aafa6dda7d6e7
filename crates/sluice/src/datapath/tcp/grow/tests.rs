//! The grower against a model path: each stream carrying data moves at most `per_stream`, all
//! together at most `capacity`; loss and the least round trip as each case sets them.

use super::*;

const MBIT: f64 = 1e6 / 8.0;
const PATH_RTT: Duration = Duration::from_millis(100);
const TICK: Duration = Duration::from_millis(50);

/// A model path. `loss(n)` is the loss rate with `n` streams; `queue(n, t)` the extra round
/// trip at `t` seconds; `others(t)` the flows of others at `t`, each taking a share as one
/// stream does.
struct Path {
    per_stream: f64,
    capacity: f64,
    others: fn(f64) -> f64,
    loss: fn(usize) -> f64,
    queue: fn(usize, f64) -> Duration,
    /// Seconds each change of count takes to reach its rate (TCP's start-up), linearly.
    ramp_secs: f64,
}

/// Runs `grower` on `path` for `secs` of a transfer of `total` bytes; returns the counts it
/// chose, one per tick.
fn run(grower: &mut Grower, path: &Path, total: u64, secs: f64) -> Vec<usize> {
    let start = Instant::now();
    let (mut acked, mut retransmitted, mut segments) = (0f64, 0f64, 0f64);
    let mut changed_at = 0.0;
    let mut from_rate = 0.0;
    let mut counts = Vec::new();
    let mut t = 0.0;
    while t < secs {
        let n = grower.active();
        let others = (path.others)(t);
        let target =
            (n as f64 * path.per_stream).min(path.capacity * n as f64 / (n as f64 + others));
        let ramp = ((t - changed_at) / path.ramp_secs).min(1.0);
        let rate = from_rate + (target - from_rate) * ramp;
        let bytes = rate * TICK.as_secs_f64();
        acked += bytes;
        segments += bytes / 1448.0;
        retransmitted += bytes / 1448.0 * (path.loss)(n);
        t += TICK.as_secs_f64();
        let sample = Sample {
            at: start + Duration::from_secs_f64(t),
            acked: acked as u64,
            remaining: total.saturating_sub(acked as u64),
            retransmitted: retransmitted as u64,
            segments: segments as u64,
            srtt: PATH_RTT + (path.queue)(n, t),
            path_rtt: PATH_RTT,
        };
        if grower.sample(sample).is_some() {
            changed_at = t;
            from_rate = rate;
        }
        counts.push(grower.active());
    }
    counts
}

impl Path {
    /// Streams of `per_stream_mbit` each on a 1000 Mbit/s path of the transfer's alone, no
    /// loss, no queue, each change at full rate after 0.5 s.
    fn limited(per_stream_mbit: f64) -> Path {
        Path {
            per_stream: per_stream_mbit * MBIT,
            capacity: 1000.0 * MBIT,
            others: alone,
            loss: no_loss,
            queue: no_queue,
            ramp_secs: 0.5,
        }
    }
}

fn alone(_: f64) -> f64 {
    0.0
}

fn no_loss(_: usize) -> f64 {
    0.0
}

fn no_queue(_: usize, _: f64) -> Duration {
    Duration::ZERO
}

const BIG: u64 = 1 << 40;

#[test]
fn streams_limited_each_are_added_until_the_path_is_full_and_the_last_try_is_undone() {
    // Each stream 90 Mbit/s (a window cap), the path 1000: 4 -> 6 -> 9 -> 13 (+23 %, kept)
    // -> 16 (no gain: back to 13).
    let path = Path { ramp_secs: 1.0, ..Path::limited(90.0) };
    let mut grower = Grower::new(Growth::Adaptive { fair: true }, 16, 4);
    let counts = run(&mut grower, &path, BIG, 60.0);
    let changes = dedup(&counts);
    println!("counts {changes:?}");
    assert_eq!(&changes[..6], &[4, 6, 9, 13, 16, 13]);
    // Later, only the periodic retry of 16.
    assert!(changes[6..].iter().all(|&n| n == 13 || n == 16), "{changes:?}");
    assert_eq!(grower.peak(), 16);
}

#[test]
fn a_path_the_first_streams_fill_keeps_them() {
    let path = Path::limited(400.0);
    let mut grower = Grower::new(Growth::Adaptive { fair: false }, 16, 4);
    let counts = run(&mut grower, &path, BIG, 30.0);
    println!("counts {:?}", dedup(&counts));
    // One try (6: no gain), undone, and hold for REPROBE_EPOCHS (16 s) before the next try.
    assert_eq!(&dedup(&counts)[..3], &[4, 6, 4]);
    let six = counts.iter().filter(|&&n| n == 6).count();
    assert!(six * 4 < counts.len(), "{six} of {} ticks at 6", counts.len());
}

#[test]
fn streams_that_raise_the_loss_rate_are_undone_even_when_the_rate_grew() {
    fn congested(n: usize) -> f64 {
        if n > 4 { 0.03 } else { 0.001 }
    }
    let path = Path { loss: congested, ..Path::limited(100.0) };
    let mut grower = Grower::new(Growth::Adaptive { fair: false }, 16, 4);
    let counts = run(&mut grower, &path, BIG, 12.0);
    println!("counts {:?}", dedup(&counts));
    assert_eq!(dedup(&counts), vec![4, 6, 4]);
}

#[test]
fn random_loss_that_does_not_grow_with_streams_does_not_stop_the_growth() {
    fn random(_: usize) -> f64 {
        0.01
    }
    let path = Path { loss: random, ..Path::limited(100.0) };
    let mut grower = Grower::new(Growth::Adaptive { fair: true }, 16, 4);
    let counts = run(&mut grower, &path, BIG, 30.0);
    assert!(counts.iter().any(|&n| n >= 13), "{:?}", dedup(&counts));
}

#[test]
fn a_fair_grower_halves_its_streams_when_others_keep_a_queue_and_take_rate() {
    // Two flows come at the 5th second, fill the bottleneck's queue and take their shares.
    fn queue(_: usize, t: f64) -> Duration {
        if t >= 5.0 { Duration::from_millis(80) } else { Duration::ZERO }
    }
    fn two(t: f64) -> f64 {
        if t >= 5.0 { 2.0 } else { 0.0 }
    }
    let path = Path { others: two, queue, ..Path::limited(400.0) };
    let mut fair = Grower::new(Growth::Adaptive { fair: true }, 16, 4);
    let counts = run(&mut fair, &path, BIG, 40.0);
    println!("fair {:?}", dedup(&counts));
    assert!(*counts.last().unwrap() <= 2, "{:?}", dedup(&counts));
    // Not before the queue stood for SHARED_EPOCHS epochs.
    assert!(counts[..(5.0 / TICK.as_secs_f64()) as usize].iter().all(|&n| n >= 4));
    let mut greedy = Grower::new(Growth::Adaptive { fair: false }, 16, 4);
    let counts = run(&mut greedy, &path, BIG, 40.0);
    assert_eq!(*counts.last().unwrap(), 4, "{:?}", dedup(&counts));
}

#[test]
fn a_queue_the_transfer_makes_itself_is_not_a_shared_path() {
    // Four or more streams fill the queue themselves (as BBR flows do) and move the path's
    // rate: nobody took any of it, so the count stays.
    fn ours(n: usize, _: f64) -> Duration {
        if n >= 4 { Duration::from_millis(80) } else { Duration::ZERO }
    }
    let path = Path { queue: ours, ..Path::limited(400.0) };
    let mut grower = Grower::new(Growth::Adaptive { fair: true }, 16, 4);
    let counts = run(&mut grower, &path, BIG, 40.0);
    println!("counts {:?}", dedup(&counts));
    assert!(counts.iter().all(|&n| n >= 4), "{:?}", dedup(&counts));
}

#[test]
fn a_queue_our_own_ramp_makes_briefly_is_not_a_shared_path() {
    // A queue in one epoch of three (each stream's start-up overshoot) never stands.
    fn bursts(_: usize, t: f64) -> Duration {
        if (t as u64).is_multiple_of(3) { Duration::from_millis(80) } else { Duration::ZERO }
    }
    let path = Path { queue: bursts, ..Path::limited(400.0) };
    let mut grower = Grower::new(Growth::Adaptive { fair: true }, 16, 4);
    let counts = run(&mut grower, &path, BIG, 30.0);
    assert!(counts.iter().all(|&n| n >= 4), "{:?}", dedup(&counts));
}

#[test]
fn no_streams_are_added_near_the_end_of_a_transfer() {
    let path = Path::limited(100.0);
    // 400 Mbit/s move 250 MB in 5 s: at the plateau (3 s) fewer than WORTH_EPOCHS are left.
    let mut grower = Grower::new(Growth::Adaptive { fair: true }, 16, 4);
    let counts = run(&mut grower, &path, 250_000_000, 5.0);
    assert!(counts.iter().all(|&n| n == 4), "{:?}", dedup(&counts));
    // The same path, a long transfer: more streams.
    let mut grower = Grower::new(Growth::Adaptive { fair: true }, 16, 4);
    let counts = run(&mut grower, &path, BIG, 5.0);
    assert!(counts.iter().any(|&n| n > 4), "{:?}", dedup(&counts));
}

#[test]
fn no_streams_are_added_while_loss_is_high() {
    fn start_up(_: usize) -> f64 {
        0.05
    }
    let path = Path { loss: start_up, ..Path::limited(100.0) };
    let mut grower = Grower::new(Growth::Adaptive { fair: true }, 16, 4);
    let counts = run(&mut grower, &path, BIG, 20.0);
    assert!(counts.iter().all(|&n| n == 4), "{:?}", dedup(&counts));
}

#[test]
fn fixed_and_single_never_change_and_start_counts_hold_the_ceiling() {
    let path = Path::limited(100.0);
    for (growth, start, want) in
        [(Growth::Fixed, 4, 16), (Growth::Single, 4, 1), (Growth::Adaptive { fair: true }, 0, 16)]
    {
        let mut grower = Grower::new(growth, 16, start);
        let counts = run(&mut grower, &path, BIG, 20.0);
        assert!(counts.iter().all(|&n| n == want), "{growth:?}: {:?}", dedup(&counts));
    }
    assert_eq!(Grower::new(Growth::Adaptive { fair: true }, 2, 4).active(), 2);
}

fn dedup(counts: &[usize]) -> Vec<usize> {
    let mut out = counts.to_vec();
    out.dedup();
    out
}
