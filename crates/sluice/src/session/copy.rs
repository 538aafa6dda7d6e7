//! What both ends of a copy share: its options, the sender's file list with optional checksums,
//! and the mapping of file-plane errors to session errors.

use std::sync::atomic::AtomicBool;

use super::SessionError;
use crate::datapath::COMPRESS_LEVELS;
use crate::files::hash_prefix;
use crate::tree::{Committed, EntryKind, Links, Outgoing, Overwrite, PlanError, WalkError};

/// How a copy treats directories, links, existing files and metadata.
#[derive(Debug, Clone, Default)]
pub struct CopyOptions {
    /// Copy directories with everything in them (else a directory source is refused).
    pub recursive: bool,
    /// Symbolic links inside the trees (the sending end applies it).
    pub links: Links,
    /// Files that exist at the destination (the receiving end applies it).
    pub overwrite: Overwrite,
    /// `Overwrite::IfDifferent` compares BLAKE3 instead of size and time.
    pub checksum: bool,
    /// Keep permission bits and modification times.
    pub preserve: bool,
    /// Decide and report, move nothing.
    pub dry_run: bool,
    /// The sending end compresses each piece of 256 KiB that shrinks with zstd at this level
    /// (1 to 19, [`crate::datapath::COMPRESS_LEVELS`]); pieces that do not shrink go as they
    /// are.
    pub compress: Option<i32>,
}

impl CopyOptions {
    /// Refuses a compression level zstd does not take here.
    pub(crate) fn check(&self) -> Result<(), SessionError> {
        check_level(self.compress)
    }
}

/// Refuses a compression level outside [`COMPRESS_LEVELS`].
pub(crate) fn check_level(level: Option<i32>) -> Result<(), SessionError> {
    match level.filter(|l| !COMPRESS_LEVELS.contains(l)) {
        Some(level) => Err(SessionError::Refused(format!(
            "compression level {level}: use {} to {}",
            COMPRESS_LEVELS.start(),
            COMPRESS_LEVELS.end()
        ))),
        None => Ok(()),
    }
}

/// Puts each file's BLAKE3 into the manifest (reads every file once, before the transfer).
pub(crate) fn add_checksums(outgoing: &mut Outgoing) -> Result<(), SessionError> {
    let never = AtomicBool::new(false);
    let files = outgoing.entries.iter_mut().filter(|e| e.kind == EntryKind::File);
    for (entry, path) in files.zip(&outgoing.files) {
        let ctx = || format!("hashing {}", path.display());
        let file = outgoing.fs.open(path, false).map_err(|e| SessionError::io(ctx(), e))?;
        let hash =
            hash_prefix(&file, entry.size, &never).map_err(|e| SessionError::io(ctx(), e))?;
        entry.blake3 = hash.map(|h| h.to_hex().to_string());
    }
    Ok(())
}

/// The error for files whose bytes did not match: an integrity failure, or a partial one when
/// the others were stored.
pub(crate) fn mismatch_error(committed: &Committed) -> Option<SessionError> {
    let bad = &committed.mismatched;
    if bad.is_empty() {
        return None;
    }
    let shown: Vec<&str> = bad.iter().take(5).map(String::as_str).collect();
    let failure = if committed.files > 0 { SessionError::Partial } else { SessionError::Integrity };
    Some(failure(format!(
        "{} file{} did not hash to the sender's BLAKE3 and {} not stored ({}{}); {} stored",
        bad.len(),
        if bad.len() == 1 { "" } else { "s" },
        if bad.len() == 1 { "was" } else { "were" },
        shown.join(", "),
        if bad.len() > 5 { ", ..." } else { "" },
        committed.files
    )))
}

pub(crate) fn plan_error(e: PlanError) -> SessionError {
    match e {
        PlanError::Bad(bad) => SessionError::Protocol(bad.to_string()),
        PlanError::NotFound(m) => SessionError::NotFound(m),
        PlanError::NotADirectory(m) | PlanError::Refused(m) => SessionError::Refused(m),
        PlanError::Busy(m) => SessionError::Busy(m),
        PlanError::Io(context, source) => SessionError::io(context, source),
    }
}

pub(crate) fn walk_error(e: WalkError) -> SessionError {
    match e {
        WalkError::NotFound(m) => SessionError::NotFound(m),
        WalkError::Io(context, source) => SessionError::io(context, source),
        other => SessionError::Refused(other.to_string()),
    }
}

/// A local listing's failure: the user's own files, so a local I/O error whatever the cause.
pub(crate) fn local_walk_error(e: WalkError) -> SessionError {
    match e {
        WalkError::Io(context, source) => SessionError::io(context, source),
        other => SessionError::io("listing the sources", std::io::Error::other(other.to_string())),
    }
}
