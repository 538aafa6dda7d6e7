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
}

/// Reads `TCP_INFO` of `stream`. `Unsupported` off Linux.
#[cfg(target_os = "linux")]
pub fn tcp_rtt(stream: &TcpStream) -> io::Result<TcpRtt> {
    use std::os::fd::AsRawFd;

    // SAFETY: `tcp_info` is plain integers; all zeroes is a valid value.
    #[allow(unsafe_code)]
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a live `tcp_info` of `len` bytes; the kernel writes at most `len` bytes
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
    Ok(TcpRtt {
        rtt_us: info.tcpi_rtt,
        rcv_rtt_us: info.tcpi_rcv_rtt,
        retransmitted: info.tcpi_total_retrans,
        cwnd_bytes: u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
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
        // Loopback's round trip is far below a second.
        assert!(sender.rtt_us < 1_000_000 && receiver.rcv_rtt_us < 1_000_000);
    }
}
