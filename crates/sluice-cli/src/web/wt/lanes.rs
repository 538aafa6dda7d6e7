//! The lanes of a login as one flow: every WebTransport session of a login (a page opens
//! several, [`super::LANES`], and spreads its transfers' blocks over them) takes a seat in the
//! login's [`CouplingGroup`], so that together they are as fair to other traffic as one
//! connection, as a CLI transfer's channels are (`cc.rs` has how a connection's controller
//! feeds its seat).
//!
//! A group lives while one of its seats is held; a login's next session after that starts a
//! new one. A group has [`SEATS`] seats; a session beyond them (a login with many pages open)
//! keeps a controller of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use quinn_proto::congestion::Controller;
use sluice_proto::cc::coupled::CouplingGroup;
use sluice_proto::config::ChannelConfig;

use super::cc::Join;

/// Seats in a login's group: the most lanes a page opens (`serve --web-transport-lanes`).
pub(crate) const SEATS: usize = 16;

/// The groups of every login that has a session.
pub(crate) struct Lanes {
    config: ChannelConfig,
    groups: Mutex<HashMap<String, Seats>>,
}

/// A login's group and which of its seats are held.
struct Seats {
    group: Arc<CouplingGroup>,
    held: [bool; SEATS],
}

/// A session's seat in its login's group: given up when dropped.
pub(crate) struct Seat {
    lanes: Arc<Lanes>,
    login: String,
    index: usize,
    group: Arc<CouplingGroup>,
}

impl Lanes {
    /// Groups of controllers built from `config` (the one a connection's own is built from).
    pub(crate) fn new(config: ChannelConfig) -> Arc<Lanes> {
        Arc::new(Lanes { config, groups: Mutex::new(HashMap::new()) })
    }

    /// Seats the session of `login` whose connection's controller `controller` is (a clone of
    /// it, from `congestion_state`); `None` when the controller is not Sluice's or the login's
    /// group has no free seat (the session then keeps its own controller).
    pub(crate) fn seat(
        self: &Arc<Self>,
        login: &str,
        controller: Box<dyn Controller>,
    ) -> Option<Seat> {
        let join = Join::of(controller)?;
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let seats = groups.entry(login.to_owned()).or_insert_with(|| {
            let group = CouplingGroup::new(&self.config, SEATS);
            // A seat counts among the lanes that share the rate only while it sends.
            for index in 0..SEATS {
                group.set_active(index, false);
            }
            Seats { group, held: [false; SEATS] }
        });
        let index = seats.held.iter().position(|held| !held)?;
        seats.held[index] = true;
        let group = seats.group.clone();
        drop(groups);
        join.offer(group.clone(), index);
        Some(Seat { lanes: self.clone(), login: login.to_owned(), index, group })
    }

    /// Seats held in `login`'s group (0 when it has none).
    #[cfg(test)]
    pub(crate) fn held(&self, login: &str) -> usize {
        let groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups.get(login).map_or(0, |seats| seats.held.iter().filter(|held| **held).count())
    }
}

impl Seat {
    /// The group the session is seated in.
    #[cfg(test)]
    pub(crate) fn group(&self) -> &Arc<CouplingGroup> {
        &self.group
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        // Its share goes to the lanes still sending.
        self.group.set_active(self.index, false);
        let mut groups = self.lanes.groups.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(seats) = groups.get_mut(&self.login) {
            seats.held[self.index] = false;
            if !seats.held.iter().any(|held| *held) {
                groups.remove(&self.login);
            }
        }
    }
}
