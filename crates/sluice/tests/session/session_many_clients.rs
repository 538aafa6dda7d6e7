//! Many clients at once from one host, as a parallel script starts them: every one is served
//! (none turned away that could have waited), and a server at its session limit is reported
//! as busy.

#![allow(clippy::print_stdout)] // tests print their counts

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::{TestServer, pattern};
use sluice::session::server::{MAX_CONNECTIONS, MAX_UNAUTHENTICATED_PER_IP};
use sluice::session::{BusyRetry, Client, Metrics, SessionError};

/// Uploads started together.
const CLIENTS: usize = 64;
/// Bytes of each upload.
const SIZE: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_uploads_started_together_all_complete_verified() {
    let server = TestServer::start().await;
    let sources = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = (0..CLIENTS)
        .map(|i| {
            let path = sources.path().join(format!("f{i}.bin"));
            std::fs::write(&path, pattern(SIZE, i as u8)).unwrap();
            path
        })
        .collect();

    // Each its own client with its own QUIC endpoint, as separate processes would be.
    let mut uploads = tokio::task::JoinSet::new();
    for (i, file) in files.iter().enumerate() {
        let mut config = server.client_config();
        config.channels = Some(1);
        let file = file.clone();
        uploads.spawn(async move {
            let client = Client::connect(config).await?;
            let uploaded = client.put(&file, &format!("f{i}.bin"), |_| {}).await;
            client.close().await;
            uploaded.map(|_| i)
        });
    }
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut done = 0;
    while let Some(result) = uploads.join_next().await {
        match result.unwrap() {
            Ok(_) => done += 1,
            Err(err) => *failures.entry(kind(&err)).or_default() += 1,
        }
    }
    // Connections the server turned away (each one a client's retry after a wait).
    let refused = refused(&server.metrics);
    println!("{done} of {CLIENTS} uploads completed; failures: {failures:?}; refused {refused}");
    assert!(failures.is_empty(), "{} of {CLIENTS} uploads failed: {failures:?}", CLIENTS - done);
    for i in 0..CLIENTS {
        let stored = std::fs::read(server.root().join(format!("f{i}.bin"))).unwrap();
        assert!(stored == pattern(SIZE, i as u8), "f{i}.bin differs from what was sent");
    }
    server.stop().await;
}

/// A connection past its address's places, while they turn over, waits for one instead of
/// being turned away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_its_address_places_waits_for_one() {
    let server = TestServer::start().await;
    std::fs::write(server.root().join("a.txt"), b"here").unwrap();
    // Connections that hold all the places of 127.0.0.1 (they never send `Hello`).
    let silent = common::raw_endpoint(&server, "127.0.0.1:0".parse().unwrap());
    let mut held = Vec::new();
    for _ in 0..MAX_UNAUTHENTICATED_PER_IP {
        held.push(silent.connect(server.addr, "sluice").unwrap().await.unwrap());
    }
    // A client that would give up at the first refusal.
    let mut config = server.client_config();
    config.busy_retry = BusyRetry::ONCE;
    let waiting = tokio::spawn(Client::connect(config));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "answered before a place came free: {:?}", waiting.await);
    // One place comes back: the waiting client takes it.
    held.pop().unwrap().close(0u32.into(), b"bye");
    let client = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting client is set up once a place is free")
        .unwrap()
        .expect("the waiting client is served, not refused");
    assert_eq!(client.stat("a.txt").await.unwrap().size, 4);
    assert_eq!(refused(&server.metrics), 0, "nothing was turned away");
    client.close().await;
    server.stop().await;
}

/// A server serving all the sessions it may is reported as busy, after the client tried again
/// for its retry budget; a client still trying gets in when a session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_at_its_session_limit_is_reported_busy() {
    let server = TestServer::start().await;
    let mut sessions = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        sessions.push(server.client().await);
    }
    let seed = 0x5E55_1045;
    println!("seed {seed:#x}");
    let mut config = server.client_config();
    config.busy_retry = BusyRetry {
        first_wait: Duration::from_millis(20),
        max_wait: Duration::from_millis(100),
        budget: Duration::from_millis(500),
        seed: Some(seed),
    };
    let err = Client::connect(config.clone()).await.expect_err("the server is full");
    println!("{err}");
    assert!(matches!(err, SessionError::Busy(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with("busy: the server "), "{message}");
    assert!(message.contains("turned the connection away") && message.contains(" times in "));
    let turned_away = refused(&server.metrics);
    assert!(turned_away >= 2, "the client tried again: {turned_away} refusals");

    // A client still trying when a session ends gets its place.
    config.busy_retry.budget = Duration::from_secs(20);
    let trying = tokio::spawn(Client::connect(config));
    tokio::time::sleep(Duration::from_millis(300)).await;
    sessions.pop().unwrap().close().await;
    let client = tokio::time::timeout(Duration::from_secs(25), trying)
        .await
        .expect("the trying client ends within its budget")
        .unwrap()
        .expect("the trying client gets the place that came free");
    assert!(refused(&server.metrics) > turned_away, "it was turned away before it got in");
    client.close().await;
    for session in sessions {
        session.close().await;
    }
    server.stop().await;
}

/// Connections the server turned away or refused, so far.
fn refused(metrics: &Metrics) -> u64 {
    let rendered = metrics.render();
    let line = rendered.lines().find(|l| l.starts_with("sluice_sessions_refused_total "));
    line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).expect("the refusals counter")
}

/// The class and message of `err`, for counting.
fn kind(err: &SessionError) -> String {
    let class = match err {
        SessionError::Busy(_) => "busy",
        SessionError::Network(_) => "network",
        SessionError::Auth(_) => "auth",
        SessionError::Protocol(_) => "protocol",
        _ => "other",
    };
    format!("{class}: {err}")
}
