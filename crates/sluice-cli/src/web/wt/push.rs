//! The bytes of a machine-driven download (`fetch`, see `conn.rs`) on the page's sessions: each
//! piece of a data phase on a unidirectional stream of its own, the server's, opened as the
//! phase goes, at most [`STREAMS`] at once per session, the pieces spread in turn over the
//! sessions the page has open (its lanes, [`super::LANES`]: a browser takes in more over
//! several connections than over one; a page names itself in its sessions' URL, and one that
//! did not gets the pieces on the request's session alone). A stream is a head and the piece's
//! bytes:
//!
//! ```text
//! tag (u64 BE) | phase (u32 BE) | offset (u64 BE) | len (u32 BE) | len bytes
//! ```
//!
//! `tag` is the page's name for the download (its `fetch` head's), so it can tell its
//! downloads' streams apart; `offset` is in the wanted files laid end to end, as the machines
//! count. A piece lies within one file and within one of its blocks (4 MiB from the file's
//! start: [`pieces`]), so the page writes it to one file and hashes it as that block's part of
//! the file's BLAKE3 tree. A stream that ends before `len` bytes was cut off: its bytes are not
//! the piece. A piece may come before the page's machine starts its phase (the streams race the
//! control stream's message that starts it): the page holds it until then, as a socket's
//! buffer holds a channel's early packets. The connections' controllers (`cc.rs`, coupled over
//! the login's lanes, `lanes.rs`) pace the bytes, and the token's and the page's rate ([`Flow`])
//! bound them. The data's thread hears of each piece that landed on a plain channel, not by
//! waiting on the runtime: it outlives the runtime's timers at the server's end (a wait on them
//! there panics).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use sluice::datapath::{Carrier, ChannelReport, DataError, Progress, Store, read_exact_at};
use tokio::task::JoinSet;
use wtransport::Connection;

use super::flow::{Flow, PIECE_BYTES};
use super::pages::{Page, Pages};
use super::{BLOCK_BYTES, Counters, STREAMS};

/// How often a wait for a piece looks whether the phase was cancelled.
const CANCEL_EVERY: Duration = Duration::from_millis(50);

/// Bytes of a stream's head.
pub(crate) const HEAD_BYTES: usize = 24;

/// A download's way to the page: its session (and the page's others: the login and the page's
/// name), its tag, its count and pace.
pub(super) struct Pushed {
    pub(super) conn: Connection,
    pub(super) pages: Arc<Pages>,
    pub(super) page: Option<Page>,
    /// The most of the page's sessions a download's pieces go over: the lanes a page opens
    /// (`serve --web-transport-lanes`). A page that opens more gets no more in flight: each
    /// piece is in the server's memory while it moves.
    pub(super) lanes_max: usize,
    pub(super) tag: u64,
    pub(super) flow: Arc<Flow>,
    pub(super) counters: Arc<Counters>,
    pub(super) runtime: tokio::runtime::Handle,
}

impl Carrier for Pushed {
    fn send(
        &self,
        phase: u32,
        store: &dyn Store,
        ranges: &[Range<u64>],
        ends: &[u64],
        progress: &mut dyn FnMut(Progress),
        cancel: &AtomicBool,
    ) -> Result<ChannelReport, DataError> {
        let started = Instant::now();
        let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        // The pieces under way, aborted (their streams reset) if this ends first.
        let mut moving = JoinSet::new();
        let (tell_landed, landings) = mpsc::channel();
        let mut sent = 0u64;
        progress(Progress { bytes: 0, total, prefix: 0 });
        // Waits for a piece to land (the page has it all), minding `cancel`.
        let mut landed = |moving: &mut JoinSet<()>| loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(DataError::Cancelled);
            }
            match landings.recv_timeout(CANCEL_EVERY) {
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Err(DataError::Cancelled),
                Ok(done) => {
                    while moving.try_join_next().is_some() {}
                    sent += done?;
                    progress(Progress { bytes: sent, total, prefix: 0 });
                    return Ok(());
                }
            }
        };
        // The page's sessions now (this one when the page gave no name, or they are gone).
        let mut lanes = self.page.as_ref().map_or_else(Vec::new, |p| self.pages.lanes(p));
        lanes.truncate(self.lanes_max.max(1));
        if lanes.is_empty() {
            lanes.push(self.conn.clone());
        }
        let at_once = STREAMS as usize * lanes.len();
        let mut under_way = 0;
        for (k, piece) in pieces(ranges, ends).into_iter().enumerate() {
            if under_way >= at_once {
                landed(&mut moving)?;
                under_way -= 1;
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(DataError::Cancelled);
            }
            // Read here (this is the data's blocking thread), sent on the runtime.
            let mut bytes = vec![0u8; (piece.end - piece.start) as usize];
            read_exact_at(store, &mut bytes, piece.start).map_err(DataError::File)?;
            let conn = lanes[k % lanes.len()].clone();
            let (flow, counters) = (self.flow.clone(), self.counters.clone());
            let head = head(self.tag, phase, piece.start, bytes.len() as u32);
            let landing = Landing(Some(tell_landed.clone()));
            let push = async move {
                let stream = conn.open_uni().await.map_err(|e| socket(&e))?;
                let mut stream = Unfinished(Some(stream.await.map_err(|e| socket(&e))?));
                let s = stream.0.as_mut().ok_or(DataError::Cancelled)?;
                s.write_all(&head).await.map_err(|e| socket(&e))?;
                for part in bytes.chunks(PIECE_BYTES) {
                    s.write_all(part).await.map_err(|e| socket(&e))?;
                    flow.moved(part.len() as u64, &counters.sent).await;
                }
                // Done once the page has every byte (acknowledged).
                s.finish().await.map_err(|e| socket(&e))?;
                stream.0 = None;
                Ok(bytes.len() as u64)
            };
            moving.spawn_on(async move { landing.tell(push.await) }, &self.runtime);
            under_way += 1;
        }
        for _ in 0..under_way {
            landed(&mut moving)?;
        }
        Ok(ChannelReport {
            bytes: total,
            payload_bytes: total,
            seconds: started.elapsed().as_secs_f64(),
            channels: 1,
            carrying: at_once as u32,
            ..ChannelReport::default()
        })
    }
}

