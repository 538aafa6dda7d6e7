//! A server whose disk fills up or cannot be written: the upload fails with an error that says
//! so, and nothing is left half-renamed: no final file, no temporary file. The served
//! directory is a small tmpfs this test mounts (and unmounts); it needs root, and says so when
//! it skips.

#![allow(clippy::print_stdout)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestServer, pattern};
use sluice::session::{CopyOptions, Peer, SessionError};

/// A tmpfs mounted on a directory of the test's own; unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` when mounting is not possible here (not root).
    fn mount(options: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "sluice-test"])
            .arg(dir.path())
            .status()
            .ok()?
            .success();
        ok.then_some(Tmpfs { dir })
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_owned()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn everything_in(dir: &Path) -> Vec<String> {
    walk(dir, dir)
}

fn walk(base: &Path, dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        found.push(path.strip_prefix(base).unwrap().display().to_string());
        if path.is_dir() {
            found.extend(walk(base, &path));
        }
    }
    found.sort();
    found
}

/// Uploads `files` (name, size) into a server whose root is `root`.
async fn upload(root: PathBuf, files: &[(&str, usize)]) -> Result<(), SessionError> {
    let server = TestServer::start_with(|c| c.root = root).await;
    let local = tempfile::tempdir().unwrap();
    let mut sources = Vec::new();
    for (i, (name, size)) in files.iter().enumerate() {
        std::fs::write(local.path().join(name), pattern(*size, i as u8)).unwrap();
        sources.push(local.path().join(name));
    }
    let client = server.client().await;
    let options = CopyOptions::default();
    let result = client.upload(&sources, "", &options, |_| {}).await.map(|_| ());
    client.close().await;
    server.stop().await;
    result
}

#[tokio::test]
async fn a_full_disk_fails_the_upload_clearly_and_leaves_nothing_behind() {
    let Some(disk) = Tmpfs::mount("size=4m") else {
        println!("skipped: needs root to mount a tmpfs");
        return;
    };
    // 3 MiB fits; 6 MiB more does not.
    let result = upload(disk.path(), &[("fits.bin", 3 << 20), ("too-big.bin", 6 << 20)]).await;
    match result {
        // The server's file error, not one of the client's own files.
        Err(SessionError::PeerIo { peer: Peer::Server, message: said }) => {
            println!("{said}");
            assert!(said.contains("No space left on device"), "{said}");
            // Which file meets the full disk first depends on how the channels interleave.
            let named = [" .fits.bin.sluice-part-", " .too-big.bin.sluice-part-"];
            assert!(named.iter().any(|n| said.contains(n)), "named as the client would: {said}");
            assert!(!said.contains(disk.path().to_str().unwrap()), "the server's path: {said}");
        }
        other => panic!("expected a disk-full error, got {other:?}"),
    }
    let left: Vec<String> =
        everything_in(&disk.path()).into_iter().filter(|name| name != "fits.bin").collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(!disk.path().join("too-big.bin").exists());
}

#[tokio::test]
async fn a_read_only_root_fails_the_upload_clearly_and_changes_nothing() {
    let Some(disk) = Tmpfs::mount("size=4m") else {
        println!("skipped: needs root to mount a tmpfs");
        return;
    };
    let existing = disk.path().join("old.txt");
    std::fs::write(&existing, b"old").unwrap();
    let remounted =
        Command::new("mount").args(["-o", "remount,ro"]).arg(disk.path()).status().unwrap();
    assert!(remounted.success());
    let result = upload(disk.path(), &[("new.bin", 1 << 20)]).await;
    match result {
        // The server's file error, not one of the client's own files.
        Err(SessionError::PeerIo { peer: Peer::Server, message: said }) => {
            println!("{said}");
            assert!(said.contains("Read-only file system"), "{said}");
            assert!(!said.contains(disk.path().to_str().unwrap()), "the server's path: {said}");
        }
        other => panic!("expected a read-only error, got {other:?}"),
    }
    assert_eq!(everything_in(&disk.path()), vec!["old.txt".to_string()]);
    assert_eq!(std::fs::read(&existing).unwrap(), b"old");
}
