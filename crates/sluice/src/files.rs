//! The file plane: paths confined to a root, the sender's BLAKE3 of what it announced, and the
//! names of the temporary files a receiver writes into ([`crate::tree::Incoming`]).
//!
//! Path confinement is checked by resolving the path as it stands on disk
//! ([`resolve_under_root`]). That leaves a time-of-check to time-of-use window: whoever can write
//! inside the root can swap a directory for a symlink to elsewhere between the check and the
//! use. A server therefore opens the file contents it reads and writes, and takes every step of
//! receiving (directories, temporary files, renames, links, resume records, removals),
//! relative to a handle of the root opened by the kernel's `openat2(RESOLVE_BENEATH)`
//! ([`Beneath`], [`Confined`]), and walks and lists trees the same way: a path that has come to
//! lead outside by then is refused.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fd::OwnedFd;

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
        use rustix::fs::OFlags;
        let flags = if write { OFlags::RDWR } else { OFlags::RDONLY } | OFlags::CLOEXEC;
        self.resolving(path, |p| self.open_flags(p, flags)).map(File::from)
    }

    /// The directory holding `path`, opened beneath the root (as a path handle for the `*at`
    /// calls), and `path`'s last component.
    fn parent<'p>(&self, path: &'p Path) -> io::Result<(OwnedFd, &'p std::ffi::OsStr)> {
        use rustix::fs::OFlags;
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{} names no file", path.display()))
        })?;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = self.resolving(parent_dir(path), |p| self.open_flags(p, flags))?;
        Ok((dir, name))
    }

    /// `open(path)`; when the kernel refuses a path through an absolute link, `open` of where
    /// it leads now, if that is still beneath the root.
    fn resolving<T>(&self, path: &Path, open: impl Fn(&Path) -> io::Result<T>) -> io::Result<T> {
        let xdev = |e: &io::Error| e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error());
        match open(path) {
            Err(e) if xdev(&e) => match open(&path.canonicalize()?) {
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

    /// `path` opened with `flags` relative to the root's handle, never resolving out of it.
    fn open_flags(&self, path: &Path, flags: rustix::fs::OFlags) -> io::Result<OwnedFd> {
        use rustix::fs::{Mode, ResolveFlags};
        let relative = path.strip_prefix(&self.path).map_err(|_| self.outside(path))?;
        let relative = if relative.as_os_str().is_empty() { Path::new(".") } else { relative };
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(&self.dir, relative, flags, Mode::empty(), resolve) {
            Ok(fd) => Ok(fd),
            // Kernels before 5.6 have no openat2: open by path, as checked.
            Err(rustix::io::Errno::NOSYS) => Ok(rustix::fs::open(path, flags, Mode::empty())?),
            Err(e) => Err(e.into()),
        }
    }
}

/// The file-system steps of receiving files, by path, or, beneath a root (a server's), through
/// handles of their directories opened beneath it: a directory swapped for a link out between
/// the plan and these steps is refused rather than followed. The last component is never
/// followed when creating.
#[derive(Debug, Clone, Default)]
pub struct Confined(Option<Arc<Beneath>>);

impl Confined {
    /// Steps beneath `root`, or by path when there is none.
    pub fn new(root: Option<&Path>) -> io::Result<Confined> {
        Ok(Confined(root.map(Beneath::new).transpose()?.map(Arc::new)))
    }

    /// Creates the directory `path` (mode 0777 less the umask).
    pub fn create_dir(&self, path: &Path) -> io::Result<()> {
        match &self.0 {
            None => std::fs::create_dir(path),
            Some(b) => {
                let (dir, name) = b.parent(path)?;
                Ok(rustix::fs::mkdirat(&dir, name, rustix::fs::Mode::from_raw_mode(0o777))?)
            }
        }
    }

    /// Creates the new file `path` (it must not exist), readable and writable, with `mode`.
    pub fn create_new(&self, path: &Path, mode: u32) -> io::Result<File> {
        use rustix::fs::{Mode, OFlags};
        match &self.0 {
            None => {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(path)
            }
            Some(b) => {
                let (dir, name) = b.parent(path)?;
                let flags = OFlags::RDWR
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC;
                Ok(File::from(rustix::fs::openat(&dir, name, flags, Mode::from_raw_mode(mode))?))
            }
        }
    }

    /// Opens the existing file or directory `path`, for reading or also for writing.
    pub fn open(&self, path: &Path, write: bool) -> io::Result<File> {
        match &self.0 {
            None => std::fs::OpenOptions::new().read(true).write(write).open(path),
            Some(b) => b.open(path, write),
        }
    }

    /// Opens the existing file `path` for reading without following a link at its last
    /// component, and without waiting (a FIFO planted there opens at once).
    pub fn open_no_follow(&self, path: &Path) -> io::Result<File> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file = match &self.0 {
            None => rustix::fs::open(path, flags, Mode::empty())?,
            Some(b) => {
                let (dir, name) = b.parent(path)?;
                rustix::fs::openat(&dir, name, flags, Mode::empty())?
            }
        };
        Ok(File::from(file))
    }

    /// Makes `link` a new name of the existing file `existing` (a hard link; `link` must not
    /// exist).
    pub fn hard_link(&self, existing: &Path, link: &Path) -> io::Result<()> {
        match &self.0 {
            None => std::fs::hard_link(existing, link),
            Some(b) => {
                let flags = rustix::fs::AtFlags::empty();
                let (from_dir, from_name) = b.parent(existing)?;
                let (to_dir, to_name) = match link.file_name() {
                    // One directory: resolved once.
                    Some(name) if parent_dir(link) == parent_dir(existing) => (None, name),
                    _ => {
                        let (dir, name) = b.parent(link)?;
                        (Some(dir), name)
                    }
                };
                let to_dir = to_dir.as_ref().unwrap_or(&from_dir);
                Ok(rustix::fs::linkat(&from_dir, from_name, to_dir, to_name, flags)?)
            }
        }
    }

    /// Removes the file `path` if it is (not following a link) the file `dev`, `ino`; whether
    /// it was.
    pub fn remove_file_if_same(&self, path: &Path, dev: u64, ino: u64) -> io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        match &self.0 {
            None => {
                let meta = std::fs::symlink_metadata(path)?;
                if (meta.dev(), meta.ino()) != (dev, ino) {
                    return Ok(false);
                }
                std::fs::remove_file(path)?;
            }
            Some(b) => {
                use rustix::fs::AtFlags;
                let (dir, name) = b.parent(path)?;
                let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
                if (stat.st_dev, stat.st_ino) != (dev, ino) {
                    return Ok(false);
                }
                rustix::fs::unlinkat(&dir, name, AtFlags::empty())?;
            }
        }
        Ok(true)
    }

    /// Renames `from` to `to`.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match &self.0 {
            None => std::fs::rename(from, to),
            Some(b) => {
                let ((from_dir, from_name), (to_dir, to_name)) = (b.parent(from)?, b.parent(to)?);
                Ok(rustix::fs::renameat(&from_dir, from_name, &to_dir, to_name)?)
            }
        }
    }

    /// Removes the empty directory `path` (a link there is not followed).
    pub fn remove_dir(&self, path: &Path) -> io::Result<()> {
        match &self.0 {
            None => std::fs::remove_dir(path),
            Some(b) => {
                let (dir, name) = b.parent(path)?;
                Ok(rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::REMOVEDIR)?)
            }
        }
    }

    /// Removes the file or link `path` (not a directory).
    pub fn remove_file(&self, path: &Path) -> io::Result<()> {
        match &self.0 {
            None => std::fs::remove_file(path),
            Some(b) => {
                let (dir, name) = b.parent(path)?;
                Ok(rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty())?)
            }
        }
    }

    /// The metadata of what `path` names, links followed (beneath the root).
    pub fn metadata(&self, path: &Path) -> io::Result<std::fs::Metadata> {
        match &self.0 {
            None => std::fs::metadata(path),
            Some(b) => {
                let flags = rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC;
                File::from(b.resolving(path, |p| b.open_flags(p, flags))?).metadata()
            }
        }
    }

    /// Whether `path` names a directory, links followed (beneath the root).
    pub fn is_dir(&self, path: &Path) -> bool {
        self.metadata(path).is_ok_and(|m| m.is_dir())
    }

    /// The metadata of `path` itself (a link is not followed).
    pub fn symlink_metadata(&self, path: &Path) -> io::Result<std::fs::Metadata> {
        use rustix::fs::{Mode, OFlags};
        match &self.0 {
            None => std::fs::symlink_metadata(path),
            // The root itself: it is where everything is beneath.
            Some(b) if path == b.path => {
                File::from(b.open_flags(path, OFlags::PATH | OFlags::CLOEXEC)?).metadata()
            }
            Some(b) => {
                let (dir, name) = b.parent(path)?;
                let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                File::from(rustix::fs::openat(&dir, name, flags, Mode::empty())?).metadata()
            }
        }
    }

    /// The names in the directory `path` (without `.` and `..`), in no particular order.
    pub fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        match &self.0 {
            None => std::fs::read_dir(path)?.map(|e| e.map(|e| e.file_name())).collect(),
            Some(b) => {
                use rustix::fs::OFlags;
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
                let dir = b.resolving(path, |p| b.open_flags(p, flags))?;
                let mut names = Vec::new();
                for entry in rustix::fs::Dir::read_from(&dir)? {
                    let name = entry?.file_name().to_bytes().to_vec();
                    if name != b"." && name != b".." {
                        names.push(OsString::from_vec(name));
                    }
                }
                Ok(names)
            }
        }
    }

    /// What the link `path` says.
    pub fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        match &self.0 {
            None => std::fs::read_link(path),
            Some(b) => {
                let (dir, name) = b.parent(path)?;
                let target = rustix::fs::readlinkat(&dir, name, Vec::new())?;
                Ok(PathBuf::from(OsString::from_vec(target.into_bytes())))
            }
        }
    }

    /// Makes `path` a symbolic link to `target`.
    pub fn symlink(&self, target: &str, path: &Path) -> io::Result<()> {
        match &self.0 {
            None => std::os::unix::fs::symlink(target, path),
            Some(b) => {
                let (dir, name) = b.parent(path)?;
                Ok(rustix::fs::symlinkat(target, &dir, name)?)
            }
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
/// extents' hashes: it is split at the extent's end. Optionally also the BLAKE3 of everything
/// read, across the extents ([`FileHasher::with_whole`]).
pub(crate) struct FileHasher {
    hasher: blake3::Hasher,
    /// Everything read, from `start` on, when asked for.
    whole: Option<blake3::Hasher>,
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
            whole: None,
            buf: vec![0u8; HASH_BLOCK_BYTES],
            offset: start,
            hashes: Vec::with_capacity(ends.len()),
            ends,
        };
        hasher.close_extents();
        hasher
    }

    /// The same, and the BLAKE3 of everything read across the extents too
    /// ([`FileHasher::whole`]).
    pub(crate) fn with_whole(start: u64, ends: Vec<u64>) -> Self {
        Self { whole: Some(blake3::Hasher::new()), ..Self::new(start, ends) }
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
            if let Some(whole) = &mut self.whole {
                whole.update(&self.buf[..n]);
            }
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

    /// The BLAKE3 of everything read so far, when made [`FileHasher::with_whole`].
    pub(crate) fn whole(&self) -> Option<blake3::Hash> {
        self.whole.as_ref().map(blake3::Hasher::finalize)
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
