//! The manifest: what a transfer moves, as the sender lists it. It travels in `Manifest`
//! messages before the data, so one request moves a whole tree with no round trip per file.

use serde::{Deserialize, Serialize};

/// The most entries one transfer may list: a peer cannot make the other end hold more.
pub const MAX_ENTRIES: usize = 2_000_000;
/// The most path and link-target text one manifest may carry (with [`MAX_ENTRIES`], what a peer
/// can make the other end hold for one transfer).
pub const MAX_TEXT_BYTES: usize = 256 << 20;
/// Longest entry path accepted (PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;

/// One thing a transfer creates at its destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Where it goes, relative to the destination: `/`-separated normal components, the first
    /// being the source's own name (`tree/a/b.dat` for `cp -r tree`).
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// Bytes of a file (0 for the others).
    #[serde(default)]
    pub size: u64,
    /// Modification time, seconds since the Unix epoch.
    #[serde(default)]
    pub mtime: i64,
    /// Permission bits (`st_mode & 0o7777`).
    #[serde(default)]
    pub mode: u32,
    /// A symbolic link's target, as the link says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// BLAKE3 of a file, hex, when the receiver asked to compare by content (`--checksum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
}

/// Kinds of manifest entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file: its bytes move on the data channels.
    File,
    /// A directory (listed before what it holds).
    Dir,
    /// A symbolic link, created as it is (`--links copy`).
    Symlink,
}

/// Why an entry from a peer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad path {path:?} in the manifest: {why}")]
pub struct BadEntry {
    /// The path as sent.
    pub path: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The components of an entry's path, checked: relative, `/`-separated, no empty, `.` or `..`
/// component, no NUL, at most [`MAX_PATH_BYTES`]. Anything a peer sends goes through this
/// before it names a file.
pub fn components(path: &str) -> Result<Vec<&str>, BadEntry> {
    let bad = |why| BadEntry { path: path.to_owned(), why };
    if path.is_empty() {
        return Err(bad("it is empty"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(bad("it is longer than 4096 bytes"));
    }
    if path.contains('\0') {
        return Err(bad("it contains a NUL byte"));
    }
    if path.starts_with('/') {
        return Err(bad("it is absolute"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts {
        match *part {
            "" => return Err(bad("it has an empty component")),
            "." | ".." => return Err(bad("it has a '.' or '..' component")),
            p if p.len() > 255 => return Err(bad("a component is longer than 255 bytes")),
            _ => {}
        }
    }
    Ok(parts)
}

/// Checks a peer's whole manifest: every path ([`components`]), a symbolic link's target
/// present and free of NUL, nothing listed twice, and every entry's parent listed before it as
/// a directory (the top-level names excepted).
pub fn check(entries: &[Entry]) -> Result<(), BadEntry> {
    let mut dirs = std::collections::HashSet::new();
    let mut seen = std::collections::HashSet::new();
    for entry in entries {
        let bad = |why| BadEntry { path: entry.path.clone(), why };
        let parts = components(&entry.path)?;
        if !seen.insert(entry.path.as_str()) {
            return Err(bad("it is listed twice"));
        }
        if parts.len() > 1 {
            let parent = &entry.path[..entry.path.len() - parts[parts.len() - 1].len() - 1];
            if !dirs.contains(parent) {
                return Err(bad("its directory is not listed before it"));
            }
        }
        match entry.kind {
            EntryKind::Dir => {
                dirs.insert(entry.path.as_str());
            }
            EntryKind::Symlink => match &entry.target {
                Some(t) if !t.is_empty() && !t.contains('\0') => {}
                _ => return Err(bad("a symbolic link without a valid target")),
            },
            EntryKind::File => {}
        }
        if entry.kind != EntryKind::File && entry.size != 0 {
            return Err(bad("only files have a size"));
        }
    }
    Ok(())
}

/// The file entries' indices as ranges `[start, end)` of the file numbering (the order of
/// the files in the manifest), compact on the wire.
pub fn to_ranges(indices: impl IntoIterator<Item = u32>) -> Vec<[u32; 2]> {
    let mut ranges: Vec<[u32; 2]> = Vec::new();
    for i in indices {
        match ranges.last_mut() {
            Some(last) if last[1] == i => last[1] = i + 1,
            _ => ranges.push([i, i + 1]),
        }
    }
    ranges
}

/// The indices of [`to_ranges`], checked against `count` files: increasing, inside, not
/// overlapping.
pub fn from_ranges(ranges: &[[u32; 2]], count: usize) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &[start, end] in ranges {
        if start < next || end < start || end as usize > count {
            return Err(format!("file range {start}..{end} is out of order or past {count}"));
        }
        out.extend(start..end);
        next = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: EntryKind) -> Entry {
        Entry {
            path: path.into(),
            kind,
            size: 0,
            mtime: 0,
            mode: 0o644,
            target: None,
            blake3: None,
        }
    }

    #[test]
    fn paths_from_a_peer_are_checked() {
        assert_eq!(components("a/b c/-d\ne").unwrap(), vec!["a", "b c", "-d\ne"]);
        for bad in ["", "/a", "a//b", "a/./b", "../a", "a/..", "a/", "a\0b", "."] {
            assert!(components(bad).is_err(), "{bad:?} accepted");
        }
        assert!(components(&"x".repeat(256)).is_err());
    }

    #[test]
    fn a_manifest_lists_parents_first_and_nothing_twice() {
        let d = entry("t", EntryKind::Dir);
        let f = entry("t/f", EntryKind::File);
        assert!(check(&[d.clone(), f.clone()]).is_ok());
        assert!(check(&[f.clone(), d.clone()]).is_err());
        assert!(check(&[d.clone(), f.clone(), f.clone()]).is_err());
        assert!(check(&[entry("t", EntryKind::File), f.clone()]).is_err());
        let mut link = entry("t/l", EntryKind::Symlink);
        assert!(check(&[d.clone(), link.clone()]).is_err());
        link.target = Some("../x".into());
        assert!(check(&[d.clone(), link]).is_ok());
        let mut sized_dir = d.clone();
        sized_dir.size = 1;
        assert!(check(&[sized_dir]).is_err());
    }

    #[test]
    fn ranges_round_trip_and_refuse_disorder() {
        let idx = vec![0, 1, 2, 5, 7, 8];
        let r = to_ranges(idx.clone());
        assert_eq!(r, vec![[0, 3], [5, 6], [7, 9]]);
        assert_eq!(from_ranges(&r, 9).unwrap(), idx);
        assert!(from_ranges(&r, 8).is_err());
        assert!(from_ranges(&[[3, 4], [1, 2]], 9).is_err());
        assert!(from_ranges(&[[3, 2]], 9).is_err());
        assert!(from_ranges(&[], 0).unwrap().is_empty());
    }
}
