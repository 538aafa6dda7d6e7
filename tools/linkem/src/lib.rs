//! `linkem`: a userspace WAN link emulator.
//!
//! It creates one TUN device in each of two network namespaces (`PREFIX-a`, `PREFIX-b`) and
//! forwards IP packets between them through a model of a long, lossy path: a bottleneck rate
//! with a drop-tail queue, one-way delay, jitter, random or bursty loss, reordering,
//! duplication and receive batching (release at periodic wakes, GRO-like batches), every random
//! choice drawn from a seed.
//!
//! - [`netns`]: create and remove the namespace pair, run code inside a namespace.
//! - [`model`]: the pure decision logic (loss, queue, delay), unit-tested without I/O.
//! - [`emulator`]: the TUN devices and forwarding threads.
//! - [`parse`]: the command-line units.

mod delays;
pub mod emulator;
pub mod model;
pub mod netns;
pub mod parse;

pub use emulator::{DirectionReport, Emulator, EmulatorError, End, LinkConfig, Report};
pub use model::{DirectionConfig, LossConfig, QueueLimit};
pub use netns::{A_ADDR, B_ADDR, NetnsPair};
