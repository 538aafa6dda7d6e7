//! A relayed upload's receiving end: the job that collects the sender's blocks, from the relays
//! where the sender reports them and from the sender's own deposits, opens each (a block that
//! does not open is fetched again: from the sender while it is there), writes it into a part
//! file beside the destination, and, once every block is written and the file's BLAKE3 is the
//! sender's, renames it into place. It goes on when the sender has left (FSP's retreat).
//!
//! A tree lands in the temporary files of its plan (`tree::incoming`, as a direct tree copy's)
//! laid end to end; once the whole offset space hashes to the sender's BLAKE3, the plan is
//! committed: each file renamed into place.
//!
//! A job is kept in the server's state directory while it runs or stalls
//! ([`super::collect_record`]): a restarted server goes on with it, a file's or a tree's.
//!
//! A job whose sender left with blocks nowhere to collect (a relay lost them) names the
//! missing byte ranges and is kept, stalled, with its part file (a tree: its plan's temporary
//! files): a re-run of the same copy (the same destination, size and block size, and a tree
//! the same manifest) takes it over and moves only the blocks it lacks, under the new run's
//! key; the file's (the tree's) BLAKE3 must be the first run's.

use std::collections::HashMap;
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_session::messages::{JobInfo, JobKind, JobPhase, MAX_JOB_RANGES};
use sluice_session::relay::{
    BlockLen, BlockPlan, Collect, HopMsg, MAX_BATCH_BLOCKS, from_hex, id_ranges, to_hex,
};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::collect_record::{self, Record, RelayRecord, TreeRecord};
use super::hop::{Link, receive_blocks, write_hop};
use super::seal::BlockKey;
use super::spool::TransferId;
use super::verify::Prefix;
use crate::datapath::{Store, write_all_at};
use crate::files::Confined;
use crate::session::channel::{ChannelSetup, blocking};
use crate::session::copy::plan_error;
use crate::session::identity::Identity;
use crate::session::job_log::{CANCELLED, Ended, JobTasks, keep_record, kept_records, unix_now};
use crate::session::keys::{DirectionSecret, SessionId};
use crate::session::{
    Client, ClientConfig, Fingerprint, SessionError, TransportChoice, TrustPolicy, lock,
};
use crate::tree::Entry;
use crate::tree::FileSet;
use crate::tree::incoming::{self, Incoming, Overwrite, Plan, ReceiveOptions};

/// Each relay's failed collections in a row: its outage. The collector's patience is per
/// outage: [`RELAY_ATTEMPTS`] failures in a row and each further batch that fails there counts
/// as lost at once (collected elsewhere, or asked of the sender), until a collection there
/// succeeds and ends the outage. (Counted per job, a relay that failed three times in an hour
/// of collection lost every later batch that met a passing fault.)
#[derive(Debug)]
struct Outages(Vec<u32>);

impl Outages {
    fn new(relays: usize) -> Outages {
        Outages(vec![0; relays])
    }

    /// A collection at `relay` failed: whether the collector gives up on its batch there.
    fn failed(&mut self, relay: u32) -> bool {
        let Some(count) = self.0.get_mut(relay as usize) else { return true };
        *count = count.saturating_add(1);
        *count >= RELAY_ATTEMPTS
    }

    /// A collection at `relay` succeeded: its outage, if any, is over.
    fn ended(&mut self, relay: u32) {
        if let Some(count) = self.0.get_mut(relay as usize) {
            *count = 0;
        }
    }
}

/// The most bytes of blocks one collection from a relay asks for.
const BATCH_BYTES: u64 = 64 << 20;
/// Attempts to collect from a relay that failed, before its blocks count as lost there.
const RELAY_ATTEMPTS: u32 = 3;
/// The wait between them.
const RELAY_RETRY_WAIT: Duration = Duration::from_secs(1);
/// How long the collector waits for a relay's handshake: ten round trips of the longest paths
/// (a relay it cannot reach costs the attempts this each, before its blocks come another way).
const RELAY_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long after the sender's last deposit here collection still waits for its next: the
/// deposits of a striping follow each other within a few round trips.
const DIRECT_QUIET: Duration = Duration::from_millis(500);
/// How often a waiting collection looks again.
const DIRECT_POLL: Duration = Duration::from_millis(20);
/// How long a cancelled job tells its relays to delete what they hold of it.
const CANCELLED_DISCARD_WAIT: Duration = Duration::from_secs(5);
/// How long a stalled job waits for a re-run before what it wrote is deleted.
const STALLED_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

/// A relay as the collector reaches it.
#[derive(Debug, Clone)]
pub(crate) struct RelayAt {
    pub(crate) address: SocketAddr,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) capability: [u8; 32],
}

/// Where a block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// Not yet placed anywhere (or lost where it was).
    Missing,
    /// Durable on this relay.
    At(u32),
    /// Being collected from this relay.
    Fetching(u32),
    /// Written into the part file.
    Written,
}

/// What the job tells the sender's request while it is there.
#[derive(Debug)]
pub(crate) enum JobEvent {
    /// Deposit these blocks here again.
    Refetch(Vec<u64>),
    /// The job ended: the file's size, or why it failed.
    End(Result<u64, SessionError>),
}

#[derive(Debug)]
struct Progress {
    blocks: Vec<Where>,
    digest: Option<blake3::Hash>,
    /// Whether the sender has gone (no refetch possible).
    sender_gone: bool,
    /// Whether the sender said every block is placed.
    sent: bool,
    /// The digest of the run this job took over: the sender's must be the same.
    expect: Option<blake3::Hash>,
    /// The sender's digest was not `expect`: the written blocks are of another file.
    changed: bool,
    /// The job ended with blocks nowhere to collect: it waits for a re-run.
    stalled: bool,
    /// Other relays that hold a block (`--relay-copies 2`): where it is collected from when
    /// the first one fails.
    elsewhere: HashMap<u64, Vec<u32>>,
    /// Blocks written from the first on, as far as last looked ([`Collection::written_end`]):
    /// a written block stays written, so the next look starts there.
    written_prefix: usize,
}

/// What `sluice jobs` says of a collection besides its blocks.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    /// The sender's token (its index in the token file): whose listing shows the job.
    pub(crate) token: usize,
    /// The destination as the sender named it (relative to the token's root).
    pub(crate) dest: String,
    /// Files it moves.
    pub(crate) files: u64,
    /// When it started (Unix seconds).
    pub(crate) started: u64,
}

/// Whether `file` is named as what a job keeps is (a part file `.NAME.HEX.relayed`, a tree's
/// temporary file `.NAME.sluice-part-HEX`): what a dropped record's files may be removed as.
fn is_ours(file: &Path) -> bool {
    let name = file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    name.starts_with('.') && (name.ends_with(".relayed") || name.contains(".sluice-part-"))
}

/// Where a job collects from, for the listing: its relays' addresses.
fn addresses(relays: &[RelayAt]) -> String {
    relays.iter().map(|r| r.address.to_string()).collect::<Vec<_>>().join(", ")
}

/// What a stalled job keeps of what it wrote, for a re-run of its copy.
#[derive(Debug)]
enum Kept {
    /// One file's part file.
    Part(PathBuf),
    /// A tree's prepared plan (its temporary files; dropped, they go), and the manifest it was
    /// made from ([`manifest_id`]): a re-run must send the same.
    Tree { incoming: Box<Incoming>, manifest: blake3::Hash },
}

/// What identifies a tree's manifest: a re-run whose manifest differs (a file added, removed,
/// resized or touched) lays its bytes out otherwise, and does not take over a stalled tree.
pub(crate) fn manifest_id(entries: &[crate::tree::Entry]) -> blake3::Hash {
    let mut hasher = blake3::Hasher::new();
    for entry in entries {
        // Each entry's JSON, then a newline (no JSON text holds one unescaped).
        hasher.update(&serde_json::to_vec(entry).unwrap_or_default());
        hasher.update(b"\n");
    }
    hasher.finalize()
}

/// How a relayed transfer lands on files that exist, and what it keeps of the sender's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Files that exist.
    pub(crate) overwrite: Overwrite,
    /// Keep the sender's permission bits and modification times (`--preserve`).
    pub(crate) preserve: bool,
    /// `if-different` compares content (`--checksum`; the sender's BLAKE3 is in the entries).
    pub(crate) checksum: bool,
}

/// A relayed tree's plan under `at` (not yet prepared) beneath `root`, with `policy`: the
/// files it keeps do not move (the blocks cut only the wanted files' bytes, end to end).
pub(crate) fn plan_tree(
    root: &Path,
    at: &Path,
    entries: Vec<Entry>,
    policy: Policy,
) -> Result<Plan, SessionError> {
    let Policy { overwrite, preserve, checksum } = policy;
    let options =
        ReceiveOptions { overwrite, checksum, preserve, confine: Some(root.into()), adopt: None };
    incoming::plan(at, entries, &options).map_err(plan_error)
}

