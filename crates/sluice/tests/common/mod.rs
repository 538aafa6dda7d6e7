//! A server on 127.0.0.1 in the test's runtime, with its root, state and token file in a
//! temporary directory, and clients that trust it.

#![allow(dead_code, unreachable_pub)]

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice::session::{
    Client, ClientConfig, Credentials, Fingerprint, Metrics, Server, ServerConfig, SessionError,
    TrustPolicy,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[path = "../../../../tools/testing/skip.rs"]
mod skip;
#[allow(unused_imports)] // not every test file skips
pub use skip::skip_or_fail;

/// The token every test server accepts.
pub const TOKEN: &str = "test-token-0123456789";

/// Writes an owner-only file.
pub fn write_private(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

/// The state directory of [`server_config`]'s server in `dir`.
pub fn state_dir(dir: &Path) -> PathBuf {
    dir.join("state")
}

/// The token file of [`server_config`]'s server in `dir`.
pub fn tokens_file(dir: &Path) -> PathBuf {
    dir.join("tokens")
}

/// Settings of a server in `dir`: `dir/root` served, `dir/state`, `dir/tokens`.
pub fn server_config(dir: &Path) -> ServerConfig {
    let root = dir.join("root");
    fs::create_dir_all(&root).unwrap();
    let tokens_file = tokens_file(dir);
    if !tokens_file.exists() {
        write_private(&tokens_file, &format!("# test tokens\n\n{TOKEN}\n"));
    }
    ServerConfig {
        root,
        listen: "127.0.0.1:0".parse().unwrap(),
        credentials: Credentials::Stored { state_dir: state_dir(dir), tokens_file },
        idle_timeout: Duration::from_secs(30),
        max_channels: None,
        digest_timeout: None,
        fault: None,
        third_party: Default::default(),
        tcp: true,
        spool: None,
        path_memory: false,
        relays: Vec::new(),
    }
}

/// A running server.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
    pub fingerprint: Fingerprint,
    /// The server's counters, live.
    pub metrics: std::sync::Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), SessionError>>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    /// A server whose settings `adjust` changed first.
    pub async fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        Self::start_in(tempfile::tempdir().unwrap(), adjust).await
    }

    /// Stops the server and starts it again in the same directory (the same root, tokens,
    /// identity and state directory), on a port of its own, as a restarted process would.
    pub async fn restart_in_place(mut self) -> TestServer {
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        self.stop().await;
        Self::start_in(dir, |_| {}).await
    }

    /// A server in `dir` (kept while it runs) whose settings `adjust` changed first.
    async fn start_in(
        dir: tempfile::TempDir,
        adjust: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let mut config = server_config(dir.path());
        adjust(&mut config);
        let server = Server::bind(config).unwrap();
        let addr = server.local_addr();
        let fingerprint = server.fingerprint().clone();
        let metrics = server.metrics();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        TestServer { dir, addr, fingerprint, metrics, stop: Some(stop), task: Some(task) }
    }

    /// The served directory.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// A known-hosts path of the test (not created).
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("client").join("known_hosts")
    }

    /// Client settings pinning this server explicitly.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig::new(
            self.addr,
            "127.0.0.1",
            TOKEN,
            self.known_hosts(),
            TrustPolicy::Pinned(self.fingerprint.clone()),
        )
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.client_config()).await.expect("client connects")
    }

    /// Stops the server and waits for `run` to return.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(15), task)
                .await
                .expect("server stops in time")
                .unwrap()
                .unwrap();
        }
    }
}

/// Deterministic test content.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed).collect()
}

/// Names in `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A bare QUIC connection to `server` that trusts it, for tests that speak the control protocol
/// by hand.
pub async fn raw_connect(server: &TestServer) -> (quinn::Endpoint, quinn::Connection) {
    let endpoint = raw_endpoint(server, "127.0.0.1:0".parse().unwrap());
    let conn = endpoint.connect(server.addr, "sluice").unwrap().await.unwrap();
    (endpoint, conn)
}

/// A bare QUIC client endpoint on `bind` that trusts `server` (its connections are made with
/// `endpoint.connect(server.addr, "sluice")`).
pub fn raw_endpoint(server: &TestServer, bind: SocketAddr) -> quinn::Endpoint {
    use sluice::session::known_hosts::{HostVerifier, KnownHosts, host_key};
    use std::sync::Arc;
    let known = KnownHosts::load(&server.known_hosts()).unwrap();
    let verifier = HostVerifier::new(
        TrustPolicy::Pinned(server.fingerprint.clone()),
        known,
        host_key("127.0.0.1", server.addr.port()),
    );
    let config = quinn::ClientConfig::new(Arc::new(verifier.client_tls().unwrap()));
    let mut endpoint = quinn::Endpoint::client(bind).unwrap();
    endpoint.set_default_client_config(config);
    endpoint
}

/// A `Hello` with `token` and the default proposal (4 channels offered).
pub fn hello(token: &str) -> sluice::session::messages::Request {
    sluice::session::messages::Request::Hello {
        version: sluice::session::PROTOCOL_VERSION,
        token: token.into(),
        spec: sluice::session::messages::Spec {
            max_channels: 4,
            packet_size: 1452,
            cc: "adaptive".into(),
            cipher: "aes-256-gcm".into(),
            rate_bps: 0,
            min_rate_bps: 0,
            grow_streams: false,
        },
        grant: None,
    }
}

/// Whether everything in `dir` is what an interrupted transfer keeps for a resume: partial
/// files (`.<name>.sluice-part-<hex>`) and their records (`.<name>.sluice-resume`), nothing
/// under a final name.
pub fn only_resumable_leftovers(dir: &Path) -> bool {
    listing(dir).iter().all(|n| n.contains(".sluice-part-") || n.ends_with(".sluice-resume"))
}
