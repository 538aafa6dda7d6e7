//! Make a folder, rename, delete: beneath the token's root, with its `write` right.

use std::path::Path;

use crate::files::Confined;
use crate::session::access::open_error;
use crate::session::{Access, SessionError};

/// Refuses the token's root itself as the target of a change (renaming or deleting it).
fn not_root(access: &Access, path: &Path, requested: &str) -> Result<(), SessionError> {
    if path == access.root() {
        return Err(SessionError::Refused(format!("{requested}: the root itself cannot change")));
    }
    Ok(())
}

/// Makes the folder `requested` (its parent must exist; it must not).
pub fn make_dir(access: &Access, requested: &str) -> Result<(), SessionError> {
    access.require(|r| r.write, "write (make folders)")?;
    let path = access.resolve_no_follow(requested)?;
    not_root(access, &path, requested)?;
    let fs = access.confined(requested)?;
    fs.create_dir(&path).map_err(|e| exists_or(requested, e))
}

/// Renames `from` to `to` (which must not exist), files and folders alike.
pub fn rename(access: &Access, from: &str, to: &str) -> Result<(), SessionError> {
    access.require(|r| r.write, "write (rename)")?;
    let (from_path, to_path) = (access.resolve_no_follow(from)?, access.resolve_no_follow(to)?);
    not_root(access, &from_path, from)?;
    not_root(access, &to_path, to)?;
    let fs = access.confined(from)?;
    fs.symlink_metadata(&from_path).map_err(|e| open_error(from, e))?;
    if fs.symlink_metadata(&to_path).is_ok() {
        return Err(SessionError::Refused(format!("{to}: exists")));
    }
    if to_path.starts_with(&from_path) {
        return Err(SessionError::Refused(format!("{to}: inside {from}")));
    }
    fs.rename(&from_path, &to_path).map_err(|e| open_error(from, e))
}

/// Deletes the file or link `requested`, or the folder with everything in it (links inside are
/// removed, never followed). Returns how many entries went.
pub fn delete(access: &Access, requested: &str) -> Result<u64, SessionError> {
    access.require(|r| r.write, "write (delete)")?;
    let path = access.resolve_no_follow(requested)?;
    not_root(access, &path, requested)?;
    let fs = access.confined(requested)?;
    let meta = fs.symlink_metadata(&path).map_err(|e| open_error(requested, e))?;
    if !meta.is_dir() {
        fs.remove_file(&path).map_err(|e| open_error(requested, e))?;
        return Ok(1);
    }
    remove_tree(&fs, &path).map_err(|e| open_error(requested, e))
}

/// Removes the directory `top` and everything beneath it, depth first, with an explicit stack
/// (no recursion: a deep tree cannot overflow the stack).
fn remove_tree(fs: &Confined, top: &Path) -> std::io::Result<u64> {
    let mut removed = 0;
    // Each directory is pushed once to be emptied, then again to be removed.
    let mut stack = vec![(top.to_owned(), false)];
    while let Some((dir, emptied)) = stack.pop() {
        if emptied {
            fs.remove_dir(&dir)?;
            removed += 1;
            continue;
        }
        stack.push((dir.clone(), true));
        for name in fs.read_dir(&dir)? {
            let child = dir.join(name);
            if fs.symlink_metadata(&child)?.is_dir() {
                stack.push((child, false));
            } else {
                fs.remove_file(&child)?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// `refused` for a name already taken, else as [`open_error`].
pub(super) fn exists_or(requested: &str, e: std::io::Error) -> SessionError {
    if e.kind() == std::io::ErrorKind::AlreadyExists {
        SessionError::Refused(format!("{requested}: exists"))
    } else {
        open_error(requested, e)
    }
}
