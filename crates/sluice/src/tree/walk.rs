//! The sending end's listing: sources (files or, with `recursive`, directory trees) become a
//! manifest, in a stable order (names sorted, each directory before what it holds).

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::manifest::{Entry, EntryKind, MAX_ENTRIES};
use crate::files::Confined;

pub use sluice_session::options::Links;

/// How to list the sources.
#[derive(Debug, Clone, Default)]
pub struct WalkOptions {
    /// Descend into directories (else a directory source is an error).
    pub recursive: bool,
    /// Symbolic links inside the trees.
    pub links: Links,
    /// Followed links must resolve inside this directory (a server's root).
    pub confine: Option<PathBuf>,
}

/// A listing: the manifest, and where each file's bytes are.
#[derive(Debug, Default)]
pub struct Outgoing {
    /// What the receiver creates, in order.
    pub entries: Vec<Entry>,
    /// The local path of each `File` entry, in manifest order.
    pub files: Vec<PathBuf>,
    /// What was left out, and why (for the user).
    pub skipped: Vec<String>,
    /// How the files are opened: beneath the walk's `confine` root, or by path.
    pub fs: Confined,
}

/// Why the sources could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// A source does not exist.
    #[error("{0}: no such file or directory")]
    NotFound(String),
    /// A directory source without `recursive`.
    #[error("{0} is a directory: copy it with -r")]
    IsDirectory(String),
    /// More than [`MAX_ENTRIES`] entries.
    #[error("more than {MAX_ENTRIES} files and directories in one transfer")]
    TooMany,
    /// A source has no name to give it at the destination, or its name is not UTF-8.
    #[error("{0}: {1}")]
    BadSource(String, &'static str),
    /// Reading the file system failed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// Lists `sources` (each at its own name at the destination) under `options`.
///
/// With `options.confine`, every directory read and every metadata lookup goes through a handle
/// opened beneath that root ([`Confined`]), so a directory swapped for a link out during the
/// walk is refused rather than listed.
pub fn walk(sources: &[PathBuf], options: &WalkOptions) -> Result<Outgoing, WalkError> {
    let fs = Confined::new(options.confine.as_deref())
        .map_err(|e| WalkError::Io("the served directory".into(), e))?;
    let mut out = Outgoing { fs: fs.clone(), ..Outgoing::default() };
    let mut visited = HashSet::new();
    for source in sources {
        let shown = || source.display().to_string();
        let meta = fs.metadata(source).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => WalkError::NotFound(shown()),
            _ => WalkError::Io(shown(), e),
        })?;
        let name = source_name(source)?;
        if meta.is_dir() && !options.recursive {
            return Err(WalkError::IsDirectory(shown()));
        }
        add(&fs, &mut out, &mut visited, options, source, name, &meta)?;
    }
    Ok(out)
}

/// The name a source gets at the destination: its last component (`.`, `..` and `/` resolved).
fn source_name(source: &Path) -> Result<String, WalkError> {
    let shown = || source.display().to_string();
    let named = match source.file_name() {
        Some(name) => PathBuf::from(name),
        None => source.canonicalize().map_err(|e| WalkError::Io(shown(), e))?,
    };
    let name = named.file_name().ok_or(WalkError::BadSource(shown(), "it has no name"))?;
    name.to_str()
        .map(str::to_owned)
        .ok_or(WalkError::BadSource(shown(), "its name is not valid UTF-8"))
}

