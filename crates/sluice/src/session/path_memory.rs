//! Path memory (issue 25, item 3): what each path delivered to the last transfer sent over it,
//! so the next one starts near that rate instead of probing up from a few packets
//! (`ChannelConfig::start_rate_bps`; the controller checks it within a round trip, see "Path
//! memory" in `sluice-proto`'s `cc/adaptive.md`).
//!
//! A path is the peer (its certificate's fingerprint when it has one, else its address) and the
//! local address the session uses. Its record: the delivery rate the sending controller settled
//! on, the least RTT, the loss ratio, and when. A record is used only while it is younger than
//! [`MAX_AGE`] and the session's RTT now is near the one remembered (else the route changed).
//!
//! The records are one small JSON file: the client's under the user's cache directory, a
//! server's in its state directory (for its downloads). It is a cache: a file that cannot be
//! read or written costs the start, never the transfer (logged at debug).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::datapath::ChannelReport;

/// A record older than this is not used (and is dropped at the next write).
pub const MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);
/// The most paths kept; the oldest go first.
const MAX_PATHS: usize = 256;
/// The RTT now may be up to this many times the remembered least RTT, and down to its share,
/// give or take [`RTT_SLACK`], for the record to count as the same path.
const RTT_FACTOR: f64 = 2.0;
/// See [`RTT_FACTOR`]: a queue on the path, a busy host's scheduling (the session's RTT is its
/// handshake's early on).
const RTT_SLACK: Duration = Duration::from_millis(50);
/// Transfers shorter than this many least RTTs teach nothing: their rate is the ramp.
const MIN_TRANSFER_RTTS: f64 = 4.0;
/// The rate kept is at most this many times the transfer's own average (payload over its
/// time): the controller's delivered rate is a windowed maximum, and a receive path that hands
/// packets over in bursts lifts it (on loopback it read 4.7 Gbit/s of a transfer that averaged
/// 1.5). A short transfer's average is mostly its ramp (128 MiB at 300 ms first contact: 490
/// Mbit/s on a 1000 Mbit/s link, where its controller settled at about 950): at 1.25 times it,
/// the next start was at 580 Mbit/s. A start too low only costs startup's climb from there.
const MAX_OF_AVERAGE: f64 = 2.0;

/// One path's record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PathRecord {
    /// What the path delivered, bits per second of UDP payload.
    pub rate_bps: u64,
    /// The least RTT the transfer measured, microseconds.
    pub min_rtt_us: u64,
    /// Packets lost per packet sent.
    pub loss: f64,
    /// When, seconds since the Unix epoch.
    pub when: u64,
}

/// A start from memory: the record and its age.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recalled {
    /// What was kept.
    pub record: PathRecord,
    /// How long ago.
    pub age: Duration,
}

/// The records' file.
#[derive(Debug, Clone)]
pub struct PathMemory {
    file: PathBuf,
}

/// The file's contents: records by path key.
type Records = BTreeMap<String, PathRecord>;

impl PathMemory {
    /// Memory kept in `file` (made on the first write, with its directory).
    pub fn at(file: impl Into<PathBuf>) -> PathMemory {
        PathMemory { file: file.into() }
    }

    /// The file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The key of the path to `peer` (a fingerprint or an address) from `local`.
    pub fn key(peer: &str, local: Option<IpAddr>) -> String {
        match local {
            Some(ip) => format!("{peer} from {}", ip.to_canonical()),
            None => format!("{peer} from any"),
        }
    }

    /// The record of `key`, when it is young enough at `now` and `rtt` (the session's now)
    /// says the path is the same. Reads the file.
    pub fn recall(&self, key: &str, rtt: Duration, now: SystemTime) -> Option<Recalled> {
        let record = *self.load().get(key)?;
        let age = age_at(&record, now)?;
        let min_rtt = Duration::from_micros(record.min_rtt_us);
        let (rtt_s, min_s, slack_s) =
            (rtt.as_secs_f64(), min_rtt.as_secs_f64(), RTT_SLACK.as_secs_f64());
        let near = rtt_s <= min_s * RTT_FACTOR + slack_s && rtt_s >= min_s / RTT_FACTOR - slack_s;
        if age > MAX_AGE || record.rate_bps == 0 || !near {
            tracing::debug!(
                key,
                ?age,
                ?rtt,
                ?min_rtt,
                "path memory not used (too old, or the RTT changed)"
            );
            return None;
        }
        Some(Recalled { record, age })
    }

