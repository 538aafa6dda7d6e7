//! The running emulator: one TUN device per namespace and one forwarding thread per direction.
//!
//! Each forwarding thread reads packets from its input TUN (non-blocking, in batches), asks the
//! [`Shaper`] what to do with each, keeps delivered packets in a buffer pool ordered by release
//! time (a FIFO deque for in-order packets, whose release times never decrease, plus a small
//! heap for packets allowed out of order), and writes each to the output TUN when its release
//! time comes. It waits for the next release with `ppoll` on the input (timer slack 1 ns) until
//! `spin` before the release, then spins. A thread that was descheduled releases everything
//! that became due at once, in order, and counts how late it was.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::time::TimeSpec;
use serde::Serialize;
use tun_rs::{DeviceBuilder, GROTable, IDEAL_BATCH_SIZE, SyncDevice, VIRTIO_NET_HDR_LEN};

use crate::delays::QueueDelays;
use crate::model::{
    Direction, DirectionConfig, DropReason, GroBatch, QueueLimit, Shaper, Verdict,
    default_queue_limit,
};
use crate::netns::{self, A_ADDR, B_ADDR, NetnsError, PREFIX_LEN, TUN_NAME};

/// MTU of both TUN devices.
pub const MTU: u16 = 1500;
/// Size of one pool buffer: larger than the MTU, so a truncated read shows as oversize.
const SLOT_BYTES: usize = 2048;
/// Pool buffers are allocated in chunks of this many, when the pool grows.
const SLOTS_PER_CHUNK: usize = 1024;
/// Most packets read in one go before releases are looked at again.
const READ_BATCH: usize = 64;
/// Longest sleep when nothing is queued, so a stop request is seen quickly.
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// Longest single spin before the input is polled again.
const SPIN_SLICE_NS: u64 = 5_000;

/// Configuration of the whole link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Impairments from a to b.
    pub a2b: DirectionConfig,
    /// Impairments from b to a.
    pub b2a: DirectionConfig,
    /// Seed of every random decision.
    pub seed: u64,
    /// How long before a release the thread stops sleeping and spins, in nanoseconds.
    pub spin_ns: u64,
    /// Transmit queue length of the TUN devices (packets the kernel holds for the emulator to
    /// read; the kernel drops beyond it, outside the emulator's counters).
    pub tx_queue_len: u32,
    /// Most packets held at once per direction (queued plus in flight); beyond, packets are
    /// dropped and counted as `dropped_pool`.
    pub max_packets: u32,
    /// Nice value of the forwarding threads (negative: they win the CPU over the endpoints and
    /// are not preempted by the processes their writes wake). Applied where permitted.
    pub nice: i32,
    /// Use virtio-net headers on the TUN devices: the kernel hands over TCP/UDP segmentation
    /// offload (GSO) super-packets, which linkem splits into MTU-size packets *before* the link
    /// model (so the emulated link still only carries packets of at most 1500 bytes), and
    /// packets released together are coalesced again (GRO) when written to the receiving
    /// namespace, as a real NIC would. Saves most of the per-packet system call and stack cost.
    pub offload: bool,
    /// Real-time (SCHED_FIFO) priority of the forwarding threads, 1-99, set with `chrt`; `None`
    /// keeps the normal scheduler. A real-time thread is woken promptly when its next release
    /// is due even when every core is busy; the kernel's real-time throttling (95 % by default)
    /// keeps it from starving the rest.
    pub rt_priority: Option<u8>,
    /// Coalescing interval, in nanoseconds, while packets keep arriving: after a read that
    /// found packets, the thread sleeps this long (without waking for each new packet) before
    /// it looks again, like NAPI or interrupt coalescing on a NIC. Releases and arrival stamps
    /// are then up to this late; it saves a wake-up per packet. 0 wakes for every packet.
    pub coalesce_ns: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            a2b: DirectionConfig::default(),
            b2a: DirectionConfig::default(),
            seed: 1,
            spin_ns: 20_000,
            tx_queue_len: 10_000,
            max_packets: 262_144,
            nice: -10,
            offload: false,
            rt_priority: Some(10),
            coalesce_ns: 50_000,
        }
    }
}

impl LinkConfig {
    /// The same impairments both ways.
    pub fn symmetric(dir: DirectionConfig) -> Self {
        LinkConfig { a2b: dir.clone(), b2a: dir, ..Default::default() }
    }

