//! The `linkem` command: namespace helper, link emulator and self-check.

mod selfcheck;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Arg, ArgAction, ArgMatches, Command};
use linkem::model::{DirectionConfig, LossConfig};
use linkem::parse::{parse_duration_ns, parse_probability, parse_queue, parse_rate};
use linkem::{A_ADDR, B_ADDR, Emulator, LinkConfig, NetnsPair, netns};

/// Per-direction options: name, help, value name.
const DIR_OPTS: &[(&str, &str, &str)] = &[
    ("rate", "bottleneck rate, e.g. 1000mbit, 1gbit, 500kbit (0 = unlimited, the default)", "RATE"),
    (
        "queue",
        "drop-tail queue limit: bytes (150000, 64kb, 1mib) or packets (100p); default one bandwidth-delay product of the base RTT, at least 96000 bytes",
        "SIZE",
    ),
    ("delay", "one-way delay, e.g. 50ms, 250us (default 0)", "TIME"),
    (
        "jitter",
        "each packet's delay is uniform in delay±jitter; packets stay in order unless --jitter-reorders",
        "TIME",
    ),
    (
        "loss",
        "random loss, e.g. 1% or 0.01 (Bernoulli; with --loss-burst, the mean of a bursty Gilbert-Elliott loss)",
        "P",
    ),
    (
        "loss-burst",
        "mean loss burst length in packets (>= 1): makes --loss bursty (Gilbert-Elliott)",
        "PKTS",
    ),
    (
        "reorder",
        "probability that a packet is held back by --reorder-gap so later packets overtake it",
        "P",
    ),
    ("reorder-gap", "extra delay of a reordered packet (default 1ms)", "TIME"),
    ("duplicate", "probability that a packet is delivered twice", "P"),
    (
        "black-hole-above",
        "drop IP packets longer than this many bytes without a word (no ICMP): a path MTU black hole, where the hosts believe the TUN's MTU of 1500",
        "BYTES",
    ),
    (
        "release-granularity",
        "receive batching: release packets to the receiving namespace only at wakes every TIME (multiples of TIME from linkem's start), so they arrive in bunches, as NIC interrupt coalescing or a virtual NIC hands them over; on the return path of a transfer (--b2a-... for a transfer from a to b) this is ACK compression; 0 = off (default)",
        "TIME",
    ),
    (
        "release-wake-jitter",
        "each such wake is late by a random amount uniform in 0..TIME (at most the granularity; default 0)",
        "TIME",
    ),
    (
        "gro-batch",
        "GRO-like batching: hold packets due for release until PKTS are held (2-64) or --gro-window has passed since the first, then release them together; 0 = off (default)",
        "PKTS",
    ),
    ("gro-window", "the longest a GRO-like batch waits (default 100us)", "TIME"),
];

fn prefix_arg() -> Arg {
    Arg::new("prefix")
        .long("prefix")
        .required(true)
        .value_name("NAME")
        .help("namespaces are NAME-a and NAME-b")
}

