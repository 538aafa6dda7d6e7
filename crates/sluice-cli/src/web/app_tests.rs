//! The web app's API through its router (`tower::ServiceExt::oneshot`, no sockets): logins,
//! cookies, CSRF, headers, rights and root, every operation, resumed uploads and downloads.
//! Deterministic: no clock is read by an assertion, and the files' bytes come from a counter.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode, header};
use serde_json::{Value, json};
use sluice::session::Gate;
use sluice::session::tokens::TokenSet;
use tower::ServiceExt;

use super::app::router;
use super::auth::{LoginLimits, Rate};
use super::request::{AppState, CSP, CSRF_HEADER};

const TOKENS: &str = "all-token\nread-token rights=read,list root=pub\nwrite-token rights=write\n\
                      one-token transfers=1\nslow-token rate=2Mbit\n";

pub(super) struct App {
    pub(super) router: Router,
    pub(super) state: AppState,
    /// The directory the root is in (`root`), beside `outside.txt`.
    base: std::path::PathBuf,
    _dir: Option<tempfile::TempDir>,
}

/// A served directory with `pub/hello.txt` and `outside.txt` beside the root, and the app.
fn app_with(limits: LoginLimits) -> App {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("pub")).unwrap();
    std::fs::write(root.join("pub/hello.txt"), b"hello, web\n").unwrap();
    std::fs::write(dir.path().join("outside.txt"), b"secret").unwrap();
    let gate = Gate::new(&root, TokenSet::parse(TOKENS).unwrap()).unwrap();
    let state = AppState::new(gate, "SHA256:test".into(), limits);
    App { router: router(state.clone()), state, base: dir.path().to_owned(), _dir: Some(dir) }
}

pub(super) fn app() -> App {
    app_with(LoginLimits::DEFAULT)
}

impl App {
    /// The app of a server already made (`state`) whose root is `base/root`.
    pub(super) fn of(state: AppState, base: &std::path::Path) -> App {
        App { router: router(state.clone()), state, base: base.to_owned(), _dir: None }
    }

    pub(super) fn root(&self) -> std::path::PathBuf {
        self.base.join("root")
    }

    async fn send(&self, request: Request<Body>) -> Response<Body> {
        let mut request = request;
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(peer));
        self.router.clone().oneshot(request).await.unwrap()
    }

    /// Logs in: the cookie pair (`name=value`) and the CSRF token.
    async fn login(&self, token: &str) -> (String, String) {
        let response = self.send(login_request(token)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let cookie = response.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
        let pair = cookie.split(';').next().unwrap().to_owned();
        let body = json_of(response).await;
        (pair, body["csrf"].as_str().unwrap().to_owned())
    }
}

fn login_request(token: &str) -> Request<Body> {
    Request::post("/api/login")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "token": token }).to_string()))
        .unwrap()
}

async fn bytes_of(response: Response<Body>) -> Vec<u8> {
    axum::body::to_bytes(response.into_body(), 1 << 30).await.unwrap().to_vec()
}

pub(super) async fn json_of(response: Response<Body>) -> Value {
    let bytes = bytes_of(response).await;
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&bytes)))
}

/// A logged-in client of the app.
pub(super) struct Client<'a> {
    pub(super) app: &'a App,
    pub(super) cookie: String,
    pub(super) csrf: String,
}

