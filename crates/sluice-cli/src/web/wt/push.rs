//! The bytes of a machine-driven download (`fetch`, see `conn.rs`) on the page's sessions: each
//! piece of a data phase on a unidirectional stream of its own, the server's, opened as the
//! phase goes, at most [`STREAMS`] blocks' bytes at once per session in at most
//! [`PIECES_PER_LANE`] pieces (a small file is a piece), the pieces spread in turn over the
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
use super::lanes::PathNote;
use super::pages::{Page, Pages};
use super::{BLOCK_BYTES, Counters, STREAMS};

/// The most pieces under way at once per lane. Pieces of small files are small: counted
/// [`STREAMS`] to a lane like blocks, a folder of 64 KiB files had 1 MiB in flight per round
/// trip (84 Mbit/s at 100 ms at best; 47 on average through linkem at 100 ms, 1 %), whatever the
/// controller allowed. 64 a lane lets 16 MiB of them fly per round trip over four lanes.
const PIECES_PER_LANE: usize = 64;
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
    /// Where what the path delivered is kept, at the end of a phase (`None`: not kept).
    pub(super) note: Option<Arc<PathNote>>,
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
                    let landed = done?;
                    sent += landed;
                    progress(Progress { bytes: sent, total, prefix: 0 });
                    return Ok(landed);
                }
            }
        };
        // The page's sessions now (this one when the page gave no name, or they are gone).
        let mut lanes = self.page.as_ref().map_or_else(Vec::new, |p| self.pages.lanes(p));
        lanes.truncate(self.lanes_max.max(1));
        if lanes.is_empty() {
            lanes.push(self.conn.clone());
        }
        let mut under_way = UnderWay::over(lanes.len());
        for (k, piece) in pieces(ranges, ends).into_iter().enumerate() {
            let len = piece.end - piece.start;
            while !under_way.admits(len) {
                under_way.landed(landed(&mut moving)?);
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
            let priority = piece_priority(k);
            let push = async move {
                let stream = conn.open_uni().await.map_err(|e| socket(&e))?;
                let mut stream = Unfinished(Some(stream.await.map_err(|e| socket(&e))?));
                let s = stream.0.as_mut().ok_or(DataError::Cancelled)?;
                s.set_priority(priority);
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
            under_way.add(len);
        }
        for _ in 0..under_way.pieces {
            landed(&mut moving)?;
        }
        let report = ChannelReport {
            bytes: total,
            payload_bytes: total,
            seconds: started.elapsed().as_secs_f64(),
            channels: 1,
            carrying: under_way.pieces_max as u32,
            ..ChannelReport::default()
        };
        // A transfer's data, not a repair round's: too short to teach anything, and its
        // average (its few blocks over its round trips) would cap the record low.
        let data = phase == 0 || phase == sluice::session::RESTART_PHASE;
        if let Some(note) = self.note.as_ref().filter(|_| data) {
            let stats = self.conn.quic_connection().stats();
            note.remember(&report, (stats.path.sent_packets, stats.path.lost_packets));
        }
        Ok(report)
    }
}

/// What of a phase is under way (sent or being sent, not landed) and what may be: the bytes
/// of [`STREAMS`] blocks per lane (each piece is in the server's memory until it landed), in
/// at most [`PIECES_PER_LANE`] pieces per lane.
struct UnderWay {
    pieces: usize,
    bytes: u64,
    pieces_max: usize,
    bytes_max: u64,
}

impl UnderWay {
    /// Nothing under way yet, over `lanes` lanes.
    fn over(lanes: usize) -> UnderWay {
        let lanes = lanes.max(1);
        UnderWay {
            pieces: 0,
            bytes: 0,
            pieces_max: PIECES_PER_LANE * lanes,
            bytes_max: u64::from(STREAMS) * BLOCK_BYTES * lanes as u64,
        }
    }

    /// Whether a piece of `len` bytes may go now (always, when none is under way).
    fn admits(&self, len: u64) -> bool {
        self.pieces == 0 || (self.pieces < self.pieces_max && self.bytes + len <= self.bytes_max)
    }

    fn add(&mut self, len: u64) {
        self.pieces += 1;
        self.bytes += len;
    }

    /// A piece of `len` bytes landed.
    fn landed(&mut self, len: u64) {
        self.pieces = self.pieces.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(len);
    }
}

/// The send priority of a phase's `k`th piece (quinn's: higher goes first, and streams of one
/// priority share the window in turn): each piece before the next. At one priority a lane's 64
/// pieces all came in together at the end of the phase: the first of a folder's 200 files was
/// whole at the page 1.2 s after the phase started, and the page's work on each file (its
/// writing, hashing and closing) waited until then instead of going on beside the rest.
fn piece_priority(k: usize) -> i32 {
    -i32::try_from(k).unwrap_or(i32::MAX)
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
    use super::{BLOCK_BYTES, PIECES_PER_LANE, STREAMS, UnderWay, piece_priority, pieces};

    /// How many pieces of `len` bytes go at once over `lanes` lanes.
    fn at_once(lanes: usize, len: u64) -> usize {
        let mut under_way = UnderWay::over(lanes);
        while under_way.admits(len) {
            under_way.add(len);
        }
        under_way.pieces
    }

    #[test]
    fn each_piece_goes_before_the_next_and_after_the_control_stream() {
        let order: Vec<i32> = [0, 1, 2, 63, 64, usize::MAX].map(piece_priority).to_vec();
        assert!(order.windows(2).all(|w| w[0] > w[1]), "{order:?}");
        assert!(order[0] < super::super::conn::CONTROL_PRIORITY);
    }

    #[test]
    fn small_pieces_are_many_under_way_and_blocks_are_bounded_by_their_bytes() {
        // A folder's 64 KiB files: 64 a lane, not 4 (a lane's blocks' worth is 256 of them).
        assert_eq!(at_once(4, 64 << 10), 4 * PIECES_PER_LANE);
        assert!(PIECES_PER_LANE > STREAMS as usize);
        // Whole blocks: the bytes of STREAMS blocks a lane, as before.
        assert_eq!(at_once(4, BLOCK_BYTES), 4 * STREAMS as usize);
        assert_eq!(at_once(1, BLOCK_BYTES), STREAMS as usize);
        // A piece that lands makes room for one more.
        let mut under_way = UnderWay::over(1);
        (0..STREAMS).for_each(|_| under_way.add(BLOCK_BYTES));
        assert!(!under_way.admits(1));
        under_way.landed(BLOCK_BYTES);
        assert!(under_way.admits(BLOCK_BYTES) && !under_way.admits(BLOCK_BYTES + 1));
        // No lanes named still lets one piece go at a time at least.
        assert!(UnderWay::over(0).admits(BLOCK_BYTES));
    }

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
