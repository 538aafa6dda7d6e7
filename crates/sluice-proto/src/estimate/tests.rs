use super::*;

const SEC_US: u64 = 1_000_000;

#[test]
fn rtt_first_sample_replaces_the_initial_guess() {
    let mut rtt = RttEstimator::new(100_000);
    assert_eq!((rtt.rtt_us(), rtt.rtt_var_us()), (100_000, 50_000));
    assert_eq!(rtt.min_rtt_us(), None);
    rtt.on_sample(40_000, 0);
    assert_eq!((rtt.rtt_us(), rtt.rtt_var_us()), (40_000, 20_000));
    assert_eq!(rtt.min_rtt_us(), Some(40_000));
}

#[test]
fn rtt_smoothing_follows_udt() {
    let mut rtt = RttEstimator::new(100_000);
    rtt.on_sample(40_000, 0);
    rtt.on_sample(48_000, 10);
    // var = 3/4 * 20000 + 1/4 * |48000 - 40000|; rtt = 7/8 * 40000 + 1/8 * 48000.
    assert_eq!((rtt.rtt_us(), rtt.rtt_var_us()), (41_000, 17_000));
    rtt.on_sample(33_000, 20);
    // var = 3/4 * 17000 + 1/4 * 8000; rtt = 7/8 * 41000 + 1/8 * 33000.
    assert_eq!((rtt.rtt_us(), rtt.rtt_var_us()), (40_000, 14_750));
}

#[test]
fn rtt_converges_exactly_to_a_steady_sample() {
    for (start_us, steady_us) in [(100_000, 30_000), (1_000, 30_001), (30_008, 30_000)] {
        let mut rtt = RttEstimator::new(start_us);
        rtt.on_sample(start_us, 0);
        for i in 0..400 {
            rtt.on_sample(steady_us, i);
        }
        assert_eq!((rtt.rtt_us(), rtt.rtt_var_us()), (steady_us, 0), "from {start_us}");
    }
}

#[test]
fn rtt_set_adopts_peer_values_without_touching_min() {
    let mut rtt = RttEstimator::new(100_000);
    rtt.set(5_000, 100);
    assert_eq!((rtt.rtt_us(), rtt.rtt_var_us()), (5_000, 100));
    assert_eq!(rtt.min_rtt_us(), None);
    // A later sample smooths from the peer's values instead of replacing them.
    rtt.on_sample(13_000, 0);
    assert_eq!((rtt.rtt_us(), rtt.rtt_var_us()), (6_000, 2_075));
    assert_eq!(rtt.min_rtt_us(), Some(13_000));
}

#[test]
fn rtt_clamps_hostile_values() {
    let mut rtt = RttEstimator::new(u64::MAX);
    assert_eq!(rtt.rtt_us(), MAX_RTT_US);
    rtt.set(u64::MAX, u64::MAX);
    assert_eq!((rtt.rtt_us(), rtt.rtt_var_us()), (MAX_RTT_US, MAX_RTT_US));
    for i in 0..100 {
        rtt.on_sample(if i % 2 == 0 { u64::MAX } else { 0 }, u64::MAX - 100 + i);
    }
    assert!(rtt.rtt_us() <= MAX_RTT_US && rtt.rtt_var_us() <= MAX_RTT_US);
    assert_eq!(rtt.min_rtt_us(), Some(0));
}

#[test]
fn min_rtt_is_the_smallest_recent_sample() {
    let mut rtt = RttEstimator::new(100_000);
    for (i, sample) in [50_000, 30_000, 40_000, 35_000].into_iter().enumerate() {
        rtt.on_sample(sample, i as u64 * SEC_US / 2);
    }
    assert_eq!(rtt.min_rtt_us(), Some(30_000));
}

#[test]
fn min_rtt_window_expires_old_samples() {
    let mut rtt = RttEstimator::new(100_000);
    let low_at_us = SEC_US / 2;
    rtt.on_sample(20_000, low_at_us);
    // One higher sample every 100 ms; the low one counts for the whole window.
    let mut now_us = low_at_us;
    while now_us < low_at_us + MIN_RTT_WINDOW_US {
        now_us += SEC_US / 10;
        rtt.on_sample(50_000, now_us);
        assert_eq!(rtt.min_rtt_us(), Some(20_000), "{now_us} us");
    }
    // ... and never longer than one bucket past it.
    while now_us < low_at_us + MIN_RTT_WINDOW_US + MIN_RTT_BUCKET_US {
        now_us += SEC_US / 10;
        rtt.on_sample(50_000, now_us);
    }
    assert_eq!(rtt.min_rtt_us(), Some(50_000));
    // A rise in the path's RTT shows once the lower samples age out.
    rtt.on_sample(80_000, now_us + 20 * SEC_US);
    assert_eq!(rtt.min_rtt_us(), Some(80_000));
    // The smoothed RTT is unaffected by the window.
    assert!(rtt.rtt_us() > 50_000);
}