/// Adds `path` (whose metadata, links followed, is `meta`) as `rel`, and what it holds.
fn add(
    fs: &Confined,
    out: &mut Outgoing,
    visited: &mut HashSet<(u64, u64)>,
    options: &WalkOptions,
    path: &Path,
    rel: String,
    meta: &std::fs::Metadata,
) -> Result<(), WalkError> {
    // Depth first with an explicit stack: a deep tree cannot overflow the thread's stack.
    let mut stack = vec![(path.to_owned(), rel, meta.clone())];
    while let Some((path, rel, meta)) = stack.pop() {
        if out.entries.len() >= MAX_ENTRIES {
            return Err(WalkError::TooMany);
        }
        if !meta.is_dir() {
            add_leaf(out, path, rel, &meta)?;
            continue;
        }
        if !visited.insert((meta.dev(), meta.ino())) {
            out.skipped.push(format!("{rel}: a directory already copied (a link loop?)"));
            continue;
        }
        out.entries.push(Entry {
            path: rel.clone(),
            kind: EntryKind::Dir,
            size: 0,
            mtime: meta.mtime(),
            mode: meta.permissions().mode() & 0o7777,
            target: None,
            blake3: None,
        });
        let shown = || path.display().to_string();
        let mut children = fs.read_dir(&path).map_err(|e| WalkError::Io(shown(), e))?;
        children.sort();
        let mut dirs = Vec::new();
        for name in children {
            let child = path.join(&name);
            let Some(name) = name.to_str() else {
                out.skipped.push(format!("{}: the name is not valid UTF-8", child.display()));
                continue;
            };
            let child_rel = format!("{rel}/{name}");
            let link_meta =
                fs.symlink_metadata(&child).map_err(|e| WalkError::Io(child_rel.clone(), e))?;
            let meta = if link_meta.file_type().is_symlink() {
                match follow_link(fs, out, options, &child, &child_rel, &link_meta)? {
                    Some(meta) => meta,
                    None => continue,
                }
            } else {
                link_meta
            };
            if meta.is_dir() {
                dirs.push((child, child_rel, meta));
            } else {
                // Files go out in name order right away, the directories after them.
                add_leaf(out, child, child_rel, &meta)?;
            }
        }
        stack.extend(dirs.into_iter().rev());
    }
    Ok(())
}

/// A file, or anything else that is not a directory, inside a tree.
fn add_leaf(
    out: &mut Outgoing,
    path: PathBuf,
    rel: String,
    meta: &std::fs::Metadata,
) -> Result<(), WalkError> {
    if out.entries.len() >= MAX_ENTRIES {
        return Err(WalkError::TooMany);
    }
    if !meta.is_file() {
        out.skipped.push(format!("{rel}: not a regular file, directory or link"));
        return Ok(());
    }
    out.entries.push(Entry {
        path: rel,
        kind: EntryKind::File,
        size: meta.len(),
        mtime: meta.mtime(),
        mode: meta.permissions().mode() & 0o7777,
        target: None,
        blake3: None,
    });
    out.files.push(path);
    Ok(())
}

/// A link inside a tree under the policy: `Some(meta)` of what to move in its place (its
/// target, when followed), or `None` when it was recorded as a link or left out.
fn follow_link(
    fs: &Confined,
    out: &mut Outgoing,
    options: &WalkOptions,
    link: &Path,
    rel: &str,
    link_meta: &std::fs::Metadata,
) -> Result<Option<std::fs::Metadata>, WalkError> {
    match options.links {
        Links::Skip => {
            out.skipped.push(format!("{rel}: a symbolic link (--links skip)"));
            Ok(None)
        }
        Links::Copy => {
            let target = fs.read_link(link).map_err(|e| WalkError::Io(rel.to_owned(), e))?;
            match target.to_str() {
                Some(t) => out.entries.push(Entry {
                    path: rel.to_owned(),
                    kind: EntryKind::Symlink,
                    size: 0,
                    mtime: link_meta.mtime(),
                    mode: 0o777,
                    target: Some(t.to_owned()),
                    blake3: None,
                }),
                None => out.skipped.push(format!("{rel}: the link's target is not valid UTF-8")),
            }
            Ok(None)
        }
        Links::Follow => {
            if let Some(root) = &options.confine {
                let inside = link.canonicalize().is_ok_and(|p| p.starts_with(root));
                if !inside {
                    out.skipped.push(format!("{rel}: a link leading outside the served directory"));
                    return Ok(None);
                }
            }
            match fs.metadata(link) {
                Ok(meta) => Ok(Some(meta)),
                Err(_) => {
                    out.skipped.push(format!("{rel}: a dangling symbolic link"));
                    Ok(None)
                }
            }
        }
    }
}
