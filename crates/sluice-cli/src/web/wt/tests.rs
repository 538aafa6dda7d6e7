//! The WebTransport side with a real client (`wtransport` over loopback, pinning the
//! certificate by its hash as a page does): blocks on several streams verified by BLAKE3, an
//! upload taken out of order and written in order, a cancelled upload resumed with only the rest
//! sent, the overwrite policy, the login, rights and root held as over HTTPS, the certificate's
//! rules and its rotation. The files' bytes come from a seeded generator (seed printed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use sluice::session::Gate;
use sluice::session::tokens::TokenSet;
use wtransport::tls::Sha256Digest;
use wtransport::{ClientConfig, Connection, Endpoint};

use super::super::app::AppState;
use super::super::auth::LoginLimits;
use super::{BLOCK_BYTES, Counters, WtListener, cert};

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
    state: AppState,
    pub(super) counters: Arc<Counters>,
    addr: SocketAddr,
    hash: [u8; 32],
    dir: tempfile::TempDir,
    pub(super) stop: tokio::sync::oneshot::Sender<()>,
}

pub(super) async fn serve() -> Served {
    eprintln!("wt tests: seed {SEED:#x}");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("pub")).unwrap();
    let gate = Gate::new(&root, TokenSet::parse(TOKENS).unwrap()).unwrap();
    let counters = Arc::new(Counters::default());
    let listener = WtListener::bind("127.0.0.1:0".parse().unwrap(), counters.clone()).unwrap();
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
    fn ticket(&self, token: &str) -> (String, String) {
        let (id, _) = self.state.logins.login(token, [127, 0, 0, 1].into()).unwrap();
        (self.state.logins.ticket(&id), id)
    }

    async fn connect_with(&self, ticket: &str, hash: [u8; 32]) -> anyhow::Result<Connection> {
        let config = ClientConfig::builder()
            .with_bind_default()
            .with_server_certificate_hashes([Sha256Digest::new(hash)])
            .build();
        let url = format!("https://{}/wt?ticket={ticket}", self.addr);
        Ok(Endpoint::client(config)?.connect(url).await?)
    }

    pub(super) async fn connect(&self, token: &str) -> (Connection, String) {
        let (ticket, id) = self.ticket(token);
        (self.connect_with(&ticket, self.hash).await.unwrap(), id)
    }
}

pub(super) async fn write_head(send: &mut wtransport::SendStream, head: &Value) {
    let json = serde_json::to_vec(head).unwrap();
    send.write_all(&(json.len() as u32).to_be_bytes()).await.unwrap();
    send.write_all(&json).await.unwrap();
}

async fn read_head(recv: &mut wtransport::RecvStream) -> Value {
    let mut len = [0u8; 4];
    recv.read_exact(&mut len).await.unwrap();
    let mut head = vec![0u8; u32::from_be_bytes(len) as usize];
    recv.read_exact(&mut head).await.unwrap();
    serde_json::from_slice(&head).unwrap()
}

/// A request with an optional body; its answer's head and the stream's remaining bytes.
async fn request(conn: &Connection, head: Value, body: &[u8]) -> (Value, Vec<u8>) {
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

/// Opens a transfer (`down` or `up`): its control stream (kept open) and the first answer.
async fn open(
    conn: &Connection,
    head: Value,
) -> (wtransport::SendStream, wtransport::RecvStream, Value) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap().await.unwrap();
    write_head(&mut send, &head).await;
    let answer = read_head(&mut recv).await;
    (send, recv, answer)
}

