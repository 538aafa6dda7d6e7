//! The configuration files' contents: the client's (host aliases and defaults) and the
//! server's. Reading them from disk, and what their settings mean, is the command line's
//! (`sluice-cli`); the structure and its checks are here, where the fuzz target
//! `config_text` reaches them.
//!
//! ```toml
//! [defaults]                 # every command, every host
//! channels = 4
//! compress = 1
//! limit_rate = "800Mbit"
//!
//! [hosts.lab]                # `sluice cp lab:data/x ./`
//! address = "198.18.0.2"     # what `lab` stands for (else the name itself)
//! port = 7733
//! token_file = "/home/me/.config/sluice/lab.token"
//! fingerprint = "SHA256:..."
//! ```
//!
//! Secrets never come from these files: a `token` key is refused with the way to give one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// Settings a host section or `[defaults]` may give.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prefs {
    /// What the alias stands for (host sections only).
    pub address: Option<String>,
    /// Server port.
    pub port: Option<u16>,
    /// File holding the access token.
    pub token_file: Option<PathBuf>,
    /// Known-hosts file.
    pub known_hosts: Option<PathBuf>,
    /// Pinned server fingerprint.
    pub fingerprint: Option<String>,
    /// Data channels per transfer.
    pub channels: Option<u32>,
    /// The most a transfer may send, with its unit.
    pub limit_rate: Option<String>,
    /// zstd level.
    pub compress: Option<i32>,
    /// Rate policy: fair, low or fixed.
    pub policy: Option<String>,
    /// Largest UDP datagram.
    pub packet_size: Option<usize>,
    /// Transport: auto, udp or tcp.
    pub transport: Option<String>,
    /// Whether uploads start from what the path delivered last time (`false` is
    /// `--no-path-memory`).
    pub path_memory: Option<bool>,
}

impl Prefs {
    /// `self`, with what it does not say taken from `base`.
    pub fn over(self, base: &Prefs) -> Prefs {
        Prefs {
            address: self.address,
            port: self.port.or(base.port),
            token_file: self.token_file.or_else(|| base.token_file.clone()),
            known_hosts: self.known_hosts.or_else(|| base.known_hosts.clone()),
            fingerprint: self.fingerprint.or_else(|| base.fingerprint.clone()),
            channels: self.channels.or(base.channels),
            limit_rate: self.limit_rate.or_else(|| base.limit_rate.clone()),
            compress: self.compress.or(base.compress),
            policy: self.policy.or_else(|| base.policy.clone()),
            packet_size: self.packet_size.or(base.packet_size),
            transport: self.transport.or_else(|| base.transport.clone()),
            path_memory: self.path_memory.or(base.path_memory),
        }
    }
}

/// The file's contents.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    /// `[defaults]`.
    #[serde(default)]
    pub defaults: Prefs,
    /// `[hosts.NAME]` sections.
    #[serde(default)]
    pub hosts: BTreeMap<String, Prefs>,
    /// `[relays.NAME]` sections: relays a relayed upload may stripe over (`cp --relay NAME`),
    /// each with its address, port, fingerprint and token file, as a host has.
    #[serde(default)]
    pub relays: BTreeMap<String, Prefs>,
}

impl ClientFile {
    /// Whether the file has a section for `host`.
    pub fn has_host(&self, host: &str) -> bool {
        self.hosts.contains_key(host)
    }

    /// Parses a configuration; the error names what is wrong (and where).
    pub fn parse(text: &str) -> Result<ClientFile, String> {
        let file: ClientFile = toml::from_str(text).map_err(|e| {
            let e = e.to_string();
            if e.contains("unknown field `token`") {
                "a token does not go in the config file: name a token_file, or set SLUICE_TOKEN"
                    .to_owned()
            } else {
                e.trim().to_owned()
            }
        })?;
        if file.defaults.address.is_some() {
            return Err("[defaults] cannot have an address: that belongs to a [hosts.NAME]".into());
        }
        Ok(file)
    }

    /// The settings for `host` as written on the command line: its section over `[defaults]`
    /// (just the defaults when it is not an alias).
    pub fn prefs(&self, host: &str) -> Prefs {
        match self.hosts.get(host) {
            Some(section) => section.clone().over(&self.defaults),
            None => self.defaults.clone(),
        }
    }
}

/// The server's config file (`sluice serve --config`): keys named like the flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    /// `--root`.
    pub root: Option<PathBuf>,
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--state-dir`.
    pub state_dir: Option<PathBuf>,
    /// `--tokens`.
    pub tokens: Option<PathBuf>,
    /// `--max-channels`.
    pub max_channels: Option<u32>,
    /// `--metrics`.
    pub metrics: Option<SocketAddr>,
    /// `--third-party` (`off`, `pull`, `push`, `both`).
    pub third_party: Option<String>,
    /// `--third-party-dial`: fingerprints, addresses or networks.
    pub third_party_dial: Option<Vec<String>>,
    /// `--web`.
    pub web: Option<SocketAddr>,
    /// `--web-cert`.
    pub web_cert: Option<PathBuf>,
    /// `--web-key`.
    pub web_key: Option<PathBuf>,
    /// `--web-transport` (`on` or `off`).
    pub web_transport: Option<String>,
    /// `--tcp` (`on` or `off`).
    pub tcp: Option<String>,
    /// `false` is `--no-path-memory`.
    pub path_memory: Option<bool>,
    /// `--spool`: be a relay too, keeping sealed blocks here.
    pub spool: Option<PathBuf>,
    /// `--spool-max` (a size, e.g. `"200GB"`).
    pub spool_max: Option<String>,
    /// `--spool-expiry-hours`.
    pub spool_expiry_hours: Option<u64>,
    /// `[relays.NAME]` sections: relays this server stripes relayed downloads over when a
    /// client names them (`sluice cp --relay NAME host:path ...`), each with its address,
    /// port, fingerprint (required: a server asks no one) and token file, as a client's relay.
    #[serde(default)]
    pub relays: BTreeMap<String, Prefs>,
}

impl ServerFile {
    /// Parses a server configuration; the error names what is wrong (and where).
    pub fn parse(text: &str) -> Result<ServerFile, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_section_wins_over_the_defaults_and_others_get_the_defaults() {
        let file = ClientFile::parse(
            r#"
            [defaults]
            channels = 4
            compress = 1
            [hosts.lab]
            address = "198.18.0.2"
            port = 7000
            compress = 3
            "#,
        )
        .unwrap();
        let lab = file.prefs("lab");
        assert_eq!(lab.address.as_deref(), Some("198.18.0.2"));
        assert_eq!((lab.port, lab.channels, lab.compress), (Some(7000), Some(4), Some(3)));
        let other = file.prefs("elsewhere");
        assert_eq!((other.address, other.port, other.compress), (None, None, Some(1)));
    }

    #[test]
    fn secrets_unknown_keys_and_bad_values_are_refused_by_name() {
        let err = ClientFile::parse("[hosts.a]\ntoken = \"x\"").unwrap_err();
        assert!(err.contains("token_file"), "{err}");
        let err = ClientFile::parse("[defaults]\nchanels = 2").unwrap_err();
        assert!(err.contains("chanels"), "{err}");
        let err = ClientFile::parse("[defaults]\nport = \"x\"").unwrap_err();
        assert!(err.contains("port"), "{err}");
        let err = ClientFile::parse("[defaults]\naddress = \"h\"").unwrap_err();
        assert!(err.contains("[hosts.NAME]"), "{err}");
    }
}
