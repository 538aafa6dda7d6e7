//! `sluice cp`: copy a file to or from a server, scp style.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use sluice::session::known_hosts::KnownHosts;
use sluice::session::{
    Client, ClientConfig, HostKeyError, SessionError, TransferReport, TrustPolicy,
};
use sluice_proto::cc::CcKind;

use crate::exit;
use crate::remote::{Location, parse_location};

/// Arguments of `sluice cp`.
#[derive(Args, Debug)]
pub(crate) struct CpArgs {
    /// Source: a local path or `host:path` (`[v6addr]:path`).
    src: String,
    /// Destination: a local path or `host:path`; a directory keeps the source's file name.
    dst: String,
    /// Server port.
    #[arg(short = 'P', long = "port", default_value_t = crate::DEFAULT_PORT)]
    port: u16,
    /// Read the access token from this file (else from the SLUICE_TOKEN environment variable).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Known-hosts file holding pinned server fingerprints.
    #[arg(long)]
    known_hosts: Option<PathBuf>,
    /// On first contact, pin the server's fingerprint without asking.
    #[arg(long)]
    accept_new_host: bool,
    /// Require exactly this server fingerprint (SHA256:...).
    #[arg(long, conflicts_with = "accept_new_host")]
    fingerprint: Option<String>,
    /// Congestion control: adaptive (default), udt, or fixed (needs --rate-mbit).
    #[arg(long, default_value = "adaptive")]
    cc: String,
    /// Sending rate of `--cc fixed`, and a cap for the others, in Mbit/s.
    #[arg(long)]
    rate_mbit: Option<f64>,
    /// Largest UDP datagram in bytes (the default, 1452, fits a 1500-byte MTU; up to 65000
    /// where the path carries jumbo frames).
    #[arg(long)]
    packet_size: Option<usize>,
    /// Data channels per transfer (default: one per core, as many as the server allows).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    channels: Option<u32>,
    /// Print nothing but errors.
    #[arg(short, long)]
    quiet: bool,
}

fn read_token(args: &CpArgs) -> anyhow::Result<String> {
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read token file {}", path.display()))?,
        None => std::env::var("SLUICE_TOKEN").map_err(|_| {
            anyhow::Error::new(exit::Coded {
                code: exit::AUTH,
                message: "no access token: set SLUICE_TOKEN or pass --token-file".into(),
            })
        })?,
    };
    Ok(token.trim().to_string())
}

fn resolve(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{host} has no address"))
}

fn file_name_of(path: &str) -> Option<&str> {
    path.rsplit('/').find(|s| !s.is_empty())
}

/// Connects; on first contact with an unknown server and a person at the terminal, shows the
/// fingerprint and asks (as ssh does). A "yes" pins exactly the fingerprint shown.
async fn connect_asking(config: ClientConfig) -> anyhow::Result<Client> {
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    match Client::connect(config.clone()).await {
        Err(SessionError::HostKey(HostKeyError::Unknown { host, file, presented }))
            if interactive && config.trust == TrustPolicy::KnownOnly =>
        {
            let question = format!(
                "The authenticity of {host} can't be established.\n\
                 Its fingerprint is {presented}.\n\
                 Pin it in {} and continue (yes/no)? ",
                file.display()
            );
            if !ask_yes(&question)? {
                return Err(anyhow::Error::new(exit::Coded {
                    code: exit::AUTH,
                    message: format!("{host} not trusted: nothing pinned, nothing copied"),
                }));
            }
            let pinned = ClientConfig { trust: TrustPolicy::Pinned(presented.clone()), ..config };
            let client = Client::connect(pinned).await?;
            KnownHosts::append(&file, &host, &presented)?;
            Ok(client)
        }
        other => Ok(other?),
    }
}

fn ask_yes(question: &str) -> anyhow::Result<bool> {
    use std::io::Write;
    let mut err = std::io::stderr();
    err.write_all(question.as_bytes())?;
    err.flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(answer.trim().eq_ignore_ascii_case("yes"))
}

/// Runs one copy.
pub(crate) async fn run(args: CpArgs) -> anyhow::Result<()> {
    let src = parse_location(&args.src).map_err(exit::usage)?;
    let dst = parse_location(&args.dst).map_err(exit::usage)?;
    let mut channel = sluice::session::default_channel_config();
    channel.cc = CcKind::from_name(&args.cc)
        .ok_or_else(|| exit::usage(format!("--cc {}: use adaptive, udt or fixed", args.cc)))?;
    if let Some(rate) = args.rate_mbit {
        if rate.is_nan() || rate <= 0.0 {
            return Err(exit::usage("--rate-mbit must be positive"));
        }
        channel.rate_bps = (rate * 1e6) as u64;
    }
    if let Some(size) = args.packet_size {
        channel.packet_size = size;
    }
    channel.validate().map_err(|e| exit::usage(e.to_string()))?;

    let (host, remote_path, local, download) = match (src, dst) {
        (Location::Remote { host, path }, Location::Local(local)) => (host, path, local, true),
        (Location::Local(local), Location::Remote { host, path }) => (host, path, local, false),
        (Location::Remote { .. }, Location::Remote { .. }) => {
            return Err(exit::usage("both sides are remote; exactly one must be host:path"));
        }
        (Location::Local(_), Location::Local(_)) => {
            return Err(exit::usage("neither side is remote; one must be host:path"));
        }
    };
    let trust = match (&args.fingerprint, args.accept_new_host) {
        (Some(fp), _) => {
            TrustPolicy::Pinned(fp.parse().map_err(|e| exit::usage(format!("--fingerprint: {e}")))?)
        }
        (None, true) => TrustPolicy::AcceptNew,
        (None, false) => TrustPolicy::KnownOnly,
    };
    let token = read_token(&args)?;
    let server = resolve(&host, args.port)?;
    let config = ClientConfig {
        server,
        host: host.clone(),
        token,
        known_hosts: args.known_hosts.clone().unwrap_or_else(crate::default_known_hosts),
        trust,
        channel,
        channels: args.channels,
    };

    let started = std::time::Instant::now();
    let client = connect_asking(config).await?;
    let report: TransferReport = if download {
        let mut target = PathBuf::from(&local);
        if target.is_dir() {
            let name = file_name_of(&remote_path)
                .ok_or_else(|| exit::usage(format!("{remote_path:?} has no file name")))?;
            target.push(name);
        }
        client.get(&remote_path, &target, |_| {}).await?
    } else {
        let local_path = Path::new(&local);
        if !local_path.is_file() {
            return Err(exit::local_io(format!("{local}: not a readable file")));
        }
        let mut remote = remote_path.clone();
        if remote.is_empty() || remote.ends_with('/') {
            let name = file_name_of(&local)
                .ok_or_else(|| exit::usage(format!("{local:?} has no file name")))?;
            remote.push_str(name);
        }
        client.put(local_path, &remote, |_| {}).await?
    };
    client.close().await;
    let secs = started.elapsed().as_secs_f64();
    if !args.quiet {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "sluice: {} bytes in {:.2} s, {:.1} Mbit/s, BLAKE3 verified",
                report.bytes,
                secs,
                report.bytes as f64 * 8.0 / secs.max(1e-9) / 1e6
            );
        }
    }
    Ok(())
}
