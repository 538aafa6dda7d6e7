//! Relays over TCP (issue 28 with the TCP fallback): a relay that only TCP reaches (a
//! forwarder on a port where UDP goes nowhere, as behind a firewall that drops UDP) takes its
//! deposits and hands them to the collector over TCP streams, and a sender whose session with
//! the receiver runs over TCP deposits there directly over TCP too. Contents are fixed
//! patterns, so every run is the same.

#![allow(clippy::print_stdout)] // tests print their seeds

use crate::common;
use crate::session_relay::{SEED, block_files, relay, relayed_options};

use std::fs;
use std::net::SocketAddr;
use std::time::Duration;

use common::{TestServer, pattern};
use sluice::session::{Client, ClientConfig, RelayTarget, Transport, TransportChoice, TrustPolicy};
use sluice_session::relay::Strategy;

/// A TCP forwarder to `target`'s TCP port on a port of its own, whose UDP side is a socket
/// that takes every datagram and answers none: what dials it reaches `target` over TCP only.
/// Returns its address and the UDP socket (held for as long as the forwarder is to be used).
async fn tcp_only(target: SocketAddr) -> (SocketAddr, tokio::net::UdpSocket) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let blackhole = tokio::net::UdpSocket::bind(at).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (at, blackhole)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_only_tcp_reaches_carries_blocks_both_ways_over_tcp() {
    println!("seed {SEED}");
    let receiver = TestServer::start().await;
    let spool = tempfile::tempdir().unwrap();
    let relay = relay(spool.path(), 64 << 20, None).await;
    let (at, _blackhole) = tcp_only(relay.addr).await;
    let config = ClientConfig::new(
        at,
        "127.0.0.1",
        common::TOKEN,
        relay.known_hosts(),
        TrustPolicy::Pinned(relay.fingerprint.clone()),
    );
    let to_relay = Client::connect(config).await.unwrap();
    assert_eq!(to_relay.transport(), Transport::Tcp, "auto: UDP got nowhere");
    // A client keeps its settings to take a relay up over TCP; its token never shows.
    assert!(!format!("{to_relay:?}").contains(common::TOKEN), "{to_relay:?}");
    let relays = vec![RelayTarget { name: "tcp-only".into(), client: to_relay }];
    let local = tempfile::tempdir().unwrap();
    let content = pattern((3 << 20) + 4321, SEED);
    let source = local.path().join("t.bin");
    fs::write(&source, &content).unwrap();

    // Everything through the relay: deposited over TCP, and collected over TCP by the
    // receiver, which reaches the relay at the address the sender gave it.
    let sender = receiver.client().await;
    let options = relayed_options(Strategy::Fcfs, false, true);
    let report = sender.upload_relayed(&source, "a.bin", &relays, &options).await.unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(receiver.root().join("a.bin")).unwrap(), content);
    assert_eq!(report.placed[0].blocks, report.blocks, "{:?}", report.placed);
    assert!(block_files(spool.path()).is_empty(), "collected blocks are deleted");

    // The sender's session with the receiver over TCP as well: its direct deposits go over
    // TCP streams, beside the relay's.
    let mut config = receiver.client_config();
    config.transport = TransportChoice::Tcp;
    let over_tcp = Client::connect(config).await.unwrap();
    let options = relayed_options(Strategy::Cyclic, true, true);
    let report = over_tcp.upload_relayed(&source, "b.bin", &relays, &options).await.unwrap();
    println!("{report:?}");
    assert_eq!(fs::read(receiver.root().join("b.bin")).unwrap(), content);
    assert!(report.placed.iter().all(|p| p.blocks >= 5), "{:?}", report.placed);
    for _ in 0..50 {
        if block_files(spool.path()).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(block_files(spool.path()).is_empty(), "collected blocks are deleted");
    receiver.stop().await;
    relay.stop().await;
}
