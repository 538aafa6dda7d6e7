//! Exit codes, and printing an error for a person.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | other failure |
//! | 2 | usage error (bad arguments) |
//! | 3 | authentication or host-key failure |
//! | 4 | not found, refused (outside the served directory), or busy (try again later) |
//! | 5 | network failure (retry may help) |
//! | 6 | integrity failure (data did not verify) |
//! | 7 | local file error (e.g. disk full, permission) |
//! | 8 | partial success: some files were stored, others failed (named) |
//! | 9 | the server's file error (its disk full, permission), named as the server's |
//!
//! An error the server sent keeps its class: its file error is 9, not the local 7.

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
/// A file operation failed at the server.
pub(crate) const REMOTE_IO: u8 = 9;

/// The exit codes, for `--help`.
pub(crate) const EXIT_CODES: &str = "Exit codes:
  0  success
  1  other failure
  2  usage error (bad arguments)
  3  authentication or host-key failure
  4  not found, refused (outside the served directory, existing files without --overwrite),
     or busy (another transfer is writing that path; the server runs all it allows)
  5  network failure (a retry may help; an interrupted copy resumes)
  6  integrity failure (the data did not verify; nothing was stored)
  7  local file error (disk full, permission, not a directory)
  8  partial success (some files were stored, others failed; each is named)
  9  the server's file error (its disk full, permission; the message says the server)";

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
        REMOTE_IO => "remote_io",
        _ => "other",
    }
}

/// The name of `err`'s class, as `--json` reports it: [`kind_of`] its exit code, except that
/// busy (exit 4 like not found) is `busy`.
pub(crate) fn kind(err: &anyhow::Error) -> &'static str {
    let busy = err.chain().any(|c| matches!(c.downcast_ref(), Some(SessionError::Busy(_))));
    if busy { "busy" } else { kind_of(code_of(err)) }
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
                SessionError::NotFound(_) | SessionError::Refused(_) | SessionError::Busy(_) => {
                    NOT_FOUND
                }
                SessionError::Network(_) => NETWORK,
                SessionError::Integrity(_) => INTEGRITY,
                SessionError::Partial(_) => PARTIAL,
                SessionError::Io { .. } => LOCAL_IO,
                SessionError::PeerIo { .. } => REMOTE_IO,
                _ => OTHER,
            };
        }
    }
    OTHER
}

/// `err` and its causes, `: `-separated, each said once: a cause its error's message already
/// ends with (a file error says its reason, which is also its source) is not repeated.
pub(crate) fn describe(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let said = cause.to_string();
        if text.ends_with(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

/// Prints `err` with its causes and returns its exit code.
pub(crate) fn report(err: &anyhow::Error) -> ExitCode {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("sluice: {}", describe(err));
    }
    ExitCode::from(code_of(err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::session::Peer;

    #[test]
    fn a_file_error_says_its_reason_once() {
        let source = std::io::Error::from(std::io::ErrorKind::NotFound);
        let local = SessionError::Io { context: "reading src.bin".into(), source };
        let err = anyhow::Error::new(local).context("cannot upload");
        assert_eq!(describe(&err), "cannot upload: reading src.bin: entity not found");
        assert_eq!(code_of(&err), LOCAL_IO);
    }

    #[test]
    fn the_servers_file_error_names_the_server_and_is_not_a_local_one() {
        let message = "x.bin: No such file or directory (os error 2)".to_owned();
        let err = anyhow::Error::new(SessionError::PeerIo { peer: Peer::Server, message });
        assert_eq!(describe(&err), "the server: x.bin: No such file or directory (os error 2)");
        assert_eq!((code_of(&err), kind(&err)), (REMOTE_IO, "remote_io"));
    }

    #[test]
    fn a_busy_server_exits_as_refused_and_the_others_keep_their_kinds() {
        let err = anyhow::Error::new(SessionError::Busy("try again later".into()));
        assert_eq!((code_of(&err), kind(&err)), (NOT_FOUND, "busy"));
        let refused = anyhow::Error::new(SessionError::Refused("outside".into()));
        assert_eq!(kind(&refused), "not_found");
        let network = anyhow::Error::new(SessionError::Network("down".into()));
        assert_eq!((code_of(&network), kind(&network)), (NETWORK, "network"));
    }

    #[test]
    fn busy_is_exit_4_and_says_busy() {
        let message = "x.bin: another transfer is writing it; try again when that one ends";
        let err = anyhow::Error::new(SessionError::Busy(message.into()));
        assert_eq!((code_of(&err), kind(&err)), (NOT_FOUND, "busy"));
        assert_eq!(describe(&err), format!("busy: {message}"));
    }
}
