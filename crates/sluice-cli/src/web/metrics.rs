//! `GET /metrics`: the server's counters for Prometheus.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use sluice::session::Metrics;

use super::WebState;

/// The counters in the Prometheus text format (0.0.4), rendered at each scrape; the web app's
/// WebTransport counters after them when it serves WebTransport.
pub(super) async fn scrape(State(state): State<WebState>) -> impl IntoResponse {
    let mut text = state.metrics.render();
    if let Some(wt) = &state.webtransport {
        text.push_str(&wt.render());
    }
    ([(header::CONTENT_TYPE, Metrics::CONTENT_TYPE)], text)
}
