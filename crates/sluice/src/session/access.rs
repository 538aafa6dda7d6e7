//! What a token may do, and the checks every request makes with it, whichever front end it came
//! in by: the QUIC server's requests and the web app's (`sluice serve --web`) both take a token
//! to an [`Access`] through the server's own [`Gate`] (the token file's [`TokenSet`]), and hold
//! each request to its rights ([`Access::require`]) and its root ([`Access::resolve`], then
//! every file step beneath that root through [`Confined`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::SessionError;
use super::copy::{add_checksums, walk_error};
use super::messages::{FileKind, StatInfo};
use super::metrics::{Active, Metrics};
use super::server::{MAX_TRANSFERS, TRANSFER_WAIT};
use super::tokens::{Grant, Rights, TokenSet};
use crate::files::{self, Confined, PathError};
use crate::tree::{Listing, Outgoing, ReceiveOptions, WalkError, WalkOptions, walk};

/// What one token may do, resolved against the served directory.
#[derive(Debug)]
pub struct Access {
    pub(crate) rights: Rights,
    /// The directory the token sees (canonical, under the served one).
    pub(crate) root: PathBuf,
    /// Its transfers at once, when limited.
    pub(crate) transfers: Option<(u32, Arc<Semaphore>)>,
    /// The most each transfer may send, in bits per second.
    pub(crate) rate_bps: Option<u64>,
}

/// A place among the token's transfers at once, when it has a limit: taken at once or `busy`
/// (the client's own transfers hold them; waiting would not free one).
pub(crate) fn token_place(access: &Access) -> Result<Option<OwnedSemaphorePermit>, SessionError> {
    let Some((n, places)) = &access.transfers else { return Ok(None) };
    places.clone().try_acquire_owned().map(Some).map_err(|_| {
        SessionError::Busy(format!(
            "this token's {n} transfers at once are all running; try again when one ends"
        ))
    })
}

/// A place among the server's [`MAX_TRANSFERS`]: at once, or waited for in turn up to
/// [`TRANSFER_WAIT`], then `busy`. The flag says whether it waited.
pub(crate) async fn server_place(
    places: &Arc<Semaphore>,
) -> Result<(OwnedSemaphorePermit, bool), SessionError> {
    if let Ok(place) = places.clone().try_acquire_owned() {
        return Ok((place, false));
    }
    tracing::info!("{MAX_TRANSFERS} transfers are running: this one waits for one to end");
    match tokio::time::timeout(TRANSFER_WAIT, places.clone().acquire_owned()).await {
        Ok(Ok(place)) => Ok((place, true)),
        _ => Err(SessionError::Busy(format!(
            "{MAX_TRANSFERS} transfers are running and none ended within {} s; try again later",
            TRANSFER_WAIT.as_secs()
        ))),
    }
}

impl Access {
    /// `grant` with its root resolved under `served`: the directory must exist there, and
    /// stay there once symbolic links are followed.
    /// `number` counts the file's tokens from 1 (an error must not show the token).
    pub(crate) fn resolve_grant(
        served: &Path,
        grant: &Grant,
        number: usize,
    ) -> Result<Access, SessionError> {
        let root = match &grant.root {
            None => served.to_owned(),
            Some(sub) => {
                let bad = |why: String| {
                    SessionError::Config(format!(
                        "token {number} of the token file: root {sub:?} {why}"
                    ))
                };
                let path = std::fs::canonicalize(served.join(sub))
                    .map_err(|e| bad(format!("cannot be opened: {e}")))?;
                if !path.starts_with(served) {
                    return Err(bad("leads outside the served directory".into()));
                }
                if !path.is_dir() {
                    return Err(bad("is not a directory".into()));
                }
                path
            }
        };
        Ok(Access {
            rights: grant.rights,
            root,
            transfers: grant.transfers.map(|n| (n, Arc::new(Semaphore::new(n as usize)))),
            rate_bps: grant.rate_bps,
        })
    }

    /// The most each of the token's transfers may send, bits per second, when limited.
    pub fn rate_bps(&self) -> Option<u64> {
        self.rate_bps
    }

    /// What the token may do.
    pub fn rights(&self) -> Rights {
        self.rights
    }

    /// The directory the token sees (canonical). Errors shown to a client never name it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Refuses unless the token has `right`; `what` finishes "this token may not ...".
    pub fn require(&self, right: fn(&Rights) -> bool, what: &str) -> Result<(), SessionError> {
        if right(&self.rights) {
            Ok(())
        } else {
            Err(SessionError::Refused(format!("this token may not {what}")))
        }
    }

