//! Paths that block UDP (issue 30), through the real binary: a client and a server in two
//! network namespaces of the test's own, joined by a `tools/linkem` link (1000 Mbit/s, 10 ms
//! round trip), with an nftables rule in the server's namespace that drops every UDP packet
//! coming in, silently, as a firewall between the hosts would.
//!
//! - With the rule in place from the start, `sluice cp` with default settings (`--transport
//!   auto`) moves a large file (1 GiB; `SLUICE_UDP_BLOCKED_MIB` to change) and a tree intact
//!   over TCP, saying so once.
//! - With the rule added mid-way, the copy that began over UDP finishes over TCP, resuming
//!   from what arrived.
//!
//! - With UDP let through only to and from a relay's port (beside the server), a relayed
//!   upload's sender and the server's collector find the relay's data channels blocked, take
//!   the relay up over TCP, and the copy completes through it.
//! - With UDP let through to and from the server's port and the relay's, a relayed upload's
//!   direct deposits get nothing through: their share goes to the relay.
//!
//! Needs root (namespaces, TUN devices, nftables); without it the test says so and passes,
//! except in CI, where it fails (`common::skip_or_fail`). Prints its seeds and what it measured;
//! asserts no speed.

#![allow(clippy::print_stdout)] // tests print their seeds and results

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Instant;

use linkem::DirectionConfig;

mod common;

use common::{Linked, code, random_file, same_file, skip_or_fail, stderr};

const TOKEN: &str = "udp-blocked-test-token-5e21";
const PORT: &str = "7820";
/// What `auto` says when it takes TCP.
const NOTICE: &str = "UDP to the server does not get through";

