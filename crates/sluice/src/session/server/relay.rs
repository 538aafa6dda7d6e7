//! The server's ends of the relay plane (`docs/relay.md`): a relay's deposits and collections
//! (with a spool, `serve --spool`), the admission of a collector by its capability, and a
//! relayed upload's receiving end (any server that takes uploads).

use std::sync::Arc;

use sluice_session::relay::{
    BlockLen, CAPABILITY_TAG, Collect, CollectMsg, Deposit, HopMsg, MAX_BATCH_BLOCKS, MAX_RELAYS,
    RelayPeer, RelayedPut, from_hex, id_ranges,
};
use tracing::info;

use super::{Access, RequestCtx, Rights, Shared, blocking, resolve};
use crate::session::client::handshake_rtts;
use crate::session::identity::peer_fingerprint;
use crate::session::job_log::unix_now;
use crate::session::keys::{ChannelRef, ChannelSecrets};
use crate::session::messages::{Answer, GrantClaim};
use crate::session::relay::collect::{Collection, Listed, Policy, Start};
use crate::session::relay::hop::{Direction, Link, move_batch, read_hop, write_hop};
use crate::session::relay::landing::{
    Followed, Landing, Planned, accept, follow, land, relay_peer, relays_of,
};
use crate::session::relay::seal::{BlockKey, RELAY_KEY_LABEL};
use crate::session::relay::spool::{Spool, TransferId};
use crate::session::relay::{check_batch, transfer_id};
use crate::session::{Peer, SessionError};
use crate::tree::{EntryKind, FileSet};

/// The transfer a collector's capability admits it to, when it is this relay's, and the access
/// of its session: no right at all (it may only collect that transfer); else why not.
pub(super) fn check_capability(
    shared: &Shared,
    conn: &quinn::Connection,
    claim: &GrantClaim,
) -> Result<(TransferId, Arc<Access>), String> {
    let Some(spool) = &shared.spool else {
        return Err("this server is not a relay (serve --spool)".into());
    };
    let capability = claim
        .grant
        .strip_prefix(CAPABILITY_TAG)
        .and_then(from_hex::<32>)
        .ok_or("a capability is 64 hex digits")?;
    let transfer = from_hex::<16>(&claim.job).ok_or("a transfer id is 32 hex digits")?;
    let Some(presenter) = peer_fingerprint(conn) else {
        return Err(
            "a collector proves its certificate (the receiver's) with its capability".into()
        );
    };
    if spool.admits(&transfer, &capability, &presenter) {
        let none = Rights { read: false, write: false, list: false, relay: false };
        let access =
            Access { rights: none, root: shared.root.clone(), transfers: None, rate_bps: None };
        Ok((transfer, Arc::new(access)))
    } else {
        Err("the capability was not accepted (not this relay's, or not for this peer)".into())
    }
}

