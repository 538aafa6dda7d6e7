//! `linkem selfcheck`: measures the emulator on this machine, in namespaces of its own.
//!
//! 1. Delay accuracy: `ping` from a to b through a link with a fixed one-way delay and no rate
//!    limit; the round trip should be twice the one-way delay.
//! 2. Rate: one `iperf3` TCP flow from a to b through a link at the configured rate with a small
//!    delay and no loss, for a few seconds; reports the achieved share of the configured rate,
//!    and the CPU time of the forwarding threads.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use linkem::DirectionConfig;
use linkem::{B_ADDR, NetnsPair};
use linkem::{Emulator, LinkConfig, Report};

/// What to measure.
#[derive(Debug, Clone)]
pub(crate) struct SelfcheckOptions {
    /// One-way delay of the delay check, in nanoseconds.
    pub(crate) delay_ns: u64,
    /// Number of pings.
    pub(crate) pings: u32,
    /// Bottleneck rate of the rate check, in bit/s.
    pub(crate) rate_bps: u64,
    /// One-way delay of the rate check, in nanoseconds.
    pub(crate) rate_delay_ns: u64,
    /// Duration of the iperf3 run, in seconds.
    pub(crate) seconds: u32,
    /// Nice value of the forwarding threads.
    pub(crate) nice: i32,
    /// Spin time before a release, in nanoseconds.
    pub(crate) spin_ns: u64,
    /// Virtio-net header mode of the TUN devices.
    pub(crate) offload: bool,
    /// SCHED_FIFO priority of the forwarding threads.
    pub(crate) rt_priority: Option<u8>,
    /// Coalescing interval of the forwarding threads, ns.
    pub(crate) coalesce_ns: u64,
}

impl Default for SelfcheckOptions {
    fn default() -> Self {
        SelfcheckOptions {
            delay_ns: 50_000_000,
            pings: 20,
            rate_bps: 1_000_000_000,
            rate_delay_ns: 5_000_000,
            seconds: 10,
            nice: -10,
            spin_ns: 20_000,
            offload: false,
            rt_priority: Some(10),
            coalesce_ns: 50_000,
        }
    }
}

/// Result of the delay check.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DelayCheck {
    /// Configured one-way delay, ms.
    pub(crate) one_way_ms: f64,
    /// Expected round trip (twice the one-way delay), ms.
    pub(crate) expected_rtt_ms: f64,
    /// Pings sent.
    pub(crate) sent: u32,
    /// Pings answered.
    pub(crate) received: u32,
    /// Smallest round trip, ms.
    pub(crate) rtt_min_ms: f64,
    /// Mean round trip, ms.
    pub(crate) rtt_avg_ms: f64,
    /// Largest round trip, ms.
    pub(crate) rtt_max_ms: f64,
    /// Mean deviation of the round trip, ms.
    pub(crate) rtt_mdev_ms: f64,
    /// Mean round trip minus the expected one, ms.
    pub(crate) avg_error_ms: f64,
}

/// Result of the rate check.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RateCheck {
    /// Configured bottleneck rate, Mbit/s.
    pub(crate) configured_mbit: f64,
    /// One-way delay, ms.
    pub(crate) one_way_ms: f64,
    /// Length of the TCP run, s.
    pub(crate) seconds: u32,
    /// TCP goodput measured by the iperf3 receiver, Mbit/s.
    pub(crate) tcp_mbit: f64,
    /// `tcp_mbit / configured_mbit`.
    pub(crate) share: f64,
    /// TCP retransmissions counted by the sender.
    pub(crate) retransmits: u64,
    /// CPU seconds used by the a-to-b forwarding thread during the run.
    pub(crate) a2b_thread_cpu_s: f64,
    /// CPU seconds used by the b-to-a forwarding thread during the run.
    pub(crate) b2a_thread_cpu_s: f64,
    /// The emulator's counters after the run.
    pub(crate) emulator: Report,
}

/// Everything the self-check measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SelfcheckReport {
    /// Delay accuracy.
    pub(crate) delay: DelayCheck,
    /// Sustained rate.
    pub(crate) rate: RateCheck,
}

