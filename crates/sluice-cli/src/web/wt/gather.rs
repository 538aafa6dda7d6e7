//! The bytes of a machine-driven upload (`store`, see `conn.rs`) from the page's sessions: each
//! piece of a data phase is a request of its own (`piece`: tag, phase, offset, length, then the
//! bytes), answered once the piece is taken, so the page has at most its streams' pieces
//! under way and counts what the server took (a browser's WebTransport stream takes whatever
//! is written at once: a page that did not wait would read the whole file into memory). A
//! piece names its upload by the page's tag and goes to it from any session of the same page
//! (its lanes); a page's pieces never reach another page's or another login's uploads. Each
//! piece is read whole into memory (at most [`PIECE_MAX`], and at most `blocks` per session at once,
//! so a page cannot make the server hold more), counted and paced by its upload's [`Flow`],
//! and handed to the data's thread, which writes it through the receiving end's store and
//! records it as arrived (`sluice::datapath::Pieces`). A piece of a phase not yet started (the
//! streams race the control stream's message that starts it) is held until it starts; one of an
//! earlier phase is dropped. The data's thread waits on a plain channel, not on the runtime: it
//! outlives the runtime's timers at the server's end (a wait on them there panics), and ends
//! as its phase stops.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sluice::datapath::{Carrier, DataError, Pieces};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wtransport::RecvStream;

use axum::http::StatusCode;

use super::super::request::ApiError;
use super::Counters;
use super::flow::{Flow, PIECE_BYTES};
use super::pages::Page;

/// The largest piece a page may send: one block of the file (the page cuts its pieces so).
pub(crate) const PIECE_MAX: u32 = super::BLOCK_BYTES as u32;
/// Pieces read and waiting for the data's thread, per upload.
const QUEUED: usize = 4;
/// Bytes of pieces of later phases held at most, per upload.
const HELD_MAX: u64 = 64 << 20;
/// How often a wait for a piece looks whether the phase is still wanted.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// A piece's request: its upload's tag, its phase, where it lies (in the files laid end to end)
/// and its length.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
pub(super) struct PieceHead {
    pub(super) tag: u64,
    pub(super) phase: u32,
    pub(super) offset: u64,
    pub(super) len: u32,
}

/// A piece as it came: its phase, its offset in the files laid end to end, its bytes.
struct Piece {
    phase: u32,
    offset: u64,
    bytes: Vec<u8>,
}

/// A piece read and waiting for the data's thread, with its place among the [`QUEUED`].
type Queued = (Piece, OwnedSemaphorePermit);

/// Where an upload's pieces go (at most [`QUEUED`] waiting: `places`), and what counts and
/// paces them.
struct Route {
    pieces: mpsc::Sender<Queued>,
    places: Arc<Semaphore>,
    flow: Arc<Flow>,
}

/// The uploads taking pieces now, by page and tag.
#[derive(Default)]
pub(crate) struct Routes {
    routes: Mutex<HashMap<(Page, u64), Route>>,
}

impl Routes {
    fn routes(&self) -> MutexGuard<'_, HashMap<(Page, u64), Route>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Routes `page`'s pieces of `tag` to a new carrier, counted and paced by `flow`, until the
    /// carrier is dropped. `None` when that tag of that page takes pieces already.
    pub(super) fn open(
        self: &Arc<Self>,
        page: Page,
        tag: u64,
        flow: Arc<Flow>,
    ) -> Option<Gathered> {
        let (tx, rx) = mpsc::channel();
        let mut routes = self.routes();
        let key = (page, tag);
        if routes.contains_key(&key) {
            return None;
        }
        let places = Arc::new(Semaphore::new(QUEUED));
        routes.insert(key.clone(), Route { pieces: tx, places, flow });
        Some(Gathered {
            taken: Mutex::new((rx, Vec::new())),
            _open: Open { routes: self.clone(), key },
        })
    }