impl<'a> Client<'a> {
    pub(super) async fn new(app: &'a App, token: &str) -> Client<'a> {
        let (cookie, csrf) = app.login(token).await;
        Client { app, cookie, csrf }
    }

    pub(super) async fn get(&self, uri: &str) -> Response<Body> {
        self.app
            .send(
                Request::get(uri).header(header::COOKIE, &self.cookie).body(Body::empty()).unwrap(),
            )
            .await
    }

    /// A GET of `uri` with `Range: range`.
    pub(super) async fn get_range(&self, uri: &str, range: &str) -> Response<Body> {
        let request = Request::get(uri)
            .header(header::COOKIE, &self.cookie)
            .header(header::RANGE, range)
            .body(Body::empty())
            .unwrap();
        self.app.send(request).await
    }

    pub(super) async fn post(&self, uri: &str, body: Value) -> Response<Body> {
        let request = Request::post(uri)
            .header(header::COOKIE, &self.cookie)
            .header(CSRF_HEADER, &self.csrf)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        self.app.send(request).await
    }

    pub(super) async fn put(&self, uri: &str, bytes: Vec<u8>) -> Response<Body> {
        self.put_with(uri, bytes, &[]).await
    }

    /// [`Client::put`] with these headers too.
    pub(super) async fn put_with(
        &self,
        uri: &str,
        bytes: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Response<Body> {
        let mut request =
            Request::put(uri).header(header::COOKIE, &self.cookie).header(CSRF_HEADER, &self.csrf);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.app.send(request.body(Body::from(bytes)).unwrap()).await
    }
}

fn counted(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn q(s: &str) -> String {
    s.bytes()
        .map(
            |b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            },
        )
        .collect()
}

#[tokio::test]
async fn login_sets_a_strict_cookie_and_a_wrong_token_is_refused() {
    let app = app();
    let response = app.send(login_request("all-token")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let cookie = response.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("sluice_session="), "{cookie}");
    for flag in ["; Secure", "; HttpOnly", "; SameSite=Strict", "; Path=/"] {
        assert!(cookie.contains(flag), "{flag} missing: {cookie}");
    }
    assert!(!cookie.contains("all-token"));
    let body = json_of(response).await;
    assert_eq!(body["rights"], json!({ "read": true, "write": true, "list": true }));
    assert_eq!(body["csrf"].as_str().unwrap().len(), 64);

    let response = app.send(login_request("wrong-token")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().get(header::SET_COOKIE).is_none());
    assert_eq!(json_of(response).await["error"], "auth");
    // The token in a form, or in a URL, is not a login.
    let form = Request::post("/api/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("token=all-token"))
        .unwrap();
    assert_eq!(app.send(form).await.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let in_url = Request::post("/api/login?token=all-token").body(Body::empty()).unwrap();
    assert_eq!(app.send(in_url).await.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn without_a_session_nothing_but_the_page_and_login_answers() {
    let app = app();
    for uri in ["/api/list?path=", "/api/session", "/api/file?path=pub/hello.txt"] {
        let response = app.send(Request::get(uri).body(Body::empty()).unwrap()).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(json_of(response).await["error"], "auth");
    }
    let forged = Request::get("/api/list?path=")
        .header(header::COOKIE, "sluice_session=00ff")
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.send(forged).await.status(), StatusCode::UNAUTHORIZED);
    let page = app.send(Request::get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status(), StatusCode::OK);
}

#[tokio::test]
async fn assets_have_a_validator_and_go_compressed_to_who_takes_zstd() {
    let app = app();
    let ask = |headers: &[(header::HeaderName, &str)]| {
        let mut request = Request::get("/sluice.wasm");
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        request.body(Body::empty()).unwrap()
    };
    let plain = app.send(ask(&[])).await;
    assert_eq!(plain.status(), StatusCode::OK);
    assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
    let etag = plain.headers()[header::ETAG].to_str().unwrap().to_owned();
    let module = bytes_of(plain).await;
    assert!(module.starts_with(b"\0asm"), "a WebAssembly module");
    // The transfer machines are in it (sluice-wasm's `machines`): their exports' names.
    let named = |name: &[u8]| module.windows(name.len()).any(|w| w == name);
    assert!(named(b"sluice_machine_receive") && named(b"sluice_machine_effect"));
    let packed = app.send(ask(&[(header::ACCEPT_ENCODING, "gzip, zstd;q=0.9")])).await;
    assert_eq!(packed.headers()[header::CONTENT_ENCODING], "zstd");
    assert_eq!(packed.headers()[header::ETAG], etag.as_str());
    let packed = bytes_of(packed).await;
    println!("/sluice.wasm: {} bytes, {} with zstd", module.len(), packed.len());
    assert!(packed.len() < module.len() / 2, "zstd shrinks the module");
    assert!(zstd::decode_all(&packed[..]).unwrap() == module, "the same bytes once decoded");
    // zstd refused by its weight: the bytes as they are.
    let refused = app.send(ask(&[(header::ACCEPT_ENCODING, "zstd;q=0, gzip")])).await;
    assert!(refused.headers().get(header::CONTENT_ENCODING).is_none());
    // Asked again with the validator: not modified, no bytes.
    let again = app.send(ask(&[(header::IF_NONE_MATCH, &etag)])).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert!(bytes_of(again).await.is_empty());
    let other = app.send(ask(&[(header::IF_NONE_MATCH, "\"another\"")])).await;
    assert_eq!(other.status(), StatusCode::OK);
    // Each asset's validator is its own.
    let page = app.send(Request::get("/").body(Body::empty()).unwrap()).await;
    assert_ne!(page.headers()[header::ETAG], etag.as_str());
}

#[tokio::test]
async fn every_script_of_the_page_is_served() {
    let app = app();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web/js");
    let mut scripts = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let uri = format!("/js/{name}");
        let response = app.send(Request::get(uri.as_str()).body(Body::empty()).unwrap()).await;
        assert_eq!(response.status(), StatusCode::OK, "{uri} is not served (assets.rs)");
        let served = bytes_of(response).await;
        assert!(served == std::fs::read(dir.join(&name)).unwrap(), "{uri}: the file's bytes");
        scripts += 1;
    }
    assert!(scripts >= 14, "{scripts} scripts");
}

#[tokio::test]
async fn every_answer_has_the_strict_policy_headers() {
    let app = app();
    for uri in ["/", "/js/main.js", "/app.css", "/api/list", "/nowhere"] {
        let response = app.send(Request::get(uri).body(Body::empty()).unwrap()).await;
        let h = response.headers();
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], CSP, "{uri}");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{uri}");
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{uri}");
    }
    assert!(CSP.contains("default-src 'self'") && CSP.contains("frame-ancestors 'none'"));
    // 'wasm-unsafe-eval' (the page's WebAssembly) is not 'unsafe-eval' (JavaScript's eval).
    assert!(!CSP.contains("unsafe-inline") && !CSP.contains("'unsafe-eval'"));
    let page = bytes_of(app.send(Request::get("/").body(Body::empty()).unwrap()).await).await;
    let page = String::from_utf8(page).unwrap();
    assert!(!page.contains("<script>") && !page.contains("style="), "inline script or style");
}

#[tokio::test]
async fn a_changing_request_without_the_csrf_token_or_from_elsewhere_is_refused() {
    let app = app();
    let client = Client::new(&app, "all-token").await;
    let without = Request::post("/api/mkdir")
        .header(header::COOKIE, &client.cookie)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"path":"made"}"#))
        .unwrap();
    let response = app.send(without).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(json_of(response).await["error"], "csrf");
    let wrong = Request::post("/api/mkdir")
        .header(header::COOKIE, &client.cookie)
        .header(CSRF_HEADER, "0".repeat(64))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"path":"made"}"#))
        .unwrap();
    assert_eq!(app.send(wrong).await.status(), StatusCode::FORBIDDEN);
    let elsewhere = Request::post("/api/mkdir")
        .header(header::COOKIE, &client.cookie)
        .header(CSRF_HEADER, &client.csrf)
        .header(header::HOST, "127.0.0.1:8443")
        .header(header::ORIGIN, "https://evil.example")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"path":"made"}"#))
        .unwrap();
    assert_eq!(app.send(elsewhere).await.status(), StatusCode::FORBIDDEN);
    let put = Request::put("/api/upload?path=x&size=1")
        .header(header::COOKIE, &client.cookie)
        .body(Body::from("x"))
        .unwrap();
    assert_eq!(app.send(put).await.status(), StatusCode::FORBIDDEN);
    assert!(!app.root().join("made").exists() && !app.root().join("x").exists());
    // With the token it goes through.
    assert_eq!(client.post("/api/mkdir", json!({ "path": "made" })).await.status(), StatusCode::OK);
    assert!(app.root().join("made").is_dir());
}

