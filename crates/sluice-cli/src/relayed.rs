//! `sluice cp --relay NAME,...`: an upload striped over relays and the direct path (FSP,
//! docs/relay.md). The relays come from `[relays.NAME]` sections of the config file; each is
//! reached like a host (its address, port, fingerprint and token file; its token from
//! `SLUICE_TOKEN_<NAME>`, else its token_file, else `SLUICE_TOKEN`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sluice::session::{
    Client, CopyOptions, RelayTarget, RelayedOptions, ServerRelay, SessionError, Strategy,
};
use sluice::settings::ServerFile;
use sluice_proto::config::ChannelConfig;

use crate::config::Prefs;
use crate::connect::{ConnectArgs, ask_if_unknown, reach};
use crate::cp::CpArgs;
use crate::exit;
use crate::show::{Mode, Show};

/// The flags of a relayed upload.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct RelayArgs {
    /// Stripe the upload over these relays (names of [relays.NAME] sections of the config
    /// file), then leave: the server collects from them. In a download, the server stripes
    /// over these of its relays (sections of its config file) and this end collects. One
    /// source: a file, or a tree (-r).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub(crate) relay: Vec<String>,
    /// Who takes which blocks: fcfs (whoever is ready: faster paths take more; the default),
    /// cyclic (round robin) or partitioned (equal contiguous shares).
    #[arg(long, value_name = "STRATEGY", requires = "relay")]
    relay_strategy: Option<String>,
    /// Block size of the striping (64KiB to 64MiB) [default: 4MiB].
    #[arg(long, value_name = "SIZE", requires = "relay")]
    relay_block: Option<String>,
    /// Whether the receiver (the server in an upload, this end in a download) takes blocks
    /// directly too: on (the default) or off (relays only; in an upload the direct path then
    /// carries only blocks the receiver asks for again).
    #[arg(long, value_name = "on|off", requires = "relay")]
    relay_direct: Option<String>,
    /// Count a block safe only once it is on this many relays (1 or 2), unless the server has
    /// it: with 2, a relay lost after the sender left loses nothing [default: 1].
    #[arg(long, value_name = "N", requires = "relay")]
    relay_copies: Option<u8>,
    /// Stay until the server has the verified file (report the total time too).
    #[arg(long, requires = "relay")]
    relay_wait: bool,
    /// Keep only relays whose round trip from the sending end is at most this many
    /// milliseconds (from here in an upload, from the server in a download).
    #[arg(long, value_name = "MS", requires = "relay")]
    relay_max_rtt_sender: Option<u64>,
    /// Keep only relays whose round trip from the receiving end is at most this many
    /// milliseconds (the server in an upload, here in a download; measured with a handshake
    /// to each; one that cannot be reached is left out too).
    #[arg(long, value_name = "MS", requires = "relay")]
    relay_max_rtt_receiver: Option<u64>,
}

/// Where a relayed upload goes.
pub(crate) struct Upload<'a> {
    pub(crate) host: &'a str,
    pub(crate) prefs: &'a Prefs,
    pub(crate) sources: &'a [PathBuf],
    pub(crate) dest: &'a str,
}

impl RelayArgs {
    fn options(&self, copy: &CopyOptions) -> anyhow::Result<RelayedOptions> {
        let mut options = RelayedOptions {
            compress: copy.compress,
            overwrite: copy.overwrite,
            preserve: copy.preserve,
            checksum: copy.checksum,
            wait: self.relay_wait,
            copies: self.relay_copies.unwrap_or(1),
            ..RelayedOptions::default()
        };
        if let Some(name) = &self.relay_strategy {
            options.strategy = Strategy::from_name(name).ok_or_else(|| {
                exit::usage(format!("--relay-strategy {name}: use fcfs, cyclic or partitioned"))
            })?;
        }
        if let Some(size) = &self.relay_block {
            options.block_bytes = sluice::units::parse_size(size)
                .map_err(|e| exit::usage(format!("--relay-block {size}: {e}")))?;
        }
        options.direct = match self.relay_direct.as_deref().unwrap_or("on") {
            "on" => true,
            "off" => false,
            other => return Err(exit::usage(format!("--relay-direct {other}: use on or off"))),
        };
        Ok(options)
    }
}

/// Checks the relay flags as a copy through relays would (a dry run checks them, then plans
/// as a copy).
pub(crate) fn check(args: &CpArgs, copy: &CopyOptions) -> anyhow::Result<()> {
    args.relays.options(copy).map(drop)
}

