//! Work in progress (issue 2).
