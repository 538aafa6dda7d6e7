//! The relay plane (FSP striping, `docs/relay.md`) as pure logic: its messages, how a file is
//! cut into blocks, and which destination takes which block by strategy.
//!
//! A relayed upload has three kinds of party: the sending end (the client, with the file), the
//! receiving end (a server, which collects) and relays (servers with a spool). The sender cuts
//! the file into blocks ([`BlockPlan`]), seals each with a key of its session with the receiver,
//! and hands them out ([`Stripe`]) to the relays and the receiver itself. A hop to or from a
//! relay is a request of its own on a session with that relay: [`Deposit`] (the sender's, under
//! a token of the relay's) or [`Collect`] (the receiver's, under the transfer's capability),
//! then [`HopMsg`]s. The relayed request on the sender's session with the receiver is
//! [`RelayedPut`], then [`StripeMsg`]s from the sender and [`CollectMsg`]s from the receiver.

use std::collections::VecDeque;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::messages::ErrorCode;
use crate::options::Overwrite;

/// The tag a collector's capability starts with, as it is presented in `Hello` (in the grant
/// field, [`crate::messages::GrantClaim`], with the transfer id as the job).
pub const CAPABILITY_TAG: &str = "sluice-relay-cap-v1.";
/// The most blocks one deposit or collection moves.
pub const MAX_BATCH_BLOCKS: usize = 256;
/// The largest block a plan may have (its sealed form adds [`SEAL_OVERHEAD`]).
pub const MAX_BLOCK_BYTES: u64 = 64 << 20;
/// The smallest block a plan may have.
pub const MIN_BLOCK_BYTES: u64 = 64 << 10;
/// The block size a sender uses unless told otherwise.
pub const DEFAULT_BLOCK_BYTES: u64 = 4 << 20;
/// Bytes a sealed block has beyond its (compressed or plain) payload: a flag byte and the
/// AEAD tag.
pub const SEAL_OVERHEAD: u64 = 1 + 16;
/// The most blocks one transfer has (4 TiB in blocks of 4 MiB): the receiver keeps a few
/// bytes of state per block.
pub const MAX_BLOCKS: u64 = 1 << 20;
/// The most relays one transfer stripes over.
pub const MAX_RELAYS: usize = 16;

/// A block of a deposit or a collection, with the length of its sealed form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockLen {
    /// The block's index in its transfer's [`BlockPlan`].
    pub id: u64,
    /// Bytes of its sealed form.
    pub len: u64,
}

/// A sender's request to a relay: keep these sealed blocks of `transfer` until their
/// collector, who proves the capability whose BLAKE3 is `capability_hash`, takes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deposit {
    /// The transfer's id: 32 hex digits, chosen at random by the sender.
    pub transfer: String,
    /// BLAKE3 of the collector's capability at this relay, 64 hex digits. A relay keeps only
    /// this; every deposit of a transfer must name the same.
    pub capability_hash: String,
    /// The blocks, in the order their bytes follow each other on the data channels.
    pub blocks: Vec<BlockLen>,
}

/// A collector's request to a relay: send these blocks of `transfer` (the session's own; its
/// capability admitted it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collect {
    /// The transfer's id.
    pub transfer: String,
    /// The blocks wanted.
    pub blocks: Vec<u64>,
}

/// A relayed download's client in the striping (`RelayedGet::direct`): the next batch the
/// server stripes to it directly, on the client's own session with the server. Answered with
/// [`HopMsg::Holding`] (none: nothing for it now, ask again), the batch's data as a
/// collection's, and the client's [`HopMsg::Stored`] once it wrote what opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Take {
    /// The transfer's id (the offer's).
    pub transfer: String,
}

/// What either end of a hop (a deposit or a collection) says after the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HopMsg {
    /// The receiving end of the hop's data is ready on these ports (one per channel), or the
    /// sending end sends from these.
    Ready {
        /// Ports, channel 0 first.
        udp_ports: Vec<u16>,
    },
    /// The relay holds these blocks durably (written and fsync'd): the deposit's answer.
    Stored {
        /// The blocks' ids.
        blocks: Vec<u64>,
    },
    /// The relay's answer to a collection: the blocks it holds of those asked for, whose bytes
    /// follow in this order once the collector is `Ready`.
    Holding {
        /// The blocks and their sealed lengths.
        blocks: Vec<BlockLen>,
    },
    /// The collector has these blocks safe: the relay deletes them.
    Release {
        /// The blocks' ids.
        blocks: Vec<u64>,
    },
    /// The relay deleted what was released.
    Released,
    /// Either end gives up.
    Failed {
        /// The class of the failure.
        code: ErrorCode,
        /// What happened.
        message: String,
    },
}

