//! Whole simulated transfers through `sluice-proto`: delivery under every impairment, and the
//! performance regimes of each congestion controller. Every test prints its scenario, seed and
//! result; rerun one with the printed settings through `examples/scenario.rs`.

#![allow(clippy::print_stdout)] // tests print their seeds and results

use sluice_netsim::scenario::{Scenario, ScenarioResult};
use sluice_proto::cc::CcKind;

/// Runs `s`, prints it, and checks what every run must satisfy: every byte exactly once and
/// intact, and no packet number reused under a key.
fn run(name: &str, s: Scenario) -> ScenarioResult {
    println!(
        "scenario {name}: seed={} cc={} rate={}Mbit rtt={}ms loss={}% burst={:?} size={}MiB flows={} \
         channels={:?} coupled={}",
        s.seed,
        s.cc.name(),
        s.rate_mbit,
        s.rtt_ms,
        s.loss_pct,
        s.loss_burst_pkts,
        s.size_mib,
        s.flows,
        (0..s.flows).map(|t| s.channels_of(t)).collect::<Vec<_>>(),
        s.coupled,
    );
    let r = s.run();
    let mut shown = r.clone();
    shown.trace.clear();
    println!("result {name}: {}", serde_json::to_string(&shown).unwrap());
    for (i, f) in r.flows.iter().enumerate() {
        assert_eq!(f.pn_violations, 0, "{name}: flow {i} reused or reordered packet numbers");
        assert!(f.pn_checked > 0, "{name}: flow {i} sent nothing");
    }
    r
}

fn run_delivered(name: &str, s: Scenario) -> ScenarioResult {
    let r = run(name, s);
    assert!(r.delivered_ok, "{name}: payload not delivered intact: {:?}", r.flows);
    r
}

fn grid_cell(rtt_ms: f64, loss_pct: f64, seed: u64) -> Scenario {
    Scenario { rtt_ms, loss_pct, size_mib: 256.0, seed, ..Scenario::default() }
}

macro_rules! grid {
    ($($name:ident: $rtt:expr, $loss:expr;)*) => {$(
        #[test]
        fn $name() {
            run_delivered(stringify!($name), grid_cell($rtt, $loss, 0x6121 + $rtt as u64));
        }
    )*};
}

grid! {
    grid_rtt10_loss0: 10.0, 0.0;
    grid_rtt10_loss0_1: 10.0, 0.1;
    grid_rtt10_loss1: 10.0, 1.0;
    grid_rtt10_loss5: 10.0, 5.0;
    grid_rtt100_loss0: 100.0, 0.0;
    grid_rtt100_loss0_1: 100.0, 0.1;
    grid_rtt100_loss1: 100.0, 1.0;
    grid_rtt100_loss5: 100.0, 5.0;
    grid_rtt300_loss0: 300.0, 0.0;
    grid_rtt300_loss0_1: 300.0, 0.1;
    grid_rtt300_loss1: 300.0, 1.0;
    grid_rtt300_loss5: 300.0, 5.0;
}

#[test]
fn bursty_loss_delivers() {
    let s =
        Scenario { loss_pct: 1.0, loss_burst_pkts: Some(10.0), seed: 11, ..Scenario::default() };
    run_delivered("bursty_loss", s);
}

#[test]
fn reordering_delivers() {
    let s = Scenario { reorder_pct: 2.0, loss_pct: 0.1, seed: 12, ..Scenario::default() };
    run_delivered("reordering", s);
}

#[test]
fn duplication_delivers_each_payload_once() {
    let s = Scenario { duplicate_pct: 3.0, loss_pct: 0.1, seed: 13, ..Scenario::default() };
    let r = run_delivered("duplication", s);
    assert!(r.flows[0].delivered_ok);
}

#[test]
fn corruption_is_rejected_by_the_aead_and_never_delivered() {
    let s = Scenario { corrupt_pct: 1.0, seed: 14, ..Scenario::default() };
    let r = run_delivered("corruption", s);
    // delivered_ok includes "no delivered payload differs from the source".
    assert!(r.flows[0].rejected_pkts > 1000, "corrupted packets must be rejected: {:?}", r.flows);
}