    /// Keeps what a finished sending `report` measured as `key`'s record at `now`, when it
    /// measured enough; returns the record kept. Reads and writes the file.
    pub fn remember(
        &self,
        key: &str,
        report: &ChannelReport,
        now: SystemTime,
    ) -> Option<PathRecord> {
        let Some(record) = record_of(report, now) else {
            tracing::debug!(
                key,
                rate_bps = report.path_rate_bps,
                min_rtt_us = report.min_rtt_us,
                seconds = report.seconds,
                "path memory: nothing to keep (too short, or no round trip measured)"
            );
            return None;
        };
        let mut records = self.load();
        records.retain(|_, r| age_at(r, now).is_some_and(|age| age <= MAX_AGE));
        records.insert(key.to_owned(), record);
        while records.len() > MAX_PATHS {
            let oldest = records.iter().min_by_key(|(_, r)| r.when).map(|(k, _)| k.clone())?;
            records.remove(&oldest);
        }
        if let Err(e) = self.store(&records) {
            tracing::debug!(file = %self.file.display(), error = %e, "path memory not written");
            return None;
        }
        Some(record)
    }

    fn load(&self) -> Records {
        match std::fs::read(&self.file) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::debug!(file = %self.file.display(), error = %e, "path memory unreadable: starting afresh");
                Records::new()
            }),
            Err(_) => Records::new(),
        }
    }

    fn store(&self, records: &Records) -> Result<(), crate::session::SessionError> {
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                crate::session::SessionError::io(format!("creating {}", dir.display()), e)
            })?;
        }
        let bytes = serde_json::to_vec_pretty(records).unwrap_or_default();
        crate::session::identity::write_private(&self.file, &bytes)
    }
}

/// How old `record` is at `now`; `None` for a record from the future (a clock set back).
fn age_at(record: &PathRecord, now: SystemTime) -> Option<Duration> {
    let when = UNIX_EPOCH + Duration::from_secs(record.when);
    now.duration_since(when).ok()
}

