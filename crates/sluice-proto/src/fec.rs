//! The tail's erasure code: parity over the last round trip's packets, so that the end of a
//! transfer on a lossy path waits for no repair.
//!
//! # Why
//! When a sender has nothing new left to send, a packet it sent `x` before and that was lost is
//! repaired a round trip and a half after it was sent (its NAK, then the repair's way), up to a
//! round trip after the rest of the data arrived. Copies of the last half round trip (the
//! sender's tail copies) bring that down, but a copy takes as much link time as its original,
//! so copies cannot reach further back than the time they take to send: on a 300 ms path the
//! data was complete 1.03 to 1.51 round trips after the tail began, where its last new packet
//! arrives at half a round trip. Parity reaches back the whole round trip for a few percent of
//! its packets.
//!
//! # The code
//! Packets are numbered into blocks of [`SIDE`] × [`SIDE`] by their data sequence number: in a
//! block a packet has a row, a column and a diagonal (row + column, modulo [`SIDE`]). Each row,
//! column and diagonal has a parity: the XOR of its packets, each as its offset (u64), its
//! payload's length (u32) and its payload, padded with zeros. The sender adds every new packet to
//! its three parities as it sends it ([`Coder`]), once the receiver has reported a loss and the end
//! of the data is within two round trips and a block (where the application says how much is left,
//! `Sender::expect_more_bytes`; from the first loss where it does not), and flags those packets as
//! coded (`wire::flags::CODED`). The parities cost three XORs of a packet each and are ready when
//! the tail begins: no computing stands between the last new packet and the parity. The tail then
//! sends the parities of the blocks that hold the last round trip's packets, newest block first,
//! each in two halves (a parity is a packet's size and twelve bytes more).
//!
//! The receiver keeps a copy of every payload from the first coded packet on ([`Retained`]) and
//! rebuilds by peeling ([`Tail`]): a parity with one packet missing gives that packet (the XOR of
//! the parity and the others), which may leave another parity with one missing, and so on. What
//! peeling cannot rebuild (a rectangle of losses, or a packet no longer kept) is left to the NAKs,
//! as without the code; a repair that arrives meanwhile may free a parity, so code and NAKs
//! together never do worse than the NAKs alone.
//!
//! Strength, simulated over 200 round trips of 13,000 packets (a round trip at 500 Mbit/s and
//! 300 ms), parities lost as often as packets: with rows and columns only, some packet was
//! left in 21 % of them at 1 % loss; with the diagonals, in none at 1 % and in 13 % at 3 %. The
//! cost: 3 × 64 parities of a packet's size a block of 4,096 packets, 4.7 % of the last round
//! trip's packets, once; and computing time on every packet coded: the sender's XORs took
//! 215-225 ms per GiB here, the receiver's copies 112-118 ms
//! (`tests::what_coding_and_keeping_cost_per_gib`, release build). Coding from the first loss
//! put that on a lossy transfer's every packet; told where the end is, a sender codes about two
//! round trips and a block of it (a 1 GiB copy at 1 Gbit/s and 300 ms: about 8 %).
//!
//! Reed-Solomon (`reed-solomon-simd`, any `k` of `k + m` shards) was tried first: in the
//! simulator it ended the same transfers as soon, but through linkem the sender's sending turn
//! that coded a round trip of 13,000 packets took 72-106 ms and the receiver's receive batch that
//! rebuilt took 69-105 ms (a unit test's coding and rebuilding alone: 20 and 77 ms), as much as it
//! saved at 300 ms; made as the packets go, XOR parity costs no computing at the tail.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use crate::config::ChannelConfig;
use crate::intervals::IntervalSet;

/// A block is `SIDE` rows of `SIDE` packets.
pub const SIDE: u64 = 64;
/// Packets in a block.
pub const BLOCK_PKTS: u64 = SIDE * SIDE;
/// Parities per packet and per block line: rows, columns, diagonals.
pub const FAMILIES: u8 = 3;
/// The most packets the receiver keeps for rebuilding.
pub const MAX_RETAINED_PKTS: u64 = 32_768;
/// Bytes before the payload in a packet's part of a parity: offset u64, length u32.
const META_LEN: usize = 12;

/// How many of the latest packets the receiver keeps: `tail_code_bytes` of payloads of
/// `payload_size`, at most [`MAX_RETAINED_PKTS`]; the sender codes no block reaching further
/// back. Both ends compute it from the channel's configuration.
pub fn retained_pkts(config: &ChannelConfig) -> u64 {
    MAX_RETAINED_PKTS.min(config.tail_code_bytes / config.payload_size().max(1) as u64)
}

