//! `sluice cp --relay` end to end on loopback (issue 28, docs/relay.md): a receiver and a relay
//! (`serve --spool`) as processes, the relay named in the client's config file; the upload
//! retreats with its send time and the receiver collects the file; bad relay input fails with
//! a clear message and a non-zero exit.

#![allow(clippy::print_stdout)] // tests print their seeds

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{BIN, code, isolate, random_file, same_file, serve_seen, stderr};

const TOKEN: &str = "relay-cli-token-0123456789";
const SEED: u64 = 2028;

/// A `sluice serve` process with `extra` arguments; killed on drop.
struct Proc {
    child: Child,
    port: u16,
    fingerprint: String,
    root: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server in `dir`; a relay when `spool` names its spool and its size.
fn serve(dir: &Path, spool: Option<(&Path, &str)>) -> Proc {
    serve_with(dir, spool, &[])
}

/// [`serve`] with these environment variables too.
fn serve_with(dir: &Path, spool: Option<(&Path, &str)>, env: &[(&str, &Path)]) -> Proc {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut runner = Command::new(BIN);
    if let Some((spool, max)) = spool {
        runner.env("SLUICE_SPOOL", spool).env("SLUICE_SPOOL_MAX", max);
    }
    for (name, value) in env {
        runner.env(name, value);
    }
    runner.stderr(Stdio::null());
    let (child, port, fingerprint) =
        serve_seen(runner, "127.0.0.1:0", &root, &dir.join("state"), &tokens);
    Proc { child, port, fingerprint, root }
}

/// `sluice cp` with a config file naming `relay` as `[relays.near]`.
fn cp(dir: &Path, receiver: &Proc, relay: &Proc, args: &[&str]) -> Output {
    cp_command(dir, receiver, relay, args).output().unwrap()
}

/// [`cp`], to run.
fn cp_command(dir: &Path, receiver: &Proc, relay: &Proc, args: &[&str]) -> Command {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[relays.near]\naddress = \"127.0.0.1\"\nport = {}\nfingerprint = \"{}\"\n",
            relay.port, relay.fingerprint
        ),
    )
    .unwrap();
    let mut c = Command::new(BIN);
    isolate(&mut c, dir);
    c.env("SLUICE_CONFIG", &config)
        .env("SLUICE_TOKEN", TOKEN)
        .args(["cp", "-P", &receiver.port.to_string(), "--fingerprint", &receiver.fingerprint])
        .arg("--known-hosts")
        .arg(dir.join("known_hosts"))
        .args(args);
    c
}

/// The summary a `--json` copy printed last on stdout.
#[track_caller]
fn json_summary(stdout: &str) -> serde_json::Value {
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Checks the relay's spool holds nothing but its `tmp` directory: it deleted every block
/// once collected.
#[track_caller]
fn collected_all(spool: &Path) {
    let left: Vec<_> = std::fs::read_dir(spool).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("tmp")], "the relay deleted what was collected");
}

/// A receiver and a relay with a spool of 64 MiB, and the client's directory.
struct World {
    receiver: Proc,
    relay: Proc,
    spool: PathBuf,
    cdir: tempfile::TempDir,
    _dirs: [tempfile::TempDir; 2],
}

impl World {
    fn new() -> World {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let receiver = serve(dirs[0].path(), None);
        let spool = dirs[1].path().join("spool");
        let relay = serve(dirs[1].path(), Some((&spool, "64MiB")));
        World { receiver, relay, spool, cdir: tempfile::tempdir().unwrap(), _dirs: dirs }
    }
}

