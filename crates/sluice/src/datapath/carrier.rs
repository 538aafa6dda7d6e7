//! A data phase on a transport its caller owns: the web app's WebTransport sessions, whose
//! streams carry a download's bytes to a page (`sluice::web::send_files`) and an upload's from
//! it (`sluice::web::receive_files`). The transfer machine, its messages and its verification
//! are the CLI's; only the bytes take this way.

use std::ops::Range;
use std::sync::atomic::AtomicBool;

use super::blocks::WriteBehind;
use super::recv::RecvShared;
use super::transfer::ChannelEnd;
use super::{ChannelReport, DataError, Progress, ReceivedExtents, Store};

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
    ) -> Result<ChannelReport, DataError> {
        let _ = (phase, store, ranges, ends, progress, cancel);
        Err(DataError::File(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this end sends no data over its carrier",
        )))
    }

    /// Takes data phase `phase`'s pieces from the transport into `pieces` until it wants no
    /// more ([`Pieces::wanted`]: every byte in, or the phase stopping), with
    /// [`super::receive`]'s contract for what arrived: a piece outside the phase's range is
    /// the peer's bug, counted and dropped. It runs on a thread of its own.
    fn receive(&self, phase: u32, pieces: &mut Pieces<'_, '_>) -> Result<(), DataError> {
        let _ = (phase, pieces);
        Err(DataError::File(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this end receives no data over its carrier",
        )))
    }
}

/// Where a carrier puts a receiving phase's pieces: written to the store at their offsets,
/// recorded as arrived, and hashed as the written part grows (by [`receive_carried`]'s
/// hashing thread).
pub struct Pieces<'r, 'f> {
    writer: WriteBehind<'f>,
    ctx: &'r RecvShared<'f>,
    /// Pieces and bytes taken (those outside the phase's range too: the report counts them).
    taken: (u64, u64),
}

impl Pieces<'_, '_> {
    /// Writes `bytes` at `offset` (in the files laid end to end) and records them arrived.
    pub fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<(), DataError> {
        let len = bytes.len() as u64;
        if self.ctx.inside(offset, len) {
            self.writer
                .write(offset, bytes)
                .map_err(|e| self.ctx.shared.fatal(DataError::File(e)))?;
            self.ctx.record(&[(offset, len)]);
        }
        self.taken = (self.taken.0 + 1, self.taken.1 + len);
        Ok(())
    }

    /// Whether the phase wants more: not once every byte arrived, or it is stopping (cancelled,
    /// or failed elsewhere: its hashing).
    pub fn wanted(&self) -> bool {
        !self.ctx.complete() && self.ctx.shared.check().is_ok()
    }
}

/// Receives data phase `phase` (`span` of `store`, less `present`) from `carrier`, with
/// [`super::receive`]'s contract: the extents to each of `ends` hashed as they are written
/// (`hashed` hears them as soon as every byte is in), `progress` told as they come, an early
/// return when `cancel` is set.
#[allow(clippy::too_many_arguments)] // receive's inputs, and the carrier
pub fn receive_carried(
    carrier: &dyn Carrier,
    phase: u32,
    store: &dyn Store,
    span: Range<u64>,
    present: &[Range<u64>],
    ends: Vec<u64>,
    progress: &mut dyn FnMut(Progress),
    hashed: &(dyn Fn(&[blake3::Hash]) + Sync),
    cancel: &AtomicBool,
) -> Result<ReceivedExtents, DataError> {
    let ctx = RecvShared::new(store, span, present);
    let run = |_, (), start: std::time::Instant| {
        let mut pieces = Pieces { writer: WriteBehind::new(&ctx.file), ctx: &ctx, taken: (0, 0) };
        let mut result = carrier.receive(phase, &mut pieces);
        // What arrived is on disk even when the phase failed (a resume can use it).
        if let Err(e) = pieces.writer.flush() {
            result = Err(ctx.shared.fatal(DataError::File(e)));
        }
        let report = ChannelReport {
            bytes: pieces.taken.1,
            payload_bytes: pieces.taken.1,
            seconds: start.elapsed().as_secs_f64(),
            data_pkts: pieces.taken.0,
            channels: 1,
            ..ChannelReport::default()
        };
        ChannelEnd { report, result }
    };
    super::receive_over(vec![()], &ctx, ends, progress, hashed, cancel, &run)
}
