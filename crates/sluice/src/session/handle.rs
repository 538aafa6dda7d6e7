//! The convenient face of the client API: a builder for its configuration, and a handle on a
//! running transfer that yields typed events and then the final result (the same calls run in
//! `tests/session/session_handle.rs`; the crate's doc examples are not compiled as doctests).
//!
//! ```no_run
//! # async fn demo() -> Result<(), sluice::session::SessionError> {
//! use sluice::session::{ClientBuilder, TransferEvent, TrustPolicy};
//! let client = ClientBuilder::new("192.0.2.7:7733".parse().unwrap(), "example-host", "token")
//!     .trust(TrustPolicy::AcceptNew)
//!     .connect()
//!     .await?;
//! let mut transfer = client.start_get("data/big.bin", "big.bin".as_ref());
//! while let Some(TransferEvent::Progress { bytes, total }) = transfer.next_event().await {
//!     println!("{bytes} of {total}");
//! }
//! let report = transfer.finish().await?;
//! # let _ = report; Ok(()) }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use sluice_proto::cc::CcKind;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::SessionError;
use super::client::{Client, ClientConfig, TransferReport};
use super::known_hosts::TrustPolicy;

/// Progress events buffered for a slow reader; when full, intermediate ones are skipped.
const EVENT_BUFFER: usize = 64;

/// Builds a [`ClientConfig`] step by step, validating it at the end.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    config: ClientConfig,
}

impl ClientBuilder {
    /// A client of the server at `server`, known to the user as `host`, with `token`. Trust
    /// defaults to known hosts only, in the default known-hosts file `./known_hosts` unless
    /// [`ClientBuilder::known_hosts`] says otherwise.
    pub fn new(server: SocketAddr, host: impl Into<String>, token: impl Into<String>) -> Self {
        let config = ClientConfig::new(server, host, token, "known_hosts", TrustPolicy::KnownOnly);
        Self { config }
    }
    /// The known-hosts file.
    pub fn known_hosts(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.known_hosts = path.into();
        self
    }
    /// How to trust the server.
    pub fn trust(mut self, trust: TrustPolicy) -> Self {
        self.config.trust = trust;
        self
    }
    /// The congestion controller of the data channels.
    pub fn congestion_control(mut self, cc: CcKind) -> Self {
        self.config.channel.cc = cc;
        self
    }
    /// The `fixed` controller's rate, and a cap for the others (bits per second).
    pub fn rate_bps(mut self, rate_bps: u64) -> Self {
        self.config.channel.rate_bps = rate_bps;
        self
    }
    /// The largest datagram sent.
    pub fn packet_size(mut self, bytes: usize) -> Self {
        self.config.channel.packet_size = bytes;
        self
    }
    /// The checked configuration.
    pub fn build(self) -> Result<ClientConfig, SessionError> {
        self.config.channel.validate().map_err(|e| SessionError::Config(e.to_string()))?;
        Ok(self.config)
    }
    /// Builds and connects.
    pub async fn connect(self) -> Result<Client, SessionError> {
        Client::connect(self.build()?).await
    }
}

/// What a running transfer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferEvent {
    /// Bytes moved so far (received by a download, acknowledged for an upload) of `total`.
    Progress {
        /// Bytes so far.
        bytes: u64,
        /// Bytes in all.
        total: u64,
    },
}

/// A transfer running in the background: read its events, then [`Transfer::finish`] for the
/// result. Dropping it lets the transfer run to its end unobserved.
#[derive(Debug)]
pub struct Transfer {
    events: mpsc::Receiver<TransferEvent>,
    task: JoinHandle<Result<TransferReport, SessionError>>,
}

impl Transfer {
    /// The next event, or `None` once the transfer has ended.
    pub async fn next_event(&mut self) -> Option<TransferEvent> {
        self.events.recv().await
    }
    /// Waits for the end and returns the result.
    pub async fn finish(self) -> Result<TransferReport, SessionError> {
        self.task
            .await
            .map_err(|e| SessionError::Protocol(format!("the transfer task failed: {e}")))?
    }
}

impl Client {
    /// Starts downloading `remote_path` to `local_path` in the background.
    pub fn start_get(&self, remote_path: &str, local_path: &Path) -> Transfer {
        let (client, remote, local) = (self.clone(), remote_path.to_owned(), local_path.to_owned());
        spawn_transfer(move |progress| async move { client.get(&remote, &local, progress).await })
    }
    /// Starts uploading `local_path` to `remote_path` in the background.
    pub fn start_put(&self, local_path: &Path, remote_path: &str) -> Transfer {
        let (client, remote, local) = (self.clone(), remote_path.to_owned(), local_path.to_owned());
        spawn_transfer(move |progress| async move { client.put(&local, &remote, progress).await })
    }
}

fn spawn_transfer<F, Fut>(run: F) -> Transfer
where
    F: FnOnce(Box<dyn FnMut(crate::datapath::Progress) + Send>) -> Fut,
    Fut: std::future::Future<Output = Result<TransferReport, SessionError>> + Send + 'static,
{
    let (tx, events) = mpsc::channel(EVENT_BUFFER);
    let progress = Box::new(move |p: crate::datapath::Progress| {
        let _ = tx.try_send(TransferEvent::Progress { bytes: p.bytes, total: p.total });
    });
    Transfer { events, task: tokio::spawn(run(progress)) }
}
