//! A resumable upload of one file, with the `write` right.
//!
//! The bytes go to a partial file beside the destination, `.<name>.sluice-web-<size>-<mtime>`
//! (hex), written strictly in order: a request says at which offset its bytes start, and is
//! taken only when that is exactly how much the partial file holds ([`Upload::have`]); a client
//! asks for that number ([`upload_status`]) and sends only the rest, so an upload cut off
//! resumes where it stopped. The size and modification time in the name keep a partial file of
//! one source from being taken for another's. While a request writes, it holds the same claim
//! on the destination as a `sluice cp` upload (`.<name>.sluice-lock`): a second writer of that
//! path, web or CLI, is refused as busy.
//!
//! An upload that changed its way mid-file goes on from what the other way left: when a
//! WebTransport try of the same source (same size and time) holds more, [`upload_status`] (for a
//! moment, when no transfer holds the claim) and [`Upload::open`] (under its claim) make its
//! partial file this one, cut to the run its resume record says is on disk ([`super::partial`]).
//! Those bytes are checked with the others, by the BLAKE3 the client sends at the end.
//!
//! When the last byte is in, the partial file is hashed (BLAKE3), checked against the hash the
//! client sent if any, and renamed into place by the overwrite policy ([`Policy`]), or removed
//! when the policy keeps the existing file.
//!
//! An abandoned partial file stays resumable for [`PARTIAL_TTL`] after its last write, then
//! [`Partials::sweep`] removes it. The server knows the partial files it wrote or was asked
//! about since it started ([`Partials`], in memory, at most [`PARTIALS_MAX`]); one left from
//! before a restart is swept once its upload is asked about again.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::partial::{https_part, machines_hold_more, take_machines_partial};
use crate::files::{Confined, hash_prefix};
use crate::session::access::{mtime_secs, open_error};
use crate::session::messages::{FileKind, StatInfo};
use crate::session::{Access, Overwrite, SessionError};
use crate::tree::claim::{ClaimError, Claims};

/// How long a partial upload stays resumable after its last write.
pub const PARTIAL_TTL: Duration = Duration::from_secs(24 * 3600);
/// Partial uploads known at once; beyond them a new one is not swept (it stays until its
/// upload is asked about again, once there is room).
pub const PARTIALS_MAX: usize = 65_536;

/// The partial uploads the server knows of, to remove those abandoned ([`Partials::sweep`]).
#[derive(Debug, Default)]
pub struct Partials {
    known: Mutex<HashMap<PathBuf, Known>>,
}

#[derive(Debug)]
struct Known {
    /// The root it is confined beneath (its token's).
    root: PathBuf,
    /// Uploads writing it now.
    open: usize,
    /// Set to stop them ([`stop_upload`]).
    stop: Arc<AtomicBool>,
}

