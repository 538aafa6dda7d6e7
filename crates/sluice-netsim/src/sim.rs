//! The driver: owns the endpoints, the two link directions and the event queue.

use serde::Serialize;
use sluice_proto::rng::Rng;

use crate::Endpoint;
use crate::config::{FlowConfig, SimConfig};
use crate::event::{EventKind, EventQueue};
use crate::link::{Fate, Link};
use crate::pool::PacketPool;
use crate::stats::{FlowStats, LinkStats};

/// The size of the buffer handed to `poll_transmit`: the largest UDP payload, rounded up.
pub const TRANSMIT_BUF_BYTES: usize = 65_536;

/// The most datagrams taken from one endpoint in one instant; beyond it the endpoint is treated
/// as busy (see [`Sim`]) so that one that never returns `None` cannot hang the run.
pub const MAX_DATAGRAMS_PER_POLL: usize = 65_536;

/// One flow: a data source `a` and a sink `b`, with its config and counters.
#[derive(Debug)]
pub struct Flow<E> {
    /// The data source side: its datagrams cross the forward link.
    pub a: E,
    /// The sink side: its datagrams cross the reverse link.
    pub b: E,
    config: FlowConfig,
    stats: FlowStats,
}

impl<E> Flow<E> {
    /// The config the flow was added with (its start time clamped to the time it was added).
    pub fn config(&self) -> &FlowConfig {
        &self.config
    }

    /// The flow's counters.
    pub fn stats(&self) -> &FlowStats {
        &self.stats
    }
}

/// Why [`Sim::run_until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StopReason {
    /// Every endpoint reported `is_done()`.
    AllDone,
    /// The deadline was reached.
    Deadline,
    /// Nothing is scheduled any more (no packet in flight, no endpoint wants a wake-up) but not
    /// every endpoint is done: the endpoints are stuck.
    Idle,
}

/// What one call of [`Sim::run_until`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    /// Why the run stopped.
    pub stop: StopReason,
    /// The virtual time at which it stopped.
    pub end_us: u64,
    /// Events handled (deliveries and live wake-ups).
    pub events: u64,
    /// Superseded wake-ups skipped.
    pub stale_wakeups: u64,
    /// Busy wake-ups in this run, all endpoints together (see [`Sim`]).
    pub busy_wakeups: u64,
    /// The most packets that were ever in flight at once (packet buffers allocated).
    pub packet_buffers: usize,
}

/// The read-only view handed to a sampler: the simulator itself, borrowed immutably, with
/// [`Sim::now_us`] set to the sample time.
pub type SimView<E> = Sim<E>;

/// The driver's bookkeeping for one endpoint (node `2i` is flow `i`'s `a`, `2i + 1` its `b`).
#[derive(Debug, Default)]
struct Node {
    /// Bumped whenever the scheduled wake-up changes; older `Wake` events are stale.
    generation: u64,
    /// The time of the one live `Wake` event, if any.
    wake_at_us: Option<u64>,
    /// The last time `handle_timeout` was called.
    last_timeout_us: Option<u64>,
    /// Woken at least once (its flow has started).
    started: bool,
    done: bool,
    /// The GRO-like batch held in front of this node: packet slots in arrival order.
    gro_held: Vec<u32>,
    /// Bumped whenever a batch opens or is handed over; older `GroFlush` events are stale.
    gro_generation: u64,
    /// With late wake-ups: the wake-up time the endpoint last asked for and the lateness drawn
    /// for it (drawn once per asked time, however often the node is driven meanwhile).
    late_wake: Option<(u64, u64)>,
}

