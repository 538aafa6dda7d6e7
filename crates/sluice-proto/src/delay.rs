//! Forward queuing delay from one-way delay samples, measured at the receiver.
//!
//! Every data packet carries the sender's clock (`timestamp_us`). The receiver's arrival time minus
//! that stamp is the one-way delay plus an unknown, constant clock offset; its minimum over a
//! window is the propagation delay plus the same offset, so the difference is the time the packet
//! spent in queues. The offset cancels and no clock synchronisation is needed.

/// Minimum over the last `BUCKETS * BUCKET_US` of relative one-way delay, plus the mean queuing
/// delay since the last report.
#[derive(Debug, Clone)]
pub struct QueueDelay {
    /// Minimum relative delay per time bucket (oldest first), bounded.
    buckets: [Option<i64>; BUCKETS],
    bucket_start_us: u64,
    sum_us: i64,
    count: u32,
    last_mean_us: u32,
}

const BUCKETS: usize = 4;
const BUCKET_US: u64 = 2_500_000;

impl Default for QueueDelay {
    fn default() -> Self {
        Self { buckets: [None; BUCKETS], bucket_start_us: 0, sum_us: 0, count: 0, last_mean_us: 0 }
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
        self.sum_us += rel - min;
        self.count += 1;
    }

    /// Mean queuing delay of the packets since the previous call (the previous value again if no
    /// packet arrived), in microseconds.
    pub fn take_mean_us(&mut self) -> u32 {
        if self.count > 0 {
            self.last_mean_us = u32::try_from(self.sum_us / i64::from(self.count)).unwrap_or(0);
            self.sum_us = 0;
            self.count = 0;
        }
        self.last_mean_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queueing_delay_is_delay_above_the_minimum_and_offset_cancels() {
        let mut q = QueueDelay::default();
        let offset = 3_000_000_000u32; // the sender's clock is far from ours, and wraps
        for i in 0..100u64 {
            let sent = 1_000 * i;
            q.on_packet(sent + 50_000, (sent as u32).wrapping_add(offset));
        }
        assert_eq!(q.take_mean_us(), 0);
        for i in 100..200u64 {
            let sent = 1_000 * i;
            q.on_packet(sent + 50_000 + 8_000, (sent as u32).wrapping_add(offset));
        }
        assert_eq!(q.take_mean_us(), 8_000);
        assert_eq!(q.take_mean_us(), 8_000, "no new packets: last value");
    }

    #[test]
    fn the_minimum_expires_after_the_window() {
        let mut q = QueueDelay::default();
        q.on_packet(1_000, 0); // relative delay 1000
        for i in 0..40u64 {
            let now = 1_000_000 + i * 500_000; // 20 s later, delay 5000 throughout
            q.on_packet(now, (now - 5_000) as u32);
        }
        q.take_mean_us();
        q.on_packet(21_000_000, 21_000_000 - 5_000);
        assert_eq!(q.take_mean_us(), 0, "the old 1 ms minimum has expired");
    }
}
