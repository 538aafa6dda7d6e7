//! Issue 28's relay measurement: a sender S with a fast uplink, three relays and a receiver D
//! each behind a slow link, joined by a router X in network namespaces of this program's own
//! (`tools/linkem` links, removed at the end), and `sluice cp` run on S: direct, through 2 and
//! 3 relays, with and without the receiver in the striping, each strategy.
//!
//! ```text
//!  S --(uplink, 1 ms)-- X --(100 Mbit/s, 1 ms)-- R1, R2, R3
//!                       X --(100 Mbit/s, 24 ms)-- D
//! ```
//!
//! Round trips: S to a relay 4 ms, S or a relay to D 50 ms. D's one link carries everything it
//! receives, so collection runs at most at its rate; the sender's paths give it (relays + 1) x
//! that rate. The ceiling row blasts the direct path at 95 % of D's link (`--policy fixed`):
//! what one path to D gives at most. The row "S to r1 alone" copies the file to one relay as a
//! plain server: what a relay's path carries as one long copy, the yardstick of the column "of
//! paths alone" (striping goodput over the sum of what its paths carry alone); "of framing
//! max" is it over the most payload the links S stripes to can carry (FSP's "theoretical").
//! The row "r1 to D alone" copies it from r1 to D (both behind slow links): what a
//! collection's path carries as one long copy. The row "1 relay" (`--rows relay1` runs it
//! alone) stripes over r1 only, without D: what cutting the file into deposits costs against
//! "S to r1 alone". Prints one JSON line per row and a Markdown table; needs root.
//! Downloads (every row set but `one` and `relay1`): S also serves, its config file naming the
//! three relays, and D runs `sluice cp` from S directly and through them (`--relay r1,r2,r3`:
//! S stripes, D takes its direct share and collects the rest; then with `--relay-direct off`);
//! their send and total times are ratios to the direct download's.
//! `RELAY_TOPOLOGY_CLIENT_LOG=FILE` keeps the last row's client log, and
//! `RELAY_TOPOLOGY_SERVER_LOGS=DIR` each server's as `DIR/HOST.log` (with `RUST_LOG`).
//!
//! `cargo run --release -p sluice-cli --example relay_topology -- [--bin target/release/sluice]
//! [--size-mib 256] [--uplink-mbit 1000] [--slow-mbit 100]
//! [--rows all|quick|one|download|relay1] [--block 4MiB] [--batch-us 0] [--spin-us 20]`

#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line measurement

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use linkem::{DirectionConfig, Emulator, End, LinkConfig, QueueLimit, netns};
use sluice_proto::wire::DATA_OVERHEAD;

const PORT: u16 = 7700;
const TOKEN: &str = "relay-topology-bench-token-5e1d";
/// Hosts: name, the last-but-one octet of its link to X.
const HOSTS: [(&str, u8); 5] = [("s", 10), ("r1", 11), ("r2", 12), ("r3", 13), ("d", 20)];

struct Args {
    bin: PathBuf,
    size_mib: u64,
    uplink_mbit: u64,
    slow_mbit: u64,
    quick: bool,
    /// Only the row of 3 relays and the receiver (for A/B runs).
    one: bool,
    /// Only the downloads: D from S directly, and through S's 3 relays.
    download: bool,
    /// Only the row of one relay without the receiver (the deposits' own yardstick).
    relay1: bool,
    block: String,
    /// Receive-side release granularity of every link, in microseconds (0: on time).
    batch_us: u64,
    /// How long before a release each link's thread stops sleeping and spins (linkem's
    /// `spin_ns`), in microseconds; `None` keeps linkem's default.
    spin_us: Option<u64>,
}