impl Partials {
    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Known>> {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes `part`; when `opened`, one more upload writes it: its stop flag.
    fn note(&self, root: &Path, part: &Path, opened: bool) -> Arc<AtomicBool> {
        let mut known = self.known();
        if !known.contains_key(part) && known.len() >= PARTIALS_MAX {
            return Arc::default();
        }
        let entry = known.entry(part.to_owned()).or_insert_with(|| Known {
            root: root.to_owned(),
            open: 0,
            stop: Arc::default(),
        });
        if opened {
            if entry.open == 0 {
                entry.stop = Arc::default();
            }
            entry.open += 1;
        }
        entry.stop.clone()
    }

    fn closed(&self, part: &Path) {
        if let Some(entry) = self.known().get_mut(part) {
            entry.open = entry.open.saturating_sub(1);
        }
    }

    /// Tells the uploads writing `part` to stop; whether one was.
    fn stop(&self, part: &Path) -> bool {
        match self.known().get(part) {
            Some(entry) if entry.open > 0 => {
                entry.stop.store(true, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// How many partial uploads are known.
    pub fn len(&self) -> usize {
        self.known().len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes the partial files not written to for `ttl` before `now` (none that an upload
    /// has open) and forgets those gone; returns how many it removed.
    pub fn sweep(&self, now: SystemTime, ttl: Duration) -> usize {
        let candidates: Vec<(PathBuf, PathBuf)> = {
            let mut known = self.known();
            known.retain(|part, k| {
                k.open > 0
                    || Confined::new(Some(&k.root))
                        .is_ok_and(|fs| fs.symlink_metadata(part).is_ok())
            });
            known
                .iter()
                .filter(|(_, k)| k.open == 0)
                .map(|(p, k)| (p.clone(), k.root.clone()))
                .collect()
        };
        let mut removed = 0;
        for (part, root) in candidates {
            let Ok(fs) = Confined::new(Some(&root)) else { continue };
            let stale = fs.symlink_metadata(&part).is_ok_and(|meta| {
                meta.is_file()
                    && meta
                        .modified()
                        .is_ok_and(|at| now.duration_since(at).is_ok_and(|age| age >= ttl))
            });
            let mut known = self.known();
            // An upload may have opened it since.
            if stale
                && known.get(&part).is_some_and(|k| k.open == 0)
                && fs.remove_file(&part).is_ok()
            {
                known.remove(&part);
                removed += 1;
            }
        }
        removed
    }
}

/// What to do when the destination exists: the CLI's `--overwrite` policies, or keep both
/// (the new file takes the next free name `name (n).ext`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// As `sluice cp --overwrite` (`Refuse` when none is given).
    Overwrite(Overwrite),
    /// Store the new file beside the existing one.
    KeepBoth,
}

impl Policy {
    /// `refuse`, `never` (skip), `always` (replace), `if-newer`, `if-different`, `keep-both`.
    pub fn from_name(name: &str) -> Option<Policy> {
        match name {
            "refuse" => Some(Policy::Overwrite(Overwrite::Refuse)),
            "keep-both" => Some(Policy::KeepBoth),
            other => Overwrite::from_name(other).map(Policy::Overwrite),
        }
    }
}

/// The upload a client means: where, how big, how old.
#[derive(Debug, Clone)]
pub struct UploadSpec {
    /// The destination, relative to the token's root.
    pub path: String,
    /// The whole file's size in bytes.
    pub size: u64,
    /// The source's modification time (seconds since the epoch): given to the stored file, and
    /// compared by `if-newer` and `if-different`.
    pub mtime: i64,
    /// What to do when the destination exists.
    pub policy: Policy,
}

/// What the server holds of an upload.
#[derive(Debug, Clone)]
pub struct UploadStatus {
    /// Bytes of it already in the partial file (send from there).
    pub have: u64,
    /// What is at the destination now, if anything.
    pub exists: Option<StatInfo>,
}

/// How an upload ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadDone {
    /// Stored under `name` (the last component: another than asked under keep-both).
    Stored {
        /// The stored file's name.
        name: String,
        /// Its BLAKE3, hex.
        blake3: String,
    },
    /// The existing file was kept (the policy said so); the bytes received were dropped.
    Skipped,
    /// The destination exists and the policy is `refuse`: the partial file stays, complete,
    /// for a request with another policy.
    Exists,
}

/// The destination of `spec` beneath the root, and what is there: a folder is refused.
fn destination(
    access: &Access,
    fs: &Confined,
    spec: &UploadSpec,
) -> Result<(PathBuf, Option<std::fs::Metadata>), SessionError> {
    access.require(|r| r.write, "write (upload)")?;
    let target = access.resolve(&spec.path)?;
    if target == access.root() {
        return Err(SessionError::Refused(format!("{}: is a folder", spec.path)));
    }
    let found = match fs.metadata(&target) {
        Ok(meta) if meta.is_dir() => {
            return Err(SessionError::Refused(format!("{}: is a folder", spec.path)));
        }
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(open_error(&spec.path, e)),
    };
    Ok((target, found))
}

fn part_path(target: &Path, spec: &UploadSpec) -> PathBuf {
    https_part(target, spec.size, spec.mtime)
}

/// The claim of `target`, for the upload at `path`.
fn claim(fs: &Confined, target: &Path, path: &str) -> Result<Claims, SessionError> {
    let mut claim = Claims::new(fs.clone());
    claim.claim(target).map_err(|e| match e {
        ClaimError::Busy => SessionError::Busy(format!(
            "{path}: another transfer is writing it; try again when it ends"
        )),
        ClaimError::Foreign(_) => SessionError::Refused(format!("{path}: its lock name is taken")),
        ClaimError::Io(e) => open_error(path, e),
    })?;
    Ok(claim)
}

fn stat_of(meta: &std::fs::Metadata) -> StatInfo {
    StatInfo { size: meta.len(), mtime: mtime_secs(meta), kind: FileKind::File }
}

/// How many bytes of `spec` the server holds, and what is at its destination; a partial file
/// found is noted in `partials` (to be swept if abandoned).
pub fn upload_status(
    access: &Access,
    spec: &UploadSpec,
    partials: &Partials,
) -> Result<UploadStatus, SessionError> {
    let fs = access.confined(&spec.path)?;
    let (target, found) = destination(access, &fs, spec)?;
    // What a WebTransport try of the same source left is where this way goes on, when it holds
    // more; a transfer writing the path now (its claim held) keeps its file.
    if machines_hold_more(&fs, &target, spec.size, spec.mtime)
        && let Ok(_claim) = claim(&fs, &target, &spec.path)
    {
        take_machines_partial(&fs, &target, spec.size, spec.mtime)
            .map_err(|e| open_error(&spec.path, e))?;
    }
    let part = part_path(&target, spec);
    let have = match fs.symlink_metadata(&part) {
        Ok(meta) if meta.is_file() && meta.len() <= spec.size => {
            partials.note(access.root(), &part, false);
            meta.len()
        }
        _ => 0,
    };
    Ok(UploadStatus { have, exists: found.as_ref().map(stat_of) })
}

/// Tells the requests writing the upload `spec` to stop (a client cancelling it: its own end of
/// the connection cannot stop a server still reading what was sent before); whether one was.
pub fn stop_upload(
    access: &Access,
    spec: &UploadSpec,
    partials: &Partials,
) -> Result<bool, SessionError> {
    let fs = access.confined(&spec.path)?;
    let (target, _) = destination(access, &fs, spec)?;
    Ok(partials.stop(&part_path(&target, spec)))
}

/// An upload being written: [`Upload::open`], [`Upload::write`] its bytes in order, then
/// [`Upload::finish`] once [`Upload::complete`].
#[derive(Debug)]
pub struct Upload {
    spec: UploadSpec,
    fs: Confined,
    target: PathBuf,
    part: PathBuf,
    file: File,
    have: u64,
    partials: Arc<Partials>,
    stop: Arc<AtomicBool>,
    _claim: Claims,
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.partials.closed(&self.part);
    }
}

impl Upload {
    /// Claims the destination and opens (or starts) its partial file, noted in `partials` as
    /// open until the upload drops.
    pub fn open(
        access: &Access,
        spec: UploadSpec,
        partials: Arc<Partials>,
    ) -> Result<Upload, SessionError> {
        let fs = access.confined(&spec.path)?;
        let (target, _) = destination(access, &fs, &spec)?;
        let claim = claim(&fs, &target, &spec.path)?;
        take_machines_partial(&fs, &target, spec.size, spec.mtime)
            .map_err(|e| open_error(&spec.path, e))?;
        let part = part_path(&target, &spec);
        let file = match fs.symlink_metadata(&part) {
            Ok(meta) if meta.is_file() => fs.open(&part, true),
            Ok(_) => {
                return Err(SessionError::Refused(format!(
                    "{}: its partial name is taken",
                    spec.path
                )));
            }
            Err(_) => fs.create_new(&part, 0o644),
        }
        .map_err(|e| open_error(&spec.path, e))?;
        let stop = partials.note(access.root(), &part, true);
        let mut upload =
            Upload { spec, fs, target, part, file, have: 0, partials, stop, _claim: claim };
        upload.have = upload.file.metadata().map_err(|e| open_error(&upload.spec.path, e))?.len();
        if upload.have > upload.spec.size {
            upload.file.set_len(0).map_err(|e| open_error(&upload.spec.path, e))?;
            upload.have = 0;
        }
        Ok(upload)
    }

    /// Whether the client asked it to stop ([`stop_upload`]): end the request, keeping what
    /// was written (the client's own connection may still hold bytes it sent before).
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Bytes in the partial file: the offset the next bytes must start at.
    pub fn have(&self) -> u64 {
        self.have
    }

    /// Whether every byte is in.
    pub fn complete(&self) -> bool {
        self.have == self.spec.size
    }

    /// Appends `bytes`; more than the declared size is refused.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), SessionError> {
        let end = self.have.saturating_add(bytes.len() as u64);
        if end > self.spec.size {
            return Err(SessionError::Refused(format!(
                "{}: more bytes than the declared size {}",
                self.spec.path, self.spec.size
            )));
        }
        self.file.write_all_at(bytes, self.have).map_err(|e| open_error(&self.spec.path, e))?;
        self.have = end;
        Ok(())
    }

    /// Hashes the complete file, checks it against `expected` (the client's BLAKE3, if it sent
    /// one; on a mismatch the partial file is removed) and stores it by the policy.
    pub fn finish(self, expected: Option<blake3::Hash>) -> Result<UploadDone, SessionError> {
        let path = &self.spec.path;
        let io = |e| open_error(path, e);
        if !self.complete() {
            return Err(SessionError::Refused(format!(
                "{path}: {} of {} bytes are in",
                self.have, self.spec.size
            )));
        }
        let hash = hash_prefix(&self.file, self.spec.size, &AtomicBool::new(false))
            .map_err(io)?
            .ok_or_else(|| SessionError::Network("hashing was cancelled".into()))?;
        if expected.is_some_and(|e| e != hash) {
            let _ = self.fs.remove_file(&self.part);
            return Err(SessionError::Integrity(format!(
                "{path}: the bytes received do not hash to the client's BLAKE3; upload it again"
            )));
        }
        if let Ok(secs) = u64::try_from(self.spec.mtime) {
            self.file
                .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
                .map_err(io)?;
        }
        self.file.sync_all().map_err(io)?;
        let found = match self.fs.metadata(&self.target) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(e)),
        };
        let mut target = self.target.clone();
        if let Some(meta) = &found {
            if meta.is_dir() {
                return Err(SessionError::Refused(format!("{path}: is a folder")));
            }
            let replace = match self.spec.policy {
                Policy::Overwrite(Overwrite::Refuse) => return Ok(UploadDone::Exists),
                Policy::Overwrite(Overwrite::Never) => false,
                Policy::Overwrite(Overwrite::Always) => true,
                Policy::Overwrite(Overwrite::IfNewer) => self.spec.mtime > mtime_secs(meta),
                Policy::Overwrite(Overwrite::IfDifferent) => {
                    self.spec.size != meta.len() || self.spec.mtime != mtime_secs(meta)
                }
                Policy::KeepBoth => {
                    target = free_name(&self.fs, &self.target, &self.spec.path)?;
                    true
                }
            };
            if !replace {
                self.fs.remove_file(&self.part).map_err(io)?;
                return Ok(UploadDone::Skipped);
            }
        }
        self.fs.rename(&self.part, &target).map_err(io)?;
        let name = target.file_name().unwrap_or_default().to_string_lossy().into_owned();
        Ok(UploadDone::Stored { name, blake3: hash.to_hex().to_string() })
    }
}

/// `name (n).ext` beside `target` for the first `n` from 1 that names nothing yet (`path`: the
/// client's name for `target`, for the error).
pub(super) fn free_name(fs: &Confined, target: &Path, path: &str) -> Result<PathBuf, SessionError> {
    let name = target.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let (stem, ext) = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem.to_owned(), format!(".{ext}")),
        _ => (name.clone(), String::new()),
    };
    for n in 1..=999 {
        let candidate = target.with_file_name(format!("{stem} ({n}){ext}"));
        if fs.symlink_metadata(&candidate).is_err() {
            return Ok(candidate);
        }
    }
    Err(SessionError::Refused(format!("{path}: no free name to keep both")))
}