/// A deterministic, event-driven network of flows over one shared link in each direction.
///
/// How to drive it:
/// 1. [`Sim::new`] with a [`SimConfig`]; [`Sim::add_flow`] for every pair of endpoints.
/// 2. [`Sim::run_until`] a deadline, with an optional sampler called at a fixed virtual period.
///    It returns when every endpoint `is_done()`, at the deadline, or when nothing is left to
///    happen. It may be called again to continue; between calls, [`Sim::flow_mut`] may change the
///    endpoints (they are polled again when the run resumes).
/// 3. Read the endpoints ([`Sim::flow`]) and the counters ([`Sim::forward_stats`],
///    [`Flow::stats`]).
///
/// How endpoints are driven: every endpoint has at most one live wake-up, at its
/// `poll_timeout()`. When the wake-up fires the simulator calls `handle_timeout(now)`; when a
/// datagram arrives it calls `handle_datagram(now, ..)`. Either way it then takes datagrams from
/// `poll_transmit(now, ..)` until `None` and reschedules the wake-up from `poll_timeout()`. A
/// time in the past is served at `now`; but if the endpoint has just been woken at `now` and still
/// asks for `now` or earlier, it is woken again 1 us later and the wake-up counts as busy (a
/// misbehaving endpoint slows virtual time down instead of hanging the run). The same happens to
/// an endpoint cut off after [`MAX_DATAGRAMS_PER_POLL`] datagrams in one instant.
///
/// Every endpoint starts at its flow's `start_us` with a `handle_timeout` call. All randomness
/// comes from the config's seed, and simultaneous events run in the order they were scheduled, so
/// a run is a pure function of the seed, the config and the endpoints.
#[derive(Debug)]
pub struct Sim<E> {
    now_us: u64,
    config: SimConfig,
    flows: Vec<Flow<E>>,
    nodes: Vec<Node>,
    done_nodes: usize,
    /// Per flow: changed through `flow_mut` since the last run.
    dirty: Vec<bool>,
    forward: Link,
    reverse: Link,
    events: EventQueue,
    pool: PacketPool,
    transmit_buf: Box<[u8]>,
    last_sample_us: Option<u64>,
    // Totals since creation; `RunSummary` reports the difference over one run.
    events_total: u64,
    stale_total: u64,
    busy_total: u64,
}

impl<E: Endpoint> Sim<E> {
    /// An empty network at time 0.
    ///
    /// # Panics
    /// If a link config is invalid (see [`LinkConfig::check`](crate::LinkConfig::check)).
    pub fn new(config: SimConfig) -> Self {
        for (name, link) in [("forward", &config.forward), ("reverse", &config.reverse)] {
            if let Err(problem) = link.check() {
                panic!("invalid {name} link config: {problem}");
            }
        }
        let mut seeds = Rng::new(config.seed);
        // The timing noise draws from a generator of its own, so that turning it on or off leaves
        // every other random decision as it was.
        let mut timing_seeds = Rng::new(config.seed.rotate_left(32) ^ 0x7131_4E01_5E5E_D7A1);
        let forward = Link::new(config.forward.clone(), &mut seeds, &mut timing_seeds);
        let reverse = Link::new(config.reverse.clone(), &mut seeds, &mut timing_seeds);
        Self {
            now_us: 0,
            config,
            flows: Vec::new(),
            nodes: Vec::new(),
            done_nodes: 0,
            dirty: Vec::new(),
            forward,
            reverse,
            events: EventQueue::default(),
            pool: PacketPool::default(),
            transmit_buf: vec![0; TRANSMIT_BUF_BYTES].into_boxed_slice(),
            last_sample_us: None,
            events_total: 0,
            stale_total: 0,
            busy_total: 0,
        }
    }

    /// Adds a flow; both endpoints are first woken at `config.start_us` (or now, if that is
    /// earlier). Returns the flow's index.
    pub fn add_flow(&mut self, a: E, b: E, mut config: FlowConfig) -> usize {
        config.start_us = config.start_us.max(self.now_us);
        let index = self.flows.len();
        for endpoint in [&a, &b] {
            let done = endpoint.is_done();
            self.done_nodes += usize::from(done);
            let node = u32::try_from(self.nodes.len()).expect("too many flows");
            self.nodes.push(Node { wake_at_us: Some(config.start_us), done, ..Node::default() });
            self.events.push(config.start_us, EventKind::Wake { node, generation: 0 });
        }
        self.flows.push(Flow { a, b, config, stats: FlowStats::default() });
        self.dirty.push(false);
        index
    }

