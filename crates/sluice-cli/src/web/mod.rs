//! The server's HTTP side: one axum [`Router`] served by hyper over tokio.
//!
//! It answers `GET /metrics` for `sluice serve --metrics ADDR` ([`router`], plain HTTP), and
//! serves the browser file manager for `sluice serve --web ADDR` over HTTPS ([`app::router`]:
//! the page in `assets.rs`, the JSON API in `api.rs`, logins and sessions in `auth.rs`, the
//! certificate in `tls.rs`), and its transfers over WebTransport on the same port over UDP
//! (`wt/`).
//!
//! How `serve` drives it: [`Listener::bind`] the address (so a bad one fails before the server
//! says it is serving), build [`router`] from the state, then [`Listener::serve`] it until the
//! server stops.

mod api;
pub(crate) mod app;
#[cfg(test)]
mod app_tests;
mod assets;
pub(crate) mod auth;
mod listen;
mod metrics;
mod range;
mod request;
pub(crate) mod servers;
#[cfg(test)]
mod servers_tests;
#[cfg(test)]
mod tests;
pub(crate) mod tls;
#[cfg(test)]
mod tls_tests;
pub(crate) mod wt;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use sluice::session::Metrics;

pub(crate) use listen::{Limits, Listener};

/// What the handlers share; cheap to clone (axum clones it for each request).
#[derive(Clone, Debug)]
pub(crate) struct WebState {
    /// The server's counters, for `GET /metrics`.
    pub(crate) metrics: Arc<Metrics>,
    /// The web app's WebTransport counters, when it serves WebTransport.
    pub(crate) webtransport: Option<Arc<wt::Counters>>,
}

/// Every route the server answers over HTTP; any other path is 404, another method on a known
/// path 405.
pub(crate) fn router(state: WebState) -> Router {
    Router::new().route("/metrics", get(metrics::scrape)).fallback(not_found).with_state(state)
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "not found: try /metrics\n")
}
