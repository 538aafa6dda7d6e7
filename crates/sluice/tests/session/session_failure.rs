//! A server that dies or shuts down mid-transfer: the client fails within seconds with a clear
//! error and leaves nothing under the final name.
//!
//! A killed server has to be a process of its own (an in-process server's sockets outlive any
//! "kill"), so these tests start this test binary again as the server: the ignored test
//! `server_process` is its entry point.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;
use sluice::session::client::KEEP_ALIVE_INTERVAL;
use sluice::session::{Client, ClientConfig, Fingerprint, Server, SessionError, TrustPolicy};
use sluice_proto::cc::CcKind;
use tokio::sync::mpsc;

const DIR_VAR: &str = "SLUICE_TEST_SERVER_DIR";
/// Large enough that the transfer is still running when the server goes, at [`RATE_BPS`].
const FILE_BYTES: usize = 48 << 20;
/// The data channels' rate (fixed): 48 MiB take about 5 s.
const RATE_BPS: u64 = 80_000_000;

#[test]
#[ignore = "helper: the server process of the tests below, started by them"]
fn server_process() {
    let Some(dir) = std::env::var_os(DIR_VAR) else { return };
    let dir = PathBuf::from(dir);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let server = Server::bind(common::server_config(&dir)).unwrap();
        let line = format!("{} {}", server.local_addr(), server.fingerprint());
        fs::write(dir.join("addr.tmp"), line).unwrap();
        fs::rename(dir.join("addr.tmp"), dir.join("addr")).unwrap();
        server.run(std::future::pending()).await.unwrap();
    });
}

/// The server process and what a client needs to reach it.
struct ServerProcess {
    child: Child,
    config: ClientConfig,
}