    /// The current virtual time.
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// The config the network was built with.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// All flows, in the order they were added.
    pub fn flows(&self) -> &[Flow<E>] {
        &self.flows
    }

    /// Flow `index`.
    pub fn flow(&self, index: usize) -> &Flow<E> {
        &self.flows[index]
    }

    /// Flow `index`, to change its endpoints between runs; both are polled again when the next
    /// run starts.
    pub fn flow_mut(&mut self, index: usize) -> &mut Flow<E> {
        self.dirty[index] = true;
        &mut self.flows[index]
    }

    /// Counters of the forward (`a -> b`) link.
    pub fn forward_stats(&self) -> &LinkStats {
        self.forward.stats()
    }

    /// Counters of the reverse (`b -> a`) link.
    pub fn reverse_stats(&self) -> &LinkStats {
        self.reverse.stats()
    }

    /// Wire bytes in the forward link's queue now (including the packet being serialized).
    pub fn forward_queue_bytes(&self) -> u64 {
        self.forward.queue_bytes(self.now_us)
    }

    /// Wire bytes in the reverse link's queue now.
    pub fn reverse_queue_bytes(&self) -> u64 {
        self.reverse.queue_bytes(self.now_us)
    }

    /// Events (packets in flight and wake-ups, stale ones included) waiting to happen.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// Whether every endpoint reports `is_done()` (as of the last time it was driven).
    pub fn all_done(&self) -> bool {
        self.done_nodes == self.nodes.len()
    }

    /// Runs until every endpoint is done, until `deadline_us`, or until nothing is left to happen,
    /// whichever comes first.
    ///
    /// If `sample_every_us > 0`, `on_sample(t, view)` is called at every multiple `t` of it from
    /// now on (never twice for the same `t` across runs) up to the stop time; the view shows
    /// everything that happened at or before `t`.
    pub fn run_until(
        &mut self,
        deadline_us: u64,
        sample_every_us: u64,
        mut on_sample: impl FnMut(u64, &SimView<E>),
    ) -> RunSummary {
        let (events_before, stale_before, busy_before) =
            (self.events_total, self.stale_total, self.busy_total);
        self.poll_dirty_flows();
        let mut sampler = Sampler::new(sample_every_us, self.now_us, self.last_sample_us);
        let stop = loop {
            if self.all_done() {
                break StopReason::AllDone;
            }
            let Some(next_us) = self.events.peek_time() else { break StopReason::Idle };
            if next_us > deadline_us {
                break StopReason::Deadline;
            }
            if next_us > 0 {
                sampler.emit_through(self, next_us - 1, &mut on_sample);
            }
            let event = self.events.pop().expect("peeked");
            self.now_us = event.at_us();
            match event.kind {
                EventKind::Wake { node, generation } => self.wake(node as usize, generation),
                EventKind::Deliver { node, slot } => self.deliver(node as usize, slot),
                EventKind::Arrive { node, slot } => self.arrive(node as usize, slot),
                EventKind::GroFlush { node, generation } => {
                    if self.nodes[node as usize].gro_generation == generation {
                        self.hand_over_batch(node as usize);
                    }
                }
            }
        };
        if stop == StopReason::Deadline {
            sampler.emit_through(self, deadline_us, &mut on_sample);
            self.now_us = self.now_us.max(deadline_us);
        } else {
            sampler.emit_through(self, self.now_us, &mut on_sample);
        }
        RunSummary {
            stop,
            end_us: self.now_us,
            events: self.events_total - events_before,
            stale_wakeups: self.stale_total - stale_before,
            busy_wakeups: self.busy_total - busy_before,
            packet_buffers: self.pool.capacity(),
        }
    }

