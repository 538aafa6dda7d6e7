//! A relayed upload's sending end (FSP's striping): the client cuts the file into blocks,
//! seals each, and hands them out over the relays and, when asked, the receiver itself (the
//! direct path), by strategy. It tells the receiver where each block is as soon as the relay
//! holds it durably, and is done ("retreats") once every block is on the receiver or on a
//! relay and the file's BLAKE3 is sent: the receiver's job collects the rest.
//!
//! A tree is sent as its files' bytes end to end in manifest order (a [`FileSet`], as the
//! direct path moves trees): blocks may span files; the receiver lays them out the same way.
//!
//! A destination that fails gives its blocks back; the others (or the direct path) take them.
//! A block the receiver could not collect comes back as `Refetch` while the sender is there.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_session::relay::{
    BlockPlan, CollectMsg, DEFAULT_BLOCK_BYTES, MAX_BATCH_BLOCKS, RelaySpot, RelayedPut, Strategy,
    Stripe, StripeMsg, to_hex,
};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::hop::Link;
use super::seal::BlockKey;
use crate::datapath::read_exact_at;
use crate::files::Confined;
use crate::session::channel::frame_error;
use crate::session::client::relay::RelayedRequest;
use crate::session::copy::local_walk_error;
use crate::session::identity::Fingerprint;
use crate::session::messages::{Messages, write_message};
use crate::session::{Client, Overwrite, SessionError, Transport};
use crate::tree::FileSet;
use crate::tree::manifest::{Entry, EntryKind};
use crate::tree::walk::{WalkOptions, walk};

/// How long an idle destination waits before it asks for blocks again (others' failures or
/// the receiver's refetches may give some back).
const IDLE_POLL: Duration = Duration::from_millis(20);
/// A block's count of relays holding it when the receiver has it.
const AT_RECEIVER: u8 = u8::MAX;
/// How long the sender waits for the receiver to end the request once it said `Sent`.
const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// A relay to stripe over: a name for reports and a session with it (its token must have
/// the `relay` right there).
#[derive(Debug, Clone)]
pub struct RelayTarget {
    /// The name the user knows it by.
    pub name: String,
    /// The session with it.
    pub client: Client,
}

/// A relay a server stripes relayed downloads over (`[relays.NAME]` of `serve --config`): the name
/// clients ask for it by, and how the server reaches it (its token there needs the `relay`
/// right).
#[derive(Debug, Clone)]
pub struct ServerRelay {
    /// The name clients ask for it by.
    pub name: String,
    /// How the server reaches it.
    pub config: crate::session::ClientConfig,
}

/// The relays that accept at least one block of `block_bytes` from their sessions' tokens
/// now, ranked by the room they have for it, most first (FSP's selection "ranked by what they
/// accept"; each is asked `SpoolRoom` at once); and those left out, with why (no room for a
/// block, no relay right, no answer).
pub async fn rank_relays(
    relays: Vec<RelayTarget>,
    block_bytes: u64,
) -> (Vec<RelayTarget>, Vec<(RelayTarget, SessionError)>) {
    let need = block_bytes.saturating_add(sluice_session::relay::SEAL_OVERHEAD);
    let mut asking = JoinSet::new();
    for (i, relay) in relays.iter().enumerate() {
        let client = relay.client.clone();
        asking.spawn(async move { (i, client.spool_room().await) });
    }
    let mut rooms: Vec<Result<u64, SessionError>> =
        relays.iter().map(|_| Err(SessionError::Network("no answer".into()))).collect();
    while let Some(joined) = asking.join_next().await {
        if let Ok((i, room)) = joined {
            rooms[i] = room;
        }
    }
    let mut kept = Vec::new();
    let mut left = Vec::new();
    for (relay, room) in relays.into_iter().zip(rooms) {
        match room {
            Ok(bytes) if bytes >= need => kept.push((bytes, relay)),
            Ok(bytes) => left.push((
                relay,
                SessionError::Busy(format!(
                    "its spool has room for {bytes} bytes, less than one block ({need})"
                )),
            )),
            Err(e) => left.push((relay, e)),
        }
    }
    // Most room first; the order given among equals.
    kept.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
    (kept.into_iter().map(|(_, r)| r).collect(), left)
}

/// How a relayed upload stripes.
#[derive(Debug, Clone)]
pub struct RelayedOptions {
    /// Who takes which blocks.
    pub strategy: Strategy,
    /// Bytes per block.
    pub block_bytes: u64,
    /// Blocks each deposit carries at most (and at most [`DEPOSIT_BYTES`] of them), both scaled
    /// up for a destination farther than [`DEPOSIT_RTT`].
    pub batch_blocks: usize,
    /// Compress each block at this zstd level when it shrinks.
    pub compress: Option<i32>,
    /// Whether the receiver takes blocks directly too (it is "in the striping").
    pub direct: bool,
    /// A file at the destination.
    pub overwrite: Overwrite,
    /// Keep permission bits and modification times (`--preserve`; in a download this end's
    /// choice).
    pub preserve: bool,
    /// `if-different` compares content (`--checksum`): the sender hashes every file first.
    pub checksum: bool,
    /// Stay until the receiver has the verified file (else leave once every block is safe).
    pub wait: bool,
    /// On how many relays a block must be (fsync'd) before it counts as safe, unless the
    /// receiver has it: 1, or 2 (`--relay-copies 2`: a relay lost after the retreat loses
    /// nothing).
    pub copies: u8,
}

