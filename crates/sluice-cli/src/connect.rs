//! How a command reaches a server: the connection flags every client command shares, the
//! token, and the first-contact question.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use sluice::session::identity::check_private;
use sluice::session::known_hosts::KnownHosts;
use sluice::session::{
    Client, ClientConfig, HostKeyError, SessionError, TransportChoice, TrustPolicy,
};
use sluice_proto::config::ChannelConfig;

use crate::config::Prefs;
use crate::exit;
use crate::ssh::{SshArgs, SshServer};

/// Flags that say how to reach and trust a server.
#[derive(Args, Debug, Clone)]
pub(crate) struct ConnectArgs {
    /// Server port [default: 7733, or the config file's].
    #[arg(short = 'P', long = "port", env = "SLUICE_PORT")]
    pub(crate) port: Option<u16>,
    /// Read the access token from this file (else from the SLUICE_TOKEN environment variable).
    #[arg(long, env = "SLUICE_TOKEN_FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// Known-hosts file holding pinned server fingerprints.
    #[arg(long, env = "SLUICE_KNOWN_HOSTS")]
    pub(crate) known_hosts: Option<PathBuf>,
    /// On first contact, pin the server's fingerprint without asking.
    #[arg(long)]
    pub(crate) accept_new_host: bool,
    /// Require exactly this server fingerprint (SHA256:...).
    #[arg(long, conflicts_with = "accept_new_host", env = "SLUICE_FINGERPRINT")]
    pub(crate) fingerprint: Option<String>,
    /// The transport: auto (UDP when it gets through, else TCP: the default), udp, or tcp
    /// (the session tunnelled over TCP and the data on parallel TCP streams, for paths that
    /// block UDP; slower than UDP on long lossy paths, where a lost segment holds up its
    /// stream and a loss-based congestion control backs off at every loss).
    #[arg(long, value_name = "auto|udp|tcp", env = "SLUICE_TRANSPORT")]
    pub(crate) transport: Option<String>,
    /// Start every upload afresh: do not keep what each path delivered (in the cache
    /// directory's paths.json, e.g. ~/.cache/sluice) to start the next upload near that rate.
    #[arg(long, env = "SLUICE_NO_PATH_MEMORY")]
    pub(crate) no_path_memory: bool,
}

impl ConnectArgs {
    /// The client settings for `host` (as the command line names it: an alias of the config
    /// file, or a name or address) with these flags over the file's `prefs`, `channel` and
    /// `channels`. The known-hosts entry is keyed by the name as written.
    pub(crate) fn client_config(
        &self,
        host: &str,
        prefs: &Prefs,
        channel: ChannelConfig,
        channels: Option<u32>,
    ) -> anyhow::Result<ClientConfig> {
        let fingerprint = |fp: &String| {
            fp.parse()
                .map(TrustPolicy::Pinned)
                .map_err(|e| exit::usage(format!("fingerprint {fp}: {e}")))
        };
        let trust = match (&self.fingerprint, self.accept_new_host, &prefs.fingerprint) {
            (Some(fp), _, _) => fingerprint(fp)?,
            (None, true, _) => TrustPolicy::AcceptNew,
            (None, false, Some(fp)) => fingerprint(fp)?,
            (None, false, None) => TrustPolicy::KnownOnly,
        };
        let address = prefs.address.as_deref().unwrap_or(host);
        let port = self.port.or(prefs.port).unwrap_or(crate::DEFAULT_PORT);
        let known_hosts = self.known_hosts.as_ref().or(prefs.known_hosts.as_ref());
        let mut config = ClientConfig::new(
            resolve(address, port)?,
            host,
            read_token(self.token_file.as_ref(), host, prefs.token_file.as_ref())?,
            known_hosts.cloned().unwrap_or_else(crate::default_known_hosts),
            trust,
        );
        config.channel = channel;
        config.channels = channels;
        config.transport = self.transport(prefs)?;
        if !self.no_path_memory && prefs.path_memory != Some(false) {
            config.path_memory = crate::default_path_memory();
        }
        Ok(config)
    }

    /// The transport: the flag (or its variable), else the config file's, else auto.
    pub(crate) fn transport(&self, prefs: &Prefs) -> anyhow::Result<TransportChoice> {
        match self.transport.as_ref().or(prefs.transport.as_ref()) {
            Some(name) => {
                name.parse().map_err(|e: String| exit::usage(format!("--transport: {e}")))
            }
            None => Ok(TransportChoice::Auto),
        }
    }
}

