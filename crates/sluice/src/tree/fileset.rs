//! Many files as one [`Store`]: laid end to end in one offset space, in manifest order, so
//! the data channels move a tree exactly as they move one file (chunks, first come first
//! served, payloads placed at their offsets), with no per-file set-up on the path.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::datapath::Store;
use crate::files::Confined;

/// Files kept open at once: a tree of a million files must not need a million descriptors.
/// Reads and writes move through the offset space mostly in order, so a small window of open
/// files serves nearly every call; the oldest is closed first.
pub const MAX_OPEN_FILES: usize = 128;

/// Files laid end to end: file `i` holds offsets `base(i) .. base(i) + size(i)`.
#[derive(Debug)]
pub struct FileSet {
    paths: Vec<PathBuf>,
    sizes: Vec<u64>,
    bases: Vec<u64>,
    writable: bool,
    open: Mutex<OpenFiles>,
    /// How the files are opened (beneath a server's root, or by path).
    fs: Confined,
}

#[derive(Debug, Default)]
struct OpenFiles {
    by_index: HashMap<usize, Arc<File>>,
    order: VecDeque<usize>,
}

impl FileSet {
    /// The files at `paths` with the sizes the transfer moves; `writable` opens them for
    /// writing too (a receiver's temporary files, which must exist already).
    pub fn new(files: Vec<(PathBuf, u64)>, writable: bool) -> Self {
        let mut bases = Vec::with_capacity(files.len());
        let mut at = 0u64;
        let (paths, sizes): (Vec<_>, Vec<_>) = files.into_iter().unzip();
        for &size in &sizes {
            bases.push(at);
            at = at.saturating_add(size);
        }
        Self { paths, sizes, bases, writable, open: Mutex::default(), fs: Confined::default() }
    }

    /// These files, opened through `fs` (beneath a server's root: see [`Confined`]).
    pub fn confined(mut self, fs: Confined) -> Self {
        self.fs = fs;
        self
    }

    /// Bytes of all files.
    pub fn total(&self) -> u64 {
        self.bases.last().map_or(0, |b| b + self.sizes[self.sizes.len() - 1])
    }

    /// File `i`: its path, size and first offset in the offset space.
    pub fn file_at(&self, i: usize) -> Option<(&std::path::Path, u64, u64)> {
        Some((self.paths.get(i)?.as_path(), self.sizes[i], self.bases[i]))
    }

    /// Files in the set.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether the set has no file.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Where each file ends in the offset space (the extents a receiver hashes).
    pub fn ends(&self) -> Vec<u64> {
        self.bases.iter().zip(&self.sizes).map(|(b, s)| b + s).collect()
    }

    /// The file holding `offset` and the offset within it, or `None` past the end.
    fn locate(&self, offset: u64) -> Option<(usize, u64)> {
        let i = self.bases.partition_point(|&b| b <= offset).checked_sub(1)?;
        let within = offset - self.bases[i];
        (within < self.sizes[i]).then_some((i, within))
    }

    fn file(&self, i: usize) -> io::Result<Arc<File>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(file) = open.by_index.get(&i) {
            return Ok(file.clone());
        }
        let file = self.fs.open(&self.paths[i], self.writable).map_err(|e| self.context(i, e))?;
        let file = Arc::new(file);
        open.by_index.insert(i, file.clone());
        open.order.push_back(i);
        while open.order.len() > MAX_OPEN_FILES {
            if let Some(old) = open.order.pop_front() {
                open.by_index.remove(&old);
            }
        }
        Ok(file)
    }

    fn context(&self, i: usize, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("{}: {e}", self.paths[i].display()))
    }
}

impl Store for FileSet {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let Some((i, within)) = self.locate(offset) else { return Ok(0) };
        let n = (self.sizes[i] - within).min(buf.len() as u64) as usize;
        match FileExt::read_at(&*self.file(i)?, &mut buf[..n], within) {
            Ok(0) if n > 0 => Err(self.context(
                i,
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("shorter than the {} bytes announced (it shrank)", self.sizes[i]),
                ),
            )),
            Ok(got) => Ok(got),
            Err(e) => Err(self.context(i, e)),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let Some((i, within)) = self.locate(offset) else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a write past the last file"));
        };
        let n = (self.sizes[i] - within).min(buf.len() as u64) as usize;
        FileExt::write_at(&*self.file(i)?, &buf[..n], within).map_err(|e| self.context(i, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::{read_exact_at, write_all_at};

    #[test]
    fn reads_and_writes_span_files_and_skip_empty_ones() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = [3u64, 0, 5, 0, 1];
        let files: Vec<(PathBuf, u64)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let p = dir.path().join(format!("f{i}"));
                std::fs::write(&p, vec![0u8; s as usize]).unwrap();
                (p, s)
            })
            .collect();
        let set = FileSet::new(files.clone(), true);
        assert_eq!(set.total(), 9);
        assert_eq!(set.ends(), vec![3, 3, 8, 8, 9]);
        write_all_at(&set, b"abcdefghi", 0).unwrap();
        assert_eq!(std::fs::read(&files[0].0).unwrap(), b"abc");
        assert_eq!(std::fs::read(&files[2].0).unwrap(), b"defgh");
        assert_eq!(std::fs::read(&files[4].0).unwrap(), b"i");
        let mut back = [0u8; 7];
        read_exact_at(&set, &mut back, 2).unwrap();
        assert_eq!(&back, b"cdefghi");
        assert!(write_all_at(&set, b"j", 9).is_err());
        let mut past = [0u8; 2];
        assert!(read_exact_at(&set, &mut past, 8).is_err());
        // A file that shrank is an error naming it.
        std::fs::write(&files[2].0, b"de").unwrap();
        let reader = FileSet::new(files.clone(), false);
        let err = read_exact_at(&reader, &mut back, 2).unwrap_err();
        assert!(err.to_string().contains("f2"), "{err}");
    }
}
