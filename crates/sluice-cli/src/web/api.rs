//! The web app's JSON API. Each handler takes the request's session ([`Authed`]) and runs the
//! `sluice` crate's own operation under the session's [`sluice::session::Access`]: the same
//! rights, root and confinement as a `sluice` CLI request (see `sluice::web` for which right
//! governs what).
//!
//! | request                                   | answer                                      |
//! |-------------------------------------------|---------------------------------------------|
//! | `POST /api/login {token}`                 | cookie, `{csrf, rights, fingerprint}`       |
//! | `POST /api/logout`                        | `{}`, cookie cleared                        |
//! | `GET /api/session`                        | `{csrf, rights, fingerprint}`               |
//! | `GET /api/list?path=`                     | `{path, entries: [{name, kind, size, mtime, target}], skipped}` |
//! | `GET /api/tree?path=` (right `read`)      | as `list`, of every level: what a download of `path` sends (each `name` its path, the folder's own name first) |
//! | `GET /api/stat?path=`                     | `{kind, size, mtime}`                       |
//! | `POST /api/mkdir {path}`                  | `{}`                                        |
//! | `POST /api/rename {from, to}`             | `{}`                                        |
//! | `POST /api/delete {path}`                 | `{removed}`                                 |
//! | `GET /api/file?path=&rate_bps=` (`Range` with `If-Range` honoured) | the bytes (206 for a range), `ETag`; a whole file of at most 4 MiB also `X-Sluice-Blake3` (of that version) |
//! | `GET /api/hash?path=`                     | `{blake3, etag}`: the file's BLAKE3 and the version hashed |
//! | `GET /api/upload?path=&size=&mtime=`      | `{have, exists}`                            |
//! | `GET /api/sweep?bytes=` (right `read`)    | that many bytes (zeros; at most 256 MiB), for the page's sweep |
//! | `PUT /api/sweep`, body any bytes (right `write`) | `{received}`; the bytes are dropped (at most 256 MiB) |
//! | `POST /api/upload/stop?path=&size=&mtime=` | `{stopped}`: the requests writing that upload end, keeping what they wrote |
//! | `PUT /api/upload?path=&size=&mtime=&offset=&policy=&rate_bps=`, body the bytes from `offset`, optional `X-Sluice-Blake3` (the whole file's; `later`: a complete file waits for a request at `offset=size` that brings it) | `{have, received}` while partial; `{done, stored, name, blake3}` when complete |
//! | `POST /api/wt`                            | `{url, hashes, block_bytes, streams, lanes}`: the WebTransport side (404 when not served; see `wt`) |
//!
//! Other servers in the panes and copies between servers (`/api/servers`, `/api/copy`,
//! `/api/jobs`) are [`super::servers`]'s.
//!
//! A download or upload request is a transfer of the server's: it takes a place among its
//! token's transfers (`busy` when they all run) and the server's, shows in `/metrics` as a QUIC
//! transfer does, and is paced to the token's rate limit or the lower `rate_bps` the page asks.

use std::os::unix::fs::FileExt;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use sluice::session::FileKind;
use sluice::tree::EntryKind;
use sluice::tree::manifest::Entry;
use sluice::web::{Pace, Policy, Upload, UploadDone, UploadSpec};

use super::auth::{COOKIE, LoginError, SESSION_TTL, Session};
use super::range::{ByteRange, content_disposition, parse_range};
use super::request::{ApiError, AppState, Authed, blocking, json_body, peer, query};

/// Bytes an upload gathers before each write to disk.
const WRITE_BYTES: usize = 1 << 20;
/// How often an upload waiting for its next bytes looks whether it was stopped.
const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(200);
/// Bytes a download reads at once.
const READ_BYTES: usize = 256 << 10;
/// A download of a whole file of at most this many bytes carries its BLAKE3 in this header
/// (hashing 4 MiB costs milliseconds; asking for it, a round trip per file).
const HASH_WITH_BYTES_MAX: u64 = 4 << 20;
const BLAKE3_HEADER: &str = "x-sluice-blake3";

fn session_json(session: &Session, state: &AppState) -> Value {
    let r = session.access.rights();
    json!({
        "csrf": session.csrf,
        "rights": { "read": r.read, "write": r.write, "list": r.list },
        "fingerprint": state.fingerprint,
    })
}