fn large_size() -> u64 {
    std::env::var("SLUICE_UDP_BLOCKED_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024) << 20
}

/// The two namespaces and their link (1000 Mbit/s, 10 ms round trip), the server in b.
fn path(tag: &str) -> Linked {
    let link =
        DirectionConfig { rate_bps: 1_000_000_000, delay_ns: 5_000_000, ..Default::default() };
    Linked::new(tag, link, PORT, TOKEN)
}

/// Drops every UDP packet that comes into the server's namespace, without a word.
fn block_udp(path: &Linked) {
    nft(
        path,
        "table inet sluice_test {\n  chain input {\n    type filter hook input priority 0; \
               policy accept;\n    meta l4proto udp drop\n  }\n}\n",
    );
}

/// Drops every UDP packet to or from the server's namespace but those of its own port: the
/// session gets through, the data channels (other ports) do not.
fn block_udp_but_the_port(path: &Linked) {
    nft(
        path,
        &format!(
            "table inet sluice_test {{\n  chain input {{\n    type filter hook input priority 0; \
             policy accept;\n    udp dport != {PORT} drop\n  }}\n  chain output {{\n    type \
             filter hook output priority 0; policy accept;\n    udp sport != {PORT} drop\n  \
             }}\n}}\n"
        ),
    );
}

fn nft(path: &Linked, rules: &str) {
    let file = path.dir.path().join("block-udp.nft");
    std::fs::write(&file, rules).unwrap();
    let out = path.in_b("nft").arg("-f").arg(&file).output().unwrap();
    assert!(out.status.success(), "nft: {}", String::from_utf8_lossy(&out.stderr));
}

#[track_caller]
fn root_or_skip() -> bool {
    let root = linkem::netns::is_root();
    if !root {
        skip_or_fail("needs root for network namespaces, TUN devices and nftables");
    }
    root
}

/// The JSON lines of a `--json` run.
fn events(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn warnings(events: &[serde_json::Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["event"] == "warning")
        .map(|e| e["message"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn summary(events: &[serde_json::Value]) -> serde_json::Value {
    events.iter().find(|e| e["event"] == "summary").cloned().unwrap_or_default()
}

/// Every file under `top`, sorted, with its bytes' BLAKE3.
fn tree_hashes(top: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![top.to_owned()];
    while let Some(dir) = stack.pop() {
        for child in std::fs::read_dir(&dir).unwrap() {
            let path = child.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(top).unwrap().to_string_lossy().into_owned();
                let hash = blake3::hash(&std::fs::read(&path).unwrap()).to_hex().to_string();
                out.push((rel, hash));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn with_udp_dropped_cp_moves_a_large_file_and_a_tree_over_tcp_saying_so_once() {
    if !root_or_skip() {
        return;
    }
    let path = path("sluice-udp-off");
    block_udp(&path);
    let size = large_size();
    println!("seed 3001, {} MiB", size >> 20);
    random_file(&path.root.join("big.bin"), size, 3001);
    let got = path.dir.path().join("got.bin");
    let started = Instant::now();
    let out = path.cp(&["--json"], ":big.bin", got.to_str().unwrap()).output().unwrap();
    let secs = started.elapsed().as_secs_f64();
    let events = events(&out);
    println!("download: exit {} in {secs:.1} s: {:?}", code(&out), summary(&events));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(same_file(&path.root.join("big.bin"), &got), "the file arrived intact");
    let said = warnings(&events);
    assert_eq!(said.iter().filter(|w| w.contains(NOTICE)).count(), 1, "{said:?}");
    assert_eq!(summary(&events)["transport"], "tcp");

    // A tree up, in plain output: the notice once, on stderr.
    let tree = path.dir.path().join("tree");
    for i in 0..30u64 {
        let sub = tree.join(format!("d{}", i % 4));
        std::fs::create_dir_all(&sub).unwrap();
        random_file(&sub.join(format!("f{i}")), 10_000 * i + 1, 3100 + i);
    }
    std::fs::create_dir_all(tree.join("empty")).unwrap();
    let out = path.cp(&["-r"], tree.to_str().unwrap(), ":").output().unwrap();
    let said = stderr(&out);
    println!("tree: exit {}: {said}", code(&out));
    assert_eq!(code(&out), 0, "{said}");
    assert_eq!(said.matches(NOTICE).count(), 1, "{said}");
    assert!(said.contains("over TCP"), "the summary names the transport: {said}");
    assert_eq!(tree_hashes(&path.root.join("tree")), tree_hashes(&tree));
    assert!(path.root.join("tree/empty").is_dir());
}

#[test]
fn udp_blocked_mid_way_the_copy_finishes_over_tcp_from_what_arrived() {
    if !root_or_skip() {
        return;
    }
    let path = path("sluice-udp-mid");
    let size: u64 = 192 << 20;
    println!("seed 3002");
    random_file(&path.root.join("mid.bin"), size, 3002);
    let got = path.dir.path().join("mid.bin");
    // 200 Mbit/s: 192 MiB take about 8 s, time to block UDP a third of the way.
    let mut child = path
        .cp(&["--json", "--limit-rate", "200Mbit"], ":mid.bin", got.to_str().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut blocked_at = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        if blocked_at.is_none()
            && value["event"] == "progress"
            && value["bytes"].as_u64().is_some_and(|b| b * 3 >= size)
        {
            block_udp(&path);
            blocked_at = value["bytes"].as_u64();
            println!("UDP blocked at {blocked_at:?} bytes");
        }
        lines.push(value);
    }
    let status = child.wait().unwrap();
    let mut stderr_text = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr_text).unwrap();
    let blocked_at = blocked_at.expect("the copy got a third of the way before it ended");
    let end = summary(&lines);
    println!("exit {:?}: {end}", status.code());
    assert_eq!(status.code(), Some(0), "{stderr_text}");
    assert!(same_file(&path.root.join("mid.bin"), &got), "the file arrived intact");
    assert_eq!(end["transport"], "tcp", "{end}");
    let said = warnings(&lines);
    println!("warnings: {said:?}");
    assert!(said.iter().any(|w| w.contains("the transfer stopped")), "{said:?}");
    assert_eq!(said.iter().filter(|w| w.contains(NOTICE)).count(), 1, "{said:?}");
    // What arrived before the block was kept: the resume kept whole 4 MiB blocks of the
    // prefix written in order, which trails what had arrived by what was in flight.
    let resumed = end["resumed_bytes"].as_u64().unwrap();
    println!("resumed {resumed} bytes; {blocked_at} had arrived when UDP was blocked");
    assert!(resumed > 0 && resumed.is_multiple_of(4 << 20), "{end}");
    assert!(resumed + (64 << 20) >= blocked_at, "kept {resumed} of {blocked_at}");
}

#[test]
fn with_only_the_servers_udp_port_open_the_data_goes_over_tcp() {
    if !root_or_skip() {
        return;
    }
    let path = path("sluice-udp-port");
    block_udp_but_the_port(&path);
    println!("seed 3003");
    let src = path.dir.path().join("up.bin");
    random_file(&src, 64 << 20, 3003);
    // The session connects over UDP (its port is open); the data channels get nothing through,
    // and the copy is taken up over TCP from what arrived (nothing).
    let out = path.cp(&["--json"], src.to_str().unwrap(), ":up.bin").output().unwrap();
    let events = events(&out);
    let said = warnings(&events);
    println!("exit {}: {said:?} {}", code(&out), summary(&events));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(same_file(&src, &path.root.join("up.bin")), "the file arrived intact");
    assert!(said.iter().any(|w| w.contains("not its data ports")), "{said:?}");
    assert_eq!(summary(&events)["transport"], "tcp");
}

/// The port of the relay the last test starts beside the server (in namespace b).
const RELAY_PORT: &str = "7821";

/// A relay beside the server in namespace b, on [`RELAY_PORT`], named `r1` in the client's
/// config file there; with a firewall in b that lets UDP through only to and from `ports`.
struct Relay {
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl Relay {
    /// `cp --json ARGS FILE :` of a 48 MiB file `name` (its bytes from `seed`), which must
    /// exit 0 and arrive intact; what it said on stderr, and its summary.
    fn copy_through(
        &self,
        path: &Linked,
        name: &str,
        seed: u64,
        args: &[&str],
    ) -> (String, serde_json::Value) {
        println!("seed {seed}");
        let src = path.dir.path().join(name);
        random_file(&src, 48 << 20, seed);
        let args = [&["--json"], args].concat();
        let started = Instant::now();
        let out = path.cp(&args, src.to_str().unwrap(), ":").output().unwrap();
        let end = summary(&events(&out));
        println!("exit {} in {:.1} s: {end}", code(&out), started.elapsed().as_secs_f64());
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(same_file(&src, &path.root.join(name)), "the file arrived intact");
        (stderr(&out), end)
    }

    /// Checks its spool holds no block: the server collected every one.
    #[track_caller]
    fn holds_no_block(&self) {
        let spool: Vec<_> = walk_files(&self.dir.join("spool"));
        assert!(spool.iter().all(|f| f.extension().is_none_or(|e| e != "blk")), "{spool:?}");
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn relay_beside_the_server(path: &Linked, ports: &[&str]) -> Relay {
    let relay_dir = path.dir.path().join("relay");
    std::fs::create_dir_all(relay_dir.join("root")).unwrap();
    let mut child = path
        .in_b(common::BIN)
        .args(["serve", "--listen", &format!("{}:{RELAY_PORT}", linkem::B_ADDR), "--root"])
        .arg(relay_dir.join("root"))
        .arg("--state-dir")
        .arg(relay_dir.join("state"))
        .arg("--tokens")
        .arg(path.dir.path().join("tokens"))
        .arg("--spool")
        .arg(relay_dir.join("spool"))
        .args(["--spool-max", "1GB"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    // "sluice: serving on ADDRESS with fingerprint SHA256:..."
    let fingerprint = line.split_whitespace().last().unwrap_or_default().to_owned();
    assert!(fingerprint.starts_with("SHA256:"), "the relay said {line:?}");
    // Rules that accept, then one that drops: `udp sport != P udp dport != P drop` is one
    // compare of both ports together here, which drops unless both are P.
    let chain = |hook: &str| {
        let accept: String = ports
            .iter()
            .map(|p| format!("    udp sport {p} accept\n    udp dport {p} accept\n"))
            .collect();
        format!(
            "  chain {hook} {{\n    type filter hook {hook} priority 0; policy accept;\n\
             {accept}    meta l4proto udp drop\n  }}\n"
        )
    };
    nft(path, &format!("table inet sluice_test {{\n{}{}}}\n", chain("input"), chain("output")));
    let token_file = path.dir.path().join("relay.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&token_file, owner_only).unwrap();
    let config = path.dir.path().join("sluice");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!(
            "[relays.r1]\naddress = \"{}\"\nport = {RELAY_PORT}\nfingerprint = \"{fingerprint}\"\n\
             token_file = \"{}\"\n",
            linkem::B_ADDR,
            token_file.display()
        ),
    )
    .unwrap();
    Relay { child, dir: relay_dir }
}

#[test]
fn a_relay_whose_port_alone_udp_reaches_carries_the_copy_over_tcp() {
    if !root_or_skip() {
        return;
    }
    // In b, a relay beside the server, and a firewall that lets UDP through to or from the
    // relay's port only: the sender's session with the server goes over TCP (`auto`), its
    // session with the relay and the server's (the collector's) over UDP, whose data channels
    // then get nothing through. Both take the relay up over TCP and the copy completes.
    let path = path("sluice-udp-relay");
    let relay = relay_beside_the_server(&path, &[RELAY_PORT]);
    let args = ["--relay", "r1", "--relay-direct", "off", "--relay-wait"];
    let (said, end) = relay.copy_through(&path, "relayed.bin", 3004, &args);
    // The direct path is out of the striping: it took only the batches under way to the relay
    // when their UDP data got nothing through (two deposits of two 4 MiB blocks); the rest
    // went through the relay once the sender took it up over TCP, and the server collected
    // them from it the same way (the spool is empty and the file whole).
    assert_eq!((end["blocks"].as_u64(), &end["placed"][0]["name"]), (Some(12), &"r1".into()));
    let by_relay = end["placed"][0]["blocks"].as_u64().unwrap_or(0);
    assert!(by_relay >= 8, "{end}");
    assert!(said.contains("going on over TCP"), "the sender took the relay up over TCP: {said}");
    // The server had every block of the relay's from the relay: it asked for none again.
    assert!(!said.contains("asks for blocks again"), "{said}");
    relay.holds_no_block();
}

#[test]
fn a_relayed_upload_to_a_server_whose_port_alone_udp_reaches_goes_through_the_relay() {
    if !root_or_skip() {
        return;
    }
    // UDP gets through to and from the server's port and the relay's only (a firewall that
    // opens the service ports): the sender's session with the server runs over UDP, but its
    // direct deposits get nothing through. The direct path's share goes to the relay (taken
    // up over TCP as above) instead of failing the copy, and the server collects it.
    let path = path("sluice-udp-direct");
    let relay = relay_beside_the_server(&path, &[PORT, RELAY_PORT]);
    let (said, end) =
        relay.copy_through(&path, "direct.bin", 3005, &["--relay", "r1", "--relay-wait"]);
    assert!(said.contains("the direct path's share goes to the relays"), "{said}");
    let by_relay = end["placed"][0]["blocks"].as_u64().unwrap_or(0);
    assert_eq!(by_relay, 12, "every block went through the relay: {end}");
    relay.holds_no_block();
}

#[test]
fn a_relayed_download_from_a_server_whose_port_alone_udp_reaches_goes_through_the_relay() {
    if !root_or_skip() {
        return;
    }
    // The same firewall, and a download: the server stripes over its relay r1 (its config
    // file names it) and the client's direct share, whose takes get nothing through the
    // server's data ports. That share goes to the relay instead of failing the download (the
    // server's take fails, not its request), and the client collects everything from r1.
    let mut path = path("sluice-udp-take");
    let relay = relay_beside_the_server(&path, &[PORT, RELAY_PORT]);
    // The client's config file names r1 as the server's must: the same section serves both.
    let server_config = path.dir.path().join("sluice/config.toml");
    path.restart_server(&[("SLUICE_SERVER_CONFIG", &server_config)]);
    println!("seed 3006");
    let src = path.root.join("down.bin");
    random_file(&src, 48 << 20, 3006);
    let got = path.dir.path().join("got.bin");
    let started = Instant::now();
    let out = path.cp(&["--json", "--relay", "r1"], ":down.bin", got.to_str().unwrap());
    let out = { out }.output().unwrap();
    let end = summary(&events(&out));
    println!("exit {} in {:.1} s: {end}", code(&out), started.elapsed().as_secs_f64());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(same_file(&src, &got), "the file arrived intact");
    let share = |name: &str| {
        let placed = end["placed"].as_array().cloned().unwrap_or_default();
        let of = placed.iter().find(|p| p["name"] == name);
        of.and_then(|p| p["blocks"].as_u64()).unwrap_or(u64::MAX)
    };
    assert_eq!((share("r1"), share("direct")), (12, 0), "every block through the relay: {end}");
    relay.holds_no_block();
}

/// Every regular file beneath `dir`.
fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}