fn cli() -> Command {
    let mut run = Command::new("run")
        .about(
            "Create a TUN device in each namespace (a: 198.18.0.1/15, b: 198.18.1.1/15) and \
             forward packets between them through the emulated link until SIGINT/SIGTERM; prints \
             counters as one JSON line on exit",
        )
        .arg(prefix_arg())
        .arg(Arg::new("seed").long("seed").default_value("1").value_parser(clap::value_parser!(u64)).help("seed of every random decision"))
        .arg(Arg::new("stats-interval").long("stats-interval").value_name("SECS").value_parser(clap::value_parser!(f64)).help("also print the counters every SECS seconds"))
        .arg(Arg::new("jitter-reorders").long("jitter-reorders").action(ArgAction::SetTrue).help("let jitter reorder packets (default: keep arrival order)"))
        .arg(Arg::new("spin-us").long("spin-us").default_value("20").value_parser(clap::value_parser!(u64)).help("spin this long before a release instead of sleeping"))
        .arg(Arg::new("txqueuelen").long("txqueuelen").default_value("10000").value_parser(clap::value_parser!(u32)).help("TUN transmit queue length (the kernel drops beyond it, before linkem sees the packet)"))
        .arg(Arg::new("nice").long("nice").default_value("-10").allow_hyphen_values(true).value_parser(clap::value_parser!(i32)).help("nice value of the forwarding threads (0 keeps the default priority)"))
.arg(Arg::new("offload").long("offload").action(ArgAction::SetTrue).help("virtio-net headers on the TUNs: take GSO super-packets from the sender and split them into MTU-size packets before the link model; coalesce (GRO) packets released together into the receiver. Much less CPU per packet"))
.arg(Arg::new("rt-priority").long("rt-priority").value_name("0-99").default_value("10").value_parser(clap::value_parser!(u8).range(0..=99)).help("run the forwarding threads SCHED_FIFO at this priority (via chrt), for prompt releases on a busy machine; 0 keeps the normal scheduler"))
.arg(Arg::new("coalesce-us").long("coalesce-us").default_value("50").value_parser(clap::value_parser!(u64)).help("while packets keep arriving, sleep this long between looks instead of waking per packet (releases up to this late); 0 = wake per packet"))
        .arg(Arg::new("max-packets").long("max-packets").default_value("262144").value_parser(clap::value_parser!(u32)).help("most packets held per direction (buffer pool limit, 2 KiB each)"));
    for &(name, help, value) in DIR_OPTS {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        run = run
            .arg(
                Arg::new(name)
                    .long(name)
                    .value_name(value)
                    .help(leak(format!("{help} (both directions)"))),
            )
            .arg(
                Arg::new(leak(format!("a2b-{name}")))
                    .long(leak(format!("a2b-{name}")))
                    .value_name(value)
                    .help(leak(format!("{name}, a to b only")))
                    .hide_short_help(true),
            )
            .arg(
                Arg::new(leak(format!("b2a-{name}")))
                    .long(leak(format!("b2a-{name}")))
                    .value_name(value)
                    .help(leak(format!("{name}, b to a only")))
                    .hide_short_help(true),
            );
    }
    Command::new("linkem")
        .about("Userspace WAN link emulator between two network namespaces over TUN devices")
        .subcommand_required(true)
        .subcommand(
            Command::new("netns")
                .about("Create or remove the namespace pair NAME-a / NAME-b")
                .subcommand_required(true)
                .subcommand(Command::new("up").about("create NAME-a and NAME-b (loopback up, IPv6 off)").arg(prefix_arg()))
                .subcommand(Command::new("down").about("remove NAME-a and NAME-b").arg(prefix_arg())),
        )
        .subcommand(run)
        .subcommand(
            Command::new("selfcheck")
                .about("Measure delay accuracy (ping) and the sustained TCP rate (iperf3) in namespaces of its own")
                .arg(Arg::new("delay").long("delay").default_value("50ms").help("one-way delay of the delay check"))
                .arg(Arg::new("pings").long("pings").default_value("20").value_parser(clap::value_parser!(u32)))
                .arg(Arg::new("rate").long("rate").default_value("1000mbit").help("bottleneck rate of the rate check"))
                .arg(Arg::new("rate-delay").long("rate-delay").default_value("5ms").help("one-way delay of the rate check"))
                .arg(Arg::new("seconds").long("seconds").default_value("10").value_parser(clap::value_parser!(u32)).help("length of the iperf3 run"))
                .arg(Arg::new("nice").long("nice").default_value("-10").allow_hyphen_values(true).value_parser(clap::value_parser!(i32)).help("nice value of the forwarding threads"))
                .arg(Arg::new("spin-us").long("spin-us").default_value("20").value_parser(clap::value_parser!(u64)).help("spin this long before a release"))
                .arg(Arg::new("offload").long("offload").action(ArgAction::SetTrue).help("virtio-net headers on the TUNs: take GSO super-packets from the sender and split them into MTU-size packets before the link model; coalesce (GRO) packets released together into the receiver. Much less CPU per packet"))
                .arg(Arg::new("rt-priority").long("rt-priority").value_name("0-99").default_value("10").value_parser(clap::value_parser!(u8).range(0..=99)).help("run the forwarding threads SCHED_FIFO at this priority (via chrt), for prompt releases on a busy machine; 0 keeps the normal scheduler"))
                .arg(Arg::new("coalesce-us").long("coalesce-us").default_value("50").value_parser(clap::value_parser!(u64)).help("while packets keep arriving, sleep this long between looks instead of waking per packet (releases up to this late); 0 = wake per packet"))
                .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("print only the JSON line")),
        )
}

fn strs(m: &ArgMatches, name: &str) -> Option<String> {
    m.get_one::<String>(name).cloned()
}

