//! One level of a directory as manifest entries: what `sluice ls` shows of a server's tree.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::manifest::{Entry, EntryKind, MAX_ENTRIES};
use super::walk::WalkError;
use crate::files::Confined;

/// What a listing found.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The entries, sorted by name: each a single path component.
    pub entries: Vec<Entry>,
    /// Entries left out: special files (devices, sockets, FIFOs) and names that are not UTF-8.
    pub skipped: u64,
}

/// The entries of the directory `path`, one level and sorted by name, or the file (or link)
/// `path` itself. Links are not followed: they are listed with their target as they say it.
///
/// `fs` reads beneath a server's root ([`Confined`]).
pub fn list(fs: &Confined, path: &Path) -> Result<Listing, WalkError> {
    let shown = || path.display().to_string();
    let meta = fs.symlink_metadata(path).map_err(|e| WalkError::Io(shown(), e))?;
    let mut listing = Listing::default();
    if !meta.is_dir() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(".");
        push(fs, &mut listing, path, name, &meta)?;
        return Ok(listing);
    }
    let mut names = fs.read_dir(path).map_err(|e| WalkError::Io(shown(), e))?;
    if names.len() > MAX_ENTRIES {
        return Err(WalkError::TooMany);
    }
    names.sort();
    for name in names {
        let child = path.join(&name);
        let Some(name) = name.to_str() else {
            listing.skipped += 1;
            continue;
        };
        let meta = fs.symlink_metadata(&child).map_err(|e| WalkError::Io(name.to_owned(), e))?;
        push(fs, &mut listing, &child, name, &meta)?;
    }
    Ok(listing)
}

fn push(
    fs: &Confined,
    listing: &mut Listing,
    path: &Path,
    name: &str,
    meta: &std::fs::Metadata,
) -> Result<(), WalkError> {
    let kind = if meta.is_file() {
        EntryKind::File
    } else if meta.is_dir() {
        EntryKind::Dir
    } else if meta.file_type().is_symlink() {
        EntryKind::Symlink
    } else {
        listing.skipped += 1;
        return Ok(());
    };
    let target = match kind {
        EntryKind::Symlink => {
            let target = fs.read_link(path).map_err(|e| WalkError::Io(name.to_owned(), e))?;
            match target.to_str() {
                Some(t) if !t.is_empty() => Some(t.to_owned()),
                _ => {
                    listing.skipped += 1;
                    return Ok(());
                }
            }
        }
        _ => None,
    };
    listing.entries.push(Entry {
        path: name.to_owned(),
        kind,
        size: if kind == EntryKind::File { meta.len() } else { 0 },
        mtime: meta.mtime(),
        mode: meta.permissions().mode() & 0o7777,
        target,
        blake3: None,
    });
    Ok(())
}
