//! A server's counters, kept and encoded by `prometheus-client` in the Prometheus text format
//! (version 0.0.4) for `sluice serve --metrics`.
//!
//! Counters are registered without their `_total` suffix: the encoder adds it, to the samples
//! and to the HELP and TYPE lines alike, so the names a scrape shows are the ones documented.
//! It also ends each help text with a period, so the texts here have none.

use prometheus_client::encoding::prometheus_text;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::messages::ErrorCode;

/// The classes a failed request is counted under (the `class` label), in [`ErrorCode`] order.
const CLASSES: [(ErrorCode, &str); 9] = [
    (ErrorCode::Auth, "auth"),
    (ErrorCode::NotFound, "not_found"),
    (ErrorCode::Refused, "refused"),
    (ErrorCode::Io, "io"),
    (ErrorCode::Integrity, "integrity"),
    (ErrorCode::Partial, "partial"),
    (ErrorCode::Busy, "busy"),
    (ErrorCode::Network, "network"),
    (ErrorCode::Protocol, "protocol"),
];

/// What a server has done since it started. Every counter only grows; the gauges count what
/// is open now. The server updates it; [`Metrics::render`] is what a scrape reads.
#[derive(Debug)]
pub struct Metrics {
    /// Holds clones of the handles below (each shares its value with its clone), in the order
    /// a scrape lists them.
    registry: Registry,
    sessions: Counter,
    sessions_active: Gauge,
    sessions_refused: Counter,
    /// `get`, `put`.
    transfers: ByLabel<2>,
    transfers_active: Gauge,
    /// `sent`, `received`.
    file_bytes: ByLabel<2>,
    data_packets: Counter,
    retransmitted_packets: Counter,
    blocks_repaired: Counter,
    /// One per [`CLASSES`].
    errors: ByLabel<{ CLASSES.len() }>,
}

/// Counters under one name, one for each value of one label, always all listed and in a fixed
/// order. (The crate's `Family` makes a series on first use and lists them in hash order; a
/// scrape here shows every series from the start, at 0, in the same order every time.)
#[derive(Clone, Debug)]
struct ByLabel<const N: usize> {
    label: &'static str,
    series: [(&'static str, Counter); N],
}

impl<const N: usize> ByLabel<N> {
    fn new(label: &'static str, values: [&'static str; N]) -> Self {
        ByLabel { label, series: values.map(|value| (value, Counter::default())) }
    }

    /// The counter of the `i`th value given to [`ByLabel::new`].
    fn at(&self, i: usize) -> &Counter {
        &self.series[i].1
    }
}

impl<const N: usize> EncodeMetric for ByLabel<N> {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (value, counter) in &self.series {
            counter.encode(encoder.encode_family(&[(self.label, *value)])?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// Counts one more of something while it lasts (an active session or transfer).
#[derive(Debug)]
pub(crate) struct Active(Gauge);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let classes = CLASSES.map(|(_, class)| class);
        let mut m = Metrics {
            registry: Registry::default(),
            sessions: Counter::default(),
            sessions_active: Gauge::default(),
            sessions_refused: Counter::default(),
            transfers: ByLabel::new("direction", ["get", "put"]),
            transfers_active: Gauge::default(),
            file_bytes: ByLabel::new("direction", ["sent", "received"]),
            data_packets: Counter::default(),
            retransmitted_packets: Counter::default(),
            blocks_repaired: Counter::default(),
            errors: ByLabel::new("class", classes),
        };
        let registry = &mut m.registry;
        registry.register("sluice_sessions", "Sessions accepted", m.sessions.clone());
        registry.register("sluice_sessions_active", "Sessions open now", m.sessions_active.clone());
        registry.register(
            "sluice_sessions_refused",
            "Sessions refused (token, version, specification; too many sessions, or connections being set up)",
            m.sessions_refused.clone(),
        );
        registry.register(
            "sluice_transfers",
            "Transfers started, by direction (get: the server sends)",
            m.transfers.clone(),
        );
        registry.register(
            "sluice_transfers_active",
            "Transfers running now",
            m.transfers_active.clone(),
        );
        registry.register(
            "sluice_file_bytes",
            "File bytes moved by finished transfers, by direction",
            m.file_bytes.clone(),
        );
        registry.register(
            "sluice_data_packets",
            "Data packets sent for the first time (sending) or accepted (receiving)",
            m.data_packets.clone(),
        );
        registry.register(
            "sluice_retransmitted_packets",
            "Data packets sent again after a loss",
            m.retransmitted_packets.clone(),
        );
        registry.register(
            "sluice_blocks_repaired",
            "4 MiB blocks that did not hash to the sender's and moved again",
            m.blocks_repaired.clone(),
        );
        registry.register(
            "sluice_request_errors",
            "Requests that failed, by class",
            m.errors.clone(),
        );
        m
    }
}

impl Metrics {
    /// The HTTP `Content-Type` of what [`Metrics::render`] returns.
    pub const CONTENT_TYPE: &'static str = prometheus_text::CONTENT_TYPE;

    /// A session was accepted; it counts as active until the guard drops.
    pub(crate) fn session(&self) -> Active {
        self.sessions.inc();
        self.sessions_active.inc();
        Active(self.sessions_active.clone())
    }

    /// A session was refused (bad token, version, spec).
    pub(crate) fn refused(&self) {
        self.sessions_refused.inc();
    }

