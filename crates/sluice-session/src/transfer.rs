//! What the two transfer roles share: deadlines, how a transfer fails, the manifest in parts,
//! and the digests on the wire.

use std::time::Duration;

use crate::manifest::{Entry, MAX_ENTRIES, MAX_TEXT_BYTES};
use crate::messages::{ErrorCode, ManifestPart};
use crate::time::Instant;

/// Repair rounds at most: a fault that strikes again after two rounds is not transient.
pub const MAX_REPAIR_ROUNDS: u32 = 2;
/// The data phase of a transfer whose early start the receiver declined: its first phase when
/// the data began before the receiver's `Want` (phase 0, [`crate::Sending::new_early`]) and the
/// receiver wanted something else. A phase of its own, after the repair rounds' numbers, so
/// that its channels' keys are not phase 0's: those sealed the early packets already.
pub const RESTART_PHASE: u32 = MAX_REPAIR_ROUNDS + 1;
/// Hashes per `Digests` message (about 540 kB of JSON, under the 1 MiB frame limit).
pub const DIGESTS_PER_MESSAGE: usize = 8192;
/// A manifest part's entries stop growing past this much path and target text (well under the
/// 1 MiB frame with the fixed fields of each entry).
const PART_TEXT_BYTES: usize = 256 << 10;
/// Entries per manifest part at most.
const PART_ENTRIES: usize = 2048;

/// How long each role waits for the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For an answer that needs no real work from the peer (a manifest part, `Want`,
    /// `Resumed`, `Ready`).
    pub reply: Duration,
    /// The rate at which the peer is assumed to read and hash its files at worst, in bytes
    /// per second: the wait for an answer that needs hashing grows with the bytes hashed.
    pub hash_bytes_per_second: u64,
    /// How long a receiver waits for the sender's `Digests` after its last byte; `None` is
    /// [`Timeouts::hash_budget`] of the transfer's bytes.
    pub digests: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            reply: Duration::from_secs(30),
            hash_bytes_per_second: 50_000_000,
            digests: None,
        }
    }
}

impl Timeouts {
    /// How long the peer may take to hash `bytes` and answer.
    pub fn hash_budget(&self, bytes: u64) -> Duration {
        self.reply + Duration::from_secs(bytes / self.hash_bytes_per_second.max(1))
    }
}

/// A role's current wait: when it ends, for what, and how long it is.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Deadline(Option<(Instant, &'static str, Duration)>);

impl Deadline {
    /// Waits `wait` from `now` for `what`.
    pub(crate) fn set(&mut self, now: Instant, what: &'static str, wait: Duration) {
        self.0 = Some((now + wait, what, wait));
    }

    /// No wait.
    pub(crate) fn clear(&mut self) {
        self.0 = None;
    }

    /// When the wait ends, if there is one.
    pub(crate) fn at(&self) -> Option<Instant> {
        self.0.map(|(at, _, _)| at)
    }

    /// The timeout, once `now` is past the wait.
    pub(crate) fn passed(&self, now: Instant) -> Option<Fault> {
        let (at, what, wait) = self.0?;
        let secs = wait.as_secs_f64();
        (now >= at).then(|| Fault::Timeout(format!("{what} did not come within {secs} s")))
    }
}

/// Why a transfer ended without its files delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The peer gave up and said why (its `Failed`).
    Peer {
        /// Class of the failure.
        code: ErrorCode,
        /// The peer's words.
        message: String,
    },
    /// The peer broke the protocol; this end said so in its `Failed`.
    Protocol(String),
    /// The peer did not answer in time; this end said so in its `Failed`.
    Timeout(String),
    /// This end failed (its driver said so); this end said so in its `Failed`.
    Local {
        /// Class of the failure.
        code: ErrorCode,
        /// The driver's words.
        message: String,
    },
}