impl RequestCtx<'_> {
    /// A sender's deposit: into the spool (a relay), or straight to the collection of this
    /// session's own relayed upload (the direct path of the striping).
    pub(super) async fn deposit(&mut self, deposit: Deposit) -> Result<(), SessionError> {
        let transfer = transfer_id(&deposit.transfer)?;
        let total = check_batch(&deposit.blocks)?;
        if let Some(job) = self.shared.collections.direct(&transfer, self.session.id) {
            return self.deposit_direct(job, &deposit.blocks, total).await;
        }
        let Some(spool) = self.shared.spool.clone() else {
            return Err(SessionError::Refused(format!(
                "no relayed upload of transfer {} runs here for this session (it ended), and \
                 this server is not a relay (serve --spool)",
                deposit.transfer
            )));
        };
        self.require(|r| r.relay, "relay blocks (its rights lack relay)")?;
        from_hex::<32>(&deposit.capability_hash)
            .ok_or_else(|| SessionError::Protocol("a capability hash is 64 hex digits".into()))?;
        let (_permits, _) = self.acquire_transfer().await?;
        let quota = self.spool_quota();
        let token = self.session.token;
        let blocks = deposit.blocks.clone();
        let hash = deposit.capability_hash.clone();
        let reservation =
            blocking(move || spool.reserve(transfer, &hash, token, quota, &blocks)).await?;
        let store = Arc::new(reservation.store());
        let setup = self.setup();
        move_batch(
            setup,
            self.send,
            self.recv,
            Peer::Client,
            Direction::Receive,
            store,
            total,
            None,
            None,
        )
        .await?;
        let stored = blocking(move || reservation.commit()).await?;
        self.shared.metrics.moved(false, total, 0, 0);
        info!(transfer = deposit.transfer, blocks = stored.len(), bytes = total, "blocks spooled");
        write_hop(self.send, self.conn, &HopMsg::Stored { blocks: stored }).await
    }

    /// The sender's own deposit of its relayed upload: received in memory and handed to the
    /// collection, which opens and writes it before the answer.
    async fn deposit_direct(
        &mut self,
        job: Arc<Collection>,
        blocks: &[BlockLen],
        total: u64,
    ) -> Result<(), SessionError> {
        let setup = self.setup();
        job.receive_own(setup, self.send, self.recv, Peer::Client, blocks).await?;
        self.shared.metrics.moved(false, total, 0, 0);
        Ok(())
    }

    /// The spool and the transfer of a collector's request, once its session's capability is
    /// that transfer's and the request asks for at most a batch.
    fn collector_of(&self, collect: &Collect) -> Result<(Arc<Spool>, TransferId), SessionError> {
        let spool = self.relay_spool()?;
        let transfer = transfer_id(&collect.transfer)?;
        if self.session.collects != Some(transfer) {
            return Err(SessionError::Refused(
                "this session's capability does not collect that transfer".into(),
            ));
        }
        if collect.blocks.len() > MAX_BATCH_BLOCKS {
            return Err(SessionError::Protocol(format!("at most {MAX_BATCH_BLOCKS} blocks")));
        }
        Ok((spool, transfer))
    }

    /// This server's spool, or the refusal of a server that is not a relay.
    fn relay_spool(&self) -> Result<Arc<Spool>, SessionError> {
        self.shared.spool.clone().ok_or_else(|| {
            SessionError::Refused("this server is not a relay (serve --spool)".into())
        })
    }

    /// This session's token's quota of spooled bytes (its `spool=`), when it has one.
    fn spool_quota(&self) -> Option<u64> {
        self.shared.tokens.grants().get(self.session.token).and_then(|g| g.spool_bytes)
    }

    /// How many bytes of blocks this session's token could deposit now.
    pub(super) async fn spool_room(&mut self) -> Result<(), SessionError> {
        let spool = self.relay_spool()?;
        self.require(|r| r.relay, "relay blocks (its rights lack relay)")?;
        let quota = self.spool_quota();
        let bytes = spool.room(self.session.token, quota);
        self.write(&Answer::SpoolRoom { bytes }).await
    }

    /// A collector's discard: blocks it has from another relay, deleted here unsent; with no
    /// blocks named, the collector has them all: everything of the transfer goes, and no more
    /// deposits of it are taken.
    pub(super) async fn discard(&mut self, discard: Collect) -> Result<(), SessionError> {
        let (spool, transfer) = self.collector_of(&discard)?;
        let count = discard.blocks.len();
        let name = discard.transfer.clone();
        if count == 0 {
            blocking(move || spool.close(&transfer)).await?;
            info!(transfer = name, "the collector has every block: the transfer is closed here");
        } else {
            blocking(move || spool.release(&transfer, &discard.blocks)).await?;
            info!(transfer = name, blocks = count, "blocks collected elsewhere deleted");
        }
        write_hop(self.send, self.conn, &HopMsg::Released).await
    }

    /// Says which blocks this end sends (`Holding`), then sends them (`store`: their sealed
    /// bytes end to end) over the session's data path, once it has `link` when given, starting
    /// at the rate the session's last hop settled at: a relay's collection, or a download's
    /// direct share taken by its client.
    pub(super) async fn send_held(
        &mut self,
        lens: &[BlockLen],
        store: Arc<dyn crate::datapath::Store + Send + Sync>,
        link: Option<Link>,
    ) -> Result<(), SessionError> {
        write_hop(self.send, self.conn, &HopMsg::Holding { blocks: lens.to_vec() }).await?;
        let total: u64 = lens.iter().map(|b| b.len).sum();
        if total > 0 {
            let setup = self.setup();
            let rate = Some(&self.session.hop_rate);
            let (send, recv) = (&mut *self.send, &mut *self.recv);
            move_batch(setup, send, recv, Peer::Client, Direction::Send, store, total, link, rate)
                .await?;
            self.shared.metrics.moved(true, total, 0, 0);
        }
        Ok(())
    }

    /// A collector's collection: the blocks asked for that the spool holds, then their release.
    pub(super) async fn collect(&mut self, collect: Collect) -> Result<(), SessionError> {
        let (spool, transfer) = self.collector_of(&collect)?;
        let held = spool.holding(&transfer, &collect.blocks);
        let lens: Vec<BlockLen> = held.iter().map(|(b, _)| *b).collect();
        let files = FileSet::new(held.iter().map(|(b, p)| (p.clone(), b.len)).collect(), false);
        // Tests of a relay that returns wrong bytes: each collection is a pass of its own.
        let store =
            crate::session::blocks::data_store(&Arc::new(files), self.shared.fault, true, 0);
        self.send_held(&lens, store, None).await?;
        let released = match read_hop(self.recv, self.conn, Peer::Client).await? {
            HopMsg::Release { blocks } => blocks,
            other => {
                return Err(SessionError::Protocol(format!("expected Release, got {other:?}")));
            }
        };
        let ids: Vec<u64> =
            released.into_iter().filter(|id| lens.iter().any(|b| b.id == *id)).collect();
        let count = ids.len();
        blocking(move || spool.release(&transfer, &ids)).await?;
        info!(transfer = collect.transfer, blocks = count, "collected blocks released");
        write_hop(self.send, self.conn, &HopMsg::Released).await
    }

    /// The round trips from here to the sender's relays (`sluice cp --relay-max-rtt-receiver`),
    /// measured at once, each by a handshake that proves the relay's fingerprint.
    pub(super) async fn relay_rtts(&mut self, relays: Vec<RelayPeer>) -> Result<(), SessionError> {
        self.require(|r| r.write, "write (upload)")?;
        if relays.len() > MAX_RELAYS {
            return Err(SessionError::Refused(format!("at most {MAX_RELAYS} relays")));
        }
        let peers = relays
            .iter()
            .map(|r| relay_peer(&r.address, &r.fingerprint))
            .collect::<Result<Vec<_>, _>>()?;
        let rtts = handshake_rtts(&peers).await;
        let rtt_us: Vec<Option<u64>> =
            rtts.iter().map(|rtt| rtt.map(|d| d.as_micros() as u64)).collect();
        info!(?rtt_us, "round trips to the sender's relays");
        self.write(&Answer::RelayRtts { rtt_us }).await
    }

    /// A relayed upload's receiving end: starts the collection job, then follows the sender's
    /// reports while it is there.
    pub(super) async fn relayed(&mut self, put: RelayedPut) -> Result<(), SessionError> {
        self.require(|r| r.write, "write (upload)")?;
        let transfer = transfer_id(&put.transfer)?;
        let relays = relays_of(&put)?;
        let root = self.session.access.root.clone();
        let requested = put.dest.clone();
        // A place among the server's transfers first: a stalled job the landing takes up is not
        // put back.
        let (permits, _) = self.acquire_transfer().await?;
        let collections = self.shared.collections.clone();
        let found = collections.clone();
        let offer = put.clone();
        let policy =
            Policy { overwrite: put.overwrite, preserve: put.preserve, checksum: put.checksum };
        let Landing { planned, tree, manifest, resume } = blocking(move || {
            let at = resolve(&root, if requested.is_empty() { "." } else { &requested })?;
            land(&found, &root, &at, &offer, policy)
        })
        .await?;
        if planned.keeps_the_file() {
            info!(dest = %planned.dest.display(), "relayed upload of a file kept as it is: nothing to collect");
            let kept = CollectMsg::Accepted {
                job: String::new(),
                have: Vec::new(),
                wanted: planned.wanted,
                skip: Vec::new(),
            };
            return accept(self.send, self.conn, &kept).await;
        }
        let Planned { dest, fs, plan, wanted, .. } = planned;
        let at =
            ChannelRef { session_id: self.session.id, request_id: self.request_id, channel: 0 };
        let secret =
            ChannelSecrets::derive_labelled(self.conn, RELAY_KEY_LABEL, &at)?.client_to_server;
        let files = match &wanted {
            Some(wanted) => wanted.len() as u64,
            None => put.entries.iter().filter(|e| e.kind == EntryKind::File).count() as u64,
        }
        .max(1);
        let listed = Listed {
            token: self.session.token,
            dest: put.dest.clone(),
            files,
            started: unix_now(),
        };
        if collections.writing(&dest) {
            return Err(SessionError::Busy(format!(
                "{}: a relayed upload to it is being collected still (try again once it ended)",
                put.dest
            )));
        }
        let start = Start {
            transfer,
            session: self.session.id,
            key: BlockKey::new(&secret, transfer),
            plan,
            dest,
            fs,
            relays,
            identity: self.shared.jobs.identity(),
            permits: Box::new(permits),
            resume,
            tree,
            policy,
            mode: put.mode.unwrap_or(0o644),
            mtime: put.mtime,
            manifest,
            root: self.session.access.root.clone(),
            token_digest: self.token_digest().unwrap_or_default(),
            restored: None,
            listed,
        };
        let (job, mut events) = blocking(move || Collection::start(start, &collections)).await?;
        let have = job.have();
        info!(job = %job.name(), size = put.size, relays = put.relays.len(), resumed_blocks = have.len(), "relayed upload taken");
        let have = id_ranges(have);
        let accepted = CollectMsg::Accepted { job: job.name(), have, wanted, skip: Vec::new() };
        if let Err(e) = accept(self.send, self.conn, &accepted).await {
            job.sender_left(false);
            return Err(e);
        }
        self.told = true;
        let end = follow(self.send, self.recv, &job, &mut events, &mut |_| {}).await;
        match end {
            Ok(Followed::Done) => Ok(()),
            // The sender left, gave up or broke the protocol: the job goes on with what it
            // placed.
            Ok(Followed::Left { sent }) => {
                job.sender_left(sent);
                Ok(())
            }
            Ok(Followed::Failed(e)) => Err(e),
            Err(e) => {
                job.sender_left(false);
                Err(e)
            }
        }
    }
}
