//! Client trust: pins, first contact, changed fingerprints.

use crate::common;

use std::fs;

use common::TestServer;
use sluice::session::known_hosts::{HostDecision, KnownHosts, host_key};
use sluice::session::{Client, Fingerprint, HostKeyError, SessionError, TrustPolicy};

fn other_fingerprint() -> Fingerprint {
    Fingerprint::of_der(b"not the server's certificate")
}

#[tokio::test]
async fn accept_new_pins_and_writes_then_known_only_trusts() {
    let server = TestServer::start().await;
    let mut config = server.client_config();
    config.trust = TrustPolicy::AcceptNew;
    let client = Client::connect(config.clone()).await.unwrap();
    assert_eq!(client.host_decision(), HostDecision::New);
    assert_eq!(client.server_fingerprint(), &server.fingerprint);
    client.close().await;

    let text = fs::read_to_string(server.known_hosts()).unwrap();
    let entry = format!("127.0.0.1:{} {}\n", server.addr.port(), server.fingerprint);
    assert_eq!(text, entry);

    // Known now: trusted without a new line, under either policy.
    for trust in [TrustPolicy::KnownOnly, TrustPolicy::AcceptNew] {
        config.trust = trust;
        let client = Client::connect(config.clone()).await.unwrap();
        assert_eq!(client.host_decision(), HostDecision::Known);
        client.close().await;
    }
    assert_eq!(fs::read_to_string(server.known_hosts()).unwrap(), entry);
    server.stop().await;
}

#[tokio::test]
async fn explicit_pin_is_trusted_without_writing() {
    let server = TestServer::start().await;
    let client = server.client().await;
    assert_eq!(client.host_decision(), HostDecision::Pinned);
    client.close().await;
    assert!(!server.known_hosts().exists());
    server.stop().await;
}

#[tokio::test]
async fn pinned_wrong_fingerprint_is_refused() {
    let server = TestServer::start().await;
    let mut config = server.client_config();
    config.trust = TrustPolicy::Pinned(other_fingerprint());
    match Client::connect(config).await {
        Err(SessionError::HostKey(HostKeyError::PinMismatch { pinned, presented, .. })) => {
            assert_eq!(pinned, other_fingerprint());
            assert_eq!(presented, server.fingerprint);
        }
        other => panic!("expected a pin mismatch, got {other:?}"),
    }
    assert!(!server.known_hosts().exists());
    server.stop().await;
}

#[tokio::test]
async fn changed_fingerprint_is_refused_naming_the_file_and_line_under_every_policy() {
    let server = TestServer::start().await;
    let known = server.known_hosts();
    fs::create_dir_all(known.parent().unwrap()).unwrap();
    let host = format!("127.0.0.1:{}", server.addr.port());
    let stale = other_fingerprint();
    let text = format!("# pinned hosts\n\nelsewhere:1 {}\n{host} {stale}\n", server.fingerprint);
    fs::write(&known, &text).unwrap();

    let policies = [
        TrustPolicy::AcceptNew,
        TrustPolicy::KnownOnly,
        TrustPolicy::Pinned(server.fingerprint.clone()),
    ];
    for trust in policies {
        let mut config = server.client_config();
        config.trust = trust.clone();
        let err = Client::connect(config).await.expect_err("a changed key must be refused");
        let message = err.to_string();
        match err {
            SessionError::HostKey(HostKeyError::Changed {
                file, line, known, presented, ..
            }) => {
                assert_eq!(file, server.known_hosts());
                assert_eq!(line, 4, "{trust:?}");
                assert_eq!(known, stale.to_string());
                assert_eq!(presented, server.fingerprint);
            }
            other => panic!("{trust:?}: expected a changed key, got {other:?}"),
        }
        assert!(message.contains(&server.known_hosts().display().to_string()), "{message}");
        assert!(message.contains("line 4"), "{message}");
    }
    // The file is left as it was.
    assert_eq!(fs::read_to_string(&known).unwrap(), text);
    server.stop().await;
}

#[tokio::test]
async fn known_only_without_a_pin_is_refused_with_the_options() {
    let server = TestServer::start().await;
    let mut config = server.client_config();
    config.trust = TrustPolicy::KnownOnly;
    let err = Client::connect(config).await.expect_err("unknown host");
    assert!(matches!(err, SessionError::HostKey(HostKeyError::Unknown { .. })), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("--accept-new-host"), "{message}");
    assert!(message.contains("--fingerprint"), "{message}");
    assert!(message.contains(server.fingerprint.as_str()), "{message}");
    assert!(!server.known_hosts().exists());
    server.stop().await;
}

#[test]
fn known_hosts_file_parsing_and_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("known_hosts");
    let a = Fingerprint::of_der(b"a");
    let b = Fingerprint::of_der(b"b");
    fs::write(
        &path,
        format!(
            "# comment\n\n  host-a:22 {a}  \nmalformed line with four words\nhost-c:1 garbage\n"
        ),
    )
    .unwrap();
    let known = KnownHosts::load(&path).unwrap();
    assert_eq!(known.get("host-a:22"), Some((a.as_str(), 3)));
    assert_eq!(known.get("host-b:22"), None);

    assert_eq!(known.decide(&TrustPolicy::KnownOnly, "host-a:22", &a), Ok(HostDecision::Known));
    assert!(matches!(
        known.decide(&TrustPolicy::AcceptNew, "host-a:22", &b),
        Err(HostKeyError::Changed { line: 3, .. })
    ));
    // An entry that does not parse still pins its host: nothing matches it.
    assert!(matches!(
        known.decide(&TrustPolicy::AcceptNew, "host-c:1", &a),
        Err(HostKeyError::Changed { line: 5, .. })
    ));
    assert_eq!(known.decide(&TrustPolicy::AcceptNew, "host-b:22", &b), Ok(HostDecision::New));
    assert_eq!(
        known.decide(&TrustPolicy::Pinned(b.clone()), "host-b:22", &b),
        Ok(HostDecision::Pinned)
    );
    assert!(matches!(
        known.decide(&TrustPolicy::KnownOnly, "host-b:22", &b),
        Err(HostKeyError::Unknown { .. })
    ));

    KnownHosts::append(&path, "host-b:22", &b).unwrap();
    let known = KnownHosts::load(&path).unwrap();
    assert_eq!(known.decide(&TrustPolicy::KnownOnly, "host-b:22", &b), Ok(HostDecision::Known));

    // A missing file is empty.
    let none = KnownHosts::load(&dir.path().join("absent")).unwrap();
    assert_eq!(none.get("host-a:22"), None);
}

#[test]
fn host_keys_bracket_ipv6_literals() {
    assert_eq!(host_key("example.org", 4433), "example.org:4433");
    assert_eq!(host_key("127.0.0.1", 1), "127.0.0.1:1");
    assert_eq!(host_key("::1", 7), "[::1]:7");
}