    /// The queue limits in force: `(a2b, b2a)`.
    pub fn queue_limits(&self) -> (QueueLimit, QueueLimit) {
        let a = self.a2b.queue.unwrap_or_else(|| {
            default_queue_limit(self.a2b.rate_bps, self.a2b.delay_ns, self.b2a.delay_ns)
        });
        let b = self.b2a.queue.unwrap_or_else(|| {
            default_queue_limit(self.b2a.rate_bps, self.b2a.delay_ns, self.a2b.delay_ns)
        });
        (a, b)
    }
}

/// Errors of the emulator.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// A bad configuration value.
    #[error("bad configuration: {0}")]
    Config(String),
    /// A namespace problem.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// A device or thread could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EmulatorError {
    let what = what.into();
    move |source| EmulatorError::Io { what, source }
}

/// Live counters of one direction, written by its forwarding thread only.
#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    received_bytes: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_queue: AtomicU64,
    dropped_too_big: AtomicU64,
    dropped_pool: AtomicU64,
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    late_over_100us: AtomicU64,
    late_over_1ms: AtomicU64,
    max_late_ns: AtomicU64,
    held: AtomicU64,
    pool_slots: AtomicU64,
    rt_failed: AtomicU64,
    spin_ns: AtomicU64,
    sleep_ns: AtomicU64,
    max_packet_bytes: AtomicU64,
    queue_delays: QueueDelays,
}

/// Adds to a counter that only one thread writes (no atomic read-modify-write needed).
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// A snapshot of one direction's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DirectionReport {
    /// Packets read from the input TUN.
    pub received: u64,
    /// Bytes read from the input TUN.
    pub received_bytes: u64,
    /// Packets dropped by the random loss model.
    pub dropped_loss: u64,
    /// Packets dropped because the bottleneck queue was full.
    pub dropped_queue: u64,
    /// Packets dropped by the black hole (longer than `--black-hole-above`).
    pub dropped_too_big: u64,
    /// Packets dropped because the buffer pool was exhausted (`max_packets`).
    pub dropped_pool: u64,
    /// Packets written to the output TUN (duplicates included).
    pub delivered: u64,
    /// Bytes written to the output TUN.
    pub delivered_bytes: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Packets held back to be reordered.
    pub reordered: u64,
    /// Failed reads.
    pub read_errors: u64,
    /// Failed writes.
    pub write_errors: u64,
    /// Releases more than 100 µs after their release time.
    pub late_over_100us: u64,
    /// Releases more than 1 ms after their release time.
    pub late_over_1ms: u64,
    /// Latest release after its release time, in microseconds.
    pub max_late_us: u64,
    /// Packets held right now (queued or in flight).
    pub held: u64,
    /// Buffers in the pool.
    pub pool_slots: u64,
    /// 1 if a real-time priority was asked for but could not be set.
    pub rt_failed: u64,
    /// Milliseconds spent spinning before releases.
    pub spin_ms: u64,
    /// Milliseconds spent waiting in `ppoll` (asleep, or woken late for want of a CPU).
    pub sleep_ms: u64,
    /// Largest packet read, in bytes (at most the MTU: no GSO super-packet crosses the link).
    pub max_packet_bytes: u64,
    /// The median time delivered packets waited in the bottleneck's queue, in microseconds, to
    /// within 100 (the upper edge of its bucket: 100 through an idle link); `None` before any.
    pub queue_p50_us: Option<u64>,
    /// The same, 99th percentile.
    pub queue_p99_us: Option<u64>,
}

impl Counters {
    fn snapshot(&self) -> DirectionReport {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DirectionReport {
            received: g(&self.received),
            received_bytes: g(&self.received_bytes),
            dropped_loss: g(&self.dropped_loss),
            dropped_queue: g(&self.dropped_queue),
            dropped_too_big: g(&self.dropped_too_big),
            dropped_pool: g(&self.dropped_pool),
            delivered: g(&self.delivered),
            delivered_bytes: g(&self.delivered_bytes),
            duplicated: g(&self.duplicated),
            reordered: g(&self.reordered),
            read_errors: g(&self.read_errors),
            write_errors: g(&self.write_errors),
            late_over_100us: g(&self.late_over_100us),
            late_over_1ms: g(&self.late_over_1ms),
            max_late_us: g(&self.max_late_ns) / 1000,
            held: g(&self.held),
            pool_slots: g(&self.pool_slots),
            rt_failed: g(&self.rt_failed),
            spin_ms: g(&self.spin_ns) / 1_000_000,
            sleep_ms: g(&self.sleep_ns) / 1_000_000,
            max_packet_bytes: g(&self.max_packet_bytes),
            queue_p50_us: self.queue_delays.quantile_us(0.5),
            queue_p99_us: self.queue_delays.quantile_us(0.99),
        }
    }
}

