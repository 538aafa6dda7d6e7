//! Partial files: bytes reach the final name only after the hash matches, and nothing is left
//! behind otherwise; the sender's hash of the bytes it announced.

use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::AtomicBool;

use sluice::files::{CommitError, PartialFile, hash_prefix};

/// Names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn hash_prefix_is_plain_blake3_of_the_announced_bytes_and_ignores_the_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(3 << 20 | 12345);
    let path = dir.path().join("f");
    std::fs::write(&path, &data).unwrap();
    let mut file = std::fs::File::open(&path).unwrap();
    std::io::Read::read_exact(&mut file, &mut [0u8; 100]).unwrap();
    let no = AtomicBool::new(false);
    let len = data.len() as u64;
    assert_eq!(hash_prefix(&file, len, &no).unwrap(), Some(blake3::hash(&data)));
    // A file that grew since its size was announced: only the announced bytes count.
    assert_eq!(hash_prefix(&file, 1000, &no).unwrap(), Some(blake3::hash(&data[..1000])));
    assert_eq!(hash_prefix(&file, 0, &no).unwrap(), Some(blake3::hash(b"")));
    // One that shrank cannot give the announced bytes.
    let err = hash_prefix(&file, len + 1, &no).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    assert_eq!(hash_prefix(&file, len, &AtomicBool::new(true)).unwrap(), None);
}

#[test]
fn commit_puts_the_exact_bytes_under_the_final_name() {
    let dir = tempfile::tempdir().unwrap();
    let final_path = dir.path().join("out.bin");
    let data = pattern(1_000_003);
    let partial = PartialFile::create(&final_path, data.len() as u64).unwrap();

    let temp = partial.temp_path().to_owned();
    let temp_name = temp.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(temp.parent(), Some(dir.path()));
    assert!(temp_name.starts_with(".out.bin.sluice-part-"), "{temp_name}");
    let hex = temp_name.trim_start_matches(".out.bin.sluice-part-");
    assert!(hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()), "{temp_name}");
    let meta = std::fs::metadata(&temp).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), data.len() as u64);
    assert!(!final_path.exists());

    // Written out of order, as packets arrive.
    let half = data.len() / 2;
    partial.file().write_all_at(&data[half..], half as u64).unwrap();
    partial.file().write_all_at(&data[..half], 0).unwrap();
    let hash = blake3::hash(&data);
    partial.commit(&hash, &hash).unwrap();

    assert_eq!(std::fs::read(&final_path).unwrap(), data);
    assert_eq!(entries(dir.path()), vec!["out.bin".to_owned()]);
}

#[test]
fn commit_replaces_an_existing_final_file() {
    let dir = tempfile::tempdir().unwrap();
    let final_path = dir.path().join("f");
    std::fs::write(&final_path, b"old contents").unwrap();
    let partial = PartialFile::create(&final_path, 3).unwrap();
    partial.file().write_all_at(b"new", 0).unwrap();
    partial.commit(&blake3::hash(b"new"), &blake3::hash(b"new")).unwrap();
    assert_eq!(std::fs::read(&final_path).unwrap(), b"new");
    assert_eq!(entries(dir.path()), vec!["f".to_owned()]);
}

#[test]
fn a_mismatch_leaves_no_final_file_and_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let final_path = dir.path().join("out.bin");
    let data = pattern(70_000);
    let partial = PartialFile::create(&final_path, data.len() as u64).unwrap();
    let temp = partial.temp_path().to_owned();
    let mut corrupted = data.clone();
    corrupted[4096] = b'X'; // one corrupted byte
    partial.file().write_all_at(&corrupted, 0).unwrap();

    let expected = blake3::hash(&data);
    let written = blake3::hash(&corrupted);
    match partial.commit(&expected, &written) {
        Err(err @ CommitError::Mismatch { .. }) => {
            let message = err.to_string();
            assert!(message.contains(expected.to_hex().as_str()), "{message}");
            assert!(message.contains(written.to_hex().as_str()), "{message}");
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    assert!(!final_path.exists());
    assert!(!temp.exists());
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn dropping_without_commit_removes_the_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let final_path = dir.path().join("out.bin");
    let partial = PartialFile::create(&final_path, 12345).unwrap();
    let temp = partial.temp_path().to_owned();
    assert!(temp.exists());
    drop(partial);
    assert!(!temp.exists());
    assert!(!final_path.exists());
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn long_names_get_a_temp_name_the_file_system_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let name = "n".repeat(255);
    let final_path = dir.path().join(&name);
    let partial = PartialFile::create(&final_path, 1).unwrap();
    partial.file().write_all_at(b"z", 0).unwrap();
    partial.commit(&blake3::hash(b"z"), &blake3::hash(b"z")).unwrap();
    assert_eq!(entries(dir.path()), vec![name]);
}

#[test]
fn a_missing_directory_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let err = PartialFile::create(&dir.path().join("nope/out.bin"), 10).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}
