//! What the data-path tests share (UDP channels and TCP streams alike): one test at a time,
//! seeds, keys, contents and files.

#![allow(dead_code, unreachable_pub)]

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice::datapath::{ChannelKeys, Progress};
use sluice_proto::crypto::{Algorithm, PacketKey};
use sluice_proto::rng::Rng;

/// Tests of one file run one at a time ([`serial`]): their timing assertions need the cores.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn seed(test: &str, default: u64) -> u64 {
    let seed =
        std::env::var("SLUICE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    println!("{test}: seed={seed}");
    seed
}

/// (sender's keys, receiver's keys), distinct per seed.
pub fn keys(seed: u64) -> (ChannelKeys, ChannelKeys) {
    let key = |dir: u64| {
        let mut rng = Rng::new(seed ^ (dir << 60));
        let mut k = [0u8; 32];
        k.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        let mut iv = [0u8; 12];
        iv.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        PacketKey::new(Algorithm::Aes256Gcm, &k, iv)
    };
    (ChannelKeys { seal: key(1), open: key(2) }, ChannelKeys { seal: key(2), open: key(1) })
}

/// Seeded file contents.
pub fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut data = vec![0u8; len];
    for chunk in data.chunks_mut(8) {
        let word = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    data
}

/// Seeded contents that partly compress: log-like text, then a quarter of random bytes, then
/// text again, so compressed frames and raw pieces alternate.
pub fn mixed_content(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut data = Vec::with_capacity(len + 100);
    let mut line = 0u64;
    while data.len() < len {
        let at = data.len();
        if at >= len / 2 && at < len * 3 / 4 {
            data.extend_from_slice(&rng.next_u64().to_le_bytes());
        } else {
            line += 1;
            let value = rng.next_u64() % 1000;
            data.extend_from_slice(format!("{line} transfer value {value} status ok\n").as_bytes());
        }
    }
    data.truncate(len);
    data
}

pub fn file_with(dir: &tempfile::TempDir, name: &str, data: &[u8]) -> File {
    let path = dir.path().join(name);
    std::fs::write(&path, data).unwrap();
    File::options().read(true).write(true).open(path).unwrap()
}

/// Sets `cancel` at the first progress report of the chosen end and notes when.
pub struct CancelAt<'a> {
    /// Whether the sender is the end cancelled.
    pub sender: bool,
    /// The cancel flag of that end.
    pub flag: &'a AtomicBool,
    /// When it was set, in microseconds from `epoch`.
    pub at_us: AtomicU64,
    /// The test's start.
    pub epoch: Instant,
}

impl CancelAt<'_> {
    pub fn observe(&self, is_sender: bool, p: Progress) {
        if is_sender == self.sender && p.bytes > 0 && !self.flag.swap(true, Ordering::Relaxed) {
            self.at_us.store(self.epoch.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
    }

    pub fn at(&self) -> Instant {
        let us = self.at_us.load(Ordering::Relaxed);
        assert!(self.flag.load(Ordering::Relaxed), "the transfer ended before it was cancelled");
        self.epoch + Duration::from_micros(us)
    }
}

/// Checks the progress contract on one end's reports (each with when it came; `started` just
/// before the datapath started): the last report is the end state; between reports at least
/// ~100 ms pass, except before the last (which comes at the end) and once less is left than
/// moves in 100 ms at the rate so far (reports every 10 ms then; the rate here is counted from
/// a little before the datapath's own start, hence the margin); progress never goes back.
pub fn check_progress(progress: &[(Instant, Progress)], started: Instant, total: u64) {
    let (_, last) = progress.last().expect("a final progress report");
    assert_eq!(last.total, total);
    let n = progress.len();
    for pair in progress[..n.saturating_sub(1)].windows(2) {
        let ((t0, _), (t1, p)) = (pair[0], pair[1]);
        let gap = t1 - t0;
        let per_100ms = p.bytes as f64 / (t1 - started).as_secs_f64() * 0.1;
        let ending = (p.total - p.bytes) as f64 <= 1.5 * per_100ms;
        assert!(
            gap >= Duration::from_millis(95) || (ending && gap >= Duration::from_millis(5)),
            "progress reported after only {gap:?}, {} of {} bytes left",
            p.total - p.bytes,
            p.total
        );
    }
    assert!(progress.windows(2).all(|p| p[0].1.bytes <= p[1].1.bytes), "progress went back");
}