/// What a stalled job keeps for a re-run of its copy.
#[derive(Debug)]
pub(crate) struct Stalled {
    kept: Kept,
    /// Its record in the state directory, if kept there.
    record: Option<PathBuf>,
    fs: Confined,
    plan: BlockPlan,
    written: Vec<bool>,
    digest: blake3::Hash,
    until: Instant,
    /// The job it was, for the listing: its id, relays, and why it stalled (when).
    transfer: TransferId,
    listed: Listed,
    from: String,
    why: String,
    at: u64,
}

impl Progress {
    /// Which blocks are written.
    fn written(&self) -> Vec<bool> {
        self.blocks.iter().map(|w| *w == Where::Written).collect()
    }
}

impl Stalled {
    /// Blocks the part file (or the tree's files) hold.
    pub(crate) fn have(&self) -> impl Iterator<Item = u64> + '_ {
        self.written.iter().enumerate().filter(|(_, w)| **w).map(|(id, _)| id as u64)
    }

    /// Deletes what it kept, and its record. Does file I/O.
    fn delete(self) {
        self.forget_record();
        match self.kept {
            Kept::Part(part) => {
                let _ = self.fs.remove_file(&part);
            }
            // Dropped, the plan removes its temporary files.
            Kept::Tree { incoming, .. } => drop(incoming),
        }
    }

    /// Removes its record: the job it was is gone, or another took it over (and keeps its
    /// own). Does file I/O.
    fn forget_record(&self) {
        if let Some(record) = &self.record {
            collect_record::remove(record);
        }
    }

    /// The tree's manifest it was made from (none for one file).
    fn manifest(&self) -> Option<blake3::Hash> {
        match &self.kept {
            Kept::Part(_) => None,
            Kept::Tree { manifest, .. } => Some(*manifest),
        }
    }
}

/// Where a job's blocks land.
enum Landing {
    /// One file: a part file beside the destination, renamed into place once verified (kept
    /// for a re-run when the job stalls).
    File { part: PathBuf, file: File },
    /// A tree: its plan's temporary files as one offset space, committed once verified;
    /// dropped uncommitted, they go.
    Tree { store: Box<FileSet>, incoming: Box<Mutex<Option<Incoming>>> },
}

impl Landing {
    /// The ends of its extents in its offset space `0..size`: one file's, or each of a
    /// tree's files'.
    fn extents(&self, size: u64) -> Vec<u64> {
        match self {
            Landing::File { .. } => vec![size],
            Landing::Tree { store, .. } => (0..store.len())
                .filter_map(|k| store.file_at(k).map(|(_, len, base)| base + len))
                .collect(),
        }
    }

    /// Its offset space, to read.
    fn store(&self) -> &dyn Store {
        match self {
            Landing::File { file, .. } => file,
            Landing::Tree { store, .. } => &**store,
        }
    }
}

/// One relayed upload being collected.
pub(crate) struct Collection {
    transfer: TransferId,
    /// The sender's session: its deposits of this transfer come straight here.
    session: SessionId,
    key: BlockKey,
    plan: BlockPlan,
    /// The file, or a tree's destination directory.
    dest: PathBuf,
    landing: Landing,
    /// The check of the whole, hashed as the written part grows from the start.
    hashing: Prefix,
    /// A tree's manifest ([`manifest_id`]).
    manifest: Option<blake3::Hash>,
    /// One file's permission bits at the sender.
    mode: u32,
    /// Keep its bits and modification time (`--preserve`).
    preserve: bool,
    mtime: Option<i64>,
    /// Where its record is kept, and its token's root and digest ([`Collection::save`]): a
    /// file's job on a server with a state directory.
    saved: Option<(PathBuf, PathBuf, [u8; 32])>,
    /// Held while the record is written; true once the job ended and its record is final
    /// (removed, or kept as stalled): a late event (the sender's request ending) must not
    /// write it again.
    record_final: Mutex<bool>,
    /// Every file step beneath the client's root.
    fs: Confined,
    relays: Vec<RelayAt>,
    identity: Arc<Identity>,
    clients: Mutex<Vec<Option<Client>>>,
    /// Relays reached over TCP from now on: a session's UDP data channels got nothing through
    /// there (a firewall that lets only the relay's port through).
    over_tcp: Mutex<Vec<bool>>,
    /// Relays that did not take a discard ([`Collection::discard`]): not asked again.
    undiscarded: Mutex<Vec<u32>>,
    progress: Mutex<Progress>,
    wake: Notify,
    events: mpsc::UnboundedSender<JobEvent>,
    listed: Listed,
    /// Set (and `wake` notified) to cancel it (`sluice jobs --cancel`).
    cancel: AtomicBool,
    /// Set (and `wake` notified) to stop it as stalled ([`Collection::pause`]).
    paused: AtomicBool,
    /// One collection moves data at a time: see [`Collection::collect_next`].
    downlink: Arc<Semaphore>,
    /// The sender's own deposits here: how many are moving, and when the last ended.
    direct: Mutex<(usize, Option<Instant>)>,
    /// The blocks and file bytes those deposits delivered: counted as they are written, so a
    /// count read when the job ends has every one (the taking task may be ended right after).
    own_delivered: Mutex<(u64, u64)>,
    /// Held while the job runs (the server's places for transfers).
    _permits: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection")
            .field("transfer", &to_hex(&self.transfer))
            .finish_non_exhaustive()
    }
}

/// The collections a server runs, by transfer, and those stalled, by destination.
#[derive(Debug, Default)]
pub(crate) struct Collections {
    running: Mutex<HashMap<TransferId, Arc<Collection>>>,
    stalled: Mutex<HashMap<PathBuf, Stalled>>,
    /// Those that ended lately (`sluice jobs`).
    ended: Ended,
    /// Where running and stalled ones are kept across a restart (`collect_record`), when the
    /// server has a state directory.
    dir: Option<PathBuf>,
    /// The running ones' tasks, ended when the server stops ([`Collections::stop`]).
    tasks: JobTasks,
}

/// The file of the state directory where ended collections are kept (`sluice jobs` lists them).
pub(crate) const ENDED_FILE: &str = "ended-collections.json";

impl Collections {
    /// No collection yet; `ended` lists those that ended (kept in [`ENDED_FILE`]); `dir` keeps
    /// the running and stalled ones (of one file) for a restart to go on with.
    pub(crate) fn new(ended: Ended, dir: Option<PathBuf>) -> Collections {
        Collections { ended, dir, ..Collections::default() }
    }

    /// `token`'s collections: running, stalled, and ended lately.
    pub(crate) fn list(&self, token: usize) -> Vec<JobInfo> {
        let running = lock(&self.running);
        let mine = running.values().filter(|c| c.listed.token == token);
        let mut jobs: Vec<JobInfo> = mine
            .map(|c| {
                let written: Vec<bool> = lock(&c.progress).written();
                job_info(&c.transfer, &c.listed, c.from(), &c.plan, &written, None)
            })
            .collect();
        // The running ones' lock is held to the end: a job that ends moves under it.
        let stalled = lock(&self.stalled);
        let now = Instant::now();
        let mine = stalled.values().filter(|s| s.listed.token == token && s.until > now);
        jobs.extend(mine.map(|s| {
            let end = Some((JobPhase::Stalled, s.at, Some(s.why.clone())));
            job_info(&s.transfer, &s.listed, s.from.clone(), &s.plan, &s.written, end)
        }));
        drop(stalled);
        jobs.extend(self.ended.of(token));
        drop(running);
        jobs
    }

    /// Cancels `token`'s collection `id`, running or stalled: whether there was one. What it
    /// collected is deleted (a job already renaming its verified file into place completes).
    /// Does file I/O.
    pub(crate) fn cancel(&self, token: usize, id: &str) -> bool {
        let running = lock(&self.running);
        let found = running.values().find(|c| c.listed.token == token && c.name() == id);
        if let Some(job) = found {
            job.cancel();
            return true;
        }
        drop(running);
        let mut stalled = lock(&self.stalled);
        let dest = stalled
            .iter()
            .find(|(_, s)| s.listed.token == token && to_hex(&s.transfer) == id)
            .map(|(dest, _)| dest.clone());
        let Some(gone) = dest.and_then(|dest| stalled.remove(&dest)) else { return false };
        drop(stalled);
        let end = Some((JobPhase::Cancelled, unix_now(), None));
        let info = job_info(
            &gone.transfer,
            &gone.listed,
            gone.from.clone(),
            &gone.plan,
            &gone.written,
            end,
        );
        gone.delete();
        info!(transfer = id, "a stalled relayed upload was cancelled: what it wrote is deleted");
        self.ended.push(token, info);
        true
    }

