//! A deterministic, seeded, event-driven simulated network with a virtual clock.
//!
//! Flows are pairs of [`Endpoint`]s: `a`, the data source, and `b`, the sink. Every flow's
//! `a -> b` datagrams cross one shared forward link and its `b -> a` datagrams one shared reverse
//! link; each flow may add its own one-way delay per direction. A link direction ([`LinkConfig`])
//! has a rate limit behind a drop-tail queue, propagation delay, order-preserving jitter, random
//! loss (Bernoulli or Gilbert-Elliott), reordering, duplication, corruption, blackout windows and
//! receive stalls, and timing noise (off by default; see [`LinkConfig`]): a receive side that
//! hands packets over in bunches (at periodic wakes, or in GRO-like batches), which on the
//! reverse link is ACK compression, jitter that may reorder, and senders whose timer wake-ups
//! fire late.
//!
//! Nothing here reads a clock or draws ambient randomness: time is virtual microseconds and every
//! random choice comes from the seed in [`SimConfig`], so a run is reproducible bit for bit.
//! [`Sim`]'s doc tells how to drive a run; in short:
//!
//! ```
//! use sluice_netsim::{Endpoint, FlowConfig, LinkConfig, Sim, SimConfig, StopReason};
//!
//! /// Sends `left` datagrams of 100 bytes at once; done when sent and `expect` have arrived.
//! struct Blast { left: u32, expect: u32, received: u32 }
//!
//! impl Endpoint for Blast {
//!     fn handle_datagram(&mut self, _now_us: u64, _datagram: &mut [u8]) { self.received += 1 }
//!     fn handle_timeout(&mut self, _now_us: u64) {}
//!     fn poll_transmit(&mut self, _now_us: u64, buf: &mut [u8]) -> Option<usize> {
//!         self.left = self.left.checked_sub(1)?;
//!         buf[..100].fill(0xab);
//!         Some(100)
//!     }
//!     fn poll_timeout(&self) -> Option<u64> { None }
//!     fn is_done(&self) -> bool { self.left == 0 && self.received >= self.expect }
//! }
//!
//! // 10 Mbit/s with a 1 MB queue and 20 ms one way; acknowledgements cross an ideal link.
//! let forward = LinkConfig::default().with_rate(10_000_000, 1_000_000).with_delay(20_000);
//! let mut sim = Sim::new(SimConfig { seed: 7, forward, reverse: LinkConfig::default() });
//! let (a, b) = (Blast { left: 10, expect: 0, received: 0 }, Blast { left: 0, expect: 10, received: 0 });
//! sim.add_flow(a, b, FlowConfig::default());
//! let mut queue = Vec::new();
//! let summary = sim.run_until(1_000_000, 500, |now_us, view| {
//!     queue.push((now_us, view.forward_queue_bytes()));
//! });
//! assert_eq!(summary.stop, StopReason::AllDone);
//! // Ten datagrams of 128 wire bytes: the last one is serialized after 1024 us.
//! assert_eq!(summary.end_us, 20_000 + 1_024);
//! // The queue counts the packet being serialized: at 500 us the fifth of ten is on the wire.
//! assert_eq!(queue[..3], [(0, 1_280), (500, 768), (1_000, 128)]);
//! assert_eq!(sim.flow(0).b.received, 10);
//! assert_eq!(sim.forward_stats().delivered.packets, 10);
//! ```
//!
//! Layout: [`config`] (what a network looks like), [`loss`] (loss models), [`stats`] (what is
//! counted), `event` (the event queue), `link` (one link direction), `pool` (packet buffers),
//! [`sim`] (the driver), [`planned`] (a multi-channel transfer driven by the real data path's
//! chunk plan).

pub mod channel;
pub mod config;
mod event;
mod link;
pub mod loss;
pub mod planned;
mod pool;
pub mod scenario;
pub mod sim;
pub mod stats;

pub use config::{FlowConfig, LinkConfig, SimConfig, WIRE_OVERHEAD_BYTES};
pub use loss::{GilbertElliott, LossModel};
pub use sim::{Flow, RunSummary, Sim, SimView, StopReason};
pub use stats::{Counter, DelayHistogram, DirectionStats, FlowStats, LinkStats};

/// Anything the simulator can attach to a network node: a `sluice-proto` sender or receiver
/// behind a small adapter, or a test endpoint. All times are virtual microseconds.
pub trait Endpoint {
    /// A datagram arrived at `now_us`. The buffer may be modified (decrypted in place).
    fn handle_datagram(&mut self, now_us: u64, datagram: &mut [u8]);
    /// Timers due at or before `now_us` fire.
    fn handle_timeout(&mut self, now_us: u64);
    /// The next datagram to send at `now_us`, written into `buf`; its length, or `None` when
    /// nothing is ready now (ask `poll_timeout` when to try again).
    fn poll_transmit(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize>;
    /// The earliest time at which `handle_timeout` or `poll_transmit` has something to do.
    fn poll_timeout(&self) -> Option<u64>;
    /// Whether this endpoint has finished its work (the simulation may stop when all have).
    fn is_done(&self) -> bool;
}
