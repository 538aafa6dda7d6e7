//! A partial file belongs to the transfer writing it (issue 26, item 5): while one transfer
//! writes a path, a second transfer to that path is refused as busy and takes nothing of the
//! first's; the first lands whole. Both directions, a file below and one above the size that
//! keeps a resume record. The first transfer is slowed by a rate limit, and the second starts
//! once the first's partial file is on disk (and, for the large file, recorded), so the two
//! overlap on every run. The data are fixed patterns (seeds 51 and 52).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use common::{TestServer, pattern};
use sluice::session::{Client, CopyOptions, SessionError, TransferReport};

/// Waits until `dir` holds a partial file of `name` and, when `recorded` is set, a resume
/// record that claims at least that many bytes.
async fn until_partial(dir: &Path, name: &str, recorded: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names = common::listing(dir);
        let partial = names.iter().any(|n| n.starts_with(&format!(".{name}.sluice-part-")));
        let record = fs::read_to_string(dir.join(format!(".{name}.sluice-resume")))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["prefix"].as_u64())
            .unwrap_or(0);
        if partial && record >= recorded {
            return;
        }
        assert!(Instant::now() < deadline, "no partial file of {name} in {names:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two different files named `x.bin` of `size` bytes, with the same modification time (so a
/// resume record of one also describes the other), under `dir/a` and `dir/b`.
fn two_sources(dir: &Path, size: usize) -> [(PathBuf, Vec<u8>); 2] {
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    [("a", 51u8), ("b", 52)].map(|(sub, seed)| {
        fs::create_dir_all(dir.join(sub)).unwrap();
        let path = dir.join(sub).join("x.bin");
        let data = pattern(size, seed);
        fs::write(&path, &data).unwrap();
        fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
        (path, data)
    })
}

/// A client of `server` whose data channels send at most `rate_bps`.
async fn slow_client(server: &TestServer, rate_bps: u64) -> Client {
    let mut config = server.client_config();
    config.channel.rate_bps = rate_bps;
    Client::connect(config).await.unwrap()
}

/// The second transfer's outcome: busy, naming the path.
fn assert_busy(second: Result<TransferReport, SessionError>) {
    match second {
        Err(SessionError::Busy(message)) => {
            assert!(message.contains("x.bin"), "{message}");
            assert!(message.contains("another transfer"), "{message}");
        }
        other => panic!("a second transfer to a path being written must be busy, got {other:?}"),
    }
}

/// (size, rate of the first transfer, record to wait for): 3 MiB take 3 s at 8 Mbit/s; 16 MiB
/// take 4 s at 32 Mbit/s, and the second starts once 4 MiB are recorded.
const CASES: [(usize, u64, u64); 2] = [(3 << 20, 8_000_000, 0), (16 << 20, 32_000_000, 4 << 20)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_upload_to_a_path_being_written_is_busy_and_the_first_lands_whole() {
    for (size, rate, recorded) in CASES {
        println!("upload: size {size}, seeds 51 (first) and 52 (second)");
        let server = TestServer::start().await;
        let local = tempfile::tempdir().unwrap();
        let [(first_src, first_data), (second_src, _)] = two_sources(local.path(), size);
        let slow = slow_client(&server, rate).await;
        let first = tokio::spawn(async move {
            slow.upload(&[first_src], "x.bin", &CopyOptions::default(), |_| {}).await
        });
        until_partial(&server.root(), "x.bin", recorded).await;

        let fast = server.client().await;
        let second = fast.upload(&[second_src], "x.bin", &CopyOptions::default(), |_| {}).await;
        assert!(!first.is_finished(), "the first upload ended before the second was refused");
        assert_busy(second);

        let report = first.await.unwrap().expect("the first upload completes");
        assert_eq!(report.resumed, 0);
        assert!(fs::read(server.root().join("x.bin")).unwrap() == first_data);
        assert_eq!(common::listing(&server.root()), vec!["x.bin".to_owned()]);
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_download_to_a_path_being_written_is_busy_and_the_first_lands_whole() {
    for (size, rate, recorded) in CASES {
        println!("download: size {size}, seeds 51 (first) and 52 (second)");
        let server = TestServer::start().await;
        let [(_, first_data), _] = two_sources(&server.root(), size);
        let local = tempfile::tempdir().unwrap();
        let dest = local.path().join("x.bin");
        let slow = slow_client(&server, rate).await;
        let first = {
            let dest = dest.clone();
            tokio::spawn(async move {
                let paths = ["a/x.bin".to_owned()];
                slow.download(&paths, &dest, &CopyOptions::default(), |_| {}).await
            })
        };
        until_partial(local.path(), "x.bin", recorded).await;

        let fast = server.client().await;
        let paths = ["b/x.bin".to_owned()];
        let second = fast.download(&paths, &dest, &CopyOptions::default(), |_| {}).await;
        assert!(!first.is_finished(), "the first download ended before the second was refused");
        assert_busy(second);

        let report = first.await.unwrap().expect("the first download completes");
        assert_eq!(report.resumed, 0);
        assert!(fs::read(&dest).unwrap() == first_data);
        assert_eq!(common::listing(local.path()), vec!["x.bin".to_owned()]);
        server.stop().await;
    }
}
