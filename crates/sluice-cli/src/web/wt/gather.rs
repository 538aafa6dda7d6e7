//! The bytes of a machine-driven upload (`store`, see `conn.rs`) from the page's sessions: each
//! piece of a data phase on a unidirectional stream of the page's, in the head and framing of
//! the server's own pieces (`push.rs`: tag, phase, offset, length, then the bytes). A stream
//! names its upload by the page's tag and goes to it from any session of the same page (its
//! lanes); a page's streams never reach another page's or another login's uploads. Each piece
//! is read whole into memory (at most [`PIECE_MAX`], and at most `blocks` per session at once,
//! so a page cannot make the server hold more), counted and paced by its upload's [`Flow`],
//! and handed to the data's thread, which writes it through the receiving end's store and
//! records it as arrived (`sluice::datapath::Pieces`). A piece of a phase not yet started (the
//! streams race the control stream's message that starts it) is held until it starts; one of an
//! earlier phase is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sluice::datapath::{Carrier, DataError, Pieces};
use tokio::sync::mpsc;
use wtransport::RecvStream;

use super::Counters;
use super::flow::{Flow, PIECE_BYTES};
use super::pages::Page;
use super::push::HEAD_BYTES;

/// The largest piece a page may send: one block of the file (the page cuts its pieces so).
pub(crate) const PIECE_MAX: u32 = super::BLOCK_BYTES as u32;
/// Pieces read and waiting for the data's thread, per upload.
const QUEUED: usize = 4;
/// Bytes of pieces of later phases held at most, per upload.
const HELD_MAX: u64 = 64 << 20;
/// How often a wait for a piece looks whether the phase is still wanted.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// A piece as it came: its phase, its offset in the files laid end to end, its bytes.
struct Piece {
    phase: u32,
    offset: u64,
    bytes: Vec<u8>,
}

/// Where an upload's pieces go, and what counts and paces them.
struct Route {
    pieces: mpsc::Sender<Piece>,
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
        runtime: tokio::runtime::Handle,
    ) -> Option<Gathered> {
        let (tx, rx) = mpsc::channel(QUEUED);
        let mut routes = self.routes();
        let key = (page, tag);
        if routes.contains_key(&key) {
            return None;
        }
        routes.insert(key.clone(), Route { pieces: tx, flow });
        Some(Gathered {
            taken: Mutex::new((rx, Vec::new())),
            runtime,
            _open: Open { routes: self.clone(), key },
        })
    }

    /// Reads one of `page`'s piece streams whole and hands it to its upload; a stream of no
    /// upload, or with a head out of bounds, is stopped unread.
    pub(super) async fn take(
        &self,
        page: &Page,
        mut stream: RecvStream,
        places: &tokio::sync::Semaphore,
        counters: &Counters,
    ) {
        let mut head = [0u8; HEAD_BYTES];
        if stream.read_exact(&mut head).await.is_err() {
            return;
        }
        let word = |a: usize, b: usize| head[a..b].iter().fold(0u64, |n, &x| n << 8 | u64::from(x));
        let (tag, phase, offset, len) =
            (word(0, 8), word(8, 12) as u32, word(12, 20), word(20, 24));
        let route = {
            let routes = self.routes();
            routes.get(&(page.clone(), tag)).map(|r| (r.pieces.clone(), r.flow.clone()))
        };
        let Some((pieces, flow)) = route.filter(|_| len > 0 && len <= u64::from(PIECE_MAX)) else {
            stream.stop(wtransport::VarInt::from_u32(0));
            return;
        };
        let Ok(_place) = places.acquire().await else { return };
        let mut bytes = vec![0u8; len as usize];
        let mut at = 0;
        while at < bytes.len() {
            let end = (at + PIECE_BYTES).min(bytes.len());
            match stream.read(&mut bytes[at..end]).await {
                Ok(Some(n)) => {
                    at += n;
                    flow.moved(n as u64, &counters.received).await;
                }
                // Cut off (its phase cancelled, or the page went): not a piece.
                Ok(None) | Err(_) => return,
            }
        }
        // Its end, read (a stream dropped before would be stopped, which the page may see
        // before its finish is acknowledged); bytes beyond the head's length: not a piece.
        let mut more = [0u8; 1];
        if !matches!(stream.read(&mut more).await, Ok(None)) {
            return;
        }
        let _ = pieces.send(Piece { phase, offset, bytes }).await;
    }
}

/// An upload's route, open until dropped.
struct Open {
    routes: Arc<Routes>,
    key: (Page, u64),
}

impl Drop for Open {
    fn drop(&mut self) {
        self.routes.routes().remove(&self.key);
    }
}

/// An upload's way from the page: the pieces its streams brought, and those of later phases
/// held.
pub(super) struct Gathered {
    taken: Mutex<(mpsc::Receiver<Piece>, Vec<Piece>)>,
    runtime: tokio::runtime::Handle,
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
            let next = self
                .runtime
                .block_on(async { tokio::time::timeout(LOOK_EVERY, queue.recv()).await });
            match next {
                Err(_) => {}
                Ok(None) => {
                    let why = "the page's sessions ended before every piece came";
                    return Err(DataError::Socket(std::io::Error::other(why)));
                }
                Ok(Some(piece)) if piece.phase == phase => {
                    pieces.put(piece.offset, &piece.bytes)?
                }
                Ok(Some(piece)) if piece.phase > phase => {
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
                Ok(Some(_)) => {}
            }
        }
        // Stopped (the page went, or the machine ended the phase): what was read is written
        // still, for a resume to keep.
        while let Ok(piece) = queue.try_recv() {
            if piece.phase == phase {
                pieces.put(piece.offset, &piece.bytes)?;
            }
        }
        Ok(())
    }
}
