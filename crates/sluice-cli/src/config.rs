//! The client's configuration file: host aliases and defaults, read from
//! `~/.config/sluice/config.toml` or the file `SLUICE_CONFIG` names.
//!
//! ```toml
//! [defaults]                 # every command, every host
//! channels = 4
//! compress = 1
//! limit_rate = "800Mbit"
//! policy = "fair"
//! transport = "auto"         # or "udp", or "tcp" where UDP is blocked
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
//! `SLUICE_COMPRESS`, `SLUICE_POLICY`, `SLUICE_TRANSPORT`), then the host's section, then `[defaults]`. Secrets never
//! come from this file: the token comes from a token file or `SLUICE_TOKEN`.

use std::path::{Path, PathBuf};

pub(crate) use sluice::settings::{ClientFile, Prefs};

use crate::exit;

/// Reads the configuration: `SLUICE_CONFIG`'s file (which must exist), else the default file
/// if there is one.
pub(crate) fn load() -> anyhow::Result<ClientFile> {
    match std::env::var_os("SLUICE_CONFIG") {
        Some(path) => read(Path::new(&path), true),
        None => match default_path() {
            Some(path) => read(&path, false),
            None => Ok(ClientFile::default()),
        },
    }
}

/// Where the configuration is read from: `SLUICE_CONFIG`, else the default file.
pub(crate) fn path() -> Option<PathBuf> {
    std::env::var_os("SLUICE_CONFIG").map(PathBuf::from).or_else(default_path)
}

fn read(path: &Path, must_exist: bool) -> anyhow::Result<ClientFile> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
            return Ok(ClientFile::default());
        }
        Err(e) => return Err(exit::usage(format!("config file {}: {e}", path.display()))),
    };
    ClientFile::parse(&text)
        .map_err(|why| exit::usage(format!("config file {}: {why}", path.display())))
}

/// `~/.config/sluice/config.toml` (the platform's configuration directory).
fn default_path() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "sluice").map(|d| d.config_dir().join("config.toml"))
}
