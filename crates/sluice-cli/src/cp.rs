//! `sluice cp`: copy files and trees to or from a server, scp style.

use std::path::PathBuf;

use clap::Args;
use sluice::session::{
    CopyOptions, Links, Overwrite, SessionError, TransferReport, Transport, TransportChoice,
};
use sluice_proto::cc::CcKind;

use crate::config::Prefs;
use crate::connect::{ConnectArgs, reach};
use crate::exit;
use crate::remote::{Location, parse_location};
use crate::show::{self, Mode, Show};
use crate::ssh::SshArgs;
use sluice::units::parse_rate;

/// Arguments of `sluice cp`.
#[derive(Args, Debug, Clone)]
pub(crate) struct CpArgs {
    /// Sources then the destination: local paths or `host:path` (`[v6addr]:path`). One side
    /// remote copies to or from that server; both sides remote (on two servers) is a
    /// third-party copy: the destination server reads from the source server directly, and
    /// only control messages and progress pass through this machine. An existing destination
    /// directory receives the sources under their own names; otherwise a single source takes
    /// the destination's name.
    #[arg(required = true, num_args = 2.., value_name = "PATH")]
    paths: Vec<String>,
    /// Copy directories with everything in them.
    #[arg(short = 'r', long)]
    pub(crate) recursive: bool,
    /// What to do with files that exist at the destination: never (keep them), always,
    /// if-newer (source modified later) or if-different (size or time differ; with
    /// --checksum, the content). Without it, existing files stop the copy before anything
    /// moves.
    #[arg(long, value_name = "POLICY")]
    overwrite: Option<String>,
    /// With --overwrite if-different, compare files by BLAKE3 instead of size and time
    /// (both ends read their files once more).
    #[arg(long)]
    checksum: bool,
    /// Show what would be copied and copy nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Keep permission bits (not setuid, setgid or sticky) and modification times.
    #[arg(short = 'p', long)]
    preserve: bool,
    /// Compress with zstd at LEVEL (1 to 19; 1 when only --compress is given): the sending
    /// end compresses each 256 KiB piece, and sends the pieces that do not shrink as they are
    /// (after one that does not, it tries less and less often), so data that does not compress
    /// costs almost nothing.
    #[arg(
        long,
        value_name = "LEVEL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1",
        env = "SLUICE_COMPRESS",
        value_parser = clap::value_parser!(i32).range(1..=19)
    )]
    compress: Option<i32>,
    /// Symbolic links inside directories: copy (recreate the link, the default), follow
    /// (copy what it points to) or skip.
    #[arg(long, value_name = "POLICY", default_value = "copy")]
    links: String,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    #[command(flatten)]
    pub(crate) ssh: SshArgs,
    /// Congestion control: adaptive (default), udt, low, or fixed (needs --rate-mbit).
    #[arg(long, default_value = "adaptive")]
    cc: String,
    /// Sending rate of `--cc fixed`, and a cap for the others, in Mbit/s (the same as
    /// --limit-rate NMbit).
    #[arg(long, conflicts_with = "limit_rate")]
    rate_mbit: Option<f64>,
    /// The most the transfer may send, with its unit: bits (800Mbit, 1.5Gbit) or bytes per
    /// second (100MB, 64MiB).
    #[arg(long, value_name = "RATE", env = "SLUICE_LIMIT_RATE")]
    limit_rate: Option<String>,
    /// Never send slower than this (same units as --limit-rate), whatever the path's
    /// congestion says: for links with a guaranteed share.
    #[arg(long, value_name = "RATE")]
    min_rate: Option<String>,
    /// Rate policy: fair (share the path like one TCP flow, the default), low (yield to other
    /// traffic as soon as a queue builds: a background copy that takes what is left), or
    /// fixed (blast at --limit-rate whatever the path says and repair from loss lists:
    /// RBUDP/Tsunami, for dedicated links).
    #[arg(long, value_name = "POLICY", env = "SLUICE_POLICY")]
    policy: Option<String>,
    /// Largest UDP datagram in bytes (the default, 1472, fits a 1500-byte MTU over IPv4 and is
    /// lowered to fit the path toward the server, 1452 over IPv6; up to 65000
    /// where the path carries jumbo frames).
    #[arg(long, env = "SLUICE_PACKET_SIZE")]
    packet_size: Option<usize>,
    /// Data channels per transfer (default: one per core, as many as the server allows); over
    /// TCP the streams, all carrying data (default: 4 at first, more while they help, up to
    /// 16).
    #[arg(
        long,
        visible_alias = "streams",
        env = "SLUICE_CHANNELS",
        value_parser = clap::value_parser!(u32).range(1..=64)
    )]
    pub(crate) channels: Option<u32>,
    /// Print nothing but errors.
    #[arg(short, long)]
    quiet: bool,
    /// Report on stdout as JSON lines (start, progress at most once a second, file_done,
    /// warning, summary, error), for scripts and GUIs; the schema is docs/json-events.md.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(crate) relays: crate::relayed::RelayArgs,
}

