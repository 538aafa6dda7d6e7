//! End-to-end tests of the real `sluice` binary on loopback: a server process, client
//! processes, files on disk, exit codes and messages. The cases are `cases/e2e.rs`, run here
//! with the default transport (auto, which takes UDP on loopback) and again in `e2e_tcp.rs`
//! over TCP; the tests of UDP's own datagram sizes are here only.

#![allow(clippy::print_stdout)] // tests print their seeds

mod common;

/// The transport of every client command of the cases.
const TRANSPORT: &str = "auto";

include!("cases/e2e.rs");

use common::{Netns, serve_with, skip_or_fail};

/// UDP's own: the datagram size fits the path (no TCP counterpart).
#[test]
fn on_a_1500_byte_path_the_default_packet_size_fits_both_families_and_a_larger_one_is_refused() {
    // Loopback with a 1500-byte MTU in a namespace of our own: UDP payloads of 1472 bytes fit
    // over IPv4, 1452 over IPv6.
    let Some(ns) = Netns::with_loopback_mtu("mtu", 1500) else {
        skip_or_fail("needs root and iproute2 to make a network namespace");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let port = "7802";
    let serve = |listen: &str, state: &str| {
        serve_with(ns.cmd(BIN), listen, &root, &dir.path().join(state), &tokens)
    };
    let mut servers =
        [serve(&format!("127.0.0.1:{port}"), "state4"), serve(&format!("[::1]:{port}"), "state6")];
    let src = dir.path().join("src.bin");
    random_file(&src, 300_000, 31);
    let cp = |packet_size: Option<&str>, dest: &str| {
        let mut c = ns.cmd(BIN);
        c.args(["cp", "-P", port, "--accept-new-host"]);
        if let Some(size) = packet_size {
            c.args(["--packet-size", size]);
        }
        c.arg("--known-hosts")
            .arg(dir.path().join("known_hosts"))
            .env("SLUICE_TOKEN", TOKEN)
            .env("RUST_LOG", "sluice=debug")
            .arg(&src)
            .arg(dest)
            .output()
            .unwrap()
    };
    let too_big = cp(Some("9000"), "127.0.0.1:big.bin");
    let fits = cp(Some("1472"), "127.0.0.1:fits.bin");
    let default4 = cp(None, "127.0.0.1:default4.bin");
    let default6 = cp(None, "[::1]:default6.bin");
    for server in &mut servers {
        let _ = server.kill();
        let _ = server.wait();
    }
    assert_ne!(code(&too_big), 0);
    assert!(stderr(&too_big).contains("--packet-size 1472 or less"), "{}", stderr(&too_big));
    assert!(!root.join("big.bin").exists());
    for (o, name) in [(&fits, "fits.bin"), (&default4, "default4.bin"), (&default6, "default6.bin")]
    {
        assert_eq!(code(o), 0, "{name}: {}", stderr(o));
        assert!(same_file(&src, &root.join(name)), "{name}");
    }
    // IPv4 keeps the default; IPv6's 20 more bytes of header lower it to what fits.
    assert!(!stderr(&default4).contains("fitted to the path"), "{}", stderr(&default4));
    assert!(
        stderr(&default6).contains("default packet size fitted to the path packet_size=1452"),
        "{}",
        stderr(&default6)
    );
}
