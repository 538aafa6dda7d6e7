//! One WebTransport session: each request is a bidirectional stream the page opens. A request
//! and its answer each begin with a head: 4 bytes of length (big-endian) and that much JSON.
//! A failed request is answered `{"error": code, "message": text}` as over HTTPS.
//!
//! | request head                                   | then                                  |
//! |------------------------------------------------|---------------------------------------|
//! | `{op:"store", path, policy, tag, rate_bps}`, or `dir` for `path` | no answer head: the stream carries an upload run by the transfer machines (the page's `Sending`, the server's `Receiving`: the CLI's planning by the overwrite policy, resume from a partial file, verified placement); the bytes come as `piece` requests of `tag` (`gather.rs`); `keep-both` stores beside an existing file under the next free name. Once the machines ended well, a last head as the HTTPS upload's answer says it: `{stored: true, name}` (the stored file's name, another than asked under `keep-both`), or `{stored: false}` (the policy kept the server's file). With `dir` (an existing folder) the page's manifest lists several files, which go into it in one run, each by the policy (`keep-both` is refused: a file to keep beside another goes alone); the last head is `{stored: true|false, files}` (how many were stored; the machine's `wanted` said which) |
//! | `{op:"piece", tag, phase, offset, len}`, then `len` bytes | `{}` once the piece is taken by the `store` of that tag of the same page (`gather.rs`) |
//! | `{op:"fetch", paths, tag, rate_bps, early}`     | no answer head: the stream carries a download run by the transfer machines (the server's `Sending`, the page's `Receiving`), their messages in their framing; the bytes come on the server's streams (`push.rs`); `early`: they start right behind the manifest (the page holds nothing of it) |
//!
//! A `fetch` or `store` takes a place among its token's and the server's transfers, as the
//! HTTPS request does, for as long as its stream is open; its pieces, on their own streams (and
//! on the other sessions of the same page: see [`Registry`]), share its count and its pace.

use std::sync::Arc;

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use sluice::web::{Pace, Policy, Target};
use tokio::task::JoinSet;
use wtransport::{Connection, RecvStream, SendStream};

use super::super::request::{ApiError, AppState};
use super::Counters;
use super::flow::Flow;
use super::gather::{PieceHead, Routes};
use super::lanes::PathNote;
use super::pages::Pages;

