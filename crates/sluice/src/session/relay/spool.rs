//! A relay's spool: sealed blocks on disk, bounded, until their collector takes them.
//!
//! ```text
//! DIR/
//!   tmp/                          blocks being received (emptied at start)
//!   <transfer>/meta.json          the capability's BLAKE3, the depositing token, the expiry
//!   <transfer>/<block>.blk        one sealed block (16 hex digits of its index)
//! ```
//!
//! A deposit reserves its bytes first (the spool's bound and the token's quota are checked
//! against what is held plus what is being received), receives into files under `tmp/`, and
//! is durable once [`Reservation::commit`] fsync'd every file and renamed it into its
//! transfer's directory (then fsync'd that directory): only then does the relay answer
//! `Stored`. A restart finds what was committed and serves it; what was in `tmp/` was never
//! acknowledged and is deleted. A transfer nobody collected within the expiry (from its last
//! deposit) is deleted whole.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::constant_time::verify_slices_are_equal;
use serde::{Deserialize, Serialize};
use sluice_session::relay::{BlockLen, from_hex, to_hex};
use tracing::{info, warn};

use crate::session::identity::{Fingerprint, write_private};
use crate::session::{SessionError, lock};
use crate::tree::FileSet;

/// The directory of blocks being received.
const TMP_DIR: &str = "tmp";
/// A transfer's record.
const META_FILE: &str = "meta.json";
/// A block file's extension.
const BLOCK_EXT: &str = "blk";
/// How long uncollected blocks are kept by default.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(24 * 60 * 60);

/// Settings of a relay's spool (`serve --spool DIR --spool-max SIZE`).
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// Where the blocks are kept.
    pub dir: PathBuf,
    /// The most bytes the spool holds, received and being received.
    pub max_bytes: u64,
    /// Blocks of a transfer uncollected this long after its last deposit are deleted.
    pub expiry: Duration,
}

/// How often a running relay looks for expired transfers.
const EXPIRE_EVERY: Duration = Duration::from_secs(60);

/// A transfer's id: 16 bytes.
pub(crate) type TransferId = [u8; 16];

/// What the spool keeps of a transfer besides its blocks.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    /// BLAKE3 of the collector's capability, hex.
    capability_hash: String,
    /// The depositing token's index in the token file.
    token: usize,
    /// Seconds since the Unix epoch after which the transfer is deleted.
    expires_at: u64,
}

#[derive(Debug)]
struct Held {
    meta: Meta,
    /// Sealed lengths by block.
    blocks: BTreeMap<u64, u64>,
}

#[derive(Debug, Default)]
struct State {
    transfers: HashMap<TransferId, Held>,
    /// Bytes being received, by token.
    reserved: HashMap<usize, u64>,
    /// Transfers whose collector has every block ([`Spool::close`]), until when (Unix
    /// seconds): no more deposits of theirs are taken. In memory only.
    closed: HashMap<TransferId, u64>,
}

impl State {
    fn held_bytes(&self, token: Option<usize>) -> u64 {
        let held: u64 = self
            .transfers
            .values()
            .filter(|h| token.is_none_or(|t| h.meta.token == t))
            .flat_map(|h| h.blocks.values())
            .sum();
        let reserved: u64 = self
            .reserved
            .iter()
            .filter(|(t, _)| token.is_none_or(|x| **t == x))
            .map(|(_, n)| n)
            .sum();
        held + reserved
    }
}

/// A relay's spool. Its calls do file I/O: run them off the async threads.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    expiry: Duration,
    state: Mutex<State>,
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> SessionError {
    move |e| SessionError::io(what, e)
}

/// Best effort: a directory sync makes renames in it durable.
fn sync_dir(dir: &Path) -> Result<(), SessionError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("syncing the directory {}", dir.display())))
}