/// The record a finished sending `report` makes: the rate its controller settled on, when the
/// transfer lasted long enough for one.
pub(crate) fn record_of(report: &ChannelReport, now: SystemTime) -> Option<PathRecord> {
    let min_rtt_us = report.min_rtt_us.filter(|r| *r > 0)?;
    if report.seconds < MIN_TRANSFER_RTTS * min_rtt_us as f64 / 1e6 {
        return None;
    }
    let average_bps = report.payload_bytes as f64 * 8.0 / report.seconds;
    // A controller that never settled (its startup never found the path's limit: a loopback
    // path whose packet trains read the clock) leaves the average.
    let rate_bps = match report.path_rate_bps.filter(|r| *r > 0) {
        Some(settled_bps) => (settled_bps as f64).min(MAX_OF_AVERAGE * average_bps) as u64,
        None => average_bps as u64,
    };
    if rate_bps == 0 {
        return None;
    }
    let sent = report.data_pkts.max(1);
    Some(PathRecord {
        rate_bps,
        min_rtt_us,
        loss: report.lost_pkts as f64 / sent as f64,
        when: now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rate_mbit: u64, rtt_ms: u64, seconds: f64) -> ChannelReport {
        ChannelReport {
            path_rate_bps: Some(rate_mbit * 1_000_000),
            min_rtt_us: Some(rtt_ms * 1000),
            data_pkts: 1000,
            lost_pkts: 10,
            // Averaged at the settled rate.
            payload_bytes: (rate_mbit as f64 * 1e6 / 8.0 * seconds) as u64,
            seconds,
            ..ChannelReport::default()
        }
    }

    #[test]
    fn a_record_is_recalled_on_the_same_path_while_young() {
        let dir = tempfile::tempdir().unwrap();
        let memory = PathMemory::at(dir.path().join("cache/paths.json"));
        let key = PathMemory::key("SHA256:abc", Some("198.18.0.1".parse().unwrap()));
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let kept = memory.remember(&key, &report(900, 100, 3.0), t0).unwrap();
        assert_eq!((kept.rate_bps, kept.min_rtt_us), (900_000_000, 100_000));
        assert!((kept.loss - 0.01).abs() < 1e-9);
        let later = t0 + Duration::from_secs(600);
        let got = memory.recall(&key, Duration::from_millis(104), later).unwrap();
        assert_eq!((got.record, got.age), (kept, Duration::from_secs(600)));
        // Another peer, another local address: nothing.
        assert_eq!(memory.recall("SHA256:abc from any", Duration::from_millis(100), later), None);
        // Too old, or the RTT says another route.
        assert_eq!(memory.recall(&key, Duration::from_millis(100), t0 + MAX_AGE * 2), None);
        assert_eq!(memory.recall(&key, Duration::from_millis(300), later), None);
        assert!(memory.recall(&key, Duration::from_millis(40), later).is_some());
        // A path of 300 ms is not one of 40 ms.
        let far = PathMemory::key("SHA256:far", None);
        memory.remember(&far, &report(900, 300, 3.0), t0).unwrap();
        assert!(memory.recall(&far, Duration::from_millis(310), later).is_some());
        assert_eq!(memory.recall(&far, Duration::from_millis(40), later), None);
        // A clock set back: not used.
        assert_eq!(
            memory.recall(&key, Duration::from_millis(100), t0 - Duration::from_secs(9)),
            None
        );
    }

    #[test]
    fn the_rate_kept_is_at_most_twice_the_transfers_average() {
        let dir = tempfile::tempdir().unwrap();
        let memory = PathMemory::at(dir.path().join("paths.json"));
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        // Settled at 900 Mbit/s, averaged 400: 800 kept; averaged 500: 900.
        let ramped = ChannelReport { payload_bytes: 400_000_000 / 8 * 3, ..report(900, 100, 3.0) };
        assert_eq!(memory.remember("k", &ramped, now).unwrap().rate_bps, 800_000_000);
        let ramped = ChannelReport { payload_bytes: 500_000_000 / 8 * 3, ..report(900, 100, 3.0) };
        assert_eq!(memory.remember("k", &ramped, now).unwrap().rate_bps, 900_000_000);
    }

    #[test]
    fn a_controller_that_never_settled_leaves_the_average() {
        let dir = tempfile::tempdir().unwrap();
        let memory = PathMemory::at(dir.path().join("paths.json"));
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let unsettled = ChannelReport { path_rate_bps: None, ..report(900, 100, 3.0) };
        assert_eq!(memory.remember("k", &unsettled, now).unwrap().rate_bps, 900_000_000);
    }

    #[test]
    fn a_transfer_too_short_or_without_an_rtt_or_a_byte_teaches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let memory = PathMemory::at(dir.path().join("paths.json"));
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(memory.remember("k", &report(900, 100, 0.3), now), None);
        let no_rtt = ChannelReport { min_rtt_us: None, ..report(900, 100, 3.0) };
        assert_eq!(memory.remember("k", &no_rtt, now), None);
        let idle = ChannelReport { payload_bytes: 0, ..report(900, 100, 3.0) };
        assert_eq!(memory.remember("k", &idle, now), None);
        assert!(!memory.file().exists(), "nothing was written");
    }

    #[test]
    fn a_damaged_file_is_replaced_and_old_records_go() {
        let dir = tempfile::tempdir().unwrap();
        let memory = PathMemory::at(dir.path().join("paths.json"));
        std::fs::write(memory.file(), b"{ not json").unwrap();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(memory.recall("k", Duration::from_millis(100), t0), None);
        memory.remember("old", &report(500, 100, 3.0), t0).unwrap();
        let t1 = t0 + MAX_AGE + Duration::from_secs(1);
        memory.remember("new", &report(800, 100, 3.0), t1).unwrap();
        let text = std::fs::read_to_string(memory.file()).unwrap();
        assert!(text.contains("\"new\"") && !text.contains("\"old\""), "{text}");
        for i in 0..MAX_PATHS + 5 {
            memory
                .remember(
                    &format!("p{i}"),
                    &report(800, 100, 3.0),
                    t1 + Duration::from_secs(i as u64),
                )
                .unwrap();
        }
        let records: Records =
            serde_json::from_slice(&std::fs::read(memory.file()).unwrap()).unwrap();
        assert_eq!(records.len(), MAX_PATHS);
        assert!(
            !records.contains_key("new") && records.contains_key(&format!("p{}", MAX_PATHS + 4))
        );
    }
}
