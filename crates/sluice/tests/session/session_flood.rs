//! Misbehaving peers on loopback, bounded in count and time: connections that never
//! authenticate are limited per address and closed after the handshake deadline, junk
//! datagrams get at most three times their bytes back, and other clients are served meanwhile.

#![allow(clippy::print_stdout)] // tests print their seeds and counts

use crate::common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{TestServer, pattern};
use sluice::session::CopyOptions;
use sluice::session::server::MAX_UNAUTHENTICATED_PER_IP;
use sluice_proto::rng::Rng;

#[tokio::test]
async fn silent_connections_are_bounded_per_address_time_out_and_starve_nobody() {
    let server = TestServer::start().await;
    std::fs::write(server.root().join("f.bin"), pattern(4 << 20, 9)).unwrap();

    // From each of three addresses, 20 QUIC connections that never send Hello: the server
    // holds a few per address and refuses the rest (the first after it waited, up to
    // PLACE_WAIT, for a place to come back; the others at once, as the held ones stalled).
    // Past 16 unauthenticated in all, or past its address's places, a newcomer must first
    // answer a Retry (which quinn's client does by itself).
    let floods: Vec<quinn::Endpoint> = ["127.0.0.2:0", "127.0.0.3:0", "127.0.0.4:0"]
        .iter()
        .map(|bind| common::raw_endpoint(&server, bind.parse().unwrap()))
        .collect();
    let mut held = Vec::new();
    for flood in &floods {
        let (mut from_here, mut refused) = (Vec::new(), 0);
        for _ in 0..20 {
            let connecting = flood.connect(server.addr, "sluice").unwrap();
            match tokio::time::timeout(Duration::from_secs(5), connecting).await {
                Ok(Ok(conn)) => from_here.push(conn),
                Ok(Err(_)) => refused += 1,
                Err(_) => panic!("a connection attempt got no answer"),
            }
        }
        // A refused connection may look established for a moment on the client's side; the
        // refusal closes it. What stays open is what the server holds.
        tokio::time::sleep(Duration::from_millis(300)).await;
        from_here.retain(|c| c.close_reason().is_none());
        println!("{:?}: held {}, refused at once {refused}", flood.local_addr(), from_here.len());
        assert_eq!(from_here.len(), MAX_UNAUTHENTICATED_PER_IP, "held from one address");
        held.extend(from_here);
    }

    // Meanwhile another client is served in full.
    let dest = tempfile::tempdir().unwrap();
    let client = server.client().await;
    let options = CopyOptions::default();
    client.download(&["f.bin".into()], dest.path(), &options, |_| {}).await.unwrap();
    assert_eq!(std::fs::read(dest.path().join("f.bin")).unwrap(), pattern(4 << 20, 9));
    client.close().await;

    // The silent ones are closed by the server after the handshake deadline (10 s).
    let started = Instant::now();
    for conn in &held {
        tokio::time::timeout(Duration::from_secs(15), conn.closed())
            .await
            .expect("the server closes a connection that never authenticates");
    }
    println!("closed after {:?}", started.elapsed());
    // Their places are free again.
    let again = floods[0].connect(server.addr, "sluice").unwrap();
    let conn = tokio::time::timeout(Duration::from_secs(5), again).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(conn.close_reason().is_none(), "refused after the flood ended");
    server.stop().await;
}

#[tokio::test]
async fn junk_gets_at_most_three_times_its_bytes_back_and_the_server_keeps_serving() {
    let server = TestServer::start().await;
    std::fs::write(server.root().join("a.txt"), b"still here").unwrap();
    let seed = 0x00F1_00D5;
    println!("seed {seed:#x}");
    let junk = tokio::task::spawn_blocking({
        let to = server.addr;
        move || {
            let socket = UdpSocket::bind("127.0.0.3:0").unwrap();
            socket.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            let mut rng = Rng::new(seed);
            let (mut sent, mut received) = (0usize, 0usize);
            let mut buf = vec![0u8; 65536];
            for i in 0..3000u32 {
                let len = [1, 7, 30, 200, 1200, 1250, 1400, 1472][i as usize % 8];
                let mut datagram: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                if i % 3 == 0 && len >= 5 {
                    // A long header: QUIC v1 (an Initial the server cannot decrypt) or an
                    // unknown version (which may draw a version negotiation).
                    datagram[0] = 0xC0 | (datagram[0] & 0x3F);
                    let version: u32 = if i % 2 == 0 { 1 } else { 0x0A0A_0A0A };
                    datagram[1..5].copy_from_slice(&version.to_be_bytes());
                }
                sent += socket.send_to(&datagram, to).unwrap();
                if i % 64 == 0 {
                    while let Ok(n) = socket.recv(&mut buf) {
                        received += n;
                    }
                }
            }
            let until = Instant::now() + Duration::from_secs(1);
            while Instant::now() < until {
                if let Ok(n) = socket.recv(&mut buf) {
                    received += n;
                }
            }
            (sent, received)
        }
    });
    // The server answers a real client while the junk arrives.
    let client = server.client().await;
    assert_eq!(client.stat("a.txt").await.unwrap().size, 10);
    let (sent, received) = junk.await.unwrap();
    println!("junk: sent {sent} bytes, received {received}");
    assert!(received <= 3 * sent, "amplified: {received} bytes back for {sent}");
    assert_eq!(client.stat("a.txt").await.unwrap().size, 10);
    client.close().await;
    server.stop().await;
}
