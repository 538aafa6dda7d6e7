//! The relay plane (FSP striping through intermediate nodes; `docs/relay.md`).
//!
//! - [`spool`]: a relay's bounded on-disk store of sealed blocks;
//! - [`seal`]: the blocks' end-to-end sealing with a key no relay holds;
//! - [`hop`]: one hop's batch of blocks over the session's UDP data channels;
//! - [`collect`]: a relayed upload's receiving end, a job on the receiving server;
//! - [`landing`]: where a relayed transfer lands at either receiver, and following its sender;
//! - [`collect_record`]: that job as the server's state directory keeps it across a restart;
//! - [`verify`]: that job's check of the whole, hashed as the written part grows;
//! - [`stripe`]: a relayed transfer's sending end, its striping;
//! - [`take`]: a relayed download's client taking its direct share of the striping.

pub(crate) mod collect;
pub(crate) mod collect_record;
pub(crate) mod hop;
pub(crate) mod landing;
pub mod seal;
pub mod spool;
pub mod stripe;
pub(crate) mod take;
pub(crate) mod verify;

use sluice_session::relay::{
    BlockLen, CAPABILITY_TAG, MAX_BATCH_BLOCKS, MAX_BLOCK_BYTES, SEAL_OVERHEAD, from_hex, to_hex,
};

use super::SessionError;
use super::identity::Fingerprint;
use super::messages::GrantClaim;
use spool::TransferId;

/// Feeds `range` of `store` to `each` in order, a MiB at a time (hashing a file or a tree's
/// offset space).
pub(crate) fn read_range(
    store: &dyn crate::datapath::Store,
    range: std::ops::Range<u64>,
    each: &mut dyn FnMut(&[u8]),
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = range.start;
    while at < range.end {
        let n = ((range.end - at) as usize).min(buf.len());
        crate::datapath::read_exact_at(store, &mut buf[..n], at)?;
        each(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

/// What a relay keeps of a collector's capability: a BLAKE3 of the capability and the
/// certificate fingerprint of the one receiver that may present it (64 hex digits). A relay
/// admits a session only when its capability and the certificate it proved hash to this, so a
/// capability that leaks is of no use to another peer.
pub fn collector_hash(capability: &[u8; 32], collector: &Fingerprint) -> String {
    let mut hasher = blake3::Hasher::new_derive_key("sluice relay collector v1");
    hasher.update(capability);
    hasher.update(collector.as_str().as_bytes());
    to_hex(hasher.finalize().as_bytes())
}

/// What a collector presents in `Hello` (in [`super::ClientConfig::grant`]) to a relay: the
/// capability of `transfer` there (both as bytes; the wire carries hex).
pub fn capability_claim(transfer: &[u8; 16], capability: &[u8; 32]) -> GrantClaim {
    GrantClaim { grant: format!("{CAPABILITY_TAG}{}", to_hex(capability)), job: to_hex(transfer) }
}

/// A transfer id from the wire.
pub(crate) fn transfer_id(hex: &str) -> Result<TransferId, SessionError> {
    from_hex::<16>(hex)
        .ok_or_else(|| SessionError::Protocol(format!("bad transfer id {hex:?}: 32 hex digits")))
}

/// Refuses a batch that is empty, too large, repeats a block, or has a block beyond the
/// largest sealed block.
pub(crate) fn check_batch(blocks: &[BlockLen]) -> Result<u64, SessionError> {
    if blocks.is_empty() || blocks.len() > MAX_BATCH_BLOCKS {
        return Err(SessionError::Protocol(format!(
            "a batch of {} blocks: between 1 and {MAX_BATCH_BLOCKS}",
            blocks.len()
        )));
    }
    let mut ids: Vec<u64> = blocks.iter().map(|b| b.id).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != blocks.len() {
        return Err(SessionError::Protocol("a batch names a block twice".into()));
    }
    if let Some(b) = blocks.iter().find(|b| b.len == 0 || b.len > MAX_BLOCK_BYTES + SEAL_OVERHEAD) {
        return Err(SessionError::Protocol(format!("block {} of {} bytes", b.id, b.len)));
    }
    Ok(blocks.iter().map(|b| b.len).sum())
}
