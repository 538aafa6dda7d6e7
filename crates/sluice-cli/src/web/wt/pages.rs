//! The sessions (lanes) of each page, by login and the page's name for itself (its sessions'
//! URL says it: `/wt?ticket=T&page=P`): a download's pieces go over the sessions of the page
//! that asked (`push.rs`), never another tab's of the same login, nor another login's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use wtransport::Connection;

/// A page: its login and its name.
pub(super) type Page = (String, String);

/// Every named page's open sessions, each with a number of its own.
#[derive(Default)]
pub(crate) struct Pages {
    sessions: Mutex<HashMap<Page, Vec<(u64, Connection)>>>,
    next: AtomicU64,
}

impl Pages {
    fn sessions(&self) -> MutexGuard<'_, HashMap<Page, Vec<(u64, Connection)>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sessions of `page` open now.
    pub(super) fn lanes(&self, page: &Page) -> Vec<Connection> {
        let sessions = self.sessions();
        sessions.get(page).map_or_else(Vec::new, |s| s.iter().map(|(_, c)| c.clone()).collect())
    }

    /// Counts `connection` among the sessions of `page` while the answer lives.
    pub(super) fn enter(self: &Arc<Self>, page: Page, connection: &Connection) -> Entered {
        let number = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut sessions = self.sessions();
        sessions.entry(page.clone()).or_default().push((number, connection.clone()));
        Entered { pages: self.clone(), page, number }
    }
}

/// A session counted among its page's ([`Pages::enter`]) until this is dropped.
pub(super) struct Entered {
    pages: Arc<Pages>,
    page: Page,
    number: u64,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut sessions = self.pages.sessions();
        if let Some(lanes) = sessions.get_mut(&self.page) {
            lanes.retain(|(n, _)| *n != self.number);
            if lanes.is_empty() {
                sessions.remove(&self.page);
            }
        }
    }
}
