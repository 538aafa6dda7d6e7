//! Per-block compression through a real session on loopback: text shrinks on the wire and
//! arrives exact in both directions, random bytes cost (almost) no wire bytes extra, a fault
//! in a compressed piece is repaired, a resumed transfer compresses what is left, and a level
//! zstd does not take is refused. Contents are seeded (seeds printed).

use crate::common;

use std::fs;
use std::path::Path;

use sluice::datapath::Fault;
use sluice::session::{CopyOptions, Overwrite, SessionError, TransferReport};

use common::TestServer;

const MIB: usize = 1 << 20;

/// Seeded text: log-like lines, compressible about 4:1.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 64);
    let mut line = 0;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        line += 1;
        let level = ["INFO", "WARN", "DEBUG"][(x % 3) as usize];
        out.extend_from_slice(
            format!(
                "{line} {level} moved block {} of file {} in {} us\n",
                x % 4096,
                x % 97,
                x % 9999
            )
            .as_bytes(),
        );
    }
    out.truncate(len);
    out
}

fn compressed(level: i32) -> CopyOptions {
    CopyOptions { compress: Some(level), overwrite: Overwrite::Always, ..CopyOptions::default() }
}

/// The share of the file's bytes that went on the wire, from a report.
fn wire_share(report: &TransferReport) -> f64 {
    let channel = report.channel.as_ref().expect("a channel report");
    channel.payload_bytes as f64 / channel.bytes as f64
}

fn same(path: &Path, data: &[u8]) -> bool {
    fs::read(path).unwrap() == data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_shrinks_on_the_wire_both_ways_and_arrives_exact() {
    let seed = 41;
    println!("text seed {seed}");
    let server = TestServer::start().await;
    let data = text(40 * MIB + 321, seed);
    fs::write(server.root().join("log.txt"), &data).unwrap();
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();

    let down = client.download(&["log.txt".into()], local.path(), &compressed(3), |_| {}).await;
    let down = down.expect("download");
    println!("download: {:.3} of the bytes on the wire", wire_share(&down));
    assert!(wire_share(&down) < 0.5, "{:?}", down.channel);
    assert!(same(&local.path().join("log.txt"), &data));

    let src = local.path().join("log.txt");
    let up = client.upload(&[src], "up.txt", &compressed(1), |_| {}).await.expect("upload");
    assert!(same(&server.root().join("up.txt"), &data));
    // The sending client's report is there unless the server's answer beat its last ACK.
    if up.channel.is_some() {
        println!("upload: {:.3} of the bytes on the wire", wire_share(&up));
        assert!(wire_share(&up) < 0.5, "{:?}", up.channel);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bytes_go_raw_and_a_tree_of_both_arrives_exact() {
    let seed = 42;
    println!("pattern seed {seed}");
    let server = TestServer::start().await;
    let tree = server.root().join("mix");
    fs::create_dir(&tree).unwrap();
    let noise = noise(24 * MIB, seed);
    let words = text(3 * MIB + 7, seed);
    fs::write(tree.join("noise.bin"), &noise).unwrap();
    fs::write(tree.join("words.txt"), &words).unwrap();
    fs::write(tree.join("empty"), b"").unwrap();
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let options = CopyOptions { recursive: true, ..compressed(3) };
    let report = client.download(&["mix".into()], local.path(), &options, |_| {}).await.unwrap();
    let share = wire_share(&report);
    println!("tree: {share:.3} of the bytes on the wire");
    // 24 MiB that do not compress and 3 MiB that do: the noise costs nothing extra.
    assert!(share < 1.0 && share > 24.0 / 27.0, "{:?}", report.channel);
    assert!(same(&local.path().join("mix/noise.bin"), &noise));
    assert!(same(&local.path().join("mix/words.txt"), &words));
    assert!(same(&local.path().join("mix/empty"), b""));
    server.stop().await;
}

/// Bytes that do not compress: `seed` expanded with BLAKE3's XOF.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new().update(&seed.to_le_bytes()).finalize_xof().fill(&mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_in_a_compressed_piece_is_repaired() {
    let seed = 43;
    println!("text seed {seed}");
    // The server inverts a byte of block 1 as it reads it to compress in the first pass.
    let fault = Fault { offset: 5 * MIB as u64 + 999, times: 1 };
    let server = TestServer::start_with(|c| c.fault = Some(fault)).await;
    let data = text(9 * MIB, seed);
    fs::write(server.root().join("t.log"), &data).unwrap();
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let report = client
        .download(&["t.log".into()], local.path(), &compressed(3), |_| {})
        .await
        .expect("repaired");
    assert_eq!(report.repaired, 1);
    assert!(same(&local.path().join("t.log"), &data));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_zstd_does_not_take_is_refused_before_anything_moves() {
    let server = TestServer::start().await;
    fs::write(server.root().join("a"), b"abc").unwrap();
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    for level in [0, 20, -5] {
        let err = client
            .download(&["a".into()], local.path(), &compressed(level), |_| {})
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, SessionError::Refused(m) if m.contains(&format!("level {level}"))),
            "{err}"
        );
    }
    assert!(common::listing(local.path()).is_empty());
    server.stop().await;
}