impl Spool {
    /// Opens (or makes, owner-only) the spool at `config.dir` and finds what it holds; deletes
    /// what was never acknowledged and what expired.
    pub fn open(config: &SpoolConfig) -> Result<Arc<Spool>, SessionError> {
        if config.max_bytes == 0 {
            return Err(SessionError::Config("--spool-max must be above 0".into()));
        }
        let dir = &config.dir;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(format!("creating the spool {}", dir.display())))?;
        let tmp = dir.join(TMP_DIR);
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io(format!("clearing {}", tmp.display())))?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp)
            .map_err(io(format!("creating {}", tmp.display())))?;
        let mut state = State::default();
        let entries =
            fs::read_dir(dir).map_err(io(format!("reading the spool {}", dir.display())))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = from_hex::<16>(&name) else { continue };
            match load_transfer(&entry.path()) {
                Ok(held) => {
                    state.transfers.insert(id, held);
                }
                Err(why) => {
                    warn!(transfer = name, %why, "a spooled transfer is unreadable: left as it is")
                }
            }
        }
        let spool = Spool {
            dir: dir.clone(),
            max_bytes: config.max_bytes,
            expiry: config.expiry,
            state: Mutex::new(state),
        };
        spool.expire(now_secs());
        let held = lock(&spool.state).held_bytes(None);
        info!(spool = %dir.display(), held_bytes = held, max_bytes = spool.max_bytes, "spool open");
        Ok(Arc::new(spool))
    }

    fn transfer_dir(&self, transfer: &TransferId) -> PathBuf {
        self.dir.join(to_hex(transfer))
    }

    fn block_path(&self, transfer: &TransferId, id: u64) -> PathBuf {
        self.transfer_dir(transfer).join(format!("{id:016x}.{BLOCK_EXT}"))
    }

    /// Bytes held and being received.
    pub fn used_bytes(&self) -> u64 {
        lock(&self.state).held_bytes(None)
    }

    /// Reserves room for `blocks` of `transfer`, deposited by `token` (whose quota is `quota`
    /// bytes, when limited) for the collector whose capability hashes to `capability_hash`,
    /// and makes their files under `tmp/`. `busy` when the spool is full; `refused` when the
    /// token's quota is, or the transfer is another token's or another collector's.
    pub(crate) fn reserve(
        self: &Arc<Self>,
        transfer: TransferId,
        capability_hash: &str,
        token: usize,
        quota: Option<u64>,
        blocks: &[BlockLen],
    ) -> Result<Reservation, SessionError> {
        let need: u64 = blocks.iter().map(|b| b.len).sum();
        {
            let mut state = lock(&self.state);
            if state.closed.contains_key(&transfer) {
                return Err(closed());
            }
            if let Some(held) = state.transfers.get(&transfer)
                && (held.meta.token != token
                    || verify_slices_are_equal(
                        held.meta.capability_hash.as_bytes(),
                        capability_hash.as_bytes(),
                    )
                    .is_err())
            {
                return Err(SessionError::Refused(
                    "this transfer's blocks here belong to another sender or collector".into(),
                ));
            }
            let used = state.held_bytes(None);
            if used.saturating_add(need) > self.max_bytes {
                return Err(SessionError::Busy(format!(
                    "the relay's spool is full: {used} of {} bytes used, {need} more asked",
                    self.max_bytes
                )));
            }
            if let Some(quota) = quota {
                let mine = state.held_bytes(Some(token));
                if mine.saturating_add(need) > quota {
                    return Err(SessionError::Refused(format!(
                        "this token's spool quota is used up: {mine} of {quota} bytes held, \
                         {need} more asked"
                    )));
                }
            }
            *state.reserved.entry(token).or_default() += need;
        }
        let mut reservation = Reservation {
            spool: self.clone(),
            transfer,
            capability_hash: capability_hash.to_owned(),
            token,
            bytes: need,
            files: Vec::with_capacity(blocks.len()),
        };
        let nonce = to_hex(&rand16()?);
        for block in blocks {
            let path = self.dir.join(TMP_DIR).join(format!(
                "{}-{:016x}-{nonce}",
                to_hex(&transfer),
                block.id
            ));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(io(format!("creating {}", path.display())))?;
            file.set_len(block.len).map_err(io(format!("sizing {}", path.display())))?;
            reservation.files.push((*block, path));
        }
        Ok(reservation)
    }

    /// The blocks of `ids` that `transfer` has here, with their files, in the order asked.
    pub(crate) fn holding(&self, transfer: &TransferId, ids: &[u64]) -> Vec<(BlockLen, PathBuf)> {
        let state = lock(&self.state);
        let Some(held) = state.transfers.get(transfer) else { return Vec::new() };
        ids.iter()
            .filter_map(|id| {
                held.blocks
                    .get(id)
                    .map(|len| (BlockLen { id: *id, len: *len }, self.block_path(transfer, *id)))
            })
            .collect()
    }

    /// Whether `capability` is the collector's of `transfer`.
    pub(crate) fn admits(
        &self,
        transfer: &TransferId,
        capability: &[u8; 32],
        presenter: &Fingerprint,
    ) -> bool {
        let presented = super::collector_hash(capability, presenter);
        let state = lock(&self.state);
        state.transfers.get(transfer).is_some_and(|held| {
            verify_slices_are_equal(held.meta.capability_hash.as_bytes(), presented.as_bytes())
                .is_ok()
        })
    }

    /// Bytes `token` (whose quota is `quota` bytes, when limited) could reserve now: the
    /// spool's free room, and its quota's.
    pub(crate) fn room(&self, token: usize, quota: Option<u64>) -> u64 {
        let state = lock(&self.state);
        let free = self.max_bytes.saturating_sub(state.held_bytes(None));
        match quota {
            Some(quota) => free.min(quota.saturating_sub(state.held_bytes(Some(token)))),
            None => free,
        }
    }

    /// The collector has every block of `transfer`: what is left of it here goes, and no
    /// deposit of it is taken from now on (for as long as blocks are kept,
    /// `--spool-expiry-hours`).
    pub(crate) fn close(&self, transfer: &TransferId) -> Result<(), SessionError> {
        let mut state = lock(&self.state);
        let until = now_secs().saturating_add(self.expiry.as_secs());
        state.closed.insert(*transfer, until);
        if state.transfers.remove(transfer).is_some() {
            let dir = self.transfer_dir(transfer);
            fs::remove_dir_all(&dir).map_err(io(format!("deleting {}", dir.display())))?;
        }
        Ok(())
    }

    /// Deletes `ids` of `transfer` (their collector has them); the transfer's directory goes
    /// with its last block.
    pub(crate) fn release(&self, transfer: &TransferId, ids: &[u64]) -> Result<(), SessionError> {
        let mut state = lock(&self.state);
        let Some(held) = state.transfers.get_mut(transfer) else { return Ok(()) };
        for id in ids {
            if held.blocks.remove(id).is_some() {
                let path = self.block_path(transfer, *id);
                fs::remove_file(&path).map_err(io(format!("deleting {}", path.display())))?;
            }
        }
        if held.blocks.is_empty() {
            state.transfers.remove(transfer);
            let dir = self.transfer_dir(transfer);
            fs::remove_dir_all(&dir).map_err(io(format!("deleting {}", dir.display())))?;
        }
        Ok(())
    }

    /// Deletes expired transfers every [`EXPIRE_EVERY`], for as long as it runs.
    pub(crate) async fn expire_every(self: Arc<Self>) {
        loop {
            tokio::time::sleep(EXPIRE_EVERY).await;
            let spool = self.clone();
            let _ = tokio::task::spawn_blocking(move || spool.expire(now_secs())).await;
        }
    }

    /// Deletes every transfer whose expiry is before `now` (seconds since the Unix epoch).
    pub fn expire(&self, now: u64) {
        let mut state = lock(&self.state);
        state.closed.retain(|_, until| *until >= now);
        let expired: Vec<TransferId> = state
            .transfers
            .iter()
            .filter(|(_, h)| h.meta.expires_at < now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let held = state.transfers.remove(&id);
            let blocks = held.map_or(0, |h| h.blocks.len());
            let dir = self.transfer_dir(&id);
            match fs::remove_dir_all(&dir) {
                Ok(()) => {
                    info!(transfer = to_hex(&id), blocks, "expired uncollected blocks deleted")
                }
                Err(e) => {
                    warn!(transfer = to_hex(&id), error = %e, "could not delete expired blocks")
                }
            }
        }
    }
}