impl Fault {
    /// The code and words this end sends in its `Failed` (none for the peer's own failure).
    pub(crate) fn to_send(&self) -> Option<(ErrorCode, String)> {
        match self {
            Fault::Peer { .. } => None,
            Fault::Protocol(m) => Some((ErrorCode::Protocol, m.clone())),
            Fault::Timeout(m) => Some((ErrorCode::Network, m.clone())),
            Fault::Local { code, message } => Some((*code, message.clone())),
        }
    }
}

/// `entries` as `Manifest` parts that each fit a frame; an empty manifest is one empty last
/// part.
pub fn manifest_parts(entries: &[Entry]) -> Vec<ManifestPart> {
    let mut parts = Vec::new();
    let mut start = 0;
    loop {
        let (mut end, mut text) = (start, 0);
        while end < entries.len() && end - start < PART_ENTRIES && text < PART_TEXT_BYTES {
            let e = &entries[end];
            text += e.path.len() + e.target.as_ref().map_or(0, String::len);
            end += 1;
        }
        let last = end == entries.len();
        parts.push(ManifestPart { entries: entries[start..end].to_vec(), last });
        if last {
            return parts;
        }
        start = end;
    }
}

/// A manifest coming in parts, held within [`MAX_ENTRIES`] and [`MAX_TEXT_BYTES`].
#[derive(Debug, Default)]
pub struct ManifestAssembler {
    entries: Vec<Entry>,
    text: usize,
}

impl ManifestAssembler {
    /// Adds a part; the whole manifest once the last part came.
    pub fn add(&mut self, part: ManifestPart) -> Result<Option<Vec<Entry>>, String> {
        if self.entries.len() + part.entries.len() > MAX_ENTRIES {
            return Err(format!("a manifest of more than {MAX_ENTRIES} entries"));
        }
        self.text += part
            .entries
            .iter()
            .map(|e| e.path.len() + e.target.as_ref().map_or(0, String::len))
            .sum::<usize>();
        if self.text > MAX_TEXT_BYTES {
            return Err(format!("a manifest of more than {} MiB of names", MAX_TEXT_BYTES >> 20));
        }
        self.entries.extend(part.entries);
        Ok(part.last.then(|| std::mem::take(&mut self.entries)))
    }
}

/// Hex BLAKE3s from the wire (or from a driver that speaks hex, as the page's does).
pub fn parse_hashes(hexes: &[String], what: &str) -> Result<Vec<blake3::Hash>, String> {
    hexes
        .iter()
        .map(|hex| {
            blake3::Hash::from_hex(hex).map_err(|_| format!("a bad BLAKE3 {hex:?} in {what}"))
        })
        .collect()
}

/// Hashes as hex for the wire.
pub fn hex(hashes: &[blake3::Hash]) -> Vec<String> {
    hashes.iter().map(|h| h.to_hex().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::EntryKind;

    fn file(n: usize, name_len: usize) -> Entry {
        Entry {
            path: format!("{n:0>width$}", width = name_len),
            kind: EntryKind::File,
            size: 1,
            mtime: 0,
            mode: 0o644,
            target: None,
            blake3: None,
        }
    }

    #[test]
    fn a_manifest_goes_in_parts_and_comes_back_whole() {
        let entries: Vec<Entry> = (0..5000).map(|n| file(n, 200)).collect();
        let parts = manifest_parts(&entries);
        assert!(parts.len() >= 3, "{} parts", parts.len());
        assert!(parts.iter().all(|p| crate::messages::encode(p).is_ok()));
        let mut whole = ManifestAssembler::default();
        let mut out = None;
        for (i, part) in parts.into_iter().enumerate() {
            assert!(out.is_none(), "complete before part {i}");
            out = whole.add(part).unwrap();
        }
        assert_eq!(out.unwrap(), entries);
        assert_eq!(manifest_parts(&[]), vec![ManifestPart { entries: vec![], last: true }]);
    }

    #[test]
    fn the_hash_budget_grows_with_the_bytes() {
        let t = Timeouts::default();
        assert_eq!(t.hash_budget(0), Duration::from_secs(30));
        assert_eq!(t.hash_budget(5_000_000_000), Duration::from_secs(130));
    }
}
