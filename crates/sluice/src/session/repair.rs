//! Per-block repair: a file whose bytes do not hash to the sender's BLAKE3 is mended block by
//! block instead of failing the transfer, so a disk or memory fault on either end (a flipped
//! bit on the way from the page cache to the socket, or from the socket to the disk) costs a
//! few blocks, not the copy.
//!
//! After the data and the sender's `Digests`, the receiving end compares each file's hash:
//! 1. for the files that differ it sends `Repair`: the BLAKE3 of each
//!    [`RESUME_BLOCK_BYTES`] block of the file as it has it;
//! 2. the sending end hashes the same blocks of its files and answers `Repairing` with the
//!    blocks that differ (`[file, block]`);
//! 3. when there are any, both ends open a new set of data channels (a new `Ready` exchange,
//!    keys of their own: [`ChannelSetup::phase`]) and those blocks move again; the receiver
//!    hashes the files again as they are written.
//!
//! At most [`MAX_REPAIR_ROUNDS`] rounds run. A file the sender finds no differing block in
//! (it changed at the source after it was hashed) cannot be repaired: it stays a mismatch, named
//! in the integrity error, as before.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::SessionError;
use super::channel::{ChannelSetup, DataTask, REPLY_TIMEOUT, bind_data_sockets, blocking};
use super::channel::{data_error, frame_error, hash_budget};
use super::digest::{Control, Messages, Receiving, run_receiving};
use super::keys::Role;
use super::messages::{BlockHashes, ClientMsg, FrameError, ServerMsg, write_message};
use crate::datapath::{self, ChannelParams, ChannelReport, Fault, Faulty, Store};
use crate::files::hash_extents;
use crate::tree::FileSet;
use crate::tree::resume::RESUME_BLOCK_BYTES;

/// Repair rounds at most: a fault that strikes again after two rounds is not transient.
pub(crate) const MAX_REPAIR_ROUNDS: u32 = 2;

/// The messages of repair, on each end's message type.
pub(crate) trait RepairControl: Control {
    /// The receiver's `Repair`.
    fn repair(files: Vec<BlockHashes>) -> Self;
    /// The sender's `Repairing`.
    fn repairing(blocks: Vec<[u64; 2]>) -> Self;
    /// `Ready` with this end's data ports.
    fn ready(udp_ports: Vec<u16>) -> Self;
    /// The block hashes of a `Repair`; any other message back as it is.
    fn into_repair(self) -> Result<Vec<BlockHashes>, Self>;
    /// The blocks of a `Repairing`, or the error the message means here.
    fn into_repairing(self) -> Result<Vec<[u64; 2]>, SessionError>;
    /// The ports of a `Ready`, or the error the message means here.
    fn into_ready(self) -> Result<Vec<u16>, SessionError>;
}

/// One end of a request's stream and what it needs to open data channels.
pub(crate) struct Link<'a, 's, R> {
    pub(crate) setup: ChannelSetup<'a>,
    pub(crate) send: &'a mut quinn::SendStream,
    pub(crate) messages: Messages<'s, R>,
}

impl<R: RepairControl> Link<'_, '_, R> {
    async fn write<W: RepairControl>(&mut self, msg: &W) -> Result<(), SessionError> {
        write_message(self.send, msg).await.map_err(|e| frame_error(e, self.setup.conn))
    }

    async fn read(&mut self, wait: Duration) -> Result<R, SessionError> {
        tokio::time::timeout(wait, self.messages.next())
            .await
            .unwrap_or(Err(FrameError::Timeout(wait)))
            .map_err(|e| frame_error(e, self.setup.conn))
    }

    /// Opens the data channels of repair round `round`: the server binds its sockets and
    /// sends `Ready` first, the client answers with its own.
    async fn open<W: RepairControl>(
        &mut self,
        round: u32,
    ) -> Result<Vec<ChannelParams>, SessionError> {
        let setup = ChannelSetup { phase: round, ..self.setup };
        let local = setup.conn.local_ip().map(|ip| ip.to_canonical());
        let peer_ip = setup.conn.remote_address().ip().to_canonical();
        let bind = || bind_data_sockets(setup.negotiated.channels, local, peer_ip);
        let (sockets, peer_ports) = match self.setup.role {
            Role::Server => {
                let (sockets, ports) = bind()?;
                self.write(&W::ready(ports)).await?;
                (sockets, self.read(REPLY_TIMEOUT).await?.into_ready()?)
            }
            Role::Client => {
                let peer_ports = self.read(REPLY_TIMEOUT).await?.into_ready()?;
                let (sockets, ports) = bind()?;
                self.write(&W::ready(ports)).await?;
                (sockets, peer_ports)
            }
        };
        setup.params(sockets, peer_ip, &peer_ports)
    }
}

