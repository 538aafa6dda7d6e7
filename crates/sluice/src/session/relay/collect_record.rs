//! A relayed upload's collection as the receiving server's state directory keeps it while it
//! runs or stalls: `collections/<transfer>.json`, owner-only, rewritten as blocks are placed
//! and written, removed when the job ends. It holds what a restarted server needs to go on
//! without the sender: the blocks' key (from the sender's session, which a restart ends), the
//! relays with their capabilities, the part file, and where each block is. A tree's manifest
//! and temporary files are kept beside it (`<transfer>.tree`, written once: they do not
//! change). The key opens only this transfer's blocks, which are bound for this server's disk
//! anyway; the relays still hold none. Written and read as a third-party job's record is
//! (`job_log::keep_record`, `job_log::kept_records`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sluice_session::manifest::Entry;
use sluice_session::options::Overwrite;

/// The directory of the state directory where running and stalled collections are kept.
pub(crate) const COLLECTIONS_DIR: &str = "collections";

/// A block's place in a record: [`MISSING`], [`WRITTEN`], or the index of the relay that
/// holds it.
pub(crate) type Spot = i64;
/// Placed nowhere yet, or lost where it was.
pub(crate) const MISSING: Spot = -1;
/// In the part file.
pub(crate) const WRITTEN: Spot = -2;

/// A relay as a record keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RelayRecord {
    pub(crate) address: String,
    pub(crate) fingerprint: String,
    /// The collector's capability there, hex.
    pub(crate) capability: String,
}

/// One collection as the state directory keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The transfer's id, hex.
    pub(crate) transfer: String,
    /// The blocks' key and IV, hex.
    pub(crate) key: String,
    pub(crate) iv: String,
    pub(crate) size: u64,
    pub(crate) block_bytes: u64,
    /// The sender's token, by its digest (hex; its index in the token file may change), and its
    /// root then: a restart goes on only while that token still may write beneath the same root.
    pub(crate) token: String,
    pub(crate) root: PathBuf,
    /// The destination and its part file.
    pub(crate) dest: PathBuf,
    pub(crate) part: PathBuf,
    /// The destination as the sender named it, and when the job started (for `sluice jobs`).
    pub(crate) named: String,
    pub(crate) started: u64,
    pub(crate) relays: Vec<RelayRecord>,
    /// Each block's [`Spot`], run-length coded: `[spot, count]` pairs in block order.
    pub(crate) blocks: Vec<[i64; 2]>,
    /// Blocks another relay holds a copy of too (`--relay-copies 2`).
    #[serde(default)]
    pub(crate) elsewhere: HashMap<u64, Vec<u32>>,
    /// The sender's BLAKE3 of the file, hex, once it sent it.
    pub(crate) digest: Option<String>,
    /// The digest of a run this job took over, hex: the sender's must be the same.
    pub(crate) expect: Option<String>,
    /// Whether the sender said every block is placed.
    pub(crate) sent: bool,
    /// Set once the job stalled: why, and when (Unix seconds).
    pub(crate) stalled: Option<(String, u64)>,
    /// One file's permission bits at the sender (it lands 0755 or 0644 by them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<u32>,
    /// Keep the sender's permission bits and modification time (`--preserve`); a file's time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) preserve: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mtime: Option<i64>,
    /// Whether it is a tree's (its manifest and temporary files are in its [`TreeRecord`]).
    #[serde(default)]
    pub(crate) tree: bool,
    /// A tree's temporary files, in records of a server that did not resume trees after a
    /// restart (a restart removes them). A tree's are now in its [`TreeRecord`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) temps: Vec<PathBuf>,
}

/// A tree's collection, beside its [`Record`] ([`tree_path`]): what a restart plans the tree
/// again from, and the temporary files that plan takes up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TreeRecord {
    /// The manifest as the sender sent it.
    pub(crate) entries: Vec<Entry>,
    /// The sender's overwrite policy.
    pub(crate) overwrite: Overwrite,
    /// Whether the files keep the sender's bits and times (`--preserve`).
    #[serde(default)]
    pub(crate) preserve: bool,
    /// Whether `if-different` compared content (`--checksum`).
    #[serde(default)]
    pub(crate) checksum: bool,
    /// One per file, in the order the data moves.
    pub(crate) temps: Vec<PathBuf>,
}

