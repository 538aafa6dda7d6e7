//! Other servers in the page's panes, and copies between two servers as third-party jobs
//! (issue 29, item 6; `docs/third-party.md`).
//!
//! For a logged-in page, this server plays the third-party client (C): it holds a Sluice
//! session to each server the page added (its address, its fingerprint pinned, and the token
//! that server gave the user, kept in this server's memory for the login's life and never sent
//! back to the page), and one to itself with the login's own token. A copy between two server
//! panes is [`copy_between`] of two of those sessions: a job on the destination server, which
//! reads from the source directly and goes on when the tab is closed. Every request there
//! (list, grant, job, jobs, cancel) is a Sluice request under that server's token: the same
//! checks as the CLI's, made by the server whose files they are.
//!
//! | request                                            | answer                                |
//! |----------------------------------------------------|---------------------------------------|
//! | `GET /api/servers`                                 | `{available, servers: [{id, label, fingerprint}]}` |
//! | `POST /api/servers {address, fingerprint, token}`  | `{id, label, fingerprint}`            |
//! | `POST /api/servers/forget {id}`                    | `{}`                                  |
//! | `GET /api/servers/list?server=&path=`              | as `/api/list`                        |
//! | `POST /api/copy {from, to, paths, dest, overwrite}` | `{started}` or `{done: {files, bytes, ...}}` |
//! | `GET /api/jobs`                                    | `{servers: [{server, label, jobs, error: {error, message}}]}` |
//! | `POST /api/jobs/cancel {server, id}`               | `{jobs}`                              |
//!
//! A server is named by its id (`""` is this server). Dialing another server is held to the
//! server's own rule for third-party sources (`serve --third-party-dial`), and refused when
//! `serve --third-party off`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sluice::session::between::{DataSettings, Side, copy_between};
use sluice::session::{
    Client, ClientConfig, CopyOptions, Fingerprint, Overwrite, SessionError, ThirdPartyConfig,
    TrustPolicy, default_channel_config,
};

use super::request::{ApiError, AppState, Authed, json_body, query};

/// Other servers one login may hold at once.
pub(crate) const REMOTES_MAX: usize = 8;
/// How long a copy's request waits for its job to start (or end) before it answers.
const START_WAIT: Duration = Duration::from_secs(60);
/// How long connecting to a server may take.
const CONNECT_WAIT: Duration = Duration::from_secs(20);
/// How long the jobs panel waits for each server's list.
const LIST_WAIT: Duration = Duration::from_secs(5);

/// What this server needs to reach itself and others for its pages.
#[derive(Debug, Clone)]
pub(crate) struct ServerLinks {
    /// Where its Sluice sessions listen (an unspecified address: the host the page reached).
    pub(crate) listen: SocketAddr,
    /// Its Sluice identity, pinned when it connects to itself.
    pub(crate) fingerprint: Fingerprint,
    /// Its third-party settings: whom it may dial, and whether it takes part at all.
    pub(crate) third_party: ThirdPartyConfig,
}

/// One login's sessions to servers: its own server's (made at the first need) and those the
/// page added.
#[derive(Default)]
pub(crate) struct Linked {
    /// The login's token, for this server's own session.
    token: String,
    own: tokio::sync::Mutex<Option<Client>>,
    remotes: Mutex<Vec<Remote>>,
    /// The ids given so far.
    next: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Linked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Linked").finish_non_exhaustive()
    }
}

impl Linked {
    /// A login's links, with its token.
    pub(crate) fn new(token: &str) -> Linked {
        Linked { token: token.to_owned(), ..Linked::default() }
    }

    fn remotes(&self) -> std::sync::MutexGuard<'_, Vec<Remote>> {
        self.remotes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A server the page added.
#[derive(Clone)]
struct Remote {
    id: String,
    /// `host:port` as the user wrote it (with the default port added).
    label: String,
    config: ClientConfig,
    client: Client,
}

/// One end of a copy or a listing: a session and the name the page shows for it.
struct End {
    label: String,
    client: Client,
}

fn unavailable() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no-servers",
        "this server does not reach other servers for its pages (serve --third-party off)",
    )
}