    /// The collection of `transfer` when `session` is its sender's: its deposits go there.
    pub(crate) fn direct(
        &self,
        transfer: &TransferId,
        session: SessionId,
    ) -> Option<Arc<Collection>> {
        lock(&self.running).get(transfer).filter(|c| c.session == session).cloned()
    }

    /// Goes on with the collections a previous run of the server kept in its state directory:
    /// running ones start again without their sender (which left with the server it spoke
    /// to), from where their blocks were; stalled ones wait for a re-run again. A tree is
    /// planned again from its kept manifest and takes up its kept temporary files. `token_of`
    /// gives a token's index (by its digest) and root while that token still may write. A
    /// record whose token is gone or changed roots, whose part file is gone, or whose tree no
    /// longer plans as it did (a file in the way, a temporary file gone) is dropped with what
    /// it kept (said). Does file I/O.
    pub(crate) fn resume_saved(
        self: &Arc<Self>,
        token_of: impl Fn(&[u8; 32]) -> Option<(usize, PathBuf)>,
        identity: &Arc<Identity>,
    ) {
        self.take_up_records(identity, |record| {
            let token = from_hex::<32>(&record.token).and_then(|d| Some((d, token_of(&d)?)));
            match token.filter(|(_, (_, root))| *root == record.root) {
                Some((digest, (index, _))) => Admit::Take(index, digest),
                None => Admit::Drop("its token is gone or changed".into()),
            }
        });
    }

    /// A client's collections (relayed downloads) that an earlier process of it left landing
    /// beneath `root` (a download's directory), each stalled for the same download run again
    /// to go on from: one it left running (the process was killed, or runs still elsewhere)
    /// stalls here, and is dropped with what it wrote when the server had not told what the
    /// file is. Records of other directories are left as they are. Does file I/O.
    pub(crate) fn resume_kept_downloads(self: &Arc<Self>, identity: &Arc<Identity>, root: &Path) {
        self.take_up_records(identity, |record| {
            if record.root != root {
                return Admit::Leave;
            }
            if record.stalled.is_none() {
                if record.digest.is_none() {
                    return Admit::Drop("cut off before the server said what the file is".into());
                }
                // Kept from its start on: it expires as a stalled job does.
                record.stalled = Some(("cut off mid-way".into(), record.started));
            }
            Admit::Take(0, [0; 32])
        });
    }

    /// Takes up each record the state directory keeps that `admit` takes, under the token it
    /// gives (it may change the record first).
    fn take_up_records(
        self: &Arc<Self>,
        identity: &Arc<Identity>,
        mut admit: impl FnMut(&mut Record) -> Admit,
    ) {
        let Some(dir) = &self.dir else { return };
        for (path, record) in kept_records::<Record>(dir, "collection") {
            let transfer = record.transfer.clone();
            let tree: Option<TreeRecord> = std::fs::read(collect_record::tree_path(&path))
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok());
            // What the job kept on disk: its part file, or its tree's temporary files (those a
            // record of a server that did not resume trees names too).
            let mut kept: Vec<PathBuf> = record.temps.clone();
            match &tree {
                Some(tree) => kept.extend(tree.temps.iter().cloned()),
                None if !record.tree => kept.push(record.part.clone()),
                None => {}
            }
            let root = record.root.clone();
            let drop_job = |why: &str| {
                warn!(
                    transfer,
                    why, "a kept collection does not go on: dropped, with what it kept"
                );
                if let Ok(fs) = Confined::new(Some(&root)) {
                    for file in kept.iter().filter(|f| is_ours(f)) {
                        let _ = fs.remove_file(file);
                    }
                }
                collect_record::remove(&path);
            };
            if !record.temps.is_empty() {
                drop_job("a tree's record from a server that did not resume trees");
                continue;
            }
            if record.tree && tree.is_none() {
                drop_job("its tree's record is unreadable");
                continue;
            }
            let mut record = record;
            let (index, digest) = match admit(&mut record) {
                Admit::Take(index, digest) => (index, digest),
                Admit::Drop(why) => {
                    drop_job(&why);
                    continue;
                }
                Admit::Leave => continue,
            };
            match self.restore(&path, record, tree, (index, digest), identity) {
                Ok(stalled) => {
                    info!(transfer, stalled, "a kept collection goes on after a restart")
                }
                Err(e) => drop_job(&e.to_string()),
            }
        }
    }

    /// Starts (or, stalled, keeps) the job `record` (kept at `path`) describes: whether it was
    /// stalled.
    fn restore(
        self: &Arc<Self>,
        path: &Path,
        record: Record,
        tree: Option<TreeRecord>,
        (token, token_digest): (usize, [u8; 32]),
        identity: &Arc<Identity>,
    ) -> Result<bool, SessionError> {
        let bad = |what: &str| SessionError::Protocol(format!("the record's {what}"));
        let transfer = from_hex::<16>(&record.transfer).ok_or_else(|| bad("transfer"))?;
        let secret = DirectionSecret {
            key: from_hex::<32>(&record.key).ok_or_else(|| bad("key"))?,
            iv: from_hex::<12>(&record.iv).ok_or_else(|| bad("iv"))?,
        };
        let plan = BlockPlan::new(record.size, record.block_bytes).map_err(|e| bad(&e))?;
        let relays = record
            .relays
            .iter()
            .map(|r: &RelayRecord| {
                Ok(RelayAt {
                    address: r.address.parse().map_err(|_| bad("relay address"))?,
                    fingerprint: r.fingerprint.parse().map_err(|_| bad("relay fingerprint"))?,
                    capability: from_hex::<32>(&r.capability)
                        .ok_or_else(|| bad("relay capability"))?,
                })
            })
            .collect::<Result<Vec<_>, SessionError>>()?;
        let spots = collect_record::spots(&record.blocks, plan.count(), relays.len())
            .ok_or_else(|| bad("blocks"))?;
        let blocks: Vec<Where> = spots
            .into_iter()
            .map(|spot| match spot {
                collect_record::WRITTEN => Where::Written,
                collect_record::MISSING => Where::Missing,
                relay => Where::At(relay as u32),
            })
            .collect();
        let hash = |hex: &Option<String>| -> Result<Option<blake3::Hash>, SessionError> {
            hex.as_deref().map(|h| blake3::Hash::from_hex(h).map_err(|_| bad("digest"))).transpose()
        };
        let (digest, expect) = (hash(&record.digest)?, hash(&record.expect)?);
        let fs = Confined::new(Some(&record.root))
            .map_err(|e| SessionError::io(format!("opening {}", record.root.display()), e))?;
        // A tree: planned again as it was, in the temporary files it had (which claims their
        // paths again); a file: its part file.
        let (files, policy, tree_plan) = match tree {
            Some(tree) => {
                let manifest = manifest_id(&tree.entries);
                let policy = Policy {
                    overwrite: tree.overwrite,
                    preserve: tree.preserve,
                    checksum: tree.checksum,
                };
                let tree_plan = plan_tree(&record.root, &record.dest, tree.entries, policy)?;
                if tree_plan.wanted_bytes() != plan.size {
                    return Err(SessionError::Refused(format!(
                        "the tree now plans {} bytes to move, not {}",
                        tree_plan.wanted_bytes(),
                        plan.size
                    )));
                }
                let files = tree_plan.wanted().len();
                let incoming = tree_plan.adopt(&tree.temps).map_err(plan_error)?;
                (files.max(1) as u64, policy, Some((incoming, manifest)))
            }
            None if fs.symlink_metadata(&record.part).is_err() => {
                return Err(SessionError::NotFound(format!("{} is gone", record.part.display())));
            }
            None => (1, Policy { preserve: record.preserve, ..Policy::default() }, None),
        };
        let listed = Listed { token, dest: record.named, files, started: record.started };
        if let Some((why, at)) = record.stalled {
            let kept_for = Duration::from_secs(unix_now().saturating_sub(at));
            let kept = match tree_plan {
                Some((incoming, manifest)) => Kept::Tree { incoming: Box::new(incoming), manifest },
                None => Kept::Part(record.part),
            };
            let stalled = Stalled {
                kept,
                record: Some(path.to_owned()),
                fs,
                plan,
                written: blocks.iter().map(|w| *w == Where::Written).collect(),
                digest: digest.unwrap_or(blake3::Hash::from_bytes([0; 32])),
                until: Instant::now() + STALLED_KEEP.saturating_sub(kept_for),
                transfer,
                listed,
                from: addresses(&relays),
                why,
                at,
            };
            lock(&self.stalled).insert(record.dest, stalled);
            return Ok(true);
        }
        let start = Start {
            transfer,
            session: SessionId::random()?,
            key: BlockKey::new(&secret, transfer),
            plan,
            dest: record.dest,
            fs,
            relays,
            identity: identity.clone(),
            // It holds none of the server's places for transfers (those are a session's).
            permits: Box::new(()),
            resume: None,
            listed,
            manifest: tree_plan.as_ref().map(|(_, manifest)| *manifest),
            tree: tree_plan.map(|(incoming, _)| incoming),
            policy,
            mode: record.mode.unwrap_or(0o644),
            mtime: record.mtime,
            root: record.root,
            token_digest,
            restored: Some(Restored {
                part: record.part,
                blocks,
                elsewhere: record.elsewhere,
                digest,
                expect,
                sent: record.sent,
            }),
        };
        Collection::start(start, self)?;
        Ok(false)
    }

    /// Ends every running job where it is, as the server's process ending would: their part
    /// files and records stay for the next run of the server to go on with. For a server that
    /// stops inside a process that goes on (tests, the web app's embedded server).
    pub(crate) fn stop(&self) {
        self.tasks.abort_all();
        for (_, job) in lock(&self.running).drain() {
            if let Landing::Tree { incoming, .. } = &job.landing
                && let Some(incoming) = lock(incoming).take()
            {
                incoming.keep_files();
            }
        }
        for (_, stalled) in lock(&self.stalled).drain() {
            if let Kept::Tree { incoming, .. } = stalled.kept {
                incoming.keep_files();
            }
        }
    }

    /// Deletes what every stalled job kept (a process that cannot re-run its copy: a client's
    /// relayed download). Does file I/O.
    pub(crate) fn drop_stalled(&self) {
        let stalled: Vec<Stalled> = lock(&self.stalled).drain().map(|(_, s)| s).collect();
        stalled.into_iter().for_each(Stalled::delete);
    }

    /// Whether `job` is running still (it leaves the running ones just before its end is
    /// told).
    pub(crate) fn runs(&self, job: &Collection) -> bool {
        lock(&self.running).contains_key(&job.transfer)
    }

    /// Whether a running job writes `dest`.
    pub(crate) fn writing(&self, dest: &Path) -> bool {
        lock(&self.running).values().any(|c| c.dest == dest)
    }

    /// The stalled job of `dest`, for a re-run of its copy (`plan` must be its, and a tree's
    /// `manifest`, [`manifest_id`], too), after deleting what those that waited too long kept.
    /// Does file I/O.
    pub(crate) fn take_stalled(
        &self,
        dest: &Path,
        plan: &BlockPlan,
        manifest: Option<blake3::Hash>,
    ) -> Option<Stalled> {
        let now = Instant::now();
        let mut stalled = lock(&self.stalled);
        let expired: Vec<PathBuf> =
            stalled.iter().filter(|(_, s)| s.until <= now).map(|(d, _)| d.clone()).collect();
        let expired: Vec<Stalled> = expired.iter().filter_map(|d| stalled.remove(d)).collect();
        let found = stalled.remove(dest);
        drop(stalled);
        expired.into_iter().for_each(Stalled::delete);
        let found = found?;
        if found.plan == *plan && found.manifest() == manifest {
            found.forget_record();
            return Some(found);
        }
        info!(dest = %dest.display(), "another copy: what the stalled one wrote is dropped");
        found.delete();
        None
    }
}

