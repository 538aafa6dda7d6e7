//! One stream's socket, non-blocking: the records read and not yet handled, the sealed bytes
//! not yet written, and a wait in `poll(2)` for either.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use sluice_proto::wire::Kind;

use super::super::{ChannelKeys, DataError};
use super::record::{MAX_RECORD_BYTES, Opener, Record, Sealer};

/// After it sent its last record, an end waits at most this long for the peer's FIN, so that
/// the peer reads that record before the socket closes (a close with unread bytes resets).
const CLOSE_WAIT: Duration = Duration::from_millis(200);

/// A stream's socket with its two directions' records.
pub(super) struct Conn {
    stream: TcpStream,
    sealer: Sealer,
    opener: Opener,
    /// Bytes read: `input[taken..filled]` is not handled yet.
    input: Vec<u8>,
    taken: usize,
    filled: usize,
    /// Sealed records: `output[written..]` is not written yet.
    output: Vec<u8>,
    written: usize,
    /// The transfer's clock origin (records' timestamps count from it).
    epoch: Instant,
    /// When the last record came in, and when the last one was queued to go out.
    pub(super) heard: Instant,
    pub(super) spoke: Instant,
    /// Whether the peer closed its side.
    eof: bool,
    /// Whether the peer sent its shutdown.
    shut_down: bool,
}

impl Conn {
    /// `stream`, set non-blocking with `TCP_NODELAY` (a short record, an ACK or the last data,
    /// goes at once), reading into a buffer of `input_bytes` (at least one whole record).
    pub(super) fn new(
        stream: TcpStream,
        keys: ChannelKeys,
        epoch: Instant,
        input_bytes: usize,
    ) -> Result<Self, DataError> {
        stream.set_nonblocking(true).map_err(DataError::Socket)?;
        stream.set_nodelay(true).map_err(DataError::Socket)?;
        prefer_bbr(&stream);
        let now = Instant::now();
        Ok(Self {
            stream,
            sealer: Sealer::new(keys.seal),
            opener: Opener::new(keys.open),
            input: vec![0; input_bytes.max(2 * MAX_RECORD_BYTES)],
            taken: 0,
            filled: 0,
            output: Vec::with_capacity(2 * MAX_RECORD_BYTES),
            written: 0,
            epoch,
            heard: now,
            spoke: now,
            eof: false,
            shut_down: false,
        })
    }

    pub(super) fn socket(&self) -> &TcpStream {
        &self.stream
    }

    /// This end's clock for record timestamps: microseconds since the transfer started,
    /// wrapping.
    pub(super) fn now_ts(&self) -> u32 {
        self.epoch.elapsed().as_micros() as u32
    }

    /// Microseconds from the timestamp `ts_us` (of this end's clock) to now.
    pub(super) fn since_ts(&self, ts_us: u32) -> u64 {
        u64::from(self.now_ts().wrapping_sub(ts_us))
    }

