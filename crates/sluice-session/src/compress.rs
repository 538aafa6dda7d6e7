//! Per-block zstd compression on the data channels (FSP's per-block compression): the framing
//! every data path shares (the UDP channels, the TCP streams, the simulator's channels).
//!
//! The offset space is cut on a fixed grid of [`COMPRESS_BLOCK_BYTES`]; a sending channel takes
//! each piece of its chunks (a grid cell, or the part of one its chunk holds) and compresses it.
//! A piece that shrinks travels as a *frame* at wire offset [`COMPRESSED`]` | start`:
//!
//! ```text
//! | frame length u32 BE (header included) | piece length u32 BE | zstd frame |
//! ```
//!
//! A piece that does not shrink travels as it is, at its own offset, so the top bit of a
//! payload's offset says which it is (offsets of the byte space stay below 2^63). The receiving
//! channel gathers a frame's payloads in memory; once all of its bytes are there it decompresses
//! the frame into exactly the piece's length and writes it at the piece's offset, as if the
//! bytes had come raw. Everything after that (the record of what arrived, the hashing of what
//! is written, resume) sees only the byte space.
//!
//! Data that does not compress costs little: a channel first compresses a sample of each piece
//! ([`PROBE_BYTES`], a sixteenth), and a piece whose sample does not shrink goes raw at once,
//! the rest of it neither read nor compressed. Each piece is judged on its own, so the text
//! file after a large random one is compressed from its first piece.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::Range;

/// The top bit of a payload's offset: the payload is part of a compressed frame.
pub const COMPRESSED: u64 = 1 << 63;
pub use crate::chunks::{COMPRESS_BLOCK_BYTES, piece_at};
/// Bytes of a frame's header.
const HEADER_BYTES: usize = 8;
/// A piece is sent compressed only when its frame is at most this share of it (in 1/64): a
/// saving smaller than 1/32 is not worth the receiver's buffering.
const WORTH_64THS: usize = 62;
/// Bytes of a piece compressed first, to see whether the piece is worth compressing.
pub const PROBE_BYTES: usize = 16 << 10;
/// The most bytes of incomplete frames one receiving channel holds: far above what a flow
/// window leaves in flight; a peer that goes beyond it is broken.
const MAX_PENDING_BYTES: usize = 128 << 20;
/// The levels zstd accepts here.
pub const LEVELS: std::ops::RangeInclusive<i32> = 1..=19;

/// A sending channel's compressor: the frames it sent and not yet had acknowledged (a
/// retransmission reads them again), and when to try again on data that does not shrink.
pub struct Deflater {
    compressor: zstd::bulk::Compressor<'static>,
    input: Vec<u8>,
    /// Where a piece is compressed to, after the header's room (reused: a piece that does not
    /// shrink costs no allocation).
    output: Vec<u8>,
    frames: BTreeMap<u64, Box<[u8]>>,
    /// Bytes of pieces read, and of what they became on the wire.
    pub piece_bytes: u64,
    /// See `piece_bytes`.
    pub wire_bytes: u64,
}

impl std::fmt::Debug for Deflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deflater")
            .field("frames", &self.frames.len())
            .field("piece_bytes", &self.piece_bytes)
            .field("wire_bytes", &self.wire_bytes)
            .finish_non_exhaustive()
    }
}

impl Deflater {
    /// A compressor at zstd `level` (one of [`LEVELS`]).
    pub fn new(level: i32) -> io::Result<Self> {
        Ok(Self {
            compressor: zstd::bulk::Compressor::new(level)?,
            input: vec![0; COMPRESS_BLOCK_BYTES as usize],
            output: vec![0; COMPRESS_BLOCK_BYTES as usize],
            frames: BTreeMap::new(),
            piece_bytes: 0,
            wire_bytes: 0,
        })
    }

    /// Compresses the piece `range` (within one grid cell) read by `read`: the length of its
    /// frame, kept for sending at wire offset [`COMPRESSED`]` | range.start`, or `None` when the
    /// piece goes raw.
    pub fn piece(
        &mut self,
        range: Range<u64>,
        mut read: impl FnMut(u64, &mut [u8]) -> io::Result<()>,
    ) -> io::Result<Option<u64>> {
        let len = (range.end - range.start) as usize;
        self.piece_bytes += len as u64;
        let probe = len.min(PROBE_BYTES);
        read(range.start, &mut self.input[..probe])?;
        let sample = self.shrinks(probe);
        let fits = match sample {
            Some(_) if probe == len => sample,
            Some(_) => {
                read(range.start + probe as u64, &mut self.input[probe..len])?;
                self.shrinks(len)
            }
            None => None,
        };
        let Some(frame_len) = fits else {
            self.wire_bytes += len as u64;
            return Ok(None);
        };
        // Only a frame that is kept is allocated: one of its own size.
        let mut frame = self.output[..frame_len].to_vec().into_boxed_slice();
        frame[..4].copy_from_slice(&(frame_len as u32).to_be_bytes());
        frame[4..8].copy_from_slice(&(len as u32).to_be_bytes());
        self.frames.insert(range.start, frame);
        self.wire_bytes += frame_len as u64;
        Ok(Some(frame_len as u64))
    }

