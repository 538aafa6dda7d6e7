//! Exit codes, and printing an error for a person.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | other failure |
//! | 2 | usage error (bad arguments) |
//! | 3 | authentication or host-key failure |
//! | 4 | not found, or refused (path outside the served directory) |
//! | 5 | network failure (retry may help) |
//! | 6 | integrity failure (data did not verify) |
//! | 7 | local file error (e.g. disk full, permission) |
//! | 8 | partial success: some files were stored, others failed (named) |

use std::process::ExitCode;

use sluice::session::SessionError;

/// Other failure.
pub(crate) const OTHER: u8 = 1;
/// Bad arguments.
pub(crate) const USAGE: u8 = 2;
/// Authentication or host key.
pub(crate) const AUTH: u8 = 3;
/// Not found or refused.
pub(crate) const NOT_FOUND: u8 = 4;
/// Network.
pub(crate) const NETWORK: u8 = 5;
/// Integrity.
pub(crate) const INTEGRITY: u8 = 6;
/// Local file.
pub(crate) const LOCAL_IO: u8 = 7;
/// Some files stored, others failed.
pub(crate) const PARTIAL: u8 = 8;

/// The exit codes, for `--help`.
pub(crate) const EXIT_CODES: &str = "Exit codes:
  0  success
  1  other failure
  2  usage error (bad arguments)
  3  authentication or host-key failure
  4  not found, or refused (outside the served directory, existing files without --overwrite)
  5  network failure (a retry may help; an interrupted copy resumes)
  6  integrity failure (the data did not verify; nothing was stored)
  7  local file error (disk full, permission, not a directory)
  8  partial success (some files were stored, others failed; each is named)";

/// An error that carries its exit code.
#[derive(Debug)]
pub(crate) struct Coded {
    /// The exit code.
    pub(crate) code: u8,
    /// What to tell the user.
    pub(crate) message: String,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// A usage error.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded { code: USAGE, message: message.into() })
}

/// A local file error.
pub(crate) fn local_io(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded { code: LOCAL_IO, message: message.into() })
}

/// A network failure.
pub(crate) fn network(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded { code: NETWORK, message: message.into() })
}

/// The name of an exit code's class, as `--json` reports it.
pub(crate) fn kind_of(code: u8) -> &'static str {
    match code {
        USAGE => "usage",
        AUTH => "auth",
        NOT_FOUND => "not_found",
        NETWORK => "network",
        INTEGRITY => "integrity",
        LOCAL_IO => "local_io",
        PARTIAL => "partial",
        _ => "other",
    }
}

/// The exit code of `err`.
pub(crate) fn code_of(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.code;
        }
        if let Some(s) = cause.downcast_ref::<SessionError>() {
            return match s {
                SessionError::Auth(_) | SessionError::HostKey(_) => AUTH,
                SessionError::NotFound(_) | SessionError::Refused(_) => NOT_FOUND,
                SessionError::Network(_) => NETWORK,
                SessionError::Integrity(_) => INTEGRITY,
                SessionError::Partial(_) => PARTIAL,
                SessionError::Io { .. } => LOCAL_IO,
                SessionError::Busy(_) => NETWORK,
                _ => OTHER,
            };
        }
    }
    OTHER
}

/// Prints `err` with its causes and returns its exit code.
pub(crate) fn report(err: &anyhow::Error) -> ExitCode {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("sluice: {err:#}");
    }
    ExitCode::from(code_of(err))
}
