//! The web app's router (`sluice serve --web`): its embedded page ([`super::assets`]) and its
//! JSON API ([`super::api`]), with what every answer and every request goes through here:
//!
//! - security headers on every answer ([`secure_headers`]): a strict Content-Security-Policy
//!   (no inline script or style, nothing from elsewhere, no framing), `nosniff`, no referrer,
//!   and `no-store` on the API;
//! - [`Authed`]: the session of the request's cookie, and, for every method that changes
//!   something, its CSRF token in `X-Sluice-CSRF` and, when the browser names one, an `Origin`
//!   that is this server's;
//! - [`ApiError`]: every failure as `{"error": code, "message": text}` with its HTTP status.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::{get, post};

pub(crate) use super::request::AppState;
use super::request::{ApiError, CSP};
use super::{api, assets, servers};

pub(crate) fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/api/login", post(api::login))
        .route("/api/logout", post(api::logout))
        .route("/api/session", get(api::session))
        .route("/api/list", get(api::list))
        .route("/api/tree", get(api::tree))
        .route("/api/stat", get(api::stat))
        .route("/api/mkdir", post(api::mkdir))
        .route("/api/rename", post(api::rename))
        .route("/api/delete", post(api::delete))
        .route("/api/file", get(api::download))
        .route("/api/hash", get(api::hash))
        .route("/api/sweep", get(api::sweep_down).put(api::sweep_up))
        .route("/api/upload", get(api::upload_status).put(api::upload))
        .route("/api/upload/stop", post(api::upload_stop))
        .route("/api/wt", post(api::webtransport))
        .route("/api/servers", get(servers::listed).post(servers::add))
        .route("/api/servers/forget", post(servers::forget))
        .route("/api/servers/list", get(servers::list))
        .route("/api/copy", post(servers::copy))
        .route("/api/jobs", get(servers::jobs))
        .route("/api/jobs/cancel", post(servers::cancel));
    assets::routes(api)
        .fallback(not_found)
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not-found", format!("no such page: {}", uri.path()))
}

/// Adds the security headers to every answer.
async fn secure_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// How often abandoned partial uploads are looked for.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// Removes abandoned partial uploads ([`sluice::web::PARTIAL_TTL`] after their last write)
/// every [`SWEEP_EVERY`], until `stop` ends.
pub(crate) async fn sweep_partials(
    partials: std::sync::Arc<sluice::web::Partials>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = every.tick() => {
                let partials = partials.clone();
                let removed = tokio::task::spawn_blocking(move || {
                    partials.sweep(std::time::SystemTime::now(), sluice::web::PARTIAL_TTL)
                })
                .await
                .unwrap_or(0);
                if removed > 0 {
                    tracing::info!(removed, "abandoned partial uploads removed");
                }
            }
            () = &mut stop => return,
        }
    }
}