fn args() -> Args {
    let mut a = Args {
        bin: PathBuf::from("target/release/sluice"),
        size_mib: 256,
        uplink_mbit: 1000,
        slow_mbit: 100,
        quick: false,
        one: false,
        download: false,
        relay1: false,
        block: "4MiB".into(),
        batch_us: 0,
        spin_us: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--bin" => a.bin = PathBuf::from(value),
            "--size-mib" => a.size_mib = value.parse().expect("--size-mib N"),
            "--uplink-mbit" => a.uplink_mbit = value.parse().expect("--uplink-mbit N"),
            "--slow-mbit" => a.slow_mbit = value.parse().expect("--slow-mbit N"),
            "--rows" => {
                (a.quick, a.one, a.download, a.relay1) =
                    (value == "quick", value == "one", value == "download", value == "relay1");
            }
            "--block" => a.block = value,
            "--batch-us" => a.batch_us = value.parse().expect("--batch-us N"),
            "--spin-us" => a.spin_us = Some(value.parse().expect("--spin-us N")),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// The most of a link's rate that is the file's bytes: `linkem` serializes IP packets, and a
/// full-size data packet is 1500 bytes of IP (20 bytes of IP header, 8 of UDP, 1472 of
/// Sluice) carrying 1472 - [`DATA_OVERHEAD`] = 1428 bytes of the file: 95.2 Mbit/s of a 100
/// Mbit/s link.
/// The column "of framing max" is the striping goodput over this of the links S stripes to:
/// FSP's "theoretical 284.8 Mbit/s" of three 100 Mbit/s paths is the same sum for TCP over
/// Ethernet (1460 bytes of data in every 1538 on the wire: 94.93 Mbit/s a path).
fn framing_max_mbit(links_mbit: u64) -> f64 {
    // IP (20 bytes) and UDP (8) headers around each of Sluice's datagrams.
    let datagram = usize::from(linkem::emulator::MTU) - 28;
    links_mbit as f64 * (datagram - DATA_OVERHEAD) as f64 / f64::from(linkem::emulator::MTU)
}

/// Namespaces removed on drop, after the links (their TUN devices) and the servers.
struct World {
    servers: Vec<Child>,
    links: Vec<(String, Emulator)>,
    names: Vec<String>,
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        self.links.clear();
        for ns in &self.names {
            let _ = netns::remove_one(ns);
        }
    }
}

fn addr(octet: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, octet, host)
}

fn direction(rate_mbit: u64, one_way_ms: u64, batch_us: u64) -> DirectionConfig {
    DirectionConfig {
        rate_bps: rate_mbit * 1_000_000,
        delay_ns: one_way_ms * 1_000_000,
        // One bandwidth-delay product of the 50 ms path to the receiver.
        queue: Some(QueueLimit::Bytes(rate_mbit * 1_000_000 / 8 * 50 / 1000)),
        release_granularity_ns: batch_us * 1000,
        ..Default::default()
    }
}

