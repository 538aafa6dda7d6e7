//! One WebTransport session: each request is a bidirectional stream the page opens. A request
//! and its answer each begin with a head: 4 bytes of length (big-endian) and that much JSON.
//! A failed request is answered `{"error": code, "message": text}` as over HTTPS.
//!
//! | request head                                   | then                                  |
//! |------------------------------------------------|---------------------------------------|
//! | `{op:"up", path, size, mtime, policy, rate_bps}` | `{id, have}`; later the page sends `{blake3}` (the whole file's), answered as `PUT /api/upload`'s completion; ending the stream instead cancels, keeping what was written |
//! | `{op:"put", id, offset, len, blake3}`, then `len` bytes | `{have}` once the block hashed to `blake3` and is taken |
//! | `{op:"store", path, policy, tag, rate_bps}`     | no answer head: the stream carries an upload run by the transfer machines (the page's `Sending`, the server's `Receiving`: the CLI's planning by the overwrite policy, resume from a partial file, verified placement); the bytes come on the page's streams of `tag` (`gather.rs`); `keep-both` stores beside an existing file under the next free name |
//! | `{op:"piece", tag, phase, offset, len}`, then `len` bytes | `{}` once the piece is taken by the `store` of that tag of the same page (`gather.rs`) |
//! | `{op:"fetch", paths, tag, rate_bps, early}`     | no answer head: the stream carries a download run by the transfer machines (the server's `Sending`, the page's `Receiving`), their messages in their framing; the bytes come on the server's streams (`push.rs`); `early`: they start right behind the manifest (the page holds nothing of it) |
//!
//! A `fetch`, `store` or `up` takes a place among its token's and the server's transfers, as the HTTPS
//! request does, for as long as its stream is open; an upload's blocks, on their own streams (and
//! on the other sessions of the same login: see [`Registry`]), share its count and its pace, as a
//! download's pieces on its page's sessions do. Upload
//! blocks may arrive out of order: each is checked against its BLAKE3 when it is in, kept until
//! those before it are written (at most [`REORDER_BYTES_MAX`]), and the file is written in
//! order, so what the server holds is always a prefix, and a resumed upload sends only what lies
//! beyond it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use sluice::web::{Pace, Policy, Upload};
use tokio::task::JoinSet;
use wtransport::{Connection, RecvStream, SendStream};

use super::super::api::{UploadQuery, finish_upload};
use super::super::request::{ApiError, AppState, blocking};
use super::flow::{Flow, PIECE_BYTES};
use super::gather::{PieceHead, Routes};
use super::pages::Pages;
use super::{BLOCK_BYTES_MAX, Counters};

/// The largest request head.
const HEAD_BYTES_MAX: u32 = 8 << 10;
/// Transfers one session may hold open at once (its token's limit applies too).
const TRANSFERS_MAX: usize = 16;
/// Bytes of an upload held out of order, waiting for the blocks before them.
pub(crate) const REORDER_BYTES_MAX: u64 = 32 << 20;
/// Blocks one session moves at once (each in memory while it moves, at most
/// [`BLOCK_BYTES_MAX`]); more wait their turn.
const BLOCKS_AT_ONCE: usize = 8;

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Request {
    Up(UploadQuery),
    Put {
        id: u64,
        offset: u64,
        len: u64,
        blake3: String,
    },
    Store {
        /// The file's path on the server.
        path: String,
        /// The overwrite policy's name (`refuse` when none).
        #[serde(default)]
        policy: Option<String>,
        /// The page's name for the upload, in its pieces' heads.
        tag: u64,
        #[serde(default)]
        rate_bps: Option<u64>,
    },
    Piece(PieceHead),
    Fetch {
        paths: Vec<String>,
        /// The page's name for the download, in its data streams' heads.
        tag: u64,
        #[serde(default)]
        rate_bps: Option<u64>,
        /// The page holds nothing of it: the data starts right behind the manifest.
        #[serde(default)]
        early: bool,
    },
}

/// An upload: its size, its count and pace, and what is written.
struct Transfer {
    size: u64,
    flow: Flow,
    state: tokio::sync::Mutex<UpState>,
}

/// An upload being written: `None` once it ended (finished or cancelled).
struct UpState {
    upload: Option<Upload>,
    /// Verified blocks beyond what is written, by offset.
    waiting: BTreeMap<u64, Vec<u8>>,
    waiting_bytes: u64,
}