#[test]
fn min_rtt_survives_time_going_backwards() {
    let mut rtt = RttEstimator::new(100_000);
    rtt.on_sample(30_000, 50 * SEC_US);
    rtt.on_sample(20_000, SEC_US);
    assert_eq!(rtt.min_rtt_us(), Some(20_000));
    rtt.on_sample(40_000, 62 * SEC_US);
    assert_eq!(rtt.min_rtt_us(), Some(40_000));
}

/// Feeds arrivals `intervals_us` apart, the first one `intervals_us[0]` after `start_us`;
/// returns the last arrival. Only intervals after the estimator's first arrival count.
fn arrive(speed: &mut ArrivalSpeed, start_us: u64, intervals_us: &[u64]) -> u64 {
    let mut now_us = start_us;
    for &interval_us in intervals_us {
        now_us += interval_us;
        speed.on_arrival(now_us);
    }
    now_us
}

#[test]
fn arrival_speed_of_steady_arrivals() {
    let mut speed = ArrivalSpeed::new();
    assert_eq!(speed.pkts_per_sec(), 0);
    // 33 arrivals are 32 intervals: not more than half the window yet.
    let now_us = arrive(&mut speed, 0, &[100; 33]);
    assert_eq!(speed.pkts_per_sec(), 0);
    let now_us = arrive(&mut speed, now_us, &[100]);
    assert_eq!(speed.pkts_per_sec(), 10_000);
    arrive(&mut speed, now_us, &[100; 200]);
    assert_eq!(speed.pkts_per_sec(), 10_000);
}

#[test]
fn arrival_speed_averages_jitter_within_the_filter() {
    let mut speed = ArrivalSpeed::new();
    speed.on_arrival(0);
    let jittered: Vec<u64> = (0..64).map(|i| if i % 2 == 0 { 80 } else { 120 }).collect();
    arrive(&mut speed, 0, &jittered);
    assert_eq!(speed.pkts_per_sec(), 10_000);
}

#[test]
fn arrival_speed_ignores_idle_gaps() {
    let mut speed = ArrivalSpeed::new();
    let now_us = arrive(&mut speed, 0, &[100; 100]);
    assert_eq!(speed.pkts_per_sec(), 10_000);
    // The application paused for 5 s, then resumed at the same rate.
    let now_us = arrive(&mut speed, now_us, &[5 * SEC_US]);
    assert_eq!(speed.pkts_per_sec(), 10_000);
    let mut now_us = arrive(&mut speed, now_us, &[100; 10]);
    assert_eq!(speed.pkts_per_sec(), 10_000);
    // Even frequent gaps, up to nearly half the window, do not move it.
    for _ in 0..30 {
        now_us = arrive(&mut speed, now_us, &[100, 2 * SEC_US]);
    }
    assert_eq!(speed.pkts_per_sec(), 10_000);
}

#[test]
fn arrival_speed_filters_outliers_both_ways() {
    let mut speed = ArrivalSpeed::new();
    speed.on_arrival(0);
    let mut intervals = vec![100; 56];
    // Bursts closer than median / 8 and stalls longer than 8 x median.
    intervals.extend([1, 5, 11, 2, 801, 5_000, 900, 100_000]);
    arrive(&mut speed, 0, &intervals);
    assert_eq!(speed.pkts_per_sec(), 10_000);
}

#[test]
fn arrival_speed_is_zero_without_a_majority() {
    let mut speed = ArrivalSpeed::new();
    speed.on_arrival(0);
    // Two equal clusters far apart: the (upper) median sits in the slow one, and only half the
    // window survives the filter, which is not more than half.
    let intervals: Vec<u64> = (0..64).map(|i| if i % 2 == 0 { 100 } else { 10_000 }).collect();
    arrive(&mut speed, 0, &intervals);
    assert_eq!(speed.pkts_per_sec(), 0);
}