/// Bytes of half a parity, for payloads of at most `max_payload` bytes: a parity packet carries
/// one half.
pub fn half_bytes(max_payload: usize) -> usize {
    (META_LEN + max_payload).div_ceil(2)
}

/// A parity's place in its block: its family (0 rows, 1 columns, 2 diagonals) and index.
pub type Line = (u8, u16);

/// The first sequence number of the block that holds `dsn`.
pub fn block_of(dsn: u64) -> u64 {
    dsn - dsn % BLOCK_PKTS
}

/// The three lines a packet belongs to.
fn lines_of(dsn: u64) -> [Line; 3] {
    let i = dsn % BLOCK_PKTS;
    let (row, col) = (i / SIDE, i % SIDE);
    [(0, row as u16), (1, col as u16), (2, ((row + col) % SIDE) as u16)]
}

/// The packets of `line` in the block at `base`.
fn members(base: u64, (family, index): Line) -> impl Iterator<Item = u64> {
    let index = u64::from(index);
    (0..SIDE).map(move |k| {
        let (row, col) = match family {
            0 => (index, k),
            1 => (k, index),
            _ => (k, (index + SIDE - k) % SIDE),
        };
        base + row * SIDE + col
    })
}

fn line_slot((family, index): Line) -> usize {
    usize::from(family) * SIDE as usize + usize::from(index)
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}

/// XORs a packet (offset, length, payload) into a parity of `META_LEN + max_payload` bytes.
fn add_packet(parity: &mut [u8], offset: u64, payload: &[u8]) {
    xor_into(&mut parity[..8], &offset.to_be_bytes());
    xor_into(&mut parity[8..META_LEN], &(payload.len() as u32).to_be_bytes());
    xor_into(&mut parity[META_LEN..], payload);
}

/// One half of a block's parity, as a parity packet carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Half {
    /// The block's first coded packet, and how many it codes (`from..from + count`, within one
    /// block).
    pub from: u64,
    /// Packets coded.
    pub count: u32,
    /// Which parity of the block.
    pub line: Line,
    /// Which half: 0 or 1.
    pub half: u8,
    /// Its bytes ([`half_bytes`]).
    pub bytes: Vec<u8>,
}

/// The sender's side: the parities of the blocks sent since coding began, kept as far back
/// as the receiver keeps packets.
#[derive(Debug)]
pub struct Coder {
    max_payload: usize,
    keep: u64,
    blocks: VecDeque<CodedBlock>,
}

#[derive(Debug)]
struct CodedBlock {
    from: u64,
    to: u64,
    /// `FAMILIES × SIDE` parities of `META_LEN + max_payload` bytes.
    parity: Vec<u8>,
}

impl Coder {
    /// A coder for the channel `config` describes; `None` where it has no code.
    pub fn new(config: &ChannelConfig) -> Option<Self> {
        let keep = retained_pkts(config);
        (keep > 0).then(|| Self {
            max_payload: config.payload_size(),
            keep,
            blocks: VecDeque::new(),
        })
    }

    fn parity_bytes(&self) -> usize {
        META_LEN + self.max_payload
    }

    /// Adds a packet sent for the first time; new packets come in sequence order. A payload
    /// longer than the channel's cannot be coded, nor then the rest of its block: the block's
    /// parities so far are dropped (a parity must hold every packet its line names).
    pub fn add(&mut self, dsn: u64, offset: u64, payload: &[u8]) {
        if payload.len() > self.max_payload {
            if self.blocks.back().is_some_and(|b| block_of(b.from) == block_of(dsn)) {
                self.blocks.pop_back();
            }
            return;
        }
        let base = block_of(dsn);
        let fresh = self.blocks.back().is_none_or(|b| block_of(b.from) != base || b.to != dsn);
        if fresh {
            // The oldest block's parities, if it is of no more use, are the new block's.
            let bytes = self.parity_bytes() * usize::from(FAMILIES) * SIDE as usize;
            let parity = match self.blocks.front() {
                Some(b) if b.from + self.keep < dsn => self.blocks.pop_front().map(|b| b.parity),
                _ => None,
            };
            let parity = match parity {
                Some(mut p) => {
                    p.fill(0);
                    p
                }
                None => vec![0; bytes],
            };
            self.blocks.push_back(CodedBlock { from: dsn, to: dsn, parity });
        }
        let keep = self.keep;
        while self.blocks.front().is_some_and(|b| b.from + keep < dsn) {
            self.blocks.pop_front();
        }
        let size = self.parity_bytes();
        let Some(block) = self.blocks.back_mut() else { return };
        for line in lines_of(dsn) {
            let at = line_slot(line) * size;
            add_packet(&mut block.parity[at..at + size], offset, payload);
        }
        block.to = dsn + 1;
    }