/// Connects to each named relay, keeps those within `--relay-max-rtt-sender`, and stripes
/// the one source over them and the direct path to the server.
pub(crate) async fn upload(
    args: &CpArgs,
    to: Upload<'_>,
    channel: ChannelConfig,
    copy: &CopyOptions,
    mode: Mode,
) -> anyhow::Result<()> {
    let flags = &args.relays;
    let options = flags.options(copy)?;
    let [source] = to.sources else {
        return Err(exit::usage("--relay carries one source per copy (a file, or a tree with -r)"));
    };
    if source.is_dir() && !args.recursive {
        return Err(exit::usage(format!("{} is a directory: copy it with -r", source.display())));
    }
    if !source.is_dir() && !source.is_file() {
        return Err(exit::usage(format!(
            "{}: --relay carries a regular file or, with -r, a directory",
            source.display()
        )));
    }
    let file = crate::config::load()?;
    let show = Show::new(mode, "upload");
    let mut configs = Vec::new();
    for name in &flags.relay {
        let section = file.relays.get(name).ok_or_else(|| {
            exit::usage(format!("--relay {name}: no [relays.{name}] section in the config file"))
        })?;
        let prefs = section.clone().over(&file.defaults);
        // The command's connection flags are the server's; a relay's come from its section
        // (its transport too: auto, UDP when it gets through, else TCP).
        let connect = ConnectArgs {
            port: None,
            token_file: None,
            known_hosts: args.connect.known_hosts.clone(),
            accept_new_host: false,
            fingerprint: None,
            transport: None,
            no_path_memory: args.connect.no_path_memory,
        };
        configs.push((name, connect.client_config(name, &prefs, channel.clone(), args.channels)?));
    }
    // Every relay and the server are reached at once: the setup takes the slowest handshake,
    // not their sum. A relay whose key is not known is asked about after, one at a time.
    let mut starting = tokio::task::JoinSet::new();
    for (i, (_, config)) in configs.iter().enumerate() {
        let config = config.clone();
        starting.spawn(async move { (i, Client::start(config).await) });
    }
    let started = async {
        let mut started: Vec<Option<_>> = configs.iter().map(|_| None).collect();
        // A start that panicked leaves its relay's `None`, not the others'.
        while let Some(joined) = starting.join_next().await {
            if let Ok((i, first)) = joined {
                started[i] = Some(first);
            }
        }
        started
    };
    let (started, reached) = tokio::join!(
        started,
        reach(&args.connect, &args.ssh, to.host, to.prefs, channel, args.channels)
    );
    let reached = match reached {
        Ok(reached) => reached,
        Err(e) => {
            for client in started.into_iter().flatten().flatten() {
                client.close().await;
            }
            return Err(e);
        }
    };
    let mut relays = Vec::new();
    for ((name, config), first) in configs.into_iter().zip(started) {
        let first = first.unwrap_or_else(|| Err(SessionError::Network("its start failed".into())));
        // A relay that is down is left out: the same command run again after a relay died
        // moves what it lost over the others.
        let client = async {
            let client = ask_if_unknown(config, first).await?;
            client.ready().await?;
            anyhow::Ok(client)
        };
        let client = match client.await {
            Ok(client) => client,
            Err(e) => {
                show.warning(&format!("relay {name} left out: {e:#}"));
                continue;
            }
        };
        let rtt = client.rtt();
        if let Some(max) = flags.relay_max_rtt_sender
            && rtt > Duration::from_millis(max)
        {
            show.warning(&format!(
                "relay {name} left out: its round trip from here is {} ms (--relay-max-rtt-sender {max})",
                rtt.as_millis()
            ));
            client.close().await;
            continue;
        }
        relays.push(RelayTarget { name: name.clone(), client });
    }
    // Ranked by what each accepts now (its spool's and this token's room), most first; one
    // without room for a block, or that refuses this token, is left out.
    let (ranked, left) = sluice::session::rank_relays(relays, options.block_bytes).await;
    for (relay, why) in left {
        show.warning(&format!("relay {} left out: {why}", relay.name));
        relay.client.close().await;
    }
    let mut relays = ranked;
    if relays.is_empty() && !options.direct {
        reached.close().await;
        return Err(exit::usage("no relay is left and --relay-direct is off: nowhere to send"));
    }
    if let Some(max) = flags.relay_max_rtt_receiver {
        relays = near_the_receiver(&reached.client, relays, max, &show).await?;
        if relays.is_empty() && !options.direct {
            reached.close().await;
            return Err(exit::usage("no relay is left and --relay-direct is off: nowhere to send"));
        }
    }
    let result = reached.client.upload_relayed(source, to.dest, &relays, &options).await;
    reached.close().await;
    for relay in relays {
        relay.client.close().await;
    }
    show.relayed(&result?, to.host);
    Ok(())
}