#[test]
fn arrival_speed_with_coarse_timestamps() {
    // 2,000,000 packets per second seen through a 1 us clock: intervals of 0 and 1 us.
    let mut speed = ArrivalSpeed::new();
    for k in 0..200u64 {
        speed.on_arrival(1_000 + k / 2);
    }
    assert_eq!(speed.pkts_per_sec(), 2_000_000);
    // All arrivals in one instant (a receive batch stamped once): saturates, no division by 0.
    let mut speed = ArrivalSpeed::new();
    for _ in 0..100 {
        speed.on_arrival(7);
    }
    assert_eq!(speed.pkts_per_sec(), 64_000_000);
}

#[test]
fn arrival_speed_tolerates_hostile_times() {
    let mut speed = ArrivalSpeed::new();
    for now_us in [u64::MAX, 0, u64::MAX, 5, 0].into_iter().cycle().take(200) {
        speed.on_arrival(now_us);
    }
    let _ = speed.pkts_per_sec();
}

/// Feeds one packet pair per entry of `gap_us`, with that gap, one pair every 1 ms from
/// `start_us`.
fn pairs(capacity: &mut CapacityEstimator, start_us: u64, gap_us: &[u64]) {
    for (i, &gap_us) in gap_us.iter().enumerate() {
        let first_us = start_us + i as u64 * 1_000;
        capacity.on_other_arrival();
        capacity.on_pair_first(first_us);
        capacity.on_pair_second(first_us + gap_us);
    }
}

#[test]
fn capacity_from_packet_pairs() {
    let mut capacity = CapacityEstimator::new();
    assert_eq!(capacity.pkts_per_sec(0, 0), 0);
    pairs(&mut capacity, 0, &[12]);
    assert_eq!(capacity.pkts_per_sec(0, 0), 1_000_000 / 12);
    pairs(&mut capacity, 10_000, &[12; 20]);
    assert_eq!(capacity.pkts_per_sec(0, 0), 83_333);
}

#[test]
fn capacity_takes_the_median_of_the_last_16_pairs() {
    let mut capacity = CapacityEstimator::new();
    // Cross traffic spreads some pairs; the median ignores them.
    let mut gaps = vec![10; 10];
    gaps.extend([100; 6]);
    pairs(&mut capacity, 0, &gaps);
    assert_eq!(capacity.pkts_per_sec(0, 0), 100_000);
    // Only the last 16 count: the link got slower.
    pairs(&mut capacity, 100_000, &[20; 16]);
    assert_eq!(capacity.pkts_per_sec(0, 0), 50_000);
}

#[test]
fn capacity_ignores_broken_pairs() {
    let mut capacity = CapacityEstimator::new();
    // Another packet between first and second: no pair.
    capacity.on_pair_first(0);
    capacity.on_other_arrival();
    capacity.on_pair_second(10);
    // A second without a first (the first was lost): no pair.
    capacity.on_pair_second(20);
    // One first, two seconds: only one pair.
    capacity.on_pair_first(100);
    capacity.on_pair_second(110);
    capacity.on_pair_second(5_000);
    assert_eq!(capacity.pkts_per_sec(0, 0), 100_000);
    // A first replaced by a later first (the second was lost).
    capacity.on_pair_first(6_000);
    capacity.on_pair_first(7_000);
    capacity.on_pair_second(7_010);
    assert_eq!(capacity.pkts_per_sec(0, 0), 100_000);
}

#[test]
fn capacity_zero_interval_counts_as_one_microsecond() {
    let mut capacity = CapacityEstimator::new();
    pairs(&mut capacity, 0, &[0; 3]);
    assert_eq!(capacity.pkts_per_sec(0, 0), 1_000_000);
    // Time going backwards between the two packets is a zero interval, not a panic.
    capacity.on_pair_first(u64::MAX);
    capacity.on_pair_second(0);
    assert_eq!(capacity.pkts_per_sec(0, 0), 1_000_000);
}

/// Feeds `DeliveryRate` packets every `interval_us` in bunches of `bunch` that arrive at the
/// same microsecond (as an emulator or NIC waking every `bunch × interval_us` delivers them),
/// closing an ACK interval every 10 ms; returns the last estimate.
fn deliver_bunched(rate: &mut DeliveryRate, pkts: u64, interval_us: u64, bunch: u64) -> u32 {
    let mut last = 0;
    let mut next_ack_us = 10_000;
    for i in 0..pkts {
        let at_us = (i / bunch) * bunch * interval_us;
        if at_us >= next_ack_us {
            last = rate.pkts_per_sec();
            next_ack_us += 10_000;
        }
        rate.on_arrival(at_us);
    }
    last
}

#[test]
fn delivery_rate_of_steady_arrivals() {
    let mut rate = DeliveryRate::new();
    // 100,000 packets per second for 200 ms.
    let pps = deliver_bunched(&mut rate, 20_000, 10, 1);
    assert!((99_000..=101_000).contains(&pps), "{pps}");
}

