//! Runs one simulated transfer and prints one JSON line with its results.
//!
//! ```text
//! cargo run --release -p sluice-netsim --example scenario -- \
//!     --rate-mbit 1000 --rtt-ms 100 --loss-pct 1 --size-mib 1024 --flows 1 --cc adaptive --seed 7
//! ```
//!
//! Options (defaults in brackets): `--rate-mbit` [1000], `--rtt-ms` [100], `--loss-pct` [0],
//! `--burst-pkts N` (Gilbert-Elliott loss with mean burst N) [Bernoulli], `--size-mib` [256],
//! `--flows` [1] (transfers), `--channels N` or `N1,N2,..` (data channels per transfer, each
//! moving one stripe of its file; a list gives each transfer its own count) [1], `--uncoupled` (each channel runs its own controller instead of sharing the
//! transfer's rate budget) [coupled], `--stagger-ms` [0], `--cc udt|fixed|adaptive` [adaptive], `--fixed-rate-mbit`
//! [0], `--seed` [1], `--queue-bdp` [1], `--jitter-ms` [0], `--reorder-pct` [0],
//! `--duplicate-pct` [0], `--corrupt-pct` [0], `--blackout START_S:LEN_S`, `--deadline-s` [600],
//! `--trace-ms N` (include a rate trace) [off], `--packet-size` [1452], `--start-mbit R` (path memory:
//! start from a remembered delivery rate of R Mbit/s) [first contact], `--fairness-window FROM_S:TO_S`
//! (Jain's index over the transfers' delivery in this window) [whole transfers].
//! Timing noise (all off by default): `--jitter-reorders` (let `--jitter-ms` reorder),
//! `--release-granularity-us G` (data handed to the receiver at wakes every G us),
//! `--release-wake-jitter-us J` (each wake up to J us late, J <= G), `--gro-batch N:WINDOW_US`
//! (GRO-like batches of up to N packets), `--ack-compression-us G` (feedback handed to the sender
//! at wakes every G us), `--sleep-overshoot-us X` (the sender's timer wake-ups up to X us late),
//! `--max-burst-pkts N` (the pacer's catch-up after a late wake-up; the real driver uses 256) [1].
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::time::Instant;

use sluice_netsim::scenario::Scenario;
use sluice_proto::cc::CcKind;

fn parse(args: &[String]) -> Result<Scenario, String> {
    let mut s = Scenario::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: &String| v.parse::<f64>().map_err(|_| format!("{flag}: not a number: {v}"));
        match flag.as_str() {
            "--rate-mbit" => s.rate_mbit = num(value()?)?,
            "--rtt-ms" => s.rtt_ms = num(value()?)?,
            "--loss-pct" => s.loss_pct = num(value()?)?,
            "--burst-pkts" => s.loss_burst_pkts = Some(num(value()?)?),
            "--size-mib" => s.size_mib = num(value()?)?,
            "--flows" => s.flows = num(value()?)? as usize,
            "--channels" => {
                let list = value()?
                    .split(',')
                    .map(|v| v.parse::<usize>().map_err(|_| format!("--channels: bad count {v}")))
                    .collect::<Result<Vec<_>, _>>()?;
                s.channels = list[0];
                s.flow_channels = list;
            }
            "--uncoupled" => s.coupled = false,
            "--stagger-ms" => s.flow_stagger_ms = num(value()?)? as u64,
            "--cc" => {
                let v = value()?;
                s.cc =
                    CcKind::from_name(v).ok_or_else(|| format!("--cc: unknown controller {v}"))?;
            }
            "--fixed-rate-mbit" => s.cc_rate_mbit = num(value()?)?,
            "--seed" => s.seed = value()?.parse().map_err(|_| "--seed: not an integer")?,
            "--queue-bdp" => s.queue_bdp = num(value()?)?,
            "--jitter-ms" => s.jitter_ms = num(value()?)?,
            "--reorder-pct" => s.reorder_pct = num(value()?)?,
            "--duplicate-pct" => s.duplicate_pct = num(value()?)?,
            "--corrupt-pct" => s.corrupt_pct = num(value()?)?,
            "--blackout" => {
                let v = value()?;
                let (a, b) = v.split_once(':').ok_or("--blackout takes START_S:LEN_S")?;
                s.blackout_s = Some((num(&a.to_string())?, num(&b.to_string())?));
            }
            "--deadline-s" => s.deadline_s = num(value()?)?,
            "--fairness-window" => {
                let v = value()?;
                let (a, b) = v.split_once(':').ok_or("--fairness-window takes FROM_S:TO_S")?;
                s.fairness_window_s = Some((num(&a.to_string())?, num(&b.to_string())?));
            }
            "--trace-ms" => s.sample_ms = num(value()?)? as u64,
            "--jitter-reorders" => s.jitter_reorders = true,
            "--release-granularity-us" => s.release_granularity_us = num(value()?)? as u64,
            "--release-wake-jitter-us" => s.release_wake_jitter_us = num(value()?)? as u64,
            "--gro-batch" => {
                let v = value()?;
                let (n, w) = v.split_once(':').ok_or("--gro-batch takes PKTS:WINDOW_US")?;
                s.gro_batch = Some((num(&n.to_string())? as u32, num(&w.to_string())? as u64));
            }
            "--ack-compression-us" => s.ack_compression_us = num(value()?)? as u64,
            "--sleep-overshoot-us" => s.sleep_overshoot_us = num(value()?)? as u64,
            "--max-burst-pkts" => s.max_burst_pkts = num(value()?)? as u32,
            "--start-mbit" => s.start_mbit = num(value()?)?,
            "--packet-size" => s.packet_size = num(value()?)? as usize,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if !(s.rate_mbit > 0.0 && s.rtt_ms >= 0.0 && s.size_mib > 0.0 && s.flows >= 1)
        || s.channels < 1
        || s.flow_channels.contains(&0)
    {
        return Err("rate, size, flows and channels must be positive".into());
    }
    if !(0.0..100.0).contains(&s.loss_pct) {
        return Err("--loss-pct must be in [0, 100)".into());
    }
    if s.cc == CcKind::Fixed && s.cc_rate_mbit <= 0.0 {
        return Err("--cc fixed needs --fixed-rate-mbit".into());
    }
    s.channel_config(0).validate().map_err(|e| e.to_string())?;
    let net = s.sim_config();
    net.forward.check().and(net.reverse.check())?;
    Ok(s)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scenario = match parse(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("scenario: {e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let result = scenario.run();
    let mut json = serde_json::to_value(&result).expect("result serializes");
    json["real_seconds"] =
        serde_json::json!((started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0);
    json["cc"] = serde_json::json!(scenario.cc.name());
    json["seed"] = serde_json::json!(scenario.seed);
    let channels: Vec<usize> = (0..scenario.flows).map(|t| scenario.channels_of(t)).collect();
    json["channels"] = serde_json::json!(channels);
    json["coupled"] = serde_json::json!(scenario.coupled);
    println!("{json}");
    if result.delivered_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
