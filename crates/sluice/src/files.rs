//! The file plane: paths confined to a root, the sender's BLAKE3 of what it announced, and the
//! names of the temporary files a receiver writes into ([`crate::tree::Incoming`]).
//!
//! Path confinement is checked by resolving the path as it stands on disk
//! ([`resolve_under_root`]). That leaves a time-of-check to time-of-use window: whoever can write
//! inside the root can swap a directory for a symlink to elsewhere between the check and the
//! use. The file contents a server reads and writes are therefore opened again, relative to a
//! handle of the root, by the kernel's `openat2(RESOLVE_BENEATH)` ([`Beneath`]): a path that
//! has come to lead outside by then is refused. Metadata steps (walking a tree, renames, links)
//! still go by path.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::datapath::{Store, read_exact_at};

/// A directory that files are opened beneath, by the kernel's rules: no `..` above it, no
/// absolute symbolic link, no link that leads out (`openat2` with `RESOLVE_BENEATH`).
#[derive(Debug)]
pub struct Beneath {
    dir: File,
    path: PathBuf,
}

impl Beneath {
    /// A handle of the directory `root` (canonical).
    pub fn new(root: &Path) -> io::Result<Beneath> {
        Ok(Beneath { dir: File::open(root)?, path: root.to_owned() })
    }

    /// Opens `path` (under the root, as resolved when it was checked), for reading or also for
    /// writing. A path that now leads out of the root is refused (`PermissionDenied`). A path
    /// through an absolute link that stays inside is resolved again and opened beneath too.
    pub fn open(&self, path: &Path, write: bool) -> io::Result<File> {
        let xdev = |e: &io::Error| e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error());
        match self.open_relative(path, write) {
            // An absolute link on the way: where it leads now, if that is still inside.
            Err(e) if xdev(&e) => match self.open_relative(&path.canonicalize()?, write) {
                Err(e) if xdev(&e) => Err(self.outside(path)),
                other => other,
            },
            other => other,
        }
    }

    fn outside(&self, path: &Path) -> io::Error {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} leads outside the served directory", path.display()),
        )
    }

    fn open_relative(&self, path: &Path, write: bool) -> io::Result<File> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let relative = path.strip_prefix(&self.path).map_err(|_| self.outside(path))?;
        let relative = if relative.as_os_str().is_empty() { Path::new(".") } else { relative };
        let flags = if write { OFlags::RDWR } else { OFlags::RDONLY } | OFlags::CLOEXEC;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(&self.dir, relative, flags, Mode::empty(), resolve) {
            Ok(fd) => Ok(File::from(fd)),
            // Kernels before 5.6 have no openat2: open by path, as checked.
            Err(rustix::io::Errno::NOSYS) => {
                std::fs::OpenOptions::new().read(true).write(write).open(path)
            }
            Err(e) => Err(e.into()),
        }
    }
}

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
    Ok(hash_extents(file, 0, vec![len], cancel)?.and_then(|hashes| hashes.first().copied()))
}

/// BLAKE3 of each of the consecutive extents of `store` that start at `start` and end at
/// `ends` (increasing; an extent may be empty): one hash per extent, in order. `None` once
/// `cancel` is set.
pub fn hash_extents(
    store: &dyn Store,
    start: u64,
    ends: Vec<u64>,
    cancel: &AtomicBool,
) -> std::io::Result<Option<Vec<blake3::Hash>>> {
    let end = ends.last().copied().unwrap_or(start);
    let mut hashing = FileHasher::new(start, ends);
    Ok(hashing.read_to(store, end, cancel)?.then(|| hashing.finish()))
}

/// BLAKE3 of consecutive extents of a store, one hash each, fed by positional reads of
/// [`HASH_BLOCK_BYTES`] as far as the caller says the bytes are there. A read never spans two
/// extents' hashes: it is split at the extent's end.
pub(crate) struct FileHasher {
    hasher: blake3::Hasher,
    buf: Vec<u8>,
    offset: u64,
    /// Ends of the extents, increasing; `hashes` holds one hash per extent already passed.
    ends: Vec<u64>,
    hashes: Vec<blake3::Hash>,
}

impl FileHasher {
    /// Hashing from `start`, an extent ending at each of `ends`.
    pub(crate) fn new(start: u64, ends: Vec<u64>) -> Self {
        let mut hasher = Self {
            hasher: blake3::Hasher::new(),
            buf: vec![0u8; HASH_BLOCK_BYTES],
            offset: start,
            hashes: Vec::with_capacity(ends.len()),
            ends,
        };
        hasher.close_extents();
        hasher
    }

    /// Where the next read starts.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads and hashes the bytes up to `end`; false if `cancel` was set on the way.
    pub(crate) fn read_to(
        &mut self,
        store: &dyn Store,
        end: u64,
        cancel: &AtomicBool,
    ) -> std::io::Result<bool> {
        while self.offset < end {
            if cancel.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let extent_end = self.ends.get(self.hashes.len()).copied().unwrap_or(end);
            let n = (end.min(extent_end) - self.offset).min(HASH_BLOCK_BYTES as u64) as usize;
            read_exact_at(store, &mut self.buf[..n], self.offset)?;
            self.hasher.update(&self.buf[..n]);
            self.offset += n as u64;
            self.close_extents();
        }
        Ok(true)
    }

    /// Finishes every extent that ends where the reads have got to.
    fn close_extents(&mut self) {
        while self.ends.get(self.hashes.len()).is_some_and(|&e| e <= self.offset) {
            self.hashes.push(self.hasher.finalize());
            self.hasher.reset();
        }
    }

    /// The hashes of the extents read to their end.
    pub(crate) fn finish(self) -> Vec<blake3::Hash> {
        self.hashes
    }
}

/// Longest file name most Linux file systems accept (NAME_MAX).
const NAME_MAX_BYTES: usize = 255;

/// `.<name>.sluice-part-<hex>`, with `name` shortened if the whole would exceed NAME_MAX.
pub(crate) fn temp_name(final_name: &std::ffi::OsStr, random: u64) -> OsString {
    side_name(final_name, &format!(".sluice-part-{random:016x}"))
}

/// `.<name><suffix>`, a hidden name beside a file's final name, with `name` shortened if the
/// whole would exceed NAME_MAX.
pub(crate) fn side_name(final_name: &std::ffi::OsStr, suffix: &str) -> OsString {
    let room = NAME_MAX_BYTES - 1 - suffix.len();
    let name = final_name.as_bytes();
    let mut bytes = Vec::with_capacity(NAME_MAX_BYTES);
    bytes.push(b'.');
    bytes.extend_from_slice(&name[..name.len().min(room)]);
    bytes.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(bytes)
}

pub(crate) fn random_u64() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    aws_lc_rs::rand::fill(&mut bytes).map_err(|_| io::Error::other("no system randomness"))?;
    Ok(u64::from_le_bytes(bytes))
}

/// The directory `path` lives in (`.` for a bare name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}
