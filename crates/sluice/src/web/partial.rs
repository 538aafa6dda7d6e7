//! The two partial files of one upload from the web app's page, and how each way takes over
//! the other's.
//!
//! Over HTTPS ([`super::upload`]) the bytes go to `.<name>.sluice-web-<size>-<mtime>`, strictly
//! in order: it holds as many as it is long. Over WebTransport ([`super::store`]) the transfer
//! machines write the CLI's temporary file `.<name>.sluice-part-<hex>` (the whole size) with its
//! resume record `.<name>.sluice-resume`, which says how far from the start the file is on disk
//! without a gap. In "auto" mode the page may change its way mid-file, so the way that goes on
//! takes over what the other left when it is of the same source (same destination, size and
//! modification time) and holds more than its own partial file:
//!
//! - WebTransport ([`take_https_partial`], the plan's [`Adopt`] hook): the HTTPS partial file
//!   becomes the machines' temporary file, with a record of its length. The machines then offer
//!   its whole blocks as they offer any resume, and keep only those whose BLAKE3 the page finds
//!   in its own file; the whole file's BLAKE3 is checked before it is placed.
//! - HTTPS ([`take_machines_partial`]): the machines' temporary file, cut to the run its record
//!   says is on disk, becomes the HTTPS partial file. Those bytes are checked as HTTPS's own
//!   resumed bytes are: by the whole file's BLAKE3 the client sends (a mismatch removes the
//!   partial file, and nothing is stored).
//!
//! Either is done only by the holder of the destination's claim (a live transfer's partial file
//! is never taken), and the partial file not taken is removed: it holds no more than the one
//! that goes on. A failure on the way costs the resume, never a wrong byte: the steps are
//! ordered so that a take-over cut short leaves no record that claims bytes its file lacks.
//!
//! [`Adopt`]: crate::tree::incoming::Adopt

use std::io;
use std::path::{Path, PathBuf};

use crate::files::{Confined, parent_dir, random_u64, side_name, temp_name};
use crate::tree::Entry;
use crate::tree::resume;

/// The HTTPS partial file of an upload to `target` of a source of `size` bytes and time
/// `mtime`: `.<name>.sluice-web-<size>-<mtime>` (hex) beside it.
pub(super) fn https_part(target: &Path, size: u64, mtime: i64) -> PathBuf {
    let name = target.file_name().unwrap_or_default();
    let suffix = format!(".sluice-web-{size:x}-{mtime:x}");
    parent_dir(target).join(side_name(name, &suffix))
}

/// How many bytes the HTTPS partial file `part` holds: 0 when there is none (or it is longer
/// than the source, which its upload starts again); `None` when something else has its name.
fn https_len(fs: &Confined, part: &Path, size: u64) -> Option<u64> {
    match fs.symlink_metadata(part) {
        Ok(meta) if meta.is_file() => Some(if meta.len() <= size { meta.len() } else { 0 }),
        Ok(_) => None,
        Err(_) => Some(0),
    }
}

/// The machines' temporary file of `target` for the source of `size` bytes and time `mtime`,
/// and how far from its start its record says it is on disk.
pub(super) fn machines_partial(
    fs: &Confined,
    target: &Path,
    size: u64,
    mtime: i64,
) -> Option<(PathBuf, u64)> {
    let (record, temp) = resume::read(fs, target)?;
    let fits = record.size == size
        && record.mtime == mtime
        && fs.symlink_metadata(&temp).is_ok_and(|m| m.file_type().is_file() && m.len() == size);
    fits.then_some((temp, record.prefix.min(size)))
}

/// Whether the machines' partial file of the upload holds more than its HTTPS partial file (so
/// [`take_machines_partial`] would take it).
pub(super) fn machines_hold_more(fs: &Confined, target: &Path, size: u64, mtime: i64) -> bool {
    let own = https_len(fs, &https_part(target, size, mtime), size);
    machines_partial(fs, target, size, mtime)
        .is_some_and(|(_, prefix)| own.is_some_and(|own| prefix > own))
}

/// For HTTPS, with the claim of `target` held: the machines' partial file of the same source
/// becomes the HTTPS partial file when it holds more, else it is removed with its record.
pub(super) fn take_machines_partial(
    fs: &Confined,
    target: &Path,
    size: u64,
    mtime: i64,
) -> io::Result<()> {
    let part = https_part(target, size, mtime);
    let (Some((temp, prefix)), Some(own)) =
        (machines_partial(fs, target, size, mtime), https_len(fs, &part, size))
    else {
        return Ok(());
    };
    if prefix > own {
        // Cut first: a file renamed whole would claim bytes nobody wrote. Interrupted before
        // the rename, the record no longer fits its file, and the machines drop both.
        fs.open(&temp, true)?.set_len(prefix)?;
        fs.rename(&temp, &part)?;
    } else {
        fs.remove_file(&temp)?;
    }
    resume::forget(fs, target);
    Ok(())
}

/// For the machines ([`crate::tree::ReceiveOptions::adopt`]), with the claim of `target` held:
/// the HTTPS partial file of the source `entry` becomes the temporary file a record names, when
/// it holds more whole blocks than the machines' own partial file (which is then removed), else
/// it is removed. A failure only costs the resume.
pub(crate) fn take_https_partial(fs: &Confined, target: &Path, entry: &Entry) {
    let part = https_part(target, entry.size, entry.mtime);
    let Some(len) = https_len(fs, &part, entry.size).filter(|&len| len > 0) else { return };
    let own = resume::find(fs, target, entry);
    if resume::usable_prefix(len, entry.size) <= own.as_ref().map_or(0, |r| r.prefix) {
        let _ = fs.remove_file(&part);
        return;
    }
    if let Some(own) = own {
        let _ = fs.remove_file(&own.temp);
        resume::forget(fs, target);
    }
    let Ok(random) = random_u64() else { return };
    let name = target.file_name().unwrap_or(target.as_os_str());
    let temp = parent_dir(target).join(temp_name(name, random));
    // The record first: a process ended before the file has its name and size leaves a record
    // that does not fit it, which the next try drops (with the file) rather than trusts.
    let taken = resume::save(fs, target, &temp, entry, len)
        .and_then(|()| fs.rename(&part, &temp))
        .and_then(|()| fs.open(&temp, true)?.set_len(entry.size));
    if taken.is_err() {
        // Back to HTTPS's, if it moved (its length unchanged: `set_len` failed whole).
        let _ = fs.rename(&temp, &part);
        resume::forget(fs, target);
    }
}
