//! One Sluice data channel's reliable transport, derived from UDT (Gu, Hong, Grossman, SC'04).
//!
//! This crate is pure logic: it performs no I/O, reads no clock and draws no ambient randomness.
//! Time comes in as `now_us` (microseconds on a monotonic clock the caller chooses), randomness
//! from a seed in the configuration. The state machines in [`sender`] and [`receiver`] are driven
//! with `handle_*` calls for inputs and `poll_*` calls for outputs, as their docs describe.
//!
//! Layout:
//! - [`config`]: the channel configuration both ends share;
//! - [`seq`]: 31-bit data sequence numbers on the wire, 64-bit inside;
//! - [`intervals`]: the loss lists, as interval sets;
//! - [`wire`] and [`crypto`]: the packet format and its AEAD protection;
//! - [`estimate`]: RTT, arrival speed and link capacity estimators;
//! - [`delay`]: forward queuing delay from one-way delay samples;
//! - [`cc`]: the congestion controllers (`udt`, `fixed`, `adaptive` and its scavenger form `low`)
//!   behind one trait, and the coupling of a transfer's channels into one flow ([`cc::coupled`]);
//! - [`pmtu`]: path MTU probing on the channel's own packets;
//! - [`fec`]: the erasure code over a lossy tail's last round trip;
//! - [`timer`]: the timer table;
//! - [`rng`]: the seeded pseudo-random generator;
//! - [`sender`] and [`receiver`]: the two ends of a channel (their [`receiver::State`] is
//!   shared).

pub mod cc;
pub mod config;
pub mod crypto;
pub mod delay;
pub mod estimate;
pub mod fec;
pub mod intervals;
pub mod pmtu;
#[cfg(feature = "channel")]
pub mod receiver;
pub mod reorder;
pub mod rng;
#[cfg(feature = "channel")]
pub mod sender;
pub mod seq;
pub mod timer;
pub mod wire;

/// The rate-control and acknowledgement interval of UDT: 10 ms.
pub const SYN_US: u64 = 10_000;