fn direction_config(m: &ArgMatches, dir: &str, jitter_reorders: bool) -> Result<DirectionConfig> {
    let get = |name: &str| strs(m, &format!("{dir}-{name}")).or_else(|| strs(m, name));
    let ctx = |name: &str| format!("--{dir}-{name} / --{name}");
    let mut c = DirectionConfig { jitter_reorders, ..Default::default() };
    if let Some(v) = get("rate") {
        c.rate_bps = parse_rate(&v).map_err(anyhow::Error::msg).with_context(|| ctx("rate"))?;
    }
    if let Some(v) = get("queue") {
        c.queue = Some(parse_queue(&v).map_err(anyhow::Error::msg).with_context(|| ctx("queue"))?);
    }
    let dur = |name: &str| -> Result<Option<u64>> {
        get(name)
            .map(|v| parse_duration_ns(&v).map_err(anyhow::Error::msg).with_context(|| ctx(name)))
            .transpose()
    };
    let prob = |name: &str| -> Result<Option<f64>> {
        get(name)
            .map(|v| parse_probability(&v).map_err(anyhow::Error::msg).with_context(|| ctx(name)))
            .transpose()
    };
    c.delay_ns = dur("delay")?.unwrap_or(0);
    c.jitter_ns = dur("jitter")?.unwrap_or(0);
    if let Some(g) = dur("reorder-gap")? {
        c.reorder_gap_ns = g;
    }
    c.reorder = prob("reorder")?.unwrap_or(0.0);
    c.duplicate = prob("duplicate")?.unwrap_or(0.0);
    c.release_granularity_ns = dur("release-granularity")?.unwrap_or(0);
    c.release_wake_jitter_ns = dur("release-wake-jitter")?.unwrap_or(0);
    if let Some(w) = dur("gro-window")? {
        c.gro_window_ns = w;
    }
    c.gro_batch = get("gro-batch")
        .map(|v| v.parse::<u32>().with_context(|| ctx("gro-batch")))
        .transpose()?
        .unwrap_or(0);
    c.black_hole_above_bytes = get("black-hole-above")
        .map(|v| v.parse::<u32>().with_context(|| ctx("black-hole-above")))
        .transpose()?;
    let loss = prob("loss")?.unwrap_or(0.0);
    let burst = get("loss-burst")
        .map(|v| v.parse::<f64>().with_context(|| ctx("loss-burst")))
        .transpose()?;
    c.loss = match (loss, burst) {
        (0.0, _) => LossConfig::None,
        (l, None) => LossConfig::Bernoulli { p: l },
        (l, Some(b)) => LossConfig::GilbertElliott { mean_loss: l, mean_burst: b },
    };
    c.validate().map_err(anyhow::Error::msg).with_context(|| format!("direction {dir}"))?;
    Ok(c)
}

fn out_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn cmd_run(m: &ArgMatches) -> Result<()> {
    let prefix = strs(m, "prefix").unwrap_or_default();
    let jr = m.get_flag("jitter-reorders");
    let config = LinkConfig {
        a2b: direction_config(m, "a2b", jr)?,
        b2a: direction_config(m, "b2a", jr)?,
        seed: *m.get_one::<u64>("seed").unwrap_or(&1),
        spin_ns: m.get_one::<u64>("spin-us").copied().unwrap_or(20) * 1000,
        tx_queue_len: m.get_one::<u32>("txqueuelen").copied().unwrap_or(10_000),
        max_packets: m.get_one::<u32>("max-packets").copied().unwrap_or(262_144),
        nice: m.get_one::<i32>("nice").copied().unwrap_or(-10),
        offload: m.get_flag("offload"),
        rt_priority: m.get_one::<u8>("rt-priority").copied().filter(|&p| p > 0),
        coalesce_ns: m.get_one::<u64>("coalesce-us").copied().unwrap_or(50) * 1000,
    };
    let pair = NetnsPair::existing(&prefix)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    let emu = Emulator::start(pair.a(), pair.b(), &config)?;
    let (qa, qb) = config.queue_limits();
    eprintln!(
        "linkem: forwarding {}({A_ADDR}) <-> {}({B_ADDR}) via TUN {}; queue a2b {qa:?}, b2a {qb:?}; \
         a2b {:?}; b2a {:?}",
        pair.a(),
        pair.b(),
        netns::TUN_NAME,
        config.a2b,
        config.b2a
    );
    let interval = m.get_one::<f64>("stats-interval").map(|s| Duration::from_secs_f64(s.max(0.01)));
    let mut next_stats = interval.map(|i| Instant::now() + i);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        if let (Some(at), Some(i)) = (next_stats, interval)
            && Instant::now() >= at
        {
            out_line(&emu.report().to_json());
            next_stats = Some(at + i);
        }
    }
    out_line(&emu.stop().to_json());
    Ok(())
}

