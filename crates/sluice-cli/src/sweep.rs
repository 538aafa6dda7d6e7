//! `sluice sweep host`: FFTM's "sweep copy" done properly. Real uploads of test data over the
//! real path, one per transport, packet size and channel count (over TCP, per stream count), a
//! table of goodput and retransmissions, and the best settings, ready for the config file.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use sluice::session::{CopyOptions, Overwrite, SessionError, Transport, TransportChoice};

use crate::config::ClientFile;
use crate::connect::{ConnectArgs, reach};
use crate::exit;
use crate::ssh::SshArgs;
use sluice::units::parse_size;

/// Arguments of `sluice sweep`.
#[derive(Args, Debug)]
pub(crate) struct SweepArgs {
    /// The server, as `host` or `host:dir` (the test file goes there; default: its root).
    #[arg(value_name = "HOST[:DIR]")]
    target: String,
    /// Bytes of test data per run (random, so compression cannot flatter it).
    #[arg(long, default_value = "64MiB")]
    size: String,
    /// Packet sizes to try, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1200,1452")]
    packet_sizes: Vec<usize>,
    /// Channel counts to try, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    channels: Vec<u32>,
    /// Add the best settings to the config file as the host's section (refused if the file
    /// already has one for this host).
    #[arg(long)]
    save: bool,
    #[command(flatten)]
    connect: ConnectArgs,
    // With `--ssh`, each run starts its own one-shot server over ssh, and a relative DIR is
    // under the remote home.
    #[command(flatten)]
    ssh: SshArgs,
}

/// One run's outcome.
struct Row {
    transport: Transport,
    /// `None` over TCP (the kernel sizes the segments).
    packet_size: Option<usize>,
    channels: u32,
    mbit: f64,
    /// Retransmitted data packets over all sent, when the sender's channels reported.
    retransmitted: Option<f64>,
    seconds: f64,
}

/// The name of the test file on the server.
const TEST_FILE: &str = ".sluice-sweep.bin";

