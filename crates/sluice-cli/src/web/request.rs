//! What the web app's handlers share ([`super::app`] routes to them): the app's state, the
//! session of a request ([`Authed`], with its CSRF check for every change), the error every
//! failure becomes ([`ApiError`]), and the small readers of queries, bodies and cookies.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use sluice::session::SessionError;

use super::auth::{COOKIE, LoginLimits, Logins, Session, csrf_matches};

/// The header a state-changing request carries its session's CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-sluice-csrf";

/// The policy: everything from this server only, nothing inline, no plugins, no framing.
/// `'wasm-unsafe-eval'` lets the page compile WebAssembly (its BLAKE3, `/sluice.wasm`, from this
/// server like every script); it allows no `eval` of JavaScript.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self'; \
     img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// What the web app's handlers share.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    /// Sessions and the login check.
    pub(crate) logins: Arc<Logins>,
    /// The server's gate: its transfers' places and counters, which web transfers share.
    pub(crate) gate: sluice::session::Gate,
    /// Partial uploads, swept when abandoned ([`sluice::web::PARTIAL_TTL`]).
    pub(crate) partials: Arc<sluice::web::Partials>,
    /// The fingerprint of the certificate served, shown on the page.
    pub(crate) fingerprint: String,
    /// The WebTransport side, when it is served (`/api/wt` hands it to the page).
    pub(crate) wt: Option<Arc<super::wt::Shared>>,
    /// Other servers in the page's panes and copies between servers, when offered
    /// ([`super::servers`]).
    pub(crate) servers: Option<Arc<super::servers::ServerLinks>>,
}

impl AppState {
    /// Logins checked by `gate` (the QUIC server's own), with `limits` on attempts.
    pub(crate) fn new(
        gate: sluice::session::Gate,
        fingerprint: String,
        limits: LoginLimits,
    ) -> Self {
        AppState {
            logins: Arc::new(Logins::new(gate.clone(), limits)),
            gate,
            partials: Arc::default(),
            fingerprint,
            wt: None,
            servers: None,
        }
    }

    /// With other servers in the page's panes: each login keeps its token for this server's
    /// own session ([`super::servers`]).
    pub(crate) fn with_servers(self, links: super::servers::ServerLinks) -> Self {
        self.logins.keep_tokens();
        AppState { servers: Some(Arc::new(links)), ..self }
    }

    /// With transfers over WebTransport too.
    pub(crate) fn with_wt(self, wt: Arc<super::wt::Shared>) -> Self {
        AppState { wt: Some(wt), ..self }
    }
}

/// Every route of the web app; any other path is a JSON 404.
/// A failed request: its status, a short code the page acts on, and a message for people.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Extra fields of the JSON (`have` for an upload at the wrong offset).
    extra: Option<Box<(&'static str, serde_json::Value)>>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), extra: None }
    }

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad-request", message)
    }

    /// The same error with `prefix` before its message (which server said it).
    pub(crate) fn prefixed(mut self, prefix: &str) -> Self {
        self.message.insert_str(0, prefix);
        self
    }

    pub(crate) fn with(mut self, key: &'static str, value: serde_json::Value) -> Self {
        self.extra = Some(Box::new((key, value)));
        self
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        let message = match &e {
            SessionError::Io { .. } => e.to_string(),
            other => other.detail(),
        };
        let (status, code) = match &e {
            SessionError::Auth(_) => (StatusCode::UNAUTHORIZED, "auth"),
            SessionError::NotFound(_) => (StatusCode::NOT_FOUND, "not-found"),
            // The file operations say a name is taken this way (`sluice::web`).
            SessionError::Refused(m) if m.ends_with(": exists") => (StatusCode::CONFLICT, "exists"),
            SessionError::Refused(_) => (StatusCode::FORBIDDEN, "refused"),
            SessionError::Busy(_) => (StatusCode::CONFLICT, "busy"),
            SessionError::Integrity(_) => (StatusCode::UNPROCESSABLE_ENTITY, "integrity"),
            SessionError::Protocol(_) => (StatusCode::BAD_REQUEST, "bad-request"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "io"),
        };
        ApiError::new(status, code, message)
    }
}

impl ApiError {
    /// The JSON an answer carries: `{"error": code, "message": text}` and any extra field
    /// (WebTransport's answers carry the same).
    pub(crate) fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({ "error": self.code, "message": self.message });
        if let Some((key, value)) = self.extra.as_deref() {
            body[*key] = value.clone();
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// The query string of `uri` as `T`, or a JSON 400.
pub(crate) fn query<T: DeserializeOwned>(uri: &Uri) -> Result<T, ApiError> {
    axum::extract::Query::<T>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::bad(format!("query: {}", e.body_text())))
}

/// A JSON body as `T`: it must say `Content-Type: application/json` (which a cross-site form
/// cannot send without the browser asking this server first), or a JSON 400/415.
pub(crate) fn json_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|t| t.trim() == "application/json"));
    if !json {
        let why = "send Content-Type: application/json";
        return Err(ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "bad-request", why));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("body: {e}")))
}

/// The value of the cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

/// Whether the browser's `Origin`, when it sent one, is this server (the `Host` it asked).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (origin.to_str().ok().and_then(|o| o.strip_prefix("https://")), host) {
        (Some(origin_host), Some(host)) => origin_host.eq_ignore_ascii_case(host),
        _ => false,
    }
}

/// The request's source address (the login rate limit counts by it).
pub(crate) fn peer(parts: &Parts) -> std::net::IpAddr {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0.ip())
}

/// A request of a logged-in session: the session, and its id (the cookie's value).
pub(crate) struct Authed {
    pub(crate) session: Arc<Session>,
    pub(crate) id: String,
}

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let unauthorized = || ApiError::new(StatusCode::UNAUTHORIZED, "auth", "log in first");
        let id = cookie(&parts.headers, COOKIE).ok_or_else(unauthorized)?;
        let session = state.logins.session(id).ok_or_else(unauthorized)?;
        if !matches!(parts.method, Method::GET | Method::HEAD) {
            check_changing(&parts.headers, &session)?;
        }
        Ok(Authed { session, id: id.to_owned() })
    }
}

/// A state-changing request must name this server as its origin (if it names one) and carry
/// the session's CSRF token.
pub(crate) fn check_changing(headers: &HeaderMap, session: &Session) -> Result<(), ApiError> {
    if !same_origin(headers) {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "csrf", "a request from another origin"));
    }
    let presented = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !csrf_matches(session, presented) {
        let why = format!("no valid {CSRF_HEADER} header: reload the page");
        return Err(ApiError::new(StatusCode::FORBIDDEN, "csrf", why));
    }
    Ok(())
}

/// Runs `f` on the blocking pool (file steps block); a panic there is a 500, not a crash.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SessionError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "io", e.to_string())),
    }
}