#[derive(Deserialize)]
struct LoginBody {
    token: String,
}

/// `POST /api/login`: the token in a JSON body (never in a URL).
pub(super) async fn login(State(state): State<AppState>, parts: Parts, body: Bytes) -> Response {
    let result = async {
        let LoginBody { token } = json_body(&parts.headers, &body)?;
        let (id, session) = state.logins.login(&token, peer(&parts)).map_err(|e| match e {
            LoginError::RateLimited => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate-limited",
                "too many login attempts: wait a minute",
            ),
            LoginError::Refused => {
                ApiError::new(StatusCode::UNAUTHORIZED, "auth", "the token was not accepted")
            }
            LoginError::Full => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "the server holds as many sessions as it may",
            ),
        })?;
        let cookie = format!(
            "{COOKIE}={id}; Path=/; Max-Age={}; Secure; HttpOnly; SameSite=Strict",
            SESSION_TTL.as_secs()
        );
        Ok::<_, ApiError>(([(header::SET_COOKIE, cookie)], Json(session_json(&session, &state))))
    };
    result.await.into_response()
}

/// `POST /api/logout`.
pub(super) async fn logout(State(state): State<AppState>, authed: Authed) -> impl IntoResponse {
    state.logins.logout(&authed.id);
    let clear = format!("{COOKIE}=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Strict");
    ([(header::SET_COOKIE, clear)], Json(json!({})))
}

/// `GET /api/session`: the CSRF token and rights of a logged-in page.
pub(super) async fn session(State(state): State<AppState>, authed: Authed) -> Json<Value> {
    Json(session_json(&authed.session, &state))
}

#[derive(Deserialize)]
pub(super) struct PathQuery {
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
pub(super) struct FileQuery {
    path: String,
    /// A rate the page asks for, below its token's (bits per second; 0 or none: the token's).
    #[serde(default)]
    rate_bps: Option<u64>,
}

/// `GET /api/list?path=`.
pub(super) async fn list(authed: Authed, uri: Uri) -> Result<Json<Value>, ApiError> {
    let PathQuery { path } = query(&uri)?;
    let access = authed.session.access.clone();
    let shown = path.clone();
    let listing = blocking(move || access.list(&path)).await?;
    Ok(Json(listing_json(&shown, &listing.entries, listing.skipped)))
}

/// `GET /api/tree?path=` (right `read`): what a download of `path` would send, every level
/// of a folder in one answer (each entry's `name` is its path, the folder's own name first).
pub(super) async fn tree(authed: Authed, uri: Uri) -> Result<Json<Value>, ApiError> {
    let PathQuery { path } = query(&uri)?;
    let access = authed.session.access.clone();
    let shown = path.clone();
    let (entries, skipped) = blocking(move || sluice::web::download_tree(&access, &path)).await?;
    Ok(Json(listing_json(&shown, &entries, skipped)))
}

/// A folder's listing as the page reads it (`/api/list`, and another server's in `servers`):
/// each entry's path is its name.
pub(super) fn listing_json(path: &str, entries: &[Entry], skipped: u64) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|e| {
            let kind = match e.kind {
                EntryKind::File => "file",
                EntryKind::Dir => "dir",
                EntryKind::Symlink => "link",
            };
            json!({ "name": e.path, "kind": kind, "size": e.size, "mtime": e.mtime,
                    "target": e.target })
        })
        .collect();
    json!({ "path": path, "entries": entries, "skipped": skipped })
}

/// `GET /api/stat?path=`.
pub(super) async fn stat(authed: Authed, uri: Uri) -> Result<Json<Value>, ApiError> {
    let PathQuery { path } = query(&uri)?;
    let access = authed.session.access.clone();
    let info = blocking(move || access.stat(&path)).await?;
    let kind = match info.kind {
        FileKind::File => "file",
        FileKind::Directory => "dir",
        FileKind::Other => "other",
    };
    Ok(Json(json!({ "kind": kind, "size": info.size, "mtime": info.mtime })))
}

#[derive(Deserialize)]
struct PathBody {
    path: String,
}