    /// A client's path (relative, `/`-separated; empty or `.` for the root) resolved beneath
    /// the token's root: escapes are `refused`, a missing parent `not-found`.
    pub fn resolve(&self, requested: &str) -> Result<PathBuf, SessionError> {
        resolve(&self.root, if requested.is_empty() { "." } else { requested })
    }

    /// Like [`Access::resolve`], but a link at the last component is the link itself, not
    /// where it leads: for steps on the name (rename, delete).
    pub fn resolve_no_follow(&self, requested: &str) -> Result<PathBuf, SessionError> {
        let trimmed = requested.trim_end_matches('/');
        let (parent, name) = match trimmed.rsplit_once('/') {
            Some((parent, name)) => (parent, name),
            None => ("", trimmed),
        };
        if name.is_empty() || name == "." || name == ".." {
            // The root itself, `..` (refused by `resolve`), or an empty path.
            return self.resolve(requested);
        }
        self.resolve(parent).map(|p| p.join(name))
    }

    /// File steps beneath the token's root (`openat2(RESOLVE_BENEATH)`).
    pub fn confined(&self, requested: &str) -> Result<Confined, SessionError> {
        Confined::new(Some(&self.root)).map_err(|e| open_error(requested, e))
    }

    /// `sluice stat`: kind, size and time of `requested` (right `list` or `read`).
    pub fn stat(&self, requested: &str) -> Result<StatInfo, SessionError> {
        self.require(|r| r.list || r.read, "look at files (it has neither list nor read)")?;
        let path = self.resolve(requested)?;
        let meta =
            self.confined(requested)?.metadata(&path).map_err(|e| open_error(requested, e))?;
        let kind = if meta.is_file() {
            FileKind::File
        } else if meta.is_dir() {
            FileKind::Directory
        } else {
            FileKind::Other
        };
        Ok(StatInfo { size: meta.len(), mtime: mtime_secs(&meta), kind })
    }

    /// A download's sources (right `read`): the manifest of the `requested` paths (empty is
    /// the root), walked beneath the root by `options` (links followed only within it), with
    /// each file's BLAKE3 when `checksum`. A missing source is named as it was asked for,
    /// never by the server's own path. Blocks: the walk reads the tree.
    pub fn outgoing(
        &self,
        requested: &[String],
        mut options: WalkOptions,
        checksum: bool,
    ) -> Result<Outgoing, SessionError> {
        self.require(|r| r.read, "read (download)")?;
        options.confine = Some(self.root.clone());
        let sources = requested
            .iter()
            .map(|p| {
                let source = self.resolve(p)?;
                source.symlink_metadata().map_err(|e| open_error(p, e))?;
                Ok(source)
            })
            .collect::<Result<Vec<_>, SessionError>>()?;
        let mut outgoing = walk(&sources, &options).map_err(walk_error)?;
        if checksum {
            add_checksums(&mut outgoing)?;
        }
        Ok(outgoing)
    }

    /// An upload's destination (right `write`): `requested` (empty is the root) resolved
    /// beneath the root, with `options` confined to it (nothing it writes may lead elsewhere).
    /// Blocks: the resolution looks at the tree.
    pub fn incoming(
        &self,
        requested: &str,
        options: &mut ReceiveOptions,
    ) -> Result<PathBuf, SessionError> {
        self.require(|r| r.write, "write (upload)")?;
        options.confine = Some(self.root.clone());
        self.resolve(requested)
    }

    /// `sluice ls`: one level of `requested` (right `list`).
    pub fn list(&self, requested: &str) -> Result<Listing, SessionError> {
        self.require(|r| r.list, "list directories")?;
        let path = self.resolve(requested)?;
        // Errors name the requested path, never the server's own layout.
        let fs = self.confined(requested)?;
        crate::tree::list(&fs, &path).map_err(|e| match e {
            WalkError::Io(_, source) => open_error(requested, source),
            other => walk_error(other),
        })
    }
}

