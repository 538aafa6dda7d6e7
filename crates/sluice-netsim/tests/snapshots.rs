//! Rate-over-time traces of each congestion controller in named scenarios, kept in
//! `tests/snapshots/`. The simulation is deterministic, so any change to a controller's behaviour
//! changes a trace and fails here until the new trace is reviewed and accepted with
//! `SLUICE_BLESS=1 cargo test -p sluice-netsim --test snapshots`.

#![allow(clippy::print_stdout)] // tests print their seeds and results

use std::fmt::Write as _;
use std::path::PathBuf;

use sluice_netsim::scenario::Scenario;
use sluice_proto::cc::CcKind;

fn render(name: &str, s: &Scenario) -> String {
    let r = s.run();
    let mut out = format!(
        "# {name}: cc={} rate={}Mbit rtt={}ms loss={}% flows={} seed={}\n\
         # goodput={}Mbit utilization={} retransmitted={}% queue_ms(p50,p99,max)={:?}\n",
        s.cc.name(),
        s.rate_mbit,
        s.rtt_ms,
        s.loss_pct,
        s.flows,
        s.seed,
        r.goodput_mbit,
        r.utilization,
        r.retransmitted_pct,
        r.queue_delay_ms,
    );
    let noise = s.timing_noise();
    if !noise.is_empty() {
        writeln!(out, "# timing noise: {}", noise.join(" ")).unwrap();
    }
    out.push_str("# t_s  rate_mbit(per flow)  goodput_mbit(per flow)  queue_ms\n");
    for p in &r.trace {
        let rate: Vec<String> = p.rate_mbit.iter().map(|x| format!("{x:.0}")).collect();
        let good: Vec<String> = p.goodput_mbit.iter().map(|x| format!("{x:.0}")).collect();
        writeln!(out, "{:5.1}  {}  {}  {:.1}", p.t_s, rate.join(","), good.join(","), p.queue_ms)
            .unwrap();
    }
    out
}

fn check(name: &str, s: Scenario) {
    println!("snapshot {name}: seed={}", s.seed);
    let actual = render(name, &s);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!("{}: no snapshot; create it with SLUICE_BLESS=1 and review it", path.display())
    });
    if expected != actual {
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .filter(|(e, a)| e != a)
            .take(10)
            .map(|(e, a)| format!("- {e}\n+ {a}"))
            .collect();
        panic!(
            "{name}: trace changed (first differences below); review, then accept with SLUICE_BLESS=1\n{}",
            diff.join("\n")
        );
    }
}

fn trace(cc: CcKind, rtt_ms: f64, loss_pct: f64, seed: u64) -> Scenario {
    Scenario {
        cc,
        rtt_ms,
        loss_pct,
        size_mib: 100_000.0,
        deadline_s: 20.0,
        sample_ms: 500,
        seed,
        ..Scenario::default()
    }
}

#[test]
fn snapshot_udt_100ms_no_loss() {
    check("udt_100ms_0pct", trace(CcKind::Udt, 100.0, 0.0, 101));
}

#[test]
fn snapshot_udt_100ms_1pct_loss() {
    check("udt_100ms_1pct", trace(CcKind::Udt, 100.0, 1.0, 102));
}

#[test]
fn snapshot_adaptive_100ms_no_loss() {
    check("adaptive_100ms_0pct", trace(CcKind::Adaptive, 100.0, 0.0, 103));
}

#[test]
fn snapshot_adaptive_100ms_1pct_loss() {
    check("adaptive_100ms_1pct", trace(CcKind::Adaptive, 100.0, 1.0, 104));
}

#[test]
fn snapshot_adaptive_300ms_3pct_loss() {
    check("adaptive_300ms_3pct", trace(CcKind::Adaptive, 300.0, 3.0, 105));
}

#[test]
fn snapshot_fixed_100ms_5pct_loss() {
    let s = Scenario { cc_rate_mbit: 800.0, ..trace(CcKind::Fixed, 100.0, 5.0, 106) };
    check("fixed_100ms_5pct", s);
}

#[test]
fn snapshot_two_adaptive_flows() {
    let s =
        Scenario { flows: 2, flow_stagger_ms: 2_000, ..trace(CcKind::Adaptive, 100.0, 0.0, 107) };
    check("adaptive_two_flows_100ms", s);
}

// Timing noise (issue 25): the same runs as the plain traces above (same seeds), with the receive
// side handing the data over in bunches. The plain trace of each is the one to compare with.

#[test]
fn snapshot_adaptive_100ms_1pct_loss_batch50us() {
    let s = Scenario { release_granularity_us: 50, ..trace(CcKind::Adaptive, 100.0, 1.0, 104) };
    check("adaptive_100ms_1pct_batch50us", s);
}

#[test]
fn snapshot_adaptive_100ms_1pct_loss_batch200us() {
    let s = Scenario { release_granularity_us: 200, ..trace(CcKind::Adaptive, 100.0, 1.0, 104) };
    check("adaptive_100ms_1pct_batch200us", s);
}

#[test]
fn snapshot_adaptive_100ms_1pct_loss_gro16() {
    let s = Scenario { gro_batch: Some((16, 500)), ..trace(CcKind::Adaptive, 100.0, 1.0, 104) };
    check("adaptive_100ms_1pct_gro16", s);
}

/// Two transfers of two coupled channels started 10 ms apart, released every 50 µs: both
/// startups end at the whole link and are cut together, and what they share afterwards is set by
/// how they climb back (a 262/646 Mbit/s split before the capped increase took one step for all).
#[test]
fn snapshot_two_adaptive_flows_together_batch50us() {
    let s = Scenario {
        flows: 2,
        channels: 2,
        flow_stagger_ms: 10,
        release_granularity_us: 50,
        ..trace(CcKind::Adaptive, 100.0, 0.0, 9)
    };
    check("adaptive_two_flows_together_batch50us", s);
}

/// How bunching affects `udt`: compare with `udt_100ms_0pct`. Its packet pairs read many times
/// the link, so it sends at several Gbit/s into the 1 Gbit/s link: 6 s of that is enough to see
/// (and costs the simulator as much as 20 s of the plain run).
#[test]
fn snapshot_udt_100ms_no_loss_batch200us() {
    let s = Scenario {
        release_granularity_us: 200,
        deadline_s: 6.0,
        ..trace(CcKind::Udt, 100.0, 0.0, 101)
    };
    check("udt_100ms_0pct_batch200us", s);
}
