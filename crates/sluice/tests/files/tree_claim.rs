//! Claims without a network: a receiving transfer holds the paths it writes, a second one is
//! refused as busy and touches nothing of the first's, in this process or another; a partial
//! file whose transfer died (its process killed) is still resumed; what is not a lock of ours
//! is never removed. The data are a fixed pattern (seed 71).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common;
use sluice::datapath::write_all_at;
use sluice::tree::{Entry, EntryKind, Incoming, Overwrite, PlanError, ReceiveOptions, plan};

const MIB: usize = 1 << 20;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 71) ^ (i >> 13)) as u8).collect()
}

fn file(path: &str, size: usize) -> Entry {
    Entry {
        path: path.into(),
        kind: EntryKind::File,
        size: size as u64,
        mtime: 1_700_000_000,
        mode: 0o644,
        target: None,
        blake3: None,
    }
}

/// Plans and prepares the one file `x.bin` of `size` bytes at `dir/x.bin`.
fn prepare(dir: &Path, size: usize) -> Result<Incoming, PlanError> {
    let options = ReceiveOptions { overwrite: Overwrite::Always, ..ReceiveOptions::default() };
    plan(&dir.join("x.bin"), vec![file("x.bin", size)], &options)?.prepare()
}

fn assert_busy(result: Result<Incoming, PlanError>) {
    match result {
        Err(PlanError::Busy(message)) => {
            assert!(message.contains("x.bin: another transfer is writing it"), "{message}");
        }
        other => panic!("expected busy, got {other:?}"),
    }
}

/// The partial file of `x.bin` in `dir` (its name and bytes), and its record's text.
fn leftovers(dir: &Path) -> (String, Vec<u8>, Option<String>) {
    let names = common::listing(dir);
    let temp = names.iter().find(|n| n.starts_with(".x.bin.sluice-part-")).unwrap().clone();
    let bytes = std::fs::read(dir.join(&temp)).unwrap();
    (temp, bytes, std::fs::read_to_string(dir.join(".x.bin.sluice-resume")).ok())
}

#[test]
fn a_second_transfer_to_a_path_being_written_is_busy_and_touches_nothing() {
    println!("seed 71");
    // Below and above the size that keeps a resume record.
    for size in [MIB, 16 * MIB] {
        let dir = tempfile::tempdir().unwrap();
        let data = pattern(size);
        let first = prepare(dir.path(), size).unwrap();
        let store = first.store();
        write_all_at(&store, &data[..size / 2], 0).unwrap();
        first.keeper().update((size / 2) as u64, true);
        let before = (common::listing(dir.path()), leftovers(dir.path()));
        assert!(before.0.contains(&".x.bin.sluice-lock".to_owned()), "{:?}", before.0);

        assert_busy(prepare(dir.path(), size));
        assert_eq!((common::listing(dir.path()), leftovers(dir.path())), before);

        write_all_at(&store, &data[size / 2..], (size / 2) as u64).unwrap();
        drop(store);
        let hash = blake3::hash(&data);
        assert_eq!(first.commit(&[hash], &[hash]).unwrap().files, 1);
        assert!(std::fs::read(dir.path().join("x.bin")).unwrap() == data);
        // The claim went with the transfer: the path is free again.
        assert_eq!(common::listing(dir.path()), vec!["x.bin".to_owned()]);
        drop(prepare(dir.path(), size).unwrap());
        assert_eq!(common::listing(dir.path()), vec!["x.bin".to_owned()]);
    }
}

#[test]
fn an_ended_transfers_partial_file_is_resumed_once_its_claim_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(16 * MIB);
    let first = prepare(dir.path(), data.len()).unwrap();
    write_all_at(&first.store(), &data[..9 * MIB], 0).unwrap();
    first.keeper().update(9 * MIB as u64, true);
    drop(first);
    let left = common::listing(dir.path());
    assert!(!left.iter().any(|n| n.ends_with(".sluice-lock")), "{left:?}");

    let again = prepare(dir.path(), data.len()).unwrap();
    let offered: Vec<_> = data[..8 * MIB].chunks(4 * MIB).map(blake3::hash).collect();
    assert_eq!(again.offers(), &[(0, offered)]);
}