/// The environment variable of `host`'s token: `SLUICE_TOKEN_` and the host's name (as the
/// command line writes it, an alias or an address) in capitals, every character other than a
/// letter or digit as `_` (`lab` is `SLUICE_TOKEN_LAB`, `10.0.0.2` is `SLUICE_TOKEN_10_0_0_2`).
pub(crate) fn token_variable(host: &str) -> String {
    let name: String = host
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' })
        .collect();
    format!("SLUICE_TOKEN_{name}")
}

/// `host`'s token: from `--token-file` (or `SLUICE_TOKEN_FILE`), else the host's variable
/// ([`token_variable`]), else the config file's `token_file` for the host, else
/// `SLUICE_TOKEN`. A copy between two servers names each server's token by its variable or
/// its config section.
fn read_token(
    flag_file: Option<&PathBuf>,
    host: &str,
    config_file: Option<&PathBuf>,
) -> anyhow::Result<String> {
    if flag_file.is_none()
        && let Ok(token) = std::env::var(token_variable(host))
    {
        return Ok(token.trim().to_string());
    }
    let token = match flag_file.or(config_file) {
        Some(path) => {
            // A secret others can read is refused, as ssh refuses such a private key.
            check_private(path, "token file").map_err(|e| {
                anyhow::Error::new(exit::Coded { code: exit::AUTH, message: e.to_string() })
            })?;
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read token file {}", path.display()))?
        }
        None => std::env::var("SLUICE_TOKEN").map_err(|_| {
            anyhow::Error::new(exit::Coded {
                code: exit::AUTH,
                message: format!(
                    "no access token for {host}: set {} or SLUICE_TOKEN, pass --token-file, or \
                     name a token_file in the config file",
                    token_variable(host)
                ),
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

/// A session with a server, and the one-shot server ssh started for it, if any.
pub(crate) struct Reached {
    /// The session.
    pub(crate) client: Client,
    ssh: Option<SshServer>,
}

impl Reached {
    /// `path` as the server names it (with `--ssh`, relative paths are under the remote home).
    pub(crate) fn remote_path(&self, path: &str) -> String {
        match &self.ssh {
            Some(server) => server.remote_path(path),
            None => path.to_owned(),
        }
    }

    /// Ends the session, and the ssh connection behind it.
    pub(crate) async fn close(self) {
        self.client.close().await;
        if let Some(server) = self.ssh {
            server.finish().await;
        }
    }
}

/// Connects to `host` with these settings: through a one-shot server started over ssh when
/// `ssh` asks for one, else to its daemon (asking about an unknown fingerprint).
pub(crate) async fn reach(
    connect: &ConnectArgs,
    ssh: &SshArgs,
    host: &str,
    prefs: &Prefs,
    channel: ChannelConfig,
    channels: Option<u32>,
) -> anyhow::Result<Reached> {
    if !ssh.ssh {
        let config = connect.client_config(host, prefs, channel, channels)?;
        return Ok(Reached { client: connect_asking(config).await?, ssh: None });
    }
    let server = ssh.start(host).await?;
    let known_hosts = connect.known_hosts.clone().unwrap_or_else(crate::default_known_hosts);
    let mut config = server.client_config(known_hosts)?;
    config.channel = channel;
    config.channels = channels;
    config.transport = connect.transport(prefs)?;
    Ok(Reached { client: Client::start(config).await?, ssh: Some(server) })
}

/// Connects ([`Client::start`]: the first request follows the token in the same round trip);
/// on first contact with an unknown server and a person at the terminal, shows the
/// fingerprint and asks (as ssh does). A "yes" pins exactly the fingerprint shown.
pub(crate) async fn connect_asking(config: ClientConfig) -> anyhow::Result<Client> {
    let first = Client::start(config.clone()).await;
    ask_if_unknown(config, first).await
}

/// [`connect_asking`] after its first [`Client::start`] with `config` ended as `first`: several
/// servers can be started at once and asked about after, one at a time.
pub(crate) async fn ask_if_unknown(
    config: ClientConfig,
    first: Result<Client, SessionError>,
) -> anyhow::Result<Client> {
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    match first {
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
            let client = Client::start(pinned).await?;
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