/// What becomes of a kept record ([`Collections::take_up_records`]).
enum Admit {
    /// Taken up under this token (its index and digest).
    Take(usize, [u8; 32]),
    /// Dropped with what it kept, for this reason.
    Drop(String),
    /// Left as it is (another's).
    Leave,
}

/// What a collection starts from.
pub(crate) struct Start {
    pub(crate) transfer: TransferId,
    pub(crate) session: SessionId,
    pub(crate) key: BlockKey,
    pub(crate) plan: BlockPlan,
    pub(crate) dest: PathBuf,
    /// How the destination's files are reached (beneath the client's root).
    pub(crate) fs: Confined,
    pub(crate) relays: Vec<RelayAt>,
    /// The receiver's identity, which the relays' capabilities are bound to.
    pub(crate) identity: Arc<Identity>,
    pub(crate) permits: Box<dyn Send + Sync>,
    /// A stalled job of the same copy to take over.
    pub(crate) resume: Option<Stalled>,
    /// What `sluice jobs` shows of it.
    pub(crate) listed: Listed,
    /// A tree's plan, prepared (its directories made, its files' paths claimed).
    pub(crate) tree: Option<Incoming>,
    /// How it lands (a tree's record keeps it: a restart plans it again); with `preserve`, a
    /// file keeps `mode` and `mtime`, a tree's files and directories what its plan says.
    pub(crate) policy: Policy,
    pub(crate) mtime: Option<i64>,
    /// One file's permission bits at the sender (it lands 0755 or 0644 by them).
    pub(crate) mode: u32,
    /// A tree's manifest ([`manifest_id`]): what a re-run must send to take it over if it
    /// stalls.
    pub(crate) manifest: Option<blake3::Hash>,
    /// The sender's token's root and digest (kept in the job's record: a restart goes on only
    /// while that token still writes beneath it).
    pub(crate) root: PathBuf,
    pub(crate) token_digest: [u8; 32],
    /// What a restarted server goes on from: the job's record.
    pub(crate) restored: Option<Restored>,
}

/// A job as its record left it, for a restarted server to go on with (its sender is gone).
pub(crate) struct Restored {
    part: PathBuf,
    blocks: Vec<Where>,
    elsewhere: HashMap<u64, Vec<u32>>,
    digest: Option<blake3::Hash>,
    expect: Option<blake3::Hash>,
    sent: bool,
}

impl Collection {
    /// Makes the part file and starts the job; its events go to the sender's request.
    pub(crate) fn start(
        start: Start,
        collections: &Arc<Collections>,
    ) -> Result<(Arc<Collection>, mpsc::UnboundedReceiver<JobEvent>), SessionError> {
        let count = start.plan.count() as usize;
        let mut blocks = vec![Where::Missing; count];
        let tree = |incoming: Incoming| {
            let store = Box::new(incoming.store());
            Landing::Tree { store, incoming: Box::new(Mutex::new(Some(incoming))) }
        };
        let start_policy = start.policy;
        let (landing, expect, restored) = match (start.tree, start.resume, start.restored) {
            (tree_plan, _, Some(r)) => {
                let landing = match tree_plan {
                    Some(incoming) => tree(incoming),
                    None => {
                        let file = start.fs.open(&r.part, true).map_err(|e| {
                            SessionError::io(format!("opening {}", r.part.display()), e)
                        })?;
                        Landing::File { part: r.part, file }
                    }
                };
                blocks = r.blocks;
                let progress = (r.elsewhere, r.digest, r.sent);
                (landing, r.expect, Some(progress))
            }
            (Some(incoming), _, None) => (tree(incoming), None, None),
            (None, Some(stalled), None) => {
                for id in stalled.have() {
                    blocks[id as usize] = Where::Written;
                }
                let landing = match stalled.kept {
                    Kept::Tree { incoming, .. } => tree(*incoming),
                    Kept::Part(part) => {
                        let file = start.fs.open(&part, true).map_err(|e| {
                            SessionError::io(format!("opening {}", part.display()), e)
                        })?;
                        Landing::File { part, file }
                    }
                };
                (landing, Some(stalled.digest), None)
            }
            (None, None, None) => {
                let name = start
                    .dest
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let part = start
                    .dest
                    .with_file_name(format!(".{name}.{}.relayed", to_hex(&start.transfer[..4])));
                // One a crash left is ours to replace.
                let _ = start.fs.remove_file(&part);
                let file = start
                    .fs
                    .create_new(&part, 0o600)
                    .map_err(|e| SessionError::io(format!("creating {}", part.display()), e))?;
                file.set_len(start.plan.size)
                    .map_err(|e| SessionError::io(format!("sizing {}", part.display()), e))?;
                (Landing::File { part, file }, None, None)
            }
        };
        let saved = collections.dir.as_ref().map(|dir| {
            let path = collect_record::path_of(dir, &to_hex(&start.transfer));
            (path, start.root, start.token_digest)
        });
        // A restored job's sender left with the server it spoke to.
        let sender_gone = restored.is_some();
        let (elsewhere, digest, sent) = restored.unwrap_or_default();
        let (tx, rx) = mpsc::unbounded_channel();
        let hashing = Prefix::new(landing.extents(start.plan.size));
        let job = Arc::new(Collection {
            transfer: start.transfer,
            manifest: start.manifest,
            mode: start.mode,
            preserve: start.policy.preserve,
            mtime: start.mtime,
            saved,
            record_final: Mutex::new(false),
            session: start.session,
            key: start.key,
            plan: start.plan,
            dest: start.dest,
            landing,
            hashing,
            fs: start.fs,
            clients: Mutex::new(vec![None; start.relays.len()]),
            over_tcp: Mutex::new(vec![false; start.relays.len()]),
            undiscarded: Mutex::new(Vec::new()),
            relays: start.relays,
            identity: start.identity,
            progress: Mutex::new(Progress {
                blocks,
                digest,
                sender_gone,
                sent,
                expect,
                changed: false,
                stalled: false,
                elsewhere,
                written_prefix: 0,
            }),
            wake: Notify::new(),
            events: tx,
            listed: start.listed,
            cancel: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            downlink: Arc::new(Semaphore::new(1)),
            direct: Mutex::new((0, None)),
            own_delivered: Mutex::new((0, 0)),
            _permits: start.permits,
        });
        {
            let mut running = lock(&collections.running);
            if running.contains_key(&job.transfer) {
                return Err(SessionError::Busy("this transfer is being collected already".into()));
            }
            running.insert(job.transfer, job.clone());
        }
        job.save_tree(start_policy);
        job.save(None);
        collections.tasks.spawn(job.clone().run(collections.clone()));
        Ok((job, rx))
    }