/// Run by [`a_killed_transfers_partial_file_is_resumed_and_a_live_ones_is_busy_across_processes`]
/// in a process of its own (`SLUICE_TEST_CLAIM_DIR` set): prepares `x.bin` there, writes and
/// records 9 MiB of it, says `claim holder ready`, and waits to be killed. Otherwise does nothing.
#[test]
fn claim_holder_process() {
    let Some(dir) = std::env::var_os("SLUICE_TEST_CLAIM_DIR") else { return };
    let dir = Path::new(&dir);
    let data = pattern(16 * MIB);
    let incoming = prepare(dir, data.len()).unwrap();
    write_all_at(&incoming.store(), &data[..9 * MIB], 0).unwrap();
    incoming.keeper().update(9 * MIB as u64, true);
    // libtest may have written the test's name on this line already.
    println!("\nclaim holder ready");
    std::thread::sleep(std::time::Duration::from_secs(120));
    drop(incoming);
}

#[test]
fn a_killed_transfers_partial_file_is_resumed_and_a_live_ones_is_busy_across_processes() {
    println!("seed 71");
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tree_claim::claim_holder_process", "--nocapture", "--test-threads=1"])
        .env("SLUICE_TEST_CLAIM_DIR", dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.by_ref().map_while(Result::ok).any(|l| l == "claim holder ready");
    assert!(ready, "the holder process did not get ready");

    // Alive, it holds the path: another process is refused and changes nothing.
    let before = (common::listing(dir.path()), leftovers(dir.path()));
    assert_busy(prepare(dir.path(), 16 * MIB));
    assert_eq!((common::listing(dir.path()), leftovers(dir.path())), before);

    // Killed, it could not clean up: its lock name stays, but the lock went with it.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(common::listing(dir.path()), before.0);

    let data = pattern(16 * MIB);
    let again = prepare(dir.path(), data.len()).unwrap();
    let offered: Vec<_> = data[..8 * MIB].chunks(4 * MIB).map(blake3::hash).collect();
    assert_eq!(again.offers(), &[(0, offered)], "the killed transfer's partial file is offered");
    assert_eq!(
        common::listing(dir.path()),
        before.0,
        "the same partial file, record and a fresh lock"
    );
    let store = again.store();
    write_all_at(&store, &data[8 * MIB..], 8 * MIB as u64).unwrap();
    drop(store);
    let hash = blake3::hash(&data);
    assert_eq!(again.commit(&[hash], &[hash]).unwrap().files, 1);
    assert!(std::fs::read(dir.path().join("x.bin")).unwrap() == data);
    assert_eq!(common::listing(dir.path()), vec!["x.bin".to_owned()]);
}

#[test]
fn what_is_not_a_lock_of_ours_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let name = dir.path().join(".x.bin.sluice-lock");
    std::fs::write(&name, b"precious").unwrap();
    match prepare(dir.path(), 1000) {
        Err(PlanError::Refused(message)) => {
            assert!(message.contains(".x.bin.sluice-lock is in the way"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(std::fs::read(&name).unwrap(), b"precious");
    assert_eq!(common::listing(dir.path()), vec![".x.bin.sluice-lock".to_owned()]);

    std::fs::remove_file(&name).unwrap();
    std::os::unix::fs::symlink("x.bin", &name).unwrap();
    assert!(matches!(prepare(dir.path(), 1000), Err(PlanError::Refused(_))));
    assert!(name.symlink_metadata().unwrap().file_type().is_symlink());

    // An empty file is a lock whose maker died before it wrote it: stale, replaced.
    std::fs::remove_file(&name).unwrap();
    std::fs::write(&name, b"").unwrap();
    let incoming = prepare(dir.path(), 1000).unwrap();
    assert!(std::fs::metadata(&name).unwrap().len() > 0);
    drop(incoming);
    assert_eq!(common::listing(dir.path()), Vec::<String>::new());
}

#[test]
fn a_transfer_of_many_files_holds_one_lock_file_and_long_names_do_not_collide() {
    let dir = tempfile::tempdir().unwrap();
    // Two names that share their first 250 bytes: shortened alike, told apart by a hash.
    let long = "n".repeat(250);
    let mut manifest: Vec<Entry> = (0..300).map(|i| file(&format!("f{i:03}"), 10)).collect();
    manifest.push(file(&format!("{long}-a"), 10));
    manifest.push(file(&format!("{long}-b"), 10));
    let incoming =
        plan(dir.path(), manifest, &ReceiveOptions::default()).unwrap().prepare().unwrap();
    let locks: Vec<String> =
        common::listing(dir.path()).into_iter().filter(|n| n.ends_with(".sluice-lock")).collect();
    assert_eq!(locks.len(), 302);
    let inodes: std::collections::HashSet<u64> =
        locks.iter().map(|n| std::fs::metadata(dir.path().join(n)).unwrap().ino()).collect();
    assert_eq!(inodes.len(), 1, "every name links to one lock file");
    drop(incoming);
    assert_eq!(common::listing(dir.path()), Vec::<String>::new());
}
