//! Per-block repair through a real session on loopback: a byte corrupted on its way out of the
//! sender or on its way to the receiver's disk (the ends' test hook `fault`, a stand-in for a
//! memory or disk fault) makes the file's BLAKE3 differ; the receiver asks for the blocks that
//! differ and the file is mended, not failed. Contents are a fixed pattern (the seed printed),
//! rates are capped so loopback drops nothing and each fault strikes exactly where it is set.

use crate::common;

use std::fs;

use common::{TestServer, pattern};
use sluice::datapath::Fault;
use sluice::session::{Client, CopyOptions, SessionError};

const MIB: u64 = 1 << 20;
/// A cap that keeps loopback free of drops, so a packet is read for sending once.
const RATE_BPS: u64 = 400_000_000;

async fn client(server: &TestServer, fault: Option<Fault>) -> Client {
    let mut config = server.client_config();
    config.channel.rate_bps = RATE_BPS;
    config.fault = fault;
    Client::connect(config).await.expect("client connects")
}

fn always() -> CopyOptions {
    CopyOptions { overwrite: sluice::session::Overwrite::Always, ..CopyOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_corrupted_on_the_way_out_of_the_server_is_repaired_on_download() {
    let seed = 31;
    println!("pattern seed {seed}");
    // The server inverts byte 9 MiB + 77 as it reads it to send in the first pass (the repair
    // round reads it right): block 2 of 4 MiB.
    let fault = Fault { offset: 9 * MIB + 77, times: 1 };
    let server = TestServer::start_with(|c| c.fault = Some(fault)).await;
    let data = pattern(20 * MIB as usize, seed);
    fs::write(server.root().join("big.bin"), &data).unwrap();
    let client = client(&server, None).await;
    let local = tempfile::tempdir().unwrap();
    let report = client
        .download(&["big.bin".into()], local.path(), &always(), |_| {})
        .await
        .expect("the download is repaired");
    assert_eq!(report.repaired, 1, "one 4 MiB block moved again");
    assert!(fs::read(local.path().join("big.bin")).unwrap() == data, "the file is exact");
    assert_eq!(common::listing(local.path()), vec!["big.bin".to_owned()]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_corrupted_on_the_way_to_the_servers_disk_is_repaired_on_upload() {
    let seed = 32;
    println!("pattern seed {seed}");
    // The server inverts the last byte as it writes it in the first pass: block 4, the short
    // last one.
    let size = 17 * MIB + 5;
    let fault = Fault { offset: size - 1, times: 1 };
    let server = TestServer::start_with(|c| c.fault = Some(fault)).await;
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("up.bin");
    let data = pattern(size as usize, seed);
    fs::write(&src, &data).unwrap();
    let client = client(&server, None).await;
    let report = client.upload(&[src], "", &always(), |_| {}).await.expect("repaired");
    assert_eq!(report.repaired, 1, "the sending client counts the block it sent again");
    assert!(fs::read(server.root().join("up.bin")).unwrap() == data, "the file is exact");
    assert_eq!(common::listing(&server.root()), vec!["up.bin".to_owned()]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_in_one_file_of_a_tree_is_repaired_and_the_others_untouched() {
    let seed = 33;
    println!("pattern seed {seed}");
    let server = TestServer::start().await;
    let tree = server.root().join("tree");
    fs::create_dir(&tree).unwrap();
    // Files of 3, 6, 1 and 9 MiB, end to end in the offset space: the client (receiving)
    // corrupts one write in the third file (offset 9 MiB + 10, its first block).
    let sizes = [3, 6, 1, 9];
    let mut contents = Vec::new();
    for (i, mib) in sizes.iter().enumerate() {
        let data = pattern((mib * MIB) as usize, seed + i as u8);
        fs::write(tree.join(format!("f{i}")), &data).unwrap();
        contents.push(data);
    }
    let fault = Fault { offset: 9 * MIB + 10, times: 1 };
    let client = client(&server, Some(fault)).await;
    let local = tempfile::tempdir().unwrap();
    let options = CopyOptions { recursive: true, ..always() };
    let report = client.download(&["tree".into()], local.path(), &options, |_| {}).await.unwrap();
    assert_eq!(report.repaired, 1);
    assert_eq!(report.files, 4);
    for (i, data) in contents.iter().enumerate() {
        let got = fs::read(local.path().join("tree").join(format!("f{i}"))).unwrap();
        assert!(&got == data, "file f{i} is exact");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_that_strikes_every_time_ends_in_an_integrity_error_after_two_rounds() {
    let seed = 34;
    println!("pattern seed {seed}");
    let fault = Fault { offset: 5 * MIB, times: u32::MAX };
    let server = TestServer::start_with(|c| c.fault = Some(fault)).await;
    fs::write(server.root().join("bad.bin"), pattern(8 * MIB as usize, seed)).unwrap();
    let client = client(&server, None).await;
    let local = tempfile::tempdir().unwrap();
    let err = client
        .download(&["bad.bin".into()], local.path(), &always(), |_| {})
        .await
        .expect_err("a fault on every read cannot be repaired");
    assert!(
        matches!(&err, SessionError::Integrity(m) if m.contains("bad.bin") && m.contains("not stored")),
        "{err}"
    );
    assert!(!local.path().join("bad.bin").exists(), "nothing stored under the final name");
    assert!(common::only_resumable_leftovers(local.path()), "{:?}", common::listing(local.path()));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_with_one_file_beyond_repair_is_a_partial_success_naming_it() {
    let seed = 35;
    println!("pattern seed {seed}");
    let server = TestServer::start().await;
    let tree = server.root().join("two");
    fs::create_dir(&tree).unwrap();
    let good = pattern(3 * MIB as usize, seed);
    fs::write(tree.join("a.bin"), &good).unwrap();
    fs::write(tree.join("b.bin"), pattern(5 * MIB as usize, seed + 1)).unwrap();
    // The client corrupts every write of a byte of b.bin (offsets after a.bin's 3 MiB).
    let fault = Fault { offset: 4 * MIB, times: u32::MAX };
    let client = client(&server, Some(fault)).await;
    let local = tempfile::tempdir().unwrap();
    let options = CopyOptions { recursive: true, ..always() };
    let err = client
        .download(&["two".into()], local.path(), &options, |_| {})
        .await
        .expect_err("b.bin cannot be repaired");
    assert!(
        matches!(&err, SessionError::Partial(m) if m.contains("b.bin") && m.contains("1 stored")),
        "{err}"
    );
    assert!(fs::read(local.path().join("two/a.bin")).unwrap() == good, "a.bin is stored");
    assert!(!local.path().join("two/b.bin").exists(), "b.bin is not");
    server.stop().await;
}