/// Counters of both directions.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// Seconds since the emulator started.
    pub elapsed_s: f64,
    /// From a to b.
    pub a2b: DirectionReport,
    /// From b to a.
    pub b2a: DirectionReport,
}

impl Report {
    /// The report as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Packet buffers, allocated in chunks as needed up to a limit and reused: no allocation per
/// packet once the pool has grown to the working set.
struct Pool {
    chunks: Vec<Box<[u8]>>,
    free: Vec<u32>,
    max_slots: usize,
}

impl Pool {
    fn new(max_slots: usize) -> Self {
        Pool { chunks: Vec::new(), free: Vec::new(), max_slots }
    }

    fn slots(&self) -> usize {
        self.chunks.len() * SLOTS_PER_CHUNK
    }

    fn take(&mut self) -> Option<u32> {
        if self.free.is_empty() && self.slots() < self.max_slots {
            let base = self.slots() as u32;
            self.chunks.push(vec![0u8; SLOT_BYTES * SLOTS_PER_CHUNK].into_boxed_slice());
            self.free.extend((base..base + SLOTS_PER_CHUNK as u32).rev());
        }
        self.free.pop()
    }

    fn put(&mut self, slot: u32) {
        self.free.push(slot);
    }

    fn buf(&self, slot: u32) -> &[u8] {
        let (c, o) = (slot as usize / SLOTS_PER_CHUNK, slot as usize % SLOTS_PER_CHUNK);
        &self.chunks[c][o * SLOT_BYTES..(o + 1) * SLOT_BYTES]
    }

    fn buf_mut(&mut self, slot: u32) -> &mut [u8] {
        let (c, o) = (slot as usize / SLOTS_PER_CHUNK, slot as usize % SLOTS_PER_CHUNK);
        &mut self.chunks[c][o * SLOT_BYTES..(o + 1) * SLOT_BYTES]
    }
}

/// A packet waiting for its release time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    release_ns: u64,
    /// Tie-breaker in the heap: arrival order.
    seq: u64,
    slot: u32,
    len: u16,
}

struct Forwarder {
    input: Arc<SyncDevice>,
    output: Arc<SyncDevice>,
    shaper: Shaper,
    pool: Pool,
    fifo: VecDeque<Held>,
    heap: BinaryHeap<Reverse<Held>>,
    seq: u64,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    epoch: Instant,
    spin_ns: u64,
    nice: i32,
    rt_priority: Option<u8>,
    coalesce_ns: u64,
    scratch: Vec<u8>,
    /// Packets due for release, written as one batch.
    due: Vec<Held>,
    /// The GRO-like batch of the receive side (see [`DirectionConfig::gro_batch`]), if on, and
    /// the packets it holds.
    gro: Option<GroBatch>,
    gro_held: Vec<Held>,
    offload: Option<Box<OffloadIo>>,
}

/// Buffers for the virtio-net header mode (see [`LinkConfig::offload`]), all reused.
struct OffloadIo {
    /// One raw read: header plus up to 64 KiB of GSO packet.
    raw: Vec<u8>,
    /// The MTU-size segments of one read.
    segments: Vec<Vec<u8>>,
    sizes: Vec<usize>,
    /// One write batch, each packet after `VIRTIO_NET_HDR_LEN` bytes of headroom.
    out: Vec<Vec<u8>>,
    gro: GROTable,
}

impl OffloadIo {
    fn new() -> Self {
        OffloadIo {
            raw: vec![0u8; VIRTIO_NET_HDR_LEN + 65535],
            segments: vec![vec![0u8; SLOT_BYTES]; IDEAL_BATCH_SIZE],
            sizes: vec![0; IDEAL_BATCH_SIZE],
            out: (0..IDEAL_BATCH_SIZE).map(|_| Vec::with_capacity(SLOT_BYTES)).collect(),
            gro: GROTable::default(),
        }
    }
}

