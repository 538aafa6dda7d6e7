//! Relays that fail (issue 28, item 6; `docs/relay.md`, "Faults"): a relay killed mid-way, one
//! whose spool fills, one restarted mid-way, and a copy whose sender left with blocks at a relay
//! the receiver cannot reach, run again to move only those. Nothing is renamed into place
//! unverified.
//!
//! A relay the receiver must not reach stands behind a [`Gate`]: a UDP forwarder before its
//! QUIC port that passes the sender (the first peer through it) and nobody else until opened.
//! That makes "the receiver could not collect from it yet" a fact of the test, not a race.

#![allow(clippy::print_stdout)] // tests print their seeds

use crate::common;
use crate::session_relay::{
    SEED, block_files, receiver_and_two_relays, relay, relayed_options, restart, targets,
};

use std::collections::HashMap;
use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TOKEN, TestServer, pattern};
use sluice::session::{
    Client, JobInfo, JobKind, JobPhase, RelayTarget, RelayedReport, SessionError,
};
use sluice_session::relay::Strategy;
use tokio::net::UdpSocket;
use tokio::task::JoinSet;

/// Block size of these tests (the smallest a plan may have is 64 KiB).
const BLOCK: u64 = 256 << 10;
/// Bytes of a sealed block of [`BLOCK`] plain bytes, uncompressed.
const SEALED: u64 = BLOCK + sluice_session::relay::SEAL_OVERHEAD;