/// `ranges` cut into pieces that each lie within one file (of those ending at `ends`, laid end
/// to end) and one of its blocks ([`BLOCK_BYTES`] from the file's start).
pub(crate) fn pieces(ranges: &[Range<u64>], ends: &[u64]) -> Vec<Range<u64>> {
    let mut pieces = Vec::new();
    for r in ranges {
        let mut at = r.start;
        while at < r.end {
            let file = ends.partition_point(|&end| end <= at);
            let start = file.checked_sub(1).map_or(0, |before| ends[before]);
            let block_end = start + ((at - start) / BLOCK_BYTES + 1) * BLOCK_BYTES;
            let file_end = ends.get(file).copied().unwrap_or(u64::MAX);
            let end = block_end.min(file_end).min(r.end);
            pieces.push(at..end);
            at = end;
        }
    }
    pieces
}

/// Tells the data's thread how a piece's push ended; dropped untold (the runtime went, and its
/// tasks with it), it tells that.
struct Landing(Option<mpsc::Sender<Result<u64, DataError>>>);

impl Landing {
    fn tell(mut self, how: Result<u64, DataError>) {
        if let Some(to) = self.0.take() {
            let _ = to.send(how);
        }
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if let Some(to) = self.0.take() {
            let _ = to.send(Err(socket(&"the server is going away")));
        }
    }
}

/// A piece's stream until it finished: dropped before (its phase cancelled), it is reset, so
/// the page reads no end that looks like a piece's (a dropped stream would finish).
struct Unfinished(Option<wtransport::SendStream>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(stream) = self.0.as_mut() {
            let _ = stream.reset(wtransport::VarInt::from_u32(0));
        }
    }
}

/// A stream's head (see the module's doc).
pub(crate) fn head(tag: u64, phase: u32, offset: u64, len: u32) -> [u8; HEAD_BYTES] {
    let mut head = [0u8; HEAD_BYTES];
    head[..8].copy_from_slice(&tag.to_be_bytes());
    head[8..12].copy_from_slice(&phase.to_be_bytes());
    head[12..20].copy_from_slice(&offset.to_be_bytes());
    head[20..].copy_from_slice(&len.to_be_bytes());
    head
}

fn socket(e: &dyn std::fmt::Display) -> DataError {
    DataError::Socket(std::io::Error::other(format!("the page's session: {e}")))
}

#[cfg(test)]
mod tests {
    use super::{BLOCK_BYTES, pieces};

    #[test]
    fn pieces_keep_to_one_file_and_one_of_its_blocks() {
        const B: u64 = BLOCK_BYTES;
        // Files of B + 10, 0 and 2B + 1 bytes.
        let ends = [B + 10, B + 10, 3 * B + 11];
        let all = pieces(std::slice::from_ref(&(0..3 * B + 11)), &ends);
        let want = [0..B, B..B + 10, B + 10..2 * B + 10, 2 * B + 10..3 * B + 10];
        assert_eq!(all[..4], want);
        assert_eq!(all[4], 3 * B + 10..3 * B + 11);
        assert_eq!(all.len(), 5);
        // A repair's range from the middle of a block, over a file's end.
        assert_eq!(
            pieces(std::slice::from_ref(&(B / 2..B + 20)), &ends),
            [B / 2..B, B..B + 10, B + 10..B + 20]
        );
        assert!(pieces(std::slice::from_ref(&(5..5)), &ends).is_empty());
    }
}