impl Forwarder {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn run(mut self, ready: std::sync::mpsc::Sender<()>) {
        // Sleep precisely: the default timer slack of 50 µs would blur release times.
        let _ = nix::sys::prctl::set_timerslack(1);
        if let Some(prio) = self.rt_priority {
            let tid = rustix::thread::gettid().as_raw_nonzero().to_string();
            let ok = std::process::Command::new("chrt")
                .args(["-f", "-p", &prio.to_string(), &tid])
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                self.counters.rt_failed.store(1, Ordering::Relaxed);
            }
        }
        if self.nice != 0 {
            // On Linux this sets the priority of the calling thread only.
            let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), self.nice);
        }
        let _ = ready.send(());
        while !self.stop.load(Ordering::Relaxed) {
            let now = self.now_ns();
            let released = self.release_due(now);
            let read = self.read_batch();
            if read >= READ_BATCH {
                // A backlog: keep reading.
            } else if read > 0 && self.coalesce_ns > 0 {
                // Packets are flowing: let a few accumulate instead of waking for each.
                let t0 = self.now_ns();
                std::thread::sleep(Duration::from_nanos(self.coalesce_ns));
                bump(&self.counters.sleep_ns, self.now_ns().saturating_sub(t0));
            } else if released == 0 && read == 0 {
                self.wait();
            }
        }
    }

    fn next_release(&self) -> Option<u64> {
        let f = self.fifo.front().map(|h| h.release_ns);
        let h = self.heap.peek().map(|Reverse(h)| h.release_ns);
        let g = self.gro.as_ref().and_then(GroBatch::deadline_ns);
        [f, h, g].into_iter().flatten().min()
    }

    fn held_count(&self) -> u64 {
        (self.fifo.len() + self.heap.len() + self.gro_held.len()) as u64
    }

    /// Releases every packet whose time has come, in release order, in batches (through the
    /// GRO-like batch, if on).
    fn release_due(&mut self, now: u64) -> usize {
        let mut n = 0;
        loop {
            self.collect_due(now);
            if self.due.is_empty() {
                break;
            }
            n += self.due.len();
            if self.gro.is_some() {
                self.batch_due(now);
            } else {
                self.write_due(now, 0);
            }
        }
        if let Some(deadline) = self.gro.as_ref().and_then(GroBatch::deadline_ns)
            && deadline <= now
        {
            self.write_gro_batch(now, deadline);
            n += 1;
        }
        if n > 0 {
            self.counters.held.store(self.held_count(), Ordering::Relaxed);
        }
        n
    }

    /// Moves the due packets into the GRO-like batch, writing the batch whenever it fills or its
    /// window ended before the next packet came due.
    fn batch_due(&mut self, now: u64) {
        let due = std::mem::take(&mut self.due);
        for h in &due {
            let Some(gro) = self.gro.as_mut() else { break };
            if let Some(deadline) = gro.deadline_ns().filter(|_| gro.expired_by(h.release_ns)) {
                self.write_gro_batch(now, deadline);
            }
            self.gro_held.push(*h);
            if self.gro.as_mut().is_some_and(|gro| gro.add(h.release_ns)) {
                self.write_gro_batch(now, h.release_ns);
            }
        }
        self.due = due;
        self.due.clear();
    }

    /// Writes the packets the GRO-like batch holds, whose release time is `release_ns`.
    fn write_gro_batch(&mut self, now: u64, release_ns: u64) {
        std::mem::swap(&mut self.due, &mut self.gro_held);
        self.write_due(now, release_ns);
        std::mem::swap(&mut self.due, &mut self.gro_held);
        self.gro_held.clear();
        if let Some(gro) = self.gro.as_mut() {
            gro.clear();
        }
    }

    /// Moves up to one batch of due packets, earliest first, into `self.due`.
    fn collect_due(&mut self, now: u64) {
        self.due.clear();
        while self.due.len() < IDEAL_BATCH_SIZE {
            let from_fifo = match (self.fifo.front(), self.heap.peek()) {
                (Some(f), Some(Reverse(h))) => (f.release_ns, f.seq) <= (h.release_ns, h.seq),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if from_fifo {
                self.fifo.front().copied()
            } else {
                self.heap.peek().map(|Reverse(h)| *h)
            };
            let Some(h) = next else { break };
            if h.release_ns > now {
                break;
            }
            if from_fifo {
                self.fifo.pop_front();
            } else {
                self.heap.pop();
            }
            self.due.push(h);
        }
    }

    /// Writes the packets in `self.due` to the output and frees their buffers. Each was due at
    /// the later of its own release time and `release_ns` (the time of its GRO-like batch);
    /// lateness after that is counted.
    fn write_due(&mut self, now: u64, release_ns: u64) {
        let c = &self.counters;
        let bytes: u64 = self.due.iter().map(|h| u64::from(h.len)).sum();
        if let Some(off) = self.offload.as_mut() {
            for (out, h) in off.out.iter_mut().zip(&self.due) {
                out.clear();
                out.resize(VIRTIO_NET_HDR_LEN, 0);
                out.extend_from_slice(&self.pool.buf(h.slot)[..usize::from(h.len)]);
            }
            let k = self.due.len();
            match self.output.send_multiple(&mut off.gro, &mut off.out[..k], VIRTIO_NET_HDR_LEN) {
                Ok(_) => {
                    bump(&c.delivered, k as u64);
                    bump(&c.delivered_bytes, bytes);
                }
                Err(_) => bump(&c.write_errors, k as u64),
            }
        } else {
            for h in &self.due {
                match self.output.send(&self.pool.buf(h.slot)[..usize::from(h.len)]) {
                    Ok(_) => {
                        bump(&c.delivered, 1);
                        bump(&c.delivered_bytes, u64::from(h.len));
                    }
                    Err(_) => bump(&c.write_errors, 1),
                }
            }
        }
        for h in &self.due {
            let late = now.saturating_sub(h.release_ns.max(release_ns));
            if late > 100_000 {
                bump(&c.late_over_100us, 1);
                if late > 1_000_000 {
                    bump(&c.late_over_1ms, 1);
                }
                if late > c.max_late_ns.load(Ordering::Relaxed) {
                    c.max_late_ns.store(late, Ordering::Relaxed);
                }
            }
            self.pool.put(h.slot);
        }
    }

    fn read_batch(&mut self) -> usize {
        if self.offload.is_some() {
            return self.read_batch_offload();
        }
        let mut n = 0;
        while n < READ_BATCH {
            let Some(slot) = self.pool.take() else {
                // Pool exhausted: read the packet to drop it.
                match self.input.recv(&mut self.scratch) {
                    Ok(_) => {
                        bump(&self.counters.received, 1);
                        bump(&self.counters.dropped_pool, 1);
                        n += 1;
                        continue;
                    }
                    Err(_) => break,
                }
            };
            let len = match self.input.recv(self.pool.buf_mut(slot)) {
                Ok(len) => len,
                Err(e) => {
                    self.pool.put(slot);
                    if e.kind() != std::io::ErrorKind::WouldBlock
                        && e.kind() != std::io::ErrorKind::Interrupted
                    {
                        bump(&self.counters.read_errors, 1);
                    }
                    break;
                }
            };
            n += 1;
            let now = self.now_ns();
            self.on_packet(now, slot, len);
        }
        if n > 0 {
            self.counters.pool_slots.store(self.pool.slots() as u64, Ordering::Relaxed);
            self.counters.held.store(self.held_count(), Ordering::Relaxed);
        }
        n
    }

    /// Reads GSO packets, splits them into MTU-size segments and handles each.
    fn read_batch_offload(&mut self) -> usize {
        let Some(mut off) = self.offload.take() else { return 0 };
        let mut n = 0;
        // A read can return up to 64 KiB of segments: count packets, not reads.
        while n < READ_BATCH {
            let OffloadIo { raw, segments, sizes, .. } = &mut *off;
            let k = match self.input.recv_multiple(raw, segments, sizes, 0) {
                Ok(k) => k,
                Err(e) => {
                    if e.kind() != std::io::ErrorKind::WouldBlock
                        && e.kind() != std::io::ErrorKind::Interrupted
                    {
                        bump(&self.counters.read_errors, 1);
                    }
                    break;
                }
            };
            let now = self.now_ns();
            for i in 0..k {
                let len = off.sizes[i].min(SLOT_BYTES);
                let Some(slot) = self.pool.take() else {
                    bump(&self.counters.received, 1);
                    bump(&self.counters.dropped_pool, 1);
                    continue;
                };
                self.pool.buf_mut(slot)[..len].copy_from_slice(&off.segments[i][..len]);
                self.on_packet(now, slot, off.sizes[i]);
            }
            n += k;
        }
        self.offload = Some(off);
        if n > 0 {
            self.counters.pool_slots.store(self.pool.slots() as u64, Ordering::Relaxed);
            self.counters.held.store(self.held_count(), Ordering::Relaxed);
        }
        n
    }

    fn on_packet(&mut self, now: u64, slot: u32, len: usize) {
        let c = &self.counters;
        bump(&c.received, 1);
        bump(&c.received_bytes, len as u64);
        if len as u64 > c.max_packet_bytes.load(Ordering::Relaxed) {
            c.max_packet_bytes.store(len as u64, Ordering::Relaxed);
        }
        if len == 0 || len > usize::from(MTU) {
            // Cannot happen on a plain TUN with MTU 1500; never forward a truncated packet.
            bump(&c.read_errors, 1);
            self.pool.put(slot);
            return;
        }
        match self.shaper.on_packet(now, len as u32) {
            Verdict::Drop(reason) => {
                let counter = match reason {
                    DropReason::Loss => &c.dropped_loss,
                    DropReason::Queue => &c.dropped_queue,
                    DropReason::TooBig => &c.dropped_too_big,
                };
                bump(counter, 1);
                self.pool.put(slot);
            }
            Verdict::Deliver { release_ns, out_of_order, reordered, duplicate, queued_ns } => {
                c.queue_delays.record(queued_ns);
                if reordered {
                    bump(&c.reordered, 1);
                }
                self.hold(release_ns, slot, len as u16, out_of_order);
                if duplicate {
                    if let Some(copy) = self.pool.take() {
                        let (dst, src) = (copy as usize, slot as usize);
                        // Copy through the scratch buffer: both slots live in the same pool.
                        self.scratch[..len].copy_from_slice(&self.pool.buf(src as u32)[..len]);
                        self.pool.buf_mut(dst as u32)[..len].copy_from_slice(&self.scratch[..len]);
                        bump(&self.counters.duplicated, 1);
                        self.hold(release_ns, copy, len as u16, out_of_order);
                    } else {
                        bump(&self.counters.dropped_pool, 1);
                    }
                }
            }
        }
    }

    fn hold(&mut self, release_ns: u64, slot: u32, len: u16, out_of_order: bool) {
        let h = Held { release_ns, seq: self.seq, slot, len };
        self.seq += 1;
        if out_of_order {
            self.heap.push(Reverse(h));
        } else {
            debug_assert!(self.fifo.back().is_none_or(|b| b.release_ns <= release_ns));
            self.fifo.push_back(h);
        }
    }

    fn wait(&mut self) {
        let now = self.now_ns();
        let timeout = match self.next_release() {
            None => IDLE_WAIT,
            Some(t) if t <= now => return,
            Some(t) if t - now <= self.spin_ns => {
                // Spin a short slice, then look at the input again.
                let until = t.min(now + SPIN_SLICE_NS);
                let mut t1 = now;
                while t1 < until {
                    std::hint::spin_loop();
                    t1 = self.now_ns();
                }
                bump(&self.counters.spin_ns, t1 - now);
                return;
            }
            Some(t) => Duration::from_nanos(t - now - self.spin_ns).min(IDLE_WAIT),
        };
        let mut fds = [PollFd::new(self.input.as_fd(), PollFlags::POLLIN)];
        let _ = ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None);
        bump(&self.counters.sleep_ns, self.now_ns().saturating_sub(now));
    }
}