    /// The halves of every parity of the blocks that hold packets from `since` on, newest block
    /// first, as far back as the receiver keeps packets from `next` (the next new sequence
    /// number). Empty when no such block was coded.
    pub fn halves(&self, since: u64, next: u64) -> Vec<Half> {
        let keep = self.keep;
        let size = self.parity_bytes();
        let half = half_bytes(self.max_payload);
        let mut out = Vec::new();
        for block in self.blocks.iter().rev() {
            if block.to <= since || block.from + keep < next {
                break;
            }
            let base = block_of(block.from);
            for family in 0..FAMILIES {
                for index in 0..SIDE as u16 {
                    let line = (family, index);
                    if !members(base, line).any(|d| (block.from..block.to).contains(&d)) {
                        continue;
                    }
                    let at = line_slot(line) * size;
                    let mut whole = block.parity[at..at + size].to_vec();
                    whole.resize(2 * half, 0);
                    for (h, bytes) in whole.chunks(half).enumerate() {
                        out.push(Half {
                            from: block.from,
                            count: (block.to - block.from) as u32,
                            line,
                            half: h as u8,
                            bytes: bytes.to_vec(),
                        });
                    }
                }
            }
        }
        out
    }
}

/// The receiver's copies of the latest payloads, by data sequence number, in a ring of
/// [`retained_pkts`] slots (allocated as the pages are first written).
#[derive(Debug)]
pub struct Retained {
    max_payload: usize,
    /// Per slot: the sequence number plus one (0: empty), the offset and the length.
    meta: Vec<(u64, u64, u32)>,
    data: Vec<u8>,
}

impl Retained {
    /// An empty ring of `slots` payloads of at most `max_payload` bytes.
    pub fn new(slots: u64, max_payload: usize) -> Self {
        let slots = slots.max(1) as usize;
        Self { max_payload, meta: vec![(0, 0, 0); slots], data: vec![0; slots * max_payload] }
    }

    fn slot(&self, dsn: u64) -> usize {
        (dsn % self.meta.len() as u64) as usize
    }

    /// Keeps a copy of the payload of `dsn` (a payload longer than the channel allows is not
    /// kept, nor an older packet in a newer one's slot).
    pub fn keep(&mut self, dsn: u64, offset: u64, payload: &[u8]) {
        if payload.len() > self.max_payload {
            return;
        }
        let slot = self.slot(dsn);
        // A late repair of an old packet does not displace a newer one the code may need.
        if self.meta[slot].0 > dsn + 1 {
            return;
        }
        self.meta[slot] = (dsn + 1, offset, payload.len() as u32);
        let at = slot * self.max_payload;
        self.data[at..at + payload.len()].copy_from_slice(payload);
    }

    /// The offset and payload of `dsn`, if still kept.
    pub fn get(&self, dsn: u64) -> Option<(u64, &[u8])> {
        let slot = self.slot(dsn);
        let (plus_one, offset, len) = self.meta[slot];
        let at = slot * self.max_payload;
        (plus_one == dsn + 1).then(|| (offset, &self.data[at..at + len as usize]))
    }
}

/// A packet the code rebuilt: its sequence number, and the payload that belongs at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Its data sequence number.
    pub dsn: u64,
    /// Where the payload belongs in the application's byte space.
    pub offset: u64,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Why a parity packet was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its size or its block does not fit the channel's packet size or the code.
    Malformed,
}

/// The receiver's side of the code: the payloads it keeps and the parities of the blocks it
/// collects.
#[derive(Debug)]
pub struct Tail {
    max_payload: usize,
    keep: u64,
    retained: Retained,
    blocks: BTreeMap<u64, ParityBlock>,
}

#[derive(Debug)]
struct ParityBlock {
    from: u64,
    to: u64,
    halves: HashMap<Line, [Option<Vec<u8>>; 2]>,
    /// Parities used, or of no more use (nothing missing, or a packet no longer kept).
    done: HashSet<Line>,
}

