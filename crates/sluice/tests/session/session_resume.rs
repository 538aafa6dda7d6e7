//! An interrupted upload continues where it stopped: the server keeps the partial file and its
//! record, and the next upload of the same file moves only what is missing. The data is a fixed
//! pattern (seed 31), so every run is the same.

use crate::common;

use std::fs;
use std::time::{Duration, Instant};

use common::{TestServer, pattern};
use sluice::session::{Client, CopyOptions, TransportChoice};

/// The prefix the server's resume record of `name` claims (0 while there is none).
fn recorded(server: &TestServer, name: &str) -> u64 {
    let record = server.root().join(format!(".{name}.sluice-resume"));
    let Ok(text) = fs::read_to_string(record) else { return 0 };
    let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    value["prefix"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_resumes_from_the_servers_partial_file() {
    interrupted_upload_resumes(TransportChoice::Udp).await;
}

/// The same over TCP: the session tunnelled, the data on TCP streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_over_tcp_resumes_from_the_servers_partial_file() {
    interrupted_upload_resumes(TransportChoice::Tcp).await;
}

#[allow(clippy::print_stdout)] // the seed and the result, as the tests print them
async fn interrupted_upload_resumes(transport: TransportChoice) {
    println!("seed 31, {transport:?}");
    let server = TestServer::start().await;
    let mut config = server.client_config();
    config.transport = transport;
    // 50 Mbit/s: 48 MiB take 8 s, time enough to stop the upload a third of the way even on a
    // loaded machine. At 200 Mbit/s, with both cores busy, 4 of 5 runs over TCP finished the
    // upload before its record claimed 16 MiB, and the test failed on "record says 0".
    config.channel.rate_bps = 50_000_000;
    let client = Client::connect(config).await.unwrap();
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("up.bin");
    let data = pattern(48 << 20, 31);
    fs::write(&src, &data).unwrap();

    let upload = {
        let (client, src) = (client.clone(), src.clone());
        tokio::spawn(
            async move { client.upload(&[src], "", &CopyOptions::default(), |_| {}).await },
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while recorded(&server, "up.bin") < 16 << 20 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!upload.is_finished(), "the upload ended before its record claimed 16 MiB");
    upload.abort();
    let _ = upload.await;
    // The server gives the request up and keeps the partial file with its record.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !common::only_resumable_leftovers(&server.root()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Read once it holds still: until the server gives the request up, the bytes still in
    // flight land and the record grows (read right after the abort, it said 20,709,376 in a
    // full local CI run, and the resume then took the 20 MiB the server recorded last).
    let mut kept_before = recorded(&server, "up.bin");
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = recorded(&server, "up.bin");
        if now == kept_before || Instant::now() >= deadline {
            break;
        }
        kept_before = now;
    }
    assert!(kept_before >= 16 << 20, "record says {kept_before}");
    let left = common::listing(&server.root());
    assert!(left.iter().any(|n| n.contains(".sluice-part-")), "{left:?}");
    assert!(!server.root().join("up.bin").exists());

    let mut config = server.client_config();
    config.transport = transport;
    let client = Client::connect(config).await.unwrap();
    let report = client.upload(&[src], "", &CopyOptions::default(), |_| {}).await.unwrap();
    println!("resumed {} of {} bytes (record said {kept_before})", report.resumed, data.len());
    assert!(report.resumed >= 16 << 20 && report.resumed <= kept_before, "{report:?}");
    assert_eq!(report.resumed % (4 << 20), 0);
    assert_eq!(fs::read(server.root().join("up.bin")).unwrap(), data);
    assert_eq!(common::listing(&server.root()), vec!["up.bin".to_owned()]);
    server.stop().await;
}