/// How many times `auto` takes up a transfer the path stopped carrying ([`copy`]).
const MID_WAY_RETRIES: u32 = 1;

/// Tells once that the session went over TCP because UDP did not get through.
fn tell_transport(show: &Show, client: &sluice::session::Client) {
    if let Some(notice) = client.transport_notice() {
        show.warning(notice);
    }
}

/// Which way a copy goes.
enum Direction {
    /// Remote sources into a local destination.
    Download { sources: Vec<String>, dest: PathBuf },
    /// Local sources into a remote destination.
    Upload { sources: Vec<PathBuf>, dest: String },
    /// One server's sources into another server's destination (a third-party transfer: the
    /// data goes from the source server to the destination directly).
    Between { source_host: String, sources: Vec<String>, dest: String },
}

impl Direction {
    /// Renames the remote side's paths with `rename`.
    fn map_remote(&mut self, rename: impl Fn(&str) -> String) {
        match self {
            Direction::Download { sources, .. } => {
                for source in sources {
                    *source = rename(source);
                }
            }
            Direction::Upload { dest, .. } => *dest = rename(dest),
            Direction::Between { .. } => {}
        }
    }
}

/// Reads the sources and destination: one host, one side remote.
fn direction(paths: &[String]) -> anyhow::Result<(String, Direction)> {
    let (dst, srcs) =
        paths.split_last().ok_or_else(|| exit::usage("a source and a destination are needed"))?;
    let dst = parse_location(dst).map_err(exit::usage)?;
    let srcs = srcs
        .iter()
        .map(|s| parse_location(s).map_err(exit::usage))
        .collect::<anyhow::Result<Vec<_>>>()?;
    match dst {
        Location::Local(dest) => {
            let mut host = None;
            let mut sources = Vec::new();
            for src in srcs {
                let Location::Remote { host: h, path } = src else {
                    return Err(exit::usage("neither side is remote; one must be host:path"));
                };
                if host.as_ref().is_some_and(|known| known != &h) {
                    return Err(exit::usage("all remote sources must be on one host"));
                }
                host = Some(h);
                sources.push(if path.is_empty() { ".".to_owned() } else { path });
            }
            let host = host.ok_or_else(|| exit::usage("no source"))?;
            Ok((host, Direction::Download { sources, dest: PathBuf::from(dest) }))
        }
        Location::Remote { host, path } => {
            if srcs.iter().all(|s| matches!(s, Location::Remote { .. })) {
                return between(srcs, host, path);
            }
            let mut sources = Vec::new();
            for src in srcs {
                match src {
                    Location::Local(local) => sources.push(PathBuf::from(local)),
                    Location::Remote { .. } => {
                        return Err(exit::usage(
                            "some sources are local and some remote: copy them in two commands",
                        ));
                    }
                }
            }
            Ok((host, Direction::Upload { sources, dest: path }))
        }
    }
}

/// A copy from one server to another: every source on one host, the destination on another.
fn between(srcs: Vec<Location>, host: String, dest: String) -> anyhow::Result<(String, Direction)> {
    let mut source_host: Option<String> = None;
    let mut sources = Vec::new();
    for src in srcs {
        let Location::Remote { host: h, path } = src else { continue };
        if source_host.as_ref().is_some_and(|known| known != &h) {
            return Err(exit::usage("all remote sources must be on one host"));
        }
        source_host = Some(h);
        sources.push(if path.is_empty() { ".".to_owned() } else { path });
    }
    let source_host = source_host.ok_or_else(|| exit::usage("no source"))?;
    if source_host == host {
        return Err(exit::usage(format!(
            "the source and the destination are both on {host}: a copy within one server is not \
             a transfer (use the server's own cp)"
        )));
    }
    Ok((host, Direction::Between { source_host, sources, dest }))
}