impl Tail {
    /// The code's receiving side for the channel `config` describes, keeping every payload
    /// from now on; `None` where it has no code.
    pub fn new(config: &ChannelConfig) -> Option<Self> {
        let (keep, max_payload) = (retained_pkts(config), config.payload_size());
        (keep > 0).then(|| Self {
            max_payload,
            keep,
            retained: Retained::new(keep, max_payload),
            blocks: BTreeMap::new(),
        })
    }

    /// Keeps a copy of a payload that arrived.
    pub fn keep(&mut self, dsn: u64, offset: u64, payload: &[u8]) {
        self.retained.keep(dsn, offset, payload);
    }

    /// Takes half a parity; returns whether that completed it (so peeling may go on from it).
    /// A half for other packets of a block than those collected replaces them (the sender
    /// began a new tail).
    pub fn take_half(&mut self, half: Half) -> Result<bool, Refused> {
        let to = half.from + u64::from(half.count);
        let base = block_of(half.from);
        let (family, index) = half.line;
        if half.bytes.len() != half_bytes(self.max_payload)
            || half.count == 0
            || block_of(to - 1) != base
            || family >= FAMILIES
            || u64::from(index) >= SIDE
            || half.half > 1
        {
            return Err(Refused::Malformed);
        }
        let block = self.blocks.entry(base).or_insert_with(|| ParityBlock {
            from: half.from,
            to,
            halves: HashMap::new(),
            done: HashSet::new(),
        });
        if (block.from, block.to) != (half.from, to) {
            *block =
                ParityBlock { from: half.from, to, halves: HashMap::new(), done: HashSet::new() };
        }
        let slots = block.halves.entry(half.line).or_default();
        slots[usize::from(half.half)].get_or_insert(half.bytes);
        let complete = slots.iter().all(Option::is_some);
        // Blocks older than what is kept are of no more use.
        let keep = self.keep;
        self.blocks.retain(|_, b| b.to + keep > to);
        Ok(complete)
    }

    /// The lines to try after `dsn` arrived or was rebuilt: its three, if its block is held.
    pub fn lines_after(&self, dsn: u64) -> Vec<(u64, Line)> {
        let base = block_of(dsn);
        match self.blocks.get(&base) {
            Some(b) if (b.from..b.to).contains(&dsn) => {
                lines_of(dsn).into_iter().map(|l| (base, l)).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Peels from the parities in `work` (block, line): each complete one with exactly one of
    /// its packets in `missing` rebuilds it, and the rebuilt packet's other parities are tried
    /// in turn. Returns what it rebuilt.
    pub fn peel(&mut self, mut work: Vec<(u64, Line)>, missing: &IntervalSet) -> Vec<Recovered> {
        let mut rebuilt: Vec<Recovered> = Vec::new();
        let mut found = HashSet::new();
        let size = META_LEN + self.max_payload;
        while let Some((base, line)) = work.pop() {
            let Some(block) = self.blocks.get_mut(&base) else { continue };
            if block.done.contains(&line) {
                continue;
            }
            let Some([Some(a), Some(b)]) = block.halves.get(&line) else { continue };
            let range = block.from..block.to;
            let mut lost = members(base, line)
                .filter(|d| range.contains(d) && missing.contains(*d) && !found.contains(d));
            let dsn = match (lost.next(), lost.next()) {
                (Some(dsn), None) => dsn,
                // Nothing missing: of no more use.
                (None, _) => {
                    block.done.insert(line);
                    continue;
                }
                _ => continue,
            };
            let mut parity = [a.as_slice(), b.as_slice()].concat();
            block.done.insert(line);
            parity.truncate(size);
            let mut usable = true;
            for other in members(base, line).filter(|d| range.contains(d) && *d != dsn) {
                match self.retained.get(other) {
                    Some((offset, payload)) => add_packet(&mut parity, offset, payload),
                    None => {
                        usable = false;
                        break;
                    }
                }
            }
            if !usable {
                continue;
            }
            let offset = u64::from_be_bytes(parity[..8].try_into().unwrap_or_default());
            let len = u32::from_be_bytes(parity[8..META_LEN].try_into().unwrap_or_default());
            let len = len as usize;
            if len == 0
                || len > self.max_payload
                || parity[META_LEN + len..].iter().any(|&x| x != 0)
            {
                continue;
            }
            let payload = parity[META_LEN..META_LEN + len].to_vec();
            self.retained.keep(dsn, offset, &payload);
            found.insert(dsn);
            work.extend(lines_of(dsn).into_iter().filter(|l| *l != line).map(|l| (base, l)));
            rebuilt.push(Recovered { dsn, offset, payload });
        }
        rebuilt
    }
}

#[cfg(test)]
mod tests;