/// A UDP forwarder before a relay's QUIC port: the first peer through it passes until the gate
/// is sealed, any other only once the gate is open. The hops' data channels do not pass it
/// (they go to the relay's own ports, on the same address).
pub(crate) struct Gate {
    pub(crate) addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    open: Arc<AtomicBool>,
    sealed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Gate {
    pub(crate) async fn before(target: SocketAddr) -> Gate {
        let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = front.local_addr().unwrap();
        let target = Arc::new(Mutex::new(target));
        let open = Arc::new(AtomicBool::new(false));
        let sealed = Arc::new(AtomicBool::new(false));
        let (to, opened, shut) = (target.clone(), open.clone(), sealed.clone());
        let task = tokio::spawn(async move {
            let mut first = None;
            let mut peers: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
            let mut back = JoinSet::new();
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, from)) = front.recv_from(&mut buf).await {
                let first_peer = *first.get_or_insert(from) == from && !shut.load(Ordering::SeqCst);
                if !first_peer && !opened.load(Ordering::SeqCst) {
                    continue;
                }
                let up = match peers.get(&from) {
                    Some(up) => up.clone(),
                    None => {
                        let up = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
                        let target = *to.lock().unwrap();
                        up.connect(target).await.unwrap();
                        let (reply, front) = (up.clone(), front.clone());
                        back.spawn(async move {
                            let mut buf = vec![0u8; 65_536];
                            while let Ok(n) = reply.recv(&mut buf).await {
                                let _ = front.send_to(&buf[..n], from).await;
                            }
                        });
                        peers.insert(from, up.clone());
                        up
                    }
                };
                let _ = up.send(&buf[..n]).await;
            }
        });
        Gate { addr, target, open, sealed, task }
    }

    /// The first peer is gone (its session closed): from now on only an open gate lets anyone
    /// through. The system may hand the first peer's port to a new socket, and that one is
    /// someone else: in one local CI run a receiver collected the blocks the test keeps out of
    /// its reach and placed the file, most likely through a retry's socket on the closed
    /// sender's port (the collector connects anew each try; not traced).
    pub(crate) fn seal(&self) {
        self.sealed.store(true, Ordering::SeqCst);
    }

    /// Lets everyone through, to `target` from now on.
    pub(crate) fn open_to(&self, target: SocketAddr) {
        *self.target.lock().unwrap() = target;
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A sender's session with `relay` through `gate`.
async fn through(gate: &Gate, relay: &TestServer, name: &str) -> RelayTarget {
    let mut config = relay.client_config();
    config.server = gate.addr;
    RelayTarget { name: name.into(), client: Client::connect(config).await.unwrap() }
}

/// Waits (at most 60 s) for `path` to exist.
async fn appears(path: &Path) -> bool {
    for _ in 0..600 {
        if path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Sealed bytes the report's destinations took, and their blocks.
fn moved(report: &RelayedReport) -> (u64, u64) {
    report.placed.iter().fold((0, 0), |(b, n), p| (b + p.bytes, n + p.blocks))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_mid_way_leaves_its_unconfirmed_blocks_to_the_others() {
    println!("seed {SEED}");
    let (receiver, spools, a, b) = receiver_and_two_relays().await;
    let local = tempfile::tempdir().unwrap();
    let content = pattern(48 * BLOCK as usize - 1000, SEED);
    let source = local.path().join("k.bin");
    fs::write(&source, &content).unwrap();
    let sender = receiver.client().await;
    let relays = targets(&[&a, &b]).await;
    // B dies once it stored its first deposit (a block file in a transfer's directory, not
    // in `tmp/`), with the sender's session open; its share is half the blocks.
    let watched = spools[1].path().to_owned();
    let tmp = watched.join("tmp");
    let killer = tokio::spawn(async move {
        for _ in 0..60_000 {
            if block_files(&watched).iter().any(|f| !f.starts_with(&tmp)) {
                b.stop().await;
                return true;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        b.stop().await;
        false
    });
    let options = relayed_options(Strategy::Partitioned, false, true);
    let report = sender.upload_relayed(&source, "k.bin", &relays, &options).await.unwrap();
    println!("{report:?}");
    assert!(killer.await.unwrap(), "the relay was never given a block");
    assert_eq!(fs::read(receiver.root().join("k.bin")).unwrap(), content);
    assert_eq!(common::listing(&receiver.root()), vec!["k.bin"], "no part file is left");
    let placed: Vec<u64> = report.placed.iter().map(|p| p.blocks).collect();
    assert!(placed[1] < 24, "the dead relay took its whole share: {placed:?}");
    // What it did not take, and what it held that the receiver could not collect, went to
    // the live relay or the direct path.
    assert!(placed[0] + placed[2] >= 48 - placed[1], "{placed:?}");
    assert!(placed[0] > 24 || placed[2] > 0, "{placed:?}");
    receiver.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_spool_fills_mid_way_leaves_the_rest_to_the_others() {
    println!("seed {SEED}");
    let receiver = TestServer::start().await;
    let spools = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    // A holds one deposit of two blocks, and the receiver never collects from it (so it
    // stays full): its second deposit is answered busy.
    let a = relay(spools[0].path(), 2 * SEALED + 1000, None).await;
    let gate = Gate::before(a.addr).await;
    let b = relay(spools[1].path(), 64 << 20, None).await;
    let local = tempfile::tempdir().unwrap();
    let content = pattern(16 * BLOCK as usize, SEED);
    let source = local.path().join("f.bin");
    fs::write(&source, &content).unwrap();
    let sender = receiver.client().await;
    let mut relays = vec![through(&gate, &a, "full").await];
    relays.extend(targets(&[&b]).await);
    let options = relayed_options(Strategy::Cyclic, false, true);
    let report = sender.upload_relayed(&source, "f.bin", &relays, &options).await.unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(receiver.root().join("f.bin")).unwrap(), content);
    let placed: Vec<u64> = report.placed.iter().map(|p| p.blocks).collect();
    assert_eq!(placed[0], 2, "the full relay took its first deposit only: {placed:?}");
    // The rest went to the other relay or (blocks given back go to whoever asks) directly,
    // and the full relay's two blocks, which the receiver could not collect, directly.
    assert_eq!(placed[1] + placed[2], 14 + 2, "{placed:?}");
    assert!(placed[2] >= 2, "the full relay's blocks came directly: {placed:?}");
    assert_eq!(block_files(spools[0].path()).len(), 2, "the spool stayed full");
    assert_eq!(common::listing(&receiver.root()), vec!["f.bin"]);
    drop(gate);
    for stop in [receiver, a, b] {
        stop.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_restarted_mid_way_keeps_its_spool_and_the_collection_completes() {
    println!("seed {SEED}");
    let receiver = TestServer::start().await;
    let spool = tempfile::tempdir().unwrap();
    let a = relay(spool.path(), 64 << 20, None).await;
    let gate = Gate::before(a.addr).await;
    let local = tempfile::tempdir().unwrap();
    let content = pattern(8 * BLOCK as usize + 5, SEED);
    let source = local.path().join("r.bin");
    fs::write(&source, &content).unwrap();
    let sender = receiver.client().await;
    let relays = vec![through(&gate, &a, "restarting").await];
    // Every block on the relay, and the sender gone, before the receiver could collect any.
    let options = relayed_options(Strategy::Fcfs, false, false);
    let report = sender.upload_relayed(&source, "r.bin", &relays, &options).await.unwrap();
    println!("{report:?}");
    assert_eq!(report.placed[0].blocks, 9, "{:?}", report.placed);
    sender.close().await;
    for relay in relays {
        relay.client.close().await;
    }
    gate.seal();
    assert_eq!(block_files(spool.path()).len(), 9);
    let saved = tempfile::tempdir().unwrap();
    let restarted = restart(a, spool.path(), 64 << 20, saved.path()).await;
    gate.open_to(restarted.addr);
    let dest = receiver.root().join("r.bin");
    assert!(appears(&dest).await, "the collection did not complete after the restart");
    assert_eq!(fs::read(&dest).unwrap(), content);
    assert!(block_files(spool.path()).is_empty(), "the restarted relay served its spool");
    drop(gate);
    receiver.stop().await;
    restarted.stop().await;
}

/// A copy through relays A and B (B behind a gate the receiver never passes), whose sender
/// leaves once every block is on a relay: the receiver's job stalls with B's blocks missing.
struct Stalled {
    receiver: TestServer,
    a: TestServer,
    _spools: [tempfile::TempDir; 2],
    _gate: Gate,
    b: TestServer,
    _local: tempfile::TempDir,
    source: std::path::PathBuf,
    content: Vec<u8>,
}

impl Stalled {
    /// One file, `name`.
    async fn new(name: &str) -> Stalled {
        Stalled::of(name, false, false).await
    }

    /// One file, `name`, 0640 and dated 2001, sent with `--preserve`.
    async fn preserved(name: &str) -> Stalled {
        Stalled::of(name, false, true).await
    }

    /// A tree, `name`: the same bytes as [`Stalled::new`]'s file, cut into three files (one in a
    /// directory), so that blocks span files.
    async fn tree(name: &str) -> Stalled {
        Stalled::of(name, true, false).await
    }

    async fn of(name: &str, tree: bool, preserve: bool) -> Stalled {
        println!("seed {SEED}");
        let (receiver, spools, a, b) = receiver_and_two_relays().await;
        let gate = Gate::before(b.addr).await;
        let local = tempfile::tempdir().unwrap();
        let content = pattern(16 * BLOCK as usize - 77, SEED);
        let source = local.path().join(name);
        if tree {
            fs::create_dir_all(source.join("sub")).unwrap();
            let (first, second) = (5 * BLOCK as usize + 11, 7 * BLOCK as usize);
            for (file, bytes) in [
                ("a.bin", &content[..first]),
                ("b.bin", &content[first..first + second]),
                ("sub/c.bin", &content[first + second..]),
            ] {
                fs::write(source.join(file), bytes).unwrap();
            }
        } else {
            fs::write(&source, &content).unwrap();
        }
        if preserve {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&source, fs::Permissions::from_mode(0o640)).unwrap();
            crate::session_relay::set_mtime(&source, 978_307_200);
        }
        let sender = receiver.client().await;
        let mut relays = targets(&[&a]).await;
        relays.push(through(&gate, &b, "unreachable").await);
        let options = sluice::session::RelayedOptions {
            preserve,
            ..relayed_options(Strategy::Partitioned, false, false)
        };
        let report = sender.upload_relayed(&source, "", &relays, &options).await.unwrap();
        println!("first run: {report:?}");
        assert_eq!(report.placed[1].blocks, 8, "{:?}", report.placed);
        sender.close().await;
        for relay in relays {
            relay.client.close().await;
        }
        gate.seal();
        Stalled { receiver, a, _spools: spools, _gate: gate, b, _local: local, source, content }
    }

    /// The same copy run again (without the unreachable relay, and with the receiver in the
    /// striping), once the receiver's job stalled: before, it is busy.
    async fn again(&self) -> Result<RelayedReport, SessionError> {
        let sender = self.receiver.client().await;
        let relays = targets(&[&self.a]).await;
        let options = relayed_options(Strategy::Fcfs, true, true);
        for _ in 0..120 {
            match sender.upload_relayed(&self.source, "", &relays, &options).await {
                Err(SessionError::Busy(m)) if m.contains("collected still") => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                other => return other,
            }
        }
        panic!("the first run's job never stalled");
    }

    async fn stop(self) {
        for stop in [self.receiver, self.a, self.b] {
            stop.stop().await;
        }
    }
}

/// The receiver's jobs of the test token (`sluice jobs`), once `ready` holds for them (within
/// a minute).
async fn jobs_once(server: &TestServer, ready: impl Fn(&[JobInfo]) -> bool) -> Vec<JobInfo> {
    let client = server.client().await;
    for _ in 0..300 {
        let jobs = client.jobs().await.unwrap();
        if ready(&jobs) {
            client.close().await;
            return jobs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the jobs never came to what the test waits for: {:?}", client.jobs().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_sender_left_a_re_run_moves_only_the_blocks_a_relay_lost() {
    let world = Stalled::new("s.bin").await;
    let dest = world.receiver.root().join("s.bin");
    assert!(!dest.exists());
    // `sluice jobs` at the receiver: the job stalled, lacking B's half (blocks 8..16).
    let size = world.content.len() as u64;
    let jobs = jobs_once(&world.receiver, |j| j.iter().any(|j| j.phase == JobPhase::Stalled)).await;
    println!("stalled: {jobs:?}");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = &jobs[0];
    assert_eq!((job.kind, job.dest.as_str(), job.files), (JobKind::Relayed, "", 1));
    assert_eq!((job.bytes, job.total), (8 * BLOCK, size));
    assert_eq!(job.missing, vec![[8 * BLOCK, size]]);
    assert_eq!(job.missing_bytes, size - 8 * BLOCK);
    assert!(job.error.as_deref().is_some_and(|e| e.contains("nowhere to collect")), "{job:?}");
    // The receiver restarts: the stalled job is kept (its record and part file) and listed
    // the same.
    let mut world = world;
    world.receiver = world.receiver.restart_in_place().await;
    let again = jobs_once(&world.receiver, |_| true).await;
    assert_eq!(again, jobs, "listed the same after the restart");
    let report = world.again().await.unwrap();
    println!("re-run: {report:?}");
    // The re-run's job took the stalled one over: one job, done, every byte written.
    let jobs = jobs_once(&world.receiver, |j| j.iter().all(|j| j.phase == JobPhase::Done)).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!((jobs[0].bytes, jobs[0].total, jobs[0].missing_bytes), (size, size, 0));
    assert_eq!(jobs[0].id, report.job, "{jobs:?}");
    assert_eq!(fs::read(&dest).unwrap(), world.content);
    assert_eq!(report.resumed_blocks, 8, "A's half was at the receiver");
    // Only B's half moved again: 8 sealed blocks (the last one 77 bytes short).
    assert_eq!(moved(&report), (8 * SEALED - 77, 8), "{:?}", report.placed);
    assert_eq!(common::listing(&world.receiver.root()), vec!["s.bin"], "no part file is left");
    // The receiver restarts: the ended job is still listed (its state directory keeps it).
    let Stalled { receiver, a, b, .. } = world;
    let (saved, spool) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let receiver = restart(receiver, spool.path(), 1 << 20, saved.path()).await;
    let after = jobs_once(&receiver, |_| true).await;
    assert_eq!(after, jobs, "listed the same after the restart");
    for server in [receiver, a, b] {
        server.stop().await;
    }
}

/// Records of collections the server in `dir` keeps in its state directory (a tree's job has
/// two: its record and its tree's).
fn kept_records(dir: &Path) -> usize {
    let at = dir.join("state").join("collections");
    let records = fs::read_dir(at).into_iter().flatten().flatten();
    records.filter(|e| e.path().extension().is_some_and(|x| x == "json" || x == "tree")).count()
}

/// `world`'s receiver restarted at once, while its job runs (its sender left half the blocks
/// on B, which it cannot reach yet: the job would stall only after three attempts at B, each
/// a 3 s handshake timeout), then B opened: the restarted server's job, without any sender,
/// collects B's half from its record and ends done under the same id. `records`: the files
/// the running job is kept in. Returns the receiver, the relays and the content.
async fn goes_on_after_a_restart(
    world: Stalled,
    records: usize,
) -> (TestServer, [TestServer; 2], Vec<u8>) {
    let Stalled { receiver, a, b, _gate: gate, _spools, _local, content, .. } = world;
    let running = receiver.client().await.jobs().await.unwrap();
    assert_eq!(running.iter().map(|j| j.phase).collect::<Vec<_>>(), [JobPhase::Running]);
    assert_eq!(kept_records(receiver.dir.path()), records, "the running job is kept");
    let receiver = receiver.restart_in_place().await;
    gate.open_to(b.addr);
    let jobs = jobs_once(&receiver, |j| j.iter().any(|j| j.phase != JobPhase::Running)).await;
    println!("after the restart: {jobs:?}");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!((jobs[0].phase, &jobs[0].id), (JobPhase::Done, &running[0].id), "{jobs:?}");
    (receiver, [a, b], content)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_goes_on_after_the_receiver_restarts() {
    let world = Stalled::new("g.bin").await;
    let (receiver, [a, b], content) = goes_on_after_a_restart(world, 1).await;
    assert_eq!(fs::read(receiver.root().join("g.bin")).unwrap(), content);
    assert_eq!(common::listing(&receiver.root()), vec!["g.bin"], "no part file is left");
    assert_eq!(kept_records(receiver.dir.path()), 0, "an ended job's record is removed");
    for server in [receiver, a, b] {
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preserved_collection_keeps_its_sources_bits_and_time_across_a_restart() {
    let world = Stalled::preserved("p.bin").await;
    let (receiver, [a, b], content) = goes_on_after_a_restart(world, 1).await;
    let landed = receiver.root().join("p.bin");
    assert_eq!(fs::read(&landed).unwrap(), content);
    assert_eq!(crate::session_relay::mode_and_mtime(&landed), (0o640, 978_307_200));
    for server in [receiver, a, b] {
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_collection_follows_its_token_to_another_line_of_the_token_file() {
    // The token file gains a line before the sender's token: its index changes, the token
    // does not. The restarted job is still that token's.
    let world = Stalled::new("h.bin").await;
    let Stalled { receiver, a, b, _gate: gate, _spools, _local, content, .. } = world;
    let tokens = common::tokens_file(receiver.dir.path());
    common::write_private(&tokens, &format!("another-token-not-the-senders-0001\n{TOKEN}\n"));
    let receiver = receiver.restart_in_place().await;
    gate.open_to(b.addr);
    let jobs = jobs_once(&receiver, |j| j.iter().any(|j| j.phase == JobPhase::Done)).await;
    assert_eq!(jobs.len(), 1, "listed for the sender's token: {jobs:?}");
    assert_eq!(fs::read(receiver.root().join("h.bin")).unwrap(), content);
    for server in [receiver, a, b] {
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_collection_whose_token_is_gone_is_dropped_with_its_part_file() {
    let world = Stalled::new("i.bin").await;
    let Stalled { receiver, a, b, _gate: gate, _spools, _local, .. } = world;
    assert_eq!(common::listing(&receiver.root()).len(), 1, "the part file");
    let tokens = common::tokens_file(receiver.dir.path());
    common::write_private(&tokens, "another-token-not-the-senders-0001\n");
    let receiver = receiver.restart_in_place().await;
    gate.open_to(b.addr);
    // The restarted server drops it as it starts to serve (within 10 s): nothing runs,
    // nothing is kept, nothing lands.
    records_go(&receiver).await;
    assert_eq!(common::listing(&receiver.root()), Vec::<String>::new(), "its part file too");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(common::listing(&receiver.root()), Vec::<String>::new(), "and nothing came");
    for server in [receiver, a, b] {
        server.stop().await;
    }
}

/// Waits (at most 10 s) for the restarted `receiver` to drop a kept collection as it starts
/// to serve, and checks its records are gone.
async fn records_go(receiver: &TestServer) {
    for _ in 0..100 {
        if kept_records(receiver.dir.path()) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(kept_records(receiver.dir.path()), 0, "its record is removed");
}

/// Files under `dir` (at any depth) whose names `counted` says to count.
fn files_named(dir: &Path, counted: &dyn Fn(&str) -> bool) -> usize {
    let mut count = 0;
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            count += files_named(&entry.path(), counted);
        } else if counted(&entry.file_name().to_string_lossy()) {
            count += 1;
        }
    }
    count
}

/// Temporary files of a tree's plan under `dir` (`.NAME.sluice-part-...`).
fn part_files(dir: &Path) -> usize {
    files_named(dir, &|name| name.contains(".sluice-part-"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_tree_waits_across_a_receiver_restart_and_its_re_run_moves_only_what_it_lacks() {
    let world = Stalled::tree("w").await;
    let top = world.receiver.root().join("w");
    let size = world.content.len() as u64;
    let jobs = jobs_once(&world.receiver, |j| j.iter().any(|j| j.phase == JobPhase::Stalled)).await;
    assert_eq!(part_files(&top), 3, "the stalled tree keeps its three files' parts");
    assert_eq!(kept_records(world.receiver.dir.path()), 2, "its record and its tree's");
    // The receiver restarts: the tree is planned again in the same temporary files, stalled
    // and listed as it was.
    let mut world = world;
    world.receiver = world.receiver.restart_in_place().await;
    let again = jobs_once(&world.receiver, |_| true).await;
    assert_eq!(again, jobs, "listed the same after the restart");
    assert_eq!((again[0].files, again[0].missing_bytes), (3, size - 8 * BLOCK), "{again:?}");
    assert_eq!(part_files(&top), 3, "its temporary files are kept");
    let report = world.again().await.unwrap();
    println!("re-run: {report:?}");
    assert_eq!(report.resumed_blocks, 8, "A's half was at the receiver");
    assert_eq!(moved(&report), (8 * SEALED - 77, 8), "only B's half moved: {:?}", report.placed);
    let jobs = jobs_once(&world.receiver, |j| j.iter().all(|j| j.phase == JobPhase::Done)).await;
    assert_eq!((jobs.len(), jobs[0].missing_bytes), (1, 0), "{jobs:?}");
    assert_eq!(tree_bytes(&top).as_deref(), Some(&world.content[..]), "every byte in place");
    assert_eq!((part_files(&top), kept_records(world.receiver.dir.path())), (0, 0));
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_s_collection_goes_on_after_the_receiver_restarts() {
    // As for a file: B's half lands in the tree's kept temporary files (its record and its
    // tree's are kept), and every file goes in place.
    let world = Stalled::tree("g").await;
    let (receiver, [a, b], content) = goes_on_after_a_restart(world, 2).await;
    let top = receiver.root().join("g");
    assert_eq!(tree_bytes(&top).as_deref(), Some(&content[..]), "every byte in place");
    assert_eq!((part_files(&top), shown_files(&top)), (0, 3));
    assert_eq!(kept_records(receiver.dir.path()), 0, "an ended job's records are removed");
    for server in [receiver, a, b] {
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_tree_whose_temporary_file_is_gone_is_dropped_with_the_others() {
    // One of the stalled tree's temporary files is removed while the receiver is down: the
    // tree cannot go on where it was, so the restart drops it and removes the other two (a
    // re-run moves everything).
    let world = Stalled::tree("x").await;
    let top = world.receiver.root().join("x");
    jobs_once(&world.receiver, |j| j.iter().any(|j| j.phase == JobPhase::Stalled)).await;
    let Stalled { receiver, a, b, _gate, _spools, _local, .. } = world;
    let one = fs::read_dir(&top)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().contains(".sluice-part-"))
        .unwrap();
    fs::remove_file(one.path()).unwrap();
    let receiver = receiver.restart_in_place().await;
    records_go(&receiver).await;
    assert_eq!(part_files(&top), 0, "and its other temporary files");
    let jobs = receiver.client().await.jobs().await.unwrap();
    assert!(jobs.iter().all(|j| j.phase != JobPhase::Stalled && j.phase != JobPhase::Running));
    for server in [receiver, a, b] {
        server.stop().await;
    }
}

/// The tree [`Stalled::tree`] wrote under `root`, as its files' bytes end to end in the
/// order it cut them; `None` while any of them is not in place.
fn tree_bytes(root: &Path) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for file in ["a.bin", "b.bin", "sub/c.bin"] {
        out.extend(fs::read(root.join(file)).ok()?);
    }
    Some(out)
}

/// Regular files under `dir` whose names do not start with a dot (those in place).
fn shown_files(dir: &Path) -> usize {
    files_named(dir, &|name| !name.starts_with('.'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_sender_of_a_tree_left_a_re_run_moves_only_the_blocks_a_relay_lost() {
    let world = Stalled::tree("t").await;
    let top = world.receiver.root().join("t");
    let size = world.content.len() as u64;
    let jobs = jobs_once(&world.receiver, |j| j.iter().any(|j| j.phase == JobPhase::Stalled)).await;
    println!("stalled: {jobs:?}");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        (jobs[0].files, jobs[0].bytes, jobs[0].missing_bytes),
        (3, 8 * BLOCK, size - 8 * BLOCK)
    );
    // Stalled, nothing is in place: the tree's files are still its temporary ones.
    assert_eq!(shown_files(&top), 0, "a stalled tree shows no file");
    assert!(
        fs::read_dir(&top)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with('.')),
        "its temporary files are kept"
    );
    let report = world.again().await.unwrap();
    println!("re-run: {report:?}");
    assert_eq!(report.resumed_blocks, 8, "A's half was at the receiver");
    assert_eq!(moved(&report), (8 * SEALED - 77, 8), "only B's half moved: {:?}", report.placed);
    let jobs = jobs_once(&world.receiver, |j| j.iter().all(|j| j.phase == JobPhase::Done)).await;
    assert_eq!(jobs.len(), 1, "the re-run took the stalled job over: {jobs:?}");
    assert_eq!((jobs[0].bytes, jobs[0].missing_bytes, &jobs[0].id), (size, 0, &report.job));
    assert_eq!(tree_bytes(&top).as_deref(), Some(&world.content[..]), "every byte in place");
    assert_eq!(shown_files(&top), 3);
    assert_eq!(common::listing(&world.receiver.root()), vec!["t"]);
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_run_with_another_tree_drops_the_stalled_files_and_moves_everything() {
    let world = Stalled::tree("u").await;
    let top = world.receiver.root().join("u");
    jobs_once(&world.receiver, |j| j.iter().any(|j| j.phase == JobPhase::Stalled)).await;
    // A file is renamed at the sender (the same bytes and size): its manifest is another, and
    // the first run's files must not be laid out as the second's.
    fs::rename(world.source.join("b.bin"), world.source.join("b2.bin")).unwrap();
    let report = world.again().await.unwrap();
    assert_eq!(report.resumed_blocks, 0, "{report:?}");
    assert_eq!(moved(&report).1, 16, "every block moved: {:?}", report.placed);
    assert!(!top.join("b.bin").exists());
    let mut got = fs::read(top.join("a.bin")).unwrap();
    got.extend(fs::read(top.join("b2.bin")).unwrap());
    got.extend(fs::read(top.join("sub/c.bin")).unwrap());
    assert_eq!(got, world.content);
    let hidden = |dir: &Path| {
        fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .count()
    };
    assert_eq!(
        (hidden(&top), hidden(&top.join("sub"))),
        (0, 0),
        "no temporary file of either run is left"
    );
    world.stop().await;
}

/// Cancels the receiver's one job (`sluice jobs --cancel`) and checks what is left: the job
/// listed as cancelled, no part file, nothing in place; then the same copy again moves every
/// block.
async fn cancel_the_one_job(world: &Stalled, phase: JobPhase) {
    let client = world.receiver.client().await;
    let jobs = client.jobs().await.unwrap();
    println!("before the cancel: {jobs:?}");
    assert_eq!(jobs.iter().map(|j| j.phase).collect::<Vec<_>>(), [phase], "{jobs:?}");
    let ended = client.cancel_job(&jobs[0].id).await.unwrap();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!((ended[0].phase, &ended[0].id), (JobPhase::Cancelled, &jobs[0].id));
    assert_eq!(client.jobs().await.unwrap(), ended, "listed once, as cancelled");
    assert_eq!(common::listing(&world.receiver.root()), Vec::<String>::new(), "no part file");
    // Cancelled, it is no longer there to cancel.
    let err = client.cancel_job(&jobs[0].id).await.unwrap_err();
    assert!(matches!(err, SessionError::NotFound(_)), "{err}");
    client.close().await;
    let report = world.again().await.unwrap();
    assert_eq!(report.resumed_blocks, 0, "{report:?}");
    let name = world.source.file_name().unwrap();
    assert_eq!(fs::read(world.receiver.root().join(name)).unwrap(), world.content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_cancelled_while_it_runs_deletes_its_part() {
    // The sender left; the job goes on trying the relay it cannot reach.
    let world = Stalled::new("r.bin").await;
    cancel_the_one_job(&world, JobPhase::Running).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_collection_cancelled_deletes_its_part() {
    let world = Stalled::new("t.bin").await;
    jobs_once(&world.receiver, |j| j.iter().any(|j| j.phase == JobPhase::Stalled)).await;
    cancel_the_one_job(&world, JobPhase::Stalled).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_run_with_another_file_drops_the_stalled_part_and_renames_nothing() {
    let world = Stalled::new("c.bin").await;
    // The file changed at the sender (the same size): its blocks must not join the first's.
    let mut changed = world.content.clone();
    changed[3 * BLOCK as usize] ^= 1;
    fs::write(&world.source, &changed).unwrap();
    let err = world.again().await.unwrap_err();
    assert!(matches!(err, SessionError::Integrity(ref m) if m.contains("not the one")), "{err}");
    assert_eq!(common::listing(&world.receiver.root()), Vec::<String>::new(), "nothing in place");
    // Run once more: the whole file moves, and arrives.
    let report = world.again().await.unwrap();
    assert_eq!(report.resumed_blocks, 0);
    assert_eq!(fs::read(world.receiver.root().join("c.bin")).unwrap(), changed);
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_copies_a_relay_lost_after_the_retreat_loses_nothing() {
    println!("seed {SEED}");
    // The receiver never reaches A (it stands behind a gate, and dies after the retreat):
    // every block comes from B, those placed on A first included.
    let (receiver, spools, a, b) = receiver_and_two_relays().await;
    let gate = Gate::before(a.addr).await;
    let local = tempfile::tempdir().unwrap();
    let content = pattern(12 * BLOCK as usize + 3, SEED);
    let source = local.path().join("two.bin");
    fs::write(&source, &content).unwrap();
    let sender = receiver.client().await;
    let mut relays = vec![through(&gate, &a, "lost").await];
    relays.extend(targets(&[&b]).await);
    let mut options = relayed_options(Strategy::Partitioned, false, false);
    options.copies = 2;
    let report = sender.upload_relayed(&source, "two.bin", &relays, &options).await.unwrap();
    println!("{report:?}");
    let placed: Vec<u64> = report.placed.iter().map(|p| p.blocks).collect();
    assert_eq!(placed, vec![13, 13, 0], "every block on both relays before the retreat");
    sender.close().await;
    for relay in relays {
        relay.client.close().await;
    }
    gate.seal();
    a.stop().await;
    let dest = receiver.root().join("two.bin");
    assert!(appears(&dest).await, "the file never arrived");
    assert_eq!(fs::read(&dest).unwrap(), content);
    assert!(block_files(spools[1].path()).is_empty(), "B's copies were all collected");
    assert_eq!(block_files(spools[0].path()).len(), 13, "A's were never touched");
    drop(gate);
    // One copy is not enough for two: refused before anything moves.
    let sender = receiver.client().await;
    let one = targets(&[&b]).await;
    let err = sender.upload_relayed(&source, "again.bin", &one, &options).await.unwrap_err();
    assert!(matches!(err, SessionError::Config(ref m) if m.contains("two relays")), "{err}");
    receiver.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_copies_the_copies_not_collected_are_deleted_at_their_relays() {
    println!("seed {SEED}");
    // Both relays stay reachable: each block is collected from one and its other copy is
    // deleted at the other (before, it stayed there until the relay's expiry).
    let (receiver, spools, a, b) = receiver_and_two_relays().await;
    let local = tempfile::tempdir().unwrap();
    let content = pattern(12 * BLOCK as usize + 3, SEED + 1);
    let source = local.path().join("both.bin");
    fs::write(&source, &content).unwrap();
    let sender = receiver.client().await;
    let relays = targets(&[&a, &b]).await;
    let mut options = relayed_options(Strategy::Cyclic, false, false);
    options.copies = 2;
    let report = sender.upload_relayed(&source, "both.bin", &relays, &options).await.unwrap();
    println!("{report:?}");
    // Second copies may come after the receiver has every block: the relay refuses them then.
    let (first, second) = (report.placed[0].blocks, report.placed[1].blocks);
    assert!(first + second >= 13 && report.placed[2].blocks == 0, "{:?}", report.placed);
    sender.close().await;
    for relay in relays {
        relay.client.close().await;
    }
    let dest = receiver.root().join("both.bin");
    assert!(appears(&dest).await, "the file never arrived");
    assert_eq!(fs::read(&dest).unwrap(), content);
    let left = || (block_files(spools[0].path()).len(), block_files(spools[1].path()).len());
    for _ in 0..100 {
        if left() == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left(), (0, 0), "blocks left in the spools of A and B");
    receiver.stop().await;
    a.stop().await;
    b.stop().await;
}