/// `POST /api/mkdir {path}`.
pub(super) async fn mkdir(
    authed: Authed,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let PathBody { path } = json_body(&headers, &body)?;
    let access = authed.session.access.clone();
    blocking(move || sluice::web::make_dir(&access, &path)).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
struct RenameBody {
    from: String,
    to: String,
}

/// `POST /api/rename {from, to}`.
pub(super) async fn rename(
    authed: Authed,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let RenameBody { from, to } = json_body(&headers, &body)?;
    let access = authed.session.access.clone();
    blocking(move || sluice::web::rename(&access, &from, &to)).await?;
    Ok(Json(json!({})))
}

/// `POST /api/delete {path}`.
pub(super) async fn delete(
    authed: Authed,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let PathBody { path } = json_body(&headers, &body)?;
    let access = authed.session.access.clone();
    let removed = blocking(move || sluice::web::delete(&access, &path)).await?;
    Ok(Json(json!({ "removed": removed })))
}

/// `GET /api/file?path=`: the file, or the part a `Range` header asks for. With `If-Range`, the
/// part only while the file is still the one of that entity tag (else all of it, 200), so a
/// resumed download never joins two versions of a file.
pub(super) async fn download(
    State(state): State<AppState>,
    authed: Authed,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let FileQuery { path, rate_bps } = query(&uri)?;
    let access = authed.session.access.clone();
    let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
    let opened = blocking(move || sluice::web::open_download(&access, &path)).await?;
    let size = opened.size;
    let etag = format!("\"{}\"", opened.validator);
    let asked = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    // A weak tag or a date never matches: only this exact strong tag keeps the range.
    let same = headers.get(header::IF_RANGE).is_none_or(|v| v.as_bytes() == etag.as_bytes());
    let (status, range) = match asked.filter(|_| same).map(|r| parse_range(r, size)) {
        None => (StatusCode::OK, ByteRange { start: 0, end: size }),
        Some(Some(range)) => (StatusCode::PARTIAL_CONTENT, range),
        Some(None) => {
            let mut response =
                ApiError::new(StatusCode::RANGE_NOT_SATISFIABLE, "range", "range not satisfiable")
                    .into_response();
            let all = HeaderValue::from_str(&format!("bytes */{size}"))
                .map_err(|e| ApiError::bad(e.to_string()))?;
            response.headers_mut().insert(header::CONTENT_RANGE, all);
            return Ok(response);
        }
    };
    let running = state.gate.transfer(&authed.session.access, true).await?;
    let pace = Pace::lowest(&[authed.session.access.rate_bps(), rate_bps]);
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    // A small file sent whole is read once, into memory, and carries the BLAKE3 of exactly
    // those bytes (none when it changed while it was read: the page then asks `/api/hash`).
    let blake3 = if status == StatusCode::OK && size <= HASH_WITH_BYTES_MAX {
        let path = name.clone();
        let (bytes, hash) = blocking(move || opened.read_whole(&path)).await?;
        let bytes = Bytes::from(bytes);
        tokio::spawn(async move {
            for at in (0..bytes.len()).step_by(READ_BYTES) {
                let part = bytes.slice(at..bytes.len().min(at + READ_BYTES));
                if tx.send(Ok(part)).await.is_err() {
                    return;
                }
            }
        });
        hash
    } else {
        // A thread reads ahead a few blocks; it stops when the client goes (the channel
        // closes).
        let file = opened.file;
        tokio::task::spawn_blocking(move || {
            let mut at = range.start;
            while at < range.end {
                let n = (range.end - at).min(READ_BYTES as u64) as usize;
                let mut buf = vec![0u8; n];
                let read = file.read_exact_at(&mut buf, at).map(|()| Bytes::from(buf));
                let failed = read.is_err();
                if tx.blocking_send(read).is_err() || failed {
                    return;
                }
                at += n as u64;
            }
        });
        None
    };
    // The transfer runs while the body streams: it counts what went out, and holds the pace
    // (the reader waits for it, its channel being full).
    let sending = Sending { rx, running, pace, started: tokio::time::Instant::now() };
    let stream = futures_util::stream::unfold(sending, |mut s| async move {
        let item = s.rx.recv().await?;
        if let Ok(bytes) = &item {
            let n = bytes.len() as u64;
            s.running.moved(n);
            if let Some(pace) = &mut s.pace {
                tokio::time::sleep(pace.wait(n, s.started.elapsed())).await;
            }
        }
        Some((item, s))
    });
    let mut response = octet_stream(Body::from_stream(stream), status, range.end - range.start);
    let h = response.headers_mut();
    let value = |s: String| HeaderValue::from_str(&s).map_err(|e| ApiError::bad(e.to_string()));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_DISPOSITION, value(content_disposition(&name))?);
    h.insert(header::ETAG, value(etag)?);
    if let Some(hash) = blake3 {
        h.insert(BLAKE3_HEADER, value(hash.to_hex().to_string())?);
    }
    if status == StatusCode::PARTIAL_CONTENT {
        let end = range.end.saturating_sub(1);
        h.insert(header::CONTENT_RANGE, value(format!("bytes {}-{end}/{size}", range.start))?);
    }
    Ok(response)
}

