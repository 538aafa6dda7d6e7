//! Whole transfers through the session plane and the data path, on 127.0.0.1.

mod common;

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TestServer, pattern};
use sluice::datapath::{ChannelParams, Progress};
use sluice::session::keys::{ChannelRef, ChannelSecrets, Role, SessionId};
use sluice::session::messages::{ClientMsg, ErrorCode, ServerMsg, read_message, write_message};
use sluice::session::{Client, SessionError, default_channel_config};
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
        assert_eq!(report.blake3, blake3_hex(&data));
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
        assert_eq!(report.blake3, blake3_hex(&data));
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
    assert_ne!(first.session_id(), second.session_id());
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

/// Speaks the protocol by hand to upload `data` while announcing `announced` as its BLAKE3.
async fn put_by_hand(
    server: &TestServer,
    path: &str,
    data: Vec<u8>,
    announced: String,
) -> ServerMsg {
    let (_endpoint, conn) = common::raw_connect(server).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = common::hello(common::TOKEN);
    write_message(&mut send, &hello).await.unwrap();
    let ServerMsg::Welcome { session_id, .. } = read_message(&mut recv, SECOND).await.unwrap()
    else {
        panic!("no Welcome")
    };
    let session_id = SessionId::from_hex(&session_id).unwrap();

    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let request_id = u64::from(send.id());
    let size = data.len() as u64;
    write_message(&mut send, &ClientMsg::Put { path: path.into(), size, blake3: announced })
        .await
        .unwrap();
    let ServerMsg::Ready { udp_ports } = read_message(&mut recv, SECOND).await.unwrap() else {
        panic!("no Ready")
    };
    // As many channels as the server chose (at most the 4 offered in Hello).
    assert!((1..=4).contains(&udp_ports.len()), "{udp_ports:?}");
    let sockets: Vec<_> =
        udp_ports.iter().map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let ports = sockets.iter().map(|s| s.local_addr().unwrap().port()).collect();
    write_message(&mut send, &ClientMsg::Ready { udp_ports: ports }).await.unwrap();

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
    let sender = tokio::task::spawn_blocking(move || {
        let cancel = AtomicBool::new(false);
        sluice::datapath::send_file(params, &file, 0..size, &mut |_| {}, &cancel)
    });
    let reply = read_message(&mut recv, Duration::from_secs(20)).await.unwrap();
    sender.abort();
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_with_a_wrong_hash_is_refused_as_integrity_and_not_stored() {
    let server = TestServer::start().await;
    let data = pattern(200_000, 7);
    let wrong = blake3_hex(b"something else");
    match put_by_hand(&server, "bad.bin", data.clone(), wrong).await {
        ServerMsg::Error { code: ErrorCode::Integrity, message } => {
            assert!(message.contains("bad.bin"), "{message}")
        }
        other => panic!("expected an integrity error, got {other:?}"),
    }
    // Neither the file nor its temporary is left in the root.
    assert!(common::listing(&server.root()).is_empty());

    // The same bytes with the right hash are stored: the channel was not the problem.
    let right = blake3_hex(&data);
    assert_eq!(put_by_hand(&server, "good.bin", data.clone(), right).await, ServerMsg::Verified);
    assert_eq!(fs::read(server.root().join("good.bin")).unwrap(), data);
    server.stop().await;
}
