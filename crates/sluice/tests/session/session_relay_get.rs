//! Relayed downloads (issue 28, `docs/relay.md`, "Downloads"): the server stripes a file or a
//! tree over relays of its own configuration and the client collects from them, verified end to
//! end; the client's overwrite policy; the server's refusals.

#![allow(clippy::print_stdout)] // tests print their seeds

use crate::common;

use std::fs;
use std::future::pending;
use std::path::Path;
use std::time::Duration;

use common::{TestServer, pattern};
use sluice::datapath::Fault;
use sluice::session::{Overwrite, RelayedDownload, RelayedOptions, ServerRelay, SessionError};
use sluice_session::relay::Strategy;

use crate::session_relay::{SEED, block_files, delayed, marked, mode_and_mtime, relay, set_mtime};
use crate::session_relay_faults::Gate;

/// A server whose relays are A and B (named `a` and `b`), with spools that outlive them.
struct World {
    server: TestServer,
    relays: Vec<TestServer>,
    spools: Vec<tempfile::TempDir>,
}

impl World {
    async fn new(faults: [Option<Fault>; 2]) -> World {
        println!("seed {SEED}");
        let spools = vec![tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let mut relays = Vec::new();
        for (spool, fault) in spools.iter().zip(faults) {
            relays.push(relay(spool.path(), 64 << 20, fault).await);
        }
        let named: Vec<ServerRelay> = relays
            .iter()
            .zip(["a", "b"])
            .map(|(r, name)| ServerRelay { name: name.into(), config: r.client_config() })
            .collect();
        let server = TestServer::start_with(move |config| config.relays = named).await;
        World { server, relays, spools }
    }

    async fn stop(self) {
        self.server.stop().await;
        for relay in self.relays {
            relay.stop().await;
        }
    }

    /// Whether every relay's spool is empty (collected blocks are deleted).
    fn spools_empty(&self) -> bool {
        self.spools.iter().all(|s| block_files(s.path()).is_empty())
    }
}

/// The client in the striping, as by default (it takes the server's direct share).
fn options(strategy: Strategy) -> RelayedOptions {
    RelayedOptions { strategy, block_bytes: 256 << 10, batch_blocks: 2, ..Default::default() }
}

/// The server's relays only (`--relay-direct off`).
fn relays_only(strategy: Strategy) -> RelayedOptions {
    RelayedOptions { direct: false, ..options(strategy) }
}

fn what(path: &str, relays: &[&str]) -> RelayedDownload {
    RelayedDownload {
        path: path.into(),
        recursive: false,
        relays: relays.iter().map(|r| (*r).to_owned()).collect(),
        max_rtt_sender_ms: None,
        max_rtt_receiver_ms: None,
        keep: None,
    }
}

/// Regular files beneath `dir`, as (relative path, bytes), sorted.
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in fs::read_dir(&at).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_download_arrives_intact_through_the_server_s_relays_by_every_strategy() {
    let world = World::new([None, None]).await;
    let mut content = marked(3 << 20);
    content.extend(pattern((1 << 20) + 12_345, SEED));
    fs::write(world.server.root().join("big.bin"), &content).unwrap();
    let client = world.server.client().await;
    let local = tempfile::tempdir().unwrap();
    // Every strategy with this end in the striping (the default), then the relays alone.
    let runs = [
        (Strategy::Fcfs, true),
        (Strategy::Cyclic, true),
        (Strategy::Partitioned, true),
        (Strategy::Cyclic, false),
    ];
    for (i, (strategy, direct)) in runs.into_iter().enumerate() {
        let dest = local.path().join(format!("out{i}.bin"));
        let opts = RelayedOptions { direct, ..options(strategy) };
        let report =
            client.download_relayed(&what("big.bin", &["a", "b"]), &dest, &opts, pending()).await;
        let report = report.unwrap();
        println!("{strategy:?}, direct {direct}: {report:?}");
        assert_eq!(fs::read(&dest).unwrap(), content, "{strategy:?}");
        assert_eq!(report.blocks, 17);
        assert_eq!(report.bytes, content.len() as u64);
        let names: Vec<&str> = report.placed.iter().map(|p| p.name.as_str()).collect();
        let expected: &[&str] = if direct { &["a", "b", "direct"] } else { &["a", "b"] };
        assert_eq!(names, expected, "the relays by the server's names, then this end's share");
        assert_eq!(report.placed.iter().map(|p| p.blocks).sum::<u64>(), 17);
        let bytes: u64 = report.placed.iter().map(|p| p.bytes).sum();
        assert_eq!(bytes, content.len() as u64, "the file's bytes by where they came from");
        // Cyclic and partitioned give each destination its share: 17 blocks over three are
        // at least 5 each, over two at least 8.
        if strategy != Strategy::Fcfs {
            let least = if direct { 5 } else { 8 };
            assert!(report.placed.iter().all(|p| p.blocks >= least), "{:?}", report.placed);
        }
        assert!(report.total_seconds.unwrap() >= report.send_seconds);
        assert!(world.spools_empty(), "collected blocks are deleted");
    }
    let listed = common::listing(local.path());
    assert_eq!(listed, ["out0.bin", "out1.bin", "out2.bin", "out3.bin"], "no part file is left");
    client.close().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_tcp_session_the_client_takes_its_direct_share_on_tcp_streams() {
    let world = World::new([None, None]).await;
    let content = pattern((3 << 20) + 777, SEED);
    fs::write(world.server.root().join("t.bin"), &content).unwrap();
    let mut config = world.server.client_config();
    config.transport = sluice::session::TransportChoice::Tcp;
    let client = sluice::session::Client::connect(config).await.unwrap();
    assert_eq!(client.transport(), sluice::session::Transport::Tcp);
    let local = tempfile::tempdir().unwrap();
    let dest = local.path().join("t.bin");
    // Cyclic: the direct path takes a third of the blocks, whatever the paths' speeds.
    let opts = options(Strategy::Cyclic);
    let what = what("t.bin", &["a", "b"]);
    let report = client.download_relayed(&what, &dest, &opts, pending()).await.unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(&dest).unwrap(), content);
    let direct = report.placed.iter().find(|p| p.name == "direct").unwrap();
    assert_eq!(direct.blocks, 4, "13 blocks over three destinations: {:?}", report.placed);
    client.close().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_comes_through_the_server_s_relays_into_a_directory() {
    let world = World::new([None, None]).await;
    let top = world.server.root().join("run");
    fs::create_dir_all(top.join("deep/er")).unwrap();
    fs::write(top.join("a.bin"), pattern(700_000, SEED)).unwrap();
    fs::write(top.join("deep/b.txt"), b"small").unwrap();
    fs::write(top.join("deep/er/empty"), b"").unwrap();
    fs::write(top.join("deep/er/c.bin"), pattern(1_300_001, SEED + 1)).unwrap();
    let client = world.server.client().await;
    let local = tempfile::tempdir().unwrap();
    let mut tree = what("run", &["a", "b"]);
    tree.recursive = true;
    let report =
        client.download_relayed(&tree, local.path(), &options(Strategy::Fcfs), pending()).await;
    let report = report.unwrap();
    println!("{report:?}");
    assert_eq!(report.files, 4);
    assert_eq!(files_under(&local.path().join("run")), files_under(&top));
    assert!(world.spools_empty());

    // Again with `never`: every file is there, so nothing moves.
    let never = RelayedOptions { overwrite: Overwrite::Never, ..options(Strategy::Fcfs) };
    let report = client.download_relayed(&tree, local.path(), &never, pending()).await.unwrap();
    assert_eq!((report.files, report.kept_files, report.blocks), (0, 4, 0), "{report:?}");
    assert_eq!(files_under(&local.path().join("run")), files_under(&top));

    // A directory needs `recursive`.
    let err = client.download_relayed(&what("run", &["a"]), local.path(), &never, pending()).await;
    let err = err.unwrap_err().to_string();
    assert!(err.contains("is a directory"), "{err}");
    client.close().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_exists_here_follows_the_client_s_overwrite_policy() {
    let world = World::new([None, None]).await;
    let content = pattern(600_000, SEED);
    fs::write(world.server.root().join("f.bin"), &content).unwrap();
    let client = world.server.client().await;
    let local = tempfile::tempdir().unwrap();
    let dest = local.path().join("f.bin");
    fs::write(&dest, b"mine").unwrap();
    let refuse = options(Strategy::Fcfs);
    let err = client
        .download_relayed(&what("f.bin", &["a"]), &dest, &refuse, pending())
        .await
        .unwrap_err();
    println!("refuse: {err}");
    assert!(err.to_string().contains("exists"), "{err}");
    assert_eq!(fs::read(&dest).unwrap(), b"mine", "the file is untouched");
    let never = RelayedOptions { overwrite: Overwrite::Never, ..options(Strategy::Fcfs) };
    let report =
        client.download_relayed(&what("f.bin", &["a"]), &dest, &never, pending()).await.unwrap();
    assert_eq!((report.kept_files, report.blocks), (1, 0));
    assert_eq!(fs::read(&dest).unwrap(), b"mine");
    let always = RelayedOptions { overwrite: Overwrite::Always, ..options(Strategy::Fcfs) };
    client.download_relayed(&what("f.bin", &["a"]), &dest, &always, pending()).await.unwrap();
    assert_eq!(fs::read(&dest).unwrap(), content);
    assert_eq!(common::listing(local.path()), vec!["f.bin"], "no part file is left");
    assert!(world.spools_empty(), "a refused offer leaves nothing at the relays");
    client.close().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_returns_a_wrong_byte_is_caught_and_its_block_comes_again() {
    // Relay A's reads for each collection flip the batch's byte 1000 (in its first block).
    let world = World::new([Some(Fault { offset: 1000, times: 1 }), None]).await;
    let content = pattern(2 << 20, SEED);
    fs::write(world.server.root().join("f.bin"), &content).unwrap();
    let client = world.server.client().await;
    let local = tempfile::tempdir().unwrap();
    let dest = local.path().join("f.bin");
    let report = client
        .download_relayed(&what("f.bin", &["a", "b"]), &dest, &options(Strategy::Cyclic), pending())
        .await
        .unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(&dest).unwrap(), content);
    assert!(
        report.placed.iter().map(|p| p.blocks).sum::<u64>() > report.blocks,
        "the block that did not open was deposited again: {:?}",
        report.placed
    );
    client.close().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_relays_it_does_not_have_and_paths_outside_its_root() {
    let world = World::new([None, None]).await;
    fs::write(world.server.root().join("f.bin"), b"x").unwrap();
    let client = world.server.client().await;
    let local = tempfile::tempdir().unwrap();
    let dest = local.path().join("f.bin");
    let opts = options(Strategy::Fcfs);
    let refused = |e: Result<_, SessionError>| e.unwrap_err().to_string();
    let err = refused(
        client.download_relayed(&what("f.bin", &["a", "zz"]), &dest, &opts, pending()).await,
    );
    assert!(err.contains("no relay \"zz\"") && err.contains("a, b"), "{err}");
    let err = refused(client.download_relayed(&what("f.bin", &[]), &dest, &opts, pending()).await);
    assert!(err.contains("names 1 to"), "{err}");
    let err = refused(
        client.download_relayed(&what("../outside", &["a"]), &dest, &opts, pending()).await,
    );
    assert!(err.contains("'..' is refused"), "{err}");
    assert!(!dest.exists());
    // A server with no relays says so.
    let bare = TestServer::start().await;
    fs::write(bare.root().join("f.bin"), b"x").unwrap();
    let other = bare.client().await;
    let err =
        refused(other.download_relayed(&what("f.bin", &["a"]), &dest, &opts, pending()).await);
    assert!(err.contains("no relay"), "{err}");
    assert!(!dest.exists());
    assert!(common::listing(local.path()).is_empty());
    other.close().await;
    bare.stop().await;
    client.close().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_preserve_a_downloaded_file_and_tree_keep_their_bits_and_times() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new([None, None]).await;
    let root = world.server.root();
    fs::write(root.join("f.bin"), pattern(600_000, SEED)).unwrap();
    fs::set_permissions(root.join("f.bin"), fs::Permissions::from_mode(0o640)).unwrap();
    set_mtime(&root.join("f.bin"), 978_307_200);
    fs::create_dir_all(root.join("t/sub")).unwrap();
    fs::write(root.join("t/sub/x.sh"), pattern(500_000, SEED)).unwrap();
    fs::set_permissions(root.join("t/sub/x.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    set_mtime(&root.join("t/sub/x.sh"), 1_100_000_000);
    set_mtime(&root.join("t/sub"), 1_200_000_000);
    let client = world.server.client().await;
    let local = tempfile::tempdir().unwrap();
    let keep = RelayedOptions { preserve: true, ..options(Strategy::Fcfs) };
    let dest = local.path().join("f.bin");
    client.download_relayed(&what("f.bin", &["a", "b"]), &dest, &keep, pending()).await.unwrap();
    assert_eq!(mode_and_mtime(&dest), (0o640, 978_307_200));
    let mut tree = what("t", &["a", "b"]);
    tree.recursive = true;
    client.download_relayed(&tree, local.path(), &keep, pending()).await.unwrap();
    assert_eq!(mode_and_mtime(&local.path().join("t/sub/x.sh")), (0o750, 1_100_000_000));
    assert_eq!(mode_and_mtime(&local.path().join("t/sub")).1, 1_200_000_000);
    // Without it, as a copy: 0644 and the time of arrival.
    let plain = local.path().join("plain.bin");
    let opts = options(Strategy::Fcfs);
    client.download_relayed(&what("f.bin", &["a"]), &plain, &opts, pending()).await.unwrap();
    let (mode, secs) = mode_and_mtime(&plain);
    assert_eq!(mode, 0o644);
    assert!(secs > 1_700_000_000, "the time of arrival: {secs}");
    client.close().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_checksum_a_download_compares_content_with_the_server_s() {
    let world = World::new([None, None]).await;
    let root = world.server.root();
    fs::write(root.join("f.bin"), pattern(400_000, SEED)).unwrap();
    set_mtime(&root.join("f.bin"), 1_000_000_000);
    let client = world.server.client().await;
    let local = tempfile::tempdir().unwrap();
    let dest = local.path().join("f.bin");
    // Here: other bytes of the same size and time.
    fs::write(&dest, pattern(400_000, SEED + 5)).unwrap();
    set_mtime(&dest, 1_000_000_000);
    let by_time = RelayedOptions { overwrite: Overwrite::IfDifferent, ..options(Strategy::Fcfs) };
    let report =
        client.download_relayed(&what("f.bin", &["a"]), &dest, &by_time, pending()).await.unwrap();
    assert_eq!(report.kept_files, 1, "by size and time it looks the same");
    let by_content = RelayedOptions { checksum: true, ..by_time };
    let report = client
        .download_relayed(&what("f.bin", &["a"]), &dest, &by_content, pending())
        .await
        .unwrap();
    assert_eq!((report.files, report.kept_files), (1, 0), "{report:?}");
    assert_eq!(fs::read(&dest).unwrap(), pattern(400_000, SEED));
    // The same bytes now: kept, whatever the time.
    set_mtime(&dest, 1_500_000_000);
    let report = client
        .download_relayed(&what("f.bin", &["a"]), &dest, &by_content, pending())
        .await
        .unwrap();
    assert_eq!(report.kept_files, 1);
    client.close().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_leaves_out_relays_farther_from_it_than_its_limit() {
    println!("seed {SEED}");
    // The server's relay B stands 40 ms away behind a forwarder that holds each datagram
    // 20 ms each way; A is near.
    let spools = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let a = relay(spools[0].path(), 64 << 20, None).await;
    let b = relay(spools[1].path(), 64 << 20, None).await;
    let far = delayed(b.addr, Duration::from_millis(20)).await;
    let mut far_b = b.client_config();
    far_b.server = far;
    let named = vec![
        ServerRelay { name: "a".into(), config: a.client_config() },
        ServerRelay { name: "b".into(), config: far_b },
    ];
    let server = TestServer::start_with(move |config| config.relays = named).await;
    let content = pattern(2 << 20, SEED);
    fs::write(server.root().join("f.bin"), &content).unwrap();
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let dest = local.path().join("f.bin");
    let mut near = what("f.bin", &["a", "b"]);
    near.max_rtt_receiver_ms = Some(30);
    let opts = relays_only(Strategy::Cyclic);
    let report = client.download_relayed(&near, &dest, &opts, pending()).await.unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(&dest).unwrap(), content);
    assert_eq!(report.placed[0].blocks, 8, "every block through A, cyclic as it is");
    assert_eq!(report.placed[1].blocks, 0, "none through B");
    assert_eq!(report.left_out.len(), 1, "{:?}", report.left_out);
    assert!(report.left_out[0].contains("relay b left out"), "{:?}", report.left_out);
    // A limit no relay meets refuses the download before anything is written here.
    near.max_rtt_receiver_ms = Some(0);
    let again = local.path().join("again.bin");
    let err = client.download_relayed(&near, &again, &opts, pending()).await.unwrap_err();
    assert!(err.to_string().contains("no relay is within"), "{err}");
    assert_eq!(common::listing(local.path()), vec!["f.bin"], "nothing else here");
    assert!(spools.iter().all(|s| block_files(s.path()).is_empty()), "nothing at the relays");
    client.close().await;
    server.stop().await;
    a.stop().await;
    b.stop().await;
}

/// A server whose relays A and B stand behind gates that pass the server (the first peer
/// through) and the client only once opened, and a download of `evacuated.bin` (17 blocks, a
/// marker of plaintext throughout) under way until every block is on the relays.
struct Gated {
    server: TestServer,
    relays: [TestServer; 2],
    spools: [tempfile::TempDir; 2],
    gates: [Gate; 2],
    client: sluice::session::Client,
    local: tempfile::TempDir,
    content: Vec<u8>,
    download: tokio::task::JoinHandle<Result<sluice::session::RelayedReport, SessionError>>,
}

impl Gated {
    /// With `keep`, the download keeps its record there for a re-run.
    async fn spooled(stop: tokio::sync::oneshot::Receiver<()>, keep: Option<&Path>) -> Gated {
        println!("seed {SEED}");
        let spools = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let a = relay(spools[0].path(), 64 << 20, None).await;
        let b = relay(spools[1].path(), 64 << 20, None).await;
        let gates = [Gate::before(a.addr).await, Gate::before(b.addr).await];
        let named: Vec<ServerRelay> = [(&a, &gates[0], "a"), (&b, &gates[1], "b")]
            .into_iter()
            .map(|(relay, gate, name)| {
                let mut config = relay.client_config();
                config.server = gate.addr;
                ServerRelay { name: name.into(), config }
            })
            .collect();
        let server = TestServer::start_with(move |config| config.relays = named).await;
        let content = marked(17 * (256 << 10) - 999);
        fs::write(server.root().join("evacuated.bin"), &content).unwrap();
        let client = server.client().await;
        let local = tempfile::tempdir().unwrap();
        let (to, at) = (client.clone(), local.path().join("evacuated.bin"));
        let keep = keep.map(Path::to_owned);
        let download = tokio::spawn(async move {
            let what = RelayedDownload { keep, ..what("evacuated.bin", &["a", "b"]) };
            let stop = async {
                let _ = stop.await;
            };
            to.download_relayed(&what, &at, &relays_only(Strategy::Fcfs), stop).await
        });
        let gated =
            Gated { server, relays: [a, b], spools, gates, client, local, content, download };
        for _ in 0..600 {
            if gated.blocks() == 17 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(gated.blocks(), 17, "every block is on a relay before the client may collect");
        gated
    }

    /// Blocks in the spools.
    fn blocks(&self) -> usize {
        self.spools.iter().map(|s| block_files(s.path()).len()).sum()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_leaves_once_its_sealed_blocks_are_safe_and_the_client_collects_alone() {
    let (_stop, never) = tokio::sync::oneshot::channel();
    let gated = Gated::spooled(never, None).await;
    // The relays hold every block, and none of the plaintext.
    let marker = &gated.content[..30];
    for spool in &gated.spools {
        for block in block_files(spool.path()) {
            let held = fs::read(&block).unwrap();
            assert!(!held.windows(marker.len()).any(|w| w == marker), "{}", block.display());
        }
    }
    // The server's `Sent` follows its last `Placed` and the digest.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Gated { server, relays, spools, gates, client, local, content, download } = gated;
    server.stop().await;
    for (gate, relay) in gates.iter().zip(&relays) {
        gate.open_to(relay.addr);
    }
    let report = download.await.unwrap().unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(local.path().join("evacuated.bin")).unwrap(), content);
    assert_eq!(report.placed.iter().map(|p| p.blocks).sum::<u64>(), 17);
    assert!(report.send_seconds < report.total_seconds.unwrap());
    assert!(
        spools.iter().all(|s| block_files(s.path()).is_empty()),
        "collected blocks are deleted"
    );
    client.close().await;
    for relay in relays {
        relay.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_relayed_download_leaves_nothing_behind() {
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let gated = Gated::spooled(stopped, None).await;
    // The client has made its part file and cannot collect yet: stopping it deletes that,
    // and tells the relays to delete the blocks (the gates open just after the stop: its
    // handshakes get through once they do).
    assert_eq!(common::listing(gated.local.path()).len(), 1, "the part file is there");
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (gate, relay) in gated.gates.iter().zip(&gated.relays) {
        gate.open_to(relay.addr);
    }
    let err = gated.download.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("stopped"), "{err}");
    assert!(common::listing(gated.local.path()).is_empty(), "nothing is left");
    let spooled: usize = gated.spools.iter().map(|s| block_files(s.path()).len()).sum();
    assert_eq!(spooled, 0, "the relays deleted the stopped download's blocks");
    gated.client.close().await;
    gated.server.stop().await;
    for relay in gated.relays {
        relay.stop().await;
    }
}

/// A server with relays A and B (named `a` and `b`) whose spools are `spools`, serving `content`
/// as `evacuated.bin`.
async fn serving_again(
    spools: &[tempfile::TempDir; 2],
    content: &[u8],
) -> (TestServer, [TestServer; 2]) {
    let a = relay(spools[0].path(), 64 << 20, None).await;
    let b = relay(spools[1].path(), 64 << 20, None).await;
    let named = vec![
        ServerRelay { name: "a".into(), config: a.client_config() },
        ServerRelay { name: "b".into(), config: b.client_config() },
    ];
    let server = TestServer::start_with(move |config| config.relays = named).await;
    fs::write(server.root().join("evacuated.bin"), content).unwrap();
    (server, [a, b])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_download_kept_for_a_re_run_moves_only_what_is_missing() {
    let keep = tempfile::tempdir().unwrap();
    let (_stop, never) = tokio::sync::oneshot::channel();
    let gated = Gated::spooled(never, Some(keep.path())).await;
    // The server's `Sent` follows its last `Placed` and the digest; then it goes, and so do B
    // and what it holds: only A's blocks can arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Gated { server, relays: [a, b], spools, gates, client, local, content, download } = gated;
    server.stop().await;
    b.stop().await;
    let at_a = block_files(spools[0].path()).len();
    println!("A holds {at_a} blocks, B {}", block_files(spools[1].path()).len());
    assert!(0 < at_a && at_a < 17, "both relays took blocks");
    for file in block_files(spools[1].path()) {
        fs::remove_file(file).unwrap();
    }
    gates[0].open_to(a.addr);
    let err = download.await.unwrap().unwrap_err();
    println!("{err}");
    assert!(err.to_string().contains("nowhere to collect"), "{err}");
    let dest = local.path().join("evacuated.bin");
    assert!(!dest.exists(), "nothing unverified is renamed into place");
    assert_eq!(common::listing(local.path()).len(), 1, "the part file is kept");
    assert_eq!(common::listing(keep.path()).len(), 1, "with its record");
    client.close().await;
    a.stop().await;

    // The same download run again (a server with the same file and both relays back) moves
    // only the blocks B lost.
    let (server, relays) = serving_again(&spools, &content).await;
    let client = server.client().await;
    let what = RelayedDownload {
        keep: Some(keep.path().to_owned()),
        ..what("evacuated.bin", &["a", "b"])
    };
    let report = client
        .download_relayed(&what, &dest, &relays_only(Strategy::Fcfs), pending())
        .await
        .unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(&dest).unwrap(), content);
    assert_eq!(report.resumed_blocks, at_a as u64, "A's blocks were written the first time");
    let moved: u64 = report.placed.iter().map(|p| p.blocks).sum();
    assert_eq!(moved, 17 - at_a as u64, "only what B lost moved again");
    assert_eq!(common::listing(local.path()), ["evacuated.bin"], "no part file is left");
    assert!(common::listing(keep.path()).is_empty(), "nor its record");
    client.close().await;
    server.stop().await;
    for relay in relays {
        relay.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_download_kept_for_a_re_run_goes_on_and_a_changed_file_starts_over() {
    let keep = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let gated = Gated::spooled(stopped, Some(keep.path())).await;
    // Stopped while it cannot collect yet: its part file and record stay (the server told
    // what the file is), and the relays delete the blocks (a re-run is a new transfer).
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (gate, relay) in gated.gates.iter().zip(&gated.relays) {
        gate.open_to(relay.addr);
    }
    let Gated { server, relays, spools, client, local, content, download, .. } = gated;
    let err = download.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("stopped"), "{err}");
    assert_eq!(common::listing(local.path()).len(), 1, "the part file is kept");
    assert_eq!(common::listing(keep.path()).len(), 1, "with its record");
    let spooled: usize = spools.iter().map(|s| block_files(s.path()).len()).sum();
    assert_eq!(spooled, 0, "the relays deleted the stopped download's blocks");
    client.close().await;
    server.stop().await;
    for relay in relays {
        relay.stop().await;
    }

    // Run again with the file changed at the server: the sender's digest is not the one the
    // kept part was of, so it is dropped and nothing is renamed into place; the run after
    // that starts over and arrives.
    let mut changed = content.clone();
    changed[5] ^= 1;
    let (server, relays) = serving_again(&spools, &changed).await;
    let client = server.client().await;
    let what = RelayedDownload {
        keep: Some(keep.path().to_owned()),
        ..what("evacuated.bin", &["a", "b"])
    };
    let dest = local.path().join("evacuated.bin");
    let opts = relays_only(Strategy::Fcfs);
    // A download into another directory leaves the kept one as it is.
    let elsewhere = tempfile::tempdir().unwrap();
    let there = elsewhere.path().join("evacuated.bin");
    client.download_relayed(&what, &there, &opts, pending()).await.unwrap();
    assert_eq!(fs::read(&there).unwrap(), changed);
    assert_eq!(common::listing(local.path()).len(), 1, "the kept part file is left");
    assert_eq!(common::listing(keep.path()).len(), 1, "and its record");
    let err = client.download_relayed(&what, &dest, &opts, pending()).await.unwrap_err();
    assert!(err.to_string().contains("not the one"), "{err}");
    assert!(common::listing(local.path()).is_empty(), "the kept part is dropped");
    assert!(common::listing(keep.path()).is_empty(), "with its record");
    let report = client.download_relayed(&what, &dest, &opts, pending()).await.unwrap();
    assert_eq!(report.resumed_blocks, 0);
    assert_eq!(fs::read(&dest).unwrap(), changed);
    client.close().await;
    server.stop().await;
    for relay in relays {
        relay.stop().await;
    }
}