/// A running emulator between two namespaces. Stops (and removes its TUN devices) on drop.
pub struct Emulator {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    counters: [Arc<Counters>; 2],
    epoch: Instant,
    devices: Vec<Arc<SyncDevice>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").field("report", &self.report()).finish()
    }
}

/// One end of a link: the TUN device the emulator makes in a namespace.
#[derive(Debug, Clone, Copy)]
pub struct End<'a> {
    /// The namespace.
    pub ns: &'a str,
    /// The device's name (unique in its namespace).
    pub device: &'a str,
    /// Its address.
    pub addr: std::net::Ipv4Addr,
    /// The prefix length of its network: every address in it is reached through this link.
    pub prefix_len: u8,
}

fn make_tun(end: End<'_>, tx_queue_len: u32, offload: bool) -> Result<SyncDevice, EmulatorError> {
    let End { ns, device, addr, prefix_len } = end;
    let name = device.to_owned();
    let dev = netns::in_netns(ns, move || {
        DeviceBuilder::new()
            .name(&name)
            .ipv4(addr, prefix_len, None)
            .mtu(MTU)
            .tx_queue_len(tx_queue_len)
            .offload(offload)
            .multi_queue(false)
            .packet_information(false)
            .build_sync()
    })?
    .map_err(io_err(format!("creating TUN {device} in namespace {ns}")))?;
    dev.set_nonblocking(true).map_err(io_err("setting the TUN non-blocking"))?;
    Ok(dev)
}