#[test]
fn two_second_blackout_is_survived() {
    let s =
        Scenario { blackout_s: Some((1.0, 2.0)), loss_pct: 0.1, seed: 15, ..Scenario::default() };
    let r = run_delivered("blackout", s);
    assert!(r.flows[0].timeouts > 0, "the blackout must have been noticed");
    assert!(r.sim_seconds > 3.0);
}

#[test]
fn adaptive_utilization_100ms_1pct_2gib() {
    let s = Scenario { loss_pct: 1.0, size_mib: 2048.0, seed: 7, ..Scenario::default() };
    let r = run_delivered("adaptive_100ms_1pct", s);
    assert!(r.utilization >= 0.90, "utilization {} < 0.90", r.utilization);
}

#[test]
fn adaptive_utilization_300ms_3pct_2gib() {
    let s =
        Scenario { rtt_ms: 300.0, loss_pct: 3.0, size_mib: 2048.0, seed: 8, ..Scenario::default() };
    let r = run_delivered("adaptive_300ms_3pct", s);
    assert!(r.utilization >= 0.85, "utilization {} < 0.85", r.utilization);
}

/// A far end that stalls 20 ms every second, then takes the backlog at once (as a late host or
/// emulator does): the stall is not a queue, and the rate stays near the link. With the mean
/// queuing delay as the signal, every stall cut the rate and this was 0.82.
#[test]
fn adaptive_utilization_100ms_1pct_with_receive_stalls() {
    let s = Scenario {
        loss_pct: 1.0,
        size_mib: 1024.0,
        stalls_ms: Some((1000.0, 20.0)),
        seed: 7,
        ..Scenario::default()
    };
    let r = run_delivered("adaptive_100ms_1pct_stalls", s);
    assert!(r.utilization >= 0.90, "utilization {} < 0.90", r.utilization);
}

/// Loss only from queue overflow: the queuing delay stays bounded and two flows share fairly.
#[test]
fn adaptive_two_flows_fair_with_bounded_queue() {
    let s = Scenario {
        flows: 2,
        flow_stagger_ms: 2_000,
        size_mib: 100_000.0,
        deadline_s: 30.0,
        fairness_window_s: Some((20.0, 30.0)),
        seed: 9,
        ..Scenario::default()
    };
    let r = run("adaptive_two_flows", s);
    let jain = r.jain_index.unwrap();
    assert!(jain >= 0.95, "Jain's index {jain} < 0.95");
    let [_, p99_ms, _] = r.queue_delay_ms;
    assert!(p99_ms <= 30.0, "99th percentile queuing delay {p99_ms} ms above 30 ms");
}

/// Two transfers started together through a receive path that hands packets over in bunches
/// (issue 25): both startups end at the whole link and are cut together, and under the queue
/// target nothing cuts them again, so they must climb back alike. With each flow's increase
/// sized by its own least packet-pair report (a pair across two wakes reads the release period),
/// one climbed ten times faster and they shared the link 262/646 (Jain 0.844; with ACKs
/// compressed too, started 30 ms apart, 0.922).
#[test]
fn adaptive_two_flows_started_together_meet_under_timing_noise() {
    for (stagger_ms, ack_compression_us) in [(10, 0), (30, 2_000)] {
        let s = Scenario {
            flows: 2,
            channels: 2,
            flow_stagger_ms: stagger_ms,
            release_granularity_us: 50,
            ack_compression_us,
            size_mib: 100_000.0,
            deadline_s: 20.0,
            fairness_window_s: Some((0.5, 20.0)),
            seed: 9,
            ..Scenario::default()
        };
        let r = run(&format!("adaptive_two_flows_together_{stagger_ms}ms_batch50us"), s);
        let jain = r.jain_index.unwrap();
        assert!(jain >= 0.95, "Jain's index {jain} < 0.95 (stagger {stagger_ms} ms)");
        assert!(r.utilization >= 0.90, "utilization {} < 0.90", r.utilization);
    }
}

/// Path memory (issue 25, item 3): 128 MiB at `rtt_ms`, 1 % loss, from a remembered delivery
/// rate of `start_mbit` (0: first contact), with the receive path releasing packets every
/// `granularity_us`.
fn remembered(rtt_ms: f64, start_mbit: f64, granularity_us: u64) -> ScenarioResult {
    let s = Scenario {
        rtt_ms,
        loss_pct: 1.0,
        size_mib: 128.0,
        start_mbit,
        release_granularity_us: granularity_us,
        seed: 7,
        ..Scenario::default()
    };
    run_delivered(
        &format!("memory_{rtt_ms}ms_start_{start_mbit}mbit_release_{granularity_us}us"),
        s,
    )
}

