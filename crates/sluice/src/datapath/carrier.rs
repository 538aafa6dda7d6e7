//! A data phase on a transport its caller owns: the web app's WebTransport sessions, whose
//! streams carry a download's bytes to a page (`sluice::web::send_files`). The transfer
//! machine, its messages and its verification are the CLI's; only the bytes take this way.

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use super::{ChannelReport, DataError, Progress, Store};

/// Moves one data phase's bytes, with [`super::send`]'s contract: every byte of `ranges`
/// (offsets in the wanted files laid end to end; `ends` says where each file ends) read from
/// `store` and handed to the transport, `progress` told as they go and once at the end, an early return when `cancel`
/// is set ([`DataError::Cancelled`]). It runs on a blocking thread of the caller's runtime.
pub trait Carrier: Send + Sync {
    /// Sends `ranges` of `store` as data phase `phase` (0, then one per repair round).
    fn send(
        &self,
        phase: u32,
        store: &dyn Store,
        ranges: &[Range<u64>],
        ends: &[u64],
        progress: &mut dyn FnMut(Progress),
        cancel: &AtomicBool,
    ) -> Result<ChannelReport, DataError>;
}