impl Emulator {
    /// Creates a TUN device `linkem0` in each namespace (a: 198.18.0.1/15, b: 198.18.1.1/15),
    /// and starts forwarding between them with the given impairments.
    pub fn start(a_ns: &str, b_ns: &str, config: &LinkConfig) -> Result<Self, EmulatorError> {
        let end = |ns, addr| End { ns, device: TUN_NAME, addr, prefix_len: PREFIX_LEN };
        Self::start_between(end(a_ns, A_ADDR), end(b_ns, B_ADDR), config)
    }

    /// Creates the TUN device of each end and starts forwarding between them: for topologies
    /// of more than two namespaces, where each link has devices and a network of its own
    /// (e.g. `198.18.2.1/30` and `198.18.2.2/30`). `a2b` is the direction from `a` to `b`.
    pub fn start_between(
        a: End<'_>,
        b: End<'_>,
        config: &LinkConfig,
    ) -> Result<Self, EmulatorError> {
        config.a2b.validate().map_err(|e| EmulatorError::Config(format!("a2b: {e}")))?;
        config.b2a.validate().map_err(|e| EmulatorError::Config(format!("b2a: {e}")))?;
        let tun_a = Arc::new(make_tun(a, config.tx_queue_len, config.offload)?);
        let tun_b = Arc::new(make_tun(b, config.tx_queue_len, config.offload)?);
        let (qa, qb) = config.queue_limits();
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let counters = [Arc::new(Counters::default()), Arc::new(Counters::default())];
        let mut threads = Vec::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let dirs = [
            (Direction::AToB, &tun_a, &tun_b, &config.a2b, qa, &counters[0]),
            (Direction::BToA, &tun_b, &tun_a, &config.b2a, qb, &counters[1]),
        ];
        for (dir, input, output, dcfg, queue, ctr) in dirs {
            let fwd = Forwarder {
                input: Arc::clone(input),
                output: Arc::clone(output),
                shaper: Shaper::new(dcfg.clone(), queue, config.seed, dir),
                pool: Pool::new(config.max_packets.max(1) as usize),
                fifo: VecDeque::with_capacity(4096),
                heap: BinaryHeap::new(),
                seq: 0,
                counters: Arc::clone(ctr),
                stop: Arc::clone(&stop),
                epoch,
                spin_ns: config.spin_ns,
                nice: config.nice,
                rt_priority: config.rt_priority,
                coalesce_ns: config.coalesce_ns,
                scratch: vec![0u8; SLOT_BYTES],
                due: Vec::with_capacity(IDEAL_BATCH_SIZE),
                gro: dcfg.gro(),
                gro_held: Vec::with_capacity(IDEAL_BATCH_SIZE),
                offload: config.offload.then(|| Box::new(OffloadIo::new())),
            };
            let handle =
                std::thread::Builder::new().name(format!("linkem-{}", dir.name())).spawn({
                    let ready = ready_tx.clone();
                    move || fwd.run(ready)
                });
            match handle {
                Ok(h) => threads.push(h),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(io_err("spawning a forwarding thread")(e));
                }
            }
        }
        // Wait until both threads have set their priorities and are forwarding.
        drop(ready_tx);
        for _ in 0..threads.len() {
            let _ = ready_rx.recv_timeout(Duration::from_secs(5));
        }
        Ok(Emulator { stop, threads, counters, epoch, devices: vec![tun_a, tun_b] })
    }

    /// Counters of both directions now.
    pub fn report(&self) -> Report {
        Report {
            elapsed_s: self.epoch.elapsed().as_secs_f64(),
            a2b: self.counters[0].snapshot(),
            b2a: self.counters[1].snapshot(),
        }
    }

    /// Stops forwarding, removes the TUN devices and returns the final counters. Packets still
    /// held are discarded.
    pub fn stop(mut self) -> Report {
        self.shutdown();
        self.report()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.devices.clear();
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.shutdown();
    }
}