/// A relay a transfer stripes over, as the sender tells the receiver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelaySpot {
    /// Its QUIC address as the sender reached it (`ip:port`).
    pub address: String,
    /// Its fingerprint as the sender pinned it (`SHA256:...`).
    pub fingerprint: String,
    /// The collector's capability there, 64 hex digits (the relay holds only its hash).
    pub capability: String,
    /// The name the sender knows it by (for the receiver's reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A relay as a server dials it to measure its round trip (`Request::RelayRtts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayPeer {
    /// Its QUIC address as the sender reached it (`ip:port`).
    pub address: String,
    /// Its fingerprint as the sender pinned it (`SHA256:...`).
    pub fingerprint: String,
}

/// A relayed upload, on the sender's session with the receiver: the receiver takes it as a
/// job that collects the blocks from where the sender reports them and goes on when the
/// sender has left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayedPut {
    /// Where, relative to the server's root, as for `Put` (one file).
    pub dest: String,
    /// The file's name, used when `dest` is a directory.
    pub name: String,
    /// A file at the destination.
    #[serde(default)]
    pub overwrite: Overwrite,
    /// The file's size in bytes.
    pub size: u64,
    /// One file's modification time, seconds since the Unix epoch: for the overwrite
    /// policies that compare it (`if-newer`, `if-different`) when the file exists at the
    /// destination. A tree's are in `entries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<i64>,
    /// One file's permission bits: the file lands 0755 when the source was executable, else
    /// 0644, as a copy's does. A tree's are in `entries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Keep the sender's permission bits and modification times (`--preserve`), as a copy
    /// does; else files land 0644 (0755 when executable) with the time of their arrival.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve: bool,
    /// `if-different` compares content (`--checksum`): a tree's entries carry each file's
    /// BLAKE3, and one file's is `blake3`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checksum: bool,
    /// One file's BLAKE3, hex, when `checksum`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
    /// Bytes per block (the last may be shorter).
    pub block_bytes: u64,
    /// The transfer's id, 32 hex digits.
    pub transfer: String,
    /// The relays, in the order [`StripeMsg::Placed`] numbers them.
    pub relays: Vec<RelaySpot>,
    /// A tree's manifest (empty: one file, `name`): the blocks then cut its files' bytes laid
    /// end to end in manifest order (`size` is their sum), and the digest is the BLAKE3 of
    /// that whole offset space; of the files that move only, when the receiver's answer names
    /// them (`CollectMsg::Accepted`'s `wanted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<crate::manifest::Entry>,
}

/// A relayed download, on the client's session with the server that sends (FSP with the
/// server as the sending end): the server stripes the file or tree over relays of its own
/// (`[relays.NAME]` of its config file, `sluice serve --config`) and the client collects from them.
/// The server answers with [`StripeMsg::Offer`] (what it sends, where, and the client's
/// capability at each relay); the client answers [`CollectMsg::Accepted`] once it planned
/// where the blocks land; then [`StripeMsg`]s and [`CollectMsg`]s as for a relayed upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayedGet {
    /// What to send, relative to the server's root: a file, or a directory with `recursive`.
    pub path: String,
    /// A directory and everything beneath it.
    #[serde(default)]
    pub recursive: bool,
    /// The server's relays to stripe over, by the names its configuration gives them.
    pub relays: Vec<String>,
    /// Who takes which blocks.
    #[serde(default)]
    pub strategy: Strategy,
    /// Bytes per block.
    pub block_bytes: u64,
    /// Compress each block at this zstd level when it shrinks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<i32>,
    /// On how many relays a block must be before it counts as safe (1 or 2).
    #[serde(default = "one_copy")]
    pub copies: u8,
    /// Keep only relays whose round trip from the server is at most this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rtt_sender_ms: Option<u64>,
    /// The client compares by content (`--checksum`): the offer carries each file's BLAKE3.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checksum: bool,
    /// The certificate the client collects with (`SHA256:...`): each relay admits only it
    /// with the capability the server makes for the client there.
    pub collector: String,
    /// The client takes blocks directly too ("in the striping"), asking for them with
    /// [`Take`]; without, the server stripes over its relays only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
}