impl Default for RelayedOptions {
    fn default() -> Self {
        RelayedOptions {
            strategy: Strategy::Fcfs,
            block_bytes: DEFAULT_BLOCK_BYTES,
            batch_blocks: 8,
            compress: None,
            direct: true,
            overwrite: Overwrite::Refuse,
            preserve: false,
            checksum: false,
            wait: false,
            copies: 1,
        }
    }
}

/// The most bytes of blocks one deposit carries: a destination takes the next blocks only once
/// its batch is safe, so a batch is the grain of the striping's balance (the last batches of
/// the slowest destination set the send time). Measured in the relay topology
/// (`examples/relay_topology.rs`, 256 MiB, 3 relays and the receiver): 8 blocks of 4 MiB a
/// batch sent in 11.07 s, 8 of 1 MiB in 8.18 s.
pub const DEPOSIT_BYTES: u64 = 8 << 20;

/// The round trip up to which a deposit carries [`DEPOSIT_BYTES`] (and the options' count of
/// blocks); a farther destination takes proportionally more at a time, up to
/// [`DEPOSIT_SCALE_MAX`] times. Each deposit is a flow of its own and pays about a round trip
/// of its path that its data does not fill (the flow's start, and its end before the next
/// one's data takes the link), which 8 MiB amortizes over 168 round trips of 4 ms but only 13
/// of 50 ms. Measured in the relay topology (`examples/relay_topology.rs`, 1 GiB, 3 relays and
/// the receiver 50 ms away, one run each): the receiver's link carried the sender's own
/// deposits at 84 Mbit/s with 8 MiB ones, 92.6 with 16 MiB, 91.6 with 24 MiB; with this rule
/// (16 MiB there), 87.5-89.4 over four runs against 83.7-85.9 before (BENCHMARKS.md,
/// 2026-11-28 evening).
const DEPOSIT_RTT: Duration = Duration::from_millis(25);
/// The most times [`DEPOSIT_BYTES`] a far destination's deposit carries: the last deposits of
/// the slowest destination set the send time.
const DEPOSIT_SCALE_MAX: f64 = 4.0;

/// How many times [`DEPOSIT_BYTES`] (and the options' count) a deposit over a path of round
/// trip `rtt` carries: 1 up to [`DEPOSIT_RTT`], then in proportion.
fn deposit_scale(rtt: Duration) -> f64 {
    (rtt.as_nanos() as f64 / DEPOSIT_RTT.as_nanos() as f64).clamp(1.0, DEPOSIT_SCALE_MAX)
}

/// Blocks a deposit carries: at most `blocks` times `scale`, at most [`DEPOSIT_BYTES`] times
/// `scale` of them and at most a hop's [`MAX_BATCH_BLOCKS`], at least one.
fn batch_of(blocks: usize, block_bytes: u64, scale: f64) -> usize {
    let bytes = (DEPOSIT_BYTES as f64 * scale) as u64;
    let fit = usize::try_from(bytes / block_bytes.max(1)).unwrap_or(usize::MAX);
    let count = (blocks as f64 * scale) as usize;
    count.min(fit).clamp(1, MAX_BATCH_BLOCKS)
}

/// Lines of deposits to each destination ([`Worker::run`]): the batch of one moves while the
/// next is sealed and its request made; so each destination holds up to this many batches.
const LINES: usize = 2;

/// What one destination took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    /// The relay's name, or `direct`.
    pub name: String,
    /// Blocks it holds.
    pub blocks: u64,
    /// Bytes of them: sealed, as the sender deposited them (an upload's report); of the file,
    /// as the client wrote them (a download's: it does not see the sealed sizes).
    pub bytes: u64,
}

/// What a relayed upload did.
#[derive(Debug, Clone, Default)]
pub struct RelayedReport {
    /// Files sent (1, or a tree's).
    pub files: u64,
    /// Bytes of the file (of a tree: of its files).
    pub bytes: u64,
    /// Blocks it was cut into.
    pub blocks: u64,
    /// Seconds until every block was safe and the digest sent (the sender's part).
    pub send_seconds: f64,
    /// Seconds until the receiver had the verified file, when the sender waited for it.
    pub total_seconds: Option<f64>,
    /// The receiver's job.
    pub job: String,
    /// Blocks the receiver had already from an earlier run of this copy (not moved again).
    pub resumed_blocks: u64,
    /// A tree's files the receiver kept as they were (its overwrite policy): not sent.
    pub kept_files: u64,
    /// Each destination's share.
    pub placed: Vec<Placed>,
    /// Relays the receiver left out, each with why (a relayed download's client keeps only
    /// those within its round-trip limit).
    pub left_out: Vec<String>,
}