impl World {
    fn new(a: &Args) -> World {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() };
        let tag = format!("rt{}", std::process::id());
        let mut world = World {
            servers: Vec::new(),
            links: Vec::new(),
            names: Vec::new(),
            dir: dir.unwrap(),
            bin: std::fs::canonicalize(&a.bin).expect("the sluice binary"),
        };
        let router = format!("{tag}-x");
        for name in HOSTS.iter().map(|(h, _)| format!("{tag}-{h}")).chain([router.clone()]) {
            netns::create_one(&name).unwrap();
            world.names.push(name);
        }
        netns::ip(&["netns", "exec", &router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
            .unwrap();
        for (host, octet) in HOSTS {
            let ns = format!("{tag}-{host}");
            let (rate, delay) = match host {
                "s" => (a.uplink_mbit, 1),
                "d" => (a.slow_mbit, 24),
                _ => (a.slow_mbit, 1),
            };
            let mut config = LinkConfig::symmetric(direction(rate, delay, a.batch_us));
            if let Some(us) = a.spin_us {
                config.spin_ns = us * 1000;
            }
            let (here, there) = (format!("l{host}"), format!("x{host}"));
            let near = End { ns: &ns, device: &here, addr: addr(octet, 1), prefix_len: 30 };
            let far = End { ns: &router, device: &there, addr: addr(octet, 2), prefix_len: 30 };
            let link = Emulator::start_between(near, far, &config).expect("a link");
            world.links.push((host.to_owned(), link));
            let via = addr(octet, 2).to_string();
            netns::ip(&["-n", &ns, "route", "add", "198.18.0.0/16", "via", &via]).unwrap();
        }
        // The relays and D first: S's server names the relays by their fingerprints.
        for (host, octet) in HOSTS[1..].iter().chain(&HOSTS[..1]) {
            let home = world.dir.path().join(host);
            std::fs::create_dir_all(home.join("root")).unwrap();
            let tokens = home.join("tokens");
            std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
            std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &format!("{tag}-{host}")]).arg(&world.bin).args([
                "serve",
                "--listen",
                &format!("{}:{PORT}", addr(*octet, 1)),
            ]);
            c.arg("--root").arg(home.join("root")).arg("--state-dir").arg(home.join("state"));
            c.arg("--tokens").arg(&tokens);
            if host.starts_with('r') {
                c.arg("--spool").arg(home.join("spool")).args(["--spool-max", "8GiB"]);
            }
            if *host == "s" {
                let token = home.join("relay.token");
                std::fs::write(&token, TOKEN).unwrap();
                let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
                std::fs::set_permissions(&token, owner_only).unwrap();
                let mut text = String::new();
                for (relay, octet) in &HOSTS[1..4] {
                    text.push_str(&format!(
                        "[relays.{relay}]\naddress = \"{}\"\nport = {PORT}\nfingerprint = \"{}\"\n\
                         token_file = \"{}\"\n",
                        addr(*octet, 1),
                        world.fingerprint(relay),
                        token.display()
                    ));
                }
                std::fs::write(home.join("server.toml"), text).unwrap();
                c.arg("--config").arg(home.join("server.toml"));
            }
            // RELAY_TOPOLOGY_SERVER_LOGS=DIR: each server's log (its RUST_LOG) as DIR/HOST.log.
            let log = match std::env::var_os("RELAY_TOPOLOGY_SERVER_LOGS") {
                Some(dir) => Stdio::from(
                    std::fs::File::create(Path::new(&dir).join(format!("{host}.log"))).unwrap(),
                ),
                None => Stdio::null(),
            };
            let mut child = c.stdout(Stdio::piped()).stderr(log).spawn().unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            assert!(line.contains("serving on"), "{host} said {line:?}");
            let fingerprint = line.split_whitespace().last().unwrap_or_default().to_owned();
            std::fs::write(home.join("fingerprint"), fingerprint).unwrap();
            world.servers.push(child);
        }
        world
    }

    fn fingerprint(&self, host: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(host).join("fingerprint")).unwrap()
    }

    /// Bytes through each host's link, both ways, so far.
    fn bytes(&self) -> Vec<(String, u64, u64)> {
        let each = self.links.iter().map(|(n, l)| {
            let r = l.report();
            (n.clone(), r.a2b.delivered_bytes, r.b2a.delivered_bytes)
        });
        each.collect()
    }

    /// `sluice cp ARGS SOURCE TO:DEST` on `from` (S, or a relay) (`to`: d or a relay, as a
    /// plain server); the summary's JSON and the wall time.
    fn cp(
        &self,
        from: &str,
        extra: &[&str],
        source: &Path,
        to: &str,
        dest: &str,
    ) -> (serde_json::Value, f64, Vec<f64>) {
        let config = self.dir.path().join("client.toml");
        let mut text = String::new();
        for (host, octet) in &HOSTS[1..4] {
            text.push_str(&format!(
                "[relays.{host}]\naddress = \"{}\"\nport = {PORT}\nfingerprint = \"{}\"\n",
                addr(*octet, 1),
                self.fingerprint(host)
            ));
        }
        std::fs::write(&config, text).unwrap();
        let octet = HOSTS.iter().find(|(h, _)| *h == to).map_or(20, |(_, o)| *o);
        let remote = format!("{}:{dest}", addr(octet, 1));
        let paths = [source.as_os_str(), std::ffi::OsStr::new(&remote)];
        self.cp_on(from, to, extra, &paths, &config)
    }

    /// `sluice cp ARGS S:SOURCE DEST` on D: a download from S's server into D's own directory.
    fn download(
        &self,
        extra: &[&str],
        source: &str,
        dest: &Path,
    ) -> (serde_json::Value, f64, Vec<f64>) {
        let remote = format!("{}:{source}", addr(HOSTS[0].1, 1));
        let paths = [std::ffi::OsStr::new(&remote), dest.as_os_str()];
        self.cp_on("d", "s", extra, &paths, Path::new("/dev/null"))
    }

    /// `sluice cp --json ARGS PATHS` run on `host` against the server on `to`, with `config`
    /// as its config file; the summary's JSON, the wall time and D's link each second.
    fn cp_on(
        &self,
        host: &str,
        to: &str,
        extra: &[&str],
        paths: &[&std::ffi::OsStr],
        config: &Path,
    ) -> (serde_json::Value, f64, Vec<f64>) {
        let tag = &self.names[0][..self.names[0].len() - 2];
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &format!("{tag}-{host}")]).arg(&self.bin);
        c.env("SLUICE_CONFIG", config).env("SLUICE_TOKEN", TOKEN);
        c.args(["cp", "--json", "-P", &PORT.to_string(), "--fingerprint", &self.fingerprint(to)]);
        c.arg("--known-hosts").arg(self.dir.path().join(format!("known_hosts.{host}")));
        c.args(extra).args(paths);
        let started = Instant::now();
        let done = std::sync::atomic::AtomicBool::new(false);
        let (out, timeline) = std::thread::scope(|scope| {
            let sampler = scope.spawn(|| self.d_timeline(&done));
            let out = c.output().unwrap();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            (out, sampler.join().unwrap())
        });
        let wall = started.elapsed().as_secs_f64();
        if let Some(log) = std::env::var_os("RELAY_TOPOLOGY_CLIENT_LOG") {
            std::fs::write(log, &out.stderr).unwrap();
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{extra:?}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .rfind(|v| v["event"] == "summary")
            .unwrap_or_else(|| panic!("no summary: {stdout}"));
        (summary, wall, timeline)
    }

    /// What D's link delivered towards D each second (Mbit/s) until `done`: how full the
    /// receiver's link is kept while it collects; and the packets its queue dropped each
    /// second (`RELAY_TOPOLOGY_DROPS=1` prints them on stderr).
    fn d_timeline(&self, done: &std::sync::atomic::AtomicBool) -> Vec<f64> {
        let (_, link) = self.links.iter().find(|(n, _)| n == "d").expect("D's link");
        let mut seconds = Vec::new();
        let mut drops = Vec::new();
        let report = link.report().b2a;
        let (mut last, mut last_drops) = (report.delivered_bytes, report.dropped_queue);
        'sampling: while !done.load(std::sync::atomic::Ordering::Relaxed) {
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(50));
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    break 'sampling;
                }
            }
            let report = link.report().b2a;
            seconds.push((report.delivered_bytes - last) as f64 * 8.0 / 1e6);
            drops.push(report.dropped_queue - last_drops);
            (last, last_drops) = (report.delivered_bytes, report.dropped_queue);
        }
        if std::env::var_os("RELAY_TOPOLOGY_DROPS").is_some() {
            eprintln!("D's queue drops each second: {drops:?}");
        }
        seconds
    }

    fn received(&self, to: &str, dest: &str) -> PathBuf {
        self.dir.path().join(to).join("root").join(dest)
    }
}

