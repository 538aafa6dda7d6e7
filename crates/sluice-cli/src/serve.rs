//! `sluice serve`: serve one directory to many clients.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use sluice::session::{Server, ServerConfig};

use crate::exit;

/// Arguments of `sluice serve`. Each flag may come from its environment variable, else from
/// the server's config file (`--config`, keys named like the flags: `root`, `listen`,
/// `state_dir`, `tokens`, `max_channels`).
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// Directory to serve; clients cannot read or write outside it.
    #[arg(long, env = "SLUICE_ROOT")]
    root: Option<PathBuf>,
    /// Address and port to listen on [default: 0.0.0.0:7733].
    #[arg(long, env = "SLUICE_LISTEN")]
    listen: Option<SocketAddr>,
    /// Where the server keeps its identity key and certificate (created on first start).
    #[arg(long, env = "SLUICE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// File of accepted client tokens, one per line (must not be readable by others).
    #[arg(long, env = "SLUICE_TOKENS")]
    tokens: Option<PathBuf>,
    /// The most data channels one transfer may use (default: one per core).
    #[arg(long, env = "SLUICE_MAX_CHANNELS", value_parser = clap::value_parser!(u32).range(1..=64))]
    max_channels: Option<u32>,
    /// Serve the counters (sessions, transfers, bytes, retransmissions, errors) in the
    /// Prometheus text format over HTTP on this address, at /metrics.
    #[arg(long, env = "SLUICE_METRICS", value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Append a per-transfer event log here: each data channel's counters (rate, RTT, queue,
    /// packets sent, retransmitted and lost, or received, duplicated and NAKed) four times a
    /// second, as JSON lines naming the session and request (MCDTP's network log).
    #[arg(long, env = "SLUICE_EVENT_LOG", value_name = "FILE")]
    pub(crate) event_log: Option<PathBuf>,
    /// The server's config file (TOML; flags and their environment variables win over it).
    #[arg(long, env = "SLUICE_SERVER_CONFIG")]
    config: Option<PathBuf>,
}

/// The server's config file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerFile {
    root: Option<PathBuf>,
    listen: Option<SocketAddr>,
    state_dir: Option<PathBuf>,
    tokens: Option<PathBuf>,
    max_channels: Option<u32>,
    metrics: Option<SocketAddr>,
}

impl ServerFile {
    fn load(path: Option<&PathBuf>) -> anyhow::Result<ServerFile> {
        let Some(path) = path else { return Ok(ServerFile::default()) };
        let named = |why: String| exit::usage(format!("config file {}: {why}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| named(e.to_string()))?;
        toml::from_str(&text).map_err(|e| named(e.to_string().trim().to_owned()))
    }
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let file = ServerFile::load(args.config.as_ref())?;
    let root = args.root.or(file.root).ok_or_else(|| {
        exit::usage("no directory to serve: pass --root, set SLUICE_ROOT, or put root in --config")
    })?;
    if !root.is_dir() {
        return Err(exit::usage(format!("--root {}: not a directory", root.display())));
    }
    let tokens = args.tokens.or(file.tokens).ok_or_else(|| {
        exit::usage("no tokens file: pass --tokens, set SLUICE_TOKENS, or put tokens in --config")
    })?;
    let max_channels = args.max_channels.or(file.max_channels);
    if max_channels.is_some_and(|n| !(1..=64).contains(&n)) {
        return Err(exit::usage("max_channels must be between 1 and 64"));
    }
    let config = ServerConfig {
        root,
        listen: args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], crate::DEFAULT_PORT))),
        state_dir: args.state_dir.or(file.state_dir).unwrap_or_else(crate::default_state_dir),
        tokens_file: tokens,
        idle_timeout: std::time::Duration::from_secs(30),
        max_channels,
        digest_timeout: None,
        fault: None,
    };
    let metrics_addr = args.metrics.or(file.metrics);
    let server = Server::bind(config).context("cannot start the server")?;
    let metrics = match metrics_addr {
        Some(addr) => Some(crate::metrics_http::bind(addr, server.metrics()).await?),
        None => None,
    };
    #[allow(clippy::print_stdout)]
    {
        println!(
            "sluice: serving on {} with fingerprint {}",
            server.local_addr(),
            server.fingerprint()
        );
        if let Some((addr, _)) = &metrics {
            println!("sluice: metrics on http://{addr}/metrics");
        }
    }
    let serving = server.run(shutdown_signal());
    match metrics {
        Some((_, exporter)) => {
            tokio::select! {
                result = serving => result?,
                () = exporter => {}
            }
        }
        None => serving.await?,
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
