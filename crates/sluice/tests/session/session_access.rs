//! Access control: what each token of the token file may do (rights), where (its root), how
//! many transfers at once and how fast; a token file that grants something impossible is
//! refused at start, naming the line or token.

use crate::common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{TestServer, pattern, write_private};
use sluice::session::{Client, CopyOptions, Credentials, Server, SessionError};

const FULL: &str = "full-token-0a1b";
const READER: &str = "reader-token-2c3d";
const DROPBOX: &str = "dropbox-token-4e5f";
const SLOW: &str = "slow-token-6a7b";
const PACED: &str = "paced-token-8c9d";

/// A server whose token file grants: everything, read and list, write into `incoming` only, and
/// one 40 Mbit/s transfer at a time within `projects`.
async fn server() -> TestServer {
    TestServer::start_with(|config| {
        let Credentials::Stored { tokens_file, .. } = &config.credentials else { unreachable!() };
        write_private(
            tokens_file,
            &format!(
                "{FULL}\n{READER} rights=read,list\n{DROPBOX} rights=write root=incoming\n\
                 {SLOW} root=projects transfers=1 rate=40Mbit\n{PACED} rate=40Mbit\n"
            ),
        );
        for dir in ["incoming", "projects"] {
            fs::create_dir_all(config.root.join(dir)).unwrap();
        }
        fs::write(config.root.join("secret.txt"), pattern(1000, 1)).unwrap();
        fs::write(config.root.join("projects/big.bin"), pattern(8 << 20, 2)).unwrap();
    })
    .await
}

async fn client(server: &TestServer, token: &str) -> Client {
    let mut config = server.client_config();
    config.token = token.into();
    Client::connect(config).await.expect("the token is accepted")
}

async fn download(client: &Client, path: &str, dest: &Path) -> Result<(), SessionError> {
    let options =
        CopyOptions { overwrite: sluice::session::Overwrite::Always, ..Default::default() };
    client.download(&[path.to_owned()], dest, &options, |_| {}).await.map(|_| ())
}

async fn upload(client: &Client, src: &Path, dest: &str) -> Result<(), SessionError> {
    let options = CopyOptions::default();
    client.upload(&[src.to_owned()], dest, &options, |_| {}).await.map(|_| ())
}