/// The transfers of every session, by login and id: a page spreads one transfer's blocks over
/// several sessions ([`super::LANES`]), so a block may name a transfer another session of the
/// same login opened; never one of another login.
#[derive(Default)]
pub(crate) struct Registry {
    transfers: Mutex<HashMap<(String, u64), Arc<Transfer>>>,
    next_id: AtomicU64,
    /// The sessions of each page that named itself: a `fetch` spreads its pieces over its
    /// page's.
    pub(super) pages: Arc<Pages>,
    /// The uploads of `store` taking their page's pieces.
    pub(super) routes: Arc<Routes>,
}

impl Registry {
    fn transfers(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u64), Arc<Transfer>>> {
        self.transfers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A transfer held in the [`Registry`]: it leaves it when this is dropped (its request ended,
/// or its session's tasks were dropped with the session).
struct Held {
    registry: Arc<Registry>,
    key: (String, u64),
}

impl Held {
    fn id(&self) -> u64 {
        self.key.1
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.registry.transfers().remove(&self.key);
    }
}

/// The session's state, shared by its streams.
struct Session {
    app: AppState,
    /// The login it is of (looked up again for every request).
    id: String,
    /// The page's name for itself, if it gave one: its sessions carry its downloads' pieces.
    page: Option<String>,
    counters: Arc<Counters>,
    registry: Arc<Registry>,
    /// Places for blocks in memory ([`BLOCKS_AT_ONCE`]).
    blocks: tokio::sync::Semaphore,
}

impl Session {
    /// The page this session is of: its login and the name it gave (none: the login's unnamed
    /// sessions are one page).
    fn page_key(&self) -> (String, String) {
        (self.id.clone(), self.page.clone().unwrap_or_default())
    }

    /// Transfer `id` of this session's login, opened on any of its sessions.
    fn transfer(&self, id: u64) -> Result<Arc<Transfer>, ApiError> {
        let found = self.registry.transfers().get(&(self.id.clone(), id)).cloned();
        found.ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not-found", "no such transfer"))
    }

    /// Holds `transfer` under a new id, for as long as the answer lives.
    fn hold(&self, transfer: Transfer) -> Result<Held, ApiError> {
        let mut transfers = self.registry.transfers();
        let open = transfers.keys().filter(|(login, _)| *login == self.id).count();
        if open >= TRANSFERS_MAX {
            let why = format!("at most {TRANSFERS_MAX} transfers per login");
            return Err(ApiError::new(StatusCode::CONFLICT, "busy", why));
        }
        let id = self.registry.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let key = (self.id.clone(), id);
        transfers.insert(key.clone(), Arc::new(transfer));
        Ok(Held { registry: self.registry.clone(), key })
    }
}

/// Serves the session `connection` of the login `id` (and its page's name, if it gave one)
/// until it closes or the login ends.
pub(super) async fn serve(
    connection: Connection,
    app: AppState,
    (id, page): (String, Option<String>),
    counters: Arc<Counters>,
    registry: Arc<Registry>,
) {
    let entered = page.clone().map(|page| registry.pages.enter((id.clone(), page), &connection));
    let session = Arc::new(Session {
        app,
        id,
        page,
        counters,
        registry,
        blocks: tokio::sync::Semaphore::new(BLOCKS_AT_ONCE),
    });
    let mut streams = JoinSet::new();
    loop {
        while streams.try_join_next().is_some() {}
        let Ok((send, recv)) = connection.accept_bi().await else { break };
        if session.app.logins.session(&session.id).is_none() {
            connection.close(wtransport::VarInt::from_u32(1), b"logged out");
            break;
        }
        streams.spawn(stream(session.clone(), connection.clone(), send, recv));
    }
    let stats = connection.quic_connection().stats();
    tracing::debug!(
        sent_packets = stats.path.sent_packets,
        lost_packets = stats.path.lost_packets,
        congestion_events = stats.path.congestion_events,
        rtt_ms = stats.path.rtt.as_secs_f64() * 1e3,
        data_blocked = stats.frame_tx.data_blocked,
        stream_data_blocked = stats.frame_tx.stream_data_blocked,
        max_data_received = stats.frame_rx.max_data,
        max_stream_data_received = stats.frame_rx.max_stream_data,
        udp_rx_datagrams = stats.udp_rx.datagrams,
        udp_rx_bytes = stats.udp_rx.bytes,
        stream_frames_received = stats.frame_rx.stream,
        acks_sent = stats.frame_tx.acks,
        max_data_sent = stats.frame_tx.max_data,
        max_stream_data_sent = stats.frame_tx.max_stream_data,
        "webtransport session ended"
    );
    drop(entered);
    // Dropping the set ends every stream's task; their transfers end with them.
}

/// One request: its head, its work, its answer (or its error as the answer).
async fn stream(
    session: Arc<Session>,
    connection: Connection,
    mut send: SendStream,
    mut recv: RecvStream,
) {
    let result = async {
        let head = read_head(&mut recv).await?.ok_or_else(|| ApiError::bad("no request"))?;
        let request: Request =
            serde_json::from_value(head).map_err(|e| ApiError::bad(format!("request: {e}")))?;
        let login = session
            .app
            .logins
            .session(&session.id)
            .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "auth", "log in first"))?;
        let access = login.access.clone();
        match request {
            Request::Up(query) => {
                let (spec, _, rate_bps) = query.spec()?;
                access.require(|r| r.write, "write (upload)")?;
                let running = session.app.gate.transfer(&access, false).await?;
                let pace = Pace::lowest(&[access.rate_bps(), rate_bps]);
                let partials = session.app.partials.clone();
                let size = spec.size;
                let upload = blocking(move || Upload::open(&access, spec, partials)).await?;
                let have = upload.have();
                let state =
                    UpState { upload: Some(upload), waiting: BTreeMap::new(), waiting_bytes: 0 };
                let transfer = Transfer {
                    size,
                    flow: Flow::new(running, pace),
                    state: tokio::sync::Mutex::new(state),
                };
                let held = session.hold(transfer)?;
                let id = held.id();
                let result = async {
                    write_head(&mut send, &json!({ "id": id, "have": have })).await?;
                    // Nothing more (the stream ended): a cancel. Else the whole file's BLAKE3.
                    match read_head(&mut recv).await {
                        Ok(Some(done)) => finish(&session, id, have, &done).await.map(Some),
                        _ => Ok(None),
                    }
                }
                .await;
                if let Ok(transfer) = session.transfer(id) {
                    // Ends the upload (its lock goes; what was written stays for a resume).
                    transfer.state.lock().await.upload = None;
                }
                drop(held);
                result
            }
            Request::Put { id, offset, len, blake3 } => {
                let answer = put(&session, id, offset, len, &blake3, &mut recv).await?;
                ended(&mut recv).await?;
                Ok(Some(answer))
            }
            Request::Store { path, policy, tag, rate_bps } => {
                let to = (&connection, &mut send, &mut recv);
                store(&session, to, access, (path, policy), tag, rate_bps).await;
                Ok(None)
            }
            Request::Piece(head) => {
                let (registry, counters) = (&session.registry, &session.counters);
                let page = session.page_key();
                registry.routes.take(&page, head, &mut recv, &session.blocks, counters).await?;
                ended(&mut recv).await?;
                Ok(Some(json!({})))
            }
            Request::Fetch { paths, tag, rate_bps, early } => {
                let to = (&connection, &mut send, &mut recv);
                fetch(&session, to, access, (paths, early), tag, rate_bps).await;
                Ok(None)
            }
        }
    }
    .await;
    let answer = match result {
        Ok(None) => None,
        Ok(Some(answer)) => Some(answer),
        Err(e) => Some(e.body()),
    };
    if let Some(answer) = answer {
        let _ = write_head(&mut send, &answer).await;
    }
    let _ = send.finish().await;
}

/// `fetch`: `paths` to the page, run by the transfer machines on this stream, the bytes on
/// streams of `tag` (`push.rs`). Every failure goes to the page as the machine's `Failed`.
async fn fetch(
    session: &Session,
    (connection, send, recv): (&Connection, &mut SendStream, &mut RecvStream),
    access: Arc<sluice::session::Access>,
    (paths, early): (Vec<String>, bool),
    tag: u64,
    rate_bps: Option<u64>,
) {
    let running = match session.app.gate.transfer(&access, true).await {
        Ok(running) => running,
        Err(err) => {
            let failed = sluice::session::messages::failed_frame(err.code(), &err.detail());
            let _ = send.write_all(&failed).await;
            return;
        }
    };
    let pace = Pace::lowest(&[access.rate_bps(), rate_bps]);
    let carrier = Arc::new(super::push::Pushed {
        conn: connection.clone(),
        pages: session.registry.pages.clone(),
        page: session.page.clone().map(|page| (session.id.clone(), page)),
        lanes_max: session.app.wt.as_ref().map_or(super::LANES, |wt| wt.lanes) as usize,
        tag,
        flow: Arc::new(Flow::new(running, pace)),
        counters: session.counters.clone(),
        runtime: tokio::runtime::Handle::current(),
    });
    let quic = connection.quic_connection();
    let (send, recv) = (send.quic_stream_mut(), recv.quic_stream_mut());
    match sluice::web::send_files(quic, (send, recv), access, (paths, early), carrier).await {
        Ok(fetched) => tracing::info!(?fetched, "a page's download verified"),
        Err(err) => tracing::info!(error = %err, "a page's download failed"),
    }
}

/// `store`: the page's file to `path` by `policy`, run by the transfer machines on this stream,
/// the bytes on the page's streams of `tag` (`gather.rs`). Every failure goes to the page as the
/// machine's `Failed`.
async fn store(
    session: &Session,
    (connection, send, recv): (&Connection, &mut SendStream, &mut RecvStream),
    access: Arc<sluice::session::Access>,
    (path, policy): (String, Option<String>),
    tag: u64,
    rate_bps: Option<u64>,
) {
    let refuse = |err: sluice::session::SessionError| {
        sluice::session::messages::failed_frame(err.code(), &err.detail())
    };
    let name = policy.as_deref().unwrap_or("refuse");
    let Some(policy) = Policy::from_name(name) else {
        let why = format!("no overwrite policy {name:?}");
        let _ = send.write_all(&refuse(sluice::session::SessionError::Refused(why))).await;
        return;
    };
    // The right first, as over HTTPS, before a place is taken.
    if let Err(err) = access.require(|r| r.write, "write (upload)") {
        let _ = send.write_all(&refuse(err)).await;
        return;
    }
    let running = match session.app.gate.transfer(&access, false).await {
        Ok(running) => running,
        Err(err) => {
            let _ = send.write_all(&refuse(err)).await;
            return;
        }
    };
    let flow = Arc::new(Flow::new(running, Pace::lowest(&[access.rate_bps(), rate_bps])));
    let runtime = tokio::runtime::Handle::current();
    let Some(carrier) = session.registry.routes.open(session.page_key(), tag, flow, runtime) else {
        let why = format!("this page's upload {tag} is under way already");
        let _ = send.write_all(&refuse(sluice::session::SessionError::Busy(why))).await;
        return;
    };
    let quic = connection.quic_connection();
    let (send, recv) = (send.quic_stream_mut(), recv.quic_stream_mut());
    let carrier = Arc::new(carrier);
    match sluice::web::receive_files(quic, (send, recv), access, (path, policy), carrier).await {
        Ok(stored) => tracing::info!(?stored, "a page's upload stored and verified"),
        Err(err) => tracing::info!(error = %err, "a page's upload failed"),
    }
}

/// `put`: block `offset..offset + len` of upload `id`, which must hash to `blake3`.
async fn put(
    session: &Session,
    id: u64,
    offset: u64,
    len: u64,
    blake3: &str,
    recv: &mut RecvStream,
) -> Result<Value, ApiError> {
    let transfer = session.transfer(id)?;
    let Transfer { size, flow, state } = &*transfer;
    check_block(offset, len, *size)?;
    let expected =
        blake3::Hash::from_hex(blake3).map_err(|_| ApiError::bad("blake3: not 64 hex digits"))?;
    let _place = session.blocks.acquire().await.map_err(|e| io_error(e.to_string()))?;
    let mut block = vec![0u8; len as usize];
    let mut at = 0;
    while at < block.len() {
        let end = (at + PIECE_BYTES).min(block.len());
        match recv.read(&mut block[at..end]).await {
            Ok(Some(n)) => {
                at += n;
                flow.moved(n as u64, &session.counters.received).await;
            }
            Ok(None) => return Err(ApiError::bad(format!("the block ended after {at} bytes"))),
            Err(e) => return Err(gone(&e)),
        }
    }
    if blake3::hash(&block) != expected {
        let why = format!("the block at {offset} does not hash to its BLAKE3: send it again");
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "integrity", why));
    }
    let mut state = state.lock().await;
    let Some(have) = state.upload.as_ref().map(Upload::have) else {
        return Err(ApiError::new(StatusCode::CONFLICT, "cancelled", "the upload has ended"));
    };
    if offset + len <= have {
        return Ok(json!({ "have": have }));
    }
    if offset > have {
        if state.waiting_bytes + len > REORDER_BYTES_MAX {
            let why = format!("more than {REORDER_BYTES_MAX} bytes ahead of {have}");
            return Err(ApiError::new(StatusCode::CONFLICT, "window", why));
        }
        state.waiting_bytes += len;
        state.waiting.insert(offset, block);
    } else {
        // Starts at or before what is written: only its new part is written.
        let fresh = block.split_off((have - offset) as usize);
        write(&mut state, fresh).await?;
    }
    // Whatever waited and now follows on.
    loop {
        let have = state.upload.as_ref().map_or(0, Upload::have);
        let Some((&next, _)) = state.waiting.first_key_value() else { break };
        if next > have {
            break;
        }
        let block = state.waiting.remove(&next).unwrap_or_default();
        state.waiting_bytes -= block.len() as u64;
        let skip = ((have - next) as usize).min(block.len());
        write(&mut state, block[skip..].to_vec()).await?;
    }
    Ok(json!({ "have": state.upload.as_ref().map_or(0, Upload::have) }))
}