/// The login's links and the server's settings, when the server offers them.
fn links<'a>(
    state: &'a AppState,
    authed: &'a Authed,
) -> Result<(&'a Arc<ServerLinks>, &'a Arc<Linked>), ApiError> {
    match (&state.servers, &authed.session.linked) {
        (Some(links), Some(linked)) => Ok((links, linked)),
        _ => Err(unavailable()),
    }
}

/// A state-changing request of a login that may reach other servers: the server's settings,
/// the login's sessions, the request's headers, and its JSON body as `T` (with the session's
/// CSRF check, as every change).
pub(super) struct Linking<T> {
    links: Arc<ServerLinks>,
    linked: Arc<Linked>,
    headers: HeaderMap,
    body: T,
}

/// The most bytes of a request body here (a few names and a token).
const BODY_MAX: usize = 64 << 10;

impl<T: DeserializeOwned> FromRequest<AppState> for Linking<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = request.into_parts();
        let authed = Authed::from_request_parts(&mut parts, state).await?;
        let (links, linked) = links(state, &authed)?;
        let (links, linked) = (links.clone(), linked.clone());
        let bytes = axum::body::to_bytes(body, BODY_MAX)
            .await
            .map_err(|e| ApiError::bad(format!("body: {e}")))?;
        let body = json_body(&parts.headers, &bytes)?;
        Ok(Linking { links, linked, headers: parts.headers, body })
    }
}

/// Connects with `config`, within [`CONNECT_WAIT`].
async fn connect(config: ClientConfig) -> Result<Client, SessionError> {
    match tokio::time::timeout(CONNECT_WAIT, Client::connect(config)).await {
        Ok(result) => result,
        Err(_) => Err(SessionError::Network("the server did not answer within 20 s".into())),
    }
}

/// A client's settings for `address` (`host` as the user named it), pinned to `fingerprint`,
/// with `token`; no known-hosts file is read or written (the fingerprint is the trust).
fn client_config(
    address: SocketAddr,
    host: &str,
    token: &str,
    fingerprint: Fingerprint,
) -> ClientConfig {
    ClientConfig::new(address, host, token, "/dev/null", TrustPolicy::Pinned(fingerprint))
}

/// The end `id` names: this server (`""`) or one the page added; a closed session is opened
/// again.
async fn end(
    links: &ServerLinks,
    linked: &Linked,
    headers: &HeaderMap,
    id: &str,
) -> Result<End, ApiError> {
    if id.is_empty() {
        let mut own = linked.own.lock().await;
        if let Some(client) = own.as_ref().filter(|c| !c.is_closed()) {
            return Ok(End { label: "this server".into(), client: client.clone() });
        }
        let address = own_address(links, headers).await?;
        let host = address.ip().to_string();
        let config = client_config(address, &host, &linked.token, links.fingerprint.clone());
        let client = connect(config).await.map_err(|e| named("this server", e))?;
        *own = Some(client.clone());
        return Ok(End { label: "this server".into(), client });
    }
    let remote =
        linked.remotes().iter().find(|r| r.id == id).cloned().ok_or_else(|| {
            ApiError::new(StatusCode::NOT_FOUND, "not-found", "no such server here")
        })?;
    if !remote.client.is_closed() {
        return Ok(End { label: remote.label, client: remote.client });
    }
    let client = connect(remote.config.clone()).await.map_err(|e| named(&remote.label, e))?;
    if let Some(r) = linked.remotes().iter_mut().find(|r| r.id == id) {
        r.client = client.clone();
    }
    Ok(End { label: remote.label, client })
}