/// The copy options from the flags.
fn copy_options(args: &CpArgs) -> anyhow::Result<CopyOptions> {
    let overwrite = match &args.overwrite {
        None => Overwrite::Refuse,
        Some(name) => Overwrite::from_name(name).ok_or_else(|| {
            exit::usage(format!("--overwrite {name}: use never, always, if-newer or if-different"))
        })?,
    };
    let links = Links::from_name(&args.links)
        .ok_or_else(|| exit::usage(format!("--links {}: use copy, follow or skip", args.links)))?;
    if args.checksum && overwrite != Overwrite::IfDifferent {
        return Err(exit::usage("--checksum goes with --overwrite if-different"));
    }
    Ok(CopyOptions {
        recursive: args.recursive,
        links,
        overwrite,
        checksum: args.checksum,
        preserve: args.preserve,
        dry_run: args.dry_run,
        compress: args.compress,
    })
}

impl CpArgs {
    /// These arguments with what they leave open taken from the config file's `prefs`.
    fn with_prefs(mut self, prefs: &Prefs) -> CpArgs {
        self.channels = self.channels.or(prefs.channels);
        self.limit_rate = self.limit_rate.or_else(|| prefs.limit_rate.clone());
        self.compress = self.compress.or(prefs.compress);
        self.policy = self.policy.or_else(|| prefs.policy.clone());
        self.packet_size = self.packet_size.or(prefs.packet_size);
        self
    }
}

/// Runs one copy; with `--json`, a failure is an `error` line too.
pub(crate) async fn run(args: CpArgs) -> anyhow::Result<()> {
    let mode = Mode::choose(args.json, args.quiet);
    let result = copy(&args, mode).await;
    if let (Err(err), Mode::Json) = (&result, mode) {
        let code = exit::code_of(err);
        show::json_error(code, exit::kind(err), &exit::describe(err));
    }
    result
}

