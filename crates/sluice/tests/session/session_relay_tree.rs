//! Trees through relays (issue 28, item 3; `docs/relay.md`): a directory striped over relays and
//! the direct path as one offset space of its files, collected by the receiver's job, each file
//! renamed into place only once the whole tree hashes to the sender's BLAKE3.

#![allow(clippy::print_stdout)] // tests print their seeds

use crate::common;
use crate::session_relay::{SEED, block_files, receiver_and_two_relays, relayed_options, targets};

use std::fs;
use std::path::Path;

use common::pattern;
use sluice::session::{Overwrite, RelayedOptions, SessionError};
use sluice_session::relay::Strategy;

/// Writes a tree under `root/name`: `small` files of 0..3000 bytes spread over directories
/// (an empty one among them) and `large` files of a few MiB; returns (files, bytes).
fn make_tree(root: &Path, name: &str, small: usize, large: usize) -> (usize, u64) {
    let top = root.join(name);
    fs::create_dir_all(top.join("empty")).unwrap();
    let mut bytes = 0;
    for i in 0..small {
        let dir = top.join(format!("d{}", i % 7)).join(format!("e{}", i % 3));
        fs::create_dir_all(&dir).unwrap();
        let len = (i * 37) % 3000;
        fs::write(dir.join(format!("f{i}.txt")), pattern(len, SEED.wrapping_add(i as u8))).unwrap();
        bytes += len as u64;
    }
    for i in 0..large {
        let len = (3 << 20) + i * 4099;
        fs::write(top.join(format!("big{i}.bin")), pattern(len, SEED ^ i as u8)).unwrap();
        bytes += len as u64;
    }
    (small + large, bytes)
}

/// Regular files beneath `dir` in place (not the hidden temporary files and locks).
fn files_under(dir: &Path) -> usize {
    let mut count = 0;
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            count += files_under(&path);
        } else if !entry.file_name().to_string_lossy().starts_with('.') {
            count += 1;
        }
    }
    count
}