fn one_copy() -> u8 {
    1
}

/// What the sender says on a relayed upload's stream after its request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StripeMsg {
    /// A relayed download's answer to [`RelayedGet`]: what the server sends (`dest` is
    /// empty; the client decides where it lands) and the relays it stripes over.
    Offer(Box<RelayedPut>),
    /// These blocks are durable on relay `relay` (an index into `RelayedPut::relays`).
    Placed {
        /// The relay.
        relay: u32,
        /// The blocks.
        blocks: Vec<u64>,
    },
    /// The BLAKE3 of the whole file (of a tree: of its files' bytes end to end), hex.
    Digest {
        /// The hash.
        blake3: String,
    },
    /// Every block is on the receiver or durable on a relay: the sender leaves.
    Sent,
    /// The sender gives up.
    Failed {
        /// The class of the failure.
        code: ErrorCode,
        /// What happened.
        message: String,
    },
}

/// What the receiver says on a relayed upload's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CollectMsg {
    /// The job is set up: deposits of the transfer on this session go straight to it.
    Accepted {
        /// The job's name, for `sluice jobs`.
        job: String,
        /// Blocks the receiver has already (ranges of block ids, `[start, end)`): a re-run of
        /// a copy whose sender left blocks nowhere to collect moves only the others.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        have: Vec<[u64; 2]>,
        /// A tree's files that move (numbers among the manifest's files, in order), when its
        /// overwrite policy keeps some that exist: the blocks then cut only those files'
        /// bytes, end to end. Absent: every file moves.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wanted: Option<Vec<u32>>,
        /// Relays the receiver leaves out (numbers among the offer's): a relayed download's
        /// client keeps only those within its round-trip limit. The sender stripes over the
        /// others.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skip: Vec<u32>,
    },
    /// These blocks could not be had from where they were (a relay's copy did not open, or
    /// the relay lost it): the sender, while it is there, deposits them with the receiver.
    Refetch {
        /// The blocks.
        blocks: Vec<u64>,
    },
    /// The file is verified and in place (said when the sender is still there).
    Done {
        /// Bytes of the file.
        bytes: u64,
    },
    /// The receiver gives up.
    Failed {
        /// The class of the failure.
        code: ErrorCode,
        /// What happened.
        message: String,
    },
}

/// How a file of `size` bytes is cut into blocks of `block_bytes` (the last may be shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPlan {
    /// Bytes of the file.
    pub size: u64,
    /// Bytes per block.
    pub block_bytes: u64,
}

impl BlockPlan {
    /// The plan of `size` bytes in blocks of `block_bytes`, which must lie in
    /// [`MIN_BLOCK_BYTES`]..=[`MAX_BLOCK_BYTES`].
    pub fn new(size: u64, block_bytes: u64) -> Result<BlockPlan, String> {
        if !(MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&block_bytes) {
            return Err(format!(
                "a block of {block_bytes} bytes: between {MIN_BLOCK_BYTES} and {MAX_BLOCK_BYTES} \
                 are possible"
            ));
        }
        let plan = BlockPlan { size, block_bytes };
        if plan.count() > MAX_BLOCKS {
            return Err(format!(
                "{size} bytes in blocks of {block_bytes} are {} blocks: at most {MAX_BLOCKS} \
                 (choose larger blocks)",
                plan.count()
            ));
        }
        Ok(plan)
    }

    /// How many blocks.
    pub fn count(&self) -> u64 {
        self.size.div_ceil(self.block_bytes)
    }

    /// The file bytes of block `id`, or `None` past the end.
    pub fn range(&self, id: u64) -> Option<Range<u64>> {
        (id < self.count()).then(|| {
            let start = id * self.block_bytes;
            start..(start + self.block_bytes).min(self.size)
        })
    }

    /// The largest sealed length block `id` may have (its payload never grows by sealing
    /// beyond [`SEAL_OVERHEAD`]: a block that does not shrink is sent plain).
    pub fn max_sealed(&self, id: u64) -> Option<u64> {
        self.range(id).map(|r| r.end - r.start + SEAL_OVERHEAD)
    }
}

/// How blocks are handed out among destinations (FSP section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// First come, first served: whoever is ready takes the next blocks, so a faster
    /// destination takes more.
    #[default]
    Fcfs,
    /// Round robin: block `i` goes to destination `i mod n`.
    Cyclic,
    /// Each destination an equal contiguous share.
    Partitioned,
}