/// Started from what the path delivered last time, 128 MiB takes at least a round trip less
/// than on first contact, precise receive clock or not, without a queue beyond the target.
#[test]
fn path_memory_saves_the_ramp() {
    for (rtt_ms, granularity_us) in [(100.0, 0), (300.0, 0), (300.0, 200)] {
        let first = remembered(rtt_ms, 0.0, granularity_us);
        let again = remembered(rtt_ms, 960.0, granularity_us);
        let saved_s = first.sim_seconds - again.sim_seconds;
        assert!(saved_s >= rtt_ms / 1e3, "{rtt_ms} ms: saved {saved_s:.3} s");
        let [_, p99_ms, _] = again.queue_delay_ms;
        assert!(p99_ms <= 10.0, "{rtt_ms} ms: queue p99 {p99_ms} ms");
    }
}

/// A remembered rate that is wrong either way (the path has less now, or more) costs at most
/// a little against first contact.
#[test]
fn path_memory_that_is_wrong_is_corrected_within_round_trips() {
    let first = remembered(100.0, 0.0, 0);
    for start_mbit in [1800.0, 300.0] {
        let wrong = remembered(100.0, start_mbit, 0);
        assert!(
            wrong.sim_seconds <= first.sim_seconds + 0.1,
            "from {start_mbit} Mbit/s: {:.3} s against {:.3} s on first contact",
            wrong.sim_seconds,
            first.sim_seconds
        );
    }
}

/// On a slow link a start from path memory is not undone by startup's packet trains: 8 MiB
/// (a relay deposit's size) over 25 Mbit/s and 100 Mbit/s, 50 ms, two coupled channels, from
/// 0.92 and 0.9 of the link, keep at least 0.9 of the link and at least what first contact
/// keeps. (The trains on top of the remembered rate queued 47 ms at 25 Mbit/s, and the cuts
/// held the copy at 0.67 of the link, against 0.93 on first contact.)
#[test]
fn path_memory_on_a_slow_link_holds_its_start() {
    for (rate_mbit, start_mbit) in [(25.0, 23.0), (100.0, 90.0)] {
        let at = |start_mbit: f64| {
            let s = Scenario {
                rate_mbit,
                rtt_ms: 50.0,
                size_mib: 8.0,
                channels: 2,
                start_mbit,
                seed: 11,
                ..Scenario::default()
            };
            run_delivered(&format!("memory_{rate_mbit}mbit_50ms_start_{start_mbit}mbit"), s)
        };
        let (first, again) = (at(0.0), at(start_mbit));
        assert!(again.utilization >= 0.9, "{rate_mbit} Mbit/s: {:.3}", again.utilization);
        assert!(
            again.utilization >= first.utilization,
            "{rate_mbit} Mbit/s: {:.3} from memory against {:.3} on first contact",
            again.utilization,
            first.utilization
        );
    }
}

/// Pairs scattered both ways by a little jitter (a busy host's receive path) on a short, slow
/// path: after a cut, the rate climbs back to the link rather than to the least pair of the
/// last second (with the least: 0.953 and 0.930 of the link; with its quantile 0.980 and 0.977).
#[test]
fn scattered_pairs_on_a_short_path_do_not_hold_the_rate_under_the_link() {
    for jitter_ms in [0.04, 0.06] {
        let s = Scenario {
            rate_mbit: 100.0,
            rtt_ms: 4.0,
            size_mib: 64.0,
            channels: 2,
            jitter_ms,
            seed: 31,
            ..Scenario::default()
        };
        let r = run_delivered(&format!("scattered_pairs_4ms_jitter_{jitter_ms}ms"), s);
        assert!(r.utilization >= 0.97, "jitter {jitter_ms} ms: {:.3}", r.utilization);
    }
}

