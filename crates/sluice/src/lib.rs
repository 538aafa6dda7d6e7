//! Sluice: reliable, encrypted bulk transfer over UDP.
//!
//! This crate joins the pure protocol logic of `sluice-proto` with real UDP sockets, a clock,
//! files and threads (the data plane, [`datapath`]), and a QUIC connection that authenticates the
//! peers and carries the transfer's control messages (the session plane, [`session`]).

pub mod datapath;
pub mod files;
#[doc(hidden)]
pub mod fuzzing;
pub mod session;
pub mod settings;
pub mod tree;
pub mod units;
pub mod web;