/// Where another server reaches this one's Sluice sessions: its listening address, or, when
/// that is unspecified, the host the page reached with the Sluice port.
async fn own_address(links: &ServerLinks, headers: &HeaderMap) -> Result<SocketAddr, ApiError> {
    if !links.listen.ip().is_unspecified() {
        return Ok(links.listen);
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or_else(|| ApiError::bad("no Host header"))?;
    let host = super::wt::host_only(host).trim_start_matches('[').trim_end_matches(']');
    resolve(host, links.listen.port()).await
}

/// The first address of `host` at `port`.
async fn resolve(host: &str, port: u16) -> Result<SocketAddr, ApiError> {
    let found = tokio::net::lookup_host((host, port)).await;
    found.ok().and_then(|mut a| a.next()).ok_or_else(|| {
        ApiError::new(StatusCode::BAD_GATEWAY, "network", format!("cannot resolve {host:?}"))
    })
}

/// `err` of the server `label`, said as such.
fn named(label: &str, err: SessionError) -> ApiError {
    let api = ApiError::from(err);
    api.prefixed(&format!("{label}: "))
}

/// `GET /api/servers`.
pub(super) async fn listed(State(state): State<AppState>, authed: Authed) -> Json<Value> {
    let Ok((_, linked)) = links(&state, &authed) else {
        return Json(json!({ "available": false, "servers": [] }));
    };
    let servers: Vec<Value> = linked
        .remotes()
        .iter()
        .map(|r| json!({ "id": r.id, "label": r.label, "fingerprint": r.client.server_fingerprint().to_string() }))
        .collect();
    Json(json!({ "available": true, "servers": servers }))
}

#[derive(Deserialize)]
pub(super) struct AddBody {
    address: String,
    fingerprint: String,
    token: String,
}

/// `POST /api/servers`: connects to another server with the token it gave the user, its
/// fingerprint pinned.
pub(super) async fn add(request: Linking<AddBody>) -> Result<Json<Value>, ApiError> {
    let Linking { links, linked, body: AddBody { address, fingerprint, token }, .. } = request;
    let fingerprint: Fingerprint = fingerprint.trim().parse().map_err(|e| {
        ApiError::bad(format!("the fingerprint: {e} (the server prints it when it starts)"))
    })?;
    let (host, port) = split_address(address.trim())?;
    let label =
        if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    if linked.remotes().len() >= REMOTES_MAX {
        let why = format!("at most {REMOTES_MAX} other servers at once: forget one first");
        return Err(ApiError::new(StatusCode::CONFLICT, "busy", why));
    }
    let resolved = resolve(host, port).await?;
    links.third_party.may_dial(resolved, &fingerprint)?;
    let config = client_config(resolved, host, &token, fingerprint);
    // The errors of connecting name the server already.
    let client = connect(config.clone()).await.map_err(ApiError::from)?;
    let id = format!("s{}", linked.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
    let answer =
        json!({ "id": id, "label": label, "fingerprint": client.server_fingerprint().to_string() });
    let mut remotes = linked.remotes();
    if remotes.len() >= REMOTES_MAX {
        return Err(ApiError::new(StatusCode::CONFLICT, "busy", "too many other servers"));
    }
    remotes.push(Remote { id, label, config, client });
    Ok(Json(answer))
}

/// `host` and port of `address` (`host`, `host:port`, `[v6]:port`; the default port when none).
fn split_address(address: &str) -> Result<(&str, u16), ApiError> {
    let bad = || ApiError::bad(format!("the address {address:?}: write host:port"));
    if address.is_empty() || address.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(bad());
    }
    if let Some(rest) = address.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if after.is_empty() => crate::DEFAULT_PORT,
            None => return Err(bad()),
        };
        return Ok((host, port));
    }
    match address.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => Ok((address, crate::DEFAULT_PORT)),
        Some((host, port)) if !host.is_empty() => Ok((host, port.parse().map_err(|_| bad())?)),
        Some(_) => Err(bad()),
        None => Ok((address, crate::DEFAULT_PORT)),
    }
}

