//! The client in a relayed download's striping (`docs/relay.md`, "Downloads"). In an upload
//! the sender deposits its direct share on the receiver as it deposits on a relay; in a
//! download the receiver is the client, which a server cannot open requests to. So the
//! client asks for its share instead: each [`Take`](sluice_session::relay::Take) on its
//! session with the server gets the next batch the striping's direct worker sealed for it,
//! as a collection from a relay gets a relay's. The worker hands each batch over here
//! ([`hand`]) and learns what the client stored, as it learns it from a relay's `Stored`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::spool::TransferId;
use crate::session::SessionError;
use crate::session::keys::SessionId;
use crate::session::lock;

/// How long a handed batch waits for a take to pick it up before the direct share counts as
/// failed (its batch goes back to the striping). A client in the striping always has a take
/// waiting or about to ask again (a take with nothing for it ends after a couple of seconds);
/// one that stopped asking must not hold its batch for ever.
const PICK_WAIT: Duration = Duration::from_secs(30);

/// A sealed batch the striping's direct worker hands to the client's next `Take`, with the
/// destination's link (the worker's other deposit line's data goes first) and where the
/// outcome goes: the blocks the client stored, or why the take failed.
pub(crate) struct Handed {
    pub(crate) blocks: Vec<(u64, Vec<u8>)>,
    pub(crate) link: Arc<Semaphore>,
    pub(crate) done: oneshot::Sender<Result<Vec<u64>, SessionError>>,
    /// Told when a take picks the batch up; closed when the worker gave up waiting.
    picked: Option<oneshot::Sender<()>>,
}

impl Handed {
    /// Claims the batch for a take: `None` when its worker no longer waits for it (it gave
    /// the batch back).
    pub(crate) fn claim(mut self) -> Option<Handed> {
        let picked = self.picked.take()?;
        picked.send(()).ok().map(|()| self)
    }
}

/// Where a `Take` finds its batches: the receiving side of one download's direct share.
pub(crate) type Queue = Arc<tokio::sync::Mutex<mpsc::Receiver<Handed>>>;

/// A server's relayed downloads whose clients are in the striping, by transfer and by the
/// client's session (only that session's takes find one).
#[derive(Default)]
pub(crate) struct Takes {
    running: Mutex<HashMap<(TransferId, SessionId), Queue>>,
}

impl Takes {
    /// Opens `transfer`'s direct share for `session`'s takes: where the worker hands batches,
    /// and a guard that closes it when dropped.
    pub(crate) fn open(
        self: &Arc<Self>,
        transfer: TransferId,
        session: SessionId,
    ) -> (mpsc::Sender<Handed>, Opened) {
        // One batch sealed ahead of the client's next take.
        let (to, from) = mpsc::channel(1);
        let queue = Arc::new(tokio::sync::Mutex::new(from));
        lock(&self.running).insert((transfer, session), queue);
        (to, Opened { takes: self.clone(), key: (transfer, session) })
    }

    /// `transfer`'s direct share, when `session` is its client's and it runs.
    pub(crate) fn find(&self, transfer: &TransferId, session: SessionId) -> Option<Queue> {
        lock(&self.running).get(&(*transfer, session)).cloned()
    }
}

/// A direct share open for takes ([`Takes::open`]) until dropped.
pub(crate) struct Opened {
    takes: Arc<Takes>,
    key: (TransferId, SessionId),
}

impl Drop for Opened {
    fn drop(&mut self) {
        lock(&self.takes.running).remove(&self.key);
    }
}

/// Hands `blocks` to the client's next take and waits for the blocks it stored (a deposit's
/// answer, for the direct share of a download).
pub(crate) async fn hand(
    to: &mpsc::Sender<Handed>,
    blocks: Vec<(u64, Vec<u8>)>,
    link: Arc<Semaphore>,
) -> Result<Vec<u64>, SessionError> {
    hand_within(to, blocks, link, PICK_WAIT).await
}

/// [`hand`], with `wait` for a take to pick the batch up.
async fn hand_within(
    to: &mpsc::Sender<Handed>,
    blocks: Vec<(u64, Vec<u8>)>,
    link: Arc<Semaphore>,
    wait: Duration,
) -> Result<Vec<u64>, SessionError> {
    let (done, outcome) = oneshot::channel();
    let (picked, taken) = oneshot::channel();
    let gone = || SessionError::Network("the client stopped taking its direct share".into());
    let handed = Handed { blocks, link, done, picked: Some(picked) };
    to.send(handed).await.map_err(|_| gone())?;
    match tokio::time::timeout(wait, taken).await {
        Ok(Ok(())) => outcome.await.map_err(|_| gone())?,
        Ok(Err(_)) => Err(gone()),
        Err(_) => Err(SessionError::Network(format!(
            "the client took no batch of its direct share for {:.1} s",
            wait.as_secs_f64()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handed_batch_reaches_its_session_s_take_and_its_outcome_comes_back() {
        let takes = Arc::new(Takes::default());
        let (transfer, session, other) = ([7; 16], SessionId([1; 16]), SessionId([2; 16]));
        let (to, opened) = takes.open(transfer, session);
        assert!(takes.find(&transfer, other).is_none(), "another session's takes find nothing");
        let queue = takes.find(&transfer, session).unwrap();
        let taker = tokio::spawn(async move {
            let handed = queue.lock().await.recv().await.unwrap().claim().unwrap();
            assert_eq!(handed.blocks, vec![(3, vec![9u8; 4])]);
            handed.done.send(Ok(vec![3])).ok();
        });
        let stored = hand(&to, vec![(3, vec![9u8; 4])], Arc::new(Semaphore::new(1))).await;
        assert_eq!(stored.unwrap(), vec![3]);
        taker.await.unwrap();
        drop(opened);
        assert!(takes.find(&transfer, session).is_none(), "closed with its guard");
    }

    #[tokio::test]
    async fn a_take_that_drops_its_batch_fails_the_hand() {
        let takes = Arc::new(Takes::default());
        let (transfer, session) = ([8; 16], SessionId([1; 16]));
        let (to, _opened) = takes.open(transfer, session);
        let queue = takes.find(&transfer, session).unwrap();
        tokio::spawn(async move { drop(queue.lock().await.recv().await.unwrap().claim()) });
        let stored = hand(&to, vec![(0, vec![1])], Arc::new(Semaphore::new(1))).await;
        assert!(matches!(stored, Err(SessionError::Network(_))), "{stored:?}");
    }

    #[tokio::test]
    async fn a_batch_no_take_picks_up_goes_back_and_a_late_take_finds_it_withdrawn() {
        let takes = Arc::new(Takes::default());
        let (transfer, session) = ([9; 16], SessionId([1; 16]));
        let (to, _opened) = takes.open(transfer, session);
        let link = Arc::new(Semaphore::new(1));
        let stored = hand_within(&to, vec![(0, vec![1])], link, Duration::from_millis(20)).await;
        let err = stored.unwrap_err().to_string();
        assert!(err.contains("took no batch"), "{err}");
        let queue = takes.find(&transfer, session).unwrap();
        let late = queue.lock().await.recv().await.unwrap();
        assert!(late.claim().is_none(), "the worker gave that batch back");
    }
}