/// Where the [`TreeRecord`] of the record at `record` is kept.
pub(crate) fn tree_path(record: &Path) -> PathBuf {
    record.with_extension("tree")
}

/// Removes the record at `record` and its tree's, if any.
pub(crate) fn remove(record: &Path) {
    let _ = std::fs::remove_file(record);
    let _ = std::fs::remove_file(tree_path(record));
}

/// `spots` run-length coded.
pub(crate) fn runs(spots: impl IntoIterator<Item = Spot>) -> Vec<[i64; 2]> {
    let mut out: Vec<[i64; 2]> = Vec::new();
    for spot in spots {
        match out.last_mut() {
            Some(last) if last[0] == spot => last[1] += 1,
            _ => out.push([spot, 1]),
        }
    }
    out
}

/// The spots of `runs`, when they are `count` of them and each is a spot of a record with
/// `relays` relays.
pub(crate) fn spots(runs: &[[i64; 2]], count: u64, relays: usize) -> Option<Vec<Spot>> {
    let mut out = Vec::new();
    for &[spot, n] in runs {
        let known = spot == MISSING || spot == WRITTEN || (0..relays as i64).contains(&spot);
        if !known || n < 0 || out.len() as u64 + n as u64 > count {
            return None;
        }
        out.extend(std::iter::repeat_n(spot, n as usize));
    }
    (out.len() as u64 == count).then_some(out)
}

/// Where the record of transfer `hex` is kept in `dir` (the id is 32 hex digits, checked when
/// the transfer began, so no client text becomes a path).
pub(crate) fn path_of(dir: &Path, hex: &str) -> PathBuf {
    dir.join(format!("{hex}.json"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::job_log::{keep_record, kept_records};

    #[test]
    fn spots_round_trip_run_length_coded_and_bad_runs_are_refused() {
        let spots_in = vec![WRITTEN, WRITTEN, 0, 0, 0, 1, MISSING, 1];
        let coded = runs(spots_in.clone());
        assert_eq!(coded, vec![[WRITTEN, 2], [0, 3], [1, 1], [MISSING, 1], [1, 1]]);
        assert_eq!(spots(&coded, 8, 2), Some(spots_in));
        assert_eq!(spots(&coded, 9, 2), None, "too few");
        assert_eq!(spots(&coded, 7, 2), None, "too many");
        assert_eq!(spots(&coded, 8, 1), None, "relay 1 of one relay");
        assert_eq!(spots(&[[-3, 1]], 1, 2), None, "no such spot");
        assert_eq!(spots(&[[0, -1]], 0, 2), None, "a negative count");
        assert_eq!(spots(&[], 0, 0), Some(Vec::new()));
    }

    #[test]
    fn a_record_is_kept_owner_only_and_read_back_and_a_bad_one_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join(COLLECTIONS_DIR);
        let record = Record {
            transfer: "ab".repeat(16),
            key: "01".repeat(32),
            iv: "02".repeat(12),
            size: 10,
            block_bytes: 65_536,
            token: "04".repeat(32),
            root: "/srv".into(),
            dest: "/srv/f".into(),
            part: "/srv/.f.abab.relayed".into(),
            named: "f".into(),
            started: 1,
            relays: vec![RelayRecord {
                address: "127.0.0.1:1".into(),
                fingerprint: "x".into(),
                capability: "03".repeat(32),
            }],
            blocks: runs([0]),
            elsewhere: HashMap::new(),
            digest: None,
            expect: None,
            sent: true,
            stalled: None,
            mode: None,
            preserve: false,
            mtime: None,
            tree: false,
            temps: Vec::new(),
        };
        let path = path_of(&at, &record.transfer);
        keep_record(&path, &record).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o077, 0, "owner-only");
        std::fs::write(at.join("broken.json"), b"{").unwrap();
        let loaded = kept_records::<Record>(&at, "collection");
        assert_eq!(loaded.len(), 1);
        assert_eq!((loaded[0].0.clone(), loaded[0].1.part.clone()), (path, record.part));
        assert!(!at.join("broken.json").exists(), "an unreadable record is removed");
    }
}