impl SelfcheckReport {
    /// A few lines for a person.
    pub(crate) fn summary(&self) -> String {
        let d = &self.delay;
        let r = &self.rate;
        format!(
            "delay: one-way {:.1} ms, expected RTT {:.1} ms, measured min/avg/max {:.3}/{:.3}/{:.3} ms \
             (mdev {:.3} ms, mean error {:+.3} ms), {}/{} pings answered\n\
             rate:  {:.0} Mbit/s configured, one-way {:.1} ms: iperf3 TCP {:.1} Mbit/s = {:.1} % \
             ({} retransmits, {} queue drops, {} late>1ms); forwarding CPU a2b {:.2} s, b2a {:.2} s \
             over {} s",
            d.one_way_ms,
            d.expected_rtt_ms,
            d.rtt_min_ms,
            d.rtt_avg_ms,
            d.rtt_max_ms,
            d.rtt_mdev_ms,
            d.avg_error_ms,
            d.received,
            d.sent,
            r.configured_mbit,
            r.one_way_ms,
            r.tcp_mbit,
            r.share * 100.0,
            r.retransmits,
            r.emulator.a2b.dropped_queue,
            r.emulator.a2b.late_over_1ms + r.emulator.b2a.late_over_1ms,
            r.a2b_thread_cpu_s,
            r.b2a_thread_cpu_s,
            r.seconds,
        )
    }
}

/// Kills and reaps a child process (by its own handle, hence its pid) on drop.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Parses the summary of `ping -q`: `(sent, received, min, avg, max, mdev)`.
pub(crate) fn parse_ping(out: &str) -> Option<(u32, u32, f64, f64, f64, f64)> {
    let stats = out.lines().find(|l| l.contains("packets transmitted"))?;
    let mut words = stats.split_whitespace();
    let sent = words.next()?.parse().ok()?;
    let received = stats.split(", ").nth(1)?.split_whitespace().next()?.parse().ok()?;
    let rtt = out.lines().find(|l| l.starts_with("rtt") || l.starts_with("round-trip"))?;
    let nums: Vec<f64> = rtt
        .split('=')
        .nth(1)?
        .split_whitespace()
        .next()?
        .split('/')
        .filter_map(|v| v.parse().ok())
        .collect();
    if nums.len() != 4 {
        return None;
    }
    Some((sent, received, nums[0], nums[1], nums[2], nums[3]))
}

/// CPU seconds (user + system) used so far by this process's thread named `name`.
fn thread_cpu_s(name: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if &stat[open + 1..close] != name {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        // After the name: state is field 3; utime and stime are fields 14 and 15.
        let ticks = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        return (ticks(14) + ticks(15)) / 100.0;
    }
    0.0
}

fn check_tool(name: &str) -> anyhow::Result<()> {
    let found =
        Command::new(name).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    match found {
        Ok(_) => Ok(()),
        Err(_) => anyhow::bail!("`{name}` is not installed (apt-get install {name})"),
    }
}

