//! The file plane: paths confined to a root, the sender's BLAKE3 of what it announced, and
//! partial files that only reach their final name once the receiver's hash matched.
//!
//! Path confinement is checked once, by resolving the path as it stands on disk
//! ([`resolve_under_root`]). That leaves a time-of-check to time-of-use window: whoever can write
//! inside the root can swap a directory for a symlink to elsewhere between the check and the
//! `open`. The fix is to open relative to a directory handle of the root with
//! `openat2(RESOLVE_BENEATH)` (a later issue); until then, a served root must not be writable by
//! anyone the server does not trust.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a requested path was refused.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("empty path")]
    Empty,
    /// Absolute paths are not accepted from peers.
    #[error("absolute paths are refused: {0}")]
    Absolute(String),
    /// `..` components are refused.
    #[error("'..' is refused in paths: {0}")]
    ParentComponent(String),
    /// The path resolves (through a symlink) outside the root.
    #[error("path escapes the served directory: {0}")]
    Escapes(String),
    /// Other invalid input (e.g. a NUL byte).
    #[error("invalid path {0}: {1}")]
    Invalid(String, &'static str),
    /// The file system said no.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// Resolves `requested` (a relative path from a peer) under `root`, refusing any escape. The
/// final component may not exist yet (uploads); its parent must, inside the root.
///
/// The result is canonical (symlinks resolved). `"."` resolves to the root itself. A final
/// component that is a dangling symlink is refused: writing through it would create a file
/// wherever it points. See the module docs for the time-of-check to time-of-use limit.
pub fn resolve_under_root(root: &Path, requested: &str) -> Result<PathBuf, PathError> {
    let owned = || requested.to_owned();
    if requested.is_empty() {
        return Err(PathError::Empty);
    }
    if requested.contains('\0') {
        return Err(PathError::Invalid(owned(), "it contains a NUL byte"));
    }
    let mut relative = PathBuf::new();
    for component in Path::new(requested).components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(PathError::ParentComponent(owned())),
            Component::RootDir | Component::Prefix(_) => {
                return Err(PathError::Absolute(owned()));
            }
        }
    }
    let root = root.canonicalize().map_err(|e| PathError::Io(root.display().to_string(), e))?;
    let joined = root.join(&relative);
    let inside = |path: PathBuf| {
        if path.starts_with(&root) { Ok(path) } else { Err(PathError::Escapes(owned())) }
    };
    match joined.canonicalize() {
        Ok(resolved) => inside(resolved),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Something named like that exists but cannot be resolved: a dangling symlink.
            if joined.symlink_metadata().is_ok() {
                return Err(PathError::Invalid(owned(), "it is a dangling symbolic link"));
            }
            // Not there yet (an upload): its parent must exist, inside the root. `relative` has
            // at least one normal component here, since the root itself exists.
            let (Some(parent), Some(name)) = (joined.parent(), joined.file_name()) else {
                return Err(PathError::Invalid(owned(), "it names no file"));
            };
            let parent = parent.canonicalize().map_err(|e| PathError::Io(owned(), e))?;
            inside(parent.join(name))
        }
        Err(e) => Err(PathError::Io(owned(), e)),
    }
}

/// Bytes read per call while hashing: large enough that BLAKE3's SIMD lanes stay full and the
/// syscall cost vanishes.
pub(crate) const HASH_BLOCK_BYTES: usize = 1 << 20;

/// BLAKE3 of the first `len` bytes of `file`: the sender's digest of exactly the bytes it
/// announced and sends, whatever the file grew to since. A file now shorter than `len` is an
/// `UnexpectedEof` error. Returns `None` once `cancel` is set (the transfer was given up).
///
/// Reads with positional reads, so the file's cursor is left where it was.
pub fn hash_prefix(
    file: &File,
    len: u64,
    cancel: &AtomicBool,
) -> std::io::Result<Option<blake3::Hash>> {
    let mut hashing = FileHasher::new(0);
    Ok(hashing.read_to(file, len, cancel)?.then(|| hashing.finalize()))
}

/// BLAKE3 of a file's bytes from a start offset on, fed by positional reads of
/// [`HASH_BLOCK_BYTES`] as far as the caller says the bytes are there.
pub(crate) struct FileHasher {
    hasher: blake3::Hasher,
    buf: Vec<u8>,
    offset: u64,
}

impl FileHasher {
    /// Hashing from `start`.
    pub(crate) fn new(start: u64) -> Self {
        Self { hasher: blake3::Hasher::new(), buf: vec![0u8; HASH_BLOCK_BYTES], offset: start }
    }