#[test]
fn delivery_rate_sees_through_bunched_delivery_where_intervals_do_not() {
    // The same 100,000 packets per second, delivered 40 at a time every 400 us.
    let mut rate = DeliveryRate::new();
    let pps = deliver_bunched(&mut rate, 20_000, 10, 40);
    assert!((98_000..=102_000).contains(&pps), "delivery rate {pps}");
    let mut speed = ArrivalSpeed::new();
    for i in 0..20_000u64 {
        speed.on_arrival((i / 40) * 400);
    }
    let read = speed.pkts_per_sec();
    assert!(!(90_000..=110_000).contains(&read), "inter-arrival median read {read}");
}

#[test]
fn delivery_rate_needs_a_few_milliseconds_and_counts_idle_time() {
    let mut rate = DeliveryRate::new();
    assert_eq!(rate.pkts_per_sec(), 0, "nothing arrived");
    for t in 0..100 {
        rate.on_arrival(t * 10);
    }
    assert_eq!(rate.pkts_per_sec(), 0, "1 ms of arrivals is too short to tell");
    // 100 packets per ms for 50 ms, then 50 ms of nothing, then 20 ms of the same again.
    let mut rate = DeliveryRate::new();
    let mut t = 0;
    for phase in 0..3u64 {
        for _ in 0..(if phase == 2 { 2 } else { 5 }) {
            for _ in 0..(if phase == 1 { 0 } else { 1_000 }) {
                rate.on_arrival(t);
                t += 10;
            }
            if phase == 1 {
                t += 10_000;
            }
            rate.pkts_per_sec();
        }
    }
    let pps = rate.pkts_per_sec();
    // The window (at least 40 ms) now reaches back over the gap into the first burst.
    assert!(pps < 95_000, "idle time counts: {pps}");
    assert!(pps > 20_000, "{pps}");
}

#[test]
fn delivery_rate_ignores_time_going_backwards() {
    let mut rate = DeliveryRate::new();
    for i in 0..10_000u64 {
        // Every tenth stamp is 50 us early (a reordered timestamp).
        let t = i * 10;
        rate.on_arrival(if i % 10 == 9 { t.saturating_sub(50) } else { t });
        if i % 1_000 == 999 {
            rate.pkts_per_sec();
        }
    }
    let pps = rate.pkts_per_sec();
    assert!((99_000..=101_000).contains(&pps), "{pps}");
}

#[test]
fn capacity_of_smaller_packets_is_counted_in_full_size_packets() {
    // A 1 Gbit/s link spreads 1232-byte datagrams (1260 bytes of IP) by 10 us and 1472-byte
    // ones (1500) by 12 us: both read 83,333 full-size packets per second, within rounding.
    let mut small = CapacityEstimator::new();
    let mut full = CapacityEstimator::new();
    for i in 0..5u64 {
        small.on_pair_first(i * 1_000);
        small.on_pair_second_sized(i * 1_000 + 10, 1232, 1472);
        full.on_pair_first(i * 1_000);
        full.on_pair_second_sized(i * 1_000 + 12, 1472, 1472);
    }
    assert_eq!(full.pkts_per_sec(0, 0), 83_333);
    // 10 us scaled by 1500 / 1260 is 11.9, which whole microseconds keep as 11.
    assert_eq!(small.pkts_per_sec(0, 0), 90_909);
    let mut plain = CapacityEstimator::new();
    plain.on_pair_first(0);
    plain.on_pair_second(12);
    assert_eq!(plain.pkts_per_sec(0, 0), 83_333, "equal sizes are not scaled");
}

/// Feeds a train of `pkts` packets that cross a bottleneck `gap_ns` apart from `start_us`, as
/// a receive path releases them: at wakes every `release_us` (0: each at its own time).
fn train(capacity: &mut CapacityEstimator, start_us: u64, pkts: u64, gap_ns: u64, release_us: u64) {
    capacity.on_other_arrival();
    for i in 0..pkts {
        let at_us = start_us + i * gap_ns / 1000;
        let released_us = match release_us {
            0 => at_us,
            g => at_us.div_ceil(g) * g,
        };
        match i {
            0 => capacity.on_pair_first(released_us),
            i if i + 1 == pkts => capacity.on_pair_second(released_us),
            _ => capacity.on_train_middle(released_us),
        }
    }
}

