//! How a command reaches a server: the connection flags every client command shares, the
//! token, and the first-contact question.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use sluice::session::known_hosts::KnownHosts;
use sluice::session::{Client, ClientConfig, HostKeyError, SessionError, TrustPolicy};
use sluice_proto::config::ChannelConfig;

use crate::exit;

/// Flags that say how to reach and trust a server.
#[derive(Args, Debug, Clone)]
pub(crate) struct ConnectArgs {
    /// Server port.
    #[arg(short = 'P', long = "port", default_value_t = crate::DEFAULT_PORT)]
    pub(crate) port: u16,
    /// Read the access token from this file (else from the SLUICE_TOKEN environment variable).
    #[arg(long)]
    pub(crate) token_file: Option<PathBuf>,
    /// Known-hosts file holding pinned server fingerprints.
    #[arg(long)]
    pub(crate) known_hosts: Option<PathBuf>,
    /// On first contact, pin the server's fingerprint without asking.
    #[arg(long)]
    pub(crate) accept_new_host: bool,
    /// Require exactly this server fingerprint (SHA256:...).
    #[arg(long, conflicts_with = "accept_new_host")]
    pub(crate) fingerprint: Option<String>,
}

impl ConnectArgs {
    /// The client settings for `host` with these flags, `channel` and `channels`.
    pub(crate) fn client_config(
        &self,
        host: &str,
        channel: ChannelConfig,
        channels: Option<u32>,
    ) -> anyhow::Result<ClientConfig> {
        let trust = match (&self.fingerprint, self.accept_new_host) {
            (Some(fp), _) => TrustPolicy::Pinned(
                fp.parse().map_err(|e| exit::usage(format!("--fingerprint: {e}")))?,
            ),
            (None, true) => TrustPolicy::AcceptNew,
            (None, false) => TrustPolicy::KnownOnly,
        };
        let mut config = ClientConfig::new(
            resolve(host, self.port)?,
            host,
            self.read_token()?,
            self.known_hosts.clone().unwrap_or_else(crate::default_known_hosts),
            trust,
        );
        config.channel = channel;
        config.channels = channels;
        Ok(config)
    }

    fn read_token(&self) -> anyhow::Result<String> {
        let token = match &self.token_file {
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
}

fn resolve(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{host} has no address"))
}

/// Connects; on first contact with an unknown server and a person at the terminal, shows the
/// fingerprint and asks (as ssh does). A "yes" pins exactly the fingerprint shown.
pub(crate) async fn connect_asking(config: ClientConfig) -> anyhow::Result<Client> {
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
