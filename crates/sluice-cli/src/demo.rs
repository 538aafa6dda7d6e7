//! `sluice demo`: a local server, a real transfer of a random file, verification, and a plain
//! TCP copy of the same bytes for comparison. Needs nothing but the built binary.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use sluice::session::{Client, ClientConfig, Credentials, Server, ServerConfig, TrustPolicy};
use sluice_proto::rng::Rng;

use crate::exit;

/// Arguments of `sluice demo`.
#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Size of the test file (e.g. 1GiB, 200MiB).
    #[arg(long, default_value = "1GiB", value_parser = sluice::units::parse_size)]
    size: u64,
    /// Where to put the test files (default: /dev/shm when present, else the temp directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the test files afterwards.
    #[arg(long)]
    keep: bool,
    /// Data channels (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    channels: Option<u32>,
}

/// Removes the demo directory when dropped (unless kept).
struct Scratch {
    path: PathBuf,
    keep: bool,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Writes `size` pseudo-random bytes (incompressible) to `path`.
pub(crate) fn write_random_file(path: &Path, size: u64) -> std::io::Result<()> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut rng = Rng::new(seed);
    let mut file = File::create(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for word in buf.chunks_exact_mut(8) {
            word.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let n = left.min(buf.len() as u64) as usize;
        file.write_all(&buf[..n])?;
        left -= n as u64;
    }
    file.sync_all()
}

fn hash_path(path: &Path) -> std::io::Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    let mut file = File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize())
}

/// Copies `src` to `dst` over one loopback TCP connection; returns the seconds taken, from
/// connecting to the destination's fsync.
fn tcp_copy(src: &Path, dst: &Path) -> anyhow::Result<f64> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let addr = listener.local_addr()?;
    let src = src.to_path_buf();
    let started = Instant::now();
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut stream = TcpStream::connect(addr)?;
        let mut file = File::open(&src)?;
        std::io::copy(&mut file, &mut stream)?;
        Ok(())
    });
    let (mut stream, _) = listener.accept()?;
    let mut out = File::create(dst)?;
    std::io::copy(&mut stream, &mut out)?;
    out.sync_all()?;
    let secs = started.elapsed().as_secs_f64();
    sender.join().map_err(|_| anyhow::anyhow!("TCP sender thread panicked"))??;
    Ok(secs)
}

fn mbit(bytes: u64, secs: f64) -> f64 {
    bytes as f64 * 8.0 / secs.max(1e-9) / 1e6
}

/// Runs the demo.
pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let base = match args.dir {
        Some(d) => d,
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    let scratch =
        Scratch { path: base.join(format!("sluice-demo-{}", std::process::id())), keep: args.keep };
    let root = scratch.path.join("served");
    let state = scratch.path.join("state");
    let received = scratch.path.join("received");
    for dir in [&root, &state, &received] {
        std::fs::create_dir_all(dir)
            .map_err(|e| exit::local_io(format!("cannot create {}: {e}", dir.display())))?;
    }
    let tokens = scratch.path.join("tokens");
    let token = random_token()?;
    write_private(&tokens, &format!("{token}\n"))?;

    say(format!(
        "sluice demo: writing {} MiB of random bytes to {}",
        args.size >> 20,
        root.display()
    ));
    let source = root.join("demo.bin");
    write_random_file(&source, args.size)
        .map_err(|e| exit::local_io(format!("cannot write {}: {e}", source.display())))?;

    let server = Server::bind(ServerConfig {
        root: root.clone(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        credentials: Credentials::Stored { state_dir: state.clone(), tokens_file: tokens.clone() },
        idle_timeout: std::time::Duration::from_secs(30),
        max_channels: args.channels,
        digest_timeout: None,
        fault: None,
        third_party: Default::default(),
        tcp: true,
        spool: None,
        path_memory: false,
        relays: Vec::new(),
    })
    .context("cannot start the demo server")?;
    let addr = server.local_addr();
    let fingerprint = server.fingerprint().clone();
    say(format!("sluice demo: server on {addr}, fingerprint {fingerprint}"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server_task = tokio::spawn(server.run(async move {
        let _ = stop_rx.await;
    }));

    let target = received.join("demo.bin");
    let started = Instant::now();
    let client = Client::connect(ClientConfig {
        server: addr,
        host: addr.ip().to_string(),
        token,
        known_hosts: state.join("client_known_hosts"),
        trust: TrustPolicy::Pinned(fingerprint),
        channel: sluice::session::default_channel_config(),
        channels: args.channels,
        busy_retry: sluice::session::BusyRetry::default(),
        fault: None,
        identity: None,
        grant: None,
        transport: sluice::session::TransportChoice::Auto,
        // The demo's measurement starts afresh every time.
        path_memory: None,
    })
    .await?;
    let channels = client.channels().await?;
    let report = client.get("demo.bin", &target, |_| {}).await?;
    let sluice_secs = started.elapsed().as_secs_f64();
    client.close().await;
    let _ = stop_tx.send(());
    let _ = server_task.await;

    let (want, got) = (hash_path(&source)?, hash_path(&target)?);
    if want != got {
        return Err(anyhow::Error::new(exit::Coded {
            code: exit::INTEGRITY,
            message: format!("demo: received file differs (BLAKE3 {got} instead of {want})"),
        }));
    }
    let tcp_target = received.join("demo-tcp.bin");
    let tcp_secs = tcp_copy(&source, &tcp_target)?;
    if hash_path(&tcp_target)? != want {
        anyhow::bail!("demo: the TCP copy differs from the source");
    }
    let sluice_mbit = mbit(report.bytes, sluice_secs);
    let tcp_mbit = mbit(args.size, tcp_secs);
    #[allow(clippy::print_stdout)]
    {
        println!(
            "sluice demo: {} bytes moved and verified (BLAKE3 {})",
            report.bytes,
            &want.to_hex()[..16]
        );
        println!(
            "sluice: {sluice_secs:.2} s, {sluice_mbit:.0} Mbit/s (encrypted, {channels} UDP channel(s), handshake, hashing and fsync included)"
        );
        println!(
            "tcp:    {tcp_secs:.2} s, {tcp_mbit:.0} Mbit/s (plain loopback TCP copy of the same file, fsync included, no encryption)"
        );
        println!("ratio sluice/tcp: {:.2}", sluice_mbit / tcp_mbit.max(1e-9));
    }
    Ok(())
}

/// 128 random bits from the system's CSPRNG, in hex.
fn random_token() -> anyhow::Result<String> {
    use aws_lc_rs::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    aws_lc_rs::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the system random generator failed"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| exit::local_io(format!("cannot create {}: {e}", path.display())))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

fn say(text: String) {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("{text}");
    }
}
