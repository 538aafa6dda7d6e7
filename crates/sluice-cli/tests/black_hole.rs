//! A path MTU black hole between client and server: `linkem` between two namespaces of the
//! test's own drops every IP packet longer than 1400 bytes without a word, while the kernels on
//! both ends believe the TUN's 1500-byte MTU. The session's QUIC connection gets through (it
//! starts at 1200 bytes and finds the larger sizes lost); the data channels' 1472-byte packets
//! do not. Needs root (namespaces, TUN devices); without it the test says so and passes.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};

use linkem::{DirectionConfig, Emulator, LinkConfig, NetnsPair};

mod common;

use common::{BIN, code, random_file, same_file, stderr};

const TOKEN: &str = "black-hole-test-token-41c9";

/// The link and the server in it; the server is stopped before the link goes.
struct Hole {
    server: Option<Child>,
    emulator: Option<Emulator>,
    pair: NetnsPair,
}

impl Drop for Hole {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        drop(self.emulator.take());
    }
}

fn in_ns(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, BIN]);
    c
}

#[test]
fn a_path_mtu_black_hole_fails_clearly_and_the_suggested_packet_size_gets_through() {
    if !linkem::netns::is_root() {
        println!("skipped: needs root for network namespaces and TUN devices");
        return;
    }
    let seed = 4101;
    println!("seed {seed}");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let src = dir.path().join("src.bin");
    random_file(&src, 3_000_000, seed);

    let link = DirectionConfig {
        rate_bps: 200_000_000,
        delay_ns: 5_000_000,
        black_hole_above_bytes: Some(1400),
        ..Default::default()
    };
    let pair = NetnsPair::create(&NetnsPair::unique_prefix("sluice-bh")).unwrap();
    let emulator = Emulator::start(pair.a(), pair.b(), &LinkConfig::symmetric(link)).unwrap();
    let mut hole = Hole { server: None, emulator: Some(emulator), pair };
    let listen = format!("{}:7810", linkem::B_ADDR);
    let mut server = in_ns(hole.pair.b())
        .args(["serve", "--listen", &listen, "--root"])
        .arg(&root)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--tokens")
        .arg(&tokens)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    hole.server = Some(server);
    assert!(line.contains("serving on"), "server said {line:?}");

    let cp = |packet_size: Option<&str>, name: &str| -> Output {
        let mut c = in_ns(hole.pair.a());
        c.args(["cp", "-q", "-P", "7810", "--accept-new-host"]);
        if let Some(size) = packet_size {
            c.args(["--packet-size", size]);
        }
        c.arg("--known-hosts")
            .arg(dir.path().join("known_hosts"))
            .env("SLUICE_TOKEN", TOKEN)
            .arg(&src)
            .arg(format!("{}:{name}", linkem::B_ADDR))
            .output()
            .unwrap()
    };

    // The default 1472-byte datagrams vanish: a clear error that names the cause and the way
    // out, a failure exit, and no file under the name asked for.
    let lost = cp(None, "default.bin");
    let said = stderr(&lost);
    println!("default packet size: exit {}, {said}", code(&lost));
    assert_eq!(code(&lost), 5, "{said}");
    assert!(said.contains("nothing got through"), "{said}");
    assert!(said.contains("drops 1472-byte datagrams"), "{said}");
    assert!(said.contains("try --packet-size 1232"), "{said}");
    assert!(!root.join("default.bin").exists());

    // What it suggests gets through, intact.
    let fits = cp(Some("1232"), "small.bin");
    assert_eq!(code(&fits), 0, "{}", stderr(&fits));
    assert!(same_file(&src, &root.join("small.bin")));
    drop(hole);
}