/// What a relayed upload sends: one file, or a tree's files, as one offset space.
struct Source {
    /// The name at the destination (a tree's top directory's).
    name: String,
    /// A tree's manifest (empty for one file).
    entries: Vec<Entry>,
    /// The files and their sizes, in manifest order.
    files: Vec<(std::path::PathBuf, u64)>,
    /// A tree's files are reached through the directory walked.
    fs: Option<Confined>,
    /// One file's modification time (seconds since the Unix epoch) and permission bits.
    mtime: Option<i64>,
    mode: Option<u32>,
    /// One file's BLAKE3, hex, when asked for (`--checksum`).
    blake3: Option<String>,
}

impl Source {
    /// Lists `local`: a regular file, or a directory and everything beneath it; with
    /// `confine` (a server's root), every file is reached through it; with `checksum`, each
    /// file's BLAKE3 too (reading every file once first). Does file I/O.
    fn of(local: &Path, confine: Option<&Path>, checksum: bool) -> Result<Source, SessionError> {
        let shown = local.display();
        let root = Confined::new(confine)
            .map_err(|e| SessionError::io("opening the served directory", e))?;
        let meta =
            root.metadata(local).map_err(|e| SessionError::io(format!("reading {shown}"), e))?;
        let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if meta.is_file() {
            let files = vec![(local.to_owned(), meta.len())];
            let mtime = Some(std::os::unix::fs::MetadataExt::mtime(&meta));
            let mode = Some(std::os::unix::fs::MetadataExt::mode(&meta) & 0o7777);
            let mut blake3 = None;
            if checksum {
                let file = root
                    .open(local, false)
                    .map_err(|e| SessionError::io(format!("reading {shown}"), e))?;
                let never = AtomicBool::new(false);
                let hash = crate::files::hash_prefix(&file, meta.len(), &never)
                    .map_err(|e| SessionError::io(format!("hashing {shown}"), e))?;
                blake3 = hash.map(|h| h.to_hex().to_string());
            }
            let fs = Some(root);
            return Ok(Source { name, entries: Vec::new(), files, fs, mtime, mode, blake3 });
        }
        if !meta.is_dir() {
            return Err(SessionError::Config(format!(
                "{shown}: relays carry a regular file or a directory"
            )));
        }
        let confine = confine.map(Path::to_owned);
        let options = WalkOptions { recursive: true, confine, ..WalkOptions::default() };
        let mut walked = walk(&[local.to_owned()], &options).map_err(local_walk_error)?;
        if checksum {
            crate::session::add_checksums(&mut walked)?;
        }
        for skipped in &walked.skipped {
            warn!(%skipped, "left out of the relayed tree");
        }
        let sizes = walked.entries.iter().filter(|e| e.kind == EntryKind::File).map(|e| e.size);
        let files = walked.files.iter().cloned().zip(sizes).collect();
        let fs = Some(walked.fs.clone());
        let (entries, mtime, mode, blake3) = (walked.entries, None, None, None);
        Ok(Source { name, entries, files, fs, mtime, mode, blake3 })
    }

    /// Bytes of every file.
    fn total(&self) -> u64 {
        self.files.iter().map(|(_, size)| size).sum()
    }

    /// The files that move as one store: every one, or those `wanted` names (numbers among
    /// the files, ascending, as the receiver answered).
    fn store(&self, wanted: Option<&[u32]>) -> Result<FileSet, SessionError> {
        let files = match wanted {
            None => self.files.clone(),
            Some(wanted) => {
                let ascending = wanted.windows(2).all(|w| w[0] < w[1]);
                let picked: Option<Vec<_>> =
                    wanted.iter().map(|&n| self.files.get(n as usize).cloned()).collect();
                match picked {
                    Some(picked) if ascending => picked,
                    _ => {
                        return Err(SessionError::Protocol(format!(
                            "the receiver wants files {wanted:?} of {}",
                            self.files.len()
                        )));
                    }
                }
            }
        };
        let store = FileSet::new(files, false);
        Ok(match &self.fs {
            Some(fs) => store.confined(fs.clone()),
            None => store,
        })
    }
}

/// What a destination's worker reports.
enum Report {
    Placed { dest: usize, blocks: Vec<u64>, bytes: u64 },
    Failed { dest: usize, error: SessionError },
}

/// Each destination's share before any block is placed: the relays, then the direct path
/// (when there is one).
fn nothing_placed(relays: &[RelayTarget], direct: bool) -> Vec<Placed> {
    let named = |d: usize| relays.get(d).map_or_else(|| "direct".to_owned(), |r| r.name.clone());
    let dests = relays.len() + usize::from(direct);
    (0..dests).map(|d| Placed { name: named(d), ..Placed::default() }).collect()
}