/// A response of `length` bytes of `body` as an octet stream, with `status`.
fn octet_stream(body: Body, status: StatusCode, length: u64) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    response
}

/// `GET /api/hash?path=`: the file's BLAKE3 and the `ETag` of the version hashed, for the page
/// to compare with its own hash of a download. Hashing reads the whole file: it takes a place
/// among the token's and the server's transfers while it runs.
pub(super) async fn hash(
    State(state): State<AppState>,
    authed: Authed,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let PathQuery { path } = query(&uri)?;
    let access = authed.session.access.clone();
    access.require(|r| r.read, "read (hash)")?;
    let place = state.gate.place(&access).await?;
    let (validator, hash) = blocking(move || sluice::web::file_hash(&access, &path)).await?;
    drop(place);
    Ok(Json(json!({ "blake3": hash.to_hex().as_str(), "etag": format!("\"{validator}\"") })))
}

/// The most bytes one sweep request moves.
const SWEEP_BYTES_MAX: u64 = 256 << 20;
/// What a sweep download sends: zeros, a piece at a time.
static ZEROS: [u8; READ_BYTES] = [0; READ_BYTES];

#[derive(Deserialize)]
pub(super) struct SweepQuery {
    bytes: u64,
}

/// `GET /api/sweep?bytes=`: bytes of nothing, to measure this connection (the page's sweep of
/// block sizes and streams). As a download: a place among the token's and the server's
/// transfers (not counted as a transfer: no file moves), paced to the token's rate.
pub(super) async fn sweep_down(
    State(state): State<AppState>,
    authed: Authed,
    uri: Uri,
) -> Result<Response, ApiError> {
    let SweepQuery { bytes } = query(&uri)?;
    if bytes > SWEEP_BYTES_MAX {
        return Err(ApiError::bad(format!("bytes: at most {SWEEP_BYTES_MAX}")));
    }
    let access = authed.session.access.clone();
    access.require(|r| r.read, "read (sweep downloads)")?;
    let place = state.gate.place(&access).await?;
    let pace = Pace::lowest(&[access.rate_bps()]);
    let state0 = (bytes, place, pace, tokio::time::Instant::now());
    let stream =
        futures_util::stream::unfold(state0, |(left, place, mut pace, started)| async move {
            if left == 0 {
                return None;
            }
            let n = left.min(READ_BYTES as u64);
            if let Some(pace) = &mut pace {
                tokio::time::sleep(pace.wait(n, started.elapsed())).await;
            }
            let piece = Bytes::from_static(&ZEROS[..n as usize]);
            Some((Ok::<_, std::io::Error>(piece), (left - n, place, pace, started)))
        });
    Ok(octet_stream(Body::from_stream(stream), StatusCode::OK, bytes))
}

