//! What a WebTransport transfer's streams share: its place and count among the server's
//! transfers ([`Running`]) and its pace (the token's rate, or the page's lower one), kept
//! between pieces of [`PIECE_BYTES`].

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice::session::Running;
use sluice::web::Pace;

/// Bytes sent or read at once within a block (the pace is kept between pieces).
pub(super) const PIECE_BYTES: usize = 256 << 10;

/// A transfer's count and pace, shared by its blocks' (or pieces') streams.
pub(super) struct Flow {
    running: Mutex<Running>,
    pace: Mutex<Option<Pace>>,
    started: tokio::time::Instant,
}

impl Flow {
    pub(super) fn new(running: Running, pace: Option<Pace>) -> Flow {
        Flow {
            running: Mutex::new(running),
            pace: Mutex::new(pace),
            started: tokio::time::Instant::now(),
        }
    }

    /// Counts `n` bytes moved (in the transfer and in `counter`), then waits as the pace says.
    pub(super) async fn moved(&self, n: u64, counter: &AtomicU64) {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).moved(n);
        counter.fetch_add(n, Ordering::Relaxed);
        let wait = {
            let mut pace = self.pace.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            pace.as_mut().map(|p| p.wait(n, self.started.elapsed()))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
}
