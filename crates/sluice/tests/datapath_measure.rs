//! Loopback goodput of one data channel and BLAKE3 speed of `hash_file`: a measurement, not a
//! check (nothing here asserts a speed). Run it in a release build:
//!
//! ```text
//! cargo test --release -p sluice --test datapath_measure -- --ignored --nocapture
//! ```
//!
//! `SLUICE_MEASURE_DIR` (default `/dev/shm`), `SLUICE_MEASURE_MIB` (default 1024),
//! `SLUICE_MEASURE_BURST` (default `REAL_TIME_BURST_PKTS`) and `SLUICE_MEASURE_FIXED_MBPS`
//! (the `fixed` controller at that rate instead of the default `adaptive`, to see what the data
//! path itself can move) change the setup.

#![allow(clippy::print_stdout)] // a measurement prints its results

use std::net::UdpSocket;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use sluice::datapath::{ChannelKeys, ChannelParams, REAL_TIME_BURST_PKTS, receive_file, send_file};
use sluice::files::{PartialFile, hash_file};
use sluice_proto::config::ChannelConfig;
use sluice_proto::crypto::{Algorithm, PacketKey};
use sluice_proto::rng::Rng;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// CPU time (user + system) of the calling thread so far, from /proc (clock ticks of 10 ms).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // After the command name: state is field 0, utime 11, stime 12.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn key(b: u8) -> PacketKey {
    PacketKey::new(Algorithm::Aes256Gcm, &[b; 32], [b; 12])
}

#[test]
#[ignore = "a measurement: run it in a release build, by hand"]
fn measure_one_channel_over_loopback() {
    let dir = std::path::PathBuf::from(env_or("SLUICE_MEASURE_DIR", "/dev/shm".to_owned()));
    let len = env_or("SLUICE_MEASURE_MIB", 1024u64) << 20;
    let burst = env_or("SLUICE_MEASURE_BURST", REAL_TIME_BURST_PKTS);
    let src_path = dir.join(format!("sluice-measure-src-{}", std::process::id()));
    let final_path = dir.join(format!("sluice-measure-dst-{}", std::process::id()));

    let src =
        std::fs::File::options().read(true).write(true).create_new(true).open(&src_path).unwrap();
    let mut rng = Rng::new(1);
    let mut block = vec![0u8; 4 << 20];
    let mut offset = 0;
    while offset < len {
        block.chunks_mut(8).for_each(|c| c.copy_from_slice(&rng.next_u64().to_le_bytes()));
        let n = block.len().min((len - offset) as usize);
        src.write_all_at(&block[..n], offset).unwrap();
        offset += n as u64;
    }

    let started = Instant::now();
    let hash = hash_file(&src).unwrap();
    let hash_s = started.elapsed().as_secs_f64();
    println!(
        "hash_file: {} MiB in {hash_s:.3} s = {:.2} GB/s",
        len >> 20,
        len as f64 / hash_s / 1e9
    );
    // The same hash over memory already read: what the hash alone costs, without the reads.
    let in_memory = vec![7u8; 256 << 20];
    let started = Instant::now();
    let _ = blake3::hash(&in_memory);
    let gbps = in_memory.len() as f64 / started.elapsed().as_secs_f64() / 1e9;
    println!("blake3 in memory (256 MiB, one thread): {gbps:.2} GB/s");
    drop(in_memory);

    let fixed_mbps = env_or("SLUICE_MEASURE_FIXED_MBPS", 0u64);
    let mut config = ChannelConfig { max_burst_pkts: burst, ..ChannelConfig::default() };
    if fixed_mbps > 0 {
        config.cc = sluice_proto::cc::CcKind::Fixed;
        config.rate_bps = fixed_mbps * 1_000_000;
    }
    let (s_sock, r_sock) =
        (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
    let (s_addr, r_addr) = (s_sock.local_addr().unwrap(), r_sock.local_addr().unwrap());
    let sender = ChannelParams {
        config: config.clone(),
        keys: ChannelKeys { seal: key(1), open: key(2) },
        socket: s_sock,
        peer: r_addr,
    };
    let receiver = ChannelParams {
        config,
        keys: ChannelKeys { seal: key(2), open: key(1) },
        socket: r_sock,
        peer: s_addr,
    };
    let partial = PartialFile::create(&final_path, len).unwrap();
    let no = AtomicBool::new(false);
    let range = 0..len;
    let started = Instant::now();
    let ((sent, s_cpu), (received, r_cpu)) = std::thread::scope(|s| {
        let r = s.spawn(|| {
            let report = receive_file(receiver, partial.file(), range.clone(), &mut |_| {}, &no);
            (report, thread_cpu())
        });
        let snd = s.spawn(|| {
            let report = send_file(sender, &src, range.clone(), &mut |_| {}, &no);
            (report, thread_cpu())
        });
        (snd.join().unwrap(), r.join().unwrap())
    });
    let wall = started.elapsed().as_secs_f64();
    let sent = sent.unwrap();
    let received = received.unwrap();
    println!("sender:   {sent:?}, thread CPU {s_cpu:?}");
    println!("receiver: {received:?}, thread CPU {r_cpu:?}");
    println!(
        "goodput: {} MiB in {:.3} s (sender's time) = {:.0} Mbit/s; wall {wall:.3} s; \
         cc {} {fixed_mbps}; max_burst_pkts {burst}; sender CPU {:.0} %, receiver CPU {:.0} %",
        len >> 20,
        sent.seconds,
        len as f64 * 8.0 / sent.seconds / 1e6,
        if fixed_mbps > 0 { "fixed Mbit/s" } else { "adaptive" },
        s_cpu.as_secs_f64() / wall * 100.0,
        r_cpu.as_secs_f64() / wall * 100.0,
    );
    let started = Instant::now();
    partial.commit(&hash).unwrap();
    println!("commit (hash + fsync + rename): {:.3} s", started.elapsed().as_secs_f64());
    std::fs::remove_file(&src_path).unwrap();
    std::fs::remove_file(&final_path).unwrap();
}