#[test]
fn a_train_reads_the_bottleneck_whether_or_not_the_receive_path_bunches_it() {
    // 1 Gbit/s and 1480-byte packets on the wire: 11,840 ns each, 84,459 packets per second.
    let link_pps = 1e9 / 11_840.0;
    for release_us in [0, 20, 50, 200, 1_000] {
        for start_us in [10_000, 10_137, 10_999] {
            let mut capacity = CapacityEstimator::new();
            // Bunched pairs read the clock resolution (both in one release) or a fraction of
            // the link (across two).
            pairs(&mut capacity, 0, &[0; PAIR_WINDOW]);
            train(&mut capacity, start_us, 256, 11_840, release_us);
            let read = f64::from(capacity.pkts_per_sec(start_us + 5_000, 100_000));
            println!("release every {release_us} us, start {start_us}: {read} of {link_pps:.0}");
            assert!(
                (0.95 * link_pps..=1.05 * link_pps).contains(&read),
                "release every {release_us} us: a 256-packet train read {read} pps"
            );
        }
    }
}

#[test]
fn a_stall_in_the_middle_of_a_train_does_not_read_as_the_link() {
    // 1 Gbit/s (11.84 us a packet); the sender stops for 1.7 ms after the 100th packet.
    let link_pps = 1e9 / 11_840.0;
    for release_us in [0, 50, 200] {
        let mut capacity = CapacityEstimator::new();
        capacity.on_other_arrival();
        for i in 0..256u64 {
            let at_us = 10_000 + i * 11_840 / 1000 + if i >= 100 { 1_700 } else { 0 };
            let released_us = match release_us {
                0 => at_us,
                g => at_us.div_ceil(g) * g,
            };
            match i {
                0 => capacity.on_pair_first(released_us),
                255 => capacity.on_pair_second(released_us),
                _ => capacity.on_train_middle(released_us),
            }
        }
        let read = f64::from(capacity.pkts_per_sec(20_000, 100_000));
        println!("release every {release_us} us, a 1.7 ms stall: {read} of {link_pps:.0}");
        assert!(
            (0.95 * link_pps..=1.05 * link_pps).contains(&read),
            "release every {release_us} us: read {read} pps"
        );
    }
}

/// Arrival stamps that step back mid-train (seen in the lossy reordering relay test over real
/// sockets, seed 16: the stall rule's subtraction overflowed, and a release build would have
/// wrapped) leave a gap wider than the span: the train reads as unresolved.
#[test]
fn a_train_whose_stamps_step_back_reads_as_unresolved_not_as_an_overflow() {
    let mut capacity = CapacityEstimator::new();
    capacity.on_other_arrival();
    capacity.on_pair_first(1_000);
    for at_us in [1_010, 1_020, 1_030, 1_040, 500, 5_000, 5_010] {
        capacity.on_train_middle(at_us);
    }
    capacity.on_pair_second(5_020);
    assert_eq!(capacity.pkts_per_sec(5_020, 100_000), UNRESOLVED_PPS);
}

#[test]
fn a_train_in_one_bunch_resolves_nothing_and_a_broken_one_counts_not() {
    let mut capacity = CapacityEstimator::new();
    pairs(&mut capacity, 0, &[10; PAIR_WINDOW]);
    // 32 packets 11.84 us apart, all released at one wake 1 ms long: the clock's resolution.
    train(&mut capacity, 100_001, 32, 11_840, 1_000);
    assert_eq!(capacity.pkts_per_sec(101_000, 100_000), 1_000_000);
    // Another packet in the middle of a train breaks it: the last reading stands.
    capacity.on_pair_first(200_000);
    capacity.on_train_middle(200_010);
    capacity.on_other_arrival();
    capacity.on_train_middle(200_020);
    capacity.on_pair_second(200_030);
    assert_eq!(capacity.pkts_per_sec(200_030, 100_000), 1_000_000);
}

#[test]
fn a_train_stands_for_the_pairs_only_while_it_is_fresh() {
    let mut capacity = CapacityEstimator::new();
    pairs(&mut capacity, 0, &[10; PAIR_WINDOW]);
    assert_eq!(capacity.pkts_per_sec(0, 0), 100_000);
    train(&mut capacity, 100_000, 64, 20_000, 0);
    let end_us = 100_000 + 63 * 20;
    assert_eq!(capacity.pkts_per_sec(end_us, 50_000), 50_000, "the train's 20 us");
    assert_eq!(capacity.pkts_per_sec(end_us + 49_999, 50_000), 50_000);
    assert_eq!(capacity.pkts_per_sec(end_us + 50_000, 50_000), 100_000, "the pairs' again");
}