    /// Compresses the first `len` bytes of the input into the output buffer after the header
    /// room; returns the frame's length if it is at most [`WORTH_64THS`] of `len`.
    fn shrinks(&mut self, len: usize) -> Option<usize> {
        let limit = len * WORTH_64THS / 64;
        let room = limit.saturating_sub(HEADER_BYTES);
        // Output that would not fit is an error from zstd: the piece goes raw.
        let n = self
            .compressor
            .compress_to_buffer(&self.input[..len], &mut self.output[HEADER_BYTES..][..room]);
        n.ok().map(|n| HEADER_BYTES + n).filter(|&n| n <= limit)
    }

    /// Copies the frame bytes at wire offset `offset` (with the [`COMPRESSED`] bit) into `dst`.
    pub fn fill(&self, offset: u64, dst: &mut [u8]) -> io::Result<()> {
        let at = offset & !COMPRESSED;
        // Pieces do not overlap, and each frame is shorter than its piece: the frame holding
        // `at` is the last one starting at or before it.
        let found = self.frames.range(..=at).next_back();
        let Some((&start, frame)) =
            found.filter(|(s, f)| at + dst.len() as u64 <= **s + f.len() as u64)
        else {
            return Err(io::Error::other(format!("no compressed frame holds offset {at}")));
        };
        let from = (at - start) as usize;
        dst.copy_from_slice(&frame[from..from + dst.len()]);
        Ok(())
    }

    /// Forgets the frame of the piece starting at `start` (acknowledged).
    pub fn done(&mut self, start: u64) {
        self.frames.remove(&start);
    }
}

/// A frame being gathered.
struct Partial {
    buf: Vec<u8>,
    /// Bytes of `buf` received (each payload of a channel is delivered once).
    got: usize,
    /// Whether the payload with the header came (it is the frame's first and holds all of it).
    header: bool,
}

