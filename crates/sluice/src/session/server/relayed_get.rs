//! A relayed download's sending end (`docs/relay.md`, "Downloads"): the server stripes a file
//! or a tree over relays of its own configuration (`[relays.NAME]` of `serve --config`) for
//! the client to collect, and is done once every block is safe on them (FSP's retreat, with
//! the server as the costly or endangered sender).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_session::relay::{
    BlockLen, CollectMsg, HopMsg, MAX_RELAYS, RelayedGet, StripeMsg, Take,
};
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::{RequestCtx, blocking, resolve};
use crate::session::client::relay::RelayedRequest;
use crate::session::drive::unrooted;
use crate::session::identity::Fingerprint;
use crate::session::keys::{ChannelRef, ChannelSecrets};
use crate::session::messages::{Messages, write_message};
use crate::session::relay::hop::{Link, Memory, read_hop, write_hop};
use crate::session::relay::seal::RELAY_KEY_LABEL;
use crate::session::relay::stripe::{
    Destination, Prepared, RelayTarget, RelayedOptions, Striping, rank_relays, stripe,
};
use crate::session::relay::take::Handed;
use crate::session::relay::transfer_id;
use crate::session::{Client, Overwrite, Peer, SessionError};

/// How long the server waits for each of its relays to answer.
const RELAY_CONNECT_WAIT: Duration = Duration::from_secs(10);
/// How long it waits for the client's answer to its offer (it plans where the blocks land).
const ANSWER_WAIT: Duration = Duration::from_secs(60);
/// How long a client's take waits for a batch of its direct share before it is told there is
/// none now (and asks again).
const TAKE_WAIT: Duration = Duration::from_secs(2);

impl RequestCtx<'_> {
    /// Stripes `get.path` over the relays it names for the client to collect; ends once every
    /// block is safe on them and the digest is sent (the client collects on).
    pub(super) async fn relayed_get(&mut self, get: RelayedGet) -> Result<(), SessionError> {
        let started = Instant::now();
        self.require(|r| r.read, "read (download)")?;
        let collector: Fingerprint = get.collector.parse().map_err(|_| {
            SessionError::Protocol(format!("bad collector fingerprint {:?}", get.collector))
        })?;
        if get.relays.is_empty() || get.relays.len() > MAX_RELAYS {
            return Err(SessionError::Refused(format!(
                "a relayed download names 1 to {MAX_RELAYS} of the server's relays"
            )));
        }
        let mut configs = Vec::new();
        for name in &get.relays {
            let Some(relay) = self.shared.relays.iter().find(|r| &r.name == name) else {
                let have: Vec<&str> = self.shared.relays.iter().map(|r| r.name.as_str()).collect();
                return Err(SessionError::Refused(if have.is_empty() {
                    "this server stripes over no relay (none in its config file)".into()
                } else {
                    format!("this server has no relay {name:?} (it has: {})", have.join(", "))
                }));
            };
            configs.push(relay.clone());
        }
        // A place among the transfers of the server, the session and the token, before any
        // relay is asked for anything.
        let (_permits, _) = self.acquire_transfer().await?;
        let root = self.session.access.root.clone();
        let (path, recursive) = (get.path.clone(), get.recursive);
        let local = blocking(move || {
            let at = resolve(&root, if path.is_empty() { "." } else { &path })?;
            if at.is_dir() && !recursive {
                return Err(SessionError::Refused(format!(
                    "{path} is a directory: copy it with -r"
                )));
            }
            Ok(at)
        })
        .await?;
        let targets = reach_relays(configs, get.max_rtt_sender_ms).await;
        let (targets, left) = rank_relays(targets, get.block_bytes).await;
        for (relay, why) in left {
            warn!(relay = relay.name, error = %why, "relay left out");
            relay.client.close().await;
        }
        if targets.is_empty() {
            return Err(SessionError::Busy(
                "none of the relays named could take blocks now (see the server's log)".into(),
            ));
        }
        let options = RelayedOptions {
            strategy: get.strategy,
            block_bytes: get.block_bytes,
            compress: get.compress,
            direct: get.direct,
            overwrite: Overwrite::Refuse,
            checksum: get.checksum,
            // Once every block is safe the server's part is done (the client hears `Sent`),
            // but it stays on the request, idle, until the client has the verified file: a
            // block that did not open at the client is deposited again while it is there.
            // (A server that is gone leaves the client to collect alone.)
            wait: true,
            copies: get.copies,
            ..RelayedOptions::default()
        };
        let root = self.session.access.root.clone();
        let result = self.offer(started, &local, &root, &targets, &options, collector).await;
        for relay in targets {
            relay.client.close().await;
        }
        result
    }

    /// Offers what it sends, reads the client's answer, and stripes.
    async fn offer(
        &mut self,
        started: Instant,
        local: &std::path::Path,
        root: &std::path::Path,
        targets: &[RelayTarget],
        options: &RelayedOptions,
        collector: Fingerprint,
    ) -> Result<(), SessionError> {
        let prepared = Prepared::new(local, Some(root), "", targets, options).await?;
        // The client in the striping takes its share by asking for it on this session, from
        // before it hears the offer.
        let (direct, _taking) = if options.direct {
            let (to, opened) = self.shared.takes.open(prepared.transfer, self.session.id);
            (Some(Destination::Taken(to)), Some(opened))
        } else {
            (None, None)
        };
        let offer = StripeMsg::Offer(Box::new(prepared.put.clone()));
        write_message(self.send, &offer).await.map_err(|e| super::frame_error(e, self.conn))?;
        // From here on each side tells the other why it failed on this stream.
        self.told = true;
        let answer =
            tokio::time::timeout(ANSWER_WAIT, Messages::<CollectMsg>::new(self.recv).next())
                .await
                .map_err(|_| SessionError::Network("the client did not answer the offer".into()))?;
        let (job, have, wanted, skip) = match answer
            .map_err(|e| super::frame_error(e, self.conn))?
        {
            CollectMsg::Accepted { job, have, wanted, skip } => (job, have, wanted, skip),
            CollectMsg::Failed { code, message } => {
                info!(?code, message, "the client declined the relayed download");
                return Ok(());
            }
            other => {
                return Err(SessionError::Protocol(format!("expected Accepted, got {other:?}")));
            }
        };
        let at =
            ChannelRef { session_id: self.session.id, request_id: self.request_id, channel: 0 };
        let secret =
            ChannelSecrets::derive_labelled(self.conn, RELAY_KEY_LABEL, &at)?.server_to_client;
        let to = Striping {
            send: self.send,
            recv: self.recv,
            conn: self.conn.clone(),
            receiver: collector,
            direct,
            accepted: RelayedRequest { secret, job, have, wanted, skip },
        };
        let shown = local.display().to_string();
        let report = match stripe(started, prepared, to, targets, options, &shown).await {
            Ok(report) => report,
            Err(e) => {
                // The client hears why (a second `Failed` after the striping's own is unread),
                // with paths as it named them.
                let message = unrooted(&e.detail(), &self.session.access.root);
                let msg = StripeMsg::Failed { code: e.code(), message };
                let _ = write_message(self.send, &msg).await;
                return Err(e);
            }
        };
        self.shared.metrics.moved(true, report.bytes, 0, 0);
        info!(
            bytes = report.bytes,
            blocks = report.blocks,
            send_seconds = report.send_seconds,
            "relayed download sent: the client collects on"
        );
        Ok(())
    }
}