fn random<const N: usize>() -> Result<[u8; N], SessionError> {
    let mut out = [0u8; N];
    aws_lc_rs::rand::fill(&mut out)
        .map_err(|_| SessionError::Config("the system random generator failed".into()))?;
    Ok(out)
}

/// A relayed transfer's sending end before its receiver answered: what it sends, its blocks,
/// its id, and the receiver's capability at each relay.
pub(crate) struct Prepared {
    source: Source,
    plan: BlockPlan,
    /// The transfer's id (the relays' and the receiver's name for it).
    pub(crate) transfer: [u8; 16],
    caps: Vec<[u8; 32]>,
    /// What the receiver is told (`Relayed`'s request, or a download's `Offer`).
    pub(crate) put: RelayedPut,
}

impl Prepared {
    /// Lists `local` (beneath `confine`, when given), cuts it into blocks and makes a
    /// capability per relay; `dest` is where the receiver puts it (empty for a download: the
    /// client decides). Checks `options` against the relays.
    pub(crate) async fn new(
        local: &Path,
        confine: Option<&Path>,
        dest: &str,
        relays: &[RelayTarget],
        options: &RelayedOptions,
    ) -> Result<Prepared, SessionError> {
        let (at, confine, checksum) =
            (local.to_owned(), confine.map(Path::to_owned), options.checksum);
        let mut source =
            tokio::task::spawn_blocking(move || Source::of(&at, confine.as_deref(), checksum))
                .await
                .map_err(|e| SessionError::io("listing", std::io::Error::other(e.to_string())))??;
        let plan =
            BlockPlan::new(source.total(), options.block_bytes).map_err(SessionError::Config)?;
        // The direct path is always there for blocks the receiver asks for again; it shares
        // in the striping only when asked.
        if !(1..=2).contains(&options.copies) || usize::from(options.copies) > relays.len().max(1) {
            return Err(SessionError::Config(format!(
                "{} copies on relays with {} relays: 1, or 2 with at least two relays",
                options.copies,
                relays.len()
            )));
        }
        if relays.len() + usize::from(options.direct) == 0 {
            return Err(SessionError::Config("no relay and no direct path to stripe over".into()));
        }
        let transfer = random::<16>()?;
        let caps = (0..relays.len()).map(|_| random::<32>()).collect::<Result<Vec<_>, _>>()?;
        let spots = relays
            .iter()
            .zip(&caps)
            .map(|(r, cap)| RelaySpot {
                address: r.client.server_address().to_string(),
                fingerprint: r.client.server_fingerprint().to_string(),
                capability: to_hex(cap),
                name: Some(r.name.clone()),
            })
            .collect();
        let put = RelayedPut {
            dest: dest.to_owned(),
            name: source.name.clone(),
            overwrite: options.overwrite,
            preserve: options.preserve,
            checksum: options.checksum,
            blake3: source.blake3.clone(),
            size: plan.size,
            mtime: source.mtime,
            mode: source.mode,
            block_bytes: plan.block_bytes,
            transfer: to_hex(&transfer),
            relays: spots,
            entries: std::mem::take(&mut source.entries),
        };
        Ok(Prepared { source, plan, transfer, caps, put })
    }
}

/// Where a striping worker's batches go.
#[derive(Clone)]
pub(crate) enum Destination {
    /// Deposited over a session this end opens requests on (a relay's, or an upload's
    /// session with its receiver).
    Deposit(Box<Client>),
    /// Taken by a download's client, which asks for its direct share ([`super::take`]).
    Taken(mpsc::Sender<super::take::Handed>),
}

impl Destination {
    /// Whether UDP reaches the destination's port but got nothing through its data channels
    /// (known of a session this end opened).
    fn udp_data_blocked(&self) -> bool {
        matches!(self, Destination::Deposit(c) if c.transport() == Transport::Udp && c.udp_data_blocked())
    }
}

/// Where a relayed transfer's sending end stripes to once its receiver accepted.
pub(crate) struct Striping<'a> {
    /// The relayed request's stream with the receiver (`StripeMsg`s out, `CollectMsg`s in).
    pub(crate) send: &'a mut quinn::SendStream,
    pub(crate) recv: &'a mut quinn::RecvStream,
    /// The session with the receiver.
    pub(crate) conn: quinn::Connection,
    /// The receiver's certificate, which each relay's capability binds.
    pub(crate) receiver: Fingerprint,
    /// The direct path to the receiver, when it is in the striping or takes blocks asked for
    /// again (an upload's session with its server, or a download's client taking its share).
    pub(crate) direct: Option<Destination>,
    /// The receiver's answer.
    pub(crate) accepted: RelayedRequest,
}

