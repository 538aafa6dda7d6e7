//! Relays on loopback (issue 28, `docs/relay.md`): a relay's spool (deposits under a token with
//! the relay right, durable before the answer, bounded in all and per token, kept across a
//! restart, handed only to the collector with the transfer's capability, deleted once
//! released), end-to-end sealing (no plaintext in a spool, a changed byte caught), and relayed
//! uploads striped over relays and the direct path, collected by the receiver's job.

#![allow(clippy::print_stdout)] // tests print their seeds

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{TOKEN, TestServer, pattern, write_private};
use sluice::datapath::Fault;
use sluice::session::keys::DirectionSecret;
use sluice::session::relay::seal::BlockKey;
use sluice::session::relay::{capability_claim, collector_hash};
use sluice::session::{
    Client, Identity, Overwrite, RelayTarget, RelayedOptions, SessionError, SpoolConfig,
    TrustPolicy, rank_relays,
};
use sluice_session::relay::{Collect, Strategy, to_hex};

/// The seed of these tests' content.
pub(crate) const SEED: u8 = 28;
/// A marker that must never show in a spool.
const MARKER: &[u8] = b"SLUICE-RELAY-PLAINTEXT-MARKER-";
/// A token without the relay right.
const NO_RELAY_TOKEN: &str = "no-relay-token-0123456789";
/// A token with a spool quota of 300 KB.
const SMALL_QUOTA_TOKEN: &str = "small-quota-token-0123456789";

pub(crate) fn marked(len: usize) -> Vec<u8> {
    MARKER.iter().copied().cycle().take(len).collect()
}

/// A relay: a server with a spool in its own directory of `dir` (kept across restarts).
pub(crate) async fn relay(spool: &Path, max_bytes: u64, fault: Option<Fault>) -> TestServer {
    let spool = spool.to_owned();
    TestServer::start_with(move |config| {
        let tokens = format!(
            "{TOKEN}\n{NO_RELAY_TOKEN} rights=read,write,list\n{SMALL_QUOTA_TOKEN} spool=300KB\n"
        );
        write_private(&config.root.with_file_name("tokens"), &tokens);
        config.spool =
            Some(SpoolConfig { dir: spool, max_bytes, expiry: Duration::from_secs(3600) });
        config.fault = fault;
    })
    .await
}

/// Block files anywhere under `dir`.
pub(crate) fn block_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(block_files(&path));
        } else if path.extension().is_some_and(|e| e == "blk") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// A collection of `blocks` of `transfer`, started the relay's own way.