impl RequestCtx<'_> {
    /// A relayed download's client taking its direct share: the next batch the striping's
    /// direct worker sealed for it, sent as a relay sends a collection's, and what the client
    /// stored back to the worker. With none within [`TAKE_WAIT`] the answer holds no block
    /// and the client asks again.
    pub(super) async fn take(&mut self, take: Take) -> Result<(), SessionError> {
        let transfer = transfer_id(&take.transfer)?;
        let Some(queue) = self.shared.takes.find(&transfer, self.session.id) else {
            return Err(SessionError::Refused(format!(
                "no relayed download of transfer {} runs for this session (it ended)",
                take.transfer
            )));
        };
        // The next batch a worker still waits to hand over (one it gave back is skipped).
        let next = tokio::time::timeout(TAKE_WAIT, async {
            let mut queue = queue.lock().await;
            loop {
                match queue.recv().await {
                    Some(handed) => match handed.claim() {
                        Some(handed) => return Some(handed),
                        None => continue,
                    },
                    None => return None,
                }
            }
        });
        let Handed { blocks, link, done, .. } = match next.await {
            Err(_) => {
                let none = HopMsg::Holding { blocks: Vec::new() };
                return write_hop(self.send, self.conn, &none).await;
            }
            Ok(None) => {
                return Err(SessionError::Refused("the relayed download's striping ended".into()));
            }
            Ok(Some(handed)) => handed,
        };
        let lens: Vec<BlockLen> =
            blocks.iter().map(|(id, b)| BlockLen { id: *id, len: b.len() as u64 }).collect();
        let moved = async {
            let batch = Arc::new(Memory::of_blocks(&blocks));
            self.send_held(&lens, batch, Some(Link::Gate(link))).await?;
            match read_hop(self.recv, self.conn, Peer::Client).await? {
                // Only blocks of this batch count.
                HopMsg::Stored { blocks } => {
                    Ok(blocks.into_iter().filter(|id| lens.iter().any(|b| b.id == *id)).collect())
                }
                other => Err(SessionError::Protocol(format!("expected Stored, got {other:?}"))),
            }
        };
        match moved.await {
            Ok(stored) => {
                let _ = done.send(Ok(stored));
                Ok(())
            }
            Err(e) => {
                let _ = done.send(Err(SessionError::from_peer(Peer::Client, e.code(), e.detail())));
                Err(e)
            }
        }
    }
}

/// Sessions with `relays`, each within `max_rtt_ms` of this server when that is given; those
/// that do not answer, or are too far, are left out (logged).
async fn reach_relays(
    relays: Vec<crate::session::ServerRelay>,
    max_rtt_ms: Option<u64>,
) -> Vec<RelayTarget> {
    let mut reaching = JoinSet::new();
    for (i, relay) in relays.into_iter().enumerate() {
        reaching.spawn(async move {
            let reached = tokio::time::timeout(RELAY_CONNECT_WAIT, async {
                let client = Client::connect(relay.config).await?;
                client.ready().await?;
                Ok::<_, SessionError>(client)
            })
            .await
            .unwrap_or_else(|_| Err(SessionError::Network("no answer".into())));
            (i, relay.name, reached)
        });
    }
    let mut reached = Vec::new();
    // A task that panicked leaves out its relay, not the ones still coming.
    while let Some(joined) = reaching.join_next().await {
        let Ok((i, name, client)) = joined else { continue };
        match client {
            Ok(client) => {
                let rtt = client.rtt();
                if let Some(max) = max_rtt_ms
                    && rtt > Duration::from_millis(max)
                {
                    warn!(
                        relay = name,
                        rtt_ms = rtt.as_millis() as u64,
                        max,
                        "relay left out: too far"
                    );
                    client.close().await;
                    continue;
                }
                reached.push((i, RelayTarget { name, client }));
            }
            Err(e) => warn!(relay = name, error = %e, "relay left out"),
        }
    }
    // In the order named.
    reached.sort_by_key(|(i, _)| *i);
    reached.into_iter().map(|(_, r)| r).collect()
}
