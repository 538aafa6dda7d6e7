//! One data phase's transport: UDP channels, or TCP streams when the session runs over TCP,
//! or a [`Carrier`] the caller brings (the web app's WebTransport streams). All move the same
//! ranges with the same contract ([`datapath::send`], [`datapath::tcp::send_streams`] and
//! [`Carrier::send`], and the receiving twins of the first two), so the roles' drivers start a
//! phase the same way whichever it is.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use sluice_session::arrivals::Arrivals;

use crate::datapath::{
    self, Carrier, ChannelParams, ChannelReport, DataError, MemoryStart, Progress, ReceivedExtents,
};
use crate::session::path_memory::{PathMemory, Recalled};
use crate::session::streams::StreamsPlan;
use sluice_session::messages::PathStart;

/// Path memory for one sending phase: the store, the path's key, and what it recalled when
/// the phase's sockets were bound.
pub(crate) struct PathRecall {
    pub(crate) memory: std::sync::Arc<PathMemory>,
    pub(crate) key: String,
    pub(crate) recalled: Option<Recalled>,
}

impl PathRecall {
    /// What the receiver is told of the start (`Ready`).
    pub(crate) fn note(&self) -> Option<PathStart> {
        self.recalled.map(|r| PathStart { rate_bps: r.record.rate_bps, age_s: r.age.as_secs() })
    }
}

/// A phase's data path, ready to run on its thread.
pub(crate) enum DataPlan {
    Channels(Vec<ChannelParams>),
    /// Opened on the thread, only when a byte is to move (the other end then opens its
    /// side too).
    Streams(StreamsPlan),
    /// The caller's transport, for data phase `phase`, and where the files end (set by
    /// [`DataPlan::files_end`] for a sending end; a receiving end is told them with its span).
    Carried {
        carrier: Arc<dyn Carrier>,
        phase: u32,
        ends: Vec<u64>,
    },
}

impl DataPlan {
    /// The plan, told where its files end (a carrier cuts its pieces there).
    pub(crate) fn files_end(mut self, files_end: Vec<u64>) -> Self {
        if let DataPlan::Carried { ends, .. } = &mut self {
            *ends = files_end;
        }
        self
    }

    /// Sends `ranges` of `store`: [`datapath::send`]'s contract. Over UDP, with `recall`, the
    /// channels start from what the path delivered last time, and what they measure is kept
    /// for the next (file I/O: this runs on the data's thread).
    pub(crate) fn send(
        self,
        store: &dyn datapath::Store,
        ranges: &[Range<u64>],
        compress: Option<i32>,
        recall: Option<PathRecall>,
        progress: &mut dyn FnMut(Progress),
        cancel: &AtomicBool,
    ) -> Result<ChannelReport, DataError> {
        match self {
            DataPlan::Channels(mut params) => {
                let recalled = recall.as_ref().and_then(|r| r.recalled);
                if let Some(recalled) = recalled {
                    tracing::info!(
                        rate_mbit = recalled.record.rate_bps / 1_000_000,
                        age_s = recalled.age.as_secs(),
                        "starting from path memory"
                    );
                    for channel in &mut params {
                        channel.config.start_rate_bps = recalled.record.rate_bps;
                    }
                }
                let mut report = datapath::send(params, store, ranges, compress, progress, cancel)?;
                report.memory_start =
                    recalled.map(|r| MemoryStart { rate_bps: r.record.rate_bps, age: r.age });
                if let Some(recall) = &recall
                    && let Some(kept) =
                        recall.memory.remember(&recall.key, &report, std::time::SystemTime::now())
                {
                    tracing::debug!(key = recall.key, ?kept, "path memory kept");
                }
                Ok(report)
            }
            DataPlan::Streams(plan) => {
                let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
                let streams = if total == 0 { Vec::new() } else { plan.open(cancel)? };
                datapath::tcp::send_streams(streams, store, ranges, compress, progress, cancel)
            }
            // Compression is the data channels' framing; a carrier's transport has its own.
            DataPlan::Carried { carrier, phase, ends } => {
                carrier.send(phase, store, ranges, &ends, progress, cancel)
            }
        }
    }

    /// Receives `span` into `store`: [`datapath::receive`]'s contract.
    #[allow(clippy::too_many_arguments)] // each is a separate input of the one transfer
    pub(crate) fn receive(
        self,
        store: &dyn datapath::Store,
        span: Range<u64>,
        present: &[Range<u64>],
        ends: Vec<u64>,
        progress: &mut dyn FnMut(Progress),
        hashed: &(dyn Fn(&[blake3::Hash]) + Sync),
        cancel: &AtomicBool,
    ) -> Result<ReceivedExtents, DataError> {
        match self {
            DataPlan::Channels(params) => {
                datapath::receive(params, store, span, present, ends, progress, hashed, cancel)
            }
            DataPlan::Streams(plan) => {
                let missing = Arrivals::new(span.clone(), present).missing();
                let streams = if missing == 0 { Vec::new() } else { plan.open(cancel)? };
                datapath::tcp::receive_streams(
                    streams, store, span, present, ends, progress, hashed, cancel,
                )
            }
            DataPlan::Carried { carrier, phase, .. } => datapath::receive_carried(
                &*carrier, phase, store, span, present, ends, progress, hashed, cancel,
            ),
        }
    }
}