    fn poll_dirty_flows(&mut self) {
        for flow in 0..self.flows.len() {
            if std::mem::take(&mut self.dirty[flow]) {
                for node in [2 * flow, 2 * flow + 1] {
                    if self.nodes[node].started {
                        self.drive(node);
                    }
                }
            }
        }
    }

    fn wake(&mut self, node: usize, generation: u64) {
        let state = &mut self.nodes[node];
        if state.generation != generation {
            self.stale_total += 1;
            return;
        }
        self.events_total += 1;
        state.wake_at_us = None;
        state.last_timeout_us = Some(self.now_us);
        state.started = true;
        let flow = &mut self.flows[node / 2];
        let endpoint = if node.is_multiple_of(2) { &mut flow.a } else { &mut flow.b };
        endpoint.handle_timeout(self.now_us);
        self.drive(node);
    }

    fn deliver(&mut self, node: usize, slot: u32) {
        self.events_total += 1;
        let flow = &mut self.flows[node / 2];
        let (endpoint, link, direction) = if !node.is_multiple_of(2) {
            (&mut flow.b, &mut self.forward, &mut flow.stats.forward)
        } else {
            (&mut flow.a, &mut self.reverse, &mut flow.stats.reverse)
        };
        let datagram = self.pool.get_mut(slot);
        let len = datagram.len() as u64;
        link.stats_mut().delivered.add(len + crate::WIRE_OVERHEAD_BYTES);
        direction.delivered.add(len);
        endpoint.handle_datagram(self.now_us, datagram);
        self.pool.release(slot);
        self.drive(node);
    }

    /// A packet reached the GRO-like batch in front of `node`: hold it, and hand the batch over
    /// once it is full (or, by its `GroFlush` event, when its window has passed).
    fn arrive(&mut self, node: usize, slot: u32) {
        let link = if node.is_multiple_of(2) { &self.reverse } else { &self.forward };
        let (max_pkts, window_us) = link.gro_batch().expect("Arrive events only with a GRO batch");
        let state = &mut self.nodes[node];
        if state.gro_held.is_empty() {
            state.gro_generation += 1;
            let generation = state.gro_generation;
            let at_us = self.now_us + window_us;
            self.events.push(at_us, EventKind::GroFlush { node: node as u32, generation });
        }
        state.gro_held.push(slot);
        if state.gro_held.len() >= max_pkts {
            self.hand_over_batch(node);
        }
    }

    /// Hands the packets held in front of `node` to it, all now (plus the flow's extra delay).
    fn hand_over_batch(&mut self, node: usize) {
        let config = &self.flows[node / 2].config;
        let extra_delay_us = if node.is_multiple_of(2) {
            config.extra_delay_rev_us
        } else {
            config.extra_delay_fwd_us
        };
        let state = &mut self.nodes[node];
        state.gro_generation += 1;
        for slot in state.gro_held.drain(..) {
            let at_us = self.now_us + extra_delay_us;
            self.events.push(at_us, EventKind::Deliver { node: node as u32, slot });
        }
    }