impl Strategy {
    /// The strategy named `name` (`fcfs`, `cyclic`, `partitioned`).
    pub fn from_name(name: &str) -> Option<Strategy> {
        match name {
            "fcfs" => Some(Strategy::Fcfs),
            "cyclic" => Some(Strategy::Cyclic),
            "partitioned" => Some(Strategy::Partitioned),
            _ => None,
        }
    }
}

/// Which blocks each destination takes next. Destinations `0..sharing` share the blocks by
/// the strategy; one beyond them (the direct path, when the receiver is not in the striping)
/// takes only blocks assigned to it and blocks given back. Blocks assigned to a destination
/// are its first; blocks a destination gives back (it failed) are taken next by whoever asks,
/// whatever the strategy.
#[derive(Debug, Clone)]
pub struct Stripe {
    /// Blocks of each sharing destination's own share (one shared queue under `fcfs`).
    shares: Vec<VecDeque<u64>>,
    strategy: Strategy,
    /// Blocks given back, for anyone.
    orphans: VecDeque<u64>,
    /// Blocks for one destination only, by destination.
    assigned: Vec<(usize, u64)>,
    /// How many destinations share by the strategy.
    sharing: usize,
    /// Blocks that need another copy, and the destination that holds one (`--relay-copies
    /// 2`): any other sharing destination takes them, first.
    again: VecDeque<(u64, usize)>,
    /// Batches each sharing destination holds at once (taken, not yet safe): under `fcfs` no
    /// take is more than an even share of what is left among all of them ([`Stripe::take`]).
    held: usize,
}

impl Stripe {
    /// `blocks` (in this order) shared over `sharing` destinations (at least one), each
    /// holding up to `held` batches at once (a sending end's deposit under way and the next one
    /// ready behind it: 2).
    pub fn new(strategy: Strategy, blocks: &[u64], sharing: usize, held: usize) -> Stripe {
        let n = sharing.max(1);
        let count = blocks.len() as u128;
        let mut shares = vec![VecDeque::new(); if strategy == Strategy::Fcfs { 1 } else { n }];
        for (i, &id) in blocks.iter().enumerate() {
            let at = match strategy {
                Strategy::Fcfs => 0,
                Strategy::Cyclic => i % n,
                // Share k is the blocks at [k*count/n, (k+1)*count/n).
                Strategy::Partitioned => ((i as u128 * n as u128) / count) as usize,
            };
            shares[at].push_back(id);
        }
        Stripe {
            shares,
            strategy,
            orphans: VecDeque::new(),
            assigned: Vec::new(),
            sharing: n,
            again: VecDeque::new(),
            held: held.max(1),
        }
    }

    /// Up to `max` blocks for destination `dest` to take now; empty when it has nothing left.
    ///
    /// Under `fcfs` the end is tapered: a take is at most an even share of the blocks anyone
    /// may take (the shared queue and those given back), over every batch the sharing
    /// destinations hold at once, and at least one block. The last destination to make its
    /// blocks safe sets the send time; with whole batches to the end, a far destination's
    /// (several blocks, scaled to its round trip) and the one ready behind it ended half a
    /// second after the others in the relay topology, which stood idle meanwhile.
    pub fn take(&mut self, dest: usize, max: usize) -> Vec<u64> {
        let max = if self.strategy == Strategy::Fcfs {
            let open = self.shares.iter().map(VecDeque::len).sum::<usize>() + self.orphans.len();
            max.min(open.div_ceil(self.sharing * self.held).max(1))
        } else {
            max
        };
        let mut out = Vec::new();
        self.assigned.retain(|&(d, id)| {
            let mine = d == dest && out.len() < max;
            if mine {
                out.push(id);
            }
            !mine
        });
        self.again.retain(|&(id, holder)| {
            let mine = holder != dest && dest < self.sharing && out.len() < max;
            if mine {
                out.push(id);
            }
            !mine
        });
        while out.len() < max
            && let Some(id) = self.orphans.pop_front()
        {
            out.push(id);
        }
        let share = if self.strategy == Strategy::Fcfs { 0 } else { dest };
        if dest < self.sharing
            && let Some(queue) = self.shares.get_mut(share)
        {
            while out.len() < max
                && let Some(id) = queue.pop_front()
            {
                out.push(id);
            }
        }
        out
    }

