//! A one-shot server (`Credentials::OneTime`, what `sluice cp --ssh` starts): a new identity, one
//! token, one session; it stops when that session ends, and fails when no client came in time.

use crate::common;

use std::time::Duration;

use sluice::session::{Client, ClientConfig, Credentials, Server, SessionError, TrustPolicy};

const ONE_TIME: &str = "one-time-token-5d1c";

fn once_config(dir: &std::path::Path, wait: Duration) -> sluice::session::ServerConfig {
    let mut config = common::server_config(dir);
    config.credentials = Credentials::OneTime { token: ONE_TIME.into(), wait };
    config
}

#[tokio::test]
async fn a_one_time_server_admits_one_session_and_stops_when_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let config = once_config(dir.path(), Duration::from_secs(30));
    std::fs::write(config.root.join("a.txt"), b"hello").unwrap();
    let server = Server::bind(config).unwrap();
    // Nothing was written for the identity: it lives in memory only.
    assert!(!common::state_dir(dir.path()).exists());
    let (addr, fingerprint) = (server.local_addr(), server.fingerprint().clone());
    let running = tokio::spawn(server.run(std::future::pending()));
    let client_config = |token: &str| {
        ClientConfig::new(
            addr,
            "127.0.0.1",
            token,
            dir.path().join("known_hosts"),
            TrustPolicy::Pinned(fingerprint.clone()),
        )
    };

    // A wrong token is refused and does not use up the server's session; the daemon's token
    // file means nothing here.
    for token in ["not-it", common::TOKEN] {
        let err = Client::connect(client_config(token)).await.expect_err("refused");
        assert!(matches!(err, SessionError::Auth(_)), "{token}: {err:?}");
    }
    let first = Client::connect(client_config(ONE_TIME)).await.expect("the first client");
    assert_eq!(first.stat("a.txt").await.unwrap().size, 5);

    // The token admits no second session, even while the first is open.
    match Client::connect(client_config(ONE_TIME)).await {
        Err(SessionError::Auth(message)) => assert!(message.contains("one-shot"), "{message}"),
        other => panic!("a second session must be refused, got {:?}", other.map(|_| ())),
    }
    assert!(!running.is_finished(), "the server stopped while its session was open");

    first.close().await;
    let stopped = tokio::time::timeout(Duration::from_secs(10), running).await;
    stopped.expect("the server stops when its session ends").unwrap().unwrap();
}

#[tokio::test]
async fn a_one_time_server_fails_when_no_client_comes_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::bind(once_config(dir.path(), Duration::from_millis(300))).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), server.run(std::future::pending()))
        .await
        .expect("the server gives up by itself");
    match result {
        Err(SessionError::Network(message)) => {
            assert!(message.contains("no client came"), "{message}")
        }
        other => panic!("expected a timeout error, got {other:?}"),
    }
}