#[test]
fn udt_utilization_100ms_no_loss() {
    let s = Scenario { cc: CcKind::Udt, size_mib: 2048.0, seed: 21, ..Scenario::default() };
    let r = run_delivered("udt_100ms_0pct", s);
    assert!(r.utilization >= 0.90, "utilization {} < 0.90", r.utilization);
}

#[test]
fn udt_two_flows_fair() {
    let s = Scenario {
        cc: CcKind::Udt,
        flows: 2,
        flow_stagger_ms: 2_000,
        size_mib: 100_000.0,
        deadline_s: 30.0,
        fairness_window_s: Some((20.0, 30.0)),
        seed: 22,
        ..Scenario::default()
    };
    let r = run("udt_two_flows", s);
    let jain = r.jain_index.unwrap();
    assert!(jain >= 0.95, "Jain's index {jain} < 0.95");
}

/// UDT reads random loss as congestion: at 1 % it falls far below the link (the reason for
/// `adaptive`). Shown here and in the snapshots, not hidden.
#[test]
fn udt_collapses_under_random_loss_where_adaptive_does_not() {
    let base = Scenario { loss_pct: 1.0, size_mib: 512.0, seed: 23, ..Scenario::default() };
    let udt = run_delivered("udt_100ms_1pct", Scenario { cc: CcKind::Udt, ..base.clone() });
    let adaptive = run_delivered("adaptive_100ms_1pct_512", base);
    assert!(udt.utilization < 0.5, "udt at 1% loss: {}", udt.utilization);
    assert!(adaptive.utilization > 2.0 * udt.utilization);
}

#[test]
fn fixed_rate_delivers_at_up_to_10pct_loss() {
    for (i, loss_pct) in [0.0, 5.0, 10.0].into_iter().enumerate() {
        let s = Scenario {
            cc: CcKind::Fixed,
            cc_rate_mbit: 800.0,
            loss_pct,
            size_mib: 128.0,
            seed: 31 + i as u64,
            ..Scenario::default()
        };
        run_delivered(&format!("fixed_loss{loss_pct}"), s);
    }
}

// Coupled channels (`cc/coupled.rs`): the channels of one transfer share one rate budget.

/// A coupled group of one channel is the plain controller: the whole result (timeouts from a
/// blackout, losses, every counter) is identical, for each controller.
#[test]
fn a_coupled_single_channel_is_the_plain_controller() {
    for (i, cc) in [CcKind::Adaptive, CcKind::Udt].into_iter().enumerate() {
        let s = Scenario {
            cc,
            loss_pct: 0.5,
            blackout_s: Some((0.8, 1.0)),
            size_mib: 96.0,
            seed: 41 + i as u64,
            ..Scenario::default()
        };
        let coupled = run_delivered("single_coupled", Scenario { coupled: true, ..s.clone() });
        let plain = run_delivered("single_plain", Scenario { coupled: false, ..s });
        assert!(plain.flows[0].timeouts > 0);
        let json = |r: &ScenarioResult| serde_json::to_string(r).unwrap();
        assert_eq!(json(&coupled), json(&plain), "{}", cc.name());
    }
}

/// Four coupled channels alone on a lossy long path use the link as well as one channel does,
/// and deliver the whole file (every stripe intact, the stripes tiling it).
#[test]
fn four_coupled_channels_fill_a_lossy_link_like_one() {
    let base = Scenario { loss_pct: 1.0, size_mib: 1024.0, seed: 43, ..Scenario::default() };
    let one = run_delivered("one_channel_100ms_1pct", base.clone());
    let four = run_delivered("four_coupled_100ms_1pct", Scenario { channels: 4, ..base });
    println!(
        "utilization: one channel {}, four coupled channels {}",
        one.utilization, four.utilization
    );
    assert!(four.utilization >= 0.90, "four coupled channels: {}", four.utilization);
    assert!(
        four.utilization >= one.utilization - 0.02,
        "{} vs {}",
        four.utilization,
        one.utilization
    );
    let shares = &four.flows[0].channel_goodput_mbit;
    assert_eq!(shares.len(), 4);
    assert!(sluice_netsim::scenario::jain(shares) > 0.99, "channels share evenly: {shares:?}");
}