/// The receiving end, once the data is there: while files do not hash to the sender's
/// `expected`, asks for the blocks that differ and receives them again. Returns each file's
/// hash as it is now and the blocks that moved again.
pub(crate) async fn receive_repairs<W: RepairControl, R: RepairControl>(
    link: &mut Link<'_, '_, R>,
    files: &Arc<FileSet>,
    data: &DataStore,
    expected: &[blake3::Hash],
    mut actual: Vec<blake3::Hash>,
) -> Result<(Vec<blake3::Hash>, u64), SessionError> {
    let mut repaired = 0;
    for round in 1..=MAX_REPAIR_ROUNDS {
        // An empty file has no block to mend: its mismatch is the sender's digest's.
        let sized = |k: &usize| files.file_at(*k).is_some_and(|(_, size, _)| size > 0);
        let bad: Vec<usize> =
            (0..actual.len()).filter(|&k| actual[k] != expected[k]).filter(sized).collect();
        if bad.is_empty() {
            break;
        }
        let (store, which) = (files.clone(), bad.clone());
        let offers = blocking(move || block_offers(&store, &which)).await?;
        let bad_bytes: u64 = bad.iter().filter_map(|&k| files.file_at(k)).map(|f| f.1).sum();
        link.write(&W::repair(offers)).await?;
        let blocks = link.read(hash_budget(bad_bytes)).await?.into_repairing()?;
        let ranges = block_ranges(files, &blocks, Some(&bad)).map_err(SessionError::Protocol)?;
        if ranges.is_empty() {
            // The sender's blocks are what this end has: the source changed after it was
            // hashed, and no repair can help.
            break;
        }
        tracing::info!(round, files = bad.len(), blocks = blocks.len(), "repairing");
        let params = link.open::<W>(round).await?;
        let first = blocks.iter().map(|b| b[0] as usize).min().unwrap_or(0);
        let last = blocks.iter().map(|b| b[0] as usize).max().unwrap_or(0);
        let (span, ends) = extent_span(files, first..last + 1);
        let present = complement(&ranges, span.clone());
        let store = data.clone();
        let mut receiving = Receiving::spawn(move |hashed, cancel| {
            datapath::receive(params, &*store, span, &present, ends, &mut |_| {}, hashed, cancel)
        });
        let (arrival, _) =
            run_receiving(&mut receiving, &mut link.messages, 0, link.setup.conn).await?;
        let (hashes, report) = arrival.split();
        if report.is_none() {
            // The next round, or the caller's, may open channels again: these end first.
            receiving.report().await;
        }
        actual.splice(first..=last, hashes);
        repaired += blocks.len() as u64;
    }
    Ok((actual, repaired))
}

/// The sending end, once the receiver answered: while the answer is `Repair`, says which
/// blocks differ and sends them again. Returns the receiver's final answer, the blocks sent
/// again, and the last repair round's channel report.
pub(crate) async fn serve_repairs<W: RepairControl, R: RepairControl>(
    link: &mut Link<'_, '_, R>,
    files: &Arc<FileSet>,
    data: &DataStore,
    compress: Option<i32>,
    mut reply: R,
) -> Result<(R, u64, Option<ChannelReport>), SessionError> {
    let (mut repaired, mut report) = (0, None);
    let mut round = 0;
    loop {
        let offers = match reply.into_repair() {
            Ok(offers) => offers,
            Err(reply) => return Ok((reply, repaired, report)),
        };
        round += 1;
        if round > MAX_REPAIR_ROUNDS {
            return Err(SessionError::Protocol(format!(
                "a repair round beyond the {MAX_REPAIR_ROUNDS} allowed"
            )));
        }
        let store = files.clone();
        let blocks = blocking(move || differing_blocks(&store, &offers)).await?;
        let ranges = block_ranges(files, &blocks, None).map_err(SessionError::Protocol)?;
        link.write(&W::repairing(blocks.clone())).await?;
        let mut span_bytes = 0;
        if !ranges.is_empty() {
            tracing::info!(round, blocks = blocks.len(), "sending blocks again");
            let params = link.open::<W>(round).await?;
            let store = data.clone();
            let moving = ranges.clone();
            let mut task = DataTask::spawn(move |cancel| {
                datapath::send(params, &*store, &moving, compress, &mut |_| {}, cancel)
            });
            report = Some(task.join().await?.map_err(|e| data_error(e, link.setup.conn))?);
            repaired += blocks.len() as u64;
            span_bytes = ranges.last().map_or(0, |r| r.end) - ranges[0].start;
        }
        reply = link.read(hash_budget(span_bytes)).await?;
    }
}

impl RepairControl for ClientMsg {
    fn repair(files: Vec<BlockHashes>) -> Self {
        ClientMsg::Repair { files }
    }

