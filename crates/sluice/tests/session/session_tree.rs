//! Whole trees through a real session on loopback: both directions, awkward names, links,
//! empty files and directories, overwrite policies, dry runs, metadata. The contents are a
//! fixed pattern (seed = the file's number), so every run is the same.

use crate::common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{TestServer, pattern};
use sluice::session::{Client, CopyOptions, Links, Overwrite, SessionError, TransferReport};

/// Builds the test tree under `parent/name`; returns its path.
fn make_tree(parent: &Path, name: &str, small: usize) -> PathBuf {
    let top = parent.join(name);
    let awkward = ["sp ace", "new\nline", "-leading-dash", "ünïcödé ✓", "tab\there"];
    fs::create_dir_all(top.join("empty-dir")).unwrap();
    fs::create_dir_all(top.join("a/b/c")).unwrap();
    for (i, name) in awkward.iter().enumerate() {
        fs::write(top.join("a").join(name), pattern(100 + i, i as u8)).unwrap();
    }
    fs::write(top.join("a/b/c/empty"), b"").unwrap();
    fs::write(top.join("a/b/one"), b"1").unwrap();
    fs::write(top.join("big.bin"), pattern((1 << 20) + 17, 42)).unwrap();
    fs::create_dir_all(top.join("small")).unwrap();
    for i in 0..small {
        fs::write(top.join(format!("small/s{i:04}")), pattern(4096, i as u8)).unwrap();
    }
    std::os::unix::fs::symlink("b/one", top.join("a/link-to-one")).unwrap();
    fs::set_permissions(top.join("a/b/one"), fs::Permissions::from_mode(0o750)).unwrap();
    top
}