/// MB each host's link carried between two of [`World::bytes`]'s snapshots: (host, one way,
/// the other).
fn moved(before: &[(String, u64, u64)], after: &[(String, u64, u64)]) -> Vec<(String, f64, f64)> {
    let each = after.iter().zip(before).map(|((n, a2b, b2a), (_, a0, b0))| {
        (n.clone(), (a2b - a0) as f64 / 1e6, (b2a - b0) as f64 / 1e6)
    });
    each.collect()
}

/// MB through `host`'s link, both ways, of what [`moved`] counted.
fn through(moved: &[(String, f64, f64)], host: &str) -> f64 {
    moved.iter().find(|(n, _, _)| n == host).map_or(0.0, |m| m.1 + m.2)
}

/// Same bytes (compared a MiB at a time).
fn same(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(fa), Ok(fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else { return false };
    let (mut ra, mut rb) = (std::io::BufReader::new(fa), std::io::BufReader::new(fb));
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let (na, nb) = (ra.read(&mut ba).unwrap(), rb.read(&mut bb).unwrap());
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

fn main() {
    let a = args();
    assert!(netns::is_root(), "needs root (network namespaces, TUN devices)");
    let world = World::new(&a);
    // In S's served directory: uploads read it there, downloads fetch it from S's server.
    let source = world.dir.path().join("s").join("root").join("source.bin");
    {
        // Incompressible: the BLAKE3 XOF of a fixed key.
        let mut out = std::io::BufWriter::new(std::fs::File::create(&source).unwrap());
        let mut xof = blake3::Hasher::new_keyed(&[28; 32]).finalize_xof();
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..a.size_mib {
            xof.fill(&mut buf);
            std::io::Write::write_all(&mut out, &buf).unwrap();
        }
    }
    let size = a.size_mib << 20;
    // The ceiling: the direct path blasted at 95 % of D's link (`--policy fixed`), what one
    // path to D gives at most; every row's total is also a ratio to it.
    let blast = format!("{}Mbit", a.slow_mbit * 95 / 100);
    let ceiling = ("direct, blast ceiling", vec!["--policy", "fixed", "--limit-rate", &blast]);
    // What one relay's path carries alone: S to r1 as one long copy (the three relays' paths
    // are alike), the measured yardstick of "the sum of what the sender's paths carry".
    const ALONE: &str = "S to r1 alone";
    let alone = (ALONE, vec![]);
    // What a collection's path carries as one long copy: r1 (behind its own slow link) to D,
    // the yardstick of the receiver's collection after the sender left.
    const RELAY_TO_D: &str = "r1 to D alone";
    let relay_to_d = (RELAY_TO_D, vec![]);
    let mut rows: Vec<(&str, Vec<&str>)> = if a.one || a.download || a.relay1 {
        Vec::new()
    } else {
        vec![("direct", vec![]), ceiling, alone, relay_to_d]
    };
    // One relay alone: S's deposits one after another over one path, against "S to r1
    // alone" (the same path as one long copy): what cutting the file into deposits costs.
    let one_relay = ("1 relay", vec!["--relay", "r1", "--relay-direct", "off"]);
    let three_and_d = ("3 relays + D, fcfs", vec!["--relay", "r1,r2,r3"]);
    let all = [
        one_relay.clone(),
        ("2 relays + D, fcfs", vec!["--relay", "r1,r2"]),
        ("2 relays, fcfs", vec!["--relay", "r1,r2", "--relay-direct", "off"]),
        three_and_d.clone(),
        ("3 relays, fcfs", vec!["--relay", "r1,r2,r3", "--relay-direct", "off"]),
        ("3 relays + D, cyclic", vec!["--relay", "r1,r2,r3", "--relay-strategy", "cyclic"]),
        (
            "3 relays + D, partitioned",
            vec!["--relay", "r1,r2,r3", "--relay-strategy", "partitioned"],
        ),
    ];
    if a.relay1 {
        rows.push(one_relay);
    } else if a.quick || a.one {
        rows.push(three_and_d);
    } else if !a.download {
        rows.extend(all);
    }
    println!(
        "# {} MiB; S uplink {} Mbit/s; relays and D {} Mbit/s; RTT S-relay 4 ms, to D 50 ms; \
         release granularity {} us",
        a.size_mib, a.uplink_mbit, a.slow_mbit, a.batch_us
    );
    let mut table = vec![
        "| row | send s | total s | send / direct | total / direct | total / ceiling | striping Mbit/s | theoretical | fraction | of framing max | of paths alone | S link MB | D link MB | relay links MB |".to_owned(),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".to_owned(),
    ];
    let (mut direct_s, mut ceiling_s, mut alone_s) = (0.0, f64::NAN, f64::NAN);
    // Mbit/s of the file moved in `secs`.
    let goodput = |secs: f64| size as f64 * 8.0 / secs / 1e6;
    let mut finished = Vec::new();
    for (i, (label, flags)) in rows.iter().enumerate() {
        let dest = format!("row{i}.bin");
        let before = world.bytes();
        let relayed = flags.contains(&"--relay");
        let mut extra: Vec<&str> = flags.clone();
        if relayed {
            extra.extend(["--relay-wait", "--relay-block", &a.block]);
        }
        let to = if *label == ALONE { "r1" } else { "d" };
        let from = if *label == RELAY_TO_D { "r1" } else { "s" };
        let (summary, wall, timeline) = world.cp(from, &extra, &source, to, &dest);
        let after = world.bytes();
        assert!(same(&source, &world.received(to, &dest)), "{label}: the file differs");
        let _ = std::fs::remove_file(world.received(to, &dest));
        let moved = moved(&before, &after);
        let of = |h: &str| through(&moved, h);
        let relays_mb: f64 = ["r1", "r2", "r3"].iter().map(|h| of(h)).sum();
        let (send, total) = if relayed {
            (
                summary["send_seconds"].as_f64().unwrap(),
                summary["total_seconds"].as_f64().unwrap_or(wall),
            )
        } else {
            let seconds = summary["seconds"].as_f64().unwrap_or(wall);
            match (flags.is_empty(), to) {
                _ if *label == RELAY_TO_D => {}
                (true, "d") => direct_s = seconds,
                (true, _) => alone_s = seconds,
                (false, _) => ceiling_s = seconds,
            }
            (seconds, seconds)
        };
        // What the sender's paths carry at most: each relay's link, and D's when it shares.
        let relays = flags.iter().find(|f| f.starts_with('r')).map_or(0, |r| r.split(',').count());
        let with_d = flags.is_empty() || !flags.contains(&"off");
        let theoretical = (relays as u64 + u64::from(with_d)) * a.slow_mbit;
        let dests = (relays, with_d);
        let striping = goodput(send);
        let line = serde_json::json!({
            "row": label, "size": size, "send_s": send, "total_s": total, "wall_s": wall,
            "striping_mbit": striping, "theoretical_mbit": theoretical,
            "framing_max_mbit": framing_max_mbit(theoretical),
            "links_mb": moved.iter().map(|(n, a2b, b2a)| serde_json::json!({"host": n, "up_mb": a2b, "down_mb": b2a})).collect::<Vec<_>>(),
            "placed": summary["placed"].clone(),
            "d_mbit_each_s": timeline.iter().map(|m| m.round()).collect::<Vec<_>>(),
        });
        println!("{line}");
        let links = (of("s"), of("d"), relays_mb);
        finished.push((label, send, total, striping, theoretical, dests, links));
        std::thread::sleep(Duration::from_secs(1));
    }
    // The ratios once every row ran (the ceiling runs after the direct row).
    // "Of paths alone": the striping goodput over the sum of what each of its paths carried
    // as one long copy of the same file (S to r1 for each relay, the direct row for D).
    for (label, send, total, striping, theoretical, dests, links) in finished {
        let (relays, with_d) = dests;
        let paths = relays as f64 * goodput(alone_s) + if with_d { goodput(direct_s) } else { 0.0 };
        let (s_mb, d_mb, relays_mb) = links;
        table.push(format!(
            "| {label} | {send:.2} | {total:.2} | {:.3} | {:.3} | {:.3} | {striping:.0} | {theoretical} | {:.3} | {:.3} | {:.3} | {s_mb:.0} | {d_mb:.0} | {relays_mb:.0} |",
            send / direct_s,
            total / direct_s,
            total / ceiling_s,
            striping / theoretical as f64,
            striping / framing_max_mbit(theoretical),
            striping / paths,
        ));
    }
    if !a.one && !a.relay1 {
        table.extend(downloads(&world, &a, size));
    }
    println!("{}", table.join("\n"));
    // The emulator's own cost and timing over the whole run: on this machine every link's
    // threads share the cores with every endpoint.
    for (host, link) in &world.links {
        let r = link.report();
        println!(
            "# link {host}: spin {} ms, releases >100 us late {}, >1 ms late {}, latest {} us",
            r.a2b.spin_ms + r.b2a.spin_ms,
            r.a2b.late_over_100us + r.b2a.late_over_100us,
            r.a2b.late_over_1ms + r.b2a.late_over_1ms,
            r.a2b.max_late_us.max(r.b2a.max_late_us),
        );
    }
}

/// The download rows: D fetches the file from S's server directly, then through S's three
/// relays (S stripes, D collects); times are ratios to the direct download's.
fn downloads(world: &World, a: &Args, size: u64) -> Vec<String> {
    let local = world.dir.path().join("dl");
    std::fs::create_dir_all(&local).unwrap();
    let source = world.dir.path().join("s").join("root").join("source.bin");
    let rows: [(&str, Vec<&str>); 3] = [
        ("download: direct", vec![]),
        (
            "download: 3 relays + D (S stripes, D takes its share and collects)",
            vec!["--relay", "r1,r2,r3", "--relay-block", &a.block],
        ),
        (
            "download: 3 relays (S stripes, D collects)",
            vec!["--relay", "r1,r2,r3", "--relay-direct", "off", "--relay-block", &a.block],
        ),
    ];
    let mut direct_s = f64::NAN;
    let mut lines = Vec::new();
    for (i, (label, flags)) in rows.iter().enumerate() {
        let dest = local.join(format!("row{i}.bin"));
        let before = world.bytes();
        let (summary, wall, timeline) = world.download(flags, "source.bin", &dest);
        let after = world.bytes();
        assert!(same(&source, &dest), "{label}: the file differs");
        let _ = std::fs::remove_file(&dest);
        let moved = moved(&before, &after);
        let of = |h: &str| through(&moved, h);
        let relays_mb: f64 = ["r1", "r2", "r3"].iter().map(|h| of(h)).sum();
        let (send, total) = if flags.is_empty() {
            let seconds = summary["seconds"].as_f64().unwrap_or(wall);
            direct_s = seconds;
            (seconds, seconds)
        } else {
            (summary["send_seconds"].as_f64().unwrap(), summary["total_seconds"].as_f64().unwrap())
        };
        // 100 Mbit/s per destination S stripes to (D too when it takes a share).
        let dests = match flags.len() {
            0 => 1,
            _ if flags.contains(&"off") => 3,
            _ => 4,
        };
        let theoretical = dests * a.slow_mbit;
        let striping = size as f64 * 8.0 / send / 1e6;
        let line = serde_json::json!({
            "row": label, "size": size, "send_s": send, "total_s": total, "wall_s": wall,
            "striping_mbit": striping, "theoretical_mbit": theoretical,
            "framing_max_mbit": framing_max_mbit(theoretical),
            "placed": summary["placed"].clone(),
            "d_mbit_each_s": timeline.iter().map(|m| m.round()).collect::<Vec<_>>(),
        });
        println!("{line}");
        lines.push(format!(
            "| {label} | {send:.2} | {total:.2} | {:.3} | {:.3} | - | {striping:.0} | {theoretical} | {:.3} | {:.3} | - | {:.0} | {:.0} | {relays_mb:.0} |",
            send / direct_s,
            total / direct_s,
            striping / theoretical as f64,
            striping / framing_max_mbit(theoretical),
            of("s"),
            of("d"),
        ));
        std::thread::sleep(Duration::from_secs(1));
    }
    lines
}