/// A deposit of a transfer whose collector has every block.
fn closed() -> SessionError {
    SessionError::Refused(
        "the collector has every block of this transfer: the relay takes no more of it".into(),
    )
}

/// A spooled transfer's record and blocks, as found on disk.
fn load_transfer(dir: &Path) -> Result<Held, String> {
    let meta = fs::read(dir.join(META_FILE)).map_err(|e| format!("{META_FILE}: {e}"))?;
    let meta: Meta = serde_json::from_slice(&meta).map_err(|e| format!("{META_FILE}: {e}"))?;
    let mut blocks = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(|e| e.to_string())?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(&format!(".{BLOCK_EXT}")) else { continue };
        let Some(id) = from_hex::<8>(stem).map(u64::from_be_bytes) else { continue };
        let len = entry.metadata().map_err(|e| e.to_string())?.len();
        blocks.insert(id, len);
    }
    Ok(Held { meta, blocks })
}

fn rand16() -> Result<[u8; 16], SessionError> {
    let mut out = [0u8; 16];
    aws_lc_rs::rand::fill(&mut out)
        .map_err(|_| SessionError::Config("the system random generator failed".into()))?;
    Ok(out)
}

/// Room taken in the spool for one deposit, and its files being received. Dropped without
/// [`Reservation::commit`], it gives the room back and deletes the files.
#[derive(Debug)]
pub(crate) struct Reservation {
    spool: Arc<Spool>,
    transfer: TransferId,
    capability_hash: String,
    token: usize,
    bytes: u64,
    files: Vec<(BlockLen, PathBuf)>,
}

