//! The end-to-end cases of `cases/e2e.rs` with `--transport tcp` (`SLUICE_TRANSPORT=tcp`): the
//! session tunnelled over the server's TCP port and the data on parallel TCP streams, as on a
//! path that blocks UDP.

#![allow(clippy::print_stdout)] // tests print their seeds

mod common;

/// The transport of every client command of the cases.
const TRANSPORT: &str = "tcp";

include!("cases/e2e.rs");
