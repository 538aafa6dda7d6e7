//! A relayed transfer's receiving end as both receivers run it (a server taking a relayed
//! upload, a client taking a relayed download): where the sender's offer lands (the file or
//! the tree planned with the overwrite policy, and which files move), the relays it names, and
//! following the sender's reports while it is there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_session::relay::{BlockPlan, CollectMsg, MAX_RELAYS, RelayedPut, StripeMsg, from_hex};
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::warn;

use super::collect::{
    Collection, Collections, JobEvent, Policy, RelayAt, Stalled, manifest_id, plan_tree,
};
use crate::files::Confined;
use crate::session::SessionError;
use crate::session::channel::frame_error;
use crate::session::copy::plan_error;
use crate::session::identity::Fingerprint;
use crate::session::messages::{Messages, write_message};
use crate::tree::incoming::{Incoming, Plan};
use crate::tree::{Entry, EntryKind};

/// Where a relayed transfer lands, planned (not yet prepared) from the sender's offer.
pub(crate) struct Planned {
    /// The file, or the directory a tree lands beneath.
    pub(crate) dest: PathBuf,
    /// The receiver's files, beneath its root.
    pub(crate) fs: Confined,
    /// A tree's plan, to prepare (its temporary files made) once no stalled run takes it.
    pub(crate) tree: Option<Plan>,
    /// The blocks of what moves.
    pub(crate) plan: BlockPlan,
    /// The files that move when not all do (a tree's numbers among its files); empty for one
    /// file kept as it is (nothing moves).
    pub(crate) wanted: Option<Vec<u32>>,
    /// Whether it is one file (not a tree).
    one_file: bool,
}

impl Planned {
    /// One file that exists and that the overwrite policy keeps: nothing moves.
    pub(crate) fn keeps_the_file(&self) -> bool {
        self.one_file && self.wanted.as_ref().is_some_and(Vec::is_empty)
    }
}

/// A relay's address and fingerprint as its sender named them, parsed.
pub(crate) fn relay_peer(
    address: &str,
    fingerprint: &str,
) -> Result<(SocketAddr, Fingerprint), SessionError> {
    let bad = |what: &str| SessionError::Protocol(format!("relay {address}: bad {what}"));
    Ok((
        address.parse().map_err(|_| bad("address"))?,
        fingerprint.parse().map_err(|_| bad("fingerprint"))?,
    ))
}

/// The relays `put` names, parsed (at most [`MAX_RELAYS`]).
pub(crate) fn relays_of(put: &RelayedPut) -> Result<Vec<RelayAt>, SessionError> {
    if put.relays.len() > MAX_RELAYS {
        return Err(SessionError::Refused(format!("at most {MAX_RELAYS} relays")));
    }
    put.relays
        .iter()
        .map(|r| {
            let (address, fingerprint) = relay_peer(&r.address, &r.fingerprint)?;
            let capability = from_hex::<32>(&r.capability).ok_or_else(|| {
                SessionError::Protocol(format!("relay {}: bad capability", r.address))
            })?;
            Ok(RelayAt { address, fingerprint, capability })
        })
        .collect()
}

/// Where a relayed transfer lands and what it starts from: the plan, a tree's prepared plan
/// (its temporary files made) and manifest ([`manifest_id`]), and a stalled job of the same
/// copy to go on from.
pub(crate) struct Landing {
    pub(crate) planned: Planned,
    pub(crate) tree: Option<Incoming>,
    pub(crate) manifest: Option<blake3::Hash>,
    pub(crate) resume: Option<Stalled>,
}

/// Plans where `put` lands ([`plan_landing`]) and takes up a stalled job of the same copy
/// among `found`'s (its plan and a tree's manifest the same), unless a running one writes
/// there: a stalled tree goes on in its own temporary files (they hold its paths' claims);
/// any other tree is prepared afresh. Nothing is taken up for one file that is kept as it is.
/// Does file I/O.
pub(crate) fn land(
    found: &Collections,
    root: &Path,
    at: &Path,
    put: &RelayedPut,
    policy: Policy,
) -> Result<Landing, SessionError> {
    let mut planned = plan_landing(root, at, put, policy)?;
    let tree_plan = planned.tree.take();
    if planned.keeps_the_file() {
        return Ok(Landing { planned, tree: None, manifest: None, resume: None });
    }
    let manifest = (!put.entries.is_empty()).then(|| manifest_id(&put.entries));
    let resume = match found.writing(&planned.dest) {
        true => None,
        false => found.take_stalled(&planned.dest, &planned.plan, manifest),
    };
    let tree = match (tree_plan, &resume) {
        (Some(plan), None) => Some(plan.prepare().map_err(plan_error)?),
        _ => None,
    };
    Ok(Landing { planned, tree, manifest, resume })
}