/// The server's tokens and what each may do: the one place a presented token becomes an
/// [`Access`]; and the server's accounts of transfers, which every front end's transfers go
/// through ([`Gate::transfer`]).
#[derive(Debug, Clone)]
pub struct Gate {
    pub(crate) tokens: TokenSet,
    /// What each token may do, in the order of `tokens`.
    pub(crate) access: Vec<Arc<Access>>,
    /// The server's places for transfers ([`MAX_TRANSFERS`]).
    pub(crate) transfers: Arc<Semaphore>,
    /// The server's counters.
    pub(crate) metrics: Arc<Metrics>,
}

/// A place among a token's transfers and the server's ([`Gate::place`]), held while it lives.
#[derive(Debug)]
pub struct Place {
    _token: Option<OwnedSemaphorePermit>,
    _server: OwnedSemaphorePermit,
}

/// A transfer of another front end than the QUIC sessions (the web app's download or upload
/// request) while it runs: it holds a place among its token's transfers and the server's, counts
/// as running in the server's [`Metrics`], and adds the file bytes it moved ([`Running::moved`])
/// to them when it ends (dropped), finished or not. Its pacing is its driver's, to the token's
/// [`Access::rate_bps`].
#[derive(Debug)]
pub struct Running {
    _place: Place,
    _active: Active,
    metrics: Arc<Metrics>,
    sending: bool,
    moved: u64,
}

impl Running {
    /// Counts `bytes` more file bytes moved.
    pub fn moved(&mut self, bytes: u64) {
        self.moved = self.moved.saturating_add(bytes);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // No data channel: its bytes went over TCP, so no packets are counted.
        self.metrics.moved(self.sending, self.moved, 0, 0);
    }
}

impl Gate {
    /// The gate of `tokens` over the served directory `served` (each grant's root resolved
    /// under it, as [`super::Server::bind`] does).
    pub fn new(served: &Path, tokens: TokenSet) -> Result<Gate, SessionError> {
        let served = std::fs::canonicalize(served).map_err(|e| {
            SessionError::io(format!("the served directory {}", served.display()), e)
        })?;
        let access = tokens
            .grants()
            .iter()
            .enumerate()
            .map(|(i, grant)| Access::resolve_grant(&served, grant, i + 1).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let transfers = Arc::new(Semaphore::new(MAX_TRANSFERS));
        Ok(Gate { tokens, access, transfers, metrics: Arc::default() })
    }

    /// Starts a transfer of `access`'s token (`sending`: the server sends, a download): a place
    /// among the token's transfers (`busy` at once when they are all running) and one among the
    /// server's (waited for up to [`TRANSFER_WAIT`]), counted in the server's metrics as a QUIC
    /// transfer is.
    pub async fn transfer(&self, access: &Access, sending: bool) -> Result<Running, SessionError> {
        Ok(Running {
            _place: self.place(access).await?,
            _active: self.metrics.transfer(sending),
            metrics: self.metrics.clone(),
            sending,
            moved: 0,
        })
    }

    /// A place as [`Gate::transfer`] takes, for work as heavy as a transfer that moves no file
    /// (hashing one for a client): not counted as a transfer.
    pub async fn place(&self, access: &Access) -> Result<Place, SessionError> {
        let token = token_place(access)?;
        let (server, _) = server_place(&self.transfers).await?;
        Ok(Place { _token: token, _server: server })
    }

    /// The server's counters.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// What `token` may do, or `None` when it is not accepted (compared in constant time).
    pub fn admit(&self, token: &str) -> Option<Arc<Access>> {
        self.tokens.verify(token).and_then(|i| self.access.get(i).cloned())
    }
}

/// Resolves a peer's path under the root; escapes are `refused`, a missing parent `not-found`.
pub(crate) fn resolve(root: &Path, requested: &str) -> Result<PathBuf, SessionError> {
    files::resolve_under_root(root, requested).map_err(|e| match e {
        PathError::Io(_, source) => open_error(requested, source),
        other => SessionError::Refused(other.to_string()),
    })
}

/// `not-found` for a missing file, `io` otherwise; names the requested path, never the server's
/// own layout.
pub(crate) fn open_error(requested: &str, e: std::io::Error) -> SessionError {
    if e.kind() == std::io::ErrorKind::NotFound {
        SessionError::NotFound(requested.to_owned())
    } else {
        SessionError::io(requested.to_owned(), e)
    }
}

/// Seconds since the epoch of a file's modification (negative before it).
pub(crate) fn mtime_secs(meta: &std::fs::Metadata) -> i64 {
    use std::time::SystemTime;
    let Ok(modified) = meta.modified() else { return 0 };
    match modified.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    }
}
