//! Authentication: the token file, refusals, and that an unauthenticated session gets nothing.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{TOKEN, TestServer};
use sluice::session::messages::{Answer, ErrorCode, Request, read_message, write_message};
use sluice::session::tokens::TokenSet;
use sluice::session::{Client, Server, SessionError};

#[tokio::test]
async fn wrong_token_is_refused_with_an_auth_error() {
    let server = TestServer::start().await;
    let mut config = server.client_config();
    config.token = "not-the-token".into();
    let err = Client::connect(config).await.expect_err("a wrong token must be refused");
    assert!(matches!(err, SessionError::Auth(_)), "{err:?}");
    server.stop().await;
}

#[tokio::test]
async fn missing_token_is_refused_with_an_auth_error() {
    let server = TestServer::start().await;
    for token in ["", "   ", "# test tokens"] {
        let mut config = server.client_config();
        config.token = token.into();
        let err = Client::connect(config).await.expect_err("no token, no session");
        assert!(matches!(err, SessionError::Auth(_)), "{token:?}: {err:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_right_token_opens_a_session() {
    let server = TestServer::start_with(|c| c.max_channels = Some(3)).await;
    // The client offers one per core by default; the server caps at 3.
    let client = server.client().await;
    assert_eq!(client.channels().await.unwrap(), sluice::session::auto_channels().min(3));
    client.close().await;
    // An explicit offer above the server's cap gets the cap; below it, the offer.
    for (offer, granted) in [(5, 3), (2, 2)] {
        let mut config = server.client_config();
        config.channels = Some(offer);
        let client = sluice::session::Client::connect(config).await.unwrap();
        assert_eq!(client.channels().await.unwrap(), granted, "offered {offer}");
        client.close().await;
    }
    server.stop().await;
}

#[tokio::test]
async fn a_started_session_refuses_a_wrong_token_at_its_first_request() {
    // `Client::start` sends the request behind the token without waiting for the answer: the
    // refusal is the request's error, whatever the request (one that writes a manifest too),
    // and nothing reaches the server's root.
    let server = TestServer::start().await;
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("up.bin");
    fs::write(&source, common::pattern(200_000, 7)).unwrap();
    for request in ["stat", "list", "get", "put"] {
        let mut config = server.client_config();
        config.token = "not-the-token".into();
        let client = Client::start(config).await.expect("nothing is refused before an answer");
        let err = match request {
            "stat" => client.stat("secret.txt").await.map(|_| ()),
            "list" => client.list("").await.map(|_| ()),
            "get" => client.get("secret.txt", &local.path().join("got"), |_| {}).await.map(|_| ()),
            _ => client.put(&source, "up.bin", |_| {}).await.map(|_| ()),
        }
        .expect_err("a wrong token must be refused");
        assert!(matches!(err, SessionError::Auth(_)), "{request}: {err:?}");
        let err = client.ready().await.expect_err("no session");
        assert!(matches!(err, SessionError::Auth(_)), "{request}: {err:?}");
        assert!(!server.root().join("up.bin").exists(), "{request}");
        assert!(!local.path().join("got").exists(), "{request}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_started_session_runs_requests_sent_before_the_answer() {
    let server = TestServer::start_with(|c| c.max_channels = Some(2)).await;
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("up.bin");
    let data = common::pattern(3_000_000, 11);
    fs::write(&source, &data).unwrap();
    let mut config = server.client_config();
    config.channels = Some(3);
    let client = Client::start(config).await.unwrap();
    // Both requests leave before the server's Welcome can have come back.
    let (put, stat) = tokio::join!(client.put(&source, "up.bin", |_| {}), client.stat("up.bin"),);
    put.unwrap();
    // The stat ran beside the upload: it saw the file, or not yet.
    match stat {
        Ok(_) | Err(SessionError::NotFound(_)) => {}
        Err(other) => panic!("stat: {other:?}"),
    }
    assert_eq!(fs::read(server.root().join("up.bin")).unwrap(), data);
    assert_eq!(client.channels().await.unwrap(), 2);
    client.ready().await.unwrap();
    client.close().await;
    server.stop().await;
}

/// Sends `first` on the first stream and a `Stat` on a second one, then returns what came back
/// on each (a refusal is expected on the first, nothing but a failure on the second).
async fn probe(server: &TestServer, first: Request) -> (Option<Answer>, Option<Answer>) {
    let (_endpoint, conn) = common::raw_connect(server).await;
    let (mut send0, mut recv0) = conn.open_bi().await.unwrap();
    write_message(&mut send0, &first).await.unwrap();
    let second = async {
        let (mut send1, mut recv1) = conn.open_bi().await.ok()?;
        write_message(&mut send1, &Request::Stat { path: "secret.txt".into() }).await.ok()?;
        read_message::<_, Answer>(&mut recv1, Duration::from_secs(5)).await.ok()
    };
    let first_reply = read_message::<_, Answer>(&mut recv0, Duration::from_secs(5)).await.ok();
    let second_reply = second.await;
    // The server closes the connection with the auth code.
    let reason = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.unwrap();
    match reason {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(close.error_code.into_inner(), 1, "{close:?}")
        }
        other => panic!("expected an application close, got {other:?}"),
    }
    (first_reply, second_reply)
}

#[tokio::test]
async fn an_unauthenticated_session_gets_no_answer_to_requests() {
    let server = TestServer::start().await;
    fs::write(server.root().join("secret.txt"), b"secret").unwrap();

    // A request instead of Hello.
    let (first, second) = probe(&server, Request::Stat { path: "secret.txt".into() }).await;
    assert!(
        matches!(first, Some(Answer::Refused { code: ErrorCode::Auth, .. }) | None),
        "{first:?}"
    );
    assert_eq!(second, None);

    // A Hello with a wrong token, with a request racing it.
    let (first, second) = probe(&server, common::hello("wrong")).await;
    assert!(
        matches!(first, Some(Answer::Refused { code: ErrorCode::Auth, .. }) | None),
        "{first:?}"
    );
    assert_eq!(second, None);
    server.stop().await;
}

#[tokio::test]
async fn hello_with_a_bad_spec_is_refused_as_a_protocol_error() {
    // An unknown controller, and every way of asking for no encryption: there is none.
    let server = TestServer::start().await;
    type Bend = fn(&mut sluice::session::messages::Spec);
    let cases: [(Bend, &str); 4] = [
        (|s| s.cc = "cubic".into(), "cubic"),
        (|s| s.cipher = "none".into(), "none"),
        (|s| s.cipher = "null".into(), "null"),
        (|s| s.cipher = String::new(), "cipher"),
    ];
    for (bend, named) in cases {
        let (_endpoint, conn) = common::raw_connect(&server).await;
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        let mut msg = common::hello(TOKEN);
        if let Request::Hello { spec, .. } = &mut msg {
            bend(spec);
        }
        write_message(&mut send, &msg).await.unwrap();
        match read_message::<_, Answer>(&mut recv, Duration::from_secs(5)).await {
            Ok(Answer::Refused { code: ErrorCode::Protocol, message }) => {
                assert!(message.contains(named), "{message}")
            }
            other => panic!("{named}: expected a protocol refusal, got {other:?}"),
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn welcome_chooses_the_smaller_channel_count() {
    let server = TestServer::start_with(|c| c.max_channels = Some(3)).await;
    let (_endpoint, conn) = common::raw_connect(&server).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    write_message(&mut send, &common::hello(TOKEN)).await.unwrap();
    match read_message::<_, Answer>(&mut recv, Duration::from_secs(5)).await.unwrap() {
        Answer::Welcome { session_id, spec } => {
            assert_eq!(session_id.len(), 32);
            assert_eq!(spec.max_channels, 3, "the Hello offered 4, the server allows 3");
            assert_eq!(spec.packet_size, 1452);
            assert_eq!(spec.cc, "adaptive");
            assert_eq!(spec.cipher, "aes-256-gcm");
        }
        other => panic!("expected Welcome, got {other:?}"),
    }
    server.stop().await;
}

#[test]
fn token_file_ignores_comments_blank_lines_and_surrounding_space() {
    let set = TokenSet::parse("# the tokens\n\n   alpha  \n#beta\n\tgamma\n\n").unwrap();
    assert_eq!(set.len(), 2);
    assert_eq!(set.verify("alpha"), Some(0));
    assert_eq!(set.verify("gamma"), Some(1));
    for refused in ["beta", "#beta", "# the tokens", "", "alph", "alphaa", "ALPHA", "alpha gamma"] {
        assert_eq!(set.verify(refused), None, "{refused:?} must be refused");
    }
}

#[test]
fn token_comparison_is_constant_time() {
    // The comparison itself cannot be timed reliably in a test; this guards the
    // implementation: digests are compared with aws-lc's constant-time routine, without `==`.
    let source = include_str!("../../src/session/tokens.rs");
    let verify = &source[source.find("pub fn verify").expect("verify exists")..];
    let body = &verify[..verify.find("\n    }\n").expect("end of verify")];
    assert!(body.contains("verify_slices_are_equal"), "{body}");
    assert!(!body.contains("=="), "{body}");
    assert!(!body.contains("return"), "no early exit: {body}");
}

#[tokio::test]
async fn token_file_readable_by_others_or_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::server_config(dir.path());
    fs::set_permissions(common::tokens_file(dir.path()), fs::Permissions::from_mode(0o644))
        .unwrap();
    match Server::bind(config.clone()) {
        Err(SessionError::Config(message)) => assert!(message.contains("chmod 600"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    common::write_private(&common::tokens_file(dir.path()), "# nobody\n\n");
    match Server::bind(config) {
        Err(SessionError::Config(message)) => assert!(message.contains("no token"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
