//! The client's configuration file: host aliases and defaults, read from
//! `~/.config/sluice/config.toml` or the file `SLUICE_CONFIG` names.
//!
//! ```toml
//! [defaults]                 # every command, every host
//! channels = 4
//! compress = 1
//! limit_rate = "800Mbit"
//! policy = "fair"
//! known_hosts = "/home/me/.config/sluice/known_hosts"
//!
//! [hosts.lab]                # `sluice cp lab:data/x ./`
//! address = "198.18.0.2"     # what `lab` stands for (else the name itself)
//! port = 7733
//! token_file = "/home/me/.config/sluice/lab.token"
//! fingerprint = "SHA256:..."
//! compress = 3               # any default, for this host only
//! ```
//!
//! Precedence: a flag, then its environment variable (`SLUICE_PORT`, `SLUICE_TOKEN_FILE`,
//! `SLUICE_KNOWN_HOSTS`, `SLUICE_FINGERPRINT`, `SLUICE_CHANNELS`, `SLUICE_LIMIT_RATE`,
//! `SLUICE_COMPRESS`, `SLUICE_POLICY`), then the host's section, then `[defaults]`. Secrets never
//! come from this file: the token comes from a token file or `SLUICE_TOKEN`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::exit;

/// Settings a host section or `[defaults]` may give.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Prefs {
    /// What the alias stands for (host sections only).
    pub(crate) address: Option<String>,
    pub(crate) port: Option<u16>,
    pub(crate) token_file: Option<PathBuf>,
    pub(crate) known_hosts: Option<PathBuf>,
    pub(crate) fingerprint: Option<String>,
    pub(crate) channels: Option<u32>,
    pub(crate) limit_rate: Option<String>,
    pub(crate) compress: Option<i32>,
    pub(crate) policy: Option<String>,
    pub(crate) packet_size: Option<usize>,
}

impl Prefs {
    /// `self`, with what it does not say taken from `base`.
    fn over(self, base: &Prefs) -> Prefs {
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
        }
    }
}

/// The file's contents.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientFile {
    #[serde(default)]
    defaults: Prefs,
    #[serde(default)]
    hosts: BTreeMap<String, Prefs>,
}

impl ClientFile {
    /// Reads the configuration: `SLUICE_CONFIG`'s file (which must exist), else the default
    /// file if there is one.
    pub(crate) fn load() -> anyhow::Result<ClientFile> {
        match std::env::var_os("SLUICE_CONFIG") {
            Some(path) => Self::read(Path::new(&path), true),
            None => match default_path() {
                Some(path) => Self::read(&path, false),
                None => Ok(ClientFile::default()),
            },
        }
    }

    /// Where the configuration is read from: `SLUICE_CONFIG`, else the default file.
    pub(crate) fn path() -> Option<PathBuf> {
        std::env::var_os("SLUICE_CONFIG").map(PathBuf::from).or_else(default_path)
    }

    /// Whether the file has a section for `host`.
    pub(crate) fn has_host(&self, host: &str) -> bool {
        self.hosts.contains_key(host)
    }

    fn read(path: &Path, must_exist: bool) -> anyhow::Result<ClientFile> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
                return Ok(ClientFile::default());
            }
            Err(e) => return Err(exit::usage(format!("config file {}: {e}", path.display()))),
        };
        Self::parse(&text)
            .map_err(|why| exit::usage(format!("config file {}: {why}", path.display())))
    }

    /// Parses a configuration; the error names what is wrong (and where).
    pub(crate) fn parse(text: &str) -> Result<ClientFile, String> {
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
    pub(crate) fn prefs(&self, host: &str) -> Prefs {
        match self.hosts.get(host) {
            Some(section) => section.clone().over(&self.defaults),
            None => self.defaults.clone(),
        }
    }
}

/// `~/.config/sluice/config.toml` (the platform's configuration directory).
fn default_path() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "sluice").map(|d| d.config_dir().join("config.toml"))
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