#[derive(Deserialize)]
pub(super) struct IdBody {
    id: String,
}

/// `POST /api/servers/forget`: closes the session to a server the page added and forgets its
/// token. Its jobs go on there.
pub(super) async fn forget(request: Linking<IdBody>) -> Result<Json<Value>, ApiError> {
    let Linking { linked, body: IdBody { id }, .. } = request;
    let gone = {
        let mut remotes = linked.remotes();
        let at = remotes.iter().position(|r| r.id == id);
        at.map(|i| remotes.remove(i))
    };
    match gone {
        Some(remote) => {
            remote.client.close().await;
            Ok(Json(json!({})))
        }
        None => Err(ApiError::new(StatusCode::NOT_FOUND, "not-found", "no such server here")),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    server: String,
    #[serde(default)]
    path: String,
}

/// `GET /api/servers/list?server=&path=`: a folder on a server the page added, as `/api/list`
/// answers for this one.
pub(super) async fn list(
    State(state): State<AppState>,
    authed: Authed,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let (links, linked) = links(&state, &authed)?;
    let ListQuery { server, path } = query(&uri)?;
    let end = end(links, linked, &headers, &server).await?;
    let entries = end.client.list(&path).await.map_err(|e| named(&end.label, e))?;
    Ok(Json(super::api::listing_json(&path, &entries, 0)))
}

#[derive(Deserialize)]
pub(super) struct CopyBody {
    /// The source server's id (`""`: this one).
    from: String,
    /// The destination server's id.
    to: String,
    /// Paths on the source, under its token's root.
    paths: Vec<String>,
    /// The folder on the destination they go into.
    #[serde(default)]
    dest: String,
    /// `refuse` (or empty), `never`, `always`, `if-newer`, `if-different`.
    #[serde(default)]
    overwrite: String,
}

/// The overwrite policy a page names.
fn overwrite(name: &str) -> Result<(Overwrite, bool), ApiError> {
    match name {
        "" | "refuse" => Ok((Overwrite::Refuse, false)),
        "if-different" => Ok((Overwrite::IfDifferent, true)),
        "keep-both" => Err(ApiError::bad(
            "\"keep both\" is not offered for copies between servers: choose replace, skip or \
             if newer",
        )),
        other => Overwrite::from_name(other)
            .map(|o| (o, false))
            .ok_or_else(|| ApiError::bad(format!("no overwrite policy {other:?}"))),
    }
}

/// `POST /api/copy`: copies `paths` from one server to a folder on another as a job of the
/// destination's (a third-party transfer). It answers once the job started (or ended, or was
/// refused); the job goes on without the page.
pub(super) async fn copy(request: Linking<CopyBody>) -> Result<Json<Value>, ApiError> {
    let Linking {
        links,
        linked,
        headers,
        body: CopyBody { from, to, paths, dest, overwrite: policy },
    } = request;
    if from == to {
        return Err(ApiError::bad(
            "both panes show the same server: a copy between servers needs two",
        ));
    }
    if paths.is_empty() {
        return Err(ApiError::bad("nothing to copy"));
    }
    let (overwrite, checksum) = overwrite(&policy)?;
    for id in [&from, &to] {
        if !id.is_empty() && !linked.remotes().iter().any(|r| &r.id == id) {
            return Err(ApiError::new(StatusCode::NOT_FOUND, "not-found", "no such server here"));
        }
    }
    let options = CopyOptions { recursive: true, overwrite, checksum, ..CopyOptions::default() };
    let source = end(&links, &linked, &headers, &from).await?;
    let destination = end(&links, &linked, &headers, &to).await?;
    let (started, starting) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut started = Some(started);
        let channel = default_channel_config();
        let outcome = copy_between(
            &source.client,
            &destination.client,
            &paths,
            &dest,
            &options,
            DataSettings { channel: &channel, channels: None },
            |_| {
                if let Some(started) = started.take() {
                    let _ = started.send(Ok(None));
                }
            },
        )
        .await;
        let said = outcome.map(Some).map_err(|(side, e)| match side {
            Side::Source => named(&source.label, e),
            Side::Destination => named(&destination.label, e),
        });
        match started.take() {
            Some(started) => {
                let _ = started.send(said);
            }
            None => {
                if let Err(e) = said {
                    tracing::info!(error = %e.body(), "a page's copy between servers ended");
                }
            }
        }
    });
    match tokio::time::timeout(START_WAIT, starting).await {
        Ok(Ok(Ok(None))) | Err(_) => Ok(Json(json!({ "started": true }))),
        Ok(Ok(Ok(Some(done)))) => Ok(Json(json!({ "done": {
            "job": done.job, "files": done.files, "bytes": done.bytes,
            "replaced": done.replaced, "kept": done.kept, "attached": done.attached,
        } }))),
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(_)) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "io", "the copy ended")),
    }
}