#[test]
fn an_upload_through_a_relay_retreats_and_the_server_collects_it() {
    println!("seed {SEED}");
    let World { receiver, relay, spool, cdir, _dirs } = World::new();
    let src = cdir.path().join("data.bin");
    random_file(&src, 3_000_000, SEED);
    let out = cp(
        cdir.path(),
        &receiver,
        &relay,
        &[
            "--relay",
            "near",
            "--relay-block",
            "256KiB",
            "--json",
            src.to_str().unwrap(),
            "127.0.0.1:",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = json_summary(&stdout);
    assert_eq!(summary["event"], "summary");
    assert_eq!(summary["relayed"], true);
    assert_eq!(summary["bytes"], 3_000_000);
    assert!(summary["send_seconds"].as_f64().unwrap() > 0.0, "{summary}");
    assert!(summary["total_seconds"].is_null(), "the sender did not wait: {summary}");
    let placed: u64 =
        summary["placed"].as_array().unwrap().iter().map(|p| p["blocks"].as_u64().unwrap()).sum();
    assert_eq!(placed, 12, "{summary}");
    let dest = receiver.root.join("data.bin");
    for _ in 0..300 {
        if dest.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(same_file(&src, &dest));
    collected_all(&spool);
}

#[test]
fn a_relay_that_is_down_is_left_out_and_the_copy_goes_on_direct() {
    // The relays and the server are reached at once: the relay's failure is told, the
    // server's session goes on, and every block goes the direct way.
    println!("seed {SEED}");
    let World { receiver, mut relay, cdir, _dirs, .. } = World::new();
    let _ = relay.child.kill();
    let _ = relay.child.wait();
    let src = cdir.path().join("data.bin");
    random_file(&src, 1_000_000, SEED);
    let args = ["--relay", "near", "--relay-wait", "--json", src.to_str().unwrap(), "127.0.0.1:"];
    let out = cp(cdir.path(), &receiver, &relay, &args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("relay near left out"), "{stdout}");
    all_direct(&stdout, &src, &receiver.root.join("data.bin"));
}

/// The `--json` summary in `stdout` placed every block on the direct path, and `dest` is `src`.
fn all_direct(stdout: &str, src: &Path, dest: &Path) {
    let summary = json_summary(stdout);
    let placed = summary["placed"].as_array().unwrap();
    assert_eq!(placed.len(), 1, "the direct path alone: {summary}");
    assert_eq!(placed[0]["name"], "direct", "{summary}");
    assert!(same_file(src, dest));
}

#[test]
fn a_relay_farther_from_the_server_than_asked_is_left_out() {
    println!("seed {SEED}");
    let World { receiver, relay, spool: _, cdir, _dirs } = World::new();
    let src = cdir.path().join("data.bin");
    random_file(&src, 1_000_000, SEED);
    // Any round trip is above 0 ms: the server's measure leaves the relay out.
    let args = ["--relay", "near", "--relay-max-rtt-receiver", "0", "--relay-wait", "--json"];
    let out = cp(
        cdir.path(),
        &receiver,
        &relay,
        &[&args[..], &[src.to_str().unwrap(), "127.0.0.1:"]].concat(),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // With --json the warning is an event on stdout.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("relay near left out: its round trip from the server is"), "{stdout}");
    assert!(stdout.contains("(--relay-max-rtt-receiver 0)"), "{stdout}");
    all_direct(&stdout, &src, &receiver.root.join("data.bin"));
}

#[test]
fn bad_relay_input_fails_clearly() {
    let (rdir, ldir, cdir) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let receiver = serve(rdir.path(), None);
    let relay = serve(ldir.path(), Some((&ldir.path().join("s"), "1MiB")));
    let src = cdir.path().join("f.bin");
    random_file(&src, 1000, SEED);
    let cases: [(&[&str], &str); 6] = [
        (&["--relay", "far"], "no [relays.far] section"),
        (&["--relay", "near", "--relay-strategy", "random"], "use fcfs, cyclic or partitioned"),
        (&["--relay", "near", "--relay-block", "1KiB"], "between"),
        (&["--relay", "near", "-r"], "one source per copy"),
        (&["--relay", "near", "--relay-copies", "2"], "at least two relays"),
        (
            &["--relay", "near", "--relay-direct", "off", "--relay-max-rtt-receiver", "0"],
            "no relay is left",
        ),
    ];
    for (flags, expected) in cases {
        let mut args = flags.to_vec();
        // With -r: two sources (a file and a tree), which one relayed copy does not take.
        if flags.contains(&"-r") {
            args.push(cdir.path().to_str().unwrap());
        }
        args.extend([src.to_str().unwrap(), "127.0.0.1:"]);
        let out = cp(cdir.path(), &receiver, &relay, &args);
        assert_ne!(code(&out), 0, "{flags:?}");
        assert!(stderr(&out).contains(expected), "{flags:?}: {}", stderr(&out));
    }
    let bad = Command::new(BIN)
        .args([
            "serve",
            "--root",
            ".",
            "--tokens",
            "/dev/null",
            "--spool",
            "x",
            "--spool-max",
            "lots",
        ])
        .output()
        .unwrap();
    assert_ne!(code(&bad), 0);
    assert!(stderr(&bad).contains("--spool-max"), "{}", stderr(&bad));
}

#[test]
fn a_tree_through_a_relay_needs_r_and_arrives_whole() {
    println!("seed {SEED}");
    let World { receiver, relay, spool, cdir, _dirs } = World::new();
    let tree = cdir.path().join("tree");
    for i in 0..40u64 {
        let dir = tree.join(format!("d{}", i % 4));
        std::fs::create_dir_all(&dir).unwrap();
        random_file(&dir.join(format!("f{i}")), i * 997, SEED + i);
    }
    random_file(&tree.join("big.bin"), 2_500_000, SEED);
    let args = ["--relay", "near", "--relay-block", "256KiB", "--relay-wait", "--json"];
    let out = cp(
        cdir.path(),
        &receiver,
        &relay,
        &[&args[..], &[tree.to_str().unwrap(), "127.0.0.1:"]].concat(),
    );
    assert_eq!(code(&out), 2, "a directory needs -r: {}", stderr(&out));
    assert!(stderr(&out).contains("-r"), "{}", stderr(&out));
    let out = cp(
        cdir.path(),
        &receiver,
        &relay,
        &[&["-r"], &args[..], &[tree.to_str().unwrap(), "127.0.0.1:"]].concat(),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = json_summary(&stdout);
    assert_eq!(summary["files"], 41, "{summary}");
    assert!(summary["total_seconds"].as_f64().is_some(), "it waited: {summary}");
    assert!(same_file(&tree.join("big.bin"), &receiver.root.join("tree/big.bin")));
    for i in 0..40u64 {
        let rel = format!("d{}/f{i}", i % 4);
        assert!(same_file(&tree.join(&rel), &receiver.root.join("tree").join(&rel)), "{rel}");
    }
    collected_all(&spool);
}

/// A server in `dirs[0]` whose config file names a relay in `dirs[1]` (its spool of
/// `spool_max`) as `[relays.near]`; and the relay's spool.
fn relaying_server(dirs: &[tempfile::TempDir; 2], spool_max: &str) -> (Proc, Proc, PathBuf) {
    let spool = dirs[1].path().join("spool");
    let relay = serve(dirs[1].path(), Some((&spool, spool_max)));
    // The server's own config file names the relay, and the file its token there is in.
    let server_config = dirs[0].path().join("server.toml");
    let token_file = dirs[0].path().join("relay.token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&token_file, owner_only).unwrap();
    std::fs::write(
        &server_config,
        format!(
            "[relays.near]\naddress = \"127.0.0.1\"\nport = {}\nfingerprint = \"{}\"\n\
             token_file = \"{}\"\n",
            relay.port,
            relay.fingerprint,
            token_file.display()
        ),
    )
    .unwrap();
    let server = serve_with(dirs[0].path(), None, &[("SLUICE_SERVER_CONFIG", &server_config)]);
    (server, relay, spool)
}

#[test]
fn an_interrupted_relayed_download_goes_on_from_what_arrived() {
    println!("seed {SEED}");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (server, relay, spool) = relaying_server(&dirs, "1GiB");
    let cdir = tempfile::tempdir().unwrap();
    let source = server.root.join("big.bin");
    random_file(&source, 256 << 20, SEED);
    let got = cdir.path().join("got.bin");
    let args = ["--relay", "near", "--relay-block", "1MiB", "--json", "127.0.0.1:big.bin"];
    let args = [&args[..], &[got.to_str().unwrap()]].concat();
    // Interrupted (SIGINT, as Ctrl-C) once a block is in its part file.
    let child = cp_command(cdir.path(), &server, &relay, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let written = |part: &Path| {
        let Ok(bytes) = std::fs::read(part) else { return false };
        bytes.chunks(1 << 20).any(|block| block[..64].iter().any(|b| *b != 0))
    };
    let mut part = None;
    for _ in 0..2000 {
        part = parts(cdir.path()).into_iter().find(|p| written(p));
        if part.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(part.is_some(), "a block arrived");
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    println!("interrupted: exit {}: {said}", code(&out));
    assert_ne!(code(&out), 0, "{said}");
    assert!(said.contains("stopped"), "{said}");
    assert!(!got.exists(), "nothing unverified in place");
    assert_eq!(parts(cdir.path()).len(), 1, "the part file is kept");
    let records = cdir.path().join(".local/share/sluice/relayed-downloads");
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 1, "with its record");

    // The same command again: it goes on from what arrived.
    let out = cp_command(cdir.path(), &server, &relay, &args).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let summary = json_summary(&String::from_utf8_lossy(&out.stdout));
    println!("{summary}");
    let resumed = summary["resumed_blocks"].as_u64().unwrap();
    assert!(resumed >= 1, "{summary}");
    let placed = summary["placed"].as_array().unwrap();
    let moved: u64 = placed.iter().map(|p| p["blocks"].as_u64().unwrap()).sum();
    assert_eq!(moved + resumed, 256, "only what was missing moved: {summary}");
    assert!(same_file(&source, &got));
    assert!(parts(cdir.path()).is_empty(), "no part file is left");
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0, "nor its record");
    collected_all(&spool);
}

/// A relayed download's part files in `dir`.
fn parts(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path());
    entries.filter(|p| p.to_string_lossy().ends_with(".relayed")).collect()
}

#[test]
fn a_download_through_the_server_s_relay_arrives_and_a_relay_it_lacks_is_refused() {
    println!("seed {SEED}");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (server, relay, spool) = relaying_server(&dirs, "64MiB");
    let cdir = tempfile::tempdir().unwrap();
    random_file(&server.root.join("data.bin"), 3_000_000, SEED);
    let got = cdir.path().join("got.bin");
    let args = ["--relay", "near", "--relay-block", "256KiB", "--json", "127.0.0.1:data.bin"];
    let out = cp(cdir.path(), &server, &relay, &[&args[..], &[got.to_str().unwrap()]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = json_summary(&stdout);
    assert_eq!(
        (summary["relayed"].clone(), summary["direction"].clone()),
        (true.into(), "download".into())
    );
    assert_eq!(summary["bytes"], 3_000_000);
    // The relay's share, then this end's own (it is in the striping by default).
    let placed = summary["placed"].as_array().unwrap();
    let names: Vec<&str> = placed.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["near", "direct"], "{summary}");
    let sum = |field: &str| placed.iter().map(|p| p[field].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("blocks"), 12, "{summary}");
    assert_eq!(sum("bytes"), 3_000_000, "{summary}");
    let (send, total) =
        (summary["send_seconds"].as_f64().unwrap(), summary["total_seconds"].as_f64().unwrap());
    assert!(0.0 < send && send <= total, "{summary}");
    assert!(same_file(&server.root.join("data.bin"), &got));
    collected_all(&spool);

    // The words, through the relay alone, and a relay the server does not have.
    let again = cdir.path().join("again.bin");
    let args = ["--relay", "near", "--relay-direct", "off", "127.0.0.1:data.bin"];
    let out = cp(cdir.path(), &server, &relay, &[&args[..], &[again.to_str().unwrap()]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(
        said.contains("received 3000000 bytes through the server's relays (1 block: near 1)"),
        "{said}"
    );
    let out = cp(
        cdir.path(),
        &server,
        &relay,
        &["--relay", "far", "127.0.0.1:data.bin", cdir.path().join("no.bin").to_str().unwrap()],
    );
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("no relay \"far\" (it has: near)"), "{}", stderr(&out));
    assert!(!cdir.path().join("no.bin").exists());
}

#[test]
fn a_dry_run_through_a_relay_plans_as_a_copy_and_moves_nothing() {
    println!("seed {SEED}");
    let World { receiver, relay, spool, cdir, _dirs } = World::new();
    let src = cdir.path().join("data.bin");
    random_file(&src, 1_000_000, SEED);
    std::fs::write(receiver.root.join("there.bin"), b"old").unwrap();
    let there = cdir.path().join("there.bin");
    random_file(&there, 1_000, SEED);
    let args = ["--relay", "near", "--dry-run", "--overwrite", "always"];
    let sources = [src.to_str().unwrap(), there.to_str().unwrap(), "127.0.0.1:"];
    // One source per relayed copy, but a dry run plans as a copy: both are listed.
    let out = cp(cdir.path(), &receiver, &relay, &[&args[..], &sources[..]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("data.bin") && stdout.contains("there.bin"), "{stdout}");
    assert!(stderr(&out).contains("dry run"), "{}", stderr(&out));
    assert!(!receiver.root.join("data.bin").exists(), "nothing moved");
    assert_eq!(std::fs::read(receiver.root.join("there.bin")).unwrap(), b"old");
    let spooled = std::fs::read_dir(&spool).map(|d| d.flatten().count()).unwrap_or(0);
    assert!(spooled <= 1, "no block at the relay (only its tmp directory)");
    // A bad relay flag is still refused.
    let out = cp(
        cdir.path(),
        &receiver,
        &relay,
        &[
            "--relay",
            "near",
            "--dry-run",
            "--relay-strategy",
            "fastest",
            src.to_str().unwrap(),
            "127.0.0.1:",
        ],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
}
