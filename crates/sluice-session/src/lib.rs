//! Sluice's session plane as pure logic: what each end of a transfer says and decides, with no
//! I/O. It performs no I/O, reads no clock (every call that needs the time takes `now`) and
//! draws no randomness; `tests/no_io.rs` fails if a dependency or a source file brings any in.
//!
//! A transfer has two roles, whoever opened the session: the **sending** end holds the files
//! ([`Sending`]) and the **receiving** end writes them ([`Receiving`]). Each is a state
//! machine: its driver hands it what happened (`handle_*`: a message from the peer, a file job
//! done, a data phase ended, a deadline passed) and does what it asks ([`SendEffect`],
//! [`RecvEffect`]: send a message, plan or hash or commit files, bind sockets, start data
//! channels). The quinn-and-files driver in the `sluice` crate runs both machines, on the
//! server and on the client alike; a relay, a third party, a browser or a TCP transport is
//! another driver of the same two machines. The tests in `tests/` drive them against each
//! other in memory.
//!
//! Modules:
//! - [`messages`]: the role-typed messages and their framing;
//! - [`handshake`] and [`negotiate`]: the session's handshake by end (the server's
//!   [`handshake::ServerHandshake`] of a `Hello`, the client's reading of the `Offer` and `Welcome`)
//!   and the data channels' specification;
//! - [`grant`]: a third-party transfer's grant: a server's sealed permission for another server
//!   to read named paths for one job (`docs/third-party.md`);
//! - [`manifest`]: what a transfer moves, and the checks on a peer's manifest;
//! - [`options`]: the request options that travel on the wire;
//! - [`arrivals`]: what a receive's channels have delivered, each byte once;
//! - [`compress`]: the per-piece zstd framing of the data channels (feature `compress`, on by
//!   default; the browser's build leaves it out);
//! - [`chunks`]: the chunk plan the data channels of a transfer share (first come, first
//!   served; a dying channel's chunks go to the others);
//! - [`layout`]: the wanted files end to end in one offset space, and the resume and repair
//!   arithmetic on it;
//! - [`relay`]: the relay plane's messages, blocks and striping strategies (FSP);
//! - [`time`]: the `now` the machines take ([`time::Instant`]: the standard library's
//!   where it has a clock, a [`time::Moment`] the page reads in the browser);
//! - [`transfer`]: deadlines, faults and the manifest in parts, shared by the roles;
//! - [`sending`] and [`receiving`]: the two machines.

pub mod arrivals;
pub mod chunks;
#[cfg(feature = "compress")]
pub mod compress;
pub mod grant;
pub mod handshake;
pub mod layout;
pub mod manifest;
pub mod messages;
pub mod negotiate;
pub mod options;
pub mod receiving;
pub mod relay;
pub mod sending;
pub mod time;
pub mod transfer;

pub use receiving::{Planned, Received, Receiving, RecvEffect};
pub use sending::{SendEffect, Sending, Sent};
pub use transfer::{Fault, Timeouts};
