//! Exit codes, and printing an error for a person.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | other failure |
//! | 2 | usage error (bad arguments) |
//! | 3 | authentication or host-key failure |
//! | 4 | not found, refused (path outside the served directory), or server busy |
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
/// Not found, refused, or server busy.
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
  4  not found, or refused (outside the served directory, existing files without --overwrite),
     or server busy (at its limit of sessions or transfers; a connection it turns away is
     tried again for up to 30 s first)
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

/// The name of `err`'s class, as `--json` reports it: that of its exit code, but `busy` for a
/// busy server (which exits as refused).
pub(crate) fn kind_of(err: &anyhow::Error) -> &'static str {
    let busy = err.chain().any(|c| matches!(c.downcast_ref(), Some(SessionError::Busy(_))));
    if busy {
        return "busy";
    }
    match code_of(err) {
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
                // A busy server refused this time; the message says to try again later.
                SessionError::NotFound(_) | SessionError::Refused(_) | SessionError::Busy(_) => {
                    NOT_FOUND
                }
                SessionError::Network(_) => NETWORK,
                SessionError::Integrity(_) => INTEGRITY,
                SessionError::Partial(_) => PARTIAL,
                SessionError::Io { .. } => LOCAL_IO,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_server_exits_as_refused_and_says_busy() {
        let err = anyhow::Error::new(SessionError::Busy("try again later".into()));
        assert_eq!(code_of(&err), NOT_FOUND);
        assert_eq!(kind_of(&err), "busy");
        assert!(format!("{err:#}").starts_with("server busy: "), "{err:#}");
        let refused = anyhow::Error::new(SessionError::Refused("outside".into()));
        assert_eq!(kind_of(&refused), "not_found");
        let network = anyhow::Error::new(SessionError::Network("down".into()));
        assert_eq!((code_of(&network), kind_of(&network)), (NETWORK, "network"));
    }
}
