//! The client's ends of the relay plane's requests: a deposit with a relay, a collection from
//! one (a collector is a client of the relay, admitted by its capability), and a relayed
//! upload's request to its receiver.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_session::relay::{
    BlockLen, Collect, CollectMsg, Deposit, HopMsg, RelayPeer, RelayedPut, Take,
};

use super::{Client, SessionError};
use crate::session::Peer;
use crate::session::channel::{REPLY_TIMEOUT, frame_error};
use crate::session::identity::{CERT_NAME, Fingerprint};
use crate::session::keys::{ChannelRef, ChannelSecrets, DirectionSecret};
use crate::session::known_hosts::{HostVerifier, KnownHosts, TrustPolicy, host_key};
use crate::session::messages::{Answer, Request, read_message};
use crate::session::relay::check_batch;
use crate::session::relay::collect::Collection;
use crate::session::relay::hop::{
    Direction, Link, Memory, move_batch, read_hop, receive_blocks, write_hop,
};
use crate::session::relay::seal::RELAY_KEY_LABEL;

/// What a collection got from a relay; [`CollectHop::release`] tells the relay which of them
/// it may delete.
#[derive(Debug)]
pub struct CollectHop {
    /// The blocks the relay had of those asked for, sealed, in its order.
    pub blocks: Vec<(u64, Vec<u8>)>,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    conn: quinn::Connection,
}

impl CollectHop {
    /// The collector has `ids` safe: the relay deletes them (and says so).
    pub async fn release(mut self, ids: &[u64]) -> Result<(), SessionError> {
        write_hop(&mut self.send, &self.conn, &HopMsg::Release { blocks: ids.to_vec() }).await?;
        match read_hop(&mut self.recv, &self.conn, Peer::Server).await? {
            HopMsg::Released => {
                let _ = self.send.finish();
                Ok(())
            }
            other => Err(SessionError::Protocol(format!("expected Released, got {other:?}"))),
        }
    }
}

/// A relayed transfer's receiver's answer, as its sending end holds it.
#[derive(Debug)]
pub(crate) struct RelayedRequest {
    /// The key material of the transfer's blocks (the direction they go).
    pub(crate) secret: DirectionSecret,
    /// The receiver's name of the job.
    pub(crate) job: String,
    /// Blocks the receiver has already (a re-run's), as id ranges `[start, end)`.
    pub(crate) have: Vec<[u64; 2]>,
    /// A tree's files that move, when not all do (numbers among its manifest's files).
    pub(crate) wanted: Option<Vec<u32>>,
    /// Relays the receiver left out (numbers among the offer's).
    pub(crate) skip: Vec<u32>,
}

/// The round trip to the server at `server` whose certificate is `fingerprint`, from a QUIC
/// handshake alone (no token, nothing asked), closed at once: a receiver's distance to a relay
/// (FSP 3.1). `None` when no handshake with that certificate completed within `wait`.
pub(crate) async fn handshake_rtt(
    server: SocketAddr,
    fingerprint: Fingerprint,
    wait: Duration,
) -> Option<Duration> {
    let known = KnownHosts::parse(std::path::Path::new("/dev/null"), "");
    let verifier = HostVerifier::new(
        TrustPolicy::Pinned(fingerprint),
        known,
        host_key(&server.ip().to_string(), server.port()),
    );
    let tls = verifier.client_tls_as(None).ok()?;
    let mut quic = quinn::ClientConfig::new(Arc::new(tls));
    quic.transport_config(Arc::new(crate::session::channel::control_transport()));
    let endpoint =
        crate::session::transport::endpoint(crate::session::Transport::Udp, server).await.ok()?;
    let connecting = endpoint.connect_with(quic, server, CERT_NAME).ok()?;
    let conn = tokio::time::timeout(wait, connecting).await.ok()?.ok()?;
    let proved = matches!(verifier.outcome(), Some((_, Ok(_))));
    let rtt = conn.rtt();
    conn.close(crate::session::close_code::DONE.into(), b"round trip measured");
    proved.then_some(rtt)
}

/// How long a relay's handshake may take when its round trip is measured.
pub(crate) const RTT_WAIT: Duration = Duration::from_secs(3);

