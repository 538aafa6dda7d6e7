//! Whole transfers through the session plane and the data path, on 127.0.0.1.

use crate::common;

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TestServer, pattern};
use sluice::datapath::{ChannelParams, Progress};
use sluice::session::Overwrite;
use sluice::session::keys::{ChannelRef, ChannelSecrets, Role, SessionId};
use sluice::session::messages::{
    Answer, ErrorCode, ManifestPart, ReceiverMsg, Request, SenderMsg, read_message, write_message,
};
use sluice::session::{Client, SessionError, default_channel_config};
use sluice::tree::{Entry, EntryKind};
use sluice_proto::cc::CcKind;
use sluice_proto::crypto::Algorithm;

const SIZES: [usize; 3] = [0, 1, (1 << 20) + 1];
const SECOND: Duration = Duration::from_secs(1);

fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Records every progress report.
fn recorder() -> (Arc<Mutex<Vec<Progress>>>, impl FnMut(Progress) + Send + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    (seen, move |p| sink.lock().unwrap().push(p))
}

#[tokio::test]
async fn get_is_byte_exact_for_0_1_and_1_mib_plus_1_bytes() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    for (i, size) in SIZES.into_iter().enumerate() {
        let data = pattern(size, i as u8);
        let name = format!("file-{size}.bin");
        fs::write(server.root().join(&name), &data).unwrap();
        let target = local.path().join(&name);
        let (seen, progress) = recorder();
        let report = client.get(&name, &target, progress).await.unwrap();
        assert_eq!(fs::read(&target).unwrap(), data, "{size} bytes");
        assert_eq!(report.bytes, size as u64);
        assert_eq!(report.blake3, Some(blake3_hex(&data)));
        assert_eq!(report.channel.is_some(), size > 0);
        let last = *seen.lock().unwrap().last().expect("progress is reported");
        assert_eq!((last.bytes, last.total), (size as u64, size as u64));
    }
    // Only the final files: no temporary file is left beside them.
    let expected: Vec<String> = SIZES.iter().map(|s| format!("file-{s}.bin")).collect();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(common::listing(local.path()), expected_sorted);
    client.close().await;
    server.stop().await;
}

#[tokio::test]
async fn put_is_byte_exact_for_0_1_and_1_mib_plus_1_bytes() {
    let server = TestServer::start().await;
    fs::create_dir_all(server.root().join("in")).unwrap();
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    for (i, size) in SIZES.into_iter().enumerate() {
        let data = pattern(size, 0x40 + i as u8);
        let source = local.path().join(format!("src-{size}"));
        fs::write(&source, &data).unwrap();
        let remote = format!("in/up-{size}.bin");
        let (seen, progress) = recorder();
        let report = client.put(&source, &remote, progress).await.unwrap();
        assert_eq!(fs::read(server.root().join(&remote)).unwrap(), data, "{size} bytes");
        assert_eq!(report.blake3, Some(blake3_hex(&data)));
        assert_eq!(seen.lock().unwrap().last().map(|p| p.total), Some(size as u64));
        assert_eq!(client.stat(&remote).await.unwrap().size, size as u64);
    }
    let mut expected: Vec<String> = SIZES.iter().map(|s| format!("up-{s}.bin")).collect();
    expected.sort();
    assert_eq!(common::listing(&server.root().join("in")), expected);
    client.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_download_replaces_an_existing_file_only_when_verified() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let target = local.path().join("target");
    fs::write(&target, b"old contents").unwrap();
    let data = pattern(100_000, 3);
    fs::write(server.root().join("new"), &data).unwrap();
    client.get("new", &target, |_| {}).await.unwrap();
    assert_eq!(fs::read(&target).unwrap(), data);

    // A failed request leaves the old file alone.
    client.get("absent", &target, |_| {}).await.unwrap_err();
    assert_eq!(fs::read(&target).unwrap(), data);
    client.close().await;
    server.stop().await;
}

