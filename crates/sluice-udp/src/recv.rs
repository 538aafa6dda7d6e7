//! Batch receives: one `recvmmsg` into reusable buffers, each message split into datagrams by
//! its GRO segment size, each with the kernel's receive timestamp.
//!
//! The call is our own (quinn-udp's has no timestamps): the protocol's estimators need every
//! datagram's arrival time. A batch read in one call arrives over the time since the previous
//! call, and stamping all of it with the time of the call makes the intervals between its
//! datagrams zero: a packet pair then reads as an infinitely fast link. The kernel stamps each
//! datagram when it reaches the socket (`SO_TIMESTAMPNS`); a GRO message, which the kernel
//! joined from several datagrams, carries one stamp for all of them. The kernel turns stamping
//! on lazily when the first socket of the system asks for it: datagrams that arrive in that
//! first moment are stamped when they are read (their age is then about zero).

use std::io;
use std::mem::{MaybeUninit, size_of};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::socket::Socket;
use crate::{RECV_BATCH, is_transient};

/// Bytes of one message buffer: a GRO message (up to 64 segments, at most 64 KiB in all) or
/// the largest datagram fits.
const MESSAGE_BYTES: usize = 65_536;

/// How many transient errors (ICMP reports of earlier sends) one `recv_batch` call skips before
/// it reports that nothing is waiting.
const TRANSIENT_RETRIES: usize = RECV_BATCH;

/// Control-message space per message: a GRO segment size (an int) and a timestamp (a timespec),
/// each with its header, with room to spare; `u64`s keep it aligned for `cmsghdr`.
const CONTROL_WORDS: usize = 16;

/// What the kernel said about one message.
#[derive(Debug, Clone, Copy)]
struct Meta {
    len: usize,
    /// Bytes per datagram within the message (its length when GRO did not join any).
    stride: usize,
    addr: Option<SocketAddr>,
    /// Nanoseconds between the kernel's receive stamp and the moment the batch was read.
    age_ns: Option<u64>,
}

const NO_META: Meta = Meta { len: 0, stride: 0, addr: None, age_ns: None };

/// Reusable receive buffers for [`Socket::recv_batch`]; no allocation per call.
pub struct RecvBatch {
    bufs: Box<[[u8; MESSAGE_BYTES]]>,
    names: Box<[MaybeUninit<libc::sockaddr_storage>]>,
    controls: Box<[[u64; CONTROL_WORDS]]>,
    meta: [Meta; RECV_BATCH],
    /// Messages the last `recv_batch` filled (each one or several datagrams).
    messages: usize,
    /// The kernel's count of datagrams this socket dropped for want of buffer space, as of the
    /// last message that reported it (`SO_RXQ_OVFL`).
    kernel_drops: Option<u32>,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("messages", &self.messages)
            .field("meta", &&self.meta[..self.messages])
            .finish_non_exhaustive()
    }
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Buffers for [`RECV_BATCH`] messages of up to 64 KiB each (a GRO batch fits one).
    pub fn new() -> Self {
        Self {
            bufs: vec![[0u8; MESSAGE_BYTES]; RECV_BATCH].into_boxed_slice(),
            names: vec![MaybeUninit::zeroed(); RECV_BATCH].into_boxed_slice(),
            controls: vec![[0u64; CONTROL_WORDS]; RECV_BATCH].into_boxed_slice(),
            meta: [NO_META; RECV_BATCH],
            messages: 0,
            kernel_drops: None,
        }
    }

    /// Calls `each` with every datagram of the last [`Socket::recv_batch`] (mutable: the
    /// caller decrypts in place), in arrival order.
    pub fn datagrams(&mut self, mut each: impl FnMut(&mut [u8])) {
        self.datagrams_timed(|_, datagram| each(datagram));
    }

    /// Like [`RecvBatch::datagrams`], with each datagram's age: how many microseconds before
    /// the batch was read the kernel received it (`None` when the kernel gave no timestamp).
    /// Datagrams GRO joined into one message share their first one's stamp.
    pub fn datagrams_timed(&mut self, mut each: impl FnMut(Option<u64>, &mut [u8])) {
        for (meta, buf) in self.meta[..self.messages].iter().zip(self.bufs.iter_mut()) {
            let age_us = meta.age_ns.map(|ns| ns / 1_000);
            for datagram in buf[..meta.len].chunks_mut(meta.stride.max(1)) {
                each(age_us, datagram);
            }
        }
    }

    /// Like [`RecvBatch::datagrams`], with each datagram's source address (unspecified if the
    /// kernel gave none).
    pub fn datagrams_from(&mut self, mut each: impl FnMut(SocketAddr, &mut [u8])) {
        let unknown = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        for (meta, buf) in self.meta[..self.messages].iter().zip(self.bufs.iter_mut()) {
            for datagram in buf[..meta.len].chunks_mut(meta.stride.max(1)) {
                each(meta.addr.unwrap_or(unknown), datagram);
            }
        }
    }

    /// How many datagrams the kernel dropped on this socket because its receive buffer was full
    /// (a cumulative count, as of the latest batch that reported it; `None` before any did).
    /// UDP never pushes back: these are losses the sender sees like any other.
    pub fn kernel_drops(&self) -> Option<u32> {
        self.kernel_drops
    }

    /// Kernel messages the last [`Socket::recv_batch`] filled: fewer than its datagrams when
    /// GRO joined several into one.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Datagrams in the messages received, as [`RecvBatch::datagrams`] yields them.
    fn count(&self) -> usize {
        self.meta[..self.messages].iter().map(|m| m.len.div_ceil(m.stride.max(1))).sum()
    }
}

