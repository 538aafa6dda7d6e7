//! Control packet bodies: ACK, ACK2, NAK, keep-alive, shutdown, drop-request, probe, probe-ack.

use super::{
    ACK_LEN, HALF_CIRCLE, Kind, NakRanges, WireError, field, forward_distance, read_seq, read_u32,
    seq_bits, write_u32,
};
use crate::seq::Seq31;

/// ACK body: what the receiver tells the sender every SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// ACK number, echoed by ACK2.
    pub ack_no: u32,
    /// Every sequence number before this one has been received.
    pub ack_dsn: Seq31,
    /// Receiver's smoothed RTT.
    pub rtt_us: u32,
    /// Receiver's RTT variance.
    pub rtt_var_us: u32,
    /// Packets the receiver can still accept.
    pub avail_window_pkts: u32,
    /// Packet arrival speed (median filter).
    pub recv_rate_pps: u32,
    /// Link capacity estimate from packet pairs.
    pub capacity_pps: u32,
    /// Least forward queuing delay of the packets of the last ACK interval (one-way delay above
    /// its recent minimum, see `delay`).
    pub queue_delay_us: u32,
    /// One past the largest sequence number received.
    pub rcv_next_dsn: Seq31,
    /// Packets before `rcv_next_dsn` still missing (the receiver's loss list length).
    pub missing_pkts: u32,
    /// Packets delivered per second over the last 40 ms or more (`estimate::DeliveryRate`), 0
    /// if unknown.
    pub delivery_rate_pps: u32,
}

impl Ack {
    fn parse(body: &[u8]) -> Result<Ack, WireError> {
        exact_len(body, ACK_LEN)?;
        Ok(Ack {
            ack_no: read_u32(body, field::ACK_NO.start),
            ack_dsn: read_seq(
                body,
                field::ACK_DSN.start,
                "ack sequence number has the top bit set",
            )?,
            rtt_us: read_u32(body, field::ACK_RTT.start),
            rtt_var_us: read_u32(body, field::ACK_RTT_VAR.start),
            avail_window_pkts: read_u32(body, field::ACK_AVAIL_WINDOW.start),
            recv_rate_pps: read_u32(body, field::ACK_RECV_RATE.start),
            capacity_pps: read_u32(body, field::ACK_CAPACITY.start),
            queue_delay_us: read_u32(body, field::ACK_QUEUE_DELAY.start),
            rcv_next_dsn: read_seq(
                body,
                field::ACK_RCV_NEXT.start,
                "received sequence number has the top bit set",
            )?,
            missing_pkts: read_u32(body, field::ACK_MISSING.start),
            delivery_rate_pps: read_u32(body, field::ACK_DELIVERY_RATE.start),
        })
    }

    fn emit(&self, out: &mut [u8]) {
        write_u32(out, field::ACK_NO.start, self.ack_no);
        write_u32(out, field::ACK_DSN.start, seq_bits(self.ack_dsn));
        write_u32(out, field::ACK_RTT.start, self.rtt_us);
        write_u32(out, field::ACK_RTT_VAR.start, self.rtt_var_us);
        write_u32(out, field::ACK_AVAIL_WINDOW.start, self.avail_window_pkts);
        write_u32(out, field::ACK_RECV_RATE.start, self.recv_rate_pps);
        write_u32(out, field::ACK_CAPACITY.start, self.capacity_pps);
        write_u32(out, field::ACK_QUEUE_DELAY.start, self.queue_delay_us);
        write_u32(out, field::ACK_RCV_NEXT.start, seq_bits(self.rcv_next_dsn));
        write_u32(out, field::ACK_MISSING.start, self.missing_pkts);
        write_u32(out, field::ACK_DELIVERY_RATE.start, self.delivery_rate_pps);
    }
}

/// A parsed control packet body.
#[derive(Debug, Clone)]
pub enum Control<'a> {
    /// See [`Ack`].
    Ack(Ack),
    /// Echo of an ACK number.
    Ack2 {
        /// The ACK being acknowledged.
        ack_no: u32,
    },
    /// Loss report.
    Nak(NakRanges<'a>),
    /// Liveness.
    KeepAlive,
    /// Orderly close.
    Shutdown {
        /// Application-defined reason code.
        reason: u32,
    },
    /// The sender gave up on `first..=last`.
    DropRequest {
        /// First sequence number dropped.
        first: Seq31,
        /// Last sequence number dropped.
        last: Seq31,
    },
    /// A datagram of a size the sender tries (path MTU probing): the id, then `padding` zero
    /// bytes that make the datagram that large.
    Probe {
        /// Echoed by the probe-ack.
        id: u32,
        /// Zero bytes after the id.
        padding: usize,
    },
    /// The receiver got the probe `id`.
    ProbeAck {
        /// The probe's id.
        id: u32,
    },
}