    /// Reads what the socket holds, until the buffer is full or `max_bytes` came; returns the
    /// bytes read. Room is made by moving the unhandled rest to the front, so a data record's
    /// payload range is valid only until the next call.
    pub(super) fn read(&mut self, max_bytes: usize) -> Result<usize, DataError> {
        if self.input.len() - self.filled < MAX_RECORD_BYTES {
            self.input.copy_within(self.taken..self.filled, 0);
            self.filled -= self.taken;
            self.taken = 0;
        }
        let mut got = 0;
        while got < max_bytes && self.filled < self.input.len() && !self.eof {
            match self.stream.read(&mut self.input[self.filled..]) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.filled += n;
                    got += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(DataError::Socket(e)),
            }
        }
        Ok(got)
    }

    /// Opens the next whole record read, if any: its timestamp (the peer's clock) and what it
    /// says.
    pub(super) fn next(&mut self) -> Result<Option<(u32, Record)>, DataError> {
        let at = self.taken;
        let Some((used, ts, record)) = self.opener.open(&mut self.input[at..self.filled])? else {
            return Ok(None);
        };
        self.taken += used;
        self.heard = Instant::now();
        self.shut_down |= matches!(record, Record::Shutdown { .. });
        let record = match record {
            Record::Data { offset, payload } => {
                Record::Data { offset, payload: at + payload.start..at + payload.end }
            }
            other => other,
        };
        Ok(Some((ts, record)))
    }

    /// The bytes at `range` of the input (a data record's payload from [`Conn::next`]).
    pub(super) fn payload(&self, range: &std::ops::Range<usize>) -> &[u8] {
        &self.input[range.clone()]
    }

    /// Whether the peer closed its side, and whether it did so inside a record.
    pub(super) fn closed(&self) -> Option<bool> {
        self.eof.then_some(self.taken < self.filled)
    }

    /// Whether the peer ended the stream (its shutdown, or its side closed): nothing more is
    /// said to it.
    pub(super) fn peer_gone(&self) -> bool {
        self.shut_down || self.eof
    }

    /// Queues a record whose body `fill` writes (see [`Sealer::seal`]).
    pub(super) fn queue(
        &mut self,
        kind: Kind,
        body_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let ts = self.now_ts();
        self.sealer.seal(&mut self.output, kind, ts, body_len, fill)?;
        self.spoke = Instant::now();
        Ok(())
    }

    /// Queues a control record.
    pub(super) fn control(&mut self, kind: Kind, body: &[u8]) -> Result<(), DataError> {
        let ts = self.now_ts();
        self.sealer.control(&mut self.output, kind, ts, body)?;
        self.spoke = Instant::now();
        Ok(())
    }

    /// Bytes queued and not yet written.
    pub(super) fn queued(&self) -> usize {
        self.output.len() - self.written
    }

    /// Writes what is queued until the socket takes no more.
    pub(super) fn flush(&mut self) -> Result<(), DataError> {
        while self.written < self.output.len() {
            match self.stream.write(&self.output[self.written..]) {
                Ok(0) => return Err(DataError::Socket(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(DataError::Socket(e)),
            }
        }
        if self.written == self.output.len() {
            self.output.clear();
            self.written = 0;
        }
        Ok(())
    }

    /// Sleeps until the socket has bytes to read, takes bytes to write (when some are
    /// queued), or `until`.
    pub(super) fn wait(&self, until: Instant) -> Result<(), DataError> {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let mut flags = PollFlags::IN;
        if self.queued() > 0 {
            flags |= PollFlags::OUT;
        }
        let mut fds = [PollFd::new(&self.stream, flags)];
        let timeout =
            Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(DataError::Socket(e.into())),
        }
    }

    /// After the socket failed: the reason of a shutdown the peer sent before it went, if one
    /// is among the bytes still to be read (a reset leaves those readable).
    pub(super) fn last_word(&mut self) -> Option<u32> {
        loop {
            loop {
                match self.next() {
                    Ok(Some((_, Record::Shutdown { reason }))) => return Some(reason),
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => return None,
                }
            }
            match self.read(usize::MAX) {
                Ok(n) if n > 0 => {}
                _ => return None,
            }
        }
    }

    /// Ends the stream: queues a shutdown with `reason`, writes what is queued, and closes
    /// this side; waits briefly for the peer's FIN so that it reads the shutdown before this
    /// socket goes. Best effort when the stream is failing anyway.
    pub(super) fn close(mut self, reason: u32) -> Result<(), DataError> {
        let deadline = Instant::now() + CLOSE_WAIT;
        self.control(Kind::Shutdown, &reason.to_be_bytes())?;
        while self.queued() > 0 && Instant::now() < deadline {
            self.flush()?;
            if self.queued() > 0 {
                self.wait(deadline)?;
            }
        }
        if self.queued() > 0 {
            return Err(DataError::Socket(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not take the stream's last record",
            )));
        }
        self.stream.shutdown(Shutdown::Write).map_err(DataError::Socket)?;
        // The peer closes once it read the shutdown; what it sent meanwhile is dropped. This
        // wait matters whatever the reason: a socket closed with unread bytes sends a reset,
        // and a reset throws away what the kernel had not yet sent, the shutdown among it, so
        // a peer told nothing would fail on "connection reset" instead of this end's word.
        while self.closed().is_none() && Instant::now() < deadline {
            self.taken = self.filled;
            self.read(usize::MAX)?;
            if self.closed().is_none() {
                self.wait(deadline)?;
            }
        }
        Ok(())
    }
}

/// Moves the stream to BBR where the host offers it (and allows it to this process: the
/// kernel's `tcp_allowed_congestion_control`): on a lossy long path a loss-based controller
/// (cubic, reno) halves its window at every loss, BBR paces at the bandwidth it measures. Where
/// BBR is not there, the host's default stays, said once at debug level.
fn prefer_bbr(stream: &TcpStream) {
    if let Err(e) = rustix::net::sockopt::set_tcp_congestion(stream, "bbr") {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            let current = rustix::net::sockopt::tcp_congestion(stream).unwrap_or_default();
            tracing::debug!(error = %e, congestion_control = current, "BBR is not available");
        });
    }
}
