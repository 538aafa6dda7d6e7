//! The builder and the transfer handle: typed progress events, then the final result.

use crate::common;

use std::fs;

use common::{TestServer, pattern};
use sluice::session::{ClientBuilder, TransferEvent, TrustPolicy};
use sluice_proto::cc::CcKind;

#[tokio::test]
async fn a_built_client_streams_progress_events_then_the_result_both_ways() {
    let server = TestServer::start().await;
    let base = server.client_config();
    let client = ClientBuilder::new(base.server, base.host.clone(), base.token.clone())
        .known_hosts(server.known_hosts())
        .trust(TrustPolicy::AcceptNew)
        .congestion_control(CcKind::Adaptive)
        .connect()
        .await
        .unwrap();
    let size = 8 << 20;
    let data = pattern(size, 9);
    fs::write(server.root().join("h.bin"), &data).unwrap();
    let local = tempfile::tempdir().unwrap();
    let target = local.path().join("h.bin");

    let mut transfer = client.start_get("h.bin", &target);
    let mut last = 0;
    let mut events = 0;
    while let Some(TransferEvent::Progress { bytes, total }) = transfer.next_event().await {
        assert_eq!(total, size as u64);
        assert!(bytes >= last, "progress never goes back");
        last = bytes;
        events += 1;
    }
    let report = transfer.finish().await.unwrap();
    assert!(events >= 1 && last == size as u64, "{events} events, last {last}");
    assert_eq!(report.bytes, size as u64);
    assert_eq!(fs::read(&target).unwrap(), data);

    let mut upload = client.start_put(&target, "h-up.bin");
    while upload.next_event().await.is_some() {}
    assert_eq!(upload.finish().await.unwrap().bytes, size as u64);
    assert_eq!(fs::read(server.root().join("h-up.bin")).unwrap(), data);
    client.close().await;
    server.stop().await;
}

#[test]
fn the_builder_refuses_an_invalid_channel() {
    let built =
        ClientBuilder::new("127.0.0.1:1".parse().unwrap(), "h", "t").packet_size(10).build();
    assert!(built.is_err());
    let fixed_without_rate = ClientBuilder::new("127.0.0.1:1".parse().unwrap(), "h", "t")
        .congestion_control(CcKind::Fixed)
        .build();
    assert!(fixed_without_rate.is_err());
}
