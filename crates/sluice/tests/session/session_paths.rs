//! Requests for paths outside the served root are refused, for every request kind, and touch
//! nothing outside it.

use crate::common;

use std::fs;
use std::os::unix::fs::symlink;

use common::TestServer;
use sluice::session::{FileKind, SessionError};

/// Paths that must be refused: `..`, absolute, and a symlink that leads out of the root.
fn escapes(server: &TestServer) -> Vec<String> {
    let outside = server.dir.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.txt"), b"secret").unwrap();
    symlink(&outside, server.root().join("link-out")).unwrap();
    vec![
        "../outside/secret.txt".into(),
        "sub/../../outside/secret.txt".into(),
        "..".into(),
        outside.join("secret.txt").display().to_string(),
        "/etc/hostname".into(),
        "link-out/secret.txt".into(),
        "link-out".into(),
    ]
}

#[tokio::test]
async fn stat_get_and_put_refuse_paths_outside_the_root() {
    let server = TestServer::start().await;
    fs::create_dir_all(server.root().join("sub")).unwrap();
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let upload = local.path().join("upload.bin");
    fs::write(&upload, b"payload").unwrap();

    for path in escapes(&server) {
        let err = client.stat(&path).await.expect_err(&path);
        assert!(matches!(err, SessionError::Refused(_)), "stat {path}: {err:?}");
        let message = err.to_string();
        assert!(
            message.starts_with("refused: ") && !message.contains("refused: refused"),
            "{message}"
        );

        let target = local.path().join("got");
        let err = client.get(&path, &target, |_| {}).await.expect_err(&path);
        assert!(matches!(err, SessionError::Refused(_)), "get {path}: {err:?}");
        assert!(!target.exists());

        let err = client.put(&upload, &path, |_| {}).await.expect_err(&path);
        assert!(matches!(err, SessionError::Refused(_)), "put {path}: {err:?}");
    }
    // Nothing was written outside the root, and nothing left in the local directory.
    assert_eq!(common::listing(&server.dir.path().join("outside")), vec!["secret.txt"]);
    assert_eq!(common::listing(local.path()), vec!["upload.bin"]);
    client.close().await;
    server.stop().await;
}

#[tokio::test]
async fn stat_reports_kind_size_and_missing_paths() {
    let server = TestServer::start().await;
    fs::create_dir_all(server.root().join("dir")).unwrap();
    fs::write(server.root().join("dir/five.txt"), b"12345").unwrap();
    // A symlink that stays inside the root is followed.
    symlink("dir/five.txt", server.root().join("alias")).unwrap();
    let client = server.client().await;

    let info = client.stat("dir/five.txt").await.unwrap();
    assert_eq!((info.size, info.kind), (5, FileKind::File));
    assert!(info.mtime > 1_600_000_000, "{info:?}");
    assert_eq!(client.stat("alias").await.unwrap().size, 5);
    assert_eq!(client.stat("dir").await.unwrap().kind, FileKind::Directory);
    assert_eq!(client.stat(".").await.unwrap().kind, FileKind::Directory);
    let err = client.stat("dir/absent").await.unwrap_err();
    assert!(matches!(err, SessionError::NotFound(_)), "{err:?}");
    let err = client.stat("no-dir/absent").await.unwrap_err();
    assert!(matches!(err, SessionError::NotFound(_)), "{err:?}");

    // A directory is not downloadable; a missing file is not found.
    let local = tempfile::tempdir().unwrap();
    let err = client.get("dir", &local.path().join("x"), |_| {}).await.unwrap_err();
    assert!(matches!(err, SessionError::Refused(_)), "{err:?}");
    let err = client.get("dir/absent", &local.path().join("x"), |_| {}).await.unwrap_err();
    assert!(matches!(err, SessionError::NotFound(_)), "{err:?}");
    assert!(common::listing(local.path()).is_empty());
    client.close().await;
    server.stop().await;
}
