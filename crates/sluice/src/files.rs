//! The file plane: paths confined to a root, whole-file BLAKE3, and partial files that only
//! reach their final name after verification.
//!
//! CONTRACT STUB (issue 3): helper "datapath" implements it; the signatures are fixed.

use std::fs::File;
use std::path::{Path, PathBuf};

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
pub fn resolve_under_root(root: &Path, requested: &str) -> Result<PathBuf, PathError> {
    let _ = (root, requested);
    unimplemented!()
}

/// BLAKE3 of a whole file, read from its start.
pub fn hash_file(file: &File) -> std::io::Result<[u8; 32]> {
    let _ = file;
    unimplemented!()
}

/// Why a partial file could not be committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The received bytes do not hash to what the sender announced.
    #[error("integrity check failed: expected BLAKE3 {expected}, got {actual}")]
    Mismatch {
        /// Announced hash (hex).
        expected: String,
        /// Hash of what arrived (hex).
        actual: String,
    },
    /// Hashing, syncing or renaming failed.
    #[error("could not finish {0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// A file being received under a temporary name beside its final path (owner-only
/// permissions). Dropped without `commit`, the temporary file is removed.
#[derive(Debug)]
pub struct PartialFile {
    file: File,
    temp_path: PathBuf,
    final_path: PathBuf,
}

impl PartialFile {
    /// Creates the temporary file for `final_path`, sized to `size` bytes.
    pub fn create(final_path: &Path, size: u64) -> std::io::Result<Self> {
        let _ = (final_path, size);
        unimplemented!()
    }
    /// The open temporary file (write at offsets).
    pub fn file(&self) -> &File {
        &self.file
    }
    /// Where the bytes are until commit.
    pub fn temp_path(&self) -> &Path {
        &self.temp_path
    }
    /// Hashes the temporary file, compares with `expected`, syncs it, renames it onto the final
    /// path and syncs the directory. On a mismatch the temporary file is removed.
    pub fn commit(self, expected: &[u8; 32]) -> Result<(), CommitError> {
        let _ = (expected, &self.final_path);
        unimplemented!()
    }
}