/// Runs the delay check on an existing pair of namespaces.
pub(crate) fn delay_check(
    pair: &NetnsPair,
    opts: &SelfcheckOptions,
    seed: u64,
) -> anyhow::Result<DelayCheck> {
    let dir = DirectionConfig { delay_ns: opts.delay_ns, ..Default::default() };
    let emu = Emulator::start(
        pair.a(),
        pair.b(),
        &LinkConfig {
            seed,
            nice: opts.nice,
            spin_ns: opts.spin_ns,
            offload: opts.offload,
            rt_priority: opts.rt_priority,
            coalesce_ns: opts.coalesce_ns,
            ..LinkConfig::symmetric(dir)
        },
    )?;
    let out = Command::new("ip")
        .args(["netns", "exec", pair.a(), "ping", "-q", "-n", "-i", "0.2", "-W", "3"])
        .args(["-c", &opts.pings.to_string(), &B_ADDR.to_string()])
        .output()?;
    drop(emu);
    let text = String::from_utf8_lossy(&out.stdout);
    let (sent, received, min, avg, max, mdev) = parse_ping(&text).ok_or_else(|| {
        anyhow::anyhow!(
            "cannot read ping's output: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let expected = 2.0 * ms(opts.delay_ns);
    Ok(DelayCheck {
        one_way_ms: ms(opts.delay_ns),
        expected_rtt_ms: expected,
        sent,
        received,
        rtt_min_ms: min,
        rtt_avg_ms: avg,
        rtt_max_ms: max,
        rtt_mdev_ms: mdev,
        avg_error_ms: avg - expected,
    })
}

/// Runs the rate check on an existing pair of namespaces.
pub(crate) fn rate_check(
    pair: &NetnsPair,
    opts: &SelfcheckOptions,
    seed: u64,
) -> anyhow::Result<RateCheck> {
    let dir = DirectionConfig {
        rate_bps: opts.rate_bps,
        delay_ns: opts.rate_delay_ns,
        ..Default::default()
    };
    let emu = Emulator::start(
        pair.a(),
        pair.b(),
        &LinkConfig {
            seed,
            nice: opts.nice,
            spin_ns: opts.spin_ns,
            offload: opts.offload,
            rt_priority: opts.rt_priority,
            coalesce_ns: opts.coalesce_ns,
            ..LinkConfig::symmetric(dir)
        },
    )?;
    let port = "5201";
    let _server = ChildGuard(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                pair.b(),
                "iperf3",
                "-s",
                "-1",
                "-B",
                &B_ADDR.to_string(),
                "-p",
                port,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    // Give the server time to listen; the client retries below if it was too early.
    std::thread::sleep(Duration::from_millis(500));
    let cpu0 = (thread_cpu_s("linkem-a2b"), thread_cpu_s("linkem-b2a"));
    let deadline = Instant::now() + Duration::from_secs(5);
    let out = loop {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                pair.a(),
                "iperf3",
                "-J",
                "-c",
                &B_ADDR.to_string(),
                "-p",
                port,
            ])
            .args(["-t", &opts.seconds.to_string()])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let cpu1 = (thread_cpu_s("linkem-a2b"), thread_cpu_s("linkem-b2a"));
    let report = emu.stop();
    let json: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| anyhow::anyhow!("cannot read iperf3's JSON ({e}): {out}"))?;
    if let Some(err) = json.get("error") {
        anyhow::bail!("iperf3: {err}");
    }
    let bps = json["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| anyhow::anyhow!("no end.sum_received.bits_per_second in iperf3's JSON"))?;
    let retransmits = json["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    let configured_mbit = opts.rate_bps as f64 / 1e6;
    Ok(RateCheck {
        configured_mbit,
        one_way_ms: ms(opts.rate_delay_ns),
        seconds: opts.seconds,
        tcp_mbit: bps / 1e6,
        share: bps / 1e6 / configured_mbit,
        retransmits,
        a2b_thread_cpu_s: cpu1.0 - cpu0.0,
        b2a_thread_cpu_s: cpu1.1 - cpu0.1,
        emulator: report,
    })
}

/// Runs both checks in namespaces of its own, removed afterwards.
pub(crate) fn run(opts: &SelfcheckOptions) -> anyhow::Result<SelfcheckReport> {
    check_tool("ping")?;
    check_tool("iperf3")?;
    let pair = NetnsPair::create(&NetnsPair::unique_prefix("selfcheck"))?;
    let delay = delay_check(&pair, opts, 1)?;
    let rate = rate_check(&pair, opts, 2)?;
    pair.remove()?;
    Ok(SelfcheckReport { delay, rate })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ping_summary() {
        let out = "PING 198.18.1.1 (198.18.1.1) 56(84) bytes of data.\n\n\
                   --- 198.18.1.1 ping statistics ---\n\
                   20 packets transmitted, 19 received, 5% packet loss, time 3803ms\n\
                   rtt min/avg/max/mdev = 100.101/100.202/100.903/0.150 ms\n";
        assert_eq!(parse_ping(out), Some((20, 19, 100.101, 100.202, 100.903, 0.150)));
        assert_eq!(parse_ping("garbage"), None);
    }
}
