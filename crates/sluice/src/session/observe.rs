//! What a copy tells its caller while it runs: the files it will move, then its progress.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::datapath::Progress;

/// A file a copy will move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// Its path as the manifest names it (relative, `/`-separated).
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

/// Follows a copy ([`super::Client::download_observed`], [`super::Client::upload_observed`]).
pub trait CopyObserver: Send + 'static {
    /// The data channels per transfer of the session, once the server's answer to the token is
    /// known (before [`CopyObserver::planned`]).
    fn channels(&mut self, channels: u32) {
        let _ = channels;
    }

    /// The files that will move, in the order their bytes follow one another, once the ends
    /// agreed on them and before any data moves. Not called by a dry run or a copy that moves
    /// no file.
    fn planned(&mut self, files: &[PlannedFile]) {
        let _ = files;
    }

    /// Bytes moved so far (received, or acknowledged for an upload) of the total: at most
    /// every 100 ms while the data moves, from the data's thread, and once at its end.
    fn progress(&mut self, progress: Progress);
}

/// An observer of any type, behind a pointer. The copy's machinery takes this, not a type
/// parameter: it is then compiled once in this crate, instead of once for each observer type
/// (each closure) a caller passes, which made every crate calling [`super::Client::upload`]
/// compile the whole session driver again at opt-level 3.
pub(crate) type AnyObserver = Box<dyn CopyObserver>;

/// A progress callback as an observer.
pub(crate) struct OnProgress<F>(pub(crate) F);

impl<F: FnMut(Progress) + Send + 'static> CopyObserver for OnProgress<F> {
    fn progress(&mut self, progress: Progress) {
        (self.0)(progress);
    }
}

/// An observer that also notes whether any byte of the copy moved: a copy over UDP that failed
/// before one did met a path that does not carry its data channels.
pub(crate) struct Watched {
    inner: AnyObserver,
    moved: Arc<AtomicBool>,
}

impl Watched {
    /// `inner`, watched, and the flag it sets.
    pub(crate) fn watch(inner: AnyObserver) -> (AnyObserver, Arc<AtomicBool>) {
        let moved = Arc::new(AtomicBool::new(false));
        (Box::new(Watched { inner, moved: moved.clone() }), moved)
    }
}

impl CopyObserver for Watched {
    fn channels(&mut self, channels: u32) {
        self.inner.channels(channels);
    }

    fn planned(&mut self, files: &[PlannedFile]) {
        self.inner.planned(files);
    }

    fn progress(&mut self, progress: Progress) {
        if progress.bytes > 0 {
            self.moved.store(true, Ordering::Relaxed);
        }
        self.inner.progress(progress);
    }
}
