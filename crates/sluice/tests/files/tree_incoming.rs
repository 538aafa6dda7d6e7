//! The receiving end's file plane without a network: bytes reach a final name only after the
//! hash matches, nothing is left behind otherwise, and the overwrite and placement rules.

use std::os::unix::fs::PermissionsExt;

use crate::common;
use sluice::datapath::write_all_at;
use sluice::tree::{Entry, EntryKind, Overwrite, PlanError, ReceiveOptions, plan};

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn file(path: &str, size: u64) -> Entry {
    Entry {
        path: path.into(),
        kind: EntryKind::File,
        size,
        mtime: 0,
        mode: 0o644,
        target: None,
        blake3: None,
    }
}

fn always() -> ReceiveOptions {
    ReceiveOptions { overwrite: Overwrite::Always, ..ReceiveOptions::default() }
}

#[test]
fn commit_puts_the_exact_bytes_under_the_final_name() {
    let dir = tempfile::tempdir().unwrap();
    let final_path = dir.path().join("out.bin");
    let data = pattern(1_000_003);
    let planned = plan(&final_path, vec![file("src.bin", data.len() as u64)], &always()).unwrap();
    assert_eq!(planned.wanted(), &[0]);
    let incoming = planned.prepare().unwrap();

    // The temporary file, and the claim of the final name while the transfer lives.
    let temps = common::listing(dir.path());
    assert_eq!(temps.len(), 2);
    assert_eq!(temps[0], ".out.bin.sluice-lock");
    let temp_name = &temps[1];
    assert!(temp_name.starts_with(".out.bin.sluice-part-"), "{temp_name}");
    let hex = temp_name.trim_start_matches(".out.bin.sluice-part-");
    assert!(hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()), "{temp_name}");
    let meta = std::fs::metadata(dir.path().join(temp_name)).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), data.len() as u64);
    assert!(!final_path.exists());

    // Written out of order, as packets arrive.
    let store = incoming.store();
    let half = data.len() / 2;
    write_all_at(&store, &data[half..], half as u64).unwrap();
    write_all_at(&store, &data[..half], 0).unwrap();
    drop(store);
    let hash = blake3::hash(&data);
    let done = incoming.commit(&[hash], &[hash]).unwrap();
    assert_eq!(done.files, 1);

    assert_eq!(std::fs::read(&final_path).unwrap(), data);
    assert_eq!(common::listing(dir.path()), vec!["out.bin".to_owned()]);
    assert_eq!(std::fs::metadata(&final_path).unwrap().permissions().mode() & 0o777, 0o644);
}

#[test]
fn commit_replaces_an_existing_final_file_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let final_path = dir.path().join("f");
    std::fs::write(&final_path, b"old contents").unwrap();
    let refused = plan(&final_path, vec![file("f", 3)], &ReceiveOptions::default()).unwrap_err();
    assert!(matches!(&refused, PlanError::Refused(m) if m.contains("--overwrite")), "{refused}");
    let kept = plan(
        &final_path,
        vec![file("f", 3)],
        &ReceiveOptions { overwrite: Overwrite::Never, ..ReceiveOptions::default() },
    )
    .unwrap();
    assert!(kept.wanted().is_empty());
    assert_eq!(kept.kept, 1);

    let incoming = plan(&final_path, vec![file("f", 3)], &always()).unwrap().prepare().unwrap();
    write_all_at(&incoming.store(), b"new", 0).unwrap();
    incoming.commit(&[blake3::hash(b"new")], &[blake3::hash(b"new")]).unwrap();
    assert_eq!(std::fs::read(&final_path).unwrap(), b"new");
    assert_eq!(common::listing(dir.path()), vec!["f".to_owned()]);
}

#[test]
fn a_mismatch_leaves_no_final_file_and_no_temp_file_and_the_others_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(70_000);
    let manifest = vec![
        Entry { kind: EntryKind::Dir, size: 0, ..file("t", 0) },
        file("t/bad.bin", data.len() as u64),
        file("t/good.bin", 4),
    ];
    let incoming = plan(dir.path(), manifest, &always()).unwrap().prepare().unwrap();
    let mut corrupted = data.clone();
    corrupted[4096] = b'X'; // one corrupted byte
    let store = incoming.store();
    write_all_at(&store, &corrupted, 0).unwrap();
    write_all_at(&store, b"good", data.len() as u64).unwrap();
    drop(store);

    let expected = [blake3::hash(&data), blake3::hash(b"good")];
    let written = [blake3::hash(&corrupted), blake3::hash(b"good")];
    let done = incoming.commit(&expected, &written).unwrap();
    assert_eq!(done.mismatched, vec!["t/bad.bin".to_owned()]);
    assert_eq!(done.files, 1);
    assert_eq!(common::listing(&dir.path().join("t")), vec!["good.bin".to_owned()]);
}

