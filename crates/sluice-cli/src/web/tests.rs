//! The router and its listener over loopback, with real HTTP/1.1 requests from a plain socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::session::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Limits, Listener, WebState, router};

/// Long enough for any answer on a loaded machine; a test that waits this long has failed.
const PATIENCE: Duration = Duration::from_secs(10);

struct Running {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

async fn start(limits: Limits) -> Running {
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), "test", limits).await.unwrap();
    let addr = listener.local_addr();
    let metrics = Arc::new(Metrics::default());
    let app = router(WebState { metrics: metrics.clone(), webtransport: None });
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(listener.serve(app, async move {
        let _ = stopped.await;
    }));
    Running { addr, metrics, stop, task }
}

/// Sends `request` as it is and returns all the server sent until it closed the connection.
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut reply))
        .await
        .expect("the server closes the connection")
        .unwrap();
    String::from_utf8(reply).unwrap()
}

async fn get(addr: SocketAddr, method: &str, path: &str) -> String {
    exchange(
        addr,
        format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
}

fn status(reply: &str) -> &str {
    reply.lines().next().unwrap_or_default()
}

fn header<'a>(reply: &'a str, name: &str) -> Option<&'a str> {
    let head = reply.split("\r\n\r\n").next()?;
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn body(reply: &str) -> &str {
    reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[tokio::test]
async fn metrics_is_the_prometheus_text_with_every_series() {
    let web = start(Limits::METRICS).await;
    let reply = get(web.addr, "GET", "/metrics").await;
    assert_eq!(status(&reply), "HTTP/1.1 200 OK", "{reply}");
    assert_eq!(header(&reply, "content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    assert_eq!(body(&reply), web.metrics.render());
    for (name, kind) in [
        ("sluice_sessions_total", "counter"),
        ("sluice_sessions_active", "gauge"),
        ("sluice_sessions_refused_total", "counter"),
        ("sluice_transfers_total", "counter"),
        ("sluice_transfers_active", "gauge"),
        ("sluice_file_bytes_total", "counter"),
        ("sluice_data_packets_total", "counter"),
        ("sluice_retransmitted_packets_total", "counter"),
        ("sluice_blocks_repaired_total", "counter"),
        ("sluice_request_errors_total", "counter"),
    ] {
        let typed = format!("# TYPE {name} {kind}");
        assert!(body(&reply).lines().any(|l| l == typed), "no {typed:?} in\n{reply}");
    }
    assert!(body(&reply).lines().any(|l| l == "sluice_request_errors_total{class=\"busy\"} 0"));
    // HEAD answers the same head without the body.
    let head = get(web.addr, "HEAD", "/metrics").await;
    assert_eq!(status(&head), "HTTP/1.1 200 OK");
    assert_eq!(body(&head), "");
}

#[tokio::test]
async fn another_path_is_404_and_another_method_405() {
    let web = start(Limits::METRICS).await;
    for path in ["/", "/elsewhere", "/metrics/", "/metrics/x", "/METRICS", "//metrics"] {
        let reply = get(web.addr, "GET", path).await;
        assert_eq!(status(&reply), "HTTP/1.1 404 Not Found", "{path}: {reply}");
        assert_eq!(body(&reply), "not found: try /metrics\n");
    }
    for method in ["POST", "PUT", "DELETE"] {
        let reply = get(web.addr, method, "/metrics").await;
        assert_eq!(status(&reply), "HTTP/1.1 405 Method Not Allowed", "{method}: {reply}");
    }
}

#[tokio::test]
async fn malformed_requests_are_refused_and_the_server_goes_on() {
    let web = start(Limits::METRICS).await;
    let too_long =
        format!("GET /metrics HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n", "a".repeat(9000));
    for (request, expected) in [
        (&b"NONSENSE\r\n\r\n"[..], "400 Bad Request"),
        (b"GET /metrics HTTP/9.9\r\n\r\n", "400 Bad Request"),
        (b"GET /metrics HTTP/1.1\r\nHost t\r\n\r\n", "400 Bad Request"),
        (b"\x00\xff\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", "400 Bad Request"),
        (too_long.as_bytes(), "431 Request Header Fields Too Large"),
        // A request the client gives up on half way: closed without a word.
        (b"GET /metr", ""),
    ] {
        let mut s = TcpStream::connect(web.addr).await.unwrap();
        s.write_all(request).await.unwrap();
        s.shutdown().await.unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(PATIENCE, s.read_to_end(&mut reply)).await.unwrap().unwrap();
        let reply = String::from_utf8_lossy(&reply);
        if expected.is_empty() {
            assert_eq!(reply, "");
        } else {
            assert_eq!(status(&reply), format!("HTTP/1.1 {expected}"), "{reply}");
            assert_eq!(header(&reply, "connection"), Some("close"), "{reply}");
        }
    }
    let reply = get(web.addr, "GET", "/metrics").await;
    assert_eq!(status(&reply), "HTTP/1.1 200 OK", "{reply}");
}

#[tokio::test]
async fn a_request_head_too_slow_is_cut_off_and_frees_its_slot() {
    let limits =
        Limits { head_timeout: Duration::from_millis(300), connections_max: 1, ..Limits::METRICS };
    let web = start(limits).await;
    let started = Instant::now();
    // Takes the only slot and sends its head too slowly.
    let mut slow = TcpStream::connect(web.addr).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
    // Waits in the accept queue until the slow one is cut off.
    let reply = get(web.addr, "GET", "/metrics").await;
    assert_eq!(status(&reply), "HTTP/1.1 200 OK", "{reply}");
    assert!(started.elapsed() >= limits.head_timeout, "{:?}", started.elapsed());
    // Closed without a word.
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, slow.read_to_end(&mut rest)).await.unwrap().unwrap();
    assert_eq!(rest, b"");
}

#[tokio::test]
async fn stopping_ends_serving_with_idle_and_kept_alive_connections_open() {
    let web = start(Limits::METRICS).await;
    let _idle = TcpStream::connect(web.addr).await.unwrap();
    let mut kept = TcpStream::connect(web.addr).await.unwrap();
    kept.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let mut first = [0u8; 15];
    kept.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200 OK");
    let stopping = Instant::now();
    web.stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, web.task).await.expect("serving ends").unwrap();
    assert!(stopping.elapsed() < Duration::from_secs(3), "{:?}", stopping.elapsed());
    assert!(TcpStream::connect(web.addr).await.is_err(), "the port is closed");
}