/// `PUT /api/sweep`: bytes dropped as they come, counted (the upload side of the sweep), under
/// the same place and pace as a sweep download.
pub(super) async fn sweep_up(
    State(state): State<AppState>,
    authed: Authed,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let access = authed.session.access.clone();
    access.require(|r| r.write, "write (sweep uploads)")?;
    let _place = state.gate.place(&access).await?;
    let mut pace = Pace::lowest(&[access.rate_bps()]);
    let started = tokio::time::Instant::now();
    let mut stream = body.into_data_stream();
    let mut received = 0u64;
    while let Some(piece) = stream.next().await {
        let piece = piece.map_err(|e| ApiError::bad(format!("the upload was cut off: {e}")))?;
        received += piece.len() as u64;
        if received > SWEEP_BYTES_MAX {
            let why = format!("at most {SWEEP_BYTES_MAX} bytes");
            return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too-large", why));
        }
        if let Some(pace) = &mut pace {
            tokio::time::sleep(pace.wait(piece.len() as u64, started.elapsed())).await;
        }
    }
    Ok(Json(json!({ "received": received })))
}

/// A download's body as it streams.
struct Sending {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    running: sluice::session::Running,
    pace: Option<Pace>,
    started: tokio::time::Instant,
}

/// An upload's parameters (`PUT /api/upload`'s query).
#[derive(Deserialize)]
pub(super) struct UploadQuery {
    path: String,
    size: u64,
    #[serde(default)]
    mtime: i64,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    policy: Option<String>,
    /// As [`FileQuery::rate_bps`].
    #[serde(default)]
    rate_bps: Option<u64>,
}

impl UploadQuery {
    /// What to upload, the offset to start at, and the rate asked.
    pub(super) fn spec(self) -> Result<(UploadSpec, u64, Option<u64>), ApiError> {
        let policy = match self.policy.as_deref() {
            None | Some("") => Policy::Overwrite(sluice::session::Overwrite::Refuse),
            Some(name) => Policy::from_name(name).ok_or_else(|| {
                ApiError::bad(format!(
                    "policy {name:?}: use refuse, never, always, if-newer, if-different or keep-both"
                ))
            })?,
        };
        Ok((
            UploadSpec { path: self.path, size: self.size, mtime: self.mtime, policy },
            self.offset,
            self.rate_bps,
        ))
    }
}

/// `GET /api/upload?path=&size=&mtime=`: how much of that upload the server holds.
pub(super) async fn upload_status(
    State(state): State<AppState>,
    authed: Authed,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let (spec, _, _) = query::<UploadQuery>(&uri)?.spec()?;
    let access = authed.session.access.clone();
    let partials = state.partials.clone();
    let status = blocking(move || sluice::web::upload_status(&access, &spec, &partials)).await?;
    let exists = status.exists.map(|s| json!({ "size": s.size, "mtime": s.mtime }));
    Ok(Json(json!({ "have": status.have, "exists": exists })))
}

/// `POST /api/upload/stop?path=&size=&mtime=`: a cancel. The page's end of the connection
/// stops at once, but the request here would read on what was already in flight (paced, that
/// takes a while); this ends it now.
pub(super) async fn upload_stop(
    State(state): State<AppState>,
    authed: Authed,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let (spec, _, _) = query::<UploadQuery>(&uri)?.spec()?;
    let access = authed.session.access.clone();
    let partials = state.partials.clone();
    let stopped = blocking(move || sluice::web::stop_upload(&access, &spec, &partials)).await?;
    Ok(Json(json!({ "stopped": stopped })))
}