/// Appends `bytes` to the upload (on the blocking pool).
async fn write(state: &mut UpState, bytes: Vec<u8>) -> Result<(), ApiError> {
    let Some(mut upload) = state.upload.take() else {
        return Err(ApiError::new(StatusCode::CONFLICT, "cancelled", "the upload has ended"));
    };
    let (upload, written) = tokio::task::spawn_blocking(move || {
        let written = upload.write(&bytes);
        (upload, written)
    })
    .await
    .map_err(|e| io_error(e.to_string()))?;
    state.upload = Some(upload);
    written.map_err(ApiError::from)
}

/// The end of upload `id`: `done` is `{blake3}`, the page's hash of the whole file; it is
/// stored by its policy if every byte is in.
async fn finish(session: &Session, id: u64, from: u64, done: &Value) -> Result<Value, ApiError> {
    let expected = done
        .get("blake3")
        .and_then(Value::as_str)
        .and_then(|s| blake3::Hash::from_hex(s).ok())
        .ok_or_else(|| ApiError::bad("blake3: not 64 hex digits"))?;
    let transfer = session.transfer(id)?;
    let upload = transfer.state.lock().await.upload.take();
    let Some(upload) = upload else {
        return Err(ApiError::new(StatusCode::CONFLICT, "cancelled", "the upload has ended"));
    };
    if !upload.complete() {
        let have = upload.have();
        let why = format!("the server holds {have} bytes: send the rest first");
        return Err(ApiError::new(StatusCode::CONFLICT, "offset", why).with("have", json!(have)));
    }
    let received = upload.have() - from;
    finish_upload(upload, Some(expected), received).await
}