async fn copy(args: &CpArgs, mode: Mode) -> anyhow::Result<()> {
    let (host, mut direction) = direction(&args.paths)?;
    let prefs = crate::config::load()?.prefs(&host);
    let args = &args.clone().with_prefs(&prefs);
    let options = copy_options(args)?;
    let mut channel = sluice::session::default_channel_config();
    channel.cc = CcKind::from_name(&args.cc)
        .ok_or_else(|| exit::usage(format!("--cc {}: use adaptive, udt, low or fixed", args.cc)))?;
    if let Some(rate) = args.rate_mbit {
        if rate.is_nan() || rate <= 0.0 {
            return Err(exit::usage("--rate-mbit must be positive"));
        }
        channel.rate_bps = (rate * 1e6) as u64;
    }
    if let Some(rate) = &args.limit_rate {
        channel.rate_bps =
            parse_rate(rate).map_err(|e| exit::usage(format!("--limit-rate: {e}")))?;
    }
    if let Some(rate) = &args.min_rate {
        channel.min_rate_bps =
            parse_rate(rate).map_err(|e| exit::usage(format!("--min-rate: {e}")))?;
    }
    match args.policy.as_deref().unwrap_or("fair") {
        "fair" => {}
        "fixed" if channel.rate_bps == 0 => {
            return Err(exit::usage("--policy fixed sends at --limit-rate: give one"));
        }
        "fixed" => channel.cc = CcKind::Fixed,
        "low" => channel.cc = CcKind::Low,
        other => return Err(exit::usage(format!("--policy {other}: use fair, low or fixed"))),
    }
    if let Some(size) = args.packet_size {
        channel.packet_size = size;
    }
    channel.validate().map_err(|e| exit::usage(e.to_string()))?;
    if let Direction::Upload { sources, .. } = &direction {
        for source in sources {
            if !source.exists() {
                return Err(exit::local_io(format!(
                    "{}: no such file or directory",
                    source.display()
                )));
            }
        }
    }

    // A dry run through relays plans as a copy does (the same decisions on what exists) and
    // contacts no relay: it moves nothing, so there is nothing to stripe.
    let dry_relayed = options.dry_run && !args.relays.relay.is_empty();
    if dry_relayed {
        if matches!(direction, Direction::Between { .. }) {
            return Err(exit::usage(
                "--relay stripes an upload or a download, not a copy between servers",
            ));
        }
        crate::relayed::check(args, &options)?;
    }
    if !args.relays.relay.is_empty() && !dry_relayed {
        return match &direction {
            Direction::Upload { sources, dest } => {
                let upload = crate::relayed::Upload { host: &host, prefs: &prefs, sources, dest };
                crate::relayed::upload(args, upload, channel, &options, mode).await
            }
            Direction::Download { sources, dest } => {
                let from = crate::relayed::Download { host: &host, prefs: &prefs, sources, dest };
                crate::relayed::download(args, from, channel, &options, mode).await
            }
            Direction::Between { .. } => Err(exit::usage(
                "--relay stripes an upload or a download, not a copy between servers",
            )),
        };
    }
    if let Direction::Between { source_host, sources, dest } = &direction {
        if args.ssh.ssh {
            return Err(exit::usage("--ssh cannot reach two servers: copy between daemons"));
        }
        let ends = crate::between::Ends {
            connect: &args.connect,
            source_host,
            dest_host: &host,
            channel,
            channels: args.channels,
        };
        return crate::between::copy(ends, sources, dest, &options, mode).await;
    }
    let started = std::time::Instant::now();
    let mut reached =
        reach(&args.connect, &args.ssh, &host, &prefs, channel.clone(), args.channels).await?;
    direction.map_remote(|p| reached.remote_path(p));
    let way = match &direction {
        Direction::Download { .. } => "download",
        Direction::Upload { .. } | Direction::Between { .. } => "upload",
    };
    let show = Show::new(mode, way);
    tell_transport(&show, &reached.client);
    if dry_relayed {
        show.warning(&format!(
            "dry run: what would move is planned as for a copy; the relays ({}) are not contacted",
            args.relays.relay.join(", ")
        ));
    }
    // With `auto`, a transfer over UDP that the path stops carrying (a firewall rule added
    // mid-way) is taken up again on a new session, over TCP if UDP no longer gets through,
    // resuming from what arrived.
    let mut retries = match args.connect.transport(&prefs)? {
        TransportChoice::Auto if !args.ssh.ssh => MID_WAY_RETRIES,
        _ => 0,
    };
    let report: TransferReport = loop {
        let client = &reached.client;
        let result = match &direction {
            Direction::Download { sources, dest } => {
                client.download_observed(sources, dest, &options, show.clone()).await
            }
            Direction::Upload { sources, dest } => {
                client.upload_observed(sources, dest, &options, show.clone()).await
            }
            Direction::Between { .. } => unreachable!("a copy between servers returned above"),
        };
        let again = match &result {
            Err(SessionError::Network(why)) if client.transport() == Transport::Udp => Some(why),
            _ => None,
        };
        match again {
            Some(why) if retries > 0 => {
                retries -= 1;
                // The session got through but its data channels did not: UDP to the data ports
                // is blocked, so the new session goes over TCP at once.
                let blocked = client.udp_data_blocked();
                let (connect, how) = match blocked {
                    true => (
                        ConnectArgs { transport: Some("tcp".into()), ..args.connect.clone() },
                        "over TCP: UDP reaches the server's port but not its data ports",
                    ),
                    false => (args.connect.clone(), "over TCP if UDP no longer gets through"),
                };
                show.warning(&format!(
                    "the transfer stopped ({why}): taking it up again on a new session ({how}), \
                     from what arrived"
                ));
                reached.close().await;
                let why = why.clone();
                reached = reach(&connect, &args.ssh, &host, &prefs, channel.clone(), args.channels)
                    .await
                    .map_err(|e| {
                        e.context(format!("the transfer stopped ({why}) and a new session failed"))
                    })?;
                tell_transport(&show, &reached.client);
            }
            _ => break result?,
        }
    };
    reached.close().await;
    let secs = started.elapsed().as_secs_f64();
    if options.dry_run && mode != Mode::Json {
        show::print_planned(&report);
    }
    show.finished(&report, options.dry_run, secs);
    Ok(())
}
