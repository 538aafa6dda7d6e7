//! Test endpoints: a constant-bit-rate source and a sink that records what arrives.
//!
//! A datagram carries its sequence number and send time (16 bytes, little endian) repeated over
//! its whole length, so a receiver can rebuild the original by majority vote and count exactly
//! how many bits the network flipped, even when the flip hit the sequence number.

use sluice_netsim::Endpoint;

/// The smallest datagram: three copies of the 16-byte stamp, enough for a majority vote.
pub(crate) const MIN_LEN: usize = 48;

const STAMP: usize = 16;

/// Writes the stamp of (`seq`, `sent_us`) over `buf`.
pub(crate) fn encode(buf: &mut [u8], seq: u64, sent_us: u64) {
    assert!(buf.len() >= MIN_LEN, "datagram shorter than {MIN_LEN} bytes");
    let mut stamp = [0u8; STAMP];
    stamp[..8].copy_from_slice(&seq.to_le_bytes());
    stamp[8..].copy_from_slice(&sent_us.to_le_bytes());
    let mut chunks = buf.chunks_exact_mut(STAMP);
    for chunk in &mut chunks {
        let chunk: &mut [u8; STAMP] = chunk.try_into().unwrap();
        *chunk = stamp;
    }
    let tail = chunks.into_remainder();
    let tail_len = tail.len();
    tail.copy_from_slice(&stamp[..tail_len]);
}

/// (sequence number, send time, bits that differ from the original).
pub(crate) fn decode(datagram: &[u8], verify: bool) -> (u64, u64, u32) {
    let first: [u8; STAMP] = datagram[..STAMP].try_into().unwrap();
    let intact =
        |stamp: &[u8; STAMP]| datagram.chunks(STAMP).all(|chunk| chunk == &stamp[..chunk.len()]);
    let stamp = if !verify || intact(&first) {
        first
    } else {
        let copies = datagram.len() / STAMP;
        let mut voted = [0u8; STAMP];
        for (i, byte) in voted.iter_mut().enumerate() {
            for bit in 0..8 {
                let ones =
                    (0..copies).filter(|copy| datagram[copy * STAMP + i] >> bit & 1 == 1).count();
                if 2 * ones > copies {
                    *byte |= 1 << bit;
                }
            }
        }
        voted
    };
    let flipped = if verify {
        datagram
            .chunks(STAMP)
            .map(|chunk| chunk.iter().zip(&stamp).map(|(x, y)| (x ^ y).count_ones()).sum::<u32>())
            .sum()
    } else {
        0
    };
    let seq = u64::from_le_bytes(stamp[..8].try_into().unwrap());
    let sent_us = u64::from_le_bytes(stamp[8..].try_into().unwrap());
    (seq, sent_us, flipped)
}

/// One datagram as the receiver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arrival {
    pub(crate) seq: u64,
    pub(crate) sent_us: u64,
    pub(crate) at_us: u64,
    pub(crate) len: usize,
    /// Bits that differ from what was sent.
    pub(crate) flipped: u32,
}

impl Arrival {
    pub(crate) fn delay_us(&self) -> u64 {
        self.at_us - self.sent_us
    }
}

/// Sends `count` datagrams of `len` bytes, one every `interval_us`, from the first wake-up on.
#[derive(Debug, Clone)]
pub(crate) struct Cbr {
    len: usize,
    interval_us: u64,
    count: u64,
    sent: u64,
    next_us: Option<u64>,
}

/// A test endpoint: optionally a CBR source, always a recorder of what arrives, optionally
/// answering every `ack_every`-th arrival with a small datagram.
#[derive(Debug, Clone)]
pub(crate) struct TestNode {
    cbr: Option<Cbr>,
    /// Everything received, in order (unless `keep` is off).
    pub(crate) arrivals: Vec<Arrival>,
    keep: bool,
    verify: bool,
    /// Datagrams received.
    pub(crate) received: u64,
    /// Arrivals whose sequence number is below one seen before (held back and passed).
    pub(crate) late: u64,
    max_seq: Option<u64>,
    expect: u64,
    ack_every: u64,
    acks_pending: u64,
    /// Acknowledgements sent.
    pub(crate) acks_sent: u64,
}

