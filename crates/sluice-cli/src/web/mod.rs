//! The server's HTTP side: one axum [`Router`] served by hyper over tokio.
//!
//! Today it answers `GET /metrics` for `sluice serve --metrics ADDR`. It is built so that the
//! browser client (issue 29) adds its routes to the same router: put what its handlers share in
//! [`WebState`], add a module beside `metrics.rs`, and a `.route` line in [`router`].
//!
//! How `serve` drives it: [`Listener::bind`] the address (so a bad one fails before the server
//! says it is serving), build [`router`] from the state, then [`Listener::serve`] it until the
//! server stops.

mod listen;
mod metrics;
#[cfg(test)]
mod tests;

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
}

/// Every route the server answers over HTTP; any other path is 404, another method on a known
/// path 405.
pub(crate) fn router(state: WebState) -> Router {
    Router::new().route("/metrics", get(metrics::scrape)).fallback(not_found).with_state(state)
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "not found: try /metrics\n")
}