impl<'a> Control<'a> {
    /// Parses a plaintext control body of the given kind (`Kind::Data` is an error).
    ///
    /// Errors: `Malformed` for `Kind::Data`; `Truncated` for a body shorter than the kind's fixed
    /// part; `Malformed` for trailing bytes or a forbidden value (see the module docs). A NAK is
    /// validated whole here, so iterating its ranges never fails.
    pub fn parse(kind: Kind, body: &'a [u8]) -> Result<Self, WireError> {
        match kind {
            Kind::Data => Err(WireError::Malformed("data is not a control kind")),
            Kind::Parity => Err(WireError::Malformed("parity is not a control kind")),
            Kind::Ack => Ack::parse(body).map(Control::Ack),
            Kind::Ack2 => {
                exact_len(body, field::ACK2_ACK_NO.end)?;
                Ok(Control::Ack2 { ack_no: read_u32(body, field::ACK2_ACK_NO.start) })
            }
            Kind::Nak => NakRanges::parse(body).map(Control::Nak),
            Kind::KeepAlive => {
                exact_len(body, 0)?;
                Ok(Control::KeepAlive)
            }
            Kind::Shutdown => {
                exact_len(body, field::SHUTDOWN_REASON.end)?;
                Ok(Control::Shutdown { reason: read_u32(body, field::SHUTDOWN_REASON.start) })
            }
            Kind::DropRequest => {
                exact_len(body, field::DROP_LAST.end)?;
                let first =
                    read_seq(body, field::DROP_FIRST.start, "drop first has the top bit set")?;
                let last = read_seq(body, field::DROP_LAST.start, "drop last has the top bit set")?;
                check_drop_range(first, last)?;
                Ok(Control::DropRequest { first, last })
            }
            Kind::Probe => {
                if body.len() < field::PROBE_ID.end {
                    return Err(WireError::Truncated);
                }
                let padding = &body[field::PROBE_ID.end..];
                if padding.iter().any(|&b| b != 0) {
                    return Err(WireError::Malformed("probe padding is not zero"));
                }
                Ok(Control::Probe {
                    id: read_u32(body, field::PROBE_ID.start),
                    padding: padding.len(),
                })
            }
            Kind::ProbeAck => {
                exact_len(body, field::PROBE_ACK_ID.end)?;
                Ok(Control::ProbeAck { id: read_u32(body, field::PROBE_ACK_ID.start) })
            }
        }
    }

    /// This packet's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Control::Ack(_) => Kind::Ack,
            Control::Ack2 { .. } => Kind::Ack2,
            Control::Nak(_) => Kind::Nak,
            Control::KeepAlive => Kind::KeepAlive,
            Control::Shutdown { .. } => Kind::Shutdown,
            Control::DropRequest { .. } => Kind::DropRequest,
            Control::Probe { .. } => Kind::Probe,
            Control::ProbeAck { .. } => Kind::ProbeAck,
        }
    }

    /// Bytes of the plaintext body [`Control::emit`] writes.
    pub fn body_len(&self) -> usize {
        match self {
            Control::Ack(_) => ACK_LEN,
            Control::Ack2 { .. } => field::ACK2_ACK_NO.end,
            Control::Nak(ranges) => ranges.as_bytes().len(),
            Control::KeepAlive => 0,
            Control::Shutdown { .. } => field::SHUTDOWN_REASON.end,
            Control::DropRequest { .. } => field::DROP_LAST.end,
            Control::Probe { padding, .. } => field::PROBE_ID.end + padding,
            Control::ProbeAck { .. } => field::PROBE_ACK_ID.end,
        }
    }

    /// Writes the plaintext body into `buf`; returns its length.
    ///
    /// A NAK writes its whole body as received, however far its ranges have been iterated (to
    /// build a new NAK, use [`emit_nak`](super::emit_nak)). Errors: `BufferTooSmall`, or
    /// `Malformed` for a drop-request whose `last` is not `first` or less than 2^30 after it.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if let Control::DropRequest { first, last } = *self {
            check_drop_range(first, last)?;
        }
        let len = self.body_len();
        let out = buf.get_mut(..len).ok_or(WireError::BufferTooSmall)?;
        match self {
            Control::Ack(ack) => ack.emit(out),
            Control::Ack2 { ack_no } => write_u32(out, field::ACK2_ACK_NO.start, *ack_no),
            Control::Nak(ranges) => out.copy_from_slice(ranges.as_bytes()),
            Control::KeepAlive => {}
            Control::Shutdown { reason } => write_u32(out, field::SHUTDOWN_REASON.start, *reason),
            Control::DropRequest { first, last } => {
                write_u32(out, field::DROP_FIRST.start, seq_bits(*first));
                write_u32(out, field::DROP_LAST.start, seq_bits(*last));
            }
            Control::Probe { id, .. } => {
                write_u32(out, field::PROBE_ID.start, *id);
                out[field::PROBE_ID.end..].fill(0);
            }
            Control::ProbeAck { id } => write_u32(out, field::PROBE_ACK_ID.start, *id),
        }
        Ok(len)
    }
}

/// A fixed-size body must be exactly `len` bytes.
fn exact_len(body: &[u8], len: usize) -> Result<(), WireError> {
    if body.len() < len {
        Err(WireError::Truncated)
    } else if body.len() > len {
        Err(WireError::Malformed("trailing bytes after a fixed-size body"))
    } else {
        Ok(())
    }
}

/// `last` is `first` or after it, less than half the circle away.
fn check_drop_range(first: Seq31, last: Seq31) -> Result<(), WireError> {
    if forward_distance(first, last) >= HALF_CIRCLE {
        return Err(WireError::Malformed("drop-request last is before first"));
    }
    Ok(())
}