impl Client {
    /// Uploads the file `local` to `dest` on this server (the receiver) through `relays`:
    /// striped by `options`, sealed end to end, and collected by a job on the server.
    pub async fn upload_relayed(
        &self,
        local: &Path,
        dest: &str,
        relays: &[RelayTarget],
        options: &RelayedOptions,
    ) -> Result<RelayedReport, SessionError> {
        let started = Instant::now();
        let prepared = Prepared::new(local, None, dest, relays, options).await?;
        let (mut send, mut recv, req) = self.relayed(prepared.put.clone()).await?;
        let to = Striping {
            send: &mut send,
            recv: &mut recv,
            conn: self.connection().clone(),
            receiver: self.server_fingerprint().clone(),
            direct: Some(Destination::Deposit(Box::new(self.clone()))),
            accepted: req,
        };
        stripe(started, prepared, to, relays, options, &local.display().to_string()).await
    }
}

/// Stripes `prepared` over `relays` (and the direct path, when there is one) as `options`
/// say, telling the receiver where each block is; returns once every block is safe and the
/// digest sent (or, waiting, once the receiver has the verified file).
pub(crate) async fn stripe(
    started: Instant,
    prepared: Prepared,
    to: Striping<'_>,
    relays: &[RelayTarget],
    options: &RelayedOptions,
    shown: &str,
) -> Result<RelayedReport, SessionError> {
    let Prepared { source, plan, transfer, caps, put } = prepared;
    let Striping { send, recv, conn, receiver, direct: direct_client, accepted: req } = to;
    let is_tree = !put.entries.is_empty();
    // One file the receiver keeps as it is (its overwrite policy): nothing moves, and
    // the receiver set up no job.
    if !is_tree && req.wanted.as_ref().is_some_and(Vec::is_empty) {
        info!("the receiver keeps the file as it is: nothing to send");
        let _ = send.finish();
        let secs = started.elapsed().as_secs_f64();
        let placed = nothing_placed(relays, direct_client.is_some());
        return Ok(RelayedReport {
            files: 0,
            bytes: 0,
            blocks: 0,
            send_seconds: secs,
            total_seconds: options.wait.then_some(secs),
            job: req.job,
            resumed_blocks: 0,
            kept_files: 1,
            placed,
            left_out: Vec::new(),
        });
    }
    // The files the receiver keeps as they are (its overwrite policy) do not move: the
    // blocks cut only the others' bytes, end to end.
    let store = source.store(req.wanted.as_deref())?;
    let files = req.wanted.as_ref().map_or(source.files.len(), Vec::len) as u64;
    let kept_files = source.files.len() as u64 - files;
    if kept_files > 0 {
        info!(kept_files, "files the receiver keeps as they are do not move");
    }
    let plan = BlockPlan::new(store.total(), plan.block_bytes).map_err(SessionError::Config)?;
    let key = Arc::new(BlockKey::new(&req.secret, transfer));
    let file = Arc::new(store);
    let hash_file = file.clone();
    let mut hashing = tokio::task::spawn_blocking(move || {
        let mut hasher = blake3::Hasher::new();
        super::read_range(&*hash_file, 0..hash_file.total(), &mut |b| {
            hasher.update(b);
        })
        .map(|()| hasher.finalize())
    });

    // How many relays hold each block ([`AT_RECEIVER`]: the receiver has it); a block is
    // safe once that is `need`. A re-run of a copy that left blocks behind moves only those
    // the receiver lacks.
    let need = options.copies;
    let mut held = vec![0u8; plan.count() as usize];
    for &[start, end] in &req.have {
        for h in held.iter_mut().take(end as usize).skip(start as usize) {
            *h = AT_RECEIVER;
        }
    }
    let resumed_blocks = held.iter().filter(|h| **h == AT_RECEIVER).count() as u64;
    if resumed_blocks > 0 {
        info!(blocks = resumed_blocks, "the receiver has these blocks from an earlier run");
    }
    let pending: Vec<u64> = (0..plan.count()).filter(|id| held[*id as usize] == 0).collect();
    let sharing = relays.len() + usize::from(options.direct && direct_client.is_some());
    let stripe = Arc::new(Mutex::new(Stripe::new(options.strategy, &pending, sharing, LINES)));
    // The relays the receiver left out take no block: their shares go to the others.
    let skipped = |dest: usize| req.skip.iter().any(|&s| s as usize == dest);
    for dest in (0..relays.len()).filter(|d| skipped(*d)) {
        crate::session::lock(&stripe).give_back(dest, Vec::new());
    }
    let (reports, mut reported) = mpsc::unbounded_channel();
    let depositing = Arc::new(AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    // Each destination's round trip: a relay's session's, or the receiver's (the direct path).
    let rtt_of = |dest: usize| relays.get(dest).map_or_else(|| conn.rtt(), |r| r.client.rtt());
    let worker = |dest: usize, to: Destination| Worker {
        dest,
        to,
        cap_hash: caps
            .get(dest)
            .map_or_else(String::new, |cap| super::collector_hash(cap, &receiver)),
        transfer: to_hex(&transfer),
        stripe: stripe.clone(),
        key: key.clone(),
        file: file.clone(),
        plan,
        batch: batch_of(options.batch_blocks, plan.block_bytes, deposit_scale(rtt_of(dest))),
        compress: options.compress,
        reports: reports.clone(),
        depositing: depositing.clone(),
    };
    // The relays, then the direct path (when there is one): its blocks are at the receiver.
    let direct = relays.len();
    let dests = relays.len() + usize::from(direct_client.is_some());
    let mut alive = 0;
    for dest in (0..dests).filter(|d| !skipped(*d)) {
        let to = relays.get(dest).map_or_else(
            || direct_client.clone(),
            |r| Some(Destination::Deposit(Box::new(r.client.clone()))),
        );
        if let Some(to) = to {
            workers.spawn(worker(dest, to).run());
            alive += 1;
        }
    }
    if alive == 0 {
        return Err(SessionError::Refused("the receiver left out every relay".into()));
    }
    // A relay whose UDP data channels got nothing through is taken up once over TCP.
    let mut over_tcp = vec![false; relays.len()];
    // The direct path, when the receiver's data ports took nothing over UDP (its session's
    // port did: a firewall that lets only the service port through): its share and the blocks
    // asked for again go to the relays.
    let mut direct_gone = false;

    let mut placed = nothing_placed(relays, direct_client.is_some());
    let mut digest_sent = false;
    let mut send_seconds = None;
    let mut answers = Messages::<CollectMsg>::new(recv);
    loop {
        if send_seconds.is_none() && digest_sent && held.iter().all(|h| *h >= need) {
            // The receiver may have ended already (it had every block and the digest): it
            // stopped reading, and its `Done` is what comes next.
            let _ = write_message(send, &StripeMsg::Sent).await;
            let secs = started.elapsed().as_secs_f64();
            send_seconds = Some(secs);
            info!(seconds = secs, "every block is safe: the sender's part is done");
            if !options.wait {
                let _ = send.finish();
                // The receiver ends the request once it read `Sent`.
                let _ = tokio::time::timeout(LEAVE_WAIT, async {
                    while answers.next().await.is_ok() {}
                })
                .await;
                break;
            }
        }
        tokio::select! {
            report = reported.recv() => match report {
                Some(Report::Placed { dest, blocks, bytes }) => {
                    placed[dest].blocks += blocks.len() as u64;
                    placed[dest].bytes += bytes;
                    for &id in &blocks {
                        let h = &mut held[id as usize];
                        if dest == direct {
                            *h = AT_RECEIVER;
                        } else {
                            *h = h.saturating_add(1);
                            if *h < need {
                                crate::session::lock(&stripe).again_elsewhere(id, dest);
                            }
                        }
                    }
                    if dest < relays.len() {
                        let msg = StripeMsg::Placed { relay: dest as u32, blocks };
                        write_message(send, &msg).await.map_err(|e| frame_error(e, &conn))?;
                    }
                }
                Some(Report::Failed { dest, error }) => {
                    if let Some(relay) = relays.get(dest)
                        && !over_tcp[dest]
                        && relay.client.transport() == Transport::Udp
                        && relay.client.udp_data_blocked()
                    {
                        over_tcp[dest] = true;
                        warn!(destination = relay.name, "UDP reaches the relay's port but not its data channels: going on over TCP");
                        match relay.client.again_over_tcp().await {
                            Ok(client) => {
                                workers.spawn(worker(dest, Destination::Deposit(Box::new(client))).run());
                                continue;
                            }
                            Err(e) => warn!(destination = relay.name, error = %e, "the relay over TCP failed too"),
                        }
                    }
                    alive -= 1;
                    // The direct path that fails while relays are left: its share (and the
                    // blocks asked for again) go to them, when the failure is the direct
                    // path's alone (the receiver's data ports that UDP does not reach, or a
                    // download's client that stopped taking: its request goes on).
                    let direct_alone = match &direct_client {
                        Some(d) if d.udp_data_blocked() => {
                            Some("UDP reaches the server's port but not its data ports")
                        }
                        Some(Destination::Taken(_)) => Some("the client's direct share failed"),
                        _ => None,
                    };
                    if dest == direct && alive > 0 && let Some(why) = direct_alone {
                        warn!(%error, "{why}: the direct path's share goes to the relays");
                        direct_gone = true;
                        continue;
                    }
                    warn!(destination = placed[dest].name, %error, "a destination failed: its blocks go to the others");
                    if alive == 0 || dest == direct {
                        // The receiver's own verdict, when it has one, says why (a deposit
                        // straight to a job that just ended is refused for that reason).
                        if dest == direct && let Some(cause) = verdict(&mut answers).await {
                            return Err(cause);
                        }
                        let msg = StripeMsg::Failed { code: error.code(), message: error.detail() };
                        let _ = write_message(send, &msg).await;
                        return Err(error);
                    }
                }
                None => return Err(SessionError::Network("every destination failed".into())),
            },
            hash = &mut hashing, if !digest_sent => {
                let hash = hash
                    .map_err(|e| SessionError::io("hashing", std::io::Error::other(e.to_string())))?
                    .map_err(|e| SessionError::io(format!("hashing {shown}"), e))?;
                let msg = StripeMsg::Digest { blake3: hash.to_hex().to_string() };
                write_message(send, &msg).await.map_err(|e| frame_error(e, &conn))?;
                digest_sent = true;
            }
            answer = answers.next() => match answer.map_err(|e| frame_error(e, &conn))? {
                CollectMsg::Refetch { blocks } => {
                    warn!(blocks = blocks.len(), "the receiver asks for blocks again");
                    for id in &blocks {
                        if let Some(h) = held.get_mut(*id as usize) {
                            *h = 0;
                        }
                    }
                    // They go the direct way, or (none) to whichever relay asks next.
                    let mut stripe = crate::session::lock(&stripe);
                    if direct_client.is_some() && !direct_gone {
                        stripe.assign(direct, blocks);
                    } else {
                        stripe.give_back(usize::MAX, blocks);
                    }
                }
                CollectMsg::Done { .. } => {
                    settle(&mut reported, &depositing, &mut placed).await;
                    break;
                }
                CollectMsg::Failed { code, message } => {
                    return Err(SessionError::from_server(code, message));
                }
                CollectMsg::Accepted { .. } => {
                    return Err(SessionError::Protocol("a second Accepted".into()));
                }
            },
        }
    }
    workers.shutdown().await;
    let total_seconds = options.wait.then(|| started.elapsed().as_secs_f64());
    Ok(RelayedReport {
        files,
        bytes: plan.size,
        blocks: plan.count(),
        send_seconds: send_seconds.unwrap_or_else(|| started.elapsed().as_secs_f64()),
        total_seconds,
        job: req.job,
        resumed_blocks,
        kept_files,
        placed,
        left_out: Vec::new(),
    })
}

/// The receiver's failure of the request, when it reports one within [`LEAVE_WAIT`].
async fn verdict(answers: &mut Messages<'_, CollectMsg>) -> Option<SessionError> {
    let wait = tokio::time::timeout(LEAVE_WAIT, async {
        loop {
            match answers.next().await {
                Ok(CollectMsg::Failed { code, message }) => {
                    return Some(SessionError::from_server(code, message));
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    });
    wait.await.ok().flatten()
}

/// One destination's share of the striping.
struct Worker {
    dest: usize,
    to: Destination,
    cap_hash: String,
    transfer: String,
    stripe: Arc<Mutex<Stripe>>,
    key: Arc<BlockKey>,
    file: Arc<FileSet>,
    plan: BlockPlan,
    batch: usize,
    compress: Option<i32>,
    reports: mpsc::UnboundedSender<Report>,
    /// Workers between taking a batch and reporting it.
    depositing: Arc<AtomicUsize>,
}

/// Counts a worker as depositing while it lives (it ends after the worker's report).
struct Depositing(Arc<AtomicUsize>);

impl Depositing {
    fn enter(count: &Arc<AtomicUsize>) -> Depositing {
        count.fetch_add(1, Ordering::SeqCst);
        Depositing(count.clone())
    }
}

impl Drop for Depositing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts the deposits the receiver answered before its `Done` but whose workers had not
/// reported yet (the report is what the user is shown), waiting at most [`LEAVE_WAIT`].
async fn settle(
    reported: &mut mpsc::UnboundedReceiver<Report>,
    depositing: &AtomicUsize,
    placed: &mut [Placed],
) {
    let deadline = Instant::now() + LEAVE_WAIT;
    loop {
        let idle = depositing.load(Ordering::SeqCst) == 0;
        while let Ok(report) = reported.try_recv() {
            if let Report::Placed { dest, blocks, bytes } = report {
                placed[dest].blocks += blocks.len() as u64;
                placed[dest].bytes += bytes;
            }
        }
        if idle || Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl Worker {
    /// Deposits until the sender is done (it stops the worker) or the destination fails (its
    /// batches go back), with two deposits under way at a time: the next one's batch is
    /// sealed and its request and `Ready` exchange are done while the one before moves its
    /// data, and it takes the destination's link as that one's data ends (`hop::Link::Gate`).
    /// One at a time, each deposit paid those between its data: to a relay 4 ms away 0.86 s
    /// per 8 MiB, 0.74 s of it data; to the receiver 50 ms away 1.06 s, 0.88 of it data.
    /// A deposit that fails ends the destination's share, as with one deposit at a time: the
    /// other line takes no more batches (its deposit under way ends as it ends) and the
    /// failure is reported once both lines ended.
    async fn run(self) {
        let me = Arc::new(self);
        let link = Arc::new(Semaphore::new(1));
        let failed = Arc::new(AtomicBool::new(false));
        let line = || me.clone().deposits(link.clone(), failed.clone());
        const _: () = assert!(LINES == 2, "two lines of deposits below");
        let (a, b) = tokio::join!(line(), line());
        if let Some(error) = a.err().or(b.err()) {
            let _ = me.reports.send(Report::Failed { dest: me.dest, error });
        }
    }

    /// One line of deposits: takes a batch, seals it and deposits it, until the worker is
    /// stopped, a deposit fails (its batch goes back; `failed` is set) or the other line's did.
    async fn deposits(
        self: Arc<Self>,
        link: Arc<Semaphore>,
        failed: Arc<AtomicBool>,
    ) -> Result<(), SessionError> {
        let fail = |error: SessionError, batch: Vec<u64>| {
            crate::session::lock(&self.stripe).give_back(self.dest, batch);
            failed.store(true, Ordering::SeqCst);
            Err(error)
        };
        loop {
            if failed.load(Ordering::SeqCst) {
                return Ok(());
            }
            let batch = crate::session::lock(&self.stripe).take(self.dest, self.batch);
            if batch.is_empty() {
                tokio::time::sleep(IDLE_POLL).await;
                continue;
            }
            let _depositing = Depositing::enter(&self.depositing);
            let sealing = Instant::now();
            let sealed = match self.seal(&batch).await {
                Ok(sealed) => sealed,
                Err(error) => return fail(error, batch),
            };
            let bytes: u64 = sealed.iter().map(|(_, b)| b.len() as u64).sum();
            let secs = sealing.elapsed().as_secs_f64();
            tracing::debug!(dest = self.dest, blocks = batch.len(), bytes, secs, "a batch sealed");
            let stored = match &self.to {
                Destination::Deposit(client) => {
                    let gate = Some(Link::Gate(link.clone()));
                    client.deposit_gated(&self.transfer, &self.cap_hash, sealed, gate).await
                }
                Destination::Taken(to) => super::take::hand(to, sealed, link.clone()).await,
            };
            match stored {
                Ok(stored) => {
                    // What the relay did not say it stored is not safe: it goes back.
                    let (blocks, unsaid): (Vec<u64>, Vec<u64>) =
                        batch.iter().partition(|id| stored.contains(id));
                    if !unsaid.is_empty() {
                        crate::session::lock(&self.stripe).give_back(usize::MAX, unsaid);
                    }
                    let _ = self.reports.send(Report::Placed { dest: self.dest, blocks, bytes });
                }
                Err(error) => return fail(error, batch),
            }
        }
    }

    /// Reads and seals `batch`'s blocks (on a blocking thread).
    async fn seal(&self, batch: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, SessionError> {
        let (key, file, plan, compress) =
            (self.key.clone(), self.file.clone(), self.plan, self.compress);
        let ids = batch.to_vec();
        let sealed = tokio::task::spawn_blocking(move || {
            ids.iter()
                .map(|&id| {
                    let range = plan.range(id).unwrap_or(0..0);
                    let mut plain = vec![0u8; (range.end - range.start) as usize];
                    read_exact_at(&*file, &mut plain, range.start)?;
                    Ok((id, key.seal(id, &plain, compress)))
                })
                .collect::<std::io::Result<Vec<_>>>()
        })
        .await;
        match sealed {
            Ok(Ok(sealed)) => Ok(sealed),
            Ok(Err(e)) => Err(SessionError::io("reading the file to send", e)),
            Err(e) => Err(SessionError::io("sealing", std::io::Error::other(e.to_string()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deposit_carries_at_most_its_bytes_and_at_least_a_block() {
        assert_eq!(batch_of(8, 1 << 20, 1.0), 8);
        assert_eq!(batch_of(8, 4 << 20, 1.0), 2);
        assert_eq!(batch_of(8, 64 << 20, 1.0), 1, "a block larger than the cap goes alone");
        assert_eq!(batch_of(2, 64 << 10, 1.0), 2, "the count still binds");
        assert_eq!(batch_of(0, 1 << 20, 1.0), 1);
        assert_eq!(batch_of(8, 4 << 20, 2.0), 4, "twice the bytes");
        assert_eq!(batch_of(8, 1 << 20, 2.0), 16, "and twice the count");
        assert_eq!(batch_of(1000, 1 << 10, 4.0), MAX_BATCH_BLOCKS, "at most a hop's blocks");
    }

    #[test]
    fn a_farther_destination_takes_more_at_a_time_within_a_bound() {
        let ms = Duration::from_millis;
        assert_eq!(deposit_scale(ms(4)), 1.0);
        assert_eq!(deposit_scale(ms(25)), 1.0);
        assert_eq!(deposit_scale(ms(50)), 2.0);
        assert_eq!(deposit_scale(ms(75)), 3.0);
        assert_eq!(deposit_scale(ms(300)), DEPOSIT_SCALE_MAX);
        // The relay topology's receiver, 50 ms away, with 4 MiB blocks: 16 MiB a deposit.
        assert_eq!(batch_of(8, 4 << 20, deposit_scale(ms(50))), 4);
    }
}
