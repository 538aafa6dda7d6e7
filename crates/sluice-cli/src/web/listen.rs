//! Accepting connections and serving a [`Router`] on each with hyper's HTTP/1.1, within bounds.
//!
//! Written out rather than `axum::serve` because that sets no bound on a connection: with it a
//! client that sends its request head one byte a minute, or never, holds a connection open for
//! ever, and any number of them may. Here each connection has [`Limits`].
//!
//! With [`Listener::with_tls`] each connection first completes a TLS handshake (within the head
//! timeout) and is then served the same way; every request carries the client's address as
//! axum's `ConnectInfo<SocketAddr>` (the login rate limit counts by it).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// Bounds on what one client may cost the server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Time to send a request's head, counted from the connection's start or from the end of
    /// the previous response (so it also ends an idle kept-alive connection).
    pub(crate) head_timeout: Duration,
    /// Size of a request's head (request line and headers); past it the answer is 431.
    pub(crate) head_bytes_max: usize,
    /// Connections served at once; more wait in the kernel's accept queue.
    pub(crate) connections_max: usize,
    /// How long running requests may take to finish once the server stops.
    pub(crate) drain_timeout: Duration,
}

impl Limits {
    /// For `/metrics`: small requests, few scrapers.
    pub(crate) const METRICS: Limits = Limits {
        head_timeout: Duration::from_secs(5),
        head_bytes_max: 8 << 10,
        connections_max: 16,
        drain_timeout: Duration::from_secs(1),
    };

    /// For the web app: a page loads a few assets, then uploads and downloads run for long.
    pub(crate) const WEB: Limits = Limits {
        head_timeout: Duration::from_secs(10),
        head_bytes_max: 16 << 10,
        connections_max: 64,
        drain_timeout: Duration::from_secs(2),
    };
}

/// A bound TCP listener, not yet serving.
#[derive(Debug)]
pub(crate) struct Listener {
    tcp: TcpListener,
    local_addr: SocketAddr,
    limits: Limits,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

impl Listener {
    /// Binds `addr`; `what` names the listener in the error (`metrics`).
    pub(crate) async fn bind(addr: SocketAddr, what: &str, limits: Limits) -> anyhow::Result<Self> {
        let tcp = TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen for {what} on {addr}: {e}"))?;
        let local_addr = tcp.local_addr()?;
        Ok(Listener { tcp, local_addr, limits, tls: None })
    }

    /// Serves HTTPS: each connection is a TLS session of `tls` first.
    pub(crate) fn with_tls(self, tls: Arc<tokio_rustls::rustls::ServerConfig>) -> Self {
        Listener { tls: Some(tls), ..self }
    }

    /// The address bound (with the port the system chose, for port 0).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves `router` until `stop` completes, then lets running requests finish for at most
    /// [`Limits::drain_timeout`] and closes every connection.
    pub(crate) async fn serve(self, router: Router, stop: impl Future<Output = ()>) {
        let Listener { tcp, limits, tls, .. } = self;
        let tls = tls.map(TlsAcceptor::from);
        let mut http = http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.head_timeout)
            .max_header_size(limits.head_bytes_max);
        let permits = Arc::new(Semaphore::new(limits.connections_max));
        let (stopping, stopped) = watch::channel(false);
        let mut connections = JoinSet::new();
        let mut stop = std::pin::pin!(stop);
        loop {
            // Reap finished connections so the set stays as small as the permits allow.
            while connections.try_join_next().is_some() {}
            let accepted = tokio::select! {
                () = &mut stop => break,
                accepted = accept(&tcp, &permits) => accepted,
            };
            let Some((stream, peer, permit)) = accepted else { continue };
            let (http, router, stopped) = (http.clone(), router.clone(), stopped.clone());
            let tls = tls.clone();
            connections.spawn(async move {
                match tls {
                    None => connection(&http, stream, peer, router, stopped).await,
                    Some(tls) => {
                        let handshake =
                            tokio::time::timeout(limits.head_timeout, tls.accept(stream));
                        match handshake.await {
                            Ok(Ok(stream)) => {
                                connection(&http, stream, peer, router, stopped).await
                            }
                            Ok(Err(e)) => tracing::debug!("tls handshake from {peer}: {e}"),
                            Err(_) => tracing::debug!("tls handshake from {peer}: too slow"),
                        }
                    }
                }
                drop(permit);
            });
        }
        let _ = stopping.send(true);
        let drained = async { while connections.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(limits.drain_timeout, drained).await;
        // Dropping the set aborts whatever did not finish in time.
    }
}

/// The next connection, once one may be served; `None` after a failed accept (a client gone
/// before it was taken, or no file descriptors left: then after a pause, not in a busy loop).
async fn accept(
    tcp: &TcpListener,
    permits: &Arc<Semaphore>,
) -> Option<(TcpStream, SocketAddr, tokio::sync::OwnedSemaphorePermit)> {
    let permit = permits.clone().acquire_owned().await.ok()?;
    match tcp.accept().await {
        Ok((stream, peer)) => Some((stream, peer, permit)),
        Err(e) => {
            tracing::debug!("http accept failed: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// Serves one connection until the client closes it, a limit ends it, or the server stops (then
/// a request being answered is finished first).
async fn connection(
    http: &http1::Builder,
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    peer: SocketAddr,
    router: Router,
    mut stopped: watch::Receiver<bool>,
) {
    let router = router.layer(axum::Extension(ConnectInfo(peer)));
    let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    let mut conn = std::pin::pin!(conn);
    let stop = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = stop => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    // A malformed request, a head too large or too slow: hyper has answered or closed it.
    if let Err(e) = result {
        tracing::debug!("http connection: {e}");
    }
}