impl Socket {
    /// Receives what is waiting, up to [`RECV_BATCH`] messages, into `batch`; returns the number
    /// of datagrams (0 when none is waiting). Datagrams from other addresses than the peer are
    /// kept too: the protocol's authentication decides.
    ///
    /// One `recvmmsg` call; with GRO a message may hold up to 64 datagrams of one size (the
    /// last may be shorter), which [`RecvBatch::datagrams`] hands out one by one. Empty
    /// datagrams are not counted or handed out.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.messages = 0;
        for _ in 0..TRANSIENT_RETRIES {
            match recvmmsg(&self.socket, batch) {
                Ok(messages) => {
                    batch.messages = messages;
                    return Ok(batch.count());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted || is_transient(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(0)
    }
}

/// Asks the kernel to stamp every datagram `socket` receives (`SO_TIMESTAMPNS`) and to report
/// its count of datagrams dropped for a full receive buffer (`SO_RXQ_OVFL`).
pub(crate) fn enable_receive_info(socket: &impl AsRawFd) -> io::Result<()> {
    for option in [libc::SO_TIMESTAMPNS, libc::SO_RXQ_OVFL] {
        let on: libc::c_int = 1;
        // SAFETY: `on` is a live c_int and the length passed is its size; the kernel only
        // reads it.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&on as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// One `recvmmsg(MSG_DONTWAIT)` into `batch`; fills its metadata and returns the messages read.
fn recvmmsg(socket: &impl AsRawFd, batch: &mut RecvBatch) -> io::Result<usize> {
    let mut iovecs: [MaybeUninit<libc::iovec>; RECV_BATCH] = [MaybeUninit::uninit(); RECV_BATCH];
    // SAFETY: mmsghdr is plain old data (integers and pointers); all zeros is a valid value.
    #[allow(unsafe_code)]
    let mut hdrs: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..RECV_BATCH {
        let iov = iovecs[i].write(libc::iovec {
            iov_base: batch.bufs[i].as_mut_ptr().cast(),
            iov_len: MESSAGE_BYTES,
        });
        let hdr = &mut hdrs[i].msg_hdr;
        hdr.msg_name = batch.names[i].as_mut_ptr().cast();
        hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        hdr.msg_iov = iov as *mut libc::iovec;
        hdr.msg_iovlen = 1;
        hdr.msg_control = batch.controls[i].as_mut_ptr().cast();
        hdr.msg_controllen = size_of::<[u64; CONTROL_WORDS]>() as _;
    }
    // SAFETY: every header points at buffers owned by `batch` (or `iovecs`, alive until the
    // end of this function) with the sizes given, none shared between headers; the kernel
    // writes at most those sizes and the message count it returns.
    #[allow(unsafe_code)]
    let n = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            hdrs.as_mut_ptr(),
            RECV_BATCH as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let read_at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let read_at_ns = u64::try_from(read_at.as_nanos()).unwrap_or(u64::MAX);
    let n = (n as usize).min(RECV_BATCH);
    for ((hdr, meta), name) in hdrs.iter().zip(&mut batch.meta).zip(batch.names.iter()).take(n) {
        let len = (hdr.msg_len as usize).min(MESSAGE_BYTES);
        let (gro, stamp_ns, drops) = read_controls(&hdr.msg_hdr);
        batch.kernel_drops = drops.or(batch.kernel_drops);
        *meta = Meta {
            len,
            stride: gro.filter(|&s| s > 0).unwrap_or(len),
            addr: socket_addr(name, hdr.msg_hdr.msg_namelen),
            age_ns: stamp_ns.map(|s| read_at_ns.saturating_sub(s)),
        };
    }
    Ok(n)
}

/// The GRO segment size, the receive timestamp (ns since the epoch) and the socket's drop
/// count among a message's control messages.
fn read_controls(hdr: &libc::msghdr) -> (Option<usize>, Option<u64>, Option<u32>) {
    let (mut gro, mut stamp, mut drops) = (None, None, None);
    // SAFETY: `hdr` is a header the kernel just filled: its control pointer and length describe
    // our aligned control buffer, and the CMSG macros stay within `msg_controllen`.
    #[allow(unsafe_code)]
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            let c = &*cmsg;
            let data = libc::CMSG_DATA(cmsg);
            if c.cmsg_level == libc::SOL_UDP && c.cmsg_type == libc::UDP_GRO {
                let size = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                gro = usize::try_from(size).ok();
            } else if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                let ns = u64::try_from(ts.tv_sec).ok().and_then(|s| {
                    s.checked_mul(1_000_000_000)?.checked_add(u64::try_from(ts.tv_nsec).ok()?)
                });
                stamp = ns;
            } else if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SO_RXQ_OVFL {
                drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    (gro, stamp, drops)
}

/// A sockaddr the kernel wrote (`len` bytes of it) as a `SocketAddr`.
fn socket_addr(
    storage: &MaybeUninit<libc::sockaddr_storage>,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    let len = len as usize;
    let ptr = storage.as_ptr();
    // SAFETY: the family field is within the first bytes of any sockaddr the kernel wrote (and
    // the storage was zeroed at creation); each cast below is taken only when the family and
    // the written length say that struct is there.
    #[allow(unsafe_code)]
    unsafe {
        match i32::from((*ptr).ss_family) {
            libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
                let a = &*ptr.cast::<libc::sockaddr_in>();
                let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(a.sin_port))))
            }
            libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
                let a = &*ptr.cast::<libc::sockaddr_in6>();
                let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
                let port = u16::from_be(a.sin6_port);
                Some(SocketAddr::V6(SocketAddrV6::new(ip, port, a.sin6_flowinfo, a.sin6_scope_id)))
            }
            _ => None,
        }
    }
}