    /// Destination `dest` is gone: its share that nobody took, and `blocks` it had taken but
    /// not placed, go to whoever asks next.
    pub fn give_back(&mut self, dest: usize, blocks: impl IntoIterator<Item = u64>) {
        self.orphans.extend(blocks);
        if self.strategy != Strategy::Fcfs
            && let Some(queue) = self.shares.get_mut(dest)
        {
            self.orphans.extend(queue.drain(..));
        }
    }

    /// `blocks` go to destination `dest` only (the receiver asks for them again: they go the
    /// direct way).
    pub fn assign(&mut self, dest: usize, blocks: impl IntoIterator<Item = u64>) {
        self.assigned.extend(blocks.into_iter().map(|id| (dest, id)));
    }

    /// Block `id`, which destination `holder` has, needs a copy elsewhere too: whoever else
    /// asks next takes it.
    pub fn again_elsewhere(&mut self, id: u64, holder: usize) {
        self.again.push_back((id, holder));
    }

    /// Whether every block has been taken.
    pub fn is_empty(&self) -> bool {
        self.again.is_empty()
            && self.orphans.is_empty()
            && self.assigned.is_empty()
            && self.shares.iter().all(VecDeque::is_empty)
    }
}

/// Ranges `[start, end)` of the ids in `ids` (sorted, each once): the compact form of a set of
/// blocks on the wire.
pub fn id_ranges(ids: impl IntoIterator<Item = u64>) -> Vec<[u64; 2]> {
    let mut out: Vec<[u64; 2]> = Vec::new();
    for id in ids {
        match out.last_mut() {
            Some(last) if last[1] == id => last[1] = id + 1,
            _ => out.push([id, id + 1]),
        }
    }
    out
}

