//! Resuming a file whose transfer was interrupted.
//!
//! While a file of at least [`RESUME_MIN_BYTES`] arrives, the receiver keeps a small record
//! beside its temporary file (`.<name>.sluice-resume`, rewritten atomically at most every
//! [`RECORD_EVERY`]): which temporary file, the source's size, time and manifest path, and how
//! far from its start the file is on disk without a gap. A transfer that stops (client killed,
//! server restarted, path gone) leaves both behind. Only a transfer that holds the path's claim
//! ([`super::claim`]) reads or removes them, so a live transfer's partial file is never taken
//! for an ended one's. When the same copy runs again the record is read, but not trusted: the receiver hashes its bytes in blocks of [`RESUME_BLOCK_BYTES`]
//! and offers the hashes; the sender hashes the same blocks of its file and keeps the leading
//! run that matches. Only the rest moves, and the whole file's BLAKE3 is still checked at the
//! end. A record that does not parse, names another file, or disagrees with the source is
//! dropped with its temporary file, and the file moves whole.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::manifest::Entry;
use crate::files::{Confined, hash_extents, parent_dir, side_name, temp_name};

/// Blocks a resume offers and checks (a mismatch costs at most one block more).
pub const RESUME_BLOCK_BYTES: u64 = 4 << 20;
/// Files smaller than this are moved again whole rather than resumed.
pub const RESUME_MIN_BYTES: u64 = 8 << 20;
/// A file's record is rewritten at most this often.
pub const RECORD_EVERY: Duration = Duration::from_millis(500);
/// Records are small; a larger file is not a record.
const RECORD_MAX_BYTES: u64 = 4096;
const RECORD_VERSION: u32 = 1;

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) version: u32,
    /// File name of the temporary file, in the target's directory.
    pub(crate) temp: String,
    /// The source as the manifest described it.
    pub(crate) path: String,
    pub(crate) size: u64,
    pub(crate) mtime: i64,
    /// Bytes on disk from the start without a gap.
    pub(crate) prefix: u64,
}

/// A temporary file a new transfer of the same source can continue.
#[derive(Debug, Clone)]
pub(crate) struct Resumable {
    /// The temporary file.
    pub(crate) temp: PathBuf,
    /// Bytes the record claims from the start (a whole number of blocks, or the size).
    pub(crate) prefix: u64,
}

/// Where the record of `target` lives.
pub(crate) fn record_path(target: &Path) -> PathBuf {
    let name = target.file_name().unwrap_or(target.as_os_str());
    parent_dir(target).join(side_name(name, ".sluice-resume"))
}

/// The resumable temporary file of `target` for the source `entry`, if a record names one that
/// fits; a record that does not is removed with the temporary file it names. The caller holds
/// the claim of `target`: whatever is found is an ended transfer's.
pub(crate) fn find(fs: &Confined, target: &Path, entry: &Entry) -> Option<Resumable> {
    let path = record_path(target);
    let meta = fs.symlink_metadata(&path).ok()?;
    let Some(record) = read_record(fs, &path, &meta) else {
        // Unreadable: which temporary file it meant is unknown, so every one of this target
        // goes (they are ours by their name).
        remove_temps_of(fs, target);
        let _ = fs.remove_file(&path);
        return None;
    };
    let temp_ok = record.temp_is_ours();
    let temp = parent_dir(target).join(&record.temp);
    let fits = record.version == RECORD_VERSION
        && temp_ok
        && record.path == entry.path
        && record.size == entry.size
        && record.mtime == entry.mtime
        && fs
            .symlink_metadata(&temp)
            .is_ok_and(|m| m.file_type().is_file() && m.len() == entry.size);
    if !fits {
        if temp_ok {
            let _ = fs.remove_file(&temp);
        }
        let _ = fs.remove_file(&path);
        return None;
    }
    Some(Resumable { temp, prefix: record.usable_prefix(entry.size) })
}

impl Record {
    /// Whether the temporary file the record names is one of ours, in the target's directory:
    /// a hidden `.sluice-part-` name with no `/` (so never `..` or a path elsewhere).
    pub(crate) fn temp_is_ours(&self) -> bool {
        !self.temp.contains('/')
            && self.temp.starts_with('.')
            && self.temp.contains(".sluice-part-")
    }

    /// The bytes a resume may keep of a file of `size`: the whole file if the record claims all
    /// of it, else the whole blocks of its claim ([`usable_prefix`]).
    pub(crate) fn usable_prefix(&self, size: u64) -> u64 {
        usable_prefix(self.prefix, size)
    }
}