/// Every path under `top` (sorted) with what it is: the bytes' BLAKE3, a link's target, or
/// `dir`.
fn describe(top: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![top.to_owned()];
    while let Some(dir) = stack.pop() {
        for child in fs::read_dir(&dir).unwrap() {
            let path = child.unwrap().path();
            let rel = path.strip_prefix(top).unwrap().to_string_lossy().into_owned();
            let meta = path.symlink_metadata().unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link {}", fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_owned()
            } else {
                blake3::hash(&fs::read(&path).unwrap()).to_hex().to_string()
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

/// Uploads `tree` into the server's root.
async fn up(
    client: &Client,
    tree: &Path,
    options: CopyOptions,
) -> Result<TransferReport, SessionError> {
    client.upload(&[tree.to_owned()], "", &options, |_| {}).await
}

fn recursive() -> CopyOptions {
    CopyOptions { recursive: true, ..CopyOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_goes_up_and_comes_back_byte_exact_with_names_links_and_empties() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let tree = make_tree(local.path(), "tree", 300);
    let want = describe(&tree);

    let up = up(&client, &tree, recursive()).await.unwrap();
    // 5 awkward + empty + one + big + 300 small; the link and directories are not files.
    assert_eq!(up.files, 308);
    assert_eq!(describe(&server.root().join("tree")), want);

    let back = tempfile::tempdir().unwrap();
    let down = client.download(&["tree".into()], back.path(), &recursive(), |_| {}).await.unwrap();
    assert_eq!(down.files, 308);
    assert_eq!(down.bytes, up.bytes);
    assert_eq!(describe(&back.path().join("tree")), want);
    // Without -p: 0755 for a file with an execute bit, else 0644.
    let mode = |p: &Path| p.metadata().unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&back.path().join("tree/a/b/one")), 0o755);
    assert_eq!(mode(&back.path().join("tree/big.bin")), 0o644);
    // Only final names: no temporary file anywhere.
    let leftovers = describe(back.path()).into_iter().filter(|(p, _)| p.contains("sluice-part"));
    assert_eq!(leftovers.count(), 0);

    // Onto a new name (scp's rule): `dest` takes the top directory's place.
    let renamed = back.path().join("copy");
    client.download(&["tree".into()], &renamed, &recursive(), |_| {}).await.unwrap();
    assert_eq!(describe(&renamed), want);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_sources_go_into_one_directory_and_a_directory_needs_recursive() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let (a, b) = (local.path().join("a.txt"), local.path().join("b.txt"));
    fs::write(&a, b"alpha").unwrap();
    fs::write(&b, b"beta").unwrap();
    fs::create_dir(server.root().join("into")).unwrap();
    let options = CopyOptions::default();
    let report = client.upload(&[a.clone(), b.clone()], "into", &options, |_| {}).await.unwrap();
    assert_eq!(report.files, 2);
    assert_eq!(fs::read(server.root().join("into/a.txt")).unwrap(), b"alpha");
    assert_eq!(fs::read(server.root().join("into/b.txt")).unwrap(), b"beta");

    // Two sources onto a path that is not a directory: refused, nothing written.
    let err = client.upload(&[a, b], "nodir", &options, |_| {}).await.unwrap_err();
    assert!(matches!(&err, SessionError::Refused(m) if m.contains("not a directory")), "{err}");
    assert!(!server.root().join("nodir").exists());

    // A directory without -r.
    let err = client.download(&["into".into()], local.path(), &options, |_| {}).await;
    let err = err.unwrap_err();
    assert!(matches!(&err, SessionError::Refused(m) if m.contains("-r")), "{err}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_policies_decide_which_existing_files_move() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let tree = make_tree(local.path(), "t", 3);
    up(&client, &tree, recursive()).await.unwrap();
    let files = 8; // 5 awkward + empty + one + big (+ 3 small)
    let all = files + 3;

    // The default refuses, naming what exists, and changes nothing.
    let err = up(&client, &tree, recursive()).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::Refused(m) if m.contains("already exist") && m.contains("--overwrite")),
        "{err}"
    );

    let with = |overwrite, checksum| CopyOptions {
        recursive: true,
        overwrite,
        checksum,
        ..CopyOptions::default()
    };
    let never = up(&client, &tree, with(Overwrite::Never, false)).await.unwrap();
    // The link is kept too.
    assert_eq!((never.files, never.kept, never.bytes), (0, all + 1, 0));

    // Change one file's bytes at the source, keeping size and time: only a checksum sees it.
    let changed = tree.join("small/s0001");
    let mtime = fs::metadata(&changed).unwrap().modified().unwrap();
    fs::write(&changed, pattern(4096, 200)).unwrap();
    fs::File::options().write(true).open(&changed).unwrap().set_modified(mtime).unwrap();
    let server_mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let stored = server.root().join("t/small/s0001");
    // The server's copies carry the upload's time; make them match the source's for the
    // size-and-time rule.
    for (rel, _) in describe(&tree) {
        let (src, dst) = (tree.join(&rel), server.root().join("t").join(&rel));
        if src.symlink_metadata().unwrap().is_file() {
            let t = src.metadata().unwrap().modified().unwrap();
            fs::File::options().write(true).open(&dst).unwrap().set_modified(t).unwrap();
        }
    }
    let same = up(&client, &tree, with(Overwrite::IfDifferent, false)).await.unwrap();
    // Files all match by size and time, the link by its target.
    assert_eq!((same.files, same.kept), (0, all + 1), "{same:?}");
    let by_hash = up(&client, &tree, with(Overwrite::IfDifferent, true)).await.unwrap();
    assert_eq!(by_hash.files, 1);
    assert_eq!(fs::read(&stored).unwrap(), pattern(4096, 200));

    // if-newer: an older server copy is replaced, a newer one kept.
    fs::File::options().write(true).open(&stored).unwrap().set_modified(server_mtime).unwrap();
    let newer = up(&client, &tree, with(Overwrite::IfNewer, false)).await.unwrap();
    assert_eq!(newer.files, 1);

    let always = up(&client, &tree, with(Overwrite::Always, false)).await.unwrap();
    assert_eq!((always.files, always.replaced), (all, all + 1));
    assert_eq!(describe(&server.root().join("t")), describe(&tree));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_reports_and_creates_nothing() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let tree = make_tree(local.path(), "dry", 2);
    let options = CopyOptions { dry_run: true, ..recursive() };
    let report = up(&client, &tree, options.clone()).await.unwrap();
    assert_eq!(report.files, 10);
    assert!(report.planned.iter().any(|p| p == "dry/big.bin"), "{:?}", report.planned);
    assert!(common::listing(&server.root()).is_empty());

    client.upload(&[tree], "", &recursive(), |_| {}).await.unwrap();
    let back = tempfile::tempdir().unwrap();
    let report = client.download(&["dry".into()], back.path(), &options, |_| {}).await.unwrap();
    assert_eq!(report.files, 10);
    assert_eq!(report.bytes, (1 << 20) + 17 + 2 * 4096 + 1 + (100..105).sum::<usize>() as u64);
    assert!(common::listing(back.path()).is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_follow_the_policy_and_never_lead_out_of_the_root() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let top = local.path().join("l");
    fs::create_dir(&top).unwrap();
    fs::write(top.join("real"), b"real bytes").unwrap();
    std::os::unix::fs::symlink("real", top.join("inside")).unwrap();

    let skip = CopyOptions { links: Links::Skip, ..recursive() };
    let report = up(&client, &top, skip).await.unwrap();
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert!(server.root().join("l/inside").symlink_metadata().is_err());

    let follow = CopyOptions { links: Links::Follow, overwrite: Overwrite::Always, ..recursive() };
    up(&client, &top, follow.clone()).await.unwrap();
    let inside = server.root().join("l/inside");
    assert!(inside.symlink_metadata().unwrap().is_file());
    assert_eq!(fs::read(&inside).unwrap(), b"real bytes");

    // A link whose target leaves the server's root is refused; nothing of the tree is stored.
    let evil = local.path().join("evil");
    fs::create_dir(&evil).unwrap();
    fs::write(evil.join("harmless"), b"x").unwrap();
    std::os::unix::fs::symlink("../../../../../../etc", evil.join("out")).unwrap();
    let err = client.upload(&[evil], "", &recursive(), |_| {}).await.unwrap_err();
    assert!(matches!(&err, SessionError::Refused(m) if m.contains("leaves")), "{err}");
    assert!(!server.root().join("evil/harmless").exists());

    // Following on the server stays inside its root: a link out is left out.
    std::os::unix::fs::symlink("/etc", server.root().join("l/etc-link")).unwrap();
    let back = tempfile::tempdir().unwrap();
    let report = client.download(&["l".into()], back.path(), &follow, |_| {}).await.unwrap();
    assert_eq!(report.files, 2);
    assert!(!back.path().join("l/etc-link").exists());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preserve_keeps_modes_and_times_without_setuid() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let top = local.path().join("p");
    fs::create_dir(&top).unwrap();
    let file = top.join("f");
    fs::write(&file, b"data").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o4741)).unwrap();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_234_567_890);
    fs::File::options().write(true).open(&file).unwrap().set_modified(when).unwrap();
    fs::set_permissions(&top, fs::Permissions::from_mode(0o710)).unwrap();
    // The directory's own time, after its file was written (a claim's lock file removed in
    // it after the times were set once undid this).
    let dir_when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_300_000_000);
    fs::File::open(&top).unwrap().set_modified(dir_when).unwrap();

    let options = CopyOptions { preserve: true, ..recursive() };
    client.upload(&[top], "", &options, |_| {}).await.unwrap();
    let stored = server.root().join("p/f").metadata().unwrap();
    assert_eq!(stored.permissions().mode() & 0o7777, 0o741);
    assert_eq!(stored.mtime(), 1_234_567_890);
    let dir = server.root().join("p").metadata().unwrap();
    assert_eq!(dir.permissions().mode() & 0o777, 0o710);
    assert_eq!(dir.mtime(), 1_300_000_000, "the directory's time is kept");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_small_files_and_large_ones_in_one_request() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let local = tempfile::tempdir().unwrap();
    let tree = make_tree(local.path(), "many", 10_000);
    fs::write(tree.join("large-2"), pattern(3 << 20, 77)).unwrap();
    let want = describe(&tree);
    let report = up(&client, &tree, recursive()).await.unwrap();
    assert_eq!(report.files, 10_009);
    assert_eq!(describe(&server.root().join("many")), want);
    let back = tempfile::tempdir().unwrap();
    let down = client.download(&["many".into()], back.path(), &recursive(), |_| {}).await;
    assert_eq!(down.unwrap().files, 10_009);
    assert_eq!(describe(&back.path().join("many")), want);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_corrupted_at_the_sender_after_hashing_is_caught_and_not_stored() {
    let server = TestServer::start().await;
    let mut config = server.client_config();
    // 40 Mbit/s: 24 MiB take about 5 s, time enough to change the file while it moves.
    config.channel.rate_bps = 40_000_000;
    let client = Client::connect(config).await.unwrap();
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("victim.bin");
    let size = 24 << 20;
    fs::write(&src, pattern(size, 5)).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let upload = {
        let (client, src) = (client.clone(), src.clone());
        tokio::spawn(async move {
            let options = CopyOptions::default();
            client
                .upload(&[src], "", &options, move |p| {
                    let _ = tx.send(p.bytes);
                })
                .await
        })
    };
    // Once 2 MiB are acknowledged the sender's hash (of the original bytes) is long done: the
    // last MiB changes on disk before it is read for sending.
    while rx.recv().await.is_some_and(|bytes| bytes < 2 << 20) {}
    tokio::time::sleep(Duration::from_millis(300)).await;
    let f = fs::File::options().write(true).open(&src).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xA5; 1 << 20], (size - (1 << 20)) as u64)
        .unwrap();
    let err = upload.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, SessionError::Integrity(m) if m.contains("victim.bin") && m.contains("not stored")),
        "{err}"
    );
    assert!(common::listing(&server.root()).is_empty(), "{:?}", common::listing(&server.root()));
    server.stop().await;
}
