//! A server's counters, rendered in the Prometheus text format (`sluice serve --metrics`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// What a server has done since it started. Every field only grows, except the `active` ones.
#[derive(Debug, Default)]
pub struct Metrics {
    sessions: AtomicU64,
    sessions_active: AtomicU64,
    sessions_refused: AtomicU64,
    transfers_get: AtomicU64,
    transfers_put: AtomicU64,
    transfers_active: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    data_packets: AtomicU64,
    retransmitted_packets: AtomicU64,
    blocks_repaired: AtomicU64,
    errors: [AtomicU64; CLASSES.len()],
}

/// Counts one more of something while it lasts (an active session or transfer).
pub(crate) struct Active<'a>(&'a AtomicU64);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    /// A session was accepted; it counts as active until the guard drops.
    pub(crate) fn session(&self) -> Active<'_> {
        add(&self.sessions, 1);
        add(&self.sessions_active, 1);
        Active(&self.sessions_active)
    }

    /// A session was refused (bad token, version, spec).
    pub(crate) fn refused(&self) {
        add(&self.sessions_refused, 1);
    }

    /// A transfer started (`sending`: a get); it counts as active until the guard drops.
    pub(crate) fn transfer(&self, sending: bool) -> Active<'_> {
        add(if sending { &self.transfers_get } else { &self.transfers_put }, 1);
        add(&self.transfers_active, 1);
        Active(&self.transfers_active)
    }

    /// File bytes a transfer moved, and its data channels' packets.
    pub(crate) fn moved(&self, sending: bool, bytes: u64, packets: u64, retransmitted: u64) {
        add(if sending { &self.bytes_sent } else { &self.bytes_received }, bytes);
        add(&self.data_packets, packets);
        add(&self.retransmitted_packets, retransmitted);
    }

    /// Blocks repaired (sent again, or received again).
    pub(crate) fn repaired(&self, blocks: u64) {
        add(&self.blocks_repaired, blocks);
    }

    /// A request failed with `code`.
    pub(crate) fn failed(&self, code: ErrorCode) {
        if let Some(i) = CLASSES.iter().position(|(c, _)| *c == code) {
            add(&self.errors[i], 1);
        }
    }

    /// The counters in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        metric(
            "sluice_sessions_total",
            "counter",
            "Sessions accepted.",
            &[("", get(&self.sessions))],
        );
        metric(
            "sluice_sessions_active",
            "gauge",
            "Sessions open now.",
            &[("", get(&self.sessions_active))],
        );
        metric(
            "sluice_sessions_refused_total",
            "counter",
            "Sessions refused (token, version, specification; too many sessions, or connections being set up).",
            &[("", get(&self.sessions_refused))],
        );
        metric(
            "sluice_transfers_total",
            "counter",
            "Transfers started, by direction (get: the server sends).",
            &[
                ("{direction=\"get\"}", get(&self.transfers_get)),
                ("{direction=\"put\"}", get(&self.transfers_put)),
            ],
        );
        metric(
            "sluice_transfers_active",
            "gauge",
            "Transfers running now.",
            &[("", get(&self.transfers_active))],
        );
        metric(
            "sluice_file_bytes_total",
            "counter",
            "File bytes moved by finished transfers, by direction.",
            &[
                ("{direction=\"sent\"}", get(&self.bytes_sent)),
                ("{direction=\"received\"}", get(&self.bytes_received)),
            ],
        );
        metric(
            "sluice_data_packets_total",
            "counter",
            "Data packets sent for the first time (sending) or accepted (receiving).",
            &[("", get(&self.data_packets))],
        );
        metric(
            "sluice_retransmitted_packets_total",
            "counter",
            "Data packets sent again after a loss.",
            &[("", get(&self.retransmitted_packets))],
        );
        metric(
            "sluice_blocks_repaired_total",
            "counter",
            "4 MiB blocks that did not hash to the sender's and moved again.",
            &[("", get(&self.blocks_repaired))],
        );
        let labels: Vec<String> =
            CLASSES.iter().map(|(_, c)| format!("{{class=\"{c}\"}}")).collect();
        let errors: Vec<(&str, u64)> =
            labels.iter().zip(&self.errors).map(|(l, c)| (l.as_str(), get(c))).collect();
        metric(
            "sluice_request_errors_total",
            "counter",
            "Requests that failed, by class.",
            &errors,
        );
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