/// The round trips to `relays` (each its address and fingerprint), measured at once by
/// [`handshake_rtt`] within [`RTT_WAIT`]: `None` where no handshake proved the fingerprint.
/// A receiver's distances to a sender's relays (FSP 3.1's multi-constraint choice).
pub(crate) async fn handshake_rtts(relays: &[(SocketAddr, Fingerprint)]) -> Vec<Option<Duration>> {
    let mut measuring = tokio::task::JoinSet::new();
    for (i, (address, fingerprint)) in relays.iter().cloned().enumerate() {
        measuring.spawn(async move { (i, handshake_rtt(address, fingerprint, RTT_WAIT).await) });
    }
    let mut rtts = vec![None; relays.len()];
    while let Some(Ok((i, rtt))) = measuring.join_next().await {
        rtts[i] = rtt;
    }
    rtts
}

impl Client {
    /// The session's round-trip time as QUIC measures it (FSP 3.1 selects relays by it).
    pub fn rtt(&self) -> std::time::Duration {
        self.conn.rtt()
    }

    /// The session's connection (its exporter and close reason).
    pub(crate) fn connection(&self) -> &quinn::Connection {
        &self.conn
    }

    /// Deposits `blocks` (sealed, by id) of `transfer` (32 hex digits) with this relay for the
    /// collector whose capability hashes to `capability_hash` (BLAKE3, 64 hex digits); returns
    /// the blocks the relay holds durably (written and fsync'd). The relay plane's primitive:
    /// [`Client::upload_relayed`] stripes with it.
    pub async fn deposit_blocks(
        &self,
        transfer: &str,
        capability_hash: &str,
        blocks: Vec<(u64, Vec<u8>)>,
    ) -> Result<Vec<u64>, SessionError> {
        self.deposit_gated(transfer, capability_hash, blocks, None).await
    }

    /// [`Client::deposit_blocks`], its data moving once it has `link` (see `hop::Link`).
    pub(crate) async fn deposit_gated(
        &self,
        transfer: &str,
        capability_hash: &str,
        blocks: Vec<(u64, Vec<u8>)>,
        link: Option<Link>,
    ) -> Result<Vec<u64>, SessionError> {
        let lens: Vec<BlockLen> =
            blocks.iter().map(|(id, b)| BlockLen { id: *id, len: b.len() as u64 }).collect();
        let total: u64 = lens.iter().map(|b| b.len).sum();
        let mut req = self.request().await?;
        let deposit = Request::Deposit(Deposit {
            transfer: transfer.to_owned(),
            capability_hash: capability_hash.to_owned(),
            blocks: lens,
        });
        let welcomed = self.opened(req.write(&deposit).await).await?;
        let setup = self.setup(req.id, welcomed);
        let store = Arc::new(Memory::of_blocks(&blocks));
        move_batch(
            setup,
            &mut req.send,
            &mut req.recv,
            Peer::Server,
            Direction::Send,
            store,
            total,
            link,
            Some(&self.hop_rate),
        )
        .await?;
        match read_hop(&mut req.recv, &self.conn, Peer::Server).await? {
            HopMsg::Stored { blocks } => {
                req.finish();
                Ok(blocks)
            }
            other => Err(SessionError::Protocol(format!("expected Stored, got {other:?}"))),
        }
    }

    /// Collects `collect`'s blocks from this relay, on a session its capability admitted
    /// ([`crate::session::relay::capability_claim`]); the blocks it does not hold are left out.
    pub async fn collect_blocks(&self, collect: Collect) -> Result<CollectHop, SessionError> {
        self.collect_linked(collect, None).await
    }

    /// [`Client::collect_blocks`], handing `link` on as the data nears its end (see `hop::Link`).
    pub(crate) async fn collect_linked(
        &self,
        collect: Collect,
        link: Option<Link>,
    ) -> Result<CollectHop, SessionError> {
        let mut req = self.request().await?;
        let ids = collect.blocks.clone();
        let collect = Request::Collect(collect);
        let welcomed = self.opened(req.write(&collect).await).await?;
        let held = match read_hop(&mut req.recv, &self.conn, Peer::Server).await? {
            HopMsg::Holding { blocks } => blocks,
            other => {
                return Err(SessionError::Protocol(format!("expected Holding, got {other:?}")));
            }
        };
        if held.iter().any(|b| !ids.contains(&b.id)) {
            return Err(SessionError::Protocol("the relay sent a block not asked for".into()));
        }
        let total: u64 = held.iter().map(|b| b.len).sum();
        let mut blocks = Vec::with_capacity(held.len());
        if total > 0 {
            let setup = self.setup(req.id, welcomed);
            blocks = receive_blocks(setup, &mut req.send, &mut req.recv, Peer::Server, &held, link)
                .await?;
        }
        let OpenRequestParts { send, recv } = req.into_parts();
        Ok(CollectHop { blocks, send, recv, conn: self.conn.clone() })
    }

