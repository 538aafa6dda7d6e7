//! A download's end: the client returns once its `Verified` is written, without waiting a round
//! trip for the server's end of the request, and its close repeats the verdict, so the server
//! hears it even when the message was still on its way.

use crate::common;

use std::time::Duration;

use common::{TestServer, pattern};
use sluice::session::messages::{
    Answer, ManifestPart, ReceiverMsg, Request, SenderMsg, Want, read_message, write_message,
};
use sluice::session::{CopyOptions, Links};

const SECOND: Duration = Duration::from_secs(1);

/// One series' value in the server's metrics.
fn metric(server: &TestServer, series: &str) -> u64 {
    let text = server.metrics.render();
    let line = text.lines().find(|l| l.rsplit_once(' ').is_some_and(|(s, _)| s == series));
    let line = line.unwrap_or_else(|| panic!("no {series} in\n{text}"));
    line.rsplit_once(' ').unwrap().1.parse().unwrap()
}

/// Waits (at most 10 s) until the server has ended every session: their requests are over.
async fn sessions_ended(server: &TestServer) {
    for _ in 0..200 {
        if metric(server, "sluice_sessions_active") == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("a session is still open:\n{}", server.metrics.render());
}

/// A download of an empty file by hand, up to the server's `Digests`; then the connection is
/// closed with `code` and no answer written.
async fn download_then_close(server: &TestServer, code: u32) {
    let (endpoint, conn) = common::raw_connect(server).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    write_message(&mut send, &common::hello(common::TOKEN)).await.unwrap();
    let Answer::Welcome { .. } = read_message(&mut recv, SECOND).await.unwrap() else {
        panic!("no Welcome")
    };
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let get = Request::Get {
        paths: vec!["empty".into()],
        recursive: false,
        links: Links::default(),
        checksum: false,
        compress: None,
        udp_ports: vec![],
    };
    write_message(&mut send, &get).await.unwrap();
    let SenderMsg::Manifest(ManifestPart { entries, last: true }) =
        read_message(&mut recv, SECOND).await.unwrap()
    else {
        panic!("no whole manifest")
    };
    assert_eq!(entries.len(), 1);
    let want = Want {
        files: vec![[0, 1]],
        replaced: 0,
        kept: 0,
        resume: vec![],
        dry_run: false,
        early: false,
    };
    write_message(&mut send, &ReceiverMsg::Want(want)).await.unwrap();
    // No byte moves: the digest (of nothing) comes next.
    let SenderMsg::Digests { blake3 } = read_message(&mut recv, SECOND).await.unwrap() else {
        panic!("no Digests")
    };
    assert_eq!(blake3, vec![blake3::hash(b"").to_hex().to_string()]);
    conn.close(code.into(), b"closing");
    endpoint.wait_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_that_says_verified_answers_the_download_and_a_plain_one_does_not() {
    let server = TestServer::start().await;
    std::fs::write(server.root().join("empty"), b"").unwrap();
    let failed = |s: &TestServer| metric(s, "sluice_request_errors_total{class=\"network\"}");

    // The close with code 4 (VERIFIED) is the answer: the request ends without an error.
    download_then_close(&server, 4).await;
    sessions_ended(&server).await;
    assert_eq!(metric(&server, "sluice_transfers_total{direction=\"get\"}"), 1);
    assert_eq!(failed(&server), 0, "{}", server.metrics.render());

    // The plain close (code 0, DONE) says nothing of the download: the server's request fails
    // for want of an answer.
    download_then_close(&server, 0).await;
    sessions_ended(&server).await;
    assert_eq!(metric(&server, "sluice_transfers_total{direction=\"get\"}"), 2);
    assert_eq!(failed(&server), 1, "{}", server.metrics.render());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_returns_at_its_verdict_and_the_server_hears_it() {
    let server = TestServer::start().await;
    let data = pattern((3 << 20) + 7, 11);
    std::fs::write(server.root().join("f.bin"), &data).unwrap();
    let dest = tempfile::tempdir().unwrap();
    let client = server.client().await;
    let report = client
        .download(&["f.bin".into()], dest.path(), &CopyOptions::default(), |_| {})
        .await
        .unwrap();
    assert_eq!(std::fs::read(dest.path().join("f.bin")).unwrap(), data);
    // The channels' linger was ended, not failed: their report is there.
    let channel = report.channel.expect("the data channels' report");
    assert_eq!(channel.bytes, data.len() as u64);
    client.close().await;
    sessions_ended(&server).await;
    // The server counted the bytes only once the client's verdict came.
    assert_eq!(metric(&server, "sluice_file_bytes_total{direction=\"sent\"}"), data.len() as u64);
    assert_eq!(metric(&server, "sluice_request_errors_total{class=\"network\"}"), 0);
    server.stop().await;
}