    /// The job's name (the transfer's id).
    pub(crate) fn name(&self) -> String {
        to_hex(&self.transfer)
    }

    /// The blocks of what it collects.
    pub(crate) fn plan(&self) -> BlockPlan {
        self.plan
    }

    /// Stops the job: it ends as cancelled, its part file (a tree's temporary files) deleted.
    pub(crate) fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Stops the job as stalled: what it wrote stays (with its record, when the collections
    /// keep records) for the same copy run again to go on from, when the sender told what the
    /// file is (else it is deleted); its relays are told to delete what they hold of it, as for
    /// a cancelled job (a re-run is a new transfer, with blocks of its own).
    pub(crate) fn pause(&self) {
        self.paused.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Where it collects from, for the listing: its relays' addresses.
    fn from(&self) -> String {
        addresses(&self.relays)
    }

    /// The sender placed `blocks` on relay `relay`.
    pub(crate) fn placed(self: &Arc<Self>, relay: u32, blocks: &[u64]) -> Result<(), SessionError> {
        if relay as usize >= self.relays.len() {
            return Err(SessionError::Protocol(format!("no relay {relay}")));
        }
        let mut progress = lock(&self.progress);
        // Second copies of blocks written already: of no use there.
        let mut late = Vec::new();
        for &id in blocks {
            let slot = progress
                .blocks
                .get_mut(id as usize)
                .ok_or_else(|| SessionError::Protocol(format!("no block {id}")))?;
            match *slot {
                Where::Missing => *slot = Where::At(relay),
                Where::At(r) | Where::Fetching(r) if r != relay => {
                    progress.elsewhere.entry(id).or_default().push(relay);
                }
                Where::Written => late.push(id),
                _ => {}
            }
        }
        drop(progress);
        self.save(None);
        self.wake.notify_one();
        if !late.is_empty() {
            tokio::spawn(self.clone().discard(relay, late));
        }
        Ok(())
    }

    /// The other copies of `written` blocks (`--relay-copies 2`) are of no more use: each
    /// relay that holds some is told to delete them, in the background.
    fn discard_elsewhere(self: &Arc<Self>, written: &[u64]) {
        let mut by_relay: HashMap<u32, Vec<u64>> = HashMap::new();
        {
            let mut progress = lock(&self.progress);
            for id in written {
                for relay in progress.elsewhere.remove(id).unwrap_or_default() {
                    by_relay.entry(relay).or_default().push(*id);
                }
            }
        }
        for (relay, ids) in by_relay {
            tokio::spawn(self.clone().discard(relay, ids));
        }
    }

    /// Tells `relay` to delete `ids` unsent. A relay that does not take it keeps them until
    /// its expiry (`--spool-expiry-hours`) and is not asked again by this job.
    async fn discard(self: Arc<Self>, relay: u32, ids: Vec<u64>) {
        if lock(&self.undiscarded).contains(&relay) {
            return;
        }
        let told = async {
            let client = self.relay_client(relay).await?;
            // No ids: everything (the job has every block).
            let chunks: Vec<&[u64]> =
                if ids.is_empty() { vec![&[]] } else { ids.chunks(MAX_BATCH_BLOCKS).collect() };
            for chunk in chunks {
                let discard = Collect { transfer: self.name(), blocks: chunk.to_vec() };
                client.discard_blocks(discard).await?;
            }
            Ok::<_, SessionError>(())
        };
        let at = self.relays[relay as usize].address;
        match told.await {
            Ok(()) if ids.is_empty() => info!(relay = %at, "the transfer closed at the relay"),
            Ok(()) => info!(relay = %at, blocks = ids.len(), "second copies deleted at the relay"),
            Err(e) => {
                lock(&self.undiscarded).push(relay);
                warn!(relay = %at, error = %e, "blocks left at the relay until its expiry");
            }
        }
    }

    /// The blocks the job has written (those a re-run need not move).
    pub(crate) fn have(&self) -> Vec<u64> {
        let progress = lock(&self.progress);
        let written = progress.blocks.iter().enumerate().filter(|(_, w)| **w == Where::Written);
        written.map(|(id, _)| id as u64).collect()
    }

    /// The sender's BLAKE3 of the whole file.
    pub(crate) fn digest(&self, hash: blake3::Hash) {
        let mut progress = lock(&self.progress);
        progress.changed |= progress.expect.is_some_and(|e| e != hash);
        progress.digest = Some(hash);
        drop(progress);
        self.save(None);
        self.wake.notify_one();
    }

    /// The sender said every block is placed and stays (`--relay-wait`): it deposits here no
    /// more (unless asked to again), so collection need not wait for it.
    pub(crate) fn sent(&self) {
        lock(&self.progress).sent = true;
        self.save(None);
        self.wake.notify_one();
    }

    /// The sender said every block is placed (`gone`: and it has left, or it left without).
    pub(crate) fn sender_left(&self, sent: bool) {
        let mut progress = lock(&self.progress);
        progress.sender_gone = true;
        progress.sent |= sent;
        drop(progress);
        self.save(None);
        self.wake.notify_one();
    }

    /// Opens and writes blocks the sender deposited here itself (`sealed` end to end in the
    /// order of `ids`). Blocking.
    fn deliver(&self, blocks: &[(u64, Vec<u8>)]) -> Result<(), SessionError> {
        let (good, bad) = self.write_blocks(blocks)?;
        if let Some(id) = bad.first() {
            return Err(SessionError::Integrity(format!(
                "block {id} from the sender did not open"
            )));
        }
        self.mark_written(&good);
        Ok(())
    }

    /// Where the written part of the offset space ends: the start of the first block not
    /// written (the end when all are).
    fn written_end(&self) -> u64 {
        let mut p = lock(&self.progress);
        let from = p.written_prefix;
        let more = p.blocks.iter().skip(from).take_while(|w| **w == Where::Written).count();
        p.written_prefix = from + more;
        let first = p.written_prefix as u64;
        self.plan.range(first).map_or(self.plan.size, |r| r.start)
    }

    /// Hashes on over what is written (in the background: the blocks' flow does not wait),
    /// until it caught up with the written part, or another call is hashing.
    fn hash_written(self: &Arc<Self>) {
        let job = self.clone();
        tokio::task::spawn_blocking(move || {
            loop {
                let end = job.written_end();
                match job.hashing.advance(job.landing.store(), end, &job.cancel) {
                    // More was written meanwhile.
                    Ok(Some(at)) if at < job.written_end() => {}
                    Ok(_) => return,
                    Err(e) => {
                        // `finish` reads it again, and says so if it still fails.
                        debug!(transfer = %job.name(), error = %e, "hashing the written part failed");
                        return;
                    }
                }
            }
        });
    }

    /// Opens each block and writes the good ones, then syncs the part file: the written and
    /// the rejected blocks.
    fn write_blocks(
        &self,
        blocks: &[(u64, Vec<u8>)],
    ) -> Result<(Vec<u64>, Vec<u64>), SessionError> {
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        for (id, sealed) in blocks {
            let Some(range) = self.plan.range(*id) else {
                bad.push(*id);
                continue;
            };
            match self.key.open(*id, range.end - range.start, sealed) {
                Ok(plain) => {
                    self.write_at(&plain, range.start)?;
                    good.push(*id);
                }
                Err(e) => {
                    warn!(transfer = %self.name(), error = %e, "a relayed block was rejected");
                    bad.push(*id);
                }
            }
        }
        self.sync()?;
        Ok((good, bad))
    }

    fn write_at(&self, plain: &[u8], at: u64) -> Result<(), SessionError> {
        match &self.landing {
            Landing::File { part, file } => file
                .write_all_at(plain, at)
                .map_err(|e| SessionError::io(format!("writing {}", part.display()), e)),
            Landing::Tree { store, .. } => write_all_at(&**store, plain, at).map_err(|e| {
                SessionError::io(format!("writing beneath {}", self.dest.display()), e)
            }),
        }
    }

    /// Makes what was written durable (before the relays may delete it).
    fn sync(&self) -> Result<(), SessionError> {
        match &self.landing {
            Landing::File { part, file } => file
                .sync_data()
                .map_err(|e| SessionError::io(format!("syncing {}", part.display()), e)),
            // The files written may have left the set's window of open files: the whole file
            // system's, once.
            Landing::Tree { .. } => self
                .fs
                .open(&self.dest, false)
                .and_then(|d| rustix::fs::syncfs(&d).map_err(std::io::Error::from))
                .map_err(|e| SessionError::io(format!("syncing {}", self.dest.display()), e)),
        }
    }

    fn mark_written(&self, ids: &[u64]) {
        let mut progress = lock(&self.progress);
        for &id in ids {
            if let Some(slot) = progress.blocks.get_mut(id as usize) {
                *slot = Where::Written;
            }
        }
        drop(progress);
        self.save(None);
        self.wake.notify_one();
    }

    /// Keeps a tree's manifest, overwrite policy and temporary files beside its record
    /// ([`TreeRecord`]): what a restarted server plans the tree again from. Written once, as
    /// the job starts: they do not change. Does file I/O.
    fn save_tree(&self, policy: Policy) {
        let (Some((path, ..)), Landing::Tree { incoming, .. }) = (&self.saved, &self.landing)
        else {
            return;
        };
        let record = lock(incoming).as_ref().map(|i| TreeRecord {
            entries: i.entries().to_vec(),
            overwrite: policy.overwrite,
            preserve: policy.preserve,
            checksum: policy.checksum,
            temps: i.temps().to_vec(),
        });
        if let Some(record) = record
            && let Err(e) = keep_record(&collect_record::tree_path(path), &record)
        {
            warn!(transfer = %self.name(), error = %e, "the tree's record could not be kept: a restart would drop the job");
        }
    }

    /// Keeps the job's record as it is now (on a server with a state directory:
    /// [`collect_record`]), `stalled` with why and when once it stalled. A record that cannot
    /// be written is said: the job goes on, and a restart would not. Does file I/O (a small
    /// file: the blocks' places are run-length coded; a tree's manifest is kept apart, once:
    /// [`Collection::save_tree`]).
    fn save(&self, stalled: Option<(String, u64)>) {
        let Some((path, root, token)) = &self.saved else { return };
        let mut last = lock(&self.record_final);
        if *last {
            return;
        }
        let part = match &self.landing {
            Landing::File { part, .. } => part.clone(),
            Landing::Tree { .. } => self.dest.clone(),
        };
        *last = stalled.is_some();
        let record = {
            let p = lock(&self.progress);
            let spot = |w: &Where| match *w {
                Where::Missing => collect_record::MISSING,
                Where::Written => collect_record::WRITTEN,
                Where::At(r) | Where::Fetching(r) => i64::from(r),
            };
            Record {
                transfer: self.name(),
                key: to_hex(&self.key.secret().key),
                iv: to_hex(&self.key.secret().iv),
                size: self.plan.size,
                block_bytes: self.plan.block_bytes,
                token: to_hex(token),
                root: root.clone(),
                dest: self.dest.clone(),
                part,
                named: self.listed.dest.clone(),
                started: self.listed.started,
                relays: self
                    .relays
                    .iter()
                    .map(|r| RelayRecord {
                        address: r.address.to_string(),
                        fingerprint: r.fingerprint.to_string(),
                        capability: to_hex(&r.capability),
                    })
                    .collect(),
                blocks: collect_record::runs(p.blocks.iter().map(spot)),
                elsewhere: p.elsewhere.clone(),
                digest: p.digest.map(|d| d.to_hex().to_string()),
                expect: p.expect.map(|d| d.to_hex().to_string()),
                sent: p.sent,
                stalled,
                mode: Some(self.mode),
                preserve: self.preserve,
                mtime: self.mtime,
                tree: matches!(self.landing, Landing::Tree { .. }),
                temps: Vec::new(),
            }
        };
        if let Err(e) = keep_record(path, &record) {
            warn!(transfer = %self.name(), error = %e, "the collection's record could not be kept: a restart would drop it");
        }
    }

    /// Blocks that could not be had where they were: collected from another relay that holds
    /// them, else missing again, and asked of the sender.
    fn lost(&self, ids: Vec<u64>) {
        let mut progress = lock(&self.progress);
        let mut refetch = Vec::new();
        for id in ids {
            let other = progress.elsewhere.get_mut(&id).and_then(Vec::pop);
            let Some(slot) = progress.blocks.get_mut(id as usize) else { continue };
            if *slot == Where::Written {
                continue;
            }
            match other {
                Some(relay) => *slot = Where::At(relay),
                None => {
                    *slot = Where::Missing;
                    refetch.push(id);
                }
            }
        }
        drop(progress);
        self.wake.notify_one();
        if !refetch.is_empty() {
            let _ = self.events.send(JobEvent::Refetch(refetch));
        }
    }

    /// A batch that failed at `relay` waits there for another attempt.
    fn put_back(&self, relay: u32, batch: &[u64]) {
        let mut progress = lock(&self.progress);
        for id in batch {
            if let Some(w) = progress.blocks.get_mut(*id as usize)
                && *w == Where::Fetching(relay)
            {
                *w = Where::At(relay);
            }
        }
    }

    /// Whether `relay` holds blocks to collect.
    fn waiting(&self, relay: u32) -> bool {
        lock(&self.progress).blocks.contains(&Where::At(relay))
    }

    /// Collects the next batch from `relay` once the receiver's link is its: one collection
    /// moves data at a time, and none while the sender deposits here itself. Each hop is a
    /// flow of its own, and each new flow's startup built a queue at the receiver's link
    /// that made those running there cut: in the relay topology, three collections beside the
    /// sender's own deposits were cut to 2-6 Mbit/s each for seconds while the link carried
    /// 50-80 of its 100. The sender's deposits go first because they are what keeps it
    /// there; the relays hold their blocks durably until the collector comes.
    async fn collect_next(self: Arc<Self>, relay: u32) -> (Vec<u64>, Result<(), SessionError>) {
        let Ok(downlink) = self.downlink.clone().acquire_owned().await else {
            return (Vec::new(), Ok(()));
        };
        while self.sender_depositing() {
            tokio::time::sleep(DIRECT_POLL).await;
        }
        let batch = self.next_batch(relay);
        if batch.is_empty() {
            return (batch, Ok(()));
        }
        let result = self.clone().collect(relay, batch.clone(), downlink).await;
        (batch, result)
    }

    /// Whether the sender, still there and striping, is depositing here itself (or did
    /// within [`DIRECT_QUIET`]: its next deposit follows within a few round trips).
    fn sender_depositing(&self) -> bool {
        let (moving, last) = *lock(&self.direct);
        let p = lock(&self.progress);
        let striping = !p.sender_gone && !p.sent;
        drop(p);
        striping && (moving > 0 || last.is_some_and(|at| at.elapsed() < DIRECT_QUIET))
    }

    /// Receives a batch of the sender's own (`blocks`, sealed, end to end) on the hop
    /// `setup`, `send` and `recv` make with `peer`, while the relays' collections wait; opens
    /// and writes it, then tells the sender the blocks are stored: an upload's direct deposit
    /// at its server, a download's direct share at its client.
    pub(crate) async fn receive_own(
        self: &Arc<Self>,
        setup: ChannelSetup<'_>,
        send: &mut quinn::SendStream,
        recv: &mut quinn::RecvStream,
        peer: crate::session::Peer,
        blocks: &[BlockLen],
    ) -> Result<(), SessionError> {
        let conn = setup.conn;
        let moving = self.direct_deposit();
        let sealed = receive_blocks(setup, send, recv, peer, blocks, None).await?;
        drop(moving);
        let job = self.clone();
        blocking(move || job.deliver(&sealed)).await?;
        {
            let len = |b: &BlockLen| self.plan.range(b.id).map_or(0, |r| r.end - r.start);
            let mut own = lock(&self.own_delivered);
            own.0 += blocks.len() as u64;
            own.1 += blocks.iter().map(len).sum::<u64>();
        }
        self.hash_written();
        let ids = blocks.iter().map(|b| b.id).collect();
        write_hop(send, conn, &HopMsg::Stored { blocks: ids }).await
    }

    /// The blocks and file bytes the sender's own deposits delivered so far.
    pub(crate) fn own_delivered(&self) -> (u64, u64) {
        *lock(&self.own_delivered)
    }

    /// A deposit of the sender's own comes in (until the guard drops).
    fn direct_deposit(self: &Arc<Self>) -> DirectDeposit {
        lock(&self.direct).0 += 1;
        DirectDeposit(self.clone())
    }

    /// The next batch to collect from `relay`, marked as being fetched.
    fn next_batch(&self, relay: u32) -> Vec<u64> {
        let mut progress = lock(&self.progress);
        let mut batch = Vec::new();
        let mut bytes = 0;
        for (id, slot) in progress.blocks.iter_mut().enumerate() {
            if *slot == Where::At(relay) && batch.len() < MAX_BATCH_BLOCKS && bytes < BATCH_BYTES {
                *slot = Where::Fetching(relay);
                batch.push(id as u64);
                bytes += self.plan.block_bytes;
            }
        }
        batch
    }

    async fn relay_client(&self, relay: u32) -> Result<Client, SessionError> {
        if let Some(client) = lock(&self.clients)[relay as usize].clone() {
            return Ok(client);
        }
        let at = &self.relays[relay as usize];
        let mut config = ClientConfig::new(
            at.address,
            at.address.to_string(),
            "",
            "/dev/null",
            TrustPolicy::Pinned(at.fingerprint.clone()),
        );
        config.grant = Some(super::capability_claim(&self.transfer, &at.capability));
        config.identity = Some(self.identity.clone());
        if lock(&self.over_tcp)[relay as usize] {
            config.transport = TransportChoice::Tcp;
        }
        let client = tokio::time::timeout(RELAY_CONNECT_TIMEOUT, Client::connect(config))
            .await
            .map_err(|_| {
            SessionError::Network(format!(
                "relay {} did not answer within {} s",
                at.address,
                RELAY_CONNECT_TIMEOUT.as_secs()
            ))
        })??;
        lock(&self.clients)[relay as usize] = Some(client.clone());
        Ok(client)
    }

    /// Collects `batch` from `relay`, writes what opens, releases it there; what the relay did
    /// not have or did not open is lost there.
    async fn collect(
        self: Arc<Self>,
        relay: u32,
        batch: Vec<u64>,
        downlink: OwnedSemaphorePermit,
    ) -> Result<(), SessionError> {
        let client = self.relay_client(relay).await?;
        let collect = Collect { transfer: self.name(), blocks: batch.clone() };
        // The next collection starts as this one's data nears its end.
        let hop = client.collect_linked(collect, Some(Link::Held(downlink))).await?;
        let me = self.clone();
        let blocks = hop.blocks.clone();
        let (good, mut bad) = blocking(move || me.write_blocks(&blocks)).await?;
        let had: Vec<u64> = hop.blocks.iter().map(|(id, _)| *id).collect();
        // Written (and kept so in the job's record) before the relay may delete them.
        self.mark_written(&good);
        self.hash_written();
        // A copy that did not open is no use there either.
        hop.release(&had).await?;
        self.discard_elsewhere(&good);
        bad.extend(batch.iter().filter(|id| !had.contains(id)));
        self.lost(bad);
        Ok(())
    }

    /// Runs the job to its end: the file in place, or a stalled job kept for a re-run, or
    /// (it cannot go on) its part file deleted.
    async fn run(self: Arc<Self>, collections: Arc<Collections>) {
        let end = self.drive().await;
        let stopped = self.cancel.load(Ordering::Relaxed) || self.paused.load(Ordering::Relaxed);
        if end.is_err() && stopped {
            // A cancelled job's blocks are of no use at its relays: each is told at once (for
            // a few seconds at most), so that a stopped download or `jobs --cancel` frees
            // their spools now rather than at their expiry.
            let mut telling = JoinSet::new();
            for relay in 0..self.relays.len() as u32 {
                telling.spawn(self.clone().discard(relay, Vec::new()));
            }
            let all = async { while telling.join_next().await.is_some() {} };
            let _ = tokio::time::timeout(CANCELLED_DISCARD_WAIT, all).await;
        }
        let stalled = {
            let p = lock(&self.progress);
            let kept = match &self.landing {
                _ if end.is_ok() || !p.stalled => None,
                Landing::File { part, .. } => Some(Kept::Part(part.clone())),
                Landing::Tree { incoming, .. } => lock(incoming).take().map(|incoming| {
                    let manifest = self.manifest.unwrap_or(blake3::Hash::from_bytes([0; 32]));
                    Kept::Tree { incoming: Box::new(incoming), manifest }
                }),
            };
            kept.map(|kept| Stalled {
                kept,
                record: self.saved.as_ref().map(|(path, ..)| path.clone()),
                fs: self.fs.clone(),
                plan: self.plan,
                written: p.written(),
                digest: p.digest.unwrap_or(blake3::Hash::from_bytes([0; 32])),
                until: Instant::now() + STALLED_KEEP,
                transfer: self.transfer,
                listed: self.listed.clone(),
                from: self.from(),
                why: end.as_ref().err().map(|e| e.to_string()).unwrap_or_default(),
                at: unix_now(),
            })
        };
        match &end {
            Ok(bytes) => {
                info!(transfer = %self.name(), bytes, dest = %self.dest.display(), "relayed transfer collected");
                // What the relays still hold of it (second copies, deposits the sender did
                // not report before it left) is of no use: each is told, in the background.
                for relay in 0..self.relays.len() as u32 {
                    tokio::spawn(self.clone().discard(relay, Vec::new()));
                }
            }
            Err(e) if stalled.is_some() => {
                if self.paused.load(Ordering::Relaxed) {
                    info!(transfer = %self.name(), dest = %self.dest.display(), "relayed transfer stopped: what it wrote is kept for the same copy run again");
                } else {
                    warn!(transfer = %self.name(), error = %e, dest = %self.dest.display(), "relayed transfer stalled: the same copy run again moves only the missing blocks");
                }
                // Kept so across a restart.
                self.save(Some((e.to_string(), unix_now())));
            }
            Err(e) => {
                warn!(transfer = %self.name(), error = %e, "relayed transfer failed");
                match &self.landing {
                    Landing::File { part, .. } => {
                        let _ = self.fs.remove_file(part);
                    }
                    // Dropped, the plan removes its temporary files.
                    Landing::Tree { incoming, .. } => drop(lock(incoming).take()),
                }
            }
        }
        // Off the running ones and into the stalled or the ended ones in one step (under the
        // running ones' lock, as a listing reads them), so that a listing shows it once.
        let mut running = lock(&collections.running);
        match stalled {
            Some(stalled) => {
                lock(&collections.stalled).insert(self.dest.clone(), stalled);
            }
            None => {
                if let Some((path, ..)) = &self.saved {
                    *lock(&self.record_final) = true;
                    collect_record::remove(path);
                }
                let written: Vec<bool> = lock(&self.progress).written();
                let ended = match &end {
                    Ok(_) => (JobPhase::Done, unix_now(), None),
                    Err(_) if self.cancel.load(Ordering::Relaxed) => {
                        (JobPhase::Cancelled, unix_now(), None)
                    }
                    Err(e) => (JobPhase::Failed, unix_now(), Some(e.to_string())),
                };
                let info = job_info(
                    &self.transfer,
                    &self.listed,
                    self.from(),
                    &self.plan,
                    &written,
                    Some(ended),
                );
                collections.ended.push(self.listed.token, info);
            }
        }
        running.remove(&self.transfer);
        drop(running);
        let _ = self.events.send(JobEvent::End(end));
    }

    async fn drive(self: &Arc<Self>) -> Result<u64, SessionError> {
        let mut busy = vec![false; self.relays.len()];
        let mut outages = Outages::new(self.relays.len());
        let mut fetching: JoinSet<(u32, Vec<u64>, Result<(), SessionError>)> = JoinSet::new();
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(SessionError::Refused(CANCELLED.into()));
            }
            if self.paused.load(Ordering::Relaxed) {
                let mut p = lock(&self.progress);
                p.stalled = p.digest.is_some();
                return Err(SessionError::Refused(
                    "stopped: the same copy run again goes on from what arrived".into(),
                ));
            }
            for relay in 0..self.relays.len() as u32 {
                if busy[relay as usize] || !self.waiting(relay) {
                    continue;
                }
                busy[relay as usize] = true;
                let job = self.clone();
                fetching.spawn(async move {
                    let (batch, result) = job.collect_next(relay).await;
                    (relay, batch, result)
                });
            }
            let (all_written, digest, gone, missing) = {
                let p = lock(&self.progress);
                if p.changed {
                    return Err(SessionError::Integrity(format!(
                        "{}: the file is not the one whose copy left blocks behind: the \
                         collected part is dropped; run the copy again",
                        self.dest.display()
                    )));
                }
                let missing: Vec<u64> = p
                    .blocks
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| **w == Where::Missing)
                    .map(|(i, _)| i as u64)
                    .collect();
                (p.blocks.iter().all(|w| *w == Where::Written), p.digest, p.sender_gone, missing)
            };
            // Only once every collection ended: the last batch is written (and recorded so)
            // before its relay is told to release it, and the job's end must not come before
            // that release (the sender, told `Done`, may look at the relays).
            if all_written
                && fetching.is_empty()
                && let Some(digest) = digest
            {
                return self.finish(digest).await;
            }
            if gone && fetching.is_empty() && (!missing.is_empty() || digest.is_none()) {
                // What it has is kept for a re-run when the sender told what the file is.
                lock(&self.progress).stalled = digest.is_some();
                return Err(self.left_behind(&missing, digest.is_none()));
            }
            tokio::select! {
                Some(joined) = fetching.join_next(), if !fetching.is_empty() => {
                    let Ok((relay, batch, result)) = joined else { continue };
                    busy[relay as usize] = false;
                    match result {
                        Ok(()) => outages.ended(relay),
                        Err(e) => {
                            warn!(transfer = %self.name(), relay, error = %e, "collecting from a relay failed");
                            let client = lock(&self.clients)[relay as usize].take();
                            if client.is_some_and(|c| c.udp_data_blocked()) {
                                warn!(transfer = %self.name(), relay, "UDP reaches the relay's port but not its data channels: going on over TCP");
                                lock(&self.over_tcp)[relay as usize] = true;
                            }
                            if outages.failed(relay) {
                                self.lost(batch);
                            } else {
                                self.put_back(relay, &batch);
                                tokio::time::sleep(RELAY_RETRY_WAIT).await;
                            }
                        }
                    }
                }
                _ = self.wake.notified() => {}
            }
        }
    }

    /// Why the job cannot end: the sender left with these blocks nowhere (named as byte
    /// ranges of the file), or without its digest.
    fn left_behind(&self, missing: &[u64], no_digest: bool) -> SessionError {
        if no_digest && missing.is_empty() {
            return SessionError::Network(
                "the sender left before it sent the file's BLAKE3".into(),
            );
        }
        let ranges: Vec<String> = missing
            .iter()
            .take(8)
            .filter_map(|id| self.plan.range(*id))
            .map(|r| format!("{}..{}", r.start, r.end))
            .collect();
        let more = missing.len().saturating_sub(8);
        SessionError::Network(format!(
            "the sender left and {} blocks are nowhere to collect (bytes {}{})",
            missing.len(),
            ranges.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ))
    }

    /// Hashes what landed, compares, and renames it into place.
    async fn finish(self: &Arc<Self>, digest: blake3::Hash) -> Result<u64, SessionError> {
        let me = self.clone();
        blocking(move || {
            let hashed = me.hashed()?;
            if hashed.whole != digest {
                let what = match &me.landing {
                    Landing::File { .. } => "file",
                    Landing::Tree { .. } => "tree",
                };
                return Err(SessionError::Integrity(format!(
                    "{}: the collected {what} does not hash to the sender's BLAKE3",
                    me.dest.display()
                )));
            }
            match &me.landing {
                Landing::File { part, file } => me.finish_file(part, file),
                Landing::Tree { incoming, .. } => me.finish_tree(incoming, &hashed.each),
            }
        })
        .await
    }

    /// The whole offset space's BLAKE3 and each file's: the rest of what
    /// [`Collection::hash_written`] hashed as the blocks landed, read now. Blocking.
    fn hashed(&self) -> Result<super::verify::Hashed, SessionError> {
        let what = || self.dest.display().to_string();
        self.hashing
            .finish(self.landing.store(), &self.cancel)
            .map_err(|e| SessionError::io(format!("hashing {}", what()), e))?
            .ok_or_else(|| SessionError::Refused(CANCELLED.into()))
    }

    /// A tree whose whole offset space is the sender's (which makes every file's bytes the
    /// sender's, so each file's own check in the commit is its own hash, `each`): the plan is
    /// committed.
    fn finish_tree(
        &self,
        incoming: &Mutex<Option<Incoming>>,
        each: &[blake3::Hash],
    ) -> Result<u64, SessionError> {
        let Some(incoming) = lock(incoming).take() else {
            return Err(SessionError::Protocol("the tree was committed already".into()));
        };
        let committed = incoming.commit(each, each).map_err(plan_error)?;
        info!(dest = %self.dest.display(), files = committed.files, links = committed.links, "relayed tree in place");
        Ok(self.plan.size)
    }

    /// A file whose bytes (read through `written`, the handle the blocks were written with)
    /// are the sender's: renamed into place, when `part` is still that file and of its size.
    fn finish_file(&self, part: &Path, written: &File) -> Result<u64, SessionError> {
        let me = self;
        let file = me
            .fs
            .open(part, false)
            .map_err(|e| SessionError::io(format!("reading {}", part.display()), e))?;
        let (named, hashed) = file
            .metadata()
            .and_then(|named| Ok((named, written.metadata()?)))
            .map_err(|e| SessionError::io(format!("reading {}", part.display()), e))?;
        use std::os::unix::fs::MetadataExt;
        if (named.dev(), named.ino()) != (hashed.dev(), hashed.ino()) || named.len() != me.plan.size
        {
            return Err(SessionError::Integrity(format!(
                "{}: the part file was replaced or resized while it was collected",
                part.display()
            )));
        }
        // The part file is 0600 while it fills; in place it is 0755 when the source was
        // executable, else 0644, as a copy's file is; with `--preserve`, the source's bits
        // (without setuid, setgid and sticky) and modification time.
        let mode = crate::tree::incoming::file_mode(me.mode, me.preserve);
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(|e| SessionError::io(format!("setting {}'s mode", part.display()), e))?;
        if let (true, Some(mtime)) = (me.preserve, me.mtime) {
            file.set_modified(crate::tree::incoming::system_time(mtime))
                .map_err(|e| SessionError::io(format!("setting {}'s time", part.display()), e))?;
        }
        me.fs
            .rename(part, &me.dest)
            .map_err(|e| SessionError::io(format!("renaming to {}", me.dest.display()), e))?;
        Ok(me.plan.size)
    }
}