fn cmd_selfcheck(m: &ArgMatches) -> Result<()> {
    let parse_d =
        |n: &str| parse_duration_ns(&strs(m, n).unwrap_or_default()).map_err(anyhow::Error::msg);
    let opts = selfcheck::SelfcheckOptions {
        delay_ns: parse_d("delay")?,
        pings: *m.get_one::<u32>("pings").unwrap_or(&20),
        rate_bps: parse_rate(&strs(m, "rate").unwrap_or_default()).map_err(anyhow::Error::msg)?,
        rate_delay_ns: parse_d("rate-delay")?,
        seconds: *m.get_one::<u32>("seconds").unwrap_or(&10),
        nice: *m.get_one::<i32>("nice").unwrap_or(&-10),
        spin_ns: m.get_one::<u64>("spin-us").copied().unwrap_or(20) * 1000,
        offload: m.get_flag("offload"),
        rt_priority: m.get_one::<u8>("rt-priority").copied().filter(|&p| p > 0),
        coalesce_ns: m.get_one::<u64>("coalesce-us").copied().unwrap_or(50) * 1000,
    };
    let report = selfcheck::run(&opts)?;
    out_line(&serde_json::to_string(&report)?);
    if !m.get_flag("json") {
        eprintln!("{}", report.summary());
    }
    Ok(())
}

fn main() -> Result<()> {
    let m = cli().get_matches();
    if !netns::is_root() {
        bail!("linkem needs root (network namespaces and TUN devices)");
    }
    match m.subcommand() {
        Some(("netns", sub)) => match sub.subcommand() {
            Some(("up", s)) => {
                let prefix = strs(s, "prefix").unwrap_or_default();
                NetnsPair::create(&prefix)?.keep();
                eprintln!("created {prefix}-a and {prefix}-b");
            }
            Some(("down", s)) => {
                let prefix = strs(s, "prefix").unwrap_or_default();
                netns::remove_pair(&prefix)?;
                eprintln!("removed {prefix}-a and {prefix}-b");
            }
            _ => unreachable!("clap requires a subcommand"),
        },
        Some(("run", s)) => cmd_run(s)?,
        Some(("selfcheck", s)) => cmd_selfcheck(s)?,
        _ => unreachable!("clap requires a subcommand"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        cli().debug_assert();
    }

    #[test]
    fn per_direction_options_override_both() {
        let m = cli()
            .try_get_matches_from([
                "linkem",
                "run",
                "--prefix",
                "x",
                "--rate",
                "100mbit",
                "--delay",
                "10ms",
                "--b2a-delay",
                "20ms",
                "--loss",
                "1%",
                "--a2b-loss-burst",
                "10",
            ])
            .unwrap();
        let (_, s) = m.subcommand().unwrap();
        let a = direction_config(s, "a2b", false).unwrap();
        let b = direction_config(s, "b2a", false).unwrap();
        assert_eq!((a.rate_bps, a.delay_ns), (100_000_000, 10_000_000));
        assert_eq!((b.rate_bps, b.delay_ns), (100_000_000, 20_000_000));
        assert_eq!(a.loss, LossConfig::GilbertElliott { mean_loss: 0.01, mean_burst: 10.0 });
        assert_eq!(b.loss, LossConfig::Bernoulli { p: 0.01 });
        assert_eq!((a.release_granularity_ns, a.gro_batch), (0, 0));
    }

    #[test]
    fn receive_batching_options() {
        let m = cli()
            .try_get_matches_from([
                "linkem",
                "run",
                "--prefix",
                "x",
                "--a2b-release-granularity",
                "200us",
                "--a2b-release-wake-jitter",
                "50us",
                "--b2a-release-granularity",
                "1ms",
                "--gro-batch",
                "16",
                "--b2a-gro-window",
                "30us",
            ])
            .unwrap();
        let (_, s) = m.subcommand().unwrap();
        let a = direction_config(s, "a2b", false).unwrap();
        let b = direction_config(s, "b2a", false).unwrap();
        assert_eq!((a.release_granularity_ns, a.release_wake_jitter_ns), (200_000, 50_000));
        assert_eq!((b.release_granularity_ns, b.release_wake_jitter_ns), (1_000_000, 0));
        assert_eq!((a.gro_batch, a.gro_window_ns), (16, 100_000));
        assert_eq!((b.gro_batch, b.gro_window_ns), (16, 30_000));
        let bad = cli()
            .try_get_matches_from([
                "linkem",
                "run",
                "--prefix",
                "x",
                "--release-granularity",
                "20us",
                "--release-wake-jitter",
                "50us",
            ])
            .unwrap();
        let (_, s) = bad.subcommand().unwrap();
        assert!(direction_config(s, "a2b", false).is_err(), "jitter above the granularity");
    }
}