/// Parses 2n lowercase or uppercase hex digits into n bytes.
pub fn from_hex<const N: usize>(hex: &str) -> Option<[u8; N]> {
    if hex.len() != 2 * N || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(count: u64) -> Vec<u64> {
        (0..count).collect()
    }

    fn drain(stripe: &mut Stripe, dests: usize) -> Vec<Vec<u64>> {
        let mut got = vec![Vec::new(); dests];
        loop {
            let mut any = false;
            for (d, g) in got.iter_mut().enumerate() {
                let taken = stripe.take(d, 2);
                any |= !taken.is_empty();
                g.extend(taken);
            }
            if !any {
                return got;
            }
        }
    }

    #[test]
    fn strategies_hand_out_every_block_once() {
        let cyclic = drain(&mut Stripe::new(Strategy::Cyclic, &ids(7), 3, 1), 3);
        assert_eq!(cyclic, vec![vec![0, 3, 6], vec![1, 4], vec![2, 5]]);
        let parted = drain(&mut Stripe::new(Strategy::Partitioned, &ids(7), 3, 1), 3);
        assert_eq!(parted, vec![vec![0, 1, 2], vec![3, 4], vec![5, 6]]);
        let fcfs = drain(&mut Stripe::new(Strategy::Fcfs, &ids(7), 3, 1), 3);
        // Tapered: 7 open over 3 takers, at most 3 a take; then 5 (2), 3 (1), 2 (1), 1.
        assert_eq!(fcfs, vec![vec![0, 1, 5], vec![2, 3, 6], vec![4]]);
        for got in [cyclic, parted, fcfs] {
            let mut all: Vec<u64> = got.concat();
            all.sort_unstable();
            assert_eq!(all, (0..7).collect::<Vec<_>>());
        }
    }

    #[test]
    fn fcfs_tapers_its_takes_to_an_even_share_of_what_is_left() {
        // 4 destinations holding 2 batches each: 8 takers.
        let mut stripe = Stripe::new(Strategy::Fcfs, &ids(40), 4, 2);
        assert_eq!(stripe.take(3, 4), vec![0, 1, 2, 3], "whole batches while plenty is left");
        assert_eq!(stripe.take(0, 4).len(), 4);
        assert_eq!(stripe.take(1, 4).len(), 4);
        assert_eq!(stripe.take(2, 4).len(), 4);
        // 24 left over 8 takers: 3 a take.
        assert_eq!(stripe.take(3, 4), vec![16, 17, 18]);
        // 21 left: 3; 18: 3; 15: 2; 13: 2; 11: 2; 9: 2; 7: 1 ...
        let sizes: Vec<usize> = std::iter::from_fn(|| {
            let got = stripe.take(3, 4).len();
            (got > 0).then_some(got)
        })
        .collect();
        assert_eq!(sizes, vec![3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1]);
        assert!(stripe.is_empty());
        // Blocks given back are shared the same way; other strategies keep whole batches.
        let mut stripe = Stripe::new(Strategy::Fcfs, &[], 2, 2);
        stripe.give_back(0, 0..8);
        assert_eq!(stripe.take(1, 4), vec![0, 1]);
        let mut stripe = Stripe::new(Strategy::Cyclic, &ids(8), 2, 2);
        assert_eq!(stripe.take(0, 4), vec![0, 2, 4, 6]);
    }

    #[test]
    fn a_destination_beyond_the_sharing_ones_takes_only_what_is_assigned_or_given_back() {
        for strategy in [Strategy::Fcfs, Strategy::Cyclic] {
            let mut stripe = Stripe::new(strategy, &ids(4), 1, 1);
            assert_eq!(stripe.take(1, 10), Vec::<u64>::new(), "{strategy:?}");
            assert_eq!(stripe.take(0, 10), vec![0, 1, 2, 3], "{strategy:?}");
            stripe.assign(1, [2]);
            assert_eq!(stripe.take(0, 10), Vec::<u64>::new(), "{strategy:?}");
            assert_eq!(stripe.take(1, 10), vec![2], "{strategy:?}");
            stripe.give_back(0, [3]);
            assert_eq!(stripe.take(1, 10), vec![3], "{strategy:?}");
            assert!(stripe.is_empty());
        }
    }

    #[test]
    fn a_second_copy_goes_to_another_destination_first() {
        let mut stripe = Stripe::new(Strategy::Cyclic, &ids(4), 2, 1);
        assert_eq!(stripe.take(0, 1), vec![0]);
        stripe.again_elsewhere(0, 0);
        assert_eq!(stripe.take(0, 1), vec![2], "not to its holder");
        assert_eq!(stripe.take(1, 1), vec![0], "before the destination's own share");
        assert_eq!(stripe.take(1, 5), vec![1, 3]);
        assert!(stripe.is_empty());
    }

    #[test]
    fn a_gone_destination_leaves_its_share_to_the_others() {
        let mut stripe = Stripe::new(Strategy::Partitioned, &ids(6), 2, 1);
        assert_eq!(stripe.take(1, 1), vec![3]);
        stripe.give_back(1, [3]);
        assert_eq!(stripe.take(0, 10), vec![3, 4, 5, 0, 1, 2]);
        assert!(stripe.is_empty());
    }

    #[test]
    fn a_re_run_stripes_only_the_blocks_given() {
        let parted = drain(&mut Stripe::new(Strategy::Partitioned, &[1, 4, 5, 9], 2, 1), 2);
        assert_eq!(parted, vec![vec![1, 4], vec![5, 9]]);
        let cyclic = drain(&mut Stripe::new(Strategy::Cyclic, &[1, 4, 5], 2, 1), 2);
        assert_eq!(cyclic, vec![vec![1, 5], vec![4]]);
        assert_eq!(id_ranges([0, 1, 2, 5, 7, 8]), vec![[0, 3], [5, 6], [7, 9]]);
        assert_eq!(id_ranges([]), Vec::<[u64; 2]>::new());
    }

    #[test]
    fn plans_cut_files_into_blocks() {
        let plan = BlockPlan::new(10 * MIN_BLOCK_BYTES + 1, MIN_BLOCK_BYTES).unwrap();
        assert_eq!(plan.count(), 11);
        assert_eq!(plan.range(10), Some(10 * MIN_BLOCK_BYTES..10 * MIN_BLOCK_BYTES + 1));
        assert_eq!(plan.range(11), None);
        assert_eq!(BlockPlan::new(0, MIN_BLOCK_BYTES).unwrap().count(), 0);
        assert!(BlockPlan::new(1, 1).is_err());
        assert!(BlockPlan::new(1, MAX_BLOCK_BYTES + 1).is_err());
        assert!(BlockPlan::new(u64::MAX, MAX_BLOCK_BYTES).is_err(), "a huge file, bounded state");
        assert!(BlockPlan::new(MAX_BLOCKS * MIN_BLOCK_BYTES, MIN_BLOCK_BYTES).is_ok());
        assert_eq!(from_hex::<2>("0aFf"), Some([0x0a, 0xff]));
        assert_eq!(from_hex::<2>("0aF"), None);
        assert_eq!(to_hex(&[0x0a, 0xff]), "0aff");
    }
}