/// `GET /api/jobs`: the login's jobs on this server and on each server the page added (each
/// server lists its token's jobs: running, stalled and ended lately).
pub(super) async fn jobs(
    State(state): State<AppState>,
    authed: Authed,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let (links, linked) = links(&state, &authed)?;
    let mut ids = vec![String::new()];
    ids.extend(linked.remotes().iter().map(|r| r.id.clone()));
    // All at once, each within LIST_WAIT: a server that does not answer delays none of the
    // others and the panel says so.
    let headers = &headers;
    let listings = ids.iter().map(|id| async move {
        let listed = async {
            let end = end(links, linked, headers, id).await?;
            let jobs = end.client.jobs().await.map_err(|e| named(&end.label, e))?;
            Ok::<_, ApiError>((end.label, jobs))
        };
        let late = || {
            ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "network",
                "the server did not answer in time",
            )
        };
        match tokio::time::timeout(LIST_WAIT, listed).await.unwrap_or_else(|_| Err(late())) {
            Ok((label, jobs)) => json!({ "server": id, "label": label, "jobs": jobs }),
            Err(e) => json!({ "server": id, "label": "", "jobs": [], "error": e.body() }),
        }
    });
    let servers = futures_util::future::join_all(listings).await;
    Ok(Json(json!({ "servers": servers })))
}

#[derive(Deserialize)]
pub(super) struct CancelBody {
    server: String,
    id: String,
}

/// `POST /api/jobs/cancel`: cancels a job on the server that runs it.
pub(super) async fn cancel(request: Linking<CancelBody>) -> Result<Json<Value>, ApiError> {
    let Linking { links, linked, headers, body: CancelBody { server, id } } = request;
    let end = end(&links, &linked, &headers, &server).await?;
    let jobs = end.client.cancel_job(&id).await.map_err(|e| named(&end.label, e))?;
    Ok(Json(json!({ "jobs": jobs })))
}

#[cfg(test)]
mod tests {
    use super::split_address;

    #[test]
    fn addresses_are_host_and_port_with_the_default_port_when_none() {
        let port = crate::DEFAULT_PORT;
        assert_eq!(split_address("a.example:9000").unwrap(), ("a.example", 9000));
        assert_eq!(split_address("a.example").unwrap(), ("a.example", port));
        assert_eq!(split_address("198.18.0.1:7").unwrap(), ("198.18.0.1", 7));
        assert_eq!(split_address("[::1]:8").unwrap(), ("::1", 8));
        assert_eq!(split_address("[::1]").unwrap(), ("::1", port));
        assert_eq!(split_address("::1").unwrap(), ("::1", port));
        for bad in ["", ":80", "a:b", "a b:1", "a/b:1", "[::1", "[::1]x", "a:99999"] {
            assert!(split_address(bad).is_err(), "{bad:?} was taken");
        }
    }
}
