//! A receiving transfer's hold on the paths it writes: a partial file belongs to the transfer
//! writing it, and a second transfer to the same path is refused as busy instead of taking
//! the first's partial file over.
//!
//! Before a transfer looks for a partial file of a path to resume, or creates one, it claims
//! the path: it makes `.<name>.sluice-lock` beside it, a hard link to a lock file on which it
//! holds an exclusive `flock` for as long as it lives. All its names link to the same file, so
//! a transfer of any number of files holds one descriptor per file system it writes to. A name
//! is made with `link` (or `O_EXCL`), which fails when it exists: of two transfers that claim
//! one path at once, one gets it. A transfer that finds the name taken tries its lock:
//!
//! - held: a live transfer, in this process or another, writes that path. The claim is
//!   refused (busy); the other transfer's files are not touched.
//! - free: the transfer that made it is gone (a crash or a kill: the kernel released its
//!   lock). Holding that lock, and with the name still on that file, the transfer removes the
//!   stale name and claims again; what the dead transfer left (its partial file and record)
//!   is then its own to resume or remove.
//!
//! A name is only removed by whoever holds its file's lock. A transfer's first lock file is
//! created under its name before it is locked, so a prober can take the lock first and take the
//! name for stale; the maker therefore checks, once it holds the lock, that the name is still on
//! its file, and claims again if not. The names go when the transfer ends, after its commit.
//!
//! Something else at the name (a link, a directory, a file with other contents) is not a lock
//! of ours: the claim is refused and it stays. Refusing is the choice over waiting: a transfer
//! could wait hours for another, and the busy error tells the user at once.
//!
//! Limits: the lock is advisory (only sluice's transfers honour it). On a file system without
//! hard links each claim needs a lock file of its own; past [`MAX_LOCK_FILES`] of them a
//! transfer writes the rest of its files unclaimed, as before claims existed.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;
use rustix::io::Errno;

use crate::files::{Confined, parent_dir, side_name};

/// The suffix of a claim's name.
pub(crate) const LOCK_SUFFIX: &str = ".sluice-lock";
/// What a lock file holds (or nothing, when its maker stopped before writing it).
const LOCK_TEXT: &[u8] = b"sluice: a transfer writes the file named before this suffix\n";
/// Lock files one transfer holds at most (one per file system it writes to, unless links fail).
pub(crate) const MAX_LOCK_FILES: usize = 32;
/// Claims of one path tried before giving up as busy (each lost to another claimer's race).
const ATTEMPTS: usize = 4;

/// Why a path could not be claimed.
#[derive(Debug)]
pub(crate) enum ClaimError {
    /// Another live transfer writes it.
    Busy,
    /// Something that is not a lock of ours is at the claim's name (the name is given).
    Foreign(PathBuf),
    /// The file system said no.
    Io(io::Error),
}

/// A lock file this transfer holds.
#[derive(Debug)]
struct LockFile {
    /// Locked exclusively while this transfer lives (closing it releases the lock).
    _file: File,
    /// One of its names that this transfer made (new names are links to it).
    path: PathBuf,
    dev: u64,
    ino: u64,
}

/// The paths one transfer has claimed. Dropped, it removes its names and releases its locks.
#[derive(Debug)]
pub(crate) struct Claims {
    fs: Confined,
    /// The names made, removed on drop (before the locks go).
    names: Vec<PathBuf>,
    locks: Vec<LockFile>,
}

/// What a probe of a taken name found.
enum Probe {
    /// A live transfer holds its lock.
    Held,
    /// Its lock was free: the stale name was removed.
    Removed,
    /// It went (or changed) meanwhile.
    Gone,
}

/// What placing a name did.
enum Placed {
    /// The name is ours.
    Claimed,
    /// Another claimer took the new name for stale: try again.
    Lost,
    /// Past [`MAX_LOCK_FILES`]: no claim made.
    Unclaimed,
}

/// Where the claim of `target` lives: `.<name>.sluice-lock` beside it; a name too long for
/// that is shortened and given a hash of the whole, so that two long names never share a claim.
pub(crate) fn lock_path(target: &Path) -> PathBuf {
    let name = target.file_name().unwrap_or(target.as_os_str());
    let whole = side_name(name, LOCK_SUFFIX);
    let lock = if whole.len() == 1 + name.len() + LOCK_SUFFIX.len() {
        whole
    } else {
        let hash = blake3::hash(name.as_bytes()).to_hex();
        side_name(name, &format!("-{}{LOCK_SUFFIX}", &hash[..16]))
    };
    parent_dir(target).join(lock)
}