async fn round_trip(client: &Client, root: &Path, local: &Path, tag: u8) {
    let data = pattern(300_000 + tag as usize, tag);
    let name = format!("shared-{tag}.bin");
    fs::write(root.join(&name), &data).unwrap();
    let got = local.join(format!("got-{tag}"));
    let source = local.join(format!("src-{tag}"));
    fs::write(&source, &data).unwrap();
    let remote = format!("put-{tag}.bin");
    let (got_result, put_result) =
        tokio::join!(client.get(&name, &got, |_| {}), client.put(&source, &remote, |_| {}));
    got_result.unwrap();
    put_result.unwrap();
    assert_eq!(fs::read(&got).unwrap(), data);
    assert_eq!(fs::read(root.join(&remote)).unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_at_once_each_with_a_get_and_a_put_in_flight() {
    let server = TestServer::start().await;
    let first = server.client().await;
    let second = server.client().await;
    assert_ne!(first.session_id().await.unwrap(), second.session_id().await.unwrap());
    let local = tempfile::tempdir().unwrap();
    let root = server.root();
    tokio::join!(
        round_trip(&first, &root, local.path(), 1),
        round_trip(&second, &root, local.path(), 2),
    );
    first.close().await;
    second.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_missing_local_file_fails_before_any_request() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let err = client.put(Path::new("/nonexistent/file"), "x", |_| {}).await.unwrap_err();
    assert!(matches!(err, SessionError::Io { .. }), "{err:?}");
    assert!(common::listing(&server.root()).is_empty());
    client.close().await;
    server.stop().await;
}

/// When the hand-made client of [`put_by_hand`] sends its `Digest`.
#[derive(Debug, Clone, Copy)]
enum DigestAt {
    /// Right after `Ready`, before any data.
    BeforeData,
    /// Once the data channels have delivered everything.
    AfterData,
    /// Not at all.
    Never,
}

/// Speaks the protocol by hand to upload `data`, sending `digest` as its BLAKE3 at `at`.
async fn put_by_hand(
    server: &TestServer,
    path: &str,
    data: Vec<u8>,
    digest: String,
    at: DigestAt,
) -> ReceiverMsg {
    let (_endpoint, conn) = common::raw_connect(server).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = common::hello(common::TOKEN);
    write_message(&mut send, &hello).await.unwrap();
    let Answer::Welcome { session_id, .. } = read_message(&mut recv, SECOND).await.unwrap() else {
        panic!("no Welcome")
    };
    let session_id = SessionId::from_hex(&session_id).unwrap();

    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let request_id = u64::from(send.id());
    let size = data.len() as u64;
    let put = Request::Put {
        dest: path.into(),
        overwrite: Overwrite::Always,
        checksum: false,
        preserve: false,
        dry_run: false,
        early: false,
    };
    write_message(&mut send, &put).await.unwrap();
    let entry = Entry {
        path: path.into(),
        kind: EntryKind::File,
        size,
        mtime: 0,
        mode: 0o644,
        target: None,
        blake3: None,
    };
    let manifest = SenderMsg::Manifest(ManifestPart { entries: vec![entry], last: true });
    write_message(&mut send, &manifest).await.unwrap();
    let ReceiverMsg::Want(want) = read_message(&mut recv, SECOND).await.unwrap() else {
        panic!("no Want")
    };
    assert_eq!(want.files, vec![[0, 1]]);
    let digest = SenderMsg::Digests { blake3: vec![digest] };
    if size == 0 {
        // No byte to move: no data channels, only the digest (of nothing).
        if !matches!(at, DigestAt::Never) {
            write_message(&mut send, &digest).await.unwrap();
        }
        return read_message(&mut recv, Duration::from_secs(20)).await.unwrap();
    }
    // The receiver's data ports come right behind Want.
    let ReceiverMsg::Ready { udp_ports } = read_message(&mut recv, SECOND).await.unwrap() else {
        panic!("no Ready")
    };
    // As many channels as the server chose (at most the 4 offered in Hello).
    assert!((1..=4).contains(&udp_ports.len()), "{udp_ports:?}");
    let sockets: Vec<_> =
        udp_ports.iter().map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let ports = sockets.iter().map(|s| s.local_addr().unwrap().port()).collect();
    write_message(&mut send, &SenderMsg::Ready { udp_ports: ports, path_memory: None })
        .await
        .unwrap();
    if let DigestAt::BeforeData = at {
        write_message(&mut send, &digest).await.unwrap();
    }

    let params: Vec<ChannelParams> = sockets
        .into_iter()
        .zip(&udp_ports)
        .enumerate()
        .map(|(channel, (socket, &udp_port))| {
            let at = ChannelRef { session_id, request_id, channel: channel as u32 };
            let secrets = ChannelSecrets::derive(&conn, &at).unwrap();
            let mut config = default_channel_config();
            config.initial_dsn = secrets.initial_dsn;
            config.seed = secrets.seed;
            ChannelParams {
                config,
                keys: secrets.keys(Role::Client, Algorithm::Aes256Gcm),
                socket,
                peer: SocketAddr::new(server.addr.ip(), udp_port),
            }
        })
        .collect();
    let file = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut &file, &data).unwrap();
    // An empty range returns at once without a packet, as the server expects.
    let sender = tokio::task::spawn_blocking(move || {
        let cancel = AtomicBool::new(false);
        sluice::datapath::send_file(params, &file, 0..size, &mut |_| {}, &cancel)
    });
    if let DigestAt::AfterData = at {
        let sent = sender.await.unwrap().unwrap();
        assert_eq!(sent.bytes, size);
        write_message(&mut send, &digest).await.unwrap();
    }
    let reply = read_message(&mut recv, Duration::from_secs(20)).await.unwrap();
    match reply {
        // A file that does not hash to the digest: the server asks for the blocks that differ.
        // Every block of the file is hashed in it; this sender has no other bytes to offer.
        ReceiverMsg::Repair { files } => {
            assert_eq!(files.len(), 1, "{files:?}");
            assert_eq!(files[0].file, 0);
            assert_eq!(files[0].blocks.len() as u64, size.div_ceil(4 << 20));
            // The receiver's ports for the repair round come right behind Repair.
            let ready = read_message(&mut recv, SECOND).await.unwrap();
            assert!(matches!(ready, ReceiverMsg::Ready { .. }), "{ready:?}");
            write_message(&mut send, &SenderMsg::Repairing { blocks: Vec::new() }).await.unwrap();
            read_message(&mut recv, Duration::from_secs(20)).await.unwrap()
        }
        other => other,
    }
}

/// Expects an integrity error naming `path`, and nothing of it in the server's root.
fn assert_refused_as_integrity(reply: ReceiverMsg, path: &str, root: &Path) {
    match reply {
        ReceiverMsg::Failed { code: ErrorCode::Integrity, message } => {
            assert!(message.contains(path), "{message}")
        }
        other => panic!("expected an integrity error, got {other:?}"),
    }
    // Neither the file nor its temporary is left in the root.
    assert!(!common::listing(root).iter().any(|name| name.contains(path)), "{path} was left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_with_a_wrong_digest_is_refused_as_integrity_and_not_stored() {
    let server = TestServer::start().await;
    let data = pattern(200_000, 7);
    let wrong = blake3_hex(b"something else");
    for at in [DigestAt::BeforeData, DigestAt::AfterData] {
        let path = format!("bad-{at:?}.bin");
        let reply = put_by_hand(&server, &path, data.clone(), wrong.clone(), at).await;
        assert_refused_as_integrity(reply, &path, &server.root());
    }
    assert!(common::listing(&server.root()).is_empty());

    // The same bytes with the right digest are stored, whether it comes before the data or
    // after it: the channel was not the problem.
    let right = blake3_hex(&data);
    for at in [DigestAt::BeforeData, DigestAt::AfterData] {
        let path = format!("good-{at:?}.bin");
        let reply = put_by_hand(&server, &path, data.clone(), right.clone(), at).await;
        assert_eq!(reply, ReceiverMsg::Verified, "digest {at:?}");
        assert_eq!(fs::read(server.root().join(&path)).unwrap(), data);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_put_checks_the_digest_of_nothing() {
    let server = TestServer::start().await;
    let wrong = blake3_hex(b"x");
    let reply = put_by_hand(&server, "empty-bad", Vec::new(), wrong, DigestAt::AfterData).await;
    assert_refused_as_integrity(reply, "empty-bad", &server.root());
    let right = blake3_hex(b"");
    let reply = put_by_hand(&server, "empty", Vec::new(), right, DigestAt::BeforeData).await;
    assert_eq!(reply, ReceiverMsg::Verified);
    assert_eq!(fs::read(server.root().join("empty")).unwrap(), b"");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_digest_never_comes_fails_with_a_timeout_and_stores_nothing() {
    let wait = Duration::from_millis(300);
    let server = TestServer::start_with(|config| config.digest_timeout = Some(wait)).await;
    let data = pattern(100_000, 9);
    let digest = blake3_hex(&data);
    for data in [data, Vec::new()] {
        let reply = put_by_hand(&server, "never", data, digest.clone(), DigestAt::Never).await;
        match reply {
            ReceiverMsg::Failed { code: ErrorCode::Network, message } => {
                assert!(message.contains("Digests did not come within 0.3 s"), "{message}")
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(common::listing(&server.root()).is_empty());
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_of_a_file_changed_while_it_moves_fails_as_integrity_and_leaves_nothing() {
    let server = TestServer::start().await;
    // 8 MiB at 40 Mbit/s: the data takes about 1.7 s; the server's hash of the file, started
    // with it, takes milliseconds, so it describes the file before the change below.
    let size = 8 << 20;
    fs::write(server.root().join("moving"), pattern(size, 5)).unwrap();
    let mut config = server.client_config();
    config.channel.cc = CcKind::Fixed;
    config.channel.rate_bps = 40_000_000;
    let client = Client::connect(config).await.unwrap();
    let local = tempfile::tempdir().unwrap();
    // A quarter in, the last MiB changes: the channels read it only later.
    let source = server.root().join("moving");
    let mut changed = false;
    let change = move |p: Progress| {
        if !changed && p.bytes >= p.total / 4 && p.total > 0 {
            let file = fs::OpenOptions::new().write(true).open(&source).unwrap();
            file.write_all_at(&vec![0xA5; 1 << 20], (size - (1 << 20)) as u64).unwrap();
            changed = true;
        }
    };
    let err = client.get("moving", &local.path().join("got"), change).await.unwrap_err();
    assert!(matches!(err, SessionError::Integrity(_)), "{err:?}");
    assert!(common::listing(local.path()).is_empty());
    client.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_low_policy_is_negotiated_and_moves_files_exactly_both_ways() {
    let server = TestServer::start().await;
    let data = pattern(12 << 20, 11);
    fs::write(server.root().join("bg.bin"), &data).unwrap();
    let mut config = server.client_config();
    config.channel.cc = CcKind::Low;
    let client = Client::connect(config).await.unwrap();
    let local = tempfile::tempdir().unwrap();
    let dest = local.path().join("bg.bin");
    client.get("bg.bin", &dest, |_| {}).await.expect("download under low");
    assert!(fs::read(&dest).unwrap() == data);
    client.put(&dest, "bg2.bin", |_| {}).await.expect("upload under low");
    assert!(fs::read(server.root().join("bg2.bin")).unwrap() == data);
    server.stop().await;
}
