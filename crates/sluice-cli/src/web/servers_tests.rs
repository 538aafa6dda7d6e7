//! Other servers in the page's panes ([`super::servers`]) through the app's router: what is
//! offered, what is refused before anything is sent, and one login's servers kept from another's
//! (with a real Sluice server on 127.0.0.1 as the other server). Copies between servers run in
//! the browser test (`web-tests/e2e.mjs`, "another server").

use std::net::SocketAddr;

use axum::http::StatusCode;
use serde_json::json;
use sluice::session::{
    Credentials, Fingerprint, Server, ServerConfig, ThirdParty, ThirdPartyConfig,
};

use super::app::router;
use super::app_tests::{App, Client, app, json_of};
use super::servers::ServerLinks;

/// A fingerprint nobody has.
fn nobody() -> Fingerprint {
    format!("SHA256:{}", "A".repeat(43)).parse().unwrap()
}

/// The app as `serve` builds it when it takes part in third-party transfers, dialing only what
/// `dial` allows (nothing: any server).
fn app_with_servers(dial: &[&str]) -> App {
    let mut app = app();
    let links = ServerLinks {
        listen: "127.0.0.1:9".parse().unwrap(),
        fingerprint: nobody(),
        third_party: ThirdPartyConfig {
            mode: ThirdParty::Both,
            dial: dial.iter().map(|d| d.parse().unwrap()).collect(),
        },
    };
    app.state = app.state.clone().with_servers(links);
    app.router = router(app.state.clone());
    app
}

#[tokio::test]
async fn without_third_party_transfers_no_other_server_is_offered() {
    let app = app();
    let client = Client::new(&app, "all-token").await;
    let listed = json_of(client.get("/api/servers").await).await;
    assert_eq!(listed, json!({ "available": false, "servers": [] }));
    let add =
        json!({ "address": "127.0.0.1:9", "fingerprint": nobody().to_string(), "token": "t" });
    for (uri, body) in [
        ("/api/servers", add),
        ("/api/copy", json!({ "from": "", "to": "s1", "paths": ["pub"] })),
        ("/api/jobs/cancel", json!({ "server": "", "id": "x" })),
    ] {
        let response = client.post(uri, body).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{uri}");
        assert_eq!(json_of(response).await["error"], "no-servers", "{uri}");
    }
}

#[tokio::test]
async fn a_server_that_may_not_be_added_is_refused_before_anything_is_sent() {
    let app = app_with_servers(&["198.18.0.9"]);
    let client = Client::new(&app, "all-token").await;
    assert_eq!(json_of(client.get("/api/servers").await).await["available"], true);
    let fp = nobody().to_string();
    let cases = [
        (
            json!({ "address": "127.0.0.1:9", "fingerprint": "SHA256:short", "token": "t" }),
            StatusCode::BAD_REQUEST,
            "fingerprint",
        ),
        (
            json!({ "address": "a b:9", "fingerprint": fp, "token": "t" }),
            StatusCode::BAD_REQUEST,
            "host:port",
        ),
        (
            json!({ "address": "127.0.0.1:99999", "fingerprint": fp, "token": "t" }),
            StatusCode::BAD_REQUEST,
            "host:port",
        ),
        // Not on the server's list of whom it dials (serve --third-party-dial).
        (
            json!({ "address": "127.0.0.1:9", "fingerprint": fp, "token": "t" }),
            StatusCode::FORBIDDEN,
            "does not dial",
        ),
    ];
    for (body, status, says) in cases {
        let response = client.post("/api/servers", body.clone()).await;
        assert_eq!(response.status(), status, "{body}");
        let message = json_of(response).await["message"].as_str().unwrap().to_owned();
        assert!(message.contains(says), "{body}: {message}");
    }
    // Copies name two servers the login holds, and a policy a job can follow.
    let copies = [
        (json!({ "from": "", "to": "", "paths": ["pub"] }), StatusCode::BAD_REQUEST, "same server"),
        (json!({ "from": "", "to": "s1", "paths": [] }), StatusCode::BAD_REQUEST, "nothing"),
        (
            json!({ "from": "", "to": "s1", "paths": ["pub"], "overwrite": "keep-both" }),
            StatusCode::BAD_REQUEST,
            "keep both",
        ),
        (
            json!({ "from": "", "to": "s1", "paths": ["pub"], "overwrite": "sometimes" }),
            StatusCode::BAD_REQUEST,
            "sometimes",
        ),
        (json!({ "from": "", "to": "s1", "paths": ["pub"] }), StatusCode::NOT_FOUND, "no such"),
    ];
    for (body, status, says) in copies {
        let response = client.post("/api/copy", body.clone()).await;
        assert_eq!(response.status(), status, "{body}");
        let message = json_of(response).await["message"].as_str().unwrap().to_owned();
        assert!(message.contains(says), "{body}: {message}");
    }
    let response = client.get("/api/servers/list?server=s1&path=").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // A change without the session's CSRF token is refused as every other.
    let forged = Client { csrf: "0".repeat(64), ..client };
    let response = forged.post("/api/servers", json!({})).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}

/// A Sluice server on 127.0.0.1 with `token` and a file `far.txt`, running until dropped.
struct Other {
    address: SocketAddr,
    fingerprint: Fingerprint,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

fn other(token: &str) -> Other {
    let dir = tempfile::tempdir().unwrap();
    let (root, state, tokens) =
        (dir.path().join("root"), dir.path().join("state"), dir.path().join("tokens"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("far.txt"), b"far away\n").unwrap();
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let server = Server::bind(ServerConfig {
        root,
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        credentials: Credentials::Stored { state_dir: state, tokens_file: tokens },
        idle_timeout: std::time::Duration::from_secs(30),
        max_channels: None,
        digest_timeout: None,
        fault: None,
        third_party: ThirdPartyConfig::default(),
        tcp: false,
        spool: None,
        path_memory: false,
        relays: Vec::new(),
    })
    .unwrap();
    let (address, fingerprint) = (server.local_addr(), server.fingerprint().clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Other { address, fingerprint, _stop: stop, _dir: dir }
}

#[tokio::test]
async fn a_login_lists_only_the_servers_it_added_and_a_wrong_token_is_said() {
    let far = other("far-token");
    let app = app_with_servers(&[]);
    let a = Client::new(&app, "all-token").await;
    let b = Client::new(&app, "all-token").await;
    let add = |token: &str| {
        json!({ "address": far.address.to_string(), "fingerprint": far.fingerprint.to_string(),
                "token": token })
    };
    // That server's token, not this one's.
    let response = a.post("/api/servers", add("all-token")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = a.post("/api/servers", add("far-token")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let added = json_of(response).await;
    assert_eq!(added["fingerprint"], far.fingerprint.to_string());
    let id = added["id"].as_str().unwrap().to_owned();
    let listing = json_of(a.get(&format!("/api/servers/list?server={id}&path=")).await).await;
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["far.txt"]);
    // Another login (the same token, another browser) holds none of it.
    assert_eq!(json_of(b.get("/api/servers").await).await["servers"], json!([]));
    let response = b.get(&format!("/api/servers/list?server={id}&path=")).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = b.post("/api/servers/forget", json!({ "id": id })).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // Forgotten, it is gone.
    let response = a.post("/api/servers/forget", json!({ "id": id })).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(json_of(a.get("/api/servers").await).await["servers"], json!([]));
    let response = a.get(&format!("/api/servers/list?server={id}&path=")).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}
