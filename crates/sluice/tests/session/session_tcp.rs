//! The session over TCP (issue 30) on 127.0.0.1: QUIC tunnelled over the server's TCP port and
//! the data on TCP streams, with the same messages, verification and trees as over UDP; `auto`
//! on a path where UDP gets through; and what the TCP port does with connections that are not
//! Sluice's. Contents are fixed patterns, so every run is the same.

use crate::common;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::{TestServer, pattern};
use sluice::session::{
    Client, ClientConfig, CopyOptions, SessionError, Transport, TransportChoice,
};

fn over(server: &TestServer, choice: TransportChoice) -> ClientConfig {
    let mut config = server.client_config();
    config.transport = choice;
    config
}

/// Every file under `top`, sorted, with the BLAKE3 of its bytes.
fn hashes(top: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![top.to_owned()];
    while let Some(dir) = stack.pop() {
        for child in fs::read_dir(&dir).unwrap() {
            let path = child.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(top).unwrap().to_string_lossy().into_owned();
            out.push((rel, blake3::hash(&fs::read(&path).unwrap()).to_hex().to_string()));
        }
    }
    out.sort();
    out
}

fn make_tree(top: &Path) {
    fs::create_dir_all(top.join("a/b")).unwrap();
    fs::create_dir_all(top.join("empty")).unwrap();
    for i in 0..40u8 {
        fs::write(top.join(format!("a/s{i:02}")), pattern(1000 + 97 * i as usize, i)).unwrap();
    }
    fs::write(top.join("a/b/zero"), b"").unwrap();
    fs::write(top.join("big.bin"), pattern((6 << 20) + 5, 9)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_files_and_trees_arrive_exactly_both_ways() {
    let server = TestServer::start().await;
    let client = Client::connect(over(&server, TransportChoice::Tcp)).await.unwrap();
    assert_eq!(client.transport(), Transport::Tcp);
    assert_eq!(client.transport_notice(), None, "asked for TCP: nothing to explain");
    // Streams up to the ceiling unless asked otherwise (each is the kernel's work, not a
    // core's); the sender starts with four of them carrying data and grows from there.
    let streams = client.channels().await.unwrap();
    assert_eq!(streams, sluice::session::transport::TCP_STREAMS_MAX);
    let local = tempfile::tempdir().unwrap();
    for (i, size) in [0usize, 1, (9 << 20) + 3].into_iter().enumerate() {
        let data = pattern(size, i as u8);
        let name = format!("f{size}");
        fs::write(server.root().join(&name), &data).unwrap();
        let down = local.path().join(&name);
        let report = client.get(&name, &down, |_| {}).await.unwrap();
        assert_eq!(fs::read(&down).unwrap(), data, "download of {size} bytes");
        // Too short a transfer to try more streams (a try takes two epochs of at least
        // 0.5 s, and only with the rest of the transfer longer than four).
        let carrying = report.channel.as_ref().map_or(0, |c| c.carrying);
        let most = sluice::session::transport::TCP_STREAMS.min(size.div_ceil(4 << 20) as u32);
        assert!(carrying <= most, "{carrying} streams carried {size} bytes");
        assert_eq!(report.blake3.as_deref(), Some(blake3::hash(&data).to_hex().as_str()));
        let remote = format!("up-{size}");
        client.put(&down, &remote, |_| {}).await.unwrap();
        assert_eq!(fs::read(server.root().join(&remote)).unwrap(), data, "upload of {size}");
    }
    make_tree(&server.root().join("tree"));
    let recursive = CopyOptions { recursive: true, ..CopyOptions::default() };
    let dest = local.path().join("got");
    fs::create_dir_all(&dest).unwrap();
    let report = client.download(&["tree".into()], &dest, &recursive, |_| {}).await.unwrap();
    assert_eq!(report.files, 42);
    assert_eq!(hashes(&dest.join("tree")), hashes(&server.root().join("tree")));
    assert!(dest.join("tree/empty").is_dir(), "the empty directory came too");
    fs::create_dir_all(server.root().join("back")).unwrap();
    client.upload(&[dest.join("tree")], "back", &recursive, |_| {}).await.unwrap();
    assert_eq!(hashes(&server.root().join("back/tree")), hashes(&dest.join("tree")));
    client.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_count_the_user_fixed_is_what_carries_data() {
    let server = TestServer::start().await;
    let mut config = over(&server, TransportChoice::Tcp);
    config.channels = Some(3);
    let client = Client::connect(config).await.unwrap();
    assert_eq!(client.channels().await.unwrap(), 3);
    // Sixteen chunks: each of the three streams takes one at the start.
    let data = pattern(64 << 20, 3);
    fs::write(server.root().join("big"), &data).unwrap();
    let local = tempfile::tempdir().unwrap();
    let report = client.get("big", &local.path().join("big"), |_| {}).await.unwrap();
    assert_eq!(fs::read(local.path().join("big")).unwrap(), data);
    let channel = report.channel.unwrap();
    assert_eq!((channel.channels, channel.carrying), (3, 3), "{channel:?}");
    client.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_takes_udp_where_it_gets_through_and_says_nothing() {
    let server = TestServer::start().await;
    let client = Client::connect(over(&server, TransportChoice::Auto)).await.unwrap();
    assert_eq!(client.transport(), Transport::Udp);
    assert_eq!(client.transport_notice(), None);
    let data = pattern(300_000, 7);
    fs::write(server.root().join("x"), &data).unwrap();
    let local = tempfile::tempdir().unwrap();
    client.get("x", &local.path().join("x"), |_| {}).await.unwrap();
    assert_eq!(fs::read(local.path().join("x")).unwrap(), data);
    client.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tcp_refuses_tcp_clients_and_auto_still_connects() {
    let server = TestServer::start_with(|config| config.tcp = false).await;
    let err = Client::connect(over(&server, TransportChoice::Tcp)).await.unwrap_err();
    println!("tcp to a server without it: {err}");
    assert!(matches!(&err, SessionError::Network(m) if m.contains("over TCP")), "{err}");
    let client = Client::connect(over(&server, TransportChoice::Auto)).await.unwrap();
    assert_eq!(client.transport(), Transport::Udp);
    client.close().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_and_forged_streams_on_the_tcp_port_change_nothing() {
    let server = TestServer::start().await;
    let addr = server.addr;
    // Not Sluice at all; a preface and nothing more; a data stream whose hello is forged
    // (a session id and tag no session made); a session preface followed by junk frames.
    let mut forged = b"SLUICED1".to_vec();
    forged.extend_from_slice(&[0x5a; 60]);
    let mut junk_session = b"SLUICEQ1".to_vec();
    junk_session.extend_from_slice(&[0x00, 0x05, 1, 2, 3, 4, 5, 0xff, 0xff]);
    let strangers: [&[u8]; 4] = [b"GET / HTTP/1.1\r\n\r\n", b"SLUICEQ1", &forged, &junk_session];
    let mut held = Vec::new();
    for bytes in strangers {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.write_all(bytes).unwrap();
        held.push(stream);
    }
    // The server goes on serving, over TCP and over UDP.
    let data = pattern(2 << 20, 3);
    fs::write(server.root().join("y"), &data).unwrap();
    let local = tempfile::tempdir().unwrap();
    for choice in [TransportChoice::Tcp, TransportChoice::Udp] {
        let client = Client::connect(over(&server, choice)).await.unwrap();
        let target = local.path().join(format!("{choice:?}"));
        client.get("y", &target, |_| {}).await.unwrap();
        assert_eq!(fs::read(&target).unwrap(), data, "{choice:?}");
        client.close().await;
    }
    drop(held);
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.stop().await;
}