/// Plans where `put` lands at `at` beneath `root` (a file: `at`, or `at/name` when `at` is a
/// directory; a tree: beneath `at`), by `policy`. Does file I/O.
pub(crate) fn plan_landing(
    root: &Path,
    at: &Path,
    put: &RelayedPut,
    policy: Policy,
) -> Result<Planned, SessionError> {
    let name = &put.name;
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(SessionError::Refused(format!("bad file name {name:?}")));
    }
    let plan = BlockPlan::new(put.size, put.block_bytes).map_err(SessionError::Refused)?;
    let fs = Confined::new(Some(root))
        .map_err(|e| SessionError::io("opening the destination's directory", e))?;
    if !put.entries.is_empty() {
        let files = put.entries.iter().filter(|e| e.kind == EntryKind::File);
        let (count, bytes) = files.fold((0, 0u64), |(n, b), e| (n + 1, b + e.size));
        if bytes != put.size {
            return Err(SessionError::Protocol(format!(
                "a tree of {bytes} bytes announced as {}",
                put.size
            )));
        }
        // The files that move: those the overwrite policy keeps are left out, and the blocks
        // cut only the others' bytes (the sender is told which).
        let tree = plan_tree(root, at, put.entries.clone(), policy)?;
        let wanted = (tree.wanted().len() < count).then(|| tree.wanted().to_vec());
        let plan =
            BlockPlan::new(tree.wanted_bytes(), put.block_bytes).map_err(SessionError::Refused)?;
        let tree = Some(tree);
        return Ok(Planned { dest: at.to_owned(), fs, tree, plan, wanted, one_file: false });
    }
    let dest = if fs.is_dir(at) { at.join(name) } else { at.to_owned() };
    let mut wanted = None;
    if fs.symlink_metadata(&dest).is_ok() {
        // The file exists: the policy decides as for a copy's (one file planned as a manifest
        // of one entry). Kept, nothing moves (`wanted` empty).
        let entry = Entry {
            path: name.clone(),
            kind: EntryKind::File,
            size: put.size,
            mtime: put.mtime.unwrap_or(0),
            mode: 0o644,
            target: None,
            blake3: put.blake3.clone(),
        };
        if plan_tree(root, &dest, vec![entry], policy)?.wanted().is_empty() {
            wanted = Some(Vec::new());
        }
    }
    Ok(Planned { dest, fs, tree: None, plan, wanted, one_file: true })
}

/// How following the sender ended.
#[derive(Debug)]
pub(crate) enum Followed {
    /// The job ended well (the receiver told the sender `Done`).
    Done,
    /// The sender left (after `Sent` when `sent`) or gave up: the job goes on with what the
    /// sender placed.
    Left { sent: bool },
    /// The job failed (the sender was told why).
    Failed(SessionError),
}

/// What a receiver hears of its sender, besides what its job takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard<'a> {
    /// These blocks are on this relay.
    Placed(u32, &'a [u64]),
    /// Every block is safe: the sender's part is done.
    Sent,
}

/// Follows a relayed transfer's sender on its stream (`StripeMsg`s in, `CollectMsg`s out)
/// until the job ends or the sender leaves; `heard` hears of each report of blocks on a
/// relay and of `Sent`. The error is the sender's breach of the protocol (the job goes on).
pub(crate) async fn follow(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    job: &Arc<Collection>,
    events: &mut UnboundedReceiver<JobEvent>,
    heard: &mut (dyn FnMut(Heard<'_>) + Send),
) -> Result<Followed, SessionError> {
    let mut reports = Messages::<StripeMsg>::new(recv);
    let mut sent = false;
    loop {
        tokio::select! {
            msg = reports.next() => match msg {
                Ok(StripeMsg::Placed { relay, blocks }) => {
                    job.placed(relay, &blocks)?;
                    heard(Heard::Placed(relay, &blocks));
                }
                Ok(StripeMsg::Digest { blake3 }) => {
                    let hash = blake3::Hash::from_hex(&blake3)
                        .map_err(|_| SessionError::Protocol("bad BLAKE3".into()))?;
                    job.digest(hash);
                }
                Ok(StripeMsg::Sent) => {
                    sent = true;
                    job.sent();
                    heard(Heard::Sent);
                }
                Ok(StripeMsg::Offer(_)) => {
                    return Err(SessionError::Protocol("an Offer once the transfer runs".into()));
                }
                Ok(StripeMsg::Failed { code, message }) => {
                    warn!(?code, message, "the sender gave up its relayed transfer");
                    return Ok(Followed::Left { sent });
                }
                Err(_) => return Ok(Followed::Left { sent }),
            },
            event = events.recv() => match event {
                Some(JobEvent::Refetch(blocks)) => {
                    let msg = CollectMsg::Refetch { blocks };
                    let _ = write_message(send, &msg).await;
                }
                Some(JobEvent::End(Ok(bytes))) => {
                    let _ = write_message(send, &CollectMsg::Done { bytes }).await;
                    return Ok(Followed::Done);
                }
                Some(JobEvent::End(Err(e))) => {
                    let msg = CollectMsg::Failed { code: e.code(), message: e.detail() };
                    let _ = write_message(send, &msg).await;
                    return Ok(Followed::Failed(e));
                }
                None => return Ok(Followed::Done),
            },
        }
    }
}

/// Writes the receiver's answer to the offer.
pub(crate) async fn accept(
    send: &mut quinn::SendStream,
    conn: &quinn::Connection,
    answer: &CollectMsg,
) -> Result<(), SessionError> {
    write_message(send, answer).await.map_err(|e| frame_error(e, conn))
}
