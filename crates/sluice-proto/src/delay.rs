//! Forward queuing delay from one-way delay samples, measured at the receiver.
//!
//! Every data packet carries the sender's clock (`timestamp_us`). The receiver's arrival time minus
//! that stamp is the one-way delay plus an unknown, constant clock offset; its minimum over a
//! window is the propagation delay plus the same offset, so the difference is the time the packet
//! spent in queues. The offset cancels and no clock synchronisation is needed.
//!
//! Each report is the *least* queuing delay of the packets that arrived since the previous report,
//! not their mean. A bottleneck queue delays every packet that crosses it, so the least delay is
//! the queue (as it stood at the start of the interval). A host or emulator that stalls and then
//! delivers its backlog at once delays only the packets caught in the stall, the first of them
//! most and the last hardly at all. Through our emulated 1 Gbit/s, 100 ms path such stalls (10-30
//! ms, several per transfer) had the mean report a queue of 5-30 ms that never stood, and every
//! one of them cut the rate. One report may still cover only the head of a backlog (the receiver
//! reports after the first datagrams it takes): the controller treats a queue that did not stand
//! accordingly. (A minimum over two report intervals would cover that case too, but it sees a
//! growing queue 10 ms later: in simulation, a newcomer's startup overshoot then kept the queue
//! above 30 ms for half as long again.)

/// Minimum over the last `BUCKETS * BUCKET_US` of relative one-way delay, and the least queuing
/// delay since the last report.
#[derive(Debug, Clone)]
pub struct QueueDelay {
    /// Minimum relative delay per time bucket (oldest first), bounded.
    buckets: [Option<i64>; BUCKETS],
    bucket_start_us: u64,
    /// Least queuing delay of the packets since the last report (`None`: none arrived).
    current_us: Option<i64>,
    last_report_us: u32,
}

const BUCKETS: usize = 4;
const BUCKET_US: u64 = 2_500_000;

impl Default for QueueDelay {
    fn default() -> Self {
        Self { buckets: [None; BUCKETS], bucket_start_us: 0, current_us: None, last_report_us: 0 }
    }
}

impl QueueDelay {
    /// Records a data packet that arrived at `now_us` carrying the sender's `timestamp_us`.
    pub fn on_packet(&mut self, now_us: u64, timestamp_us: u32) {
        // Both clocks wrap at 2^32 us (71 minutes); a relative delay is meaningful within +-35.
        let rel = i64::from((now_us as u32).wrapping_sub(timestamp_us) as i32);
        while now_us >= self.bucket_start_us + BUCKET_US {
            self.buckets.rotate_left(1);
            self.buckets[BUCKETS - 1] = None;
            self.bucket_start_us += BUCKET_US;
            if now_us >= self.bucket_start_us + BUCKET_US * BUCKETS as u64 {
                self.bucket_start_us = now_us - now_us % BUCKET_US;
                self.buckets = [None; BUCKETS];
            }
        }
        let cur = &mut self.buckets[BUCKETS - 1];
        *cur = Some(cur.map_or(rel, |m| m.min(rel)));
        let min = self.buckets.iter().flatten().copied().min().unwrap_or(rel);
        let queued = rel - min;
        self.current_us = Some(self.current_us.map_or(queued, |q| q.min(queued)));
    }

    /// The least queuing delay of the packets since the previous call, in microseconds (the
    /// previous value again if no packet arrived since).
    pub fn take_us(&mut self) -> u32 {
        if let Some(least) = self.current_us.take() {
            self.last_report_us = u32::try_from(least).unwrap_or(0);
        }
        self.last_report_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` packets sent 1 ms apart from `from_ms`, each delayed by `delay_us(i)` on top of 50 ms.
    fn arrive(
        q: &mut QueueDelay,
        offset: u32,
        from_ms: u64,
        n: u64,
        delay_us: impl Fn(u64) -> u64,
    ) {
        for i in 0..n {
            let sent = (from_ms + i) * 1_000;
            q.on_packet(sent + 50_000 + delay_us(i), (sent as u32).wrapping_add(offset));
        }
    }

    #[test]
    fn a_queue_that_stands_is_reported_and_the_offset_cancels() {
        let mut q = QueueDelay::default();
        let offset = 3_000_000_000u32; // the sender's clock is far from ours, and wraps
        arrive(&mut q, offset, 0, 10, |_| 0);
        assert_eq!(q.take_us(), 0);
        arrive(&mut q, offset, 10, 10, |_| 8_000);
        assert_eq!(q.take_us(), 8_000, "every packet waited 8 ms");
        assert_eq!(q.take_us(), 8_000, "no new packets: last value");
    }

    #[test]
    fn the_least_delay_is_reported_not_the_mean() {
        let mut q = QueueDelay::default();
        arrive(&mut q, 0, 0, 10, |_| 0);
        q.take_us();
        arrive(&mut q, 0, 10, 10, |i| 2_000 + i * 1_000);
        assert_eq!(q.take_us(), 2_000, "the mean would be 6.5 ms");
    }

    #[test]
    fn a_stalled_delivery_is_not_a_queue() {
        // Packets flow with no queue, then delivery stalls for 20 ms and the backlog arrives at
        // once: the first of it 20 ms late, the last 1 ms.
        let mut q = QueueDelay::default();
        arrive(&mut q, 0, 0, 10, |_| 0);
        q.take_us();
        let late = |i: u64| 20_000 - i * 1_000;
        arrive(&mut q, 0, 10, 20, late);
        assert_eq!(q.take_us(), 1_000, "the mean would be 10.5 ms");
    }

    #[test]
    fn the_minimum_expires_after_the_window() {
        let mut q = QueueDelay::default();
        q.on_packet(1_000, 0); // relative delay 1000
        for i in 0..40u64 {
            let now = 1_000_000 + i * 500_000; // 20 s later, delay 5000 throughout
            q.on_packet(now, (now - 5_000) as u32);
        }
        q.take_us();
        q.on_packet(21_000_000, 21_000_000 - 5_000);
        assert_eq!(q.take_us(), 0, "the old 1 ms minimum has expired");
    }
}