/// `PUT /api/upload?...`: bytes from `offset`, which must be what the server holds.
pub(super) async fn upload(
    State(state): State<AppState>,
    authed: Authed,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let (spec, offset, rate_bps) = query::<UploadQuery>(&uri)?.spec()?;
    // `later`: the page hashes the file while it sends; the complete file waits for a request
    // at its end (no bytes) that brings the hash.
    let (expected, later) = match headers.get(BLAKE3_HEADER).map(|v| v.to_str()) {
        None => (None, false),
        Some(Ok("later")) => (None, true),
        Some(v) => (
            Some(
                v.ok()
                    .and_then(|s| blake3::Hash::from_hex(s).ok())
                    .ok_or_else(|| ApiError::bad("X-Sluice-Blake3: not 64 hex digits or later"))?,
            ),
            false,
        ),
    };
    let access = authed.session.access.clone();
    // A place first: a request refused as busy leaves nothing behind.
    access.require(|r| r.write, "write (upload)")?;
    let mut running = state.gate.transfer(&access, false).await?;
    let mut pace = Pace::lowest(&[access.rate_bps(), rate_bps]);
    let partials = state.partials.clone();
    let mut upload = blocking(move || Upload::open(&access, spec, partials)).await?;
    if upload.have() != offset {
        let why = format!("the server holds {} bytes: send from there", upload.have());
        return Err(
            ApiError::new(StatusCode::CONFLICT, "offset", why).with("have", json!(upload.have()))
        );
    }
    let started = tokio::time::Instant::now();
    let mut stream = body.into_data_stream();
    let mut buf = Vec::with_capacity(WRITE_BYTES);
    let mut cut = None;
    loop {
        // A stop is looked for between pieces, and every STOP_CHECK while none comes.
        let mut next = None;
        while next.is_none() && !upload.stopped() {
            next = tokio::time::timeout(STOP_CHECK, stream.next()).await.ok();
        }
        let next = match next {
            Some(next) => next,
            None => Some(Err(axum::Error::new("stopped by the client"))),
        };
        let more = match next {
            Some(Ok(bytes)) => {
                buf.extend_from_slice(&bytes);
                running.moved(bytes.len() as u64);
                if let Some(pace) = &mut pace {
                    tokio::time::sleep(pace.wait(bytes.len() as u64, started.elapsed())).await;
                }
                true
            }
            // The client went away: keep what came, for it to resume.
            Some(Err(e)) => {
                cut = Some(e.to_string());
                false
            }
            None => false,
        };
        if buf.len() >= WRITE_BYTES || (!more && !buf.is_empty()) {
            let (back, rest) = blocking(move || {
                let written = upload.write(&buf);
                buf.clear();
                written.map(|()| (upload, buf))
            })
            .await?;
            (upload, buf) = (back, rest);
        }
        if !more {
            break;
        }
    }
    if let Some(why) = cut {
        return Err(ApiError::bad(format!("the upload was cut off: {why}"))
            .with("have", json!(upload.have())));
    }
    // Counted here, at the server: what this request wrote (a resumed upload's tests add these).
    let received = upload.have() - offset;
    if !upload.complete() || later {
        return Ok(Json(json!({ "have": upload.have(), "received": received, "done": false })));
    }
    finish_upload(upload, expected, received).await.map(Json)
}

/// Stores a complete upload by its policy (checking the client's BLAKE3 if it sent one): the
/// answer of the request that completed it (over HTTPS or WebTransport), `received` the bytes
/// that request moved.
pub(super) async fn finish_upload(
    upload: Upload,
    expected: Option<blake3::Hash>,
    received: u64,
) -> Result<Value, ApiError> {
    let have = upload.have();
    match blocking(move || upload.finish(expected)).await? {
        UploadDone::Stored { name, blake3 } => Ok(
            json!({ "have": have, "received": received, "done": true, "stored": true, "name": name, "blake3": blake3 }),
        ),
        UploadDone::Skipped => {
            Ok(json!({ "have": have, "received": received, "done": true, "stored": false }))
        }
        UploadDone::Exists => Err(ApiError::new(
            StatusCode::CONFLICT,
            "exists",
            "the file exists: choose replace, skip, keep both or if newer",
        )
        .with("have", json!(have))),
    }
}

/// `POST /api/wt`: how this page reaches the WebTransport side: its URL with a one-time
/// ticket of this session, and the SHA-256 of its certificate for `serverCertificateHashes`.
/// 404 when the server does not serve it (the page then says transfers go over HTTPS).
pub(super) async fn webtransport(
    State(state): State<AppState>,
    authed: Authed,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let Some(wt) = &state.wt else {
        let why = "this server does not serve WebTransport";
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no-webtransport", why));
    };
    // The host the page reached; the UDP port is the web app's own (see `wt`).
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or_else(|| ApiError::bad("no Host header"))?;
    let host = super::wt::host_only(host);
    let ticket = state.logins.ticket(&authed.id);
    Ok(Json(json!({
        "url": format!("https://{host}:{}/wt?ticket={ticket}", wt.port),
        "hashes": wt.hashes(),
        "block_bytes": super::wt::BLOCK_BYTES,
        "streams": super::wt::STREAMS,
        "lanes": wt.lanes,
    })))
}
