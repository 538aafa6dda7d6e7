//! `GET /metrics`: the server's counters for Prometheus.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use sluice::session::Metrics;

use super::WebState;

/// The counters in the Prometheus text format (0.0.4), rendered at each scrape.
pub(super) async fn scrape(State(state): State<WebState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, Metrics::CONTENT_TYPE)], state.metrics.render())
}
