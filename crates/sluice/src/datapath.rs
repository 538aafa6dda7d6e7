//! The data plane: one data channel over a real UDP socket, moving a byte range of a file.
//!
//! CONTRACT STUB (issue 3): helper "datapath" implements it; the signatures are fixed.

use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::sync::atomic::AtomicBool;

use sluice_proto::config::ChannelConfig;
use sluice_proto::crypto::PacketKey;

/// The two keys of one end of a data channel.
#[derive(Debug)]
pub struct ChannelKeys {
    /// Seals what this end sends.
    pub seal: PacketKey,
    /// Opens what the peer sends.
    pub open: PacketKey,
}

/// Everything one end of a data channel needs.
#[derive(Debug)]
pub struct ChannelParams {
    /// Protocol settings (both ends must agree on `initial_dsn` and `packet_size`).
    pub config: ChannelConfig,
    /// This end's keys.
    pub keys: ChannelKeys,
    /// A bound UDP socket (this end's).
    pub socket: UdpSocket,
    /// The peer's data socket address.
    pub peer: SocketAddr,
}

/// Progress of a running channel, reported at most every 100 ms and once at the end.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Payload bytes acknowledged (sender) or received (receiver) so far.
    pub bytes: u64,
    /// Total payload bytes of the range.
    pub total: u64,
}

/// What a finished channel did.
#[derive(Debug, Clone, Default)]
pub struct ChannelReport {
    /// Payload bytes moved.
    pub bytes: u64,
    /// Seconds from start to finish.
    pub seconds: f64,
    /// Data packets sent for the first time (sender) or accepted (receiver).
    pub data_pkts: u64,
    /// Data packets retransmitted (sender only).
    pub retransmitted_pkts: u64,
    /// Datagrams rejected (failed authentication or malformed).
    pub rejected_pkts: u64,
}

/// Why a channel failed.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Nothing heard from the peer for the idle timeout.
    #[error("no data-channel packets from the peer for {0} s: the peer or the path is gone")]
    PeerSilent(u64),
    /// Reading or writing the file failed.
    #[error("file I/O failed: {0}")]
    File(#[source] std::io::Error),
    /// The socket failed.
    #[error("data socket failed: {0}")]
    Socket(#[source] std::io::Error),
    /// The caller cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The configuration was refused.
    #[error("{0}")]
    Config(#[from] sluice_proto::config::ConfigError),
    /// The peer closed the channel before the range was complete.
    #[error("the peer closed the data channel early (reason {0})")]
    ClosedEarly(u32),
}

/// Sends `range` of `file` (payload offsets are file offsets). Blocks until every byte is
/// acknowledged, the peer is silent for the idle timeout, or `cancel` is set.
pub fn send_file(
    params: ChannelParams,
    file: &File,
    range: Range<u64>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    let _ = (params, file, range, progress, cancel);
    unimplemented!()
}

/// Receives `range` into `file` (written at the file offsets the packets carry). Blocks until
/// every byte arrived (then lingers briefly so the sender sees the final ACK), the peer is silent
/// for the idle timeout, or `cancel` is set.
pub fn receive_file(
    params: ChannelParams,
    file: &File,
    range: Range<u64>,
    progress: &mut dyn FnMut(Progress),
    cancel: &AtomicBool,
) -> Result<ChannelReport, DataError> {
    let _ = (params, file, range, progress, cancel);
    unimplemented!()
}