/// A deposit of the sender's own moving into its collection ([`Collection::direct_deposit`]).
pub(crate) struct DirectDeposit(Arc<Collection>);

impl Drop for DirectDeposit {
    fn drop(&mut self) {
        let mut direct = lock(&self.0.direct);
        direct.0 = direct.0.saturating_sub(1);
        direct.1 = Some(Instant::now());
    }
}

/// A collection as `sluice jobs` shows it: `written` says which blocks of `plan` landed, and
/// `end` its phase, when and why once it is no longer running.
fn job_info(
    transfer: &TransferId,
    listed: &Listed,
    from: String,
    plan: &BlockPlan,
    written: &[bool],
    end: Option<(JobPhase, u64, Option<String>)>,
) -> JobInfo {
    let block_bytes = |id: u64| plan.range(id).map_or(0, |r| r.end - r.start);
    let ids = (0..plan.count()).filter(|id| written.get(*id as usize).is_some_and(|w| *w));
    let bytes: u64 = ids.map(block_bytes).sum();
    let (phase, ended, error) = match end {
        None => (JobPhase::Running, None, None),
        Some((phase, at, why)) => (phase, Some(at), why),
    };
    let missing = match phase {
        JobPhase::Stalled => {
            let lacking =
                (0..plan.count()).filter(|id| !written.get(*id as usize).is_some_and(|w| *w));
            id_ranges(lacking)
                .into_iter()
                .filter_map(|[a, b]| Some([plan.range(a)?.start, plan.range(b - 1)?.end]))
                .collect()
        }
        _ => Vec::new(),
    };
    let missing_bytes = missing.iter().map(|[a, b]| b - a).sum();
    JobInfo {
        kind: JobKind::Relayed,
        id: to_hex(transfer),
        from,
        dest: listed.dest.clone(),
        phase,
        bytes,
        total: plan.size,
        files: listed.files,
        started: listed.started,
        ended,
        missing: missing.into_iter().take(MAX_JOB_RANGES).collect(),
        missing_bytes,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collectors_patience_is_per_outage_not_per_job() {
        let mut outages = Outages::new(2);
        for _ in 1..RELAY_ATTEMPTS {
            assert!(!outages.failed(0), "a failure within the attempts is tried again");
        }
        assert!(outages.failed(0), "the last attempt gives the batch up");
        assert!(outages.failed(0), "and so does each further failure in the outage");
        assert!(!outages.failed(1), "another relay's outage is its own");
        outages.ended(0);
        for _ in 1..RELAY_ATTEMPTS {
            assert!(!outages.failed(0), "a new outage gets the attempts again");
        }
        assert!(outages.failed(0));
        assert!(outages.failed(7), "a relay the job does not know is given up at once");
    }
}
