//! The kernel's round-trip figures for a TCP connection (`TCP_INFO`), for the buffer sizing of
//! Sluice's TCP data streams. An echo timed by the application also waits behind the data
//! queued in the sender's socket; the kernel's figures do not.

use std::io;
use std::net::TcpStream;

/// Round-trip figures the kernel keeps for a TCP connection, in microseconds (0: none yet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpRtt {
    /// Smoothed round trip of what this end sent.
    pub rtt_us: u32,
    /// The receiving side's estimate of the round trip, the one Linux's own tuning of the
    /// receive buffer uses (from the timestamps of arriving data, or the time to receive one
    /// window).
    pub rcv_rtt_us: u32,
    /// Segments this end retransmitted, in all.
    pub retransmitted: u32,
    /// The congestion window, in bytes.
    pub cwnd_bytes: u64,
    /// The least round trip the connection saw (Linux 4.6 on; 0 where the kernel lacks it).
    pub min_rtt_us: u32,
    /// Data segments this end sent, in all (Linux 4.6 on; 0 where the kernel lacks it).
    pub data_segs_out: u32,
}

/// Byte offsets in Linux's `struct tcp_info` (`include/uapi/linux/tcp.h`; the structure only
/// grows, and the kernel fills what it has and says how much). `libc`'s own structure differs
/// between its versions and C libraries, so the fields are read by offset.
#[cfg(target_os = "linux")]
mod offset {
    pub(super) const SND_MSS: usize = 16;
    pub(super) const RTT: usize = 68;
    pub(super) const SND_CWND: usize = 80;
    pub(super) const RCV_RTT: usize = 92;
    pub(super) const TOTAL_RETRANS: usize = 100;
    /// Linux 4.6 on.
    pub(super) const MIN_RTT: usize = 148;
    pub(super) const DATA_SEGS_OUT: usize = 156;
}

/// Reads `TCP_INFO` of `stream`. `Unsupported` off Linux.
#[cfg(target_os = "linux")]
pub fn tcp_rtt(stream: &TcpStream) -> io::Result<TcpRtt> {
    use std::os::fd::AsRawFd;

    // Room for the whole structure of any kernel so far (280 bytes in Linux 6), 8-aligned.
    let mut info = [0u64; 64];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is a live buffer of `len` bytes; the kernel writes at most `len` bytes of
    // integers into it and stores the count in `len`. The descriptor is borrowed from
    // `stream`, so it stays open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let filled = (len as usize).min(std::mem::size_of_val(&info));
    // A field past what the kernel filled reads 0. The offsets are 4-aligned: a field is one
    // half of a word, in the machine's order (no copy of the buffer, read every 50 ms per
    // stream by the sender's grower).
    let at = |offset: usize| {
        if offset + 4 > filled {
            return 0;
        }
        let word = info[offset / 8].to_ne_bytes();
        let half = offset % 8;
        u32::from_ne_bytes([word[half], word[half + 1], word[half + 2], word[half + 3]])
    };
    Ok(TcpRtt {
        rtt_us: at(offset::RTT),
        rcv_rtt_us: at(offset::RCV_RTT),
        retransmitted: at(offset::TOTAL_RETRANS),
        cwnd_bytes: u64::from(at(offset::SND_CWND)) * u64::from(at(offset::SND_MSS)),
        min_rtt_us: at(offset::MIN_RTT),
        data_segs_out: at(offset::DATA_SEGS_OUT),
    })
}

/// Reads `TCP_INFO` of `stream`. `Unsupported` off Linux.
#[cfg(not(target_os = "linux"))]
pub fn tcp_rtt(_stream: &TcpStream) -> io::Result<TcpRtt> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn a_loopback_connection_reports_round_trips_after_data() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut b, _) = listener.accept().unwrap();
        let block = vec![7u8; 1 << 20];
        let mut got = vec![0u8; block.len()];
        for _ in 0..8 {
            a.write_all(&block).unwrap();
            b.read_exact(&mut got).unwrap();
            b.write_all(&got[..1]).unwrap();
            a.read_exact(&mut got[..1]).unwrap();
        }
        let (sender, receiver) = (tcp_rtt(&a).unwrap(), tcp_rtt(&b).unwrap());
        println!("sender {sender:?}, receiver {receiver:?}");
        assert!(sender.rtt_us > 0, "{sender:?}");
        // 8 MiB went out in segments of at most 64 KiB (loopback's MTU), each counted.
        assert!(sender.data_segs_out >= 128, "{sender:?}");
        assert!(sender.min_rtt_us > 0 && sender.min_rtt_us <= sender.rtt_us, "{sender:?}");
        // Loopback's round trip is far below a second.
        assert!(sender.rtt_us < 1_000_000 && receiver.rcv_rtt_us < 1_000_000);
    }
}
