//! The web app's transfers over WebTransport (HTTP/3 over QUIC, the `wtransport` crate on
//! quinn): `serve --web ADDR` also listens on ADDR's port over UDP.
//!
//! How a page uses it: `POST /api/wt` (with its cookie and CSRF token) hands it a URL with a
//! one-time ticket of its login ([`super::auth::Logins::ticket`]) and the SHA-256 of the
//! certificate for `serverCertificateHashes` (self-signed ECDSA P-256 of at most 14 days,
//! replaced every [`cert::ROTATE_EVERY`]: see `cert.rs`). A session whose ticket is not good is
//! refused (403); one from a page of another origin too. Every request on the session then looks
//! the login up again and runs under its token's rights, root, transfer places and rate, through
//! the same functions as the HTTPS routes (`conn.rs` lists the requests).
//!
//! How `serve` drives it: [`WtListener::bind`] beside the web app's listener, hand
//! [`WtListener::shared`] to the app's state, then [`WtListener::serve`] until the server stops.

mod cc;
mod cert;
mod conn;
#[cfg(test)]
mod fetch_tests;
mod flow;
mod gather;
mod lanes;
mod pages;
mod push;
#[cfg(test)]
mod store_tests;
#[cfg(test)]
mod switch_tests;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_proto::cc::CcKind;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use wtransport::endpoint::endpoint_side::Server;
use wtransport::{Endpoint, ServerConfig};

use super::app::AppState;
pub(crate) use cert::WtCert;

/// Bytes of one block: what a page asks for, or sends, on one stream, verified by its BLAKE3.
pub(crate) const BLOCK_BYTES: u64 = 4 << 20;
/// Blocks a page keeps in flight per transfer and per session, each on its own stream.
pub(crate) const STREAMS: u32 = 4;
/// WebTransport sessions (QUIC connections) a page opens and spreads a transfer's blocks over,
/// unless `serve --web-transport-lanes` says otherwise.
/// Chromium carries one connection's download at most about 26 MiB/s on a 100 ms path with
/// 1 % loss through linkem, whatever the streams (4 or 12) and the controller's rate, where
/// the CLI carries 82: two sessions carried 43 MiB/s together, four 53 (blocks only, not
/// written; `docs/webtransport.md`). Sessions of one login share its transfers
/// (`conn::Registry`).
pub(crate) const LANES: u32 = 4;
/// WebTransport sessions served at once; more wait (the web app's HTTPS connections' bound).
const SESSIONS_MAX: usize = 64;
/// Time from a QUIC connection's first packet to its WebTransport session.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A session with no packet for this long ends (the page keeps it alive while it is open).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What moved over WebTransport, for `/metrics` (`sluice_webtransport_*`).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// File bytes sent in download blocks.
    pub(crate) sent: AtomicU64,
    /// File bytes received in upload blocks.
    pub(crate) received: AtomicU64,
    /// Sessions accepted.
    pub(crate) sessions: AtomicU64,
}

impl Counters {
    /// The counters in the Prometheus text format, to append to the server's.
    pub(crate) fn render(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "# HELP sluice_webtransport_bytes_total File bytes moved over WebTransport.\n\
             # TYPE sluice_webtransport_bytes_total counter\n\
             sluice_webtransport_bytes_total{{direction=\"sent\"}} {}\n\
             sluice_webtransport_bytes_total{{direction=\"received\"}} {}\n\
             # HELP sluice_webtransport_sessions_total WebTransport sessions accepted.\n\
             # TYPE sluice_webtransport_sessions_total counter\n\
             sluice_webtransport_sessions_total {}\n",
            get(&self.sent),
            get(&self.received),
            get(&self.sessions)
        )
    }
}

/// What the web app's API and the sessions share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The UDP port (the web app's own).
    pub(crate) port: u16,
    cert: Mutex<WtCert>,
    names: Vec<String>,
    /// What moved.
    pub(crate) counters: Arc<Counters>,
    /// Sessions a page opens ([`LANES`]).
    pub(crate) lanes: u32,
}

impl Shared {
    /// The SHA-256 (hex) of the certificate served now.
    pub(crate) fn hashes(&self) -> Vec<String> {
        vec![cert::hex(&self.cert().sha256)]
    }

