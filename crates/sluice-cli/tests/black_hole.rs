//! Path MTU black holes between client and server: `linkem` between two namespaces of the
//! test's own drops every IP packet longer than a limit without a word, while the kernels on
//! both ends believe the TUN's 1500-byte MTU. The session's QUIC connection gets through (it
//! starts at 1200 bytes); the data channels start at 1232-byte datagrams and go to their full
//! size only once a probe of it was answered (`sluice_proto::pmtu`). Needs root (namespaces,
//! TUN devices); without it the test says so and passes, except in CI, where it fails
//! (`common::skip_or_fail`).

#![allow(clippy::print_stdout)] // tests print their seeds and results

use std::path::{Path, PathBuf};
use std::process::Output;

use linkem::DirectionConfig;

mod common;

use common::{Linked, code, random_file, same_file, skip_or_fail, stderr};

const TOKEN: &str = "black-hole-test-token-41c9";
const PORT: &str = "7810";

/// A link that drops IP packets above `above` bytes both ways, and a server behind it.
fn hole(tag: &str, above: u32) -> Linked {
    let link = DirectionConfig {
        rate_bps: 200_000_000,
        delay_ns: 5_000_000,
        black_hole_above_bytes: Some(above),
        ..Default::default()
    };
    Linked::new(tag, link, PORT, TOKEN)
}

/// `sluice cp [extra] FROM TO` in namespace a, where a `:name` is the server's.
fn cp(hole: &Linked, extra: &[&str], from: &str, to: &str) -> Output {
    hole.cp(extra, from, to).output().unwrap()
}

#[track_caller]
fn root_or_skip() -> bool {
    let root = linkem::netns::is_root();
    if !root {
        skip_or_fail("needs root for network namespaces and TUN devices");
    }
    root
}

fn source(dir: &Path, size: u64, seed: u64) -> PathBuf {
    println!("seed {seed}");
    let src = dir.join("src.bin");
    random_file(&src, size, seed);
    src
}

#[test]
fn through_a_black_hole_above_the_base_size_both_ways_move_at_the_base_size() {
    if !root_or_skip() {
        return;
    }
    let hole = hole("sluice-bh1400", 1400);
    // 20 MB at 200 Mbit/s outlasts the wait for an answer to the probes (200 ms or more).
    let src = source(hole.dir.path(), 20_000_000, 4101);
    let up = cp(&hole, &[], src.to_str().unwrap(), ":up.bin");
    let said = stderr(&up);
    println!("upload: exit {}, {said}", code(&up));
    assert_eq!(code(&up), 0, "{said}");
    assert!(same_file(&src, &hole.root.join("up.bin")));
    // The client sent the data: it tells why its packets are small.
    assert!(said.contains("no answer to 1472-byte probes: sending 1232-byte packets"), "{said}");
    // A download: the server sends, probes, and falls back on its own.
    let back = hole.dir.path().join("back.bin");
    let down = cp(&hole, &[], ":up.bin", back.to_str().unwrap());
    assert_eq!(code(&down), 0, "{}", stderr(&down));
    assert!(same_file(&src, &back));
}

#[test]
fn below_the_base_size_nothing_gets_through_and_the_error_says_what_to_try() {
    if !root_or_skip() {
        return;
    }
    // QUIC's first packets are 1200-byte datagrams, 1228 bytes of IP: the session connects;
    // the data channels' 1232-byte datagrams (1260 bytes of IP) do not pass.
    let hole = hole("sluice-bh1250", 1250);
    let src = source(hole.dir.path(), 3_000_000, 4102);
    let lost = cp(&hole, &[], src.to_str().unwrap(), ":default.bin");
    let said = stderr(&lost);
    println!("default packet size: exit {}, {said}", code(&lost));
    assert_eq!(code(&lost), 5, "{said}");
    // The final error, not only a warning before it, says what happened over UDP (within the
    // idle timeout of the server's `Want`, not the early start's long first wait) and then over
    // TCP (its retry by `auto`, through the same hole).
    let last = said.lines().last().unwrap_or_default();
    assert!(last.contains("nothing got through in 5 s"), "{said}");
    assert!(last.contains("does not carry even 1232-byte datagrams"), "{said}");
    assert!(last.contains("try a smaller --packet-size"), "{said}");
    assert!(last.contains("over TCP: the TCP connection was made"), "{said}");
    assert!(!last.contains("QUIC idle timeout"), "{said}");
    assert!(!hole.root.join("default.bin").exists());
    // A size the path carries (1200 + 28 bytes of headers) gets through, intact.
    let fits = cp(&hole, &["--packet-size", "1200"], src.to_str().unwrap(), ":small.bin");
    assert_eq!(code(&fits), 0, "{}", stderr(&fits));
    assert!(same_file(&src, &hole.root.join("small.bin")));
}