/// Every file under `a` is under `b` with the same bytes, and the other way round.
fn same_tree(a: &Path, b: &Path) {
    let list = |root: &Path| {
        let mut out = Vec::new();
        let mut stack = vec![root.to_owned()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                let rel = path.strip_prefix(root).unwrap().to_owned();
                if path.is_dir() {
                    stack.push(path);
                    out.push((rel, None));
                } else {
                    out.push((rel, Some(fs::read(&path).unwrap())));
                }
            }
        }
        out.sort();
        out
    };
    let (left, right) = (list(a), list(b));
    assert_eq!(left.len(), right.len(), "entries differ");
    for (l, r) in left.iter().zip(&right) {
        assert_eq!(l.0, r.0);
        assert!(l.1 == r.1, "{} differs", l.0.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_goes_through_relays_intact_and_nothing_half_done_is_left() {
    println!("seed {SEED}");
    let (receiver, spools, a, b) = receiver_and_two_relays().await;
    let local = tempfile::tempdir().unwrap();
    let (files, bytes) = make_tree(local.path(), "results", 300, 3);
    let sender = receiver.client().await;
    let relays = targets(&[&a, &b]).await;
    let options = relayed_options(Strategy::Fcfs, true, true);
    let source = local.path().join("results");
    let report = sender.upload_relayed(&source, "", &relays, &options).await.unwrap();
    println!("{report:?}");
    assert_eq!((report.files, report.bytes), (files as u64, bytes));
    assert!(report.placed[0].blocks > 0 && report.placed[1].blocks > 0, "{:?}", report.placed);
    same_tree(&source, &receiver.root().join("results"));
    assert_eq!(common::listing(&receiver.root()), vec!["results"], "no part file is left");
    for spool in [spools[0].path(), spools[1].path()] {
        assert!(block_files(spool).is_empty(), "collected blocks are deleted");
    }

    // Again into the same place: refused whole, before anything moves; nothing changes.
    let err = sender.upload_relayed(&source, "", &relays, &options).await.unwrap_err();
    assert!(matches!(err, SessionError::Refused(ref m) if m.contains("exist")), "{err}");
    same_tree(&source, &receiver.root().join("results"));

    // Into a directory that does not exist beneath one that does not either: not found.
    let options = relayed_options(Strategy::Cyclic, false, false);
    let report = sender.upload_relayed(&source, "no/such", &relays, &options).await;
    assert!(matches!(report, Err(SessionError::NotFound(_))), "{report:?}");
    // A tree whose sender leaves once every block is on a relay is collected alone, under the
    // destination's name (scp's placement: a new name takes the source's place).
    let report = sender.upload_relayed(&source, "again", &relays, &options).await.unwrap();
    assert_eq!(report.total_seconds, None);
    let landed = receiver.root().join("again");
    for _ in 0..600 {
        if files_under(&landed) == files {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    same_tree(&source, &landed);
    assert_eq!(common::listing(&receiver.root()), vec!["again", "results"]);
    for stop in [receiver, a, b] {
        stop.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_through_relays_moves_only_the_files_its_overwrite_policy_lets_move() {
    println!("seed {SEED}");
    let (receiver, spools, a, b) = receiver_and_two_relays().await;
    let local = tempfile::tempdir().unwrap();
    let (files, _) = make_tree(local.path(), "data", 40, 1);
    let source = local.path().join("data");
    let landed = receiver.root().join("data");
    let sender = receiver.client().await;
    let relays = targets(&[&a, &b]).await;
    let with =
        |overwrite| RelayedOptions { overwrite, ..relayed_options(Strategy::Fcfs, true, true) };
    let report = sender.upload_relayed(&source, "", &relays, &with(Overwrite::Never)).await;
    assert_eq!((report.unwrap().kept_files, files_under(&landed)), (0, files));
    let first = fs::read(landed.join("big0.bin")).unwrap();

    // At the sender: two files changed (the same size), two new ones.
    let changed = ["big0.bin", "d1/e1/f1.txt"];
    for name in changed {
        let len = fs::metadata(source.join(name)).unwrap().len() as usize;
        fs::write(source.join(name), pattern(len, SEED ^ 0x55)).unwrap();
    }
    fs::write(source.join("new1.txt"), pattern(5000, 1)).unwrap();
    fs::write(source.join("d2/new2.bin"), pattern((2 << 20) + 3, 2)).unwrap();

    // `never`: only the new files move; the changed ones stay as the server has them.
    let report = sender.upload_relayed(&source, "", &relays, &with(Overwrite::Never)).await;
    let report = report.unwrap();
    println!("never: {report:?}");
    assert_eq!((report.files, report.kept_files), (2, files as u64));
    assert_eq!(report.bytes, 5000 + (2 << 20) + 3, "only their bytes are cut into blocks");
    assert_eq!(fs::read(landed.join("new1.txt")).unwrap(), pattern(5000, 1));
    assert_eq!(fs::read(landed.join("d2/new2.bin")).unwrap(), pattern((2 << 20) + 3, 2));
    assert_eq!(fs::read(landed.join("big0.bin")).unwrap(), first, "kept as it was");

    // `if-newer`: the changed files, dated after the server's copies, replace them; the rest
    // (older at the sender than their arrival at the server) stay.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(120);
    for name in changed {
        fs::File::options()
            .write(true)
            .open(source.join(name))
            .unwrap()
            .set_modified(later)
            .unwrap();
    }
    let report = sender.upload_relayed(&source, "", &relays, &with(Overwrite::IfNewer)).await;
    let report = report.unwrap();
    println!("if-newer: {report:?}");
    assert_eq!((report.files, report.kept_files), (2, files as u64));
    same_tree(&source, &landed);

    // `never` once more: nothing is left to move; the copy ends with no block and nothing
    // changes at the server.
    let report = sender.upload_relayed(&source, "", &relays, &with(Overwrite::Never)).await;
    let report = report.unwrap();
    assert_eq!((report.files, report.blocks, report.kept_files), (0, 0, files as u64 + 2));
    same_tree(&source, &landed);
    assert_eq!(common::listing(&receiver.root()), vec!["data"], "no part file is left");
    for spool in [spools[0].path(), spools[1].path()] {
        assert!(block_files(spool).is_empty(), "collected blocks are deleted");
    }
    for stop in [receiver, a, b] {
        stop.stop().await;
    }
}