#[test]
fn dropping_without_commit_removes_the_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = vec![file("a", 12345), file("b", 0)];
    let incoming = plan(dir.path(), manifest, &always()).unwrap().prepare().unwrap();
    // Two temporary files and the claims of their final names.
    assert_eq!(common::listing(dir.path()).len(), 4);
    drop(incoming);
    assert!(common::listing(dir.path()).is_empty());
}

#[test]
fn long_names_get_a_temp_name_the_file_system_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let name = "n".repeat(255);
    let incoming = plan(dir.path(), vec![file(&name, 1)], &always()).unwrap().prepare().unwrap();
    write_all_at(&incoming.store(), b"z", 0).unwrap();
    incoming.commit(&[blake3::hash(b"z")], &[blake3::hash(b"z")]).unwrap();
    assert_eq!(common::listing(dir.path()), vec![name]);
}

#[test]
fn a_missing_directory_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let err = plan(&dir.path().join("nope/out.bin"), vec![file("x", 10)], &always()).unwrap_err();
    assert!(matches!(err, PlanError::NotFound(_)), "{err}");
}

#[test]
fn a_hostile_manifest_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["../escape", "/abs", "a/../../b", "a//b", ""] {
        let err = plan(dir.path(), vec![file(bad, 1)], &always()).unwrap_err();
        assert!(matches!(err, PlanError::Bad(_)), "{bad:?}: {err}");
    }
    // A file inside a directory the manifest does not list first.
    let err = plan(dir.path(), vec![file("d/x", 1)], &always()).unwrap_err();
    assert!(matches!(err, PlanError::Bad(_)), "{err}");
    assert!(common::listing(dir.path()).is_empty());
}

#[test]
fn a_plan_adopts_the_temporary_files_an_earlier_one_kept_and_refuses_others() {
    // An earlier plan of two files, its bytes half written, kept (as a server stopping does).
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (pattern(70_001), pattern(5_000));
    let manifest = || {
        let top = Entry { kind: EntryKind::Dir, size: 0, ..file("t", 0) };
        vec![top, file("t/a.bin", a.len() as u64), file("t/b.bin", b.len() as u64)]
    };
    let first = plan(dir.path(), manifest(), &always()).unwrap().prepare().unwrap();
    write_all_at(&first.store(), &a[..1000], 0).unwrap();
    let temps = first.temps().to_vec();
    first.keep_files();

    // Refused, and none of them touched: too few, one of the wrong size, one not beside its
    // file, and a file that is not a temporary name of its file's.
    let again = || plan(dir.path(), manifest(), &always()).unwrap();
    let refused = |temps: &[std::path::PathBuf]| {
        let err = again().adopt(temps).unwrap_err();
        assert!(matches!(err, PlanError::Refused(_)), "{err}");
    };
    refused(&temps[..1]);
    refused(&[temps[1].clone(), temps[0].clone()]);
    let elsewhere = dir.path().join(temps[0].file_name().unwrap());
    std::fs::copy(&temps[0], &elsewhere).unwrap();
    refused(&[elsewhere.clone(), temps[1].clone()]);
    let stranger = dir.path().join("t").join("a.bin.keep");
    std::fs::write(&stranger, &a).unwrap();
    refused(&[stranger.clone(), temps[1].clone()]);
    for kept in temps.iter().chain([&elsewhere, &stranger]) {
        assert!(kept.exists(), "{} is left as it was", kept.display());
    }

    // Adopted: the bytes written before are there, the rest lands, and the commit puts both
    // files in place.
    let incoming = again().adopt(&temps).unwrap();
    assert_eq!(incoming.temps(), &temps[..]);
    let store = incoming.store();
    write_all_at(&store, &a[1000..], 1000).unwrap();
    write_all_at(&store, &b, a.len() as u64).unwrap();
    drop(store);
    let hashes = [blake3::hash(&a), blake3::hash(&b)];
    assert_eq!(incoming.commit(&hashes, &hashes).unwrap().files, 2);
    assert_eq!(std::fs::read(dir.path().join("t/a.bin")).unwrap(), a);
    assert_eq!(std::fs::read(dir.path().join("t/b.bin")).unwrap(), b);
}