fn collect(transfer: &[u8; 16], blocks: &[u64]) -> Collect {
    Collect { transfer: to_hex(transfer), blocks: blocks.to_vec() }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A client of `server` with `token`.
async fn client_with(server: &TestServer, token: &str) -> Result<Client, SessionError> {
    let mut config = server.client_config();
    config.token = token.into();
    Client::connect(config).await
}

/// A collector's session with `relay` for `transfer`, presenting `capability` and proving
/// `identity` (none: no certificate).
async fn collector(
    relay: &TestServer,
    transfer: &[u8; 16],
    capability: &[u8; 32],
    identity: Option<&Arc<Identity>>,
) -> Result<Client, SessionError> {
    let mut config = sluice::session::ClientConfig::new(
        relay.addr,
        "127.0.0.1",
        "",
        "/dev/null",
        TrustPolicy::Pinned(relay.fingerprint.clone()),
    );
    config.grant = Some(capability_claim(transfer, capability));
    config.identity = identity.cloned();
    Client::connect(config).await
}

fn test_key(transfer: [u8; 16]) -> BlockKey {
    BlockKey::new(&DirectionSecret { key: [SEED; 32], iv: [SEED; 12] }, transfer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_keeps_sealed_blocks_across_a_restart_for_their_collector_only() {
    println!("seed {SEED}");
    let spool = tempfile::tempdir().unwrap();
    let server = relay(spool.path(), 8 << 20, None).await;
    let transfer = [1u8; 16];
    let capability = [2u8; 32];
    // The receiver's certificate, which the capability is bound to.
    let receiver = Arc::new(Identity::ephemeral().unwrap());
    let cap_hash = collector_hash(&capability, receiver.fingerprint());
    let key = test_key(transfer);
    let plain: Vec<Vec<u8>> = (0..3).map(|i| marked(100_000 + i * 7)).collect();
    let sealed: Vec<(u64, Vec<u8>)> =
        plain.iter().enumerate().map(|(i, p)| (i as u64, key.seal(i as u64, p, None))).collect();

    let sender = server.client().await;
    let stored =
        sender.deposit_blocks(&to_hex(&transfer), &cap_hash, sealed.clone()).await.unwrap();
    assert_eq!(stored, vec![0, 1, 2]);
    let files = block_files(spool.path());
    assert_eq!(files.len(), 3, "{files:?}");
    for file in &files {
        let bytes = fs::read(file).unwrap();
        assert!(!contains(&bytes, MARKER), "plaintext in {}", file.display());
    }
    let spooled = fs::read_to_string(files[0].parent().unwrap().join("meta.json")).unwrap();
    assert!(spooled.contains(&cap_hash) && !spooled.contains(&to_hex(&capability)));

    // Only the transfer's capability collects, and only that transfer.
    let wrong = collector(&server, &transfer, &[3u8; 32], Some(&receiver)).await.unwrap_err();
    assert!(matches!(wrong, SessionError::Auth(ref m) if m.contains("capability")), "{wrong}");
    let other = collector(&server, &[9u8; 16], &capability, Some(&receiver)).await.unwrap_err();
    assert!(matches!(other, SessionError::Auth(_)), "{other}");
    // The right capability presented by another peer (its own certificate, or none).
    let thief = Arc::new(Identity::ephemeral().unwrap());
    let stolen = collector(&server, &transfer, &capability, Some(&thief)).await.unwrap_err();
    assert!(matches!(stolen, SessionError::Auth(ref m) if m.contains("peer")), "{stolen}");
    let bare = collector(&server, &transfer, &capability, None).await.unwrap_err();
    assert!(matches!(bare, SessionError::Auth(ref m) if m.contains("certificate")), "{bare}");
    // A deposit naming another collector for the same transfer is refused.
    let other_hash = "ab".repeat(32);
    let hijack = sender.deposit_blocks(&to_hex(&transfer), &other_hash, sealed[..1].to_vec()).await;
    assert!(matches!(hijack, Err(SessionError::Refused(_))), "{hijack:?}");

    // A restart keeps the spool and serves it (the same identity, from a copy of the state; a
    // port of its own, as the old one may be taken meanwhile).
    sender.close().await;
    let saved = tempfile::tempdir().unwrap();
    let fingerprint = server.fingerprint.clone();
    let restarted = restart(server, spool.path(), 8 << 20, saved.path()).await;
    assert_eq!(restarted.fingerprint, fingerprint);
    let collecting = collector(&restarted, &transfer, &capability, Some(&receiver)).await.unwrap();
    let hop = collecting.collect_blocks(collect(&transfer, &[2, 0, 7])).await.unwrap();
    let ids: Vec<u64> = hop.blocks.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![2, 0], "block 7 was never deposited");
    for (id, bytes) in &hop.blocks {
        let opened = key.open(*id, plain[*id as usize].len() as u64, bytes).unwrap();
        assert_eq!(opened, plain[*id as usize]);
    }
    hop.release(&[2, 0]).await.unwrap();
    assert_eq!(block_files(spool.path()).len(), 1, "released blocks are deleted");
    // A discard (blocks had elsewhere) is the collector's too: of its own transfer only.
    let err = collecting.discard_blocks(collect(&[9u8; 16], &[1])).await.unwrap_err();
    assert!(matches!(err, SessionError::Refused(ref m) if m.contains("capability")), "{err}");
    assert_eq!(block_files(spool.path()).len(), 1, "another transfer's discard deletes nothing");
    let hop = collecting.collect_blocks(collect(&transfer, &[1])).await.unwrap();
    hop.release(&[1]).await.unwrap();
    assert!(block_files(spool.path()).is_empty());
    let left: Vec<_> =
        fs::read_dir(spool.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("tmp")], "the transfer's directory goes too");
    // The collector has every block: the transfer is closed, and a later deposit refused.
    collecting.discard_blocks(collect(&transfer, &[])).await.unwrap();
    let late = restarted.client().await;
    let err = late.deposit_blocks(&to_hex(&transfer), &cap_hash, sealed[..1].to_vec()).await;
    assert!(
        matches!(err, Err(SessionError::Refused(ref m)) if m.contains("every block")),
        "{err:?}"
    );
    assert!(block_files(spool.path()).is_empty(), "nothing of a closed transfer is kept");
    restarted.stop().await;
}

/// `server`, a relay with its spool at `spool`, stopped and started again with the same
/// identity, tokens (copied to `saved`, which must outlive it) and spool, on a port of its own
/// (the old one may be taken meanwhile).
pub(crate) async fn restart(
    server: TestServer,
    spool: &Path,
    max_bytes: u64,
    saved: &Path,
) -> TestServer {
    let state = saved.join("state");
    fs::create_dir(&state).unwrap();
    fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    for entry in fs::read_dir(server.dir.path().join("state")).unwrap().flatten() {
        if entry.path().is_file() {
            fs::copy(entry.path(), state.join(entry.file_name())).unwrap();
        }
    }
    let tokens = saved.join("tokens");
    write_private(&tokens, &fs::read_to_string(server.dir.path().join("tokens")).unwrap());
    server.stop().await;
    TestServer::start_with(|config| {
        config.credentials =
            sluice::session::Credentials::Stored { state_dir: state.clone(), tokens_file: tokens };
        config.spool = Some(SpoolConfig {
            dir: spool.to_owned(),
            max_bytes,
            expiry: Duration::from_secs(3600),
        });
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_is_bounded_in_all_and_per_token_and_needs_the_relay_right() {
    println!("seed {SEED}");
    let spool = tempfile::tempdir().unwrap();
    let server = relay(spool.path(), 1 << 20, None).await;
    let key = test_key([4; 16]);
    let cap = to_hex(blake3::hash(&[5u8; 32]).as_bytes());
    let block = |id: u64, len: usize| (id, key.seal(id, &pattern(len, SEED), None));

    let no_relay = client_with(&server, NO_RELAY_TOKEN).await.unwrap();
    let err = no_relay.deposit_blocks(&to_hex(&[4; 16]), &cap, vec![block(0, 1000)]).await;
    assert!(matches!(err, Err(SessionError::Refused(ref m)) if m.contains("relay")), "{err:?}");

    let small = client_with(&server, SMALL_QUOTA_TOKEN).await.unwrap();
    let transfer = to_hex(&[6; 16]);
    small.deposit_blocks(&transfer, &cap, vec![block(0, 200_000)]).await.unwrap();
    let err = small.deposit_blocks(&transfer, &cap, vec![block(1, 200_000)]).await;
    assert!(matches!(err, Err(SessionError::Refused(ref m)) if m.contains("quota")), "{err:?}");

    let full = server.client().await;
    let transfer = to_hex(&[7; 16]);
    full.deposit_blocks(&transfer, &cap, vec![block(0, 600_000)]).await.unwrap();
    let err = full.deposit_blocks(&transfer, &cap, vec![block(1, 400_000)]).await;
    assert!(matches!(err, Err(SessionError::Busy(ref m)) if m.contains("full")), "{err:?}");
    let held: u64 = block_files(spool.path()).iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(held <= 1 << 20, "the spool holds {held} bytes");
    assert_eq!(block_files(spool.path()).len(), 2);
    let tmp: Vec<_> = fs::read_dir(spool.path().join("tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "a refused deposit leaves nothing behind");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_byte_in_a_spooled_block_is_caught() {
    println!("seed {SEED}");
    let spool = tempfile::tempdir().unwrap();
    let server = relay(spool.path(), 8 << 20, None).await;
    let (transfer, capability) = ([8u8; 16], [9u8; 32]);
    let key = test_key(transfer);
    let plain = pattern(50_000, SEED);
    let sender = server.client().await;
    let receiver = Arc::new(Identity::ephemeral().unwrap());
    let cap_hash = collector_hash(&capability, receiver.fingerprint());
    let sealed = vec![(0, key.seal(0, &plain, Some(3))), (1, key.seal(1, &plain, None))];
    sender.deposit_blocks(&to_hex(&transfer), &cap_hash, sealed).await.unwrap();
    let files = block_files(spool.path());
    let mut bytes = fs::read(&files[0]).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    fs::write(&files[0], &bytes).unwrap();
    let collecting = collector(&server, &transfer, &capability, Some(&receiver)).await.unwrap();
    let hop = collecting.collect_blocks(collect(&transfer, &[0, 1])).await.unwrap();
    assert!(key.open(0, plain.len() as u64, &hop.blocks[0].1).is_err(), "the change got through");
    // A block passed off as another does not open either.
    assert!(key.open(0, plain.len() as u64, &hop.blocks[1].1).is_err());
    assert_eq!(key.open(1, plain.len() as u64, &hop.blocks[1].1).unwrap(), plain);
    server.stop().await;
}

/// A receiver and relays A and B with spools of 64 MiB (which must outlive them).
pub(crate) async fn receiver_and_two_relays()
-> (TestServer, [tempfile::TempDir; 2], TestServer, TestServer) {
    let receiver = TestServer::start().await;
    let spools = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let a = relay(spools[0].path(), 64 << 20, None).await;
    let b = relay(spools[1].path(), 64 << 20, None).await;
    (receiver, spools, a, b)
}

/// Sessions with `relays` for a sender.
pub(crate) async fn targets(relays: &[&TestServer]) -> Vec<RelayTarget> {
    let mut out = Vec::new();
    for (i, relay) in relays.iter().enumerate() {
        out.push(RelayTarget { name: format!("relay{i}"), client: relay.client().await });
    }
    out
}

pub(crate) fn relayed_options(strategy: Strategy, direct: bool, wait: bool) -> RelayedOptions {
    RelayedOptions {
        strategy,
        block_bytes: 256 << 10,
        batch_blocks: 2,
        direct,
        wait,
        ..RelayedOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_upload_arrives_intact_by_every_strategy() {
    println!("seed {SEED}");
    let (receiver, spools, a, b) = receiver_and_two_relays().await;
    let local = tempfile::tempdir().unwrap();
    let mut content = marked(3 << 20);
    content.extend(pattern((1 << 20) + 12_345, SEED));
    let source = local.path().join("big.bin");
    fs::write(&source, &content).unwrap();
    let sender = receiver.client().await;
    let relays = targets(&[&a, &b]).await;
    for (i, strategy) in
        [Strategy::Fcfs, Strategy::Cyclic, Strategy::Partitioned].into_iter().enumerate()
    {
        let dest = format!("out{i}.bin");
        let options = relayed_options(strategy, true, true);
        let report = sender.upload_relayed(&source, &dest, &relays, &options).await.unwrap();
        println!("{strategy:?}: {report:?}");
        assert_eq!(fs::read(receiver.root().join(&dest)).unwrap(), content, "{strategy:?}");
        assert_eq!(report.blocks, 17);
        assert_eq!(report.placed.iter().map(|p| p.blocks).sum::<u64>(), 17);
        if strategy != Strategy::Fcfs {
            assert!(
                report.placed.iter().all(|p| p.blocks >= 5),
                "{strategy:?}: {:?}",
                report.placed
            );
        }
        assert!(report.total_seconds.unwrap() >= report.send_seconds);
        for spool in [spools[0].path(), spools[1].path()] {
            assert!(block_files(spool).is_empty(), "collected blocks are deleted");
        }
    }
    let parts: Vec<_> = common::listing(&receiver.root());
    assert_eq!(parts, vec!["out0.bin", "out1.bin", "out2.bin"], "no part file is left");
    for stop in [receiver, a, b] {
        stop.stop().await;
    }
}

/// A receiver, one relay (with `fault`) and a file of `len` bytes at the sender, named `name`.
struct OneRelay {
    receiver: TestServer,
    spool: tempfile::TempDir,
    relay: TestServer,
    _local: tempfile::TempDir,
    source: PathBuf,
    content: Vec<u8>,
    sender: Client,
    relays: Vec<RelayTarget>,
}

impl OneRelay {
    async fn new(fault: Option<Fault>, len: usize, name: &str) -> OneRelay {
        println!("seed {SEED}");
        let receiver = TestServer::start().await;
        let spool = tempfile::tempdir().unwrap();
        let relay = relay(spool.path(), 64 << 20, fault).await;
        let local = tempfile::tempdir().unwrap();
        let content = pattern(len, SEED);
        let source = local.path().join(name);
        fs::write(&source, &content).unwrap();
        let sender = receiver.client().await;
        let relays = targets(&[&relay]).await;
        OneRelay { receiver, spool, relay, _local: local, source, content, sender, relays }
    }

    async fn stop(self) {
        self.receiver.stop().await;
        self.relay.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_retreats_and_the_receiver_collects_alone() {
    let OneRelay { receiver, spool, relay: a, _local, source, content, sender, relays } =
        OneRelay::new(None, 2 << 20, "run.h5").await;
    let options = relayed_options(Strategy::Fcfs, false, false);
    let report = sender.upload_relayed(&source, "", &relays, &options).await.unwrap();
    assert_eq!(report.total_seconds, None);
    assert_eq!(report.placed[0].blocks, 8, "everything went to the one relay");
    sender.close().await;
    for relay in relays {
        relay.client.close().await;
    }
    let dest = receiver.root().join("run.h5");
    for _ in 0..300 {
        if dest.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(fs::read(&dest).unwrap(), content);
    assert!(block_files(spool.path()).is_empty());
    receiver.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_returns_a_wrong_byte_is_caught_and_the_block_comes_directly() {
    // The relay's reads for each collection flip the batch's byte 1000 (in its first block).
    let world = OneRelay::new(Some(Fault { offset: 1000, times: 1 }), 1 << 20, "f.bin").await;
    let (sender, source, relays) = (&world.sender, &world.source, &world.relays);
    let options = relayed_options(Strategy::Cyclic, false, true);
    let report = sender.upload_relayed(source, "f.bin", relays, &options).await.unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(world.receiver.root().join("f.bin")).unwrap(), world.content);
    // Every block went to the relay once; each one whose copy came back wrong went directly.
    assert_eq!(report.placed[0].blocks, 4, "{:?}", report.placed);
    assert!(report.placed[1].blocks >= 1, "{:?}", report.placed);
    assert!(block_files(world.spool.path()).is_empty(), "wrong copies are released too");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_upload_of_a_file_that_exists_follows_the_overwrite_policy() {
    let receiver = TestServer::start().await;
    fs::write(receiver.root().join("x.bin"), b"old").unwrap();
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("x.bin");
    fs::write(&source, pattern(300_000, SEED)).unwrap();
    let sender = receiver.client().await;
    let mut options = relayed_options(Strategy::Fcfs, true, true);
    let err = sender.upload_relayed(&source, "x.bin", &[], &options).await.unwrap_err();
    assert!(matches!(err, SessionError::Refused(ref m) if m.contains("exists")), "{err}");
    // `never`, and `if-newer` with the server's copy the newer: kept as it is, nothing moves.
    let existing = receiver.root().join("x.bin");
    let soon = std::time::SystemTime::now() + Duration::from_secs(60);
    fs::File::options().write(true).open(&existing).unwrap().set_modified(soon).unwrap();
    for overwrite in [Overwrite::Never, Overwrite::IfNewer] {
        options.overwrite = overwrite;
        let report = sender.upload_relayed(&source, "x.bin", &[], &options).await.unwrap();
        assert_eq!((report.files, report.blocks, report.kept_files), (0, 0, 1), "{overwrite:?}");
        assert_eq!(fs::read(&existing).unwrap(), b"old", "{overwrite:?}");
    }
    assert_eq!(common::listing(&receiver.root()), vec!["x.bin"], "no part file, no job");
    // `if-newer` with the sender's file the newer, and `always`: replaced.
    let later = std::time::SystemTime::now() + Duration::from_secs(120);
    fs::File::options().write(true).open(&source).unwrap().set_modified(later).unwrap();
    options.overwrite = Overwrite::IfNewer;
    let report = sender.upload_relayed(&source, "x.bin", &[], &options).await.unwrap();
    assert_eq!((report.files, report.kept_files), (1, 0));
    assert_eq!(fs::read(&existing).unwrap(), pattern(300_000, SEED));
    fs::write(&existing, b"old").unwrap();
    options.overwrite = Overwrite::Always;
    sender.upload_relayed(&source, "x.bin", &[], &options).await.unwrap();
    assert_eq!(fs::read(&existing).unwrap(), pattern(300_000, SEED));
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_dies_after_it_was_chosen_leaves_its_blocks_to_the_others() {
    println!("seed {SEED}");
    let world = OneRelay::new(None, 3 << 20, "g.bin").await;
    let spool_b = tempfile::tempdir().unwrap();
    let b = relay(spool_b.path(), 64 << 20, None).await;
    let mut relays = world.relays.clone();
    relays.extend(targets(&[&b]).await);
    relays[1].name = "dead".into();
    // The relay goes away with the sender's session open: every deposit with it fails.
    b.stop().await;
    let options = relayed_options(Strategy::Partitioned, false, true);
    let report = world.sender.upload_relayed(&world.source, "g.bin", &relays, &options).await;
    let report = report.unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(world.receiver.root().join("g.bin")).unwrap(), world.content);
    assert_eq!(report.placed[1].blocks, 0, "{:?}", report.placed);
    // Its share went to the live relay or the direct path, whoever asked first.
    assert_eq!(report.placed[0].blocks + report.placed[2].blocks, 12, "{:?}", report.placed);
    assert!(report.placed[0].blocks >= 6, "{:?}", report.placed);
    world.stop().await;
}

/// A UDP forwarder before `target` that holds every datagram, both ways, for `delay`: a relay
/// that far from whoever dials the forwarder.
pub(crate) async fn delayed(target: std::net::SocketAddr, delay: Duration) -> std::net::SocketAddr {
    use tokio::net::UdpSocket;
    let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = front.local_addr().unwrap();
    let up = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    up.connect(target).await.unwrap();
    let peer = Arc::new(std::sync::Mutex::new(None));
    let (f, u, p) = (front.clone(), up.clone(), peer.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = f.recv_from(&mut buf).await {
            *p.lock().unwrap() = Some(from);
            let (u, datagram) = (u.clone(), buf[..n].to_vec());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = u.send(&datagram).await;
            });
        }
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = up.recv(&mut buf).await {
            let (front, datagram, to) = (front.clone(), buf[..n].to_vec(), *peer.lock().unwrap());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Some(to) = to {
                    let _ = front.send_to(&datagram, to).await;
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_receiver_measures_its_round_trip_to_each_relay() {
    let (receiver, _spools, a, b) = receiver_and_two_relays().await;
    // B 40 ms away (20 ms each way); a third relay nowhere; A's address with B's fingerprint.
    let far = delayed(b.addr, Duration::from_millis(20)).await;
    let nowhere = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let asked = [
        (a.addr, a.fingerprint.clone()),
        (far, b.fingerprint.clone()),
        (nowhere, a.fingerprint.clone()),
        (a.addr, b.fingerprint.clone()),
    ];
    let client = receiver.client().await;
    let rtts = client.relay_rtts(&asked).await.unwrap();
    println!("round trips: {rtts:?}");
    assert_eq!(rtts.len(), 4);
    assert!(rtts[0].is_some(), "A is reached");
    // The forwarder holds each datagram 20 ms each way: a floor the measure must include,
    // however fast or slow the machine (no upper bound is asserted).
    let far_rtt = rtts[1].expect("B is reached through the delay");
    assert!(far_rtt >= Duration::from_millis(40), "B: {far_rtt:?}");
    assert_eq!(rtts[2], None, "nothing answers there");
    assert_eq!(rtts[3], None, "A does not prove B's fingerprint");
    // A token that may not upload may not have the server dial relays either.
    let read_only = TestServer::start_with(|c| {
        let dir = c.root.parent().unwrap().to_owned();
        write_private(&common::tokens_file(&dir), &format!("{TOKEN} rights=read,list\n"));
    })
    .await;
    let err = read_only.client().await.relay_rtts(&asked[..1]).await.unwrap_err();
    assert!(err.to_string().contains("may not write"), "{err}");
    for s in [receiver, a, b, read_only] {
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_are_ranked_by_the_room_they_have_and_those_without_any_left_out() {
    println!("seed {SEED}");
    // Four relays: one with 4 MiB free, one with 1 MiB free (its token's quota, 300 KB, is the
    // smaller: ranked by that), one whose spool is nearly full, one whose token lacks the relay
    // right. Blocks of 256 KiB.
    let spools: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let big = relay(spools[0].path(), 4 << 20, None).await;
    let quota = relay(spools[1].path(), 1 << 20, None).await;
    let full = relay(spools[2].path(), 1 << 20, None).await;
    let bare = relay(spools[3].path(), 4 << 20, None).await;
    let key = test_key([8; 16]);
    let cap = to_hex(blake3::hash(&[9u8; 32]).as_bytes());
    let filler = full.client().await;
    let block = (0, key.seal(0, &pattern(900_000, SEED), None));
    filler.deposit_blocks(&to_hex(&[8; 16]), &cap, vec![block]).await.unwrap();
    let target = |name: &str, client: Client| RelayTarget { name: name.into(), client };
    let relays = vec![
        target("quota", client_with(&quota, SMALL_QUOTA_TOKEN).await.unwrap()),
        target("full", full.client().await),
        target("bare", client_with(&bare, NO_RELAY_TOKEN).await.unwrap()),
        target("big", big.client().await),
    ];
    assert_eq!(relays[3].client.spool_room().await.unwrap(), 4 << 20);
    assert_eq!(relays[0].client.spool_room().await.unwrap(), 300_000);
    let (kept, left) = rank_relays(relays, 256 << 10).await;
    let kept: Vec<&str> = kept.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(kept, ["big", "quota"], "most room first");
    let left: Vec<(&str, String)> =
        left.iter().map(|(r, e)| (r.name.as_str(), e.to_string())).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left[0].0 == "full" && left[0].1.contains("less than one block"), "{left:?}");
    assert!(left[1].0 == "bare" && left[1].1.contains("relay"), "{left:?}");
    for server in [big, quota, full, bare] {
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_file_lands_0644_or_0755_as_a_copy_s_does() {
    use std::os::unix::fs::PermissionsExt;
    println!("seed {SEED}");
    let receiver = TestServer::start().await;
    let local = tempfile::tempdir().unwrap();
    let sender = receiver.client().await;
    let options = relayed_options(Strategy::Fcfs, true, true);
    // The part file is 0600 while it fills; in place the file is 0755 when the source was
    // executable, else 0644 (the source's own bits are not kept without --preserve).
    for (name, source_mode, landed) in [("plain.bin", 0o640, 0o644), ("run.sh", 0o750, 0o755)] {
        let source = local.path().join(name);
        fs::write(&source, pattern(70_000, SEED)).unwrap();
        fs::set_permissions(&source, fs::Permissions::from_mode(source_mode)).unwrap();
        sender.upload_relayed(&source, name, &[], &options).await.unwrap();
        let meta = fs::metadata(receiver.root().join(name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, landed, "{name}");
    }
    receiver.stop().await;
}

/// Sets `path`'s modification time to `secs` after the Unix epoch.
pub(crate) fn set_mtime(path: &Path, secs: u64) {
    // Read-only: directories too (the owner may set any time).
    let file = fs::File::open(path).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs)).unwrap();
}

/// `path`'s permission bits and modification time (seconds since the Unix epoch).
pub(crate) fn mode_and_mtime(path: &Path) -> (u32, u64) {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::metadata(path).unwrap();
    let secs = meta.modified().unwrap().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    (meta.permissions().mode() & 0o7777, secs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_preserve_a_relayed_file_and_tree_keep_their_bits_and_times() {
    use std::os::unix::fs::PermissionsExt;
    println!("seed {SEED}");
    let (receiver, _spools, a, b) = receiver_and_two_relays().await;
    let local = tempfile::tempdir().unwrap();
    let sender = receiver.client().await;
    let relays = targets(&[&a, &b]).await;
    let options = RelayedOptions { preserve: true, ..relayed_options(Strategy::Fcfs, true, true) };
    // One file, 0640 (a copy without --preserve would land it 0644), dated 2001.
    let source = local.path().join("kept.bin");
    fs::write(&source, pattern(700_000, SEED)).unwrap();
    fs::set_permissions(&source, fs::Permissions::from_mode(0o640)).unwrap();
    set_mtime(&source, 978_307_200);
    sender.upload_relayed(&source, "kept.bin", &relays, &options).await.unwrap();
    assert_eq!(mode_and_mtime(&receiver.root().join("kept.bin")), (0o640, 978_307_200));
    // A tree: each file's bits and time, and a directory's time.
    let top = local.path().join("t");
    fs::create_dir_all(top.join("sub")).unwrap();
    for (name, mode, secs) in [("a.bin", 0o600, 1_000_000_000), ("sub/x.sh", 0o750, 1_100_000_000)]
    {
        let path = top.join(name);
        fs::write(&path, pattern(400_000, SEED)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        set_mtime(&path, secs);
    }
    set_mtime(&top.join("sub"), 1_200_000_000);
    sender.upload_relayed(&top, "", &relays, &options).await.unwrap();
    let landed = receiver.root().join("t");
    assert_eq!(mode_and_mtime(&landed.join("a.bin")), (0o600, 1_000_000_000));
    assert_eq!(mode_and_mtime(&landed.join("sub/x.sh")), (0o750, 1_100_000_000));
    assert_eq!(mode_and_mtime(&landed.join("sub")).1, 1_200_000_000);
    sender.close().await;
    for stop in [receiver, a, b] {
        stop.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_checksum_if_different_compares_content_through_relays() {
    println!("seed {SEED}");
    let (receiver, _spools, a, b) = receiver_and_two_relays().await;
    let local = tempfile::tempdir().unwrap();
    let sender = receiver.client().await;
    let relays = targets(&[&a, &b]).await;
    let top = local.path().join("t");
    fs::create_dir_all(&top).unwrap();
    for (name, seed) in [("a.bin", SEED), ("b.bin", SEED + 1)] {
        fs::write(top.join(name), pattern(300_000, seed)).unwrap();
        set_mtime(&top.join(name), 1_000_000_000);
    }
    let keep = RelayedOptions { preserve: true, ..relayed_options(Strategy::Fcfs, true, true) };
    sender.upload_relayed(&top, "", &relays, &keep).await.unwrap();
    // At the receiver: a.bin's bytes changed, its size and time as the sender's; b.bin's time
    // changed, its bytes the sender's.
    let at = receiver.root().join("t");
    fs::write(at.join("a.bin"), pattern(300_000, SEED + 9)).unwrap();
    set_mtime(&at.join("a.bin"), 1_000_000_000);
    set_mtime(&at.join("b.bin"), 1_500_000_000);
    let by_content = RelayedOptions {
        overwrite: Overwrite::IfDifferent,
        checksum: true,
        ..relayed_options(Strategy::Fcfs, true, true)
    };
    let report = sender.upload_relayed(&top, "", &relays, &by_content).await.unwrap();
    assert_eq!((report.files, report.kept_files), (1, 1), "{report:?}");
    assert_eq!(fs::read(at.join("a.bin")).unwrap(), pattern(300_000, SEED), "a.bin moved");
    assert_eq!(mode_and_mtime(&at.join("b.bin")).1, 1_500_000_000, "b.bin was kept");
    // One file the same way: different bytes, the same size and time, moves.
    let one = local.path().join("one.bin");
    fs::write(&one, pattern(200_000, SEED)).unwrap();
    set_mtime(&one, 1_000_000_000);
    fs::write(receiver.root().join("one.bin"), pattern(200_000, SEED + 3)).unwrap();
    set_mtime(&receiver.root().join("one.bin"), 1_000_000_000);
    let by_time = RelayedOptions { overwrite: Overwrite::IfDifferent, ..by_content.clone() };
    let by_time = RelayedOptions { checksum: false, ..by_time };
    let report = sender.upload_relayed(&one, "one.bin", &relays, &by_time).await.unwrap();
    assert_eq!(report.kept_files, 1, "by size and time it looks the same");
    let report = sender.upload_relayed(&one, "one.bin", &relays, &by_content).await.unwrap();
    assert_eq!((report.files, report.kept_files), (1, 0), "{report:?}");
    assert_eq!(fs::read(receiver.root().join("one.bin")).unwrap(), pattern(200_000, SEED));
    sender.close().await;
    for stop in [receiver, a, b] {
        stop.stop().await;
    }
}

/// The hops' traces (`a hop's data moved`, debug, `sluice::session::relay::hop`) written on
/// this thread while `capture` runs, kept for the test to read. One subscriber for the whole
/// binary, installed once: a subscriber set for one thread (`set_default`) missed the hops'
/// events now and then while other tests ran beside it (6 test threads: 3 runs in 4).
fn capture<T>(run: impl FnOnce() -> T) -> (T, String) {
    thread_local! {
        static CAPTURED: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
    }
    struct ThisThread;
    impl std::io::Write for ThisThread {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            CAPTURED.with_borrow_mut(|c| c.as_mut().map(|c| c.extend_from_slice(buf)));
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        use tracing_subscriber::layer::{Layer, SubscriberExt};
        let hops = tracing_subscriber::filter::Targets::new()
            .with_target("sluice::session::relay::hop", tracing::Level::DEBUG);
        let layer = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(|| ThisThread);
        let subscriber = tracing_subscriber::registry().with(layer.with_filter(hops));
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
    });
    CAPTURED.with_borrow_mut(|c| *c = Some(Vec::new()));
    let out = run();
    let text = CAPTURED.with_borrow_mut(|c| c.take()).unwrap_or_default();
    (out, String::from_utf8(text).unwrap())
}

// One thread: every end's async code (the sender, the relay, the receiver) runs on the thread
// whose writes `capture` keeps.
#[test]
fn every_hop_moves_its_data_on_one_channel_whatever_the_session_negotiated() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ((), text) = capture(|| runtime.block_on(hops_on_one_channel()));
    let hops: Vec<&str> = text.lines().filter(|l| l.contains("a hop's data moved")).collect();
    println!("{}", hops.join("\n"));
    // Deposits to the relay and the receiver (sent and received), and the collection from the
    // relay (sent by it, received by the receiver).
    let sent = hops.iter().filter(|l| l.contains("direction=Send")).count();
    let received = hops.iter().filter(|l| l.contains("direction=Receive")).count();
    assert!(sent >= 3 && received >= 3, "{sent} hops sent, {received} received");
    for hop in &hops {
        assert!(hop.contains(" udp_channels=1 "), "a hop on more than one channel: {hop}");
    }
}

async fn hops_on_one_channel() {
    let world = OneRelay::new(None, 3 << 20, "hops.bin").await;
    let negotiated = world.sender.channels().await.unwrap();
    assert!(negotiated > 1, "the session negotiated {negotiated} channel(s): nothing to hold");
    let options = relayed_options(Strategy::Cyclic, true, true);
    let report = world.sender.upload_relayed(&world.source, "", &world.relays, &options).await;
    report.unwrap();
    assert_eq!(fs::read(world.receiver.root().join("hops.bin")).unwrap(), world.content);
    world.stop().await;
}