/// A block must lie within the file and be at most [`BLOCK_BYTES_MAX`].
fn check_block(offset: u64, len: u64, size: u64) -> Result<(), ApiError> {
    if len == 0 || len > BLOCK_BYTES_MAX || offset.checked_add(len).is_none_or(|end| end > size) {
        let why = format!("block {offset}+{len}: outside the file, or over {BLOCK_BYTES_MAX}");
        return Err(ApiError::bad(why));
    }
    Ok(())
}

fn io_error(why: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "io", why)
}

fn gone(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "network", format!("the stream failed: {e}"))
}

/// Reads the end of the page's side of a request (no more bytes): a stream dropped before its
/// end is stopped (`STOP_SENDING`), which a browser may report as a failed write even after the
/// last byte went out.
async fn ended(recv: &mut RecvStream) -> Result<(), ApiError> {
    let mut more = [0u8; 1];
    match recv.read(&mut more).await {
        Ok(None) => Ok(()),
        Ok(Some(_)) => Err(ApiError::bad("more bytes than the request names")),
        Err(e) => Err(gone(&e)),
    }
}

/// A head: `None` when the stream ends before one begins.
async fn read_head(recv: &mut RecvStream) -> Result<Option<Value>, ApiError> {
    use wtransport::error::StreamReadExactError;
    let mut len = [0u8; 4];
    match recv.read_exact(&mut len).await {
        Ok(()) => {}
        Err(StreamReadExactError::FinishedEarly(0)) => return Ok(None),
        Err(e) => return Err(gone(&e)),
    }
    let len = u32::from_be_bytes(len);
    if len > HEAD_BYTES_MAX {
        return Err(ApiError::bad(format!("a head of {len} bytes: at most {HEAD_BYTES_MAX}")));
    }
    let mut head = vec![0u8; len as usize];
    recv.read_exact(&mut head).await.map_err(|e| gone(&e))?;
    serde_json::from_slice(&head).map(Some).map_err(|e| ApiError::bad(format!("head: {e}")))
}

async fn write_head(send: &mut SendStream, head: &Value) -> Result<(), ApiError> {
    let json = serde_json::to_vec(head).map_err(|e| io_error(e.to_string()))?;
    let mut framed = Vec::with_capacity(4 + json.len());
    framed.extend_from_slice(&(json.len() as u32).to_be_bytes());
    framed.extend_from_slice(&json);
    send.write_all(&framed).await.map_err(|e| gone(&e))
}
