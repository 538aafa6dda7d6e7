//! Helpers shared by the tests of the real binary: the binary, an isolated client
//! environment, test files, and network namespaces of a test's own.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use sluice_proto::rng::Rng;

#[path = "../../../../tools/testing/skip.rs"]
mod skip;
#[allow(unused_imports)] // not every test file skips
pub use skip::skip_or_fail;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// Keeps a client command from this machine's configuration and `SLUICE_*` environment: its
/// config directory is `dir`, where no config file is unless a test writes one.
pub fn isolate(c: &mut Command, dir: &Path) {
    for var in [
        "SLUICE_TOKEN",
        "SLUICE_CONFIG",
        "SLUICE_PORT",
        "SLUICE_TOKEN_FILE",
        "SLUICE_KNOWN_HOSTS",
        "SLUICE_FINGERPRINT",
        "SLUICE_CHANNELS",
        "SLUICE_LIMIT_RATE",
        "SLUICE_COMPRESS",
        "SLUICE_POLICY",
        "SLUICE_PACKET_SIZE",
        "SLUICE_TRANSPORT",
        "SLUICE_SSH",
        "SLUICE_REMOTE_SLUICE",
        "SLUICE_NO_PATH_MEMORY",
    ] {
        c.env_remove(var);
    }
    c.env("XDG_CONFIG_HOME", dir).env("HOME", dir).env("XDG_CACHE_HOME", dir.join(".cache"));
    c.env("XDG_DATA_HOME", dir.join(".local/share"));
}

/// Writes `size` bytes of seeded random data to `path`.
pub fn random_file(path: &Path, size: u64, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut f = std::fs::File::create(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        buf.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n]).unwrap();
        left -= n as u64;
    }
}

/// Whether the two files hold the same bytes.
pub fn same_file(a: &Path, b: &Path) -> bool {
    let h = |p: &Path| blake3::hash(&std::fs::read(p).unwrap());
    std::fs::metadata(a).unwrap().len() == std::fs::metadata(b).unwrap().len() && h(a) == h(b)
}

/// The exit code (-1 for a signal).
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// The process's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Starts `sluice serve` through `runner` (the binary, or `ip netns exec NS` and the binary)
/// listening on `listen`, and waits for its "serving on" line.
pub fn serve_with(
    runner: Command,
    listen: &str,
    root: &Path,
    state_dir: &Path,
    tokens: &Path,
) -> Child {
    serve_seen(runner, listen, root, state_dir, tokens).0
}

/// [`serve_with`], and the port and fingerprint its "serving on" line names (for port 0).
pub fn serve_seen(
    mut runner: Command,
    listen: &str,
    root: &Path,
    state_dir: &Path,
    tokens: &Path,
) -> (Child, u16, String) {
    let mut server = runner
        .args(["serve", "--listen", listen, "--root"])
        .arg(root)
        .arg("--state-dir")
        .arg(state_dir)
        .arg("--tokens")
        .arg(tokens)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("serving on"), "server said {line:?}");
    // "sluice: serving on 127.0.0.1:PORT with fingerprint SHA256:..."
    let addr = line.split_whitespace().nth(3).unwrap_or_default();
    let port = addr.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let fingerprint = line.split_whitespace().last().unwrap_or_default().to_owned();
    (server, port, fingerprint)
}

/// A network namespace of this test's own (loopback only), removed on drop.
pub struct Netns(pub String);

impl Netns {
    /// Creates it with loopback up at `mtu`; `None` when this is not root or `ip` is missing.
    pub fn with_loopback_mtu(tag: &str, mtu: u32) -> Option<Netns> {
        let name = format!("sluice-e2e-{tag}-{}", std::process::id());
        let ok = Command::new("ip").args(["netns", "add", &name]).status().ok()?.success();
        if !ok {
            return None;
        }
        let ns = Netns(name);
        let up = ns
            .cmd("ip")
            .args(["link", "set", "lo", "up", "mtu", &mtu.to_string()])
            .status()
            .unwrap();
        assert!(up.success(), "could not set up loopback in {}", ns.0);
        Some(ns)
    }

    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A client namespace a and a server namespace b of the test's own, joined by a `tools/linkem`
/// link, with `sluice serve` in b on `port` (its own root, state and one token). The server
/// stops before the link goes; the namespaces go last.
pub struct Linked {
    server: Option<Child>,
    emulator: Option<linkem::Emulator>,
    pub pair: linkem::NetnsPair,
    pub root: std::path::PathBuf,
    pub dir: tempfile::TempDir,
    port: String,
    token: String,
}

impl Linked {
    /// The namespaces `tag`, the link `link` both ways, and the server.
    pub fn new(tag: &str, link: linkem::DirectionConfig, port: &str, token: &str) -> Linked {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let pair = linkem::NetnsPair::create(&linkem::NetnsPair::unique_prefix(tag)).unwrap();
        let config = linkem::LinkConfig::symmetric(link);
        let emulator = linkem::Emulator::start(pair.a(), pair.b(), &config).unwrap();
        let mut linked = Linked {
            server: None,
            emulator: Some(emulator),
            pair,
            root,
            dir,
            port: port.to_owned(),
            token: token.to_owned(),
        };
        let listen = format!("{}:{port}", linkem::B_ADDR);
        let state = linked.dir.path().join("state");
        let server = serve_with(linked.in_b(BIN), &listen, &linked.root, &state, &tokens);
        linked.server = Some(server);
        linked
    }

    /// Stops the server and starts it again as before, with `env` set (a config file:
    /// `SLUICE_SERVER_CONFIG`).
    #[allow(dead_code)] // not every test binary restarts its server
    pub fn restart_server(&mut self, env: &[(&str, &Path)]) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        let mut runner = self.in_b(BIN);
        for (key, value) in env {
            runner.env(key, value);
        }
        let listen = format!("{}:{}", linkem::B_ADDR, self.port);
        let (state, tokens) = (self.dir.path().join("state"), self.dir.path().join("tokens"));
        self.server = Some(serve_with(runner, &listen, &self.root, &state, &tokens));
    }

    /// `program` in namespace b.
    pub fn in_b(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.pair.b(), program]);
        c
    }

    /// `sluice cp [extra] FROM TO` in namespace a (isolated from this machine's settings),
    /// where a `:name` is the server's; first contact pins the server.
    pub fn cp(&self, extra: &[&str], from: &str, to: &str) -> Command {
        let remote = |s: &str| match s.strip_prefix(':') {
            Some(name) => format!("{}:{name}", linkem::B_ADDR),
            None => s.to_owned(),
        };
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.pair.a(), BIN]);
        isolate(&mut c, self.dir.path());
        c.args(["cp", "-P", &self.port, "--accept-new-host"])
            .args(extra)
            .arg("--known-hosts")
            .arg(self.dir.path().join("known_hosts"))
            .env("SLUICE_TOKEN", &self.token)
            .arg(remote(from))
            .arg(remote(to));
        c
    }
}

impl Drop for Linked {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        drop(self.emulator.take());
    }
}
