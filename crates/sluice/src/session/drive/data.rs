//! One data phase's transport: UDP channels, or TCP streams when the session runs over TCP.
//! Both move the same ranges with the same contract ([`datapath::send`] and
//! [`datapath::tcp::send_streams`], and their receiving twins), so the roles' drivers start a
//! phase the same way either way.

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use sluice_session::arrivals::Arrivals;

use crate::datapath::{self, ChannelParams, ChannelReport, DataError, Progress, ReceivedExtents};
use crate::session::streams::StreamsPlan;

/// A phase's data path, ready to run on its thread.
pub(crate) enum DataPlan {
    Channels(Vec<ChannelParams>),
    /// Opened on the thread, only when a byte is to move (the other end then opens its
    /// side too).
    Streams(StreamsPlan),
}

impl DataPlan {
    /// Sends `ranges` of `store`: [`datapath::send`]'s contract.
    pub(crate) fn send(
        self,
        store: &dyn datapath::Store,
        ranges: &[Range<u64>],
        compress: Option<i32>,
        progress: &mut dyn FnMut(Progress),
        cancel: &AtomicBool,
    ) -> Result<ChannelReport, DataError> {
        match self {
            DataPlan::Channels(params) => {
                datapath::send(params, store, ranges, compress, progress, cancel)
            }
            DataPlan::Streams(plan) => {
                let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
                let streams = if total == 0 { Vec::new() } else { plan.open(cancel)? };
                datapath::tcp::send_streams(streams, store, ranges, compress, progress, cancel)
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
        }
    }
}
