//! The file plane's and the tree's integration tests, in one binary (one build and one link
//! instead of one per file): each module was a test file of its own, and its tests are named
//! after it (`cargo test -p sluice --test files tree_claim::`).

#[path = "../common/mod.rs"]
mod common;

mod files_beneath;
mod files_hash;
mod files_paths;
mod tree_claim;
mod tree_incoming;