    /// A transfer started (`sending`: a get); it counts as active until the guard drops.
    pub(crate) fn transfer(&self, sending: bool) -> Active {
        self.transfers.at(if sending { 0 } else { 1 }).inc();
        self.transfers_active.inc();
        Active(self.transfers_active.clone())
    }

    /// File bytes a transfer moved, and its data channels' packets.
    pub(crate) fn moved(&self, sending: bool, bytes: u64, packets: u64, retransmitted: u64) {
        self.file_bytes.at(if sending { 0 } else { 1 }).inc_by(bytes);
        self.data_packets.inc_by(packets);
        self.retransmitted_packets.inc_by(retransmitted);
    }

    /// Blocks repaired (sent again, or received again): the QUIC server's transfers' and the web
    /// app's.
    pub fn repaired(&self, blocks: u64) {
        self.blocks_repaired.inc_by(blocks);
    }

    /// A request failed with `code`.
    pub(crate) fn failed(&self, code: ErrorCode) {
        if let Some(i) = CLASSES.iter().position(|(c, _)| *c == code) {
            self.errors.at(i).inc();
        }
    }

    /// The counters in the Prometheus text exposition format (version 0.0.4), served with
    /// [`Metrics::CONTENT_TYPE`].
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Only a failing writer fails the encoder, and a String's writes cannot fail.
        prometheus_text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_as_prometheus_text() {
        let m = Metrics::default();
        let session = m.session();
        let transfer = m.transfer(true);
        m.moved(true, 1000, 10, 2);
        m.failed(ErrorCode::NotFound);
        m.repaired(3);
        let text = m.render();
        assert!(text.contains("sluice_sessions_active 1\n"), "{text}");
        assert!(text.contains("sluice_transfers_total{direction=\"get\"} 1\n"), "{text}");
        assert!(text.contains("sluice_file_bytes_total{direction=\"sent\"} 1000\n"), "{text}");
        assert!(text.contains("sluice_retransmitted_packets_total 2\n"), "{text}");
        assert!(text.contains("sluice_request_errors_total{class=\"not_found\"} 1\n"), "{text}");
        assert!(text.contains("sluice_blocks_repaired_total 3\n"), "{text}");
        assert!(text.contains("# TYPE sluice_sessions_total counter\n"), "{text}");
        drop((session, transfer));
        let text = m.render();
        assert!(
            text.contains("sluice_sessions_active 0\n")
                && text.contains("sluice_transfers_active 0\n")
        );
    }

    /// Every series, with its HELP and TYPE lines, byte for byte as a scrape shows it after one
    /// of each kind of update: what Prometheus and the dashboards built on it read.
    #[test]
    fn the_exposition_is_stable() {
        let m = Metrics::default();
        let _session = m.session();
        m.refused();
        m.refused();
        let _get = m.transfer(true);
        drop(m.transfer(false));
        m.moved(true, 1000, 10, 2);
        m.moved(false, 500, 5, 1);
        m.repaired(3);
        m.failed(ErrorCode::NotFound);
        m.failed(ErrorCode::Busy);
        m.failed(ErrorCode::Busy);
        let text = m.render();
        let expected = r#"# HELP sluice_sessions_total Sessions accepted.
# TYPE sluice_sessions_total counter
sluice_sessions_total 1
# HELP sluice_sessions_active Sessions open now.
# TYPE sluice_sessions_active gauge
sluice_sessions_active 1
# HELP sluice_sessions_refused_total Sessions refused (token, version, specification; too many sessions, or connections being set up).
# TYPE sluice_sessions_refused_total counter
sluice_sessions_refused_total 2
# HELP sluice_transfers_total Transfers started, by direction (get: the server sends).
# TYPE sluice_transfers_total counter
sluice_transfers_total{direction="get"} 1
sluice_transfers_total{direction="put"} 1
# HELP sluice_transfers_active Transfers running now.
# TYPE sluice_transfers_active gauge
sluice_transfers_active 1
# HELP sluice_file_bytes_total File bytes moved by finished transfers, by direction.
# TYPE sluice_file_bytes_total counter
sluice_file_bytes_total{direction="sent"} 1000
sluice_file_bytes_total{direction="received"} 500
# HELP sluice_data_packets_total Data packets sent for the first time (sending) or accepted (receiving).
# TYPE sluice_data_packets_total counter
sluice_data_packets_total 15
# HELP sluice_retransmitted_packets_total Data packets sent again after a loss.
# TYPE sluice_retransmitted_packets_total counter
sluice_retransmitted_packets_total 3
# HELP sluice_blocks_repaired_total 4 MiB blocks that did not hash to the sender's and moved again.
# TYPE sluice_blocks_repaired_total counter
sluice_blocks_repaired_total 3
# HELP sluice_request_errors_total Requests that failed, by class.
# TYPE sluice_request_errors_total counter
sluice_request_errors_total{class="auth"} 0
sluice_request_errors_total{class="not_found"} 1
sluice_request_errors_total{class="refused"} 0
sluice_request_errors_total{class="io"} 0
sluice_request_errors_total{class="integrity"} 0
sluice_request_errors_total{class="partial"} 0
sluice_request_errors_total{class="busy"} 2
sluice_request_errors_total{class="network"} 0
sluice_request_errors_total{class="protocol"} 0
"#;
        assert_eq!(text, expected);
    }
}