/// A 4-channel transfer against a 1-channel one on a 1 Gbit/s, 100 ms bottleneck (loss only from
/// queue overflow), the first starting 2 s before the second.
fn four_vs_one(channels: Vec<usize>, coupled: bool, seed: u64) -> Scenario {
    Scenario {
        flows: 2,
        flow_channels: channels,
        coupled,
        flow_stagger_ms: 2_000,
        size_mib: 100_000.0,
        deadline_s: 30.0,
        fairness_window_s: Some((20.0, 30.0)),
        seed,
        ..Scenario::default()
    }
}

#[test]
fn a_coupled_four_channel_transfer_is_as_fair_as_one_flow() {
    let r = run("coupled_4_then_1", four_vs_one(vec![4, 1], true, 44));
    let jain = r.jain_index.unwrap();
    assert!(jain >= 0.95, "Jain's index over the two transfers {jain} < 0.95");
    let [_, p99_ms, _] = r.queue_delay_ms;
    assert!(p99_ms <= 30.0, "99th percentile queuing delay {p99_ms} ms above 30 ms");
}

/// The same with the 1-channel transfer first: the coupled one joins like one flow would.
#[test]
fn a_coupled_four_channel_newcomer_is_as_fair_as_one_flow() {
    let r = run("coupled_1_then_4", four_vs_one(vec![1, 4], true, 45));
    let jain = r.jain_index.unwrap();
    assert!(jain >= 0.95, "Jain's index over the two transfers {jain} < 0.95");
}

/// Without coupling, four channels take about four shares: why the coupling matters.
#[test]
fn four_uncoupled_channels_take_about_four_shares() {
    let r = run("uncoupled_4_then_1", four_vs_one(vec![4, 1], false, 44));
    let (many, one) = (r.flows[0].goodput_mbit, r.flows[1].goodput_mbit);
    println!(
        "uncoupled: 4 channels {many} Mbit/s, 1 channel {one} Mbit/s, ratio {:.2}",
        many / one
    );
    assert!(many > 2.5 * one, "uncoupled channels should take several shares: {many} vs {one}");
    assert!(r.jain_index.unwrap() < 0.85);
}

#[test]
fn coupled_channels_deliver_the_whole_file_under_impairments() {
    let s = Scenario {
        channels: 3,
        loss_pct: 2.0,
        loss_burst_pkts: Some(4.0),
        reorder_pct: 1.0,
        duplicate_pct: 1.0,
        corrupt_pct: 0.5,
        rtt_ms: 50.0,
        size_mib: 100.0,
        seed: 47,
        ..Scenario::default()
    };
    let r = run_delivered("coupled_impaired", s);
    assert_eq!(r.flows[0].channel_goodput_mbit.len(), 3);
}

/// The mean of transfer `t`'s delivery rate over the trace samples in `from..to` seconds.
fn trace_mean(r: &ScenarioResult, t: usize, from: f64, to: f64) -> f64 {
    let samples: Vec<f64> =
        r.trace.iter().filter(|p| p.t_s > from && p.t_s <= to).map(|p| p.goodput_mbit[t]).collect();
    samples.iter().sum::<f64>() / samples.len().max(1) as f64
}

/// `low` alone fills the link, with and without random loss.
#[test]
fn low_alone_fills_the_link() {
    for (name, loss_pct, seed, floor) in
        [("low_100ms_0pct", 0.0, 61, 0.90), ("low_100ms_1pct", 1.0, 62, 0.80)]
    {
        let s =
            Scenario { cc: CcKind::Low, loss_pct, size_mib: 1024.0, seed, ..Scenario::default() };
        let r = run_delivered(name, s);
        assert!(r.utilization >= floor, "{name}: utilization {} < {floor}", r.utilization);
        let [_, p99_ms, _] = r.queue_delay_ms;
        println!("{name}: queue p99 {p99_ms} ms");
    }
}