/// What a resume may keep of a file of `size` whose first `prefix` bytes are on disk: all of
/// it when the prefix is the whole file, else the prefix's whole blocks (those it offers).
pub(crate) fn usable_prefix(prefix: u64, size: u64) -> u64 {
    if prefix >= size { size } else { prefix / RESUME_BLOCK_BYTES * RESUME_BLOCK_BYTES }
}

/// The record of `target`, if there is one of this version that names a temporary file of
/// ours, with that file's path; whether it fits a source is the caller's to check.
pub(crate) fn read(fs: &Confined, target: &Path) -> Option<(Record, PathBuf)> {
    let path = record_path(target);
    let record = read_record(fs, &path, &fs.symlink_metadata(&path).ok()?)?;
    let temp = parent_dir(target).join(&record.temp);
    (record.version == RECORD_VERSION && record.temp_is_ours()).then_some((record, temp))
}

/// Removes the temporary files (`.<name>.sluice-part-<hex>`) beside `target`.
fn remove_temps_of(fs: &Confined, target: &Path) {
    let name = target.file_name().unwrap_or(target.as_os_str());
    let sample = temp_name(name, 0);
    let prefix = &sample.as_bytes()[..sample.len() - 16];
    let dir = parent_dir(target);
    let Ok(names) = fs.read_dir(dir) else { return };
    for file_name in names {
        let bytes = file_name.as_bytes();
        let is_temp = bytes.len() == sample.len()
            && bytes.starts_with(prefix)
            && bytes[prefix.len()..].iter().all(u8::is_ascii_hexdigit);
        if !is_temp {
            continue;
        }
        let child = dir.join(&file_name);
        if fs.symlink_metadata(&child).is_ok_and(|m| m.file_type().is_file()) {
            let _ = fs.remove_file(&child);
        }
    }
}

/// The record at `path`, whose metadata (not following a link) is `meta`.
fn read_record(fs: &Confined, path: &Path, meta: &std::fs::Metadata) -> Option<Record> {
    if !meta.file_type().is_file() || meta.len() > RECORD_MAX_BYTES {
        return None;
    }
    let mut text = Vec::new();
    fs.open(path, false).ok()?.take(RECORD_MAX_BYTES).read_to_end(&mut text).ok()?;
    decode_record(&text)
}

/// A record from its bytes; `None` for anything else.
pub(crate) fn decode_record(bytes: &[u8]) -> Option<Record> {
    if bytes.len() as u64 > RECORD_MAX_BYTES {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

/// Writes (atomically replaces) the record of `target`.
pub(crate) fn save(
    fs: &Confined,
    target: &Path,
    temp: &Path,
    entry: &Entry,
    prefix: u64,
) -> io::Result<()> {
    let temp_name = temp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let record = Record {
        version: RECORD_VERSION,
        temp: temp_name,
        path: entry.path.clone(),
        size: entry.size,
        mtime: entry.mtime,
        prefix,
    };
    let path = record_path(target);
    let mut staging = path.clone().into_os_string();
    staging.push(".new");
    let staging = PathBuf::from(staging);
    // A staging file left by a crash is ours to replace.
    let _ = fs.remove_file(&staging);
    let mut file = fs.create_new(&staging, 0o600)?;
    file.write_all(&serde_json::to_vec(&record).map_err(io::Error::other)?)?;
    drop(file);
    fs.rename(&staging, &path)
}

/// Removes the record of `target`, if any.
pub(crate) fn forget(fs: &Confined, target: &Path) {
    let _ = fs.remove_file(&record_path(target));
}

/// BLAKE3 of each [`RESUME_BLOCK_BYTES`] block of the first `len` bytes of `file` (the last
/// block may be shorter).
pub fn block_hashes(file: &File, len: u64) -> io::Result<Vec<blake3::Hash>> {
    let ends: Vec<u64> = (1..=len.div_ceil(RESUME_BLOCK_BYTES))
        .map(|block| (block * RESUME_BLOCK_BYTES).min(len))
        .collect();
    let never = AtomicBool::new(false);
    Ok(hash_extents(file, 0, ends, &never)?.unwrap_or_default())
}

/// The sender's side: how many leading bytes of its `size`-byte file match the receiver's
/// `offered` block hashes (whole blocks; all of the file when every block matches).
pub fn matching_prefix(file: &File, size: u64, offered: &[blake3::Hash]) -> io::Result<u64> {
    let len = (offered.len() as u64).saturating_mul(RESUME_BLOCK_BYTES).min(size);
    let mine = block_hashes(file, len)?;
    // `blake3::Hash` compares in constant time.
    let same = mine.iter().zip(offered).take_while(|(a, b)| a == b).count() as u64;
    Ok((same * RESUME_BLOCK_BYTES).min(size))
}