impl ServerProcess {
    fn start(dir: &Path) -> ServerProcess {
        // Write the root and the tokens before the child reads them.
        common::server_config(dir);
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "session_failure::server_process", "--test-threads=1"])
            .env(DIR_VAR, dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr_file = dir.join("addr");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !addr_file.exists() {
            assert!(Instant::now() < deadline, "the server process did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        let line = fs::read_to_string(addr_file).unwrap();
        let (addr, fingerprint) = line.split_once(' ').unwrap();
        let fingerprint: Fingerprint = fingerprint.parse().unwrap();
        let mut config = ClientConfig::new(
            addr.parse().unwrap(),
            "127.0.0.1",
            common::TOKEN,
            dir.join("known_hosts"),
            TrustPolicy::Pinned(fingerprint),
        );
        config.channel.cc = CcKind::Fixed;
        config.channel.rate_bps = RATE_BPS;
        ServerProcess { child, config }
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A progress callback that reports once at least 1 MiB moved.
fn started_signal() -> (mpsc::UnboundedReceiver<()>, impl FnMut(sluice::datapath::Progress) + Send)
{
    let (tx, rx) = mpsc::unbounded_channel();
    let mut sent = false;
    (rx, move |p: sluice::datapath::Progress| {
        if !sent && p.bytes >= 1 << 20 {
            sent = true;
            let _ = tx.send(());
        }
    })
}

/// Asserts `result` is a network error that came less than 10 s after `since` (`what`).
fn assert_network_error_in_time(
    result: Result<impl std::fmt::Debug, SessionError>,
    since: Instant,
    what: &str,
) {
    let elapsed = since.elapsed();
    let err = result.expect_err("the transfer must fail");
    eprintln!("failed {elapsed:?} after {what}: {err}");
    assert!(matches!(err, SessionError::Network(_)), "{err:?}");
    assert!(elapsed < Duration::from_secs(10), "failed only after {elapsed:?}: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_fails_within_10_s_when_the_server_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path());
    fs::write(dir.path().join("root/big.bin"), common::pattern(FILE_BYTES, 9)).unwrap();
    let client = Client::connect(server.config.clone()).await.unwrap();
    let local = tempfile::tempdir().unwrap();
    let target = local.path().join("big.bin");
    let (mut started, progress) = started_signal();
    let transfer = client.get("big.bin", &target, progress);
    let mut transfer = std::pin::pin!(transfer);
    tokio::select! {
        _ = started.recv() => {}
        done = &mut transfer => panic!("finished before the kill: {done:?}"),
    }
    server.kill();
    let killed = Instant::now();
    assert_network_error_in_time(transfer.await, killed, "the kill");
    assert!(!target.exists());
    // The partial file stays for a resume, beside its record; nothing else.
    assert!(common::only_resumable_leftovers(local.path()), "{:?}", common::listing(local.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_fails_within_10_s_when_the_server_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path());
    let client = Client::connect(server.config.clone()).await.unwrap();
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("big.bin");
    fs::write(&source, common::pattern(FILE_BYTES, 5)).unwrap();
    let (mut started, progress) = started_signal();
    let transfer = client.put(&source, "big.bin", progress);
    let mut transfer = std::pin::pin!(transfer);
    tokio::select! {
        _ = started.recv() => {}
        done = &mut transfer => panic!("finished before the kill: {done:?}"),
    }
    server.kill();
    let killed = Instant::now();
    assert_network_error_in_time(transfer.await, killed, "the kill");
    assert!(!dir.path().join("root/big.bin").exists());
}

/// The slowest way to notice a dead server: the session is quiet, the server's last packet
/// is an answer, and the client's next packet is its keep-alive, which (RFC 9000 10.1) starts
/// the QUIC idle timeout anew; a request sent later does not. The client then fails one
/// keep-alive interval plus the idle timeout after the server's last packet, and that packet
/// came after `connect` returned: so failing within 10 s of the connect means within 10 s of
/// the server's last word, whenever it was killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_client_notices_a_killed_server_within_10_s_of_its_last_packet() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path());
    fs::write(dir.path().join("root/small.bin"), common::pattern(1 << 10, 3)).unwrap();
    let client = Client::connect(server.config.clone()).await.unwrap();
    let connected = Instant::now();
    // Long enough for every packet of the opening to be answered, well under a keep-alive.
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.kill();
    // The request goes out after the keep-alive, so it cannot restart the idle timeout.
    tokio::time::sleep(KEEP_ALIVE_INTERVAL + Duration::from_millis(500)).await;
    let local = tempfile::tempdir().unwrap();
    let target = local.path().join("small.bin");
    let got = client.get("small.bin", &target, |_| {}).await;
    assert_network_error_in_time(got, connected, "the connect");
    assert!(!target.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_shutdown_cancels_a_running_get_at_once() {
    let server = TestServer::start().await;
    fs::write(server.root().join("big.bin"), common::pattern(FILE_BYTES, 1)).unwrap();
    let mut config = server.client_config();
    config.channel.cc = CcKind::Fixed;
    config.channel.rate_bps = RATE_BPS;
    let client = Client::connect(config).await.unwrap();
    let local = tempfile::tempdir().unwrap();
    let target = local.path().join("big.bin");
    let (mut started, progress) = started_signal();
    let transfer = client.get("big.bin", &target, progress);
    let mut transfer = std::pin::pin!(transfer);
    tokio::select! {
        _ = started.recv() => {}
        done = &mut transfer => panic!("finished before the shutdown: {done:?}"),
    }
    let stopping = Instant::now();
    let (result, ()) = tokio::join!(transfer, server.stop());
    let elapsed = stopping.elapsed();
    match result {
        Err(SessionError::Network(message)) => {
            assert!(message.contains("shutting down"), "{message}")
        }
        other => panic!("expected a network error, got {other:?}"),
    }
    // The connection's close cancels the channel: no waiting for the data idle timeout.
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    assert!(!target.exists());
    assert!(common::only_resumable_leftovers(local.path()), "{:?}", common::listing(local.path()));
}
