//! The WebTransport side with a real client (`wtransport` over loopback, pinning the
//! certificate by its hash as a page does): the login, rights and root held as over HTTPS, the
//! certificate's rules and its rotation; and what the transfers' tests share (downloads and
//! uploads run by the transfer machines are `fetch_tests.rs`' and `store_tests.rs`'). The files'
//! bytes come from a seeded generator (seed printed).

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};
use sluice::session::Gate;
use sluice::session::path_memory::PathMemory;
use sluice::session::tokens::TokenSet;
use wtransport::tls::Sha256Digest;
use wtransport::{ClientConfig, Connection, Endpoint};

use super::super::app::AppState;
use super::super::auth::LoginLimits;
use super::{Counters, WtListener, cert};

const TOKENS: &str = "all-token\nread-token rights=read,list root=pub\n";
pub(super) const SEED: u32 = 0x5eed_0029;

/// `n` bytes from a xorshift32 of `seed`.
pub(super) fn bytes(seed: u32, n: usize) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as u8
        })
        .collect()
}

pub(super) struct Served {
    pub(super) state: AppState,
    pub(super) counters: Arc<Counters>,
    addr: SocketAddr,
    pub(super) hash: [u8; 32],
    dir: tempfile::TempDir,
    pub(super) stop: tokio::sync::oneshot::Sender<()>,
}

pub(super) async fn serve() -> Served {
    serve_lanes(super::LANES).await
}

/// [`serve`], pages told to open `lanes` sessions.
pub(super) async fn serve_lanes(lanes: u32) -> Served {
    serve_with(lanes, None).await
}

/// [`serve_lanes`], with the server's path memory `memory`.
pub(super) async fn serve_with(lanes: u32, memory: Option<Arc<PathMemory>>) -> Served {
    eprintln!("wt tests: seed {SEED:#x}");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("pub")).unwrap();
    let gate = Gate::new(&root, TokenSet::parse(TOKENS).unwrap()).unwrap();
    let counters = Arc::new(Counters::default());
    let listener = WtListener::bind("127.0.0.1:0".parse().unwrap(), counters.clone()).unwrap();
    let listener = listener.with_lanes(lanes).with_path_memory(memory);
    let addr = listener.local_addr().unwrap();
    let hash = listener.shared().cert().sha256;
    let state =
        AppState::new(gate, "SHA256:test".into(), LoginLimits::DEFAULT).with_wt(listener.shared());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listener.serve(state.clone(), async move {
        let _ = stopped.await;
    }));
    Served { state, counters, addr, hash, dir, stop }
}

impl Served {
    pub(super) fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("root")
    }

    /// A ticket of a new login with `token`, and the login's id.
    pub(super) fn ticket(&self, token: &str) -> (String, String) {
        let (id, _) = self.state.logins.login(token, [127, 0, 0, 1].into()).unwrap();
        self.ticket_of(&id)
    }

    /// Another ticket of login `id` (a page's next lane), and the id.
    pub(super) fn ticket_of(&self, id: &str) -> (String, String) {
        (self.state.logins.ticket(id), id.to_owned())
    }

    pub(super) async fn connect_with(
        &self,
        ticket: &str,
        hash: [u8; 32],
    ) -> anyhow::Result<Connection> {
        self.connect_to(&format!("https://{}/wt?ticket={ticket}", self.addr), hash).await
    }

    /// A session of the page named `page` (its lanes name it: see `push.rs`).
    pub(super) async fn connect_page(
        &self,
        ticket: &str,
        page: &str,
    ) -> anyhow::Result<Connection> {
        let url = format!("https://{}/wt?ticket={ticket}&page={page}", self.addr);
        self.connect_to(&url, self.hash).await
    }

    async fn connect_to(&self, url: &str, hash: [u8; 32]) -> anyhow::Result<Connection> {
        let config = ClientConfig::builder()
            .with_bind_default()
            .with_server_certificate_hashes([Sha256Digest::new(hash)])
            .build();
        Ok(Endpoint::client(config)?.connect(url).await?)
    }

    pub(super) async fn connect(&self, token: &str) -> (Connection, String) {
        let (ticket, id) = self.ticket(token);
        (self.connect_with(&ticket, self.hash).await.unwrap(), id)
    }
}