fn refused(result: Result<(), SessionError>, says: &str) {
    match result {
        Err(SessionError::Refused(message)) => assert!(message.contains(says), "{message}"),
        other => panic!("expected a refusal saying {says:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_read_only_token_reads_and_lists_but_cannot_write() {
    let server = server().await;
    let local = tempfile::tempdir().unwrap();
    let reader = client(&server, READER).await;
    download(&reader, "secret.txt", &local.path().join("s.txt")).await.unwrap();
    assert_eq!(fs::read(local.path().join("s.txt")).unwrap(), pattern(1000, 1));
    assert!(reader.list("projects").await.is_ok());
    fs::write(local.path().join("new.txt"), b"new").unwrap();
    refused(upload(&reader, &local.path().join("new.txt"), "new.txt").await, "may not write");
    assert!(!server.root().join("new.txt").exists());
    reader.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_write_only_token_with_a_root_drops_files_there_and_sees_nothing_else() {
    let server = server().await;
    let local = tempfile::tempdir().unwrap();
    fs::write(local.path().join("report.txt"), pattern(5000, 3)).unwrap();
    let dropbox = client(&server, DROPBOX).await;
    upload(&dropbox, &local.path().join("report.txt"), "report.txt").await.unwrap();
    assert_eq!(fs::read(server.root().join("incoming/report.txt")).unwrap(), pattern(5000, 3));
    assert!(!server.root().join("report.txt").exists());
    refused(download(&dropbox, "report.txt", &local.path().join("r")).await, "may not read");
    match dropbox.list("").await {
        Err(SessionError::Refused(message)) => assert!(message.contains("may not list")),
        other => panic!("listing must be refused, got {:?}", other.map(|_| ())),
    }
    match dropbox.stat("report.txt").await {
        Err(SessionError::Refused(message)) => assert!(message.contains("may not look")),
        other => panic!("stat must be refused, got {other:?}"),
    }
    // Its root is its world: `..` cannot climb out of it.
    let escape = upload(&dropbox, &local.path().join("report.txt"), "../report.txt").await;
    assert!(matches!(escape, Err(SessionError::Refused(_))), "{escape:?}");
    assert!(!server.root().join("report.txt").exists());
    dropbox.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_token_root_confines_reads_and_its_limits_hold() {
    let server = server().await;
    let local = tempfile::tempdir().unwrap();
    let slow = client(&server, SLOW).await;
    // Paths are under its root; the served directory's other files are out of reach.
    assert_eq!(slow.stat("big.bin").await.unwrap().size, 8 << 20);
    let outside = download(&slow, "../secret.txt", &local.path().join("s")).await;
    assert!(matches!(outside, Err(SessionError::Refused(_))), "{outside:?}");
    assert!(matches!(slow.stat("secret.txt").await, Err(SessionError::NotFound(_))));

    // One transfer at a time: a second, from another session with the same token, is busy
    // while the first runs (at 40 Mbit/s, 8 MiB takes more than a second).
    let first = tokio::spawn({
        let config = {
            let mut c = server.client_config();
            c.token = SLOW.into();
            c
        };
        let dest = local.path().join("first.bin");
        async move {
            let client = Client::connect(config).await.unwrap();
            let result = download(&client, "big.bin", &dest).await;
            client.close().await;
            result
        }
    });
    // The first holds the token's place once its temporary file exists.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !common::listing(local.path()).iter().any(|n| n.starts_with(".first.bin.sluice-part")) {
        assert!(!first.is_finished(), "the first transfer ended before it was seen running");
        assert!(Instant::now() < deadline, "the first transfer did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match download(&slow, "big.bin", &local.path().join("second.bin")).await {
        Err(SessionError::Busy(message)) => {
            assert!(message.contains("this token's 1 transfers"), "{message}")
        }
        other => panic!("a second transfer must be busy, got {other:?}"),
    }
    first.await.unwrap().unwrap();
    assert_eq!(fs::read(local.path().join("first.bin")).unwrap(), pattern(8 << 20, 2));
    // Once the first ended, the token's place is free again.
    download(&slow, "big.bin", &local.path().join("third.bin")).await.unwrap();
    slow.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_token_rate_caps_what_the_session_negotiates() {
    use sluice::session::messages::{Answer, read_message, write_message};
    let server = server().await;
    for (token, offered, expected) in
        [(SLOW, 0, 40_000_000), (SLOW, 100_000_000, 40_000_000), (SLOW, 10_000_000, 10_000_000)]
    {
        let (_endpoint, conn) = common::raw_connect(&server).await;
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        let mut hello = common::hello(token);
        if let sluice::session::messages::Request::Hello { spec, .. } = &mut hello {
            spec.rate_bps = offered;
        }
        write_message(&mut send, &hello).await.unwrap();
        match read_message::<_, Answer>(&mut recv, Duration::from_secs(5)).await.unwrap() {
            Answer::Welcome { spec, .. } => assert_eq!(spec.rate_bps, expected, "{offered}"),
            other => panic!("expected Welcome, got {other:?}"),
        }
    }
    // A token without a rate leaves the client's choice alone.
    let full = client(&server, FULL).await;
    full.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_token_file_granting_the_impossible_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::server_config(dir.path());
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), config.root.join("link")).unwrap();
    fs::write(config.root.join("file.txt"), b"x").unwrap();
    let cases = [
        ("t1 root=missing", "cannot be opened"),
        ("t1 root=link", "leads outside the served directory"),
        ("t1 root=file.txt", "is not a directory"),
        ("t1\nt2 root=../x", "line 2: root \"../x\""),
        ("t1 rights=all", "line 1: unknown right \"all\""),
    ];
    for (text, says) in cases {
        write_private(&common::tokens_file(dir.path()), text);
        match Server::bind(config.clone()) {
            Err(SessionError::Config(message)) => {
                assert!(message.contains(says), "{text:?}: {message}");
                assert!(!message.contains("t1 ") && !message.contains("t2 "), "{message}");
            }
            other => panic!("{text:?} must be refused, got {:?}", other.map(|_| ())),
        }
    }
}

#[tokio::test]
async fn one_session_runs_at_most_four_transfers_at_once() {
    use sluice::session::server::MAX_TRANSFERS_PER_SESSION;
    let server = server().await;
    let local = tempfile::tempdir().unwrap();
    let paced = std::sync::Arc::new(client(&server, PACED).await);
    let mut running = Vec::new();
    for i in 0..MAX_TRANSFERS_PER_SESSION {
        let (client, dest) = (paced.clone(), local.path().join(format!("d{i}.bin")));
        running
            .push(tokio::spawn(async move { download(&client, "projects/big.bin", &dest).await }));
    }
    // All four hold their places once their temporary files exist.
    let deadline = Instant::now() + Duration::from_secs(20);
    while common::listing(local.path()).iter().filter(|n| n.contains(".sluice-part")).count()
        < MAX_TRANSFERS_PER_SESSION
    {
        assert!(running.iter().all(|t| !t.is_finished()), "a transfer ended before all began");
        assert!(Instant::now() < deadline, "the transfers did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match download(&paced, "secret.txt", &local.path().join("fifth.txt")).await {
        Err(SessionError::Busy(message)) => {
            assert!(message.contains("this session runs 4 transfers"), "{message}")
        }
        other => panic!("a fifth transfer must be busy, got {other:?}"),
    }
    // Another session of the same token is not held up by this one.
    let other = client(&server, PACED).await;
    download(&other, "secret.txt", &local.path().join("other.txt")).await.unwrap();
    other.close().await;
    for task in running {
        task.await.unwrap().unwrap();
    }
    server.stop().await;
}