fn put_head(id: u64, offset: u64, block: &[u8]) -> Value {
    json!({ "op": "put", "id": id, "offset": offset, "len": block.len(),
            "blake3": blake3::hash(block).to_hex().as_str() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_in_blocks_on_four_streams_each_verified() {
    let s = serve().await;
    let size = 3 * BLOCK_BYTES as usize + 12_345;
    let data = bytes(SEED, size);
    std::fs::write(s.root().join("pub/big.bin"), &data).unwrap();
    let (conn, _) = s.connect("all-token").await;
    let (control, _control_recv, opened) =
        open(&conn, json!({ "op": "down", "path": "pub/big.bin" })).await;
    assert_eq!(opened["size"], size);
    assert!(opened["etag"].as_str().unwrap().starts_with('"'));
    let id = opened["id"].as_u64().unwrap();
    let blocks: Vec<(u64, u64)> = (0..size as u64)
        .step_by(BLOCK_BYTES as usize)
        .map(|at| (at, BLOCK_BYTES.min(size as u64 - at)))
        .collect();
    assert_eq!(blocks.len(), 4);
    let fetches = blocks.iter().map(|&(offset, len)| {
        let conn = conn.clone();
        async move {
            let head = json!({ "op": "get", "id": id, "offset": offset, "len": len });
            (offset, request(&conn, head, &[]).await)
        }
    });
    let mut got = vec![0u8; size];
    let mut tree = sluice_wasm::tree::Tree::new(size as u64, BLOCK_BYTES).unwrap();
    for (offset, (head, block)) in futures_util::future::join_all(fetches).await {
        assert_eq!(head["cv"], cv(&block, offset, size as u64), "block {offset}");
        tree.add(offset, &block).unwrap();
        got[offset as usize..offset as usize + block.len()].copy_from_slice(&block);
    }
    assert!(got == data, "the blocks make the file");
    // The page puts the file's BLAKE3 together from the blocks' hashes.
    assert_eq!(&tree.file_hash().unwrap(), blake3::hash(&data).as_bytes());
    // A block that is no subtree of the file's tree has no such hash: refused.
    let askew = json!({ "op": "get", "id": id, "offset": 1024, "len": BLOCK_BYTES });
    let (refused, rest) = request(&conn, askew, &[]).await;
    assert_eq!(refused["error"], "bad-request", "{refused}");
    assert!(rest.is_empty());
    assert_eq!(s.counters.sent.load(Ordering::Relaxed), size as u64);
    // A block outside the file, or of another transfer, is refused.
    let beyond = json!({ "op": "get", "id": id, "offset": size, "len": 1 });
    assert_eq!(request(&conn, beyond, &[]).await.0["error"], "bad-request");
    let other = json!({ "op": "get", "id": id + 7, "offset": 0, "len": 1 });
    assert_eq!(request(&conn, other, &[]).await.0["error"], "not-found");
    drop(control);
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_out_of_order_cancelled_and_resumed_sends_only_the_rest() {
    let s = serve().await;
    let size = 5 * BLOCK_BYTES as usize + 999;
    let data = bytes(SEED ^ 1, size);
    let block = |i: usize| {
        let at = i * BLOCK_BYTES as usize;
        (at as u64, &data[at..(at + BLOCK_BYTES as usize).min(size)])
    };
    let (conn, _) = s.connect("all-token").await;
    let up = json!({ "op": "up", "path": "pub/up.bin", "size": size, "mtime": 1_700_000_000 });
    let (control, _r, opened) = open(&conn, up.clone()).await;
    assert_eq!(opened["have"], 0);
    let id = opened["id"].as_u64().unwrap();
    // Block 2 before 0 and 1: held, not written, until they are in.
    let (at, b) = block(2);
    assert_eq!(request(&conn, put_head(id, at, b), b).await.0["have"], 0);
    let (at, b) = block(0);
    assert_eq!(request(&conn, put_head(id, at, b), b).await.0["have"], BLOCK_BYTES);
    // A block whose bytes do not hash to its BLAKE3 is refused and not taken.
    let (at, b) = block(1);
    let mut bad = b.to_vec();
    bad[77] ^= 1;
    assert_eq!(request(&conn, put_head(id, at, b), &bad).await.0["error"], "integrity");
    assert_eq!(request(&conn, put_head(id, at, b), b).await.0["have"], 3 * BLOCK_BYTES);
    // The page goes (its control stream ends): the upload ends, its prefix kept.
    drop(control);
    drop(_r);
    let held = 3 * BLOCK_BYTES;
    let before = s.counters.received.load(Ordering::Relaxed);
    // Resumed on a new session: the server says what it holds, the rest moves.
    let (conn, _) = s.connect("all-token").await;
    let (mut control, mut control_recv, opened) = loop {
        let (c, r, opened) = open(&conn, up.clone()).await;
        // The old session's end may not have reached the server yet: busy until it has.
        if opened["error"] != "busy" {
            break (c, r, opened);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(opened["have"], held, "{opened}");
    let id = opened["id"].as_u64().unwrap();
    for i in [4, 3, 5] {
        let (at, b) = block(i);
        let answer = request(&conn, put_head(id, at, b), b).await.0;
        assert!(answer["have"].is_u64(), "{answer}");
    }
    write_head(&mut control, &json!({ "blake3": blake3::hash(&data).to_hex().as_str() })).await;
    control.finish().await.unwrap();
    let done = read_head(&mut control_recv).await;
    assert_eq!(done["stored"], true, "{done}");
    assert_eq!(done["received"], size as u64 - held);
    let moved = s.counters.received.load(Ordering::Relaxed) - before;
    println!("wt upload resumed: {held} kept, {moved} moved of {size}");
    assert_eq!(moved, size as u64 - held, "only the rest moved");
    assert!(std::fs::read(s.root().join("pub/up.bin")).unwrap() == data);
    // The same upload again: the file exists, refused without a policy; kept both with one.
    let (mut control, mut recv, opened) = open(&conn, up.clone()).await;
    let id = opened["id"].as_u64().unwrap();
    for i in 0..6 {
        let (at, b) = block(i);
        request(&conn, put_head(id, at, b), b).await;
    }
    write_head(&mut control, &json!({ "blake3": blake3::hash(&data).to_hex().as_str() })).await;
    assert_eq!(read_head(&mut recv).await["error"], "exists");
    let mut keep = up.clone();
    keep["policy"] = json!("keep-both");
    let (mut control, mut recv, opened) = open(&conn, keep).await;
    assert_eq!(opened["have"], size, "the complete partial file stayed for another policy");
    write_head(&mut control, &json!({ "blake3": blake3::hash(&data).to_hex().as_str() })).await;
    let done = read_head(&mut recv).await;
    assert_eq!(done["name"], "up (1).bin", "{done}");
    assert!(std::fs::read(s.root().join("pub/up (1).bin")).unwrap() == data);
    let _ = s.stop.send(());
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
    // The read token's root is pub/, and it may not write.
    let (_c, _r, opened) = open(&conn, json!({ "op": "down", "path": "a.txt" })).await;
    assert_eq!(opened["size"], 6);
    let (_c, _r, outside) = open(&conn, json!({ "op": "down", "path": "../outside.txt" })).await;
    assert_eq!(outside["error"], "refused", "{outside}");
    let up = json!({ "op": "up", "path": "new.bin", "size": 3, "mtime": 0 });
    let (_c, _r, refused) = open(&conn, up).await;
    assert_eq!(refused["error"], "refused", "{refused}");
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
async fn a_transfers_blocks_go_over_any_session_of_its_login_and_no_other() {
    let s = serve().await;
    let size = BLOCK_BYTES as usize + 777;
    let data = bytes(SEED ^ 0x1a9e, size);
    std::fs::write(s.root().join("lanes.bin"), &data).unwrap();
    let (a, id) = s.connect("all-token").await;
    // A second session of the same login (a page's second lane: a new ticket of its login).
    let b = s.connect_with(&s.state.logins.ticket(&id), s.hash).await.unwrap();
    // Another login, even of the same token, sees only its own transfers.
    let (other, _) = s.connect("all-token").await;
    let (mut control, _recv, opened) = open(&a, json!({ "op": "down", "path": "lanes.bin" })).await;
    let tid = opened["id"].as_u64().unwrap();
    let get =
        |offset: u64, len: u64| json!({ "op": "get", "id": tid, "offset": offset, "len": len });
    let (head0, block0) = request(&b, get(0, BLOCK_BYTES), &[]).await;
    let (head1, block1) = request(&a, get(BLOCK_BYTES, 777), &[]).await;
    assert_eq!(block0, data[..BLOCK_BYTES as usize], "block 0 over the second session");
    assert_eq!(block1, data[BLOCK_BYTES as usize..], "block 1 over the first");
    assert_eq!(head0["cv"], cv(&block0, 0, size as u64));
    assert_eq!(head1["cv"], cv(&block1, BLOCK_BYTES, size as u64));
    let (refused, rest) = request(&other, get(0, BLOCK_BYTES), &[]).await;
    assert_eq!(refused["error"], "not-found", "another login's session: {refused}");
    assert!(rest.is_empty(), "no byte of it");
    // The control stream ends: the transfer is gone on every session.
    control.finish().await.unwrap();
    let mut gone = Value::Null;
    for _ in 0..100 {
        gone = request(&b, get(0, 777), &[]).await.0;
        if gone["error"] == "not-found" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(gone["error"], "not-found", "after its end: {gone}");
    let _ = s.stop.send(());
}

/// What `get` answers for `block` at `offset` of a file of `size` bytes: its hash in the file's
/// BLAKE3 tree, in hex.
fn cv(block: &[u8], offset: u64, size: u64) -> String {
    let hash = sluice_wasm::tree::block_hash(block, offset, size).unwrap();
    blake3::Hash::from(hash).to_hex().to_string()
}