/// A `low` transfer running alone yields to a fair one that starts later (the fair one takes
/// the link, the low one a trickle), and takes the link back once the fair one has finished.
#[test]
fn low_yields_to_a_fair_transfer_and_takes_the_link_back_after_it() {
    let s = Scenario {
        flows: 2,
        flow_cc: vec![CcKind::Low, CcKind::Adaptive],
        flow_stagger_ms: 3_000,
        size_mib: 1_536.0,
        deadline_s: 45.0,
        sample_ms: 500,
        fairness_window_s: Some((8.0, 14.0)),
        seed: 63,
        ..Scenario::default()
    };
    let ceiling = s.ceiling_mbit();
    let r = run_delivered("low_beside_fair", s);
    let (low, fair) = (r.window_mbit[0], r.window_mbit[1]);
    println!("low_beside_fair: 8-14 s low {low} Mbit/s, fair {fair} Mbit/s, ceiling {ceiling:.1}");
    assert!(fair >= 0.80 * ceiling, "the fair transfer gets {fair} of {ceiling:.1} Mbit/s");
    assert!(low <= 0.15 * fair, "the low transfer keeps {low} Mbit/s beside {fair}");
    // The fair transfer's last sample with data; a little later the low one runs alone.
    let fair_done =
        r.trace.iter().filter(|p| p.goodput_mbit[1] > 0.0).map(|p| p.t_s).fold(0.0, f64::max);
    let low_done =
        r.trace.iter().filter(|p| p.goodput_mbit[0] > 0.0).map(|p| p.t_s).fold(0.0, f64::max);
    assert!(low_done > fair_done + 4.0, "low finished at {low_done} s, fair at {fair_done} s");
    let climb: Vec<f64> = (0..6)
        .map(|k| trace_mean(&r, 0, fair_done + 2.0 * k as f64, fair_done + 2.0 * (k + 1) as f64))
        .collect();
    println!(
        "low_beside_fair: fair done at {fair_done} s; low over the next 2 s windows {climb:?}"
    );
    let after = trace_mean(&r, 0, fair_done + 6.0, fair_done + 8.0);
    assert!(after >= 0.60 * ceiling, "6-8 s after the fair transfer the low one gets {after:.1}");
}

// Timing noise (issue 25): the receive side hands packets over in bunches (NIC interrupt
// coalescing, GRO, virtual NICs, an emulator thread that wakes periodically), feedback comes
// back compressed, jitter with and without reordering, and a sender whose sleeps overshoot.
// Each model runs on the plain scenario of a utilization target and must hold that target: a
// result that holds only with precise release is not a result. (A model the controller misses
// is marked ignored with the number measured, so it is seen, not silently passing; none is now.)

/// Runs `s` and checks it holds the plain scenario's utilization `target`.
fn check_timing_noise(name: &str, s: Scenario, target: f64) {
    println!("timing noise {name}: {}", s.timing_noise().join(" "));
    let r = run_delivered(name, s);
    println!(
        "timing noise {name}: utilization {} (target {target}), queue delay p50/p99/max {:?} ms",
        r.utilization, r.queue_delay_ms
    );
    assert!(r.utilization >= target, "{name}: utilization {} < {target}", r.utilization);
}