    fn repairing(blocks: Vec<[u64; 2]>) -> Self {
        ClientMsg::Repairing { blocks }
    }

    fn ready(udp_ports: Vec<u16>) -> Self {
        ClientMsg::Ready { udp_ports }
    }

    fn into_repair(self) -> Result<Vec<BlockHashes>, Self> {
        match self {
            ClientMsg::Repair { files } => Ok(files),
            other => Err(other),
        }
    }

    fn into_repairing(self) -> Result<Vec<[u64; 2]>, SessionError> {
        match self {
            ClientMsg::Repairing { blocks } => Ok(blocks),
            ClientMsg::Failed { code, message } => Err(SessionError::from_client(code, message)),
            other => Err(SessionError::Protocol(format!("expected Repairing, got {other:?}"))),
        }
    }

    fn into_ready(self) -> Result<Vec<u16>, SessionError> {
        match self {
            ClientMsg::Ready { udp_ports } => Ok(udp_ports),
            ClientMsg::Failed { code, message } => Err(SessionError::from_client(code, message)),
            other => Err(SessionError::Protocol(format!("expected Ready, got {other:?}"))),
        }
    }
}

impl RepairControl for ServerMsg {
    fn repair(files: Vec<BlockHashes>) -> Self {
        ServerMsg::Repair { files }
    }

    fn repairing(blocks: Vec<[u64; 2]>) -> Self {
        ServerMsg::Repairing { blocks }
    }

    fn ready(udp_ports: Vec<u16>) -> Self {
        ServerMsg::Ready { udp_ports }
    }

    fn into_repair(self) -> Result<Vec<BlockHashes>, Self> {
        match self {
            ServerMsg::Repair { files } => Ok(files),
            other => Err(other),
        }
    }

    fn into_repairing(self) -> Result<Vec<[u64; 2]>, SessionError> {
        match self {
            ServerMsg::Repairing { blocks } => Ok(blocks),
            ServerMsg::Error { code, message } => Err(SessionError::from_server(code, message)),
            other => Err(SessionError::Protocol(format!("expected Repairing, got {other:?}"))),
        }
    }

    fn into_ready(self) -> Result<Vec<u16>, SessionError> {
        match self {
            ServerMsg::Ready { udp_ports } => Ok(udp_ports),
            ServerMsg::Error { code, message } => Err(SessionError::from_server(code, message)),
            other => Err(SessionError::Protocol(format!("expected Ready, got {other:?}"))),
        }
    }
}

/// What the data channels read and write: a transfer's files.
pub(crate) type DataStore = Arc<dyn Store + Send + Sync>;

/// The files as the data channels see them: with the configured test fault, if any, on the
/// reads of a sending end (`sending`) or the writes of a receiving one.
pub(crate) fn data_store(files: &Arc<FileSet>, fault: Option<Fault>, sending: bool) -> DataStore {
    match (fault, sending) {
        (Some(fault), true) => Arc::new(Faulty::reading(files.clone(), fault)),
        (Some(fault), false) => Arc::new(Faulty::writing(files.clone(), fault)),
        (None, _) => files.clone(),
    }
}

/// The receiver's `Repair`: BLAKE3 of every block of each file in `bad`.
fn block_offers(files: &FileSet, bad: &[usize]) -> Result<Vec<BlockHashes>, SessionError> {
    bad.iter()
        .map(|&k| {
            let hashes = file_blocks(files, k)
                .map_err(|e| SessionError::io("hashing the blocks of a damaged file", e))?;
            Ok(BlockHashes {
                file: k as u32,
                blocks: hashes.iter().map(|h| h.to_hex().to_string()).collect(),
            })
        })
        .collect()
}

/// The sender's answer to `Repair`: `[file, block]` of each offered block whose hash is not
/// the sender's. An offer must name a file of the set once and hash every block of it.
pub(crate) fn differing_blocks(
    files: &FileSet,
    offers: &[BlockHashes],
) -> Result<Vec<[u64; 2]>, SessionError> {
    let mut seen = std::collections::HashSet::new();
    let mut differ = Vec::new();
    for offer in offers {
        let k = offer.file as usize;
        let Some((_, size, _)) = files.file_at(k) else {
            return Err(SessionError::Protocol(format!(
                "Repair names file {k} of {}",
                files.len()
            )));
        };
        if !seen.insert(k) || offer.blocks.len() as u64 != size.div_ceil(RESUME_BLOCK_BYTES) {
            return Err(SessionError::Protocol(format!(
                "Repair for file {k}: {} block hashes for {size} bytes, or the file twice",
                offer.blocks.len()
            )));
        }
        let theirs = offer
            .blocks
            .iter()
            .map(blake3::Hash::from_hex)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| SessionError::Protocol("a bad BLAKE3 in Repair".into()))?;
        let mine =
            file_blocks(files, k).map_err(|e| SessionError::io("hashing blocks to repair", e))?;
        // `blake3::Hash` compares in constant time.
        let differing = mine.iter().zip(&theirs).enumerate().filter(|(_, (a, b))| a != b);
        differ.extend(differing.map(|(block, _)| [k as u64, block as u64]));
    }
    differ.sort_unstable();
    Ok(differ)
}

