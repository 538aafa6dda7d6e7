//! What both ends of a copy share: its options, the sender's file list with optional checksums,
//! and the mapping of file-plane errors to session errors.

use std::fs::File;
use std::sync::atomic::AtomicBool;

use std::ops::Range;

use super::SessionError;
use super::messages::{BlockHashes, Want};
use crate::datapath::COMPRESS_LEVELS;
use crate::files::hash_prefix;
use crate::tree::manifest::from_ranges;
use crate::tree::resume::matching_prefix;
use crate::tree::{
    Committed, EntryKind, FileSet, Links, Outgoing, Overwrite, PlanError, WalkError,
};

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

/// The files the receiver wants, end to end, read-only.
pub(crate) fn wanted_files(outgoing: &Outgoing, want: &Want) -> Result<FileSet, SessionError> {
    let sizes: Vec<u64> =
        outgoing.entries.iter().filter(|e| e.kind == EntryKind::File).map(|e| e.size).collect();
    let numbers = from_ranges(&want.files, sizes.len()).map_err(SessionError::Protocol)?;
    let files = numbers.iter().map(|&n| (outgoing.files[n as usize].clone(), sizes[n as usize]));
    Ok(FileSet::new(files.collect(), false).confined(outgoing.fs.clone()))
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

/// The sending end's answer to the receiver's resume offers.
#[derive(Debug)]
pub(crate) struct Verdict {
    /// `[file, bytes]`: the leading bytes of each offered file that match the sender's.
    pub(crate) kept: Vec<[u64; 2]>,
    /// The ranges of the offset space still to send, in order.
    pub(crate) ranges: Vec<Range<u64>>,
}

impl Verdict {
    /// Bytes still to send.
    pub(crate) fn moving(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }
}

/// Checks the receiver's resume offers against `files` (reading the offered blocks); without
/// offers, everything is to send.
pub(crate) fn resume_verdict(
    files: &FileSet,
    offers: &[BlockHashes],
) -> Result<Verdict, SessionError> {
    let mut kept = vec![0u64; files.len()];
    let mut verdict = Vec::new();
    for offer in offers {
        let k = offer.file as usize;
        let (path, size, _) = files.file_at(k).ok_or_else(|| {
            SessionError::Protocol(format!("a resume offer for file {k} of {}", files.len()))
        })?;
        let hashes = offer
            .blocks
            .iter()
            .map(blake3::Hash::from_hex)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| SessionError::Protocol("a bad BLAKE3 in a resume offer".into()))?;
        let ctx = || format!("checking {} for a resume", path.display());
        let file = File::open(path).map_err(|e| SessionError::io(ctx(), e))?;
        kept[k] = matching_prefix(&file, size, &hashes).map_err(|e| SessionError::io(ctx(), e))?;
        verdict.push([offer.file as u64, kept[k]]);
    }
    let ranges = (0..files.len())
        .filter_map(|k| files.file_at(k).map(|(_, size, base)| base + kept[k]..base + size))
        .filter(|r| r.start < r.end)
        .collect();
    Ok(Verdict { kept: verdict, ranges })
}

/// The receiving end's resume offers, for `Want`.
pub(crate) fn resume_offers(offers: &[(u32, Vec<blake3::Hash>)]) -> Vec<BlockHashes> {
    offers
        .iter()
        .map(|(file, hashes)| BlockHashes {
            file: *file,
            blocks: hashes.iter().map(|h| h.to_hex().to_string()).collect(),
        })
        .collect()
}

/// Reads the sender's verdict (`[file, bytes]`) into pairs, refusing nonsense.
pub(crate) fn kept_pairs(kept: &[[u64; 2]]) -> Result<Vec<(u32, u64)>, SessionError> {
    kept.iter()
        .map(|&[file, bytes]| {
            u32::try_from(file)
                .map(|f| (f, bytes))
                .map_err(|_| SessionError::Protocol(format!("file {file} in Resumed")))
        })
        .collect()
}