/// The largest request head.
const HEAD_BYTES_MAX: u32 = 8 << 10;
/// Pieces of uploads one session reads at once (each in memory while it comes, at most
/// [`super::gather::PIECE_MAX`]); more wait their turn.
const PIECES_AT_ONCE: usize = 8;
/// The send priority of a transfer's control stream (quinn's; a piece's stream has the default,
/// 0): its messages go first.
pub(super) const CONTROL_PRIORITY: i32 = 1;

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Request {
    Store {
        /// The file's path on the server (one file)...
        #[serde(default)]
        path: Option<String>,
        /// ...or the folder the page's files go into (several).
        #[serde(default)]
        dir: Option<String>,
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
    /// How the session's lanes started: from path memory (what it kept of the path), or afresh.
    Path,
}

/// What the sessions of every page share: a page spreads one transfer's pieces over its
/// sessions ([`super::LANES`]), never over another page's or another login's.
#[derive(Default)]
pub(crate) struct Registry {
    /// The sessions of each page that named itself: a `fetch` spreads its pieces over its
    /// page's.
    pub(super) pages: Arc<Pages>,
    /// The uploads of `store` taking their page's pieces.
    pub(super) routes: Arc<Routes>,
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
    /// What its downloads keep what the path delivered with (`None`: path memory off, or no
    /// seat in its login's group).
    note: Option<Arc<PathNote>>,
    /// Places for pieces in memory ([`PIECES_AT_ONCE`]).
    pieces: tokio::sync::Semaphore,
}

impl Session {
    /// The page this session is of: its login and the name it gave (none: the login's unnamed
    /// sessions are one page).
    fn page_key(&self) -> (String, String) {
        (self.id.clone(), self.page.clone().unwrap_or_default())
    }
}

/// Serves the session `connection` of the login `id` (and its page's name, if it gave one)
/// until it closes or the login ends.
pub(super) async fn serve(
    connection: Connection,
    app: AppState,
    (id, page): (String, Option<String>),
    (counters, registry): (Arc<Counters>, Arc<Registry>),
    note: Option<Arc<PathNote>>,
) {
    let entered = page.clone().map(|page| registry.pages.enter((id.clone(), page), &connection));
    let session = Arc::new(Session {
        app,
        id,
        page,
        counters,
        registry,
        note,
        pieces: tokio::sync::Semaphore::new(PIECES_AT_ONCE),
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
            Request::Store { path, dir, policy, tag, rate_bps } => {
                let to = (&connection, &mut send, &mut recv);
                store(&session, to, access, ((path, dir), policy), tag, rate_bps).await;
                Ok(None)
            }
            Request::Piece(head) => {
                let (registry, counters) = (&session.registry, &session.counters);
                let page = session.page_key();
                registry.routes.take(&page, head, &mut recv, &session.pieces, counters).await?;
                ended(&mut recv).await?;
                Ok::<_, ApiError>(Some(json!({})))
            }
            Request::Fetch { paths, tag, rate_bps, early } => {
                let to = (&connection, &mut send, &mut recv);
                fetch(&session, to, access, (paths, early), tag, rate_bps).await;
                Ok(None)
            }
            Request::Path => {
                let start = session.note.as_ref().and_then(|note| note.start);
                let memory =
                    start.map(|s| json!({ "rate_bps": s.rate_bps, "age_s": s.age.as_secs() }));
                Ok(Some(json!({ "memory": memory })))
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
        note: session.note.clone(),
    });
    let quic = connection.quic_connection();
    // The machines' messages (the manifest first) go before the pieces that follow them on
    // this session: at equal priority quinn shares the window among the streams in turn, and
    // a folder's manifest waited behind its early pieces (1 s of a 3.3 s download at 100 ms).
    send.set_priority(CONTROL_PRIORITY);
    let (send, recv) = (send.quic_stream_mut(), recv.quic_stream_mut());
    match sluice::web::send_files(quic, (send, recv), access, (paths, early), carrier).await {
        Ok(fetched) => {
            session.app.gate.metrics().repaired(fetched.repaired);
            tracing::info!(?fetched, "a page's download verified");
        }
        Err(err) => tracing::info!(error = %err, "a page's download failed"),
    }
}

/// `store`: the page's file to `path`, or its files into `dir`, by `policy`, run by the transfer
/// machines on this stream, the bytes on the page's streams of `tag` (`gather.rs`). Every
/// failure goes to the page as the machine's `Failed`.
async fn store(
    session: &Session,
    (connection, send, recv): (&Connection, &mut SendStream, &mut RecvStream),
    access: Arc<sluice::session::Access>,
    (path_or_dir, policy): ((Option<String>, Option<String>), Option<String>),
    tag: u64,
    rate_bps: Option<u64>,
) {
    let refuse = |err: sluice::session::SessionError| {
        sluice::session::messages::failed_frame(err.code(), &err.detail())
    };
    let target = match path_or_dir {
        (Some(path), None) => Target::File(path),
        (None, Some(dir)) => Target::Folder(dir),
        _ => {
            let why = "a store names a path or a dir".to_owned();
            let _ = send.write_all(&refuse(sluice::session::SessionError::Refused(why))).await;
            return;
        }
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
    let Some(carrier) = session.registry.routes.open(session.page_key(), tag, flow) else {
        let why = format!("this page's upload {tag} is under way already");
        let _ = send.write_all(&refuse(sluice::session::SessionError::Busy(why))).await;
        return;
    };
    let quic = connection.quic_connection();
    let streams = (send.quic_stream_mut(), recv.quic_stream_mut());
    let carrier = Arc::new(carrier);
    let asked = target.clone();
    match sluice::web::receive_files(quic, streams, access, (target, policy), carrier).await {
        Ok(stored) => {
            session.app.gate.metrics().repaired(stored.repaired);
            tracing::info!(?stored, "a page's upload stored and verified");
            let _ = write_head(send, &stored_head(&stored, &asked)).await;
        }
        Err(err) => tracing::info!(error = %err, "a page's upload failed"),
    }
}

/// A `store`'s last head (see the table above): whether the page's file was stored, and the
/// name it has (`asked`'s, or the free one `keep-both` took), as the HTTPS upload's answer; for
/// a folder's files, how many were stored.
fn stored_head(stored: &sluice::web::Stored, asked: &Target) -> Value {
    let asked = match asked {
        Target::Folder(_) => return json!({ "stored": stored.files > 0, "files": stored.files }),
        Target::File(path) => path,
    };
    if stored.files == 0 {
        return json!({ "stored": false });
    }
    let path = stored.renamed.as_deref().unwrap_or(asked).trim_end_matches('/');
    json!({ "stored": true, "name": path.rsplit('/').next().unwrap_or(path) })
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