    fn cert(&self) -> std::sync::MutexGuard<'_, WtCert> {
        self.cert.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `host` of a `Host` header `host[:port]` (an IPv6 address keeps its brackets).
pub(crate) fn host_only(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.split(':').next().unwrap_or(host)
}

/// The QUIC settings: windows for a few MiB in flight on each of several streams (quinn's
/// defaults are sized for 100 Mbit/s), the stream count bounded, an idle timeout, and Sluice's
/// default controller (`adaptive`) in place of quinn's Cubic (see `cc.rs`).
fn transport() -> wtransport::quinn::TransportConfig {
    use wtransport::quinn::{IdleTimeout, VarInt};
    let mut t = wtransport::quinn::TransportConfig::default();
    let stream_window = (BLOCK_BYTES * 2) as u32;
    t.stream_receive_window(VarInt::from_u32(stream_window))
        .receive_window(VarInt::from_u32(stream_window * 16))
        .send_window(u64::from(stream_window) * 16)
        .max_concurrent_bidi_streams(VarInt::from_u32(32))
        .max_concurrent_uni_streams(VarInt::from_u32(8))
        .keep_alive_interval(Some(IDLE_TIMEOUT / 3))
        .congestion_controller_factory(Arc::new(controllers()));
    if let Ok(idle) = IdleTimeout::try_from(IDLE_TIMEOUT) {
        t.max_idle_timeout(Some(idle));
    }
    t
}

/// The controllers every session's connection runs: Sluice's default (see `cc.rs`).
fn controllers() -> cc::SluiceCcFactory {
    cc::SluiceCcFactory::new(CcKind::Adaptive, 0)
}

fn server_config(socket: Option<std::net::UdpSocket>, cert: &WtCert) -> ServerConfig {
    let builder = match socket {
        Some(socket) => ServerConfig::builder().with_bind_socket(socket),
        // A reload: the bound socket stays, this address is not used.
        None => ServerConfig::builder().with_bind_default(0),
    };
    builder.with_custom_transport(cert.identity.clone_identity(), transport()).build()
}

/// The WebTransport listener, bound, not yet serving.
pub(crate) struct WtListener {
    endpoint: Endpoint<Server>,
    shared: Arc<Shared>,
    /// The server's path memory, which downloads start from and add to (`lanes.rs`).
    memory: Option<Arc<sluice::session::path_memory::PathMemory>>,
}

impl std::fmt::Debug for WtListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WtListener").field("shared", &self.shared).finish_non_exhaustive()
    }
}

impl WtListener {
    /// Binds UDP `addr` (the web app's address and port) with a new certificate for its host.
    pub(crate) fn bind(addr: SocketAddr, counters: Arc<Counters>) -> anyhow::Result<Self> {
        let socket = std::net::UdpSocket::bind(addr)
            .map_err(|e| anyhow::anyhow!("cannot listen for WebTransport on udp {addr}: {e}"))?;
        let port = socket.local_addr()?.port();
        let mut names = vec!["localhost".to_owned()];
        if !addr.ip().is_unspecified() {
            names.push(addr.ip().to_string());
        }
        let cert = cert::make(names.clone(), time::OffsetDateTime::now_utc())?;
        cert.log();
        let endpoint = Endpoint::server(server_config(Some(socket), &cert))?;
        let shared =
            Arc::new(Shared { port, cert: Mutex::new(cert), names, counters, lanes: LANES });
        Ok(WtListener { endpoint, shared, memory: None })
    }

    /// Downloads start from what `memory` kept of their paths and add to it (`None`: off).
    pub(crate) fn with_path_memory(
        mut self,
        memory: Option<Arc<sluice::session::path_memory::PathMemory>>,
    ) -> Self {
        self.memory = memory;
        self
    }

