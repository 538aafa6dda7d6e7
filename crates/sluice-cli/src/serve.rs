//! `sluice serve`: serve one directory to many clients.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use sluice::session::{Server, ServerConfig};

use crate::exit;

/// Arguments of `sluice serve`.
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// Directory to serve; clients cannot read or write outside it.
    #[arg(long)]
    root: PathBuf,
    /// Address and port to listen on.
    #[arg(long, default_value_t = SocketAddr::from(([0, 0, 0, 0], crate::DEFAULT_PORT)))]
    listen: SocketAddr,
    /// Where the server keeps its identity key and certificate (created on first start).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// File of accepted client tokens, one per line (must not be readable by others).
    #[arg(long)]
    tokens: PathBuf,
    /// The most data channels one transfer may use (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    max_channels: Option<u32>,
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let root = args.root;
    if !root.is_dir() {
        return Err(exit::usage(format!("--root {}: not a directory", root.display())));
    }
    let config = ServerConfig {
        root,
        listen: args.listen,
        state_dir: args.state_dir.unwrap_or_else(crate::default_state_dir),
        tokens_file: args.tokens,
        idle_timeout: std::time::Duration::from_secs(30),
        max_channels: args.max_channels,
        digest_timeout: None,
        fault: None,
    };
    let server = Server::bind(config).context("cannot start the server")?;
    #[allow(clippy::print_stdout)]
    {
        println!(
            "sluice: serving on {} with fingerprint {}",
            server.local_addr(),
            server.fingerprint()
        );
    }
    server.run(shutdown_signal()).await?;
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
