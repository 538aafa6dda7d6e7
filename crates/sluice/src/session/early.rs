//! The early start of a transfer: its data leaves one round trip sooner.
//!
//! - **Upload.** A server offers every new connection, in its first flight and before the
//!   token is checked (QUIC's 0.5-RTT data), an [`Offer`]: the session's id and data sockets
//!   bound for the session's first request. A client whose first request is an upload
//!   starts its data to those ports at once, behind its `Hello` and `Put` ([`EARLY_REQUEST`]),
//!   with keys exported from the connection like any channel's.
//! - **Download.** A client whose destination holds nothing binds its data sockets before it
//!   asks, and names their ports in its `Get`: the server starts the data right behind its
//!   manifest.
//!
//! Either way the receiving end takes that data if its plan wants every file whole, and
//! declines it otherwise (`sluice_session::Receiving::new_early`): the transfer then goes on
//! as if it had not started early, losing nothing but the packets already sent.
//!
//! What a server does for a peer whose token it has not checked: it binds at most
//! [`EARLY_SOCKETS`] such sockets in all (beyond that it offers none), reads nothing from them
//! until the token is accepted and the upload planned (what arrives waits in the kernel's
//! socket buffer, at most [`EARLY_BUFFER_BYTES`], and is dropped with the socket when the token
//! is refused), opens and creates no file, and sends the one small `Offer` frame, which QUIC's
//! anti-amplification limit (three times what the peer sent) governs like the rest of the
//! first flight.

use std::net::{IpAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tracing::debug;

use super::SessionError;
use super::channel::{HANDSHAKE_TIMEOUT, bind_data_sockets, frame_error};
use super::keys::SessionId;
use super::messages::{Offer, read_message, write_message};

/// Data sockets bound for early uploads of connections whose token is not yet checked, in all
/// the server. Beyond them a new connection is offered none (its client then waits for the
/// server's `Want`, as without an early start).
pub(crate) const EARLY_SOCKETS: usize = 64;

/// Receive buffer of each socket offered before the token is checked: room for a sender's
/// first flight while the upload is planned, and 16 MiB in all at most ([`EARLY_SOCKETS`] of
/// them). The channel that takes a socket over sizes it as any channel's.
pub(crate) const EARLY_BUFFER_BYTES: usize = 256 << 10;

/// Which of the client's requests an offer's sockets are for: its first request stream (index
/// 1 among the client-initiated bidirectional streams; index 0 carries `Hello`).
pub(crate) const EARLY_REQUEST: u64 = 1;

/// Manifests of more entries than this never start early: planning them takes long enough
/// that the round trip saved does not matter, and the early data would wait meanwhile.
pub(crate) const EARLY_MAX_ENTRIES: usize = 2048;

/// How long a client's first upload waits for the server's offer once the connection is up.
/// The offer travels in the server's first flight, so it is nearly always there already; a
/// lost one is not waited for longer than this.
pub(crate) const OFFER_WAIT: Duration = Duration::from_millis(20);

/// Data sockets bound before the token was checked, counted against [`EARLY_SOCKETS`] while
/// they are held.
pub(crate) struct EarlySockets {
    sockets: Vec<UdpSocket>,
    ports: Vec<u16>,
    budget: Arc<AtomicUsize>,
}

impl EarlySockets {
    /// `count` sockets on `local` (toward `peer`), if the budget allows; `None` when it does
    /// not, or binding failed (an early start is only a saving).
    pub(crate) fn bind(
        count: u32,
        local: Option<IpAddr>,
        peer: IpAddr,
        budget: &Arc<AtomicUsize>,
    ) -> Option<EarlySockets> {
        let n = count as usize;
        let taken = budget.fetch_add(n, Ordering::AcqRel);
        if taken + n > EARLY_SOCKETS {
            budget.fetch_sub(n, Ordering::AcqRel);
            debug!(held = taken, "no early sockets offered: the server holds its share");
            return None;
        }
        match bind_data_sockets(count, local, peer, EARLY_BUFFER_BYTES) {
            Ok((sockets, ports)) => Some(EarlySockets { sockets, ports, budget: budget.clone() }),
            Err(e) => {
                budget.fetch_sub(n, Ordering::AcqRel);
                debug!(error = %e, "no early sockets offered");
                None
            }
        }
    }

    /// Their ports, in channel order.
    pub(crate) fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The first `n` sockets, for a transfer of `n` channels (the rest close); they no longer
    /// count against the budget.
    pub(crate) fn take(mut self, n: u32) -> Vec<UdpSocket> {
        let mut sockets = std::mem::take(&mut self.sockets);
        sockets.truncate(n as usize);
        sockets
    }
}

impl Drop for EarlySockets {
    fn drop(&mut self) {
        self.budget.fetch_sub(self.ports.len(), Ordering::AcqRel);
    }
}

/// Sends the server's offer on a stream of its own, in the first flight.
pub(crate) async fn send_offer(
    conn: &quinn::Connection,
    id: SessionId,
    max_channels: u32,
    sockets: Option<&EarlySockets>,
) -> Result<(), SessionError> {
    let offer = Offer {
        session_id: id.to_string(),
        max_channels,
        udp_ports: sockets.map(|s| s.ports().to_vec()).unwrap_or_default(),
    };
    let mut send = conn.open_uni().await.map_err(|e| super::connection_error(&e))?;
    write_message(&mut send, &offer).await.map_err(|e| frame_error(e, conn))?;
    let _ = send.finish();
    Ok(())
}

/// The server's offer, read on the stream it opens (`None` when none came in the handshake's
/// time, or it was not one).
pub(crate) async fn read_offer(conn: &quinn::Connection) -> Option<Offer> {
    let read = async {
        let mut recv = conn.accept_uni().await.ok()?;
        read_message::<_, Offer>(&mut recv, HANDSHAKE_TIMEOUT).await.ok()
    };
    let offer = tokio::time::timeout(HANDSHAKE_TIMEOUT, read).await.ok().flatten();
    if offer.is_none() {
        debug!("the server made no offer");
    }
    offer
}