    /// Pages open `lanes` sessions (at least 1).
    pub(crate) fn with_lanes(mut self, lanes: u32) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.lanes = lanes.max(1);
        }
        self
    }

    /// What the web app's API hands pages.
    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The UDP address bound.
    pub(crate) fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Replaces the certificate (sessions running keep theirs); new pages get its hash.
    pub(crate) fn rotate(&self) -> anyhow::Result<()> {
        let cert = cert::make(self.shared.names.clone(), time::OffsetDateTime::now_utc())?;
        self.endpoint.reload_config(server_config(None, &cert), false)?;
        cert.log();
        *self.shared.cert() = cert;
        Ok(())
    }

    /// Serves sessions of `app`'s logins until `stop` completes; then every session ends.
    pub(crate) async fn serve(self, app: AppState, stop: impl std::future::Future<Output = ()>) {
        let permits = Arc::new(Semaphore::new(SESSIONS_MAX));
        let registry = Arc::new(conn::Registry::default());
        let lanes = lanes::Lanes::new(controllers().config().clone(), self.memory.clone());
        let mut sessions = JoinSet::new();
        let mut rotation = tokio::time::interval(cert::ROTATE_EVERY);
        rotation.tick().await;
        let mut stop = std::pin::pin!(stop);
        loop {
            while sessions.try_join_next().is_some() {}
            let permit = tokio::select! {
                () = &mut stop => break,
                _ = rotation.tick() => {
                    if let Err(e) = self.rotate() {
                        tracing::warn!("the WebTransport certificate could not be renewed: {e}");
                    }
                    continue;
                }
                permit = permits.clone().acquire_owned() => permit,
            };
            let Ok(permit) = permit else { break };
            let incoming = tokio::select! {
                () = &mut stop => break,
                incoming = self.endpoint.accept() => incoming,
            };
            let (app, counters) = (app.clone(), self.shared.counters.clone());
            let (registry, lanes) = (registry.clone(), lanes.clone());
            sessions.spawn(async move {
                let request = match tokio::time::timeout(HANDSHAKE_TIMEOUT, incoming).await {
                    Ok(Ok(request)) => request,
                    Ok(Err(e)) => return tracing::debug!("webtransport handshake: {e}"),
                    Err(_) => return tracing::debug!("webtransport handshake: too slow"),
                };
                let Some((id, page)) =
                    admit(&app, request.path(), request.origin(), request.authority())
                else {
                    request.forbidden().await;
                    return;
                };
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, request.accept()).await {
                    Ok(Ok(connection)) => {
                        counters.sessions.fetch_add(1, Ordering::Relaxed);
                        // The login's lanes are one flow (see `lanes.rs`).
                        let quic = connection.quic_connection();
                        let path = lanes::PathTo::of(
                            connection.remote_address().ip(),
                            quic.local_ip(),
                            connection.rtt(),
                        );
                        let seat = lanes.seat(&id, quic.congestion_state(), &path);
                        let note = seat.as_ref().and_then(lanes::Seat::note).map(Arc::new);
                        let login = (id, page);
                        conn::serve(connection, app, login, (counters, registry), note).await;
                        drop(seat);
                    }
                    Ok(Err(e)) => tracing::debug!("webtransport session: {e}"),
                    Err(_) => tracing::debug!("webtransport session: too slow"),
                }
                drop(permit);
            });
        }
        self.endpoint.close(wtransport::VarInt::from_u32(0), b"the server stops");
        sessions.shutdown().await;
    }
}

/// The login a session request is of, and the page's name for itself: its path must be
/// `/wt?ticket=T` with a live ticket `T`, or `/wt?ticket=T&page=P` (`P`: at most 64 letters,
/// digits, `-` or `_`: the page's lanes name the same one, so a download's pieces go to that
/// page's sessions and no other's, `push.rs`), and its `Origin`, when it names one, the page's
/// own (`https://` and the authority the session asked, which is the web app's host and port).
fn admit(
    app: &AppState,
    path: &str,
    origin: Option<&str>,
    authority: &str,
) -> Option<(String, Option<String>)> {
    let query = path.strip_prefix("/wt?ticket=")?;
    let (ticket, page) = match query.split_once("&page=") {
        Some((ticket, page)) => (ticket, Some(page)),
        None => (query, None),
    };
    let named = |p: &str| {
        (1..=64).contains(&p.len())
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if page.is_some_and(|p| !named(p)) {
        return None;
    }
    if let Some(origin) = origin {
        let host = origin.strip_prefix("https://")?;
        if !host.eq_ignore_ascii_case(authority) {
            return None;
        }
    }
    Some((app.logins.redeem(ticket)?, page.map(str::to_owned)))
}
