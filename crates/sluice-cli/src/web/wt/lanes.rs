//! The lanes of a login as one flow: every WebTransport session of a login (a page opens
//! several, [`super::LANES`], and spreads its transfers' blocks over them) takes a seat in the
//! login's [`CouplingGroup`], so that together they are as fair to other traffic as one
//! connection, as a CLI transfer's channels are (`cc.rs` has how a connection's controller
//! feeds its seat).
//!
//! A group lives while one of its seats is held; a login's next session after that starts a
//! new one. A group has [`SEATS`] seats; a session beyond them (a login with many pages open)
//! keeps a controller of its own.
//!
//! **Path memory** (as a CLI download's, `sluice::session::path_memory`): a new group starts
//! near what its path delivered to the last download a page on it made, kept in the server's
//! file ([`PathNote::remember`] at a download's end), instead of probing up from a few packets.
//! The path is the browser's address from the server's, under a key of its own: a browser
//! takes in less than a CLI on the same host (about 43 MiB/s here against 100), and a start at
//! the CLI's rate would send twice what it reads until the check cut it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use quinn_proto::congestion::Controller;
use sluice::datapath::{ChannelReport, MemoryStart};
use sluice::session::path_memory::PathMemory;
use sluice_proto::cc::coupled::CouplingGroup;
use sluice_proto::config::ChannelConfig;

use super::cc::Join;

/// Seats in a login's group: the most lanes a page opens (`serve --web-transport-lanes`).
pub(crate) const SEATS: usize = 16;

/// The groups of every login that has a session.
pub(crate) struct Lanes {
    config: ChannelConfig,
    /// The server's path memory (`None`: off).
    memory: Option<Arc<PathMemory>>,
    groups: Mutex<HashMap<String, Seats>>,
}

/// A login's group, which of its seats are held, and the path it was made for.
struct Seats {
    group: Arc<CouplingGroup>,
    held: [bool; SEATS],
    path: PathTo,
}

/// A session's seat in its login's group: given up when dropped.
pub(crate) struct Seat {
    lanes: Arc<Lanes>,
    login: String,
    index: usize,
    group: Arc<CouplingGroup>,
    path: PathTo,
    /// The group's start from path memory, when this seat's session made the group (`None`:
    /// it joined one, or the group started afresh).
    start: Option<MemoryStart>,
}

/// The path a session came over: its key in path memory, and its RTT when it was admitted
/// (the handshake's, with no transfer's queue in it).
#[derive(Debug, Clone)]
pub(crate) struct PathTo {
    key: String,
    rtt: Duration,
}

impl PathTo {
    /// The path from the server's `local` address to the browser at `peer`, `rtt` long now.
    pub(crate) fn of(peer: IpAddr, local: Option<IpAddr>, rtt: Duration) -> PathTo {
        let peer = format!("a browser at {}", peer.to_canonical());
        PathTo { key: PathMemory::key(&peer, local), rtt }
    }
}

/// A session's path memory: what a download needs to keep what its path delivered (the memory,
/// the path, and the group whose controller measured it), and how the group started.
pub(crate) struct PathNote {
    memory: Arc<PathMemory>,
    path: PathTo,
    group: Arc<CouplingGroup>,
    /// The group's start from path memory, when this session made the group (`None`: it
    /// joined one, or the group started afresh).
    pub(crate) start: Option<MemoryStart>,
}

impl PathNote {
    /// Keeps what the login's group settled on as the path's rate, after a download whose
    /// sending `report` is (its payload and time), with `sent` and `lost` packets of its
    /// session. Nothing when the controller never settled: a folder of small files ends in its
    /// startup, and an average that is mostly the ramp would start the next download low,
    /// where (no packet pairs here) it would climb by the delivered rate's probes, slower
    /// than startup's doubling. Writes the memory's file: call it on a blocking thread.
    pub(crate) fn remember(&self, report: &ChannelReport, (sent, lost): (u64, u64)) {
        let rate_pps = self.group.path_rate_pps();
        if !rate_pps.is_finite() || rate_pps <= 0.0 {
            tracing::debug!(
                key = self.path.key,
                "path memory: the lanes' controller never settled"
            );
            return;
        }
        let packet_bits = self.group.config().packet_size as f64 * 8.0;
        let report = ChannelReport {
            path_rate_bps: Some((rate_pps * packet_bits) as u64),
            min_rtt_us: Some(self.path.rtt.as_micros() as u64),
            data_pkts: sent,
            lost_pkts: lost,
            ..report.clone()
        };
        let kept = self.memory.remember(&self.path.key, &report, SystemTime::now());
        tracing::debug!(key = self.path.key, ?kept, "path memory kept for the page's lanes");
    }
}

impl Lanes {
    /// Groups of controllers built from `config` (the one a connection's own is built from),
    /// started from what `memory` kept of their paths, if given.
    pub(crate) fn new(config: ChannelConfig, memory: Option<Arc<PathMemory>>) -> Arc<Lanes> {
        Arc::new(Lanes { config, memory, groups: Mutex::new(HashMap::new()) })
    }

    /// Seats the session of `login` over `path` whose connection's controller `controller` is
    /// (a clone of it, from `congestion_state`); `None` when the controller is not Sluice's or
    /// the login's group has no free seat (the session then keeps its own controller). The
    /// login's first session makes its group, from path memory where the path has a record.
    pub(crate) fn seat(
        self: &Arc<Self>,
        login: &str,
        controller: Box<dyn Controller>,
        path: &PathTo,
    ) -> Option<Seat> {
        let join = Join::of(controller)?;
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let mut start = None;
        let seats = groups.entry(login.to_owned()).or_insert_with(|| {
            let (config, from_memory) = self.start(path);
            start = from_memory;
            let group = CouplingGroup::new(&config, SEATS);
            // A seat counts among the lanes that share the rate only while it sends.
            for index in 0..SEATS {
                group.set_active(index, false);
            }
            Seats { group, held: [false; SEATS], path: path.clone() }
        });
        let index = seats.held.iter().position(|held| !held)?;
        seats.held[index] = true;
        let (group, path) = (seats.group.clone(), seats.path.clone());
        drop(groups);
        join.offer(group.clone(), index);
        Some(Seat { lanes: self.clone(), login: login.to_owned(), index, group, path, start })
    }

    /// The configuration of a new group over `path`: from what the path delivered last, when
    /// the memory has a record that is young and of the same RTT, with that start (`None`:
    /// afresh). Reads the memory's file.
    fn start(&self, path: &PathTo) -> (ChannelConfig, Option<MemoryStart>) {
        let mut config = self.config.clone();
        let recalled = self
            .memory
            .as_ref()
            .and_then(|memory| memory.recall(&path.key, path.rtt, SystemTime::now()));
        let Some(recalled) = recalled else { return (config, None) };
        config.start_rate_bps = recalled.record.rate_bps;
        // (Only `adaptive` starts from it.)
        if !sluice_proto::cc::starts_from_memory(&config) {
            return (config, None);
        }
        tracing::info!(
            key = path.key,
            rate_mbit = recalled.record.rate_bps / 1_000_000,
            age_s = recalled.age.as_secs(),
            "a page's lanes start from path memory"
        );
        let start = MemoryStart { rate_bps: recalled.record.rate_bps, age: recalled.age };
        (config, Some(start))
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

    /// The session's path memory (`None`: off).
    pub(crate) fn note(&self) -> Option<PathNote> {
        let memory = self.lanes.memory.clone()?;
        let (path, group) = (self.path.clone(), self.group.clone());
        Some(PathNote { memory, path, group, start: self.start })
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
