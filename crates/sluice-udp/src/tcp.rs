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

/// `struct tcp_info` as Linux 4.6 on has it: the fields `libc` names, then those up to
/// `tcpi_data_segs_out` (the kernel fills what it has and says how much).
#[cfg(target_os = "linux")]
#[repr(C)]
#[allow(dead_code)] // the fields before those read are there for the layout
struct TcpInfo {
    base: libc::tcp_info,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
}

/// Reads `TCP_INFO` of `stream`. `Unsupported` off Linux.
#[cfg(target_os = "linux")]
pub fn tcp_rtt(stream: &TcpStream) -> io::Result<TcpRtt> {
    use std::os::fd::AsRawFd;

    // SAFETY: `TcpInfo` is plain integers; all zeroes is a valid value (and the value of
    // every field an older kernel does not fill).
    #[allow(unsafe_code)]
    let mut info: TcpInfo = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: `info` is a live `TcpInfo` of `len` bytes; the kernel writes at most `len` bytes
    // of integers into it and stores the count in `len`. The descriptor is borrowed from
    // `stream`, so it stays open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let base = &info.base;
    Ok(TcpRtt {
        rtt_us: base.tcpi_rtt,
        rcv_rtt_us: base.tcpi_rcv_rtt,
        retransmitted: base.tcpi_total_retrans,
        cwnd_bytes: u64::from(base.tcpi_snd_cwnd) * u64::from(base.tcpi_snd_mss),
        min_rtt_us: info.min_rtt,
        data_segs_out: info.data_segs_out,
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