    /// Where the next read starts.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads and hashes the bytes up to `end`; false if `cancel` was set on the way.
    pub(crate) fn read_to(
        &mut self,
        file: &File,
        end: u64,
        cancel: &AtomicBool,
    ) -> std::io::Result<bool> {
        while self.offset < end {
            if cancel.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let n = (end - self.offset).min(HASH_BLOCK_BYTES as u64) as usize;
            file.read_exact_at(&mut self.buf[..n], self.offset)?;
            self.hasher.update(&self.buf[..n]);
            self.offset += n as u64;
        }
        Ok(true)
    }

    /// The hash of everything read.
    pub(crate) fn finalize(&self) -> blake3::Hash {
        self.hasher.finalize()
    }
}

/// Why a partial file could not be committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The received bytes do not hash to what the sender announced.
    #[error("the sender's BLAKE3 is {expected}, but the bytes received hash to {actual}")]
    Mismatch {
        /// Announced hash (hex).
        expected: String,
        /// Hash of what arrived (hex).
        actual: String,
    },
    /// Syncing or renaming failed.
    #[error("could not finish {0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// A file being received under a temporary name beside its final path (owner-only
/// permissions). Dropped without `commit`, the temporary file is removed.
///
/// The temporary name is `.<final-name>.sluice-part-<16 hex digits>` in the final path's
/// directory, so the rename is atomic (same file system). The committed file keeps mode 0600;
/// whoever wants other permissions sets them after the commit.
#[derive(Debug)]
pub struct PartialFile {
    file: File,
    temp_path: PathBuf,
    final_path: PathBuf,
    /// Set once the temporary file is gone (renamed or removed), so Drop leaves things alone.
    finished: bool,
}

/// Longest file name most Linux file systems accept (NAME_MAX).
const NAME_MAX_BYTES: usize = 255;

/// `.<name>.sluice-part-<hex>`, with `name` shortened if the whole would exceed NAME_MAX.
fn temp_name(final_name: &std::ffi::OsStr, random: u64) -> OsString {
    let suffix = format!(".sluice-part-{random:016x}");
    let room = NAME_MAX_BYTES - 1 - suffix.len();
    let name = final_name.as_bytes();
    let mut bytes = Vec::with_capacity(NAME_MAX_BYTES);
    bytes.push(b'.');
    bytes.extend_from_slice(&name[..name.len().min(room)]);
    bytes.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(bytes)
}

fn random_u64() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    aws_lc_rs::rand::fill(&mut bytes).map_err(|_| io::Error::other("no system randomness"))?;
    Ok(u64::from_le_bytes(bytes))
}

/// The directory `path` lives in (`.` for a bare name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl PartialFile {
    /// Creates the temporary file for `final_path`, sized to `size` bytes.
    pub fn create(final_path: &Path, size: u64) -> std::io::Result<Self> {
        let name = final_path.file_name().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "the final path names no file")
        })?;
        let temp_path = parent_dir(final_path).join(temp_name(name, random_u64()?));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp_path)?;
        let partial = Self { file, temp_path, final_path: final_path.to_owned(), finished: false };
        // On failure `partial` drops here and removes the file it just made.
        partial.file.set_len(size)?;
        Ok(partial)
    }
    /// The open temporary file (write at offsets).
    pub fn file(&self) -> &File {
        &self.file
    }
    /// Where the bytes are until commit.
    pub fn temp_path(&self) -> &Path {
        &self.temp_path
    }
    /// Compares `actual`, the BLAKE3 of what was written into [`PartialFile::file`] (the
    /// receiver hashes it while it arrives: `datapath::Received::blake3`), with `expected`, the
    /// sender's; then syncs the file, renames it onto the final path and syncs the directory.
    /// The file is not read again. On a mismatch the temporary file is removed.
    ///
    /// An existing file at the final path is replaced (the overwrite policy is the caller's).
    /// On any other error the temporary file is removed as well (by Drop).
    pub fn commit(
        mut self,
        expected: &blake3::Hash,
        actual: &blake3::Hash,
    ) -> Result<(), CommitError> {
        // `blake3::Hash` compares in constant time.
        if actual != expected {
            return Err(CommitError::Mismatch {
                expected: expected.to_hex().to_string(),
                actual: actual.to_hex().to_string(),
            });
        }
        let temp = self.temp_path.display().to_string();
        self.file.sync_all().map_err(|e| CommitError::Io(temp, e))?;
        std::fs::rename(&self.temp_path, &self.final_path)
            .map_err(|e| CommitError::Io(self.final_path.display().to_string(), e))?;
        self.finished = true;
        // The rename is durable only once the directory entry is on disk.
        let dir = parent_dir(&self.final_path);
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| CommitError::Io(dir.display().to_string(), e))
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.finished {
            // Nothing useful to do if it is already gone.
            let _ = std::fs::remove_file(&self.temp_path);
        }
    }
}