impl TestNode {
    fn new(cbr: Option<Cbr>, expect: u64) -> Self {
        Self {
            cbr,
            arrivals: Vec::new(),
            keep: true,
            verify: true,
            received: 0,
            late: 0,
            max_seq: None,
            expect,
            ack_every: 0,
            acks_pending: 0,
            acks_sent: 0,
        }
    }

    /// A CBR source; done once it has sent everything.
    pub(crate) fn source(len: usize, interval_us: u64, count: u64) -> Self {
        assert!(len >= MIN_LEN);
        Self::new(Some(Cbr { len, interval_us, count, sent: 0, next_us: None }), 0)
    }

    /// A sink that never reports done (runs end at the deadline or when nothing is left to do).
    pub(crate) fn sink() -> Self {
        Self::new(None, u64::MAX)
    }

    /// Done after `n` arrivals.
    pub(crate) fn expecting(mut self, n: u64) -> Self {
        self.expect = n;
        self
    }

    /// Answers every `k`-th arrival with a 48-byte acknowledgement.
    pub(crate) fn acking_every(mut self, k: u64) -> Self {
        self.ack_every = k;
        self
    }

    /// Only counts arrivals: no list, no bit check (for long runs).
    pub(crate) fn counting_only(mut self) -> Self {
        self.keep = false;
        self.verify = false;
        self
    }

    /// Datagrams sent by the CBR source.
    pub(crate) fn sent(&self) -> u64 {
        self.cbr.as_ref().map_or(0, |cbr| cbr.sent)
    }

    /// The sequence numbers received, in arrival order.
    pub(crate) fn seqs(&self) -> Vec<u64> {
        self.arrivals.iter().map(|a| a.seq).collect()
    }
}

impl Endpoint for TestNode {
    fn handle_datagram(&mut self, now_us: u64, datagram: &mut [u8]) {
        self.received += 1;
        if datagram.len() >= MIN_LEN {
            let (seq, sent_us, flipped) = decode(datagram, self.verify);
            if self.max_seq.is_some_and(|max| seq < max) {
                self.late += 1;
            }
            self.max_seq = self.max_seq.max(Some(seq));
            if self.keep {
                let len = datagram.len();
                self.arrivals.push(Arrival { seq, sent_us, at_us: now_us, len, flipped });
            }
        }
        if self.ack_every > 0 && self.received.is_multiple_of(self.ack_every) {
            self.acks_pending += 1;
        }
    }

    fn handle_timeout(&mut self, now_us: u64) {
        if let Some(cbr) = &mut self.cbr {
            cbr.next_us.get_or_insert(now_us);
        }
    }

    fn poll_transmit(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        if self.acks_pending > 0 {
            self.acks_pending -= 1;
            self.acks_sent += 1;
            encode(&mut buf[..MIN_LEN], self.acks_sent, now_us);
            return Some(MIN_LEN);
        }
        let cbr = self.cbr.as_mut()?;
        if cbr.sent == cbr.count || cbr.next_us? > now_us {
            return None;
        }
        encode(&mut buf[..cbr.len], cbr.sent, now_us);
        cbr.sent += 1;
        cbr.next_us = cbr.next_us.map(|next| next + cbr.interval_us);
        Some(cbr.len)
    }

    fn poll_timeout(&self) -> Option<u64> {
        let cbr = self.cbr.as_ref()?;
        if cbr.sent == cbr.count { None } else { cbr.next_us }
    }

    fn is_done(&self) -> bool {
        self.cbr.as_ref().is_none_or(|cbr| cbr.sent == cbr.count) && self.received >= self.expect
    }
}