#[tokio::test]
async fn logout_ends_the_session() {
    let app = app();
    let client = Client::new(&app, "all-token").await;
    assert_eq!(client.get("/api/session").await.status(), StatusCode::OK);
    let out = client.post("/api/logout", json!({})).await;
    assert_eq!(out.status(), StatusCode::OK);
    assert!(out.headers()[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(client.get("/api/session").await.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn login_attempts_are_rate_limited_per_address() {
    // No refill within the test: the limit is a count, not a time.
    let slow = std::time::Duration::from_secs(3600);
    let limits = LoginLimits {
        per_address: Rate { burst: 3, every: slow },
        all: Rate { burst: 100, every: slow },
    };
    let app = app_with(limits);
    for _ in 0..3 {
        assert_eq!(app.send(login_request("wrong")).await.status(), StatusCode::UNAUTHORIZED);
    }
    // Even the right token waits now.
    let response = app.send(login_request("all-token")).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(json_of(response).await["error"], "rate-limited");
    // Another address still may.
    let mut other = login_request("all-token");
    other.extensions_mut().insert(ConnectInfo("127.0.0.2:1".parse::<SocketAddr>().unwrap()));
    let response = app.router.clone().oneshot(other).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn login_attempts_are_rate_limited_in_all() {
    let slow = std::time::Duration::from_secs(3600);
    let limits = LoginLimits {
        per_address: Rate { burst: 100, every: slow },
        all: Rate { burst: 2, every: slow },
    };
    let app = app_with(limits);
    for (i, expected) in
        [StatusCode::UNAUTHORIZED, StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS]
            .into_iter()
            .enumerate()
    {
        let mut request = login_request("wrong");
        let from: SocketAddr = format!("127.0.0.{}:1", i + 10).parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(from));
        assert_eq!(app.router.clone().oneshot(request).await.unwrap().status(), expected);
    }
}

#[tokio::test]
async fn paths_outside_the_root_are_refused() {
    let app = app();
    std::os::unix::fs::symlink(app.base.join("outside.txt"), app.root().join("out-link")).unwrap();
    let client = Client::new(&app, "all-token").await;
    for uri in [
        "/api/list?path=..",
        "/api/list?path=%2Fetc",
        "/api/file?path=..%2Foutside.txt",
        "/api/file?path=out-link",
        "/api/stat?path=pub%2F..%2F..%2Foutside.txt",
        "/api/tree?path=..",
        "/api/tree?path=out-link",
    ] {
        let response = client.get(uri).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{uri}");
        let body = json_of(response).await;
        assert_eq!(body["error"], "refused", "{uri}: {body}");
        assert!(!body["message"].as_str().unwrap().contains(app.base.to_str().unwrap()));
    }
    for (op, body) in [
        ("/api/mkdir", json!({ "path": "../made" })),
        ("/api/delete", json!({ "path": "../outside.txt" })),
        ("/api/rename", json!({ "from": "pub/hello.txt", "to": "../moved.txt" })),
    ] {
        assert_eq!(client.post(op, body).await.status(), StatusCode::FORBIDDEN, "{op}");
    }
    let put = client.put("/api/upload?path=..%2Fup.txt&size=1", b"x".to_vec()).await;
    assert_eq!(put.status(), StatusCode::FORBIDDEN);
    assert!(app.base.join("outside.txt").exists());
    assert!(!app.base.join("made").exists() && !app.base.join("up.txt").exists());
    // Deleting the link removes the link, never what it points to.
    assert_eq!(
        client.post("/api/delete", json!({ "path": "out-link" })).await.status(),
        StatusCode::OK
    );
    assert!(app.base.join("outside.txt").exists());
}

#[tokio::test]
async fn a_token_is_held_to_its_rights_and_its_root() {
    let app = app();
    let reader = Client::new(&app, "read-token").await;
    // Its root is pub/: it sees hello.txt at the top.
    let list = json_of(reader.get("/api/list?path=").await).await;
    assert_eq!(list["entries"][0]["name"], "hello.txt");
    assert_eq!(bytes_of(reader.get("/api/file?path=hello.txt").await).await, b"hello, web\n");
    for (op, body) in [
        ("/api/mkdir", json!({ "path": "d" })),
        ("/api/delete", json!({ "path": "hello.txt" })),
        ("/api/rename", json!({ "from": "hello.txt", "to": "x" })),
    ] {
        let response = reader.post(op, body).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{op}");
        assert!(json_of(response).await["message"].as_str().unwrap().contains("may not write"));
    }
    assert_eq!(
        reader.put("/api/upload?path=u&size=1", b"u".to_vec()).await.status(),
        StatusCode::FORBIDDEN
    );
    let writer = Client::new(&app, "write-token").await;
    assert_eq!(writer.get("/api/list?path=").await.status(), StatusCode::FORBIDDEN);
    assert_eq!(writer.get("/api/file?path=pub%2Fhello.txt").await.status(), StatusCode::FORBIDDEN);
    let up = writer.put("/api/upload?path=drop.bin&size=3", b"abc".to_vec()).await;
    assert_eq!(up.status(), StatusCode::OK);
    assert_eq!(std::fs::read(app.root().join("drop.bin")).unwrap(), b"abc");
}

#[tokio::test]
async fn list_make_rename_and_delete() {
    let app = app();
    let c = Client::new(&app, "all-token").await;
    assert_eq!(c.post("/api/mkdir", json!({ "path": "a" })).await.status(), StatusCode::OK);
    let again = c.post("/api/mkdir", json!({ "path": "a" })).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(json_of(again).await["error"], "exists");
    std::fs::create_dir_all(app.root().join("a/b/c")).unwrap();
    std::fs::write(app.root().join("a/b/c/f"), b"f").unwrap();
    std::fs::write(app.root().join("a/g"), b"g").unwrap();
    let list = json_of(c.get("/api/list?path=a").await).await;
    let names: Vec<_> =
        list["entries"].as_array().unwrap().iter().map(|e| e["name"].clone()).collect();
    assert_eq!(names, [json!("b"), json!("g")]);
    assert_eq!(
        list["entries"][1],
        json!({ "name": "g", "kind": "file", "size": 1,
        "mtime": list["entries"][1]["mtime"], "target": null })
    );
    assert_eq!(list["entries"][0]["kind"], "dir");
    let moved = c.post("/api/rename", json!({ "from": "a/g", "to": "a/b/h" })).await;
    assert_eq!(moved.status(), StatusCode::OK);
    assert_eq!(std::fs::read(app.root().join("a/b/h")).unwrap(), b"g");
    let taken = c.post("/api/rename", json!({ "from": "a/b/h", "to": "pub/hello.txt" })).await;
    assert_eq!(taken.status(), StatusCode::CONFLICT);
    let into_itself = c.post("/api/rename", json!({ "from": "a", "to": "a/b/a" })).await;
    assert_eq!(into_itself.status(), StatusCode::FORBIDDEN);
    let gone = c.post("/api/delete", json!({ "path": "a" })).await;
    assert_eq!(gone.status(), StatusCode::OK);
    assert_eq!(json_of(gone).await["removed"], 5, "a, a/b, a/b/c, a/b/c/f, a/b/h");
    assert!(!app.root().join("a").exists());
    let missing = c.get("/api/list?path=a").await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    for root in ["", "."] {
        let response = c.post("/api/delete", json!({ "path": root })).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{root:?}");
    }
    // Bad input is a JSON 400, never a crash.
    for (uri, body) in
        [("/api/mkdir", "{"), ("/api/rename", r#"{"from":1}"#), ("/api/delete", "null")]
    {
        let request = Request::post(uri)
            .header(header::COOKIE, &c.cookie)
            .header(CSRF_HEADER, &c.csrf)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap();
        let response = app.send(request).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{uri} {body}");
        assert_eq!(json_of(response).await["error"], "bad-request");
    }
    assert_eq!(c.get("/api/upload?path=x").await.status(), StatusCode::BAD_REQUEST);
    assert_eq!(c.get("/api/list?path=a%00b").await.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_folders_tree_is_what_its_download_sends_every_level_in_one_answer() {
    let app = app();
    std::fs::create_dir_all(app.root().join("t/a/b")).unwrap();
    std::fs::create_dir_all(app.root().join("t/empty")).unwrap();
    std::fs::write(app.root().join("t/a/b/deep.bin"), b"deep").unwrap();
    std::fs::write(app.root().join("t/top.txt"), b"top!!").unwrap();
    let c = Client::new(&app, "all-token").await;
    let tree = json_of(c.get("/api/tree?path=t").await).await;
    let entries = tree["entries"].as_array().unwrap();
    let mut names: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["kind"].as_str().unwrap()))
        .collect();
    // Each folder before what is in it.
    for (k, (name, _)) in names.iter().enumerate() {
        if let Some((parent, _)) = name.rsplit_once('/') {
            let before = names[..k].iter().any(|(n, kind)| *n == parent && *kind == "dir");
            assert!(before, "{name} before its folder: {names:?}");
        }
    }
    names.sort_unstable();
    assert_eq!(
        names,
        [
            ("t", "dir"),
            ("t/a", "dir"),
            ("t/a/b", "dir"),
            ("t/a/b/deep.bin", "file"),
            ("t/empty", "dir"),
            ("t/top.txt", "file")
        ]
    );
    let top = entries.iter().find(|e| e["name"] == "t/top.txt").unwrap();
    assert_eq!(top["size"], 5);
    // A token without `read` downloads nothing, so it walks nothing either; one with `read`
    // walks beneath its own root only.
    let writer = Client::new(&app, "write-token").await;
    assert_eq!(writer.get("/api/tree?path=t").await.status(), StatusCode::FORBIDDEN);
    let reader = Client::new(&app, "read-token").await;
    // (Its root's own name first, as a download of it names it.)
    let own = json_of(reader.get("/api/tree?path=").await).await;
    let own: Vec<&Value> = own["entries"].as_array().unwrap().iter().map(|e| &e["name"]).collect();
    assert_eq!(own, [&json!("pub"), &json!("pub/hello.txt")]);
    assert_eq!(reader.get("/api/tree?path=..%2Ft").await.status(), StatusCode::FORBIDDEN);
    assert_eq!(c.get("/api/tree?path=nothing-here").await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_download_resumes_with_a_range() {
    let app = app();
    let data = counted(300_000);
    std::fs::write(app.root().join("big.bin"), &data).unwrap();
    let c = Client::new(&app, "all-token").await;
    let whole = c.get("/api/file?path=big.bin").await;
    assert_eq!(whole.status(), StatusCode::OK);
    assert_eq!(whole.headers()[header::ACCEPT_RANGES], "bytes");
    assert_eq!(bytes_of(whole).await, data);
    let rest = c.get_range("/api/file?path=big.bin", "bytes=123456-").await;
    assert_eq!(rest.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(rest.headers()[header::CONTENT_RANGE], "bytes 123456-299999/300000");
    assert_eq!(bytes_of(rest).await, &data[123_456..]);
    let beyond = c.get_range("/api/file?path=big.bin", "bytes=300000-").await;
    assert_eq!(beyond.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(beyond.headers()[header::CONTENT_RANGE], "bytes */300000");
    assert_eq!(c.get("/api/file?path=pub").await.status(), StatusCode::FORBIDDEN);
}

/// A small file sent whole carries its BLAKE3 (the page's check then needs no `/api/hash`
/// request); a range of it, and a file over 4 MiB, do not.
#[tokio::test]
async fn a_small_file_sent_whole_carries_its_blake3() {
    let app = app();
    let small = counted(300_000);
    let large = counted((4 << 20) + 1);
    std::fs::write(app.root().join("small.bin"), &small).unwrap();
    std::fs::write(app.root().join("large.bin"), &large).unwrap();
    let c = Client::new(&app, "all-token").await;
    let whole = c.get("/api/file?path=small.bin").await;
    assert_eq!(whole.status(), StatusCode::OK);
    let said = whole.headers()["x-sluice-blake3"].to_str().unwrap().to_owned();
    assert_eq!(said, blake3::hash(&small).to_hex().as_str());
    let asked = json_of(c.get("/api/hash?path=small.bin").await).await;
    assert_eq!(asked["blake3"], said.as_str(), "the same hash as /api/hash gives");
    assert_eq!(asked["etag"], whole.headers()[header::ETAG].to_str().unwrap());
    assert_eq!(bytes_of(whole).await, small);
    let rest = c.get_range("/api/file?path=small.bin", "bytes=1000-").await;
    assert_eq!(rest.status(), StatusCode::PARTIAL_CONTENT);
    assert!(rest.headers().get("x-sluice-blake3").is_none(), "not on a range");
    let big = c.get("/api/file?path=large.bin").await;
    assert_eq!(big.status(), StatusCode::OK);
    assert!(big.headers().get("x-sluice-blake3").is_none(), "not on a file over 4 MiB");
    assert_eq!(bytes_of(big).await, large);
}

/// A `Range` with `If-Range` keeps the range only while the file is the one of that tag: a file
/// rewritten in place (same size) or replaced comes whole, so a resumed download never joins
/// two versions.
#[tokio::test]
async fn a_range_holds_only_while_the_file_is_the_same() {
    let app = app();
    let path = app.root().join("v.bin");
    std::fs::write(&path, counted(100_000)).unwrap();
    let c = Client::new(&app, "all-token").await;
    let ranged = |tag: String| {
        Request::get("/api/file?path=v.bin")
            .header(header::COOKIE, &c.cookie)
            .header(header::RANGE, "bytes=40000-")
            .header(header::IF_RANGE, tag)
            .body(Body::empty())
            .unwrap()
    };
    let whole = c.get("/api/file?path=v.bin").await;
    let tag = whole.headers()[header::ETAG].to_str().unwrap().to_owned();
    assert!(tag.starts_with('"') && tag.len() > 10, "a strong tag: {tag}");
    let same = app.send(ranged(tag.clone())).await;
    assert_eq!(same.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(bytes_of(same).await, &counted(100_000)[40_000..]);
    // The same size, other bytes, written in place: another tag, so all of it.
    let other: Vec<u8> = counted(100_000).iter().map(|b| b ^ 0xff).collect();
    std::fs::write(&path, &other).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    let later =
        std::fs::metadata(&path).unwrap().modified().unwrap() + std::time::Duration::from_nanos(1);
    f.set_modified(later).unwrap();
    let changed = app.send(ranged(tag.clone())).await;
    assert_eq!(changed.status(), StatusCode::OK);
    assert_ne!(changed.headers()[header::ETAG].to_str().unwrap(), tag);
    assert_eq!(bytes_of(changed).await, other);
    // A weak tag or a date never keeps the range.
    for stale in [format!("W/{tag}"), "Thu, 01 Jan 2026 00:00:00 GMT".to_owned()] {
        assert_eq!(app.send(ranged(stale)).await.status(), StatusCode::OK);
    }
}

/// The server's BLAKE3 of a file, for the page to compare with its own hash of a download: of
/// the version the download's tag names, with the `read` right only.
#[tokio::test]
async fn the_servers_blake3_of_a_file_names_its_version() {
    let app = app();
    let data = counted(200_000);
    std::fs::write(app.root().join("h.bin"), &data).unwrap();
    let c = Client::new(&app, "all-token").await;
    let tag =
        c.get("/api/file?path=h.bin").await.headers()[header::ETAG].to_str().unwrap().to_owned();
    let answer = json_of(c.get("/api/hash?path=h.bin").await).await;
    assert_eq!(answer["blake3"], blake3::hash(&data).to_hex().as_str());
    assert_eq!(answer["etag"], tag.as_str());
    let writer = Client::new(&app, "write-token").await;
    assert_eq!(writer.get("/api/hash?path=h.bin").await.status(), StatusCode::FORBIDDEN);
    assert_eq!(c.get("/api/hash?path=pub").await.status(), StatusCode::FORBIDDEN);
    assert_eq!(c.get("/api/hash?path=..%2Foutside.txt").await.status(), StatusCode::FORBIDDEN);
}

/// The page's BLAKE3 module is built into the binary and served as WebAssembly, with its
/// exports; the policy lets the page compile it and nothing else.
#[tokio::test]
async fn the_pages_webassembly_is_served() {
    let app = app();
    let response = app.send(Request::get("/sluice.wasm").body(Body::empty()).unwrap()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/wasm");
    let bytes = bytes_of(response).await;
    assert_eq!(&bytes[..4], b"\0asm", "a WebAssembly module");
    for export in
        ["sluice_buffer", "sluice_hasher_new", "sluice_hasher_update", "sluice_hasher_finish"]
    {
        assert!(bytes.windows(export.len()).any(|w| w == export.as_bytes()), "exports {export}");
    }
    assert!(
        CSP.contains("script-src 'self' 'wasm-unsafe-eval';") && !CSP.contains("'unsafe-eval'")
    );
}

/// The sweep's two sides: exactly the bytes asked for, and a count of the bytes sent; each
/// with its right, bounded, and held to the token's places like a transfer.
#[tokio::test]
async fn the_sweep_moves_what_it_is_asked_and_no_more() {
    let app = app();
    let c = Client::new(&app, "all-token").await;
    let down = c.get("/api/sweep?bytes=1000000").await;
    assert_eq!(down.status(), StatusCode::OK);
    assert_eq!(down.headers()[header::CONTENT_LENGTH], "1000000");
    assert_eq!(bytes_of(down).await.len(), 1_000_000);
    assert_eq!(bytes_of(c.get("/api/sweep?bytes=0").await).await.len(), 0);
    assert_eq!(c.get("/api/sweep?bytes=268435457").await.status(), StatusCode::BAD_REQUEST);
    assert_eq!(c.get("/api/sweep?bytes=-1").await.status(), StatusCode::BAD_REQUEST);
    let up = json_of(c.put("/api/sweep", counted(700_000)).await).await;
    assert_eq!(up, json!({ "received": 700_000 }));
    let reader = Client::new(&app, "read-token").await;
    assert_eq!(reader.put("/api/sweep", counted(10)).await.status(), StatusCode::FORBIDDEN);
    let writer = Client::new(&app, "write-token").await;
    assert_eq!(writer.get("/api/sweep?bytes=10").await.status(), StatusCode::FORBIDDEN);
    // A token of one transfer at once: a second sweep request while one runs is busy.
    let one = Client::new(&app, "one-token").await;
    let held = one.get("/api/sweep?bytes=10000000").await;
    assert_eq!(one.get("/api/sweep?bytes=10").await.status(), StatusCode::CONFLICT);
    drop(held);
    assert_eq!(one.get("/api/sweep?bytes=10").await.status(), StatusCode::OK);
    // Not counted as transfers: no file moved.
    assert!(
        app.state.gate.metrics().render().contains("sluice_transfers_total{direction=\"get\"} 0\n")
    );
}

/// Web downloads and uploads are the server's transfers: they take the token's places (a
/// token of one transfer at once is `busy` for a second) and the server's, and show in its
/// metrics with the bytes they moved.
#[tokio::test]
async fn web_transfers_take_the_tokens_places_and_show_in_the_metrics() {
    let app = app();
    let data = counted(600_000);
    std::fs::write(app.root().join("f.bin"), &data).unwrap();
    let c = Client::new(&app, "one-token").await;
    let metrics = app.state.gate.metrics();
    let line = |name: &str| {
        let text = metrics.render();
        text.lines().find(|l| l.starts_with(name)).map(str::to_owned).unwrap_or_default()
    };
    let first = c.get("/api/file?path=f.bin").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(line("sluice_transfers_active"), "sluice_transfers_active 1");
    let second = c.get("/api/file?path=f.bin").await;
    assert_eq!(second.status(), StatusCode::CONFLICT);
    let busy = json_of(second).await;
    assert_eq!(busy["error"], "busy", "{busy}");
    let up = upload_with(&c, "u.bin", b"abc", 1, "refuse").await;
    assert_eq!(up.status(), StatusCode::CONFLICT, "an upload takes the same place");
    let names: Vec<_> =
        std::fs::read_dir(app.root()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "nothing but pub and f.bin: {names:?}");
    assert_eq!(bytes_of(first).await, data);
    assert_eq!(line("sluice_transfers_active"), "sluice_transfers_active 0");
    assert_eq!(
        line("sluice_transfers_total{direction=\"get\"}"),
        "sluice_transfers_total{direction=\"get\"} 1"
    );
    assert_eq!(
        line("sluice_file_bytes_total{direction=\"sent\"}"),
        "sluice_file_bytes_total{direction=\"sent\"} 600000"
    );
    // Its place is free again: an upload goes, and counts as a put.
    assert_eq!(upload_with(&c, "u.bin", b"abc", 1, "refuse").await.status(), StatusCode::OK);
    assert_eq!(
        line("sluice_transfers_total{direction=\"put\"}"),
        "sluice_transfers_total{direction=\"put\"} 1"
    );
    assert_eq!(
        line("sluice_file_bytes_total{direction=\"received\"}"),
        "sluice_file_bytes_total{direction=\"received\"} 3"
    );
}

/// The token's rate limit (2 Mbit/s here), or a lower one the page asks, paces a download and
/// an upload. On tokio's paused clock: what is checked is the time the pacing waited, never the
/// machine's speed.
#[tokio::test(start_paused = true)]
async fn web_transfers_hold_the_tokens_rate_and_the_pages() {
    let app = app();
    let data = counted(1_000_000);
    std::fs::write(app.root().join("f.bin"), &data).unwrap();
    let slow = Client::new(&app, "slow-token").await;
    let at = tokio::time::Instant::now();
    assert_eq!(bytes_of(slow.get("/api/file?path=f.bin").await).await, data);
    // 1 MB at 2 Mbit/s: 4 s; no faster.
    let took = at.elapsed().as_secs_f64();
    assert!((4.0..4.5).contains(&took), "the download took {took} s of paused time");
    // The page asks for less than its token allows: 1 Mbit/s.
    let at = tokio::time::Instant::now();
    assert_eq!(bytes_of(slow.get("/api/file?path=f.bin&rate_bps=1000000").await).await, data);
    let took = at.elapsed().as_secs_f64();
    assert!((8.0..8.5).contains(&took), "the paced download took {took} s");
    // An upload is paced as it arrives (in the pieces the body comes in).
    let at = tokio::time::Instant::now();
    let uri = format!("/api/upload?path=u.bin&size={}&mtime=1", data.len());
    let request = Request::put(uri)
        .header(header::COOKIE, &slow.cookie)
        .header(CSRF_HEADER, &slow.csrf)
        .body(Body::from_stream(futures_util::stream::iter(
            data.chunks(100_000).map(|c| Ok::<_, std::io::Error>(c.to_vec())).collect::<Vec<_>>(),
        )))
        .unwrap();
    assert_eq!(app.send(request).await.status(), StatusCode::OK);
    let took = at.elapsed().as_secs_f64();
    assert!((4.0..4.5).contains(&took), "the upload took {took} s of paused time");
    // Without a limit nothing waits.
    let all = Client::new(&app, "all-token").await;
    let at = tokio::time::Instant::now();
    assert_eq!(bytes_of(all.get("/api/file?path=f.bin").await).await, data);
    assert!(at.elapsed() < std::time::Duration::from_millis(100));
}

/// A cancel: the page's `POST /api/upload/stop` ends the request writing that upload at once,
/// though its client never closed the body, keeping what it wrote for a retry to resume.
#[tokio::test]
async fn a_stopped_upload_ends_at_once_and_keeps_what_it_wrote() {
    let app = app();
    let c = Client::new(&app, "all-token").await;
    let which = "path=s.bin&size=1000&mtime=5";
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body =
        futures_util::stream::unfold(rx, |mut rx| async move { Some((rx.recv().await?, rx)) });
    let mut request = Request::put(format!("/api/upload?{which}&offset=0"))
        .header(header::COOKIE, &c.cookie)
        .header(CSRF_HEADER, &c.csrf)
        .body(Body::from_stream(body))
        .unwrap();
    request.extensions_mut().insert(ConnectInfo("127.0.0.1:5000".parse::<SocketAddr>().unwrap()));
    tx.send(Ok(counted(300))).await.unwrap();
    let put = tokio::spawn(app.router.clone().oneshot(request));
    // The stop comes once the request has taken those 300 bytes from its body (a stop before
    // that keeps nothing, rightly: nothing was written).
    for _ in 0..500 {
        if tx.capacity() == tx.max_capacity() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(tx.capacity(), tx.max_capacity(), "the upload never read its body");
    let mut stopped = false;
    for _ in 0..500 {
        let answer = json_of(c.post(&format!("/api/upload/stop?{which}"), json!({})).await).await;
        stopped = answer["stopped"] == true;
        if stopped {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(stopped, "the upload was never seen running");
    let ended = put.await.unwrap().unwrap();
    assert_eq!(ended.status(), StatusCode::BAD_REQUEST);
    let ended = json_of(ended).await;
    assert!(ended["message"].as_str().unwrap().contains("stopped"), "{ended}");
    assert_eq!(ended["have"], 300);
    assert_eq!(json_of(c.get(&format!("/api/upload?{which}")).await).await["have"], 300);
    let again = json_of(c.post(&format!("/api/upload/stop?{which}"), json!({})).await).await;
    assert_eq!(again["stopped"], false, "nothing runs now");
    // The rest resumes from there.
    let rest = json_of(
        c.put(&format!("/api/upload?{which}&offset=300"), counted(1000)[300..].to_vec()).await,
    )
    .await;
    assert_eq!(rest["stored"], true, "{rest}");
    assert_eq!(std::fs::read(app.root().join("s.bin")).unwrap(), counted(1000));
    // The first request's body was open all along: the stop ended it, not its client.
    drop(tx);
}

/// An abandoned partial upload stays resumable until [`sluice::web::PARTIAL_TTL`] after its
/// last write, then the sweep removes it; one being written is never removed.
#[tokio::test]
async fn an_abandoned_partial_upload_is_swept_after_its_time() {
    use sluice::web::PARTIAL_TTL;
    use std::time::{Duration, SystemTime};
    let app = app();
    let c = Client::new(&app, "all-token").await;
    let base = "/api/upload?path=p.bin&size=1000&mtime=5";
    let first = json_of(c.put(&format!("{base}&offset=0"), counted(400)).await).await;
    assert_eq!(first["have"], 400);
    let partials = app.state.partials.clone();
    assert_eq!(partials.len(), 1);
    let part_exists = || {
        std::fs::read_dir(app.root())
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(".p.bin.sluice-web-"))
    };
    // Within its time it stays, and resumes.
    let soon = SystemTime::now() + PARTIAL_TTL - Duration::from_secs(60);
    assert_eq!(partials.sweep(soon, PARTIAL_TTL), 0);
    assert!(part_exists());
    assert_eq!(json_of(c.get(base).await).await["have"], 400);
    // Past it, it goes, and the upload starts again from 0.
    let later = SystemTime::now() + PARTIAL_TTL + Duration::from_secs(60);
    assert_eq!(partials.sweep(later, PARTIAL_TTL), 1);
    assert!(!part_exists());
    assert!(partials.is_empty());
    assert_eq!(json_of(c.get(base).await).await["have"], 0);
    // An upload being written is not swept, however old its time.
    let spec = sluice::web::UploadSpec {
        path: "p.bin".into(),
        size: 1000,
        mtime: 5,
        policy: sluice::web::Policy::from_name("refuse").unwrap(),
    };
    let access = app.state.gate.admit("all-token").unwrap();
    let mut open = sluice::web::Upload::open(&access, spec, partials.clone()).unwrap();
    open.write(&counted(10)).unwrap();
    assert_eq!(partials.sweep(later, PARTIAL_TTL), 0);
    assert!(part_exists());
    drop(open);
    assert_eq!(partials.sweep(later, PARTIAL_TTL), 1);
    assert!(!part_exists());
}

#[tokio::test]
async fn an_upload_resumes_from_what_the_server_holds_and_is_checked() {
    let app = app();
    let c = Client::new(&app, "all-token").await;
    let data = counted(2_500_000);
    let hash = blake3::hash(&data).to_hex().to_string();
    let base = format!("/api/upload?path=in%2Fdata.bin&size={}&mtime=1700000000", data.len());
    assert_eq!(c.post("/api/mkdir", json!({ "path": "in" })).await.status(), StatusCode::OK);
    let status = json_of(c.get(&base).await).await;
    assert_eq!(status, json!({ "have": 0, "exists": null }));
    // The first part, as if the connection was cut after it.
    let first = json_of(c.put(&format!("{base}&offset=0"), data[..1_000_000].to_vec()).await).await;
    assert_eq!(first, json!({ "have": 1_000_000, "received": 1_000_000, "done": false }));
    assert_eq!(json_of(c.get(&base).await).await["have"], 1_000_000);
    assert!(!app.root().join("in/data.bin").exists());
    // A part at another offset is refused, saying where to send from.
    let wrong = c.put(&format!("{base}&offset=5"), data[5..10].to_vec()).await;
    assert_eq!(wrong.status(), StatusCode::CONFLICT);
    assert_eq!(json_of(wrong).await["have"], 1_000_000);
    // The rest, with the hash: only the rest moves.
    let rest = put_hashed(&c, &format!("{base}&offset=1000000"), &data[1_000_000..], &hash).await;
    let done = json_of(rest).await;
    assert_eq!(done["done"], true);
    assert_eq!(done["stored"], true);
    assert_eq!(done["received"], data.len() - 1_000_000, "only the rest moved");
    assert_eq!(done["blake3"], hash.as_str());
    assert_eq!(std::fs::read(app.root().join("in/data.bin")).unwrap(), data);
    let mtime = std::fs::metadata(app.root().join("in/data.bin")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::mtime(&mtime), 1_700_000_000);
    let names = std::fs::read_dir(app.root().join("in")).unwrap().count();
    assert_eq!(names, 1, "no partial file or lock is left");
    // Too many bytes, and a wrong hash, are refused; the wrong one leaves nothing.
    let over = c.put("/api/upload?path=o&size=2", b"abc".to_vec()).await;
    assert_eq!(over.status(), StatusCode::FORBIDDEN);
    let wrong = blake3::hash(b"xyz").to_hex();
    let bad = put_hashed(&c, "/api/upload?path=h&size=3", b"abc", wrong.as_str()).await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        std::fs::read_dir(app.root()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains('h'))
    );
}

/// A `PUT /api/upload` of `bytes` at `offset` with `X-Sluice-Blake3: hash`.
async fn put_hashed(c: &Client<'_>, uri: &str, bytes: &[u8], hash: &str) -> Response<Body> {
    c.put_with(uri, bytes.to_vec(), &[("x-sluice-blake3", hash)]).await
}

#[tokio::test]
async fn with_the_hash_later_a_complete_upload_waits_for_it_and_is_checked() {
    let app = app();
    let c = Client::new(&app, "all-token").await;
    let data = counted(1_500_000);
    let hash = blake3::hash(&data).to_hex().to_string();
    for (name, sent_hash, stored) in [
        ("good.bin", hash.clone(), true),
        ("bad.bin", blake3::hash(b"x").to_hex().to_string(), false),
    ] {
        let base = format!("/api/upload?path={name}&size={}&mtime=1700000000", data.len());
        // All the bytes, the hash to come: nothing is stored yet.
        let all = put_hashed(&c, &format!("{base}&offset=0"), &data, "later").await;
        let all = json_of(all).await;
        assert_eq!(all, json!({ "have": 1_500_000, "received": 1_500_000, "done": false }));
        assert!(!app.root().join(name).exists(), "{name}: stored before its hash came");
        assert_eq!(json_of(c.get(&base).await).await["have"], 1_500_000);
        // The hash, at the end, with no bytes.
        let end = put_hashed(&c, &format!("{base}&offset=1500000"), &[], &sent_hash).await;
        if stored {
            let done = json_of(end).await;
            assert_eq!((done["done"].clone(), done["stored"].clone()), (json!(true), json!(true)));
            assert_eq!(done["received"], 0);
            assert_eq!(done["blake3"], hash.as_str());
            assert_eq!(std::fs::read(app.root().join(name)).unwrap(), data);
        } else {
            assert_eq!(end.status(), StatusCode::UNPROCESSABLE_ENTITY);
            assert!(!app.root().join(name).exists(), "a wrong hash stored {name}");
            assert_eq!(json_of(c.get(&base).await).await["have"], 0, "nothing is kept");
        }
    }
    // Neither a hash nor `later`: refused as such.
    let odd = put_hashed(&c, "/api/upload?path=o.bin&size=1", b"o", "soon").await;
    assert_eq!(odd.status(), StatusCode::BAD_REQUEST);
}

async fn upload_with(
    c: &Client<'_>,
    path: &str,
    bytes: &[u8],
    mtime: i64,
    policy: &str,
) -> Response<Body> {
    let uri =
        format!("/api/upload?path={}&size={}&mtime={mtime}&policy={policy}", q(path), bytes.len());
    c.put(&uri, bytes.to_vec()).await
}

#[tokio::test]
async fn an_existing_file_asks_for_a_policy_and_each_is_kept() {
    let app = app();
    let c = Client::new(&app, "all-token").await;
    let file = |name: &str| std::fs::read(app.root().join(name)).unwrap();
    assert_eq!(upload_with(&c, "f.txt", b"one", 100, "").await.status(), StatusCode::OK);
    // Refused by default: the question; the bytes stay for the answer.
    let asked = upload_with(&c, "f.txt", b"two", 200, "").await;
    assert_eq!(asked.status(), StatusCode::CONFLICT);
    assert_eq!(json_of(asked).await["error"], "exists");
    let status = json_of(c.get("/api/upload?path=f.txt&size=3&mtime=200").await).await;
    assert_eq!(status["have"], 3);
    assert_eq!(status["exists"]["mtime"], 100);
    // Skip.
    let skipped = json_of(
        c.put("/api/upload?path=f.txt&size=3&mtime=200&offset=3&policy=never", vec![]).await,
    )
    .await;
    assert_eq!(skipped["stored"], false);
    assert_eq!(file("f.txt"), b"one");
    // If newer: an older source is skipped, a newer one replaces.
    let older = json_of(upload_with(&c, "f.txt", b"old", 50, "if-newer").await).await;
    assert_eq!((older["stored"].clone(), file("f.txt")), (json!(false), b"one".to_vec()));
    let newer = json_of(upload_with(&c, "f.txt", b"new", 300, "if-newer").await).await;
    assert_eq!((newer["stored"].clone(), file("f.txt")), (json!(true), b"new".to_vec()));
    // Keep both, twice.
    for (n, bytes) in [(1, b"kb1"), (2, b"kb2")] {
        let kept = json_of(upload_with(&c, "f.txt", bytes, 400, "keep-both").await).await;
        assert_eq!(kept["name"], format!("f ({n}).txt"));
        assert_eq!(file(&format!("f ({n}).txt")), bytes);
    }
    // Replace.
    let replaced = json_of(upload_with(&c, "f.txt", b"rep", 500, "always").await).await;
    assert_eq!((replaced["stored"].clone(), file("f.txt")), (json!(true), b"rep".to_vec()));
    let bad = upload_with(&c, "f.txt", b"x", 1, "sometimes").await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    // A folder is never replaced by a file.
    let folder = upload_with(&c, "pub", b"x", 1, "always").await;
    assert_eq!(folder.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn names_of_any_kind_round_trip() {
    let app = app();
    let c = Client::new(&app, "all-token").await;
    for name in
        ["<img src=x onerror=alert(1)>", "quote\"'s", "new\nline", "\u{202e}txt.exe", "sp ace"]
    {
        let up = upload_with(&c, name, name.as_bytes(), 1, "").await;
        assert_eq!(up.status(), StatusCode::OK, "{name:?}");
        let got = c.get(&format!("/api/file?path={}", q(name))).await;
        assert!(got.headers()[header::CONTENT_DISPOSITION].to_str().is_ok());
        assert_eq!(bytes_of(got).await, name.as_bytes());
    }
    let list = json_of(c.get("/api/list?path=").await).await;
    assert!(
        list["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "<img src=x onerror=alert(1)>")
    );
}