/// Whether `check` holds within 5 s (looked at every 20 ms).
pub(super) async fn eventually(check: impl Fn() -> bool) -> bool {
    for _ in 0..250 {
        if check() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    check()
}

/// The name of the threads of [`panics_as_the_server_goes`]'s server.
const GOING_SERVER: &str = "wt-going-server";

/// Panics in threads of the server's (its runtime's, its data threads `sluice-*`), as
/// "thread: message", in the order they happened.
fn server_panics() -> &'static std::sync::Mutex<Vec<String>> {
    static PANICS: std::sync::OnceLock<std::sync::Mutex<Vec<String>>> = std::sync::OnceLock::new();
    PANICS.get_or_init(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or_default().to_owned();
            if thread.starts_with(GOING_SERVER) || thread.starts_with("sluice-") {
                let mut panics = server_panics().lock().unwrap_or_else(|e| e.into_inner());
                panics.push(format!("{thread}: {info}"));
            }
            before(info);
        }));
        std::sync::Mutex::default()
    })
}

/// Serves on a runtime of its own, runs `page` (on another runtime) until it has left a
/// transfer under way at the server, then drops the server's runtime as `sluice serve`'s end
/// does (its tasks dropped, its timers gone, its blocking threads waited for), and returns the
/// panics of the server's threads meanwhile. What `page` returns (its sessions) lives until
/// the server has gone.
pub(super) fn panics_as_the_server_goes<T>(page: impl AsyncFnOnce(&Served) -> T) -> Vec<String> {
    let runtime = |threads: usize, name: &str| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .unwrap()
    };
    let before = server_panics().lock().unwrap().len();
    let server = runtime(2, GOING_SERVER);
    let pages = runtime(1, "wt-page");
    let s = server.block_on(serve());
    let held = pages.block_on(page(&s));
    drop(server);
    let panics = server_panics().lock().unwrap()[before..].to_vec();
    {
        let _in = pages.enter();
        drop((held, s));
    }
    pages.shutdown_background();
    panics
}

pub(super) async fn write_head(send: &mut wtransport::SendStream, head: &Value) {
    let json = serde_json::to_vec(head).unwrap();
    send.write_all(&(json.len() as u32).to_be_bytes()).await.unwrap();
    send.write_all(&json).await.unwrap();
}

pub(super) async fn read_head(recv: &mut wtransport::RecvStream) -> Value {
    let mut len = [0u8; 4];
    recv.read_exact(&mut len).await.unwrap();
    let mut head = vec![0u8; u32::from_be_bytes(len) as usize];
    recv.read_exact(&mut head).await.unwrap();
    serde_json::from_slice(&head).unwrap()
}

/// A request with an optional body; its answer's head and the stream's remaining bytes.
pub(super) async fn request(conn: &Connection, head: Value, body: &[u8]) -> (Value, Vec<u8>) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap().await.unwrap();
    write_head(&mut send, &head).await;
    send.write_all(body).await.unwrap();
    send.finish().await.unwrap();
    let answer = read_head(&mut recv).await;
    let mut rest = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while let Some(n) = recv.read(&mut buf).await.unwrap() {
        rest.extend_from_slice(&buf[..n]);
    }
    (answer, rest)
}