/// Where a relayed download comes from and goes.
pub(crate) struct Download<'a> {
    pub(crate) host: &'a str,
    pub(crate) prefs: &'a Prefs,
    pub(crate) sources: &'a [String],
    pub(crate) dest: &'a std::path::Path,
}

/// Asks the server to stripe the one source over its relays named by `--relay` (sections of
/// its own config file) and collects from them here, verified end to end.
pub(crate) async fn download(
    args: &CpArgs,
    from: Download<'_>,
    channel: ChannelConfig,
    copy: &CopyOptions,
    mode: Mode,
) -> anyhow::Result<()> {
    let flags = &args.relays;
    let [source] = from.sources else {
        return Err(exit::usage("--relay carries one source per copy (a file, or a tree with -r)"));
    };
    let options = flags.options(copy)?;
    let show = Show::new(mode, "download");
    let reached =
        reach(&args.connect, &args.ssh, from.host, from.prefs, channel, args.channels).await?;
    let what = sluice::session::RelayedDownload {
        path: reached.remote_path(source),
        recursive: args.recursive,
        relays: flags.relay.clone(),
        max_rtt_sender_ms: flags.relay_max_rtt_sender,
        max_rtt_receiver_ms: flags.relay_max_rtt_receiver,
        // A stopped, stalled or cut-off download keeps its record here (owner-only) beside
        // what it wrote: the same command run again moves only what is missing.
        keep: Some(crate::default_state_dir().join("relayed-downloads")),
    };
    // Ctrl-C stops the collection, keeping what it wrote for the same command run again.
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let result = reached.client.download_relayed(&what, from.dest, &options, interrupted).await;
    reached.close().await;
    let report = result?;
    for why in &report.left_out {
        show.warning(why);
    }
    let named: Vec<&str> = report.placed.iter().map(|p| p.name.as_str()).collect();
    for name in &flags.relay {
        if !named.contains(&name.as_str()) {
            show.warning(&format!("relay {name} left out by the server (see its log)"));
        }
    }
    show.relayed_download(&report);
    Ok(())
}

/// The relays whose round trip from the receiver (it measures them) is at most `max` ms; the
/// others are closed and left out, each with a warning.
async fn near_the_receiver(
    receiver: &sluice::session::Client,
    relays: Vec<RelayTarget>,
    max: u64,
    show: &Show,
) -> anyhow::Result<Vec<RelayTarget>> {
    let peers: Vec<_> = relays
        .iter()
        .map(|r| (r.client.server_address(), r.client.server_fingerprint().clone()))
        .collect();
    let rtts = receiver.relay_rtts(&peers).await?;
    let mut kept = Vec::new();
    for (relay, rtt) in relays.into_iter().zip(rtts) {
        let why = match rtt {
            Some(rtt) if rtt <= Duration::from_millis(max) => {
                kept.push(relay);
                continue;
            }
            Some(rtt) => format!(
                "its round trip from the server is {:.1} ms (--relay-max-rtt-receiver {max})",
                rtt.as_secs_f64() * 1000.0
            ),
            None => "the server could not reach it (no handshake with its fingerprint)".into(),
        };
        show.warning(&format!("relay {} left out: {why}", relay.name));
        relay.client.close().await;
    }
    Ok(kept)
}

/// The relays a server stripes relayed downloads over: its config file's `[relays.NAME]`
/// sections, each reached as a client's relay is (its address, port and token file; its
/// token from `SLUICE_TOKEN_<NAME>`, else its token_file), pinned by the fingerprint the
/// section must name (a server asks no one to accept a host).
pub(crate) fn server_relays(file: &ServerFile) -> anyhow::Result<Vec<ServerRelay>> {
    let mut relays = Vec::new();
    for (name, prefs) in &file.relays {
        if prefs.fingerprint.is_none() {
            return Err(exit::usage(format!(
                "[relays.{name}] of the server's config file: name its fingerprint (SHA256:...)"
            )));
        }
        // A server keeps no path memory in a user's cache directory.
        let connect = ConnectArgs {
            port: None,
            token_file: None,
            known_hosts: None,
            accept_new_host: false,
            fingerprint: None,
            transport: None,
            no_path_memory: true,
        };
        // The data channels a client's copy has (packet size, bursts, idle timeout).
        let channel = sluice::session::default_channel_config();
        let config = connect.client_config(name, prefs, channel, None).map_err(|e| {
            exit::usage(format!("[relays.{name}] of the server's config file: {e:#}"))
        })?;
        relays.push(ServerRelay { name: name.clone(), config });
    }
    Ok(relays)
}