impl Claims {
    /// No claim yet; steps on disk through `fs`.
    pub(crate) fn new(fs: Confined) -> Claims {
        Claims { fs, names: Vec::new(), locks: Vec::new() }
    }

    /// Claims `target` for this transfer until it is dropped.
    pub(crate) fn claim(&mut self, target: &Path) -> Result<(), ClaimError> {
        let name = lock_path(target);
        for _ in 0..ATTEMPTS {
            match self.place(&name) {
                Ok(Placed::Claimed) => {
                    self.names.push(name);
                    return Ok(());
                }
                Ok(Placed::Unclaimed) => return Ok(()),
                Ok(Placed::Lost) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match self.probe(&name)? {
                    Probe::Held => return Err(ClaimError::Busy),
                    Probe::Removed | Probe::Gone => {}
                },
                Err(e) => return Err(ClaimError::Io(e)),
            }
        }
        Err(ClaimError::Busy)
    }

    /// Makes `name`: a link to a lock file held, or a new one. `AlreadyExists` when it is
    /// taken.
    fn place(&mut self, name: &Path) -> io::Result<Placed> {
        for lock in self.locks.iter().rev() {
            match self.fs.hard_link(&lock.path, name) {
                Ok(()) => return Ok(Placed::Claimed),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(e),
                // Another file system, too many links, or no links there: try the next, then
                // a lock file of its own.
                Err(_) => {}
            }
        }
        if self.locks.len() >= MAX_LOCK_FILES {
            return Ok(Placed::Unclaimed);
        }
        let mut file = self.fs.create_new(name, 0o644)?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            // A prober holds it: it takes the name for stale and removes it.
            Err(Errno::WOULDBLOCK) => return Ok(Placed::Lost),
            Err(e) => return Err(e.into()),
        }
        let meta = file.metadata()?;
        if !self.names_file(name, &meta) {
            return Ok(Placed::Lost);
        }
        if let Err(e) = file.write_all(LOCK_TEXT) {
            let _ = self.fs.remove_file(name);
            return Err(e);
        }
        let path = name.to_owned();
        self.locks.push(LockFile { _file: file, path, dev: meta.dev(), ino: meta.ino() });
        Ok(Placed::Claimed)
    }

    /// Whether the taken `name` is held by a live transfer; a stale one is removed.
    fn probe(&self, name: &Path) -> Result<Probe, ClaimError> {
        let foreign = || ClaimError::Foreign(name.to_owned());
        // Not opened unless it is a file (a device could mind being opened).
        match self.fs.symlink_metadata(name) {
            Ok(meta) if meta.is_file() => {}
            Ok(_) => return Err(foreign()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Gone),
            Err(e) => return Err(ClaimError::Io(e)),
        }
        let file = match self.fs.open_no_follow(name) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Gone),
            Err(e) if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) => {
                return Err(foreign());
            }
            Err(e) => return Err(ClaimError::Io(e)),
        };
        let meta = file.metadata().map_err(ClaimError::Io)?;
        if !meta.is_file() {
            return Err(foreign());
        }
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return Ok(Probe::Held),
            Err(e) => return Err(ClaimError::Io(e.into())),
        }
        // Free: its maker is gone. Removed only while this lock is held and the name is still
        // on this file, so that nobody else's claim goes with it.
        if !self.names_file(name, &meta) {
            return Ok(Probe::Gone);
        }
        if !holds_lock_text(&file, meta.len()) {
            return Err(foreign());
        }
        match self.fs.remove_file(name) {
            Ok(()) => Ok(Probe::Removed),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Probe::Gone),
            Err(e) => Err(ClaimError::Io(e)),
        }
    }

    /// Whether `name` is (still) a name of the file whose metadata is `meta`.
    fn names_file(&self, name: &Path, meta: &std::fs::Metadata) -> bool {
        self.fs.symlink_metadata(name).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
    }
}

/// Whether `file` (of `len` bytes) reads as a lock file: [`LOCK_TEXT`], or nothing.
fn holds_lock_text(file: &File, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    if len != LOCK_TEXT.len() as u64 {
        return false;
    }
    let mut text = Vec::new();
    file.take(len).read_to_end(&mut text).is_ok() && text == LOCK_TEXT
}

impl Drop for Claims {
    /// Removes the names made, each only while it is still a name of a lock file held (a file
    /// stored under that name since is not removed), then releases the locks.
    fn drop(&mut self) {
        // Nearly always one lock file; a name made when there were several is tried with each.
        for name in &self.names {
            for lock in &self.locks {
                if !matches!(self.fs.remove_file_if_same(name, lock.dev, lock.ino), Ok(false)) {
                    break;
                }
            }
        }
    }
}
