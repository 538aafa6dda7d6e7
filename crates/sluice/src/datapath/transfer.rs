//! Running the channels of one transfer: a thread each, one supervisor (the caller's thread)
//! that reports progress and passes on `cancel`, and the verdict over all channels.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{ChannelReport, DataError, Progress};

/// How often the supervisor looks at the channels, the progress and `cancel`.
const SUPERVISE_EVERY: Duration = Duration::from_millis(10);
/// Progress is reported at most this often (and once at the end), but at every look within
/// the last such interval of the data ([`ending`]).
const REPORT_EVERY: Duration = Duration::from_millis(100);

/// Whether less is left of the data than moves in [`REPORT_EVERY`] at the rate so far: its
/// progress is then reported every [`SUPERVISE_EVERY`], for a caller that acts shortly before
/// the end (a relay hop hands its link on to the next hop about a round trip of data before
/// it, which a report every 100 ms missed on paths shorter than that).
fn ending(progress: &Progress, elapsed: Duration) -> bool {
    let left = progress.total.saturating_sub(progress.bytes);
    let per_report =
        progress.bytes as f64 / elapsed.as_secs_f64().max(1e-3) * REPORT_EVERY.as_secs_f64();
    left > 0 && (left as f64) <= per_report
}

/// What the channels of a transfer share to stop together.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// Every channel returns [`DataError::Cancelled`] once this is set: by the caller's
    /// `cancel`, or by an error that ends the whole transfer.
    pub(super) stop: AtomicBool,
    /// The first error that ends the whole transfer (a file error), whichever channel hit it.
    fatal: Mutex<Option<DataError>>,
}

impl Shared {
    /// `Err(Cancelled)` once the transfer is stopping.
    pub(super) fn check(&self) -> Result<(), DataError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(DataError::Cancelled);
        }
        Ok(())
    }

    /// Records an error that ends the whole transfer, stops the other channels, and returns
    /// [`DataError::Cancelled`] for this channel (the verdict reports the recorded error).
    pub(super) fn fatal(&self, err: DataError) -> DataError {
        let mut fatal = self.fatal.lock().unwrap_or_else(|e| e.into_inner());
        fatal.get_or_insert(err);
        self.stop.store(true, Ordering::Relaxed);
        DataError::Cancelled
    }

    /// Whether an error ended the whole transfer (rather than the caller's `cancel`).
    pub(super) fn failed(&self) -> bool {
        self.fatal.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    fn take_fatal(&self) -> Option<DataError> {
        self.fatal.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// How one channel ended.
#[derive(Debug)]
pub(super) struct ChannelEnd {
    pub(super) report: ChannelReport,
    pub(super) result: Result<(), DataError>,
}

/// Runs `run(index, params, start)` for every channel (a UDP channel's or a TCP stream's
/// parameters) on a thread of its own and waits for all of them, reporting `now()` as progress
/// meanwhile, calling `watch` every few milliseconds (the sender's choice of how many TCP
/// streams carry data) and setting `shared.stop` when `cancel` is set. `start` is the
/// transfer's clock origin, common to all channels.
pub(super) fn supervise<P: Send>(
    channels: Vec<P>,
    shared: &Shared,
    cancel: &AtomicBool,
    now: &(dyn Fn() -> Progress + Sync),
    progress: &mut dyn FnMut(Progress),
    watch: &mut dyn FnMut(Instant),
    run: &(dyn Fn(usize, P, Instant) -> ChannelEnd + Sync),
) -> Vec<ChannelEnd> {
    // Each channel's thread logs within the caller's span.
    let span = tracing::Span::current();
    let start = Instant::now();
    let ends = std::thread::scope(|s| {
        let handles: Vec<_> = channels
            .into_iter()
            .enumerate()
            .map(|(index, params)| {
                std::thread::Builder::new().name(format!("sluice-ch{index}")).spawn_scoped(s, {
                    let span = span.clone();
                    move || span.in_scope(|| run(index, params, start))
                })
            })
            .collect();
        let mut next_report = start + REPORT_EVERY;
        while !handles.iter().all(|h| h.as_ref().map_or(true, |h| h.is_finished())) {
            if cancel.load(Ordering::Relaxed) {
                shared.stop.store(true, Ordering::Relaxed);
            }
            let at = Instant::now();
            watch(at);
            let here = now();
            if at >= next_report || ending(&here, at - start) {
                progress(here);
                next_report = at + REPORT_EVERY;
            }
            std::thread::sleep(SUPERVISE_EVERY);
        }
        handles
            .into_iter()
            .map(|h| {
                let failed = |what: &str| ChannelEnd {
                    report: ChannelReport::default(),
                    result: Err(DataError::Socket(std::io::Error::other(what.to_owned()))),
                };
                match h {
                    Ok(h) => h.join().unwrap_or_else(|_| failed("a channel thread panicked")),
                    Err(e) => failed(&format!("could not start a channel thread: {e}")),
                }
            })
            .collect()
    });
    progress(now());
    ends
}

/// The transfer's verdict: success when `complete` (whatever some channels met), else the
/// error that ended it. The report sums the channels'.
pub(super) fn verdict(
    ends: Vec<ChannelEnd>,
    complete: bool,
    shared: &Shared,
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    if let Some(fatal) = shared.take_fatal() {
        return Err(fatal);
    }
    let mut sum = ChannelReport::default();
    let mut first_error = None;
    for end in ends {
        sum.bytes += end.report.bytes;
        sum.payload_bytes += end.report.payload_bytes;
        sum.seconds = sum.seconds.max(end.report.seconds);
        sum.data_pkts += end.report.data_pkts;
        sum.retransmitted_pkts += end.report.retransmitted_pkts;
        sum.rejected_pkts += end.report.rejected_pkts;
        sum.buffer_notice = sum.buffer_notice.or(end.report.buffer_notice);
        sum.min_rtt_us = sum.min_rtt_us.into_iter().chain(end.report.min_rtt_us).min();
        sum.lost_pkts += end.report.lost_pkts;
        sum.channels += 1;
        sum.carrying += u32::from(end.report.data_pkts > 0);
        if let Err(e) = end.result {
            sum.lost_channels += 1;
            if !complete {
                tracing::debug!(error = %e, "data channel failed");
            } else {
                tracing::warn!(error = %e, "a data channel failed; the others completed its share");
            }
            // The most telling error: a cancelled channel only followed another's failure.
            if first_error.as_ref().is_none_or(|f| matches!(f, DataError::Cancelled)) {
                first_error = Some(e);
            }
        }
    }
    if complete {
        return Ok(sum);
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(DataError::Cancelled);
    }
    Err(first_error.unwrap_or(DataError::Cancelled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_reported_at_every_look_only_within_the_last_report_interval_of_data() {
        let at = |bytes| Progress { bytes, total: 1000, prefix: 0 };
        // 900 bytes in a second: 90 a report interval.
        assert!(!ending(&at(900), Duration::from_secs(1)), "100 left");
        assert!(ending(&at(950), Duration::from_secs(1)), "50 left");
        assert!(!ending(&at(1000), Duration::from_secs(1)), "nothing left: the end's own report");
        assert!(!ending(&at(0), Duration::ZERO), "nothing moved yet");
    }
}