/// BLAKE3 of each [`RESUME_BLOCK_BYTES`] block of file `k` of `files`.
fn file_blocks(files: &FileSet, k: usize) -> std::io::Result<Vec<blake3::Hash>> {
    let (_, size, base) = files.file_at(k).ok_or(std::io::ErrorKind::NotFound)?;
    let ends = (1..=size.div_ceil(RESUME_BLOCK_BYTES))
        .map(|b| base + (b * RESUME_BLOCK_BYTES).min(size))
        .collect();
    let never = AtomicBool::new(false);
    Ok(hash_extents(files, base, ends, &never)?.unwrap_or_default())
}

/// The offset ranges of `blocks` (`[file, block]`, increasing, each a block of a file of
/// `files`, of a file in `only` when given), adjacent blocks joined.
pub(crate) fn block_ranges(
    files: &FileSet,
    blocks: &[[u64; 2]],
    only: Option<&[usize]>,
) -> Result<Vec<Range<u64>>, String> {
    let mut ranges: Vec<Range<u64>> = Vec::new();
    let mut last = None;
    for &[file, block] in blocks {
        let k = usize::try_from(file).map_err(|_| format!("file {file} in Repairing"))?;
        let (_, size, base) = files.file_at(k).ok_or(format!("file {file} in Repairing"))?;
        let start = block.checked_mul(RESUME_BLOCK_BYTES).filter(|&s| s < size);
        let Some(start) = start else {
            return Err(format!("block {block} of file {file} ({size} bytes) in Repairing"));
        };
        if only.is_some_and(|only| !only.contains(&k)) || last.is_some_and(|l| l >= (file, block)) {
            return Err(format!("block {block} of file {file} in Repairing was not asked for"));
        }
        last = Some((file, block));
        let range = base + start..base + (start + RESUME_BLOCK_BYTES).min(size);
        match ranges.last_mut() {
            Some(prev) if prev.end == range.start => prev.end = range.end,
            _ => ranges.push(range),
        }
    }
    Ok(ranges)
}

/// The offset span of files `files_range` and the end of each of them.
fn extent_span(files: &FileSet, which: Range<usize>) -> (Range<u64>, Vec<u64>) {
    let ends: Vec<u64> =
        which.clone().filter_map(|k| files.file_at(k)).map(|(_, size, base)| base + size).collect();
    let start = files.file_at(which.start).map_or(0, |(_, _, base)| base);
    let end = ends.last().copied().unwrap_or(start);
    (start..end, ends)
}

/// The parts of `span` outside `ranges` (increasing, inside `span`).
fn complement(ranges: &[Range<u64>], span: Range<u64>) -> Vec<Range<u64>> {
    let mut rest = Vec::new();
    let mut at = span.start;
    for r in ranges {
        if r.start > at {
            rest.push(at..r.start);
        }
        at = at.max(r.end);
    }
    if at < span.end {
        rest.push(at..span.end);
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complement_leaves_the_gaps() {
        assert_eq!(complement(&[2..4, 6..8], 0..10), vec![0..2, 4..6, 8..10]);
        let whole = [Range { start: 0, end: 10 }];
        assert_eq!(complement(&whole, 0..10), Vec::<Range<u64>>::new());
        assert_eq!(complement(&[], 3..5), vec![3..5]);
    }

    #[test]
    fn block_ranges_join_neighbours_and_refuse_nonsense() {
        let b = RESUME_BLOCK_BYTES;
        let files = FileSet::new(vec![("a".into(), 3 * b), ("b".into(), b + 5)], false);
        let ranges = block_ranges(&files, &[[0, 1], [0, 2], [1, 1]], None).unwrap();
        assert_eq!(ranges, vec![b..3 * b, 4 * b..4 * b + 5]);
        assert!(block_ranges(&files, &[[0, 3]], None).is_err(), "past the file's end");
        assert!(block_ranges(&files, &[[2, 0]], None).is_err(), "no such file");
        assert!(block_ranges(&files, &[[0, 1], [0, 1]], None).is_err(), "twice");
        assert!(block_ranges(&files, &[[0, 2], [0, 1]], None).is_err(), "out of order");
        assert!(block_ranges(&files, &[[1, 0]], Some(&[0])).is_err(), "not asked for");
    }
}
