//! Batch sends: one GSO super-datagram per system call, or `sendmmsg` where GSO is missing or
//! was switched off.

use std::io::{self, IoSlice};
use std::sync::atomic::Ordering;

use quinn_udp::Transmit;
use rustix::io::Errno;
use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags};

use crate::socket::{SENDMMSG_BATCH, Socket};
use crate::{is_too_big, is_transient};

impl Socket {
    /// Sends `data`, the concatenation of datagrams of `segment_size` bytes each (the last may be
    /// shorter). Returns how many whole datagrams the kernel took: fewer than all when its buffer
    /// is full (`WouldBlock` is `Ok(0)`). Errors after which the socket still works (an ICMP
    /// report of an earlier datagram, a full device queue) count as sent: to the protocol
    /// they are lost packets.
    ///
    /// One system call carries [`Socket::segments_per_call`] datagrams (all of a batch of up to
    /// [`crate::MAX_BATCH_SEGMENTS`] small datagrams); a longer `data` takes several.
    ///
    /// `EMSGSIZE` (a datagram larger than the path MTU, don't-fragment being set, or than UDP
    /// allows; see [`crate::is_too_big`]) is returned as an error, as is any other error that
    /// is not transient, but only when nothing of `data` was taken: after a partial send the
    /// count is returned and the next call meets the error. A GSO send the device or path
    /// cannot segment (`EIO`, `EINVAL`) is resent with `sendmmsg` and GSO stays off for this
    /// socket from then on, unless `sendmmsg` says the datagram itself is too big.
    ///
    /// An empty `data` sends nothing; a zero `segment_size` with data is `InvalidInput`.
    pub fn send_batch(&self, data: &[u8], segment_size: usize) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        if segment_size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment size 0 for a non-empty batch",
            ));
        }
        let total = data.len().div_ceil(segment_size);
        let mut sent = 0;
        while sent < total {
            let rest = &data[sent * segment_size..];
            let step = if self.gso() {
                self.send_gso(rest, segment_size)
            } else {
                self.send_mmsg(rest, segment_size)
            };
            match step {
                Ok(0) => break,
                Ok(taken) => sent += taken,
                Err(e) if sent == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(sent)
    }

    /// One GSO send of the first datagrams of `data`. `Ok(0)` means the buffer is full.
    fn send_gso(&self, data: &[u8], segment_size: usize) -> io::Result<usize> {
        let count = self.segments_per_call(segment_size).min(data.len().div_ceil(segment_size));
        let contents = &data[..(count * segment_size).min(data.len())];
        let transmit = Transmit {
            destination: self.peer,
            ecn: None,
            contents,
            // quinn-udp sets UDP_SEGMENT only when the contents are longer than one segment.
            segment_size: Some(segment_size),
            src_ip: None,
        };
        // `try_send` retries EINTR itself and returns every other error to us.
        match self.state.try_send((&self.socket).into(), &transmit) {
            Ok(()) => Ok(count),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) if is_too_big(&e) => Err(e),
            Err(e) if is_transient(&e) => Ok(count),
            Err(e) if count > 1 && gso_refused(&e) => self.gso_failed(contents, segment_size, e),
            Err(e) => Err(e),
        }
    }

    /// A GSO send failed with `gso_error`: resend with `sendmmsg`. When that works (or finds the
    /// buffer full) the device or path cannot segment, and GSO goes off for good; when it says
    /// the datagram is too big, the size was the problem (a segment above the path MTU also
    /// makes GSO fail with `EINVAL`), and GSO stays on.
    fn gso_failed(
        &self,
        contents: &[u8],
        segment_size: usize,
        gso_error: io::Error,
    ) -> io::Result<usize> {
        let retry = self.send_mmsg(contents, segment_size);
        match &retry {
            Err(e) if is_too_big(e) => {}
            _ => {
                if self.gso_on.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        peer = %self.peer,
                        "UDP GSO send failed ({gso_error}); using sendmmsg on this socket from now on"
                    );
                }
            }
        }
        retry
    }

    /// One `sendmmsg` of up to [`SENDMMSG_BATCH`] datagrams from the start of `data`; no
    /// allocation. `Ok(0)` means the buffer is full. A transient error counts the first
    /// datagram as sent (it is the one the error stopped).
    fn send_mmsg(&self, data: &[u8], segment_size: usize) -> io::Result<usize> {
        let mut iovs = [IoSlice::new(&[]); SENDMMSG_BATCH];
        let mut count = 0;
        for (slot, datagram) in iovs.iter_mut().zip(data.chunks(segment_size)) {
            *slot = IoSlice::new(datagram);
            count += 1;
        }
        // Empty ancillary buffers: no control messages, but `MMsgHdr` wants one per message.
        let mut controls: [SendAncillaryBuffer<'_, '_, '_>; SENDMMSG_BATCH] =
            std::array::from_fn(|_| SendAncillaryBuffer::default());
        let mut msgs: [MMsgHdr<'_>; SENDMMSG_BATCH] = {
            let mut controls = controls.iter_mut();
            let mut iovs = iovs.iter();
            std::array::from_fn(|_| match (iovs.next(), controls.next()) {
                (Some(iov), Some(control)) => {
                    MMsgHdr::new_with_addr(&self.peer_any, std::slice::from_ref(iov), control)
                }
                // Both arrays have SENDMMSG_BATCH elements, as does this one.
                _ => unreachable!("one iovec and one control buffer per message"),
            })
        };
        loop {
            match rustix::net::sendmmsg(&self.socket, &mut msgs[..count], SendFlags::empty()) {
                Ok(n) => return Ok(n),
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return Ok(0),
                Err(e) => {
                    let e = io::Error::from(e);
                    return if is_transient(&e) { Ok(1) } else { Err(e) };
                }
            }
        }
    }
}

/// Errors with which a GSO send says the device or path may not segment: `EIO` (a driver
/// without checksum offload) and `EINVAL` (`UDP_SEGMENT` refused, or a segment above the MTU).
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == Errno::IO.raw_os_error() || code == Errno::INVAL.raw_os_error()
    )
}