    /// Takes the next batch of a relayed download's direct share from this server
    /// ([`crate::session::relay::take`]) into `job`: received while relays' collections wait
    /// (as for a sender's own deposit), opened and written, and the server told. Returns the
    /// batch's blocks, none when the server had none for this end now.
    pub(crate) async fn take_direct(
        &self,
        transfer: &str,
        job: &Arc<Collection>,
    ) -> Result<Vec<BlockLen>, SessionError> {
        let mut req = self.request().await?;
        let take = Request::Take(Take { transfer: transfer.to_owned() });
        let welcomed = self.opened(req.write(&take).await).await?;
        let held = match read_hop(&mut req.recv, &self.conn, Peer::Server).await? {
            HopMsg::Holding { blocks } => blocks,
            other => {
                return Err(SessionError::Protocol(format!("expected Holding, got {other:?}")));
            }
        };
        if held.is_empty() {
            req.finish();
            return Ok(held);
        }
        check_batch(&held)?;
        let setup = self.setup(req.id, welcomed);
        job.receive_own(setup, &mut req.send, &mut req.recv, Peer::Server, &held).await?;
        req.finish();
        Ok(held)
    }

    /// The bytes of sealed blocks this relay would take from this session's token now (its
    /// spool's free room and the token's quota's): how a sender ranks relays by what they
    /// accept. Needs the `relay` right.
    pub async fn spool_room(&self) -> Result<u64, SessionError> {
        match self.ask(&Request::SpoolRoom {}).await? {
            Answer::SpoolRoom { bytes } => Ok(bytes),
            other => Err(super::unexpected(other)),
        }
    }

    /// Tells this relay to delete `discard`'s blocks unsent (the collector has them from
    /// another relay), on a session its capability admitted.
    pub async fn discard_blocks(&self, discard: Collect) -> Result<(), SessionError> {
        let mut req = self.request().await?;
        self.opened(req.write(&Request::Discard(discard)).await).await?;
        match read_hop(&mut req.recv, &self.conn, Peer::Server).await? {
            HopMsg::Released => Ok(()),
            other => Err(SessionError::Protocol(format!("expected Released, got {other:?}"))),
        }
    }

    /// The round trips from this server to `relays` (each its address and pinned
    /// fingerprint), measured by the server: `None` where it completed no handshake with the
    /// relay in time. The receiver's side of relay selection (FSP 3.1).
    pub async fn relay_rtts(
        &self,
        relays: &[(SocketAddr, Fingerprint)],
    ) -> Result<Vec<Option<Duration>>, SessionError> {
        let relays = relays
            .iter()
            .map(|(a, f)| RelayPeer { address: a.to_string(), fingerprint: f.to_string() })
            .collect();
        match self.ask(&Request::RelayRtts { relays }).await? {
            Answer::RelayRtts { rtt_us } => {
                Ok(rtt_us.into_iter().map(|us| us.map(Duration::from_micros)).collect())
            }
            other => Err(super::unexpected(other)),
        }
    }

    /// Opens a relayed upload with this server (the receiver): it answers once its job is
    /// set up. Returns the request's streams and the answer.
    pub(crate) async fn relayed(
        &self,
        put: RelayedPut,
    ) -> Result<(quinn::SendStream, quinn::RecvStream, RelayedRequest), SessionError> {
        let mut req = self.request().await?;
        let welcomed = self.opened(req.write(&Request::Relayed(put)).await).await?;
        let at = ChannelRef { session_id: welcomed.session_id, request_id: req.id, channel: 0 };
        let secret =
            ChannelSecrets::derive_labelled(&self.conn, RELAY_KEY_LABEL, &at)?.client_to_server;
        let answer = read_message(&mut req.recv, REPLY_TIMEOUT)
            .await
            .map_err(|e| frame_error(e, &self.conn))?;
        let (job, have, wanted) = match answer {
            CollectMsg::Accepted { job, have, wanted, .. } => (job, have, wanted),
            CollectMsg::Failed { code, message } => {
                return Err(SessionError::from_server(code, message));
            }
            other => {
                return Err(SessionError::Protocol(format!("expected Accepted, got {other:?}")));
            }
        };
        let OpenRequestParts { send, recv } = req.into_parts();
        Ok((send, recv, RelayedRequest { secret, job, have, wanted, skip: Vec::new() }))
    }
}

/// A request's streams, taken out of it.
pub(super) struct OpenRequestParts {
    pub(super) send: quinn::SendStream,
    pub(super) recv: quinn::RecvStream,
}
