//! The early start over real QUIC and UDP on loopback: a session's first upload starts its data
//! on the sockets the server offered before the token was checked, a download to where nothing
//! is starts at the server right behind the manifest, the receiver declines what it does not
//! want whole, and a server binds a bounded number of sockets for peers it has not
//! authenticated, reads nothing from them and creates nothing for them.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{TestServer, pattern, raw_endpoint};
use sluice::session::messages::{Offer, read_message};
use sluice::session::{Client, CopyOptions, Overwrite};

const MIB: usize = 1 << 20;

/// One test of this file at a time: one of them counts the sockets the whole process holds,
/// which another test's sockets, opened or closed meanwhile, would make fail, or pass when it
/// should not.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn options() -> CopyOptions {
    CopyOptions { overwrite: Overwrite::Always, ..CopyOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_first_upload_starts_early_and_a_later_one_waits_for_want() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start().await;
    let local = tempfile::tempdir().unwrap();
    let (a, b) = (pattern(3 * MIB + 17, 1), pattern(MIB, 2));
    fs::write(local.path().join("a.bin"), &a).unwrap();
    fs::write(local.path().join("b.bin"), &b).unwrap();
    let client = server.client().await;
    let first = client.upload(&[local.path().join("a.bin")], "", &options(), |_| {}).await;
    let first = first.expect("the first upload");
    let second = client.upload(&[local.path().join("b.bin")], "", &options(), |_| {}).await;
    let second = second.expect("the second upload");
    assert!(first.early, "the first request took the offered sockets");
    assert!(!second.early, "the offer is the first request's only");
    assert!(fs::read(server.root().join("a.bin")).unwrap() == a);
    assert!(fs::read(server.root().join("b.bin")).unwrap() == b);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_whose_files_are_not_all_wanted_is_declined_and_lands_right() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start().await;
    let local = tempfile::tempdir().unwrap();
    let tree = local.path().join("t");
    fs::create_dir(&tree).unwrap();
    let files: Vec<Vec<u8>> = (0..3).map(|k| pattern(MIB + k, k as u8)).collect();
    for (k, data) in files.iter().enumerate() {
        fs::write(tree.join(format!("{k}")), data).unwrap();
    }
    // File 1 is on the server already and the policy keeps it: the server wants two of three.
    fs::create_dir(server.root().join("t")).unwrap();
    fs::write(server.root().join("t/1"), b"kept").unwrap();
    let client = server.client().await;
    let keep =
        CopyOptions { recursive: true, overwrite: Overwrite::Never, ..CopyOptions::default() };
    let report = client.upload(std::slice::from_ref(&tree), "", &keep, |_| {}).await.unwrap();
    assert!(!report.early, "declined");
    assert_eq!((report.files, report.kept), (2, 1));
    assert!(fs::read(server.root().join("t/0")).unwrap() == files[0]);
    assert_eq!(fs::read(server.root().join("t/1")).unwrap(), b"kept");
    assert!(fs::read(server.root().join("t/2")).unwrap() == files[2]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_to_where_nothing_is_starts_early_and_one_onto_a_file_does_not() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start().await;
    let data = pattern(5 * MIB + 3, 7);
    fs::write(server.root().join("d.bin"), &data).unwrap();
    let local = tempfile::tempdir().unwrap();
    let client = server.client().await;
    let fresh = client.download(&["d.bin".into()], local.path(), &options(), |_| {}).await;
    assert!(fresh.expect("into an empty directory").early);
    assert!(fs::read(local.path().join("d.bin")).unwrap() == data);
    // The file is there now: replacing it is compared, not started early.
    let again = client.download(&["d.bin".into()], local.path(), &options(), |_| {}).await;
    assert!(!again.expect("onto the file").early);
    assert!(fs::read(local.path().join("d.bin")).unwrap() == data);
    server.stop().await;
}

/// Sockets this process holds open, of every kind (the client's and the server's alike).
fn open_sockets() -> usize {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Polls `done` for up to 5 s.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_data_with_a_refused_token_creates_nothing_and_its_sockets_close() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start().await;
    let local = tempfile::tempdir().unwrap();
    fs::write(local.path().join("x.bin"), pattern(2 * MIB, 3)).unwrap();
    let before = open_sockets();
    let mut config = server.client_config();
    config.token = "not-the-token".into();
    let client = Client::start(config).await.expect("the handshake itself succeeds");
    let upload = client.upload(&[local.path().join("x.bin")], "", &options(), |_| {}).await;
    let err = upload.expect_err("a wrong token");
    assert!(err.to_string().contains("token"), "{err}");
    drop(client);
    assert!(common::listing(&server.root()).is_empty(), "nothing created");
    // The client's socket, and the server's offered ones, are all closed again.
    assert!(eventually(|| open_sockets() <= before).await, "{} > {before}", open_sockets());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_binds_a_bounded_number_of_sockets_for_unauthenticated_peers() {
    let _one = ONE_AT_A_TIME.lock().await;
    // 16 sockets an offer: four offers exhaust the 64 the server gives peers it does not know.
    let server = TestServer::start_with(|c| c.max_channels = Some(16)).await;
    let endpoint = raw_endpoint(&server, "127.0.0.1:0".parse().unwrap());
    let mut conns = Vec::new();
    let mut offers = Vec::new();
    // Eight: the places one address has before its token is checked.
    for _ in 0..8 {
        let conn = endpoint.connect(server.addr, "sluice").unwrap().await.unwrap();
        let mut recv = conn.accept_uni().await.unwrap();
        let offer: Offer = read_message(&mut recv, Duration::from_secs(10)).await.unwrap();
        assert_eq!(offer.max_channels, 16);
        offers.push(offer);
        conns.push(conn);
    }
    let with_ports: Vec<usize> = offers.iter().map(|o| o.udp_ports.len()).collect();
    println!("ports offered: {with_ports:?}");
    assert_eq!(with_ports.iter().sum::<usize>(), 64, "{with_ports:?}");
    assert!(with_ports.iter().all(|&n| n == 0 || n == 16), "{with_ports:?}");
    // Closed without a token: their sockets go back, and the next peer is offered some.
    for conn in &conns {
        conn.close(0u32.into(), b"bye");
    }
    drop(conns);
    let mut offered_again = false;
    for _ in 0..50 {
        let conn = endpoint.connect(server.addr, "sluice").unwrap().await.unwrap();
        let mut recv = conn.accept_uni().await.unwrap();
        let offer: Offer = read_message(&mut recv, Duration::from_secs(10)).await.unwrap();
        conn.close(0u32.into(), b"bye");
        if !offer.udp_ports.is_empty() {
            offered_again = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(offered_again, "the sockets of closed connections were given back");
    server.stop().await;
}
