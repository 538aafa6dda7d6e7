//! `sluice serve --metrics ADDR`: the server's counters over plain HTTP, for Prometheus.
//!
//! Answers `GET /metrics` (and `GET /`) with the text format; anything else gets 404 or 405.
//! Requests are small and bounded: at most 8 KiB of head, 5 s to send it, 16 at a time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice::session::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAX_HEAD_BYTES: usize = 8 << 10;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CLIENTS: usize = 16;

/// Binds `addr`; the returned future serves until dropped.
pub(crate) async fn bind(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> anyhow::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for metrics on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    let clients = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    let serve = async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let Ok(permit) = clients.clone().try_acquire_owned() else { continue };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(HEAD_TIMEOUT, answer(stream, &metrics)).await;
                drop(permit);
            });
        }
    };
    Ok((local, serve))
}

async fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_HEAD_BYTES {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let (status, body) = match (method, path) {
        (b"GET", b"/metrics" | b"/") => ("200 OK", metrics.render()),
        (b"GET", _) => ("404 Not Found", "not found: try /metrics\n".to_owned()),
        _ => ("405 Method Not Allowed", "only GET\n".to_owned()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}