/// Opens a transfer (`fetch` or `store`): its control stream (kept open) and the first frame
/// (a head, or the machine's first message: both are 4 bytes of length, then JSON).
async fn open(
    conn: &Connection,
    head: Value,
) -> (wtransport::SendStream, wtransport::RecvStream, Value) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap().await.unwrap();
    write_head(&mut send, &head).await;
    let answer = read_head(&mut recv).await;
    (send, recv, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_rights_and_root_hold_as_over_https() {
    let s = serve().await;
    std::fs::write(s.root().join("pub/a.txt"), b"in pub").unwrap();
    std::fs::write(s.dir.path().join("outside.txt"), b"secret").unwrap();
    // No ticket, a made-up one, or one used already: no session.
    assert!(s.connect_with("", s.hash).await.is_err());
    assert!(s.connect_with(&"ab".repeat(32), s.hash).await.is_err());
    let (ticket, _) = s.ticket("read-token");
    let conn = s.connect_with(&ticket, s.hash).await.unwrap();
    assert!(s.connect_with(&ticket, s.hash).await.is_err(), "a ticket is used once");
    // A page's name is short and plain, or the session is refused (the ticket is not spent).
    let (ticket, _) = s.ticket("read-token");
    for bad in ["a%20b", "a/b", &"p".repeat(65), ""] {
        assert!(s.connect_page(&ticket, bad).await.is_err(), "page {bad:?}");
    }
    assert!(s.connect_page(&ticket, "a-page_1").await.is_ok());
    // The read token's root is pub/, and it may not write. A download's first answer is its
    // machine's: the manifest, or the failure that says why not.
    let (_c, _r, opened) =
        open(&conn, json!({ "op": "fetch", "paths": ["a.txt"], "tag": 1 })).await;
    assert_eq!(opened["type"], "manifest", "{opened}");
    let outside = json!({ "op": "fetch", "paths": ["../outside.txt"], "tag": 2 });
    let (_c, _r, outside) = open(&conn, outside).await;
    assert_eq!(
        (&outside["type"], &outside["code"]),
        (&json!("failed"), &json!("refused")),
        "{outside}"
    );
    let up = json!({ "op": "store", "path": "new.bin", "tag": 3 });
    let (_c, _r, refused) = open(&conn, up).await;
    assert_eq!(
        (&refused["type"], &refused["code"]),
        (&json!("failed"), &json!("refused")),
        "{refused}"
    );
    assert!(!s.root().join("pub/new.bin").exists());
    // Logged out: the session's requests are refused.
    let (conn, id) = s.connect("all-token").await;
    s.state.logins.logout(&id);
    let gone = conn.open_bi().await.unwrap().await;
    if let Ok((mut send, mut recv)) = gone {
        let _ = send.write_all(b"\0\0\0\x02{}").await;
        let mut buf = [0u8; 64];
        let answer = recv.read(&mut buf).await;
        assert!(!matches!(answer, Ok(Some(_))), "no answer after a logout: {answer:?}");
    }
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_is_p256_of_under_14_days_and_rotates() {
    let now = time::OffsetDateTime::now_utc();
    let c = cert::make(vec!["localhost".into()], now).unwrap();
    assert!(c.not_after - c.not_before <= time::Duration::days(14));
    assert!(c.not_before < now && now < c.not_after);
    assert!(cert::ROTATE_EVERY < cert::VALIDITY / 2, "rotated well before its end");
    let s = serve().await;
    let listener = WtListener::bind("127.0.0.1:0".parse().unwrap(), Arc::default()).unwrap();
    let old = listener.shared().cert().sha256;
    listener.rotate().unwrap();
    let new = listener.shared().cert().sha256;
    assert_ne!(old, new);
    assert_eq!(listener.shared().hashes(), vec![cert::hex(&new)]);
    let addr = listener.local_addr().unwrap();
    let state = s.state.clone().with_wt(listener.shared());
    tokio::spawn(listener.serve(state, std::future::pending()));
    let served = Served { addr, hash: new, ..s };
    let (ticket, _) = served.ticket("all-token");
    // The client checks what a browser checks: the hash, P-256, at most two weeks.
    assert!(served.connect_with(&ticket, old).await.is_err(), "the old hash is not served");
    let (ticket, _) = served.ticket("all-token");
    assert!(served.connect_with(&ticket, new).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_hears_whether_its_lanes_started_from_path_memory() {
    let dir = tempfile::tempdir().unwrap();
    let memory = Arc::new(PathMemory::at(dir.path().join("paths.json")));
    // What a download over loopback kept: 80 Mbit/s, a least RTT of 0.5 ms.
    let key = PathMemory::key("a browser at 127.0.0.1", Some([127, 0, 0, 1].into()));
    let kept = sluice::datapath::ChannelReport {
        path_rate_bps: Some(80_000_000),
        min_rtt_us: Some(500),
        payload_bytes: 10_000_000,
        seconds: 1.0,
        ..Default::default()
    };
    assert!(memory.remember(&key, &kept, std::time::SystemTime::now()).is_some());
    let served = serve_with(2, Some(memory)).await;
    let path = json!({ "op": "path" });
    // The login's first session makes its lanes' group: from the record.
    let (first, id) = served.connect("all-token").await;
    let (answer, _) = request(&first, path.clone(), &[]).await;
    assert_eq!(answer["memory"]["rate_bps"], 80_000_000, "{answer}");
    assert!(answer["memory"]["age_s"].as_u64().is_some_and(|age| age < 60), "{answer}");
    // Its second lane joins that group: it started nothing.
    let (ticket, _) = served.ticket_of(&id);
    let second = served.connect_with(&ticket, served.hash).await.unwrap();
    assert_eq!(request(&second, path.clone(), &[]).await.0, json!({ "memory": null }));
    // Another login's group starts from the record too; one on a server without memory, not.
    let (other, _) = served.connect("all-token").await;
    assert_eq!(request(&other, path.clone(), &[]).await.0["memory"]["rate_bps"], 80_000_000);
    let plain = serve().await;
    let (conn, _) = plain.connect("all-token").await;
    assert_eq!(request(&conn, path, &[]).await.0, json!({ "memory": null }));
}