/// A receiving channel's decompressor: the frames it is gathering.
pub struct Inflater {
    decompressor: zstd::bulk::Decompressor<'static>,
    frames: HashMap<u64, Partial>,
    pending: usize,
    out: Vec<u8>,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("frames", &self.frames.len())
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl Inflater {
    /// A decompressor with no frame gathered.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            decompressor: zstd::bulk::Decompressor::new()?,
            frames: HashMap::new(),
            pending: 0,
            out: vec![0; COMPRESS_BLOCK_BYTES as usize],
        })
    }

    /// Takes a payload at wire offset `offset` (with the [`COMPRESSED`] bit set) of the frame of
    /// `piece` (the piece of the byte space that holds the offset); once the frame is whole,
    /// returns the piece's bytes. A frame that breaks the rules is an error (the peer is
    /// broken; the piece would never arrive), said in words.
    pub fn accept(
        &mut self,
        piece: Range<u64>,
        offset: u64,
        payload: &[u8],
    ) -> Result<Option<&[u8]>, String> {
        let (start, at) = (piece.start, offset & !COMPRESSED);
        let bad = |why: &str| format!("frame at offset {start}: {why}");
        let piece_len = piece.end.saturating_sub(start) as usize;
        let from = at.checked_sub(start).map(|f| f as usize);
        let Some((from, end)) = from.map(|f| (f, f + payload.len())) else {
            return Err(bad("a payload before its piece"));
        };
        if end >= piece_len || piece_len > COMPRESS_BLOCK_BYTES as usize {
            return Err(bad("a payload outside its piece"));
        }
        let partial = self.frames.entry(start).or_insert_with(|| Partial {
            buf: Vec::new(),
            got: 0,
            header: false,
        });
        if partial.buf.len() < end {
            self.pending += end - partial.buf.len();
            partial.buf.resize(end, 0);
        }
        partial.buf[from..end].copy_from_slice(payload);
        partial.got += payload.len();
        if self.pending > MAX_PENDING_BYTES {
            return Err(bad("too many incomplete compressed frames"));
        }
        if from == 0 {
            if payload.len() < HEADER_BYTES {
                return Err(bad("a first payload shorter than the header"));
            }
            partial.header = true;
        }
        if !partial.header {
            return Ok(None);
        }
        let frame_len = u32::from_be_bytes(partial.buf[..4].try_into().unwrap_or_default());
        let said_len = u32::from_be_bytes(partial.buf[4..8].try_into().unwrap_or_default());
        let frame_len = frame_len as usize;
        if said_len as usize != piece_len
            || frame_len < HEADER_BYTES
            || frame_len >= piece_len
            || partial.buf.len() > frame_len
            || partial.got > frame_len
        {
            return Err(bad("a header that does not fit its piece"));
        }
        if partial.got < frame_len {
            return Ok(None);
        }
        let Some(partial) = self.frames.remove(&start) else { return Ok(None) };
        self.pending -= partial.buf.len();
        let out = &mut self.out[..piece_len];
        match self.decompressor.decompress_to_buffer(&partial.buf[HEADER_BYTES..], &mut *out) {
            Ok(n) if n == piece_len => Ok(Some(&self.out[..piece_len])),
            Ok(n) => Err(bad(&format!("{n} bytes decompressed for a piece of {piece_len}"))),
            Err(e) => Err(bad(&format!("does not decompress: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pieces of `range`: cut at the grid of [`COMPRESS_BLOCK_BYTES`].
    fn pieces(range: Range<u64>) -> impl Iterator<Item = Range<u64>> {
        let mut at = range.start;
        std::iter::from_fn(move || {
            if at >= range.end {
                return None;
            }
            let end = range.end.min(at - at % COMPRESS_BLOCK_BYTES + COMPRESS_BLOCK_BYTES);
            let piece = at..end;
            at = end;
            Some(piece)
        })
    }

    /// Seeded text: words and numbers, compressible about 3:1, so frames span many payloads.
    fn text(len: usize, seed: u64) -> Vec<u8> {
        let words = ["sluice ", "moves ", "large ", "files ", "over ", "lossy ", "paths\n"];
        let mut rng = sluice_proto::rng::Rng::new(seed);
        let mut out = Vec::with_capacity(len + 32);
        while out.len() < len {
            let r = rng.next_u64();
            out.extend_from_slice(words[(r % 7) as usize].as_bytes());
            out.extend_from_slice(format!("{} ", r % 100_000).as_bytes());
        }
        out.truncate(len);
        out
    }

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Sends `data` at `base` through a deflater and an inflater in `packet`-byte payloads,
    /// delivering them in reverse order within each frame; returns what the receiver wrote
    /// and the wire bytes.
    fn round_trip(data: &[u8], base: u64, packet: usize) -> (Vec<u8>, u64) {
        let mut deflater = Deflater::new(3).unwrap();
        let mut inflater = Inflater::new().unwrap();
        let mut out = vec![0u8; data.len()];
        let range = base..base + data.len() as u64;
        for piece in pieces(range.clone()) {
            let read = |at: u64, dst: &mut [u8]| {
                let from = (at - base) as usize;
                dst.copy_from_slice(&data[from..from + dst.len()]);
                Ok(())
            };
            let start = piece.start;
            match deflater.piece(piece.clone(), read).unwrap() {
                None => {
                    let (a, b) = ((piece.start - base) as usize, (piece.end - base) as usize);
                    out[a..b].copy_from_slice(&data[a..b]);
                }
                Some(len) => {
                    let mut offsets: Vec<u64> = (0..len).step_by(packet).collect();
                    offsets.reverse();
                    let mut done = None;
                    for off in offsets {
                        let n = packet.min((len - off) as usize);
                        let mut buf = vec![0u8; n];
                        let wire = COMPRESSED | (start + off);
                        deflater.fill(wire, &mut buf).unwrap();
                        let piece = piece_at(std::slice::from_ref(&range), start + off).unwrap();
                        assert_eq!(piece.start, start);
                        if let Some(bytes) = inflater.accept(piece, wire, &buf).unwrap() {
                            done = Some(bytes.to_vec());
                        }
                    }
                    let bytes = done.expect("the frame completes");
                    let from = (start - base) as usize;
                    out[from..from + bytes.len()].copy_from_slice(&bytes);
                    deflater.done(start);
                }
            }
        }
        assert!(deflater.frames.is_empty() && inflater.frames.is_empty());
        (out, deflater.wire_bytes)
    }

    #[test]
    fn text_shrinks_and_comes_back_exact_from_an_unaligned_start() {
        let seed = 5;
        println!("text seed {seed}");
        let data = text(3_000_000, seed);
        let base = 5 * COMPRESS_BLOCK_BYTES + 1234;
        // Payloads of 1000 bytes delivered last first: the header comes last.
        let (out, wire) = round_trip(&data, base, 1000);
        assert!(out == data);
        println!("text: {} bytes became {wire} on the wire", data.len());
        assert!(wire * 2 < data.len() as u64, "{wire} wire bytes for {}", data.len());
    }

    #[test]
    fn random_bytes_go_raw_after_a_sample_and_text_after_them_shrinks_at_once() {
        let seed = 7;
        println!("noise seed {seed}");
        let mut data = noise(64 << 20, seed);
        data.extend_from_slice(&text(COMPRESS_BLOCK_BYTES as usize, seed));
        let mut deflater = Deflater::new(3).unwrap();
        let mut read_bytes = 0;
        let mut frames = 0;
        for piece in pieces(0..data.len() as u64) {
            let read = |at: u64, dst: &mut [u8]| {
                read_bytes += dst.len();
                dst.copy_from_slice(&data[at as usize..at as usize + dst.len()]);
                Ok(())
            };
            frames += usize::from(deflater.piece(piece, read).unwrap().is_some());
        }
        assert_eq!(frames, 1, "the text piece alone is a frame");
        // Each random piece cost a sample of a sixteenth: read and compressed.
        let noise_pieces = (64 << 20) / COMPRESS_BLOCK_BYTES as usize;
        let text_piece = COMPRESS_BLOCK_BYTES as usize;
        assert_eq!(read_bytes, noise_pieces * PROBE_BYTES + text_piece);
    }

    #[test]
    fn hostile_frames_are_errors_not_panics() {
        let b = COMPRESS_BLOCK_BYTES;
        let whole = 0..b;
        let mut inflater = Inflater::new().unwrap();
        let bad_header = [0xFFu8; 16];
        assert!(inflater.accept(whole.clone(), COMPRESSED, &bad_header).is_err(), "too long");
        let mut inflater = Inflater::new().unwrap();
        let at = COMPRESSED | (b - 50);
        assert!(inflater.accept(whole.clone(), at, &[0u8; 100]).is_err(), "past its piece");
        assert!(inflater.accept(10..b, COMPRESSED | 5, &[0u8; 4]).is_err(), "before its piece");
        let mut inflater = Inflater::new().unwrap();
        let mut garbage = vec![0u8; 64];
        garbage[..4].copy_from_slice(&64u32.to_be_bytes());
        garbage[4..8].copy_from_slice(&(b as u32).to_be_bytes());
        assert!(inflater.accept(whole.clone(), COMPRESSED, &garbage).is_err(), "not zstd");
        let mut inflater = Inflater::new().unwrap();
        garbage[4..8].copy_from_slice(&1000u32.to_be_bytes());
        assert!(inflater.accept(whole.clone(), COMPRESSED, &garbage).is_err(), "wrong length");
        for len in 0..20 {
            let mut inflater = Inflater::new().unwrap();
            let _ = inflater.accept(whole.clone(), COMPRESSED | 3, &noise(len, len as u64 + 1));
        }
    }

    #[test]
    fn the_piece_of_an_offset_is_the_senders() {
        let b = COMPRESS_BLOCK_BYTES;
        let missing = [100..b + 7, 3 * b + 1..5 * b];
        assert_eq!(piece_at(&missing, 150), Some(100..b));
        assert_eq!(piece_at(&missing, b + 3), Some(b..b + 7));
        assert_eq!(piece_at(&missing, b + 7), None);
        assert_eq!(piece_at(&missing, 4 * b - 1), Some(3 * b + 1..4 * b));
        assert_eq!(piece_at(&missing, 4 * b), Some(4 * b..5 * b));
        assert_eq!(piece_at(&missing, 99), None);
        let sender: Vec<_> = missing.iter().flat_map(|r| pieces(r.clone())).collect();
        for p in &sender {
            assert_eq!(piece_at(&missing, p.start).as_ref(), Some(p));
            assert_eq!(piece_at(&missing, p.end - 1).as_ref(), Some(p));
        }
    }

    #[test]
    fn pieces_follow_the_grid() {
        let b = COMPRESS_BLOCK_BYTES;
        let cut: Vec<_> = pieces(b - 10..2 * b + 5).collect();
        assert_eq!(cut, vec![b - 10..b, b..2 * b, 2 * b..2 * b + 5]);
        assert_eq!(pieces(7..7).count(), 0);
    }
}
