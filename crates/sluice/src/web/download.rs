//! Opening a file to download, with its `read` right.

use std::fs::File;
use std::sync::atomic::AtomicBool;

use crate::files::hash_prefix;
use crate::session::access::{mtime_secs, open_error};
use crate::session::{Access, SessionError};

/// A regular file opened for reading beneath the token's root.
#[derive(Debug)]
pub struct Download {
    /// The open file (positional reads leave its cursor alone).
    pub file: File,
    /// Its size when opened.
    pub size: u64,
    /// Its modification time, seconds since the epoch.
    pub mtime: i64,
    /// A strong validator of these bytes (HTTP's entity tag, without quotes): its size,
    /// modification time to the nanosecond, and inode, so a file rewritten in place or replaced
    /// by a rename gets another one, and a range of it is never joined to a range of the other.
    pub validator: String,
}

/// Opens `requested` for download; a folder or special file is refused (folders are the
/// client's to walk).
pub fn open_download(access: &Access, requested: &str) -> Result<Download, SessionError> {
    access.require(|r| r.read, "read (download)")?;
    let path = access.resolve(requested)?;
    let fs = access.confined(requested)?;
    let file = fs.open(&path, false).map_err(|e| open_error(requested, e))?;
    let meta = file.metadata().map_err(|e| open_error(requested, e))?;
    if !meta.is_file() {
        return Err(SessionError::Refused(format!("{requested}: not a regular file")));
    }
    Ok(Download { file, size: meta.len(), mtime: mtime_secs(&meta), validator: validator(&meta) })
}

impl Download {
    /// The whole file's BLAKE3, read once more; `busy` when it changed while it was hashed
    /// (its validator then differs), so the hash is of the version [`Download::validator`]
    /// names.
    pub fn hash(&self, requested: &str) -> Result<blake3::Hash, SessionError> {
        let hash = hash_prefix(&self.file, self.size, &AtomicBool::new(false))
            .map_err(|e| open_error(requested, e))?
            .ok_or_else(|| SessionError::Network("hashing was cancelled".into()))?;
        if !self.unchanged(requested)? {
            return Err(SessionError::Busy(format!("{requested}: it changed while it was hashed")));
        }
        Ok(hash)
    }

    /// The whole file read into memory (a small one, sent whole), with its BLAKE3 when it did
    /// not change while it was read: the bytes are then the version [`Download::validator`]
    /// names, and the hash is of exactly the bytes sent.
    pub fn read_whole(
        &self,
        requested: &str,
    ) -> Result<(Vec<u8>, Option<blake3::Hash>), SessionError> {
        use std::os::unix::fs::FileExt;
        let len = usize::try_from(self.size)
            .map_err(|_| SessionError::Refused(format!("{requested}: too large to read whole")))?;
        let mut bytes = vec![0u8; len];
        self.file.read_exact_at(&mut bytes, 0).map_err(|e| open_error(requested, e))?;
        let hash = self.unchanged(requested)?.then(|| blake3::hash(&bytes));
        Ok((bytes, hash))
    }

    /// Whether the file is still the version it was opened as.
    fn unchanged(&self, requested: &str) -> Result<bool, SessionError> {
        let now = self.file.metadata().map_err(|e| open_error(requested, e))?;
        Ok(validator(&now) == self.validator)
    }
}

/// See [`Download::validator`].
fn validator(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{:x}-{:x}.{:x}-{:x}", meta.len(), meta.mtime(), meta.mtime_nsec(), meta.ino())
}

/// The BLAKE3 of the file `requested` (right `read`), and the validator of the version hashed
/// ([`Download::validator`]): a client that downloaded that version compares it with its own
/// hash of what it received. A file that changes while it is hashed is `busy`.
pub fn file_hash(access: &Access, requested: &str) -> Result<(String, blake3::Hash), SessionError> {
    let opened = open_download(access, requested)?;
    let hash = opened.hash(requested)?;
    Ok((opened.validator, hash))
}