impl Reservation {
    /// The files as one store the data channels write, blocks end to end in deposit order.
    pub(crate) fn store(&self) -> FileSet {
        FileSet::new(self.files.iter().map(|(b, p)| (p.clone(), b.len)).collect(), true)
    }

    /// Makes the blocks durable: each file fsync'd and renamed into its transfer's directory,
    /// the directory fsync'd, the transfer's record written (its expiry moved on). Returns the
    /// blocks' ids.
    pub(crate) fn commit(mut self) -> Result<Vec<u64>, SessionError> {
        for (_, path) in &self.files {
            File::open(path)
                .and_then(|f| f.sync_all())
                .map_err(io(format!("syncing {}", path.display())))?;
        }
        let spool = self.spool.clone();
        // Under the lock: a release that empties the transfer deletes its directory, and must
        // not do so between these renames and the record of the blocks.
        let mut state = lock(&spool.state);
        // Its collector had every block while these came (dropped, the files go).
        if state.closed.contains_key(&self.transfer) {
            return Err(closed());
        }
        let dir = spool.transfer_dir(&self.transfer);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io(format!("creating {}", dir.display())))?;
        let meta = Meta {
            capability_hash: self.capability_hash.clone(),
            token: self.token,
            expires_at: now_secs().saturating_add(spool.expiry.as_secs()),
        };
        let json = serde_json::to_vec(&meta).map_err(|e| SessionError::Protocol(e.to_string()))?;
        write_private(&dir.join(META_FILE), &json)?;
        for (block, path) in &self.files {
            let to = spool.block_path(&self.transfer, block.id);
            fs::rename(path, &to).map_err(io(format!(
                "renaming {} to {}",
                path.display(),
                to.display()
            )))?;
        }
        sync_dir(&dir)?;
        sync_dir(&spool.dir)?;
        let files = std::mem::take(&mut self.files);
        let held = state
            .transfers
            .entry(self.transfer)
            .or_insert_with(|| Held { meta: meta.clone(), blocks: BTreeMap::new() });
        held.meta = meta;
        for (block, _) in &files {
            held.blocks.insert(block.id, block.len);
        }
        Ok(files.into_iter().map(|(b, _)| b.id).collect())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        {
            let mut state = lock(&self.spool.state);
            if let Some(n) = state.reserved.get_mut(&self.token) {
                *n = n.saturating_sub(self.bytes);
            }
        }
        for (_, path) in &self.files {
            let _ = fs::remove_file(path);
        }
    }
}