/// One test per timing-noise model: `name: plain scenario, |s| change to it;`, where the plain
/// scenarios are those of `adaptive_utilization_100ms_1pct_2gib` (at 1 GiB, as the stalls test,
/// same target 0.90), `adaptive_utilization_300ms_3pct_2gib` (target 0.85), and a short path
/// (10 ms, 1 %, target 0.95: issue 25's bound for its 10 ms cells).
macro_rules! timing_noise {
    ($($(#[$attr:meta])* $name:ident: $plain:ident, |$s:ident| $change:expr;)*) => {$(
        $(#[$attr])*
        #[test]
        fn $name() {
            let (mut $s, target) = $plain();
            $change;
            check_timing_noise(stringify!($name), $s, target);
        }
    )*};
}

/// 100 ms, 1 % loss, 1 GiB, seed 7: the plain run reaches 0.952.
fn plain_100ms_1pct() -> (Scenario, f64) {
    (Scenario { loss_pct: 1.0, size_mib: 1024.0, seed: 7, ..Scenario::default() }, 0.90)
}

/// 300 ms, 3 % loss, 2 GiB, seed 8: the plain run reaches 0.937.
fn plain_300ms_3pct() -> (Scenario, f64) {
    let s =
        Scenario { rtt_ms: 300.0, loss_pct: 3.0, size_mib: 2048.0, seed: 8, ..Scenario::default() };
    (s, 0.85)
}

/// 10 ms, 1 % loss, 1 GiB, seed 7: the plain run reaches 0.989. (Released every 50 or 200 us it
/// reached 0.987 and 0.984 before the probe cycle took the reports' pace into account, 0.993
/// after: see `cc/adaptive.md`.)
fn plain_10ms_1pct() -> (Scenario, f64) {
    let s =
        Scenario { rtt_ms: 10.0, loss_pct: 1.0, size_mib: 1024.0, seed: 7, ..Scenario::default() };
    (s, 0.95)
}

/// The pacer's catch-up after a late wake-up in the real driver (`REAL_TIME_BURST_PKTS` in the
/// `sluice` crate). With the simulator's default of 1 packet, a sender woken up to 200 us late
/// loses most of the link to pacing alone (0.211 at 100 ms / 1 %), whatever the controller.
const REAL_DRIVER_BURST_PKTS: u32 = 256;

/// The sender's sleeps up to `us` late, with the real driver's catch-up after them.
fn late_sleeps(s: &mut Scenario, us: u64) {
    s.sleep_overshoot_us = us;
    s.max_burst_pkts = REAL_DRIVER_BURST_PKTS;
}

timing_noise! {
    timing_release_0us: plain_100ms_1pct, |s| s.release_granularity_us = 0;
    timing_release_20us: plain_100ms_1pct, |s| s.release_granularity_us = 20;
    timing_release_50us: plain_100ms_1pct, |s| s.release_granularity_us = 50;
    timing_release_200us: plain_100ms_1pct, |s| s.release_granularity_us = 200;
    timing_release_1000us: plain_100ms_1pct, |s| s.release_granularity_us = 1_000;
    timing_release_50us_wake_jitter_50us: plain_100ms_1pct, |s| {
        s.release_granularity_us = 50;
        s.release_wake_jitter_us = 50;
    };
    timing_release_200us_wake_jitter_200us: plain_100ms_1pct, |s| {
        s.release_granularity_us = 200;
        s.release_wake_jitter_us = 200;
    };
    timing_gro_16pkts: plain_100ms_1pct, |s| s.gro_batch = Some((16, 500));
    timing_gro_64pkts_100us: plain_100ms_1pct, |s| s.gro_batch = Some((64, 100));
    timing_ack_compression_200us: plain_100ms_1pct, |s| s.ack_compression_us = 200;
    timing_ack_compression_1000us: plain_100ms_1pct, |s| s.ack_compression_us = 1_000;
    timing_jitter_100us_in_order: plain_100ms_1pct, |s| s.jitter_ms = 0.1;
    timing_jitter_1ms_in_order: plain_100ms_1pct, |s| s.jitter_ms = 1.0;
    timing_jitter_100us_reordering: plain_100ms_1pct, |s| {
        s.jitter_ms = 0.1;
        s.jitter_reorders = true;
    };
    timing_sleep_overshoot_200us: plain_100ms_1pct, |s| late_sleeps(&mut s, 200);
    timing_sleep_overshoot_1000us: plain_100ms_1pct, |s| late_sleeps(&mut s, 1_000);
    timing_300ms_3pct_release_50us: plain_300ms_3pct, |s| s.release_granularity_us = 50;
    timing_300ms_3pct_release_200us: plain_300ms_3pct, |s| s.release_granularity_us = 200;
    timing_300ms_3pct_gro_16pkts: plain_300ms_3pct, |s| s.gro_batch = Some((16, 500));
    timing_300ms_3pct_ack_compression_1000us: plain_300ms_3pct, |s| s.ack_compression_us = 1_000;
    timing_300ms_3pct_sleep_overshoot_200us: plain_300ms_3pct, |s| late_sleeps(&mut s, 200);
    timing_10ms_1pct_release_0us: plain_10ms_1pct, |s| s.release_granularity_us = 0;
    timing_10ms_1pct_release_50us: plain_10ms_1pct, |s| s.release_granularity_us = 50;
    timing_10ms_1pct_release_200us: plain_10ms_1pct, |s| s.release_granularity_us = 200;
    timing_10ms_1pct_gro_16pkts: plain_10ms_1pct, |s| s.gro_batch = Some((16, 500));
    timing_10ms_1pct_ack_compression_1000us: plain_10ms_1pct, |s| s.ack_compression_us = 1_000;
    timing_10ms_1pct_sleep_overshoot_200us: plain_10ms_1pct, |s| late_sleeps(&mut s, 200);
}