/// Runs `sluice sweep`.
#[allow(clippy::print_stdout)]
pub(crate) async fn run(args: SweepArgs) -> anyhow::Result<()> {
    let (host, dir) = match args.target.split_once(':') {
        Some((host, dir)) => (host.to_owned(), dir.trim_end_matches('/').to_owned()),
        None => (args.target.clone(), String::new()),
    };
    let size = parse_size(&args.size).map_err(|e| exit::usage(format!("--size: {e}")))?;
    if size == 0 || args.packet_sizes.is_empty() || args.channels.is_empty() {
        return Err(exit::usage("nothing to sweep: give a size, packet sizes and channel counts"));
    }
    let file = crate::config::load()?;
    if args.save && file.has_host(&host) {
        return Err(exit::usage(format!(
            "the config file has a [hosts.{host}] section already: edit it by hand, or sweep \
             without --save"
        )));
    }
    let prefs = file.prefs(&host);
    let scratch = tempfile_path()?;
    crate::demo::write_random_file(&scratch.0, size)
        .map_err(|e| exit::local_io(format!("{}: {e}", scratch.0.display())))?;
    let dest = if dir.is_empty() { TEST_FILE.to_owned() } else { format!("{dir}/{TEST_FILE}") };
    let options = CopyOptions { overwrite: Overwrite::Always, ..CopyOptions::default() };
    println!("sweep of {host}: {size} bytes of random data per run, to {dest}");
    println!(
        "{:>9} {:>11} {:>8} {:>14} {:>14} {:>8}",
        "transport", "packet size", "channels", "goodput Mbit/s", "retransmitted", "time s"
    );
    // Both transports, unless --transport (or the config file) holds one.
    let transports = match args.connect.transport(&prefs)? {
        TransportChoice::Auto => vec![Transport::Udp, Transport::Tcp],
        TransportChoice::Udp => vec![Transport::Udp],
        TransportChoice::Tcp => vec![Transport::Tcp],
    };
    let mut rows = Vec::new();
    for transport in transports {
        let connect =
            ConnectArgs { transport: Some(transport.name().to_owned()), ..args.connect.clone() };
        let sizes: Vec<Option<usize>> = match transport {
            Transport::Udp => args.packet_sizes.iter().copied().map(Some).collect(),
            Transport::Tcp => vec![None],
        };
        for &packet_size in &sizes {
            for &channels in &args.channels {
                let mut channel = sluice::session::default_channel_config();
                if let Some(size) = packet_size {
                    channel.packet_size = size;
                    channel
                        .validate()
                        .map_err(|e| exit::usage(format!("--packet-sizes {size}: {e}")))?;
                }
                let run = async {
                    let reached =
                        reach(&connect, &args.ssh, &host, &prefs, channel, Some(channels)).await?;
                    let (client, dest) = (&reached.client, reached.remote_path(&dest));
                    let started = std::time::Instant::now();
                    let sources = std::slice::from_ref(&scratch.0);
                    let report = client.upload(sources, &dest, &options, |_| {}).await?;
                    let seconds = started.elapsed().as_secs_f64();
                    let granted = client.channels().await?;
                    reached.close().await;
                    anyhow::Ok((report, seconds, granted))
                };
                let shown = packet_size.map_or("-".to_owned(), |p| p.to_string());
                let (report, seconds, granted) = match run.await {
                    Ok(done) => done,
                    // A transport the path does not carry (UDP blocked) is a row, not the end.
                    Err(e) if matches!(e.downcast_ref(), Some(SessionError::Network(_))) => {
                        println!("{:>9} {shown:>11} {channels:>8} failed: {e:#}", transport.name());
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let retransmitted = report.channel.as_ref().map(|c| {
                    c.retransmitted_pkts as f64 / (c.data_pkts + c.retransmitted_pkts).max(1) as f64
                });
                let row = Row {
                    transport,
                    packet_size,
                    channels: granted,
                    mbit: report.bytes as f64 * 8.0 / seconds / 1e6,
                    retransmitted: retransmitted.filter(|_| transport == Transport::Udp),
                    seconds,
                };
                println!(
                    "{:>9} {shown:>11} {:>8} {:>14.1} {:>14} {:>8.2}",
                    row.transport.name(),
                    row.channels,
                    row.mbit,
                    row.retransmitted.map_or("-".to_owned(), |r| format!("{:.2} %", r * 100.0)),
                    row.seconds
                );
                rows.push(row);
            }
        }
    }
    let best = rows
        .iter()
        .max_by(|a, b| a.mbit.total_cmp(&b.mbit))
        .ok_or_else(|| anyhow::anyhow!("no run finished"))?;
    // Over UDP the packet size; over TCP the transport itself (auto would try UDP first).
    let (setting, flags) = match best.packet_size {
        Some(size) => (format!("packet_size = {size}"), format!("--packet-size {size}")),
        None => ("transport = \"tcp\"".to_owned(), "--transport tcp".to_owned()),
    };
    let section =
        format!("[hosts.\"{}\"]\n{setting}\nchannels = {}\n", host.escape_default(), best.channels);
    println!(
        "best: {flags} --channels {} ({:.1} Mbit/s). For the config file:\n\n{section}",
        best.channels, best.mbit
    );
    if args.save {
        save(&host, &section)?;
    }
    Ok(())
}

/// Appends `section` to the config file, unless it has a section for `host` already.
#[allow(clippy::print_stdout)]
fn save(host: &str, section: &str) -> anyhow::Result<()> {
    let path = crate::config::path().ok_or_else(|| anyhow::anyhow!("no config directory here"))?;
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(exit::local_io(format!("{}: {e}", path.display()))),
    };
    let existing = ClientFile::parse(&text)
        .map_err(|why| exit::usage(format!("config file {}: {why}", path.display())))?;
    if existing.has_host(host) {
        return Err(exit::usage(format!(
            "{} has a [hosts.{host}] section already: edit it by hand",
            path.display()
        )));
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| exit::local_io(format!("{}: {e}", parent.display())))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| exit::local_io(format!("{}: {e}", path.display())))?;
    let gap = if text.is_empty() || text.ends_with("\n\n") { "" } else { "\n" };
    write!(f, "{gap}{section}").map_err(|e| exit::local_io(format!("{}: {e}", path.display())))?;
    println!("saved in {}", path.display());
    Ok(())
}

/// A scratch file for the test data, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tempfile_path() -> anyhow::Result<Scratch> {
    let mut name = [0u8; 8];
    aws_lc_rs::rand::fill(&mut name).map_err(|_| anyhow::anyhow!("no randomness"))?;
    let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Scratch(std::env::temp_dir().join(format!("sluice-sweep-{hex}.bin"))))
}