    /// Takes the node's datagrams into the network, then reschedules its wake-up.
    fn drive(&mut self, node: usize) {
        let now_us = self.now_us;
        let flow = &mut self.flows[node / 2];
        let (endpoint, link, direction, extra_delay_us) = if node.is_multiple_of(2) {
            (
                &mut flow.a,
                &mut self.forward,
                &mut flow.stats.forward,
                flow.config.extra_delay_fwd_us,
            )
        } else {
            (
                &mut flow.b,
                &mut self.reverse,
                &mut flow.stats.reverse,
                flow.config.extra_delay_rev_us,
            )
        };
        let peer = (node ^ 1) as u32;
        let batched = link.gro_batch().is_some();
        let mut taken = 0;
        while taken < MAX_DATAGRAMS_PER_POLL {
            let Some(len) = endpoint.poll_transmit(now_us, &mut self.transmit_buf) else { break };
            assert!(len <= self.transmit_buf.len(), "poll_transmit returned length {len}");
            taken += 1;
            direction.sent.add(len as u64);
            let Fate::Arrives { at_us, flip_bit, duplicate } = link.offer(now_us, len) else {
                continue;
            };
            let slot = self.pool.insert(&self.transmit_buf[..len]);
            if let Some(bit) = flip_bit {
                self.pool.get_mut(slot)[(bit / 8) as usize] ^= 1 << (bit % 8);
            }
            let copy = duplicate.then(|| self.pool.duplicate(slot));
            for slot in std::iter::once(slot).chain(copy) {
                if batched {
                    // The flow's extra delay comes after the batch (see `hand_over_batch`).
                    self.events.push(at_us, EventKind::Arrive { node: peer, slot });
                } else {
                    self.events
                        .push(at_us + extra_delay_us, EventKind::Deliver { node: peer, slot });
                }
            }
        }

        let state = &mut self.nodes[node];
        let wanted_us = endpoint.poll_timeout();
        // Busy: cut off while still sending, or still due right after being served at `now`.
        let busy = taken == MAX_DATAGRAMS_PER_POLL
            || wanted_us.is_some_and(|at_us| at_us <= now_us)
                && state.last_timeout_us == Some(now_us);
        let wake_at_us = if busy {
            self.busy_total += 1;
            if node.is_multiple_of(2) {
                flow.stats.busy_wakeups_a += 1;
            } else {
                flow.stats.busy_wakeups_b += 1;
            }
            Some(now_us + 1)
        } else {
            match wanted_us {
                // A time already past is served now (after the events already due now).
                Some(at_us) if at_us <= now_us => Some(now_us),
                // A sleep that overshoots: late by an amount drawn once per asked time.
                Some(at_us) if link.sender_wakes_late() => {
                    let late_us = match state.late_wake {
                        Some((asked_us, late_us)) if asked_us == at_us => late_us,
                        _ => {
                            let late_us = link.sender_wake_late_us();
                            state.late_wake = Some((at_us, late_us));
                            late_us
                        }
                    };
                    Some(at_us + late_us)
                }
                other => other,
            }
        };
        if wake_at_us != state.wake_at_us {
            state.generation += 1;
            state.wake_at_us = wake_at_us;
            if let Some(at_us) = wake_at_us {
                let generation = state.generation;
                self.events.push(at_us, EventKind::Wake { node: node as u32, generation });
            }
        }
        let done = endpoint.is_done();
        if done != state.done {
            state.done = done;
            if done {
                self.done_nodes += 1;
            } else {
                self.done_nodes -= 1;
            }
        }
    }
}

/// Which sample times are still due.
struct Sampler {
    every_us: u64,
    next_us: u64,
}

impl Sampler {
    fn new(every_us: u64, now_us: u64, last_sample_us: Option<u64>) -> Self {
        let from_us = last_sample_us.map_or(now_us, |last| now_us.max(last.saturating_add(1)));
        let next_us = if every_us == 0 {
            u64::MAX
        } else {
            from_us.div_ceil(every_us).saturating_mul(every_us)
        };
        Self { every_us, next_us }
    }

    /// Calls the sampler for every due sample time up to `through_us` inclusive.
    fn emit_through<E>(
        &mut self,
        sim: &mut Sim<E>,
        through_us: u64,
        on_sample: &mut impl FnMut(u64, &SimView<E>),
    ) {
        while self.next_us <= through_us {
            sim.now_us = self.next_us;
            sim.last_sample_us = Some(self.next_us);
            on_sample(self.next_us, sim);
            self.next_us = self.next_us.saturating_add(self.every_us);
        }
    }
}
