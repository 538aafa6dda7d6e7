//! The session plane's integration tests, in one binary (one build and one link instead of one
//! per file): each module was a test file of its own, and its tests are named after it
//! (`cargo test -p sluice --test session session_tcp::`). `session_early.rs` stays a binary of
//! its own: it counts the sockets of its process.

#[path = "../common/mod.rs"]
mod common;

mod session_access;
mod session_claim;
mod session_compress;
mod session_disk;
mod session_failure;
mod session_flood;
mod session_handle;
mod session_identity;
mod session_keys;
mod session_known_hosts;
mod session_many_clients;
mod session_messages;
mod session_once;
mod session_paths;
mod session_relay;
mod session_relay_faults;
mod session_relay_get;
mod session_relay_tcp;
mod session_relay_tree;
mod session_repair;
mod session_resume;
mod session_tcp;
mod session_third_party;
mod session_tokens;
mod session_transfer;
mod session_tree;
mod session_verdict;