    /// Reads `page`'s piece (`head`) whole from `stream` and hands it to its upload. Refused,
    /// unread: a piece of no upload of that page, or out of bounds.
    pub(super) async fn take(
        &self,
        page: &Page,
        head: PieceHead,
        stream: &mut RecvStream,
        places: &tokio::sync::Semaphore,
        counters: &Counters,
    ) -> Result<(), ApiError> {
        let PieceHead { tag, phase, offset, len } = head;
        if len == 0 || len > PIECE_MAX {
            return Err(ApiError::bad(format!("a piece of {len} bytes: 1 to {PIECE_MAX}")));
        }
        let route = {
            let routes = self.routes();
            let route = routes.get(&(page.clone(), tag));
            route.map(|r| (r.pieces.clone(), r.places.clone(), r.flow.clone()))
        };
        let Some((pieces, queue_places, flow)) = route else {
            let why = format!("no upload {tag} of this page takes pieces");
            return Err(ApiError::new(StatusCode::NOT_FOUND, "not-found", why));
        };
        let _place = places.acquire().await.map_err(|e| ApiError::bad(e.to_string()))?;
        let ended = || ApiError::new(StatusCode::CONFLICT, "cancelled", "the upload has ended");
        let mut bytes = vec![0u8; len as usize];
        let mut at = 0;
        while at < bytes.len() {
            let end = (at + PIECE_BYTES).min(bytes.len());
            let read = stream.read(&mut bytes[at..end]).await;
            // The upload ended (cancelled, or done without this piece): what is still on its way
            // is not kept, paced or counted, and the rest is not read.
            if queue_places.is_closed() {
                return Err(ended());
            }
            match read {
                Ok(Some(n)) => {
                    at += n;
                    flow.moved(n as u64, &counters.received).await;
                }
                // Cut off (its phase cancelled, or the page went): not a piece.
                Ok(None) => return Err(ApiError::bad(format!("the piece ended after {at} bytes"))),
                Err(e) => return Err(ApiError::bad(format!("the piece's stream failed: {e}"))),
            }
        }
        // Closed when the upload ends (its route is dropped).
        let queued = queue_places.acquire_owned().await.map_err(|_| ended())?;
        pieces.send((Piece { phase, offset, bytes }, queued)).map_err(|_| ended())
    }
}

/// An upload's route, open until dropped.
struct Open {
    routes: Arc<Routes>,
    key: (Page, u64),
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(route) = self.routes.routes().remove(&self.key) {
            // Pieces read and waiting for a place are not taken.
            route.places.close();
        }
    }
}

/// An upload's way from the page: the pieces its streams brought, and those of later phases
/// held.
pub(super) struct Gathered {
    taken: Mutex<(mpsc::Receiver<Queued>, Vec<Piece>)>,
    _open: Open,
}

impl Carrier for Gathered {
    fn receive(&self, phase: u32, pieces: &mut Pieces<'_, '_>) -> Result<(), DataError> {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let (queue, held) = &mut *taken;
        held.retain(|p| p.phase >= phase);
        let (now, later): (Vec<Piece>, Vec<Piece>) = held.drain(..).partition(|p| p.phase == phase);
        *held = later;
        for piece in now {
            pieces.put(piece.offset, &piece.bytes)?;
        }
        while pieces.wanted() {
            // Its place is free as it leaves the queue.
            let next = queue.recv_timeout(LOOK_EVERY).map(|(piece, _place)| piece);
            match next {
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    let why = "the page's sessions ended before every piece came";
                    return Err(DataError::Socket(std::io::Error::other(why)));
                }
                Ok(piece) if piece.phase == phase => pieces.put(piece.offset, &piece.bytes)?,
                Ok(piece) if piece.phase > phase => {
                    let bytes: u64 = held.iter().map(|p| p.bytes.len() as u64).sum();
                    if bytes + piece.bytes.len() as u64 > HELD_MAX {
                        let why = format!(
                            "the page sent over {HELD_MAX} bytes of phase {} during phase {phase}",
                            piece.phase
                        );
                        return Err(DataError::Socket(std::io::Error::other(why)));
                    }
                    held.push(piece);
                }
                // An earlier phase's, late: what it carried came again, or is not wanted.
                Ok(_) => {}
            }
        }
        // Stopped (the page went, or the machine ended the phase): what was read is written
        // still, for a resume to keep.
        while let Ok((piece, _place)) = queue.try_recv() {
            if piece.phase == phase {
                pieces.put(piece.offset, &piece.bytes)?;
            }
        }
        Ok(())
    }
}
